//! What executing a reconcile's actions found: the answers of the API server, as
//! [`act`](super::act) hands them back. [`remember`](super::memory::remember) folds them into
//! the memory, and [`decide::after`](super::decide::after) chooses what follows from them (the
//! Events about a write, a revert or a fight, the DNS state, when to look again).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

use crate::Error;
use crate::apply::{ObjectChanges, Reverted};
use crate::fight::Observation;

/// See the module documentation. Filled in as the writes go: a reconcile that fails part way
/// says how far it got (what is `None` or missing was not reached).
#[derive(Debug, Default)]
pub(crate) struct Observed {
    /// How many of hairpin's `DNSEndpoint`s of an earlier external-dns mode were deleted, when
    /// they were looked for.
    pub cleaned: Option<usize>,
    /// What applying the hairpin Services did.
    pub services: Option<ObjectsObserved>,
    /// hairpin's own ConfigMap keys, in the order of the actions.
    pub own_keys: Vec<KeyObserved>,
    /// Every own key was gone through.
    pub own_keys_done: bool,
    /// The native cure ran (as today, inside its curer): when it asks to run again.
    pub native: Option<Option<Instant>>,
    /// The DNS change.
    pub dns: Option<DnsObserved>,
    /// The error the reconcile stopped at, returned once what was observed is remembered.
    pub error: Option<Error>,
}

/// One ConfigMap key the actions named.
#[derive(Debug, PartialEq)]
pub(crate) enum KeyObserved {
    /// Already as planned: not written.
    AsPlanned,
    /// Not written: a write fight is backed off until then.
    BackedOff(Instant),
    /// Written.
    Written {
        /// What the key holds now (`None`: removed).
        after: Option<String>,
        /// The ConfigMap's `managedFields` as read before the write.
        managed_fields: Vec<ManagedFieldsEntry>,
    },
    /// Read again before the write, and found as planned.
    Unchanged,
    /// The ConfigMap does not exist.
    ConfigMapMissing,
    /// The write failed (not withheld by the gate): the error's text.
    Failed(String),
}

/// The DNS change.
#[derive(Debug, PartialEq)]
pub(crate) enum DnsObserved {
    /// No DNS change was planned: nothing written.
    NotPlanned,
    /// The DNS keys, in the order of the actions (the first is the CoreDNS write).
    Keys(Vec<KeyObserved>),
    /// `--dns-mode external-dns`: hairpin's `DNSEndpoint`s.
    Endpoints(EndpointsObserved),
}

/// What applying one kind of hairpin's objects did.
#[derive(Debug, PartialEq)]
pub(crate) struct ObjectsObserved {
    /// What was done, as far as it got.
    pub changes: ObjectChanges,
    /// The apply finished (else it stopped at the reconcile's error).
    pub done: bool,
}

/// What writing hairpin's `DNSEndpoint`s found.
#[derive(Debug, PartialEq)]
pub(crate) enum EndpointsObserved {
    /// The API server does not serve the CRD: nothing written.
    CrdMissing,
    /// Applied (not `done` when the gate withheld a write part way).
    Applied(ObjectsObserved),
    /// The write failed (not withheld by the gate): the error's text, and what was done
    /// before it.
    Failed(String, ObjectChanges),
}

/// What the write-fight guard learnt from the observations, as
/// [`remember`](super::memory::remember) folded them into the memory: what `decide` needs to
/// choose the Events that follow.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Learnt {
    /// What the guard observed of each key written, by target (`namespace/name/key`).
    pub keys: BTreeMap<String, Observation>,
    /// The targets (keys and objects) whose write fight is over: our value held a whole
    /// window.
    pub fights_over: BTreeSet<String>,
    /// The hairpin Services someone else had changed, restored.
    pub services_reverted: Vec<Reverted>,
    /// The `DNSEndpoint`s someone else had changed, restored.
    pub endpoints_reverted: Vec<Reverted>,
    /// A write fight over a hairpin Service is on.
    pub service_fight: bool,
    /// A write fight over a `DNSEndpoint` is on.
    pub endpoint_fight: bool,
    /// A write fight over one of hairpin's own ConfigMap keys is on.
    pub config_map_fight: bool,
    /// external-dns's CRD was found missing, for the first time since it was last there.
    pub crd_missing_news: bool,
}
