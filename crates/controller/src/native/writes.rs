//! The native cure's writes from a plan: `ipMode: Proxy` set (after the baseline showed the
//! problem, the record first), the fight guard over another writer's reverts, a dropped field
//! (`unsupported`), the status put back, and the record.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hairpin_planner::escape;
use hairpin_planner::native::{IP_MODE_PROXY, IpModeWas, NATIVE_KEY, NativeRecord, ingress_writer};
use hairpin_planner::{ClusterSnapshot, ObjectRef, Plan};
use k8s_openapi::api::core::v1::Service;

use super::probe::Proof;
use super::state::{self, Now, SetStep, fight_target};
use super::status::{Written, status_ingress, write_ip_modes};
use super::{NativeCurer, SHOWN_FOR};
use crate::Error;
use crate::apply::write_key;
use crate::edits::KeyEdit;
use crate::error::{is_conflict, is_not_found};
use crate::fight::{Decision, Observation};
use crate::metrics::WriterLabels;
use crate::report::reason;

/// kube-proxy's default minimum time between two syncs once its burst of two is spent
/// (`--iptables-min-sync-period`, `minSyncPeriod` of every mode; `pkg/util/async`'s
/// BoundedFrequencyRunner): the least window in which in-cluster clients are short-circuited
/// after a rebuild of the status that kube-proxy applied.
const KUBE_PROXY_MIN_SYNC: Duration = Duration::from_secs(1);

impl NativeCurer<'_> {
    /// Sets `ipMode: Proxy`. A new attempt proves the problem first (the baseline, in a
    /// task: nothing is written until it showed); then the record (so that uninstall knows
    /// what to put back), the status, read back, and the probe (unless proven).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn set_proxy(
        &mut self,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
        record: &mut NativeRecord,
        service: &ObjectRef,
        uid: &str,
        ips: &[IpModeWas],
        proven: bool,
    ) -> Result<(), Error> {
        let key = service.to_string();
        let step = state::set_step(record, &key, uid, ips, proven);
        let reassert = match step {
            SetStep::Skip => return Ok(()),
            SetStep::Reassert => true,
            SetStep::Attempt => false,
        };
        let mut skipped = Vec::new();
        if !reassert {
            let Some(left_out) = self.take_shown(&key, uid) else {
                self.start_baseline(plan, service, uid, ips);
                return Ok(());
            };
            skipped = left_out;
        }
        // The IPs the baseline could not reach stay VIP (their names on the DNS cure).
        let ips: Vec<IpModeWas> = ips
            .iter()
            .filter(|was| !skipped.contains(&was.ip))
            .cloned()
            .collect();
        let ips = ips.as_slice();
        if ips.is_empty() {
            return Ok(());
        }
        if !self
            .may_write(snapshot, record, service, uid, reassert)
            .await
        {
            return Ok(());
        }
        // IPs the status no longer has (the address changed) are stale.
        let status_ips: Option<Vec<&str>> = snapshot
            .service(&service.namespace, &service.name)
            .map(|svc| {
                status_ingress(svc)
                    .iter()
                    .filter_map(|e| e.ip.as_deref())
                    .collect()
            });
        let now = Now::read();
        state::begin_write(record, &key, uid, ips, step, status_ips.as_deref(), &now);
        if let Some(entry) = record.load_balancers.get_mut(&key)
            && step == SetStep::Attempt
        {
            entry.skipped = skipped.clone();
            entry.probe = self.probe_spec(plan, service, &entry.original, &entry.since);
        }
        let snapshot_record = record.clone();
        self.write_record(&snapshot_record, &NativeRecord::default())
            .await?;
        let modes: BTreeMap<String, Option<String>> = ips
            .iter()
            .map(|was| (was.ip.clone(), Some(IP_MODE_PROXY.to_owned())))
            .collect();
        let stored = match write_ip_modes(&self.ctx.client, service, uid, &modes).await {
            Ok(Written::Applied(stored)) => stored,
            Ok(Written::Nothing) => return Ok(()),
            Ok(Written::NotApplied(stored)) => {
                return self.dropped(record, service, uid, &stored).await;
            }
            // Another writer changed the status between the read and the write: next round.
            Err(err) if is_conflict(&err) || is_not_found(&err) => return Ok(()),
            Err(err) => return Err(Error::kube(format!("set ipMode on Service {service}"), err)),
        };
        self.ctx
            .metrics
            .ip_mode_write(if reassert { "reassert" } else { "set" });
        drop(stored);
        let ip_list: Vec<&str> = ips.iter().map(|w| w.ip.as_str()).collect();
        let note = if reassert {
            self.reasserted(snapshot, service, &ip_list)
        } else {
            let left_out = if skipped.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} cannot be reached from the controller and stays VIP (the names keep the DNS cure)",
                    skipped.join(", ")
                )
            };
            format!(
                "hairpin set ipMode: Proxy on {} (native cure: a request without a header went unanswered before) and probes the address from inside the cluster; DNS stays until the probe succeeds{left_out}",
                ip_list.join(", ")
            )
        };
        tracing::info!(service = %service, ips = ?ip_list, reasserted = reassert, "ipMode: Proxy set");
        let event = if reassert {
            reason::IP_MODE_REASSERTED
        } else {
            reason::IP_MODE_SET
        };
        self.on_service(service, uid, false, event, note).await;
        if !reassert {
            self.start_probe(
                plan,
                service,
                uid,
                ips,
                Proof::AfterWrite,
                Default::default(),
            );
        }
        Ok(())
    }

    /// The note of a re-assertion over another writer's rebuild of the status (a cloud
    /// controller syncing the Service after a spec change): the writer, the time from its
    /// write (by its managed fields' one-second time) to now, also into the metric
    /// `ip_mode_reassert_window_seconds`, and the window the in-cluster clients see, which is
    /// kube-proxy's: from each node's sync of the rebuild to its sync of the re-assertion, at
    /// least [`KUBE_PROXY_MIN_SYNC`] apart once kube-proxy's burst of two syncs is spent (the
    /// rebuild's sync usually spends it), so a re-assertion within that time does not lengthen
    /// it (measured: `native_safety` scenario k).
    fn reasserted(&self, snapshot: &ClusterSnapshot, service: &ObjectRef, ips: &[&str]) -> String {
        let written = snapshot
            .service(&service.namespace, &service.name)
            .and_then(hairpin_planner::native::ingress_written);
        let Some((writer, at)) = written else {
            return format!(
                "another writer put the status back without ipMode: Proxy; hairpin set it again on {}",
                ips.join(", ")
            );
        };
        let writer = escape::text(writer);
        let window = Now::read().since(&at);
        if let Some(window) = window {
            self.ctx
                .metrics
                .ip_mode_reassert_window
                .observe(window.as_secs_f64());
        }
        let clients = window.map_or(KUBE_PROXY_MIN_SYNC, |w| w.max(KUBE_PROXY_MIN_SYNC));
        let window = window.map_or_else(
            || "an unknown time".to_owned(),
            |w| format!("about {:.1} s", w.as_secs_f64()),
        );
        tracing::info!(service = %service, writer = %writer, window = %window, "ipMode: Proxy re-asserted over another writer's rebuild");
        format!(
            "{writer} rebuilt the status without ipMode: Proxy (a cloud controller syncing the Service after a change); hairpin set it again on {} {window} after that write (at {}, one-second resolution). In-cluster clients of these names are short-circuited without a header from each node's kube-proxy sync of that write to its sync of this one: about {:.1} s (kube-proxy syncs at most twice in a burst, then once per its min sync period, 1 s by default)",
            ips.join(", "),
            escape::text(&at),
            clients.as_secs_f64()
        )
    }

    /// Whether the baseline showed the problem of `key` (uid `uid`) recently: taken once.
    /// Returns the IPs it left out (unreachable from here).
    pub(super) fn take_shown(&mut self, key: &str, uid: &str) -> Option<Vec<String>> {
        self.mem
            .shown
            .remove(key)
            .filter(|(shown_uid, at, _)| shown_uid == uid && at.elapsed() < SHOWN_FOR)
            .map(|(_, _, left_out)| left_out)
    }

    /// Before writing `ipMode: Proxy` (again, over another writer's status without it):
    /// counts the revert (per writer), and when that writer keeps doing it
    /// (`--fight-threshold` times within `--fight-window`), stops: the entry goes `failed`
    /// (the load balancer is on the DNS cure; it is tried again after the backoff), with a
    /// Warning Event naming the writer. Returns whether to write.
    pub(super) async fn may_write(
        &mut self,
        snapshot: &ClusterSnapshot,
        record: &mut NativeRecord,
        service: &ObjectRef,
        uid: &str,
        reassert: bool,
    ) -> bool {
        let target = fight_target(service);
        let now = Instant::now();
        if let Decision::BackedOff(_) = self.fights.decide(&target, now) {
            return false;
        }
        // Writing again the value hairpin wrote last: someone removed it (a revert).
        let observation = self
            .fights
            .written(&target, Some(IP_MODE_PROXY.into()), now);
        let writer = snapshot
            .service(&service.namespace, &service.name)
            .and_then(ingress_writer)
            .map_or_else(
                || "another writer".to_owned(),
                |w| escape::text(w).into_owned(),
            );
        let (count, backoff) = match observation {
            Observation::Normal => return true,
            Observation::Reverted { .. } => {
                if reassert {
                    self.count_revert(&writer);
                }
                return true;
            }
            Observation::Fight { count, backoff } => (count, backoff),
        };
        self.count_revert(&writer);
        let why = format!(
            "{writer} removed the ipMode: Proxy hairpin set {count} times within {:?} (a status fight: MetalLB or a cloud controller rebuilds the status without it); hairpin stopped, the load balancer is on the DNS cure, and native is tried again after the backoff",
            self.fights.params_of(&target).window
        );
        tracing::warn!(service = %service, writer = %writer, reverts = count, backoff = ?backoff, "status fight over ipMode; backing off");
        let key = service.to_string();
        state::fight_lost(record, &key, &why, &self.mem.data_plane.0, &Now::read());
        self.probes.stop(&service.to_string());
        self.ctx.metrics.native_verdict("failed");
        self.on_service(service, uid, true, reason::IP_MODE_FIGHT, why)
            .await;
        false
    }

    pub(super) fn count_revert(&self, writer: &str) {
        self.ctx
            .metrics
            .ip_mode_reverts
            .get_or_create(&WriterLabels {
                writer: writer.to_owned(),
            })
            .inc();
    }

    /// The API server's answer to a write of `ipMode: Proxy` does not hold it: the server
    /// does not support or allow it. Recorded `unsupported` with its version; not tried again
    /// until that changes.
    pub(super) async fn dropped(
        &mut self,
        record: &mut NativeRecord,
        service: &ObjectRef,
        uid: &str,
        stored: &Service,
    ) -> Result<(), Error> {
        // Anything the write did change goes back (an IP that did keep `Proxy`).
        let kept: Vec<&str> = status_ingress(stored)
            .iter()
            .filter(|e| e.ip_mode.as_deref() == Some(IP_MODE_PROXY))
            .filter_map(|e| e.ip.as_deref())
            .collect();
        self.ctx.metrics.ip_mode_write("set");
        let version = self.server_version().await;
        let shown = if version.is_empty() {
            "version unknown".to_owned()
        } else {
            escape::text(&version).into_owned()
        };
        let why = format!(
            "the API server ({shown}) dropped the ipMode: Proxy hairpin wrote: it is older than 1.30, or its feature gate LoadBalancerIPMode is off; not tried again until its version changes"
        );
        tracing::warn!(service = %service, version = %version, "the API server dropped ipMode");
        let key = service.to_string();
        let original = state::dropped(record, &key, &why, &version, &Now::read());
        self.ctx.metrics.native_verdict("unsupported");
        self.on_service(service, uid, true, reason::IP_MODE_DROPPED, why.clone())
            .await;
        if !kept.is_empty() {
            self.put_back(record, service, uid, &original, &why).await;
        }
        Ok(())
    }

    /// Writes the record when it differs from `before` (the snapshot's).
    pub(super) async fn write_record(
        &mut self,
        record: &NativeRecord,
        before: &NativeRecord,
    ) -> Result<(), Error> {
        if record == before {
            return Ok(());
        }
        let value = (!record.load_balancers.is_empty()).then(|| record.to_json());
        let edit = KeyEdit {
            ours_only: true,
            ..KeyEdit::set(
                &self.ctx.planner.namespace,
                &self.ctx.planner.native_config_map,
                NATIVE_KEY,
                value,
            )
        };
        write_key(&self.ctx.client, &edit).await?;
        self.mem.written = Some((record.clone(), Instant::now()));
        Ok(())
    }
}
