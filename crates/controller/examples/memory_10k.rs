//! Resident memory of the controller with 10,000 Ingresses cached.
//!
//! `cargo run --release -p hairpin-controller --example memory_10k`
//!
//! Loads 10,000 realistic Ingresses (TLS, paths, annotations, managedFields) into the in-process
//! fake API server, reads VmRSS, runs the controller until its caches are synced and the plan
//! is written, and reads VmRSS again. The fake's own copy of the objects is in the first
//! figure, so the difference is the controller's share (caches, snapshot, plan, client).

use std::time::{Duration, Instant};

use hairpin_controller::ControllerConfig;
use hairpin_fake_apiserver::{FakeApiServer, fixtures, object};
use hairpin_planner::PlannerConfig;
use serde_json::json;

#[path = "../tests/support/controller.rs"]
#[allow(dead_code, unreachable_pub)]
mod controller_support;

const INGRESSES: usize = 10_000;

fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line")
}

fn ingress(i: usize) -> serde_json::Value {
    // 10,000 Ingresses, 1,000 distinct hostnames (several Ingresses per host, as path-split
    // apps do): the Corefile block for 10,000 distinct hosts would exceed the 1 MiB ConfigMap
    // limit, which the planner reports instead of writing.
    let host = format!("app-{}.tenant-{}.example.com", i % 1000, i % 500);
    object(
        "networking.k8s.io/v1",
        "Ingress",
        Some(&format!("tenant-{}", i % 500)),
        &format!("app-{i}"),
        json!({
            "metadata": {
                "labels": {"app.kubernetes.io/name": format!("app-{i}"), "app.kubernetes.io/instance": "prod"},
                "annotations": {
                    "cert-manager.io/cluster-issuer": "letsencrypt",
                    "nginx.ingress.kubernetes.io/proxy-body-size": "16m",
                    "kubectl.kubernetes.io/last-applied-configuration": "x".repeat(600)
                },
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "networking.k8s.io/v1",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:rules": {}, "f:tls": {}}}}]
            },
            "spec": {
                "ingressClassName": "nginx",
                "tls": [{"hosts": [host.clone()], "secretName": format!("app-{i}-tls")}],
                "rules": [{"host": host, "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": format!("app-{i}"), "port": {"number": 80}}}},
                    {"path": "/api", "pathType": "Prefix", "backend": {"service": {"name": format!("app-{i}-api"), "port": {"number": 8080}}}}
                ]}}]
            },
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
        }),
    )
}

/// True when the CoreDNS ConfigMap exists and its Corefile contains `needle`.
fn corefile_contains(fake: &FakeApiServer, needle: &str) -> bool {
    fake.get("v1", "ConfigMap", Some("kube-system"), "coredns")
        .is_some_and(|cm| {
            cm["data"]["Corefile"]
                .as_str()
                .unwrap_or("")
                .contains(needle)
        })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("HAIRPIN_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let fake = FakeApiServer::start().await;
    fake.create_namespace("hairpin");
    fake.apply(fixtures::proxy_load_balancer(
        "load-balancer.hetzner.cloud/uses-proxyprotocol",
        "203.0.113.10",
        json!([{"name": "https", "port": 443, "protocol": "TCP"}]),
    ));
    fake.apply(fixtures::coredns(
        ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n    }\n    forward . /etc/resolv.conf\n    reload\n}\n",
    ));
    fake.apply_many((0..INGRESSES).map(ingress));
    let before = vm_rss_kib();

    let mut config = ControllerConfig::new(PlannerConfig::default(), "memory-probe");
    config.lease = None;
    let started = Instant::now();
    let running = controller_support::start(&fake, config);
    let written = fake
        .wait_until(Duration::from_secs(120), |f| {
            corefile_contains(f, "# BEGIN hairpin")
        })
        .await;
    let Some(written) = written else {
        let text = running.metrics_text();
        let corefile = fake
            .get("v1", "ConfigMap", Some("kube-system"), "coredns")
            .unwrap()["data"]["Corefile"]
            .clone();
        eprintln!(
            "the plan was not written in time\n{text}\nCorefile:\n{}",
            corefile
                .as_str()
                .unwrap_or_default()
                .chars()
                .take(600)
                .collect::<String>()
        );
        std::process::exit(1);
    };
    let synced_and_written = written - started;
    // A few more changes at this scale: change-to-write latency with 10,000 Ingresses cached.
    let mut latencies = Vec::new();
    for i in 0..5 {
        let mut extra = ingress(INGRESSES + i);
        let host = format!("new-{i}.example.com");
        extra["spec"]["rules"][0]["host"] = host.clone().into();
        let changed = Instant::now();
        fake.apply(extra);
        let seen = fake
            .wait_until(Duration::from_secs(30), |f| {
                corefile_contains(f, &format!("new-{i}"))
            })
            .await
            .expect("the change was written");
        latencies.push(seen - changed);
    }
    latencies.sort();
    let after = vm_rss_kib();
    println!("ingresses cached: {INGRESSES}");
    println!("first sync + plan written: {synced_and_written:?}");
    println!("reconciles: {}", running.metrics.reconciles.get());
    println!(
        "change-to-write latency at this scale (debounce 150 ms): min {:?}, median {:?}, max {:?}",
        latencies[0], latencies[2], latencies[4]
    );
    println!(
        "VmRSS with the fake API server loaded: {} MiB",
        before / 1024
    );
    println!("VmRSS with the controller running:    {} MiB", after / 1024);
    println!(
        "controller share (difference):        {} MiB",
        after.saturating_sub(before) / 1024
    );
    running.stop().await;
}
