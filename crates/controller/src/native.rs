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
//! `writes`, `put_back` and `verdicts` (the curer acting on it: status writes and the record;
//! put-backs kept at until applied; probe tasks and their verdicts), `memory` (what the cure
//! keeps between reconciles, part of the loop's memory), `sensors` (the Nodes' and the node
//! agents' watches and the probe tasks, started by the loop, read into the memory), and this
//! module (the executor of one reconcile, over the memory, and `apply`).

mod agent;
mod memory;
mod node_reports;
mod probe;
mod put_back;
mod sensors;
mod state;
mod status;
mod verdicts;
mod writes;

use std::time::{Duration, Instant};

use hairpin_planner::native::{IpModeWas, NativeAction, NativeRecord, ProbeState};
use hairpin_planner::{ClusterSnapshot, ObjectRef, Plan, PlannerConfig};

pub use agent::{NodeProber, NodeProberOptions};
pub(crate) use memory::NativeMemory;
pub use probe::{
    Attempt, Baseline, Fingerprints, Observer, ProbeTarget, ProbeVerdict, Proof, baseline,
    from_receiver, probe_once, prove, prove_from, targets,
};
pub(crate) use sensors::NativeSensors;
pub use state::backoff;
use state::{Now, earliest};
pub use status::{Written, restore_entry, restore_ip_modes, with_ip_modes, write_ip_modes};

use crate::Error;
use crate::context::Context;
use crate::fight::{FightParams, Fights};
use crate::report::{object_ref, reason};

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
    NativeRecord::read(snapshot, planner)
        .is_ok_and(|record| !record.load_balancers.is_empty() || !plan.native_actions.is_empty())
}

/// The native cure's executor for one reconcile: its state is the loop's memory
/// ([`NativeMemory`], and the write fights over `ipMode`), its probes run under the loop's
/// sensors ([`NativeSensors`]).
pub(crate) struct NativeCurer<'a> {
    /// The loop's client, Events, metrics, planner settings and change signal.
    ctx: &'a Context,
    params: &'a NativeParams,
    /// What the cure remembers between reconciles.
    mem: &'a mut NativeMemory,
    /// The loop's write fights (those over `ipMode` among them).
    fights: &'a mut Fights,
    /// The probes running.
    probes: &'a mut NativeSensors,
}

/// How long a snapshot may lag behind the record this instance wrote before it is trusted
/// all the same (someone else changed the record meanwhile: uninstall deleted it).
const RECORD_CACHE_LAG: Duration = Duration::from_secs(5);

impl<'a> NativeCurer<'a> {
    /// The executor of one reconcile, over the loop's memory and sensors.
    pub(crate) fn new(
        ctx: &'a Context,
        params: &'a NativeParams,
        mem: &'a mut NativeMemory,
        fights: &'a mut Fights,
        probes: &'a mut NativeSensors,
    ) -> Self {
        Self {
            ctx,
            params,
            mem,
            fights,
            probes,
        }
    }

    /// An Event on the load balancer Service `service` (uid `uid`).
    async fn on_service(
        &self,
        service: &ObjectRef,
        uid: &str,
        warning: bool,
        reason: &'static str,
        note: String,
    ) {
        let regarding = object_ref(
            "Service",
            &service.namespace,
            &service.name,
            Some(uid.to_owned()),
        );
        self.ctx
            .events
            .publish(&regarding, warning, reason, note)
            .await;
    }

    /// The API server's `gitVersion`, read again when older than `version_every` (empty when
    /// it cannot be read).
    async fn server_version(&mut self) -> String {
        if let Some((version, at)) = &self.mem.server_version
            && at.elapsed() < self.params.version_every
        {
            return version.clone();
        }
        let version = match self.ctx.client.apiserver_version().await {
            Ok(info) => info.git_version,
            Err(err) => {
                tracing::debug!(error = %err, "cannot read the API server's version");
                return self
                    .mem
                    .server_version
                    .as_ref()
                    .map(|(v, _)| v.clone())
                    .unwrap_or_default();
            }
        };
        self.mem.server_version = Some((version.clone(), Instant::now()));
        version
    }

    /// The data plane now: the kube-proxy and CNI DaemonSets' generations
    /// ([`hairpin_planner::native::data_plane`]), the Nodes' kubelet and kube-proxy versions
    /// and the API server's version (`server`). The Nodes are watched by the loop's sensors
    /// from the first native cure on; the data plane is left as it was until they are listed
    /// (it matters only to a cure).
    fn update_data_plane(&mut self, snapshot: &ClusterSnapshot, server: &str) {
        let Some(nodes) = self.mem.nodes.as_deref() else {
            return;
        };
        let mut parts = vec![
            hairpin_planner::native::data_plane(snapshot),
            hairpin_planner::nodes::kube_proxy_config(snapshot),
        ];
        if !nodes.is_empty() {
            parts.push(format!("nodes {nodes}"));
        }
        if !server.is_empty() {
            parts.push(format!("apiserver@{server}"));
        }
        parts.retain(|p| !p.is_empty());
        let data_plane = parts.join("; ");
        if data_plane != self.mem.data_plane.0 {
            self.mem.data_plane = (data_plane, Instant::now());
        }
    }

    /// Whether the Nodes were listed (or could not be): until then no new cure is tried, so
    /// that the first plan that could try one has seen every Node through the gate.
    fn nodes_listed(&self) -> bool {
        self.mem.nodes.is_some()
    }

    /// The plan's status writes, the probes' verdicts and the record. Returns when to look
    /// again (a probe running, a failed cure due for another try).
    pub(crate) async fn apply(
        &mut self,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
    ) -> Result<Option<Instant>, Error> {
        let Ok(before) = NativeRecord::read(snapshot, &self.ctx.planner) else {
            // The plan warned; nothing is written while the record is not hairpin's.
            return Ok(None);
        };
        if let Some((written, at)) = &self.mem.written {
            if *written != before && at.elapsed() < RECORD_CACHE_LAG {
                // The cache has not seen this instance's own last record yet: no status write
                // from a plan made without it; look again shortly.
                return Ok(Some(Instant::now() + self.params.interval));
            }
            self.mem.written = None;
        }
        let mut record = before.clone();
        let native = !before.load_balancers.is_empty() || !plan.native_actions.is_empty();
        // The API server's version matters only to a cure recorded or planned: without one,
        // no `/version` read.
        let server = if native {
            self.server_version().await
        } else {
            String::new()
        };
        self.update_data_plane(snapshot, &server);
        // Cures proven before (by another instance): probed again below, as `Proof::Again`.
        let mut distrusted = Vec::new();
        if !self.mem.started {
            self.mem.started = true;
            distrusted = state::distrust(plan, &mut record, &Now::read());
            for key in &distrusted {
                tracing::info!(service = %key, "a proven native cure is probed again at the controller's start before it is trusted");
            }
        }
        self.take_verdicts(&mut record, plan, snapshot).await?;
        let reports_due = self.take_node_reports(&mut record, plan, snapshot).await;
        let mut requeue = state::mark_due(
            self.params,
            &self.mem.data_plane.0,
            plan,
            &mut record,
            &server,
            &Now::read(),
        );
        let listed = self.nodes_listed();
        for action in &plan.native_actions {
            if !listed && matches!(action, NativeAction::SetProxy { proven: false, .. }) {
                // A new cure waits for the Nodes' gate; their first list wakes the loop.
                tracing::debug!("a native cure waits for the Nodes to be listed");
                requeue = earliest(requeue, Some(Instant::now() + self.params.interval));
                continue;
            }
            self.act(plan, snapshot, &mut record, action).await?;
        }
        let data_plane = (self.mem.data_plane.0.as_str(), self.mem.data_plane.1);
        let (due, settling) =
            state::reprobe_due(self.params, data_plane, plan, &record, &Now::read());
        for (service, entry) in due {
            tracing::debug!(service = %service, state = ?entry.state, "probing a native cure");
            let again =
                entry.state == ProbeState::Proven || distrusted.contains(&service.to_string());
            let proof = if again {
                Proof::Again
            } else {
                Proof::AfterWrite
            };
            let receiver = entry.probe.receiver.clone();
            self.start_probe(plan, &service, &entry.uid, &entry.original, proof, receiver);
        }
        self.write_record(&record, &before).await?;
        if !self.probes.running.is_empty() {
            requeue = Some(Instant::now() + self.params.interval);
        } else {
            requeue = earliest(requeue, settling);
        }
        Ok(earliest(
            earliest(requeue, reports_due),
            self.next_put_back(),
        ))
    }

    /// One status write of the plan.
    async fn act(
        &mut self,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
        record: &mut NativeRecord,
        action: &NativeAction,
    ) -> Result<(), Error> {
        match action {
            NativeAction::SetProxy {
                service,
                uid,
                ips,
                proven,
            } => {
                self.set_proxy(plan, snapshot, record, service, uid, ips, *proven)
                    .await
            }
            NativeAction::Restore {
                service,
                uid,
                original,
                reason,
            } => {
                let key = service.to_string();
                self.probes.stop(&key);
                let mut applied = true;
                if let Some(uid) = uid {
                    applied = self.put_back(record, service, uid, original, reason).await;
                }
                // A restore that did not apply keeps the entry: tried again, backing off.
                if applied {
                    record.load_balancers.remove(&key);
                }
                Ok(())
            }
            NativeAction::PutBack {
                service,
                uid,
                original,
                reason,
            } => {
                self.probes.stop(&service.to_string());
                if self.put_back_held(&service.to_string()) {
                    return Ok(());
                }
                self.put_back(record, service, uid, original, reason).await;
                Ok(())
            }
            NativeAction::Forget {
                service,
                uid,
                writer,
                reason,
            } => {
                tracing::warn!(service = %service, writer = %writer, "another writer set ipMode: Proxy itself; hairpin stepped back");
                self.probes.stop(&service.to_string());
                record.load_balancers.remove(&service.to_string());
                self.on_service(
                    service,
                    uid,
                    false,
                    reason::IP_MODE_HANDED_OVER,
                    reason.clone(),
                )
                .await;
                Ok(())
            }
        }
    }
}
