//! Reflector stores of exactly the objects the planner reads, and the snapshot built from them.
//!
//! Every store is fed by `watcher(..)` with [`WatchBackoff`], so API errors and dropped watches
//! are retried (and re-listed after 410 Gone) without ever ending the task; each event pokes a
//! [`Notify`] that drives the debounced re-plan. The Gateway API is optional: a 404 on its
//! group means "not installed" (the store stays empty and counts as synced), probed again
//! every minute so installing the CRDs later is picked up.

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use gateway_api::tlsroutes::TlsRoute;
use hairpin_planner::ClusterSnapshot;
use hairpin_planner::DnsMode;
use hairpin_planner::PlannerConfig;
use hairpin_planner::hostnames;
use hairpin_planner::sources::{SOURCE_APIS, TLS_ROUTE_VERSIONS, tls_route_from_value};
use hairpin_planner::{CustomSource, SourceKind};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};

use crate::crd::Hairpin;
use crate::error::{is_not_found, kube_error_label};
use crate::metrics::Metrics;

mod nodes;
mod receivers;

pub(crate) use nodes::NodeVersions;

pub use receivers::CONFIG_MAP_GRACE as RECEIVER_CONFIG_MAP_GRACE;

/// How often an absent Gateway API is probed again.
pub const GATEWAY_API_REPROBE: Duration = Duration::from_secs(60);

/// Sync state of one store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncState {
    /// Initial list not done yet.
    Pending,
    /// Listed (or the API is not installed).
    Synced,
}

/// One cache: its store and whether it has synced.
#[derive(Clone)]
pub struct Cache<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    synced: watch::Receiver<SyncState>,
    /// The API is served (false for an optional kind whose CRD is absent).
    served: Arc<std::sync::atomic::AtomicBool>,
    /// What it holds, for messages (`Ingress`, `ConfigMap kube-system/coredns`).
    what: String,
    /// The last error of its list or watch, cleared once it lists.
    error: ErrorSlot,
}

/// The last error of one cache's watch.
type ErrorSlot = Arc<std::sync::Mutex<Option<String>>>;

impl<K> std::fmt::Debug for Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("synced", &*self.synced.borrow())
            .finish_non_exhaustive()
    }
}

impl<K> Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn objects(&self) -> Vec<K> {
        self.store.state().iter().map(|o| (**o).clone()).collect()
    }

    /// The cached objects themselves, shared rather than copied.
    fn shared(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    fn is_synced(&self) -> bool {
        *self.synced.borrow() == SyncState::Synced
    }

    fn unsynced(&self) -> Option<Unsynced> {
        (!self.is_synced()).then(|| Unsynced {
            what: self.what.clone(),
            error: self
                .error
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        })
    }

    async fn wait_synced(&self) {
        let mut rx = self.synced.clone();
        let _ = rx.wait_for(|s| *s == SyncState::Synced).await;
    }
}

/// A cache that has not listed yet, and why when its list or watch failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsynced {
    /// What it holds: a kind (`Ingress`), or a ConfigMap (`ConfigMap kube-system/coredns`).
    pub what: String,
    /// The last error of its list or watch (retried with backoff), if any.
    pub error: Option<String>,
}

impl std::fmt::Display for Unsynced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.error {
            Some(error) => write!(f, "{}: {error}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

/// The controller's caches.
#[derive(Clone)]
pub struct Caches {
    services: Cache<Service>,
    ingresses: Cache<Ingress>,
    ingress_classes: Cache<IngressClass>,
    gateways: Cache<Gateway>,
    http_routes: Cache<HttpRoute>,
    grpc_routes: Cache<GrpcRoute>,
    tls_routes: Cache<DynamicObject>,
    /// The CRD hostname sources (Traefik, Istio, Contour), each watched only while served.
    custom_sources: Vec<(SourceKind, Cache<DynamicObject>)>,
    config_maps: Vec<Cache<ConfigMap>>,
    /// Namespace metadata, watched only when `--hostname-namespaces` is a label selector.
    namespaces: Option<Cache<PartialObjectMeta<Namespace>>>,
    /// EndpointSlices in our namespace: the ready proxy endpoints of each hairpin Service.
    endpoint_slices: Cache<EndpointSlice>,
    /// Our Hairpin objects, in every namespace. Their changes re-plan too: a tenant allowed
    /// to delete or edit one (they live in the load balancer's namespace) would otherwise
    /// leave it gone or wrong until the next unrelated event or the resync. hairpin's own
    /// status writes re-plan once and change nothing (the status is written only when it
    /// differs).
    hairpins: Cache<Hairpin>,
    /// `DNSEndpoint`s in our namespace, watched only in `--dns-mode external-dns` and while
    /// external-dns's CRD is installed. Their changes re-plan: external-dns writing their
    /// status, or someone changing or deleting one.
    dns_endpoints: Option<Cache<DynamicObject>>,
    /// What the receivers of the load balancers are read from (issue 31): workloads, the
    /// receivers' custom resources, and the ConfigMaps they name.
    receivers: receivers::Receivers,
}

impl Caches {
    /// Starts every watch (as tasks that live until `stop` resolves). `changed` is notified on
    /// every event.
    pub fn start(
        client: &kube::Client,
        config: &PlannerConfig,
        changed: Arc<Notify>,
        metrics: Metrics,
        stop: impl Future<Output = ()> + Send + Clone + 'static,
    ) -> Self {
        let ctx = Ctx {
            changed,
            metrics,
            failing: Arc::default(),
        };
        let config_maps = config_maps(client, config, &ctx, &stop);
        let receivers = receivers::Receivers::start(
            client,
            &ctx,
            futures::FutureExt::shared(futures::FutureExt::boxed(stop.clone())),
            config.read_config_maps().into_iter().collect(),
        );
        Self {
            receivers,
            services: required_slimmed(
                Api::all(client.clone()),
                watcher::Config::default(),
                "Service",
                &ctx,
                stop.clone(),
                slim_service,
            ),
            ingresses: {
                let annotations = hostnames::ingress_annotations(config);
                required_slimmed(
                    Api::all(client.clone()),
                    watcher::Config::default(),
                    "Ingress",
                    &ctx,
                    stop.clone(),
                    move |ingress| slim_ingress(ingress, &annotations),
                )
            },
            ingress_classes: required(
                Api::all(client.clone()),
                watcher::Config::default(),
                "IngressClass",
                &ctx,
                stop.clone(),
            ),
            gateways: optional(Api::all(client.clone()), "Gateway", &ctx, stop.clone()),
            http_routes: optional(Api::all(client.clone()), "HTTPRoute", &ctx, stop.clone()),
            grpc_routes: optional(Api::all(client.clone()), "GRPCRoute", &ctx, stop.clone()),
            namespaces: config
                .admission
                .hostname_namespaces
                .needs_namespaces()
                .then(|| {
                    // Metadata only: their labels are all the planner reads.
                    required(
                        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
                        watcher::Config::default(),
                        "Namespace",
                        &ctx,
                        stop.clone(),
                    )
                }),
            endpoint_slices: required(
                Api::namespaced(client.clone(), &config.namespace),
                watcher::Config::default(),
                "EndpointSlice",
                &ctx,
                stop.clone(),
            ),
            hairpins: optional(Api::all(client.clone()), "Hairpin", &ctx, stop.clone()),
            dns_endpoints: (config.dns_mode == DnsMode::ExternalDns).then(|| {
                let resource = crate::dns_endpoints::api_resource();
                optional_versions(
                    vec![crate::dns_endpoints::api(client, &config.namespace)],
                    reflector::store::Writer::new(resource),
                    "DNSEndpoint",
                    &ctx,
                    stop.clone(),
                )
            }),
            custom_sources: custom_sources(client, &ctx, &stop),
            tls_routes: tls_routes(client, &ctx, stop),
            config_maps,
        }
    }

    /// True once every cache has synced.
    pub fn is_synced(&self) -> bool {
        self.services.is_synced()
            && self.ingresses.is_synced()
            && self.ingress_classes.is_synced()
            && self.gateways.is_synced()
            && self.http_routes.is_synced()
            && self.grpc_routes.is_synced()
            && self.tls_routes.is_synced()
            && self.custom_sources.iter().all(|(_, c)| c.is_synced())
            && self.config_maps.iter().all(Cache::is_synced)
            && self.namespaces.as_ref().is_none_or(Cache::is_synced)
            && self.endpoint_slices.is_synced()
            && self.hairpins.is_synced()
            && self.dns_endpoints.as_ref().is_none_or(Cache::is_synced)
            && self.receivers.is_synced()
    }

    /// The caches that have not listed yet (empty once synced), each with its last error.
    pub fn unsynced(&self) -> Vec<Unsynced> {
        [
            self.services.unsynced(),
            self.ingresses.unsynced(),
            self.ingress_classes.unsynced(),
            self.gateways.unsynced(),
            self.http_routes.unsynced(),
            self.grpc_routes.unsynced(),
            self.tls_routes.unsynced(),
            self.namespaces.as_ref().and_then(Cache::unsynced),
            self.endpoint_slices.unsynced(),
            self.hairpins.unsynced(),
            self.dns_endpoints.as_ref().and_then(Cache::unsynced),
        ]
        .into_iter()
        .chain(self.config_maps.iter().map(Cache::unsynced))
        .flatten()
        .chain(self.receivers.unsynced())
        .collect()
    }

    /// Resolves once every cache has synced, or once their tasks ended (shutdown; see
    /// `is_synced`).
    pub async fn wait_synced(&self) {
        self.services.wait_synced().await;
        self.ingresses.wait_synced().await;
        self.ingress_classes.wait_synced().await;
        self.gateways.wait_synced().await;
        self.http_routes.wait_synced().await;
        self.grpc_routes.wait_synced().await;
        self.tls_routes.wait_synced().await;
        for (_, cache) in &self.custom_sources {
            cache.wait_synced().await;
        }
        for cm in &self.config_maps {
            cm.wait_synced().await;
        }
        if let Some(namespaces) = &self.namespaces {
            namespaces.wait_synced().await;
        }
        self.endpoint_slices.wait_synced().await;
        self.hairpins.wait_synced().await;
        if let Some(endpoints) = &self.dns_endpoints {
            endpoints.wait_synced().await;
        }
        self.receivers.wait_synced().await;
    }

    /// Follows the ConfigMaps the receivers of `snapshot`'s load balancers name (watched by
    /// name, started and stopped as the workloads change); returns those just named that have
    /// not listed yet: a plan made before they list would not see their setting (a receiver
    /// that requires PROXY would look unknown, and a load balancer hairpinned for it would
    /// lose its cure for a moment).
    pub fn follow_receivers(&self, snapshot: &ClusterSnapshot) -> Vec<String> {
        self.receivers.follow(snapshot)
    }

    /// Whether external-dns's `DNSEndpoint` CRD is served: `None` outside `--dns-mode
    /// external-dns` (not watched).
    pub fn dns_endpoints_served(&self) -> Option<bool> {
        self.dns_endpoints
            .as_ref()
            .map(|c| c.served.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The Gateway API kinds whose CRD was not installed when the caches synced (an absent
    /// Hairpin CRD is said by the status writer, with what to install).
    pub fn absent_kinds(&self) -> Vec<&'static str> {
        let absent = |served: &Arc<std::sync::atomic::AtomicBool>| {
            !served.load(std::sync::atomic::Ordering::Relaxed)
        };
        [
            ("Gateway", absent(&self.gateways.served)),
            ("HTTPRoute", absent(&self.http_routes.served)),
            ("GRPCRoute", absent(&self.grpc_routes.served)),
            ("TLSRoute", absent(&self.tls_routes.served)),
        ]
        .into_iter()
        .filter_map(|(kind, absent)| absent.then_some(kind))
        .collect()
    }

    /// The cached Hairpin objects; `None` while their CRD is not installed.
    pub fn hairpins(&self) -> Option<Vec<Hairpin>> {
        self.hairpins
            .served
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| self.hairpins.objects())
    }

    /// Ready endpoints of the Service `name` in our namespace (an endpoint without a `ready`
    /// condition counts as ready, as the EndpointSlice API says).
    pub fn ready_endpoints(&self, name: &str) -> i32 {
        let count = self
            .endpoint_slices
            .store
            .state()
            .iter()
            .filter(|slice| {
                slice
                    .labels()
                    .get("kubernetes.io/service-name")
                    .map(String::as_str)
                    == Some(name)
            })
            .flat_map(|slice| &slice.endpoints)
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
            .count();
        i32::try_from(count).unwrap_or(i32::MAX)
    }

    /// A point-in-time view of everything cached (the Ingresses are the cache's own, shared;
    /// a store replaces an object on change rather than mutating it).
    pub fn snapshot(&self) -> ClusterSnapshot {
        let services = self.services.objects();
        let lb_namespaces: std::collections::BTreeSet<&str> = services
            .iter()
            .filter(|s| s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer"))
            .filter_map(|s| s.metadata.namespace.as_deref())
            .collect();
        let receivers = self.receivers.objects(&lb_namespaces);
        let mut config_maps: Vec<ConfigMap> =
            self.config_maps.iter().flat_map(Cache::objects).collect();
        config_maps.extend(self.receivers.config_maps());
        ClusterSnapshot {
            ingresses: self.ingresses.shared(),
            ingress_classes: self.ingress_classes.objects(),
            gateways: self.gateways.objects(),
            http_routes: self.http_routes.objects(),
            grpc_routes: self.grpc_routes.objects(),
            tls_routes: typed_tls_routes(&self.tls_routes),
            custom_sources: self
                .custom_sources
                .iter()
                .flat_map(|(kind, cache)| custom_objects(*kind, cache))
                .collect(),
            config_maps,
            namespaces: self
                .namespaces
                .iter()
                .flat_map(Cache::objects)
                .map(|ns| Namespace {
                    metadata: ns.metadata,
                    ..Namespace::default()
                })
                .collect(),
            dns_endpoints: self
                .dns_endpoints
                .iter()
                .flat_map(|cache| cache.store.state())
                .filter_map(|object| crate::dns_endpoints::typed(&object))
                .collect(),
            // The resolver's answers are not a cache of the API: the control loop adds them.
            resolutions: Default::default(),
            receivers,
            services,
        }
    }

    /// Number of cached Ingresses.
    pub fn ingress_count(&self) -> usize {
        self.ingresses.store.len()
    }
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches")
            .field("synced", &self.is_synced())
            .finish_non_exhaustive()
    }
}

#[derive(Clone)]
struct Ctx {
    changed: Arc<Notify>,
    metrics: Metrics,
    /// Failures by error label since the last success, shared by every watch: a condition
    /// (the API server unreachable, a permission missing) is logged once, not once per watch
    /// and retry.
    failing: Arc<std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>>,
}

impl Ctx {
    fn failed(&self, label: &'static str, kind: &'static str, err: &dyn std::fmt::Display) {
        self.metrics.count_error(label);
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

    fn succeeded(&self) {
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
fn slim<K: ResourceExt>(object: &mut K) {
    object.meta_mut().managed_fields = None;
    if let Some(annotations) = &mut object.meta_mut().annotations {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// [`slim`], but a Service keeps the one managedFields entry the native cure reads: who last
/// changed its status's `loadBalancer.ingress` (`hairpin_planner::native::ingress_writer`:
/// hairpin steps back from a status another writer set `ipMode: Proxy` on), its fields cut to
/// that path.
fn slim_service(service: &mut Service) {
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
fn slim_ingress(ingress: &mut Ingress, annotations: &[String]) {
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

fn required<K>(
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
fn required_slimmed<K>(
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
fn watch_error_label(err: &watcher::Error) -> &'static str {
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
async fn feed<K>(
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
                    ctx.changed.notify_one();
                }
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Ok(_) => ctx.changed.notify_one(),
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

fn set_error(slot: &ErrorSlot, error: Option<&dyn std::fmt::Display>) {
    *slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = error.map(ToString::to_string);
}

/// A cache of a typed CRD kind that may not be installed.
fn optional<K>(
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
fn tls_routes(
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
fn config_maps(
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
fn custom_sources(
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

/// The cached objects of one CRD hostname source, for the planner.
fn custom_objects(kind: SourceKind, cache: &Cache<DynamicObject>) -> Vec<CustomSource> {
    cache
        .store
        .state()
        .iter()
        .filter_map(|object| {
            let value = serde_json::to_value(&**object).ok()?;
            match CustomSource::from_value(kind, value) {
                Ok(source) => Some(source),
                Err(err) => {
                    tracing::warn!(kind = kind.kind(), error = %err, "skipping an object that does not parse");
                    None
                }
            }
        })
        .collect()
}

/// Converts cached TLSRoutes of whatever served version into the typed `v1` form.
fn typed_tls_routes(cache: &Cache<DynamicObject>) -> Vec<TlsRoute> {
    cache
        .store
        .state()
        .iter()
        .filter_map(|route| {
            let value = serde_json::to_value(&**route).ok()?;
            match tls_route_from_value(value) {
                Ok(route) => Some(route),
                Err(err) => {
                    tracing::warn!(error = %err, "skipping a TLSRoute that does not parse");
                    None
                }
            }
        })
        .collect()
}

/// Whether the API server serves `api`'s resource, asked through discovery. Listing an absent
/// CRD's objects answers a plain-text `404 page not found`, which the client logs as an error
/// body it cannot parse, every minute per kind; the discovery documents always answer.
async fn served<K>(api: &Api<K>) -> Result<bool, kube::Error>
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
fn optional_versions<K>(
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
                            ctx.changed.notify_one();
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hairpin_planner::{ClusterSnapshot, Plan, PlannerConfig, desired, hostnames, load};

    use super::slim_ingress;

    /// Ingresses that use every field the planner reads of one: TLS hosts, a wildcard, no
    /// status (matched through its class), the legacy class annotation, external-dns and
    /// ignore annotations; each with paths, backends, labels and managedFields.
    const MORE_INGRESSES: &str = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: legacy
  namespace: shop
  uid: 6f1c0d1e-0000-4000-8000-000000000001
  labels: {app: legacy}
  annotations:
    kubernetes.io/ingress.class: nginx
    external-dns.alpha.kubernetes.io/hostname: extra.example.com
    kubectl.kubernetes.io/last-applied-configuration: "{}"
    cert-manager.io/cluster-issuer: letsencrypt
    nginx.ingress.kubernetes.io/proxy-body-size: 16m
  managedFields:
    - {manager: kubectl, operation: Apply, apiVersion: networking.k8s.io/v1, fieldsType: FieldsV1, fieldsV1: {}}
spec:
  defaultBackend: {service: {name: legacy, port: {number: 80}}}
  tls: [{hosts: [legacy.example.com], secretName: legacy-tls}]
  rules:
    - host: legacy.example.com
      http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: legacy, port: {number: 80}}}}]}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: ignored
  namespace: shop
  annotations: {hairpin.io/ignore: "true"}
spec:
  ingressClassName: nginx
  rules:
    - host: ignored.example.com
      http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: x, port: {number: 80}}}}]}
status: {loadBalancer: {ingress: [{ip: 203.0.113.10}]}}
"#;

    /// `MORE_INGRESSES` again, with the ignore annotation under another prefix.
    const OTHER_PREFIX: &str = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: ignored-elsewhere
  namespace: shop
  annotations: {example.org/ignore: "true", nginx.ingress.kubernetes.io/ssl-redirect: "true"}
spec:
  ingressClassName: nginx
  rules: [{host: elsewhere.example.com}]
status: {loadBalancer: {ingress: [{ip: 203.0.113.10}]}}
"#;

    /// The example cluster, `MORE_INGRESSES` and `OTHER_PREFIX`, whole and slimmed.
    fn whole_and_slimmed(config: &PlannerConfig) -> (ClusterSnapshot, ClusterSnapshot) {
        let mut whole = ClusterSnapshot::default();
        load::load_yaml(
            &mut whole,
            "cluster.yaml",
            include_str!("../../../examples/cluster.yaml"),
        )
        .expect("the example cluster loads");
        load::load_yaml(&mut whole, "more.yaml", MORE_INGRESSES).expect("the Ingresses load");
        load::load_yaml(&mut whole, "other.yaml", OTHER_PREFIX).expect("the Ingress loads");
        assert!(whole.ingresses.len() >= 5, "{}", whole.ingresses.len());
        let annotations = hostnames::ingress_annotations(config);
        let mut slimmed = whole.clone();
        slimmed
            .ingresses
            .iter_mut()
            .for_each(|i| slim_ingress(Arc::make_mut(i), &annotations));
        (whole, slimmed)
    }

    /// The hostnames of a plan.
    fn planned(plan: &Plan) -> Vec<&str> {
        plan.load_balancers
            .iter()
            .flat_map(|lb| lb.hostnames.iter().map(|h| h.name.as_str()))
            .collect()
    }

    #[test]
    fn a_slimmed_ingress_plans_exactly_as_the_whole_one() {
        let config = PlannerConfig::default();
        let (whole, slimmed) = whole_and_slimmed(&config);

        let legacy = slimmed
            .ingresses
            .iter()
            .find(|i| i.metadata.name.as_deref() == Some("legacy"))
            .expect("the legacy Ingress");
        let spec = legacy.spec.as_ref().expect("a spec");
        assert!(legacy.metadata.labels.is_none() && legacy.metadata.managed_fields.is_none());
        assert!(spec.default_backend.is_none());
        assert!(spec.rules.iter().flatten().all(|r| r.http.is_none()));
        assert!(spec.tls.iter().flatten().all(|t| t.secret_name.is_none()));
        // The class and external-dns annotations stay; last-applied, cert-manager's and the
        // ingress controller's go.
        let annotations = legacy.metadata.annotations.as_ref().expect("annotations");
        let mut kept: Vec<&str> = annotations.keys().map(String::as_str).collect();
        kept.sort_unstable();
        assert_eq!(
            kept,
            [
                "external-dns.alpha.kubernetes.io/hostname",
                "kubernetes.io/ingress.class"
            ]
        );
        assert!(legacy.metadata.uid.is_some());
        let elsewhere = slimmed
            .ingresses
            .iter()
            .find(|i| i.metadata.name.as_deref() == Some("ignored-elsewhere"))
            .expect("the Ingress with another prefix");
        assert!(
            elsewhere.metadata.annotations.is_none(),
            "no annotation the planner reads: {:?}",
            elsewhere.metadata.annotations
        );

        let plan = desired(&whole, &config);
        let names = planned(&plan);
        for host in [
            "legacy.example.com",
            "extra.example.com",
            "elsewhere.example.com",
        ] {
            assert!(names.contains(&host), "{host} is planned: {names:?}");
        }
        assert!(!names.contains(&"ignored.example.com"), "{names:?}");
        assert_eq!(desired(&slimmed, &config), plan);
    }

    #[test]
    fn a_slimmed_ingress_keeps_the_ignore_annotation_of_the_configured_prefix() {
        let config = PlannerConfig {
            annotation_prefix: "example.org/".into(),
            ..PlannerConfig::default()
        };
        let (whole, slimmed) = whole_and_slimmed(&config);
        let plan = desired(&whole, &config);
        let names = planned(&plan);
        assert!(names.contains(&"ignored.example.com"), "{names:?}");
        assert!(!names.contains(&"elsewhere.example.com"), "{names:?}");
        assert_eq!(desired(&slimmed, &config), plan);
    }
}
