//! The native cure undone: every `ipMode: Proxy` hairpin set, put back from its record, and
//! without a record (deleted with its namespace, or never readable) from the Services'
//! managed fields: a load balancer status whose ingress list hairpin's field manager wrote
//! last (the status subresource) and that says `Proxy` on an IP is hairpin's doing; those IPs
//! go back to the default (`VIP`, the field removed), which is what they said before unless
//! another writer had set `VIP` explicitly.

use std::collections::BTreeMap;

use hairpin_planner::native::{IP_MODE_PROXY, NATIVE_KEY, NativeEntry, NativeRecord};
use hairpin_planner::{FIELD_MANAGER, ObjectRef, PlannerConfig};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::{Deleted, UninstallReport, delete_if_ours, retry, step_failed};
use crate::Error;
use crate::apply::config_map_is_ours;
use crate::native;

/// Every load balancer status the native cure set to `ipMode: Proxy` back as it was (only
/// IPs still at `Proxy`: a value another writer set since stays), from hairpin's record; then
/// the record. A record that is not hairpin's (or not readable) is left alone, and said so.
pub(super) async fn restore_ip_modes(
    client: &kube::Client,
    planner: &PlannerConfig,
    report: &mut UninstallReport,
) {
    let ns = &planner.namespace;
    let name = &planner.native_config_map;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let read = retry("read the native cure's record", || async {
        config_maps
            .get_opt(name)
            .await
            .map_err(|e| Error::kube(format!("get ConfigMap {ns}/{name}"), e))
    })
    .await;
    let cm = match read {
        Ok(Some(cm)) if config_map_is_ours(&cm) => cm,
        Ok(Some(_)) => {
            report.left_alone.push(format!("ConfigMap {ns}/{name}"));
            return;
        }
        // No record (never made, or deleted before: with its namespace): what hairpin's field
        // manager wrote is read from the Services themselves.
        Ok(None) => {
            restore_from_managed_fields(client, &BTreeMap::new(), report).await;
            return;
        }
        Err(err) => return step_failed(report, err),
    };
    report.native_record_found = true;
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(NATIVE_KEY))
        .map_or("{}", String::as_str);
    let record: NativeRecord = match serde_json::from_str(text) {
        Ok(record) => record,
        Err(err) => {
            report.failures.push(format!(
                "ConfigMap {ns}/{name} key {NATIVE_KEY} is not readable ({err}): the load balancer statuses hairpin's field manager last wrote are put back to the default; check the others' ipMode by hand"
            ));
            restore_from_managed_fields(client, &BTreeMap::new(), report).await;
            return;
        }
    };
    let mut all_restored = true;
    for (key, entry) in &record.load_balancers {
        let Some((namespace, svc_name)) = key.split_once('/') else {
            continue;
        };
        let service = ObjectRef::new(namespace, svc_name);
        // Read back: a restore the API server's answer does not hold is retried, and in the
        // end a failure (the record stays), never counted as done.
        let result = retry("put a load balancer's ipMode back", || async {
            // A `failed` entry's `Proxy` counts as hairpin's (as under a forced cure): the
            // running controller forgot every status another writer took over, and whether
            // this one was forced (`--cure native`) is the controller's flag, not known here.
            match native::restore_entry(client, &service, entry, true).await {
                Ok(native::Written::NotApplied(_)) => Err(Error::NotApplied(format!(
                    "put ipMode back on Service {service}"
                ))),
                Ok(written) => Ok(written),
                Err(e) => Err(Error::kube(
                    format!("put ipMode back on Service {service}"),
                    e,
                )),
            }
        })
        .await;
        match result {
            Ok(native::Written::Applied(_)) => report.ip_modes_restored.push(key.clone()),
            Ok(_) => {}
            Err(err) => {
                all_restored = false;
                step_failed(report, err);
            }
        }
    }
    // Those the record does not list (forgotten when another writer touched the list).
    all_restored &= restore_from_managed_fields(client, &record.load_balancers, report).await;
    // Kept while a status could not be put back: a second uninstall finishes the job.
    if all_restored {
        match retry("delete the native cure's record", || {
            delete_if_ours(&config_maps, ns, name, config_map_is_ours)
        })
        .await
        {
            Ok(Deleted::Yes) => report.native_record_deleted = true,
            Ok(_) => {}
            Err(err) => step_failed(report, err),
        }
    }
}

/// Whether hairpin's field manager last wrote `svc`'s load balancer ingress list (through the
/// status subresource): the list is atomic, so its last writer owns all of it.
pub(super) fn status_written_by_hairpin(svc: &Service) -> bool {
    svc.metadata.managed_fields.iter().flatten().any(|entry| {
        entry.manager.as_deref() == Some(FIELD_MANAGER)
            && entry.subresource.as_deref() == Some("status")
            && entry.fields_v1.as_ref().is_some_and(|fields| {
                !fields.0["f:status"]["f:loadBalancer"]["f:ingress"].is_null()
            })
    })
}

/// The IPs of `svc` at `Proxy` that hairpin's field manager wrote ([`status_written_by_hairpin`]),
/// each to go back to the default.
fn proxy_ips_of_hairpin(svc: &Service) -> BTreeMap<String, Option<String>> {
    if !status_written_by_hairpin(svc) {
        return BTreeMap::new();
    }
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|e| e.ip_mode.as_deref() == Some(IP_MODE_PROXY))
        .filter_map(|e| Some((e.ip.clone()?, None)))
        .collect()
}

/// Puts back, to the default, every `Proxy` hairpin's field manager wrote on a Service that
/// `known` (the record) does not list. False when one could not be put back (listed in the
/// failures).
async fn restore_from_managed_fields(
    client: &kube::Client,
    known: &BTreeMap<String, NativeEntry>,
    report: &mut UninstallReport,
) -> bool {
    let services: Api<Service> = Api::all(client.clone());
    let listed = retry("list the Services (ipMode written by hairpin)", || async {
        services
            .list(&ListParams::default())
            .await
            .map_err(|e| Error::kube("list Services", e))
    })
    .await;
    let list = match listed {
        Ok(list) => list,
        Err(err) => {
            step_failed(report, err);
            return false;
        }
    };
    let mut all_restored = true;
    for svc in list {
        let key = format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any());
        let modes = proxy_ips_of_hairpin(&svc);
        if modes.is_empty() || known.contains_key(&key) {
            continue;
        }
        let Some(uid) = svc.metadata.uid.clone() else {
            continue;
        };
        let service = ObjectRef::new(svc.namespace().unwrap_or_default(), svc.name_any());
        let result = retry(
            "put a load balancer's ipMode back (managed fields)",
            || async {
                match native::restore_ip_modes(client, &service, &uid, &modes).await {
                    Ok(native::Written::NotApplied(_)) => Err(Error::NotApplied(format!(
                        "put ipMode back on Service {service}"
                    ))),
                    Ok(written) => Ok(written),
                    Err(e) => Err(Error::kube(
                        format!("put ipMode back on Service {service}"),
                        e,
                    )),
                }
            },
        )
        .await;
        match result {
            Ok(native::Written::Applied(_)) => {
                tracing::warn!(service = %key, "the native cure's record did not list this load balancer: its ipMode Proxy, written by hairpin's field manager, is put back to the default");
                report.ip_modes_restored.push(key.clone());
                report.ip_modes_from_managed_fields.push(key);
            }
            Ok(_) => {}
            Err(err) => {
                all_restored = false;
                step_failed(report, err);
            }
        }
    }
    all_restored
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use serde_json::json;

    fn service(
        manager: &str,
        subresource: Option<&str>,
        modes: &[(&str, Option<&str>)],
    ) -> Service {
        let mut svc = Service::default();
        svc.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            subresource: subresource.map(Into::into),
            fields_v1: Some(FieldsV1(
                json!({"f:status": {"f:loadBalancer": {"f:ingress": {}}}}),
            )),
            ..ManagedFieldsEntry::default()
        }]);
        svc.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(
                    modes
                        .iter()
                        .map(|(ip, mode)| LoadBalancerIngress {
                            ip: Some((*ip).into()),
                            ip_mode: mode.map(Into::into),
                            ..LoadBalancerIngress::default()
                        })
                        .collect(),
                ),
            }),
            ..ServiceStatus::default()
        });
        svc
    }

    #[test]
    fn only_proxy_that_hairpins_field_manager_wrote_goes_back_to_the_default() {
        let ours = service(
            FIELD_MANAGER,
            Some("status"),
            &[("203.0.113.1", Some("Proxy")), ("203.0.113.2", Some("VIP"))],
        );
        assert_eq!(
            proxy_ips_of_hairpin(&ours),
            BTreeMap::from([("203.0.113.1".to_owned(), None)])
        );
        // The cloud controller wrote the list last: its Proxy is its own.
        let theirs = service(
            "cloud-controller-manager",
            Some("status"),
            &[("203.0.113.1", Some("Proxy"))],
        );
        assert!(proxy_ips_of_hairpin(&theirs).is_empty());
        // hairpin's manager on the spec (a Service it created), not the status.
        let spec = service(FIELD_MANAGER, None, &[("203.0.113.1", Some("Proxy"))]);
        assert!(proxy_ips_of_hairpin(&spec).is_empty());
    }
}
