//! The node agents' proofs of the native cure (issue 45): the controller's probe runs from one
//! pod, on one node, so it cannot tell whether every other node's kube-proxy (or CNI) honours
//! `ipMode`; a kube-proxy run outside the cluster with `LoadBalancerIPMode=false` says nothing
//! the Nodes' gate ([`crate::nodes`]) can read. Where the node agents run, each one probes
//! every cure of the record through its own node's data plane and reports in a small
//! per-node object, a Lease `hairpin-node-<node>` (`holderIdentity` the node, `renewTime` the
//! heartbeat, the results in the annotation [`PROBES_ANNOTATION`]).
//!
//! Then a cure counts as proven only when every Node has a fresh report that proved this
//! attempt ([`crate::native::NativeEntry::attempt`]); until then the load balancer keeps the DNS cure and
//! the nodes still missing are named ([`crate::nodes::verdict`]). A node that reports `failed` for the
//! current attempt ends the cure: the DNS rules come back first, then `ipMode` is put back. A
//! Node added after the cure was proven has no report yet: the DNS rules come back until its
//! agent proved it. Pure: the reports, the Nodes and the record in, a verdict per entry out.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;

use serde::{Deserialize, Serialize};

/// The annotation of a node's Lease that holds its probes ([`NodeProbes`], JSON).
pub const PROBES_ANNOTATION: &str = "hairpin.io/native-probes";

/// The prefix of a node's Lease name: `hairpin-node-<node>`.
pub const LEASE_PREFIX: &str = "hairpin-node-";

/// The value of the label `app.kubernetes.io/component` of the nodes' Leases (the controller
/// watches them by it).
pub const COMPONENT: &str = "node-probe";

/// The label selector of the nodes' Leases.
pub fn label_selector() -> String {
    format!("app.kubernetes.io/component={COMPONENT}")
}

/// How old a node agent's heartbeat may be and still vouch for its node when the Leases are
/// read once (`hairpin plan`, `hairpin doctor`): the chart's default `nodeAgent.probeMaxAge`.
pub const ONE_SHOT_MAX_AGE: Duration = Duration::from_secs(120);

/// The nodes' reports in `leases` as of `now` ([`from_lease`]); `None` where no Lease is a
/// node's report (no agent runs: the controller's probe decides).
pub fn reports(leases: &[Lease], now: Timestamp, max_age: Duration) -> Option<Vec<NodeReport>> {
    let reports: Vec<NodeReport> = leases
        .iter()
        .filter_map(|lease| from_lease(lease, now, max_age))
        .collect();
    (!reports.is_empty()).then_some(reports)
}

/// The name of `node`'s Lease.
pub fn lease_name(node: &str) -> String {
    format!("{LEASE_PREFIX}{node}")
}

/// A node agent's verdict on one cure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeResult {
    /// Every port answered through this node's data plane, from the receiver.
    Proven,
    /// Not: the reason says what this node saw.
    Failed,
}

/// A node agent's proof of one cure (one attempt).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeProbe {
    /// The Service's uid.
    pub uid: String,
    /// The attempt it answers ([`crate::native::NativeEntry::attempt`]).
    pub attempt: String,
    /// The verdict.
    pub result: NodeResult,
    /// What the node saw, in words (escaped by the agent).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// When it was reached (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub at: String,
}

/// A node's probes, by load balancer (`namespace/name`): the annotation's content.
pub type NodeProbes = BTreeMap<String, NodeProbe>;

/// One node's report as the controller read it from the node's Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport {
    /// The node (the Lease's `holderIdentity`).
    pub node: String,
    /// Its heartbeat is recent (`renewTime` within a few agent intervals).
    pub fresh: bool,
    /// Its probes; `Err`: the annotation cannot be read (why, escaped).
    pub probes: Result<NodeProbes, String>,
}

/// One Lease as a node's report, `fresh` when renewed within `max_age` of `now` (`None`: no
/// holder, or not named after it: not a node's).
pub fn from_lease(lease: &Lease, now: Timestamp, max_age: Duration) -> Option<NodeReport> {
    let spec = lease.spec.as_ref()?;
    // A node's Lease is named after its holder (the admission policy holds each agent to its
    // own node's name where its token says it).
    let node = spec
        .holder_identity
        .clone()
        .filter(|h| !h.is_empty() && lease.metadata.name.as_deref() == Some(&lease_name(h)))?;
    let fresh = spec.renew_time.as_ref().is_some_and(|t| {
        let age = now.duration_since(t.0);
        Duration::try_from(age).is_ok_and(|age| age <= max_age)
            // A clock a little ahead of ours is fresh too.
            || age.is_negative()
    });
    let probes = match lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROBES_ANNOTATION))
    {
        None => Ok(NodeProbes::new()),
        Some(text) => serde_json::from_str::<NodeProbes>(text)
            .map_err(|e| crate::escape::controls(&e.to_string()).into_owned()),
    };
    Some(NodeReport {
        node,
        fresh,
        probes,
    })
}
