//! The ownership resolver, behind hostname verification ([`hairpin_planner::verify`]): it proves
//! which load balancer owns each name the plan lists by asking the cluster's upstream DNS (the
//! servers the Corefile forwards to) the way CoreDNS would without hairpin's rules, and feeds
//! the answers back into the snapshot. ("Upstream" elsewhere in hairpin is the proxy's backend.)
//!
//! - Whom it asks: for each name, the `forward` targets of the Corefile zone holding it
//!   ([`hairpin_planner::CorednsFacts::forward_zones`], as the planner read them). A target
//!   `/etc/resolv.conf` means the CoreDNS pod's resolv.conf, which with CoreDNS's `dnsPolicy: Default` holds the node's resolvers;
//!   the controller reads its own resolv.conf for it, so the chart runs the controller with
//!   `dnsPolicy: Default` too (with `ClusterFirst` it would ask CoreDNS, and see hairpin's own
//!   answers: such a resolv.conf, told by its `svc` search domain, is refused with a message
//!   saying so). A name no zone forwards, or whose targets it cannot ask (`tls://`), is asked of
//!   the controller's resolv.conf servers.
//! - How: A and AAAA, following CNAMEs (the chain is kept: a CNAME to the load balancer's
//!   status hostname proves the name too), no search list, no hosts file. A wildcard is asked
//!   through a fresh random label under it.
//! - When: a name is asked when it first appears and again when its answer's TTL runs out
//!   (bounded by [`OwnershipParams::min_ttl`] and [`OwnershipParams::max_ttl`]); a failed query is
//!   retried after [`OwnershipParams::retry`]. At most [`OwnershipParams::concurrency`] queries are
//!   in flight.
//! - Failures do not flap: when a re-check fails (timeout, `SERVFAIL`) the last definite
//!   answer is kept until a re-check gets one again. Only a name never answered since the
//!   controller started is reported as failed (and not redirected).
//! - The controller is told (its `changed` notification) only when an answer changes, never
//!   for a refresh that brings the same answer.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hairpin_planner::forward::{Upstream, ZoneUpstreams, upstreams_for};
use hairpin_planner::verify::NameCheck;
use hairpin_planner::{Resolution, Resolutions};
use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use hickory_resolver::{Resolver, TokioResolver};
use tokio::sync::Notify;

use crate::metrics::Metrics;

/// Resolver settings.
#[derive(Clone, Debug)]
pub struct OwnershipParams {
    /// Time allowed for one query to one server.
    pub timeout: Duration,
    /// Tries per server.
    pub attempts: usize,
    /// Queries in flight at most.
    pub concurrency: usize,
    /// Shortest time an answer is kept (a TTL of 0 or 5 s would ask on every reconcile).
    pub min_ttl: Duration,
    /// Longest time an answer is kept (a day-long TTL would miss a moved name for a day).
    pub max_ttl: Duration,
    /// Delay before a failed query is asked again.
    pub retry: Duration,
    /// How long after its start the controller holds its first write while names are not
    /// resolved yet, so that a restart does not drop working names until their answers come.
    pub startup_grace: Duration,
    /// Servers to ask instead of the Corefile's (tests; `None` in production).
    pub servers: Option<Vec<SocketAddr>>,
    /// The resolv.conf read for a `forward` to a resolv.conf and for names no zone forwards.
    pub resolv_conf: PathBuf,
}

impl Default for OwnershipParams {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(2),
            attempts: 2,
            concurrency: 64,
            min_ttl: Duration::from_secs(60),
            max_ttl: Duration::from_secs(3600),
            retry: Duration::from_secs(30),
            startup_grace: Duration::from_secs(30),
            servers: None,
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
        }
    }
}

/// One cached answer.
#[derive(Clone, Debug)]
struct Cached {
    resolution: Resolution,
    /// When it is asked again.
    due: Instant,
}

/// The servers asked for one name, or why there are none.
type Servers = Result<Vec<SocketAddr>, String>;

#[derive(Default)]
struct State {
    /// Name -> the servers to ask, as the last plan listed them.
    wanted: BTreeMap<String, Servers>,
    answers: HashMap<String, Cached>,
    /// What the last snapshot got ([`OwnershipResolver::resolutions`]).
    published: Resolutions,
}

struct Shared {
    params: OwnershipParams,
    state: Mutex<State>,
    /// Wakes the resolver task when the wanted names change.
    wake: Notify,
    /// Wakes the control loop when an answer changes.
    changed: Arc<Notify>,
    metrics: Metrics,
    started: Instant,
}

/// The controller's handle on the resolver task.
#[derive(Clone)]
pub struct OwnershipResolver {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for OwnershipResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("OwnershipResolver")
            .field("wanted", &state.wanted.len())
            .field("answers", &state.answers.len())
            .finish_non_exhaustive()
    }
}

impl OwnershipResolver {
    /// A resolver that wakes `changed` when an answer changes; [`OwnershipResolver::run`] does the
    /// resolving.
    pub fn new(params: OwnershipParams, changed: Arc<Notify>, metrics: Metrics) -> Self {
        Self {
            shared: Arc::new(Shared {
                params,
                state: Mutex::new(State::default()),
                wake: Notify::new(),
                changed,
                metrics,
                started: Instant::now(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data, still usable.
        self.shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The answers so far, for [`hairpin_planner::ClusterSnapshot::resolutions`].
    pub fn resolutions(&self) -> Resolutions {
        self.state().published.clone()
    }

    /// Sets the names to resolve (the plan's [`hairpin_planner::verify::Verification::names`]) and
    /// the Corefile's forward zones; wakes the resolver when they change.
    pub fn want(&self, names: &[NameCheck], zones: &[ZoneUpstreams]) {
        let own = || read_resolv_conf(&self.shared.params.resolv_conf);
        let mut own_servers: Option<Servers> = None;
        let mut wanted = BTreeMap::new();
        for n in names {
            let servers = match &self.shared.params.servers {
                Some(servers) => Ok(servers.clone()),
                None => {
                    let targets = upstreams_for(zones, &n.hostname).unwrap_or_default();
                    let mut servers = Vec::new();
                    for t in targets {
                        match t {
                            Upstream::Server(addr) => servers.push(*addr),
                            Upstream::ResolvConf(_) => {
                                if let Ok(own) = own_servers.get_or_insert_with(own) {
                                    servers.extend(own.iter().copied());
                                }
                            }
                            Upstream::Unsupported(_) => {}
                        }
                    }
                    if servers.is_empty() {
                        own_servers.get_or_insert_with(own).clone()
                    } else {
                        servers.dedup();
                        Ok(servers)
                    }
                }
            };
            wanted.insert(n.hostname.clone(), servers);
        }
        let mut state = self.state();
        if state.wanted != wanted {
            state.wanted = wanted;
            drop(state);
            self.shared.wake.notify_one();
        }
    }

    /// Whether the controller may write: every wanted name has an answer, or the startup grace
    /// is over.
    pub fn settled(&self) -> bool {
        if self.shared.started.elapsed() >= self.shared.params.startup_grace {
            return true;
        }
        let state = self.state();
        state
            .wanted
            .keys()
            .all(|name| state.answers.contains_key(name))
    }

    /// Resolves the wanted names until `stop` resolves.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        let mut resolvers: HashMap<Vec<SocketAddr>, TokioResolver> = HashMap::new();
        loop {
            let (due, next) = self.due();
            if due.is_empty() {
                let sleep = next.map_or(Duration::from_secs(3600), |at| {
                    at.saturating_duration_since(Instant::now())
                });
                tokio::select! {
                    () = self.shared.wake.notified() => {}
                    () = tokio::time::sleep(sleep) => {}
                    () = &mut stop => return,
                }
                continue;
            }
            let work = self.resolve(due, &mut resolvers);
            tokio::select! {
                () = work => {}
                () = &mut stop => return,
            }
        }
    }

    /// The names to ask now, and when the next one is due.
    fn due(&self) -> (Vec<(String, Servers)>, Option<Instant>) {
        let now = Instant::now();
        let state = self.state();
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        for (name, servers) in &state.wanted {
            match state.answers.get(name) {
                Some(c) if c.due > now => next = Some(next.map_or(c.due, |n| n.min(c.due))),
                _ => due.push((name.clone(), servers.clone())),
            }
        }
        (due, next)
    }

    /// Asks `due`, [`OwnershipParams::concurrency`] at a time, publishing the answers every
    /// chunk (a long first pass shows progress, and the control loop plans with it).
    async fn resolve(
        &self,
        due: Vec<(String, Servers)>,
        resolvers: &mut HashMap<Vec<SocketAddr>, TokioResolver>,
    ) {
        const CHUNK: usize = 1024;
        let params = &self.shared.params;
        for chunk in due.chunks(CHUNK) {
            let jobs: Vec<_> = chunk
                .iter()
                .map(|(name, servers)| {
                    let resolver = match servers {
                        Ok(servers) if !servers.is_empty() => match resolvers.get(servers) {
                            Some(r) => Ok(r.clone()),
                            None => resolver_for(servers, params).inspect(|r| {
                                resolvers.insert(servers.clone(), r.clone());
                            }),
                        },
                        Ok(_) => Err("no upstream DNS server to ask".to_owned()),
                        Err(e) => Err(e.clone()),
                    };
                    (name.clone(), resolver)
                })
                .collect();
            let answers: Vec<(String, Resolution, Duration)> =
                futures::stream::iter(jobs.into_iter().map(|(name, resolver)| async move {
                    let (resolution, ttl) = match resolver {
                        Ok(r) => ask(&r, &name).await,
                        Err(e) => (
                            Resolution::Failed {
                                error: format!("no upstream to ask: {e}"),
                            },
                            Duration::ZERO,
                        ),
                    };
                    (name, resolution, ttl)
                }))
                .buffer_unordered(params.concurrency.max(1))
                .collect()
                .await;
            self.record(answers);
        }
    }

    /// Stores answers (keeping the last definite one over a failure) and publishes them; wakes
    /// the control loop when any name's answer changed.
    fn record(&self, answers: Vec<(String, Resolution, Duration)>) {
        let params = &self.shared.params;
        let now = Instant::now();
        let mut state = self.state();
        for (name, resolution, ttl) in answers {
            let label = match &resolution {
                Resolution::Addresses { .. } => "answer",
                Resolution::NxDomain => "nxdomain",
                Resolution::Failed { .. } => "failed",
            };
            self.shared.metrics.hostname_lookup(label);
            let failed = matches!(resolution, Resolution::Failed { .. });
            let previous = state.answers.get(&name);
            let resolution = match previous {
                Some(p) if failed && !matches!(p.resolution, Resolution::Failed { .. }) => {
                    p.resolution.clone()
                }
                _ => resolution,
            };
            let due = if failed {
                now + params.retry
            } else {
                now + ttl.clamp(params.min_ttl, params.max_ttl)
            };
            state.answers.insert(name, Cached { resolution, due });
        }
        let wanted = &state.wanted;
        let published: BTreeMap<String, Resolution> = wanted
            .keys()
            .filter_map(|name| {
                state
                    .answers
                    .get(name)
                    .map(|c| (name.clone(), c.resolution.clone()))
            })
            .collect();
        let changed = *state.published != published;
        if changed {
            state.published = Arc::new(published);
        }
        // Names no longer wanted are forgotten.
        let State {
            wanted, answers, ..
        } = &mut *state;
        answers.retain(|name, _| wanted.contains_key(name));
        drop(state);
        if changed {
            self.shared.changed.notify_one();
        }
    }
}

/// Resolves the names of `snapshot`'s plan once, for `hairpin plan` against a cluster: the
/// answers land in `snapshot.resolutions`. Names without an answer within `timeout` stay
/// unresolved.
pub async fn resolve_once(
    snapshot: &mut hairpin_planner::ClusterSnapshot,
    planner: &hairpin_planner::PlannerConfig,
    params: OwnershipParams,
    metrics: Metrics,
    timeout: Duration,
) {
    let plan = hairpin_planner::desired(snapshot, planner);
    if plan.verification.names.is_empty() {
        return;
    }
    let params = OwnershipParams {
        startup_grace: Duration::MAX,
        ..params
    };
    let resolver = OwnershipResolver::new(params, Arc::new(Notify::new()), metrics);
    resolver.want(&plan.verification.names, &plan.coredns.forward_zones);
    let run = resolver.clone().run(std::future::pending());
    let done = async {
        while !resolver.settled() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let _ = tokio::time::timeout(timeout, async {
        tokio::select! {
            () = run => {}
            () = done => {}
        }
    })
    .await;
    snapshot.resolutions = resolver.resolutions();
}

/// A resolver asking exactly `servers`: no cache of its own (the upstream keeps the answers
/// with their TTLs), no hosts file, no search list, CNAME chains kept.
fn resolver_for(servers: &[SocketAddr], params: &OwnershipParams) -> Result<TokioResolver, String> {
    let name_servers = servers
        .iter()
        .map(|server| {
            let mut ns = NameServerConfig::udp_and_tcp(server.ip());
            for connection in &mut ns.connections {
                connection.port = server.port();
            }
            ns
        })
        .collect();
    let config = ResolverConfig::from_name_servers(name_servers);
    let mut opts = ResolverOpts::default();
    opts.timeout = params.timeout;
    opts.attempts = params.attempts;
    opts.cache_size = 0;
    opts.use_hosts_file = ResolveHosts::Never;
    opts.ndots = 0;
    opts.preserve_intermediates = true;
    opts.ip_strategy = hickory_resolver::config::LookupIpStrategy::Ipv4AndIpv6;
    Resolver::builder_with_config(config, TokioRuntimeProvider::default())
        .with_options(opts)
        .build()
        .map_err(|err| err.to_string())
}

/// A fresh label for asking about a wildcard: random, so that it is no name anyone created.
fn random_label() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    let mut n = hasher.finish();
    let mut label = String::from("hairpin-");
    for _ in 0..10 {
        let d = u8::try_from(n % 36).unwrap_or(0);
        label.push(char::from(if d < 10 { b'0' + d } else { b'a' + d - 10 }));
        n /= 36;
    }
    label
}

/// The query name for a hostname: itself, or a random name under a wildcard.
pub fn query_name(hostname: &str) -> String {
    match hostname.strip_prefix("*.") {
        Some(suffix) => format!("{}.{suffix}.", random_label()),
        None => format!("{hostname}."),
    }
}

/// Asks one name: its answer and how long it holds.
async fn ask(resolver: &TokioResolver, hostname: &str) -> (Resolution, Duration) {
    let query = query_name(hostname);
    match resolver.lookup_ip(query).await {
        Ok(lookup) => {
            let ttl = lookup
                .valid_until()
                .saturating_duration_since(Instant::now());
            let mut addresses: Vec<IpAddr> = lookup.iter().collect();
            addresses.sort();
            addresses.dedup();
            let cnames = lookup
                .as_lookup()
                .answers()
                .iter()
                .filter_map(|r| match &r.data {
                    RData::CNAME(c) => {
                        Some(c.0.to_ascii().trim_end_matches('.').to_ascii_lowercase())
                    }
                    _ => None,
                })
                .collect();
            (Resolution::Addresses { addresses, cnames }, ttl)
        }
        Err(err) if err.is_nx_domain() => (Resolution::NxDomain, Duration::ZERO),
        Err(err) if err.is_no_records_found() => (
            Resolution::Addresses {
                addresses: Vec::new(),
                cnames: Vec::new(),
            },
            Duration::ZERO,
        ),
        Err(err) => (
            Resolution::Failed {
                error: short_error(&err.to_string()),
            },
            Duration::ZERO,
        ),
    }
}

/// hickory's error text, with a timeout said as `timeout`.
fn short_error(error: &str) -> String {
    if error.to_ascii_lowercase().contains("timed out") || error.contains("timeout") {
        "timeout".to_owned()
    } else {
        error.to_owned()
    }
}

/// The `nameserver` lines of a resolv.conf. Refused when it is a cluster pod's (dnsPolicy
/// `ClusterFirst`: its search list holds `<namespace>.svc.<cluster domain>`): its nameserver is
/// the cluster DNS, which answers hairpin's names with hairpin's own rules, so every name
/// would look redirected elsewhere one round and be redirected again the next. A failure
/// keeps the last definite answers, and a name never answered is not redirected.
fn read_resolv_conf(path: &std::path::Path) -> Servers {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let cluster_search = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("search"))
        .flat_map(str::split_whitespace)
        .find(|domain| domain.split('.').any(|label| label == "svc"));
    if let Some(domain) = cluster_search {
        return Err(format!(
            "{} is a cluster pod's (search {domain}): its nameserver is the cluster DNS, which \
             answers with hairpin's own rules; run the controller with dnsPolicy: Default (as the \
             chart and manifest do) or name upstream servers with --verify-nameserver",
            path.display()
        ));
    }
    let servers: Vec<SocketAddr> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.trim().split('%').next()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect();
    if servers.is_empty() {
        return Err(format!("{}: no nameserver", path.display()));
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_is_asked_through_a_fresh_random_label() {
        let a = query_name("*.example.com");
        let b = query_name("*.example.com");
        assert!(
            a.starts_with("hairpin-") && a.ends_with(".example.com."),
            "{a}"
        );
        assert_ne!(a, b);
        assert_eq!(query_name("shop.example.com"), "shop.example.com.");
    }

    #[test]
    fn resolv_conf_nameservers_are_read() {
        let dir = std::env::temp_dir().join(format!("hairpin-resolv-{}", std::process::id()));
        std::fs::write(
            &dir,
            "search example.internal\nnameserver 10.0.0.2\nnameserver fe80::1%eth0\noptions ndots:5\n",
        )
        .unwrap();
        let servers = read_resolv_conf(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(
            servers,
            [
                "10.0.0.2:53".parse().unwrap(),
                "[fe80::1]:53".parse().unwrap()
            ]
        );
        assert!(read_resolv_conf(std::path::Path::new("/nonexistent/resolv.conf")).is_err());
    }

    #[test]
    fn a_cluster_pods_resolv_conf_is_refused_for_what_it_is() {
        let path = std::env::temp_dir().join(format!("hairpin-resolv-cf-{}", std::process::id()));
        std::fs::write(
            &path,
            "search hairpin.svc.cluster.local svc.cluster.local cluster.local\n\
             nameserver 10.96.0.10\noptions ndots:5\n",
        )
        .unwrap();
        let err = read_resolv_conf(&path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(err.contains("search hairpin.svc.cluster.local"), "{err}");
        assert!(err.contains("dnsPolicy: Default"), "{err}");
    }
}
