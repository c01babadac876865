//! `desired`: snapshot + config -> plan. Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::{ConfigMap, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::config::{
    CLUSTER_DNS_SERVICE, DnsMode, MANAGED_BY_LABEL, MANAGED_BY_VALUE, NodeLocalDns, PlannerConfig,
};
use crate::corefile::{self, CorefileInfo, DnsEntry, HostPattern};
use crate::discovery::{LbPort, LoadBalancer, discover};
use crate::hostnames;
use crate::plan::{
    DnsChange, DnsRedirect, DnsWrite, HostsEntry, HostsPlan, LoadBalancerPlan, Plan, ProxyHeader,
    ProxyRoute, WriteEdit,
};
use crate::snapshot::{ClusterSnapshot, ObjectRef};
use crate::verify::{self, Verifier};
use crate::warning::Warning;

/// Computes everything hairpin would write for `snapshot`. Pure and deterministic: the same
/// input gives the same plan, and listener ports already allocated to a load balancer port
/// (read from our existing hairpin Services) are kept.
pub fn desired(snapshot: &ClusterSnapshot, config: &PlannerConfig) -> Plan {
    let discovery = discover(snapshot, config);
    let mut warnings = discovery.warnings.clone();
    let mut errors = Vec::new();

    // Hostnames of every load balancer that has an address, needed or not, so that a
    // hostname shared with a load balancer we leave alone is a conflict too.
    let mut lbs: Vec<(ObjectRef, &[String])> = discovery
        .load_balancers
        .iter()
        .map(|lb| (lb.service.clone(), lb.status_addresses.as_slice()))
        .collect();
    lbs.extend(
        discovery
            .not_needed
            .iter()
            .filter(|n| !n.status_addresses.is_empty())
            .map(|n| (n.service.clone(), n.status_addresses.as_slice())),
    );
    // CoreDNS: which ConfigMap, and the cluster domain.
    let coredns = find_coredns(snapshot, config);
    let analyzed = coredns.as_ref().map(|(cm, corefile)| {
        let info = corefile::analyze_with(corefile, config.cluster_domain.as_deref());
        (cm, corefile, info)
    });
    let cluster_domain = match &analyzed {
        Some((_, _, Ok(info))) => info.cluster_domain.clone(),
        _ => config
            .cluster_domain
            .clone()
            .unwrap_or_else(|| corefile::DEFAULT_CLUSTER_DOMAIN.to_owned()),
    };
    // Names in the zones the cluster DNS serves itself are never redirected.
    let mut cluster_zones: Vec<&str> = vec![cluster_domain.as_str()];
    if let Some((_, _, Ok(info))) = &analyzed {
        cluster_zones.extend(info.kubernetes_zones.iter().map(String::as_str));
    }
    let mut collected = hostnames::collect(snapshot, config, &lbs, &cluster_zones);
    warnings.append(&mut collected.warnings);
    let lb_addresses: Vec<(&ObjectRef, &[String])> = lbs.iter().map(|(r, a)| (r, *a)).collect();
    let mut verifier = Verifier::new(
        config.verify_hostnames,
        &snapshot.resolutions,
        &lb_addresses,
    );

    // Hairpin Services, listener ports, routes.
    let names = service_names(&discovery.load_balancers);
    let existing_ports = existing_allocations(snapshot, config);
    let ports = allocate_ports(
        &discovery.load_balancers,
        &existing_ports,
        config,
        &mut warnings,
    );
    let mut load_balancers = Vec::new();
    for lb in &discovery.load_balancers {
        let claimed = collected
            .per_lb
            .get(&lb.service)
            .cloned()
            .unwrap_or_default();
        if claimed.is_empty() {
            warnings.push(Warning::new(
                format!("Service {}", lb.service),
                "needs a hairpin but no hostname points at it (no Ingress, Gateway or hostname annotation found)",
            ));
        }
        let name = &names[&lb.service];
        let port_routes = routes_for(lb, &ports, &cluster_domain);
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
            warn_non_tcp_ports(lb, &mut warnings);
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

    let verification = carve_out(
        &mut load_balancers,
        verifier.out,
        &collected,
        config.dns_mode,
    );

    let mut routes: Vec<ProxyRoute> = load_balancers
        .iter()
        .flat_map(|lb| lb.routes.iter().cloned())
        .collect();
    routes.sort_by_key(|r| r.listen_port());
    let routes_config_map = routes_config_map(snapshot, config, &routes);

    // DNS.
    let redirects: Vec<DnsRedirect> = {
        let mut r: Vec<DnsRedirect> = load_balancers
            .iter()
            .flat_map(|lb| {
                let target = corefile::service_fqdn(
                    lb.service.metadata.name.as_deref().unwrap_or_default(),
                    &config.namespace,
                    &cluster_domain,
                );
                lb.hostnames.iter().map(move |h| DnsRedirect {
                    hostname: h.name.clone(),
                    target: target.clone(),
                    wildcard_labels: h.wildcard_labels,
                })
            })
            .collect();
        r.sort();
        r
    };
    let stub_domains = crate::kube_dns::plan(
        snapshot,
        analyzed.is_some(),
        &load_balancers,
        &config.stub_domain_nameservers,
    );
    let dns = match analyzed {
        // No DNS ConfigMap is written: a Corefile, when there is one, gave the cluster domain.
        _ if config.dns_mode == DnsMode::ExternalDns => Some(DnsChange {
            mode: DnsMode::ExternalDns,
            cluster_domain: cluster_domain.clone(),
            entries: redirects.clone(),
            writes: Vec::new(),
            dns_endpoints: Some(crate::external_dns::plan(
                snapshot,
                config,
                &load_balancers,
                &mut warnings,
            )),
        }),
        None => {
            errors.push(format!(
                "no CoreDNS ConfigMap found (looked for {} in namespace {} with key {}); DNS is not planned{}",
                config.coredns_config_maps.join(", "),
                config.coredns_namespace,
                config.corefile_key,
                if stub_domains.is_some() {
                    ": the cluster DNS is kube-dns, which has no Corefile; use --dns-mode external-dns, or kube-dns's stubDomains (the plan's `kube-dns stubDomains` part)"
                } else {
                    ""
                }
            ));
            None
        }
        Some((cm, _, Err(e))) => {
            errors.push(format!(
                "ConfigMap {}/{} key {}: {e}; nothing is written to it",
                config.coredns_namespace,
                cm.metadata.name.as_deref().unwrap_or_default(),
                config.corefile_key
            ));
            None
        }
        Some((cm, corefile, Ok(info))) => {
            let addresses = target_addresses(&load_balancers, config, &cluster_domain);
            match dns_change(
                snapshot,
                config,
                cm,
                corefile,
                &info,
                &redirects,
                &verification.passthrough,
                &addresses,
                &mut warnings,
            ) {
                Ok(change) => Some(change),
                Err(e) => {
                    errors.push(e);
                    None
                }
            }
        }
    };

    let hosts = HostsPlan {
        entries: {
            let mut e: Vec<HostsEntry> = load_balancers
                .iter()
                .flat_map(|lb| {
                    let service = lb.service_ref();
                    lb.hostnames
                        .iter()
                        .filter(|h| !h.is_wildcard())
                        .map(move |h| HostsEntry {
                            hostname: h.name.clone(),
                            service: service.clone(),
                        })
                })
                .collect();
            e.sort();
            e
        },
    };

    let planned: BTreeSet<ObjectRef> = load_balancers
        .iter()
        .map(LoadBalancerPlan::service_ref)
        .collect();
    let orphaned_services = snapshot
        .services
        .iter()
        .filter(|s| is_ours(&s.metadata, config))
        .map(|s| ObjectRef::from_meta(&s.metadata))
        .filter(|r| !planned.contains(r))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();

    warnings.sort();
    warnings.dedup();
    // Errors quote Corefile text and object names: one line each, whatever they hold
    // (their parts are not escaped when built, so this escapes them once).
    let errors = errors
        .iter()
        .map(|e| crate::escape::text(e).into_owned())
        .collect();
    Plan {
        load_balancers,
        not_needed: discovery.not_needed,
        conflicts: collected.conflicts,
        refused: collected.refused,
        routes,
        routes_config_map,
        dns,
        hosts,
        stub_domains,
        orphaned_services,
        verification,
        errors,
        warnings,
    }
}

/// A wildcard never takes another load balancer's names ([`verify::carve`]): the claimed names
/// under each redirected wildcard become pass-throughs, or the wildcard is left out where that
/// cannot be written. Returns the finished verification part of the plan.
fn carve_out(
    load_balancers: &mut [LoadBalancerPlan],
    mut verification: verify::Verification,
    collected: &hostnames::Collected,
    dns_mode: DnsMode,
) -> verify::Verification {
    // Exact names cannot be left out of a wildcard in the DNSEndpoints of external-dns mode
    // (external-dns's own DNS answers the wildcard record for them).
    let can_pass_through = dns_mode != DnsMode::ExternalDns;
    let any_wildcard = load_balancers.iter().any(|lb| {
        lb.hostnames
            .iter()
            .any(crate::hostnames::Hostname::is_wildcard)
    });
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
                    .then_some(crate::name::WildcardLabels::OneOrMore),
                why: "claimed by several load balancers".to_owned(),
            }
        }));
        claims.extend(
            collected
                .refused
                .iter()
                .filter(|r| crate::name::Host::parse(&r.hostname).is_ok())
                .map(|r| verify::Claim {
                    name: &r.hostname,
                    labels: r
                        .hostname
                        .starts_with("*.")
                        .then_some(crate::name::WildcardLabels::OneOrMore),
                    why: format!("refused for load balancer {}", r.load_balancer),
                }),
        );
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

/// The wildcard meaning `lb` claimed `name` with, from the collected hostnames.
fn wildcard_labels_of(
    name: &str,
    collected: &hostnames::Collected,
    lb: &ObjectRef,
) -> Option<crate::name::WildcardLabels> {
    collected
        .per_lb
        .get(lb)
        .and_then(|hs| hs.iter().find(|h| h.name == name))
        .and_then(|h| h.wildcard_labels)
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

/// The first configured CoreDNS ConfigMap present, with its Corefile.
fn find_coredns<'a>(
    snapshot: &'a ClusterSnapshot,
    config: &PlannerConfig,
) -> Option<(&'a ConfigMap, &'a str)> {
    config.coredns_config_maps.iter().find_map(|name| {
        let cm = snapshot.config_map(&config.coredns_namespace, name)?;
        let corefile = cm.data.as_ref()?.get(&config.corefile_key)?;
        Some((cm, corefile.as_str()))
    })
}

fn is_ours(meta: &ObjectMeta, config: &PlannerConfig) -> bool {
    meta.namespace.as_deref() == Some(config.namespace.as_str())
        && crate::config::is_managed(meta, &config.annotation("source"))
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

/// Known ClusterIPs of the planned hairpin Services, by the FQDN their names redirect to.
fn target_addresses(
    load_balancers: &[LoadBalancerPlan],
    config: &PlannerConfig,
    cluster_domain: &str,
) -> BTreeMap<String, Vec<IpAddr>> {
    load_balancers
        .iter()
        .map(|lb| {
            let target = corefile::service_fqdn(
                lb.service.metadata.name.as_deref().unwrap_or_default(),
                &config.namespace,
                cluster_domain,
            );
            (target, crate::plan::cluster_ips(&lb.service))
        })
        .filter(|(_, ips)| !ips.is_empty())
        .collect()
}

/// A write of marked blocks into a Corefile key (CoreDNS or node-local-dns).
fn blocks_write(
    cm: &ConfigMap,
    key: &str,
    corefile: &str,
    entries: &[DnsEntry],
    opts: &corefile::PlaceOptions,
    subject: &str,
    warnings: &mut Vec<Warning>,
) -> Result<DnsWrite, corefile::CorefileError> {
    let placement = corefile::place(corefile, entries, opts)?;
    for w in &placement.warnings {
        warnings.push(Warning::new(subject, w.to_string()));
    }
    inserts_write(cm, key, corefile, placement.inserts, subject, warnings)
}

/// A write of placed marked blocks into a key holding server blocks.
fn inserts_write(
    cm: &ConfigMap,
    key: &str,
    text: &str,
    inserts: Vec<corefile::BlockInsert>,
    subject: &str,
    warnings: &mut Vec<Warning>,
) -> Result<DnsWrite, corefile::CorefileError> {
    let edit = corefile::write_blocks(text, &inserts)?;
    for w in &edit.warnings {
        warnings.push(Warning::new(subject, w.to_string()));
    }
    let object = edit.changed.then(|| {
        let mut cm = cm.clone();
        cm.data
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), edit.text.clone());
        strip_server_fields(&mut cm.metadata);
        cm
    });
    Ok(DnsWrite {
        config_map: ObjectRef::from_meta(&cm.metadata),
        key: key.to_owned(),
        edit: WriteEdit::Blocks { inserts },
        current: Some(text.to_owned()),
        changed: edit.changed,
        desired: edit.text,
        object,
    })
}

/// The `coredns-custom` keys the Corefile imports as server blocks at its top level (`import
/// custom/*.server`: every key ending in `.server`), in key order.
fn imported_server_files(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    corefile: &str,
) -> Vec<corefile::ImportedFile> {
    let suffixes = corefile::imported_key_suffixes(corefile).unwrap_or_default();
    if suffixes.is_empty() {
        return Vec::new();
    }
    let Some(data) = snapshot
        .config_map(&config.coredns_namespace, &config.coredns_custom_config_map)
        .and_then(|cm| cm.data.as_ref())
    else {
        return Vec::new();
    };
    data.iter()
        .filter(|(key, _)| suffixes.iter().any(|s| key.ends_with(s.as_str())))
        .map(|(key, text)| corefile::ImportedFile {
            name: key.clone(),
            text: text.clone(),
        })
        .collect()
}

/// Writes of hairpin's answer blocks into the imported server-block keys of `coredns-custom`.
/// `base` is that ConfigMap as the writes before these leave it (so that `-o yaml` objects
/// carry every change).
fn imported_writes(
    base: Option<ConfigMap>,
    files: &[corefile::ImportedFile],
    placed: Vec<Result<Vec<corefile::BlockInsert>, corefile::CorefileError>>,
    warnings: &mut Vec<Warning>,
) -> Vec<DnsWrite> {
    let Some(mut base) = base else {
        return Vec::new();
    };
    let subject = format!("ConfigMap {}", ObjectRef::from_meta(&base.metadata));
    let mut writes = Vec::new();
    for (file, inserts) in files.iter().zip(placed) {
        let written = inserts.and_then(|inserts| {
            inserts_write(&base, &file.name, &file.text, inserts, &subject, warnings)
        });
        match written {
            Ok(write) => {
                if let Some(object) = &write.object {
                    base = object.clone();
                }
                writes.push(write);
            }
            Err(e) => warnings.push(Warning::new(
                &subject,
                format!(
                    "key {}: {e}; nothing is written to it, and hairpin's hostnames under its zones are not answered there",
                    file.name
                ),
            )),
        }
    }
    writes
}

#[allow(clippy::too_many_arguments)]
fn dns_change(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    coredns: &ConfigMap,
    corefile: &str,
    info: &CorefileInfo,
    redirects: &[DnsRedirect],
    passthrough: &[verify::Passthrough],
    addresses: &BTreeMap<String, Vec<IpAddr>>,
    warnings: &mut Vec<Warning>,
) -> Result<DnsChange, String> {
    let coredns_ref = ObjectRef::from_meta(&coredns.metadata);
    let subject = format!("ConfigMap {coredns_ref}");
    for w in &info.warnings {
        warnings.push(Warning::new(&subject, w.to_string()));
    }
    let mut entries: Vec<DnsEntry> = DnsRedirect::entries(redirects)
        .filter_map(|(r, entry)| match entry {
            Ok(e) => Some(e),
            Err(e) => {
                warnings.push(Warning::new(
                    format!("hostname {}", r.hostname),
                    format!("{e}; skipped"),
                ));
                None
            }
        })
        .collect();
    // The names a redirected wildcard covers that are someone else's ([`verify::carve`]).
    entries.extend(
        passthrough
            .iter()
            .filter_map(|p| DnsEntry::passthrough(&p.hostname).ok()),
    );
    let mode = match config.dns_mode {
        DnsMode::Auto if info.custom_key_suffix().is_some() => DnsMode::Custom,
        DnsMode::Auto => DnsMode::Corefile,
        other => other,
    };
    let fail =
        |what: &str, e: corefile::CorefileError| format!("{what}: {e}; nothing is written to it");
    let imported = imported_server_files(snapshot, config, corefile);
    let opts = corefile::PlaceOptions {
        cluster_domain: config.cluster_domain.clone(),
        addresses: addresses.clone(),
        dns_port: cluster_dns_target_port(snapshot, config, warnings),
        ..corefile::PlaceOptions::default()
    };
    let placed =
        corefile::place_with_imports(corefile, &imported, &entries, &opts).map_err(|e| {
            fail(
                &format!("ConfigMap {coredns_ref} key {}", config.corefile_key),
                e,
            )
        })?;
    let coredns_write = match mode {
        DnsMode::Custom => {
            let key = match info.custom_key_suffix() {
                Some(suffix) if !config.coredns_custom_key.ends_with(suffix) => {
                    let stem = config
                        .coredns_custom_key
                        .rsplit_once('.')
                        .map_or(config.coredns_custom_key.as_str(), |(s, _)| s);
                    format!("{stem}{suffix}")
                }
                _ => config.coredns_custom_key.clone(),
            };
            if info.custom_key_suffix().is_none() {
                warnings.push(Warning::new(
                    &subject,
                    format!(
                        "DNS mode is custom but the Corefile imports no coredns-custom keys; CoreDNS will not read {}/{} until it does",
                        config.coredns_custom_config_map, key
                    ),
                ));
            }
            if info.has_hairpin_block {
                warnings.push(Warning::new(
                    &subject,
                    "the Corefile still holds a hairpin block from corefile mode; remove it (hairpin uninstall) to avoid duplicate rules",
                ));
            }
            // The key is imported into the block holding `kubernetes`; names that other server
            // blocks of the Corefile receive cannot be redirected from there, and the Corefile
            // itself is the distribution's in this mode (imported `.server` keys are written
            // below).
            for insert in placed
                .main
                .inserts
                .iter()
                .filter(|i| i.form == corefile::Form::Answer)
            {
                warnings.push(Warning::new(
                    &subject,
                    format!(
                        "server block {} receives some hairpin hostnames itself, and in custom mode hairpin writes only {}/{}: those names are not redirected there (use --dns-mode corefile, or forward that zone to the block holding `kubernetes`)",
                        insert.server, config.coredns_custom_config_map, key
                    ),
                ));
            }
            let existing =
                snapshot.config_map(&config.coredns_namespace, &config.coredns_custom_config_map);
            let target = ObjectRef::new(
                config.coredns_namespace.clone(),
                config.coredns_custom_config_map.clone(),
            );
            let desired = corefile::render_override(&entries)
                .map_err(|e| fail(&format!("ConfigMap {target} key {key}"), e))?;
            let current = existing
                .and_then(|c| c.data.as_ref())
                .and_then(|d| d.get(&key))
                .cloned();
            let changed = current.as_deref().unwrap_or_default() != desired;
            let object = changed.then(|| {
                let mut cm = existing.cloned().unwrap_or_else(|| ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(target.name.clone()),
                        namespace: Some(target.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    ..ConfigMap::default()
                });
                let data = cm.data.get_or_insert_with(BTreeMap::new);
                if desired.is_empty() {
                    data.remove(&key);
                } else {
                    data.insert(key.clone(), desired.clone());
                }
                strip_server_fields(&mut cm.metadata);
                cm
            });
            fits_config_map(object.as_ref(), &format!("ConfigMap {target}"), &key)?;
            DnsWrite {
                config_map: target,
                key,
                edit: WriteEdit::Key {
                    value: (!desired.is_empty()).then(|| desired.clone()),
                },
                current,
                desired,
                changed,
                object,
            }
        }
        DnsMode::Corefile | DnsMode::Auto | DnsMode::ExternalDns => {
            for w in &placed.main.warnings {
                warnings.push(Warning::new(&subject, w.to_string()));
            }
            inserts_write(
                coredns,
                &config.corefile_key,
                corefile,
                placed.main.inserts.clone(),
                &subject,
                warnings,
            )
            .map_err(|e| {
                fail(
                    &format!("ConfigMap {coredns_ref} key {}", config.corefile_key),
                    e,
                )
            })?
        }
    };
    fits_config_map(
        coredns_write.object.as_ref(),
        &format!("ConfigMap {}", coredns_write.config_map),
        &coredns_write.key,
    )?;
    let custom_ref = ObjectRef::new(
        config.coredns_namespace.clone(),
        config.coredns_custom_config_map.clone(),
    );
    let custom_base = coredns_write
        .object
        .clone()
        .filter(|_| coredns_write.config_map == custom_ref)
        .or_else(|| {
            snapshot
                .config_map(&config.coredns_namespace, &config.coredns_custom_config_map)
                .cloned()
        });
    let imported_writes = imported_writes(custom_base, &imported, placed.imported, warnings);
    for write in &imported_writes {
        fits_config_map(
            write.object.as_ref(),
            &format!("ConfigMap {}", write.config_map),
            &write.key,
        )?;
    }
    let mut writes = vec![coredns_write];
    writes.extend(imported_writes);
    writes.extend(node_local_dns_writes(
        snapshot,
        config,
        &entries,
        &opts,
        &info.cluster_domain,
        warnings,
    ));
    Ok(DnsChange {
        mode: if mode == DnsMode::Custom {
            DnsMode::Custom
        } else {
            DnsMode::Corefile
        },
        cluster_domain: info.cluster_domain.clone(),
        entries: redirects.to_vec(),
        writes,
        dns_endpoints: None,
    })
}

/// The cluster DNS Service: the one pods send their queries to (the kubelet's `clusterDNS` is
/// its ClusterIP). Its name depends on how CoreDNS was installed, so in `coredns_namespace`
/// it is `kube-dns` (kubeadm, k3s, EKS, AKS, GKE, LKE, DigitalOcean), else a Service named
/// like one of the CoreDNS ConfigMap candidates (RKE2's `rke2-coredns-rke2-coredns`, the
/// CoreDNS Helm chart's `coredns`), else the first by name labelled as CoreDNS (`k8s-app` is
/// `kube-dns` or `coredns`, or `app.kubernetes.io/name=coredns`); each must serve port 53.
/// `None` when the snapshot holds none.
pub fn cluster_dns_service<'a>(
    snapshot: &'a ClusterSnapshot,
    config: &PlannerConfig,
) -> Option<&'a Service> {
    let namespace = config.coredns_namespace.as_str();
    let serves_dns = |s: &Service| {
        s.spec
            .as_ref()
            .and_then(|spec| spec.ports.as_ref())
            .is_some_and(|ports| ports.iter().any(|p| p.port == 53))
    };
    let by_name = std::iter::once(CLUSTER_DNS_SERVICE)
        .chain(config.coredns_config_maps.iter().map(String::as_str))
        .find_map(|name| snapshot.service(namespace, name).filter(|s| serves_dns(s)));
    by_name.or_else(|| {
        let labelled = |s: &Service| {
            let label = |key: &str| {
                s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(key))
                    .map(String::as_str)
            };
            matches!(label("k8s-app"), Some("kube-dns" | "coredns"))
                || label("app.kubernetes.io/name") == Some("coredns")
        };
        snapshot
            .services
            .iter()
            .filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
            .filter(|s| labelled(s) && serves_dns(s))
            .min_by(|a, b| a.metadata.name.cmp(&b.metadata.name))
    })
}

/// The port CoreDNS's pods receive cluster DNS queries on: the `targetPort` of the DNS port
/// (UDP 53, else the port named `dns`) of the cluster DNS Service, when the snapshot holds it.
/// `None` (placement then decides from the Corefile: 53 when served, else the only port) when
/// the Service is not known or names its target port (the number is in the pods' spec).
fn cluster_dns_target_port(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    warnings: &mut Vec<Warning>,
) -> Option<u16> {
    let service = cluster_dns_service(snapshot, config)?;
    let service_name = service.metadata.name.as_deref().unwrap_or_default();
    let ports = service.spec.as_ref()?.ports.as_ref()?;
    let udp = |p: &&ServicePort| p.protocol.as_deref().unwrap_or("TCP") == "UDP";
    let port = ports
        .iter()
        .filter(udp)
        .find(|p| p.port == 53)
        .or_else(|| {
            ports
                .iter()
                .filter(udp)
                .find(|p| p.name.as_deref() == Some("dns"))
        })
        .or_else(|| ports.iter().find(|p| p.port == 53))?;
    match &port.target_port {
        None => u16::try_from(port.port).ok(),
        Some(IntOrString::Int(n)) => u16::try_from(*n).ok().filter(|n| *n > 0),
        Some(IntOrString::String(name)) => {
            warnings.push(Warning::new(
                format!("Service {}/{service_name}", config.coredns_namespace),
                format!(
                    "its DNS port targets the named port `{name}`, whose number only the pods know; the Corefile's server blocks on port 53 (else its only port) are assumed to receive the queries"
                ),
            ));
            None
        }
    }
}

/// The API server refuses a ConfigMap whose values (`data` and `binaryData`, every key
/// together) exceed 1 MiB, so a key that fits on its own can still not be written beside
/// large neighbours (kubeadm's `NodeHosts`, other tools' keys).
fn fits_config_map(cm: Option<&ConfigMap>, what: &str, key: &str) -> Result<(), String> {
    let Some(cm) = cm else { return Ok(()) };
    let text: usize = cm.data.iter().flatten().map(|(_, v)| v.len()).sum();
    let binary: usize = cm
        .binary_data
        .iter()
        .flatten()
        .map(|(_, v)| v.0.len())
        .sum();
    let total = text + binary;
    if total > corefile::CONFIGMAP_MAX_BYTES {
        return Err(format!(
            "{what}: with the hairpin rules in key {key} its keys would hold {total} bytes together, over the {}-byte ConfigMap limit (the API server counts every key, not only {key}); use wildcards or fewer hostnames, or make room in the other keys; nothing is written to it",
            corefile::CONFIGMAP_MAX_BYTES
        ));
    }
    Ok(())
}

/// Server-set metadata that must not be sent back, except `resourceVersion`, which guards the
/// write.
fn strip_server_fields(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.creation_timestamp = None;
    meta.generation = None;
    meta.uid = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
        if a.is_empty() {
            meta.annotations = None;
        }
    }
}

/// The node-local-dns Corefiles: pods on nodes running it ask it first, and its root server
/// block forwards every name outside the cluster domain straight to the node's upstream
/// servers, so hairpin's names must be answered there too (node-cache is CoreDNS with
/// `template` compiled in). Off with `--node-local-dns off`: then only a warning.
fn node_local_dns_writes(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    entries: &[DnsEntry],
    opts: &corefile::PlaceOptions,
    cluster_domain: &str,
    warnings: &mut Vec<Warning>,
) -> Vec<DnsWrite> {
    let mut writes = Vec::new();
    for name in &config.node_local_dns_config_maps {
        let Some(cm) = snapshot.config_map(&config.node_local_dns_namespace, name) else {
            continue;
        };
        let subject = format!("ConfigMap {}/{name}", config.node_local_dns_namespace);
        let Some(corefile) = cm.data.as_ref().and_then(|d| d.get(&config.corefile_key)) else {
            continue;
        };
        if config.node_local_dns == NodeLocalDns::Off {
            node_local_dns_warning(corefile, entries, &subject, warnings);
            continue;
        }
        let opts = corefile::PlaceOptions {
            cluster_domain: Some(cluster_domain.to_owned()),
            without_kubernetes: true,
            // Pods ask node-local-dns on the port it binds, not the port the cluster DNS
            // Service targets on CoreDNS's pods.
            dns_port: None,
            ..opts.clone()
        };
        match blocks_write(
            cm,
            &config.corefile_key,
            corefile,
            entries,
            &opts,
            &subject,
            warnings,
        ) {
            Ok(write) => writes.push(write),
            Err(e) => warnings.push(Warning::new(
                &subject,
                format!(
                    "{e}; node-local-dns is not changed, and pods on its nodes still get the public address"
                ),
            )),
        }
    }
    writes
}

/// With `--node-local-dns off`: which names node-local-dns sends upstream, and how to fix it.
fn node_local_dns_warning(
    corefile: &str,
    entries: &[DnsEntry],
    subject: &str,
    warnings: &mut Vec<Warning>,
) {
    {
        let info = match corefile::analyze_node_local_dns(corefile, &[]) {
            Ok(info) => info,
            Err(e) => {
                warnings.push(Warning::new(
                    subject,
                    format!("node-local-dns Corefile unreadable: {e}"),
                ));
                return;
            }
        };
        let patterns: Vec<HostPattern> = entries
            .iter()
            .filter(|e| !e.is_passthrough())
            .map(|e| e.name.clone())
            .collect();
        let bypassed: Vec<HostPattern> = corefile::bypassed(&info, &patterns)
            .into_iter()
            .cloned()
            .collect();
        if bypassed.is_empty() {
            return;
        }
        let zones = corefile::NodeLocalDnsInfo::zones_for(&bypassed);
        let mut message = format!(
            "node-local-dns answers {} of the hairpin hostnames from upstream DNS, bypassing CoreDNS's rewrite (pods on nodes with node-local-dns still get the public address), and --node-local-dns is off",
            bypassed.len()
        );
        let warning = match info.suggested_stanza(&zones) {
            Some(stanza) if !stanza.is_empty() => {
                message.push_str(
                    "; fix: add this server block to its Corefile, or run the node agent:",
                );
                Warning::new(subject, message).with_block(&stanza)
            }
            _ => {
                message.push_str(
                    "; fix: forward these zones to kube-dns in its Corefile, or run the node agent",
                );
                Warning::new(subject, message)
            }
        };
        warnings.push(warning);
    }
}
