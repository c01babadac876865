//! Scale check: 10,000 Ingresses with 20,000 hostnames on three PROXY load balancers.
//! Prints how long discovery + planning take (the median of several runs, after a warm-up)
//! and the size of the resulting Corefile, which must stay well below the 1 MiB ConfigMap
//! limit. Two cases: the first write (the Corefile has no hairpin block yet) and the steady
//! state (the Corefile already holds the block, as on every later reconcile).
//!
//! ```text
//! cargo run --release -p hairpin-planner --example scale [RUNS]
//! ```
//!
//! `bench/run.sh` reads the `desired()` and `Corefile size` lines. The `plan checksum` line
//! (FNV-1a of the plans' `Debug` text, both cases) shows that a change to the planner kept its
//! output.

use std::time::{Duration, Instant};

use hairpin_planner::{ClusterSnapshot, PlannerConfig, desired, discover, hostnames};

#[path = "../tests/support/scale.rs"]
mod scale;

/// CPU time this thread has run, from `/proc/thread-self/schedstat` (nanoseconds, unlike the
/// clock ticks of `/proc/self/stat`); zero where it cannot be read.
fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}

/// Median wall time and median thread CPU time of `runs` calls of `f`, after one warm-up
/// call. On a shared machine the wall time includes the time other processes had the CPU;
/// the CPU time does not.
fn median<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, Duration) {
    std::hint::black_box(f());
    let (mut wall, mut cpu): (Vec<Duration>, Vec<Duration>) = (0..runs)
        .map(|_| {
            let (started, cpu_started) = (Instant::now(), thread_cpu());
            std::hint::black_box(f());
            (started.elapsed(), thread_cpu().saturating_sub(cpu_started))
        })
        .unzip();
    wall.sort();
    cpu.sort();
    (wall[runs / 2], cpu[runs / 2])
}

fn ms((wall, cpu): (Duration, Duration)) -> String {
    format!(
        "{:.1} ms wall, {:.1} ms CPU",
        wall.as_secs_f64() * 1000.0,
        cpu.as_secs_f64() * 1000.0
    )
}

/// FNV-1a (64 bits) of the plan's `Debug` text: stable across runs and Rust versions, unlike
/// the std hasher's.
fn checksum(plan: &hairpin_planner::Plan) -> u64 {
    format!("{plan:?}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .map_or(9, |r| r.parse().expect("RUNS is a number"));
    let started = Instant::now();
    let mut snapshot: ClusterSnapshot = scale::snapshot(10_000);
    let built = started.elapsed();
    let config = PlannerConfig::default();

    let plan = desired(&snapshot, &config);
    assert!(plan.errors.is_empty(), "{:?}", plan.errors);
    let first = median(runs, || desired(std::hint::black_box(&snapshot), &config));

    // The parts: discovery, then hostname collection (the rest is the hairpin Services and
    // the Corefile edit).
    let discovery = discover(&snapshot, &config);
    let per_discovery = median(runs, || discover(std::hint::black_box(&snapshot), &config));
    let lbs: Vec<_> = discovery
        .load_balancers
        .iter()
        .map(|lb| (lb.service.clone(), lb.status_addresses.as_slice()))
        .collect();
    let per_collect = median(runs, || {
        hostnames::collect(
            std::hint::black_box(&snapshot),
            &config,
            &lbs,
            &["cluster.local", "in-addr.arpa", "ip6.arpa"],
        )
    });

    // Steady state: the ConfigMap already holds what the first plan wrote.
    let dns = plan.dns.as_ref().expect("a DNS change");
    let written = dns
        .coredns()
        .unwrap()
        .object
        .clone()
        .expect("a Corefile write");
    let corefile_len = dns.coredns().unwrap().desired.len();
    let before = dns
        .coredns()
        .unwrap()
        .current
        .as_deref()
        .map_or(0, str::len);
    let at = snapshot
        .config_maps
        .iter()
        .position(|c| c.metadata.name.as_deref() == Some("coredns"))
        .expect("the coredns ConfigMap");
    snapshot.config_maps[at] = written;
    let again = desired(&snapshot, &config);
    assert!(again.errors.is_empty(), "{:?}", again.errors);
    assert!(
        !again
            .dns
            .as_ref()
            .expect("a DNS change")
            .coredns()
            .unwrap()
            .changed,
        "the steady state changes nothing"
    );
    let steady = median(runs, || desired(std::hint::black_box(&snapshot), &config));

    let hostnames: usize = plan
        .load_balancers
        .iter()
        .map(|lb| lb.hostnames.len())
        .sum();
    println!("ingresses:          {}", snapshot.ingresses.len());
    println!("hostnames planned:  {hostnames}");
    println!("load balancers:     {}", plan.load_balancers.len());
    println!("building snapshot:  {built:?}");
    println!("desired() first write:  {} (median of {runs})", ms(first));
    println!("desired() steady state: {} (median of {runs})", ms(steady));
    println!("  discover():           {}", ms(per_discovery));
    println!("  hostnames::collect(): {}", ms(per_collect));
    println!(
        "Corefile size:      {corefile_len} bytes, {:.1} KiB ({:.1}% of the 1 MiB ConfigMap limit; {before} bytes before)",
        corefile_len as f64 / 1024.0,
        corefile_len as f64 * 100.0 / (1024.0 * 1024.0),
    );
    println!("errors:             {}", plan.errors.len());
    println!(
        "plan checksum:      first write {:016x}, steady state {:016x}",
        checksum(&plan),
        checksum(&again)
    );
}
