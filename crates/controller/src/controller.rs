//! The control loop: caches -> debounced pure plan -> apply, only while leading.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::Shared;
use hairpin_planner::admission::RefusalReason;
use hairpin_planner::{ClusterSnapshot, CorednsFacts, ObjectRef, Plan, PlannerConfig};
use hairpin_runtime::Shutdown;
use hairpin_runtime::admin::ReadyCondition;
use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use tokio::sync::{Notify, watch};

use crate::Error;
use crate::apply::{KeyOutcome, ObjectChanges, apply_services, last_writer, write_key};
use crate::dns_endpoints::DnsEndpointWriter;
use crate::edits::{KeyEdit, dns_edit, fight_fix, hosts_edit, mode_switch_edits, routes_edit};
use crate::fight::{Decision, FightParams, Fights, Observation};
use crate::gate::WriteGate;
use crate::lease::{Leadership, LeaseManager, LeaseParams};
use crate::metrics::Metrics;
use crate::native::{NativeCurer, NativeParams};
use crate::ownership::{OwnershipParams, OwnershipResolver};
use crate::propagation::{Checks, PropagationParams};
use crate::report::{Events, list_note, object_ref, reason};
use crate::status::{DnsState, StatusWriter};
use crate::watch::Caches;

/// Controller settings.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// What to plan.
    pub planner: PlannerConfig,
    /// This instance's identity (pod name).
    pub identity: String,
    /// Leader election (or, with [`LeaseParams::observe_only`], only the uninstall fence);
    /// `None` runs as the only instance, fence or not (tests).
    pub lease: Option<LeaseParams>,
    /// Quiet time after a change before re-planning (coalesces bursts).
    pub debounce: Duration,
    /// Re-plan at least this often even without changes.
    pub resync: Duration,
    /// CoreDNS write-fight detection.
    pub fight: FightParams,
    /// First retry delay after a failed reconcile (doubled up to `max_retry`).
    pub min_retry: Duration,
    /// Longest retry delay.
    pub max_retry: Duration,
    /// The check, after each DNS write, that the cluster DNS answers with the hairpin Service.
    pub propagation: PropagationParams,
    /// The ownership resolver of hostname verification (with `planner.verify_hostnames` set to
    /// `resolve`).
    pub ownership: OwnershipParams,
    /// The native cure's probe (with `planner.cure` `auto` or `native`).
    pub native: NativeParams,
}

impl ControllerConfig {
    /// Defaults for `identity`, leader election on in `planner.namespace`.
    pub fn new(planner: PlannerConfig, identity: &str) -> Self {
        let lease = LeaseParams::new(&planner.namespace, "hairpin-controller", identity);
        Self {
            planner,
            identity: identity.into(),
            lease: Some(lease),
            debounce: Duration::from_millis(150),
            resync: Duration::from_secs(300),
            fight: FightParams::default(),
            min_retry: Duration::from_millis(500),
            max_retry: Duration::from_secs(60),
            propagation: PropagationParams::default(),
            ownership: OwnershipParams::default(),
            native: NativeParams::default(),
        }
    }
}

type StopFuture = Shared<futures::future::BoxFuture<'static, ()>>;

/// Runs the controller until the drain starts, then vacates the Lease.
///
/// `ready` is set once every cache has synced (standbys are ready too: they are warm).
///
/// # Errors
/// None at the moment: every API error is retried; the `Result` leaves room for fatal setup
/// errors.
pub async fn run(
    client: kube::Client,
    config: ControllerConfig,
    metrics: Metrics,
    ready: ReadyCondition,
    shutdown: Shutdown,
) -> Result<(), Error> {
    let stop: StopFuture = {
        let shutdown = shutdown.clone();
        async move { shutdown.draining().await }.boxed().shared()
    };
    let changed = Arc::new(Notify::new());
    let caches = Caches::start(
        &client,
        &config.planner,
        changed.clone(),
        metrics.clone(),
        stop.clone(),
    );

    // Every write of the reconciler (objects, statuses, Events) goes through the gate, which
    // only the leader election opens; the Lease itself, and the Events about it, are written
    // with the plain client.
    let gate = if config.lease.is_some() {
        WriteGate::closed()
    } else {
        WriteGate::always_open()
    };
    let (leader_tx, mut leader_rx) = watch::channel(Leadership::Follower(None));
    let lease_task = match config.lease.clone() {
        Some(params) => Some(elect(
            client.clone(),
            params,
            &config,
            &gate,
            &metrics,
            &stop,
            leader_tx,
        )),
        // Leading at once; the sender stays until the end, so `leader_rx` never ends.
        None => {
            leader_tx.send_replace(Leadership::Leader);
            None
        }
    };
    let client = gate.client(client);

    if !synced(&caches, &stop).await {
        return finish(lease_task).await;
    }
    ready.set(true);

    let mut state = Reconciler::new(client, &config, &metrics, &changed, &stop);
    let mut schedule = Schedule::new(&config);
    let mut fenced = false;
    loop {
        tokio::select! {
            () = changed.notified() => {
                // Coalesce a burst of changes into one plan.
                tokio::time::sleep(config.debounce).await;
                let _ = changed.notified().now_or_never();
            }
            res = leader_rx.changed() => {
                if res.is_err() { return finish(lease_task).await; }
            }
            () = tokio::time::sleep_until(schedule.next.into()) => {}
            () = stop.clone() => return finish(lease_task).await,
        }
        let leadership = leader_rx.borrow().clone();
        if !may_reconcile(&leadership, &mut fenced, &metrics, &ready) {
            schedule.idle();
            continue;
        }
        let outcome = state.reconcile(&caches).await;
        schedule.after(outcome, &metrics);
    }
}

/// Whether this instance reconciles now: only while it leads. The metrics follow the
/// leadership; once fenced, the instance is not ready any more (it does nothing: the reason is
/// logged by the lease manager, and published as an Event on the Lease).
fn may_reconcile(
    leadership: &Leadership,
    fenced: &mut bool,
    metrics: &Metrics,
    ready: &ReadyCondition,
) -> bool {
    metrics.leader.set(i64::from(leadership.is_leader()));
    if *leadership == Leadership::Fenced && !*fenced {
        *fenced = true;
        metrics.fenced.set(1);
        ready.set(false);
    }
    leadership.is_leader()
}

/// Waits until every cache has synced, and says so (with the kinds not installed); false when
/// the shutdown came first.
async fn synced(caches: &Caches, stop: &StopFuture) -> bool {
    tokio::select! {
        () = caches.wait_synced() => {}
        () = stop.clone() => return false,
    }
    // A shutdown ends the cache tasks, which also ends `wait_synced`.
    if !caches.is_synced() {
        return false;
    }
    tracing::info!(ingresses = caches.ingress_count(), "caches synced");
    let absent = caches.absent_kinds();
    if !absent.is_empty() {
        tracing::info!(
            kinds = ?absent,
            "kinds not installed (no CRD); skipped (checked again every minute)"
        );
    }
    true
}

/// Starts the leader election, publishing the leadership on `leader_tx`. The Lease, and the
/// Events about it, are written with `client`, not through the gate the election opens.
fn elect(
    client: kube::Client,
    params: LeaseParams,
    config: &ControllerConfig,
    gate: &WriteGate,
    metrics: &Metrics,
    stop: &StopFuture,
    leader_tx: watch::Sender<Leadership>,
) -> tokio::task::JoinHandle<()> {
    let lease_events = Events::new(client.clone(), &config.identity, metrics.clone());
    let manager = LeaseManager::new(client, params)
        .with_events(lease_events)
        .with_gate(gate.clone());
    let metrics = metrics.clone();
    tokio::spawn(manager.run(leader_tx, stop.clone(), move |err| metrics.error(err)))
}

/// When the next reconcile runs: after `resync` when there is nothing to do, when the last
/// one asked, or with an exponential backoff after a failure.
struct Schedule {
    next: Instant,
    retry: Duration,
    min_retry: Duration,
    max_retry: Duration,
    resync: Duration,
}

impl Schedule {
    fn new(config: &ControllerConfig) -> Self {
        Self {
            next: Instant::now(),
            retry: config.min_retry,
            min_retry: config.min_retry,
            max_retry: config.max_retry,
            resync: config.resync,
        }
    }

    /// Not leading (or fenced): look again after `resync`, or on a change.
    fn idle(&mut self) {
        self.next = Instant::now() + self.resync;
    }

    fn after(&mut self, outcome: Result<Option<Instant>, Error>, metrics: &Metrics) {
        match outcome {
            Ok(requeue) => {
                metrics.last_reconcile_success.set(unix_now());
                self.retry = self.min_retry;
                self.next = requeue.unwrap_or_else(|| Instant::now() + self.resync);
            }
            Err(err) if crate::gate::is_withheld(&err) => {
                // The gate closed during the reconcile (the Lease was lost, or could not be
                // renewed in time): the rest of it was not written. Tried again soon: the
                // election says whether this instance still leads.
                tracing::info!(
                    "the write gate closed during a reconcile (leadership lost or not renewed in time); its remaining writes were withheld"
                );
                self.next = Instant::now() + self.min_retry;
            }
            Err(err) => {
                metrics.error(&err);
                tracing::warn!(error = %err, kind = err.metric_label(), retry_in = ?self.retry, "reconcile failed; retrying");
                self.next = Instant::now() + self.retry;
                self.retry = (self.retry * 2).min(self.max_retry);
            }
        }
    }
}

/// One of hairpin's own ConfigMap keys (the proxies' routes, the node agents' hosts), for
/// [`Reconciler::write_own_key`].
struct OwnKey {
    namespace: String,
    name: String,
    key: String,
    /// Who reads it, in the fight Event.
    read_by: &'static str,
}

impl OwnKey {
    /// Key `key` of ConfigMap `name` in hairpin's namespace.
    fn new(planner: &PlannerConfig, name: &str, key: &str, read_by: &'static str) -> Self {
        Self {
            namespace: planner.namespace.clone(),
            name: name.to_owned(),
            key: key.to_owned(),
            read_by,
        }
    }

    /// `namespace/name/key`, its fight target (as [`hairpin_planner::DnsWrite::target`]).
    fn target(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.name, self.key)
    }
}

/// The sooner of two optional instants.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

async fn finish(lease_task: Option<tokio::task::JoinHandle<()>>) -> Result<(), Error> {
    if let Some(task) = lease_task {
        let _ = task.await;
    }
    Ok(())
}

struct Reconciler {
    client: kube::Client,
    config: ControllerConfig,
    events: Events,
    metrics: Metrics,
    /// Write-fight state per DNS key (`namespace/name/key`) and per object of hairpin's
    /// (`Kind namespace/name`).
    fights: Fights,
    /// The refused hostname claims of the last plan, to count and report each once.
    refused: BTreeSet<RefusedClaim>,
    status: StatusWriter,
    /// Where this reconcile left the DNS change, for the Hairpin statuses.
    dns_state: DnsState,
    /// The hairpin Services this reconcile left as another writer made them (a write fight),
    /// for the Hairpin statuses.
    services_backed_off: BTreeSet<String>,
    /// The `DNSEndpoint`s of `--dns-mode external-dns` (and their clean-up after a switch).
    dns_endpoints: DnsEndpointWriter,
    /// The native cure's status writes, probes and record.
    native: NativeCurer,
    /// The ownership resolver, with `--verify-hostnames=resolve`.
    upstream: Option<OwnershipResolver>,
    /// The first write after the start waited for the names' first answers (or for the
    /// startup grace to end).
    verified_once: bool,
    /// The unverified hostnames reported in Events, per load balancer, to publish each change
    /// once.
    unverified: BTreeMap<ObjectRef, String>,
}

/// One refused claim: who asked (kind, object), the hostname and the reason.
type RefusedClaim = (String, ObjectRef, String, RefusalReason);

impl Reconciler {
    /// The reconciler of a controller whose caches have synced, writing with `client` (through
    /// the gate). With hostname verification on, its resolver starts here: only the leader
    /// plans, so only the leader's resolver has names to ask; a new leader holds its first
    /// write until their answers come (`verified_once`).
    fn new(
        client: kube::Client,
        config: &ControllerConfig,
        metrics: &Metrics,
        changed: &Arc<Notify>,
        stop: &StopFuture,
    ) -> Self {
        let upstream = (config.planner.verify_hostnames == hairpin_planner::VerifyMode::Resolve)
            .then(|| {
                OwnershipResolver::new(config.ownership.clone(), changed.clone(), metrics.clone())
            });
        if let Some(upstream) = &upstream {
            tokio::spawn(upstream.clone().run(stop.clone()));
        }
        let events = Events::new(client.clone(), &config.identity, metrics.clone());
        let dns_endpoints = DnsEndpointWriter::new(
            client.clone(),
            events.clone(),
            metrics.clone(),
            &config.planner,
        );
        let native = NativeCurer::new(
            client.clone(),
            events.clone(),
            metrics.clone(),
            config.planner.clone(),
            config.native.clone(),
            config.fight.clone(),
            changed.clone(),
        );
        Reconciler {
            dns_endpoints,
            native,
            upstream,
            verified_once: false,
            unverified: BTreeMap::new(),
            client: client.clone(),
            config: config.clone(),
            status: StatusWriter::new(Checks::new(
                client,
                events.clone(),
                metrics.clone(),
                config.propagation.clone(),
                config.planner.clone(),
                changed.clone(),
            )),
            events,
            metrics: metrics.clone(),
            fights: Fights::new(config.fight.clone()),
            refused: BTreeSet::new(),
            dns_state: DnsState::NotReached,
            services_backed_off: BTreeSet::new(),
        }
    }

    /// One plan-and-apply. Returns when to run again, if sooner than the resync.
    async fn reconcile(&mut self, caches: &Caches) -> Result<Option<Instant>, Error> {
        let started = Instant::now();
        self.metrics.reconciles.inc();
        let mut snapshot = caches.snapshot();
        // Do no harm: a receiver whose ConfigMap was just named (a new workload, a new
        // leader) is read before anything is planned for its load balancer; the watch wakes
        // the loop once it has listed.
        let waiting = caches.follow_receivers(&snapshot);
        if !waiting.is_empty() {
            tracing::debug!(waiting = %waiting.join(", "), "waiting for the receivers' ConfigMaps to list before planning");
            return Ok(Some(Instant::now() + Duration::from_millis(500)));
        }
        if let Some(upstream) = &self.upstream {
            snapshot.resolutions = upstream.resolutions();
        }
        let plan = hairpin_planner::desired(&snapshot, &self.config.planner);
        if let Some(upstream) = &self.upstream {
            upstream.want(&plan.verification.names, &plan.coredns.forward_zones);
            // Do no harm on a start: names not resolved yet are not redirected, so writing
            // before their answers come would drop working names for a moment. The resolver
            // wakes the loop as answers arrive.
            if !self.verified_once && !upstream.settled() {
                tracing::info!(
                    names = plan.verification.names.len(),
                    "waiting for the first upstream answers before writing"
                );
                return Ok(Some(Instant::now() + Duration::from_secs(1)));
            }
            self.verified_once = true;
        }
        self.metrics.set_unverified(&plan.verification);
        self.metrics.set_cures(&plan.cures);
        self.metrics
            .managed_load_balancers
            .set(i64::try_from(plan.load_balancers.len()).unwrap_or(i64::MAX));
        self.metrics.managed_hostnames.set(
            i64::try_from(plan.dns.as_ref().map_or(0, |dns| dns.entries.len())).unwrap_or(i64::MAX),
        );
        self.dns_state = DnsState::NotReached;
        self.dns_endpoints.crd_served(caches.dns_endpoints_served());
        let deleted = self
            .dns_endpoints
            .clean_once(self.config.planner.dns_mode)
            .await;
        self.count_writes(deleted);
        let result = self.apply(&plan, &snapshot).await;
        self.metrics
            .reconcile_duration
            .observe(started.elapsed().as_secs_f64());
        self.report(&plan, &snapshot).await;
        let statuses = self
            .status
            .sync(
                &plan,
                &snapshot,
                caches.hairpins(),
                |name| caches.ready_endpoints(name),
                &self.dns_state,
                &self.services_backed_off,
            )
            .await;
        let requeue = result?;
        statuses?;
        Ok(requeue)
    }

    async fn apply(
        &mut self,
        plan: &Plan,
        snapshot: &hairpin_planner::ClusterSnapshot,
    ) -> Result<Option<Instant>, Error> {
        let planner = &self.config.planner;
        let services: Vec<Service> = plan
            .load_balancers
            .iter()
            .map(|lb| lb.service.clone())
            .collect();
        let changes = apply_services(
            &self.client,
            &planner.namespace,
            &planner.annotation("source"),
            &services,
            Some(&mut self.fights),
        )
        .await?;
        self.count_writes(changes.writes());
        if changes.writes() > 0 {
            tracing::info!(created = ?changes.created, updated = ?changes.updated, deleted = ?changes.deleted, "hairpin Services applied");
        }
        let services_requeue = self.report_reverts("Service", &changes).await;
        self.services_backed_off = changes
            .backed_off
            .iter()
            .map(|(name, _)| name.clone())
            .collect();

        // The proxies' route table, and the node agents' hosts block (each agent watches only
        // that object, never the cluster's Ingresses and routes).
        let planner = &self.config.planner;
        let own_keys = [
            (
                OwnKey::new(
                    planner,
                    &planner.routes_config_map,
                    &planner.routes_key,
                    "the hairpin proxies' route table",
                ),
                routes_edit(plan, snapshot, planner),
            ),
            (
                OwnKey::new(
                    planner,
                    &planner.hosts_config_map,
                    &planner.hosts_key,
                    "the node agents' hosts block",
                ),
                hosts_edit(plan, snapshot, planner),
            ),
        ];
        let mut requeue = services_requeue;
        let mut fight = false;
        for (own, edit) in own_keys {
            requeue = earliest(requeue, self.write_own_key(&own, edit).await?);
            fight |= self.fights.in_fight(&own.target());
        }
        self.metrics.config_map_fight.set(i64::from(fight));

        // The native cure before the DNS: the plan already keeps the DNS rules of every load
        // balancer not proven (make before break).
        let native_requeue = self.native.apply(plan, snapshot).await?;
        let dns_requeue = self.apply_dns(plan, snapshot).await?;
        Ok(earliest(earliest(requeue, native_requeue), dns_requeue))
    }

    /// One of hairpin's own ConfigMap keys: written when the cached copy differs from the plan
    /// (`edit`), and guarded against a write fight like the DNS keys: another writer that
    /// keeps changing (or deleting) it is restored `--fight-threshold` times within
    /// `--fight-window`, then left alone for the backoff, with one Warning Event on the
    /// ConfigMap naming it. Returns when a backed-off write may be tried again.
    async fn write_own_key(
        &mut self,
        own: &OwnKey,
        edit: Option<KeyEdit>,
    ) -> Result<Option<Instant>, Error> {
        let target = own.target();
        let config_map = format!("{}/{}", own.namespace, own.name);
        let Some(edit) = edit else {
            if self.fights.held(&target, Instant::now()) {
                tracing::info!(configmap = %config_map, "our ConfigMap has held for a whole window; the write fight is over");
            }
            return Ok(None);
        };
        if let Decision::BackedOff(until) = self.fights.decide(&target, Instant::now()) {
            tracing::debug!(configmap = %config_map, "write backed off (write fight)");
            return Ok(Some(until));
        }
        let KeyOutcome::Written {
            after,
            managed_fields,
            ..
        } = write_key(&self.client, &edit).await?
        else {
            return Ok(None);
        };
        self.count_writes(1);
        tracing::info!(configmap = %config_map, "{} published", own.read_by);
        let writer = last_writer(&managed_fields);
        match self.fights.written(&target, after, Instant::now()) {
            Observation::Normal => Ok(None),
            Observation::Reverted { .. } => {
                self.metrics.config_map_reverts.inc();
                tracing::warn!(configmap = %config_map, writer = ?writer, "{} changed {}; restored it", other_writer(writer.as_deref()), own.read_by);
                Ok(None)
            }
            Observation::Fight { count, backoff } => {
                self.metrics.config_map_reverts.inc();
                let note = format!(
                    "{} changed hairpin's ConfigMap {config_map} (key {}, {}) {count} times within {:?}; hairpin restored it each time and now leaves it for {backoff:?} (doubling while this goes on), so what reads it gets the other writer's version meanwhile. Exclude hairpin's objects (label {}={}) from that writer.",
                    other_writer(writer.as_deref()),
                    own.key,
                    own.read_by,
                    self.config.fight.window,
                    crate::MANAGED_BY_LABEL,
                    crate::MANAGED_BY_VALUE,
                );
                tracing::warn!(configmap = %config_map, writer = ?writer, reverts = count, backoff = ?backoff, "write fight over one of hairpin's ConfigMaps; backing off");
                let regarding = object_ref("ConfigMap", &own.namespace, &own.name, None);
                self.events
                    .publish(&regarding, true, reason::CONFIG_MAP_FIGHT, note)
                    .await;
                Ok(Some(Instant::now() + backoff))
            }
        }
    }

    /// Reports hairpin's objects of `kind` that someone else changed (a log line per
    /// restore; a Warning Event on the object naming the other writer when that became a
    /// fight) and sets the fight metrics. Returns when a backed-off object may be written
    /// again.
    async fn report_reverts(&mut self, kind: &str, changes: &ObjectChanges) -> Option<Instant> {
        let namespace = self.config.planner.namespace.clone();
        let (reverts, fight) = match kind {
            "Service" => (&self.metrics.service_reverts, &self.metrics.service_fight),
            _ => (&self.metrics.dns_reverts, &self.metrics.dns_fight),
        };
        reverts.inc_by(u64::try_from(changes.reverted.len()).unwrap_or(u64::MAX));
        fight.set(i64::from(self.fights.in_fight(&format!("{kind} "))));
        let mut requeue = changes.backed_off.iter().map(|(_, until)| *until).min();
        for revert in &changes.reverted {
            let object = format!("{kind} {namespace}/{}", revert.name);
            let writer = other_writer(revert.writer.as_deref());
            match revert.observation {
                Observation::Fight { count, backoff } => {
                    let note = format!(
                        "{writer} changed hairpin's {object} {count} times within {:?}; hairpin restored it each time and now leaves it for {backoff:?} (doubling while this goes on). Exclude hairpin's objects (label {}={}) from that writer.",
                        self.config.fight.window,
                        crate::MANAGED_BY_LABEL,
                        crate::MANAGED_BY_VALUE,
                    );
                    tracing::warn!(object = %object, writer = ?revert.writer, reverts = count, backoff = ?backoff, "write fight over one of hairpin's objects; backing off");
                    let regarding = object_ref(kind, &namespace, &revert.name, None);
                    let reason = match kind {
                        "Service" => reason::SERVICE_FIGHT,
                        _ => reason::DNS_FIGHT,
                    };
                    self.events.publish(&regarding, true, reason, note).await;
                    requeue = earliest(requeue, Some(Instant::now() + backoff));
                }
                _ => {
                    tracing::warn!(object = %object, writer = ?revert.writer, "{writer} changed one of hairpin's objects; restored it");
                }
            }
        }
        requeue
    }

    async fn apply_dns(
        &mut self,
        plan: &Plan,
        snapshot: &hairpin_planner::ClusterSnapshot,
    ) -> Result<Option<Instant>, Error> {
        let planner = &self.config.planner;
        let Some(dns) = &plan.dns else {
            self.metrics
                .dns_plan_errors
                .set(i64::try_from(plan.errors.len()).unwrap_or(i64::MAX));
            // Each message escapes what it quotes once: printed as it is.
            let messages: Vec<String> = plan.errors.iter().map(ToString::to_string).collect();
            self.dns_state = DnsState::Refused {
                reason: "NotPlanned",
                message: format!("hairpin cannot change DNS: {}", messages.join("; ")),
            };
            for err in &plan.errors {
                self.metrics.count_error(err.metric_label());
                tracing::warn!(error = %err, kind = err.metric_label(), "DNS change not planned");
            }
            // Say so on the CoreDNS ConfigMap, when there is one to attach it to.
            if let Some(cm) = &plan.coredns.config_map
                && !plan.errors.is_empty()
            {
                let cm_ref = object_ref("ConfigMap", &cm.namespace, &cm.name, None);
                let note = list_note("hairpin cannot change DNS: ", &messages, "; ", "");
                self.events
                    .publish(&cm_ref, true, reason::DNS_WRITE_FAILED, note)
                    .await;
            }
            return Ok(None);
        };
        self.metrics.dns_plan_errors.set(0);
        for edit in mode_switch_edits(dns, snapshot, planner) {
            write_key(&self.client, &edit).await?;
        }
        if let Some(endpoints) = &dns.dns_endpoints {
            let applied = self
                .dns_endpoints
                .apply(
                    plan,
                    endpoints,
                    snapshot,
                    &mut self.fights,
                    &mut self.dns_state,
                )
                .await?;
            let Some(changes) = applied else {
                return Ok(None);
            };
            self.count_writes(changes.writes());
            let requeue = self.report_reverts("DNSEndpoint", &changes).await;
            self.dns_endpoints.announce(endpoints, &changes).await;
            return Ok(requeue);
        }

        let mut requeue: Option<Instant> = None;
        for (i, write) in dns.writes.iter().enumerate() {
            let next = self.apply_write(dns, write, i == 0, &plan.coredns).await?;
            requeue = earliest(requeue, next);
        }
        Ok(requeue)
    }

    /// One DNS key: written when it differs, guarded against a write fight per key. The
    /// `primary` (CoreDNS) write decides the DNS state the Hairpin statuses report.
    async fn apply_write(
        &mut self,
        dns: &hairpin_planner::DnsChange,
        write: &hairpin_planner::DnsWrite,
        primary: bool,
        coredns: &CorednsFacts,
    ) -> Result<Option<Instant>, Error> {
        let target = write.target();
        if !write.changed {
            if primary {
                self.dns_state = DnsState::InPlace { wrote: false };
            }
            if self.fights.held(&target, Instant::now()) {
                self.metrics.dns_fight.set(0);
                tracing::info!(configmap = %write.config_map, "our DNS change has held for a whole window; the write fight is over");
            }
            return Ok(None);
        }
        if let Decision::BackedOff(until) = self.fights.decide(&target, Instant::now()) {
            if primary {
                self.dns_state = DnsState::Refused {
                    reason: "WriteFight",
                    message: format!(
                        "another writer keeps reverting hairpin's change to {}; writes are backed off",
                        write.config_map
                    ),
                };
            }
            tracing::debug!(configmap = %write.config_map, "DNS write backed off (write fight)");
            return Ok(Some(until));
        }
        let Some((after, managed_fields)) = self.write_dns_key(write, primary).await? else {
            return Ok(None);
        };
        if primary {
            self.dns_state = DnsState::InPlace { wrote: true };
        }
        self.count_writes(1);
        tracing::info!(configmap = %write.config_map, key = %write.key, entries = dns.entries.len(), "DNS change written");
        let observation = self.fights.written(&target, after, Instant::now());
        Ok(self
            .after_dns_write(dns, write, observation, &managed_fields, coredns)
            .await)
    }

    /// Writes one DNS key: the value written and the `managedFields` read before, or None
    /// when nothing was written (already in place, or no ConfigMap). A failed write is a
    /// Warning Event on the ConfigMap (and, for the `primary` write, the DNS state).
    async fn write_dns_key(
        &mut self,
        write: &hairpin_planner::DnsWrite,
        primary: bool,
    ) -> Result<Option<(Option<String>, Vec<ManagedFieldsEntry>)>, Error> {
        let edit = dns_edit(write);
        let outcome = match write_key(&self.client, &edit).await {
            Ok(outcome) => outcome,
            // Not leading any more: not a failure of the DNS write.
            Err(err) if crate::gate::is_withheld(&err) => return Err(err),
            Err(err) => {
                self.metrics.dns_write_failures.inc();
                let warning = format!("cannot write {} key {}: {err}", write.config_map, write.key);
                if primary {
                    self.dns_state = DnsState::Refused {
                        reason: "WriteFailed",
                        message: warning.clone(),
                    };
                }
                self.events
                    .publish(
                        &config_map_ref(write),
                        true,
                        reason::DNS_WRITE_FAILED,
                        warning,
                    )
                    .await;
                return Err(err);
            }
        };
        match outcome {
            KeyOutcome::Written {
                after,
                managed_fields,
                ..
            } => Ok(Some((after, managed_fields))),
            KeyOutcome::Unchanged { .. } => {
                if primary {
                    self.dns_state = DnsState::InPlace { wrote: false };
                }
                Ok(None)
            }
            KeyOutcome::ConfigMapMissing => {
                if primary {
                    self.dns_state = DnsState::Refused {
                        reason: "ConfigMapMissing",
                        message: format!("the ConfigMap {} does not exist", write.config_map),
                    };
                }
                Ok(None)
            }
        }
    }

    /// After a DNS write, what the fight guard observed: a normal write (an Event), a revert
    /// by another writer (rewritten), or a fight (backed off, with an Event naming the writer
    /// and the fix). Some: when to try again.
    async fn after_dns_write(
        &mut self,
        dns: &hairpin_planner::DnsChange,
        write: &hairpin_planner::DnsWrite,
        observation: Observation,
        managed_fields: &[ManagedFieldsEntry],
        coredns: &CorednsFacts,
    ) -> Option<Instant> {
        let planner = &self.config.planner;
        match observation {
            Observation::Normal => {
                self.metrics.dns_fight.set(0);
                let note = format!(
                    "hairpin DNS rules written ({} hostnames)",
                    dns.entries.len()
                );
                self.events
                    .publish(&config_map_ref(write), false, reason::DNS_UPDATED, note)
                    .await;
                None
            }
            Observation::Reverted { count } => {
                self.metrics.dns_reverts.inc();
                tracing::warn!(configmap = %write.config_map, reverts = count, "another writer reverted our DNS change; rewrote it");
                None
            }
            Observation::Fight { count, backoff } => {
                self.metrics.dns_reverts.inc();
                self.metrics.dns_fight.set(1);
                let fix = fight_fix(
                    write,
                    managed_fields,
                    coredns.custom_key_suffix.as_deref(),
                    planner,
                );
                let writer = last_writer(managed_fields);
                let note = format!(
                    "{} reverted hairpin's change to {} {count} times within {:?}; backing off for {:?}. {fix}",
                    other_writer(writer.as_deref()),
                    write.config_map,
                    self.config.fight.window,
                    backoff
                );
                tracing::warn!(configmap = %write.config_map, writer = ?writer, reverts = count, backoff = ?backoff, fix, "DNS write fight detected; backing off");
                self.events
                    .publish(&config_map_ref(write), true, reason::DNS_FIGHT, note)
                    .await;
                Some(Instant::now() + backoff)
            }
        }
    }

    fn count_writes(&self, n: usize) {
        self.metrics
            .writes
            .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
    }

    /// An Event on each load balancer the native cure is not tried on because of how it
    /// delivers traffic (a VIP, or unknown), or refused on (forced on a VIP): the plan's
    /// reason, which names the outage native would cause.
    async fn report_delivery(
        &mut self,
        plan: &Plan,
        regarding_service: &impl Fn(&ObjectRef) -> ObjectReference,
    ) {
        use hairpin_planner::CureMode;
        use hairpin_planner::delivery::Delivery;
        let barred = plan.cures.iter().filter(|c| {
            c.mode != CureMode::Dns && c.native.is_none() && c.delivery.kind != Delivery::Proxy
        });
        for choice in barred {
            let refused = choice.delivery.kind == Delivery::Vip && choice.mode == CureMode::Native;
            let reason = if refused {
                reason::NATIVE_REFUSED
            } else {
                reason::NATIVE_NOT_TRIED
            };
            // Escaped by the planner (it quotes the Service's annotations).
            let note = format!(
                "{} (delivery {}: {})",
                choice.reason, choice.delivery.kind, choice.delivery.evidence
            );
            let regarding = regarding_service(&choice.service);
            self.events.publish(&regarding, refused, reason, note).await;
        }
    }

    async fn report(&mut self, plan: &Plan, snapshot: &hairpin_planner::ClusterSnapshot) {
        // The Event is about the Service, named with its uid when it is cached.
        let regarding_service = |svc: &ObjectRef| {
            let uid = snapshot
                .service(&svc.namespace, &svc.name)
                .and_then(|s| s.metadata.uid.clone());
            object_ref("Service", &svc.namespace, &svc.name, uid)
        };
        for lb in &plan.load_balancers {
            let svc = &lb.load_balancer.service;
            let hosts: Vec<&str> = lb.hostnames.iter().map(|h| h.name.as_str()).collect();
            let head = format!(
                "hairpin Service {} routes {} hostname(s) through the hairpin proxy: ",
                lb.service_ref(),
                hosts.len(),
            );
            let note = list_note(&head, &hosts, ", ", "");
            let regarding = regarding_service(svc);
            self.events
                .publish(&regarding, false, reason::CONFIGURED, note)
                .await;
        }
        // A load balancer without any PROXY signal is not hairpin's business: no Event.
        let relevant = plan
            .not_needed
            .iter()
            .filter(|n| n.reason != hairpin_planner::SkipReason::NoProxyProtocol);
        for skipped in relevant {
            let svc = &skipped.service;
            let regarding = regarding_service(svc);
            let note = format!("no hairpin needed: {}", skipped.reason.describe());
            self.events
                .publish(&regarding, false, reason::NOT_NEEDED, note)
                .await;
        }
        // A load balancer and its receiver that disagree: kept (its cure was in place) or
        // left alone; either way a Warning on the Service with both settings and the fix.
        let kept = plan.load_balancers.iter().filter_map(|lb| {
            let l = &lb.load_balancer;
            Some((&l.service, l.receiver_mismatch.clone()?))
        });
        let subject =
            |svc: &ObjectRef| hairpin_planner::escape::text(&format!("Service {svc}")).into_owned();
        let left = plan
            .not_needed
            .iter()
            .filter(|n| n.reason == hairpin_planner::SkipReason::ReceiverMismatch)
            .filter_map(|n| {
                // One warning per port that disagrees (issue 38), or one for the whole.
                let broken: Vec<&str> = plan
                    .warnings
                    .iter()
                    .filter(|w| w.subject == subject(&n.service) && w.message.starts_with("BROKEN"))
                    .map(|w| w.message.as_str())
                    .collect();
                (!broken.is_empty()).then(|| (&n.service, broken.join("; ")))
            });
        let mismatches: Vec<(&ObjectRef, String)> = kept.chain(left).collect();
        for (svc, message) in mismatches {
            let regarding = regarding_service(svc);
            self.events
                .publish(&regarding, true, reason::RECEIVER_MISMATCH, message)
                .await;
        }
        self.report_delivery(plan, &regarding_service).await;
        for conflict in &plan.conflicts {
            let lbs: Vec<String> = conflict
                .load_balancers
                .iter()
                .map(ToString::to_string)
                .collect();
            let note = list_note(
                &format!(
                    "hostname {} is claimed by several load balancers (",
                    hairpin_planner::escape::Text(&conflict.hostname)
                ),
                &lbs,
                ", ",
                "); hairpin redirects it for none of them",
            );
            for svc in &conflict.load_balancers {
                let regarding = regarding_service(svc);
                self.events
                    .publish(&regarding, true, reason::HOST_CONFLICT, note.clone())
                    .await;
            }
        }
        self.report_refused(plan, snapshot).await;
        self.report_unverified(plan, snapshot).await;
        for warning in &plan.warnings {
            tracing::warn!(subject = %warning.subject, "{}", warning.message);
        }
    }

    /// A Warning Event on each load balancer Service with unverified hostnames, naming each and
    /// the answer seen, published when that list changes.
    async fn report_unverified(&mut self, plan: &Plan, snapshot: &ClusterSnapshot) {
        let mut by_lb: BTreeMap<&ObjectRef, Vec<String>> = BTreeMap::new();
        // A name not resolved yet is a moment's state, not news.
        let settled = plan
            .verification
            .unverified
            .iter()
            .filter(|u| u.reason != hairpin_planner::verify::UnverifiedReason::NotResolved);
        for u in settled {
            by_lb
                .entry(&u.load_balancer)
                .or_default()
                .push(hairpin_planner::escape::text(&u.detail).into_owned());
        }
        let mut reported = BTreeMap::new();
        for (lb, details) in by_lb {
            let note = list_note(
                "hostnames not redirected (not proven to resolve to this load balancer): ",
                &details,
                "; ",
                "",
            );
            if self.unverified.get(lb) != Some(&note) {
                let uid = snapshot
                    .service(&lb.namespace, &lb.name)
                    .and_then(|s| s.metadata.uid.clone());
                let regarding = object_ref("Service", &lb.namespace, &lb.name, uid);
                self.events
                    .publish(&regarding, true, reason::HOSTNAME_UNVERIFIED, note.clone())
                    .await;
            }
            reported.insert(lb.clone(), note);
        }
        self.unverified = reported;
    }

    /// A Warning Event on each object whose hostnames were refused, naming every refused
    /// hostname and why (one Event per object: the Event recorder merges Events with the same
    /// object and reason into one series), published when that list changes; and the metric,
    /// counted once per claim while it lasts (again if it goes away and comes back).
    async fn report_refused(&mut self, plan: &Plan, snapshot: &hairpin_planner::ClusterSnapshot) {
        let regarding = |kind: &str, object: &ObjectRef| {
            let uid = match kind {
                "Service" => snapshot
                    .service(&object.namespace, &object.name)
                    .and_then(|s| s.metadata.uid.clone()),
                "Ingress" => snapshot
                    .ingresses
                    .iter()
                    .find(|i| ObjectRef::from_meta(&i.metadata) == *object)
                    .and_then(|i| i.metadata.uid.clone()),
                _ => None,
            };
            object_ref(kind, &object.namespace, &object.name, uid)
        };
        let mut current = BTreeSet::new();
        let mut by_object: BTreeMap<(&str, &ObjectRef), Vec<String>> = BTreeMap::new();
        for r in &plan.refused {
            let claim = (
                r.kind.clone(),
                r.object.clone(),
                r.hostname.clone(),
                r.reason,
            );
            if !self.refused.contains(&claim) {
                self.metrics.refused(r.reason.label());
            }
            current.insert(claim);
            by_object
                .entry((&r.kind, &r.object))
                .or_default()
                .push(format!(
                    "{} ({}: {})",
                    hairpin_planner::escape::Text(&r.hostname),
                    r.reason,
                    r.detail
                ));
        }
        for ((kind, object), refusals) in &by_object {
            let head = format!(
                "hairpin does not redirect {} of this object's hostnames: ",
                refusals.len()
            );
            let note = list_note(&head, refusals, "; ", "");
            self.events
                .publish(
                    &regarding(kind, object),
                    true,
                    reason::HOSTNAME_REFUSED,
                    note,
                )
                .await;
        }
        let gone: BTreeSet<(&str, &ObjectRef)> = self
            .refused
            .iter()
            .map(|(kind, object, ..)| (kind.as_str(), object))
            .filter(|key| !by_object.contains_key(key))
            .collect();
        for (kind, object) in gone {
            self.events
                .forget(&regarding(kind, object), reason::HOSTNAME_REFUSED)
                .await;
        }
        self.refused = current;
    }
}

/// The other writer of a write fight, as named in its Event: the field manager of its latest
/// change ([`last_writer`]).
fn other_writer(manager: Option<&str>) -> String {
    match manager {
        Some(manager) => format!("another writer (field manager {manager:?})"),
        None => "another writer (unnamed: the object was deleted, or its managedFields name no other manager)".to_owned(),
    }
}

/// The ConfigMap a DNS write goes to, as an Event's `regarding`.
fn config_map_ref(write: &hairpin_planner::DnsWrite) -> ObjectReference {
    object_ref(
        "ConfigMap",
        &write.config_map.namespace,
        &write.config_map.name,
        None,
    )
}
