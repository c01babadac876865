//! The election's state machine: given the Lease as read and the clock passed in, what this
//! instance does next (renew, claim, create, follow, stand down for the fence), what it
//! remembers, and the Warning Events on the Lease (a Lease that is not hairpin's, the fence)
//! with their texts. No client, no clock of its own, no logging: [`super::LeaseManager`] reads
//! and writes the Lease, and logs and publishes what [`Decision::note`] and the events say.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

use super::fence::{FENCE_ACKNOWLEDGED_ANNOTATION, Fence, fence_of, is_fenced};
use super::{LeaseParams, holder_of, not_owned};
use crate::apply::{created_by_hairpin, created_by_hairpin_meta};
use crate::report::{object_ref, reason};

/// The clock of one attempt: the monotonic instant (expiry, hold-off) and the wall time
/// written into the Lease.
#[derive(Clone, Debug)]
pub(super) struct Now {
    pub(super) instant: Instant,
    pub(super) wall: Timestamp,
}

impl Now {
    /// The clocks now.
    pub(super) fn read() -> Self {
        Self {
            instant: Instant::now(),
            wall: Timestamp::now(),
        }
    }
}

/// What to do with the Lease.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Act {
    /// Write it (a renewal), guarded by its resourceVersion.
    Renew(Box<Lease>),
    /// Write it (a claim of a vacated or expired Lease), taken from `previous`.
    Claim {
        lease: Box<Lease>,
        previous: Option<String>,
    },
    /// Create it, held by this instance.
    Create(Box<Lease>),
    /// Hold without writing (no election: the Lease is only read).
    Hold,
    /// Follow: another instance holds it (or nobody, or we may not claim it yet).
    Follow(Option<String>),
    /// The Lease is fenced.
    Fenced(Box<Lease>),
    /// The Lease at our name is not hairpin's.
    NotOwned,
}

/// Something worth a log line that the decision found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Note {
    /// The Lease was deleted under this leader: it stopped writing.
    LostUnderLeader,
    /// A Lease this instance had seen was deleted.
    Lost,
    /// The removal guard lifted its fence: this instance takes part again.
    Lifted,
}

/// A Warning Event on the Lease.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct LeaseEvent {
    /// The Lease.
    pub(super) regarding: ObjectReference,
    pub(super) reason: &'static str,
    pub(super) note: String,
}

/// One attempt's decision.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Decision {
    /// Close the write gate at once, before anything else (the Lease was taken or deleted
    /// under this leader).
    pub(super) close_gate: bool,
    pub(super) act: Act,
    pub(super) note: Option<Note>,
    /// Publish this (a Lease that is not hairpin's, reported once until it is hairpin's
    /// again).
    pub(super) event: Option<LeaseEvent>,
}

impl From<Act> for Decision {
    fn from(act: Act) -> Self {
        Self {
            close_gate: false,
            act,
            note: None,
            event: None,
        }
    }
}

/// What seeing the fence asks of this instance.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct FenceStep {
    /// The fence as read.
    pub(super) fence: Fence,
    /// The first fence this instance sees: say so.
    pub(super) first: bool,
    /// The Event saying so, on the first fence.
    pub(super) event: Option<LeaseEvent>,
    /// Write this Lease to acknowledge the fence (this instance is the holder it displaced).
    pub(super) acknowledge: Option<Box<Lease>>,
}

/// What to do with the Lease on the way out.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Vacate {
    /// Write it, vacated.
    Write(Box<Lease>),
    /// It is no longer ours (deleted, taken, fenced): nothing to vacate.
    NotOurs,
    /// The Lease at our name is not hairpin's.
    NotOwned,
}

/// What this instance remembers of the Lease between attempts.
#[derive(Debug)]
pub(super) struct Election {
    params: LeaseParams,
    /// (holder, renewTime) as last seen, and when this instance saw it change.
    observed: Option<(Option<String>, Option<MicroTime>, Instant)>,
    /// When this instance found the Lease deleted (leading, or after having seen it).
    lost_at: Option<Instant>,
    /// This instance has seen the Lease exist (since it last created it).
    seen: bool,
    /// The fence was seen (for good).
    fenced: bool,
    /// This instance acknowledged the fence (or did not have to).
    acknowledged: bool,
    /// Every fence seen was the removal guard's: lifted again when the Deployment lives on.
    liftable: bool,
    /// A Lease at our name that is not hairpin's was reported (until one is hairpin's again).
    foreign_reported: bool,
}

// === impl Election ===

impl Election {
    pub(super) fn new(params: LeaseParams) -> Self {
        Self {
            params,
            observed: None,
            lost_at: None,
            seen: false,
            fenced: false,
            acknowledged: false,
            liftable: false,
            foreign_reported: false,
        }
    }

    /// Fenced for good: nothing to claim, renew or vacate any more.
    pub(super) fn idle(&self) -> bool {
        self.fenced && self.acknowledged && !self.liftable
    }

    /// A fence was seen (and not lifted).
    pub(super) fn fenced(&self) -> bool {
        self.fenced
    }

    /// Without an election: whether the Lease carries the fence (nothing is written).
    pub(super) fn observe(&mut self, read: Option<Lease>) -> Decision {
        let mut note = None;
        let act = match read {
            Some(lease) if fence_of(&lease).is_some() => Act::Fenced(Box::new(lease)),
            // Only a Lease there without the fence lifts the removal guard's fence: a Lease
            // gone went with the Deployment.
            Some(_) if self.fenced && !self.lift(&mut note) => Act::Follow(None),
            None if self.fenced => Act::Follow(None),
            _ => Act::Hold,
        };
        Decision {
            close_gate: false,
            act,
            note,
            event: None,
        }
    }

    /// One claim-or-renew decision on the Lease as read (`None`: it does not exist).
    /// `leading`: this instance led until now.
    pub(super) fn step(&mut self, read: Option<Lease>, leading: bool, now: &Now) -> Decision {
        match read {
            Some(lease) => self.present(lease, leading, now),
            None => self.absent(leading, now),
        }
    }

    fn present(&mut self, lease: Lease, leading: bool, now: &Now) -> Decision {
        self.lost_at = None;
        self.seen = true;
        if !created_by_hairpin(&lease.metadata) {
            return Decision {
                event: self.foreign(),
                ..Act::NotOwned.into()
            };
        }
        // Hairpin's (again): a later Lease that is not is reported anew.
        self.foreign_reported = false;
        let holder = holder_of(&lease).map(str::to_owned);
        if is_fenced(&lease) {
            return Act::Fenced(Box::new(lease)).into();
        }
        let mut note = None;
        if self.fenced && !self.lift(&mut note) {
            // Sticky: an instance that saw the fence never leads again (but the removal
            // guard's, lifted).
            return Decision {
                note,
                ..Act::Follow(holder).into()
            };
        }
        let spec = lease.spec.clone().unwrap_or_default();
        if holder.as_deref() == Some(self.params.identity.as_str()) {
            let mut renewed = lease;
            let renewed_spec = renewed.spec.get_or_insert_with(LeaseSpec::default);
            renewed_spec.renew_time = Some(MicroTime(now.wall));
            renewed_spec.lease_duration_seconds = Some(self.duration_seconds());
            return Decision {
                note,
                ..Act::Renew(Box::new(renewed)).into()
            };
        }
        // Taken by another holder: a leader stops writing before anything else.
        let close_gate = leading;

        // Track when the Lease was last seen to change, on our own clock.
        let seen = (holder.clone(), spec.renew_time.clone());
        let changed_at = match &self.observed {
            Some((h, r, at)) if (h, r) == (&seen.0, &seen.1) => *at,
            _ => now.instant,
        };
        self.observed = Some((seen.0, seen.1, changed_at));
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.params.duration, Duration::from_secs);
        let expired = holder.is_none() || since(changed_at, now) >= duration;
        let act = if expired {
            let mut claimed = lease;
            // The count as found may be anything (another client's write): a negative one or
            // an overflow would make the API server refuse the claim (or this panic) forever.
            let transitions = spec.lease_transitions.unwrap_or(0).max(0).saturating_add(1);
            claimed.spec = Some(self.fresh_spec(transitions, now));
            Act::Claim {
                lease: Box::new(claimed),
                previous: holder,
            }
        } else {
            Act::Follow(holder)
        };
        Decision {
            close_gate,
            act,
            note,
            event: None,
        }
    }

    /// The Event on a Lease at our name that is not hairpin's, once until one is hairpin's
    /// again. A build of hairpin from before the marks left its Lease unmarked: an upgrade
    /// meets it once, and only its deletion lets the new build lead.
    fn foreign(&mut self) -> Option<LeaseEvent> {
        if std::mem::replace(&mut self.foreign_reported, true) {
            return None;
        }
        let (namespace, name) = (&self.params.namespace, &self.params.name);
        let note = format!(
            "{}. This instance does not lead (nothing is reconciled) until the Lease is removed by its owner or hairpin is given another name (--lease-name). If an earlier build of hairpin left it (those did not mark their Lease), delete it once: `kubectl -n {namespace} delete lease {name}`.",
            not_owned(&self.params),
        );
        Some(LeaseEvent {
            regarding: object_ref("Lease", namespace, name, None),
            reason: reason::LEASE_NOT_OWNED,
            note,
        })
    }

    /// The Lease does not exist. After a deletion this instance saw (as leader: it stops
    /// writing at once), it waits one lease duration; then it creates the Lease again, held
    /// by itself.
    fn absent(&mut self, leading: bool, now: &Now) -> Decision {
        if self.fenced {
            // The fence is gone (the Deployment was deleted): still nothing to do.
            return Act::Follow(None).into();
        }
        let mut decision = Decision::from(Act::Follow(None));
        if leading && self.lost_at.is_none() {
            decision.close_gate = true;
            decision.note = Some(Note::LostUnderLeader);
            self.lost_at = Some(now.instant);
        } else if self.seen && self.lost_at.is_none() {
            // A Lease this instance saw was deleted (by someone: an older uninstall, by hand,
            // or with the Deployment that owned the fence, while this pod still terminates):
            // the same hold-off before re-creating it.
            decision.note = Some(Note::Lost);
            self.lost_at = Some(now.instant);
        }
        if self
            .lost_at
            .is_some_and(|at| since(at, now) < self.params.duration)
        {
            return decision;
        }
        self.lost_at = None;
        self.seen = false;
        decision.act = Act::Create(Box::new(Lease {
            metadata: created_by_hairpin_meta(&self.params.namespace, &self.params.name),
            spec: Some(self.fresh_spec(0, now)),
        }));
        decision
    }

    /// The fence was seen on `lease`: remember it, and acknowledge it when this instance is
    /// the holder it displaced (and has not yet).
    pub(super) fn saw_fence(&mut self, lease: &Lease) -> FenceStep {
        let fence = fence_of(lease).unwrap_or(Fence {
            previous_holder: None,
            acknowledged_by: None,
            by_removal: false,
        });
        // Liftable only while every fence seen was the removal guard's.
        self.liftable = fence.by_removal && (self.liftable || !self.fenced);
        let first = !self.fenced;
        self.fenced = true;
        let event = first.then(|| LeaseEvent {
            regarding: object_ref(
                "Lease",
                &self.params.namespace,
                &self.params.name,
                lease.metadata.uid.clone(),
            ),
            reason: reason::FENCED,
            note: format!(
                "hairpin uninstall is removing hairpin: controller {} stopped writing and stays idle until it exits",
                hairpin_planner::escape::text(&self.params.identity)
            ),
        });
        let identity = self.params.identity.as_str();
        let ours = fence.previous_holder.as_deref() == Some(identity);
        if !ours || fence.acknowledged_by.as_deref() == Some(identity) {
            self.acknowledged = true;
            return FenceStep {
                fence,
                first,
                event,
                acknowledge: None,
            };
        }
        let mut acked = lease.clone();
        acked
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(FENCE_ACKNOWLEDGED_ANNOTATION.into(), identity.to_owned());
        FenceStep {
            fence,
            first,
            event,
            acknowledge: Some(Box::new(acked)),
        }
    }

    /// The acknowledgement of the fence was written.
    pub(super) fn acknowledged(&mut self) {
        self.acknowledged = true;
    }

    /// On the way out, what to do with the Lease as read: vacate it (clear the holder, so a
    /// standby can claim it at once) when this instance holds it.
    pub(super) fn vacate(&self, read: Option<Lease>, now: &Now) -> Vacate {
        let Some(mut lease) = read else {
            return Vacate::NotOurs;
        };
        if !created_by_hairpin(&lease.metadata) {
            return Vacate::NotOwned;
        }
        if fence_of(&lease).is_some() {
            return Vacate::NotOurs;
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.params.identity.as_str()) {
            return Vacate::NotOurs;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(now.wall));
        Vacate::Write(Box::new(lease))
    }

    /// The removal guard lifted its fence (the Lease is there without it, or gone): this
    /// instance takes part in the election again. False (nothing changes) for any other fence.
    fn lift(&mut self, note: &mut Option<Note>) -> bool {
        if !(self.fenced && self.liftable) {
            return false;
        }
        self.fenced = false;
        self.acknowledged = false;
        self.liftable = false;
        *note = Some(Note::Lifted);
        true
    }

    /// `leaseDurationSeconds` of our Lease (at least 1).
    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.params.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    fn fresh_spec(&self, transitions: i32, now: &Now) -> LeaseSpec {
        let now = MicroTime(now.wall);
        LeaseSpec {
            holder_identity: Some(self.params.identity.clone()),
            lease_duration_seconds: Some(self.duration_seconds()),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}

/// Time from `at` to the attempt's instant.
fn since(at: Instant, now: &Now) -> Duration {
    now.instant.saturating_duration_since(at)
}

#[cfg(test)]
mod tests {
    //! The election's decisions, one row per state, without a client or a clock.

    use super::*;
    use crate::lease::{FENCE_ANNOTATION, FENCE_BY_REMOVAL, FENCE_PREVIOUS_HOLDER_ANNOTATION};

    fn params() -> LeaseParams {
        LeaseParams::new("hairpin", "hairpin-controller", "pod-a")
    }

    fn at(start: Instant, secs: u64) -> Now {
        Now {
            instant: start + Duration::from_secs(secs),
            wall: Timestamp::from_second(1_700_000_000 + secs as i64).expect("time"),
        }
    }

    fn lease(holder: Option<&str>, transitions: i32) -> Lease {
        Lease {
            metadata: created_by_hairpin_meta("hairpin", "hairpin-controller"),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: Some(15),
                lease_transitions: Some(transitions),
                ..LeaseSpec::default()
            }),
        }
    }

    fn fenced(lease: &mut Lease, kind: &str, previous: &str) {
        let annotations = lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        annotations.insert(FENCE_ANNOTATION.into(), kind.into());
        annotations.insert(FENCE_PREVIOUS_HOLDER_ANNOTATION.into(), previous.into());
    }

    fn holder_written(act: &Act) -> Option<(Option<String>, Option<i32>)> {
        let (Act::Renew(lease) | Act::Claim { lease, .. } | Act::Create(lease)) = act else {
            return None;
        };
        let spec = lease.spec.as_ref()?;
        Some((spec.holder_identity.clone(), spec.lease_transitions))
    }

    #[test]
    fn a_vacant_lease_is_claimed_and_ours_is_renewed() {
        let start = Instant::now();
        let mut election = Election::new(params());
        let claim = election.step(Some(lease(None, -3)), false, &at(start, 0));
        assert!(!claim.close_gate && claim.note.is_none(), "{claim:?}");
        assert!(matches!(&claim.act, Act::Claim { previous: None, .. }));
        assert_eq!(
            holder_written(&claim.act),
            Some((Some("pod-a".into()), Some(1)))
        );
        let renew = election.step(Some(lease(Some("pod-a"), 1)), true, &at(start, 5));
        let Act::Renew(renewed) = &renew.act else {
            panic!("{renew:?}")
        };
        let spec = renewed.spec.as_ref().expect("spec");
        assert_eq!(spec.renew_time, Some(MicroTime(at(start, 5).wall)));
        assert_eq!(
            spec.lease_transitions,
            Some(1),
            "a renewal is no transition"
        );
    }

    #[test]
    fn another_holder_is_followed_until_its_lease_goes_unrenewed_for_a_duration() {
        let start = Instant::now();
        let mut election = Election::new(params());
        let other = lease(Some("pod-b"), 4);
        let first = election.step(Some(other.clone()), false, &at(start, 0));
        assert_eq!(first, Act::Follow(Some("pod-b".into())).into());
        let before = election.step(Some(other.clone()), true, &at(start, 14));
        assert!(
            before.close_gate,
            "a leader that finds another holder stops writing"
        );
        assert_eq!(before.act, Act::Follow(Some("pod-b".into())));
        let expired = election.step(Some(other), false, &at(start, 15));
        assert!(matches!(&expired.act, Act::Claim { previous: Some(p), .. } if p == "pod-b"));
        assert_eq!(
            holder_written(&expired.act),
            Some((Some("pod-a".into()), Some(5)))
        );
    }

    #[test]
    fn a_lease_deleted_under_its_leader_is_recreated_only_after_a_duration() {
        let start = Instant::now();
        let mut fresh = Election::new(params());
        let create = fresh.step(None, false, &at(start, 0));
        assert!(create.note.is_none());
        assert_eq!(
            holder_written(&create.act),
            Some((Some("pod-a".into()), Some(0)))
        );

        let mut election = Election::new(params());
        election.step(Some(lease(Some("pod-a"), 0)), true, &at(start, 0));
        let lost = election.step(None, true, &at(start, 1));
        assert_eq!(
            lost,
            Decision {
                close_gate: true,
                act: Act::Follow(None),
                note: Some(Note::LostUnderLeader),
                event: None,
            }
        );
        let waiting = election.step(None, false, &at(start, 15));
        assert_eq!(waiting, Act::Follow(None).into());
        let again = election.step(None, false, &at(start, 16));
        assert!(matches!(again.act, Act::Create(_)), "{again:?}");
    }

    #[test]
    fn a_lease_that_is_not_hairpins_is_never_claimed_or_vacated() {
        let start = Instant::now();
        let mut election = Election::new(params());
        let mut foreign = lease(None, 0);
        foreign.metadata = kube::api::ObjectMeta {
            name: Some("hairpin-controller".into()),
            ..Default::default()
        };
        let decision = election.step(Some(foreign.clone()), false, &at(start, 0));
        assert_eq!(decision.act, Act::NotOwned);
        foreign.spec.as_mut().expect("spec").holder_identity = Some("pod-a".into());
        assert_eq!(
            election.vacate(Some(foreign), &at(start, 1)),
            Vacate::NotOwned
        );
    }

    #[test]
    fn the_displaced_holder_acknowledges_the_fence_and_stays_idle() {
        let start = Instant::now();
        let mut election = Election::new(params());
        let mut fence = lease(Some(super::super::FENCE_HOLDER), 1);
        fenced(&mut fence, "uninstall", "pod-a");
        let decision = election.step(Some(fence.clone()), true, &at(start, 0));
        assert!(matches!(decision.act, Act::Fenced(_)), "{decision:?}");
        let step = election.saw_fence(&fence);
        assert!(step.first);
        let acked = step.acknowledge.expect("the displaced holder acknowledges");
        let annotations = acked.metadata.annotations.expect("annotations");
        assert_eq!(
            annotations
                .get(FENCE_ACKNOWLEDGED_ANNOTATION)
                .map(String::as_str),
            Some("pod-a")
        );
        assert!(!election.idle(), "idle once the acknowledgement is written");
        election.acknowledged();
        assert!(election.idle());
        // Gone with the Deployment: still nothing to do.
        assert_eq!(
            election.step(None, false, &at(start, 60)),
            Act::Follow(None).into()
        );
    }

    #[test]
    fn the_removal_guards_fence_is_lifted_by_a_lease_without_it() {
        let start = Instant::now();
        let mut election = Election::new(params());
        let mut fence = lease(Some(super::super::FENCE_HOLDER), 1);
        fenced(&mut fence, FENCE_BY_REMOVAL, "pod-b");
        let step = election.saw_fence(&fence);
        assert!(
            step.first && step.acknowledge.is_none(),
            "not ours to acknowledge"
        );
        assert!(!election.idle(), "liftable");
        let lifted = election.step(Some(lease(None, 1)), false, &at(start, 1));
        assert_eq!(lifted.note, Some(Note::Lifted));
        assert!(matches!(lifted.act, Act::Claim { .. }), "{lifted:?}");
        assert!(!election.fenced());
    }

    #[test]
    fn a_foreign_lease_is_reported_once_until_the_lease_is_hairpins_again() {
        let start = Instant::now();
        let mut election = Election::new(params());
        let mut foreign = lease(Some("other"), 0);
        foreign.metadata = kube::api::ObjectMeta {
            name: Some("hairpin-controller".into()),
            ..Default::default()
        };
        let first = election.step(Some(foreign.clone()), false, &at(start, 0));
        let event = first.event.expect("the first refusal is reported");
        assert_eq!(event.reason, reason::LEASE_NOT_OWNED);
        assert_eq!(event.regarding.kind.as_deref(), Some("Lease"));
        assert_eq!(event.regarding.name.as_deref(), Some("hairpin-controller"));
        assert!(
            event
                .note
                .contains("kubectl -n hairpin delete lease hairpin-controller"),
            "{}",
            event.note
        );
        let again = election.step(Some(foreign.clone()), false, &at(start, 2));
        assert_eq!((again.act, again.event), (Act::NotOwned, None));
        // Hairpin's again, then someone else's: reported anew.
        election.step(Some(lease(Some("pod-b"), 0)), false, &at(start, 4));
        let anew = election.step(Some(foreign), false, &at(start, 6));
        assert!(anew.event.is_some(), "{anew:?}");
    }

    #[test]
    fn only_the_first_fence_is_reported_with_the_instance_named() {
        let mut election = Election::new(params());
        let mut fence = lease(Some(super::super::FENCE_HOLDER), 1);
        fence.metadata.uid = Some("uid-1".into());
        fenced(&mut fence, "uninstall", "pod-b");
        let first = election.saw_fence(&fence).event.expect("the first fence");
        assert_eq!(first.reason, reason::FENCED);
        assert_eq!(first.regarding.uid.as_deref(), Some("uid-1"));
        assert_eq!(
            first.note,
            "hairpin uninstall is removing hairpin: controller pod-a stopped writing and stays idle until it exits"
        );
        assert_eq!(election.saw_fence(&fence).event, None);
    }

    #[test]
    fn only_a_lease_this_instance_holds_is_vacated() {
        let start = Instant::now();
        let election = Election::new(params());
        let Vacate::Write(vacated) = election.vacate(Some(lease(Some("pod-a"), 2)), &at(start, 3))
        else {
            panic!("ours is vacated");
        };
        let spec = vacated.spec.expect("spec");
        assert_eq!(spec.holder_identity, None);
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert_eq!(
            election.vacate(Some(lease(Some("pod-b"), 2)), &at(start, 3)),
            Vacate::NotOurs
        );
        assert_eq!(election.vacate(None, &at(start, 3)), Vacate::NotOurs);
    }

    #[test]
    fn without_an_election_only_the_fence_counts() {
        let mut election = Election::new(params());
        assert_eq!(election.observe(None).act, Act::Hold);
        assert_eq!(
            election.observe(Some(lease(Some("pod-b"), 0))).act,
            Act::Hold
        );
        let mut fence = lease(None, 0);
        fenced(&mut fence, "uninstall", "");
        assert!(matches!(election.observe(Some(fence)).act, Act::Fenced(_)));
    }
}
