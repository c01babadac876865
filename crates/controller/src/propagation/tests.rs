#[test]
fn rounds_are_quick_in_the_first_minute_then_at_the_interval() {
    use super::pause;
    use std::time::Duration;
    let ms = Duration::from_millis;
    let interval = Duration::from_secs(2);
    let fast: Vec<Duration> = (0..6).map(|r| pause(r, ms(300), interval)).collect();
    assert_eq!(fast, [ms(100), ms(200), ms(400), ms(500), ms(500), ms(500)]);
    // Resolution: never more than half a second in the first minute.
    assert_eq!(pause(40, Duration::from_secs(59), interval), ms(500));
    assert_eq!(pause(41, Duration::from_secs(61), interval), interval);
    // A shorter interval is never exceeded.
    assert_eq!(pause(5, ms(10), ms(50)), ms(50));
}

use super::*;

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn every_wildcard_gets_a_probe_and_exact_names_are_bounded() {
    let mut hosts = names(&["*.apps.example.com", "*.example.org"]);
    hosts.extend((0..100).map(|i| format!("h{i:03}.example.com")));
    let probes = probe_names(&hosts, 5);
    assert_eq!(probes.len(), 7, "{probes:?}");
    assert!(probes.contains(&"hairpin-probe.apps.example.com".to_owned()));
    assert!(probes.contains(&"hairpin-probe.example.org".to_owned()));
    // Spread over the list, not the first five.
    assert!(
        probes.contains(&"h000.example.com".to_owned()),
        "{probes:?}"
    );
    assert!(
        probes.contains(&"h080.example.com".to_owned()),
        "{probes:?}"
    );
}

#[test]
fn few_names_are_all_asked() {
    let probes = probe_names(&names(&["b.example.com", "a.example.com"]), 5);
    assert_eq!(probes, names(&["a.example.com", "b.example.com"]));
}

#[test]
fn only_the_hairpin_addresses_count_as_effective() {
    let hairpin: IpAddr = "10.96.0.20".parse().unwrap();
    let lb: IpAddr = "203.0.113.10".parse().unwrap();
    assert!(is_expected(&Answer::Addresses(vec![hairpin]), &[hairpin]));
    assert!(!is_expected(
        &Answer::Addresses(vec![hairpin, lb]),
        &[hairpin]
    ));
    assert!(!is_expected(&Answer::Addresses(vec![lb]), &[hairpin]));
    assert!(!is_expected(&Answer::NoRecords, &[hairpin]));
}

fn outcome_after(secs: u64) -> CheckOutcome {
    CheckOutcome {
        effective: true,
        elapsed: Duration::from_secs(secs),
        wrong: BTreeMap::new(),
        unreachable: Vec::new(),
        connect: None,
    }
}

/// The propagation checks are a sensor of the loop's: an outcome comes into the memory only
/// for the check that runs now; one of a check stopped or restarted since (an earlier start
/// of the same load balancer) is ignored, and one of a load balancer forgotten adds nothing.
#[tokio::test]
async fn the_sensor_reads_only_the_current_checks_outcome_into_the_memory() {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let metrics = crate::Metrics::register(&mut prometheus_client::registry::Registry::default());
    let planner = PlannerConfig::default();
    let ctx = Context::read_only(client, planner, metrics);
    let mut checks = Checks::new(&ctx, PropagationParams::default());
    let lb = ObjectRef::new("shop", "ingress-nginx");
    let gone = ObjectRef::new("shop", "gone");
    let mut memory = CheckMemory::new();
    memory.insert(
        lb.clone(),
        CheckSeen {
            fingerprint: "shop.example.com@10.0.0.1".into(),
            id: 7,
            measured: true,
            outcome: None,
            ..CheckSeen::default()
        },
    );
    let inbox = checks.inbox.0.clone();
    inbox
        .send((lb.clone(), 6, outcome_after(1).into()))
        .unwrap();
    checks.read(&mut memory);
    assert_eq!(
        outcome(&memory, &lb),
        (None, true),
        "an earlier start's outcome"
    );
    inbox
        .send((gone.clone(), 0, outcome_after(2).into()))
        .unwrap();
    inbox
        .send((lb.clone(), 7, outcome_after(3).into()))
        .unwrap();
    inbox
        .send((lb.clone(), 5, outcome_after(4).into()))
        .unwrap();
    checks.read(&mut memory);
    assert_eq!(outcome(&memory, &lb), (Some(&outcome_after(3)), true));
    assert!(!memory.contains_key(&gone));
    assert!(is_running(&memory, &lb, "shop.example.com@10.0.0.1"));
    assert!(!is_running(&memory, &lb, "shop.example.com@10.0.0.2"));
    checks.retain(&mut memory, std::slice::from_ref(&gone));
    assert!(
        memory.is_empty(),
        "a load balancer no longer planned is forgotten"
    );
}
