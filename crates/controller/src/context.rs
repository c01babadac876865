//! What every writer of the control loop shares, built in one place ([`Context::new`], which
//! [`ControllerConfig::build`](crate::controller::ControllerConfig::build) and
//! [`Context::read_only`] call) and borrowed as one
//! `Arc<Context>` (as kube-rs controllers share theirs): the client whose writes pass the
//! gate, the Events recorder, the metrics, the planner's settings and the change signal.

use std::sync::Arc;

use hairpin_planner::PlannerConfig;
use tokio::sync::Notify;

use crate::gate::WriteGate;
use crate::metrics::Metrics;
use crate::report::Events;

/// See the module documentation.
pub struct Context {
    /// Writes go out only while `gate` is open (reads always).
    pub client: kube::Client,
    /// Events, published through the gate.
    pub events: Events,
    /// The controller's metrics.
    pub metrics: Metrics,
    /// What to plan, and where hairpin's objects live.
    pub planner: PlannerConfig,
    /// Poked by whatever should wake the loop (a cache change, an answer, a finished check).
    pub changed: Arc<Notify>,
    /// The write gate the leader election opens.
    pub gate: WriteGate,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
    }
}

impl Context {
    /// The one way a context is made: writes (objects, statuses, Events) go out through
    /// `gate`, the Events as `identity`; `client` is the plain client.
    pub(crate) fn new(
        client: kube::Client,
        gate: WriteGate,
        identity: &str,
        planner: PlannerConfig,
        metrics: Metrics,
    ) -> Arc<Self> {
        let client = gate.client(client);
        Arc::new(Self {
            events: Events::new(client.clone(), identity, metrics.clone()),
            client,
            metrics,
            planner,
            changed: Arc::new(Notify::new()),
            gate,
        })
    }

    /// A context that reads and cannot write: its gate stays closed, so every write through
    /// it is withheld (`hairpin plan` reads the cluster through the controller's caches).
    pub fn read_only(client: kube::Client, planner: PlannerConfig, metrics: Metrics) -> Arc<Self> {
        Self::new(
            client,
            WriteGate::closed(),
            "hairpin-plan",
            planner,
            metrics,
        )
    }

    /// Counts `n` API writes.
    pub(crate) fn count_writes(&self, n: usize) {
        self.metrics
            .writes
            .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
    }
}
