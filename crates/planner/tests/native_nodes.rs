//! The Nodes' gate of the native cure (issue 45, [`hairpin_planner::nodes`]): a node whose
//! data plane is known not to honour `ipMode` keeps the DNS cure for every node, named in the
//! plan; nothing is written for it, and a cure set before stays as its record says (make
//! before break); where nothing tells, the plan is as before.

mod support;

use hairpin_planner::native::{
    Cure, IpModeWas, NATIVE_KEY, NativeAction, NativeEntry, NativeProgress, NativeRecord,
    ProbeState,
};
use hairpin_planner::{ClusterSnapshot, CureMode, Plan, PlannerConfig, desired, render};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Service};
use serde_json::json;
use support::{KUBEADM_COREFILE, coredns, ingress, lb_service};

const LB_IP: &str = "203.0.113.10";

fn config(cure: CureMode) -> PlannerConfig {
    PlannerConfig {
        cure,
        ..PlannerConfig::default()
    }
}

/// A DigitalOcean PROXY load balancer with its Ingress, and `nodes` as `(name, kubelet)`.
fn cluster(nodes: &[(&str, &str)]) -> ClusterSnapshot {
    let mut svc: Service = lb_service(
        "ingress",
        "nginx",
        json!({ "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol": "true" }),
        json!([{ "ip": LB_IP, "ipMode": "VIP" }]),
    );
    svc.metadata.uid = Some("uid-1".into());
    ClusterSnapshot {
        services: vec![svc],
        ingresses: vec![ingress(
            "web",
            "shop",
            None,
            &["shop.example.com"],
            &[],
            Some(LB_IP),
        )],
        config_maps: vec![coredns(KUBEADM_COREFILE)],
        nodes: nodes
            .iter()
            .map(|(name, kubelet)| node(name, kubelet))
            .collect(),
        ..ClusterSnapshot::default()
    }
}

fn node(name: &str, kubelet: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"nodeInfo": {
            "kubeletVersion": kubelet, "kubeProxyVersion": "",
            "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
            "osImage": "", "containerRuntimeVersion": "", "operatingSystem": "linux",
            "architecture": "amd64"}}
    }))
    .unwrap()
}

/// hairpin's record with one entry in `state`, `Proxy` set on the LB IP.
fn record(state: ProbeState) -> ConfigMap {
    let mut record = NativeRecord::default();
    record.load_balancers.insert(
        "ingress/nginx".into(),
        NativeEntry {
            uid: "uid-1".into(),
            original: vec![IpModeWas {
                ip: LB_IP.into(),
                ip_mode: Some("VIP".into()),
            }],
            state,
            since: "2026-11-27T10:00:00Z".into(),
            reason: "203.0.113.10:80 answered".into(),
            data_plane: String::new(),
            failures: 0,
            server_version: String::new(),
            due: false,
            skipped: Vec::new(),
            put_back: String::new(),
        },
    );
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "hairpin-native", "namespace": "hairpin",
                      "labels": { "app.kubernetes.io/managed-by": "hairpin" } },
        "data": { NATIVE_KEY: record.to_json() }
    }))
    .unwrap()
}

fn dns_names(plan: &Plan) -> Vec<String> {
    plan.dns
        .as_ref()
        .map(|dns| dns.entries.iter().map(|e| e.hostname.clone()).collect())
        .unwrap_or_default()
}

#[test]
fn mixed_nodes_keep_the_dns_cure_name_the_node_and_write_nothing() {
    let snapshot = cluster(&[("node-a", "v1.31.14"), ("node-b", "v1.29.9")]);
    let plan = desired(&snapshot, &config(CureMode::Auto));
    let choice = &plan.cures[0];
    assert_eq!((choice.cure, choice.native), (Cure::Dns, None));
    assert_eq!(choice.nodes.len(), 1);
    assert_eq!(choice.nodes[0].node, "node-b");
    assert!(
        choice
            .reason
            .contains("node node-b (kubelet v1.29.9 is older than 1.30"),
        "{}",
        choice.reason
    );
    assert!(plan.native_actions.is_empty(), "{:?}", plan.native_actions);
    assert_eq!(dns_names(&plan), ["shop.example.com"]);
    // `hairpin plan` names the node, in text and in JSON.
    let text = render::text(&plan);
    assert!(text.contains("node node-b"), "{text}");
    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(json["cures"][0]["nodes"][0]["node"], "node-b", "{json}");
}

#[test]
fn every_node_at_1_30_or_later_tries_native_as_before() {
    let snapshot = cluster(&[("node-a", "v1.31.14"), ("node-b", "v1.30.2")]);
    let plan = desired(&snapshot, &config(CureMode::Auto));
    let choice = &plan.cures[0];
    assert_eq!(choice.native, Some(NativeProgress::ToProve));
    assert!(choice.nodes.is_empty());
    assert!(matches!(
        plan.native_actions.as_slice(),
        [NativeAction::SetProxy { .. }]
    ));
}

#[test]
fn a_node_added_on_an_older_version_brings_the_dns_rules_back_and_puts_nothing_back_yet() {
    let mut snapshot = cluster(&[("node-a", "v1.31.14")]);
    snapshot.config_maps.push(record(ProbeState::Proven));
    let proven = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(proven.cures[0].cure, Cure::Native);
    assert!(dns_names(&proven).is_empty());

    snapshot.nodes.push(node("node-c", "v1.28.15"));
    let plan = desired(&snapshot, &config(CureMode::Auto));
    let choice = &plan.cures[0];
    assert_eq!(choice.cure, Cure::Dns);
    assert_eq!(choice.native, Some(NativeProgress::Proven));
    assert!(choice.reason.contains("node-c"), "{}", choice.reason);
    assert_eq!(dns_names(&plan), ["shop.example.com"]);
    // Make before break: nothing but the DNS rules changes (no put-back in this plan).
    assert!(plan.native_actions.is_empty(), "{:?}", plan.native_actions);
}

#[test]
fn forced_native_is_warned_not_barred() {
    let snapshot = cluster(&[("node-a", "v1.31.14"), ("node-b", "v1.29.9")]);
    let plan = desired(&snapshot, &config(CureMode::Native));
    assert_eq!(plan.cures[0].cure, Cure::Native);
    assert!(plan.cures[0].nodes.is_empty());
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.message.contains("not honoured on every node")
                && w.message.contains("node-b")),
        "{:?}",
        plan.warnings
    );
}

#[test]
fn a_node_that_reports_no_version_leaves_the_probe_to_decide() {
    let mut snapshot = cluster(&[("node-a", "v1.31.14")]);
    snapshot
        .nodes
        .push(serde_json::from_value(json!({"metadata": {"name": "node-x"}})).unwrap());
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures[0].native, Some(NativeProgress::ToProve));
}
