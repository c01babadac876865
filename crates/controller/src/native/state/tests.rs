//! The native cure's state machine without a client: the record's next states from the
//! record, the plan, the data plane and a clock set by the test.

use std::time::{Duration, Instant};

use hairpin_planner::native::{IpModeWas, NativeEntry, NativeRecord, ProbeState};
use hairpin_planner::{ClusterSnapshot, ObjectRef, Plan, PlannerConfig};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::super::NativeParams;
use super::super::probe::ProbeVerdict;
use super::{
    Now, SetStep, backoff, begin_write, distrust, mark_due, proof_verdict, reprobe_due, set_step,
};

const KEY: &str = "web/lb";

fn plan() -> Plan {
    hairpin_planner::desired(&ClusterSnapshot::default(), &PlannerConfig::default())
}

fn now() -> Now {
    Now {
        at: Instant::now(),
        wall: "2026-11-28T20:00:00Z".parse().unwrap(),
    }
}

/// `now`'s wall clock `ago` before, as the record writes it.
fn ago(now: &Now, ago: Duration) -> String {
    let ago = SignedDuration::try_from(ago).unwrap();
    (now.wall - ago).to_string()
}

fn was(ip: &str) -> IpModeWas {
    IpModeWas {
        ip: ip.into(),
        ip_mode: None,
    }
}

fn entry(state: ProbeState, since: String, data_plane: &str) -> NativeEntry {
    NativeEntry {
        uid: "u1".into(),
        original: vec![was("192.0.2.10")],
        state,
        since,
        reason: "before".into(),
        data_plane: data_plane.into(),
        failures: 0,
        server_version: String::new(),
        due: false,
        skipped: Vec::new(),
        put_back: String::new(),
        probe: Default::default(),
    }
}

fn record(entry: NativeEntry) -> NativeRecord {
    let mut record = NativeRecord::default();
    record.load_balancers.insert(KEY.into(), entry);
    record
}

#[test]
fn a_failed_cure_waits_its_backoff_unless_the_data_plane_changed() {
    let params = NativeParams::default();
    let now = now();
    let mut failed = entry(
        ProbeState::Failed,
        ago(&now, Duration::from_secs(60)),
        "kube-proxy@1",
    );
    failed.failures = 3;
    let mut same = record(failed.clone());
    let next = mark_due(&params, "kube-proxy@1", &plan(), &mut same, "", &now);
    assert!(!same.load_balancers[KEY].due);
    let wait = backoff(&params, 3) - Duration::from_secs(60);
    assert_eq!(next, Some(now.at + wait));

    let mut changed = record(failed);
    let next = mark_due(&params, "kube-proxy@2", &plan(), &mut changed, "", &now);
    let entry = &changed.load_balancers[KEY];
    assert!(
        entry.due,
        "a data-plane change makes a failed cure due at once"
    );
    assert_eq!(entry.failures, 0, "and starts its backoff over");
    assert_eq!(next, None);
}

#[test]
fn not_needed_is_checked_again_after_retry_and_unsupported_when_the_server_changes() {
    let params = NativeParams::default();
    let now = now();
    let old = ago(&now, params.retry + Duration::from_secs(1));
    let mut not_needed = record(entry(ProbeState::NotNeeded, old.clone(), ""));
    mark_due(&params, "", &plan(), &mut not_needed, "", &now);
    assert!(not_needed.load_balancers[KEY].due);

    let mut unsupported = entry(ProbeState::Unsupported, old, "");
    unsupported.server_version = "v1.29.0".into();
    let mut same = record(unsupported.clone());
    mark_due(&params, "", &plan(), &mut same, "v1.29.0", &now);
    assert!(!same.load_balancers[KEY].due);
    let mut upgraded = record(unsupported);
    mark_due(&params, "", &plan(), &mut upgraded, "v1.31.14", &now);
    assert!(upgraded.load_balancers[KEY].due);
}

#[test]
fn a_proven_cure_is_distrusted_at_start_and_probed_again() {
    let now = now();
    let mut record = record(entry(ProbeState::Proven, ago(&now, Duration::ZERO), ""));
    record.load_balancers.insert(
        "web/other".into(),
        entry(ProbeState::Failed, ago(&now, Duration::ZERO), ""),
    );
    assert_eq!(distrust(&plan(), &mut record, &now), vec![KEY.to_owned()]);
    let entry = &record.load_balancers[KEY];
    assert_eq!(entry.state, ProbeState::Probing);
    assert!(entry.reason.contains("(was: before)"), "{}", entry.reason);
    assert_eq!(record.load_balancers["web/other"].state, ProbeState::Failed);

    let (due, _) = reprobe_due(
        &NativeParams::default(),
        ("", now.at),
        &plan(),
        &record,
        &now,
    );
    let due: Vec<ObjectRef> = due.into_iter().map(|(s, _)| s).collect();
    assert_eq!(due, vec![ObjectRef::new("web", "lb")]);
}

#[test]
fn a_proven_cure_is_probed_again_once_a_data_plane_change_settled() {
    let params = NativeParams::default();
    let now = now();
    let record = record(entry(ProbeState::Proven, ago(&now, Duration::ZERO), "kp@1"));
    let (due, settling) = reprobe_due(&params, ("kp@1", now.at), &plan(), &record, &now);
    assert!(due.is_empty());
    assert_eq!(settling, None);

    let (due, settling) = reprobe_due(&params, ("kp@2", now.at), &plan(), &record, &now);
    assert!(due.is_empty(), "not before the change settled");
    assert_eq!(settling, Some(now.at + params.settle));

    let later = Now {
        at: now.at + params.settle,
        wall: now.wall,
    };
    let (due, _) = reprobe_due(&params, ("kp@2", now.at), &plan(), &record, &later);
    assert_eq!(due.len(), 1);
}

#[test]
fn set_step_reasserts_known_ips_and_starts_over_for_a_new_one() {
    let now = now();
    let since = ago(&now, Duration::ZERO);
    let mut proven = record(entry(ProbeState::Proven, since.clone(), ""));
    let known = [was("192.0.2.10")];
    assert_eq!(
        set_step(&mut proven, KEY, "u1", &known, true),
        SetStep::Reassert
    );
    let moved = [was("192.0.2.99")];
    assert_eq!(
        set_step(&mut proven, KEY, "u1", &moved, false),
        SetStep::Attempt
    );

    let mut failed = record(entry(ProbeState::Failed, since.clone(), ""));
    assert_eq!(
        set_step(&mut failed, KEY, "u1", &known, false),
        SetStep::Skip
    );
    // Another Service of the same name: its entry is not this one's.
    assert_eq!(
        set_step(&mut failed, KEY, "u2", &known, false),
        SetStep::Attempt
    );
    assert!(failed.load_balancers.is_empty());

    // The new attempt drops the IPs the status no longer has and keeps the new one.
    let mut record = record(entry(ProbeState::Proven, since, ""));
    begin_write(
        &mut record,
        KEY,
        "u1",
        &moved,
        SetStep::Attempt,
        Some(&["192.0.2.99"]),
        &now,
    );
    let entry = &record.load_balancers[KEY];
    assert_eq!(entry.state, ProbeState::Probing);
    assert_eq!(entry.original, vec![was("192.0.2.99")]);
}

#[test]
fn a_proof_verdict_counts_failures_and_resets_them_when_proven() {
    let now = now();
    let mut record = record(entry(ProbeState::Probing, ago(&now, Duration::ZERO), ""));
    let failed = ProbeVerdict {
        proven: false,
        definite: true,
        detail: "refused".into(),
        took: Duration::from_millis(5),
    };
    let (failures, original) = proof_verdict(&mut record, KEY, "u1", &failed, "kp@1", &now)
        .expect("a probing entry takes the verdict");
    assert_eq!((failures, original), (1, vec![was("192.0.2.10")]));
    let entry = &record.load_balancers[KEY];
    assert_eq!(entry.state, ProbeState::Failed);
    assert_eq!(entry.data_plane, "kp@1");
    // A failed entry (a fight meanwhile) takes no later verdict.
    assert!(proof_verdict(&mut record, KEY, "u1", &failed, "kp@1", &now).is_none());

    let entry = record.load_balancers.get_mut(KEY).unwrap();
    entry.state = ProbeState::Probing;
    let proven = ProbeVerdict {
        proven: true,
        ..failed
    };
    let (failures, _) = proof_verdict(&mut record, KEY, "u1", &proven, "kp@1", &now).unwrap();
    assert_eq!(failures, 0);
    assert_eq!(record.load_balancers[KEY].state, ProbeState::Proven);
    let _: Timestamp = record.load_balancers[KEY].since.parse().unwrap();
}

#[test]
fn a_refused_put_back_is_tried_again_soon_then_less_often_and_the_entry_says_why() {
    let waits: Vec<Duration> = (1..=9).map(super::put_back_wait).collect();
    assert_eq!(waits[0], Duration::from_millis(250));
    assert_eq!(waits[1], Duration::from_millis(500));
    assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
    assert_eq!(super::put_back_wait(u32::MAX), Duration::from_secs(30));
    let now = now();
    let mut record = record(entry(ProbeState::Failed, ago(&now, Duration::ZERO), ""));
    super::put_back_pending(&mut record, KEY, "409");
    assert_eq!(record.load_balancers[KEY].put_back, "409");
    super::put_back_done(&mut record, KEY);
    assert!(record.load_balancers[KEY].put_back.is_empty());
    assert_eq!(record.load_balancers[KEY].state, ProbeState::Failed);
}
