//! `hairpin controller` and `hairpin uninstall` as processes, against the fake API server
//! through a kubeconfig file (the documented local run).

mod support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use hairpin_fake_apiserver::FakeApiServer;
use support::{COREFILE, corefile, hairpin};

fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let (status, body) =
        hairpin_testkit::http_get(addr, "localhost", path).expect("admin server reachable");
    let code = status
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_runs_locally_from_a_kubeconfig_and_uninstall_restores_coredns() {
    let fake = FakeApiServer::start().await;
    support::seed(&fake);

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake.write_kubeconfig(dir.path());
    let kubeconfig = kubeconfig.to_str().unwrap().to_owned();
    let admin = hairpin_testkit::free_addr();

    let child = hairpin(&[
        "controller",
        "--kubeconfig",
        &kubeconfig,
        "--leader-election=false",
        "--debounce",
        "50ms",
        "--admin-addr",
        &admin.to_string(),
        "--log-format",
        "json",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();

    let written = fake
        .wait_until(Duration::from_secs(20), |f| {
            corefile(f).contains("web.example.com")
        })
        .await;
    assert!(
        written.is_some(),
        "the controller process wrote the DNS change"
    );
    let (status, body) = tokio::task::spawn_blocking(move || http_get(admin, "/readyz"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let mut metrics = String::new();
    for _ in 0..50 {
        metrics = tokio::task::spawn_blocking(move || http_get(admin, "/metrics"))
            .await
            .unwrap()
            .1;
        if metrics.contains("hairpin_controller_managed_load_balancers 1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        metrics.contains("hairpin_controller_reconciles_total"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hairpin_controller_managed_load_balancers 1"),
        "{metrics}"
    );

    // SIGTERM: a clean exit.
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let logs = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "exit {:?}\n{logs}", output.status);
    // Gateway API is absent on this cluster: that is one line at INFO, not a line per kind
    // (and no kube-client WARN per 404).
    let loud: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains(r#""level":"WARN""#) || line.contains(r#""level":"ERROR""#))
        .collect();
    assert!(loud.is_empty(), "{logs}");
    let absent: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains("not installed (no CRD)"))
        .collect();
    assert_eq!(absent.len(), 1, "{logs}");
    for kind in ["Gateway", "HTTPRoute", "GRPCRoute", "TLSRoute"] {
        assert!(absent[0].contains(kind), "{}", absent[0]);
    }
    let first = logs.lines().next().unwrap_or_default();
    assert!(
        serde_json::from_str::<serde_json::Value>(first).is_ok(),
        "JSON logs: {first}"
    );

    // Another program's Lease at hairpin's Lease name (no hairpin marks): uninstall leaves it
    // and says why.
    fake.apply(hairpin_fake_apiserver::object(
        "coordination.k8s.io/v1",
        "Lease",
        Some("hairpin"),
        "hairpin-controller",
        serde_json::json!({"spec": {"holderIdentity": "other-app-0"}}),
    ));
    let uninstall = tokio::task::spawn_blocking(move || {
        hairpin(&["uninstall", "--kubeconfig", &kubeconfig]).output()
    })
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&uninstall.stdout);
    assert!(
        uninstall.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&uninstall.stderr)
    );
    assert!(stdout.contains("Corefile restored"), "{stdout}");
    assert!(
        stdout.contains("left Lease hairpin/hairpin-controller in place: it is not hairpin's"),
        "{stdout}"
    );
    assert!(
        fake.get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("hairpin"),
            "hairpin-controller"
        )
        .is_some()
    );
    assert_eq!(corefile(&fake), COREFILE, "byte-for-byte restore");
    assert!(
        fake.list("v1", "Service")
            .iter()
            .all(|s| s["metadata"]["namespace"] != "hairpin")
    );
}

#[test]
fn a_missing_kubeconfig_is_a_clear_error() {
    let output = hairpin(&["uninstall", "--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/kubeconfig"), "{stderr}");
}
