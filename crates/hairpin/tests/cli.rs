//! The command line's shared conventions, as a user meets them: `hairpin version`,
//! `hairpin completion <shell>`, and `-n` meaning hairpin's namespace as in kubectl.

mod support;

use std::process::{Output, Stdio};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/cluster.yaml");

fn hairpin(args: &[&str]) -> Output {
    let mut cmd = support::hairpin_command();
    cmd.args(args).stdin(Stdio::null());
    cmd.output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn version_for_people_and_for_scripts() {
    let text = stdout(&hairpin(&["version"]));
    assert!(
        text.starts_with(&format!("hairpin {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&hairpin(&["version", "-o", "json"])))
            .expect("version -o json prints JSON");
    assert_eq!(json["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(json["arch"], std::env::consts::ARCH);
    assert!(json["commit"].is_string());
    // The same version as clap's --version.
    let flag = stdout(&hairpin(&["--version"]));
    assert!(flag.contains(env!("CARGO_PKG_VERSION")), "{flag}");
}

#[test]
fn completion_scripts_name_every_command() {
    for (shell, marker) in [
        ("bash", "_hairpin()"),
        ("zsh", "#compdef hairpin"),
        ("fish", "complete -c hairpin"),
    ] {
        let script = stdout(&hairpin(&["completion", shell]));
        assert!(script.contains(marker), "{shell}: {marker} missing");
        for command in [
            "plan",
            "proxy",
            "controller",
            "doctor",
            "node-agent",
            "version",
        ] {
            assert!(script.contains(command), "{shell}: {command} missing");
        }
    }
    let out = hairpin(&["completion", "tcsh"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn dash_n_is_hairpins_namespace_as_in_kubectl() {
    let yaml = stdout(&hairpin(&[
        "plan",
        "-f",
        EXAMPLE,
        "-o",
        "yaml",
        "-n",
        "edge-system",
    ]));
    assert!(yaml.contains("namespace: edge-system"), "{yaml}");
    let default = stdout(&hairpin(&["plan", "-f", EXAMPLE, "-o", "yaml"]));
    assert!(!default.contains("edge-system"));
    assert!(default.contains("namespace: hairpin"), "{default}");
}

/// Issue 36: `hairpin --help` and `hairpin controller --help` describe both cures, and that
/// native is never used where the nodes receive the load balancer's address.
#[test]
fn help_describes_both_cures_and_where_native_is_never_used() {
    for args in [&["--help"][..], &["controller", "--help"][..]] {
        let text = stdout(&hairpin(args));
        // clap wraps lines at the terminal width: compare the words.
        let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for expected in [
            "- dns:",
            "proxy, which adds",
            "- native:",
            "`ipMode: Proxy` on the load balancer's status",
            "MetalLB, kube-vip, Cilium LB-IPAM",
            "kube-proxy would drop every rule for that IP and cut every client outside the cluster off",
        ] {
            assert!(
                words.contains(expected),
                "{args:?}: missing {expected:?}:\n{text}"
            );
        }
    }
    let text = stdout(&hairpin(&["plan", "--help"]));
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("`<prefix>delivery: proxy`")
            && words.contains("it is refused with a warning"),
        "{text}"
    );
}
