//! The snapshot the planner reads, built from the caches.

use gateway_api::tlsroutes::TlsRoute;
use hairpin_planner::sources::tls_route_from_value;
use hairpin_planner::{ClusterSnapshot, CustomSource, SourceKind};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::DynamicObject;

use super::{Cache, Caches};

impl Caches {
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
            // Filled by the reconciler from the native cure's Node watch.
            nodes: Vec::new(),
            node_probes: None,
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
