//! The last stage: the plan, a pure value: what hairpin would write for a snapshot.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::ConfigMap;
use serde::Serialize;

use crate::admission::Refusal;
use crate::balancers::{HostsEntry, HostsPlan, LoadBalancerPlan, ProxyRoute, cluster_ips};
use crate::coredns::{CorednsFacts, DnsChange};
use crate::discovery::NotNeeded;
use crate::error::PlanError;
use crate::hostnames::Conflict;
use crate::kube_dns::StubDomains;
use crate::native::{CureChoice, NativeAction};
use crate::snapshot::ObjectRef;
use crate::verify::Verification;
use crate::warning::Warning;

/// Everything hairpin would write, and everything it found worth reporting.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// One entry per load balancer that needs a hairpin, sorted by source Service.
    pub load_balancers: Vec<LoadBalancerPlan>,
    /// Load balancers that need none, with the reason.
    pub not_needed: Vec<NotNeeded>,
    /// Hostnames claimed by more than one load balancer; planned for none of them.
    pub conflicts: Vec<Conflict>,
    /// Hostnames the admission policy refused ([`crate::admission`]), with who asked and why;
    /// sorted. Each also has a warning.
    pub refused: Vec<Refusal>,
    /// The proxy route table, all load balancers together, sorted by listener port.
    pub routes: Vec<ProxyRoute>,
    /// The ConfigMap holding [`Plan::routes`] as JSON (`routes.json`), for `--routes-file`.
    pub routes_config_map: ConfigMap,
    /// The DNS change; `None` when it cannot be made (see [`Plan::errors`]).
    pub dns: Option<DnsChange>,
    /// What the cluster's CoreDNS configuration says, for the controller (the ConfigMaps
    /// found, `reload`, the forward zones, the imported key suffix, node-local-dns's binds):
    /// read once here. Not part of the printed plan.
    #[serde(skip)]
    pub coredns: CorednsFacts,
    /// The cure of each load balancer that needs one ([`crate::native`]), sorted by Service:
    /// those on `native` have no DNS rule and no hosts entry.
    pub cures: Vec<CureChoice>,
    /// The status writes of the native cure (set `ipMode: Proxy`, or put it back).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub native_actions: Vec<NativeAction>,
    /// The hosts-file entries (rendered with ClusterIPs by [`HostsPlan::resolve`]).
    pub hosts: HostsPlan,
    /// On a kube-dns cluster, the `stubDomains` alternative for the user to merge into
    /// kube-dns's ConfigMap (hairpin never writes it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stub_domains: Option<StubDomains>,
    /// Hairpin Services of an earlier plan (labelled as ours, in our namespace) that this
    /// plan no longer has: delete them.
    pub orphaned_services: Vec<ObjectRef>,
    /// Hostnames checked by resolution ([`crate::verify`]): the names the controller resolves,
    /// those left out (`Unverified`), and the exact names passed through under a wildcard.
    pub verification: Verification,
    /// Problems that stop part of the plan from being applied (nothing is written for that
    /// part), e.g. a Corefile without a `kubernetes` block. Non-empty means "exit non-zero".
    /// Serialized as their messages.
    pub errors: Vec<PlanError>,
    /// Everything else worth knowing, sorted.
    pub warnings: Vec<Warning>,
}

impl Plan {
    /// ClusterIPs of the planned hairpin Services that already exist (taken from the snapshot;
    /// both families of a dual-stack one, primary first), for [`HostsPlan::hosts_entries`].
    pub fn known_cluster_ips(&self) -> BTreeMap<ObjectRef, Vec<IpAddr>> {
        self.load_balancers
            .iter()
            .map(|lb| (lb.service_ref(), cluster_ips(&lb.service)))
            .filter(|(_, ips)| !ips.is_empty())
            .collect()
    }

    /// The node agents' hosts block, every family: `(entries, hostnames still waiting for
    /// their Service's ClusterIP)`.
    pub fn hosts_block(&self) -> (Vec<crate::hosts::HostsEntry>, Vec<&HostsEntry>) {
        self.hosts.hosts_entries(&self.known_cluster_ips())
    }

    /// Whether `hairpin plan` should exit non-zero.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }
}
