//! The node agent fed by the cluster (the fake API server, through a real `kube::Client`): it
//! writes the hosts block the controller published in `hairpin/hairpin-hosts`, both families,
//! follows its changes, keeps the last good block when a bad one is published, writes nothing
//! while the ConfigMap does not exist, and asks the API server for that one object only.

use std::sync::Arc;
use std::time::Duration;

use hairpin_fake_apiserver::{FakeApiServer, object};
use hairpin_node_agent::{Agent, AgentOptions, ConfigMapSource, EntrySource, HostsFile};
use hairpin_runtime::{Readiness, Shutdown};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::sync::Notify;

const ORIGINAL: &str = "127.0.0.1\tlocalhost\n# the node's own\n10.0.0.5 node-1\n";

fn hosts_cm(value: &str) -> serde_json::Value {
    object(
        "v1",
        "ConfigMap",
        Some("hairpin"),
        "hairpin-hosts",
        json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": "hairpin"}},
               "data": {"hosts.json": value}}),
    )
}

/// The agent's sync passes so far, all results (`hairpin_node_agent_syncs_total`).
fn syncs(registry: &Registry) -> u64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines()
        .filter(|l| l.starts_with("hairpin_node_agent_syncs_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn the_agent_writes_the_published_block_and_only_watches_that_configmap() {
    let fake = FakeApiServer::start().await;
    fake.create_namespace("hairpin");
    // Another ConfigMap beside it, and the kind of objects the agent used to watch: none of
    // them is asked for.
    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("hairpin"),
        "hairpin-routes",
        json!({"data": {"routes.json": "[]"}}),
    ));
    fake.apply(object(
        "networking.k8s.io/v1",
        "Ingress",
        Some("shop"),
        "shop",
        json!({"spec": {"rules": [{"host": "shop.example.com"}]}}),
    ));

    let shutdown = Shutdown::new();
    let changed = Arc::new(Notify::new());
    let source = ConfigMapSource::start(
        fake.client(),
        "hairpin",
        "hairpin-hosts",
        "hosts.json",
        changed.clone(),
        &shutdown,
    );
    // Absent: no entries, and a message that says why.
    wait_for("the first read", || {
        source
            .entries()
            .is_err_and(|err| err.to_string().contains("does not exist yet"))
    })
    .await;
    let err = source.entries().unwrap_err().to_string();
    assert!(
        err.contains("hairpin/hairpin-hosts") && err.contains("no hosts block is written"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, ORIGINAL).unwrap();
    let agent = Agent::new(
        HostsFile::new(hosts.clone()),
        source.clone(),
        AgentOptions {
            interval: Duration::from_secs(3600),
            remove_on_exit: false,
        },
    )
    .wake_on(changed);
    let mut registry = Registry::default();
    agent.register_metrics(&mut registry);
    let readiness = Readiness::new();
    let ready = readiness.condition("hosts file in sync");
    let read = || std::fs::read_to_string(&hosts).unwrap();
    let run = agent.run(&shutdown, &ready);
    let check = async {
        // Nothing is written while the ConfigMap is absent, and the agent is not ready: once
        // its first pass is done (counted).
        wait_for("the first pass", || syncs(&registry) >= 1).await;
        assert_eq!(read(), ORIGINAL);
        assert!(!readiness.is_ready());

        // Published, dual-stack: both families land in the block.
        fake.apply(hosts_cm(
            r#"[{"ip":"10.96.0.50","hostnames":["shop.example.com"]},{"ip":"fd00:10:96::50","hostnames":["shop.example.com"]}]"#,
        ));
        wait_for("the block", || {
            read().contains("fd00:10:96::50\tshop.example.com")
        })
        .await;
        let text = read();
        assert!(text.starts_with(ORIGINAL), "{text}");
        assert!(text.contains("10.96.0.50\tshop.example.com\n"), "{text}");
        wait_for("ready", || readiness.is_ready()).await;

        // A change is followed.
        fake.apply(hosts_cm(
            r#"[{"ip":"10.96.0.51","hostnames":["api.example.com","shop.example.com"]}]"#,
        ));
        wait_for("the change", || {
            read().contains("10.96.0.51\tapi.example.com shop.example.com")
        })
        .await;
        assert!(!read().contains("fd00:10:96::50"), "{}", read());

        // A malformed value: the last good block stays, the agent stays ready.
        let passes = syncs(&registry);
        fake.apply(hosts_cm(
            r#"[{"ip":"not an address","hostnames":["x.example.com"]}]"#,
        ));
        // The watch event woke the agent, and it made a pass with the malformed value.
        wait_for("a pass after the malformed value", || {
            syncs(&registry) > passes
        })
        .await;
        assert!(read().contains("10.96.0.51\tapi.example.com shop.example.com"));
        assert_eq!(
            source.entries().unwrap()[0].ip,
            "10.96.0.51".parse::<std::net::IpAddr>().unwrap()
        );
        assert!(readiness.is_ready());

        // Deleted (uninstall deletes it with the hairpin Services): the block goes, the rest
        // of the file is as it was, byte for byte.
        fake.delete("v1", "ConfigMap", Some("hairpin"), "hairpin-hosts");
        wait_for("the block to go", || read() == ORIGINAL).await;
        shutdown.trigger();
    };
    let (result, ()) = tokio::join!(run, check);
    result.unwrap();

    // One object asked for, by name: every request is a list or watch of hairpin/hairpin-hosts
    // with its metadata.name field selector.
    let requests = fake.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!(r.method, "GET", "{}", r.uri);
        assert!(
            r.uri.starts_with("/api/v1/namespaces/hairpin/configmaps?")
                && r.uri
                    .contains("fieldSelector=metadata.name%3Dhairpin-hosts"),
            "{}",
            r.uri
        );
    }
}

#[tokio::test]
async fn a_malformed_first_value_writes_nothing_and_says_why() {
    let fake = FakeApiServer::start().await;
    fake.apply(hosts_cm("{ not: [a list"));
    let shutdown = Shutdown::new();
    let source = ConfigMapSource::start(
        fake.client(),
        "hairpin",
        "hairpin-hosts",
        "hosts.json",
        Arc::new(Notify::new()),
        &shutdown,
    );
    wait_for("the first read", || {
        source
            .entries()
            .is_err_and(|err| !err.to_string().contains("waiting"))
    })
    .await;
    let err = source.entries().unwrap_err().to_string();
    assert!(
        err.contains("malformed") && err.contains("hairpin/hairpin-hosts"),
        "{err}"
    );
    // A ConfigMap without the key is malformed too, not an empty block.
    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("hairpin"),
        "hairpin-hosts",
        json!({"data": {"other": "x"}}),
    ));
    wait_for("the update", || {
        source
            .entries()
            .is_err_and(|err| err.to_string().contains("no key hosts.json"))
    })
    .await;
    // Then a good one.
    fake.apply(hosts_cm(
        r#"[{"ip":"10.96.0.50","hostnames":["shop.example.com"]}]"#,
    ));
    wait_for("the good value", || {
        source.entries().is_ok_and(|e| e.len() == 1)
    })
    .await;
    shutdown.trigger();
}
