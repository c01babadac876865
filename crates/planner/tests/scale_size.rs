//! 20,000 hostnames fit in a CoreDNS ConfigMap. (Timing is printed by `examples/scale.rs`,
//! never asserted.)

#[path = "support/scale.rs"]
mod scale;

use hairpin_planner::{PlannerConfig, desired};

#[test]
fn twenty_thousand_hostnames_stay_below_one_mebibyte() {
    let plan = desired(&scale::snapshot(10_000), &PlannerConfig::default());
    assert!(plan.errors.is_empty(), "{:?}", plan.errors);
    let planned: usize = plan
        .load_balancers
        .iter()
        .map(|lb| lb.hostnames.len())
        .sum();
    assert_eq!(planned, 20_000);
    let dns = plan.dns.as_ref().unwrap();
    assert_eq!(dns.entries.len(), 20_000);
    assert!(
        dns.coredns().unwrap().desired.len() < 1024 * 1024,
        "Corefile is {} bytes",
        dns.coredns().unwrap().desired.len()
    );
    // Every hostname is in the Corefile, exactly or through a pattern.
    assert!(
        dns.coredns().unwrap().desired.contains("app-9999"),
        "last hostname missing"
    );
}
