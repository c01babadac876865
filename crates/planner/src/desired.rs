//! `desired`: snapshot + config -> plan. Pure. Runs the stages in order (see the crate docs).

use std::borrow::Cow;

use crate::Plan;
use crate::balancers::{self, HostsPlan, LoadBalancerPlan, Placing};
use crate::config::{DnsMode, PlannerConfig};
use crate::coredns::{self, ClusterDns, DnsChange};
use crate::delivery::{Delivery, VIP_NODES, delivery_of};
use crate::discovery::{Discovery, discover};
use crate::error::PlanError;
use crate::external_dns;
use crate::hostnames;
use crate::kube_dns;
use crate::native::{self, Cure, Cures, NativeRecord, Needed};
use crate::snapshot::{ClusterSnapshot, ObjectRef};
use crate::verify::{Verification, Verifier};
use crate::warning::Warning;

/// Computes everything hairpin would write for `snapshot`. Pure and deterministic: the same
/// input gives the same plan, and listener ports already allocated to a load balancer port
/// (read from our existing hairpin Services) are kept.
pub fn desired(snapshot: &ClusterSnapshot, config: &PlannerConfig) -> Plan {
    // Which load balancers need a hairpin.
    let discovery = discover(snapshot, config);
    let mut warnings = discovery.warnings.clone();
    // The cure of each: native (`ipMode: Proxy`) where proven, else the DNS stages below.
    let cures = cures(snapshot, config, &discovery, &mut warnings);
    // The hostnames of every load balancer, admitted; none in a zone the cluster DNS serves.
    let cluster_dns = ClusterDns::read(snapshot, config);
    let lbs = addressed(&discovery);
    let mut collected = hostnames::collect(snapshot, config, &lbs, &cluster_dns.zones());
    warnings.append(&mut collected.warnings);
    // Each needed load balancer's hairpin, with the names resolution proves are its own.
    let lb_addresses: Vec<(&ObjectRef, &[String])> = lbs.iter().map(|(r, a)| (r, *a)).collect();
    let resolutions = &snapshot.resolutions;
    let mut verifier = Verifier::new(config.verify_hostnames, resolutions, &lb_addresses);
    let placing = Placing::new(snapshot, config, &cluster_dns.cluster_domain);
    let needed = &discovery.load_balancers;
    let mut lb_plans = placing.plan(needed, &mut collected, &mut verifier, &mut warnings);
    // No wildcard takes another load balancer's names.
    let verification =
        balancers::carve_out(&mut lb_plans, verifier.out, &collected, config.dns_mode);
    let routes = balancers::routes(&lb_plans);
    // Load balancers on the native cure get no DNS rule and no hosts entry.
    let on_native =
        |lb: &LoadBalancerPlan| cures.cure_of(&lb.load_balancer.service) == Cure::Native;
    let dns_lbs: Cow<'_, [LoadBalancerPlan]> = if lb_plans.iter().any(on_native) {
        Cow::Owned(
            lb_plans
                .iter()
                .filter(|lb| !on_native(lb))
                .cloned()
                .collect(),
        )
    } else {
        Cow::Borrowed(&lb_plans)
    };
    // The DNS that answers the names with the hairpin Services, in the configured mode.
    let (has_corefile, nameservers) =
        (cluster_dns.found.is_some(), &config.stub_domain_nameservers);
    let kube_dns = kube_dns::plan(snapshot, has_corefile, &dns_lbs, nameservers);
    let dns = dns(
        snapshot,
        config,
        &cluster_dns,
        &dns_lbs,
        &verification,
        kube_dns.is_some(),
        &mut warnings,
    );
    warnings.sort();
    warnings.dedup();
    Plan {
        routes_config_map: placing.routes_config_map(&routes),
        orphaned_services: placing.orphaned_services(&lb_plans),
        hosts: HostsPlan::of(&dns_lbs),
        load_balancers: lb_plans,
        not_needed: discovery.not_needed,
        conflicts: collected.conflicts,
        refused: collected.refused,
        routes,
        coredns: cluster_dns.facts(snapshot, config),
        cures: cures.choices,
        native_actions: cures.actions,
        errors: errors(&dns),
        dns: dns.ok(),
        stub_domains: kube_dns,
        verification,
        warnings,
    }
}

/// The cure of every load balancer that needs one ([`native::choose`]). An unreadable record
/// of hairpin's native cures is a warning, and then no status is written.
fn cures(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    discovery: &Discovery,
    warnings: &mut Vec<Warning>,
) -> Cures {
    let (record, readable) = match NativeRecord::read(snapshot, config) {
        Ok(record) => (record, true),
        Err(why) => {
            warnings.push(Warning::escaped_message(
                format!("ConfigMap {}", why.config_map),
                format!("{why}; no load balancer status is written until it is hairpin's again"),
            ));
            (NativeRecord::default(), false)
        }
    };
    warnings.extend(vip_outages(snapshot, config, &record));
    let needed: Vec<Needed<'_>> = discovery
        .load_balancers
        .iter()
        .map(|lb| Needed {
            service: &lb.service,
            forced: lb.forced.is_some(),
        })
        .collect();
    let mut cures = native::choose(snapshot, config, &record, &needed, warnings);
    if !readable {
        cures.actions.clear();
    }
    cures
}

/// A warning per load balancer whose address the nodes receive (a VIP) and whose status
/// another writer set to `ipMode: Proxy`: kube-proxy then drops every rule for that address,
/// and every client outside the cluster is cut off now. hairpin never writes that (its own
/// earlier `Proxy` there is put back by the plan); the warning says what to remove.
fn vip_outages(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    record: &NativeRecord,
) -> Vec<Warning> {
    let mut out = Vec::new();
    for svc in &snapshot.services {
        let spec = svc.spec.as_ref();
        if spec.and_then(|s| s.type_.as_deref()) != Some("LoadBalancer") {
            continue;
        }
        let ours = native::ours(record, svc, config);
        let ingress = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_deref())
            .unwrap_or_default();
        let ips: Vec<&str> = ingress
            .iter()
            .filter(|e| e.ip_mode.as_deref() == Some(native::IP_MODE_PROXY))
            .filter_map(|e| e.ip.as_deref())
            .filter(|ip| !ours.iter().any(|o| o == ip))
            .collect();
        if ips.is_empty() {
            continue;
        }
        let delivery = delivery_of(svc, snapshot, config, &mut Vec::new());
        if delivery.kind != Delivery::Vip {
            continue;
        }
        out.push(Warning::escaped_message(
            format!("Service {}", ObjectRef::from_meta(&svc.metadata)),
            format!(
                "status IP {} says ipMode: Proxy, but {VIP_NODES} ({}): kube-proxy drops every rule for that IP, so every client outside the cluster is cut off now. hairpin never sets it on a VIP; remove ipMode: Proxy from the status (kubectl edit service --subresource=status)",
                crate::escape::text(&ips.join(", ")),
                delivery.evidence
            ),
        ));
    }
    out
}

/// The plan's errors: why there is no DNS change, if there is none.
fn errors(dns: &Result<DnsChange, PlanError>) -> Vec<PlanError> {
    dns.as_ref().err().cloned().into_iter().collect()
}

/// Every load balancer that has an address, needed or not, with its status addresses: so
/// that a hostname shared with a load balancer we leave alone is a conflict too.
fn addressed(discovery: &Discovery) -> Vec<(ObjectRef, &[String])> {
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
    lbs
}

/// The DNS change in the configured mode: `DNSEndpoint`s in external-dns mode, else the
/// writes into the CoreDNS ConfigMaps; `Err` says why there is none. `kube_dns`: the cluster
/// DNS is kube-dns (its `stubDomains` alternative is planned).
fn dns(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    cluster_dns: &ClusterDns<'_>,
    lb_plans: &[LoadBalancerPlan],
    verification: &Verification,
    kube_dns: bool,
    warnings: &mut Vec<Warning>,
) -> Result<DnsChange, PlanError> {
    let domain = &cluster_dns.cluster_domain;
    let redirects = coredns::redirects(lb_plans, config, domain);
    match &cluster_dns.found {
        // No DNS ConfigMap is written: a Corefile, when there is one, gave the cluster domain.
        _ if config.dns_mode == DnsMode::ExternalDns => Ok(DnsChange {
            mode: DnsMode::ExternalDns,
            cluster_domain: domain.clone(),
            entries: redirects,
            writes: Vec::new(),
            dns_endpoints: Some(external_dns::plan(snapshot, config, lb_plans, warnings)),
        }),
        None => Err(PlanError::NoCorednsConfigMap {
            config_maps: config.coredns_config_maps.clone(),
            namespace: config.coredns_namespace.clone(),
            key: config.corefile_key.clone(),
            kube_dns,
        }),
        Some((cm, _, Err(e))) => Err(PlanError::Corefile {
            config_map: ObjectRef::new(
                config.coredns_namespace.clone(),
                cm.metadata.name.clone().unwrap_or_default(),
            ),
            key: config.corefile_key.clone(),
            source: Box::new(e.clone()),
        }),
        Some((cm, _, Ok(corefile))) => {
            let addresses = coredns::target_addresses(lb_plans, config, domain);
            let passthrough = &verification.passthrough;
            let read = (*cm, corefile);
            coredns::change(
                snapshot,
                config,
                read,
                redirects,
                passthrough,
                &addresses,
                warnings,
            )
        }
    }
}
