//! The native cure's sensors, started by the loop (not by its writes): the Nodes' watch and
//! the node agents' Leases (from the first native cure on), and the probes, each a task
//! started by the cure's executor. Each wakes the loop through the change signal; what they
//! saw is read into the memory ([`NativeMemory`]) at the start of the cure's step
//! ([`NativeSensors::read`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hairpin_planner::node_probes::NodeReport;
use tokio::sync::Notify;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::AbortHandle;

use super::memory::NativeMemory;
use super::{Finished, NativeParams};
use crate::context::Context;
use crate::watch::{NodeProbeLeases, NodeVersions};

/// A probe's result, by `namespace/name`.
type Report = (String, Finished);

/// See the module documentation.
pub(crate) struct NativeSensors {
    client: kube::Client,
    namespace: String,
    changed: Arc<Notify>,
    /// [`NativeParams::node_reports`].
    node_reports: Option<Duration>,
    /// The Nodes' versions (part of the data plane).
    nodes: Option<(NodeVersions, AbortHandle)>,
    /// The node agents' reports (their Leases).
    node_probes: Option<(NodeProbeLeases, AbortHandle)>,
    /// Probes running, by `namespace/name`.
    pub(super) running: BTreeMap<String, AbortHandle>,
    /// Where the probes' results come in, by `namespace/name`.
    inbox: (UnboundedSender<Report>, UnboundedReceiver<Report>),
}

impl Drop for NativeSensors {
    fn drop(&mut self) {
        for task in self.running.values() {
            task.abort();
        }
        if let Some((_, watch)) = &self.nodes {
            watch.abort();
        }
        if let Some((_, watch)) = &self.node_probes {
            watch.abort();
        }
    }
}

impl NativeSensors {
    /// No sensor started yet.
    pub(crate) fn new(ctx: &Context, params: &NativeParams) -> Self {
        Self {
            client: ctx.client.clone(),
            namespace: ctx.planner.namespace.clone(),
            changed: ctx.changed.clone(),
            node_reports: params.node_reports,
            nodes: None,
            node_probes: None,
            running: BTreeMap::new(),
            inbox: unbounded_channel(),
        }
    }

    /// From the first native cure on (`native`: a cure recorded or planned; none with
    /// `--cure dns`, whose chart grants no Node reads), the Nodes are watched, and the node
    /// agents' Leases where they report.
    pub(crate) fn start(&mut self, native: bool) {
        if !native {
            return;
        }
        if self.nodes.is_none() {
            self.nodes = Some(NodeVersions::spawn(
                self.client.clone(),
                self.changed.clone(),
            ));
        }
        if self.node_probes.is_none() && self.node_reports.is_some() {
            self.node_probes = Some(NodeProbeLeases::spawn(
                self.client.clone(),
                &self.namespace,
                self.changed.clone(),
            ));
        }
    }

    /// What the sensors saw, into `memory`: the probes finished, and the Nodes' versions.
    pub(crate) fn read(&mut self, memory: &mut NativeMemory) {
        while let Ok((key, finished)) = self.inbox.1.try_recv() {
            // Its task is done.
            self.running.remove(&key);
            memory.verdicts.insert(key, finished);
        }
        memory.nodes = self
            .nodes
            .as_ref()
            .and_then(|(nodes, _)| nodes.fingerprint());
    }

    /// The Nodes as the watch keeps them (names and versions), for the planner's gate
    /// ([`hairpin_planner::nodes::gate`]); empty until they are watched and listed.
    pub(crate) fn nodes(&self) -> Vec<k8s_openapi::api::core::v1::Node> {
        self.nodes
            .as_ref()
            .and_then(|(nodes, _)| nodes.nodes())
            .unwrap_or_default()
    }

    /// The node agents' reports now: `None` where none reports; until their Leases are listed,
    /// none (nobody vouched for).
    pub(crate) fn node_probes(&self) -> Option<Vec<NodeReport>> {
        let max_age = self.node_reports?;
        Some(
            self.node_probes
                .as_ref()
                .and_then(|(leases, _)| leases.reports(max_age))
                .unwrap_or_default(),
        )
    }

    /// Runs `work` for `key` in a task (one at a time per Service); its result comes in at
    /// the next reconcile, which it triggers.
    pub(super) fn spawn(
        &mut self,
        key: String,
        work: impl Future<Output = Finished> + Send + 'static,
    ) {
        if self.running.contains_key(&key) {
            return;
        }
        let inbox = self.inbox.0.clone();
        let changed = self.changed.clone();
        let task_key = key.clone();
        let task = tokio::spawn(async move {
            let finished = work.await;
            // The receiver lives as long as the sensors, which abort this task when dropped.
            let _ = inbox.send((task_key, finished));
            changed.notify_one();
        });
        self.running.insert(key, task.abort_handle());
    }

    /// Stops the probe of `key`, if one runs.
    pub(super) fn stop(&mut self, key: &str) {
        if let Some(task) = self.running.remove(key) {
            task.abort();
        }
    }
}
