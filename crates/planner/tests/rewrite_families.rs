//! The `rewrite` path and AAAA, checked on the plan (CoreDNS does not run here).
//!
//! Where a server block holds the `kubernetes` plugin, hairpin writes `rewrite` rules that
//! send a hairpinned name to its hairpin Service's name; CoreDNS's `kubernetes` plugin then
//! answers A and AAAA from that Service's ClusterIPs. For AAAA to be covered alike, the plan
//! must hold three things, asserted here for every real Corefile in `tests/golden/corefiles/`
//! on which that path is chosen (in the Corefile or in a `coredns-custom` key), for a
//! dual-stack and an IPv6-only load balancer:
//! - every rule rewrites the query *name* (`rewrite stop name exact|regex`), never restricted
//!   to a query type (no `type` field, no `A` in the rule), so A, AAAA and every other type are
//!   rewritten the same way;
//! - the answer's name is mapped back for every record type: `exact` rules (CoreDNS reverses
//!   them by itself) or `regex` rules with `answer auto`;
//! - the target is the hairpin Service, whose families are the load balancer's:
//!   `PreferDualStack` with IPv4 and IPv6 for a dual-stack one, IPv6 for an IPv6-only one.
//!
//! What CoreDNS then answers (the `kubernetes` plugin's AAAA from the Service's IPv6
//! ClusterIP) is CoreDNS's behaviour and is not run here.

use std::fs;
use std::path::PathBuf;

use hairpin_planner::WriteEdit;
use hairpin_planner::corefile::Form;
use hairpin_planner::{ClusterSnapshot, PlannerConfig, desired, load};

fn path(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(sub)
}

/// The plan fixture `name` with CoreDNS's Corefile replaced by `corefile`.
fn snapshot(name: &str, corefile: &str) -> ClusterSnapshot {
    let text = fs::read_to_string(path("fixtures/plans").join(format!("{name}.yaml"))).unwrap();
    let mut snapshot = ClusterSnapshot::default();
    load::load_yaml(&mut snapshot, name, &text).unwrap();
    let coredns = snapshot
        .config_maps
        .iter_mut()
        .find(|cm| cm.metadata.name.as_deref() == Some("coredns"))
        .expect("the fixture has CoreDNS");
    coredns
        .data
        .get_or_insert_with(Default::default)
        .insert("Corefile".into(), corefile.into());
    snapshot
}

/// The rule lines of every rewrite-path write: blocks of [`Form::Rewrite`] and
/// `coredns-custom` keys (imported into the block holding `kubernetes`).
fn rewrite_rules(plan: &hairpin_planner::Plan) -> Vec<Vec<String>> {
    let Some(dns) = &plan.dns else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for write in &dns.writes {
        match &write.edit {
            WriteEdit::Blocks { inserts } => out.extend(
                inserts
                    .iter()
                    .filter(|i| i.form == Form::Rewrite)
                    .map(|i| i.lines.clone()),
            ),
            WriteEdit::Key { value: Some(value) } => out.push(
                value
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_owned)
                    .collect(),
            ),
            WriteEdit::Key { value: None } => {}
        }
    }
    out
}

#[test]
fn the_rewrite_path_covers_aaaa_on_every_corefile_that_takes_it() {
    let mut corefiles: Vec<PathBuf> = fs::read_dir(path("golden/corefiles"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "Corefile"))
        .collect();
    corefiles.sort();
    let mut checked = Vec::new();
    for (fixture, families) in [
        ("dual-stack", &["IPv4", "IPv6"][..]),
        ("ipv6-only", &["IPv6"][..]),
    ] {
        for corefile in &corefiles {
            let name = corefile.file_stem().unwrap().to_string_lossy().into_owned();
            let text = fs::read_to_string(corefile).unwrap();
            let plan = desired(&snapshot(fixture, &text), &PlannerConfig::default());
            let blocks = rewrite_rules(&plan);
            if blocks.is_empty() {
                continue;
            }
            let what = format!("{fixture} on {name}");
            let dns = plan.dns.as_ref().unwrap();
            let lb = &plan.load_balancers[0];
            let spec = lb.service.spec.as_ref().unwrap();
            assert_eq!(
                spec.ip_families.as_deref().unwrap(),
                families,
                "{what}: the hairpin Service has the load balancer's families"
            );
            let policy = if families.len() == 2 {
                "PreferDualStack"
            } else {
                "SingleStack"
            };
            assert_eq!(spec.ip_family_policy.as_deref(), Some(policy), "{what}");
            let target = format!(
                "{}.{}.svc.{}",
                lb.service_ref().name,
                lb.service_ref().namespace,
                dns.cluster_domain
            );
            let mut regex = 0;
            for rules in &blocks {
                assert!(!rules.is_empty(), "{what}");
                for rule in rules {
                    let fields: Vec<&str> = rule.split_whitespace().collect();
                    // `rewrite stop name exact NAME TARGET`,
                    // `rewrite stop name regex PATTERN TARGET answer auto` or the bypass.
                    assert_eq!(fields[..3], ["rewrite", "stop", "name"], "{what}: {rule}");
                    assert!(
                        !fields.iter().any(|f| ["type", "A", "AAAA"].contains(f)),
                        "{what}: no query type in {rule}"
                    );
                    match fields[3] {
                        "exact" => {
                            assert_eq!(fields.len(), 6, "{what}: {rule}");
                        }
                        "regex" => {
                            assert_eq!(fields[6..], ["answer", "auto"], "{what}: {rule}");
                            regex += 1;
                        }
                        // The cluster-domain bypass: an identity rewrite of the cluster
                        // domain, no query type either.
                        "suffix" => {
                            let domain = format!(".{}.", dns.cluster_domain);
                            assert_eq!(fields[4..], [domain.as_str(), &domain], "{what}: {rule}");
                            continue;
                        }
                        other => panic!("{what}: match type {other} in {rule}"),
                    }
                    assert_eq!(fields[5], target, "{what}: {rule}");
                }
            }
            // The fixture's exact name and wildcard (one load balancer) share one `regex` rule;
            // `exact` rules (one or two names of a load balancer) are checked where they occur.
            assert!(regex > 0, "{what}: {blocks:?}");
            checked.push(what);
        }
    }
    // Most real Corefiles take the rewrite path; a change that made none of them take it
    // would leave this test checking nothing.
    println!(
        "rewrite path checked on {} plans: {checked:?}",
        checked.len()
    );
    assert!(checked.len() >= 30, "{checked:?}");
}
