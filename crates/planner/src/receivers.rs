//! The receiving side of a load balancer: which ingress controller or Gateway implementation
//! its Service sends the traffic to, and whether that receiver requires the PROXY header,
//! accepts a connection without one (optional), or does not expect it (off).
//!
//! Whether in-cluster traffic breaks is the receiver's decision: kube-proxy hands a client of
//! the load balancer's address straight to these pods, without a header. So a receiver that
//! requires the header tells hairpin the load balancer sends PROXY even where no annotation
//! says so; one that accepts a missing header needs no cure; one that does not expect the
//! header while the load balancer sends it is broken for everyone.
//!
//! The receiver is found from the Service: the workloads its selector picks (their images,
//! labels and arguments), the Gateway whose status address is the load balancer's, and its
//! GatewayClass's `controllerName`. Its setting is read where each project keeps it; every
//! key below cites the project's source. An implementation hairpin does not know is reported
//! as unknown, never guessed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde_json::Value;

use crate::name::normalize_address;
use crate::providers::{ProxyVersion, parse_bool};
use crate::snapshot::ClusterSnapshot;
use crate::workloads::{DynamicObject, Workload};

mod gateways;
mod ports;

/// The implementations hairpin reads the PROXY setting of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Implementation {
    /// ingress-nginx (kubernetes/ingress-nginx).
    IngressNginx,
    /// F5 NGINX Ingress Controller (nginx/kubernetes-ingress).
    F5NginxIngress,
    /// NGINX Gateway Fabric.
    NginxGatewayFabric,
    /// Envoy Gateway.
    EnvoyGateway,
    /// Traefik.
    Traefik,
    /// Contour.
    Contour,
    /// Istio ingress gateways (classic or Gateway API).
    Istio,
    /// Cilium's Ingress controller.
    CiliumIngress,
    /// Cilium's Gateway API implementation.
    CiliumGateway,
    /// kgateway.
    Kgateway,
    /// HAProxy Kubernetes Ingress Controller (haproxytech/kubernetes-ingress).
    HaproxyIngress,
    /// Kong.
    Kong,
    /// HAProxy Ingress (jcmoraisjr/haproxy-ingress).
    JcmoraisjrHaproxyIngress,
    /// Something else: the receiver's setting is not read.
    Unknown,
}

impl Implementation {
    /// The project's name, for reports.
    pub fn name(self) -> &'static str {
        match self {
            Implementation::IngressNginx => "ingress-nginx",
            Implementation::F5NginxIngress => "F5 NGINX Ingress Controller",
            Implementation::NginxGatewayFabric => "NGINX Gateway Fabric",
            Implementation::EnvoyGateway => "Envoy Gateway",
            Implementation::Traefik => "Traefik",
            Implementation::Contour => "Contour",
            Implementation::Istio => "Istio gateway",
            Implementation::CiliumIngress => "Cilium Ingress",
            Implementation::CiliumGateway => "Cilium Gateway API",
            Implementation::Kgateway => "kgateway",
            Implementation::HaproxyIngress => "HAProxy Kubernetes Ingress",
            Implementation::Kong => "Kong",
            Implementation::JcmoraisjrHaproxyIngress => "HAProxy Ingress (jcmoraisjr)",
            Implementation::Unknown => "unknown receiver",
        }
    }
}

/// What the receiver does with a connection that has no PROXY header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Requirement {
    /// The header is required: a connection without it is refused (in-cluster clients break).
    Required {
        /// The receiver accepts only PROXY v2 (every implementation read today accepts both).
        only_v2: bool,
    },
    /// A header is read when present and a connection without one is served.
    Optional,
    /// The receiver does not expect a header (it would read one as the request's first bytes).
    Off,
    /// The setting could not be read (the detail says why).
    Unknown,
    /// The setting differs from one port of the load balancer to another: see
    /// [`Receiver::ports`] (issue 38).
    PerPort,
}

impl Requirement {
    /// `required`, `optional`, `off` or `unknown`: the word the `Hairpin` status and the JSON
    /// plan show.
    pub fn as_str(self) -> &'static str {
        match self {
            Requirement::Required { .. } => "required",
            Requirement::Optional => "optional",
            Requirement::Off => "off",
            Requirement::Unknown => "unknown",
            Requirement::PerPort => "per-port",
        }
    }
}

/// The receiver of one load balancer and its PROXY setting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Receiver {
    /// Which implementation.
    pub implementation: Implementation,
    /// The workload the Service's selector picks, or the Gateway (`Kind namespace/name`).
    pub workload: String,
    /// Required, optional, off or unknown.
    pub requirement: Requirement,
    /// The setting as read (`use-proxy-protocol: "true"`), or why it could not be read.
    pub setting: String,
    /// Where it was read (`ConfigMap ingress-nginx/ingress-nginx-controller`).
    pub read_from: String,
    /// The setting per TCP port of the load balancer's Service, where it differs from one
    /// port to another (`requirement` is then [`Requirement::PerPort`]); empty where one
    /// setting holds for every port.
    pub ports: Vec<PortReceiver>,
}

/// The receiver's setting on one port of the load balancer's Service (issue 38): the Service
/// port, through its `targetPort` and the container port, to the receiver's listener (Traefik
/// entry point, Kong listener, Gateway listener).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortReceiver {
    /// The Service port.
    pub port: i32,
    /// The Service port's name, if any.
    pub name: Option<String>,
    /// Required, optional, off or unknown on this port.
    pub requirement: Requirement,
    /// The setting as read for this port (`entry point web (:8000): no proxyProtocol`), or why
    /// it could not be read.
    pub setting: String,
    /// Where it was read.
    pub read_from: String,
}

impl PortReceiver {
    /// `80 (web)`: the port as reports name it.
    pub fn label(&self) -> String {
        match &self.name {
            Some(name) => format!("{} ({name})", self.port),
            None => self.port.to_string(),
        }
    }
}

impl Receiver {
    /// The receiver as it is on Service port `port`: itself where one setting holds for every
    /// port, else that port's setting (unknown for a port it was not read for).
    pub fn on_port(&self, port: i32) -> Receiver {
        if self.ports.is_empty() {
            return self.clone();
        }
        let found = self.ports.iter().find(|p| p.port == port);
        Receiver {
            implementation: self.implementation,
            workload: self.workload.clone(),
            requirement: found.map_or(Requirement::Unknown, |p| p.requirement),
            setting: found.map_or_else(
                || format!("port {port} not read"),
                |p| format!("port {}: {}", p.label(), p.setting),
            ),
            read_from: found.map(|p| p.read_from.clone()).unwrap_or_default(),
            ports: Vec::new(),
        }
    }

    /// The PROXY version a load balancer in front of it must send: v1 unless the receiver
    /// accepts only v2; `None` unless the header is required.
    pub fn required_version(&self) -> Option<ProxyVersion> {
        match self.requirement {
            Requirement::Required { only_v2: true } => Some(ProxyVersion::V2),
            Requirement::Required { only_v2: false } => Some(ProxyVersion::V1),
            _ => None,
        }
    }

    /// `<setting> (<where>)`: what a report quotes. Not escaped (it quotes tenants' objects):
    /// escape it where it is printed.
    pub fn source(&self) -> String {
        if self.read_from.is_empty() {
            self.setting.clone()
        } else {
            format!("{} ({})", self.setting, self.read_from)
        }
    }

    /// One line for reports (`ingress-nginx Deployment a/b: PROXY required by ...`); not
    /// escaped, as [`Receiver::source`].
    pub fn describe(&self) -> String {
        let what = match self.requirement {
            Requirement::Required { .. } => "PROXY required by",
            Requirement::Optional => "PROXY optional by",
            Requirement::Off => "PROXY off by",
            Requirement::Unknown => "PROXY setting unknown:",
            Requirement::PerPort => "PROXY per port:",
        };
        if self.requirement == Requirement::PerPort {
            let ports: Vec<String> = self
                .ports
                .iter()
                .map(|p| {
                    let from = if p.read_from.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", p.read_from)
                    };
                    format!(
                        "{} {} by {}{from}",
                        p.label(),
                        p.requirement.as_str(),
                        p.setting
                    )
                })
                .collect();
            return format!(
                "{} {}: {what} {}",
                self.implementation.name(),
                self.workload,
                ports.join("; ")
            );
        }
        format!(
            "{} {}: {what} {}",
            self.implementation.name(),
            self.workload,
            self.source()
        )
    }
}

/// A setting as read: requirement, the setting's text, where it was read.
type Read = (Requirement, String, String);

fn read(requirement: Requirement, setting: impl Into<String>, from: impl Into<String>) -> Read {
    (requirement, setting.into(), from.into())
}

fn unknown(why: impl Into<String>) -> Read {
    read(Requirement::Unknown, why, "")
}

/// The reading of one Service port.
fn port_read(sp: &k8s_openapi::api::core::v1::ServicePort, read: Read) -> PortReceiver {
    let (requirement, setting, read_from) = read;
    PortReceiver {
        port: sp.port,
        name: sp.name.clone(),
        requirement,
        setting,
        read_from,
    }
}

/// What the receiver of `svc` is read from.
struct Found<'a> {
    snapshot: &'a ClusterSnapshot,
    svc: &'a Service,
    workload: Option<&'a Workload>,
    /// The Gateway (as JSON) whose address is the load balancer's, or that the pods name.
    gateway: Option<Value>,
}

/// The receiver of the `type: LoadBalancer` Service `svc`, when one is found (`None`: no
/// workload, Gateway or Cilium label says who receives its traffic).
pub fn receiver_of(snapshot: &ClusterSnapshot, svc: &Service) -> Option<Receiver> {
    let workload = selected_workloads(snapshot, svc);
    let identified = workload.iter().find_map(|w| Some((*w, identify(w)?)));
    let gateway = gateway_of(snapshot, svc, identified.map(|(w, _)| w));
    let from_class = gateway
        .as_ref()
        .and_then(|g| class_implementation(snapshot, g));
    let cilium = cilium_of(svc);
    let (implementation, workload) = match (identified, cilium, from_class) {
        (Some((w, i)), _, _) => (i, Some(w)),
        (None, Some(i), _) => (i, None),
        (None, None, Some(i)) => (i, workload.first().copied()),
        (None, None, None) => match workload.first() {
            Some(w) => {
                return Some(Receiver {
                    implementation: Implementation::Unknown,
                    workload: w.describe(),
                    requirement: Requirement::Unknown,
                    setting: format!("images {}: not an implementation hairpin reads", images(w)),
                    read_from: String::new(),
                    ports: Vec::new(),
                });
            }
            None => return None,
        },
    };
    let found = Found {
        snapshot,
        svc,
        workload,
        gateway,
    };
    let (mut requirement, mut setting, mut read_from) = found.read(implementation);
    let mut ports = found.read_ports(implementation).unwrap_or_default();
    // One setting on every port: the whole reading stands (or the ports' common one).
    if let Some(first) = ports.first().cloned()
        && ports.iter().all(|p| p.requirement == first.requirement)
    {
        if first.requirement != requirement {
            (requirement, setting, read_from) = (first.requirement, first.setting, first.read_from);
        }
        ports.clear();
    }
    if !ports.is_empty() {
        requirement = Requirement::PerPort;
        setting = "the setting differs per port".to_owned();
        read_from = String::new();
    }
    let described = match (found.workload, &found.gateway) {
        (Some(w), _) => w.describe(),
        (None, Some(g)) => format!(
            "Gateway {}/{}",
            text_at(g, "/metadata/namespace"),
            text_at(g, "/metadata/name")
        ),
        (None, None) => format!(
            "Service {}",
            crate::snapshot::ObjectRef::from_meta(&svc.metadata)
        ),
    };
    Some(Receiver {
        implementation,
        workload: described,
        requirement,
        setting,
        read_from,
        ports,
    })
}

/// The TCP ports of the Service.
fn tcp_service_ports(svc: &Service) -> impl Iterator<Item = &ServicePort> {
    svc.spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
}

/// The container port a Service port sends to: its `targetPort` (a number, or the name of a
/// container port of the workload), or the port itself when none is set.
fn container_port(w: &Workload, port: &ServicePort) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => containers(w)
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port),
    }
}

/// The workloads in the Service's namespace whose pod labels its selector picks, Pods first,
/// then by kind and name. None for a Service without a selector.
fn selected_workloads<'a>(snapshot: &'a ClusterSnapshot, svc: &Service) -> Vec<&'a Workload> {
    let selector = svc.spec.as_ref().and_then(|s| s.selector.as_ref());
    let Some(selector) = selector.filter(|s| !s.is_empty()) else {
        return Vec::new();
    };
    let namespace = svc.metadata.namespace.as_deref().unwrap_or_default();
    let mut picked: Vec<&Workload> = snapshot
        .receivers
        .workloads
        .iter()
        .filter(|w| w.metadata.namespace.as_deref().unwrap_or_default() == namespace)
        .filter(|w| selector.iter().all(|(k, v)| w.labels().get(k) == Some(v)))
        .collect();
    picked.sort_by_key(|w| (w.kind != "Pod", w.kind.clone(), w.metadata.name.clone()));
    picked
}

/// A container image without its registry tag or digest (`registry.k8s.io/ingress-nginx/controller`).
fn repository(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    match image.rfind(':') {
        Some(colon) if !image[colon..].contains('/') => &image[..colon],
        _ => image,
    }
}

fn containers(w: &Workload) -> impl Iterator<Item = &Container> {
    w.spec().into_iter().flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
    })
}

fn images(w: &Workload) -> String {
    let images: Vec<&str> = containers(w).filter_map(|c| c.image.as_deref()).collect();
    if images.is_empty() {
        "(none)".to_owned()
    } else {
        images.join(", ")
    }
}

/// The implementation a workload runs, from its images and labels; `None` when none is known.
fn identify(w: &Workload) -> Option<Implementation> {
    let repos: Vec<&str> = containers(w)
        .filter_map(|c| c.image.as_deref())
        .map(repository)
        .collect();
    let any = |f: &dyn Fn(&str) -> bool| repos.iter().any(|r| f(r));
    let last = |r: &str| r.rsplit('/').next().unwrap_or(r).to_owned();
    // The control planes that ship their own image next to (or wrapping) Envoy come first:
    // their pods also run an Envoy image.
    if any(&|r| r.ends_with("projectcontour/contour")) {
        return Some(Implementation::Contour);
    }
    if any(&|r| r.ends_with("/envoy-wrapper")) {
        return Some(Implementation::Kgateway);
    }
    if any(&|r| last(r) == "proxyv2") || istio_injected(w) {
        return Some(Implementation::Istio);
    }
    if any(&|r| r.contains("nginx-gateway-fabric")) {
        return Some(Implementation::NginxGatewayFabric);
    }
    // Envoy Gateway labels the Envoy pods it runs with their Gateway
    // (envoyproxy/gateway internal/gatewayapi/translator.go, OwningGatewayNameLabel).
    if w.labels().contains_key(EG_OWNING_NAME) || w.labels().contains_key(EG_OWNING_CLASS) {
        return Some(Implementation::EnvoyGateway);
    }
    repos.iter().find_map(|r| match last(r).as_str() {
        "controller" | "controller-chroot" if r.contains("ingress-nginx") => {
            Some(Implementation::IngressNginx)
        }
        // Bitnami's repackaged ingress-nginx.
        "nginx-ingress-controller" => Some(Implementation::IngressNginx),
        "nginx-ingress" | "nginx-plus-ingress" => Some(Implementation::F5NginxIngress),
        // k3s packages Traefik as rancher/mirrored-library-traefik (k3s
        // manifests/traefik.yaml, the chart's `image.repository`).
        "traefik" | "mirrored-library-traefik" => Some(Implementation::Traefik),
        "haproxy-ingress" if r.contains("jcmoraisjr") => {
            Some(Implementation::JcmoraisjrHaproxyIngress)
        }
        "kubernetes-ingress" if r.contains("haproxytech") => Some(Implementation::HaproxyIngress),
        "kong" | "kong-gateway" => Some(Implementation::Kong),
        _ => None,
    })
}

/// An Istio gateway installed by the `istio/gateway` Helm chart
/// (manifests/charts/gateway/templates/deployment.yaml): its `istio-proxy` container has
/// `image: auto`, filled in by the injection webhook, and the pods ask for injection
/// (`sidecar.istio.io/inject: "true"`, the `inject.istio.io/templates: gateway` annotation
/// of the chart's `podAnnotations`).
fn istio_injected(w: &Workload) -> bool {
    let auto = containers(w).any(|c| c.image.as_deref() == Some("auto"));
    let asks = w
        .labels()
        .get("sidecar.istio.io/inject")
        .map(String::as_str)
        == Some("true")
        || w.annotation("sidecar.istio.io/inject") == Some("true")
        || w.annotation("inject.istio.io/templates")
            .is_some_and(|t| t.split(',').any(|t| t.trim() == "gateway"));
    auto && asks
}

const EG_OWNING_NAME: &str = "gateway.envoyproxy.io/owning-gateway-name";
const EG_OWNING_NAMESPACE: &str = "gateway.envoyproxy.io/owning-gateway-namespace";
const EG_OWNING_CLASS: &str = "gateway.envoyproxy.io/owning-gatewayclass";
/// The label Gateway API implementations put on the pods of one Gateway (NGINX Gateway Fabric
/// internal/framework/controller/labels.go; kgateway and Istio too).
const GATEWAY_NAME_LABEL: &str = "gateway.networking.k8s.io/gateway-name";
/// Cilium's Gateway Service label (cilium operator/pkg/model/translation/gateway-api).
const CILIUM_GATEWAY_LABEL: &str = "io.cilium.gateway/owning-gateway";
/// Cilium's Ingress Service label (cilium operator/pkg/ingress).
const CILIUM_INGRESS_LABEL: &str = "cilium.io/ingress";

/// Cilium's Ingress and Gateway Services have no selector (Cilium's eBPF hands their traffic to
/// its Envoy); their labels say which one they are.
fn cilium_of(svc: &Service) -> Option<Implementation> {
    let labels = svc.metadata.labels.as_ref()?;
    if labels.contains_key(CILIUM_GATEWAY_LABEL) {
        Some(Implementation::CiliumGateway)
    } else if labels.contains_key(CILIUM_INGRESS_LABEL) {
        Some(Implementation::CiliumIngress)
    } else {
        None
    }
}

fn text_at<'v>(v: &'v Value, pointer: &str) -> &'v str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The Gateway whose status address is one of the load balancer's; else the one the picked
/// pods or the Service's labels name.
fn gateway_of(
    snapshot: &ClusterSnapshot,
    svc: &Service,
    workload: Option<&Workload>,
) -> Option<Value> {
    let entries = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten();
    let lb_addresses: Vec<String> = entries
        .flat_map(|e| e.ip.iter().chain(e.hostname.iter()))
        .map(|a| normalize_address(a))
        .collect();
    let by_address = snapshot.gateways.iter().find(|g| {
        g.status
            .iter()
            .flat_map(|s| s.addresses.iter().flatten())
            .any(|a| lb_addresses.contains(&normalize_address(&a.value)))
    });
    let svc_ns = svc.metadata.namespace.clone().unwrap_or_default();
    let named = || -> Option<(String, String)> {
        let labels = workload.map(Workload::labels);
        let svc_labels = svc.metadata.labels.as_ref();
        if let Some(name) = labels.and_then(|l| l.get(EG_OWNING_NAME)) {
            let ns = labels.and_then(|l| l.get(EG_OWNING_NAMESPACE)).cloned();
            return Some((ns.unwrap_or(svc_ns.clone()), name.clone()));
        }
        let name = labels
            .and_then(|l| l.get(GATEWAY_NAME_LABEL))
            .or_else(|| svc_labels.and_then(|l| l.get(CILIUM_GATEWAY_LABEL)))?;
        Some((svc_ns.clone(), name.clone()))
    };
    let gateway = by_address.or_else(|| {
        let (ns, name) = named()?;
        snapshot.gateways.iter().find(|g| {
            g.metadata.namespace.as_deref() == Some(ns.as_str())
                && g.metadata.name.as_deref() == Some(name.as_str())
        })
    })?;
    serde_json::to_value(gateway).ok()
}

fn gateway_class<'a>(snapshot: &'a ClusterSnapshot, gateway: &Value) -> Option<&'a DynamicObject> {
    let class = text_at(gateway, "/spec/gatewayClassName");
    snapshot
        .receivers
        .objects
        .iter()
        .find(|o| o.kind == "GatewayClass" && o.metadata.name.as_deref() == Some(class))
}

/// The implementation of a Gateway, from its GatewayClass's `controllerName`.
fn class_implementation(snapshot: &ClusterSnapshot, gateway: &Value) -> Option<Implementation> {
    let class = gateway_class(snapshot, gateway)?;
    let controller = class.spec.get("controllerName").and_then(Value::as_str)?;
    // Each project's default controllerName: envoyproxy/gateway api/v1alpha1/envoygateway_types.go
    // (GatewayControllerName); nginx-gateway-fabric charts/nginx-gateway-fabric/values.yaml
    // (gatewayControllerName); contour's gateway provisioner; istio, cilium, kgateway, Traefik and
    // Kong's documented GatewayClasses.
    Some(match controller {
        "gateway.envoyproxy.io/gatewayclass-controller" => Implementation::EnvoyGateway,
        "gateway.nginx.org/nginx-gateway-controller" => Implementation::NginxGatewayFabric,
        c if c.starts_with("projectcontour.io/") => Implementation::Contour,
        "istio.io/gateway-controller" => Implementation::Istio,
        "io.cilium/gateway-controller" => Implementation::CiliumGateway,
        "kgateway.dev/kgateway" => Implementation::Kgateway,
        "traefik.io/gateway-controller" => Implementation::Traefik,
        c if c.starts_with("konghq.com/") => Implementation::Kong,
        _ => Implementation::Unknown,
    })
}

/// `$(VAR)` references in an argument expanded from the container's environment: a literal
/// `value`, or the pod's namespace (`fieldRef: metadata.namespace`, how every chart passes
/// `POD_NAMESPACE`).
fn expand(arg: &str, container: &Container, namespace: &str) -> String {
    let mut out = arg.to_owned();
    for env in container.env.iter().flatten() {
        let pattern = format!("$({})", env.name);
        if !out.contains(&pattern) {
            continue;
        }
        let value = env.value.clone().or_else(|| {
            let field = env.value_from.as_ref()?.field_ref.as_ref()?;
            (field.field_path == "metadata.namespace").then(|| namespace.to_owned())
        });
        if let Some(value) = value {
            out = out.replace(&pattern, &value);
        }
    }
    out
}

/// The value of flag `name` (`--name=value`, `-name=value`, or the next argument) in any
/// container's command or arguments, expanded; `Some("")` for a bare `--name`.
fn flag(w: &Workload, name: &str) -> Option<String> {
    let namespace = w.metadata.namespace.as_deref().unwrap_or_default();
    for c in containers(w) {
        let args: Vec<&String> = c
            .command
            .iter()
            .flatten()
            .chain(c.args.iter().flatten())
            .collect();
        for (i, arg) in args.iter().enumerate() {
            let bare = arg.trim_start_matches('-');
            if bare.len() == arg.len() {
                continue;
            }
            if let Some(value) = bare.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
                return Some(expand(value, c, namespace));
            }
            if bare == name {
                let next = args.get(i + 1).filter(|n| !n.starts_with('-'));
                return Some(next.map(|n| expand(n, c, namespace)).unwrap_or_default());
            }
        }
    }
    None
}

/// The value of environment variable `name` in any container (literal values only).
fn env(w: &Workload, name: &str) -> Option<String> {
    containers(w)
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

impl Found<'_> {
    fn namespace(&self) -> &str {
        self.workload
            .and_then(|w| w.metadata.namespace.as_deref())
            .or(self.svc.metadata.namespace.as_deref())
            .unwrap_or_default()
    }

    /// The setting of `implementation` per TCP port of the Service, for the implementations
    /// whose setting is per listener (Traefik entry points, Kong listeners, Envoy Gateway
    /// listeners, kgateway `perPort`); `None` where one setting holds for the whole receiver.
    fn read_ports(&self, implementation: Implementation) -> Option<Vec<PortReceiver>> {
        match implementation {
            Implementation::Traefik => self.traefik_ports(),
            Implementation::Kong => self.kong_ports(),
            Implementation::EnvoyGateway => self.envoy_gateway_ports(),
            Implementation::Kgateway => self.kgateway_ports(),
            _ => None,
        }
    }

    /// The setting of `implementation`.
    fn read(&self, implementation: Implementation) -> Read {
        match implementation {
            // kubernetes/ingress-nginx internal/ingress/controller/config/config.go
            // (`UseProxyProtocol bool json:"use-proxy-protocol"`, read with Go's ParseBool);
            // the ConfigMap is the one `--configmap` names
            // (charts/ingress-nginx/templates/_params.tpl). nginx's `listen ... proxy_protocol`
            // refuses a connection without a header, v1 or v2.
            Implementation::IngressNginx => self.config_map_bool("configmap", "use-proxy-protocol"),
            // nginx/kubernetes-ingress internal/configs/configmaps.go (`proxy-protocol`, read
            // with GetMapKeyAsBool); the ConfigMap is the one `-nginx-configmaps` names
            // (charts/nginx-ingress/templates/_helpers.tpl); the template's
            // `listen ... proxy_protocol` (internal/configs/version1/nginx.ingress.tmpl).
            Implementation::F5NginxIngress => {
                self.config_map_bool("nginx-configmaps", "proxy-protocol")
            }
            Implementation::HaproxyIngress => self.haproxy(),
            Implementation::Traefik => self.traefik(),
            Implementation::Kong => self.kong(),
            Implementation::JcmoraisjrHaproxyIngress => self.jcmoraisjr_haproxy_ingress(),
            Implementation::Contour => self.contour(),
            Implementation::Istio => self.istio(),
            // cilium operator/pkg/ingress/cell.go and operator/pkg/gateway-api/cell.go: "Note
            // that _only_ Proxy protocol traffic will be accepted once this is enabled."
            Implementation::CiliumIngress => self.cilium("enable-ingress-proxy-protocol"),
            Implementation::CiliumGateway => self.cilium("enable-gateway-api-proxy-protocol"),
            Implementation::EnvoyGateway => self.envoy_gateway(),
            Implementation::NginxGatewayFabric => self.nginx_gateway_fabric(),
            Implementation::Kgateway => self.kgateway(),
            Implementation::Unknown => {
                unknown("the GatewayClass's controllerName is not one hairpin reads")
            }
        }
    }

    /// The ConfigMap a flag of the workload names (`namespace/name`, or a name in its own
    /// namespace): `Err` says why it is not there.
    fn flagged_config_map(
        &self,
        flag_name: &str,
    ) -> Result<(String, &BTreeMap<String, String>), Read> {
        let Some(w) = self.workload else {
            return Err(unknown("no workload found for the Service's selector"));
        };
        let Some(value) = flag(w, flag_name).filter(|v| !v.is_empty()) else {
            return Err(read(
                Requirement::Off,
                format!("no --{flag_name} argument: the defaults (PROXY off)"),
                w.describe(),
            ));
        };
        let (ns, name) = value
            .split_once('/')
            .unwrap_or((self.namespace(), value.as_str()));
        let where_ = format!("ConfigMap {ns}/{name}");
        match self.snapshot.config_map(ns, name) {
            None => Err(unknown(format!(
                "{where_} (named by --{flag_name}) is not in the snapshot"
            ))),
            Some(cm) => {
                static EMPTY: BTreeMap<String, String> = BTreeMap::new();
                Ok((where_, cm.data.as_ref().unwrap_or(&EMPTY)))
            }
        }
    }

    fn config_map_bool(&self, flag_name: &str, key: &str) -> Read {
        let (where_, data) = match self.flagged_config_map(flag_name) {
            Ok(found) => found,
            Err(read) => return read,
        };
        match data.get(key) {
            None => read(
                Requirement::Off,
                format!("{key} not set (default false)"),
                where_,
            ),
            Some(v) => match parse_bool(v) {
                Some(true) => read(
                    Requirement::Required { only_v2: false },
                    format!("{key}: {v:?}"),
                    where_,
                ),
                Some(false) => read(Requirement::Off, format!("{key}: {v:?}"), where_),
                None => unknown(format!("{where_} {key}: {v:?} is not a boolean")),
            },
        }
    }

    /// haproxytech/kubernetes-ingress documentation/annotations.md `proxy-protocol`: "a
    /// comma-delimited list of IP addresses and/or CIDR ranges ... Connection will fail with 400
    /// Bad Request if source IP is in annotation list but no Proxy Protocol data is sent"
    /// (pkg/handler/proxy-protocol.go). Required for everyone only with `0.0.0.0/0` (or `::/0`);
    /// whether in-cluster clients fall in narrower ranges is not known here.
    fn haproxy(&self) -> Read {
        let (where_, data) = match self.flagged_config_map("configmap") {
            Ok(found) => found,
            Err(read) => return read,
        };
        let Some(value) = data.get("proxy-protocol").filter(|v| !v.trim().is_empty()) else {
            return read(Requirement::Off, "proxy-protocol not set", where_);
        };
        let setting = format!("proxy-protocol: {value:?}");
        let everyone = value
            .split(',')
            .map(str::trim)
            .any(|c| c == "0.0.0.0/0" || c == "::/0");
        if everyone {
            read(Requirement::Required { only_v2: false }, setting, where_)
        } else {
            unknown(format!(
                "{setting} in {where_}: PROXY required only from those sources; whether in-cluster clients are among them is not known"
            ))
        }
    }

    /// traefik/traefik pkg/config/static/entrypoints.go (`entryPoints.<name>.proxyProtocol`
    /// with `insecure` or `trustedIPs`) and pkg/server/server_entrypoint_tcp.go
    /// (buildProxyProtocolListener): a go-proxyproto listener whose policy is USE (trusted
    /// peers, or `insecure`) or IGNORE (others). With go-proxyproto v0.12.0 (Traefik v2.11 to
    /// v3.7) both serve a connection that sends no header: PROXY is optional.
    fn traefik(&self) -> Read {
        let Some(w) = self.workload else {
            return unknown("no Traefik workload found for the Service's selector");
        };
        let eps = match self.traefik_entry_points(w) {
            Ok(eps) => eps,
            Err(read) => return read,
        };
        match eps.values().find_map(|e| e.proxy.clone()) {
            Some((setting, from)) => read(Requirement::Optional, setting, from),
            None => read(
                Requirement::Off,
                "no entry point has proxyProtocol",
                w.describe(),
            ),
        }
    }

    /// Kong kong/templates/kong_defaults.lua (`proxy_listen`, no `proxy_protocol` by default)
    /// and kong/conf_loader/listeners.lua (the `proxy_protocol` flag of a listener, nginx's
    /// `listen ... proxy_protocol`: required on that listener), set as `KONG_PROXY_LISTEN`.
    fn kong(&self) -> Read {
        let Some(w) = self.workload else {
            return unknown("no Kong workload found for the Service's selector");
        };
        let Some(listen) = env(w, "KONG_PROXY_LISTEN") else {
            if containers(w).any(|c| {
                c.env_from.is_some()
                    || c.env
                        .iter()
                        .flatten()
                        .any(|e| e.name == "KONG_PROXY_LISTEN")
            }) {
                return unknown(format!(
                    "KONG_PROXY_LISTEN of {} comes from a reference (valueFrom, envFrom) hairpin does not read",
                    w.describe()
                ));
            }
            return read(
                Requirement::Off,
                "KONG_PROXY_LISTEN not set (default proxy_listen has no proxy_protocol)",
                w.describe(),
            );
        };
        let listeners = ports::kong_listeners(&listen);
        let with = listeners.iter().filter(|l| l.2).count();
        let setting = format!("KONG_PROXY_LISTEN={listen}");
        match with {
            0 => read(Requirement::Off, setting, w.describe()),
            n if n == listeners.len() => read(
                Requirement::Required { only_v2: false },
                setting,
                w.describe(),
            ),
            _ => unknown(format!("{setting}: proxy_protocol on some listeners only")),
        }
    }

    /// jcmoraisjr/haproxy-ingress docs/content/en/docs/configuration/keys.md
    /// (`use-proxy-protocol`, global, default false) and pkg/haproxy/types (the frontend's
    /// `bind ... accept-proxy`: required); the ConfigMap is the one `--configmap` names
    /// (haproxy-ingress/charts templates/_podtemplate.yaml). A custom template or a snippet
    /// that speaks of the PROXY protocol may set it elsewhere: unknown.
    fn jcmoraisjr_haproxy_ingress(&self) -> Read {
        if let Some(w) = self.workload
            && let Some(v) = w
                .spec()
                .and_then(|s| s.volumes.as_ref())
                .into_iter()
                .flatten()
                .find(|v| v.name == "haproxy-template")
        {
            return unknown(format!(
                "a custom HAProxy template (volume {} of {}) may set the PROXY protocol",
                v.name,
                w.describe()
            ));
        }
        let (where_, data) = match self.flagged_config_map("configmap") {
            Ok(found) => found,
            Err(read) => return read,
        };
        if let Some((key, _)) = data.iter().find(|(k, v)| {
            k.starts_with("config-") && (v.contains("accept-proxy") || v.contains("expect-proxy"))
        }) {
            return unknown(format!("{key} in {where_} speaks of the PROXY protocol"));
        }
        self.config_map_bool("configmap", "use-proxy-protocol")
    }

    fn cilium(&self, key: &str) -> Read {
        let Some(cm) = self
            .snapshot
            .config_maps
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some("cilium-config"))
        else {
            return unknown("ConfigMap cilium-config is not in the snapshot");
        };
        let where_ = format!(
            "ConfigMap {}",
            crate::snapshot::ObjectRef::from_meta(&cm.metadata)
        );
        match cm.data.as_ref().and_then(|d| d.get(key)) {
            None => read(
                Requirement::Off,
                format!("{key} not set (default false)"),
                where_,
            ),
            Some(v) => match parse_bool(v) {
                Some(true) => read(
                    Requirement::Required { only_v2: false },
                    format!("{key}: {v:?}"),
                    where_,
                ),
                Some(false) => read(Requirement::Off, format!("{key}: {v:?}"), where_),
                None => unknown(format!("{where_} {key}: {v:?} is not a boolean")),
            },
        }
    }
}

/// The ConfigMaps the receivers of the snapshot's load balancers are read from, as
/// `(namespace, name)`, sorted: those the selected workloads' flags name (ingress-nginx
/// `--configmap`, F5 `-nginx-configmaps`, HAProxy `--configmap`), their ConfigMap volumes
/// (Traefik's static configuration), and the fixed ones where their receiver is found
/// (`kube-system/cilium-config` behind a Cilium Service, `istio-system/istio` behind Istio
/// gateway pods). A reader that may get ConfigMaps only by name (the doctor, with hairpin's
/// grants) reads these after the workloads.
pub fn config_maps_read(snapshot: &ClusterSnapshot) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let load_balancers = snapshot
        .services
        .iter()
        .filter(|s| s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer"));
    for svc in load_balancers {
        if cilium_of(svc).is_some() {
            out.push(("kube-system".to_owned(), "cilium-config".to_owned()));
        }
        for w in selected_workloads(snapshot, svc) {
            if identify(w) == Some(Implementation::Istio) {
                out.push(("istio-system".to_owned(), "istio".to_owned()));
            }
            let namespace = w.metadata.namespace.clone().unwrap_or_default();
            for name in ["configmap", "nginx-configmaps"] {
                if let Some(value) = flag(w, name).filter(|v| !v.is_empty()) {
                    let (ns, n) = value.split_once('/').unwrap_or((&namespace, &value));
                    out.push((ns.to_owned(), n.to_owned()));
                }
            }
            let volumes = w
                .spec()
                .and_then(|s| s.volumes.as_ref())
                .into_iter()
                .flatten();
            out.extend(
                volumes
                    .filter_map(|v| v.config_map.as_ref())
                    .map(|cm| (namespace.clone(), cm.name.clone())),
            );
        }
    }
    out.sort();
    out.dedup();
    out
}
