//! The cluster objects several controller tests start from, over the fake API server.

use hairpin_fake_apiserver::{FakeApiServer, fixtures};
use serde_json::{Value, json};

/// The PROXY load balancer (Hetzner annotation) at 203.0.113.10 with ports 80 and 443,
/// selecting `app: ingress-nginx`.
pub fn lb_service() -> Value {
    let mut lb = fixtures::proxy_load_balancer(
        "load-balancer.hetzner.cloud/uses-proxyprotocol",
        "203.0.113.10",
        json!([
            {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80},
            {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 443}
        ]),
    );
    lb["spec"]["selector"] = json!({"app": "ingress-nginx"});
    lb
}

/// The same PROXY load balancer with port 80 only and no selector.
pub fn http_lb() -> Value {
    fixtures::proxy_load_balancer(
        "load-balancer.hetzner.cloud/uses-proxyprotocol",
        "203.0.113.10",
        json!([{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80}]),
    )
}

/// An Ingress for `host` on that load balancer.
pub fn ingress(namespace: &str, name: &str, host: &str) -> Value {
    fixtures::ingress(namespace, name, &[host], "203.0.113.10")
}

/// CoreDNS's Corefile as it is now.
pub fn corefile(fake: &FakeApiServer) -> String {
    fixtures::corefile(fake)
}
