//! Acting on a plan: executing the [`Intent`] [`decide`] made of it (hairpin
//! Services, its own ConfigMap keys, the native cure, the DNS change, the [`Effect`]s), then
//! the Hairpin statuses, with what happened kept for the next reconcile (the write-fight
//! state, the Events published, the [`Outcome`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hairpin_planner::{ClusterSnapshot, Plan};
use k8s_openapi::api::core::v1::Service;

use super::decide::{self, Counter, DnsIntent, Effect, Gauge, Intent, OwnKey, Restored, earliest};
use super::memory::Memory;
use super::{ControllerConfig, StopFuture};
use crate::Error;
use crate::apply::{KeyOutcome, ObjectChanges, apply_services, last_writer, write_key};
use crate::context::Context;
use crate::dns_endpoints::DnsEndpointWriter;
use crate::edits::KeyEdit;
use crate::fight::Decision;
use crate::native::NativeCurer;
use crate::ownership::OwnershipResolver;
use crate::propagation::Checks;
use crate::status::{DnsState, StatusWriter};
use crate::watch::Caches;

mod dns;

/// The leader's writers (which keep no state) and what it remembers between reconciles (the
/// [`Memory`]; the native cure keeps its own beside it, for now).
pub(super) struct Reconciler {
    ctx: Arc<Context>,
    config: ControllerConfig,
    /// Everything the loop keeps between reconciles, but the native cure's.
    memory: Memory,
    status: StatusWriter,
    /// The `DNSEndpoint`s of `--dns-mode external-dns` (and their clean-up after a switch).
    dns_endpoints: DnsEndpointWriter,
    /// The native cure's status writes, probes and record (the one writer that still keeps
    /// its state: its record, its probes' results, its write fights over `ipMode`).
    native: NativeCurer,
    /// The ownership resolver, with `--verify-hostnames=resolve` (a sensor: it wakes the loop
    /// as answers come).
    ownership: Option<OwnershipResolver>,
}

impl Reconciler {
    /// The reconciler of a controller whose caches have synced, writing through `ctx`. With
    /// hostname verification on, its resolver starts here: only the leader plans, so only the
    /// leader's resolver has names to ask; a new leader holds its first write until their
    /// answers come (`verified_once`).
    pub(super) fn new(ctx: &Arc<Context>, config: &ControllerConfig, stop: &StopFuture) -> Self {
        let ownership = (config.planner.verify_hostnames == hairpin_planner::VerifyMode::Resolve)
            .then(|| {
                OwnershipResolver::new(
                    config.ownership.clone(),
                    ctx.changed.clone(),
                    ctx.metrics.clone(),
                )
            });
        if let Some(ownership) = &ownership {
            tokio::spawn(ownership.clone().run(stop.clone()));
        }
        Reconciler {
            dns_endpoints: DnsEndpointWriter::new(ctx),
            native: NativeCurer::new(ctx, config.native.clone(), config.fight.clone()),
            status: StatusWriter::new(ctx, Checks::new(ctx, config.propagation.clone())),
            ownership,
            ctx: ctx.clone(),
            config: config.clone(),
            memory: Memory::new(config.fight.clone()),
        }
    }

    /// One plan-and-apply. Returns when to run again, if sooner than the resync.
    pub(super) async fn reconcile(&mut self, caches: &Caches) -> Result<Option<Instant>, Error> {
        let started = Instant::now();
        self.ctx.metrics.reconciles.inc();
        let mut snapshot = caches.snapshot();
        // The Nodes (watched from the first native cure on), for the native cure's gate.
        snapshot.nodes = self.native.nodes();
        // Do no harm: a receiver whose ConfigMap was just named (a new workload, a new
        // leader) is read before anything is planned for its load balancer; the watch wakes
        // the loop once it has listed.
        let waiting = caches.follow_receivers(&snapshot);
        if !waiting.is_empty() {
            tracing::debug!(waiting = %waiting.join(", "), "waiting for the receivers' ConfigMaps to list before planning");
            return Ok(Some(Instant::now() + Duration::from_millis(500)));
        }
        if let Some(ownership) = &self.ownership {
            snapshot.resolutions = ownership.resolutions();
        }
        let plan = hairpin_planner::desired(&snapshot, &self.config.planner);
        if let Some(ownership) = &self.ownership {
            ownership.want(&plan.verification.names, &plan.coredns.forward_zones);
            // Do no harm on a start: names not resolved yet are not redirected, so writing
            // before their answers come would drop working names for a moment. The resolver
            // wakes the loop as answers arrive.
            if !self.memory.verified_once && !ownership.settled() {
                tracing::info!(
                    names = plan.verification.names.len(),
                    "waiting for the first upstream answers before writing"
                );
                return Ok(Some(Instant::now() + Duration::from_secs(1)));
            }
            self.memory.verified_once = true;
        }
        let intent = decide::intent(
            &plan,
            &snapshot,
            &self.config.planner,
            &self.memory.reported,
        );
        self.ctx.metrics.set_unverified(&plan.verification);
        self.ctx.metrics.set_cures(&plan.cures);
        let Intent {
            gauges,
            services,
            own_keys,
            dns,
            reports,
        } = intent;
        execute(&self.ctx, gauges).await;
        self.memory.dns_state = DnsState::NotReached;
        self.memory.dns_endpoints.crd = caches.dns_endpoints_served();
        let deleted = self
            .dns_endpoints
            .clean_once(&mut self.memory.dns_endpoints, self.config.planner.dns_mode)
            .await;
        self.ctx.count_writes(deleted);
        let result = self.apply(&plan, &snapshot, &services, own_keys, dns).await;
        self.ctx
            .metrics
            .reconcile_duration
            .observe(started.elapsed().as_secs_f64());
        execute(&self.ctx, reports.effects).await;
        self.memory.reported = reports.reported;
        for warning in &plan.warnings {
            tracing::warn!(subject = %warning.subject, "{}", warning.message);
        }
        let statuses = self
            .status
            .sync(
                &mut self.memory.statuses,
                &plan,
                &snapshot,
                caches.hairpins(),
                |name| caches.ready_endpoints(name),
                &self.memory.dns_state,
                &self.memory.services_backed_off,
            )
            .await;
        let requeue = result?;
        statuses?;
        Ok(requeue)
    }

    /// Executes a verdict's effects; returns its requeue.
    async fn follow(&self, verdict: decide::Verdict) -> Option<Instant> {
        execute(&self.ctx, verdict.effects).await;
        verdict.requeue
    }

    /// Executes the writes of an intent, in order: the hairpin Services, hairpin's own keys,
    /// the native cure, the DNS change.
    async fn apply(
        &mut self,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
        services: &[Service],
        own_keys: Vec<(OwnKey, Option<KeyEdit>)>,
        dns: DnsIntent<'_>,
    ) -> Result<Option<Instant>, Error> {
        let planner = &self.config.planner;
        let changes = apply_services(
            &self.ctx.client,
            &planner.namespace,
            &planner.annotation("source"),
            services,
            Some(&mut self.memory.fights),
        )
        .await?;
        self.ctx.count_writes(changes.writes());
        if changes.writes() > 0 {
            tracing::info!(created = ?changes.created, updated = ?changes.updated, deleted = ?changes.deleted, "hairpin Services applied");
        }
        let services_requeue = self.report_reverts("Service", &changes).await;
        self.memory.services_backed_off = changes
            .backed_off
            .iter()
            .map(|(name, _)| name.clone())
            .collect();

        let mut requeue = services_requeue;
        let mut fight = false;
        for (own, edit) in own_keys {
            requeue = earliest(requeue, self.write_own_key(&own, edit).await?);
            fight |= self.memory.fights.in_fight(&own.target());
        }
        execute(
            &self.ctx,
            vec![Effect::Set(Gauge::ConfigMapFight, i64::from(fight))],
        )
        .await;

        // The native cure before the DNS: the plan already keeps the DNS rules of every load
        // balancer not proven (make before break).
        let native_requeue = self.native.apply(plan, snapshot).await?;
        let dns_requeue = self.apply_dns(plan, snapshot, dns).await?;
        Ok(earliest(earliest(requeue, native_requeue), dns_requeue))
    }

    /// One of hairpin's own ConfigMap keys: written when the cached copy differs from the plan
    /// (`edit`), and guarded against a write fight like the DNS keys: another writer that
    /// keeps changing (or deleting) it is restored `--fight-threshold` times within
    /// `--fight-window`, then left alone for the backoff, with one Warning Event on the
    /// ConfigMap naming it. Returns when a backed-off write may be tried again.
    async fn write_own_key(
        &mut self,
        own: &OwnKey,
        edit: Option<KeyEdit>,
    ) -> Result<Option<Instant>, Error> {
        let target = own.target();
        let config_map = own.config_map();
        let Some(edit) = edit else {
            if self.memory.fights.held(&target, Instant::now()) {
                tracing::info!(configmap = %config_map, "our ConfigMap has held for a whole window; the write fight is over");
            }
            return Ok(None);
        };
        if let Decision::BackedOff(until) = self.memory.fights.decide(&target, Instant::now()) {
            tracing::debug!(configmap = %config_map, "write backed off (write fight)");
            return Ok(Some(until));
        }
        let KeyOutcome::Written {
            after,
            managed_fields,
            ..
        } = write_key(&self.ctx.client, &edit).await?
        else {
            return Ok(None);
        };
        self.ctx.count_writes(1);
        tracing::info!(configmap = %config_map, "{} published", own.read_by);
        let writer = last_writer(&managed_fields);
        let observation = self.memory.fights.written(&target, after, Instant::now());
        let verdict = decide::own_key_written(
            own,
            observation,
            writer.as_deref(),
            self.config.fight.window,
            Instant::now(),
        );
        Ok(self.follow(verdict).await)
    }

    /// Reports hairpin's objects of `kind` that someone else changed, and sets the fight
    /// metrics ([`decide::restored`]). Returns when a backed-off object may be written again.
    async fn report_reverts(&mut self, kind: &str, changes: &ObjectChanges) -> Option<Instant> {
        let restored: Vec<Restored<'_>> = changes
            .reverted
            .iter()
            .map(|r| Restored {
                name: &r.name,
                observation: r.observation,
                writer: r.writer.as_deref(),
            })
            .collect();
        let verdict = decide::restored(
            kind,
            &self.config.planner.namespace,
            &restored,
            changes.backed_off.iter().map(|(_, until)| *until),
            self.memory.fights.in_fight(&format!("{kind} ")),
            self.config.fight.window,
            Instant::now(),
        );
        self.follow(verdict).await
    }
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
            Effect::Refused(label) => metrics.refused(label),
            Effect::CountError(label) => metrics.count_error(label),
        }
    }
}
