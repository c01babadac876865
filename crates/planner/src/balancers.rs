//! Names placed on load balancers: the hairpin of each load balancer that needs one (its
//! hairpin Service, proxy listener ports and routes) and the verified hostnames placed on it,
//! with the wildcards carved so that none takes another load balancer's names; the hosts-file
//! block they make. What the DNS renderers read.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::{ConfigMap, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use crate::config::{DnsMode, MANAGED_BY_LABEL, MANAGED_BY_VALUE, PlannerConfig, is_ours};
use crate::corefile;
use crate::discovery::{LbPort, LoadBalancer};
use crate::hostnames::{self, Hostname};
use crate::name::{Host, WildcardLabels};
use crate::providers::ProxyVersion;
use crate::snapshot::{ClusterSnapshot, ObjectRef};
use crate::verify::{self, Verifier};
use crate::warning::Warning;

/// What placing names on load balancers reads: the snapshot, the settings, and the cluster
/// domain the routes' upstreams are named in.
pub(crate) struct Placing<'a> {
    snapshot: &'a ClusterSnapshot,
    config: &'a PlannerConfig,
    cluster_domain: &'a str,
}

impl<'a> Placing<'a> {
    pub(crate) fn new(
        snapshot: &'a ClusterSnapshot,
        config: &'a PlannerConfig,
        cluster_domain: &'a str,
    ) -> Self {
        Self {
            snapshot,
            config,
            cluster_domain,
        }
    }

    /// The hairpin of each load balancer in `lbs` that got a listener for a PROXY port, with the
    /// names it claimed ([`hostnames::Collected`]) that `verifier` proves are its own. The
    /// claimed names are moved out of `collected` when none of them is a wildcard: only
    /// carving a wildcard out of others' names reads them again ([`carve_out`]); else they
    /// are copied (tens of thousands of names, each with its sources).
    pub(crate) fn plan(
        &self,
        lbs: &[LoadBalancer],
        collected: &mut hostnames::Collected,
        verifier: &mut Verifier<'_>,
        warnings: &mut Vec<Warning>,
    ) -> Vec<LoadBalancerPlan> {
        let (snapshot, config) = (self.snapshot, self.config);
        let names = service_names(lbs);
        let existing_ports = existing_allocations(snapshot, config);
        let ports = allocate_ports(lbs, &existing_ports, config, warnings);
        let take = !collected
            .per_lb
            .values()
            .flatten()
            .any(Hostname::is_wildcard);
        let mut load_balancers = Vec::new();
        for lb in lbs {
            let claimed = if take {
                collected.per_lb.remove(&lb.service)
            } else {
                collected.per_lb.get(&lb.service).cloned()
            };
            let claimed = claimed.unwrap_or_default();
            if claimed.is_empty() {
                warnings.push(Warning::new(
                    format!("Service {}", lb.service),
                    "needs a hairpin but no hostname points at it (no Ingress, Gateway or hostname annotation found)",
                ));
            }
            let name = &names[&lb.service];
            let port_routes = routes_for(lb, &ports, self.cluster_domain);
            if port_routes
                .iter()
                .all(|(_, r)| r.proxy_protocol == ProxyHeader::None)
            {
                // No PROXY port got a listener (none left): nothing to fix, and its hostnames
                // must not be redirected to a Service that lacks the ports that need the fix.
                continue;
            }
            let hostnames = verifier.check(&lb.service, &lb.status_addresses, claimed);
            if !hostnames.is_empty() {
                warn_non_tcp_ports(lb, warnings);
            }
            let service = hairpin_service(snapshot, config, lb, name, &port_routes);
            let routes = port_routes.into_iter().map(|(_, r)| r).collect();
            load_balancers.push(LoadBalancerPlan {
                load_balancer: lb.clone(),
                hostnames,
                service,
                routes,
            });
        }
        load_balancers
    }

    /// The routes ConfigMap the proxies read.
    pub(crate) fn routes_config_map(&self, routes: &[ProxyRoute]) -> ConfigMap {
        routes_config_map(self.snapshot, self.config, routes)
    }

    /// Our hairpin Services that no load balancer needs any more: to delete.
    pub(crate) fn orphaned_services(&self, load_balancers: &[LoadBalancerPlan]) -> Vec<ObjectRef> {
        orphaned_services(self.snapshot, self.config, load_balancers)
    }
}

/// Every route of every load balancer, by listener port.
pub(crate) fn routes(load_balancers: &[LoadBalancerPlan]) -> Vec<ProxyRoute> {
    let mut routes: Vec<ProxyRoute> = load_balancers
        .iter()
        .flat_map(|lb| lb.routes.iter().cloned())
        .collect();
    routes.sort_by_key(ProxyRoute::listen_port);
    routes
}

/// Our hairpin Services not in `load_balancers`.
fn orphaned_services(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    load_balancers: &[LoadBalancerPlan],
) -> Vec<ObjectRef> {
    let planned: BTreeSet<ObjectRef> = load_balancers
        .iter()
        .map(LoadBalancerPlan::service_ref)
        .collect();
    snapshot
        .services
        .iter()
        .filter(|s| is_ours(&s.metadata, config))
        .map(|s| ObjectRef::from_meta(&s.metadata))
        .filter(|r| !planned.contains(r))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
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
    /// The exact names placed on `load_balancers`, each with its hairpin Service; sorted.
    pub(crate) fn of(load_balancers: &[LoadBalancerPlan]) -> Self {
        let names = load_balancers.iter().map(|lb| lb.hostnames.len()).sum();
        let mut entries: Vec<HostsEntry> = Vec::with_capacity(names);
        entries.extend(load_balancers.iter().flat_map(|lb| {
            let service = lb.service_ref();
            lb.hostnames
                .iter()
                .filter(|h| !h.is_wildcard())
                .map(move |h| HostsEntry {
                    hostname: h.name.clone(),
                    service: service.clone(),
                })
        }));
        entries.sort();
        Self { entries }
    }

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

    /// The entries for [`crate::hosts::apply`], one per ClusterIP (both families on a
    /// dual-stack Service), sorted, and the hostnames whose Service has no known ClusterIP
    /// yet. This is what the controller publishes for the node agents.
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

impl ProxyRoute {
    /// The listener port (from [`ProxyRoute::listen`]).
    pub fn listen_port(&self) -> u16 {
        self.listen
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or(0)
    }
}

/// A wildcard never takes another load balancer's names ([`verify::carve`]): the claimed names
/// under each redirected wildcard become pass-throughs, or the wildcard is left out where that
/// cannot be written. Returns the finished verification part of the plan.
pub(crate) fn carve_out(
    load_balancers: &mut [LoadBalancerPlan],
    mut verification: verify::Verification,
    collected: &hostnames::Collected,
    dns_mode: DnsMode,
) -> verify::Verification {
    // Exact names cannot be left out of a wildcard in the DNSEndpoints of external-dns mode
    // (external-dns's own DNS answers the wildcard record for them).
    let can_pass_through = dns_mode != DnsMode::ExternalDns;
    let any_wildcard = load_balancers
        .iter()
        .any(|lb| lb.hostnames.iter().any(Hostname::is_wildcard));
    let carved = if any_wildcard {
        let redirected: Vec<verify::Redirected<'_>> = load_balancers
            .iter()
            .enumerate()
            .flat_map(|(lb, plan)| {
                plan.hostnames
                    .iter()
                    .map(move |hostname| verify::Redirected { lb, hostname })
            })
            .collect();
        let claims = claims(&verification, collected);
        verify::carve(&redirected, &claims, can_pass_through)
    } else {
        // No wildcard is redirected: nothing to carve (and no claim list to build per
        // reconcile at tens of thousands of names).
        verify::Carved::default()
    };
    for (lb, name, why) in carved.dropped {
        let plan = &mut load_balancers[lb];
        let Some(at) = plan.hostnames.iter().position(|h| h.name == name) else {
            continue;
        };
        let hostname = plan.hostnames.remove(at);
        verification.unverified.push(verify::Unverified {
            hostname: hostname.name,
            load_balancer: plan.load_balancer.service.clone(),
            reason: verify::UnverifiedReason::CoversOthers,
            detail: why,
            sources: hostname.sources,
        });
    }
    verification.passthrough = carved.passthrough;
    verification
        .names
        .sort_by(|a, b| a.hostname.cmp(&b.hostname));
    verification.unverified.sort();
    verification
}

/// Every name some load balancer claims, or that is unverified, conflicted or refused: what a
/// redirected wildcard must not take ([`verify::carve`]).
fn claims<'a>(
    verification: &'a verify::Verification,
    collected: &'a hostnames::Collected,
) -> Vec<verify::Claim<'a>> {
    let mut claims: Vec<verify::Claim<'_>> = verification
        .unverified
        .iter()
        .map(|u| verify::Claim {
            name: &u.hostname,
            labels: wildcard_labels_of(&u.hostname, collected, &u.load_balancer),
            why: format!("unverified: {}", u.detail),
        })
        .collect();
    for (lb, hostnames) in &collected.per_lb {
        claims.extend(hostnames.iter().map(|h| verify::Claim {
            name: &h.name,
            labels: h.wildcard_labels,
            why: format!("claimed by load balancer {lb}"),
        }));
    }
    claims.extend(collected.conflicts.iter().map(|c| {
        verify::Claim {
            name: &c.hostname,
            labels: c
                .hostname
                .starts_with("*.")
                .then_some(WildcardLabels::OneOrMore),
            why: "claimed by several load balancers".to_owned(),
        }
    }));
    claims.extend(
        collected
            .refused
            .iter()
            .filter(|r| Host::parse(&r.hostname).is_ok())
            .map(|r| verify::Claim {
                name: &r.hostname,
                labels: r
                    .hostname
                    .starts_with("*.")
                    .then_some(WildcardLabels::OneOrMore),
                why: format!("refused for load balancer {}", r.load_balancer),
            }),
    );
    claims
}

/// The wildcard meaning `lb` claimed `name` with, from the collected hostnames.
fn wildcard_labels_of(
    name: &str,
    collected: &hostnames::Collected,
    lb: &ObjectRef,
) -> Option<WildcardLabels> {
    collected
        .per_lb
        .get(lb)
        .and_then(|hs| hs.iter().find(|h| h.name == name))
        .and_then(|h| h.wildcard_labels)
}

/// `hairpin-<namespace>-<name>`, or, when that is longer than a Service name may be (63) or
/// two load balancers would get the same name, a shortened form with a hash of the source.
fn service_names(lbs: &[LoadBalancer]) -> BTreeMap<ObjectRef, String> {
    let plain = |r: &ObjectRef| format!("hairpin-{}-{}", r.namespace, r.name);
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for lb in lbs {
        *count.entry(plain(&lb.service)).or_default() += 1;
    }
    lbs.iter()
        .map(|lb| {
            let name = plain(&lb.service);
            let name = if name.len() <= 63 && count[&name] == 1 {
                name
            } else {
                let hash = fnv1a(lb.service.to_string().as_bytes());
                let mut head: String = name.chars().take(54).collect();
                while head.ends_with('-') {
                    head.pop();
                }
                format!("{head}-{:08x}", hash as u32)
            };
            (lb.service.clone(), name)
        })
        .collect()
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Listener ports our existing hairpin Services use: (source LB, LB port) -> listener port.
fn existing_allocations(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
) -> BTreeMap<(ObjectRef, u16), u16> {
    let source_key = config.annotation("source");
    let mut out = BTreeMap::new();
    for svc in snapshot
        .services
        .iter()
        .filter(|s| is_ours(&s.metadata, config))
    {
        let Some(source) = svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(&source_key))
        else {
            continue;
        };
        let Some((ns, name)) = source.split_once('/') else {
            continue;
        };
        for p in svc.spec.iter().flat_map(|s| s.ports.iter().flatten()) {
            if let (Ok(port), Some(IntOrString::Int(target))) =
                (u16::try_from(p.port), &p.target_port)
                && let Ok(target) = u16::try_from(*target)
            {
                out.insert((ObjectRef::new(ns, name), port), target);
            }
        }
    }
    out
}

/// Warns about the UDP and SCTP ports of a load balancer whose hostnames are redirected: the
/// hairpin Service carries TCP only, so in-cluster clients of the hostnames lose those ports.
fn warn_non_tcp_ports(lb: &LoadBalancer, warnings: &mut Vec<Warning>) {
    let ports = &lb.non_tcp_ports;
    if ports.is_empty() {
        return;
    }
    let (noun, verb, pronoun) = if ports.len() == 1 {
        ("port", "is", "it")
    } else {
        ("ports", "are", "them")
    };
    warnings.push(Warning::new(
        format!("Service {}", lb.service),
        format!(
            "{noun} {} {verb} not carried: the hairpin Service is TCP only and in-cluster DNS for this \
             load balancer's hostnames points at it, so in-cluster clients of the hostnames lose \
             {pronoun} (e.g. HTTP/3 over QUIC falls back to TCP, a UDP DNS query times out); \
             outside clients are not affected. Serve {pronoun} under a separate hostname that \
             hairpin does not redirect, or use native `ipMode: Proxy` or the provider's \
             hostname annotation where the provider supports it (`hairpin doctor <hostname>` \
             lists them)",
            ports.join(", ")
        ),
    ));
}

/// Listener port for each TCP port of each load balancer, with or without the PROXY protocol
/// (its hostnames resolve to the hairpin Service, so every port must answer there): the
/// existing allocation where it is still free, else the lowest free port from the configured
/// base. New ports are allocated in load balancer order, then `spec.ports` order.
fn allocate_ports(
    lbs: &[LoadBalancer],
    existing: &BTreeMap<(ObjectRef, u16), u16>,
    config: &PlannerConfig,
    warnings: &mut Vec<Warning>,
) -> BTreeMap<(ObjectRef, u16), u16> {
    let wanted: Vec<(ObjectRef, u16)> = lbs
        .iter()
        .flat_map(|lb| lb.ports.iter().map(|p| (lb.service.clone(), p.port)))
        .collect();
    let mut used = BTreeSet::new();
    let mut out = BTreeMap::new();
    for key in &wanted {
        if let Some(&port) = existing.get(key)
            && port >= config.listener_port_base
            && used.insert(port)
        {
            out.insert(key.clone(), port);
        }
    }
    let mut next = config.listener_port_base;
    for key in wanted {
        if out.contains_key(&key) {
            continue;
        }
        let Some(port) = (next..=u16::MAX).find(|p| !used.contains(p)) else {
            warnings.push(Warning::new(
                format!("Service {}", key.0),
                format!(
                    "no free proxy listener port left for port {}; it is not planned",
                    key.1
                ),
            ));
            continue;
        };
        used.insert(port);
        out.insert(key, port);
        next = port;
    }
    out
}

/// One route per port that got a listener, with the port it serves: the PROXY header the load
/// balancer sends on that port, or none.
///
/// Every route, PROXY or plain, forwards to `<lb-service>.<ns>.svc.<domain>:<port>`: the same
/// `spec.ports[].port` of the load balancer's own Service. That is where the port really goes.
/// The real load balancer sends `<external-ip>:<port>` to this Service port's nodePort, and
/// kube-proxy's short-circuit of the external IP uses this Service port too; the ClusterIP on
/// the same `port` reaches the same endpoints and `targetPort`. Not the `targetPort` (a pod
/// port, maybe named), not the nodePort, and not the upstream of another port of the load
/// balancer: a plain port 25 must reach the mail server behind port 25, unchanged.
fn routes_for<'a>(
    lb: &'a LoadBalancer,
    ports: &BTreeMap<(ObjectRef, u16), u16>,
    cluster_domain: &str,
) -> Vec<(&'a LbPort, ProxyRoute)> {
    let destinations = lb.destination_ips();
    let Some(&destination) = destinations.first() else {
        return Vec::new();
    };
    let host = corefile::service_fqdn(&lb.service.name, &lb.service.namespace, cluster_domain);
    lb.ports
        .iter()
        .filter_map(|p| {
            let listen = *ports.get(&(lb.service.clone(), p.port))?;
            Some((
                p,
                ProxyRoute {
                    name: format!("{}/{}", lb.service, p.port),
                    // Dual-stack; the proxy falls back to IPv4 on a node without IPv6.
                    listen: format!("[::]:{listen}"),
                    upstream: format!("{host}:{}", p.port),
                    proxy_protocol: p.proxy_protocol.into(),
                    destination: SocketAddr::new(destination, p.port).to_string(),
                    // One per family, only for a dual-stack load balancer: single-stack ones
                    // keep the one-destination form every proxy version reads.
                    destinations: if destinations.len() > 1 {
                        destinations
                            .iter()
                            .map(|ip| SocketAddr::new(*ip, p.port).to_string())
                            .collect()
                    } else {
                        Vec::new()
                    },
                },
            ))
        })
        .collect()
}

fn hairpin_service(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    lb: &LoadBalancer,
    name: &str,
    routes: &[(&LbPort, ProxyRoute)],
) -> Service {
    let existing = snapshot.service(&config.namespace, name);
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (
            config.annotation("source-namespace"),
            lb.service.namespace.clone(),
        ),
        (config.annotation("source-name"), lb.service.name.clone()),
    ]);
    let annotations = BTreeMap::from([(config.annotation("source"), lb.service.to_string())]);
    let ports = routes
        .iter()
        .map(|(p, r)| ServicePort {
            name: Some(p.name.clone().unwrap_or_else(|| format!("tcp-{}", p.port))),
            port: i32::from(p.port),
            protocol: Some("TCP".into()),
            target_port: Some(IntOrString::Int(i32::from(r.listen_port()))),
            ..ServicePort::default()
        })
        .collect();
    let existing_spec = existing.and_then(|s| s.spec.as_ref());
    let (ip_family_policy, ip_families) = ip_families(lb, existing_spec);
    // The ClusterIPs are immutable: repeat the ones the Service already has, as many as it
    // keeps families (a Service going single-stack releases its secondary one).
    let cluster_ips = existing_spec
        .and_then(|s| s.cluster_ips.clone())
        .map(|mut ips| {
            ips.truncate(ip_families.len().max(1));
            ips
        });
    Service {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(config.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            resource_version: existing.and_then(|s| s.metadata.resource_version.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(config.proxy_selector.clone()),
            ports: Some(ports),
            cluster_ip: existing_spec.and_then(|s| s.cluster_ip.clone()),
            cluster_ips,
            ip_family_policy: Some(ip_family_policy.to_owned()),
            ip_families: Some(ip_families),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The hairpin Service's `ipFamilyPolicy` and `ipFamilies`: the load balancer's families
/// ([`LoadBalancer::ip_families`]), so its hostnames answer AAAA exactly when the load balancer
/// has an IPv6 address in-cluster clients are short-circuited from, and A when it has an IPv4
/// one. Two families: `PreferDualStack` (not `RequireDualStack`: a cluster that turns out
/// single-stack still gets the Service, with its primary family). One: `SingleStack`, also on
/// a dual-stack cluster, where `PreferDualStack` would add a family the load balancer lacks
/// (an IPv6 ClusterIP for an IPv4-only load balancer: in-cluster clients would connect over
/// IPv6 where outside ones cannot). An existing Service keeps its primary family first (the
/// API server refuses to change it).
fn ip_families(lb: &LoadBalancer, existing: Option<&ServiceSpec>) -> (&'static str, Vec<String>) {
    let mut families = lb.ip_families.clone();
    if families.is_empty() {
        families.push("IPv4".to_owned());
    }
    if let Some(primary) = existing
        .and_then(|s| s.ip_families.as_ref())
        .and_then(|f| f.first())
        && let Some(at) = families.iter().position(|f| f == primary)
    {
        families[..=at].rotate_right(1);
    }
    let policy = if families.len() > 1 {
        "PreferDualStack"
    } else {
        "SingleStack"
    };
    (policy, families)
}

fn routes_config_map(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    routes: &[ProxyRoute],
) -> ConfigMap {
    let existing = snapshot.config_map(&config.namespace, &config.routes_config_map);
    let mut json = serde_json::to_string_pretty(routes).unwrap_or_else(|_| "[]".into());
    json.push('\n');
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(config.routes_config_map.clone()),
            namespace: Some(config.namespace.clone()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY_LABEL.to_owned(),
                MANAGED_BY_VALUE.to_owned(),
            )])),
            resource_version: existing.and_then(|c| c.metadata.resource_version.clone()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(config.routes_key.clone(), json)])),
        ..ConfigMap::default()
    }
}
