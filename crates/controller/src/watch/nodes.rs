//! The Nodes' kubelet and kube-proxy versions, part of the native cure's data plane: a node
//! pool on another kube-proxy, or an upgrade of the kubelets (a kube-proxy that runs as no
//! DaemonSet, as on k3s, RKE2 or a managed node image, is upgraded with them), may stop
//! honouring `ipMode`, so a change re-proves the cure and resets its backoff.
//!
//! A watch of the Nodes (retried with [`WatchBackoff`], so it never ends) keeps only each
//! Node's name and two version strings; the whole Node is dropped as it arrives. The change
//! signal is poked only when a Node is added or removed or its versions change, not on every
//! Node status update. The trimmed Nodes are also the planner's input for the Nodes' gate of
//! the native cure ([`hairpin_planner::nodes`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;

use super::WatchBackoff;

/// The versions one Node reports: `kubeletVersion`, and `kubeProxyVersion` where set (the
/// kubelet stopped setting it in 1.31; older ones and some distributions still do).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NodeVersion {
    pub(crate) kubelet: String,
    pub(crate) kube_proxy: String,
}

impl NodeVersion {
    /// The versions in `node`'s `status.nodeInfo`.
    pub(crate) fn of(node: &Node) -> Self {
        let info = node.status.as_ref().and_then(|s| s.node_info.as_ref());
        Self {
            kubelet: info.map(|i| i.kubelet_version.clone()).unwrap_or_default(),
            kube_proxy: info
                .map(|i| i.kube_proxy_version.clone())
                .unwrap_or_default(),
        }
    }
}

/// The Nodes' versions as the watch saw them last; cheap to clone.
#[derive(Clone)]
pub(crate) struct NodeVersions {
    /// The trimmed Nodes, kept by kube-runtime's reflector.
    store: Store<Node>,
    /// Listed once (or the list failed: the Nodes are then left out of the data plane).
    synced: Arc<AtomicBool>,
}

impl NodeVersions {
    /// Watches the Nodes until the handle aborts it, poking `changed` when the versions
    /// change.
    pub(crate) fn spawn(
        client: kube::Client,
        changed: Arc<Notify>,
    ) -> (Self, tokio::task::AbortHandle) {
        let (store, writer) = reflector::store();
        let this = Self {
            store,
            synced: Arc::default(),
        };
        let watch = tokio::spawn(this.clone().watch(client, writer, changed));
        (this, watch.abort_handle())
    }

    /// The distinct versions, sorted (`kubelet@v1.31.14,v1.32.0; kube-proxy@v1.30.2`), empty
    /// when no Node says any; `None` until the Nodes were listed (or could not be).
    pub(crate) fn fingerprint(&self) -> Option<String> {
        self.synced.load(Ordering::Acquire).then(|| self.current())
    }

    fn current(&self) -> String {
        let nodes = self.store.state();
        fingerprint(
            nodes
                .iter()
                .map(|node| NodeVersion::of(node))
                .collect::<Vec<_>>()
                .iter(),
        )
    }

    /// The trimmed Nodes (name and versions), for the planner's gate
    /// ([`hairpin_planner::nodes::gate`]); `None` until they were listed (or could not be).
    pub(crate) fn nodes(&self) -> Option<Vec<Node>> {
        self.synced
            .load(Ordering::Acquire)
            .then(|| self.store.state().iter().map(|n| (**n).clone()).collect())
    }

    /// Each Node's name and versions, sorted by name: the loop is woken when a Node is added,
    /// removed or changes version (a Node added on an older version is checked by the gate
    /// before it counts), not only when the set of versions changes.
    fn per_node(&self) -> Vec<(String, NodeVersion)> {
        let mut nodes: Vec<(String, NodeVersion)> = self
            .store
            .state()
            .iter()
            .map(|n| {
                (
                    n.metadata.name.clone().unwrap_or_default(),
                    NodeVersion::of(n),
                )
            })
            .collect();
        nodes.sort_by(|a, b| a.0.cmp(&b.0));
        nodes
    }

    async fn watch(self, client: kube::Client, writer: Writer<Node>, changed: Arc<Notify>) {
        let api: Api<Node> = Api::all(client);
        // Only the name and two strings of each Node are kept; `modify` drops the rest of
        // the object as it arrives, before the store sees it.
        let events = reflector::reflector(
            writer,
            watcher::watcher(api, watcher::Config::default())
                .modify(trim)
                .backoff(WatchBackoff::default()),
        );
        futures::pin_mut!(events);
        let mut last = self.per_node();
        while let Some(event) = events.next().await {
            let listed = match event {
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                Ok(watcher::Event::InitDone) => true,
                Ok(_) => false,
                Err(err) => {
                    // Not allowed to list Nodes (an older chart), or no answer: the Nodes are
                    // left out of the data plane meanwhile rather than holding it back.
                    tracing::debug!(error = %err, "cannot watch the Nodes' versions");
                    true
                }
            };
            let first = listed && !self.synced.swap(true, Ordering::AcqRel);
            let now = self.per_node();
            if first || now != last {
                tracing::debug!(nodes = now.len(), versions = %self.current(), "the Nodes or their versions changed");
                changed.notify_one();
            }
            last = now;
        }
    }
}

/// The Nodes, listed once and trimmed as the watch keeps them (`hairpin plan`); empty when
/// they cannot be listed (not granted: the gate then decides nothing, as where nothing tells).
pub(crate) async fn list(client: kube::Client) -> Vec<Node> {
    let api: Api<Node> = Api::all(client);
    match api.list(&kube::api::ListParams::default()).await {
        Ok(list) => list
            .items
            .into_iter()
            .map(|mut node| {
                trim(&mut node);
                node
            })
            .collect(),
        Err(err) => {
            tracing::debug!(error = %err, "cannot list the Nodes");
            Vec::new()
        }
    }
}

/// Keeps of a Node its name and its two versions.
fn trim(node: &mut Node) {
    let version = NodeVersion::of(node);
    let name = node.metadata.name.take();
    *node = Node::default();
    node.metadata.name = name;
    let info = k8s_openapi::api::core::v1::NodeSystemInfo {
        kubelet_version: version.kubelet,
        kube_proxy_version: version.kube_proxy,
        ..Default::default()
    };
    node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
        node_info: Some(info),
        ..Default::default()
    });
}

/// The distinct kubelet and kube-proxy versions of `nodes`, sorted.
pub(crate) fn fingerprint<'a>(nodes: impl Iterator<Item = &'a NodeVersion>) -> String {
    let (mut kubelets, mut proxies) = (BTreeSet::new(), BTreeSet::new());
    for node in nodes {
        if !node.kubelet.is_empty() {
            kubelets.insert(node.kubelet.as_str());
        }
        if !node.kube_proxy.is_empty() {
            proxies.insert(node.kube_proxy.as_str());
        }
    }
    let mut parts = Vec::new();
    for (what, versions) in [("kubelet", kubelets), ("kube-proxy", proxies)] {
        if !versions.is_empty() {
            parts.push(format!(
                "{what}@{}",
                versions.into_iter().collect::<Vec<_>>().join(",")
            ));
        }
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests;
