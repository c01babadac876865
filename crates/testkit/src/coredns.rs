//! Real CoreDNS (1.12.2, with a stand-in `kubernetes` plugin) run from a Corefile on loopback.
//!
//! The binary is the test peer in `../shared/peers/coredns/coredns` next to the project (its
//! README describes the stand-ins): the `kubernetes` plugin answers A/AAAA/PTR for the names
//! listed in the file `$HP_RECORDS` names (`fqdn ip` lines, TTL 5 unless its `ttl` option
//! says otherwise) and NXDOMAIN for the other names of its zones.
//!
//! [`localize`] turns a cluster's Corefile into one that runs here: every server block
//! listens on one free loopback port (`bind 127.0.0.1`), `forward` goes to a local upstream
//! (never off the machine), and `health`, `ready`, `prometheus`, `loop` and `bind` are
//! dropped (their fixed ports would clash between tests). [`CoreDns::start`] runs it and adds
//! that upstream as one more server block on another port, answering every name with
//! [`UPSTREAM_V4`] / [`UPSTREAM_V6`] (TTL 60), except names under `invalid.` (NXDOMAIN) and
//! the names of [`Options::upstream`] (their own address). [`CoreDns::write_corefile`] puts a
//! changed cluster Corefile in place, localized the same way, for the `reload` plugin.
//!
//! Tests call [`CoreDns::start`]; where the binary is absent it records a skip
//! ([`crate::skip`]: under CI the test fails instead) and returns `None`, and the test returns.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::Name;
pub use hickory_proto::rr::RecordType;

use crate::{Process, START_TIMEOUT, free_port, isolated_command};

/// The address the local upstream answers for every A query.
pub const UPSTREAM_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 53);
/// The address the local upstream answers for every AAAA query.
pub const UPSTREAM_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x53);

/// Whether the Corefile `text` holds `host`: written out (an `exact` rule) or escaped in a
/// `regex` pattern (a load balancer's names from three on, or beside its one-label wildcards).
pub fn names(text: &str, host: &str) -> bool {
    text.contains(host) || text.contains(&host.replace('.', "\\."))
}

/// Where the CoreDNS test peer is: `$HAIRPIN_TEST_COREDNS`, else `shared/peers/coredns/coredns`
/// in the nearest ancestor of the workspace that has it (`../shared` from the project root,
/// `../../shared` from a worktree below it).
pub fn binary() -> Option<PathBuf> {
    locate().ok()
}

/// [`binary`], or what is missing and where it was looked for.
pub fn locate() -> Result<PathBuf, String> {
    crate::shared_path(
        "peers/coredns/coredns",
        "HAIRPIN_TEST_COREDNS",
        Path::is_file,
    )
    .map_err(|why| format!("the CoreDNS test peer: {why}"))
}

/// For a test that needs the CoreDNS peer: `true` (after [`crate::skip::skip`], which fails
/// the test under CI) when it is absent.
pub fn skip_without(test: &str) -> bool {
    crate::skip::missing(test, locate().err())
}

/// Plugins whose fixed ports or side effects do not belong in a test run.
const DROPPED: &[&str] = &["health", "ready", "prometheus", "loop", "bind"];

/// A cluster Corefile made runnable on loopback: every server block key gets `port`, every
/// block listens on 127.0.0.1 only, `forward FROM TO...` forwards to `upstream`, and the
/// plugins in [`DROPPED`] are removed (with their blocks). Line-based: the Corefile's own
/// layout (one directive per line, blocks closed by a `}` line) is kept.
pub fn localize(corefile: &str, port: u16, upstream: SocketAddr) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    // Depth at which a dropped plugin's block ends.
    let mut skipping: Option<usize> = None;
    for line in corefile.lines() {
        let code = strip_comment(line);
        let opens = code.matches('{').count();
        let closes = code.matches('}').count();
        let trimmed = code.trim();
        let first = trimmed.split_whitespace().next().unwrap_or("");
        let after = depth + opens - closes.min(depth + opens);
        if let Some(until) = skipping {
            depth = after;
            if depth <= until {
                skipping = None;
            }
            continue;
        }
        if depth == 0 && opens > 0 && !trimmed.starts_with(['{', '(']) && first != "import" {
            // A server block's keys.
            let keys: Vec<String> = trimmed
                .trim_end_matches('{')
                .split_whitespace()
                .flat_map(|k| k.split(','))
                .filter(|k| !k.is_empty())
                .map(|k| with_port(k, port))
                .collect();
            out.push_str(&format!("{} {{\n    bind 127.0.0.1\n", keys.join(" ")));
            depth = after;
            continue;
        }
        if depth == 1 && DROPPED.contains(&first) {
            if after > depth {
                skipping = Some(depth);
            }
            depth = after;
            continue;
        }
        if depth == 1 && first == "forward" {
            let from = trimmed.split_whitespace().nth(1).unwrap_or(".");
            let block = if opens > closes { " {" } else { "" };
            let indent = &line[..line.len() - line.trim_start().len()];
            out.push_str(&format!("{indent}forward {from} {upstream}{block}\n"));
            depth = after;
            continue;
        }
        out.push_str(line);
        out.push('\n');
        depth = after;
    }
    out
}

fn strip_comment(line: &str) -> &str {
    let mut quoted = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '#' if !quoted => return &line[..i],
            _ => {}
        }
    }
    line
}

/// `key` with its port replaced by `port` (`.:53` -> `.:PORT`, `cluster.local` ->
/// `cluster.local:PORT`, `dns://.:53` -> `dns://.:PORT`).
fn with_port(key: &str, port: u16) -> String {
    let (scheme, rest) = match key.split_once("://") {
        Some((s, r)) => (format!("{s}://"), r),
        None => (String::new(), key),
    };
    let zone = match rest.rsplit_once(':') {
        Some((zone, _)) if !zone.contains('[') || zone.ends_with(']') => zone,
        _ => rest,
    };
    format!("{scheme}{zone}:{port}")
}

/// The local upstream's server block: `names` (exact, TTL 60) with their own address, every
/// other name with [`UPSTREAM_V4`] / [`UPSTREAM_V6`], names under `invalid.` NXDOMAIN.
fn upstream_block(addr: SocketAddr, names: &[(String, IpAddr)]) -> String {
    let mut own = String::new();
    for (name, ip) in names {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let rtype = if ip.is_ipv4() { "A" } else { "AAAA" };
        let pattern = name.replace('.', "[.]");
        own.push_str(&format!(
            "    template IN {rtype} {name} {{\n        match \"^(?i){pattern}[.]$\"\n        \
             answer \"{{{{ .Name }}}} 60 IN {rtype} {ip}\"\n        fallthrough\n    }}\n"
        ));
    }
    format!(
        "\n.:{port} {{\n    bind 127.0.0.1\n{own}    \
         template IN ANY invalid {{\n        rcode NXDOMAIN\n        \
         authority \"invalid. 60 IN SOA ns.invalid. h.invalid. 1 60 60 60 60\"\n    }}\n    \
         template IN A {{\n        answer \"{{{{ .Name }}}} 60 IN A {UPSTREAM_V4}\"\n    }}\n    \
         template IN AAAA {{\n        answer \"{{{{ .Name }}}} 60 IN AAAA {UPSTREAM_V6}\"\n    }}\n\
         }}\n",
        port = addr.port()
    )
}

/// `corefile` localized to `port` plus the upstream block.
fn runnable(corefile: &str, port: u16, upstream: &(SocketAddr, Vec<(String, IpAddr)>)) -> String {
    let mut text = localize(corefile, port, upstream.0);
    text.push_str(&upstream_block(upstream.0, &upstream.1));
    text
}

/// A running CoreDNS, stopped on drop.
#[derive(Debug)]
pub struct CoreDns {
    process: Process,
    addr: SocketAddr,
    corefile: String,
    /// The local upstream and the names it answers with their own address (`None`: verbatim).
    upstream: Option<(SocketAddr, Vec<(String, IpAddr)>)>,
}

/// Settings of [`CoreDns::start_with`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Records the `kubernetes` stand-in answers (`fqdn`, address).
    pub records: Vec<(String, IpAddr)>,
    /// More files in the working directory (name, text), e.g. `custom/hairpin.override` for
    /// `import custom/*.override`.
    pub files: Vec<(String, String)>,
    /// Environment variables for CoreDNS (the Corefile's `{$NAME}` placeholders).
    pub env: Vec<(String, String)>,
    /// Names the local upstream answers with an address of their own (`fqdn`, address; A or
    /// AAAA by family) instead of [`UPSTREAM_V4`] / [`UPSTREAM_V6`]: the "public DNS" of a
    /// load balancer's hostname.
    pub upstream: Vec<(String, IpAddr)>,
    /// Run the Corefile as given: no [`localize`], no upstream block. It must listen on
    /// `127.0.0.1:{PORT}` (`{PORT}` is replaced by the chosen port).
    pub verbatim: bool,
}

impl CoreDns {
    /// [`CoreDns::start_with`] with the `kubernetes` stand-in answering `records`.
    pub fn start(test: &str, corefile: &str, records: &[(&str, IpAddr)]) -> Option<Self> {
        let options = Options {
            records: records
                .iter()
                .map(|(n, ip)| ((*n).to_owned(), *ip))
                .collect(),
            ..Options::default()
        };
        Self::start_with(test, corefile, &options)
    }

    /// Start CoreDNS on a free loopback port with `corefile` made local ([`localize`]) plus the
    /// upstream block, and wait until it answers. `None` (after a [`crate::skip::skip`] naming
    /// `test`, which fails the test under CI) when the binary is absent. Panics when CoreDNS does not start (with its
    /// output and the Corefile).
    pub fn start_with(test: &str, corefile: &str, options: &Options) -> Option<Self> {
        let binary = match locate() {
            Ok(binary) => binary,
            Err(why) => {
                crate::skip::skip(test, crate::skip::Cause::Missing, &why);
                return None;
            }
        };
        let port = free_port();
        let (text, upstream) = if options.verbatim {
            (corefile.replace("{PORT}", &port.to_string()), None)
        } else {
            let upstream = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), free_port());
            let upstream = (upstream, options.upstream.clone());
            (runnable(corefile, port, &upstream), Some(upstream))
        };
        match Self::spawn(&binary, port, &text, options, upstream) {
            Ok(c) => Some(c),
            Err(e) => panic!("{test}: CoreDNS did not start: {e}\n--- Corefile ---\n{text}"),
        }
    }

    fn spawn(
        binary: &Path,
        port: u16,
        text: &str,
        options: &Options,
        upstream: Option<(SocketAddr, Vec<(String, IpAddr)>)>,
    ) -> io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("hairpin-coredns-")
            .tempdir()?;
        std::fs::write(dir.path().join("Corefile"), text)?;
        let mut records = String::new();
        for (name, ip) in &options.records {
            records.push_str(&format!("{} {ip}\n", name.trim_end_matches('.')));
        }
        std::fs::write(dir.path().join("records"), records)?;
        for (name, content) in &options.files {
            let path = dir.path().join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, content)?;
        }
        let mut command = isolated_command(binary);
        command
            .current_dir(dir.path())
            .env("HP_RECORDS", dir.path().join("records"))
            .env("GOMAXPROCS", "1")
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .arg("-conf")
            .arg(dir.path().join("Corefile"))
            .arg("-quiet");
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        let process = Process::spawn("coredns", dir, command, &[addr])
            .map_err(|e| io::Error::new(e.kind(), format!("{e}")))?;
        let coredns = CoreDns {
            process,
            addr,
            corefile: text.to_owned(),
            upstream,
        };
        // TCP is up once the server is; give UDP the same chance.
        let deadline = Instant::now() + START_TIMEOUT;
        while coredns
            .try_query("hairpin-probe.invalid.", RecordType::A)
            .is_err()
        {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no UDP answer on {addr}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                        coredns.process.read_file("stdout.log"),
                        coredns.process.read_file("stderr.log")
                    ),
                ));
            }
        }
        Ok(coredns)
    }

    /// The UDP/TCP address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The Corefile it started with (after [`localize`]).
    pub fn corefile(&self) -> &str {
        &self.corefile
    }

    /// Replaces the Corefile on disk with `corefile` made local as at the start (same port,
    /// same upstream), as the kubelet replaces a ConfigMap's file in CoreDNS's pod: CoreDNS
    /// runs it once its `reload` plugin sees the change (a Corefile without `reload` is not
    /// reloaded). Returns the text written. Verbatim instances: an error.
    pub fn write_corefile(&self, corefile: &str) -> io::Result<String> {
        let Some(upstream) = &self.upstream else {
            return Err(io::Error::other(
                "a verbatim CoreDNS has no localization to repeat",
            ));
        };
        let text = runnable(corefile, self.addr.port(), upstream);
        // Written aside and renamed: the reload plugin never reads half a file.
        let dir = self.process.dir();
        std::fs::write(dir.join("Corefile.new"), &text)?;
        std::fs::rename(dir.join("Corefile.new"), dir.join("Corefile"))?;
        Ok(text)
    }

    /// The process (pid, temp dir, logs).
    pub fn process(&self) -> &Process {
        &self.process
    }

    /// Replace the stand-in's records (it re-reads the file when it changes).
    pub fn set_records(&self, records: &[(&str, IpAddr)]) -> io::Result<()> {
        let mut text = String::new();
        for (name, ip) in records {
            text.push_str(&format!("{} {ip}\n", name.trim_end_matches('.')));
        }
        std::fs::write(self.process.dir().join("records"), text)
    }

    /// Ask `name` (as written: case and trailing dot kept) for `qtype` over UDP. Panics when
    /// no answer comes (with CoreDNS's output).
    pub fn query(&self, name: &str, qtype: RecordType) -> Answer {
        let mut last = None;
        for _ in 0..3 {
            match self.try_query(name, qtype) {
                Ok(a) => return a,
                Err(e) => last = Some(e),
            }
        }
        panic!(
            "no answer from CoreDNS for {name} {qtype}: {last:?}\n--- stderr ---\n{}\n--- Corefile ---\n{}",
            self.process.read_file("stderr.log"),
            self.corefile
        );
    }

    /// [`CoreDns::query`] returning the error instead of panicking.
    pub fn try_query(&self, name: &str, qtype: RecordType) -> io::Result<Answer> {
        query(self.addr, name, qtype, Duration::from_millis(1000))
    }
}

/// One DNS query over UDP to `server`.
pub fn query(
    server: SocketAddr,
    name: &str,
    qtype: RecordType,
    timeout: Duration,
) -> io::Result<Answer> {
    let qname = Name::from_ascii(name).map_err(|e| io::Error::other(e.to_string()))?;
    let id = (std::process::id() as u16) ^ (Instant::now().elapsed().subsec_nanos() as u16);
    let mut message = Message::new(id, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(qname, qtype));
    let bytes = message
        .to_vec()
        .map_err(|e| io::Error::other(e.to_string()))?;
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    socket.set_read_timeout(Some(timeout))?;
    socket.connect(server)?;
    socket.send(&bytes)?;
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.recv(&mut buf)?;
        let response = Message::from_vec(&buf[..n]).map_err(|e| io::Error::other(e.to_string()))?;
        if response.metadata.id != id {
            continue;
        }
        return Ok(Answer::from_message(&response));
    }
}

/// One resource record, as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rr {
    /// Owner name as sent (case kept), with its trailing dot.
    pub name: String,
    pub ttl: u32,
    pub rtype: RecordType,
    /// The record data as text (`10.96.0.1`, `2001:db8::1`, an SOA's fields...).
    pub data: String,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub rcode: ResponseCode,
    /// The question's name as the server sent it back.
    pub question: String,
    pub answers: Vec<Rr>,
    pub authorities: Vec<Rr>,
}

impl Answer {
    fn from_message(m: &Message) -> Self {
        let rr = |r: &hickory_proto::rr::Record| Rr {
            name: r.name.to_string(),
            ttl: r.ttl,
            rtype: r.record_type(),
            data: r.data.to_string(),
        };
        Answer {
            rcode: m.metadata.response_code,
            question: m
                .queries
                .first()
                .map(|q| q.name().to_string())
                .unwrap_or_default(),
            answers: m.answers.iter().map(rr).collect(),
            authorities: m.authorities.iter().map(rr).collect(),
        }
    }

    /// The addresses in the answer section (A and AAAA data), in order.
    pub fn addresses(&self) -> Vec<IpAddr> {
        self.answers
            .iter()
            .filter(|r| matches!(r.rtype, RecordType::A | RecordType::AAAA))
            .filter_map(|r| r.data.parse().ok())
            .collect()
    }

    /// NOERROR without an answer of the asked type: the name exists, the type does not.
    pub fn is_nodata(&self) -> bool {
        self.rcode == ResponseCode::NoError && self.addresses().is_empty()
    }

    /// NXDOMAIN.
    pub fn is_nxdomain(&self) -> bool {
        self.rcode == ResponseCode::NXDomain
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.rcode, self.question)?;
        for r in self.answers.iter().chain(&self.authorities) {
            write!(f, "; {} {} {} {}", r.name, r.ttl, r.rtype, r.data)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBEADM: &str = ".:53 {\n    errors\n    health {\n       lameduck 5s\n    }\n    ready\n    \
        kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       \
        fallthrough in-addr.arpa ip6.arpa\n       ttl 30\n    }\n    prometheus :9153\n    \
        forward . /etc/resolv.conf {\n       max_concurrent 1000\n    }\n    cache 30 {\n       \
        disable success cluster.local\n       disable denial cluster.local\n    }\n    loop\n    \
        reload\n    loadbalance\n}\n";

    #[test]
    fn localize_moves_every_block_to_loopback() {
        let up: SocketAddr = "127.0.0.1:5300".parse().unwrap();
        let text = localize(KUBEADM, 5353, up);
        assert!(
            text.starts_with(".:5353 {\n    bind 127.0.0.1\n    errors\n"),
            "{text}"
        );
        assert!(
            text.contains("    forward . 127.0.0.1:5300 {\n       max_concurrent 1000\n    }\n"),
            "{text}"
        );
        for gone in [
            "health",
            "lameduck",
            "ready",
            "prometheus",
            "loop",
            "resolv.conf",
        ] {
            assert!(!text.contains(gone), "{gone}: {text}");
        }
        assert!(text.contains("kubernetes cluster.local in-addr.arpa ip6.arpa {"));
        assert_eq!(
            text.matches('{').count(),
            text.matches('}').count(),
            "{text}"
        );
        assert_eq!(with_port("cluster.local", 1), "cluster.local:1");
        assert_eq!(with_port("dns://.:53", 1), "dns://.:1");
        assert_eq!(with_port("10.0.0.0/8:53", 1), "10.0.0.0/8:1");
    }

    #[test]
    fn kubeadm_answers_cluster_names_and_forwards_the_rest() {
        let Some(dns) = CoreDns::start(
            "kubeadm_answers_cluster_names_and_forwards_the_rest",
            KUBEADM,
            &[(
                "kubernetes.default.svc.cluster.local",
                "10.96.0.1".parse().unwrap(),
            )],
        ) else {
            return;
        };
        let a = dns.query("kubernetes.default.svc.cluster.local.", RecordType::A);
        assert_eq!(
            a.addresses(),
            ["10.96.0.1".parse::<IpAddr>().unwrap()],
            "{a}"
        );
        let a = dns.query("nothing.default.svc.cluster.local.", RecordType::A);
        assert!(a.is_nxdomain(), "{a}");
        let a = dns.query("Www.Example.COM.", RecordType::A);
        assert_eq!(a.addresses(), [IpAddr::V4(UPSTREAM_V4)], "{a}");
        let a = dns.query("www.example.com.", RecordType::AAAA);
        assert_eq!(a.addresses(), [IpAddr::V6(UPSTREAM_V6)], "{a}");
        assert!(dns.query("x.invalid.", RecordType::A).is_nxdomain());
    }

    #[test]
    fn upstream_names_and_a_corefile_written_again() {
        let test = "upstream_names_and_a_corefile_written_again";
        let lb: IpAddr = "203.0.113.5".parse().unwrap();
        let options = Options {
            upstream: vec![("Shop.Example.Test.".into(), lb)],
            records: vec![(
                "svc.ns.svc.cluster.local".into(),
                "10.96.0.9".parse().unwrap(),
            )],
            ..Options::default()
        };
        let corefile = ".:53 {\n    kubernetes cluster.local\n    forward . /etc/resolv.conf\n    reload 2s 1s\n}\n";
        let Some(dns) = CoreDns::start_with(test, corefile, &options) else {
            return;
        };
        let a = dns.query("shop.example.test.", RecordType::A);
        assert_eq!(a.addresses(), [lb], "{a}");
        let a = dns.query("www.shop.example.test.", RecordType::A);
        assert_eq!(a.addresses(), [IpAddr::V4(UPSTREAM_V4)], "{a}");
        let a = dns.query("shop.example.test.", RecordType::AAAA);
        assert_eq!(a.addresses(), [IpAddr::V6(UPSTREAM_V6)], "{a}");
        // The reload plugin runs a rewritten Corefile, on the same port and upstream.
        let rule = "    rewrite name exact shop.example.test svc.ns.svc.cluster.local\n";
        let text = dns
            .write_corefile(&corefile.replace("    kubernetes", &format!("{rule}    kubernetes")))
            .unwrap();
        assert!(text.contains(rule), "{text}");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let a = dns.query("shop.example.test.", RecordType::A);
            if a.addresses() == ["10.96.0.9".parse::<IpAddr>().unwrap()] {
                break;
            }
            assert!(Instant::now() < deadline, "not reloaded: {a}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
