//! Issue 38 against the real kube-apiserver v1.31.14 (`hairpin_testkit::kube`): Istio's
//! EnvoyFilter CRD installed as upstream ships it (`tests/fixtures/envoyfilter-crd.yaml`, from
//! istio/api), an istioctl gateway whose PROXY protocol an EnvoyFilter turns on, behind a
//! load balancer that sends PROXY: the controller reads the EnvoyFilter from the real server
//! (what its schema keeps of it), reports the receiver's setting unknown, not off, and the
//! load balancer's annotation decides (hairpinned, no mismatch).
//!
//! Needs root, etcd and the test peers; without them the test prints why and passes.

use std::time::{Duration, Instant};

use hairpin_controller::{ControllerConfig, Metrics};
use hairpin_fake_apiserver::fixtures;
use hairpin_planner::{CureMode, PlannerConfig};
use hairpin_runtime::{Readiness, Shutdown};
use hairpin_testkit::kube::{self as real, ApiServer, object_path};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

const ENVOY_FILTER_CRD: &str = include_str!("fixtures/envoyfilter-crd.yaml");
const ISTIO: &str = include_str!("../../planner/tests/fixtures/receivers/istio-envoyfilter.yaml");
const COREFILE: &str = ".:53 {\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n";

fn yaml(text: &str) -> Vec<Value> {
    text.split("\n---")
        .map(|doc| serde_saphyr::from_str::<Value>(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// Applies `object`, then its `status` (server-side apply leaves status alone).
fn apply(api: &ApiServer, object: &Value) {
    api.apply(object);
    if object["status"].is_object() {
        api.patch_status(&object_path(object), &json!({"status": object["status"]}));
    }
}

async fn served(api: &ApiServer, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while api.get(path).is_none() {
        assert!(Instant::now() < deadline, "{path} is not served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envoy_filter_from_its_upstream_crd_makes_the_gateway_unknown_not_off() {
    if let Some(reason) = real::skip_reason() {
        println!("SKIPPED on the real kube-apiserver: {reason}");
        return;
    }
    let api = ApiServer::shared().unwrap_or_else(|err| panic!("start kube-apiserver: {err}"));
    let kubeconfig =
        kube::config::Kubeconfig::read_from(api.admin_kubeconfig()).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("client config");
    let client = kube::Client::try_from(config).expect("client");
    for ns in ["hp-rcv", "dns-rcv", "istio-system"] {
        api.ensure_namespace(ns);
    }
    {
        use kube::CustomResourceExt as _;
        let crd = serde_json::to_value(hairpin_controller::crd::Hairpin::crd()).unwrap();
        api.apply(&crd);
    }
    for crd in yaml(ENVOY_FILTER_CRD) {
        api.apply(&crd);
    }
    served(api, "/apis/hairpin.io/v1alpha1/hairpins").await;
    served(api, "/apis/networking.istio.io/v1alpha3/envoyfilters").await;
    let mut coredns = fixtures::coredns(COREFILE);
    coredns["metadata"]["namespace"] = json!("dns-rcv");
    apply(api, &coredns);
    for mut object in yaml(ISTIO) {
        if object["kind"] == "Service" {
            object["metadata"]["annotations"] =
                json!({"load-balancer.hetzner.cloud/uses-proxyprotocol": "true"});
        }
        apply(api, &object);
    }
    // What the real server kept of the EnvoyFilter (its schema prunes unknown fields).
    let stored = api
        .get("/apis/networking.istio.io/v1alpha3/namespaces/istio-system/envoyfilters/proxy-protocol")
        .expect("the EnvoyFilter is stored");
    assert_eq!(
        stored["spec"]["workloadSelector"]["labels"]["istio"],
        "ingressgateway"
    );

    let mut config = ControllerConfig::new(
        PlannerConfig {
            namespace: "hp-rcv".into(),
            coredns_namespace: "dns-rcv".into(),
            cure: CureMode::Dns,
            ..PlannerConfig::default()
        },
        "pod-a",
    );
    config.debounce = Duration::from_millis(50);
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let readiness = Readiness::new();
    let ready = readiness.condition("caches synced");
    let shutdown = Shutdown::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            hairpin_controller::run(client, config, metrics, ready, shutdown)
                .await
                .unwrap();
        }
    });

    let path = "/apis/hairpin.io/v1alpha1/namespaces/istio-system/hairpins/istio-ingressgateway";
    let deadline = Instant::now() + Duration::from_secs(30);
    let hairpin = loop {
        if let Some(h) = api
            .get(path)
            .filter(|h| h["status"]["receiver"].is_object())
        {
            break h;
        }
        assert!(
            Instant::now() < deadline,
            "not hairpinned: {:?}",
            api.get(path)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let receiver = &hairpin["status"]["receiver"];
    assert_eq!(receiver["implementation"], "Istio gateway", "{receiver}");
    assert_eq!(receiver["proxyProtocol"], "unknown", "{receiver}");
    assert!(
        receiver["setting"]
            .as_str()
            .is_some_and(|s| s.contains("EnvoyFilter istio-system/proxy-protocol")),
        "{receiver}"
    );
    assert_eq!(hairpin["status"]["proxy"], "v1");
    let mismatch = hairpin["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "ReceiverMismatch");
    assert!(!mismatch, "{hairpin}");
    shutdown.trigger();
    task.await.unwrap();
}
