//! The election: one claim-or-renew attempt on the Lease, its creation, and vacating it.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

use super::{LeaseManager, Step, fence_of, is_fenced, resource_version};
use crate::apply::{CREATED_BY_ANNOTATION, created_by_hairpin, created_by_hairpin_meta};
use crate::error::{is_conflict, is_not_found};
use crate::report::{object_ref, reason};
use hairpin_planner::MANAGED_BY_LABEL;

use crate::Error;

// === impl LeaseManager ===

impl LeaseManager {
    /// Logs (once per change of the Lease) and reports a Lease that is not hairpin's.
    pub(super) async fn report_foreign(&mut self, err: &Error) {
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

    /// Without an election: whether the Lease carries the fence (nothing is written).
    pub(super) async fn observe(&mut self) -> Result<Step, crate::Error> {
        let name = self.params.name.clone();
        match self.api.get_opt(&name).await {
            Ok(Some(lease)) if fence_of(&lease).is_some() => Ok(Step::Fenced(Box::new(lease))),
            // Only a Lease there without the fence lifts the removal guard's fence: a Lease
            // gone went with the Deployment.
            Ok(Some(_)) if self.fenced && !self.lift() => Ok(Step::NotHeld(None)),
            Ok(None) if self.fenced => Ok(Step::NotHeld(None)),
            Ok(_) => Ok(Step::Held),
            Err(err) => Err(crate::Error::kube(format!("get Lease {name}"), err)),
        }
    }

    /// One claim-or-renew attempt. `leading`: this instance led until now.
    pub(super) async fn step(&mut self, leading: bool) -> Result<Step, crate::Error> {
        let name = self.params.name.clone();
        let lease = match self.api.get(&name).await {
            Ok(lease) => lease,
            Err(err) if is_not_found(&err) => return self.absent(leading).await,
            Err(err) => return Err(crate::Error::kube(format!("get Lease {name}"), err)),
        };
        self.lost_at = None;
        self.seen = true;
        if !created_by_hairpin(&lease.metadata) {
            return Err(self.not_owned());
        }
        self.foreign_reported = None;
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        if is_fenced(&lease) {
            return Ok(Step::Fenced(Box::new(lease)));
        }
        if self.fenced && !self.lift() {
            // Sticky: an instance that saw the fence never leads again (but the removal
            // guard's, lifted).
            return Ok(Step::NotHeld(holder));
        }

        if holder.as_deref() == Some(self.params.identity.as_str()) {
            let mut renewed = lease;
            let renewed_spec = renewed.spec.get_or_insert_with(LeaseSpec::default);
            renewed_spec.renew_time = Some(Self::now());
            renewed_spec.lease_duration_seconds = Some(self.duration_seconds());
            return self.replace(&renewed).await;
        }
        if leading {
            // Taken by another holder: stop writing before anything else.
            self.gate.close_now();
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

    /// The Lease does not exist. After a deletion this instance saw (as leader: it stops
    /// writing at once), it waits one lease duration; then it creates the Lease again, held
    /// by itself (a conflict: another instance was first).
    async fn absent(&mut self, leading: bool) -> Result<Step, crate::Error> {
        let name = self.params.name.clone();
        if self.fenced {
            // The fence is gone (the Deployment was deleted): still nothing to do.
            return Ok(Step::NotHeld(None));
        }
        if leading && self.lost_at.is_none() {
            self.gate.close_now();
            tracing::warn!(lease = %name, hold_off = ?self.params.duration, "leader election: the Lease was deleted under this leader; stopped writing, and claiming it again through the election after one lease duration");
            self.lost_at = Some(Instant::now());
        } else if self.seen && self.lost_at.is_none() {
            // A Lease this instance saw was deleted (by someone: an older uninstall,
            // by hand, or with the Deployment that owned the fence, while this pod
            // still terminates): the same hold-off before re-creating it.
            tracing::info!(lease = %name, hold_off = ?self.params.duration, "leader election: the Lease was deleted; claiming it again after one lease duration");
            self.lost_at = Some(Instant::now());
        }
        if self
            .lost_at
            .is_some_and(|at| at.elapsed() < self.params.duration)
        {
            return Ok(Step::NotHeld(None));
        }
        self.lost_at = None;
        self.seen = false;
        let lease = Lease {
            metadata: created_by_hairpin_meta(&self.params.namespace, &name),
            spec: Some(self.fresh_spec(0)),
        };
        match self.api.create(&crate::apply::post_params(), &lease).await {
            Ok(created) => {
                self.remember_write(&created);
                Ok(Step::Held)
            }
            Err(err) if is_conflict(&err) => Ok(Step::NotHeld(None)),
            Err(err) => Err(crate::Error::kube(format!("create Lease {name}"), err)),
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

    fn remember_write(&self, lease: &Lease) {
        self.written_rv
            .store(resource_version(lease).unwrap_or(0), Ordering::SeqCst);
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
            Ok(written) => {
                self.remember_write(&written);
                Ok(Step::Held)
            }
            Err(err) if is_conflict(&err) => {
                self.gate.close_now();
                Ok(Step::NotHeld(None))
            }
            Err(err) => Err(crate::Error::kube(format!("update Lease {name}"), err)),
        }
    }

    /// Clears the holder so a standby can claim the Lease at once. `Ok(false)`: it was no
    /// longer ours (deleted, taken, fenced).
    pub(super) async fn vacate(&self) -> Result<bool, crate::Error> {
        let name = &self.params.name;
        let Some(mut lease) = self
            .api
            .get_opt(name)
            .await
            .map_err(|err| crate::Error::kube(format!("get Lease {name}"), err))?
        else {
            return Ok(false);
        };
        if !created_by_hairpin(&lease.metadata) {
            return Err(self.not_owned());
        }
        if fence_of(&lease).is_some() {
            return Ok(false);
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.params.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(Self::now());
        match self
            .api
            .replace(name, &crate::apply::post_params(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            // Deleted or changed since the read: not ours to vacate any more.
            Err(err) if is_not_found(&err) || is_conflict(&err) => Ok(false),
            Err(err) => Err(crate::Error::kube(format!("vacate Lease {name}"), err)),
        }
    }
}
