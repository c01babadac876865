//! `ipMode: Proxy` set, decided without a client: a new attempt only after the baseline
//! showed the problem (the record first, so that uninstall knows what to put back), the fight
//! guard over another writer's reverts, and what the API server's answer leads to: the
//! Event, the proof, or a dropped field (`unsupported`, put back).

use std::time::Duration;

use hairpin_planner::escape;
use hairpin_planner::native::{IP_MODE_PROXY, IpModeWas, NativeRecord, ingress_writer};
use hairpin_planner::{ClusterSnapshot, ObjectRef};
use k8s_openapi::api::core::v1::Service;

use super::super::SHOWN_FOR;
use super::super::memory::NativeMemory;
use super::super::probe::Proof;
use super::super::state::{self, Now, SetStep, fight_target};
use super::super::status::status_ingress;
use super::verdicts::probe_spec;
use super::{Cx, Metric, Step, probe_targets, publish, put_back, receiver};
use crate::fight::{Decision, Observation};
use crate::report::reason;

/// kube-proxy's default minimum time between two syncs once its burst of two is spent
/// (`--iptables-min-sync-period`, `minSyncPeriod` of every mode; `pkg/util/async`'s
/// BoundedFrequencyRunner): the least window in which in-cluster clients are short-circuited
/// after a rebuild of the status that kube-proxy applied.
const KUBE_PROXY_MIN_SYNC: Duration = Duration::from_secs(1);

/// A status write of `ipMode: Proxy`: the record written first.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SetProxy {
    pub service: ObjectRef,
    pub uid: String,
    /// The IPs to set (those the baseline could not reach left out).
    pub ips: Vec<IpModeWas>,
    /// Over another writer's status without it (else a new attempt).
    pub reassert: bool,
    /// The IPs the baseline could not reach, left VIP.
    pub skipped: Vec<String>,
    /// The record to write before the status.
    pub record: NativeRecord,
}

/// What the API server answered to a [`SetProxy`].
#[derive(Debug)]
pub(crate) enum SetOutcome {
    /// Written, and the answer holds `Proxy`.
    Applied,
    /// Nothing to change, or another writer changed the status between the read and the
    /// write (a 409, the Service gone): next round.
    Nothing,
    /// Written, but the answer (`stored`) does not hold it: the API server at `version`
    /// dropped it.
    Dropped {
        stored: Box<Service>,
        version: String,
    },
}

/// The steps of a plan's `SetProxy` of `ips` on `service` (uid `uid`; `proven`: the record
/// holds a proven cure). A new attempt proves the problem first (the baseline, in a task:
/// nothing is written until it showed); then the record, the status, and the probe.
pub(crate) fn set_proxy(
    cx: &mut Cx<'_>,
    record: &mut NativeRecord,
    (service, uid): (&ObjectRef, &str),
    ips: &[IpModeWas],
    proven: bool,
    now: &Now,
) -> Vec<Step> {
    let key = service.to_string();
    let step = state::set_step(record, &key, uid, ips, proven);
    let reassert = match step {
        SetStep::Skip => return Vec::new(),
        SetStep::Reassert => true,
        SetStep::Attempt => false,
    };
    let mut skipped = Vec::new();
    if !reassert {
        let Some(left_out) = take_shown(cx.mem, &key, uid, now) else {
            tracing::debug!(service = %service, "probing without a header before any change");
            return vec![Step::Baseline {
                service: service.clone(),
                uid: uid.to_owned(),
                ips: ips.to_vec(),
                targets: probe_targets(cx.plan, service, ips),
            }];
        };
        skipped = left_out;
    }
    // The IPs the baseline could not reach stay VIP (their names on the DNS cure).
    let ips: Vec<IpModeWas> = ips
        .iter()
        .filter(|was| !skipped.contains(&was.ip))
        .cloned()
        .collect();
    if ips.is_empty() {
        return Vec::new();
    }
    let mut steps = Vec::new();
    if !may_write(cx, record, (service, uid), reassert, now, &mut steps) {
        return steps;
    }
    // IPs the status no longer has (the address changed) are stale.
    let status_ips: Option<Vec<&str>> =
        cx.snapshot
            .service(&service.namespace, &service.name)
            .map(|svc| {
                status_ingress(svc)
                    .iter()
                    .filter_map(|e| e.ip.as_deref())
                    .collect()
            });
    state::begin_write(record, &key, uid, &ips, step, status_ips.as_deref(), now);
    if let Some(entry) = record.load_balancers.get_mut(&key)
        && step == SetStep::Attempt
    {
        entry.skipped = skipped.clone();
        entry.probe = probe_spec(cx.mem, cx.plan, service, &entry.original, &entry.since);
    }
    steps.push(Step::SetProxy(SetProxy {
        service: service.clone(),
        uid: uid.to_owned(),
        ips,
        reassert,
        skipped,
        record: record.clone(),
    }));
    steps
}

/// Whether the baseline showed the problem of `key` (uid `uid`) recently: taken once.
/// Returns the IPs it left out (unreachable from here).
fn take_shown(mem: &mut NativeMemory, key: &str, uid: &str, now: &Now) -> Option<Vec<String>> {
    mem.shown
        .remove(key)
        .filter(|(shown_uid, at, _)| {
            shown_uid == uid && now.at.saturating_duration_since(*at) < SHOWN_FOR
        })
        .map(|(_, _, left_out)| left_out)
}

/// Before writing `ipMode: Proxy` (again, over another writer's status without it):
/// counts the revert (per writer), and when that writer keeps doing it
/// (`--fight-threshold` times within the window), stops: the entry goes `failed` (the load
/// balancer is on the DNS cure; it is tried again after the backoff), with a Warning Event
/// naming the writer. Returns whether to write.
fn may_write(
    cx: &mut Cx<'_>,
    record: &mut NativeRecord,
    (service, uid): (&ObjectRef, &str),
    reassert: bool,
    now: &Now,
    steps: &mut Vec<Step>,
) -> bool {
    let target = fight_target(service);
    if let Decision::BackedOff(_) = cx.fights.decide(&target, now.at) {
        return false;
    }
    // Writing again the value hairpin wrote last: someone removed it (a revert).
    let observation = cx
        .fights
        .written(&target, Some(IP_MODE_PROXY.into()), now.at);
    let writer = cx
        .snapshot
        .service(&service.namespace, &service.name)
        .and_then(ingress_writer)
        .map_or_else(
            || "another writer".to_owned(),
            |w| escape::text(w).into_owned(),
        );
    let (count, backoff) = match observation {
        Observation::Normal => return true,
        Observation::Reverted { .. } => {
            if reassert {
                steps.push(Step::Metric(Metric::Revert(writer)));
            }
            return true;
        }
        Observation::Fight { count, backoff } => (count, backoff),
    };
    steps.push(Step::Metric(Metric::Revert(writer.clone())));
    let why = format!(
        "{writer} removed the ipMode: Proxy hairpin set {count} times within {:?} (a status fight: MetalLB or a cloud controller rebuilds the status without it); hairpin stopped, the load balancer is on the DNS cure, and native is tried again after the backoff",
        cx.fights.params_of(&target).window
    );
    tracing::warn!(service = %service, writer = %writer, reverts = count, backoff = ?backoff, "status fight over ipMode; backing off");
    let key = service.to_string();
    state::fight_lost(record, &key, &why, &cx.mem.data_plane.0, now);
    steps.push(Step::StopProbe(key));
    steps.push(Step::Metric(Metric::Verdict("failed")));
    steps.push(publish(service, uid, true, reason::IP_MODE_FIGHT, why));
    false
}

/// What follows the API server's answer to `set`: the metric, the Event and the proof of a
/// new attempt; or, dropped, the entry `unsupported` (with the server's version: not tried
/// again until that changes) and whatever did keep `Proxy` put back.
pub(crate) fn after(
    cx: &mut Cx<'_>,
    record: &mut NativeRecord,
    set: &SetProxy,
    outcome: SetOutcome,
    now: &Now,
) -> Vec<Step> {
    let SetProxy {
        service,
        uid,
        reassert,
        ..
    } = set;
    let mut steps = Vec::new();
    let (stored, version) = match outcome {
        SetOutcome::Nothing => return steps,
        SetOutcome::Dropped { stored, version } => (stored, version),
        SetOutcome::Applied => {
            let kind = if *reassert { "reassert" } else { "set" };
            steps.push(Step::Metric(Metric::IpModeWrite(kind)));
            let ip_list: Vec<&str> = set.ips.iter().map(|w| w.ip.as_str()).collect();
            let note = if *reassert {
                reasserted(cx.snapshot, service, &ip_list, now, &mut steps)
            } else {
                let left_out = if set.skipped.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; {} cannot be reached from the controller and stays VIP (the names keep the DNS cure)",
                        set.skipped.join(", ")
                    )
                };
                format!(
                    "hairpin set ipMode: Proxy on {} (native cure: a request without a header went unanswered before) and probes the address from inside the cluster; DNS stays until the probe succeeds{left_out}",
                    ip_list.join(", ")
                )
            };
            tracing::info!(service = %service, ips = ?ip_list, reasserted = reassert, "ipMode: Proxy set");
            let event = if *reassert {
                reason::IP_MODE_REASSERTED
            } else {
                reason::IP_MODE_SET
            };
            steps.push(publish(service, uid, false, event, note));
            if !reassert {
                steps.push(Step::Prove {
                    service: service.clone(),
                    uid: uid.clone(),
                    proof: Proof::AfterWrite,
                    receiver: receiver(cx.mem, &service.to_string()),
                    targets: probe_targets(cx.plan, service, &set.ips),
                });
            }
            return steps;
        }
    };
    // Anything the write did change goes back (an IP that did keep `Proxy`).
    let kept = status_ingress(&stored)
        .iter()
        .any(|e| e.ip_mode.as_deref() == Some(IP_MODE_PROXY) && e.ip.is_some());
    steps.push(Step::Metric(Metric::IpModeWrite("set")));
    let shown = if version.is_empty() {
        "version unknown".to_owned()
    } else {
        escape::text(&version).into_owned()
    };
    let why = format!(
        "the API server ({shown}) dropped the ipMode: Proxy hairpin wrote: it is older than 1.30, or its feature gate LoadBalancerIPMode is off; not tried again until its version changes"
    );
    tracing::warn!(service = %service, version = %version, "the API server dropped ipMode");
    let original = state::dropped(record, &service.to_string(), &why, &version, now);
    steps.push(Step::Metric(Metric::Verdict("unsupported")));
    steps.push(publish(
        service,
        uid,
        true,
        reason::IP_MODE_DROPPED,
        why.clone(),
    ));
    if kept {
        steps.extend(put_back::step(
            cx,
            (service, uid),
            &original,
            &why,
            false,
            now,
        ));
    }
    steps
}

/// The note of a re-assertion over another writer's rebuild of the status (a cloud
/// controller syncing the Service after a spec change): the writer, the time from its
/// write (by its managed fields' one-second time) to now, also into the metric
/// `ip_mode_reassert_window_seconds`, and the window the in-cluster clients see, which is
/// kube-proxy's: from each node's sync of the rebuild to its sync of the re-assertion, at
/// least [`KUBE_PROXY_MIN_SYNC`] apart once kube-proxy's burst of two syncs is spent (the
/// rebuild's sync usually spends it), so a re-assertion within that time does not lengthen
/// it (measured: `native_safety` scenario k).
fn reasserted(
    snapshot: &ClusterSnapshot,
    service: &ObjectRef,
    ips: &[&str],
    now: &Now,
    steps: &mut Vec<Step>,
) -> String {
    let written = snapshot
        .service(&service.namespace, &service.name)
        .and_then(hairpin_planner::native::ingress_written);
    let Some((writer, at)) = written else {
        return format!(
            "another writer put the status back without ipMode: Proxy; hairpin set it again on {}",
            ips.join(", ")
        );
    };
    let writer = escape::text(writer);
    let window = now.since(&at);
    if let Some(window) = window {
        steps.push(Step::Metric(Metric::ReassertWindow(window.as_secs_f64())));
    }
    let clients = window.map_or(KUBE_PROXY_MIN_SYNC, |w| w.max(KUBE_PROXY_MIN_SYNC));
    let window = window.map_or_else(
        || "an unknown time".to_owned(),
        |w| format!("about {:.1} s", w.as_secs_f64()),
    );
    tracing::info!(service = %service, writer = %writer, window = %window, "ipMode: Proxy re-asserted over another writer's rebuild");
    format!(
        "{writer} rebuilt the status without ipMode: Proxy (a cloud controller syncing the Service after a change); hairpin set it again on {} {window} after that write (at {}, one-second resolution). In-cluster clients of these names are short-circuited without a header from each node's kube-proxy sync of that write to its sync of this one: about {:.1} s (kube-proxy syncs at most twice in a burst, then once per its min sync period, 1 s by default)",
        ips.join(", "),
        escape::text(&at),
        clients.as_secs_f64()
    )
}
