//! Property tests of the Corefile editor over generated Corefiles: random indentation (spaces
//! or tabs), comments, blank lines, extra server blocks, braces on their own lines, `}` after a
//! directive, CRLF, missing final newline, and random host sets.

use std::collections::BTreeMap;
use std::net::IpAddr;

use hairpin_planner::corefile::{self, CorefileError, DnsEntry, PlaceOptions, analyze};
use proptest::prelude::*;

const TARGETS: [&str; 3] = [
    "hairpin-a.hairpin.svc.cluster.local",
    "hairpin-b.hairpin.svc.cluster.local",
    "hairpin-c.hairpin.svc.cluster.local",
];

fn host_pattern() -> impl Strategy<Value = String> {
    (
        prop::bool::weighted(0.2),
        "[a-z]([a-z0-9-]{0,6}[a-z0-9])?",
        prop::sample::select(vec![
            "example.com",
            "team-1.example.com",
            "example.org",
            "io",
        ]),
    )
        .prop_map(|(wildcard, label, domain)| {
            if wildcard {
                format!("*.{domain}")
            } else {
                format!("{label}.{domain}")
            }
        })
}

fn host_set() -> impl Strategy<Value = Vec<DnsEntry>> {
    prop::collection::btree_map(host_pattern(), 0..TARGETS.len(), 0..30).prop_map(|m| {
        m.into_iter()
            .map(|(n, t)| DnsEntry::new(&n, TARGETS[t]).unwrap())
            .collect()
    })
}

/// Plugin lines (possibly several physical lines, `\n`-separated, re-indented below).
fn plugin() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        Just(vec!["errors".to_owned()]),
        Just(vec!["log".to_owned()]),
        Just(vec!["cache 30".to_owned()]),
        Just(vec!["forward . /etc/resolv.conf".to_owned()]),
        Just(vec!["# a comment { with a brace".to_owned()]),
        Just(vec![String::new()]),
        Just(vec![
            "health {".to_owned(),
            "+lameduck 5s".to_owned(),
            "}".to_owned()
        ]),
        Just(vec![
            "health".to_owned(),
            "{".to_owned(),
            "+lameduck 5s".to_owned(),
            "}".to_owned()
        ]),
        Just(vec![
            "template ANY ANY internal {".to_owned(),
            "+match \"^(?:[^.]+\\.){4,}internal\\.$\"".to_owned(),
            "+rcode NXDOMAIN".to_owned(),
            "}".to_owned()
        ]),
        Just(vec!["import custom/*.override".to_owned()]),
        Just(vec![
            "rewrite name exact mine.example.com other.svc.cluster.local".to_owned()
        ]),
        Just(vec![
            "hosts {$HOSTS_FILE} {".to_owned(),
            "+fallthrough".to_owned(),
            "}".to_owned()
        ]),
        Just(vec!["prometheus  0.0.0.0:9153".to_owned()]),
    ]
}

#[derive(Debug, Clone)]
struct Shape {
    crlf: bool,
    final_newline: bool,
    indent: &'static str,
    key: &'static str,
    brace_own_line: bool,
    before: Vec<Vec<String>>,
    after: Vec<Vec<String>>,
    k8s_block: u8,
    reload: bool,
    close_after_directive: bool,
    extra_before: bool,
    extra_after: bool,
    top_comment: bool,
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        (
            any::<bool>(),
            any::<bool>(),
            prop::sample::select(vec!["  ", "    ", "\t", "   ", "\t  "]),
            prop::sample::select(vec![".:53", ".:8053", ".", "dns://.:53"]),
            any::<bool>(),
        ),
        (
            prop::collection::vec(plugin(), 0..5),
            prop::collection::vec(plugin(), 0..5),
            0u8..3,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (crlf, final_newline, indent, key, brace_own_line),
                (before, after, k8s_block, reload, close_after, extra_before, extra_after, top),
            )| Shape {
                crlf,
                final_newline,
                indent,
                key,
                brace_own_line,
                before,
                after,
                k8s_block,
                reload,
                close_after_directive: close_after,
                extra_before,
                extra_after,
                top_comment: top,
            },
        )
}

fn push_plugin(lines: &mut Vec<String>, indent: &str, plugin: &[String]) {
    for l in plugin {
        if l.is_empty() {
            lines.push(String::new());
        } else if let Some(nested) = l.strip_prefix('+') {
            lines.push(format!("{indent}{indent}{nested}"));
        } else {
            lines.push(format!("{indent}{l}"));
        }
    }
}

fn render(s: &Shape) -> String {
    let i = s.indent;
    let mut lines: Vec<String> = Vec::new();
    if s.top_comment {
        lines.push("# Corefile generated for a test".into());
    }
    if s.extra_before {
        lines.push("example.org:53 {".into());
        lines.push(format!("{i}forward . 10.0.0.1"));
        lines.push("}".into());
    }
    if s.brace_own_line {
        lines.push(s.key.into());
        lines.push("{".into());
    } else {
        lines.push(format!("{} {{", s.key));
    }
    for p in &s.before {
        push_plugin(&mut lines, i, p);
    }
    match s.k8s_block {
        0 => lines.push(format!("{i}kubernetes cluster.local in-addr.arpa ip6.arpa")),
        1 => {
            lines.push(format!(
                "{i}kubernetes\tcluster.local in-addr.arpa ip6.arpa {{"
            ));
            lines.push(format!("{i}{i}pods insecure"));
            lines.push(format!("{i}}}"));
        }
        _ => {
            lines.push(format!("{i}kubernetes cluster.local"));
            lines.push(format!("{i}{{"));
            lines.push(format!("{i}{i}fallthrough in-addr.arpa ip6.arpa"));
            lines.push(format!("{i}}}"));
        }
    }
    if s.reload {
        lines.push(format!("{i}reload"));
    }
    for p in &s.after {
        push_plugin(&mut lines, i, p);
    }
    if s.close_after_directive {
        lines.push(format!("{i}loadbalance }}"));
    } else {
        lines.push(format!("{i}loadbalance"));
        lines.push("}".into());
    }
    if s.extra_after {
        lines.push("import custom/*.server".into());
        lines.push("cluster.local:5353 {".into());
        lines.push(format!("{i}kubernetes"));
        lines.push("}".into());
    }
    let eol = if s.crlf { "\r\n" } else { "\n" };
    let mut text = lines.join(eol);
    if s.final_newline {
        text.push_str(eol);
    }
    text
}

/// The text without its marked blocks (markers included): what hairpin must never change.
fn strip_blocks(text: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    for (n, line) in lines.iter().enumerate() {
        let t = line.trim();
        if t.starts_with("# BEGIN hairpin") {
            inside = true;
            continue;
        }
        if inside {
            if t.starts_with("# END hairpin") {
                inside = false;
                // A block at the very end without terminator took the one before it.
                if !line.ends_with('\n') && n + 1 == lines.len() {
                    let cut = out.trim_end_matches(['\r', '\n']).len();
                    out.truncate(cut);
                }
            }
            continue;
        }
        out.push_str(line);
    }
    out
}

fn addresses() -> BTreeMap<String, Vec<IpAddr>> {
    TARGETS
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let v4: IpAddr = format!("10.96.0.{}", 20 + i).parse().unwrap();
            let v6: IpAddr = format!("fd00::{}", 20 + i).parse().unwrap();
            (
                (*t).to_owned(),
                if i == 1 { vec![v4, v6] } else { vec![v4] },
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn apply_preserves_restores_and_is_idempotent(s in shape(), e1 in host_set(), e2 in host_set()) {
        let original = render(&s);
        let opts = PlaceOptions { addresses: addresses(), ..PlaceOptions::default() };
        let info = analyze(&original).unwrap();
        let first = corefile::apply_placed(&original, &e1, &opts);
        if s.key == ".:8053" && s.extra_after && !e1.is_empty() {
            // `kubernetes` on ports 8053 and 5353 and none is 53: which one does the cluster
            // DNS Service target?
            prop_assert_eq!(first.unwrap_err().metric_label(), "ambiguous_layout");
            return Ok(());
        }
        let first = first.unwrap();
        prop_assert!(first.warnings.is_empty(), "{:?}", first.warnings);
        // Pure insertion: without the marked blocks, the text is the original.
        prop_assert_eq!(strip_blocks(&first.text), original.clone());
        if e1.is_empty() {
            prop_assert_eq!(&first.text, &original);
            prop_assert!(!first.changed);
        } else {
            prop_assert!(first.changed);
            let eol = if s.crlf { "\r\n" } else { "\n" };
            let begin = first.text.find(hairpin_planner::markers::BEGIN_MARKER).unwrap();
            let begin = first.text[..begin].rfind('\n').map_or(0, |i| i + 1);
            for line in first.text[begin..].split_inclusive('\n').take(2) {
                prop_assert!(line.ends_with(eol));
                prop_assert!(line.starts_with(s.indent));
            }
            // Names under example.org are answered in its own block (when it exists), the
            // others are rewritten in the block that holds `kubernetes`.
            let under_org = e1.iter().any(|e| e.name.name().ends_with("example.org"));
            let elsewhere = e1.iter().any(|e| !e.name.name().ends_with("example.org"));
            let answers = first.text.contains("template IN A {");
            let rewrites = first.text.contains("rewrite stop name ");
            // `example.org:53` is on another port than `.:8053`, the block with `kubernetes`.
            let org_block = s.extra_before && s.key != ".:8053";
            prop_assert_eq!(answers, under_org && org_block);
            prop_assert_eq!(rewrites, elsewhere || !org_block);
            if answers {
                let org = first.text.find("example.org:53 {").unwrap();
                let root = first.text.find("kubernetes").unwrap();
                let template = first.text.find("template IN A {").unwrap();
                prop_assert!(org < template && template < root);
            }
            let after = analyze(&first.text).unwrap();
            prop_assert_eq!(&after.cluster_domain, &info.cluster_domain);
            prop_assert_eq!(&after.server_block_keys, &info.server_block_keys);
            prop_assert!(after.has_hairpin_block);
        }
        let again = corefile::apply_placed(&first.text, &e1, &opts).unwrap();
        prop_assert_eq!(&again.text, &first.text);
        prop_assert!(!again.changed);

        prop_assert_eq!(&corefile::remove(&first.text).unwrap().text, &original);

        if let Ok(second) = corefile::apply_placed(&first.text, &e2, &opts) {
            let fresh = corefile::apply_placed(&original, &e2, &opts).unwrap();
            prop_assert_eq!(&second.text, &fresh.text);
            prop_assert_eq!(&corefile::remove(&second.text).unwrap().text, &original);
        }
    }

    #[test]
    fn damaged_markers_are_refused_and_nothing_outside_blocks_changes(
        s in shape(),
        e in host_set(),
        damage in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3), 1..4),
    ) {
        let original = render(&s);
        let eol = if s.crlf { "\r\n" } else { "\n" };
        // Insert stray markers or stale managed rules at random line boundaries.
        let mut lines: Vec<String> = original.split(eol).map(str::to_owned).collect();
        for (at, kind) in &damage {
            let line = match kind {
                0 => format!("{}# BEGIN hairpin", s.indent),
                1 => format!("{}# END hairpin", s.indent),
                _ => format!("{}rewrite stop name exact stale.example.com x.y.svc.cluster.local", s.indent),
            };
            let idx = at.index(lines.len());
            lines.insert(idx, line);
        }
        let damaged = lines.join(eol);
        let begins = damaged.matches("# BEGIN hairpin").count();
        let ends = damaged.matches("# END hairpin").count();
        match corefile::apply(&damaged, &e) {
            Err(err) => {
                // Unbalanced markers are always refused; a structural error is fine too.
                prop_assert!(
                    matches!(err, CorefileError::Damaged(_) | CorefileError::Syntax { .. }
                        | CorefileError::UnsupportedLayout { .. } | CorefileError::NoKubernetesBlock
                        | CorefileError::Ambiguous { .. }),
                    "{}", err
                );
            }
            Ok(edit) => {
                // Only balanced, well-formed blocks get through, and nothing outside them moves.
                prop_assert_eq!(begins, ends);
                prop_assert_eq!(strip_blocks(&edit.text), strip_blocks(&damaged));
            }
        }
        // A lone marker is never accepted.
        if begins != ends {
            prop_assert!(corefile::remove(&damaged).is_err());
        }
    }

    #[test]
    fn rules_are_single_corefile_tokens(e in host_set()) {
        for rule in corefile::render_rules(&e).unwrap() {
            for token in rule.split(' ') {
                prop_assert!(!token.is_empty());
                prop_assert!(!token.contains(['"', '{', '}', '#', '\t', '\r', '\n']), "{}", token);
            }
        }
    }
}
