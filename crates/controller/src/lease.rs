//! Leader election on a `coordination.k8s.io/v1` Lease (after kubert's `lease.rs`; kube-runtime
//! has none built in).
//!
//! Every instance runs [`LeaseManager::run`]. A Lease that is absent, vacated (no holder) or
//! not renewed within its duration is claimed; the holder renews it every `renew_interval`.
//! Every change is an update guarded by the Lease's resourceVersion, so two candidates racing
//! for it cannot both win: the loser gets 409 Conflict and re-reads. Expiry is judged on the
//! local clock from the moment this instance last saw the Lease change (like client-go), so
//! clock skew between nodes does not matter. On shutdown the holder vacates the Lease (clears
//! `holderIdentity`), so a standby takes over at its next poll instead of waiting for expiry.
//!
//! The Lease hairpin creates carries its marks (the managed-by label AND
//! `hairpin.io/created-by: hairpin`, as its own ConfigMaps do). A Lease at that name without
//! them belongs to someone else (another program's leader election, a name clash): it is
//! never claimed, renewed or vacated, whatever its holder or expiry, because taking it over
//! would silently stop its owner from leading. This instance stays a follower, logs an error
//! and publishes a Warning Event on the Lease until the name is freed or changed
//! (`--lease-name`).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use tokio::sync::watch;

use crate::apply::{CREATED_BY_ANNOTATION, created_by_hairpin, created_by_hairpin_meta};
use crate::error::{is_conflict, is_not_found};
use crate::report::{Events, object_ref, reason};
use crate::{Error, MANAGED_BY_LABEL};

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
        }
    }
}

/// What this instance knows about the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// This instance holds the Lease.
    Leader,
    /// Another instance holds it (its identity), or nobody yet.
    Follower(Option<String>),
}

impl Leadership {
    /// True when this instance leads.
    pub fn is_leader(&self) -> bool {
        matches!(self, Leadership::Leader)
    }
}

/// Claims, renews and vacates the Lease.
#[derive(Debug)]
pub struct LeaseManager {
    api: Api<Lease>,
    params: LeaseParams,
    /// Where a Lease that is not hairpin's is reported.
    events: Option<Events>,
    /// (holder, renewTime) as last seen, and when this instance saw it change.
    observed: Option<(Option<String>, Option<MicroTime>, Instant)>,
    /// When this instance last renewed successfully (as leader).
    renewed_at: Option<Instant>,
    /// The refusal last reported for a Lease that is not hairpin's.
    foreign_reported: Option<String>,
}

/// Outcome of one claim attempt.
enum Step {
    Held,
    NotHeld(Option<String>),
}

impl LeaseManager {
    /// A manager for the Lease described by `params`.
    pub fn new(client: kube::Client, params: LeaseParams) -> Self {
        Self {
            api: Api::namespaced(client, &params.namespace),
            params,
            events: None,
            observed: None,
            renewed_at: None,
            foreign_reported: None,
        }
    }

    /// Reports a Lease at our name that is not hairpin's as a Warning Event on it.
    #[must_use]
    pub fn with_events(mut self, events: Events) -> Self {
        self.events = Some(events);
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
        loop {
            let leadership = match self.step().await {
                Ok(Step::Held) => {
                    self.renewed_at = Some(Instant::now());
                    Leadership::Leader
                }
                Ok(Step::NotHeld(holder)) => {
                    self.renewed_at = None;
                    Leadership::Follower(holder)
                }
                Err(err @ Error::NotOwned { .. }) => {
                    // Not ours to take or to keep: stop leading at once.
                    self.renewed_at = None;
                    self.report_foreign(&err).await;
                    on_error(&err);
                    Leadership::Follower(None)
                }
                Err(err) => {
                    tracing::warn!(error = %err, lease = %self.params.name, "leader election: lease update failed; retrying");
                    on_error(&err);
                    // Keep leading only while the Lease we last renewed cannot have expired yet
                    // (with a margin), so two leaders never overlap.
                    let margin = self.params.duration.mul_f32(0.8);
                    match self.renewed_at {
                        Some(at) if at.elapsed() < margin => Leadership::Leader,
                        _ => Leadership::Follower(None),
                    }
                }
            };
            tx.send_if_modified(|current| {
                if *current == leadership {
                    return false;
                }
                match &leadership {
                    Leadership::Leader => tracing::info!(identity = %self.params.identity, "leader election: acquired the lease"),
                    Leadership::Follower(holder) => tracing::info!(holder = ?holder, "leader election: following"),
                }
                *current = leadership.clone();
                true
            });
            let wait = if leadership.is_leader() {
                self.params.renew_interval
            } else {
                self.params.retry_interval
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = &mut stop => break,
            }
        }
        if tx.borrow().is_leader() {
            tx.send_replace(Leadership::Follower(None));
            match self.vacate().await {
                Ok(()) => {
                    tracing::info!(lease = %self.params.name, "leader election: vacated the lease")
                }
                Err(err) => {
                    tracing::warn!(error = %err, "leader election: could not vacate the lease; it expires by itself")
                }
            }
        }
    }

    /// Logs (once per change of the Lease) and reports a Lease that is not hairpin's.
    async fn report_foreign(&mut self, err: &Error) {
        let message = err.to_string();
        if self.foreign_reported.as_deref() == Some(message.as_str()) {
            return;
        }
        tracing::error!(error = %err, lease = %self.params.name, "leader election: the Lease is not hairpin's; not leading");
        if let Some(events) = &self.events {
            let regarding = object_ref("Lease", &self.params.namespace, &self.params.name, None);
            // A build of hairpin from before the marks left its Lease unmarked: an upgrade
            // meets it once, and only its deletion lets the new build lead.
            let note = format!(
                "{message}. This instance does not lead (nothing is reconciled) until the Lease is removed by its owner or hairpin is given another name (--lease-name). If an earlier build of hairpin left it (those did not mark their Lease), delete it once: `kubectl -n {namespace} delete lease {name}`.",
                namespace = self.params.namespace,
                name = self.params.name,
            );
            events
                .publish(&regarding, true, reason::LEASE_NOT_OWNED, note)
                .await;
        }
        self.foreign_reported = Some(message);
    }

    fn now() -> MicroTime {
        MicroTime(Timestamp::now())
    }

    /// `leaseDurationSeconds` of our Lease (at least 1).
    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.params.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    fn fresh_spec(&self, transitions: i32) -> LeaseSpec {
        let now = Self::now();
        LeaseSpec {
            holder_identity: Some(self.params.identity.clone()),
            lease_duration_seconds: Some(self.duration_seconds()),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// One claim-or-renew attempt.
    async fn step(&mut self) -> Result<Step, crate::Error> {
        let name = self.params.name.clone();
        let lease = match self.api.get(&name).await {
            Ok(lease) => lease,
            Err(err) if is_not_found(&err) => {
                let lease = Lease {
                    metadata: created_by_hairpin_meta(&self.params.namespace, &name),
                    spec: Some(self.fresh_spec(0)),
                };
                return match self.api.create(&crate::apply::post_params(), &lease).await {
                    Ok(_) => Ok(Step::Held),
                    Err(err) if is_conflict(&err) => Ok(Step::NotHeld(None)),
                    Err(err) => Err(crate::Error::kube(format!("create Lease {name}"), err)),
                };
            }
            Err(err) => return Err(crate::Error::kube(format!("get Lease {name}"), err)),
        };
        if !created_by_hairpin(&lease.metadata) {
            return Err(self.not_owned());
        }
        self.foreign_reported = None;
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());

        if holder.as_deref() == Some(self.params.identity.as_str()) {
            let mut renewed = lease;
            let renewed_spec = renewed.spec.get_or_insert_with(LeaseSpec::default);
            renewed_spec.renew_time = Some(Self::now());
            renewed_spec.lease_duration_seconds = Some(self.duration_seconds());
            return self.replace(&renewed).await;
        }

        // Track when the Lease was last seen to change, on our own clock.
        let seen = (holder.clone(), spec.renew_time.clone());
        let changed_at = match &self.observed {
            Some((h, r, at)) if (h, r) == (&seen.0, &seen.1) => *at,
            _ => Instant::now(),
        };
        self.observed = Some((seen.0, seen.1, changed_at));
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.params.duration, Duration::from_secs);
        let expired = holder.is_none() || changed_at.elapsed() >= duration;
        if !expired {
            return Ok(Step::NotHeld(holder));
        }
        let mut claimed = lease;
        // The count as found may be anything (another client's write): a negative one or an
        // overflow would make the API server refuse the claim (or this panic) forever.
        let transitions = spec.lease_transitions.unwrap_or(0).max(0).saturating_add(1);
        claimed.spec = Some(self.fresh_spec(transitions));
        match self.replace(&claimed).await? {
            Step::Held => {
                tracing::info!(previous = ?holder, "leader election: took over the lease");
                Ok(Step::Held)
            }
            other => Ok(other),
        }
    }

    fn not_owned(&self) -> Error {
        Error::NotOwned {
            kind: "Lease",
            object: format!("{}/{}", self.params.namespace, self.params.name),
            label: MANAGED_BY_LABEL,
            annotation: format!("{CREATED_BY_ANNOTATION}=hairpin"),
        }
    }

    /// Updates the Lease with its resourceVersion set: a concurrent change makes it fail with
    /// 409 and we stay (or become) a follower until the next attempt.
    async fn replace(&self, lease: &Lease) -> Result<Step, crate::Error> {
        let name = &self.params.name;
        match self
            .api
            .replace(name, &crate::apply::post_params(), lease)
            .await
        {
            Ok(_) => Ok(Step::Held),
            Err(err) if is_conflict(&err) => Ok(Step::NotHeld(None)),
            Err(err) => Err(crate::Error::kube(format!("update Lease {name}"), err)),
        }
    }

    /// Clears the holder so a standby can claim the Lease at once.
    async fn vacate(&self) -> Result<(), crate::Error> {
        let name = &self.params.name;
        let mut lease = self
            .api
            .get(name)
            .await
            .map_err(|err| crate::Error::kube(format!("get Lease {name}"), err))?;
        if !created_by_hairpin(&lease.metadata) {
            return Err(self.not_owned());
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.params.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(Self::now());
        self.api
            .replace(name, &crate::apply::post_params(), &lease)
            .await
            .map(drop)
            .map_err(|err| crate::Error::kube(format!("vacate Lease {name}"), err))
    }
}
