//! The propagation checks' decisions without a client: which start, numbered, and what their
//! outcomes report, one row per state.

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

/// Which checks start, with their numbers: one per load balancer whose rules are in
/// place, none again while its hostnames and ClusterIPs stay, a new one (the next number)
/// when they change; none while the rules are not in place; a stop on the native cure.
#[tokio::test]
async fn checks_start_numbered_once_per_change_and_stop_on_the_native_cure() {
    use crate::controller::memory::remember_checks;
    use crate::status::StatusWriter;
    use std::net::SocketAddr;

    let snapshot = crate::test_support::example_cluster();
    let planner = crate::test_support::planner(hairpin_planner::DnsMode::Corefile);
    let mut plan = hairpin_planner::desired(&snapshot, &planner);
    assert!(!plan.load_balancers.is_empty());
    for lb in &mut plan.load_balancers {
        let spec = lb.service.spec.get_or_insert_with(Default::default);
        spec.cluster_ip = Some("10.96.0.20".into());
    }
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let metrics = crate::Metrics::register(&mut prometheus_client::registry::Registry::default());
    let ctx = crate::context::Context::read_only(client, planner.clone(), metrics);
    let params = PropagationParams {
        cluster_dns: Some(SocketAddr::from(([10, 96, 0, 10], 53))),
        ..PropagationParams::default()
    };
    let writer = StatusWriter::new(&ctx, params.cluster_dns);
    let mut memory = StatusMemory::default();
    let wrote = DnsState::InPlace { wrote: true };
    let decide = |memory: &mut StatusMemory, plan: &Plan, dns: &DnsState| {
        let prepared = writer
            .prepare(memory, plan, &snapshot, Some(Vec::new()), dns)
            .expect("objects to write");
        let scene = CheckScene {
            plan,
            snapshot: &snapshot,
            planner: &planner,
            params: &params,
        };
        checks(scene, &prepared, dns, memory)
    };
    let started = |actions: &[CheckAction]| -> Vec<(String, u64, bool)> {
        actions
            .iter()
            .filter_map(|a| match a {
                CheckAction::Start(s) => Some((s.lb.to_string(), s.id, s.written.is_some())),
                CheckAction::Stop(_) => None,
            })
            .collect()
    };
    let refused = DnsState::Refused {
        reason: "WriteFailed",
        message: "no".into(),
    };

    let first = decide(&mut memory, &plan, &wrote);
    let lbs: Vec<String> = plan
        .load_balancers
        .iter()
        .map(|lb| lb.load_balancer.service.to_string())
        .collect();
    let numbered: Vec<(String, u64, bool)> = (0..)
        .zip(&lbs)
        .map(|(id, lb)| (lb.clone(), id, true))
        .collect();
    assert_eq!(started(&first), numbered, "each measures the write");
    remember_checks(&mut memory, &first);
    assert_eq!(memory.next_check, lbs.len() as u64);
    assert!(decide(&mut memory, &plan, &wrote).is_empty(), "running");

    let lb = &mut plan.load_balancers[0];
    lb.service.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.21".into());
    assert!(
        decide(&mut memory, &plan, &refused).is_empty(),
        "no check while the rules are not in place"
    );
    let changed = decide(&mut memory, &plan, &wrote);
    assert_eq!(
        started(&changed),
        vec![(lbs[0].clone(), lbs.len() as u64, false)],
        "a new ClusterIP restarts the check; the write was measured already"
    );
    remember_checks(&mut memory, &changed);

    let first_lb = plan.load_balancers[0].load_balancer.service.clone();
    let choice = plan.cures.iter_mut().find(|c| c.service == first_lb);
    choice.expect("a cure choice per load balancer").cure = hairpin_planner::native::Cure::Native;
    let native = decide(&mut memory, &plan, &wrote);
    assert!(
        matches!(native.as_slice(), [CheckAction::Stop(lb)] if lb.to_string() == lbs[0]),
        "{:?}",
        started(&native)
    );
    remember_checks(&mut memory, &native);
    assert!(!memory.checks.contains_key(&first_lb));
}
