//! The node agent fed by the cluster (the fake API server, through a real `kube::Client`): a
//! planned hostname lands in the hosts file with its hairpin Service's ClusterIP, follows
//! changes, and leaves when its Ingress goes.

use std::sync::Arc;
use std::time::Duration;

use hairpin_fake_apiserver::FakeApiServer;
use hairpin_node_agent::{Agent, AgentOptions, EntrySource, HostsFile, KubeSource};
use hairpin_planner::{ClusterSnapshot, PlannerConfig};
use hairpin_runtime::{Readiness, Shutdown};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use serde_json::json;
use tokio::sync::Notify;

fn lb() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "ingress-nginx-controller", "namespace": "ingress-nginx",
                     "annotations": {"service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol": "true"}},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.10"}]}}
    })
}

fn ingress() -> serde_json::Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "shop", "namespace": "shop"},
        "spec": {"rules": [{"host": "shop.example.com"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.10"}]}}
    })
}

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..250 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn the_agent_follows_the_plan_from_the_cluster() {
    let fake = FakeApiServer::start().await;
    fake.apply_many([lb(), ingress()]);
    let config = PlannerConfig::default();
    // The hairpin Service's name is the planner's business: ask it.
    let snapshot = ClusterSnapshot {
        services: vec![serde_json::from_value::<Service>(lb()).unwrap()],
        ingresses: vec![serde_json::from_value::<Ingress>(ingress()).unwrap()],
        ..ClusterSnapshot::default()
    };
    let plan = hairpin_planner::desired(&snapshot, &config);
    let hairpin_service = plan.load_balancers[0].service_ref();

    let shutdown = Shutdown::new();
    let changed = Arc::new(Notify::new());
    let mut registry = prometheus_client::registry::Registry::default();
    let source = KubeSource::start(
        &fake.client(),
        config,
        changed.clone(),
        &mut registry,
        &shutdown,
    );
    let synced = || source.entries().is_ok();
    wait_for("the watches to sync", synced).await;
    // No hairpin Service yet: nothing to write (the hostname has no address to point at).
    assert!(source.entries().unwrap().is_empty());

    fake.apply(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": hairpin_service.name, "namespace": hairpin_service.namespace,
                     "labels": {"app.kubernetes.io/managed-by": "hairpin"}},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.50", "ports": [{"port": 80, "protocol": "TCP"}]}
    }));
    wait_for("the hostname to be planned", || {
        source.entries().is_ok_and(|entries| !entries.is_empty())
    })
    .await;
    let entries = source.entries().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0].ip,
        "10.96.0.50".parse::<std::net::IpAddr>().unwrap()
    );
    assert_eq!(entries[0].names, vec!["shop.example.com"]);

    // The agent itself, woken by watch events: the block appears, then goes with the Ingress.
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
    let agent = Agent::new(
        HostsFile::new(hosts.clone()),
        source,
        AgentOptions {
            interval: Duration::from_secs(3600),
            remove_on_exit: false,
        },
    )
    .wake_on(changed);
    let readiness = Readiness::new();
    let ready = readiness.condition("hosts file in sync");
    let read = || std::fs::read_to_string(&hosts).unwrap();
    let run = agent.run(&shutdown, &ready);
    let check = async {
        wait_for("the block", || {
            read().contains("10.96.0.50\tshop.example.com")
        })
        .await;
        fake.delete("networking.k8s.io/v1", "Ingress", Some("shop"), "shop");
        wait_for("the block to go", || read() == "127.0.0.1 localhost\n").await;
        shutdown.trigger();
    };
    let (result, ()) = tokio::join!(run, check);
    result.unwrap();
}
