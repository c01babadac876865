use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use serde_json::json;

use super::*;
use crate::workloads::ReceiverObjects;

fn node(name: &str, kubelet: &str, kube_proxy: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"nodeInfo": {
            "kubeletVersion": kubelet, "kubeProxyVersion": kube_proxy,
            "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
            "osImage": "", "containerRuntimeVersion": "", "operatingSystem": "linux",
            "architecture": "amd64"}}
    }))
    .expect("a Node")
}

fn daemon_set(
    namespace: &str,
    name: &str,
    image: &str,
    args: &[&str],
    config_map: Option<&str>,
) -> Workload {
    let mut spec = json!({"containers": [{"name": name, "image": image, "args": args}]});
    if let Some(cm) = config_map {
        spec["volumes"] = json!([{"name": "config", "configMap": {"name": cm}}]);
    }
    ReceiverObjects::workload_from_value(
        "DaemonSet",
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"selector": {}, "template": {"spec": spec}}}),
    )
    .expect("a DaemonSet")
}

fn config_map(namespace: &str, name: &str, data: &[(&str, &str)]) -> ConfigMap {
    let data: BTreeMap<String, String> = data
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    serde_json::from_value(
        json!({"metadata": {"namespace": namespace, "name": name}, "data": data}),
    )
    .expect("a ConfigMap")
}

fn names(barred: &[NodeBar]) -> Vec<&str> {
    barred.iter().map(|b| b.node.as_str()).collect()
}

#[test]
fn versions_read_with_their_suffixes() {
    assert_eq!(version("v1.29.9"), Some((1, 29, 9)));
    assert_eq!(version("v1.30.0-eks-1a2b3c"), Some((1, 30, 0)));
    assert_eq!(version("v1.29.9+k3s1"), Some((1, 29, 9)));
    assert_eq!(version("1.16.5"), Some((1, 16, 5)));
    assert_eq!(version("v2.0"), Some((2, 0, 0)));
    assert_eq!(version("latest"), None);
    assert_eq!(version(""), None);
    assert_eq!(
        image_tag("registry.k8s.io/kube-proxy:v1.29.9@sha256:abc"),
        Some("v1.29.9")
    );
    assert_eq!(image_tag("localhost:5000/kube-proxy"), None);
}

#[test]
fn an_older_kubelet_or_kube_proxy_bars_its_node_and_only_it() {
    let snapshot = ClusterSnapshot {
        nodes: vec![
            node("node-a", "v1.31.14", ""),
            node("node-b", "v1.29.9", "v1.29.9"),
            node("node-c", "v1.30.2", "v1.29.1"),
            // Reports nothing: nothing tells, the probe decides.
            serde_json::from_value(json!({"metadata": {"name": "node-d"}})).unwrap(),
        ],
        ..ClusterSnapshot::default()
    };
    let barred = gate(&snapshot);
    assert_eq!(names(&barred), ["node-b", "node-c"]);
    assert!(
        barred[0].why.contains("kubelet v1.29.9 is older than 1.30"),
        "{barred:?}"
    );
    assert!(barred[1].why.contains("kube-proxy v1.29.1"), "{barred:?}");
    let text = describe(&barred);
    assert!(text.starts_with("node node-b (kubelet v1.29.9"), "{text}");
}

#[test]
fn nodes_at_1_30_or_later_are_not_barred() {
    let snapshot = ClusterSnapshot {
        nodes: vec![
            node("a", "v1.30.0", "v1.30.0"),
            node("b", "v1.33.1+k3s1", ""),
        ],
        ..ClusterSnapshot::default()
    };
    assert!(gate(&snapshot).is_empty());
    assert!(gate(&ClusterSnapshot::default()).is_empty());
}

#[test]
fn kube_proxy_daemon_set_older_or_with_the_gate_off_bars_every_node() {
    let mut snapshot = ClusterSnapshot::default();
    snapshot.receivers.workloads.push(daemon_set(
        "kube-system",
        "kube-proxy",
        "registry.k8s.io/kube-proxy:v1.29.9",
        &[],
        None,
    ));
    let barred = gate(&snapshot);
    assert_eq!(names(&barred), [EVERY_NODE]);
    assert!(barred[0].why.contains("kube-proxy v1.29.9"), "{barred:?}");

    for args in [
        &["--feature-gates=LoadBalancerIPMode=false"][..],
        &["--feature-gates", "Foo=true,LoadBalancerIPMode=false"][..],
    ] {
        let mut snapshot = ClusterSnapshot::default();
        snapshot.receivers.workloads.push(daemon_set(
            "kube-system",
            "kube-proxy",
            "registry.k8s.io/kube-proxy:v1.31.14",
            args,
            None,
        ));
        let barred = gate(&snapshot);
        assert_eq!(names(&barred), [EVERY_NODE], "{args:?}");
        assert!(
            barred[0].why.contains("LoadBalancerIPMode=false"),
            "{barred:?}"
        );
    }
    let mut on = ClusterSnapshot::default();
    on.receivers.workloads.push(daemon_set(
        "kube-system",
        "kube-proxy",
        "registry.k8s.io/kube-proxy:v1.31.14",
        &["--feature-gates=LoadBalancerIPMode=true"],
        Some("kube-proxy"),
    ));
    assert!(gate(&on).is_empty());
    // kubeadm's configuration file in its ConfigMap.
    on.config_maps.push(config_map(
        "kube-system",
        "kube-proxy",
        &[("config.conf", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nfeatureGates:\n  LoadBalancerIPMode: false\nmode: iptables\n")],
    ));
    let barred = gate(&on);
    assert_eq!(names(&barred), [EVERY_NODE]);
    assert!(
        barred[0]
            .why
            .contains("ConfigMap kube-system/kube-proxy key config.conf"),
        "{barred:?}"
    );
    assert!(!gate_off_in_config(
        "featureGates:\n  Other: false\nLoadBalancerIPMode: false\n"
    ));
    assert!(gate_off_in_config(
        "kind: KubeProxyConfiguration\nfeatureGates: {Other: true, LoadBalancerIPMode: false}\n"
    ));
}

/// The controller watches kube-proxy's ConfigMaps by name, only where a cure may be native, and
/// keeps of them only the `featureGates:` block, which the gate reads as it reads the whole
/// file; what that block says is part of the data plane's fingerprint.
#[test]
fn kube_proxy_config_maps_watched_where_native_may_be_slimmed_to_the_gates() {
    let file = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nclientConnection:\n  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf\nfeatureGates:\n  Other: true\n  LoadBalancerIPMode: false\nkind: KubeProxyConfiguration\nmode: iptables\n";
    let slim = feature_gates_only(file);
    assert_eq!(
        slim,
        "featureGates:\n  Other: true\n  LoadBalancerIPMode: false"
    );
    assert!(gate_off_in_config(&slim));
    assert_eq!(
        feature_gates_only("kind: KubeProxyConfiguration\nmode: ipvs\n"),
        ""
    );

    let mut snapshot = ClusterSnapshot::default();
    snapshot.receivers.workloads.push(daemon_set(
        "kube-system",
        "kube-proxy",
        "registry.k8s.io/kube-proxy:v1.31.14",
        &["--config=/var/lib/kube-proxy/config.conf"],
        Some("kube-proxy"),
    ));
    // The planner's default is the DNS cure; the controller's flag defaults to auto.
    let config = crate::PlannerConfig {
        cure: crate::CureMode::Auto,
        ..crate::PlannerConfig::default()
    };
    // No load balancer: nothing to cure, nothing watched.
    assert!(kube_proxy_config_maps(&snapshot, &config).is_empty());
    snapshot.services.push(
        serde_json::from_value(json!({
            "metadata": {"namespace": "ingress", "name": "lb"},
            "spec": {"type": "LoadBalancer"}
        }))
        .expect("a Service"),
    );
    let wanted = kube_proxy_config_maps(&snapshot, &config);
    assert_eq!(
        wanted,
        [("kube-system".to_owned(), "kube-proxy".to_owned())]
    );
    // --cure dns: never native, not watched (the chart grants no such read then).
    let dns = crate::PlannerConfig {
        cure: crate::CureMode::Dns,
        ..crate::PlannerConfig::default()
    };
    assert!(kube_proxy_config_maps(&snapshot, &dns).is_empty());
    // The fingerprint follows the gates.
    assert_eq!(kube_proxy_config(&snapshot), "");
    snapshot.config_maps.push(config_map(
        "kube-system",
        "kube-proxy",
        &[("config.conf", &slim)],
    ));
    assert_eq!(
        kube_proxy_config(&snapshot),
        "kube-system/kube-proxy config.conf featureGates: Other: true LoadBalancerIPMode: false"
    );
    assert_eq!(names(&gate(&snapshot)), [EVERY_NODE]);
}

#[test]
fn cnis_older_than_their_support_bar_every_node() {
    let cases = [
        ("cilium", "quay.io/cilium/cilium:v1.16.5", &[][..], true),
        ("cilium", "quay.io/cilium/cilium:v1.18.0", &[][..], true),
        ("cilium", "quay.io/cilium/cilium:v1.18.1", &[][..], false),
        ("cilium", "quay.io/cilium/cilium:v1.17.0", &[][..], false),
        (
            "antrea-agent",
            "antrea/antrea-agent-ubuntu:v1.15.0",
            &[][..],
            true,
        ),
        (
            "antrea-agent",
            "antrea/antrea-agent-ubuntu:v2.0.0",
            &[][..],
            false,
        ),
        (
            "kube-router",
            "cloudnativelabs/kube-router:v2.1.0",
            &[][..],
            true,
        ),
        (
            "kube-router",
            "cloudnativelabs/kube-router:v2.1.0",
            &["--run-service-proxy=false"][..],
            false,
        ),
        (
            "kube-router",
            "cloudnativelabs/kube-router:v2.9.0",
            &[][..],
            false,
        ),
    ];
    for (name, image, args, bars) in cases {
        let mut snapshot = ClusterSnapshot::default();
        snapshot
            .receivers
            .workloads
            .push(daemon_set("kube-system", name, image, args, None));
        assert_eq!(!gate(&snapshot).is_empty(), bars, "{name} {image} {args:?}");
    }
    // Cilium beside kube-proxy, not replacing it: kube-proxy decides.
    let mut snapshot = ClusterSnapshot::default();
    snapshot.receivers.workloads.push(daemon_set(
        "kube-system",
        "cilium",
        "quay.io/cilium/cilium:v1.16.5",
        &[],
        None,
    ));
    snapshot.config_maps.push(config_map(
        "kube-system",
        "cilium-config",
        &[("kube-proxy-replacement", "false")],
    ));
    assert!(gate(&snapshot).is_empty());
}

#[test]
fn many_nodes_are_named_a_few_and_counted() {
    let nodes: Vec<NodeBar> = (0..5)
        .map(|n| NodeBar {
            node: format!("n{n}"),
            why: "old".into(),
        })
        .collect();
    let text = describe(&nodes);
    assert!(text.ends_with("node n2 (old) and 2 more"), "{text}");
}
