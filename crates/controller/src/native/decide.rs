//! The native cure decided without a client: from the record, the plan, what the cure
//! remembers ([`NativeMemory`]), the write fights over `ipMode`, the API server's version and
//! a clock passed in ([`Now`]), every step of the cure ([`Step`]): each record change, each
//! `ipMode` write and put-back, each probe started or stopped, each Event and its text, each
//! metric. What a write found ([`set::SetOutcome`], [`put_back::Restored`]) is folded in by
//! [`set::after`] and [`put_back::after`], pure too, which choose what follows from it.
//!
//! One reconcile goes through [`begin`] (data plane, distrust at the start, the probes'
//! verdicts), [`node_reports`], [`state::mark_due`], [`action`] for each of the plan's native
//! actions, and [`reprobes`]; each phase's steps are executed before the next is decided, so
//! that a put-back's answer is known to the phases after it. That order, and what each
//! write's answer leads to, is kept by [`Drive`], pure as well: it hands out one step at a
//! time and takes each answer back as data ([`Answer`]); the executor
//! ([`super::NativeExecutor`]) only executes the steps.

use std::time::Instant;

use hairpin_planner::native::{IpModeWas, NativeAction, NativeRecord, ProbeState};
use hairpin_planner::{ClusterSnapshot, ObjectRef, Plan};

use super::memory::NativeMemory;
use super::probe::{Fingerprints, ProbeTarget, Proof, targets};
use super::state::{self, Now, earliest};
use super::{NativeParams, RECORD_CACHE_LAG};
use crate::fight::Fights;
use crate::report::reason;

mod drive;
pub(crate) mod put_back;
pub(crate) mod set;
mod verdicts;

pub(crate) use drive::{Answer, Drive, Next, SetAnswer};
pub(crate) use put_back::{PutBack, Restored};
pub(crate) use set::{SetOutcome, SetProxy};
pub(crate) use verdicts::{node_reports, take_verdicts};

/// One step of the native cure, executed in order. Those that ask for an answer
/// ([`Answer`]): [`Step::ReadVersion`], [`Step::WriteRecord`], [`Step::SetProxy`],
/// [`Step::PutBack`] and [`Step::ProbesRunning`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Step {
    /// An Event on the load balancer Service `service` (uid `uid`).
    Publish {
        service: ObjectRef,
        uid: String,
        warning: bool,
        reason: &'static str,
        note: String,
    },
    /// A metric moves.
    Metric(Metric),
    /// The probe running for this `namespace/name` stops.
    StopProbe(String),
    /// The probe without a header before any write ([`super::baseline`]), in a task, of
    /// `targets` (`None`: the plan does not name the load balancer, nothing to probe).
    Baseline {
        service: ObjectRef,
        uid: String,
        ips: Vec<IpModeWas>,
        targets: Option<Vec<ProbeTarget>>,
    },
    /// The proof ([`super::prove_from`]), in a task, against what answered through the
    /// receiver's own path before (`receiver`).
    Prove {
        service: ObjectRef,
        uid: String,
        proof: Proof,
        receiver: Fingerprints,
        /// As [`Step::Baseline`]'s.
        targets: Option<Vec<ProbeTarget>>,
    },
    /// `ipMode: Proxy` on the status, read back ([`Answer::Set`]); [`Drive`] has the record
    /// (`SetProxy::record`) written first, and folds the answer in by [`set::after`].
    SetProxy(SetProxy),
    /// `ipMode` put back as it was, read back ([`Answer::PutBack`]); folded in by
    /// [`put_back::after`].
    PutBack(PutBack),
    /// The API server's `gitVersion` read ([`Answer::Version`]).
    ReadVersion,
    /// The record written to hairpin's ConfigMap ([`Answer::RecordWritten`]; an empty record
    /// deletes its key).
    WriteRecord(NativeRecord),
    /// Whether any probe still runs ([`Answer::ProbesRunning`]), for when to look again.
    ProbesRunning,
}

/// The native cure's metrics.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Metric {
    /// `native_verdicts` of this verdict.
    Verdict(&'static str),
    /// `ip_mode_writes` of this kind (`set`, `reassert`, `restore`).
    IpModeWrite(&'static str),
    /// `ip_mode_reverts` by this writer.
    Revert(String),
    /// `ip_mode_reassert_window_seconds` observes this.
    ReassertWindow(f64),
    /// `ip_mode_put_backs_pending` is set to this.
    PutBacksPending(i64),
}

/// What the native cure's decisions read, and what they change: the memory and the write
/// fights.
pub(crate) struct Cx<'a> {
    pub params: &'a NativeParams,
    pub mem: &'a mut NativeMemory,
    pub fights: &'a mut Fights,
    pub plan: &'a Plan,
    pub snapshot: &'a ClusterSnapshot,
    /// The API server's `gitVersion` (empty: unknown, or not read: no cure recorded or
    /// planned), set by [`Drive`] from [`Answer::Version`].
    pub server: String,
}

/// The `namespace/name` key as a Service reference.
pub(crate) fn service_of(key: &str) -> Option<ObjectRef> {
    let (namespace, name) = key.split_once('/')?;
    Some(ObjectRef::new(namespace, name))
}

/// An Event on `service`.
fn publish(
    service: &ObjectRef,
    uid: &str,
    warning: bool,
    reason: &'static str,
    note: String,
) -> Step {
    Step::Publish {
        service: service.clone(),
        uid: uid.to_owned(),
        warning,
        reason,
        note,
    }
}

/// When the snapshot does not show the record this instance wrote last yet (the cache lags
/// behind the status write's own event): when to look again, without a status write from a
/// plan made without it. A lag longer than [`RECORD_CACHE_LAG`] is someone else's change
/// (uninstall deleted the record): trusted.
pub(crate) fn lagging(
    mem: &mut NativeMemory,
    params: &NativeParams,
    before: &NativeRecord,
    now: Instant,
) -> Option<Instant> {
    if let Some((written, at)) = &mem.written {
        if written != before && now.saturating_duration_since(*at) < RECORD_CACHE_LAG {
            return Some(now + params.interval);
        }
        mem.written = None;
    }
    None
}

/// The record this instance wrote, at `now`.
pub(crate) fn written(mem: &mut NativeMemory, record: &NativeRecord, now: Instant) {
    mem.written = Some((record.clone(), now));
}

/// Whether a cure is recorded or planned: only then are the API server's version read and
/// the Nodes watched.
pub(crate) fn native(record: &NativeRecord, plan: &Plan) -> bool {
    !record.load_balancers.is_empty() || !plan.native_actions.is_empty()
}

/// The start of a reconcile's native step: the data plane now, the proven cures a new
/// instance does not trust put back to `probing` (returned: they are probed again), and the
/// finished probes' verdicts into the record.
pub(crate) fn begin(
    cx: &mut Cx<'_>,
    record: &mut NativeRecord,
    now: &Now,
) -> (Vec<String>, Vec<Step>) {
    data_plane(cx, now.at);
    let mut distrusted = Vec::new();
    if !cx.mem.started {
        cx.mem.started = true;
        distrusted = state::distrust(cx.plan, record, now);
        for key in &distrusted {
            tracing::info!(service = %key, "a proven native cure is probed again at the controller's start before it is trusted");
        }
    }
    (distrusted, take_verdicts(cx, record, now))
}

/// The data plane now: the kube-proxy and CNI DaemonSets' generations
/// ([`hairpin_planner::native::data_plane`]), the Nodes' kubelet and kube-proxy versions and
/// the API server's version. Left as it was until the Nodes are listed (it matters only to a
/// cure).
fn data_plane(cx: &mut Cx<'_>, now: Instant) {
    let Some(nodes) = cx.mem.nodes.as_deref() else {
        return;
    };
    let mut parts = vec![
        hairpin_planner::native::data_plane(cx.snapshot),
        hairpin_planner::nodes::kube_proxy_config(cx.snapshot),
    ];
    if !nodes.is_empty() {
        parts.push(format!("nodes {nodes}"));
    }
    if !cx.server.is_empty() {
        parts.push(format!("apiserver@{}", cx.server));
    }
    parts.retain(|p| !p.is_empty());
    let data_plane = parts.join("; ");
    if data_plane != cx.mem.data_plane.0 {
        cx.mem.data_plane = (data_plane, now);
    }
}

/// The steps of one of the plan's native actions; and when to look again, when a new cure
/// waits for the Nodes' first list (until then no new cure is tried, so that the first plan
/// that could try one has seen every Node through the gate).
pub(crate) fn action(
    cx: &mut Cx<'_>,
    record: &mut NativeRecord,
    action: &NativeAction,
    now: &Now,
) -> (Vec<Step>, Option<Instant>) {
    let mut steps = Vec::new();
    match action {
        NativeAction::SetProxy { proven: false, .. } if cx.mem.nodes.is_none() => {
            // A new cure waits for the Nodes' gate; their first list wakes the loop.
            tracing::debug!("a native cure waits for the Nodes to be listed");
            return (steps, Some(now.at + cx.params.interval));
        }
        NativeAction::SetProxy {
            service,
            uid,
            ips,
            proven,
        } => steps = set::set_proxy(cx, record, (service, uid), ips, *proven, now),
        NativeAction::Restore {
            service,
            uid,
            original,
            reason,
        } => {
            let key = service.to_string();
            steps.push(Step::StopProbe(key.clone()));
            let Some(uid) = uid else {
                record.load_balancers.remove(&key);
                return (steps, None);
            };
            // A restore not tried now (not due) keeps the entry: tried again, backing off.
            steps.extend(put_back::step(
                cx,
                (service, uid),
                original,
                reason,
                true,
                now,
            ));
        }
        NativeAction::PutBack {
            service,
            uid,
            original,
            reason,
        } => {
            let key = service.to_string();
            steps.push(Step::StopProbe(key.clone()));
            if !verdicts::put_back_held(cx.mem, &key, now.at) {
                steps.extend(put_back::step(
                    cx,
                    (service, uid),
                    original,
                    reason,
                    false,
                    now,
                ));
            }
        }
        NativeAction::Forget {
            service,
            uid,
            writer,
            reason,
        } => {
            tracing::warn!(service = %service, writer = %writer, "another writer set ipMode: Proxy itself; hairpin stepped back");
            steps.push(Step::StopProbe(service.to_string()));
            record.load_balancers.remove(&service.to_string());
            steps.push(publish(
                service,
                uid,
                false,
                reason::IP_MODE_HANDED_OVER,
                reason.clone(),
            ));
        }
    }
    (steps, None)
}

/// The cures to probe ([`state::reprobe_due`]: proven ones due again, `probing` ones with no
/// probe; `distrusted`: proven before this instance, probed again); and when a changed data
/// plane will have settled.
pub(crate) fn reprobes(
    cx: &Cx<'_>,
    record: &NativeRecord,
    distrusted: &[String],
    now: &Now,
) -> (Vec<Step>, Option<Instant>) {
    let data_plane = (cx.mem.data_plane.0.as_str(), cx.mem.data_plane.1);
    let (due, settling) = state::reprobe_due(cx.params, data_plane, cx.plan, record, now);
    let steps = due
        .into_iter()
        .map(|(service, entry)| {
            tracing::debug!(service = %service, state = ?entry.state, "probing a native cure");
            let key = service.to_string();
            let again = entry.state == ProbeState::Proven || distrusted.contains(&key);
            let (proof, receiver) = if again {
                // What the baseline recorded before the write, in the record.
                (Proof::Again, entry.probe.receiver)
            } else {
                (Proof::AfterWrite, receiver(cx.mem, &key))
            };
            let targets = probe_targets(cx.plan, &service, &entry.original);
            Step::Prove {
                service,
                uid: entry.uid,
                proof,
                receiver,
                targets,
            }
        })
        .collect();
    (steps, settling)
}

/// What answered `key`'s HTTP ports through the receiver's own path in the baseline before
/// its write.
fn receiver(mem: &NativeMemory, key: &str) -> Fingerprints {
    mem.receivers.get(key).cloned().unwrap_or_default()
}

/// The probe targets of `service`'s `ips`: every PROXY port of the load balancer the plan
/// names (`None`: not in the plan).
pub(crate) fn probe_targets(
    plan: &Plan,
    service: &ObjectRef,
    ips: &[IpModeWas],
) -> Option<Vec<ProbeTarget>> {
    let lb = plan
        .load_balancers
        .iter()
        .find(|lb| lb.load_balancer.service == *service)?;
    Some(targets(lb, ips))
}

/// When to look again: soon while a probe runs (`probing`), else when a failed cure is due
/// (`requeue`), a changed data plane settled, a node report is due a look, or a refused
/// put-back is due.
pub(crate) fn requeue(
    cx: &Cx<'_>,
    probing: bool,
    requeue: Option<Instant>,
    (settling, reports_due): (Option<Instant>, Option<Instant>),
    now: Instant,
) -> Option<Instant> {
    let requeue = if probing {
        Some(now + cx.params.interval)
    } else {
        earliest(requeue, settling)
    };
    let next_put_back = cx.mem.put_backs.values().map(|(_, next)| *next).min();
    earliest(earliest(requeue, reports_due), next_put_back)
}

#[cfg(test)]
mod tests;
