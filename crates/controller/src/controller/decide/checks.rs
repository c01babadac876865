//! What the propagation checks found, reported: for each check whose outcome came in and was
//! not reported yet, the propagation measured (when it counts from this controller's write)
//! and an Event on the load balancer Service, `HairpinEffective` or `DNSNotEffective` with the
//! likely cause, chosen from what the check saw (the answers, the CoreDNS pods).

use hairpin_planner::ObjectRef;

use super::{Effect, Histogram};
use crate::propagation::{CheckMemory, CheckOutcome, CheckSeen, join, wrong_answers};
use crate::report::{list_note, object_ref, reason};

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
    let cluster_ok = !outcome.wrong.keys().any(|(role, _)| role == "cluster DNS");
    if cluster_ok {
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
