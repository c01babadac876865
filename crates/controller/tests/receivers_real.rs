//! Issue 38 against the real kube-apiserver v1.31.14 (`hairpin_testkit::kube`): Istio's
//! EnvoyFilter kind served as Istio serves it (`tests/fixtures/envoyfilter-crd.yaml`: the same
//! group, version, names and scope; a stand-in written here, since upstream's file is not copied
//! into this repository), an istioctl gateway whose PROXY protocol an EnvoyFilter turns on,
//! behind a load balancer that sends PROXY: the controller reads the EnvoyFilter from the real
//! server, reports the receiver's setting unknown, not off, and the load balancer's annotation
//! decides (hairpinned, no mismatch).
//!
//! NGINX Gateway Fabric 1.x's cluster-scoped NginxProxy kind (v1alpha1, the stand-in
//! `tests/fixtures/ngf-1.6.2-nginxproxies-crd.yaml`), named by the GatewayClass without a
//! namespace, is read from the real server too.
//!
//! Needs root, etcd and the test peers; without them each test is skipped (a failure under CI).

use std::time::{Duration, Instant};

use hairpin_controller::{ControllerConfig, Metrics};
use hairpin_fake_apiserver::fixtures;
use hairpin_planner::{CureMode, PlannerConfig};
use hairpin_runtime::{Readiness, Shutdown};
use hairpin_testkit::kube::{self as real, ApiServer, object_path};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

const ENVOY_FILTER_CRD: &str = include_str!("fixtures/envoyfilter-crd.yaml");
const NGINX_PROXY_CRD: &str = include_str!("fixtures/ngf-1.6.2-nginxproxies-crd.yaml");
const NGF_1X: &str =
    include_str!("../../planner/tests/fixtures/receivers/nginx-gateway-fabric-1x.yaml");

/// One scenario at a time: each controller watches the whole cluster.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
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

/// The shared apiserver with the `Hairpin` CRD, `crds` installed and served at `paths`, the
/// CoreDNS ConfigMap, and an admin client; `None` (after saying why) where it cannot run.
async fn cluster(
    crds: &[&str],
    paths: &[&str],
    namespaces: &[&str],
) -> Option<(&'static ApiServer, kube::Client)> {
    if real::skip_without("receivers_real") {
        return None;
    }
    let api = ApiServer::shared().unwrap_or_else(|err| panic!("start kube-apiserver: {err}"));
    let kubeconfig =
        kube::config::Kubeconfig::read_from(api.admin_kubeconfig()).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("client config");
    let client = kube::Client::try_from(config).expect("client");
    for ns in ["hp-rcv", "dns-rcv"].iter().chain(namespaces) {
        api.ensure_namespace(ns);
    }
    {
        use kube::CustomResourceExt as _;
        let crd = serde_json::to_value(hairpin_controller::crd::Hairpin::crd()).unwrap();
        api.apply(&crd);
    }
    for text in crds {
        for crd in yaml(text) {
            api.apply(&crd);
        }
    }
    served(api, "/apis/hairpin.io/v1alpha1/hairpins").await;
    for path in paths {
        served(api, path).await;
    }
    let mut coredns = fixtures::coredns(COREFILE);
    coredns["metadata"]["namespace"] = json!("dns-rcv");
    apply(api, &coredns);
    Some((api, client))
}

/// Runs the controller (DNS cure, hairpin's namespace `hp-rcv`) until the `Hairpin` at
/// `path` names its receiver; returns it.
async fn hairpin_of(api: &ApiServer, client: kube::Client, path: &str) -> Value {
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
    shutdown.trigger();
    task.await.unwrap();
    hairpin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envoy_filter_on_the_real_server_makes_the_gateway_unknown_not_off() {
    let _serial = SERIAL.lock().await;
    let Some((api, client)) = cluster(
        &[ENVOY_FILTER_CRD],
        &["/apis/networking.istio.io/v1alpha3/envoyfilters"],
        &["istio-system"],
    )
    .await
    else {
        return;
    };
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
    let hairpin = hairpin_of(
        api,
        client,
        "/apis/hairpin.io/v1alpha1/namespaces/istio-system/hairpins/istio-ingressgateway",
    )
    .await;
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
    for object in yaml(ISTIO).iter().rev() {
        api.delete(&object_path(object));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ngf_1x_cluster_scoped_nginx_proxy_is_read_from_the_real_server() {
    let _serial = SERIAL.lock().await;
    use kube::CustomResourceExt as _;
    // The Gateway API kinds as the gateway-api crate generates them from upstream's types,
    // with the approval annotation upstream's CRDs carry (a `*.k8s.io` group needs it).
    let approved = |crd: serde_json::Value| {
        let mut crd = crd;
        crd["metadata"]["annotations"] = json!({
            "api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/gateway-api/pull/3328"
        });
        serde_json::to_string(&crd).unwrap()
    };
    let gateway_api = [
        approved(serde_json::to_value(gateway_api::gatewayclasses::GatewayClass::crd()).unwrap()),
        approved(serde_json::to_value(gateway_api::gateways::Gateway::crd()).unwrap()),
    ];
    let Some((api, client)) = cluster(
        &[NGINX_PROXY_CRD, &gateway_api[0], &gateway_api[1]],
        &[
            "/apis/gateway.nginx.org/v1alpha1/nginxproxies",
            "/apis/gateway.networking.k8s.io/v1/gateways",
        ],
        &["nginx-gateway", "default"],
    )
    .await
    else {
        return;
    };
    for object in yaml(NGF_1X) {
        apply(api, &object);
    }
    let stored = api
        .get("/apis/gateway.nginx.org/v1alpha1/nginxproxies/ngf-proxy-config")
        .expect("the cluster-scoped NginxProxy is stored");
    assert_eq!(stored["spec"]["rewriteClientIP"]["mode"], "ProxyProtocol");
    let hairpin = hairpin_of(
        api,
        client,
        "/apis/hairpin.io/v1alpha1/namespaces/nginx-gateway/hairpins/ngf-nginx-gateway-fabric",
    )
    .await;
    let receiver = &hairpin["status"]["receiver"];
    assert_eq!(receiver["proxyProtocol"], "required", "{receiver}");
    assert_eq!(receiver["readFrom"], "NginxProxy ngf-proxy-config");
    assert_eq!(hairpin["status"]["proxy"], "v1");
    for object in yaml(NGF_1X).iter().rev() {
        api.delete(&object_path(object));
    }
}
