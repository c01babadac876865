//! The Corefile `hairpin plan` writes for a list of hostnames on one PROXY load balancer whose
//! hairpin Service already has its ClusterIP (the steady state), for `bench/dns.py`.
//!
//! ```text
//! cargo run --release -p hairpin-planner --example dns_corefile -- COREFILE NAMES CLUSTER_IP
//! ```
//!
//! NAMES holds one hostname per line (`*.example.com` for a wildcard); each becomes one
//! Ingress host. The planned Corefile goes to stdout, the plan's warnings and errors to stderr.

use std::sync::Arc;

use hairpin_planner::{ClusterSnapshot, PlannerConfig, desired};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::Ingress;
use serde_json::json;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [corefile, names, cluster_ip] = args.as_slice() else {
        eprintln!("usage: dns_corefile COREFILE NAMES CLUSTER_IP");
        std::process::exit(2);
    };
    let corefile = std::fs::read_to_string(corefile).expect("read COREFILE");
    let names = std::fs::read_to_string(names).expect("read NAMES");
    let lb: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "ingress", "namespace": "ingress",
                      "annotations": { "load-balancer.hetzner.cloud/uses-proxyprotocol": "true" } },
        "spec": { "type": "LoadBalancer", "ports": [{ "name": "http", "port": 80 }, { "name": "https", "port": 443 }] },
        "status": { "loadBalancer": { "ingress": [{ "ip": "203.0.113.10" }] } }
    }))
    .expect("Service");
    let ingresses: Vec<Arc<Ingress>> = names
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(n, host)| {
            serde_json::from_value(json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": { "name": format!("app-{n}"), "namespace": "apps" },
                "spec": { "rules": [{ "host": host.trim() }] },
                "status": { "loadBalancer": { "ingress": [{ "ip": "203.0.113.10" }] } }
            }))
            .map(Arc::new)
            .expect("Ingress")
        })
        .collect();
    let coredns: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "coredns", "namespace": "kube-system", "resourceVersion": "1" },
        "data": { "Corefile": corefile }
    }))
    .expect("ConfigMap");
    let mut snapshot = ClusterSnapshot {
        services: vec![lb],
        ingresses,
        config_maps: vec![coredns],
        ..ClusterSnapshot::default()
    };
    let config = PlannerConfig::default();
    // First the plan that creates the hairpin Service, then the steady state where it exists
    // with its ClusterIP.
    let first = desired(&snapshot, &config);
    for lb in &first.load_balancers {
        let mut service = lb.service.clone();
        let spec = service.spec.get_or_insert_with(Default::default);
        spec.cluster_ip = Some(cluster_ip.clone());
        spec.cluster_ips = Some(vec![cluster_ip.clone()]);
        snapshot.services.push(service);
    }
    let plan = desired(&snapshot, &config);
    for w in &plan.warnings {
        eprintln!("warning: {w:?}");
    }
    for e in &plan.errors {
        eprintln!("error: {e:?}");
    }
    let text = plan
        .dns
        .as_ref()
        .and_then(|d| d.coredns())
        .map_or(corefile.clone(), |w| w.desired.clone());
    print!("{text}");
}
