//! The actions of a reconcile, decided before anything is written: the [`Intent`] of the plan
//! and, from what the loop remembers, the write-fight guard of every key and object it writes
//! and the clean-up an earlier DNS mode left.

use std::time::Instant;

use hairpin_planner::{ClusterSnapshot, ObjectRef, Plan, PlannerConfig};

use super::{DnsIntent, DnsTarget, Intent, Reported, check_reports, intent};
use crate::apply::BackedOff;
use crate::dns_endpoints::DnsEndpointMemory;
use crate::fight::{Decision, Fights};
use crate::propagation::CheckMemory;

/// What `decide` reads of the loop's memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Recall<'m> {
    /// The write fights.
    pub fights: &'m Fights,
    /// What was reported.
    pub reported: &'m Reported,
    /// The `DNSEndpoint`s' CRD and clean-up.
    pub endpoints: &'m DnsEndpointMemory,
    /// The propagation checks, and what they found.
    pub checks: &'m CheckMemory,
}

/// Everything one reconcile does, in the order [`act`](super::super::act) executes it.
#[derive(Debug)]
pub(crate) struct Actions<'p> {
    /// hairpin's namespace, where its objects are.
    pub namespace: String,
    /// Look for hairpin's `DNSEndpoint`s an earlier external-dns mode left, and delete them
    /// (once per run).
    pub clean_endpoints: bool,
    /// The writes, gauges and Events of the plan.
    pub intent: Intent<'p>,
    /// The write-fight guard of each write.
    pub guards: Guards,
    /// The propagation checks (load balancer, start) whose outcome the intent's reports
    /// report.
    pub checks_reported: Vec<(ObjectRef, u64)>,
}

/// The write-fight guard of each write of a reconcile, decided from the loop's memory.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Guards {
    /// The hairpin Services backed off from, by name.
    pub services: BackedOff,
    /// Each of hairpin's own keys, in the intent's order.
    pub own_keys: Vec<Decision>,
    /// Each DNS key, in the intent's order.
    pub dns_keys: Vec<Decision>,
    /// The `DNSEndpoint`s backed off from, by name.
    pub endpoints: BackedOff,
    /// external-dns's CRD is known not to be served: no `DNSEndpoint` is written.
    pub endpoints_crd_missing: bool,
}

/// The actions of `plan`, from what the cluster holds (`snapshot`, as cached) and what the
/// loop remembers, at `now`.
pub(crate) fn actions<'p>(
    plan: &'p Plan,
    snapshot: &ClusterSnapshot,
    planner: &PlannerConfig,
    recall: Recall<'_>,
    now: Instant,
) -> Actions<'p> {
    let mut intent = intent(plan, snapshot, planner, recall.reported);
    let (checked, checks_reported) = check_reports(recall.checks, &planner.coredns_namespace);
    intent.reports.effects.extend(checked);
    let fights = recall.fights;
    let namespace = &planner.namespace;
    let backed_off = |kind: &str, names: &mut dyn Iterator<Item = &str>| -> BackedOff {
        names
            .filter_map(|name| {
                let target = format!("{kind} {namespace}/{name}");
                match fights.decision(&target, now) {
                    Decision::BackedOff(until) => Some((name.to_owned(), until)),
                    Decision::Write => None,
                }
            })
            .collect()
    };
    let services = backed_off(
        "Service",
        &mut intent
            .services
            .iter()
            .filter_map(|s| s.metadata.name.as_deref()),
    );
    let own_keys = intent
        .own_keys
        .iter()
        .map(|(own, _)| fights.decision(&own.target(), now))
        .collect();
    let (dns_keys, endpoints) = match &intent.dns {
        DnsIntent::Planned {
            target: DnsTarget::Keys(keys),
            ..
        } => (
            keys.iter()
                .map(|k| fights.decision(&k.write.target(), now))
                .collect(),
            BackedOff::new(),
        ),
        DnsIntent::Planned {
            target: DnsTarget::Endpoints(endpoints),
            ..
        } => (
            Vec::new(),
            backed_off(
                hairpin_planner::external_dns::KIND,
                &mut endpoints
                    .objects
                    .iter()
                    .filter_map(|o| o.object.metadata.name.as_deref()),
            ),
        ),
        DnsIntent::NotPlanned { .. } => (Vec::new(), BackedOff::new()),
    };
    Actions {
        namespace: namespace.clone(),
        clean_endpoints: planner.dns_mode != hairpin_planner::DnsMode::ExternalDns
            && !recall.endpoints.cleaned,
        guards: Guards {
            services,
            own_keys,
            dns_keys,
            endpoints,
            endpoints_crd_missing: recall.endpoints.crd == Some(false),
        },
        intent,
        checks_reported,
    }
}
