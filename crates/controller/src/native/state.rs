//! The native cure's state machine, pure: from the record, the plan, the data plane and the
//! clock to the record's next states and what to do (probe, write, wait). No client, no I/O.

use std::time::{Duration, Instant};

use hairpin_planner::native::{NativeEntry, NativeRecord, ProbeState};
use hairpin_planner::{ObjectRef, Plan};
use k8s_openapi::jiff::Timestamp;

use super::{NativeCurer, NativeParams};

pub(super) fn now_rfc3339() -> String {
    Timestamp::now().to_string()
}

/// How long ago `rfc3339` was (`None`: unreadable, or in the future).
pub(super) fn seconds_since(rfc3339: &str) -> Option<Duration> {
    let then: Timestamp = rfc3339.parse().ok()?;
    Duration::try_from(Timestamp::now().duration_since(then)).ok()
}

/// The wait after the `failures`-th failed attempt in a row: `retry`, doubling, capped.
pub fn backoff(params: &NativeParams, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    params
        .retry
        .saturating_mul(1u32 << doublings)
        .min(params.retry_cap.max(params.retry))
}

/// The target of the fight guard for a Service's `ipMode`.
pub(super) fn fight_target(service: &ObjectRef) -> String {
    format!("Service {service} ipMode")
}

/// A new record entry: `probing`, since now.
pub(super) fn new_entry(uid: &str) -> NativeEntry {
    NativeEntry {
        uid: uid.to_owned(),
        original: Vec::new(),
        state: ProbeState::Probing,
        since: now_rfc3339(),
        reason: String::new(),
        data_plane: String::new(),
        failures: 0,
        server_version: String::new(),
        due: false,
    }
}

pub(super) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The load balancer's cure is forced to native (flag or annotation): a failed probe is
/// reported, never acted on.
pub(super) fn forced_native(plan: &Plan, service: &ObjectRef) -> bool {
    plan.cures
        .iter()
        .any(|c| c.service == *service && c.mode == hairpin_planner::CureMode::Native)
}

impl NativeCurer {
    /// A new leader (or a restarted controller) trusts no proven cure it did not probe
    /// itself: each goes back to `probing` (the plan brings its DNS rules back) and is probed
    /// again at once; proven again, the DNS rules go.
    pub(super) fn distrust_at_start(&mut self, plan: &Plan, record: &mut NativeRecord) {
        for (key, entry) in &mut record.load_balancers {
            let Some((namespace, name)) = key.split_once('/') else {
                continue;
            };
            if entry.state != ProbeState::Proven
                || forced_native(plan, &ObjectRef::new(namespace, name))
            {
                continue;
            }
            tracing::info!(service = %key, "a proven native cure is probed again at the controller's start before it is trusted");
            entry.state = ProbeState::Probing;
            entry.since = now_rfc3339();
            entry.reason = format!(
                "probed again at the controller's start before it is trusted (was: {})",
                entry.reason
            );
        }
    }

    /// Marks `due` the entries whose wait is over (the next plan proposes the cure again):
    /// a `failed` one after its backoff, or at once when the data plane changed since (the
    /// backoff starts over); a `not-needed` one after `retry`; an `unsupported` one once the
    /// API server's version changed. Returns when the next one will be due.
    pub(super) fn mark_due(
        &self,
        plan: &Plan,
        record: &mut NativeRecord,
        server: &str,
    ) -> Option<Instant> {
        let mut next = None;
        for (key, entry) in &mut record.load_balancers {
            let Some((namespace, name)) = key.split_once('/') else {
                continue;
            };
            if entry.due || forced_native(plan, &ObjectRef::new(namespace, name)) {
                continue;
            }
            let wait = match entry.state {
                ProbeState::Failed => {
                    let current = &self.data_plane.0;
                    if !entry.data_plane.is_empty()
                        && !current.is_empty()
                        && entry.data_plane != *current
                    {
                        entry.failures = 0;
                        Duration::ZERO
                    } else {
                        backoff(&self.params, entry.failures)
                    }
                }
                ProbeState::NotNeeded => self.params.retry,
                ProbeState::Unsupported => {
                    entry.due = !server.is_empty() && server != entry.server_version;
                    // Its version is read again then.
                    next = earliest(next, Some(Instant::now() + self.params.version_every));
                    continue;
                }
                ProbeState::Probing | ProbeState::Proven => continue,
            };
            let elapsed = seconds_since(&entry.since).unwrap_or(wait);
            if elapsed >= wait {
                entry.due = true;
            } else {
                next = earliest(next, Some(Instant::now() + (wait - elapsed)));
            }
        }
        next
    }

    /// Probes again every proven cure (of `auto`) whose verdict is older than `reprobe`, or was
    /// reached on another data plane than today's once the change is `settle` old (a kube-proxy
    /// or CNI upgrade may stop honouring `ipMode`); the status is left as it is meanwhile.
    /// Returns when a changed data plane will have settled, while it has not.
    ///
    /// A cure `probing` with no probe running here (this instance started, or became the
    /// leader, while its predecessor's probe ran; or a proven cure it does not trust yet) is
    /// probed too: otherwise it would stay `probing`, on the DNS cure, for good.
    pub(super) fn reprobe_due(&mut self, plan: &Plan, record: &NativeRecord) -> Option<Instant> {
        let reprobe = self.params.reprobe;
        let (data_plane, seen) = (&self.data_plane.0, self.data_plane.1);
        let settled_at = seen + self.params.settle;
        let mut settling = None;
        let due: Vec<(ObjectRef, NativeEntry)> = record
            .load_balancers
            .iter()
            .filter_map(|(key, e)| {
                let (namespace, name) = key.split_once('/')?;
                Some((ObjectRef::new(namespace, name), e.clone()))
            })
            .filter(|(service, e)| match e.state {
                ProbeState::Probing => !e.due,
                ProbeState::Proven if forced_native(plan, service) => false,
                ProbeState::Proven => {
                    let changed = !e.data_plane.is_empty()
                        && !data_plane.is_empty()
                        && e.data_plane != *data_plane;
                    if changed && Instant::now() < settled_at {
                        settling = Some(settled_at);
                    }
                    (changed && Instant::now() >= settled_at)
                        || seconds_since(&e.since).is_some_and(|s| s >= reprobe)
                }
                ProbeState::Failed | ProbeState::NotNeeded | ProbeState::Unsupported => false,
            })
            .collect();
        for (service, entry) in due {
            tracing::debug!(service = %service, state = ?entry.state, "probing a native cure");
            self.start_probe(plan, &service, &entry.uid, &entry.original);
        }
        settling
    }
}
