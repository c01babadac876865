//! Test support shared by the interop, controller and lab tests: loopback ports that are not
//! handed out twice, and real nginx / HAProxy / CoreDNS ([`coredns`]) processes run from a
//! config string in a temp dir, and a Go go-proxyproto peer ([`ProxyprotoOptional`]).
//!
//! Everything here binds or connects to loopback only. Processes are killed when their handle is
//! dropped, so a failing assertion never leaves a server behind.
#![forbid(unsafe_code)]

pub mod coredns;
pub mod golden;
pub mod helm;
pub mod kube;
pub mod outside;
pub mod skip;

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a spawned server may take to start listening.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static PORTS: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    PORTS.get_or_init(|| Mutex::new(HashSet::new()))
}

/// A command for `program` without the ambient settings a test did not choose: every
/// `HAIRPIN_*` variable, `KUBECONFIG` and `POD_NAME` are removed from its environment.
pub fn isolated_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    for (key, _) in std::env::vars_os() {
        let ambient = key
            .to_str()
            .is_some_and(|k| k.starts_with("HAIRPIN_") || k == "KUBECONFIG" || k == "POD_NAME");
        if ambient {
            command.env_remove(key);
        }
    }
    command
}

/// A free TCP port on 127.0.0.1 that this process has not handed out before.
///
/// Picked below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), where the
/// kernel never puts the local end of an outgoing connection, so the port stays free between
/// "picked" and "bound by the server under test" whatever connections the tests open
/// meanwhile (a port from bind-to-0 could be taken by a client's connection in that gap:
/// `Address already in use`); the registry keeps two tests in one process from getting the
/// same one. Where that range leaves too little room below it, the kernel picks (port 0).
pub fn free_port() -> u16 {
    free_port_on(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// A free TCP port on the given loopback address (e.g. `::1`), as [`free_port`] picks it.
pub fn free_port_on(ip: IpAddr) -> u16 {
    assert!(
        ip.is_loopback(),
        "testkit only hands out loopback ports, not {ip}"
    );
    // The stride's position, for the whole process: each call goes on where the last one
    // stopped instead of trying again the ports already handed out.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let (low, high) = below_ephemeral();
    let span = u64::from(high.saturating_sub(low));
    for _ in 0..1000 {
        let port = if span > 0 {
            // A random start per process, then a stride through the range.
            let i = NEXT.fetch_add(1, Ordering::Relaxed);
            let offset = start().wrapping_add(i.wrapping_mul(7919)) % span;
            low + u16::try_from(offset).expect("offset within a u16 span")
        } else {
            0
        };
        let Ok(listener) = TcpListener::bind(SocketAddr::new(ip, port)) else {
            continue;
        };
        // A DNS server under test listens on UDP too.
        if port != 0 && std::net::UdpSocket::bind(SocketAddr::new(ip, port)).is_err() {
            continue;
        }
        let port = listener
            .local_addr()
            .expect("local_addr of a bound listener")
            .port();
        if handed_out()
            .lock()
            .expect("port registry lock")
            .insert(port)
        {
            return port;
        }
    }
    panic!("could not find a free loopback port after 1000 tries");
}

/// The ports from 10000 up to the first of the kernel's ephemeral range; an empty range when
/// that leaves fewer than 1000 ports (or the range cannot be read).
/// Read once per process.
fn below_ephemeral() -> (u16, u16) {
    const LOW: u16 = 10_000;
    static RANGE: OnceLock<(u16, u16)> = OnceLock::new();
    *RANGE.get_or_init(|| {
        let first = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok());
        match first {
            Some(first) if first >= LOW + 1000 => (LOW, first),
            _ => (0, 0),
        }
    })
}

/// This process's random starting point in the port range.
fn start() -> u64 {
    use std::hash::BuildHasher;
    static START: OnceLock<u64> = OnceLock::new();
    *START
        .get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(std::process::id()))
}

/// `127.0.0.1:<free port>`.
pub fn free_addr() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), free_port())
}

/// Waits until something accepts TCP connections on `addr`.
pub fn wait_for_port(addr: SocketAddr, timeout: Duration) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(_) => return Ok(()),
            Err(err) if Instant::now() >= deadline => {
                return Err(io::Error::new(
                    err.kind(),
                    format!("nothing listens on {addr} after {timeout:?}: {err}"),
                ));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// `shared/<rel>` in the nearest ancestor of the workspace that has it (`../shared` beside the
/// project, `../../shared` from a worktree below it), found when `found` accepts it; `$env`, when
/// set, names the path instead. Where nothing is found, the error says where it was looked for
/// (the text a skip, or under CI a failure, prints).
pub fn shared_path(rel: &str, env: &str, found: impl Fn(&Path) -> bool) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        return if found(&p) {
            Ok(p)
        } else {
            Err(format!("{} (${env}) is absent", p.display()))
        };
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let workspace = workspace.canonicalize().unwrap_or(workspace);
    let candidates: Vec<PathBuf> = workspace
        .ancestors()
        .map(|a| a.join("shared").join(rel))
        .collect();
    if let Some(p) = candidates.iter().find(|p| found(p)) {
        return Ok(p.clone());
    }
    let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
    Err(format!(
        "shared/{rel} is absent: looked for it in {} (and ${env} is not set); CI has it beside the project",
        looked.join(", ")
    ))
}

/// Finds a system binary (`nginx`, `haproxy`, `curl`, `wrk`...) in PATH or the sbin folders.
///
/// Panics with the fix when it is missing: the test suite's entry point installs them.
pub fn require_binary(name: &str) -> PathBuf {
    find_binary(name).unwrap_or_else(|| panic!("`{name}` is not installed: run scripts/install-test-deps.sh (or scripts/test.sh, which does)"))
}

/// Finds a system binary as [`require_binary`] does; `None` when it is missing.
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/bin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// True when the tests run as root (network namespaces, iptables).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| out.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

/// A server process that is killed (and reaped) when dropped.
#[derive(Debug)]
pub struct Process {
    name: &'static str,
    child: Child,
    dir: tempfile::TempDir,
}

impl Process {
    /// The temp dir holding the config and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Reads a file from the process's temp dir (a log, usually); empty when absent.
    pub fn read_file(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn spawn(
        name: &'static str,
        dir: tempfile::TempDir,
        mut command: Command,
        ports: &[SocketAddr],
    ) -> io::Result<Self> {
        let stderr = std::fs::File::create(dir.path().join("stderr.log"))?;
        let stdout = std::fs::File::create(dir.path().join("stdout.log"))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()?;
        let mut process = Process { name, child, dir };
        for &addr in ports {
            if let Err(err) = process.wait_for(addr) {
                let stderr = process.read_file("stderr.log");
                return Err(io::Error::new(
                    err.kind(),
                    format!("{name} did not start: {err}\n--- {name} stderr ---\n{stderr}"),
                ));
            }
        }
        Ok(process)
    }

    fn wait_for(&mut self, addr: SocketAddr) -> io::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "{} exited with {status}",
                    self.name
                )));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("nothing listens on {addr} after {START_TIMEOUT:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real nginx (Debian's package) running in the foreground from a temp dir.
#[derive(Debug)]
pub struct Nginx {
    process: Process,
}

impl Nginx {
    /// Starts nginx with `http_body` as the content of its `http { }` block (server blocks,
    /// usually) and waits until every address in `ports` accepts connections.
    ///
    /// nginx runs as a single process (`master_process off`), so killing it on drop leaves no
    /// orphaned worker behind.
    ///
    /// Logs go to `error.log` (level info, where nginx reports `broken header`) and `access.log`
    /// in the temp dir.
    pub fn start(http_body: &str, ports: &[SocketAddr]) -> io::Result<Self> {
        Self::start_with(http_body, "", ports)
    }

    /// Like [`Nginx::start`], with extra top-level directives (e.g. a `stream { }` block).
    pub fn start_with(http_body: &str, top_level: &str, ports: &[SocketAddr]) -> io::Result<Self> {
        let binary = require_binary("nginx");
        let dir = tempfile::Builder::new()
            .prefix("hairpin-nginx-")
            .tempdir()?;
        let d = dir.path().display();
        let user = if is_root() { "user root;\n" } else { "" };
        let mut conf = String::new();
        let _ = write!(
            conf,
            "{user}daemon off;\nmaster_process off;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log info;\nevents {{ worker_connections 4096; }}\n{top_level}\n\
             http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             default_type text/plain;\n{http_body}\n}}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), conf)?;
        let mut command = Command::new(binary);
        command
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .arg("-e")
            .arg(dir.path().join("error.log"));
        Ok(Nginx {
            process: Process::spawn("nginx", dir, command, ports)?,
        })
    }

    /// nginx's error log so far (`broken header` lines land here).
    pub fn error_log(&self) -> String {
        self.process.read_file("error.log")
    }

    /// nginx's access log so far.
    pub fn access_log(&self) -> String {
        self.process.read_file("access.log")
    }

    /// The underlying process (temp dir, pid).
    pub fn process(&self) -> &Process {
        &self.process
    }
}

/// A real HAProxy (Debian's package) running in the foreground (`-db`) from a temp dir.
#[derive(Debug)]
pub struct Haproxy {
    process: Process,
}

impl Haproxy {
    /// Starts HAProxy with `sections` (frontends, backends, listens) after a `global` and a
    /// `defaults` section with short timeouts, and waits until every address in `ports` accepts
    /// connections. Use `mode tcp` or `mode http` per section as needed.
    pub fn start(sections: &str, ports: &[SocketAddr]) -> io::Result<Self> {
        Self::start_with("", sections, ports)
    }

    /// Like [`Haproxy::start`] with extra `global` lines (e.g. `nbthread 2`).
    pub fn start_with(
        global_extra: &str,
        sections: &str,
        ports: &[SocketAddr],
    ) -> io::Result<Self> {
        let binary = require_binary("haproxy");
        let dir = tempfile::Builder::new()
            .prefix("hairpin-haproxy-")
            .tempdir()?;
        let conf = format!(
            "global\n  log stderr format raw local0 info\n{global_extra}\n\
             defaults\n  log global\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\n{sections}\n"
        );
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, conf)?;
        let mut command = Command::new(binary);
        command.arg("-db").arg("-f").arg(&path);
        Ok(Haproxy {
            process: Process::spawn("haproxy", dir, command, ports)?,
        })
    }

    /// What HAProxy logged (stderr).
    pub fn log(&self) -> String {
        self.process.read_file("stderr.log")
    }

    /// The underlying process (temp dir, pid).
    pub fn process(&self) -> &Process {
        &self.process
    }
}

/// Where Debian's `golang-github-pires-go-proxyproto-dev` puts the library's source (a GOPATH).
const GOCODE: &str = "/usr/share/gocode";

/// A real optional-header PROXY protocol receiver: the Go HTTP server in
/// `crates/testkit/peers/proxyproto-optional/main.go`, behind github.com/pires/go-proxyproto's
/// `Listener` with policy USE for the trusted sources, as Traefik's `proxyProtocol` entry points
/// run (a header is read when sent; a connection without one is served). It answers every
/// request with `remote_addr=<the client address it saw>`.
///
/// Built with `go build` (Debian's `golang-go`, against the `-dev` package's source in
/// `/usr/share/gocode`, GOPATH mode) into its temp dir at each start.
#[derive(Debug)]
pub struct ProxyprotoOptional {
    process: Process,
}

impl ProxyprotoOptional {
    /// Why the peer cannot run here (no `go`, or no go-proxyproto source); `None` when it can.
    pub fn unavailable() -> Option<String> {
        if find_binary("go").is_none() {
            return Some("`go` is not installed (Debian: golang-go)".to_owned());
        }
        let library = Path::new(GOCODE).join("src/github.com/pires/go-proxyproto/protocol.go");
        if !library.is_file() {
            return Some(format!(
                "{} is missing (Debian: golang-github-pires-go-proxyproto-dev)",
                library.display()
            ));
        }
        None
    }

    /// Builds the peer, starts it on `addr` with `trusted` as Traefik's
    /// `proxyProtocol.trustedIPs` (CIDRs; none is `insecure`: every source is trusted) and waits
    /// until it accepts connections.
    pub fn start(addr: SocketAddr, trusted: &[&str]) -> io::Result<Self> {
        if let Some(why) = Self::unavailable() {
            return Err(io::Error::new(io::ErrorKind::NotFound, why));
        }
        let go = require_binary("go");
        let dir = tempfile::Builder::new()
            .prefix("hairpin-proxyproto-")
            .tempdir()?;
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/proxyproto-optional");
        let binary = dir.path().join("proxyproto-optional");
        let built = isolated_command(go)
            .current_dir(&source)
            .env("GO111MODULE", "off")
            .env("GOPATH", GOCODE)
            .env("GOCACHE", dir.path().join("gocache"))
            .env("GOTMPDIR", dir.path())
            .env("GOFLAGS", "")
            .arg("build")
            .arg("-o")
            .arg(&binary)
            .arg("main.go")
            .output()?;
        if !built.status.success() {
            return Err(io::Error::other(format!(
                "go build of the proxyproto-optional peer failed ({}):\n{}",
                built.status,
                String::from_utf8_lossy(&built.stderr)
            )));
        }
        let mut command = isolated_command(binary);
        command.arg(addr.to_string()).args(trusted);
        Ok(ProxyprotoOptional {
            process: Process::spawn("proxyproto-optional", dir, command, &[addr])?,
        })
    }

    /// What the peer logged (stderr).
    pub fn log(&self) -> String {
        self.process.read_file("stderr.log")
    }

    /// The underlying process (temp dir, pid).
    pub fn process(&self) -> &Process {
        &self.process
    }
}

/// Sends raw bytes to `addr`, half-closes, and returns everything the peer sent back until it
/// closed (or `timeout` passed). Handy for servers that answer and close (`Connection: close`).
pub fn exchange(addr: SocketAddr, request: &[u8], timeout: Duration) -> io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    // A peer that rejects the request (a missing or broken PROXY header) may close before we
    // finish writing or half-close: that is an answer (an empty one), not a test error.
    match stream
        .write_all(request)
        .and_then(|()| stream.shutdown(std::net::Shutdown::Write))
    {
        Ok(()) => {}
        Err(err)
            if matches!(
                err.kind(),
                io::ErrorKind::NotConnected
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionReset
            ) => {}
        Err(err) => return Err(err),
    }
    let mut response = Vec::new();
    match stream.read_to_end(&mut response) {
        Ok(_) => Ok(response),
        Err(err) if matches!(err.kind(), io::ErrorKind::ConnectionReset) => Ok(response),
        Err(err) => Err(err),
    }
}

/// A minimal `GET path HTTP/1.0` through [`exchange`]; returns the body (after the blank line)
/// and the status line.
pub fn http_get(addr: SocketAddr, host: &str, path: &str) -> io::Result<(String, String)> {
    let request = format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n");
    let response = exchange(addr, request.as_bytes(), Duration::from_secs(10))?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.lines().next().unwrap_or_default().to_owned();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_not_handed_out_twice() {
        let ports: HashSet<u16> = (0..50).map(|_| free_port()).collect();
        assert_eq!(ports.len(), 50);
    }

    #[test]
    fn ports_come_from_below_the_ephemeral_range_where_clients_never_land() {
        let (low, high) = below_ephemeral();
        if high == 0 {
            // The range is the machine's sysctl (net.ipv4.ip_local_port_range), not a peer.
            crate::skip::skip(
                "ports_come_from_below_the_ephemeral_range_where_clients_never_land",
                crate::skip::Cause::Machine,
                "net.ipv4.ip_local_port_range leaves fewer than 1000 ports above 10000 below it",
            );
            return;
        }
        // Hold many outgoing connections open meanwhile: none takes a port handed out.
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let clients: Vec<TcpStream> = (0..100)
            .map(|_| TcpStream::connect(server.local_addr().unwrap()).unwrap())
            .collect();
        for _ in 0..50 {
            let port = free_port();
            assert!((low..high).contains(&port), "{port} not in {low}..{high}");
            assert!(
                clients
                    .iter()
                    .all(|c| c.local_addr().unwrap().port() != port)
            );
            TcpListener::bind(("127.0.0.1", port)).expect("still free");
        }
    }

    #[test]
    fn nginx_serves_and_haproxy_sends_proxy_v1() {
        let nginx_addr = free_addr();
        let nginx = Nginx::start(
            &format!(
                "server {{ listen {nginx_addr} proxy_protocol; location / {{ return 200 \"$proxy_protocol_addr\"; }} }}"
            ),
            &[nginx_addr],
        )
        .expect("start nginx");
        let haproxy_addr = free_addr();
        let _haproxy = Haproxy::start(
            &format!("listen lb\n  mode tcp\n  bind {haproxy_addr}\n  server ingress {nginx_addr} send-proxy\n"),
            &[haproxy_addr],
        )
        .expect("start haproxy");
        let (status, body) =
            http_get(haproxy_addr, "example.com", "/").expect("request through haproxy");
        assert!(status.contains("200"), "status: {status}");
        assert_eq!(body, "127.0.0.1");
        // Straight to nginx, without a header: the hairpin failure.
        let direct = http_get(nginx_addr, "example.com", "/").expect("direct request");
        assert_eq!(
            direct.0, "",
            "nginx must reject a connection without a PROXY header"
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while !nginx.error_log().contains("broken header") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            nginx.error_log().contains("broken header"),
            "error log: {}",
            nginx.error_log()
        );
    }
}
