//! Property tests of the Corefile editor over generated Corefiles: random indentation (spaces
//! or tabs), comments, blank lines, extra server blocks, braces on their own lines, `}` after a
//! directive, CRLF, missing final newline, and random host sets.

use hairpin_planner::corefile::{self, DnsEntry, analyze};
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

/// Byte range of the managed block: from the start of the begin line to the end of the end
/// line (terminator included).
fn block_range(text: &str) -> (usize, usize) {
    let begin = text.find(corefile::BEGIN_MARKER).expect("begin marker");
    let begin = text[..begin].rfind('\n').map_or(0, |i| i + 1);
    let end = begin
        + text[begin..]
            .find(corefile::END_MARKER)
            .expect("end marker");
    let end = text[end..].find('\n').map_or(text.len(), |i| end + i + 1);
    (begin, end)
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
        let info = analyze(&original).unwrap();
        let first = corefile::apply(&original, &e1).unwrap();
        prop_assert!(first.warnings.is_empty());
        if e1.is_empty() {
            prop_assert_eq!(&first.text, &original);
            prop_assert!(!first.changed);
        } else {
            prop_assert!(first.changed);
            // Bytes outside the block are the original's.
            let (b, e) = block_range(&first.text);
            prop_assert_eq!(&first.text[..b], &original[..b]);
            prop_assert_eq!(&first.text[e..], &original[b..]);
            // The block follows the file's line ending and sits inside the kubernetes block.
            let eol = if s.crlf { "\r\n" } else { "\n" };
            for line in first.text[b..e].split_inclusive('\n') {
                prop_assert!(line.ends_with(eol));
                prop_assert!(line.starts_with(s.indent));
            }
            let after = analyze(&first.text).unwrap();
            prop_assert_eq!(&after.cluster_domain, &info.cluster_domain);
            prop_assert_eq!(&after.server_block_keys, &info.server_block_keys);
            prop_assert!(after.has_hairpin_block);
            prop_assert!(after.warnings.iter().all(|w| w.metric_label() == "reload_missing"));
        }
        let again = corefile::apply(&first.text, &e1).unwrap();
        prop_assert_eq!(&again.text, &first.text);
        prop_assert!(!again.changed);

        prop_assert_eq!(&corefile::remove(&first.text).unwrap().text, &original);

        let second = corefile::apply(&first.text, &e2).unwrap();
        prop_assert_eq!(&second.text, &corefile::apply(&original, &e2).unwrap().text);
        prop_assert_eq!(&corefile::remove(&second.text).unwrap().text, &original);
    }

    #[test]
    fn damaged_markers_are_always_repaired(
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
        // The damage may have broken the Corefile's structure; then the editor must refuse.
        let Ok(edit) = corefile::apply(&damaged, &e) else {
            return Ok(());
        };
        let cleaned = corefile::remove(&edit.text).unwrap();
        prop_assert!(!cleaned.text.contains("# BEGIN hairpin"));
        prop_assert!(!cleaned.text.contains("# END hairpin"));
        if !e.is_empty() {
            prop_assert_eq!(edit.text.matches(corefile::BEGIN_MARKER).count(), 1);
            prop_assert_eq!(edit.text.matches(corefile::END_MARKER).count(), 1);
            let again = corefile::apply(&edit.text, &e).unwrap();
            prop_assert_eq!(&again.text, &edit.text);
            prop_assert!(again.warnings.is_empty());
            prop_assert!(analyze(&edit.text).is_ok());
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
