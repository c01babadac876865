//! The uninstall fence on the Lease: how it is marked, and what an instance does on seeing it.

use k8s_openapi::api::coordination::v1::Lease;
use tokio::sync::watch;

use super::{Leadership, LeaseManager, holder_of};
use crate::error::{is_conflict, is_not_found};
use crate::report::{object_ref, reason};

/// The holder identity `hairpin uninstall` writes into the Lease it fences. No controller may
/// use it as its own identity.
pub const FENCE_HOLDER: &str = "hairpin-uninstall";
/// Marks a fenced Lease: [`FENCE_BY_UNINSTALL`] or [`FENCE_BY_REMOVAL`].
pub const FENCE_ANNOTATION: &str = "hairpin.io/fence";
/// [`FENCE_ANNOTATION`] of `hairpin uninstall`'s fence: for good.
pub const FENCE_BY_UNINSTALL: &str = "uninstall";
/// [`FENCE_ANNOTATION`] of the removal guard's fence: lifted again when the controller
/// Deployment turns out to live on ([`lift_removal_fence`]).
pub const FENCE_BY_REMOVAL: &str = "removal";
/// On a fenced Lease: the holder it displaced (empty when there was none).
pub const FENCE_PREVIOUS_HOLDER_ANNOTATION: &str = "hairpin.io/fence-previous-holder";
/// On a fenced Lease: the displaced holder, once it has stopped writing.
pub const FENCE_ACKNOWLEDGED_ANNOTATION: &str = "hairpin.io/fence-acknowledged-by";

/// The fence on `lease`, if it carries one.
pub fn fence_of(lease: &Lease) -> Option<Fence> {
    let annotations = lease.metadata.annotations.as_ref()?;
    let kind = annotations.get(FENCE_ANNOTATION)?;
    let get = |key: &str| annotations.get(key).filter(|v| !v.is_empty()).cloned();
    Some(Fence {
        previous_holder: get(FENCE_PREVIOUS_HOLDER_ANNOTATION),
        acknowledged_by: get(FENCE_ACKNOWLEDGED_ANNOTATION),
        by_removal: kind == FENCE_BY_REMOVAL,
    })
}

/// Lifts the removal guard's fence ([`FENCE_BY_REMOVAL`]) from the Lease `name`: the marks
/// removed and the Lease vacated (no holder), guarded by the resourceVersion read, so the
/// instances resume and one claims it at once. True when lifted; false when there is no
/// such fence (none, or `hairpin uninstall`'s, which stays).
///
/// # Errors
/// The API error of the read or the update.
pub async fn lift_removal_fence(api: &kube::Api<Lease>, name: &str) -> Result<bool, kube::Error> {
    let Some(mut lease) = api.get_opt(name).await? else {
        return Ok(false);
    };
    if !fence_of(&lease).is_some_and(|f| f.by_removal) {
        return Ok(false);
    }
    if let Some(annotations) = lease.metadata.annotations.as_mut() {
        for key in [
            FENCE_ANNOTATION,
            FENCE_PREVIOUS_HOLDER_ANNOTATION,
            FENCE_ACKNOWLEDGED_ANNOTATION,
        ] {
            annotations.remove(key);
        }
    }
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = None;
    }
    api.replace(name, &crate::apply::post_params(), &lease)
        .await?;
    Ok(true)
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
    /// Written by the removal guard ([`FENCE_BY_REMOVAL`]): lifted again when the controller
    /// Deployment lives on.
    pub by_removal: bool,
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
            by_removal: false,
        });
        // Liftable only while every fence seen was the removal guard's.
        self.liftable = fence.by_removal && (self.liftable || !self.fenced);
        if !self.fenced {
            self.fenced = true;
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

impl LeaseManager {
    /// The removal guard lifted its fence (the Lease is there without it, or gone): this
    /// instance takes part in the election again. False (nothing changes) for any other fence.
    pub(super) fn lift(&mut self) -> bool {
        if !(self.fenced && self.liftable) {
            return false;
        }
        self.fenced = false;
        self.acknowledged = false;
        self.liftable = false;
        tracing::warn!(
            lease = %format!("{}/{}", self.params.namespace, self.params.name),
            "the removal guard lifted its fence (the controller Deployment lives on): this instance takes part in the election again, and its next reconcile writes again"
        );
        true
    }
}
