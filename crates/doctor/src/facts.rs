//! The facts about load balancers and the Service dataplane that the doctor's stages share
//! (read by [`crate::cluster`], judged by [`crate::dataplane`], [`crate::cure`] and
//! [`crate::verdict`]): plain values, no logic beyond reading versions, so that no stage
//! imports another's to get them.

use serde::Serialize;

use crate::providers::Provider;

/// One LoadBalancer Service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LoadBalancerFacts {
    /// `namespace/name`.
    pub service: String,
    /// The cloud, from the annotations.
    pub provider: Option<Provider>,
    /// The PROXY version the load balancer sends (`v1`/`v2`), when it sends one.
    pub proxy_protocol: Option<String>,
    /// `status.loadBalancer.ingress[]`: IP (with `ipMode`) or hostname.
    pub ingress: Vec<LbIngress>,
    /// `spec.externalTrafficPolicy`.
    pub external_traffic_policy: Option<String>,
    /// True when in-cluster clients bypass it and a hairpin is needed.
    pub needs_hairpin: bool,
    /// Why no hairpin is needed, when it is not.
    pub not_needed_reason: Option<String>,
    /// The receiver behind it and its PROXY setting (`ingress-nginx Deployment a/b: PROXY
    /// required by use-proxy-protocol: "true" (ConfigMap a/b)`), when one was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receiver: Option<String>,
    /// The load balancer and its receiver disagree about the PROXY protocol: the planner's
    /// warning, naming both settings and the fix (escaped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<String>,
}

/// One entry of `status.loadBalancer.ingress`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LbIngress {
    /// The IP, if any.
    pub ip: Option<String>,
    /// The hostname, if any.
    pub hostname: Option<String>,
    /// `ipMode` (`VIP`, `Proxy`), if set.
    pub ip_mode: Option<String>,
}

/// Cilium's version and whether it replaces kube-proxy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CiliumFacts {
    /// The `cilium` DaemonSet's image tag, e.g. `v1.16.5`.
    pub version: Option<String>,
    /// `kube-proxy-replacement` in `kube-system/cilium-config`, as written.
    pub kube_proxy_replacement: Option<String>,
    /// Whether Cilium handles Services instead of kube-proxy (`true`/`strict`), no
    /// (`false`/`disabled`/absent), or unknown (`partial`: depends on which features are on).
    pub replaces_kube_proxy: Option<bool>,
    /// Whether this Cilium version ignores `ipMode: Proxy` (before 1.17, and 1.18.0); None when
    /// the version is unknown.
    pub ignores_ip_mode: Option<bool>,
}

impl CiliumFacts {
    /// From the DaemonSet's image and cilium-config's `kube-proxy-replacement`.
    pub fn new(image: Option<&str>, kube_proxy_replacement: Option<&str>) -> CiliumFacts {
        let version = image.and_then(image_tag);
        let replaces_kube_proxy = match kube_proxy_replacement.map(str::trim) {
            Some("true" | "strict") => Some(true),
            None | Some("false" | "disabled" | "") => Some(false),
            Some(_) => None,
        };
        CiliumFacts {
            ignores_ip_mode: version
                .as_deref()
                .and_then(parse_semver)
                .map(cilium_ignores_ip_mode),
            version,
            kube_proxy_replacement: kube_proxy_replacement.map(str::to_owned),
            replaces_kube_proxy,
        }
    }
}

/// `v1.16.5`, `1.17.0-rc.1` -> `(1, 16, 5)`, `(1, 17, 0)`.
pub fn parse_semver(tag: &str) -> Option<(u32, u32, u32)> {
    let tag = tag.strip_prefix('v').unwrap_or(tag);
    let core = tag.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(str::parse::<u32>);
    let major = parts.next()?.ok()?;
    let minor = parts.next()?.ok()?;
    let patch = parts.next().unwrap_or(Ok(0)).ok()?;
    Some((major, minor, patch))
}

/// Cilium honours `ipMode: Proxy` from 1.17, except in 1.18.0.
fn cilium_ignores_ip_mode(version: (u32, u32, u32)) -> bool {
    version < (1, 17, 0) || version == (1, 18, 0)
}

/// The tag of an image reference (`quay.io/cilium/cilium:v1.16.5@sha256:...` -> `v1.16.5`).
pub(crate) fn image_tag(image: &str) -> Option<String> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split_once(':')
        .map(|(_, tag)| tag.to_owned())
        .filter(|tag| !tag.is_empty())
}
