//! The propagation figure, measured by the controller end to end. The controller runs against
//! the fake API server and writes the Corefile; a real DNS server on loopback stands in for
//! CoreDNS, answering the old address until it "reloads" a set delay later, then the
//! ClusterIP the fake allocated to the hairpin Service. The fake allocates ClusterIPs from a
//! range inside 127.0.0.0/8, so the controller's TCP connect to the hairpin Service stays on
//! loopback, where the test listens in the proxy's place.

mod support;

use std::net::IpAddr;
use std::time::Duration;

use hairpin_controller::propagation::PropagationParams;
use hairpin_fake_apiserver::{FakeApiServer, fixtures, object};
use serde_json::{Value, json};
use support::cluster::corefile;
use support::controller::{Running, condition};
use support::dns::TestDns;

const SINGLE_BLOCK: &str = ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n";
/// The split layout: the public names reach `.:53`, which has no `kubernetes` plugin, so
/// hairpin answers them there with the hairpin Service's ClusterIP (`template`).
const SPLIT: &str = "cluster.local:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    reload\n}\n.:53 {\n    errors\n    cache 30\n    forward . /etc/resolv.conf\n    reload\n}\n";
/// The public address the name had before hairpin.
const OLD: &str = "203.0.113.10";
const HAIRPIN_SERVICE: &str = "hairpin-ingress-nginx-ingress-nginx-controller";
/// The load balancer's port, and so the hairpin Service's (high, so the test may listen on it).
const PORT: u16 = 18443;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The cluster: one PROXY load balancer with an Ingress for `shop.example.com`, CoreDNS, the
/// Hairpin CRD, and one ready proxy pod behind the hairpin Service. `cidr` is the service
/// range, one per test (they run in parallel and listen on the ClusterIPs).
fn cluster(fake: &FakeApiServer, corefile: &str, cidr: &str) {
    fake.service_cidr(cidr);
    fake.install_hairpin_crd();
    fake.create_namespace("hairpin");
    fake.apply(fixtures::proxy_load_balancer(
        "load-balancer.hetzner.cloud/uses-proxyprotocol",
        OLD,
        json!([{"name": "https", "port": PORT, "protocol": "TCP", "targetPort": 443}]),
    ));
    fake.apply(fixtures::ingress(
        "shop",
        "shop",
        &["shop.example.com"],
        OLD,
    ));
    fake.apply(fixtures::coredns(corefile));
    fake.apply(object(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        Some("hairpin"),
        &format!("{HAIRPIN_SERVICE}-x1"),
        json!({
            "metadata": {"labels": {"kubernetes.io/service-name": HAIRPIN_SERVICE}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.244.0.7"], "conditions": {"ready": true}}]
        }),
    ));
}

fn hairpin(fake: &FakeApiServer) -> Value {
    fake.get(
        "hairpin.io/v1alpha1",
        "Hairpin",
        Some("ingress-nginx"),
        "ingress-nginx-controller",
    )
    .unwrap_or(Value::Null)
}

fn cluster_ip(fake: &FakeApiServer) -> Option<IpAddr> {
    fake.get("v1", "Service", Some("hairpin"), HAIRPIN_SERVICE)?["spec"]["clusterIP"]
        .as_str()?
        .parse()
        .ok()
}

/// A controller asking `dns` after each write.
fn start(fake: &FakeApiServer, dns: &TestDns) -> Running {
    let mut config = support::controller::config("pod-a", false);
    config.debounce = Duration::from_millis(20);
    config.propagation = PropagationParams {
        cluster_dns: Some(dns.addr),
        deadline: Duration::from_secs(30),
        interval: Duration::from_millis(50),
        query_timeout: Duration::from_millis(300),
        ..PropagationParams::default()
    };
    support::controller::start(fake, config)
}

/// The propagation histogram's `_count` and `_sum`, as Prometheus scrapes them.
fn propagation_histogram(running: &Running) -> (u64, f64) {
    let text = running.metrics_text();
    let value = |suffix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("hairpin_dns_propagation_seconds_{suffix} ")))
            .unwrap_or_else(|| panic!("no _{suffix} in\n{text}"))
            .to_owned()
    };
    (
        value("count").parse().unwrap(),
        value("sum").parse().unwrap(),
    )
}

async fn wait(fake: &FakeApiServer, what: &str, check: impl FnMut(&FakeApiServer) -> bool) {
    assert!(
        fake.wait_until(Duration::from_secs(30), check)
            .await
            .is_some(),
        "timed out waiting until {what}; Hairpin: {:#}\nCorefile:\n{}",
        hairpin(fake),
        corefile(fake)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_measures_propagation_from_its_write_to_the_first_right_answer() {
    let fake = FakeApiServer::start().await;
    cluster(&fake, SINGLE_BLOCK, "127.77.0.0/16");
    let dns = TestDns::start().await;
    dns.set("shop.example.com", &[ip(OLD)]);
    let running = start(&fake, &dns);

    // The write, and the status it starts with: written, not yet effective.
    wait(&fake, "the Hairpin has its ClusterIP", |f| {
        corefile(f).contains("shop.example.com") && hairpin(f)["status"]["clusterIP"].is_string()
    })
    .await;
    let allocated = cluster_ip(&fake).expect("the fake allocated a ClusterIP");
    assert_eq!(
        hairpin(&fake)["status"]["clusterIP"],
        allocated.to_string(),
        "the Hairpin carries the ClusterIP read back from the created Service"
    );
    let h = hairpin(&fake);
    assert_eq!(h["status"]["dns"], "Written", "{h:#}");
    assert_eq!(condition(&h, "DNSWritten")["status"], "True");
    assert_eq!(condition(&h, "DNSEffective")["status"], "Unknown");
    assert_eq!(condition(&h, "DNSEffective")["reason"], "Checking");
    assert_eq!(condition(&h, "Ready")["status"], "Unknown");
    assert!(h["status"]["propagationSeconds"].is_null(), "{h:#}");
    // The proxy, in the place of the hairpin Service (its ClusterIP is a loopback address).
    let proxy = tokio::net::TcpListener::bind((allocated, PORT))
        .await
        .unwrap();

    // CoreDNS "reloads" `delay` after the status above was written (which is after the
    // controller noted its write), so the figure cannot be below `delay`.
    let delay = Duration::from_millis(1200);
    tokio::time::sleep(delay).await;
    let before_switch = dns
        .queries()
        .iter()
        .filter(|q| q.starts_with("shop.example.com A "))
        .count();
    assert!(
        before_switch >= 2,
        "asked repeatedly while the old address was answered: {:?}",
        dns.queries()
    );
    assert_eq!(hairpin(&fake)["status"]["dns"], "Written");
    dns.set("shop.example.com", &[allocated]);

    wait(&fake, "the DNS is effective", |f| {
        hairpin(f)["status"]["dns"] == "Effective"
    })
    .await;
    let h = hairpin(&fake);
    let measured = h["status"]["propagationSeconds"].as_f64().unwrap();
    println!(
        "propagation measured by the controller: {measured}s (CoreDNS reloaded {delay:?} after the write)"
    );
    assert!(
        measured >= delay.as_secs_f64() && measured < delay.as_secs_f64() + 10.0,
        "measured {measured}s for a reload {delay:?} after the write"
    );
    assert_eq!(condition(&h, "DNSEffective")["status"], "True");
    assert_eq!(condition(&h, "DNSEffective")["reason"], "Answered");
    assert!(
        condition(&h, "DNSEffective")["message"]
            .as_str()
            .unwrap()
            .contains(&allocated.to_string()),
        "{h:#}"
    );
    assert_eq!(condition(&h, "ProxyReady")["status"], "True");
    assert_eq!(condition(&h, "ProxyReady")["reason"], "Connected");
    assert_eq!(condition(&h, "Ready")["status"], "True", "{h:#}");
    let (count, sum) = propagation_histogram(&running);
    assert_eq!(count, 1, "one measured propagation");
    assert!(
        (sum - measured).abs() < 0.01,
        "the histogram holds the figure in the status: {sum} vs {measured}"
    );
    // The connect reached the stand-in proxy.
    let accepted = tokio::time::timeout(Duration::from_secs(1), proxy.accept()).await;
    assert!(
        accepted.is_ok(),
        "the controller connected to the hairpin Service"
    );
    running.stop().await;
    dns.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_use_the_allocated_cluster_ip_and_follow_it_when_the_service_is_recreated() {
    let fake = FakeApiServer::start().await;
    cluster(&fake, SPLIT, "127.78.0.0/16");
    let dns = TestDns::start().await;
    dns.set("shop.example.com", &[ip(OLD)]);
    let running = start(&fake, &dns);

    // The answer block in `.:53` is written once the fake has allocated the ClusterIP, and
    // carries that address; the check expects it too.
    wait(&fake, "the answers carry the ClusterIP", |f| {
        cluster_ip(f).is_some_and(|ip| corefile(f).contains(&format!("IN A {ip}\"")))
    })
    .await;
    let first = cluster_ip(&fake).unwrap();
    let text = corefile(&fake);
    let root = &text[text.find(".:53 {").unwrap()..];
    assert!(
        root.contains("template IN A {") && root.contains(&format!("IN A {first}\"")),
        "{text}"
    );
    let proxy = tokio::net::TcpListener::bind((first, PORT)).await.unwrap();
    dns.set("shop.example.com", &[first]);
    wait(&fake, "effective with the first ClusterIP", |f| {
        hairpin(f)["status"]["dns"] == "Effective"
            && hairpin(f)["status"]["clusterIP"] == first.to_string()
    })
    .await;
    drop(proxy);

    // Someone deletes the hairpin Service, and its address goes to another Service before
    // the controller recreates it: the new Service gets another ClusterIP.
    assert!(fake.delete("v1", "Service", Some("hairpin"), HAIRPIN_SERVICE));
    fake.apply(object(
        "v1",
        "Service",
        Some("default"),
        "squatter",
        json!({"spec": {"clusterIP": first.to_string(), "ports": [{"port": 80}]}}),
    ));
    wait(&fake, "the Service is recreated", |f| {
        cluster_ip(f).is_some_and(|ip| ip != first)
    })
    .await;
    let second = cluster_ip(&fake).unwrap();
    let proxy = tokio::net::TcpListener::bind((second, PORT)).await.unwrap();
    wait(
        &fake,
        "the answers and the status follow the new ClusterIP",
        |f| {
            let text = corefile(f);
            text.contains(&format!("IN A {second}\""))
                && !text.contains(&format!("IN A {first}\""))
                && hairpin(f)["status"]["clusterIP"] == second.to_string()
        },
    )
    .await;
    // The check now expects the new address: the old one is not effective any more.
    wait(
        &fake,
        "the old address is no longer taken as effective",
        |f| hairpin(f)["status"]["dns"] == "Written",
    )
    .await;
    dns.set("shop.example.com", &[second]);
    wait(&fake, "effective with the new ClusterIP", |f| {
        hairpin(f)["status"]["dns"] == "Effective"
    })
    .await;
    let h = hairpin(&fake);
    assert!(
        condition(&h, "DNSEffective")["message"]
            .as_str()
            .unwrap()
            .contains(&second.to_string()),
        "{h:#}"
    );
    assert_eq!(condition(&h, "Ready")["status"], "True", "{h:#}");
    drop(proxy);
    running.stop().await;
    dns.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cluster_dns_the_check_asks_the_cluster_dns_service_whatever_its_name() {
    let fake = FakeApiServer::start().await;
    cluster(&fake, SINGLE_BLOCK, "127.79.0.0/16");
    // RKE2's cluster DNS Service; there is no kube-system/kube-dns. Its ClusterIP is a
    // loopback address nothing listens on, so the check's queries stay on this host.
    fake.apply(object(
        "v1",
        "Service",
        Some("kube-system"),
        "rke2-coredns-rke2-coredns",
        json!({
            "metadata": {"labels": {"k8s-app": "kube-dns"}},
            "spec": {
                "clusterIP": "127.79.255.10",
                "selector": {"k8s-app": "kube-dns"},
                "ports": [
                    {"name": "udp-53", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "tcp-53", "port": 53, "protocol": "TCP", "targetPort": 53}
                ]
            }
        }),
    ));
    let mut config = support::controller::config("pod-a", false);
    config.propagation = PropagationParams {
        cluster_dns: None,
        deadline: Duration::from_secs(30),
        interval: Duration::from_millis(50),
        query_timeout: Duration::from_millis(300),
        ..PropagationParams::default()
    };
    let running = support::controller::start(&fake, config);
    wait(
        &fake,
        "the check runs against the cluster DNS Service",
        |f| {
            let h = hairpin(f);
            condition(&h, "DNSWritten")["status"] == "True"
                && condition(&h, "DNSEffective")["reason"] == "Checking"
        },
    )
    .await;
    let h = hairpin(&fake);
    assert!(
        condition(&h, "DNSEffective")["message"]
            .as_str()
            .is_some_and(|m| m.contains("asking the cluster DNS")),
        "{h:#}"
    );
    running.stop().await;
}
