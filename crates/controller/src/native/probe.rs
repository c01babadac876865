//! The native cure's probe, from the controller's pod (an in-cluster client subject to the
//! same kube-proxy or CNI rules as any pod): every PROXY port of every IP, asked as any client
//! would, without a header: an HTTP request (HTTP ports) or a TLS handshake with a
//! hairpinned name as SNI (TLS ports).
//!
//! What counts as an answer, the same before and after the write: an HTTP status line other
//! than `400` (a server that read the request as a request), or a TLS handshake in which the
//! server proved it holds the certificate it presented (any certificate: the chain is not
//! checked). And the answer must come from the receiver ([`from_receiver`], the proof's
//! criterion): before the write the baseline also asks every port *with* a PROXY header,
//! through the path that works today (kube-proxy short-circuits the address to the receiver),
//! and records what answered ([`Fingerprints`]: the status line and the `Server` header, or
//! the leaf certificate's names and SHA-256); after the write, an
//! answer through the load balancer with another fingerprint is another server's (a
//! transparent egress proxy, a firewall, a TLS-inspecting proxy, Cilium's L7 403): it proves
//! nothing, ends the proof when repeated, and the verdict names what answered. Everything
//! else is no answer: an empty reply or a reset (nginx and HAProxy close a connection whose
//! first bytes are not a PROXY header, nginx logging `broken header`), silence, a `400` (what
//! a receiver answers to bytes it could not read as a request), bytes that are neither HTTP
//! nor TLS. A refused connection or an unreachable network or host is a *definite* failure:
//! the address leads nowhere from here.
//!
//! - [`baseline`], before any status write: the problem must show, every attempt on every
//!   port unanswered. Answered on every attempt: the load balancer needs no cure here.
//! - [`prove`], after the write: proven only when every port answered several times in a
//!   row (a failure resets the count), so that a lucky answer, or one from before kube-proxy
//!   followed the change, proves nothing. A definite failure repeated on a port ends the
//!   probe at once, without waiting for the deadline; so does no answer repeated on a port
//!   that answered before: in this probe, or in the proof of a cure probed again (no change is
//!   awaited then: the status said `Proxy` already, and kube-proxy restarted with its gate off
//!   answers with an empty reply from then on). Right after a write, no answer is what the
//!   address says until kube-proxy follows, so it ends nothing before the deadline.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use hairpin_planner::LoadBalancerPlan;
use hairpin_planner::native::IpModeWas;

use super::NativeParams;

mod cert;
mod tls;

pub use hairpin_planner::native::ProbeTarget;

/// What one probe connection got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// Answered as a server answers a client: the status line and `Server` header, or the
    /// TLS certificate the server proved it holds (`TLS certificate <names>, SHA-256 <hex>`).
    Answered(String),
    /// No answer: an empty reply, a reset, silence, an answer that is not one.
    NoAnswer(String),
    /// The connection was refused, or the network or host is unreachable from here.
    Unreachable(String),
    /// Answered, but not as the receiver answered through its header path before the write:
    /// what answered, and what the receiver said (both escaped).
    Foreign {
        /// What answered now.
        answered: String,
        /// The receiver's fingerprint.
        receiver: String,
    },
}

/// What answered each port through the path that works today, with a PROXY header, before
/// the write, by address (escaped): an HTTP port's status line and `Server` header; a TLS
/// port's leaf certificate (`TLS certificate <names>, SHA-256 <hex>`, or only
/// `TLS certificate <names>` where the receivers present certificates of their own with the
/// same names: see [`tls_fingerprint`]). Kept in the record
/// ([`hairpin_planner::native::ProbeSpec::receiver`]) for the node agents and later re-probes.
pub use hairpin_planner::native::Fingerprints;

/// The proof's criterion, in one place: `attempt` on `addr` counts as the receiver's answer
/// only when the receiver's fingerprint recorded before the write (`receiver`, when one was)
/// is what answered; any other answerer is [`Attempt::Foreign`]. A TLS fingerprint without a
/// hash matches any certificate with those names.
pub fn from_receiver(attempt: Attempt, addr: &SocketAddr, receiver: &Fingerprints) -> Attempt {
    match (attempt, receiver.get(addr)) {
        (Attempt::Answered(line), Some(expected))
            if line != *expected && tls::names_only(&line) != Some(expected.as_str()) =>
        {
            Attempt::Foreign {
                answered: line,
                receiver: expected.clone(),
            }
        }
        (attempt, _) => attempt,
    }
}

impl Attempt {
    /// `answer` as the metrics label it: `answered`, `no-answer`, `unreachable`.
    pub fn label(&self) -> &'static str {
        match self {
            Attempt::Answered(_) => "answered",
            Attempt::NoAnswer(_) => "no-answer",
            Attempt::Unreachable(_) => "unreachable",
            Attempt::Foreign { .. } => "foreign",
        }
    }

    fn answered(&self) -> bool {
        matches!(self, Attempt::Answered(_))
    }

    /// In words, escaped (the answer quotes the server).
    fn describe(&self) -> String {
        match self {
            Attempt::Answered(line) => format!("answered ({line})"),
            Attempt::NoAnswer(why) | Attempt::Unreachable(why) => why.clone(),
            Attempt::Foreign { answered, receiver } => format!(
                "answered by another server than the receiver: {answered}, where the receiver answered {receiver} through its header path before the write (a transparent egress proxy, a firewall, a TLS-inspecting proxy or an L7 policy on the way?)"
            ),
        }
    }
}

/// Called with every attempt's outcome and latency (the metrics).
pub type Observer = Arc<dyn Fn(&Attempt, Duration) + Send + Sync>;

/// One probe connection.
pub async fn probe_once(target: &ProbeTarget, timeout: Duration) -> Attempt {
    ask(target, timeout, false).await
}

/// One probe connection; `header`: preceded by a PROXY v1 header (the receiver's own path,
/// which every PROXY receiver reads, v1 or v2).
async fn ask(target: &ProbeTarget, timeout: Duration, header: bool) -> Attempt {
    let connect = tokio::time::timeout(timeout, TcpStream::connect(target.addr)).await;
    let mut stream = match connect {
        Ok(Ok(stream)) => stream,
        Ok(Err(err)) => {
            use std::io::ErrorKind::{ConnectionRefused, HostUnreachable, NetworkUnreachable};
            let why = format!("cannot connect: {err}");
            return match err.kind() {
                ConnectionRefused | HostUnreachable | NetworkUnreachable => {
                    Attempt::Unreachable(why)
                }
                _ => Attempt::NoAnswer(why),
            };
        }
        Err(_) => return Attempt::NoAnswer(format!("no TCP answer within {timeout:?}")),
    };
    let prefix = if header {
        proxy_line(&stream, target)
    } else {
        Vec::new()
    };
    if target.tls {
        let identify = tls::identify(&mut stream, &target.host, prefix);
        return match tokio::time::timeout(timeout, identify).await {
            Err(_) => Attempt::NoAnswer("no answer before the timeout".into()),
            Ok(Ok(certificate)) => Attempt::Answered(certificate),
            Ok(Err(why)) => Attempt::NoAnswer(why),
        };
    }
    let mut request = prefix;
    request.extend_from_slice(
        format!(
            "GET / HTTP/1.1\r\nHost: {}\r\nUser-Agent: hairpin-native-probe\r\nConnection: close\r\n\r\n",
            target.host
        )
        .as_bytes(),
    );
    let exchange = async {
        stream.write_all(&request).await?;
        // The status line and the headers (the `Server` header names the answerer): up to
        // 4 KiB or the end of the headers, whichever comes first.
        let mut answer = Vec::with_capacity(1024);
        let mut chunk = [0u8; 1024];
        loop {
            let n = stream.read(&mut chunk).await?;
            answer.extend_from_slice(&chunk[..n]);
            let done =
                n == 0 || answer.len() >= 4096 || answer.windows(4).any(|w| w == b"\r\n\r\n");
            if done {
                break;
            }
        }
        Ok::<_, std::io::Error>(answer)
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Attempt::NoAnswer("no answer before the timeout".into()),
        Ok(Err(err)) => Attempt::NoAnswer(format!("no answer: {err}")),
        Ok(Ok(answer)) => judge(&answer),
    }
}

/// A PROXY v1 header for a connection from `stream` to `target` (the receiver's own path,
/// which every PROXY receiver reads, v1 or v2).
fn proxy_line(stream: &TcpStream, target: &ProbeTarget) -> Vec<u8> {
    let proto = if target.addr.is_ipv4() {
        "TCP4"
    } else {
        "TCP6"
    };
    let local = stream.local_addr().unwrap_or(target.addr);
    format!(
        "PROXY {proto} {} {} {} {}\r\n",
        local.ip(),
        target.addr.ip(),
        local.port(),
        target.addr.port()
    )
    .into_bytes()
}

/// The first bytes an HTTP server sent back, judged.
fn judge(answer: &[u8]) -> Attempt {
    if answer.is_empty() {
        return Attempt::NoAnswer("empty reply (the ingress got no PROXY header)".into());
    }
    let line = answer.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line).trim_end().to_owned();
    let escaped = hairpin_planner::escape::text(&line).into_owned();
    let status = line.split_whitespace().nth(1);
    if !line.starts_with("HTTP/") {
        Attempt::NoAnswer("an answer that is not HTTP".into())
    } else if status == Some("400") {
        Attempt::NoAnswer(format!(
            "{escaped} (the request was not read as one: what a receiver that wants a header answers)"
        ))
    } else {
        Attempt::Answered(match server_header(answer) {
            Some(server) => format!(
                "{escaped}, Server: {}",
                hairpin_planner::escape::text(&server)
            ),
            None => escaped,
        })
    }
}

/// The value of the `Server` header of an HTTP answer's head, if any.
fn server_header(answer: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(answer);
    head.split("\r\n")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("server")
                .then(|| value.trim().to_owned())
        })
}

/// One attempt, timed and reported to `observe`.
async fn attempt(target: &ProbeTarget, timeout: Duration, observe: Option<&Observer>) -> Attempt {
    let started = Instant::now();
    let outcome = probe_once(target, timeout).await;
    if let Some(observe) = observe {
        observe(&outcome, started.elapsed());
    }
    outcome
}

/// What a proof found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeVerdict {
    /// Every port answered [`NativeParams::answers`] times in a row.
    pub proven: bool,
    /// Ended before the deadline on a definite failure repeated: refused or unreachable, or
    /// no answer on a port that answered before.
    pub definite: bool,
    /// The outcome per address, in words.
    pub detail: String,
    /// How long it took from the status write.
    pub took: Duration,
}

/// Per port during a proof: answers, definite failures and attempts without an answer in a
/// row, whether it answered before, and the last outcome.
#[derive(Default)]
struct Streak {
    answered: u32,
    unreachable: u32,
    silent: u32,
    foreign: u32,
    answered_before: bool,
    last: Option<Attempt>,
}

impl Streak {
    fn count(&mut self, outcome: Attempt) {
        (self.answered, self.unreachable, self.silent, self.foreign) = match &outcome {
            Attempt::Answered(_) => (self.answered + 1, 0, 0, 0),
            Attempt::Unreachable(_) => (0, self.unreachable + 1, 0, 0),
            Attempt::NoAnswer(_) => (0, 0, self.silent + 1, 0),
            Attempt::Foreign { .. } => (0, 0, 0, self.foreign + 1),
        };
        self.answered_before |= outcome.answered();
        self.last = Some(outcome);
    }

    /// Failed `needed` times in a row in a way that no wait changes.
    fn definite(&self, needed: u32) -> bool {
        self.unreachable >= needed
            || self.foreign >= needed
            || (self.answered_before && self.silent >= needed)
    }
}

/// How a proof starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proof {
    /// Right after hairpin wrote `ipMode: Proxy`: kube-proxy may not have followed yet.
    AfterWrite,
    /// A cure proven before, probed again (no write awaited): its ports answered before.
    Again,
}

/// Probes every target until each answered [`NativeParams::answers`] times in a row, a port
/// failed definitely that many times in a row (see [`Streak::definite`]; `proof`: whether
/// its ports answered before), or the deadline passed.
pub async fn prove(
    targets: Vec<ProbeTarget>,
    params: &NativeParams,
    observe: Option<Observer>,
    proof: Proof,
) -> ProbeVerdict {
    prove_from(targets, params, observe, proof, &Fingerprints::new()).await
}

/// [`prove`], where only the receiver's answers count ([`from_receiver`]): `receiver`, what
/// answered each port through its header path before the write (the baseline's).
pub async fn prove_from(
    targets: Vec<ProbeTarget>,
    params: &NativeParams,
    observe: Option<Observer>,
    proof: Proof,
    receiver: &Fingerprints,
) -> ProbeVerdict {
    let started = Instant::now();
    let needed = params.answers.max(1);
    let mut streaks: BTreeMap<SocketAddr, Streak> = BTreeMap::new();
    loop {
        for target in &targets {
            let streak = streaks.entry(target.addr).or_insert_with(|| Streak {
                answered_before: proof == Proof::Again,
                ..Streak::default()
            });
            if streak.answered >= needed {
                continue;
            }
            let answer = attempt(target, params.timeout, observe.as_ref()).await;
            streak.count(from_receiver(answer, &target.addr, receiver));
        }
        let proven = !targets.is_empty() && streaks.values().all(|s| s.answered >= needed);
        let definite = streaks.values().any(|s| s.definite(needed));
        if proven || definite || started.elapsed() >= params.deadline {
            let detail = if targets.is_empty() {
                "no PROXY port to probe".to_owned()
            } else {
                streaks
                    .iter()
                    .map(|(addr, s)| match &s.last {
                        Some(Attempt::Answered(line)) if s.answered >= needed => format!(
                            "{addr} answered through the load balancer {} times in a row ({line})",
                            s.answered
                        ),
                        Some(a) if s.foreign >= needed => format!(
                            "{addr}: {} ({} times in a row)",
                            a.describe(),
                            s.foreign
                        ),
                        Some(a) if s.unreachable >= needed => format!(
                            "{addr}: {} ({} times in a row: the address leads nowhere from inside the cluster now)",
                            a.describe(),
                            s.unreachable
                        ),
                        Some(a) if s.definite(needed) => format!(
                            "{addr}: {} ({} times in a row on a port that answered before: the cluster short-circuits the address again)",
                            a.describe(),
                            s.silent
                        ),
                        Some(a) => format!("{addr}: {}", a.describe()),
                        None => format!("{addr}: not probed"),
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            return ProbeVerdict {
                proven,
                definite: definite && !proven,
                detail,
                took: started.elapsed(),
            };
        }
        // Once every port answers, the next answers follow closely (a short window); until
        // then, the interval.
        let answering = streaks.values().all(|s| s.answered > 0);
        let pause = if answering {
            params.interval / 4
        } else {
            params.interval
        };
        tokio::time::sleep(pause).await;
    }
}

/// What the probe before any write found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Baseline {
    /// Every attempt on every port of the IPs reached went unanswered: the short-circuit is
    /// there; the cure may be tried on them (and an answer afterwards means something).
    /// `unreachable`: the IPs no attempt reached (every one refused or unreachable: an IPv6
    /// address with no route from here), left out of the cure, with why.
    /// `receiver`: what answered each HTTP port with a PROXY header (the receiver, through the
    /// path that works today), which the proof then requires.
    Shown {
        unreachable: Vec<(IpAddr, String)>,
        receiver: Fingerprints,
    },
    /// Every attempt on every port was answered without a header: nothing to cure.
    NotNeeded(String),
    /// Some attempts were answered, others not, or some address leads nowhere from here:
    /// an answer after the write would prove nothing.
    Unclear(String),
}

/// Asks every target [`NativeParams::answers`] times without a header, before any write.
/// An IP no attempt reached is left out (per IP, per family), unless no IP was reached.
pub async fn baseline(
    targets: &[ProbeTarget],
    params: &NativeParams,
    observe: Option<Observer>,
) -> Baseline {
    if targets.is_empty() {
        return Baseline::Unclear("no PROXY port to probe".into());
    }
    let rounds = params.answers.max(1);
    let mut seen: BTreeMap<SocketAddr, Vec<Attempt>> = BTreeMap::new();
    for round in 0..rounds {
        if round > 0 {
            tokio::time::sleep(params.interval / 4).await;
        }
        for target in targets {
            let outcome = attempt(target, params.timeout, observe.as_ref()).await;
            seen.entry(target.addr).or_default().push(outcome);
        }
    }
    let unreachable = leave_out_unreachable(&mut seen);
    let all = |f: fn(&Attempt) -> bool| seen.values().flatten().all(f);
    let describe = |addr: &SocketAddr, attempts: &[Attempt]| {
        let answered = attempts.iter().filter(|a| a.answered()).count();
        let last = attempts.last().map(Attempt::describe).unwrap_or_default();
        format!("{addr} answered {answered} of {} ({last})", attempts.len())
    };
    let detail = seen
        .iter()
        .map(|(addr, attempts)| describe(addr, attempts))
        .collect::<Vec<_>>()
        .join("; ");
    if all(Attempt::answered) {
        Baseline::NotNeeded(format!(
            "answered without a header before any change: {detail}"
        ))
    } else if all(|a| matches!(a, Attempt::NoAnswer(_))) {
        let mut receiver = Fingerprints::new();
        for target in targets.iter().filter(|t| seen.contains_key(&t.addr)) {
            let fingerprint = if target.tls {
                tls_fingerprint(target, params).await
            } else {
                match ask(target, params.timeout, true).await {
                    Attempt::Answered(line) => Some(line),
                    _ => None,
                }
            };
            if let Some(fingerprint) = fingerprint {
                receiver.insert(target.addr, fingerprint);
            }
        }
        Baseline::Shown {
            unreachable,
            receiver,
        }
    } else if seen
        .values()
        .flatten()
        .any(|a| matches!(a, Attempt::Unreachable(_)))
    {
        Baseline::Unclear(format!(
            "the address cannot be reached from the controller before any change, so no probe could prove the cure: {detail}"
        ))
    } else {
        Baseline::Unclear(format!(
            "some requests without a header were answered before any change, so an answer afterwards would prove nothing: {detail}"
        ))
    }
}

/// A TLS port's receiver, asked [`NativeParams::answers`] times through its header path: its
/// certificate when every answer presented the same one; its names only (`TLS certificate
/// <names>`) when the certificates differ but their names do not (receivers each with a
/// certificate of its own: ingress-nginx makes its default certificate in each pod); else the
/// first answer's (the proof then fails on another receiver's: safe, and named).
async fn tls_fingerprint(target: &ProbeTarget, params: &NativeParams) -> Option<String> {
    let mut answers = Vec::new();
    for _ in 0..params.answers.max(1) {
        if let Attempt::Answered(certificate) = ask(target, params.timeout, true).await {
            answers.push(certificate);
        }
    }
    let first = answers.first()?.clone();
    if answers.iter().all(|a| *a == first) {
        return Some(first);
    }
    let names = tls::names_only(&first);
    if names.is_some() && answers.iter().all(|a| tls::names_only(a) == names) {
        return names.map(str::to_owned);
    }
    Some(first)
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

/// Takes out of `seen` the IPs no attempt on any port reached (every one refused or
/// unreachable), and returns them with the last outcome: unless that is every IP (then
/// nothing is taken out, and the baseline is unclear).
fn leave_out_unreachable(seen: &mut BTreeMap<SocketAddr, Vec<Attempt>>) -> Vec<(IpAddr, String)> {
    let mut by_ip: BTreeMap<IpAddr, Option<&Attempt>> = BTreeMap::new();
    for (addr, attempts) in seen.iter() {
        let reached = attempts
            .iter()
            .any(|a| !matches!(a, Attempt::Unreachable(_)));
        let slot = by_ip.entry(addr.ip()).or_insert(attempts.last());
        if reached {
            *slot = None;
        }
    }
    let unreachable: Vec<(IpAddr, String)> = by_ip
        .iter()
        .filter_map(|(ip, last)| Some((*ip, last.as_ref()?.describe())))
        .collect();
    if unreachable.len() == by_ip.len() {
        return Vec::new();
    }
    seen.retain(|addr, _| !unreachable.iter().any(|(ip, _)| *ip == addr.ip()));
    unreachable
}
