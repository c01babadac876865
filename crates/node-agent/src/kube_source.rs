//! Entries from the cluster itself: the controller's watch caches feed the planner, and the
//! plan's hosts block pairs every planned hostname with its hairpin Service's ClusterIP —
//! exactly what the controller writes into CoreDNS, so nodes and pods agree.

use std::sync::Arc;

use futures::FutureExt as _;
use hairpin_controller::Metrics;
use hairpin_controller::watch::Caches;
use hairpin_planner::PlannerConfig;
use hairpin_planner::hosts::HostsEntry;
use hairpin_runtime::Shutdown;
use prometheus_client::registry::Registry;
use tokio::sync::Notify;

use crate::{AgentError, EntrySource};

/// The cluster as a source of entries.
pub struct KubeSource {
    caches: Caches,
    config: PlannerConfig,
}

impl std::fmt::Debug for KubeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSource")
            .field("namespace", &self.config.namespace)
            .finish_non_exhaustive()
    }
}

impl KubeSource {
    /// Starts the watches (until the drain starts); `changed` is notified on every event. The
    /// watches' metrics go to `registry`.
    pub fn start(
        client: &kube::Client,
        config: PlannerConfig,
        changed: Arc<Notify>,
        registry: &mut Registry,
        shutdown: &Shutdown,
    ) -> Self {
        let metrics = Metrics::register(registry);
        let stop = {
            let shutdown = shutdown.clone();
            async move { shutdown.draining().await }.boxed().shared()
        };
        let caches = Caches::start(client, &config, changed, metrics, stop);
        Self { caches, config }
    }
}

impl EntrySource for KubeSource {
    fn entries(&self) -> Result<Vec<HostsEntry>, AgentError> {
        if !self.caches.is_synced() {
            return Err(AgentError::Source {
                path: "the Kubernetes API".into(),
                reason: "the watches have not synced yet".into(),
            });
        }
        let plan = hairpin_planner::desired(&self.caches.snapshot(), &self.config);
        let (entries, missing) = plan.hosts.hosts_entries(&plan.known_cluster_ips());
        for entry in missing {
            tracing::info!(
                hostname = %entry.hostname,
                service = %format!("{}/{}", entry.service.namespace, entry.service.name),
                "hostname left out until its hairpin Service has a ClusterIP"
            );
        }
        Ok(entries)
    }
}
