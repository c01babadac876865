//! The native cure's faults over the fake API server (the real kube-apiserver and kube-proxy
//! run the cure end to end in `crates/hairpin/tests/native_cure.rs`): a 409 on the status
//! subresource and a 404 on the read before it are retried; a probe that gets no answer puts
//! `ipMode` back and keeps the DNS cure (make before break: the names never lose their rule);
//! an API outage reverts nothing. The load balancer's address is on loopback (`127.0.0.42`,
//! nothing listening), so the probe never leaves this machine.

mod support;

use std::time::Duration;

use hairpin_fake_apiserver::FakeApiServer;
use hairpin_fake_apiserver::fixtures::{self, coredns};
use hairpin_planner::CureMode;
use serde_json::{Value, json};
use support::cluster::corefile;
use support::controller::{config, start};

const LB_IP: &str = "127.0.0.42";
const HOST: &str = "shop.example.com";
const COREFILE: &str = ".:53 {\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n";
const SVC: &str = "/api/v1/namespaces/ingress-nginx/services/ingress-nginx-controller";

fn seed(fake: &FakeApiServer) {
    fake.create_namespace("hairpin");
    fake.apply(fixtures::proxy_load_balancer(
        "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol",
        LB_IP,
        json!([{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80}]),
    ));
    fake.apply(fixtures::ingress("shop", "shop", &[HOST], LB_IP));
    fake.apply(coredns(COREFILE));
}

fn ip_mode(fake: &FakeApiServer) -> Value {
    fake.get(
        "v1",
        "Service",
        Some("ingress-nginx"),
        "ingress-nginx-controller",
    )
    .map(|s| s["status"]["loadBalancer"]["ingress"][0]["ipMode"].clone())
    .unwrap_or_default()
}

fn record_state(fake: &FakeApiServer) -> Value {
    fake.get("v1", "ConfigMap", Some("hairpin"), "hairpin-native")
        .and_then(|cm| cm["data"]["native.json"].as_str().map(str::to_owned))
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .map(|r| r["loadBalancers"]["ingress-nginx/ingress-nginx-controller"]["state"].clone())
        .unwrap_or_default()
}

fn status_puts(fake: &FakeApiServer) -> Vec<u16> {
    fake.requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.uri.contains(&format!("{SVC}/status")))
        .map(|r| r.status)
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

/// The fake API server seeded, and the controller started with the native cure forced: the
/// unanswered probe leaves `ipMode: Proxy` in place.
async fn start_native() -> (FakeApiServer, support::controller::Running) {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    let mut cfg = auto_config();
    cfg.planner.cure = CureMode::Native;
    let running = start(&fake, cfg);
    (fake, running)
}

/// Waits until the cure is recorded `failed` and `ipMode` is back to `VIP`.
async fn assert_failed_and_reverted(fake: &FakeApiServer) {
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| record_state(f) == "failed"
            && ip_mode(f) == "VIP")
            .await
            .is_some(),
        "record {:?}, ipMode {:?}",
        record_state(fake),
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
fn recorded_cure(fake: &FakeApiServer, entry: Value) {
    let mut svc = fake
        .get(
            "v1",
            "Service",
            Some("ingress-nginx"),
            "ingress-nginx-controller",
        )
        .unwrap();
    svc["status"]["loadBalancer"]["ingress"][0]["ipMode"] = json!("Proxy");
    fake.apply(svc.clone());
    let mut entry = entry;
    entry["uid"] = svc["metadata"]["uid"].clone();
    entry["original"] = json!([{"ip": LB_IP, "ipMode": "VIP"}]);
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
    seed(&fake);
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
    // Nothing answers on 127.0.0.42:80: not proven; ipMode back as it was, DNS kept.
    assert_failed_and_reverted(&fake).await;
    assert!(corefile(&fake).contains(HOST));
    // A failed cure is not tried again before its retry time: no new status write.
    let before = status_puts(&fake).len();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(status_puts(&fake).len(), before);
    assert_eq!(ip_mode(&fake), "VIP");
    running.stop().await;
}

#[tokio::test]
async fn an_api_outage_reverts_nothing_and_uninstall_restores() {
    // Native forced: ipMode stays whatever the probe says.
    let (fake, running) = start_native().await;
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| ip_mode(f) == "Proxy"
            && !corefile(f).contains(HOST))
            .await
            .is_some()
    );
    fake.go_down();
    tokio::time::sleep(Duration::from_millis(700)).await;
    fake.come_back(true);
    tokio::time::sleep(Duration::from_millis(700)).await;
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
}

/// A new leader adopts a cure its predecessor left `probing` (its probe died with it): the
/// probe runs again here, and its verdict is acted on.
#[tokio::test]
async fn a_cure_left_probing_by_an_earlier_leader_is_probed_again() {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    recorded_cure(
        &fake,
        json!({"state": "probing", "since": "2026-11-27T10:00:00Z"}),
    );
    assert_eq!(ip_mode(&fake), "Proxy");
    let running = start(&fake, auto_config());
    // Nothing answers on 127.0.0.42:80: the adopted cure fails, ipMode goes back, DNS stays.
    assert_failed_and_reverted(&fake).await;
    assert!(corefile(&fake).contains(HOST));
    running.stop().await;
}

/// A cloud controller upgraded to one that computes `ipMode` rewrites the status itself with
/// `Proxy` (and something else changed: here a hostname): hairpin steps back. Its entry goes,
/// it writes the status no more, an Event names the writer, and uninstall leaves the status as
/// that writer made it.
#[tokio::test]
async fn a_cloud_controller_that_starts_to_set_ip_mode_takes_over() {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{Api, PostParams};
    // Native forced: the unanswered probe leaves ipMode: Proxy in place.
    let (fake, running) = start_native().await;
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| ip_mode(f) == "Proxy"
            && record_state(f) == "failed")
            .await
            .is_some(),
        "record {:?}, ipMode {:?}",
        record_state(&fake),
        ip_mode(&fake)
    );
    let services: Api<Service> = Api::namespaced(fake.client(), "ingress-nginx");
    let mut svc = services.get("ingress-nginx-controller").await.unwrap();
    let ingress = &mut svc
        .status
        .as_mut()
        .unwrap()
        .load_balancer
        .as_mut()
        .unwrap()
        .ingress;
    ingress.as_mut().unwrap()[0].hostname = Some("lb.example.net".into());
    let ccm = PostParams {
        field_manager: Some("digitalocean-cloud-controller-manager".into()),
        ..PostParams::default()
    };
    services
        .replace_status("ingress-nginx-controller", &ccm, &svc)
        .await
        .unwrap();
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| record_state(f).is_null())
            .await
            .is_some(),
        "record {:?}",
        record_state(&fake)
    );
    let puts = status_puts(&fake).len();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(status_puts(&fake).len(), puts, "no more status writes");
    assert_eq!(ip_mode(&fake), "Proxy");
    let events = fake.list("events.k8s.io/v1", "Event");
    assert!(
        events.iter().any(|e| e["reason"] == "IpModeHandedOver"
            && e["note"]
                .as_str()
                .is_some_and(|n| n.contains("digitalocean-cloud-controller-manager"))),
        "{events:#?}"
    );
    running.stop().await;
    let report = uninstall(&fake).await;
    assert!(report.ip_modes_restored.is_empty(), "{report:?}");
    assert_eq!(ip_mode(&fake), "Proxy");
}

/// A proven cure, recorded on kube-proxy's DaemonSet at generation 1, with `ipMode: Proxy` in
/// place and no DNS rule.
fn proven_on_generation_one(fake: &FakeApiServer) {
    recorded_cure(
        fake,
        json!({"state": "proven", "since": hairpin_testkit_now(),
               "reason": "127.0.0.42:80 answered", "dataPlane": "kube-system/kube-proxy@1"}),
    );
}

/// Now, as RFC 3339.
fn hairpin_testkit_now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
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

/// kube-proxy's DaemonSet changed since the cure was proven (an upgrade may stop honouring
/// `ipMode`): once the change has settled, the cure is probed again; here nothing answers on
/// the address, so `ipMode` goes back and the DNS cure returns. On the same generation a
/// proven cure is left alone.
#[tokio::test]
async fn a_changed_kube_proxy_daemonset_has_a_proven_cure_probed_again() {
    for (generation, reprobed) in [(1, false), (2, true)] {
        let fake = FakeApiServer::start().await;
        seed(&fake);
        fake.apply(kube_proxy("v1.31.14"));
        if generation == 2 {
            fake.apply(kube_proxy("v1.32.0"));
        }
        let stored = fake.get("apps/v1", "DaemonSet", Some("kube-system"), "kube-proxy");
        assert_eq!(stored.unwrap()["metadata"]["generation"], generation);
        proven_on_generation_one(&fake);
        let mut cfg = auto_config();
        cfg.native.settle = Duration::from_millis(300);
        let running = start(&fake, cfg);
        let failed = fake
            .wait_until(Duration::from_secs(5), |f| {
                record_state(f) == "failed" && ip_mode(f) == "VIP" && corefile(f).contains(HOST)
            })
            .await
            .is_some();
        assert_eq!(
            failed,
            reprobed,
            "generation {generation}: record {:?}, ipMode {:?}",
            record_state(&fake),
            ip_mode(&fake)
        );
        if !reprobed {
            assert_eq!(record_state(&fake), "proven");
            assert_eq!(ip_mode(&fake), "Proxy");
            assert!(!corefile(&fake).contains(HOST));
        }
        running.stop().await;
    }
}
