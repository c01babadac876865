//! Issue 38: the doctor carries the receiver's verdict per port. Traefik with `proxyProtocol`
//! on `websecure` only, behind a DigitalOcean load balancer that sends PROXY on every port:
//! port 80 is BROKEN for everyone (the receiver reads the header as its request), port 443 is
//! not (the entry point accepts it), read through a real `kube::Client` over the fake API server.

use std::time::Duration;

use hairpin_doctor::cluster::{self, ClusterOptions};
use hairpin_fake_apiserver::FakeApiServer;
use hairpin_planner::PlannerConfig;

const IP: &str = "203.0.113.50";

#[tokio::test]
async fn a_mismatch_on_one_port_is_that_ports_only() {
    let fake = FakeApiServer::start().await;
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../planner/tests/fixtures/receivers/traefik-websecure-only.yaml"
    ))
    .unwrap()
    .replacen(
        "kind: Service\nmetadata:\n",
        "kind: Service\nmetadata:\n  annotations:\n    service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol: \"true\"\n",
        1,
    );
    for doc in text.split("\n---") {
        let object: serde_json::Value = serde_saphyr::from_str(doc).unwrap();
        if !object.is_null() {
            fake.apply(object);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let options = ClusterOptions {
        kubeconfig: Some(fake.write_kubeconfig(dir.path())),
        context: None,
        timeout: Duration::from_secs(2),
        planner: PlannerConfig::default(),
    };
    let client = cluster::client(&options).await.unwrap();
    let read = cluster::read(&client, &options).await.unwrap();
    let plan = cluster::plan(&read, &options.planner);
    let facts = |port| {
        let f = cluster::facts_for_port(
            &read,
            &plan,
            &options.planner,
            "shop.example.com",
            &[IP.parse().unwrap()],
            Some(port),
        );
        f.load_balancer.expect("the load balancer is found")
    };
    let web = facts(80);
    let mismatch = web.mismatch.as_deref().expect("port 80 disagrees");
    assert!(mismatch.contains("on port 80:"), "{mismatch}");
    assert!(
        web.receiver
            .as_deref()
            .is_some_and(|r| r.contains("PROXY off by port 80 (web)")),
        "{:?}",
        web.receiver
    );
    let websecure = facts(443);
    assert_eq!(websecure.mismatch, None, "{websecure:?}");
    assert!(
        websecure
            .receiver
            .as_deref()
            .is_some_and(|r| r.contains("PROXY optional by port 443 (websecure)")),
        "{:?}",
        websecure.receiver
    );
}
