//! A rollout without refused or reset connections: two `hairpin proxy` processes share one
//! port (`SO_REUSEPORT`), a bounded client keeps connecting through it, and one process is
//! restarted (SIGTERM, then a new one). Every connection must be answered.

mod support;

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hairpin_testkit::{free_addr, http_get};

const T: Duration = Duration::from_secs(10);

/// A `hairpin proxy` on the shared port, writing `destination` in its headers so that the
/// upstream's answer tells which process served a connection.
struct Proxy {
    child: Child,
    admin: SocketAddr,
    log: tempfile::NamedTempFile,
}

impl Proxy {
    fn start(listen: SocketAddr, upstream: SocketAddr, destination: &str) -> Self {
        let admin = free_addr();
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = support::hairpin_command()
            .args(["proxy", "--listen", &listen.to_string()])
            .args(["--upstream", &upstream.to_string()])
            .args(["--destination", destination])
            .args(["--admin-addr", &admin.to_string(), "--workers", "1"])
            .args(["--shutdown-delay", "1s", "--drain-timeout", "10s"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let proxy = Self { child, admin, log };
        let deadline = Instant::now() + T;
        while !http_get(proxy.admin, "localhost", "/readyz")
            .map(|(status, _)| status.contains("200"))
            .unwrap_or(false)
        {
            assert!(Instant::now() < deadline, "never ready:\n{}", proxy.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        proxy
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An upstream that answers each connection with the PROXY header it got, then what the
/// client sent, once the client has finished sending.
fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut got = Vec::new();
                if stream.read_to_end(&mut got).is_ok() {
                    let _ = stream.write_all(&got);
                }
            });
        }
    });
    addr
}

#[derive(Debug, Default)]
struct Tally {
    answered: usize,
    /// Answers per destination written by the proxy, and those of connections made after
    /// the SIGTERM.
    by_proxy: std::collections::BTreeMap<String, (usize, usize)>,
    refused: usize,
    reset: usize,
    other: Vec<String>,
}

/// One connection through the proxy: the destination of the header the upstream saw.
fn one(listen: SocketAddr, payload: &[u8]) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&listen, T)?;
    stream.set_read_timeout(Some(T))?;
    stream.write_all(payload)?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let text = String::from_utf8_lossy(&answer);
    let (header, rest) = text
        .split_once("\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no header in {text:?}")))?;
    if rest.as_bytes() != payload {
        return Err(std::io::Error::other(format!("payload mangled: {text:?}")));
    }
    header
        .split(' ')
        .nth(3)
        .map(str::to_owned)
        .ok_or_else(|| std::io::Error::other(format!("bad header {header:?}")))
}

/// Waits (a deadline that only catches a hang) until each proxy named has answered at least
/// its count.
fn wait_for_answers(live: &Mutex<HashMap<String, usize>>, want: &[(&str, usize)]) {
    let deadline = Instant::now() + T;
    loop {
        let answered = live.lock().unwrap().clone();
        if want
            .iter()
            .all(|(proxy, n)| answered.get(*proxy).is_some_and(|got| got >= n))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "waiting for {want:?}: {answered:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn restarting_one_of_two_proxies_on_a_port_refuses_and_resets_no_connection() {
    let up = upstream();
    let listen = free_addr();
    let old = Proxy::start(listen, up, "192.0.2.1:80");
    let _other = Proxy::start(listen, up, "192.0.2.2:80");

    let stop = Arc::new(AtomicBool::new(false));
    let terminated: Arc<std::sync::OnceLock<Instant>> = Arc::default();
    // Answers so far by proxy, as they come (the tallies are read at the end).
    let live: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    // Four clients, one connection at a time each: bounded load.
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let stop = stop.clone();
            let terminated = terminated.clone();
            let live = live.clone();
            std::thread::spawn(move || {
                let mut tally = Tally::default();
                let payload = format!("client {i}\n");
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    match one(listen, payload.as_bytes()) {
                        Ok(destination) => {
                            tally.answered += 1;
                            let after = terminated.get().is_some_and(|t| started > *t);
                            *live.lock().unwrap().entry(destination.clone()).or_default() += 1;
                            let entry = tally.by_proxy.entry(destination).or_default();
                            entry.0 += 1;
                            entry.1 += usize::from(after);
                        }
                        Err(err) if err.kind() == ErrorKind::ConnectionRefused => {
                            tally.refused += 1;
                        }
                        Err(err)
                            if matches!(
                                err.kind(),
                                ErrorKind::ConnectionReset
                                    | ErrorKind::ConnectionAborted
                                    | ErrorKind::BrokenPipe
                            ) =>
                        {
                            tally.reset += 1;
                        }
                        Err(err) => tally.other.push(err.to_string()),
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                tally
            })
        })
        .collect();

    // Load flows through both proxies before the restart.
    wait_for_answers(&live, &[("192.0.2.1", 50), ("192.0.2.2", 50)]);
    // The restart: SIGTERM to the old process, and a new one in its place.
    let mut old = old;
    let _ = terminated.set(Instant::now());
    let status = Command::new("kill")
        .args(["-TERM", &old.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let _new = Proxy::start(listen, up, "192.0.2.3:80");
    let deadline = Instant::now() + T;
    let exit = loop {
        if let Some(exit) = old.child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "old proxy still running:\n{}",
            old.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // The new proxy takes its share after the old one exited.
    wait_for_answers(&live, &[("192.0.2.3", 50)]);
    stop.store(true, Ordering::Relaxed);

    let mut total = Tally::default();
    for client in clients {
        let tally = client.join().unwrap();
        total.answered += tally.answered;
        total.refused += tally.refused;
        total.reset += tally.reset;
        total.other.extend(tally.other);
        for (destination, (all, after)) in tally.by_proxy {
            let entry = total.by_proxy.entry(destination).or_default();
            entry.0 += all;
            entry.1 += after;
        }
    }
    eprintln!("{total:?}");
    assert_eq!(exit.code(), Some(0), "{}", old.log());
    assert_eq!(
        (total.refused, total.reset, total.other.len()),
        (0, 0, 0),
        "refused, reset, other failures: {total:?}"
    );
    assert!(total.answered > 200, "too little load: {total:?}");
    let served = |destination: &str| total.by_proxy.get(destination).copied().unwrap_or_default();
    assert!(
        served("192.0.2.1").1 > 0,
        "the old proxy must keep accepting during its shutdown delay: {total:?}"
    );
    assert!(served("192.0.2.2").0 > 0, "{total:?}");
    assert!(served("192.0.2.3").0 > 0, "{total:?}");
}
