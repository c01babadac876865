//! Property tests of the hosts-file editor over generated hosts files: comments, blank lines,
//! tabs, malformed lines, IPv6, CRLF, missing final newline, damaged markers, random entries.

use std::collections::BTreeMap;
use std::net::IpAddr;

use hairpin_planner::hosts::{self, HostsEntry};
use proptest::prelude::*;

fn file_line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("127.0.0.1\tlocalhost".to_owned()),
        Just("::1     localhost ip6-localhost ip6-loopback".to_owned()),
        Just("fe00::0 ip6-localnet".to_owned()),
        Just("# The following lines are desirable for IPv6 capable hosts".to_owned()),
        Just(String::new()),
        Just("   ".to_owned()),
        Just("\t10.1.2.3 node-1 node-1.cluster  ".to_owned()),
        Just("not an entry at all".to_owned()),
        Just("999.1.1.1 broken".to_owned()),
        Just("10.0.0.1".to_owned()),
        "[a-z0-9 .:#\t-]{0,30}",
    ]
}

#[derive(Debug, Clone)]
struct HostsFile {
    lines: Vec<String>,
    crlf: bool,
    final_newline: bool,
}

impl HostsFile {
    fn eol(&self) -> &'static str {
        if self.crlf { "\r\n" } else { "\n" }
    }

    /// The convention the editor must follow: the file's, when it has any terminator.
    fn convention(&self) -> &'static str {
        let has_terminator = self.lines.len() > 1 || (self.final_newline && !self.lines.is_empty());
        if has_terminator { self.eol() } else { "\n" }
    }

    fn render(&self) -> String {
        let mut text = self.lines.join(self.eol());
        if self.final_newline && !self.lines.is_empty() {
            text.push_str(self.eol());
        }
        text
    }
}

fn hosts_file() -> impl Strategy<Value = HostsFile> {
    (
        prop::collection::vec(file_line(), 0..12),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(lines, crlf, final_newline)| HostsFile {
            // A generated line must not look like one of our markers.
            lines: lines
                .into_iter()
                .filter(|l| !l.contains("hairpin"))
                .collect(),
            crlf,
            final_newline,
        })
}

const ADDRS: [&str; 4] = [
    "10.96.0.20",
    "10.96.0.21",
    "fd00:10:96::20",
    "fd00:10:96::21",
];

/// Entries without conflicts: each name gets one IPv4 address and maybe one IPv6 address.
fn entries() -> impl Strategy<Value = Vec<HostsEntry>> {
    prop::collection::btree_map(
        "[a-z]([a-z0-9-]{0,8}[a-z0-9])?\\.(example\\.com|example\\.org)",
        (0usize..2, prop::option::of(2usize..4)),
        0..40,
    )
    .prop_map(|m| {
        let mut by_ip: BTreeMap<IpAddr, Vec<String>> = BTreeMap::new();
        for (name, (v4, v6)) in m {
            by_ip
                .entry(ADDRS[v4].parse().unwrap())
                .or_default()
                .push(name.to_uppercase());
            if let Some(v6) = v6 {
                by_ip
                    .entry(ADDRS[v6].parse().unwrap())
                    .or_default()
                    .push(name);
            }
        }
        by_ip
            .into_iter()
            .rev()
            .map(|(ip, names)| HostsEntry::new(ip, names))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn apply_preserves_restores_and_is_idempotent(f in hosts_file(), e1 in entries(), e2 in entries()) {
        let original = f.render();
        let first = hosts::apply(&original, &e1).unwrap();
        prop_assert!(first.warnings.is_empty());
        if e1.is_empty() {
            prop_assert_eq!(&first.text, &original);
        } else {
            // Everything before the block is the original, byte for byte.
            let begin = first.text.find(hairpin_planner::markers::BEGIN_MARKER).unwrap();
            let kept = &first.text[..begin];
            prop_assert!(original.starts_with(kept.trim_end_matches(['\r', '\n'])));
            prop_assert!(first.text.trim_end_matches(['\r', '\n']).ends_with(hairpin_planner::markers::END_MARKER));
            // The block uses the file's line ending; names are lowercase and sorted.
            for line in first.text[begin..].split_inclusive('\n') {
                prop_assert!(!line.ends_with('\n') || line.ends_with(f.convention()));
                prop_assert!(line.len() <= hosts::MAX_LINE_BYTES + 2);
                if !line.starts_with('#') {
                    let names: Vec<&str> = line.split_whitespace().skip(1).collect();
                    let mut sorted = names.clone();
                    sorted.sort_unstable();
                    prop_assert_eq!(&names, &sorted);
                    prop_assert!(names.iter().all(|n| *n == n.to_lowercase()));
                }
            }
        }
        let again = hosts::apply(&first.text, &e1).unwrap();
        prop_assert_eq!(&again.text, &first.text);
        prop_assert!(!again.changed);
        prop_assert_eq!(&hosts::remove(&first.text).unwrap().text, &original);

        let second = hosts::apply(&first.text, &e2).unwrap();
        prop_assert_eq!(&second.text, &hosts::apply(&original, &e2).unwrap().text);
        prop_assert_eq!(&hosts::remove(&second.text).unwrap().text, &original);
    }

    #[test]
    fn damaged_markers_are_refused_and_user_lines_never_removed(
        f in hosts_file(),
        e in entries(),
        damage in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3), 1..4),
    ) {
        let mut f = f;
        for (at, kind) in &damage {
            let line = match kind {
                0 => "# BEGIN hairpin".to_owned(),
                1 => "# END hairpin".to_owned(),
                _ => "10.96.0.99\tstale.example.com".to_owned(),
            };
            let idx = at.index(f.lines.len() + 1);
            f.lines.insert(idx, line);
        }
        let damaged = f.render();
        let begins = f.lines.iter().filter(|l| l.starts_with("# BEGIN")).count();
        let ends = f.lines.iter().filter(|l| l.starts_with("# END")).count();
        match hosts::apply(&damaged, &e) {
            Err(err) => {
                prop_assert!(matches!(err, hosts::HostsError::Damaged(_)), "{}", err);
                prop_assert!(hosts::remove(&damaged).is_err());
            }
            Ok(edit) if begins + ends == 0 => {
                prop_assert_eq!(&hosts::remove(&edit.text).unwrap().text, &damaged);
            }
            Ok(edit) => {
                // Only one well-formed block gets through (a BEGIN, entry lines, an END).
                prop_assert_eq!(begins, 1);
                prop_assert_eq!(ends, 1);
                // Every line outside it is still there, in order.
                let outside: Vec<&str> = damaged.lines().collect();
                let (b, e_) = (
                    outside.iter().position(|l| l.starts_with("# BEGIN")).unwrap(),
                    outside.iter().position(|l| l.starts_with("# END")).unwrap(),
                );
                let mut kept: Vec<&str> = outside[..b].to_vec();
                kept.extend(&outside[e_ + 1..]);
                let cleaned = hosts::remove(&edit.text).unwrap();
                prop_assert_eq!(cleaned.text.lines().collect::<Vec<_>>(), kept);
            }
        }
        if begins != ends {
            prop_assert!(hosts::apply(&damaged, &e).is_err());
        }
    }
}
