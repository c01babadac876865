//! Step 3: the plan, a pure value: what hairpin would write for a snapshot.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::ConfigMap;
use serde::Serialize;

use crate::admission::Refusal;
pub use crate::balancers::{
    HostsEntry, HostsPlan, LoadBalancerPlan, ProxyHeader, ProxyRoute, cluster_ips,
};
use crate::config::DnsMode;
use crate::corefile::{BlockInsert, CorefileError, DnsEntry, HostPattern, normalize_target};
use crate::discovery::NotNeeded;
use crate::external_dns::DnsEndpoints;
use crate::hostnames::Conflict;
use crate::kube_dns::StubDomains;
use crate::name::WildcardLabels;
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
    pub errors: Vec<String>,
    /// Everything else worth knowing, sorted.
    pub warnings: Vec<Warning>,
}

/// The DNS change: every ConfigMap key hairpin writes so that the cluster's DNS answers the
/// redirected hostnames, wherever the queries for them land; in `external-dns` mode, the
/// `DNSEndpoint` objects instead.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DnsChange {
    /// The mode actually used (`Corefile`, `Custom` or `ExternalDns`, never `Auto`).
    pub mode: DnsMode,
    /// The cluster domain: the Corefile's `kubernetes` zone, `--cluster-domain`, or the default.
    pub cluster_domain: String,
    /// Hostname -> the hairpin Service FQDN it is redirected to, sorted by hostname.
    pub entries: Vec<DnsRedirect>,
    /// The keys written: CoreDNS's first (the Corefile, or the `coredns-custom` key), then the
    /// node-local-dns Corefiles. Empty in `external-dns` mode.
    pub writes: Vec<DnsWrite>,
    /// The `DNSEndpoint` objects, in `external-dns` mode only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_endpoints: Option<DnsEndpoints>,
}

impl DnsChange {
    /// The CoreDNS write (the first one); `None` in `external-dns` mode, which writes none.
    pub fn coredns(&self) -> Option<&DnsWrite> {
        self.writes.first()
    }

    /// Whether any key (or `DNSEndpoint`) changes.
    pub fn changed(&self) -> bool {
        self.writes.iter().any(|w| w.changed)
            || self
                .dns_endpoints
                .as_ref()
                .is_some_and(DnsEndpoints::changed)
    }
}

/// How a key's new value is made from its current one (recomputed by the controller on a
/// fresh read, so a concurrent edit outside hairpin's blocks is kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteEdit {
    /// The whole key is hairpin's (`coredns-custom`): set it, or remove it when `None`.
    Key {
        /// The value.
        value: Option<String>,
    },
    /// Marked blocks in a Corefile: exactly these, in these server blocks
    /// ([`crate::corefile::write_blocks`]).
    Blocks {
        /// One block per server block.
        inserts: Vec<BlockInsert>,
    },
}

/// One ConfigMap key hairpin writes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DnsWrite {
    /// The ConfigMap written.
    pub config_map: ObjectRef,
    /// The key written inside it.
    pub key: String,
    /// What hairpin writes there.
    pub edit: WriteEdit,
    /// The key's current content (`None`: the key does not exist).
    pub current: Option<String>,
    /// The key's new content.
    pub desired: String,
    /// `current != desired`.
    pub changed: bool,
    /// The full ConfigMap to write (current object with the key replaced; `resourceVersion`
    /// kept so the write is guarded), present only when `changed`.
    pub object: Option<ConfigMap>,
}

impl DnsWrite {
    /// `namespace/name/key`, the write's identity for fight detection.
    pub fn target(&self) -> String {
        format!("{}/{}", self.config_map, self.key)
    }
}

/// One DNS redirect: `hostname` (or `*.domain`) answers with the address of `target`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct DnsRedirect {
    /// Normalized hostname, possibly a wildcard `*.example.com`.
    pub hostname: String,
    /// The hairpin Service's FQDN, `<name>.<namespace>.svc.<cluster-domain>`.
    pub target: String,
    /// For a wildcard, how many labels its `*` covers ([`Hostname::wildcard_labels`]);
    /// `None` for an exact name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wildcard_labels: Option<WildcardLabels>,
}

impl DnsRedirect {
    /// The Corefile editor's entry for this redirect, wildcard kind included. Use this rather
    /// than `DnsEntry::new(&hostname, &target)`, which reads every wildcard as one label.
    pub fn entry(&self) -> Result<DnsEntry, CorefileError> {
        DnsEntry::new_with(
            &self.hostname,
            &self.target,
            self.wildcard_labels.unwrap_or_default(),
        )
    }

    /// [`DnsRedirect::entry`] of each redirect, with each distinct target checked once (a
    /// plan has a few targets for up to tens of thousands of hostnames).
    pub fn entries(
        redirects: &[DnsRedirect],
    ) -> impl Iterator<Item = (&DnsRedirect, Result<DnsEntry, CorefileError>)> {
        let mut targets: Vec<(&str, Result<String, CorefileError>)> = Vec::new();
        redirects.iter().map(move |r| {
            let labels = r.wildcard_labels.unwrap_or_default();
            let entry = HostPattern::parse_with(&r.hostname, labels).and_then(|name| {
                let known = targets.iter().position(|(t, _)| *t == r.target);
                let at = known.unwrap_or_else(|| {
                    targets.push((&r.target, normalize_target(&r.target)));
                    targets.len() - 1
                });
                let target = targets[at].1.clone()?;
                Ok(DnsEntry { name, target })
            });
            (r, entry)
        })
    }
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

    /// Every ClusterIP (both families) of the planned hairpin Services that already exist,
    /// for [`HostsPlan::hosts_entries_all_families`].
    pub fn cluster_ips_all_families(&self) -> BTreeMap<ObjectRef, Vec<IpAddr>> {
        self.load_balancers
            .iter()
            .map(|lb| (lb.service_ref(), cluster_ips(&lb.service)))
            .filter(|(_, ips)| !ips.is_empty())
            .collect()
    }

    /// The node agents' hosts block, every family: `(entries, hostnames still waiting for
    /// their Service's ClusterIP)`.
    pub fn hosts_block(&self) -> (Vec<crate::hosts::HostsEntry>, Vec<&HostsEntry>) {
        self.hosts
            .hosts_entries_all_families(&self.cluster_ips_all_families())
    }

    /// Whether `hairpin plan` should exit non-zero.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }
}
