//! The admin server over real HTTP on loopback.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hairpin_runtime::{AdminError, AdminLimits, AdminServer, Readiness, Shutdown};
use hairpin_testkit::http_get;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let (status, body) = http_get(addr, "test", path).expect("GET from the admin server");
    let code = status
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("status code in {status:?}"));
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn livez_readyz_metrics_and_drain() {
    let mut registry = Registry::default();
    let requests = Counter::<u64>::default();
    registry.register(
        "test_requests",
        "Requests seen by the test",
        requests.clone(),
    );
    requests.inc_by(7);

    let readiness = Readiness::new();
    let listeners = readiness.condition("listeners");
    let routes = readiness.condition("routes");
    let shutdown = Shutdown::new();
    let server = AdminServer::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind");
    let addr = server.local_addr();
    let serving =
        tokio::spawn(server.serve(Arc::new(registry), readiness.clone(), shutdown.clone()));

    let check = move |path: &'static str| tokio::task::spawn_blocking(move || get(addr, path));
    assert_eq!(
        check("/livez").await.expect("join"),
        (200, "ok\n".to_owned())
    );

    let (status, body) = check("/readyz").await.expect("join");
    assert_eq!(status, 503);
    assert_eq!(body, "not ready: waiting for listeners, routes\n");
    listeners.set(true);
    assert_eq!(
        check("/readyz").await.expect("join").1,
        "not ready: waiting for routes\n"
    );
    routes.set(true);
    assert_eq!(
        check("/readyz").await.expect("join"),
        (200, "ready\n".to_owned())
    );

    let (status, metrics) = check("/metrics").await.expect("join");
    assert_eq!(status, 200);
    assert!(metrics.contains("test_requests_total 7"), "{metrics}");
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");

    assert_eq!(check("/nope").await.expect("join").0, 404);

    shutdown.trigger();
    assert_eq!(
        check("/readyz").await.expect("join"),
        (503, "draining\n".to_owned())
    );
    assert_eq!(
        check("/livez").await.expect("join").0,
        200,
        "still alive while draining"
    );

    shutdown.force();
    tokio::time::timeout(std::time::Duration::from_secs(5), serving)
        .await
        .expect("server stops when forced")
        .expect("join");
}

#[tokio::test]
async fn busy_admin_port_names_the_address() {
    let first = AdminServer::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind");
    let addr = first.local_addr();
    let err = AdminServer::bind(addr)
        .await
        .expect_err("second bind must fail");
    assert!(matches!(err, AdminError::Bind { .. }));
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    assert_eq!(err.metric_label(), "admin_bind");
}

/// The default admin address, `[::]`, serves IPv4 and IPv6 probes alike: an IPv6-only pod's
/// kubelet probes its IPv6 address, an IPv4 one its IPv4 address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ipv6_wildcard_answers_probes_of_both_families() {
    let server = AdminServer::bind("[::]:0".parse().expect("addr"))
        .await
        .expect("bind");
    let port = server.local_addr().port();
    assert!(server.local_addr().is_ipv6(), "{}", server.local_addr());
    tokio::spawn(server.serve(
        Arc::new(Registry::default()),
        Readiness::new(),
        Shutdown::new(),
    ));
    for ip in ["127.0.0.1", "::1"] {
        let addr = SocketAddr::new(ip.parse().expect("ip"), port);
        let answer = tokio::task::spawn_blocking(move || get(addr, "/livez"))
            .await
            .expect("join");
        assert_eq!(answer, (200, "ok\n".to_owned()), "over {ip}");
    }
}

async fn serve_with(limits: AdminLimits) -> SocketAddr {
    let server = AdminServer::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind")
        .with_limits(limits);
    let addr = server.local_addr();
    tokio::spawn(server.serve(
        Arc::new(Registry::default()),
        Readiness::new(),
        Shutdown::new(),
    ));
    addr
}

/// Reads until the server closes the connection; `None` if it is still open after `within`.
fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    stream.set_read_timeout(Some(within)).expect("timeout");
    let mut got = Vec::new();
    match stream.read_to_end(&mut got) {
        Ok(_) => Some(got),
        Err(err) if err.kind() == ErrorKind::ConnectionReset => Some(got),
        Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
        Err(err) => panic!("read: {err}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_and_an_idle_keep_alive_one_are_closed_at_the_header_timeout() {
    let timeout = Duration::from_millis(300);
    let addr = serve_with(AdminLimits {
        header_timeout: timeout,
        ..AdminLimits::default()
    })
    .await;
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let mut silent = TcpStream::connect(addr).expect("connect");
        assert!(
            closed_within(&mut silent, Duration::from_secs(5)).is_some(),
            "a silent connection must be closed"
        );
        let after = started.elapsed();
        assert!(
            after >= timeout && after < timeout * 5,
            "closed after {after:?}"
        );

        // Half a request head, then nothing: closed as well.
        let mut partial = TcpStream::connect(addr).expect("connect");
        partial
            .write_all(b"GET /livez HTTP/1.1\r\nHo")
            .expect("write");
        assert!(closed_within(&mut partial, Duration::from_secs(5)).is_some());

        // A keep-alive connection is answered, then closed once idle that long.
        let mut keep_alive = TcpStream::connect(addr).expect("connect");
        keep_alive
            .write_all(b"GET /livez HTTP/1.1\r\nHost: test\r\n\r\n")
            .expect("write");
        let answer = closed_within(&mut keep_alive, Duration::from_secs(5))
            .expect("closed once idle after its answer");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    })
    .await
    .expect("join");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_the_oldest_connection_is_closed_and_the_newest_answered() {
    let addr = serve_with(AdminLimits {
        header_timeout: Duration::from_secs(60),
        max_connections: 4,
    })
    .await;
    tokio::task::spawn_blocking(move || {
        let mut silent: Vec<TcpStream> = (0..10)
            .map(|_| {
                let stream = TcpStream::connect(addr).expect("connect");
                // One at a time, so that the server's order is the order here.
                std::thread::sleep(Duration::from_millis(20));
                stream
            })
            .collect();
        // Answered at all proves the eviction: without it the probe would wait for the 60 s
        // header timeout, and `get` gives up after 10 s. How fast is a figure.
        let started = Instant::now();
        assert_eq!(get(addr, "/livez"), (200, "ok\n".to_owned()));
        println!(
            "figure: /livez answered in {:?} behind ten silent connections",
            started.elapsed()
        );
        // The probe took a slot (and gave it back): of the ten, the oldest seven were closed
        // and the newest three are still open.
        for (i, stream) in silent.iter_mut().enumerate() {
            let closed = closed_within(stream, Duration::from_millis(200)).is_some();
            assert_eq!(closed, i < 7, "silent connection {i}");
        }
    })
    .await
    .expect("join");
}
