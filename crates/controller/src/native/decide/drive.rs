//! One reconcile's native steps in their order, decided without a client ([`Drive`]): the
//! phases of [`super`] one after the other, each phase's steps handed out one at a time, and
//! every answer an I/O step needs taken back as data ([`Answer`]): the API server's version,
//! the record written, what a status write or a put-back found (folded in by
//! [`set::after`] and [`put_back::after`], whose steps come next), and whether a probe still
//! runs. The executor ([`super::super::NativeExecutor`]) executes each step it is given and
//! answers; the loop that alternates the two chooses nothing ([`super::super::NativeRun`]).

use std::collections::VecDeque;
use std::time::Instant;

use hairpin_planner::native::{NativeRecord, RecordError};
use k8s_openapi::api::core::v1::Service;

use super::super::state::{self, Now, earliest};
use super::{
    Cx, PutBack, Restored, SetOutcome, SetProxy, Step, action, begin, lagging, native,
    node_reports, put_back, reprobes, requeue, set, written,
};

/// What the executor found for a step that asks for an answer.
#[derive(Debug)]
pub(crate) enum Answer {
    /// [`Step::ReadVersion`]: the API server's `gitVersion` (`None`: it could not be read).
    Version(Option<String>),
    /// [`Step::WriteRecord`]: the record is written.
    RecordWritten,
    /// [`Step::SetProxy`]: what the API server answered.
    Set(SetAnswer),
    /// [`Step::PutBack`]: what the API server answered.
    PutBack(Restored),
    /// [`Step::ProbesRunning`]: whether a probe still runs.
    ProbesRunning(bool),
}

/// What the API server answered to a [`Step::SetProxy`].
#[derive(Debug)]
pub(crate) enum SetAnswer {
    /// Written, and the answer holds `Proxy`.
    Applied,
    /// Nothing to change.
    Unchanged,
    /// Written, but the answer (the Service as stored) does not hold it.
    Dropped(Box<Service>),
    /// A 409: another writer changed the status between the read and the write.
    Conflict,
    /// The Service is gone.
    Gone,
}

/// What [`Drive::next`] says.
#[derive(Debug, PartialEq)]
pub(crate) enum Next {
    /// Execute this step, and answer it (when it asks for an answer).
    Step(Step),
    /// This reconcile's native step is over: when to look again.
    Done(Option<Instant>),
}

/// Where the driver is in the reconcile.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    /// Whether the snapshot shows the record written last; the API server's version.
    Start,
    /// [`begin`].
    Begin,
    /// [`node_reports`].
    NodeReports,
    /// [`state::mark_due`].
    MarkDue,
    /// [`action`] for the plan's native action of this index.
    Action(usize),
    /// [`reprobes`].
    Reprobes,
    /// The record written when it changed.
    Record,
    /// Whether a probe still runs, then [`requeue`].
    Probing,
    /// Over: when to look again.
    Done(Option<Instant>),
}

/// The step handed out whose answer is awaited.
#[derive(Debug)]
enum Waiting {
    /// The API server's version, for the phases.
    Version,
    /// The record of a [`SetProxy`], written before its status.
    SetRecord(SetProxy),
    /// The status write of a [`SetProxy`].
    Set(SetProxy),
    /// The API server's version, for a [`SetProxy`] whose `Proxy` the server dropped.
    SetVersion(SetProxy, Box<Service>),
    /// A put-back.
    PutBack(PutBack),
    /// The record at the end.
    Record,
    /// Whether a probe still runs.
    Probing,
}

/// One reconcile's native steps: the phase it is in, the record being built, the steps
/// decided and not handed out yet, and what the phases found for [`requeue`].
#[derive(Debug)]
pub(crate) struct Drive {
    phase: Phase,
    /// The record as the snapshot shows it.
    before: NativeRecord,
    /// The record this reconcile builds.
    record: NativeRecord,
    /// Steps decided, not handed out yet.
    queue: VecDeque<Step>,
    waiting: Option<Waiting>,
    /// The proven cures this instance distrusted at its start ([`begin`]).
    distrusted: Vec<String>,
    /// When a failed cure is due, or a new one may look at the Nodes again.
    requeue: Option<Instant>,
    /// When a node report is due a look ([`node_reports`]).
    reports_due: Option<Instant>,
    /// When a changed data plane will have settled ([`reprobes`]).
    settling: Option<Instant>,
}

impl Drive {
    /// The driver of one reconcile over the record the snapshot holds (`read`). A record
    /// hairpin cannot read leads to nothing (the plan warned): nothing is written while it
    /// is not hairpin's.
    pub(crate) fn new(read: Result<NativeRecord, RecordError>) -> Self {
        let (phase, before) = match read {
            Ok(record) => (Phase::Start, record),
            Err(_) => (Phase::Done(None), NativeRecord::default()),
        };
        Self {
            phase,
            record: before.clone(),
            before,
            queue: VecDeque::new(),
            waiting: None,
            distrusted: Vec::new(),
            requeue: None,
            reports_due: None,
            settling: None,
        }
    }

    /// The record as this reconcile has built it so far.
    #[cfg(test)]
    pub(crate) fn record(&self) -> &NativeRecord {
        &self.record
    }

    /// The next step, given the answer to the last one (`None` for a step that asks for
    /// none) at `now`; or, once over, when to look again.
    pub(crate) fn next(&mut self, cx: &mut Cx<'_>, answer: Option<Answer>, now: &Now) -> Next {
        if let Some(waiting) = self.waiting.take() {
            if let Some(step) = self.answered(cx, waiting, answer, now) {
                return Next::Step(step);
            }
        } else if let Some(answer) = answer {
            tracing::debug!(answer = ?answer, "an answer no native step asked for, ignored");
        }
        loop {
            if let Some(step) = self.queue.pop_front() {
                return Next::Step(self.hand_out(step));
            }
            if let Some(next) = self.advance(cx, now) {
                return next;
            }
        }
    }

    /// The next phase's steps into the queue; or a step of the driver's own (the version,
    /// the record, the probes running); or the end.
    fn advance(&mut self, cx: &mut Cx<'_>, now: &Now) -> Option<Next> {
        let record = &mut self.record;
        match self.phase {
            Phase::Start => return self.start(cx, now),
            Phase::Begin => {
                let (distrusted, steps) = begin(cx, record, now);
                self.distrusted = distrusted;
                self.queue.extend(steps);
                self.phase = Phase::NodeReports;
            }
            Phase::NodeReports => {
                let (steps, reports_due) = node_reports(cx, record, now);
                self.reports_due = reports_due;
                self.queue.extend(steps);
                self.phase = Phase::MarkDue;
            }
            Phase::MarkDue => {
                let data_plane = &cx.mem.data_plane.0;
                let (params, plan, server) = (cx.params, cx.plan, &cx.server);
                self.requeue = state::mark_due(params, data_plane, plan, record, server, now);
                self.phase = Phase::Action(0);
            }
            Phase::Action(index) => {
                self.phase = Phase::Reprobes;
                let plan = cx.plan;
                if let Some(planned) = plan.native_actions.get(index) {
                    let (steps, wait) = action(cx, record, planned, now);
                    self.requeue = earliest(self.requeue, wait);
                    self.queue.extend(steps);
                    self.phase = Phase::Action(index + 1);
                }
            }
            Phase::Reprobes => {
                let (steps, settling) = reprobes(cx, record, &self.distrusted, now);
                self.settling = settling;
                self.queue.extend(steps);
                self.phase = Phase::Record;
            }
            Phase::Record => {
                self.phase = Phase::Probing;
                if self.record != self.before {
                    self.waiting = Some(Waiting::Record);
                    return Some(Next::Step(Step::WriteRecord(self.record.clone())));
                }
            }
            Phase::Probing => {
                self.waiting = Some(Waiting::Probing);
                return Some(Next::Step(Step::ProbesRunning));
            }
            Phase::Done(wait) => return Some(Next::Done(wait)),
        }
        None
    }

    /// A snapshot that does not show the record written last yet waits ([`lagging`]); the
    /// API server's version is read only for a cure recorded or planned, and only when the
    /// one remembered is older than `version_every`.
    fn start(&mut self, cx: &mut Cx<'_>, now: &Now) -> Option<Next> {
        if let Some(wait) = lagging(cx.mem, cx.params, &self.before, now.at) {
            self.phase = Phase::Done(Some(wait));
            return Some(Next::Done(Some(wait)));
        }
        self.phase = Phase::Begin;
        if !native(&self.before, cx.plan) {
            cx.server.clear();
            return None;
        }
        match fresh_version(cx, now) {
            Some(version) => cx.server = version,
            None => {
                self.waiting = Some(Waiting::Version);
                return Some(Next::Step(Step::ReadVersion));
            }
        }
        None
    }

    /// `step` handed out; a write's answer is awaited. A [`SetProxy`]'s record goes first.
    fn hand_out(&mut self, step: Step) -> Step {
        match step {
            // The record first, so that uninstall can always put the status back.
            Step::SetProxy(set) if set.record != NativeRecord::default() => {
                let record = set.record.clone();
                self.waiting = Some(Waiting::SetRecord(set));
                Step::WriteRecord(record)
            }
            Step::SetProxy(set) => {
                self.waiting = Some(Waiting::Set(set.clone()));
                Step::SetProxy(set)
            }
            Step::PutBack(put_back) => {
                self.waiting = Some(Waiting::PutBack(put_back.clone()));
                Step::PutBack(put_back)
            }
            step => step,
        }
    }

    /// `answer` to the step `waiting` for it, folded in; the steps it leads to go first in
    /// the queue, or one is returned at once (a [`SetProxy`]'s status after its record, the
    /// version a dropped write reports).
    fn answered(
        &mut self,
        cx: &mut Cx<'_>,
        waiting: Waiting,
        answer: Option<Answer>,
        now: &Now,
    ) -> Option<Step> {
        let then = match (waiting, answer) {
            (Waiting::Version, answer) => {
                cx.server = version(cx, answer, now);
                return None;
            }
            (Waiting::SetRecord(set), Some(Answer::RecordWritten)) => {
                written(cx.mem, &set.record, now.at);
                let step = Step::SetProxy(set.clone());
                self.waiting = Some(Waiting::Set(set));
                return Some(step);
            }
            // Not known to be written (never so from the executor): no status write that
            // uninstall could not put back.
            (Waiting::SetRecord(set), _) => {
                set::after(cx, &mut self.record, &set, SetOutcome::Nothing, now)
            }
            (Waiting::Set(set), Some(Answer::Set(SetAnswer::Dropped(stored)))) => {
                let Some(version) = fresh_version(cx, now) else {
                    self.waiting = Some(Waiting::SetVersion(set, stored));
                    return Some(Step::ReadVersion);
                };
                let outcome = SetOutcome::Dropped { stored, version };
                set::after(cx, &mut self.record, &set, outcome, now)
            }
            (Waiting::Set(set), answer) => {
                let outcome = match answer {
                    Some(Answer::Set(SetAnswer::Applied)) => SetOutcome::Applied,
                    // Another writer changed the status meanwhile, or the Service is gone:
                    // the next round sees it.
                    _ => SetOutcome::Nothing,
                };
                set::after(cx, &mut self.record, &set, outcome, now)
            }
            (Waiting::SetVersion(set, stored), answer) => {
                let version = version(cx, answer, now);
                let outcome = SetOutcome::Dropped { stored, version };
                set::after(cx, &mut self.record, &set, outcome, now)
            }
            (Waiting::PutBack(put_back), answer) => {
                let outcome = match answer {
                    Some(Answer::PutBack(outcome)) => outcome,
                    // Not known to be put back: kept at, as a refusal.
                    _ => Restored::Refused("no answer".to_owned()),
                };
                put_back::after(cx, &mut self.record, &put_back, outcome, now)
            }
            (Waiting::Record, answer) => {
                if matches!(answer, Some(Answer::RecordWritten)) {
                    written(cx.mem, &self.record, now.at);
                }
                return None;
            }
            (Waiting::Probing, answer) => {
                // Not known: as if one ran (looked at again soon).
                let probing = !matches!(answer, Some(Answer::ProbesRunning(false)));
                let due = (self.settling, self.reports_due);
                let wait = requeue(cx, probing, self.requeue, due, now.at);
                self.phase = Phase::Done(wait);
                return None;
            }
        };
        for step in then.into_iter().rev() {
            self.queue.push_front(step);
        }
        None
    }
}

/// The API server's version remembered, when it is younger than `version_every`.
fn fresh_version(cx: &Cx<'_>, now: &Now) -> Option<String> {
    let (version, at) = cx.mem.server_version.as_ref()?;
    (now.at.saturating_duration_since(*at) < cx.params.version_every).then(|| version.clone())
}

/// The API server's version read (`answer`), remembered from `now`; unread, the one
/// remembered, however old (empty when none).
fn version(cx: &mut Cx<'_>, answer: Option<Answer>, now: &Now) -> String {
    if let Some(Answer::Version(Some(version))) = answer {
        cx.mem.server_version = Some((version.clone(), now.at));
        return version;
    }
    cx.mem
        .server_version
        .as_ref()
        .map(|(version, _)| version.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
