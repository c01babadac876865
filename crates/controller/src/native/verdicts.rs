//! The native cure's probes in tasks (one at a time per Service) and their verdicts taken
//! into the record at the next reconcile.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hairpin_planner::native::{IpModeWas, NativeRecord, ProbeState};
use hairpin_planner::{ClusterSnapshot, ObjectRef, Plan};

use super::probe::{
    Attempt, Baseline, Fingerprints, Observer, ProbeTarget, ProbeVerdict, Proof, baseline,
    prove_from, targets,
};
use super::state::{self, Now, backoff, forced_native};
use super::{Finished, NativeCurer};
use crate::Error;
use crate::metrics::ProbeLabels;
use crate::report::reason;

impl NativeCurer<'_> {
    /// The probe targets of `service`'s `ips`, and an observer counting `phase` attempts.
    pub(super) fn probe_setup(
        &self,
        plan: &Plan,
        service: &ObjectRef,
        ips: &[IpModeWas],
        phase: &'static str,
    ) -> Option<(Vec<ProbeTarget>, Observer)> {
        let lb = plan
            .load_balancers
            .iter()
            .find(|lb| lb.load_balancer.service == *service)?;
        let metrics = self.ctx.metrics.clone();
        let observer: Observer = Arc::new(move |attempt: &Attempt, took: Duration| {
            metrics
                .native_probes
                .get_or_create(&ProbeLabels {
                    phase: phase.to_owned(),
                    outcome: attempt.label().to_owned(),
                })
                .inc();
            metrics.native_probe_duration.observe(took.as_secs_f64());
        });
        Some((targets(lb, ips), observer))
    }

    /// Runs `work` for `service` in a task (one at a time per Service); its result is taken
    /// at the next reconcile, which it triggers.
    pub(super) fn spawn(
        &mut self,
        service: &ObjectRef,
        work: impl Future<Output = Finished> + Send + 'static,
    ) {
        self.probes.spawn(service.to_string(), work);
    }

    /// Proves the cure of `service`'s `ips` in a task ([`prove`]).
    pub(super) fn start_probe(
        &mut self,
        plan: &Plan,
        service: &ObjectRef,
        uid: &str,
        ips: &[IpModeWas],
        proof: Proof,
        receiver_in_record: Fingerprints,
    ) {
        if self.probes.running.contains_key(&service.to_string()) {
            return;
        }
        let Some((targets, observer)) = self.probe_setup(plan, service, ips, "proof") else {
            return;
        };
        let params = self.params.clone();
        let uid = uid.to_owned();
        // What answered through the receiver's own path before this write.
        let receiver = match proof {
            Proof::AfterWrite => self
                .mem
                .receivers
                .get(&service.to_string())
                .cloned()
                .unwrap_or_default(),
            // A cure probed again: what the baseline recorded before the write, in the record.
            Proof::Again => receiver_in_record,
        };
        self.spawn(service, async move {
            let verdict = prove_from(targets, &params, Some(observer), proof, &receiver).await;
            Finished::Proof { uid, verdict }
        });
    }

    pub(super) fn start_baseline(
        &mut self,
        plan: &Plan,
        service: &ObjectRef,
        uid: &str,
        ips: &[IpModeWas],
    ) {
        if self.probes.running.contains_key(&service.to_string()) {
            return;
        }
        let Some((targets, observer)) = self.probe_setup(plan, service, ips, "baseline") else {
            return;
        };
        let params = self.params.clone();
        let uid = uid.to_owned();
        let ips = ips.to_vec();
        tracing::debug!(service = %service, "probing without a header before any change");
        self.spawn(service, async move {
            let baseline = baseline(&targets, &params, Some(observer)).await;
            Finished::Baseline { uid, ips, baseline }
        });
    }

    /// The finished probes' verdicts into the record.
    pub(super) async fn take_verdicts(
        &mut self,
        record: &mut NativeRecord,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
    ) -> Result<(), Error> {
        let verdicts = std::mem::take(&mut self.mem.verdicts);
        for (key, finished) in verdicts {
            self.probes.running.remove(&key);
            let Some((namespace, name)) = key.split_once('/') else {
                continue;
            };
            let service = ObjectRef::new(namespace, name);
            match finished {
                Finished::Baseline { uid, ips, baseline } => {
                    self.take_baseline(record, plan, &service, &uid, ips, baseline)
                        .await;
                }
                Finished::Proof { uid, verdict } => {
                    self.take_proof(record, plan, snapshot, &service, &uid, verdict)
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// The baseline's verdict: shown, the write may go ahead (at the next reconcile, with the
    /// plan's current IPs); answered, the entry says `not-needed`; unclear, `failed`. Neither
    /// writes the status.
    pub(super) async fn take_baseline(
        &mut self,
        record: &mut NativeRecord,
        plan: &Plan,
        service: &ObjectRef,
        uid: &str,
        ips: Vec<IpModeWas>,
        baseline: Baseline,
    ) {
        let key = service.to_string();
        let (probe_state, why, reason, verdict) = match baseline {
            Baseline::Shown {
                unreachable,
                receiver,
            } => {
                if receiver.is_empty() {
                    tracing::info!(service = %key, "the receiver did not answer through its header path: the proof cannot tell it from another answerer");
                }
                self.mem.receivers.insert(key.clone(), receiver);
                let left_out: Vec<String> =
                    unreachable.iter().map(|(ip, _)| ip.to_string()).collect();
                for (ip, why) in &unreachable {
                    tracing::info!(service = %key, ip = %ip, why = %why, "an IP the controller cannot reach is left out of the native cure: it stays VIP, its names on the DNS cure");
                }
                tracing::info!(service = %key, "a request without a header went unanswered: the problem is shown; setting ipMode: Proxy");
                self.mem
                    .shown
                    .insert(key, (uid.to_owned(), Instant::now(), left_out));
                return;
            }
            // Forced native: only an answer stops it (the cure would change nothing).
            Baseline::Unclear(why) if forced_native(plan, service) => {
                tracing::warn!(service = %key, why = %why, "the problem is not shown; ipMode: Proxy set anyway (--cure native)");
                self.mem
                    .shown
                    .insert(key, (uid.to_owned(), Instant::now(), Vec::new()));
                return;
            }
            Baseline::NotNeeded(why) => (
                ProbeState::NotNeeded,
                why,
                reason::NATIVE_NOT_NEEDED,
                "not-needed",
            ),
            Baseline::Unclear(why) => (
                ProbeState::Failed,
                why,
                reason::NATIVE_UNPROVABLE,
                "unprovable",
            ),
        };
        let data_plane = &self.mem.data_plane.0;
        let failures = state::baseline_verdict(
            record,
            &key,
            uid,
            ips,
            probe_state,
            &why,
            data_plane,
            &Now::read(),
        );
        self.ctx.metrics.native_verdict(verdict);
        let note = if probe_state == ProbeState::NotNeeded {
            tracing::info!(service = %key, why = %why, "native cure not needed; nothing written");
            format!(
                "not needed: {why}; hairpin wrote no ipMode (the DNS cure stays); checked again after {:?}",
                self.params.retry
            )
        } else {
            tracing::warn!(service = %key, why = %why, "native cure cannot be proven; nothing written");
            format!(
                "native cure not tried: {why}; hairpin wrote no ipMode (the DNS cure stays); tried again after {:?}",
                backoff(self.params, failures)
            )
        };
        let warning = probe_state == ProbeState::Failed;
        self.on_service(service, uid, warning, reason, note).await;
    }

    /// A proof's verdict: proven (the DNS rules go at the next plan), or not (the status goes
    /// back at once unless native is forced, and the next try waits its backoff).
    pub(super) async fn take_proof(
        &mut self,
        record: &mut NativeRecord,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
        service: &ObjectRef,
        uid: &str,
        verdict: ProbeVerdict,
    ) -> Result<(), Error> {
        let key = service.to_string();
        let data_plane = &self.mem.data_plane.0;
        let now = Now::read();
        let Some((failures, original)) =
            state::proof_verdict(record, &key, uid, &verdict, data_plane, &now)
        else {
            return Ok(());
        };
        if verdict.proven {
            self.ctx.metrics.native_verdict("proven");
            tracing::info!(service = %key, took = ?verdict.took, detail = %verdict.detail, "native cure proven");
            let note = format!(
                "ipMode: Proxy is honoured: in-cluster traffic to the load balancer crosses it ({:.1} s after the write: {}); its DNS rules are removed",
                verdict.took.as_secs_f64(),
                verdict.detail
            );
            self.on_service(service, uid, false, reason::NATIVE_PROVEN, note)
                .await;
            return Ok(());
        }
        self.ctx.metrics.native_verdict("failed");
        if forced_native(plan, service) {
            tracing::warn!(service = %key, detail = %verdict.detail, "native cure not proven; kept (--cure native)");
            let note = format!(
                "ipMode: Proxy was not honoured ({}), and it stays: --cure native (flag or the Service's annotation) keeps it; in-cluster clients of these names may be short-circuited without a header, and the load balancer has no DNS cure",
                verdict.detail
            );
            self.on_service(service, uid, true, reason::NATIVE_KEPT_UNPROVEN, note)
                .await;
            return Ok(());
        }
        tracing::warn!(service = %key, detail = %verdict.detail, definite = verdict.definite, "native cure not proven; ipMode put back, DNS cure kept");
        let within = if verdict.definite {
            format!(
                "(a definite failure, after {:.1} s)",
                verdict.took.as_secs_f64()
            )
        } else {
            format!("within {:?}", self.params.deadline)
        };
        let why = format!(
            "ipMode: Proxy was not honoured {within} (kube-proxy older than 1.30, a CNI that ignores ipMode, or a load balancer that does not answer its own backends): {}; ipMode put back, the DNS cure stays; tried again after {:?}",
            verdict.detail,
            backoff(self.params, failures)
        );
        if snapshot
            .service(&service.namespace, &service.name)
            .is_some()
        {
            self.put_back(record, service, uid, &original, &why).await;
        }
        Ok(())
    }
}
