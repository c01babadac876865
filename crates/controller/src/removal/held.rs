//! The objects the guard holds with [`RESTORE_FINALIZER`], putting a hold on and taking it
//! off, and the arming: all or nothing.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{RELEASED_ANNOTATION, RESTORE_FINALIZER, RemovalParams};
use crate::Error;

/// One object the guard holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Held {
    Deployment,
    ServiceAccount,
    ClusterRoleBinding,
    ClusterRole,
    RoleBinding,
    Role,
    CorednsRoleBinding,
    CorednsRole,
    /// The native cure's record (`hairpin-native`): held so that a namespace deletion cannot
    /// take it before the restore has read it.
    NativeRecord,
}

impl Held {
    /// In arming order: the Deployment first (without one, nothing else is asked).
    pub(crate) const ALL: [Held; 9] = [
        Held::Deployment,
        Held::ClusterRoleBinding,
        Held::ClusterRole,
        Held::RoleBinding,
        Held::Role,
        Held::ServiceAccount,
        Held::CorednsRoleBinding,
        Held::CorednsRole,
        Held::NativeRecord,
    ];

    /// A removal of hairpin deletes these: the Deployment (its process) and the
    /// ServiceAccount (its token). Any other one deleted alone is replaced, renamed or dropped
    /// by the chart, and held again when it comes back.
    pub(crate) fn is_vital(self) -> bool {
        matches!(self, Held::Deployment | Held::ServiceAccount)
    }

    fn resource(self) -> ApiResource {
        match self {
            Held::Deployment => ApiResource::erase::<Deployment>(&()),
            Held::ServiceAccount => ApiResource::erase::<ServiceAccount>(&()),
            Held::ClusterRoleBinding => ApiResource::erase::<ClusterRoleBinding>(&()),
            Held::ClusterRole => ApiResource::erase::<ClusterRole>(&()),
            Held::RoleBinding | Held::CorednsRoleBinding => ApiResource::erase::<RoleBinding>(&()),
            Held::Role | Held::CorednsRole => ApiResource::erase::<Role>(&()),
            Held::NativeRecord => ApiResource::erase::<ConfigMap>(&()),
        }
    }

    /// Namespace (empty: cluster-scoped) and name.
    pub(crate) fn at(self, p: &RemovalParams) -> (&str, &str) {
        match self {
            Held::Deployment => (&p.namespace, &p.deployment),
            Held::ServiceAccount | Held::RoleBinding | Held::Role => (&p.namespace, &p.rbac_name),
            Held::ClusterRoleBinding | Held::ClusterRole => ("", &p.rbac_name),
            Held::CorednsRoleBinding | Held::CorednsRole => {
                (&p.coredns_namespace, &p.coredns_rbac_name)
            }
            Held::NativeRecord => (&p.namespace, &p.native_record),
        }
    }

    pub(crate) fn api(self, client: &kube::Client, p: &RemovalParams) -> Api<DynamicObject> {
        let (ns, _) = self.at(p);
        if ns.is_empty() {
            Api::all_with(client.clone(), &self.resource())
        } else {
            Api::namespaced_with(client.clone(), ns, &self.resource())
        }
    }

    /// `Kind namespace/name`, for messages.
    pub(crate) fn describe(self, p: &RemovalParams) -> String {
        let (ns, name) = self.at(p);
        let kind = self.resource().kind;
        if ns.is_empty() {
            format!("{kind} {name}")
        } else {
            format!("{kind} {ns}/{name}")
        }
    }
}

/// Whether `object` carries [`RESTORE_FINALIZER`].
pub(crate) fn is_held(object: &DynamicObject) -> bool {
    object
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == RESTORE_FINALIZER)
}

/// `object` with its finalizers set to `finalizers`, written back guarded by its
/// resourceVersion: a merge patch, or (the native record: the Role grants `update` on it, not
/// `patch`) the whole object replaced.
async fn write_finalizers(
    held: Held,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    finalizers: Vec<String>,
) -> Result<(), kube::Error> {
    let name = object.metadata.name.clone().unwrap_or_default();
    if held == Held::NativeRecord {
        let mut object = object.clone();
        object.metadata.finalizers = Some(finalizers);
        return api
            .replace(&name, &PostParams::default(), &object)
            .await
            .map(drop);
    }
    let patch = json!({"metadata": {
        "resourceVersion": object.metadata.resource_version,
        "finalizers": finalizers,
    }});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
}

/// Adds [`RESTORE_FINALIZER`] to `object` (as read); nothing when it has it.
pub(crate) async fn hold(
    held: Held,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
) -> Result<(), kube::Error> {
    if is_held(object) {
        return Ok(());
    }
    let mut finalizers = object.metadata.finalizers.clone().unwrap_or_default();
    finalizers.push(RESTORE_FINALIZER.to_owned());
    write_finalizers(held, api, object, finalizers).await
}

/// Removes [`RESTORE_FINALIZER`] from the object (read again and retried on a conflict).
pub(crate) async fn unhold(
    held: Held,
    client: &kube::Client,
    p: &RemovalParams,
) -> Result<(), kube::Error> {
    let api = held.api(client, p);
    let (_, name) = held.at(p);
    let mut attempt = 0;
    loop {
        let Some(object) = api.get_opt(name).await? else {
            return Ok(());
        };
        if !is_held(&object) {
            return Ok(());
        }
        let kept: Vec<String> = object
            .metadata
            .finalizers
            .iter()
            .flatten()
            .filter(|f| *f != RESTORE_FINALIZER)
            .cloned()
            .collect();
        match write_finalizers(held, &api, &object, kept).await {
            Ok(()) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < 5 => attempt += 1,
            Err(err) => return Err(err),
        }
    }
}

/// The objects the guard holds, by their uid.
#[derive(Clone, Debug, Default)]
pub struct Armed {
    pub(crate) uids: BTreeMap<Held, String>,
    /// Whether the release pair ([`super::ensure_release_pair`]) was made or found at start.
    pub(crate) release_pair: bool,
    /// Objects left held by an earlier removal ([`RELEASED_ANNOTATION`], being deleted): not a
    /// removal of this install, said at start with the command that lets them go.
    pub(crate) leftovers: Vec<Held>,
    /// Objects other than the vital ones seen being deleted, and since when: let go once a
    /// removal of hairpin has not followed within [`RemovalParams::settle`].
    pub(crate) deleting: BTreeMap<Held, Instant>,
}

impl Armed {
    /// Whether the guard holds anything (false: no controller Deployment, e.g. a local run).
    pub fn is_armed(&self) -> bool {
        self.uids.contains_key(&Held::Deployment)
    }

    /// Whether the release pair was made or found at start (without it, a removal that
    /// deletes the ClusterRole leaves it and its binding held, as said then).
    pub fn has_release_pair(&self) -> bool {
        self.release_pair
    }

    /// The objects left held by an earlier removal (`Kind name`).
    pub fn leftovers(&self, p: &RemovalParams) -> Vec<String> {
        self.leftovers.iter().map(|h| h.describe(p)).collect()
    }
}

/// Why the arming failed: the object refused (`Kind namespace/name`) and the error; every
/// hold it had put on is taken off again ([`arm_objects`]).
#[derive(Debug)]
pub(crate) struct ArmError {
    pub(crate) object: String,
    pub(crate) error: Error,
    /// Holds that could not be taken off (`Kind namespace/name: error`).
    pub(crate) still_held: Vec<String>,
}

/// Reads the objects and holds them, all or nothing: when one hold is refused (an admission
/// policy protecting kube-system, the RBAC of an older chart), every hold is taken off again
/// and the error names the object. Without a controller Deployment (a local run), nothing is
/// held and the guard is off.
pub(crate) async fn arm_objects(
    client: &kube::Client,
    p: &RemovalParams,
) -> Result<Armed, ArmError> {
    let mut armed = Armed::default();
    let mut found = BTreeMap::new();
    for held in Held::ALL {
        if held != Held::Deployment && !armed.is_armed() {
            return Ok(armed);
        }
        let (_, name) = held.at(p);
        let object = held
            .api(client, p)
            .get_opt(name)
            .await
            .map_err(|e| ArmError {
                object: held.describe(p),
                error: Error::kube(format!("get {}", held.describe(p)), e),
                still_held: Vec::new(),
            })?;
        if let Some(object) = object
            && let Some(uid) = object.metadata.uid.clone()
        {
            armed.uids.insert(held, uid);
            found.insert(held, object);
        }
    }
    for (&held, object) in &found {
        if object.metadata.deletion_timestamp.is_some() {
            if object
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(RELEASED_ANNOTATION))
            {
                armed.leftovers.push(held);
            }
            // No finalizer can be added to an object being deleted; the guard sees it next.
            continue;
        }
        if let Err(e) = hold(held, &held.api(client, p), object).await {
            // Objects being deleted keep their hold (leftovers of an earlier removal).
            let standing: Vec<Held> = found
                .iter()
                .filter(|(_, o)| o.metadata.deletion_timestamp.is_none())
                .map(|(h, _)| *h)
                .collect();
            let still_held = unhold_all(client, p, standing).await;
            return Err(ArmError {
                object: held.describe(p),
                error: Error::kube(format!("hold {}", held.describe(p)), e),
                still_held,
            });
        }
    }
    Ok(armed)
}

/// Takes the hold off each of `objects`; the ones that could not be let go, with the error.
pub(crate) async fn unhold_all(
    client: &kube::Client,
    p: &RemovalParams,
    objects: impl IntoIterator<Item = Held>,
) -> Vec<String> {
    let mut failed = Vec::new();
    for held in objects {
        if let Err(err) = unhold(held, client, p).await {
            failed.push(format!("{}: {err}", held.describe(p)));
        }
    }
    failed
}
