//! The propagation checks' reports without a client, one row per state.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use super::*;
use crate::propagation::{Answer, PodsSeen};

fn seen(id: u64, outcome: Option<CheckOutcome>) -> CheckSeen {
    CheckSeen {
        id,
        measured: true,
        outcome,
        lb_uid: Some("uid-7".into()),
        names: vec!["shop.example.com".into()],
        expected: vec!["10.96.0.20".parse::<IpAddr>().unwrap()],
        coredns_pods: "k8s-app=kube-dns".into(),
        ..CheckSeen::default()
    }
}

fn outcome(effective: bool) -> CheckOutcome {
    let mut wrong = BTreeMap::new();
    if !effective {
        wrong.insert(
            ("cluster DNS".to_owned(), "shop.example.com".to_owned()),
            Answer::NoRecords,
        );
    }
    CheckOutcome {
        effective,
        elapsed: Duration::from_millis(2400),
        wrong,
        unreachable: Vec::new(),
        connect: effective.then_some(Ok(())),
    }
}

fn notes(effects: &[Effect]) -> Vec<(&'static str, bool, &str)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Publish {
                reason,
                warning,
                note,
                ..
            } => Some((*reason, *warning, note.as_str())),
            _ => None,
        })
        .collect()
}

#[test]
fn each_outcome_is_reported_once_with_its_event_and_measure() {
    let (shop, blog, idle) = (
        ObjectRef::new("shop", "lb"),
        ObjectRef::new("blog", "lb"),
        ObjectRef::new("idle", "lb"),
    );
    let mut checks = CheckMemory::new();
    checks.insert(shop.clone(), seen(3, Some(outcome(true))));
    let mut failed = seen(4, Some(outcome(false)));
    failed.pods = Some(PodsSeen {
        total: 2,
        unready: 1,
    });
    checks.insert(blog.clone(), failed);
    checks.insert(idle.clone(), seen(5, None));
    let mut done = seen(6, Some(outcome(true)));
    done.reported = true;
    checks.insert(ObjectRef::new("done", "lb"), done);

    let (effects, reported) = check_reports(&checks, "kube-system");
    assert_eq!(reported, vec![(blog, 4), (shop, 3)]);
    assert!(effects.contains(&Effect::Observe(Histogram::DnsPropagation, 2.4)));
    assert_eq!(
        notes(&effects),
        vec![
            (
                reason::DNS_NOT_EFFECTIVE,
                true,
                "after 2s, cluster DNS answers shop.example.com with no address (wanted 10.96.0.20). Likely cause: 1 of 2 CoreDNS pods are not ready: CoreDNS probably rejected the new Corefile and kept the old one; see `kubectl -n kube-system logs -l k8s-app=kube-dns`"
            ),
            (
                reason::HAIRPIN_EFFECTIVE,
                false,
                "the cluster DNS answers shop.example.com with the hairpin Service (10.96.0.20) 2.4s after the write; a TCP connect to the hairpin Service succeeded"
            ),
        ]
    );
    let Some(Effect::Publish { regarding, .. }) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!(regarding.uid.as_deref(), Some("uid-7"));
}

#[test]
fn the_likeliest_cause_comes_first() {
    let gave_up = outcome(false);
    let mut external = seen(1, None);
    external.external_cause = Some("external-dns has not run".into());
    external.reload_missing = true;
    assert_eq!(
        likely_cause(&external, &gave_up, "kube-system"),
        "external-dns has not run"
    );
    let mut reload = seen(1, None);
    reload.reload_missing = true;
    assert!(likely_cause(&reload, &gave_up, "kube-system").contains("no `reload` plugin"));
    let mut node_local = gave_up.clone();
    node_local.wrong = BTreeMap::from([(
        ("node-local-dns".to_owned(), "shop.example.com".to_owned()),
        Answer::NoRecords,
    )]);
    assert!(likely_cause(&reload, &node_local, "kube-system").starts_with("node-local-dns"));
    let ready = seen(1, None);
    assert!(
        likely_cause(&ready, &gave_up, "kube-system").starts_with("the kubelet has not synced")
    );
}
