//! The native cure never makes anything worse, for clients outside the cluster too (issue
//! 36), end to end on a real kube-apiserver and kube-proxy (v1.31.14, `../shared/peers/
//! kubernetes`, driven by `hairpin_testkit::kube`) with a client OUTSIDE the cluster
//! (`hairpin_testkit::outside`): a network namespace of its own, sending requests to the load
//! balancer IP in a loop during the whole scenario, every one of which must be answered.
//!
//! `hairpin controller --cure auto` (the default) runs inside the node's network namespace with
//! the shipped ServiceAccount's token, so its probe is an in-cluster client subject to
//! kube-proxy's rules like any pod; the ingress is nginx requiring the PROXY protocol on the pod
//! IP behind a LoadBalancer Service whose EndpointSlice the test writes.
//!
//! - a) a proxy load balancer (DigitalOcean's shape: HAProxy in a namespace of its own holding
//!   the LB IP, connecting to the NodePort with `send-proxy`; the outside client reaches it
//!   without crossing the node): native proven and effective, an in-cluster client crosses
//!   HAProxy, no DNS rule; the outside client never fails.
//!
//! Each scenario prints its figures (outside-client requests and failures, native effective
//! time). Needs root, etcd, HAProxy, nginx and the test peers; without them each test prints
//! why and passes.

use std::process::Command;
use std::time::{Duration, Instant};

use hairpin_testkit::kube::{self, ApiServer, KubeNode, NodeOptions};
use hairpin_testkit::outside::{ClientLoop, CloudLb, Outside, Tally};
use serde_json::{Value, json};

const POD_IP: &str = "10.244.0.10";
const HOST: &str = "shop.example.test";
const COREFILE: &str = ".:53 {\n    errors\n    health\n    ready\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n    }\n    forward . /etc/resolv.conf\n    cache 30\n    loop\n    reload\n    loadbalance\n}\n";
/// The load balancer Service of every scenario.
const SERVICE: &str = "/api/v1/namespaces/ingress/services/nginx";

/// Every object of the shipped manifest but the workloads (nothing runs them here).
fn install_manifest(api: &ApiServer) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/hairpin.yaml"
    ))
    .expect("read deploy/hairpin.yaml");
    for doc in text.split("\n---") {
        let Ok(object) = serde_saphyr::from_str::<Value>(doc) else {
            continue;
        };
        let kind = object["kind"].as_str().unwrap_or_default();
        if kind.is_empty() || ["Deployment", "DaemonSet", "PodDisruptionBudget"].contains(&kind) {
            continue;
        }
        api.apply(&object);
    }
}

/// How the load balancer delivers traffic to the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// A proxy (DigitalOcean): it terminates the client's TCP and connects to the NodePort;
    /// its controller never sets ipMode.
    Proxy,
}

/// The cluster of one scenario: CoreDNS's ConfigMap, the ingress LoadBalancer Service
/// `ingress/nginx` of `shape` with its EndpointSlice (the pod [`POD_IP`]) and status, an
/// Ingress for [`HOST`] on it. Returns the nodePort.
fn seed(api: &ApiServer, shape: Shape, lb_ip: &str) -> u16 {
    install_manifest(api);
    api.apply(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "kube-system", "name": "coredns"},
        "data": {"Corefile": COREFILE}
    }));
    api.ensure_namespace("ingress");
    api.ensure_namespace("web");
    let svc = match shape {
        Shape::Proxy => api.apply(&json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": "ingress", "name": "nginx", "annotations": {
                "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol": "true"}},
            "spec": {"type": "LoadBalancer",
                     "ports": [{"name": "http", "port": 80, "targetPort": 80, "protocol": "TCP"}]}
        })),
    };
    api.apply(&json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"namespace": "ingress", "name": "nginx-1",
                     "labels": {"kubernetes.io/service-name": "nginx"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [POD_IP], "conditions": {"ready": true}}],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]
    }));
    let stored = api.patch_status(
        SERVICE,
        &json!({"status": {"loadBalancer": {"ingress": [{"ip": lb_ip}]}}}),
    );
    assert_eq!(
        stored["status"]["loadBalancer"]["ingress"][0]["ipMode"], "VIP",
        "the apiserver defaults ipMode to VIP"
    );
    api.apply(&json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"namespace": "web", "name": "shop"},
        "spec": {"rules": [{"host": HOST, "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "shop", "port": {"number": 80}}}}]}}]}
    }));
    api.patch_status(
        "/apis/networking.k8s.io/v1/namespaces/web/ingresses/shop",
        &json!({"status": {"loadBalancer": {"ingress": [{"ip": lb_ip}]}}}),
    );
    let port = svc["spec"]["ports"][0]["nodePort"]
        .as_u64()
        .expect("nodePort");
    u16::try_from(port).expect("nodePort fits u16")
}

fn ip_mode(api: &ApiServer) -> Option<String> {
    api.get(SERVICE)?["status"]["loadBalancer"]["ingress"][0]["ipMode"]
        .as_str()
        .map(str::to_owned)
}

/// The native cure's record entry of the load balancer, when there is one.
fn record(api: &ApiServer) -> Option<Value> {
    let cm = api.get("/api/v1/namespaces/hairpin/configmaps/hairpin-native")?;
    let text = cm["data"]["native.json"].as_str()?;
    let record: Value = serde_json::from_str(text).ok()?;
    Some(record["loadBalancers"]["ingress/nginx"].clone()).filter(|e| !e.is_null())
}

fn corefile(api: &ApiServer) -> String {
    api.get("/api/v1/namespaces/kube-system/configmaps/coredns")
        .and_then(|cm| cm["data"]["Corefile"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Polls `what` every 20 ms until it holds; how long it took.
fn wait_for(
    what: &str,
    timeout: Duration,
    mut done: impl FnMut() -> bool,
    log: impl Fn() -> String,
) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < timeout,
            "{what}: not within {timeout:?}\n--- controller log ---\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    started.elapsed()
}

/// `hairpin controller --cure <cure>` inside the node's namespace, with the shipped
/// ServiceAccount's token.
fn controller_command(api: &ApiServer, node: &KubeNode, identity: &str, cure: &str) -> Command {
    let token = api.service_account_token("hairpin", "hairpin-controller");
    let kubeconfig = api
        .kubeconfig_for("hairpin-controller", &token)
        .expect("kubeconfig");
    let mut controller = node.command(env!("CARGO_BIN_EXE_hairpin"));
    controller
        .args(["controller", "--identity", identity, "--cure", cure])
        .args(["--verify-hostnames", "off", "--admin-addr", "127.0.0.1:0"])
        .args(["--debounce", "50ms", "--log-format", "text"])
        .arg("--kubeconfig")
        .arg(&kubeconfig);
    controller
}

/// A node with kube-proxy and the ingress (nginx requiring PROXY on [`POD_IP`]), kube-proxy
/// short-circuiting the LB IP.
fn node_with_ingress(api: &ApiServer, name: &str) -> KubeNode {
    let mut node = KubeNode::start(api, &NodeOptions::iptables(name)).expect("start the node");
    node.add_address(POD_IP);
    node.start_ingress(POD_IP, 80).expect("start nginx");
    node
}

/// Waits for `client`'s first answer: the outside path works before hairpin starts.
fn first_answer(client: &ClientLoop, what: &str) {
    let answered = client.wait_answered_after(Duration::ZERO, Duration::from_secs(20));
    assert!(
        answered.is_some(),
        "{what}: no answer before hairpin started: {:?}",
        client.attempts()
    );
}

/// The outside client's verdict: every request answered.
fn assert_no_failure(scenario: &str, tally: &Tally, log: &str) {
    println!("{scenario}) outside client: {tally}");
    assert!(!tally.attempts.is_empty(), "{scenario}) the client ran");
    assert!(
        tally.failures().is_empty(),
        "{scenario}) the outside client failed: {tally}\n{:#?}\n--- controller log ---\n{log}",
        tally.failures()
    );
}

#[test]
fn proxy_lb_native_proven_outside_client_unharmed() {
    let test = "proxy_lb_native_proven_outside_client_unharmed";
    if let Some(reason) = kube::skip_reason() {
        println!("SKIPPED {test}: {reason}");
        return;
    }
    let lb_ip = "203.0.113.40";
    let api = ApiServer::start().expect("start kube-apiserver");
    let node_port = seed(&api, Shape::Proxy, lb_ip);
    let mut node = node_with_ingress(&api, "node-proxy-lb");
    let lb = CloudLb::start(&node, lb_ip, 80, node_port, false).expect("start the cloud LB");
    node.wait_lb_rule(lb_ip, true, Duration::from_secs(10))
        .expect("kube-proxy short-circuits the LB IP");
    // The hairpin failure first: an in-cluster client is short-circuited to nginx, no header.
    let broken = node.curl(&format!("http://{lb_ip}/"), &[]);
    assert_eq!(broken.exit, Some(52), "the hairpin failure: {broken:?}");
    // The outside client reaches the load balancer without crossing the node.
    let outside = Outside::client(lb.netns()).expect("the outside client's namespace");
    outside.route(lb_ip).expect("route the LB IP");
    let url = format!("http://{lb_ip}/");
    let client = outside
        .client_loop(&url, &[])
        .expect("start the outside client");
    first_answer(&client, "the outside client through HAProxy");
    let inside = ClientLoop::start(node.netns(), node.dir(), &url, &[]).expect("in-cluster loop");

    let started = inside.elapsed();
    let command = controller_command(&api, &node, "controller-0", "auto");
    node.spawn("controller", command)
        .expect("start hairpin controller");
    let log = || node.log("controller");
    let proven = wait_for(
        "the native cure proven",
        Duration::from_secs(40),
        || record(&api).is_some_and(|e| e["state"] == "proven"),
        log,
    );
    assert_eq!(ip_mode(&api).as_deref(), Some("Proxy"));
    let effective = inside
        .wait_answered_after(started, Duration::from_secs(10))
        .map(|at| at - started);
    assert!(effective.is_some(), "{:?}", inside.attempts());
    wait_for(
        "no DNS rule for the native load balancer",
        Duration::from_secs(10),
        || !corefile(&api).contains(HOST),
        log,
    );
    // The in-cluster client crosses HAProxy (which connects from its own namespace's address).
    let via_lb = node.curl(&url, &[]);
    assert!(
        via_lb
            .body
            .starts_with(&format!("proxy_protocol_addr={} ", lb.node_side_address())),
        "answered through HAProxy's header: {via_lb:?}\n{}",
        lb.log()
    );
    // The outside client a while longer on the native cure.
    let end = client.elapsed() + Duration::from_secs(2);
    client.wait_answered_after(end, Duration::from_secs(10));
    let inside = inside.stop();
    let tally = client.stop();
    println!(
        "a) native proven {proven:.1?} after the controller started, effective (an in-cluster request through the LB answered) {:.1?} after it; record: {}",
        effective.unwrap_or_default(),
        record(&api).unwrap_or_default()
    );
    println!("a) in-cluster client: {inside}");
    assert_no_failure("a", &tally, &log());
}
