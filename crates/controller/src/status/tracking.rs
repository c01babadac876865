//! The DNS write history of each load balancer.

use std::collections::HashMap;
use std::time::Instant;

use hairpin_planner::ObjectRef;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{DnsState, now};
use crate::crd::{Hairpin, HairpinStatus, HostnameStatus};

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

/// The hostnames, joined: what the history and the checks' fingerprints compare.
pub(crate) fn hosts_key(hostnames: &[HostnameStatus]) -> String {
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
