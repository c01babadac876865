//! Who handles in-cluster traffic to a load balancer's IP, and whether it honours
//! `status.loadBalancer.ingress[].ipMode: Proxy`: kube-proxy (its DaemonSet's image and its
//! configuration), or the CNI that replaces it for pods (Cilium, Calico's eBPF dataplane,
//! Antrea, kube-router). Pure: the objects are read by [`crate::cluster`].
//!
//! The rules, each from the implementation's source:
//! - kube-proxy honours `ipMode` in every mode from Kubernetes 1.30 (the `LoadBalancerIPMode`
//!   gate, beta and on by default; alpha and off in 1.29; GA in 1.32): the filter is in the
//!   shared `pkg/proxy/serviceport.go`, so `--feature-gates=LoadBalancerIPMode=false` (or
//!   `featureGates: {LoadBalancerIPMode: false}` in its KubeProxyConfiguration) turns it off.
//! - Cilium's kube-proxy replacement from 1.17.0, except 1.18.0 (fixed in 1.18.1).
//! - Antrea from 2.0 (AntreaProxy, which handles pods' Service traffic and proxies load
//!   balancer IPs by default); kube-router from 2.9 (its service proxy).
//! - Calico's eBPF dataplane builds its load balancer frontends from `LoadBalancerVIPs()` of the
//!   Kubernetes proxy library it vendors (`felix/bpf/proxy/syncer.go`,
//!   `k8sp.NewServiceChangeTracker` in `felix/bpf/proxy/proxy.go`), which leaves out the
//!   entries whose `ipMode` is `Proxy` once that library is 1.30's (the gate on by default):
//!   Calico 3.29 and later vendor it. Calico's iptables and nftables dataplanes leave Services
//!   to kube-proxy.

use hairpin_planner::escape::Text;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec};
use serde::Serialize;

pub(crate) use crate::facts::image_tag;
use crate::facts::{CiliumFacts, parse_semver};

/// kube-proxy's feature gate that makes it honour `ipMode`.
pub const IP_MODE_GATE: &str = "LoadBalancerIPMode";

/// kube-proxy, from its DaemonSet and the ConfigMap it mounts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KubeProxyFacts {
    /// The image tag, e.g. `v1.31.2` (EKS: `v1.31.2-eksbuild.3`).
    pub version: Option<String>,
    /// The proxy mode as configured (`iptables`, `ipvs`, `nftables`); None: the default
    /// (iptables on Linux).
    pub mode: Option<String>,
    /// Where the mode was read: `--proxy-mode`, or the ConfigMap key.
    pub mode_from: Option<String>,
    /// `LoadBalancerIPMode` as set, when it is set.
    pub ip_mode_gate: Option<bool>,
    /// Where the gate was set: `--feature-gates`, or the ConfigMap key.
    pub gate_from: Option<String>,
}

impl KubeProxyFacts {
    /// From the `kube-proxy` DaemonSet and `config_map`, the ConfigMap its pods mount
    /// ([`kube_proxy_config_map`]). Command-line flags win over the configuration file.
    pub fn read(daemon_set: &DaemonSet, config_map: Option<&ConfigMap>) -> KubeProxyFacts {
        let container = container(daemon_set, &["kube-proxy"]);
        let args = args_of(container);
        let mut facts = KubeProxyFacts {
            version: container
                .and_then(|c| c.image.as_deref())
                .and_then(image_tag),
            ..KubeProxyFacts::default()
        };
        let config_key = flag(&args, "--config")
            .and_then(|path| path.rsplit('/').next().map(str::to_owned))
            .filter(|key| !key.is_empty());
        if let Some((key, config)) = config_map.and_then(|cm| kube_proxy_config(cm, config_key)) {
            let from = format!(
                "ConfigMap {}/{} {}",
                Text(cm_namespace(config_map)),
                Text(cm_name(config_map)),
                Text(&key)
            );
            if let Some(mode) = config["mode"].as_str().filter(|m| !m.is_empty()) {
                facts.mode = Some(mode.to_owned());
                facts.mode_from = Some(from.clone());
            }
            if let Some(gate) = gate_value(&config["featureGates"][IP_MODE_GATE]) {
                facts.ip_mode_gate = Some(gate);
                facts.gate_from = Some(from);
            }
        }
        if let Some(mode) = flag(&args, "--proxy-mode").filter(|m| !m.is_empty()) {
            facts.mode = Some(mode);
            facts.mode_from = Some("--proxy-mode".into());
        }
        if let Some(gate) = flag(&args, "--feature-gates").and_then(|gates| gate_in(&gates)) {
            facts.ip_mode_gate = Some(gate);
            facts.gate_from = Some("--feature-gates".into());
        }
        facts
    }

    /// Whether this kube-proxy honours `ipMode: Proxy`, and why; None when its version is
    /// unknown (then `kubernetes`, the API server's, stands in for it).
    pub fn honours(&self, kubernetes: Option<(u32, u32)>) -> (Option<bool>, String) {
        if self.ip_mode_gate == Some(false) {
            return (
                Some(false),
                format!(
                    "ignores ipMode: `{IP_MODE_GATE}=false` ({})",
                    self.gate_from.as_deref().unwrap_or("feature gates")
                ),
            );
        }
        let version = self
            .version
            .as_deref()
            .and_then(parse_semver)
            .map(|(major, minor, _)| (major, minor))
            .or(kubernetes);
        match version {
            Some(v) if v >= (1, 30) => (
                Some(true),
                "honours ipMode: Proxy (from Kubernetes 1.30, LoadBalancerIPMode on by default)"
                    .into(),
            ),
            Some(v) if v == (1, 29) && self.ip_mode_gate == Some(true) => (
                Some(true),
                "honours ipMode: Proxy (1.29 with the alpha LoadBalancerIPMode gate on)".into(),
            ),
            Some((major, minor)) => (
                Some(false),
                format!(
                    "ignores ipMode: Kubernetes {major}.{minor} (it is honoured from 1.30, \
                     LoadBalancerIPMode)"
                ),
            ),
            None => (
                None,
                "version unknown: it honours ipMode from Kubernetes 1.30 (LoadBalancerIPMode)"
                    .into(),
            ),
        }
    }

    /// `kube-proxy v1.31.2 (iptables)`.
    pub fn describe(&self) -> String {
        format!(
            "kube-proxy {} ({}{})",
            Text(self.version.as_deref().unwrap_or("(version unknown)")),
            Text(self.mode.as_deref().unwrap_or("iptables")),
            if self.mode.is_none() {
                ", the default"
            } else {
                ""
            }
        )
    }
}

fn cm_namespace(cm: Option<&ConfigMap>) -> &str {
    cm.and_then(|cm| cm.metadata.namespace.as_deref())
        .unwrap_or_default()
}

fn cm_name(cm: Option<&ConfigMap>) -> &str {
    cm.and_then(|cm| cm.metadata.name.as_deref())
        .unwrap_or_default()
}

/// The name of the ConfigMap the kube-proxy pods mount (kubeadm: `kube-proxy`; EKS:
/// `kube-proxy-config`), else `kube-proxy`.
pub fn kube_proxy_config_map(daemon_set: &DaemonSet) -> String {
    pod_spec(daemon_set)
        .and_then(|pod| pod.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|volume| volume.config_map.as_ref().map(|cm| cm.name.clone()))
        .find(|name| name.contains("kube-proxy"))
        .unwrap_or_else(|| "kube-proxy".into())
}

/// The KubeProxyConfiguration in `cm`: at `key` (the `--config` file name), else
/// `config.conf` (kubeadm), `config` (EKS), else the first value of that kind.
fn kube_proxy_config(cm: &ConfigMap, key: Option<String>) -> Option<(String, serde_json::Value)> {
    let data = cm.data.as_ref()?;
    let parse = |text: &str| serde_saphyr::from_str::<serde_json::Value>(text).ok();
    let named = key
        .into_iter()
        .chain(["config.conf".to_owned(), "config".to_owned()])
        .find_map(|key| Some((key.clone(), parse(data.get(&key)?)?)));
    named.or_else(|| {
        data.iter().find_map(|(key, text)| {
            let value = parse(text)?;
            (value["kind"] == "KubeProxyConfiguration").then(|| (key.clone(), value))
        })
    })
}

/// A YAML feature gate value: `true`/`false`, or their strings.
fn gate_value(value: &serde_json::Value) -> Option<bool> {
    match value {
        serde_json::Value::Bool(b) => Some(*b),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// `LoadBalancerIPMode` in a `--feature-gates` list (`A=true,LoadBalancerIPMode=false`).
fn gate_in(gates: &str) -> Option<bool> {
    gates.split(',').find_map(|gate| {
        let (name, value) = gate.split_once('=')?;
        (name.trim() == IP_MODE_GATE)
            .then(|| value.trim().parse().ok())
            .flatten()
    })
}

/// The value of `--name=value` or `--name value` in `args`.
pub(crate) fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter().enumerate().find_map(|(i, arg)| {
        if let Some(value) = arg.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            return Some(value.to_owned());
        }
        (arg == name).then(|| args.get(i + 1).cloned()).flatten()
    })
}

fn pod_spec(daemon_set: &DaemonSet) -> Option<&PodSpec> {
    daemon_set.spec.as_ref()?.template.spec.as_ref()
}

/// The container named one of `names`, else the first.
pub(crate) fn container<'a>(daemon_set: &'a DaemonSet, names: &[&str]) -> Option<&'a Container> {
    let containers = &pod_spec(daemon_set)?.containers;
    containers
        .iter()
        .find(|c| names.contains(&c.name.as_str()))
        .or_else(|| containers.first())
}

/// Every command and argument of `container`.
pub(crate) fn args_of(container: Option<&Container>) -> Vec<String> {
    container
        .map(|c| c.command.iter().flatten().chain(c.args.iter().flatten()))
        .into_iter()
        .flatten()
        .cloned()
        .collect()
}

/// A CNI agent other than Cilium that may handle Services itself: its version and whether it
/// does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AgentFacts {
    /// The agent image's tag.
    pub version: Option<String>,
    /// Whether it handles pods' traffic to load balancer IPs itself (Calico: the eBPF
    /// dataplane; kube-router: its service proxy; Antrea: AntreaProxy); None: unknown.
    pub handles_services: Option<bool>,
    /// The setting that says so, as read (`linuxDataplane: BPF`, `--run-service-proxy=false`).
    pub setting: Option<String>,
}

impl AgentFacts {
    /// Antrea, from its `antrea-agent` DaemonSet: AntreaProxy is on by default and proxies
    /// load balancer IPs (`proxyLoadBalancerIPs` defaults to true).
    pub fn antrea(daemon_set: &DaemonSet) -> AgentFacts {
        AgentFacts {
            version: agent_version(daemon_set, &["antrea-agent"]),
            handles_services: Some(true),
            setting: Some("AntreaProxy (on by default)".into()),
        }
    }

    /// kube-router, from its DaemonSet: the service proxy unless `--run-service-proxy=false`.
    pub fn kube_router(daemon_set: &DaemonSet) -> AgentFacts {
        let args = args_of(container(daemon_set, &["kube-router"]));
        let proxy = flag(&args, "--run-service-proxy");
        AgentFacts {
            version: agent_version(daemon_set, &["kube-router"]),
            handles_services: Some(proxy.as_deref().is_none_or(|v| v.trim() != "false")),
            setting: proxy.map(|v| format!("--run-service-proxy={}", Text(&v))),
        }
    }

    /// Calico, from its `calico-node` DaemonSet and the eBPF setting found (`ebpf`: where
    /// and what), or None when no setting was found (the iptables dataplane by default).
    pub fn calico(daemon_set: &DaemonSet, ebpf: Option<(bool, String)>) -> AgentFacts {
        let env_bpf = container(daemon_set, &["calico-node"])
            .and_then(|c| c.env.as_ref())
            .and_then(|env| env.iter().find(|e| e.name == "FELIX_BPFENABLED"))
            .and_then(|e| e.value.as_deref())
            .map(|v| {
                (
                    v.trim().eq_ignore_ascii_case("true"),
                    format!("FELIX_BPFENABLED={}", Text(v)),
                )
            });
        let (handles, setting) = match ebpf.or(env_bpf) {
            Some((on, setting)) => (Some(on), Some(setting)),
            None => (Some(false), None),
        };
        AgentFacts {
            version: agent_version(daemon_set, &["calico-node"]),
            handles_services: handles,
            setting,
        }
    }
}

fn agent_version(daemon_set: &DaemonSet, names: &[&str]) -> Option<String> {
    container(daemon_set, names)
        .and_then(|c| c.image.as_deref())
        .and_then(image_tag)
}

/// Who handles Services, as far as the doctor can tell.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CniFacts {
    /// Cilium, when its DaemonSet or its `cilium-config` ConfigMap is in kube-system.
    pub cilium: Option<CiliumFacts>,
    /// Calico (`calico-node` in kube-system or calico-system).
    pub calico: Option<AgentFacts>,
    /// Antrea (`antrea-agent` in kube-system).
    pub antrea: Option<AgentFacts>,
    /// kube-router (`kube-router` in kube-system).
    pub kube_router: Option<AgentFacts>,
}

/// Who handles pods' traffic to load balancer IPs, and whether it honours `ipMode: Proxy`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IpModeSupport {
    /// The implementation, e.g. `kube-proxy v1.31.2 (iptables)` (escaped).
    pub handler: String,
    /// Whether it honours `ipMode: Proxy`; None: unknown.
    pub honours: Option<bool>,
    /// Why, in words (escaped).
    pub why: String,
}

impl IpModeSupport {
    /// `kube-proxy v1.31.2 (iptables) honours ipMode: Proxy (...)`.
    pub fn describe(&self) -> String {
        format!("{} {}", self.handler, self.why)
    }
}

/// Who handles pods' traffic to load balancer IPs (the CNI when it replaces kube-proxy for
/// them, else kube-proxy), and whether it honours `ipMode: Proxy`. `kube_proxy_read`: the
/// kube-proxy DaemonSet could be read (its absence then means none runs).
pub fn ip_mode_support(
    kube_proxy: Option<&KubeProxyFacts>,
    cni: &CniFacts,
    kubernetes: Option<(u32, u32)>,
    kube_proxy_read: bool,
) -> IpModeSupport {
    if let Some(cilium) = &cni.cilium
        && cilium.replaces_kube_proxy != Some(false)
    {
        return cilium_support(cilium);
    }
    let agents = [
        ("Calico", cni.calico.as_ref(), (3, 29, 0), "eBPF dataplane"),
        ("Antrea", cni.antrea.as_ref(), (2, 0, 0), "AntreaProxy"),
        (
            "kube-router",
            cni.kube_router.as_ref(),
            (2, 9, 0),
            "service proxy",
        ),
    ];
    for (name, agent, since, part) in agents {
        if let Some(agent) = agent
            && agent.handles_services == Some(true)
        {
            return agent_support(name, agent, since, part);
        }
    }
    match kube_proxy {
        Some(kube_proxy) => {
            let (honours, why) = kube_proxy.honours(kubernetes);
            IpModeSupport {
                handler: kube_proxy.describe(),
                honours,
                why,
            }
        }
        None => IpModeSupport {
            handler: "no kube-proxy".into(),
            honours: None,
            why: if kube_proxy_read {
                "DaemonSet kube-system/kube-proxy is absent and no known kube-proxy \
                 replacement (Cilium, Calico eBPF, Antrea, kube-router) was found: whatever \
                 handles Services decides whether ipMode is honoured"
                    .into()
            } else {
                "could not be read (see the gaps): whether ipMode is honoured is unknown".into()
            },
        },
    }
}

fn cilium_support(cilium: &CiliumFacts) -> IpModeSupport {
    let version = Text(cilium.version.as_deref().unwrap_or("(version unknown)"));
    let kpr = Text(cilium.kube_proxy_replacement.as_deref().unwrap_or("absent"));
    let handler = format!("Cilium {version} kube-proxy replacement (kube-proxy-replacement={kpr})");
    let (honours, why) = match (cilium.replaces_kube_proxy, cilium.ignores_ip_mode) {
        (None, _) => (
            None,
            "handles some Services itself, depending on the features on: ipMode is ignored \
             by Cilium before 1.17 and 1.18.0"
                .to_owned(),
        ),
        (_, Some(true)) => (
            Some(false),
            "ignores ipMode (needs >= 1.17, not 1.18.0)".to_owned(),
        ),
        (_, Some(false)) => (
            Some(true),
            "honours ipMode: Proxy (1.17 and later, not 1.18.0)".to_owned(),
        ),
        (_, None) => (
            None,
            "of unknown version: it honours ipMode from 1.17, not 1.18.0".to_owned(),
        ),
    };
    IpModeSupport {
        handler,
        honours,
        why,
    }
}

fn agent_support(
    name: &str,
    agent: &AgentFacts,
    (major, minor, patch): (u32, u32, u32),
    part: &str,
) -> IpModeSupport {
    let version = agent.version.as_deref();
    let setting = agent
        .setting
        .as_deref()
        .map_or(String::new(), |s| format!(", {s}"));
    let handler = format!(
        "{name} {} {part}{setting}",
        Text(version.unwrap_or("(version unknown)"))
    );
    let since = if patch == 0 {
        format!("{major}.{minor}")
    } else {
        format!("{major}.{minor}.{patch}")
    };
    let (honours, why) = match version.and_then(parse_semver) {
        Some(v) if v >= (major, minor, patch) => (
            Some(true),
            format!("honours ipMode: Proxy ({since} and later)"),
        ),
        Some(_) => (Some(false), format!("ignores ipMode (needs >= {since})")),
        None => (
            None,
            format!("of unknown version: it honours ipMode from {since}"),
        ),
    };
    IpModeSupport {
        handler,
        honours,
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn daemon_set(value: serde_json::Value) -> DaemonSet {
        serde_json::from_value(value).unwrap()
    }

    fn kube_proxy_ds(image: &str, args: &[&str]) -> DaemonSet {
        daemon_set(serde_json::json!({
            "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
            "spec": {"selector": {}, "template": {"spec": {
                "containers": [{"name": "kube-proxy", "image": image,
                    "command": ["/usr/local/bin/kube-proxy"], "args": args}],
                "volumes": [{"name": "kube-proxy", "configMap": {"name": "kube-proxy"}}]
            }}}
        }))
    }

    fn config_map(key: &str, text: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
            "data": {key: text}
        }))
        .unwrap()
    }

    #[test]
    fn kube_proxy_mode_and_gate_come_from_the_config_map_and_flags_win() {
        let ds = kube_proxy_ds(
            "registry.k8s.io/kube-proxy:v1.31.2",
            &[
                "--config=/var/lib/kube-proxy/config.conf",
                "--hostname-override=$(NODE_NAME)",
            ],
        );
        assert_eq!(kube_proxy_config_map(&ds), "kube-proxy");
        let cm = config_map(
            "config.conf",
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\nfeatureGates:\n  LoadBalancerIPMode: false\n",
        );
        let facts = KubeProxyFacts::read(&ds, Some(&cm));
        assert_eq!(facts.version.as_deref(), Some("v1.31.2"));
        assert_eq!(facts.mode.as_deref(), Some("nftables"));
        assert_eq!(facts.ip_mode_gate, Some(false));
        assert_eq!(
            facts.gate_from.as_deref(),
            Some("ConfigMap kube-system/kube-proxy config.conf")
        );
        let (honours, why) = facts.honours(None);
        assert_eq!(honours, Some(false), "{why}");
        assert!(why.contains("LoadBalancerIPMode=false"), "{why}");

        // Flags win; an empty mode is the default.
        let ds = kube_proxy_ds(
            "registry.k8s.io/kube-proxy:v1.29.4",
            &[
                "--proxy-mode",
                "ipvs",
                "--feature-gates=Foo=true,LoadBalancerIPMode=true",
            ],
        );
        let cm = config_map("config.conf", "kind: KubeProxyConfiguration\nmode: \"\"\n");
        let facts = KubeProxyFacts::read(&ds, Some(&cm));
        assert_eq!(facts.mode.as_deref(), Some("ipvs"));
        assert_eq!(facts.mode_from.as_deref(), Some("--proxy-mode"));
        assert_eq!(
            facts.honours(None).0,
            Some(true),
            "1.29 with the alpha gate"
        );
        let plain = KubeProxyFacts::read(&kube_proxy_ds("kube-proxy:v1.29.4", &[]), None);
        assert_eq!(plain.honours(None).0, Some(false));
        assert!(plain.describe().contains("iptables, the default"));
        let unknown = KubeProxyFacts::read(&kube_proxy_ds("kube-proxy:latest", &[]), None);
        assert_eq!(unknown.honours(None).0, None);
        assert_eq!(unknown.honours(Some((1, 32))).0, Some(true));
        // EKS: key `config`, tags with a build suffix.
        let eks = KubeProxyFacts::read(
            &kube_proxy_ds(
                "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/kube-proxy:v1.30.0-eksbuild.3",
                &[],
            ),
            Some(&config_map(
                "config",
                "kind: KubeProxyConfiguration\nmode: ipvs\n",
            )),
        );
        assert_eq!(eks.mode.as_deref(), Some("ipvs"));
        assert_eq!(eks.honours(None).0, Some(true));
    }

    fn agent(version: &str) -> Option<AgentFacts> {
        Some(AgentFacts {
            version: Some(version.into()),
            handles_services: Some(true),
            setting: None,
        })
    }

    #[test]
    fn the_cni_that_replaces_kube_proxy_decides() {
        let kube_proxy = KubeProxyFacts {
            version: Some("v1.31.2".into()),
            ..KubeProxyFacts::default()
        };
        let plain = ip_mode_support(Some(&kube_proxy), &CniFacts::default(), None, true);
        assert_eq!(plain.honours, Some(true));
        for (cni, honours) in [
            (
                CniFacts {
                    calico: agent("v3.28.2"),
                    ..CniFacts::default()
                },
                Some(false),
            ),
            (
                CniFacts {
                    calico: agent("v3.29.0"),
                    ..CniFacts::default()
                },
                Some(true),
            ),
            (
                CniFacts {
                    antrea: agent("v1.15.1"),
                    ..CniFacts::default()
                },
                Some(false),
            ),
            (
                CniFacts {
                    antrea: agent("v2.0.0"),
                    ..CniFacts::default()
                },
                Some(true),
            ),
            (
                CniFacts {
                    kube_router: agent("v2.8.1"),
                    ..CniFacts::default()
                },
                Some(false),
            ),
            (
                CniFacts {
                    kube_router: agent("v2.9.0"),
                    ..CniFacts::default()
                },
                Some(true),
            ),
            (
                CniFacts {
                    cilium: Some(CiliumFacts::new(Some("cilium:v1.16.5"), Some("true"))),
                    ..CniFacts::default()
                },
                Some(false),
            ),
            (
                CniFacts {
                    cilium: Some(CiliumFacts::new(Some("cilium:v1.16.5"), Some("false"))),
                    ..CniFacts::default()
                },
                Some(true),
            ),
        ] {
            let support = ip_mode_support(Some(&kube_proxy), &cni, None, true);
            assert_eq!(support.honours, honours, "{cni:?}: {support:?}");
        }
        let none = ip_mode_support(None, &CniFacts::default(), Some((1, 31)), true);
        assert_eq!(none.honours, None);
        assert!(none.why.contains("absent"), "{none:?}");
    }

    #[test]
    fn kube_router_and_calico_settings_are_read() {
        let router = daemon_set(serde_json::json!({
            "spec": {"selector": {}, "template": {"spec": {"containers": [{
                "name": "kube-router", "image": "docker.io/cloudnativelabs/kube-router:v2.9.1",
                "args": ["--run-router=true", "--run-service-proxy=false"]}]}}}
        }));
        let facts = AgentFacts::kube_router(&router);
        assert_eq!(facts.handles_services, Some(false));
        assert_eq!(facts.version.as_deref(), Some("v2.9.1"));
        let calico = daemon_set(serde_json::json!({
            "spec": {"selector": {}, "template": {"spec": {"containers": [{
                "name": "calico-node", "image": "docker.io/calico/node:v3.29.1",
                "env": [{"name": "FELIX_BPFENABLED", "value": "true"}]}]}}}
        }));
        assert_eq!(
            AgentFacts::calico(&calico, None).handles_services,
            Some(true)
        );
        let off = AgentFacts::calico(
            &calico,
            Some((false, "FelixConfiguration default bpfEnabled: false".into())),
        );
        assert_eq!(off.handles_services, Some(false));
    }
}
