//! Every DNS state has its action, without a client: for each row, the memory, the plan and
//! what the writes found, then the exact actions decided, the DNS state remembered and the
//! effects that follow (corefile and coredns-custom modes, the `DNSEndpoint`s, a mode switch,
//! a revert, a write fight, a fight over, a restored key, a missing ConfigMap, a failed
//! write, no plan).

use std::time::{Duration, Instant};

use hairpin_planner::{ClusterSnapshot, DnsMode, Plan, PlannerConfig};
use k8s_openapi::api::core::v1::ConfigMap;

use super::super::decide::{Actions, DnsIntent, DnsTarget, Effect, Scene, actions, after};
use super::super::observed::{
    DnsObserved, EndpointsObserved, KeyObserved, ObjectsObserved, Observed,
};
use super::*;
use crate::apply::ObjectChanges;
use crate::fight::Decision;

const COREFILE: &str = "kube-system/coredns/Corefile";
const CUSTOM: &str = "kube-system/coredns-custom/hairpin.override";

use crate::test_support::{example_cluster as example, planner};

/// Sets key `key` of ConfigMap `namespace/name` in `snapshot` (creating the ConfigMap).
fn put(snapshot: &mut ClusterSnapshot, namespace: &str, name: &str, key: &str, value: &str) {
    let found = snapshot.config_maps.iter_mut().find(|cm| {
        cm.metadata.namespace.as_deref() == Some(namespace)
            && cm.metadata.name.as_deref() == Some(name)
    });
    let cm = match found {
        Some(cm) => cm,
        None => {
            let mut cm = ConfigMap::default();
            cm.metadata.namespace = Some(namespace.into());
            cm.metadata.name = Some(name.into());
            snapshot.config_maps.push(cm);
            snapshot.config_maps.last_mut().expect("just pushed")
        }
    };
    cm.data
        .get_or_insert_default()
        .insert(key.into(), value.into());
}

/// The Corefile hairpin writes for the example cluster.
fn planned_corefile() -> String {
    let plan = hairpin_planner::desired(&example(), &planner(DnsMode::Corefile));
    plan.dns.expect("a DNS change").writes[0].desired.clone()
}

/// The DNS actions, as (target, what is done: "write", "as planned", "backed off", "clean up
/// <key>", "DNSEndpoints", "DNSEndpoints (CRD missing)", "not planned").
fn dns_actions(actions: &Actions<'_>) -> Vec<String> {
    match &actions.intent.dns {
        DnsIntent::NotPlanned { .. } => vec!["not planned".into()],
        DnsIntent::Planned {
            clean_ups, target, ..
        } => {
            let clean = clean_ups
                .iter()
                .map(|e| format!("clean up {}/{}", e.config_map(), e.key));
            let target: Vec<String> = match target {
                DnsTarget::Keys(keys) => keys
                    .iter()
                    .zip(&actions.guards.dns_keys)
                    .map(|(k, decision)| {
                        let what = match (decision, &k.edit) {
                            (Decision::BackedOff(_), Some(_)) => "backed off",
                            (_, Some(_)) => "write",
                            (_, None) => "as planned",
                        };
                        format!("{} {what}", k.write.target())
                    })
                    .collect(),
                DnsTarget::Endpoints(e) if actions.guards.endpoints_crd_missing => {
                    vec![format!("{} DNSEndpoints (CRD missing)", e.objects.len())]
                }
                DnsTarget::Endpoints(e) => vec![format!("{} DNSEndpoints", e.objects.len())],
            };
            clean.chain(target).collect()
        }
    }
}

/// An effect in a line: `set Gauge n`, `count Counter n`, `warning Kind ns/name Reason`, ...
fn line(effect: &Effect) -> String {
    match effect {
        Effect::Set(gauge, n) => format!("set {gauge:?} {n}"),
        Effect::Count(counter, n) => format!("count {counter:?} {n}"),
        Effect::Observe(histogram, v) => format!("observe {histogram:?} {v}"),
        Effect::Publish {
            regarding,
            warning,
            reason,
            ..
        } => format!(
            "{} {} {}/{} {reason}",
            if *warning { "warning" } else { "normal" },
            regarding.kind.as_deref().unwrap_or_default(),
            regarding.namespace.as_deref().unwrap_or_default(),
            regarding.name.as_deref().unwrap_or_default(),
        ),
        Effect::Forget { regarding, reason } => format!(
            "forget {} {reason}",
            regarding.name.as_deref().unwrap_or_default()
        ),
        Effect::Refused(label) => format!("refused {label}"),
        Effect::CountError(label) => format!("error {label}"),
    }
}

/// What one reconcile without a client decided and remembered.
struct Reconciled {
    /// [`dns_actions`].
    actions: Vec<String>,
    /// The DNS state remembered.
    state: DnsState,
    /// The effects that follow the writes, [`line`] by line, but the plan's gauges.
    effects: Vec<String>,
    /// Their notes, for the Events.
    notes: Vec<String>,
    /// When to run again.
    requeue: Option<Instant>,
}

/// One reconcile of `plan` from `memory` at `now`, the writes of the DNS change finding
/// `found` (hairpin's own keys and Services found as planned, the native cure idle).
fn reconcile(
    memory: Memory,
    plan: &Plan,
    snapshot: &ClusterSnapshot,
    planner: &PlannerConfig,
    found: impl FnOnce(&Actions<'_>) -> DnsObserved,
    now: Instant,
) -> (Memory, Reconciled) {
    let actions = actions(plan, snapshot, planner, memory.recall(), now);
    let mut observed = Observed {
        cleaned: actions.clean_endpoints.then_some(0),
        services: Some(ObjectsObserved {
            changes: ObjectChanges::default(),
            done: true,
        }),
        own_keys: actions
            .intent
            .own_keys
            .iter()
            .map(|(_, edit)| match edit {
                Some(_) => KeyObserved::Unchanged,
                None => KeyObserved::AsPlanned,
            })
            .collect(),
        own_keys_done: true,
        native: Some(None),
        dns: Some(found(&actions)),
        error: None,
    };
    let (memory, learnt) = remember(memory, Reported::default(), &actions, &mut observed, now);
    let scene = Scene {
        plan,
        snapshot,
        planner,
        window: memory.fights.params().window,
        now,
    };
    let verdict = after(&actions, &observed, &learnt, scene);
    let effects = verdict
        .effects
        .iter()
        .map(line)
        .filter(|l| !l.starts_with("count ServiceReverts") && !l.contains("ServiceFight"))
        .filter(|l| !l.contains("ConfigMapFight"))
        .collect();
    let notes = verdict
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Publish { note, .. } => Some(note.clone()),
            _ => None,
        })
        .collect();
    let reconciled = Reconciled {
        actions: dns_actions(&actions),
        state: memory.dns_state.clone(),
        effects,
        notes,
        requeue: verdict.requeue,
    };
    (memory, reconciled)
}

/// The DNS keys written as planned.
fn written(actions: &Actions<'_>) -> DnsObserved {
    let DnsIntent::Planned {
        target: DnsTarget::Keys(keys),
        ..
    } = &actions.intent.dns
    else {
        panic!("DNS keys: {:?}", actions.intent.dns);
    };
    DnsObserved::Keys(
        keys.iter()
            .map(|k| match &k.edit {
                Some(_) => KeyObserved::Written {
                    after: Some(k.write.desired.clone()),
                    managed_fields: Vec::new(),
                },
                None => KeyObserved::AsPlanned,
            })
            .collect(),
    )
}

/// A memory whose guard saw hairpin write `value` to `target` `times` times, a second apart
/// from `from` (the second and later: reverts).
fn wrote(mut memory: Memory, target: &str, value: &str, times: u64, from: Instant) -> Memory {
    for i in 0..times {
        let at = from + Duration::from_secs(i);
        memory.fights.written(target, Some(value.into()), at);
    }
    memory
}

fn in_place(wrote: bool) -> DnsState {
    DnsState::InPlace { wrote }
}

fn refused(state: &DnsState) -> &'static str {
    match state {
        DnsState::Refused { reason, .. } => reason,
        _ => "",
    }
}

#[test]
fn corefile_mode_writes_the_block_and_says_so() {
    let (snapshot, planner) = (example(), planner(DnsMode::Corefile));
    let plan = hairpin_planner::desired(&snapshot, &planner);
    let now = Instant::now();
    let (memory, r) = reconcile(Memory::default(), &plan, &snapshot, &planner, written, now);
    assert_eq!(r.actions, [format!("{COREFILE} write")]);
    assert_eq!(r.state, in_place(true));
    assert_eq!(
        r.effects,
        [
            "set DnsPlanErrors 0",
            "set DnsFight 0",
            "normal ConfigMap kube-system/coredns DNSUpdated"
        ]
    );
    let hostnames = plan.dns.as_ref().map_or(0, |d| d.entries.len());
    assert_eq!(
        r.notes,
        [format!("hairpin DNS rules written ({hostnames} hostnames)")]
    );
    assert_eq!(r.requeue, None);
    assert!(!memory.fights.in_fight(""));

    // As planned on the next reconcile: nothing written, nothing said.
    let mut snapshot = snapshot;
    put(
        &mut snapshot,
        "kube-system",
        "coredns",
        "Corefile",
        &planned_corefile(),
    );
    let plan = hairpin_planner::desired(&snapshot, &planner);
    let (_, r) = reconcile(memory, &plan, &snapshot, &planner, written, now);
    assert_eq!(r.actions, [format!("{COREFILE} as planned")]);
    assert_eq!(r.state, in_place(false));
    assert_eq!(r.effects, ["set DnsPlanErrors 0"]);
}

#[test]
fn coredns_custom_mode_writes_its_own_key_or_says_its_configmap_is_missing() {
    let (snapshot, planner) = (example(), planner(DnsMode::Custom));
    let plan = hairpin_planner::desired(&snapshot, &planner);
    let now = Instant::now();
    let missing = |_: &Actions<'_>| DnsObserved::Keys(vec![KeyObserved::ConfigMapMissing]);
    let (_, r) = reconcile(Memory::default(), &plan, &snapshot, &planner, missing, now);
    assert_eq!(r.actions, [format!("{CUSTOM} write")]);
    assert_eq!(refused(&r.state), "ConfigMapMissing");
    assert_eq!(r.effects, ["set DnsPlanErrors 0"]);

    let (_, r) = reconcile(Memory::default(), &plan, &snapshot, &planner, written, now);
    assert_eq!(r.state, in_place(true));
    assert_eq!(
        r.effects,
        [
            "set DnsPlanErrors 0",
            "set DnsFight 0",
            "normal ConfigMap kube-system/coredns-custom DNSUpdated"
        ]
    );
}

#[test]
fn a_mode_switch_cleans_up_the_other_mode_before_the_write() {
    let mut snapshot = example();
    put(
        &mut snapshot,
        "kube-system",
        "coredns",
        "Corefile",
        &planned_corefile(),
    );
    let planner = planner(DnsMode::Custom);
    let plan = hairpin_planner::desired(&snapshot, &planner);
    let (_, r) = reconcile(
        Memory::default(),
        &plan,
        &snapshot,
        &planner,
        written,
        Instant::now(),
    );
    assert_eq!(
        r.actions,
        [
            "clean up kube-system/coredns/Corefile".to_owned(),
            format!("{CUSTOM} write")
        ]
    );
    assert_eq!(r.state, in_place(true));

    // Away from external-dns mode, its DNSEndpoints are looked for once per run.
    let memory = Memory::default();
    let first = actions(&plan, &snapshot, &planner, memory.recall(), Instant::now());
    assert!(first.clean_endpoints);
    let (memory, _) = reconcile(memory, &plan, &snapshot, &planner, written, Instant::now());
    let again = actions(&plan, &snapshot, &planner, memory.recall(), Instant::now());
    assert!(!again.clean_endpoints);
}

#[test]
fn dns_endpoints_without_their_crd_say_so_on_every_load_balancer_and_log_once() {
    let (mut snapshot, planner) = (example(), planner(DnsMode::ExternalDns));
    // The hairpin Services, with their ClusterIPs: the DNSEndpoints' records point there.
    let plan = hairpin_planner::desired(&snapshot, &planner);
    for (i, lb) in plan.load_balancers.iter().enumerate() {
        let mut service = lb.service.clone();
        let spec = service.spec.get_or_insert_default();
        spec.cluster_ip = Some(format!("10.96.0.{}", 50 + i));
        spec.cluster_ips = Some(vec![format!("10.96.0.{}", 50 + i)]);
        snapshot.services.push(service);
    }
    let plan = hairpin_planner::desired(&snapshot, &planner);
    let lbs = plan.load_balancers.len();
    assert!(lbs > 0);
    let mut memory = Memory::default();
    memory.dns_endpoints.crd = Some(false);
    let missing = |_: &Actions<'_>| DnsObserved::Endpoints(EndpointsObserved::CrdMissing);
    let now = Instant::now();
    let (memory, r) = reconcile(memory, &plan, &snapshot, &planner, missing, now);
    let objects = plan.dns.as_ref().and_then(|d| d.dns_endpoints.as_ref());
    let objects = objects.map_or(0, |e| e.objects.len());
    assert!(objects > 0);
    assert_eq!(r.actions, [format!("{objects} DNSEndpoints (CRD missing)")]);
    assert_eq!(refused(&r.state), "CRDNotInstalled");
    assert_eq!(r.effects[0], "set DnsPlanErrors 0");
    assert_eq!(r.effects.len(), 1 + lbs);
    assert!(
        r.effects[1..]
            .iter()
            .all(|e| e.starts_with("warning Service ") && e.ends_with(" DNSEndpointCRDMissing")),
        "{:?}",
        r.effects
    );
    assert!(memory.dns_endpoints.crd_missing_logged);

    // Served again: written, announced, and the next absence is logged again.
    let mut memory = memory;
    memory.dns_endpoints.crd = Some(true);
    let created = |a: &Actions<'_>| {
        let DnsIntent::Planned {
            target: DnsTarget::Endpoints(e),
            ..
        } = &a.intent.dns
        else {
            panic!("DNSEndpoints");
        };
        let created = e
            .objects
            .iter()
            .filter_map(|o| o.object.metadata.name.clone())
            .collect();
        DnsObserved::Endpoints(EndpointsObserved::Applied(ObjectsObserved {
            changes: ObjectChanges {
                created,
                ..ObjectChanges::default()
            },
            done: true,
        }))
    };
    let (memory, r) = reconcile(memory, &plan, &snapshot, &planner, created, now);
    assert_eq!(r.actions, [format!("{objects} DNSEndpoints")]);
    assert_eq!(r.state, in_place(true));
    let mut want = vec![
        "set DnsPlanErrors 0".to_owned(),
        "count DnsReverts 0".to_owned(),
        "set DnsFight 0".to_owned(),
    ];
    want.extend(std::iter::repeat_n("normal DNSEndpoint hairpin/", objects).map(ToOwned::to_owned));
    let got: Vec<String> = r
        .effects
        .iter()
        .map(|e| match e.split_once("/") {
            Some((head, _)) if e.starts_with("normal DNSEndpoint") => format!("{head}/"),
            _ => e.clone(),
        })
        .collect();
    assert_eq!(got, want);
    assert!(!memory.dns_endpoints.crd_missing_logged);
}

#[test]
fn a_revert_is_counted_and_a_third_one_is_a_fight_backed_off_until_it_is_over() {
    let (snapshot, planner) = (example(), planner(DnsMode::Corefile));
    let plan = hairpin_planner::desired(&snapshot, &planner);
    let corefile = planned_corefile();
    let t0 = Instant::now();

    // Written once before: writing the same again is a revert (someone restored theirs).
    let memory = wrote(Memory::default(), COREFILE, &corefile, 1, t0);
    let now = t0 + Duration::from_secs(10);
    let (_, r) = reconcile(memory, &plan, &snapshot, &planner, written, now);
    assert_eq!(r.actions, [format!("{COREFILE} write")]);
    assert_eq!(r.state, in_place(true));
    assert_eq!(r.effects, ["set DnsPlanErrors 0", "count DnsReverts 1"]);

    // Reverted twice before: the third revert is a fight, backed off, said on the ConfigMap.
    let memory = wrote(Memory::default(), COREFILE, &corefile, 3, t0);
    let (memory, r) = reconcile(memory, &plan, &snapshot, &planner, written, now);
    assert_eq!(r.state, in_place(true));
    assert_eq!(
        r.effects,
        [
            "set DnsPlanErrors 0",
            "count DnsReverts 1",
            "set DnsFight 1",
            "warning ConfigMap kube-system/coredns DNSWriteReverted"
        ]
    );
    let backoff = memory.fights.params().initial_backoff;
    assert_eq!(r.requeue, Some(now + backoff));
    assert!(r.notes[0].contains("3 times within"), "{}", r.notes[0]);

    // While backed off: not written, and the state says why.
    let later = now + Duration::from_secs(1);
    let backed = |_: &Actions<'_>| DnsObserved::Keys(vec![KeyObserved::BackedOff(now + backoff)]);
    let (memory, r) = reconcile(memory, &plan, &snapshot, &planner, backed, later);
    assert_eq!(r.actions, [format!("{COREFILE} backed off")]);
    assert_eq!(refused(&r.state), "WriteFight");
    assert_eq!(r.effects, ["set DnsPlanErrors 0"]);
    assert_eq!(r.requeue, Some(now + backoff));

    // Our block held (the key as planned) a whole window after the last revert: over.
    let mut restored = snapshot.clone();
    put(
        &mut restored,
        "kube-system",
        "coredns",
        "Corefile",
        &corefile,
    );
    let plan = hairpin_planner::desired(&restored, &planner);
    let window = memory.fights.params().window;
    let calm = now + window + Duration::from_secs(1);
    let (memory, r) = reconcile(memory, &plan, &restored, &planner, written, calm);
    assert_eq!(r.actions, [format!("{COREFILE} as planned")]);
    assert_eq!(r.state, in_place(false));
    assert_eq!(r.effects, ["set DnsPlanErrors 0", "set DnsFight 0"]);
    assert!(!memory.fights.in_fight(""));
}

#[test]
fn a_restored_key_is_written_again_as_planned() {
    // The key was removed by someone (the cached copy differs from the plan again): written,
    // and as a plain write (the value before was not ours) it says so.
    let (snapshot, planner) = (example(), planner(DnsMode::Custom));
    let plan = hairpin_planner::desired(&snapshot, &planner);
    let now = Instant::now();
    let memory = wrote(Memory::default(), CUSTOM, "an older block of ours", 1, now);
    let (memory, r) = reconcile(memory, &plan, &snapshot, &planner, written, now);
    assert_eq!(r.actions, [format!("{CUSTOM} write")]);
    assert_eq!(r.state, in_place(true));
    assert_eq!(
        r.effects,
        [
            "set DnsPlanErrors 0",
            "set DnsFight 0",
            "normal ConfigMap kube-system/coredns-custom DNSUpdated"
        ]
    );
    assert!(!memory.fights.in_fight(""));
}

#[test]
fn a_failed_write_and_no_plan_say_why_dns_is_not_in_place() {
    let (snapshot, planner) = (example(), planner(DnsMode::Corefile));
    let plan = hairpin_planner::desired(&snapshot, &planner);
    let failed = |_: &Actions<'_>| DnsObserved::Keys(vec![KeyObserved::Failed("boom".into())]);
    let (_, r) = reconcile(
        Memory::default(),
        &plan,
        &snapshot,
        &planner,
        failed,
        Instant::now(),
    );
    assert_eq!(
        r.state,
        DnsState::Refused {
            reason: "WriteFailed",
            message: "cannot write kube-system/coredns key Corefile: boom".into()
        }
    );
    assert_eq!(
        r.effects,
        [
            "set DnsPlanErrors 0",
            "count DnsWriteFailures 1",
            "warning ConfigMap kube-system/coredns DNSWriteFailed"
        ]
    );

    let mut plan = plan;
    plan.dns = None;
    let nothing = |_: &Actions<'_>| DnsObserved::NotPlanned;
    let (_, r) = reconcile(
        Memory::default(),
        &plan,
        &snapshot,
        &planner,
        nothing,
        Instant::now(),
    );
    assert_eq!(r.actions, ["not planned"]);
    assert_eq!(refused(&r.state), "NotPlanned");
    assert_eq!(r.effects, ["set DnsPlanErrors 0"]);

    // Not reached (the reconcile stopped before the DNS change): the statuses are left.
    let (snapshot, planner) = (example(), planner_of(DnsMode::Corefile));
    let plan = hairpin_planner::desired(&snapshot, &planner);
    let memory = Memory::default();
    let actions = actions(&plan, &snapshot, &planner, memory.recall(), Instant::now());
    let mut observed = Observed::default();
    let (memory, _) = remember(
        memory,
        Reported::default(),
        &actions,
        &mut observed,
        Instant::now(),
    );
    assert_eq!(memory.dns_state, DnsState::NotReached);
}

fn planner_of(dns_mode: DnsMode) -> PlannerConfig {
    planner(dns_mode)
}
