//! The skip and bless guards as a CI run meets them: this test binary runs its own `#[ignore]`d
//! helper tests in a child process, with `CI` set or not, and reads their exit status, output and
//! skip log.

use std::path::Path;
use std::process::{Command, Output};

use hairpin_testkit::golden;
use hairpin_testkit::skip::{self, Cause, LOG_ENV};

/// Runs the helper test `name` of this binary; `ci` is the child's `CI` (unset when `None`).
fn run(name: &str, ci: Option<&str>, log: &Path, envs: &[(&str, &str)]) -> Output {
    let mut command = Command::new(std::env::current_exe().expect("this test binary"));
    command
        .args([name, "--exact", "--include-ignored", "--test-threads=1"])
        .env(LOG_ENV, log)
        .env_remove("CI")
        .env_remove(golden::BLESS_ENV);
    if let Some(ci) = ci {
        command.env("CI", ci);
    }
    command.envs(envs.iter().copied());
    command.output().expect("run the helper test")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
#[ignore = "helper of a_missing_peer_fails_under_ci_and_is_recorded_elsewhere"]
fn helper_missing_peer() {
    skip::skip(
        "helper_missing_peer",
        Cause::Missing,
        "the demo peer: looked for it in /nonexistent/shared/peers/demo",
    );
}

#[test]
#[ignore = "helper of a_machine_property_skips_also_under_ci"]
fn helper_machine_property() {
    skip::skip(
        "helper_machine_property",
        Cause::Machine,
        "no IPv6 loopback on this machine",
    );
}

#[test]
#[ignore = "helper of blessing_is_refused_under_ci_and_shows_its_diff_elsewhere"]
fn helper_bless() {
    let path = std::env::var_os("GOLDEN").expect("GOLDEN names the golden file");
    if golden::blessing() {
        golden::bless(Path::new(&path), "one\nthree\n");
    }
}

#[test]
fn a_missing_peer_fails_under_ci_and_is_recorded_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("skips");
    for ci in ["true", "1", "TRUE"] {
        let out = run("helper_missing_peer", Some(ci), &log, &[]);
        let text = text(&out);
        assert!(!out.status.success(), "CI={ci}: {text}");
        assert!(
            text.contains("/nonexistent/shared/peers/demo") && text.contains("under CI=true"),
            "CI={ci}: the failure names what is missing and where it was looked for: {text}"
        );
    }
    for ci in [None, Some("false"), Some("")] {
        let out = run("helper_missing_peer", ci, &log, &[]);
        let text = text(&out);
        assert!(out.status.success(), "CI={ci:?}: {text}");
        assert!(
            text.contains("SKIPPED helper_missing_peer (missing)"),
            "shown past the capture: {text}"
        );
    }
    // Every skip is logged, the failing ones too: three failed, three skipped.
    let lines = std::fs::read_to_string(&log).unwrap();
    let expected = "missing\thelper_missing_peer\tthe demo peer: looked for it in /nonexistent/shared/peers/demo\n";
    assert_eq!(lines, expected.repeat(6));
}

#[test]
fn a_machine_property_skips_also_under_ci() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("skips");
    let out = run("helper_machine_property", Some("true"), &log, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "machine\thelper_machine_property\tno IPv6 loopback on this machine\n"
    );
}

#[test]
fn blessing_is_refused_under_ci_and_shows_its_diff_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("skips");
    let golden_file = dir.path().join("x.golden");
    std::fs::write(&golden_file, "one\ntwo\n").unwrap();
    let envs = [
        ("GOLDEN", golden_file.to_str().unwrap()),
        (golden::BLESS_ENV, "1"),
    ];
    let out = run("helper_bless", Some("true"), &log, &envs);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("HAIRPIN_BLESS=1 under CI=true"),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read_to_string(&golden_file).unwrap(), "one\ntwo\n");
    let out = run("helper_bless", None, &log, &envs);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("BLESSED") && shown.contains("-two\n") && shown.contains("+three\n"),
        "the change is shown as a diff: {shown}"
    );
    assert_eq!(
        std::fs::read_to_string(&golden_file).unwrap(),
        "one\nthree\n"
    );
    // Blessing again changes nothing and shows nothing.
    let out = run("helper_bless", None, &log, &envs);
    assert!(!text(&out).contains("BLESSED"), "{}", text(&out));
}
