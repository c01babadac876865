//! `hairpin uninstall` run as the chart's hook Job runs it (the binary, its own client), while
//! two `hairpin controller` processes (leader and standby) keep running.

mod support;

use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use hairpin_fake_apiserver::{FakeApiServer, object};
use support::{COREFILE, corefile, hairpin};

/// A `hairpin controller` process, and its admin address.
fn controller(kubeconfig: &str, identity: &str) -> (Child, SocketAddr) {
    let admin_addr = hairpin_testkit::free_addr();
    let admin = admin_addr.to_string();
    let child = hairpin(&[
        "controller",
        "--kubeconfig",
        kubeconfig,
        "--identity",
        identity,
        "--lease-duration",
        "3s",
        "--debounce",
        "50ms",
        "--admin-addr",
        &admin,
        "--log-format",
        "json",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    (child, admin_addr)
}

/// `/readyz` answers 200: caches synced (the leader, or a warm standby).
fn ready(admin: SocketAddr) -> bool {
    hairpin_testkit::http_get(admin, "localhost", "/readyz")
        .is_ok_and(|(status, _)| status.split_whitespace().nth(1) == Some("200"))
}

fn stop(child: Child) -> String {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let output = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_uninstall_job_fences_two_running_controllers_and_says_what_still_runs() {
    let fake = FakeApiServer::start().await;
    support::seed(&fake);
    fake.apply(object(
        "apps/v1",
        "Deployment",
        Some("hairpin"),
        "hairpin-controller",
        serde_json::json!({"spec": {"replicas": 2}, "status": {"replicas": 2}}),
    ));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake.write_kubeconfig(dir.path());
    let kubeconfig = kubeconfig.to_str().unwrap().to_owned();
    let (a, a_admin) = controller(&kubeconfig, "hairpin-controller-a");
    let (b, b_admin) = controller(&kubeconfig, "hairpin-controller-b");
    let written = fake
        .wait_until(Duration::from_secs(20), |f| {
            corefile(f).contains("web.example.com")
        })
        .await;
    assert!(written.is_some(), "the leader wrote the DNS change");
    // Both ready: the leader, and the standby warm.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(ready(a_admin) && ready(b_admin)) {
        assert!(Instant::now() < deadline, "both controllers ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let job = kubeconfig.clone();
    let uninstall =
        tokio::task::spawn_blocking(move || hairpin(&["uninstall", "--kubeconfig", &job]).output())
            .await
            .unwrap()
            .unwrap();
    let stdout = String::from_utf8_lossy(&uninstall.stdout).into_owned();
    assert!(
        uninstall.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&uninstall.stderr)
    );
    let done = Instant::now();
    println!("{stdout}");
    assert!(
        stdout.contains(
            "fenced the controllers: Lease hairpin/hairpin-controller is held for hairpin-uninstall"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("stopped writing (acknowledged after"),
        "{stdout}"
    );
    assert!(
        stdout.contains("still running: Deployment hairpin/hairpin-controller (2 pod(s)"),
        "{stdout}"
    );
    assert_eq!(corefile(&fake), COREFILE, "byte-for-byte restore");

    // Both processes keep running for a while: nothing comes back.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(corefile(&fake), COREFILE, "still the original");
    let writes: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.at > done && r.method != "GET" && !r.uri.contains("/events"))
        .map(|r| format!("{} {}", r.method, r.uri))
        .collect();
    assert_eq!(writes, Vec::<String>::new(), "no write after uninstall");
    assert!(
        fake.list("v1", "Service")
            .iter()
            .all(|s| s["metadata"]["namespace"] != "hairpin")
    );
    let logs = [stop(a), stop(b)];
    for log in &logs {
        assert!(
            log.contains("hairpin uninstall fenced the controller"),
            "each controller says why it is idle:\n{log}"
        );
        assert!(
            !log.contains("could not vacate"),
            "no vacate warning on the way out:\n{log}"
        );
    }
}
