//! The native cure's state transitions over the fake API server (the real kube-apiserver and
//! kube-proxy run the cure end to end in `crates/hairpin/tests/native_cure.rs`): the problem
//! proven before any write (a request without a header answered: not needed, nothing
//! written), the cure after it (several answers in a row), an early put-back on a definite
//! failure, a dropped `ipMode` (API server < 1.30 or gate off) detected and not retried until
//! the server changes, a proven cure probed again at start, a status fight backed off; and the
//! faults: a 409 on the status subresource and a 404 on the read before it are retried, an API
//! outage reverts nothing. The load balancer's address is on loopback (`127.0.0.4x`, one per
//! test, port 8080) where a stand-in [`Receiver`] answers, so no probe leaves this machine.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use hairpin_fake_apiserver::fixtures::{self, coredns};
use hairpin_fake_apiserver::{FakeApiServer, Fault, FaultKind};
use hairpin_planner::CureMode;
use serde_json::{Value, json};
use support::cluster::corefile;
use support::controller::{config, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HOST: &str = "shop.example.com";
/// The load balancer's PROXY port (unprivileged: the stand-in receiver binds it).
const PORT: u16 = 8080;
const COREFILE: &str = ".:53 {\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n";
const SVC: &str = "/api/v1/namespaces/ingress-nginx/services/ingress-nginx-controller";

/// What answers at the load balancer's address from inside the cluster, on loopback: while
/// `answer` is off, it closes every connection without a byte, as nginx with `proxy_protocol`
/// does to a request without a header (the short-circuit to the ingress); on, it answers
/// `HTTP/1.1 200 OK` (the path through the real load balancer, which writes the header).
/// Stopped, the address refuses connections.
struct Receiver {
    answer: Arc<AtomicBool>,
    /// Connections answered, and closed without an answer.
    answered: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start(ip: &str, answer: bool) -> Self {
        let listener = tokio::net::TcpListener::bind((ip, PORT)).await.unwrap();
        let flag = Arc::new(AtomicBool::new(answer));
        let (answered, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let task = tokio::spawn({
            let (flag, answered, closed) = (flag.clone(), answered.clone(), closed.clone());
            async move {
                while let Ok((mut conn, _)) = listener.accept().await {
                    let mut request = [0u8; 512];
                    let _ =
                        tokio::time::timeout(Duration::from_secs(1), conn.read(&mut request)).await;
                    if flag.load(Ordering::SeqCst) {
                        let _ = conn
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                            .await;
                        answered.fetch_add(1, Ordering::SeqCst);
                    } else {
                        closed.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        });
        Receiver {
            answer: flag,
            answered,
            closed,
            task,
        }
    }

    /// A proxy load balancer honouring `ipMode`: answers exactly while the status says
    /// `Proxy` (kube-proxy then sends the traffic to the real load balancer).
    fn follow(&self, fake: Arc<FakeApiServer>, ip: &'static str) -> tokio::task::JoinHandle<()> {
        let flag = self.answer.clone();
        tokio::spawn(async move {
            loop {
                let proxy = ip_mode_of(&fake, ip) == "Proxy";
                flag.store(proxy, Ordering::SeqCst);
                fake.wait_until(Duration::from_secs(1), |f| {
                    (ip_mode_of(f, ip) == "Proxy") != proxy
                })
                .await;
            }
        })
    }

    fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }

    fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    /// Stops listening: the address refuses connections from now on.
    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

fn seed(fake: &FakeApiServer, ip: &str) {
    fake.create_namespace("hairpin");
    fake.apply(fixtures::proxy_load_balancer(
        "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol",
        ip,
        json!([{"name": "http", "port": PORT, "protocol": "TCP", "targetPort": 80}]),
    ));
    fake.apply(fixtures::ingress("shop", "shop", &[HOST], ip));
    fake.apply(coredns(COREFILE));
}

fn service(fake: &FakeApiServer) -> Value {
    fake.get(
        "v1",
        "Service",
        Some("ingress-nginx"),
        "ingress-nginx-controller",
    )
    .unwrap_or_default()
}

/// The `ipMode` of the status IP `ip` (`null` when unset).
fn ip_mode_of(fake: &FakeApiServer, ip: &str) -> Value {
    service(fake)["status"]["loadBalancer"]["ingress"]
        .as_array()
        .and_then(|points| points.iter().find(|p| p["ip"] == ip))
        .map(|p| p["ipMode"].clone())
        .unwrap_or_default()
}

fn ip_mode(fake: &FakeApiServer) -> Value {
    service(fake)["status"]["loadBalancer"]["ingress"][0]["ipMode"].clone()
}

fn entry(fake: &FakeApiServer) -> Value {
    fake.get("v1", "ConfigMap", Some("hairpin"), "hairpin-native")
        .and_then(|cm| cm["data"]["native.json"].as_str().map(str::to_owned))
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .map(|r| r["loadBalancers"]["ingress-nginx/ingress-nginx-controller"].clone())
        .unwrap_or_default()
}

fn record_state(fake: &FakeApiServer) -> Value {
    entry(fake)["state"].clone()
}

fn status_puts(fake: &FakeApiServer) -> Vec<u16> {
    fake.requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.uri.contains(&format!("{SVC}/status")))
        .map(|r| r.status)
        .collect()
}

/// The Events of `reason` (their notes).
fn events(fake: &FakeApiServer, reason: &str) -> Vec<String> {
    fake.list("events.k8s.io/v1", "Event")
        .iter()
        .filter(|e| e["reason"] == reason)
        .filter_map(|e| e["note"].as_str().map(str::to_owned))
        .collect()
}

fn auto_config() -> hairpin_controller::ControllerConfig {
    let mut cfg = config("pod-a", false);
    cfg.planner.cure = CureMode::Auto;
    cfg.native.deadline = Duration::from_millis(600);
    cfg.native.interval = Duration::from_millis(100);
    cfg.native.timeout = Duration::from_millis(200);
    cfg
}

/// The fake API server seeded with the load balancer on `ip` (a receiver that wants a
/// header there), and the controller started with the native cure forced: the unanswered
/// probe leaves `ipMode: Proxy` in place.
async fn start_native(ip: &str) -> (FakeApiServer, Receiver, support::controller::Running) {
    let fake = FakeApiServer::start().await;
    seed(&fake, ip);
    let receiver = Receiver::start(ip, false).await;
    let mut cfg = auto_config();
    cfg.planner.cure = CureMode::Native;
    let running = start(&fake, cfg);
    (fake, receiver, running)
}

/// Waits until the cure is recorded `failed` and `ipMode` is back to `VIP`.
async fn assert_failed_and_reverted(fake: &FakeApiServer) {
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| record_state(f) == "failed"
            && ip_mode(f) == "VIP")
            .await
            .is_some(),
        "record {:?}, ipMode {:?}",
        entry(fake),
        ip_mode(fake)
    );
}

/// Uninstalls hairpin with the default planner configuration; asserts nothing failed.
async fn uninstall(fake: &FakeApiServer) -> hairpin_controller::UninstallReport {
    let report = hairpin_controller::uninstall(
        &fake.client(),
        &hairpin_planner::PlannerConfig::default(),
        "hairpin-controller",
    )
    .await;
    assert!(report.failures.is_empty(), "{report:?}");
    report
}

/// `ipMode: Proxy` in the load balancer's status, and hairpin's record of a native cure of it:
/// `entry` (its state and what goes with it) with the Service's uid and original status.
fn recorded_cure(fake: &FakeApiServer, ip: &str, entry: Value) {
    let mut svc = service(fake);
    svc["status"]["loadBalancer"]["ingress"][0]["ipMode"] = json!("Proxy");
    fake.apply(svc.clone());
    let mut entry = entry;
    entry["uid"] = svc["metadata"]["uid"].clone();
    entry["original"] = json!([{"ip": ip, "ipMode": "VIP"}]);
    let record = json!({"loadBalancers": {"ingress-nginx/ingress-nginx-controller": entry}});
    fake.apply(hairpin_fake_apiserver::object(
        "v1",
        "ConfigMap",
        Some("hairpin"),
        "hairpin-native",
        json!({
            "metadata": {"labels": {"app.kubernetes.io/managed-by": "hairpin"},
                         "annotations": {"hairpin.io/created-by": "hairpin"}},
            "data": {"native.json": record.to_string()}
        }),
    ));
}

#[tokio::test]
async fn status_conflicts_are_retried_and_an_unanswered_probe_puts_ip_mode_back() {
    let fake = FakeApiServer::start().await;
    seed(&fake, "127.0.0.42");
    let receiver = Receiver::start("127.0.0.42", false).await;
    // The read before the write finds nothing once, then another writer wins the race once.
    fake.fail_next("GET", SVC, 1, 404);
    fake.fail_next("PUT", &format!("{SVC}/status"), 1, 409);
    let running = start(&fake, auto_config());
    // Make before break: the DNS cure is in place while native is tried.
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| corefile(f).contains(HOST))
            .await
            .is_some()
    );
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| ip_mode(f) == "Proxy")
            .await
            .is_some(),
        "{:?}",
        status_puts(&fake)
    );
    let puts = status_puts(&fake);
    assert_eq!(&puts[..2], &[409, 200], "{puts:?}");
    // The problem was shown before the write: every attempt closed without an answer.
    assert!(receiver.closed() >= 3, "{}", receiver.closed());
    // Nothing answers on 127.0.0.42:8080: not proven; ipMode back as it was, DNS kept.
    assert_failed_and_reverted(&fake).await;
    assert!(corefile(&fake).contains(HOST));
    // A failed cure is not tried again before its retry time: no new status write.
    let before = status_puts(&fake).len();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(status_puts(&fake).len(), before);
    assert_eq!(ip_mode(&fake), "VIP");
    assert_eq!(entry(&fake)["failures"], 1);
    running.stop().await;
    receiver.stop().await;
}

#[tokio::test]
async fn an_api_outage_reverts_nothing_and_uninstall_restores() {
    // Native forced: ipMode stays whatever the probe says.
    let (fake, receiver, running) = start_native("127.0.0.43").await;
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| ip_mode(f) == "Proxy"
            && !corefile(f).contains(HOST))
            .await
            .is_some()
    );
    fake.go_down();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let reconciles = running.metrics.reconciles.get();
    fake.come_back(true);
    // Back: the caches listed again (their history compacted) and a reconcile ran on them.
    let seen = fake
        .wait_until(Duration::from_secs(30), |_| {
            running.metrics.reconciles.get() > reconciles
        })
        .await;
    assert!(seen.is_some(), "no reconcile after the API came back");
    assert_eq!(ip_mode(&fake), "Proxy");
    assert!(!corefile(&fake).contains(HOST));
    running.stop().await;
    let report = uninstall(&fake).await;
    assert_eq!(
        report.ip_modes_restored,
        ["ingress-nginx/ingress-nginx-controller"]
    );
    assert_eq!(ip_mode(&fake), "VIP");
    assert_eq!(corefile(&fake), COREFILE);
    receiver.stop().await;
}

/// A new leader adopts a cure its predecessor left `probing` (its probe died with it): the
/// probe runs again here, and its verdict is acted on.
#[tokio::test]
async fn a_cure_left_probing_by_an_earlier_leader_is_probed_again() {
    let fake = FakeApiServer::start().await;
    seed(&fake, "127.0.0.44");
    let receiver = Receiver::start("127.0.0.44", false).await;
    recorded_cure(
        &fake,
        "127.0.0.44",
        json!({"state": "probing", "since": "2026-11-27T10:00:00Z"}),
    );
    assert_eq!(ip_mode(&fake), "Proxy");
    let running = start(&fake, auto_config());
    // Nothing answers: the adopted cure fails, ipMode goes back, DNS stays.
    assert_failed_and_reverted(&fake).await;
    assert!(corefile(&fake).contains(HOST));
    running.stop().await;
    receiver.stop().await;
}

/// Rewrites the load balancer's status as the field manager `manager`: a hostname added, and
/// every IP's `ipMode` set to `ip_mode` (`None`: as it is).
async fn rewrite_status(fake: &FakeApiServer, manager: &str, ip_mode: Option<&str>) {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{Api, PostParams};
    let services: Api<Service> = Api::namespaced(fake.client(), "ingress-nginx");
    let mut svc = services.get("ingress-nginx-controller").await.unwrap();
    let points = svc
        .status
        .as_mut()
        .and_then(|s| s.load_balancer.as_mut())
        .and_then(|lb| lb.ingress.as_mut())
        .unwrap();
    for point in points.iter_mut() {
        point.hostname = Some("lb.example.net".into());
        if let Some(mode) = ip_mode {
            point.ip_mode = Some(mode.into());
        }
    }
    let params = PostParams {
        field_manager: Some(manager.into()),
        ..PostParams::default()
    };
    services
        .replace_status("ingress-nginx-controller", &params, &svc)
        .await
        .unwrap();
}

/// Item 7: a cloud controller upgraded to one that computes `ipMode` sets `Proxy` itself on a
/// status hairpin had put back (its probe failed): hairpin steps back. Its entry goes, it
/// writes the status no more, an Event names the writer, and uninstall leaves the status as
/// that writer made it.
#[tokio::test]
async fn a_cloud_controller_that_sets_ip_mode_itself_takes_over() {
    let fake = FakeApiServer::start().await;
    seed(&fake, "127.0.0.45");
    let receiver = Receiver::start("127.0.0.45", false).await;
    let running = start(&fake, auto_config());
    assert_failed_and_reverted(&fake).await;
    rewrite_status(
        &fake,
        "digitalocean-cloud-controller-manager",
        Some("Proxy"),
    )
    .await;
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| record_state(f).is_null())
            .await
            .is_some(),
        "record {:?}",
        entry(&fake)
    );
    let puts = status_puts(&fake).len();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(status_puts(&fake).len(), puts, "no more status writes");
    assert_eq!(ip_mode(&fake), "Proxy");
    let notes = events(&fake, "IpModeHandedOver");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("digitalocean-cloud-controller-manager")),
        "{notes:?}"
    );
    running.stop().await;
    let report = uninstall(&fake).await;
    assert!(report.ip_modes_restored.is_empty(), "{report:?}");
    assert_eq!(ip_mode(&fake), "Proxy");
    receiver.stop().await;
}

/// Item 7: another writer that only touches the status list while hairpin's `Proxy` is on it
/// (`kubectl edit --subresource=status` adding a hostname) takes nothing over: hairpin keeps
/// its entry, and uninstall puts `VIP` back (before, it forgot its `Proxy` and left it).
#[tokio::test]
async fn a_writer_that_only_touches_the_list_takes_nothing_over_and_uninstall_restores() {
    // Native forced: the unanswered probe leaves ipMode: Proxy in place.
    let (fake, receiver, running) = start_native("127.0.0.54").await;
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| ip_mode(f) == "Proxy"
            && record_state(f) == "failed")
            .await
            .is_some(),
        "record {:?}, ipMode {:?}",
        entry(&fake),
        ip_mode(&fake)
    );
    let reconciles = running.metrics.reconciles.get();
    rewrite_status(&fake, "kubectl-edit", None).await;
    // The window ends on a reconcile after the other writer's change, not on a guess of how
    // long one takes.
    let seen = fake
        .wait_until(Duration::from_secs(30), |_| {
            running.metrics.reconciles.get() > reconciles
        })
        .await;
    assert!(
        seen.is_some(),
        "no reconcile after the status was rewritten"
    );
    assert_eq!(record_state(&fake), "failed", "{:?}", entry(&fake));
    assert!(events(&fake, "IpModeHandedOver").is_empty());
    assert_eq!(ip_mode(&fake), "Proxy");
    running.stop().await;
    let report = uninstall(&fake).await;
    assert_eq!(
        report.ip_modes_restored,
        ["ingress-nginx/ingress-nginx-controller"]
    );
    assert_eq!(ip_mode(&fake), "VIP");
    receiver.stop().await;
}

/// kube-proxy's DaemonSet running `version` (the API server counts its generation).
fn kube_proxy(version: &str) -> Value {
    hairpin_fake_apiserver::object(
        "apps/v1",
        "DaemonSet",
        Some("kube-system"),
        "kube-proxy",
        json!({
            "spec": {"selector": {"matchLabels": {"k8s-app": "kube-proxy"}},
                     "template": {"metadata": {"labels": {"k8s-app": "kube-proxy"}},
                                  "spec": {"containers": [{"name": "kube-proxy",
                                      "image": format!("registry.k8s.io/kube-proxy:{version}")}]}}}
        }),
    )
}

/// Item 2: a load balancer whose address answers a request without a header before any
/// change needs no cure here: no status write ever, the record and an Event say "not
/// needed" with the reason, and the DNS cure stays.
#[tokio::test]
async fn an_address_answered_without_a_header_is_not_needed_and_never_written() {
    let fake = FakeApiServer::start().await;
    seed(&fake, "127.0.0.46");
    let receiver = Receiver::start("127.0.0.46", true).await;
    let running = start(&fake, auto_config());
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| record_state(f) == "not-needed")
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    let reason = entry(&fake)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        reason.starts_with("answered without a header before any change")
            && reason.contains("127.0.0.46:8080 answered 3 of 3"),
        "{reason}"
    );
    assert!(status_puts(&fake).is_empty(), "{:?}", status_puts(&fake));
    assert_eq!(ip_mode(&fake), "VIP");
    assert!(corefile(&fake).contains(HOST));
    let notes = events(&fake, "NativeCureNotNeeded");
    assert!(notes.iter().any(|n| n.contains("not needed")), "{notes:?}");
    assert_eq!(receiver.answered(), 3);
    running.stop().await;
    receiver.stop().await;
}

/// Item 2: a proxy load balancer (the address answers exactly while the status says
/// `Proxy`): the problem is shown first (every attempt closed), then `ipMode: Proxy` is
/// written, and native is proven only after several answers in a row; then the DNS rule goes.
#[tokio::test]
async fn a_proxy_load_balancer_is_proven_by_several_answers_after_the_write() {
    let fake = Arc::new(FakeApiServer::start().await);
    seed(&fake, "127.0.0.47");
    let receiver = Receiver::start("127.0.0.47", false).await;
    let follow = receiver.follow(fake.clone(), "127.0.0.47");
    let running = start(&fake, auto_config());
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| record_state(f) == "proven"
            && !corefile(f).contains(HOST))
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    // Closed three times before the write (the baseline), answered three times after it.
    assert!(receiver.closed() >= 3, "{}", receiver.closed());
    assert!(receiver.answered() >= 3, "{}", receiver.answered());
    let reason = entry(&fake)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("3 times in a row"), "{reason}");
    assert_eq!(status_puts(&fake), [200]);
    assert_eq!(ip_mode(&fake), "Proxy");
    running.stop().await;
    follow.abort();
    receiver.stop().await;
}

/// Item 2: a failure that is definite (the address refuses connections once kube-proxy
/// dropped its rule) puts the status back at once, long before the probe's deadline.
#[tokio::test]
async fn a_definite_failure_puts_the_status_back_before_the_deadline() {
    let fake = Arc::new(FakeApiServer::start().await);
    seed(&fake, "127.0.0.48");
    let receiver = Receiver::start("127.0.0.48", false).await;
    let mut cfg = auto_config();
    cfg.native.deadline = Duration::from_secs(60);
    let running = start(&fake, cfg);
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| ip_mode(f) == "Proxy")
            .await
            .is_some()
    );
    // What a VIP load balancer does once its rule is gone: nothing at the address.
    receiver.stop().await;
    let written = std::time::Instant::now();
    assert_failed_and_reverted(&fake).await;
    let reason = entry(&fake)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("3 times in a row"), "{reason}");
    let notes = events(&fake, "IpModeRestored");
    assert!(
        notes.iter().any(|n| n.contains("a definite failure")),
        "{notes:?}"
    );
    println!(
        "put back {:.2} s after the address stopped answering (deadline 60 s)",
        written.elapsed().as_secs_f64()
    );
    assert!(corefile(&fake).contains(HOST));
    running.stop().await;
}

/// Item 3: an API server that drops `ipMode` (older than 1.30, or the gate off): the write
/// is read back, recorded `unsupported` with the server's version, explained in an Event,
/// and not made again until the server's version changes; then it is.
#[tokio::test]
async fn a_dropped_ip_mode_is_unsupported_until_the_server_changes() {
    let fake = FakeApiServer::start().await;
    fake.set_ip_mode_gate(false);
    fake.set_version("v1.29.9");
    seed(&fake, "127.0.0.49");
    let receiver = Receiver::start("127.0.0.49", false).await;
    let mut cfg = auto_config();
    cfg.native.version_every = Duration::from_millis(200);
    let running = start(&fake, cfg);
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| record_state(f)
            == "unsupported")
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    assert_eq!(entry(&fake)["serverVersion"], "v1.29.9");
    assert!(ip_mode(&fake).is_null(), "{:?}", ip_mode(&fake));
    assert_eq!(status_puts(&fake), [200]);
    let notes = events(&fake, "IpModeDropped");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("v1.29.9") && n.contains("LoadBalancerIPMode")),
        "{notes:?}"
    );
    assert!(corefile(&fake).contains(HOST));
    // No retry loop: several version reads later, still the one write.
    let reads = fake.count("GET", "/version");
    let read_again = fake
        .wait_until(Duration::from_secs(10), |f| {
            f.count("GET", "/version") >= reads + 3
        })
        .await;
    assert!(read_again.is_some(), "the server's version is read again");
    let log: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.method != "GET" || r.uri == "/version")
        .map(|r| format!("{} {} {}", r.method, r.uri, r.status))
        .collect();
    assert_eq!(status_puts(&fake), [200], "{log:#?}\n{:?}", entry(&fake));
    // The API server upgraded: tried again (the problem proven first), and now it holds.
    fake.set_ip_mode_gate(true);
    fake.set_version("v1.31.14");
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| ip_mode(f) == "Proxy")
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    assert_eq!(status_puts(&fake), [200, 200]);
    running.stop().await;
    receiver.stop().await;
}

/// Item 4: a proven cure is not trusted by a controller that did not prove it: at start it
/// goes back to `probing` (its DNS rules come back) and is probed again; the address still
/// answers through the load balancer, so it is proven again and the DNS rule goes.
#[tokio::test]
async fn a_proven_cure_is_probed_again_at_start_before_it_is_trusted() {
    let fake = Arc::new(FakeApiServer::start().await);
    seed(&fake, "127.0.0.50");
    recorded_cure(
        &fake,
        "127.0.0.50",
        json!({"state": "proven", "since": k8s_openapi::jiff::Timestamp::now().to_string(),
               "reason": "127.0.0.50:8080 answered"}),
    );
    let receiver = Receiver::start("127.0.0.50", false).await;
    let follow = receiver.follow(fake.clone(), "127.0.0.50");
    let running = start(&fake, auto_config());
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| record_state(f) == "proven"
            && entry(f)["reason"]
                .as_str()
                .is_some_and(|r| r.contains("3 times in a row")))
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    // It was `probing` meanwhile: the record said so, and the DNS rule was back.
    let probing_written = fake.requests().iter().any(|r| {
        r.uri.contains("/configmaps/hairpin-native")
            && r.body.as_ref().is_some_and(|b| {
                b.to_string()
                    .contains("probed again at the controller's start")
            })
    });
    assert!(probing_written);
    assert!(receiver.answered() >= 3, "{}", receiver.answered());
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| !corefile(f).contains(HOST))
            .await
            .is_some()
    );
    assert_eq!(ip_mode(&fake), "Proxy");
    assert!(status_puts(&fake).is_empty(), "{:?}", status_puts(&fake));
    running.stop().await;
    follow.abort();
    receiver.stop().await;
}

/// Item 4: the same at start when kube-proxy no longer honours `ipMode` (the address is
/// short-circuited: no answer): back to the DNS cure, `ipMode` put back; and a kube-proxy
/// DaemonSet change later has a proven cure probed again.
#[tokio::test]
async fn a_proven_cure_that_no_longer_works_at_start_or_after_a_data_plane_change_goes_back_to_dns()
{
    // At start.
    let fake = FakeApiServer::start().await;
    seed(&fake, "127.0.0.51");
    recorded_cure(
        &fake,
        "127.0.0.51",
        json!({"state": "proven", "since": k8s_openapi::jiff::Timestamp::now().to_string(),
               "reason": "127.0.0.51:8080 answered"}),
    );
    assert!(!corefile(&fake).contains(HOST));
    let receiver = Receiver::start("127.0.0.51", false).await;
    let running = start(&fake, auto_config());
    assert_failed_and_reverted(&fake).await;
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| corefile(f).contains(HOST))
            .await
            .is_some()
    );
    running.stop().await;
    receiver.stop().await;

    // After kube-proxy's DaemonSet changed, once the change has settled.
    let fake = Arc::new(FakeApiServer::start().await);
    seed(&fake, "127.0.0.52");
    fake.apply(kube_proxy("v1.31.14"));
    let receiver = Receiver::start("127.0.0.52", false).await;
    let follow = receiver.follow(fake.clone(), "127.0.0.52");
    let mut cfg = auto_config();
    cfg.native.settle = Duration::from_millis(300);
    let running = start(&fake, cfg);
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| record_state(f) == "proven")
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    follow.abort();
    receiver.answer.store(false, Ordering::SeqCst);
    fake.apply(kube_proxy("v1.32.0"));
    assert_failed_and_reverted(&fake).await;
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| corefile(f).contains(HOST))
            .await
            .is_some()
    );
    running.stop().await;
    receiver.stop().await;
}

/// A Node whose kubelet (and kube-proxy, where the kubelet reports it) runs `version`.
fn node(name: &str, version: &str) -> Value {
    hairpin_fake_apiserver::object(
        "v1",
        "Node",
        None,
        name,
        json!({"status": {"nodeInfo": {"kubeletVersion": version, "kubeProxyVersion": version}}}),
    )
}

/// Item 4: the Nodes' kubelet and kube-proxy versions are part of the data plane (a node pool
/// upgraded, a kube-proxy that runs as no DaemonSet): a proven cure is probed again once a
/// Node's version changed and the change settled, and put back when no longer honoured.
#[tokio::test]
async fn a_changed_node_version_probes_a_proven_cure_again() {
    let fake = Arc::new(FakeApiServer::start().await);
    seed(&fake, "127.0.0.57");
    fake.apply(node("node-a", "v1.31.14"));
    fake.apply(node("node-b", "v1.31.14"));
    let receiver = Receiver::start("127.0.0.57", false).await;
    let follow = receiver.follow(fake.clone(), "127.0.0.57");
    let mut cfg = auto_config();
    cfg.native.settle = Duration::from_millis(300);
    let running = start(&fake, cfg);
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| record_state(f) == "proven"
            && entry(f)["dataPlane"]
                .as_str()
                .is_some_and(|d| d.contains("kubelet@v1.31.14")))
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    // kube-proxy stops honouring ipMode with the upgrade of one Node (the next scheduled
    // re-probe is 30 minutes away: only the data-plane change probes again).
    follow.abort();
    receiver.answer.store(false, Ordering::SeqCst);
    fake.apply(node("node-b", "v1.32.0"));
    assert_failed_and_reverted(&fake).await;
    let data_plane = entry(&fake)["dataPlane"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        data_plane.contains("kubelet@v1.31.14,v1.32.0"),
        "{data_plane}"
    );
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| corefile(f).contains(HOST))
            .await
            .is_some()
    );
    running.stop().await;
    receiver.stop().await;
}

/// Item 6: per IP. A dual-stack load balancer whose IPv6 address the controller cannot reach
/// (here `::1` on a port nothing listens on: refused, as an address with no route is
/// unreachable) is no longer left untried: the IPv4 address the controller reaches is proven
/// and set to `Proxy`; the IPv6 one is never written, stays `VIP`, is recorded as skipped, and
/// the names keep the DNS cure (they resolve to both).
#[tokio::test]
async fn an_ip_the_controller_cannot_reach_stays_vip_and_the_others_are_cured() {
    let v6 = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, PORT));
    if let Ok(Ok(_)) =
        tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(v6)).await
    {
        panic!("something listens on {v6}: this test needs that port refused");
    }
    let fake = Arc::new(FakeApiServer::start().await);
    fake.install_hairpin_crd();
    seed(&fake, "127.0.0.58");
    let mut svc = service(&fake);
    svc["status"]["loadBalancer"]["ingress"] =
        json!([{"ip": "127.0.0.58", "ipMode": "VIP"}, {"ip": "::1", "ipMode": "VIP"}]);
    fake.apply(svc);
    let receiver = Receiver::start("127.0.0.58", false).await;
    let follow = receiver.follow(fake.clone(), "127.0.0.58");
    let running = start(&fake, auto_config());
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| record_state(f) == "proven")
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    let recorded = entry(&fake);
    assert_eq!(
        recorded["original"],
        json!([{"ip": "127.0.0.58", "ipMode": "VIP"}]),
        "{recorded}"
    );
    assert_eq!(recorded["skipped"], json!(["::1"]), "{recorded}");
    assert_eq!(ip_mode_of(&fake, "127.0.0.58"), "Proxy");
    assert_eq!(ip_mode_of(&fake, "::1"), "VIP");
    let notes = events(&fake, "IpModeProxySet");
    assert!(
        notes.iter().any(|n| n.contains("::1 cannot be reached")),
        "{notes:?}"
    );
    // The plan made from the proven record says why the names keep the DNS cure.
    let status_of = |f: &FakeApiServer| {
        f.get(
            "hairpin.io/v1alpha1",
            "Hairpin",
            Some("ingress-nginx"),
            "ingress-nginx-controller",
        )
        .map(|h| h["status"].clone())
        .unwrap_or_default()
    };
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| status_of(f)["cureReason"]
            .as_str()
            .is_some_and(|r| r.contains(
                "::1 cannot be reached from the controller and stays VIP"
            )))
        .await
        .is_some(),
        "{}",
        status_of(&fake)
    );
    assert_eq!(status_of(&fake)["cure"], "dns");
    assert!(corefile(&fake).contains(HOST));
    running.stop().await;
    // One status write: the IPv4 address; the IPv6 one never.
    assert_eq!(status_puts(&fake), [200]);
    follow.abort();
    receiver.stop().await;
}

/// Item 5: a writer that keeps removing `ipMode` (a stand-in MetalLB controller rebuilding
/// the status on every change) is detected after `--fight-threshold` re-assertions, named in
/// a Warning Event and the record, counted per writer, and hairpin stops: the load balancer
/// is on the DNS cure and no more status writes follow.
#[tokio::test]
async fn a_writer_that_keeps_removing_ip_mode_is_a_fight_and_the_load_balancer_ends_on_dns() {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{Api, PostParams};
    let fake = Arc::new(FakeApiServer::start().await);
    seed(&fake, "127.0.0.53");
    let receiver = Receiver::start("127.0.0.53", false).await;
    let metallb = tokio::spawn({
        let fake = fake.clone();
        async move {
            let services: Api<Service> = Api::namespaced(fake.client(), "ingress-nginx");
            let params = PostParams {
                field_manager: Some("metallb-controller".into()),
                ..PostParams::default()
            };
            loop {
                fake.wait_until(Duration::from_secs(1), |f| ip_mode(f) == "Proxy")
                    .await;
                let Ok(mut svc) = services.get("ingress-nginx-controller").await else {
                    continue;
                };
                let Some(points) = svc
                    .status
                    .as_mut()
                    .and_then(|s| s.load_balancer.as_mut())
                    .and_then(|lb| lb.ingress.as_mut())
                else {
                    continue;
                };
                if points.iter().all(|p| p.ip_mode.as_deref() != Some("Proxy")) {
                    continue;
                }
                for point in points.iter_mut() {
                    point.ip_mode = None;
                }
                let _ = services
                    .replace_status("ingress-nginx-controller", &params, &svc)
                    .await;
            }
        }
    });
    let mut cfg = auto_config();
    cfg.native.deadline = Duration::from_secs(60);
    let running = start(&fake, cfg);
    assert!(
        fake.wait_until(Duration::from_secs(15), |f| record_state(f) == "failed")
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    let reason = entry(&fake)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("metallb-controller"), "{reason}");
    let notes = events(&fake, "IpModeWriteReverted");
    assert!(
        notes.iter().any(|n| n.contains("metallb-controller")),
        "{notes:?}"
    );
    let reverts = running
        .metrics
        .ip_mode_reverts
        .get_or_create(&hairpin_controller::metrics::WriterLabels {
            writer: "metallb-controller".into(),
        })
        .get();
    assert!(reverts >= 3, "{reverts}");
    assert!(corefile(&fake).contains(HOST));
    assert!(
        fake.wait_until(Duration::from_secs(5), |f| ip_mode(f) == "VIP")
            .await
            .is_some()
    );
    // Backed off: no status write for a while (not a tight loop).
    let puts = status_puts(&fake).len();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(status_puts(&fake).len(), puts);
    running.stop().await;
    metallb.abort();
    receiver.stop().await;
}

/// Item 6: the load balancer's address changes after the cure was proven: the cure starts
/// over for the new address (its problem shown first, then proven again), the old address's
/// stale record is dropped, and the DNS rule is back meanwhile.
#[tokio::test]
async fn a_changed_address_is_proven_again_and_the_old_one_dropped() {
    let fake = Arc::new(FakeApiServer::start().await);
    seed(&fake, "127.0.0.55");
    let old = Receiver::start("127.0.0.55", false).await;
    let old_follow = old.follow(fake.clone(), "127.0.0.55");
    let new = Receiver::start("127.0.0.56", false).await;
    let new_follow = new.follow(fake.clone(), "127.0.0.56");
    let running = start(&fake, auto_config());
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| record_state(f) == "proven"
            && !corefile(f).contains(HOST))
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    // The cloud controller moves the load balancer to another address.
    let mut svc = service(&fake);
    svc["status"]["loadBalancer"]["ingress"] = json!([{"ip": "127.0.0.56"}]);
    fake.apply(svc);
    // And the ingress controller publishes it on its Ingress.
    fake.apply(fixtures::ingress("shop", "shop", &[HOST], "127.0.0.56"));
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| corefile(f).contains(HOST))
            .await
            .is_some(),
        "DNS back while the new address is proven"
    );
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| record_state(f) == "proven"
            && entry(f)["original"]
                == json!([{"ip": "127.0.0.56", "ipMode": "VIP"}])
            && !corefile(f).contains(HOST))
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    assert_eq!(ip_mode_of(&fake, "127.0.0.56"), "Proxy");
    // The new address was asked without a header (closed) before its write, then answered.
    assert!(
        new.closed() >= 3 && new.answered() >= 3,
        "{} {}",
        new.closed(),
        new.answered()
    );
    running.stop().await;
    old_follow.abort();
    new_follow.abort();
    old.stop().await;
    new.stop().await;
}

/// The wait between two tries of a failing cure: `retry`, doubling, capped.
#[test]
fn a_failing_cure_backs_off_doubling_up_to_the_cap() {
    let params = hairpin_controller::native::NativeParams::default();
    let waits: Vec<u64> = [1, 2, 3, 4, 8, 9, 40]
        .into_iter()
        .map(|n| hairpin_controller::native::backoff(&params, n).as_secs())
        .collect();
    assert_eq!(
        waits,
        [600, 1200, 2400, 4800, 76_800, 86_400, 86_400],
        "10 min doubling, capped at 24 h"
    );
}

/// The status writes after the first `200` (the write of `Proxy`): the put-back's tries.
fn put_back_tries(fake: &FakeApiServer) -> Vec<u16> {
    status_puts(fake)
        .into_iter()
        .skip_while(|s| *s != 200)
        .skip(1)
        .collect()
}

/// Issue 45 item 2: a put-back that the API server does not apply (`fault`, three times in a
/// row) is never dropped: it is tried again, backing off, until the answer shows it; meanwhile
/// the record and the Hairpin status's reason say so, a Warning Event names the refusal, and
/// the metric counts it. Returns the time from the failed proof's first put-back to `VIP`.
async fn put_back_not_applied(ip: &'static str, fault: FaultKind, named: &str) -> Duration {
    let fake = FakeApiServer::start().await;
    seed(&fake, ip);
    let receiver = Receiver::start(ip, false).await;
    let running = start(&fake, auto_config());
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| ip_mode(f) == "Proxy")
            .await
            .is_some(),
        "{:?}",
        status_puts(&fake)
    );
    fake.inject(Fault {
        method: Some("PUT".into()),
        path_contains: format!("{SVC}/status"),
        remaining: 3,
        kind: fault,
    });
    // Nothing answers at the address: the proof fails, and the put-back is refused.
    let refused = fake
        .wait_until(Duration::from_secs(10), |f| {
            entry(f)["putBackPending"]
                .as_str()
                .is_some_and(|p| p.contains(named))
        })
        .await;
    assert!(
        refused.is_some(),
        "{:?} {:?}",
        entry(&fake),
        status_puts(&fake)
    );
    let started = std::time::Instant::now();
    assert_eq!(record_state(&fake), "failed");
    assert_eq!(ip_mode(&fake), "Proxy");
    assert!(running.metrics.ip_mode_put_backs_pending.get() >= 1);
    assert!(
        fake.wait_until(Duration::from_secs(20), |f| ip_mode(f) == "VIP"
            && entry(f)["putBackPending"].is_null())
            .await
            .is_some(),
        "{:?} {:?}",
        entry(&fake),
        status_puts(&fake)
    );
    let took = started.elapsed();
    let tries = put_back_tries(&fake);
    assert_eq!(tries.last(), Some(&200), "{tries:?}");
    assert!(tries.len() >= 4, "three refused, then applied: {tries:?}");
    // The entry is kept: failed, its backoff running; the DNS cure stays.
    assert_eq!(record_state(&fake), "failed", "{:?}", entry(&fake));
    assert!(corefile(&fake).contains(HOST));
    assert_eq!(running.metrics.ip_mode_put_backs_pending.get(), 0);
    let notes = events(&fake, "IpModeNotRestored");
    assert!(notes.iter().any(|n| n.contains(named)), "{notes:?}");
    running.stop().await;
    receiver.stop().await;
    took
}

#[tokio::test]
async fn a_put_back_answered_409_is_retried_until_applied() {
    let took = put_back_not_applied("127.0.0.61", FaultKind::Status(409), "409").await;
    println!("put-back answered 409 three times: VIP {took:.2?} after the first refusal");
}

#[tokio::test]
async fn a_put_back_answered_unapplied_is_retried_until_applied() {
    let took = put_back_not_applied("127.0.0.62", FaultKind::Unapplied, "still says Proxy").await;
    println!(
        "put-back answered still saying Proxy three times: VIP {took:.2?} after the first refusal"
    );
}

/// Issue 45 item 2: a failed cure whose put-back was refused, then another writer touches the
/// status list (Cilium LB-IPAM, `kubectl edit`) leaving the `Proxy`: the `Proxy` is still
/// hairpin's. It is put back at the next look, and the entry stays (not forgotten).
#[tokio::test]
async fn a_failed_cure_still_at_proxy_is_put_back_after_another_writer_touched_the_list() {
    let fake = FakeApiServer::start().await;
    seed(&fake, "127.0.0.63");
    let receiver = Receiver::start("127.0.0.63", false).await;
    recorded_cure(
        &fake,
        "127.0.0.63",
        json!({"state": "failed", "since": "2026-11-27T10:00:00Z", "failures": 1,
               "reason": "ipMode: Proxy was not honoured: empty reply",
               "putBackPending": "the API server answered 409 Conflict"}),
    );
    rewrite_status(&fake, "cilium-operator", None).await;
    assert_eq!(ip_mode(&fake), "Proxy");
    let running = start(&fake, auto_config());
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| ip_mode(f) == "VIP"
            && entry(f)["putBackPending"].is_null())
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    assert_eq!(record_state(&fake), "failed", "{:?}", entry(&fake));
    assert!(events(&fake, "IpModeHandedOver").is_empty());
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| corefile(f).contains(HOST))
            .await
            .is_some()
    );
    running.stop().await;
    receiver.stop().await;
}

/// Issue 45 item 5: k3s ServiceLB through the controller (not only the planner): the Service
/// carries DigitalOcean's PROXY annotation (a proxy, by itself), but its `svclb-*` DaemonSet,
/// as k3s labels it, says the nodes receive its address. The controller's slimmed cache keeps
/// those labels: native is never tried (no status write), the DNS cure is written, and the
/// Event names ServiceLB's DaemonSet.
#[tokio::test]
async fn k3s_servicelb_is_a_vip_in_the_controller_too() {
    let fake = FakeApiServer::start().await;
    seed(&fake, "127.0.0.65");
    let receiver = Receiver::start("127.0.0.65", false).await;
    let labels = json!({"svccontroller.k3s.cattle.io/svcname": "ingress-nginx-controller",
                        "svccontroller.k3s.cattle.io/svcnamespace": "ingress-nginx"});
    fake.apply(hairpin_fake_apiserver::object(
        "apps/v1",
        "DaemonSet",
        Some("kube-system"),
        "svclb-ingress-nginx-controller-2f5b1c3e",
        json!({
            "metadata": {"labels": labels},
            "spec": {"selector": {"matchLabels": {"app": "svclb-ingress-nginx-controller-2f5b1c3e"}},
                     "template": {"metadata": {"labels": {"app": "svclb-ingress-nginx-controller-2f5b1c3e"}},
                                  "spec": {"containers": [{"name": "lb-tcp-8080",
                                      "image": "rancher/klipper-lb:v0.4.9"}]}}}
        }),
    ));
    let running = start(&fake, auto_config());
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| corefile(f).contains(HOST))
            .await
            .is_some()
    );
    let servicelb = |f: &FakeApiServer| {
        events(f, "NativeCureNotTried")
            .into_iter()
            .find(|n| n.contains("k3s ServiceLB"))
    };
    fake.wait_until(Duration::from_secs(10), |f| servicelb(f).is_some())
        .await;
    let note = servicelb(&fake);
    assert!(
        note.as_deref()
            .is_some_and(|n| n.contains("svclb-ingress-nginx-controller")),
        "{note:?} {:?}",
        events(&fake, "NativeCureNotTried")
    );
    println!(
        "k3s ServiceLB in the controller: {}",
        note.unwrap_or_default()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(status_puts(&fake).is_empty(), "{:?}", status_puts(&fake));
    assert_eq!(ip_mode(&fake), "VIP");
    assert_eq!(receiver.closed(), 0, "not even probed");
    running.stop().await;
    receiver.stop().await;
}

/// Issue 45 item 1: where the node agents report (`node_reports`), a cure proven by the
/// controller's probe keeps the DNS cure until every Node's agent proved it; the agent (the
/// real [`hairpin_controller::native::NodeProber`], writing its Lease on the fake API server)
/// proves it, and the DNS rules go; its address stops answering for that node: the agent's
/// re-probe fails, the DNS rules come back first, and `ipMode` is put back after
/// `dns_settle`.
#[tokio::test]
async fn the_node_agents_proofs_decide_and_a_node_failing_brings_dns_back_first() {
    use hairpin_controller::native::{NativeParams, NodeProber, NodeProberOptions};
    let fake = Arc::new(FakeApiServer::start().await);
    seed(&fake, "127.0.0.61");
    fake.apply(node("node-a", "v1.31.14"));
    let receiver = Receiver::start("127.0.0.61", false).await;
    let follow = receiver.follow(fake.clone(), "127.0.0.61");
    let mut cfg = auto_config();
    cfg.native.node_reports = Some(Duration::from_secs(5));
    cfg.native.dns_settle = Duration::from_millis(800);
    let running = start(&fake, cfg);
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| record_state(f) == "proven")
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    let spec = entry(&fake);
    assert!(
        !spec["targets"].as_array().is_none_or(Vec::is_empty),
        "{spec}"
    );
    assert!(
        spec["attempt"].as_str().is_some_and(|a| !a.is_empty()),
        "{spec}"
    );
    // Proven here, vouched for by no node's agent: the DNS cure stays, `Proxy` stays.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(corefile(&fake).contains(HOST));
    assert_eq!(ip_mode(&fake), "Proxy");

    let shutdown = hairpin_runtime::Shutdown::new();
    let prober = NodeProber::new(
        fake.client(),
        NodeProberOptions {
            node: "node-a".into(),
            namespace: "hairpin".into(),
            interval: Duration::from_millis(200),
            params: NativeParams {
                deadline: Duration::from_millis(600),
                interval: Duration::from_millis(100),
                timeout: Duration::from_millis(200),
                ..NativeParams::default()
            },
        },
    );
    let updates = hairpin_runtime::configmap::watch_configmap_key(
        fake.client(),
        "hairpin",
        "hairpin-native",
        hairpin_planner::native::NATIVE_KEY,
    );
    let agent = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { prober.run(updates, &shutdown).await }
    });
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| !corefile(f).contains(HOST))
            .await
            .is_some(),
        "the DNS rules go once node-a's agent proved it: {:?}",
        fake.list("coordination.k8s.io/v1", "Lease")
    );

    // The address stops answering through node-a's data plane.
    follow.abort();
    receiver.answer.store(false, Ordering::SeqCst);
    let (mut dns_back, mut put_back) = (None, None);
    let started = std::time::Instant::now();
    while dns_back.is_none() || put_back.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "DNS back {dns_back:?}, put back {put_back:?}: {:?}",
            entry(&fake)
        );
        if dns_back.is_none() && corefile(&fake).contains(HOST) {
            dns_back = Some(started.elapsed());
        }
        if put_back.is_none() && ip_mode(&fake) == "VIP" {
            put_back = Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (dns_back, put_back) = (dns_back.unwrap(), put_back.unwrap());
    assert!(
        dns_back + Duration::from_millis(500) < put_back,
        "make before break: DNS back {dns_back:?}, put back {put_back:?}"
    );
    let reason = entry(&fake)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        reason.contains("node node-a") && reason.contains("empty reply"),
        "{reason}"
    );
    assert!(
        events(&fake, "NativeCureNotOnEveryNode")
            .iter()
            .any(|e| e.contains("node-a")),
        "{:?}",
        events(&fake, "NativeCureNotOnEveryNode")
    );
    println!("node-a failed: DNS rules back {dns_back:?}, ipMode put back {put_back:?}: {reason}");
    shutdown.trigger();
    let _ = agent.await;
    running.stop().await;
    receiver.stop().await;
}
