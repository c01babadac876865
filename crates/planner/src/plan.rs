//! Step 3: the plan, a pure value: what hairpin would write for a snapshot.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use serde::Serialize;

use crate::admission::Refusal;
use crate::config::DnsMode;
use crate::corefile::{BlockInsert, CorefileError, DnsEntry, HostPattern, normalize_target};
use crate::discovery::{LoadBalancer, NotNeeded};
use crate::external_dns::DnsEndpoints;
use crate::hostnames::{Conflict, Hostname, WildcardLabels};
use crate::kube_dns::StubDomains;
use crate::providers::ProxyVersion;
use crate::snapshot::ObjectRef;
use crate::verify::Verification;
use crate::warning::Warning;

/// Everything hairpin would write, and everything it found worth reporting.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// One entry per load balancer that needs a hairpin, sorted by source Service.
    pub load_balancers: Vec<LoadBalancerPlan>,
    /// Load balancers that need none, with the reason.
    pub not_needed: Vec<NotNeeded>,
    /// Hostnames claimed by more than one load balancer; planned for none of them.
    pub conflicts: Vec<Conflict>,
    /// Hostnames the admission policy refused ([`crate::admission`]), with who asked and why;
    /// sorted. Each also has a warning.
    pub refused: Vec<Refusal>,
    /// The proxy route table, all load balancers together, sorted by listener port.
    pub routes: Vec<ProxyRoute>,
    /// The ConfigMap holding [`Plan::routes`] as JSON (`routes.json`), for `--routes-file`.
    pub routes_config_map: ConfigMap,
    /// The DNS change; `None` when it cannot be made (see [`Plan::errors`]).
    pub dns: Option<DnsChange>,
    /// The hosts-file entries (rendered with ClusterIPs by [`HostsPlan::resolve`]).
    pub hosts: HostsPlan,
    /// On a kube-dns cluster, the `stubDomains` alternative for the user to merge into
    /// kube-dns's ConfigMap (hairpin never writes it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stub_domains: Option<StubDomains>,
    /// Hairpin Services of an earlier plan (labelled as ours, in our namespace) that this
    /// plan no longer has: delete them.
    pub orphaned_services: Vec<ObjectRef>,
    /// Hostnames checked by resolution ([`crate::verify`]): the names the controller resolves,
    /// those left out (`Unverified`), and the exact names passed through under a wildcard.
    pub verification: Verification,
    /// Problems that stop part of the plan from being applied (nothing is written for that
    /// part), e.g. a Corefile without a `kubernetes` block. Non-empty means "exit non-zero".
    pub errors: Vec<String>,
    /// Everything else worth knowing, sorted.
    pub warnings: Vec<Warning>,
}

/// What hairpin writes for one load balancer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadBalancerPlan {
    /// The discovered load balancer.
    pub load_balancer: LoadBalancer,
    /// The hostnames redirected to the hairpin Service (conflicts removed), sorted.
    pub hostnames: Vec<Hostname>,
    /// The hairpin Service to apply (ClusterIP, in our namespace, selecting the proxy pods).
    pub service: Service,
    /// The proxy routes of this load balancer, one per TCP port: its hostnames resolve to
    /// the hairpin Service, so every port must be served there, not only the PROXY ones.
    pub routes: Vec<ProxyRoute>,
}

impl LoadBalancerPlan {
    /// Namespace and name of the hairpin Service.
    pub fn service_ref(&self) -> ObjectRef {
        ObjectRef::from_meta(&self.service.metadata)
    }
}

/// One proxy listener; the JSON form is what `hairpin proxy --routes-file` reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProxyRoute {
    /// Unique name: `<lb-namespace>/<lb-name>/<port>`.
    pub name: String,
    /// `[::]:<listener port>`: dual-stack (IPv4 clients arrive v4-mapped), or IPv4 only on a
    /// node without IPv6 (the proxy detects it when it binds).
    pub listen: String,
    /// The LB Service's in-cluster name and port, `<svc>.<ns>.svc.<cluster-domain>:<port>`.
    pub upstream: String,
    /// The header the real load balancer sends on this port: `v1`, `v2`, or `none` for a
    /// port without the PROXY protocol (the bytes are forwarded as they are).
    pub proxy_protocol: ProxyHeader,
    /// The header's destination: the LB's external IP and port (written by PROXY routes
    /// only; a `none` route writes no header). For a dual-stack load balancer its IPv4 address,
    /// what proxies that do not read [`ProxyRoute::destinations`] write for every client.
    pub destination: String,
    /// A dual-stack load balancer's addresses, one per family (IPv4 first): each client gets
    /// the one of its family. Empty (and left out of the JSON) for a single-stack one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub destinations: Vec<String>,
}

/// What a route writes before the client's bytes; serialized as `v1`, `v2` or `none`, the
/// values `hairpin proxy --routes-file` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum ProxyHeader {
    /// A PROXY v1 (text) header.
    #[serde(rename = "v1")]
    V1,
    /// A PROXY v2 (binary) header.
    #[serde(rename = "v2")]
    V2,
    /// No header: the load balancer does not use the PROXY protocol on this port.
    #[serde(rename = "none")]
    None,
}

impl ProxyHeader {
    /// The PROXY version written, `None` for [`ProxyHeader::None`].
    pub fn version(self) -> Option<ProxyVersion> {
        match self {
            ProxyHeader::V1 => Some(ProxyVersion::V1),
            ProxyHeader::V2 => Some(ProxyVersion::V2),
            ProxyHeader::None => None,
        }
    }

    /// `"v1"`, `"v2"` or `"none"`, as written in routes.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyHeader::V1 => "v1",
            ProxyHeader::V2 => "v2",
            ProxyHeader::None => "none",
        }
    }
}

impl From<ProxyVersion> for ProxyHeader {
    fn from(version: ProxyVersion) -> Self {
        match version {
            ProxyVersion::V1 => ProxyHeader::V1,
            ProxyVersion::V2 => ProxyHeader::V2,
        }
    }
}

impl From<Option<ProxyVersion>> for ProxyHeader {
    fn from(version: Option<ProxyVersion>) -> Self {
        version.map_or(ProxyHeader::None, ProxyHeader::from)
    }
}

impl std::fmt::Display for ProxyHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The DNS change: every ConfigMap key hairpin writes so that the cluster's DNS answers the
/// redirected hostnames, wherever the queries for them land; in `external-dns` mode, the
/// `DNSEndpoint` objects instead.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DnsChange {
    /// The mode actually used (`Corefile`, `Custom` or `ExternalDns`, never `Auto`).
    pub mode: DnsMode,
    /// The cluster domain: the Corefile's `kubernetes` zone, `--cluster-domain`, or the default.
    pub cluster_domain: String,
    /// Hostname -> the hairpin Service FQDN it is redirected to, sorted by hostname.
    pub entries: Vec<DnsRedirect>,
    /// The keys written: CoreDNS's first (the Corefile, or the `coredns-custom` key), then the
    /// node-local-dns Corefiles. Empty in `external-dns` mode.
    pub writes: Vec<DnsWrite>,
    /// The `DNSEndpoint` objects, in `external-dns` mode only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_endpoints: Option<DnsEndpoints>,
}

impl DnsChange {
    /// The CoreDNS write (the first one); `None` in `external-dns` mode, which writes none.
    pub fn coredns(&self) -> Option<&DnsWrite> {
        self.writes.first()
    }

    /// Whether any key (or `DNSEndpoint`) changes.
    pub fn changed(&self) -> bool {
        self.writes.iter().any(|w| w.changed)
            || self
                .dns_endpoints
                .as_ref()
                .is_some_and(DnsEndpoints::changed)
    }
}

/// How a key's new value is made from its current one (recomputed by the controller on a
/// fresh read, so a concurrent edit outside hairpin's blocks is kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteEdit {
    /// The whole key is hairpin's (`coredns-custom`): set it, or remove it when `None`.
    Key {
        /// The value.
        value: Option<String>,
    },
    /// Marked blocks in a Corefile: exactly these, in these server blocks
    /// ([`crate::corefile::write_blocks`]).
    Blocks {
        /// One block per server block.
        inserts: Vec<BlockInsert>,
    },
}

/// One ConfigMap key hairpin writes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DnsWrite {
    /// The ConfigMap written.
    pub config_map: ObjectRef,
    /// The key written inside it.
    pub key: String,
    /// What hairpin writes there.
    pub edit: WriteEdit,
    /// The key's current content (`None`: the key does not exist).
    pub current: Option<String>,
    /// The key's new content.
    pub desired: String,
    /// `current != desired`.
    pub changed: bool,
    /// The full ConfigMap to write (current object with the key replaced; `resourceVersion`
    /// kept so the write is guarded), present only when `changed`.
    pub object: Option<ConfigMap>,
}

impl DnsWrite {
    /// `namespace/name/key`, the write's identity for fight detection.
    pub fn target(&self) -> String {
        format!("{}/{}", self.config_map, self.key)
    }
}

/// One DNS redirect: `hostname` (or `*.domain`) answers with the address of `target`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct DnsRedirect {
    /// Normalized hostname, possibly a wildcard `*.example.com`.
    pub hostname: String,
    /// The hairpin Service's FQDN, `<name>.<namespace>.svc.<cluster-domain>`.
    pub target: String,
    /// For a wildcard, how many labels its `*` covers ([`Hostname::wildcard_labels`]);
    /// `None` for an exact name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wildcard_labels: Option<WildcardLabels>,
}

impl DnsRedirect {
    /// The Corefile editor's entry for this redirect, wildcard kind included. Use this rather
    /// than `DnsEntry::new(&hostname, &target)`, which reads every wildcard as one label.
    pub fn entry(&self) -> Result<DnsEntry, CorefileError> {
        DnsEntry::new_with(
            &self.hostname,
            &self.target,
            self.wildcard_labels.unwrap_or_default(),
        )
    }

    /// [`DnsRedirect::entry`] of each redirect, with each distinct target checked once (a
    /// plan has a few targets for up to tens of thousands of hostnames).
    pub fn entries(
        redirects: &[DnsRedirect],
    ) -> impl Iterator<Item = (&DnsRedirect, Result<DnsEntry, CorefileError>)> {
        let mut targets: Vec<(&str, Result<String, CorefileError>)> = Vec::new();
        redirects.iter().map(move |r| {
            let labels = r.wildcard_labels.unwrap_or_default();
            let entry = HostPattern::parse_with(&r.hostname, labels).and_then(|name| {
                let known = targets.iter().position(|(t, _)| *t == r.target);
                let at = known.unwrap_or_else(|| {
                    targets.push((&r.target, normalize_target(&r.target)));
                    targets.len() - 1
                });
                let target = targets[at].1.clone()?;
                Ok(DnsEntry { name, target })
            });
            (r, entry)
        })
    }
}

/// The hosts-file block: hostnames and the hairpin Service whose ClusterIP they point at.
/// ClusterIPs exist only once the Services do, so rendering takes them as input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostsPlan {
    /// Hostname -> hairpin Service, sorted by hostname. Wildcards are left out: a hosts file
    /// cannot hold them.
    pub entries: Vec<HostsEntry>,
}

/// One hosts-file line before its address is known.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct HostsEntry {
    /// Exact hostname.
    pub hostname: String,
    /// The hairpin Service whose ClusterIP this hostname gets.
    pub service: ObjectRef,
}

impl HostsPlan {
    /// Pairs each hostname with its Service's ClusterIPs, one pair per family (a dual-stack
    /// hairpin Service gives a name an IPv4 and an IPv6 line, so neither family resolves past
    /// it). Hostnames whose Service has no known ClusterIP yet are returned in the second list.
    pub fn resolve(
        &self,
        cluster_ips: &BTreeMap<ObjectRef, Vec<IpAddr>>,
    ) -> (Vec<(String, IpAddr)>, Vec<&HostsEntry>) {
        let mut resolved = Vec::new();
        let mut missing = Vec::new();
        for entry in &self.entries {
            match cluster_ips
                .get(&entry.service)
                .filter(|ips| !ips.is_empty())
            {
                Some(ips) => {
                    resolved.extend(ips.iter().map(|ip| (entry.hostname.clone(), *ip)));
                }
                None => missing.push(entry),
            }
        }
        (resolved, missing)
    }

    /// The entries for [`crate::hosts::apply`] with every ClusterIP of each hairpin Service
    /// (both families on a dual-stack Service), one entry per address, sorted; and the
    /// hostnames whose Service has no ClusterIP yet. This is what the controller publishes for
    /// the node agents.
    pub fn hosts_entries_all_families(
        &self,
        cluster_ips: &BTreeMap<ObjectRef, Vec<IpAddr>>,
    ) -> (Vec<crate::hosts::HostsEntry>, Vec<&HostsEntry>) {
        let mut by_ip: BTreeMap<IpAddr, Vec<String>> = BTreeMap::new();
        let mut missing = Vec::new();
        for entry in &self.entries {
            match cluster_ips.get(&entry.service) {
                Some(ips) if !ips.is_empty() => {
                    for ip in ips {
                        by_ip.entry(*ip).or_default().push(entry.hostname.clone());
                    }
                }
                _ => missing.push(entry),
            }
        }
        let entries = by_ip
            .into_iter()
            .map(|(ip, names)| crate::hosts::HostsEntry::new(ip, names))
            .collect();
        (entries, missing)
    }

    /// The entries for [`crate::hosts::apply`], one per ClusterIP, and the hostnames whose
    /// Service has no known ClusterIP yet.
    pub fn hosts_entries(
        &self,
        cluster_ips: &BTreeMap<ObjectRef, Vec<IpAddr>>,
    ) -> (Vec<crate::hosts::HostsEntry>, Vec<&HostsEntry>) {
        let (resolved, missing) = self.resolve(cluster_ips);
        let mut by_ip: BTreeMap<IpAddr, Vec<String>> = BTreeMap::new();
        for (name, ip) in resolved {
            by_ip.entry(ip).or_default().push(name);
        }
        let entries = by_ip
            .into_iter()
            .map(|(ip, names)| crate::hosts::HostsEntry::new(ip, names))
            .collect();
        (entries, missing)
    }
}

/// A Service's ClusterIPs (`spec.clusterIPs`, else `spec.clusterIP`), empty while it has
/// none (not created yet, or headless).
pub fn cluster_ips(service: &Service) -> Vec<IpAddr> {
    let Some(spec) = service.spec.as_ref() else {
        return Vec::new();
    };
    let listed = spec.cluster_ips.iter().flatten();
    let ips: Vec<IpAddr> = listed.filter_map(|ip| ip.parse().ok()).collect();
    if !ips.is_empty() {
        return ips;
    }
    spec.cluster_ip
        .iter()
        .filter_map(|ip| ip.parse().ok())
        .collect()
}

impl Plan {
    /// ClusterIPs of the planned hairpin Services that already exist (taken from the snapshot;
    /// both families of a dual-stack one, primary first), for [`HostsPlan::hosts_entries`].
    pub fn known_cluster_ips(&self) -> BTreeMap<ObjectRef, Vec<IpAddr>> {
        self.load_balancers
            .iter()
            .map(|lb| (lb.service_ref(), cluster_ips(&lb.service)))
            .filter(|(_, ips)| !ips.is_empty())
            .collect()
    }

    /// Every ClusterIP (both families) of the planned hairpin Services that already exist,
    /// for [`HostsPlan::hosts_entries_all_families`].
    pub fn cluster_ips_all_families(&self) -> BTreeMap<ObjectRef, Vec<IpAddr>> {
        self.load_balancers
            .iter()
            .map(|lb| (lb.service_ref(), cluster_ips(&lb.service)))
            .filter(|(_, ips)| !ips.is_empty())
            .collect()
    }

    /// The node agents' hosts block, every family: `(entries, hostnames still waiting for
    /// their Service's ClusterIP)`.
    pub fn hosts_block(&self) -> (Vec<crate::hosts::HostsEntry>, Vec<&HostsEntry>) {
        self.hosts
            .hosts_entries_all_families(&self.cluster_ips_all_families())
    }

    /// Whether `hairpin plan` should exit non-zero.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }
}
