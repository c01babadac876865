//! The cure of each load balancer (`crate::native`): native (`ipMode: Proxy`) where the probe
//! proved it, DNS until then and where not; the status writes the controller makes.

mod support;

use hairpin_planner::native::{
    Cure, IpModeWas, NATIVE_KEY, NativeAction, NativeEntry, NativeProgress, NativeRecord,
    ProbeState,
};
use hairpin_planner::{ClusterSnapshot, CureMode, ObjectRef, Plan, PlannerConfig, desired};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use serde_json::json;
use support::{KUBEADM_COREFILE, coredns, ingress, lb_service};

const LB_IP: &str = "203.0.113.10";

fn config(cure: CureMode) -> PlannerConfig {
    PlannerConfig {
        cure,
        ..PlannerConfig::default()
    }
}

/// A DigitalOcean PROXY load balancer (its controller never sets ipMode) with `status`, and
/// the Ingress `web/shop` for `shop.example.com` on it.
fn cluster(annotations: serde_json::Value, status: serde_json::Value) -> ClusterSnapshot {
    let mut svc: Service = lb_service("ingress", "nginx", annotations, status);
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
        ..ClusterSnapshot::default()
    }
}

fn do_proxy() -> serde_json::Value {
    json!({ "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol": "true" })
}

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

fn lb() -> ObjectRef {
    ObjectRef::new("ingress", "nginx")
}

#[test]
fn auto_without_a_record_keeps_dns_and_asks_for_ip_mode_proxy() {
    let snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "VIP" }]));
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures.len(), 1);
    let choice = &plan.cures[0];
    assert_eq!(
        (choice.cure, choice.native),
        (Cure::Dns, Some(NativeProgress::ToProve))
    );
    // Make before break: the names keep their DNS rules until the probe proves native.
    assert_eq!(dns_names(&plan), ["shop.example.com"]);
    assert_eq!(
        plan.native_actions,
        [NativeAction::SetProxy {
            service: lb(),
            uid: "uid-1".into(),
            ips: vec![IpModeWas {
                ip: LB_IP.into(),
                ip_mode: Some("VIP".into())
            }],
            proven: false,
        }]
    );
}

#[test]
fn proven_native_has_no_dns_rule_and_no_hosts_entry() {
    let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "Proxy" }]));
    snapshot.config_maps.push(record(ProbeState::Proven));
    let plan = desired(&snapshot, &config(CureMode::Auto));
    // Still a load balancer hairpin cures (its own Proxy), not "not needed".
    assert!(plan.not_needed.is_empty(), "{:?}", plan.not_needed);
    assert_eq!(plan.cures[0].cure, Cure::Native);
    assert_eq!(plan.cures[0].native, Some(NativeProgress::Proven));
    assert!(dns_names(&plan).is_empty(), "{:?}", dns_names(&plan));
    assert!(plan.hosts.entries.is_empty());
    assert!(plan.native_actions.is_empty(), "{:?}", plan.native_actions);
}

#[test]
fn a_status_written_back_without_proxy_is_reasserted_without_a_new_probe() {
    let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "VIP" }]));
    snapshot.config_maps.push(record(ProbeState::Proven));
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures[0].cure, Cure::Native);
    assert!(dns_names(&plan).is_empty());
    assert!(matches!(
        &plan.native_actions[..],
        [NativeAction::SetProxy { proven: true, .. }]
    ));
}

#[test]
fn a_failed_probe_keeps_dns_and_writes_nothing() {
    let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "VIP" }]));
    snapshot.config_maps.push(record(ProbeState::Failed));
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(
        (plan.cures[0].cure, plan.cures[0].native),
        (Cure::Dns, Some(NativeProgress::Failed))
    );
    assert!(plan.cures[0].reason.contains("not honoured"));
    assert_eq!(dns_names(&plan), ["shop.example.com"]);
    assert!(plan.native_actions.is_empty());
}

#[test]
fn a_probing_cure_keeps_dns() {
    let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "Proxy" }]));
    snapshot.config_maps.push(record(ProbeState::Probing));
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures[0].cure, Cure::Dns);
    assert_eq!(dns_names(&plan), ["shop.example.com"]);
}

#[test]
fn a_cloud_controller_that_computes_ip_mode_is_never_overridden() {
    let hetzner = json!({ "load-balancer.hetzner.cloud/uses-proxyprotocol": "true" });
    let snapshot = cluster(hetzner, json!([{ "ip": LB_IP, "ipMode": "VIP" }]));
    let plan = desired(&snapshot, &config(CureMode::Native));
    assert_eq!(plan.cures[0].cure, Cure::Dns);
    assert!(
        plan.cures[0]
            .reason
            .contains("hcloud-cloud-controller-manager")
            && plan.cures[0].reason.contains("uses-proxyprotocol"),
        "{}",
        plan.cures[0].reason
    );
    assert!(plan.native_actions.is_empty());
    assert_eq!(dns_names(&plan), ["shop.example.com"]);
}

#[test]
fn forced_native_drops_dns_at_once_and_dns_restores_the_status() {
    let snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP }]));
    let plan = desired(&snapshot, &config(CureMode::Native));
    assert_eq!(plan.cures[0].cure, Cure::Native);
    assert!(dns_names(&plan).is_empty());
    assert!(matches!(
        &plan.native_actions[..],
        [NativeAction::SetProxy { proven: false, .. }]
    ));

    // The per-Service annotation wins over the flag: `dns` puts the recorded status back.
    let mut annotations = do_proxy();
    annotations["hairpin.io/cure"] = json!("dns");
    let mut snapshot = cluster(annotations, json!([{ "ip": LB_IP, "ipMode": "Proxy" }]));
    snapshot.config_maps.push(record(ProbeState::Proven));
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures[0].cure, Cure::Dns);
    assert_eq!(dns_names(&plan), ["shop.example.com"]);
    assert!(matches!(
        &plan.native_actions[..],
        [NativeAction::Restore { uid: Some(uid), original, .. }]
            if uid == "uid-1" && original[0].ip_mode.as_deref() == Some("VIP")
    ));
}

#[test]
fn the_record_of_a_deleted_service_is_forgotten_and_a_bad_annotation_is_a_warning() {
    let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP }]));
    snapshot.services[0].metadata.uid = Some("uid-2".into());
    snapshot.config_maps.push(record(ProbeState::Proven));
    snapshot.services[0]
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("hairpin.io/cure".into(), "<b>native!</b>".into());
    let plan = desired(&snapshot, &config(CureMode::Auto));
    // Another Service under the old name: the old entry is not its, nothing to put back.
    assert!(plan.native_actions.iter().any(|a| matches!(
        a,
        NativeAction::Restore { uid: None, service, .. } if *service == lb()
    )));
    let warnings: Vec<String> = plan.warnings.iter().map(ToString::to_string).collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("hairpin.io/cure") && w.contains("--cure auto applies")),
        "{warnings:?}"
    );
}

#[test]
fn an_unreadable_record_writes_no_status() {
    let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP }]));
    let mut cm = record(ProbeState::Proven);
    cm.data
        .as_mut()
        .unwrap()
        .insert(NATIVE_KEY.into(), "not json".into());
    snapshot.config_maps.push(cm);
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert!(plan.native_actions.is_empty());
    assert_eq!(dns_names(&plan), ["shop.example.com"]);
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.to_string().contains("hairpin-native")),
        "{:?}",
        plan.warnings
    );
}
