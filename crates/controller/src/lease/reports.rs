//! What the election finds, said to people: the log lines of its changes, and the Warning
//! Events on the Lease the election chose (a Lease that is not hairpin's, the fence).

use super::LeaseParams;
use super::election::{LeaseEvent, Note};
use super::fence::Fence;
use crate::Error;
use crate::report::Events;

/// Logs and publishes what the election finds about the Lease.
#[derive(Debug)]
pub(super) struct LeaseReports {
    params: LeaseParams,
    /// Where a Lease that is not hairpin's, and the fence, are reported.
    events: Option<Events>,
}

// === impl LeaseReports ===

impl LeaseReports {
    pub(super) fn new(params: LeaseParams) -> Self {
        Self {
            params,
            events: None,
        }
    }

    pub(super) fn set_events(&mut self, events: Events) {
        self.events = Some(events);
    }

    /// A note of the decision, logged.
    pub(super) fn note(&self, note: Note) {
        let (lease, hold_off) = (&self.params.name, self.params.duration);
        match note {
            Note::LostUnderLeader => {
                tracing::warn!(lease = %lease, hold_off = ?hold_off, "leader election: the Lease was deleted under this leader; stopped writing, and claiming it again through the election after one lease duration");
            }
            Note::Lost => {
                tracing::info!(lease = %lease, hold_off = ?hold_off, "leader election: the Lease was deleted; claiming it again after one lease duration");
            }
            Note::Lifted => tracing::warn!(
                lease = %format!("{}/{}", self.params.namespace, self.params.name),
                "the removal guard lifted its fence (the controller Deployment lives on): this instance takes part in the election again, and its next reconcile writes again"
            ),
        }
    }

    /// Logs a Lease that is not hairpin's, and publishes the election's `event` about it.
    pub(super) async fn not_owned(&self, err: &Error, event: LeaseEvent) {
        tracing::error!(error = %err, lease = %self.params.name, "leader election: the Lease is not hairpin's; not leading");
        self.publish(event).await;
    }

    /// The first fence this instance sees (the election's `event` about it): it writes
    /// nothing from now on.
    pub(super) async fn fenced(&self, fence: &Fence, event: Option<LeaseEvent>) {
        tracing::warn!(
            lease = %format!("{}/{}", self.params.namespace, self.params.name),
            displaced = ?fence.previous_holder,
            by_removal = fence.by_removal,
            "hairpin uninstall (or the removal guard) fenced the controller: it writes nothing from now on and stays idle until it exits (delete the controller Deployment to finish the uninstall; a new install starts new pods); the removal guard's fence is lifted again if the Deployment lives on"
        );
        if let Some(event) = event {
            self.publish(event).await;
        }
    }

    /// Publishes an Event the election chose (a Warning), when Events are reported.
    async fn publish(&self, event: LeaseEvent) {
        if let Some(events) = &self.events {
            let LeaseEvent {
                regarding,
                reason,
                note,
            } = event;
            events.publish(&regarding, true, reason, note).await;
        }
    }

    /// A failed claim or renewal, logged once per streak of failures (an API outage fails
    /// every attempt).
    pub(super) fn failure(&self, err: &Error, failing: bool) {
        let (lease, retry_in) = (&self.params.name, self.params.retry_interval);
        if failing {
            tracing::debug!(error = %err, lease = %lease, "leader election: lease update failed again");
        } else if err.metric_label() == "api_transport" {
            // The API server cannot be reached: the watches already say so in one
            // warning with the server's URL; one condition, one warning.
            tracing::info!(error = %err, lease = %lease, retry_in = ?retry_in, "leader election: lease update failed (API server unreachable); retrying (logged again when it works)");
        } else {
            tracing::warn!(error = %err, lease = %lease, retry_in = ?retry_in, "leader election: lease update failed; retrying (logged again when it works)");
        }
    }
}
