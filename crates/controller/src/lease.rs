//! Leader election on a `coordination.k8s.io/v1` Lease (after kubert's `lease.rs`; kube-runtime
//! has none built in), and the uninstall fence on that Lease.
//!
//! Every instance runs [`LeaseManager::run`]. A Lease that is absent, vacated (no holder) or
//! not renewed within its duration is claimed; the holder renews it every `renew_interval`.
//! Every change is an update guarded by the Lease's resourceVersion, so two candidates racing
//! for it cannot both win: the loser gets 409 Conflict and re-reads. Expiry is judged on the
//! local clock from the moment this instance last saw the Lease change (like client-go), so
//! clock skew between nodes does not matter. On shutdown the holder vacates the Lease (clears
//! `holderIdentity`), so a standby takes over at its next poll instead of waiting for expiry.
//!
//! Leading is what opens the [`WriteGate`]: the gate is opened after each successful renewal
//! up to 4/5 of the Lease's duration counted from when that renewal was *sent* (others count
//! the duration from when they saw it, later), so no write goes out after the point where
//! another candidate could have taken the Lease, even while the API server does not answer.
//! The Lease is also watched: the moment it is deleted, taken by another holder or fenced, the
//! gate closes (before the next renewal). A Lease deleted under its leader (or that an
//! instance saw before) is not re-created by that instance for one Lease duration (a deletion
//! is someone else's decision, such as an older `hairpin uninstall`, or the fence going with
//! the Deployment while old pods still terminate); after that it is claimed through the
//! normal election.
//!
//! **The uninstall fence.** `hairpin uninstall` takes the Lease for the reserved holder
//! [`FENCE_HOLDER`] and marks it with [`FENCE_ANNOTATION`], naming the holder it displaced
//! ([`FENCE_PREVIOUS_HOLDER_ANNOTATION`]). No instance ever claims a fenced Lease, whatever its
//! expiry. An instance that sees the fence closes its gate, waits for its writes under way,
//! and stays idle until it exits (even if the fence goes away: an old pod never writes again);
//! the displaced holder then acknowledges ([`FENCE_ACKNOWLEDGED_ANNOTATION`]), which is what
//! `hairpin uninstall` waits for (at most one Lease duration: by then the displaced holder's
//! gate has closed by itself). A fresh install starts new processes, which claim the Lease once
//! the fence is gone: it is owned by the controller Deployment, so deleting the Deployment
//! (`helm uninstall`, `kubectl delete -f deploy/hairpin.yaml`) has the garbage collector
//! delete it.
//!
//! The Lease hairpin creates carries its marks (the managed-by label AND
//! `hairpin.io/created-by: hairpin`, as its own ConfigMaps do). A Lease at that name without
//! them belongs to someone else (another program's leader election, a name clash): it is
//! never claimed, renewed or vacated, whatever its holder or expiry, because taking it over
//! would silently stop its owner from leading. This instance stays a follower, logs an error
//! and publishes a Warning Event on the Lease until the name is freed or changed
//! (`--lease-name`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tokio::sync::{Notify, watch};

use crate::Error;
use crate::apply::CREATED_BY_ANNOTATION;
use crate::error::{is_conflict, is_not_found};
use crate::gate::WriteGate;
use crate::report::Events;
use hairpin_planner::MANAGED_BY_LABEL;

mod election;
mod fence;
mod reports;
mod store;
mod watch_lease;

use election::{Act, Election, Now, Vacate};
pub use fence::{
    FENCE_ACKNOWLEDGED_ANNOTATION, FENCE_ANNOTATION, FENCE_BY_REMOVAL, FENCE_BY_UNINSTALL,
    FENCE_HOLDER, FENCE_PREVIOUS_HOLDER_ANNOTATION, Fence, fence_of, lift_removal_fence,
};
use reports::LeaseReports;
use store::LeaseStore;

/// Who holds `lease` (an empty holder is none).
fn holder_of(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()?
        .holder_identity
        .as_deref()
        .filter(|h| !h.is_empty())
}

/// The resourceVersion of `lease` as a number (`None`: absent, or not a number).
fn resource_version(lease: &Lease) -> Option<u64> {
    lease.metadata.resource_version.as_deref()?.parse().ok()
}

/// The error for a Lease at our name that is not hairpin's.
fn not_owned(params: &LeaseParams) -> Error {
    Error::NotOwned {
        kind: "Lease",
        object: format!("{}/{}", params.namespace, params.name),
        label: MANAGED_BY_LABEL,
        annotation: format!("{CREATED_BY_ANNOTATION}=hairpin"),
    }
}

/// Lease settings.
#[derive(Clone, Debug)]
pub struct LeaseParams {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This instance's identity (the pod name).
    pub identity: String,
    /// How long a holder keeps the Lease without renewing.
    pub duration: Duration,
    /// How often the holder renews.
    pub renew_interval: Duration,
    /// How often a standby checks whether it can claim the Lease.
    pub retry_interval: Duration,
    /// No election (`--leader-election=false`, a single instance): the Lease is only read,
    /// never claimed, and this instance writes unless the Lease carries the uninstall fence.
    pub observe_only: bool,
}

impl LeaseParams {
    /// Defaults like client-go's: 15 s duration, renew every 5 s, standby polls every 2 s.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            duration: Duration::from_secs(15),
            renew_interval: Duration::from_secs(5),
            retry_interval: Duration::from_secs(2),
            observe_only: false,
        }
    }

    /// How long after sending a renewal this instance may still write: 4/5 of the duration,
    /// the rest being the margin for writes under way and for the other candidates' clocks.
    pub fn write_window(&self) -> Duration {
        self.duration.mul_f32(0.8)
    }
}

/// What this instance knows about the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// This instance holds the Lease.
    Leader,
    /// Another instance holds it (its identity), or nobody yet.
    Follower(Option<String>),
    /// `hairpin uninstall` fenced the Lease: this instance writes nothing until it exits.
    Fenced,
}

impl Leadership {
    /// True when this instance leads.
    pub fn is_leader(&self) -> bool {
        matches!(self, Leadership::Leader)
    }
}

/// Runs the election: each attempt reads the Lease, asks the [`Election`] what to do, writes
/// what it decided through the [`LeaseStore`], opens or closes the [`WriteGate`] and publishes
/// the leadership; [`LeaseReports`] says what it found.
#[derive(Debug)]
pub struct LeaseManager {
    params: LeaseParams,
    store: LeaseStore,
    election: Election,
    reports: LeaseReports,
    /// Opened while this instance leads.
    gate: WriteGate,
}

/// Outcome of one claim attempt.
enum Step {
    Held,
    NotHeld(Option<String>),
    Fenced(Box<Lease>),
}

// === impl LeaseManager ===

impl LeaseManager {
    /// A manager for the Lease described by `params`. `client` is used as is: give it the
    /// plain client, not one behind the gate it opens.
    pub fn new(client: kube::Client, params: LeaseParams) -> Self {
        Self {
            store: LeaseStore::new(Api::namespaced(client, &params.namespace), &params.name),
            election: Election::new(params.clone()),
            reports: LeaseReports::new(params.clone()),
            params,
            gate: WriteGate::closed(),
        }
    }

    /// Reports a Lease at our name that is not hairpin's, and the fence, as Warning Events on it.
    #[must_use]
    pub fn with_events(mut self, events: Events) -> Self {
        self.reports.set_events(events);
        self
    }

    /// The gate this manager opens while leading (and closes when it stops).
    #[must_use]
    pub fn with_gate(mut self, gate: WriteGate) -> Self {
        self.gate = gate;
        self
    }

    /// Runs until `stop` resolves, publishing leadership changes on `tx`, then vacates the
    /// Lease if held. API errors are logged and retried; they never end the loop, but a leader
    /// that cannot renew before its Lease would expire steps down.
    pub async fn run(
        mut self,
        tx: watch::Sender<Leadership>,
        stop: impl std::future::Future<Output = ()>,
        on_error: impl Fn(&crate::Error),
    ) {
        tokio::pin!(stop);
        let poke = Arc::new(Notify::new());
        let watch_task = tokio::spawn(watch_lease::watch_lease(
            self.store.api().clone(),
            self.params.clone(),
            self.gate.clone(),
            self.store.written_rv(),
            poke.clone(),
        ));
        let mut failing = false;
        let mut open_until: Option<Instant> = None;
        loop {
            if self.election.idle() {
                // Idle for good: nothing to claim, renew or vacate.
                stop.as_mut().await;
                break;
            }
            let leading = tx.borrow().is_leader();
            let sent_at = Instant::now();
            let result = self.attempt(leading).await;
            let failed = result.is_err();
            if failing && !failed {
                tracing::info!(lease = %self.params.name, "leader election: the Lease can be read and written again");
            }
            let leadership = match result {
                Ok(Step::Held) if self.params.observe_only => {
                    self.gate.open();
                    Leadership::Leader
                }
                Ok(Step::Held) => {
                    let until = sent_at + self.params.write_window();
                    self.gate.open_until(until);
                    open_until = Some(until);
                    Leadership::Leader
                }
                Ok(Step::NotHeld(holder)) => Leadership::Follower(holder),
                Ok(Step::Fenced(lease)) => {
                    self.on_fence(&lease, &tx).await;
                    Leadership::Fenced
                }
                Err(err @ Error::NotOwned { .. }) => {
                    // Not ours to take or to keep: stop leading at once.
                    on_error(&err);
                    Leadership::Follower(None)
                }
                Err(err) => {
                    self.reports.failure(&err, failing);
                    on_error(&err);
                    self.leadership_despite_failure(leading)
                }
            };
            if !leadership.is_leader() {
                self.gate.close().await;
            }
            self.publish(&tx, &leadership);
            failing = failed;
            let wait = self.wait_after(&leadership, failed, open_until);
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = poke.notified() => {}
                () = &mut stop => break,
            }
        }
        watch_task.abort();
        self.stop_leading(&tx).await;
    }

    /// One attempt: read the Lease, decide, and write what was decided. Without an election
    /// the Lease is only read, for the fence.
    async fn attempt(&mut self, leading: bool) -> Result<Step, Error> {
        let read = self.store.get().await?;
        let decision = if self.params.observe_only {
            self.election.observe(read)
        } else {
            self.election.step(read, leading, &Now::read())
        };
        if decision.close_gate {
            self.gate.close_now();
        }
        if let Some(note) = decision.note {
            self.reports.note(note);
        }
        match decision.act {
            Act::Renew(lease) => self.claim(&lease).await,
            Act::Claim { lease, previous } => {
                let step = self.claim(&lease).await?;
                if matches!(step, Step::Held) {
                    tracing::info!(previous = ?previous, "leader election: took over the lease");
                }
                Ok(step)
            }
            Act::Create(lease) => Ok(if self.store.create(&lease).await? {
                Step::Held
            } else {
                Step::NotHeld(None)
            }),
            Act::Hold => Ok(Step::Held),
            Act::Follow(holder) => Ok(Step::NotHeld(holder)),
            Act::Fenced(lease) => Ok(Step::Fenced(lease)),
            Act::NotOwned => {
                let err = not_owned(&self.params);
                if let Some(event) = decision.event {
                    self.reports.not_owned(&err, event).await;
                }
                Err(err)
            }
        }
    }

    /// Writes a renewal or a claim: a concurrent change (409) means another instance got
    /// there first, and this one stops writing until the next attempt.
    async fn claim(&self, lease: &Lease) -> Result<Step, Error> {
        if self.store.claim(lease).await? {
            Ok(Step::Held)
        } else {
            self.gate.close_now();
            Ok(Step::NotHeld(None))
        }
    }

    /// The fence: stop writing (waiting for writes under way), say so once, and acknowledge
    /// it when this instance is the holder it displaced.
    async fn on_fence(&mut self, lease: &Lease, tx: &watch::Sender<Leadership>) {
        self.gate.close().await;
        tx.send_replace(Leadership::Fenced);
        let step = self.election.saw_fence(lease);
        if step.first {
            self.reports.fenced(&step.fence, step.event).await;
        }
        let Some(acked) = step.acknowledge else {
            return;
        };
        match self.store.acknowledge(&acked).await {
            Ok(()) => {
                tracing::info!(
                    "acknowledged the uninstall fence: this instance writes nothing any more"
                );
                self.election.acknowledged();
            }
            // Changed meanwhile (or gone): read again at the next step.
            Err(err) if is_conflict(&err) || is_not_found(&err) => {}
            Err(err) => {
                tracing::debug!(error = %err, "cannot acknowledge the uninstall fence yet; retrying");
            }
        }
    }

    /// After a failed claim or renewal: keep leading only while the gate is open. It closes by
    /// itself where the Lease we last renewed could expire, so two leaders never overlap.
    fn leadership_despite_failure(&self, leading: bool) -> Leadership {
        if self.election.fenced() {
            Leadership::Fenced
        } else if leading && self.gate.is_open() {
            Leadership::Leader
        } else {
            Leadership::Follower(None)
        }
    }

    /// Publishes `leadership` when it changed, and logs the change.
    fn publish(&self, tx: &watch::Sender<Leadership>, leadership: &Leadership) {
        tx.send_if_modified(|current| {
            if current == leadership {
                return false;
            }
            match leadership {
                Leadership::Leader => tracing::info!(identity = %self.params.identity, "leader election: acquired the lease"),
                Leadership::Follower(holder) => tracing::info!(holder = ?holder, "leader election: following"),
                Leadership::Fenced => {}
            }
            *current = leadership.clone();
            true
        });
    }

    /// A leader renews every `renew_interval`; after a failed attempt it retries as often as a
    /// standby polls, and it wakes when its gate closes, to say so.
    fn wait_after(
        &self,
        leadership: &Leadership,
        failed: bool,
        open_until: Option<Instant>,
    ) -> Duration {
        let mut wait = if leadership.is_leader() && !failed {
            self.params.renew_interval
        } else {
            self.params.retry_interval
        };
        if leadership.is_leader()
            && let Some(until) = open_until
        {
            wait = wait.min(until.saturating_duration_since(Instant::now()));
        }
        wait
    }

    /// On the way out: no more writes, and the Lease vacated if this instance leads.
    async fn stop_leading(&self, tx: &watch::Sender<Leadership>) {
        self.gate.close().await;
        if !tx.borrow().is_leader() || self.params.observe_only {
            return;
        }
        tx.send_replace(Leadership::Follower(None));
        match self.vacate().await {
            Ok(true) => {
                tracing::info!(lease = %self.params.name, "leader election: vacated the lease")
            }
            Ok(false) => {
                tracing::info!(lease = %self.params.name, "leader election: the lease was no longer ours (deleted or taken); nothing to vacate")
            }
            Err(err) => {
                tracing::warn!(error = %err, "leader election: could not vacate the lease; it expires by itself")
            }
        }
    }

    /// Clears the holder so a standby can claim the Lease at once. `Ok(false)`: it was no
    /// longer ours (deleted, taken, fenced).
    async fn vacate(&self) -> Result<bool, Error> {
        let read = self.store.get().await?;
        match self.election.vacate(read, &Now::read()) {
            Vacate::Write(lease) => self.store.vacate(&lease).await,
            Vacate::NotOurs => Ok(false),
            Vacate::NotOwned => Err(not_owned(&self.params)),
        }
    }
}
