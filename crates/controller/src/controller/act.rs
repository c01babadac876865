//! Executing what [`decide`](super::decide) chose, and nothing else: the writes of the
//! [`Actions`] in order (hairpin's Services, its own ConfigMap keys, the native cure, the DNS
//! change), each write's answer handed back as [`Observed`], and the [`Effect`]s (Events,
//! metrics). No Event, reason or state is chosen here, and nothing is remembered: what the
//! writes found goes to [`remember`](super::memory::remember) and
//! [`decide::after`](super::decide::after). (The native cure runs here, between hairpin's own
//! keys and the DNS change, as [`NativeRun`]: its pure driver, over the memory's native part,
//! hands out one step at a time, its executor executes each and answers.)

use hairpin_planner::{ClusterSnapshot, Plan};

use super::decide::{Actions, Counter, Effect, Gauge, Histogram};
use super::observed::{KeyObserved, ObjectsObserved, Observed};
use crate::Error;
use crate::apply::{KeyOutcome, ObjectChanges, apply_services_into, write_key};
use crate::context::Context;
use crate::dns_endpoints::DnsEndpointWriter;
use crate::edits::KeyEdit;
use crate::fight::Decision;
use crate::native::NativeRun;

mod dns;

/// The executors of a reconcile's writes (they keep no state: the native cure's borrows the
/// memory's).
pub(super) struct Writers<'a> {
    /// The loop's client, Events and metrics.
    pub ctx: &'a Context,
    /// The native cure.
    pub native: NativeRun<'a>,
    /// hairpin's `DNSEndpoint`s.
    pub endpoints: &'a DnsEndpointWriter,
}

/// Executes `actions` (decided from `plan` and `snapshot`), in order, until the first error;
/// returns what each write found, and the error it stopped at. Each of hairpin's own key edits
/// is dropped once written (its value, the hosts table, is most of a MiB at 20,000 names, and
/// nothing after `act` reads it), so that it is not held through the DNS write, the
/// reconcile's heap peak.
pub(super) async fn act(
    writers: Writers<'_>,
    actions: &mut Actions<'_>,
    plan: &Plan,
    snapshot: &ClusterSnapshot,
) -> Observed {
    let mut observed = Observed::default();
    if let Err(err) = writes(writers, actions, plan, snapshot, &mut observed).await {
        observed.error = Some(err);
    }
    observed
}

async fn writes(
    writers: Writers<'_>,
    actions: &mut Actions<'_>,
    plan: &Plan,
    snapshot: &ClusterSnapshot,
    observed: &mut Observed,
) -> Result<(), Error> {
    let Writers {
        ctx,
        native,
        endpoints,
    } = writers;
    ctx.metrics.set_unverified(&plan.verification);
    ctx.metrics.set_cures(&plan.cures);
    execute(ctx, actions.intent.gauges.clone()).await;
    if actions.clean_endpoints {
        let deleted = endpoints.clean(ctx.planner.dns_mode).await;
        ctx.count_writes(deleted);
        observed.cleaned = Some(deleted);
    }
    services(ctx, actions, observed).await?;
    let guards = (actions.intent.own_keys.iter_mut()).zip(&actions.guards.own_keys);
    for ((own, edit), decision) in guards {
        // Taken, so that it is dropped once written.
        let edit = edit.take();
        let found = key(ctx, edit.as_ref(), *decision).await?;
        if matches!(found, KeyObserved::Written { .. }) {
            tracing::info!(configmap = %own.config_map(), "{} published", own.read_by);
        }
        observed.own_keys.push(found);
    }
    observed.own_keys_done = true;
    // The native cure before the DNS: the plan already keeps the DNS rules of every load
    // balancer not proven (make before break).
    observed.native = Some(native.run(plan, snapshot).await?);
    dns::dns(ctx, endpoints, actions, observed).await
}

/// The hairpin Services (hairpin's others in its namespace are deleted), except those backed
/// off from.
async fn services(
    ctx: &Context,
    actions: &Actions<'_>,
    observed: &mut Observed,
) -> Result<(), Error> {
    let planner = &ctx.planner;
    let mut changes = ObjectChanges::default();
    let result = apply_services_into(
        &ctx.client,
        &planner.namespace,
        &planner.annotation("source"),
        &actions.intent.services,
        Some(&actions.guards.services),
        &mut changes,
    )
    .await;
    if result.is_ok() {
        ctx.count_writes(changes.writes());
        if changes.writes() > 0 {
            tracing::info!(created = ?changes.created, updated = ?changes.updated, deleted = ?changes.deleted, "hairpin Services applied");
        }
    }
    observed.services = Some(ObjectsObserved {
        changes,
        done: result.is_ok(),
    });
    result
}

/// One ConfigMap key: left as it is when it is as planned (`edit` none) or its writes are
/// backed off, else written from a fresh read.
async fn key(
    ctx: &Context,
    edit: Option<&KeyEdit>,
    decision: Decision,
) -> Result<KeyObserved, Error> {
    let Some(edit) = edit else {
        return Ok(KeyObserved::AsPlanned);
    };
    if let Decision::BackedOff(until) = decision {
        return Ok(KeyObserved::BackedOff(until));
    }
    Ok(match write_key(&ctx.client, edit).await? {
        KeyOutcome::Written {
            after,
            managed_fields,
            ..
        } => {
            ctx.count_writes(1);
            KeyObserved::Written {
                after,
                managed_fields,
            }
        }
        KeyOutcome::Unchanged { .. } => KeyObserved::Unchanged,
        KeyOutcome::ConfigMapMissing => KeyObserved::ConfigMapMissing,
    })
}

/// Executes `effects`, in order.
pub(super) async fn execute(ctx: &Context, effects: Vec<Effect>) {
    let metrics = &ctx.metrics;
    for effect in effects {
        match effect {
            Effect::Publish {
                regarding,
                warning,
                reason,
                note,
            } => {
                ctx.events.publish(&regarding, warning, reason, note).await;
            }
            Effect::Forget { regarding, reason } => {
                ctx.events.forget(&regarding, reason).await;
            }
            Effect::Count(counter, n) => {
                let counter = match counter {
                    Counter::ServiceReverts => &metrics.service_reverts,
                    Counter::DnsReverts => &metrics.dns_reverts,
                    Counter::ConfigMapReverts => &metrics.config_map_reverts,
                    Counter::DnsWriteFailures => &metrics.dns_write_failures,
                };
                counter.inc_by(n);
            }
            Effect::Set(gauge, value) => {
                let gauge = match gauge {
                    Gauge::ServiceFight => &metrics.service_fight,
                    Gauge::DnsFight => &metrics.dns_fight,
                    Gauge::ConfigMapFight => &metrics.config_map_fight,
                    Gauge::DnsPlanErrors => &metrics.dns_plan_errors,
                    Gauge::ManagedLoadBalancers => &metrics.managed_load_balancers,
                    Gauge::ManagedHostnames => &metrics.managed_hostnames,
                };
                gauge.set(value);
            }
            Effect::Observe(Histogram::DnsPropagation, seconds) => {
                metrics.dns_propagation.observe(seconds);
            }
            Effect::Refused(label) => metrics.refused(label),
            Effect::CountError(label) => metrics.count_error(label),
        }
    }
}
