//! The native cure's writes: `ipMode: Proxy` on a load balancer Service's status (the status
//! subresource, replaced with the resourceVersion just read, only the `ipMode` of the IPs the
//! plan names changed, and read back from the API server's answer), the record of what
//! hairpin did in its `hairpin-native` ConfigMap (written *before* each status write, so that
//! uninstall can always put the status back), and the probes ([`probe`]) that prove the
//! problem before the write and the cure after it.
//!
//! A new attempt first probes every PROXY port without a header ([`baseline`]): answered on
//! every attempt, the load balancer needs no cure here (`not-needed`, nothing written);
//! answered on some, an answer later would prove nothing (`failed`, nothing written). Only
//! when every attempt went unanswered is `ipMode: Proxy` written. The API server's answer
//! must hold it (an API server older than 1.30 or with the gate `LoadBalancerIPMode` off drops
//! it: `unsupported`, with its version, not tried again until that changes). Then the proof
//! ([`prove`]): every port answered several times in a row through the load balancer within
//! the deadline, the record says `proven` and the next plan drops the load balancer's DNS
//! rules (make before break). Not proven (or a definite failure repeated, which ends the probe
//! at once): the status is put back at once, the record says `failed` with the outcome per
//! port, and DNS stays; the cure is tried again after `retry`, doubling with each failure up
//! to `retry_cap`, or at once when kube-proxy or the CNI changed.
//!
//! A proven cure is not trusted by a controller that did not prove it: at start (and on a new
//! leader) it goes back to `probing` (DNS rules back) and is probed again; it is also probed
//! again on the schedule and after a data-plane change. A writer that keeps removing the
//! `ipMode` (MetalLB, an old cloud controller) is detected like a write fight: named in an
//! Event, backed off, and the load balancer stays on the DNS cure.

mod probe;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hairpin_planner::escape;
use hairpin_planner::native::{
    IP_MODE_PROXY, IpModeWas, NATIVE_KEY, NativeAction, NativeEntry, NativeRecord, ProbeState,
    ingress_writer, taken_over,
};
use hairpin_planner::{ClusterSnapshot, FIELD_MANAGER, LoadBalancerPlan, ObjectRef, Plan};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;

pub use probe::{
    Attempt, Baseline, Observer, ProbeTarget, ProbeVerdict, baseline, probe_once, prove,
};

use crate::Error;
use crate::apply::write_key;
use crate::context::Context;
use crate::edits::KeyEdit;
use crate::error::{is_conflict, is_not_found};
use crate::fight::{Decision, FightParams, Fights, Observation};
use crate::metrics::{ProbeLabels, WriterLabels};
use crate::report::{object_ref, reason};

/// Settings of the native cure's probe.
#[derive(Clone, Debug)]
pub struct NativeParams {
    /// How long after setting `ipMode: Proxy` the probe may take to succeed (kube-proxy
    /// follows a status change within its sync period, 1 s by default).
    pub deadline: Duration,
    /// Between two probe rounds (a quarter of it between the baseline's rounds, and once every
    /// port answers: the answers that prove the cure follow in a short window).
    pub interval: Duration,
    /// One connection's connect and answer timeout.
    pub timeout: Duration,
    /// After a failed probe, how long before the cure is tried again.
    pub retry: Duration,
    /// How often a proven cure is probed again (a kube-proxy or CNI upgrade may stop
    /// honouring `ipMode`): a failed re-probe puts `ipMode` back and brings the DNS cure back.
    pub reprobe: Duration,
    /// After the kube-proxy or CNI DaemonSet changed ([`hairpin_planner::native::data_plane`]),
    /// how long before a proven cure is probed again: the time for the new pods to roll out.
    pub settle: Duration,
    /// Answers in a row on every port that prove the cure; also the attempts per port of
    /// the probe without a header before any write, and the definite failures in a row
    /// (refused, unreachable) that end a proof early.
    pub answers: u32,
    /// The longest wait between two tries of a cure that keeps failing (the wait starts at
    /// `retry` and doubles with each failure).
    pub retry_cap: Duration,
    /// How often the API server's version is read again: it keys `unsupported` verdicts, and
    /// a k3s or RKE2 server embeds its kube-proxy (part of the data plane).
    pub version_every: Duration,
}

impl Default for NativeParams {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(10),
            interval: Duration::from_millis(200),
            timeout: Duration::from_secs(1),
            retry: Duration::from_secs(600),
            reprobe: Duration::from_secs(1800),
            settle: Duration::from_secs(120),
            answers: 3,
            retry_cap: Duration::from_secs(24 * 3600),
            version_every: Duration::from_secs(60),
        }
    }
}

/// A port is probed with TLS when it is 443 or 8443, or named `https` or `tls`-something.
fn is_tls(port: u16, name: Option<&str>) -> bool {
    let name = name.unwrap_or_default().to_ascii_lowercase();
    matches!(port, 443 | 8443) || name.contains("https") || name.starts_with("tls")
}

/// Every PROXY port of every IP of `ips`, with the first exact hostname of the load balancer.
pub fn targets(lb: &LoadBalancerPlan, ips: &[IpModeWas]) -> Vec<ProbeTarget> {
    let host = lb
        .hostnames
        .iter()
        .map(|h| h.name.as_str())
        .find(|h| !h.starts_with("*."))
        .unwrap_or_default()
        .to_owned();
    let mut out = Vec::new();
    for ip in ips.iter().filter_map(|was| was.ip.parse::<IpAddr>().ok()) {
        for port in lb
            .load_balancer
            .ports
            .iter()
            .filter(|p| p.proxy_protocol.is_some())
        {
            out.push(ProbeTarget {
                addr: SocketAddr::new(ip, port.port),
                tls: is_tls(port.port, port.name.as_deref()),
                host: if host.is_empty() {
                    ip.to_string()
                } else {
                    host.clone()
                },
            });
        }
    }
    out
}

/// The status of `svc` with the `ipMode` of each IP in `modes` set as given (`None`: the
/// field removed, so that the API server's default applies). `None` when nothing changes.
pub fn with_ip_modes(svc: &Service, modes: &BTreeMap<String, Option<String>>) -> Option<Service> {
    let mut svc = svc.clone();
    let ingress = svc
        .status
        .as_mut()?
        .load_balancer
        .as_mut()?
        .ingress
        .as_mut()?;
    let mut changed = false;
    for entry in ingress.iter_mut() {
        let Some(mode) = entry.ip.as_ref().and_then(|ip| modes.get(ip)) else {
            continue;
        };
        if entry.ip_mode != *mode {
            entry.ip_mode.clone_from(mode);
            changed = true;
        }
    }
    changed.then_some(svc)
}

/// What a status write did, read back from the API server's answer.
#[derive(Debug)]
pub enum Written {
    /// Nothing to change (or the Service is gone, or another one now).
    Nothing,
    /// Written, and the answer holds every `ipMode` asked for.
    Applied(Box<Service>),
    /// Written, but the answer does not hold them (the server dropped or changed them).
    NotApplied(Box<Service>),
}

/// The IP entries of a Service's status.
fn status_ingress(svc: &Service) -> &[LoadBalancerIngress] {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default()
}

/// Whether `svc`'s status says the `ipMode` of every IP of `modes` as asked (`None`: unset,
/// or the server's default `VIP`).
fn holds(svc: &Service, modes: &BTreeMap<String, Option<String>>) -> bool {
    let ingress = status_ingress(svc);
    modes.iter().all(|(ip, wanted)| {
        ingress
            .iter()
            .filter(|e| e.ip.as_deref() == Some(ip))
            .all(|e| match wanted {
                Some(mode) => e.ip_mode.as_deref() == Some(mode),
                None => e.ip_mode.as_deref().is_none_or(|m| m == "VIP"),
            })
    })
}

/// Replaces the status of `service` (uid `uid`) with the `ipMode`s given, guarded by the
/// resourceVersion just read, and reads the answer back.
pub async fn write_ip_modes(
    client: &kube::Client,
    service: &ObjectRef,
    uid: &str,
    modes: &BTreeMap<String, Option<String>>,
) -> Result<Written, kube::Error> {
    replace_ip_modes(client, service, uid, |_| modes.clone()).await
}

/// Reads `service`, and when it is still the one with `uid`, replaces its status with the
/// `ipMode`s `modes` picks from what it reads, and reads the answer back.
async fn replace_ip_modes(
    client: &kube::Client,
    service: &ObjectRef,
    uid: &str,
    modes: impl FnOnce(&Service) -> BTreeMap<String, Option<String>>,
) -> Result<Written, kube::Error> {
    let api: Api<Service> = Api::namespaced(client.clone(), &service.namespace);
    let Some(current) = api.get_opt(&service.name).await? else {
        return Ok(Written::Nothing);
    };
    if current.metadata.uid.as_deref() != Some(uid) {
        return Ok(Written::Nothing);
    }
    let modes = modes(&current);
    let Some(desired) = with_ip_modes(&current, &modes) else {
        return Ok(Written::Nothing);
    };
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    let stored = api.replace_status(&service.name, &params, &desired).await?;
    Ok(if holds(&stored, &modes) {
        Written::Applied(Box::new(stored))
    } else {
        Written::NotApplied(Box::new(stored))
    })
}

/// A probe's result, waiting for the next reconcile.
enum Finished {
    /// Before any write, for the `ips` of the plan's `SetProxy`.
    Baseline {
        uid: String,
        ips: Vec<IpModeWas>,
        baseline: Baseline,
    },
    /// After the write.
    Proof { uid: String, verdict: ProbeVerdict },
}

type Verdicts = Arc<Mutex<BTreeMap<String, Finished>>>;

/// How long a problem shown by the baseline is good for the write that follows it.
const SHOWN_FOR: Duration = Duration::from_secs(60);

/// The native cure's state between reconciles: the probes running, their verdicts, and when a
/// failed cure may be tried again.
pub(crate) struct NativeCurer {
    /// The loop's client, Events, metrics, planner settings and change signal.
    ctx: Arc<Context>,
    params: NativeParams,
    /// Verdicts of finished probes, by `namespace/name`.
    verdicts: Verdicts,
    /// Probes running, by `namespace/name`.
    running: BTreeMap<String, tokio::task::AbortHandle>,
    /// Load balancers whose problem the baseline showed, by `namespace/name`: uid and when.
    shown: BTreeMap<String, (String, Instant)>,
    /// The data plane ([`hairpin_planner::native::data_plane`], plus the API server's
    /// version) now, and since when this instance has seen it.
    data_plane: (String, Instant),
    /// The API server's `gitVersion`, and when it was read.
    server_version: Option<(String, Instant)>,
    /// The proven cures of the record were put to `probing` (this instance trusts no
    /// verdict it did not reach itself).
    started: bool,
    /// Writers that keep removing hairpin's `ipMode: Proxy`, per Service.
    fights: Fights,
    /// The record this instance wrote last, and when, until the snapshot shows it: a plan made
    /// from a cache that has not seen it yet (the status write's own event comes first) would
    /// repeat a write the record already says not to make.
    written: Option<(NativeRecord, Instant)>,
}

/// How long a snapshot may lag behind the record this instance wrote before it is trusted
/// all the same (someone else changed the record meanwhile: uninstall deleted it).
const RECORD_CACHE_LAG: Duration = Duration::from_secs(5);

impl Drop for NativeCurer {
    fn drop(&mut self) {
        for task in self.running.values() {
            task.abort();
        }
    }
}

fn now_rfc3339() -> String {
    Timestamp::now().to_string()
}

/// How long ago `rfc3339` was (`None`: unreadable, or in the future).
fn seconds_since(rfc3339: &str) -> Option<Duration> {
    let then: Timestamp = rfc3339.parse().ok()?;
    Duration::try_from(Timestamp::now().duration_since(then)).ok()
}

/// The wait after the `failures`-th failed attempt in a row: `retry`, doubling, capped.
pub fn backoff(params: &NativeParams, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    params
        .retry
        .saturating_mul(1u32 << doublings)
        .min(params.retry_cap.max(params.retry))
}

/// The target of the fight guard for a Service's `ipMode`.
fn fight_target(service: &ObjectRef) -> String {
    format!("Service {service} ipMode")
}

impl NativeCurer {
    pub(crate) fn new(ctx: &Arc<Context>, params: NativeParams, fight: FightParams) -> Self {
        let fights = Fights::new(fight);
        Self {
            ctx: ctx.clone(),
            params,
            verdicts: Arc::default(),
            running: BTreeMap::new(),
            shown: BTreeMap::new(),
            data_plane: (String::new(), Instant::now()),
            server_version: None,
            started: false,
            fights,
            written: None,
        }
    }

    /// An Event on the load balancer Service `service` (uid `uid`).
    async fn on_service(
        &self,
        service: &ObjectRef,
        uid: &str,
        warning: bool,
        reason: &'static str,
        note: String,
    ) {
        let regarding = object_ref(
            "Service",
            &service.namespace,
            &service.name,
            Some(uid.to_owned()),
        );
        self.ctx
            .events
            .publish(&regarding, warning, reason, note)
            .await;
    }

    /// The API server's `gitVersion`, read again when older than `version_every` (empty when
    /// it cannot be read).
    async fn server_version(&mut self) -> String {
        if let Some((version, at)) = &self.server_version
            && at.elapsed() < self.params.version_every
        {
            return version.clone();
        }
        let version = match self.ctx.client.apiserver_version().await {
            Ok(info) => info.git_version,
            Err(err) => {
                tracing::debug!(error = %err, "cannot read the API server's version");
                return self
                    .server_version
                    .as_ref()
                    .map(|(v, _)| v.clone())
                    .unwrap_or_default();
            }
        };
        self.server_version = Some((version.clone(), Instant::now()));
        version
    }

    /// The plan's status writes, the probes' verdicts and the record. Returns when to look
    /// again (a probe running, a failed cure due for another try).
    pub(crate) async fn apply(
        &mut self,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
    ) -> Result<Option<Instant>, Error> {
        let Ok(before) = NativeRecord::read(snapshot, &self.ctx.planner) else {
            // The plan warned; nothing is written while the record is not hairpin's.
            return Ok(None);
        };
        if let Some((written, at)) = &self.written {
            if *written != before && at.elapsed() < RECORD_CACHE_LAG {
                // The cache has not seen this instance's own last record yet: no status write
                // from a plan made without it; look again shortly.
                return Ok(Some(Instant::now() + self.params.interval));
            }
            self.written = None;
        }
        let mut record = before.clone();
        let server = self.server_version().await;
        let mut data_plane = hairpin_planner::native::data_plane(snapshot);
        if !server.is_empty() {
            if !data_plane.is_empty() {
                data_plane.push_str("; ");
            }
            data_plane.push_str(&format!("apiserver@{server}"));
        }
        if data_plane != self.data_plane.0 {
            self.data_plane = (data_plane, Instant::now());
        }
        if !self.started {
            self.started = true;
            self.distrust_at_start(plan, &mut record);
        }
        self.take_verdicts(&mut record, plan, snapshot).await?;
        let mut requeue = self.mark_due(plan, &mut record, &server);
        for action in &plan.native_actions {
            self.act(plan, snapshot, &mut record, action).await?;
        }
        let settling = self.reprobe_due(plan, &record);
        self.write_record(&record, &before).await?;
        if !self.running.is_empty() {
            requeue = Some(Instant::now() + self.params.interval);
        } else {
            requeue = earliest(requeue, settling);
        }
        Ok(requeue)
    }

    /// One status write of the plan.
    async fn act(
        &mut self,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
        record: &mut NativeRecord,
        action: &NativeAction,
    ) -> Result<(), Error> {
        match action {
            NativeAction::SetProxy {
                service,
                uid,
                ips,
                proven,
            } => {
                self.set_proxy(plan, snapshot, record, service, uid, ips, *proven)
                    .await
            }
            NativeAction::Restore {
                service,
                uid,
                original,
                reason,
            } => {
                let key = service.to_string();
                if let Some(task) = self.running.remove(&key) {
                    task.abort();
                }
                let mut applied = true;
                if let Some(uid) = uid {
                    applied = self.restore(service, uid, original, reason).await?;
                }
                // A restore that did not apply keeps the entry: tried again next time.
                if applied {
                    record.load_balancers.remove(&key);
                }
                Ok(())
            }
            NativeAction::Forget {
                service,
                uid,
                writer,
                reason,
            } => {
                tracing::warn!(service = %service, writer = %writer, "another writer set ipMode: Proxy itself; hairpin stepped back");
                if let Some(task) = self.running.remove(&service.to_string()) {
                    task.abort();
                }
                record.load_balancers.remove(&service.to_string());
                self.on_service(
                    service,
                    uid,
                    false,
                    reason::IP_MODE_HANDED_OVER,
                    reason.clone(),
                )
                .await;
                Ok(())
            }
        }
    }

    /// A new leader (or a restarted controller) trusts no proven cure it did not probe
    /// itself: each goes back to `probing` (the plan brings its DNS rules back) and is probed
    /// again at once; proven again, the DNS rules go.
    fn distrust_at_start(&mut self, plan: &Plan, record: &mut NativeRecord) {
        for (key, entry) in &mut record.load_balancers {
            let Some((namespace, name)) = key.split_once('/') else {
                continue;
            };
            if entry.state != ProbeState::Proven
                || forced_native(plan, &ObjectRef::new(namespace, name))
            {
                continue;
            }
            tracing::info!(service = %key, "a proven native cure is probed again at the controller's start before it is trusted");
            entry.state = ProbeState::Probing;
            entry.since = now_rfc3339();
            entry.reason = format!(
                "probed again at the controller's start before it is trusted (was: {})",
                entry.reason
            );
        }
    }

    /// Marks `due` the entries whose wait is over (the next plan proposes the cure again):
    /// a `failed` one after its backoff, or at once when the data plane changed since (the
    /// backoff starts over); a `not-needed` one after `retry`; an `unsupported` one once the
    /// API server's version changed. Returns when the next one will be due.
    fn mark_due(&self, plan: &Plan, record: &mut NativeRecord, server: &str) -> Option<Instant> {
        let mut next = None;
        for (key, entry) in &mut record.load_balancers {
            let Some((namespace, name)) = key.split_once('/') else {
                continue;
            };
            if entry.due || forced_native(plan, &ObjectRef::new(namespace, name)) {
                continue;
            }
            let wait = match entry.state {
                ProbeState::Failed => {
                    let current = &self.data_plane.0;
                    if !entry.data_plane.is_empty()
                        && !current.is_empty()
                        && entry.data_plane != *current
                    {
                        entry.failures = 0;
                        Duration::ZERO
                    } else {
                        backoff(&self.params, entry.failures)
                    }
                }
                ProbeState::NotNeeded => self.params.retry,
                ProbeState::Unsupported => {
                    entry.due = !server.is_empty() && server != entry.server_version;
                    // Its version is read again then.
                    next = earliest(next, Some(Instant::now() + self.params.version_every));
                    continue;
                }
                ProbeState::Probing | ProbeState::Proven => continue,
            };
            let elapsed = seconds_since(&entry.since).unwrap_or(wait);
            if elapsed >= wait {
                entry.due = true;
            } else {
                next = earliest(next, Some(Instant::now() + (wait - elapsed)));
            }
        }
        next
    }

    /// Sets `ipMode: Proxy`. A new attempt proves the problem first (the baseline, in a
    /// task: nothing is written until it showed); then the record (so that uninstall knows
    /// what to put back), the status, read back, and the probe (unless proven).
    #[allow(clippy::too_many_arguments)]
    async fn set_proxy(
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
        // An entry of another Service that had this name is not this one's.
        if record
            .load_balancers
            .get(&key)
            .is_some_and(|e| e.uid != uid)
        {
            record.load_balancers.remove(&key);
        }
        let existing = record.load_balancers.get(&key);
        // A verdict taken in this round already answered the plan's proposal.
        if existing.is_some_and(|e| {
            !e.due
                && matches!(
                    e.state,
                    ProbeState::NotNeeded | ProbeState::Unsupported | ProbeState::Failed
                )
        }) && !proven
        {
            return Ok(());
        }
        // Only IPs the cure already had are re-asserted; a new one (the address changed) is a
        // new attempt, proven first.
        let had_all = |e: &NativeEntry| {
            ips.iter()
                .all(|ip| e.original.iter().any(|o| o.ip == ip.ip))
        };
        let reassert = existing.is_some_and(|e| {
            !e.due && matches!(e.state, ProbeState::Probing | ProbeState::Proven) && had_all(e)
        }) || (proven && existing.is_none_or(had_all));
        if !reassert && !self.take_shown(&key, uid) {
            self.start_baseline(plan, service, uid, ips);
            return Ok(());
        }
        if !self
            .may_write(snapshot, record, service, uid, reassert)
            .await
        {
            return Ok(());
        }
        let entry = record
            .load_balancers
            .entry(key.clone())
            .or_insert_with(|| new_entry(uid));
        if !reassert {
            entry.state = ProbeState::Probing;
            entry.since = now_rfc3339();
            entry.reason.clear();
            entry.due = false;
            // IPs the status no longer has (the address changed) are stale.
            if let Some(svc) = snapshot.service(&service.namespace, &service.name) {
                let current: Vec<&str> = status_ingress(svc)
                    .iter()
                    .filter_map(|e| e.ip.as_deref())
                    .collect();
                entry
                    .original
                    .retain(|was| current.contains(&was.ip.as_str()));
            }
        }
        for was in ips {
            if !entry.original.iter().any(|o| o.ip == was.ip) {
                entry.original.push(was.clone());
            }
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
            format!(
                "another writer put the status back without ipMode: Proxy; hairpin set it again on {}",
                ip_list.join(", ")
            )
        } else {
            format!(
                "hairpin set ipMode: Proxy on {} (native cure: a request without a header went unanswered before) and probes the address from inside the cluster; DNS stays until the probe succeeds",
                ip_list.join(", ")
            )
        };
        tracing::info!(service = %service, ips = ?ip_list, reasserted = reassert, "ipMode: Proxy set");
        self.on_service(service, uid, false, reason::IP_MODE_SET, note)
            .await;
        if !reassert {
            self.start_probe(plan, service, uid, ips);
        }
        Ok(())
    }

    /// Whether the baseline showed the problem of `key` (uid `uid`) recently: taken once.
    fn take_shown(&mut self, key: &str, uid: &str) -> bool {
        self.shown
            .remove(key)
            .is_some_and(|(shown_uid, at)| shown_uid == uid && at.elapsed() < SHOWN_FOR)
    }

    /// Before writing `ipMode: Proxy` (again, over another writer's status without it):
    /// counts the revert (per writer), and when that writer keeps doing it
    /// (`--fight-threshold` times within `--fight-window`), stops: the entry goes `failed`
    /// (the load balancer is on the DNS cure; it is tried again after the backoff), with a
    /// Warning Event naming the writer. Returns whether to write.
    async fn may_write(
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
            self.fights.params().window
        );
        tracing::warn!(service = %service, writer = %writer, reverts = count, backoff = ?backoff, "status fight over ipMode; backing off");
        if let Some(entry) = record.load_balancers.get_mut(&service.to_string()) {
            entry.state = ProbeState::Failed;
            entry.since = now_rfc3339();
            entry.reason.clone_from(&why);
            entry.failures = entry.failures.saturating_add(1);
            entry.data_plane.clone_from(&self.data_plane.0);
            entry.due = false;
        }
        if let Some(task) = self.running.remove(&service.to_string()) {
            task.abort();
        }
        self.ctx.metrics.native_verdict("failed");
        self.on_service(service, uid, true, reason::IP_MODE_FIGHT, why)
            .await;
        false
    }

    fn count_revert(&self, writer: &str) {
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
    async fn dropped(
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
        let original = record
            .load_balancers
            .get(&service.to_string())
            .map(|e| e.original.clone())
            .unwrap_or_default();
        if let Some(entry) = record.load_balancers.get_mut(&service.to_string()) {
            entry.state = ProbeState::Unsupported;
            entry.since = now_rfc3339();
            entry.reason.clone_from(&why);
            entry.server_version = version;
            entry.due = false;
        }
        self.ctx.metrics.native_verdict("unsupported");
        self.on_service(service, uid, true, reason::IP_MODE_DROPPED, why.clone())
            .await;
        if !kept.is_empty() {
            self.restore(service, uid, &original, &why).await?;
        }
        Ok(())
    }

    /// Probes again every proven cure (of `auto`) whose verdict is older than `reprobe`, or was
    /// reached on another data plane than today's once the change is `settle` old (a kube-proxy
    /// or CNI upgrade may stop honouring `ipMode`); the status is left as it is meanwhile.
    /// Returns when a changed data plane will have settled, while it has not.
    ///
    /// A cure `probing` with no probe running here (this instance started, or became the
    /// leader, while its predecessor's probe ran; or a proven cure it does not trust yet) is
    /// probed too: otherwise it would stay `probing`, on the DNS cure, for good.
    fn reprobe_due(&mut self, plan: &Plan, record: &NativeRecord) -> Option<Instant> {
        let reprobe = self.params.reprobe;
        let (data_plane, seen) = (&self.data_plane.0, self.data_plane.1);
        let settled_at = seen + self.params.settle;
        let mut settling = None;
        let due: Vec<(ObjectRef, NativeEntry)> = record
            .load_balancers
            .iter()
            .filter_map(|(key, e)| {
                let (namespace, name) = key.split_once('/')?;
                Some((ObjectRef::new(namespace, name), e.clone()))
            })
            .filter(|(service, e)| match e.state {
                ProbeState::Probing => !e.due,
                ProbeState::Proven if forced_native(plan, service) => false,
                ProbeState::Proven => {
                    let changed = !e.data_plane.is_empty()
                        && !data_plane.is_empty()
                        && e.data_plane != *data_plane;
                    if changed && Instant::now() < settled_at {
                        settling = Some(settled_at);
                    }
                    (changed && Instant::now() >= settled_at)
                        || seconds_since(&e.since).is_some_and(|s| s >= reprobe)
                }
                ProbeState::Failed | ProbeState::NotNeeded | ProbeState::Unsupported => false,
            })
            .collect();
        for (service, entry) in due {
            tracing::debug!(service = %service, state = ?entry.state, "probing a native cure");
            self.start_probe(plan, &service, &entry.uid, &entry.original);
        }
        settling
    }

    /// The probe targets of `service`'s `ips`, and an observer counting `phase` attempts.
    fn probe_setup(
        &self,
        plan: &Plan,
        service: &ObjectRef,
        ips: &[IpModeWas],
        phase: &'static str,
    ) -> Option<(Vec<ProbeTarget>, Observer)> {
        let lb = plan
            .load_balancers
            .iter()
            .find(|lb| lb.load_balancer.service == *service)?;
        let metrics = self.ctx.metrics.clone();
        let observer: Observer = Arc::new(move |attempt: &Attempt, took: Duration| {
            metrics
                .native_probes
                .get_or_create(&ProbeLabels {
                    phase: phase.to_owned(),
                    outcome: attempt.label().to_owned(),
                })
                .inc();
            metrics.native_probe_duration.observe(took.as_secs_f64());
        });
        Some((targets(lb, ips), observer))
    }

    /// Runs `work` for `service` in a task (one at a time per Service); its result is taken
    /// at the next reconcile, which it triggers.
    fn spawn(
        &mut self,
        service: &ObjectRef,
        work: impl Future<Output = Finished> + Send + 'static,
    ) {
        let key = service.to_string();
        if self.running.contains_key(&key) {
            return;
        }
        let verdicts = self.verdicts.clone();
        let changed = self.ctx.changed.clone();
        let task_key = key.clone();
        let task = tokio::spawn(async move {
            let finished = work.await;
            verdicts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(task_key, finished);
            changed.notify_one();
        });
        self.running.insert(key, task.abort_handle());
    }

    fn start_probe(&mut self, plan: &Plan, service: &ObjectRef, uid: &str, ips: &[IpModeWas]) {
        if self.running.contains_key(&service.to_string()) {
            return;
        }
        let Some((targets, observer)) = self.probe_setup(plan, service, ips, "proof") else {
            return;
        };
        let params = self.params.clone();
        let uid = uid.to_owned();
        self.spawn(service, async move {
            let verdict = prove(targets, &params, Some(observer)).await;
            Finished::Proof { uid, verdict }
        });
    }

    fn start_baseline(&mut self, plan: &Plan, service: &ObjectRef, uid: &str, ips: &[IpModeWas]) {
        if self.running.contains_key(&service.to_string()) {
            return;
        }
        let Some((targets, observer)) = self.probe_setup(plan, service, ips, "baseline") else {
            return;
        };
        let params = self.params.clone();
        let uid = uid.to_owned();
        let ips = ips.to_vec();
        tracing::debug!(service = %service, "probing without a header before any change");
        self.spawn(service, async move {
            let baseline = baseline(&targets, &params, Some(observer)).await;
            Finished::Baseline { uid, ips, baseline }
        });
    }

    /// The finished probes' verdicts into the record.
    async fn take_verdicts(
        &mut self,
        record: &mut NativeRecord,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
    ) -> Result<(), Error> {
        let verdicts = std::mem::take(
            &mut *self
                .verdicts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for (key, finished) in verdicts {
            self.running.remove(&key);
            let Some((namespace, name)) = key.split_once('/') else {
                continue;
            };
            let service = ObjectRef::new(namespace, name);
            match finished {
                Finished::Baseline { uid, ips, baseline } => {
                    self.take_baseline(record, plan, &service, &uid, ips, baseline)
                        .await;
                }
                Finished::Proof { uid, verdict } => {
                    self.take_proof(record, plan, snapshot, &service, &uid, verdict)
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// The baseline's verdict: shown, the write may go ahead (at the next reconcile, with the
    /// plan's current IPs); answered, the entry says `not-needed`; unclear, `failed`. Neither
    /// writes the status.
    async fn take_baseline(
        &mut self,
        record: &mut NativeRecord,
        plan: &Plan,
        service: &ObjectRef,
        uid: &str,
        ips: Vec<IpModeWas>,
        baseline: Baseline,
    ) {
        let key = service.to_string();
        let (state, why, reason, verdict) = match baseline {
            Baseline::Shown => {
                tracing::info!(service = %key, "a request without a header went unanswered: the problem is shown; setting ipMode: Proxy");
                self.shown.insert(key, (uid.to_owned(), Instant::now()));
                return;
            }
            // Forced native: only an answer stops it (the cure would change nothing).
            Baseline::Unclear(why) if forced_native(plan, service) => {
                tracing::warn!(service = %key, why = %why, "the problem is not shown; ipMode: Proxy set anyway (--cure native)");
                self.shown.insert(key, (uid.to_owned(), Instant::now()));
                return;
            }
            Baseline::NotNeeded(why) => (
                ProbeState::NotNeeded,
                why,
                reason::NATIVE_NOT_NEEDED,
                "not-needed",
            ),
            Baseline::Unclear(why) => (
                ProbeState::Failed,
                why,
                reason::NATIVE_UNPROVABLE,
                "unprovable",
            ),
        };
        if record
            .load_balancers
            .get(&key)
            .is_some_and(|e| e.uid != uid)
        {
            record.load_balancers.remove(&key);
        }
        let entry = record
            .load_balancers
            .entry(key.clone())
            .or_insert_with(|| new_entry(uid));
        if entry.original.is_empty() {
            entry.original = ips;
        }
        entry.state = state;
        entry.since = now_rfc3339();
        entry.reason.clone_from(&why);
        entry.data_plane.clone_from(&self.data_plane.0);
        entry.due = false;
        if state == ProbeState::Failed {
            entry.failures = entry.failures.saturating_add(1);
        }
        let failures = entry.failures;
        self.ctx.metrics.native_verdict(verdict);
        let note = if state == ProbeState::NotNeeded {
            tracing::info!(service = %key, why = %why, "native cure not needed; nothing written");
            format!(
                "not needed: {why}; hairpin wrote no ipMode (the DNS cure stays); checked again after {:?}",
                self.params.retry
            )
        } else {
            tracing::warn!(service = %key, why = %why, "native cure cannot be proven; nothing written");
            format!(
                "native cure not tried: {why}; hairpin wrote no ipMode (the DNS cure stays); tried again after {:?}",
                backoff(&self.params, failures)
            )
        };
        let warning = state == ProbeState::Failed;
        self.on_service(service, uid, warning, reason, note).await;
    }

    /// A proof's verdict: proven (the DNS rules go at the next plan), or not (the status goes
    /// back at once unless native is forced, and the next try waits its backoff).
    async fn take_proof(
        &mut self,
        record: &mut NativeRecord,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
        service: &ObjectRef,
        uid: &str,
        verdict: ProbeVerdict,
    ) -> Result<(), Error> {
        let key = service.to_string();
        let Some(entry) = record.load_balancers.get_mut(&key) else {
            return Ok(());
        };
        if entry.uid != uid || entry.state == ProbeState::Failed {
            return Ok(());
        }
        entry.state = if verdict.proven {
            entry.failures = 0;
            ProbeState::Proven
        } else {
            entry.failures = entry.failures.saturating_add(1);
            ProbeState::Failed
        };
        entry.since = now_rfc3339();
        entry.reason = if verdict.proven {
            verdict.detail.clone()
        } else {
            format!("ipMode: Proxy was not honoured: {}", verdict.detail)
        };
        entry.data_plane.clone_from(&self.data_plane.0);
        entry.due = false;
        let failures = entry.failures;
        let original = entry.original.clone();
        if verdict.proven {
            self.ctx.metrics.native_verdict("proven");
            tracing::info!(service = %key, took = ?verdict.took, detail = %verdict.detail, "native cure proven");
            let note = format!(
                "ipMode: Proxy is honoured: in-cluster traffic to the load balancer crosses it ({:.1} s after the write: {}); its DNS rules are removed",
                verdict.took.as_secs_f64(),
                verdict.detail
            );
            self.on_service(service, uid, false, reason::NATIVE_PROVEN, note)
                .await;
            return Ok(());
        }
        self.ctx.metrics.native_verdict("failed");
        if forced_native(plan, service) {
            tracing::warn!(service = %key, detail = %verdict.detail, "native cure not proven; kept (--cure native)");
            return Ok(());
        }
        tracing::warn!(service = %key, detail = %verdict.detail, definite = verdict.definite, "native cure not proven; ipMode put back, DNS cure kept");
        let within = if verdict.definite {
            format!(
                "(a definite failure, after {:.1} s)",
                verdict.took.as_secs_f64()
            )
        } else {
            format!("within {:?}", self.params.deadline)
        };
        let why = format!(
            "ipMode: Proxy was not honoured {within} (kube-proxy older than 1.30, a CNI that ignores ipMode, or a load balancer that does not answer its own backends): {}; ipMode put back, the DNS cure stays; tried again after {:?}",
            verdict.detail,
            backoff(&self.params, failures)
        );
        if snapshot
            .service(&service.namespace, &service.name)
            .is_some()
        {
            self.restore(service, uid, &original, &why).await?;
        }
        Ok(())
    }

    /// Puts each IP's `ipMode` back as it was (only where it is still `Proxy`), read back:
    /// `Ok(false)` when the API server's answer still says `Proxy` (reported; tried again).
    async fn restore(
        &mut self,
        service: &ObjectRef,
        uid: &str,
        original: &[IpModeWas],
        why: &str,
    ) -> Result<bool, Error> {
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
                Ok(true)
            }
            Ok(Written::NotApplied(_)) => {
                self.ctx.metrics.ip_mode_write("restore");
                tracing::warn!(service = %service, "ipMode put back, but the API server's answer still says Proxy");
                let note = format!(
                    "hairpin put ipMode back ({why}), but the API server's answer still says Proxy (an admission webhook or another writer?): tried again"
                );
                self.on_service(service, uid, true, reason::IP_MODE_NOT_RESTORED, note)
                    .await;
                Ok(false)
            }
            Ok(Written::Nothing) => Ok(true),
            Err(err) if is_not_found(&err) => Ok(true),
            Err(err) if is_conflict(&err) => Ok(false),
            Err(err) => Err(Error::kube(
                format!("put ipMode back on Service {service}"),
                err,
            )),
        }
    }

    /// Writes the record when it differs from `before` (the snapshot's).
    async fn write_record(
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
        self.written = Some((record.clone(), Instant::now()));
        Ok(())
    }
}

/// A new record entry: `probing`, since now.
fn new_entry(uid: &str) -> NativeEntry {
    NativeEntry {
        uid: uid.to_owned(),
        original: Vec::new(),
        state: ProbeState::Probing,
        since: now_rfc3339(),
        reason: String::new(),
        data_plane: String::new(),
        failures: 0,
        server_version: String::new(),
        due: false,
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The load balancer's cure is forced to native (flag or annotation): a failed probe is
/// reported, never acted on.
fn forced_native(plan: &Plan, service: &ObjectRef) -> bool {
    plan.cures
        .iter()
        .any(|c| c.service == *service && c.mode == hairpin_planner::CureMode::Native)
}

/// [`write_ip_modes`] for putting back: only IPs still at `Proxy` change (another writer that
/// set something else since wins).
pub async fn restore_ip_modes(
    client: &kube::Client,
    service: &ObjectRef,
    uid: &str,
    modes: &BTreeMap<String, Option<String>>,
) -> Result<Written, kube::Error> {
    replace_ip_modes(client, service, uid, |current| still_proxy(current, modes)).await
}

/// [`restore_ip_modes`] of a record's entry, unless another writer took the status over
/// ([`taken_over`]: it set `Proxy` itself, not merely touched the list): uninstall.
/// `forced`: the cure was forced native.
pub async fn restore_entry(
    client: &kube::Client,
    service: &ObjectRef,
    entry: &NativeEntry,
    forced: bool,
) -> Result<Written, kube::Error> {
    let modes: BTreeMap<String, Option<String>> = entry
        .original
        .iter()
        .map(|was| (was.ip.clone(), was.ip_mode.clone()))
        .collect();
    replace_ip_modes(client, service, &entry.uid, |current| {
        if taken_over(current, entry, forced).is_some() {
            return BTreeMap::new();
        }
        still_proxy(current, &modes)
    })
    .await
}

/// Of `modes`, the IPs `current` still says `Proxy` on.
fn still_proxy(
    current: &Service,
    modes: &BTreeMap<String, Option<String>>,
) -> BTreeMap<String, Option<String>> {
    status_ingress(current)
        .iter()
        .filter(|e| e.ip_mode.as_deref() == Some(IP_MODE_PROXY))
        .filter_map(|e| {
            let ip = e.ip.clone()?;
            let mode = modes.get(&ip)?.clone();
            Some((ip, mode))
        })
        .collect()
}
