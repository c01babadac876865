//! Applying a plan: the I/O half of reconcile (stackable's `cluster_resources` pattern).
//!
//! Desired children (hairpin Services, the routes ConfigMap) are created or updated, orphans
//! carrying our label are deleted, and the CoreDNS change is a read-modify-write guarded by
//! resourceVersion, retried on 409 Conflict with a fresh read and skipped when nothing changed.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Resource};

use hairpin_planner::{FIELD_MANAGER, MANAGED_BY_LABEL, MANAGED_BY_VALUE, is_managed};

use crate::Error;
use crate::edits::KeyEdit;
use crate::error::{is_conflict, is_not_found};
use crate::fight::Observation;

/// How many times a write is retried after a 409 Conflict (each time on a fresh read).
pub const CONFLICT_RETRIES: u32 = 5;

/// True when hairpin created the ConfigMap: the managed-by label AND
/// [`CREATED_BY_ANNOTATION`] (see [`is_managed`]).
pub fn config_map_is_ours(cm: &ConfigMap) -> bool {
    created_by_hairpin(&cm.metadata)
}

/// True when `meta` carries the marks hairpin puts on the objects it creates for itself (its
/// routes and hosts ConfigMaps, its leader Lease): the managed-by label AND
/// [`CREATED_BY_ANNOTATION`]`=hairpin`.
pub fn created_by_hairpin(meta: &ObjectMeta) -> bool {
    is_managed(meta, CREATED_BY_ANNOTATION)
        && meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(CREATED_BY_ANNOTATION))
            .map(String::as_str)
            == Some(MANAGED_BY_VALUE)
}

/// The marks of [`created_by_hairpin`], for an object hairpin creates.
pub fn created_by_hairpin_meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        labels: Some(BTreeMap::from([(
            MANAGED_BY_LABEL.into(),
            MANAGED_BY_VALUE.into(),
        )])),
        annotations: Some(BTreeMap::from([(
            CREATED_BY_ANNOTATION.into(),
            MANAGED_BY_VALUE.into(),
        )])),
        ..ObjectMeta::default()
    }
}

/// Outcome of a [`write_key`].
#[derive(Clone, Debug, PartialEq)]
pub enum KeyOutcome {
    /// The key already had the desired value: nothing was written.
    Unchanged {
        /// The value read (None: absent).
        value: Option<String>,
    },
    /// The ConfigMap was written (created, updated or deleted).
    Written {
        /// The value before.
        before: Option<String>,
        /// The value now.
        after: Option<String>,
        /// The ConfigMap's `managedFields` as read before the write (empty when it did not
        /// exist): who changed it last, for a write fight ([`last_writer`]).
        managed_fields: Vec<ManagedFieldsEntry>,
    },
    /// The ConfigMap does not exist and was not to be created.
    ConfigMapMissing,
}

/// Annotation marking an object hairpin created for itself (a ConfigMap, so uninstall may
/// delete it once empty; the leader Lease), with the value [`MANAGED_BY_VALUE`].
pub const CREATED_BY_ANNOTATION: &str = "hairpin.io/created-by";

/// Reads the ConfigMap, applies the edit to the key, and writes it back with the
/// resourceVersion it read; on 409 Conflict reads again and retries. Skips the write when the
/// value is already the desired one.
///
/// # Errors
/// API errors other than 409, an edit the editor refuses, or conflicts on every attempt.
pub async fn write_key(client: &kube::Client, edit: &KeyEdit) -> Result<KeyOutcome, Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &edit.namespace);
    let what = edit.config_map();
    for _ in 0..=CONFLICT_RETRIES {
        let current = match api.get_opt(&edit.name).await {
            Ok(current) => current,
            Err(err) => return Err(Error::kube(format!("get ConfigMap {what}"), err)),
        };
        let managed_fields = current
            .as_ref()
            .and_then(|cm| cm.metadata.managed_fields.clone())
            .unwrap_or_default();
        let before = current
            .as_ref()
            .and_then(|cm| cm.data.as_ref())
            .and_then(|data| data.get(&edit.key))
            .cloned();
        if edit.ours_only
            && let Some(cm) = &current
            && !config_map_is_ours(cm)
        {
            return Err(Error::NotOwned {
                kind: "ConfigMap",
                object: what,
                label: MANAGED_BY_LABEL,
                annotation: format!("{CREATED_BY_ANNOTATION}={MANAGED_BY_VALUE}"),
            });
        }
        let after = edit
            .after(before.as_deref())
            .map_err(|source| Error::DnsEdit {
                config_map: what.clone(),
                key: edit.key.clone(),
                source,
            })?;
        if after == before {
            return Ok(match current {
                Some(_) => KeyOutcome::Unchanged { value: before },
                None => KeyOutcome::ConfigMapMissing,
            });
        }
        let result = match current {
            None => {
                let Some(value) = after.clone() else {
                    return Ok(KeyOutcome::ConfigMapMissing);
                };
                if !edit.create_if_missing {
                    return Ok(KeyOutcome::ConfigMapMissing);
                }
                let cm = ConfigMap {
                    metadata: created_by_hairpin_meta(&edit.namespace, &edit.name),
                    data: Some(BTreeMap::from([(edit.key.clone(), value)])),
                    ..ConfigMap::default()
                };
                api.create(&post_params(), &cm).await.map(drop)
            }
            Some(cm) => write_back(&api, edit, cm, after.as_deref()).await,
        };
        match result {
            Ok(()) => {
                return Ok(KeyOutcome::Written {
                    before,
                    after,
                    managed_fields,
                });
            }
            Err(err) if is_conflict(&err) => {
                tracing::debug!(configmap = %what, "write conflicted with another writer; reading again");
            }
            Err(err) if is_not_found(&err) => {
                tracing::debug!(configmap = %what, "ConfigMap vanished during the write; reading again");
            }
            Err(err) => return Err(Error::kube(format!("write ConfigMap {what}"), err)),
        }
    }
    Err(Error::ConflictRetriesExhausted {
        action: format!("write ConfigMap {what}"),
        attempts: CONFLICT_RETRIES + 1,
    })
}

/// Writes `cm` back with the key set to `after` (removed when None): replaced with the
/// resourceVersion it was read with, or deleted when it is hairpin's own, now empty, and the
/// edit asks for that.
async fn write_back(
    api: &Api<ConfigMap>,
    edit: &KeyEdit,
    mut cm: ConfigMap,
    after: Option<&str>,
) -> kube::Result<()> {
    let data = cm.data.get_or_insert_with(BTreeMap::new);
    match after {
        Some(value) => {
            data.insert(edit.key.clone(), value.to_owned());
        }
        None => {
            data.remove(&edit.key);
        }
    }
    let ours = config_map_is_ours(&cm);
    let empty = cm.data.as_ref().is_none_or(BTreeMap::is_empty)
        && cm.binary_data.as_ref().is_none_or(BTreeMap::is_empty);
    if empty && ours && edit.delete_if_empty_and_ours {
        api.delete(&edit.name, &delete_as_read(&cm)).await.map(drop)
    } else {
        // `replace` sends the resourceVersion we read: a concurrent writer makes this fail
        // with 409 instead of being overwritten.
        api.replace(&edit.name, &post_params(), &cm).await.map(drop)
    }
}

/// Deletes the objects of `existing` (hairpin's, as listed) whose names `wanted` no longer
/// holds, and records their names in `deleted`.
///
/// Only the object as listed is deleted: if someone replaced it since, the precondition
/// fails with 409 and it is left for the next reconcile to judge; one already gone is fine.
///
/// # Errors
/// API errors other than 404 and 409.
pub(crate) async fn delete_unwanted<K>(
    api: &Api<K>,
    existing: &BTreeMap<String, K>,
    wanted: &[&str],
    kind: &str,
    namespace: &str,
    deleted: &mut Vec<String>,
) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for (name, object) in existing {
        if wanted.contains(&name.as_str()) {
            continue;
        }
        match api.delete(name, &delete_as_read(object)).await {
            Ok(_) => deleted.push(name.clone()),
            Err(err) if is_not_found(&err) || is_conflict(&err) => {}
            Err(err) => {
                return Err(Error::kube(
                    format!("delete {kind} {namespace}/{name}"),
                    err,
                ));
            }
        }
    }
    Ok(())
}

/// Delete options that hold only for the object as it was read (its uid and resourceVersion):
/// one replaced or changed since fails with 409 Conflict instead of being deleted.
pub(crate) fn delete_as_read<K: kube::Resource>(object: &K) -> DeleteParams {
    DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: object.meta().resource_version.clone(),
            uid: object.meta().uid.clone(),
        }),
        ..DeleteParams::default()
    }
}

/// What [`apply_services`] (or `apply_dns_endpoints`) did to the objects hairpin owns, and
/// what the loop's write-fight guard must learn from it (`written`, `held`, `wanted`: folded
/// into the loop's memory after the apply, never during it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectChanges {
    /// Names created.
    pub created: Vec<String>,
    /// Names updated.
    pub updated: Vec<String>,
    /// Names deleted (hairpin's, no longer wanted).
    pub deleted: Vec<String>,
    /// Objects left as another writer made them because a write fight over them is backed
    /// off, with when the next write may be tried.
    pub backed_off: Vec<(String, Instant)>,
    /// Objects created or updated, with what hairpin wrote (under a guard only).
    pub written: Vec<WrittenObject>,
    /// Objects found as hairpin wants them (under a guard only).
    pub held: Vec<String>,
    /// Every object wanted, once all of them were gone through (under a guard only): the
    /// fight state of the others is forgotten.
    pub wanted: Option<Vec<String>>,
}

/// One of hairpin's objects written, as the write-fight guard compares it: the same value
/// written twice means someone else changed or deleted it in between.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenObject {
    /// The object's name.
    pub name: String,
    /// What hairpin wrote, without what the server keeps or allocates.
    pub value: Option<String>,
    /// The other writer: the manager of the latest change in the object's managedFields
    /// before the write (`None`: absent, or no managedFields to say).
    pub writer: Option<String>,
}

/// One of hairpin's objects found changed by someone else, and restored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reverted {
    /// The object's name.
    pub name: String,
    /// [`Observation::Reverted`], or [`Observation::Fight`] when this started or prolonged a
    /// fight.
    pub observation: Observation,
    /// The other writer: the manager of the latest change in the object's managedFields
    /// (`None`: deleted, or no managedFields to say).
    pub writer: Option<String>,
}

/// The write-fight guard of one apply of a kind of hairpin's objects: the objects whose
/// writes are backed off (a write fight), by name, with when a write may be tried again.
/// Decided before the apply from the loop's memory; an apply without one (uninstall) keeps
/// no fight record.
pub type BackedOff = BTreeMap<String, Instant>;

/// Create and update options of hairpin's writes.
pub fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    }
}

/// The manager of the latest change by someone other than hairpin, from managedFields.
/// Entries of a subresource are skipped: a status update (external-dns sets a
/// `DNSEndpoint`'s `status.observedGeneration` after every change) does not touch what hairpin
/// compares, and its newer timestamp would blame the wrong writer.
pub fn last_writer(managed_fields: &[ManagedFieldsEntry]) -> Option<String> {
    managed_fields
        .iter()
        .filter(|e| e.subresource.as_deref().is_none_or(str::is_empty))
        .filter(|e| {
            e.manager
                .as_deref()
                .is_some_and(|m| !m.is_empty() && m != FIELD_MANAGER)
        })
        .max_by_key(|e| e.time.as_ref().map(|t| t.0))
        .and_then(|e| e.manager.clone())
}

/// The write-fight bookkeeping of one apply of a kind of hairpin's objects: what the guard
/// decided, and what the apply found, recorded in the [`ObjectChanges`]; a no-op without a
/// guard (uninstall).
pub(crate) struct ObjectFights<'a> {
    guard: Option<&'a BackedOff>,
}

impl<'a> ObjectFights<'a> {
    pub(crate) fn new(guard: Option<&'a BackedOff>) -> Self {
        Self { guard }
    }

    /// True (and listed in `changes`) while writes to `name` are backed off.
    pub(crate) fn backed_off(&self, name: &str, changes: &mut ObjectChanges) -> bool {
        match self.guard.and_then(|g| g.get(name)) {
            Some(until) => {
                changes.backed_off.push((name.to_owned(), *until));
                true
            }
            None => false,
        }
    }

    /// `name` matches what hairpin wants.
    pub(crate) fn held(&self, name: &str, changes: &mut ObjectChanges) {
        if self.guard.is_some() {
            changes.held.push(name.to_owned());
        }
    }

    /// `name` was written with `value`; `before` is the object as found (none: absent).
    pub(crate) fn written(
        &self,
        name: &str,
        value: &impl serde::Serialize,
        before: Option<&ObjectMeta>,
        changes: &mut ObjectChanges,
    ) {
        if self.guard.is_none() {
            return;
        }
        // What hairpin wants, without what the server keeps or allocates (the desired object
        // carries the resourceVersion it was planned against, and a Service the ClusterIPs
        // it already has).
        let mut value = serde_json::to_value(value).ok();
        let mut strip = |field: &str, keys: &[&str]| {
            if let Some(map) = value
                .as_mut()
                .and_then(|v| v.get_mut(field))
                .and_then(serde_json::Value::as_object_mut)
            {
                for key in keys {
                    map.remove(*key);
                }
            }
        };
        strip(
            "metadata",
            &[
                "resourceVersion",
                "uid",
                "generation",
                "creationTimestamp",
                "managedFields",
            ],
        );
        strip("spec", &["clusterIP", "clusterIPs"]);
        changes.written.push(WrittenObject {
            name: name.to_owned(),
            value: value.map(|v| v.to_string()),
            writer: before
                .and_then(|meta| meta.managed_fields.as_deref())
                .and_then(last_writer),
        });
    }

    /// Every object wanted was gone through: the others' fight state may be forgotten.
    pub(crate) fn retain(&self, wanted: &[&str], changes: &mut ObjectChanges) {
        if self.guard.is_some() {
            changes.wanted = Some(wanted.iter().map(|w| (*w).to_owned()).collect());
        }
    }
}

impl ObjectChanges {
    /// Number of writes made.
    pub fn writes(&self) -> usize {
        self.created.len() + self.updated.len() + self.deleted.len()
    }
}

fn managed_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")
}

/// True when `existing` already carries everything `desired` sets (then [`apply_services`]
/// leaves it alone).
pub fn service_matches(existing: &Service, desired: &Service) -> bool {
    let subset = |want: &Option<BTreeMap<String, String>>,
                  have: &Option<BTreeMap<String, String>>| {
        want.iter()
            .flatten()
            .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    let (Some(want), Some(have)) = (&desired.spec, &existing.spec) else {
        return desired.spec.is_none();
    };
    subset(&desired.metadata.labels, &existing.metadata.labels)
        && subset(
            &desired.metadata.annotations,
            &existing.metadata.annotations,
        )
        && want.selector == have.selector
        && want.ports == have.ports
        && (want.ip_family_policy.is_none() || want.ip_family_policy == have.ip_family_policy)
        && (want.ip_families.is_none() || want.ip_families == have.ip_families)
        && want.type_.as_deref().unwrap_or("ClusterIP")
            == have.type_.as_deref().unwrap_or("ClusterIP")
}

/// What an update must repeat of `have`: the clusterIP(s), which are immutable (only the
/// secondary one may be added or released), and the primary IP family. The desired families
/// and policy are kept when their primary family is the Service's (a load balancer gaining or
/// losing IPv6 adds or releases the secondary ClusterIP); otherwise the Service's own stay,
/// as the API server refuses to change a primary family.
fn keep_allocated(spec: &mut ServiceSpec, have: &ServiceSpec) {
    let primary = |s: &ServiceSpec| s.ip_families.as_ref().and_then(|f| f.first().cloned());
    if spec.ip_families.is_none() || primary(spec) != primary(have) {
        spec.ip_families = have.ip_families.clone();
        spec.ip_family_policy = have.ip_family_policy.clone();
    }
    let families = spec.ip_families.as_ref().map_or(1, Vec::len).max(1);
    spec.cluster_ip = have.cluster_ip.clone();
    spec.cluster_ips = have.cluster_ips.clone().map(|mut ips| {
        ips.truncate(families);
        ips
    });
}

/// Creates or updates every desired Service in `namespace` and deletes Services there that
/// are hairpin's ([`is_managed`]: the managed-by label AND `source_annotation`) but are not
/// desired. `desired` Services must carry both. A Service of a desired name that is not
/// hairpin's is never replaced: the others are applied, then [`Error::NotOwned`] is returned
/// (so nothing routes a hostname to someone else's Service). A Service update keeps the
/// ClusterIPs and primary family the server allocated.
///
/// # Errors
/// The first API error that is not a 404 on delete or a 409 resolved by re-reading, or
/// [`Error::NotOwned`].
pub async fn apply_services(
    client: &kube::Client,
    namespace: &str,
    source_annotation: &str,
    desired: &[Service],
    guard: Option<&BackedOff>,
) -> Result<ObjectChanges, Error> {
    let mut changes = ObjectChanges::default();
    apply_services_into(
        client,
        namespace,
        source_annotation,
        desired,
        guard,
        &mut changes,
    )
    .await?;
    Ok(changes)
}

/// [`apply_services`], recording what it did in `changes` as it goes (so a failure part way
/// still says what was written).
pub(crate) async fn apply_services_into(
    client: &kube::Client,
    namespace: &str,
    source_annotation: &str,
    desired: &[Service],
    guard: Option<&BackedOff>,
    changes: &mut ObjectChanges,
) -> Result<(), Error> {
    let api: Api<Service> = Api::namespaced(client.clone(), namespace);
    let listed = list_labelled(&api)
        .await
        .map_err(|err| Error::kube(format!("list hairpin Services in {namespace}"), err))?;
    let target = Target {
        namespace,
        source_annotation,
    };
    apply_owned(&api, listed, target, desired, guard, changes).await
}

/// Where [`apply_owned`] writes: hairpin's namespace, and the annotation naming each object's
/// source.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target<'a> {
    /// hairpin's namespace.
    pub namespace: &'a str,
    /// The annotation naming each object's source load balancer.
    pub source_annotation: &'a str,
}

/// One kind of hairpin's own objects in its namespace, as [`apply_owned`] writes them: the
/// planner's desired object (`Self`) and the API object it is sent as.
pub(crate) trait Owned: serde::Serialize {
    /// The API type (`DynamicObject` for a kind without a typed client).
    type Object: kube::Resource
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug;
    /// The kind, in errors, logs and the write-fight targets.
    const KIND: &'static str;
    /// The desired object's metadata.
    fn object_meta(&self) -> &ObjectMeta;
    /// True when `have` already carries everything this sets: nothing to write.
    fn is_met_by(&self, have: &Self::Object) -> bool;
    /// The object to create (`have: None`) or to replace `have` with; [`apply_owned`] sets
    /// its resourceVersion.
    ///
    /// # Errors
    /// JSON encoding (a dynamic object is built from the typed one).
    fn encode(&self, have: Option<&Self::Object>) -> Result<Self::Object, serde_json::Error>;
}

impl Owned for Service {
    type Object = Service;
    const KIND: &'static str = "Service";

    fn object_meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn is_met_by(&self, have: &Service) -> bool {
        service_matches(have, self)
    }

    fn encode(&self, have: Option<&Service>) -> Result<Service, serde_json::Error> {
        let mut object = self.clone();
        if let (Some(spec), Some(have_spec)) =
            (object.spec.as_mut(), have.and_then(|h| h.spec.as_ref()))
        {
            keep_allocated(spec, have_spec);
        }
        Ok(object)
    }
}

/// hairpin's objects of `api`'s kind, by the managed-by label (the caller still checks
/// [`is_managed`]: the label alone is not proof).
pub(crate) async fn list_labelled<K>(api: &Api<K>) -> Result<Vec<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&kube::api::ListParams::default().labels(&managed_selector()))
        .await
        .map(|list| list.items)
}

/// Makes hairpin's objects of one kind in `namespace` exactly `desired`, from `listed` (as
/// [`list_labelled`] found them).
///
/// Each desired object is created, or replaced with the resourceVersion just read (409
/// Conflict or 404: read again, retry), unless it already matches; one of a desired name that
/// is not hairpin's ([`is_managed`]: the managed-by label AND `source_annotation`) is never
/// touched: the others are applied, then [`Error::NotOwned`] is returned (so nothing routes a
/// hostname to someone else's object). Another writer that keeps changing them is backed off
/// from ([`ObjectFights`]). hairpin's objects no longer desired are deleted only as listed.
///
/// # Errors
/// The first API error that is not a 404 on delete or a 409 resolved by re-reading, or
/// [`Error::NotOwned`].
pub(crate) async fn apply_owned<D: Owned>(
    api: &Api<D::Object>,
    listed: Vec<D::Object>,
    target: Target<'_>,
    desired: &[D],
    guard: Option<&BackedOff>,
    changes: &mut ObjectChanges,
) -> Result<(), Error> {
    let Target {
        namespace,
        source_annotation,
    } = target;
    let kind = D::KIND;
    let fights = ObjectFights::new(guard);
    let existing: BTreeMap<String, D::Object> = listed
        .into_iter()
        .filter(|o| is_managed(o.meta(), source_annotation))
        .filter_map(|o| Some((o.meta().name.clone()?, o)))
        .collect();
    let mut refused = None;
    for want in desired {
        let name = want.object_meta().name.clone().unwrap_or_default();
        let what = format!("{kind} {namespace}/{name}");
        let mut current = existing.get(&name).cloned();
        for attempt in 0..=CONFLICT_RETRIES {
            match &current {
                Some(have) if !is_managed(have.meta(), source_annotation) => {
                    tracing::warn!(object = %what, "an object hairpin needs exists and is not hairpin's; left alone");
                    refused.get_or_insert_with(|| Error::NotOwned {
                        kind,
                        object: format!("{namespace}/{name}"),
                        label: MANAGED_BY_LABEL,
                        annotation: source_annotation.to_owned(),
                    });
                    break;
                }
                Some(have) if want.is_met_by(have) => {
                    fights.held(&name, changes);
                    break;
                }
                _ if fights.backed_off(&name, changes) => break,
                _ => {}
            }
            let mut object = want
                .encode(current.as_ref())
                .map_err(|source| Error::Encode { what: kind, source })?;
            object.meta_mut().resource_version = current
                .as_ref()
                .and_then(|have| have.meta().resource_version.clone());
            let result = match &current {
                Some(_) => api
                    .replace(&name, &post_params(), &object)
                    .await
                    .map(|_| changes.updated.push(name.clone())),
                None => api
                    .create(&post_params(), &object)
                    .await
                    .map(|_| changes.created.push(name.clone())),
            };
            match result {
                Ok(()) => {
                    let before = current.as_ref().map(|c| c.meta());
                    fights.written(&name, want, before, changes);
                    break;
                }
                Err(err)
                    if (is_conflict(&err) || is_not_found(&err)) && attempt < CONFLICT_RETRIES =>
                {
                    tracing::debug!(object = %what, "write conflicted; reading again");
                    current = api
                        .get_opt(&name)
                        .await
                        .map_err(|err| Error::kube(format!("get {what}"), err))?;
                }
                Err(err) => return Err(Error::kube(format!("write {what}"), err)),
            }
        }
    }
    let wanted: Vec<&str> = desired
        .iter()
        .filter_map(|d| d.object_meta().name.as_deref())
        .collect();
    fights.retain(&wanted, changes);
    delete_unwanted(
        api,
        &existing,
        &wanted,
        kind,
        namespace,
        &mut changes.deleted,
    )
    .await?;
    match refused {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

/// Deletes every Service in `namespace` that is hairpin's (the managed-by label AND
/// `source_annotation`). Returns the names deleted.
///
/// # Errors
/// API errors other than 404.
pub async fn delete_managed_services(
    client: &kube::Client,
    namespace: &str,
    source_annotation: &str,
) -> Result<Vec<String>, Error> {
    apply_services(client, namespace, source_annotation, &[], None)
        .await
        .map(|changes| changes.deleted)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn entry(manager: &str, subresource: Option<&str>, second: i64) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.to_owned()),
            operation: Some("Update".to_owned()),
            subresource: subresource.map(str::to_owned),
            time: Some(Time(Timestamp::from_second(second).unwrap())),
            ..ManagedFieldsEntry::default()
        }
    }

    #[test]
    fn the_last_writer_is_the_newest_other_manager_of_the_object_not_of_its_status() {
        // argocd changed the spec; external-dns then only updated the status.
        let found = [
            entry(FIELD_MANAGER, None, 100),
            entry("argocd-controller", None, 200),
            entry("external-dns", Some("status"), 300),
        ];
        assert_eq!(last_writer(&found).as_deref(), Some("argocd-controller"));
        // Odd entries (no manager, no time, hairpin's own) name nobody and do not panic.
        let odd = [
            ManagedFieldsEntry::default(),
            entry("", None, 500),
            entry(FIELD_MANAGER, None, 400),
            entry("kubectl-edit", Some(""), 50),
        ];
        assert_eq!(last_writer(&odd).as_deref(), Some("kubectl-edit"));
        assert_eq!(last_writer(&[]), None);
    }
}
