//! The native cure's part of the loop's memory ([`NativeMemory`], held by
//! `controller::memory::Memory`): everything the cure keeps between reconciles. Its write
//! fights over `ipMode` are the loop's ([`crate::fight::Fights`], targets
//! `ipMode Service namespace/name`), and its probes' results come in through the sensors
//! ([`super::NativeSensors::read`]).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

use hairpin_planner::native::NativeRecord;

use super::Finished;
use super::probe::Fingerprints;

/// See the module documentation.
pub(crate) struct NativeMemory {
    /// Verdicts of finished probes not taken into the record yet, by `namespace/name`.
    pub(super) verdicts: BTreeMap<String, Finished>,
    /// Load balancers whose problem the baseline showed, by `namespace/name`: uid and when.
    /// And the IPs it left out (unreachable from here).
    pub(super) shown: BTreeMap<String, (String, Instant, Vec<String>)>,
    /// The data plane ([`hairpin_planner::native::data_plane`], plus the API server's
    /// version) now, and since when this instance has seen it.
    pub(super) data_plane: (String, Instant),
    /// The Nodes' versions as their watch last reported them (`None`: not listed yet, or not
    /// watched).
    pub(super) nodes: Option<String>,
    /// The API server's `gitVersion`, and when it was read.
    pub(super) server_version: Option<(String, Instant)>,
    /// The proven cures of the record were put to `probing` (this instance trusts no
    /// verdict it did not reach itself).
    pub(super) started: bool,
    /// The record this instance wrote last, and when, until the snapshot shows it: a plan made
    /// from a cache that has not seen it yet (the status write's own event comes first) would
    /// repeat a write the record already says not to make.
    pub(super) written: Option<(NativeRecord, Instant)>,
    /// Put-backs refused or not applied, by `namespace/name`: refusals in a row, and when the
    /// next try is due.
    pub(super) put_backs: BTreeMap<String, (u32, Instant)>,
    /// What answered each load balancer's HTTP ports through the receiver's header path in
    /// the last baseline that showed the problem, by `namespace/name`: the proof after the
    /// write requires it ([`super::from_receiver`]).
    pub(super) receivers: BTreeMap<String, Fingerprints>,
    /// Put-backs held until the DNS rules brought back for a node's failure have settled, by
    /// `namespace/name`.
    pub(super) settling: BTreeMap<String, Instant>,
}

impl NativeMemory {
    /// What a new leader starts with: nothing remembered, the data plane seen from `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            verdicts: BTreeMap::new(),
            shown: BTreeMap::new(),
            data_plane: (String::new(), now),
            nodes: None,
            server_version: None,
            started: false,
            written: None,
            put_backs: BTreeMap::new(),
            receivers: BTreeMap::new(),
            settling: BTreeMap::new(),
        }
    }
}

impl Default for NativeMemory {
    fn default() -> Self {
        Self::new(Instant::now())
    }
}

impl fmt::Debug for NativeMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NativeMemory")
            .field("verdicts", &self.verdicts.keys().collect::<Vec<_>>())
            .field("shown", &self.shown)
            .field("data_plane", &self.data_plane)
            .field("nodes", &self.nodes)
            .field("server_version", &self.server_version)
            .field("started", &self.started)
            .field("written", &self.written.is_some())
            .field("put_backs", &self.put_backs)
            .field("settling", &self.settling)
            .finish_non_exhaustive()
    }
}
