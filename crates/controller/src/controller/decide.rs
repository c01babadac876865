//! What the loop does about a plan, decided without a client: the [`Intent`] (the hairpin
//! Services, the ConfigMap keys and their edits, the DNS change, the gauges and the Events),
//! the Events' texts, the metric choices, the write-fight policy (what a revert or a fight
//! leads to) and the DNS state the Hairpin statuses report. Every function here is pure: it
//! maps the plan, what the cluster holds and what the loop remembers to an intent, verdicts
//! and [`Effect`]s, which [`act`](super::act) executes. (Log lines are written where their
//! texts are chosen.)

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::time::{Duration, Instant};

use hairpin_planner::admission::RefusalReason;
use hairpin_planner::{CorednsFacts, DnsChange, DnsWrite, ObjectRef, Plan, PlannerConfig};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

use crate::edits::fight_fix;
use crate::fight::Observation;
use crate::report::{list_note, object_ref, reason};
use crate::status::DnsState;

mod actions;
mod after;
mod checks;
mod intent;
mod reports;

pub(crate) use actions::{Actions, Recall, actions};
pub(crate) use after::{Scene, after};
pub(crate) use checks::{CheckScene, check_reports, checks};
pub(crate) use intent::{DnsIntent, DnsKey, DnsTarget, Intent, intent};
pub(crate) use reports::reports;

/// One thing decided: an Event to publish (or forget), or a metric to change.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Effect {
    /// An Event on `regarding`.
    Publish {
        /// The object the Event is about.
        regarding: ObjectReference,
        /// A Warning (else Normal).
        warning: bool,
        /// The Event's reason.
        reason: &'static str,
        /// The Event's note (what it quotes escaped).
        note: String,
    },
    /// The Event series of `reason` on `regarding` is over.
    Forget {
        /// The object the Event was about.
        regarding: ObjectReference,
        /// The Event's reason.
        reason: &'static str,
    },
    /// A counter goes up by this much.
    Count(Counter, u64),
    /// A gauge is set.
    Set(Gauge, i64),
    /// A histogram observes a value.
    Observe(Histogram, f64),
    /// One more refused hostname claim, by reason label.
    Refused(&'static str),
    /// One more error, by kind label.
    CountError(&'static str),
}

/// The counters [`decide`](self) moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counter {
    /// hairpin Services restored after another writer changed them.
    ServiceReverts,
    /// DNS keys (or DNSEndpoints) restored after another writer changed them.
    DnsReverts,
    /// hairpin's own ConfigMap keys restored after another writer changed them.
    ConfigMapReverts,
    /// Failed DNS writes.
    DnsWriteFailures,
}

/// The gauges [`decide`](self) sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gauge {
    /// A write fight over a hairpin Service.
    ServiceFight,
    /// A write fight over the DNS change.
    DnsFight,
    /// A write fight over one of hairpin's ConfigMaps.
    ConfigMapFight,
    /// Plan errors that keep the DNS change from being planned.
    DnsPlanErrors,
    /// Load balancers hairpinned.
    ManagedLoadBalancers,
    /// Hostnames redirected.
    ManagedHostnames,
}

/// The histograms [`decide`](self) feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Histogram {
    /// Seconds from a DNS write of this controller's until the cluster DNS answered it.
    DnsPropagation,
}

/// What follows a write (or a decision not to write): the effects, and when to look again.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Verdict {
    /// In order.
    pub effects: Vec<Effect>,
    /// When to run again, if sooner than the resync.
    pub requeue: Option<Instant>,
}

impl Verdict {
    fn of(effects: Vec<Effect>) -> Self {
        Self {
            effects,
            requeue: None,
        }
    }
}

/// One refused claim: who asked (kind, object), the hostname and the reason.
pub(crate) type RefusedClaim = (String, ObjectRef, String, RefusalReason);

/// What the loop remembers of the Events it published, to publish each change once.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Reported {
    /// The refused hostname claims of the last plan, to count and report each once.
    pub refused: BTreeSet<RefusedClaim>,
    /// The unverified hostnames reported in Events, per load balancer.
    pub unverified: BTreeMap<ObjectRef, String>,
}

/// The Events of a plan, and what to remember of them.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Reports {
    /// In order.
    pub effects: Vec<Effect>,
    /// Replaces what the loop remembered.
    pub reported: Reported,
}

/// One of hairpin's own ConfigMap keys (the proxies' routes, the node agents' hosts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OwnKey {
    pub namespace: String,
    pub name: String,
    pub key: String,
    /// Who reads it, in the fight Event.
    pub read_by: &'static str,
}

impl OwnKey {
    /// Key `key` of ConfigMap `name` in hairpin's namespace.
    fn new(planner: &PlannerConfig, name: &str, key: &str, read_by: &'static str) -> Self {
        Self {
            namespace: planner.namespace.clone(),
            name: name.to_owned(),
            key: key.to_owned(),
            read_by,
        }
    }

    /// `namespace/name/key`, its fight target (as [`hairpin_planner::DnsWrite::target`]).
    pub(crate) fn target(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.name, self.key)
    }

    /// `namespace/name`.
    pub(crate) fn config_map(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The proxies' route table and the node agents' hosts block (each agent watches only that
/// object, never the cluster's Ingresses and routes).
pub(crate) fn own_keys(planner: &PlannerConfig) -> [OwnKey; 2] {
    [
        OwnKey::new(
            planner,
            &planner.routes_config_map,
            &planner.routes_key,
            "the hairpin proxies' route table",
        ),
        OwnKey::new(
            planner,
            &planner.hosts_config_map,
            &planner.hosts_key,
            "the node agents' hosts block",
        ),
    ]
}

/// The sooner of two optional instants.
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// How many, as a gauge value.
fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// How many, as a counter increment.
pub(crate) fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// The gauges of a plan: load balancers and hostnames hairpinned.
pub(crate) fn plan_gauges(plan: &Plan) -> Vec<Effect> {
    vec![
        Effect::Set(
            Gauge::ManagedLoadBalancers,
            gauge(plan.load_balancers.len()),
        ),
        Effect::Set(
            Gauge::ManagedHostnames,
            gauge(plan.dns.as_ref().map_or(0, |dns| dns.entries.len())),
        ),
    ]
}

/// The other writer of a write fight, as named in its Event: the field manager of its latest
/// change (`crate::apply::last_writer`).
pub(crate) fn other_writer(manager: Option<&str>) -> String {
    match manager {
        Some(manager) => format!("another writer (field manager {manager:?})"),
        None => "another writer (unnamed: the object was deleted, or its managedFields name no other manager)".to_owned(),
    }
}

/// The ConfigMap a DNS write goes to, as an Event's `regarding`.
fn config_map_ref(write: &DnsWrite) -> ObjectReference {
    object_ref(
        "ConfigMap",
        &write.config_map.namespace,
        &write.config_map.name,
        None,
    )
}

/// After a write of one of hairpin's own ConfigMap keys, what the fight guard observed: a
/// plain write (nothing more), a revert by another writer (restored, logged), or a fight
/// (backed off, one Warning Event on the ConfigMap naming the writer).
pub(crate) fn own_key_written(
    own: &OwnKey,
    observation: Observation,
    writer: Option<&str>,
    window: Duration,
    now: Instant,
) -> Verdict {
    let config_map = own.config_map();
    match observation {
        Observation::Normal => Verdict::default(),
        Observation::Reverted { .. } => {
            tracing::warn!(configmap = %config_map, writer = ?writer, "{} changed {}; restored it", other_writer(writer), own.read_by);
            Verdict::of(vec![Effect::Count(Counter::ConfigMapReverts, 1)])
        }
        Observation::Fight { count, backoff } => {
            let note = format!(
                "{} changed hairpin's ConfigMap {config_map} (key {}, {}) {count} times within {window:?}; hairpin restored it each time and now leaves it for {backoff:?} (doubling while this goes on), so what reads it gets the other writer's version meanwhile. Exclude hairpin's objects (label {}={}) from that writer.",
                other_writer(writer),
                own.key,
                own.read_by,
                hairpin_planner::MANAGED_BY_LABEL,
                hairpin_planner::MANAGED_BY_VALUE,
            );
            tracing::warn!(configmap = %config_map, writer = ?writer, reverts = count, backoff = ?backoff, "write fight over one of hairpin's ConfigMaps; backing off");
            Verdict {
                effects: vec![
                    Effect::Count(Counter::ConfigMapReverts, 1),
                    Effect::Publish {
                        regarding: object_ref("ConfigMap", &own.namespace, &own.name, None),
                        warning: true,
                        reason: reason::CONFIG_MAP_FIGHT,
                        note,
                    },
                ],
                requeue: Some(now + backoff),
            }
        }
    }
}

/// One of hairpin's objects someone else changed, restored by the last write.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Restored<'a> {
    /// The object's name.
    pub name: &'a str,
    /// A revert, or a fight.
    pub observation: Observation,
    /// The other writer, when named.
    pub writer: Option<&'a str>,
}

/// hairpin's objects of `kind` (`Service`, `DNSEndpoint`) in `namespace` that someone else
/// changed: a log line per restore, a Warning Event on the object naming the other writer
/// when that became a fight, and the fight metrics (`in_fight`: a fight over one of them is
/// on). `backed_off`: when each object left alone may be written again.
pub(crate) fn restored(
    kind: &str,
    namespace: &str,
    restored: &[Restored<'_>],
    backed_off: impl Iterator<Item = Instant>,
    in_fight: bool,
    window: Duration,
    now: Instant,
) -> Verdict {
    let (reverts, fight, reason) = match kind {
        "Service" => (
            Counter::ServiceReverts,
            Gauge::ServiceFight,
            reason::SERVICE_FIGHT,
        ),
        _ => (Counter::DnsReverts, Gauge::DnsFight, reason::DNS_FIGHT),
    };
    let mut effects = vec![
        Effect::Count(reverts, count(restored.len())),
        Effect::Set(fight, i64::from(in_fight)),
    ];
    let mut requeue = backed_off.min();
    for revert in restored {
        let object = format!("{kind} {namespace}/{}", revert.name);
        let writer = other_writer(revert.writer);
        match revert.observation {
            Observation::Fight { count, backoff } => {
                let note = format!(
                    "{writer} changed hairpin's {object} {count} times within {window:?}; hairpin restored it each time and now leaves it for {backoff:?} (doubling while this goes on). Exclude hairpin's objects (label {}={}) from that writer.",
                    hairpin_planner::MANAGED_BY_LABEL,
                    hairpin_planner::MANAGED_BY_VALUE,
                );
                tracing::warn!(object = %object, writer = ?revert.writer, reverts = count, backoff = ?backoff, "write fight over one of hairpin's objects; backing off");
                effects.push(Effect::Publish {
                    regarding: object_ref(kind, namespace, revert.name, None),
                    warning: true,
                    reason,
                    note,
                });
                requeue = earliest(requeue, Some(now + backoff));
            }
            _ => {
                tracing::warn!(object = %object, writer = ?revert.writer, "{writer} changed one of hairpin's objects; restored it");
            }
        }
    }
    Verdict { effects, requeue }
}

/// No DNS change planned: the plan's errors counted and logged, said on the CoreDNS ConfigMap
/// (when there is one), and the DNS state that says why.
pub(crate) fn dns_not_planned(plan: &Plan) -> (Verdict, DnsState) {
    let mut effects = vec![Effect::Set(Gauge::DnsPlanErrors, gauge(plan.errors.len()))];
    // Each message escapes what it quotes once: printed as it is.
    let messages: Vec<String> = plan.errors.iter().map(ToString::to_string).collect();
    let state = DnsState::Refused {
        reason: "NotPlanned",
        message: format!("hairpin cannot change DNS: {}", messages.join("; ")),
    };
    for err in &plan.errors {
        effects.push(Effect::CountError(err.metric_label()));
        tracing::warn!(error = %err, kind = err.metric_label(), "DNS change not planned");
    }
    if let Some(cm) = &plan.coredns.config_map
        && !plan.errors.is_empty()
    {
        effects.push(Effect::Publish {
            regarding: object_ref("ConfigMap", &cm.namespace, &cm.name, None),
            warning: true,
            reason: reason::DNS_WRITE_FAILED,
            note: list_note("hairpin cannot change DNS: ", &messages, "; ", ""),
        });
    }
    (Verdict::of(effects), state)
}

/// A DNS key already as planned whose write fight has held for a whole window: it is over.
pub(crate) fn dns_fight_over(write: &DnsWrite) -> Vec<Effect> {
    tracing::info!(configmap = %write.config_map, "our DNS change has held for a whole window; the write fight is over");
    vec![Effect::Set(Gauge::DnsFight, 0)]
}

/// The DNS state while writes of `write` are backed off (a write fight).
pub(crate) fn dns_backed_off(write: &DnsWrite) -> DnsState {
    tracing::debug!(configmap = %write.config_map, "DNS write backed off (write fight)");
    DnsState::Refused {
        reason: "WriteFight",
        message: format!(
            "another writer keeps reverting hairpin's change to {}; writes are backed off",
            write.config_map
        ),
    }
}

/// The DNS state when the ConfigMap of `write` does not exist.
pub(crate) fn dns_config_map_missing(write: &DnsWrite) -> DnsState {
    DnsState::Refused {
        reason: "ConfigMapMissing",
        message: format!("the ConfigMap {} does not exist", write.config_map),
    }
}

/// A failed DNS write: counted, a Warning Event on the ConfigMap, and the DNS state.
pub(crate) fn dns_write_failed(write: &DnsWrite, err: &impl Display) -> (Verdict, DnsState) {
    let warning = format!("cannot write {} key {}: {err}", write.config_map, write.key);
    let state = DnsState::Refused {
        reason: "WriteFailed",
        message: warning.clone(),
    };
    let effects = vec![
        Effect::Count(Counter::DnsWriteFailures, 1),
        Effect::Publish {
            regarding: config_map_ref(write),
            warning: true,
            reason: reason::DNS_WRITE_FAILED,
            note: warning,
        },
    ];
    (Verdict::of(effects), state)
}

/// What a DNS write of hairpin's found, and the facts of its fight Event.
pub(crate) struct DnsWritten<'a> {
    /// The DNS change.
    pub dns: &'a DnsChange,
    /// The key written.
    pub write: &'a DnsWrite,
    /// What the fight guard observed.
    pub observation: Observation,
    /// The ConfigMap's `managedFields` as read before the write.
    pub managed_fields: &'a [ManagedFieldsEntry],
    /// The field manager of their latest change.
    pub writer: Option<&'a str>,
    /// The CoreDNS facts (its custom key suffix, for the fix).
    pub coredns: &'a CorednsFacts,
}

/// After a DNS write, what the fight guard observed: a normal write (an Event), a revert by
/// another writer (rewritten), or a fight (backed off, with an Event naming the writer and
/// the fix).
pub(crate) fn dns_written(
    written: &DnsWritten<'_>,
    planner: &PlannerConfig,
    window: Duration,
    now: Instant,
) -> Verdict {
    let write = written.write;
    match written.observation {
        Observation::Normal => {
            let note = format!(
                "hairpin DNS rules written ({} hostnames)",
                written.dns.entries.len()
            );
            Verdict::of(vec![
                Effect::Set(Gauge::DnsFight, 0),
                Effect::Publish {
                    regarding: config_map_ref(write),
                    warning: false,
                    reason: reason::DNS_UPDATED,
                    note,
                },
            ])
        }
        Observation::Reverted { count } => {
            tracing::warn!(configmap = %write.config_map, reverts = count, "another writer reverted our DNS change; rewrote it");
            Verdict::of(vec![Effect::Count(Counter::DnsReverts, 1)])
        }
        Observation::Fight { count, backoff } => {
            let fix = fight_fix(
                write,
                written.managed_fields,
                written.coredns.custom_key_suffix.as_deref(),
                planner,
            );
            let writer = written.writer;
            let note = format!(
                "{} reverted hairpin's change to {} {count} times within {window:?}; backing off for {backoff:?}. {fix}",
                other_writer(writer),
                write.config_map,
            );
            tracing::warn!(configmap = %write.config_map, writer = ?writer, reverts = count, backoff = ?backoff, fix, "DNS write fight detected; backing off");
            Verdict {
                effects: vec![
                    Effect::Count(Counter::DnsReverts, 1),
                    Effect::Set(Gauge::DnsFight, 1),
                    Effect::Publish {
                        regarding: config_map_ref(write),
                        warning: true,
                        reason: reason::DNS_FIGHT,
                        note,
                    },
                ],
                requeue: Some(now + backoff),
            }
        }
    }
}

#[cfg(test)]
mod tests;
