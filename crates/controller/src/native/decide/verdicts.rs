//! The probes' verdicts and the node agents' reports taken into the record, with the Events
//! and metrics they lead to, decided without a client.

use std::time::Instant;

use hairpin_planner::native::{IpModeWas, NativeRecord, ProbeSpec, ProbeState};
use hairpin_planner::nodes::{NodesVerdict, verdict};
use hairpin_planner::{ObjectRef, Plan};

use super::super::Finished;
use super::super::memory::NativeMemory;
use super::super::probe::{Baseline, ProbeVerdict};
use super::super::state::{self, Now, backoff, earliest, forced_native};
use super::{Cx, Metric, Step, probe_targets, publish, put_back, service_of};
use crate::report::reason;

/// The finished probes' verdicts (come in through the sensors) into the record.
pub(crate) fn take_verdicts(cx: &mut Cx<'_>, record: &mut NativeRecord, now: &Now) -> Vec<Step> {
    let mut steps = Vec::new();
    for (key, finished) in std::mem::take(&mut cx.mem.verdicts) {
        let Some(service) = service_of(&key) else {
            continue;
        };
        match finished {
            Finished::Baseline { uid, ips, baseline } => {
                baseline_taken(cx, record, (&service, &uid), ips, baseline, now, &mut steps);
            }
            Finished::Proof { uid, verdict } => {
                proof_taken(cx, record, (&service, &uid), &verdict, now, &mut steps);
            }
        }
    }
    steps
}

/// The baseline's verdict: shown, the write may go ahead (at the next reconcile, with the
/// plan's current IPs); answered, the entry says `not-needed`; unclear, `failed`. Neither
/// writes the status.
fn baseline_taken(
    cx: &mut Cx<'_>,
    record: &mut NativeRecord,
    (service, uid): (&ObjectRef, &str),
    ips: Vec<IpModeWas>,
    baseline: Baseline,
    now: &Now,
    steps: &mut Vec<Step>,
) {
    let key = service.to_string();
    let (probe_state, why, reason, verdict) = match baseline {
        Baseline::Shown {
            unreachable,
            receiver,
        } => {
            if receiver.is_empty() {
                tracing::info!(service = %key, "the receiver did not answer through its header path: the proof cannot tell it from another answerer");
            }
            cx.mem.receivers.insert(key.clone(), receiver);
            let left_out: Vec<String> = unreachable.iter().map(|(ip, _)| ip.to_string()).collect();
            for (ip, why) in &unreachable {
                tracing::info!(service = %key, ip = %ip, why = %why, "an IP the controller cannot reach is left out of the native cure: it stays VIP, its names on the DNS cure");
            }
            tracing::info!(service = %key, "a request without a header went unanswered: the problem is shown; setting ipMode: Proxy");
            cx.mem.shown.insert(key, (uid.to_owned(), now.at, left_out));
            return;
        }
        // Forced native: only an answer stops it (the cure would change nothing).
        Baseline::Unclear(why) if forced_native(cx.plan, service) => {
            tracing::warn!(service = %key, why = %why, "the problem is not shown; ipMode: Proxy set anyway (--cure native)");
            cx.mem
                .shown
                .insert(key, (uid.to_owned(), now.at, Vec::new()));
            return;
        }
        Baseline::NotNeeded(why) => (
            ProbeState::NotNeeded,
            why,
            reason::NATIVE_NOT_NEEDED,
            "not-needed",
        ),
        Baseline::Unclear(why) => (
            ProbeState::Failed,
            why,
            reason::NATIVE_UNPROVABLE,
            "unprovable",
        ),
    };
    let data_plane = &cx.mem.data_plane.0;
    let failures =
        state::baseline_verdict(record, &key, uid, ips, probe_state, &why, data_plane, now);
    steps.push(Step::Metric(Metric::Verdict(verdict)));
    let note = if probe_state == ProbeState::NotNeeded {
        tracing::info!(service = %key, why = %why, "native cure not needed; nothing written");
        format!(
            "not needed: {why}; hairpin wrote no ipMode (the DNS cure stays); checked again after {:?}",
            cx.params.retry
        )
    } else {
        tracing::warn!(service = %key, why = %why, "native cure cannot be proven; nothing written");
        format!(
            "native cure not tried: {why}; hairpin wrote no ipMode (the DNS cure stays); tried again after {:?}",
            backoff(cx.params, failures)
        )
    };
    let warning = probe_state == ProbeState::Failed;
    steps.push(publish(service, uid, warning, reason, note));
}

/// A proof's verdict: proven (the DNS rules go at the next plan), or not (the status goes
/// back at once unless native is forced, and the next try waits its backoff).
fn proof_taken(
    cx: &mut Cx<'_>,
    record: &mut NativeRecord,
    (service, uid): (&ObjectRef, &str),
    verdict: &ProbeVerdict,
    now: &Now,
    steps: &mut Vec<Step>,
) {
    let key = service.to_string();
    let data_plane = &cx.mem.data_plane.0;
    let Some((failures, original)) =
        state::proof_verdict(record, &key, uid, verdict, data_plane, now)
    else {
        return;
    };
    if verdict.proven {
        steps.push(Step::Metric(Metric::Verdict("proven")));
        tracing::info!(service = %key, took = ?verdict.took, detail = %verdict.detail, "native cure proven");
        let note = format!(
            "ipMode: Proxy is honoured: in-cluster traffic to the load balancer crosses it ({:.1} s after the write: {}); its DNS rules are removed",
            verdict.took.as_secs_f64(),
            verdict.detail
        );
        steps.push(publish(service, uid, false, reason::NATIVE_PROVEN, note));
        return;
    }
    steps.push(Step::Metric(Metric::Verdict("failed")));
    if forced_native(cx.plan, service) {
        tracing::warn!(service = %key, detail = %verdict.detail, "native cure not proven; kept (--cure native)");
        let note = format!(
            "ipMode: Proxy was not honoured ({}), and it stays: --cure native (flag or the Service's annotation) keeps it; in-cluster clients of these names may be short-circuited without a header, and the load balancer has no DNS cure",
            verdict.detail
        );
        steps.push(publish(
            service,
            uid,
            true,
            reason::NATIVE_KEPT_UNPROVEN,
            note,
        ));
        return;
    }
    tracing::warn!(service = %key, detail = %verdict.detail, definite = verdict.definite, "native cure not proven; ipMode put back, DNS cure kept");
    let within = if verdict.definite {
        format!(
            "(a definite failure, after {:.1} s)",
            verdict.took.as_secs_f64()
        )
    } else {
        format!("within {:?}", cx.params.deadline)
    };
    let why = format!(
        "ipMode: Proxy was not honoured {within} (kube-proxy older than 1.30, a CNI that ignores ipMode, or a load balancer that does not answer its own backends): {}; ipMode put back, the DNS cure stays; tried again after {:?}",
        verdict.detail,
        backoff(cx.params, failures)
    );
    if cx
        .snapshot
        .service(&service.namespace, &service.name)
        .is_some()
    {
        steps.extend(put_back::step(
            cx,
            (service, uid),
            &original,
            &why,
            false,
            now,
        ));
    }
}

/// What the node agents (and this controller's later re-probes) need to prove the attempt
/// started `since` on `ips`: written with the record, before the status.
pub(crate) fn probe_spec(
    mem: &NativeMemory,
    plan: &Plan,
    service: &ObjectRef,
    ips: &[IpModeWas],
    since: &str,
) -> ProbeSpec {
    ProbeSpec {
        attempt: since.to_owned(),
        targets: probe_targets(plan, service, ips).unwrap_or_default(),
        receiver: mem
            .receivers
            .get(&service.to_string())
            .cloned()
            .unwrap_or_default(),
    }
}

/// The node agents' reports into the record (where they report,
/// [`super::super::NativeParams::node_reports`]): each cure (`probing` or `proven`, not forced
/// native) that a node reported failed for its current attempt goes `failed`, named with what
/// the node saw, and the probe running for it stops. Nothing is written to the status here:
/// the plan made from the same reports already keeps the load balancer's DNS rules, and the
/// next plan puts `ipMode` back ([`hairpin_planner::native::NativeAction::PutBack`]) once they
/// settled: make before break. Returns when to look at the reports again (a heartbeat growing
/// old is no event), while a cure is held by them.
pub(crate) fn node_reports(
    cx: &mut Cx<'_>,
    record: &mut NativeRecord,
    now: &Now,
) -> (Vec<Step>, Option<Instant>) {
    let mut steps = Vec::new();
    let Some(max_age) = cx.params.node_reports else {
        return (steps, None);
    };
    let Some(reports) = cx.snapshot.node_probes.as_deref() else {
        return (steps, None);
    };
    // A cure recorded before the record kept what the agents need: filled in, its attempt
    // fixed, so that the agents can prove it too.
    for (key, entry) in &mut record.load_balancers {
        let Some(service) = service_of(key) else {
            continue;
        };
        if entry.probe.targets.is_empty()
            && matches!(entry.state, ProbeState::Probing | ProbeState::Proven)
        {
            let attempt = entry.attempt().to_owned();
            entry.probe = probe_spec(cx.mem, cx.plan, &service, &entry.original, &attempt);
        }
    }
    let mut held = false;
    let mut failed = Vec::new();
    cx.mem.settling.retain(|_, until| *until > now.at);
    for (key, entry) in &record.load_balancers {
        let Some(service) = service_of(key) else {
            continue;
        };
        if !matches!(entry.state, ProbeState::Probing | ProbeState::Proven)
            || forced_native(cx.plan, &service)
        {
            continue;
        }
        held = true;
        if let NodesVerdict::Failed(bar) = verdict(
            (key, &entry.uid, entry.attempt()),
            &cx.snapshot.nodes,
            reports,
        ) {
            failed.push((service, entry.uid.clone(), bar, entry.state));
        }
    }
    for (service, uid, bar, was) in failed {
        let key = service.to_string();
        if was == ProbeState::Proven {
            // The DNS rules may have gone: they come back now, and `ipMode` is put back once
            // they have reached the pods (make before break).
            cx.mem
                .settling
                .insert(key.clone(), now.at + cx.params.dns_settle);
        }
        steps.push(Step::StopProbe(key.clone()));
        let why = format!(
            "ipMode: Proxy is not honoured on node {} ({}): the DNS cure is back, then ipMode is put back",
            bar.node, bar.why
        );
        tracing::warn!(service = %key, node = %bar.node, why = %bar.why, "a node agent's probe failed: the native cure ends");
        state::fight_lost(record, &key, &why, &cx.mem.data_plane.0, now);
        steps.push(Step::Metric(Metric::Verdict("failed")));
        steps.push(publish(
            &service,
            &uid,
            true,
            reason::NATIVE_NOT_ON_EVERY_NODE,
            why,
        ));
    }
    // A third of the age a report may have: an agent that stopped is noticed in time.
    let settled = cx.mem.settling.values().min().copied();
    (steps, earliest(held.then(|| now.at + max_age / 3), settled))
}

/// Whether the put-back of `key` waits for the DNS rules brought back by a node's failure.
pub(crate) fn put_back_held(mem: &NativeMemory, key: &str, now: Instant) -> bool {
    mem.settling.get(key).is_some_and(|until| *until > now)
}
