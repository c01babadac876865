//! `hairpin uninstall`: remove everything hairpin wrote.
//!
//! Our `Hairpin` objects, Services and external-dns `DNSEndpoint`s (the managed-by label AND
//! hairpin's annotation; none when the `DNSEndpoint` CRD is not installed), the
//! routes and hosts ConfigMaps and the leader Lease (the label AND `hairpin.io/created-by`), our
//! marked blocks in every candidate CoreDNS and node-local-dns ConfigMap (removed with the
//! Corefile editor, which gives back the original bytes, and refuses damaged markers rather
//! than guess), our blocks in the server-block keys of `coredns-custom` (`*.server`),
//! and our key in `coredns-custom` (the ConfigMap itself too when hairpin created it
//! and nothing else is left in it). Each step is retried on transient API errors; a step that
//! still fails is reported and the others still run.
//!
//! **The fence comes first.** Before anything is removed, the leader Lease is taken for the
//! reserved holder [`FENCE_HOLDER`] and marked as fenced (see [`crate::lease`]), owned by the
//! controller Deployment when there is one. Every controller that sees it stops writing for
//! good; uninstall waits until the displaced leader acknowledges (or, at most, until its Lease
//! could have expired, when it has stopped by its own rule), so nothing puts back what is
//! removed next. The fence is left in place while the controller Deployment exists (its pods
//! are still running: they stay idle) and goes with it (garbage collection), so a new install
//! starts unfenced; without a Deployment, uninstall removes it as its last step.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use hairpin_planner::is_managed;
use hairpin_planner::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, PlannerConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::Error;
use crate::apply::{
    KeyOutcome, config_map_is_ours, created_by_hairpin, created_by_hairpin_meta, delete_as_read,
    delete_managed_services, post_params, write_key,
};
use crate::crd::Hairpin;
use crate::dns_endpoints::delete_dns_endpoints;
use crate::edits::{KeyEdit, remove_block_edit};
use crate::error::is_not_found;
use crate::lease::{
    FENCE_ACKNOWLEDGED_ANNOTATION, FENCE_ANNOTATION, FENCE_HOLDER,
    FENCE_PREVIOUS_HOLDER_ANNOTATION, fence_of,
};
use crate::lease::{FENCE_BY_REMOVAL, FENCE_BY_UNINSTALL};

mod ip_modes;

use ip_modes::restore_ip_modes;

/// What uninstall removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UninstallReport {
    /// hairpin Services deleted.
    pub services_deleted: Vec<String>,
    /// hairpin's `DNSEndpoint`s deleted (`--dns-mode external-dns`), by name.
    pub dns_endpoints_deleted: Vec<String>,
    /// The routes ConfigMap was deleted.
    pub routes_deleted: bool,
    /// The node agents' hosts ConfigMap was deleted.
    pub hosts_deleted: bool,
    /// Load balancer Services whose `ipMode` the native cure set and uninstall put back as it
    /// was (`namespace/name`).
    pub ip_modes_restored: Vec<String>,
    /// Of those, the ones found without the record, by the Services' managed fields (hairpin's
    /// field manager wrote their status list, which says `Proxy`), and put back to the default.
    pub ip_modes_from_managed_fields: Vec<String>,
    /// The native cure's record was there (and hairpin's) when uninstall read it.
    pub native_record_found: bool,
    /// The native cure's record ConfigMap was deleted.
    pub native_record_deleted: bool,
    /// The leader Lease was deleted.
    pub lease_deleted: bool,
    /// Objects at a name hairpin uses that lack hairpin's marks, left in place
    /// (`Kind namespace/name`): someone else's.
    pub left_alone: Vec<String>,
    /// CoreDNS and node-local-dns ConfigMaps whose Corefile had our blocks removed (and
    /// `coredns-custom` keys of imported server blocks, as `namespace/name key KEY`).
    pub corefiles_restored: Vec<String>,
    /// Our key was removed from `coredns-custom`.
    pub custom_key_removed: bool,
    /// `Hairpin` objects deleted, `namespace/name` (the CRD itself is left to the user).
    pub hairpins_deleted: Vec<String>,
    /// Steps that failed after retries (the rest still ran).
    pub failures: Vec<String>,
    /// The fence: who was displaced and whether it stood down.
    pub fence: FenceReport,
    /// What is still running (the controller Deployment, fenced and idle), for the user.
    pub still_running: Vec<String>,
}

/// What the fence did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FenceReport {
    /// The Lease was fenced (false: no fence was possible, e.g. a Lease that is not hairpin's
    /// at the name, which no hairpin controller leads on anyway).
    pub fenced: bool,
    /// The leader it displaced, if the Lease had a holder.
    pub displaced: Option<String>,
    /// That leader acknowledged (stopped writing), after this long.
    pub acknowledged_after: Option<Duration>,
    /// It did not acknowledge: uninstall waited until its Lease could have expired (it has
    /// stopped writing by its own rule since), this long.
    pub expired_after: Option<Duration>,
    /// The controller Deployment the fence is owned by (`namespace/name`): it stays while the
    /// Deployment exists, and goes with it.
    pub owned_by: Option<String>,
}

/// What `hairpin uninstall` needs besides the planner's settings.
#[derive(Clone, Debug)]
pub struct UninstallParams {
    /// The controller's leader Lease (the fence).
    pub lease_name: String,
    /// The controller Deployment in hairpin's namespace (owner of the fence).
    pub controller_deployment: String,
    /// Longest wait for the displaced leader (default: its Lease duration, plus a second).
    pub stand_down_timeout: Option<Duration>,
    /// The removal guard's restore: its fence is lifted again when the controller Deployment
    /// lives on ([`crate::lease::FENCE_BY_REMOVAL`]); `hairpin uninstall`'s stays.
    pub by_removal: bool,
}

impl UninstallParams {
    /// The defaults of the chart and the static manifest.
    pub fn new(lease_name: &str) -> Self {
        Self {
            lease_name: lease_name.into(),
            controller_deployment: "hairpin-controller".into(),
            stand_down_timeout: None,
            by_removal: false,
        }
    }
}

/// Attempts per step.
const ATTEMPTS: u32 = 5;

async fn retry<T, F, Fut>(what: &str, mut op: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let mut delay = Duration::from_millis(200);
    let mut attempt = 1;
    loop {
        match op().await {
            Ok(value) => return Ok(value),
            Err(err)
                if attempt < ATTEMPTS
                    && err
                        .status_code()
                        .is_none_or(|c| c == 409 || c == 429 || c >= 500) =>
            {
                tracing::warn!(error = %err, attempt, "{what} failed; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
            Err(err) => return Err(err),
        }
    }
}

/// What [`delete_if_ours`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deleted {
    /// Deleted.
    Yes,
    /// Not there (or gone meanwhile).
    Absent,
    /// There, without hairpin's marks: left alone.
    NotOurs,
}

/// Deletes `namespace/name` when it is there and `ours` says hairpin owns it. One that is
/// not hairpin's is left alone with a warning. The delete is conditional on the uid and
/// resourceVersion read, so an object replaced in between is not deleted either.
async fn delete_if_ours<K>(
    api: &Api<K>,
    namespace: &str,
    name: &str,
    ours: impl Fn(&K) -> bool,
) -> Result<Deleted, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let what = format!("{} {namespace}/{name}", K::kind(&()));
    let current = api
        .get_opt(name)
        .await
        .map_err(|err| Error::kube(format!("get {what}"), err))?;
    let Some(current) = current else {
        return Ok(Deleted::Absent);
    };
    if !ours(&current) {
        tracing::warn!(object = %what, "not hairpin's (no managed-by label and hairpin annotation); left alone");
        return Ok(Deleted::NotOurs);
    }
    match api.delete(name, &delete_as_read(&current)).await {
        Ok(_) => Ok(Deleted::Yes),
        Err(err) if is_not_found(&err) => Ok(Deleted::Absent),
        Err(err) => Err(Error::kube(format!("delete {what}"), err)),
    }
}

/// Deletes our `Hairpin` objects (the managed-by label AND the source annotation) in every
/// namespace; none when the CRD is not installed.
async fn delete_hairpins(
    client: &kube::Client,
    source_annotation: &str,
) -> Result<Vec<String>, Error> {
    let all: Api<Hairpin> = Api::all(client.clone());
    let selector = format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}");
    let list = match all.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list,
        Err(err) if is_not_found(&err) => return Ok(Vec::new()),
        Err(err) => return Err(Error::kube("list Hairpin objects", err)),
    };
    let ours = |h: &Hairpin| is_managed(&h.metadata, source_annotation);
    let mut deleted = Vec::new();
    for hairpin in list.into_iter().filter(|h| ours(h)) {
        let namespace = hairpin.namespace().unwrap_or_default();
        let name = hairpin.name_any();
        let api: Api<Hairpin> = Api::namespaced(client.clone(), &namespace);
        if delete_if_ours(&api, &namespace, &name, ours).await? == Deleted::Yes {
            deleted.push(format!("{namespace}/{name}"));
        }
    }
    Ok(deleted)
}

/// Removes everything hairpin wrote. `lease_name` is the controller's Lease; the controller
/// Deployment is `hairpin-controller` ([`uninstall_with`] names another).
///
/// # Errors
/// Never for a single failed step (it is listed in [`UninstallReport::failures`]).
pub async fn uninstall(
    client: &kube::Client,
    planner: &PlannerConfig,
    lease_name: &str,
) -> UninstallReport {
    uninstall_with(client, planner, &UninstallParams::new(lease_name)).await
}

/// The outcome of writing the fence.
enum Fenced {
    /// Fenced; the holder displaced, if any, and the Lease duration it renewed with.
    Yes {
        displaced: Option<String>,
        duration: Duration,
        acknowledged: bool,
    },
    /// The Lease at that name is not hairpin's: no hairpin controller leads on it.
    NotOurs,
}

/// An owner reference to the controller Deployment, when it exists.
async fn controller_deployment(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<OwnerReference>, Error> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deployment = match api.get_opt(name).await {
        Ok(found) => found,
        // Without the permission (an older chart's RBAC), uninstall works as without a
        // Deployment.
        Err(kube::Error::Api(status)) if status.code == 403 => {
            let err = kube::Error::Api(status);
            tracing::warn!(error = %err, "cannot read the controller Deployment; the fence is removed at the end");
            None
        }
        Err(err) => {
            return Err(Error::kube(
                format!("get Deployment {namespace}/{name}"),
                err,
            ));
        }
    };
    Ok(deployment.and_then(|d| {
        Some(OwnerReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: name.into(),
            uid: d.metadata.uid?,
            ..OwnerReference::default()
        })
    }))
}

/// Adds `owner` to the Lease's owners; false when it was one already.
fn add_owner(lease: &mut Lease, owner: &OwnerReference) -> bool {
    let owners = lease.metadata.owner_references.get_or_insert_with(Vec::new);
    if owners.iter().any(|o| o.uid == owner.uid) {
        return false;
    }
    owners.push(owner.clone());
    true
}

/// Takes the Lease for [`FENCE_HOLDER`], marked as fenced and owned by `owner`.
async fn write_fence(
    api: &Api<Lease>,
    namespace: &str,
    name: &str,
    owner: Option<&OwnerReference>,
    by_removal: bool,
) -> Result<Fenced, Error> {
    let kind = if by_removal {
        FENCE_BY_REMOVAL
    } else {
        FENCE_BY_UNINSTALL
    };
    let what = format!("Lease {namespace}/{name}");
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let fence_spec = |duration: i32| LeaseSpec {
        holder_identity: Some(FENCE_HOLDER.into()),
        lease_duration_seconds: Some(duration),
        acquire_time: Some(now.clone()),
        renew_time: Some(now.clone()),
        ..LeaseSpec::default()
    };
    let mark = |lease: &mut Lease, displaced: Option<&str>| {
        let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(FENCE_ANNOTATION.into(), kind.into());
        annotations.insert(
            FENCE_PREVIOUS_HOLDER_ANNOTATION.into(),
            displaced.unwrap_or_default().into(),
        );
        annotations.remove(FENCE_ACKNOWLEDGED_ANNOTATION);
        if let Some(owner) = owner {
            add_owner(lease, owner);
        }
    };
    let Some(mut lease) = api
        .get_opt(name)
        .await
        .map_err(|err| Error::kube(format!("get {what}"), err))?
    else {
        let mut lease = Lease {
            metadata: created_by_hairpin_meta(namespace, name),
            spec: Some(fence_spec(15)),
        };
        mark(&mut lease, None);
        api.create(&post_params(), &lease)
            .await
            .map_err(|err| Error::kube(format!("create {what}"), err))?;
        return Ok(Fenced::Yes {
            displaced: None,
            duration: Duration::ZERO,
            acknowledged: true,
        });
    };
    if !created_by_hairpin(&lease.metadata) {
        return Ok(Fenced::NotOurs);
    }
    let spec = lease.spec.clone().unwrap_or_default();
    let duration = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(Duration::from_secs(15), Duration::from_secs);
    if let Some(fence) = fence_of(&lease) {
        // An earlier run fenced it already: keep what it recorded, add the owner.
        let acknowledged = fence.previous_holder.is_none()
            || fence.acknowledged_by.is_some() && fence.acknowledged_by == fence.previous_holder;
        // `hairpin uninstall` over the removal guard's fence makes it for good.
        let for_good = fence.by_removal && !by_removal;
        if for_good {
            lease
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(FENCE_ANNOTATION.into(), kind.into());
        }
        let owned = owner.is_some_and(|owner| add_owner(&mut lease, owner));
        if for_good || owned {
            api.replace(name, &post_params(), &lease)
                .await
                .map_err(|err| Error::kube(format!("update {what}"), err))?;
        }
        return Ok(Fenced::Yes {
            displaced: fence.previous_holder,
            duration,
            acknowledged,
        });
    }
    let displaced = spec
        .holder_identity
        .filter(|h| !h.is_empty() && h != FENCE_HOLDER);
    lease.spec = Some(fence_spec(
        i32::try_from(duration.as_secs()).unwrap_or(i32::MAX),
    ));
    mark(&mut lease, displaced.as_deref());
    // Guarded by the resourceVersion read: a renewal in between makes this a 409, retried.
    api.replace(name, &post_params(), &lease)
        .await
        .map_err(|err| Error::kube(format!("fence {what}"), err))?;
    Ok(Fenced::Yes {
        acknowledged: displaced.is_none(),
        displaced,
        duration,
    })
}

/// Waits until `displaced` acknowledges the fence, or until `timeout` (by then its Lease could
/// have expired, and its gate closed by itself). True when it acknowledged.
async fn wait_stand_down(api: &Api<Lease>, name: &str, displaced: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(lease)) = api.get_opt(name).await
            && fence_of(&lease).and_then(|f| f.acknowledged_by).as_deref() == Some(displaced)
        {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Fences the controllers (see the module documentation) and fills `report.fence`. False
/// when uninstall must not go on (the fence could not be written).
async fn fence(
    client: &kube::Client,
    planner: &PlannerConfig,
    params: &UninstallParams,
    report: &mut UninstallReport,
) -> bool {
    let ns = &planner.namespace;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let owner = match retry("read the controller Deployment", || {
        controller_deployment(client, ns, &params.controller_deployment)
    })
    .await
    {
        Ok(found) => found,
        Err(err) => {
            tracing::warn!(error = %err, "cannot read the controller Deployment; the fence is removed at the end");
            None
        }
    };
    let started = Instant::now();
    let fenced = retry("fence the controller", || {
        write_fence(
            &leases,
            ns,
            &params.lease_name,
            owner.as_ref(),
            params.by_removal,
        )
    })
    .await;
    match fenced {
        Ok(Fenced::NotOurs) => {
            report
                .left_alone
                .push(format!("Lease {ns}/{}", params.lease_name));
            true
        }
        Ok(Fenced::Yes {
            displaced,
            duration,
            acknowledged,
        }) => {
            report.fence.fenced = true;
            report.fence.owned_by = owner
                .as_ref()
                .map(|_| format!("{ns}/{}", params.controller_deployment));
            if let Some(holder) = &displaced
                && !acknowledged
            {
                let timeout = params
                    .stand_down_timeout
                    .unwrap_or(duration + Duration::from_secs(1));
                tracing::info!(controller = %hairpin_planner::escape::text(holder), timeout = ?timeout, "waiting for the leading controller to stop writing");
                if wait_stand_down(&leases, &params.lease_name, holder, timeout).await {
                    report.fence.acknowledged_after = Some(started.elapsed());
                } else {
                    report.fence.expired_after = Some(started.elapsed());
                }
            }
            report.fence.displaced = displaced;
            true
        }
        // In a namespace being deleted (its Lease deleted with it) no Lease can be made: no
        // controller can lead there any more (a leader that cannot renew stops writing), so
        // there is nothing to fence.
        Err(err)
            if err.status_code() == Some(403) && err.to_string().contains("being terminated") =>
        {
            tracing::info!(namespace = %hairpin_planner::escape::text(ns), "the namespace is being deleted and its Lease with it: no controller leads, nothing to fence");
            true
        }
        Err(err) => {
            tracing::error!(error = %err, "cannot fence the controller; nothing removed");
            report.failures.push(format!(
                "{err} (nothing was removed: a running controller would put it back)"
            ));
            false
        }
    }
}

/// Removes everything hairpin wrote, after fencing the controllers.
///
/// # Errors
/// Never for a single failed step (it is listed in [`UninstallReport::failures`]).
pub async fn uninstall_with(
    client: &kube::Client,
    planner: &PlannerConfig,
    params: &UninstallParams,
) -> UninstallReport {
    let mut report = UninstallReport::default();
    if !fence(client, planner, params, &mut report).await {
        return report;
    }
    delete_objects(client, planner, &mut report).await;
    restore_ip_modes(client, planner, &mut report).await;
    delete_own_config_maps(client, planner, &mut report).await;
    restore_corefiles(client, planner, &mut report).await;
    restore_coredns_custom(client, planner, &mut report).await;
    remove_fence(client, planner, params, &mut report).await;
    report
}

/// A step that failed (after its retries): logged, listed, and the uninstall goes on.
fn step_failed(report: &mut UninstallReport, err: Error) {
    tracing::error!(error = %err, "uninstall step failed");
    report.failures.push(err.to_string());
}

/// The objects hairpin created whole: `Hairpin` objects, hairpin Services, DNSEndpoints.
async fn delete_objects(
    client: &kube::Client,
    planner: &PlannerConfig,
    report: &mut UninstallReport,
) {
    let source_annotation = planner.annotation("source");
    match retry("delete Hairpin objects", || {
        delete_hairpins(client, &source_annotation)
    })
    .await
    {
        Ok(deleted) => report.hairpins_deleted = deleted,
        Err(err) => step_failed(report, err),
    }

    match retry("delete hairpin Services", || {
        delete_managed_services(client, &planner.namespace, &source_annotation)
    })
    .await
    {
        Ok(deleted) => report.services_deleted = deleted,
        Err(err) => step_failed(report, err),
    }

    // Whatever the current mode: an earlier run may have been in `external-dns` mode.
    match retry("delete hairpin DNSEndpoints", || {
        delete_dns_endpoints(client, &planner.namespace, &source_annotation)
    })
    .await
    {
        Ok(deleted) => report.dns_endpoints_deleted = deleted,
        Err(err) => step_failed(report, err),
    }
}

/// The routes and hosts ConfigMaps, when they are hairpin's.
async fn delete_own_config_maps(
    client: &kube::Client,
    planner: &PlannerConfig,
    report: &mut UninstallReport,
) {
    let ns = &planner.namespace;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let own = [
        planner.routes_config_map.as_str(),
        planner.hosts_config_map.as_str(),
    ];
    for name in own {
        let result = retry("delete a ConfigMap of hairpin's", || {
            delete_if_ours(&config_maps, ns, name, config_map_is_ours)
        })
        .await;
        match result {
            Ok(Deleted::Yes) if name == planner.routes_config_map => report.routes_deleted = true,
            Ok(Deleted::Yes) => report.hosts_deleted = true,
            Ok(Deleted::NotOurs) => report.left_alone.push(format!("ConfigMap {ns}/{name}")),
            Ok(Deleted::Absent) => {}
            Err(err) => step_failed(report, err),
        }
    }
}

/// hairpin's block out of every candidate Corefile.
async fn restore_corefiles(
    client: &kube::Client,
    planner: &PlannerConfig,
    report: &mut UninstallReport,
) {
    for (namespace, name) in planner.corefile_config_maps() {
        let edit = remove_block_edit(namespace, name, &planner.corefile_key);
        match retry("restore the Corefile", || write_key(client, &edit)).await {
            Ok(KeyOutcome::Written { .. }) => {
                report
                    .corefiles_restored
                    .push(format!("{namespace}/{name}"));
            }
            Ok(_) => {}
            Err(err) => step_failed(report, err),
        }
    }
}

/// hairpin's answer blocks out of the server blocks the Corefile imports from
/// `coredns-custom` (`*.server` keys), leaving every other byte as it was; then hairpin's own
/// key removed.
async fn restore_coredns_custom(
    client: &kube::Client,
    planner: &PlannerConfig,
    report: &mut UninstallReport,
) {
    let (namespace, name) = (
        &planner.coredns_namespace,
        &planner.coredns_custom_config_map,
    );
    let custom_api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let custom_cm = retry("read coredns-custom", || async {
        custom_api
            .get_opt(name)
            .await
            .map_err(|err| Error::kube(format!("get ConfigMap {namespace}/{name}"), err))
    })
    .await;
    match custom_cm {
        Ok(cm) => {
            let keys: Vec<String> = cm
                .and_then(|cm| cm.data)
                .unwrap_or_default()
                .into_iter()
                .filter(|(key, text)| {
                    *key != planner.coredns_custom_key
                        && text.contains(hairpin_planner::markers::BEGIN_PREFIX)
                })
                .map(|(key, _)| key)
                .collect();
            for key in keys {
                let edit = remove_block_edit(namespace, name, &key);
                match retry("restore a coredns-custom key", || write_key(client, &edit)).await {
                    Ok(KeyOutcome::Written { .. }) => report
                        .corefiles_restored
                        .push(format!("{namespace}/{name} key {key}")),
                    Ok(_) => {}
                    Err(err) => step_failed(report, err),
                }
            }
        }
        Err(err) => step_failed(report, err),
    }

    let custom = KeyEdit::set(namespace, name, &planner.coredns_custom_key, None);
    match retry("remove the coredns-custom key", || {
        write_key(client, &custom)
    })
    .await
    {
        Ok(KeyOutcome::Written { .. }) => report.custom_key_removed = true,
        Ok(_) => {}
        Err(err) => step_failed(report, err),
    }
}

/// The fence stays while the controller Deployment exists (its pods are idle, and the
/// garbage collector deletes the fence with it); without one, it is the last thing removed.
async fn remove_fence(
    client: &kube::Client,
    planner: &PlannerConfig,
    params: &UninstallParams,
    report: &mut UninstallReport,
) {
    if !report.fence.fenced {
        return;
    }
    let ns = &planner.namespace;
    match &report.fence.owned_by {
        Some(deployment) => {
            let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
            let pods = api
                .get_opt(&params.controller_deployment)
                .await
                .ok()
                .flatten()
                .and_then(|d| d.status)
                .and_then(|s| s.replicas)
                .unwrap_or(0);
            let still_running = format!("Deployment {deployment} ({pods} pod(s))");
            report.still_running.push(still_running);
        }
        None => {
            let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
            let lease_name = params.lease_name.as_str();
            match retry("delete the fence", || {
                delete_if_ours(&leases, ns, lease_name, |l: &Lease| {
                    created_by_hairpin(&l.metadata)
                })
            })
            .await
            {
                Ok(Deleted::Yes) => report.lease_deleted = true,
                Ok(_) => {}
                Err(err) => step_failed(report, err),
            }
        }
    }
}
