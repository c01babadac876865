//! Fixtures shared by the crate's unit tests.

use hairpin_planner::{ClusterSnapshot, DnsMode, PlannerConfig};

/// The example cluster (`examples/cluster.yaml`: a CoreDNS Corefile, load balancers with PROXY
/// signals).
pub(crate) fn example_cluster() -> ClusterSnapshot {
    let mut snapshot = ClusterSnapshot::default();
    hairpin_planner::load::load_yaml(
        &mut snapshot,
        "cluster.yaml",
        include_str!("../../../examples/cluster.yaml"),
    )
    .expect("the example cluster loads");
    snapshot
}

/// The default planner configuration with `dns_mode`.
pub(crate) fn planner(dns_mode: DnsMode) -> PlannerConfig {
    PlannerConfig {
        dns_mode,
        ..PlannerConfig::default()
    }
}
