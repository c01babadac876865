//! The DNS change: its keys written one by one, each guarded against a write fight, or the
//! `DNSEndpoint`s of `--dns-mode external-dns`; where it was left is the DNS state the Hairpin
//! statuses report.

use std::time::Instant;

use hairpin_planner::{ClusterSnapshot, DnsChange, Plan};

use super::super::decide::{self, DnsIntent, DnsKey, DnsTarget, DnsWritten, earliest};
use super::{Reconciler, execute};
use crate::Error;
use crate::apply::{KeyOutcome, last_writer, write_key};
use crate::fight::Decision;
use crate::status::DnsState;

impl Reconciler {
    /// Executes the DNS part of an intent: the clean-ups an earlier mode left, then the
    /// `DNSEndpoint`s or the DNS keys.
    pub(super) async fn apply_dns(
        &mut self,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
        dns: DnsIntent<'_>,
    ) -> Result<Option<Instant>, Error> {
        let (change, effects, clean_ups, target) = match dns {
            DnsIntent::NotPlanned { verdict, state } => {
                self.memory.dns_state = state;
                return Ok(self.follow(verdict).await);
            }
            DnsIntent::Planned {
                change,
                effects,
                clean_ups,
                target,
            } => (change, effects, clean_ups, target),
        };
        execute(&self.ctx, effects).await;
        for edit in clean_ups {
            write_key(&self.ctx.client, &edit).await?;
        }
        let keys = match target {
            DnsTarget::Keys(keys) => keys,
            DnsTarget::Endpoints(endpoints) => {
                let applied = self
                    .dns_endpoints
                    .apply(
                        &mut self.memory.dns_endpoints,
                        plan,
                        endpoints,
                        snapshot,
                        &mut self.memory.fights,
                        &mut self.memory.dns_state,
                    )
                    .await?;
                let Some(changes) = applied else {
                    return Ok(None);
                };
                self.ctx.count_writes(changes.writes());
                let requeue = self.report_reverts("DNSEndpoint", &changes).await;
                self.dns_endpoints.announce(endpoints, &changes).await;
                return Ok(requeue);
            }
        };
        let mut requeue: Option<Instant> = None;
        for key in keys {
            let next = self.apply_write(plan, change, key).await?;
            requeue = earliest(requeue, next);
        }
        Ok(requeue)
    }

    /// Sets the DNS state the Hairpin statuses report, when `primary`.
    fn dns_state(&mut self, primary: bool, state: DnsState) {
        if primary {
            self.memory.dns_state = state;
        }
    }

    /// One DNS key: written when it differs, guarded against a write fight per key. The
    /// `primary` (CoreDNS) write decides the DNS state the Hairpin statuses report.
    async fn apply_write(
        &mut self,
        plan: &Plan,
        dns: &DnsChange,
        key: DnsKey<'_>,
    ) -> Result<Option<Instant>, Error> {
        let DnsKey {
            write,
            edit,
            primary,
        } = key;
        let target = write.target();
        let Some(edit) = edit else {
            self.dns_state(primary, DnsState::InPlace { wrote: false });
            if self.memory.fights.held(&target, Instant::now()) {
                execute(&self.ctx, decide::dns_fight_over(write)).await;
            }
            return Ok(None);
        };
        if let Decision::BackedOff(until) = self.memory.fights.decide(&target, Instant::now()) {
            self.dns_state(primary, decide::dns_backed_off(write));
            return Ok(Some(until));
        }
        let outcome = match write_key(&self.ctx.client, &edit).await {
            Ok(outcome) => outcome,
            // Not leading any more: not a failure of the DNS write.
            Err(err) if crate::gate::is_withheld(&err) => return Err(err),
            Err(err) => {
                let (verdict, state) = decide::dns_write_failed(write, &err);
                self.dns_state(primary, state);
                self.follow(verdict).await;
                return Err(err);
            }
        };
        let (after, managed_fields) = match outcome {
            KeyOutcome::Written {
                after,
                managed_fields,
                ..
            } => (after, managed_fields),
            KeyOutcome::Unchanged { .. } => {
                self.dns_state(primary, DnsState::InPlace { wrote: false });
                return Ok(None);
            }
            KeyOutcome::ConfigMapMissing => {
                self.dns_state(primary, decide::dns_config_map_missing(write));
                return Ok(None);
            }
        };
        self.dns_state(primary, DnsState::InPlace { wrote: true });
        self.ctx.count_writes(1);
        tracing::info!(configmap = %write.config_map, key = %write.key, entries = dns.entries.len(), "DNS change written");
        let observation = self.memory.fights.written(&target, after, Instant::now());
        let writer = last_writer(&managed_fields);
        let written = DnsWritten {
            dns,
            write,
            observation,
            managed_fields: &managed_fields,
            writer: writer.as_deref(),
            coredns: &plan.coredns,
        };
        let verdict = decide::dns_written(
            &written,
            &self.config.planner,
            self.config.fight.window,
            Instant::now(),
        );
        Ok(self.follow(verdict).await)
    }
}
