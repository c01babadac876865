//! The receivers of the load balancers (issue 31) as the running controller reads them, over
//! the fake API server: a bare-metal cluster (no provider annotation, ingress-nginx's own
//! `use-proxy-protocol: "true"`) is hairpinned with zero configuration and the `Hairpin`
//! status names the receiver; Envoy Gateway's ClientTrafficPolicy is read from its CRD; with
//! the shipped manifest's grants everything is read, and without the receivers' grants the
//! controller still plans (the annotations decide); a load balancer whose receiver comes to
//! disagree keeps the cure it has (do no harm), with a condition and a Warning.

mod support;

use std::time::Duration;

use hairpin_fake_apiserver::{FakeApiServer, Grant, ResourceType, fixtures};
use hairpin_planner::CureMode;
use serde_json::{Value, json};
use support::cluster::corefile;
use support::controller::{condition, config, start};

const BARE_METAL: &str = include_str!("../../../examples/bare-metal.yaml");
const ENVOY_GATEWAY: &str =
    include_str!("../../planner/tests/fixtures/receivers/envoy-gateway-required.yaml");
const MANIFEST: &str = include_str!("../../../deploy/hairpin.yaml");
const COREFILE: &str = ".:53 {\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n";

/// Every object of a multi-document YAML file, applied as another client would.
fn load(fake: &FakeApiServer, yaml: &str) {
    for doc in yaml.split("\n---") {
        let object: Value = serde_saphyr::from_str(doc).unwrap();
        if !object.is_null() {
            fake.apply(object);
        }
    }
}

/// The controller as shipped but on the DNS cure: a bare-metal load balancer is eligible for
/// the native cure, whose probe (`tests/native.rs`) is not what these tests are about.
fn dns_config(identity: &str) -> hairpin_controller::ControllerConfig {
    let mut config = config(identity, false);
    config.planner.cure = CureMode::Dns;
    config
}

fn hairpin(fake: &FakeApiServer, namespace: &str, name: &str) -> Option<Value> {
    fake.get("hairpin.io/v1alpha1", "Hairpin", Some(namespace), name)
}

fn bare_metal_hairpin(fake: &FakeApiServer) -> Option<Value> {
    hairpin(fake, "ingress-nginx", "ingress-nginx-controller")
}

/// The rules the shipped manifest (`deploy/hairpin.yaml`, rendered from the chart) grants the
/// controller's ServiceAccount, as the fake's grants.
fn manifest_grants() -> Vec<Grant> {
    let docs: Vec<Value> = MANIFEST
        .split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(|doc| !doc.is_null())
        .collect();
    let bound = |binding: &Value| {
        binding["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["kind"] == "ServiceAccount" && s["name"] == "hairpin-controller")
    };
    let mut grants = Vec::new();
    for binding in docs.iter().filter(|d| bound(d)) {
        let (role_kind, namespace) = match binding["kind"].as_str() {
            Some("ClusterRoleBinding") => ("ClusterRole", None),
            Some("RoleBinding") => ("Role", binding["metadata"]["namespace"].as_str()),
            _ => continue,
        };
        let role = docs.iter().find(|d| {
            d["kind"] == role_kind
                && d["metadata"]["name"] == binding["roleRef"]["name"]
                && d["metadata"]["namespace"].as_str() == namespace
        });
        for rule in role
            .into_iter()
            .flat_map(|r| r["rules"].as_array().unwrap())
        {
            let strings = |key: &str| -> Vec<String> {
                rule[key]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            };
            let verbs = strings("verbs");
            let names = strings("resourceNames");
            let verbs: Vec<&str> = verbs.iter().map(String::as_str).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    grants.push(match namespace {
                        Some(ns) => Grant::namespaced(ns, &group, &resource, &verbs, &names),
                        None => Grant::cluster_wide(&group, &resource, &verbs, &names),
                    });
                }
            }
        }
    }
    assert!(grants.len() > 20, "{grants:?}");
    grants
}

/// The bare-metal example with CoreDNS's Corefile and hairpin's namespace.
fn bare_metal(fake: &FakeApiServer) {
    fake.install_hairpin_crd();
    fake.create_namespace("hairpin");
    load(fake, BARE_METAL);
}

/// Waits until the bare-metal load balancer's hostname is redirected and its Hairpin names
/// the receiver; returns the Hairpin.
async fn hairpinned(fake: &FakeApiServer) -> Value {
    let done = fake
        .wait_until(Duration::from_secs(15), |f| {
            corefile(f).contains("git.example.net")
                && bare_metal_hairpin(f).is_some_and(|h| {
                    h["status"]["receiver"].is_object()
                        && condition(&h, "DNSWritten")["status"] == "True"
                })
        })
        .await;
    assert!(
        done.is_some(),
        "Corefile:\n{}\nHairpin: {:?}",
        corefile(fake),
        bare_metal_hairpin(fake)
    );
    bare_metal_hairpin(fake).unwrap()
}

#[tokio::test]
async fn a_bare_metal_ingress_nginx_is_hairpinned_with_zero_configuration() {
    let fake = FakeApiServer::start().await;
    bare_metal(&fake);
    let running = start(&fake, dns_config("pod-a"));

    let h = hairpinned(&fake).await;
    // The DNS cure: the name points at the hairpin Service, which carries PROXY v1.
    let text = corefile(&fake);
    assert!(
        text.contains(
            "git.example.net hairpin-ingress-nginx-ingress-nginx-controller.hairpin.svc.cluster.local"
        ),
        "{text}"
    );
    assert!(
        fake.get(
            "v1",
            "Service",
            Some("hairpin"),
            "hairpin-ingress-nginx-ingress-nginx-controller"
        )
        .is_some()
    );
    assert_eq!(h["status"]["proxy"], "v1");
    assert_eq!(h["status"]["hostnames"][0]["name"], "git.example.net");
    // The receiver, its setting and where it was read.
    assert_eq!(
        h["status"]["receiver"],
        json!({
            "implementation": "ingress-nginx",
            "workload": "Deployment ingress-nginx/ingress-nginx-controller",
            "proxyProtocol": "required",
            "setting": "use-proxy-protocol: \"true\"",
            "readFrom": "ConfigMap ingress-nginx/ingress-nginx-controller",
        })
    );
    assert!(condition(&h, "ReceiverMismatch").is_null(), "{h}");

    // The receiver's ConfigMap is watched by name; no ConfigMap is listed cluster-wide or
    // namespace-wide.
    let requests = fake.requests();
    let config_maps: Vec<&str> = requests
        .iter()
        .filter(|r| r.method == "GET")
        .map(|r| r.uri.as_str())
        .filter(|uri| uri.contains("/configmaps"))
        .collect();
    assert!(
        config_maps.iter().any(|uri| uri
            .starts_with("/api/v1/namespaces/ingress-nginx/configmaps?")
            && uri.contains("metadata.name%3Dingress-nginx-controller")),
        "{config_maps:?}"
    );
    assert!(
        config_maps
            .iter()
            .all(|uri| uri.contains("metadata.name") || uri.contains("/configmaps/")),
        "{config_maps:?}"
    );
    // Workloads are listed and watched; Pods are not.
    assert!(
        requests
            .iter()
            .any(|r| r.uri.starts_with("/apis/apps/v1/deployments?")),
        "{requests:?}"
    );
    assert!(
        !requests.iter().any(|r| r.uri.starts_with("/api/v1/pods")),
        "{requests:?}"
    );
    running.stop().await;
}

#[tokio::test]
async fn the_shipped_manifests_grants_are_enough_to_read_the_receiver() {
    let fake = FakeApiServer::start().await;
    bare_metal(&fake);
    fake.authorize_only(manifest_grants());
    let running = start(&fake, dns_config("pod-a"));

    let h = hairpinned(&fake).await;
    assert_eq!(h["status"]["receiver"]["proxyProtocol"], "required");
    let forbidden: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.status == 403)
        .map(|r| format!("{} {}", r.method, r.uri))
        .collect();
    assert!(forbidden.is_empty(), "{forbidden:?}");
    running.stop().await;
}

#[tokio::test]
async fn without_the_receivers_grants_the_controller_still_plans_from_the_annotations() {
    let fake = FakeApiServer::start().await;
    bare_metal(&fake);
    // An annotated load balancer next to the bare-metal one.
    fake.apply(support::cluster::lb_service());
    fake.apply(support::cluster::ingress(
        "shop",
        "shop",
        "shop.example.com",
    ));
    // An older chart's grants: no workloads, no receivers' ConfigMaps.
    let grants: Vec<Grant> = manifest_grants()
        .into_iter()
        .filter(|g| g.group != "apps" || g.resource == "deployments" && !g.names.is_empty())
        .filter(|g| !g.names.iter().any(|n| n == "ingress-nginx-controller"))
        .collect();
    fake.authorize_only(grants);
    let running = start(&fake, dns_config("pod-a"));

    // Ready (a refused read counts as read), and the annotated load balancer is hairpinned.
    assert!(
        fake.wait_until(Duration::from_secs(15), |f| corefile(f)
            .contains("shop.example.com"))
            .await
            .is_some(),
        "{}",
        corefile(&fake)
    );
    assert!(running.readiness.is_ready());
    // The bare-metal one is not: nothing says it sends PROXY.
    assert!(!corefile(&fake).contains("git.example.net"));
    assert!(bare_metal_hairpin(&fake).is_none());
    // Refused reads are retried slowly, not in a loop.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let refused = fake
        .requests()
        .iter()
        .filter(|r| r.status == 403 && r.uri.contains("/apis/apps/v1/"))
        .count();
    assert!((1..=6).contains(&refused), "{refused}");
    running.stop().await;
}

#[tokio::test]
async fn envoy_gateways_client_traffic_policy_is_read_from_its_crd() {
    let fake = FakeApiServer::start().await;
    fake.install_hairpin_crd();
    fake.install_gateway_api();
    fake.register(ResourceType::new(
        "gateway.envoyproxy.io",
        "v1alpha1",
        "clienttrafficpolicies",
        "ClientTrafficPolicy",
        true,
    ));
    fake.create_namespace("hairpin");
    fake.apply(fixtures::coredns(COREFILE));
    load(&fake, ENVOY_GATEWAY);
    let running = start(&fake, dns_config("pod-a"));

    let eg = |f: &FakeApiServer| hairpin(f, "envoy-gateway-system", "envoy-default-eg-e41e7b31");
    fake.wait_until(Duration::from_secs(15), |f| {
        eg(f).is_some_and(|h| h["status"]["receiver"].is_object())
    })
    .await
    .unwrap_or_else(|| panic!("not hairpinned: {:?}", eg(&fake)));
    let h = eg(&fake).unwrap();
    assert_eq!(
        h["status"]["receiver"],
        json!({
            "implementation": "Envoy Gateway",
            "workload": "Deployment envoy-gateway-system/envoy-default-eg-e41e7b31",
            "proxyProtocol": "required",
            "setting": "proxyProtocol: {}",
            "readFrom": "ClientTrafficPolicy default/proxy-protocol",
        })
    );
    assert_eq!(h["status"]["proxy"], "v1");
    running.stop().await;
}

/// ingress-nginx behind a DigitalOcean PROXY load balancer, its ConfigMap saying `value` for
/// `use-proxy-protocol`.
fn do_ingress_nginx(fake: &FakeApiServer, value: &str) {
    let mut lb = fixtures::proxy_load_balancer(
        "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol",
        "198.51.100.10",
        json!([{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80}]),
    );
    lb["spec"]["selector"] = json!({"app.kubernetes.io/name": "ingress-nginx"});
    fake.apply(lb);
    fake.apply(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "ingress-nginx-controller", "namespace": "ingress-nginx"},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "ingress-nginx"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "ingress-nginx"}},
                "spec": {"containers": [{
                    "name": "controller",
                    "image": "registry.k8s.io/ingress-nginx/controller:v1.12.1",
                    "args": ["/nginx-ingress-controller", "--configmap=$(POD_NAMESPACE)/ingress-nginx-controller"],
                    "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
                }]}
            }
        }
    }));
    set_use_proxy_protocol(fake, value);
}

fn set_use_proxy_protocol(fake: &FakeApiServer, value: &str) {
    fake.apply(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "ingress-nginx-controller", "namespace": "ingress-nginx"},
        "data": {"use-proxy-protocol": value}
    }));
}

fn do_hairpin(fake: &FakeApiServer) -> Option<Value> {
    hairpin(fake, "ingress-nginx", "ingress-nginx-controller")
}

const RULE: &str =
    "shop.example.com hairpin-ingress-nginx-ingress-nginx-controller.hairpin.svc.cluster.local";
const HAIRPIN_SERVICE: &str = "hairpin-ingress-nginx-ingress-nginx-controller";

/// The ReceiverMismatch Warning Events on the load balancer Service.
fn mismatch_events(fake: &FakeApiServer) -> Vec<Value> {
    fake.list("events.k8s.io/v1", "Event")
        .into_iter()
        .filter(|e| e["reason"] == "ReceiverMismatch" && e["type"] == "Warning")
        .filter(|e| e["regarding"]["name"] == "ingress-nginx-controller")
        .collect()
}

/// The fake API server with hairpin's CRD and namespace, CoreDNS, `shop.example.com` on the
/// DigitalOcean load balancer in front of ingress-nginx saying `use_proxy_protocol`, and the
/// controller (on the DNS cure) started on it.
async fn start_do_ingress_nginx(
    use_proxy_protocol: &str,
) -> (FakeApiServer, support::controller::Running) {
    let fake = FakeApiServer::start().await;
    fake.install_hairpin_crd();
    fake.create_namespace("hairpin");
    fake.apply(fixtures::coredns(COREFILE));
    fake.apply(fixtures::ingress(
        "shop",
        "shop",
        &["shop.example.com"],
        "198.51.100.10",
    ));
    do_ingress_nginx(&fake, use_proxy_protocol);
    let running = start(&fake, dns_config("pod-a"));
    (fake, running)
}

#[tokio::test]
async fn a_receiver_that_comes_to_disagree_keeps_the_cure_in_place_and_says_so() {
    // Both ends agree: hairpinned.
    let (fake, running) = start_do_ingress_nginx("true").await;
    assert!(
        fake.wait_until(Duration::from_secs(15), |f| corefile(f).contains(RULE)
            && do_hairpin(f).is_some_and(
                |h| h["status"]["receiver"]["proxyProtocol"] == "required"
            ))
        .await
        .is_some(),
        "{}\n{:?}",
        corefile(&fake),
        do_hairpin(&fake)
    );

    // The receiver turns PROXY off while the load balancer still sends it: broken for every
    // client outside, and hairpin tears nothing down.
    set_use_proxy_protocol(&fake, "false");
    fake.wait_until(Duration::from_secs(15), |f| {
        do_hairpin(f).is_some_and(|h| condition(&h, "ReceiverMismatch")["status"] == "True")
    })
    .await
    .unwrap_or_else(|| panic!("{:?}", do_hairpin(&fake)));
    let h = do_hairpin(&fake).unwrap();
    let kept = |fake: &FakeApiServer| {
        let text = corefile(fake);
        assert!(text.contains(RULE), "the DNS rule is kept:\n{text}");
        assert!(
            fake.get("v1", "Service", Some("hairpin"), HAIRPIN_SERVICE)
                .is_some(),
            "the hairpin Service is kept"
        );
    };
    kept(&fake);
    let receiver = &h["status"]["receiver"];
    assert_eq!(receiver["proxyProtocol"], "off");
    assert_eq!(receiver["setting"], "use-proxy-protocol: \"false\"");
    let mismatch = receiver["mismatch"].as_str().unwrap();
    for part in [
        "BROKEN for clients outside the cluster too",
        "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol=true",
        "PROXY off by use-proxy-protocol: \"false\" (ConfigMap ingress-nginx/ingress-nginx-controller)",
        "hairpin keeps the cure it already has in place",
        "Fix: turn the PROXY protocol on in the receiver, or off on the load balancer",
    ] {
        assert!(mismatch.contains(part), "{part}: {mismatch}");
    }
    let c = condition(&h, "ReceiverMismatch");
    assert_eq!(c["reason"], "Mismatch");
    assert_eq!(c["message"], mismatch);
    // Still serving the in-cluster clients.
    assert_eq!(h["status"]["hostnames"][0]["name"], "shop.example.com");
    assert_eq!(condition(&h, "DNSWritten")["status"], "True");
    // A Warning on the load balancer Service, with both settings and the fix.
    fake.wait_until(Duration::from_secs(5), |f| !mismatch_events(f).is_empty())
        .await
        .expect("a ReceiverMismatch Event");
    assert_eq!(mismatch_events(&fake)[0]["note"], mismatch);

    // A new leader (a restart) keeps it too: it finds the cure in place.
    running.stop().await;
    let running = start(&fake, dns_config("pod-b"));
    let reconciles = fake
        .wait_until(Duration::from_secs(10), |_| {
            running.metrics.reconciles.get() >= 2
        })
        .await;
    assert!(reconciles.is_some());
    tokio::time::sleep(Duration::from_millis(500)).await;
    kept(&fake);
    assert_eq!(
        condition(&do_hairpin(&fake).unwrap(), "ReceiverMismatch")["status"],
        "True"
    );

    // They agree again: the condition goes, the cure stays.
    set_use_proxy_protocol(&fake, "true");
    assert!(
        fake.wait_until(Duration::from_secs(15), |f| do_hairpin(f)
            .is_some_and(|h| condition(&h, "ReceiverMismatch").is_null()
                && h["status"]["receiver"]["proxyProtocol"] == "required"))
            .await
            .is_some(),
        "{:?}",
        do_hairpin(&fake)
    );
    kept(&fake);
    running.stop().await;
}

#[tokio::test]
async fn a_mismatch_without_a_cure_in_place_starts_none_and_warns() {
    let (fake, running) = start_do_ingress_nginx("false").await;
    fake.wait_until(Duration::from_secs(15), |f| !mismatch_events(f).is_empty())
        .await
        .expect("a ReceiverMismatch Event");
    let events = mismatch_events(&fake);
    let note = events[0]["note"].as_str().unwrap();
    assert!(
        note.contains("hairpin changes nothing for this load balancer"),
        "{note}"
    );
    assert!(!corefile(&fake).contains("shop.example.com"));
    assert!(
        fake.get("v1", "Service", Some("hairpin"), HAIRPIN_SERVICE)
            .is_none()
    );
    assert!(do_hairpin(&fake).is_none());
    running.stop().await;
}

/// Issue 38: a fixture of `crates/planner/tests/fixtures/receivers/` in the fake, with the
/// shipped manifest's grants and the CoreDNS ConfigMap, and `annotation` on its load balancer.
fn receiver_fixture(fake: &FakeApiServer, yaml: &str, annotation: Option<&str>) {
    fake.install_hairpin_crd();
    fake.create_namespace("hairpin");
    fake.apply(fixtures::coredns(COREFILE));
    let yaml = match annotation {
        Some(a) => yaml.replacen(
            "kind: Service\nmetadata:\n",
            &format!("kind: Service\nmetadata:\n  annotations:\n    {a}\n"),
            1,
        ),
        None => yaml.to_owned(),
    };
    load(fake, &yaml);
    fake.authorize_only(manifest_grants());
}

/// The `Hairpin` of `namespace/name` once its status names the receiver.
async fn with_receiver(fake: &FakeApiServer, namespace: &str, name: &str) -> Value {
    fake.wait_until(Duration::from_secs(15), |f| {
        hairpin(f, namespace, name).is_some_and(|h| h["status"]["receiver"].is_object())
    })
    .await
    .unwrap_or_else(|| panic!("not hairpinned: {:?}", hairpin(fake, namespace, name)));
    let forbidden: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.status == 403)
        .map(|r| format!("{} {}", r.method, r.uri))
        .collect();
    assert!(
        forbidden.is_empty(),
        "the manifest grants it: {forbidden:?}"
    );
    hairpin(fake, namespace, name).unwrap()
}

/// Issue 38: Kong with `proxy_protocol` on its 8443 listeners only, bare metal: the status
/// carries the setting per port, and only 443 is hairpinned with PROXY.
#[tokio::test]
async fn a_per_port_receiver_is_in_the_status_per_port() {
    let fake = FakeApiServer::start().await;
    receiver_fixture(
        &fake,
        include_str!("../../planner/tests/fixtures/receivers/kong-tls-only.yaml"),
        None,
    );
    let running = start(&fake, dns_config("pod-a"));
    let h = with_receiver(&fake, "kong", "kong-kong-proxy").await;
    let receiver = &h["status"]["receiver"];
    assert_eq!(receiver["proxyProtocol"], "per-port", "{receiver}");
    assert_eq!(receiver["ports"][0]["port"], 80);
    assert_eq!(receiver["ports"][0]["proxyProtocol"], "off");
    assert_eq!(receiver["ports"][1]["port"], 443);
    assert_eq!(receiver["ports"][1]["proxyProtocol"], "required");
    assert_eq!(condition(&h, "ReceiverMismatch"), Value::Null);
    running.stop().await;
}

/// Issue 38: Istio with PROXY turned on by an EnvoyFilter, read from its CRD with the
/// manifest's grants: unknown, never off; the load balancer's annotation decides and nothing
/// says BROKEN.
#[tokio::test]
async fn an_envoy_filter_on_the_gateway_makes_its_setting_unknown_not_off() {
    let fake = FakeApiServer::start().await;
    fake.register(ResourceType::new(
        "networking.istio.io",
        "v1alpha3",
        "envoyfilters",
        "EnvoyFilter",
        true,
    ));
    receiver_fixture(
        &fake,
        include_str!("../../planner/tests/fixtures/receivers/istio-envoyfilter.yaml"),
        Some("load-balancer.hetzner.cloud/uses-proxyprotocol: \"true\""),
    );
    let running = start(&fake, dns_config("pod-a"));
    let h = with_receiver(&fake, "istio-system", "istio-ingressgateway").await;
    let receiver = &h["status"]["receiver"];
    assert_eq!(receiver["proxyProtocol"], "unknown", "{receiver}");
    assert!(
        receiver["setting"]
            .as_str()
            .is_some_and(|s| s.contains("EnvoyFilter istio-system/proxy-protocol")),
        "{receiver}"
    );
    assert_eq!(h["status"]["proxy"], "v1");
    assert_eq!(condition(&h, "ReceiverMismatch"), Value::Null);
    running.stop().await;
}

/// Issue 38: NGINX Gateway Fabric 1.x, its cluster-scoped NginxProxy (v1alpha1) named by the
/// GatewayClass, read from its CRD with the manifest's grants: PROXY required, hairpinned on
/// bare metal.
#[tokio::test]
async fn ngf_1x_cluster_scoped_nginx_proxy_is_read() {
    let fake = FakeApiServer::start().await;
    fake.install_gateway_api();
    fake.register(ResourceType::new(
        "gateway.nginx.org",
        "v1alpha1",
        "nginxproxies",
        "NginxProxy",
        false,
    ));
    receiver_fixture(
        &fake,
        include_str!("../../planner/tests/fixtures/receivers/nginx-gateway-fabric-1x.yaml"),
        None,
    );
    let running = start(&fake, dns_config("pod-a"));
    let h = with_receiver(&fake, "nginx-gateway", "ngf-nginx-gateway-fabric").await;
    let receiver = &h["status"]["receiver"];
    assert_eq!(receiver["proxyProtocol"], "required", "{receiver}");
    assert_eq!(receiver["readFrom"], "NginxProxy ngf-proxy-config");
    running.stop().await;
}
