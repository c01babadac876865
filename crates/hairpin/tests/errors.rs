//! Every error the `hairpin` binary prints names what it is about (the file, flag or address)
//! and shows each cause once, whichever library layer the cause comes from. The commands run
//! as a user runs them: the built binary, failing on purpose, with no cluster and no network.

mod support;

use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// What a failing run printed.
struct Failure {
    code: Option<i32>,
    /// From the `error: ` line to the end of stderr (log lines before it are left out).
    message: String,
}

fn hairpin(args: &[&str]) -> Failure {
    let mut cmd = support::hairpin_command();
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // No cluster to find: `hairpin plan` without `-f` reads the cluster of the kubeconfig
    // (`isolated_command` already dropped `KUBECONFIG`).
    cmd.env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", "/nonexistent");
    let mut child = cmd.spawn().unwrap();
    // Every case fails before it would serve anything; a run that goes on is a failure too.
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "hairpin {args:?} did not exit:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let start = if stderr.starts_with("error: ") {
        Some(0)
    } else {
        stderr.find("\nerror: ").map(|at| at + 1)
    };
    let start =
        start.unwrap_or_else(|| panic!("hairpin {args:?} printed no `error: ` line:\n{stderr}"));
    Failure {
        code: out.status.code(),
        message: stderr[start..].trim_end().to_owned(),
    }
}

/// Pieces of `message` (split at `: ` and line ends) that occur in it more than once. Short
/// pieces (`error`, a bare number) are left out: only a cause's text counts.
fn repeated_parts(message: &str) -> Vec<&str> {
    let mut repeated: Vec<&str> = message
        .split('\n')
        .flat_map(|line| line.split(": "))
        .map(str::trim)
        .filter(|part| part.len() >= 12 && message.matches(*part).count() > 1)
        .collect();
    repeated.sort_unstable();
    repeated.dedup();
    repeated
}

/// Runs a failing command and checks its exit code, that its message names each of `names`,
/// and that no cause is printed twice.
fn check(args: &[&str], code: i32, names: &[&str]) -> String {
    let failure = hairpin(args);
    assert_eq!(
        failure.code,
        Some(code),
        "hairpin {args:?}:\n{}",
        failure.message
    );
    for name in names {
        assert!(
            failure.message.contains(name),
            "hairpin {args:?}: {name:?} missing in:\n{}",
            failure.message
        );
    }
    assert_eq!(
        repeated_parts(&failure.message),
        Vec::<&str>::new(),
        "hairpin {args:?} repeats a cause:\n{}",
        failure.message
    );
    failure.message
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn the_duplicate_check_catches_a_repeated_cause() {
    // What `hairpin node-agent --remove` printed when `{:#}` appended the cause that the
    // message already held.
    let before = "error: cannot open hosts file /x/hosts for reading and writing: No such file or \
                  directory (os error 2) (mount the node's /etc/hosts with a hostPath of type \
                  File): No such file or directory (os error 2)";
    assert_eq!(
        repeated_parts(before),
        vec!["No such file or directory (os error 2)"]
    );
    let before = "error: cannot listen on 127.0.0.1:9: Address already in use (os error 98): \
                  Address already in use (os error 98)";
    assert_eq!(
        repeated_parts(before),
        vec!["Address already in use (os error 98)"]
    );
    assert!(repeated_parts("error: reading /x.yaml: No such file or directory").is_empty());
}

#[test]
fn plan_names_the_file_it_cannot_read_or_parse() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.yaml").display().to_string();
    let message = check(&["plan", "-f", &missing], 1, &[&missing]);
    assert!(message.contains("No such file or directory"), "{message}");

    let here = dir.path().display().to_string();
    check(&["plan", "-f", &here], 1, &[&here, "Is a directory"]);

    let bad = write(
        dir.path(),
        "bad.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: [\n",
    );
    check(&["plan", "-f", &bad], 1, &[&bad, "line 3"]);
}

#[test]
fn node_agent_names_the_hosts_file_and_says_how_to_mount_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("etc/hosts").display().to_string();
    let message = check(
        &["node-agent", "--hosts-file", &missing, "--remove"],
        1,
        &[&missing, "hostPath"],
    );
    assert_eq!(
        message.matches("No such file or directory").count(),
        1,
        "{message}"
    );

    let directory = dir.path().display().to_string();
    let message = check(
        &["node-agent", "--hosts-file", &directory, "--remove"],
        1,
        &[&directory],
    );
    assert_eq!(message.matches("Is a directory").count(), 1, "{message}");

    let hosts = write(dir.path(), "hosts", "127.0.0.1 localhost\n");
    let source = dir.path().join("entries.json").display().to_string();
    check(
        &[
            "node-agent",
            "--hosts-file",
            &hosts,
            "--source-file",
            &source,
            "--once",
        ],
        1,
        &[&source],
    );
    check(
        &[
            "node-agent",
            "--hosts-file",
            &hosts,
            "--source-file",
            &source,
            "--interval",
            "0",
        ],
        2,
        &["--interval", "more than zero"],
    );
}

#[test]
fn a_busy_address_is_named_once_with_its_cause_once() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig").display().to_string();

    // The admin server binds first, in every long-running command.
    for args in [
        vec![
            "controller",
            "--kubeconfig",
            &kubeconfig,
            "--leader-election=false",
            "--admin-addr",
            &addr,
        ],
        vec![
            "node-agent",
            "--hosts-file",
            &kubeconfig,
            "--source-file",
            &kubeconfig,
            "--admin-addr",
            &addr,
        ],
        vec![
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--admin-addr",
            &addr,
        ],
    ] {
        let message = check(&args, 1, &[&format!("admin address {addr}")]);
        assert_eq!(message.matches("in use").count(), 1, "{message}");
    }

    let message = check(&["echo", "--listen", &addr], 1, &[&addr]);
    assert_eq!(message.matches("in use").count(), 1, "{message}");

    let message = check(
        &[
            "proxy",
            "--listen",
            &addr,
            "--upstream",
            "127.0.0.1:9",
            "--admin-addr",
            "127.0.0.1:0",
        ],
        1,
        &[&addr, "route \"default\""],
    );
    assert_eq!(message.matches("in use").count(), 1, "{message}");
}

/// The commands that build a Kubernetes client from `--kubeconfig` and fail with status 1.
fn kubeconfig_commands(kubeconfig: &str) -> Vec<Vec<&str>> {
    vec![
        vec![
            "controller",
            "--kubeconfig",
            kubeconfig,
            "--leader-election=false",
            "--admin-addr",
            "127.0.0.1:0",
        ],
        vec!["uninstall", "--kubeconfig", kubeconfig],
        vec![
            "proxy",
            "--routes-configmap",
            "hairpin-system/routes",
            "--kubeconfig",
            kubeconfig,
            "--admin-addr",
            "127.0.0.1:0",
        ],
    ]
}

/// Every command that talks to the API, with the exit status it gives for an unusable
/// kubeconfig: 1, or 2 for the doctor (an access error is a usage error there).
fn every_kubeconfig_command(kubeconfig: &str) -> Vec<(Vec<&str>, i32)> {
    let mut commands: Vec<_> = kubeconfig_commands(kubeconfig)
        .into_iter()
        .map(|args| (args, 1))
        .collect();
    commands.push((
        vec!["doctor", "--kubeconfig", kubeconfig, "shop.example.com"],
        2,
    ));
    commands
}

#[test]
fn a_kubeconfig_that_cannot_be_read_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig").display().to_string();
    for (args, code) in every_kubeconfig_command(&kubeconfig) {
        let message = check(&args, code, &[&kubeconfig]);
        // Named once, in our words (kube's own text names it again, debug-quoted), and in the
        // same words by every command.
        assert_eq!(message.matches(&kubeconfig).count(), 1, "{message}");
        assert!(
            message.starts_with(&format!("error: cannot configure the Kubernetes client: cannot read kubeconfig {kubeconfig}: ")),
            "{message}"
        );
        assert_eq!(
            message.matches("No such file or directory").count(),
            1,
            "{message}"
        );
    }
}

#[test]
fn a_kubeconfig_that_is_not_yaml_is_named_once_with_the_parser_message_once() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = write(dir.path(), "kubeconfig", "apiVersion: v1\nclusters: [\n");
    for (args, code) in every_kubeconfig_command(&kubeconfig) {
        let message = check(&args, code, &[&kubeconfig, "line 2"]);
        assert!(
            message.starts_with(&format!(
                "error: cannot configure the Kubernetes client: cannot parse kubeconfig {kubeconfig} as YAML"
            )),
            "{message}"
        );
        assert_eq!(message.matches(&kubeconfig).count(), 1, "{message}");
        assert_eq!(message.matches("unclosed bracket").count(), 1, "{message}");
    }
}

#[test]
fn an_unknown_context_is_named_with_its_kubeconfig_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = write(
        dir.path(),
        "kubeconfig",
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    );
    for (mut args, code) in every_kubeconfig_command(&kubeconfig) {
        args.extend(["--context", "no-such-context"]);
        let message = check(&args, code, &[&kubeconfig, "no-such-context"]);
        assert!(
            message.starts_with(&format!("error: cannot configure the Kubernetes client: cannot use kubeconfig {kubeconfig}: ")),
            "{message}"
        );
    }
}

#[test]
fn doctor_still_reads_the_deprecated_hairpin_kubeconfig_variable() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("old").display().to_string();
    let out = support::hairpin_command()
        .args(["doctor", "shop.example.com"])
        .env("HAIRPIN_KUBECONFIG", &kubeconfig)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot read kubeconfig {kubeconfig}: ")),
        "{stderr}"
    );
}

#[test]
fn proxy_names_the_routes_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("routes.json").display().to_string();
    check(
        &[
            "proxy",
            "--routes-file",
            &missing,
            "--admin-addr",
            "127.0.0.1:0",
        ],
        1,
        &[&missing],
    );
    let broken = write(dir.path(), "broken.json", "{not json");
    check(
        &[
            "proxy",
            "--routes-file",
            &broken,
            "--admin-addr",
            "127.0.0.1:0",
        ],
        1,
        &[&broken],
    );
}

#[test]
fn usage_errors_name_the_flag_and_exit_2() {
    // clap's own messages (they repeat a flag in the usage line on purpose): status and name.
    for (args, flag) in [
        // Neither files nor a cluster: the message names both ways.
        (vec!["plan"], "--filename"),
        (vec!["plan"], "KUBECONFIG"),
        (vec!["proxy", "--listen", "127.0.0.1:0"], "--upstream"),
        // A duration too large for a Duration is an error, not an overflow.
        (
            vec!["controller", "--debounce", "9999999999999999h"],
            "--debounce",
        ),
        // One duration format everywhere: the message says what it accepts.
        (
            vec![
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:1",
                "--connect-timeout",
                "5 parsecs",
            ],
            "1m30s",
        ),
        (vec!["controller", "--resync", "0s"], "more than zero"),
        (
            vec!["doctor", "--timeout", "soon", "shop.example.com"],
            "--timeout",
        ),
    ] {
        let failure = hairpin(&args);
        assert_eq!(failure.code, Some(2), "{}", failure.message);
        assert!(failure.message.contains(flag), "{}", failure.message);
    }
    check(
        &["doctor", "--timeout", "0", "shop.example.com"],
        2,
        &["--timeout"],
    );
}
