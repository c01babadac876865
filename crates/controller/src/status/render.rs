//! Rendering the runtime part of a status: the ready endpoints, the DNS word and the conditions.

use std::collections::HashMap;
use std::net::IpAddr;

use hairpin_planner::ObjectRef;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::tracking::Written;
use super::{DnsState, ExternalDnsProgress, now, on_native};
use crate::crd::{Hairpin, HairpinStatus, condition, cure_reason};
use crate::propagation::{self, CheckOutcome, join};

#[cfg(test)]
mod tests;

/// What the overlay reads besides the plan: the DNS state, a write fight over the hairpin
/// Service, the ready endpoints, its ClusterIPs, in external-dns mode how far external-dns has
/// got, and what the propagation check (a sensor) says.
#[derive(Clone, Copy)]
pub(super) struct Probe<'a> {
    pub(super) dns: &'a DnsState,
    /// Writes to the hairpin Service are backed off (a write fight).
    pub(super) service_fight: bool,
    pub(super) ready: i32,
    pub(super) cluster_ips: &'a [IpAddr],
    pub(super) external: Option<&'a ExternalDnsProgress>,
    /// The propagation check's outcome, and whether it measured the write it follows.
    pub(super) check: (Option<&'a CheckOutcome>, bool),
    /// The check knows a cluster DNS address to ask.
    pub(super) has_server: bool,
    /// Where the cluster DNS Service is looked for, named when there is none.
    pub(super) coredns_namespace: &'a str,
}

/// One condition of a `Hairpin` status before it is stamped with its transition time.
struct Part {
    type_: &'static str,
    /// `True`, `False`, or `Unknown` (None).
    value: Option<bool>,
    reason: String,
    message: String,
}

impl Part {
    fn new(type_: &'static str, value: Option<bool>, reason: &str, message: String) -> Self {
        Self {
            type_,
            value,
            reason: reason.into(),
            message,
        }
    }

    fn word(&self) -> &'static str {
        match self.value {
            Some(true) => "True",
            Some(false) => "False",
            None => "Unknown",
        }
    }
}

/// What turns a [`Part`] into a condition: the object's generation, and its previous
/// conditions, whose `lastTransitionTime` stays while a condition keeps its status.
struct Stamp {
    generation: Option<i64>,
    previous: Vec<Condition>,
}

impl Stamp {
    fn condition(&self, part: Part) -> Condition {
        let status = part.word();
        let last_transition_time = self
            .previous
            .iter()
            .find(|c| c.type_ == part.type_ && c.status == status)
            .map_or_else(now, |c| c.last_transition_time.clone());
        Condition {
            type_: part.type_.into(),
            status: status.into(),
            reason: part.reason,
            message: part.message,
            observed_generation: self.generation,
            last_transition_time,
        }
    }
}

/// `ServiceWritten`: `False` while another writer keeps changing the hairpin Service.
fn service_written(service_fight: bool, service: &str) -> Part {
    if service_fight {
        Part::new(
            condition::SERVICE_WRITTEN,
            Some(false),
            "WriteFight",
            format!(
                "another writer keeps changing the hairpin Service {service}; hairpin's writes to it are backed off, so it may not lead to the hairpin proxy"
            ),
        )
    } else {
        Part::new(
            condition::SERVICE_WRITTEN,
            Some(true),
            "Written",
            format!("the hairpin Service {service} is as planned"),
        )
    }
}

/// `DNSWritten`: where the rules are, or why they could not be written.
fn dns_written(dns: &DnsState, status: &HairpinStatus) -> Part {
    match dns {
        DnsState::InPlace { .. } => {
            let where_ = if status.dns_endpoints.is_empty() {
                status.config_maps.join(", ")
            } else {
                format!("DNSEndpoint {}", status.dns_endpoints.join(", "))
            };
            Part::new(
                condition::DNS_WRITTEN,
                Some(true),
                "Written",
                format!(
                    "rules for {} hostname(s) are in {where_}",
                    status.hostnames.len()
                ),
            )
        }
        DnsState::Refused { reason, message } => {
            Part::new(condition::DNS_WRITTEN, Some(false), reason, message.clone())
        }
        DnsState::NotReached => unreachable!("sync returns before"),
    }
}

/// `ProxyReady`: ready endpoints, and the TCP connect made once DNS was effective.
fn proxy_ready(ready: i32, outcome: Option<&CheckOutcome>, service: &str) -> Part {
    let connect = outcome.and_then(|o| o.connect.clone());
    match (ready, connect) {
        (0, _) => Part::new(
            condition::PROXY_READY,
            Some(false),
            "NoReadyEndpoints",
            format!("the hairpin Service {service} has no ready proxy pod"),
        ),
        (_, Some(Err(err))) => Part::new(condition::PROXY_READY, Some(false), "ConnectFailed", err),
        (n, Some(Ok(()))) => Part::new(
            condition::PROXY_READY,
            Some(true),
            "Connected",
            format!("{n} ready endpoint(s); a TCP connect to the hairpin Service succeeded"),
        ),
        (n, None) => Part::new(
            condition::PROXY_READY,
            Some(true),
            "EndpointsReady",
            format!("{n} ready endpoint(s)"),
        ),
    }
}

/// `NativeCure`: where the native cure stands, with the planner's reason.
fn native_cure(status: &HairpinStatus) -> Part {
    let (value, reason) = match status.native_cure.as_deref() {
        Some("proven") => (Some(true), cure_reason::PROVEN),
        Some("probing") => (None, cure_reason::PROBING),
        Some("to-prove") => (None, cure_reason::TO_PROVE),
        Some("failed") => (Some(false), cure_reason::FAILED),
        Some("not-needed") => (Some(false), cure_reason::NOT_NEEDED),
        Some("unsupported") => (Some(false), cure_reason::UNSUPPORTED),
        Some(super::NOT_ON_EVERY_NODE) => (Some(false), cure_reason::NOT_ON_EVERY_NODE),
        _ => (Some(false), cure_reason::NOT_ELIGIBLE),
    };
    Part::new(
        condition::NATIVE_CURE,
        value,
        reason,
        status.cure_reason.clone(),
    )
}

/// `ReceiverMismatch`, while the load balancer and its receiver disagree.
fn receiver_mismatch(status: &HairpinStatus) -> Option<Part> {
    let mismatch = status.receiver.as_ref()?.mismatch.as_ref()?;
    Some(Part::new(
        condition::RECEIVER_MISMATCH,
        Some(true),
        "Mismatch",
        mismatch.clone(),
    ))
}

/// `DNSWritten` and `DNSEffective` of a load balancer on the native cure: it has no DNS rule.
fn dns_not_used(type_: &'static str) -> Part {
    Part::new(
        type_,
        Some(false),
        "NativeCure",
        "no DNS rule: this load balancer is on the native cure (ipMode: Proxy on its status)"
            .into(),
    )
}

/// `Ready` on the native cure: what the `NativeCure` condition says (the hairpin Service and
/// the DNS are not on the path of in-cluster clients then).
fn native_ready(native: &Part) -> Part {
    if native.value == Some(true) {
        return Part::new(
            condition::READY,
            Some(true),
            "Ready",
            "in-cluster clients of this load balancer's address cross the real load balancer (ipMode: Proxy, proven by probe)".into(),
        );
    }
    Part::new(
        condition::READY,
        native.value,
        &native.reason,
        format!("{}: {}", native.type_, native.message),
    )
}

/// `Ready` takes the first `False` part, else the first `Unknown` one, with its reason.
fn all_ready(parts: &[Part]) -> Part {
    let blocking = [Some(false), None]
        .into_iter()
        .find_map(|value| parts.iter().find(|p| p.value == value));
    match blocking {
        Some(part) => Part::new(
            condition::READY,
            part.value,
            &part.reason,
            format!("{}: {}", part.type_, part.message),
        ),
        None => Part::new(
            condition::READY,
            Some(true),
            "Ready",
            "in-cluster clients of these hostnames reach the load balancer through the hairpin proxy".into(),
        ),
    }
}

/// Adds the runtime part: ready endpoints, DNS word, write time, conditions.
pub(super) fn overlay(
    written: &mut HashMap<ObjectRef, Written>,
    lb: &ObjectRef,
    status: &mut HairpinStatus,
    existing: Option<&Hairpin>,
    probe: &Probe<'_>,
) {
    let stamp = Stamp {
        generation: existing.and_then(|h| h.metadata.generation),
        previous: existing
            .and_then(|h| h.status.as_ref())
            .map(|s| s.conditions.clone())
            .unwrap_or_default(),
    };
    let (outcome, measured) = probe.check;
    let written = written.entry(lb.clone()).or_default();
    if let Some(outcome) = outcome.filter(|o| o.effective && measured) {
        written.propagation = Some((outcome.elapsed.as_secs_f64() * 1000.0).round() / 1000.0);
    }
    status.observed_generation = stamp.generation;
    status.ready_endpoints = probe.ready;
    status.last_write_time = written.time.clone();
    status.propagation_seconds = written.propagation;

    let native = native_cure(status);
    let (parts, ready) = if on_native(status) {
        let parts = [
            service_written(probe.service_fight, &status.service),
            dns_not_used(condition::DNS_WRITTEN),
            dns_not_used(condition::DNS_EFFECTIVE),
            proxy_ready(probe.ready, None, &status.service),
        ];
        status.dns = condition::DNS_NOT_USED.into();
        (parts, native_ready(&native))
    } else {
        let parts = [
            service_written(probe.service_fight, &status.service),
            dns_written(probe.dns, status),
            dns_effective(status, probe, outcome),
            proxy_ready(probe.ready, outcome, &status.service),
        ];
        let ready = all_ready(&parts);
        status.dns = match (probe.dns, outcome) {
            (DnsState::InPlace { .. }, Some(o)) if o.effective => "Effective",
            (DnsState::InPlace { .. }, Some(_)) => "NotEffective",
            (DnsState::InPlace { .. }, None) => "Written",
            _ => "Refused",
        }
        .into();
        (parts, ready)
    };
    let mismatch = receiver_mismatch(status);
    status.conditions = parts
        .into_iter()
        .chain([native, ready])
        .chain(mismatch)
        .map(|part| stamp.condition(part))
        .collect();
}

/// `DNSEffective`: whether the cluster DNS answers the hostnames with the hairpin Service,
/// or why that cannot be known yet.
fn dns_effective(
    status: &HairpinStatus,
    probe: &Probe<'_>,
    outcome: Option<&CheckOutcome>,
) -> Part {
    let unknown =
        |reason: &str, message: String| Part::new(condition::DNS_EFFECTIVE, None, reason, message);
    let (cluster_ips, external) = (probe.cluster_ips, probe.external);
    if !matches!(probe.dns, DnsState::InPlace { .. }) {
        return unknown("NotWritten", "the DNS rules are not written".into());
    }
    if status.hostnames.is_empty() {
        return unknown(
            "NoHostnames",
            "no hostname points at this load balancer".into(),
        );
    }
    if cluster_ips.is_empty() {
        return unknown(
            "NoClusterIP",
            "the hairpin Service has no ClusterIP yet".into(),
        );
    }
    if !probe.has_server {
        return unknown(
            "NoClusterDNS",
            format!(
                "no cluster DNS address: no cluster DNS Service with a ClusterIP in {} (kube-dns, one named like a CoreDNS ConfigMap candidate, or one labelled k8s-app=kube-dns or coredns); set --cluster-dns",
                probe.coredns_namespace
            ),
        );
    }
    match outcome {
        None if external.is_some_and(|e| !e.waiting.is_empty()) => unknown(
            "WaitingForExternalDNS",
            external
                .map(ExternalDnsProgress::waiting_note)
                .unwrap_or_default(),
        ),
        None => unknown(
            "Checking",
            format!(
                "asking the cluster DNS until the hostnames answer with {}",
                join(cluster_ips)
            ),
        ),
        Some(o) if o.effective => Part::new(
            condition::DNS_EFFECTIVE,
            Some(true),
            "Answered",
            format!(
                "the cluster DNS answers the hostnames with the hairpin Service ({})",
                join(cluster_ips)
            ),
        ),
        Some(o) => Part::new(
            condition::DNS_EFFECTIVE,
            Some(false),
            "NotEffective",
            match external {
                Some(e) => format!(
                    "{}; {}",
                    propagation::wrong_answers(o, cluster_ips),
                    e.cause()
                ),
                None => propagation::wrong_answers(o, cluster_ips),
            },
        ),
    }
}
