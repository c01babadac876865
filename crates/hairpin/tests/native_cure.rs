//! The native cure (issue 30) end to end on a real kube-apiserver and kube-proxy (v1.31.14,
//! `../shared/peers/kubernetes`, driven by `hairpin_testkit::kube`): the shipped manifest's
//! CRD, ServiceAccount and RBAC; `hairpin controller --cure auto` run inside the node's network
//! namespace with that ServiceAccount's token (so its probe is an in-cluster client, subject to
//! kube-proxy's rules like any pod); the ingress is nginx requiring the PROXY protocol behind a
//! LoadBalancer Service whose EndpointSlice the test writes, and the cloud load balancer is
//! HAProxy `send-proxy` on the LB IP to the NodePort.
//!
//! - a) kube-proxy honours ipMode: hairpin sets `ipMode: Proxy`, the probe proves it, the
//!   record says `proven`, no DNS rule exists for the load balancer's name, and a curl of the
//!   LB IP and of its hostname from the namespace reaches nginx with HAProxy's header.
//! - c) a stand-in cloud controller writes the status back without `ipMode` (as the service
//!   controller does on a Service change): hairpin re-asserts it; the window is printed.
//! - e) `hairpin uninstall` with the controller running: the status says what it said before
//!   (`ipMode: VIP`) and the Corefile is the original, byte for byte.
//! - b) kube-proxy with `--feature-gates=LoadBalancerIPMode=false`: the probe fails, `ipMode`
//!   is put back, the record says `failed` with the probe's outcome, and the DNS cure is
//!   written for the name.
//!
//! Needs root, etcd and the test peers; without them each test prints why and passes.

mod support;

use std::time::{Duration, Instant};

use hairpin_testkit::kube::{self, ApiServer, KubeNode, NodeOptions};
use serde_json::{Value, json};

const POD_IP: &str = "10.244.0.10";
const HOST: &str = "shop.example.test";
const COREFILE: &str = ".:53 {\n    errors\n    health\n    ready\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n    }\n    forward . /etc/resolv.conf\n    cache 30\n    loop\n    reload\n    loadbalance\n}\n";

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

/// The cluster of one scenario: CoreDNS's ConfigMap, the ingress LoadBalancer Service (a
/// DigitalOcean PROXY load balancer: its controller never sets ipMode) with its EndpointSlice
/// and status, an Ingress for [`HOST`] on it. Returns the nodePort.
fn seed(api: &ApiServer, lb_ip: &str) -> u16 {
    install_manifest(api);
    api.apply(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "kube-system", "name": "coredns"},
        "data": {"Corefile": COREFILE}
    }));
    api.ensure_namespace("ingress");
    api.ensure_namespace("web");
    let svc = api.apply(&json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": "ingress", "name": "nginx", "annotations": {
            "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol": "true"}},
        "spec": {"type": "LoadBalancer",
                 "ports": [{"name": "http", "port": 80, "targetPort": 80, "protocol": "TCP"}]}
    }));
    api.apply(&json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"namespace": "ingress", "name": "nginx-1",
                     "labels": {"kubernetes.io/service-name": "nginx"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [POD_IP], "conditions": {"ready": true}}],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]
    }));
    let stored = set_lb_status(api, json!({"ip": lb_ip}));
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

/// What a cloud controller's status write does: the whole `ingress` list replaced.
fn set_lb_status(api: &ApiServer, ingress: Value) -> Value {
    api.patch_status(
        "/api/v1/namespaces/ingress/services/nginx",
        &json!({"status": {"loadBalancer": {"ingress": [ingress]}}}),
    )
}

fn ip_mode(api: &ApiServer) -> Option<String> {
    api.get("/api/v1/namespaces/ingress/services/nginx")?["status"]["loadBalancer"]["ingress"][0]
        ["ipMode"]
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

/// A node whose kube-proxy honours ipMode or not, with the ingress and the cloud LB running,
/// and `hairpin controller --cure auto` inside it with the shipped ServiceAccount's token.
fn node_with_controller(api: &ApiServer, options: &NodeOptions, lb_ip: &str) -> KubeNode {
    let node_port = seed(api, lb_ip);
    let mut node = KubeNode::start(api, options).expect("start the node");
    node.add_address(lb_ip);
    node.add_address(POD_IP);
    node.start_ingress(POD_IP, 80).expect("start nginx");
    node.start_cloud_lb(lb_ip, 80, node_port, false)
        .expect("start haproxy");
    node.wait_lb_rule(lb_ip, true, Duration::from_secs(10))
        .expect("kube-proxy short-circuits the LB IP");
    let broken = node.curl(&format!("http://{lb_ip}/"), &[]);
    assert_eq!(
        broken.exit,
        Some(52),
        "the hairpin failure first: {broken:?}"
    );

    let token = api.service_account_token("hairpin", "hairpin-controller");
    let kubeconfig = api
        .kubeconfig_for("hairpin-controller", &token)
        .expect("kubeconfig");
    let mut controller = node.command(env!("CARGO_BIN_EXE_hairpin"));
    controller
        .args(["controller", "--identity", "controller-0", "--cure", "auto"])
        .args(["--verify-hostnames", "off", "--admin-addr", "127.0.0.1:0"])
        .args(["--debounce", "50ms", "--log-format", "text"])
        .arg("--kubeconfig")
        .arg(&kubeconfig);
    node.spawn("controller", controller)
        .expect("start hairpin controller");
    node
}

#[test]
fn native_cure_proven_reasserted_and_restored_by_uninstall() {
    if let Some(reason) = kube::skip_reason() {
        println!("SKIPPED native_cure_proven_reasserted_and_restored_by_uninstall: {reason}");
        return;
    }
    let lb_ip = "203.0.113.20";
    let api = ApiServer::start().expect("start kube-apiserver");
    let node = node_with_controller(&api, &NodeOptions::iptables("node-native"), lb_ip);
    let log = || node.log("controller");

    // a) set, proven, no DNS rule; in-cluster clients go through the real load balancer.
    let proven = wait_for(
        "the native cure proven",
        Duration::from_secs(30),
        || record(&api).is_some_and(|e| e["state"] == "proven"),
        log,
    );
    println!(
        "a) native cure proven {proven:?} after the controller started; record: {}",
        record(&api).unwrap()
    );
    assert_eq!(ip_mode(&api).as_deref(), Some("Proxy"));
    let via_ip = node.curl(&format!("http://{lb_ip}/"), &[]);
    assert!(via_ip.ok(), "{via_ip:?}");
    assert!(
        via_ip
            .body
            .starts_with(&format!("proxy_protocol_addr={lb_ip} ")),
        "answered through HAProxy: {via_ip:?}"
    );
    let via_name = node.curl(
        &format!("http://{HOST}/"),
        &["--resolve", &format!("{HOST}:80:{lb_ip}")],
    );
    assert!(via_name.ok(), "{via_name:?}");
    // The DNS cure is gone (or never was) for this load balancer once native is proven.
    wait_for(
        "no DNS rule for the native load balancer",
        Duration::from_secs(10),
        || !corefile(&api).contains(HOST),
        log,
    );

    // c) a cloud controller's rewrite without ipMode: re-asserted.
    // The write's own answer says VIP (a read after it may already see hairpin's Proxy).
    let rewritten = set_lb_status(&api, json!({"ip": lb_ip}));
    assert_eq!(
        rewritten["status"]["loadBalancer"]["ingress"][0]["ipMode"],
        "VIP"
    );
    let window = wait_for(
        "ipMode: Proxy re-asserted",
        Duration::from_secs(10),
        || ip_mode(&api).as_deref() == Some("Proxy"),
        log,
    );
    let working = wait_for(
        "the curl works again",
        Duration::from_secs(10),
        || {
            node.curl(&format!("http://{lb_ip}/"), &["--max-time", "1"])
                .ok()
        },
        log,
    );
    println!(
        "c) a rewrite without ipMode was re-asserted after {window:?}; curl through the LB worked again {working:?} later"
    );

    // e) uninstall with the controller running: the status and the Corefile as before.
    let out = support::hairpin_command()
        .arg("uninstall")
        .arg("--kubeconfig")
        .arg(api.admin_kubeconfig())
        .output()
        .expect("run hairpin uninstall");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("restored the status ipMode of Service ingress/nginx"),
        "{stdout}"
    );
    assert_eq!(ip_mode(&api).as_deref(), Some("VIP"));
    assert_eq!(corefile(&api), COREFILE);
    assert!(record(&api).is_none());
    // The fenced controller writes nothing more: still VIP a moment later.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(ip_mode(&api).as_deref(), Some("VIP"), "{}", log());
    println!("e) uninstall:\n{stdout}");
}

#[test]
fn native_cure_not_honoured_falls_back_to_dns() {
    if let Some(reason) = kube::skip_reason() {
        println!("SKIPPED native_cure_not_honoured_falls_back_to_dns: {reason}");
        return;
    }
    let lb_ip = "203.0.113.21";
    let api = ApiServer::start().expect("start kube-apiserver");
    let gate_off = NodeOptions {
        honour_ip_mode: false,
        ..NodeOptions::iptables("node-old")
    };
    let node = node_with_controller(&api, &gate_off, lb_ip);
    let log = || node.log("controller");
    // Make before break: the DNS cure is written while the probe runs.
    wait_for(
        "the DNS cure written",
        Duration::from_secs(30),
        || corefile(&api).contains(HOST),
        log,
    );
    let failed = wait_for(
        "the probe failed",
        Duration::from_secs(40),
        || record(&api).is_some_and(|e| e["state"] == "failed"),
        log,
    );
    let entry = record(&api).unwrap();
    println!("b) probe failed after {failed:?}: {entry}");
    assert!(
        entry["reason"]
            .as_str()
            .is_some_and(|r| r.contains("empty reply")),
        "{entry}"
    );
    wait_for(
        "ipMode put back",
        Duration::from_secs(10),
        || ip_mode(&api).as_deref() == Some("VIP"),
        log,
    );
    // The DNS cure stays.
    std::thread::sleep(Duration::from_secs(1));
    assert!(corefile(&api).contains(HOST), "{}", corefile(&api));
    assert_eq!(ip_mode(&api).as_deref(), Some("VIP"));
}
