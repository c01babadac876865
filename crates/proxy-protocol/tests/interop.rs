//! Differential tests against real peers on loopback: HAProxy (2.6) and nginx as senders and
//! receivers of PROXY headers. Our decoder must agree with what HAProxy sends; nginx and HAProxy
//! must accept what our encoder writes and report the same addresses.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use hairpin_proxy_protocol::tlv::Tlv;
use hairpin_proxy_protocol::v2::Builder;
use hairpin_proxy_protocol::{
    Command, Decoded, Header, V1_MAX_LEN, Version, decode, encode_header,
};
use hairpin_testkit::{Haproxy, Nginx, exchange, free_port_on};

const TIMEOUT: Duration = Duration::from_secs(10);
const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

fn free(ip: IpAddr) -> SocketAddr {
    SocketAddr::new(ip, free_port_on(ip))
}

/// HAProxy formats IPv6 addresses in URLs and logs without brackets: `::1:80`.
fn haproxy_addr(addr: SocketAddr) -> String {
    format!("{}:{}", addr.ip(), addr.port())
}

/// The body of an HTTP response (after the blank line); panics with the whole response if
/// there is none.
fn body(response: &[u8]) -> String {
    let text = String::from_utf8_lossy(response);
    match text.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => body.to_owned(),
        _ => panic!("no 200 response: {text:?}"),
    }
}

/// Sends `header` then a tiny HTTP request to `addr`; returns the raw response.
fn send_with_header(addr: SocketAddr, header: &[u8]) -> Vec<u8> {
    let mut request = header.to_vec();
    request.extend_from_slice(b"GET / HTTP/1.0\r\nHost: example.com\r\n\r\n");
    exchange(addr, &request, TIMEOUT).expect("exchange with the peer")
}

/// Like [`send_with_header`] for a header the peer must refuse: the peer may close before the
/// request is even written, so write and shutdown errors count as "nothing came back".
fn send_rejected(addr: SocketAddr, header: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect to the peer");
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut request = header.to_vec();
    request.extend_from_slice(b"GET / HTTP/1.0\r\nHost: example.com\r\n\r\n");
    let _ = stream.write_all(&request);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    response
}

/// Accepts one connection on `listener` and reads until a whole header is decoded; returns the
/// decoded header and the payload bytes that followed it.
fn accept_and_decode(
    listener: &TcpListener,
) -> (hairpin_proxy_protocol::OwnedHeader, Vec<u8>, Vec<u8>) {
    listener.set_nonblocking(false).unwrap();
    let (mut stream, _) = listener
        .accept()
        .expect("HAProxy connects to the test listener");
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut buf = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match decode(&buf).expect("HAProxy's header decodes") {
            Decoded::Complete { header, len } => {
                let header = header.to_owned_header();
                let mut payload = buf[len..].to_vec();
                // Read what is left of the payload (the client half-closes). testkit's
                // readiness probe may end its connection with a reset, which HAProxy passes on:
                // that connection ends there, and the caller skips it (no payload).
                match stream.read_to_end(&mut payload) {
                    Ok(_) => {}
                    Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => {}
                    Err(err) => panic!("reading the payload after the header: {err}"),
                }
                return (header, payload, buf[..len].to_vec());
            }
            Decoded::Incomplete { .. } => {
                assert!(
                    Instant::now() < deadline,
                    "no complete header after {TIMEOUT:?}"
                );
                let mut chunk = [0u8; 512];
                let n = stream.read(&mut chunk).expect("read from HAProxy");
                assert!(n > 0, "HAProxy closed before a complete header: {buf:?}");
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// Starts HAProxy in TCP mode forwarding `bind` to `backend` with the given server options,
/// sends `hello` through it and returns (client's local address, decoded header, payload, raw).
fn through_haproxy(
    ip: IpAddr,
    server_options: &str,
    extra: &str,
) -> (
    SocketAddr,
    SocketAddr,
    hairpin_proxy_protocol::OwnedHeader,
    Vec<u8>,
    Vec<u8>,
) {
    let listener = TcpListener::bind(SocketAddr::new(ip, 0)).unwrap();
    let backend = listener.local_addr().unwrap();
    let bind = free(ip);
    let _haproxy = Haproxy::start(
        &format!(
            "listen lb\n  mode tcp\n  bind {bind}\n{extra}  server upstream {backend} {server_options}\n"
        ),
        &[bind],
    )
    .expect("start haproxy");
    // testkit's readiness probe also went through HAProxy to us (with a header, without
    // data): the loop below skips connections that do not carry the client's payload.
    let client = std::thread::spawn(move || {
        let mut stream = TcpStream::connect_timeout(&bind, TIMEOUT).unwrap();
        let local = stream.local_addr().unwrap();
        stream.write_all(b"hello").unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        local
    });
    loop {
        let (header, payload, raw) = accept_and_decode(&listener);
        if payload == b"hello" {
            let local = client.join().unwrap();
            return (local, bind, header, payload, raw);
        }
    }
}

#[test]
fn haproxy_send_proxy_v1_decodes_to_the_client_and_frontend_addresses() {
    for ip in [V4, V6] {
        let (client, frontend, header, payload, raw) = through_haproxy(ip, "send-proxy", "");
        assert!(
            raw.starts_with(b"PROXY TCP"),
            "{:?}",
            raw.escape_ascii().to_string()
        );
        let header = header.as_header();
        assert_eq!(header.version(), Version::V1);
        assert_eq!(header.source(), Some(client), "{}", raw.escape_ascii());
        assert_eq!(header.destination(), Some(frontend));
        assert_eq!(payload, b"hello");
    }
}

#[test]
fn haproxy_send_proxy_v2_with_crc32c_and_unique_id_decodes() {
    for ip in [V4, V6] {
        let (client, frontend, header, payload, raw) = through_haproxy(
            ip,
            "send-proxy-v2 proxy-v2-options crc32c,unique-id",
            "  unique-id-format hairpin-%fp\n",
        );
        let header = header.as_header();
        assert_eq!(header.version(), Version::V2);
        assert_eq!(header.command(), Command::Proxy);
        assert_eq!(header.source(), Some(client));
        assert_eq!(header.destination(), Some(frontend));
        assert!(
            header.crc32c().is_some(),
            "HAProxy sent no CRC32C TLV: {raw:02x?}"
        );
        let expected_id = format!("hairpin-{}", frontend.port());
        assert_eq!(
            header.unique_id(),
            Some(expected_id.as_bytes()),
            "{raw:02x?}"
        );
        assert_eq!(payload, b"hello");
        // Our decoder verified HAProxy's checksum; a flipped address bit must now fail it.
        let mut bad = raw.clone();
        bad[17] ^= 1;
        assert!(decode(&bad).is_err());
    }
}

fn nginx_server(listen: SocketAddr) -> String {
    let listen = match listen {
        SocketAddr::V4(a) => a.to_string(),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    };
    format!(
        "server {{\n  listen {listen} proxy_protocol;\n  set_real_ip_from 127.0.0.1;\n  set_real_ip_from ::1;\n  \
         real_ip_header proxy_protocol;\n  location / {{ return 200 \
         \"$proxy_protocol_addr:$proxy_protocol_port $proxy_protocol_server_addr:$proxy_protocol_server_port $realip_remote_addr $remote_addr\"; }}\n}}\n"
    )
}

#[test]
fn nginx_accepts_our_v1_and_v2_headers_and_reports_the_same_addresses() {
    let on_v4 = free(V4);
    let on_v6 = free(V6);
    let nginx = Nginx::start(
        &format!("{}{}", nginx_server(on_v4), nginx_server(on_v6)),
        &[on_v4, on_v6],
    )
    .expect("start nginx");
    let cases: [(SocketAddr, &str, &str, &str, &str); 3] = [
        (
            on_v4,
            "192.0.2.10:5555",
            "198.51.100.1:443",
            "192.0.2.10:5555 198.51.100.1:443",
            "192.0.2.10",
        ),
        (
            on_v6,
            "[2001:db8::10]:6666",
            "[::1]:443",
            "2001:db8::10:6666 ::1:443",
            "2001:db8::10",
        ),
        // The endpoint to nginx is IPv6, the header's client IPv4: written as TCP6 v4-mapped.
        (
            on_v6,
            "192.0.2.11:7777",
            "[2001:db8::1]:80",
            "::ffff:192.0.2.11:7777 2001:db8::1:80",
            "::ffff:192.0.2.11",
        ),
    ];
    for (listen, src, dst, proxy_vars, remote) in cases {
        for version in [Version::V1, Version::V2] {
            let mut header = [0u8; V1_MAX_LEN];
            let len = encode_header(
                version,
                src.parse().unwrap(),
                dst.parse().unwrap(),
                &mut header,
            )
            .unwrap();
            let response = send_with_header(listen, &header[..len]);
            let peer = listen.ip();
            assert_eq!(
                body(&response),
                format!("{proxy_vars} {peer} {remote}"),
                "{version} {src} -> {dst} via {listen}; error log:\n{}",
                nginx.error_log()
            );
        }
    }
    // And the reverse check: no header, no service (the bug hairpin fixes).
    let response = send_rejected(on_v4, b"");
    assert!(
        response.is_empty(),
        "{}",
        String::from_utf8_lossy(&response)
    );
}

#[test]
fn nginx_accepts_our_v2_header_with_tlvs_and_crc32c() {
    let listen = free(V4);
    let nginx = Nginx::start(&nginx_server(listen), &[listen]).expect("start nginx");
    let mut buf = [0u8; 512];
    let mut builder = Builder::proxy(
        &mut buf,
        "192.0.2.20:2020".parse().unwrap(),
        "198.51.100.2:443".parse().unwrap(),
    )
    .unwrap();
    builder.tlv(Tlv::Authority("example.com")).unwrap();
    builder
        .tlv(Tlv::Custom {
            kind: 0xEA,
            value: b"\x01vpce-0123456789abcdef0",
        })
        .unwrap();
    let len = builder.finish_with_crc32c().unwrap();
    let response = send_with_header(listen, &buf[..len]);
    assert_eq!(
        body(&response),
        "192.0.2.20:2020 198.51.100.2:443 127.0.0.1 192.0.2.20",
        "error log:\n{}",
        nginx.error_log()
    );
}

fn haproxy_http_frontend(bind: SocketAddr) -> String {
    format!(
        "frontend fe\n  mode http\n  bind {bind} accept-proxy\n  \
         http-request return status 200 content-type text/plain lf-string \
         \"%[src]:%[src_port] %[dst]:%[dst_port] authority=%[fc_pp_authority] id=%[fc_pp_unique_id]\"\n"
    )
}

#[test]
fn haproxy_accept_proxy_takes_our_v1_and_v2_headers() {
    let on_v4 = free(V4);
    let on_v6 = free(V6);
    let haproxy = Haproxy::start(
        &format!(
            "{}\n{}",
            haproxy_http_frontend(on_v4),
            haproxy_http_frontend(on_v6).replace("frontend fe", "frontend fe6")
        ),
        &[on_v4, on_v6],
    )
    .expect("start haproxy");
    let cases = [
        (on_v4, "192.0.2.10:5555", "198.51.100.1:443"),
        (on_v6, "[2001:db8::10]:6666", "[::1]:443"),
        (on_v4, "[::1]:7777", "[2001:db8::1]:80"),
        (on_v6, "192.0.2.11:7777", "[2001:db8::1]:80"),
    ];
    for (listen, src, dst) in cases {
        for version in [Version::V1, Version::V2] {
            let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
            let mut header = [0u8; V1_MAX_LEN];
            let len = encode_header(version, src, dst, &mut header).unwrap();
            let response = send_with_header(listen, &header[..len]);
            // HAProxy reports the decoded endpoints; a mixed pair arrives v4-mapped.
            let expected = Header::tcp(version, src, dst);
            let (s, d) = (expected.source().unwrap(), expected.destination().unwrap());
            assert_eq!(
                body(&response),
                format!("{} {} authority= id=", haproxy_addr(s), haproxy_addr(d)),
                "{version} {src} -> {dst} via {listen}; log:\n{}",
                haproxy.log()
            );
        }
    }
}

#[test]
fn haproxy_accept_proxy_reads_our_tlvs_and_checks_our_crc32c() {
    let listen = free(V4);
    let haproxy = Haproxy::start(&haproxy_http_frontend(listen), &[listen]).expect("start haproxy");
    let mut buf = [0u8; 512];
    let mut builder = Builder::proxy(
        &mut buf,
        "192.0.2.30:3030".parse().unwrap(),
        "198.51.100.3:8443".parse().unwrap(),
    )
    .unwrap();
    builder.tlv(Tlv::Authority("app.example.com")).unwrap();
    builder.tlv(Tlv::UniqueId(b"conn-42")).unwrap();
    builder.tlv(Tlv::Noop(&[0; 7])).unwrap();
    let len = builder.finish_with_crc32c().unwrap();
    let header = buf[..len].to_vec();
    let response = send_with_header(listen, &header);
    assert_eq!(
        body(&response),
        "192.0.2.30:3030 198.51.100.3:8443 authority=app.example.com id=conn-42",
        "log:\n{}",
        haproxy.log()
    );
    // The same header with one address bit flipped: HAProxy's CRC check must refuse it.
    let mut bad = header.clone();
    bad[17] ^= 1;
    let response = send_rejected(listen, &bad);
    assert!(
        response.is_empty(),
        "HAProxy accepted a bad CRC32C: {}",
        String::from_utf8_lossy(&response)
    );
    // And the good one still works after that.
    assert!(body(&send_with_header(listen, &header)).starts_with("192.0.2.30:3030"));
}

#[test]
fn haproxy_accept_proxy_uses_the_real_endpoints_for_local_and_unknown() {
    let listen = free(V4);
    let haproxy = Haproxy::start(&haproxy_http_frontend(listen), &[listen]).expect("start haproxy");
    let mut buf = [0u8; 64];
    let local = Builder::local(&mut buf).unwrap().finish();
    for header in [&buf[..local], b"PROXY UNKNOWN\r\n"] {
        let response = send_with_header(listen, header);
        let body = body(&response);
        let expected_dst = format!(" {} ", haproxy_addr(listen));
        assert!(
            body.starts_with("127.0.0.1:") && body.contains(&expected_dst),
            "{body:?}; log:\n{}",
            haproxy.log()
        );
    }
}
