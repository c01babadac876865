//! The Nodes' gate reads kube-proxy's configuration file in the controller too (issue 45): the
//! ConfigMap kube-proxy's DaemonSet mounts (`kube-system/kube-proxy`, key `config.conf`) is
//! watched by name where a cure may be native, and `featureGates: {LoadBalancerIPMode: false}`
//! there keeps the DNS cure for every node, named; the gate turned on lets the cure be proven;
//! turned off again after that, the DNS rules come back (make before break). Over the fake API
//! server, the load balancer's address on loopback (`127.0.0.81`, port 8080) where a stand-in
//! receiver answers exactly while the status says `Proxy`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hairpin_fake_apiserver::FakeApiServer;
use hairpin_fake_apiserver::fixtures::{self, coredns};
use hairpin_planner::CureMode;
use serde_json::{Value, json};
use support::cluster::corefile;
use support::controller::{config, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HOST: &str = "shop.example.com";
const IP: &str = "127.0.0.81";
const PORT: u16 = 8080;
const COREFILE: &str = ".:53 {\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n";

fn ip_mode(fake: &FakeApiServer) -> Value {
    fake.get(
        "v1",
        "Service",
        Some("ingress-nginx"),
        "ingress-nginx-controller",
    )
    .unwrap_or_default()["status"]["loadBalancer"]["ingress"][0]["ipMode"]
        .clone()
}

fn entry(fake: &FakeApiServer) -> Value {
    fake.get("v1", "ConfigMap", Some("hairpin"), "hairpin-native")
        .and_then(|cm| cm["data"]["native.json"].as_str().map(str::to_owned))
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .map(|r| r["loadBalancers"]["ingress-nginx/ingress-nginx-controller"].clone())
        .unwrap_or_default()
}

fn events(fake: &FakeApiServer, reason: &str) -> Vec<String> {
    fake.list("events.k8s.io/v1", "Event")
        .iter()
        .filter(|e| e["reason"] == reason)
        .filter_map(|e| e["note"].as_str().map(str::to_owned))
        .collect()
}

/// Closes every connection without a byte until the status says `Proxy`, then answers
/// `200 OK` (a proxy load balancer honouring `ipMode`).
fn receiver(
    fake: Arc<FakeApiServer>,
) -> (tokio::task::JoinHandle<()>, tokio::task::JoinHandle<()>) {
    let answer = Arc::new(AtomicBool::new(false));
    let serve = tokio::spawn({
        let answer = answer.clone();
        async move {
            let listener = tokio::net::TcpListener::bind((IP, PORT)).await.unwrap();
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut request = [0u8; 512];
                let _ = tokio::time::timeout(Duration::from_secs(1), conn.read(&mut request)).await;
                if answer.load(Ordering::SeqCst) {
                    let _ = conn
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                        )
                        .await;
                }
            }
        }
    });
    let follow = tokio::spawn(async move {
        loop {
            let proxy = ip_mode(&fake) == "Proxy";
            answer.store(proxy, Ordering::SeqCst);
            fake.wait_until(Duration::from_secs(1), |f| (ip_mode(f) == "Proxy") != proxy)
                .await;
        }
    });
    (serve, follow)
}

/// kubeadm's kube-proxy: the DaemonSet mounting the ConfigMap `kube-proxy`.
fn kube_proxy_daemon_set() -> Value {
    hairpin_fake_apiserver::object(
        "apps/v1",
        "DaemonSet",
        Some("kube-system"),
        "kube-proxy",
        json!({
            "spec": {"selector": {"matchLabels": {"k8s-app": "kube-proxy"}},
                     "template": {"metadata": {"labels": {"k8s-app": "kube-proxy"}},
                                  "spec": {"containers": [{"name": "kube-proxy",
                                      "image": "registry.k8s.io/kube-proxy:v1.31.14",
                                      "command": ["/usr/local/bin/kube-proxy",
                                          "--config=/var/lib/kube-proxy/config.conf"]}],
                                  "volumes": [{"name": "kube-proxy",
                                      "configMap": {"name": "kube-proxy"}}]}}}
        }),
    )
}

/// kubeadm's ConfigMap, its configuration file with the gate `on` or off.
fn kube_proxy_config(on: bool) -> Value {
    let file = format!(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nclientConnection:\n  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf\nfeatureGates:\n  LoadBalancerIPMode: {on}\nkind: KubeProxyConfiguration\nmode: iptables\n"
    );
    hairpin_fake_apiserver::object(
        "v1",
        "ConfigMap",
        Some("kube-system"),
        "kube-proxy",
        json!({"data": {"config.conf": file,
            "kubeconfig.conf": "apiVersion: v1\nkind: Config\nclusters: []\n"}}),
    )
}

#[tokio::test]
async fn kube_proxys_config_map_is_watched_and_its_gate_keeps_or_lets_the_native_cure() {
    let fake = Arc::new(FakeApiServer::start().await);
    fake.create_namespace("hairpin");
    fake.apply(fixtures::proxy_load_balancer(
        "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol",
        IP,
        json!([{"name": "http", "port": PORT, "protocol": "TCP", "targetPort": 80}]),
    ));
    fake.apply(fixtures::ingress("shop", "shop", &[HOST], IP));
    fake.apply(coredns(COREFILE));
    fake.apply(kube_proxy_daemon_set());
    fake.apply(kube_proxy_config(false));
    let (serve, follow) = receiver(fake.clone());
    let mut cfg = config("pod-a", false);
    cfg.planner.cure = CureMode::Auto;
    cfg.native.deadline = Duration::from_millis(600);
    cfg.native.interval = Duration::from_millis(100);
    cfg.native.timeout = Duration::from_millis(200);
    cfg.native.settle = Duration::from_millis(300);
    let running = start(&fake, cfg);

    // The gate off in the file: the DNS cure stays for every node, named; nothing written.
    let named = "ConfigMap kube-system/kube-proxy key config.conf";
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| corefile(f).contains(HOST)
            && events(f, "NativeCureNotOnEveryNode")
                .iter()
                .any(|n| n.contains(named)))
            .await
            .is_some(),
        "{:?}",
        events(&fake, "NativeCureNotOnEveryNode")
    );
    // Watched by name in kube-proxy's namespace, never every ConfigMap.
    let requests = fake.requests();
    assert!(
        requests.iter().any(|r| r
            .uri
            .starts_with("/api/v1/namespaces/kube-system/configmaps?")
            && r.uri.contains("metadata.name%3Dkube-proxy")
            && r.uri.contains("watch=true")),
        "{:?}",
        requests.iter().map(|r| &r.uri).collect::<Vec<_>>()
    );
    assert!(
        !requests
            .iter()
            .any(|r| r.uri.starts_with("/api/v1/configmaps")),
        "no cluster-wide ConfigMap read"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!ip_mode(&fake).eq("Proxy"), "nothing written");

    // The gate turned on (kube-proxy restarted with the new file): the cure is tried and proven.
    fake.apply(kube_proxy_config(true));
    assert!(
        fake.wait_until(Duration::from_secs(15), |f| entry(f)["state"] == "proven"
            && !corefile(f).contains(HOST))
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    assert_eq!(ip_mode(&fake), "Proxy");
    let data_plane = entry(&fake)["dataPlane"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        data_plane
            .contains("kube-system/kube-proxy config.conf featureGates: LoadBalancerIPMode: true"),
        "{data_plane}"
    );

    // Off again: the DNS rules come back first.
    fake.apply(kube_proxy_config(false));
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| corefile(f).contains(HOST))
            .await
            .is_some(),
        "{:?}",
        entry(&fake)
    );
    running.stop().await;
    follow.abort();
    serve.abort();
}
