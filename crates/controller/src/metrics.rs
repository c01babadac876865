//! The controller's Prometheus metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

mod record;
mod registration;

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
    /// [`crate::native::Attempt::label`]: `answered`, `no-answer`, `unreachable`, `foreign`
    /// (answered by another server than the receiver).
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
    /// Load balancers whose `ipMode: Proxy` hairpin is putting back (a failed cure) without
    /// the API server's answer showing it yet: retried, backing off.
    pub ip_mode_put_backs_pending: Gauge,
    /// Seconds from another writer's rebuild of a proven cure's status without `ipMode:
    /// Proxy` to hairpin's re-assertion (the API's window; in-cluster clients fail until each
    /// node's kube-proxy applies the re-assertion, at least its min sync period, 1 s, after it
    /// applied the rebuild).
    pub ip_mode_reassert_window: Histogram,
}

// === impl Metrics ===

impl Metrics {
    /// Creates the metrics and registers them under `hairpin_controller_`.
    pub fn register(registry: &mut Registry) -> Self {
        registration::register(registry)
    }
}
