//! The native cure's executor ([`NativeExecutor`]): it executes one step and answers what
//! it found, nothing else. It chooses nothing: no phase, no state, no Event, no text, no
//! metric, and it keeps nothing; the steps and their order come from the pure driver, which
//! the loop ([`super::NativeRun`]) alternates with it. Its parts are small: the record write,
//! the `ipMode` status write and put-back (read back), the API server's version, the probe
//! start and stop, an Event, a metric.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hairpin_planner::native::{IP_MODE_PROXY, NATIVE_KEY, NativeRecord};

use super::decide::{Answer, Metric, PutBack, Restored, SetAnswer, SetProxy, Step};
use super::probe::{Attempt, Observer, baseline, prove_from};
use super::sensors::NativeSensors;
use super::status::{Written, restore_ip_modes, write_ip_modes};
use super::{Finished, NativeParams};
use crate::Error;
use crate::apply::write_key;
use crate::context::Context;
use crate::edits::KeyEdit;
use crate::error::{is_conflict, is_not_found};
use crate::metrics::{Metrics, ProbeLabels, WriterLabels};
use crate::report::object_ref;

/// The native cure's executor for one reconcile; its probes run under the loop's sensors
/// ([`NativeSensors`]).
pub(crate) struct NativeExecutor<'a> {
    /// The loop's client, Events, metrics and planner settings.
    ctx: &'a Context,
    /// The probes' settings.
    params: &'a NativeParams,
    /// The probes running.
    probes: &'a mut NativeSensors,
}

impl<'a> NativeExecutor<'a> {
    /// The executor of one reconcile, over the loop's sensors.
    pub(crate) fn new(
        ctx: &'a Context,
        params: &'a NativeParams,
        probes: &'a mut NativeSensors,
    ) -> Self {
        Self {
            ctx,
            params,
            probes,
        }
    }

    /// Executes `step`; returns what it found, for a step that asks for an answer. An error
    /// it cannot answer with (a record write failed, a status write refused other than by a
    /// conflict or a Service gone) ends the reconcile.
    pub(crate) async fn execute(&mut self, step: Step) -> Result<Option<Answer>, Error> {
        Ok(Some(match step {
            Step::ReadVersion => Answer::Version(self.server_version().await),
            Step::WriteRecord(record) => {
                self.write_record(&record).await?;
                Answer::RecordWritten
            }
            Step::SetProxy(set) => Answer::Set(self.set_proxy(&set).await?),
            Step::PutBack(put_back) => Answer::PutBack(self.restore(&put_back).await),
            Step::ProbesRunning => Answer::ProbesRunning(!self.probes.running.is_empty()),
            step => {
                self.fire(step).await;
                return Ok(None);
            }
        }))
    }

    /// One step that needs no answer: an Event, a metric, a probe started or stopped.
    async fn fire(&mut self, step: Step) {
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
            Step::Baseline {
                service,
                uid,
                ips,
                targets,
            } => {
                let Some(targets) = targets else {
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
                proof,
                receiver,
                targets,
            } => {
                let Some(targets) = targets else {
                    return;
                };
                let (params, observer) = (self.params.clone(), self.observer("proof"));
                self.probes.spawn(service.to_string(), async move {
                    let verdict =
                        prove_from(targets, &params, Some(observer), proof, &receiver).await;
                    Finished::Proof { uid, verdict }
                });
            }
            // Answered by `execute`.
            Step::SetProxy(_)
            | Step::PutBack(_)
            | Step::ReadVersion
            | Step::WriteRecord(_)
            | Step::ProbesRunning => {}
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

    /// `ipMode: Proxy` on the status, read back.
    async fn set_proxy(&self, set: &SetProxy) -> Result<SetAnswer, Error> {
        let modes: BTreeMap<String, Option<String>> = set
            .ips
            .iter()
            .map(|was| (was.ip.clone(), Some(IP_MODE_PROXY.to_owned())))
            .collect();
        Ok(
            match write_ip_modes(&self.ctx.client, &set.service, &set.uid, &modes).await {
                Ok(Written::Applied(_)) => SetAnswer::Applied,
                Ok(Written::Nothing) => SetAnswer::Unchanged,
                Ok(Written::NotApplied(stored)) => SetAnswer::Dropped(stored),
                Err(err) if is_conflict(&err) => SetAnswer::Conflict,
                Err(err) if is_not_found(&err) => SetAnswer::Gone,
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

    /// The record written (an empty one deletes its key).
    async fn write_record(&self, record: &NativeRecord) -> Result<(), Error> {
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
        Ok(())
    }

    /// The API server's `gitVersion` (`None`: it cannot be read).
    async fn server_version(&self) -> Option<String> {
        match self.ctx.client.apiserver_version().await {
            Ok(info) => Some(info.git_version),
            Err(err) => {
                tracing::debug!(error = %err, "cannot read the API server's version");
                None
            }
        }
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
