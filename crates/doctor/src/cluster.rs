//! The cluster half of the doctor: one bounded read of the API (no watches), then pure
//! functions that turn it into [`ClusterFacts`] per host using the planner's own discovery and
//! plan, so the doctor judges exactly as the controller plans.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use hairpin_planner::CustomSource;
use hairpin_planner::escape;
use hairpin_planner::receivers;
use hairpin_planner::sources::{SOURCE_APIS, TLS_ROUTE_VERSIONS, tls_route_from_value};
use hairpin_planner::workloads::{DYNAMIC_APIS, ReceiverObjects};
use hairpin_planner::{ClusterSnapshot, ObjectRef, Plan, PlannerConfig, SkipReason};
use hairpin_planner::{
    EKS_FIELD_MANAGER, HAIRPIN_API_GROUP, HAIRPIN_API_VERSION, HAIRPIN_PLURAL, MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
};
use hairpin_runtime::kubeconfig::ConfigError;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, ObjectList, PartialObjectMeta,
};
use kube::{Api, Client};
use serde::de::DeserializeOwned;

use crate::admission::AdmissionPolicyFacts;
use crate::cure::{self, CCM_DEPLOYMENTS, CcmFacts, CertManagerFacts};
use crate::dataplane::{self, AgentFacts, CniFacts, KubeProxyFacts};
use crate::providers::Provider;
use crate::verdict::{
    CiliumFacts, ClusterFacts, DnsFacts, EksAddOn, HairpinFacts, HairpinStatusFacts, LbIngress,
    LoadBalancerFacts, UneditableDns,
};

/// How to reach the API.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Kubeconfig file; default `$KUBECONFIG`, `~/.kube/config`, then the pod's service account.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current context).
    pub context: Option<String>,
    /// Bound on connecting and on each request.
    pub timeout: Duration,
    /// The planner's settings (hairpin's namespace, CoreDNS names...).
    pub planner: PlannerConfig,
    /// The name of hairpin's ValidatingAdmissionPolicy that pins its Service status writes to
    /// `ipMode`, and of its binding ([`DEFAULT_ADMISSION_POLICY`] for the chart's defaults).
    pub admission_policy: String,
}

/// The chart's status policy with its default release name (`<release>-status-ipmode-only`).
pub const DEFAULT_ADMISSION_POLICY: &str = "hairpin-status-ipmode-only";

/// Why the cluster could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The kubeconfig named on the command line cannot be used: an access error (worded as
    /// for every command, by [`hairpin_runtime::kubeconfig`], and introduced as the other
    /// commands introduce it).
    #[error("cannot configure the Kubernetes client: {0}")]
    Kubeconfig(String),
    /// No configuration found at all, or the API did not answer: the checks are skipped.
    #[error("{0}")]
    Unavailable(String),
}

/// Everything read from the API, once.
#[derive(Clone, Debug)]
pub struct ClusterRead {
    /// `major.minor` of the API server.
    pub version: Option<(u32, u32)>,
    /// The objects the planner reads.
    pub snapshot: ClusterSnapshot,
    /// hairpin Services (ours, labelled managed-by hairpin) and their ready endpoints.
    pub hairpin_services: Vec<(ObjectRef, usize)>,
    /// `Hairpin` objects as JSON; None when their CRD is not installed (or not readable).
    pub hairpins: Option<Vec<serde_json::Value>>,
    /// The CNI agents that may handle Services (Cilium, Calico, Antrea, kube-router).
    pub cni: CniFacts,
    /// kube-proxy, when its DaemonSet is in kube-system.
    pub kube_proxy: Option<KubeProxyFacts>,
    /// The kube-proxy DaemonSet could be read (found or not): its absence means none runs.
    pub kube_proxy_read: bool,
    /// The cloud controllers found that compute `ipMode`, with their image tag:
    /// `(controller, version)`.
    pub ccms: Vec<(String, Option<String>)>,
    /// cert-manager, when its controller Deployment was found.
    pub cert_manager: Option<CertManagerFacts>,
    /// A `kube-dns` Deployment or ConfigMap in kube-system (GKE's kube-dns).
    pub kube_dns: bool,
    /// A CoreDNS, `coredns-custom` or node-local-dns ConfigMap could not be read: its absence
    /// proves nothing.
    pub dns_unread: bool,
    /// hairpin's status admission policy and its binding; None when they could not be read
    /// (a gap says why).
    pub admission_policy: Option<AdmissionPolicyFacts>,
    /// Reads that failed (forbidden...), for the report.
    pub gaps: Vec<String>,
    /// Reads of the receivers' objects that failed: hairpin's grants do not cover them yet
    /// (issue 31), so they are reported with the receiver, not as gaps of the hairpin checks.
    pub receiver_gaps: Vec<String>,
}

/// Namespace of the cluster add-ons (Cilium, kube-dns), fixed by their installers.
const KUBE_SYSTEM: &str = "kube-system";

/// The label an add-on manager (GKE, AKS, kube-up's addon-manager) puts on objects it keeps as
/// shipped: with `Reconcile` it reverts every edit.
const ADDON_MODE_LABEL: &str = "addonmanager.kubernetes.io/mode";

/// Builds a client with short timeouts.
///
/// # Errors
/// [`ClusterError::Kubeconfig`] for an unusable `--kubeconfig`, [`ClusterError::Unavailable`]
/// when there is no configuration at all.
pub async fn client(options: &ClusterOptions) -> Result<Client, ClusterError> {
    let mut config = hairpin_runtime::kubeconfig::load(
        options.kubeconfig.as_deref(),
        options.context.as_deref(),
    )
    .await
    .map_err(|err| match err {
        ConfigError::Kubeconfig(message) => ClusterError::Kubeconfig(message),
        ConfigError::NotFound(_) => {
            tracing::debug!(error = %err, "no Kubernetes configuration");
            ClusterError::Unavailable(err.to_string())
        }
    })?;
    config.connect_timeout = Some(options.timeout);
    config.read_timeout = Some(options.timeout);
    config.write_timeout = Some(options.timeout);
    Client::try_from(config).map_err(|err| ClusterError::Unavailable(err.to_string()))
}

/// Reads what the doctor needs. The first request (`/version`) decides whether the API is
/// reachable; later failures become gaps.
///
/// # Errors
/// [`ClusterError::Unavailable`] when the API does not answer.
pub async fn read(client: &Client, options: &ClusterOptions) -> Result<ClusterRead, ClusterError> {
    let bound = options.timeout + Duration::from_secs(1);
    let config = &options.planner;
    let mut gaps = Vec::new();
    let version = read_version(client, bound, &mut gaps).await?;
    let mut snapshot = read_sources(client, bound, &mut gaps).await;
    if config.admission.hostname_namespaces.needs_namespaces() {
        // Metadata only: the planner reads their labels.
        let namespaces: Vec<PartialObjectMeta<Namespace>> =
            list(Api::all(client.clone()), "Namespaces", bound, &mut gaps).await;
        snapshot.namespaces = namespaces
            .into_iter()
            .map(|ns| Namespace {
                metadata: ns.metadata,
                ..Namespace::default()
            })
            .collect();
    }
    let dns_unread = read_config_maps(client, config, &mut snapshot, bound, &mut gaps).await;
    snapshot.node_probes = read_node_probes(client, config, bound).await;
    let mut receiver_gaps = Vec::new();
    read_receivers(client, &mut snapshot, bound, &mut receiver_gaps).await;
    let hairpin_services = read_hairpin_services(client, config, bound, &mut gaps).await;
    let hairpins = list_hairpins(client, bound, &mut gaps).await;
    let cni = read_cni(client, bound, &mut gaps).await;
    let (kube_proxy, kube_proxy_read) = read_kube_proxy(client, bound, &mut gaps).await;
    let ccms = read_ccms(client, &snapshot, bound, &mut gaps).await;
    let cert_manager = read_cert_manager(client, bound, &mut gaps).await;
    let kube_dns = read_kube_dns(client, config, &snapshot, bound, &mut gaps).await;
    let admission_policy = read_admission_policy(
        client,
        &options.admission_policy,
        version,
        hairpins.is_some() || !hairpin_services.is_empty(),
        bound,
        &mut gaps,
    )
    .await;
    Ok(ClusterRead {
        version,
        snapshot,
        hairpin_services,
        hairpins,
        cni,
        kube_proxy,
        kube_proxy_read,
        ccms,
        cert_manager,
        kube_dns,
        dns_unread,
        admission_policy,
        gaps,
        receiver_gaps,
    })
}

/// `major.minor` from `/version`. An HTTP error still proves the API answers (a proxy may hide
/// /version) and is a gap; only no answer at all makes the cluster checks unavailable.
async fn read_version(
    client: &Client,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Result<Option<(u32, u32)>, ClusterError> {
    match tokio::time::timeout(bound, client.apiserver_version()).await {
        Err(_) => Err(ClusterError::Unavailable(format!(
            "the API server did not answer within {bound:?}"
        ))),
        Ok(Ok(info)) => Ok(parse_version(&info.major, &info.minor)),
        Ok(Err(kube::Error::Api(status))) => {
            gaps.push(format!(
                "the Kubernetes version (/version: {})",
                status.message
            ));
            Ok(None)
        }
        Ok(Err(err)) => Err(ClusterError::Unavailable(format!(
            "the API server cannot be reached: {err}"
        ))),
    }
}

/// The hostname sources the planner reads: Services, Ingresses and their classes, Gateway API
/// routes, and the CRD sources (Traefik, Istio, Contour) as the controller reads them.
async fn read_sources(client: &Client, bound: Duration, gaps: &mut Vec<String>) -> ClusterSnapshot {
    let mut snapshot = ClusterSnapshot {
        services: list(Api::all(client.clone()), "Services", bound, gaps).await,
        ingresses: list(Api::all(client.clone()), "Ingresses", bound, gaps)
            .await
            .into_iter()
            .map(Arc::new)
            .collect(),
        ingress_classes: list(Api::all(client.clone()), "IngressClasses", bound, gaps).await,
        gateways: list_optional::<Gateway>(client, "Gateways", bound, gaps).await,
        http_routes: list_optional::<HttpRoute>(client, "HTTPRoutes", bound, gaps).await,
        grpc_routes: list_optional::<GrpcRoute>(client, "GRPCRoutes", bound, gaps).await,
        tls_routes: list_first_served(
            client,
            ("gateway.networking.k8s.io", "TLSRoute", "tlsroutes"),
            TLS_ROUTE_VERSIONS,
            bound,
            gaps,
        )
        .await
        .into_iter()
        .filter_map(|route| tls_route_from_value(serde_json::to_value(route).ok()?).ok())
        .collect(),
        // The Nodes, for the native cure's gate ([`hairpin_planner::nodes`]), as the
        // controller reads them; not being allowed to list them is no gap (the gate then
        // decides nothing, as where nothing tells).
        nodes: list(Api::all(client.clone()), "Nodes", bound, &mut Vec::new()).await,
        ..ClusterSnapshot::default()
    };
    for api in SOURCE_APIS {
        let objects = list_first_served(
            client,
            (api.group, api.kind, api.plural),
            api.versions,
            bound,
            gaps,
        )
        .await;
        snapshot
            .custom_sources
            .extend(objects.into_iter().filter_map(|object| {
                CustomSource::from_value(api.source, serde_json::to_value(object).ok()?).ok()
            }));
    }
    snapshot
}

/// The node agents' reports of the native cure ([`hairpin_planner::node_probes`]), as the
/// controller reads them, so that the plan names a node that keeps the DNS cure; `None` where no
/// agent reports (none runs, or their Leases cannot be read: the controller's probe decides).
async fn read_node_probes(
    client: &Client,
    config: &PlannerConfig,
    bound: Duration,
) -> Option<Vec<hairpin_planner::node_probes::NodeReport>> {
    use hairpin_planner::node_probes::{ONE_SHOT_MAX_AGE, label_selector, reports};
    use k8s_openapi::api::coordination::v1::Lease;
    let params = ListParams::default().labels(&label_selector());
    let leases: Vec<Lease> = list_with(
        Api::namespaced(client.clone(), &config.namespace),
        &params,
        "the node agents' Leases",
        bound,
        &mut Vec::new(),
    )
    .await;
    reports(
        &leases,
        k8s_openapi::jiff::Timestamp::now(),
        ONE_SHOT_MAX_AGE,
    )
}

/// The ConfigMaps the planner reads, into `snapshot`; true when a DNS one (CoreDNS,
/// `coredns-custom`, node-local-dns) could not be read. By name, as the controller watches
/// them: hairpin's grants name these ConfigMaps (the chart's Roles list them), and a list of a
/// whole namespace would be forbidden.
async fn read_config_maps(
    client: &Client,
    config: &PlannerConfig,
    snapshot: &mut ClusterSnapshot,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> bool {
    let mut dns_unread = false;
    for (namespace, name) in &config.read_config_maps() {
        let gaps_before = gaps.len();
        let found: Option<ConfigMap> = get(
            Api::namespaced(client.clone(), namespace),
            name,
            &format!("ConfigMap {namespace}/{name}"),
            bound,
            gaps,
        )
        .await;
        let dns = config
            .corefile_config_maps()
            .chain([(
                config.coredns_namespace.as_str(),
                config.coredns_custom_config_map.as_str(),
            )])
            .any(|dns| dns == (namespace.as_str(), name.as_str()));
        dns_unread |= dns && gaps.len() > gaps_before;
        snapshot.config_maps.extend(found);
    }
    dns_unread
}

/// Why no receiver was found, when reading its objects failed.
fn receiver_unread(read: &ClusterRead) -> Option<String> {
    (!read.receiver_gaps.is_empty())
        .then(|| format!("not read ({})", read.receiver_gaps.join("; ")))
}

/// What the receivers of the load balancers are read from (issue 31): Deployments,
/// DaemonSets and StatefulSets, the receivers' custom resources that are installed, then the
/// ConfigMaps those name, by name ([`hairpin_planner::receivers::config_maps_read`]).
async fn read_receivers(
    client: &Client,
    snapshot: &mut ClusterSnapshot,
    bound: Duration,
    gaps: &mut Vec<String>,
) {
    let mut values: Vec<(&str, serde_json::Value)> = Vec::new();
    let deployments: Vec<Deployment> =
        list(Api::all(client.clone()), "Deployments", bound, gaps).await;
    values.extend(
        deployments
            .iter()
            .filter_map(|d| Some(("Deployment", serde_json::to_value(d).ok()?))),
    );
    let daemon_sets: Vec<DaemonSet> =
        list(Api::all(client.clone()), "DaemonSets", bound, gaps).await;
    values.extend(
        daemon_sets
            .iter()
            .filter_map(|d| Some(("DaemonSet", serde_json::to_value(d).ok()?))),
    );
    let stateful_sets: Vec<StatefulSet> =
        list(Api::all(client.clone()), "StatefulSets", bound, gaps).await;
    values.extend(
        stateful_sets
            .iter()
            .filter_map(|d| Some(("StatefulSet", serde_json::to_value(d).ok()?))),
    );
    snapshot.receivers.workloads.extend(
        values
            .into_iter()
            .filter_map(|(kind, value)| ReceiverObjects::workload_from_value(kind, value).ok()),
    );
    for (group, kind, plural, versions) in DYNAMIC_APIS {
        let objects = list_first_served(client, (group, kind, plural), versions, bound, gaps).await;
        snapshot
            .receivers
            .objects
            .extend(objects.into_iter().filter_map(|object| {
                let mut value = serde_json::to_value(object).ok()?;
                // List items may come without their type; the planner matches on both.
                value["kind"] = serde_json::Value::from(*kind);
                if value
                    .get("apiVersion")
                    .and_then(serde_json::Value::as_str)
                    .is_none()
                {
                    value["apiVersion"] =
                        serde_json::Value::from(format!("{group}/{}", versions[0]));
                }
                ReceiverObjects::dynamic_from_value(value).ok()
            }));
    }
    for (namespace, name) in receivers::config_maps_read(snapshot) {
        if snapshot.config_map(&namespace, &name).is_some() {
            continue;
        }
        let found: Option<ConfigMap> = get(
            Api::namespaced(client.clone(), &namespace),
            &name,
            &format!("ConfigMap {namespace}/{name}"),
            bound,
            gaps,
        )
        .await;
        snapshot.config_maps.extend(found);
    }
}

/// hairpin's own Services (labelled managed-by hairpin) with their ready endpoints.
async fn read_hairpin_services(
    client: &Client,
    config: &PlannerConfig,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Vec<(ObjectRef, usize)> {
    let mut hairpin_services = Vec::new();
    let ours: Vec<Service> = list_with(
        Api::namespaced(client.clone(), &config.namespace),
        &ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")),
        "hairpin Services",
        bound,
        gaps,
    )
    .await;
    for service in ours {
        let name = service.metadata.name.clone().unwrap_or_default();
        let slices: Vec<EndpointSlice> = list_with(
            Api::namespaced(client.clone(), &config.namespace),
            &ListParams::default().labels(&format!("kubernetes.io/service-name={name}")),
            "EndpointSlices",
            bound,
            gaps,
        )
        .await;
        let ready = slices
            .iter()
            .flat_map(|slice| &slice.endpoints)
            .filter(|endpoint| {
                endpoint
                    .conditions
                    .as_ref()
                    .and_then(|c| c.ready)
                    .unwrap_or(true)
            })
            .count();
        hairpin_services.push((ObjectRef::new(config.namespace.clone(), name), ready));
    }
    hairpin_services
}

/// Cilium, from its ConfigMap and DaemonSet in kube-system: the agent's image and its
/// `kube-proxy-replacement` setting.
async fn read_cilium(
    client: &Client,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Option<CiliumFacts> {
    let cilium_config: Option<ConfigMap> = get(
        Api::namespaced(client.clone(), KUBE_SYSTEM),
        "cilium-config",
        "ConfigMap kube-system/cilium-config",
        bound,
        gaps,
    )
    .await;
    let cilium_daemon_set: Option<DaemonSet> = get(
        Api::namespaced(client.clone(), KUBE_SYSTEM),
        "cilium",
        "DaemonSet kube-system/cilium",
        bound,
        gaps,
    )
    .await;
    if cilium_config.is_none() && cilium_daemon_set.is_none() {
        return None;
    }
    let containers = cilium_daemon_set
        .as_ref()
        .and_then(|ds| ds.spec.as_ref())
        .and_then(|spec| spec.template.spec.as_ref())
        .map(|pod| pod.containers.as_slice())
        .unwrap_or_default();
    let image = containers
        .iter()
        .find(|c| c.name == "cilium-agent")
        .or_else(|| containers.first())
        .and_then(|container| container.image.clone());
    let kube_proxy_replacement = cilium_config
        .as_ref()
        .and_then(|cm| cm.data.as_ref())
        .and_then(|data| data.get("kube-proxy-replacement"))
        .cloned();
    Some(CiliumFacts::new(
        image.as_deref(),
        kube_proxy_replacement.as_deref(),
    ))
}

/// The CNI agents that may replace kube-proxy for pods: Cilium, Calico (and whether its
/// eBPF dataplane is on), Antrea, kube-router; each by name, as their installers name them.
async fn read_cni(client: &Client, bound: Duration, gaps: &mut Vec<String>) -> CniFacts {
    let system = || Api::<DaemonSet>::namespaced(client.clone(), KUBE_SYSTEM);
    let mut cni = CniFacts {
        cilium: read_cilium(client, bound, gaps).await,
        ..CniFacts::default()
    };
    let what = "DaemonSet kube-system/antrea-agent";
    cni.antrea = get(system(), "antrea-agent", what, bound, gaps)
        .await
        .map(|ds| AgentFacts::antrea(&ds));
    let what = "DaemonSet kube-system/kube-router";
    cni.kube_router = get(system(), "kube-router", what, bound, gaps)
        .await
        .map(|ds| AgentFacts::kube_router(&ds));
    for namespace in [KUBE_SYSTEM, "calico-system"] {
        let found: Option<DaemonSet> = get(
            Api::namespaced(client.clone(), namespace),
            "calico-node",
            &format!("DaemonSet {namespace}/calico-node"),
            bound,
            gaps,
        )
        .await;
        if let Some(ds) = found {
            let ebpf = read_calico_ebpf(client, bound, gaps).await;
            cni.calico = Some(AgentFacts::calico(&ds, ebpf));
            break;
        }
    }
    cni
}

/// Whether Calico's eBPF dataplane is on: the operator's Installation `default`
/// (`spec.calicoNetwork.linuxDataplane: BPF`), else the FelixConfiguration `default`
/// (`spec.bpfEnabled`); None when neither says (then `FELIX_BPFENABLED` on calico-node).
async fn read_calico_ebpf(
    client: &Client,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Option<(bool, String)> {
    let installation = get_cluster_scoped(
        client,
        ("operator.tigera.io", "v1", "Installation", "installations"),
        "default",
        bound,
        gaps,
    )
    .await;
    if let Some(dataplane) = installation
        .as_ref()
        .and_then(|i| i.data["spec"]["calicoNetwork"]["linuxDataplane"].as_str())
    {
        return Some((
            dataplane == "BPF",
            format!(
                "Installation default linuxDataplane: {}",
                hairpin_planner::escape::Text(dataplane)
            ),
        ));
    }
    let felix = get_cluster_scoped(
        client,
        (
            "crd.projectcalico.org",
            "v1",
            "FelixConfiguration",
            "felixconfigurations",
        ),
        "default",
        bound,
        gaps,
    )
    .await;
    let enabled = felix.as_ref()?.data["spec"]["bpfEnabled"].as_bool()?;
    Some((
        enabled,
        format!("FelixConfiguration default bpfEnabled: {enabled}"),
    ))
}

/// A cluster-scoped custom resource by name: None when it or its CRD does not exist.
async fn get_cluster_scoped(
    client: &Client,
    (group, version, kind, plural): (&str, &str, &str, &str),
    name: &str,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Option<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    get(api, name, &format!("{kind} {name} ({group})"), bound, gaps).await
}

/// kube-proxy's DaemonSet in kube-system and the ConfigMap its pods mount; and whether the
/// DaemonSet could be read (its absence then proves none runs).
async fn read_kube_proxy(
    client: &Client,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> (Option<KubeProxyFacts>, bool) {
    let before = gaps.len();
    let daemon_set: Option<DaemonSet> = get(
        Api::namespaced(client.clone(), KUBE_SYSTEM),
        "kube-proxy",
        "DaemonSet kube-system/kube-proxy",
        bound,
        gaps,
    )
    .await;
    let read = gaps.len() == before;
    let Some(daemon_set) = daemon_set else {
        return (None, read);
    };
    let name = dataplane::kube_proxy_config_map(&daemon_set);
    let config_map: Option<ConfigMap> = get(
        Api::namespaced(client.clone(), KUBE_SYSTEM),
        &name,
        &format!("ConfigMap kube-system/{name}"),
        bound,
        gaps,
    )
    .await;
    (
        Some(KubeProxyFacts::read(&daemon_set, config_map.as_ref())),
        read,
    )
}

/// The version of each cloud controller that computes `ipMode` and runs in the cluster (its
/// Deployment, read only when a Service of its cloud exists).
async fn read_ccms(
    client: &Client,
    snapshot: &ClusterSnapshot,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Vec<(String, Option<String>)> {
    let mut found = Vec::new();
    for ccm in CCM_DEPLOYMENTS {
        let used = snapshot.services.iter().any(|svc| {
            hairpin_planner::native::ccm_ip_mode(svc)
                .is_some_and(|(name, _)| name == ccm.controller)
        });
        if !used {
            continue;
        }
        let deployment: Option<Deployment> = get(
            Api::namespaced(client.clone(), ccm.namespace),
            ccm.name,
            &format!("Deployment {}/{}", ccm.namespace, ccm.name),
            bound,
            gaps,
        )
        .await;
        if let Some(deployment) = deployment {
            found.push((
                ccm.controller.to_owned(),
                deployment_version(&deployment, &[]),
            ));
        }
    }
    found
}

/// cert-manager's controller Deployment (`cert-manager/cert-manager`, its chart's default).
async fn read_cert_manager(
    client: &Client,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Option<CertManagerFacts> {
    let deployment: Option<Deployment> = get(
        Api::namespaced(client.clone(), "cert-manager"),
        "cert-manager",
        "Deployment cert-manager/cert-manager",
        bound,
        gaps,
    )
    .await;
    deployment.map(|deployment| CertManagerFacts {
        deployment: "cert-manager/cert-manager".into(),
        version: deployment_version(&deployment, &["cert-manager-controller", "cert-manager"]),
    })
}

/// The image tag of a Deployment's container named one of `names`, else of its first.
fn deployment_version(deployment: &Deployment, names: &[&str]) -> Option<String> {
    let containers = &deployment.spec.as_ref()?.template.spec.as_ref()?.containers;
    containers
        .iter()
        .find(|c| names.contains(&c.name.as_str()))
        .or_else(|| containers.first())?
        .image
        .as_deref()
        .and_then(dataplane::image_tag)
}

/// hairpin's status admission policy `name` and its binding of the same name (the chart's),
/// both by name. A cluster before 1.30 cannot have one (nothing is read); there, and where the
/// API is not served, the facts say it is not available.
async fn read_admission_policy(
    client: &Client,
    name: &str,
    version: Option<(u32, u32)>,
    hairpin_installed: bool,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Option<AdmissionPolicyFacts> {
    let mut facts = AdmissionPolicyFacts {
        name: name.to_owned(),
        available: version.is_none_or(|v| v >= (1, 30)),
        hairpin_installed,
        ..AdmissionPolicyFacts::default()
    };
    if !facts.available {
        return Some(facts);
    }
    let policy = get_served::<ValidatingAdmissionPolicy>(client, name, bound, gaps).await?;
    let binding = get_served::<ValidatingAdmissionPolicyBinding>(client, name, bound, gaps).await?;
    let (Found::Served(policy), Found::Served(binding)) = (policy, binding) else {
        // The API is not served (an older or trimmed API server).
        facts.available = false;
        return Some(facts);
    };
    facts.policy = policy.is_some();
    facts.failure_policy = policy
        .as_ref()
        .and_then(|p| p.spec.as_ref()?.failure_policy.clone());
    facts.binding_actions = binding
        .as_ref()
        .and_then(|b| b.spec.as_ref())
        .filter(|spec| spec.policy_name.as_deref() == Some(name))
        .and_then(|spec| spec.validation_actions.clone())
        .unwrap_or_default();
    facts.binding = binding.is_some();
    Some(facts)
}

/// What a get by name found.
enum Found<K> {
    /// The API is served; the object, when it exists.
    Served(Option<K>),
    /// The API is not served: a bare 404 (no Status), not the 404 of an absent object.
    NotServed,
}

/// A cluster-scoped object by name; `None` with a gap when it cannot be read.
async fn get_served<K>(
    client: &Client,
    name: &str,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Option<Found<K>>
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let what = format!("{} {name}", K::kind(&()));
    let api: Api<K> = Api::all(client.clone());
    match tokio::time::timeout(bound, api.get_opt(name)).await {
        Ok(Ok(object)) => Some(Found::Served(object)),
        // A 404 that is not "this object is absent" (that one is `Ok(None)`): the API itself
        // is not served.
        Ok(Err(kube::Error::Api(status))) if status.code == 404 => Some(Found::NotServed),
        Ok(Err(err)) => {
            gaps.push(format!("{what}: {}", short_kube_error(&err)));
            None
        }
        Err(_) => {
            gaps.push(format!("{what}: no answer within {bound:?}"));
            None
        }
    }
}

/// Whether GKE's kube-dns runs: its Deployment or its ConfigMap in kube-system.
async fn read_kube_dns(
    client: &Client,
    config: &PlannerConfig,
    snapshot: &ClusterSnapshot,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> bool {
    let deployment: Option<Deployment> = get(
        Api::namespaced(client.clone(), KUBE_SYSTEM),
        "kube-dns",
        "Deployment kube-system/kube-dns",
        bound,
        gaps,
    )
    .await;
    // Already read when it is one of the CoreDNS candidates (the default).
    let config_map = if config
        .read_config_maps()
        .iter()
        .any(|(namespace, name)| namespace == KUBE_SYSTEM && name == "kube-dns")
    {
        snapshot.config_map(KUBE_SYSTEM, "kube-dns").cloned()
    } else {
        get::<ConfigMap>(
            Api::namespaced(client.clone(), KUBE_SYSTEM),
            "kube-dns",
            "ConfigMap kube-system/kube-dns",
            bound,
            gaps,
        )
        .await
    };
    deployment.is_some() || config_map.is_some()
}

/// One object by name: None when it does not exist, or (with a gap) when it cannot be read.
async fn get<K>(
    api: Api<K>,
    name: &str,
    what: &str,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Option<K>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match tokio::time::timeout(bound, api.get_opt(name)).await {
        Ok(Ok(object)) => object,
        Ok(Err(err)) => {
            gaps.push(format!("{what}: {}", short_kube_error(&err)));
            None
        }
        Err(_) => {
            gaps.push(format!("{what}: no answer within {bound:?}"));
            None
        }
    }
}

/// The `Hairpin` objects, read as JSON (the doctor does not link the controller's types).
/// An absent CRD is not a gap: clusters without it get no word about it.
async fn list_hairpins(
    client: &Client,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Option<Vec<serde_json::Value>> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(HAIRPIN_API_GROUP, HAIRPIN_API_VERSION, "Hairpin"),
        HAIRPIN_PLURAL,
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    match tokio::time::timeout(bound, api.list(&ListParams::default())).await {
        Ok(Err(kube::Error::Api(status))) if status.code == 404 => None,
        listed => {
            let items = items_or_gap(listed, "Hairpins", bound, gaps);
            Some(
                items
                    .iter()
                    .filter_map(|object| serde_json::to_value(object).ok())
                    .collect(),
            )
        }
    }
}

async fn list<K>(api: Api<K>, what: &str, bound: Duration, gaps: &mut Vec<String>) -> Vec<K>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    list_with(api, &ListParams::default(), what, bound, gaps).await
}

async fn list_with<K>(
    api: Api<K>,
    params: &ListParams,
    what: &str,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Vec<K>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let listed = tokio::time::timeout(bound, api.list(params)).await;
    items_or_gap(listed, what, bound, gaps)
}

/// Lists a Gateway API kind; an absent API (404) is not a gap.
async fn list_optional<K>(
    client: &Client,
    what: &str,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Vec<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    match tokio::time::timeout(bound, api.list(&ListParams::default())).await {
        Ok(Err(kube::Error::Api(status))) if status.code == 404 => Vec::new(),
        listed => items_or_gap(listed, what, bound, gaps),
    }
}

/// The objects of `(group, kind, plural)` at the first of `versions` (newest first) the API
/// serves; none, and no gap, when it serves none of them (the CRD is not installed).
async fn list_first_served(
    client: &Client,
    (group, kind, plural): (&str, &str, &str),
    versions: &[&str],
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Vec<DynamicObject> {
    for version in versions {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        match tokio::time::timeout(bound, api.list(&ListParams::default())).await {
            Ok(Err(kube::Error::Api(status))) if status.code == 404 => {}
            listed => {
                return items_or_gap(listed, &format!("{kind}s ({group}/{version})"), bound, gaps);
            }
        }
    }
    Vec::new()
}

/// The listed items, or none and a gap saying why `what` could not be listed within `bound`.
fn items_or_gap<K>(
    listed: Result<kube::Result<ObjectList<K>>, tokio::time::error::Elapsed>,
    what: &str,
    bound: Duration,
    gaps: &mut Vec<String>,
) -> Vec<K>
where
    K: Clone,
{
    match listed {
        Ok(Ok(list)) => list.items,
        Ok(Err(err)) => {
            gaps.push(format!("{what}: {}", short_kube_error(&err)));
            Vec::new()
        }
        Err(_) => {
            gaps.push(format!("{what}: no answer within {bound:?}"));
            Vec::new()
        }
    }
}

fn short_kube_error(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if status.code == 403 => {
            format!("forbidden ({})", status.message)
        }
        other => other.to_string(),
    }
}

/// `"1"`, `"30+"` -> `(1, 30)`.
pub fn parse_version(major: &str, minor: &str) -> Option<(u32, u32)> {
    let digits = |s: &str| -> Option<u32> {
        s.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .ok()
    };
    Some((digits(major)?, digits(minor)?))
}

/// The facts about `host` (which resolved to `addresses` here), from one read and its plan.
pub fn facts_for(
    read: &ClusterRead,
    plan: &Plan,
    config: &PlannerConfig,
    host: &str,
    addresses: &[IpAddr],
) -> ClusterFacts {
    facts_for_port(read, plan, config, host, addresses, None)
}

/// [`facts_for`] for `host` probed on `port`: a receiver whose setting differs per port
/// (issue 38) is reported as it is on that port, and a disagreement on another port of the
/// load balancer is not this port's.
pub fn facts_for_port(
    read: &ClusterRead,
    plan: &Plan,
    config: &PlannerConfig,
    host: &str,
    addresses: &[IpAddr],
    port: Option<u16>,
) -> ClusterFacts {
    let host = hairpin_planner::name::DnsName::parse(host)
        .map_or_else(|_| host.to_ascii_lowercase(), String::from);
    let mut load_balancer = load_balancer_of(read, plan, &host, addresses);
    if let (Some(lb), Some(port)) = (load_balancer.as_mut(), port) {
        on_port(lb, plan, port);
    }
    let dns = dns_facts(read, plan, config, &host);
    let hairpin = HairpinFacts {
        services: read
            .hairpin_services
            .iter()
            .map(|(service, _)| format!("{}/{}", service.namespace, service.name))
            .collect(),
        ready_endpoints: read.hairpin_services.iter().map(|(_, ready)| ready).sum(),
        status: load_balancer
            .as_ref()
            .and_then(|lb| hairpin_status(read, &lb.service)),
    };
    let ip_mode = dataplane::ip_mode_support(
        read.kube_proxy.as_ref(),
        &read.cni,
        read.version,
        read.kube_proxy_read,
    );
    let ccm = load_balancer
        .as_ref()
        .and_then(|lb| ccm_facts(read, &lb.service));
    let cure = load_balancer
        .as_ref()
        .map(|lb| cure_facts(read, plan, config, lb, ccm.as_ref(), &ip_mode));
    ClusterFacts {
        kubernetes_version: read.version,
        load_balancer,
        dns,
        hairpin,
        cni: read.cni.clone(),
        kube_proxy: read.kube_proxy.clone(),
        ip_mode,
        ccm,
        cure,
        cert_manager: read.cert_manager.clone(),
        admission_policy: read.admission_policy.clone(),
        gaps: read.gaps.clone(),
    }
}

/// The Service object of `service` (`namespace/name`).
fn service_object<'a>(read: &'a ClusterRead, service: &str) -> Option<&'a Service> {
    let (namespace, name) = service.split_once('/')?;
    read.snapshot.service(namespace, name)
}

/// The cloud controller that computes `service`'s `ipMode`, with its version when found.
fn ccm_facts(read: &ClusterRead, service: &str) -> Option<CcmFacts> {
    let (controller, setting) =
        hairpin_planner::native::ccm_ip_mode(service_object(read, service)?)?;
    Some(CcmFacts {
        controller: controller.to_owned(),
        setting: setting.to_owned(),
        version: read
            .ccms
            .iter()
            .find(|(name, _)| name == controller)
            .and_then(|(_, version)| version.clone()),
        since: CCM_DEPLOYMENTS
            .iter()
            .find(|ccm| ccm.controller == controller)
            .map(|ccm| {
                let (major, minor, patch) = ccm.since;
                format!("v{major}.{minor}.{patch}")
            }),
    })
}

/// The cure for the load balancer `lb`: hairpin's probe record of it (`hairpin-native`) and
/// the plan's choice, judged by [`cure::judge`].
fn cure_facts(
    read: &ClusterRead,
    plan: &Plan,
    config: &PlannerConfig,
    lb: &LoadBalancerFacts,
    ccm: Option<&CcmFacts>,
    ip_mode: &dataplane::IpModeSupport,
) -> cure::CureFacts {
    let object = service_object(read, &lb.service);
    let service = object.map(|svc| ObjectRef::from_meta(&svc.metadata));
    let record = hairpin_planner::native::NativeRecord::read(&read.snapshot, config).ok();
    let entry = record
        .as_ref()
        .zip(service.as_ref())
        .and_then(|(record, service)| {
            record.entry(service, object.and_then(|svc| svc.metadata.uid.as_deref()))
        });
    let choice = service
        .as_ref()
        .and_then(|service| plan.cures.iter().find(|c| c.service == *service));
    // How it reaches the nodes: the plan's word, or read from the Service as the plan would.
    let delivery = choice.map(|c| c.delivery.clone()).or_else(|| {
        object.map(|svc| {
            hairpin_planner::delivery::delivery_of(svc, &read.snapshot, config, &mut Vec::new())
        })
    });
    cure::judge(lb, ccm, ip_mode, entry, choice, delivery)
}

/// Narrows the receiver facts of `lb` to Service port `port` where its receiver's setting
/// differs per port: the receiver line says that port's setting, and a disagreement is kept
/// only when it is on that port.
fn on_port(lb: &mut LoadBalancerFacts, plan: &Plan, port: u16) {
    let service = &lb.service;
    let receiver = plan
        .load_balancers
        .iter()
        .filter(|l| l.load_balancer.service.to_string() == *service)
        .filter_map(|l| l.load_balancer.receiver.as_ref())
        .chain(
            plan.not_needed
                .iter()
                .filter(|n| n.service.to_string() == *service)
                .filter_map(|n| n.receiver.as_deref()),
        )
        .next();
    let Some(receiver) = receiver.filter(|r| !r.ports.is_empty()) else {
        return;
    };
    lb.receiver = Some(receiver.on_port(i32::from(port)).describe());
    let on_this_port = format!("on port {port}:");
    lb.mismatch = lb.mismatch.take().and_then(|m| {
        m.split("; BROKEN")
            .find(|part| part.contains(&on_this_port))
            .map(|part| {
                if part.starts_with("BROKEN") {
                    part.to_owned()
                } else {
                    format!("BROKEN{part}")
                }
            })
    });
}

/// The load balancer behind `host`: the planned one that has it among its hostnames or
/// `addresses` among its addresses, else one that needs no hairpin at one of `addresses`.
fn load_balancer_of(
    read: &ClusterRead,
    plan: &Plan,
    host: &str,
    addresses: &[IpAddr],
) -> Option<LoadBalancerFacts> {
    let address_strings: Vec<String> = addresses.iter().map(ToString::to_string).collect();
    let planned = plan
        .load_balancers
        .iter()
        .find(|lb| lb.hostnames.iter().any(|name| name.matches(host)));
    let planned_by_ip = || {
        plan.load_balancers
            .iter()
            .find(|lb| lb.load_balancer.ips.iter().any(|ip| addresses.contains(ip)))
    };
    if let Some(lb) = planned.or_else(planned_by_ip) {
        let mut facts = lb_facts(
            read,
            &lb.load_balancer.service,
            true,
            None,
            lb.load_balancer
                .ports
                .iter()
                .find_map(|p| p.proxy_protocol)
                .map(|v| v.as_str().to_owned()),
        );
        facts.receiver = lb.load_balancer.receiver.as_ref().map(|r| r.describe());
        facts.receiver = facts.receiver.or_else(|| receiver_unread(read));
        // A mismatch on a load balancer hairpin keeps curing (its cure was in place).
        facts.mismatch = lb.load_balancer.receiver_mismatch.clone();
        Some(facts)
    } else {
        plan.not_needed
            .iter()
            .find(|lb| {
                lb.status_addresses
                    .iter()
                    .any(|address| address_strings.contains(address))
            })
            .map(|lb| {
                let mut facts = lb_facts(
                    read,
                    &lb.service,
                    false,
                    Some(lb.reason.describe().to_owned()),
                    None,
                );
                facts.receiver = lb.receiver.as_ref().map(|r| r.describe());
                facts.receiver = facts.receiver.or_else(|| receiver_unread(read));
                if lb.reason == SkipReason::ReceiverMismatch {
                    let subject = format!("Service {}", lb.service);
                    let broken: Vec<&str> = plan
                        .warnings
                        .iter()
                        .filter(|w| {
                            w.subject == escape::text(&subject) && w.message.starts_with("BROKEN")
                        })
                        .map(|w| w.message.as_str())
                        .collect();
                    // Per port (issue 38), one warning each: joined, narrowed by `on_port`.
                    facts.mismatch = (!broken.is_empty()).then(|| broken.join("; "));
                }
                facts
            })
    }
}

/// What the DNS ConfigMaps say about `host`: hairpin's markers, the host in hairpin's block,
/// the reload plugin, node-local-dns, whether hairpin can edit them at all.
fn dns_facts(read: &ClusterRead, plan: &Plan, config: &PlannerConfig, host: &str) -> DnsFacts {
    let dns_text = dns_texts(read, config);
    let block = dns_text
        .iter()
        .filter_map(|text| hairpin_block(text))
        .collect::<Vec<_>>()
        .join("\n");
    let escaped = host.replace('.', "\\.");
    DnsFacts {
        coredns_found: !dns_text.is_empty(),
        markers_present: !block.is_empty(),
        host_in_block: !block.is_empty() && (block.contains(host) || block.contains(&escaped)),
        reload_plugin: corefile(read, config).map(|text| {
            text.lines()
                .any(|line| line.trim() == "reload" || line.trim().starts_with("reload "))
        }),
        node_local_dns: read.snapshot.config_maps.iter().any(|cm| {
            cm.metadata.namespace.as_deref() == Some(config.node_local_dns_namespace.as_str())
                && cm
                    .metadata
                    .name
                    .as_ref()
                    .is_some_and(|name| config.node_local_dns_config_maps.contains(name))
        }),
        uneditable: uneditable_dns(read, plan, config),
        eks_add_on: eks_add_on(read, plan),
    }
}

/// The `Hairpin` object of the load balancer `service` (`namespace/name`: same namespace and
/// name as the Service).
fn hairpin_status(read: &ClusterRead, service: &str) -> Option<HairpinStatusFacts> {
    let (namespace, name) = service.split_once('/')?;
    let object = read.hairpins.as_ref()?.iter().find(|object| {
        object["metadata"]["namespace"] == namespace && object["metadata"]["name"] == name
    })?;
    Some(HairpinStatusFacts::from_object(service.to_owned(), object))
}

/// Why hairpin cannot edit this cluster's DNS, when it cannot: kube-dns without CoreDNS, or a
/// CoreDNS ConfigMap hairpin would write that an add-on manager reconciles.
fn uneditable_dns(
    read: &ClusterRead,
    plan: &Plan,
    config: &PlannerConfig,
) -> Option<UneditableDns> {
    // The `kube-dns` ConfigMap is one of the names a CoreDNS configuration may have; kube-dns's
    // own has no Corefile.
    if corefile(read, config).is_none() && read.kube_dns {
        return Some(UneditableDns::KubeDns);
    }
    // Nothing at all: Cloud DNS for GKE. Only when the ConfigMaps could be read (a read that
    // failed is a gap, not an absence).
    if corefile(read, config).is_none() && !read.dns_unread {
        return Some(UneditableDns::NoDnsConfig);
    }
    let written: Vec<String> = plan
        .dns
        .iter()
        .flat_map(|dns| &dns.writes)
        .map(|write| format!("{}/{}", write.config_map.namespace, write.config_map.name))
        .collect();
    read.snapshot.config_maps.iter().find_map(|cm| {
        let namespace = cm.metadata.namespace.as_deref()?;
        let name = cm.metadata.name.as_deref()?;
        let key = format!("{namespace}/{name}");
        let mode = cm.metadata.labels.as_ref()?.get(ADDON_MODE_LABEL)?;
        (mode == "Reconcile" && written.contains(&key)).then(|| UneditableDns::ReconciledCoreDns {
            config_map: key,
            label: format!("{ADDON_MODE_LABEL}={mode}"),
        })
    })
}

/// The first ConfigMap hairpin writes that the EKS CoreDNS add-on applied: a `managedFields`
/// entry of field manager `eks`. Whether that entry still owns the key hairpin writes is
/// reported, not required: an update by another writer (hairpin's own, `kubectl edit`) takes
/// the field over from `eks`, and the next add-on update with `OVERWRITE` takes it back.
fn eks_add_on(read: &ClusterRead, plan: &Plan) -> Option<EksAddOn> {
    plan.dns
        .iter()
        .flat_map(|dns| &dns.writes)
        .find_map(|write| {
            let target = &write.config_map;
            let entries = config_map(read, &target.namespace, &target.name)?
                .metadata
                .managed_fields
                .as_ref()?;
            let is_eks = |manager: Option<&str>| manager == Some(EKS_FIELD_MANAGER);
            if !entries.iter().any(|entry| is_eks(entry.manager.as_deref())) {
                return None;
            }
            let owners: Vec<&str> = entries
                .iter()
                .filter(|entry| owns_data_key(entry, &write.key))
                .filter_map(|entry| entry.manager.as_deref())
                .collect();
            let mut other_owners: Vec<String> = owners
                .iter()
                .filter(|manager| !is_eks(Some(manager)))
                .map(|manager| (*manager).to_owned())
                .collect();
            other_owners.sort();
            other_owners.dedup();
            Some(EksAddOn {
                config_map: format!("{}/{}", target.namespace, target.name),
                key: write.key.clone(),
                eks_owns_key: owners.iter().any(|manager| is_eks(Some(manager))),
                other_owners,
            })
        })
}

/// Whether a `managedFields` entry owns the ConfigMap key `key` (`f:data` with `f:<key>`, or
/// the whole `f:data`).
fn owns_data_key(entry: &ManagedFieldsEntry, key: &str) -> bool {
    entry
        .fields_v1
        .as_ref()
        .and_then(|fields| fields.0.get("f:data")?.as_object())
        .is_some_and(|data| data.is_empty() || data.contains_key(&format!("f:{key}")))
}

fn lb_facts(
    read: &ClusterRead,
    service: &ObjectRef,
    needs_hairpin: bool,
    not_needed_reason: Option<String>,
    proxy_protocol: Option<String>,
) -> LoadBalancerFacts {
    let object = read.snapshot.services.iter().find(|s| {
        s.metadata.namespace.as_deref() == Some(service.namespace.as_str())
            && s.metadata.name.as_deref() == Some(service.name.as_str())
    });
    let annotations: BTreeMap<String, String> = object
        .and_then(|s| s.metadata.annotations.clone())
        .unwrap_or_default();
    let ingress = object
        .and_then(|s| s.status.as_ref())
        .and_then(|status| status.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|entries| {
            entries
                .iter()
                .map(|entry| LbIngress {
                    ip: entry.ip.clone(),
                    hostname: entry.hostname.clone(),
                    ip_mode: entry.ip_mode.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    LoadBalancerFacts {
        service: format!("{}/{}", service.namespace, service.name),
        provider: Provider::detect(&annotations),
        proxy_protocol,
        ingress,
        external_traffic_policy: object
            .and_then(|s| s.spec.as_ref())
            .and_then(|spec| spec.external_traffic_policy.clone()),
        needs_hairpin,
        not_needed_reason,
        receiver: None,
        mismatch: None,
    }
}

fn config_map<'a>(read: &'a ClusterRead, namespace: &str, name: &str) -> Option<&'a ConfigMap> {
    read.snapshot.config_maps.iter().find(|cm| {
        cm.metadata.namespace.as_deref() == Some(namespace)
            && cm.metadata.name.as_deref() == Some(name)
    })
}

fn corefile(read: &ClusterRead, config: &PlannerConfig) -> Option<String> {
    config.coredns_config_maps.iter().find_map(|name| {
        config_map(read, &config.coredns_namespace, name)?
            .data
            .as_ref()?
            .get(&config.corefile_key)
            .cloned()
    })
}

/// The Corefile and every `coredns-custom` value: where hairpin's block can live.
fn dns_texts(read: &ClusterRead, config: &PlannerConfig) -> Vec<String> {
    let mut texts: Vec<String> = corefile(read, config).into_iter().collect();
    if let Some(data) = config_map(
        read,
        &config.coredns_namespace,
        &config.coredns_custom_config_map,
    )
    .and_then(|cm| cm.data.as_ref())
    {
        texts.extend(data.values().cloned());
    }
    texts
}

fn hairpin_block(text: &str) -> Option<String> {
    let start = text.find(hairpin_planner::markers::BEGIN_PREFIX)?;
    let rest = &text[start..];
    let end = rest
        .find(hairpin_planner::markers::END_MARKER)
        .unwrap_or(rest.len());
    Some(rest[..end].to_owned())
}

/// The exact hostnames of a plan (a wildcard cannot be probed), sorted, once each: what the
/// doctor checks when given no host. The doctor resolves nothing upstream, so the names its
/// plan could not verify (not resolved) are checked too: the controller redirects those that
/// resolve to their load balancer.
pub fn planned_hostnames(plan: &Plan) -> Vec<String> {
    let unresolved = plan
        .verification
        .unverified
        .iter()
        .filter(|u| u.reason == hairpin_planner::verify::UnverifiedReason::NotResolved)
        .map(|u| &u.hostname);
    let mut hosts: Vec<String> = plan
        .load_balancers
        .iter()
        .flat_map(|lb| &lb.hostnames)
        .map(|hostname| &hostname.name)
        .chain(unresolved)
        .filter(|name| !name.starts_with("*."))
        .cloned()
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// Plans from a read, as the controller would.
pub fn plan(read: &ClusterRead, config: &PlannerConfig) -> Plan {
    hairpin_planner::desired(&read.snapshot, config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_with_their_suffixes() {
        assert_eq!(parse_version("1", "30+"), Some((1, 30)));
        assert_eq!(parse_version("1", "28"), Some((1, 28)));
        assert_eq!(parse_version("", "x"), None);
    }

    #[test]
    fn the_block_is_found_between_the_markers() {
        let text = ".:53 {\n    # BEGIN hairpin (managed)\n    rewrite name exact shop.example.com x\n    # END hairpin\n    reload\n}\n";
        let block = hairpin_block(text).unwrap();
        assert!(block.contains("shop.example.com"));
        assert!(!block.contains("reload"));
        assert!(hairpin_block("no markers").is_none());
    }
}
