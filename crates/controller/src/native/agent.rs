//! The native cure proven from every node (issue 45): run by each node agent, this probes every
//! cure of hairpin's record (`hairpin-native`, watched by name, read only) whose status
//! hairpin set to `Proxy` (`probing` or `proven`) through its own node's data plane, with the
//! controller's own proof ([`prove_from`]: the same targets, the receiver's fingerprint
//! recorded before the write), and reports in its node's Lease `hairpin-node-<node>`
//! ([`hairpin_planner::node_probes`]): `holderIdentity` the node, `renewTime` the heartbeat,
//! the verdict per cure and attempt in the annotation. It probes again when the record
//! changes and every interval, so that a node that stops honouring `ipMode` is seen; a
//! failure is final for its attempt (the controller ends that cure).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use hairpin_planner::native::{NativeRecord, ProbeState};
use hairpin_planner::node_probes::{
    COMPONENT, NodeProbe, NodeProbes, NodeResult, PROBES_ANNOTATION, lease_name,
};
use hairpin_runtime::Shutdown;
use hairpin_runtime::configmap::KeyUpdate;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::Notify;

use super::NativeParams;
use super::probe::{Proof, prove_from};

/// How a node agent proves the cures.
#[derive(Clone, Debug)]
pub struct NodeProberOptions {
    /// The node it runs on (`NODE_NAME`, from the downward API's `spec.nodeName`).
    pub node: String,
    /// The release namespace (the record's and the Leases').
    pub namespace: String,
    /// Between two rounds (and the heartbeat).
    pub interval: Duration,
    /// The probe's settings (deadline, answers in a row, timeouts).
    pub params: NativeParams,
}

/// One node agent's prover.
#[derive(Debug)]
pub struct NodeProber {
    api: Api<Lease>,
    options: NodeProberOptions,
    /// The last record read (`None`: not read yet, or unreadable).
    record: Arc<Mutex<Option<NativeRecord>>>,
    /// Poked on every record change.
    changed: Arc<Notify>,
    /// This node's verdicts, by `namespace/name`.
    probes: NodeProbes,
}

impl NodeProber {
    /// A prover writing its Lease through `client`.
    pub fn new(client: kube::Client, options: NodeProberOptions) -> Self {
        Self {
            api: Api::namespaced(client, &options.namespace),
            options,
            record: Arc::default(),
            changed: Arc::new(Notify::new()),
            probes: NodeProbes::new(),
        }
    }

    /// Follows the record's `updates` (the value of its key), probes and reports every
    /// interval and on each change, until the drain starts.
    pub async fn run(
        mut self,
        updates: impl Stream<Item = KeyUpdate> + Send + 'static,
        shutdown: &Shutdown,
    ) {
        let record = self.record.clone();
        let changed = self.changed.clone();
        let follow = shutdown.clone();
        tokio::spawn(async move {
            let mut updates = std::pin::pin!(updates);
            loop {
                tokio::select! {
                    update = updates.next() => match update {
                        Some(update) => {
                            *record.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                                read(update);
                            changed.notify_one();
                        }
                        None => break,
                    },
                    () = follow.draining() => break,
                }
            }
        });
        tracing::info!(node = %self.options.node, "proving the native cures from this node");
        loop {
            self.round().await;
            if let Err(err) = self.report().await {
                tracing::warn!(node = %self.options.node, error = %err, "cannot write this node's probe report");
            }
            tokio::select! {
                () = tokio::time::sleep(self.options.interval) => {}
                () = self.changed.notified() => {}
                () = shutdown.draining() => break,
            }
        }
    }

    /// Probes every cure whose status hairpin set to `Proxy`; forgets the others.
    pub async fn round(&mut self) {
        let Some(record) = self
            .record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
        else {
            return;
        };
        self.probes.retain(|key, probe| {
            record
                .load_balancers
                .get(key)
                .is_some_and(|e| e.uid == probe.uid)
        });
        for (key, entry) in &record.load_balancers {
            if !matches!(entry.state, ProbeState::Probing | ProbeState::Proven)
                || entry.probe.targets.is_empty()
            {
                continue;
            }
            let attempt = entry.attempt().to_owned();
            let before = self
                .probes
                .get(key)
                .filter(|p| p.uid == entry.uid && p.attempt == attempt)
                .map(|p| p.result);
            // A failure is final for its attempt; a cure this node proved is probed again as
            // one whose ports answered before (silence repeated fails it at once).
            let proof = match before {
                Some(NodeResult::Failed) => continue,
                Some(NodeResult::Proven) => Proof::Again,
                None => Proof::AfterWrite,
            };
            let verdict = prove_from(
                entry.probe.targets.clone(),
                &self.options.params,
                None,
                proof,
                &entry.probe.receiver,
            )
            .await;
            let result = if verdict.proven {
                NodeResult::Proven
            } else {
                NodeResult::Failed
            };
            if result == NodeResult::Failed || before.is_none() {
                tracing::info!(node = %self.options.node, service = %key, result = ?result, detail = %verdict.detail, "native cure probed from this node");
            }
            self.probes.insert(
                key.clone(),
                NodeProbe {
                    uid: entry.uid.clone(),
                    attempt,
                    result,
                    reason: verdict.detail,
                    at: Timestamp::now().to_string(),
                },
            );
        }
    }

    /// This node's verdicts.
    pub fn probes(&self) -> &NodeProbes {
        &self.probes
    }

    /// Writes this node's Lease: the verdicts and the heartbeat (created when missing).
    ///
    /// # Errors
    /// The API server's refusal.
    pub async fn report(&self) -> Result<(), kube::Error> {
        let node = &self.options.node;
        let name = lease_name(node);
        let probes = serde_json::to_string(&self.probes).unwrap_or_else(|_| "{}".into());
        let renew = MicroTime(Timestamp::now());
        let seconds = i32::try_from(self.options.interval.as_secs().saturating_mul(3).max(1))
            .unwrap_or(i32::MAX);
        let patch = json!({
            "metadata": {
                "labels": {
                    "app.kubernetes.io/component": COMPONENT,
                    "app.kubernetes.io/managed-by": "hairpin",
                },
                "annotations": { PROBES_ANNOTATION: probes },
            },
            "spec": {
                "holderIdentity": node,
                "renewTime": renew,
                "leaseDurationSeconds": seconds,
            },
        });
        let patched = self
            .api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        match patched {
            Err(kube::Error::Api(status)) if status.code == 404 => {
                let mut lease: Lease =
                    serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
                lease.metadata.name = Some(name);
                self.api
                    .create(&PostParams::default(), &lease)
                    .await
                    .map(drop)
            }
            other => other.map(drop),
        }
    }
}

/// The record in a ConfigMap update (`None`: missing or unreadable: nothing is probed).
fn read(update: KeyUpdate) -> Option<NativeRecord> {
    match update {
        KeyUpdate::Present(Some(text)) => match serde_json::from_str(&text) {
            Ok(record) => Some(record),
            Err(err) => {
                let err = hairpin_planner::escape::controls(&err.to_string()).into_owned();
                tracing::warn!(error = %err, "hairpin's native record cannot be read; nothing is probed");
                None
            }
        },
        KeyUpdate::Present(None) | KeyUpdate::Missing => Some(NativeRecord::default()),
    }
}
