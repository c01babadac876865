//! The `Hairpin` lifecycle on the fake API server: created with an ownerReference on its
//! Service, updated, its conditions set, and garbage-collected with the Service.

use std::time::Duration;

mod support;

use hairpin_fake_apiserver::{FakeApiServer, fixtures, object};
use serde_json::{Value, json};
use support::controller::condition;

const COREFILE: &str = ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n";

fn ingress(name: &str, host: &str) -> Value {
    fixtures::ingress("shop", name, &[host], "203.0.113.10")
}

fn hairpin(fake: &FakeApiServer) -> Option<Value> {
    fake.get(
        "hairpin.io/v1alpha1",
        "Hairpin",
        Some("ingress-nginx"),
        "ingress-nginx-controller",
    )
}

#[tokio::test]
async fn a_hairpin_is_created_updated_and_deleted_with_its_service() {
    let fake = FakeApiServer::start().await;
    fake.install_hairpin_crd();
    fake.create_namespace("hairpin");
    fake.apply(support::cluster::http_lb());
    fake.apply(ingress("shop", "shop.example.com"));
    fake.apply(fixtures::coredns(COREFILE));
    let service_uid = fake
        .get(
            "v1",
            "Service",
            Some("ingress-nginx"),
            "ingress-nginx-controller",
        )
        .unwrap()["metadata"]["uid"]
        .clone();

    let running = support::controller::start(&fake, support::controller::config("pod-a", false));

    // Created, owned by the load balancer Service, with its status.
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| hairpin(f)
            .is_some_and(|h| h["status"]["hostCount"] == 1))
            .await
            .is_some(),
        "{:?}",
        hairpin(&fake)
    );
    let h = hairpin(&fake).unwrap();
    let owner = &h["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Service");
    assert_eq!(owner["uid"], service_uid);
    assert_eq!(owner["controller"], true);
    assert_eq!(h["spec"], json!({}));
    assert_eq!(h["status"]["proxy"], "v1");
    assert_eq!(h["status"]["hostnames"][0]["name"], "shop.example.com");
    assert_eq!(
        h["status"]["hostnames"][0]["sources"][0],
        "Ingress shop/shop"
    );
    assert_eq!(h["status"]["dnsMode"], "corefile");
    assert_eq!(h["status"]["configMaps"][0], "kube-system/coredns");
    assert_eq!(
        h["status"]["service"],
        "hairpin/hairpin-ingress-nginx-ingress-nginx-controller"
    );
    // Conditions: the rules are written; no proxy pod is ready (no EndpointSlice).
    assert_eq!(condition(&h, "DNSWritten")["status"], "True");
    assert_eq!(condition(&h, "ProxyReady")["status"], "False");
    assert_eq!(condition(&h, "ProxyReady")["reason"], "NoReadyEndpoints");
    assert_eq!(condition(&h, "Ready")["status"], "False");
    assert_eq!(h["status"]["dns"], "Written");
    // The cure: DNS, since hcloud's controller computes ipMode itself (never overridden).
    assert_eq!(h["status"]["cure"], "dns");
    assert!(h["status"].get("nativeCure").is_none(), "{h}");
    let native = condition(&h, "NativeCure");
    assert_eq!(native["status"], "False");
    assert_eq!(native["reason"], "NotEligible");
    assert!(
        native["message"]
            .as_str()
            .unwrap()
            .contains("hcloud-cloud-controller-manager computes ipMode itself"),
        "{native}"
    );
    assert_eq!(h["status"]["cureReason"], native["message"]);
    assert!(h["status"]["lastWriteTime"].is_string(), "{h}");
    let written_at = condition(&h, "DNSWritten")["lastTransitionTime"].clone();

    // Updated: a second hostname, and a ready proxy pod behind the hairpin Service.
    fake.apply(ingress("cart", "cart.example.com"));
    fake.apply(object(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        Some("hairpin"),
        "hairpin-ingress-nginx-ingress-nginx-controller-x1",
        json!({
            "metadata": {"labels": {"kubernetes.io/service-name": "hairpin-ingress-nginx-ingress-nginx-controller"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.244.0.7"], "conditions": {"ready": true}}]
        }),
    ));
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| hairpin(f).is_some_and(|h| {
            h["status"]["hostCount"] == 2 && h["status"]["readyEndpoints"] == 1
        }))
        .await
        .is_some(),
        "{:?}",
        hairpin(&fake)
    );
    let h = hairpin(&fake).unwrap();
    assert_eq!(condition(&h, "ProxyReady")["status"], "True");
    assert_eq!(
        condition(&h, "DNSWritten")["lastTransitionTime"],
        written_at,
        "kept while the status does not flip"
    );
    // Steady state: no further status writes.
    let patches = fake.count("PATCH", "/hairpins/ingress-nginx-controller/status");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        fake.count("PATCH", "/hairpins/ingress-nginx-controller/status"),
        patches
    );

    // Deleted with its Service (garbage collection through the ownerReference).
    assert!(fake.delete(
        "v1",
        "Service",
        Some("ingress-nginx"),
        "ingress-nginx-controller"
    ));
    assert!(hairpin(&fake).is_none());
    running.stop().await;
    assert!(
        hairpin(&fake).is_none(),
        "not recreated without its load balancer"
    );
}

#[tokio::test]
async fn a_hairpin_deleted_or_edited_by_someone_else_is_put_back_at_once() {
    use hairpin_controller::crd::Hairpin;
    use kube::Api;
    use kube::api::{DeleteParams, Patch, PatchParams};

    let fake = FakeApiServer::start().await;
    fake.install_hairpin_crd();
    fake.create_namespace("hairpin");
    fake.apply(support::cluster::http_lb());
    fake.apply(ingress("shop", "shop.example.com"));
    fake.apply(fixtures::coredns(COREFILE));
    // Nothing else changes during the test, and the resync is minutes away: only the
    // Hairpin's own events can bring it back in time.
    let config = support::controller::config("pod-a", false);
    assert!(config.resync >= Duration::from_secs(60));
    let running = support::controller::start(&fake, config);
    let correct = |h: &Value| {
        h["status"]["hostCount"] == 1
            && h["status"]["hostnames"][0]["name"] == "shop.example.com"
            && condition(h, "DNSWritten")["status"] == "True"
    };
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| hairpin(f)
            .is_some_and(|h| correct(&h)))
            .await
            .is_some(),
        "{:?}",
        hairpin(&fake)
    );
    // Wait until the controller is quiet (the reconciles its own first writes caused are
    // done), so nothing else is pending when the Hairpin is deleted.
    let mut reconciles = running.metrics.reconciles.get();
    loop {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let now = running.metrics.reconciles.get();
        if now == reconciles {
            break;
        }
        reconciles = now;
    }
    let first_uid = hairpin(&fake).unwrap()["metadata"]["uid"].clone();

    // A tenant allowed to delete Hairpins in its namespace deletes it.
    let api: Api<Hairpin> = Api::namespaced(fake.client(), "ingress-nginx");
    api.delete("ingress-nginx-controller", &DeleteParams::default())
        .await
        .unwrap();
    let back = fake
        .wait_until(Duration::from_secs(5), |f| {
            hairpin(f).is_some_and(|h| h["metadata"]["uid"] != first_uid && correct(&h))
        })
        .await;
    assert!(back.is_some(), "recreated: {:?}", hairpin(&fake));
    let h = hairpin(&fake).unwrap();
    assert_eq!(
        h["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "hairpin"
    );
    assert_eq!(h["metadata"]["ownerReferences"][0]["kind"], "Service");

    // One allowed to write its status says something false.
    api.patch_status(
        "ingress-nginx-controller",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"hostCount": 7, "hostnames": []}})),
    )
    .await
    .unwrap();
    let fixed = fake
        .wait_until(Duration::from_secs(5), |f| {
            hairpin(f).is_some_and(|h| correct(&h))
        })
        .await;
    assert!(fixed.is_some(), "status restored: {:?}", hairpin(&fake));

    // hairpin's own status writes re-plan once and change nothing: no write loop.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let patches = fake.count("PATCH", "/hairpins/ingress-nginx-controller/status");
    let reconciles = running.metrics.reconciles.get();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        fake.count("PATCH", "/hairpins/ingress-nginx-controller/status"),
        patches
    );
    assert_eq!(running.metrics.reconciles.get(), reconciles, "quiet");
    running.stop().await;
}

/// A DigitalOcean PROXY load balancer (its controller never sets ipMode) whose `ipMode: Proxy`
/// hairpin set and the probe proved (per hairpin's record): the Hairpin says native, its
/// `NativeCure` condition is `Proven`, there is no DNS rule to wait for, and it is ready.
#[tokio::test]
async fn a_load_balancer_on_the_proven_native_cure_says_so() {
    use hairpin_planner::CureMode;
    use hairpin_planner::native::{IpModeWas, NATIVE_KEY, NativeEntry, NativeRecord, ProbeState};

    let fake = FakeApiServer::start().await;
    fake.install_hairpin_crd();
    fake.create_namespace("hairpin");
    let mut lb = fixtures::proxy_load_balancer(
        "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol",
        "203.0.113.10",
        json!([{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80}]),
    );
    lb["status"]["loadBalancer"]["ingress"][0]["ipMode"] = json!("Proxy");
    fake.apply(lb);
    fake.apply(ingress("shop", "shop.example.com"));
    fake.apply(fixtures::coredns(COREFILE));
    let uid = fake
        .get(
            "v1",
            "Service",
            Some("ingress-nginx"),
            "ingress-nginx-controller",
        )
        .unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut record = NativeRecord::default();
    record.load_balancers.insert(
        "ingress-nginx/ingress-nginx-controller".into(),
        NativeEntry {
            uid,
            original: vec![IpModeWas {
                ip: "203.0.113.10".into(),
                ip_mode: Some("VIP".into()),
            }],
            state: ProbeState::Proven,
            since: "2026-11-27T10:00:00Z".into(),
            reason: "203.0.113.10:80 answered HTTP/1.1 308".into(),
            data_plane: String::new(),
            failures: 0,
            server_version: String::new(),
            due: false,
            skipped: Vec::new(),
            put_back: String::new(),
            probe: Default::default(),
        },
    );
    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("hairpin"),
        "hairpin-native",
        json!({
            "metadata": {"labels": {"app.kubernetes.io/managed-by": "hairpin"}},
            "data": {NATIVE_KEY: record.to_json()}
        }),
    ));
    let mut config = support::controller::config("pod-a", false);
    config.planner.cure = CureMode::Auto;
    let running = support::controller::start(&fake, config);

    assert!(
        fake.wait_until(Duration::from_secs(10), |f| hairpin(f)
            .is_some_and(|h| h["status"]["conditions"].is_array()))
            .await
            .is_some(),
        "{:?}",
        hairpin(&fake)
    );
    let h = hairpin(&fake).unwrap();
    assert_eq!(h["status"]["cure"], "native", "{h}");
    assert_eq!(h["status"]["nativeCure"], "proven");
    assert_eq!(h["status"]["dns"], "NotUsed");
    let native = condition(&h, "NativeCure");
    assert_eq!(native["status"], "True");
    assert_eq!(native["reason"], "Proven");
    assert!(
        native["message"]
            .as_str()
            .unwrap()
            .contains("203.0.113.10:80 answered"),
        "{native}"
    );
    assert_eq!(condition(&h, "DNSWritten")["status"], "False");
    assert_eq!(condition(&h, "DNSWritten")["reason"], "NativeCure");
    // Ready although no proxy pod is ready: in-cluster clients cross the real load balancer.
    assert_eq!(condition(&h, "Ready")["status"], "True", "{h}");
    assert!(
        !support::cluster::corefile(&fake).contains("shop.example.com"),
        "no DNS rule for a load balancer on the native cure"
    );
    let metrics = running.metrics_text();
    assert!(
        metrics.contains("hairpin_load_balancers{cure=\"native\"} 1")
            && metrics.contains("hairpin_load_balancers{cure=\"dns\"} 0"),
        "{metrics}"
    );
    running.stop().await;
}
