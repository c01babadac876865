//! Outside the cluster, for the real-Kubernetes tests of [`crate::kube`]: a client out on the
//! network sending requests to a load balancer IP in a loop ([`ClientLoop`]) from a network
//! namespace of its own ([`Outside`]), and a cloud load balancer that is a proxy in a namespace
//! of its own ([`CloudLb`]).
//!
//! ```text
//!  VIP load balancer (MetalLB L2's shape)        proxy load balancer (DigitalOcean's shape)
//!
//!  hpo-<s> outside client                        hpo-<s> outside client
//!    │ route LB_IP via the node                    │ route LB_IP via the load balancer
//!  hpk-<n> node: packets arrive with the         hpl-<t> CloudLb: LB_IP on lo, HAProxy
//!    LB IP as destination; kube-proxy's            LB_IP:port -> NODE_IP:nodePort send-proxy
//!    rule for it (PREROUTING) is the only way      │ route NODE_IP via the node
//!    in: with ipMode: Proxy that rule goes and   hpk-<n> node: route LB_IP via the load
//!    the client is cut off                         balancer, so that with ipMode: Proxy an
//!                                                  in-cluster client's packets leave the
//!                                                  node and cross HAProxy
//! ```
//!
//! Each namespace is linked to one peer namespace by a veth pair on a /30 of its own (a slot
//! of [`crate::kube`]'s, so concurrent tests never share addresses or names), with routes for
//! the single addresses the test names: nothing is routed anywhere else. Removed on drop, and
//! by a reaper process when the test process is killed.

use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::kube::{Group, KubeNode, NODE_IP, Slot, run_checked};
use crate::{isolated_command, require_binary};

/// A network namespace outside the node's (`hpo-<slot>` for a client, `hpl-<slot>` for a load
/// balancer), linked to a peer namespace by a veth pair: this end has the /30's address 2, the
/// peer's end address 1.
#[derive(Debug)]
pub struct Outside {
    // Drop order: processes, the reaper, then the namespace (in Drop), then the slot.
    processes: Vec<Group>,
    reaper: Option<Group>,
    netns: String,
    dir: tempfile::TempDir,
    local: Ipv4Addr,
    peer: Ipv4Addr,
    slot: Slot,
}

impl Outside {
    /// A client's namespace linked to `peer_netns` (a node's, a [`CloudLb`]'s).
    pub fn client(peer_netns: &str) -> io::Result<Outside> {
        Outside::create("hpo", peer_netns)
    }

    /// `ip netns add <prefix>-<n>`, a veth pair `<prefix><n>` (here) / `hpq<n>` (in
    /// `peer_netns`), `lo` up.
    fn create(prefix: &str, peer_netns: &str) -> io::Result<Outside> {
        let slot = Slot::claim()?;
        let netns = format!("{prefix}-{}", slot.n);
        run_checked(Command::new("ip").args(["netns", "add", &netns]))?;
        let mut outside = Outside {
            processes: Vec::new(),
            reaper: None,
            netns,
            dir: tempfile::Builder::new()
                .prefix("hairpin-outside-")
                .tempdir()?,
            local: slot.addr(2),
            peer: slot.addr(1),
            slot,
        };
        outside.reaper = Some(outside.spawn_reaper()?);
        let (here, there) = (
            format!("{prefix}{}", outside.slot.n),
            format!("hpq{}", outside.slot.n),
        );
        run_checked(Command::new("ip").args([
            "link",
            "add",
            &here,
            "netns",
            &outside.netns,
            "type",
            "veth",
            "peer",
            "name",
            &there,
            "netns",
            peer_netns,
        ]))?;
        let peer_ip =
            |args: &[&str]| run_checked(Command::new("ip").args(["-n", peer_netns]).args(args));
        peer_ip(&[
            "addr",
            "add",
            &format!("{}/30", outside.peer),
            "dev",
            &there,
        ])?;
        peer_ip(&["link", "set", &there, "up"])?;
        outside.exec_ok(&["ip", "link", "set", "lo", "up"])?;
        outside.exec_ok(&[
            "ip",
            "addr",
            "add",
            &format!("{}/30", outside.local),
            "dev",
            &here,
        ])?;
        outside.exec_ok(&["ip", "link", "set", &here, "up"])?;
        Ok(outside)
    }

    /// A shell that, once this process has exited, kills every process in the namespace and
    /// removes it, the folder and the slot (the veth goes with the namespace).
    fn spawn_reaper(&self) -> io::Result<Group> {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.2; done; \
             ip netns pids {netns} | xargs -r kill -KILL; sleep 0.2; \
             ip netns del {netns} 2>/dev/null; rm -rf '{dir}' '{slot}'",
            pid = std::process::id(),
            netns = self.netns,
            dir = self.dir.path().display(),
            slot = self.slot.path.display(),
        );
        let mut command = Command::new("sh");
        command.args(["-c", &script]);
        Group::spawn("reaper", command, PathBuf::from("/dev/null"))
    }

    /// The namespace's name (for `ip netns exec`).
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// This end's address on the link.
    pub fn address(&self) -> Ipv4Addr {
        self.local
    }

    /// The peer's end's address on the link (the gateway of [`Outside::route`]).
    pub fn peer_address(&self) -> Ipv4Addr {
        self.peer
    }

    /// A folder that lives as long as the namespace (configs, logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `program` run inside the namespace, without ambient `HAIRPIN_*`, `KUBECONFIG`,
    /// `POD_NAME`.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = isolated_command("ip");
        command.args(["netns", "exec", &self.netns]).arg(program);
        command
    }

    /// Runs `args` inside the namespace; an error unless it exits 0.
    pub fn exec_ok(&self, args: &[&str]) -> io::Result<Output> {
        run_checked(self.command(args[0]).args(&args[1..]))
    }

    /// Routes the single address `ip` through the peer namespace.
    pub fn route(&self, ip: &str) -> io::Result<()> {
        let peer = self.peer.to_string();
        self.exec_ok(&["ip", "route", "add", &format!("{ip}/32"), "via", &peer])?;
        Ok(())
    }

    /// A request loop from this namespace ([`ClientLoop`]).
    pub fn client_loop(&self, url: &str, curl_args: &[&str]) -> io::Result<ClientLoop> {
        ClientLoop::start(&self.netns, self.dir.path(), url, curl_args)
    }

    /// Runs `command` (from [`Outside::command`]) until the namespace is dropped, its output
    /// to `<name>.log` in [`Outside::dir`].
    fn spawn(&mut self, name: &str, command: Command) -> io::Result<()> {
        let log = self.dir.path().join(format!("{name}.log"));
        self.processes.push(Group::spawn(name, command, log)?);
        Ok(())
    }

    /// What the process `name` logged.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Waits until something in the namespace listens on TCP `addr` (`ip:port`).
    fn wait_listening(&mut self, addr: &str, owner: &str) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self
                .command("ss")
                .arg("-Hltn")
                .stdin(Stdio::null())
                .output()?;
            if String::from_utf8_lossy(&out.stdout).contains(addr) {
                return Ok(());
            }
            for process in &mut self.processes {
                process.check_alive()?;
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{owner} does not listen on {addr}:\n{}", self.log(owner)),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        self.reaper = None;
        self.processes.clear();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
    }
}

/// A cloud load balancer that is a proxy (DigitalOcean's, Linode's...): a namespace of its own
/// linked to the node's, holding the LB IP, where HAProxy listens on `LB_IP:port` and opens
/// its own connection to `NODE_IP:nodePort` with a PROXY header (`send-proxy`). The node routes
/// the LB IP to it, so that an in-cluster client's connection to the LB IP crosses it once
/// kube-proxy no longer short-circuits that IP (`ipMode: Proxy`); an [`Outside`] client linked
/// to [`CloudLb::netns`] reaches it without crossing the node at all.
#[derive(Debug)]
pub struct CloudLb {
    ns: Outside,
    lb_ip: String,
}

impl CloudLb {
    /// The load balancer at `lb_ip:port` in front of `node`'s `node_port` (PROXY v1, or v2
    /// with `v2`); returns once HAProxy listens.
    pub fn start(
        node: &KubeNode,
        lb_ip: &str,
        port: u16,
        node_port: u16,
        v2: bool,
    ) -> io::Result<CloudLb> {
        let mut ns = Outside::create("hpl", node.netns())?;
        ns.exec_ok(&["ip", "addr", "add", &format!("{lb_ip}/32"), "dev", "lo"])?;
        ns.route(NODE_IP)?;
        node.exec_ok(&[
            "ip",
            "route",
            "add",
            &format!("{lb_ip}/32"),
            "via",
            &ns.address().to_string(),
        ])?;
        let send = if v2 { "send-proxy-v2" } else { "send-proxy" };
        let conf = format!(
            "global\n  log stderr format raw local0 info\n\ndefaults\n  log global\n  mode tcp\n  \
             timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\n\
             listen lb\n  bind {lb_ip}:{port}\n  server s1 {NODE_IP}:{node_port} {send}\n"
        );
        let path = ns.dir().join("haproxy.cfg");
        std::fs::write(&path, conf)?;
        let mut command = ns.command(require_binary("haproxy"));
        command.arg("-db").arg("-f").arg(&path);
        ns.spawn("haproxy", command)?;
        ns.wait_listening(&format!("{lb_ip}:{port}"), "haproxy")?;
        Ok(CloudLb {
            ns,
            lb_ip: lb_ip.to_owned(),
        })
    }

    /// The load balancer's namespace (an [`Outside::client`] links to it).
    pub fn netns(&self) -> &str {
        self.ns.netns()
    }

    /// The LB IP.
    pub fn ip(&self) -> &str {
        &self.lb_ip
    }

    /// The node's address on the link to the load balancer: the source of an in-cluster
    /// client's connection to the LB IP, hence the address in the PROXY header HAProxy sends
    /// for it.
    pub fn node_side_address(&self) -> std::net::Ipv4Addr {
        self.ns.peer_address()
    }

    /// Runs `args` inside the load balancer's namespace (an `iptables` rule, say); an error
    /// unless it exits 0.
    pub fn exec_ok(&self, args: &[&str]) -> io::Result<Output> {
        self.ns.exec_ok(args)
    }

    /// HAProxy's log.
    pub fn log(&self) -> String {
        self.ns.log("haproxy")
    }
}

/// One request of a [`ClientLoop`].
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    /// When it started, since the loop started.
    pub at: Duration,
    /// The HTTP status (0: none).
    pub status: u16,
    /// curl's exit code (7: connection refused or unreachable, 28: timeout, 52: empty reply).
    pub exit: i32,
    /// How long it took.
    pub took: Duration,
}

impl Attempt {
    /// Answered 200.
    pub fn ok(&self) -> bool {
        self.exit == 0 && self.status == 200
    }
}

/// A client sending `curl` requests to one URL from a namespace, one after another (2 s at
/// most each, 50 ms apart) until [`ClientLoop::stop`] (or 20,000 requests, or drop), each
/// recorded ([`Attempt`]).
#[derive(Debug)]
pub struct ClientLoop {
    group: Group,
    stop_file: PathBuf,
    results: PathBuf,
    started: SystemTime,
    started_at: Instant,
}

impl ClientLoop {
    /// The loop in namespace `netns` (a node's for an in-cluster client), its files in `dir`;
    /// `curl_args` are added (e.g. `--haproxy-protocol`: the client sends a PROXY header as an
    /// outside HAProxy would).
    pub fn start(netns: &str, dir: &Path, url: &str, curl_args: &[&str]) -> io::Result<ClientLoop> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stop_file = dir.join(format!("client-{n}.stop"));
        let results = dir.join(format!("client-{n}.results"));
        let args: Vec<String> = curl_args.iter().map(|a| shell_quote(a)).collect();
        let script = format!(
            "i=0; while [ ! -e {stop} ] && [ $i -lt 20000 ]; do i=$((i+1)); t=$EPOCHREALTIME; \
             r=$(curl -s -o /dev/null --max-time 2 -w '%{{http_code}} %{{exitcode}} %{{time_total}}' {args} {url}); \
             echo \"$t $r\" >> {results}; sleep 0.05; done",
            stop = shell_quote(&stop_file.display().to_string()),
            results = shell_quote(&results.display().to_string()),
            args = args.join(" "),
            url = shell_quote(url),
        );
        let mut command = isolated_command("ip");
        command
            .args(["netns", "exec", netns, "bash", "-c", &script])
            .env("LC_ALL", "C");
        let started = SystemTime::now();
        let started_at = Instant::now();
        let log = dir.join(format!("client-{n}.log"));
        let group = Group::spawn(&format!("client loop {n}"), command, log)?;
        Ok(ClientLoop {
            group,
            stop_file,
            results,
            started,
            started_at,
        })
    }

    /// Since the loop started (the clock of [`Attempt::at`]).
    pub fn elapsed(&self) -> Duration {
        self.started_at.elapsed()
    }

    /// The requests so far.
    pub fn attempts(&self) -> Vec<Attempt> {
        let text = std::fs::read_to_string(&self.results).unwrap_or_default();
        let start = self
            .started
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        text.lines()
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let t: f64 = fields.next()?.parse().ok()?;
                let status = fields.next()?.parse().ok()?;
                let exit = fields.next()?.parse().ok()?;
                let took: f64 = fields.next()?.parse().ok()?;
                Some(Attempt {
                    at: Duration::from_secs_f64((t - start).max(0.0)),
                    status,
                    exit,
                    took: Duration::from_secs_f64(took.max(0.0)),
                })
            })
            .collect()
    }

    /// Waits until a request that started after `since` (loop time) was answered; when
    /// (loop time), or `None` after `timeout`.
    pub fn wait_answered_after(&self, since: Duration, timeout: Duration) -> Option<Duration> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(a) = self.attempts().iter().find(|a| a.at >= since && a.ok()) {
                return Some(a.at);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Ends the loop after its current request and returns every request it made (the loop
    /// is killed if it has not ended 10 s later).
    pub fn stop(mut self) -> Tally {
        let _ = std::fs::write(&self.stop_file, "");
        let _ = self.group.wait_exit(Duration::from_secs(10));
        Tally {
            attempts: self.attempts(),
            ran: self.elapsed(),
        }
    }
}

/// Every request a [`ClientLoop`] made.
#[derive(Clone, Debug)]
pub struct Tally {
    /// In order.
    pub attempts: Vec<Attempt>,
    /// How long the loop ran.
    pub ran: Duration,
}

impl Tally {
    /// The requests that were not answered 200.
    pub fn failures(&self) -> Vec<&Attempt> {
        self.attempts.iter().filter(|a| !a.ok()).collect()
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let failures = self.failures();
        write!(
            f,
            "{} requests in {:.1?}, {} failed",
            self.attempts.len(),
            self.ran,
            failures.len()
        )?;
        if let (Some(first), Some(last)) = (failures.first(), failures.last()) {
            write!(
                f,
                " (from +{:.1?} to +{:.1?}; curl exits {:?})",
                first.at,
                last.at,
                failures
                    .iter()
                    .map(|a| a.exit)
                    .collect::<std::collections::BTreeSet<_>>()
            )?;
        }
        Ok(())
    }
}

/// `text` in single quotes for `sh`.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}
