//! Planner settings. Every field has a default that fits the common case; `hairpin plan` and
//! `hairpin controller` expose each one as a flag with an environment variable.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::name::{DnsName, Host};

/// How hairpin cures a load balancer that needs it ([`crate::native`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CureMode {
    /// `native` where it is proven on this cluster (hairpin sets `ipMode: Proxy`, then probes
    /// the load balancer's address from inside the cluster), `dns` until then and where not.
    Auto,
    /// Always `ipMode: Proxy` (no DNS rules), proven or not: for clusters known to honour it.
    Native,
    /// Always the DNS cure (CoreDNS rules pointing the names at hairpin's proxy); hairpin
    /// never touches a load balancer's status. The library's default, so that code driving
    /// the planner (tests, `hairpin plan` callers) opts in to status writes; the CLI defaults
    /// to `auto`.
    #[default]
    Dns,
}

impl CureMode {
    /// The lowercase name used on the command line, in annotations and in the plan.
    pub fn as_str(self) -> &'static str {
        match self {
            CureMode::Auto => "auto",
            CureMode::Native => "native",
            CureMode::Dns => "dns",
        }
    }
}

impl std::str::FromStr for CureMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(CureMode::Auto),
            "native" => Ok(CureMode::Native),
            "dns" => Ok(CureMode::Dns),
            _ => Err(format!(
                "unknown cure {:?} (expected auto, native or dns)",
                crate::escape::Text(s)
            )),
        }
    }
}

/// How the DNS override is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DnsMode {
    /// `custom` when the Corefile imports `coredns-custom`'s `*.override` keys (k3s, AKS, LKE,
    /// Gardener), otherwise `corefile`.
    #[default]
    Auto,
    /// A marked block inside the Corefile's server block that holds the `kubernetes` plugin.
    Corefile,
    /// A `hairpin.override` key in the `coredns-custom` ConfigMap.
    Custom,
    /// No DNS ConfigMap is written: the hostnames are published as external-dns `DNSEndpoint`
    /// objects in hairpin's namespace, for a private external-dns instance
    /// ([`crate::external_dns`]). For clusters whose DNS hairpin cannot edit.
    #[serde(rename = "external-dns")]
    ExternalDns,
}

impl DnsMode {
    /// The lowercase name used on the command line and in the plan.
    pub fn as_str(self) -> &'static str {
        match self {
            DnsMode::Auto => "auto",
            DnsMode::Corefile => "corefile",
            DnsMode::Custom => "custom",
            DnsMode::ExternalDns => "external-dns",
        }
    }
}

impl std::str::FromStr for DnsMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(DnsMode::Auto),
            "corefile" => Ok(DnsMode::Corefile),
            "custom" => Ok(DnsMode::Custom),
            "external-dns" => Ok(DnsMode::ExternalDns),
            other => Err(format!(
                "unknown DNS mode {other:?} (expected auto, corefile, custom or external-dns)"
            )),
        }
    }
}

/// Whether hairpin writes node-local-dns's Corefile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeLocalDns {
    /// Write a marked block into each node-local-dns ConfigMap found.
    #[default]
    Auto,
    /// Leave node-local-dns alone; warn about the names it answers from upstream.
    Off,
}

impl std::str::FromStr for NodeLocalDns {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(NodeLocalDns::Auto),
            "off" => Ok(NodeLocalDns::Off),
            other => Err(format!(
                "unknown node-local-dns setting {other:?} (expected auto or off)"
            )),
        }
    }
}

/// Whether hostnames are checked by resolution before they are redirected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifyMode {
    /// A name is redirected only when the upstream DNS resolves it to its load balancer.
    #[default]
    Resolve,
    /// Every admitted name is redirected without asking (air-gapped clusters, whose upstream
    /// cannot answer for the public names).
    Off,
}

impl VerifyMode {
    /// `resolve` or `off`, as on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            VerifyMode::Resolve => "resolve",
            VerifyMode::Off => "off",
        }
    }
}

impl std::str::FromStr for VerifyMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "resolve" => Ok(VerifyMode::Resolve),
            "off" => Ok(VerifyMode::Off),
            other => Err(format!(
                "unknown hostname verification {other:?} (expected resolve or off)"
            )),
        }
    }
}

impl std::fmt::Display for VerifyMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `--stub-domain-nameserver`: what kube-dns accepts in a stub domain's list, an IP or
/// `ip:port` (`[v6]:port`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StubNameserver {
    /// Port 53.
    Ip(IpAddr),
    /// Another port.
    IpPort(SocketAddr),
}

impl std::fmt::Display for StubNameserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StubNameserver::Ip(ip) => ip.fmt(f),
            StubNameserver::IpPort(address) => address.fmt(f),
        }
    }
}

impl Serialize for StubNameserver {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl std::str::FromStr for StubNameserver {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let parsed = match s.parse::<IpAddr>() {
            Ok(ip) => StubNameserver::Ip(ip),
            Err(_) => StubNameserver::IpPort(s.parse::<SocketAddr>().map_err(|_| {
                format!(
                    "{s:?} is not a nameserver address: give an IP (10.96.0.53) or IP and \
                     port (10.96.0.53:5353, [fd00::53]:5353)"
                )
            })?),
        };
        let ip = match parsed {
            StubNameserver::Ip(ip) => ip,
            StubNameserver::IpPort(address) if address.port() == 0 => {
                return Err(format!("{s:?}: port 0 is not a nameserver port"));
            }
            StubNameserver::IpPort(address) => address.ip(),
        };
        // kube-dns would send the queries to itself (loopback) or nowhere.
        if ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() {
            return Err(format!(
                "{s:?} is a loopback, unspecified or multicast address: give the address of \
                 the DNS server kube-dns forwards to, such as its Service's ClusterIP"
            ));
        }
        Ok(parsed)
    }
}

/// Who may have their hostnames redirected, by the namespace of the object that states them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NamespacePolicy {
    /// Any namespace (the default).
    #[default]
    Any,
    /// These namespaces.
    Names(BTreeSet<String>),
    /// Namespaces whose labels match (every requirement); needs the Namespace objects.
    Selector(Vec<LabelRequirement>),
}

/// One `key=value` or `key!=value` requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LabelRequirement {
    /// The label key.
    pub key: String,
    /// The value compared with.
    pub value: String,
    /// `true` for `=`/`==`, `false` for `!=`.
    pub equals: bool,
}

impl LabelRequirement {
    pub(crate) fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let value = labels.and_then(|l| l.get(&self.key));
        (value == Some(&self.value)) == self.equals
    }
}

impl std::str::FromStr for NamespacePolicy {
    type Err = String;

    /// Empty: any namespace. `a,b`: those namespaces. `team=web,env!=dev`: a label selector
    /// (equality requirements only). A list mixing the two forms is an error.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let items: Vec<&str> = s
            .split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .collect();
        if items.is_empty() {
            return Ok(NamespacePolicy::Any);
        }
        let is_requirement = |i: &&str| i.contains('=');
        if items.iter().all(is_requirement) {
            return items
                .iter()
                .map(|item| {
                    let (key, value, equals) = if let Some((k, v)) = item.split_once("!=") {
                        (k, v, false)
                    } else if let Some((k, v)) = item.split_once("==") {
                        (k, v, true)
                    } else {
                        let (k, v) = item.split_once('=').unwrap_or((item, ""));
                        (k, v, true)
                    };
                    let (key, value) = (key.trim(), value.trim());
                    if key.is_empty()
                        || !valid_label_part(key, true)
                        || !valid_label_part(value, false)
                    {
                        return Err(format!("invalid label requirement {item:?}"));
                    }
                    Ok(LabelRequirement {
                        key: key.to_owned(),
                        value: value.to_owned(),
                        equals,
                    })
                })
                .collect::<Result<_, _>>()
                .map(NamespacePolicy::Selector);
        }
        if items.iter().any(is_requirement) {
            return Err(format!(
                "{s:?} mixes namespace names and label requirements; give one or the other"
            ));
        }
        for item in &items {
            if !DnsName::parse(item).is_ok_and(|n| n.label_count() == 1 && n.as_str() == *item) {
                return Err(format!("{item:?} is not a namespace name"));
            }
        }
        Ok(NamespacePolicy::Names(
            items.into_iter().map(str::to_owned).collect(),
        ))
    }
}

/// A label key (`prefix/name`) or value, as Kubernetes accepts them (values may be empty).
fn valid_label_part(s: &str, key: bool) -> bool {
    let name = if key {
        match s.split_once('/') {
            Some((prefix, name)) => {
                if DnsName::parse(prefix).is_err() {
                    return false;
                }
                name
            }
            None => s,
        }
    } else {
        s
    };
    if name.is_empty() {
        return !key;
    }
    name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

impl NamespacePolicy {
    /// `--hostname-namespaces` as written back: empty for any.
    pub fn describe(&self) -> String {
        match self {
            NamespacePolicy::Any => "any namespace".into(),
            NamespacePolicy::Names(names) => {
                format!(
                    "namespaces {}",
                    names.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            }
            NamespacePolicy::Selector(reqs) => {
                let reqs: Vec<String> = reqs
                    .iter()
                    .map(|r| format!("{}{}{}", r.key, if r.equals { "=" } else { "!=" }, r.value))
                    .collect();
                format!("namespaces labelled {}", reqs.join(","))
            }
        }
    }

    /// Whether Namespace objects are needed (to match labels).
    pub fn needs_namespaces(&self) -> bool {
        matches!(self, NamespacePolicy::Selector(_))
    }
}

/// Admission settings (part of [`crate::PlannerConfig`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AdmissionConfig {
    /// Zones never redirected, besides the built-in ones (`--deny-hostnames`): a name denies
    /// itself and every name under it; `*.name` denies only the names under it.
    pub deny_hostnames: Vec<Host>,
    /// Which namespaces may claim hostnames (`--hostname-namespaces`).
    pub hostname_namespaces: NamespacePolicy,
}

/// Key of the hosts block in the ConfigMap the controller publishes for the node agents.
pub const HOSTS_KEY: &str = "hosts.json";

/// Planner settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannerConfig {
    /// Our namespace: hairpin Services and the routes ConfigMap live here.
    pub namespace: String,
    /// Labels of the proxy pods; the hairpin Services select them.
    pub proxy_selector: BTreeMap<String, String>,
    /// Namespace of the CoreDNS ConfigMaps.
    pub coredns_namespace: String,
    /// Candidate names of the CoreDNS ConfigMap, tried in order; the first present one is used.
    pub coredns_config_maps: Vec<String>,
    /// Key of the Corefile inside the CoreDNS ConfigMap.
    pub corefile_key: String,
    /// Name of the `coredns-custom` ConfigMap (k3s, AKS, LKE, Gardener).
    pub coredns_custom_config_map: String,
    /// Key we own inside `coredns-custom`.
    pub coredns_custom_key: String,
    /// Names of node-local-dns ConfigMaps (in `node_local_dns_namespace`): node-local-dns
    /// answers before CoreDNS sees the query, so hairpin writes there too.
    pub node_local_dns_config_maps: Vec<String>,
    /// Namespace of the node-local-dns ConfigMaps.
    pub node_local_dns_namespace: String,
    /// Whether node-local-dns is written.
    pub node_local_dns: NodeLocalDns,
    /// DNS mode.
    pub dns_mode: DnsMode,
    /// First proxy listener port; ports are allocated upwards from here.
    pub listener_port_base: u16,
    /// Prefix of our annotations (`hairpin.io/` gives `hairpin.io/proxy-protocol`).
    pub annotation_prefix: String,
    /// Name of the ConfigMap holding the proxy route table.
    pub routes_config_map: String,
    /// Key of the route table inside that ConfigMap.
    pub routes_key: String,
    /// Name of the ConfigMap (in `namespace`) holding the node agents' hosts block.
    pub hosts_config_map: String,
    /// Key of the hosts block inside that ConfigMap ([`crate::hosts::entries_json`]).
    pub hosts_key: String,
    /// `--cluster-domain`: the cluster domain when the Corefile's `kubernetes` plugin names
    /// none (no zone, or a placeholder); `cluster.local` when this is unset too.
    pub cluster_domain: Option<String>,
    /// Which hostnames may be redirected, and on whose word ([`crate::admission`]).
    pub admission: AdmissionConfig,
    /// `hairpin plan --stub-domain-nameserver`: on a kube-dns cluster, the DNS servers its
    /// `stubDomains` value points the hostnames at ([`crate::kube_dns`]); empty: none known.
    pub stub_domain_nameservers: Vec<StubNameserver>,
    /// Whether a hostname must resolve upstream to its load balancer to be redirected
    /// ([`crate::verify`]). The value built by `default()` is [`VerifyMode::Off`]: the planner
    /// alone resolves nothing, and a caller that does not feed
    /// [`crate::ClusterSnapshot::resolutions`] gets the admitted names planned as before. The
    /// controller and `hairpin plan` default to [`VerifyMode::Resolve`]
    /// (`--verify-hostnames`).
    pub verify_hostnames: VerifyMode,
    /// How load balancers are cured ([`CureMode`]); the annotation `<prefix>/cure` on a
    /// Service overrides it for that load balancer.
    pub cure: CureMode,
    /// hairpin's ConfigMap (in `namespace`) recording the load balancer statuses it set to
    /// `ipMode: Proxy`, what they said before, and the probe's verdict
    /// ([`crate::native::NativeRecord`]).
    pub native_config_map: String,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        Self {
            namespace: "hairpin".into(),
            proxy_selector: BTreeMap::from([
                ("app.kubernetes.io/name".into(), "hairpin".into()),
                ("app.kubernetes.io/component".into(), "proxy".into()),
            ]),
            coredns_namespace: "kube-system".into(),
            coredns_config_maps: vec![
                "coredns".into(),
                "rke2-coredns-rke2-coredns".into(),
                "coredns-base".into(),
                "kube-dns".into(),
            ],
            corefile_key: "Corefile".into(),
            coredns_custom_config_map: "coredns-custom".into(),
            coredns_custom_key: "hairpin.override".into(),
            // Kubernetes' addon (and RKE) name it `node-local-dns`, kubespray `nodelocaldns`.
            node_local_dns_config_maps: vec!["node-local-dns".into(), "nodelocaldns".into()],
            node_local_dns_namespace: "kube-system".into(),
            node_local_dns: NodeLocalDns::Auto,
            dns_mode: DnsMode::Auto,
            listener_port_base: 10000,
            annotation_prefix: "hairpin.io/".into(),
            routes_config_map: "hairpin-routes".into(),
            routes_key: "routes.json".into(),
            hosts_config_map: "hairpin-hosts".into(),
            hosts_key: HOSTS_KEY.into(),
            cluster_domain: None,
            admission: AdmissionConfig::default(),
            stub_domain_nameservers: Vec::new(),
            verify_hostnames: VerifyMode::Off,
            cure: CureMode::Dns,
            native_config_map: "hairpin-native".into(),
        }
    }
}

impl PlannerConfig {
    /// Every ConfigMap holding a Corefile hairpin edits, as `(namespace, name)`: the CoreDNS
    /// candidates, then node-local-dns's.
    pub fn corefile_config_maps(&self) -> impl Iterator<Item = (&str, &str)> {
        let coredns = self
            .coredns_config_maps
            .iter()
            .map(|name| (self.coredns_namespace.as_str(), name.as_str()));
        let node_local = self
            .node_local_dns_config_maps
            .iter()
            .map(|name| (self.node_local_dns_namespace.as_str(), name.as_str()));
        coredns.chain(node_local)
    }

    /// Every ConfigMap the planner reads, as `(namespace, name)`, sorted, once each: the
    /// CoreDNS candidates and `coredns-custom`, node-local-dns's, and hairpin's routes, hosts
    /// and native-cure ConfigMaps. Each is read by name, so that the grants can name them too.
    pub fn read_config_maps(&self) -> Vec<(String, String)> {
        let mut names: Vec<(String, String)> = self
            .corefile_config_maps()
            .chain([
                (
                    self.coredns_namespace.as_str(),
                    self.coredns_custom_config_map.as_str(),
                ),
                (self.namespace.as_str(), self.routes_config_map.as_str()),
                (self.namespace.as_str(), self.hosts_config_map.as_str()),
                (self.namespace.as_str(), self.native_config_map.as_str()),
            ])
            .map(|(namespace, name)| (namespace.to_owned(), name.to_owned()))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Our annotation `<prefix><name>`, e.g. `hairpin.io/proxy-protocol`.
    pub fn annotation(&self, name: &str) -> String {
        format!("{}{name}", self.annotation_prefix)
    }
}

/// The conventional name of the cluster DNS Service (in the CoreDNS namespace), tried first;
/// [`crate::cluster_dns_service`] also finds the names other installers give it. Its DNS
/// port's `targetPort` is the port CoreDNS receives pods' queries on, so the port whose
/// server blocks hairpin writes to.
pub const CLUSTER_DNS_SERVICE: &str = "kube-dns";

/// API group of hairpin's `Hairpin` custom resource (defined by the controller's `crd` module;
/// the doctor reads it without linking the controller).
pub const HAIRPIN_API_GROUP: &str = "hairpin.io";
/// Served version of the `Hairpin` kind.
pub const HAIRPIN_API_VERSION: &str = "v1alpha1";
/// Resource plural of the `Hairpin` kind.
pub const HAIRPIN_PLURAL: &str = "hairpins";

/// Label put on everything hairpin writes.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY_VALUE: &str = "hairpin";
/// The field manager of every write hairpin makes (objects, ConfigMap keys, status): how
/// managedFields tell hairpin's changes (its `ipMode`, its blocks) from another writer's.
pub const FIELD_MANAGER: &str = "hairpin";
/// The annotation `kubectl apply` keeps the whole applied object in: nothing of hairpin reads
/// it, and it is dropped from what hairpin caches or writes back.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Annotation on a hairpin Service naming its source load balancer (`namespace/name`).
pub const SOURCE_ANNOTATION: &str = "hairpin.io/source";
/// Labels on a hairpin Service naming its source load balancer (a label value cannot hold `/`).
pub const SOURCE_NAMESPACE_LABEL: &str = "hairpin.io/source-namespace";
/// See [`SOURCE_NAMESPACE_LABEL`].
pub const SOURCE_NAME_LABEL: &str = "hairpin.io/source-name";

/// True when hairpin may delete or overwrite the object: it carries [`MANAGED_BY_LABEL`] with
/// [`MANAGED_BY_VALUE`] AND the `annotation` hairpin writes on that kind of object. The label
/// alone is not enough: it is a well-known label that a user's or a tenant's own object may
/// carry (copied from a manifest, set by another tool), and such an object must never be
/// deleted or replaced by hairpin.
pub fn is_managed(meta: &ObjectMeta, annotation: &str) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .is_some_and(|v| v == MANAGED_BY_VALUE)
        && meta
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(annotation))
}

/// Whether `meta` marks one of hairpin's own objects in its namespace (a hairpin Service, a
/// `DNSEndpoint`): the managed-by label and the source annotation, both (an object someone
/// else labelled is left alone).
pub fn is_ours(meta: &ObjectMeta, config: &PlannerConfig) -> bool {
    meta.namespace.as_deref() == Some(config.namespace.as_str())
        && is_managed(meta, &config.annotation("source"))
}
