//! Issue 36 over the fake API server: a load balancer whose address the nodes receive (MetalLB)
//! never gets `ipMode: Proxy`, under `--cure auto` or forced `--cure native`; its names get the
//! DNS cure, and an Event on the Service says why (`NativeCureNotTried`, or the Warning
//! `NativeCureRefused` naming the outage). A record of an earlier native cure of it is put
//! back. The address is on loopback (`127.0.0.43`), so nothing leaves this machine.

mod support;

use std::time::Duration;

use hairpin_fake_apiserver::FakeApiServer;
use hairpin_fake_apiserver::fixtures::{self, coredns};
use hairpin_planner::CureMode;
use serde_json::{Value, json};
use support::cluster::corefile;
use support::controller::{config, start};

const LB_IP: &str = "127.0.0.43";
const HOST: &str = "shop.example.com";
const COREFILE: &str = ".:53 {\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n";
const SVC: &str = "/api/v1/namespaces/ingress-nginx/services/ingress-nginx-controller";

/// A DigitalOcean-annotated PROXY load balancer whose address MetalLB allocated.
fn seed(fake: &FakeApiServer) {
    fake.install_hairpin_crd();
    fake.create_namespace("hairpin");
    let mut lb = fixtures::proxy_load_balancer(
        "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol",
        LB_IP,
        json!([{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80}]),
    );
    lb["metadata"]["annotations"]["metallb.io/ip-allocated-from-pool"] = json!("public");
    fake.apply(lb);
    fake.apply(fixtures::ingress("shop", "shop", &[HOST], LB_IP));
    fake.apply(coredns(COREFILE));
}

fn ip_mode(fake: &FakeApiServer) -> Value {
    fake.get(
        "v1",
        "Service",
        Some("ingress-nginx"),
        "ingress-nginx-controller",
    )
    .map(|s| s["status"]["loadBalancer"]["ingress"][0]["ipMode"].clone())
    .unwrap_or_default()
}

fn status_writes(fake: &FakeApiServer) -> usize {
    fake.requests()
        .iter()
        .filter(|r| matches!(r.method.as_str(), "PUT" | "PATCH"))
        .filter(|r| r.uri.contains(&format!("{SVC}/status")))
        .count()
}

fn events(fake: &FakeApiServer, reason: &str) -> Vec<Value> {
    fake.list("events.k8s.io/v1", "Event")
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

fn config_with(cure: CureMode) -> hairpin_controller::ControllerConfig {
    let mut cfg = config("pod-a", false);
    cfg.planner.cure = cure;
    cfg.native.deadline = Duration::from_millis(600);
    cfg.native.interval = Duration::from_millis(100);
    cfg.native.timeout = Duration::from_millis(200);
    cfg
}

/// Waits for the Event `reason` on the load balancer Service; returns its note.
async fn event_note(fake: &FakeApiServer, reason: &str) -> String {
    fake.wait_until(Duration::from_secs(10), |f| !events(f, reason).is_empty())
        .await
        .unwrap_or_else(|| {
            panic!(
                "no {reason} Event: {:?}",
                fake.list("events.k8s.io/v1", "Event")
            )
        });
    events(fake, reason)[0]["note"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn auto_never_writes_ip_mode_on_a_metallb_address_and_says_why() {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    let running = start(&fake, config_with(CureMode::Auto));
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| corefile(f).contains(HOST))
            .await
            .is_some(),
        "the DNS cure is in place"
    );
    let note = event_note(&fake, "NativeCureNotTried").await;
    assert!(
        note.contains("native never tried")
            && note.contains(
                "delivery vip: MetalLB, annotation metallb.io/ip-allocated-from-pool=public"
            )
            && note.contains("cut off every client outside the cluster"),
        "{note}"
    );
    // The Hairpin status says it too.
    let status_of = |f: &FakeApiServer| {
        f.get(
            "hairpin.io/v1alpha1",
            "Hairpin",
            Some("ingress-nginx"),
            "ingress-nginx-controller",
        )
        .map(|h| h["status"].clone())
        .unwrap_or_default()
    };
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| status_of(f)["delivery"]
            == "vip")
            .await
            .is_some(),
        "{}",
        status_of(&fake)
    );
    let status = status_of(&fake);
    assert_eq!(status["cure"], "dns");
    assert!(
        status["cureReason"]
            .as_str()
            .is_some_and(|r| r.starts_with("native never tried")),
        "{status}"
    );
    let event = &events(&fake, "NativeCureNotTried")[0];
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["regarding"]["name"], "ingress-nginx-controller");
    // Its reconciles are done (the Event is published after the writes): no status write, ever.
    assert_eq!(status_writes(&fake), 0);
    assert_eq!(ip_mode(&fake), "VIP");
    running.stop().await;
    assert_eq!(status_writes(&fake), 0);
}

#[tokio::test]
async fn forced_native_on_a_metallb_address_is_refused_and_an_earlier_cure_put_back() {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    // An earlier hairpin set ipMode: Proxy on this address and recorded it.
    let mut svc = fake
        .get(
            "v1",
            "Service",
            Some("ingress-nginx"),
            "ingress-nginx-controller",
        )
        .unwrap();
    svc["status"]["loadBalancer"]["ingress"][0]["ipMode"] = json!("Proxy");
    fake.apply(svc.clone());
    let entry = json!({
        "uid": svc["metadata"]["uid"], "original": [{"ip": LB_IP, "ipMode": "VIP"}],
        "state": "proven", "since": "2026-11-27T10:00:00Z", "reason": "port 80 answered"
    });
    fake.apply(hairpin_fake_apiserver::object(
        "v1",
        "ConfigMap",
        Some("hairpin"),
        "hairpin-native",
        json!({
            "metadata": {"labels": {"app.kubernetes.io/managed-by": "hairpin"},
                         "annotations": {"hairpin.io/created-by": "hairpin"}},
            "data": {"native.json": json!({"loadBalancers": {
                "ingress-nginx/ingress-nginx-controller": entry}}).to_string()}
        }),
    ));
    let running = start(&fake, config_with(CureMode::Native));
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| ip_mode(f) == "VIP"
            && corefile(f).contains(HOST))
            .await
            .is_some(),
        "ipMode {:?}; the status is put back and the names get DNS rules",
        ip_mode(&fake)
    );
    let note = event_note(&fake, "NativeCureRefused").await;
    assert!(
        note.starts_with(
            "native refused: the nodes receive this load balancer's address as destination"
        ) && note.contains("kube-proxy drops every rule for that IP"),
        "{note}"
    );
    assert_eq!(events(&fake, "NativeCureRefused")[0]["type"], "Warning");
    assert!(events(&fake, "IpModeProxySet").is_empty());
    running.stop().await;
    assert_eq!(ip_mode(&fake), "VIP");
}
