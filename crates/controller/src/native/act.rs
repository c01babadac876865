//! The native cure's executor for one reconcile ([`NativeCurer`]): it reads the record, asks
//! [`decide`](super::decide) for each phase's steps and executes them, feeding each write's
//! answer back to the pure `after` of its kind. It chooses nothing: no state, no Event, no
//! text, no metric. Its executors are small: the record write, the `ipMode` status write and
//! put-back (read back), the probe start, an Event, a metric.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hairpin_planner::native::{IP_MODE_PROXY, NATIVE_KEY, NativeRecord};
use hairpin_planner::{ClusterSnapshot, Plan};

use super::decide::{
    self, Cx, Metric, PutBack, Restored, SetOutcome, SetProxy, Step, probe_targets,
};
use super::memory::NativeMemory;
use super::probe::{Attempt, Observer, baseline, prove_from};
use super::sensors::NativeSensors;
use super::state::{self, Now, earliest};
use super::status::{Written, restore_ip_modes, write_ip_modes};
use super::{Finished, NativeParams};
use crate::Error;
use crate::apply::write_key;
use crate::context::Context;
use crate::edits::KeyEdit;
use crate::error::{is_conflict, is_not_found};
use crate::fight::Fights;
use crate::metrics::{Metrics, ProbeLabels, WriterLabels};
use crate::report::object_ref;

/// What the steps of one reconcile are decided from: the plan, the snapshot it was made
/// from, and the API server's version.
type Scene<'s> = (&'s Plan, &'s ClusterSnapshot, &'s str);

/// The native cure's executor for one reconcile: its state is the loop's memory
/// ([`NativeMemory`], and the write fights over `ipMode`), its probes run under the loop's
/// sensors ([`NativeSensors`]).
pub(crate) struct NativeCurer<'a> {
    /// The loop's client, Events, metrics, planner settings and change signal.
    ctx: &'a Context,
    params: &'a NativeParams,
    /// What the cure remembers between reconciles.
    mem: &'a mut NativeMemory,
    /// The loop's write fights (those over `ipMode` among them).
    fights: &'a mut Fights,
    /// The probes running.
    probes: &'a mut NativeSensors,
}

impl<'a> NativeCurer<'a> {
    /// The executor of one reconcile, over the loop's memory and sensors.
    pub(crate) fn new(
        ctx: &'a Context,
        params: &'a NativeParams,
        mem: &'a mut NativeMemory,
        fights: &'a mut Fights,
        probes: &'a mut NativeSensors,
    ) -> Self {
        Self {
            ctx,
            params,
            mem,
            fights,
            probes,
        }
    }

    /// What the decisions read and change.
    fn cx<'b>(&'b mut self, (plan, snapshot, server): Scene<'b>) -> Cx<'b> {
        Cx {
            params: self.params,
            mem: self.mem,
            fights: self.fights,
            plan,
            snapshot,
            server,
        }
    }

    /// The plan's status writes, the probes' verdicts and the record, phase by phase
    /// ([`decide`](super::decide)). Returns when to look again (a probe running, a failed
    /// cure due for another try).
    pub(crate) async fn apply(
        &mut self,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
    ) -> Result<Option<Instant>, Error> {
        let Ok(before) = NativeRecord::read(snapshot, &self.ctx.planner) else {
            // The plan warned; nothing is written while the record is not hairpin's.
            return Ok(None);
        };
        if let Some(wait) = decide::lagging(self.mem, self.params, &before, Instant::now()) {
            return Ok(Some(wait));
        }
        let mut record = before.clone();
        // The API server's version matters only to a cure recorded or planned: without one,
        // no `/version` read.
        let server = if decide::native(&before, plan) {
            self.server_version().await
        } else {
            String::new()
        };
        let scene = (plan, snapshot, server.as_str());
        let (distrusted, steps) = decide::begin(&mut self.cx(scene), &mut record, &Now::read());
        self.run(steps, &mut record, scene).await?;
        let (steps, reports_due) =
            decide::node_reports(&mut self.cx(scene), &mut record, &Now::read());
        self.run(steps, &mut record, scene).await?;
        let data_plane = &self.mem.data_plane.0;
        let now = Now::read();
        let mut requeue =
            state::mark_due(self.params, data_plane, plan, &mut record, &server, &now);
        for action in &plan.native_actions {
            let now = Now::read();
            let (steps, wait) = decide::action(&mut self.cx(scene), &mut record, action, &now);
            requeue = earliest(requeue, wait);
            self.run(steps, &mut record, scene).await?;
        }
        let (steps, settling) =
            decide::reprobes(&self.cx(scene), &record, &distrusted, &Now::read());
        self.run(steps, &mut record, scene).await?;
        self.write_record(&record, &before).await?;
        let probing = !self.probes.running.is_empty();
        let due = (settling, reports_due);
        Ok(decide::requeue(
            &self.cx(scene),
            probing,
            requeue,
            due,
            Instant::now(),
        ))
    }

    /// Executes `steps` in order; a write's answer is folded into `record` and the memory by
    /// its `after`, whose steps come next.
    async fn run(
        &mut self,
        steps: Vec<Step>,
        record: &mut NativeRecord,
        scene: Scene<'_>,
    ) -> Result<(), Error> {
        let mut queue = VecDeque::from(steps);
        while let Some(step) = queue.pop_front() {
            let then = match step {
                Step::SetProxy(set) => {
                    let outcome = self.set_proxy(&set).await?;
                    let now = Now::read();
                    decide::set::after(&mut self.cx(scene), record, &set, outcome, &now)
                }
                Step::PutBack(put_back) => {
                    let outcome = self.restore(&put_back).await;
                    let now = Now::read();
                    decide::put_back::after(&mut self.cx(scene), record, &put_back, outcome, &now)
                }
                step => {
                    self.execute(step, scene.0).await;
                    Vec::new()
                }
            };
            for step in then.into_iter().rev() {
                queue.push_front(step);
            }
        }
        Ok(())
    }

    /// One step that needs no answer: an Event, a metric, a probe started or stopped.
    async fn execute(&mut self, step: Step, plan: &Plan) {
        match step {
            Step::Publish {
                service,
                uid,
                warning,
                reason,
                note,
            } => {
                let regarding = object_ref("Service", &service.namespace, &service.name, Some(uid));
                self.ctx
                    .events
                    .publish(&regarding, warning, reason, note)
                    .await;
            }
            Step::Metric(metric) => count(&self.ctx.metrics, metric),
            Step::StopProbe(key) => self.probes.stop(&key),
            Step::Baseline { service, uid, ips } => {
                let Some(targets) = probe_targets(plan, &service, &ips) else {
                    return;
                };
                let (params, observer) = (self.params.clone(), self.observer("baseline"));
                self.probes.spawn(service.to_string(), async move {
                    let baseline = baseline(&targets, &params, Some(observer)).await;
                    Finished::Baseline { uid, ips, baseline }
                });
            }
            Step::Prove {
                service,
                uid,
                ips,
                proof,
                receiver,
            } => {
                let Some(targets) = probe_targets(plan, &service, &ips) else {
                    return;
                };
                let (params, observer) = (self.params.clone(), self.observer("proof"));
                self.probes.spawn(service.to_string(), async move {
                    let verdict =
                        prove_from(targets, &params, Some(observer), proof, &receiver).await;
                    Finished::Proof { uid, verdict }
                });
            }
            Step::SetProxy(_) | Step::PutBack(_) => {}
        }
    }

    /// An observer counting a probe's `phase` attempts.
    fn observer(&self, phase: &'static str) -> Observer {
        let metrics = self.ctx.metrics.clone();
        Arc::new(move |attempt: &Attempt, took: Duration| {
            metrics
                .native_probes
                .get_or_create(&ProbeLabels {
                    phase: phase.to_owned(),
                    outcome: attempt.label().to_owned(),
                })
                .inc();
            metrics.native_probe_duration.observe(took.as_secs_f64());
        })
    }

    /// The record, then `ipMode: Proxy` on the status, read back.
    async fn set_proxy(&mut self, set: &SetProxy) -> Result<SetOutcome, Error> {
        self.write_record(&set.record, &NativeRecord::default())
            .await?;
        let modes: BTreeMap<String, Option<String>> = set
            .ips
            .iter()
            .map(|was| (was.ip.clone(), Some(IP_MODE_PROXY.to_owned())))
            .collect();
        Ok(
            match write_ip_modes(&self.ctx.client, &set.service, &set.uid, &modes).await {
                Ok(Written::Applied(_)) => SetOutcome::Applied,
                Ok(Written::Nothing) => SetOutcome::Nothing,
                Ok(Written::NotApplied(stored)) => SetOutcome::Dropped {
                    stored,
                    version: self.server_version().await,
                },
                // Another writer changed the status between the read and the write.
                Err(err) if is_conflict(&err) || is_not_found(&err) => SetOutcome::Nothing,
                Err(err) => {
                    let what = format!("set ipMode on Service {}", set.service);
                    return Err(Error::kube(what, err));
                }
            },
        )
    }

    /// Each IP's `ipMode` put back as it was (only where it is still `Proxy`), read back.
    async fn restore(&self, put_back: &PutBack) -> Restored {
        let modes: BTreeMap<String, Option<String>> = put_back
            .original
            .iter()
            .map(|was| (was.ip.clone(), was.ip_mode.clone()))
            .collect();
        let (service, uid) = (&put_back.service, &put_back.uid);
        match restore_ip_modes(&self.ctx.client, service, uid, &modes).await {
            Ok(Written::Applied(_)) => Restored::Applied,
            Ok(Written::NotApplied(_)) => Restored::NotApplied,
            Ok(Written::Nothing) => Restored::Nothing,
            Err(err) if is_not_found(&err) => Restored::Nothing,
            Err(err) if is_conflict(&err) => Restored::Conflict,
            Err(err) => Restored::Refused(err.to_string()),
        }
    }

    /// Writes the record when it differs from `before` (the snapshot's).
    async fn write_record(
        &mut self,
        record: &NativeRecord,
        before: &NativeRecord,
    ) -> Result<(), Error> {
        if record == before {
            return Ok(());
        }
        let value = (!record.load_balancers.is_empty()).then(|| record.to_json());
        let edit = KeyEdit {
            ours_only: true,
            ..KeyEdit::set(
                &self.ctx.planner.namespace,
                &self.ctx.planner.native_config_map,
                NATIVE_KEY,
                value,
            )
        };
        write_key(&self.ctx.client, &edit).await?;
        decide::written(self.mem, record, Instant::now());
        Ok(())
    }

    /// The API server's `gitVersion`, read again when older than `version_every` (empty when
    /// it cannot be read).
    async fn server_version(&mut self) -> String {
        if let Some((version, at)) = &self.mem.server_version
            && at.elapsed() < self.params.version_every
        {
            return version.clone();
        }
        let version = match self.ctx.client.apiserver_version().await {
            Ok(info) => info.git_version,
            Err(err) => {
                tracing::debug!(error = %err, "cannot read the API server's version");
                return self
                    .mem
                    .server_version
                    .as_ref()
                    .map(|(v, _)| v.clone())
                    .unwrap_or_default();
            }
        };
        self.mem.server_version = Some((version.clone(), Instant::now()));
        version
    }
}

/// A metric of the native cure moves.
fn count(metrics: &Metrics, metric: Metric) {
    match metric {
        Metric::Verdict(verdict) => metrics.native_verdict(verdict),
        Metric::IpModeWrite(kind) => metrics.ip_mode_write(kind),
        Metric::Revert(writer) => {
            metrics
                .ip_mode_reverts
                .get_or_create(&WriterLabels { writer })
                .inc();
        }
        Metric::ReassertWindow(seconds) => metrics.ip_mode_reassert_window.observe(seconds),
        Metric::PutBacksPending(pending) => {
            metrics.ip_mode_put_backs_pending.set(pending);
        }
    }
}
