//! `hairpin proxy --routes-configmap`: the in-cluster proxy follows the route table the
//! controller publishes, through a watch on the fake API server, in front of a real nginx.

mod support;

use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use hairpin_fake_apiserver::{FakeApiServer, object};
use hairpin_testkit::{Nginx, free_addr, http_get};
use serde_json::json;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn routes_configmap(routes: &str) -> serde_json::Value {
    object(
        "v1",
        "ConfigMap",
        Some("hairpin"),
        "hairpin-routes",
        json!({"data": {"routes.json": routes}}),
    )
}

fn route(name: &str, listen: SocketAddr, upstream: SocketAddr, version: &str) -> String {
    format!(
        r#"{{"name":"{name}","listen":"{listen}","upstream":"{upstream}","proxy_protocol":"{version}","destination":"203.0.113.10:80"}}"#
    )
}

/// Polls `check` until it holds or 20 s pass.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn status_of(addr: SocketAddr, path: &str) -> String {
    http_get(addr, "admin", path)
        .map(|(status, _)| status)
        .unwrap_or_default()
}

fn body_through(addr: SocketAddr) -> Option<String> {
    http_get(addr, "shop.example.com", "/")
        .ok()
        .filter(|(status, _)| status.contains("200"))
        .map(|(_, body)| body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_follows_the_routes_configmap() {
    let ingress = free_addr();
    let nginx = Nginx::start(
        &format!(
            "server {{ listen {ingress} proxy_protocol; location / {{ return 200 \"$proxy_protocol_addr -> $proxy_protocol_server_addr\"; }} }}"
        ),
        &[ingress],
    )
    .expect("start nginx");

    let fake = FakeApiServer::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = fake.write_kubeconfig(dir.path());
    let admin = free_addr();
    let (first, second) = (free_addr(), free_addr());

    // The proxy's log: where a refused routes table shows.
    let log_path = dir.path().join("proxy.log");
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let mut command = support::hairpin_command();
    let _proxy = Killed(
        command
            .args([
                "proxy",
                "--routes-configmap",
                "hairpin/hairpin-routes",
                "--workers",
                "1",
            ])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--admin-addr", &admin.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).expect("the proxy's log file"))
            .spawn()
            .expect("start hairpin proxy"),
    );

    // No ConfigMap yet: the proxy answers, knows it has no routes, and is ready (an empty
    // table is a valid state: nothing needs a hairpin).
    eventually("readyz answers 200 with no ConfigMap", || {
        status_of(admin, "/readyz").contains("200")
    })
    .await;

    fake.apply(routes_configmap(&format!(
        "[{}]",
        route("lb/80", first, ingress, "v1")
    )));
    eventually("the first route answers", || body_through(first).is_some()).await;
    assert_eq!(
        body_through(first).as_deref(),
        Some("127.0.0.1 -> 203.0.113.10"),
        "nginx sees the client and the load balancer's address from the header"
    );

    // A second route, in v2: added without restarting, the first keeps working.
    fake.apply(routes_configmap(&format!(
        "[{},{}]",
        route("lb/80", first, ingress, "v1"),
        route("lb/443", second, ingress, "v2")
    )));
    eventually("the second route answers", || {
        body_through(second).is_some()
    })
    .await;
    assert_eq!(
        body_through(first).as_deref(),
        Some("127.0.0.1 -> 203.0.113.10")
    );

    // A broken table is ignored: the routes that work stay.
    fake.apply(routes_configmap("[{\"name\": "));
    eventually("the broken table refused", || {
        log().contains("invalid routes table; keeping the current routes")
    })
    .await;
    assert!(body_through(first).is_some() && body_through(second).is_some());

    // The ConfigMap deleted (hairpin uninstalled): the listeners go away.
    fake.delete("v1", "ConfigMap", Some("hairpin"), "hairpin-routes");
    eventually("listeners closed", || {
        std::net::TcpStream::connect(first).is_err()
    })
    .await;
    drop(nginx);
}

#[test]
fn a_bad_routes_configmap_reference_names_the_flag() {
    let output = support::hairpin_command()
        .args(["proxy", "--routes-configmap", "no-namespace"])
        .output()
        .expect("run hairpin");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--routes-configmap") && stderr.contains("NAMESPACE/NAME"),
        "{stderr}"
    );
}
