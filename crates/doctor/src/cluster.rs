//! The cluster half of the doctor: one bounded read of the API (no watches), then pure
//! functions that turn it into [`ClusterFacts`] per host using the planner's own discovery and
//! plan, so the doctor judges exactly as the controller plans.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use gateway_api::tlsroutes::TlsRoute;
use hairpin_planner::config::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use hairpin_planner::{ClusterSnapshot, ObjectRef, Plan, PlannerConfig};
use hairpin_runtime::kubeconfig::ConfigError;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, ObjectList, PartialObjectMeta};
use kube::{Api, Client};
use serde::de::DeserializeOwned;

use crate::providers::Provider;
use crate::verdict::{ClusterFacts, DnsFacts, HairpinFacts, LbIngress, LoadBalancerFacts};

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
}

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
    /// Lists that failed (forbidden...), for the report.
    pub gaps: Vec<String>,
}

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
    let mut gaps = Vec::new();
    // An HTTP error still proves the API answers (a proxy may hide /version); only no answer
    // at all makes the cluster checks unavailable.
    let version = match tokio::time::timeout(bound, client.apiserver_version()).await {
        Err(_) => {
            return Err(ClusterError::Unavailable(format!(
                "the API server did not answer within {bound:?}"
            )));
        }
        Ok(Ok(info)) => parse_version(&info.major, &info.minor),
        Ok(Err(kube::Error::Api(status))) => {
            gaps.push(format!(
                "the Kubernetes version (/version: {})",
                status.message
            ));
            None
        }
        Ok(Err(err)) => {
            return Err(ClusterError::Unavailable(format!(
                "the API server cannot be reached: {err}"
            )));
        }
    };
    let config = &options.planner;
    let mut snapshot = ClusterSnapshot {
        services: list(Api::all(client.clone()), "Services", bound, &mut gaps).await,
        ingresses: list(Api::all(client.clone()), "Ingresses", bound, &mut gaps).await,
        ingress_classes: list(Api::all(client.clone()), "IngressClasses", bound, &mut gaps).await,
        gateways: list_optional::<Gateway>(client, "Gateways", bound, &mut gaps).await,
        http_routes: list_optional::<HttpRoute>(client, "HTTPRoutes", bound, &mut gaps).await,
        grpc_routes: list_optional::<GrpcRoute>(client, "GRPCRoutes", bound, &mut gaps).await,
        tls_routes: list_optional::<TlsRoute>(client, "TLSRoutes", bound, &mut gaps).await,
        ..ClusterSnapshot::default()
    };
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
    for namespace in [&config.coredns_namespace, &config.namespace] {
        snapshot.config_maps.extend(
            list::<ConfigMap>(
                Api::namespaced(client.clone(), namespace),
                &format!("ConfigMaps in {namespace}"),
                bound,
                &mut gaps,
            )
            .await,
        );
    }
    let mut hairpin_services = Vec::new();
    let ours: Vec<Service> = list_with(
        Api::namespaced(client.clone(), &config.namespace),
        &ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")),
        "hairpin Services",
        bound,
        &mut gaps,
    )
    .await;
    for service in ours {
        let name = service.metadata.name.clone().unwrap_or_default();
        let slices: Vec<EndpointSlice> = list_with(
            Api::namespaced(client.clone(), &config.namespace),
            &ListParams::default().labels(&format!("kubernetes.io/service-name={name}")),
            "EndpointSlices",
            bound,
            &mut gaps,
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
    Ok(ClusterRead {
        version,
        snapshot,
        hairpin_services,
        gaps,
    })
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
    let host = hairpin_planner::name::DnsName::parse(host)
        .map_or_else(|_| host.to_ascii_lowercase(), String::from);
    let address_strings: Vec<String> = addresses.iter().map(ToString::to_string).collect();
    let planned = plan
        .load_balancers
        .iter()
        .find(|lb| lb.hostnames.iter().any(|name| name.matches(&host)));
    let planned_by_ip = || {
        plan.load_balancers
            .iter()
            .find(|lb| lb.load_balancer.ips.iter().any(|ip| addresses.contains(ip)))
    };
    let load_balancer = if let Some(lb) = planned.or_else(planned_by_ip) {
        Some(lb_facts(
            read,
            &lb.load_balancer.service,
            true,
            None,
            lb.load_balancer
                .ports
                .iter()
                .find_map(|p| p.proxy_protocol)
                .map(|v| v.as_str().to_owned()),
        ))
    } else {
        plan.not_needed
            .iter()
            .find(|lb| {
                lb.status_addresses
                    .iter()
                    .any(|address| address_strings.contains(address))
            })
            .map(|lb| {
                lb_facts(
                    read,
                    &lb.service,
                    false,
                    Some(lb.reason.describe().to_owned()),
                    None,
                )
            })
    };

    let dns_text = dns_texts(read, config);
    let block = dns_text
        .iter()
        .filter_map(|text| hairpin_block(text))
        .collect::<Vec<_>>()
        .join("\n");
    let escaped = host.replace('.', "\\.");
    let dns = DnsFacts {
        coredns_found: !dns_text.is_empty(),
        markers_present: !block.is_empty(),
        host_in_block: !block.is_empty() && (block.contains(&host) || block.contains(&escaped)),
        reload_plugin: corefile(read, config).map(|text| {
            text.lines()
                .any(|line| line.trim() == "reload" || line.trim().starts_with("reload "))
        }),
        node_local_dns: read.snapshot.config_maps.iter().any(|cm| {
            cm.metadata.namespace.as_deref() == Some(config.coredns_namespace.as_str())
                && cm
                    .metadata
                    .name
                    .as_ref()
                    .is_some_and(|name| config.node_local_dns_config_maps.contains(name))
        }),
    };
    let hairpin = HairpinFacts {
        services: read
            .hairpin_services
            .iter()
            .map(|(service, _)| format!("{}/{}", service.namespace, service.name))
            .collect(),
        ready_endpoints: read.hairpin_services.iter().map(|(_, ready)| ready).sum(),
    };
    ClusterFacts {
        kubernetes_version: read.version,
        load_balancer,
        dns,
        hairpin,
        gaps: read.gaps.clone(),
    }
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
/// doctor checks when given no host.
pub fn planned_hostnames(plan: &Plan) -> Vec<String> {
    let mut hosts: Vec<String> = plan
        .load_balancers
        .iter()
        .flat_map(|lb| &lb.hostnames)
        .filter(|hostname| !hostname.is_wildcard())
        .map(|hostname| hostname.name.clone())
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
