//! The native cure's status writes: `ipMode` set on a load balancer Service's status (the
//! status subresource, replaced with the resourceVersion just read, only the `ipMode` of the
//! IPs named changed) and read back from the API server's answer; put back as it was, only
//! where it is still `Proxy`; and the exact hand-over at uninstall.

use std::collections::BTreeMap;

use hairpin_planner::FIELD_MANAGER;
use hairpin_planner::ObjectRef;
use hairpin_planner::native::{IP_MODE_PROXY, NativeEntry, taken_over};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use kube::Api;
use kube::api::PostParams;

/// The status of `svc` with the `ipMode` of each IP in `modes` set as given (`None`: the
/// field removed, so that the API server's default applies). `None` when nothing changes.
pub fn with_ip_modes(svc: &Service, modes: &BTreeMap<String, Option<String>>) -> Option<Service> {
    let mut svc = svc.clone();
    let ingress = svc
        .status
        .as_mut()?
        .load_balancer
        .as_mut()?
        .ingress
        .as_mut()?;
    let mut changed = false;
    for entry in ingress.iter_mut() {
        let Some(mode) = entry.ip.as_ref().and_then(|ip| modes.get(ip)) else {
            continue;
        };
        if entry.ip_mode != *mode {
            entry.ip_mode.clone_from(mode);
            changed = true;
        }
    }
    changed.then_some(svc)
}

/// What a status write did, read back from the API server's answer.
#[derive(Debug)]
pub enum Written {
    /// Nothing to change (or the Service is gone, or another one now).
    Nothing,
    /// Written, and the answer holds every `ipMode` asked for.
    Applied(Box<Service>),
    /// Written, but the answer does not hold them (the server dropped or changed them).
    NotApplied(Box<Service>),
}

/// The IP entries of a Service's status.
pub(super) fn status_ingress(svc: &Service) -> &[LoadBalancerIngress] {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default()
}

/// Whether `svc`'s status says the `ipMode` of every IP of `modes` as asked (`None`: unset,
/// or the server's default `VIP`).
pub(super) fn holds(svc: &Service, modes: &BTreeMap<String, Option<String>>) -> bool {
    let ingress = status_ingress(svc);
    modes.iter().all(|(ip, wanted)| {
        ingress
            .iter()
            .filter(|e| e.ip.as_deref() == Some(ip))
            .all(|e| match wanted {
                Some(mode) => e.ip_mode.as_deref() == Some(mode),
                None => e.ip_mode.as_deref().is_none_or(|m| m == "VIP"),
            })
    })
}

/// Replaces the status of `service` (uid `uid`) with the `ipMode`s given, guarded by the
/// resourceVersion just read, and reads the answer back.
pub async fn write_ip_modes(
    client: &kube::Client,
    service: &ObjectRef,
    uid: &str,
    modes: &BTreeMap<String, Option<String>>,
) -> Result<Written, kube::Error> {
    replace_ip_modes(client, service, uid, |_| modes.clone()).await
}

/// Reads `service`, and when it is still the one with `uid`, replaces its status with the
/// `ipMode`s `modes` picks from what it reads, and reads the answer back.
pub(super) async fn replace_ip_modes(
    client: &kube::Client,
    service: &ObjectRef,
    uid: &str,
    modes: impl FnOnce(&Service) -> BTreeMap<String, Option<String>>,
) -> Result<Written, kube::Error> {
    let api: Api<Service> = Api::namespaced(client.clone(), &service.namespace);
    let Some(current) = api.get_opt(&service.name).await? else {
        return Ok(Written::Nothing);
    };
    if current.metadata.uid.as_deref() != Some(uid) {
        return Ok(Written::Nothing);
    }
    let modes = modes(&current);
    let Some(desired) = with_ip_modes(&current, &modes) else {
        return Ok(Written::Nothing);
    };
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    let stored = api.replace_status(&service.name, &params, &desired).await?;
    Ok(if holds(&stored, &modes) {
        Written::Applied(Box::new(stored))
    } else {
        Written::NotApplied(Box::new(stored))
    })
}

/// [`write_ip_modes`] for putting back: only IPs still at `Proxy` change (another writer that
/// set something else since wins).
pub async fn restore_ip_modes(
    client: &kube::Client,
    service: &ObjectRef,
    uid: &str,
    modes: &BTreeMap<String, Option<String>>,
) -> Result<Written, kube::Error> {
    replace_ip_modes(client, service, uid, |current| still_proxy(current, modes)).await
}

/// [`restore_ip_modes`] of a record's entry, unless another writer took the status over
/// ([`taken_over`]: it set `Proxy` itself, not merely touched the list): uninstall.
/// `forced`: the cure was forced native.
pub async fn restore_entry(
    client: &kube::Client,
    service: &ObjectRef,
    entry: &NativeEntry,
    forced: bool,
) -> Result<Written, kube::Error> {
    let modes: BTreeMap<String, Option<String>> = entry
        .original
        .iter()
        .map(|was| (was.ip.clone(), was.ip_mode.clone()))
        .collect();
    replace_ip_modes(client, service, &entry.uid, |current| {
        if taken_over(current, entry, forced).is_some() {
            return BTreeMap::new();
        }
        still_proxy(current, &modes)
    })
    .await
}

/// Of `modes`, the IPs `current` still says `Proxy` on.
pub(super) fn still_proxy(
    current: &Service,
    modes: &BTreeMap<String, Option<String>>,
) -> BTreeMap<String, Option<String>> {
    status_ingress(current)
        .iter()
        .filter(|e| e.ip_mode.as_deref() == Some(IP_MODE_PROXY))
        .filter_map(|e| {
            let ip = e.ip.clone()?;
            let mode = modes.get(&ip)?.clone();
            Some((ip, mode))
        })
        .collect()
}
