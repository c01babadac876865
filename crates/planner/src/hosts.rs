//! Hosts-file editor: keeps one marked block of `IP name...` lines at the end of a hosts file.
//!
//! Pure: string in, string out, with the guarantees of the Corefile editor: lines outside the
//! block stay byte-identical (malformed ones included: not our business), the file's line
//! ending (LF or CRLF) is kept, a missing final newline stays missing after removal, applying
//! twice equals applying once, and removing the block restores the original exactly.
//!
//! ```
//! use hairpin_planner::hosts::{self, HostsEntry};
//! let original = "127.0.0.1\tlocalhost\n";
//! let entries = [HostsEntry::new("10.96.0.20".parse().unwrap(), ["b.example.com", "a.example.com"])];
//! let edit = hosts::apply(original, &entries).unwrap();
//! assert_eq!(edit.text, "127.0.0.1\tlocalhost\n# BEGIN hairpin (managed by hairpin; do not edit)\n10.96.0.20\ta.example.com b.example.com\n# END hairpin\n");
//! assert_eq!(hosts::remove(&edit.text).unwrap().text, original);
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::markers;
use crate::markers::{Edit, MarkerDamage};
use crate::name::DnsName;

/// Longest line we write; musl reads hosts lines into a 512-byte buffer, so stay well below.
pub const MAX_LINE_BYTES: usize = 255;

/// Errors of the hosts-file editor. Nothing is written when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostsError {
    #[error("invalid hostname `{name}`: {reason}")]
    InvalidHostname { name: String, reason: &'static str },
    #[error("hostname `{name}` has two {family} addresses: {first} and {second}")]
    ConflictingAddresses {
        name: String,
        family: &'static str,
        first: IpAddr,
        second: IpAddr,
    },
    #[error("entry for {ip} has no hostname")]
    NoNames { ip: IpAddr },
    #[error("{0}")]
    Damaged(#[from] MarkerDamage),
}

impl HostsError {
    /// Stable label for metrics and events.
    pub fn metric_label(&self) -> &'static str {
        match self {
            HostsError::InvalidHostname { .. } => "invalid_hostname",
            HostsError::ConflictingAddresses { .. } => "conflicting_addresses",
            HostsError::NoNames { .. } => "no_names",
            HostsError::Damaged(d) => d.kind.metric_label(),
        }
    }
}

/// One address and the names that should resolve to it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostsEntry {
    pub ip: IpAddr,
    /// RFC 1123 names; no wildcards (hosts files have none). Order and duplicates do not matter.
    pub names: Vec<String>,
}

impl HostsEntry {
    pub fn new<S: Into<String>>(ip: IpAddr, names: impl IntoIterator<Item = S>) -> Self {
        HostsEntry {
            ip,
            names: names.into_iter().map(Into::into).collect(),
        }
    }
}

/// The published form of a hosts block, read back by the node agent: a JSON list of
/// `{"ip": "...", "hostnames": [...]}`, one item per address, in the order given.
///
/// ```
/// use hairpin_planner::hosts::{self, HostsEntry};
/// let entries = [HostsEntry::new("10.96.0.20".parse().unwrap(), ["shop.example.com"])];
/// assert_eq!(hosts::entries_json(&entries), r#"[{"ip":"10.96.0.20","hostnames":["shop.example.com"]}]"#);
/// ```
pub fn entries_json(entries: &[HostsEntry]) -> String {
    #[derive(serde::Serialize)]
    struct Published<'a> {
        ip: IpAddr,
        hostnames: &'a [String],
    }
    let items: Vec<Published<'_>> = entries
        .iter()
        .map(|e| Published {
            ip: e.ip,
            hostnames: &e.names,
        })
        .collect();
    // A list of plain strings and addresses always serializes.
    serde_json::to_string(&items).unwrap_or_else(|_| "[]".to_owned())
}

/// Validate and normalise: address -> sorted names. A name may have one IPv4 and one IPv6
/// address, not two of the same family.
fn normalize(entries: &[HostsEntry]) -> Result<BTreeMap<IpAddr, BTreeSet<String>>, HostsError> {
    let mut by_ip: BTreeMap<IpAddr, BTreeSet<String>> = BTreeMap::new();
    let mut owner: BTreeMap<(String, bool), IpAddr> = BTreeMap::new();
    for e in entries {
        if e.names.is_empty() {
            return Err(HostsError::NoNames { ip: e.ip });
        }
        for raw in &e.names {
            let name =
                DnsName::parse(raw)
                    .map(String::from)
                    .map_err(|p| HostsError::InvalidHostname {
                        name: raw.clone(),
                        reason: if raw.contains('*') {
                            "hosts files do not support wildcards"
                        } else {
                            p.as_str()
                        },
                    })?;
            let v6 = e.ip.is_ipv6();
            if let Some(prev) = owner.insert((name.clone(), v6), e.ip)
                && prev != e.ip
            {
                let (first, second) = (prev.min(e.ip), prev.max(e.ip));
                return Err(HostsError::ConflictingAddresses {
                    name,
                    family: if v6 { "IPv6" } else { "IPv4" },
                    first,
                    second,
                });
            }
            by_ip.entry(e.ip).or_default().insert(name);
        }
    }
    Ok(by_ip)
}

/// The block body: `IP<TAB>name name...`, sorted by address then name, split so that no line
/// exceeds [`MAX_LINE_BYTES`].
pub fn render_lines(entries: &[HostsEntry]) -> Result<Vec<String>, HostsError> {
    let mut out = Vec::new();
    for (ip, names) in normalize(entries)? {
        let head = format!("{ip}\t");
        let mut line = head.clone();
        for name in names {
            if line.len() > head.len() && line.len() + 1 + name.len() > MAX_LINE_BYTES {
                out.push(std::mem::replace(&mut line, head.clone()));
            }
            if line.len() > head.len() {
                line.push(' ');
            }
            line.push_str(&name);
        }
        out.push(line);
    }
    Ok(out)
}

/// Lines the editor writes between the markers: an address followed by names.
fn is_managed_line(line: &str) -> bool {
    let mut words = line.split_whitespace();
    words.next().is_some_and(|w| w.parse::<IpAddr>().is_ok()) && words.next().is_some()
}

/// The single intact block of a hosts file, if any. Damaged markers or more than one block
/// are refused: hairpin could not tell its lines from the user's.
fn find_block(hosts: &str, lines: &[markers::Line]) -> Result<Option<markers::Block>, HostsError> {
    let mut blocks = markers::find_blocks(hosts, lines, |_| false, is_managed_line)?;
    if blocks.len() > 1 {
        let all: Vec<&markers::Block> = blocks.iter().collect();
        return Err(markers::duplicate(hosts, lines, &all).into());
    }
    Ok(blocks.pop())
}

/// Insert or update the hairpin block so that it holds exactly `entries`. Empty `entries`
/// removes the block (same as [`remove`]). Damaged markers are refused
/// ([`HostsError::Damaged`]), never repaired.
pub fn apply(hosts: &str, entries: &[HostsEntry]) -> Result<Edit, HostsError> {
    let body = render_lines(entries)?;
    if body.is_empty() {
        return remove(hosts);
    }
    let lines = markers::lines(hosts);
    let eol = markers::line_ending(hosts);
    let text = match find_block(hosts, &lines)? {
        Some(block) => {
            markers::replace_block(hosts, &lines, &block, body.iter().map(String::as_str), eol)
        }
        None => markers::append_block(hosts, body.iter().map(String::as_str), eol),
    };
    Ok(Edit {
        changed: text != hosts,
        text,
        warnings: Vec::new(),
    })
}

/// Remove the hairpin block; a file that only ever received blocks through [`apply`] comes
/// back byte for byte. Damaged markers are refused, as by [`apply`].
pub fn remove(hosts: &str) -> Result<Edit, HostsError> {
    let lines = markers::lines(hosts);
    let blocks: Vec<markers::Block> = find_block(hosts, &lines)?.into_iter().collect();
    let text = markers::remove_blocks(hosts, &lines, &blocks);
    Ok(Edit {
        changed: text != hosts,
        text,
        warnings: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markers::{BEGIN_MARKER, DamageKind, END_MARKER};

    fn entry(ip: &str, names: &[&str]) -> HostsEntry {
        HostsEntry::new(ip.parse().unwrap(), names.iter().copied())
    }

    #[test]
    fn crlf_and_missing_final_newline_are_kept() {
        let original = "127.0.0.1 localhost\r\n::1 localhost";
        let e = [entry(
            "fd00::1",
            &["b.example.com", "a.example.com", "a.example.com"],
        )];
        let edit = apply(original, &e).unwrap();
        assert_eq!(
            edit.text,
            "127.0.0.1 localhost\r\n::1 localhost\r\n# BEGIN hairpin (managed by hairpin; do not edit)\r\nfd00::1\ta.example.com b.example.com\r\n# END hairpin"
        );
        assert!(edit.changed);
        assert_eq!(apply(&edit.text, &e).unwrap().text, edit.text);
        assert!(!apply(&edit.text, &e).unwrap().changed);
        assert_eq!(remove(&edit.text).unwrap().text, original);
        assert_eq!(apply(&edit.text, &[]).unwrap().text, original);
    }

    #[test]
    fn a_users_blank_line_before_a_block_ending_the_file_is_kept() {
        let text = format!("\n{BEGIN_MARKER}\n{END_MARKER}");
        assert_eq!(remove(&text).unwrap().text, "\n");
        let text = format!("a\n\n{BEGIN_MARKER}\n{END_MARKER}");
        assert_eq!(remove(&text).unwrap().text, "a\n\n");
    }

    #[test]
    fn empty_file_round_trips() {
        let e = [entry("10.0.0.1", &["a.example.com"])];
        let edit = apply("", &e).unwrap();
        assert_eq!(
            edit.text,
            "# BEGIN hairpin (managed by hairpin; do not edit)\n10.0.0.1\ta.example.com\n# END hairpin\n"
        );
        assert_eq!(remove(&edit.text).unwrap().text, "");
    }

    #[test]
    fn an_update_replaces_the_block_in_place() {
        let original = "# head\n# BEGIN hairpin (managed by hairpin; do not edit)\n10.0.0.1\told.example.com\n# END hairpin\n10.0.0.9 user\n";
        let edit = apply(original, &[entry("10.0.0.2", &["new.example.com"])]).unwrap();
        assert_eq!(
            edit.text,
            "# head\n# BEGIN hairpin (managed by hairpin; do not edit)\n10.0.0.2\tnew.example.com\n# END hairpin\n10.0.0.9 user\n"
        );
        assert!(edit.warnings.is_empty());
        assert_eq!(remove(&edit.text).unwrap().text, "# head\n10.0.0.9 user\n");
    }

    #[test]
    fn malformed_lines_outside_the_block_are_left_alone() {
        let original = "garbage line\n\t\n999.1.1.1 bad\n";
        let edit = apply(original, &[entry("10.0.0.1", &["a.example.com"])]).unwrap();
        assert!(edit.text.starts_with(original));
        assert_eq!(remove(&edit.text).unwrap().text, original);
    }

    #[test]
    fn a_stray_begin_marker_is_refused_and_the_lines_after_it_kept() {
        // Before: the lines after a stray begin marker that looked like ours were deleted.
        let original =
            "127.0.0.1 localhost\n# BEGIN hairpin\n10.0.0.1\tmine.example.com\n\n# user comment\n";
        let err = apply(original, &[entry("10.0.0.2", &["a.example.com"])]).unwrap_err();
        let HostsError::Damaged(damage) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(damage.kind, DamageKind::BeginWithoutEnd);
        assert_eq!(damage.lines, [(2, "# BEGIN hairpin".to_owned())]);
        assert_eq!(err.metric_label(), "missing_end_marker");
        assert!(remove(original).is_err());
    }

    #[test]
    fn end_without_begin_duplicates_and_foreign_lines_are_refused() {
        for (text, kind) in [
            (
                "a b\n10.0.0.1 stale\n# END hairpin\n",
                DamageKind::EndWithoutBegin,
            ),
            (
                "# BEGIN hairpin\n10.0.0.1 s\n# END hairpin\n# BEGIN hairpin\n# END hairpin\n",
                DamageKind::Duplicate,
            ),
            (
                "# BEGIN hairpin\n# BEGIN hairpin\n# END hairpin\n# END hairpin\n",
                DamageKind::Nested,
            ),
            (
                "# END hairpin\nx y\n# BEGIN hairpin\n",
                DamageKind::EndWithoutBegin,
            ),
            (
                "# BEGIN hairpin\n10.0.0.1\tstale.example.com\n# someone's note\n# END hairpin\n",
                DamageKind::ForeignLines,
            ),
        ] {
            for result in [
                apply(text, &[entry("10.0.0.2", &["a.example.com"])]),
                remove(text),
            ] {
                match result {
                    Err(HostsError::Damaged(d)) => assert_eq!(d.kind, kind, "{text:?}"),
                    other => panic!("{text:?}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn invalid_entries_are_errors() {
        for (e, label) in [
            (entry("10.0.0.1", &["*.example.com"]), "invalid_hostname"),
            (entry("10.0.0.1", &["bad_name"]), "invalid_hostname"),
            (entry("10.0.0.1", &[]), "no_names"),
        ] {
            assert_eq!(apply("", &[e]).unwrap_err().metric_label(), label);
        }
        let err = apply(
            "",
            &[entry("10.0.0.2", &["a.com"]), entry("10.0.0.1", &["A.com"])],
        )
        .unwrap_err();
        assert_eq!(
            err,
            HostsError::ConflictingAddresses {
                name: "a.com".into(),
                family: "IPv4",
                first: "10.0.0.1".parse().unwrap(),
                second: "10.0.0.2".parse().unwrap(),
            }
        );
        // One IPv4 and one IPv6 address for a name is fine.
        let ok = apply(
            "",
            &[entry("10.0.0.1", &["a.com"]), entry("fd00::1", &["a.com"])],
        )
        .unwrap();
        assert!(ok.text.contains("10.0.0.1\ta.com\nfd00::1\ta.com\n"));
    }

    #[test]
    fn twenty_thousand_names_round_trip() {
        let entries: Vec<HostsEntry> = (0..4)
            .map(|lb| {
                let names = (0..5000).map(move |i| format!("app-{i}.team-{lb}.example.com"));
                HostsEntry::new(IpAddr::from([10, 96, 0, 20 + lb]), names)
            })
            .collect();
        let original = "127.0.0.1 localhost\n";
        let edit = apply(original, &entries).unwrap();
        let lines = edit.text.lines().count();
        assert!(edit.text.lines().all(|l| l.len() <= MAX_LINE_BYTES));
        assert_eq!(edit.text.matches(".example.com").count(), 20_000);
        assert!(lines < 2_500, "{lines} lines");
        assert_eq!(remove(&edit.text).unwrap().text, original);
    }

    #[test]
    fn long_name_lists_are_split() {
        let names: Vec<String> = (0..100)
            .map(|i| format!("host-{i:03}.example.com"))
            .collect();
        let body = render_lines(&[HostsEntry::new("10.0.0.1".parse().unwrap(), names)]).unwrap();
        assert!(body.len() > 1);
        assert!(
            body.iter()
                .all(|l| l.len() <= MAX_LINE_BYTES && l.starts_with("10.0.0.1\t"))
        );
        let count: usize = body.iter().map(|l| l.split_whitespace().count() - 1).sum();
        assert_eq!(count, 100);
    }
}
