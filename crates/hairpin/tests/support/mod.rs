//! Shared by the tests that run hairpin's binary: the command itself, and the fake API
//! server's cluster for the ones that need one.
#![allow(dead_code, unreachable_pub)]

use std::process::Command;

use hairpin_fake_apiserver::{FakeApiServer, fixtures};
use hairpin_testkit::kube::ApiServer;
use serde_json::{Value, json};

/// A kubeadm-style Corefile.
pub const COREFILE: &str = ".:53 {\n    errors\n    health\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n    }\n    forward . /etc/resolv.conf\n    cache 30\n    reload\n}\n";

/// The load balancer's status address.
pub const LB_IP: &str = "203.0.113.7";

/// The built binary with a clean environment: no `HAIRPIN_*`, `KUBECONFIG` or `POD_NAME` from
/// the shell that runs the tests, so a test sees only the flags and variables it sets itself.
/// Every test that runs hairpin starts here (or from [`hairpin`]); a wrapper that runs it
/// (`prlimit`, `ip netns exec`) starts from `hairpin_testkit::isolated_command` instead.
pub fn hairpin_command() -> Command {
    hairpin_testkit::isolated_command(env!("CARGO_BIN_EXE_hairpin"))
}

/// [`hairpin_command`] with hostname verification off (`HAIRPIN_VERIFY_HOSTNAMES=off`): the
/// fake cluster's names resolve nowhere, and with `resolve` the controller would ask the
/// machine's own resolvers, off loopback. And the DNS cure only (`HAIRPIN_CURE=dns`): with
/// `auto` the controller would probe the fake load balancers' addresses, off loopback.
pub fn hairpin(args: &[&str]) -> Command {
    let mut command = hairpin_command();
    command.env("HAIRPIN_VERIFY_HOSTNAMES", "off");
    command.env("HAIRPIN_CURE", "dns");
    command.args(args);
    command
}

/// hairpin's namespace, a DigitalOcean PROXY load balancer `ingress-nginx/ingress-nginx-controller`
/// at [`LB_IP`] with port 443, the Ingress `web/web` for `web.example.com` on it, and CoreDNS
/// with [`COREFILE`].
pub fn seed(fake: &FakeApiServer) {
    fake.create_namespace("hairpin");
    fake.apply(fixtures::proxy_load_balancer(
        "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol",
        LB_IP,
        json!([{"name": "https", "port": 443, "protocol": "TCP"}]),
    ));
    fake.apply(fixtures::ingress("web", "web", &["web.example.com"], LB_IP));
    fake.apply(fixtures::coredns(COREFILE));
}

/// Reads the Corefile of `kube-system/coredns`.
pub fn corefile(fake: &FakeApiServer) -> String {
    fixtures::corefile(fake)
}

/// Every object of the shipped manifest, `deploy/hairpin.yaml`, in its order.
pub fn manifest() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/hairpin.yaml"
    ))
    .expect("read deploy/hairpin.yaml");
    text.split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(|o| o["kind"].as_str().is_some_and(|k| !k.is_empty()))
        .collect()
}

/// Every object of the shipped manifest but the workloads (nothing runs them on a test
/// apiserver); its admission policies too, so every write of the controller and of uninstall
/// passes them.
pub fn install_manifest(api: &ApiServer) {
    for object in manifest() {
        let kind = object["kind"].as_str().unwrap_or_default();
        if !["Deployment", "DaemonSet", "PodDisruptionBudget"].contains(&kind) {
            api.apply(&object);
        }
    }
}
