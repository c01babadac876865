//! The planner's input: a point-in-time copy of the cluster objects it reads.

use std::sync::Arc;

use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use gateway_api::tlsroutes::TlsRoute;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::external_dns::DnsEndpoint;
use crate::sources::CustomSource;
use crate::verify::Resolutions;

/// Every object the planner looks at. The controller fills it from reflector stores, `hairpin
/// plan` from YAML files; [`crate::desired`] never sees anything else.
///
/// Order does not matter: the planner sorts what it emits. Objects of other namespaces than
/// the configured ones are fine (ConfigMaps are looked up by namespace and name).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterSnapshot {
    /// All Services (load balancers, and our own hairpin Services from a previous run).
    pub services: Vec<Service>,
    /// `networking.k8s.io/v1` Ingresses, shared with the controller's cache rather than
    /// copied: at 10,000 Ingresses a copy per reconcile was the largest allocation of the
    /// controller process.
    pub ingresses: Vec<Arc<Ingress>>,
    /// `networking.k8s.io/v1` IngressClasses.
    pub ingress_classes: Vec<IngressClass>,
    /// Gateway API `Gateway`s.
    pub gateways: Vec<Gateway>,
    /// Gateway API `HTTPRoute`s.
    pub http_routes: Vec<HttpRoute>,
    /// Gateway API `GRPCRoute`s.
    pub grpc_routes: Vec<GrpcRoute>,
    /// Gateway API `TLSRoute`s (`v1`; `v1alpha2`/`v1alpha3` objects read into the same type).
    pub tls_routes: Vec<TlsRoute>,
    /// ConfigMaps: CoreDNS (`coredns`, `rke2-coredns-rke2-coredns`...), `coredns-custom`,
    /// `node-local-dns`, and our own `hairpin-routes`.
    pub config_maps: Vec<ConfigMap>,
    /// Namespaces (metadata only is read: their labels, for `--hostname-namespaces` label
    /// selectors). The controller watches them only when such a selector is configured.
    pub namespaces: Vec<Namespace>,
    /// Objects of the CRD hostname sources that are installed (Traefik `IngressRoute` and
    /// `IngressRouteTCP`, Istio `Gateway`, Contour `HTTPProxy`).
    pub custom_sources: Vec<CustomSource>,
    /// external-dns `DNSEndpoint`s in our namespace (hairpin's own, in `--dns-mode
    /// external-dns`; the controller watches them only in that mode).
    pub dns_endpoints: Vec<DnsEndpoint>,
    /// What the upstream DNS answered for the hostnames, as the controller's resolver saw it
    /// ([`crate::verify`]); empty when nothing was resolved (`hairpin plan -f`). A name absent
    /// here is not resolved yet.
    pub resolutions: Resolutions,
}

/// Namespace and name of an object; displayed as `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ObjectRef {
    /// The object's namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

impl ObjectRef {
    /// Builds a reference from a namespace and a name.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The reference of an object, from its metadata (missing fields are empty).
    pub fn from_meta(meta: &ObjectMeta) -> Self {
        Self::new(
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        )
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

impl ClusterSnapshot {
    /// The ConfigMap `namespace/name`, if present.
    pub fn config_map(&self, namespace: &str, name: &str) -> Option<&ConfigMap> {
        self.config_maps.iter().find(|cm| {
            cm.metadata.namespace.as_deref() == Some(namespace)
                && cm.metadata.name.as_deref() == Some(name)
        })
    }

    /// The Service `namespace/name`, if present.
    pub fn service(&self, namespace: &str, name: &str) -> Option<&Service> {
        self.services.iter().find(|s| {
            s.metadata.namespace.as_deref() == Some(namespace)
                && s.metadata.name.as_deref() == Some(name)
        })
    }
}
