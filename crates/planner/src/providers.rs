//! Which load balancers speak the PROXY protocol, read from cloud providers' Service
//! annotations, and from our own annotation that wins over all of them.
//!
//! Every entry of [`PROVIDER_ANNOTATIONS`] cites the provider's documentation. Values are
//! compared case-insensitively after trimming; a value the table does not know is reported as a
//! warning naming the Service and the annotation, and that annotation is then ignored.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use serde::Serialize;

/// A PROXY protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum ProxyVersion {
    /// Text header (`PROXY TCP4 ...\r\n`).
    #[serde(rename = "v1")]
    V1,
    /// Binary header.
    #[serde(rename = "v2")]
    V2,
}

impl ProxyVersion {
    /// `"v1"` or `"v2"`, as written in routes and annotations.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyVersion::V1 => "v1",
            ProxyVersion::V2 => "v2",
        }
    }
}

impl std::fmt::Display for ProxyVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an annotation says about the PROXY protocol of a load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxySetting {
    /// Explicitly off.
    Off,
    /// On for every port.
    All(ProxyVersion),
    /// On for the listed Service ports (`spec.ports[].port`) only.
    Ports(BTreeMap<i32, ProxyVersion>),
}

/// How an annotation's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueFormat {
    /// A boolean (`true`/`false`, and the other spellings Go's `strconv.ParseBool` accepts,
    /// since every cloud controller is written in Go); `true` means this version.
    Bool(ProxyVersion),
    /// A fixed set of words; `None` means off.
    Words(&'static [(&'static str, Option<ProxyVersion>)]),
    /// `true` or `*` for all ports, `false` for none, or a comma-separated list of Service
    /// ports that get this version.
    PortList(ProxyVersion),
    /// A comma-separated list of features; PROXY is on with this version when the list holds
    /// the given feature. Other features are not our business (no warning).
    FeatureList(&'static str, ProxyVersion),
    /// AWS target group attributes, `key=value` pairs separated by commas;
    /// `proxy_protocol_v2.enabled=true` means v2.
    AwsTargetGroupAttributes,
    /// A boolean; when true, PROXY is on with this version for the Service ports listed in the
    /// ports-filter annotation named here (comma-separated; absent or empty = every port).
    BoolPortsFilter(ProxyVersion, &'static str),
    /// AWS `aws-load-balancer-proxy-protocol`: only `*` is valid. Classic ELBs (the in-tree
    /// cloud provider) send v1; NLBs of the AWS Load Balancer Controller send v2.
    AwsProxyProtocol,
}

/// One known provider annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderAnnotation {
    /// Human name of the provider.
    pub provider: &'static str,
    /// Annotation key.
    pub key: &'static str,
    /// How its value is read.
    pub format: ValueFormat,
    /// The provider's documentation of this annotation.
    pub docs: &'static str,
}

const ON_OFF_V1: &[(&str, Option<ProxyVersion>)] = &[
    ("true", Some(ProxyVersion::V1)),
    ("v1", Some(ProxyVersion::V1)),
    ("v2", Some(ProxyVersion::V2)),
    ("false", None),
];

/// Hetzner Cloud's PROXY protocol annotation (boolean; v1).
pub const HETZNER_PROXY_PROTOCOL: &str = "load-balancer.hetzner.cloud/uses-proxyprotocol";
/// OpenStack Octavia's PROXY protocol annotation (`true`/`v1`, `v2`).
pub const OPENSTACK_PROXY_PROTOCOL: &str = "loadbalancer.openstack.org/proxy-protocol";
/// STACKIT's PROXY protocol annotation (boolean; v2, on the ports of its ports filter).
pub const STACKIT_PROXY_PROTOCOL: &str = "lb.stackit.cloud/tcp-proxy-protocol";

/// The provider annotations we understand. Several may be set on one Service (a chart that
/// carries annotations for more than one cloud); the first entry that turns a port on decides
/// its version, and our own `proxy-protocol` annotation wins over all of them.
pub const PROVIDER_ANNOTATIONS: &[ProviderAnnotation] = &[
    // Hetzner Cloud: boolean; Hetzner load balancers send PROXY v1.
    // https://github.com/hetznercloud/hcloud-cloud-controller-manager/blob/main/docs/reference/load_balancer_annotations.md
    ProviderAnnotation {
        provider: "Hetzner",
        key: HETZNER_PROXY_PROTOCOL,
        format: ValueFormat::Bool(ProxyVersion::V1),
        docs: "https://github.com/hetznercloud/hcloud-cloud-controller-manager/blob/main/docs/reference/load_balancer_annotations.md",
    },
    // DigitalOcean: boolean; DigitalOcean load balancers send PROXY v1.
    // https://docs.digitalocean.com/products/kubernetes/how-to/configure-load-balancers/#proxy-protocol
    ProviderAnnotation {
        provider: "DigitalOcean",
        key: "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol",
        format: ValueFormat::Bool(ProxyVersion::V1),
        docs: "https://docs.digitalocean.com/products/kubernetes/how-to/configure-load-balancers/#proxy-protocol",
    },
    // OpenStack Octavia (and OVHcloud, which uses the OpenStack controller): `true`/`v1` = v1,
    // `v2` = v2, on all listeners.
    // https://github.com/kubernetes/cloud-provider-openstack/blob/master/docs/openstack-cloud-controller-manager/expose-applications-using-loadbalancer-type-service.md
    ProviderAnnotation {
        provider: "OpenStack/OVHcloud",
        key: OPENSTACK_PROXY_PROTOCOL,
        format: ValueFormat::Words(ON_OFF_V1),
        docs: "https://github.com/kubernetes/cloud-provider-openstack/blob/master/docs/openstack-cloud-controller-manager/expose-applications-using-loadbalancer-type-service.md",
    },
    // OVHcloud's former load balancer: `v1`, `v2`, `v2-ssl`, `v2-ssl-cn` (v2 with TLS TLVs).
    // https://help.ovhcloud.com/csm/en-public-cloud-kubernetes-expose-applications-using-load-balancer?id=kb_article_view&sysparm_article=KB0050002
    ProviderAnnotation {
        provider: "OVHcloud (legacy)",
        key: "service.beta.kubernetes.io/ovh-loadbalancer-proxy-protocol",
        format: ValueFormat::Words(&[
            ("v1", Some(ProxyVersion::V1)),
            ("v2", Some(ProxyVersion::V2)),
            ("v2-ssl", Some(ProxyVersion::V2)),
            ("v2-ssl-cn", Some(ProxyVersion::V2)),
            ("none", None),
        ]),
        docs: "https://help.ovhcloud.com/csm/en-public-cloud-kubernetes-expose-applications-using-load-balancer?id=kb_article_view&sysparm_article=KB0050002",
    },
    // Scaleway: `false`, `true` or `*` for all ports, or a comma-separated list of Service
    // ports; one annotation per version.
    // https://github.com/scaleway/scaleway-cloud-controller-manager/blob/master/docs/loadbalancer-annotations.md
    ProviderAnnotation {
        provider: "Scaleway",
        key: "service.beta.kubernetes.io/scw-loadbalancer-proxy-protocol-v1",
        format: ValueFormat::PortList(ProxyVersion::V1),
        docs: "https://github.com/scaleway/scaleway-cloud-controller-manager/blob/master/docs/loadbalancer-annotations.md",
    },
    // https://github.com/scaleway/scaleway-cloud-controller-manager/blob/master/docs/loadbalancer-annotations.md
    ProviderAnnotation {
        provider: "Scaleway",
        key: "service.beta.kubernetes.io/scw-loadbalancer-proxy-protocol-v2",
        format: ValueFormat::PortList(ProxyVersion::V2),
        docs: "https://github.com/scaleway/scaleway-cloud-controller-manager/blob/master/docs/loadbalancer-annotations.md",
    },
    // Linode/Akamai NodeBalancers: `none`, `v1`, `v2` for all ports; per-port overrides are
    // read from `service.beta.kubernetes.io/linode-loadbalancer-port-<port>` (see
    // [`LINODE_PORT_PREFIX`]). The un-prefixed `proxy-protocol` spelling is the deprecated one.
    // https://github.com/linode/linode-cloud-controller-manager/blob/main/docs/configuration/annotations.md
    ProviderAnnotation {
        provider: "Linode/Akamai",
        key: "service.beta.kubernetes.io/linode-loadbalancer-default-proxy-protocol",
        format: ValueFormat::Words(LINODE_WORDS),
        docs: "https://github.com/linode/linode-cloud-controller-manager/blob/main/docs/configuration/annotations.md",
    },
    // https://github.com/linode/linode-cloud-controller-manager/blob/main/docs/configuration/annotations.md
    ProviderAnnotation {
        provider: "Linode/Akamai (deprecated)",
        key: "service.beta.kubernetes.io/linode-loadbalancer-proxy-protocol",
        format: ValueFormat::Words(LINODE_WORDS),
        docs: "https://github.com/linode/linode-cloud-controller-manager/blob/main/docs/configuration/annotations.md",
    },
    // Vultr: boolean (read with Go's strconv.ParseBool); Vultr load balancers send v1.
    // https://github.com/vultr/vultr-cloud-controller-manager/blob/master/docs/load-balancers.md
    ProviderAnnotation {
        provider: "Vultr",
        key: "service.beta.kubernetes.io/vultr-loadbalancer-proxy-protocol",
        format: ValueFormat::Bool(ProxyVersion::V1),
        docs: "https://github.com/vultr/vultr-cloud-controller-manager/blob/master/docs/load-balancers.md",
    },
    // AWS: `*` enables PROXY on all ports: v1 on a classic ELB (in-tree provider), v2 on an
    // NLB managed by the AWS Load Balancer Controller.
    // https://kubernetes.io/docs/reference/labels-annotations-taints/#service-beta-kubernetes-io-aws-load-balancer-proxy-protocol
    // https://kubernetes-sigs.github.io/aws-load-balancer-controller/latest/guide/service/annotations/#proxy-protocol-v2
    ProviderAnnotation {
        provider: "AWS",
        key: "service.beta.kubernetes.io/aws-load-balancer-proxy-protocol",
        format: ValueFormat::AwsProxyProtocol,
        docs: "https://kubernetes.io/docs/reference/labels-annotations-taints/#service-beta-kubernetes-io-aws-load-balancer-proxy-protocol",
    },
    // AWS NLB: `proxy_protocol_v2.enabled=true` among the target group attributes.
    // https://kubernetes-sigs.github.io/aws-load-balancer-controller/latest/guide/service/annotations/#target-group-attributes
    ProviderAnnotation {
        provider: "AWS NLB",
        key: "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes",
        format: ValueFormat::AwsTargetGroupAttributes,
        docs: "https://kubernetes-sigs.github.io/aws-load-balancer-controller/latest/guide/service/annotations/#target-group-attributes",
    },
    // IBM Cloud VPC load balancers: `proxy-protocol` in the enabled-features list; v1.
    // https://cloud.ibm.com/docs/containers?topic=containers-vpclb-about#vpc_lb_annotations
    ProviderAnnotation {
        provider: "IBM Cloud",
        key: "service.kubernetes.io/ibm-load-balancer-cloud-provider-enable-features",
        format: ValueFormat::FeatureList("proxy-protocol", ProxyVersion::V1),
        docs: "https://cloud.ibm.com/docs/containers?topic=containers-vpclb-about#vpc_lb_annotations",
    },
    // Oracle OCI network load balancer: boolean, PROXY v2.
    // https://docs.oracle.com/en-us/iaas/Content/ContEng/Tasks/contengcreatingnetworkloadbalancers.htm
    ProviderAnnotation {
        provider: "Oracle OCI NLB",
        key: "oci-network-load-balancer.oraclecloud.com/is-ppv2-enabled",
        format: ValueFormat::Bool(ProxyVersion::V2),
        docs: "https://docs.oracle.com/en-us/iaas/Content/ContEng/Tasks/contengcreatingnetworkloadbalancers.htm",
    },
    // Oracle OCI load balancer: `"1"` or `"2"` on all listeners.
    // https://docs.oracle.com/en-us/iaas/Content/ContEng/Tasks/contengconfiguringloadbalancersnetworkloadbalancers-subtopic.htm
    ProviderAnnotation {
        provider: "Oracle OCI LB",
        key: "service.beta.kubernetes.io/oci-load-balancer-connection-proxy-protocol-version",
        format: ValueFormat::Words(&[("1", Some(ProxyVersion::V1)), ("2", Some(ProxyVersion::V2))]),
        docs: "https://docs.oracle.com/en-us/iaas/Content/ContEng/Tasks/contengconfiguringloadbalancersnetworkloadbalancers-subtopic.htm",
    },
    // Civo: `send-proxy` = v1, `send-proxy-v2` = v2.
    // https://www.civo.com/docs/kubernetes/load-balancers#proxy-protocol
    ProviderAnnotation {
        provider: "Civo",
        key: "kubernetes.civo.com/loadbalancer-enable-proxy-protocol",
        format: ValueFormat::Words(&[
            ("send-proxy", Some(ProxyVersion::V1)),
            ("send-proxy-v2", Some(ProxyVersion::V2)),
        ]),
        docs: "https://www.civo.com/docs/kubernetes/load-balancers#proxy-protocol",
    },
    // cloudscale.ch: the pool protocol of every pool (all ports) of the Service: `tcp`
    // (default), `proxy` (PROXY v1) or `proxyv2`.
    // https://github.com/cloudscale-ch/cloudscale-cloud-controller-manager/blob/main/pkg/cloudscale_ccm/loadbalancer.go
    ProviderAnnotation {
        provider: "cloudscale",
        key: "k8s.cloudscale.ch/loadbalancer-pool-protocol",
        format: ValueFormat::Words(&[
            ("tcp", None),
            ("proxy", Some(ProxyVersion::V1)),
            ("proxyv2", Some(ProxyVersion::V2)),
        ]),
        docs: "https://github.com/cloudscale-ch/cloudscale-cloud-controller-manager/blob/main/pkg/cloudscale_ccm/loadbalancer.go",
    },
    // STACKIT: boolean (default false), PROXY on the TCP ports, limited by the ports filter.
    // The docs state no version; yawol's envoy config (which the STACKIT load balancer
    // inherits) sets `ProxyProtocolConfig{Version: 2}`: v2.
    // https://github.com/stackitcloud/cloud-provider-stackit/blob/main/docs/load-balancer.md
    ProviderAnnotation {
        provider: "STACKIT",
        key: STACKIT_PROXY_PROTOCOL,
        format: ValueFormat::BoolPortsFilter(
            ProxyVersion::V2,
            "lb.stackit.cloud/tcp-proxy-protocol-ports-filter",
        ),
        docs: "https://github.com/stackitcloud/cloud-provider-stackit/blob/main/docs/load-balancer.md",
    },
    // STACKIT, the legacy yawol annotations the STACKIT controller still honours (deprecated).
    // https://github.com/stackitcloud/cloud-provider-stackit/blob/main/docs/load-balancer.md
    ProviderAnnotation {
        provider: "STACKIT (yawol, legacy)",
        key: "yawol.stackit.cloud/tcpProxyProtocol",
        format: ValueFormat::BoolPortsFilter(
            ProxyVersion::V2,
            "yawol.stackit.cloud/tcpProxyProtocolPortsFilter",
        ),
        docs: "https://github.com/stackitcloud/cloud-provider-stackit/blob/main/docs/load-balancer.md",
    },
    // Alibaba Cloud NLB (`loadBalancerClass: alibabacloud.com/nlb`, CCM >= 2.5.0): `on`
    // sends PROXY v2.
    // https://www.alibabacloud.com/help/en/ack/ack-managed-and-ack-dedicated/user-guide/configure-nlb-instances-by-using-annotations
    ProviderAnnotation {
        provider: "Alibaba Cloud NLB",
        key: "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-proxy-protocol",
        format: ValueFormat::Words(ALIBABA_WORDS),
        docs: "https://www.alibabacloud.com/help/en/ack/ack-managed-and-ack-dedicated/user-guide/configure-nlb-instances-by-using-annotations",
    },
    // Alibaba Cloud, the legacy `alicloud` prefix the CCM still accepts.
    // https://www.alibabacloud.com/help/en/container-service-for-kubernetes/latest/use-annotations-to-configure-load-balancing-1
    ProviderAnnotation {
        provider: "Alibaba Cloud NLB (alicloud prefix)",
        key: "service.beta.kubernetes.io/alicloud-loadbalancer-proxy-protocol",
        format: ValueFormat::Words(ALIBABA_WORDS),
        docs: "https://www.alibabacloud.com/help/en/container-service-for-kubernetes/latest/use-annotations-to-configure-load-balancing-1",
    },
];

const ALIBABA_WORDS: &[(&str, Option<ProxyVersion>)] =
    &[("on", Some(ProxyVersion::V2)), ("off", None)];

/// Annotations of load balancers that never send the PROXY protocol, and why (shown as the
/// reason they need no hairpin). Our own annotation still forces one, for a PROXY added by
/// something the provider does not know about.
///
/// Exoscale: the NLB has no PROXY protocol setting at all (its annotations are zone, id, name,
/// description, external and the per-service ones) and passes connections through unchanged.
/// <https://github.com/exoscale/exoscale-cloud-controller-manager/blob/master/docs/service-loadbalancer.md>
pub const PROVIDERS_WITHOUT_PROXY: &[(&str, &str)] = &[(
    "service.beta.kubernetes.io/exoscale-loadbalancer-",
    "Exoscale NLB: no PROXY protocol (connections are passed through unchanged)",
)];

/// Huawei Cloud CCE / Open Telekom Cloud CCE: `"true"` makes in-cluster access to the ELB's
/// address go through the ELB, which fixes what hairpin fixes (like `ipMode: Proxy`). These
/// ELBs pass the client IP by "transparent client IP", not PROXY, so PROXY comes only from our
/// own annotation (configured by hand on the ELB).
/// <https://support.huaweicloud.com/intl/en-us/usermanual-cce/cce_10_0385.html>
pub const HUAWEI_PASS_THROUGH: &str = "kubernetes.io/elb.pass-through";

/// Why a Service's provider sends no PROXY protocol, from [`PROVIDERS_WITHOUT_PROXY`].
pub fn provider_without_proxy(svc: &Service) -> Option<&'static str> {
    let annotations = svc.metadata.annotations.as_ref()?;
    PROVIDERS_WITHOUT_PROXY
        .iter()
        .find(|(prefix, _)| annotations.keys().any(|k| k.starts_with(prefix)))
        .map(|(_, why)| *why)
}

/// Whether Huawei/OTC's `kubernetes.io/elb.pass-through` is on (Go `strconv.ParseBool`).
pub fn huawei_pass_through(svc: &Service) -> bool {
    svc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(HUAWEI_PASS_THROUGH))
        .and_then(|v| parse_bool(v))
        .unwrap_or(false)
}

const LINODE_WORDS: &[(&str, Option<ProxyVersion>)] = &[
    ("none", None),
    ("v1", Some(ProxyVersion::V1)),
    ("v2", Some(ProxyVersion::V2)),
];

/// Linode per-port configuration: `service.beta.kubernetes.io/linode-loadbalancer-port-<port>`
/// holds JSON such as `{"proxy-protocol": "v2"}` and overrides the default for that port.
/// <https://github.com/linode/linode-cloud-controller-manager/blob/main/docs/configuration/annotations.md>
pub const LINODE_PORT_PREFIX: &str = "service.beta.kubernetes.io/linode-loadbalancer-port-";

/// AWS annotation that selects the load balancer type; `nlb`, `nlb-ip` and `external`
/// (AWS Load Balancer Controller) are NLBs.
const AWS_LB_TYPE: &str = "service.beta.kubernetes.io/aws-load-balancer-type";
/// `spec.loadBalancerClass` of the AWS Load Balancer Controller.
const AWS_NLB_CLASS: &str = "service.k8s.aws/nlb";

/// The PROXY protocol of a load balancer Service: per Service port, the version it sends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProxyProtocol {
    /// Service port -> version, for the ports whose connections carry a header.
    pub ports: BTreeMap<i32, ProxyVersion>,
    /// The annotations that decided, for the report (`key=value`).
    pub sources: Vec<String>,
    /// Our annotation turned PROXY off.
    pub disabled_by_annotation: bool,
    /// Our annotation turned PROXY on (`v1`/`v2`): an explicit word that forces a hairpin even
    /// where the status (`ipMode: Proxy`) or the provider (pass-through) says traffic already
    /// goes through the load balancer, for CNIs that ignore it.
    pub explicit: bool,
}

/// An annotation value nobody understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownValue {
    /// The annotation key.
    pub key: String,
    /// Its value.
    pub value: String,
    /// What would have been accepted.
    pub expected: String,
}

/// Reads the PROXY protocol setting of `svc` from our annotation `own_key`
/// (`hairpin.io/proxy-protocol`: `v1`, `v2` or `off`) and the provider annotations.
pub fn proxy_protocol_of(svc: &Service, own_key: &str) -> (ProxyProtocol, Vec<UnknownValue>) {
    let empty = BTreeMap::new();
    let annotations = svc.metadata.annotations.as_ref().unwrap_or(&empty);
    let service_ports: Vec<i32> = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .map(|p| p.iter().map(|p| p.port).collect())
        .unwrap_or_default();
    let mut unknown = Vec::new();
    if let Some(value) = annotations.get(own_key) {
        match own_setting(own_key, value, &service_ports) {
            Ok(result) => return (result, unknown),
            Err(u) => unknown.push(u),
        }
    }
    let mut result = ProxyProtocol::default();
    let mut decided: BTreeMap<i32, Option<ProxyVersion>> = BTreeMap::new();
    let mut found = Found {
        decided: &mut decided,
        sources: &mut result.sources,
        unknown: &mut unknown,
    };
    found.provider_settings(annotations, svc, &service_ports);
    // Linode per-port settings override the default for their port.
    found.linode_port_settings(annotations, &service_ports);
    result.ports = decided
        .into_iter()
        .filter_map(|(port, v)| v.map(|v| (port, v)))
        .collect();
    (result, unknown)
}

/// Our annotation's word: PROXY off, or `v1`/`v2` on every port; `Err` for a value it does not
/// know (the provider annotations decide then).
fn own_setting(
    own_key: &str,
    value: &str,
    service_ports: &[i32],
) -> Result<ProxyProtocol, UnknownValue> {
    match norm(value).as_str() {
        "off" | "false" | "none" => Ok(ProxyProtocol {
            disabled_by_annotation: true,
            sources: vec![format!("{own_key}={value}")],
            ..ProxyProtocol::default()
        }),
        "v1" | "true" => Ok(all_ports(service_ports, ProxyVersion::V1, own_key, value)),
        "v2" => Ok(all_ports(service_ports, ProxyVersion::V2, own_key, value)),
        _ => Err(UnknownValue {
            key: own_key.to_owned(),
            value: value.to_owned(),
            expected: "v1, v2 or off".into(),
        }),
    }
}

/// What the provider annotations decide, as they are read: per port, the version (or none);
/// the annotations that decided; the values nobody understands.
struct Found<'a> {
    decided: &'a mut BTreeMap<i32, Option<ProxyVersion>>,
    sources: &'a mut Vec<String>,
    unknown: &'a mut Vec<UnknownValue>,
}

impl Found<'_> {
    /// The settings of [`PROVIDER_ANNOTATIONS`], in their order: an earlier one stands.
    fn provider_settings(
        &mut self,
        annotations: &BTreeMap<String, String>,
        svc: &Service,
        service_ports: &[i32],
    ) {
        for entry in PROVIDER_ANNOTATIONS {
            let Some(value) = annotations.get(entry.key) else {
                continue;
            };
            // A filter that does not parse leaves the ports unknown: the annotation is
            // ignored, and the warning names the filter, not the boolean.
            if let ValueFormat::BoolPortsFilter(_, filter_key) = entry.format
                && let Some(filter) = annotations.get(filter_key)
                && port_list(filter).is_none()
            {
                self.unknown.push(UnknownValue {
                    key: filter_key.to_owned(),
                    value: filter.clone(),
                    expected: PORT_LIST.into(),
                });
                continue;
            }
            match parse_value(entry.format, value, svc) {
                Ok(setting) => {
                    if apply_setting(self.decided, service_ports, &setting, false) {
                        self.sources.push(format!("{}={value}", entry.key));
                        if let ValueFormat::BoolPortsFilter(_, filter_key) = entry.format
                            && let Some(filter) = annotations.get(filter_key)
                        {
                            self.sources.push(format!("{filter_key}={filter}"));
                        }
                    }
                }
                Err(expected) => self.unknown.push(UnknownValue {
                    key: entry.key.to_owned(),
                    value: value.clone(),
                    expected,
                }),
            }
        }
    }

    /// Linode's per-port annotations (`LINODE_PORT_PREFIX<port>`), each deciding its port.
    fn linode_port_settings(
        &mut self,
        annotations: &BTreeMap<String, String>,
        service_ports: &[i32],
    ) {
        for (key, value) in annotations.range(LINODE_PORT_PREFIX.to_owned()..) {
            let Some(port) = key.strip_prefix(LINODE_PORT_PREFIX) else {
                break;
            };
            let Ok(port) = port.parse::<i32>() else {
                continue;
            };
            match linode_port_setting(value) {
                Ok(None) => {}
                Ok(Some(version)) => {
                    if service_ports.contains(&port) {
                        self.decided.insert(port, version);
                        self.sources.push(format!("{key}={value}"));
                    }
                }
                Err(expected) => self.unknown.push(UnknownValue {
                    key: key.clone(),
                    value: value.clone(),
                    expected,
                }),
            }
        }
    }
}

/// Records what `setting` says for each port; earlier decisions stand unless `overrides`.
/// Returns whether it decided anything.
fn apply_setting(
    decided: &mut BTreeMap<i32, Option<ProxyVersion>>,
    service_ports: &[i32],
    setting: &ProxySetting,
    overrides: bool,
) -> bool {
    let mut used = false;
    for &port in service_ports {
        let says = match setting {
            // "Off" from one provider's annotation does not veto another's "on".
            ProxySetting::Off => None,
            ProxySetting::All(v) => Some(Some(*v)),
            ProxySetting::Ports(map) => map.get(&port).map(|v| Some(*v)),
        };
        if let Some(says) = says
            && (overrides || !decided.contains_key(&port))
        {
            decided.insert(port, says);
            used = true;
        }
    }
    used
}

fn all_ports(ports: &[i32], version: ProxyVersion, key: &str, value: &str) -> ProxyProtocol {
    ProxyProtocol {
        ports: ports.iter().map(|&p| (p, version)).collect(),
        sources: vec![format!("{key}={value}")],
        disabled_by_annotation: false,
        explicit: true,
    }
}

fn norm(value: &str) -> String {
    value.trim().to_ascii_lowercase()
}

/// Go's `strconv.ParseBool`.
pub(crate) fn parse_bool(value: &str) -> Option<bool> {
    match value.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// Reads one annotation value; `Err` holds what would have been accepted.
pub fn parse_value(
    format: ValueFormat,
    value: &str,
    svc: &Service,
) -> Result<ProxySetting, String> {
    let on_off = |on: bool, v: ProxyVersion| {
        if on {
            ProxySetting::All(v)
        } else {
            ProxySetting::Off
        }
    };
    match format {
        ValueFormat::Bool(v) => parse_bool(value)
            .map(|on| on_off(on, v))
            .ok_or_else(|| "true or false".into()),
        ValueFormat::Words(words) => {
            let n = norm(value);
            words
                .iter()
                .find(|(w, _)| *w == n)
                .map(|(_, v)| v.map_or(ProxySetting::Off, ProxySetting::All))
                .ok_or_else(|| words.iter().map(|(w, _)| *w).collect::<Vec<_>>().join(", "))
        }
        ValueFormat::PortList(v) => port_list_setting(value, v),
        ValueFormat::BoolPortsFilter(v, filter_key) => filtered_setting(value, v, filter_key, svc),
        ValueFormat::FeatureList(feature, v) => Ok(on_off(
            value
                .split(',')
                .any(|f| f.trim().eq_ignore_ascii_case(feature)),
            v,
        )),
        ValueFormat::AwsTargetGroupAttributes => {
            for pair in value.split(',') {
                let Some((k, val)) = pair.split_once('=') else {
                    continue;
                };
                if k.trim() == "proxy_protocol_v2.enabled" {
                    return parse_bool(val)
                        .map(|on| on_off(on, ProxyVersion::V2))
                        .ok_or_else(|| "proxy_protocol_v2.enabled=true or =false".into());
                }
            }
            Ok(ProxySetting::Off)
        }
        ValueFormat::AwsProxyProtocol => aws_proxy_protocol(value, svc),
    }
}

/// `*`/`true` (every port), `false`/empty (none) or a comma-separated list of ports.
fn port_list_setting(value: &str, v: ProxyVersion) -> Result<ProxySetting, String> {
    let n = norm(value);
    match n.as_str() {
        "*" | "true" => return Ok(ProxySetting::All(v)),
        "false" | "" => return Ok(ProxySetting::Off),
        _ => {}
    }
    let mut ports = BTreeMap::new();
    for part in n.split(',') {
        let port = part
            .trim()
            .parse::<i32>()
            .map_err(|_| "true, false, * or a comma-separated list of ports".to_owned())?;
        ports.insert(port, v);
    }
    Ok(ProxySetting::Ports(ports))
}

/// A boolean whose ports, when it is on, the annotation `filter_key` of `svc` may narrow.
fn filtered_setting(
    value: &str,
    v: ProxyVersion,
    filter_key: &str,
    svc: &Service,
) -> Result<ProxySetting, String> {
    let on = parse_bool(value).ok_or_else(|| "true or false".to_owned())?;
    let filter = svc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(filter_key));
    match (on, filter.map(|f| port_list(f))) {
        (false, _) => Ok(ProxySetting::Off),
        (true, None | Some(Some(None))) => Ok(ProxySetting::All(v)),
        (true, Some(Some(Some(ports)))) => Ok(ProxySetting::Ports(
            ports.into_iter().map(|p| (p, v)).collect(),
        )),
        (true, Some(None)) => Err(format!("true or false, with {filter_key} {PORT_LIST}")),
    }
}

/// AWS's `*`: v2 on an NLB (by type annotation or load balancer class), v1 on a classic ELB.
fn aws_proxy_protocol(value: &str, svc: &Service) -> Result<ProxySetting, String> {
    if value.trim() != "*" {
        return Err("*".into());
    }
    let annotations = svc.metadata.annotations.as_ref();
    let lb_type = annotations
        .and_then(|a| a.get(AWS_LB_TYPE))
        .map(|t| norm(t))
        .unwrap_or_default();
    let class = svc
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_class.as_deref());
    let nlb =
        matches!(lb_type.as_str(), "nlb" | "nlb-ip" | "external") || class == Some(AWS_NLB_CLASS);
    Ok(ProxySetting::All(if nlb {
        ProxyVersion::V2
    } else {
        ProxyVersion::V1
    }))
}

const PORT_LIST: &str = "a comma-separated list of ports";

/// A comma-separated list of ports: `Some(None)` when empty (no filter), `None` when a part is
/// not a port number.
fn port_list(value: &str) -> Option<Option<Vec<i32>>> {
    if value.trim().is_empty() {
        return Some(None);
    }
    value
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.trim().parse::<u16>().ok().map(i32::from))
        .collect::<Option<Vec<i32>>>()
        .map(Some)
}

/// `Ok(None)`: the port config says nothing about PROXY; `Ok(Some(None))`: off for this port.
fn linode_port_setting(value: &str) -> Result<Option<Option<ProxyVersion>>, String> {
    let expected = || "JSON with \"proxy-protocol\": \"none\", \"v1\" or \"v2\"".to_owned();
    let json: serde_json::Value = serde_json::from_str(value).map_err(|_| expected())?;
    match json.get("proxy-protocol") {
        None => Ok(None),
        Some(serde_json::Value::String(s)) => match norm(s).as_str() {
            "none" => Ok(Some(None)),
            "v1" => Ok(Some(Some(ProxyVersion::V1))),
            "v2" => Ok(Some(Some(ProxyVersion::V2))),
            _ => Err(expected()),
        },
        Some(_) => Err(expected()),
    }
}
