//! Step 2b: the cure of each load balancer that needs one: **native** (`ipMode: Proxy` on the
//! Service's status, so that kube-proxy or the CNI stops short-circuiting its address and
//! in-cluster traffic crosses the real load balancer, which writes the real header) or **dns**
//! (the cluster DNS points the names at hairpin's proxy, the later stages).
//!
//! Native is the cleanest cure where the cluster honours `ipMode` (kube-proxy >= 1.30 in every
//! mode, Cilium >= 1.17 but not 1.18.0, Antrea >= 2.0, kube-router >= 2.9), but only a probe
//! from inside the cluster proves it: the controller sets `ipMode: Proxy`, probes every port
//! of the address, and keeps it only when a request without a header is answered. What it did
//! is recorded in hairpin's ConfigMap ([`NativeRecord`], `hairpin-native`), which is also what
//! uninstall restores from. This module is pure: it reads that record and the Services, and
//! says per load balancer which cure applies ([`CureChoice`]) and which status writes the
//! controller makes ([`NativeAction`]).
//!
//! Native is only ever safe where the load balancer is itself a proxy ([`crate::delivery`]):
//! kube-proxy drops every rule for an IP whose `ipMode` is `Proxy`, for clients outside the
//! cluster too, so a load balancer whose packets reach the nodes with its address as
//! destination (MetalLB, kube-vip, Cilium LB-IPAM...) would lose every outside client. `auto`
//! tries native only on a [`Delivery::Proxy`]; `native` is refused on a [`Delivery::Vip`] (a
//! plan warning names the outage) and hairpin's record of such a load balancer is restored. An
//! `ipMode` other than `VIP` and `Proxy` is another writer's and never written.
//!
//! With `--cure auto` (per Service: annotation `<prefix>/cure`), a load balancer keeps the DNS
//! cure until the probe proved native (make before break), then loses its DNS rules and hosts
//! entries; a failed probe puts the status back and keeps DNS. A load balancer whose cloud
//! controller computes `ipMode` itself ([`ccm_ip_mode`]) is never written: hairpin does not
//! fight a cloud controller, and names that controller's own setting instead.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use serde::{Deserialize, Serialize};

use crate::config::{CureMode, FIELD_MANAGER, PlannerConfig};
use crate::delivery::{Delivery, DeliveryOf, VIP_NODES, VIP_OUTAGE, delivery_of};
use crate::escape;
use crate::node_probes::NodeReport;
use crate::nodes::{self, NodeBar, NodesVerdict};
use crate::snapshot::{ClusterSnapshot, ObjectRef};
use crate::warning::Warning;

/// The key of hairpin's native-cure ConfigMap that holds the [`NativeRecord`] as JSON.
pub const NATIVE_KEY: &str = "native.json";

/// The value of `ipMode` that makes kube-proxy leave a load balancer IP alone.
pub const IP_MODE_PROXY: &str = "Proxy";

/// The default `ipMode` (also what an unset one means): kube-proxy short-circuits the IP.
pub const IP_MODE_VIP: &str = "VIP";

/// The DaemonSets whose pods decide whether a load balancer IP is short-circuited: kube-proxy
/// and the CNIs that replace it. A change of one of them (its generation: an upgrade, a
/// changed flag, a restart) is a reason to probe a proven native cure again.
const DATA_PLANE_DAEMONSETS: &[&str] = &[
    "kube-proxy",
    "cilium",
    "cilium-agent",
    "calico-node",
    "antrea-agent",
    "kube-router",
];

/// Cloud controllers that compute `ipMode` themselves, recognised by a Service annotation
/// prefix, with the setting that makes them write `Proxy`. hairpin never writes these
/// statuses: the controller would put its own value back on its next sync.
const CCM_IP_MODE: &[(&str, &str, &str)] = &[
    // hcloud-cloud-controller-manager >= 1.21 sets Proxy when PROXY is on (PR #783).
    (
        "load-balancer.hetzner.cloud/",
        "hcloud-cloud-controller-manager",
        "load-balancer.hetzner.cloud/uses-proxyprotocol: \"true\" (controller v1.21 or later sets ipMode: Proxy)",
    ),
    // cloud-provider-openstack >= 1.30 sets Proxy with PROXY on, unless
    // enable-ingress-hostname (PR #2587).
    (
        "loadbalancer.openstack.org/",
        "cloud-provider-openstack",
        "loadbalancer.openstack.org/proxy-protocol (controller 1.30 or later sets ipMode: Proxy; turn enable-ingress-hostname off)",
    ),
    // Scaleway's CCM >= 0.33 sets Proxy when every port uses PROXY.
    (
        "service.beta.kubernetes.io/scw-loadbalancer-",
        "scaleway-cloud-controller-manager",
        "service.beta.kubernetes.io/scw-loadbalancer-ip-mode: proxy (controller 0.33 or later)",
    ),
    // cloudscale's CCM >= 1.1.0 sets Proxy by default (k8s.cloudscale.ch/loadbalancer-ip-mode).
    (
        "k8s.cloudscale.ch/loadbalancer-",
        "cloudscale-cloud-controller-manager",
        "k8s.cloudscale.ch/loadbalancer-ip-mode: Proxy (the default from controller 1.1.0)",
    ),
    // STACKIT's cloud-provider-stackit.
    (
        "lb.stackit.cloud/",
        "cloud-provider-stackit",
        "lb.stackit.cloud/ip-mode-proxy: \"true\"",
    ),
    // Oracle's oci-cloud-controller-manager (Kubernetes 1.30+).
    (
        "oci.oraclecloud.com/",
        "oci-cloud-controller-manager",
        "oci.oraclecloud.com/ingress-ip-mode: proxy",
    ),
    (
        "service.beta.kubernetes.io/oci-load-balancer-",
        "oci-cloud-controller-manager",
        "oci.oraclecloud.com/ingress-ip-mode: proxy",
    ),
];

/// The cloud controller that computes this Service's `ipMode` itself, and its own setting
/// for `Proxy`: `(controller, setting)`.
pub fn ccm_ip_mode(svc: &Service) -> Option<(&'static str, &'static str)> {
    let annotations = svc.metadata.annotations.as_ref()?;
    CCM_IP_MODE.iter().find_map(|(prefix, ccm, setting)| {
        annotations
            .keys()
            .any(|key| key.starts_with(prefix))
            .then_some((*ccm, *setting))
    })
}

/// Where the native cure of one load balancer stands, as the controller recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeState {
    /// `ipMode: Proxy` is set; the probe has not answered yet (or a proven cure is probed
    /// again before it is trusted: at the controller's start).
    Probing,
    /// The probe reached the load balancer through its address on every port, several times
    /// in a row.
    Proven,
    /// The probe did not (the status was put back), or the problem could not be proven
    /// before any change (some ports answered without a header).
    Failed,
    /// Every port answered a request without a header before any change: nothing to cure,
    /// nothing written.
    #[serde(rename = "not-needed")]
    NotNeeded,
    /// The API server dropped the `ipMode` hairpin wrote (older than 1.30, or the feature gate
    /// `LoadBalancerIPMode` off): not tried again until its version changes.
    Unsupported,
}

impl ProbeState {
    /// As written in the record.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeState::Probing => "probing",
            ProbeState::Proven => "proven",
            ProbeState::Failed => "failed",
            ProbeState::NotNeeded => "not-needed",
            ProbeState::Unsupported => "unsupported",
        }
    }
}

/// One status `ingress[]` IP as it was before hairpin set `ipMode: Proxy` on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpModeWas {
    /// The status IP.
    pub ip: String,
    /// Its `ipMode` then (`None`: unset, which the API server reads as `VIP`).
    #[serde(default, rename = "ipMode", skip_serializing_if = "Option::is_none")]
    pub ip_mode: Option<String>,
}

/// hairpin's native cure of one load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NativeEntry {
    /// The Service's uid: a Service deleted and created again under the same name is another
    /// load balancer.
    pub uid: String,
    /// The status IPs hairpin set to `ipMode: Proxy`, and what each said before.
    pub original: Vec<IpModeWas>,
    /// The probe's verdict.
    pub state: ProbeState,
    /// When `state` last changed (RFC 3339).
    #[serde(default)]
    pub since: String,
    /// Why, in words (the probe's outcome per port).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The data plane the verdict was reached on ([`data_plane`]): when it changes, a proven
    /// cure is probed again.
    #[serde(
        default,
        rename = "dataPlane",
        skip_serializing_if = "String::is_empty"
    )]
    pub data_plane: String,
    /// Failed attempts in a row: the next try waits `retry` doubled this many times less one,
    /// capped. Reset by a proven cure or a change of the data plane.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// The API server's version (`gitVersion`) that dropped `ipMode` (state `unsupported`):
    /// tried again once it changes.
    #[serde(
        default,
        rename = "serverVersion",
        skip_serializing_if = "String::is_empty"
    )]
    pub server_version: String,
    /// The wait after a `failed`, `not-needed` or `unsupported` verdict is over: the plan
    /// proposes the cure again (the controller proves the problem first).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub due: bool,
    /// Status IPs the controller could not reach before any change (an IPv6 address with no
    /// route from its pod, a refused connection): never set to `Proxy`, they stay `VIP` and
    /// the load balancer's names keep the DNS cure. Tried again when the cure starts over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// hairpin's `ipMode: Proxy` is still on the status although the cure failed (or the API
    /// server dropped it): the put-back was refused (409) or answered still saying `Proxy`.
    /// Why, in words; empty once the API server's answer shows the status put back. While it
    /// is not, the `Proxy` is hairpin's (another writer touching the list takes nothing over)
    /// and the put-back is tried again, backing off.
    #[serde(
        default,
        rename = "putBackPending",
        skip_serializing_if = "String::is_empty"
    )]
    pub put_back: String,
    /// What the node agents need to prove the cure through their own node's data plane
    /// ([`crate::node_probes`]): the attempt, the addresses to ask, and what answered each
    /// through the receiver's header path before the write. Empty in records written before.
    #[serde(flatten)]
    pub probe: ProbeSpec,
}

/// One address and port to probe, and how to ask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeTarget {
    /// The load balancer IP and port.
    pub addr: SocketAddr,
    /// Ask with TLS (a ClientHello) instead of HTTP.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tls: bool,
    /// The name to ask for (Host header, SNI).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
}

/// What answered each port through the path that works today, with a PROXY header, before
/// the write (the receiver's fingerprint, escaped text), by address: a proof after the write
/// requires the same answerer.
pub type Fingerprints = BTreeMap<SocketAddr, String>;

/// The part of a [`NativeEntry`] that lets anyone prove the cure again (the node agents, and
/// the controller's own later re-probes).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ProbeSpec {
    /// The attempt this cure is (when `Proxy` was written, RFC 3339): a node's report answers
    /// one attempt. Empty in records written before: [`NativeEntry::attempt`] is `since` then.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub attempt: String,
    /// Every PROXY port of every IP set to `Proxy`, with the name to ask for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<ProbeTarget>,
    /// The receiver's fingerprint per port, recorded by the baseline before the write.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub receiver: Fingerprints,
}

impl NativeEntry {
    /// The attempt a node's report must answer: [`ProbeSpec::attempt`], or `since` in a record
    /// written before attempts were recorded.
    pub fn attempt(&self) -> &str {
        if self.probe.attempt.is_empty() {
            &self.since
        } else {
            &self.probe.attempt
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The native cures hairpin made, by load balancer (`namespace/name`): the content of its
/// native-cure ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NativeRecord {
    /// By `namespace/name`.
    #[serde(rename = "loadBalancers", default)]
    pub load_balancers: BTreeMap<String, NativeEntry>,
}

/// hairpin's record of its native cures ([`NativeRecord`]) cannot be read. Not a
/// plan error: the plan is made, with a warning, and no load balancer status is written until
/// the record is hairpin's again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "ConfigMap {} key {} is not hairpin's record: {}",
    escape::Text(&config_map.to_string()),
    escape::Text(key),
    escape::controls(reason)
)]
pub struct RecordError {
    /// The ConfigMap.
    pub config_map: ObjectRef,
    /// The key.
    pub key: String,
    /// Why it cannot be read: the JSON parser's message. It quotes some values of the text
    /// escaped already (as Rust string literals) and others as they are, so it is shown with
    /// its control characters escaped ([`escape::controls`]) and nothing else: one
    /// line, and what the parser escaped is not escaped again.
    pub reason: String,
}

impl RecordError {
    /// A short, stable label for metrics, as [`crate::PlanError::metric_label`].
    pub fn metric_label(&self) -> &'static str {
        "native_record_unreadable"
    }
}

impl NativeRecord {
    /// The record in hairpin's ConfigMap of the snapshot (empty when there is none). A
    /// record hairpin cannot read is a warning and counts as empty: hairpin then writes no
    /// status until it is readable again ([`NativeRecord::unreadable`]).
    pub fn read(snapshot: &ClusterSnapshot, config: &PlannerConfig) -> Result<Self, RecordError> {
        let Some(text) = snapshot
            .config_map(&config.namespace, &config.native_config_map)
            .and_then(|cm| cm.data.as_ref()?.get(NATIVE_KEY))
        else {
            return Ok(Self::default());
        };
        serde_json::from_str(text).map_err(|e| RecordError {
            config_map: ObjectRef::new(config.namespace.clone(), config.native_config_map.clone()),
            key: NATIVE_KEY.to_owned(),
            reason: e.to_string(),
        })
    }

    /// The entry of `service` when its uid still matches.
    pub fn entry(&self, service: &ObjectRef, uid: Option<&str>) -> Option<&NativeEntry> {
        self.load_balancers
            .get(&service.to_string())
            .filter(|e| uid.is_none_or(|uid| uid == e.uid))
    }

    /// The record as written in the ConfigMap.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".into())
    }
}

/// Which cure a load balancer gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cure {
    /// `ipMode: Proxy` on its status; no DNS rule, no hosts entry.
    Native,
    /// hairpin's DNS rules (and hosts entries) through its proxy.
    Dns,
}

impl Cure {
    /// `native` or `dns`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cure::Native => "native",
            Cure::Dns => "dns",
        }
    }
}

/// The cure of one load balancer, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CureChoice {
    /// The load balancer Service.
    pub service: ObjectRef,
    /// The cure in effect: whether its names get DNS rules.
    pub cure: Cure,
    /// The setting that decided (`auto`, `native`, `dns`), after the annotation.
    pub mode: CureMode,
    /// How the load balancer reaches the nodes ([`crate::delivery`]): native is tried only on a
    /// proxy, forced only where it is not a VIP.
    pub delivery: DeliveryOf,
    /// Where native stands (`None`: not tried).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub native: Option<NativeProgress>,
    /// Why, in words (escaped).
    pub reason: String,
    /// The nodes whose data plane is known not to honour `ipMode` ([`crate::nodes::gate`]):
    /// they keep the DNS cure for every node (`--cure auto`). Empty when none is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeBar>,
}

/// Where the native cure of a load balancer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NativeProgress {
    /// hairpin will set `ipMode: Proxy` and probe (DNS stays meanwhile).
    ToProve,
    /// Set; the probe runs (DNS stays meanwhile).
    Probing,
    /// Proven by the probe: DNS rules removed.
    Proven,
    /// The probe failed; the status was put back; DNS in effect.
    Failed,
    /// A request without a header was answered before any change: nothing written.
    NotNeeded,
    /// The API server does not keep `ipMode`: nothing kept, DNS in effect.
    Unsupported,
}

/// A status write the controller makes for the native cure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum NativeAction {
    /// Set `ipMode: Proxy` on these status IPs (first time, or again after another writer
    /// put the status back), then probe unless proven.
    SetProxy {
        /// The Service.
        service: ObjectRef,
        /// Its uid.
        uid: String,
        /// The status IPs to set, with what they say now.
        ips: Vec<IpModeWas>,
        /// Already proven (a re-assertion: no new probe).
        proven: bool,
    },
    /// Put each IP's `ipMode` back as it was, and keep the entry (its verdict and backoff):
    /// the cure failed (or the API server dropped it) and the status still says `Proxy`.
    PutBack {
        /// The Service.
        service: ObjectRef,
        /// Its uid.
        uid: String,
        /// What to put back.
        original: Vec<IpModeWas>,
        /// Why, in words.
        reason: String,
    },
    /// Put each IP's `ipMode` back as it was, and forget the entry.
    Restore {
        /// The Service (`None` uid: the Service is gone, only the record entry goes).
        service: ObjectRef,
        /// Its uid, when it still exists.
        uid: Option<String>,
        /// What to put back.
        original: Vec<IpModeWas>,
        /// Why, in words.
        reason: String,
    },
    /// Another writer set `ipMode: Proxy` itself since hairpin did ([`taken_over`]): the entry
    /// goes and the status is left as that writer made it, now and at uninstall.
    Forget {
        /// The Service.
        service: ObjectRef,
        /// Its uid.
        uid: String,
        /// The writer (a field manager), escaped.
        writer: String,
        /// Why, in words (escaped).
        reason: String,
    },
}

/// The cures and the status writes for `load_balancers` (the discovered ones that need a
/// hairpin).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cures {
    /// Per load balancer, sorted by Service.
    pub choices: Vec<CureChoice>,
    /// The status writes to make.
    pub actions: Vec<NativeAction>,
}

impl Cures {
    /// The cure in effect for `service` (DNS when it has no choice: not hairpinned).
    pub fn cure_of(&self, service: &ObjectRef) -> Cure {
        self.choices
            .iter()
            .find(|c| c.service == *service)
            .map_or(Cure::Dns, |c| c.cure)
    }
}

/// The IP entries of a Service's status.
fn status_ingress(svc: &Service) -> &[LoadBalancerIngress] {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default()
}

/// The status IPs of `svc` with `ipMode: Proxy` that hairpin set (per its record), so that
/// discovery keeps the load balancer as one that needs a cure.
pub fn ours(record: &NativeRecord, svc: &Service, config: &PlannerConfig) -> Vec<String> {
    let service = ObjectRef::from_meta(&svc.metadata);
    let Some(entry) = record.entry(&service, svc.metadata.uid.as_deref()) else {
        return Vec::new();
    };
    // Nothing written (not needed), or nothing kept (the API server dropped it and its
    // put-back was applied).
    let nothing_kept = entry.state == ProbeState::Unsupported && entry.put_back.is_empty();
    if entry.state == ProbeState::NotNeeded
        || nothing_kept
        || taken_over(svc, entry, forced_native(svc, config)).is_some()
    {
        return Vec::new();
    }
    entry.original.iter().map(|was| was.ip.clone()).collect()
}

/// The field manager that last changed the Service's `status.loadBalancer.ingress`, and when
/// (its managed fields' `time`, RFC 3339, one-second resolution).
pub fn ingress_written(svc: &Service) -> Option<(&str, String)> {
    let writer = ingress_writer(svc)?;
    let time = svc
        .metadata
        .managed_fields
        .as_ref()?
        .iter()
        .find(|m| {
            m.manager.as_deref() == Some(writer) && m.subresource.as_deref() == Some("status")
        })
        .and_then(|m| m.time.as_ref())
        .map(|t| t.0.to_string())?;
    Some((writer, time))
}

/// The field manager that last changed the Service's `status.loadBalancer.ingress`. The list
/// is atomic (`listType=atomic`): a write that changes any of it owns all of it.
pub fn ingress_writer(svc: &Service) -> Option<&str> {
    svc.metadata
        .managed_fields
        .as_ref()?
        .iter()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .find(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:status/f:loadBalancer/f:ingress").is_some())
        })
        .and_then(|m| m.manager.as_deref())
}

/// Another writer set `ipMode: Proxy` itself on hairpin's cure: it changed the status last,
/// every IP of the cure says `Proxy`, and hairpin's own `Proxy` was not there for it to keep
/// ([`proxy_in_place`]: hairpin put it back, never wrote it, or the API server dropped it), so
/// the `Proxy` is that writer's own (a cloud controller upgraded to one that computes
/// `ipMode`, an operator). hairpin then steps back: it neither re-asserts nor puts back what
/// that writer chose. Returns the writer. A writer that only touched the list while hairpin's
/// `Proxy` was on it (Cilium LB-IPAM, `kubectl edit --subresource=status`, an added address)
/// takes nothing over: the list is atomic, so its write owns the list, but not the `ipMode`
/// hairpin set. `forced`: the cure is forced native (its failed probe left `Proxy` in place).
pub fn taken_over<'a>(svc: &'a Service, entry: &NativeEntry, forced: bool) -> Option<&'a str> {
    let writer = ingress_writer(svc).filter(|w| *w != FIELD_MANAGER)?;
    if proxy_in_place(entry, forced) {
        return None;
    }
    let ingress = status_ingress(svc);
    let mut ips = entry
        .original
        .iter()
        .filter_map(|was| ingress.iter().find(|e| e.ip.as_deref() == Some(&was.ip)))
        .peekable();
    ips.peek()?;
    ips.all(|e| e.ip_mode.as_deref() == Some(IP_MODE_PROXY))
        .then_some(writer)
}

/// Whether hairpin's own `ipMode: Proxy` is on the status, by its record: written and not put
/// back (`probing`, `proven`; `failed` only when `forced`, whose failed probe is reported and
/// not acted on; `failed` or `unsupported` while its put-back is not applied,
/// [`NativeEntry::put_back`]). Not after a put-back, nor when nothing was written or kept.
pub fn proxy_in_place(entry: &NativeEntry, forced: bool) -> bool {
    match entry.state {
        ProbeState::Probing | ProbeState::Proven => true,
        ProbeState::Failed => (forced && !entry.due) || !entry.put_back.is_empty(),
        ProbeState::Unsupported => !entry.put_back.is_empty(),
        ProbeState::NotNeeded => false,
    }
}

/// The IPs of `entry`'s cure whose status still says `Proxy` after the cure failed (or the
/// API server dropped it), unless `forced` keeps a failed cure's `Proxy`: what is to be put
/// back, whatever the wait before the next try.
pub fn to_put_back(svc: &Service, entry: &NativeEntry, forced: bool) -> Vec<String> {
    let failed = match entry.state {
        ProbeState::Failed => !forced,
        ProbeState::Unsupported => true,
        ProbeState::Probing | ProbeState::Proven | ProbeState::NotNeeded => false,
    };
    if !failed {
        return Vec::new();
    }
    status_ingress(svc)
        .iter()
        .filter(|e| e.ip_mode.as_deref() == Some(IP_MODE_PROXY))
        .filter_map(|e| e.ip.clone())
        .filter(|ip| entry.original.iter().any(|was| was.ip == *ip))
        .collect()
}

/// Whether `svc`'s cure is forced native (its annotation, else the flag); an unreadable
/// annotation is the flag (the plan warns about it).
pub fn forced_native(svc: &Service, config: &PlannerConfig) -> bool {
    let key = config.annotation("cure");
    let mode = svc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(&key))
        .and_then(|v| v.parse::<CureMode>().ok())
        .unwrap_or(config.cure);
    mode == CureMode::Native
}

/// Which kube-proxy and CNI agents run, at which generation (`namespace/name@generation`,
/// sorted, `; `-separated): a proven native cure is probed again when this changes. Empty when
/// none is seen (the DaemonSets are not in the snapshot).
pub fn data_plane(snapshot: &ClusterSnapshot) -> String {
    let mut seen: Vec<String> = snapshot
        .receivers
        .workloads
        .iter()
        .filter(|w| w.kind == "DaemonSet")
        .filter(|w| {
            w.metadata
                .name
                .as_deref()
                .is_some_and(|n| DATA_PLANE_DAEMONSETS.contains(&n))
        })
        .map(|w| {
            format!(
                "{}/{}@{}",
                w.metadata.namespace.as_deref().unwrap_or_default(),
                w.metadata.name.as_deref().unwrap_or_default(),
                w.metadata.generation.unwrap_or_default()
            )
        })
        .collect();
    seen.sort();
    seen.join("; ")
}

/// The per-Service cure setting: the annotation when valid, else the flag.
fn mode_of(svc: &Service, config: &PlannerConfig, warnings: &mut Vec<Warning>) -> CureMode {
    let key = config.annotation("cure");
    let Some(value) = svc.metadata.annotations.as_ref().and_then(|a| a.get(&key)) else {
        return config.cure;
    };
    match value.parse() {
        Ok(mode) => mode,
        Err(e) => {
            warnings.push(Warning::new(
                format!("Service {}", ObjectRef::from_meta(&svc.metadata)),
                format!(
                    "annotation {key}: {e}; --cure {} applies",
                    config.cure.as_str()
                ),
            ));
            config.cure
        }
    }
}

/// A load balancer that needs a cure, as discovery found it.
#[derive(Debug, Clone, Copy)]
pub struct Needed<'a> {
    /// The load balancer Service.
    pub service: &'a ObjectRef,
    /// hairpin's annotation forces a hairpin although the status says `ipMode: Proxy`
    /// (set by someone else): the CNI is known to ignore it.
    pub forced: bool,
}

/// Decides the cure of every load balancer that needs one, and the status writes.
pub fn choose(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    record: &NativeRecord,
    load_balancers: &[Needed<'_>],
    warnings: &mut Vec<Warning>,
) -> Cures {
    let mut cures = Cures::default();
    // Entries of Services that are gone (or another Service under the same name now), or no
    // longer need a cure: their status goes back (when the Service still exists) and the entry
    // goes. First, so that a new cure of the same name starts from a clean entry.
    let mut forgotten = Vec::new();
    for (key, entry) in &record.load_balancers {
        let Some((namespace, name)) = key.split_once('/') else {
            continue;
        };
        let service = ObjectRef::new(namespace, name);
        let current = snapshot
            .service(namespace, name)
            .filter(|s| s.metadata.uid.as_deref() == Some(entry.uid.as_str()));
        if let Some(writer) =
            current.and_then(|svc| taken_over(svc, entry, forced_native(svc, config)))
        {
            let writer = escape::text(writer).into_owned();
            cures.actions.push(NativeAction::Forget {
                reason: format!(
                    "{writer} set ipMode: Proxy itself since hairpin did: hairpin stepped back and leaves this status to it (uninstall included)"
                ),
                service: service.clone(),
                uid: entry.uid.clone(),
                writer,
            });
            forgotten.push(service);
            continue;
        }
        let uid = current.and_then(|s| s.metadata.uid.clone());
        let needed = load_balancers.iter().any(|lb| *lb.service == service);
        if needed && uid.is_some() {
            continue;
        }
        cures.actions.push(NativeAction::Restore {
            reason: if uid.is_some() {
                "the load balancer no longer needs a cure".into()
            } else {
                "the load balancer is gone".into()
            },
            service,
            uid,
            original: entry.original.clone(),
        });
    }
    // The Nodes' gate, the same for every load balancer (their pods resolve the same names).
    let barred = nodes::gate(snapshot);
    for lb in load_balancers {
        let Some(svc) = snapshot.service(&lb.service.namespace, &lb.service.name) else {
            continue;
        };
        let mode = mode_of(svc, config, warnings);
        let entry = record
            .entry(lb.service, svc.metadata.uid.as_deref())
            .filter(|_| !forgotten.contains(lb.service));
        let delivery = delivery_of(svc, snapshot, config, warnings);
        let (mut choice, action) =
            choose_one(svc, *lb, mode, entry, &delivery, config, &barred, warnings);
        if let (Some(reports), Some(entry)) = (&snapshot.node_probes, entry) {
            by_agents(&mut choice, entry, &snapshot.nodes, reports);
        }
        cures.choices.push(choice);
        cures.actions.extend(action);
    }
    cures.choices.sort_by(|a, b| a.service.cmp(&b.service));
    cures
}

/// The DNS cure kept for a load balancer native would be tried on (`--cure auto`, a proxy
/// load balancer, not barred by its record) while the Nodes' gate bars some node (`barred`):
/// no status write, so that nothing but the DNS rules changes (make before break); an
/// `ipMode: Proxy` hairpin set before stays, as its record says (uninstall puts it back), and
/// the record goes on as it was (a failed re-probe puts it back). `None` when the gate
/// decides nothing here. `--cure native` is warned, not barred.
fn by_nodes(
    svc: &Service,
    mode: CureMode,
    entry: Option<&NativeEntry>,
    delivery: &DeliveryOf,
    barred: &[NodeBar],
    warnings: &mut Vec<Warning>,
) -> Option<CureChoice> {
    if barred.is_empty() || mode == CureMode::Dns || delivery.kind == Delivery::Vip {
        return None;
    }
    let state = entry.filter(|e| !e.due).map(|e| e.state);
    if matches!(state, Some(ProbeState::NotNeeded | ProbeState::Unsupported)) {
        return None;
    }
    let named = nodes::describe(barred);
    if mode == CureMode::Native {
        warnings.push(Warning::escaped_message(
            format!("Service {}", ObjectRef::from_meta(&svc.metadata)),
            format!(
                "--cure native: ipMode: Proxy is not honoured on every node, whose pods keep the hairpin failure: {named}"
            ),
        ));
        return None;
    }
    if delivery.kind != Delivery::Proxy {
        return None;
    }
    let native = state.map(|s| match s {
        ProbeState::Probing => NativeProgress::Probing,
        ProbeState::Proven => NativeProgress::Proven,
        ProbeState::Failed => NativeProgress::Failed,
        ProbeState::NotNeeded => NativeProgress::NotNeeded,
        ProbeState::Unsupported => NativeProgress::Unsupported,
    });
    Some(CureChoice {
        service: ObjectRef::from_meta(&svc.metadata),
        cure: Cure::Dns,
        mode,
        delivery: delivery.clone(),
        native,
        reason: format!(
            "native not proven on every node: {named}; the DNS cure stays for every node until each honours ipMode"
        ),
        nodes: barred.to_vec(),
    })
}

/// Where the node agents report ([`crate::node_probes`]): a cure proven by the controller's probe
/// counts as native only when every Node's agent proved this attempt too; until then (and
/// when one reports `failed`) the load balancer keeps the DNS cure, the nodes named, and its
/// status write (the re-assertion of `ipMode: Proxy`) stays, so that the agents can prove it.
/// `--cure native` is not held back (proven or not).
fn by_agents(
    choice: &mut CureChoice,
    entry: &NativeEntry,
    listed: &[k8s_openapi::api::core::v1::Node],
    reports: &[NodeReport],
) {
    if choice.cure != Cure::Native
        || choice.mode == CureMode::Native
        || choice.native != Some(NativeProgress::Proven)
    {
        return;
    }
    let key = choice.service.to_string();
    let (reason, bars) = match nodes::verdict((&key, &entry.uid, entry.attempt()), listed, reports)
    {
        NodesVerdict::Proven => return,
        NodesVerdict::Waiting(bars) => (
            format!(
                "native proven by the controller's probe, not yet by every node's agent: {}; the DNS cure stays for every node until each proves it",
                nodes::describe(&bars)
            ),
            bars,
        ),
        NodesVerdict::Failed(bar) => {
            let bars = vec![bar];
            (
                format!(
                    "native not honoured on every node: {}; the DNS cure comes back, then ipMode is put back",
                    nodes::describe(&bars)
                ),
                bars,
            )
        }
    };
    choice.cure = Cure::Dns;
    choice.reason = reason;
    choice.nodes = bars;
}

/// The cure of one load balancer and its status write, if any (`barred`: the Nodes' gate).
#[allow(clippy::too_many_arguments)]
fn choose_one(
    svc: &Service,
    lb: Needed<'_>,
    mode: CureMode,
    entry: Option<&NativeEntry>,
    delivery: &DeliveryOf,
    config: &PlannerConfig,
    barred: &[NodeBar],
    warnings: &mut Vec<Warning>,
) -> (CureChoice, Option<NativeAction>) {
    let service = lb.service.clone();
    let dns = |reason: String, native: Option<NativeProgress>| CureChoice {
        service: service.clone(),
        cure: Cure::Dns,
        mode,
        delivery: delivery.clone(),
        native,
        reason,
        nodes: Vec::new(),
    };
    let restore = |reason: &str| {
        entry.map(|e| NativeAction::Restore {
            service: service.clone(),
            uid: Some(e.uid.clone()),
            original: e.original.clone(),
            reason: reason.to_owned(),
        })
    };
    if let Some((ccm, setting)) = ccm_ip_mode(svc) {
        let why = format!(
            "{ccm} computes ipMode itself (hairpin never overrides a cloud controller): its own setting is {setting}"
        );
        return (dns(why.clone(), None), restore(&why));
    }
    if lb.forced {
        let why =
            "hairpin's proxy-protocol annotation forces the DNS cure (the CNI may ignore ipMode)";
        return (dns(why.into(), None), restore(why));
    }
    if mode == CureMode::Dns {
        let why = "--cure dns (or the Service's cure annotation)";
        return (dns(why.into(), None), restore(why));
    }
    if let Some(why) = native_barred(svc, mode, delivery, config, warnings) {
        return (dns(why.clone(), None), restore(&why));
    }
    let uid = svc.metadata.uid.as_deref().unwrap_or_default();
    if let Some((reason, put_back)) = entry.and_then(|e| put_back(svc, e, mode, uid)) {
        let progress = entry.map(|e| match e.state {
            ProbeState::Unsupported => NativeProgress::Unsupported,
            _ => NativeProgress::Failed,
        });
        return (dns(reason, progress), Some(put_back));
    }
    if let Some(choice) = by_nodes(svc, mode, entry, delivery, barred, warnings) {
        return (choice, None);
    }
    by_state(svc, service, mode, entry, delivery)
}

/// The cure of a load balancer native may be tried on, from where its record stands, and
/// its status write, if any.
fn by_state(
    svc: &Service,
    service: ObjectRef,
    mode: CureMode,
    entry: Option<&NativeEntry>,
    delivery: &DeliveryOf,
) -> (CureChoice, Option<NativeAction>) {
    let dns = |reason: String, native: Option<NativeProgress>| CureChoice {
        service: service.clone(),
        cure: Cure::Dns,
        mode,
        delivery: delivery.clone(),
        native,
        reason,
        nodes: Vec::new(),
    };
    let uid = svc.metadata.uid.clone().unwrap_or_default();
    // A wait that is over (`due`) proposes the cure again, as if it had never been tried.
    let state = entry.filter(|e| !e.due).map(|e| e.state);
    let skipped = skipped_of(svc, entry);
    let skipped = skipped.as_slice();
    let set_proxy = |proven: bool| {
        let mut ips = not_proxy(svc);
        ips.retain(|was| !skipped.contains(&was.ip));
        (!ips.is_empty()).then(|| NativeAction::SetProxy {
            service: service.clone(),
            uid: uid.clone(),
            ips,
            proven,
        })
    };
    let native = |progress: NativeProgress, reason: String| CureChoice {
        cure: Cure::Native,
        ..dns(reason, Some(progress))
    };
    let detail = entry
        .map(|e| escape::text(&e.reason).into_owned())
        .unwrap_or_default();
    // A status IP the cure never had (the load balancer's address changed, or one was added):
    // the cure starts over for it, proven first; DNS meanwhile.
    let moved = entry.map(|e| new_ips(svc, e)).unwrap_or_default();
    let state = state
        .filter(|s| moved.is_empty() || !matches!(s, ProbeState::Proven | ProbeState::Probing));
    match (mode, state) {
        // Whatever the mode: a write the API server drops is not made again.
        (_, Some(ProbeState::Unsupported)) => (
            dns(
                format!("the API server does not keep ipMode: {detail}"),
                Some(NativeProgress::Unsupported),
            ),
            None,
        ),
        (CureMode::Native, Some(ProbeState::NotNeeded)) => (
            native(
                NativeProgress::NotNeeded,
                format!("not needed (--cure native: no DNS rule either): {detail}"),
            ),
            None,
        ),
        (CureMode::Native, state) => {
            let progress = match state {
                Some(ProbeState::Proven) => NativeProgress::Proven,
                Some(ProbeState::Failed) => NativeProgress::Failed,
                Some(ProbeState::Probing) => NativeProgress::Probing,
                _ => NativeProgress::ToProve,
            };
            let why = "--cure native: ipMode: Proxy, no DNS rules, proven or not".to_owned();
            // Probed once (the verdict is reported, never acted on): later writes re-assert.
            let probed = matches!(state, Some(ProbeState::Proven | ProbeState::Failed));
            (native(progress, why), set_proxy(probed))
        }
        (_, Some(ProbeState::Proven)) if !skipped.is_empty() => (
            dns(partly(&detail, skipped), Some(NativeProgress::Proven)),
            set_proxy(true),
        ),
        (_, Some(ProbeState::Proven)) => (
            native(
                NativeProgress::Proven,
                format!("ipMode: Proxy is honoured here: {detail}"),
            ),
            set_proxy(true),
        ),
        (_, Some(ProbeState::Probing)) => (
            dns(
                "ipMode: Proxy set; the probe runs, DNS stays until it succeeds".into(),
                Some(NativeProgress::Probing),
            ),
            set_proxy(false),
        ),
        (_, Some(ProbeState::Failed)) => (
            // The controller's words: a probe not answered, a status fight (naming the
            // writer), or a problem that could not be shown.
            dns(
                if detail.is_empty() {
                    "ipMode: Proxy was not honoured".to_owned()
                } else {
                    detail
                },
                Some(NativeProgress::Failed),
            ),
            // Put back by the controller already; again if another writer set it meanwhile.
            None,
        ),
        (_, Some(ProbeState::NotNeeded)) => (
            dns(
                format!("not needed: {detail}"),
                Some(NativeProgress::NotNeeded),
            ),
            None,
        ),
        (_, None) => (
            dns(to_prove(&moved), Some(NativeProgress::ToProve)),
            set_proxy(false),
        ),
    }
}

/// The put-back of a failed cure whose status still says `Proxy` ([`to_put_back`]): before
/// anything else, whether its wait is over or not (a new attempt would skip the IPs already
/// at `Proxy`). Only `--cure native` keeps a failed cure's `Proxy`.
fn put_back(
    svc: &Service,
    entry: &NativeEntry,
    mode: CureMode,
    uid: &str,
) -> Option<(String, NativeAction)> {
    let ips = to_put_back(svc, entry, mode == CureMode::Native);
    if ips.is_empty() {
        return None;
    }
    let detail = escape::text(&entry.reason);
    let pending = if entry.put_back.is_empty() {
        String::new()
    } else {
        format!(
            "; the put-back is not applied yet ({}): tried again",
            escape::text(&entry.put_back)
        )
    };
    let reason = format!(
        "{detail}; ipMode: Proxy is still on {} and is put back, the DNS cure stays{pending}",
        escape::text(&ips.join(", "))
    );
    let action = NativeAction::PutBack {
        service: ObjectRef::from_meta(&svc.metadata),
        uid: uid.to_owned(),
        original: entry.original.clone(),
        reason: reason.clone(),
    };
    Some((reason, action))
}

/// The IPs of `svc`'s status the controller could not reach: they stay out of the writes,
/// except in a new attempt (`due`), which asks every IP again.
fn skipped_of(svc: &Service, entry: Option<&NativeEntry>) -> Vec<String> {
    let Some(entry) = entry.filter(|e| !e.due) else {
        return Vec::new();
    };
    status_ingress(svc)
        .iter()
        .filter_map(|e| e.ip.clone())
        .filter(|ip| entry.skipped.contains(ip))
        .collect()
}

/// Why a cure proven on the IPs the controller reaches keeps the DNS cure for the names: the
/// `skipped` IPs stay VIP.
fn partly(detail: &str, skipped: &[String]) -> String {
    format!(
        "ipMode: Proxy is honoured on the IPs the controller reaches ({detail}); {} cannot be reached from the controller and stays VIP, so the names keep the DNS cure",
        escape::text(&skipped.join(", "))
    )
}

/// Why native is to be proven: never tried, or the address changed (`moved`: the new IPs).
fn to_prove(moved: &[String]) -> String {
    if moved.is_empty() {
        return "ipMode: Proxy is to be proven by probe; DNS until then".into();
    }
    format!(
        "the load balancer's address changed (new: {}): ipMode: Proxy is to be proven by probe again; DNS until then",
        escape::text(&moved.join(", "))
    )
}

/// The status IPs of `svc` that `entry`'s cure never had (nor skipped as unreachable).
fn new_ips(svc: &Service, entry: &NativeEntry) -> Vec<String> {
    status_ingress(svc)
        .iter()
        .filter_map(|e| e.ip.clone())
        .filter(|ip| !entry.original.iter().any(|was| was.ip == *ip))
        .filter(|ip| !entry.skipped.contains(ip))
        .collect()
}

/// Why native is not tried (or refused) on this load balancer, before any record or probe:
/// an `ipMode` of another writer on its status, or how it delivers traffic ([`Delivery`]).
/// `auto` tries native only on a [`Delivery::Proxy`]; `native` (flag or annotation) forces it
/// only where the delivery is not [`Delivery::Vip`], and forcing it on a VIP is refused with a
/// warning that names the outage.
fn native_barred(
    svc: &Service,
    mode: CureMode,
    delivery: &DeliveryOf,
    config: &PlannerConfig,
    warnings: &mut Vec<Warning>,
) -> Option<String> {
    if let Some(foreign) = status_ingress(svc).iter().find(|e| foreign_ip_mode(e)) {
        return Some(format!(
            "status IP {} has ipMode {}, another writer's (hairpin only turns VIP into Proxy): hairpin leaves this status alone",
            escape::text(foreign.ip.as_deref().unwrap_or_default()),
            escape::text(foreign.ip_mode.as_deref().unwrap_or_default()),
        ));
    }
    let evidence = &delivery.evidence;
    match (delivery.kind, mode) {
        (Delivery::Proxy, _) | (Delivery::Unknown, CureMode::Native) => None,
        (Delivery::Vip, CureMode::Native) => {
            warnings.push(Warning::escaped_message(
                format!("Service {}", ObjectRef::from_meta(&svc.metadata)),
                format!(
                    "the native cure (--cure native or annotation {}) is refused: {VIP_NODES} ({evidence}), and {VIP_OUTAGE}. It stays on the DNS cure",
                    escape::Text(&config.annotation("cure")),
                ),
            ));
            Some(format!(
                "native refused: {VIP_NODES} ({evidence}), and {VIP_OUTAGE}"
            ))
        }
        (Delivery::Vip, _) => Some(format!(
            "native never tried: {VIP_NODES} ({evidence}), and {VIP_OUTAGE}"
        )),
        (Delivery::Unknown, _) => Some(format!(
            "native not tried: not known to be a proxy load balancer ({evidence})"
        )),
    }
}

/// An `ipMode` hairpin neither writes nor reads as the default (a future `Router`): another
/// writer's, never changed.
fn foreign_ip_mode(e: &LoadBalancerIngress) -> bool {
    e.ip_mode
        .as_deref()
        .is_some_and(|m| m != IP_MODE_PROXY && m != IP_MODE_VIP)
}

/// The status IPs of `svc` not at `ipMode: Proxy`, with what they say: the first time every
/// bypassed IP, later every IP another writer put back (or a cloud controller brought new).
/// An IP at an `ipMode` of another writer ([`foreign_ip_mode`]) is never one of them.
fn not_proxy(svc: &Service) -> Vec<IpModeWas> {
    status_ingress(svc)
        .iter()
        .filter(|e| e.ip_mode.as_deref() != Some(IP_MODE_PROXY))
        .filter(|e| !foreign_ip_mode(e))
        .filter_map(|e| {
            Some(IpModeWas {
                ip: e.ip.clone()?,
                ip_mode: e.ip_mode.clone(),
            })
        })
        .collect()
}
