//! Kubernetes I/O for hairpin: watches, plan application (the proxy routes and the node agents'
//! hosts block are published in ConfigMaps), leader election, uninstall.
//!
//! - [`crd`]: the `Hairpin` custom resource, status per hairpinned load balancer.
//! - [`status`]: the `Hairpin` objects' status, and the propagation check behind it.
//! - [`propagation`]: asking the cluster DNS whether a write took effect.
//! - [`watch`]: reflector caches of what the planner reads (fed in `watch/streams.rs`), and
//!   the snapshot built from them (`watch/snapshot.rs`).
//! - [`controller`]: the debounced plan-and-apply loop, run only by the leader: the loop,
//!   a pure `decide` (Events, their texts, metric choices, the write-fight policy) and `act`.
//! - [`context`]: what the loop's writers share (client, Events, metrics, planner settings,
//!   change signal), built once by [`ControllerConfig::build`].
//! - [`edits`]: the pure edits the loop and `preview` write (routes, hosts block, DNS keys,
//!   mode-switch clean-up) and the fix named in a write fight.
//! - [`apply`]: writing a plan (Services, ConfigMap keys guarded by resourceVersion).
//! - [`dns_endpoints`]: the `DNSEndpoint` objects of `--dns-mode external-dns`.
//! - [`native`]: the native cure: `ipMode: Proxy` on a load balancer's status, proven by
//!   probe, recorded for uninstall.
//! - [`fight`]: detecting another writer reverting our CoreDNS change.
//! - [`lease`]: leader election on a Lease, and the uninstall fence on it.
//! - [`gate`]: the write gate every API write of the controller passes.
//! - [`uninstall`]: removing everything hairpin wrote.
//! - [`removal`]: a removal without the uninstall hook (a GitOps prune, `kubectl delete -f`, a
//!   deleted namespace) told from a restart; the restore then, with what it needs held.
//! - [`ownership`]: the ownership resolver: the hostnames resolved as the cluster DNS would
//!   without hairpin's rules, proving which load balancer owns each, for hostname verification.
//! - [`preview`]: `hairpin plan` against a cluster: what the controller would write now.
#![forbid(unsafe_code)]

pub mod apply;
pub mod client;
pub mod context;
pub mod controller;
pub mod crd;
pub mod dns_endpoints;
pub mod edits;
mod error;
pub mod fight;
pub mod gate;
pub mod lease;
pub mod metrics;
pub mod native;
pub mod ownership;
pub mod preview;
pub mod propagation;
pub mod removal;
pub mod report;
pub mod status;
#[cfg(test)]
mod test_support;
pub mod uninstall;
pub mod watch;

pub use controller::{ControllerConfig, run};
pub use error::Error;
pub use metrics::Metrics;
pub use uninstall::{UninstallParams, UninstallReport, uninstall, uninstall_with};
