//! A large synthetic cluster, shared by `examples/scale.rs` and the size test.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use hairpin_planner::ClusterSnapshot;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::Ingress;
use serde_json::json;

const COREFILE: &str = ".:53 {\n    errors\n    health {\n       lameduck 5s\n    }\n    ready\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n       ttl 30\n    }\n    prometheus :9153\n    forward . /etc/resolv.conf {\n       max_concurrent 1000\n    }\n    cache 30\n    loop\n    reload\n    loadbalance\n}\n";

/// `ingresses` Ingresses, each with two hostnames (a rule host and a TLS-only `www.` host),
/// spread over three PROXY load balancers and 50 team domains.
pub fn snapshot(ingresses: usize) -> ClusterSnapshot {
    let lbs = ["203.0.113.10", "203.0.113.20", "203.0.113.30"];
    let services: Vec<Service> = lbs
        .iter()
        .enumerate()
        .map(|(i, ip)| {
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": { "name": format!("ingress-{i}"), "namespace": "ingress",
                              "annotations": { "load-balancer.hetzner.cloud/uses-proxyprotocol": "true" } },
                "spec": { "type": "LoadBalancer", "ports": [{ "name": "http", "port": 80 }, { "name": "https", "port": 443 }] },
                "status": { "loadBalancer": { "ingress": [{ "ip": ip }] } }
            }))
            .unwrap()
        })
        .collect();
    let ingresses: Vec<Arc<Ingress>> = (0..ingresses)
        .map(|n| {
            let host = format!("app-{n}.team-{}.example.com", n % 50);
            let www = format!("www.app-{n}.team-{}.example.com", n % 50);
            serde_json::from_value(json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": { "name": format!("app-{n}"), "namespace": format!("team-{}", n % 50) },
                "spec": { "rules": [{ "host": host }], "tls": [{ "hosts": [host, www], "secretName": "tls" }] },
                "status": { "loadBalancer": { "ingress": [{ "ip": lbs[n % lbs.len()] }] } }
            }))
            .map(Arc::new)
            .unwrap()
        })
        .collect();
    let coredns: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "coredns", "namespace": "kube-system", "resourceVersion": "1" },
        "data": { "Corefile": COREFILE }
    }))
    .unwrap();
    ClusterSnapshot {
        services,
        ingresses,
        config_maps: vec![coredns],
        ..ClusterSnapshot::default()
    }
}
