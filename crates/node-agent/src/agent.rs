//! The agent loop: keep the hosts file's block equal to the source, until shutdown.

use std::sync::Arc;
use std::time::Duration;

use hairpin_runtime::ReadyCondition;
use hairpin_runtime::Shutdown;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use tokio::sync::Notify;

use crate::source::EntrySource;
use crate::{AgentError, HostsFile, SyncOutcome};

/// How the agent behaves.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// How often the source and the hosts file are checked (the file is re-synced when
    /// something else rewrote it, e.g. the kubelet or a package update).
    pub interval: Duration,
    /// Remove the block when shutting down (uninstall).
    pub remove_on_exit: bool,
}

/// The running agent's parts.
#[derive(Debug)]
pub struct Agent {
    hosts: HostsFile,
    source: Box<dyn EntrySource>,
    wake: Option<Arc<Notify>>,
    options: AgentOptions,
    syncs: Family<Vec<(&'static str, &'static str)>, Counter>,
}

impl Agent {
    /// An agent that keeps `hosts` in line with `source`.
    pub fn new(
        hosts: HostsFile,
        source: impl EntrySource + 'static,
        options: AgentOptions,
    ) -> Self {
        Self {
            hosts,
            source: Box::new(source),
            wake: None,
            options,
            syncs: Family::default(),
        }
    }

    /// Also syncs as soon as `wake` is notified (a watch event), not only every interval.
    #[must_use]
    pub fn wake_on(mut self, wake: Arc<Notify>) -> Self {
        self.wake = Some(wake);
        self
    }

    /// Registers the agent's metrics: `hairpin_node_agent_syncs_total{result}`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        registry.register(
            "hairpin_node_agent_syncs",
            "Hosts-file sync passes by result (unchanged, written, or the error kind)",
            self.syncs.clone(),
        );
    }

    /// One pass: read the source, sync the file.
    ///
    /// # Errors
    /// The source's or the file's error; the file is as it was.
    pub fn sync_once(&self) -> Result<SyncOutcome, AgentError> {
        let result = self.source.entries().and_then(|entries| {
            self.hosts
                .sync(&entries)
                .map(|outcome| (entries.len(), outcome))
        });
        let label = match &result {
            Ok((_, SyncOutcome::Unchanged)) => "unchanged",
            Ok((_, SyncOutcome::Written { .. })) => "written",
            Err(err) => err.metric_label(),
        };
        self.syncs.get_or_create(&vec![("result", label)]).inc();
        let (entries, outcome) = result?;
        if let SyncOutcome::Written { old_len, new_len } = outcome {
            tracing::info!(
                path = %self.hosts.path().display(),
                entries,
                old_len,
                new_len,
                "hosts file updated and verified"
            );
        }
        Ok(outcome)
    }

    /// Runs until the drain starts: syncs every interval, marks `ready` after each successful
    /// pass (and not ready after a failed one), then removes the block if asked to.
    ///
    /// # Errors
    /// Only the final removal's error; sync errors are logged and retried.
    pub async fn run(&self, shutdown: &Shutdown, ready: &ReadyCondition) -> Result<(), AgentError> {
        let mut last_error: Option<String> = None;
        loop {
            match self.sync_once() {
                Ok(_) => {
                    if last_error.take().is_some() {
                        tracing::info!("hosts file in sync again");
                    }
                    ready.set(true);
                }
                Err(err) => {
                    let text = err.to_string();
                    // Log a persisting error once, not every interval.
                    if last_error.as_deref() != Some(&text) {
                        tracing::error!(error = %text, kind = err.metric_label(), "hosts file sync failed");
                    }
                    last_error = Some(text);
                    ready.set(false);
                }
            }
            let woken = async {
                match &self.wake {
                    // Let a burst of watch events settle into one sync.
                    Some(wake) => {
                        wake.notified().await;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = tokio::time::sleep(self.options.interval) => {}
                () = woken => {}
                () = shutdown.draining() => break,
            }
        }
        if self.options.remove_on_exit {
            let outcome = self.hosts.remove()?;
            tracing::info!(path = %self.hosts.path().display(), ?outcome, "removed the hairpin block on exit");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SourceFile;
    use hairpin_runtime::Readiness;

    async fn wait_for(path: &std::path::Path, needle: &str) {
        for _ in 0..250 {
            if std::fs::read_to_string(path).unwrap().contains(needle) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{} never contained {needle:?}", path.display());
    }

    #[tokio::test]
    async fn follows_the_source_and_removes_the_block_on_exit() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("hosts");
        let source = dir.path().join("entries.yaml");
        std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
        std::fs::write(
            &source,
            "- ip: 10.96.0.20\n  hostnames: [shop.example.com]\n",
        )
        .unwrap();
        let agent = Agent::new(
            HostsFile::new(hosts.clone()),
            SourceFile::new(&source),
            AgentOptions {
                interval: Duration::from_millis(20),
                remove_on_exit: true,
            },
        );
        let shutdown = Shutdown::new();
        let readiness = Readiness::new();
        let ready = readiness.condition("hosts file in sync");
        let read = || std::fs::read_to_string(&hosts).unwrap();
        let run = {
            let shutdown = shutdown.clone();
            async move { agent.run(&shutdown, &ready).await }
        };
        let check = async {
            wait_for(&hosts, "10.96.0.20\tshop.example.com").await;
            assert!(readiness.is_ready());
            // The source changes: the agent follows.
            std::fs::write(
                &source,
                "- ip: 10.96.0.21\n  hostnames: [shop.example.com]\n",
            )
            .unwrap();
            wait_for(&hosts, "10.96.0.21\tshop.example.com").await;
            // A broken source: not ready, and the file keeps its last good block.
            std::fs::write(&source, "- ip: nope\n  hostnames: [x]\n").unwrap();
            for _ in 0..250 {
                if !readiness.is_ready() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(!readiness.is_ready());
            assert!(read().contains("10.96.0.21\tshop.example.com"));
            shutdown.trigger();
        };
        let (result, ()) = tokio::join!(run, check);
        result.unwrap();
        assert_eq!(read(), "127.0.0.1 localhost\n");
    }
}
