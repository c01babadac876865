//! The objects the receiving side is read from ([`crate::receivers`]): the workloads a load
//! balancer's selector picks (Pods, or the pod templates of Deployments, DaemonSets and
//! StatefulSets), and the custom resources that hold a receiver's PROXY setting, kept as
//! dynamic objects (`GatewayClass`, Envoy Gateway `ClientTrafficPolicy`, NGINX Gateway Fabric
//! `NginxProxy`, kgateway `ListenerPolicy`, Contour `ContourConfiguration` and
//! `ContourDeployment`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, PodSpec,
    PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

/// A Pod, or a controller's pod template: what a Service selector picks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Workload {
    /// `Pod`, `Deployment`, `DaemonSet` or `StatefulSet`.
    pub kind: String,
    /// The object's own metadata (its namespace and name).
    pub metadata: ObjectMeta,
    /// The pod's metadata and spec (for a Pod, its own).
    pub template: PodTemplateSpec,
}

impl Workload {
    /// The pods' labels.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref())
            .unwrap_or(&EMPTY)
    }

    /// One of the pods' annotations.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        let meta = self.template.metadata.as_ref()?;
        meta.annotations.as_ref()?.get(key).map(String::as_str)
    }

    /// The pods' spec (empty when absent).
    pub fn spec(&self) -> Option<&PodSpec> {
        self.template.spec.as_ref()
    }

    /// `Kind namespace/name`, for reports (escape before printing).
    pub fn describe(&self) -> String {
        describe(&self.kind, &self.metadata)
    }
}

/// `Kind namespace/name` (`Kind name` for a cluster-scoped object).
fn describe(kind: &str, meta: &ObjectMeta) -> String {
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
        _ => format!("{kind} {name}"),
    }
}

/// A custom resource read without a Rust type of its own.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DynamicObject {
    /// `group/version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// Its metadata.
    pub metadata: ObjectMeta,
    /// Its `spec` (`Null` when absent).
    pub spec: Value,
}

impl DynamicObject {
    /// The API group (`""` for the core group).
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }

    /// `Kind namespace/name`, for reports (escape before printing).
    pub fn describe(&self) -> String {
        describe(&self.kind, &self.metadata)
    }
}

/// The custom resource kinds read as [`DynamicObject`]s: (group, kind).
pub const DYNAMIC_KINDS: &[(&str, &str)] = &[
    ("gateway.networking.k8s.io", "GatewayClass"),
    ("gateway.envoyproxy.io", "ClientTrafficPolicy"),
    ("gateway.nginx.org", "NginxProxy"),
    ("gateway.kgateway.dev", "ListenerPolicy"),
    ("projectcontour.io", "ContourConfiguration"),
    ("projectcontour.io", "ContourDeployment"),
    ("networking.istio.io", "EnvoyFilter"),
];

/// How a reader lists the [`DYNAMIC_KINDS`]: (group, kind, plural, versions newest first).
pub const DYNAMIC_APIS: &[(&str, &str, &str, &[&str])] = &[
    (
        "gateway.networking.k8s.io",
        "GatewayClass",
        "gatewayclasses",
        &["v1", "v1beta1"],
    ),
    (
        "gateway.envoyproxy.io",
        "ClientTrafficPolicy",
        "clienttrafficpolicies",
        &["v1alpha1"],
    ),
    (
        "gateway.nginx.org",
        "NginxProxy",
        "nginxproxies",
        &["v1alpha2", "v1alpha1"],
    ),
    (
        "gateway.kgateway.dev",
        "ListenerPolicy",
        "listenerpolicies",
        &["v1alpha1"],
    ),
    (
        "projectcontour.io",
        "ContourConfiguration",
        "contourconfigurations",
        &["v1alpha1"],
    ),
    (
        "projectcontour.io",
        "ContourDeployment",
        "contourdeployments",
        &["v1alpha1"],
    ),
    (
        "networking.istio.io",
        "EnvoyFilter",
        "envoyfilters",
        &["v1alpha3"],
    ),
];

/// The workload kinds read as [`Workload`]s: (group, kind).
pub const WORKLOAD_KINDS: &[(&str, &str)] = &[
    ("", "Pod"),
    ("apps", "Deployment"),
    ("apps", "DaemonSet"),
    ("apps", "StatefulSet"),
];

/// Everything the receivers are read from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReceiverObjects {
    /// Pods and pod templates.
    pub workloads: Vec<Workload>,
    /// The custom resources of [`DYNAMIC_KINDS`].
    pub objects: Vec<DynamicObject>,
}

impl ReceiverObjects {
    /// Reads a Pod, Deployment, DaemonSet or StatefulSet (any other value: `Err`).
    pub fn workload_from_value(kind: &str, value: Value) -> Result<Workload, String> {
        let metadata: ObjectMeta = match value.get("metadata") {
            Some(m) => serde_json::from_value(m.clone()).map_err(|e| e.to_string())?,
            None => ObjectMeta::default(),
        };
        let template: PodTemplateSpec = if kind == "Pod" {
            PodTemplateSpec {
                metadata: Some(metadata.clone()),
                spec: match value.get("spec") {
                    Some(s) => Some(serde_json::from_value(s.clone()).map_err(|e| e.to_string())?),
                    None => None,
                },
            }
        } else {
            match value.pointer("/spec/template") {
                Some(t) => serde_json::from_value(t.clone()).map_err(|e| e.to_string())?,
                None => PodTemplateSpec::default(),
            }
        };
        Ok(Workload {
            kind: kind.to_owned(),
            metadata,
            template,
        })
    }

    /// Reads a custom resource of [`DYNAMIC_KINDS`].
    pub fn dynamic_from_value(value: Value) -> Result<DynamicObject, String> {
        let text = |k: &str| {
            value
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let metadata: ObjectMeta = match value.get("metadata") {
            Some(m) => serde_json::from_value(m.clone()).map_err(|e| e.to_string())?,
            None => ObjectMeta::default(),
        };
        Ok(DynamicObject {
            api_version: text("apiVersion"),
            kind: text("kind"),
            metadata,
            spec: value.get("spec").cloned().unwrap_or(Value::Null),
        })
    }
}

/// The pod annotation the receivers read ([`crate::receivers`]: Istio's per-gateway proxy
/// config).
const READ_ANNOTATIONS: &[&str] = &[
    "proxy.istio.io/config",
    "inject.istio.io/templates",
    "sidecar.istio.io/inject",
];

/// Keeps of a pod template only what [`crate::receivers`] reads, so that a reader that keeps
/// every workload of the cluster (the controller's caches) holds little of each: the pods'
/// labels and the annotations it reads; per container (and init container) its image,
/// command, arguments, its ports' names and numbers (a Service's named `targetPort`, issue 38),
/// whether it has an `envFrom` (not what it names), and the environment variables it reads
/// (`KONG_PROXY_LISTEN`, Traefik's `TRAEFIK_ENTRYPOINTS_*_PROXYPROTOCOL_*` and `_ADDRESS`, and
/// those an argument expands as `$(NAME)`, with a literal value or a `fieldRef`; never a
/// Secret's or ConfigMap's reference); and the names of ConfigMap volumes. Resources, probes,
/// mounts, security contexts, affinities and every other variable are dropped: they are most of a pod template, and some hold what
/// hairpin has no business keeping. A slimmed template reads exactly as the whole one.
pub fn slim_template(template: &mut PodTemplateSpec) {
    if let Some(meta) = template.metadata.take() {
        let annotations = meta.annotations.map(|mut a| {
            a.retain(|k, _| READ_ANNOTATIONS.contains(&k.as_str()));
            a
        });
        template.metadata = Some(ObjectMeta {
            labels: meta.labels,
            annotations: annotations.filter(|a| !a.is_empty()),
            ..ObjectMeta::default()
        });
    }
    if let Some(spec) = template.spec.take() {
        let volumes: Vec<Volume> = spec
            .volumes
            .into_iter()
            .flatten()
            .filter_map(|v| {
                let cm = v.config_map?;
                Some(Volume {
                    name: v.name,
                    config_map: Some(ConfigMapVolumeSource {
                        name: cm.name,
                        ..ConfigMapVolumeSource::default()
                    }),
                    ..Volume::default()
                })
            })
            .collect();
        template.spec = Some(PodSpec {
            containers: spec.containers.into_iter().map(slim_container).collect(),
            init_containers: spec
                .init_containers
                .map(|c| c.into_iter().map(slim_container).collect()),
            volumes: (!volumes.is_empty()).then_some(volumes),
            ..PodSpec::default()
        });
    }
}

/// A container as [`slim_template`] keeps it.
fn slim_container(c: Container) -> Container {
    let expanded = |name: &str| {
        let pattern = format!("$({name})");
        c.command
            .iter()
            .flatten()
            .chain(c.args.iter().flatten())
            .any(|a| a.contains(&pattern))
    };
    let read = |e: &EnvVar| {
        e.name == "KONG_PROXY_LISTEN"
            || (e.name.starts_with("TRAEFIK_ENTRYPOINTS_")
                && (e.name.contains("_PROXYPROTOCOL") || e.name.ends_with("_ADDRESS")))
            || expanded(&e.name)
    };
    let env: Vec<EnvVar> =
        c.env
            .iter()
            .flatten()
            .filter(|e| read(e))
            .map(|e| EnvVar {
                name: e.name.clone(),
                value: e.value.clone(),
                value_from: e.value_from.as_ref().and_then(|f| f.field_ref.clone()).map(
                    |field_ref| EnvVarSource {
                        field_ref: Some(field_ref),
                        ..EnvVarSource::default()
                    },
                ),
            })
            .collect();
    Container {
        name: c.name,
        image: c.image,
        command: c.command,
        args: c.args,
        env: (!env.is_empty()).then_some(env),
        // Only whether there is one: a variable read may come from it (Kong's).
        env_from: c.env_from.map(|_| Vec::new()),
        // A Service's named targetPort is found through them (issue 38).
        ports: c.ports.map(|ports| {
            ports
                .into_iter()
                .map(|p| ContainerPort {
                    name: p.name,
                    container_port: p.container_port,
                    protocol: p.protocol,
                    ..ContainerPort::default()
                })
                .collect()
        }),
        ..Container::default()
    }
}
