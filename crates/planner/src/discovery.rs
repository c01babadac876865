//! Step 1: which `type: LoadBalancer` Services need a hairpin, and why the others do not.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service, ServiceSpec};
use serde::Serialize;

use crate::config::{PlannerConfig, is_ours};
use crate::name::normalize_address;
use crate::native;
use crate::providers::{
    ProxyProtocol, ProxyVersion, huawei_pass_through, provider_without_proxy, proxy_protocol_of,
};
use crate::receivers::{self, Receiver, Requirement};
use crate::snapshot::{ClusterSnapshot, ObjectRef};
use crate::warning::Warning;

/// A load balancer whose in-cluster traffic bypasses it and so misses the PROXY header.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadBalancer {
    /// The `type: LoadBalancer` Service.
    pub service: ObjectRef,
    /// Status IPs whose `ipMode` is not `Proxy` (kube-proxy short-circuits these), in status
    /// order.
    pub ips: Vec<IpAddr>,
    /// Every address in the status (IPs, including `ipMode: Proxy` ones, and hostnames), used
    /// to match Ingresses and Gateways to this load balancer.
    pub status_addresses: Vec<String>,
    /// The IP families (`IPv4`, `IPv6`) its hairpin Service gets: those of [`LoadBalancer::ips`]
    /// that the Service's own `spec.ipFamilies` has too (kube-proxy short-circuits only those,
    /// and the cluster has ClusterIPs of only those), in `spec.ipFamilies` order (the first is
    /// the primary). A Service without `spec.ipFamilies` (a hand-written object: the API
    /// server always fills it in) gets the family of its first status IP only, as asking for a
    /// family the cluster lacks makes the API server refuse the hairpin Service.
    pub ip_families: Vec<String>,
    /// The Service's TCP ports.
    pub ports: Vec<LbPort>,
    /// The Service's other ports (UDP, SCTP), which a hairpin Service does not carry, as
    /// `port/PROTOCOL`, with the port's name in parentheses when it has one.
    #[serde(skip)]
    pub non_tcp_ports: Vec<String>,
    /// The annotations that turned PROXY on (`key=value`).
    pub proxy_sources: Vec<String>,
    /// Why this load balancer is hairpinned although the status or the provider says its
    /// in-cluster traffic already goes through it: our annotation forces it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forced: Option<String>,
    /// The receiving side and its PROXY setting, when it was found ([`crate::receivers`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receiver: Option<Receiver>,
    /// The load balancer and its receiver disagree about the PROXY protocol, but hairpin
    /// already cures this load balancer (its hairpin Service exists, or its native cure is
    /// recorded): the cure is kept as it was decided without the receiver, rather than torn
    /// down (do no harm), and this says why (the warning's text, escaped as it is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receiver_mismatch: Option<String>,
}

/// One TCP port of a load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LbPort {
    /// `spec.ports[].name`.
    pub name: Option<String>,
    /// `spec.ports[].port`: the port clients connect to on the LB's address.
    pub port: u16,
    /// The PROXY version the LB sends on this port; `None` when it sends none.
    pub proxy_protocol: Option<ProxyVersion>,
}

impl LoadBalancer {
    /// The one address a proxy that reads a single destination writes: the first IPv4 bypassed
    /// IP, else the first IPv6 one (`None` only for a hand-built value without IPs).
    pub fn destination_ip(&self) -> Option<IpAddr> {
        self.ips
            .iter()
            .copied()
            .find(IpAddr::is_ipv4)
            .or_else(|| self.ips.first().copied())
    }

    /// The addresses the real load balancer writes as the header's destination, one per family
    /// of [`LoadBalancer::ip_families`] (the first bypassed IP of each, IPv4 first): it writes
    /// the address its client connected to, so an IPv4 client gets the IPv4 one and an IPv6
    /// client the IPv6 one. A family the hairpin Service does not have brings no client.
    pub fn destination_ips(&self) -> Vec<IpAddr> {
        let served = |ip: &&IpAddr| {
            self.ip_families.is_empty() || self.ip_families.iter().any(|f| f == family_of(ip))
        };
        let v4 = self.ips.iter().filter(served).find(|ip| ip.is_ipv4());
        let v6 = self.ips.iter().filter(served).find(|ip| ip.is_ipv6());
        v4.into_iter().chain(v6).copied().collect()
    }
}

/// `IPv4` or `IPv6`, as the Service API spells the family.
pub fn family_of(ip: &IpAddr) -> &'static str {
    if ip.to_canonical().is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

/// [`LoadBalancer::ip_families`]: the families of `ips` that `spec_families` has too.
fn ip_families(ips: &[IpAddr], spec_families: Option<&Vec<String>>) -> Vec<String> {
    let mut from_status: Vec<&str> = Vec::new();
    for ip in ips {
        let family = family_of(ip);
        if !from_status.contains(&family) {
            from_status.push(family);
        }
    }
    let families: Vec<&str> = match spec_families.filter(|f| !f.is_empty()) {
        Some(spec) => spec
            .iter()
            .map(String::as_str)
            .filter(|f| from_status.contains(f))
            .collect(),
        None => from_status.iter().copied().take(1).collect(),
    };
    // A status whose families the Service does not list (an IPv6 address on an IPv4-only
    // cluster's load balancer, which kube-proxy does not short-circuit): the primary one.
    let families = if families.is_empty() {
        spec_families
            .and_then(|f| f.first())
            .map(String::as_str)
            .into_iter()
            .chain(from_status.first().copied())
            .take(1)
            .collect()
    } else {
        families
    };
    families.into_iter().map(str::to_owned).collect()
}

/// Why a load balancer needs no hairpin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum SkipReason {
    /// No annotation turns the PROXY protocol on for any TCP port.
    NoProxyProtocol,
    /// Every status IP has `ipMode: Proxy`: kube-proxy already sends traffic through the LB.
    IpModeProxy,
    /// The status holds only hostnames, which kube-proxy does not short-circuit.
    HostnameOnlyStatus,
    /// The status has no address yet.
    NoAddressYet,
    /// Our `proxy-protocol: off` annotation.
    DisabledByAnnotation,
    /// The provider's load balancer has no PROXY protocol at all; the text says which and
    /// why ([`crate::providers::PROVIDERS_WITHOUT_PROXY`]).
    ProviderSendsNoProxy(&'static str),
    /// Huawei Cloud / Open Telekom Cloud `kubernetes.io/elb.pass-through: "true"`: CCE sends
    /// in-cluster traffic for the ELB's address through the ELB, the provider's own fix.
    PassThrough,
    /// The receiver accepts a connection without a header: in-cluster clients already work,
    /// and lose nothing but the client address, which a direct connection has anyway.
    ReceiverAcceptsNoHeader,
    /// The load balancer and its receiver disagree about the PROXY protocol (a warning names
    /// both settings and the fix): broken for outside clients too; hairpin changes nothing.
    ReceiverMismatch,
}

impl SkipReason {
    /// A short sentence for reports.
    pub fn describe(self) -> &'static str {
        match self {
            SkipReason::NoProxyProtocol => "no PROXY protocol annotation",
            SkipReason::IpModeProxy => {
                "status ipMode is Proxy (traffic already goes through the LB)"
            }
            SkipReason::HostnameOnlyStatus => "status holds only hostnames (no short-circuit)",
            SkipReason::NoAddressYet => "no address in status yet",
            SkipReason::DisabledByAnnotation => "disabled by annotation",
            SkipReason::ProviderSendsNoProxy(why) => why,
            SkipReason::PassThrough => {
                "kubernetes.io/elb.pass-through is true (in-cluster traffic already goes through the ELB)"
            }
            SkipReason::ReceiverAcceptsNoHeader => {
                "the receiver accepts connections without a PROXY header (in-cluster clients already work; they lose only the client address, which a direct connection has anyway)"
            }
            SkipReason::ReceiverMismatch => {
                "the load balancer and its receiver disagree about the PROXY protocol (see the warning); nothing is changed"
            }
        }
    }
}

/// A load balancer that needs no hairpin, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotNeeded {
    /// The Service.
    pub service: ObjectRef,
    /// Why.
    pub reason: SkipReason,
    /// Every address in its status (for hostname conflict detection).
    #[serde(skip)]
    pub status_addresses: Vec<String>,
    /// The receiving side and its PROXY setting, when it was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receiver: Option<Box<Receiver>>,
}

/// The result of discovery.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Discovery {
    /// Load balancers that need a hairpin, sorted by Service.
    pub load_balancers: Vec<LoadBalancer>,
    /// Load balancers that do not, sorted by Service.
    pub not_needed: Vec<NotNeeded>,
    /// Unknown annotation values and the like.
    pub warnings: Vec<Warning>,
}

/// Why our annotation forces a hairpin on a load balancer whose status says `ipMode: Proxy`.
pub const FORCED_WHY: &str =
    "for CNIs that ignore ipMode: Cilium < 1.17, Cilium 1.18.0, some kube-proxy replacements";

/// Classifies every `type: LoadBalancer` Service of the snapshot.
pub fn discover(snapshot: &ClusterSnapshot, config: &PlannerConfig) -> Discovery {
    let own_key = config.annotation("proxy-protocol");
    let mut out = Discovery::default();
    // Status IPs at `ipMode: Proxy` because hairpin's native cure set them stay hairpin's.
    let record = native::NativeRecord::read(snapshot, config).unwrap_or_default();
    let with_service = hairpin_services(snapshot, config);
    for svc in &snapshot.services {
        let Some(spec) = svc.spec.as_ref() else {
            continue;
        };
        if spec.type_.as_deref() != Some("LoadBalancer") {
            continue;
        }
        let receiver = receivers::receiver_of(snapshot, svc);
        let ours = native::ours(&record, svc, config);
        let cured = !ours.is_empty() || with_service.contains(&ObjectRef::from_meta(&svc.metadata));
        let found = Found {
            receiver,
            ours: &ours,
            cured,
        };
        match load_balancer(svc, spec, &own_key, found, &mut out.warnings) {
            Ok(lb) => out.load_balancers.push(lb),
            Err(not_needed) => out.not_needed.push(not_needed),
        }
    }
    out.load_balancers.sort_by(|a, b| a.service.cmp(&b.service));
    out.not_needed.sort_by(|a, b| a.service.cmp(&b.service));
    out
}

/// The load balancers hairpin's own Services (in its namespace, from a previous run) are
/// for, by their source annotation.
fn hairpin_services(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
) -> std::collections::BTreeSet<ObjectRef> {
    let source_key = config.annotation("source");
    snapshot
        .services
        .iter()
        .filter(|s| is_ours(&s.metadata, config))
        .filter_map(|s| s.metadata.annotations.as_ref()?.get(&source_key))
        .filter_map(|source| source.split_once('/'))
        .map(|(ns, name)| ObjectRef::new(ns, name))
        .collect()
}

/// What discovery knows of a load balancer besides its Service.
struct Found<'a> {
    /// Its receiver, when found.
    receiver: Option<Receiver>,
    /// Its status IPs hairpin's native cure set ([`native::ours`]).
    ours: &'a [String],
    /// hairpin cures it already: its hairpin Service exists or its native cure is recorded.
    cured: bool,
}

/// A `type: LoadBalancer` Service as a load balancer that needs a hairpin, or why it needs
/// none. Unknown values of the PROXY annotations are warned about.
fn load_balancer(
    svc: &Service,
    spec: &ServiceSpec,
    own_key: &str,
    found: Found<'_>,
    warnings: &mut Vec<Warning>,
) -> Result<LoadBalancer, NotNeeded> {
    let Found {
        receiver,
        ours,
        cured,
    } = found;
    let service = ObjectRef::from_meta(&svc.metadata);
    let (mut proxy, unknown) = proxy_protocol_of(svc, own_key);
    for u in unknown {
        warnings.push(Warning::new(
            format!("Service {service}"),
            format!(
                "unknown value {:?} of annotation {} (expected {}); annotation ignored",
                u.value, u.key, u.expected
            ),
        ));
    }
    let status_addresses = status_addresses(svc);
    let skip = |reason| NotNeeded {
        service: service.clone(),
        reason,
        status_addresses: status_addresses.clone(),
        receiver: receiver.clone().map(Box::new),
    };
    if proxy.disabled_by_annotation {
        return Err(skip(SkipReason::DisabledByAnnotation));
    }
    let receiver_mismatch = match with_receiver(
        svc,
        &service,
        &mut proxy,
        receiver.as_ref(),
        cured,
        warnings,
    ) {
        Ok(kept) => kept,
        Err(reason) => return Err(skip(reason)),
    };
    let pass_through = huawei_pass_through(svc);
    if pass_through && !proxy.explicit {
        return Err(skip(SkipReason::PassThrough));
    }
    let ports = tcp_ports(spec, &proxy);
    if ports.iter().all(|p| p.proxy_protocol.is_none()) {
        let reason = provider_without_proxy(svc).map_or(
            SkipReason::NoProxyProtocol,
            SkipReason::ProviderSendsNoProxy,
        );
        return Err(skip(reason));
    }
    let entries = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref());
    let entries = entries.map(Vec::as_slice).unwrap_or_default();
    // Our explicit annotation takes `ipMode: Proxy` addresses too: the CNI may ignore
    // ipMode and short-circuit them anyway. So do the addresses hairpin's native cure set.
    let ips: Vec<IpAddr> = entries
        .iter()
        .filter(|e| {
            proxy.explicit
                || e.ip_mode.as_deref() != Some(native::IP_MODE_PROXY)
                || e.ip.as_ref().is_some_and(|ip| ours.contains(ip))
        })
        .filter_map(|e| e.ip.as_deref()?.parse().ok())
        .collect();
    if ips.is_empty() {
        let reason = if entries.iter().any(|e| e.ip.is_some()) {
            SkipReason::IpModeProxy
        } else if entries.iter().any(|e| e.hostname.is_some()) {
            SkipReason::HostnameOnlyStatus
        } else {
            SkipReason::NoAddressYet
        };
        return Err(skip(reason));
    }
    Ok(LoadBalancer {
        service,
        ip_families: ip_families(&ips, spec.ip_families.as_ref()),
        ips,
        status_addresses,
        ports,
        non_tcp_ports: non_tcp_ports(svc),
        forced: forced(&proxy, entries, pass_through, ours),
        proxy_sources: proxy.sources,
        receiver,
        receiver_mismatch,
    })
}

/// What the receiver's own setting changes (issue 31): a receiver that requires the header
/// makes a load balancer without annotation one that sends PROXY (on every port, v1 unless the
/// receiver accepts only v2); one that accepts a missing header needs no cure; a disagreement
/// is warned about and leaves the load balancer alone (a hairpin would send the header to a
/// receiver that does not expect it). Our explicit `v1`/`v2` annotation still forces a
/// hairpin in front of a receiver that accepts a missing header.
///
/// "Alone" means as it is: a load balancer hairpin already cures (`cured`) keeps its cure
/// through a disagreement, planned as it was before the receiver disagreed (from the
/// annotations, or from the receiver's own requirement when that is what turned PROXY on),
/// rather than torn down; `Ok(Some(why))` then says so. `Err` is why no hairpin is needed.
fn with_receiver(
    svc: &Service,
    service: &ObjectRef,
    proxy: &mut ProxyProtocol,
    receiver: Option<&Receiver>,
    cured: bool,
    warnings: &mut Vec<Warning>,
) -> Result<Option<String>, SkipReason> {
    let Some(receiver) = receiver else {
        return Ok(None);
    };
    if !receiver.ports.is_empty() {
        return with_receiver_per_port(svc, service, proxy, receiver, cured, warnings);
    }
    let sends = !proxy.ports.is_empty();
    let annotations = proxy.sources.join(", ");
    let mut mismatch = |what: String, fix: &str| {
        let action = if cured {
            "hairpin keeps the cure it already has in place for this load balancer (it does not tear it down) and changes nothing for it until they agree"
        } else {
            "hairpin changes nothing for this load balancer"
        };
        let message =
            format!("BROKEN for clients outside the cluster too: {what}; {action}. Fix: {fix}");
        let warning = Warning::new(format!("Service {service}"), message);
        let escaped = warning.message.clone();
        warnings.push(warning);
        if cured {
            Ok(Some(escaped))
        } else {
            Err(SkipReason::ReceiverMismatch)
        }
    };
    let required = |proxy: &mut ProxyProtocol| {
        let version = receiver.required_version().unwrap_or(ProxyVersion::V1);
        proxy.ports = tcp_port_numbers(svc).map(|p| (p, version)).collect();
        // Shown after "PROXY from" (text) and in `proxySources` (JSON).
        proxy.sources = vec![format!(
            "{} {}",
            receiver.implementation.name(),
            receiver.source()
        )];
    };
    match receiver.requirement {
        Requirement::Required { .. } if !sends => {
            if let Some(why) = provider_without_proxy(svc) {
                let kept = mismatch(
                    format!(
                        "the load balancer sends no PROXY header ({why}) but {}",
                        receiver.describe()
                    ),
                    "turn the PROXY protocol off on the receiver",
                )?;
                // Kept: planned as the receiver's requirement planned it.
                required(proxy);
                return Ok(kept);
            }
            required(proxy);
            Ok(None)
        }
        // Kept: planned from the annotations, as before the receiver disagreed.
        Requirement::Off if sends => mismatch(
            format!(
                "the load balancer sends a PROXY header ({annotations}) but {}",
                receiver.describe()
            ),
            "turn the PROXY protocol on in the receiver, or off on the load balancer",
        ),
        Requirement::Optional if sends && !proxy.explicit => {
            Err(SkipReason::ReceiverAcceptsNoHeader)
        }
        _ => Ok(None),
    }
}

/// [`with_receiver`] for a receiver whose setting differs per port (issue 38): each port on
/// its own merits. A port whose receiver requires the header is planned with PROXY; one that
/// accepts a missing header needs no cure; one where the load balancer and the receiver
/// disagree gets a BROKEN warning of its own and is left as it is (not planned, or, where
/// hairpin already cures the load balancer, planned as before). `Ok(Some(why))`: the load
/// balancer is planned for its other ports (or kept) with the disagreement of these; `Err`:
/// no port needs a hairpin, and why.
fn with_receiver_per_port(
    svc: &Service,
    service: &ObjectRef,
    proxy: &mut ProxyProtocol,
    receiver: &Receiver,
    cured: bool,
    warnings: &mut Vec<Warning>,
) -> Result<Option<String>, SkipReason> {
    let annotations = proxy.sources.join(", ");
    let sent = proxy.ports.clone();
    let mut broken: Vec<String> = Vec::new();
    let mut learnt: Vec<String> = Vec::new();
    let mut accepts = false;
    let action = if cured {
        "hairpin keeps the cure it already has in place for this port and changes nothing for it until they agree"
    } else {
        "hairpin changes nothing for this port (the other ports are planned on their own)"
    };
    for port in tcp_port_numbers(svc).collect::<Vec<_>>() {
        let on = receiver.on_port(port);
        let sends = sent.contains_key(&port);
        let version = on.required_version().unwrap_or(ProxyVersion::V1);
        let (what, fix) = match on.requirement {
            Requirement::Required { .. } if !sends => match provider_without_proxy(svc) {
                Some(why) => {
                    if cured {
                        proxy.ports.insert(port, version);
                    }
                    (
                        format!(
                            "the load balancer sends no PROXY header ({why}) but {}",
                            on.describe()
                        ),
                        "turn the PROXY protocol off on the receiver",
                    )
                }
                None => {
                    proxy.ports.insert(port, version);
                    learnt.push(format!("{} {}", on.implementation.name(), on.source()));
                    continue;
                }
            },
            Requirement::Off if sends => {
                if !cured {
                    proxy.ports.remove(&port);
                }
                (
                    format!(
                        "the load balancer sends a PROXY header ({annotations}) but {}",
                        on.describe()
                    ),
                    "turn the PROXY protocol on in the receiver for this port, or off on the load balancer",
                )
            }
            Requirement::Optional if sends && !proxy.explicit => {
                proxy.ports.remove(&port);
                accepts = true;
                continue;
            }
            _ => continue,
        };
        let message = format!(
            "BROKEN for clients outside the cluster too, on port {port}: {what}; {action}. Fix: {fix}"
        );
        let warning = Warning::new(format!("Service {service}"), message);
        broken.push(warning.message.clone());
        warnings.push(warning);
    }
    if !learnt.is_empty() {
        proxy.sources.extend(learnt);
    }
    if !broken.is_empty() {
        if proxy.ports.is_empty() && !cured {
            return Err(SkipReason::ReceiverMismatch);
        }
        return Ok(Some(broken.join("; ")));
    }
    if proxy.ports.is_empty() && accepts {
        return Err(SkipReason::ReceiverAcceptsNoHeader);
    }
    Ok(None)
}

/// The Service's TCP port numbers.
fn tcp_port_numbers(svc: &Service) -> impl Iterator<Item = i32> + '_ {
    svc.spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .map(|p| p.port)
}

/// The Service's TCP ports, each with the PROXY version the load balancer sends to it.
fn tcp_ports(spec: &ServiceSpec, proxy: &ProxyProtocol) -> Vec<LbPort> {
    spec.ports
        .iter()
        .flatten()
        .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .filter_map(|p| {
            Some(LbPort {
                name: p.name.clone(),
                port: u16::try_from(p.port).ok()?,
                proxy_protocol: proxy.ports.get(&p.port).copied(),
            })
        })
        .collect()
}

/// Why a load balancer is hairpinned although its status (`ipMode: Proxy`) or its provider
/// annotation (Huawei's pass-through) says it needs none: our explicit annotation forced it.
fn forced(
    proxy: &ProxyProtocol,
    entries: &[LoadBalancerIngress],
    pass_through: bool,
    ours: &[String],
) -> Option<String> {
    // An address at Proxy because hairpin's native cure set it is not a reason to force.
    let ip_mode_proxy = entries.iter().any(|e| {
        e.ip.as_ref().is_some_and(|ip| !ours.contains(ip))
            && e.ip_mode.as_deref() == Some(native::IP_MODE_PROXY)
    });
    (proxy.explicit && (ip_mode_proxy || pass_through)).then(|| {
        let by = proxy.sources.join(", ");
        if ip_mode_proxy {
            format!("status ipMode is Proxy, but forced by {by} ({FORCED_WHY})")
        } else {
            format!("kubernetes.io/elb.pass-through is true, but forced by {by}")
        }
    })
}

/// The `spec.ports` of a Service that are not TCP (UDP, SCTP), as `port/PROTOCOL` with the
/// port's name in parentheses when it has one, in `spec.ports` order. A hairpin Service carries
/// TCP only (the proxy is a TCP proxy), so these ports are not planned.
fn non_tcp_ports(svc: &Service) -> Vec<String> {
    svc.spec
        .iter()
        .flat_map(|spec| spec.ports.iter().flatten())
        .filter_map(|p| {
            let protocol = p.protocol.as_deref().unwrap_or("TCP");
            (protocol != "TCP").then(|| match &p.name {
                Some(name) => format!("{}/{protocol} ({name})", p.port),
                None => format!("{}/{protocol}", p.port),
            })
        })
        .collect()
}

/// Every IP and hostname in a Service's load balancer status.
fn status_addresses(svc: &Service) -> Vec<String> {
    let entries = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten();
    normalized_addresses(entries.map(|e| (e.ip.as_ref(), e.hostname.as_ref())))
}

/// Status addresses (`ip`, `hostname` pairs of a Service's or an Ingress's load balancer
/// status), each lowercased and without a trailing dot, so the two compare equal.
pub(crate) fn normalized_addresses<'a>(
    entries: impl Iterator<Item = (Option<&'a String>, Option<&'a String>)>,
) -> Vec<String> {
    entries
        .flat_map(|(ip, hostname)| ip.into_iter().chain(hostname))
        .map(|a| normalize_address(a))
        .collect()
}
