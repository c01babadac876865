//! The driver, without a client: for each native state, the memory, the record, the plan and
//! the answers the executor would give, then the exact steps handed out in order (the
//! version read, the record written, the writes, the Events, the probes, the question
//! whether a probe still runs) and when to look again. The fixtures are the native table
//! tests' ([`super::super::tests`]).

use std::time::Duration;

use hairpin_planner::ClusterSnapshot;
use hairpin_planner::native::{IP_MODE_PROXY, NativeAction, NativeRecord, ProbeState};

use super::super::super::Finished;
use super::super::super::NativeParams;
use super::super::super::probe::{Baseline, Fingerprints, ProbeVerdict};
use super::super::super::state::{Now, fight_target};
use super::super::tests::{
    Driven, Found, IP, KEY, drive, lb, memory, now, plan, put_back_action, record, service,
    set_proxy, snapshot, state_of, was,
};
use super::*;

/// The line of a `SetProxy` of `IP` (`reassert`), the record it writes first saying `state`.
fn set_line(reassert: bool, state: &str) -> String {
    format!("set Proxy web/lb on [\"{IP}\"] (reassert {reassert}, record Some({state}))")
}

/// The baseline's verdict for `web/lb`: the problem shown.
fn shown(unreachable: Vec<(std::net::IpAddr, String)>, ips: &[&str]) -> Finished {
    Finished::Baseline {
        uid: "u1".into(),
        ips: ips.iter().map(|ip| was(ip)).collect(),
        baseline: Baseline::Shown {
            unreachable,
            receiver: Fingerprints::new(),
        },
    }
}

/// A proof's verdict for `web/lb`.
fn proof(proven: bool) -> Finished {
    Finished::Proof {
        uid: "u1".into(),
        verdict: ProbeVerdict {
            proven,
            definite: !proven,
            detail: if proven { "answered" } else { "refused" }.into(),
            took: Duration::from_millis(500),
        },
    }
}

#[test]
fn probing_the_version_the_baseline_then_the_record_before_the_status() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = snapshot();
    let plan = plan(vec![set_proxy(&[IP], false)]);
    let scene = (&plan, &snapshot, &params);
    let mut memory = memory(&now);
    memory.0.nodes = None;
    let mut record = NativeRecord::default();
    // A cure planned: the API server's version first. The Nodes not listed: nothing more.
    let run = drive(&mut memory, &mut record, scene, Found::default(), &now);
    assert_eq!(run.steps, ["read version", "probes running?"]);
    assert_eq!(run.requeue, Some(now.at + params.interval));
    // Listed: the probe without a header; the version remembered is not read again.
    memory.0.nodes = Some(String::new());
    let run = drive(&mut memory, &mut record, scene, Found::default(), &now);
    assert_eq!(run.steps, ["baseline web/lb 1", "probes running?"]);
    // Shown: the record (probing) written before the status, then the Event and the proof;
    // the record written again at the end (it differs from the snapshot's).
    memory
        .0
        .verdicts
        .insert(KEY.into(), shown(Vec::new(), &[IP]));
    let found = Found {
        set: vec![SetAnswer::Applied],
        ..Found::default()
    };
    let run = drive(&mut memory, &mut record, scene, found, &now);
    assert_eq!(
        run.steps,
        [
            "write record Some(Probing)",
            &set_line(false, "Probing"),
            "metric IpModeWrite(\"set\")",
            "normal web/lb IpModeProxySet",
            "prove web/lb AfterWrite",
            "prove web/lb AfterWrite",
            "write record Some(Probing)",
            "probes running?",
        ]
    );
    assert_eq!(state_of(&record), Some(ProbeState::Probing));
    assert_eq!(memory.0.written.as_ref().map(|(r, _)| r), Some(&record));
}

#[test]
fn a_probe_running_at_the_end_looks_again_after_the_interval() {
    let now = now();
    let params = NativeParams::default();
    let (snapshot, empty) = (snapshot(), plan(Vec::new()));
    let (mut memory, record) = (memory(&now), record(ProbeState::Probing, &now));
    let mut cx = Cx {
        params: &params,
        mem: &mut memory.0,
        fights: &mut memory.1,
        plan: &empty,
        snapshot: &snapshot,
        server: String::new(),
    };
    let mut drive = Drive::new(Ok(record));
    let (mut steps, mut answer) = (Vec::new(), None);
    let wait = loop {
        match drive.next(&mut cx, answer.take(), &now) {
            Next::Step(step) => {
                answer = match step {
                    Step::ReadVersion => Some(Answer::Version(Some("v1.31.14".into()))),
                    Step::ProbesRunning => Some(Answer::ProbesRunning(true)),
                    _ => None,
                };
                steps.push(step);
            }
            Next::Done(wait) => break wait,
        }
    };
    // The version, the proof of the `probing` cure (no probe known to run), the question.
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert!(matches!(steps[1], Step::Prove { .. }), "{steps:?}");
    assert_eq!(wait, Some(now.at + params.interval));
    assert_eq!(cx.server, "v1.31.14");
    // Over: it stays over.
    assert_eq!(drive.next(&mut cx, None, &now), Next::Done(wait));
}

#[test]
fn a_snapshot_behind_the_record_written_waits_and_an_unreadable_record_does_nothing() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = snapshot();
    let plan = plan(vec![set_proxy(&[IP], false)]);
    let mut memory = memory(&now);
    memory.0.written = Some((record(ProbeState::Probing, &now), now.at));
    // The snapshot still shows no record, a moment after this instance wrote one.
    let mut stale = NativeRecord::default();
    let run = drive(
        &mut memory,
        &mut stale,
        (&plan, &snapshot, &params),
        Found::default(),
        &now,
    );
    assert!(run.steps.is_empty(), "{:?}", run.steps);
    assert_eq!(run.requeue, Some(now.at + params.interval));
    // Someone else's record (hairpin cannot read it): nothing, not even the version.
    let mut cx = Cx {
        params: &params,
        mem: &mut memory.0,
        fights: &mut memory.1,
        plan: &plan,
        snapshot: &snapshot,
        server: String::new(),
    };
    let unreadable = hairpin_planner::native::RecordError {
        config_map: service(),
        key: "record".into(),
        reason: "not JSON".into(),
    };
    let mut drive = Drive::new(Err(unreadable));
    assert_eq!(drive.next(&mut cx, None, &now), Next::Done(None));
}

#[test]
fn proven_then_reasserted_the_record_before_the_status_and_no_new_proof() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = snapshot();
    let mut memory = memory(&now);
    let mut record = record(ProbeState::Probing, &now);
    memory.0.verdicts.insert(KEY.into(), proof(true));
    let empty = plan(Vec::new());
    let run = drive(
        &mut memory,
        &mut record,
        (&empty, &snapshot, &params),
        Found::default(),
        &now,
    );
    assert_eq!(
        run.steps,
        [
            "read version",
            "metric Verdict(\"proven\")",
            "normal web/lb NativeCureProven",
            "write record Some(Proven)",
            "probes running?",
        ]
    );
    let plan = plan(vec![set_proxy(&[IP], true)]);
    let found = Found {
        set: vec![SetAnswer::Applied],
        ..Found::default()
    };
    let run = drive(
        &mut memory,
        &mut record,
        (&plan, &snapshot, &params),
        found,
        &now,
    );
    // The record is unchanged: written before the status, not again at the end.
    assert_eq!(
        run.steps,
        [
            "write record Some(Proven)",
            &set_line(true, "Proven"),
            "metric IpModeWrite(\"reassert\")",
            "normal web/lb IpModeProxyReasserted",
            "probes running?",
        ]
    );
}

#[test]
fn failed_with_proxy_still_set_a_put_back_not_applied_stays_pending() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = snapshot();
    let mut memory = memory(&now);
    let mut record = record(ProbeState::Probing, &now);
    memory.0.verdicts.insert(KEY.into(), proof(false));
    let empty = plan(Vec::new());
    let found = Found {
        put_back: vec![Restored::NotApplied],
        ..Found::default()
    };
    let run = drive(
        &mut memory,
        &mut record,
        (&empty, &snapshot, &params),
        found,
        &now,
    );
    assert_eq!(
        run.steps,
        [
            "read version",
            "metric Verdict(\"failed\")",
            "put back web/lb (forget false)",
            "metric IpModeWrite(\"restore\")",
            "metric PutBacksPending(1)",
            "warning web/lb IpModeNotRestored",
            "write record Some(Failed)",
            "probes running?",
        ]
    );
    assert!(run.notes[0].contains("still says Proxy"), "{:?}", run.notes);
    assert!(
        record.load_balancers[KEY]
            .put_back
            .contains("still says Proxy")
    );
    assert_eq!(run.requeue, Some(now.at + Duration::from_millis(250)));
    // No answer at all (never so from the executor): kept at, as a refusal.
    let plan = plan(vec![put_back_action()]);
    let later = Now {
        at: now.at + Duration::from_millis(300),
        ..now
    };
    let mut cx = Cx {
        params: &params,
        mem: &mut memory.0,
        fights: &mut memory.1,
        plan: &plan,
        snapshot: &snapshot,
        server: String::new(),
    };
    let mut drive = Drive::new(Ok(record.clone()));
    let mut steps = Vec::new();
    while let Next::Step(step) = drive.next(&mut cx, None, &later) {
        steps.push(super::super::tests::line(&step));
    }
    assert_eq!(
        steps,
        [
            "stop probe web/lb",
            "put back web/lb (forget false)",
            "metric PutBacksPending(1)",
            "warning web/lb IpModeNotRestored",
            "write record Some(Failed)",
            "probes running?",
        ]
    );
    assert_eq!(cx.mem.put_backs[KEY].0, 2);
}

#[test]
fn restore_pending_waits_its_backoff_then_the_entry_goes_with_the_put_back() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = snapshot();
    let mut memory = memory(&now);
    let mut record = record(ProbeState::Proven, &now);
    record.load_balancers.get_mut(KEY).unwrap().put_back = "refused".into();
    let next = now.at + Duration::from_millis(250);
    memory.0.put_backs.insert(KEY.into(), (1, next));
    let restore = NativeAction::Restore {
        service: service(),
        uid: Some("u1".into()),
        original: vec![was(IP)],
        reason: "the load balancer no longer needs a cure".into(),
    };
    let plan = plan(vec![restore]);
    let scene = (&plan, &snapshot, &params);
    let run = drive(&mut memory, &mut record, scene, Found::default(), &now);
    assert_eq!(
        run.steps,
        ["read version", "stop probe web/lb", "probes running?"]
    );
    assert_eq!(run.requeue, Some(next));
    let due = Now {
        at: next + Duration::from_millis(1),
        ..now
    };
    let found = Found {
        put_back: vec![Restored::Applied],
        ..Found::default()
    };
    let run = drive(&mut memory, &mut record, scene, found, &due);
    assert_eq!(
        run.steps,
        [
            "stop probe web/lb",
            "put back web/lb (forget true)",
            "metric IpModeWrite(\"restore\")",
            "warning web/lb IpModeRestored",
            "metric PutBacksPending(0)",
            "write record None",
            "probes running?",
        ]
    );
    assert!(record.load_balancers.is_empty());
}

#[test]
fn skipped_ips_are_left_out_of_the_write() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = ClusterSnapshot {
        services: vec![lb(&[IP, "2001:db8::10"], None)],
        ..ClusterSnapshot::default()
    };
    let mut memory = memory(&now);
    let unreachable = vec![("2001:db8::10".parse().unwrap(), "no route".to_owned())];
    let finished = shown(unreachable, &[IP, "2001:db8::10"]);
    memory.0.verdicts.insert(KEY.into(), finished);
    let mut record = NativeRecord::default();
    let plan = plan(vec![set_proxy(&[IP, "2001:db8::10"], false)]);
    let found = Found {
        set: vec![SetAnswer::Applied],
        ..Found::default()
    };
    let run = drive(
        &mut memory,
        &mut record,
        (&plan, &snapshot, &params),
        found,
        &now,
    );
    assert_eq!(
        run.steps,
        [
            "read version",
            "write record Some(Probing)",
            &set_line(false, "Probing"),
            "metric IpModeWrite(\"set\")",
            "normal web/lb IpModeProxySet",
            "prove web/lb AfterWrite",
            "prove web/lb AfterWrite",
            "write record Some(Probing)",
            "probes running?",
        ]
    );
    assert_eq!(record.load_balancers[KEY].skipped, ["2001:db8::10"]);
}

#[test]
fn unsupported_the_version_read_again_after_a_dropped_write_then_put_back() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = snapshot();
    let mut memory = memory(&now);
    (memory.0.shown).insert(KEY.into(), ("u1".into(), now.at, Vec::new()));
    let mut record = NativeRecord::default();
    let plan = plan(vec![set_proxy(&[IP], false)]);
    // The version unreadable at first: read again for the dropped write's Event.
    let found = Found {
        set: vec![SetAnswer::Dropped(Box::new(lb(&[IP], Some(IP_MODE_PROXY))))],
        put_back: vec![Restored::Applied],
        versions: vec![None, Some("v1.29.9")],
    };
    let run = drive(
        &mut memory,
        &mut record,
        (&plan, &snapshot, &params),
        found,
        &now,
    );
    assert_eq!(
        run.steps,
        [
            "read version",
            "write record Some(Probing)",
            &set_line(false, "Probing"),
            "read version",
            "metric IpModeWrite(\"set\")",
            "metric Verdict(\"unsupported\")",
            "warning web/lb IpModeDropped",
            "put back web/lb (forget false)",
            "metric IpModeWrite(\"restore\")",
            "warning web/lb IpModeRestored",
            "metric PutBacksPending(0)",
            "write record Some(Unsupported)",
            "probes running?",
        ]
    );
    assert!(
        run.notes[0].contains("(v1.29.9) dropped"),
        "{:?}",
        run.notes
    );
    assert_eq!(record.load_balancers[KEY].server_version, "v1.29.9");
    assert_eq!(memory.0.server_version.as_ref().unwrap().0, "v1.29.9");
}

#[test]
fn a_set_answered_409_leads_to_nothing_more_from_the_write() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = snapshot();
    let mut memory = memory(&now);
    (memory.0.shown).insert(KEY.into(), ("u1".into(), now.at, Vec::new()));
    let mut record = NativeRecord::default();
    let plan = plan(vec![set_proxy(&[IP], false)]);
    let found = Found {
        set: vec![SetAnswer::Conflict],
        ..Found::default()
    };
    let run = drive(
        &mut memory,
        &mut record,
        (&plan, &snapshot, &params),
        found,
        &now,
    );
    // No metric, no Event; the record already says `probing`, so its probe starts.
    assert_eq!(
        run.steps,
        [
            "read version",
            "write record Some(Probing)",
            &set_line(false, "Probing"),
            "prove web/lb AfterWrite",
            "write record Some(Probing)",
            "probes running?",
        ]
    );
    assert!(run.notes.is_empty());
}

#[test]
fn a_fight_fails_the_cure_before_any_write() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = snapshot();
    let mut memory = memory(&now);
    let target = fight_target(&service());
    for n in 0..3 {
        let at = now.at - Duration::from_secs(3 - n);
        memory.1.written(&target, Some(IP_MODE_PROXY.into()), at);
    }
    let mut record = record(ProbeState::Proven, &now);
    let plan = plan(vec![set_proxy(&[IP], true)]);
    let run = drive(
        &mut memory,
        &mut record,
        (&plan, &snapshot, &params),
        Found::default(),
        &now,
    );
    assert_eq!(
        run.steps,
        [
            "read version",
            "metric Revert(\"another writer\")",
            "stop probe web/lb",
            "metric Verdict(\"failed\")",
            "warning web/lb IpModeWriteReverted",
            "write record Some(Failed)",
            "probes running?",
        ]
    );
}

#[test]
fn not_proven_on_every_node_fails_the_cure_and_writes_the_record_only() {
    use hairpin_planner::node_probes::{NodeProbe, NodeReport, NodeResult};
    use k8s_openapi::api::core::v1::Node;
    let now = now();
    let params = NativeParams {
        node_reports: Some(Duration::from_secs(60)),
        ..NativeParams::default()
    };
    let mut memory = memory(&now);
    let mut record = record(ProbeState::Proven, &now);
    let probe = NodeProbe {
        uid: "u1".into(),
        attempt: record.load_balancers[KEY].attempt().to_owned(),
        result: NodeResult::Failed,
        reason: "no answer".into(),
        at: String::new(),
    };
    let mut node = Node::default();
    node.metadata.name = Some("node-b".into());
    let snapshot = ClusterSnapshot {
        services: vec![lb(&[IP], Some(IP_MODE_PROXY))],
        nodes: vec![node],
        node_probes: Some(vec![NodeReport {
            node: "node-b".into(),
            fresh: true,
            probes: Ok([(KEY.to_owned(), probe)].into()),
        }]),
        ..ClusterSnapshot::default()
    };
    let empty = plan(Vec::new());
    let run = drive(
        &mut memory,
        &mut record,
        (&empty, &snapshot, &params),
        Found::default(),
        &now,
    );
    assert_eq!(
        run.steps,
        [
            "read version",
            "stop probe web/lb",
            "metric Verdict(\"failed\")",
            "warning web/lb NativeCureNotOnEveryNode",
            "write record Some(Failed)",
            "probes running?",
        ]
    );
    // The put-back waits for the DNS rules to settle; the reports are looked at again within
    // a third of the age they may have.
    assert_eq!(memory.0.settling[KEY], now.at + params.dns_settle);
    assert_eq!(run.requeue, Some(now.at + Duration::from_secs(20)));
}

/// No cure planned or recorded: no version read, nothing written.
#[test]
fn no_cure_recorded_or_planned_reads_no_version() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = snapshot();
    let mut memory = memory(&now);
    let mut record = NativeRecord::default();
    let empty = plan(Vec::new());
    let Driven { steps, requeue, .. } = drive(
        &mut memory,
        &mut record,
        (&empty, &snapshot, &params),
        Found::default(),
        &now,
    );
    assert_eq!(steps, ["probes running?"]);
    assert_eq!(requeue, None);
    assert!(memory.0.server_version.is_none());
}
