//! Step 2: the hostnames each load balancer serves.
//!
//! Sources, for a load balancer Service `lb`:
//! - Ingresses whose `status.loadBalancer.ingress[]` holds one of `lb`'s status addresses:
//!   `rules[].host` and `tls[].hosts`. An Ingress with no status yet falls back to its class:
//!   `spec.ingressClassName`, else the `kubernetes.io/ingress.class` annotation, else the
//!   default IngressClass; the class's `spec.controller` names the controller, and
//!   [`CONTROLLER_APP_NAMES`] gives the names its Services usually carry in their
//!   `app.kubernetes.io/name`, `app` or `k8s-app` label or selector. The Ingress goes to the
//!   one `type: LoadBalancer` Service carrying such a name; when none or several do, it is
//!   reported and left out.
//!   The same heuristic picks between several load balancers that share one status address
//!   (MetalLB's `allow-shared-ip`); when it cannot, the hostnames are a conflict.
//! - Gateways whose `status.addresses` or `spec.addresses` hold one of `lb`'s addresses:
//!   listener hostnames, and the hostnames of HTTPRoutes, GRPCRoutes and TLSRoutes attached
//!   to them, intersected with the listener hostname as the Gateway API specifies.
//! - `external-dns.alpha.kubernetes.io/hostname` on `lb` (comma-separated), and on the
//!   Ingresses and Gateways matched to `lb` by the rules above; on a route attached to such
//!   a Gateway its names join the route's `spec.hostnames` and are matched against the
//!   listener hostname the same way (as external-dns's `gateway-*route` sources read them). On a Service that is not of
//!   `type: LoadBalancer` it is not read: nothing ties such a Service to a load balancer.
//! - Our `hostnames` annotation on `lb` (comma-separated).
//! - The CRD sources of [`crate::sources`] (Traefik, Istio, Contour), when installed.
//!
//! Any of these objects with our `ignore: "true"` annotation gives no hostname (the load
//! balancer Service itself is still planned from its other sources).
//!
//! Hostnames are validated and normalized by [`crate::name::Host`] (lowercase, no trailing
//! dot, a leading `*.` label is a wildcard), deduplicated and sorted. A hostname served by two load balancers is a
//! [`Conflict`]: it is planned for neither.
//!
//! A wildcard keeps what its source means by it ([`WildcardLabels`]): `*.example.com` from an
//! Ingress stands for exactly one label (`a.example.com`, not `a.b.example.com`), as the
//! Ingress API specifies; from a Gateway listener or a route it is a suffix match standing for
//! one or more labels (`a.example.com` and `a.b.example.com`, never `example.com`), as the
//! Gateway API specifies. The annotations keep the Ingress meaning. When one load balancer gets
//! the same wildcard with both meanings, the broader one wins.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use gateway_api::gateways::Gateway;
use gateway_api::gateways::GatewayListenersAllowedRoutesNamespacesFrom;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::admission::{Admission, Origin, Refusal, RefusalReason};
use crate::config::PlannerConfig;
use crate::name::WildcardLabels;
use crate::name::{Host, normalize_address};
use crate::snapshot::{ClusterSnapshot, ObjectRef};
use crate::warning::Warning;
use crate::{CustomSource, SourceKind};

/// external-dns's hostname annotation.
pub const EXTERNAL_DNS_ANNOTATION: &str = "external-dns.alpha.kubernetes.io/hostname";
/// The legacy Ingress class annotation.
pub const INGRESS_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";
/// Marks the default IngressClass.
pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";

/// IngressClass `spec.controller` (prefix) -> the names the controller's Services carry in
/// their `app.kubernetes.io/name` / `app` / `k8s-app` label or selector (as installed by the
/// projects' own charts and manifests).
pub const CONTROLLER_APP_NAMES: &[(&str, &[&str])] = &[
    ("k8s.io/ingress-nginx", &["ingress-nginx", "nginx-ingress"]),
    ("nginx.org/ingress-controller", &["nginx-ingress"]),
    ("traefik.io/ingress-controller", &["traefik"]),
    ("haproxy-ingress.github.io/controller", &["haproxy-ingress"]),
    (
        "haproxy.org/ingress-controller",
        &[
            "kubernetes-ingress",
            "haproxy-kubernetes-ingress",
            "haproxy-ingress",
        ],
    ),
    ("projectcontour.io/", &["contour", "envoy"]),
    ("ingress-controllers.konghq.com/", &["kong", "ingress-kong"]),
    ("k8s.io/ingress-azure", &["ingress-azure"]),
    ("caddy.io/", &["caddy-ingress-controller"]),
];

const APP_LABELS: &[&str] = &["app.kubernetes.io/name", "app", "k8s-app"];

/// A hostname and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Hostname {
    /// Normalized hostname, possibly a wildcard (`*.example.com`).
    pub name: String,
    /// Where it was found, e.g. `Ingress shop/web`, sorted.
    pub sources: Vec<String>,
    /// For a wildcard, how many labels its `*` covers (the broadest meaning among its
    /// sources); `None` for an exact name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wildcard_labels: Option<WildcardLabels>,
}

impl Hostname {
    /// `*.example.com` and the like.
    pub fn is_wildcard(&self) -> bool {
        self.name.starts_with("*.")
    }

    /// Whether a query for `host` (normalized: lowercase, no trailing dot) is redirected by
    /// this hostname: the same name, or a name its wildcard covers ([`WildcardLabels`]).
    pub fn matches(&self, host: &str) -> bool {
        if !self.name.starts_with('*') {
            return self.name == host;
        }
        wildcard_head(&self.name, host)
            .is_some_and(|head| self.wildcard_labels.unwrap_or_default().covers(head))
    }
}

/// A hostname served by more than one load balancer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Conflict {
    /// The hostname.
    pub hostname: String,
    /// The load balancer Services that claim it, sorted.
    pub load_balancers: Vec<ObjectRef>,
}

/// Hostnames per load balancer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Collected {
    /// Load balancer Service -> its hostnames (conflicts removed), sorted by name.
    pub per_lb: BTreeMap<ObjectRef, Vec<Hostname>>,
    /// Hostnames claimed by several load balancers.
    pub conflicts: Vec<Conflict>,
    /// Hostnames the admission policy refused ([`crate::admission`]), sorted.
    pub refused: Vec<Refusal>,
    /// Ingresses that could not be placed, policy inputs that do not parse...
    pub warnings: Vec<Warning>,
}

/// What the `*` of `wildcard` (`*.suffix`) stands for in `host`: the non-empty part of `host`
/// before `.suffix`, if any.
fn wildcard_head<'a>(wildcard: &str, host: &'a str) -> Option<&'a str> {
    let dot_suffix = wildcard.strip_prefix('*')?;
    host.strip_suffix(dot_suffix).filter(|h| !h.is_empty())
}

/// Whether the wildcard `*.suffix` covers `host` (one or more extra labels, as in the
/// Gateway API).
fn wildcard_covers(wildcard: &str, host: &str) -> bool {
    wildcard_head(wildcard, host).is_some()
}

/// Gateway API hostname intersection of a listener hostname and a route hostname: the more
/// specific of the two when one covers the other, else nothing.
pub fn intersect(listener: &str, route: &str) -> Option<String> {
    if listener == route {
        return Some(route.to_owned());
    }
    match (listener.starts_with("*."), route.starts_with("*.")) {
        (false, false) => None,
        (true, false) => wildcard_covers(listener, route).then(|| route.to_owned()),
        (false, true) => wildcard_covers(route, listener).then(|| listener.to_owned()),
        (true, true) => {
            if wildcard_covers(listener, &route[2..]) {
                Some(route.to_owned())
            } else if wildcard_covers(route, &listener[2..]) {
                Some(listener.to_owned())
            } else {
                None
            }
        }
    }
}

/// The hostnames of every load balancer in `lbs` (Service and its status addresses), each
/// admitted by [`crate::admission`]; `cluster_zones` are the zones the cluster DNS serves
/// itself (the `kubernetes` plugin's zones and the cluster domain).
pub fn collect(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    lbs: &[(ObjectRef, &[String])],
    cluster_zones: &[&str],
) -> Collected {
    let targets = Targets::new(snapshot, lbs);
    let admission = Admission::new(
        &config.admission,
        snapshot,
        cluster_zones,
        &config.annotation("allowed-hostnames"),
        &targets.lbs.iter().copied().collect(),
    );
    // About one claim and one source per Ingress, at least: no growing and copying.
    let objects = snapshot.ingresses.len();
    let mut c = Collector {
        lbs: targets.lbs.clone(),
        claims: Vec::with_capacity(objects),
        sources: Vec::with_capacity(objects),
        refused: Vec::new(),
        warnings: Vec::new(),
        admission,
    };
    let ignore_key = config.annotation("ignore");
    let own_key = config.annotation("hostnames");
    c.service_annotations(snapshot, &targets, &ignore_key, &own_key);
    c.ingresses(snapshot, &targets, &ignore_key);
    c.gateways(snapshot, &targets, &ignore_key);
    c.custom_sources(snapshot, &targets, &ignore_key);
    c.finish()
}

/// The load balancers hostnames are collected for, looked up the ways sources name them. A
/// load balancer is named by its index in [`Targets::lbs`] (so is it in a claim).
struct Targets<'a> {
    /// Status address -> the load balancers that have it.
    by_address: HashMap<&'a str, Vec<u32>>,
    /// Every load balancer, sorted, each once.
    lbs: Vec<&'a ObjectRef>,
    /// The `type: LoadBalancer` Services, among which the controller heuristics pick.
    lb_services: Vec<&'a Service>,
}

impl<'a> Targets<'a> {
    fn new(snapshot: &'a ClusterSnapshot, lbs: &'a [(ObjectRef, &'a [String])]) -> Self {
        let mut sorted: Vec<&ObjectRef> = lbs.iter().map(|(lb, _)| lb).collect();
        sorted.sort_unstable();
        sorted.dedup();
        let mut by_address: HashMap<&str, Vec<u32>> = HashMap::new();
        for (lb, addresses) in lbs {
            let i = index_in(&sorted, lb).expect("every load balancer is listed");
            for a in *addresses {
                by_address.entry(a.as_str()).or_default().push(i);
            }
        }
        let lb_services = snapshot
            .services
            .iter()
            .filter(|s| s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer"))
            .collect();
        Self {
            by_address,
            lbs: sorted,
            lb_services,
        }
    }

    /// The index of `lb`, if hostnames are collected for it.
    fn index(&self, lb: &ObjectRef) -> Option<u32> {
        index_in(&self.lbs, lb)
    }

    /// The load balancers that have one of `addresses` (normalized).
    fn at<S: AsRef<str>>(&self, addresses: impl IntoIterator<Item = S>) -> Vec<u32> {
        let mut out = Vec::new();
        self.at_into(addresses, &mut out);
        out
    }

    /// [`Targets::at`], into `out` (cleared first; sorted, each once).
    fn at_into<S: AsRef<str>>(&self, addresses: impl IntoIterator<Item = S>, out: &mut Vec<u32>) {
        out.clear();
        out.extend(
            addresses
                .into_iter()
                .filter_map(|a| self.by_address.get(a.as_ref()))
                .flatten()
                .copied(),
        );
        if out.len() > 1 {
            out.sort_unstable();
            out.dedup();
        }
    }
}

impl Collector<'_> {
    /// The hostnames annotated on the load balancer Services themselves: external-dns's and
    /// our `hostnames` annotation (`own_key`).
    fn service_annotations(
        &mut self,
        snapshot: &ClusterSnapshot,
        targets: &Targets<'_>,
        ignore_key: &str,
        own_key: &str,
    ) {
        for svc in &snapshot.services {
            let svc_ref = ObjectRef::from_meta(&svc.metadata);
            let Some(lb) = targets.index(&svc_ref) else {
                continue;
            };
            if is_ignored(&svc.metadata, ignore_key) {
                continue;
            }
            let annotations = svc.metadata.annotations.as_ref();
            for key in [EXTERNAL_DNS_ANNOTATION, own_key] {
                if let Some(value) = annotations.and_then(|a| a.get(key)) {
                    let origin = self.origin(Origin::with_text(
                        "Service",
                        svc_ref.clone(),
                        format!("Service {svc_ref} annotation {key}"),
                    ));
                    for host in value.split(',').filter(|h| !h.trim().is_empty()) {
                        self.add(lb, host, origin, WildcardLabels::One);
                    }
                }
            }
        }
    }

    /// Ingresses: the hosts of their rules and TLS sections and external-dns's annotation, for
    /// the load balancers [`Collector::ingress_targets`] finds.
    fn ingresses(&mut self, snapshot: &ClusterSnapshot, targets: &Targets<'_>, ignore_key: &str) {
        // The heuristic depends on an Ingress's class only: worked out once per class.
        let mut fallback_by_class: HashMap<Option<String>, Result<ObjectRef, String>> =
            HashMap::new();
        let mut fallback = |ing: &Ingress| {
            fallback_by_class
                .entry(ingress_class_name(ing))
                .or_insert_with_key(|class| {
                    ingress_fallback(snapshot, class.as_deref(), &targets.lb_services)
                })
                .clone()
        };
        // Reused for every Ingress: its hosts, and the load balancers serving it.
        let (mut hosts, mut lbs) = (Vec::new(), Vec::new());
        for ing in &snapshot.ingresses {
            if is_ignored(&ing.metadata, ignore_key) {
                continue;
            }
            let ing_ref = ObjectRef::from_meta(&ing.metadata);
            ingress_hosts(ing, &mut hosts);
            let annotated = external_dns_hosts(&ing.metadata, "Ingress", &ing_ref);
            if hosts.is_empty() && annotated.is_none() {
                continue;
            }
            let origin = Origin::new("Ingress", ing_ref);
            self.ingress_targets(ing, &origin, targets, &mut fallback, &mut lbs);
            if lbs.is_empty() {
                continue;
            }
            let origin = self.origin(origin);
            let annotated = annotated.map(|(origin, hosts)| (self.origin(origin), hosts));
            for &lb in &lbs {
                for &host in &hosts {
                    self.add(lb, host, origin, WildcardLabels::One);
                }
                if let Some((annotation_origin, annotated)) = &annotated {
                    for host in annotated {
                        self.add(lb, host, *annotation_origin, WildcardLabels::One);
                    }
                }
            }
        }
    }

    /// The load balancers an Ingress is served by, into `out` (sorted): those its status names
    /// (when several share the address, the one its controller runs behind, if that can be
    /// told); without a status, the one its class's controller runs behind (`fallback`), or
    /// none, with a warning.
    fn ingress_targets(
        &mut self,
        ing: &Ingress,
        origin: &Origin,
        targets: &Targets<'_>,
        fallback: &mut impl FnMut(&Ingress) -> Result<ObjectRef, String>,
        out: &mut Vec<u32>,
    ) {
        out.clear();
        let entries = ing
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten();
        let mut status = entries
            .flat_map(|e| e.ip.iter().chain(&e.hostname))
            .peekable();
        if status.peek().is_none() {
            match fallback(ing) {
                Ok(lb) => out.extend(targets.index(&lb)),
                Err(why) => {
                    self.warnings.push(Warning::new(
                        origin.text.clone(),
                        format!(
                            "no load balancer address in status and {why}; its hostnames are not planned"
                        ),
                    ));
                }
            }
            return;
        }
        targets.at_into(status.map(|a| normalized_address(a)), out);
        // Several load balancers on one address (MetalLB's shared IPs): the controller
        // heuristic picks the one this Ingress's controller runs behind, when it can.
        if out.len() > 1
            && let Ok(lb) = fallback(ing)
            && let Some(lb) = targets.index(&lb)
            && out.contains(&lb)
        {
            out.retain(|&m| m == lb);
        }
    }

    /// Gateways on a load balancer's address: the hostnames of their listeners and of the
    /// routes attached to them, and external-dns's annotation.
    fn gateways(&mut self, snapshot: &ClusterSnapshot, targets: &Targets<'_>, ignore_key: &str) {
        let routes = route_views(snapshot, ignore_key);
        let routes_by_gateway = routes_by_gateway(&routes);
        for gw in &snapshot.gateways {
            if is_ignored(&gw.metadata, ignore_key) {
                continue;
            }
            let gw_ref = ObjectRef::from_meta(&gw.metadata);
            let lbs = targets.at(gateway_addresses(gw));
            if lbs.is_empty() {
                continue;
            }
            let gw_routes = routes_by_gateway
                .get(&(gw_ref.namespace.as_str(), gw_ref.name.as_str()))
                .map_or(&[][..], Vec::as_slice);
            let hosts = self.gateway_hosts(gw, &gw_ref, gw_routes);
            // external-dns names on the Gateway are exact names, or wildcards in the Ingress
            // sense.
            let annotated = external_dns_hosts(&gw.metadata, "Gateway", &gw_ref)
                .map(|(origin, hosts)| (self.origin(origin), hosts));
            for lb in lbs {
                for (host, origin) in &hosts {
                    self.add(lb, host, *origin, WildcardLabels::OneOrMore);
                }
                if let Some((annotation_origin, annotated)) = &annotated {
                    for host in annotated {
                        self.add(lb, host, *annotation_origin, WildcardLabels::One);
                    }
                }
            }
        }
    }

    /// The hostnames of a Gateway's listeners (but UDP ones), each with the hostnames of the
    /// routes that attach to it.
    fn gateway_hosts(
        &mut self,
        gw: &Gateway,
        gw_ref: &ObjectRef,
        gw_routes: &[&RouteView],
    ) -> Vec<(String, Source)> {
        let mut hosts: Vec<(String, Source)> = Vec::new();
        let gw_origin = self.origin(Origin::new("Gateway", gw_ref.clone()));
        for listener in &gw.spec.listeners {
            if matches!(listener.protocol.as_str(), "UDP") {
                continue;
            }
            let listener_host = listener.hostname.as_deref().map(|h| h.to_ascii_lowercase());
            if let Some(h) = &listener_host {
                hosts.push((h.clone(), gw_origin));
            }
            // Namespaces are not in the snapshot, so a `Selector` is taken as allowing all.
            let same_only = listener
                .allowed_routes
                .as_ref()
                .and_then(|a| a.namespaces.as_ref())
                .and_then(|n| n.from.as_ref())
                .is_none_or(|f| matches!(f, GatewayListenersAllowedRoutesNamespacesFrom::Same));
            for route in gw_routes {
                if route.ignored || (same_only && route.namespace != gw_ref.namespace) {
                    continue;
                }
                if !route
                    .parents
                    .iter()
                    .any(|p| p.attaches(&route.namespace, gw_ref, &listener.name, listener.port))
                {
                    continue;
                }
                self.route_hosts(route, gw_ref, listener_host.as_deref(), &mut hosts);
            }
        }
        hosts
    }

    /// The hostnames a route gives on a listener whose hostname is `listener_host`: its own
    /// and external-dns's, intersected with the listener's (or the listener's when it names
    /// none).
    fn route_hosts(
        &mut self,
        route: &RouteView,
        gw_ref: &ObjectRef,
        listener_host: Option<&str>,
        hosts: &mut Vec<(String, Source)>,
    ) {
        let route_ref = ObjectRef::new(&route.namespace, &route.name);
        let route_source = self.origin(Origin::with_text(
            route.kind,
            route_ref.clone(),
            format!(
                "{} {}/{} via Gateway {gw_ref}",
                route.kind, route.namespace, route.name
            ),
        ));
        // external-dns's route sources add the annotation's names to spec.hostnames
        // and match both against the listener alike.
        let mut route_hosts: Vec<(&String, Source)> =
            route.hostnames.iter().map(|h| (h, route_source)).collect();
        if !route.annotated.is_empty() {
            let annotation_source = self.origin(Origin::with_text(
                route.kind,
                route_ref,
                format!(
                    "{} {}/{} annotation {EXTERNAL_DNS_ANNOTATION} via Gateway {gw_ref}",
                    route.kind, route.namespace, route.name
                ),
            ));
            route_hosts.extend(route.annotated.iter().map(|h| (h, annotation_source)));
        }
        match (listener_host, route_hosts.is_empty()) {
            (Some(lh), true) => hosts.push((lh.to_owned(), route_source)),
            (Some(lh), false) => {
                for (rh, source) in route_hosts {
                    if let Some(h) = intersect(lh, &rh.to_ascii_lowercase()) {
                        hosts.push((h, source));
                    }
                }
            }
            (None, _) => {
                for (rh, source) in route_hosts {
                    hosts.push((rh.clone(), source));
                }
            }
        }
    }

    /// The CRD sources (Traefik, Istio, Contour), for the load balancers
    /// [`custom_source_target`] finds.
    fn custom_sources(
        &mut self,
        snapshot: &ClusterSnapshot,
        targets: &Targets<'_>,
        ignore_key: &str,
    ) {
        for source in &snapshot.custom_sources {
            if is_ignored(&source.metadata, ignore_key) {
                continue;
            }
            let hosts = source.hosts();
            if hosts.is_empty() {
                continue;
            }
            let src_ref = ObjectRef::from_meta(&source.metadata);
            let origin = Origin::new(source.kind.kind(), src_ref);
            let lbs: BTreeSet<u32> = match custom_source_target(source, targets) {
                Ok(found) => found.iter().filter_map(|lb| targets.index(lb)).collect(),
                Err(why) => {
                    self.warnings.push(Warning::new(
                        origin.text.clone(),
                        format!("{why}; its hostnames are not planned"),
                    ));
                    BTreeSet::new()
                }
            };
            if lbs.is_empty() {
                continue;
            }
            let origin = self.origin(origin);
            for lb in lbs {
                for host in &hosts {
                    self.add(lb, host, origin, source.kind.wildcard_labels());
                }
            }
        }
    }
}

/// A Gateway's addresses (`spec.addresses`, then `status.addresses`), normalized.
fn gateway_addresses(gw: &Gateway) -> Vec<String> {
    let spec = gw
        .spec
        .addresses
        .iter()
        .flatten()
        .filter_map(|a| a.value.clone());
    let status = gw
        .status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .map(|a| a.value.clone());
    spec.chain(status).map(|a| normalize_address(&a)).collect()
}

/// Gateway (namespace, name) -> the routes with a parent reference naming it, each once, so
/// that a Gateway's listeners look only at the routes that may attach to it.
fn routes_by_gateway(routes: &[RouteView]) -> HashMap<(&str, &str), Vec<&RouteView>> {
    let mut by_gateway: HashMap<(&str, &str), Vec<&RouteView>> = HashMap::new();
    for route in routes {
        for p in &route.parents {
            let gw = (
                p.namespace.as_deref().unwrap_or(&route.namespace),
                p.name.as_str(),
            );
            let named = by_gateway.entry(gw).or_default();
            // A route's parents are visited together: a second reference to the same Gateway
            // finds the route last in its list.
            if !named.last().is_some_and(|r| std::ptr::eq(*r, route)) {
                named.push(route);
            }
        }
    }
    by_gateway
}

/// The only annotations [`collect`] reads on an Ingress: the `ignore` opt-out (with `config`'s
/// prefix), external-dns's hostnames and the legacy class. A cache may drop every other one.
pub fn ingress_annotations(config: &PlannerConfig) -> [String; 3] {
    [
        config.annotation("ignore"),
        EXTERNAL_DNS_ANNOTATION.to_owned(),
        INGRESS_CLASS_ANNOTATION.to_owned(),
    ]
}

/// Whether an object opts out with our `ignore: "true"` annotation.
fn is_ignored(meta: &ObjectMeta, key: &str) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The external-dns hostnames on an object matched to a load balancer, with their origin;
/// `None` when it has none (then nothing is built: most objects have none).
fn external_dns_hosts(
    meta: &ObjectMeta,
    kind: &'static str,
    object: &ObjectRef,
) -> Option<(Origin, Vec<String>)> {
    let hosts = annotated_hosts(meta);
    if hosts.is_empty() {
        return None;
    }
    let origin = Origin::with_text(
        kind,
        object.clone(),
        format!("{kind} {object} annotation {EXTERNAL_DNS_ANNOTATION}"),
    );
    Some((origin, hosts))
}

/// The names of external-dns's hostname annotation (comma-separated, whitespace tolerated).
fn annotated_hosts(meta: &ObjectMeta) -> Vec<String> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(EXTERNAL_DNS_ANNOTATION))
        .map(|value| {
            value
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The load balancer Services a CRD source is served by ([`crate::sources`]).
fn custom_source_target(
    source: &CustomSource,
    targets: &Targets<'_>,
) -> Result<Vec<ObjectRef>, String> {
    let lb_services = &targets.lb_services;
    match source.kind {
        SourceKind::TraefikIngressRoute | SourceKind::TraefikIngressRouteTcp => {
            controller_service(lb_services, "traefik.io/ingress-controller").map(|lb| vec![lb])
        }
        SourceKind::IstioGateway => {
            let selector = source.istio_selector();
            if selector.is_empty() {
                return Err("its spec.selector is empty, so no gateway Service can be told".into());
            }
            let matches: Vec<ObjectRef> = lb_services
                .iter()
                .filter(|s| {
                    let svc_selector = s.spec.as_ref().and_then(|s| s.selector.as_ref());
                    svc_selector.is_some_and(|sel| {
                        selector
                            .iter()
                            .all(|(k, v)| sel.get(*k).is_some_and(|sv| sv == v))
                    })
                })
                .map(|s| ObjectRef::from_meta(&s.metadata))
                .collect();
            let none = || {
                let labels: Vec<String> =
                    selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!(
                    "no LoadBalancer Service selects its gateway pods ({})",
                    labels.join(",")
                )
            };
            one_service(matches, none, "")
        }
        SourceKind::ContourHttpProxy => {
            let status = source.status_addresses();
            if status.is_empty() {
                return controller_service(lb_services, "projectcontour.io/").map(|lb| vec![lb]);
            }
            let lbs = targets.at(&status).into_iter();
            Ok(lbs.map(|i| targets.lbs[i as usize].clone()).collect())
        }
    }
}

/// The one LoadBalancer Service of an ingress controller (`CONTROLLER_APP_NAMES`).
fn controller_service(lb_services: &[&Service], controller: &str) -> Result<ObjectRef, String> {
    labelled_service(lb_services, &controller_app_names(controller), "")
}

/// The names the Services of an ingress controller carry: [`CONTROLLER_APP_NAMES`] of every
/// prefix of `controller` (an IngressClass `spec.controller`).
fn controller_app_names(controller: &str) -> BTreeSet<String> {
    CONTROLLER_APP_NAMES
        .iter()
        .filter(|(prefix, _)| controller.starts_with(prefix))
        .flat_map(|(_, apps)| apps.iter().map(|a| (*a).to_owned()))
        .collect()
}

/// The one LoadBalancer Service labelled as one of `names` ([`services_identified_as`]), or
/// why not; `whose` tells, when several are, what they match.
fn labelled_service(
    lb_services: &[&Service],
    names: &BTreeSet<String>,
    whose: &str,
) -> Result<ObjectRef, String> {
    let matches = services_identified_as(lb_services, names);
    let none = || format!("no LoadBalancer Service is labelled as one of {names:?}");
    one_service(matches, none, whose).map(|mut v| v.remove(0))
}

/// Exactly one Service, or why not (`whose`: what several match, after "match").
fn one_service(
    matches: Vec<ObjectRef>,
    none: impl FnOnce() -> String,
    whose: &str,
) -> Result<Vec<ObjectRef>, String> {
    match matches.len() {
        1 => Ok(matches),
        0 => Err(none()),
        _ => Err(format!(
            "several LoadBalancer Services match{whose} ({})",
            matches
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// An origin the collector has recorded ([`Collector::sources`]): hostnames it claims refer
/// to it by index.
#[derive(Clone, Copy)]
struct Source(u32);

/// One admitted claim: a hostname for a load balancer from a source.
struct Claim {
    /// [`prefix_key`] of `host`: claims are sorted by it first.
    key: u128,
    /// Normalized hostname (`*.suffix` for a wildcard).
    host: String,
    /// Index into [`Collector::lbs`].
    lb: u32,
    /// Index into [`Collector::sources`].
    source: u32,
    /// What a wildcard means in that source.
    labels: WildcardLabels,
    /// `host` is a wildcard (kept here: the claims are read in hostname order, their hosts
    /// scattered in memory).
    wildcard: bool,
}

/// Claims are gathered in a flat list and sorted once at the end: with tens of thousands of
/// Ingresses, a sorted map per hostname costs several times more (an allocation and a clone
/// of the load balancer reference per hostname, and string comparisons on every insert).
struct Collector<'a> {
    /// The load balancers, sorted: a claim's `lb` index orders like the reference.
    lbs: Vec<&'a ObjectRef>,
    claims: Vec<Claim>,
    /// The origins of the claims, by index ([`Source`]).
    sources: Vec<Origin>,
    refused: Vec<Refusal>,
    warnings: Vec<Warning>,
    admission: Admission<'a>,
}

impl Collector<'_> {
    /// Records `origin` as a source of hostnames.
    fn origin(&mut self, origin: Origin) -> Source {
        let index = u32::try_from(self.sources.len()).expect("fewer than 2^32 sources");
        self.sources.push(origin);
        Source(index)
    }

    /// Records `host` for the load balancer `lb` (an index into [`Collector::lbs`]) if the
    /// admission policy lets `source` claim it; `labels` is what a wildcard means in `source`.
    fn add(&mut self, lb: u32, host: &str, source: Source, labels: WildcardLabels) {
        let origin = &self.sources[source.0 as usize];
        let lb_ref = self.lbs[lb as usize];
        // The hostname is kept as written (a field); the texts are escaped (see `Refusal`).
        let refuse = |hostname: String, (reason, detail): (RefusalReason, String)| Refusal {
            hostname,
            source: crate::escape::text(&origin.text).into_owned(),
            kind: origin.kind.to_owned(),
            object: origin.object.clone(),
            load_balancer: lb_ref.clone(),
            reason,
            detail: crate::escape::text(&detail).into_owned(),
        };
        let parsed = match Host::parse(host.trim()) {
            Ok(h) => h,
            Err(why) => {
                let refusal = refuse(
                    host.to_owned(),
                    (
                        RefusalReason::Invalid,
                        format!("not a valid hostname: {why}"),
                    ),
                );
                self.refused.push(refusal);
                return;
            }
        };
        if let Err(why) = self.admission.check(&parsed, labels, origin, lb_ref) {
            self.refused.push(refuse(parsed.to_string(), why));
            return;
        }
        let wildcard = parsed.is_wildcard();
        let host = String::from(parsed);
        self.claims.push(Claim {
            key: prefix_key(&host),
            host,
            lb,
            source: source.0,
            labels,
            wildcard,
        });
    }

    fn finish(mut self) -> Collected {
        let mut out = Collected::default();
        self.refused.sort();
        self.refused.dedup();
        self.warnings.append(&mut self.admission.warnings);
        self.warnings
            .extend(self.refused.iter().map(Refusal::warning));
        out.refused = std::mem::take(&mut self.refused);
        let sources = &self.sources;
        let text = |i: u32| sources[i as usize].text.as_str();
        // By hostname, load balancer and source text: by the hostname's prefix key first, with
        // a comparison the sort inlines (keys order as the hostnames do), then each run of
        // equal keys (claims of one hostname, or of hostnames alike in their first 16 bytes)
        // by all three.
        self.claims.sort_unstable_by_key(|c| c.key);
        for same in self.claims.chunk_by_mut(|a, b| a.key == b.key) {
            if same.len() > 1 {
                same.sort_unstable_by(|a, b| {
                    (a.host.as_str(), a.lb)
                        .cmp(&(b.host.as_str(), b.lb))
                        .then_with(|| text(a.source).cmp(text(b.source)))
                });
            }
        }
        // Per load balancer (by index), its hostnames, in hostname order.
        let mut per_lb: Vec<Vec<Hostname>> = vec![Vec::new(); self.lbs.len()];
        // Every claim of one hostname: the load balancers, and for the one load balancer of an
        // unconflicted name, its sources.
        let (mut lbs, mut names): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
        let mut claims = self.claims.into_iter().peekable();
        while let Some(first) = claims.next() {
            lbs.clear();
            lbs.push(first.lb);
            names.clear();
            names.push(first.source);
            let mut labels = first.labels;
            while let Some(next) = claims.next_if(|c| c.key == first.key && c.host == first.host) {
                if next.lb != *lbs.last().expect("not empty") {
                    lbs.push(next.lb);
                } else if text(next.source) != text(*names.last().expect("not empty")) {
                    names.push(next.source);
                }
                labels = labels.max(next.labels);
            }
            let host = first.host;
            if lbs.len() > 1 {
                let load_balancers: Vec<ObjectRef> =
                    lbs.iter().map(|&i| self.lbs[i as usize].clone()).collect();
                let names: Vec<String> = load_balancers.iter().map(ToString::to_string).collect();
                self.warnings.push(Warning::new(
                    format!("hostname {host}"),
                    format!(
                        "claimed by several load balancers ({}); not planned for any of them",
                        names.join(", ")
                    ),
                ));
                out.conflicts.push(Conflict {
                    hostname: host,
                    load_balancers,
                });
                continue;
            }
            per_lb[first.lb as usize].push(Hostname {
                wildcard_labels: first.wildcard.then_some(labels),
                name: host,
                sources: names.iter().map(|&i| text(i).to_owned()).collect(),
            });
        }
        out.per_lb = self
            .lbs
            .iter()
            .zip(per_lb)
            .filter(|(_, hostnames)| !hostnames.is_empty())
            .map(|(lb, hostnames)| ((*lb).clone(), hostnames))
            .collect();
        self.warnings.sort();
        self.warnings.dedup();
        out.warnings = self.warnings;
        out
    }
}

/// The index of `lb` in `sorted`.
fn index_in(sorted: &[&ObjectRef], lb: &ObjectRef) -> Option<u32> {
    let i = sorted.binary_search(&lb).ok()?;
    Some(u32::try_from(i).expect("fewer than 2^32 load balancers"))
}

/// [`normalize_address`], without a copy when it changes nothing (as almost always: one per
/// Ingress on every plan).
fn normalized_address(address: &str) -> Cow<'_, str> {
    let trimmed = address.trim_end_matches('.');
    if trimmed.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(trimmed.to_ascii_lowercase())
    } else {
        Cow::Borrowed(trimmed)
    }
}

/// The first 16 bytes of `s`, zero-padded, as a big-endian number: `prefix_key(a) <
/// prefix_key(b)` implies `a < b`, so a sort compares the strings only on equal keys.
fn prefix_key(s: &str) -> u128 {
    let mut bytes = [0; 16];
    let n = s.len().min(16);
    bytes[..n].copy_from_slice(&s.as_bytes()[..n]);
    u128::from_be_bytes(bytes)
}

/// The hosts of an Ingress's rules and TLS sections, each once (a rule host is usually in
/// `tls[].hosts` too), into `out` (cleared first).
fn ingress_hosts<'a>(ing: &'a Ingress, out: &mut Vec<&'a str>) {
    out.clear();
    let Some(spec) = ing.spec.as_ref() else {
        return;
    };
    let rules = spec
        .rules
        .iter()
        .flatten()
        .filter_map(|r| r.host.as_deref());
    let tls = spec
        .tls
        .iter()
        .flatten()
        .flat_map(|t| t.hosts.iter().flatten().map(String::as_str));
    out.extend(rules.chain(tls));
    if out.len() > 1 {
        out.sort_unstable();
        out.dedup();
    }
}

/// An Ingress's class name: `spec.ingressClassName`, else the legacy class annotation.
fn ingress_class_name(ing: &Ingress) -> Option<String> {
    let spec_class = ing.spec.as_ref().and_then(|s| s.ingress_class_name.clone());
    let annotation_class = ing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INGRESS_CLASS_ANNOTATION))
        .cloned();
    spec_class.or(annotation_class)
}

/// The class -> controller -> Service heuristic for an Ingress without status, given its
/// class name ([`ingress_class_name`]).
fn ingress_fallback(
    snapshot: &ClusterSnapshot,
    class_name: Option<&str>,
    lb_services: &[&Service],
) -> Result<ObjectRef, String> {
    let class = match class_name {
        Some(name) => snapshot
            .ingress_classes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name)),
        None => snapshot.ingress_classes.iter().find(|c| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                .map(String::as_str)
                == Some("true")
        }),
    };
    let controller = class
        .and_then(|c| c.spec.as_ref())
        .and_then(|s| s.controller.clone());
    let mut names = controller
        .as_deref()
        .map(controller_app_names)
        .unwrap_or_default();
    // Legacy annotation classes without an IngressClass object: the class name itself
    // ("traefik", "haproxy"), and "nginx" for ingress-nginx.
    if let Some(name) = class_name.filter(|_| class.is_none()) {
        names.insert(name.to_owned());
        if name == "nginx" {
            names.insert("ingress-nginx".into());
        }
    }
    if names.is_empty() {
        return Err(match (class_name, &controller) {
            (None, _) => "it has no class and there is no default IngressClass".into(),
            (Some(c), None) => format!("its IngressClass {c:?} was not found"),
            (Some(c), Some(ctrl)) => {
                format!("the controller {ctrl:?} of IngressClass {c:?} is not one hairpin knows")
            }
        });
    }
    labelled_service(lb_services, &names, " its controller")
}

/// The LoadBalancer Services whose app label, on the Service or in its selector, is one of
/// `names`.
fn services_identified_as(lb_services: &[&Service], names: &BTreeSet<String>) -> Vec<ObjectRef> {
    lb_services
        .iter()
        .filter(|s| {
            identifies(
                &s.metadata,
                s.spec.as_ref().and_then(|s| s.selector.as_ref()),
                names,
            )
        })
        .map(|s| ObjectRef::from_meta(&s.metadata))
        .collect()
}

fn identifies(
    meta: &ObjectMeta,
    selector: Option<&BTreeMap<String, String>>,
    names: &BTreeSet<String>,
) -> bool {
    [meta.labels.as_ref(), selector]
        .into_iter()
        .flatten()
        .any(|map| {
            APP_LABELS
                .iter()
                .any(|k| map.get(*k).is_some_and(|v| names.contains(v)))
        })
}

/// What the planner needs of any route kind.
struct RouteView {
    kind: &'static str,
    /// Opted out with our `ignore` annotation.
    ignored: bool,
    namespace: String,
    name: String,
    hostnames: Vec<String>,
    /// The names of external-dns's hostname annotation on the route.
    annotated: Vec<String>,
    parents: Vec<ParentRef>,
}

struct ParentRef {
    group: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: String,
    section_name: Option<String>,
    port: Option<i32>,
}

impl ParentRef {
    fn attaches(
        &self,
        route_namespace: &str,
        gw: &ObjectRef,
        listener: &str,
        listener_port: i32,
    ) -> bool {
        self.group
            .as_deref()
            .is_none_or(|g| g == "gateway.networking.k8s.io")
            && self.kind.as_deref().is_none_or(|k| k == "Gateway")
            && self.namespace.as_deref().unwrap_or(route_namespace) == gw.namespace
            && self.name == gw.name
            && self.section_name.as_deref().is_none_or(|s| s == listener)
            && self.port.is_none_or(|p| p == listener_port)
    }
}

macro_rules! parent_refs {
    ($refs:expr) => {
        $refs
            .iter()
            .flatten()
            .map(|p| ParentRef {
                group: p.group.clone(),
                kind: p.kind.clone(),
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                section_name: p.section_name.clone(),
                port: p.port,
            })
            .collect()
    };
}

fn route_views(snapshot: &ClusterSnapshot, ignore_key: &str) -> Vec<RouteView> {
    let mut out = Vec::new();
    for r in &snapshot.http_routes {
        let o = ObjectRef::from_meta(&r.metadata);
        out.push(RouteView {
            kind: "HTTPRoute",
            ignored: is_ignored(&r.metadata, ignore_key),
            namespace: o.namespace,
            name: o.name,
            hostnames: r.spec.hostnames.clone().unwrap_or_default(),
            annotated: annotated_hosts(&r.metadata),
            parents: parent_refs!(r.spec.parent_refs),
        });
    }
    for r in &snapshot.grpc_routes {
        let o = ObjectRef::from_meta(&r.metadata);
        out.push(RouteView {
            kind: "GRPCRoute",
            ignored: is_ignored(&r.metadata, ignore_key),
            namespace: o.namespace,
            name: o.name,
            hostnames: r.spec.hostnames.clone().unwrap_or_default(),
            annotated: annotated_hosts(&r.metadata),
            parents: parent_refs!(r.spec.parent_refs),
        });
    }
    for r in &snapshot.tls_routes {
        let o = ObjectRef::from_meta(&r.metadata);
        out.push(RouteView {
            kind: "TLSRoute",
            ignored: is_ignored(&r.metadata, ignore_key),
            namespace: o.namespace,
            name: o.name,
            hostnames: r.spec.hostnames.clone(),
            annotated: annotated_hosts(&r.metadata),
            parents: parent_refs!(r.spec.parent_refs),
        });
    }
    out
}
