//! The DNS write history of each load balancer and the propagation check it asks the loop to
//! start.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Instant;

use hairpin_planner::{ClusterSnapshot, ObjectRef, Plan};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{DnsState, ExternalDnsProgress, StatusMemory, StatusWriter, now};
use crate::crd::{Hairpin, HairpinStatus, HostnameStatus};
use crate::propagation::{self, CheckAction};

/// One load balancer's DNS history, as far as this controller knows it.
#[derive(Clone, Debug, Default)]
pub(super) struct Written {
    /// The hostnames last known to be in the DNS rules, joined.
    pub(super) hosts: String,
    /// When they were last written.
    pub(super) time: Option<Time>,
    /// The same moment, to measure propagation; taken by the check it starts.
    pub(super) instant: Option<Instant>,
    /// The last measured propagation of that write.
    pub(super) propagation: Option<f64>,
}

fn hosts_key(hostnames: &[HostnameStatus]) -> String {
    hostnames
        .iter()
        .map(|h| h.name.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// Records, in the loop's memory, a DNS write that changed this load balancer's hostnames.
pub(super) fn track_write(
    written: &mut HashMap<ObjectRef, Written>,
    lb: &ObjectRef,
    status: &HairpinStatus,
    existing: Option<&Hairpin>,
    dns: &DnsState,
) {
    let hosts = hosts_key(&status.hostnames);
    let entry = written.entry(lb.clone()).or_insert_with(|| {
        // What an earlier run (or the other replica) recorded.
        let old = existing.and_then(|h| h.status.as_ref());
        Written {
            hosts: old.map(|s| hosts_key(&s.hostnames)).unwrap_or_default(),
            time: old.and_then(|s| s.last_write_time.clone()),
            instant: None,
            propagation: old.and_then(|s| s.propagation_seconds),
        }
    });
    if entry.hosts != hosts {
        entry.hosts = hosts;
        if *dns == (DnsState::InPlace { wrote: true }) {
            entry.time = Some(now());
            entry.instant = Some(Instant::now());
            entry.propagation = None;
        }
    }
}

// === impl StatusWriter ===

impl StatusWriter {
    /// The propagation check to start (or restart) when the hostnames or the ClusterIP
    /// changed, as far as the memory knows the checks; the write's moment is taken from the
    /// history by the check it starts.
    pub(super) fn check(
        &self,
        memory: &mut StatusMemory,
        (plan, snapshot): (&Plan, &ClusterSnapshot),
        (lb, status): (&ObjectRef, &HairpinStatus),
        cluster_ips: &[IpAddr],
        port: Option<u16>,
        external: Option<&ExternalDnsProgress>,
    ) -> Option<CheckAction> {
        if cluster_ips.is_empty() || status.hostnames.is_empty() {
            return None;
        }
        let planner = &self.ctx.planner;
        let servers = propagation::dns_servers(self.cluster_dns, planner, plan, snapshot)?;
        let ips: Vec<String> = cluster_ips.iter().map(ToString::to_string).collect();
        // In external-dns mode, external-dns processing the DNSEndpoints starts a new check:
        // one that gave up before it did says nothing about the records it published.
        let processed = external.map_or("", |e| {
            if e.waiting.is_empty() {
                "#processed"
            } else {
                "#waiting"
            }
        });
        let fingerprint = format!(
            "{}@{}{processed}",
            hosts_key(&status.hostnames),
            ips.join(",")
        );
        if propagation::is_running(&memory.checks, lb, &fingerprint) {
            return None;
        }
        let written = memory.written.get_mut(lb).and_then(|w| w.instant.take());
        Some(CheckAction::Start(Box::new(propagation::Start {
            lb: lb.clone(),
            lb_uid: snapshot
                .service(&lb.namespace, &lb.name)
                .and_then(|s| s.metadata.uid.clone()),
            servers,
            hostnames: status.hostnames.iter().map(|h| h.name.clone()).collect(),
            fingerprint,
            cluster_ips: cluster_ips.to_vec(),
            port,
            external_cause: external.map(ExternalDnsProgress::cause),
            written,
            reload_missing: propagation::reload_missing(plan),
            coredns_pods: propagation::coredns_pods(snapshot, planner),
        })))
    }
}
