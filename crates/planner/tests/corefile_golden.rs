//! Golden tests of the Corefile editor over every real-world Corefile in
//! `tests/golden/corefiles/` (a copy of `shared/fixtures/corefiles/`, see SOURCES.md there).
//!
//! For each fixture: insert a host set, update to another host set, remove; the outputs are
//! compared with committed files under `tests/golden/corefile/`, and removal must give back the
//! original bytes. `HAIRPIN_BLESS=1 cargo test -p hairpin-planner --test corefile_golden`
//! rewrites the expected files; CI runs without it, so any difference fails.

mod support;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use hairpin_planner::corefile::{
    self, CorefileError, DnsEntry, HostPattern, NodeLocalDnsInfo, analyze, analyze_node_local_dns,
    bypassed,
};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixtures_dir() -> PathBuf {
    crate_dir().join("tests/golden/corefiles")
}

fn expected_dir() -> PathBuf {
    crate_dir().join("tests/golden/corefile")
}

fn bless() -> bool {
    hairpin_testkit::golden::blessing()
}

/// Compare with (or, when blessing, write) a golden file. Returns a description of the
/// mismatch instead of panicking so that one run reports every difference.
fn check_golden(name: &str, actual: &str, failures: &mut Vec<String>) {
    let path = expected_dir().join(name);
    if bless() {
        hairpin_testkit::golden::bless(&path, actual);
        return;
    }
    match fs::read_to_string(&path) {
        Ok(expected) if expected == actual => {}
        Ok(expected) => failures.push(format!(
            "{name}: differs from the golden file\n--- expected\n{expected}\n--- actual\n{actual}"
        )),
        Err(e) => failures.push(format!(
            "{name}: cannot read {} ({e}); run with HAIRPIN_BLESS=1",
            path.display()
        )),
    }
}

fn fixtures() -> Vec<(String, String)> {
    support::corefile::read_fixtures(&fixtures_dir(), |p| {
        p.extension().is_some_and(|x| x == "Corefile")
    })
}

const LB1: &str = "hairpin-lb-1.hairpin.svc.cluster.local";
const LB2: &str = "hairpin-lb-2.hairpin.svc.cluster.local";

/// A small set: exact names and a wildcard on two load balancers.
fn set_a() -> Vec<DnsEntry> {
    vec![
        DnsEntry::new("www.example.com", LB1).unwrap(),
        DnsEntry::new("app.example.com", LB1).unwrap(),
        DnsEntry::new("*.apps.example.org", LB2).unwrap(),
    ]
}

/// A different set, large enough on LB1 to use the grouped regex rules.
fn set_b() -> Vec<DnsEntry> {
    let mut v: Vec<DnsEntry> = (1..=10)
        .map(|i| DnsEntry::new(&format!("app-{i}.team-a.example.com"), LB1).unwrap())
        .collect();
    v.push(DnsEntry::new("auth.example.net", LB1).unwrap());
    v.push(DnsEntry::new("registry.example.org", LB2).unwrap());
    v.push(DnsEntry::new("*.example.io", LB2).unwrap());
    v
}

fn analysis_summary(info: &corefile::CorefileInfo) -> String {
    let mut s = String::new();
    writeln!(s, "cluster_domain: {}", info.cluster_domain).unwrap();
    writeln!(s, "kubernetes_zones: {}", info.kubernetes_zones.join(" ")).unwrap();
    writeln!(
        s,
        "server_block: {} (line {}), serves_root: {}",
        info.server_block_keys.join(" "),
        info.server_block_line,
        info.serves_root
    )
    .unwrap();
    writeln!(s, "has_reload: {}", info.has_reload).unwrap();
    for i in &info.custom_imports {
        writeln!(
            s,
            "custom_import: {} -> key suffix {}",
            i.path, i.key_suffix
        )
        .unwrap();
    }
    writeln!(
        s,
        "imports_custom_override: {}",
        info.imports_custom_override()
    )
    .unwrap();
    writeln!(s, "custom_key_suffix: {:?}", info.custom_key_suffix()).unwrap();
    writeln!(s, "has_hairpin_block: {}", info.has_hairpin_block).unwrap();
    for w in &info.warnings {
        writeln!(s, "warning[{}]: {w}", w.metric_label()).unwrap();
    }
    s
}

#[test]
fn fixture_copies_match_the_shared_fixtures() {
    // Looked for like the peers (`../shared` beside the project, `../../shared` from a worktree
    // below it): a fixed `../shared` missed it from a worktree, and the test passed unchecked.
    let shared = match hairpin_testkit::shared_path(
        "fixtures/corefiles",
        "HAIRPIN_TEST_COREFILE_FIXTURES",
        Path::is_dir,
    ) {
        Ok(shared) => shared,
        Err(why) => {
            hairpin_testkit::skip::skip(
                "fixture_copies_match_the_shared_fixtures",
                hairpin_testkit::skip::Cause::Missing,
                &format!("the shared Corefile fixtures: {why}"),
            );
            return;
        }
    };
    let names = |dir: &Path| {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    // Every shared fixture must have an identical in-repo copy. The repository may hold a
    // fixture the shared folder does not have yet (one added here), so the check is one-way.
    let copies = names(&fixtures_dir());
    for name in names(&shared) {
        assert!(
            copies.contains(&name),
            "{name} is in shared/fixtures/corefiles but has no copy in tests/golden/corefiles"
        );
        if name == "SOURCES.md" {
            // The in-repo list may name more sources; it must keep every shared line.
            let copy = fs::read_to_string(fixtures_dir().join(&name)).unwrap();
            for line in fs::read_to_string(shared.join(&name)).unwrap().lines() {
                assert!(
                    copy.contains(line),
                    "SOURCES.md copy lacks the line {line:?}"
                );
            }
            continue;
        }
        assert_eq!(
            fs::read(shared.join(&name)).unwrap(),
            fs::read(fixtures_dir().join(&name)).unwrap(),
            "{name} differs between shared/fixtures/corefiles and tests/golden/corefiles"
        );
    }
}

#[test]
fn every_fixture_inserts_updates_and_restores() {
    let all = fixtures();
    assert!(all.len() >= 18, "fixtures missing: {}", all.len());
    let mut failures = Vec::new();
    for (name, original) in &all {
        if name.ends_with("nodelocaldns") {
            // Not a cluster CoreDNS Corefile: no `kubernetes` to rewrite with (the answers it
            // gets are tested in corefile_placement.rs).
            assert_eq!(
                corefile::apply(original, &set_a()).unwrap_err(),
                CorefileError::NoKubernetesBlock
            );
            continue;
        }
        let info = analyze(original).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_golden(
            &format!("{name}.analysis.txt"),
            &analysis_summary(&info),
            &mut failures,
        );

        let inserted = corefile::apply(original, &set_a()).unwrap();
        assert!(inserted.changed && inserted.warnings.is_empty(), "{name}");
        check_golden(
            &format!("{name}.insert.Corefile"),
            &inserted.text,
            &mut failures,
        );

        let twice = corefile::apply(&inserted.text, &set_a()).unwrap();
        assert_eq!(twice.text, inserted.text, "{name}: applying twice differs");
        assert!(!twice.changed, "{name}");

        let updated = corefile::apply(&inserted.text, &set_b()).unwrap();
        assert!(updated.changed && updated.warnings.is_empty(), "{name}");
        check_golden(
            &format!("{name}.update.Corefile"),
            &updated.text,
            &mut failures,
        );
        assert_eq!(
            updated.text,
            corefile::apply(original, &set_b()).unwrap().text,
            "{name}: update differs from a fresh insert"
        );

        for edited in [&inserted.text, &updated.text] {
            let after = analyze(edited).unwrap();
            assert_eq!(after.cluster_domain, info.cluster_domain, "{name}");
            assert!(after.has_hairpin_block, "{name}");
            let removed = corefile::remove(edited).unwrap();
            assert_eq!(
                removed.text, *original,
                "{name}: removal did not restore the original"
            );
            assert!(removed.warnings.is_empty(), "{name}");
            let emptied = corefile::apply(edited, &[]).unwrap();
            assert_eq!(emptied.text, *original, "{name}");
        }
        let nothing = corefile::remove(original).unwrap();
        assert!(!nothing.changed && nothing.text == *original, "{name}");
    }
    check_golden(
        "override.a.txt",
        &corefile::render_override(&set_a()).unwrap(),
        &mut failures,
    );
    check_golden(
        "override.b.txt",
        &corefile::render_override(&set_b()).unwrap(),
        &mut failures,
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn custom_override_imports_are_detected_where_distributions_have_them() {
    let expect = |name: &str| match name {
        "aks" | "aks-2023" | "doks" | "gardener" | "k3s" => Some(".override"),
        "lke" => Some(".include"),
        _ => None,
    };
    for (name, text) in fixtures() {
        if name.ends_with("nodelocaldns") {
            continue;
        }
        let info = analyze(&text).unwrap();
        assert_eq!(info.custom_key_suffix(), expect(&name), "{name}");
        assert_eq!(
            info.imports_custom_override(),
            expect(&name) == Some(".override"),
            "{name}"
        );
        assert_eq!(info.cluster_domain, "cluster.local", "{name}");
        assert!(info.has_reload, "{name}");
        assert!(info.serves_root, "{name}");
        assert!(info.warnings.is_empty(), "{name}: {:?}", info.warnings);
    }
}

#[test]
fn a_corefile_without_reload_gets_the_fix_in_its_warning() {
    let (_, kubeadm) = fixtures()
        .into_iter()
        .find(|(n, _)| n == "kubeadm")
        .unwrap();
    let no_reload = kubeadm.replace("    reload\n", "");
    let info = analyze(&no_reload).unwrap();
    assert!(!info.has_reload);
    assert_eq!(info.warnings.len(), 1);
    assert_eq!(info.warnings[0].metric_label(), "reload_missing");
    assert!(info.warnings[0].to_string().contains("add a `reload` line"));
}

#[test]
fn node_local_dns_forwards_only_the_cluster_zones_to_kube_dns() {
    let (_, text) = fixtures()
        .into_iter()
        .find(|(n, _)| n == "nodelocaldns")
        .unwrap();
    let info = analyze_node_local_dns(&text, &[]).unwrap();
    assert_eq!(
        info.cluster_dns_zones,
        ["cluster.local", "in-addr.arpa", "ip6.arpa"]
    );
    let root = info.servers.iter().find(|s| s.zones == ["."]).unwrap();
    assert_eq!(root.forward_to, ["__PILLAR__UPSTREAM__SERVERS__"]);
    assert!(!root.forwards_to_cluster_dns);
    assert_eq!(root.binds, ["169.254.20.10", "10.96.0.10"]);

    let names: Vec<HostPattern> = set_b().into_iter().map(|e| e.name).collect();
    assert_eq!(bypassed(&info, &names).len(), names.len());
    let zones = NodeLocalDnsInfo::zones_for(&names);
    assert_eq!(
        zones,
        [
            "example.io",
            "example.net",
            "example.org",
            "team-a.example.com"
        ]
    );
    let stanza = info.suggested_stanza(&zones).unwrap();
    let mut failures = Vec::new();
    let mut summary = format!("cluster_dns_zones: {}\n", info.cluster_dns_zones.join(" "));
    for s in &info.servers {
        writeln!(
            summary,
            "server {} (line {}): bind {} forward {} cluster_dns={}",
            s.zones.join(" "),
            s.line,
            s.binds.join(" "),
            s.forward_to.join(" "),
            s.forwards_to_cluster_dns
        )
        .unwrap();
    }
    summary.push_str("suggested stanza:\n");
    summary.push_str(&stanza);
    check_golden("nodelocaldns.analysis.txt", &summary, &mut failures);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));

    // With the suggested stanza appended, node-local-dns sends every hostname to kube-dns.
    let patched = format!("{text}{stanza}");
    let info = analyze_node_local_dns(&patched, &[]).unwrap();
    assert!(bypassed(&info, &names).is_empty());
}
