//! What the loop keeps between reconciles, in one value: [`Memory`]. Every writer borrows the
//! part it needs for one reconcile and keeps nothing of its own; the native cure is the one
//! exception for now ([`crate::native::NativeCurer`] keeps its record, its probes' results and
//! its own write-fight state beside the memory, in the reconciler).

use std::collections::BTreeSet;

use super::decide::Reported;
use crate::dns_endpoints::DnsEndpointMemory;
use crate::fight::{FightParams, Fights};
use crate::status::{DnsState, StatusMemory};

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Memory {
    /// Write-fight state per DNS key and per key of hairpin's own ConfigMaps
    /// (`namespace/name/key`), and per object of hairpin's (`Kind namespace/name`: the hairpin
    /// Services, the `DNSEndpoint`s).
    pub fights: Fights,
    /// The refused and unverified hostnames reported, to report each change once.
    pub reported: Reported,
    /// Where the last reconcile left the DNS change, for the Hairpin statuses: filled in as
    /// the writes go, so a reconcile that fails part way reports where it stopped.
    pub dns_state: DnsState,
    /// The hairpin Services left as another writer made them (a write fight), as of the last
    /// reconcile that applied them.
    pub services_backed_off: BTreeSet<String>,
    /// The Hairpin statuses' write history and what was logged about them.
    pub statuses: StatusMemory,
    /// The `DNSEndpoint`s' CRD, what was logged about it, and the clean-up after a mode switch.
    pub dns_endpoints: DnsEndpointMemory,
    /// The first write after the start waited for the names' first answers (or for the
    /// startup grace to end), with `--verify-hostnames=resolve`.
    pub verified_once: bool,
}

impl Memory {
    /// What a new leader starts with: nothing remembered.
    pub(crate) fn new(fight: FightParams) -> Self {
        Self {
            fights: Fights::new(fight),
            reported: Reported::default(),
            dns_state: DnsState::NotReached,
            services_backed_off: BTreeSet::new(),
            statuses: StatusMemory::default(),
            dns_endpoints: DnsEndpointMemory::default(),
            verified_once: false,
        }
    }
}
