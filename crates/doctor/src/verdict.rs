//! The doctor's judgement: pure functions from check results to a verdict and fixes, so every
//! rule is unit-tested without a network or a cluster.

use hairpin_planner::escape::Text;
use hairpin_planner::native::IP_MODE_PROXY;
use serde::Serialize;

use crate::admission::AdmissionPolicyFacts;
use crate::cure::{CcmFacts, CertManagerFacts, CureFacts, CureKind};
pub use crate::dataplane::CniFacts;
use crate::dataplane::{IpModeSupport, KubeProxyFacts};
pub use crate::facts::{CiliumFacts, LbIngress, LoadBalancerFacts};
use crate::probe::{HostsFileNote, ProbeOutcome, Probes, Resolution};

/// The verdict for one host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// Clients here reach the host.
    Ok,
    /// Clients here cannot reach the host, or in-cluster clients bypass its load balancer.
    Broken,
    /// The host's load balancer needs no hairpin (no PROXY protocol, `ipMode: Proxy`, or a
    /// hostname in its status), and the host answers.
    NotNeeded,
}

impl Status {
    /// The word printed in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Broken => "BROKEN",
            Status::NotNeeded => "NOT NEEDED",
        }
    }
}

/// Where the doctor runs: it changes what a successful plain request proves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Vantage {
    /// In a pod (the in-cluster path is the one probed).
    Pod,
    /// A laptop or a node: the path probed may go through the real load balancer.
    Machine,
}

/// The network checks of one host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NetworkChecks {
    /// How the host resolved.
    pub resolution: Resolution,
    /// What the local hosts file says about it.
    pub hosts_file: Option<HostsFileNote>,
    /// The probes of its first address (absent when it did not resolve).
    pub probes: Option<Probes>,
}

/// What the cluster checks found, or why they did not run.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ClusterView {
    /// No API access: what could not be checked, and why.
    NotChecked {
        /// Why (no kubeconfig, unreachable, forbidden...).
        reason: String,
    },
    /// The API was read (boxed: the facts are large, the other variant a string).
    Checked(Box<ClusterFacts>),
}

/// Facts read from the Kubernetes API for one host.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClusterFacts {
    /// `major.minor` from `/version`.
    pub kubernetes_version: Option<(u32, u32)>,
    /// The LoadBalancer Service behind the host, when one was found.
    pub load_balancer: Option<LoadBalancerFacts>,
    /// CoreDNS and node-local-dns.
    pub dns: DnsFacts,
    /// hairpin's own Services and proxies.
    pub hairpin: HairpinFacts,
    /// The CNI, as far as it decides whether `ipMode: Proxy` is honoured.
    pub cni: CniFacts,
    /// kube-proxy, when its DaemonSet is in kube-system.
    pub kube_proxy: Option<KubeProxyFacts>,
    /// Who handles pods' traffic to load balancer IPs, and whether it honours `ipMode: Proxy`.
    pub ip_mode: IpModeSupport,
    /// The cloud controller that computes the load balancer's `ipMode` itself, if one does.
    pub ccm: Option<CcmFacts>,
    /// The cure this cluster can use for the load balancer, and why.
    pub cure: Option<CureFacts>,
    /// cert-manager, when it runs.
    pub cert_manager: Option<CertManagerFacts>,
    /// hairpin's status admission policy (None: not read).
    pub admission_policy: Option<AdmissionPolicyFacts>,
    /// Things that could not be read (forbidden lists...).
    pub gaps: Vec<String>,
}

/// CoreDNS and node-local-dns state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DnsFacts {
    /// A CoreDNS configuration was found.
    pub coredns_found: bool,
    /// hairpin's markers are present (Corefile block or `coredns-custom` key).
    pub markers_present: bool,
    /// The host is rewritten inside hairpin's block.
    pub host_in_block: bool,
    /// The Corefile has the `reload` plugin (None: unknown).
    pub reload_plugin: Option<bool>,
    /// A node-local-dns cache runs (it answers pods before CoreDNS).
    pub node_local_dns: bool,
    /// Why hairpin cannot edit this cluster's DNS, when it cannot.
    pub uneditable: Option<UneditableDns>,
    /// The EKS CoreDNS add-on manages the key hairpin writes, when it does.
    pub eks_add_on: Option<EksAddOn>,
}

/// A CoreDNS ConfigMap hairpin writes that the EKS CoreDNS add-on manages. EKS installs its
/// add-ons by server-side apply, so the ConfigMap has a `metadata.managedFields` entry of
/// field manager `eks`; the `eks.amazonaws.com/component` label is on a self-managed CoreDNS
/// too and proves nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EksAddOn {
    /// `namespace/name`.
    pub config_map: String,
    /// The key hairpin writes there (`Corefile`).
    pub key: String,
    /// Whether the `eks` entry owns the key now. Another writer's update (hairpin's
    /// controller, `kubectl edit`) takes the field over; an add-on update with `OVERWRITE`
    /// takes it back.
    pub eks_owns_key: bool,
    /// The other field managers that own the key now (`hairpin` once its controller wrote).
    pub other_owners: Vec<String>,
}

impl EksAddOn {
    /// What it means for hairpin, and the documented ways to keep hairpin's block.
    pub fn describe(&self) -> String {
        format!(
            "ConfigMap {} belongs to the EKS CoreDNS add-on ({}), so hairpin's marked block \
             lives in an EKS-managed field: an add-on update with `aws eks update-addon \
             --resolve-conflicts OVERWRITE` puts EKS's {} back and removes the block, and \
             hairpin's controller, which watches this ConfigMap, writes it again on that \
             change (in-cluster clients bypass the load balancer until it has and CoreDNS has \
             reloaded). Update the add-on with `--resolve-conflicts PRESERVE`, which keeps the \
             block, or run hairpin with `--dns-mode external-dns`, which writes no kube-system \
             ConfigMap",
            self.config_map,
            self.ownership(),
            self.key
        )
    }

    /// Who owns the key, in words.
    pub fn ownership(&self) -> String {
        let key = &self.key;
        match (self.eks_owns_key, self.other_owners.as_slice()) {
            (true, []) => format!("field manager `eks` owns `data.{key}`"),
            (true, others) => format!(
                "field manager `eks` owns `data.{key}`, with {}",
                managers(others)
            ),
            (false, []) => format!(
                "field manager `eks` applied it; an edit has taken `data.{key}` over from it"
            ),
            (false, others) => format!(
                "field manager `eks` applied it; {} took `data.{key}` over from it by an edit",
                managers(others)
            ),
        }
    }
}

/// `` `a` ``, `` `a` and `b` ``, `` `a`, `b` and `c` ``.
fn managers(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// A cluster DNS hairpin cannot edit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum UneditableDns {
    /// kube-dns (GKE's default): no Corefile; it reads only `stubDomains` and
    /// `upstreamNameservers` from `kube-system/kube-dns`.
    KubeDns,
    /// No cluster DNS configuration at all in kube-system (no CoreDNS Corefile, no kube-dns):
    /// Cloud DNS for GKE (GKE Autopilot's default) answers the cluster's queries itself.
    NoDnsConfig,
    /// A CoreDNS ConfigMap that an add-on manager puts back as it was.
    ReconciledCoreDns {
        /// `namespace/name`.
        config_map: String,
        /// The label that says so, `key=value`.
        label: String,
    },
}

impl UneditableDns {
    /// The mode, in a sentence.
    pub fn describe(&self) -> String {
        match self {
            UneditableDns::KubeDns => "the cluster DNS is kube-dns (GKE's default), not CoreDNS: \
                 it has no Corefile hairpin could add rules to (kube-dns reads only `stubDomains` \
                 and `upstreamNameservers` from ConfigMap kube-system/kube-dns)"
                .to_owned(),
            UneditableDns::NoDnsConfig => "kube-system holds no cluster DNS configuration (no \
                 CoreDNS Corefile, no kube-dns): the cluster's DNS is managed outside it, as \
                 with Cloud DNS for GKE"
                .to_owned(),
            UneditableDns::ReconciledCoreDns { config_map, label } => format!(
                "the CoreDNS ConfigMap {config_map} is managed by an add-on manager ({label}), \
                 which reverts every edit, hairpin's included"
            ),
        }
    }
}

/// hairpin's own objects.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HairpinFacts {
    /// hairpin Services found (`namespace/name`).
    pub services: Vec<String>,
    /// Ready proxy endpoints behind them.
    pub ready_endpoints: usize,
    /// The `Hairpin` status of the host's load balancer, when the CRD is installed and the
    /// controller wrote one.
    pub status: Option<HairpinStatusFacts>,
}

/// What the controller wrote in the `Hairpin` object of one load balancer.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HairpinStatusFacts {
    /// `namespace/name` (the load balancer Service's).
    pub name: String,
    /// `Written`, `Effective`, `NotEffective` or `Refused`.
    pub dns: Option<String>,
    /// Seconds from the DNS write until the cluster DNS answered, measured by the controller.
    pub propagation_seconds: Option<f64>,
    /// Ready endpoints of the hairpin Service.
    pub ready_endpoints: Option<i64>,
    /// Its conditions: `type=status (reason): message`.
    pub conditions: Vec<String>,
    /// The controller found the fix working: `Ready` is True (or, without it, `DNSEffective`
    /// and `ProxyReady` are).
    pub effective: bool,
}

impl HairpinStatusFacts {
    /// From a `Hairpin` object as JSON (the doctor does not link the controller's types).
    pub fn from_object(name: String, object: &serde_json::Value) -> HairpinStatusFacts {
        let status = &object["status"];
        let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        let is_true = |kind: &str| {
            conditions
                .iter()
                .find(|c| c["type"] == kind)
                .map(|c| c["status"] == "True")
        };
        let effective = is_true("Ready").unwrap_or_else(|| {
            is_true("DNSEffective") == Some(true) && is_true("ProxyReady") == Some(true)
        });
        HairpinStatusFacts {
            name,
            dns: status["dns"].as_str().map(str::to_owned),
            propagation_seconds: status["propagationSeconds"].as_f64(),
            ready_endpoints: status["readyEndpoints"].as_i64(),
            conditions: conditions
                .iter()
                .map(|c| {
                    let text = |key: &str| c[key].as_str().unwrap_or_default().to_owned();
                    let mut line = format!("{}={}", text("type"), text("status"));
                    if !text("reason").is_empty() {
                        line.push_str(&format!(" ({})", text("reason")));
                    }
                    if !text("message").is_empty() {
                        line.push_str(&format!(": {}", text("message")));
                    }
                    line
                })
                .collect(),
            effective,
        }
    }

    /// One sentence: what the status says, and whether the fix is effective.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "Hairpin {}: DNS {}",
            self.name,
            self.dns.as_deref().unwrap_or("unknown")
        );
        if let Some(seconds) = self.propagation_seconds {
            text.push_str(&format!(" (took effect {seconds:.0} s after the write)"));
        }
        if let Some(ready) = self.ready_endpoints {
            text.push_str(&format!(", {ready} ready proxy endpoint(s)"));
        }
        if self.effective {
            text.push_str("; the controller checked it: the fix is effective");
        } else {
            text.push_str("; the fix is NOT effective yet");
            let failing: Vec<&String> = self
                .conditions
                .iter()
                .filter(|c| !c.contains("=True"))
                .collect();
            if !failing.is_empty() {
                text.push_str(&format!(
                    " ({})",
                    failing
                        .iter()
                        .map(|c| c.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
            }
        }
        text
    }
}

/// The verdict for one host, with its cause and fixes in order of preference.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// OK, BROKEN or NOT NEEDED.
    pub status: Status,
    /// One sentence.
    pub summary: String,
    /// Why it is broken.
    pub cause: Option<String>,
    /// What fixes it, cleanest first.
    pub fixes: Vec<String>,
    /// Context worth knowing (source addresses, traffic policy, what was not checked).
    pub notes: Vec<String>,
}

const SOURCE_ADDRESS_NOTE: &str = "Without the PROXY header the ingress cannot learn the client: \
     traffic that skips the load balancer shows up with a node or pod address, which breaks \
     allow-lists, rate limits and logs keyed on the client address.";

const LOCAL_POLICY_NOTE: &str = "`externalTrafficPolicy: Local` keeps client addresses without \
     the PROXY protocol, but the load balancer then sends only to nodes that run an ingress pod \
     (uneven spreading, failed health checks on the others), and in-cluster clients still \
     bypass the load balancer.";

/// Judges one host from its checks.
pub fn diagnose(network: &NetworkChecks, cluster: &ClusterView, vantage: Vantage) -> Verdict {
    let (lb, mut notes) = context(network, cluster);
    if let Some(lb) = lb
        && let Some(mismatch) = &lb.mismatch
    {
        return receiver_mismatch(lb, mismatch, notes);
    }
    let Some(probes) = &network.probes else {
        let error = match &network.resolution {
            Resolution::Failed { error } => error.clone(),
            _ => "no address to probe".into(),
        };
        return Verdict {
            status: Status::Broken,
            summary: "the host does not resolve here".into(),
            cause: Some(format!(
                "name resolution failed ({error}): clients here cannot reach the host at all; \
                 this is not the hairpin problem — check DNS (and, in a pod, CoreDNS)"
            )),
            fixes: Vec::new(),
            notes,
        };
    };
    if probes.plain.answered() {
        if let Some(lb) = lb
            && let Some(verdict) = answered_but_not_for_all(lb, cluster, vantage, &mut notes)
        {
            return verdict;
        }
        return answered(network, probes, cluster, notes);
    }
    if probes.proxy_answered() {
        return short_circuit(probes, cluster, lb, notes);
    }
    no_answer(probes, notes)
}

/// The load balancer and its receiver disagree about the PROXY protocol (issue 31): every
/// client is refused, outside ones too, whatever the probes from here say; hairpin leaves such
/// a load balancer alone.
fn receiver_mismatch(lb: &LoadBalancerFacts, mismatch: &str, notes: Vec<String>) -> Verdict {
    let fix = mismatch.split_once("Fix: ").map_or(
        "make the load balancer and the receiver agree about the PROXY protocol",
        |(_, fix)| fix,
    );
    Verdict {
        status: Status::Broken,
        summary: format!(
            "the load balancer {} and its receiver disagree about the PROXY protocol: broken for every client, outside the cluster too",
            lb.service
        ),
        cause: Some(mismatch.to_owned()),
        fixes: vec![format!(
            "{fix}; hairpin changes nothing for this load balancer until they agree"
        )],
        notes,
    }
}

/// The load balancer behind the host, when the cluster was checked, and the notes that hold
/// whatever the probes say: hairpin's hosts entry, what could not be read, an EKS add-on, the
/// `Local` traffic policy.
fn context<'a>(
    network: &NetworkChecks,
    cluster: &'a ClusterView,
) -> (Option<&'a LoadBalancerFacts>, Vec<String>) {
    let mut notes = Vec::new();
    if let Some(hosts) = &network.hosts_file
        && hosts.in_hairpin_block
    {
        notes.push(format!(
            "{} maps this host inside hairpin's block (the node agent's entry).",
            hosts.path
        ));
    }
    let lb = match cluster {
        ClusterView::Checked(facts) => {
            notes.extend(facts.gaps.iter().map(|gap| format!("not checked: {gap}")));
            notes.extend(
                facts
                    .admission_policy
                    .as_ref()
                    .and_then(AdmissionPolicyFacts::warning),
            );
            if let Some(eks) = &facts.dns.eks_add_on {
                notes.push(format!("{}.", eks.describe()));
            }
            facts.load_balancer.as_ref()
        }
        ClusterView::NotChecked { reason } => {
            notes.push(format!(
                "cluster checks skipped ({reason}): the load balancer, its PROXY annotation, \
                 ipMode, CoreDNS and hairpin's proxies were not checked; the verdict rests on \
                 the network checks from here"
            ));
            None
        }
    };
    if let Some(lb) = lb
        && lb.external_traffic_policy.as_deref() == Some("Local")
    {
        notes.push(LOCAL_POLICY_NOTE.into());
    }
    if let Some(receiver) = lb.and_then(|lb| lb.receiver.as_deref()) {
        notes.push(format!("receiver: {}", Text(receiver)));
    }
    (lb, notes)
}

/// A plain request is answered, but what the cluster says about the load balancer decides
/// otherwise: the CNI ignores its ipMode, it needs no hairpin at all, or (from a machine
/// outside) in-cluster clients still bypass it. None: the answer stands.
fn answered_but_not_for_all(
    lb: &LoadBalancerFacts,
    cluster: &ClusterView,
    vantage: Vantage,
    notes: &mut Vec<String>,
) -> Option<Verdict> {
    if let Some(ignored) = ip_mode_ignored(cluster) {
        notes.push(SOURCE_ADDRESS_NOTE.into());
        let summary = if vantage == Vantage::Machine {
            "answers from here (through the load balancer), but in-cluster clients \
             bypass it: the CNI ignores its `ipMode: Proxy`"
        } else {
            "answers, although the CNI ignores the load balancer's `ipMode: Proxy` \
             (in-cluster traffic skips the load balancer)"
        };
        return Some(Verdict {
            status: Status::Broken,
            summary: summary.into(),
            cause: Some(ignored),
            fixes: fixes(cluster),
            notes: std::mem::take(notes),
        });
    }
    if !lb.needs_hairpin {
        let reason = lb
            .not_needed_reason
            .clone()
            .unwrap_or_else(|| "in-cluster clients do not bypass it".into());
        return Some(Verdict {
            status: Status::NotNeeded,
            summary: format!("answers, and {} needs no hairpin: {reason}", lb.service),
            cause: None,
            fixes: Vec::new(),
            notes: std::mem::take(notes),
        });
    }
    if vantage == Vantage::Machine && !covered(cluster) {
        notes.push(SOURCE_ADDRESS_NOTE.into());
        return Some(Verdict {
            status: Status::Broken,
            summary: "answers from here (through the load balancer), but in-cluster \
                      clients bypass it"
                .into(),
            cause: Some(bypass_cause(lb)),
            fixes: fixes(cluster),
            notes: std::mem::take(notes),
        });
    }
    None
}

/// A plain request is answered, and nothing says in-cluster clients fare worse: OK.
fn answered(
    network: &NetworkChecks,
    probes: &Probes,
    cluster: &ClusterView,
    mut notes: Vec<String>,
) -> Verdict {
    let proxy_rejected = [&probes.proxy_v1, &probes.proxy_v2].iter().any(|outcome| {
        matches!(outcome, ProbeOutcome::Answered { first_line } if first_line.contains(" 400 "))
    });
    if proxy_rejected {
        notes.push(
            "the probes that start with a PROXY header get 400: expected when the path adds \
             its own header (hairpin's proxy or a load balancer), since ours then arrives \
             as the request line"
                .into(),
        );
    }
    let summary = if network
        .hosts_file
        .as_ref()
        .is_some_and(|hosts| hosts.in_hairpin_block)
        || covered(cluster)
    {
        "a plain request is answered: hairpin is in place for this host"
    } else {
        "a plain request is answered: either nothing here requires a PROXY header, or a \
         hairpin is in place"
    };
    Verdict {
        status: Status::Ok,
        summary: summary.into(),
        cause: None,
        fixes: Vec::new(),
        notes,
    }
}

/// Only a request after a PROXY header is answered: the hairpin short-circuit.
fn short_circuit(
    probes: &Probes,
    cluster: &ClusterView,
    lb: Option<&LoadBalancerFacts>,
    mut notes: Vec<String>,
) -> Verdict {
    notes.push(SOURCE_ADDRESS_NOTE.into());
    let mut cause = format!(
        "a plain request to {} gets no answer ({}), but the same request after a PROXY \
         header is answered: the server requires the PROXY protocol, and this connection \
         did not pass through the load balancer that adds it. That is the hairpin \
         short-circuit: kube-proxy (or Cilium) delivers traffic for the load balancer's \
         external IP straight to the ingress.",
        probes.address,
        short(&probes.plain.describe()),
    );
    if let Some(ignored) = ip_mode_ignored(cluster) {
        cause.push(' ');
        cause.push_str(&ignored);
    } else if let Some(lb) = lb {
        cause.push(' ');
        cause.push_str(&bypass_cause(lb));
    }
    cause.push_str(&dns_gaps(cluster));
    Verdict {
        status: Status::Broken,
        summary: "in-cluster traffic bypasses the load balancer (no PROXY header)".into(),
        cause: Some(cause),
        fixes: fixes(cluster),
        notes,
    }
}

/// Neither a plain request nor one with a PROXY header is answered: not the hairpin problem.
fn no_answer(probes: &Probes, notes: Vec<String>) -> Verdict {
    let cause = if probes.plain.connected() {
        format!(
            "{} accepts connections but answers neither a plain request ({}) nor one with a \
             PROXY header: not the hairpin signature; check the server behind it",
            probes.address,
            short(&probes.plain.describe())
        )
    } else {
        format!(
            "cannot reach {} ({}); not the hairpin signature: check the address, firewalls \
             and that the service is up",
            probes.address,
            short(&probes.plain.describe())
        )
    };
    Verdict {
        status: Status::Broken,
        summary: "the host does not answer from here".into(),
        cause: Some(cause),
        fixes: Vec::new(),
        notes,
    }
}

fn short(description: &str) -> &str {
    description
        .split_once(": ")
        .map_or(description, |(_, rest)| rest)
}

fn covered(cluster: &ClusterView) -> bool {
    match cluster {
        ClusterView::Checked(facts) => {
            facts.dns.host_in_block
                && !facts.dns.node_local_dns
                && facts.dns.reload_plugin != Some(false)
                && facts.hairpin.ready_endpoints > 0
        }
        ClusterView::NotChecked { .. } => false,
    }
}

fn bypass_cause(lb: &LoadBalancerFacts) -> String {
    let version = lb.proxy_protocol.as_deref().unwrap_or("the PROXY protocol");
    let ips: Vec<String> = lb
        .ingress
        .iter()
        .filter_map(|ingress| {
            ingress.ip.as_ref().map(|ip| {
                format!(
                    "{ip} (ipMode {})",
                    ingress.ip_mode.as_deref().unwrap_or("unset, i.e. VIP")
                )
            })
        })
        .collect();
    format!(
        "Service {} sends {version} through its load balancer and publishes {} in its status, \
         so kube-proxy short-circuits in-cluster traffic to it.",
        lb.service,
        if ips.is_empty() {
            "an IP".into()
        } else {
            ips.join(", ")
        }
    )
}

fn dns_gaps(cluster: &ClusterView) -> String {
    let ClusterView::Checked(facts) = cluster else {
        return String::new();
    };
    let mut text = String::new();
    if !facts.hairpin.services.is_empty() && !facts.dns.host_in_block {
        text.push_str(
            " hairpin is installed but this host is not in its CoreDNS block: check that an \
             Ingress or Gateway for it is on this load balancer (`hairpin plan` shows why).",
        );
    }
    if facts.dns.host_in_block && facts.dns.reload_plugin == Some(false) {
        text.push_str(
            " The host is in hairpin's CoreDNS block, but the Corefile has no `reload` plugin: \
             CoreDNS still serves the old configuration until it restarts.",
        );
    }
    if let Some(uneditable) = &facts.dns.uneditable {
        text.push_str(&format!(
            " hairpin cannot fix this through the cluster DNS: {}.",
            uneditable.describe()
        ));
    }
    if facts.dns.node_local_dns {
        text.push_str(
            " node-local-dns runs on the nodes and answers pods before CoreDNS, bypassing the \
             rewrite: configure its forward for the host's zone to CoreDNS, or enable hairpin's \
             node agent.",
        );
    }
    if facts.dns.host_in_block && facts.hairpin.ready_endpoints == 0 {
        text.push_str(" The host points at hairpin, but no proxy endpoint is ready.");
    }
    text
}

/// When the load balancer's status asks for `ipMode: Proxy` and whatever handles its IP
/// (kube-proxy, or the CNI replacing it) ignores it: why in-cluster traffic still skips the
/// load balancer.
fn ip_mode_ignored(cluster: &ClusterView) -> Option<String> {
    let ClusterView::Checked(facts) = cluster else {
        return None;
    };
    let lb = facts.load_balancer.as_ref()?;
    // A load balancer hairpin plans although its status says `ipMode: Proxy` carries the
    // forced annotation already: the usual checks apply to it.
    if lb.needs_hairpin
        || !lb
            .ingress
            .iter()
            .any(|ingress| ingress.ip_mode.as_deref() == Some(IP_MODE_PROXY))
    {
        return None;
    }
    (facts.ip_mode.honours == Some(false)).then(|| {
        format!(
            "Service {} asks for `ipMode: Proxy`, but {}, so in-cluster traffic to its IP \
             still skips the load balancer and arrives without the PROXY header.",
            lb.service,
            facts.ip_mode.describe()
        )
    })
}

/// hairpin plans a load balancer whose status says `ipMode: Proxy`: only with the forced
/// annotation (or its own native cure, which its record shows).
fn forced(lb: &LoadBalancerFacts, cure: Option<&CureFacts>) -> bool {
    lb.needs_hairpin
        && cure.is_none_or(|cure| cure.probe.is_none())
        && lb
            .ingress
            .iter()
            .any(|ingress| ingress.ip_mode.as_deref() == Some(IP_MODE_PROXY))
}

/// The words for the dataplane's part: who handles pods' traffic to load balancer IPs and
/// whether it honours `ipMode: Proxy`.
pub fn ip_mode_support(facts: &ClusterFacts) -> String {
    facts.ip_mode.describe()
}

/// The fixes for a hairpin bypass, cleanest first, for what is known of the cluster.
pub fn fixes(cluster: &ClusterView) -> Vec<String> {
    let ClusterView::Checked(facts) = cluster else {
        return without_provider(Vec::new(), install_hairpin(None, None));
    };
    let mut out = provider_fixes(facts);
    if let Some(cert_manager) = &facts.cert_manager {
        out.push(cert_manager.fix());
    }
    out
}

/// The fixes that involve the provider, the dataplane and hairpin.
fn provider_fixes(facts: &ClusterFacts) -> Vec<String> {
    let lb = facts.load_balancer.as_ref();
    let ignoring = (facts.ip_mode.honours == Some(false)).then_some(&facts.ip_mode);
    let cure = facts.cure.as_ref();
    let hairpin = install_hairpin(facts.dns.uneditable.as_ref(), cure);
    let native = cure.is_some_and(|cure| cure.cure == CureKind::Native);
    // A VIP the nodes receive: `ipMode: Proxy`, from anyone, would cut off every client outside
    // the cluster. No fix suggests it.
    let vip = cure.is_some_and(CureFacts::is_vip);
    // Forcing matters only where the status says `ipMode: Proxy` (else hairpin plans the load
    // balancer anyway).
    if let Some(lb) = lb
        && let Some(ignoring) = ignoring
        && !forced(lb, cure)
        && lb
            .ingress
            .iter()
            .any(|ingress| ingress.ip_mode.as_deref() == Some(IP_MODE_PROXY))
    {
        return vec![force_the_hairpin(lb, ignoring), hairpin];
    }
    let mut out = Vec::new();
    if native {
        out.push(hairpin.clone());
    }
    let Some(provider) = lb.and_then(|lb| lb.provider) else {
        if native {
            return out;
        }
        if vip {
            out.push(hairpin);
            return out;
        }
        return without_provider(out, hairpin);
    };
    if !vip && let Some(native) = provider.native_ip_mode() {
        out.push(native_ip_mode(&native, ignoring, facts.kubernetes_version));
    }
    if let Some((annotation, value)) = provider.hostname_annotation() {
        out.push(format!(
            "{} hostname annotation: `{annotation}: {value}` on the Service; the status then \
             holds a hostname, kube-proxy installs no bypass, and in-cluster traffic makes a \
             round trip through the load balancer (the hostname must resolve to it)",
            provider.name()
        ));
    }
    if !native {
        out.push(hairpin);
    }
    out
}

/// Installing hairpin: its native cure where this cluster honours `ipMode`, else its DNS
/// cure, in the DNS mode this cluster's DNS allows.
fn install_hairpin(uneditable: Option<&UneditableDns>, cure: Option<&CureFacts>) -> String {
    if let Some(cure) = cure
        && cure.cure == CureKind::Native
    {
        return format!(
            "install hairpin: its native cure works here ({}): with `--cure auto` (the \
             default) the controller sets `ipMode: Proxy` on the load balancer's status, \
             probes the address from inside the cluster and keeps it once the probe proves it \
             (its DNS cure until then): no DNS rules, no proxy hop; the ingress sees the \
             node's address as the client (`helm install hairpin charts/hairpin`)",
            cure.why
        );
    }
    let skip_native = match cure {
        Some(cure) if cure.cure == CureKind::Dns && cure.plan_tries_native => format!(
            ". Its DNS cure is the one for this load balancer ({}); with `--cure auto` the \
             controller would first try `ipMode: Proxy` and go back to DNS when its probe \
             fails: `--cure dns` (or the Service annotation `hairpin.io/cure: dns`) skips that",
            cure.why
        ),
        _ => String::new(),
    };
    let Some(uneditable) = uneditable else {
        return format!(
            "install hairpin: it points the cluster's DNS for these hostnames at an \
             in-cluster proxy that adds the PROXY header the load balancer would \
             (`helm install hairpin charts/hairpin`; enable `nodeAgent` for node-level \
             clients such as the kubelet pulling from a registry behind the ingress){skip_native}"
        );
    };
    format!(
        "hairpin in its external-dns DNS mode: {}, so hairpin's default DNS modes (a \
         Corefile block, a `coredns-custom` key) cannot work here. Run it with \
         `--dns-mode external-dns` (Helm: `--set coredns.dnsMode=external-dns`): it \
         publishes the hostnames as DNSEndpoint objects pointing at the hairpin Services' \
         ClusterIPs, for an external-dns instance serving a PRIVATE zone the cluster \
         resolves (`--source=crd --label-filter=hairpin.io/dns-endpoint=true`; a public \
         instance must exclude them){}",
        uneditable.describe(),
        match uneditable {
            UneditableDns::KubeDns => {
                ". On kube-dns, forward each hostname to the DNS server of that zone with a \
                 `stubDomains` entry in ConfigMap kube-system/kube-dns (a stub domain also \
                 captures the names under it; `hairpin plan --stub-domain-nameserver <IP of \
                 that server>` prints the value; docs/compatibility.md)"
            }
            UneditableDns::NoDnsConfig => {
                ". With Cloud DNS for GKE, a Cloud DNS private zone visible to the cluster's \
                 VPC is that zone"
            }
            UneditableDns::ReconciledCoreDns { .. } => "",
        }
    )
}

/// Forcing the hairpin with the annotation, when whatever handles the load balancer's IP
/// ignores ipMode.
fn force_the_hairpin(lb: &LoadBalancerFacts, ignoring: &IpModeSupport) -> String {
    format!(
        "force the hairpin: annotate Service {} `hairpin.io/proxy-protocol: v1` or `v2` \
         (the version its load balancer sends{}); hairpin then proxies it whatever its \
         ipMode says (its DNS cure), because {}. Or upgrade it to a version that honours \
         ipMode (kube-proxy 1.30, Cilium 1.17 but not 1.18.0, Calico 3.29 eBPF, Antrea 2.0, \
         kube-router 2.9)",
        lb.service,
        lb.proxy_protocol
            .as_deref()
            .map_or(String::new(), |v| format!(": {v}")),
        ignoring.describe()
    )
}

/// The provider's native `ipMode: Proxy`, with what this cluster still lacks for it.
fn native_ip_mode(
    native: &str,
    ignoring: Option<&IpModeSupport>,
    version: Option<(u32, u32)>,
) -> String {
    let native = match ignoring {
        Some(ignoring) => format!(
            "{native} (effective only once ipMode is honoured: {})",
            ignoring.describe()
        ),
        None => native.to_owned(),
    };
    match version {
        Some((major, minor)) if (major, minor) >= (1, 30) => {
            format!("native ipMode (Kubernetes {major}.{minor} supports it): {native}")
        }
        Some((major, minor)) => format!(
            "native ipMode, after upgrading Kubernetes from {major}.{minor} to 1.30 or later: {native}"
        ),
        None => format!("native ipMode (needs Kubernetes 1.30 or later): {native}"),
    }
}

/// `out`, then every provider's native and hostname fixes, then hairpin: the provider is
/// not known.
fn without_provider(mut out: Vec<String>, hairpin: String) -> Vec<String> {
    out.extend([
        "native: if your cloud controller sets `status.loadBalancer.ingress[].ipMode: Proxy` \
         (Kubernetes 1.30+; Hetzner and OpenStack do on their own, Oracle with \
         `oci.oraclecloud.com/ingress-ip-mode: \"proxy\"`, STACKIT with \
         `lb.stackit.cloud/ip-mode-proxy: \"true\"`), in-cluster traffic goes through the \
         load balancer"
            .into(),
        "provider hostname annotation, which publishes a hostname instead of the IP: \
         DigitalOcean `service.beta.kubernetes.io/do-loadbalancer-hostname`, Hetzner \
         `load-balancer.hetzner.cloud/hostname`, OpenStack `loadbalancer.openstack.org/hostname`, \
         Scaleway `service.beta.kubernetes.io/scw-loadbalancer-use-hostname: \"true\"`, Linode \
         `service.beta.kubernetes.io/linode-loadbalancer-hostname-only-ingress: \"true\"`, \
         cloudscale.ch `k8s.cloudscale.ch/loadbalancer-force-hostname`"
            .into(),
        hairpin,
    ]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::Provider;

    fn answered() -> ProbeOutcome {
        ProbeOutcome::Answered {
            first_line: "HTTP/1.1 200 OK".into(),
        }
    }

    fn network(plain: ProbeOutcome, v1: ProbeOutcome, v2: ProbeOutcome) -> NetworkChecks {
        NetworkChecks {
            resolution: Resolution::Resolved {
                addresses: vec!["198.51.100.10".parse().unwrap()],
            },
            hosts_file: None,
            probes: Some(Probes {
                address: "198.51.100.10:80".parse().unwrap(),
                plain,
                proxy_v1: v1,
                proxy_v2: v2,
            }),
        }
    }

    fn not_checked() -> ClusterView {
        ClusterView::NotChecked {
            reason: "no kubeconfig".into(),
        }
    }

    fn lb(provider: Option<Provider>, needs: bool) -> LoadBalancerFacts {
        LoadBalancerFacts {
            service: "ingress-nginx/ingress-nginx-controller".into(),
            provider,
            proxy_protocol: Some("v1".into()),
            ingress: vec![LbIngress {
                ip: Some("198.51.100.10".into()),
                hostname: None,
                ip_mode: Some("VIP".into()),
            }],
            external_traffic_policy: Some("Cluster".into()),
            needs_hairpin: needs,
            not_needed_reason: (!needs).then(|| "ipMode is Proxy".into()),
            receiver: None,
            mismatch: None,
        }
    }

    fn checked(lb: LoadBalancerFacts, version: (u32, u32)) -> ClusterView {
        ClusterView::Checked(Box::new(ClusterFacts {
            kubernetes_version: Some(version),
            load_balancer: Some(lb),
            ..ClusterFacts::default()
        }))
    }

    #[test]
    fn plain_fails_but_proxy_works_is_the_hairpin_signature() {
        let verdict = diagnose(
            &network(ProbeOutcome::EmptyReply, answered(), answered()),
            &not_checked(),
            Vantage::Machine,
        );
        assert_eq!(verdict.status, Status::Broken);
        let cause = verdict.cause.unwrap();
        assert!(cause.contains("hairpin short-circuit"), "{cause}");
        assert!(cause.contains("empty reply"), "{cause}");
        assert_eq!(verdict.fixes.len(), 3, "{:?}", verdict.fixes);
        assert!(verdict.fixes[2].contains("install hairpin"));
        assert!(
            verdict
                .notes
                .iter()
                .any(|n| n.contains("cluster checks skipped"))
        );
        assert!(
            verdict
                .notes
                .iter()
                .any(|n| n.contains("node or pod address"))
        );
        // A reset is the same signature, and so is v2 alone.
        let reset = diagnose(
            &network(ProbeOutcome::Reset, ProbeOutcome::EmptyReply, answered()),
            &not_checked(),
            Vantage::Pod,
        );
        assert_eq!(reset.status, Status::Broken);
        assert!(reset.cause.unwrap().contains("reset"));
    }

    #[test]
    fn cilium_versions_and_kube_proxy_replacement_are_read_as_cilium_documents_them() {
        let facts = CiliumFacts::new(
            Some("registry.local:5000/cilium/cilium:v1.16.5@sha256:0123"),
            Some("strict"),
        );
        assert_eq!(facts.version.as_deref(), Some("v1.16.5"));
        assert_eq!(facts.replaces_kube_proxy, Some(true));
        assert_eq!(facts.ignores_ip_mode, Some(true));
        for (image, ignores) in [
            ("quay.io/cilium/cilium:v1.17.0", Some(false)),
            ("quay.io/cilium/cilium:v1.18.0", Some(true)),
            ("quay.io/cilium/cilium:1.18.1", Some(false)),
            ("quay.io/cilium/cilium:v1.19.0-rc.1", Some(false)),
            ("quay.io/cilium/cilium:latest", None),
            ("quay.io/cilium/cilium@sha256:0123", None),
        ] {
            assert_eq!(
                CiliumFacts::new(Some(image), None).ignores_ip_mode,
                ignores,
                "{image}"
            );
        }
        for (value, replaces) in [
            (Some("true"), Some(true)),
            (Some("false"), Some(false)),
            (Some("disabled"), Some(false)),
            (None, Some(false)),
            (Some("partial"), None),
        ] {
            assert_eq!(
                CiliumFacts::new(None, value).replaces_kube_proxy,
                replaces,
                "{value:?}"
            );
        }
    }

    #[test]
    fn plain_works_is_ok() {
        let verdict = diagnose(
            &network(answered(), ProbeOutcome::Reset, ProbeOutcome::Reset),
            &not_checked(),
            Vantage::Pod,
        );
        assert_eq!(verdict.status, Status::Ok);
        assert!(verdict.cause.is_none() && verdict.fixes.is_empty());
    }

    #[test]
    fn the_node_agent_entry_is_named_when_ok() {
        let mut checks = network(answered(), answered(), answered());
        checks.hosts_file = Some(HostsFileNote {
            path: "/etc/hosts".into(),
            addresses: vec!["10.96.0.9".parse().unwrap()],
            in_hairpin_block: true,
            unreadable: None,
        });
        let verdict = diagnose(&checks, &not_checked(), Vantage::Machine);
        assert_eq!(verdict.status, Status::Ok);
        assert!(
            verdict.summary.contains("hairpin is in place"),
            "{}",
            verdict.summary
        );
        assert!(verdict.notes.iter().any(|n| n.contains("node agent")));
        assert!(!verdict.notes.iter().any(|n| n.contains("get 400")));
        // Through hairpin's proxy our own PROXY header arrives as the request line: 400.
        checks.probes.as_mut().unwrap().proxy_v1 = ProbeOutcome::Answered {
            first_line: "HTTP/1.1 400 Bad Request".into(),
        };
        let verdict = diagnose(&checks, &not_checked(), Vantage::Machine);
        assert!(
            verdict.notes.iter().any(|n| n.contains("get 400")),
            "{:?}",
            verdict.notes
        );
    }

    #[test]
    fn nothing_answers_is_broken_but_not_called_a_hairpin() {
        let refused = ProbeOutcome::ConnectFailed {
            error: "Connection refused (os error 111)".into(),
        };
        let verdict = diagnose(
            &network(refused.clone(), refused.clone(), refused),
            &not_checked(),
            Vantage::Pod,
        );
        assert_eq!(verdict.status, Status::Broken);
        let cause = verdict.cause.unwrap();
        assert!(
            cause.contains("not the hairpin signature") && cause.contains("refused"),
            "{cause}"
        );
        assert!(verdict.fixes.is_empty());

        let silent = diagnose(
            &network(
                ProbeOutcome::Timeout,
                ProbeOutcome::Timeout,
                ProbeOutcome::Timeout,
            ),
            &not_checked(),
            Vantage::Pod,
        );
        assert!(silent.cause.unwrap().contains("accepts connections"));
    }

    #[test]
    fn unresolvable_host_is_broken() {
        let checks = NetworkChecks {
            resolution: Resolution::Failed {
                error: "Name or service not known".into(),
            },
            hosts_file: None,
            probes: None,
        };
        let verdict = diagnose(&checks, &not_checked(), Vantage::Pod);
        assert_eq!(verdict.status, Status::Broken);
        assert!(verdict.cause.unwrap().contains("Name or service not known"));
    }

    #[test]
    fn a_load_balancer_that_needs_no_hairpin_is_not_needed() {
        let verdict = diagnose(
            &network(
                answered(),
                ProbeOutcome::EmptyReply,
                ProbeOutcome::EmptyReply,
            ),
            &checked(lb(Some(Provider::Hetzner), false), (1, 31)),
            Vantage::Pod,
        );
        assert_eq!(verdict.status, Status::NotNeeded);
        assert!(
            verdict.summary.contains("ipMode is Proxy"),
            "{}",
            verdict.summary
        );
    }

    #[test]
    fn from_a_laptop_the_cluster_view_reveals_the_bypass() {
        let verdict = diagnose(
            &network(
                answered(),
                ProbeOutcome::EmptyReply,
                ProbeOutcome::EmptyReply,
            ),
            &checked(lb(Some(Provider::DigitalOcean), true), (1, 31)),
            Vantage::Machine,
        );
        assert_eq!(verdict.status, Status::Broken);
        assert!(
            verdict
                .cause
                .unwrap()
                .contains("198.51.100.10 (ipMode VIP)")
        );
        assert!(
            verdict.fixes[0].contains("do-loadbalancer-hostname"),
            "{:?}",
            verdict.fixes
        );
        // In a pod, a plain answer is the in-cluster path itself.
        let in_pod = diagnose(
            &network(
                answered(),
                ProbeOutcome::EmptyReply,
                ProbeOutcome::EmptyReply,
            ),
            &checked(lb(Some(Provider::DigitalOcean), true), (1, 31)),
            Vantage::Pod,
        );
        assert_eq!(in_pod.status, Status::Ok);
    }

    #[test]
    fn fixes_prefer_native_ip_mode_where_the_version_allows() {
        let new = fixes(&checked(lb(Some(Provider::Hetzner), true), (1, 30)));
        assert!(
            new[0].starts_with("native ipMode (Kubernetes 1.30"),
            "{new:?}"
        );
        assert!(
            new[1].contains("load-balancer.hetzner.cloud/hostname"),
            "{new:?}"
        );
        assert!(new[2].contains("install hairpin"));
        let old = fixes(&checked(lb(Some(Provider::Hetzner), true), (1, 29)));
        assert!(
            old[0].contains("after upgrading Kubernetes from 1.29"),
            "{old:?}"
        );
        let linode = fixes(&checked(lb(Some(Provider::Linode), true), (1, 32)));
        assert_eq!(linode.len(), 2, "{linode:?}");
        assert!(linode[0].contains("hostname-only-ingress: true"));
        let aws = fixes(&checked(lb(Some(Provider::Aws), true), (1, 32)));
        assert_eq!(aws.len(), 1);
    }

    #[test]
    fn dns_problems_are_named_in_the_cause() {
        let mut facts = ClusterFacts {
            kubernetes_version: Some((1, 28)),
            load_balancer: Some(lb(None, true)),
            ..ClusterFacts::default()
        };
        facts.dns.host_in_block = true;
        facts.dns.reload_plugin = Some(false);
        facts.dns.node_local_dns = true;
        facts.hairpin.services = vec!["hairpin/hairpin-abc".into()];
        let verdict = diagnose(
            &network(ProbeOutcome::EmptyReply, answered(), answered()),
            &ClusterView::Checked(Box::new(facts)),
            Vantage::Pod,
        );
        let cause = verdict.cause.unwrap();
        assert!(cause.contains("no `reload` plugin"), "{cause}");
        assert!(cause.contains("node-local-dns"), "{cause}");
        assert!(cause.contains("no proxy endpoint is ready"), "{cause}");
    }

    #[test]
    fn local_traffic_policy_gets_its_trade_offs_noted() {
        let mut balancer = lb(Some(Provider::Scaleway), true);
        balancer.external_traffic_policy = Some("Local".into());
        let verdict = diagnose(
            &network(ProbeOutcome::EmptyReply, answered(), answered()),
            &checked(balancer, (1, 31)),
            Vantage::Pod,
        );
        assert!(
            verdict
                .notes
                .iter()
                .any(|n| n.contains("externalTrafficPolicy: Local"))
        );
    }

    const MISMATCH: &str = "BROKEN for clients outside the cluster too: the load balancer sends a PROXY header (load-balancer.hetzner.cloud/uses-proxyprotocol=true) but ingress-nginx Deployment ingress-nginx/ingress-nginx-controller: PROXY off by use-proxy-protocol not set (default false) (ConfigMap ingress-nginx/ingress-nginx-controller); hairpin changes nothing for this load balancer. Fix: turn the PROXY protocol on in the receiver, or off on the load balancer";

    /// The doctor's three receiver verdicts (issue 31): a mismatch is BROKEN for everyone,
    /// whatever the probes from here say; a receiver that requires the header gets the usual
    /// hairpin diagnosis, naming the receiver; one that accepts a missing header is answered.
    #[test]
    fn a_receiver_mismatch_is_broken_for_everyone_and_names_both_settings_and_the_fix() {
        let mut balancer = lb(Some(Provider::Hetzner), false);
        balancer.not_needed_reason = Some("the load balancer and its receiver disagree".into());
        balancer.mismatch = Some(MISMATCH.into());
        let verdict = diagnose(
            &network(answered(), answered(), answered()),
            &checked(balancer, (1, 31)),
            Vantage::Pod,
        );
        assert_eq!(verdict.status, Status::Broken);
        assert!(
            verdict.summary.contains("outside the cluster too"),
            "{}",
            verdict.summary
        );
        let cause = verdict.cause.unwrap();
        assert!(cause.contains("uses-proxyprotocol=true"), "{cause}");
        assert!(cause.contains("PROXY off by use-proxy-protocol"), "{cause}");
        assert_eq!(
            verdict.fixes,
            [
                "turn the PROXY protocol on in the receiver, or off on the load balancer; hairpin changes nothing for this load balancer until they agree"
            ]
        );
    }

    #[test]
    fn a_receiver_that_requires_the_header_gets_the_hairpin_diagnosis_naming_it() {
        let mut balancer = lb(None, true);
        balancer.receiver = Some("ingress-nginx Deployment ingress-nginx/ingress-nginx-controller: PROXY required by use-proxy-protocol: \"true\" (ConfigMap ingress-nginx/ingress-nginx-controller)".into());
        let verdict = diagnose(
            &network(ProbeOutcome::EmptyReply, answered(), answered()),
            &checked(balancer, (1, 31)),
            Vantage::Pod,
        );
        assert_eq!(verdict.status, Status::Broken);
        assert!(verdict.cause.unwrap().contains("hairpin short-circuit"));
        assert!(
            verdict
                .notes
                .iter()
                .any(|n| n.starts_with("receiver: ingress-nginx Deployment")),
            "{:?}",
            verdict.notes
        );
    }

    #[test]
    fn a_receiver_that_accepts_a_missing_header_is_answered() {
        let mut balancer = lb(None, false);
        balancer.not_needed_reason =
            Some("the receiver accepts connections without a PROXY header".into());
        balancer.receiver = Some("Envoy Gateway Deployment envoy-gateway-system/envoy: PROXY optional by proxyProtocol: {optional: true} (ClientTrafficPolicy default/proxy-protocol)".into());
        let verdict = diagnose(
            &network(answered(), answered(), answered()),
            &checked(balancer, (1, 31)),
            Vantage::Pod,
        );
        assert_ne!(verdict.status, Status::Broken, "{verdict:?}");
        assert!(
            verdict.notes.iter().any(|n| n.contains("PROXY optional")),
            "{:?}",
            verdict.notes
        );
    }
}
