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
            probe: Default::default(),
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

// The node agents' proofs (issue 45 item 1, [`hairpin_planner::node_probes`]): where they
// report, a cure proven by the controller counts as native only when every Node's agent
// proved this attempt.

use hairpin_planner::node_probes::{NodeProbe, NodeProbes, NodeReport, NodeResult};

/// The record's attempt (`since`: the entry has no `attempt` of its own).
const ATTEMPT: &str = "2026-11-27T10:00:00Z";

fn report(node: &str, fresh: bool, result: Option<NodeResult>, attempt: &str) -> NodeReport {
    let mut probes = NodeProbes::new();
    if let Some(result) = result {
        probes.insert(
            "ingress/nginx".into(),
            NodeProbe {
                uid: "uid-1".into(),
                attempt: attempt.into(),
                result,
                reason: if result == NodeResult::Failed {
                    "10.0.0.1:80: empty reply \u{1b}[31m".into()
                } else {
                    String::new()
                },
                at: String::new(),
            },
        );
    }
    NodeReport {
        node: node.into(),
        fresh,
        probes: Ok(probes),
    }
}

fn proven_with(reports: Vec<NodeReport>) -> Plan {
    let mut snapshot = cluster(&[("node-a", "v1.31.14"), ("node-b", "v1.31.14")]);
    snapshot.config_maps.push(record(ProbeState::Proven));
    snapshot.node_probes = Some(reports);
    desired(&snapshot, &config(CureMode::Auto))
}

#[test]
fn every_node_proving_this_attempt_makes_the_cure_native() {
    let plan = proven_with(vec![
        report("node-a", true, Some(NodeResult::Proven), ATTEMPT),
        report("node-b", true, Some(NodeResult::Proven), ATTEMPT),
    ]);
    assert_eq!(plan.cures[0].cure, Cure::Native, "{}", plan.cures[0].reason);
    assert!(plan.cures[0].nodes.is_empty());
    assert!(dns_names(&plan).is_empty());
}

#[test]
fn a_node_missing_stale_or_on_another_attempt_keeps_the_dns_cure_and_the_proxy() {
    for (reports, named) in [
        (
            vec![report("node-a", true, Some(NodeResult::Proven), ATTEMPT)],
            "no report from its node agent",
        ),
        (
            vec![
                report("node-a", true, Some(NodeResult::Proven), ATTEMPT),
                report("node-b", false, Some(NodeResult::Proven), ATTEMPT),
            ],
            "too old",
        ),
        (
            vec![
                report("node-a", true, Some(NodeResult::Proven), ATTEMPT),
                report(
                    "node-b",
                    true,
                    Some(NodeResult::Proven),
                    "2026-11-27T09:00:00Z",
                ),
            ],
            "not proven this attempt",
        ),
        (
            vec![
                report("node-a", true, Some(NodeResult::Proven), ATTEMPT),
                report("node-b", true, None, ATTEMPT),
            ],
            "not proven this attempt",
        ),
    ] {
        let plan = proven_with(reports);
        let choice = &plan.cures[0];
        assert_eq!(choice.cure, Cure::Dns, "{named}");
        assert_eq!(choice.nodes.len(), 1, "{named}: {:?}", choice.nodes);
        assert_eq!(choice.nodes[0].node, "node-b");
        assert!(choice.reason.contains(named), "{named}: {}", choice.reason);
        assert!(choice.reason.contains("node node-b"), "{}", choice.reason);
        assert_eq!(dns_names(&plan), ["shop.example.com"]);
        // `Proxy` stays (re-asserted), so that the missing agent can prove it; no put-back.
        assert!(
            plan.native_actions
                .iter()
                .all(|a| matches!(a, NativeAction::SetProxy { proven: true, .. })),
            "{named}: {:?}",
            plan.native_actions
        );
    }
}

#[test]
fn a_node_failing_names_it_with_what_it_saw_escaped_and_brings_dns_back() {
    let plan = proven_with(vec![
        report("node-a", true, Some(NodeResult::Proven), ATTEMPT),
        // A failure of this attempt counts however old the heartbeat.
        report("node-b", false, Some(NodeResult::Failed), ATTEMPT),
    ]);
    let choice = &plan.cures[0];
    assert_eq!(choice.cure, Cure::Dns);
    assert_eq!(choice.nodes[0].node, "node-b");
    assert!(
        choice.reason.contains("empty reply \\u{1b}[31m"),
        "{}",
        choice.reason
    );
    assert!(!choice.reason.contains('\u{1b}'));
    assert_eq!(dns_names(&plan), ["shop.example.com"]);
}

#[test]
fn a_node_added_after_the_agents_proved_it_brings_the_dns_rules_back() {
    let reports = vec![
        report("node-a", true, Some(NodeResult::Proven), ATTEMPT),
        report("node-b", true, Some(NodeResult::Proven), ATTEMPT),
    ];
    let mut snapshot = cluster(&[("node-a", "v1.31.14"), ("node-b", "v1.31.14")]);
    snapshot.config_maps.push(record(ProbeState::Proven));
    snapshot.node_probes = Some(reports);
    assert_eq!(
        desired(&snapshot, &config(CureMode::Auto)).cures[0].cure,
        Cure::Native
    );
    // node-c reports kubelet 1.31: the version gate cannot tell; no agent vouched for it.
    snapshot.nodes.push(node("node-c", "v1.31.14"));
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures[0].cure, Cure::Dns);
    assert_eq!(plan.cures[0].nodes[0].node, "node-c");
    assert_eq!(dns_names(&plan), ["shop.example.com"]);
}

#[test]
fn without_node_agents_the_controllers_proof_decides_as_before() {
    let mut snapshot = cluster(&[("node-a", "v1.31.14"), ("node-b", "v1.31.14")]);
    snapshot.config_maps.push(record(ProbeState::Proven));
    assert_eq!(snapshot.node_probes, None);
    assert_eq!(
        desired(&snapshot, &config(CureMode::Auto)).cures[0].cure,
        Cure::Native
    );
}

#[test]
fn an_unreadable_report_or_no_node_listed_is_vouched_for_by_nobody() {
    let mut broken = report("node-b", true, None, ATTEMPT);
    broken.probes = Err("expected value at line 1 column 1".into());
    let plan = proven_with(vec![
        report("node-a", true, Some(NodeResult::Proven), ATTEMPT),
        broken,
    ]);
    assert_eq!(plan.cures[0].cure, Cure::Dns);
    assert!(plan.cures[0].reason.contains("cannot be read"));

    let mut snapshot = cluster(&[]);
    snapshot.config_maps.push(record(ProbeState::Proven));
    snapshot.node_probes = Some(Vec::new());
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures[0].cure, Cure::Dns);
    assert!(plan.cures[0].reason.contains("not listed yet"));
}

#[test]
fn the_record_keeps_what_the_agents_need_and_old_records_still_parse() {
    use hairpin_planner::native::{ProbeSpec, ProbeTarget};
    let old = r#"{"loadBalancers":{"ingress/nginx":{"uid":"u","original":[],"state":"proven","since":"2026-11-27T10:00:00Z"}}}"#;
    let record: NativeRecord = serde_json::from_str(old).unwrap();
    let entry = &record.load_balancers["ingress/nginx"];
    assert_eq!(entry.probe, ProbeSpec::default());
    assert_eq!(entry.attempt(), "2026-11-27T10:00:00Z");

    let mut record = record;
    let entry = record.load_balancers.get_mut("ingress/nginx").unwrap();
    let addr = "203.0.113.10:80".parse().unwrap();
    entry.probe = ProbeSpec {
        attempt: "2026-11-27T09:00:00Z".into(),
        targets: vec![ProbeTarget {
            addr,
            tls: false,
            host: "shop.example.com".into(),
        }],
        receiver: [(addr, "HTTP/1.1 200 OK, Server: nginx".to_owned())].into(),
    };
    let json = record.to_json();
    assert!(
        json.contains("\"203.0.113.10:80\": \"HTTP/1.1 200 OK, Server: nginx\""),
        "{json}"
    );
    let back: NativeRecord = serde_json::from_str(&json).unwrap();
    assert_eq!(back, record);
    assert_eq!(
        back.load_balancers["ingress/nginx"].attempt(),
        "2026-11-27T09:00:00Z"
    );
}
