//! The node agents' reports taken into the record: where they report
//! ([`super::NativeParams::node_reports`]), a cure of `auto` that a node proved not honoured
//! for its current attempt goes `failed`, the node named with what it saw. Nothing is written
//! to the status here: the plan made from the same reports already keeps the load balancer's
//! DNS rules (applied after this, in the same reconcile), and the next plan puts `ipMode`
//! back ([`hairpin_planner::native::NativeAction::PutBack`]): make before break.

use std::time::Instant;

use hairpin_planner::native::{IpModeWas, NativeRecord, ProbeSpec, ProbeState};
use hairpin_planner::nodes::{NodesVerdict, verdict};
use hairpin_planner::{ClusterSnapshot, ObjectRef, Plan};

use super::NativeCurer;
use super::state::{self, Now, forced_native};
use crate::report::reason;

impl NativeCurer<'_> {
    /// What the node agents (and this controller's later re-probes) need to prove the attempt
    /// started `since` on `ips`: written with the record, before the status.
    pub(super) fn probe_spec(
        &self,
        plan: &Plan,
        service: &ObjectRef,
        ips: &[IpModeWas],
        since: &str,
    ) -> ProbeSpec {
        ProbeSpec {
            attempt: since.to_owned(),
            targets: self
                .probe_setup(plan, service, ips, "proof")
                .map(|(targets, _)| targets)
                .unwrap_or_default(),
            receiver: self
                .mem
                .receivers
                .get(&service.to_string())
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// Each cure (`probing` or `proven`, not forced native) that a node reported failed for
    /// its current attempt goes `failed`, and the probe running for it stops. Returns when to
    /// look at the reports again (a heartbeat growing old is no event), while a cure is held
    /// by them.
    pub(super) async fn take_node_reports(
        &mut self,
        record: &mut NativeRecord,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
    ) -> Option<Instant> {
        let max_age = self.params.node_reports?;
        let reports = snapshot.node_probes.as_deref()?;
        // A cure recorded before the record kept what the agents need: filled in, its attempt
        // fixed, so that the agents can prove it too.
        for (key, entry) in &mut record.load_balancers {
            let Some((namespace, name)) = key.split_once('/') else {
                continue;
            };
            if entry.probe.targets.is_empty()
                && matches!(entry.state, ProbeState::Probing | ProbeState::Proven)
            {
                let service = ObjectRef::new(namespace, name);
                let attempt = entry.attempt().to_owned();
                entry.probe = self.probe_spec(plan, &service, &entry.original, &attempt);
            }
        }
        let mut held = false;
        let mut failed = Vec::new();
        self.mem.settling.retain(|_, until| *until > Instant::now());
        for (key, entry) in &record.load_balancers {
            let Some((namespace, name)) = key.split_once('/') else {
                continue;
            };
            let service = ObjectRef::new(namespace, name);
            if !matches!(entry.state, ProbeState::Probing | ProbeState::Proven)
                || forced_native(plan, &service)
            {
                continue;
            }
            held = true;
            if let NodesVerdict::Failed(bar) =
                verdict((key, &entry.uid, entry.attempt()), &snapshot.nodes, reports)
            {
                failed.push((service, entry.uid.clone(), bar, entry.state));
            }
        }
        for (service, uid, bar, was) in failed {
            let key = service.to_string();
            if was == ProbeState::Proven {
                // The DNS rules may have gone: they come back now, and `ipMode` is put back
                // once they have reached the pods (make before break).
                self.mem
                    .settling
                    .insert(key.clone(), Instant::now() + self.params.dns_settle);
            }
            self.probes.stop(&key);
            let why = format!(
                "ipMode: Proxy is not honoured on node {} ({}): the DNS cure is back, then ipMode is put back",
                bar.node, bar.why
            );
            tracing::warn!(service = %key, node = %bar.node, why = %bar.why, "a node agent's probe failed: the native cure ends");
            state::fight_lost(record, &key, &why, &self.mem.data_plane.0, &Now::read());
            self.ctx.metrics.native_verdict("failed");
            self.on_service(&service, &uid, true, reason::NATIVE_NOT_ON_EVERY_NODE, why)
                .await;
        }
        // A third of the age a report may have: an agent that stopped is noticed in time.
        let settled = self.mem.settling.values().min().copied();
        super::earliest(held.then(|| Instant::now() + max_age / 3), settled)
    }

    /// Whether the put-back of `key` waits for the DNS rules brought back by a node's failure.
    pub(super) fn put_back_held(&self, key: &str) -> bool {
        self.mem
            .settling
            .get(key)
            .is_some_and(|until| *until > Instant::now())
    }
}
