//! The native cure's writes: `ipMode: Proxy` on a load balancer Service's status (the status
//! subresource, replaced with the resourceVersion just read, only the `ipMode` of the IPs the
//! plan names changed, and read back from the API server's answer), the record of what
//! hairpin did in its `hairpin-native` ConfigMap (written *before* each status write, so that
//! uninstall can always put the status back), and the probes ([`probe`]) that prove the
//! problem before the write and the cure after it.
//!
//! A new attempt first probes every PROXY port without a header ([`baseline`]): answered on
//! every attempt, the load balancer needs no cure here (`not-needed`, nothing written);
//! answered on some, an answer later would prove nothing (`failed`, nothing written). Only
//! when every attempt went unanswered is `ipMode: Proxy` written. The API server's answer
//! must hold it (an API server older than 1.30 or with the gate `LoadBalancerIPMode` off drops
//! it: `unsupported`, with its version, not tried again until that changes). Then the proof
//! ([`prove`]): every port answered several times in a row through the load balancer within
//! the deadline, the record says `proven` and the next plan drops the load balancer's DNS
//! rules (make before break). Not proven (or a definite failure repeated, which ends the probe
//! at once): the status is put back at once, the record says `failed` with the outcome per
//! port, and DNS stays; the cure is tried again after `retry`, doubling with each failure up
//! to `retry_cap`, or at once when kube-proxy or the CNI changed.
//!
//! A proven cure is not trusted by a controller that did not prove it: at start (and on a new
//! leader) it goes back to `probing` (DNS rules back) and is probed again; it is also probed
//! again on the schedule and after a data-plane change. A writer that keeps removing the
//! `ipMode` (MetalLB, an old cloud controller) is detected like a write fight: named in an
//! Event, backed off, and the load balancer stays on the DNS cure.
//!
//! Per IP: an IP no attempt of the baseline reached (an IPv6 address with no route from
//! here) is left out and recorded as skipped; the others are cured, the names stay on dns.
//!
//! The parts: `probe` (connect, HTTP, TLS ClientHello; the baseline and the proof),
//! `status` (the status writes, read back; put back; uninstall's hand-over), `state` (the
//! state machine, pure: record, plan, data plane, verdicts and a clock in, next states out),
//! `decide` (every step of the cure, pure: the record's changes, the writes, put-backs and
//! retries, the probes, every Event and its text, every metric; what a write's answer leads
//! to; and their order in a reconcile, its driver `Drive`), `act` (the executor: it executes
//! one step and answers, nothing else), `run` (the loop that alternates the two), `memory`
//! (what the cure keeps between reconciles, part of the loop's memory), `sensors` (the Nodes'
//! and the node agents' watches and the probe tasks, started by the loop, read into the
//! memory), and this module (the settings).

mod act;
mod agent;
mod decide;
mod memory;
mod probe;
mod run;
mod sensors;
mod state;
mod status;

use std::time::Duration;

use hairpin_planner::native::{IpModeWas, NativeRecord};
use hairpin_planner::{ClusterSnapshot, Plan, PlannerConfig};

pub(crate) use act::NativeExecutor;
pub use agent::{NodeProber, NodeProberOptions};
pub(crate) use memory::NativeMemory;
pub use probe::{
    Attempt, Baseline, Fingerprints, Observer, ProbeTarget, ProbeVerdict, Proof, baseline,
    from_receiver, probe_once, prove, prove_from, targets,
};
pub(crate) use run::NativeRun;
pub(crate) use sensors::NativeSensors;
pub use state::backoff;
pub use status::{Written, restore_entry, restore_ip_modes, with_ip_modes, write_ip_modes};

use crate::fight::{FightParams, Fights};

/// Settings of the native cure's probe.
#[derive(Clone, Debug)]
pub struct NativeParams {
    /// How long after setting `ipMode: Proxy` the probe may take to succeed (kube-proxy
    /// follows a status change within its sync period, 1 s by default).
    pub deadline: Duration,
    /// Between two probe rounds (a quarter of it between the baseline's rounds, and once every
    /// port answers: the answers that prove the cure follow in a short window).
    pub interval: Duration,
    /// One connection's connect and answer timeout.
    pub timeout: Duration,
    /// After a failed probe, how long before the cure is tried again.
    pub retry: Duration,
    /// How often a proven cure is probed again (a kube-proxy or CNI upgrade may stop
    /// honouring `ipMode`): a failed re-probe puts `ipMode` back and brings the DNS cure back.
    pub reprobe: Duration,
    /// After the kube-proxy or CNI DaemonSet changed ([`hairpin_planner::native::data_plane`]),
    /// how long before a proven cure is probed again: the time for the new pods to roll out.
    pub settle: Duration,
    /// Answers in a row on every port that prove the cure; also the attempts per port of
    /// the probe without a header before any write, and the definite failures in a row
    /// (refused, unreachable) that end a proof early.
    pub answers: u32,
    /// The longest wait between two tries of a cure that keeps failing (the wait starts at
    /// `retry` and doubles with each failure).
    pub retry_cap: Duration,
    /// How often the API server's version is read again: it keys `unsupported` verdicts, and
    /// a k3s or RKE2 server embeds its kube-proxy (part of the data plane).
    pub version_every: Duration,
    /// Where the node agents prove the cure from every node ([`hairpin_planner::node_probes`]):
    /// how old a node's report may be before it vouches for nothing. `None`: no node agent
    /// reports (the controller's probe and the Nodes' gate decide).
    pub node_reports: Option<Duration>,
    /// After a node's agent failed a proven cure (the DNS rules come back), how long they
    /// have to reach every pod (the kubelet's ConfigMap sync, CoreDNS's `reload` and cache)
    /// before `ipMode` is put back: until then `Proxy` still serves the pods of the nodes that
    /// honour it, and the failing node's are short-circuited either way.
    pub dns_settle: Duration,
}

impl Default for NativeParams {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(10),
            interval: Duration::from_millis(200),
            timeout: Duration::from_secs(1),
            retry: Duration::from_secs(600),
            reprobe: Duration::from_secs(1800),
            settle: Duration::from_secs(120),
            answers: 3,
            retry_cap: Duration::from_secs(24 * 3600),
            version_every: Duration::from_secs(60),
            node_reports: None,
            dns_settle: Duration::from_secs(60),
        }
    }
}

/// A probe's result, waiting for the next reconcile.
enum Finished {
    /// Before any write, for the `ips` of the plan's `SetProxy`.
    Baseline {
        uid: String,
        ips: Vec<IpModeWas>,
        baseline: Baseline,
    },
    /// After the write.
    Proof { uid: String, verdict: ProbeVerdict },
}

/// The longest window within which `--fight-threshold` reverts of `ipMode: Proxy` make a
/// fight (`--fight-window` when shorter): reverts further apart are a cloud controller's
/// occasional rebuilds, re-asserted each time, and no longer counted.
const NATIVE_FIGHT_WINDOW: Duration = Duration::from_secs(30);

/// The loop's write fights with the native cure's settings for `ipMode` (its targets start
/// with [`state::FIGHT_PREFIX`]): a cloud controller rebuilds the status on every sync of the
/// Service (a Helm upgrade changing an annotation): rare, re-asserted at once. Only reverts
/// repeated within a short window (MetalLB rewrites it on every event) are a fight; older
/// ones decay.
pub(crate) fn with_ip_mode_fights(fights: Fights, fight: &FightParams) -> Fights {
    let params = FightParams {
        window: fight.window.min(NATIVE_FIGHT_WINDOW),
        ..fight.clone()
    };
    fights.with_prefix(state::FIGHT_PREFIX, params)
}

/// How long a problem shown by the baseline is good for the write that follows it.
const SHOWN_FOR: Duration = Duration::from_secs(60);

/// Whether the native cure has anything to do: a record hairpin can read that holds a cure,
/// or a plan that proposes one (the Nodes are watched from then on).
pub(crate) fn wanted(plan: &Plan, snapshot: &ClusterSnapshot, planner: &PlannerConfig) -> bool {
    NativeRecord::read(snapshot, planner).is_ok_and(|record| decide::native(&record, plan))
}

/// How long a snapshot may lag behind the record this instance wrote before it is trusted
/// all the same (someone else changed the record meanwhile: uninstall deleted it).
const RECORD_CACHE_LAG: Duration = Duration::from_secs(5);
