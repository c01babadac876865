//! What the loop keeps between reconciles, in one value: [`Memory`], and [`remember`], the
//! pure fold of what a reconcile's writes found into it. Every writer borrows what it needs
//! for one reconcile and keeps nothing of its own: the native cure's driver
//! ([`crate::native::NativeRun`]) borrows [`Memory::native`] and the write fights (those over
//! `ipMode` among them) for its step.

use std::collections::BTreeSet;
use std::time::Instant;

use hairpin_planner::DnsWrite;

use super::decide::{self, Actions, DnsIntent, DnsTarget, Recall, Reported};
use super::observed::{DnsObserved, EndpointsObserved, KeyObserved, Learnt, Observed};
use crate::apply::{ObjectChanges, Reverted};
use crate::dns_endpoints::{DnsEndpointMemory, crd_missing_message};
use crate::fight::{FightParams, Fights, Observation};
use crate::native::{NativeMemory, with_ip_mode_fights};
use crate::propagation::{CheckAction, CheckSeen};
use crate::report::list_note;
use crate::status::{DnsState, StatusMemory};

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Memory {
    /// Write-fight state per DNS key and per key of hairpin's own ConfigMaps
    /// (`namespace/name/key`), per object of hairpin's (`Kind namespace/name`: the hairpin
    /// Services, the `DNSEndpoint`s), and per load balancer's `ipMode`
    /// (`ipMode Service namespace/name`, with the native cure's shorter window).
    pub fights: Fights,
    /// The refused and unverified hostnames reported, to report each change once.
    pub reported: Reported,
    /// Where the last reconcile left the DNS change, for the Hairpin statuses: as far as the
    /// writes got, so a reconcile that fails part way reports where it stopped.
    pub dns_state: DnsState,
    /// The hairpin Services left as another writer made them (a write fight), as of the last
    /// reconcile that applied them.
    pub services_backed_off: BTreeSet<String>,
    /// The Hairpin statuses' write history and what was logged about them.
    pub statuses: StatusMemory,
    /// The `DNSEndpoint`s' CRD, what was logged about it, and the clean-up after a mode switch.
    pub dns_endpoints: DnsEndpointMemory,
    /// The first write after the start waited for the names' first answers (or for the
    /// startup grace to end), with `--verify-hostnames=resolve`.
    pub verified_once: bool,
    /// The native cure's: its probes' results, the problems its baselines showed, the data
    /// plane, the record it wrote last, its put-backs.
    pub native: NativeMemory,
}

impl Memory {
    /// What a new leader starts with: nothing remembered.
    pub(crate) fn new(fight: FightParams) -> Self {
        Self {
            fights: with_ip_mode_fights(Fights::new(fight.clone()), &fight),
            reported: Reported::default(),
            dns_state: DnsState::NotReached,
            services_backed_off: BTreeSet::new(),
            statuses: StatusMemory::default(),
            dns_endpoints: DnsEndpointMemory::default(),
            verified_once: false,
            native: NativeMemory::default(),
        }
    }

    /// What `decide` reads of it.
    pub(crate) fn recall(&self) -> Recall<'_> {
        Recall {
            fights: &self.fights,
            reported: &self.reported,
            endpoints: &self.dns_endpoints,
            checks: &self.statuses.checks,
        }
    }
}

impl Default for Memory {
    /// Nothing remembered, with the default write-fight settings.
    fn default() -> Self {
        Self::new(FightParams::default())
    }
}

/// The memory after a reconcile: `memory`, with what was `reported` and what executing
/// `actions` was `observed` to do, at `now`; and what the write-fight guard learnt of it, for
/// [`decide::after`]. Pure: no client, no clock but `now`. The values written are moved from
/// `observed` into the memory, not copied (a Corefile can be most of a MiB).
pub(crate) fn remember(
    mut memory: Memory,
    reported: Reported,
    actions: &Actions<'_>,
    observed: &mut Observed,
    now: Instant,
) -> (Memory, Learnt) {
    let mut learnt = Learnt::default();
    let namespace = actions.namespace.as_str();
    memory.reported = reported;
    for (lb, id) in &actions.checks_reported {
        let seen = memory.statuses.checks.get_mut(lb);
        if let Some(seen) = seen.filter(|seen| seen.id == *id) {
            seen.reported = true;
        }
    }
    if observed.cleaned.is_some() {
        memory.dns_endpoints.cleaned = true;
    }
    if let Some(services) = &mut observed.services {
        learnt.services_reverted = objects(
            &mut memory,
            &mut learnt,
            "Service",
            namespace,
            &mut services.changes,
            now,
        );
        if services.done {
            memory.services_backed_off = services
                .changes
                .backed_off
                .iter()
                .map(|(name, _)| name.clone())
                .collect();
        }
    }
    let own = actions.intent.own_keys.iter().zip(&mut observed.own_keys);
    for ((own, _), key) in own {
        remember_key(&mut memory.fights, &mut learnt, &own.target(), key, now);
    }
    learnt.config_map_fight = actions
        .intent
        .own_keys
        .iter()
        .any(|(own, _)| memory.fights.target_in_fight(&own.target()));
    memory.dns_state = match (&actions.intent.dns, &mut observed.dns) {
        (_, None) => DnsState::NotReached,
        (DnsIntent::NotPlanned { state, .. }, Some(_)) => state.clone(),
        (
            DnsIntent::Planned {
                target: DnsTarget::Keys(keys),
                ..
            },
            Some(DnsObserved::Keys(found)),
        ) => {
            for (key, found) in keys.iter().zip(found.iter_mut()) {
                remember_key(
                    &mut memory.fights,
                    &mut learnt,
                    &key.write.target(),
                    found,
                    now,
                );
            }
            // The CoreDNS write (the primary) says where the DNS change stands.
            let primary = keys.iter().zip(found.iter()).find(|(key, _)| key.primary);
            primary.map_or(DnsState::NotReached, |(key, found)| {
                dns_state(key.write, found)
            })
        }
        (_, Some(DnsObserved::Endpoints(found))) => {
            endpoints(&mut memory, &mut learnt, namespace, found, now)
        }
        (_, Some(_)) => DnsState::NotReached,
    };
    learnt.service_fight = memory.fights.in_fight("Service ");
    learnt.endpoint_fight = memory
        .fights
        .in_fight(&format!("{} ", hairpin_planner::external_dns::KIND));
    (memory, learnt)
}

/// The statuses' memory once the propagation checks `decide` chose are started and stopped:
/// each start remembered (taking the write it measures, and its number), each stop
/// forgotten. Pure.
pub(crate) fn remember_checks(memory: &mut StatusMemory, actions: &[CheckAction]) {
    for action in actions {
        match action {
            CheckAction::Stop(lb) => {
                memory.checks.remove(lb);
            }
            CheckAction::Start(start) => {
                memory.write_measured(&start.lb);
                memory.next_check = start.id + 1;
                memory.checks.insert(start.lb.clone(), CheckSeen::of(start));
            }
        }
    }
}

/// One ConfigMap key's observation: a write recorded (a revert or a fight, when it wrote
/// again what it wrote last time), or a key found as planned (which may end its fight).
fn remember_key(
    fights: &mut Fights,
    learnt: &mut Learnt,
    target: &str,
    found: &mut KeyObserved,
    now: Instant,
) {
    match found {
        // Held a whole window: its fight (if any) is over.
        KeyObserved::AsPlanned if fights.held(target, now) => {
            learnt.fights_over.insert(target.to_owned());
        }
        KeyObserved::Written { after, .. } => {
            let observation = fights.written(target, after.take(), now);
            learnt.keys.insert(target.to_owned(), observation);
        }
        _ => {}
    }
}

/// Where the DNS change stands after what its CoreDNS `write` found.
fn dns_state(write: &DnsWrite, found: &KeyObserved) -> DnsState {
    match found {
        KeyObserved::AsPlanned | KeyObserved::Unchanged => DnsState::InPlace { wrote: false },
        KeyObserved::Written { .. } => DnsState::InPlace { wrote: true },
        KeyObserved::BackedOff(_) => decide::dns_backed_off(write),
        KeyObserved::ConfigMapMissing => decide::dns_config_map_missing(write),
        KeyObserved::Failed(err) => decide::dns_write_failed(write, err).1,
    }
}

/// The `DNSEndpoint`s' observation: the write fights, the CRD, and where the DNS change
/// stands.
fn endpoints(
    memory: &mut Memory,
    learnt: &mut Learnt,
    namespace: &str,
    found: &mut EndpointsObserved,
    now: Instant,
) -> DnsState {
    let kind = hairpin_planner::external_dns::KIND;
    match found {
        EndpointsObserved::CrdMissing => {
            learnt.crd_missing_news = !memory.dns_endpoints.crd_missing_logged;
            memory.dns_endpoints.crd_missing_logged = true;
            DnsState::Refused {
                reason: "CRDNotInstalled",
                message: crd_missing_message(),
            }
        }
        EndpointsObserved::Failed(err, changes) => {
            learnt.endpoints_reverted = objects(memory, learnt, kind, namespace, changes, now);
            DnsState::Refused {
                reason: "WriteFailed",
                message: format!("cannot write the DNSEndpoints: {err}"),
            }
        }
        EndpointsObserved::Applied(applied) => {
            let changes = &mut applied.changes;
            learnt.endpoints_reverted = objects(memory, learnt, kind, namespace, changes, now);
            if !applied.done {
                return DnsState::NotReached;
            }
            memory.dns_endpoints.crd_missing_logged = false;
            if changes.backed_off.is_empty() {
                DnsState::InPlace {
                    wrote: changes.writes() > 0,
                }
            } else {
                let names: Vec<&str> = changes.backed_off.iter().map(|(n, _)| n.as_str()).collect();
                DnsState::Refused {
                    reason: "WriteFight",
                    message: list_note(
                        "another writer keeps changing hairpin's DNSEndpoint(s) ",
                        &names,
                        ", ",
                        "; writes to them are backed off",
                    ),
                }
            }
        }
    }
}

/// The write fights over hairpin's objects of `kind` after an apply: each object found as
/// wanted may end its fight, each written one is a revert when hairpin wrote the same last
/// time, and the objects no longer wanted are forgotten. Returns the reverted ones.
fn objects(
    memory: &mut Memory,
    learnt: &mut Learnt,
    kind: &str,
    namespace: &str,
    changes: &mut ObjectChanges,
    now: Instant,
) -> Vec<Reverted> {
    let fights = &mut memory.fights;
    let target = |name: &str| format!("{kind} {namespace}/{name}");
    for name in &changes.held {
        let target = target(name);
        if fights.held(&target, now) {
            learnt.fights_over.insert(target);
        }
    }
    let mut reverted = Vec::new();
    for written in &mut changes.written {
        match fights.written(&target(&written.name), written.value.take(), now) {
            Observation::Normal => {}
            observation => reverted.push(Reverted {
                name: written.name.clone(),
                observation,
                writer: written.writer.clone(),
            }),
        }
    }
    if let Some(wanted) = &changes.wanted {
        let prefix = format!("{kind} {namespace}/");
        fights.retain(&prefix, |t| wanted.iter().any(|w| *w == t[prefix.len()..]));
    }
    reverted
}

#[cfg(test)]
mod tests;
