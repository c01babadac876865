//! How each store is fed: the watch streams (retried with [`WatchBackoff`]), the slimming of
//! what nothing reads, and the probing of optional APIs.

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hairpin_planner::SourceKind;
use hairpin_planner::sources::{SOURCE_APIS, TLS_ROUTE_VERSIONS};
use hairpin_planner::{LAST_APPLIED_ANNOTATION, PlannerConfig};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::context::Context;
use crate::error::{is_not_found, kube_error_label};

use super::{Cache, ErrorSlot, GATEWAY_API_REPROBE, SyncState, receivers};

#[derive(Clone)]
pub(super) struct Ctx {
    /// The change signal the watches poke, and the metrics they count in.
    pub(super) context: Arc<Context>,
    /// Failures by error label since the last success, shared by every watch: a condition
    /// (the API server unreachable, a permission missing) is logged once, not once per watch
    /// and retry.
    pub(super) failing: Arc<std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>>,
}

impl Ctx {
    pub(super) fn failed(
        &self,
        label: &'static str,
        kind: &'static str,
        err: &dyn std::fmt::Display,
    ) {
        self.context.metrics.count_error(label);
        let mut failing = self
            .failing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = failing.entry(label).or_insert(0);
        *count += 1;
        if *count == 1 {
            tracing::warn!(
                server = crate::client::api_server(),
                condition = label,
                kind,
                error = %err,
                backoff = WatchBackoff::DESCRIPTION,
                "Kubernetes API requests failing; every watch retries with backoff (logged again when they recover)"
            );
        } else {
            tracing::debug!(condition = label, kind, error = %err, "watch failed again");
        }
    }

    pub(super) fn succeeded(&self) {
        let mut failing = self
            .failing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !failing.is_empty() {
            let failures: u64 = failing.values().sum();
            tracing::info!(
                server = crate::client::api_server(),
                failures,
                "Kubernetes API requests succeed again"
            );
            failing.clear();
        }
    }
}

/// Drops what nothing reads of any object: its managedFields and the last-applied annotation
/// (together often most of a small object).
pub(super) fn slim<K: ResourceExt>(object: &mut K) {
    object.meta_mut().managed_fields = None;
    if let Some(annotations) = &mut object.meta_mut().annotations {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// [`slim`], but a Service keeps the one managedFields entry the native cure reads: who last
/// changed its status's `loadBalancer.ingress` (`hairpin_planner::native::ingress_writer`:
/// hairpin steps back from a status another writer set `ipMode: Proxy` on), its fields cut to
/// that path.
pub(super) fn slim_service(service: &mut Service) {
    let writer = hairpin_planner::native::ingress_writer(service).map(str::to_owned);
    let entry = service
        .metadata
        .managed_fields
        .as_ref()
        .and_then(|entries| {
            entries
                .iter()
                .find(|m| m.subresource.as_deref() == Some("status") && m.manager == writer)
        })
        .map(|m| ManagedFieldsEntry {
            manager: m.manager.clone(),
            subresource: m.subresource.clone(),
            fields_type: m.fields_type.clone(),
            // When that writer wrote it: the window a rebuild left without `Proxy`.
            time: m.time.clone(),
            fields_v1: Some(FieldsV1(serde_json::json!({
                "f:status": {"f:loadBalancer": {"f:ingress": {}}}
            }))),
            ..ManagedFieldsEntry::default()
        });
    slim(service);
    service.metadata.managed_fields = entry.filter(|_| writer.is_some()).map(|e| vec![e]);
}

/// Keeps of an Ingress only what the planner (`hostnames.rs`) and the controller read: its
/// name, namespace, uid (Events), the annotations in `annotations` (the planner's
/// [`hostnames::ingress_annotations`]); `spec.ingressClassName`, `spec.rules[].host`,
/// `spec.tls[].hosts`; and its status. Its paths and backends, TLS secret names, default
/// backend, labels and other annotations (ingress controllers' settings, cert-manager's) are
/// most of an Ingress, and at 10,000 Ingresses most of the controller's memory.
pub(super) fn slim_ingress(ingress: &mut Ingress, annotations: &[String]) {
    slim(ingress);
    ingress.metadata.labels = None;
    if let Some(kept) = &mut ingress.metadata.annotations {
        kept.retain(|key, _| annotations.contains(key));
        if kept.is_empty() {
            ingress.metadata.annotations = None;
        }
    }
    if let Some(spec) = &mut ingress.spec {
        spec.default_backend = None;
        for rule in spec.rules.iter_mut().flatten() {
            rule.http = None;
        }
        for tls in spec.tls.iter_mut().flatten() {
            tls.secret_name = None;
        }
    }
}

pub(super) fn required<K>(
    api: Api<K>,
    wc: watcher::Config,
    kind: &'static str,
    ctx: &Ctx,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Cache<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    required_slimmed(api, wc, kind, ctx, stop, slim)
}

/// A cache whose objects are passed through `trim` before they are stored.
pub(super) fn required_slimmed<K>(
    api: Api<K>,
    wc: watcher::Config,
    kind: &'static str,
    ctx: &Ctx,
    stop: impl Future<Output = ()> + Send + 'static,
    trim: impl FnMut(&mut K) + Send + 'static,
) -> Cache<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    let (store, writer) = reflector::store();
    let (tx, synced) = watch::channel(SyncState::Pending);
    let ctx = ctx.clone();
    let error = ErrorSlot::default();
    let slot = error.clone();
    tokio::spawn(async move {
        let run = feed(
            api,
            wc,
            writer,
            trim,
            &tx,
            &ctx,
            &slot,
            kind,
            watch_error_label,
            None,
        );
        tokio::select! {
            () = run => {}
            () = stop => {}
        }
    });
    Cache {
        store,
        synced,
        served: Arc::new(std::sync::atomic::AtomicBool::new(true)),
        what: kind.to_owned(),
        error,
    }
}

/// The retry delays of a failed watch: 0.5 s doubling to at most 2 s (with up to 25% jitter),
/// reset once the watch works again. kube-runtime's default grows to 30 s, so after an API
/// server outage of a few seconds the watches came back up to 30 s after the server did; at
/// 2 s the caches follow a change within about 2 s of the server answering again, for a few
/// requests a second against a server that is down (the failure is logged once, see `Ctx`).
#[derive(Clone, Debug)]
pub struct WatchBackoff {
    next: Duration,
    /// Varies the jitter between watches and retries.
    seed: u32,
}

impl WatchBackoff {
    /// First delay.
    pub const MIN: Duration = Duration::from_millis(500);
    /// Longest delay.
    pub const MAX: Duration = Duration::from_secs(2);
    /// For log lines.
    pub const DESCRIPTION: &'static str = "0.5s doubling to 2s, per watch";
}

impl Default for WatchBackoff {
    fn default() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Self {
            next: Self::MIN,
            seed,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        // A cheap pseudo-random jitter (xorshift), so watches do not retry in lockstep.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 17;
        self.seed ^= self.seed << 5;
        let jitter = delay.mul_f64(f64::from(self.seed % 1000) / 4000.0);
        Some(delay - jitter)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::MIN;
    }
}

/// The `errors_total` label of a watch error: the client error's label where there is one.
pub(super) fn watch_error_label(err: &watcher::Error) -> &'static str {
    match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => kube_error_label(e),
        _ => "watch_error",
    }
}

/// Feeds `writer` from a watch of `api`, each object passed through `trim` (retried with backoff, so it never ends): marks the
/// cache synced once listed, pokes `changed` on every later event, counts and logs errors
/// under `error_label` and keeps the last one in `error` until the next successful list.
#[allow(clippy::too_many_arguments)]
pub(super) async fn feed<K>(
    api: Api<K>,
    wc: watcher::Config,
    writer: reflector::store::Writer<K>,
    trim: impl FnMut(&mut K) + Send + 'static,
    tx: &watch::Sender<SyncState>,
    ctx: &Ctx,
    error: &ErrorSlot,
    kind: &'static str,
    error_label: fn(&watcher::Error) -> &'static str,
    refused: Option<&receivers::Refused>,
) where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    use futures::future::Either;
    let events = reflector::reflector(
        writer,
        watcher::watcher(api, wc)
            .modify(trim)
            .backoff(WatchBackoff::default()),
    );
    events
        .for_each(|event| {
            match event {
                Ok(watcher::Event::InitDone) => {
                    set_error(error, None);
                    ctx.succeeded();
                    if let Some(refused) = refused {
                        refused.listed();
                    }
                    tx.send_replace(SyncState::Synced);
                    ctx.context.changed.notify_one();
                }
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Ok(_) => ctx.context.changed.notify_one(),
                Err(err) => {
                    set_error(error, Some(&err));
                    let label = error_label(&err);
                    // A read hairpin's grants may not cover: listed (empty), tried again later.
                    if let Some(refused) = refused.filter(|_| label == "api_forbidden") {
                        let wait = refused.refused(tx, ctx, &err);
                        return Either::Right(tokio::time::sleep(wait));
                    }
                    ctx.failed(label, kind, &err);
                }
            }
            Either::Left(futures::future::ready(()))
        })
        .await;
}

pub(super) fn set_error(slot: &ErrorSlot, error: Option<&dyn std::fmt::Display>) {
    *slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = error.map(ToString::to_string);
}

/// A cache of a typed CRD kind that may not be installed.
pub(super) fn optional<K>(
    api: Api<K>,
    kind: &'static str,
    ctx: &Ctx,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Cache<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    optional_versions(
        vec![api],
        reflector::store::Writer::default(),
        kind,
        ctx,
        stop,
    )
}

/// TLSRoute is served as `v1` by recent Gateway API releases and only as `v1alpha3` or
/// `v1alpha2` by older ones (the schema the planner reads is the same): watch the newest
/// served version.
pub(super) fn tls_routes(
    client: &kube::Client,
    ctx: &Ctx,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Cache<DynamicObject> {
    let resource = |version: &str| {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("gateway.networking.k8s.io", version, "TLSRoute"),
            "tlsroutes",
        )
    };
    let apis = TLS_ROUTE_VERSIONS
        .iter()
        .map(|version| Api::all_with(client.clone(), &resource(version)))
        .collect();
    let writer = reflector::store::Writer::new(resource("v1"));
    optional_versions(apis, writer, "TLSRoute", ctx, stop)
}

/// One watch per ConfigMap the planner reads ([`PlannerConfig::read_config_maps`]), each by
/// name: hairpin's grants name these ConfigMaps, and a watch of a whole namespace would be
/// forbidden.
pub(super) fn config_maps(
    client: &kube::Client,
    config: &PlannerConfig,
    ctx: &Ctx,
    stop: &(impl Future<Output = ()> + Send + Clone + 'static),
) -> Vec<Cache<ConfigMap>> {
    let mut config_maps = Vec::new();
    for (namespace, name) in config.read_config_maps() {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        let wc = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut cache = required(api, wc, "ConfigMap", ctx, stop.clone());
        cache.what = format!("ConfigMap {namespace}/{name}");
        config_maps.push(cache);
    }
    config_maps
}

/// A cache per CRD hostname source. Each is probed through discovery like the Gateway API
/// kinds: an absent CRD costs no failing watch and no log line, and is probed again later.
pub(super) fn custom_sources(
    client: &kube::Client,
    ctx: &Ctx,
    stop: &(impl Future<Output = ()> + Send + Clone + 'static),
) -> Vec<(SourceKind, Cache<DynamicObject>)> {
    SOURCE_APIS
        .iter()
        .map(|api| {
            let resource = |version: &str| {
                ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk(api.group, version, api.kind),
                    api.plural,
                )
            };
            let apis = api
                .versions
                .iter()
                .map(|v| Api::all_with(client.clone(), &resource(v)))
                .collect();
            let writer = reflector::store::Writer::new(resource(api.versions[0]));
            (
                api.source,
                optional_versions(apis, writer, api.kind, ctx, stop.clone()),
            )
        })
        .collect()
}

/// Whether the API server serves `api`'s resource, asked through discovery. Listing an absent
/// CRD's objects answers a plain-text `404 page not found`, which the client logs as an error
/// body it cannot parse, every minute per kind; the discovery documents always answer.
pub(super) async fn served<K>(api: &Api<K>) -> Result<bool, kube::Error>
where
    K: Resource + Clone,
    K::DynamicType: Clone,
{
    let url = api.resource_url();
    // `/apis/<group>/<version>[/namespaces/<ns>]/<plural>`.
    let parts: Vec<&str> = url.trim_start_matches('/').split('/').collect();
    let (group, version, plural) = match parts.as_slice() {
        ["apis", group, version, plural] | ["apis", group, version, "namespaces", _, plural] => {
            (*group, *version, *plural)
        }
        _ => return Ok(true),
    };
    let group_version = format!("{group}/{version}");
    let group_version = group_version.as_str();
    let client = api.clone().into_client();
    let groups = client.list_api_groups().await?;
    let listed = groups
        .groups
        .iter()
        .any(|g| g.name == group && g.versions.iter().any(|v| v.version == version));
    if !listed {
        return Ok(false);
    }
    match client.list_api_group_resources(group_version).await {
        Ok(resources) => Ok(resources.resources.iter().any(|r| r.name == plural)),
        // Removed between the two reads.
        Err(err) if is_not_found(&err) => Ok(false),
        Err(err) => Err(err),
    }
}

/// Probes the candidate APIs in order and watches the first one served; when none is, the
/// cache counts as synced (empty) and they are probed again every minute.
pub(super) fn optional_versions<K>(
    apis: Vec<Api<K>>,
    writer: reflector::store::Writer<K>,
    kind: &'static str,
    ctx: &Ctx,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Cache<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    let store = writer.as_reader();
    let (tx, synced) = watch::channel(SyncState::Pending);
    let error = ErrorSlot::default();
    let slot = error.clone();
    let is_served = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ctx = ctx.clone();
    let served_flag = is_served.clone();
    tokio::spawn(async move {
        let probe_then_watch = async {
            let mut delay = Duration::from_secs(1);
            let api = 'probe: loop {
                let mut failed = None;
                for api in &apis {
                    match served(api).await {
                        Ok(true) => break 'probe api.clone(),
                        Ok(false) => {}
                        Err(err) => {
                            failed = Some(err);
                            break;
                        }
                    }
                }
                match failed {
                    None => {
                        set_error(&slot, None);
                        if *tx.borrow() == SyncState::Pending {
                            // One line for all absent kinds comes from `absent_kinds` once
                            // the caches synced (Gateway API absent is one condition).
                            tracing::debug!(
                                kind,
                                "kind not installed (no CRD); skipping it (checked again every minute)"
                            );
                            tx.send_replace(SyncState::Synced);
                            ctx.context.changed.notify_one();
                        }
                        tokio::time::sleep(GATEWAY_API_REPROBE).await;
                    }
                    Some(err) => {
                        set_error(&slot, Some(&err));
                        ctx.failed(kube_error_label(&err), kind, &err);
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(WatchBackoff::MAX);
                    }
                }
            };
            served_flag.store(true, std::sync::atomic::Ordering::Relaxed);
            // Errors of a watch that did start are all counted as `watch_error`.
            feed(
                api,
                watcher::Config::default(),
                writer,
                slim,
                &tx,
                &ctx,
                &slot,
                kind,
                |_| "watch_error",
                None,
            )
            .await;
        };
        tokio::select! {
            () = probe_then_watch => {}
            () = stop => {}
        }
    });
    Cache {
        store,
        synced,
        served: is_served,
        what: kind.to_owned(),
        error,
    }
}
