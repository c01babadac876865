//! `hairpin plan --dns-mode external-dns` as a user runs it, on the external-dns fixtures under
//! `crates/planner/tests/fixtures/plans/` (their text summaries are golden in the planner's
//! `plan_golden` test): `-o yaml` writes the DNSEndpoints and no DNS ConfigMap (golden:
//! `tests/golden/plans/<name>.objects.yaml`, `HAIRPIN_BLESS=1` rewrites it), `-o json` and
//! `-o diff` show every DNSEndpoint created, replaced or deleted.

mod support;

use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../planner/tests/fixtures/plans")
        .join(format!("{name}.yaml"))
}

fn plan(name: &str, extra: &[&str]) -> String {
    // Offline, nothing is resolved: plan the names as if they resolve to their load balancers.
    let mut cmd = support::hairpin(&["plan", "--dns-mode", "external-dns", "-f"]);
    cmd.arg(fixture(name)).args(extra);
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn yaml_writes_the_dns_endpoints_of_the_golden_and_no_dns_config_map() {
    let mut failures = Vec::new();
    for name in ["dns-external-dns", "dns-external-dns-dual-stack"] {
        let objects = plan(name, &["-o", "yaml"]);
        assert!(
            !objects.contains("namespace: kube-system"),
            "{name}: a kube-system object is written:\n{objects}"
        );
        let golden = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/plans")
            .join(format!("{name}.objects.yaml"));
        if hairpin_testkit::golden::blessing() {
            hairpin_testkit::golden::bless(&golden, &objects);
        }
        match std::fs::read_to_string(&golden) {
            Ok(text) if text == objects => {}
            Ok(text) => failures.push(format!(
                "{} differs\n--- expected\n{text}\n--- actual\n{objects}",
                golden.display()
            )),
            Err(err) => failures.push(format!(
                "{}: {err}; run with HAIRPIN_BLESS=1",
                golden.display()
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let dual = plan("dns-external-dns-dual-stack", &["-o", "yaml"]);
    for expected in [
        "kind: DNSEndpoint",
        "hairpin.io/dns-endpoint: \"true\"",
        "recordType: AAAA",
        "- fd00:10:96::30",
        "recordTTL: 30",
    ] {
        assert!(dual.contains(expected), "missing {expected:?}:\n{dual}");
    }
    let gke = plan("dns-external-dns", &["-o", "yaml"]);
    assert!(
        gke.contains("# delete: DNSEndpoint hairpin/hairpin-web-old"),
        "{gke}"
    );
    assert!(!gke.contains("corp-records"), "{gke}");
}

#[test]
fn json_lists_the_dns_endpoints_and_their_changes() {
    let out = plan("dns-external-dns", &["-o", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["dns"]["mode"], "external-dns");
    assert_eq!(doc["dns"]["writes"], serde_json::json!([]));
    let endpoints = &doc["dns"]["dnsEndpoints"];
    assert_eq!(
        endpoints["objects"][0]["name"],
        "hairpin/hairpin-ingress-nginx-ingress-nginx-controller"
    );
    assert_eq!(
        endpoints["objects"][0]["endpoints"][1],
        serde_json::json!({"dnsName": "shop.example.com", "recordType": "A", "recordTTL": 30, "targets": ["10.96.0.31"]})
    );
    assert_eq!(endpoints["pending"][0]["hostname"], "mail.example.com");
    assert_eq!(
        endpoints["stale"],
        serde_json::json!(["hairpin/hairpin-web-old"])
    );
    let changes: Vec<(String, String, String)> = doc["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "DNSEndpoint")
        .map(|c| {
            (
                c["action"].as_str().unwrap().to_owned(),
                c["namespace"].as_str().unwrap().to_owned(),
                c["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            (
                "update".into(),
                "hairpin".into(),
                "hairpin-ingress-nginx-ingress-nginx-controller".into()
            ),
            ("delete".into(), "hairpin".into(), "hairpin-web-old".into()),
        ]
    );
    // No kube-system ConfigMap is changed: there is none to clean up here.
    assert!(
        doc["changes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["namespace"] != "kube-system"),
        "{out}"
    );
}

#[test]
fn diff_shows_the_new_targets_and_the_deletion() {
    let out = plan("dns-external-dns", &["-o", "diff"]);
    assert!(
        out.contains("--- a/dnsendpoint/hairpin/hairpin-ingress-nginx-ingress-nginx-controller"),
        "{out}"
    );
    assert!(out.contains("-    - 10.96.0.30\n"), "{out}");
    assert!(out.contains("+    - 10.96.0.31\n"), "{out}");
    assert!(
        out.contains("--- a/dnsendpoint/hairpin/hairpin-web-old\n+++ /dev/null"),
        "{out}"
    );
}

/// Switching an existing install to external-dns: its Corefile block and coredns-custom key
/// are removed (the plan shows both), and nothing else of them changes.
#[test]
fn a_mode_switch_removes_the_earlier_modes_blocks() {
    let cluster = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cluster.yaml"),
    )
    .unwrap();
    // Plan in corefile mode, apply its Corefile, then plan in external-dns mode.
    let dir = std::env::temp_dir().join(format!("hairpin-extdns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("cluster.yaml");
    std::fs::write(&input, &cluster).unwrap();
    let run = |args: &[&str]| {
        // Offline, nothing is resolved: plan the names as if they resolve to their load balancers.
        let mut cmd = support::hairpin(&["plan", "-f"]);
        cmd.arg(&input).args(args);
        let out = cmd.output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let corefile_objects = run(&["--dns-mode", "corefile", "-o", "yaml"]);
    let written: Vec<&str> = corefile_objects
        .split("---\n")
        .filter(|d| d.contains("kind: ConfigMap") && d.contains("namespace: kube-system"))
        .collect();
    assert!(!written.is_empty(), "{corefile_objects}");
    // The ConfigMaps as written replace the ones read.
    let name = |doc: &str| {
        doc.lines()
            .find_map(|l| l.strip_prefix("  name: "))
            .map(str::to_owned)
    };
    let names: Vec<Option<String>> = written.iter().map(|d| name(d)).collect();
    let kept: Vec<&str> = cluster
        .split("\n---\n")
        .filter(|d| {
            !(d.contains("kind: ConfigMap")
                && d.contains("namespace: kube-system")
                && names.contains(&name(d)))
        })
        .collect();
    std::fs::write(
        &input,
        format!("{}\n---\n{}", kept.join("\n---\n"), written.join("---\n")),
    )
    .unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&run(&["--dns-mode", "external-dns", "-o", "json"])).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let cleanups: Vec<&serde_json::Value> = json["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["namespace"] == "kube-system")
        .collect();
    assert!(!cleanups.is_empty(), "{json:#}");
    for c in cleanups {
        assert_eq!(c["kind"], "ConfigMap");
        let text = c["written"].as_str().unwrap_or_default();
        assert!(!text.contains("hairpin"), "{text}");
    }
}
