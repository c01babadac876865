//! The propagation checker against a real DNS server on loopback that the test starts and
//! changes while the check runs.

mod support;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use hairpin_controller::propagation::{Answer, CheckSpec, DnsServer, check};
use support::dns::TestDns;

const OLD: &str = "203.0.113.10";
const HAIRPIN: &str = "10.96.7.7";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn spec(servers: Vec<DnsServer>, names: &[&str], deadline: Duration) -> CheckSpec {
    CheckSpec {
        servers,
        names: names.iter().map(|n| (*n).to_owned()).collect(),
        expected: vec![ip(HAIRPIN)],
        connect: None,
        written_at: Instant::now(),
        deadline,
        interval: Duration::from_millis(50),
        query_timeout: Duration::from_millis(300),
    }
}

fn cluster_dns(addr: SocketAddr) -> DnsServer {
    DnsServer {
        addr,
        role: "cluster DNS".into(),
        optional: false,
    }
}

#[tokio::test]
async fn effective_once_the_server_answers_the_new_address_with_the_time_it_took() {
    let dns = TestDns::start().await;
    dns.set("shop.example.com", &[ip(OLD)]);
    dns.set("hairpin-probe.apps.example.com", &[ip(OLD)]);
    let spec = spec(
        vec![cluster_dns(dns.addr)],
        &["shop.example.com", "hairpin-probe.apps.example.com"],
        Duration::from_secs(10),
    );
    let switch_after = Duration::from_millis(400);
    let checking = tokio::spawn({
        let spec = spec.clone();
        async move { check(&spec).await }
    });
    tokio::time::sleep(switch_after).await;
    // The answers already given were the old address.
    assert!(!checking.is_finished());
    dns.set("shop.example.com", &[ip(HAIRPIN)]);
    dns.set("hairpin-probe.apps.example.com", &[ip(HAIRPIN)]);
    let outcome = checking.await.unwrap();
    // Measured from the write: not before the switch, and not past the moment the check was
    // seen to end (bounds a slow machine cannot break); how soon after the switch is a figure.
    let ended = spec.written_at.elapsed();
    assert!(outcome.effective, "{outcome:?}");
    assert!(outcome.wrong.is_empty(), "{outcome:?}");
    assert!(
        outcome.elapsed >= switch_after && outcome.elapsed <= ended,
        "measured {:?}, switched after {switch_after:?}, ended after {ended:?}",
        outcome.elapsed
    );
    println!(
        "figure: answer switched at {switch_after:?}, measured {:?}",
        outcome.elapsed
    );
    let queries = dns.queries();
    let shop_a = queries
        .iter()
        .filter(|q| q.starts_with("shop.example.com A "))
        .count();
    assert!(shop_a >= 2, "asked again after the old answer: {queries:?}");
    dns.stop().await;
}

#[tokio::test]
async fn not_effective_at_the_deadline_says_what_was_answered() {
    let dns = TestDns::start().await;
    dns.set("shop.example.com", &[ip(OLD)]);
    let deadline = Duration::from_millis(600);
    let started = Instant::now();
    let outcome = check(&spec(
        vec![cluster_dns(dns.addr)],
        &["shop.example.com", "gone.example.com"],
        deadline,
    ))
    .await;
    assert!(!outcome.effective);
    assert!(started.elapsed() >= deadline);
    // Ends at its deadline, not never (a bound that only catches a hang).
    assert!(started.elapsed() < deadline + Duration::from_secs(30));
    let key = |name: &str| ("cluster DNS".to_owned(), name.to_owned());
    assert_eq!(
        outcome.wrong.get(&key("shop.example.com")),
        Some(&Answer::Addresses(vec![ip(OLD)]))
    );
    assert_eq!(
        outcome.wrong.get(&key("gone.example.com")),
        Some(&Answer::NoRecords)
    );
    assert_eq!(
        outcome.connect, None,
        "no connect while DNS is not effective"
    );
    dns.stop().await;
}

#[tokio::test]
async fn an_unreachable_node_local_dns_is_left_out_and_a_reachable_one_must_agree() {
    let dns = TestDns::start().await;
    let node_local = TestDns::start().await;
    dns.set("shop.example.com", &[ip(HAIRPIN)]);
    // node-local-dns forwards external names upstream: it still answers the LB's address.
    node_local.set("shop.example.com", &[ip(OLD)]);
    let node_local_server = DnsServer {
        addr: node_local.addr,
        role: "node-local-dns".into(),
        optional: true,
    };
    let outcome = check(&spec(
        vec![cluster_dns(dns.addr), node_local_server.clone()],
        &["shop.example.com"],
        Duration::from_millis(500),
    ))
    .await;
    assert!(!outcome.effective, "{outcome:?}");
    assert_eq!(
        outcome
            .wrong
            .get(&("node-local-dns".to_owned(), "shop.example.com".to_owned())),
        Some(&Answer::Addresses(vec![ip(OLD)]))
    );
    assert!(outcome.unreachable.is_empty());

    // Nothing listens on this port: the optional server never answers.
    let closed = {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.local_addr().unwrap()
    };
    let outcome = check(&spec(
        vec![
            cluster_dns(dns.addr),
            DnsServer {
                addr: closed,
                ..node_local_server
            },
        ],
        &["shop.example.com"],
        Duration::from_secs(5),
    ))
    .await;
    assert!(outcome.effective, "{outcome:?}");
    assert_eq!(outcome.unreachable.len(), 1);
    node_local.stop().await;
    dns.stop().await;
}

#[tokio::test]
async fn the_proxy_path_is_a_tcp_connect_to_the_hairpin_service() {
    let dns = TestDns::start().await;
    dns.set("shop.example.com", &[ip(HAIRPIN)]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut ok = spec(
        vec![cluster_dns(dns.addr)],
        &["shop.example.com"],
        Duration::from_secs(5),
    );
    ok.connect = Some(listener.local_addr().unwrap());
    let outcome = check(&ok).await;
    assert_eq!(outcome.connect, Some(Ok(())));
    let (_conn, _) = listener.accept().await.unwrap();

    let closed = listener.local_addr().unwrap();
    drop(listener);
    let mut refused = ok.clone();
    refused.connect = Some(closed);
    let outcome = check(&refused).await;
    assert!(outcome.effective);
    assert!(
        matches!(&outcome.connect, Some(Err(e)) if e.contains("refused")),
        "{outcome:?}"
    );
    dns.stop().await;
}

/// With the default `--propagation-interval` (2 s), an answer that changes 2.2 s after the
/// write is measured to within the fast rounds' half second, not rounded up to the next 2 s
/// step (4.0 s before). Prints the figure; asserts the resolution by counting the questions.
#[tokio::test]
async fn the_figure_has_sub_second_resolution_with_the_default_interval() {
    let dns = TestDns::start().await;
    dns.set("shop.example.com", &[ip(OLD)]);
    let mut spec = spec(
        vec![cluster_dns(dns.addr)],
        &["shop.example.com"],
        Duration::from_secs(10),
    );
    spec.interval = Duration::from_secs(2);
    let checking = tokio::spawn({
        let spec = spec.clone();
        async move { check(&spec).await }
    });
    let switch_after = Duration::from_millis(2200);
    tokio::time::sleep_until((spec.written_at + switch_after).into()).await;
    let asked_before_switch = shop_a_queries(&dns);
    dns.set("shop.example.com", &[ip(HAIRPIN)]);
    let outcome = checking.await.unwrap();
    assert!(outcome.effective, "{outcome:?}");
    let late = outcome.elapsed.saturating_sub(switch_after);
    println!(
        "propagation figure: answer changed at {switch_after:?}, measured {:?} ({:.3} s late; resolution goal 0.5 s)",
        outcome.elapsed,
        late.as_secs_f64()
    );
    assert!(outcome.elapsed >= switch_after);
    // The resolution, counted rather than timed: rounds every 2 s would have asked at most
    // twice before the switch (at 0 and 2 s); the fast rounds ask again after 0.1, 0.2 and
    // 0.4 s, so a third question comes long before 2.2 s even on a slow machine.
    assert!(
        asked_before_switch >= 3,
        "asked {asked_before_switch} times in the {switch_after:?} before the switch: {:?}",
        dns.queries()
    );
    // And the answer that changed was asked again after the switch, not only at the end.
    assert!(shop_a_queries(&dns) > asked_before_switch);
    dns.stop().await;
}

fn shop_a_queries(dns: &TestDns) -> usize {
    dns.queries()
        .iter()
        .filter(|q| q.starts_with("shop.example.com A "))
        .count()
}
