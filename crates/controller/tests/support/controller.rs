//! The controller run in-process against the fake API server: the settings tests use and a
//! handle that stops it and reads its metrics. Also compiled into the `memory_10k` example.

use std::sync::Arc;
use std::time::Duration;

use hairpin_controller::lease::LeaseParams;
use hairpin_controller::{ControllerConfig, Metrics};
use hairpin_fake_apiserver::FakeApiServer;
use hairpin_planner::PlannerConfig;
use hairpin_runtime::{Readiness, Shutdown};
use prometheus_client::registry::Registry;
use serde_json::Value;

/// A controller running on a task.
pub struct Running {
    pub shutdown: Shutdown,
    pub task: tokio::task::JoinHandle<()>,
    pub readiness: Readiness,
    pub metrics: Metrics,
    pub registry: Arc<Registry>,
}

impl Running {
    /// Triggers shutdown and waits (10 s at most) for the controller to return.
    pub async fn stop(self) {
        self.shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("stops")
            .unwrap();
    }

    /// The metrics, as Prometheus scrapes them.
    pub fn metrics_text(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).unwrap();
        out
    }
}

/// The default planner with quick debounce and retries; a short Lease in hairpin's namespace
/// when `leader_election`.
pub fn config(identity: &str, leader_election: bool) -> ControllerConfig {
    let mut config = ControllerConfig::new(PlannerConfig::default(), identity);
    config.debounce = Duration::from_millis(50);
    config.min_retry = Duration::from_millis(50);
    config.max_retry = Duration::from_millis(400);
    config.lease = leader_election.then(|| LeaseParams {
        duration: Duration::from_secs(3),
        renew_interval: Duration::from_millis(300),
        retry_interval: Duration::from_millis(100),
        ..LeaseParams::new("hairpin", "hairpin-controller", identity)
    });
    config
}

/// Runs the controller with `config` against `fake` until [`Running::stop`].
pub fn start(fake: &FakeApiServer, config: ControllerConfig) -> Running {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let readiness = Readiness::new();
    let ready = readiness.condition("caches synced");
    let shutdown = Shutdown::new();
    let task = tokio::spawn({
        let (client, metrics, shutdown) = (fake.client(), metrics.clone(), shutdown.clone());
        async move {
            hairpin_controller::run(client, config, metrics, ready, shutdown)
                .await
                .unwrap();
        }
    });
    Running {
        shutdown,
        task,
        readiness,
        metrics,
        registry: Arc::new(registry),
    }
}

/// The condition `type_` of a `Hairpin` object as JSON, `Null` when absent.
pub fn condition(h: &Value, type_: &str) -> Value {
    h["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or(Value::Null)
}
