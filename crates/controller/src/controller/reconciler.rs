//! One reconcile: memory in, actions out. `plan = desired(snapshot)`; `actions =
//! decide(plan, memory, now)`, pure; `observed = act(actions)`, I/O only; `memory =
//! remember(memory, observed, now)`, pure; then what the writes found decides what follows
//! (`decide::after`, pure: the Events about a write, a revert, a fight), which is executed.
//! The Hairpin statuses are written by their own executor, the [`StatusWriter`], with what
//! the memory says of the DNS change; the native cure runs inside `act` ([`NativeRun`]): its
//! pure driver, over the memory's native part, hands out its steps one at a time (a
//! put-back's answer matters to the steps after it), and its executor executes each.
//! The loop's sensors, each waking it through the change signal: the native cure's (the
//! Nodes' and node agents' watches, the probes), read into the memory before `act`; the
//! propagation checks, read into the memory before the plan is made (`decide` reports what
//! they found: the Events, the propagation measured), and started and stopped as
//! `decide::checks` chooses from the statuses' objects (`remember_checks` keeps them); the
//! ownership resolver, whose answers are part of the snapshot the plan is made from.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hairpin_planner::{ClusterSnapshot, Plan};

use super::act::{self, Writers};
use super::decide::{self, CheckScene, Reports, Scene};
use super::memory::{Memory, remember, remember_checks};
use super::{ControllerConfig, StopFuture};
use crate::Error;
use crate::context::Context;
use crate::dns_endpoints::DnsEndpointWriter;
use crate::native::{NativeExecutor, NativeRun, NativeSensors};
use crate::ownership::OwnershipResolver;
use crate::propagation::Checks;
use crate::status::StatusWriter;
use crate::watch::Caches;

/// The leader's executors (which keep no state), its sensors and its [`Memory`].
pub(super) struct Reconciler {
    ctx: Arc<Context>,
    config: ControllerConfig,
    /// Everything the loop keeps between reconciles.
    memory: Memory,
    /// The Hairpin statuses.
    status: StatusWriter,
    /// The propagation checks (a sensor: each check wakes the loop as it ends, and its outcome
    /// is read into the memory), started and stopped by the statuses' step.
    checks: Checks,
    /// The `DNSEndpoint`s of `--dns-mode external-dns` (and their clean-up after a switch).
    dns_endpoints: DnsEndpointWriter,
    /// The native cure's sensors: the Nodes' and the node agents' watches, and its probes (a
    /// sensor each: each wakes the loop as it ends).
    sensors: NativeSensors,
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
            sensors: NativeSensors::new(ctx, &config.native),
            status: StatusWriter::new(ctx, config.propagation.cluster_dns),
            checks: Checks::new(ctx, config.propagation.clone()),
            ownership,
            ctx: ctx.clone(),
            config: config.clone(),
            memory: Memory::new(config.fight.clone()),
        }
    }

    /// One reconcile: memory in, actions out. Returns when to run again, if sooner than the
    /// resync.
    pub(super) async fn reconcile(&mut self, caches: &Caches) -> Result<Option<Instant>, Error> {
        let started = Instant::now();
        self.ctx.metrics.reconciles.inc();
        let (snapshot, plan) = match self.desired(caches) {
            Ok(planned) => planned,
            Err(wait) => return Ok(Some(wait)),
        };
        let (planner, recall) = (&self.config.planner, self.memory.recall());
        let mut actions = decide::actions(&plan, &snapshot, planner, recall, Instant::now());
        let Reports { effects, reported } = std::mem::take(&mut actions.intent.reports);
        self.sense(&plan, &snapshot);
        let mut observed = act::act(self.writers(), &mut actions, &plan, &snapshot).await;
        let memory = std::mem::take(&mut self.memory);
        let (memory, learnt) = remember(memory, reported, &actions, &mut observed, Instant::now());
        self.memory = memory;
        let scene = self.scene(&plan, &snapshot, Instant::now());
        let after = decide::after(&actions, &observed, &learnt, scene);
        act::execute(&self.ctx, after.effects).await;
        let elapsed = started.elapsed().as_secs_f64();
        self.ctx.metrics.reconcile_duration.observe(elapsed);
        act::execute(&self.ctx, effects).await;
        let statuses = self.statuses(&plan, &snapshot, caches).await;
        match observed.error {
            Some(err) => Err(err),
            None => statuses.map(|()| after.requeue),
        }
    }

    /// The native cure's sensors started (from the first cure recorded or planned on), and
    /// what they saw read into the memory.
    fn sense(&mut self, plan: &Plan, snapshot: &ClusterSnapshot) {
        let planner = &self.config.planner;
        self.sensors
            .start(crate::native::wanted(plan, snapshot, planner));
        self.sensors.read(&mut self.memory.native);
    }

    /// The executors of the writes.
    fn writers(&mut self) -> Writers<'_> {
        Writers {
            ctx: &self.ctx,
            native: NativeRun {
                executor: NativeExecutor::new(&self.ctx, &self.config.native, &mut self.sensors),
                params: &self.config.native,
                planner: &self.config.planner,
                mem: &mut self.memory.native,
                fights: &mut self.memory.fights,
            },
            endpoints: &self.dns_endpoints,
        }
    }

    /// What `decide::after` reads besides the actions and what they found.
    fn scene<'a>(
        &'a self,
        plan: &'a Plan,
        snapshot: &'a ClusterSnapshot,
        now: Instant,
    ) -> Scene<'a> {
        Scene {
            plan,
            snapshot,
            planner: &self.config.planner,
            window: self.config.fight.window,
            now,
        }
    }

    /// The plan, from the caches; or when to look again, when the receivers' ConfigMaps or
    /// the names' first answers are awaited.
    fn desired(&mut self, caches: &Caches) -> Result<(ClusterSnapshot, Plan), Instant> {
        // What the caches say of external-dns's CRD (a sensor), for the memory; and what the
        // propagation checks found (decide reports it).
        self.memory.dns_endpoints.crd = caches.dns_endpoints_served();
        self.checks.read(&mut self.memory.statuses.checks);
        let mut snapshot = caches.snapshot();
        // The Nodes (watched from the first native cure on), for the native cure's gate.
        snapshot.nodes = self.sensors.nodes();
        snapshot.node_probes = self.sensors.node_probes();
        // Do no harm: a receiver whose ConfigMap was just named (a new workload, a new
        // leader) is read before anything is planned for its load balancer; the watch wakes
        // the loop once it has listed.
        let waiting = caches.follow_receivers(&snapshot);
        if !waiting.is_empty() {
            tracing::debug!(waiting = %waiting.join(", "), "waiting for the receivers' ConfigMaps to list before planning");
            return Err(Instant::now() + Duration::from_millis(500));
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
                return Err(Instant::now() + Duration::from_secs(1));
            }
            self.memory.verified_once = true;
        }
        Ok((snapshot, plan))
    }

    /// The plan's warnings logged, and the Hairpin statuses written with what the memory says
    /// of the DNS change and the hairpin Services.
    async fn statuses(
        &mut self,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
        caches: &Caches,
    ) -> Result<(), Error> {
        for warning in &plan.warnings {
            tracing::warn!(subject = %warning.subject, "{}", warning.message);
        }
        let memory = &mut self.memory;
        let hairpins = caches.hairpins();
        let dns = &memory.dns_state;
        let Some(prepared) =
            (self.status).prepare(&mut memory.statuses, plan, snapshot, hairpins, dns)
        else {
            return Ok(());
        };
        // The propagation checks (a sensor), started and stopped as decide chose.
        let scene = CheckScene {
            plan,
            snapshot,
            planner: &self.config.planner,
            params: &self.config.propagation,
        };
        let checks = decide::checks(scene, &prepared, dns, &memory.statuses);
        remember_checks(&mut memory.statuses, &checks);
        self.checks.act(checks);
        let ready = |name: &str| caches.ready_endpoints(name);
        let backed_off = &memory.services_backed_off;
        (self.status)
            .write_all(&mut memory.statuses, prepared, plan, ready, dns, backed_off)
            .await?;
        let lbs = crate::status::load_balancers(plan);
        self.checks.retain(&mut memory.statuses.checks, &lbs);
        Ok(())
    }
}
