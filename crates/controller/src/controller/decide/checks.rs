//! The propagation checks, decided: which to start (numbered) or stop after the statuses'
//! objects are prepared ([`checks`]), and what those that ended found, reported
//! ([`check_reports`]): for each check whose outcome came in and was not reported yet, the
//! propagation measured (when it counts from this controller's write) and an Event on the
//! load balancer Service, `HairpinEffective` or `DNSNotEffective` with the likely cause,
//! chosen from what the check saw (the answers, the CoreDNS pods).

use hairpin_planner::{ClusterSnapshot, ObjectRef, Plan, PlannerConfig};

use super::{Effect, Histogram};
use crate::propagation::{
    self, CheckAction, CheckMemory, CheckOutcome, CheckSeen, PropagationParams, Start, join,
    wrong_answers,
};
use crate::report::{list_note, object_ref, reason};
use crate::status::{DnsState, Item, Prepared, StatusMemory, hosts_key, on_native};

/// What [`checks`] reads besides the statuses' objects and memory: the plan, the snapshot it
/// was made from, and the settings.
#[derive(Clone, Copy)]
pub(crate) struct CheckScene<'a> {
    pub plan: &'a Plan,
    pub snapshot: &'a ClusterSnapshot,
    pub planner: &'a PlannerConfig,
    pub params: &'a PropagationParams,
}

/// The propagation checks to start or stop, for the statuses' objects `prepared`, where the
/// DNS change stands (`dns`) and what the loop remembers of the statuses: a load balancer on
/// the native cure has none (a check started before the switch says nothing now); one whose
/// rules are in place gets one when its hostnames or ClusterIPs changed since its check
/// started. Each start is numbered from the memory's next.
pub(crate) fn checks(
    scene: CheckScene<'_>,
    prepared: &Prepared,
    dns: &DnsState,
    memory: &StatusMemory,
) -> Vec<CheckAction> {
    let mut actions = Vec::new();
    let mut next = memory.next_check;
    for item in &prepared.items {
        if on_native(&item.status) {
            actions.push(CheckAction::Stop(item.lb_ref.clone()));
        } else if matches!(dns, DnsState::InPlace { .. })
            && let Some(start) = start(scene, item, memory, next)
        {
            next += 1;
            actions.push(CheckAction::Start(Box::new(start)));
        }
    }
    actions
}

/// The check to start (or restart) for `item` when its hostnames or ClusterIPs changed, as
/// far as the memory knows the checks; it measures from the write the history remembers.
fn start(scene: CheckScene<'_>, item: &Item, memory: &StatusMemory, id: u64) -> Option<Start> {
    let (lb, status) = (&item.lb_ref, &item.status);
    if item.cluster_ips.is_empty() || status.hostnames.is_empty() {
        return None;
    }
    let CheckScene {
        plan,
        snapshot,
        planner,
        params,
    } = scene;
    let servers = propagation::dns_servers(params.cluster_dns, planner, plan, snapshot)?;
    let ips: Vec<String> = item.cluster_ips.iter().map(ToString::to_string).collect();
    // In external-dns mode, external-dns processing the DNSEndpoints starts a new check: one
    // that gave up before it did says nothing about the records it published.
    let processed = item.external.as_ref().map_or("", |e| {
        if e.processed() {
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
    let hostnames: Vec<String> = status.hostnames.iter().map(|h| h.name.clone()).collect();
    let external_cause = item.external.as_ref().map(|e| e.cause());
    let reload_missing = propagation::reload_missing(plan);
    let coredns_pods = propagation::coredns_pods(snapshot, planner);
    // The CoreDNS pods are a clue only when no likelier cause is known at the start.
    let read_pods = external_cause.is_none() && !reload_missing;
    Some(Start {
        lb: lb.clone(),
        id,
        lb_uid: snapshot
            .service(&lb.namespace, &lb.name)
            .and_then(|s| s.metadata.uid.clone()),
        servers,
        names: propagation::probe_names(&hostnames, params.max_names),
        fingerprint,
        cluster_ips: item.cluster_ips.clone(),
        port: item.port,
        external_cause,
        written: memory.write_instant(lb),
        reload_missing,
        coredns_pods,
        read_pods,
    })
}

/// The effects of the checks' outcomes not reported yet (by load balancer, in order), and
/// which checks (load balancer, start) they report.
pub(crate) fn check_reports(
    checks: &CheckMemory,
    coredns_namespace: &str,
) -> (Vec<Effect>, Vec<(ObjectRef, u64)>) {
    let mut fresh: Vec<(&ObjectRef, &CheckSeen, &CheckOutcome)> = checks
        .iter()
        .filter(|(_, seen)| !seen.reported)
        .filter_map(|(lb, seen)| Some((lb, seen, seen.outcome.as_ref()?)))
        .collect();
    fresh.sort_by(|a, b| a.0.cmp(b.0));
    let mut effects = Vec::new();
    let mut reported = Vec::new();
    for (lb, seen, outcome) in fresh {
        effects.extend(check_report(lb, seen, outcome, coredns_namespace));
        reported.push((lb.clone(), seen.id));
    }
    (effects, reported)
}

/// The report of one check's `outcome`.
fn check_report(
    lb: &ObjectRef,
    seen: &CheckSeen,
    outcome: &CheckOutcome,
    coredns_namespace: &str,
) -> Vec<Effect> {
    let regarding = object_ref("Service", &lb.namespace, &lb.name, seen.lb_uid.clone());
    if !outcome.effective {
        let cause = likely_cause(seen, outcome, coredns_namespace);
        let note = format!(
            "{}. Likely cause: {cause}",
            wrong_answers(outcome, &seen.expected)
        );
        tracing::warn!(lb = %lb, "{note}");
        return vec![Effect::Publish {
            regarding,
            warning: true,
            reason: reason::DNS_NOT_EFFECTIVE,
            note,
        }];
    }
    let mut effects = Vec::new();
    let seconds = outcome.elapsed.as_secs_f64();
    let took = if seen.measured {
        effects.push(Effect::Observe(Histogram::DnsPropagation, seconds));
        format!(" {seconds:.1}s after the write")
    } else {
        String::new()
    };
    let connect = match &outcome.connect {
        Some(Ok(())) => "; a TCP connect to the hairpin Service succeeded".to_owned(),
        Some(Err(err)) => format!("; but the hairpin Service does not accept connections: {err}"),
        None => String::new(),
    };
    let note = list_note(
        "the cluster DNS answers ",
        &seen.names,
        ", ",
        &format!(
            " with the hairpin Service ({}){took}{connect}",
            join(&seen.expected)
        ),
    );
    tracing::info!(lb = %lb, elapsed = ?outcome.elapsed, "DNS change effective");
    effects.push(Effect::Publish {
        regarding,
        warning: false,
        reason: reason::HAIRPIN_EFFECTIVE,
        note,
    });
    effects
}

/// Why the names are not effective yet, likeliest first: what external-dns has not done,
/// node-local-dns answering them itself, no `reload`, CoreDNS pods not ready (a Corefile it
/// refused), else the kubelet's slow sync.
fn likely_cause(seen: &CheckSeen, outcome: &CheckOutcome, coredns_namespace: &str) -> String {
    if let Some(cause) = &seen.external_cause {
        return cause.clone();
    }
    if !outcome.cluster_dns_wrong() {
        return "node-local-dns answers these names itself (it forwards only the cluster domain to CoreDNS): add the stanza `hairpin plan` suggests to its Corefile, or run the node agent".into();
    }
    if seen.reload_missing {
        return "the Corefile has no `reload` plugin, so CoreDNS reads it only when it restarts: add `reload` or restart CoreDNS".into();
    }
    let selector = &seen.coredns_pods;
    // Unready CoreDNS pods after a change point at a Corefile CoreDNS refused.
    if let Some(pods) = seen.pods.filter(|p| p.unready > 0) {
        return format!(
            "{} of {} CoreDNS pods are not ready: CoreDNS probably rejected the new Corefile and kept the old one; see `kubectl -n {coredns_namespace} logs -l {selector}`",
            pods.unready, pods.total
        );
    }
    format!(
        "the kubelet has not synced the ConfigMap into CoreDNS's pods yet (it can take a minute or more), or CoreDNS rejected the new Corefile and kept the old one; see `kubectl -n {coredns_namespace} logs -l {selector}`"
    )
}

#[cfg(test)]
mod tests;
