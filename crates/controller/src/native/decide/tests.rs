//! Every native state has its action, without a client: for each row, the memory (what the
//! cure remembers, the write fights, the record), the plan's native action, what the writes
//! found, then the exact steps decided and the record's state after (probing, proven, failed
//! with `Proxy` still set, restore pending, skipped, unsupported, fight, not on every node).
//! [`reconcile`] runs the driver ([`Drive`]) as the loop does, answering its steps with what
//! the writes found, and lists the steps of the cure (the driver's own I/O, the version read,
//! the record written, left out: [`super::drive`]'s tests list those too).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hairpin_planner::native::{
    IP_MODE_PROXY, IpModeWas, NativeAction, NativeEntry, NativeRecord, ProbeState,
};
use hairpin_planner::node_probes::{NodeProbe, NodeReport, NodeResult};
use hairpin_planner::{ClusterSnapshot, ObjectRef, Plan, PlannerConfig};
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Node, Service, ServiceStatus,
};

use super::super::Finished;
use super::super::memory::NativeMemory;
use super::super::probe::{Baseline, Fingerprints, ProbeVerdict};
use super::super::state::{Now, fight_target};
use super::super::{NativeParams, with_ip_mode_fights};
use super::*;
use crate::fight::{FightParams, Fights};

pub(super) const KEY: &str = "web/lb";
pub(super) const IP: &str = "192.0.2.10";

pub(super) fn service() -> ObjectRef {
    ObjectRef::new("web", "lb")
}

pub(super) fn was(ip: &str) -> IpModeWas {
    IpModeWas {
        ip: ip.into(),
        ip_mode: None,
    }
}

/// The load balancer Service `web/lb` (uid `u1`), its status saying `ip_mode` on `ips`.
pub(super) fn lb(ips: &[&str], ip_mode: Option<&str>) -> Service {
    let mut svc = Service::default();
    svc.metadata.namespace = Some("web".into());
    svc.metadata.name = Some("lb".into());
    svc.metadata.uid = Some("u1".into());
    let ingress = ips
        .iter()
        .map(|ip| LoadBalancerIngress {
            ip: Some((*ip).into()),
            ip_mode: ip_mode.map(Into::into),
            ..LoadBalancerIngress::default()
        })
        .collect();
    svc.status = Some(ServiceStatus {
        load_balancer: Some(LoadBalancerStatus {
            ingress: Some(ingress),
        }),
        ..ServiceStatus::default()
    });
    svc
}

pub(super) fn snapshot() -> ClusterSnapshot {
    ClusterSnapshot {
        services: vec![lb(&[IP], None)],
        ..ClusterSnapshot::default()
    }
}

/// A plan of these native actions.
pub(super) fn plan(actions: Vec<NativeAction>) -> Plan {
    let mut plan = hairpin_planner::desired(&ClusterSnapshot::default(), &PlannerConfig::default());
    plan.native_actions = actions;
    plan
}

pub(super) fn set_proxy(ips: &[&str], proven: bool) -> NativeAction {
    NativeAction::SetProxy {
        service: service(),
        uid: "u1".into(),
        ips: ips.iter().map(|ip| was(ip)).collect(),
        proven,
    }
}

pub(super) fn put_back_action() -> NativeAction {
    NativeAction::PutBack {
        service: service(),
        uid: "u1".into(),
        original: vec![was(IP)],
        reason: "the cure failed".into(),
    }
}

pub(super) fn now() -> Now {
    Now {
        at: Instant::now(),
        wall: "2026-12-06T17:00:00Z".parse().unwrap(),
    }
}

/// The record of one entry `state`, since `now`.
pub(super) fn record(state: ProbeState, now: &Now) -> NativeRecord {
    let mut record = NativeRecord::default();
    record.load_balancers.insert(
        KEY.into(),
        NativeEntry {
            uid: "u1".into(),
            original: vec![was(IP)],
            state,
            since: now.wall.to_string(),
            reason: String::new(),
            data_plane: String::new(),
            failures: 0,
            server_version: String::new(),
            due: false,
            skipped: Vec::new(),
            put_back: String::new(),
            probe: Default::default(),
        },
    );
    record
}

/// The memory of an instance that has started (the Nodes listed; nothing distrusted).
pub(super) fn memory(now: &Now) -> (NativeMemory, Fights) {
    let mut mem = NativeMemory::new(now.at);
    mem.nodes = Some(String::new());
    mem.started = true;
    let fight = FightParams::default();
    (mem, with_ip_mode_fights(Fights::new(fight.clone()), &fight))
}

/// What the writes find, in order; and what each read of the API server's version finds
/// (`None`: unreadable; `v1.31.14` once these are spent).
#[derive(Default)]
pub(super) struct Found {
    pub set: Vec<SetAnswer>,
    pub put_back: Vec<Restored>,
    pub versions: Vec<Option<&'static str>>,
}

/// A step in a line.
pub(super) fn line(step: &Step) -> String {
    match step {
        Step::Publish {
            service,
            warning,
            reason,
            ..
        } => format!(
            "{} {service} {reason}",
            if *warning { "warning" } else { "normal" }
        ),
        Step::Metric(metric) => format!("metric {metric:?}"),
        Step::StopProbe(key) => format!("stop probe {key}"),
        Step::Baseline { service, ips, .. } => format!("baseline {service} {}", ips.len()),
        Step::Prove { service, proof, .. } => format!("prove {service} {proof:?}"),
        Step::SetProxy(set) => format!(
            "set Proxy {} on {:?} (reassert {}, record {:?})",
            set.service,
            set.ips.iter().map(|w| w.ip.as_str()).collect::<Vec<_>>(),
            set.reassert,
            set.record.load_balancers.get(KEY).map(|e| e.state),
        ),
        Step::PutBack(put_back) => {
            format!("put back {} (forget {})", put_back.service, put_back.forget)
        }
        Step::ReadVersion => "read version".to_owned(),
        Step::WriteRecord(record) => format!("write record {:?}", state_of(record)),
        Step::ProbesRunning => "probes running?".to_owned(),
    }
}

/// What one reconcile's driver handed out: every step, one [`line`] each; the notes of its
/// Events; when to look again.
pub(super) struct Driven {
    pub steps: Vec<String>,
    pub notes: Vec<String>,
    pub requeue: Option<Instant>,
}

/// One reconcile's native step without a client: the driver over `record` (as the snapshot
/// shows it; the record built replaces it), its steps answered with `found` (no probe
/// running at the end), every step listed.
pub(super) fn drive(
    (mem, fights): &mut (NativeMemory, Fights),
    record: &mut NativeRecord,
    (plan, snapshot, params): (&Plan, &ClusterSnapshot, &NativeParams),
    mut found: Found,
    now: &Now,
) -> Driven {
    let mut cx = Cx {
        params,
        mem,
        fights,
        plan,
        snapshot,
        server: String::new(),
    };
    let mut drive = Drive::new(Ok(record.clone()));
    let mut done = Vec::new();
    let mut answer = None;
    let requeue = loop {
        let step = match drive.next(&mut cx, answer.take(), now) {
            Next::Step(step) => step,
            Next::Done(requeue) => break requeue,
        };
        answer = match &step {
            Step::ReadVersion => {
                let version = if found.versions.is_empty() {
                    Some("v1.31.14")
                } else {
                    found.versions.remove(0)
                };
                Some(Answer::Version(version.map(str::to_owned)))
            }
            Step::WriteRecord(_) => Some(Answer::RecordWritten),
            Step::SetProxy(_) => Some(Answer::Set(found.set.remove(0))),
            Step::PutBack(_) => Some(Answer::PutBack(found.put_back.remove(0))),
            Step::ProbesRunning => Some(Answer::ProbesRunning(false)),
            _ => None,
        };
        done.push(step);
    };
    assert!(
        found.set.is_empty() && found.put_back.is_empty(),
        "writes not made"
    );
    drive.record().clone_into(record);
    let notes = done
        .iter()
        .filter_map(|s| match s {
            Step::Publish { note, .. } => Some(note.clone()),
            _ => None,
        })
        .collect();
    Driven {
        steps: done.iter().map(line).collect(),
        notes,
        requeue,
    }
}

/// [`drive`], the steps of the cure only (the driver's own I/O left out). Returns the steps,
/// the notes of the Events, and when to look again.
fn reconcile(
    memory: &mut (NativeMemory, Fights),
    record: &mut NativeRecord,
    scene: (&Plan, &ClusterSnapshot, &NativeParams),
    found: Found,
    now: &Now,
) -> (Vec<String>, Vec<String>, Option<Instant>) {
    let Driven {
        mut steps,
        notes,
        requeue,
    } = drive(memory, record, scene, found, now);
    steps.retain(|s| {
        !(s == "read version" || s.starts_with("write record") || s == "probes running?")
    });
    (steps, notes, requeue)
}

pub(super) fn state_of(record: &NativeRecord) -> Option<ProbeState> {
    record.load_balancers.get(KEY).map(|e| e.state)
}

#[test]
fn probing_a_new_cure_baseline_first_then_the_record_the_write_and_the_proof() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = snapshot();
    let plan = plan(vec![set_proxy(&[IP], false)]);
    let mut memory = memory(&now);
    // The Nodes not listed yet: nothing, looked at again shortly.
    memory.0.nodes = None;
    let mut record = NativeRecord::default();
    let scene = (&plan, &snapshot, &params);
    let (steps, _, requeue) = reconcile(&mut memory, &mut record, scene, Found::default(), &now);
    assert!(steps.is_empty(), "{steps:?}");
    assert_eq!(requeue, Some(now.at + params.interval));
    // Listed: the probe without a header first, nothing written.
    memory.0.nodes = Some(String::new());
    let (steps, _, _) = reconcile(&mut memory, &mut record, scene, Found::default(), &now);
    assert_eq!(steps, ["baseline web/lb 1"]);
    assert_eq!(record, NativeRecord::default());
    // The problem shown: the record (probing) before the status, then the Event and the proof.
    let shown = Baseline::Shown {
        unreachable: Vec::new(),
        receiver: Fingerprints::new(),
    };
    let finished = Finished::Baseline {
        uid: "u1".into(),
        ips: vec![was(IP)],
        baseline: shown,
    };
    memory.0.verdicts.insert(KEY.into(), finished);
    let found = Found {
        set: vec![SetAnswer::Applied],
        ..Found::default()
    };
    let (steps, notes, _) = reconcile(&mut memory, &mut record, scene, found, &now);
    assert_eq!(
        steps,
        [
            "set Proxy web/lb on [\"192.0.2.10\"] (reassert false, record Some(Probing))",
            "metric IpModeWrite(\"set\")",
            "normal web/lb IpModeProxySet",
            "prove web/lb AfterWrite",
            // A `probing` cure is always probed (one probe at a time per Service: the
            // sensors start no second one while the first runs).
            "prove web/lb AfterWrite",
        ]
    );
    assert!(notes[0].starts_with("hairpin set ipMode: Proxy on 192.0.2.10"));
    assert_eq!(state_of(&record), Some(ProbeState::Probing));
}

#[test]
fn proven_by_the_proof_then_reasserted_over_a_rebuild() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = snapshot();
    let mut memory = memory(&now);
    let mut record = record(ProbeState::Probing, &now);
    let verdict = ProbeVerdict {
        proven: true,
        definite: false,
        detail: "answered".into(),
        took: Duration::from_millis(700),
    };
    let finished = Finished::Proof {
        uid: "u1".into(),
        verdict,
    };
    memory.0.verdicts.insert(KEY.into(), finished);
    let empty = plan(Vec::new());
    let scene = (&empty, &snapshot, &params);
    let (steps, _, _) = reconcile(&mut memory, &mut record, scene, Found::default(), &now);
    assert_eq!(
        steps,
        [
            "metric Verdict(\"proven\")",
            "normal web/lb NativeCureProven"
        ]
    );
    assert_eq!(state_of(&record), Some(ProbeState::Proven));
    // Another writer rebuilt the status without Proxy: set again, no new probe.
    let plan = plan(vec![set_proxy(&[IP], true)]);
    let found = Found {
        set: vec![SetAnswer::Applied],
        ..Found::default()
    };
    let scene = (&plan, &snapshot, &params);
    let (steps, _, _) = reconcile(&mut memory, &mut record, scene, found, &now);
    assert_eq!(
        steps,
        [
            "set Proxy web/lb on [\"192.0.2.10\"] (reassert true, record Some(Proven))",
            "metric IpModeWrite(\"reassert\")",
            "normal web/lb IpModeProxyReasserted",
        ]
    );
}

#[test]
fn failed_with_proxy_still_set_is_put_back_and_a_refusal_stays_pending() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = snapshot();
    let mut memory = memory(&now);
    let mut record = record(ProbeState::Probing, &now);
    let verdict = ProbeVerdict {
        proven: false,
        definite: true,
        detail: "refused".into(),
        took: Duration::from_millis(400),
    };
    let finished = Finished::Proof {
        uid: "u1".into(),
        verdict,
    };
    memory.0.verdicts.insert(KEY.into(), finished);
    let empty = plan(Vec::new());
    // The put-back answered 409: pending, the entry says why, tried again in 250 ms.
    let found = Found {
        put_back: vec![Restored::Conflict],
        ..Found::default()
    };
    let scene = (&empty, &snapshot, &params);
    let (steps, notes, requeue) = reconcile(&mut memory, &mut record, scene, found, &now);
    assert_eq!(
        steps,
        [
            "metric Verdict(\"failed\")",
            "put back web/lb (forget false)",
            "metric PutBacksPending(1)",
            "warning web/lb IpModeNotRestored",
        ]
    );
    assert!(notes[0].contains("409 Conflict"), "{notes:?}");
    assert_eq!(state_of(&record), Some(ProbeState::Failed));
    assert!(record.load_balancers[KEY].put_back.contains("409"));
    assert_eq!(requeue, Some(now.at + Duration::from_millis(250)));
    // Restore pending: the plan's put-back is not due yet: only the probe stops.
    let plan = plan(vec![put_back_action()]);
    let scene = (&plan, &snapshot, &params);
    let (steps, _, _) = reconcile(&mut memory, &mut record, scene, Found::default(), &now);
    assert_eq!(steps, ["stop probe web/lb"]);
    // Due: put back, applied; the fight count over ipMode starts over.
    let later = Now {
        at: now.at + Duration::from_millis(300),
        ..now
    };
    let found = Found {
        put_back: vec![Restored::Applied],
        ..Found::default()
    };
    let (steps, _, requeue) = reconcile(&mut memory, &mut record, scene, found, &later);
    assert_eq!(
        steps,
        [
            "stop probe web/lb",
            "put back web/lb (forget false)",
            "metric IpModeWrite(\"restore\")",
            "warning web/lb IpModeRestored",
            "metric PutBacksPending(0)",
        ]
    );
    assert!(record.load_balancers[KEY].put_back.is_empty());
    assert!(memory.0.put_backs.is_empty());
    assert_ne!(requeue, Some(later.at + Duration::from_millis(250)));
}

#[test]
fn skipped_ips_the_baseline_could_not_reach_stay_vip() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = ClusterSnapshot {
        services: vec![lb(&[IP, "2001:db8::10"], None)],
        ..ClusterSnapshot::default()
    };
    let mut memory = memory(&now);
    let unreachable = vec![("2001:db8::10".parse().unwrap(), "no route".to_owned())];
    let shown = Baseline::Shown {
        unreachable,
        receiver: Fingerprints::new(),
    };
    let finished = Finished::Baseline {
        uid: "u1".into(),
        ips: vec![was(IP), was("2001:db8::10")],
        baseline: shown,
    };
    memory.0.verdicts.insert(KEY.into(), finished);
    let mut record = NativeRecord::default();
    let plan = plan(vec![set_proxy(&[IP, "2001:db8::10"], false)]);
    let found = Found {
        set: vec![SetAnswer::Applied],
        ..Found::default()
    };
    let scene = (&plan, &snapshot, &params);
    let (steps, notes, _) = reconcile(&mut memory, &mut record, scene, found, &now);
    assert_eq!(
        steps[0],
        "set Proxy web/lb on [\"192.0.2.10\"] (reassert false, record Some(Probing))"
    );
    assert_eq!(record.load_balancers[KEY].skipped, ["2001:db8::10"]);
    assert!(
        notes[0].contains("2001:db8::10 cannot be reached"),
        "{notes:?}"
    );
    // A failed cure whose backoff is not over: the plan's proposal is skipped. (The snapshot
    // shows this record: no lag behind the one written last.)
    memory.0.written = None;
    let mut failed = record.clone();
    failed.load_balancers.get_mut(KEY).unwrap().state = ProbeState::Failed;
    failed.load_balancers.get_mut(KEY).unwrap().failures = 1;
    let (steps, _, _) = reconcile(&mut memory, &mut failed, scene, Found::default(), &now);
    assert!(steps.is_empty(), "{steps:?}");
}

#[test]
fn unsupported_when_the_api_server_drops_it_and_what_kept_proxy_goes_back() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = snapshot();
    let mut memory = memory(&now);
    memory
        .0
        .shown
        .insert(KEY.into(), ("u1".into(), now.at, Vec::new()));
    let mut record = NativeRecord::default();
    let plan = plan(vec![set_proxy(&[IP], false)]);
    let found = Found {
        set: vec![SetAnswer::Dropped(Box::new(lb(&[IP], Some(IP_MODE_PROXY))))],
        put_back: vec![Restored::Applied],
        versions: vec![Some("v1.29.9")],
    };
    let scene = (&plan, &snapshot, &params);
    let (steps, notes, _) = reconcile(&mut memory, &mut record, scene, found, &now);
    assert_eq!(
        steps,
        [
            "set Proxy web/lb on [\"192.0.2.10\"] (reassert false, record Some(Probing))",
            "metric IpModeWrite(\"set\")",
            "metric Verdict(\"unsupported\")",
            "warning web/lb IpModeDropped",
            "put back web/lb (forget false)",
            "metric IpModeWrite(\"restore\")",
            "warning web/lb IpModeRestored",
            "metric PutBacksPending(0)",
        ]
    );
    assert!(
        notes[0].contains("the API server (v1.29.9) dropped"),
        "{notes:?}"
    );
    let entry = &record.load_balancers[KEY];
    assert_eq!(entry.state, ProbeState::Unsupported);
    assert_eq!(entry.server_version, "v1.29.9");
}

#[test]
fn a_writer_that_keeps_removing_proxy_is_a_fight_the_cure_fails_and_backs_off() {
    let now = now();
    let params = NativeParams::default();
    let snapshot = ClusterSnapshot {
        services: vec![lb(&[IP], None)],
        ..ClusterSnapshot::default()
    };
    let mut memory = memory(&now);
    // hairpin wrote Proxy three times, a second apart: twice reverted already.
    let target = fight_target(&service());
    for n in 0..3 {
        let at = now.at - Duration::from_secs(3 - n);
        memory.1.written(&target, Some(IP_MODE_PROXY.into()), at);
    }
    let mut record = record(ProbeState::Proven, &now);
    let plan = plan(vec![set_proxy(&[IP], true)]);
    let scene = (&plan, &snapshot, &params);
    let (steps, notes, _) = reconcile(&mut memory, &mut record, scene, Found::default(), &now);
    assert_eq!(
        steps,
        [
            "metric Revert(\"another writer\")",
            "stop probe web/lb",
            "metric Verdict(\"failed\")",
            "warning web/lb IpModeWriteReverted",
        ]
    );
    assert!(notes[0].contains("3 times within 30s"), "{notes:?}");
    assert_eq!(state_of(&record), Some(ProbeState::Failed));
    assert!(memory.1.target_in_fight(&target));
    // ipMode's fight is apart from hairpin's own Services'.
    assert!(!memory.1.in_fight("Service "));
}

#[test]
fn not_on_every_node_a_nodes_failure_ends_the_cure_and_holds_the_put_back() {
    let now = now();
    let params = NativeParams {
        node_reports: Some(Duration::from_secs(60)),
        ..NativeParams::default()
    };
    let mut memory = memory(&now);
    let mut record = record(ProbeState::Proven, &now);
    let attempt = record.load_balancers[KEY].attempt().to_owned();
    let probe = NodeProbe {
        uid: "u1".into(),
        attempt,
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
            probes: Ok(BTreeMap::from([(KEY.to_owned(), probe)])),
        }]),
        ..ClusterSnapshot::default()
    };
    let empty = plan(Vec::new());
    let scene = (&empty, &snapshot, &params);
    let (steps, notes, requeue) =
        reconcile(&mut memory, &mut record, scene, Found::default(), &now);
    assert_eq!(
        steps,
        [
            "stop probe web/lb",
            "metric Verdict(\"failed\")",
            "warning web/lb NativeCureNotOnEveryNode",
        ]
    );
    assert!(
        notes[0].contains("not honoured on node node-b (") && notes[0].contains("no answer"),
        "{notes:?}"
    );
    assert_eq!(state_of(&record), Some(ProbeState::Failed));
    // `ipMode` is put back only once the DNS rules brought back have settled.
    assert_eq!(
        memory.0.settling.get(KEY),
        Some(&(now.at + params.dns_settle))
    );
    assert!(requeue.is_some());
    let plan = plan(vec![put_back_action()]);
    let scene = (&plan, &snapshot, &params);
    let (steps, _, _) = reconcile(&mut memory, &mut record, scene, Found::default(), &now);
    assert_eq!(steps, ["stop probe web/lb"]);
    let settled = Now {
        at: now.at + params.dns_settle + Duration::from_millis(1),
        ..now
    };
    let found = Found {
        put_back: vec![Restored::Applied],
        ..Found::default()
    };
    let (steps, _, _) = reconcile(&mut memory, &mut record, scene, found, &settled);
    assert_eq!(steps[1], "put back web/lb (forget false)");
}
