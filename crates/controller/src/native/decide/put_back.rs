//! `ipMode` put back as it was (after a failed cure, a dropped write, a cure no longer
//! wanted), decided without a client, and kept at until the API server's answer shows it
//! (issue 45 item 2): a refusal is tried again with backoff and reported meanwhile.

use hairpin_planner::ObjectRef;
use hairpin_planner::escape;
use hairpin_planner::native::{IpModeWas, NativeRecord};

use super::super::memory::NativeMemory;
use super::super::state::{self, Now, fight_target};
use super::{Cx, Metric, Step, publish};
use crate::report::reason;

/// A put-back of `service`'s `ipMode`s to `original` (only where still `Proxy`), read back.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PutBack {
    pub service: ObjectRef,
    pub uid: String,
    pub original: Vec<IpModeWas>,
    /// Why, for the Events.
    pub why: String,
    /// The record's entry goes once it is applied (a cure no longer wanted).
    pub forget: bool,
}

/// What the API server answered to a [`PutBack`].
#[derive(Debug, PartialEq)]
pub(crate) enum Restored {
    /// Written, and the answer shows it.
    Applied,
    /// Written, but the answer still says `Proxy`.
    NotApplied,
    /// Nothing left to put back, or the Service is gone.
    Nothing,
    /// A 409: another writer changed the status since it was read.
    Conflict,
    /// Refused with this error.
    Refused(String),
}

/// The put-back of `service` when it is due: a refused one waits its backoff
/// ([`state::put_back_wait`]); `None` until then.
pub(crate) fn step(
    cx: &Cx<'_>,
    (service, uid): (&ObjectRef, &str),
    original: &[IpModeWas],
    why: &str,
    forget: bool,
    now: &Now,
) -> Option<Step> {
    let key = service.to_string();
    if cx
        .mem
        .put_backs
        .get(&key)
        .is_some_and(|(_, next)| now.at < *next)
    {
        return None;
    }
    Some(Step::PutBack(PutBack {
        service: service.clone(),
        uid: uid.to_owned(),
        original: original.to_vec(),
        why: why.to_owned(),
        forget,
    }))
}

/// What follows the API server's answer to `put_back`: applied (or nothing left to put
/// back), the entry's pending note goes (and the entry, when `forget`); else it is tried
/// again, backing off, while the entry of `record` says why
/// ([`hairpin_planner::native::NativeEntry::put_back`]), a Warning Event too, and the metric
/// `ip_mode_put_backs_pending` counts it.
pub(crate) fn after(
    cx: &mut Cx<'_>,
    record: &mut NativeRecord,
    put_back: &PutBack,
    outcome: Restored,
    now: &Now,
) -> Vec<Step> {
    let PutBack {
        service, uid, why, ..
    } = put_back;
    let key = service.to_string();
    let mut steps = Vec::new();
    let refused = match outcome {
        Restored::Applied => {
            steps.push(Step::Metric(Metric::IpModeWrite("restore")));
            // Not a revert of hairpin's value: the fight count starts over.
            cx.fights.written(&fight_target(service), None, now.at);
            tracing::info!(service = %service, why, "ipMode put back");
            let note = format!("hairpin put ipMode back as it was: {why}");
            steps.push(publish(service, uid, true, reason::IP_MODE_RESTORED, note));
            None
        }
        Restored::NotApplied => {
            steps.push(Step::Metric(Metric::IpModeWrite("restore")));
            Some("the API server's answer still says Proxy (an admission webhook or another writer?)".to_owned())
        }
        Restored::Nothing => None,
        Restored::Conflict => Some(
            "the API server answered 409 Conflict (another writer changed the status since it was read)"
                .to_owned(),
        ),
        Restored::Refused(err) => Some(format!(
            "the API server refused it: {}",
            escape::text(&err)
        )),
    };
    let Some(refused) = refused else {
        cx.mem.put_backs.remove(&key);
        state::put_back_done(record, &key);
        steps.push(pending(cx.mem));
        if put_back.forget {
            record.load_balancers.remove(&key);
        }
        return steps;
    };
    let refusals = cx.mem.put_backs.get(&key).map_or(0, |(n, _)| *n) + 1;
    let wait = state::put_back_wait(refusals);
    cx.mem
        .put_backs
        .insert(key.clone(), (refusals, now.at + wait));
    state::put_back_pending(record, &key, &refused);
    steps.push(pending(cx.mem));
    tracing::warn!(service = %service, refusals, retry_in = ?wait, why = %refused, "ipMode put back, not applied");
    let note = format!(
        "hairpin put ipMode back ({why}), but {refused}; ipMode: Proxy is still on the status: tried again in {wait:?} ({refusals} refused so far)"
    );
    steps.push(publish(
        service,
        uid,
        true,
        reason::IP_MODE_NOT_RESTORED,
        note,
    ));
    steps
}

/// The put-backs not applied yet, for the metric.
fn pending(mem: &NativeMemory) -> Step {
    let pending = i64::try_from(mem.put_backs.len()).unwrap_or(i64::MAX);
    Step::Metric(Metric::PutBacksPending(pending))
}
