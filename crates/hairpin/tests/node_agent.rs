//! `hairpin node-agent` as a process: one-shot sync, removal, clear errors, removal on SIGTERM.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::hairpin_command;

const ORIGINAL: &str = "127.0.0.1\tlocalhost\n10.0.0.5 node-1 # the node\n";

/// `hairpin node-agent --once`: one sync of `hosts` from `source`.
fn once(hosts: &Path, source: &Path) -> Output {
    hairpin_command()
        .args(["node-agent", "--once", "--hosts-file"])
        .arg(hosts)
        .arg("--source-file")
        .arg(source)
        .output()
        .unwrap()
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

#[test]
fn once_writes_the_block_and_remove_restores_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    let source = dir.path().join("entries.json");
    write(&hosts, ORIGINAL);
    write(
        &source,
        r#"[{"ip": "10.96.0.20", "hostnames": ["shop.example.com", "api.example.com"]}]"#,
    );
    let out = once(&hosts, &source);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&hosts).unwrap();
    assert!(text.starts_with(ORIGINAL), "{text}");
    assert!(
        text.contains("10.96.0.20\tapi.example.com shop.example.com"),
        "{text}"
    );

    let out = hairpin_command()
        .args(["node-agent", "--remove", "--hosts-file"])
        .arg(&hosts)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("hairpin block removed"));
    assert_eq!(std::fs::read_to_string(&hosts).unwrap(), ORIGINAL);
}

#[test]
fn bad_input_is_a_clear_error_and_the_file_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    let source = dir.path().join("entries.yaml");
    write(
        &source,
        "- ip: 10.96.0.20\n  hostnames: [shop.example.com]\n",
    );
    std::fs::write(&hosts, b"127.0.0.1 localhost\n\xff\n").unwrap();
    let out = once(&hosts, &source);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("malformed") && stderr.contains("left unchanged"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        std::fs::read(&hosts).unwrap(),
        b"127.0.0.1 localhost\n\xff\n"
    );

    write(&hosts, ORIGINAL);
    write(
        &source,
        "- ip: 10.96.0.20\n  hostnames: ['*.example.com']\n",
    );
    let out = once(&hosts, &source);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("wildcards"));
    assert_eq!(std::fs::read_to_string(&hosts).unwrap(), ORIGINAL);

    let out = once(Path::new("/nonexistent/hosts"), &source);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/hosts"));
}

#[test]
fn the_agent_follows_its_source_and_removes_its_block_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    let source = dir.path().join("entries.yaml");
    write(&hosts, ORIGINAL);
    write(
        &source,
        "- ip: 10.96.0.20\n  hostnames: [shop.example.com]\n",
    );
    let mut child = hairpin_command()
        .args([
            "node-agent",
            "--interval",
            "1",
            "--remove-on-exit",
            "--admin-addr",
            "127.0.0.1:0",
            "--hosts-file",
        ])
        .arg(&hosts)
        .arg("--source-file")
        .arg(&source)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let wait_for = |needle: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::fs::read_to_string(&hosts).unwrap().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    };
    let found = wait_for("10.96.0.20\tshop.example.com");
    write(
        &source,
        "- ip: 10.96.0.21\n  hostnames: [shop.example.com]\n",
    );
    let followed = found && wait_for("10.96.0.21\tshop.example.com");
    let killed = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(
        found && followed,
        "the agent did not keep the file in line with its source"
    );
    assert!(killed.success());
    assert!(status.success(), "exit status {status}");
    assert_eq!(std::fs::read_to_string(&hosts).unwrap(), ORIGINAL);
}
