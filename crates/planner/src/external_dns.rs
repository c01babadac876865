//! The `external-dns` DNS mode: for clusters whose DNS hairpin cannot edit (GKE's kube-dns,
//! Cloud DNS for GKE, managed CoreDNS add-ons that revert edits), hairpin writes no DNS
//! ConfigMap and publishes the hairpinned hostnames as `DNSEndpoint` objects in its own
//! namespace instead: the CRD source of external-dns (`externaldns.k8s.io/v1alpha1`), for an
//! external-dns instance that serves a PRIVATE zone the cluster resolves. They point at the
//! hairpin Services' ClusterIPs, so a public instance must never publish them (it filters them
//! out by [`DNS_ENDPOINT_LABEL`]; docs/compatibility.md).
//!
//! One object per hairpin Service, with its name; a load balancer with more hostnames than
//! fit [`MAX_ENDPOINTS_PER_OBJECT`] gets further objects `<name>.2`, `<name>.3`... (a dot: no
//! hairpin Service name has one, so no other load balancer's object can take that name). One
//! endpoint per (hostname, record type): `A` with the Service's IPv4 ClusterIP(s), `AAAA` with
//! its IPv6 one(s); a hostname whose Service has no ClusterIP yet gets none (external-dns would
//! publish `--default-targets` for an endpoint without targets).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::balancers::{HostsEntry, LoadBalancerPlan, cluster_ips};
use crate::config::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, PlannerConfig};
use crate::hostnames::Hostname;
use crate::snapshot::{ClusterSnapshot, ObjectRef};
use crate::snapshot::{DnsEndpoint, DnsEndpointSpec, Endpoint};
use crate::warning::Warning;

/// API group of external-dns's CRD source.
pub const GROUP: &str = "externaldns.k8s.io";
/// Its version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of a `DNSEndpoint`.
pub const API_VERSION: &str = "externaldns.k8s.io/v1alpha1";
/// The kind.
pub const KIND: &str = "DNSEndpoint";
/// The resource plural.
pub const PLURAL: &str = "dnsendpoints";
/// Label on every `DNSEndpoint` hairpin publishes (with the default annotation prefix): the
/// private external-dns instance selects them with `--label-filter=hairpin.io/dns-endpoint=true`,
/// a public one excludes them with `--label-filter=hairpin.io/dns-endpoint!=true`.
pub const DNS_ENDPOINT_LABEL: &str = "hairpin.io/dns-endpoint";
/// Endpoints per object: a dual-stack hostname takes two, so 500 hostnames. An object stays
/// far below etcd's 1.5 MiB (an endpoint is at most ~350 bytes of JSON), and external-dns
/// handles one object's endpoints in one pass.
pub const MAX_ENDPOINTS_PER_OBJECT: usize = 1000;
/// TTL of the published records: the one hairpin's Corefile answers have, short so that a
/// recreated hairpin Service (a new ClusterIP) is picked up quickly.
pub const RECORD_TTL: i64 = crate::corefile::ANSWER_TTL as i64;

/// The external-dns mode's part of the plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DnsEndpoints {
    /// The objects hairpin wants, sorted by name.
    pub objects: Vec<DnsEndpointWrite>,
    /// hairpin's objects (label and annotation) that it no longer wants: delete them.
    pub stale: Vec<ObjectRef>,
    /// Hostnames whose hairpin Service has no ClusterIP yet: published once it has one.
    pub pending: Vec<HostsEntry>,
}

impl DnsEndpoints {
    /// Whether anything is written or deleted.
    pub fn changed(&self) -> bool {
        !self.stale.is_empty() || self.objects.iter().any(|o| o.changed)
    }

    /// The objects of the load balancer `lb`.
    pub fn of<'a>(&'a self, lb: &'a ObjectRef) -> impl Iterator<Item = &'a DnsEndpointWrite> {
        self.objects.iter().filter(move |o| o.load_balancer == *lb)
    }
}

/// One `DNSEndpoint` hairpin wants.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DnsEndpointWrite {
    /// The load balancer whose hostnames it holds.
    pub load_balancer: ObjectRef,
    /// The object to write (`resourceVersion` of the live one kept, so the write is guarded).
    pub object: DnsEndpoint,
    /// The live object, if any.
    pub current: Option<DnsEndpoint>,
    /// Whether it is created or replaced.
    pub changed: bool,
}

/// Whether `meta` marks one of hairpin's `DNSEndpoint`s in our namespace.
use crate::config::is_ours;

/// The `DNSEndpoint`s for the planned load balancers.
pub(crate) fn plan(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    load_balancers: &[LoadBalancerPlan],
    warnings: &mut Vec<Warning>,
) -> DnsEndpoints {
    let live: BTreeMap<ObjectRef, &DnsEndpoint> = snapshot
        .dns_endpoints
        .iter()
        .filter(|e| is_ours(&e.metadata, config))
        .map(|e| (e.object_ref(), e))
        .collect();
    let mut out = DnsEndpoints::default();
    let mut wildcards = Vec::new();
    for lb in load_balancers {
        let service = lb.service_ref();
        let ips = cluster_ips(&lb.service);
        let v4: Vec<String> = family(&ips, IpAddr::is_ipv4);
        let v6: Vec<String> = family(&ips, IpAddr::is_ipv6);
        if ips.is_empty() {
            out.pending.extend(lb.hostnames.iter().map(|h| HostsEntry {
                hostname: h.name.clone(),
                service: service.clone(),
            }));
            continue;
        }
        wildcards.extend(
            lb.hostnames
                .iter()
                .filter(|h| h.wildcard_labels.is_some())
                .map(|h| h.name.clone()),
        );
        let endpoints = endpoints(&lb.hostnames, &v4, &v6);
        for (i, chunk) in endpoints.chunks(MAX_ENDPOINTS_PER_OBJECT).enumerate() {
            let name = if i == 0 {
                service.name.clone()
            } else {
                format!("{}.{}", service.name, i + 1)
            };
            let target = ObjectRef::new(config.namespace.clone(), name);
            if !live.contains_key(&target)
                && snapshot
                    .dns_endpoints
                    .iter()
                    .any(|e| e.object_ref() == target)
            {
                warnings.push(foreign(&target, config));
                continue;
            }
            let current = live.get(&target).map(|e| (*e).clone());
            let object = endpoint_object(config, lb, &target, chunk.to_vec(), current.as_ref());
            let changed = current.as_ref().is_none_or(|c| !c.matches(&object));
            out.objects.push(DnsEndpointWrite {
                load_balancer: lb.load_balancer.service.clone(),
                object,
                current,
                changed,
            });
        }
    }
    out.objects
        .sort_by(|a, b| a.object.metadata.name.cmp(&b.object.metadata.name));
    let wanted: BTreeSet<ObjectRef> = out.objects.iter().map(|o| o.object.object_ref()).collect();
    out.stale = live.into_keys().filter(|r| !wanted.contains(r)).collect();
    out.pending.sort();
    if !wildcards.is_empty() {
        warnings.push(Warning::new(
            "DNS mode external-dns",
            format!(
                "{} is published as a DNS wildcard record, which answers names any number of labels deep and only where the zone has no record of its own below it (RFC 4592), unlike hairpin's Corefile rules",
                wildcards.join(", ")
            ),
        ));
    }
    out
}

fn family(ips: &[IpAddr], of: fn(&IpAddr) -> bool) -> Vec<String> {
    ips.iter()
        .filter(|ip| of(ip))
        .map(ToString::to_string)
        .collect()
}

/// Someone else's object at the name hairpin needs: never overwritten, and said so.
fn foreign(target: &ObjectRef, config: &PlannerConfig) -> Warning {
    Warning::new(
        format!("DNSEndpoint {target}"),
        format!(
            "exists and is not hairpin's (it lacks the label {MANAGED_BY_LABEL}={MANAGED_BY_VALUE} or the annotation {}): left alone, and the hostnames hairpin would publish in it are not published; delete or rename it",
            config.annotation("source")
        ),
    )
}

/// One endpoint per hostname and record type: `A` with the `v4` targets, `AAAA` with the `v6`
/// ones (none for a family without targets).
fn endpoints(hostnames: &[Hostname], v4: &[String], v6: &[String]) -> Vec<Endpoint> {
    let mut endpoints = Vec::new();
    for h in hostnames {
        for (record_type, targets) in [("A", v4), ("AAAA", v6)] {
            if targets.is_empty() {
                continue;
            }
            endpoints.push(Endpoint {
                dns_name: h.name.clone(),
                targets: targets.to_vec(),
                record_type: record_type.to_owned(),
                record_ttl: Some(RECORD_TTL),
                ..Endpoint::default()
            });
        }
    }
    endpoints
}

fn endpoint_object(
    config: &PlannerConfig,
    lb: &LoadBalancerPlan,
    target: &ObjectRef,
    endpoints: Vec<Endpoint>,
    current: Option<&DnsEndpoint>,
) -> DnsEndpoint {
    let source = &lb.load_balancer.service;
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (config.annotation("dns-endpoint"), "true".to_owned()),
        (
            config.annotation("source-namespace"),
            source.namespace.clone(),
        ),
        (config.annotation("source-name"), source.name.clone()),
    ]);
    DnsEndpoint {
        api_version: API_VERSION.to_owned(),
        kind: KIND.to_owned(),
        metadata: ObjectMeta {
            name: Some(target.name.clone()),
            namespace: Some(target.namespace.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                config.annotation("source"),
                source.to_string(),
            )])),
            resource_version: current.and_then(|c| c.metadata.resource_version.clone()),
            ..ObjectMeta::default()
        },
        spec: DnsEndpointSpec { endpoints },
        status: None,
    }
}
