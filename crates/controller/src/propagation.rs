//! Whether a DNS write took effect as pods see it: ask the cluster DNS (and node-local-dns,
//! when it is reachable) for the changed hostnames until they answer with the hairpin
//! Service's ClusterIP, then connect to that Service.
//!
//! The kubelet can take a minute or more to sync a ConfigMap into CoreDNS's pods, `reload`
//! checks only every 30 s, and a Corefile CoreDNS rejects leaves the old one running: the only
//! proof is an answer. Queries go through hickory's resolver (UDP, falling back to TCP on
//! truncation), with its cache off so every round sees the server's current answer.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::{Resolver, TokioResolver};

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

#[cfg(test)]
mod tests {
    #[test]
    fn rounds_are_quick_in_the_first_minute_then_at_the_interval() {
        use super::pause;
        use std::time::Duration;
        let ms = Duration::from_millis;
        let interval = Duration::from_secs(2);
        let fast: Vec<Duration> = (0..6).map(|r| pause(r, ms(300), interval)).collect();
        assert_eq!(fast, [ms(100), ms(200), ms(400), ms(500), ms(500), ms(500)]);
        // Resolution: never more than half a second in the first minute.
        assert_eq!(pause(40, Duration::from_secs(59), interval), ms(500));
        assert_eq!(pause(41, Duration::from_secs(61), interval), interval);
        // A shorter interval is never exceeded.
        assert_eq!(pause(5, ms(10), ms(50)), ms(50));
    }

    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn every_wildcard_gets_a_probe_and_exact_names_are_bounded() {
        let mut hosts = names(&["*.apps.example.com", "*.example.org"]);
        hosts.extend((0..100).map(|i| format!("h{i:03}.example.com")));
        let probes = probe_names(&hosts, 5);
        assert_eq!(probes.len(), 7, "{probes:?}");
        assert!(probes.contains(&"hairpin-probe.apps.example.com".to_owned()));
        assert!(probes.contains(&"hairpin-probe.example.org".to_owned()));
        // Spread over the list, not the first five.
        assert!(
            probes.contains(&"h000.example.com".to_owned()),
            "{probes:?}"
        );
        assert!(
            probes.contains(&"h080.example.com".to_owned()),
            "{probes:?}"
        );
    }

    #[test]
    fn few_names_are_all_asked() {
        let probes = probe_names(&names(&["b.example.com", "a.example.com"]), 5);
        assert_eq!(probes, names(&["a.example.com", "b.example.com"]));
    }

    #[test]
    fn only_the_hairpin_addresses_count_as_effective() {
        let hairpin: IpAddr = "10.96.0.20".parse().unwrap();
        let lb: IpAddr = "203.0.113.10".parse().unwrap();
        assert!(is_expected(&Answer::Addresses(vec![hairpin]), &[hairpin]));
        assert!(!is_expected(
            &Answer::Addresses(vec![hairpin, lb]),
            &[hairpin]
        ));
        assert!(!is_expected(&Answer::Addresses(vec![lb]), &[hairpin]));
        assert!(!is_expected(&Answer::NoRecords, &[hairpin]));
    }
}
