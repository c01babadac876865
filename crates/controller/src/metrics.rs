//! The controller's Prometheus metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Label set of `hairpin_controller_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// [`crate::Error::metric_label`].
    pub kind: String,
}

/// Label set of `hairpin_hostnames_refused_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// [`hairpin_planner::admission::RefusalReason::label`].
    pub reason: String,
}

/// Label set of `hairpin_controller_hostname_lookups_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LookupLabels {
    /// `answer`, `nxdomain` or `failed`.
    pub result: String,
}

/// Label set of `hairpin_hostnames_unverified`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnverifiedLabels {
    /// [`hairpin_planner::verify::UnverifiedReason::as_str`].
    pub reason: String,
}

/// Label set of `hairpin_load_balancers`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CureLabels {
    /// [`hairpin_planner::native::Cure::as_str`]: `native` or `dns`.
    pub cure: String,
}

/// Label set of `hairpin_controller_native_probes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    /// `baseline` (before any write) or `proof` (after it).
    pub phase: String,
    /// [`crate::native::Attempt::label`]: `answered`, `no-answer`, `unreachable`.
    pub outcome: String,
}

/// Label set of `hairpin_controller_native_verdicts_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    /// `proven`, `failed`, `not-needed`, `unprovable`, `unsupported`.
    pub verdict: String,
}

/// Label set of `hairpin_controller_ip_mode_writes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IpModeWriteLabels {
    /// `set` (first write), `reassert` (again after another writer removed it), `restore`.
    pub kind: String,
}

/// Label set of `hairpin_controller_ip_mode_reverts_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriterLabels {
    /// The field manager that removed hairpin's `ipMode: Proxy` (escaped).
    pub writer: String,
}

/// Metrics the controller updates.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Reconciles run (plans computed and applied, or attempted).
    pub reconciles: Counter,
    /// Errors by kind.
    pub errors: Family<ErrorLabels, Counter>,
    /// Reconcile duration in seconds (plan plus writes).
    pub reconcile_duration: Histogram,
    /// Load balancers that currently get a hairpin.
    pub managed_load_balancers: Gauge,
    /// Hostnames currently redirected to the proxy.
    pub managed_hostnames: Gauge,
    /// Load balancers that need a cure, by the cure in effect (`hairpin_load_balancers`).
    pub load_balancers_by_cure: Family<CureLabels, Gauge>,
    /// Times another writer was found to have reverted our CoreDNS change (or changed one of
    /// our `DNSEndpoint`s).
    pub dns_reverts: Counter,
    /// 1 while a CoreDNS write fight is backed off, else 0.
    pub dns_fight: Gauge,
    /// Times another writer was found to have changed or deleted one of hairpin's Services.
    pub service_reverts: Counter,
    /// 1 while writes to one of hairpin's Services are backed off (a write fight), else 0.
    pub service_fight: Gauge,
    /// Times another writer was found to have changed or deleted hairpin's routes or hosts
    /// ConfigMap.
    pub config_map_reverts: Counter,
    /// 1 while writes to hairpin's routes or hosts ConfigMap are backed off, else 0.
    pub config_map_fight: Gauge,
    /// Writes made to the cluster (creates, updates, deletes).
    pub writes: Counter,
    /// 1 while this instance holds the leader Lease.
    pub leader: Gauge,
    /// 1 once `hairpin uninstall` fenced this instance (it writes nothing until it exits).
    pub fenced: Gauge,
    /// Hostname claims the admission policy refused, counted once each time a claim
    /// (object, hostname, reason) appears.
    pub hostnames_refused: Family<RefusedLabels, Counter>,
    /// Upstream DNS lookups made to verify hostnames, by result.
    pub hostname_lookups: Family<LookupLabels, Counter>,
    /// Hostnames left out because they are not proven to be their load balancer's, by reason.
    pub hostnames_unverified: Family<UnverifiedLabels, Gauge>,
    /// Failed writes of the CoreDNS change (refused by the API server, or it was unreachable).
    pub dns_write_failures: Counter,
    /// Reasons the DNS change could not be planned in the last reconcile (0: it was planned).
    pub dns_plan_errors: Gauge,
    /// Unix time of the last reconcile that planned and applied everything without error.
    pub last_reconcile_success: Gauge<f64, AtomicU64>,
    /// Seconds from a DNS write until the cluster DNS answered with the hairpin Service
    /// (`hairpin_dns_propagation_seconds`).
    pub dns_propagation: Histogram,
    /// Native-cure probe connections, by phase and outcome.
    pub native_probes: Family<ProbeLabels, Counter>,
    /// Seconds one native-cure probe connection took (connect and first answer).
    pub native_probe_duration: Histogram,
    /// Native-cure verdicts, by verdict.
    pub native_verdicts: Family<VerdictLabels, Counter>,
    /// `ipMode` writes to load balancer statuses, by kind.
    pub ip_mode_writes: Family<IpModeWriteLabels, Counter>,
    /// Times another writer removed hairpin's `ipMode: Proxy`, by writer.
    pub ip_mode_reverts: Family<WriterLabels, Counter>,
    /// Load balancers whose `ipMode` writes are backed off because another writer keeps
    /// removing them.
    pub ip_mode_fight: Gauge,
}

impl Metrics {
    /// Creates the metrics and registers them under `hairpin_controller_`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::new();
        metrics.register_unprefixed(registry);
        let sub = registry.sub_registry_with_prefix("hairpin_controller");
        metrics.register_reconciles(sub);
        metrics.register_fights(sub);
        metrics.register_writers(sub);
        metrics.register_outcomes(sub);
        metrics.register_native(sub);
        metrics
    }

    /// The native cure: probes, verdicts, status writes, other writers.
    fn register_native(&self, sub: &mut Registry) {
        sub.register(
            "native_probes",
            "Native-cure probe connections, by phase (baseline before any write, proof after) and outcome",
            self.native_probes.clone(),
        );
        sub.register(
            "native_probe_duration_seconds",
            "Time one native-cure probe connection took",
            self.native_probe_duration.clone(),
        );
        sub.register(
            "native_verdicts",
            "Native-cure verdicts (proven, failed, not-needed, unprovable, unsupported)",
            self.native_verdicts.clone(),
        );
        sub.register(
            "ip_mode_writes",
            "ipMode writes to load balancer statuses, by kind (set, reassert, restore)",
            self.ip_mode_writes.clone(),
        );
        sub.register(
            "ip_mode_reverts",
            "Times another writer removed the ipMode: Proxy hairpin set, by writer",
            self.ip_mode_reverts.clone(),
        );
        sub.register(
            "ip_mode_fight",
            "Load balancers whose ipMode writes are backed off because another writer keeps removing them",
            self.ip_mode_fight.clone(),
        );
    }

    /// Counts a native-cure verdict.
    pub fn native_verdict(&self, verdict: &str) {
        self.native_verdicts
            .get_or_create(&VerdictLabels {
                verdict: verdict.to_owned(),
            })
            .inc();
    }

    /// Counts an `ipMode` write of `kind`.
    pub fn ip_mode_write(&self, kind: &str) {
        self.ip_mode_writes
            .get_or_create(&IpModeWriteLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    fn new() -> Self {
        Self {
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
        }
    }

    /// Not under `hairpin_controller_`: the planner's policy refuses, whoever runs it, and
    /// the propagation time is the DNS's.
    fn register_unprefixed(&self, registry: &mut Registry) {
        registry.register(
            "hairpin_hostnames_refused",
            "Hostname claims refused by the admission policy, by reason (counted when a claim appears)",
            self.hostnames_refused.clone(),
        );
        registry.register(
            "hairpin_hostnames_unverified",
            "Hostnames not redirected because the upstream DNS does not resolve them to their load balancer, by reason",
            self.hostnames_unverified.clone(),
        );
        registry.register(
            "hairpin_load_balancers",
            "Load balancers that need a cure, by the cure in effect: native (ipMode: Proxy) or dns (hairpin's proxy)",
            self.load_balancers_by_cure.clone(),
        );
        registry.register(
            "hairpin_dns_propagation_seconds",
            "Time from a DNS write until the cluster DNS answered with the hairpin Service, measured by the controller",
            self.dns_propagation.clone(),
        );
    }

    /// What the reconciles do: how many, how long, what they failed on, what they manage.
    fn register_reconciles(&self, sub: &mut Registry) {
        sub.register("reconciles", "Reconciles run", self.reconciles.clone());
        sub.register("errors", "Errors by kind", self.errors.clone());
        sub.register(
            "reconcile_duration_seconds",
            "Time to compute and apply a plan",
            self.reconcile_duration.clone(),
        );
        sub.register(
            "managed_load_balancers",
            "Load balancers that currently get a hairpin",
            self.managed_load_balancers.clone(),
        );
        sub.register(
            "managed_hostnames",
            "Hostnames currently redirected to the hairpin proxy",
            self.managed_hostnames.clone(),
        );
    }

    /// Write fights with other writers, per kind of object hairpin writes.
    fn register_fights(&self, sub: &mut Registry) {
        sub.register(
            "dns_reverts",
            "Times another writer reverted the CoreDNS change or changed one of hairpin's DNSEndpoints",
            self.dns_reverts.clone(),
        );
        sub.register(
            "dns_fight",
            "1 while CoreDNS writes are backed off because another writer keeps reverting them",
            self.dns_fight.clone(),
        );
        sub.register(
            "service_reverts",
            "Times another writer changed or deleted one of hairpin's Services",
            self.service_reverts.clone(),
        );
        sub.register(
            "service_fight",
            "1 while writes to one of hairpin's Services are backed off because another writer keeps changing it",
            self.service_fight.clone(),
        );
        sub.register(
            "config_map_reverts",
            "Times another writer changed or deleted hairpin's routes or hosts ConfigMap",
            self.config_map_reverts.clone(),
        );
        sub.register(
            "config_map_fight",
            "1 while writes to hairpin's routes or hosts ConfigMap are backed off because another writer keeps changing it",
            self.config_map_fight.clone(),
        );
    }

    /// Whether this instance writes: its writes, the leader Lease, the uninstall fence.
    fn register_writers(&self, sub: &mut Registry) {
        sub.register("writes", "Writes made to the cluster", self.writes.clone());
        sub.register(
            "leader",
            "1 while this instance holds the leader Lease",
            self.leader.clone(),
        );
        sub.register(
            "fenced",
            "1 once hairpin uninstall fenced this instance: it writes nothing until it exits",
            self.fenced.clone(),
        );
    }

    /// How the DNS side went: hostname lookups, DNS writes and plans, the last success.
    fn register_outcomes(&self, sub: &mut Registry) {
        sub.register(
            "hostname_lookups",
            "Upstream DNS lookups made to verify hostnames, by result (answer, nxdomain, failed)",
            self.hostname_lookups.clone(),
        );
        sub.register(
            "dns_write_failures",
            "Failed writes of the CoreDNS change",
            self.dns_write_failures.clone(),
        );
        sub.register(
            "dns_plan_errors",
            "Reasons the DNS change could not be planned in the last reconcile (0: planned)",
            self.dns_plan_errors.clone(),
        );
        sub.register(
            "last_reconcile_success_timestamp_seconds",
            "Unix time of the last reconcile that applied the whole plan",
            self.last_reconcile_success.clone(),
        );
    }

    /// Counts an error.
    pub fn error(&self, error: &crate::Error) {
        self.count_error(error.metric_label());
    }

    /// Counts an error under the label `kind`.
    pub(crate) fn count_error(&self, kind: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts a refused hostname claim under its reason label.
    pub fn refused(&self, reason: &str) {
        self.hostnames_refused
            .get_or_create(&RefusedLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts one upstream lookup under its result label.
    pub fn hostname_lookup(&self, result: &str) {
        self.hostname_lookups
            .get_or_create(&LookupLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    /// The count of upstream lookups with one result label (for tests and reports).
    pub fn hostname_lookup_count(&self, result: &str) -> u64 {
        self.hostname_lookups
            .get_or_create(&LookupLabels {
                result: result.to_owned(),
            })
            .get()
    }

    /// Sets the unverified-hostname gauges from a plan (every reason, 0 where none).
    pub fn set_unverified(&self, verification: &hairpin_planner::verify::Verification) {
        use hairpin_planner::verify::UnverifiedReason as R;
        for reason in [
            R::NotResolved,
            R::ResolvesElsewhere,
            R::NoAddress,
            R::NxDomain,
            R::ResolveFailed,
            R::CoversOthers,
        ] {
            let n = verification
                .unverified
                .iter()
                .filter(|u| u.reason == reason)
                .count();
            self.hostnames_unverified
                .get_or_create(&UnverifiedLabels {
                    reason: reason.as_str().to_owned(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Sets `hairpin_load_balancers` from a plan's cures (both labels, 0 where none).
    pub fn set_cures(&self, cures: &[hairpin_planner::native::CureChoice]) {
        use hairpin_planner::native::Cure;
        for cure in [Cure::Native, Cure::Dns] {
            let n = cures.iter().filter(|c| c.cure == cure).count();
            self.load_balancers_by_cure
                .get_or_create(&CureLabels {
                    cure: cure.as_str().to_owned(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// The count of refused claims with one reason label (for tests and reports).
    pub fn refused_count(&self, reason: &str) -> u64 {
        self.hostnames_refused
            .get_or_create(&RefusedLabels {
                reason: reason.to_owned(),
            })
            .get()
    }

    /// The current count of errors of one kind (for tests and reports).
    pub fn error_count(&self, kind: &str) -> u64 {
        self.errors
            .get_or_create(&ErrorLabels {
                kind: kind.to_owned(),
            })
            .get()
    }
}
