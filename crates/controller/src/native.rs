//! The native cure's writes: `ipMode: Proxy` on a load balancer Service's status (the status
//! subresource, replaced with the resourceVersion just read, only the `ipMode` of the IPs the
//! plan names changed), the record of what hairpin did in its `hairpin-native` ConfigMap
//! (written *before* each status write, so that uninstall can always put the status back), and
//! the probe that proves the cure.
//!
//! The probe runs here, in the controller's pod: an in-cluster client subject to the same
//! kube-proxy or CNI rules as any pod. It connects to every PROXY port of every IP the cure
//! set, without a header, and asks as any client would: an HTTP request (HTTP ports) or a TLS
//! ClientHello with a hairpinned name as SNI (TLS ports). An answer (an HTTP status line, a TLS
//! ServerHello) means the connection crossed the real load balancer, which wrote the header;
//! an empty reply, a reset or silence means the cluster still short-circuits the address to
//! the ingress. Proven on every port within the deadline: the record says `proven` and the
//! next plan drops the load balancer's DNS rules (make before break). Not proven: the status
//! is put back at once, the record says `failed` with the outcome per port, and DNS stays;
//! the cure is tried again after `retry`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hairpin_planner::native::{
    FIELD_MANAGER, IP_MODE_PROXY, IpModeWas, NATIVE_KEY, NativeAction, NativeEntry, NativeRecord,
    ProbeState, ingress_writer,
};
use hairpin_planner::{ClusterSnapshot, LoadBalancerPlan, ObjectRef, Plan, PlannerConfig};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::Error;
use crate::apply::{KeyEdit, write_key};
use crate::error::{is_conflict, is_not_found};
use crate::report::{Events, object_ref, reason};

/// Settings of the native cure's probe.
#[derive(Clone, Debug)]
pub struct NativeParams {
    /// How long after setting `ipMode: Proxy` the probe may take to succeed (kube-proxy
    /// follows a status change within its sync period, 1 s by default).
    pub deadline: Duration,
    /// Between two probe rounds.
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
        }
    }
}

/// What one probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeVerdict {
    /// Every port answered.
    pub proven: bool,
    /// The outcome per address, in words.
    pub detail: String,
    /// How long it took from the status write.
    pub took: Duration,
}

/// One address and port to probe, and how to ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeTarget {
    /// The load balancer IP and port.
    pub addr: SocketAddr,
    /// Ask with TLS (a ClientHello) instead of HTTP.
    pub tls: bool,
    /// The name to ask for (Host header, SNI).
    pub host: String,
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

/// One probe connection: `Ok(first line or "TLS ServerHello")` when the server answered as a
/// server answers a client, `Err(outcome)` otherwise.
pub async fn probe_once(target: &ProbeTarget, timeout: Duration) -> Result<String, String> {
    let connect = tokio::time::timeout(timeout, TcpStream::connect(target.addr)).await;
    let mut stream = match connect {
        Ok(Ok(stream)) => stream,
        Ok(Err(err)) => return Err(format!("cannot connect: {err}")),
        Err(_) => return Err(format!("no TCP answer within {timeout:?}")),
    };
    let request = if target.tls {
        client_hello(&target.host)?
    } else {
        format!(
            "GET / HTTP/1.1\r\nHost: {}\r\nUser-Agent: hairpin-native-probe\r\nConnection: close\r\n\r\n",
            target.host
        )
        .into_bytes()
    };
    let exchange = async {
        stream.write_all(&request).await?;
        let mut answer = vec![0u8; 512];
        let n = stream.read(&mut answer).await?;
        answer.truncate(n);
        Ok::<_, std::io::Error>(answer)
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Err("no answer before the timeout".into()),
        Ok(Err(err)) => Err(format!("no answer: {err}")),
        Ok(Ok(answer)) if answer.is_empty() => {
            Err("empty reply (the ingress got no PROXY header)".into())
        }
        Ok(Ok(answer)) if target.tls => {
            // A TLS record of type handshake (22) carrying a ServerHello (2).
            if answer.first() == Some(&22) && answer.get(5) == Some(&2) {
                Ok("TLS ServerHello".into())
            } else {
                Err("an answer that is not a TLS ServerHello".into())
            }
        }
        Ok(Ok(answer)) => {
            let line = answer.split(|b| *b == b'\n').next().unwrap_or_default();
            let line = String::from_utf8_lossy(line).trim_end().to_owned();
            if line.starts_with("HTTP/") {
                Ok(hairpin_planner::escape::text(&line).into_owned())
            } else {
                Err("an answer that is not HTTP".into())
            }
        }
    }
}

/// A TLS ClientHello for `host` (SNI), as rustls writes it. Only its bytes are used: the probe
/// needs a ServerHello back, not a session.
fn client_hello(host: &str) -> Result<Vec<u8>, String> {
    use rustls::pki_types::ServerName;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    let mut conn =
        rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).map_err(|e| e.to_string())?;
    Ok(hello)
}

/// Probes every target until each answered once, or the deadline passed.
pub async fn prove(targets: Vec<ProbeTarget>, params: &NativeParams) -> ProbeVerdict {
    let started = Instant::now();
    let mut last: BTreeMap<SocketAddr, Result<String, String>> = BTreeMap::new();
    loop {
        for target in &targets {
            if last.get(&target.addr).is_some_and(Result::is_ok) {
                continue;
            }
            let outcome = probe_once(target, params.timeout).await;
            last.insert(target.addr, outcome);
        }
        let proven = !targets.is_empty() && last.values().all(Result::is_ok);
        if proven || started.elapsed() >= params.deadline {
            let detail = last
                .iter()
                .map(|(addr, outcome)| match outcome {
                    Ok(answer) => format!("{addr} answered through the load balancer ({answer})"),
                    Err(why) => format!("{addr}: {why}"),
                })
                .collect::<Vec<_>>()
                .join("; ");
            let detail = if targets.is_empty() {
                "no PROXY port to probe".to_owned()
            } else {
                detail
            };
            return ProbeVerdict {
                proven,
                detail,
                took: started.elapsed(),
            };
        }
        tokio::time::sleep(params.interval).await;
    }
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

/// Replaces the status of `service` (uid `uid`) with the `ipMode`s given, guarded by the
/// resourceVersion just read. `Ok(false)`: nothing to change, or the Service is gone or
/// another one now.
pub async fn write_ip_modes(
    client: &kube::Client,
    service: &ObjectRef,
    uid: &str,
    modes: &BTreeMap<String, Option<String>>,
) -> Result<bool, kube::Error> {
    replace_ip_modes(client, service, uid, |_| modes.clone()).await
}

/// Reads `service`, and when it is still the one with `uid`, replaces its status with the
/// `ipMode`s `modes` picks from what it reads; `Ok(false)` when nothing was written.
async fn replace_ip_modes(
    client: &kube::Client,
    service: &ObjectRef,
    uid: &str,
    modes: impl FnOnce(&Service) -> BTreeMap<String, Option<String>>,
) -> Result<bool, kube::Error> {
    let api: Api<Service> = Api::namespaced(client.clone(), &service.namespace);
    let Some(current) = api.get_opt(&service.name).await? else {
        return Ok(false);
    };
    if current.metadata.uid.as_deref() != Some(uid) {
        return Ok(false);
    }
    let Some(desired) = with_ip_modes(&current, &modes(&current)) else {
        return Ok(false);
    };
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    api.replace_status(&service.name, &params, &desired).await?;
    Ok(true)
}

type Verdicts = Arc<Mutex<BTreeMap<String, (String, ProbeVerdict)>>>;

/// The native cure's state between reconciles: the probes running, their verdicts, and when a
/// failed cure may be tried again.
pub(crate) struct NativeCurer {
    client: kube::Client,
    events: Events,
    planner: PlannerConfig,
    params: NativeParams,
    changed: Arc<Notify>,
    /// Verdicts of finished probes, by `namespace/name`, with the uid probed.
    verdicts: Verdicts,
    /// Probes running, by `namespace/name`.
    running: BTreeMap<String, tokio::task::AbortHandle>,
    /// The data plane ([`hairpin_planner::native::data_plane`]) now, and since when this
    /// instance has seen it.
    data_plane: (String, Instant),
}

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

impl NativeCurer {
    pub(crate) fn new(
        client: kube::Client,
        events: Events,
        planner: PlannerConfig,
        params: NativeParams,
        changed: Arc<Notify>,
    ) -> Self {
        Self {
            client,
            events,
            planner,
            params,
            changed,
            verdicts: Arc::default(),
            running: BTreeMap::new(),
            data_plane: (String::new(), Instant::now()),
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
        self.events.publish(&regarding, warning, reason, note).await;
    }

    /// The plan's status writes, the probes' verdicts and the record. Returns when to look
    /// again (a probe running, a failed cure due for another try).
    pub(crate) async fn apply(
        &mut self,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
    ) -> Result<Option<Instant>, Error> {
        let Ok(before) = NativeRecord::read(snapshot, &self.planner) else {
            // The plan warned; nothing is written while the record is not hairpin's.
            return Ok(None);
        };
        let mut record = before.clone();
        let mut requeue = None;
        let data_plane = hairpin_planner::native::data_plane(snapshot);
        if data_plane != self.data_plane.0 {
            self.data_plane = (data_plane, Instant::now());
        }
        self.take_verdicts(&mut record, plan, snapshot).await?;
        // A failed cure is tried again after `retry`: its entry goes, the next plan proposes it.
        let due: Vec<String> = record
            .load_balancers
            .iter()
            .filter(|(_, e)| e.state == ProbeState::Failed)
            .filter(|(_, e)| seconds_since(&e.since).is_none_or(|s| s >= self.params.retry))
            .map(|(key, _)| key.clone())
            .collect();
        for key in due {
            record.load_balancers.remove(&key);
        }
        for action in &plan.native_actions {
            match action {
                NativeAction::SetProxy {
                    service,
                    uid,
                    ips,
                    proven,
                } => {
                    self.set_proxy(plan, &mut record, service, uid, ips, *proven)
                        .await?;
                }
                NativeAction::Restore {
                    service,
                    uid,
                    original,
                    reason,
                } => {
                    if let Some(uid) = uid {
                        self.restore(service, uid, original, reason).await?;
                    }
                    record.load_balancers.remove(&service.to_string());
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
                }
            }
        }
        let settling = self.reprobe_due(plan, &record);
        self.write_record(&record, &before).await?;
        if !self.running.is_empty() {
            requeue = Some(Instant::now() + self.params.interval);
        } else if let Some(at) = settling {
            requeue = Some(at);
        }
        Ok(requeue)
    }

    /// Sets `ipMode: Proxy`: the record first (so that uninstall knows what to put back),
    /// then the status, then the probe (unless proven).
    async fn set_proxy(
        &mut self,
        plan: &Plan,
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
        let entry = record
            .load_balancers
            .entry(key.clone())
            .or_insert_with(|| NativeEntry {
                uid: uid.to_owned(),
                original: Vec::new(),
                state: ProbeState::Probing,
                since: now_rfc3339(),
                reason: String::new(),
                data_plane: String::new(),
            });
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
        match write_ip_modes(&self.client, service, uid, &modes).await {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            // Another writer changed the status between the read and the write: next round.
            Err(err) if is_conflict(&err) || is_not_found(&err) => return Ok(()),
            Err(err) => return Err(Error::kube(format!("set ipMode on Service {service}"), err)),
        }
        let ip_list: Vec<&str> = ips.iter().map(|w| w.ip.as_str()).collect();
        let note = if proven {
            format!(
                "another writer put the status back without ipMode: Proxy; hairpin set it again on {}",
                ip_list.join(", ")
            )
        } else {
            format!(
                "hairpin set ipMode: Proxy on {} (native cure) and probes the address from inside the cluster; DNS stays until the probe succeeds",
                ip_list.join(", ")
            )
        };
        tracing::info!(service = %service, ips = ?ip_list, reasserted = proven, "ipMode: Proxy set");
        self.on_service(service, uid, false, reason::IP_MODE_SET, note)
            .await;
        if !proven {
            self.start_probe(plan, service, uid, ips);
        }
        Ok(())
    }

    /// Probes again every proven cure (of `auto`) whose verdict is older than `reprobe`, or was
    /// reached on another data plane than today's once the change is `settle` old (a kube-proxy
    /// or CNI upgrade may stop honouring `ipMode`); the status is left as it is meanwhile.
    /// Returns when a changed data plane will have settled, while it has not.
    ///
    /// A cure still `probing` with no probe running here (this instance became the leader, or
    /// restarted, while its predecessor's probe ran) is probed too: otherwise it would stay
    /// `probing`, on the DNS cure, for good.
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
                ProbeState::Probing => true,
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
                ProbeState::Failed => false,
            })
            .collect();
        for (service, entry) in due {
            tracing::debug!(service = %service, state = ?entry.state, "probing a native cure");
            self.start_probe(plan, &service, &entry.uid, &entry.original);
        }
        settling
    }

    fn start_probe(&mut self, plan: &Plan, service: &ObjectRef, uid: &str, ips: &[IpModeWas]) {
        let key = service.to_string();
        if self.running.contains_key(&key) {
            return;
        }
        let Some(lb) = plan
            .load_balancers
            .iter()
            .find(|lb| lb.load_balancer.service == *service)
        else {
            return;
        };
        let targets = targets(lb, ips);
        let params = self.params.clone();
        let verdicts = self.verdicts.clone();
        let changed = self.changed.clone();
        let uid = uid.to_owned();
        let task_key = key.clone();
        let task = tokio::spawn(async move {
            let verdict = prove(targets, &params).await;
            verdicts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(task_key, (uid, verdict));
            changed.notify_one();
        });
        self.running.insert(key, task.abort_handle());
    }

    /// The finished probes' verdicts into the record; a failed one puts the status back.
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
        for (key, (uid, verdict)) in verdicts {
            self.running.remove(&key);
            let Some(entry) = record.load_balancers.get_mut(&key) else {
                continue;
            };
            if entry.uid != uid {
                continue;
            }
            entry.state = if verdict.proven {
                ProbeState::Proven
            } else {
                ProbeState::Failed
            };
            entry.since = now_rfc3339();
            entry.reason.clone_from(&verdict.detail);
            entry.data_plane.clone_from(&self.data_plane.0);
            let Some((namespace, name)) = key.split_once('/') else {
                continue;
            };
            let service = ObjectRef::new(namespace, name);
            let regarding = object_ref("Service", namespace, name, Some(uid.clone()));
            if verdict.proven {
                tracing::info!(service = %key, took = ?verdict.took, detail = %verdict.detail, "native cure proven");
                let note = format!(
                    "ipMode: Proxy is honoured: in-cluster traffic to the load balancer crosses it ({:.1} s after the write: {}); its DNS rules are removed",
                    verdict.took.as_secs_f64(),
                    verdict.detail
                );
                self.events
                    .publish(&regarding, false, reason::NATIVE_PROVEN, note)
                    .await;
            } else if forced_native(plan, &service) {
                tracing::warn!(service = %key, detail = %verdict.detail, "native cure not proven; kept (--cure native)");
            } else {
                tracing::warn!(service = %key, detail = %verdict.detail, "native cure not proven; ipMode put back, DNS cure kept");
                let original = entry.original.clone();
                let why = format!(
                    "ipMode: Proxy was not honoured within {:?} (kube-proxy older than 1.30, a CNI that ignores ipMode, or a load balancer that does not answer its own backends): {}; ipMode put back, the DNS cure stays",
                    self.params.deadline, verdict.detail
                );
                if snapshot.service(namespace, name).is_some() {
                    self.restore(&service, &uid, &original, &why).await?;
                }
            }
        }
        Ok(())
    }

    /// Puts each IP's `ipMode` back as it was (only where it is still `Proxy`).
    async fn restore(
        &self,
        service: &ObjectRef,
        uid: &str,
        original: &[IpModeWas],
        why: &str,
    ) -> Result<(), Error> {
        let modes: BTreeMap<String, Option<String>> = original
            .iter()
            .map(|was| (was.ip.clone(), was.ip_mode.clone()))
            .collect();
        match restore_ip_modes(&self.client, service, uid, &modes).await {
            Ok(true) => {
                tracing::info!(service = %service, why, "ipMode put back");
                let note = format!("hairpin put ipMode back as it was: {why}");
                self.on_service(service, uid, true, reason::IP_MODE_RESTORED, note)
                    .await;
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(err) if is_not_found(&err) => Ok(()),
            Err(err) => Err(Error::kube(
                format!("put ipMode back on Service {service}"),
                err,
            )),
        }
    }

    /// Writes the record when it differs from `before` (the snapshot's).
    async fn write_record(
        &self,
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
                &self.planner.namespace,
                &self.planner.native_config_map,
                NATIVE_KEY,
                value,
            )
        };
        write_key(&self.client, &edit).await?;
        Ok(())
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
/// set something else since wins), and only while hairpin is the last writer of the status's
/// `ingress` list: a `Proxy` another writer set since (an upgraded cloud controller) stays.
pub async fn restore_ip_modes(
    client: &kube::Client,
    service: &ObjectRef,
    uid: &str,
    modes: &BTreeMap<String, Option<String>>,
) -> Result<bool, kube::Error> {
    replace_ip_modes(client, service, uid, |current| {
        if ingress_writer(current).is_some_and(|w| w != FIELD_MANAGER) {
            return BTreeMap::new();
        }
        current
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten()
            .filter(|e| e.ip_mode.as_deref() == Some(IP_MODE_PROXY))
            .filter_map(|e| {
                let ip = e.ip.clone()?;
                let mode = modes.get(&ip)?.clone();
                Some((ip, mode))
            })
            .collect()
    })
    .await
}
