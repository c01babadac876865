//! Detecting another writer that keeps reverting what hairpin writes (an addon manager in
//! Reconcile mode reverting the CoreDNS change, a distribution re-applying its manifest, a
//! GitOps tool or an operator editing hairpin's Services or `DNSEndpoint`s), and backing off
//! instead of fighting it in a loop.
//!
//! A revert is counted when we must write again exactly the value we wrote last time for the
//! same target (a ConfigMap key, an object): the plan did not change, so someone else changed
//! it. `threshold` reverts within `window` start a fight: writes to that target stop for an
//! exponentially growing backoff (one write is tried when it ends). Our value surviving a
//! whole `window` ends it.
//!
//! The backoff is this small state machine rather than `backon` (already in the dependency
//! tree): `backon` drives the retries of one operation, while a fight's delay must persist
//! across reconciles, grow only on reverts and reset when our value holds.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// Fight detection settings.
#[derive(Clone, Debug)]
pub struct FightParams {
    /// Reverts within `window` that make a fight.
    pub threshold: usize,
    /// The window.
    pub window: Duration,
    /// First backoff.
    pub initial_backoff: Duration,
    /// Longest backoff.
    pub max_backoff: Duration,
}

impl Default for FightParams {
    fn default() -> Self {
        Self {
            threshold: 3,
            window: Duration::from_secs(300),
            initial_backoff: Duration::from_secs(30),
            max_backoff: Duration::from_secs(30 * 60),
        }
    }
}

/// What the guard says about writing now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead.
    Write,
    /// Backed off until then.
    BackedOff(Instant),
}

/// What recording a write found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    /// A plain write (first write, or a new value).
    Normal,
    /// Our previous identical write had been reverted (`count` reverts in the window).
    Reverted {
        /// Reverts within the window.
        count: usize,
    },
    /// This revert started (or prolonged) a fight: writes are backed off for `backoff`.
    Fight {
        /// Reverts within the window.
        count: usize,
        /// How long writes are now suspended.
        backoff: Duration,
    },
}

/// Per-target fight state.
#[derive(Debug)]
pub struct FightGuard {
    params: FightParams,
    target: Option<String>,
    last_written: Option<Option<String>>,
    reverts: VecDeque<Instant>,
    backoff: Option<(Instant, Duration)>,
}

impl FightGuard {
    /// A guard with these settings.
    pub fn new(params: FightParams) -> Self {
        Self {
            params,
            target: None,
            last_written: None,
            reverts: VecDeque::new(),
            backoff: None,
        }
    }

    /// True while backed off (a fight is on).
    pub fn in_fight(&self) -> bool {
        self.backoff.is_some()
    }

    /// May we write `target` now?
    pub fn decide(&self, target: &str, now: Instant) -> Decision {
        if self.target.as_deref() != Some(target) {
            return Decision::Write;
        }
        match self.backoff {
            Some((until, _)) if now < until => Decision::BackedOff(until),
            _ => Decision::Write,
        }
    }

    /// Records that `target` was written with `value` (`None`: key removed).
    pub fn written(&mut self, target: &str, value: Option<String>, now: Instant) -> Observation {
        if self.target.as_deref() != Some(target) {
            *self = Self::new(self.params.clone());
            self.target = Some(target.to_owned());
        }
        let same_as_before = self.last_written.as_ref() == Some(&value);
        self.last_written = Some(value);
        if !same_as_before {
            self.reverts.clear();
            self.backoff = None;
            return Observation::Normal;
        }
        self.reverts.push_back(now);
        while self
            .reverts
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.params.window)
        {
            self.reverts.pop_front();
        }
        let count = self.reverts.len();
        if count < self.params.threshold {
            return Observation::Reverted { count };
        }
        let backoff = match self.backoff {
            Some((_, previous)) => (previous * 2).min(self.params.max_backoff),
            None => self.params.initial_backoff,
        };
        self.backoff = Some((now + backoff, backoff));
        Observation::Fight { count, backoff }
    }

    /// Records that `target` still holds what we wrote: a fight ends once our value has
    /// survived a whole window.
    pub fn held(&mut self, target: &str, now: Instant) -> bool {
        if self.target.as_deref() != Some(target) || self.backoff.is_none() {
            return false;
        }
        let calm = self
            .reverts
            .back()
            .is_none_or(|t| now.duration_since(*t) > self.params.window);
        if calm {
            self.backoff = None;
            self.reverts.clear();
        }
        calm
    }
}

/// One [`FightGuard`] per target (a ConfigMap key `namespace/name/key`, an object
/// `Kind namespace/name`, a Service's `ipMode`).
#[derive(Debug)]
pub struct Fights {
    params: FightParams,
    /// Targets whose name starts with the prefix take these settings instead.
    by_prefix: Vec<(String, FightParams)>,
    guards: BTreeMap<String, FightGuard>,
}

impl Fights {
    /// No fight yet.
    pub fn new(params: FightParams) -> Self {
        Self {
            params,
            by_prefix: Vec::new(),
            guards: BTreeMap::new(),
        }
    }

    /// The same, with `params` for the targets whose name starts with `prefix`.
    pub fn with_prefix(mut self, prefix: &str, params: FightParams) -> Self {
        self.by_prefix.push((prefix.to_owned(), params));
        self
    }

    /// The settings.
    pub fn params(&self) -> &FightParams {
        &self.params
    }

    /// The settings of `target`.
    pub fn params_of(&self, target: &str) -> &FightParams {
        params_of(&self.params, &self.by_prefix, target)
    }

    fn guard(&mut self, target: &str) -> &mut FightGuard {
        let Self {
            params,
            by_prefix,
            guards,
        } = self;
        guards
            .entry(target.to_owned())
            .or_insert_with(|| FightGuard::new(params_of(params, by_prefix, target).clone()))
    }

    /// May we write `target` now? ([`FightGuard::decide`])
    pub fn decide(&mut self, target: &str, now: Instant) -> Decision {
        self.guard(target).decide(target, now)
    }

    /// May we write `target` now? ([`FightGuard::decide`], without recording anything: what
    /// the loop's `decide` reads from its memory.)
    pub fn decision(&self, target: &str, now: Instant) -> Decision {
        self.guards
            .get(target)
            .map_or(Decision::Write, |g| g.decide(target, now))
    }

    /// True while `target` is backed off.
    pub fn target_in_fight(&self, target: &str) -> bool {
        self.guards.get(target).is_some_and(FightGuard::in_fight)
    }

    /// Records a write of `target` ([`FightGuard::written`]).
    pub fn written(&mut self, target: &str, value: Option<String>, now: Instant) -> Observation {
        self.guard(target).written(target, value, now)
    }

    /// Records that `target` still holds our value ([`FightGuard::held`]): true when that
    /// ended its fight.
    pub fn held(&mut self, target: &str, now: Instant) -> bool {
        self.guards
            .get_mut(target)
            .is_some_and(|g| g.held(target, now))
    }

    /// True while any target whose name starts with `prefix` is backed off.
    pub fn in_fight(&self, prefix: &str) -> bool {
        self.guards
            .iter()
            .any(|(target, g)| target.starts_with(prefix) && g.in_fight())
    }

    /// Forgets the targets starting with `prefix` that `keep` rejects (objects no longer
    /// planned), so the state does not grow with every object hairpin ever wrote.
    pub fn retain(&mut self, prefix: &str, keep: impl Fn(&str) -> bool) {
        self.guards
            .retain(|target, _| !target.starts_with(prefix) || keep(target));
    }
}

/// The settings of `target`: those of the first prefix it starts with, else `params`.
fn params_of<'a>(
    params: &'a FightParams,
    by_prefix: &'a [(String, FightParams)],
    target: &str,
) -> &'a FightParams {
    by_prefix
        .iter()
        .find(|(prefix, _)| target.starts_with(prefix.as_str()))
        .map_or(params, |(_, params)| params)
}

#[cfg(test)]
mod tests;
