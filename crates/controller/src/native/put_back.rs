//! The native cure's put-backs: `ipMode` put back as it was after a failed cure (or a dropped
//! write, or a cure no longer wanted), read back, and kept at until the API server's answer
//! shows it (issue 45 item 2): a refusal is retried with backoff and reported meanwhile.

use std::collections::BTreeMap;
use std::time::Instant;

use hairpin_planner::ObjectRef;
use hairpin_planner::escape;
use hairpin_planner::native::{IpModeWas, NativeRecord};

use super::NativeCurer;
use super::state::{self, fight_target};
use super::status::{Written, restore_ip_modes};
use crate::error::{is_conflict, is_not_found};
use crate::report::reason;

impl NativeCurer<'_> {
    /// Puts each IP's `ipMode` back as it was (only where it is still `Proxy`), read back.
    /// `None` when the API server's answer shows it (or nothing was left to put back, or the
    /// Service is gone); else why not, in words: a 409 (another writer won the race), an
    /// answer still saying `Proxy` (an admission webhook, another writer), any other error.
    async fn restore(
        &mut self,
        service: &ObjectRef,
        uid: &str,
        original: &[IpModeWas],
        why: &str,
    ) -> Option<String> {
        let modes: BTreeMap<String, Option<String>> = original
            .iter()
            .map(|was| (was.ip.clone(), was.ip_mode.clone()))
            .collect();
        match restore_ip_modes(&self.ctx.client, service, uid, &modes).await {
            Ok(Written::Applied(_)) => {
                self.ctx.metrics.ip_mode_write("restore");
                // Not a revert of hairpin's value: the fight count starts over.
                self.fights
                    .written(&fight_target(service), None, Instant::now());
                tracing::info!(service = %service, why, "ipMode put back");
                let note = format!("hairpin put ipMode back as it was: {why}");
                self.on_service(service, uid, true, reason::IP_MODE_RESTORED, note)
                    .await;
                None
            }
            Ok(Written::NotApplied(_)) => {
                self.ctx.metrics.ip_mode_write("restore");
                Some("the API server's answer still says Proxy (an admission webhook or another writer?)".to_owned())
            }
            Ok(Written::Nothing) => None,
            Err(err) if is_not_found(&err) => None,
            Err(err) if is_conflict(&err) => Some(
                "the API server answered 409 Conflict (another writer changed the status since it was read)"
                    .to_owned(),
            ),
            Err(err) => Some(format!(
                "the API server refused it: {}",
                escape::text(&err.to_string())
            )),
        }
    }

    /// Puts `service`'s `ipMode` back ([`Self::restore`]) and keeps at it: a put-back refused
    /// or not applied is tried again, backing off ([`state::put_back_wait`]), until the API
    /// server's answer shows it; meanwhile the entry of `record` says why
    /// ([`NativeEntry::put_back`]), a Warning Event too, and the metric
    /// `ip_mode_put_backs_pending` counts it. A try not due yet is skipped (`false`). Returns
    /// whether it is applied.
    pub(super) async fn put_back(
        &mut self,
        record: &mut NativeRecord,
        service: &ObjectRef,
        uid: &str,
        original: &[IpModeWas],
        why: &str,
    ) -> bool {
        let key = service.to_string();
        if self
            .mem
            .put_backs
            .get(&key)
            .is_some_and(|(_, next)| Instant::now() < *next)
        {
            return false;
        }
        let Some(refused) = self.restore(service, uid, original, why).await else {
            self.mem.put_backs.remove(&key);
            state::put_back_done(record, &key);
            self.count_put_backs();
            return true;
        };
        let refusals = self.mem.put_backs.get(&key).map_or(0, |(n, _)| *n) + 1;
        let wait = state::put_back_wait(refusals);
        self.mem
            .put_backs
            .insert(key.clone(), (refusals, Instant::now() + wait));
        state::put_back_pending(record, &key, &refused);
        self.count_put_backs();
        tracing::warn!(service = %service, refusals, retry_in = ?wait, why = %refused, "ipMode put back, not applied");
        let note = format!(
            "hairpin put ipMode back ({why}), but {refused}; ipMode: Proxy is still on the status: tried again in {wait:?} ({refusals} refused so far)"
        );
        self.on_service(service, uid, true, reason::IP_MODE_NOT_RESTORED, note)
            .await;
        false
    }

    /// The put-backs not applied yet, into the metric.
    fn count_put_backs(&self) {
        let pending = i64::try_from(self.mem.put_backs.len()).unwrap_or(i64::MAX);
        self.ctx.metrics.ip_mode_put_backs_pending.set(pending);
    }

    /// When the next refused put-back is due.
    pub(super) fn next_put_back(&self) -> Option<Instant> {
        self.mem.put_backs.values().map(|(_, next)| *next).min()
    }
}
