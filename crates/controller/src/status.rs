//! `Hairpin` objects: one per hairpinned load balancer, what hairpin did for it and whether it
//! took effect.
//!
//! [`desired_hairpins`] is the plan's part (hostnames, refusals, PROXY version, DNS mode), which
//! `hairpin plan` prints too. The controller's [`StatusWriter`] adds what only a running
//! cluster shows: ready endpoints, the last write, and the propagation check it runs in the
//! background after each DNS write ([`crate::propagation::Checks`]), then writes the status through the
//! status subresource, skipping writes that would change nothing. Load balancers that need no
//! hairpin get no object; stale ones are deleted (and the ownerReference on the load balancer
//! Service lets Kubernetes garbage-collect them with it).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use hairpin_planner::ObjectRef;
use hairpin_planner::{ClusterSnapshot, LoadBalancerPlan, Plan, ProxyHeader};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::crd::{
    Hairpin, HairpinSpec, HairpinStatus, HostnameStatus, ReceiverStatus, RefusedHostname,
    UnverifiedHostname, condition, cure_reason,
};
use crate::error::is_not_found;
use crate::propagation::{self, CheckOutcome, join};
use crate::{Error, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use hairpin_planner::is_managed;
use hairpin_planner::native::{Cure, NativeProgress};

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
        native_cure: choice
            .and_then(|c| c.native)
            .map(|n| native_word(n).to_owned()),
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
fn on_native(status: &HairpinStatus) -> bool {
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

/// One load balancer's DNS history, as far as this controller knows it.
#[derive(Clone, Debug, Default)]
struct Written {
    /// The hostnames last known to be in the DNS rules, joined.
    hosts: String,
    /// When they were last written.
    time: Option<Time>,
    /// The same moment, to measure propagation; taken by the check it starts.
    instant: Option<Instant>,
    /// The last measured propagation of that write.
    propagation: Option<f64>,
}

/// Writes the Hairpin objects and runs the propagation checks.
pub(crate) struct StatusWriter {
    /// The loop's client, metrics and planner settings.
    ctx: Arc<Context>,
    /// The propagation checks, one per load balancer.
    checks: propagation::Checks,
    written: HashMap<ObjectRef, Written>,
    crd_missing_logged: bool,
}

/// Now, to the second: the API serializes times to the second, so a finer one would never
/// compare equal to what was read back, and every status would look changed.
fn now() -> Time {
    let second = Timestamp::now().as_second();
    Time(Timestamp::from_second(second).unwrap_or_else(|_| Timestamp::now()))
}

impl StatusWriter {
    /// A writer running `checks`, writing through `ctx`.
    pub(crate) fn new(ctx: &Arc<Context>, checks: propagation::Checks) -> Self {
        Self {
            ctx: ctx.clone(),
            checks,
            written: HashMap::new(),
            crd_missing_logged: false,
        }
    }

    /// Brings every Hairpin object in line with the plan and what is known at runtime.
    /// `hairpins` is `None` when the CRD is not installed; `ready` counts the ready endpoints
    /// of a hairpin Service by name.
    pub(crate) async fn sync(
        &mut self,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
        hairpins: Option<Vec<Hairpin>>,
        ready: impl Fn(&str) -> i32,
        dns: &DnsState,
        services_backed_off: &BTreeSet<String>,
    ) -> Result<(), Error> {
        if *dns == DnsState::NotReached {
            return Ok(());
        }
        let Some(hairpins) = hairpins else {
            if !self.crd_missing_logged {
                tracing::info!(
                    "the hairpins.hairpin.io CRD is not installed; no Hairpin status is written (install it from the chart's crds/)"
                );
                self.crd_missing_logged = true;
            }
            return Ok(());
        };
        self.crd_missing_logged = false;
        let current: HashMap<(String, String), Hairpin> = hairpins
            .into_iter()
            .map(|h| ((h.namespace().unwrap_or_default(), h.name_any()), h))
            .collect();
        let source_annotation = self.ctx.planner.annotation("source");
        let desired = desired_hairpins(plan, snapshot, &source_annotation);
        let mut keep = Vec::new();
        for (lb, mut hairpin) in plan.load_balancers.iter().zip(desired) {
            let lb_ref = lb.load_balancer.service.clone();
            let key = (lb_ref.namespace.clone(), lb_ref.name.clone());
            let existing = current.get(&key);
            if existing.is_some_and(|h| !is_managed(&h.metadata, &source_annotation)) {
                // Someone else's object with the load balancer's name: not ours to write.
                tracing::warn!(hairpin = %format!("{}/{}", key.0, key.1), "a Hairpin object of this name exists and is not hairpin's (it lacks the managed-by label or the source annotation); left alone");
                continue;
            }
            let mut status = hairpin.status.take().unwrap_or_default();
            let cluster_ips = cluster_ips(lb);
            self.track_write(&lb_ref, &status, existing, dns);
            let external = external_dns_progress(plan, &lb_ref);
            if on_native(&status) {
                // No DNS rule to check: a check started before the switch says nothing now.
                self.checks.stop(&lb_ref);
            } else if matches!(dns, DnsState::InPlace { .. }) {
                self.start_check(
                    plan,
                    snapshot,
                    &lb_ref,
                    &status,
                    &cluster_ips,
                    first_port(lb),
                    external.as_ref(),
                );
            }
            let service_name = lb.service.metadata.name.as_deref().unwrap_or_default();
            let probe = Probe {
                dns,
                service_fight: services_backed_off.contains(service_name),
                ready: ready(service_name),
                cluster_ips: &cluster_ips,
                external: external.as_ref(),
            };
            self.overlay(&lb_ref, &mut status, existing, &probe);
            keep.push(key.clone());
            self.write(hairpin, status, existing).await?;
        }
        self.delete_stale(&current, &keep, &source_annotation)
            .await?;
        self.forget_gone(plan);
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

    /// Forgets the write history and stops the DNS checks of load balancers no longer planned.
    fn forget_gone(&mut self, plan: &Plan) {
        let lbs: Vec<ObjectRef> = plan
            .load_balancers
            .iter()
            .map(|lb| lb.load_balancer.service.clone())
            .collect();
        self.written.retain(|lb, _| lbs.contains(lb));
        self.checks.retain(&lbs);
    }

    /// Records a DNS write that changed this load balancer's hostnames.
    fn track_write(
        &mut self,
        lb: &ObjectRef,
        status: &HairpinStatus,
        existing: Option<&Hairpin>,
        dns: &DnsState,
    ) {
        let hosts = hosts_key(&status.hostnames);
        let entry = self.written.entry(lb.clone()).or_insert_with(|| {
            // What an earlier run (or the other replica) recorded.
            let old = existing.and_then(|h| h.status.as_ref());
            Written {
                hosts: old.map(|s| hosts_key(&s.hostnames)).unwrap_or_default(),
                time: old.and_then(|s| s.last_write_time.clone()),
                instant: None,
                propagation: old.and_then(|s| s.propagation_seconds),
            }
        });
        if entry.hosts != hosts {
            entry.hosts = hosts;
            if *dns == (DnsState::InPlace { wrote: true }) {
                entry.time = Some(now());
                entry.instant = Some(Instant::now());
                entry.propagation = None;
            }
        }
    }

    /// Starts (or restarts) the propagation check when the hostnames or the ClusterIP changed.
    #[allow(clippy::too_many_arguments)]
    fn start_check(
        &mut self,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
        lb: &ObjectRef,
        status: &HairpinStatus,
        cluster_ips: &[IpAddr],
        port: Option<u16>,
        external: Option<&ExternalDnsProgress>,
    ) {
        if cluster_ips.is_empty() || status.hostnames.is_empty() {
            return;
        }
        let Some(servers) = self.checks.dns_servers(plan, snapshot) else {
            return;
        };
        let ips: Vec<String> = cluster_ips.iter().map(ToString::to_string).collect();
        // In external-dns mode, external-dns processing the DNSEndpoints starts a new check:
        // one that gave up before it did says nothing about the records it published.
        let processed = external.map_or("", |e| {
            if e.waiting.is_empty() {
                "#processed"
            } else {
                "#waiting"
            }
        });
        let fingerprint = format!(
            "{}@{}{processed}",
            hosts_key(&status.hostnames),
            ips.join(",")
        );
        if self.checks.is_running(lb, &fingerprint) {
            return;
        }
        let written = self.written.get_mut(lb).and_then(|w| w.instant.take());
        self.checks.start(
            plan,
            snapshot,
            lb,
            propagation::Start {
                servers,
                hostnames: status.hostnames.iter().map(|h| h.name.clone()).collect(),
                fingerprint,
                cluster_ips,
                port,
                external_cause: external.map(ExternalDnsProgress::cause),
                written,
            },
        );
    }

    /// Adds the runtime part: ready endpoints, DNS word, write time, conditions.
    fn overlay(
        &mut self,
        lb: &ObjectRef,
        status: &mut HairpinStatus,
        existing: Option<&Hairpin>,
        probe: &Probe<'_>,
    ) {
        let stamp = Stamp {
            generation: existing.and_then(|h| h.metadata.generation),
            previous: existing
                .and_then(|h| h.status.as_ref())
                .map(|s| s.conditions.clone())
                .unwrap_or_default(),
        };
        let (outcome, measured) = self.checks.outcome(lb);
        let written = self.written.entry(lb.clone()).or_default();
        if let Some(outcome) = outcome.as_ref().filter(|o| o.effective && measured) {
            written.propagation = Some((outcome.elapsed.as_secs_f64() * 1000.0).round() / 1000.0);
        }
        status.observed_generation = stamp.generation;
        status.ready_endpoints = probe.ready;
        status.last_write_time = written.time.clone();
        status.propagation_seconds = written.propagation;

        let native = native_cure(status);
        let (parts, ready) = if on_native(status) {
            let parts = [
                service_written(probe.service_fight, &status.service),
                dns_not_used(condition::DNS_WRITTEN),
                dns_not_used(condition::DNS_EFFECTIVE),
                proxy_ready(probe.ready, None, &status.service),
            ];
            status.dns = condition::DNS_NOT_USED.into();
            (parts, native_ready(&native))
        } else {
            let parts = [
                service_written(probe.service_fight, &status.service),
                dns_written(probe.dns, status),
                self.dns_effective(lb, status, probe, outcome.as_ref()),
                proxy_ready(probe.ready, outcome.as_ref(), &status.service),
            ];
            let ready = all_ready(&parts);
            status.dns = match (probe.dns, &outcome) {
                (DnsState::InPlace { .. }, Some(o)) if o.effective => "Effective",
                (DnsState::InPlace { .. }, Some(_)) => "NotEffective",
                (DnsState::InPlace { .. }, None) => "Written",
                _ => "Refused",
            }
            .into();
            (parts, ready)
        };
        let mismatch = receiver_mismatch(status);
        status.conditions = parts
            .into_iter()
            .chain([native, ready])
            .chain(mismatch)
            .map(|part| stamp.condition(part))
            .collect();
    }

    /// `DNSEffective`: whether the cluster DNS answers the hostnames with the hairpin Service,
    /// or why that cannot be known yet.
    fn dns_effective(
        &self,
        lb: &ObjectRef,
        status: &HairpinStatus,
        probe: &Probe<'_>,
        outcome: Option<&CheckOutcome>,
    ) -> Part {
        let unknown = |reason: &str, message: String| {
            Part::new(condition::DNS_EFFECTIVE, None, reason, message)
        };
        let (cluster_ips, external) = (probe.cluster_ips, probe.external);
        if !matches!(probe.dns, DnsState::InPlace { .. }) {
            return unknown("NotWritten", "the DNS rules are not written".into());
        }
        if status.hostnames.is_empty() {
            return unknown(
                "NoHostnames",
                "no hostname points at this load balancer".into(),
            );
        }
        if cluster_ips.is_empty() {
            return unknown(
                "NoClusterIP",
                "the hairpin Service has no ClusterIP yet".into(),
            );
        }
        if !self.checks.has_server(lb) {
            return unknown(
                "NoClusterDNS",
                format!(
                    "no cluster DNS address: no cluster DNS Service with a ClusterIP in {} (kube-dns, one named like a CoreDNS ConfigMap candidate, or one labelled k8s-app=kube-dns or coredns); set --cluster-dns",
                    self.ctx.planner.coredns_namespace
                ),
            );
        }
        match outcome {
            None if external.is_some_and(|e| !e.waiting.is_empty()) => unknown(
                "WaitingForExternalDNS",
                external
                    .map(ExternalDnsProgress::waiting_note)
                    .unwrap_or_default(),
            ),
            None => unknown(
                "Checking",
                format!(
                    "asking the cluster DNS until the hostnames answer with {}",
                    join(cluster_ips)
                ),
            ),
            Some(o) if o.effective => Part::new(
                condition::DNS_EFFECTIVE,
                Some(true),
                "Answered",
                format!(
                    "the cluster DNS answers the hostnames with the hairpin Service ({})",
                    join(cluster_ips)
                ),
            ),
            Some(o) => Part::new(
                condition::DNS_EFFECTIVE,
                Some(false),
                "NotEffective",
                match external {
                    Some(e) => format!(
                        "{}; {}",
                        propagation::wrong_answers(o, cluster_ips),
                        e.cause()
                    ),
                    None => propagation::wrong_answers(o, cluster_ips),
                },
            ),
        }
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

/// What the overlay reads besides the plan: the DNS state, a write fight over the hairpin
/// Service, the ready endpoints, its ClusterIPs and, in external-dns mode, how far external-dns has got.
#[derive(Clone, Copy)]
struct Probe<'a> {
    dns: &'a DnsState,
    /// Writes to the hairpin Service are backed off (a write fight).
    service_fight: bool,
    ready: i32,
    cluster_ips: &'a [IpAddr],
    external: Option<&'a ExternalDnsProgress>,
}

/// One condition of a `Hairpin` status before it is stamped with its transition time.
struct Part {
    type_: &'static str,
    /// `True`, `False`, or `Unknown` (None).
    value: Option<bool>,
    reason: String,
    message: String,
}

impl Part {
    fn new(type_: &'static str, value: Option<bool>, reason: &str, message: String) -> Self {
        Self {
            type_,
            value,
            reason: reason.into(),
            message,
        }
    }

    fn word(&self) -> &'static str {
        match self.value {
            Some(true) => "True",
            Some(false) => "False",
            None => "Unknown",
        }
    }
}

/// What turns a [`Part`] into a condition: the object's generation, and its previous
/// conditions, whose `lastTransitionTime` stays while a condition keeps its status.
struct Stamp {
    generation: Option<i64>,
    previous: Vec<Condition>,
}

impl Stamp {
    fn condition(&self, part: Part) -> Condition {
        let status = part.word();
        let last_transition_time = self
            .previous
            .iter()
            .find(|c| c.type_ == part.type_ && c.status == status)
            .map_or_else(now, |c| c.last_transition_time.clone());
        Condition {
            type_: part.type_.into(),
            status: status.into(),
            reason: part.reason,
            message: part.message,
            observed_generation: self.generation,
            last_transition_time,
        }
    }
}

/// `ServiceWritten`: `False` while another writer keeps changing the hairpin Service.
fn service_written(service_fight: bool, service: &str) -> Part {
    if service_fight {
        Part::new(
            condition::SERVICE_WRITTEN,
            Some(false),
            "WriteFight",
            format!(
                "another writer keeps changing the hairpin Service {service}; hairpin's writes to it are backed off, so it may not lead to the hairpin proxy"
            ),
        )
    } else {
        Part::new(
            condition::SERVICE_WRITTEN,
            Some(true),
            "Written",
            format!("the hairpin Service {service} is as planned"),
        )
    }
}

/// `DNSWritten`: where the rules are, or why they could not be written.
fn dns_written(dns: &DnsState, status: &HairpinStatus) -> Part {
    match dns {
        DnsState::InPlace { .. } => {
            let where_ = if status.dns_endpoints.is_empty() {
                status.config_maps.join(", ")
            } else {
                format!("DNSEndpoint {}", status.dns_endpoints.join(", "))
            };
            Part::new(
                condition::DNS_WRITTEN,
                Some(true),
                "Written",
                format!(
                    "rules for {} hostname(s) are in {where_}",
                    status.hostnames.len()
                ),
            )
        }
        DnsState::Refused { reason, message } => {
            Part::new(condition::DNS_WRITTEN, Some(false), reason, message.clone())
        }
        DnsState::NotReached => unreachable!("sync returns before"),
    }
}

/// `ProxyReady`: ready endpoints, and the TCP connect made once DNS was effective.
fn proxy_ready(ready: i32, outcome: Option<&CheckOutcome>, service: &str) -> Part {
    let connect = outcome.and_then(|o| o.connect.clone());
    match (ready, connect) {
        (0, _) => Part::new(
            condition::PROXY_READY,
            Some(false),
            "NoReadyEndpoints",
            format!("the hairpin Service {service} has no ready proxy pod"),
        ),
        (_, Some(Err(err))) => Part::new(condition::PROXY_READY, Some(false), "ConnectFailed", err),
        (n, Some(Ok(()))) => Part::new(
            condition::PROXY_READY,
            Some(true),
            "Connected",
            format!("{n} ready endpoint(s); a TCP connect to the hairpin Service succeeded"),
        ),
        (n, None) => Part::new(
            condition::PROXY_READY,
            Some(true),
            "EndpointsReady",
            format!("{n} ready endpoint(s)"),
        ),
    }
}

/// `NativeCure`: where the native cure stands, with the planner's reason.
fn native_cure(status: &HairpinStatus) -> Part {
    let (value, reason) = match status.native_cure.as_deref() {
        Some("proven") => (Some(true), cure_reason::PROVEN),
        Some("probing") => (None, cure_reason::PROBING),
        Some("to-prove") => (None, cure_reason::TO_PROVE),
        Some("failed") => (Some(false), cure_reason::FAILED),
        Some("not-needed") => (Some(false), cure_reason::NOT_NEEDED),
        Some("unsupported") => (Some(false), cure_reason::UNSUPPORTED),
        _ => (Some(false), cure_reason::NOT_ELIGIBLE),
    };
    Part::new(
        condition::NATIVE_CURE,
        value,
        reason,
        status.cure_reason.clone(),
    )
}

/// `ReceiverMismatch`, while the load balancer and its receiver disagree.
fn receiver_mismatch(status: &HairpinStatus) -> Option<Part> {
    let mismatch = status.receiver.as_ref()?.mismatch.as_ref()?;
    Some(Part::new(
        condition::RECEIVER_MISMATCH,
        Some(true),
        "Mismatch",
        mismatch.clone(),
    ))
}

/// `DNSWritten` and `DNSEffective` of a load balancer on the native cure: it has no DNS rule.
fn dns_not_used(type_: &'static str) -> Part {
    Part::new(
        type_,
        Some(false),
        "NativeCure",
        "no DNS rule: this load balancer is on the native cure (ipMode: Proxy on its status)"
            .into(),
    )
}

/// `Ready` on the native cure: what the `NativeCure` condition says (the hairpin Service and
/// the DNS are not on the path of in-cluster clients then).
fn native_ready(native: &Part) -> Part {
    if native.value == Some(true) {
        return Part::new(
            condition::READY,
            Some(true),
            "Ready",
            "in-cluster clients of this load balancer's address cross the real load balancer (ipMode: Proxy, proven by probe)".into(),
        );
    }
    Part::new(
        condition::READY,
        native.value,
        &native.reason,
        format!("{}: {}", native.type_, native.message),
    )
}

/// `Ready` takes the first `False` part, else the first `Unknown` one, with its reason.
fn all_ready(parts: &[Part]) -> Part {
    let blocking = [Some(false), None]
        .into_iter()
        .find_map(|value| parts.iter().find(|p| p.value == value));
    match blocking {
        Some(part) => Part::new(
            condition::READY,
            part.value,
            &part.reason,
            format!("{}: {}", part.type_, part.message),
        ),
        None => Part::new(
            condition::READY,
            Some(true),
            "Ready",
            "in-cluster clients of these hostnames reach the load balancer through the hairpin proxy".into(),
        ),
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

    /// Why the cluster DNS does not answer yet, from what external-dns has done.
    fn cause(&self) -> String {
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

fn hosts_key(hostnames: &[HostnameStatus]) -> String {
    hostnames
        .iter()
        .map(|h| h.name.as_str())
        .collect::<Vec<_>>()
        .join(",")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn status(cure: &str, native: Option<&str>) -> HairpinStatus {
        HairpinStatus {
            cure: cure.into(),
            native_cure: native.map(Into::into),
            cure_reason: "why".into(),
            ..HairpinStatus::default()
        }
    }

    /// Each native progress gives its condition, and on the native cure `Ready` follows it.
    #[test]
    fn native_cure_condition_and_ready_per_progress() {
        for (cure, native, value, reason, ready) in [
            ("native", Some("proven"), Some(true), "Proven", Some(true)),
            ("native", Some("probing"), None, "Probing", None),
            ("native", Some("failed"), Some(false), "Failed", Some(false)),
            ("dns", Some("to-prove"), None, "ToProve", None),
            ("dns", Some("failed"), Some(false), "Failed", Some(false)),
            ("dns", None, Some(false), "NotEligible", Some(false)),
        ] {
            let status = status(cure, native);
            let part = native_cure(&status);
            assert_eq!(
                (part.value, part.reason.as_str()),
                (value, reason),
                "{native:?}"
            );
            assert_eq!(part.message, "why");
            assert_eq!(on_native(&status), cure == "native");
            assert_eq!(native_ready(&part).value, ready, "{native:?}");
        }
    }
}
