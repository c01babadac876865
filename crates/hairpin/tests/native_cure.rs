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
//! - e) `hairpin uninstall` with the controller running, as the uninstall Job runs it (the
//!   controller's ServiceAccount): the status says what it said before (`ipMode: VIP`) and the
//!   Corefile is the original, byte for byte.
//! - b) kube-proxy with `--feature-gates=LoadBalancerIPMode=false`: the probe fails, `ipMode`
//!   is put back, the record says `failed` with the probe's outcome, and the DNS cure is
//!   written for the name: real CoreDNS running the Corefile hairpin wrote answers the name
//!   with the hairpin Service, and a curl of the name is answered by nginx through `hairpin
//!   proxy` (which wrote the header), while the LB IP itself is still short-circuited.
//! - d) an install on the DNS cure (`--cure dns`) upgraded to `--cure auto` (a new controller
//!   started, then the old one stopped, as a rolling update does) while a client resolves the
//!   name with CoreDNS and curls it in a loop: the native cure is proven, the DNS rule goes,
//!   the name answers the LB IP, and the client sees no failure at any moment.
//!
//! The DNS cure's path (b, d): the controller creates the hairpin Service
//! `hairpin/hairpin-ingress-nginx` (selecting the proxy pods) and publishes the proxies' route
//! table in `hairpin/hairpin-routes`; its Corefile rule rewrites the name to that Service's
//! name. Nothing here runs Deployments or the EndpointSlice controller, so the test plays
//! their parts: `hairpin proxy --routes-configmap hairpin/hairpin-routes` runs in the node's
//! namespace with the shipped `hairpin-proxy` ServiceAccount's token, on the pod IP
//! [`PROXY_POD_IP`], and the test writes the hairpin Service's EndpointSlice for it (so
//! kube-proxy DNATs the ClusterIP to it). The proxy's upstream, `nginx.ingress.svc.cluster.local`,
//! resolves through the namespace's `/etc/hosts` (`/etc/netns/<ns>/hosts`) to the ingress
//! Service's ClusterIP, as cluster DNS would answer a pod. CoreDNS (the real 1.12.2, from
//! `../shared/peers/coredns`) runs the Corefile read from the ConfigMap, made local; its
//! stand-in `kubernetes` plugin answers the hairpin Service's name with its ClusterIP, and its
//! upstream answers [`HOST`] with the LB IP (the public DNS).
//!
//! Needs root, etcd and the test peers (and the CoreDNS peer for b's name and d); without
//! them each test prints why and passes.

mod support;

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hairpin_testkit::coredns::{self, CoreDns, RecordType};
use hairpin_testkit::kube::{self, ApiServer, Curl, Group, KubeNode, NodeOptions};
use serde_json::{Value, json};

const POD_IP: &str = "10.244.0.10";
/// The `hairpin proxy` "pod" in the node's namespace.
const PROXY_POD_IP: &str = "10.244.0.20";
/// The proxy's admin server, inside the node's namespace.
const PROXY_ADMIN: &str = "127.0.0.1:9091";
/// The hairpin Service the controller creates for `ingress/nginx`, and its cluster DNS name.
const HAIRPIN_SERVICE: &str = "hairpin-ingress-nginx";
const HAIRPIN_SERVICE_FQDN: &str = "hairpin-ingress-nginx.hairpin.svc.cluster.local";
/// The ingress Service's cluster DNS name (the proxy's upstream).
const INGRESS_FQDN: &str = "nginx.ingress.svc.cluster.local";
const HOST: &str = "shop.example.test";
const COREFILE: &str = ".:53 {\n    errors\n    health\n    ready\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n    }\n    forward . /etc/resolv.conf\n    cache 30\n    loop\n    reload\n    loadbalance\n}\n";

/// The cluster of one scenario: CoreDNS's ConfigMap, the ingress LoadBalancer Service (a
/// DigitalOcean PROXY load balancer: its controller never sets ipMode) with its EndpointSlice
/// and status, an Ingress for [`HOST`] on it. Returns the nodePort.
fn seed(api: &ApiServer, lb_ip: &str) -> u16 {
    support::install_manifest(api);
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
    let mut node = node_with_ingress(api, options, lb_ip);
    let controller = controller_command(api, &node, "controller-0", "auto");
    node.spawn("controller", controller)
        .expect("start hairpin controller");
    node
}

/// A node whose kube-proxy honours ipMode or not, with the ingress and the cloud LB running,
/// and the hairpin failure shown: a curl of the LB IP gets an empty reply.
fn node_with_ingress(api: &ApiServer, options: &NodeOptions, lb_ip: &str) -> KubeNode {
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
    node
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

/// `/etc/netns/<namespace>/`, which `ip netns exec` bind-mounts over `/etc` files for every
/// process it starts in the namespace; removed on drop.
struct NetnsEtc(PathBuf);

impl NetnsEtc {
    /// The namespace's `/etc/hosts`: localhost and `lines`.
    fn hosts(node: &KubeNode, lines: &str) -> Self {
        let dir = PathBuf::from("/etc/netns").join(node.netns());
        std::fs::create_dir_all(&dir).expect("create /etc/netns/<ns>");
        std::fs::write(
            dir.join("hosts"),
            format!("127.0.0.1 localhost\n::1 localhost\n{lines}"),
        )
        .expect("write /etc/netns/<ns>/hosts");
        NetnsEtc(dir)
    }
}

impl Drop for NetnsEtc {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn cluster_ip(api: &ApiServer, namespace: &str, name: &str) -> Option<String> {
    api.get(&format!("/api/v1/namespaces/{namespace}/services/{name}"))?["spec"]["clusterIP"]
        .as_str()
        .map(str::to_owned)
}

/// What the EndpointSlice controller would write for the hairpin Service once the proxy pod
/// [`PROXY_POD_IP`] is ready (waiting for the controller to create the Service first): its
/// ClusterIP and the proxy's listener port.
fn write_proxy_endpoints(api: &ApiServer, log: impl Fn() -> String) -> (String, u64) {
    let path = format!("/api/v1/namespaces/hairpin/services/{HAIRPIN_SERVICE}");
    wait_for(
        "the hairpin Service created",
        Duration::from_secs(30),
        || api.get(&path).is_some(),
        log,
    );
    let service = api.get(&path).expect("the hairpin Service");
    let proxy_ip = service["spec"]["clusterIP"]
        .as_str()
        .expect("clusterIP")
        .to_owned();
    let ports: Vec<Value> = service["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| json!({"name": p["name"], "port": p["targetPort"], "protocol": "TCP"}))
        .collect();
    let listener = ports[0]["port"].as_u64().expect("a numeric targetPort");
    api.apply(&json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"namespace": "hairpin", "name": format!("{HAIRPIN_SERVICE}-proxy"),
                     "labels": {"kubernetes.io/service-name": HAIRPIN_SERVICE}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [PROXY_POD_IP], "conditions": {"ready": true}}],
        "ports": ports
    }));
    (proxy_ip, listener)
}

/// `hairpin proxy` following the controller's route table, as its Deployment runs it: in the
/// node's namespace on [`PROXY_POD_IP`], with the shipped `hairpin-proxy` ServiceAccount's
/// token, behind the hairpin Service ([`write_proxy_endpoints`]). Returns the hairpin
/// Service's ClusterIP once a curl of it with the name is answered by nginx through the
/// proxy; the guard keeps the namespace's hosts file (the proxy's upstream name) in place.
fn start_hairpin_proxy(
    api: &ApiServer,
    node: &mut KubeNode,
    log: impl Fn() -> String,
) -> (String, NetnsEtc) {
    let (proxy_ip, listener) = write_proxy_endpoints(api, &log);
    let ingress_ip = cluster_ip(api, "ingress", "nginx").expect("the ingress ClusterIP");
    let hosts = NetnsEtc::hosts(node, &format!("{ingress_ip} {INGRESS_FQDN}\n"));
    node.add_address(PROXY_POD_IP);
    let token = api.service_account_token("hairpin", "hairpin-proxy");
    let kubeconfig = api
        .kubeconfig_for("hairpin-proxy", &token)
        .expect("kubeconfig");
    let mut proxy = node.command(env!("CARGO_BIN_EXE_hairpin"));
    proxy
        .args(["proxy", "--routes-configmap", "hairpin/hairpin-routes"])
        .args([
            "--admin-addr",
            PROXY_ADMIN,
            "--workers",
            "1",
            "--log-format",
            "text",
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig);
    node.spawn("proxy", proxy).expect("start hairpin proxy");
    node.wait_listening(&format!(":{listener} "), "proxy")
        .expect("the proxy listens on the route's port");
    wait_for(
        "a curl of the name through the hairpin Service answered",
        Duration::from_secs(20),
        || answered_by_nginx(&curl_name(node, &proxy_ip)),
        || {
            let rules: Vec<String> = node
                .proxy_rules()
                .lines()
                .filter(|l| l.contains(&proxy_ip) || l.contains("hairpin"))
                .map(str::to_owned)
                .collect();
            format!(
                "{}\n--- proxy log ---\n{}\n--- curl ---\n{:?}\n--- kube-proxy rules ---\n{}",
                log(),
                node.log("proxy"),
                curl_name(node, &proxy_ip),
                rules.join("\n")
            )
        },
    );
    (proxy_ip, hosts)
}

/// A curl of `http://HOST/` with the name resolved to `ip` (as a client that asked DNS).
fn curl_name(node: &KubeNode, ip: &str) -> Curl {
    node.curl(
        &format!("http://{HOST}/"),
        &["--max-time", "2", "--resolve", &format!("{HOST}:80:{ip}")],
    )
}

/// nginx answered: it requires the PROXY protocol, so a header came with the connection.
fn answered_by_nginx(curl: &Curl) -> bool {
    curl.ok() && curl.body.starts_with("proxy_protocol_addr=")
}

/// Connections the proxy accepted so far (its `/metrics`).
fn proxy_connections(node: &KubeNode) -> u64 {
    let metrics = node.curl(&format!("http://{PROXY_ADMIN}/metrics"), &[]);
    assert!(metrics.ok(), "{metrics:?}");
    metrics
        .body
        .lines()
        .filter(|l| l.starts_with("hairpin_proxy_connections_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// CoreDNS running the cluster's Corefile as read from the `coredns` ConfigMap, following it
/// as the kubelet and CoreDNS's `reload` plugin do in a cluster: [`ClusterDns::follow`] puts
/// each new version in CoreDNS's Corefile (made local: loopback port, local upstream), and
/// `reload` runs it. In a cluster the kubelet syncs a ConfigMap volume within about a minute
/// and `reload` checks every 30 s; here the copy is made within 100 ms and `reload` checks
/// every 2 s (the Corefile's `reload` line becomes `reload 2s 1s`, nothing else changes). A
/// slower propagation only keeps clients on the side they were on for longer: the test also
/// checks the proxy's side still works after the switch, for clients with an old answer.
struct ClusterDns {
    dns: CoreDns,
    seen: String,
}

/// The cluster Corefile with its `reload` checking every 2 s.
fn fast_reload(corefile: &str) -> String {
    corefile
        .lines()
        .map(|l| {
            if l.trim() == "reload" {
                l.replace("reload", "reload 2s 1s")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

impl ClusterDns {
    /// `None` (after a skip message) when the CoreDNS peer is absent.
    fn start(test: &str, api: &ApiServer, hairpin_ip: &str, lb_ip: &str) -> Option<Self> {
        let seen = corefile(api);
        let options = coredns::Options {
            records: vec![(HAIRPIN_SERVICE_FQDN.into(), hairpin_ip.parse().unwrap())],
            upstream: vec![(HOST.into(), lb_ip.parse().unwrap())],
            ..coredns::Options::default()
        };
        let dns = CoreDns::start_with(test, &fast_reload(&seen), &options)?;
        Some(ClusterDns { dns, seen })
    }

    /// Puts the ConfigMap's Corefile in place when it changed; whether it did.
    fn follow(&mut self, api: &ApiServer) -> bool {
        let now = corefile(api);
        if now.is_empty() || now == self.seen {
            return false;
        }
        self.dns
            .write_corefile(&fast_reload(&now))
            .expect("write CoreDNS's Corefile");
        self.seen = now;
        true
    }
}

/// What a client's resolver does: ask CoreDNS for `HOST`'s A record, up to 3 times with a
/// 1 s timeout; the first address, and how many tries it took.
fn resolve(server: std::net::SocketAddr) -> Result<(IpAddr, u32), String> {
    let mut last = String::new();
    for tries in 1..=3 {
        match coredns::query(
            server,
            &format!("{HOST}."),
            RecordType::A,
            Duration::from_secs(1),
        ) {
            Ok(answer) => match answer.addresses().first() {
                Some(ip) => return Ok((*ip, tries)),
                None => return Err(format!("no address: {answer}")),
            },
            Err(err) => last = err.to_string(),
        }
    }
    Err(format!("no answer in 3 tries: {last}"))
}

#[test]
fn native_cure_proven_reasserted_and_restored_by_uninstall() {
    if let Some(reason) = kube::skip_reason() {
        hairpin_testkit::skip::skip(
            "native_cure_proven_reasserted_and_restored_by_uninstall",
            hairpin_testkit::skip::Cause::Missing,
            &reason,
        );
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

    // e) uninstall with the controller running: the status and the Corefile as before. As
    // the uninstall Job runs it: with the controller's ServiceAccount, under its admission
    // policy (putting `ipMode: VIP` back is an ipMode change).
    let token = api.service_account_token("hairpin", "hairpin-controller");
    let kubeconfig = api
        .kubeconfig_for("hairpin-uninstall", &token)
        .expect("kubeconfig");
    let out = support::hairpin_command()
        .arg("uninstall")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
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
        hairpin_testkit::skip::skip(
            "native_cure_not_honoured_falls_back_to_dns",
            hairpin_testkit::skip::Cause::Missing,
            &reason,
        );
        return;
    }
    let lb_ip = "203.0.113.21";
    let api = ApiServer::start().expect("start kube-apiserver");
    let gate_off = NodeOptions {
        honour_ip_mode: false,
        ..NodeOptions::iptables("node-old")
    };
    let mut node = node_with_controller(&api, &gate_off, lb_ip);
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
    name_works_through_the_proxy(&api, &mut node, lb_ip);
}

/// b) The DNS cure works: real CoreDNS running the Corefile hairpin wrote answers the name with
/// the hairpin Service, and a curl of the name is answered by nginx through `hairpin proxy`,
/// while the LB IP itself is still short-circuited (an empty reply).
fn name_works_through_the_proxy(api: &ApiServer, node: &mut KubeNode, lb_ip: &str) {
    let controller_log = node.dir().join("controller.log");
    let log = || std::fs::read_to_string(&controller_log).unwrap_or_default();
    let (proxy_ip, _hosts) = start_hairpin_proxy(api, node, log);
    let test = "native_cure_not_honoured_falls_back_to_dns (the name through CoreDNS)";
    let Some(dns) = ClusterDns::start(test, api, &proxy_ip, lb_ip) else {
        return;
    };
    let answer = dns.dns.query(&format!("{HOST}."), RecordType::A);
    assert_eq!(
        answer.addresses(),
        [proxy_ip.parse::<IpAddr>().unwrap()],
        "{answer}\n--- Corefile run ---\n{}",
        dns.dns.corefile()
    );
    let before = proxy_connections(node);
    let through = curl_name(node, &proxy_ip);
    assert!(
        answered_by_nginx(&through),
        "{through:?}\n{}",
        node.log("proxy")
    );
    let accepted = proxy_connections(node) - before;
    assert_eq!(accepted, 1, "the proxy carried the request");
    let bypassed = node.curl(&format!("http://{lb_ip}/"), &[]);
    assert_eq!(
        bypassed.exit,
        Some(52),
        "still short-circuited: {bypassed:?}"
    );
    println!(
        "b) CoreDNS answers {HOST} with the hairpin Service {proxy_ip} ({answer}); the curl of the name, through hairpin proxy: {}",
        through.body.trim_end()
    );
}

/// One iteration of the client loop of d).
#[derive(Debug)]
struct Sample {
    /// Since the loop started.
    at: Duration,
    /// CoreDNS's answer for the name, and in how many tries.
    answer: Result<(IpAddr, u32), String>,
    /// The curl of the name at that answer.
    curl: Option<Curl>,
}

impl Sample {
    fn ok(&self) -> bool {
        self.curl.as_ref().is_some_and(answered_by_nginx)
    }

    fn answered(&self, ip: &str) -> bool {
        self.answer.as_ref().is_ok_and(|(a, _)| a.to_string() == ip)
    }
}

/// A client in the cluster: resolve the name with CoreDNS, curl it (2 s at most), again,
/// until `stop`.
fn client_loop(
    node: &KubeNode,
    server: std::net::SocketAddr,
    started: Instant,
    stop: &AtomicBool,
    samples: &Mutex<Vec<Sample>>,
) {
    while !stop.load(Ordering::Relaxed) {
        let at = started.elapsed();
        let answer = resolve(server);
        let curl = answer
            .as_ref()
            .ok()
            .map(|(ip, _)| curl_name(node, &ip.to_string()));
        samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Sample { at, answer, curl });
    }
}

/// Sets the flag when dropped: a failed wait in the scope of d) stops its threads (the scope
/// joins them before the panic goes on).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What d) saw, times since the client loop started.
struct Switch {
    samples: Vec<Sample>,
    upgrade: Duration,
    proven: Duration,
    rule_removed: Duration,
    lb_answer: Duration,
    ended: Duration,
}

/// d) The upgrade under load: a client loop and the DNS follower run while a controller with
/// `--cure auto` starts and the `--cure dns` one gets SIGTERM (it vacates the Lease), until
/// the native cure is proven, the DNS rule is gone, CoreDNS answers the LB IP, and 2 s more.
/// Returns the new controller (running) and what was seen.
fn upgrade_under_load(
    api: &ApiServer,
    node: &KubeNode,
    dns: &mut ClusterDns,
    old: Group,
    lb_ip: &str,
) -> (Group, Switch) {
    let server = dns.dns.addr();
    let stop = AtomicBool::new(false);
    let samples = Mutex::new(Vec::new());
    let started = Instant::now();
    let log = || node.log("controller-auto");
    let (new, mut switch) = std::thread::scope(|scope| {
        let _stop = StopOnDrop(&stop);
        let (stop, samples) = (&stop, &samples);
        scope.spawn(move || client_loop(node, server, started, stop, samples));
        scope.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                dns.follow(api);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        // The client on the DNS cure for a while first.
        std::thread::sleep(Duration::from_secs(1));
        let upgrade = started.elapsed();
        let command = controller_command(api, node, "controller-1", "auto");
        let path = node.dir().join("controller-auto.log");
        let new = Group::spawn("controller-auto", command, path).expect("start the new controller");
        let term = Command::new("kill")
            .args(["-TERM", &old.pid().to_string()])
            .status();
        assert!(
            term.is_ok_and(|s| s.success()),
            "SIGTERM the old controller"
        );
        wait_for(
            "the new controller leads",
            Duration::from_secs(30),
            || log().contains("acquired the lease"),
            || format!("{}\n--- old controller ---\n{}", log(), old.log()),
        );
        drop(old);
        wait_for(
            "the native cure proven",
            Duration::from_secs(30),
            || record(api).is_some_and(|e| e["state"] == "proven"),
            log,
        );
        let proven = started.elapsed();
        wait_for(
            "the DNS rule removed",
            Duration::from_secs(20),
            || !corefile(api).contains(HOST),
            log,
        );
        let rule_removed = started.elapsed();
        wait_for(
            "CoreDNS answers the LB IP",
            Duration::from_secs(20),
            || resolve(server).is_ok_and(|(ip, _)| ip.to_string() == lb_ip),
            log,
        );
        let lb_answer = started.elapsed();
        std::thread::sleep(Duration::from_secs(2));
        let ended = started.elapsed();
        let switch = Switch {
            samples: Vec::new(),
            upgrade,
            proven,
            rule_removed,
            lb_answer,
            ended,
        };
        (new, switch)
    });
    switch.samples = samples
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    (new, switch)
}

/// Prints d)'s figures and checks that no iteration failed, that the client went through the
/// proxy before the switch and through the load balancer after it.
fn check_switch(switch: &Switch, proxy_ip: &str, lb_ip: &str, log: &str) {
    let samples = &switch.samples;
    let failures: Vec<&Sample> = samples.iter().filter(|s| !s.ok()).collect();
    let via_proxy = samples.iter().filter(|s| s.answered(proxy_ip)).count();
    let via_lb = samples.iter().filter(|s| s.answered(lb_ip)).count();
    let retries: u32 = samples
        .iter()
        .filter_map(|s| s.answer.as_ref().ok())
        .map(|(_, tries)| tries - 1)
        .sum();
    let last_proxy = samples
        .iter()
        .rev()
        .find(|s| s.answered(proxy_ip))
        .map(|s| s.at);
    let first_lb = samples.iter().find(|s| s.answered(lb_ip)).map(|s| s.at);
    let after = |t: Duration| t.saturating_sub(switch.upgrade);
    println!(
        "d) {} iterations in {:.1?} ({via_proxy} answered with the hairpin Service {proxy_ip}, {via_lb} with the LB IP {lb_ip}), {} failures, {retries} DNS retries",
        samples.len(),
        switch.ended,
        failures.len()
    );
    println!(
        "d) upgrade at +{:.1?}: native proven {:.1?} after it, DNS rule removed {:.1?} after, CoreDNS answered the LB IP {:.1?} after (the switch); the last answer with the proxy at +{:.1?}, the first with the LB IP at +{:.1?} (loop time)",
        switch.upgrade,
        after(switch.proven),
        after(switch.rule_removed),
        after(switch.lb_answer),
        last_proxy.unwrap_or_default(),
        first_lb.unwrap_or_default(),
    );
    assert!(
        failures.is_empty(),
        "{} of {} iterations failed: {failures:#?}\n--- controller log ---\n{log}",
        failures.len(),
        samples.len()
    );
    assert!(
        samples
            .iter()
            .any(|s| s.at < switch.upgrade && s.answered(proxy_ip)),
        "the client went through the proxy before the upgrade"
    );
    assert!(
        samples
            .iter()
            .any(|s| s.at > switch.lb_answer && s.answered(lb_ip)),
        "the client went through the load balancer after the switch"
    );
}

#[test]
fn dns_install_upgraded_to_auto_keeps_names_working() {
    let test = "dns_install_upgraded_to_auto_keeps_names_working";
    if let Some(reason) = kube::skip_reason() {
        hairpin_testkit::skip::skip(test, hairpin_testkit::skip::Cause::Missing, &reason);
        return;
    }
    if coredns::skip_without(test) {
        return;
    }
    let lb_ip = "203.0.113.22";
    let api = ApiServer::start().expect("start kube-apiserver");
    let mut node = node_with_ingress(&api, &NodeOptions::iptables("node-upgrade"), lb_ip);
    // The install on the DNS cure: the rule written, the name through CoreDNS and the proxy.
    let command = controller_command(&api, &node, "controller-0", "dns");
    let old_path = node.dir().join("controller-dns.log");
    let old = Group::spawn("controller-dns", command, old_path.clone())
        .expect("start the DNS-cure controller");
    let old_log = || std::fs::read_to_string(&old_path).unwrap_or_default();
    wait_for(
        "the DNS cure written",
        Duration::from_secs(30),
        || corefile(&api).contains(HOST),
        old_log,
    );
    let (proxy_ip, _hosts) = start_hairpin_proxy(&api, &mut node, old_log);
    let Some(mut dns) = ClusterDns::start(test, &api, &proxy_ip, lb_ip) else {
        return;
    };
    let answer = resolve(dns.dns.addr()).expect("CoreDNS answers the name");
    assert_eq!(answer.0.to_string(), proxy_ip, "{}", dns.dns.corefile());
    assert_eq!(ip_mode(&api).as_deref(), Some("VIP"));

    let before = proxy_connections(&node);
    let (new, switch) = upgrade_under_load(&api, &node, &mut dns, old, lb_ip);
    check_switch(&switch, &proxy_ip, lb_ip, &new.log());
    let carried = proxy_connections(&node) - before;
    let via_proxy = switch
        .samples
        .iter()
        .filter(|s| s.answered(&proxy_ip))
        .count();
    assert_eq!(
        carried, via_proxy as u64,
        "every request sent to the hairpin Service went through the proxy"
    );
    assert_eq!(ip_mode(&api).as_deref(), Some("Proxy"));
    // A client still holding the old answer (a slower kubelet, reload or cache than here)
    // still gets through: the hairpin Service and the proxy's route stay.
    let stale = curl_name(&node, &proxy_ip);
    assert!(answered_by_nginx(&stale), "{stale:?}");
    let via_lb = curl_name(&node, lb_ip);
    assert!(
        via_lb
            .body
            .starts_with(&format!("proxy_protocol_addr={lb_ip} ")),
        "through the load balancer's own header: {via_lb:?}"
    );
}
