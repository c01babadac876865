//! The cluster of the native cure's safety scenarios (`native_safety.rs`, issue 36): a real
//! kube-apiserver and kube-proxy, the ingress behind a LoadBalancer Service of either shape
//! ([`Shape`]), `hairpin controller` in the node's namespace, and the client outside the
//! cluster ([`Scene`]). Included with `#[path]` by the tests that use it.
#![allow(dead_code, unreachable_pub)]

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hairpin_testkit::kube::{ApiServer, Group, KubeNode, NodeOptions};
use hairpin_testkit::outside::{ClientLoop, CloudLb, Outside, Tally};
use serde_json::{Value, json};

pub const POD_IP: &str = "10.244.0.10";
pub const HOST: &str = "shop.example.test";
pub const COREFILE: &str = ".:53 {\n    errors\n    health\n    ready\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n    }\n    forward . /etc/resolv.conf\n    cache 30\n    loop\n    reload\n    loadbalance\n}\n";
/// The load balancer Service of every scenario.
pub const SERVICE: &str = "/api/v1/namespaces/ingress/services/nginx";

pub use crate::support::install_manifest;

/// How the load balancer delivers traffic to the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A proxy (DigitalOcean): it terminates the client's TCP and connects to the NodePort;
    /// its controller never sets ipMode.
    Proxy,
    /// A VIP (MetalLB L2): the node receives the LB IP as destination. Nothing on the
    /// Service says PROXY; the receiver does (ingress-nginx's `use-proxy-protocol`).
    Vip,
}

/// The cluster of one scenario: CoreDNS's ConfigMap, the ingress LoadBalancer Service
/// `ingress/nginx` of `shape` with its EndpointSlice (the pod [`POD_IP`]) and status, an
/// Ingress for [`HOST`] on it. Returns the nodePort.
pub fn seed(api: &ApiServer, shape: Shape, lb_ip: &str) -> u16 {
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
        Shape::Vip => seed_ingress_nginx(api),
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
    let stored = &stored["status"]["loadBalancer"]["ingress"][0]["ipMode"];
    assert!(
        *stored == "VIP" || stored.is_null(),
        "the apiserver defaults ipMode to VIP (or drops it, its gate off): {stored}"
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

/// The bare-metal shape of `examples/bare-metal.yaml` with MetalLB's mark: the Service (its
/// address allocated by MetalLB, which says so in `metallb.io/ip-allocated-from-pool`, as
/// MetalLB's controller writes it), the ingress-nginx controller's Deployment and its
/// ConfigMap with `use-proxy-protocol: "true"` (the receiver reading). Returns the Service.
pub fn seed_ingress_nginx(api: &ApiServer) -> Value {
    let labels = json!({"app.kubernetes.io/name": "ingress-nginx",
        "app.kubernetes.io/component": "controller"});
    api.apply(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "ingress", "name": "ingress-nginx-controller"},
        "data": {"use-proxy-protocol": "true", "real-ip-header": "proxy_protocol"}
    }));
    api.apply(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"namespace": "ingress", "name": "ingress-nginx-controller"},
        "spec": {"selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{
                "name": "controller",
                "image": "registry.k8s.io/ingress-nginx/controller:v1.12.1",
                "args": ["/nginx-ingress-controller",
                    "--publish-service=$(POD_NAMESPACE)/nginx",
                    "--configmap=$(POD_NAMESPACE)/ingress-nginx-controller"],
                "env": [{"name": "POD_NAMESPACE",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]}]}}}
    }));
    api.apply(&json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": "ingress", "name": "nginx", "annotations": {
            "metallb.io/ip-allocated-from-pool": "default"}},
        "spec": {"type": "LoadBalancer", "selector": labels,
                 "ports": [{"name": "http", "port": 80, "targetPort": 80, "protocol": "TCP"}]}
    }))
}

pub fn ip_mode(api: &ApiServer) -> Option<String> {
    api.get(SERVICE)?["status"]["loadBalancer"]["ingress"][0]["ipMode"]
        .as_str()
        .map(str::to_owned)
}

/// The field managers that wrote the Service's status.
pub fn status_writers(api: &ApiServer) -> Vec<String> {
    let svc = api.get(SERVICE).expect("the Service");
    svc["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["subresource"] == "status")
        .filter_map(|m| m["manager"].as_str().map(str::to_owned))
        .collect()
}

/// The native cure's record entry of the load balancer, when there is one.
pub fn record(api: &ApiServer) -> Option<Value> {
    let cm = api.get("/api/v1/namespaces/hairpin/configmaps/hairpin-native")?;
    let text = cm["data"]["native.json"].as_str()?;
    let record: Value = serde_json::from_str(text).ok()?;
    Some(record["loadBalancers"]["ingress/nginx"].clone()).filter(|e| !e.is_null())
}

/// The status of the `Hairpin` object of the load balancer.
pub fn hairpin_status(api: &ApiServer) -> Option<Value> {
    let hairpin = api.get("/apis/hairpin.io/v1alpha1/namespaces/ingress/hairpins/nginx")?;
    Some(hairpin["status"].clone()).filter(|s| !s.is_null())
}

pub fn corefile(api: &ApiServer) -> String {
    api.get("/api/v1/namespaces/kube-system/configmaps/coredns")
        .and_then(|cm| cm["data"]["Corefile"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Polls `what` every 20 ms until it holds; how long it took.
pub fn wait_for(
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
pub fn controller_command(api: &ApiServer, node: &KubeNode, identity: &str, cure: &str) -> Command {
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

/// A node with kube-proxy and the receiver on [`POD_IP`]:80.
pub fn node_with_receiver(api: &ApiServer, options: &NodeOptions, receiver: Receiver) -> KubeNode {
    let mut node = KubeNode::start(api, options).expect("start the node");
    node.add_address(POD_IP);
    match receiver {
        Receiver::Nginx => node.start_ingress(POD_IP, 80).expect("start nginx"),
        Receiver::Optional => {
            let mut echo = node.command(env!("CARGO_BIN_EXE_hairpin"));
            echo.args(["echo", "--proxy-protocol", "optional"]).args([
                "--listen",
                &format!("{POD_IP}:80"),
                "--log-format",
                "text",
            ]);
            node.spawn("echo", echo).expect("start hairpin echo");
            node.wait_listening(&format!("{POD_IP}:80"), "echo")
                .expect("hairpin echo listens");
        }
    }
    node
}

/// The ingress behind the load balancer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receiver {
    /// nginx requiring the PROXY protocol (`listen ... proxy_protocol`).
    Nginx,
    /// A server hairpin cannot identify that answers with or without a header (`hairpin echo
    /// --proxy-protocol optional`).
    Optional,
}

/// A proxy load balancer's cluster ([`Shape::Proxy`]) and the client outside it, looping
/// from [`Scene::start`] until [`Scene::finish`]. Field order is drop order.
pub struct Scene {
    pub client: ClientLoop,
    _outside: Outside,
    pub lb: CloudLb,
    pub node: KubeNode,
    pub url: String,
}

impl Scene {
    /// Seeds `api`, starts the node (kube-proxy short-circuiting the LB IP), the cloud load
    /// balancer in its own namespace and the outside client linked to it; returns once the
    /// client has had an answer.
    pub fn start(api: &ApiServer, node: &str, lb_ip: &str, receiver: Receiver) -> Scene {
        let node_port = seed(api, Shape::Proxy, lb_ip);
        let node = node_with_receiver(api, &NodeOptions::iptables(node), receiver);
        let lb = CloudLb::start(&node, lb_ip, 80, node_port, false).expect("start the cloud LB");
        node.wait_lb_rule(lb_ip, true, Duration::from_secs(10))
            .expect("kube-proxy short-circuits the LB IP");
        let url = format!("http://{lb_ip}/");
        if receiver == Receiver::Nginx {
            // The hairpin failure first: an in-cluster client is short-circuited to nginx
            // without a header.
            let broken = node.curl(&url, &[]);
            assert_eq!(broken.exit, Some(52), "the hairpin failure: {broken:?}");
        }
        // The outside client reaches the load balancer without crossing the node.
        let outside = Outside::client(lb.netns()).expect("the outside client's namespace");
        outside.route(lb_ip).expect("route the LB IP");
        let client = outside
            .client_loop(&url, &[])
            .expect("start the outside client");
        first_answer(&client, "the outside client through HAProxy");
        Scene {
            client,
            _outside: outside,
            lb,
            node,
            url,
        }
    }

    /// `hairpin controller --cure auto` (plus `extra`) in the node's namespace, logging to
    /// `<name>.log` in the node's folder ([`KubeNode::log`]).
    pub fn controller(&self, api: &ApiServer, name: &str, extra: &[&str]) -> Group {
        let mut command = controller_command(api, &self.node, name, "auto");
        command.args(extra);
        Group::spawn(name, command, self.node.dir().join(format!("{name}.log")))
            .expect("start hairpin controller")
    }

    /// The load balancer answers the outside client but not the node's own connections: it
    /// rejects them with "network unreachable", as a load balancer that does not answer its
    /// own backends does.
    pub fn reject_the_node(&self) {
        let node_side = self.lb.node_side_address().to_string();
        self.lb
            .exec_ok(&[
                "iptables",
                "-I",
                "INPUT",
                "-s",
                &node_side,
                "-p",
                "tcp",
                "-j",
                "REJECT",
                "--reject-with",
                "icmp-net-unreachable",
            ])
            .expect("the load balancer rejects the node");
    }

    /// The outside client 2 s more, then stopped: every request must have been answered.
    pub fn finish(self, scenario: &str, log: &str) -> Tally {
        let end = self.client.elapsed() + Duration::from_secs(2);
        self.client
            .wait_answered_after(end, Duration::from_secs(10));
        let tally = self.client.stop();
        assert_no_failure(scenario, &tally, log);
        tally
    }
}

/// Stops a controller as a rolling update does (SIGTERM: it vacates its Lease).
pub fn stop_controller(mut controller: Group) {
    let term = Command::new("kill")
        .args(["-TERM", &controller.pid().to_string()])
        .status();
    assert!(term.is_ok_and(|s| s.success()), "SIGTERM the controller");
    let exited = controller.wait_exit(Duration::from_secs(20));
    assert!(
        exited.is_ok_and(|e| e),
        "the controller exits on SIGTERM\n{}",
        controller.log()
    );
}

/// Waits for `client`'s first answer: the outside path works before hairpin starts.
pub fn first_answer(client: &ClientLoop, what: &str) {
    let answered = client.wait_answered_after(Duration::ZERO, Duration::from_secs(20));
    assert!(
        answered.is_some(),
        "{what}: no answer before hairpin started: {:?}",
        client.attempts()
    );
}

/// The outside client's verdict: every request answered.
pub fn assert_no_failure(scenario: &str, tally: &Tally, log: &str) {
    println!("{scenario}) outside client: {tally}");
    assert!(!tally.attempts.is_empty(), "{scenario}) the client ran");
    assert!(
        tally.failures().is_empty(),
        "{scenario}) the outside client failed: {tally}\n{:#?}\n--- controller log ---\n{log}",
        tally.failures()
    );
}

/// How many times the controller's log says it wrote `ipMode: Proxy` (first time or again),
/// kept or dropped by the API server.
pub fn proxy_writes(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("ipMode: Proxy set") || l.contains("the API server dropped ipMode"))
        .count()
}

/// Sets the flag when dropped: a failed wait in a scope stops its threads (the scope joins
/// them before the panic goes on).
pub struct StopOnDrop<'a>(pub &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Touches the Service (an annotation), as any edit does: an event for the controller.
pub fn touch_service(api: &ApiServer, n: usize) {
    api.request_ok(
        "PATCH",
        SERVICE,
        Some((
            "application/merge-patch+json",
            &json!({"metadata": {"annotations": {"example.test/touched": n.to_string()}}}),
        )),
    );
}

/// The Events on the load balancer Service (`reason`, `note`/`message`), as the core API lists
/// them (the controller writes `events.k8s.io/v1`, the same objects).
pub fn service_events(api: &ApiServer) -> Vec<(String, String)> {
    let list = api
        .get("/api/v1/namespaces/ingress/events")
        .unwrap_or_default();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["involvedObject"]["kind"] == "Service" && e["involvedObject"]["name"] == "nginx"
        })
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_owned(),
                e["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Waits for an Event `reason` on the load balancer Service whose message contains `text`;
/// its message.
pub fn wait_event(api: &ApiServer, reason: &str, text: &str, log: impl Fn() -> String) -> String {
    let mut found = String::new();
    wait_for(
        &format!("an Event {reason} on the Service"),
        Duration::from_secs(20),
        || {
            found = service_events(api)
                .into_iter()
                .find(|(r, m)| r == reason && m.contains(text))
                .map(|(_, m)| m)
                .unwrap_or_default();
            !found.is_empty()
        },
        || format!("{}\n--- Events ---\n{:#?}", log(), service_events(api)),
    );
    found
}
