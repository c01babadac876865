//! Cluster objects for the doctor's tests over the fake API server: kube-proxy, the CNIs,
//! cloud controllers, cert-manager, hairpin's native-cure record, and the three clusters of
//! issue 30 item 6 (hcloud-ccm 1.21 with PROXY on; DigitalOcean on Kubernetes 1.31 with
//! kube-proxy; Cilium 1.16's kube-proxy replacement). Shared by `crates/doctor/tests` and
//! `crates/hairpin/tests/doctor.rs` (included by path).
#![allow(dead_code, unreachable_pub)]

use serde_json::{Value, json};

/// A `type: LoadBalancer` Service `ingress-nginx/<name>` with `annotations`, port 80, and `ip`
/// at `ip_mode` in its status.
pub fn lb_service(name: &str, annotations: Value, ip: &str, ip_mode: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "ingress-nginx", "uid": format!("uid-{name}"),
                     "annotations": annotations},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Cluster",
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": ip_mode}]}}
    })
}

/// An Ingress `shop/<name>` for `host`, its status at `ip`.
pub fn ingress(name: &str, host: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"rules": [{"host": host}]},
        "status": {"loadBalancer": {"ingress": [{"ip": ip}]}}
    })
}

/// ConfigMap `namespace/name` holding `data`.
pub fn config_map(namespace: &str, name: &str, data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data
    })
}

/// A kubeadm Corefile with `reload`.
pub const COREFILE: &str = ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n    }\n    forward . /etc/resolv.conf\n    cache 30\n    reload\n}\n";

/// `kube-system/coredns` with [`COREFILE`].
pub fn coredns() -> Value {
    config_map("kube-system", "coredns", json!({"Corefile": COREFILE}))
}

/// A DaemonSet `namespace/name` with one container (`container`, `image`, `args`, `env`) and
/// `volumes`.
pub fn daemon_set(
    namespace: &str,
    name: &str,
    container: &str,
    image: &str,
    args: &[&str],
    volumes: Value,
) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": name}},
            "template": {
                "metadata": {"labels": {"k8s-app": name}},
                "spec": {"containers": [{"name": container, "image": image, "args": args}],
                         "volumes": volumes}
            }
        }
    })
}

/// A Deployment `namespace/name` with one container (`container`, `image`).
pub fn deployment(namespace: &str, name: &str, container: &str, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": container, "image": image}]}
            }
        }
    })
}

/// kubeadm's kube-proxy: its DaemonSet (`registry.k8s.io/kube-proxy:<version>`, `--config`
/// and `extra_args`) and its ConfigMap `kube-proxy` whose `config.conf` says `mode` and
/// `feature_gates` (YAML lines under `featureGates:`).
pub fn kube_proxy(
    version: &str,
    mode: &str,
    feature_gates: &str,
    extra_args: &[&str],
) -> [Value; 2] {
    let mut args = vec![
        "--config=/var/lib/kube-proxy/config.conf",
        "--hostname-override=$(NODE_NAME)",
    ];
    args.extend_from_slice(extra_args);
    let gates = if feature_gates.is_empty() {
        "featureGates: {}\n".to_owned()
    } else {
        format!("featureGates:\n  {feature_gates}\n")
    };
    [
        daemon_set(
            "kube-system",
            "kube-proxy",
            "kube-proxy",
            &format!("registry.k8s.io/kube-proxy:{version}"),
            &args,
            json!([{"name": "kube-proxy", "configMap": {"name": "kube-proxy"}}]),
        ),
        config_map(
            "kube-system",
            "kube-proxy",
            json!({"config.conf": format!(
                "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: 10.244.0.0/16\n{gates}mode: \"{mode}\"\n"
            )}),
        ),
    ]
}

/// Cilium `version` (its DaemonSet) with `kube-proxy-replacement` in `cilium-config`.
pub fn cilium(version: &str, kube_proxy_replacement: &str) -> [Value; 2] {
    [
        config_map(
            "kube-system",
            "cilium-config",
            json!({"kube-proxy-replacement": kube_proxy_replacement, "tunnel-protocol": "vxlan"}),
        ),
        daemon_set(
            "kube-system",
            "cilium",
            "cilium-agent",
            &format!("quay.io/cilium/cilium:{version}@sha256:0123456789abcdef"),
            &[],
            json!([]),
        ),
    ]
}

/// hcloud-cloud-controller-manager `version` in kube-system.
pub fn hcloud_ccm(version: &str) -> Value {
    deployment(
        "kube-system",
        "hcloud-cloud-controller-manager",
        "hcloud-cloud-controller-manager",
        &format!("docker.io/hetznercloud/hcloud-cloud-controller-manager:{version}"),
    )
}

/// cert-manager `version`'s controller, as its chart installs it.
pub fn cert_manager(version: &str) -> Value {
    deployment(
        "cert-manager",
        "cert-manager",
        "cert-manager-controller",
        &format!("quay.io/jetstack/cert-manager-controller:{version}"),
    )
}

/// hairpin's native-cure record (`hairpin/hairpin-native`, key `native.json`) with one entry:
/// `service` (`namespace/name`, with `uid`: the API server's) at `ip`, in `state`, with
/// `reason`.
pub fn native_record(service: &str, uid: &str, ip: &str, state: &str, reason: &str) -> Value {
    let record = json!({"loadBalancers": {service: {
        "uid": uid,
        "original": [{"ip": ip, "ipMode": "VIP"}],
        "state": state,
        "since": "2026-11-27T10:00:00Z",
        "reason": reason,
    }}});
    config_map(
        "hairpin",
        "hairpin-native",
        json!({"native.json": record.to_string()}),
    )
}

/// The DigitalOcean-style load balancer `ingress-nginx/do-lb` with PROXY on
/// (`do-loadbalancer-enable-proxy-protocol`) at `ip`, at `ip_mode` in its status.
pub fn do_lb(ip: &str, ip_mode: &str) -> Value {
    lb_service(
        "do-lb",
        json!({"service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol": "true"}),
        ip,
        ip_mode,
    )
}

/// The load balancer `lb` at `ip` with `shop.example.com` on it, and CoreDNS.
fn shop_on(lb: Value, ip: &str) -> Vec<Value> {
    vec![lb, ingress("shop", "shop.example.com", ip), coredns()]
}

/// Cluster 1: Hetzner with hcloud-cloud-controller-manager v1.21.0, the load balancer
/// `ingress-nginx/hetzner-lb` with PROXY on (`uses-proxyprotocol`) at `ip`, whose status the
/// CCM set to `ipMode: Proxy`, kube-proxy v1.31.2 (iptables), `shop.example.com` on it.
pub fn hcloud_cluster(ip: &str) -> Vec<Value> {
    let hetzner_lb = lb_service(
        "hetzner-lb",
        json!({"load-balancer.hetzner.cloud/uses-proxyprotocol": "true",
               "load-balancer.hetzner.cloud/location": "fsn1"}),
        ip,
        "Proxy",
    );
    let mut objects = shop_on(hetzner_lb, ip);
    objects.push(hcloud_ccm("v1.21.0"));
    objects.extend(kube_proxy("v1.31.2", "iptables", "", &[]));
    objects
}

/// Cluster 2: DigitalOcean on Kubernetes 1.31 with kube-proxy v1.31.2 (iptables, the
/// default), the load balancer `ingress-nginx/do-lb` with PROXY on at `ip` (`ipMode: VIP`:
/// DigitalOcean's controller never sets it), `shop.example.com` on it.
pub fn digitalocean_cluster(ip: &str) -> Vec<Value> {
    let mut objects = shop_on(do_lb(ip, "VIP"), ip);
    objects.extend(kube_proxy("v1.31.2", "", "", &[]));
    objects
}

/// Cluster 3: Cilium v1.16.5 replacing kube-proxy (no kube-proxy DaemonSet), the
/// DigitalOcean-style PROXY load balancer `ingress-nginx/do-lb` at `ip`, `shop.example.com` on
/// it, and cert-manager v1.21.0.
pub fn cilium_cluster(ip: &str) -> Vec<Value> {
    let mut objects = shop_on(do_lb(ip, "VIP"), ip);
    objects.push(cert_manager("v1.21.0"));
    objects.extend(cilium("v1.16.5", "true"));
    objects
}
