//! Against an unreachable API server, the controller says so once, with the server's URL and
//! the backoff, instead of a line per watch and retry (kube-client's own ERROR line for each
//! failed request included): the server is a loopback port nothing listens on.

mod support;

use std::io::Read as _;
use std::net::TcpListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
fn an_unreachable_api_server_is_one_warning_with_its_url_and_backoff() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"https://127.0.0.1:{port}\", insecure-skip-tls-verify: true}}\nusers:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
        ),
    )
    .unwrap();
    let admin = hairpin_testkit::free_addr();
    let mut cmd = support::hairpin_command();
    let mut child = cmd
        .args([
            "controller",
            "--leader-election=false",
            "--admin-addr",
            &admin.to_string(),
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Until the watches have failed several times over, counted in its metrics (about 35
    // failures a round, one per watch and discovery read), not a guess of how long that takes.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut errors = 0.0;
    while errors < 200.0 {
        assert!(
            Instant::now() < deadline,
            "the watches did not fail {errors} times"
        );
        std::thread::sleep(Duration::from_millis(100));
        errors = hairpin_testkit::http_get(admin, "admin", "/metrics")
            .map(|(_, body)| errors_total(&body))
            .unwrap_or(0.0);
    }
    child.kill().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    child.wait().unwrap();

    let loud: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("WARN") || line.contains("ERROR"))
        .collect();
    assert_eq!(loud.len(), 1, "one warning for one condition:\n{stderr}");
    let warning = loud[0];
    assert!(
        warning.contains(&format!("https://127.0.0.1:{port}")),
        "{warning}"
    );
    assert!(warning.contains("backoff"), "{warning}");
    assert!(
        !stderr.contains("failed with error"),
        "kube-client's own lines are folded:\n{stderr}"
    );
}

/// The sum of `hairpin_controller_errors_total` over its labels.
fn errors_total(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with("hairpin_controller_errors_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
