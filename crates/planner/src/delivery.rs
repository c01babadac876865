//! How a load balancer delivers its traffic to the nodes, which decides whether the native cure
//! (`ipMode: Proxy`) may ever be tried on it.
//!
//! kube-proxy (`pkg/proxy/serviceport.go`) leaves an ingress IP whose `ipMode` is not `VIP`
//! out of the load balancer VIPs altogether: no rule is programmed for that IP, for traffic
//! from outside the cluster included. That is harmless only where the load balancer is a
//! **proxy** ([`Delivery::Proxy`]): it terminates the client's TCP (or rewrites the
//! destination) and connects to a NodePort or a pod itself, so the node never receives the
//! load balancer's address as a destination. Wherever packets reach a node with the load
//! balancer IP still as their destination ([`Delivery::Vip`]: MetalLB, kube-vip, Cilium
//! LB-IPAM, OpenELB, PureLB, LoxiLB, k3s ServiceLB, pass-through network load balancers),
//! kube-proxy's rule for that IP is the only way in, and `ipMode: Proxy` cuts every client
//! outside the cluster off.
//!
//! Evidence beats a declaration. Read, in this order (the first that says something decides):
//! 1. the marks a VIP implementation leaves on the Service ([`VIP_ANNOTATIONS`],
//!    [`VIP_CLASSES`], Cilium LB-IPAM's status condition, k3s ServiceLB's DaemonSet): a VIP,
//!    whatever anything else says;
//! 2. the provider whose annotation turns PROXY on ([`PROVIDER_DELIVERY`]);
//! 3. otherwise [`Delivery::Unknown`].
//!
//! hairpin's own annotation `<prefix>delivery: proxy|vip` (an appliance in front of the nodes
//! that nothing else names; a tenant may set it on their own Service) only settles what the
//! evidence leaves unknown. Where it contradicts the evidence, the plan warns, naming both,
//! and the safer of the two decides: a VIP mark over `proxy` (`ipMode: Proxy` would cut
//! every client outside off), `vip` over a provider's proxy (native is then never tried).
//!
//! Every name below was checked against the project's own source or documentation (cited).

use k8s_openapi::api::core::v1::Service;
use serde::Serialize;

use crate::config::PlannerConfig;
use crate::escape;
use crate::providers::{LINODE_PORT_PREFIX, PROVIDER_ANNOTATIONS, ProxySetting, parse_value};
use crate::snapshot::{ClusterSnapshot, ObjectRef};
use crate::warning::Warning;

/// How a load balancer's traffic reaches the nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// A proxy: it terminates the client's TCP (or rewrites the destination) and connects to a
    /// NodePort or a pod itself. `ipMode: Proxy` is safe: clients outside never send to the
    /// node with the load balancer's address as destination.
    Proxy,
    /// A virtual IP: packets reach a node with the load balancer's address as destination, and
    /// kube-proxy's rule for that address is the only way in. Never native.
    Vip,
    /// Nothing says which: native is not tried by `auto`.
    #[default]
    Unknown,
}

impl Delivery {
    /// `proxy`, `vip` or `unknown`, as in the plan and the annotation.
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Proxy => "proxy",
            Delivery::Vip => "vip",
            Delivery::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How one load balancer delivers, and the evidence in words.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeliveryOf {
    /// Proxy, VIP or unknown.
    pub kind: Delivery,
    /// What says so (escaped: it quotes the Service's annotations).
    pub evidence: String,
}

impl DeliveryOf {
    fn new(kind: Delivery, evidence: impl AsRef<str>) -> Self {
        Self {
            kind,
            evidence: escape::text(evidence.as_ref()).into_owned(),
        }
    }
}

/// The outage `ipMode: Proxy` causes on a [`Delivery::Vip`] load balancer, in words (plan
/// warnings, Events, the doctor).
pub const VIP_OUTAGE: &str = "ipMode: Proxy would cut off every client outside the cluster: kube-proxy drops every rule for that IP";

/// What a [`Delivery::Vip`] load balancer is, in words.
pub const VIP_NODES: &str = "the nodes receive this load balancer's address as destination";

/// Annotation prefixes a VIP implementation reads or writes on a Service, with its name.
pub const VIP_ANNOTATIONS: &[(&str, &str)] = &[
    // MetalLB: metallb.io/address-pool, loadBalancerIPs, allow-shared-ip and the
    // ip-allocated-from-pool it writes itself; metallb.universe.tf/* is the older form it still
    // reads. https://metallb.universe.tf/usage/
    ("metallb.io/", "MetalLB"),
    ("metallb.universe.tf/", "MetalLB"),
    // kube-vip: kube-vip.io/loadbalancerIPs, vipHost, hwaddr, loadbalancerHostname...
    // (kube-vip pkg/kubevip/config_annotations.go); kube-vip.io/ignore is skipped below.
    ("kube-vip.io/", "kube-vip"),
    // Cilium LB-IPAM: lbipam.cilium.io/ips and sharing-key; io.cilium/lb-ipam-ips and
    // io.cilium/lb-ipam-sharing-key are the deprecated forms.
    // https://docs.cilium.io/en/stable/network/lb-ipam/
    ("lbipam.cilium.io/", "Cilium LB-IPAM"),
    ("io.cilium/lb-ipam-", "Cilium LB-IPAM"),
    // OpenELB: lb.kubesphere.io/v1alpha1: openelb, protocol.openelb.kubesphere.io/v1alpha1,
    // eip.openelb.kubesphere.io/v1alpha1 and v1alpha2 (openelb pkg/constant/constants.go).
    ("lb.kubesphere.io/", "OpenELB"),
    ("eip.openelb.kubesphere.io/", "OpenELB"),
    ("protocol.openelb.kubesphere.io/", "OpenELB"),
    // PureLB: purelb.io/service-group, addresses, and the allocated-by/allocated-from it writes
    // (purelb pkg/apis/purelb/v1/annotations.go).
    ("purelb.io/", "PureLB"),
    // LoxiLB: loxilb.io/lbmode, liveness, useproxyprotov2... (kube-loxilb docs).
    ("loxilb.io/", "LoxiLB"),
    // k3s/RKE2 ServiceLB: svccontroller.k3s.cattle.io/priorityclassname (k3s
    // pkg/cloudprovider/servicelb.go); its load balancer IPs are the nodes' own addresses.
    ("svccontroller.k3s.cattle.io/", "k3s ServiceLB"),
    ("svccontroller.rke2.cattle.io/", "RKE2 ServiceLB"),
];

/// Annotations under a [`VIP_ANNOTATIONS`] prefix that say the implementation leaves the
/// Service alone, when exactly `true`.
const VIP_OPT_OUTS: &[&str] = &["kube-vip.io/ignore"];

/// `spec.loadBalancerClass` values of VIP implementations.
pub const VIP_CLASSES: &[(&str, &str)] = &[
    // https://docs.cilium.io/en/stable/network/lb-ipam/ (loadBalancerClass table) and node IPAM.
    ("io.cilium/bgp-control-plane", "Cilium LB-IPAM (BGP)"),
    (
        "io.cilium/l2-announcer",
        "Cilium LB-IPAM (L2 announcements)",
    ),
    (
        "io.cilium/node",
        "Cilium node IPAM (the nodes' own addresses)",
    ),
    // kube-vip's cloud provider with KUBEVIP_ENABLE_LOADBALANCERCLASS.
    ("kube-vip.io/kube-vip-class", "kube-vip"),
    // PureLB v1 and v2 (purelb pkg/apis/purelb/v1 and v2 ServiceLBClass).
    ("purelb.io/purelb", "PureLB"),
    ("purelb.io/purelbv2", "PureLB"),
    // kube-loxilb handles only this class.
    ("loxilb.io/loxilb", "LoxiLB"),
];

/// Cilium LB-IPAM's condition on a Service it gave an address (`status: "True"`).
pub const CILIUM_IPAM_CONDITION: &str = "cilium.io/IPAMRequestSatisfied";

/// The labels k3s (and RKE2) ServiceLB puts on the `svclb-*` DaemonSet of a Service, naming it:
/// `(name label, namespace label, implementation)`.
const SERVICELB_LABELS: &[(&str, &str, &str)] = &[
    (
        "svccontroller.k3s.cattle.io/svcname",
        "svccontroller.k3s.cattle.io/svcnamespace",
        "k3s ServiceLB",
    ),
    (
        "svccontroller.rke2.cattle.io/svcname",
        "svccontroller.rke2.cattle.io/svcnamespace",
        "RKE2 ServiceLB",
    ),
];

/// Of a workload's `labels`, those delivery reads (k3s/RKE2 ServiceLB's, naming the Service
/// its DaemonSet serves): what a cache that slims workloads' metadata must keep.
pub fn delivery_labels(
    labels: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(key, _)| {
            SERVICELB_LABELS
                .iter()
                .any(|(name, namespace, _)| key == name || key == namespace)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The finalizer older k3s/RKE2 ServiceLB versions put on the Services they served.
pub const SERVICELB_FINALIZERS: &[(&str, &str)] = &[
    ("svccontroller.k3s.cattle.io/daemonset", "k3s ServiceLB"),
    ("svccontroller.rke2.cattle.io/daemonset", "RKE2 ServiceLB"),
];

/// How each provider of [`PROVIDER_ANNOTATIONS`] (by its `provider` name) delivers traffic,
/// and why. Every provider there has an entry (a test checks it).
pub const PROVIDER_DELIVERY: &[(&str, Delivery, &str)] = &[
    (
        "Hetzner",
        Delivery::Proxy,
        "Hetzner load balancers terminate TCP and connect to the nodes' NodePorts (or to private-network targets)",
    ),
    (
        "DigitalOcean",
        Delivery::Proxy,
        "DigitalOcean load balancers are managed proxies that connect to the NodePorts",
    ),
    (
        "OpenStack/OVHcloud",
        Delivery::Proxy,
        "Octavia's amphora (HAProxy), the provider that sends PROXY, terminates TCP and connects to the NodePorts",
    ),
    (
        "OVHcloud (legacy)",
        Delivery::Proxy,
        "OVHcloud's load balancer terminates TCP and connects to the NodePorts",
    ),
    (
        "Scaleway",
        Delivery::Proxy,
        "Scaleway load balancers (HAProxy) terminate TCP and connect to the NodePorts",
    ),
    (
        "Linode/Akamai",
        Delivery::Proxy,
        "NodeBalancers terminate TCP and connect to the NodePorts",
    ),
    (
        "Linode/Akamai (deprecated)",
        Delivery::Proxy,
        "NodeBalancers terminate TCP and connect to the NodePorts",
    ),
    (
        "Vultr",
        Delivery::Proxy,
        "Vultr load balancers terminate TCP and connect to the NodePorts",
    ),
    (
        "AWS",
        Delivery::Proxy,
        "a classic ELB terminates TCP; an NLB rewrites the destination to its targets (node:NodePort or pod): no node receives the load balancer's address",
    ),
    (
        "AWS NLB",
        Delivery::Proxy,
        "an NLB rewrites the destination to its targets (node:NodePort or pod): no node receives the load balancer's address",
    ),
    (
        "IBM Cloud",
        Delivery::Proxy,
        "the VPC application load balancer terminates TCP and connects to the NodePorts",
    ),
    (
        "Oracle OCI NLB",
        Delivery::Unknown,
        "an OCI network load balancer passes packets through: whether a node receives its address depends on its preserve-source/destination setting",
    ),
    (
        "Oracle OCI LB",
        Delivery::Proxy,
        "the OCI load balancer terminates TCP and connects to the NodePorts",
    ),
    (
        "Civo",
        Delivery::Proxy,
        "Civo load balancers terminate TCP and connect to the NodePorts",
    ),
    (
        "cloudscale",
        Delivery::Proxy,
        "cloudscale load balancers terminate TCP and connect to their pool members (NodePorts)",
    ),
    (
        "STACKIT",
        Delivery::Proxy,
        "STACKIT load balancers (Envoy) terminate TCP and connect to the NodePorts",
    ),
    (
        "STACKIT (yawol, legacy)",
        Delivery::Proxy,
        "yawol load balancers (Envoy) terminate TCP and connect to the NodePorts",
    ),
    (
        "Alibaba Cloud NLB",
        Delivery::Proxy,
        "Alibaba Cloud NLBs translate both addresses (full NAT) and connect to the backends",
    ),
    (
        "Alibaba Cloud NLB (alicloud prefix)",
        Delivery::Proxy,
        "Alibaba Cloud NLBs translate both addresses (full NAT) and connect to the backends",
    ),
];

/// How `svc`'s load balancer delivers its traffic ([`Delivery`]), and why. A value of hairpin's
/// `delivery` annotation that is neither `proxy` nor `vip` is a warning, and the annotation is
/// then ignored.
pub fn delivery_of(
    svc: &Service,
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    warnings: &mut Vec<Warning>,
) -> DeliveryOf {
    let key = config.annotation("delivery");
    let subject = || format!("Service {}", ObjectRef::from_meta(&svc.metadata));
    let annotations = svc.metadata.annotations.as_ref();
    let declared = annotations.and_then(|a| a.get(&key)).and_then(|value| {
        match value.trim().to_ascii_lowercase().as_str() {
            "proxy" => Some((Delivery::Proxy, value)),
            "vip" => Some((Delivery::Vip, value)),
            _ => {
                warnings.push(Warning::new(
                    subject(),
                    format!(
                        "annotation {key}: unknown delivery {value:?} (expected proxy or vip); ignored"
                    ),
                ));
                None
            }
        }
    });
    let evidence = vip_mark(svc, snapshot).or_else(|| provider_delivery(svc));
    let Some((kind, value)) = declared else {
        return evidence.unwrap_or_else(|| {
            DeliveryOf::new(
                Delivery::Unknown,
                format!(
                    "no provider annotation or VIP implementation says how it reaches the nodes; declare it with {key}: proxy or vip"
                ),
            )
        });
    };
    let annotation = format!("annotation {key}={value}");
    let shown = escape::text(&annotation);
    match evidence {
        None => DeliveryOf::new(kind, &annotation),
        Some(found) if found.kind == Delivery::Unknown => DeliveryOf {
            kind,
            evidence: format!(
                "{shown}, where the evidence says nothing: {}",
                found.evidence
            ),
        },
        Some(found) if found.kind == kind => found,
        Some(found) => {
            warnings.push(Warning::escaped_message(
                subject(),
                format!(
                    "{shown} says the delivery is {kind}, but {} says {}: vip applies (evidence beats the annotation, which only settles an unknown delivery, and the safer wins; the native cure is never tried)",
                    found.evidence, found.kind,
                ),
            ));
            let evidence = if found.kind == Delivery::Vip {
                format!("{}; {shown} contradicts it", found.evidence)
            } else {
                format!("{shown}, the safer, over {}", found.evidence)
            };
            DeliveryOf {
                kind: Delivery::Vip,
                evidence,
            }
        }
    }
}

/// The first mark of a VIP implementation on `svc`: annotation, class, Cilium's condition,
/// k3s ServiceLB's DaemonSet or finalizer.
fn vip_mark(svc: &Service, snapshot: &ClusterSnapshot) -> Option<DeliveryOf> {
    let vip =
        |what: &str, how: String| Some(DeliveryOf::new(Delivery::Vip, format!("{what}, {how}")));
    let annotations = svc.metadata.annotations.as_ref();
    // An implementation told to leave the Service alone (`kube-vip.io/ignore: "true"`).
    let ignored = |prefix: &str| {
        VIP_OPT_OUTS.iter().any(|o| {
            o.starts_with(prefix)
                && annotations
                    .and_then(|a| a.get(*o))
                    // kube-vip compares with "true" exactly (pkg/manager/watch_services.go).
                    .is_some_and(|v| v == "true")
        })
    };
    for (key, value) in annotations.into_iter().flatten() {
        let Some((prefix, what)) = VIP_ANNOTATIONS.iter().find(|(p, _)| key.starts_with(p)) else {
            continue;
        };
        // kube-vip writes `kube-vip.io/ignore: "false"` on the Services it serves: a mark too.
        if ignored(prefix) {
            continue;
        }
        return vip(what, format!("annotation {key}={value}"));
    }
    let class = svc
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_class.as_deref());
    if let Some((class, what)) = class.and_then(|c| VIP_CLASSES.iter().find(|(v, _)| *v == c)) {
        return vip(what, format!("loadBalancerClass {class}"));
    }
    let conditions = svc.status.as_ref().and_then(|s| s.conditions.as_ref());
    if conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == CILIUM_IPAM_CONDITION && c.status == "True")
    {
        return vip(
            "Cilium LB-IPAM",
            format!("status condition {CILIUM_IPAM_CONDITION}=True"),
        );
    }
    let finalizers = svc.metadata.finalizers.iter().flatten();
    for finalizer in finalizers {
        if let Some((_, what)) = SERVICELB_FINALIZERS.iter().find(|(f, _)| f == finalizer) {
            return vip(what, format!("finalizer {finalizer}"));
        }
    }
    servicelb_daemonset(svc, snapshot).and_then(|(what, ds)| {
        vip(
            what,
            format!("DaemonSet {ds}; its addresses are the nodes' own"),
        )
    })
}

/// k3s/RKE2 ServiceLB's `svclb-*` DaemonSet for `svc`, if the snapshot holds it.
fn servicelb_daemonset(
    svc: &Service,
    snapshot: &ClusterSnapshot,
) -> Option<(&'static str, String)> {
    let name = svc.metadata.name.as_deref()?;
    let namespace = svc.metadata.namespace.as_deref().unwrap_or_default();
    snapshot
        .receivers
        .workloads
        .iter()
        .filter(|w| w.kind == "DaemonSet")
        .find_map(|w| {
            let labels = w.metadata.labels.as_ref()?;
            SERVICELB_LABELS.iter().find_map(|(n, ns, what)| {
                (labels.get(*n).map(String::as_str) == Some(name)
                    && labels.get(*ns).map(String::as_str) == Some(namespace))
                .then(|| {
                    (
                        *what,
                        format!(
                            "{}/{}",
                            w.metadata.namespace.as_deref().unwrap_or_default(),
                            w.metadata.name.as_deref().unwrap_or_default()
                        ),
                    )
                })
            })
        })
}

/// The delivery of the provider whose annotation turns PROXY on for `svc` (the first in
/// [`PROVIDER_ANNOTATIONS`]'s order, as for the PROXY version).
fn provider_delivery(svc: &Service) -> Option<DeliveryOf> {
    let annotations = svc.metadata.annotations.as_ref()?;
    let on = |key: &str, value: &str, provider: &str| {
        let (_, kind, why) = PROVIDER_DELIVERY.iter().find(|(p, _, _)| *p == provider)?;
        Some(DeliveryOf::new(
            *kind,
            format!("{provider} (annotation {key}={value}): {why}"),
        ))
    };
    for entry in PROVIDER_ANNOTATIONS {
        let Some(value) = annotations.get(entry.key) else {
            continue;
        };
        if matches!(
            parse_value(entry.format, value, svc),
            Ok(ProxySetting::All(_) | ProxySetting::Ports(_))
        ) {
            return on(entry.key, value, entry.provider);
        }
    }
    annotations
        .iter()
        .find(|(k, _)| k.starts_with(LINODE_PORT_PREFIX))
        .and_then(|(k, v)| on(k, v, "Linode/Akamai"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_provider_has_a_delivery() {
        for entry in PROVIDER_ANNOTATIONS {
            assert!(
                PROVIDER_DELIVERY
                    .iter()
                    .any(|(p, _, _)| *p == entry.provider),
                "{} has no delivery",
                entry.provider
            );
        }
    }
}
