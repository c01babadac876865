//! Which cure the cluster can use for a load balancer, and why (issue 30): **the CCM's**
//! (its cloud controller sets `ipMode: Proxy` itself), **native** (hairpin sets `ipMode:
//! Proxy`, where kube-proxy or the CNI honours it), **dns** (hairpin's DNS rules through its
//! proxy). Pure: from the load balancer, its cloud controller ([`hairpin_planner::native::
//! ccm_ip_mode`]), who handles its IP ([`crate::dataplane`]), hairpin's record of its probe
//! (`hairpin-native`) and the plan's choice.
//!
//! Also the one fix that needs no hairpin at all when cert-manager's HTTP-01 self-check is the
//! only in-cluster client: cert-manager 1.21's per-solver `waitInsteadOfSelfCheck` (an
//! `ACMEChallengeSolver` field, a duration: cert-manager skips its self-check, waits, then asks
//! the ACME server to validate; `pkg/controller/acmechallenges/readiness.go` in
//! cert-manager/cert-manager, release notes 1.21).

use hairpin_planner::CureMode;
use hairpin_planner::delivery::{Delivery, DeliveryOf, VIP_NODES, VIP_OUTAGE};
use hairpin_planner::escape::Text;
use hairpin_planner::native::{CureChoice, IP_MODE_PROXY, NativeEntry, NativeProgress, ProbeState};
use serde::Serialize;

use crate::dataplane::IpModeSupport;
use crate::facts::{LoadBalancerFacts, parse_semver};

/// A cloud controller's Deployment, read for its version.
#[derive(Clone, Copy, Debug)]
pub struct CcmDeployment {
    /// The controller's name, as [`hairpin_planner::native::ccm_ip_mode`] names it.
    pub controller: &'static str,
    /// The Deployment's namespace.
    pub namespace: &'static str,
    /// The Deployment's name.
    pub name: &'static str,
    /// The version from which it sets `ipMode: Proxy`.
    pub since: (u32, u32, u32),
}

/// Cloud controllers whose Deployment the doctor reads for their version, with the version
/// from which they set `ipMode: Proxy` (hcloud PR #783, cloud-provider-openstack PR #2587).
pub const CCM_DEPLOYMENTS: &[CcmDeployment] = &[
    CcmDeployment {
        controller: "hcloud-cloud-controller-manager",
        namespace: "kube-system",
        name: "hcloud-cloud-controller-manager",
        since: (1, 21, 0),
    },
    CcmDeployment {
        controller: "cloud-provider-openstack",
        namespace: "kube-system",
        name: "openstack-cloud-controller-manager",
        since: (1, 30, 0),
    },
];

/// The cloud controller that computes the load balancer's `ipMode` itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CcmFacts {
    /// Its name (`hcloud-cloud-controller-manager`).
    pub controller: String,
    /// Its own setting for `Proxy` (annotation, version).
    pub setting: String,
    /// Its image tag, when its Deployment was found.
    pub version: Option<String>,
    /// The version from which it sets `ipMode: Proxy`, when known (`1.21`).
    pub since: Option<String>,
}

impl CcmFacts {
    /// `hcloud-cloud-controller-manager v1.21.0` (or without a version).
    pub fn describe(&self) -> String {
        match &self.version {
            Some(version) => format!("{} {}", self.controller, Text(version)),
            None => self.controller.clone(),
        }
    }

    /// Whether the version found predates the one that sets `ipMode`.
    fn too_old(&self) -> bool {
        let (Some(version), Some(since)) = (&self.version, &self.since) else {
            return false;
        };
        matches!((parse_semver(version), parse_semver(since)), (Some(v), Some(s)) if v < s)
    }
}

/// cert-manager, when its controller Deployment (`cert-manager/cert-manager`) was found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CertManagerFacts {
    /// `namespace/name` of the Deployment.
    pub deployment: String,
    /// Its image tag.
    pub version: Option<String>,
}

impl CertManagerFacts {
    /// The fix that needs no hairpin when cert-manager's HTTP-01 self-check is the only
    /// in-cluster client of the names.
    pub fn fix(&self) -> String {
        let found = self.version.as_deref().map_or_else(
            || "cert-manager (version unknown) runs here".to_owned(),
            |v| format!("cert-manager {} runs here", Text(v)),
        );
        let upgrade = match self.version.as_deref().and_then(parse_semver) {
            Some(v) if v < (1, 21, 0) => ", after upgrading it to 1.21 or later",
            _ => "",
        };
        format!(
            "if cert-manager's HTTP-01 self-check is the only in-cluster client that breaks \
             ({found}): set `waitInsteadOfSelfCheck: 30s` on the solver (next to `http01:` in \
             the Issuer's or ClusterIssuer's `spec.acme.solvers[]`; cert-manager 1.21 or \
             later{upgrade}): cert-manager then skips its self-check, waits that long and \
             asks the ACME server to validate. No hairpin needed"
        )
    }
}

/// The cure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CureKind {
    /// The cloud controller sets `ipMode: Proxy` and it is honoured: nothing for hairpin.
    Ccm,
    /// hairpin's native cure: `ipMode: Proxy`, proven by probe.
    Native,
    /// hairpin's DNS cure.
    Dns,
    /// The load balancer needs no cure.
    NotNeeded,
    /// Native if the controller's probe proves it, else DNS: who handles the IP is unknown.
    Unknown,
}

impl CureKind {
    /// The word printed.
    pub fn as_str(self) -> &'static str {
        match self {
            CureKind::Ccm => "the CCM cures it",
            CureKind::Native => "native",
            CureKind::Dns => "dns",
            CureKind::NotNeeded => "none needed",
            CureKind::Unknown => "native if proven, else dns",
        }
    }
}

/// hairpin's record of its native cure of the load balancer (`hairpin-native`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProbeRecord {
    /// `probing`, `proven` or `failed`.
    pub state: String,
    /// When (RFC 3339).
    pub since: String,
    /// The probe's outcome per port.
    pub reason: String,
    /// The status IPs hairpin set to `ipMode: Proxy`.
    pub ips: Vec<String>,
}

impl ProbeRecord {
    fn of(entry: &NativeEntry) -> ProbeRecord {
        ProbeRecord {
            state: entry.state.as_str().into(),
            since: entry.since.clone(),
            reason: entry.reason.clone(),
            ips: entry.original.iter().map(|was| was.ip.clone()).collect(),
        }
    }

    /// One line, escaped: `proven since ... on 198.51.100.10: ...`.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "{} since {} on {}",
            Text(&self.state),
            Text(if self.since.is_empty() {
                "(unknown)"
            } else {
                &self.since
            }),
            Text(&self.ips.join(", "))
        );
        if !self.reason.is_empty() {
            text.push_str(&format!(": {}", Text(&self.reason)));
        }
        text
    }
}

/// The cure this cluster can use for one load balancer, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CureFacts {
    /// The cure.
    pub cure: CureKind,
    /// Why, in words (escaped).
    pub why: String,
    /// What hairpin's plan chooses now (`--cure` and the Service's annotation): the cure and
    /// the planner's reason.
    pub plan: Option<String>,
    /// hairpin's record of its probe, when it tried the native cure.
    pub probe: Option<ProbeRecord>,
    /// The plan sets `ipMode: Proxy` and probes (to be proven, or probing).
    pub plan_tries_native: bool,
    /// How the load balancer reaches the nodes: a proxy (native is safe), a VIP the nodes
    /// receive (native would cut off every client outside the cluster) or unknown.
    pub delivery: Option<DeliveryOf>,
}

impl CureFacts {
    /// `native: kube-proxy v1.31.2 (iptables) honours ipMode: Proxy (...)`.
    pub fn describe(&self) -> String {
        format!("{}: {}", self.cure.as_str(), self.why)
    }

    /// The load balancer is a VIP the nodes receive: never `ipMode: Proxy`.
    pub fn is_vip(&self) -> bool {
        self.delivery
            .as_ref()
            .is_some_and(|d| d.kind == Delivery::Vip)
    }

    /// The delivery line: `proxy: DigitalOcean (...)`, `vip: MetalLB, annotation ...: hairpin
    /// never sets ipMode: Proxy here, which would cut off ...` (escaped).
    pub fn describe_delivery(&self) -> Option<String> {
        let delivery = self.delivery.as_ref()?;
        Some(match delivery.kind {
            Delivery::Proxy => format!(
                "proxy: {} (ipMode: Proxy cuts no client outside the cluster off)",
                delivery.evidence
            ),
            Delivery::Vip => format!(
                "vip: {}: {VIP_NODES}. hairpin never sets ipMode: Proxy here, the outage it \
                 avoids: {VIP_OUTAGE}",
                delivery.evidence
            ),
            Delivery::Unknown => format!(
                "unknown: {}. hairpin's `--cure auto` tries native only on a proxy load \
                 balancer: were it a VIP, {VIP_OUTAGE}",
                delivery.evidence
            ),
        })
    }
}

/// The cure for `lb`: `ccm` computes its `ipMode` (when it does), `support` says whether its
/// IP's handler honours `ipMode`, `record` is hairpin's probe record, `plan` the plan's choice,
/// `delivery` how the load balancer reaches the nodes (native only on a proxy).
pub fn judge(
    lb: &LoadBalancerFacts,
    ccm: Option<&CcmFacts>,
    support: &IpModeSupport,
    record: Option<&NativeEntry>,
    plan: Option<&CureChoice>,
    delivery: Option<DeliveryOf>,
) -> CureFacts {
    let forced = plan.is_some_and(|choice| choice.mode == CureMode::Native);
    let (cure, why) = match ccm {
        Some(ccm) => by_the_ccm(lb, ccm, support),
        None => match not_native(lb, delivery.as_ref(), forced) {
            Some(why) => (CureKind::Dns, why),
            None => by_hairpin(lb, support, record),
        },
    };
    // The Nodes' gate: a node known not to honour ipMode keeps the DNS cure for everyone,
    // whatever this machine's probe or the record say (the plan's reason names the nodes),
    // unless the doctor's own reading says DNS already (it then says why in its own words).
    let (cure, why) = match plan.filter(|c| !c.nodes.is_empty() && ccm.is_none()) {
        Some(choice) if cure != CureKind::Dns => (CureKind::Dns, choice.reason.clone()),
        _ => (cure, why),
    };
    CureFacts {
        cure,
        why,
        plan: plan.map(|choice| {
            // The planner's reason is escaped already.
            format!(
                "{} (--cure {}): {}",
                choice.cure.as_str(),
                choice.mode.as_str(),
                choice.reason
            )
        }),
        probe: record.map(ProbeRecord::of),
        plan_tries_native: plan.is_some_and(|choice| {
            matches!(
                choice.native,
                Some(NativeProgress::ToProve | NativeProgress::Probing)
            )
        }),
        delivery,
    }
}

/// Why hairpin's native cure is not for this load balancer, whatever the data plane: a VIP the
/// nodes receive (never), or an unknown delivery (`--cure auto` tries native only on a proxy;
/// `forced`: `--cure native` or the Service's annotation, which may force it there).
fn not_native(
    lb: &LoadBalancerFacts,
    delivery: Option<&DeliveryOf>,
    forced: bool,
) -> Option<String> {
    let delivery = delivery?;
    if !lb.needs_hairpin {
        // Another writer's `ipMode: Proxy` on a VIP: the outage is happening now.
        return (status_proxy(lb) && delivery.kind == Delivery::Vip).then(|| {
            format!(
                "its status says ipMode: Proxy, but {VIP_NODES} ({}): kube-proxy drops every \
                 rule for that IP, so every client outside the cluster is cut off now. Remove \
                 ipMode: Proxy from the status (hairpin never sets it on a VIP); hairpin's DNS \
                 cure then applies",
                delivery.evidence
            )
        });
    }
    match delivery.kind {
        Delivery::Proxy => None,
        Delivery::Vip => Some(format!(
            "{VIP_NODES} ({}): hairpin cures it by DNS and never sets ipMode: Proxy, which \
             would cut off every client outside the cluster (kube-proxy drops every rule for \
             that IP)",
            delivery.evidence
        )),
        Delivery::Unknown if !forced => Some(format!(
            "not known to be a proxy load balancer ({}): hairpin cures it by DNS; if the load \
             balancer terminates TCP and connects to the NodePorts or pods itself, \
             `hairpin.io/delivery: proxy` on the Service lets the controller try ipMode: Proxy",
            delivery.evidence
        )),
        Delivery::Unknown => None,
    }
}

fn status_proxy(lb: &LoadBalancerFacts) -> bool {
    lb.ingress
        .iter()
        .any(|ingress| ingress.ip_mode.as_deref() == Some(IP_MODE_PROXY))
}

/// A cloud controller computes `ipMode`: it cures the load balancer when its status says
/// `Proxy` and the handler honours it; hairpin never overrides it.
fn by_the_ccm(
    lb: &LoadBalancerFacts,
    ccm: &CcmFacts,
    support: &IpModeSupport,
) -> (CureKind, String) {
    let handler = support.describe();
    if status_proxy(lb) && lb.needs_hairpin {
        return (
            CureKind::Dns,
            format!(
                "hairpin's `proxy-protocol` annotation forces its DNS cure: {} sets ipMode: \
                 Proxy itself, and {handler}",
                ccm.describe()
            ),
        );
    }
    if status_proxy(lb) {
        return match support.honours {
            Some(false) => (
                CureKind::Dns,
                format!(
                    "{} sets ipMode: Proxy itself, but {handler}: in-cluster traffic still \
                     skips the load balancer, so hairpin's DNS cure is needed (forced with \
                     `hairpin.io/proxy-protocol` on the Service)",
                    ccm.describe()
                ),
            ),
            honours => (
                CureKind::Ccm,
                format!(
                    "{} sets ipMode: Proxy itself ({}), and {handler}{}",
                    ccm.describe(),
                    ccm.setting,
                    if honours.is_none() {
                        " (if honoured, the load balancer answers in-cluster clients)"
                    } else {
                        ""
                    }
                ),
            ),
        };
    }
    if !lb.needs_hairpin {
        return not_needed(lb);
    }
    let upgrade = if ccm.too_old() {
        format!(
            "; {} is older than {}, the first that sets it",
            ccm.describe(),
            ccm.since.as_deref().unwrap_or("the version")
        )
    } else {
        String::new()
    };
    (
        CureKind::Dns,
        format!(
            "{} computes ipMode itself and hairpin never overrides a cloud controller: hairpin \
             cures it by DNS until the controller's own setting makes it Proxy ({}{upgrade}); \
             then {handler}",
            ccm.controller, ccm.setting
        ),
    )
}

fn not_needed(lb: &LoadBalancerFacts) -> (CureKind, String) {
    (
        CureKind::NotNeeded,
        format!(
            "{} needs no hairpin: {}",
            Text(&lb.service),
            Text(
                lb.not_needed_reason
                    .as_deref()
                    .unwrap_or("in-cluster clients do not bypass it")
            )
        ),
    )
}

/// No cloud controller computes `ipMode`: hairpin's native cure where the handler honours it
/// (or its probe proved it), its DNS cure where not.
fn by_hairpin(
    lb: &LoadBalancerFacts,
    support: &IpModeSupport,
    record: Option<&NativeEntry>,
) -> (CureKind, String) {
    let handler = support.describe();
    if !lb.needs_hairpin {
        if status_proxy(lb) && support.honours == Some(false) {
            return (
                CureKind::Dns,
                format!(
                    "its status says ipMode: Proxy, but {handler}: force hairpin's DNS cure \
                     with `hairpin.io/proxy-protocol` on the Service"
                ),
            );
        }
        return not_needed(lb);
    }
    if let Some(entry) = record {
        let probe = ProbeRecord::of(entry).describe();
        match entry.state {
            ProbeState::Proven => {
                return (
                    CureKind::Native,
                    format!("proven by the controller's probe ({probe}); {handler}"),
                );
            }
            ProbeState::Failed => {
                return (
                    CureKind::Dns,
                    format!("the controller's probe of ipMode: Proxy failed ({probe}); {handler}"),
                );
            }
            ProbeState::NotNeeded => {
                return (
                    CureKind::Dns,
                    format!(
                        "the controller's probe found it not needed: a request without a header was answered before any change ({probe}); {handler}"
                    ),
                );
            }
            ProbeState::Unsupported => {
                return (
                    CureKind::Dns,
                    format!("the API server does not keep ipMode ({probe}); {handler}"),
                );
            }
            ProbeState::Probing => {}
        }
    }
    if status_proxy(lb) && record.is_none() {
        return (
            CureKind::Dns,
            "hairpin's `proxy-protocol` annotation forces the DNS cure although the status \
             says ipMode: Proxy"
                .into(),
        );
    }
    let probing = if record.is_some() {
        "; ipMode: Proxy is set and the controller's probe runs (DNS until it succeeds)"
    } else {
        ""
    };
    match support.honours {
        Some(true) => (CureKind::Native, format!("{handler}{probing}")),
        Some(false) => (CureKind::Dns, handler),
        None => (CureKind::Unknown, format!("{handler}{probing}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::LbIngress;

    fn lb(ip_mode: &str, needs: bool) -> LoadBalancerFacts {
        LoadBalancerFacts {
            service: "ingress-nginx/lb".into(),
            proxy_protocol: Some("v1".into()),
            ingress: vec![LbIngress {
                ip: Some("198.51.100.10".into()),
                hostname: None,
                ip_mode: Some(ip_mode.into()),
            }],
            needs_hairpin: needs,
            not_needed_reason: (!needs).then(|| "ipMode is Proxy".into()),
            ..LoadBalancerFacts::default()
        }
    }

    fn support(honours: Option<bool>) -> IpModeSupport {
        IpModeSupport {
            handler: "kube-proxy v1.31.2 (iptables)".into(),
            honours,
            why: match honours {
                Some(true) => "honours ipMode: Proxy".into(),
                Some(false) => "ignores ipMode".into(),
                None => "unknown".into(),
            },
        }
    }

    fn hcloud(version: &str) -> CcmFacts {
        CcmFacts {
            controller: "hcloud-cloud-controller-manager".into(),
            setting: "load-balancer.hetzner.cloud/uses-proxyprotocol: \"true\"".into(),
            version: Some(version.into()),
            since: Some("v1.21.0".into()),
        }
    }

    #[test]
    fn the_ccm_cures_it_when_its_proxy_is_honoured() {
        let facts = judge(
            &lb("Proxy", false),
            Some(&hcloud("v1.21.0")),
            &support(Some(true)),
            None,
            None,
            None,
        );
        assert_eq!(facts.cure, CureKind::Ccm, "{facts:?}");
        assert!(
            facts
                .why
                .contains("hcloud-cloud-controller-manager v1.21.0 sets ipMode: Proxy itself")
        );
        let ignored = judge(
            &lb("Proxy", false),
            Some(&hcloud("v1.21.0")),
            &support(Some(false)),
            None,
            None,
            None,
        );
        assert_eq!(ignored.cure, CureKind::Dns);
        let old = judge(
            &lb("VIP", true),
            Some(&hcloud("v1.20.1")),
            &support(Some(true)),
            None,
            None,
            None,
        );
        assert_eq!(old.cure, CureKind::Dns);
        assert!(old.why.contains("older than v1.21.0"), "{old:?}");
    }

    #[test]
    fn hairpin_cures_by_the_handler_and_the_probe_record() {
        assert_eq!(
            judge(
                &lb("VIP", true),
                None,
                &support(Some(true)),
                None,
                None,
                None
            )
            .cure,
            CureKind::Native
        );
        assert_eq!(
            judge(
                &lb("VIP", true),
                None,
                &support(Some(false)),
                None,
                None,
                None
            )
            .cure,
            CureKind::Dns
        );
        assert_eq!(
            judge(&lb("VIP", true), None, &support(None), None, None, None).cure,
            CureKind::Unknown
        );
        let entry = |state| NativeEntry {
            uid: "u".into(),
            original: vec![hairpin_planner::native::IpModeWas {
                ip: "198.51.100.10".into(),
                ip_mode: None,
            }],
            state,
            since: "2026-11-27T10:00:00Z".into(),
            reason: "port 80: HTTP/1.1 200 OK\u{1b}[2J".into(),
            data_plane: String::new(),
            failures: 0,
            server_version: String::new(),
            due: false,
            skipped: Vec::new(),
            put_back: String::new(),
            probe: Default::default(),
        };
        let failed = judge(
            &lb("VIP", true),
            None,
            &support(Some(true)),
            Some(&entry(ProbeState::Failed)),
            None,
            None,
        );
        assert_eq!(failed.cure, CureKind::Dns);
        let proven = judge(
            &lb("Proxy", true),
            None,
            &support(None),
            Some(&entry(ProbeState::Proven)),
            None,
            None,
        );
        assert_eq!(proven.cure, CureKind::Native);
        assert!(
            proven
                .why
                .contains("proven since 2026-11-27T10:00:00Z on 198.51.100.10"),
            "{proven:?}"
        );
        assert!(
            proven.why.contains("\\u{1b}[2J"),
            "the record's reason is escaped: {proven:?}"
        );
        assert!(!proven.why.contains('\u{1b}'));
    }

    fn delivery(kind: Delivery, evidence: &str) -> Option<DeliveryOf> {
        Some(DeliveryOf {
            kind,
            evidence: evidence.into(),
        })
    }

    /// A VIP load balancer is never on native, whatever the data plane and the record say,
    /// and the doctor names the outage hairpin avoids there.
    #[test]
    fn a_vip_is_never_native_and_the_outage_is_named() {
        let vip = judge(
            &lb("VIP", true),
            None,
            &support(Some(true)),
            None,
            None,
            delivery(
                Delivery::Vip,
                "MetalLB, annotation metallb.io/address-pool=public",
            ),
        );
        assert_eq!(vip.cure, CureKind::Dns, "{vip:?}");
        assert!(vip.why.contains("MetalLB"), "{vip:?}");
        let line = vip.describe_delivery().unwrap();
        assert!(
            line.starts_with("vip: MetalLB, annotation metallb.io/address-pool=public: the nodes receive")
                && line.contains(
                    "would cut off every client outside the cluster: kube-proxy drops every rule for that IP"
                ),
            "{line}"
        );
        // Another writer's Proxy on a VIP: DNS, and the outage now named.
        let cut = judge(
            &lb("Proxy", false),
            None,
            &support(Some(true)),
            None,
            None,
            delivery(
                Delivery::Vip,
                "MetalLB, annotation metallb.io/address-pool=public",
            ),
        );
        assert_eq!(cut.cure, CureKind::Dns, "{cut:?}");
        assert!(cut.why.contains("cut off now"), "{cut:?}");
        // An unknown delivery: DNS unless the plan forces native.
        let unknown = judge(
            &lb("VIP", true),
            None,
            &support(Some(true)),
            None,
            None,
            delivery(Delivery::Unknown, "nothing says"),
        );
        assert_eq!(unknown.cure, CureKind::Dns, "{unknown:?}");
        assert!(
            unknown.why.contains("hairpin.io/delivery: proxy"),
            "{unknown:?}"
        );
        // A proxy: the data plane decides, as before.
        let proxy = judge(
            &lb("VIP", true),
            None,
            &support(Some(true)),
            None,
            None,
            delivery(Delivery::Proxy, "DigitalOcean"),
        );
        assert_eq!(proxy.cure, CureKind::Native, "{proxy:?}");
        assert!(
            proxy
                .describe_delivery()
                .unwrap()
                .starts_with("proxy: DigitalOcean")
        );
    }

    #[test]
    fn cert_manager_fix_names_the_solver_field_and_the_version() {
        let old = CertManagerFacts {
            deployment: "cert-manager/cert-manager".into(),
            version: Some("v1.20.2".into()),
        };
        let fix = old.fix();
        assert!(fix.contains("`waitInsteadOfSelfCheck: 30s`"), "{fix}");
        assert!(fix.contains("after upgrading it to 1.21"), "{fix}");
        let new = CertManagerFacts {
            version: Some("v1.21.0".into()),
            ..old
        };
        assert!(!new.fix().contains("upgrading"));
    }
}
