//! The objects `hairpin plan -o yaml` would write for the IP-family cluster shapes (the
//! fixtures `dual-stack` and `ipv6-only` under `crates/planner/tests/fixtures/plans/`, whose
//! text summaries are golden in the planner's `plan_golden` test): the hairpin Service's
//! families, the routes with their destinations, the Corefile blocks. Compared with
//! `tests/golden/plans/<name>.objects.yaml`; `HAIRPIN_BLESS=1 cargo test -p hairpin --test
//! plan_golden` rewrites them, and CI runs without it, so any difference fails.

mod support;

use std::path::{Path, PathBuf};

const SHAPES: [&str; 2] = ["dual-stack", "ipv6-only"];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../planner/tests/fixtures/plans")
        .join(format!("{name}.yaml"))
}

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/plans")
        .join(format!("{name}.objects.yaml"))
}

fn plan(fixture: &Path, extra: &[&str]) -> String {
    // Offline, nothing is resolved: plan the names as if they resolve to their load balancers.
    let mut cmd = support::hairpin(&["plan", "-f"]);
    cmd.arg(fixture).args(extra);
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}: {}",
        fixture.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn check(expected: &Path, actual: &str, failures: &mut Vec<String>) {
    if hairpin_testkit::golden::blessing() {
        hairpin_testkit::golden::bless(expected, actual);
        return;
    }
    match std::fs::read_to_string(expected) {
        Ok(text) if text == actual => {}
        Ok(text) => failures.push(format!(
            "{} differs\n--- expected\n{text}\n--- actual\n{actual}",
            expected.display()
        )),
        Err(err) => failures.push(format!(
            "{}: {err}; run with HAIRPIN_BLESS=1",
            expected.display()
        )),
    }
}

#[test]
fn the_family_shapes_write_the_objects_of_their_goldens() {
    let mut failures = Vec::new();
    for name in SHAPES {
        let objects = plan(&fixture(name), &["-o", "yaml"]);
        check(&golden(name), &objects, &mut failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// What the dual-stack and IPv6-only goldens must hold, said once more in words, so a bless
/// that got them wrong fails here.
#[test]
fn the_family_goldens_say_what_the_cluster_shape_needs() {
    let dual = plan(&fixture("dual-stack"), &["-o", "yaml"]);
    for expected in [
        "ipFamilyPolicy: PreferDualStack",
        "ipFamilies:\n  - IPv4\n  - IPv6",
        // Each client family gets the load balancer's address of its own family.
        r#""destinations": ["#,
        r#""203.0.113.10:443","#,
        r#""[2001:db8::10]:443""#,
        r#""listen": "[::]:10001""#,
        // node-local-dns answers both families from the hairpin Service's ClusterIPs.
        "template IN A {",
        "answer \"{{ .Name }} 30 IN A 10.96.0.30\"",
        "template IN AAAA {",
        "answer \"{{ .Name }} 30 IN AAAA fd00:10:96::30\"",
    ] {
        assert!(
            dual.contains(expected),
            "dual-stack: missing {expected:?}:\n{dual}"
        );
    }
    let text = plan(&fixture("dual-stack"), &[]);
    for line in [
        "10.96.0.30      shop.example.com",
        "fd00:10:96::30  shop.example.com",
    ] {
        assert!(
            text.contains(line),
            "hosts block: missing {line:?}:\n{text}"
        );
    }

    let v6 = plan(&fixture("ipv6-only"), &["-o", "yaml"]);
    for expected in [
        "ipFamilyPolicy: SingleStack",
        "ipFamilies:\n  - IPv6",
        r#""destination": "[2001:db8::10]:443""#,
        "answer \"{{ .Name }} 30 IN AAAA fd00:10:96::30\"",
    ] {
        assert!(
            v6.contains(expected),
            "ipv6-only: missing {expected:?}:\n{v6}"
        );
    }
    // No IPv4 ClusterIP: an A query gets NODATA (an SOA, no record), not the public answer.
    let a_template = v6
        .split("template IN A {")
        .nth(1)
        .expect("an A template")
        .split("fallthrough")
        .next()
        .unwrap()
        .to_owned();
    assert!(
        a_template.contains("authority \"{{ .Zone }} 30 IN SOA"),
        "{a_template}"
    );
    assert!(!a_template.contains("answer"), "{a_template}");
    assert!(!v6.contains("destinations"), "{v6}");
}
