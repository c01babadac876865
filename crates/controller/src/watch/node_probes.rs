//! The node agents' reports of their proofs of the native cure
//! ([`hairpin_planner::node_probes`]): one Lease per node in hairpin's namespace, selected by
//! the label `app.kubernetes.io/component=node-probe`, watched (retried with
//! [`WatchBackoff`], so it never ends) and read into [`NodeReport`]s for the planner. The
//! change signal is poked when a report's probes change or a Lease comes or goes, not on every
//! heartbeat; a heartbeat growing old is noticed by the loop's own requeue.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use hairpin_planner::node_probes::{
    NodeReport, ONE_SHOT_MAX_AGE, PROBES_ANNOTATION, from_lease, label_selector, reports,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;

use super::WatchBackoff;

/// The nodes' Leases as the watch saw them last; cheap to clone.
#[derive(Clone)]
pub(crate) struct NodeProbeLeases {
    store: Store<Lease>,
    synced: Arc<AtomicBool>,
}

impl NodeProbeLeases {
    /// Watches the Leases of `namespace` until the handle aborts it, poking `changed` when a
    /// report changes.
    pub(crate) fn spawn(
        client: kube::Client,
        namespace: &str,
        changed: Arc<Notify>,
    ) -> (Self, tokio::task::AbortHandle) {
        let (store, writer) = reflector::store();
        let this = Self {
            store,
            synced: Arc::default(),
        };
        let api: Api<Lease> = Api::namespaced(client, namespace);
        let watch = tokio::spawn(this.clone().watch(api, writer, changed));
        (this, watch.abort_handle())
    }

    /// Every node's report, `fresh` when its heartbeat is within `max_age` of now; `None`
    /// until the Leases were listed (nothing is vouched for meanwhile: the planner waits).
    pub(crate) fn reports(&self, max_age: Duration) -> Option<Vec<NodeReport>> {
        self.synced.load(Ordering::Acquire).then(|| {
            let now = Timestamp::now();
            self.store
                .state()
                .iter()
                .filter_map(|lease| from_lease(lease, now, max_age))
                .collect()
        })
    }

    /// Each Lease's holder and probes annotation: what wakes the loop when it changes.
    fn contents(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .store
            .state()
            .iter()
            .map(|lease| {
                let holder = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.clone())
                    .unwrap_or_default();
                let probes = lease
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(PROBES_ANNOTATION).cloned())
                    .unwrap_or_default();
                (holder, probes)
            })
            .collect();
        out.sort();
        out
    }

    async fn watch(self, api: Api<Lease>, writer: Writer<Lease>, changed: Arc<Notify>) {
        let events = reflector::reflector(
            writer,
            watcher::watcher(api, watcher::Config::default().labels(&label_selector()))
                .backoff(WatchBackoff::default()),
        );
        futures::pin_mut!(events);
        let mut last = self.contents();
        while let Some(event) = events.next().await {
            let listed = match event {
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                Ok(watcher::Event::InitDone) => true,
                Ok(_) => false,
                Err(err) => {
                    // Not listed: no node is vouched for (the planner keeps the DNS cure).
                    tracing::debug!(error = %err, "cannot watch the node agents' Leases");
                    false
                }
            };
            let first = listed && !self.synced.swap(true, Ordering::AcqRel);
            let now = self.contents();
            if first || now != last {
                changed.notify_one();
            }
            last = now;
        }
    }
}

/// The node agents' reports listed once (`hairpin plan`); `None` where no agent reports, or
/// their Leases cannot be listed (the controller's probe decides, as where none runs).
pub(crate) async fn list_node_reports(
    client: kube::Client,
    namespace: &str,
) -> Option<Vec<NodeReport>> {
    let api: Api<Lease> = Api::namespaced(client, namespace);
    let params = kube::api::ListParams::default().labels(&label_selector());
    let leases = api.list(&params).await.ok()?;
    reports(&leases.items, Timestamp::now(), ONE_SHOT_MAX_AGE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hairpin_planner::node_probes::NodeProbes;
    use serde_json::json;

    fn lease(name: &str, holder: &str, renewed: &str, probes: Option<&str>) -> Lease {
        let mut value = json!({
            "metadata": {"name": name, "namespace": "hairpin"},
            "spec": {"holderIdentity": holder, "renewTime": renewed},
        });
        if let Some(probes) = probes {
            value["metadata"]["annotations"] = json!({ PROBES_ANNOTATION: probes });
        }
        serde_json::from_value(value).unwrap()
    }

    const NOW: &str = "2026-12-06T12:00:00Z";
    const PROBES: &str = r#"{"ingress/nginx":{"uid":"u","attempt":"a","result":"proven"}}"#;

    #[test]
    fn a_lease_is_a_nodes_report_fresh_within_the_age() {
        let now: Timestamp = NOW.parse().unwrap();
        let age = Duration::from_secs(30);
        let fresh = lease(
            "hairpin-node-a",
            "a",
            "2026-12-06T11:59:40.000000Z",
            Some(PROBES),
        );
        let seen = from_lease(&fresh, now, age).unwrap();
        assert_eq!(seen.node, "a");
        assert!(seen.fresh);
        assert_eq!(seen.probes.unwrap()["ingress/nginx"].attempt, "a");
        let stale = lease("hairpin-node-a", "a", "2026-12-06T11:59:00.000000Z", None);
        let seen = from_lease(&stale, now, age).unwrap();
        assert!(!seen.fresh);
        assert_eq!(seen.probes, Ok(NodeProbes::new()));
    }

    #[test]
    fn a_lease_named_for_another_node_or_unreadable_vouches_for_nothing() {
        let now: Timestamp = NOW.parse().unwrap();
        let age = Duration::from_secs(30);
        // Node b's agent writing a report for node a is no report of a's.
        let other = lease("hairpin-node-b", "a", NOW, Some(PROBES));
        assert_eq!(from_lease(&other, now, age), None);
        let broken = lease("hairpin-node-a", "a", NOW, Some("{\u{1b}"));
        let why = from_lease(&broken, now, age).unwrap().probes.unwrap_err();
        assert!(!why.contains('\u{1b}'), "{why}");
    }
}
