//! The uninstall fence on the Lease: how it is marked, read and lifted.

use k8s_openapi::api::coordination::v1::Lease;

use super::holder_of;

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
