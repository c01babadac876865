//! What one `hairpin node-agent` costs the API server and its node: the watches it opens and
//! its memory, measured on a real agent process against the fake API server holding a
//! cluster's worth of Ingresses and Services, and the hosts block the controller publishes for
//! them. The agent must watch that one ConfigMap and nothing else.
//!
//! `cargo test -p hairpin --test node_agent_footprint -- --ignored --nocapture`

mod support;

use std::process::{Child, Stdio};
use std::time::Duration;

use hairpin_fake_apiserver::{FakeApiServer, fixtures, object};
use serde_json::json;

const INGRESSES: usize = 5_000;

fn ingress(i: usize) -> serde_json::Value {
    object(
        "networking.k8s.io/v1",
        "Ingress",
        Some(&format!("team-{}", i % 50)),
        &format!("app-{i}"),
        json!({
            "metadata": {"annotations": {"kubectl.kubernetes.io/description": "x".repeat(200)}},
            "spec": {"rules": [{"host": format!("app-{i}.example.com")}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
        }),
    )
}

/// `VmHWM` and `VmRSS` of a process, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    (field("VmHWM:"), field("VmRSS:"))
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn watches_and_memory_of_one_agent() {
    let fake = FakeApiServer::start().await;
    fake.create_namespace("hairpin");
    fake.apply(fixtures::proxy_load_balancer(
        "load-balancer.hetzner.cloud/uses-proxyprotocol",
        "203.0.113.10",
        json!([{"name": "https", "port": 443, "protocol": "TCP"}]),
    ));
    fake.apply_many((0..INGRESSES).map(ingress));
    // What the controller publishes for them: every hostname at the hairpin Service's
    // ClusterIPs.
    let names: Vec<String> = (0..INGRESSES)
        .map(|i| format!("app-{i}.example.com"))
        .collect();
    let block = json!([
        {"ip": "10.96.0.50", "hostnames": names},
        {"ip": "fd00:10:96::50", "hostnames": names}
    ]);
    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("hairpin"),
        "hairpin-hosts",
        json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": "hairpin"}},
               "data": {"hosts.json": block.to_string()}}),
    ));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake.write_kubeconfig(dir.path());
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
    let agent = Killed(
        support::hairpin_command()
            .args([
                "node-agent",
                "--admin-addr",
                "127.0.0.1:0",
                "--interval",
                "1s",
            ])
            .arg("--hosts-file")
            .arg(&hosts)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Long enough for every watch to list and settle, and the block to be written.
    for _ in 0..100 {
        if std::fs::read_to_string(&hosts)
            .unwrap()
            .contains("app-4999.example.com")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let written = std::fs::read_to_string(&hosts).unwrap();
    assert!(
        written.contains("10.96.0.50\t") && written.contains("fd00:10:96::50\t"),
        "the published block, both families, is in the hosts file"
    );
    let (hwm, rss) = memory_kib(agent.0.id());
    let watches: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.uri.contains("watch=true"))
        .map(|r| r.uri.split('?').next().unwrap_or_default().to_owned())
        .collect();
    let lists = fake
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && !r.uri.contains("watch=true"))
        .count();
    println!(
        "node agent with {INGRESSES} Ingresses in the cluster: VmHWM {:.1} MiB, VmRSS {:.1} MiB; \
         {} watch requests ({} open now), {lists} other GETs; watched: {watches:?}",
        hwm as f64 / 1024.0,
        rss as f64 / 1024.0,
        watches.len(),
        fake.open_watches(),
    );
    // One watch, on the published block, by name; no list of anything else.
    assert_eq!(fake.open_watches(), 1);
    for r in fake.requests() {
        assert!(
            r.uri.starts_with("/api/v1/namespaces/hairpin/configmaps?")
                && r.uri
                    .contains("fieldSelector=metadata.name%3Dhairpin-hosts"),
            "the agent asked for {}",
            r.uri
        );
    }
}
