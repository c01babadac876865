//! The whole intent of a plan, decided before anything is written: the hairpin Services, the
//! keys of hairpin's own ConfigMaps, the DNS change (its keys, the clean-ups a mode switch
//! leaves, or the `DNSEndpoint`s), the gauges and the Events. [`act`](super::super::act)
//! executes it in this order; the write-fight guard and what each write finds decide the rest
//! ([`own_key_written`](super::own_key_written), [`dns_written`](super::dns_written), ...).

use hairpin_planner::external_dns::DnsEndpoints;
use hairpin_planner::{ClusterSnapshot, DnsChange, DnsWrite, Plan, PlannerConfig};
use k8s_openapi::api::core::v1::Service;

use super::{
    Effect, Gauge, OwnKey, Reported, Reports, Verdict, dns_not_planned, own_keys, plan_gauges,
    reports,
};
use crate::edits::{KeyEdit, dns_edit, hosts_edit, mode_switch_edits, routes_edit};
use crate::status::DnsState;

/// What a plan leads to, in the order it is executed.
#[derive(Debug)]
pub(crate) struct Intent<'p> {
    /// The plan's gauges, set first.
    pub gauges: Vec<Effect>,
    /// The hairpin Services (hairpin's others in its namespace are deleted).
    pub services: Vec<Service>,
    /// hairpin's own ConfigMap keys (the routes, the hosts), each with its edit when the cached
    /// copy differs from the plan (`None`: as planned, its write fight may be over). `act`
    /// takes each edit as it writes it: afterwards what the write found is in `Observed`.
    pub own_keys: Vec<(OwnKey, Option<KeyEdit>)>,
    /// The DNS change (after the native cure: make before break).
    pub dns: DnsIntent<'p>,
    /// The Events of the plan, published after the writes, and what to remember of them.
    pub reports: Reports,
}

/// The DNS part of an [`Intent`].
#[derive(Debug)]
pub(crate) enum DnsIntent<'p> {
    /// No DNS change planned: the plan's errors said, and the DNS state that says why.
    NotPlanned {
        /// Its effects.
        verdict: Verdict,
        /// For the Hairpin statuses.
        state: DnsState,
    },
    /// A DNS change: `effects`, then the `clean_ups` of an earlier mode, then the `target`.
    Planned {
        /// The change planned.
        change: &'p DnsChange,
        /// Set before anything of it is written.
        effects: Vec<Effect>,
        /// The keys another mode left, removed first (written as they are, no fight guard).
        clean_ups: Vec<KeyEdit>,
        /// What this mode writes.
        target: DnsTarget<'p>,
    },
}

/// Where the DNS change goes.
#[derive(Debug)]
pub(crate) enum DnsTarget<'p> {
    /// DNS ConfigMap keys, one by one, each guarded against a write fight.
    Keys(Vec<DnsKey<'p>>),
    /// `--dns-mode external-dns`: hairpin's `DNSEndpoint`s.
    Endpoints(&'p DnsEndpoints),
}

/// One DNS key of the change.
#[derive(Debug)]
pub(crate) struct DnsKey<'p> {
    /// The planned write.
    pub write: &'p DnsWrite,
    /// Its edit when the key differs from the plan (`None`: as planned).
    pub edit: Option<KeyEdit>,
    /// The CoreDNS write, whose outcome is the DNS state the Hairpin statuses report.
    pub primary: bool,
}

impl Intent<'_> {
    /// Every ConfigMap key edit, in the order written: hairpin's own keys, the clean-ups of an
    /// earlier DNS mode, the DNS keys.
    #[cfg(test)]
    pub(crate) fn keys(&self) -> Vec<&KeyEdit> {
        let own = self.own_keys.iter().filter_map(|(_, edit)| edit.as_ref());
        let mut keys: Vec<&KeyEdit> = own.collect();
        if let DnsIntent::Planned {
            clean_ups, target, ..
        } = &self.dns
        {
            keys.extend(clean_ups);
            if let DnsTarget::Keys(dns) = target {
                keys.extend(dns.iter().filter_map(|k| k.edit.as_ref()));
            }
        }
        keys
    }
}

/// The intent of `plan`, from what the cluster holds (`snapshot`, as cached) and what the loop
/// `reported` before.
pub(crate) fn intent<'p>(
    plan: &'p Plan,
    snapshot: &ClusterSnapshot,
    planner: &PlannerConfig,
    reported: &Reported,
) -> Intent<'p> {
    let services = plan
        .load_balancers
        .iter()
        .map(|lb| lb.service.clone())
        .collect();
    let [routes, hosts] = own_keys(planner);
    let own_keys = vec![
        (routes, routes_edit(plan, snapshot, planner)),
        (hosts, hosts_edit(plan, snapshot, planner)),
    ];
    Intent {
        gauges: plan_gauges(plan),
        services,
        own_keys,
        dns: dns_intent(plan, snapshot, planner),
        reports: reports(plan, snapshot, reported),
    }
}

/// The DNS part of the intent of `plan`.
fn dns_intent<'p>(
    plan: &'p Plan,
    snapshot: &ClusterSnapshot,
    planner: &PlannerConfig,
) -> DnsIntent<'p> {
    let Some(change) = &plan.dns else {
        let (verdict, state) = dns_not_planned(plan);
        return DnsIntent::NotPlanned { verdict, state };
    };
    let target = match &change.dns_endpoints {
        Some(endpoints) => DnsTarget::Endpoints(endpoints),
        None => DnsTarget::Keys(
            change
                .writes
                .iter()
                .enumerate()
                .map(|(i, write)| DnsKey {
                    write,
                    // Recomputed from a fresh read on every attempt (`write_key`).
                    edit: write.changed.then(|| dns_edit(write)),
                    primary: i == 0,
                })
                .collect(),
        ),
    };
    DnsIntent::Planned {
        change,
        effects: vec![Effect::Set(Gauge::DnsPlanErrors, 0)],
        clean_ups: mode_switch_edits(change, snapshot, planner),
        target,
    }
}

#[cfg(test)]
mod tests;
