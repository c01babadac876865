//! `decide` without a client: the Events, metric choices and write-fight policy of a plan.

use std::time::{Duration, Instant};

use hairpin_planner::admission::{Refusal, RefusalReason};
use hairpin_planner::{
    ClusterSnapshot, DnsChange, DnsWrite, ObjectRef, Plan, PlannerConfig, WriteEdit,
};

use super::*;

const WINDOW: Duration = Duration::from_secs(60);

fn empty_plan() -> Plan {
    hairpin_planner::desired(&ClusterSnapshot::default(), &PlannerConfig::default())
}

fn refusal(kind: &str, name: &str, hostname: &str) -> Refusal {
    Refusal {
        hostname: hostname.into(),
        source: format!("{kind} tenant/{name}"),
        kind: kind.into(),
        object: ObjectRef::new("tenant", name),
        load_balancer: ObjectRef::new("ingress", "lb"),
        reason: RefusalReason::Invalid,
        detail: "not a hostname".into(),
    }
}

fn dns_write() -> DnsWrite {
    DnsWrite {
        config_map: ObjectRef::new("kube-system", "coredns-custom"),
        key: "hairpin.override".into(),
        edit: WriteEdit::Key { value: None },
        current: None,
        desired: String::new(),
        changed: true,
        object: None,
    }
}

/// The Events among `effects`: (kind, name, warning, reason, note).
fn published(effects: &[Effect]) -> Vec<(String, String, bool, &'static str, String)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Publish {
                regarding,
                warning,
                reason,
                note,
            } => Some((
                regarding.kind.clone().unwrap_or_default(),
                regarding.name.clone().unwrap_or_default(),
                *warning,
                *reason,
                note.clone(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn a_refused_claim_is_counted_once_and_forgotten_when_gone() {
    let mut plan = empty_plan();
    plan.refused = vec![
        refusal("Ingress", "web", "bad_name"),
        refusal("Ingress", "web", "other_bad"),
    ];
    let first = reports(&plan, &ClusterSnapshot::default(), &Reported::default());
    let counted = |effects: &[Effect]| {
        effects
            .iter()
            .filter(|e| **e == Effect::Refused("invalid"))
            .count()
    };
    assert_eq!(counted(&first.effects), 2);
    let events = published(&first.effects);
    assert_eq!(events.len(), 1, "one Event per object: {events:?}");
    let (kind, name, warning, reason, note) = &events[0];
    assert_eq!((kind.as_str(), name.as_str()), ("Ingress", "web"));
    assert!(*warning);
    assert_eq!(*reason, reason::HOSTNAME_REFUSED);
    assert!(note.starts_with("hairpin does not redirect 2 of this object's hostnames: "));
    assert_eq!(first.reported.refused.len(), 2);

    // The same claims again: the Event again (the recorder deduplicates), no count.
    let again = reports(&plan, &ClusterSnapshot::default(), &first.reported);
    assert_eq!(counted(&again.effects), 0);
    assert_eq!(published(&again.effects).len(), 1);

    // Gone: the Event series is forgotten, nothing counted, nothing remembered.
    let gone = reports(&empty_plan(), &ClusterSnapshot::default(), &again.reported);
    assert_eq!(counted(&gone.effects), 0);
    assert!(published(&gone.effects).is_empty());
    assert!(gone.effects.iter().any(|e| matches!(
        e,
        Effect::Forget { regarding, reason } if regarding.name.as_deref() == Some("web") && *reason == reason::HOSTNAME_REFUSED
    )));
    assert!(gone.reported.refused.is_empty());
}

#[test]
fn an_own_key_fight_backs_off_with_one_warning_naming_the_writer() {
    let own = &own_keys(&PlannerConfig::default())[0];
    let now = Instant::now();
    let backoff = Duration::from_secs(30);
    let fight = Observation::Fight { count: 3, backoff };
    let verdict = own_key_written(own, fight, Some("argocd"), WINDOW, now);
    assert_eq!(verdict.requeue, Some(now + backoff));
    assert_eq!(
        verdict.effects[0],
        Effect::Count(Counter::ConfigMapReverts, 1)
    );
    let events = published(&verdict.effects);
    assert_eq!(events.len(), 1);
    let (kind, name, warning, reason, note) = &events[0];
    assert_eq!(
        (kind.as_str(), name.as_str()),
        ("ConfigMap", own.name.as_str())
    );
    assert!(*warning);
    assert_eq!(*reason, reason::CONFIG_MAP_FIGHT);
    assert!(note.contains("field manager \"argocd\""), "{note}");
    assert!(note.contains("3 times within 60s"), "{note}");

    let reverted = own_key_written(own, Observation::Reverted { count: 1 }, None, WINDOW, now);
    assert_eq!(
        reverted,
        Verdict::of(vec![Effect::Count(Counter::ConfigMapReverts, 1)])
    );
    assert_eq!(
        own_key_written(own, Observation::Normal, None, WINDOW, now),
        Verdict::default()
    );
}

#[test]
fn restored_objects_warn_per_fight_and_requeue_at_the_soonest() {
    let now = Instant::now();
    let later = now + Duration::from_secs(100);
    let restored_objects = [
        Restored {
            name: "hairpin-a",
            observation: Observation::Reverted { count: 1 },
            writer: Some("kubectl"),
        },
        Restored {
            name: "hairpin-b",
            observation: Observation::Fight {
                count: 3,
                backoff: Duration::from_secs(10),
            },
            writer: None,
        },
    ];
    let verdict = restored(
        "Service",
        "hairpin",
        &restored_objects,
        [later].into_iter(),
        true,
        WINDOW,
        now,
    );
    assert_eq!(verdict.requeue, Some(now + Duration::from_secs(10)));
    assert_eq!(
        verdict.effects[..2],
        [
            Effect::Count(Counter::ServiceReverts, 2),
            Effect::Set(Gauge::ServiceFight, 1)
        ]
    );
    let events = published(&verdict.effects);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].1, "hairpin-b");
    assert_eq!(events[0].3, reason::SERVICE_FIGHT);
    assert!(
        events[0].4.contains("another writer (unnamed"),
        "{}",
        events[0].4
    );

    let endpoints = restored(
        "DNSEndpoint",
        "hairpin",
        &[],
        [later].into_iter(),
        false,
        WINDOW,
        now,
    );
    assert_eq!(endpoints.requeue, Some(later));
    assert_eq!(
        endpoints.effects,
        [
            Effect::Count(Counter::DnsReverts, 0),
            Effect::Set(Gauge::DnsFight, 0)
        ]
    );
}

#[test]
fn a_dns_write_is_announced_and_a_fight_names_the_fix() {
    let plan = empty_plan();
    let dns = DnsChange {
        mode: PlannerConfig::default().dns_mode,
        cluster_domain: "cluster.local".into(),
        entries: Vec::new(),
        writes: Vec::new(),
        dns_endpoints: None,
    };
    let write = dns_write();
    let now = Instant::now();
    let written = |observation| DnsWritten {
        dns: &dns,
        write: &write,
        observation,
        managed_fields: &[],
        writer: Some("helm"),
        coredns: &plan.coredns,
    };
    let planner = PlannerConfig::default();
    let normal = dns_written(&written(Observation::Normal), &planner, WINDOW, now);
    assert_eq!(normal.requeue, None);
    assert_eq!(normal.effects[0], Effect::Set(Gauge::DnsFight, 0));
    let events = published(&normal.effects);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].3, reason::DNS_UPDATED);
    assert!(!events[0].2, "a Normal Event");
    assert_eq!(events[0].4, "hairpin DNS rules written (0 hostnames)");

    let backoff = Duration::from_secs(20);
    let fight = Observation::Fight { count: 4, backoff };
    let fought = dns_written(&written(fight), &planner, WINDOW, now);
    assert_eq!(fought.requeue, Some(now + backoff));
    assert_eq!(
        fought.effects[..2],
        [
            Effect::Count(Counter::DnsReverts, 1),
            Effect::Set(Gauge::DnsFight, 1)
        ]
    );
    let events = published(&fought.effects);
    assert_eq!(events[0].3, reason::DNS_FIGHT);
    assert!(events[0].2);
    assert!(
        events[0].4.contains("field manager \"helm\""),
        "{}",
        events[0].4
    );
    assert!(
        events[0].4.contains("4 times within 60s"),
        "{}",
        events[0].4
    );

    let (failed, state) = dns_write_failed(&write, &"forbidden");
    assert_eq!(
        failed.effects[0],
        Effect::Count(Counter::DnsWriteFailures, 1)
    );
    assert_eq!(
        state,
        DnsState::Refused {
            reason: "WriteFailed",
            message: "cannot write kube-system/coredns-custom key hairpin.override: forbidden"
                .into()
        }
    );
    assert!(matches!(
        dns_backed_off(&write),
        DnsState::Refused {
            reason: "WriteFight",
            ..
        }
    ));
}

#[test]
fn no_dns_change_without_errors_says_so_without_an_event() {
    let mut plan = empty_plan();
    plan.dns = None;
    plan.errors.clear();
    let (verdict, state) = dns_not_planned(&plan);
    assert_eq!(verdict.effects, [Effect::Set(Gauge::DnsPlanErrors, 0)]);
    assert!(matches!(
        state,
        DnsState::Refused {
            reason: "NotPlanned",
            ..
        }
    ));
}

#[test]
fn unverified_hostnames_are_published_when_their_list_changes() {
    use hairpin_planner::verify::{Unverified, UnverifiedReason};
    let lb = ObjectRef::new("ingress", "lb");
    let unverified = |hostname: &str, reason| Unverified {
        hostname: hostname.into(),
        load_balancer: lb.clone(),
        reason,
        detail: format!("{hostname} resolves to 198.51.100.9, not this load balancer"),
        sources: Vec::new(),
    };
    let mut plan = empty_plan();
    plan.verification.unverified = vec![
        unverified("shop.example.com", UnverifiedReason::ResolvesElsewhere),
        // A moment's state, not news.
        unverified("new.example.com", UnverifiedReason::NotResolved),
    ];
    let snapshot = ClusterSnapshot::default();
    let first = reports(&plan, &snapshot, &Reported::default());
    let events = published(&first.effects);
    assert_eq!(events.len(), 1, "{events:?}");
    let (kind, name, warning, reason, note) = &events[0];
    assert_eq!((kind.as_str(), name.as_str()), ("Service", "lb"));
    assert!(*warning);
    assert_eq!(*reason, reason::HOSTNAME_UNVERIFIED);
    assert!(note.contains("shop.example.com resolves to"), "{note}");
    assert!(!note.contains("new.example.com"), "{note}");

    // Unchanged: nothing published again.
    let again = reports(&plan, &snapshot, &first.reported);
    assert!(published(&again.effects).is_empty());
    assert_eq!(again.reported, first.reported);

    // Changed: published again.
    plan.verification
        .unverified
        .push(unverified("cart.example.com", UnverifiedReason::NxDomain));
    let changed = reports(&plan, &snapshot, &again.reported);
    assert_eq!(published(&changed.effects).len(), 1);
}
