//! The admission policy `<release>-dns-block-only` (issue 47) is generated from the planner's
//! markers and line shapes (`corefile::shapes`), and every line the planner writes has one of
//! them:
//!
//! - `charts/hairpin/templates/_dns-policy.tpl` is exactly what `shapes::chart_helpers()`
//!   renders (`HAIRPIN_BLESS=1` rewrites it);
//! - every line between the markers of every planned Corefile golden (each real layout,
//!   Corefile insert and update, zone blocks, imported server files, node-local-dns answers)
//!   and of the rules, answers and override the renderers give for every kind of name has a
//!   shape of [`shapes::line_shapes`]; hairpin's `coredns-custom` key has its header and
//!   [`shapes::rule_shapes`] only.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use hairpin_planner::corefile::shapes::{self, LineShape, ShapeContext};
use hairpin_planner::corefile::{self, DnsEntry, OVERRIDE_HEADER};
use hairpin_planner::markers::{BEGIN_PREFIX, END_MARKER};
use hairpin_planner::name::WildcardLabels;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn ctx() -> ShapeContext {
    ShapeContext::new(
        "hairpin",
        // corp.internal: the placeholder-domain layout's cluster domain (its bypass names it).
        &["cluster.local", "corp.internal"],
        &["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"],
    )
}

#[test]
fn the_chart_policy_is_generated_from_the_planner() {
    let path = root().join("charts/hairpin/templates/_dns-policy.tpl");
    let actual = shapes::chart_helpers();
    if hairpin_testkit::golden::blessing() {
        hairpin_testkit::golden::bless(&path, &actual);
    }
    let chart = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        chart == actual,
        "{} has drifted from crates/planner/src/corefile/shapes.rs (markers or line shapes); \
         run HAIRPIN_BLESS=1 cargo test -p hairpin-planner --test dns_policy to rewrite it",
        path.display()
    );
}

/// The lines inside hairpin's blocks of `text`.
fn block_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with(BEGIN_PREFIX) {
            inside = true;
        } else if t == END_MARKER {
            inside = false;
        } else if inside {
            out.push(line);
        }
    }
    out
}

fn assert_shaped(what: &str, lines: &[&str], shapes: &[LineShape]) -> usize {
    let ctx = ctx();
    for line in lines {
        assert!(
            shapes::has_shape(line, shapes, &ctx),
            "{what}: the planner writes a line the admission policy does not admit: {line:?}"
        );
    }
    lines.len()
}

#[test]
fn every_planned_golden_line_has_a_shape() {
    let golden = root().join("crates/planner/tests/golden");
    let mut checked = 0;
    let mut files = 0;
    for dir in ["corefile", "imports", "layouts"] {
        for entry in std::fs::read_dir(golden.join(dir)).expect("golden dir") {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines = block_lines(&text);
            if !lines.is_empty() {
                files += 1;
                checked +=
                    assert_shaped(&path.display().to_string(), &lines, &shapes::line_shapes());
            }
        }
    }
    println!("{checked} lines of {files} planned goldens, each of a shape the policy admits");
    assert!(
        files >= 30 && checked >= 100,
        "{files} files, {checked} lines"
    );
}

fn entries() -> (Vec<DnsEntry>, BTreeMap<String, Vec<IpAddr>>) {
    let lb1 = corefile::service_fqdn("hairpin-lb-1", "hairpin", "cluster.local");
    let lb2 = corefile::service_fqdn("hairpin-lb-2", "hairpin", "cluster.local");
    let e = |name: &str, target: &str| DnsEntry::new(name, target).unwrap();
    let mut entries = vec![
        e("www.example.com", &lb1),
        e("*.apps.example.org", &lb1),
        e("api.apps.example.org", &lb2),
        DnsEntry::new_with("*.example.net", &lb2, WildcardLabels::OneOrMore).unwrap(),
        e("*.deep.example.net", &lb1),
        DnsEntry::passthrough("skip.apps.example.org").unwrap(),
        DnsEntry::passthrough("skip.example.net").unwrap(),
    ];
    // Enough names on one target for grouped regex rules.
    entries.extend((0..40).map(|i| e(&format!("app-{i}.team.example.com"), &lb2)));
    let addresses = BTreeMap::from([
        (lb1, vec!["10.96.0.20".parse().unwrap()]),
        (
            lb2,
            vec!["10.96.0.21".parse().unwrap(), "fd00::21".parse().unwrap()],
        ),
    ]);
    (entries, addresses)
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn every_rendered_rule_and_answer_has_a_shape() {
    let (entries, addresses) = entries();
    let rules = corefile::render_rules(&entries).expect("rules");
    let exact = corefile::render_rules_with(
        &[entries[0].clone(), entries[2].clone()],
        corefile::RuleStyle::ExactOnly,
    )
    .expect("exact rules");
    let (answers, unknown) = corefile::render_answers(&entries, &addresses).expect("answers");
    assert!(unknown.is_empty());
    // The bypass opens a Corefile block's rules, never hairpin's own coredns-custom key.
    let bypass = vec![corefile::cluster_bypass("cluster.local")];
    assert!(!shapes::has_shape(
        &bypass[0],
        &shapes::rule_shapes(),
        &ctx()
    ));
    let n = assert_shaped("bypass", &refs(&bypass), &shapes::line_shapes())
        + assert_shaped("rules", &refs(&rules), &shapes::rule_shapes())
        + assert_shaped("exact rules", &refs(&exact), &shapes::rule_shapes())
        + assert_shaped("answers", &refs(&answers), &shapes::line_shapes());
    let over = corefile::render_override(&entries).expect("override");
    let body = over
        .strip_prefix(OVERRIDE_HEADER)
        .expect("the header first");
    let lines: Vec<&str> = body.lines().collect();
    let n = n + assert_shaped("override", &lines, &shapes::rule_shapes());
    // Each shape is written by some renderer (a shape nobody writes is a hole in the policy).
    let ctx = ctx();
    let all: Vec<&String> = (rules.iter().chain(&exact).chain(&answers))
        .chain(&bypass)
        .collect();
    for shape in shapes::line_shapes() {
        assert!(
            all.iter()
                .any(|l| shapes::has_shape(l, std::slice::from_ref(&shape), &ctx)),
            "no renderer writes {}",
            shape.display()
        );
    }
    println!("{n} rendered lines, each of a shape the policy admits");
}

#[test]
fn other_lines_have_no_shape() {
    let ctx = ctx();
    for line in [
        "forward . 203.0.113.53",
        "rewrite stop name exact a.example.com b.example.com",
        "rewrite stop name exact a.example.com lb.kube-system.svc.cluster.local",
        "rewrite stop name regex .* lb.hairpin.svc.cluster.local answer auto",
        "rewrite stop name regex ^a\\.example\\.com\\.$ lb.hairpin.svc.evil.example answer auto",
        "rewrite name exact a.example.com lb.hairpin.svc.cluster.local",
        "answer \"{{ .Name }} 30 IN A 203.0.113.9\"",
        "template IN A example.com {",
        "import /etc/coredns/evil",
        "hosts { 203.0.113.9 a.example.com }",
    ] {
        assert!(
            !shapes::has_shape(line, &shapes::line_shapes(), &ctx),
            "{line}"
        );
    }
}
