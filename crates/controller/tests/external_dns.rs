//! `--dns-mode external-dns` against the fake API server: the controller publishes hairpin's
//! DNSEndpoints (A and AAAA of the hairpin Service's ClusterIPs), follows a ClusterIP change,
//! deletes the ones no longer wanted, removes an earlier mode's Corefile block and writes no
//! kube-system ConfigMap otherwise, reads external-dns's `status.observedGeneration` into
//! `DNSEffective`, and `uninstall` removes them. Without external-dns's CRD it publishes nothing,
//! says so in an Event and the status, and keeps running.

mod support;

use std::net::IpAddr;
use std::time::Duration;

use hairpin_controller::fight::FightParams;
use hairpin_controller::{ControllerConfig, Metrics};
use hairpin_fake_apiserver::{FakeApiServer, ResourceType, object};
use hairpin_planner::{DnsMode, PlannerConfig};
use hairpin_runtime::{Readiness, Shutdown};
use kube::api::{Patch, PatchParams, PostParams};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use support::dns::TestDns;

const COREFILE: &str = ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n";
const HAIRPIN_SERVICE: &str = "hairpin-ingress-nginx-ingress-nginx-controller";
const EXT: &str = "externaldns.k8s.io/v1alpha1";
/// The load balancer's port, and so the hairpin Service's (high: the check connects to it on
/// loopback).
const PORT: u16 = 18543;

fn cluster(fake: &FakeApiServer, cidr: &str) {
    fake.dual_stack();
    fake.service_cidr(cidr);
    fake.register(
        ResourceType::new("hairpin.io", "v1alpha1", "hairpins", "Hairpin", true)
            .with_status_subresource()
            .with_generation(),
    );
    fake.create_namespace("hairpin");
    fake.apply(object(
        "v1",
        "Service",
        Some("ingress-nginx"),
        "ingress-nginx-controller",
        json!({
            "metadata": {"annotations": {"load-balancer.hetzner.cloud/uses-proxyprotocol": "true"}},
            "spec": {
                "type": "LoadBalancer",
                "ipFamilyPolicy": "PreferDualStack",
                "ipFamilies": ["IPv4", "IPv6"],
                "ports": [{"name": "https", "port": PORT, "protocol": "TCP", "targetPort": 443}]
            },
            "status": {"loadBalancer": {"ingress": [
                {"ip": "203.0.113.10", "ipMode": "VIP"},
                {"ip": "2001:db8::10", "ipMode": "VIP"}
            ]}}
        }),
    ));
    fake.apply(object(
        "networking.k8s.io/v1",
        "Ingress",
        Some("shop"),
        "shop",
        json!({
            "spec": {"rules": [{"host": "shop.example.com"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
        }),
    ));
    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("kube-system"),
        "coredns",
        json!({"data": {"Corefile": COREFILE}}),
    ));
}

struct Running {
    shutdown: Shutdown,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(self) {
        self.shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("stops")
            .unwrap();
    }
}

fn start(fake: &FakeApiServer, mode: DnsMode, dns: Option<&TestDns>) -> Running {
    start_with(fake, mode, dns, FightParams::default())
}

fn start_with(
    fake: &FakeApiServer,
    mode: DnsMode,
    dns: Option<&TestDns>,
    fight: FightParams,
) -> Running {
    let planner = PlannerConfig {
        dns_mode: mode,
        ..PlannerConfig::default()
    };
    let mut config = ControllerConfig::new(planner, "pod-a");
    config.lease = None;
    config.debounce = Duration::from_millis(50);
    config.min_retry = Duration::from_millis(50);
    config.max_retry = Duration::from_millis(400);
    config.propagation.cluster_dns = dns.map(|d| d.addr);
    config.propagation.deadline = Duration::from_secs(20);
    config.propagation.interval = Duration::from_millis(100);
    config.propagation.query_timeout = Duration::from_millis(300);
    config.fight = fight;
    let metrics = Metrics::register(&mut Registry::default());
    let ready = Readiness::new().condition("caches synced");
    let shutdown = Shutdown::new();
    let task = tokio::spawn({
        let (client, shutdown) = (fake.client(), shutdown.clone());
        async move {
            hairpin_controller::run(client, config, metrics, ready, shutdown)
                .await
                .unwrap();
        }
    });
    Running { shutdown, task }
}

fn endpoint(fake: &FakeApiServer, name: &str) -> Option<Value> {
    fake.get(EXT, "DNSEndpoint", Some("hairpin"), name)
}

fn cluster_ips(fake: &FakeApiServer) -> Vec<String> {
    fake.get("v1", "Service", Some("hairpin"), HAIRPIN_SERVICE)
        .and_then(|s| {
            s["spec"]["clusterIPs"].as_array().map(|ips| {
                ips.iter()
                    .filter_map(|ip| ip.as_str().map(str::to_owned))
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// The (record type, targets) pairs of the object's `shop.example.com` records.
fn records(object: &Value) -> Vec<(String, Vec<String>)> {
    object["spec"]["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["dnsName"] == "shop.example.com")
        .map(|e| {
            let targets = e["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect();
            (e["recordType"].as_str().unwrap_or("").to_owned(), targets)
        })
        .collect()
}

/// The records a correct publication has: A with the IPv4 ClusterIP, AAAA with the IPv6 one.
fn expected_records(ips: &[String]) -> Vec<(String, Vec<String>)> {
    let family = |v6: bool| -> Vec<String> {
        ips.iter()
            .filter(|ip| ip.contains(':') == v6)
            .cloned()
            .collect()
    };
    vec![("A".into(), family(false)), ("AAAA".into(), family(true))]
}

fn dns_effective(fake: &FakeApiServer) -> Value {
    fake.get(
        "hairpin.io/v1alpha1",
        "Hairpin",
        Some("ingress-nginx"),
        "ingress-nginx-controller",
    )
    .map_or(Value::Null, |h| {
        support::controller::condition(&h, "DNSEffective")
    })
}

fn kube_system_config_map_writes(fake: &FakeApiServer) -> usize {
    ["PUT", "POST", "PATCH", "DELETE"]
        .iter()
        .map(|m| fake.count(m, "/namespaces/kube-system/configmaps"))
        .sum()
}

#[tokio::test]
async fn external_dns_mode_publishes_follows_and_removes_dns_endpoints() {
    let fake = FakeApiServer::start().await;
    cluster(&fake, "127.31.0.0/24");
    fake.install_external_dns_crd();
    let test_dns = TestDns::start().await;

    // An earlier install in corefile mode left its block in the Corefile.
    let corefile_mode = start(&fake, DnsMode::Corefile, None);
    fake.wait_until(Duration::from_secs(10), |f| {
        f.get("v1", "ConfigMap", Some("kube-system"), "coredns")
            .is_some_and(|cm| cm["data"]["Corefile"] != COREFILE)
    })
    .await
    .expect("corefile mode wrote its block");
    corefile_mode.stop().await;
    let writes_before = kube_system_config_map_writes(&fake);

    let running = start(&fake, DnsMode::ExternalDns, Some(&test_dns));
    fake.wait_until(Duration::from_secs(10), |f| {
        let ips = cluster_ips(f);
        ips.len() == 2
            && endpoint(f, HAIRPIN_SERVICE).is_some_and(|e| records(&e) == expected_records(&ips))
    })
    .await
    .unwrap_or_else(|| panic!("published: {:?}", endpoint(&fake, HAIRPIN_SERVICE)));
    let published = endpoint(&fake, HAIRPIN_SERVICE).unwrap();
    let labels = &published["metadata"]["labels"];
    assert_eq!(labels["hairpin.io/dns-endpoint"], "true");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "hairpin");
    assert_eq!(
        published["metadata"]["annotations"]["hairpin.io/source"],
        "ingress-nginx/ingress-nginx-controller"
    );
    assert_eq!(published["spec"]["endpoints"][0]["recordTTL"], 30);
    // The earlier mode's block is removed, byte for byte; nothing else is written there.
    fake.wait_until(Duration::from_secs(10), |f| {
        f.get("v1", "ConfigMap", Some("kube-system"), "coredns")
            .is_some_and(|cm| cm["data"]["Corefile"] == COREFILE)
    })
    .await
    .expect("the corefile block is removed");
    assert_eq!(kube_system_config_map_writes(&fake), writes_before + 1);

    // external-dns has not processed it: DNSEffective says so, not a bare "Checking".
    fake.wait_until(Duration::from_secs(10), |f| {
        dns_effective(f)["reason"] == "WaitingForExternalDNS"
    })
    .await
    .unwrap_or_else(|| panic!("{:?}", dns_effective(&fake)));

    // external-dns (played by the test) publishes the records and writes its status: the
    // cluster DNS answers, and DNSEffective turns True.
    let ips: Vec<IpAddr> = cluster_ips(&fake)
        .iter()
        .map(|ip| ip.parse().unwrap())
        .collect();
    test_dns.set("shop.example.com", &ips);
    let generation = endpoint(&fake, HAIRPIN_SERVICE).unwrap()["metadata"]["generation"].clone();
    let api = hairpin_controller::dns_endpoints::api(&fake.client(), "hairpin");
    api.patch_status(
        HAIRPIN_SERVICE,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"observedGeneration": generation}})),
    )
    .await
    .unwrap();
    fake.wait_until(Duration::from_secs(15), |f| {
        dns_effective(f)["status"] == "True"
    })
    .await
    .unwrap_or_else(|| panic!("{:?}", dns_effective(&fake)));

    // The hairpin Service is recreated with new ClusterIPs: the records follow.
    let old_ips = cluster_ips(&fake);
    assert!(fake.delete("v1", "Service", Some("hairpin"), HAIRPIN_SERVICE));
    // Its old addresses are taken at once (the test runs on one thread: before the controller
    // sees the deletion), so the new Service gets others.
    fake.apply(object(
        "v1",
        "Service",
        Some("default"),
        "squatter",
        json!({"spec": {
            "ipFamilyPolicy": "PreferDualStack",
            "ipFamilies": ["IPv4", "IPv6"],
            "clusterIP": old_ips[0],
            "clusterIPs": old_ips,
            "ports": [{"port": 80, "protocol": "TCP"}]
        }}),
    ));
    fake.wait_until(Duration::from_secs(10), |f| {
        let ips = cluster_ips(f);
        ips.len() == 2
            && ips != old_ips
            && endpoint(f, HAIRPIN_SERVICE).is_some_and(|e| records(&e) == expected_records(&ips))
    })
    .await
    .unwrap_or_else(|| panic!("followed: {:?}", endpoint(&fake, HAIRPIN_SERVICE)));
    // While the Service had no ClusterIP its object was withdrawn (never left pointing at a
    // released address that another Service may get); the new one is unseen by external-dns.
    let followed = endpoint(&fake, HAIRPIN_SERVICE).unwrap();
    assert!(
        followed["status"]["observedGeneration"].is_null(),
        "{followed}"
    );

    // Someone else's object (no hairpin annotation) is never touched; hairpin's stale one is
    // deleted once its load balancer no longer needs a hairpin.
    fake.apply(object(
        EXT,
        "DNSEndpoint",
        Some("hairpin"),
        "corp-records",
        json!({
            "metadata": {"labels": {"app.kubernetes.io/managed-by": "hairpin"}},
            "spec": {"endpoints": [{"dnsName": "intranet.example.com", "recordType": "A", "targets": ["10.0.0.5"]}]}
        }),
    ));
    let mut lb = fake
        .get(
            "v1",
            "Service",
            Some("ingress-nginx"),
            "ingress-nginx-controller",
        )
        .unwrap();
    lb["metadata"]["annotations"] = json!({});
    fake.apply(lb);
    fake.wait_until(Duration::from_secs(10), |f| {
        endpoint(f, HAIRPIN_SERVICE).is_none()
    })
    .await
    .expect("the stale DNSEndpoint is deleted");
    assert!(endpoint(&fake, "corp-records").is_some());
    assert_eq!(kube_system_config_map_writes(&fake), writes_before + 1);
    running.stop().await;

    // Uninstall removes hairpin's and only hairpin's.
    fake.apply(object(
        EXT,
        "DNSEndpoint",
        Some("hairpin"),
        "hairpin-web-old",
        json!({
            "metadata": {
                "labels": {"app.kubernetes.io/managed-by": "hairpin"},
                "annotations": {"hairpin.io/source": "web/old"}
            },
            "spec": {"endpoints": [{"dnsName": "old.example.com", "recordType": "A", "targets": ["10.0.0.9"]}]}
        }),
    ));
    let report = hairpin_controller::uninstall(
        &fake.client(),
        &PlannerConfig::default(),
        "hairpin-controller",
    )
    .await;
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.dns_endpoints_deleted, ["hairpin-web-old"]);
    assert!(endpoint(&fake, "hairpin-web-old").is_none());
    assert!(endpoint(&fake, "corp-records").is_some());
    test_dns.stop().await;
}

#[tokio::test]
async fn without_the_crd_nothing_is_published_and_the_load_balancer_is_told() {
    let fake = FakeApiServer::start().await;
    cluster(&fake, "127.32.0.0/24");
    let running = start(&fake, DnsMode::ExternalDns, None);
    fake.wait_until(Duration::from_secs(10), |f| {
        f.list("events.k8s.io/v1", "Event").iter().any(|e| {
            e["reason"] == "DNSEndpointCRDMissing"
                && e["type"] == "Warning"
                && e["regarding"]["name"] == "ingress-nginx-controller"
        })
    })
    .await
    .expect("a Warning Event on the load balancer");
    let written = fake
        .wait_until(Duration::from_secs(10), |f| {
            f.get(
                "hairpin.io/v1alpha1",
                "Hairpin",
                Some("ingress-nginx"),
                "ingress-nginx-controller",
            )
            .is_some_and(|h| {
                h["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter().any(|c| {
                        c["type"] == "DNSWritten"
                            && c["status"] == "False"
                            && c["reason"] == "CRDNotInstalled"
                    })
                })
            })
        })
        .await;
    assert!(written.is_some(), "DNSWritten=False CRDNotInstalled");
    // A safe state: the hairpin Service exists, no DNS ConfigMap is written, and no request
    // goes to the absent kind after discovery said it is absent.
    assert_eq!(
        fake.get("v1", "Service", Some("hairpin"), HAIRPIN_SERVICE)
            .map(|_| ()),
        Some(())
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(kube_system_config_map_writes(&fake), 0);
    assert_eq!(fake.count("GET", "/dnsendpoints"), 0);
    assert!(!running.task.is_finished(), "the controller keeps running");
    running.stop().await;
}

/// hairpin's successful writes (creates and updates) of its DNSEndpoint so far.
fn hairpin_endpoint_writes(fake: &FakeApiServer) -> usize {
    fake.requests()
        .iter()
        .filter(|r| {
            (r.method == "PUT" || r.method == "POST")
                && r.status < 300
                && r.uri.contains("/dnsendpoints")
                && r.uri.contains("fieldManager=hairpin")
        })
        .count()
}

#[tokio::test]
async fn another_writer_that_keeps_changing_a_dns_endpoint_is_backed_off_and_named() {
    let fake = FakeApiServer::start().await;
    cluster(&fake, "127.33.0.0/24");
    fake.install_external_dns_crd();
    let fight = FightParams {
        threshold: 3,
        window: Duration::from_secs(60),
        initial_backoff: Duration::from_secs(5),
        max_backoff: Duration::from_secs(60),
    };
    let running = start_with(&fake, DnsMode::ExternalDns, None, fight);
    fake.wait_until(Duration::from_secs(10), |f| {
        let ips = cluster_ips(f);
        ips.len() == 2
            && endpoint(f, HAIRPIN_SERVICE).is_some_and(|e| records(&e) == expected_records(&ips))
    })
    .await
    .expect("published");
    let published = hairpin_endpoint_writes(&fake);

    // The other writer (a GitOps tool, say) points the records elsewhere whenever they are
    // hairpin's: until hairpin reports the fight, and 1.5 s longer (within the 5 s backoff).
    let api = hairpin_controller::dns_endpoints::api(&fake.client(), "hairpin");
    let theirs = PostParams {
        field_manager: Some("gitops-bot".into()),
        ..PostParams::default()
    };
    let fight_reported = |f: &FakeApiServer| {
        f.list("events.k8s.io/v1", "Event")
            .iter()
            .any(|e| e["reason"] == "DNSWriteReverted")
    };
    let mut adversary_writes = 0;
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    let mut until = give_up;
    while std::time::Instant::now() < until {
        if until == give_up && fight_reported(&fake) {
            until = std::time::Instant::now() + Duration::from_millis(1500);
        }
        let mut object = api.get(HAIRPIN_SERVICE).await.unwrap();
        let endpoints = object.data["spec"]["endpoints"].as_array_mut().unwrap();
        let hijacked = json!(["192.0.2.66"]);
        if endpoints[0]["targets"] != hijacked {
            endpoints[0]["targets"] = hijacked;
            if api.replace(HAIRPIN_SERVICE, &theirs, &object).await.is_ok() {
                adversary_writes += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let restores = hairpin_endpoint_writes(&fake) - published;
    println!("the other writer wrote {adversary_writes} times; hairpin restored {restores} times");
    assert!(fight_reported(&fake), "no fight reported within 20 s");
    // It writes only while the records are not its own, so once per restore, and once more
    // after the last: without the backoff hairpin answered every one of them (some 35 in 3 s
    // before this was fixed). Reverts 1 and 2 are restored at once; the 3rd starts the 5 s
    // backoff, so the other writer's last change stands.
    assert_eq!(restores, 3, "hairpin's writes are bounded by the backoff");
    assert_eq!(adversary_writes, 4, "the other writer's last change stands");

    let events: Vec<Value> = fake
        .list("events.k8s.io/v1", "Event")
        .into_iter()
        .filter(|e| e["reason"] == "DNSWriteReverted")
        .collect();
    assert_eq!(events.len(), 1, "one Warning Event: {events:?}");
    assert_eq!(events[0]["type"], "Warning");
    assert_eq!(events[0]["regarding"]["kind"], "DNSEndpoint");
    assert_eq!(events[0]["regarding"]["name"], HAIRPIN_SERVICE);
    let note = events[0]["note"].as_str().unwrap();
    assert!(
        note.contains("\"gitops-bot\""),
        "names the other writer: {note}"
    );
    assert!(note.contains(HAIRPIN_SERVICE), "{note}");

    // While backed off, the status says why the records are not hairpin's.
    fake.wait_until(Duration::from_secs(5), |f| {
        f.get(
            "hairpin.io/v1alpha1",
            "Hairpin",
            Some("ingress-nginx"),
            "ingress-nginx-controller",
        )
        .is_some_and(|h| {
            let c = support::controller::condition(&h, "DNSWritten");
            c["status"] == "False" && c["reason"] == "WriteFight"
        })
    })
    .await
    .expect("DNSWritten=False WriteFight");

    // The other writer stopped: once the backoff ends, hairpin's records are back.
    fake.wait_until(Duration::from_secs(10), |f| {
        let ips = cluster_ips(f);
        endpoint(f, HAIRPIN_SERVICE).is_some_and(|e| records(&e) == expected_records(&ips))
    })
    .await
    .expect("restored after the backoff");
    running.stop().await;
}
