//! `hairpin doctor` as a process against real nginx on loopback: the hairpin signature, a
//! healthy server, JSON output, exit codes, bad input, and the `kubectl hairpin` plugin name;
//! and over the fake API server, the cure it names for three clusters (issue 30 item 6).

#[path = "../../doctor/tests/support/clusters.rs"]
mod clusters;
mod support;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use hairpin_testkit::{Nginx, free_addr};

fn hairpin(args: &[&str]) -> Output {
    support::hairpin_command()
        .args(args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("KUBECONFIG", "/nonexistent/hairpin-test-kubeconfig")
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn doctor_tells_the_hairpin_signature_from_a_healthy_server() {
    let proxy_only = free_addr();
    let plain = free_addr();
    let _nginx = Nginx::start(
        &format!(
            "server {{ listen {proxy_only} proxy_protocol; location / {{ return 200 \"ok\"; }} }}\n\
             server {{ listen {plain}; location / {{ return 200 \"ok\"; }} }}"
        ),
        &[proxy_only, plain],
    )
    .unwrap();

    // nginx requires the header: plain fails, PROXY works -> BROKEN, exit 1.
    let port = proxy_only.port().to_string();
    let out = hairpin(&["doctor", "127.0.0.1", "--port", &port, "--no-cluster"]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains(&format!("127.0.0.1:{port}  BROKEN")),
        "{report}"
    );
    assert!(report.contains("hairpin short-circuit"), "{report}");
    assert!(report.contains("install hairpin"), "{report}");

    // JSON for scripts, with the same verdict.
    let out = hairpin(&[
        "doctor",
        "127.0.0.1",
        "--port",
        &port,
        "--no-cluster",
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let host = &json["hosts"][0];
    assert_eq!(host["verdict"]["status"], "BROKEN");
    assert_eq!(host["network"]["probes"]["plain"]["outcome"], "empty_reply");
    assert_eq!(host["network"]["probes"]["proxy_v1"]["outcome"], "answered");
    assert_eq!(host["network"]["probes"]["proxy_v2"]["outcome"], "answered");
    assert_eq!(host["cluster"]["state"], "not_checked");

    // YAML, as kubectl users expect: the same document.
    let out = hairpin(&[
        "doctor",
        "127.0.0.1",
        "--port",
        &port,
        "--no-cluster",
        "-o",
        "yaml",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let yaml: serde_json::Value =
        serde_saphyr::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
    let host = &yaml["hosts"][0];
    assert_eq!(host["verdict"]["status"], "BROKEN");
    assert_eq!(host["network"]["probes"]["plain"]["outcome"], "empty_reply");
    assert_eq!(host["network"]["probes"]["proxy_v1"]["outcome"], "answered");
    assert_eq!(host["cluster"]["state"], "not_checked");

    // A server that takes plain requests -> OK, exit 0; several hosts, one broken -> exit 1.
    let plain_port = plain.port().to_string();
    let out = hairpin(&["doctor", "localhost", "--port", &plain_port, "--no-cluster"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains(&format!("localhost:{plain_port}  OK")));
}

#[test]
fn doctor_exit_codes_for_bad_input_and_unreachable_hosts() {
    // Usage errors: exit 2, a clear message, no panic.
    for args in [
        vec!["doctor"],
        vec!["doctor", "--no-cluster"],
        vec!["doctor", "https://shop.example.com/"],
        vec!["doctor", "shop.example.com:443"],
        vec!["doctor", "localhost", "--timeout", "0"],
        vec!["doctor", "localhost", "--port", "70000"],
        vec![
            "doctor",
            "localhost",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ],
    ] {
        let out = hairpin(&args);
        let report = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {report}");
        assert!(!report.contains("panicked"), "{report}");
        assert!(report.contains("error"), "{args:?}: {report}");
    }

    // Nothing listens: BROKEN, but not called a hairpin problem.
    let closed = free_addr();
    let out = hairpin(&[
        "doctor",
        "127.0.0.1",
        "--port",
        &closed.port().to_string(),
        "--no-cluster",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("not the hairpin signature"),
        "{}",
        text(&out)
    );

    // A name that does not resolve.
    let out = hairpin(&[
        "doctor",
        "does-not-exist.invalid",
        "--no-cluster",
        "--timeout",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("does not resolve"), "{}", text(&out));
}

#[test]
fn doctor_without_api_access_says_what_it_could_not_check_and_does_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    // A kubeconfig pointing at a port where nothing listens.
    let closed = free_addr();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    server: http://{closed}\n\
             contexts:\n- name: lab\n  context:\n    cluster: lab\n    user: lab\ncurrent-context: lab\n\
             users:\n- name: lab\n  user:\n    token: test\n"
        ),
    )
    .unwrap();
    let target = free_addr();
    let _nginx = Nginx::start(
        &format!("server {{ listen {target}; location / {{ return 200 \"ok\"; }} }}"),
        &[target],
    )
    .unwrap();
    let started = Instant::now();
    let out = hairpin(&[
        "doctor",
        "127.0.0.1",
        "--port",
        &target.port().to_string(),
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--timeout",
        "2",
    ]);
    let report = text(&out);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(report.contains("cluster         not checked"), "{report}");
    assert!(report.contains("cluster checks skipped"), "{report}");
}

#[test]
fn kubectl_plugin_name_is_used_when_linked_as_kubectl_hairpin() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("kubectl-hairpin");
    std::os::unix::fs::symlink(Path::new(env!("CARGO_BIN_EXE_hairpin")), &link).unwrap();
    let out = hairpin_testkit::isolated_command(&link)
        .args(["doctor", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Usage: kubectl hairpin doctor"), "{help}");
    // The same arguments work through the plugin name.
    let closed = free_addr();
    let out = hairpin_testkit::isolated_command(&link)
        .args([
            "doctor",
            "127.0.0.1",
            "--port",
            &closed.port().to_string(),
            "--no-cluster",
            "-o",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["hosts"][0]["verdict"]["status"], "BROKEN");
    // Invoked under its own name, the help says `hairpin`.
    let help = hairpin(&["doctor", "--help"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("Usage: hairpin doctor"));
}

/// `hairpin doctor 127.0.0.1 --port <nginx>` over a fake API server holding `objects` (the
/// load balancer's status address is 127.0.0.1), from a pod (`KUBERNETES_SERVICE_HOST` set:
/// the in-cluster path) with the default `--cure auto`. The exit code and the text.
async fn doctor_over(
    objects: Vec<serde_json::Value>,
    nginx_server: &str,
    output: &str,
) -> (Option<i32>, String) {
    let addr = free_addr();
    let _nginx = Nginx::start(&nginx_server.replace("ADDR", &addr.to_string()), &[addr]).unwrap();
    let fake = hairpin_fake_apiserver::FakeApiServer::start().await;
    fake.apply_many(objects);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake.write_kubeconfig(dir.path());
    let mut command = support::hairpin_command();
    command
        .args([
            "doctor",
            "127.0.0.1",
            "--port",
            &addr.port().to_string(),
            "-o",
            output,
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env("KUBERNETES_SERVICE_HOST", "10.96.0.1")
        .env("HAIRPIN_DOCTOR_HOSTS_FILE", dir.path().join("hosts"));
    let out = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    (out.status.code(), text(&out))
}

/// nginx as an ingress that requires the PROXY protocol (what a pod meets when kube-proxy
/// short-circuits the load balancer's address).
const PROXY_INGRESS: &str =
    "server { listen ADDR proxy_protocol; location / { return 200 \"ok\"; } }";

/// nginx answering plain requests (what a pod meets through a load balancer that adds the
/// header, seen from the doctor's side: an answer).
const PLAIN_INGRESS: &str = "server { listen ADDR; location / { return 200 \"ok\"; } }";

#[tokio::test]
async fn doctor_names_the_ccm_cure_for_hcloud_ccm_1_21_with_proxy_on() {
    let (code, report) =
        doctor_over(clusters::hcloud_cluster("127.0.0.1"), PLAIN_INGRESS, "text").await;
    println!("--- hcloud-ccm 1.21, PROXY on ---\n{report}");
    assert_eq!(code, Some(0), "{report}");
    assert!(report.contains("NOT NEEDED"), "{report}");
    assert!(
        report.contains("kube-proxy      v1.31.2 (iptables), mode from ConfigMap kube-system/kube-proxy config.conf"),
        "{report}"
    );
    assert!(
        report.contains(
            "cloud ctrl      hcloud-cloud-controller-manager v1.21.0 computes ipMode itself"
        ),
        "{report}"
    );
    assert!(
        report.contains(
            "cure            the CCM cures it: hcloud-cloud-controller-manager v1.21.0 sets ipMode: Proxy itself"
        ),
        "{report}"
    );
}

#[tokio::test]
async fn doctor_names_the_native_cure_for_digitalocean_on_1_31_with_kube_proxy() {
    let (code, report) = doctor_over(
        clusters::digitalocean_cluster("127.0.0.1"),
        PROXY_INGRESS,
        "text",
    )
    .await;
    println!("--- DigitalOcean, Kubernetes 1.31, kube-proxy ---\n{report}");
    assert_eq!(code, Some(1), "{report}");
    assert!(
        report.contains("127.0.0.1:") && report.contains("BROKEN"),
        "{report}"
    );
    assert!(
        report.contains(
            "cure            native: kube-proxy v1.31.2 (iptables, the default) honours ipMode: Proxy"
        ),
        "{report}"
    );
    assert!(
        report
            .contains("hairpin plans   dns (--cure auto): ipMode: Proxy is to be proven by probe"),
        "{report}"
    );
    assert!(
        report.contains("fix 1: install hairpin: its native cure works here"),
        "{report}"
    );
    // JSON carries the same judgement for scripts.
    let (_, json) = doctor_over(
        clusters::digitalocean_cluster("127.0.0.1"),
        PROXY_INGRESS,
        "json",
    )
    .await;
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let facts = &json["hosts"][0]["cluster"];
    assert_eq!(facts["cure"]["cure"], "native", "{facts}");
    assert_eq!(facts["ip_mode"]["honours"], true, "{facts}");
    assert_eq!(facts["kube_proxy"]["version"], "v1.31.2", "{facts}");
}

#[tokio::test]
async fn doctor_names_the_dns_cure_for_cilium_1_16_kube_proxy_replacement_and_why() {
    let (code, report) =
        doctor_over(clusters::cilium_cluster("127.0.0.1"), PROXY_INGRESS, "text").await;
    println!("--- Cilium 1.16 kube-proxy replacement ---\n{report}");
    assert_eq!(code, Some(1), "{report}");
    assert!(
        report.contains("kube-proxy      none found (DaemonSet kube-system/kube-proxy)"),
        "{report}"
    );
    assert!(
        report.contains(
            "cure            dns: Cilium v1.16.5 kube-proxy replacement (kube-proxy-replacement=true) ignores ipMode (needs >= 1.17, not 1.18.0)"
        ),
        "{report}"
    );
    // The Nodes' gate (issue 45): hairpin's plan does not even try ipMode: Proxy on a data
    // plane known to ignore it (so no `--cure dns` advice to skip that try), and names why.
    assert!(
        report.contains(
            "hairpin plans   dns (--cure auto): native not proven on every node: every node (DaemonSet kube-system/cilium runs Cilium v1.16.5"
        ),
        "{report}"
    );
    assert!(!report.contains("`--cure dns`"), "{report}");
    assert!(report.contains("`waitInsteadOfSelfCheck: 30s`"), "{report}");
    assert!(
        report.contains("cert-manager    v1.21.0 (cert-manager/cert-manager)"),
        "{report}"
    );
}

/// A tenant's strings (an annotation value, hairpin's record edited by anyone who may) are
/// printed escaped: one line each.
#[tokio::test]
async fn doctor_escapes_what_it_reads_from_the_cluster() {
    let mut objects = clusters::digitalocean_cluster("127.0.0.1");
    objects.extend(clusters::kube_proxy(
        "v1.31.2\u{1b}[2J\nfix 9: forged",
        "ipvs\\nnote: forged",
        "",
        &[],
    ));
    let (_, report) = doctor_over(objects, PROXY_INGRESS, "text").await;
    assert!(
        report.contains("kube-proxy      v1.31.2\\u{1b}[2J\\nfix 9: forged (ipvs\\nnote: forged)"),
        "{report}"
    );
    assert!(!report.contains('\u{1b}'), "{report}");
    assert!(!report.contains("\nfix 9: forged"), "{report}");
    assert!(!report.contains("\nnote: forged"), "{report}");
}
