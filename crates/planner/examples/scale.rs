//! Scale check: 10,000 Ingresses with 20,000 hostnames on three PROXY load balancers.
//! Prints how long discovery + planning take and the size of the resulting Corefile (which
//! must stay below the 1 MiB ConfigMap limit).
//!
//! ```text
//! cargo run --release -p hairpin-planner --example scale
//! ```

use std::time::Instant;

use hairpin_planner::{ClusterSnapshot, PlannerConfig, desired, discover, hostnames};

#[path = "../tests/support/scale.rs"]
mod scale;

fn main() {
    let started = Instant::now();
    let snapshot: ClusterSnapshot = scale::snapshot(10_000);
    let built = started.elapsed();
    let config = PlannerConfig::default();

    // Warm-up run, then the measured ones.
    let plan = desired(&snapshot, &config);
    let runs = 5;
    let started = Instant::now();
    for _ in 0..runs {
        std::hint::black_box(desired(std::hint::black_box(&snapshot), &config));
    }
    let per_plan = started.elapsed() / runs;

    // The parts: discovery, then hostname collection (the rest is the hairpin Services and
    // the Corefile edit).
    let started = Instant::now();
    let mut discovery = discover(&snapshot, &config);
    for _ in 1..runs {
        discovery = std::hint::black_box(discover(std::hint::black_box(&snapshot), &config));
    }
    let per_discovery = started.elapsed() / runs;
    let lbs: Vec<_> = discovery
        .load_balancers
        .iter()
        .map(|lb| (lb.service.clone(), lb.status_addresses.as_slice()))
        .collect();
    let started = Instant::now();
    for _ in 0..runs {
        std::hint::black_box(hostnames::collect(
            std::hint::black_box(&snapshot),
            &config,
            &lbs,
            &["cluster.local", "in-addr.arpa", "ip6.arpa"],
        ));
    }
    let per_collect = started.elapsed() / runs;

    let hostnames: usize = plan
        .load_balancers
        .iter()
        .map(|lb| lb.hostnames.len())
        .sum();
    let dns = plan.dns.as_ref().expect("a DNS change");
    println!("ingresses:          {}", snapshot.ingresses.len());
    println!("hostnames planned:  {hostnames}");
    println!("load balancers:     {}", plan.load_balancers.len());
    println!("building snapshot:  {built:?}");
    println!("desired() per run:  {per_plan:?} (mean of {runs})");
    println!("  discover():          {per_discovery:?}");
    println!("  hostnames::collect(): {per_collect:?}");
    println!(
        "Corefile size:      {} bytes ({:.1}% of the 1 MiB ConfigMap limit; {} before)",
        dns.coredns().desired.len(),
        dns.coredns().desired.len() as f64 * 100.0 / (1024.0 * 1024.0),
        dns.coredns().current.as_deref().map_or(0, str::len)
    );
    println!("errors:             {}", plan.errors.len());
    assert!(plan.errors.is_empty(), "{:?}", plan.errors);
}
