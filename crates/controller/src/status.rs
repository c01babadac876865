//! `Hairpin` objects: one per hairpinned load balancer, what hairpin did for it and whether it
//! took effect.
//!
//! [`desired_hairpins`] is the plan's part (hostnames, refusals, PROXY version, DNS mode), which
//! `hairpin plan` prints too. The controller's [`StatusWriter`] adds what only a running
//! cluster shows: ready endpoints, the last write, and the propagation check the loop runs in
//! the background after each DNS write ([`crate::propagation::Checks`], started and stopped as
//! the controller's `decide` chooses, its outcome read from the loop's memory), then writes the
//! status through the status subresource, skipping writes that would change nothing. Load
//! balancers that need no hairpin get no object; stale ones are deleted (and the
//! ownerReference on the load balancer Service lets Kubernetes garbage-collect them with it).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use hairpin_planner::ObjectRef;
use hairpin_planner::{
    ClusterSnapshot, LoadBalancerPlan, MANAGED_BY_LABEL, MANAGED_BY_VALUE, Plan, ProxyHeader,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

use crate::Error;
use crate::context::Context;
use crate::crd::{
    Hairpin, HairpinSpec, HairpinStatus, HostnameStatus, ReceiverStatus, RefusedHostname,
    UnverifiedHostname, condition,
};
use crate::error::is_not_found;
use crate::propagation;
use hairpin_planner::is_managed;
use hairpin_planner::native::{Cure, NativeProgress};

mod render;
mod tracking;

use render::Probe;
pub(crate) use tracking::hosts_key;
use tracking::{Written, track_write};

/// Where the DNS change stands after one reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnsState {
    /// The apply stopped before DNS (its error is retried): statuses are left as they are.
    NotReached,
    /// The rules could not be written: a plan error, a failed write, a write fight.
    Refused {
        /// The condition reason.
        reason: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The rules are in place; `wrote` when this reconcile wrote them.
    InPlace {
        /// Written now (rather than found already in place).
        wrote: bool,
    },
}

/// The Hairpin objects the plan implies (plan-derived fields only; no conditions). Each carries
/// the managed-by label and `source_annotation` (the load balancer, `namespace/name`): hairpin
/// updates and deletes only objects with both ([`is_managed`]).
pub fn desired_hairpins(
    plan: &Plan,
    snapshot: &ClusterSnapshot,
    source_annotation: &str,
) -> Vec<Hairpin> {
    plan.load_balancers
        .iter()
        .map(|lb| {
            let svc = &lb.load_balancer.service;
            let mut hairpin = Hairpin::new(&svc.name, HairpinSpec {});
            hairpin.metadata = hairpin_meta(svc, snapshot, source_annotation);
            hairpin.status = Some(planned_status(plan, lb));
            hairpin
        })
        .collect()
}

/// Named after its load balancer, labelled managed-by hairpin, annotated with the load
/// balancer, and owned by its Service once the Service's uid is known.
fn hairpin_meta(
    svc: &ObjectRef,
    snapshot: &ClusterSnapshot,
    source_annotation: &str,
) -> ObjectMeta {
    let owner = snapshot
        .service(&svc.namespace, &svc.name)
        .and_then(|s| s.metadata.uid.clone())
        .map(|uid| OwnerReference {
            api_version: "v1".into(),
            kind: "Service".into(),
            name: svc.name.clone(),
            uid,
            controller: Some(true),
            block_owner_deletion: Some(true),
        });
    ObjectMeta {
        name: Some(svc.name.clone()),
        namespace: Some(svc.namespace.clone()),
        labels: Some(BTreeMap::from([(
            MANAGED_BY_LABEL.into(),
            MANAGED_BY_VALUE.into(),
        )])),
        annotations: Some(BTreeMap::from([(
            source_annotation.to_owned(),
            svc.to_string(),
        )])),
        owner_references: owner.map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// The status fields the plan decides for one load balancer.
fn planned_status(plan: &Plan, lb: &LoadBalancerPlan) -> HairpinStatus {
    let svc = &lb.load_balancer.service;
    let versions: BTreeSet<&str> = lb
        .routes
        .iter()
        .filter(|r| r.proxy_protocol != ProxyHeader::None)
        .map(|r| r.proxy_protocol.as_str())
        .collect();
    let proxy = match versions.len() {
        1 => versions.into_iter().next().unwrap_or_default().to_owned(),
        _ => "mixed".to_owned(),
    };
    let spec = lb.service.spec.as_ref();
    let choice = plan.cures.iter().find(|c| &c.service == svc);
    HairpinStatus {
        proxy,
        cure: choice.map_or(Cure::Dns, |c| c.cure).as_str().to_owned(),
        // The Nodes' gate keeps the DNS cure: `not-on-every-node`, the nodes named in the
        // reason.
        native_cure: match choice {
            Some(c) if !c.nodes.is_empty() => Some(NOT_ON_EVERY_NODE.to_owned()),
            _ => choice
                .and_then(|c| c.native)
                .map(|n| native_word(n).to_owned()),
        },
        // Escaped by the planner (it quotes the probe's outcome and the Service's settings).
        cure_reason: choice.map(|c| c.reason.clone()).unwrap_or_default(),
        delivery: choice.map(|c| c.delivery.kind.as_str().to_owned()),
        host_count: i32::try_from(lb.hostnames.len()).unwrap_or(i32::MAX),
        dns: if choice.is_some_and(|c| c.cure == Cure::Native) {
            condition::DNS_NOT_USED
        } else if plan.dns.is_some() {
            "Written"
        } else {
            "Refused"
        }
        .into(),
        service: lb.service_ref().to_string(),
        cluster_ip: spec
            .and_then(|s| s.cluster_ip.clone())
            .filter(|ip| !ip.is_empty() && ip != "None"),
        hostnames: lb
            .hostnames
            .iter()
            .map(|h| HostnameStatus {
                name: h.name.clone(),
                sources: h.sources.clone(),
            })
            .collect(),
        refused: refused_of(plan, svc),
        unverified: unverified_of(plan, svc),
        receiver: receiver_status(&lb.load_balancer),
        dns_mode: plan.dns.as_ref().map(|d| d.mode.as_str().to_owned()),
        dns_endpoints: plan
            .dns
            .iter()
            .filter_map(|d| d.dns_endpoints.as_ref())
            .flat_map(|e| e.of(svc))
            .map(|o| o.object.object_ref().to_string())
            .collect(),
        config_maps: plan
            .dns
            .as_ref()
            .map(|d| d.writes.iter().map(|w| w.config_map.to_string()).collect())
            .unwrap_or_default(),
        ..HairpinStatus::default()
    }
}

/// `status.receiver`: the receiver the planner found, escaped (it quotes the tenant's
/// workloads and settings); with the mismatch the planner warned about (escaped already).
fn receiver_status(lb: &hairpin_planner::LoadBalancer) -> Option<ReceiverStatus> {
    let r = lb.receiver.as_ref()?;
    let text = |s: &str| hairpin_planner::escape::text(s).into_owned();
    Some(ReceiverStatus {
        implementation: r.implementation.name().to_owned(),
        workload: text(&r.workload),
        proxy_protocol: r.requirement.as_str().to_owned(),
        setting: text(&r.setting),
        read_from: text(&r.read_from),
        mismatch: lb.receiver_mismatch.clone(),
        ports: r
            .ports
            .iter()
            .map(|p| crate::crd::ReceiverPortStatus {
                port: p.port,
                name: p.name.as_deref().map(text),
                proxy_protocol: p.requirement.as_str().to_owned(),
                setting: text(&p.setting),
                read_from: text(&p.read_from),
            })
            .collect(),
    })
}

/// `status.nativeCure`: the planner's progress word.
/// The `nativeCure` word of a load balancer kept on the DNS cure by the Nodes' gate.
pub(crate) const NOT_ON_EVERY_NODE: &str = "not-on-every-node";

fn native_word(progress: NativeProgress) -> &'static str {
    match progress {
        NativeProgress::ToProve => "to-prove",
        NativeProgress::Probing => "probing",
        NativeProgress::Proven => "proven",
        NativeProgress::Failed => "failed",
        NativeProgress::NotNeeded => "not-needed",
        NativeProgress::Unsupported => "unsupported",
    }
}

/// Whether a planned status is on the native cure (no DNS rule, no propagation check).
pub(crate) fn on_native(status: &HairpinStatus) -> bool {
    status.cure == Cure::Native.as_str()
}

/// The hostname claims on load balancer `svc` the admission policy refused.
fn refused_of(plan: &Plan, svc: &ObjectRef) -> Vec<RefusedHostname> {
    plan.refused
        .iter()
        .filter(|r| &r.load_balancer == svc)
        .map(|r| RefusedHostname {
            // As written by the tenant: escaped like every printed value (the reason
            // and the source are escaped already).
            name: hairpin_planner::escape::text(&r.hostname).into_owned(),
            reason: format!("{}: {}", r.reason, r.detail),
            sources: vec![r.source.clone()],
        })
        .collect()
}

/// The hostnames of load balancer `svc` left out because they are not verified.
fn unverified_of(plan: &Plan, svc: &ObjectRef) -> Vec<UnverifiedHostname> {
    plan.verification
        .unverified
        .iter()
        .filter(|u| &u.load_balancer == svc)
        .map(|u| UnverifiedHostname {
            name: u.hostname.clone(),
            reason: u.reason.as_str().to_owned(),
            message: hairpin_planner::escape::text(&u.detail).into_owned(),
            sources: u.sources.clone(),
        })
        .collect()
}

/// Writes the Hairpin objects. Each status step is two: [`StatusWriter::prepare`] (no I/O)
/// chooses the objects, from which the loop's `decide` chooses the propagation checks to
/// start or stop (the checks are its sensor, reporting through the change signal into its
/// memory); then [`StatusWriter::write_all`] writes the objects with what the memory says of
/// the checks.
/// What it must remember between reconciles is kept in the loop's memory ([`StatusMemory`]),
/// not here.
pub(crate) struct StatusWriter {
    /// The loop's client, metrics and planner settings.
    ctx: Arc<Context>,
    /// The propagation checks' DNS server (`--cluster-dns`), when one is given.
    cluster_dns: Option<SocketAddr>,
}

/// What the loop remembers of the Hairpin statuses between reconciles: each load balancer's
/// DNS write history (when its hostnames were last written, the last propagation measured),
/// its propagation check, and whether the missing CRD was logged.
#[derive(Debug, Default)]
pub(crate) struct StatusMemory {
    /// Per load balancer.
    written: HashMap<ObjectRef, Written>,
    /// The propagation checks started, and their outcomes as they reported.
    pub(crate) checks: propagation::CheckMemory,
    /// The missing CRD was logged (once until it appears).
    crd_missing_logged: bool,
    /// The number of the next propagation check started.
    pub(crate) next_check: u64,
}

impl StatusMemory {
    /// When this controller last wrote `lb`'s hostnames, for a check to measure from (until a
    /// check takes it).
    pub(crate) fn write_instant(&self, lb: &ObjectRef) -> Option<std::time::Instant> {
        self.written.get(lb).and_then(|w| w.instant)
    }

    /// A check started now measures `lb`'s last write: a later check does not.
    pub(crate) fn write_measured(&mut self, lb: &ObjectRef) {
        if let Some(written) = self.written.get_mut(lb) {
            written.instant = None;
        }
    }
}

/// One status step's objects, prepared ([`StatusWriter::prepare`]).
pub(crate) struct Prepared {
    /// The Hairpin objects as cached, by namespace and name.
    current: HashMap<(String, String), Hairpin>,
    /// The objects to write, in the plan's order.
    pub(crate) items: Vec<Item>,
    source_annotation: String,
}

/// One load balancer's Hairpin object, before what only a running cluster shows.
pub(crate) struct Item {
    hairpin: Hairpin,
    /// Its planned status.
    pub(crate) status: HairpinStatus,
    key: (String, String),
    /// The load balancer.
    pub(crate) lb_ref: ObjectRef,
    /// The hairpin Service's ClusterIPs (both families), once allocated.
    pub(crate) cluster_ips: Vec<IpAddr>,
    /// The hairpin Service's first port, where the propagation check connects.
    pub(crate) port: Option<u16>,
    /// In external-dns mode, how far external-dns has got with its `DNSEndpoint`s.
    pub(crate) external: Option<ExternalDnsProgress>,
    service_name: String,
}

/// The load balancers planned (whose write history and checks are kept).
pub(crate) fn load_balancers(plan: &Plan) -> Vec<ObjectRef> {
    plan.load_balancers
        .iter()
        .map(|lb| lb.load_balancer.service.clone())
        .collect()
}

/// Now, to the second: the API serializes times to the second, so a finer one would never
/// compare equal to what was read back, and every status would look changed.
fn now() -> Time {
    let second = Timestamp::now().as_second();
    Time(Timestamp::from_second(second).unwrap_or_else(|_| Timestamp::now()))
}

// === impl StatusWriter ===

impl StatusWriter {
    /// A writer writing through `ctx`; `cluster_dns` is the propagation checks' DNS server
    /// when one is given.
    pub(crate) fn new(ctx: &Arc<Context>, cluster_dns: Option<SocketAddr>) -> Self {
        Self {
            ctx: ctx.clone(),
            cluster_dns,
        }
    }

    /// The Hairpin objects the plan wants, their DNS write history remembered; `None` when
    /// nothing is written (the DNS change not reached, or the CRD not installed: `hairpins` is
    /// `None`). No I/O. Which propagation checks to start or stop is `decide`'s
    /// ([`crate::controller`]), from these objects.
    pub(crate) fn prepare(
        &self,
        memory: &mut StatusMemory,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
        hairpins: Option<Vec<Hairpin>>,
        dns: &DnsState,
    ) -> Option<Prepared> {
        if *dns == DnsState::NotReached {
            return None;
        }
        let Some(hairpins) = hairpins else {
            if !memory.crd_missing_logged {
                tracing::info!(
                    "the hairpins.hairpin.io CRD is not installed; no Hairpin status is written (install it from the chart's crds/)"
                );
                memory.crd_missing_logged = true;
            }
            return None;
        };
        memory.crd_missing_logged = false;
        let current: HashMap<(String, String), Hairpin> = hairpins
            .into_iter()
            .map(|h| ((h.namespace().unwrap_or_default(), h.name_any()), h))
            .collect();
        let source_annotation = self.ctx.planner.annotation("source");
        let desired = desired_hairpins(plan, snapshot, &source_annotation);
        let mut items = Vec::new();
        for (lb, mut hairpin) in plan.load_balancers.iter().zip(desired) {
            let lb_ref = lb.load_balancer.service.clone();
            let key = (lb_ref.namespace.clone(), lb_ref.name.clone());
            let existing = current.get(&key);
            if existing.is_some_and(|h| !is_managed(&h.metadata, &source_annotation)) {
                // Someone else's object with the load balancer's name: not ours to write.
                tracing::warn!(hairpin = %format!("{}/{}", key.0, key.1), "a Hairpin object of this name exists and is not hairpin's (it lacks the managed-by label or the source annotation); left alone");
                continue;
            }
            let status = hairpin.status.take().unwrap_or_default();
            track_write(&mut memory.written, &lb_ref, &status, existing, dns);
            items.push(Item {
                hairpin,
                cluster_ips: cluster_ips(lb),
                port: first_port(lb),
                external: external_dns_progress(plan, &lb_ref),
                service_name: lb.service.metadata.name.clone().unwrap_or_default(),
                status,
                key,
                lb_ref,
            });
        }
        Some(Prepared {
            current,
            items,
            source_annotation,
        })
    }

    /// Brings every Hairpin object in line with the plan and what is known at runtime (what
    /// the memory says of the propagation checks among it). `ready` counts the ready
    /// endpoints of a hairpin Service by name; `memory` is what the loop remembers of the
    /// statuses.
    pub(crate) async fn write_all(
        &self,
        memory: &mut StatusMemory,
        prepared: Prepared,
        plan: &Plan,
        ready: impl Fn(&str) -> i32,
        dns: &DnsState,
        services_backed_off: &BTreeSet<String>,
    ) -> Result<(), Error> {
        let Prepared {
            current,
            items,
            source_annotation,
        } = prepared;
        let mut keep = Vec::new();
        for mut item in items {
            let existing = current.get(&item.key);
            let (check, measured) = propagation::outcome(&memory.checks, &item.lb_ref);
            let probe = Probe {
                dns,
                service_fight: services_backed_off.contains(&item.service_name),
                ready: ready(&item.service_name),
                cluster_ips: &item.cluster_ips,
                external: item.external.as_ref(),
                check: (check, measured),
                has_server: self.cluster_dns.is_some() || memory.checks.contains_key(&item.lb_ref),
                coredns_namespace: &self.ctx.planner.coredns_namespace,
            };
            render::overlay(
                &mut memory.written,
                &item.lb_ref,
                &mut item.status,
                existing,
                &probe,
            );
            keep.push(item.key);
            self.write(item.hairpin, item.status, existing).await?;
        }
        self.delete_stale(&current, &keep, &source_annotation)
            .await?;
        // The write history of load balancers no longer planned is forgotten (their checks
        // are stopped by the loop).
        let lbs = load_balancers(plan);
        memory.written.retain(|lb, _| lbs.contains(lb));
        Ok(())
    }
    /// Deletes hairpin's Hairpin objects whose load balancer no longer needs a hairpin.
    async fn delete_stale(
        &self,
        current: &HashMap<(String, String), Hairpin>,
        keep: &[(String, String)],
        source_annotation: &str,
    ) -> Result<(), Error> {
        for (key, hairpin) in current {
            if !is_managed(&hairpin.metadata, source_annotation) || keep.contains(key) {
                continue;
            }
            let api: Api<Hairpin> = Api::namespaced(self.ctx.client.clone(), &key.0);
            // Only the object as cached: one replaced since fails the precondition (409)
            // and is judged again on the next reconcile.
            match api
                .delete(&key.1, &crate::apply::delete_as_read(hairpin))
                .await
            {
                Ok(_) => {
                    self.ctx.metrics.writes.inc();
                    tracing::info!(hairpin = %format!("{}/{}", key.0, key.1), "stale Hairpin deleted");
                }
                Err(err) if is_not_found(&err) || crate::error::is_conflict(&err) => {}
                Err(err) => {
                    return Err(Error::kube(
                        format!("delete Hairpin {}/{}", key.0, key.1),
                        err,
                    ));
                }
            }
        }
        Ok(())
    }

    /// Creates the object when missing, then patches its status unless nothing changed.
    async fn write(
        &self,
        mut hairpin: Hairpin,
        status: HairpinStatus,
        existing: Option<&Hairpin>,
    ) -> Result<(), Error> {
        let namespace = hairpin.namespace().unwrap_or_default();
        let name = hairpin.name_any();
        let what = format!("Hairpin {namespace}/{name}");
        let api: Api<Hairpin> = Api::namespaced(self.ctx.client.clone(), &namespace);
        if existing.and_then(|h| h.status.as_ref()) == Some(&status) {
            return Ok(());
        }
        if existing.is_none() {
            if hairpin.metadata.owner_references.is_none() {
                // Without the Service's uid (not cached yet) there is no ownerReference to
                // garbage-collect it by: wait for the next reconcile.
                return Ok(());
            }
            hairpin.status = None;
            match api.create(&PostParams::default(), &hairpin).await {
                Ok(_) => {
                    self.ctx.metrics.writes.inc();
                }
                Err(err) if crate::error::is_conflict(&err) => {
                    // Created meanwhile: written only if that one is hairpin's.
                    let now = api
                        .get_opt(&name)
                        .await
                        .map_err(|err| Error::kube(format!("get {what}"), err))?;
                    let source_annotation = self.ctx.planner.annotation("source");
                    if !now.is_some_and(|h| is_managed(&h.metadata, &source_annotation)) {
                        tracing::warn!(hairpin = %what, "created meanwhile by someone else; left alone");
                        return Ok(());
                    }
                }
                Err(err) => return Err(Error::kube(format!("create {what}"), err)),
            }
        }
        let patch = serde_json::json!({ "status": status });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|err| Error::kube(format!("patch {what} status"), err))?;
        self.ctx.metrics.writes.inc();
        Ok(())
    }
}

/// In external-dns mode, how far external-dns has got with a load balancer's DNSEndpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExternalDnsProgress {
    /// The objects, `namespace/name`.
    objects: Vec<String>,
    /// Those external-dns has not processed yet (`status.observedGeneration` below
    /// `metadata.generation`, or just written), each with its generations.
    waiting: Vec<String>,
}

impl ExternalDnsProgress {
    fn waiting_note(&self) -> String {
        format!(
            "no external-dns instance has processed DNSEndpoint {} yet (status.observedGeneration below metadata.generation); the private instance must run with --source=crd --crd-source-apiversion=externaldns.k8s.io/v1alpha1 --crd-source-kind=DNSEndpoint --label-filter={}=true",
            self.waiting.join(", "),
            hairpin_planner::external_dns::DNS_ENDPOINT_LABEL
        )
    }

    /// external-dns has processed every `DNSEndpoint` of the load balancer.
    pub(crate) fn processed(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Why the cluster DNS does not answer yet, from what external-dns has done.
    pub(crate) fn cause(&self) -> String {
        if self.waiting.is_empty() {
            format!(
                "external-dns has processed DNSEndpoint {} (status.observedGeneration), so the records are published, but the cluster DNS does not answer them from the private zone: the zone must be visible to the cluster (a Cloud DNS private zone bound to its VPC, a Route 53 private hosted zone associated with it, or a kube-dns stubDomains entry for the zone's nameserver), or the provider has not propagated them yet",
                self.objects.join(", ")
            )
        } else {
            self.waiting_note()
        }
    }
}

/// The external-dns progress of `lb`'s DNSEndpoints; `None` outside external-dns mode or
/// when it has none (its names wait for a ClusterIP).
fn external_dns_progress(plan: &Plan, lb: &ObjectRef) -> Option<ExternalDnsProgress> {
    let endpoints = plan.dns.as_ref()?.dns_endpoints.as_ref()?;
    let mut objects = Vec::new();
    let mut waiting = Vec::new();
    for o in endpoints.of(lb) {
        let name = o.object.object_ref().to_string();
        let current = o.current.as_ref().filter(|_| !o.changed);
        match current.map(|c| (c.processed(), c)) {
            Some((Some(true), _)) => {}
            Some((_, c)) => waiting.push(format!(
                "{name} (generation {}, observed {})",
                c.metadata
                    .generation
                    .map_or_else(|| "unknown".to_owned(), |g| g.to_string()),
                c.status
                    .as_ref()
                    .and_then(|s| s.observed_generation)
                    .map_or_else(|| "none".to_owned(), |g| g.to_string())
            )),
            None => waiting.push(format!("{name} (just written)")),
        }
        objects.push(name);
    }
    (!objects.is_empty()).then_some(ExternalDnsProgress { objects, waiting })
}

/// The hairpin Service's first port: where the DNS check connects once DNS is effective.
fn first_port(lb: &LoadBalancerPlan) -> Option<u16> {
    lb.service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p.first())
        .and_then(|p| u16::try_from(p.port).ok())
}

/// The hairpin Service's ClusterIPs (both families), once allocated.
fn cluster_ips(lb: &hairpin_planner::LoadBalancerPlan) -> Vec<IpAddr> {
    let Some(spec) = lb.service.spec.as_ref() else {
        return Vec::new();
    };
    let mut ips: Vec<IpAddr> = spec
        .cluster_ips
        .iter()
        .flatten()
        .chain(spec.cluster_ip.iter())
        .filter_map(|ip| ip.parse().ok())
        .collect();
    ips.sort();
    ips.dedup();
    ips
}
