//! Pure hairpin planner: discovery, hostnames, plan, Corefile and hosts-file editing.
//!
//! `desired(&ClusterSnapshot, &PlannerConfig) -> Plan` is the whole job; it does no I/O.
//! The controller applies the [`Plan`]; `hairpin plan` prints it.
//!
//! The modules are the stages the data flows through, in this order; each uses only the
//! stages above it and the shared value types (`scripts/module-graph.py --check` proves there
//! is no cycle; docs/architecture.md tells the stages):
//!
//! Shared value types, used by every stage:
//! - [`name`]: the hostname type and validator every part shares, and [`name::WildcardLabels`].
//! - [`escape`]: untrusted strings made safe to print in every output format.
//! - `warning`: the plan's warnings; [`markers`]: hairpin's marked blocks in text files.
//! - `config`: settings, each with a default.
//! - [`forward`]: where the cluster DNS forwards a name (the Corefile's `forward` targets per
//!   zone, as values).
//!
//! Stages:
//! 1. `snapshot`: the input objects (with the CRD sources, `DNSEndpoint`s and the
//!    resolver's answers).
//! 2. `discovery`: which load balancers need a hairpin (`providers`: PROXY protocol from
//!    provider annotations and ours; [`receivers`]: the receiving side's own PROXY setting,
//!    read from the [`workloads`] and custom resources of the snapshot).
//!    [`delivery`]: how each load balancer reaches the nodes (a proxy, or a VIP the nodes
//!    receive); [`native`]: the cure of each (`ipMode: Proxy` where proven on a proxy, else
//!    DNS), barred by [`nodes`] where a node's data plane is known not to honour `ipMode`.
//! 3. [`sources`], [`hostnames`]: the hostnames each load balancer serves, and conflicts; each
//!    claim passes [`admission`]: which hostnames may be redirected, on whose word.
//! 4. [`verify`]: which of them are proven, by resolution, to be their load balancer's.
//! 5. `balancers`: the hairpin of each load balancer: its Service, listener ports, routes and
//!    the names placed on it.
//! 6. DNS rendering: `coredns` (the writes into the CoreDNS ConfigMaps: Corefile,
//!    `coredns-custom`, node-local-dns) with the [`corefile`] editor, [`hosts`] (the node
//!    agents' hosts file), [`external_dns`] (`DNSEndpoint`s), [`kube_dns`] (`stubDomains`).
//!    [`dns`]: a change to one DNS ConfigMap key as data ([`dns::KeyChange`]), applied to the
//!    key's current text by [`dns::apply`] (the controller's writes and `hairpin plan`).
//! 7. `plan`: the plan value, with its errors ([`PlanError`]); `desired` runs the stages.
//!
//! On top: [`load`] (cluster objects from YAML text) and [`render`] (text, diff and YAML forms
//! of a plan).
//!
//! One public path per item: the modules of the shared value types and of the plan's parts
//! (`config`, `snapshot`, `warning`, `discovery`, `providers`, `balancers`, `coredns`, `plan`,
//! `error`) are private and their items are re-exported here; a stage's own items are reached
//! through its module.

#![forbid(unsafe_code)]

pub mod admission;
mod balancers;
mod config;
mod coredns;
pub mod corefile;
pub mod delivery;
mod desired;
mod discovery;
pub mod dns;
mod error;
pub mod escape;
pub mod external_dns;
pub mod forward;
pub mod hostnames;
pub mod hosts;
pub mod kube_dns;
pub mod load;
pub mod markers;
pub mod name;
pub mod native;
pub mod node_probes;
pub mod nodes;
mod plan;
mod providers;
pub mod receivers;
pub mod render;
mod snapshot;
pub mod sources;
pub mod verify;
mod warning;
pub mod workloads;

// One public path per item: the shared value types and the plan's parts live at the root (their
// modules are private); the stages' own items under their stage's module.
pub use balancers::*;
pub use config::*;
pub use coredns::*;
pub use desired::desired;
pub use discovery::*;
pub use error::*;
pub use plan::*;
pub use providers::*;
pub use snapshot::*;
pub use warning::*;
