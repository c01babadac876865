//! The receivers that run here as real peers (Debian's nginx and HAProxy), configured as
//! ingress-nginx and the HAProxy Kubernetes Ingress render the setting of a fixture, answer
//! as the planner classifies that fixture: `required` refuses a connection without a header
//! (in-cluster clients break), `off` reads a header as the request (an LB that sends one breaks
//! everyone: the mismatch), and HAProxy's narrower `proxy-protocol` sources do not ask a
//! client outside them for a header (why hairpin calls that setting unknown, not required).
//! Traefik's `proxyProtocol` is optional: a Go server behind go-proxyproto's listener with
//! Traefik's policy (USE for trusted sources, IGNORE otherwise) serves a client without a header
//! (in-cluster clients work: no cure needed) and reads the header of one that sends it.

use std::net::SocketAddr;
use std::time::Duration;

use hairpin_planner::ClusterSnapshot;
use hairpin_planner::load::load_yaml;
use hairpin_planner::receivers::{Requirement, receiver_of};
use hairpin_testkit::{Haproxy, Nginx, ProxyprotoOptional, exchange, free_addr};

const REQUEST: &str = "GET / HTTP/1.1\r\nHost: shop.example.com\r\nConnection: close\r\n\r\n";

fn requirement(fixture: &str) -> Requirement {
    let path = format!(
        "{}/tests/fixtures/receivers/{fixture}",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut s = ClusterSnapshot::default();
    load_yaml(&mut s, fixture, &std::fs::read_to_string(path).unwrap()).unwrap();
    receiver_of(&s, &s.services[0]).unwrap().requirement
}

/// The answer to [`REQUEST`], after a PROXY v1 header from 203.0.113.50:40000 when `proxy`
/// (empty when the peer closed without an answer).
fn answer(addr: SocketAddr, proxy: bool) -> String {
    let header = if proxy {
        format!(
            "PROXY TCP4 203.0.113.50 {} 40000 {}\r\n",
            addr.ip(),
            addr.port()
        )
    } else {
        String::new()
    };
    let request = format!("{header}{REQUEST}");
    let answer = exchange(addr, request.as_bytes(), Duration::from_secs(5)).unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// The status line of [`answer`].
fn status(addr: SocketAddr, proxy: bool) -> String {
    answer(addr, proxy)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn answered(line: &str) -> bool {
    line.contains(" 200 ")
}

#[test]
fn nginx_as_ingress_nginx_renders_use_proxy_protocol_answers_as_classified() {
    assert_eq!(
        requirement("ingress-nginx-required.yaml"),
        Requirement::Required { only_v2: false }
    );
    assert_eq!(requirement("ingress-nginx-off.yaml"), Requirement::Off);
    // ingress-nginx's template: `listen <port> proxy_protocol` with `use-proxy-protocol: "true"`.
    let (required, off) = (free_addr(), free_addr());
    let _nginx = Nginx::start(
        &format!(
            "server {{ listen {required} proxy_protocol; location / {{ return 200 \"ok\"; }} }}\n\
             server {{ listen {off}; location / {{ return 200 \"ok\"; }} }}"
        ),
        &[required, off],
    )
    .unwrap();
    // Required: no header (an in-cluster client, short-circuited) is refused; the LB's is served.
    assert!(!answered(&status(required, false)));
    assert!(answered(&status(required, true)));
    // Off: a plain client is served; the header of an LB that sends one is a bad request.
    assert!(answered(&status(off, false)));
    let with_header = status(off, true);
    assert!(with_header.contains(" 400 "), "{with_header:?}");
}

#[test]
fn haproxy_as_the_haproxy_ingress_renders_proxy_protocol_answers_as_classified() {
    assert_eq!(
        requirement("haproxy-required.yaml"),
        Requirement::Required { only_v2: false }
    );
    assert_eq!(requirement("haproxy-sources.yaml"), Requirement::Unknown);
    // haproxytech/kubernetes-ingress pkg/handler/proxy-protocol.go: `tcp-request connection
    // expect-proxy layer4` for the configured sources.
    let (everyone, some) = (free_addr(), free_addr());
    let frontend = |name: &str, addr: SocketAddr, sources: &str| {
        format!(
            "frontend {name}\n  mode http\n  bind {addr}\n  \
             tcp-request connection expect-proxy layer4 if {{ src {sources} }}\n  \
             http-request return status 200 content-type text/plain string ok\n\n"
        )
    };
    let _haproxy = Haproxy::start(
        &format!(
            "{}{}",
            frontend("everyone", everyone, "0.0.0.0/0"),
            frontend("some", some, "192.168.1.0/24 192.168.2.100")
        ),
        &[everyone, some],
    )
    .unwrap();
    // 0.0.0.0/0: required from every client.
    assert!(!answered(&status(everyone, false)));
    assert!(answered(&status(everyone, true)));
    // Narrower sources: a client outside them (here 127.0.0.1) is not asked for a header, and
    // one that sends it gets its header read as the request. Whether in-cluster clients fall
    // inside the ranges is not in the objects: unknown.
    assert!(answered(&status(some, false)));
    assert!(!answered(&status(some, true)));
}

#[test]
fn go_proxyproto_as_traefik_runs_proxy_protocol_answers_as_classified() {
    assert_eq!(requirement("traefik-optional.yaml"), Requirement::Optional);
    // scripts/install-test-deps.sh installs Go and go-proxyproto's source: a peer.
    if hairpin_testkit::skip::missing(
        "go_proxyproto_as_traefik_runs_proxy_protocol_answers_as_classified",
        ProxyprotoOptional::unavailable()
            .map(|why| format!("the go-proxyproto peer cannot run here: {why}")),
    ) {
        return;
    }
    // traefik/traefik pkg/server/server_entrypoint_tcp.go: policy USE for `trustedIPs`, IGNORE
    // for other sources. `trusted` plays the LB inside the trusted range (here loopback);
    // `outside` keeps the fixture's 10.0.0.0/8, which this client (127.0.0.1) is not in.
    let (trusted, outside) = (free_addr(), free_addr());
    let _trusted = ProxyprotoOptional::start(trusted, &["127.0.0.0/8"]).unwrap();
    let _outside = ProxyprotoOptional::start(outside, &["10.0.0.0/8"]).unwrap();
    for addr in [trusted, outside] {
        // No header (an in-cluster client, short-circuited): served, with its own address.
        let plain = answer(addr, false);
        assert!(answered(&plain), "{plain:?}");
        assert!(plain.contains("remote_addr=127.0.0.1:"), "{plain:?}");
    }
    // The LB's header from a trusted source: served, and the client is the header's source.
    let proxied = answer(trusted, true);
    assert!(answered(&proxied), "{proxied:?}");
    assert!(
        proxied.ends_with("remote_addr=203.0.113.50:40000"),
        "{proxied:?}"
    );
    // From outside the trusted range the header is consumed and ignored, never read as the
    // request: still served.
    let ignored = answer(outside, true);
    assert!(answered(&ignored), "{ignored:?}");
    assert!(ignored.contains("remote_addr=127.0.0.1:"), "{ignored:?}");
}
