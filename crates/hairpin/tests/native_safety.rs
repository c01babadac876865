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
//! - b) a VIP load balancer (MetalLB L2's shape: the outside client's packets reach the node
//!   with the LB IP as destination and kube-proxy's rule for that IP is their only way in; the
//!   outside client sends the PROXY header itself, as the HAProxy pair in front of a bare-metal
//!   cluster does; the receiver reading says PROXY, MetalLB's annotation says VIP): `ipMode`
//!   is never written, the DNS cure is; the outside client never fails. Run against `auto` as
//!   it was before the delivery gate, this scenario saw the outage (5 of 20 requests
//!   failed, over 8 s, until the probe's deadline put the status back).
//!
//! Each scenario prints its figures (outside-client requests and failures, native effective
//! time). Needs root, etcd, HAProxy, nginx and the test peers; without them each test prints
//! why and passes.

#[path = "support/cluster.rs"]
mod cluster;

use std::time::Duration;

use cluster::*;
use hairpin_testkit::kube::{self, ApiServer};
use hairpin_testkit::outside::{ClientLoop, Outside};

#[test]
fn proxy_lb_native_proven_outside_client_unharmed() {
    let test = "proxy_lb_native_proven_outside_client_unharmed";
    if let Some(reason) = kube::skip_reason() {
        println!("SKIPPED {test}: {reason}");
        return;
    }
    let api = ApiServer::start().expect("start kube-apiserver");
    let scene = Scene::start(&api, "node-proxy-lb", "203.0.113.40", Receiver::Nginx);
    let (node, url) = (&scene.node, &scene.url);
    let inside = ClientLoop::start(node.netns(), node.dir(), url, &[]).expect("in-cluster loop");
    let started = inside.elapsed();
    let _controller = scene.controller(&api, "controller", &[]);
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
    // The in-cluster client crosses HAProxy (the header names its address on the node's
    // link to the load balancer).
    let via_lb = node.curl(url, &[]);
    assert!(
        via_lb.body.starts_with(&format!(
            "proxy_protocol_addr={} ",
            scene.lb.node_side_address()
        )),
        "answered through HAProxy's header: {via_lb:?}\n{}",
        scene.lb.log()
    );
    let inside = inside.stop();
    let entry = record(&api).unwrap_or_default();
    let log = log();
    scene.finish("a", &log);
    println!(
        "a) native proven {proven:.1?} after the controller started, effective (an in-cluster request through the LB answered) {:.1?} after it; record: {entry}",
        effective.unwrap_or_default(),
    );
    println!("a) in-cluster client: {inside}");
}

#[test]
fn vip_lb_never_written_dns_cure_outside_client_unharmed() {
    let test = "vip_lb_never_written_dns_cure_outside_client_unharmed";
    if let Some(reason) = kube::skip_reason() {
        println!("SKIPPED {test}: {reason}");
        return;
    }
    let lb_ip = "203.0.113.41";
    let api = ApiServer::start().expect("start kube-apiserver");
    seed(&api, Shape::Vip, lb_ip);
    let mut node = node_with_receiver(&api, "node-vip-lb", Receiver::Nginx);
    // MetalLB L2: the LB IP is on no interface; the network sends its packets to the node
    // (the outside client's route). The node's own route for it points the other way (its
    // default route, here towards the outside namespace): kube-proxy's rule is the only way
    // to the ingress for both.
    let outside = Outside::client(node.netns()).expect("the outside client's namespace");
    outside.route(lb_ip).expect("route the LB IP to the node");
    node.exec_ok(&[
        "ip",
        "route",
        "add",
        &format!("{lb_ip}/32"),
        "via",
        &outside.address().to_string(),
    ])
    .expect("the node's route");
    node.wait_lb_rule(lb_ip, true, Duration::from_secs(10))
        .expect("kube-proxy short-circuits the LB IP");
    let url = format!("http://{lb_ip}/");
    let broken = node.curl(&url, &[]);
    assert_eq!(broken.exit, Some(52), "the hairpin failure: {broken:?}");
    // The outside client sends the PROXY header itself (the HAProxy pair in front).
    let client = outside
        .client_loop(&url, &["--haproxy-protocol"])
        .expect("start the outside client");
    first_answer(&client, "the outside client through kube-proxy's rule");
    let writers_before = status_writers(&api);

    let command = controller_command(&api, &node, "controller-0", "auto");
    node.spawn("controller", command)
        .expect("start hairpin controller");
    let log = || node.log("controller");
    let dns = wait_for(
        "the DNS cure written",
        Duration::from_secs(40),
        || corefile(&api).contains(HOST),
        log,
    );
    // The reason in the status: never tried, MetalLB's mark named.
    wait_for(
        "the Hairpin status says dns, native never tried on MetalLB's address",
        Duration::from_secs(20),
        || {
            hairpin_status(&api).is_some_and(|s| {
                s["cure"] == "dns"
                    && s["nativeCure"].is_null()
                    && s["cureReason"]
                        .as_str()
                        .is_some_and(|r| r.contains("native never tried") && r.contains("MetalLB"))
            })
        },
        log,
    );
    // The outside client a while longer with the controller running.
    let end = client.elapsed() + Duration::from_secs(3);
    client.wait_answered_after(end, Duration::from_secs(10));
    let tally = client.stop();
    let status = hairpin_status(&api).unwrap_or_default();
    println!(
        "b) DNS cure written {dns:.1?} after the controller started; Hairpin status: cure {}, nativeCure {}, reason: {}",
        status["cure"], status["nativeCure"], status["cureReason"]
    );
    assert_no_failure("b", &tally, &log());
    assert_eq!(ip_mode(&api).as_deref(), Some("VIP"));
    assert_eq!(
        status_writers(&api),
        writers_before,
        "nothing but the test wrote the status"
    );
    assert!(record(&api).is_none(), "{:?}", record(&api));
    assert!(node.has_lb_rule(lb_ip), "kube-proxy's rule stays");
}
