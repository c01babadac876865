//! The receivers whose PROXY setting lives in custom resources next to a Gateway (or, for
//! Contour and Istio, in their control plane's configuration): Envoy Gateway, NGINX Gateway
//! Fabric, kgateway, Contour and Istio. Each of them configures Envoy's (or nginx's) PROXY
//! listener without a fallback, so the header is required, unless the setting says optional.

use serde_json::Value;

use super::{
    Found, PortReceiver, Read, Requirement, containers, flag, port_read, read, text_at, unknown,
};
use crate::workloads::DynamicObject;

const REQUIRED: Requirement = Requirement::Required { only_v2: false };

/// Whether a policy's `targetRef`, `targetRefs` or `targetSelectors` pick `gateway` (a policy
/// targets objects of its own namespace).
fn targets(policy: &DynamicObject, gateway: &Value) -> bool {
    if policy.metadata.namespace.as_deref() != Some(text_at(gateway, "/metadata/namespace")) {
        return false;
    }
    let name = text_at(gateway, "/metadata/name");
    let is_gateway =
        |r: &Value| r.get("kind").and_then(Value::as_str).unwrap_or("Gateway") == "Gateway";
    let by_ref = policy
        .spec
        .get("targetRef")
        .into_iter()
        .chain(
            policy
                .spec
                .get("targetRefs")
                .and_then(Value::as_array)
                .into_iter()
                .flatten(),
        )
        .any(|r| is_gateway(r) && r.get("name").and_then(Value::as_str) == Some(name));
    let labels = gateway.pointer("/metadata/labels");
    let by_selector = policy
        .spec
        .get("targetSelectors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|s| is_gateway(s))
        .any(|s| {
            let wanted = s.get("matchLabels").and_then(Value::as_object);
            wanted.is_some_and(|w| {
                !w.is_empty()
                    && w.iter()
                        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
            })
        });
    by_ref || by_selector
}

/// The references of a policy (`targetRef`, `targetRefs`).
fn references(policy: &DynamicObject) -> impl Iterator<Item = &Value> {
    policy.spec.get("targetRef").into_iter().chain(
        policy
            .spec
            .get("targetRefs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten(),
    )
}

/// The listeners (`sectionName`s) of the Gateway a policy targets one by one; empty for a
/// policy that targets the whole Gateway (a reference without `sectionName`, or a selector).
fn sections<'p>(policy: &'p DynamicObject, gateway: &Value) -> Vec<&'p str> {
    let name = text_at(gateway, "/metadata/name");
    let to_gateway: Vec<&Value> = references(policy)
        .filter(|r| r.get("kind").and_then(Value::as_str).unwrap_or("Gateway") == "Gateway")
        .filter(|r| r.get("name").and_then(Value::as_str) == Some(name))
        .collect();
    let whole = policy.spec.get("targetSelectors").is_some()
        || to_gateway.is_empty()
        || to_gateway.iter().any(|r| r.get("sectionName").is_none());
    if whole {
        return Vec::new();
    }
    to_gateway
        .iter()
        .filter_map(|r| r.get("sectionName").and_then(Value::as_str))
        .collect()
}

/// Whether a policy targets a `ListenerSet` (Gateway API's `XListenerSet`, or `ListenerSet`):
/// its listeners are not read.
fn targets_listener_set(policy: &DynamicObject) -> bool {
    references(policy).any(|r| {
        r.get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("ListenerSet"))
    })
}

/// What one ClientTrafficPolicy sets.
fn client_traffic(policy: &DynamicObject) -> Read {
    let where_ = policy.describe();
    if let Some(pp) = policy.spec.get("proxyProtocol").filter(|v| !v.is_null()) {
        return match pp.get("optional").and_then(Value::as_bool) {
            Some(true) => read(
                Requirement::Optional,
                "proxyProtocol: {optional: true}",
                where_,
            ),
            _ => read(REQUIRED, "proxyProtocol: {}", where_),
        };
    }
    match policy
        .spec
        .get("enableProxyProtocol")
        .and_then(Value::as_bool)
    {
        Some(true) => read(REQUIRED, "enableProxyProtocol: true", where_),
        _ => read(Requirement::Off, "no proxyProtocol", where_),
    }
}

impl Found<'_> {
    /// The policies of `kind` (API group `group`) that target the Gateway, oldest first (the
    /// one that wins where several conflict).
    fn policies(&self, group: &str, kind: &str) -> Result<Vec<&DynamicObject>, Read> {
        let Some(gateway) = &self.gateway else {
            return Err(unknown(
                "no Gateway found whose address is the load balancer's",
            ));
        };
        let mut found: Vec<&DynamicObject> = self
            .snapshot
            .receivers
            .objects
            .iter()
            .filter(|o| o.kind == kind && o.group() == group && targets(o, gateway))
            .collect();
        found.sort_by_key(|o| {
            (
                o.metadata.creation_timestamp.clone().map(|t| t.0),
                o.describe(),
            )
        });
        Ok(found)
    }

    /// envoyproxy/gateway api/v1alpha1/clienttrafficpolicy_types.go: `proxyProtocol`
    /// (`ProxyProtocolSettings`, v1.5+) takes precedence over the deprecated
    /// `enableProxyProtocol: true` ("Proxy Protocol must be present when this field is set,
    /// else the connection is closed"); `proxyProtocol.optional: true` sets Envoy's
    /// `allow_requests_without_proxy_protocol` (internal/xds/translator/proxy_protocol.go).
    /// Precedence as Envoy Gateway has it (internal/gatewayapi/clienttrafficpolicy.go; the
    /// ClientTrafficPolicy concept page): a policy that targets a listener (`sectionName`)
    /// applies to it, one that targets the whole Gateway to the remaining listeners; among
    /// equals the oldest wins. This is the Gateway-wide setting; [`Found::envoy_gateway_ports`]
    /// reads each listener.
    pub(super) fn envoy_gateway(&self) -> Read {
        let policies = match self.policies("gateway.envoyproxy.io", "ClientTrafficPolicy") {
            Ok(p) => p,
            Err(read) => return read,
        };
        let Some(gateway) = &self.gateway else {
            return unknown("no Gateway found whose address is the load balancer's");
        };
        match policies.iter().find(|p| sections(p, gateway).is_empty()) {
            Some(policy) => client_traffic(policy),
            None => read(
                Requirement::Off,
                "no ClientTrafficPolicy targets the whole Gateway",
                self.gateway_name(),
            ),
        }
    }

    /// Envoy Gateway per Service port: the Gateway's listeners on that port (Envoy Gateway's
    /// Service ports are its Gateway's listener ports), each with the policy that targets it by
    /// `sectionName`, else the Gateway-wide one. A port without a listener of the Gateway (a
    /// `ListenerSet`'s) is unknown. `None` where no policy targets single listeners or a
    /// `ListenerSet` (the whole reading holds).
    pub(super) fn envoy_gateway_ports(&self) -> Option<Vec<PortReceiver>> {
        let policies = self
            .policies("gateway.envoyproxy.io", "ClientTrafficPolicy")
            .ok()?;
        let gateway = self.gateway.as_ref()?;
        let namespace = text_at(gateway, "/metadata/namespace");
        let listener_sets = self.snapshot.receivers.objects.iter().any(|o| {
            o.kind == "ClientTrafficPolicy"
                && o.metadata.namespace.as_deref() == Some(namespace)
                && targets_listener_set(o)
        });
        if !listener_sets && policies.iter().all(|p| sections(p, gateway).is_empty()) {
            return None;
        }
        let whole = self.envoy_gateway();
        let listeners: Vec<(&str, i64)> = gateway
            .pointer("/spec/listeners")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|l| {
                Some((
                    l.get("name").and_then(Value::as_str)?,
                    l.get("port").and_then(Value::as_i64)?,
                ))
            })
            .collect();
        let on_listener = |name: &str| -> Read {
            match policies
                .iter()
                .find(|p| sections(p, gateway).contains(&name))
            {
                Some(policy) => {
                    let (r, setting, from) = client_traffic(policy);
                    (r, format!("listener {name}: {setting}"), from)
                }
                None => whole.clone(),
            }
        };
        let ports = super::tcp_service_ports(self.svc).map(|sp| {
            let reads: Vec<(&str, Read)> = listeners
                .iter()
                .filter(|(_, port)| *port == i64::from(sp.port))
                .map(|(name, _)| (*name, on_listener(name)))
                .collect();
            let reading = match reads.first() {
                None => unknown(format!(
                    "no listener of {} on port {} (a ListenerSet's listeners are not read)",
                    self.gateway_name(),
                    sp.port
                )),
                Some((_, first)) if reads.iter().all(|(_, r)| r.0 == first.0) => first.clone(),
                Some(_) => unknown(format!(
                    "the listeners {} on port {} differ",
                    reads.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
                    sp.port
                )),
            };
            port_read(sp, reading)
        });
        Some(ports.collect())
    }

    fn gateway_name(&self) -> String {
        self.gateway.as_ref().map_or_else(String::new, |g| {
            format!(
                "Gateway {}/{}",
                text_at(g, "/metadata/namespace"),
                text_at(g, "/metadata/name")
            )
        })
    }

    /// The object a `parametersRef` (`group`, `kind`, `name`, optional `namespace`) names.
    fn parameters(
        &self,
        reference: Option<&Value>,
        namespace: &str,
        kind: &str,
    ) -> Option<Result<&DynamicObject, String>> {
        let reference = reference?;
        if reference.get("kind").and_then(Value::as_str) != Some(kind) {
            return None;
        }
        let name = reference
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        // An empty `namespace`: a cluster-scoped object (NGINX Gateway Fabric 1.x's
        // NginxProxy v1alpha1, named by the GatewayClass without a namespace).
        let ns = reference
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or(namespace);
        let found = self.snapshot.receivers.objects.iter().find(|o| {
            o.kind == kind
                && o.metadata.name.as_deref() == Some(name)
                && o.metadata.namespace.as_deref().unwrap_or_default() == ns
        });
        let what = if ns.is_empty() {
            format!("{kind} {name} (cluster-scoped)")
        } else {
            format!("{kind} {ns}/{name}")
        };
        Some(found.ok_or_else(|| format!("{what} is not in the snapshot")))
    }

    /// nginx/nginx-gateway-fabric apis/v1alpha2/nginxproxy_types.go: `rewriteClientIP.mode:
    /// ProxyProtocol` "sets the proxy_protocol parameter on the listen directive of all
    /// servers" (internal/controller/nginx/config/servers.go). The Gateway's
    /// `infrastructure.parametersRef` NginxProxy overrides its GatewayClass's `parametersRef` one.
    pub(super) fn nginx_gateway_fabric(&self) -> Read {
        let Some(gateway) = &self.gateway else {
            return unknown("no Gateway found whose address is the load balancer's");
        };
        let namespace = text_at(gateway, "/metadata/namespace");
        let class = super::gateway_class(self.snapshot, gateway);
        let candidates = [
            self.parameters(
                gateway.pointer("/spec/infrastructure/parametersRef"),
                namespace,
                "NginxProxy",
            ),
            // NGINX Gateway Fabric 1.x: the GatewayClass names a cluster-scoped NginxProxy
            // (gateway.nginx.org/v1alpha1, apis/v1alpha1/nginxproxy_types.go
            // `+kubebuilder:resource:scope=Cluster`) without a namespace; 2.x names a
            // namespaced v1alpha2 one with its namespace.
            class.and_then(|c| self.parameters(c.spec.get("parametersRef"), "", "NginxProxy")),
        ];
        for candidate in candidates.into_iter().flatten() {
            let proxy = match candidate {
                Ok(p) => p,
                Err(why) => return unknown(why),
            };
            if let Some(mode) = proxy
                .spec
                .pointer("/rewriteClientIP/mode")
                .and_then(Value::as_str)
            {
                let requirement = if mode == "ProxyProtocol" {
                    REQUIRED
                } else {
                    Requirement::Off
                };
                return read(
                    requirement,
                    format!("rewriteClientIP.mode: {mode}"),
                    proxy.describe(),
                );
            }
        }
        read(
            Requirement::Off,
            "no NginxProxy sets rewriteClientIP.mode",
            self.gateway_name(),
        )
    }

    /// kgateway-dev/kgateway api/v1alpha1/kgateway/listener_policy_types.go: `proxyProtocol`
    /// ("When set, Envoy will expect connections to include the PROXY protocol header") in
    /// `default`; `perPort[].listener` replaces it for its port ([`Found::kgateway_ports`]).
    pub(super) fn kgateway(&self) -> Read {
        let policies = match self.policies("gateway.kgateway.dev", "ListenerPolicy") {
            Ok(p) => p,
            Err(read) => return read,
        };
        for policy in &policies {
            if policy
                .spec
                .pointer("/default/proxyProtocol")
                .is_some_and(|v| !v.is_null())
            {
                return read(REQUIRED, "default.proxyProtocol: {}", policy.describe());
            }
        }
        read(
            Requirement::Off,
            "no ListenerPolicy sets default.proxyProtocol",
            self.gateway_name(),
        )
    }

    /// kgateway per Service port (its Service ports are the Gateway's listener ports): a
    /// `perPort` entry for the port "completely replaces the default configuration for all
    /// listeners handling traffic that match this port" (listener_policy_types.go); the oldest
    /// policy's entry wins. `None` where no policy has `perPort`.
    pub(super) fn kgateway_ports(&self) -> Option<Vec<PortReceiver>> {
        let policies = self
            .policies("gateway.kgateway.dev", "ListenerPolicy")
            .ok()?;
        let entries = |p: &&DynamicObject| {
            p.spec
                .get("perPort")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
        };
        if !policies.iter().any(entries) {
            return None;
        }
        let whole = self.kgateway();
        let ports = super::tcp_service_ports(self.svc).map(|sp| {
            let entry = policies.iter().find_map(|p| {
                let e =
                    p.spec.get("perPort")?.as_array()?.iter().find(|e| {
                        e.get("port").and_then(Value::as_i64) == Some(i64::from(sp.port))
                    })?;
                Some((p, e))
            });
            let reading = match entry {
                Some((p, e))
                    if e.pointer("/listener/proxyProtocol")
                        .is_some_and(|v| !v.is_null()) =>
                {
                    read(
                        REQUIRED,
                        format!("perPort {}: listener.proxyProtocol: {{}}", sp.port),
                        p.describe(),
                    )
                }
                Some((p, _)) => read(
                    Requirement::Off,
                    format!("perPort {}: no listener.proxyProtocol", sp.port),
                    p.describe(),
                ),
                None => whole.clone(),
            };
            port_read(sp, reading)
        });
        Some(ports.collect())
    }

    /// projectcontour/contour cmd/contour/serve.go (`--use-proxy-protocol`, "Use PROXY
    /// protocol for all listeners"), apis/projectcontour/v1alpha1/contourconfig.go
    /// (`envoy.listener.useProxyProtocol` of the ContourConfiguration `--contour-config-name`
    /// names) and contourdeployment.go (`runtimeSettings`, for Gateways the provisioner runs).
    /// Contour adds Envoy's proxy_protocol listener filter with its defaults
    /// (internal/envoy/v3/listener.go): the header is required.
    pub(super) fn contour(&self) -> Read {
        if let Some(gateway) = &self.gateway {
            let namespace = text_at(gateway, "/metadata/namespace");
            let class = super::gateway_class(self.snapshot, gateway);
            let reference = class.and_then(|c| c.spec.get("parametersRef"));
            if let Some(found) = self.parameters(reference, namespace, "ContourDeployment") {
                return match found {
                    Ok(d) => {
                        use_proxy_protocol(d, "/runtimeSettings/envoy/listener/useProxyProtocol")
                    }
                    Err(why) => unknown(why),
                };
            }
        }
        let namespace = self.namespace();
        let contour = self.snapshot.receivers.workloads.iter().find(|w| {
            w.metadata.namespace.as_deref() == Some(namespace)
                && containers(w).any(|c| {
                    c.image
                        .as_deref()
                        .is_some_and(|i| super::repository(i).ends_with("projectcontour/contour"))
                        && c.args.iter().flatten().next().map(String::as_str) == Some("serve")
                })
        });
        let Some(contour) = contour else {
            return unknown(format!(
                "no Contour Deployment (`contour serve`) found in namespace {namespace}"
            ));
        };
        if let Some(v) = flag(contour, "use-proxy-protocol")
            && (v.is_empty() || crate::providers::parse_bool(&v) == Some(true))
        {
            return read(REQUIRED, "--use-proxy-protocol", contour.describe());
        }
        if let Some(name) = flag(contour, "contour-config-name") {
            let config = self.snapshot.receivers.objects.iter().find(|o| {
                o.kind == "ContourConfiguration"
                    && o.metadata.namespace.as_deref() == Some(namespace)
                    && o.metadata.name.as_deref() == Some(name.as_str())
            });
            return match config {
                Some(c) => use_proxy_protocol(c, "/envoy/listener/useProxyProtocol"),
                None => unknown(format!(
                    "ContourConfiguration {namespace}/{name} is not in the snapshot"
                )),
            };
        }
        read(
            Requirement::Off,
            "no --use-proxy-protocol",
            contour.describe(),
        )
    }

    /// istio/api mesh/v1alpha1/proxy.proto (`Topology.proxy_protocol`: "Enables PROXY protocol
    /// for downstream connections on a gateway"), set per gateway in the pods' (or the Gateway's)
    /// `proxy.istio.io/config` annotation or for all in `meshConfig.defaultConfig`
    /// (ConfigMap `istio`, key `mesh`); istio pilot/pkg/xds/filters/filters.go adds Envoy's
    /// proxy_protocol listener filter with its defaults: the header is required.
    pub(super) fn istio(&self) -> Read {
        const KEY: &str = "proxy.istio.io/config";
        let annotated = self
            .workload
            .and_then(|w| Some((w.annotation(KEY)?, w.describe())))
            .or_else(|| {
                let g = self.gateway.as_ref()?;
                let value = g.pointer("/metadata/annotations")?.get(KEY)?.as_str()?;
                Some((value, self.gateway_name()))
            });
        if let Some((text, where_)) = annotated {
            let value: Option<Value> = serde_saphyr::from_str(text).ok();
            if value
                .as_ref()
                .and_then(|v| v.pointer("/gatewayTopology/proxyProtocol"))
                .is_some()
            {
                return read(
                    REQUIRED,
                    format!("{KEY}: gatewayTopology.proxyProtocol"),
                    where_,
                );
            }
        }
        let read = self.istio_mesh();
        if read.0 == Requirement::Off
            && let Some(filter) = self.istio_envoy_filter()
        {
            return unknown(format!(
                "{filter} selects the gateway and speaks of the PROXY protocol: EnvoyFilters are not read"
            ));
        }
        read
    }

    /// An EnvoyFilter that applies to the gateway and speaks of the PROXY protocol (how
    /// Istio's own blog turns it on): `Kind namespace/name`. It applies to the gateway when it
    /// is in the gateway's namespace or the root namespace (`istio-system`) and its
    /// `workloadSelector` (none: every proxy there) picks the pods, or its `targetRefs` name
    /// the Gateway (networking/v1alpha3/envoy_filter.proto).
    fn istio_envoy_filter(&self) -> Option<String> {
        let namespace = self.namespace();
        let labels = self.workload.map(crate::workloads::Workload::labels);
        let gateway = self.gateway.as_ref().map(|g| text_at(g, "/metadata/name"));
        self.snapshot
            .receivers
            .objects
            .iter()
            .filter(|o| o.kind == "EnvoyFilter" && o.group() == "networking.istio.io")
            .filter(|o| {
                let ns = o.metadata.namespace.as_deref().unwrap_or_default();
                let by_ref = o
                    .spec
                    .get("targetRefs")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .any(|r| {
                        r.get("kind").and_then(Value::as_str) == Some("Gateway")
                            && gateway.is_some()
                            && r.get("name").and_then(Value::as_str) == gateway
                    });
                let selected = match o
                    .spec
                    .pointer("/workloadSelector/labels")
                    .and_then(Value::as_object)
                {
                    Some(wanted) => wanted.iter().all(|(k, v)| {
                        labels.and_then(|l| l.get(k)).map(String::as_str) == v.as_str()
                    }),
                    None => o.spec.get("targetRefs").is_none(),
                };
                (ns == namespace || ns == "istio-system") && (by_ref || selected)
            })
            .find(|o| {
                let text = o.spec.to_string().to_ascii_lowercase();
                text.contains("proxy_protocol") || text.contains("proxyprotocol")
            })
            .map(|o| o.describe())
    }

    /// Istio's mesh-wide setting (ConfigMap `istio`, key `mesh`).
    fn istio_mesh(&self) -> Read {
        let mesh = self
            .snapshot
            .config_maps
            .iter()
            .filter(|c| c.metadata.name.as_deref() == Some("istio"))
            .min_by_key(|c| c.metadata.namespace.as_deref() != Some("istio-system"));
        let Some(mesh) = mesh else {
            return unknown(
                "no proxyProtocol in the gateway's proxy.istio.io/config, and the mesh config (ConfigMap istio-system/istio) is not in the snapshot",
            );
        };
        let where_ = format!(
            "ConfigMap {} key mesh",
            crate::snapshot::ObjectRef::from_meta(&mesh.metadata)
        );
        let text = mesh
            .data
            .as_ref()
            .and_then(|d| d.get("mesh"))
            .cloned()
            .unwrap_or_default();
        let value: Option<Value> = serde_saphyr::from_str(&text).ok();
        if value
            .as_ref()
            .and_then(|v| v.pointer("/defaultConfig/gatewayTopology/proxyProtocol"))
            .is_some()
        {
            read(
                REQUIRED,
                "defaultConfig.gatewayTopology.proxyProtocol",
                where_,
            )
        } else {
            read(Requirement::Off, "no gatewayTopology.proxyProtocol", where_)
        }
    }
}

fn use_proxy_protocol(object: &DynamicObject, pointer: &str) -> Read {
    let field = pointer.trim_start_matches('/').replace('/', ".");
    match object.spec.pointer(pointer).and_then(Value::as_bool) {
        Some(true) => read(REQUIRED, format!("{field}: true"), object.describe()),
        _ => read(
            Requirement::Off,
            format!("{field} not true"),
            object.describe(),
        ),
    }
}
