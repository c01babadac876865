//! The Nodes' kubelet and kube-proxy versions, part of the native cure's data plane: a node
//! pool on another kube-proxy, or an upgrade of the kubelets (a kube-proxy that runs as no
//! DaemonSet, as on k3s, RKE2 or a managed node image, is upgraded with them), may stop
//! honouring `ipMode`, so a change re-proves the cure and resets its backoff.
//!
//! A watch of the Nodes (retried with [`WatchBackoff`], so it never ends) keeps only each
//! Node's name and two version strings; the whole Node is dropped as it arrives. The change
//! signal is poked only when the versions seen change, not on every Node status update.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
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

#[derive(Default)]
struct Seen {
    /// Listed once (or the list failed: the Nodes are then left out of the data plane).
    synced: bool,
    nodes: BTreeMap<String, NodeVersion>,
}

/// The Nodes' versions as the watch saw them last; cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct NodeVersions {
    seen: Arc<Mutex<Seen>>,
}

impl NodeVersions {
    /// The distinct versions, sorted (`kubelet@v1.31.14,v1.32.0; kube-proxy@v1.30.2`), empty
    /// when no Node says any; `None` until the Nodes were listed (or could not be).
    pub(crate) fn fingerprint(&self) -> Option<String> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.synced.then(|| fingerprint(seen.nodes.values()))
    }

    /// Applies `change` to the Nodes seen; returns whether the fingerprint changed.
    fn update(&self, change: impl FnOnce(&mut BTreeMap<String, NodeVersion>)) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let before = fingerprint(seen.nodes.values());
        change(&mut seen.nodes);
        before != fingerprint(seen.nodes.values())
    }

    fn mark_synced(&self) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        !std::mem::replace(&mut seen.synced, true)
    }

    /// Watches the Nodes until aborted, poking `changed` when the versions change.
    pub(crate) fn spawn(
        &self,
        client: kube::Client,
        changed: Arc<Notify>,
    ) -> tokio::task::AbortHandle {
        let this = self.clone();
        tokio::spawn(async move { this.watch(client, changed).await }).abort_handle()
    }

    async fn watch(self, client: kube::Client, changed: Arc<Notify>) {
        let api: Api<Node> = Api::all(client);
        // Only the name and two strings of each Node are kept; `modify` drops the rest of
        // the object as it arrives, before anything else sees it.
        let events = watcher::watcher(api, watcher::Config::default())
            .modify(trim)
            .backoff(WatchBackoff::default());
        let mut listing: Option<BTreeMap<String, NodeVersion>> = None;
        futures::pin_mut!(events);
        while let Some(event) = events.next().await {
            let poke = match event {
                Ok(watcher::Event::Init) => {
                    listing = Some(BTreeMap::new());
                    false
                }
                Ok(watcher::Event::InitApply(node)) => {
                    if let (Some(list), Some(name)) = (listing.as_mut(), node.metadata.name.clone())
                    {
                        list.insert(name, NodeVersion::of(&node));
                    }
                    false
                }
                Ok(watcher::Event::InitDone) => {
                    let list = listing.take().unwrap_or_default();
                    let changed = self.update(|nodes| *nodes = list);
                    self.mark_synced() || changed
                }
                Ok(watcher::Event::Apply(node)) => {
                    let Some(name) = node.metadata.name.clone() else {
                        continue;
                    };
                    self.update(|nodes| {
                        nodes.insert(name, NodeVersion::of(&node));
                    })
                }
                Ok(watcher::Event::Delete(node)) => {
                    let Some(name) = node.metadata.name.clone() else {
                        continue;
                    };
                    self.update(|nodes| {
                        nodes.remove(&name);
                    })
                }
                Err(err) => {
                    // Not allowed to list Nodes (an older chart), or no answer: the Nodes are
                    // left out of the data plane meanwhile rather than holding it back.
                    tracing::debug!(error = %err, "cannot watch the Nodes' versions");
                    self.mark_synced()
                }
            };
            if poke {
                tracing::debug!(versions = ?self.fingerprint(), "the Nodes' versions changed");
                changed.notify_one();
            }
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
