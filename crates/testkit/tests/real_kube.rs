//! The hairpin failure and its native cure on a real kube-apiserver and kube-proxy (v1.31.14,
//! `../shared/peers/kubernetes`): a LoadBalancer Service whose status says `ipMode: VIP` is
//! short-circuited by kube-proxy straight to the ingress (no PROXY header: empty reply); once
//! the status says `ipMode: Proxy`, kube-proxy drops its rule and the same request goes through
//! the stand-in cloud load balancer (HAProxy, `send-proxy`) and is answered. In iptables and
//! nftables mode, and with kube-proxy's `LoadBalancerIPMode` gate off (the rule stays).
//!
//! Needs root, etcd and the test peers; without them it prints why and passes.

use std::time::{Duration, Instant};

use hairpin_testkit::kube::{self, ApiServer, KubeNode, NODE_IP, NodeOptions};
use serde_json::{Value, json};

const POD_IP: &str = "10.244.0.10";

/// The LoadBalancer Service `namespace/ingress` with port 80 and its EndpointSlice naming
/// [`POD_IP`]; the allocated nodePort.
fn ingress_service(api: &ApiServer, namespace: &str) -> u16 {
    api.ensure_namespace(namespace);
    let svc = api.apply(&json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": namespace, "name": "ingress"},
        "spec": {"type": "LoadBalancer",
                 "ports": [{"name": "http", "port": 80, "targetPort": 80, "protocol": "TCP"}]}
    }));
    api.apply(&json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"namespace": namespace, "name": "ingress-1",
                     "labels": {"kubernetes.io/service-name": "ingress"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [POD_IP], "conditions": {"ready": true}}],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]
    }));
    let port = svc["spec"]["ports"][0]["nodePort"]
        .as_u64()
        .expect("a nodePort");
    u16::try_from(port).expect("nodePort fits u16")
}

fn set_status(api: &ApiServer, namespace: &str, ingress: Value) -> Value {
    api.patch_status(
        &format!("/api/v1/namespaces/{namespace}/services/ingress"),
        &json!({"status": {"loadBalancer": {"ingress": [ingress]}}}),
    )
}

/// One node: VIP -> short-circuit (empty reply); Proxy -> through HAProxy with the header (or,
/// with the gate off, still the short-circuit). The rule's removal time when honoured.
fn scenario(api: &ApiServer, options: &NodeOptions, lb_ip: &str) -> Option<Duration> {
    let namespace = format!("smoke-{}", options.name);
    let started = Instant::now();
    let mut node = KubeNode::start(api, options).expect("start the node");
    println!(
        "{}: kube-proxy healthy after {:?}",
        options.name,
        started.elapsed()
    );
    node.add_address(lb_ip);
    node.add_address(POD_IP);
    let node_port = ingress_service(api, &namespace);
    node.start_ingress(POD_IP, 80).expect("start nginx");
    node.start_cloud_lb(lb_ip, 80, node_port, false)
        .expect("start haproxy");

    // Through the node port (what the cloud LB uses), the ingress answers with the header.
    // (once kube-proxy has synced the new Service).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let url = format!("http://{NODE_IP}:{node_port}/");
        let lb = node.curl(&url, &["--haproxy-protocol"]);
        if lb.ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node port: {lb:?}\n{}\n{}",
            node.proxy_rules(),
            tail(&node.kube_proxy_log())
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let stored = set_status(api, &namespace, json!({"ip": lb_ip}));
    assert_eq!(
        stored["status"]["loadBalancer"]["ingress"][0]["ipMode"], "VIP",
        "the apiserver defaults ipMode to VIP"
    );
    node.wait_lb_rule(lb_ip, true, Duration::from_secs(5))
        .expect("kube-proxy short-circuits the LB IP");
    let broken = node.curl(&format!("http://{lb_ip}/"), &[]);
    assert_eq!(broken.exit, Some(52), "empty reply expected: {broken:?}");
    let (_, error_log) = node.ingress_logs(POD_IP, 80);
    assert!(error_log.contains("broken header"), "{error_log}");

    set_status(api, &namespace, json!({"ip": lb_ip, "ipMode": "Proxy"}));
    let patched = Instant::now();
    let removed = if options.honour_ip_mode {
        let took = node
            .wait_lb_rule(lb_ip, false, Duration::from_secs(5))
            .expect("kube-proxy drops the rule");
        println!(
            "{} ({:?}): the rule for {lb_ip} went {took:?} after the status said ipMode: Proxy",
            options.name, options.mode
        );
        let fixed = node.curl(&format!("http://{lb_ip}/"), &[]);
        assert!(fixed.ok(), "{fixed:?}");
        assert!(
            fixed
                .body
                .starts_with(&format!("proxy_protocol_addr={lb_ip} ")),
            "answered through HAProxy, the header's source is the client: {fixed:?}"
        );
        Some(took)
    } else {
        std::thread::sleep(Duration::from_millis(1500));
        assert!(node.has_lb_rule(lb_ip), "the gate is off: the rule stays");
        let still = node.curl(&format!("http://{lb_ip}/"), &[]);
        assert_eq!(still.exit, Some(52), "{still:?}");
        println!(
            "{}: with LoadBalancerIPMode=false the rule stays {:?} after ipMode: Proxy",
            options.name,
            patched.elapsed()
        );
        None
    };
    let (access, _) = node.ingress_logs(POD_IP, 80);
    println!("ingress access log:\n{access}");
    removed
}

#[test]
fn ip_mode_proxy_takes_the_lb_ip_out_of_kube_proxy_iptables_and_nftables() {
    if kube::skip_without("ip_mode_proxy_takes_the_lb_ip_out_of_kube_proxy_iptables_and_nftables") {
        return;
    }
    let api = ApiServer::start().expect("start kube-apiserver");
    println!("kube-apiserver ready after {:?}", api.started_in());
    // One node at a time: each kube-proxy programs every Service of the apiserver.
    scenario(&api, &NodeOptions::iptables("node-ipt"), "203.0.113.10");
    scenario(&api, &NodeOptions::nftables("node-nft"), "203.0.113.11");
    let gate_off = NodeOptions {
        honour_ip_mode: false,
        ..NodeOptions::iptables("node-old")
    };
    scenario(&api, &gate_off, "203.0.113.12");
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
