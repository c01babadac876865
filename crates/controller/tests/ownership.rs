//! Hostname verification against a real DNS server on loopback (hickory-server): exact,
//! wildcard, CNAME-chained, elsewhere-resolving, NXDOMAIN and timeout names, through the
//! controller's resolver and then the planner's verdicts.

mod support;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hairpin_controller::Metrics;
use hairpin_controller::ownership::{OwnershipParams, OwnershipResolver};
use hairpin_planner::verify::NameCheck;
use hairpin_planner::{ObjectRef, Resolution};
use hickory_proto::op::{Metadata, ResponseCode};
use hickory_proto::rr::{Name, RData, Record, RecordType, rdata};
use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use tokio::sync::Notify;

/// What the test server holds for a name (a `*.suffix` key answers every name under it).
#[derive(Clone, Debug)]
enum Entry {
    Addresses(Vec<IpAddr>),
    Cname(String),
    /// Never answered: the query times out.
    Silent,
    /// Answered with these addresses after a delay (an upstream slow to answer).
    Slow(Duration, Vec<IpAddr>),
}

type Zone = Arc<Mutex<HashMap<String, Entry>>>;

#[derive(Clone, Default)]
struct Handler {
    zone: Zone,
    queries: Arc<Mutex<Vec<String>>>,
}

fn lookup(zone: &HashMap<String, Entry>, name: &str) -> Option<Entry> {
    if let Some(e) = zone.get(name) {
        return Some(e.clone());
    }
    let mut rest = name;
    while let Some((_, parent)) = rest.split_once('.') {
        if let Some(e) = zone.get(&format!("*.{parent}")) {
            return Some(e.clone());
        }
        rest = parent;
    }
    None
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let info = request.request_info().expect("one query per request");
        let mut name = info
            .query
            .name()
            .to_string()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let qtype = info.query.query_type();
        self.queries.lock().unwrap().push(format!("{name} {qtype}"));
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = true;
        let builder = MessageResponseBuilder::from_message_request(request);
        // Follow the CNAME chain here, as a recursive server does: the answer holds every
        // CNAME and the final addresses.
        let mut records = Vec::new();
        let zone = self.zone.lock().unwrap().clone();
        let mut owner = info.query.original().name().clone();
        loop {
            match lookup(&zone, &name) {
                None if records.is_empty() => {
                    metadata.response_code = ResponseCode::NXDomain;
                    let response = builder.build(metadata, &[], &[], &[], &[]);
                    return response_handle.send_response(response).await.unwrap();
                }
                None => break,
                Some(Entry::Silent) => {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    let response = builder.build(metadata, &[], &[], &[], &[]);
                    return response_handle.send_response(response).await.unwrap();
                }
                Some(Entry::Slow(delay, ips)) => {
                    tokio::time::sleep(delay).await;
                    records.extend(
                        ips.into_iter()
                            .filter_map(|ip| match (ip, qtype) {
                                (IpAddr::V4(v4), RecordType::A) => Some(RData::A(rdata::A(v4))),
                                _ => None,
                            })
                            .map(|rdata| Record::from_rdata(owner.clone(), 300, rdata)),
                    );
                    break;
                }
                Some(Entry::Cname(target)) => {
                    let target_name = Name::from_ascii(format!("{target}.")).unwrap();
                    records.push(Record::from_rdata(
                        owner.clone(),
                        300,
                        RData::CNAME(rdata::CNAME(target_name.clone())),
                    ));
                    owner = target_name;
                    name = target;
                }
                Some(Entry::Addresses(ips)) => {
                    records.extend(
                        ips.into_iter()
                            .filter_map(|ip| match (ip, qtype) {
                                (IpAddr::V4(v4), RecordType::A) => Some(RData::A(rdata::A(v4))),
                                (IpAddr::V6(v6), RecordType::AAAA) => {
                                    Some(RData::AAAA(rdata::AAAA(v6)))
                                }
                                _ => None,
                            })
                            .map(|rdata| Record::from_rdata(owner.clone(), 300, rdata)),
                    );
                    break;
                }
            }
        }
        let response = builder.build(metadata, records.iter(), &[], &[], &[]);
        response_handle.send_response(response).await.unwrap()
    }
}

struct TestDns {
    addr: SocketAddr,
    zone: Zone,
    queries: Arc<Mutex<Vec<String>>>,
    _server: Server<Handler>,
}

impl TestDns {
    async fn start() -> Self {
        let handler = Handler::default();
        let (zone, queries) = (handler.zone.clone(), handler.queries.clone());
        let (addr, server) = support::dns::serve(handler).await;
        Self {
            addr,
            zone,
            queries,
            _server: server,
        }
    }

    fn set(&self, name: &str, entry: Entry) {
        self.zone.lock().unwrap().insert(name.to_owned(), entry);
    }

    fn query_count(&self) -> usize {
        self.queries.lock().unwrap().len()
    }
}

const LB: &str = "192.0.2.5";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn check(name: &str) -> NameCheck {
    NameCheck {
        hostname: name.to_owned(),
        load_balancer: ObjectRef::new("ingress", "proxy"),
        addresses: vec![LB.to_owned(), "lb.example.net".to_owned()],
    }
}

fn params(server: SocketAddr) -> OwnershipParams {
    OwnershipParams {
        timeout: Duration::from_millis(300),
        attempts: 1,
        servers: Some(vec![server]),
        ..OwnershipParams::default()
    }
}

fn metrics() -> Metrics {
    Metrics::register(&mut prometheus_client::registry::Registry::default())
}

/// Waits until the upstream has an answer for each of `n` names.
async fn answers(upstream: &OwnershipResolver, n: usize) -> hairpin_planner::Resolutions {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = upstream.resolutions();
        if r.len() >= n {
            return r;
        }
        assert!(Instant::now() < deadline, "only {} of {n} answers", r.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn zone(dns: &TestDns) {
    dns.set("shop.example.com", Entry::Addresses(vec![ip(LB)]));
    dns.set("*.apps.example.com", Entry::Addresses(vec![ip(LB)]));
    dns.set("alias.example.com", Entry::Cname("edge.cdn.example".into()));
    dns.set("edge.cdn.example", Entry::Cname("lb.example.net".into()));
    dns.set("lb.example.net", Entry::Addresses(vec![ip("192.0.2.77")]));
    dns.set("deep.example.com", Entry::Cname("front.example.org".into()));
    dns.set("front.example.org", Entry::Addresses(vec![ip(LB)]));
    dns.set(
        "elsewhere.example.com",
        Entry::Addresses(vec![ip("198.51.100.9")]),
    );
    dns.set("slow.example.com", Entry::Silent);
}

const NAMES: [&str; 7] = [
    "shop.example.com",
    "*.apps.example.com",
    "alias.example.com",
    "deep.example.com",
    "elsewhere.example.com",
    "gone.example.com",
    "slow.example.com",
];

#[tokio::test]
async fn the_resolver_reports_each_kind_of_answer_from_a_real_dns_server() {
    let dns = TestDns::start().await;
    zone(&dns);
    let changed = Arc::new(Notify::new());
    let upstream = OwnershipResolver::new(params(dns.addr), changed.clone(), metrics());
    let stop = Arc::new(Notify::new());
    let task = tokio::spawn(upstream.clone().run({
        let stop = stop.clone();
        async move { stop.notified().await }
    }));
    let names: Vec<NameCheck> = NAMES.iter().map(|n| check(n)).collect();
    upstream.want(&names, &[]);
    let r = answers(&upstream, NAMES.len()).await;
    assert!(upstream.settled());

    let addresses = |name: &str| match &r[name] {
        Resolution::Addresses { addresses, cnames } => (addresses.clone(), cnames.clone()),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(addresses("shop.example.com").0, [ip(LB)]);
    // The wildcard was asked through a random label under it, which the zone's wildcard
    // answers.
    assert_eq!(addresses("*.apps.example.com").0, [ip(LB)]);
    let asked = dns.queries.lock().unwrap().clone();
    assert!(
        asked
            .iter()
            .any(|q| q.starts_with("hairpin-") && q.contains(".apps.example.com ")),
        "{asked:?}"
    );
    // CNAME chains are followed, and kept.
    assert_eq!(
        addresses("alias.example.com"),
        (
            vec![ip("192.0.2.77")],
            vec!["edge.cdn.example".to_owned(), "lb.example.net".to_owned()]
        )
    );
    assert_eq!(addresses("deep.example.com").0, [ip(LB)]);
    assert_eq!(addresses("elsewhere.example.com").0, [ip("198.51.100.9")]);
    assert_eq!(r["gone.example.com"], Resolution::NxDomain);
    assert!(
        matches!(&r["slow.example.com"], Resolution::Failed { error } if error == "timeout"),
        "{:?}",
        r["slow.example.com"]
    );

    // The planner's verdicts on these answers: only the names that reach the load balancer
    // (its IP, or a CNAME to its status hostname) are redirected.
    let snapshot = snapshot_for(&NAMES, r.clone());
    let plan = hairpin_planner::desired(
        &snapshot,
        &hairpin_planner::PlannerConfig {
            verify_hostnames: hairpin_planner::VerifyMode::Resolve,
            ..hairpin_planner::PlannerConfig::default()
        },
    );
    let lb = &plan.load_balancers[0];
    let redirected: Vec<&str> = lb.hostnames.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(
        redirected,
        [
            "*.apps.example.com",
            "alias.example.com",
            "deep.example.com",
            "shop.example.com"
        ]
    );
    let details: Vec<&str> = plan
        .verification
        .unverified
        .iter()
        .map(|u| u.detail.as_str())
        .collect();
    assert_eq!(
        details,
        [
            "elsewhere.example.com resolves to 198.51.100.9, not this load balancer",
            "gone.example.com does not exist (NXDOMAIN)",
            "slow.example.com could not be resolved: timeout",
        ]
    );
    stop.notify_one();
    task.await.unwrap();
}

/// A tenant PROXY load balancer at [`LB`] (status hostname `lb.example.net`) whose Ingress
/// names `names`, with the CoreDNS ConfigMap, and the given answers.
fn snapshot_for(
    names: &[&str],
    resolutions: hairpin_planner::Resolutions,
) -> hairpin_planner::ClusterSnapshot {
    let rules: Vec<serde_json::Value> = names
        .iter()
        .map(|h| serde_json::json!({ "host": h }))
        .collect();
    let svc = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "proxy", "namespace": "ingress",
                      "annotations": { "hairpin.io/proxy-protocol": "v2" } },
        "spec": { "type": "LoadBalancer", "ports": [{ "name": "https", "port": 443 }] },
        "status": { "loadBalancer": { "ingress": [{ "ip": LB, "hostname": "lb.example.net" }] } }
    });
    let ing = serde_json::json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": { "name": "web", "namespace": "ingress" },
        "spec": { "rules": rules },
        "status": { "loadBalancer": { "ingress": [{ "ip": LB }] } }
    });
    let coredns = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "coredns", "namespace": "kube-system" },
        "data": { "Corefile": ".:53 {\n    kubernetes cluster.local\n    forward . /etc/resolv.conf\n}\n" }
    });
    hairpin_planner::ClusterSnapshot {
        services: vec![serde_json::from_value(svc).unwrap()],
        ingresses: vec![Arc::new(serde_json::from_value(ing).unwrap())],
        config_maps: vec![serde_json::from_value(coredns).unwrap()],
        resolutions,
        ..Default::default()
    }
}

/// Answers are kept for their TTL (bounded below by `min_ttl`): asking for the same names
/// again makes no query; and a re-check that fails keeps the last definite answer.
#[tokio::test]
async fn answers_are_cached_and_a_failed_recheck_keeps_the_last_answer() {
    let dns = TestDns::start().await;
    dns.set("shop.example.com", Entry::Addresses(vec![ip(LB)]));
    let changed = Arc::new(Notify::new());
    let mut p = params(dns.addr);
    // Re-check soon, to see the failure handling within the test.
    p.min_ttl = Duration::from_millis(400);
    p.max_ttl = Duration::from_millis(400);
    p.retry = Duration::from_millis(400);
    let upstream = OwnershipResolver::new(p, changed.clone(), metrics());
    let stop = Arc::new(Notify::new());
    let task = tokio::spawn(upstream.clone().run({
        let stop = stop.clone();
        async move { stop.notified().await }
    }));
    upstream.want(&[check("shop.example.com")], &[]);
    let first = answers(&upstream, 1).await;
    let asked = dns.query_count();
    upstream.want(&[check("shop.example.com")], &[]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        dns.query_count(),
        asked,
        "a cached answer is not asked again"
    );

    // The upstream stops answering: the re-check times out, the answer stays.
    dns.set("shop.example.com", Entry::Silent);
    let deadline = Instant::now() + Duration::from_secs(5);
    while dns.query_count() == asked {
        assert!(Instant::now() < deadline, "never re-checked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(upstream.resolutions(), first);

    // A definite new answer replaces it, and wakes the control loop (drain the wake-up of
    // the first answer first).
    let _ = tokio::time::timeout(Duration::from_millis(10), changed.notified()).await;
    dns.set(
        "shop.example.com",
        Entry::Addresses(vec![ip("198.51.100.9")]),
    );
    tokio::time::timeout(Duration::from_secs(5), changed.notified())
        .await
        .expect("the control loop is woken when an answer changes");
    assert_eq!(
        upstream.resolutions()["shop.example.com"],
        Resolution::Addresses {
            addresses: vec![ip("198.51.100.9")],
            cnames: Vec::new()
        }
    );
    stop.notify_one();
    task.await.unwrap();
}

/// The cluster both fake-API tests start from: the `Hairpin` CRD, hairpin's namespace, the
/// PROXY load balancer with an Ingress `shop/shop` for `hosts`, and a small Corefile.
fn seed(fake: &hairpin_fake_apiserver::FakeApiServer, hosts: &[&str]) {
    use hairpin_fake_apiserver::fixtures;
    fake.install_hairpin_crd();
    fake.create_namespace("hairpin");
    fake.apply(support::cluster::http_lb());
    fake.apply(fixtures::ingress("shop", "shop", hosts, "203.0.113.10"));
    fake.apply(fixtures::coredns(
        ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n",
    ));
}

/// Over the fake API server: a name the upstream resolves elsewhere gets no rule in the
/// Corefile, and shows in the `Hairpin` status (with the answer seen), a Warning Event and the
/// metrics; the load balancer's own name is redirected.
#[tokio::test]
async fn an_unverified_name_gets_no_rule_and_shows_in_the_hairpin_status() {
    use hairpin_fake_apiserver::FakeApiServer;
    let dns = TestDns::start().await;
    dns.set(
        "shop.example.com",
        Entry::Addresses(vec![ip("203.0.113.10")]),
    );
    dns.set("github.com", Entry::Addresses(vec![ip("140.82.112.3")]));
    let fake = FakeApiServer::start().await;
    seed(&fake, &["shop.example.com", "github.com"]);
    let mut config = support::controller::config("pod-a", false);
    config.planner.verify_hostnames = hairpin_planner::VerifyMode::Resolve;
    config.ownership = params(dns.addr);
    let running = support::controller::start(&fake, config);

    let hairpin = |f: &FakeApiServer| {
        f.get(
            "hairpin.io/v1alpha1",
            "Hairpin",
            Some("ingress-nginx"),
            "ingress-nginx-controller",
        )
    };
    let done = |h: &serde_json::Value| {
        h["status"]["hostCount"] == 1 && h["status"]["unverified"][0]["name"] == "github.com"
    };
    fake.wait_until(Duration::from_secs(10), |f| {
        hairpin(f).is_some_and(|h| done(&h))
    })
    .await
    .unwrap_or_else(|| panic!("{:?}", hairpin(&fake)));
    let h = hairpin(&fake).unwrap();
    assert_eq!(h["status"]["hostnames"][0]["name"], "shop.example.com");
    let u = &h["status"]["unverified"][0];
    assert_eq!(u["reason"], "resolves-elsewhere");
    assert_eq!(
        u["message"],
        "github.com resolves to 140.82.112.3, not this load balancer"
    );
    assert_eq!(u["sources"][0], "Ingress shop/shop");
    let corefile = support::cluster::corefile(&fake);
    assert!(corefile.contains("shop.example.com"), "{corefile}");
    assert!(!corefile.contains("github.com"), "{corefile}");
    let events = fake.list("events.k8s.io/v1", "Event");
    assert!(
        events.iter().any(|e| e["reason"] == "HostnameUnverified"
            && e["note"]
                .as_str()
                .is_some_and(|n| n.contains("github.com resolves to 140.82.112.3"))),
        "{events:?}"
    );
    assert!(
        running
            .metrics_text()
            .contains("hairpin_hostnames_unverified{reason=\"resolves-elsewhere\"} 1"),
        "{}",
        running.metrics_text()
    );
    running.stop().await;
}

/// A restart does no harm: the new controller holds its first write until the names'
/// answers come (the upstream is slow here), so no write ever drops a working name.
#[tokio::test]
async fn a_restart_waits_for_the_answers_before_writing() {
    use hairpin_fake_apiserver::FakeApiServer;
    let dns = TestDns::start().await;
    dns.set(
        "shop.example.com",
        Entry::Addresses(vec![ip("203.0.113.10")]),
    );
    let fake = FakeApiServer::start().await;
    seed(&fake, &["shop.example.com"]);
    let corefile = support::cluster::corefile;
    let config = || {
        let mut config = support::controller::config("pod-a", false);
        config.planner.verify_hostnames = hairpin_planner::VerifyMode::Resolve;
        config.ownership = params(dns.addr);
        config.ownership.timeout = Duration::from_secs(3);
        config
    };
    let first = support::controller::start(&fake, config());
    fake.wait_until(Duration::from_secs(10), |f| {
        corefile(f).contains("shop.example.com")
    })
    .await
    .expect("the first controller redirects the name");
    first.stop().await;

    // The restarted controller's upstream answers after 1.5 s.
    dns.set(
        "shop.example.com",
        Entry::Slow(Duration::from_millis(1500), vec![ip("203.0.113.10")]),
    );
    let before = fake.requests().len();
    let second = support::controller::start(&fake, config());
    // Its first reconciles (debounce 50 ms) held the write; the slow answer came, and a
    // reconcile went past the hold (it counts the managed names only then). Stopping lets
    // that reconcile finish its writes.
    let planned = fake
        .wait_until(Duration::from_secs(20), |_| {
            second.metrics.managed_hostnames.get() >= 1
        })
        .await;
    assert!(planned.is_some(), "planned once the answers came");
    second.stop().await;
    let writes: Vec<_> = fake.requests()[before..]
        .iter()
        .filter(|r| {
            r.method != "GET" && r.uri.contains("/namespaces/kube-system/configmaps/coredns")
        })
        .cloned()
        .collect();
    for w in &writes {
        let text = w.body.as_ref().map(ToString::to_string).unwrap_or_default();
        assert!(
            text.contains("shop.example.com"),
            "a write without the working name: {} {} {text}",
            w.method,
            w.uri
        );
    }
    assert!(corefile(&fake).contains("shop.example.com"));
}

/// The cost at 20,000 names, by hand (not in the default suite):
/// `cargo test --release -p hairpin-controller --test ownership cost_at_20000_names -- --ignored --nocapture`.
/// Prints the time of a full first resolution against the loopback test server, the lookups
/// a later reconcile makes (answers cached), and the planner's time with and without the
/// verdicts, as figures and ratios (no timed assert).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by hand with --ignored --nocapture"]
async fn cost_at_20000_names() {
    const N: usize = 20_000;
    let dns = TestDns::start().await;
    dns.set("*.example.com", Entry::Addresses(vec![ip(LB)]));
    let names: Vec<String> = (0..N).map(|i| format!("host-{i}.example.com")).collect();
    let checks: Vec<NameCheck> = names.iter().map(|n| check(n)).collect();
    let upstream = OwnershipResolver::new(params(dns.addr), Arc::new(Notify::new()), metrics());
    let stop = Arc::new(Notify::new());
    let task = tokio::spawn(upstream.clone().run({
        let stop = stop.clone();
        async move { stop.notified().await }
    }));
    let started = Instant::now();
    upstream.want(&checks, &[]);
    let deadline = Instant::now() + Duration::from_secs(600);
    while upstream.resolutions().len() < N {
        assert!(
            Instant::now() < deadline,
            "{}",
            upstream.resolutions().len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let first = started.elapsed();
    let queries_first = dns.query_count();

    // Reconciles after the first pass: the same names, answers cached for their TTL.
    for _ in 0..10 {
        upstream.want(&checks, &[]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let per_reconcile = (dns.query_count() - queries_first) as f64 / 10.0;

    // The planner with the verdicts of 20,000 names against without (verification off).
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let snapshot = snapshot_for(&refs, upstream.resolutions());
    let time = |mode| {
        let config = hairpin_planner::PlannerConfig {
            verify_hostnames: mode,
            ..hairpin_planner::PlannerConfig::default()
        };
        let started = Instant::now();
        for _ in 0..3 {
            let plan = hairpin_planner::desired(&snapshot, &config);
            assert_eq!(plan.load_balancers[0].hostnames.len(), N);
        }
        started.elapsed() / 3
    };
    let off = time(hairpin_planner::VerifyMode::Off);
    let resolve = time(hairpin_planner::VerifyMode::Resolve);
    println!(
        "verify cost at {N} names: first resolution {:.2} s ({} queries: A and AAAA per name, \
         {:.0} names/s, concurrency {}); lookups per later reconcile (cached): {per_reconcile}; \
         plan {:.1} ms with verdicts vs {:.1} ms without (ratio {:.2})",
        first.as_secs_f64(),
        queries_first,
        N as f64 / first.as_secs_f64(),
        OwnershipParams::default().concurrency,
        resolve.as_secs_f64() * 1000.0,
        off.as_secs_f64() * 1000.0,
        resolve.as_secs_f64() / off.as_secs_f64(),
    );
    stop.notify_one();
    task.await.unwrap();
}
