//! NodeLocal DNSCache (`node-local-dns`) analysis.
//!
//! Pods on nodes with node-local-dns ask the node-local cache, not cluster CoreDNS. Its
//! Corefile forwards the cluster domain (and the reverse zones) to kube-dns, but sends every
//! other name straight to the node's upstream servers, so external hostnames never reach our
//! `rewrite` rules. The fix is a stanza that forwards our hostnames' zones to kube-dns too
//! ([`NodeLocalDnsInfo::suggested_stanza`]), or the node agent.

use std::collections::BTreeSet;

use super::parse;
use super::{CorefileError, HostPattern};
use crate::forward::in_zone;

/// Placeholders node-cache replaces at runtime with the kube-dns Service address.
const CLUSTER_DNS_PLACEHOLDERS: &[&str] = &["__PILLAR__CLUSTER__DNS__", "__PILLAR__DNS__SERVER__"];

/// One server block of the node-local-dns Corefile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLocalServer {
    /// Zones without port and trailing dot; the root zone is `.`.
    pub zones: Vec<String>,
    /// 1-based line of the server block's `{`.
    pub line: usize,
    /// `bind` addresses.
    pub binds: Vec<String>,
    /// `forward . <to...>` destinations.
    pub forward_to: Vec<String>,
    /// The forward destinations are the cluster DNS (kube-dns) Service.
    pub forwards_to_cluster_dns: bool,
}

/// What [`analyze_node_local_dns`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLocalDnsInfo {
    pub servers: Vec<NodeLocalServer>,
    /// Zones forwarded to kube-dns, sorted.
    pub cluster_dns_zones: Vec<String>,
}

fn zone_of_key(key: &str) -> String {
    let key = key.strip_prefix("dns://").unwrap_or(key);
    let zone = key.rsplit_once(':').map_or(key, |(z, _)| z);
    let zone = zone.trim_end_matches('.').to_ascii_lowercase();
    if zone.is_empty() { ".".into() } else { zone }
}

/// Read a node-local-dns Corefile (`kube-system/node-local-dns`, key `Corefile`).
/// `cluster_dns` lists addresses that mean kube-dns besides the `__PILLAR__` placeholders
/// (the kube-dns ClusterIP when node-cache runs in IPVS mode with them filled in).
pub fn analyze_node_local_dns(
    corefile: &str,
    cluster_dns: &[&str],
) -> Result<NodeLocalDnsInfo, CorefileError> {
    let cf = parse::parse(corefile)?;
    let src = corefile;
    let mut servers = Vec::new();
    for b in &cf.blocks {
        let zones = b
            .keys
            .iter()
            .flat_map(|k| k.text(src).split(','))
            .filter(|k| !k.is_empty())
            .map(zone_of_key)
            .collect();
        let args_of = |name: &'static str| {
            b.directives
                .iter()
                .filter(move |d| d.name.text(src) == name)
                .map(|d| {
                    d.args
                        .iter()
                        .map(|a| a.value(src).to_owned())
                        .collect::<Vec<_>>()
                })
        };
        let binds = args_of("bind").flatten().collect();
        let forward_to: Vec<String> = args_of("forward")
            .filter(|args| args.first().is_some_and(|f| f == "."))
            .flat_map(|args| args.into_iter().skip(1))
            .collect();
        let is_cluster = |to: &String| {
            let host = to.strip_prefix("dns://").unwrap_or(to);
            let host = host.rsplit_once(':').map_or(host, |(h, p)| {
                if p.bytes().all(|c| c.is_ascii_digit()) && !h.contains(':') {
                    h
                } else {
                    host
                }
            });
            CLUSTER_DNS_PLACEHOLDERS.contains(&host) || cluster_dns.contains(&host)
        };
        let forwards_to_cluster_dns = !forward_to.is_empty() && forward_to.iter().all(is_cluster);
        servers.push(NodeLocalServer {
            zones,
            line: b.open.line,
            binds,
            forward_to,
            forwards_to_cluster_dns,
        });
    }
    let cluster_dns_zones = servers
        .iter()
        .filter(|s| s.forwards_to_cluster_dns)
        .flat_map(|s| s.zones.iter().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    Ok(NodeLocalDnsInfo {
        servers,
        cluster_dns_zones,
    })
}

/// The hostnames that node-local-dns resolves upstream, bypassing cluster CoreDNS.
pub fn bypassed<'a>(info: &NodeLocalDnsInfo, names: &'a [HostPattern]) -> Vec<&'a HostPattern> {
    names
        .iter()
        .filter(|p| !info.cluster_dns_zones.iter().any(|z| in_zone(p.name(), z)))
        .collect()
}

impl NodeLocalDnsInfo {
    /// Smallest set of zones covering `names`: the parent domain of each exact name (the name
    /// itself when it has no parent with two labels) and each wildcard's suffix, with zones
    /// inside other zones dropped. Sorted.
    pub fn zones_for(names: &[HostPattern]) -> Vec<String> {
        let candidates: BTreeSet<&str> = names
            .iter()
            .map(|p| match p {
                HostPattern::Wildcard(s) | HostPattern::WildcardSuffix(s) => s.as_str(),
                HostPattern::Exact(n) => match n.split_once('.') {
                    Some((_, parent)) if parent.contains('.') => parent,
                    _ => n.as_str(),
                },
            })
            .collect();
        candidates
            .iter()
            .filter(|z| {
                !candidates
                    .iter()
                    .any(|other| other != *z && in_zone(z, other))
            })
            .map(|z| (*z).to_owned())
            .collect()
    }

    /// A server block to add to the node-local-dns Corefile so that `zones` are forwarded
    /// to kube-dns like the cluster domain is (same `bind`, same `forward` destination).
    /// `None` when no server block forwards to kube-dns (nothing to copy from).
    pub fn suggested_stanza(&self, zones: &[String]) -> Option<String> {
        let model = self.servers.iter().find(|s| s.forwards_to_cluster_dns)?;
        if zones.is_empty() {
            return Some(String::new());
        }
        let keys: Vec<String> = zones.iter().map(|z| format!("{z}:53")).collect();
        let mut out = format!(
            "{} {{\n    errors\n    cache 30\n    reload\n    loop\n",
            keys.join(" ")
        );
        if !model.binds.is_empty() {
            out.push_str(&format!("    bind {}\n", model.binds.join(" ")));
        }
        out.push_str(&format!(
            "    forward . {} {{\n            force_tcp\n    }}\n}}\n",
            model.forward_to.join(" ")
        ));
        Some(out)
    }
}
