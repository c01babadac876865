//! Pure hairpin planner: discovery, hostnames, plan, Corefile and hosts-file editing.
//!
//! `desired(&ClusterSnapshot, &PlannerConfig) -> Plan` is the whole job; it does no I/O.
//! The controller applies the [`Plan`]; `hairpin plan` prints it.
//!
//! - [`snapshot`]: the input objects.
//! - [`config`]: settings, each with a default.
//! - [`providers`]: PROXY protocol from provider annotations and ours.
//! - [`discovery`]: which load balancers need a hairpin.
//! - [`name`]: the hostname type and validator every part shares.
//! - [`escape`]: untrusted strings made safe to print in every output format.
//! - [`admission`]: which hostnames may be redirected, on whose word.
//! - [`hostnames`]: the hostnames of each load balancer, and conflicts.
//! - [`verify`]: which of them are proven, by resolution, to be their load balancer's.
//! - [`sources`]: hostname sources defined by CRDs (Traefik, Istio, Contour).
//! - [`plan`]: the plan value; [`desired`] computes it.
//! - [`corefile`], [`hosts`]: the Corefile and hosts-file editors.
//! - [`external_dns`]: the `DNSEndpoint` objects of the `external-dns` DNS mode.
//! - [`kube_dns`]: the `stubDomains` alternative printed on kube-dns clusters.
//! - [`load`]: cluster objects from YAML text; [`render`]: text, diff and YAML forms of a plan.

pub mod admission;
pub mod config;
pub mod corefile;
mod desired;
pub mod discovery;
pub mod escape;
pub mod external_dns;
pub mod hostnames;
pub mod hosts;
pub mod kube_dns;
pub mod load;
pub mod markers;
pub mod name;
pub mod plan;
pub mod providers;
pub mod render;
pub mod snapshot;
pub mod sources;
pub mod verify;
pub mod warning;

pub use admission::{AdmissionConfig, NamespacePolicy, Refusal, RefusalReason};
pub use config::{DnsMode, NodeLocalDns, PlannerConfig};
pub use desired::{cluster_dns_service, desired};
pub use discovery::{Discovery, LbPort, LoadBalancer, NotNeeded, SkipReason, discover};
pub use hostnames::{Conflict, Hostname, WildcardLabels};
pub use plan::{
    DnsChange, DnsRedirect, DnsWrite, HostsEntry, HostsPlan, LoadBalancerPlan, Plan, ProxyHeader,
    ProxyRoute, WriteEdit,
};
pub use providers::ProxyVersion;
pub use snapshot::{ClusterSnapshot, ObjectRef};
pub use verify::{Resolution, Unverified, UnverifiedReason, Verification, VerifyMode};
pub use warning::Warning;
