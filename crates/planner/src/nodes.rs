//! The Nodes' gate of the native cure (issue 45): `ipMode: Proxy` helps only the pods of a
//! node whose data plane honours it. A node whose kube-proxy (or the CNI that replaces it)
//! ignores it short-circuits the load balancer's address for its pods as before, with no
//! header: the hairpin failure itself. The probe runs from one pod, on one node, so it cannot
//! tell; the Nodes and the data plane's DaemonSets often can:
//!
//! - a Node's kubelet older than 1.30 (`status.nodeInfo.kubeletVersion`; a kube-proxy that runs
//!   as no DaemonSet, as on k3s, RKE2 or a managed node image, is upgraded with it), or its
//!   `kubeProxyVersion` older than 1.30 where the kubelet still reports one;
//! - a kube-proxy DaemonSet whose image is older than 1.30, or that runs with the feature gate
//!   `LoadBalancerIPMode` off (its `--feature-gates` flag, or `featureGates` in the
//!   configuration file of a ConfigMap it mounts when that ConfigMap is in the snapshot: the
//!   controller watches those by name, [`kube_proxy_config_maps`], slimmed to
//!   [`feature_gates_only`]);
//! - a CNI that replaces kube-proxy, older than its support: Cilium before 1.17 or 1.18.0
//!   (where it replaces kube-proxy: `kube-proxy-replacement` on in `cilium-config`, or no
//!   kube-proxy DaemonSet), Antrea before 2.0, kube-router before 2.9 (unless its service
//!   proxy is off).
//!
//! A node barred keeps the DNS cure for every load balancer (its pods resolve the same names
//! as everyone's): [`gate`] names each with why. Where nothing tells (a Node that reports no
//! version, no DaemonSet to read, a data plane run outside the cluster), nothing is barred and
//! the probe decides, as before. Pure: the snapshot in, the nodes barred out.

use k8s_openapi::api::core::v1::Node;
use serde::Serialize;

use crate::node_probes::{NodeReport, NodeResult};
use crate::snapshot::ClusterSnapshot;
use crate::workloads::Workload;

/// The first Kubernetes minor version whose kube-proxy honours `ipMode` (KEP-1860, beta and on
/// by default in 1.30).
const IP_MODE_MINOR: u32 = 30;

/// What the gate says of the whole cluster's nodes: who stands for "every node" when a
/// DaemonSet (not a Node) is what fails.
pub const EVERY_NODE: &str = "every node";

/// A node that keeps the DNS cure for everyone, and why (escaped: it quotes the Node's and the
/// DaemonSet's own strings).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct NodeBar {
    /// The Node's name, or [`EVERY_NODE`] when a DaemonSet that runs on every node fails.
    pub node: String,
    /// Why its data plane is known not to honour `ipMode`.
    pub why: String,
}

/// `major.minor.patch` of a version string (`v1.29.9`, `v1.30.0-eks-1a2b`, `v1.29.9+k3s1`,
/// `1.16.5`); `None` when it does not start with one.
pub fn version(text: &str) -> Option<(u32, u32, u32)> {
    let text = text.trim().trim_start_matches('v');
    let mut parts = text.splitn(3, '.');
    let number = |part: Option<&str>| -> Option<u32> {
        let digits: String = part?.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    let major = number(parts.next())?;
    let minor = number(parts.next())?;
    let patch = number(parts.next()).unwrap_or(0);
    Some((major, minor, patch))
}

/// The tag of a container image (`registry.k8s.io/kube-proxy:v1.29.9@sha256:...` ->
/// `v1.29.9`); `None` without one.
fn image_tag(image: &str) -> Option<&str> {
    let image = image.split('@').next().unwrap_or(image);
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split_once(':').map(|(_, tag)| tag)
}

/// A Kubernetes version older than 1.30 (a 1.x before `IP_MODE_MINOR`).
fn before_ip_mode(text: &str) -> bool {
    version(text).is_some_and(|(major, minor, _)| major == 1 && minor < IP_MODE_MINOR)
}

/// Why one Node cannot honour `ipMode`, from what it reports.
fn node_bar(node: &Node) -> Option<String> {
    let info = node.status.as_ref()?.node_info.as_ref()?;
    let text = |s: &str| crate::escape::text(s).into_owned();
    if before_ip_mode(&info.kubelet_version) {
        return Some(format!(
            "kubelet {} is older than 1.30: its kube-proxy ignores ipMode",
            text(&info.kubelet_version)
        ));
    }
    if before_ip_mode(&info.kube_proxy_version) {
        return Some(format!(
            "kube-proxy {} is older than 1.30 and ignores ipMode",
            text(&info.kube_proxy_version)
        ));
    }
    None
}

/// The DaemonSet `name` (any namespace) of the snapshot.
fn daemon_set<'a>(snapshot: &'a ClusterSnapshot, name: &str) -> Option<&'a Workload> {
    snapshot
        .receivers
        .workloads
        .iter()
        .find(|w| w.kind == "DaemonSet" && w.metadata.name.as_deref() == Some(name))
}

/// The version of the first container whose image's repository ends with one of `repos`.
fn image_version<'a>(w: &'a Workload, repos: &[&str]) -> Option<(&'a str, (u32, u32, u32))> {
    w.spec()?.containers.iter().find_map(|c| {
        let image = c.image.as_deref()?;
        let repo = image.split(['@']).next()?.rsplit('/').next()?;
        let repo = repo.split(':').next()?;
        if !repos.iter().any(|r| repo.starts_with(r)) {
            return None;
        }
        let tag = image_tag(image)?;
        Some((tag, version(tag)?))
    })
}

/// Every argument of every container of `w` (command and args).
fn arguments(w: &Workload) -> impl Iterator<Item = &str> {
    w.spec()
        .into_iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.command.iter().flatten().chain(c.args.iter().flatten()))
        .map(String::as_str)
}

/// Whether a `--feature-gates` value (`A=true,LoadBalancerIPMode=false`) turns the gate off.
fn gate_off_in_flag(value: &str) -> bool {
    value.split(',').any(|gate| {
        gate.split_once('=').is_some_and(|(name, on)| {
            name.trim() == "LoadBalancerIPMode" && on.trim().eq_ignore_ascii_case("false")
        })
    })
}

/// Whether a kube-proxy configuration file (`KubeProxyConfiguration`, YAML) turns the gate
/// off: a `LoadBalancerIPMode: false` entry under `featureGates:` (block or flow style).
fn gate_off_in_config(text: &str) -> bool {
    let off = |entry: &str| {
        entry.split_once(':').is_some_and(|(name, on)| {
            name.trim().trim_matches(['"', '\'']) == "LoadBalancerIPMode"
                && on
                    .trim()
                    .trim_matches(['"', '\''])
                    .eq_ignore_ascii_case("false")
        })
    };
    feature_gates_only(text).lines().any(|line| {
        let line = line.trim();
        match line.strip_prefix("featureGates:") {
            Some(flow) => flow.trim().trim_matches(['{', '}']).split(',').any(off),
            None => off(line),
        }
    })
}

/// The `featureGates:` block of a kube-proxy configuration file (YAML), its lines as they are,
/// and nothing else: all the Nodes' gate reads of it, so all the controller keeps of the
/// ConfigMap (its other keys, a kubeconfig, and the rest of the file are dropped). Empty when
/// the file has none.
pub fn feature_gates_only(text: &str) -> String {
    let mut out = Vec::new();
    let mut under = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if trimmed.starts_with("featureGates:") {
            under = Some(indent);
            out.push(line);
            continue;
        }
        match under {
            Some(level) if indent > level => out.push(line),
            _ => under = None,
        }
    }
    out.join("\n")
}

/// The ConfigMaps the kube-proxy DaemonSet mounts (its configuration file: kubeadm's
/// `kube-system/kube-proxy`, key `config.conf`; EKS's `kube-proxy-config`), by namespace and
/// name, for the controller to watch by name: only where a load balancer's cure may be native
/// (`--cure` or its `cure` annotation other than `dns`), as only the native cure's gate reads
/// them.
pub fn kube_proxy_config_maps(
    snapshot: &ClusterSnapshot,
    config: &crate::PlannerConfig,
) -> Vec<(String, String)> {
    let key = config.annotation("cure");
    let may_be_native = snapshot
        .services
        .iter()
        .filter(|s| s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer"))
        .any(|svc| {
            let mode = svc
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(&key))
                .and_then(|v| v.parse::<crate::CureMode>().ok())
                .unwrap_or(config.cure);
            mode != crate::CureMode::Dns
        });
    let Some(w) = daemon_set(snapshot, "kube-proxy").filter(|_| may_be_native) else {
        return Vec::new();
    };
    let namespace = w.metadata.namespace.clone().unwrap_or_default();
    let mut out: Vec<(String, String)> = mounted_config_maps(w)
        .map(|name| (namespace.clone(), name.to_owned()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The names of the ConfigMaps `w` mounts as volumes.
fn mounted_config_maps(w: &Workload) -> impl Iterator<Item = &str> {
    w.spec()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| v.config_map.as_ref().map(|cm| cm.name.as_str()))
}

/// What kube-proxy's configuration says of its feature gates, for the data plane's
/// fingerprint (a change probes a proven cure again, as a DaemonSet's does):
/// `namespace/name featureGates {..}` per mounted ConfigMap in the snapshot that has them,
/// escaped and `; `-separated; empty when none does.
pub fn kube_proxy_config(snapshot: &ClusterSnapshot) -> String {
    let Some(w) = daemon_set(snapshot, "kube-proxy") else {
        return String::new();
    };
    let namespace = w.metadata.namespace.as_deref().unwrap_or_default();
    let mut parts = Vec::new();
    for name in mounted_config_maps(w) {
        let Some(data) = snapshot
            .config_map(namespace, name)
            .and_then(|cm| cm.data.as_ref())
        else {
            continue;
        };
        for (key, text) in data {
            let gates = feature_gates_only(text);
            if !gates.is_empty() {
                let gates: Vec<&str> = gates.lines().map(str::trim).collect();
                parts.push(
                    crate::escape::text(&format!("{namespace}/{name} {key} {}", gates.join(" ")))
                        .into_owned(),
                );
            }
        }
    }
    parts.join("; ")
}

/// Why kube-proxy's DaemonSet cannot honour `ipMode`: an image older than 1.30, or the gate off.
fn kube_proxy_bar(snapshot: &ClusterSnapshot, w: &Workload) -> Option<String> {
    let describe = crate::escape::text(&w.describe()).into_owned();
    if let Some((tag, (1, minor, _))) = image_version(w, &["kube-proxy"])
        && minor < IP_MODE_MINOR
    {
        return Some(format!(
            "{describe} runs kube-proxy {} (older than 1.30: it ignores ipMode)",
            crate::escape::text(tag)
        ));
    }
    let mut args = arguments(w).peekable();
    let mut flag_off = false;
    while let Some(arg) = args.next() {
        if let Some(value) = arg.strip_prefix("--feature-gates=") {
            flag_off |= gate_off_in_flag(value);
        } else if arg == "--feature-gates" {
            flag_off |= args.peek().is_some_and(|v| gate_off_in_flag(v));
        }
    }
    if flag_off {
        return Some(format!(
            "{describe} runs kube-proxy with --feature-gates LoadBalancerIPMode=false (it ignores ipMode)"
        ));
    }
    let namespace = w.metadata.namespace.as_deref().unwrap_or_default();
    for name in mounted_config_maps(w) {
        let Some(data) = snapshot
            .config_map(namespace, name)
            .and_then(|cm| cm.data.as_ref())
        else {
            continue;
        };
        if let Some(key) = data.iter().find(|(_, text)| gate_off_in_config(text)) {
            return Some(format!(
                "{describe} runs kube-proxy with featureGates LoadBalancerIPMode: false (ConfigMap {}/{} key {}: it ignores ipMode)",
                crate::escape::text(namespace),
                crate::escape::text(name),
                crate::escape::text(key.0)
            ));
        }
    }
    None
}

/// Whether Cilium replaces kube-proxy here: `kube-proxy-replacement` on in `cilium-config`, or
/// (without that ConfigMap) no kube-proxy DaemonSet.
fn cilium_replaces_kube_proxy(snapshot: &ClusterSnapshot, namespace: &str) -> bool {
    let setting = snapshot
        .config_map(namespace, "cilium-config")
        .and_then(|cm| cm.data.as_ref()?.get("kube-proxy-replacement").cloned());
    match setting {
        Some(value) => matches!(
            value.trim().to_ascii_lowercase().as_str(),
            "true" | "strict" | "partial"
        ),
        None => daemon_set(snapshot, "kube-proxy").is_none(),
    }
}

/// Why a CNI DaemonSet that replaces kube-proxy for pods cannot honour `ipMode`.
fn cni_bar(snapshot: &ClusterSnapshot, w: &Workload) -> Option<String> {
    let describe = crate::escape::text(&w.describe()).into_owned();
    let name = w.metadata.name.as_deref().unwrap_or_default();
    let namespace = w.metadata.namespace.as_deref().unwrap_or_default();
    let too_old = |what: &str, tag: &str, since: &str| {
        Some(format!(
            "{describe} runs {what} {} ({since}: it ignores ipMode)",
            crate::escape::text(tag)
        ))
    };
    match name {
        "cilium" | "cilium-agent" => {
            let (tag, (major, minor, patch)) = image_version(w, &["cilium"])?;
            if !cilium_replaces_kube_proxy(snapshot, namespace) {
                return None;
            }
            if (major, minor) < (1, 17) {
                too_old("Cilium", tag, "ipMode is honoured from 1.17")
            } else if (major, minor, patch) == (1, 18, 0) {
                too_old("Cilium", tag, "1.18.0 does not honour ipMode; 1.18.1 does")
            } else {
                None
            }
        }
        "antrea-agent" => {
            let (tag, (major, _, _)) = image_version(w, &["antrea"])?;
            (major < 2)
                .then(|| too_old("Antrea", tag, "ipMode is honoured from 2.0"))
                .flatten()
        }
        "kube-router" => {
            let (tag, (major, minor, _)) = image_version(w, &["kube-router"])?;
            let proxy_off = arguments(w).any(|a| a == "--run-service-proxy=false");
            ((major, minor) < (2, 9) && !proxy_off)
                .then(|| too_old("kube-router", tag, "ipMode is honoured from 2.9"))
                .flatten()
        }
        _ => None,
    }
}

/// The nodes whose data plane is known not to honour `ipMode`, sorted by node: each Node that
/// says so itself, and [`EVERY_NODE`] for a DaemonSet (kube-proxy or a CNI replacing it) that
/// does. Empty when nothing tells.
pub fn gate(snapshot: &ClusterSnapshot) -> Vec<NodeBar> {
    let mut barred: Vec<NodeBar> = snapshot
        .nodes
        .iter()
        .filter_map(|node| {
            Some(NodeBar {
                node: crate::escape::text(node.metadata.name.as_deref().unwrap_or_default())
                    .into_owned(),
                why: node_bar(node)?,
            })
        })
        .collect();
    for w in snapshot
        .receivers
        .workloads
        .iter()
        .filter(|w| w.kind == "DaemonSet")
    {
        let why = match w.metadata.name.as_deref() {
            Some("kube-proxy") => kube_proxy_bar(snapshot, w),
            Some(_) => cni_bar(snapshot, w),
            None => None,
        };
        if let Some(why) = why {
            barred.push(NodeBar {
                node: EVERY_NODE.to_owned(),
                why,
            });
        }
    }
    barred.sort();
    barred.dedup();
    barred
}

/// The gate's verdict in words, naming at most a few nodes: `node node-b (kubelet v1.29.9 is
/// older than 1.30: ...); node node-c (...) and 3 more`.
pub fn describe(barred: &[NodeBar]) -> String {
    const SHOWN: usize = 3;
    let mut text = barred
        .iter()
        .take(SHOWN)
        .map(|b| {
            if b.node == EVERY_NODE {
                format!("{EVERY_NODE} ({})", b.why)
            } else {
                format!("node {} ({})", b.node, b.why)
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    if barred.len() > SHOWN {
        text.push_str(&format!(" and {} more", barred.len() - SHOWN));
    }
    text
}

/// Where a cure stands with the nodes' reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodesVerdict {
    /// Every Node proved this attempt.
    Proven,
    /// Some nodes have not (yet): no report, an old heartbeat, another attempt. Named.
    Waiting(Vec<NodeBar>),
    /// A node proved it is not honoured: the cure ends (DNS first, then the put-back).
    Failed(NodeBar),
}

/// The node agents' verdict on the cure of `key` (the Service's `uid`, its `attempt`,
/// [`crate::native::NativeEntry::attempt`]), from `reports` ([`crate::node_probes`]) and the
/// `nodes` that run pods (the Node watch). No Node listed yet is waiting: nothing is vouched
/// for.
pub fn verdict(
    (key, uid, attempt): (&str, &str, &str),
    nodes: &[Node],
    reports: &[NodeReport],
) -> NodesVerdict {
    let mut waiting = Vec::new();
    let mut names: Vec<&str> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    names.sort_unstable();
    names.dedup();
    if names.is_empty() {
        return NodesVerdict::Waiting(vec![NodeBar {
            node: EVERY_NODE.to_owned(),
            why: "the Nodes are not listed yet".to_owned(),
        }]);
    }
    for name in names {
        let bar = |why: String| NodeBar {
            node: crate::escape::text(name).into_owned(),
            why,
        };
        let Some(report) = reports.iter().find(|r| r.node == name) else {
            waiting.push(bar(
                "no report from its node agent yet: its data plane is not vouched for".into(),
            ));
            continue;
        };
        let probes = match &report.probes {
            Ok(probes) => probes,
            Err(why) => {
                waiting.push(bar(format!(
                    "its node agent's report cannot be read: {why}"
                )));
                continue;
            }
        };
        let probe = probes
            .get(key)
            .filter(|p| p.uid == uid && p.attempt == attempt);
        match probe {
            // A failure of this attempt is evidence, however old the heartbeat.
            Some(p) if p.result == NodeResult::Failed => {
                return NodesVerdict::Failed(bar(format!(
                    "its node agent's probe failed: {}",
                    // Escaped by the agent; control characters again here (the Lease is
                    // another writer's).
                    crate::escape::controls(&p.reason)
                )));
            }
            _ if !report.fresh => waiting.push(bar(
                "its node agent's last report is too old (the agent is not running?)".into(),
            )),
            Some(_) => {}
            None => waiting.push(bar("its node agent has not proven this attempt yet".into())),
        }
    }
    if waiting.is_empty() {
        NodesVerdict::Proven
    } else {
        NodesVerdict::Waiting(waiting)
    }
}

#[cfg(test)]
mod tests;
