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

use std::fmt::Debug;
use std::time::Duration;

use hairpin_planner::PlannerConfig;
use hairpin_planner::config::is_managed;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::apply::{
    KeyEdit, KeyOutcome, config_map_is_ours, created_by_hairpin, delete_as_read,
    delete_managed_services, remove_block_edit, write_key,
};
use crate::crd::Hairpin;
use crate::dns_endpoints::delete_dns_endpoints;
use crate::error::is_not_found;
use crate::{Error, MANAGED_BY_LABEL, MANAGED_BY_VALUE};

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

/// Removes everything hairpin wrote. `lease_name` is the controller's Lease.
///
/// # Errors
/// Never for a single failed step (it is listed in [`UninstallReport::failures`]).
pub async fn uninstall(
    client: &kube::Client,
    planner: &PlannerConfig,
    lease_name: &str,
) -> UninstallReport {
    let mut report = UninstallReport::default();
    let fail = |report: &mut UninstallReport, err: Error| {
        tracing::error!(error = %err, "uninstall step failed");
        report.failures.push(err.to_string());
    };

    let source_annotation = planner.annotation("source");
    match retry("delete Hairpin objects", || {
        delete_hairpins(client, &source_annotation)
    })
    .await
    {
        Ok(deleted) => report.hairpins_deleted = deleted,
        Err(err) => fail(&mut report, err),
    }

    match retry("delete hairpin Services", || {
        delete_managed_services(client, &planner.namespace, &source_annotation)
    })
    .await
    {
        Ok(deleted) => report.services_deleted = deleted,
        Err(err) => fail(&mut report, err),
    }

    // Whatever the current mode: an earlier run may have been in `external-dns` mode.
    match retry("delete hairpin DNSEndpoints", || {
        delete_dns_endpoints(client, &planner.namespace, &source_annotation)
    })
    .await
    {
        Ok(deleted) => report.dns_endpoints_deleted = deleted,
        Err(err) => fail(&mut report, err),
    }

    let ns = &planner.namespace;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let own = [
        ("ConfigMap", planner.routes_config_map.as_str()),
        ("ConfigMap", planner.hosts_config_map.as_str()),
        ("Lease", lease_name),
    ];
    for (kind, name) in own {
        // The Lease too only with hairpin's marks: one without them is another program's
        // leader election (the controller never takes such a Lease either).
        let result = match kind {
            "Lease" => {
                retry("delete Lease", || {
                    delete_if_ours(&leases, ns, name, |l: &Lease| {
                        created_by_hairpin(&l.metadata)
                    })
                })
                .await
            }
            _ => {
                retry("delete a ConfigMap of hairpin's", || {
                    delete_if_ours(&config_maps, ns, name, config_map_is_ours)
                })
                .await
            }
        };
        match result {
            Ok(Deleted::Yes) if kind == "Lease" => report.lease_deleted = true,
            Ok(Deleted::Yes) if name == planner.routes_config_map => report.routes_deleted = true,
            Ok(Deleted::Yes) => report.hosts_deleted = true,
            Ok(Deleted::NotOurs) => report.left_alone.push(format!("{kind} {ns}/{name}")),
            Ok(Deleted::Absent) => {}
            Err(err) => fail(&mut report, err),
        }
    }

    let corefiles = planner.corefile_config_maps();
    for (namespace, name) in corefiles {
        let edit = remove_block_edit(namespace, name, &planner.corefile_key);
        match retry("restore the Corefile", || write_key(client, &edit)).await {
            Ok(KeyOutcome::Written { .. }) => {
                report
                    .corefiles_restored
                    .push(format!("{namespace}/{name}"));
            }
            Ok(_) => {}
            Err(err) => fail(&mut report, err),
        }
    }

    // Server blocks the Corefile imports from `coredns-custom` (`*.server` keys): hairpin's
    // answer blocks in them are removed the same way, leaving every other byte as it was.
    let custom_api: Api<ConfigMap> = Api::namespaced(client.clone(), &planner.coredns_namespace);
    let custom_cm = retry("read coredns-custom", || async {
        custom_api
            .get_opt(&planner.coredns_custom_config_map)
            .await
            .map_err(|err| {
                Error::kube(
                    format!(
                        "get ConfigMap {}/{}",
                        planner.coredns_namespace, planner.coredns_custom_config_map
                    ),
                    err,
                )
            })
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
                let edit = remove_block_edit(
                    &planner.coredns_namespace,
                    &planner.coredns_custom_config_map,
                    &key,
                );
                match retry("restore a coredns-custom key", || write_key(client, &edit)).await {
                    Ok(KeyOutcome::Written { .. }) => report.corefiles_restored.push(format!(
                        "{}/{} key {key}",
                        planner.coredns_namespace, planner.coredns_custom_config_map
                    )),
                    Ok(_) => {}
                    Err(err) => fail(&mut report, err),
                }
            }
        }
        Err(err) => fail(&mut report, err),
    }

    let custom = KeyEdit::set(
        &planner.coredns_namespace,
        &planner.coredns_custom_config_map,
        &planner.coredns_custom_key,
        None,
    );
    match retry("remove the coredns-custom key", || {
        write_key(client, &custom)
    })
    .await
    {
        Ok(KeyOutcome::Written { .. }) => report.custom_key_removed = true,
        Ok(_) => {}
        Err(err) => fail(&mut report, err),
    }
    report
}
