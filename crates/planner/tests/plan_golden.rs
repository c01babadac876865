//! Golden plans: every cluster fixture under `tests/fixtures/plans/` (one per provider,
//! hostname source and cluster shape), planned with the default settings (or those its
//! `# planner: --dns-mode <mode>`, `# planner: --cure <mode>` and
//! `# planner: --stub-domain-nameserver <ip>` lines ask for) and printed as `hairpin plan -f <fixture>` prints it, is compared with
//! `tests/golden/plans/<name>.plan.txt`.
//!
//! `HAIRPIN_BLESS=1 cargo test -p hairpin-planner --test plan_golden` rewrites the goldens.

use std::fs;
use std::path::PathBuf;

use hairpin_planner::{ClusterSnapshot, PlannerConfig, desired, load, render};

fn dir(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(sub)
}

fn fixtures() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir("fixtures/plans"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".yaml").map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

/// The settings a fixture asks for on its `# planner: ...` lines.
fn config_for(text: &str) -> PlannerConfig {
    let mut config = PlannerConfig::default();
    for line in text.lines() {
        if let Some(mode) = line.strip_prefix("# planner: --dns-mode ") {
            config.dns_mode = mode.trim().parse().unwrap();
        }
        if let Some(cure) = line.strip_prefix("# planner: --cure ") {
            config.cure = cure.trim().parse().unwrap();
        }
        if let Some(server) = line.strip_prefix("# planner: --stub-domain-nameserver ") {
            config
                .stub_domain_nameservers
                .push(server.trim().parse().unwrap());
        }
    }
    config
}

#[test]
fn every_fixture_plans_as_its_golden_says() {
    let bless = hairpin_testkit::golden::blessing();
    let mut failures = Vec::new();
    let names = fixtures();
    assert!(!names.is_empty());
    for name in &names {
        let path = dir("fixtures/plans").join(format!("{name}.yaml"));
        let text = fs::read_to_string(&path).unwrap();
        let mut snapshot = ClusterSnapshot::default();
        load::load_yaml(&mut snapshot, name, &text).unwrap();
        let plan = desired(&snapshot, &config_for(&text));
        let actual = render::text(&plan);
        let golden = dir("golden/plans").join(format!("{name}.plan.txt"));
        if bless {
            hairpin_testkit::golden::bless(&golden, &actual);
        }
        match fs::read_to_string(&golden) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => failures.push(format!(
                "{name}: differs from {}\n--- expected\n{expected}\n--- actual\n{actual}",
                golden.display()
            )),
            Err(e) => failures.push(format!("{name}: {}: {e}", golden.display())),
        }
    }
    // A golden without its fixture is a test that no longer runs.
    for entry in fs::read_dir(dir("golden/plans")).unwrap() {
        let file = entry.unwrap().file_name().into_string().unwrap();
        let stem = file.strip_suffix(".plan.txt").unwrap_or(&file);
        if !names.iter().any(|n| n == stem) {
            failures.push(format!("golden/plans/{file} has no fixture"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The opt-out works on every kind of source: each fixture's `hairpin.io/ignore: "true"`
/// objects name hosts that must not appear anywhere in the plan.
#[test]
fn ignored_objects_give_no_hostname() {
    for (fixture, hidden) in [
        (
            "source-external-dns",
            &[
                "hidden.example.com",
                "internal-only.example.com",
                "hidden-route.example.org",
            ][..],
        ),
        ("source-traefik", &["hidden.example.com"][..]),
        ("source-external-dns", &["clusterip.example.com"][..]),
    ] {
        let text =
            fs::read_to_string(dir("fixtures/plans").join(format!("{fixture}.yaml"))).unwrap();
        let mut snapshot = ClusterSnapshot::default();
        load::load_yaml(&mut snapshot, fixture, &text).unwrap();
        let plan = desired(&snapshot, &PlannerConfig::default());
        assert!(!plan.load_balancers.is_empty());
        for lb in &plan.load_balancers {
            for h in &lb.hostnames {
                assert!(!hidden.contains(&h.name.as_str()), "{fixture}: {h:?}");
            }
        }
        // The same objects without the opt-out do give those names (except the ClusterIP
        // Service's, which is never read).
        let text = text.replace(
            "hairpin.io/ignore: \"true\"",
            "hairpin.io/ignore: \"false\"",
        );
        let mut snapshot = ClusterSnapshot::default();
        load::load_yaml(&mut snapshot, fixture, &text).unwrap();
        let plan = desired(&snapshot, &PlannerConfig::default());
        let names: Vec<&str> = plan
            .load_balancers
            .iter()
            .flat_map(|lb| lb.hostnames.iter().map(|h| h.name.as_str()))
            .collect();
        for h in hidden.iter().filter(|h| !h.starts_with("clusterip")) {
            assert!(names.contains(h), "{fixture}: {h} missing from {names:?}");
        }
    }
}
