//! Entries from the cluster: the hosts block the controller publishes in one ConfigMap
//! (`hairpin-hosts`, key `hosts.json`: names and the hairpin Services' ClusterIPs, both
//! families), followed through one watch on that object by name. The agent plans nothing
//! itself: every node writes what the leader published, so nodes and pods agree, and the API
//! server carries one small watch per node instead of a watch on every Ingress and route.

use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt as _};
use hairpin_planner::hosts::HostsEntry;
use hairpin_runtime::Shutdown;
use hairpin_runtime::configmap::{KeyUpdate, watch_configmap_key};
use tokio::sync::Notify;

use crate::{AgentError, EntrySource, parse_entries};

/// The published hosts block as a source of entries.
///
/// - Until the ConfigMap is first read, and while it does not exist, the source has no
///   entries to give ([`AgentError::Source`], so the hosts file is left as it is): no hosts
///   block is written until the controller has published one.
/// - A value that does not parse is logged and ignored: the last good entries stay.
/// - A ConfigMap deleted after it was read (`hairpin uninstall` deletes it together with the
///   hairpin Services the addresses belong to) gives no entries: the block is removed.
#[derive(Debug, Clone)]
pub struct ConfigMapSource {
    what: String,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// Whether the first read has finished.
    read: bool,
    /// The last good entries, if there ever were any.
    good: Option<Vec<HostsEntry>>,
    /// Why there is nothing to write while there is no good value.
    problem: Option<String>,
}

impl ConfigMapSource {
    /// Watches `namespace/name` (until the drain starts) and notifies `changed` on every
    /// update.
    pub fn start(
        client: kube::Client,
        namespace: &str,
        name: &str,
        key: &str,
        changed: Arc<Notify>,
        shutdown: &Shutdown,
    ) -> Self {
        let updates = watch_configmap_key(client, namespace, name, key);
        Self::follow(
            updates,
            &format!("{namespace}/{name}"),
            key,
            changed,
            shutdown,
        )
    }

    /// Follows `updates` of the ConfigMap `what` (`namespace/name`).
    pub fn follow(
        updates: impl Stream<Item = KeyUpdate> + Send + 'static,
        what: &str,
        key: &str,
        changed: Arc<Notify>,
        shutdown: &Shutdown,
    ) -> Self {
        let source = Self {
            what: what.to_owned(),
            state: Arc::new(Mutex::new(State::default())),
        };
        let task = source.clone();
        let key = key.to_owned();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut updates = std::pin::pin!(updates);
            loop {
                tokio::select! {
                    update = updates.next() => match update {
                        Some(update) => {
                            task.update(update, &key);
                            changed.notify_one();
                        }
                        None => break,
                    },
                    () = shutdown.draining() => break,
                }
            }
        });
        source
    }

    fn update(&self, update: KeyUpdate, key: &str) {
        let what = &self.what;
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.read = true;
        match update {
            KeyUpdate::Present(value) => {
                let parsed = match value {
                    Some(text) => parse_entries(&text),
                    None => Err(format!("it has no key {key}")),
                };
                match parsed {
                    Ok(entries) => {
                        tracing::debug!(configmap = %what, addresses = entries.len(), "hosts block read");
                        state.good = Some(entries);
                        state.problem = None;
                    }
                    // The reason may quote the ConfigMap's text: control characters escaped.
                    Err(reason) if state.good.is_some() => {
                        let reason = hairpin_planner::escape::controls(&reason);
                        tracing::warn!(configmap = %what, error = %reason, "the published hosts block is malformed; keeping the last good one");
                    }
                    Err(reason) => {
                        let reason = hairpin_planner::escape::controls(&reason);
                        tracing::warn!(configmap = %what, error = %reason, "the published hosts block is malformed; no hosts block is written until a good one is published");
                        state.problem = Some(format!(
                            "the hosts block in ConfigMap {what} is malformed ({reason}); nothing is written until a good one is published"
                        ));
                    }
                }
            }
            KeyUpdate::Missing if state.good.is_some() => {
                tracing::info!(configmap = %what, "the hosts ConfigMap was deleted (hairpin uninstalled?); removing the hosts block");
                state.good = Some(Vec::new());
            }
            KeyUpdate::Missing => {
                let problem = format!(
                    "ConfigMap {what} does not exist yet (the hairpin controller publishes it); no hosts block is written until it appears"
                );
                tracing::info!(configmap = %what, "{problem}");
                state.problem = Some(problem);
            }
        }
    }
}

impl EntrySource for ConfigMapSource {
    fn entries(&self) -> Result<Vec<HostsEntry>, AgentError> {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let problem = if !state.read {
            format!("waiting for the first read of ConfigMap {}", self.what)
        } else if let Some(good) = &state.good {
            return Ok(good.clone());
        } else {
            state
                .problem
                .clone()
                .unwrap_or_else(|| format!("no hosts block published in ConfigMap {}", self.what))
        };
        Err(AgentError::Source {
            path: "the Kubernetes API".into(),
            reason: problem,
        })
    }
}
