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
