//! The `Hairpin` custom resource: one per hairpinned load balancer, in the load balancer
//! Service's namespace and with its name, written only by the controller. It is status only:
//! what hairpin did for that load balancer and whether it took effect
//! (`kubectl get hairpins -A`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The (empty) spec: a `Hairpin` is written by the controller alone and says nothing a user
/// sets; everything it holds is status.
// clippy reads the repeated `type_ = ...` of separate printer columns as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
// The group, version and plural are the planner's `HAIRPIN_API_GROUP`, `HAIRPIN_API_VERSION`
// and `HAIRPIN_PLURAL` (the attribute takes literals; a test holds them equal).
#[kube(
    group = "hairpin.io",
    version = "v1alpha1",
    kind = "Hairpin",
    plural = "hairpins",
    shortname = "hp",
    namespaced,
    status = "HairpinStatus",
    doc = "What hairpin did for one load balancer Service (same namespace and name) and whether it took effect. Written by the hairpin controller only.",
    printcolumn(
        name = "Proxy",
        type_ = "string",
        description = "PROXY protocol version the load balancer sends: v1, v2 or mixed",
        json_path = ".status.proxy"
    ),
    printcolumn(
        name = "Cure",
        type_ = "string",
        description = "native (ipMode: Proxy on the load balancer's status) or dns (the hostnames point at the hairpin proxy)",
        json_path = ".status.cure"
    ),
    printcolumn(
        name = "Hosts",
        type_ = "integer",
        description = "Hostnames redirected to the hairpin proxy",
        json_path = ".status.hostCount"
    ),
    printcolumn(
        name = "DNS",
        type_ = "string",
        description = "Written, Effective, NotEffective, Refused, or NotUsed on the native cure",
        json_path = ".status.dns"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        description = "Ready endpoints of the hairpin Service",
        json_path = ".status.readyEndpoints"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct HairpinSpec {}

/// What hairpin did for the load balancer, and whether it took effect.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HairpinStatus {
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// PROXY protocol version the load balancer sends: `v1`, `v2`, or `mixed` when its ports
    /// differ.
    #[serde(default)]
    pub proxy: String,
    /// Number of hostnames of the load balancer that hairpin cures (on the DNS cure redirected to the hairpin Service, on the native cure covered by `ipMode: Proxy`).
    #[serde(default)]
    pub host_count: i32,
    /// How this load balancer is cured: `native` (`ipMode: Proxy` on its Service's status, so
    /// that in-cluster traffic to its address crosses the real load balancer; no DNS rule) or
    /// `dns` (the cluster DNS answers its hostnames with the hairpin Service).
    #[serde(default)]
    pub cure: String,
    /// Where the native cure stands: `to-prove` (hairpin will set `ipMode: Proxy` and probe),
    /// `probing`, `proven`, `failed` (the status was put back), `not-needed` (a request
    /// without a header was answered before any change: nothing written) or `unsupported`
    /// (the API server drops `ipMode`). Absent: native is not tried
    /// (`--cure dns`, or the cloud controller computes `ipMode` itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_cure: Option<String>,
    /// Why this cure, in words.
    #[serde(default)]
    pub cure_reason: String,
    /// How the load balancer reaches the nodes: `proxy` (it terminates TCP and connects to the
    /// NodePorts or pods: native may be tried), `vip` (the nodes receive its address as
    /// destination: never native, which would cut off every client outside the cluster) or
    /// `unknown` (not tried by `--cure auto`; declare it with `hairpin.io/delivery`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<String>,
    /// DNS state in one word: `Written` (the rules are in place, not yet seen answering),
    /// `Effective` (the cluster DNS answers with the hairpin Service), `NotEffective` (it
    /// still does not, after the deadline), `Refused` (hairpin could not write them) or
    /// `NotUsed` (the load balancer is on the native cure: no DNS rule).
    #[serde(default)]
    pub dns: String,
    /// Ready endpoints (proxy pods) of the hairpin Service.
    #[serde(default)]
    pub ready_endpoints: i32,
    /// The hairpin Service, `namespace/name`.
    #[serde(default)]
    pub service: String,
    /// Its ClusterIP, once allocated.
    #[serde(default, rename = "clusterIP", skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<String>,
    /// The redirected hostnames and the objects they come from.
    #[serde(default)]
    pub hostnames: Vec<HostnameStatus>,
    /// Hostnames claimed for this load balancer that hairpin does not redirect, and why.
    #[serde(default)]
    pub refused: Vec<RefusedHostname>,
    /// Hostnames claimed for this load balancer that are not redirected because the upstream
    /// DNS does not resolve them to it (`--verify-hostnames=resolve`), with the answer seen.
    #[serde(default)]
    pub unverified: Vec<UnverifiedHostname>,
    /// How DNS is changed: `corefile` (a marked block in the Corefile), `custom` (a key in
    /// `coredns-custom`) or `external-dns` (`DNSEndpoint` objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_mode: Option<String>,
    /// The ConfigMaps holding the DNS rules, `namespace/name`.
    #[serde(default)]
    pub config_maps: Vec<String>,
    /// In `external-dns` mode, the `DNSEndpoint` objects holding the hostnames,
    /// `namespace/name` (external-dns publishes them; no ConfigMap is written).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_endpoints: Vec<String>,
    /// When hairpin last wrote this load balancer's DNS rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_write_time: Option<Time>,
    /// Seconds from that write until the cluster DNS answered with the hairpin Service, as
    /// measured by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagation_seconds: Option<f64>,
    /// The receiver of the load balancer's traffic (its ingress controller or Gateway) and
    /// its PROXY setting, when hairpin found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver: Option<ReceiverStatus>,
    /// `ServiceWritten`, `DNSWritten`, `DNSEffective`, `ProxyReady`, `NativeCure` and `Ready`;
    /// `ReceiverMismatch` while the load balancer and its receiver disagree.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The receiver of a load balancer and its PROXY setting (docs/receivers.md). Every field is
/// escaped (it quotes the tenant's objects).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReceiverStatus {
    /// The implementation: `ingress-nginx`, `Envoy Gateway`, `Traefik`... or `unknown
    /// receiver`.
    pub implementation: String,
    /// What receives the traffic, e.g. `Deployment ingress-nginx/ingress-nginx-controller`
    /// or `Gateway infra/public`.
    #[serde(default)]
    pub workload: String,
    /// What the receiver does with a connection without a PROXY header: `required` (refused),
    /// `optional` (served), `off` (the receiver expects no header) or `unknown`.
    pub proxy_protocol: String,
    /// The setting as read (`use-proxy-protocol: "true"`), or why it could not be read.
    #[serde(default)]
    pub setting: String,
    /// Where it was read, e.g. `ConfigMap ingress-nginx/ingress-nginx-controller`.
    #[serde(default)]
    pub read_from: String,
    /// Set while the load balancer and its receiver disagree about the PROXY protocol
    /// (broken for clients outside the cluster too): both settings and the fix, per port
    /// where they disagree on some ports only. hairpin keeps the cure it had in place and
    /// changes nothing else for those ports until they agree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<String>,
    /// Where the setting differs per port (`proxyProtocol: per-port`): each Service port's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ReceiverPortStatus>,
}

/// The receiver's PROXY setting on one port of the load balancer's Service (issue 38). Every
/// field is escaped.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReceiverPortStatus {
    /// The Service port.
    pub port: i32,
    /// The Service port's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `required`, `optional`, `off` or `unknown` on this port.
    pub proxy_protocol: String,
    /// The setting as read for this port (`entry point web (:8000) has no proxyProtocol`).
    #[serde(default)]
    pub setting: String,
    /// Where it was read.
    #[serde(default)]
    pub read_from: String,
}

/// One redirected hostname.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostnameStatus {
    /// The hostname, possibly a wildcard (`*.example.com`).
    pub name: String,
    /// Where it was found, e.g. `Ingress shop/web`.
    #[serde(default)]
    pub sources: Vec<String>,
}

/// One hostname hairpin refused to redirect.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RefusedHostname {
    /// The hostname as claimed.
    pub name: String,
    /// Why it is not redirected.
    pub reason: String,
    /// Where it was claimed.
    #[serde(default)]
    pub sources: Vec<String>,
}

/// One hostname not redirected because it is not proven to be this load balancer's.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnverifiedHostname {
    /// The hostname as claimed.
    pub name: String,
    /// Why, as a stable label: `not-resolved`, `resolves-elsewhere`, `no-address`,
    /// `nxdomain`, `resolve-failed` or `covers-others`.
    pub reason: String,
    /// The answer seen, e.g. `shop.example.com resolves to 198.51.100.9, not this load
    /// balancer`.
    pub message: String,
    /// Where it was claimed.
    #[serde(default)]
    pub sources: Vec<String>,
}

/// Condition types and the `status.dns` words.
pub mod condition {
    /// The hairpin Service is as hairpin wrote it (`False`, reason `WriteFight`, while another
    /// writer keeps changing it and hairpin's writes are backed off).
    pub const SERVICE_WRITTEN: &str = "ServiceWritten";
    /// The DNS rules for this load balancer are written.
    pub const DNS_WRITTEN: &str = "DNSWritten";
    /// The cluster DNS answers this load balancer's hostnames with the hairpin Service.
    pub const DNS_EFFECTIVE: &str = "DNSEffective";
    /// The hairpin Service has ready proxy endpoints and accepts connections.
    pub const PROXY_READY: &str = "ProxyReady";
    /// The native cure (`ipMode: Proxy`): `True` once the probe proved it, `Unknown` while it
    /// is to be proven or probing, `False` when it failed or is not tried (reasons
    /// [`ToProve`](super::cure_reason::TO_PROVE), [`Probing`](super::cure_reason::PROBING),
    /// [`Proven`](super::cure_reason::PROVEN), [`Failed`](super::cure_reason::FAILED),
    /// [`NotEligible`](super::cure_reason::NOT_ELIGIBLE),
    /// [`NotNeeded`](super::cure_reason::NOT_NEEDED),
    /// [`Unsupported`](super::cure_reason::UNSUPPORTED)).
    pub const NATIVE_CURE: &str = "NativeCure";
    /// In-cluster clients reach the load balancer as they should: on the DNS cure every
    /// condition above but `NativeCure`; on the native cure, `NativeCure`.
    pub const READY: &str = "Ready";
    /// Present (`True`, reason `Mismatch`) only while the load balancer and its receiver
    /// disagree about the PROXY protocol: broken for clients outside the cluster too; hairpin
    /// keeps its cure as it was and changes nothing else for it. Not part of `Ready` (the
    /// in-cluster clients hairpin serves are not affected).
    pub const RECEIVER_MISMATCH: &str = "ReceiverMismatch";
    /// `status.dns` of a load balancer on the native cure.
    pub const DNS_NOT_USED: &str = "NotUsed";
}

/// The reasons of the `NativeCure` condition.
pub mod cure_reason {
    /// hairpin will set `ipMode: Proxy` and probe; DNS stays meanwhile.
    pub const TO_PROVE: &str = "ToProve";
    /// `ipMode: Proxy` is set and the probe runs.
    pub const PROBING: &str = "Probing";
    /// The probe reached the load balancer through its address on every port.
    pub const PROVEN: &str = "Proven";
    /// The probe did not; the status was put back.
    pub const FAILED: &str = "Failed";
    /// Native is not tried: `--cure dns` (or the Service's cure annotation), hairpin's
    /// proxy-protocol annotation forces DNS, or the cloud controller computes `ipMode` itself.
    pub const NOT_ELIGIBLE: &str = "NotEligible";
    /// Every PROXY port answered a request without a header before any change: the load
    /// balancer needs no cure here; nothing was written.
    pub const NOT_NEEDED: &str = "NotNeeded";
    /// The API server dropped the `ipMode` hairpin wrote (older than 1.30, or the feature
    /// gate `LoadBalancerIPMode` off): not tried again until its version changes.
    pub const UNSUPPORTED: &str = "Unsupported";
    /// Some node's data plane is known not to honour `ipMode` (issue 45): every node keeps
    /// the DNS cure; the message names the nodes (`nativeCure: not-on-every-node`).
    pub const NOT_ON_EVERY_NODE: &str = "NotOnEveryNode";
}

/// The CRD as YAML, exactly as checked in under `charts/hairpin/crds/`.
///
/// # Panics
/// Never in practice: the CRD is a plain serializable value.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt as _;
    let yaml = serde_saphyr::to_string(&Hairpin::crd()).expect("a CRD serializes to YAML");
    format!(
        "# Generated by `hairpin crd` from crates/controller/src/crd.rs; do not edit.\n---\n{yaml}"
    )
}

#[cfg(test)]
mod tests {
    use kube::Resource;

    use super::Hairpin;

    #[test]
    fn the_kind_is_served_where_the_planner_and_the_doctor_look_for_it() {
        assert_eq!(Hairpin::group(&()), hairpin_planner::HAIRPIN_API_GROUP);
        assert_eq!(Hairpin::version(&()), hairpin_planner::HAIRPIN_API_VERSION);
        assert_eq!(Hairpin::plural(&()), hairpin_planner::HAIRPIN_PLURAL);
        assert_eq!(
            Hairpin::api_version(&()),
            format!(
                "{}/{}",
                hairpin_planner::HAIRPIN_API_GROUP,
                hairpin_planner::HAIRPIN_API_VERSION
            )
        );
    }
}
