//! The planner's input: a point-in-time copy of the cluster objects it reads.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use gateway_api::tlsroutes::TlsRoute;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Service};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// What the receiving side of each load balancer is read from ([`crate::receivers`]):
    /// workloads and the receivers' custom resources.
    pub receivers: crate::workloads::ReceiverObjects,
    /// The Nodes, as far as the native cure's gate reads them ([`crate::nodes`]: their names
    /// and `status.nodeInfo` versions); empty when they are not read (the controller watches
    /// them from its first native cure on).
    pub nodes: Vec<Node>,
    /// The node agents' reports of their proofs of the native cure ([`crate::node_probes`]):
    /// `None` where no node agent reports (the controller's probe and the Nodes' gate decide),
    /// else one per node agent's Lease.
    pub node_probes: Option<Vec<crate::node_probes::NodeReport>>,
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

/// A `DNSEndpoint` (external-dns's `charts/external-dns/crds/dnsendpoint.yaml`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsEndpoint {
    /// `externaldns.k8s.io/v1alpha1`.
    pub api_version: String,
    /// `DNSEndpoint`.
    pub kind: String,
    /// Standard metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The records.
    #[serde(default)]
    pub spec: DnsEndpointSpec,
    /// Written by external-dns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DnsEndpointStatus>,
}

/// `spec` of a `DNSEndpoint`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsEndpointSpec {
    /// The records, one per (name, record type).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<Endpoint>,
}

/// One record set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// The hostname (a wildcard `*.example.com` is published as a DNS wildcard record).
    pub dns_name: String,
    /// The addresses; never empty in what hairpin publishes.
    #[serde(default)]
    pub targets: Vec<String>,
    /// `A` or `AAAA`.
    #[serde(default)]
    pub record_type: String,
    /// TTL in seconds.
    #[serde(default, rename = "recordTTL", skip_serializing_if = "Option::is_none")]
    pub record_ttl: Option<i64>,
    /// external-dns's own labels; hairpin sets none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Provider-specific settings; hairpin sets none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_specific: Vec<ProviderSpecific>,
}

/// A provider-specific setting of an endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderSpecific {
    /// Name.
    pub name: String,
    /// Value.
    #[serde(default)]
    pub value: String,
}

/// `status` of a `DNSEndpoint`, written by external-dns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsEndpointStatus {
    /// The `metadata.generation` external-dns last processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl DnsEndpoint {
    /// Namespace and name.
    pub fn object_ref(&self) -> ObjectRef {
        ObjectRef::from_meta(&self.metadata)
    }

    /// Whether external-dns has processed the current spec (`status.observedGeneration >=
    /// metadata.generation`); `None` when the object carries no generation (not read from an
    /// API server).
    pub fn processed(&self) -> Option<bool> {
        let generation = self.metadata.generation?;
        let observed = self.status.as_ref().and_then(|s| s.observed_generation);
        Some(observed.is_some_and(|o| o >= generation))
    }

    /// True when `self` (live) carries everything `desired` sets: its labels and annotations
    /// and exactly its endpoints.
    pub fn matches(&self, desired: &DnsEndpoint) -> bool {
        let subset = |want: &Option<BTreeMap<String, String>>,
                      have: &Option<BTreeMap<String, String>>| {
            want.iter()
                .flatten()
                .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
        };
        subset(&desired.metadata.labels, &self.metadata.labels)
            && subset(&desired.metadata.annotations, &self.metadata.annotations)
            && self.spec == desired.spec
    }
}

/// The CRD kinds hairpin reads hostnames from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceKind {
    /// Traefik `IngressRoute` (`traefik.io` and the legacy `traefik.containo.us`).
    TraefikIngressRoute,
    /// Traefik `IngressRouteTCP`.
    TraefikIngressRouteTcp,
    /// Istio `Gateway` (`networking.istio.io`).
    IstioGateway,
    /// Contour `HTTPProxy` (`projectcontour.io`).
    ContourHttpProxy,
}

/// One object of a CRD hostname source.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomSource {
    /// Which kind.
    pub kind: SourceKind,
    /// Its metadata.
    pub metadata: ObjectMeta,
    /// Its `spec` (`Null` when absent).
    pub spec: Value,
    /// Its `status` (`Null` when absent).
    pub status: Value,
}

/// What the upstream DNS answered for one name (for a wildcard: for a random label under it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "answer", rename_all = "kebab-case")]
pub enum Resolution {
    /// The A and AAAA records, after following CNAMEs (empty: the name exists but has none).
    Addresses {
        /// Every address of both families, sorted.
        addresses: Vec<IpAddr>,
        /// The CNAME targets followed, in chain order (lowercase, no trailing dot).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        cnames: Vec<String>,
    },
    /// The name does not exist.
    NxDomain,
    /// No answer: a timeout, `SERVFAIL`, a refused query...
    Failed {
        /// What went wrong, for people.
        error: String,
    },
}

/// The answers the resolver has, by hostname as planned (`*.example.com` for a wildcard). Shared,
/// not copied, between the controller's cache and each reconcile's snapshot.
pub type Resolutions = Arc<BTreeMap<String, Resolution>>;

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
