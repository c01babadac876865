//! The native cure's state machine, pure: from the record, the plan, the data plane, the
//! probes' verdicts and the clock ([`Now`]) to the record's next states and what to do next
//! (probe, write, wait). No client, no I/O: `decide` chooses the steps from it, and the
//! executor ([`super::NativeExecutor`]) executes them.

use std::time::{Duration, Instant};

use hairpin_planner::native::{IpModeWas, NativeEntry, NativeRecord, ProbeState};
use hairpin_planner::{ObjectRef, Plan};
use k8s_openapi::jiff::Timestamp;

use super::NativeParams;
use super::probe::ProbeVerdict;

/// The wait after the `failures`-th failed attempt in a row: `retry`, doubling, capped.
pub fn backoff(params: &NativeParams, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    params
        .retry
        .saturating_mul(1u32 << doublings)
        .min(params.retry_cap.max(params.retry))
}

/// The first wait before a refused put-back is tried again, doubling with each refusal.
const PUT_BACK_FIRST: Duration = Duration::from_millis(250);

/// The longest wait between two tries of a put-back.
const PUT_BACK_CAP: Duration = Duration::from_secs(30);

/// The wait after the `refusals`-th refused put-back in a row: short (a 409 is a race another
/// writer won, a webhook may relent), doubling, capped: `Proxy` left on a failed cure cuts the
/// names off for in-cluster clients until it goes.
pub(super) fn put_back_wait(refusals: u32) -> Duration {
    let doublings = refusals.saturating_sub(1).min(16);
    PUT_BACK_FIRST
        .saturating_mul(1u32 << doublings)
        .min(PUT_BACK_CAP)
}

/// A put-back of `key`'s `ipMode` was refused or not applied (`why`): the entry says so, and
/// its `Proxy` stays hairpin's until the API server's answer shows the put-back.
pub(super) fn put_back_pending(record: &mut NativeRecord, key: &str, why: &str) {
    if let Some(entry) = record.load_balancers.get_mut(key) {
        why.clone_into(&mut entry.put_back);
    }
}

/// The API server's answer shows `key`'s `ipMode` put back (or nothing was left to put back).
pub(super) fn put_back_done(record: &mut NativeRecord, key: &str) {
    if let Some(entry) = record.load_balancers.get_mut(key) {
        entry.put_back.clear();
    }
}

/// How the fight guard's targets for a Service's `ipMode` start (not `Service `: those are
/// hairpin's own Services).
pub(super) const FIGHT_PREFIX: &str = "ipMode ";

/// The target of the fight guard for a Service's `ipMode`.
pub(super) fn fight_target(service: &ObjectRef) -> String {
    format!("{FIGHT_PREFIX}Service {service}")
}

/// A new record entry: `probing`, since `now`.
fn new_entry_at(uid: &str, now: &Now) -> NativeEntry {
    NativeEntry {
        uid: uid.to_owned(),
        original: Vec::new(),
        state: ProbeState::Probing,
        since: now.rfc3339(),
        reason: String::new(),
        data_plane: String::new(),
        failures: 0,
        server_version: String::new(),
        due: false,
        skipped: Vec::new(),
        put_back: String::new(),
        probe: Default::default(),
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

/// The clock the state machine reads: monotonic for waits, wall for the record's `since`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Now {
    pub(super) at: Instant,
    pub(super) wall: Timestamp,
}

impl Now {
    /// The clocks now.
    pub(super) fn read() -> Self {
        Self {
            at: Instant::now(),
            wall: Timestamp::now(),
        }
    }

    /// How long ago `rfc3339` was (`None`: unreadable, or in the future).
    pub(super) fn since(&self, rfc3339: &str) -> Option<Duration> {
        let then: Timestamp = rfc3339.parse().ok()?;
        Duration::try_from(self.wall.duration_since(then)).ok()
    }

    fn rfc3339(&self) -> String {
        self.wall.to_string()
    }
}

/// Whether an entry reached on `then` was reached on another data plane than `now`'s.
fn changed(then: &str, now: &str) -> bool {
    !then.is_empty() && !now.is_empty() && then != now
}

/// The `namespace/name` key as a Service reference.
fn service_of(key: &str) -> Option<ObjectRef> {
    let (namespace, name) = key.split_once('/')?;
    Some(ObjectRef::new(namespace, name))
}

/// A new leader (or a restarted controller) trusts no proven cure it did not probe itself:
/// each goes back to `probing` (the plan brings its DNS rules back) and is probed again at
/// once; proven again, the DNS rules go. Returns the keys put back to `probing`.
pub(super) fn distrust(plan: &Plan, record: &mut NativeRecord, now: &Now) -> Vec<String> {
    let mut distrusted = Vec::new();
    for (key, entry) in &mut record.load_balancers {
        let Some(service) = service_of(key) else {
            continue;
        };
        if entry.state != ProbeState::Proven || forced_native(plan, &service) {
            continue;
        }
        entry.state = ProbeState::Probing;
        entry.since = now.rfc3339();
        entry.reason = format!(
            "probed again at the controller's start before it is trusted (was: {})",
            entry.reason
        );
        distrusted.push(key.clone());
    }
    distrusted
}

/// Marks `due` the entries whose wait is over (the next plan proposes the cure again): a
/// `failed` one after its backoff, or at once when the data plane changed since (the backoff
/// starts over); a `not-needed` one after `retry`; an `unsupported` one once the API server's
/// version (`server`) changed. Returns when the next one will be due.
pub(super) fn mark_due(
    params: &NativeParams,
    data_plane: &str,
    plan: &Plan,
    record: &mut NativeRecord,
    server: &str,
    now: &Now,
) -> Option<Instant> {
    let mut next = None;
    for (key, entry) in &mut record.load_balancers {
        let Some(service) = service_of(key) else {
            continue;
        };
        if entry.due || forced_native(plan, &service) {
            continue;
        }
        let wait = match entry.state {
            ProbeState::Failed if changed(&entry.data_plane, data_plane) => {
                entry.failures = 0;
                Duration::ZERO
            }
            ProbeState::Failed => backoff(params, entry.failures),
            ProbeState::NotNeeded => params.retry,
            ProbeState::Unsupported => {
                entry.due = !server.is_empty() && server != entry.server_version;
                // Its version is read again then.
                next = earliest(next, Some(now.at + params.version_every));
                continue;
            }
            ProbeState::Probing | ProbeState::Proven => continue,
        };
        let elapsed = now.since(&entry.since).unwrap_or(wait);
        if elapsed >= wait {
            entry.due = true;
        } else {
            next = earliest(next, Some(now.at + (wait - elapsed)));
        }
    }
    next
}

/// The cures to probe again: every proven cure (of `auto`) whose verdict is older than
/// `reprobe`, or was reached on another data plane than today's once the change is `settle`
/// old (a kube-proxy or CNI upgrade may stop honouring `ipMode`); the status is left as it is
/// meanwhile (`data_plane`: today's, and since when it is seen). Also returns when a changed data plane will have settled, while it has not.
///
/// A cure `probing` with no probe running (this instance started, or became the leader, while
/// its predecessor's probe ran; or a proven cure it does not trust yet) is probed too:
/// otherwise it would stay `probing`, on the DNS cure, for good.
pub(super) fn reprobe_due(
    params: &NativeParams,
    (data_plane, seen): (&str, Instant),
    plan: &Plan,
    record: &NativeRecord,
    now: &Now,
) -> (Vec<(ObjectRef, NativeEntry)>, Option<Instant>) {
    let settled_at = seen + params.settle;
    let mut settling = None;
    let due = record
        .load_balancers
        .iter()
        .filter_map(|(key, e)| Some((service_of(key)?, e.clone())))
        .filter(|(service, e)| match e.state {
            ProbeState::Probing => !e.due,
            ProbeState::Proven if forced_native(plan, service) => false,
            ProbeState::Proven => {
                let changed = changed(&e.data_plane, data_plane);
                if changed && now.at < settled_at {
                    settling = Some(settled_at);
                }
                (changed && now.at >= settled_at)
                    || now.since(&e.since).is_some_and(|s| s >= params.reprobe)
            }
            ProbeState::Failed | ProbeState::NotNeeded | ProbeState::Unsupported => false,
        })
        .collect();
    (due, settling)
}

/// What to do with a plan's `SetProxy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SetStep {
    /// A verdict taken in this round already answered the plan's proposal.
    Skip,
    /// Write `Proxy` again on IPs the cure already had (another writer removed it).
    Reassert,
    /// A new attempt: the baseline must have shown the problem first.
    Attempt,
}

/// The step for a plan's `SetProxy` of `ips` on `key` (uid `uid`; `proven`: the plan says the
/// record holds a proven cure). An entry of another Service that had this name is dropped.
pub(super) fn set_step(
    record: &mut NativeRecord,
    key: &str,
    uid: &str,
    ips: &[IpModeWas],
    proven: bool,
) -> SetStep {
    if record.load_balancers.get(key).is_some_and(|e| e.uid != uid) {
        record.load_balancers.remove(key);
    }
    let existing = record.load_balancers.get(key);
    if existing.is_some_and(|e| {
        !e.due
            && matches!(
                e.state,
                ProbeState::NotNeeded | ProbeState::Unsupported | ProbeState::Failed
            )
    }) && !proven
    {
        return SetStep::Skip;
    }
    // Only IPs the cure already had are re-asserted; a new one (the address changed) is a new
    // attempt, proven first.
    let had_all = |e: &NativeEntry| {
        ips.iter()
            .all(|ip| e.original.iter().any(|o| o.ip == ip.ip))
    };
    let reassert = existing.is_some_and(|e| {
        !e.due && matches!(e.state, ProbeState::Probing | ProbeState::Proven) && had_all(e)
    }) || (proven && existing.is_none_or(had_all));
    if reassert {
        SetStep::Reassert
    } else {
        SetStep::Attempt
    }
}

/// The entry of `key` before `Proxy` is written on `ips`: a new attempt starts `probing` and
/// drops the IPs the status no longer has (`status_ips`: the address changed); every IP of
/// `ips` is remembered with its `ipMode` before.
pub(super) fn begin_write(
    record: &mut NativeRecord,
    key: &str,
    uid: &str,
    ips: &[IpModeWas],
    step: SetStep,
    status_ips: Option<&[&str]>,
    now: &Now,
) {
    let entry = record
        .load_balancers
        .entry(key.to_owned())
        .or_insert_with(|| new_entry_at(uid, now));
    if step == SetStep::Attempt {
        entry.state = ProbeState::Probing;
        entry.since = now.rfc3339();
        entry.reason.clear();
        entry.due = false;
        if let Some(current) = status_ips {
            entry
                .original
                .retain(|was| current.contains(&was.ip.as_str()));
        }
    }
    for was in ips {
        if !entry.original.iter().any(|o| o.ip == was.ip) {
            entry.original.push(was.clone());
        }
    }
}

/// A baseline that stopped the cure before any write: the entry of `key` says `state`
/// (`not-needed` or `failed`) with `why`. Returns its failures in a row.
#[allow(clippy::too_many_arguments)]
pub(super) fn baseline_verdict(
    record: &mut NativeRecord,
    key: &str,
    uid: &str,
    ips: Vec<IpModeWas>,
    state: ProbeState,
    why: &str,
    data_plane: &str,
    now: &Now,
) -> u32 {
    if record.load_balancers.get(key).is_some_and(|e| e.uid != uid) {
        record.load_balancers.remove(key);
    }
    let entry = record
        .load_balancers
        .entry(key.to_owned())
        .or_insert_with(|| new_entry_at(uid, now));
    if entry.original.is_empty() {
        entry.original = ips;
    }
    entry.state = state;
    entry.since = now.rfc3339();
    entry.reason = why.to_owned();
    entry.data_plane = data_plane.to_owned();
    entry.due = false;
    if state == ProbeState::Failed {
        entry.failures = entry.failures.saturating_add(1);
    }
    entry.failures
}

/// A proof's verdict into the entry of `key` (uid `uid`): `proven` or `failed`. `None` when
/// the entry is gone, another Service's, or already failed meanwhile (a fight); else its
/// failures in a row and the `ipMode`s to put back.
pub(super) fn proof_verdict(
    record: &mut NativeRecord,
    key: &str,
    uid: &str,
    verdict: &ProbeVerdict,
    data_plane: &str,
    now: &Now,
) -> Option<(u32, Vec<IpModeWas>)> {
    let entry = record.load_balancers.get_mut(key)?;
    if entry.uid != uid || entry.state == ProbeState::Failed {
        return None;
    }
    if verdict.proven {
        entry.failures = 0;
        entry.state = ProbeState::Proven;
        entry.reason.clone_from(&verdict.detail);
    } else {
        entry.failures = entry.failures.saturating_add(1);
        entry.state = ProbeState::Failed;
        entry.reason = format!("ipMode: Proxy was not honoured: {}", verdict.detail);
    }
    entry.since = now.rfc3339();
    entry.data_plane = data_plane.to_owned();
    entry.due = false;
    Some((entry.failures, entry.original.clone()))
}

/// A status fight stopped the cure: the entry of `key` goes `failed` with `why`.
pub(super) fn fight_lost(
    record: &mut NativeRecord,
    key: &str,
    why: &str,
    data_plane: &str,
    now: &Now,
) {
    if let Some(entry) = record.load_balancers.get_mut(key) {
        entry.state = ProbeState::Failed;
        entry.since = now.rfc3339();
        entry.reason = why.to_owned();
        entry.failures = entry.failures.saturating_add(1);
        entry.data_plane = data_plane.to_owned();
        entry.due = false;
    }
}

/// The API server dropped the `ipMode` written: the entry of `key` goes `unsupported` with
/// `why` and the server's `version`. Returns the `ipMode`s to put back.
pub(super) fn dropped(
    record: &mut NativeRecord,
    key: &str,
    why: &str,
    version: &str,
    now: &Now,
) -> Vec<IpModeWas> {
    let Some(entry) = record.load_balancers.get_mut(key) else {
        return Vec::new();
    };
    entry.state = ProbeState::Unsupported;
    entry.since = now.rfc3339();
    entry.reason = why.to_owned();
    entry.server_version = version.to_owned();
    entry.due = false;
    entry.original.clone()
}

#[cfg(test)]
mod tests;
