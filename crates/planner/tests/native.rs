//! The cure of each load balancer (`crate::native`): native (`ipMode: Proxy`) where the probe
//! proved it, DNS until then and where not; the status writes the controller makes.

mod support;

use hairpin_planner::delivery::Delivery;
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
    record_with(state, |_| {})
}

/// The record of one entry in `state`, changed by `change`.
fn record_with(state: ProbeState, change: impl FnOnce(&mut NativeEntry)) -> ConfigMap {
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
    if let Some(entry) = record.load_balancers.values_mut().next() {
        change(entry);
    }
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
    // The controller's words, as recorded.
    assert_eq!(plan.cures[0].reason, "203.0.113.10:80 answered");
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

#[test]
fn an_unreadable_record_is_quoted_escaped_once() {
    // The JSON parser quotes a string it did not expect as a Rust literal (escaped already)
    // and an unknown variant as it is: the warning shows both escaped once.
    for (text, shown) in [
        (
            r#"{"loadBalancers": "a\u001b\"b"}"#,
            r#"invalid type: string "a\u{1b}\"b", expected a map"#,
        ),
        (
            r#"{"loadBalancers": {"x": {"state": "p\u001bq"}}}"#,
            r#"unknown variant `p\u{1b}q`"#,
        ),
    ] {
        let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP }]));
        let mut cm = record(ProbeState::Proven);
        cm.data
            .as_mut()
            .unwrap()
            .insert(NATIVE_KEY.into(), text.into());
        snapshot.config_maps.push(cm);
        let error = NativeRecord::read(&snapshot, &config(CureMode::Auto)).unwrap_err();
        assert_eq!(error.key, NATIVE_KEY);
        assert_eq!(error.metric_label(), "native_record_unreadable");
        let plan = desired(&snapshot, &config(CureMode::Auto));
        let warning = plan
            .warnings
            .iter()
            .find(|w| w.subject == "ConfigMap hairpin/hairpin-native")
            .unwrap_or_else(|| panic!("{:?}", plan.warnings));
        assert!(
            warning.message.starts_with(&format!(
                "ConfigMap hairpin/hairpin-native key {NATIVE_KEY} is not hairpin's record: {shown}"
            )),
            "{}",
            warning.message
        );
        assert!(
            warning
                .message
                .ends_with("; no load balancer status is written until it is hairpin's again"),
            "{}",
            warning.message
        );
    }
}

/// `svc`'s status `ingress` list last changed by `manager` (as the API server records it).
fn written_by(snapshot: &mut ClusterSnapshot, manager: &str) {
    snapshot.services[0].metadata.managed_fields = Some(vec![
        serde_json::from_value(json!({
            "manager": "kubectl", "operation": "Update", "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": { "f:metadata": { "f:annotations": {} }, "f:spec": { "f:type": {} } }
        }))
        .unwrap(),
        serde_json::from_value(json!({
            "manager": manager, "operation": "Update", "apiVersion": "v1",
            "subresource": "status", "fieldsType": "FieldsV1",
            "fieldsV1": { "f:status": { "f:loadBalancer": { "f:ingress": {} } } }
        }))
        .unwrap(),
    ]);
}

#[test]
fn a_writer_that_sets_ip_mode_proxy_itself_takes_over_and_hairpin_steps_back() {
    // hairpin's own Proxy: a proven cure, nothing to do.
    let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "Proxy" }]));
    snapshot.config_maps.push(record(ProbeState::Proven));
    written_by(&mut snapshot, hairpin_planner::FIELD_MANAGER);
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures[0].cure, Cure::Native);
    assert!(plan.native_actions.is_empty(), "{:?}", plan.native_actions);

    // Another writer that only touched the list while hairpin's Proxy was on it (Cilium
    // LB-IPAM, kubectl edit --subresource=status) did not set Proxy itself: nothing changes,
    // the cure stays hairpin's (uninstall included).
    written_by(&mut snapshot, "cilium-operator-lbipam");
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures[0].cure, Cure::Native);
    assert!(plan.native_actions.is_empty(), "{:?}", plan.native_actions);

    // hairpin's probe failed and it put VIP back; an upgraded cloud controller then rewrote
    // the status with ipMode: Proxy, its own: hairpin forgets its entry and neither
    // re-asserts nor puts VIP back; the load balancer no longer needs a cure (its status says
    // Proxy, and not hairpin's).
    snapshot.config_maps.pop();
    snapshot.config_maps.push(record(ProbeState::Failed));
    written_by(
        &mut snapshot,
        "digitalocean-cloud-controller-manager\u{1b}[2J",
    );
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert!(plan.cures.is_empty(), "{:?}", plan.cures);
    assert!(
        plan.not_needed.iter().any(|n| n.service == lb()),
        "{:?}",
        plan.not_needed
    );
    match &plan.native_actions[..] {
        [
            NativeAction::Forget {
                service,
                writer,
                reason,
                ..
            },
        ] => {
            assert_eq!(*service, lb());
            assert!(!writer.contains('\u{1b}'), "escaped: {writer}");
            assert!(reason.contains("stepped back"), "{reason}");
        }
        other => panic!("expected one Forget: {other:?}"),
    }
    assert!(dns_names(&plan).is_empty());

    // On a proven cure, the same writer putting VIP back is no takeover: hairpin re-asserts.
    snapshot.config_maps.pop();
    snapshot.config_maps.push(record(ProbeState::Proven));
    snapshot.services[0].status = lb_service(
        "ingress",
        "nginx",
        do_proxy(),
        json!([{ "ip": LB_IP, "ipMode": "VIP" }]),
    )
    .status;
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert!(matches!(
        &plan.native_actions[..],
        [NativeAction::SetProxy { proven: true, .. }]
    ));
}

#[test]
fn a_takeover_under_hairpins_forcing_annotation_restores_nothing() {
    let mut annotations = do_proxy();
    annotations["hairpin.io/proxy-protocol"] = json!("v1");
    let mut snapshot = cluster(annotations, json!([{ "ip": LB_IP, "ipMode": "Proxy" }]));
    snapshot.config_maps.push(record(ProbeState::Failed));
    written_by(&mut snapshot, "cloud-controller-manager");
    let plan = desired(&snapshot, &config(CureMode::Auto));
    // Forced to DNS by the annotation, but the status is the other writer's: no Restore.
    assert_eq!(plan.cures[0].cure, Cure::Dns);
    assert!(
        plan.native_actions
            .iter()
            .all(|a| matches!(a, NativeAction::Forget { .. })),
        "{:?}",
        plan.native_actions
    );
}

#[test]
fn offline_forced_native_is_to_be_proven() {
    let snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "VIP" }]));
    let plan = desired(&snapshot, &config(CureMode::Native));
    assert_eq!(
        (plan.cures[0].cure, plan.cures[0].native),
        (Cure::Native, Some(NativeProgress::ToProve))
    );
}

#[test]
fn the_data_plane_is_the_kube_proxy_and_cni_daemonsets_generations() {
    use hairpin_planner::workloads::ReceiverObjects;
    let daemon_set = |namespace: &str, name: &str, generation: i64| {
        ReceiverObjects::workload_from_value(
            "DaemonSet",
            json!({ "metadata": { "namespace": namespace, "name": name, "generation": generation },
                    "spec": { "template": { "spec": { "containers": [] } } } }),
        )
        .unwrap()
    };
    let mut snapshot = ClusterSnapshot::default();
    assert_eq!(hairpin_planner::native::data_plane(&snapshot), "");
    snapshot.receivers.workloads = vec![
        daemon_set("kube-system", "kube-proxy", 3),
        daemon_set("ingress", "ingress-nginx-controller", 9),
        daemon_set("kube-system", "cilium", 12),
    ];
    assert_eq!(
        hairpin_planner::native::data_plane(&snapshot),
        "kube-system/cilium@12; kube-system/kube-proxy@3"
    );
}

// --- The delivery gate (issue 36): native only where the load balancer is a proxy. ---

/// The DigitalOcean load balancer of [`cluster`] with `extra` annotations (VIP marks) merged.
fn do_with(extra: serde_json::Value) -> serde_json::Value {
    let mut annotations = do_proxy();
    let map = annotations.as_object_mut().unwrap();
    for (k, v) in extra.as_object().unwrap() {
        map.insert(k.clone(), v.clone());
    }
    annotations
}

#[test]
fn auto_never_tries_native_on_a_metallb_address_and_says_why() {
    let snapshot = cluster(
        do_with(json!({ "metallb.io/address-pool": "public" })),
        json!([{ "ip": LB_IP, "ipMode": "VIP" }]),
    );
    let plan = desired(&snapshot, &config(CureMode::Auto));
    let choice = &plan.cures[0];
    assert_eq!((choice.cure, choice.native), (Cure::Dns, None));
    assert_eq!(choice.delivery.kind, Delivery::Vip);
    assert!(
        choice.delivery.evidence.contains("MetalLB")
            && choice
                .delivery
                .evidence
                .contains("metallb.io/address-pool=public"),
        "{}",
        choice.delivery.evidence
    );
    assert!(
        choice.reason.contains(
            "native never tried: the nodes receive this load balancer's address as destination"
        ) && choice
            .reason
            .contains("cut off every client outside the cluster"),
        "{}",
        choice.reason
    );
    assert!(plan.native_actions.is_empty(), "{:?}", plan.native_actions);
    assert_eq!(dns_names(&plan), ["shop.example.com"]);
    // Not tried is not a warning: nothing was asked.
    assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
}

/// A change to a Service of a test case.
type Edit = Box<dyn Fn(&mut Service)>;

/// Every mark a VIP implementation leaves on a Service makes it a VIP.
#[test]
fn every_vip_mark_is_recognised() {
    let cases: Vec<(&str, serde_json::Value, Edit)> = vec![
        (
            "MetalLB",
            json!({ "metallb.universe.tf/allow-shared-ip": "k" }),
            Box::new(|_| {}),
        ),
        (
            "MetalLB",
            json!({ "metallb.io/ip-allocated-from-pool": "p" }),
            Box::new(|_| {}),
        ),
        (
            "kube-vip",
            json!({ "kube-vip.io/loadbalancerIPs": LB_IP }),
            Box::new(|_| {}),
        ),
        (
            "kube-vip",
            json!({ "kube-vip.io/ignore": "false" }),
            Box::new(|_| {}),
        ),
        (
            "PureLB",
            json!({}),
            Box::new(|s: &mut Service| {
                s.spec.as_mut().unwrap().load_balancer_class = Some("purelb.io/purelbv2".into());
            }),
        ),
        (
            "Cilium LB-IPAM",
            json!({ "lbipam.cilium.io/ips": LB_IP }),
            Box::new(|_| {}),
        ),
        (
            "Cilium LB-IPAM",
            json!({ "io.cilium/lb-ipam-ips": LB_IP }),
            Box::new(|_| {}),
        ),
        (
            "OpenELB",
            json!({ "lb.kubesphere.io/v1alpha1": "openelb" }),
            Box::new(|_| {}),
        ),
        (
            "OpenELB",
            json!({ "eip.openelb.kubesphere.io/v1alpha2": "eip" }),
            Box::new(|_| {}),
        ),
        (
            "PureLB",
            json!({ "purelb.io/allocated-by": "PureLB" }),
            Box::new(|_| {}),
        ),
        (
            "LoxiLB",
            json!({ "loxilb.io/lbmode": "fullnat" }),
            Box::new(|_| {}),
        ),
        (
            "k3s ServiceLB",
            json!({}),
            Box::new(|s: &mut Service| {
                s.metadata.finalizers = Some(vec!["svccontroller.k3s.cattle.io/daemonset".into()]);
            }),
        ),
        (
            "Cilium LB-IPAM (L2",
            json!({}),
            Box::new(|s: &mut Service| {
                s.spec.as_mut().unwrap().load_balancer_class =
                    Some("io.cilium/l2-announcer".into());
            }),
        ),
        (
            "kube-vip",
            json!({}),
            Box::new(|s: &mut Service| {
                s.spec.as_mut().unwrap().load_balancer_class =
                    Some("kube-vip.io/kube-vip-class".into());
            }),
        ),
        (
            "Cilium LB-IPAM",
            json!({}),
            Box::new(|s: &mut Service| {
                s.status.as_mut().unwrap().conditions = Some(vec![serde_json::from_value(json!({
                "type": "cilium.io/IPAMRequestSatisfied", "status": "True", "reason": "satisfied",
                "message": "", "lastTransitionTime": "2026-11-27T10:00:00Z"
            })).unwrap()]);
            }),
        ),
    ];
    for (what, extra, edit) in cases {
        let mut snapshot = cluster(do_with(extra.clone()), json!([{ "ip": LB_IP }]));
        edit(&mut snapshot.services[0]);
        let plan = desired(&snapshot, &config(CureMode::Auto));
        let choice = &plan.cures[0];
        assert_eq!(choice.delivery.kind, Delivery::Vip, "{what} {extra}");
        assert!(
            choice.delivery.evidence.starts_with(what),
            "{what}: {}",
            choice.delivery.evidence
        );
        assert!(
            plan.native_actions.is_empty(),
            "{what}: {:?}",
            plan.native_actions
        );
    }
}

#[test]
fn k3s_servicelb_is_known_by_its_daemonset() {
    let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP }]));
    snapshot
        .receivers
        .workloads
        .push(hairpin_planner::workloads::Workload {
            kind: "DaemonSet".into(),
            metadata: serde_json::from_value(json!({
                "name": "svclb-nginx-0123abcd", "namespace": "kube-system",
                "labels": { "svccontroller.k3s.cattle.io/svcname": "nginx",
                            "svccontroller.k3s.cattle.io/svcnamespace": "ingress" }
            }))
            .unwrap(),
            ..Default::default()
        });
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures[0].delivery.kind, Delivery::Vip);
    assert!(
        plan.cures[0]
            .delivery
            .evidence
            .contains("DaemonSet kube-system/svclb-nginx-0123abcd"),
        "{}",
        plan.cures[0].delivery.evidence
    );
    // The same DaemonSet for another Service says nothing about this one.
    snapshot.services[0].metadata.name = Some("other".into());
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert!(plan.cures.iter().all(|c| c.delivery.kind != Delivery::Vip));
}

#[test]
fn kube_vip_told_to_ignore_the_service_is_no_vip_mark() {
    let snapshot = cluster(
        do_with(json!({ "kube-vip.io/ignore": "true", "kube-vip.io/loadbalancerIPs": LB_IP })),
        json!([{ "ip": LB_IP }]),
    );
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures[0].delivery.kind, Delivery::Proxy);
}

#[test]
fn forcing_native_on_a_vip_is_refused_with_the_outage_and_the_status_restored() {
    for (mode, annotations) in [
        (
            CureMode::Native,
            json!({ "metallb.io/address-pool": "public" }),
        ),
        (
            CureMode::Auto,
            json!({ "metallb.io/address-pool": "public", "hairpin.io/cure": "native" }),
        ),
    ] {
        // A record from before: hairpin had set Proxy on this MetalLB address.
        let mut snapshot = cluster(
            do_with(annotations),
            json!([{ "ip": LB_IP, "ipMode": "Proxy" }]),
        );
        snapshot.config_maps.push(record(ProbeState::Proven));
        let plan = desired(&snapshot, &config(mode));
        let choice = &plan.cures[0];
        assert_eq!((choice.cure, choice.mode), (Cure::Dns, CureMode::Native));
        assert!(
            choice
                .reason
                .starts_with("native refused: the nodes receive"),
            "{}",
            choice.reason
        );
        assert_eq!(dns_names(&plan), ["shop.example.com"]);
        let warning = plan
            .warnings
            .iter()
            .find(|w| w.subject == "Service ingress/nginx")
            .expect("a warning on the Service");
        assert!(
            warning.message.contains("refused")
                && warning.message.contains(
                    "would cut off every client outside the cluster: kube-proxy drops every rule for that IP"
                ),
            "{}",
            warning.message
        );
        assert!(
            matches!(
                &plan.native_actions[..],
                [NativeAction::Restore { original, .. }]
                    if original[0].ip_mode.as_deref() == Some("VIP")
            ),
            "{:?}",
            plan.native_actions
        );
    }
}

/// Issue 45 item 4: evidence beats hairpin's `delivery` annotation, which only settles an
/// unknown delivery; a conflict is a warning naming both, and the safer (VIP) applies.
#[test]
fn vip_marks_beat_hairpins_delivery_annotation_which_only_settles_unknown() {
    // A MetalLB address that a tenant's annotation declares a proxy: VIP, nothing written.
    let snapshot = cluster(
        do_with(json!({ "metallb.io/address-pool": "p", "hairpin.io/delivery": "proxy" })),
        json!([{ "ip": LB_IP, "ipMode": "VIP" }]),
    );
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures[0].delivery.kind, Delivery::Vip);
    assert_eq!(plan.cures[0].cure, Cure::Dns);
    assert!(plan.native_actions.is_empty(), "{:?}", plan.native_actions);
    let warning = plan
        .warnings
        .iter()
        .find(|w| w.message.contains("hairpin.io/delivery=proxy"))
        .expect("a warning naming the annotation");
    assert!(
        warning.message.contains("MetalLB") && warning.message.contains("metallb.io/address-pool"),
        "{}",
        warning.message
    );
    // The annotation settles an unknown delivery (no provider, no VIP mark).
    let snapshot = cluster(
        json!({ "hairpin.io/proxy-protocol": "v1", "hairpin.io/delivery": "proxy" }),
        json!([{ "ip": LB_IP, "ipMode": "VIP" }]),
    );
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(
        plan.cures[0].delivery.kind,
        Delivery::Proxy,
        "{:?}",
        plan.cures
    );
    assert!(matches!(
        &plan.native_actions[..],
        [NativeAction::SetProxy { .. }]
    ));
    // A DigitalOcean load balancer declared a VIP: the safer applies, never native, and the
    // conflict is a warning.
    let snapshot = cluster(
        do_with(json!({ "hairpin.io/delivery": " VIP " })),
        json!([{ "ip": LB_IP, "ipMode": "VIP" }]),
    );
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures[0].delivery.kind, Delivery::Vip);
    assert!(plan.native_actions.is_empty());
    assert!(
        plan.warnings.iter().any(
            |w| w.message.contains("DigitalOcean") && w.message.contains("hairpin.io/delivery")
        ),
        "{:?}",
        plan.warnings
    );
    // A word it does not know: a warning, and the rest decides (DigitalOcean: a proxy).
    let snapshot = cluster(
        do_with(json!({ "hairpin.io/delivery": "router\u{1b}[2J" })),
        json!([{ "ip": LB_IP, "ipMode": "VIP" }]),
    );
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures[0].delivery.kind, Delivery::Proxy);
    let warning = plan
        .warnings
        .iter()
        .find(|w| w.message.contains("hairpin.io/delivery"))
        .expect("a warning");
    assert!(
        warning.message.contains("expected proxy or vip"),
        "{}",
        warning.message
    );
    assert!(!warning.message.contains('\u{1b}'), "{}", warning.message);
}

#[test]
fn a_proxy_provider_says_so_with_its_evidence() {
    let snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "VIP" }]));
    let plan = desired(&snapshot, &config(CureMode::Auto));
    let delivery = &plan.cures[0].delivery;
    assert_eq!(delivery.kind, Delivery::Proxy);
    assert!(
        delivery.evidence.starts_with(
            "DigitalOcean (annotation service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol=true)"
        ),
        "{}",
        delivery.evidence
    );
}

/// An unknown delivery: `auto` keeps DNS (native not tried), `native` forces it (not a VIP).
#[test]
fn an_unknown_delivery_is_not_tried_by_auto_but_may_be_forced() {
    // OCI's network load balancer: pass-through, its delivery depends on its settings.
    let annotations =
        json!({ "oci-network-load-balancer.oraclecloud.com/is-ppv2-enabled": "true" });
    let snapshot = cluster(
        annotations.clone(),
        json!([{ "ip": LB_IP, "ipMode": "VIP" }]),
    );
    let plan = desired(&snapshot, &config(CureMode::Auto));
    let choice = &plan.cures[0];
    assert_eq!(choice.delivery.kind, Delivery::Unknown);
    assert_eq!((choice.cure, choice.native), (Cure::Dns, None));
    assert!(
        choice.reason.contains("known to be a proxy"),
        "{}",
        choice.reason
    );
    assert!(plan.native_actions.is_empty());
    let plan = desired(&snapshot, &config(CureMode::Native));
    assert_eq!(
        (plan.cures[0].cure, plan.cures[0].native),
        (Cure::Native, Some(NativeProgress::ToProve))
    );
    assert!(matches!(
        &plan.native_actions[..],
        [NativeAction::SetProxy { .. }]
    ));
}

/// An `ipMode` other than VIP and Proxy (a future `Router`) is another writer's: never
/// written, in any mode.
#[test]
fn an_ip_mode_of_another_writer_is_left_alone() {
    for mode in [CureMode::Auto, CureMode::Native] {
        let snapshot = cluster(
            do_proxy(),
            json!([{ "ip": LB_IP, "ipMode": "Router" }, { "ip": "203.0.113.11", "ipMode": "VIP" }]),
        );
        let plan = desired(&snapshot, &config(mode));
        let choice = &plan.cures[0];
        assert_eq!(choice.cure, Cure::Dns, "{mode:?}");
        assert!(
            choice.reason.contains("ipMode Router, another writer's"),
            "{}",
            choice.reason
        );
        assert!(plan.native_actions.is_empty(), "{:?}", plan.native_actions);
    }
}

#[test]
fn the_plan_json_carries_the_delivery() {
    let snapshot = cluster(
        do_with(json!({ "metallb.io/address-pool": "public" })),
        json!([{ "ip": LB_IP }]),
    );
    let plan = desired(&snapshot, &config(CureMode::Auto));
    let value = serde_json::to_value(&plan.cures[0]).unwrap();
    assert_eq!(value["delivery"]["kind"], "vip");
    assert!(
        value["delivery"]["evidence"]
            .as_str()
            .unwrap()
            .contains("MetalLB")
    );
}

/// Nothing written (the baseline was answered): DNS, the reason, no status write; with
/// `--cure native` no DNS rule either (in-cluster clients reach it without one) and no write.
#[test]
fn a_load_balancer_answered_without_a_header_is_not_needed_and_never_written() {
    for (mode, cure) in [
        (CureMode::Auto, Cure::Dns),
        (CureMode::Native, Cure::Native),
    ] {
        let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "VIP" }]));
        snapshot
            .config_maps
            .push(record_with(ProbeState::NotNeeded, |e| {
                e.reason =
                    "answered without a header before any change: 203.0.113.10:80 answered 3 of 3"
                        .into();
            }));
        let plan = desired(&snapshot, &config(mode));
        let choice = &plan.cures[0];
        assert_eq!(
            (choice.cure, choice.native),
            (cure, Some(NativeProgress::NotNeeded)),
            "{mode:?}"
        );
        assert!(
            choice.reason.starts_with("not needed")
                && choice
                    .reason
                    .contains("answered without a header before any change"),
            "{}",
            choice.reason
        );
        assert!(plan.native_actions.is_empty(), "{:?}", plan.native_actions);
        let text = hairpin_planner::render::cure_text(choice);
        assert!(text.contains("native not tried: not needed"), "{text}");
        assert_eq!(dns_names(&plan).is_empty(), mode == CureMode::Native);
    }
}

/// The API server dropped the field: DNS whatever the mode, never written again until the
/// controller marks it due (its version changed).
#[test]
fn an_unsupported_ip_mode_is_not_written_again_until_due() {
    for mode in [CureMode::Auto, CureMode::Native] {
        let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "VIP" }]));
        snapshot
            .config_maps
            .push(record_with(ProbeState::Unsupported, |e| {
                e.reason = "the API server (v1.29.9) dropped the ipMode".into();
                e.server_version = "v1.29.9".into();
            }));
        let plan = desired(&snapshot, &config(mode));
        assert_eq!(
            (plan.cures[0].cure, plan.cures[0].native),
            (Cure::Dns, Some(NativeProgress::Unsupported))
        );
        assert!(plan.cures[0].reason.contains("v1.29.9"));
        assert_eq!(dns_names(&plan), ["shop.example.com"]);
        assert!(plan.native_actions.is_empty(), "{:?}", plan.native_actions);
    }
}

/// A `failed`, `not-needed` or `unsupported` entry whose wait is over (`due`) is proposed
/// again as a first attempt (the controller proves the problem first), DNS kept meanwhile.
#[test]
fn a_due_entry_is_proposed_again_as_a_first_attempt() {
    for state in [
        ProbeState::Failed,
        ProbeState::NotNeeded,
        ProbeState::Unsupported,
    ] {
        let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "VIP" }]));
        snapshot
            .config_maps
            .push(record_with(state, |e| e.due = true));
        let plan = desired(&snapshot, &config(CureMode::Auto));
        assert_eq!(
            (plan.cures[0].cure, plan.cures[0].native),
            (Cure::Dns, Some(NativeProgress::ToProve)),
            "{state:?}"
        );
        assert_eq!(dns_names(&plan), ["shop.example.com"]);
        assert!(
            matches!(
                &plan.native_actions[..],
                [NativeAction::SetProxy { proven: false, .. }]
            ),
            "{state:?}: {:?}",
            plan.native_actions
        );
    }
}

/// The record's new fields are written only when set, and read back as written.
#[test]
fn the_record_round_trips_its_states_and_counters() {
    let cm = record_with(ProbeState::Unsupported, |e| {
        e.failures = 3;
        e.server_version = "v1.29.9".into();
        e.due = true;
    });
    let text = &cm.data.as_ref().unwrap()[NATIVE_KEY];
    let value: serde_json::Value = serde_json::from_str(text).unwrap();
    let entry = &value["loadBalancers"]["ingress/nginx"];
    assert_eq!(entry["state"], "unsupported");
    assert_eq!(entry["failures"], 3);
    assert_eq!(entry["serverVersion"], "v1.29.9");
    assert_eq!(entry["due"], true);
    let plain = record(ProbeState::NotNeeded);
    let text = &plain.data.as_ref().unwrap()[NATIVE_KEY];
    assert!(text.contains("\"not-needed\""), "{text}");
    assert!(
        !text.contains("failures") && !text.contains("due"),
        "{text}"
    );
    let back: NativeRecord = serde_json::from_str(text).unwrap();
    assert_eq!(
        back.load_balancers["ingress/nginx"].state,
        ProbeState::NotNeeded
    );
}

/// A writer that touched the list while hairpin's `Proxy` was on it is no takeover: a cure no
/// longer wanted (`--cure dns`) is put back all the same; under a forced native cure whose
/// probe failed (its `Proxy` left in place) neither.
#[test]
fn touching_the_list_over_hairpins_proxy_is_no_takeover() {
    for (state, mode) in [
        (ProbeState::Proven, CureMode::Dns),
        (ProbeState::Probing, CureMode::Dns),
        (ProbeState::Failed, CureMode::Native),
    ] {
        let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "Proxy" }]));
        snapshot.config_maps.push(record(state));
        written_by(&mut snapshot, "kubectl-edit");
        let plan = desired(&snapshot, &config(mode));
        assert!(
            !plan
                .native_actions
                .iter()
                .any(|a| matches!(a, NativeAction::Forget { .. })),
            "{state:?} {mode:?}: {:?}",
            plan.native_actions
        );
        if mode == CureMode::Dns {
            assert!(
                matches!(&plan.native_actions[..], [NativeAction::Restore { .. }]),
                "{state:?}: {:?}",
                plan.native_actions
            );
        }
    }
}

/// Item 6: the load balancer's address changed (or an IP was added) since the cure was
/// proven: the cure starts over for the new IP, proven first (no re-assertion without a
/// probe), and its names keep their DNS rules meanwhile.
#[test]
fn a_changed_address_starts_the_cure_over() {
    for status in [
        json!([{ "ip": "203.0.113.20", "ipMode": "VIP" }]),
        json!([{ "ip": LB_IP, "ipMode": "Proxy" }, { "ip": "203.0.113.20", "ipMode": "VIP" }]),
    ] {
        let mut snapshot = cluster(do_proxy(), status.clone());
        snapshot.config_maps.push(record(ProbeState::Proven));
        let plan = desired(&snapshot, &config(CureMode::Auto));
        let choice = &plan.cures[0];
        assert_eq!(
            (choice.cure, choice.native),
            (Cure::Dns, Some(NativeProgress::ToProve)),
            "{status}"
        );
        assert!(
            choice
                .reason
                .contains("address changed (new: 203.0.113.20)"),
            "{}",
            choice.reason
        );
        assert_eq!(
            plan.native_actions,
            [NativeAction::SetProxy {
                service: lb(),
                uid: "uid-1".into(),
                ips: vec![IpModeWas {
                    ip: "203.0.113.20".into(),
                    ip_mode: Some("VIP".into())
                }],
                proven: false,
            }],
            "{status}"
        );
    }
}

/// Another writer set `ipMode: Proxy` on a MetalLB address: every outside client is cut off
/// now. The plan says so (hairpin writes nothing there); a proxy load balancer at `Proxy` is
/// no warning.
#[test]
fn a_vip_at_ip_mode_proxy_by_another_writer_is_an_outage_warning() {
    let snapshot = cluster(
        do_with(json!({ "metallb.io/address-pool": "public" })),
        json!([{ "ip": LB_IP, "ipMode": "Proxy" }]),
    );
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert!(plan.native_actions.is_empty(), "{:?}", plan.native_actions);
    let warning = plan
        .warnings
        .iter()
        .find(|w| w.subject == "Service ingress/nginx")
        .expect("an outage warning");
    assert!(
        warning
            .message
            .starts_with("status IP 203.0.113.10 says ipMode: Proxy, but the nodes receive")
            && warning
                .message
                .contains("every client outside the cluster is cut off now"),
        "{}",
        warning.message
    );
    let snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "Proxy" }]));
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
}

/// Item 6: a cure proven on the IPs the controller reaches, with an IPv6 one it could not
/// reach (`skipped`): that IP is never written (not even re-asserted), the names keep the DNS
/// cure and the reason says why; a new attempt (`due`) asks every IP again.
#[test]
fn a_skipped_ip_stays_vip_and_the_names_keep_the_dns_cure() {
    const V6: &str = "2001:db8::10";
    let status = json!([{ "ip": LB_IP, "ipMode": "Proxy" }, { "ip": V6, "ipMode": "VIP" }]);
    let mut snapshot = cluster(do_proxy(), status);
    snapshot
        .config_maps
        .push(record_with(ProbeState::Proven, |e| {
            e.skipped = vec![V6.into()];
        }));
    let plan = desired(&snapshot, &config(CureMode::Auto));
    let choice = &plan.cures[0];
    assert_eq!(
        (choice.cure, choice.native),
        (Cure::Dns, Some(NativeProgress::Proven))
    );
    assert!(
        choice
            .reason
            .contains("2001:db8::10 cannot be reached from the controller and stays VIP"),
        "{}",
        choice.reason
    );
    assert_eq!(dns_names(&plan), ["shop.example.com"]);
    assert!(plan.native_actions.is_empty(), "{:?}", plan.native_actions);

    let mut snapshot = cluster(
        do_proxy(),
        json!([{ "ip": LB_IP, "ipMode": "VIP" }, { "ip": V6, "ipMode": "VIP" }]),
    );
    snapshot
        .config_maps
        .push(record_with(ProbeState::Failed, |e| {
            e.skipped = vec![V6.into()];
            e.due = true;
        }));
    let plan = desired(&snapshot, &config(CureMode::Auto));
    let Some(NativeAction::SetProxy { ips, .. }) = plan.native_actions.first() else {
        panic!("{:?}", plan.native_actions);
    };
    let ips: Vec<&str> = ips.iter().map(|w| w.ip.as_str()).collect();
    assert_eq!(ips, [LB_IP, V6]);

    // The skipped IP gone from the status: the cure is native for the names too.
    let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "Proxy" }]));
    snapshot
        .config_maps
        .push(record_with(ProbeState::Proven, |e| {
            e.skipped = vec![V6.into()];
        }));
    let plan = desired(&snapshot, &config(CureMode::Auto));
    assert_eq!(plan.cures[0].cure, Cure::Native, "{}", plan.cures[0].reason);
    assert!(dns_names(&plan).is_empty());
}

/// Issue 45 item 2: a failed cure whose status still says `Proxy` (a put-back refused, or
/// not applied) is put back before anything else, its entry kept (not forgotten, even when
/// another writer touched the list since: the `Proxy` is still hairpin's); only `--cure
/// native` keeps it.
#[test]
fn a_failed_cure_still_at_proxy_is_put_back_unless_native_is_forced() {
    for (pending, due) in [("the API server answered 409 Conflict", false), ("", true)] {
        let mut snapshot = cluster(do_proxy(), json!([{ "ip": LB_IP, "ipMode": "Proxy" }]));
        snapshot
            .config_maps
            .push(record_with(ProbeState::Failed, |e| {
                e.put_back = pending.into();
                e.due = due;
            }));
        let plan = desired(&snapshot, &config(CureMode::Auto));
        assert!(
            matches!(
                &plan.native_actions[..],
                [NativeAction::PutBack { original, .. }] if original[0].ip_mode.as_deref() == Some("VIP")
            ),
            "{:?}",
            plan.native_actions
        );
        let choice = &plan.cures[0];
        assert_eq!(choice.cure, Cure::Dns);
        assert_eq!(choice.native, Some(NativeProgress::Failed));
        assert!(choice.reason.contains("is put back"), "{}", choice.reason);
        if !pending.is_empty() {
            assert!(choice.reason.contains("409"), "{}", choice.reason);
        }
        let plan = desired(&snapshot, &config(CureMode::Native));
        assert!(
            !plan
                .native_actions
                .iter()
                .any(|a| matches!(a, NativeAction::PutBack { .. })),
            "{:?}",
            plan.native_actions
        );
    }
}
