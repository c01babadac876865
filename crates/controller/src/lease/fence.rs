//! The uninstall fence on the Lease: how it is marked, and what an instance does on seeing it.

use k8s_openapi::api::coordination::v1::Lease;
use tokio::sync::watch;

use super::{Leadership, LeaseManager, holder_of};
use crate::error::{is_conflict, is_not_found};
use crate::report::{object_ref, reason};

/// The holder identity `hairpin uninstall` writes into the Lease it fences. No controller may
/// use it as its own identity.
pub const FENCE_HOLDER: &str = "hairpin-uninstall";
/// Marks a fenced Lease (value: `uninstall`).
pub const FENCE_ANNOTATION: &str = "hairpin.io/fence";
/// On a fenced Lease: the holder it displaced (empty when there was none).
pub const FENCE_PREVIOUS_HOLDER_ANNOTATION: &str = "hairpin.io/fence-previous-holder";
/// On a fenced Lease: the displaced holder, once it has stopped writing.
pub const FENCE_ACKNOWLEDGED_ANNOTATION: &str = "hairpin.io/fence-acknowledged-by";

/// The fence on `lease`, if it carries one.
pub fn fence_of(lease: &Lease) -> Option<Fence> {
    let annotations = lease.metadata.annotations.as_ref()?;
    annotations.get(FENCE_ANNOTATION)?;
    let get = |key: &str| annotations.get(key).filter(|v| !v.is_empty()).cloned();
    Some(Fence {
        previous_holder: get(FENCE_PREVIOUS_HOLDER_ANNOTATION),
        acknowledged_by: get(FENCE_ACKNOWLEDGED_ANNOTATION),
    })
}

/// Whether `lease` is fenced: it carries the fence, or [`FENCE_HOLDER`] holds it.
pub(super) fn is_fenced(lease: &Lease) -> bool {
    fence_of(lease).is_some() || holder_of(lease) == Some(FENCE_HOLDER)
}

/// What a fenced Lease says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The holder the fence displaced.
    pub previous_holder: Option<String>,
    /// The holder that acknowledged it (stopped writing).
    pub acknowledged_by: Option<String>,
}

// === impl LeaseManager ===

impl LeaseManager {
    /// The fence: stop writing (waiting for writes under way), say so once, and acknowledge
    /// it when this instance is the holder it displaced.
    pub(super) async fn on_fence(&mut self, lease: &Lease, tx: &watch::Sender<Leadership>) {
        self.gate.close().await;
        tx.send_replace(Leadership::Fenced);
        let fence = fence_of(lease).unwrap_or(Fence {
            previous_holder: None,
            acknowledged_by: None,
        });
        if !self.fenced {
            self.fenced = true;
            tracing::warn!(
                lease = %format!("{}/{}", self.params.namespace, self.params.name),
                displaced = ?fence.previous_holder,
                "hairpin uninstall fenced the controller: it writes nothing from now on and stays idle until it exits (delete the controller Deployment to finish the uninstall; a new install starts new pods)"
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
        let ours = fence.previous_holder.as_deref() == Some(self.params.identity.as_str());
        if !ours || fence.acknowledged_by.as_deref() == Some(self.params.identity.as_str()) {
            self.acknowledged = true;
            return;
        }
        let mut acked = lease.clone();
        acked
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                FENCE_ACKNOWLEDGED_ANNOTATION.into(),
                self.params.identity.clone(),
            );
        match self
            .api
            .replace(&self.params.name, &crate::apply::post_params(), &acked)
            .await
        {
            Ok(_) => {
                tracing::info!(
                    "acknowledged the uninstall fence: this instance writes nothing any more"
                );
                self.acknowledged = true;
            }
            // Changed meanwhile (or gone): read again at the next step.
            Err(err) if is_conflict(&err) || is_not_found(&err) => {}
            Err(err) => {
                tracing::debug!(error = %err, "cannot acknowledge the uninstall fence yet; retrying");
            }
        }
    }
}
