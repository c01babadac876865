//! Reflector stores of exactly the objects the planner reads, and the snapshot built from them.
//!
//! Every store is fed by `watcher(..)` with [`WatchBackoff`], so API errors and dropped watches
//! are retried (and re-listed after 410 Gone) without ever ending the task; each event pokes a
//! [`Notify`](tokio::sync::Notify) that drives the debounced re-plan. The Gateway API is optional: a 404 on its
//! group means "not installed" (the store stays empty and counts as synced), probed again
//! every minute so installing the CRDs later is picked up.

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use hairpin_planner::ClusterSnapshot;
use hairpin_planner::DnsMode;
use hairpin_planner::SourceKind;
use hairpin_planner::hostnames;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use tokio::sync::watch;

use crate::context::Context;
use crate::crd::Hairpin;

mod node_probes;
mod nodes;
mod receivers;
mod snapshot;
mod streams;

pub use streams::WatchBackoff;
use streams::{
    Ctx, config_maps, custom_sources, feed, optional, optional_versions, required,
    required_slimmed, slim, slim_ingress, slim_service, tls_routes, watch_error_label,
};

pub(crate) use node_probes::{NodeProbeLeases, list_node_reports};
pub(crate) use nodes::NodeVersions;
pub(crate) use nodes::list as list_nodes;

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
    /// Starts every watch (as tasks that live until `stop` resolves), reading with the
    /// context's client (reads pass its write gate) what its planner settings name; the
    /// context's change signal is notified on every event.
    pub fn start(
        context: &Arc<Context>,
        stop: impl Future<Output = ()> + Send + Clone + 'static,
    ) -> Self {
        let (client, config) = (&context.client, &context.planner);
        let ctx = Ctx {
            context: context.clone(),
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

#[cfg(test)]
mod tests;
