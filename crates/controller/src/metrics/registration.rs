//! Registration: every metric's name, help text and buckets, defined and registered once at
//! start-up. Recording (what the controller counts as it runs) is [`Metrics`]'s own.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::Metrics;

/// The metrics, created and registered in `registry`: a few without prefix, the rest under
/// `hairpin_controller_`.
pub(super) fn register(registry: &mut Registry) -> Metrics {
    let metrics = new();
    unprefixed(&metrics, registry);
    let sub = registry.sub_registry_with_prefix("hairpin_controller");
    reconciles(&metrics, sub);
    fights(&metrics, sub);
    writers(&metrics, sub);
    outcomes(&metrics, sub);
    native(&metrics, sub);
    metrics
}

/// The native cure: probes, verdicts, status writes, other writers.
fn native(m: &Metrics, sub: &mut Registry) {
    sub.register(
        "native_probes",
        "Native-cure probe connections, by phase (baseline before any write, proof after) and outcome",
        m.native_probes.clone(),
    );
    sub.register(
        "native_probe_duration_seconds",
        "Time one native-cure probe connection took",
        m.native_probe_duration.clone(),
    );
    sub.register(
        "native_verdicts",
        "Native-cure verdicts (proven, failed, not-needed, unprovable, unsupported)",
        m.native_verdicts.clone(),
    );
    sub.register(
        "ip_mode_writes",
        "ipMode writes to load balancer statuses, by kind (set, reassert, restore)",
        m.ip_mode_writes.clone(),
    );
    sub.register(
        "ip_mode_reverts",
        "Times another writer removed the ipMode: Proxy hairpin set, by writer",
        m.ip_mode_reverts.clone(),
    );
    sub.register(
        "ip_mode_fight",
        "Load balancers whose ipMode writes are backed off because another writer keeps removing them",
        m.ip_mode_fight.clone(),
    );
    sub.register(
        "ip_mode_put_backs_pending",
        "Load balancers whose ipMode: Proxy hairpin is putting back (a failed cure) without the API server's answer showing it yet",
        m.ip_mode_put_backs_pending.clone(),
    );
    sub.register(
        "ip_mode_reassert_window_seconds",
        "Seconds from another writer's rebuild of a proven native cure's status without ipMode: Proxy (a cloud controller's sync) to hairpin's re-assertion (one-second resolution)",
        m.ip_mode_reassert_window.clone(),
    );
}

/// Every metric at zero; the histograms with their buckets.
fn new() -> Metrics {
    Metrics {
        reconciles: Counter::default(),
        errors: Family::default(),
        reconcile_duration: Histogram::new([
            0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ]),
        managed_load_balancers: Gauge::default(),
        managed_hostnames: Gauge::default(),
        load_balancers_by_cure: Family::default(),
        dns_reverts: Counter::default(),
        dns_fight: Gauge::default(),
        service_reverts: Counter::default(),
        service_fight: Gauge::default(),
        config_map_reverts: Counter::default(),
        config_map_fight: Gauge::default(),
        writes: Counter::default(),
        leader: Gauge::default(),
        fenced: Gauge::default(),
        hostnames_refused: Family::default(),
        hostname_lookups: Family::default(),
        hostnames_unverified: Family::default(),
        dns_write_failures: Counter::default(),
        dns_plan_errors: Gauge::default(),
        last_reconcile_success: Gauge::default(),
        dns_propagation: Histogram::new([
            1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0,
        ]),
        native_probes: Family::default(),
        native_probe_duration: Histogram::new([
            0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
        ]),
        native_verdicts: Family::default(),
        ip_mode_writes: Family::default(),
        ip_mode_reverts: Family::default(),
        ip_mode_fight: Gauge::default(),
        ip_mode_put_backs_pending: Gauge::default(),
        ip_mode_reassert_window: Histogram::new([0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0]),
    }
}

/// Not under `hairpin_controller_`: the planner's policy refuses, whoever runs it, and
/// the propagation time is the DNS's.
fn unprefixed(m: &Metrics, registry: &mut Registry) {
    registry.register(
        "hairpin_hostnames_refused",
        "Hostname claims refused by the admission policy, by reason (counted when a claim appears)",
        m.hostnames_refused.clone(),
    );
    registry.register(
        "hairpin_hostnames_unverified",
        "Hostnames not redirected because the upstream DNS does not resolve them to their load balancer, by reason",
        m.hostnames_unverified.clone(),
    );
    registry.register(
        "hairpin_load_balancers",
        "Load balancers that need a cure, by the cure in effect: native (ipMode: Proxy) or dns (hairpin's proxy)",
        m.load_balancers_by_cure.clone(),
    );
    registry.register(
        "hairpin_dns_propagation_seconds",
        "Time from a DNS write until the cluster DNS answered with the hairpin Service, measured by the controller",
        m.dns_propagation.clone(),
    );
}

/// What the reconciles do: how many, how long, what they failed on, what they manage.
fn reconciles(m: &Metrics, sub: &mut Registry) {
    sub.register("reconciles", "Reconciles run", m.reconciles.clone());
    sub.register("errors", "Errors by kind", m.errors.clone());
    sub.register(
        "reconcile_duration_seconds",
        "Time to compute and apply a plan",
        m.reconcile_duration.clone(),
    );
    sub.register(
        "managed_load_balancers",
        "Load balancers that currently get a hairpin",
        m.managed_load_balancers.clone(),
    );
    sub.register(
        "managed_hostnames",
        "Hostnames currently redirected to the hairpin proxy",
        m.managed_hostnames.clone(),
    );
}

/// Write fights with other writers, per kind of object hairpin writes.
fn fights(m: &Metrics, sub: &mut Registry) {
    sub.register(
        "dns_reverts",
        "Times another writer reverted the CoreDNS change or changed one of hairpin's DNSEndpoints",
        m.dns_reverts.clone(),
    );
    sub.register(
        "dns_fight",
        "1 while CoreDNS writes are backed off because another writer keeps reverting them",
        m.dns_fight.clone(),
    );
    sub.register(
        "service_reverts",
        "Times another writer changed or deleted one of hairpin's Services",
        m.service_reverts.clone(),
    );
    sub.register(
        "service_fight",
        "1 while writes to one of hairpin's Services are backed off because another writer keeps changing it",
        m.service_fight.clone(),
    );
    sub.register(
        "config_map_reverts",
        "Times another writer changed or deleted hairpin's routes or hosts ConfigMap",
        m.config_map_reverts.clone(),
    );
    sub.register(
        "config_map_fight",
        "1 while writes to hairpin's routes or hosts ConfigMap are backed off because another writer keeps changing it",
        m.config_map_fight.clone(),
    );
}

/// Whether this instance writes: its writes, the leader Lease, the uninstall fence.
fn writers(m: &Metrics, sub: &mut Registry) {
    sub.register("writes", "Writes made to the cluster", m.writes.clone());
    sub.register(
        "leader",
        "1 while this instance holds the leader Lease",
        m.leader.clone(),
    );
    sub.register(
        "fenced",
        "1 once hairpin uninstall fenced this instance: it writes nothing until it exits",
        m.fenced.clone(),
    );
}

/// How the DNS side went: hostname lookups, DNS writes and plans, the last success.
fn outcomes(m: &Metrics, sub: &mut Registry) {
    sub.register(
        "hostname_lookups",
        "Upstream DNS lookups made to verify hostnames, by result (answer, nxdomain, failed)",
        m.hostname_lookups.clone(),
    );
    sub.register(
        "dns_write_failures",
        "Failed writes of the CoreDNS change",
        m.dns_write_failures.clone(),
    );
    sub.register(
        "dns_plan_errors",
        "Reasons the DNS change could not be planned in the last reconcile (0: planned)",
        m.dns_plan_errors.clone(),
    );
    sub.register(
        "last_reconcile_success_timestamp_seconds",
        "Unix time of the last reconcile that applied the whole plan",
        m.last_reconcile_success.clone(),
    );
}
