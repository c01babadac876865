//! The hairpin of each load balancer: its hairpin Service, proxy listener ports and routes,
//! and the verified hostnames placed on it; the hosts-file block they make.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use serde::Serialize;

use crate::discovery::LoadBalancer;
use crate::hostnames::Hostname;
use crate::providers::ProxyVersion;
use crate::snapshot::ObjectRef;

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
