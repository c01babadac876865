//! The control loop: caches -> debounced pure plan -> apply, only while leading.
//!
//! This module is the loop alone (run, elect, schedule, debounce). A reconcile
//! ([`reconciler`]) is memory in, actions out: `decide` chooses, without a client, every write,
//! Event and metric of a plan from what the loop remembers; `act` executes them and hands back
//! what each write found (`observed`); `remember` folds that into the one [`memory::Memory`];
//! and `decide::after` chooses what follows from it. Every executor borrows the one
//! [`Context`] that [`ControllerConfig::build`] makes.

mod act;
mod decide;
mod memory;
mod observed;
mod reconciler;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::Shared;
use hairpin_planner::PlannerConfig;
use hairpin_runtime::ReadyCondition;
use hairpin_runtime::Shutdown;
use tokio::sync::watch;

use crate::Error;
use crate::context::Context;
use crate::fight::FightParams;
use crate::gate::WriteGate;
use crate::lease::{Leadership, LeaseManager, LeaseParams};
use crate::metrics::Metrics;
use crate::native::NativeParams;
use crate::ownership::OwnershipParams;
use crate::propagation::PropagationParams;
use crate::report::Events;
use crate::watch::Caches;
use reconciler::Reconciler;

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

    /// The one [`Context`] every writer of the loop borrows, written through a gate that the
    /// leader election opens (open at once without one); `client` is the plain client.
    pub fn build(&self, client: kube::Client, metrics: Metrics) -> Arc<Context> {
        // Every write of the reconciler (objects, statuses, Events) goes through the gate,
        // which only the leader election opens; the Lease itself, and the Events about it,
        // are written with the plain client.
        let gate = if self.lease.is_some() {
            WriteGate::closed()
        } else {
            WriteGate::always_open()
        };
        Context::new(client, gate, &self.identity, self.planner.clone(), metrics)
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
    let ctx = config.build(client.clone(), metrics.clone());
    let changed = ctx.changed.clone();
    let caches = Caches::start(&ctx, stop.clone());

    let (leader_tx, mut leader_rx) = watch::channel(Leadership::Follower(None));
    let lease_task = match config.lease.clone() {
        Some(params) => Some(elect(
            client, params, &config, &ctx.gate, &metrics, &stop, leader_tx,
        )),
        // Leading at once; the sender stays until the end, so `leader_rx` never ends.
        None => {
            leader_tx.send_replace(Leadership::Leader);
            None
        }
    };

    if !synced(&caches, &stop).await {
        return finish(lease_task).await;
    }
    ready.set(true);

    let mut state = Reconciler::new(&ctx, &config, &stop);
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
/// logged by the lease manager, and published as an Event on the Lease), until it leads again
/// (the removal guard lifted its fence).
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
    } else if *fenced && *leadership != Leadership::Fenced {
        // The removal guard lifted its fence: the Deployment lives on.
        *fenced = false;
        metrics.fenced.set(0);
        ready.set(true);
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
