//! Builders for test objects, written as JSON the way the API server returns them.
#![allow(dead_code, unreachable_pub, unused_imports, unused_macros)]

pub mod corefile;

use hairpin_planner::ClusterSnapshot;
use hairpin_planner::load::load_yaml;
use k8s_openapi::api::core::v1::Service;
use serde_json::{Value, json};

/// A `type: LoadBalancer` Service with ports 80 and 443 and the given status entries.
pub fn lb_service(ns: &str, name: &str, annotations: Value, status: Value) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": ns, "annotations": annotations,
                      "labels": { "app.kubernetes.io/name": name } },
        "spec": {
            "type": "LoadBalancer",
            "selector": { "app.kubernetes.io/name": name },
            "ports": [
                { "name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080 },
                { "name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443 }
            ]
        },
        "status": { "loadBalancer": { "ingress": status } }
    }))
    .unwrap()
}

/// An LB at `ip` with PROXY v1 through our annotation.
pub fn proxied_lb(ns: &str, name: &str, ip: &str) -> Service {
    lb_service(
        ns,
        name,
        json!({ "hairpin.io/proxy-protocol": "v1" }),
        json!([{ "ip": ip }]),
    )
}

/// A snapshot from YAML documents.
pub fn snapshot_from_yaml(yaml: &str) -> ClusterSnapshot {
    let mut s = ClusterSnapshot::default();
    load_yaml(&mut s, "test.yaml", yaml).unwrap();
    s
}

pub fn ingress(
    ns: &str,
    name: &str,
    class: Option<&str>,
    hosts: &[&str],
    tls_hosts: &[&str],
    status_ip: Option<&str>,
) -> std::sync::Arc<k8s_openapi::api::networking::v1::Ingress> {
    let rules: Vec<Value> = hosts.iter().map(|h| json!({ "host": h })).collect();
    let mut spec = json!({ "rules": rules, "tls": [{ "hosts": tls_hosts, "secretName": "tls" }] });
    if let Some(c) = class {
        spec["ingressClassName"] = json!(c);
    }
    let status = match status_ip {
        Some(ip) => json!({ "loadBalancer": { "ingress": [{ "ip": ip }] } }),
        None => json!({}),
    };
    serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": { "name": name, "namespace": ns },
        "spec": spec, "status": status
    }))
    .map(std::sync::Arc::new)
    .unwrap()
}

pub fn ingress_class(
    name: &str,
    controller: &str,
    default: bool,
) -> k8s_openapi::api::networking::v1::IngressClass {
    let annotations = if default {
        json!({ "ingressclass.kubernetes.io/is-default-class": "true" })
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": { "name": name, "annotations": annotations },
        "spec": { "controller": controller }
    }))
    .unwrap()
}

/// The CoreDNS ConfigMap holding the given Corefile.
pub fn coredns(corefile: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "coredns", "namespace": "kube-system", "resourceVersion": "100" },
        "data": { "Corefile": corefile }
    }))
    .unwrap()
}

pub fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/golden/corefiles/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

pub const KUBEADM_COREFILE: &str = ".:53 {\n    errors\n    health {\n       lameduck 5s\n    }\n    ready\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n       ttl 30\n    }\n    prometheus :9153\n    forward . /etc/resolv.conf {\n       max_concurrent 1000\n    }\n    cache 30\n    loop\n    reload\n    loadbalance\n}\n";

/// The hostnames of the plan's hosts entries, in order.
pub fn hosts_names(plan: &hairpin_planner::Plan) -> Vec<&str> {
    plan.hosts
        .entries
        .iter()
        .map(|e| e.hostname.as_str())
        .collect()
}

/// The names the plan passes through under a redirected wildcard, in order.
pub fn passthrough_names(plan: &hairpin_planner::Plan) -> Vec<&str> {
    plan.verification
        .passthrough
        .iter()
        .map(|p| p.hostname.as_str())
        .collect()
}

/// The tenant's PROXY load balancer `tenant/proxy` at 192.0.2.5, as YAML (a `concat!` piece).
macro_rules! tenant_proxy_lb_yaml {
    () => {
        r#"apiVersion: v1
kind: Service
metadata: { name: proxy, namespace: tenant, annotations: { hairpin.io/proxy-protocol: v2 } }
spec:
  type: LoadBalancer
  ports: [{ name: https, port: 443 }]
status: { loadBalancer: { ingress: [{ ip: 192.0.2.5 }] } }
"#
    };
}
pub(crate) use tenant_proxy_lb_yaml;

/// team-a's load balancer `team-a/web` without the PROXY protocol at 198.51.100.9, as YAML.
macro_rules! team_a_web_lb_yaml {
    () => {
        r#"apiVersion: v1
kind: Service
metadata: { name: web, namespace: team-a }
spec:
  type: LoadBalancer
  ports: [{ name: https, port: 443 }]
status: { loadBalancer: { ingress: [{ ip: 198.51.100.9 }] } }
"#
    };
}
pub(crate) use team_a_web_lb_yaml;

/// The PROXY load balancer `infra/gw` at 192.0.2.5 and its Gateway `infra/public`, as YAML
/// ending in `listeners:` (the listeners follow).
macro_rules! infra_gateway_yaml {
    () => {
        r#"apiVersion: v1
kind: Service
metadata: { name: gw, namespace: infra, annotations: { hairpin.io/proxy-protocol: v2 } }
spec:
  type: LoadBalancer
  ports: [{ name: https, port: 443 }]
status: { loadBalancer: { ingress: [{ ip: 192.0.2.5 }] } }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: public, namespace: infra }
spec:
  gatewayClassName: example
  addresses: [{ type: IPAddress, value: 192.0.2.5 }]
  listeners:
"#
    };
}
pub(crate) use infra_gateway_yaml;
