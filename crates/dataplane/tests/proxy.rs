//! The proxy against real sockets on loopback: exact header bytes, coalescing, half-close,
//! timeouts, the connection limit, refused upstreams and route changes under load.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hairpin_dataplane::routes::{ProxyProtocol, Route, RouteTable};
use hairpin_dataplane::{Proxy, ProxyConfig, ProxyMetrics};
use hairpin_proxy_protocol::Version;
use hairpin_runtime::Shutdown as ShutdownSignal;
use hairpin_testkit::skip::{Cause, skip};
use hairpin_testkit::{free_addr, free_port_on};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

const T: Duration = Duration::from_secs(5);

/// A proxy running on its own runtime thread, fed through a watch channel.
struct Running {
    routes: watch::Sender<RouteTable>,
    shutdown: ShutdownSignal,
    registry: Arc<Registry>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    fn start(config: ProxyConfig, table: RouteTable) -> Self {
        let mut registry = Registry::default();
        let metrics = ProxyMetrics::register(registry.sub_registry_with_prefix("hairpin_proxy"));
        let (routes, rx) = watch::channel(table);
        let shutdown = ShutdownSignal::new();
        let stop = shutdown.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let mut proxy = Proxy::new(config, metrics);
                let errors = proxy.apply(&rx.borrow());
                assert!(errors.is_empty(), "{errors:?}");
                ready_tx.send(()).unwrap();
                proxy.run(rx, stop).await;
            });
            runtime.shutdown_timeout(Duration::from_millis(100));
        });
        ready_rx.recv_timeout(T).expect("proxy started");
        Self {
            routes,
            shutdown,
            registry: Arc::new(registry),
            thread: Some(thread),
        }
    }

    fn metrics(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        text
    }

    /// The value of the series `series` (name with labels), 0 when absent.
    fn value(&self, series: &str) -> f64 {
        self.metrics()
            .lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }

    /// Waits until the metrics text contains `needle`.
    fn wait_metric(&self, needle: &str) {
        let deadline = Instant::now() + T;
        while !self.metrics().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in:\n{}",
                self.metrics()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.force();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn route(
    name: &str,
    listen: SocketAddr,
    upstream: SocketAddr,
    version: impl Into<ProxyProtocol>,
) -> Route {
    Route {
        name: name.into(),
        listen,
        upstream: upstream.to_string().parse().unwrap(),
        proxy_protocol: version.into(),
        destination: None,
        destinations: Vec::new(),
    }
}

fn table(routes: Vec<Route>) -> RouteTable {
    RouteTable::new(routes).unwrap()
}

fn config() -> ProxyConfig {
    ProxyConfig {
        listeners_per_route: 2,
        ..ProxyConfig::default()
    }
}

fn upstream() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

fn accept(listener: &TcpListener) -> TcpStream {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + T;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                stream.set_read_timeout(Some(T)).unwrap();
                return stream;
            }
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "upstream got no connection");
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(err) => panic!("accept: {err}"),
        }
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, T).unwrap();
    stream.set_read_timeout(Some(T)).unwrap();
    stream
}

/// Reads exactly `n` bytes.
fn read_n(stream: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    stream.read_exact(&mut buf).unwrap();
    buf
}

fn v1_line(src: SocketAddr, dst: SocketAddr) -> String {
    let family = if src.is_ipv4() { "TCP4" } else { "TCP6" };
    format!(
        "PROXY {family} {} {} {} {}\r\n",
        src.ip(),
        dst.ip(),
        src.port(),
        dst.port()
    )
}

#[test]
fn v1_header_bytes_are_exact_with_local_and_explicit_destination() {
    let (up, up_addr) = upstream();
    let listen = free_addr();
    let explicit = free_addr();
    let mut with_destination = route("lb", explicit, up_addr, Version::V1);
    with_destination.destination = Some("203.0.113.10:443".parse().unwrap());
    let _proxy = Running::start(
        config(),
        table(vec![
            route("local", listen, up_addr, Version::V1),
            with_destination,
        ]),
    );

    let client = connect(listen);
    let mut server = accept(&up);
    let expected = v1_line(client.local_addr().unwrap(), listen);
    assert_eq!(
        String::from_utf8(read_n(&mut server, expected.len())).unwrap(),
        expected
    );

    let client = connect(explicit);
    let mut server = accept(&up);
    let expected = v1_line(
        client.local_addr().unwrap(),
        "203.0.113.10:443".parse().unwrap(),
    );
    assert_eq!(
        String::from_utf8(read_n(&mut server, expected.len())).unwrap(),
        expected
    );
}

#[test]
fn a_wildcard_listener_writes_the_address_the_client_connected_to() {
    let (up, up_addr) = upstream();
    let port = free_addr().port();
    let wildcard = SocketAddr::from(([0, 0, 0, 0], port));
    let _proxy = Running::start(
        config(),
        table(vec![route("any", wildcard, up_addr, Version::V1)]),
    );
    let dialed = SocketAddr::from(([127, 0, 0, 3], port));
    let client = connect(dialed);
    let mut server = accept(&up);
    let expected = v1_line(client.local_addr().unwrap(), dialed);
    assert_eq!(
        String::from_utf8(read_n(&mut server, expected.len())).unwrap(),
        expected
    );
}

/// A dual-stack listener (`[::]`, as the controller plans it) for a dual-stack load balancer:
/// an IPv4 client, which arrives v4-mapped, gets a `TCP4` header with its own IPv4 address and
/// the load balancer's IPv4 address; an IPv6 client a `TCP6` header with the IPv6 ones. The
/// same for a load balancer without IPv6 seen from an IPv4 client, and for the local address.
#[test]
fn a_dual_stack_listener_writes_each_client_its_own_family() {
    let (up, up_addr) = upstream();
    let port = free_addr().port();
    let plain_port = free_addr().port();
    let mut dual = route(
        "dual",
        SocketAddr::from(([0u16; 8], port)),
        up_addr,
        Version::V1,
    );
    let lb_v4: SocketAddr = "203.0.113.10:443".parse().unwrap();
    let lb_v6: SocketAddr = "[2001:db8::10]:443".parse().unwrap();
    dual.destination = Some(lb_v4);
    dual.destinations = vec![lb_v4, lb_v6];
    let local = route(
        "local",
        SocketAddr::from(([0u16; 8], plain_port)),
        up_addr,
        Version::V1,
    );
    let _proxy = Running::start(config(), table(vec![dual, local]));

    for (dialed, lb) in [
        (SocketAddr::from(([127, 0, 0, 1], port)), lb_v4),
        (SocketAddr::new("::1".parse().unwrap(), port), lb_v6),
    ] {
        let client = connect(dialed);
        let mut server = accept(&up);
        let expected = v1_line(client.local_addr().unwrap(), lb);
        assert!(
            expected.starts_with(if lb.is_ipv4() {
                "PROXY TCP4 "
            } else {
                "PROXY TCP6 "
            }),
            "{expected}"
        );
        assert_eq!(
            String::from_utf8(read_n(&mut server, expected.len())).unwrap(),
            expected,
            "client over {dialed}"
        );
    }
    // No destination: the address the IPv4 client dialed, unmapped too.
    let dialed = SocketAddr::from(([127, 0, 0, 4], plain_port));
    let client = connect(dialed);
    let mut server = accept(&up);
    let expected = v1_line(client.local_addr().unwrap(), dialed);
    assert_eq!(
        String::from_utf8(read_n(&mut server, expected.len())).unwrap(),
        expected
    );
}

#[test]
fn v2_header_bytes_are_exact() {
    let (up, up_addr) = upstream();
    let listen = free_addr();
    let _proxy = Running::start(
        config(),
        table(vec![route("v2", listen, up_addr, Version::V2)]),
    );
    let client = connect(listen);
    let mut server = accept(&up);
    let src = client.local_addr().unwrap();
    let mut expected = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    expected.extend([0x21, 0x11, 0x00, 12]);
    expected.extend([127, 0, 0, 1, 127, 0, 0, 1]);
    expected.extend(src.port().to_be_bytes());
    expected.extend(listen.port().to_be_bytes());
    assert_eq!(read_n(&mut server, expected.len()), expected);
}

#[test]
fn a_route_without_a_header_forwards_the_bytes_as_they_are() {
    let (up, up_addr) = upstream();
    let listen = free_addr();
    let proxy = Running::start(
        config(),
        table(vec![route("plain", listen, up_addr, ProxyProtocol::None)]),
    );
    // The upstream speaks first (as SMTP or MySQL do): nothing is written before the client
    // sends, not even an empty header.
    let mut client = connect(listen);
    let mut server = accept(&up);
    server.write_all(b"220 ready\r\n").unwrap();
    assert_eq!(read_n(&mut client, 11), b"220 ready\r\n");
    client.write_all(b"HELO x\r\n").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    let mut received = Vec::new();
    server.read_to_end(&mut received).unwrap();
    assert_eq!(
        received, b"HELO x\r\n",
        "exactly the client's bytes, no header"
    );
    drop(server);
    proxy.wait_metric("hairpin_proxy_connections_active{route=\"plain\"} 0");
}

#[test]
fn ipv6_clients_get_a_tcp6_header() {
    let up = match TcpListener::bind("[::1]:0") {
        Ok(up) => up,
        Err(err) => {
            // A property of the machine (IPv6 disabled in its kernel or container), not a peer.
            skip(
                "ipv6_clients_get_a_tcp6_header",
                Cause::Machine,
                &format!("no IPv6 loopback on this machine: binding [::1]:0 fails: {err}"),
            );
            return;
        }
    };
    let up_addr = up.local_addr().unwrap();
    let listen = SocketAddr::new("::1".parse().unwrap(), free_port_on("::1".parse().unwrap()));
    let _proxy = Running::start(
        config(),
        table(vec![route("v6", listen, up_addr, Version::V1)]),
    );
    let client = connect(listen);
    let mut server = accept(&up);
    let expected = v1_line(client.local_addr().unwrap(), listen);
    assert!(expected.starts_with("PROXY TCP6 ::1 ::1 "), "{expected}");
    assert_eq!(
        String::from_utf8(read_n(&mut server, expected.len())).unwrap(),
        expected
    );
}

#[test]
fn first_client_bytes_travel_with_the_header_in_one_segment() {
    let (up, up_addr) = upstream();
    let listen = free_addr();
    // With one connection allowed, a second client's request is surely in its socket when the
    // proxy accepts it (after the first closes): the case the coalescing is for.
    let _proxy = Running::start(
        ProxyConfig {
            max_connections: 1,
            ..config()
        },
        table(vec![route("c", listen, up_addr, Version::V1)]),
    );
    let mut blocker = connect(listen);
    let mut blocker_server = accept(&up);
    for round in 0..5 {
        let mut client = connect(listen);
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(30));
        drop(blocker);
        drop(blocker_server);
        let mut server = accept(&up);
        let header = v1_line(client.local_addr().unwrap(), listen);
        // One read returns what one segment carried (the proxy sets TCP_NODELAY upstream, so a
        // separate write of the header would arrive, and be readable, on its own).
        let mut buf = [0u8; 1024];
        let n = server.read(&mut buf).unwrap();
        let expected = format!("{header}GET / HTTP/1.1\r\n\r\n");
        assert_eq!(
            String::from_utf8_lossy(&buf[..n]),
            expected,
            "round {round}: header and first bytes must arrive together"
        );
        blocker = client;
        blocker_server = server;
    }
}

#[test]
fn half_close_is_passed_on_both_ways() {
    let (up, up_addr) = upstream();
    let listen = free_addr();
    let proxy = Running::start(
        config(),
        table(vec![route("h", listen, up_addr, Version::V1)]),
    );

    // Client finishes sending first; the response still comes back.
    let mut client = connect(listen);
    let header = v1_line(client.local_addr().unwrap(), listen);
    client.write_all(b"request").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    let mut server = accept(&up);
    let mut received = Vec::new();
    server.read_to_end(&mut received).unwrap();
    assert_eq!(received, format!("{header}request").into_bytes());
    server
        .write_all(b"response after the client's FIN")
        .unwrap();
    drop(server);
    let mut response = Vec::new();
    client.read_to_end(&mut response).unwrap();
    assert_eq!(response, b"response after the client's FIN");

    // The upstream finishes first; the client can still send.
    let mut client = connect(listen);
    let header = v1_line(client.local_addr().unwrap(), listen);
    let mut server = accept(&up);
    assert_eq!(read_n(&mut server, header.len()), header.as_bytes());
    server.write_all(b"banner").unwrap();
    server.shutdown(Shutdown::Write).unwrap();
    let mut banner = Vec::new();
    client.read_to_end(&mut banner).unwrap();
    assert_eq!(banner, b"banner");
    client.write_all(b"still talking").unwrap();
    assert_eq!(read_n(&mut server, 13), b"still talking");
    client.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    server.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());

    proxy.wait_metric("hairpin_proxy_connections_active{route=\"h\"} 0");
    let metrics = proxy.metrics();
    assert!(
        metrics.contains("hairpin_proxy_connections_total{route=\"h\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics
            .contains("hairpin_proxy_bytes_total{route=\"h\",direction=\"client_to_upstream\"} 20"),
        "{metrics}"
    );
    assert!(
        metrics
            .contains("hairpin_proxy_bytes_total{route=\"h\",direction=\"upstream_to_client\"} 37"),
        "{metrics}"
    );
}

#[test]
fn large_transfers_arrive_intact_both_ways() {
    let (up, up_addr) = upstream();
    let listen = free_addr();
    let _proxy = Running::start(
        config(),
        table(vec![route("big", listen, up_addr, Version::V2)]),
    );
    let payload: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let mut client = connect(listen);
    let mut server = accept(&up);
    let header_len = 16 + 12;
    read_n(&mut server, header_len);
    let sent = payload.clone();
    let mut client_writer = client.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        client_writer.write_all(&sent).unwrap();
        client_writer.shutdown(Shutdown::Write).unwrap();
    });
    let mut echo_writer = server.try_clone().unwrap();
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0; 100_000];
        loop {
            let n = server.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            echo_writer.write_all(&buf[..n]).unwrap();
        }
        echo_writer.shutdown(Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    client.read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    echo.join().unwrap();
    assert_eq!(back.len(), payload.len());
    assert!(back == payload, "the echoed payload differs");
}

#[test]
fn idle_connections_are_closed() {
    let (up, up_addr) = upstream();
    let listen = free_addr();
    let proxy = Running::start(
        ProxyConfig {
            idle_timeout: Duration::from_millis(300),
            ..config()
        },
        table(vec![route("idle", listen, up_addr, Version::V1)]),
    );
    let mut client = connect(listen);
    let mut server = accept(&up);
    let header = v1_line(client.local_addr().unwrap(), listen);
    assert_eq!(read_n(&mut server, header.len()), header.as_bytes());
    // Activity postpones the timeout.
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(150));
        client.write_all(b"x").unwrap();
        assert_eq!(read_n(&mut server, 1), b"x");
    }
    let started = Instant::now();
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).unwrap();
    let waited = started.elapsed();
    assert!(rest.is_empty());
    // Not before the timeout (a lower bound a slow machine cannot break); the metric below says
    // which timeout closed it, and the read timeout `T` catches a hang. The delay is a figure.
    assert!(
        waited >= Duration::from_millis(250),
        "closed after {waited:?}"
    );
    println!("figure: closed {waited:?} after the last byte");
    server.read_to_end(&mut rest).unwrap();
    proxy.wait_metric("hairpin_proxy_idle_timeouts_total{route=\"idle\"} 1");
}

#[test]
fn a_half_closed_connection_gets_its_own_timeout_and_frees_its_slot() {
    let (up, up_addr) = upstream();
    let listen = free_addr();
    let proxy = Running::start(
        ProxyConfig {
            idle_timeout: Duration::from_secs(600),
            half_close_timeout: Duration::from_millis(400),
            max_connections: 1,
            ..config()
        },
        table(vec![route("half", listen, up_addr, Version::V1)]),
    );
    let mut client = connect(listen);
    let mut server = accept(&up);
    let header = v1_line(client.local_addr().unwrap(), listen);
    assert_eq!(read_n(&mut server, header.len()), header.as_bytes());
    // The client finishes; the upstream gets the FIN.
    client.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    server.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    // The open direction keeps the connection while bytes move, past the half-close timeout.
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(150));
        server.write_all(b"y").unwrap();
        assert_eq!(read_n(&mut client, 1), b"y");
    }
    // Then nothing moves: closed after the half-close timeout, not the idle timeout.
    let started = Instant::now();
    client.read_to_end(&mut rest).unwrap();
    let waited = started.elapsed();
    assert!(rest.is_empty());
    // Not before the timeout (a lower bound a slow machine cannot break); the metric below says
    // which timeout closed it, and the read timeout `T` catches a hang. The delay is a figure.
    assert!(
        waited >= Duration::from_millis(300),
        "closed after {waited:?}"
    );
    println!("figure: closed {waited:?} after the last byte");
    proxy.wait_metric("hairpin_proxy_half_close_timeouts_total{route=\"half\"} 1");
    assert_eq!(
        proxy.value("hairpin_proxy_idle_timeouts_total{route=\"half\"}"),
        0.0
    );
    // The only slot (max_connections 1) is free again.
    let mut next = connect(listen);
    let mut next_server = accept(&up);
    let header = v1_line(next.local_addr().unwrap(), listen);
    assert_eq!(read_n(&mut next_server, header.len()), header.as_bytes());
    next.write_all(b"z").unwrap();
    assert_eq!(read_n(&mut next_server, 1), b"z");
}

#[test]
fn a_silent_upstream_hits_the_connect_timeout() {
    // A listener whose accept queue is full drops SYNs: connecting to it hangs.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    socket.listen(0).unwrap();
    let silent: SocketAddr = socket.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(stream) = TcpStream::connect_timeout(&silent, Duration::from_millis(200)) {
            fillers.push(stream);
        }
    }
    if TcpStream::connect_timeout(&silent, Duration::from_millis(300)).is_ok() {
        // How a full accept queue is handled is the kernel's (and its sysctls') choice.
        skip(
            "a_silent_upstream_hits_the_connect_timeout",
            Cause::Machine,
            "this kernel does not drop SYNs to a full accept queue (a listener with backlog 0 \
             took one more connection)",
        );
        return;
    }
    let listen = free_addr();
    let proxy = Running::start(
        ProxyConfig {
            connect_timeout: Duration::from_millis(300),
            ..config()
        },
        table(vec![route("slow", listen, silent, Version::V1)]),
    );
    let mut client = connect(listen);
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest);
    let waited = started.elapsed();
    assert!(rest.is_empty());
    // Not before the timeout (a lower bound a slow machine cannot break); the metric below says
    // which timeout closed it, and the read timeout `T` catches a hang. The delay is a figure.
    assert!(
        waited >= Duration::from_millis(250),
        "closed after {waited:?}"
    );
    println!("figure: closed {waited:?} after the last byte");
    proxy.wait_metric(
        "hairpin_proxy_upstream_connect_errors_total{route=\"slow\",reason=\"timeout\"} 1",
    );
}

#[test]
fn a_refusing_upstream_closes_the_client_and_is_counted() {
    let refused = free_addr();
    let listen = free_addr();
    let proxy = Running::start(
        config(),
        table(vec![route("down", listen, refused, Version::V1)]),
    );
    for _ in 0..3 {
        let mut client = connect(listen);
        client.write_all(b"hello").unwrap();
        let mut rest = Vec::new();
        let _ = client.read_to_end(&mut rest);
        assert!(rest.is_empty());
    }
    proxy.wait_metric(
        "hairpin_proxy_upstream_connect_errors_total{route=\"down\",reason=\"refused\"} 3",
    );
    proxy.wait_metric("hairpin_proxy_connections_active{route=\"down\"} 0");
}

#[test]
fn the_connection_limit_pauses_accepting_then_recovers() {
    let (up, up_addr) = upstream();
    let listen = free_addr();
    let proxy = Running::start(
        ProxyConfig {
            max_connections: 2,
            ..config()
        },
        table(vec![route("lim", listen, up_addr, Version::V1)]),
    );
    let first = connect(listen);
    let first_server = accept(&up);
    let second = connect(listen);
    let _second_server = accept(&up);
    // The kernel completes the handshake (backlog), but the proxy does not accept it.
    let third = connect(listen);
    let third_header = v1_line(third.local_addr().unwrap(), listen);
    std::thread::sleep(Duration::from_millis(300));
    up.set_nonblocking(true).unwrap();
    assert!(
        up.accept().is_err(),
        "a third connection went upstream beyond --max-connections 2"
    );
    assert!(proxy.value("hairpin_proxy_connection_limit_reached_total") >= 1.0);
    // Both sides close (a half-closed connection is still open).
    drop(first);
    drop(first_server);
    let mut third_server = accept(&up);
    assert_eq!(
        read_n(&mut third_server, third_header.len()),
        third_header.as_bytes()
    );
    drop(second);
}

#[test]
fn route_changes_keep_established_connections() {
    let (up, up_addr) = upstream();
    let (up_b, up_b_addr) = upstream();
    let a = free_addr();
    let b = free_addr();
    let proxy = Running::start(config(), table(vec![route("a", a, up_addr, Version::V1)]));
    let mut client = connect(a);
    let mut server = accept(&up);
    let header = v1_line(client.local_addr().unwrap(), a);
    assert_eq!(read_n(&mut server, header.len()), header.as_bytes());

    // Replace route a with route b.
    proxy
        .routes
        .send(table(vec![route("b", b, up_b_addr, Version::V2)]))
        .unwrap();
    // (Probes of route a that still get through go to `up`, which accepts nothing more below.)
    let deadline = Instant::now() + T;
    while TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok() {
        assert!(Instant::now() < deadline, "removed route a still accepts");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _client_b = connect(b);
    let mut server_b = accept(&up_b);
    assert_eq!(&read_n(&mut server_b, 12), b"\r\n\r\n\0\r\nQUIT\n");

    // The connection accepted by route a still works both ways.
    client.write_all(b"ping").unwrap();
    assert_eq!(read_n(&mut server, 4), b"ping");
    server.write_all(b"pong").unwrap();
    assert_eq!(read_n(&mut client, 4), b"pong");

    // Changing a route's upstream applies to new connections on the same listener.
    let (up_c, up_c_addr) = upstream();
    proxy
        .routes
        .send(table(vec![route("b", b, up_c_addr, Version::V1)]))
        .unwrap();
    let deadline = Instant::now() + T;
    up_c.set_nonblocking(true).unwrap();
    let mut server_c = loop {
        let probe = connect(b);
        std::thread::sleep(Duration::from_millis(20));
        if let Ok((stream, _)) = up_c.accept() {
            drop(probe);
            break stream;
        }
        assert!(Instant::now() < deadline, "route b was not updated");
    };
    server_c.set_nonblocking(false).unwrap();
    server_c.set_read_timeout(Some(T)).unwrap();
    assert_eq!(&read_n(&mut server_c, 6), b"PROXY ");

    // Route a comes back (with a fresh upstream, so earlier probes cannot be mistaken for it).
    let (up_a2, up_a2_addr) = upstream();
    proxy
        .routes
        .send(table(vec![
            route("a", a, up_a2_addr, Version::V1),
            route("b", b, up_c_addr, Version::V1),
        ]))
        .unwrap();
    proxy.wait_metric("hairpin_proxy_routes 2");
    let again = connect(a);
    let mut server_again = accept(&up_a2);
    let header = v1_line(again.local_addr().unwrap(), a);
    assert_eq!(read_n(&mut server_again, header.len()), header.as_bytes());
    client.write_all(b"still here").unwrap();
    assert_eq!(read_n(&mut server, 10), b"still here");
}

#[test]
fn drain_waits_for_open_connections_and_stops_accepting() {
    let (up, up_addr) = upstream();
    let listen = free_addr();
    let proxy = Running::start(
        ProxyConfig {
            drain_timeout: Duration::from_secs(10),
            shutdown_delay: Duration::from_millis(500),
            ..config()
        },
        table(vec![route("d", listen, up_addr, Version::V1)]),
    );
    let mut client = connect(listen);
    let mut server = accept(&up);
    let header = v1_line(client.local_addr().unwrap(), listen);
    assert_eq!(read_n(&mut server, header.len()), header.as_bytes());
    // Within the shutdown delay, new connections are still accepted and forwarded.
    proxy.shutdown.trigger();
    let triggered = Instant::now();
    let late = connect(listen);
    let mut late_server = accept(&up);
    let header = v1_line(late.local_addr().unwrap(), listen);
    assert_eq!(read_n(&mut late_server, header.len()), header.as_bytes());
    drop((late, late_server));
    // Probes below that the proxy still accepted are forwarded: close them upstream too, or
    // they would (rightly) keep the drain waiting.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let closer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            up.set_nonblocking(true).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = up.accept();
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let deadline = Instant::now() + T;
    while TcpStream::connect_timeout(&listen, Duration::from_millis(200)).is_ok() {
        assert!(Instant::now() < deadline, "still accepting while draining");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        triggered.elapsed() >= Duration::from_millis(500),
        "stopped accepting {:?} after the drain started, before the shutdown delay",
        triggered.elapsed()
    );
    client.write_all(b"during drain").unwrap();
    assert_eq!(read_n(&mut server, 12), b"during drain");
    let thread = &proxy.thread;
    assert!(
        !thread.as_ref().unwrap().is_finished(),
        "the drain ended with a connection open"
    );
    drop(client);
    drop(server);
    let deadline = Instant::now() + T;
    while !proxy.thread.as_ref().unwrap().is_finished() {
        assert!(
            Instant::now() < deadline,
            "the drain did not end after the last connection"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    closer.join().unwrap();
}
