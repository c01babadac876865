//! What the election finds, said to people: the log lines of its changes, and the Warning
//! Events on the Lease for a Lease that is not hairpin's and for the fence.

use k8s_openapi::api::coordination::v1::Lease;

use super::LeaseParams;
use super::election::Note;
use super::fence::Fence;
use crate::Error;
use crate::report::{Events, object_ref, reason};

/// Logs and publishes what the election finds about the Lease.
#[derive(Debug)]
pub(super) struct LeaseReports {
    params: LeaseParams,
    /// Where a Lease that is not hairpin's, and the fence, are reported.
    events: Option<Events>,
    /// The refusal last reported for a Lease that is not hairpin's.
    foreign_reported: Option<String>,
}

// === impl LeaseReports ===

impl LeaseReports {
    pub(super) fn new(params: LeaseParams) -> Self {
        Self {
            params,
            events: None,
            foreign_reported: None,
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

    /// The Lease at our name is hairpin's (again): a later refusal is reported anew.
    pub(super) fn owned(&mut self) {
        self.foreign_reported = None;
    }

    /// Logs (once per change of the Lease) and reports a Lease that is not hairpin's.
    pub(super) async fn not_owned(&mut self, err: &Error) {
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

    /// The first fence this instance sees, on `lease`: it writes nothing from now on.
    pub(super) async fn fenced(&self, lease: &Lease, fence: &Fence) {
        tracing::warn!(
            lease = %format!("{}/{}", self.params.namespace, self.params.name),
            displaced = ?fence.previous_holder,
            by_removal = fence.by_removal,
            "hairpin uninstall (or the removal guard) fenced the controller: it writes nothing from now on and stays idle until it exits (delete the controller Deployment to finish the uninstall; a new install starts new pods); the removal guard's fence is lifted again if the Deployment lives on"
        );
        if let Some(events) = &self.events {
            let regarding = object_ref(
                "Lease",
                &self.params.namespace,
                &self.params.name,
                lease.metadata.uid.clone(),
            );
            let note = format!(
                "hairpin uninstall is removing hairpin: controller {} stopped writing and stays idle until it exits",
                hairpin_planner::escape::text(&self.params.identity)
            );
            events.publish(&regarding, true, reason::FENCED, note).await;
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
