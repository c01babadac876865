//! Whether a DNS write took effect as pods see it: ask the cluster DNS (and node-local-dns,
//! when it is reachable) for the changed hostnames until they answer with the hairpin
//! Service's ClusterIP, then connect to that Service.
//!
//! The kubelet can take a minute or more to sync a ConfigMap into CoreDNS's pods, `reload`
//! checks only every 30 s, and a Corefile CoreDNS rejects leaves the old one running: the only
//! proof is an answer. Queries go through hickory's resolver (UDP, falling back to TCP on
//! truncation), with its cache off so every round sees the server's current answer.
//!
//! [`Checks`] runs one check per load balancer in the background after each DNS write of its
//! names (a sensor of the loop's, which starts and stops them as the `Hairpin` statuses'
//! step chooses), and sends what it found (its outcome, and the CoreDNS pods when they may
//! explain a failure) to the loop, which keeps it in its memory ([`CheckMemory`]) for the
//! `Hairpin` status ([`crate::status`]) and whose `decide` reports it: an Event
//! (`HairpinEffective`, or `DNSNotEffective` with the likely cause) and the propagation
//! measured.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hairpin_planner::ObjectRef;
use hairpin_planner::{ClusterSnapshot, Plan, PlannerConfig};
use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::{Resolver, TokioResolver};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::context::Context;

/// The label put under a wildcard to probe it: `*.apps.example.com` is asked as
/// `hairpin-probe.apps.example.com`.
pub const WILDCARD_PROBE_LABEL: &str = "hairpin-probe";

/// node-local-dns's usual link-local address, when its Corefile binds none we can read.
pub const NODE_LOCAL_DNS_DEFAULT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(169, 254, 20, 10));

/// One DNS server to ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it is, for reports: `cluster DNS`, `node-local-dns`.
    pub role: String,
    /// A server that may be unreachable from here (node-local-dns is per node): when it does
    /// not answer at all, it is left out instead of failing the check.
    pub optional: bool,
}

/// What to check.
#[derive(Clone, Debug)]
pub struct CheckSpec {
    /// Servers asked, each for every name.
    pub servers: Vec<DnsServer>,
    /// Names asked (exact names; see [`probe_names`]).
    pub names: Vec<String>,
    /// The hairpin Service's ClusterIPs: a name is effective when it answers with one of
    /// these and nothing else.
    pub expected: Vec<IpAddr>,
    /// The hairpin Service's ClusterIP and port, connected to (nothing sent) once DNS is
    /// effective.
    pub connect: Option<SocketAddr>,
    /// When the DNS change was written: propagation time counts from here.
    pub written_at: Instant,
    /// Give up this long after `written_at`.
    pub deadline: Duration,
    /// Longest pause between rounds of queries (see [`pause`]).
    pub interval: Duration,
    /// Timeout of one query, and of the TCP connect.
    pub query_timeout: Duration,
}

/// How long the check waits before its next round, `elapsed` after the write: 100 ms doubling
/// to 500 ms during the first minute (where a CoreDNS that reloads, and a kubelet that syncs
/// the ConfigMap, make the answer change), so the figure is within half a second of the moment
/// the answer changed; then `interval` (`--propagation-interval`), the check being only a
/// watch for a slow sync by then. Never longer than `interval`.
pub fn pause(round: u32, elapsed: Duration, interval: Duration) -> Duration {
    const FAST: Duration = Duration::from_millis(500);
    const FAST_PHASE: Duration = Duration::from_secs(60);
    let fast = Duration::from_millis(100)
        .saturating_mul(1 << round.min(3))
        .min(FAST);
    if elapsed < FAST_PHASE {
        fast.min(interval)
    } else {
        interval
    }
}

/// One server's answer for one name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// These addresses (A and AAAA together).
    Addresses(Vec<IpAddr>),
    /// NXDOMAIN or no A/AAAA records.
    NoRecords,
    /// No answer: timeout, connection refused...
    Failed(String),
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Addresses(ips) => {
                let ips: Vec<String> = ips.iter().map(ToString::to_string).collect();
                f.write_str(&ips.join(","))
            }
            Answer::NoRecords => f.write_str("no address"),
            Answer::Failed(err) => write!(f, "no answer ({err})"),
        }
    }
}

/// The result of a [`check`].
#[derive(Clone, Debug, PartialEq)]
pub struct CheckOutcome {
    /// Every name answered with the hairpin Service on every reachable server.
    pub effective: bool,
    /// From the write until the check ended (effective or given up).
    pub elapsed: Duration,
    /// The last answer per (server role, name), for names that were not yet effective there
    /// when the check ended (empty when effective).
    pub wrong: BTreeMap<(String, String), Answer>,
    /// Optional servers left out because they never answered.
    pub unreachable: Vec<DnsServer>,
    /// The TCP connect to the hairpin Service, when DNS was effective: `Ok` or the error.
    pub connect: Option<Result<(), String>>,
}

/// The role of the cluster's own DNS Service among the servers asked ([`dns_servers`]).
pub(crate) const CLUSTER_DNS: &str = "cluster DNS";

impl CheckOutcome {
    /// Some name was still answered wrong by the cluster's DNS Service itself (not only by an
    /// optional server such as node-local-dns).
    pub(crate) fn cluster_dns_wrong(&self) -> bool {
        self.wrong.keys().any(|(role, _)| role == CLUSTER_DNS)
    }
}

/// The names to ask for a set of hostnames: a probe name under each wildcard (all of them,
/// always), then up to `max_exact` exact names spread evenly over the sorted list, so a large
/// load balancer costs a bounded number of queries per round.
pub fn probe_names(hostnames: &[String], max_exact: usize) -> Vec<String> {
    let mut names: Vec<String> = hostnames
        .iter()
        .filter_map(|h| h.strip_prefix("*."))
        .map(|suffix| format!("{WILDCARD_PROBE_LABEL}.{suffix}"))
        .collect();
    let mut exact: Vec<&String> = hostnames.iter().filter(|h| !h.starts_with('*')).collect();
    exact.sort();
    exact.dedup();
    if exact.len() <= max_exact {
        names.extend(exact.into_iter().cloned());
    } else if max_exact > 0 {
        let step = exact.len() as f64 / max_exact as f64;
        for i in 0..max_exact {
            // Truncation picks the element at the start of each equal share.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let at = (i as f64 * step) as usize;
            names.push(exact[at.min(exact.len() - 1)].clone());
        }
    }
    names.sort();
    names.dedup();
    names
}

/// A resolver asking exactly `server` (UDP, TCP on truncation), no cache, no hosts file, no
/// search list.
fn resolver_for(server: SocketAddr, timeout: Duration) -> Result<TokioResolver, String> {
    let mut ns = NameServerConfig::udp_and_tcp(server.ip());
    for connection in &mut ns.connections {
        connection.port = server.port();
    }
    let config = ResolverConfig::from_name_servers(vec![ns]);
    let mut opts = ResolverOpts::default();
    opts.timeout = timeout;
    opts.attempts = 1;
    opts.cache_size = 0;
    opts.use_hosts_file = ResolveHosts::Never;
    opts.ndots = 0;
    opts.num_concurrent_reqs = 1;
    opts.preserve_intermediates = false;
    Resolver::builder_with_config(config, TokioRuntimeProvider::default())
        .with_options(opts)
        .build()
        .map_err(|err| err.to_string())
}

async fn ask(resolver: &TokioResolver, name: &str) -> Answer {
    match resolver.lookup_ip(format!("{name}.")).await {
        Ok(lookup) => {
            let mut ips: Vec<IpAddr> = lookup.iter().collect();
            ips.sort();
            ips.dedup();
            if ips.is_empty() {
                Answer::NoRecords
            } else {
                Answer::Addresses(ips)
            }
        }
        Err(err) if err.is_nx_domain() || err.is_no_records_found() => Answer::NoRecords,
        Err(err) => Answer::Failed(err.to_string()),
    }
}

fn is_expected(answer: &Answer, expected: &[IpAddr]) -> bool {
    matches!(answer, Answer::Addresses(ips) if ips.iter().all(|ip| expected.contains(ip)))
}

/// Asks every server for every name, round after round, until all answer with the hairpin
/// Service or `written_at + deadline` passes; then, if effective, connects to the Service.
///
/// Cancel it by dropping the future (the controller aborts the task when a newer write
/// supersedes it).
pub async fn check(spec: &CheckSpec) -> CheckOutcome {
    let give_up = spec.written_at + spec.deadline;
    let mut servers: Vec<(DnsServer, TokioResolver)> = Vec::new();
    let mut unreachable = Vec::new();
    let mut wrong: BTreeMap<(String, String), Answer> = BTreeMap::new();
    for server in &spec.servers {
        match resolver_for(server.addr, spec.query_timeout) {
            Ok(resolver) => servers.push((server.clone(), resolver)),
            Err(err) => {
                wrong.insert(
                    (server.role.clone(), String::new()),
                    Answer::Failed(format!("cannot build a resolver: {err}")),
                );
            }
        }
    }
    // (server index, name) pairs not yet seen answering right.
    let mut pending: Vec<(usize, String)> = (0..servers.len())
        .flat_map(|i| spec.names.iter().map(move |n| (i, n.clone())))
        .collect();
    let mut first_round = true;
    let mut round = 0;
    loop {
        let mut still = Vec::new();
        let mut answered = vec![false; servers.len()];
        for (i, name) in pending {
            let answer = ask(&servers[i].1, &name).await;
            if !matches!(answer, Answer::Failed(_)) {
                answered[i] = true;
            }
            let key = (servers[i].0.role.clone(), name.clone());
            if is_expected(&answer, &spec.expected) {
                wrong.remove(&key);
            } else {
                wrong.insert(key, answer);
                still.push((i, name));
            }
        }
        if first_round {
            // An optional server that answered nothing at all is not reachable from here.
            for (i, (server, _)) in servers.iter().enumerate() {
                if server.optional && !answered[i] && still.iter().any(|(j, _)| *j == i) {
                    unreachable.push(server.clone());
                    still.retain(|(j, _)| *j != i);
                    wrong.retain(|(role, _), _| role != &server.role);
                }
            }
            first_round = false;
        }
        pending = still;
        if pending.is_empty() {
            let elapsed = spec.written_at.elapsed();
            let connect = match spec.connect {
                Some(addr) => Some(connect(addr, spec.query_timeout).await),
                None => None,
            };
            return CheckOutcome {
                effective: true,
                elapsed,
                wrong,
                unreachable,
                connect,
            };
        }
        let now = Instant::now();
        if now >= give_up {
            return CheckOutcome {
                effective: false,
                elapsed: spec.written_at.elapsed(),
                wrong,
                unreachable,
                connect: None,
            };
        }
        let wait = pause(round, spec.written_at.elapsed(), spec.interval);
        round = round.saturating_add(1);
        tokio::time::sleep(wait.min(give_up - now)).await;
    }
}

/// A TCP connect, closed at once: nothing is sent to the ingress behind the proxy.
async fn connect(addr: SocketAddr, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => {
            drop(stream);
            Ok(())
        }
        Ok(Err(err)) => Err(format!("connect to {addr}: {err}")),
        Err(_) => Err(format!("connect to {addr}: no answer within {timeout:?}")),
    }
}

/// Settings of the propagation check.
#[derive(Clone, Debug)]
pub struct PropagationParams {
    /// The cluster DNS to ask (`--cluster-dns`); `None` reads the ClusterIP of the cluster
    /// DNS Service ([`hairpin_planner::cluster_dns_service`]: `kube-dns`, RKE2's
    /// `rke2-coredns-rke2-coredns`, the Helm chart's `coredns`...).
    pub cluster_dns: Option<SocketAddr>,
    /// Give up this long after the write.
    pub deadline: Duration,
    /// Pause between rounds of queries.
    pub interval: Duration,
    /// Timeout of one query and of the TCP connect.
    pub query_timeout: Duration,
    /// Exact hostnames asked per load balancer (wildcards are always all probed).
    pub max_names: usize,
}

impl Default for PropagationParams {
    fn default() -> Self {
        Self {
            cluster_dns: None,
            deadline: Duration::from_secs(180),
            interval: Duration::from_secs(2),
            query_timeout: Duration::from_secs(2),
            max_names: 10,
        }
    }
}

/// What the loop remembers of one load balancer's propagation check (in the Hairpin statuses'
/// memory): which check runs or ran, what its report needs, and its outcome once it reported.
#[derive(Clone, Debug, Default)]
pub(crate) struct CheckSeen {
    /// Hostnames and ClusterIPs checked: a different one supersedes this check.
    pub(crate) fingerprint: String,
    /// Which start this is (an outcome of an earlier start of the same load balancer is
    /// ignored).
    pub(crate) id: u64,
    /// The check counts from a write this controller made (so its time is a propagation).
    pub(crate) measured: bool,
    /// `None` while it runs.
    pub(crate) outcome: Option<CheckOutcome>,
    /// The load balancer Service's uid (for the Events' `regarding`).
    pub(crate) lb_uid: Option<String>,
    /// The names asked.
    pub(crate) names: Vec<String>,
    /// The hairpin Service's ClusterIPs, the answer wanted.
    pub(crate) expected: Vec<IpAddr>,
    /// In external-dns mode, why the cluster DNS would not answer yet, from what
    /// external-dns had done when the check started.
    pub(crate) external_cause: Option<String>,
    /// The Corefile hairpin edits lacks `reload`.
    pub(crate) reload_missing: bool,
    /// Label selector of the CoreDNS pods (the cluster DNS Service's selector).
    pub(crate) coredns_pods: String,
    /// The CoreDNS pods as the check saw them when it gave up with the cluster DNS answering
    /// wrong (`None`: not read, or not readable).
    pub(crate) pods: Option<PodsSeen>,
    /// Its outcome was reported (the Event published, the propagation measured).
    pub(crate) reported: bool,
}

/// The CoreDNS pods a check that gave up saw: how many, how many not ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PodsSeen {
    /// All of them.
    pub(crate) total: usize,
    /// Those without a `Ready=True` condition.
    pub(crate) unready: usize,
}

/// What a check that ended found: its outcome, and the CoreDNS pods when it read them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Finding {
    pub(crate) outcome: CheckOutcome,
    pub(crate) pods: Option<PodsSeen>,
}

impl From<CheckOutcome> for Finding {
    fn from(outcome: CheckOutcome) -> Self {
        Self {
            outcome,
            pods: None,
        }
    }
}

/// The propagation checks the loop remembers, by load balancer.
pub(crate) type CheckMemory = HashMap<ObjectRef, CheckSeen>;

/// A check of `fingerprint` runs (or ran) for `lb`, as the memory says.
pub(crate) fn is_running(memory: &CheckMemory, lb: &ObjectRef, fingerprint: &str) -> bool {
    memory.get(lb).is_some_and(|t| t.fingerprint == fingerprint)
}

/// The last check's outcome for `lb` (`None` while it runs), and whether it counts from a
/// write of this controller's, as the memory says.
pub(crate) fn outcome<'a>(
    memory: &'a CheckMemory,
    lb: &ObjectRef,
) -> (Option<&'a CheckOutcome>, bool) {
    memory
        .get(lb)
        .map_or((None, false), |t| (t.outcome.as_ref(), t.measured))
}

/// A propagation check to stop or start, as `decide` chose.
pub(crate) enum CheckAction {
    /// Stop and forget this load balancer's check.
    Stop(ObjectRef),
    /// Start (or restart) a check.
    Start(Box<Start>),
}

/// A check to start ([`Checks::act`]): everything it needs, read from the plan and the
/// snapshot when it was chosen.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Start {
    /// The load balancer.
    pub lb: ObjectRef,
    /// Which start this is: its number, from the loop's memory.
    pub id: u64,
    /// Its Service's uid (for the Events' `regarding`).
    pub lb_uid: Option<String>,
    /// The DNS servers to ask ([`dns_servers`]).
    pub servers: Vec<DnsServer>,
    /// The names to ask ([`probe_names`] of the load balancer's hostnames).
    pub names: Vec<String>,
    /// Hostnames and ClusterIPs checked: a different one supersedes this check.
    pub fingerprint: String,
    /// The hairpin Service's ClusterIPs, the answer wanted.
    pub cluster_ips: Vec<IpAddr>,
    /// The hairpin Service's first port, connected to once DNS answers.
    pub port: Option<u16>,
    /// In external-dns mode, why the cluster DNS would not answer yet.
    pub external_cause: Option<String>,
    /// When this controller wrote the change (`None`: not its write; the check's time is then
    /// no propagation).
    pub written: Option<Instant>,
    /// The Corefile hairpin edits lacks `reload`.
    pub reload_missing: bool,
    /// Label selector of the CoreDNS pods.
    pub coredns_pods: String,
    /// Read the CoreDNS pods ([`Start::coredns_pods`]) when the check gives up with the cluster
    /// DNS answering wrong: no likelier cause is known at the start.
    pub read_pods: bool,
}

impl CheckSeen {
    /// What the loop remembers of a check it starts.
    pub(crate) fn of(start: &Start) -> Self {
        Self {
            fingerprint: start.fingerprint.clone(),
            id: start.id,
            measured: start.written.is_some(),
            outcome: None,
            lb_uid: start.lb_uid.clone(),
            names: start.names.clone(),
            expected: start.cluster_ips.clone(),
            external_cause: start.external_cause.clone(),
            reload_missing: start.reload_missing,
            coredns_pods: start.coredns_pods.clone(),
            pods: None,
            reported: false,
        }
    }
}

/// A check's report: the load balancer, which start, what it found.
type Report = (ObjectRef, u64, Finding);

/// The propagation checks of the load balancers (a sensor of the loop's): each runs in the
/// background after a DNS write and sends what it found through a channel, waking the loop;
/// the loop reads it into its memory ([`Checks::read`]), where `decide` reports it and the
/// `Hairpin` status finds it.
pub(crate) struct Checks {
    /// The loop's client, and the signal poked when a check finishes.
    ctx: Arc<Context>,
    params: PropagationParams,
    /// The checks running, by load balancer: which start, and its task.
    running: HashMap<ObjectRef, (u64, tokio::task::AbortHandle)>,
    /// Where the checks' outcomes come in.
    inbox: (UnboundedSender<Report>, UnboundedReceiver<Report>),
}

impl Drop for Checks {
    fn drop(&mut self) {
        for (_, task) in self.running.values() {
            task.abort();
        }
    }
}

impl Checks {
    pub(crate) fn new(ctx: &Arc<Context>, params: PropagationParams) -> Self {
        Self {
            ctx: ctx.clone(),
            params,
            running: HashMap::new(),
            inbox: unbounded_channel(),
        }
    }

    /// The checks' outcomes that came in, into `memory`.
    pub(crate) fn read(&mut self, memory: &mut CheckMemory) {
        while let Ok((lb, id, finding)) = self.inbox.1.try_recv() {
            if self.running.get(&lb).is_some_and(|(run, _)| *run == id) {
                // Its task is done.
                self.running.remove(&lb);
            }
            if let Some(seen) = memory.get_mut(&lb).filter(|seen| seen.id == id) {
                seen.outcome = Some(finding.outcome);
                seen.pods = finding.pods;
            }
        }
    }

    /// Starts and stops the checks as `actions` say (the loop remembers them).
    pub(crate) fn act(&mut self, actions: Vec<CheckAction>) {
        for action in actions {
            match action {
                CheckAction::Stop(lb) => {
                    if let Some((_, task)) = self.running.remove(&lb) {
                        task.abort();
                    }
                }
                CheckAction::Start(start) => self.start(*start),
            }
        }
    }

    /// Stops and forgets the checks of every load balancer but `lbs`.
    pub(crate) fn retain(&mut self, memory: &mut CheckMemory, lbs: &[ObjectRef]) {
        self.running.retain(|lb, (_, task)| {
            let keep = lbs.contains(lb);
            if !keep {
                task.abort();
            }
            keep
        });
        memory.retain(|lb, _| lbs.contains(lb));
    }

    /// Starts (or restarts) a check.
    fn start(&mut self, start: Start) {
        let spec = CheckSpec {
            servers: start.servers,
            names: start.names,
            expected: start.cluster_ips.clone(),
            connect: start.port.map(|p| SocketAddr::new(start.cluster_ips[0], p)),
            written_at: start.written.unwrap_or_else(Instant::now),
            deadline: self.params.deadline,
            interval: self.params.interval,
            query_timeout: self.params.query_timeout,
        };
        let context = CheckContext {
            lb: start.lb.clone(),
            id: start.id,
            read_pods: start.read_pods.then(|| start.coredns_pods.clone()),
            ctx: self.ctx.clone(),
            inbox: self.inbox.0.clone(),
        };
        if let Some((_, old)) = self.running.remove(&start.lb) {
            old.abort();
        }
        tracing::debug!(lb = %start.lb, names = ?spec.names, "propagation check started");
        let task = tokio::spawn(context.run(spec)).abort_handle();
        self.running.insert(start.lb, (start.id, task));
    }
}

/// The cluster DNS (`cluster_dns`, the flag, else the cluster DNS Service the planner finds)
/// and node-local-dns when it runs.
pub(crate) fn dns_servers(
    cluster_dns: Option<SocketAddr>,
    planner: &PlannerConfig,
    plan: &Plan,
    snapshot: &ClusterSnapshot,
) -> Option<Vec<DnsServer>> {
    let cluster = cluster_dns.or_else(|| {
        hairpin_planner::cluster_dns_service(snapshot, planner)
            .and_then(|s| s.spec.as_ref()?.cluster_ip.as_deref()?.parse().ok())
            .map(|ip| SocketAddr::new(ip, 53))
    })?;
    let mut servers = vec![DnsServer {
        addr: cluster,
        role: CLUSTER_DNS.into(),
        optional: false,
    }];
    let node_local = plan.coredns.node_local_dns.as_ref().map(|facts| {
        let bind = facts
            .binds
            .iter()
            .copied()
            .find(|ip| matches!(ip, IpAddr::V4(v4) if v4.is_link_local()));
        bind.unwrap_or(NODE_LOCAL_DNS_DEFAULT)
    });
    if let Some(ip) = node_local {
        servers.push(DnsServer {
            addr: SocketAddr::new(ip, 53),
            role: "node-local-dns".into(),
            optional: true,
        });
    }
    Some(servers)
}

/// The Corefile hairpin edits lacks `reload` (so CoreDNS reads it only on restart).
pub(crate) fn reload_missing(plan: &Plan) -> bool {
    plan.dns.as_ref().and_then(|dns| dns.coredns()).is_some() && plan.coredns.reload == Some(false)
}

pub(crate) fn wrong_answers(outcome: &CheckOutcome, expected: &[IpAddr]) -> String {
    let answers: Vec<String> = outcome
        .wrong
        .iter()
        .take(5)
        .map(|((role, name), answer)| format!("{role} answers {name} with {answer}"))
        .collect();
    format!(
        "after {:.0}s, {} (wanted {})",
        outcome.elapsed.as_secs_f64(),
        answers.join("; "),
        join(expected)
    )
}

/// The CoreDNS pods' label selector: the cluster DNS Service's own selector, else the
/// `k8s-app=kube-dns` most installers use.
pub(crate) fn coredns_pods(snapshot: &ClusterSnapshot, planner: &PlannerConfig) -> String {
    hairpin_planner::cluster_dns_service(snapshot, planner)
        .and_then(|s| s.spec.as_ref()?.selector.as_ref())
        .filter(|selector| !selector.is_empty())
        .map_or_else(
            || "k8s-app=kube-dns".to_owned(),
            |selector| {
                selector
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            },
        )
}

/// What a check needs besides its spec: whose it is, where to send what it found.
struct CheckContext {
    lb: ObjectRef,
    /// Which start of `lb`'s check this is.
    id: u64,
    /// The CoreDNS pods' label selector, when they are to be read after a check that gave up
    /// with the cluster DNS answering wrong.
    read_pods: Option<String>,
    /// The loop's client, planner settings (CoreDNS's namespace) and the signal poked when the
    /// check finishes.
    ctx: Arc<Context>,
    /// Where the finding is sent, for the loop's memory.
    inbox: UnboundedSender<Report>,
}

impl CheckContext {
    /// Runs the check, reads the CoreDNS pods when it gave up with the cluster DNS answering
    /// wrong, and sends what it found to the loop (which reports it: `decide`'s).
    async fn run(self, spec: CheckSpec) {
        let outcome = check(&spec).await;
        tracing::debug!(lb = %self.lb, effective = outcome.effective, elapsed = ?outcome.elapsed, "propagation check ended");
        let pods = match &self.read_pods {
            Some(selector) if !outcome.effective && outcome.cluster_dns_wrong() => {
                self.coredns_pods(selector).await
            }
            _ => None,
        };
        // The receiver lives as long as the checks, which abort this task when dropped.
        let _ = self
            .inbox
            .send((self.lb.clone(), self.id, Finding { outcome, pods }));
        self.ctx.changed.notify_one();
    }

    /// The CoreDNS pods, and how many are not ready. Reading them needs `list pods` in
    /// CoreDNS's namespace; without it (`None`) this clue is skipped.
    async fn coredns_pods(&self, selector: &str) -> Option<PodsSeen> {
        let pods: Api<Pod> =
            Api::namespaced(self.ctx.client.clone(), &self.ctx.planner.coredns_namespace);
        let list = pods
            .list(&ListParams::default().labels(selector))
            .await
            .ok()?;
        let unready = list
            .items
            .iter()
            .filter(|pod| {
                !pod.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        Some(PodsSeen {
            total: list.items.len(),
            unready,
        })
    }
}

/// Addresses, `, `-separated.
pub(crate) fn join(ips: &[IpAddr]) -> String {
    ips.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
