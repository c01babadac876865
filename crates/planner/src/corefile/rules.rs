//! Rendering hostnames as CoreDNS `rewrite` rules (and `template` answers).
//!
//! These lines sit in the server block every pod asks, so every query that misses the cache
//! (cluster names, search-path NXDOMAINs, external names: not only hairpin's) runs through
//! them. Their layout is chosen so that this cost does not grow with the number of names
//! (measured in real CoreDNS by `bench/run-dns.sh`, docs/dns-cost.md).
//!
//! Layout (CoreDNS `rewrite` plugin syntax, RE2 regular expressions, matched against the
//! lowercased fully-qualified query name with its trailing dot), in this order:
//!
//! * where nothing else in the server block rewrites (`placement`) and the rules below would
//!   cost a cluster name more than it does ([`bypass_pays`]), the cluster-domain bypass
//!   [`cluster_bypass`], `rewrite stop name suffix .cluster.local. .cluster.local.`, so that
//!   cluster names and search-path NXDOMAINs skip every rule below;
//! * pass-through names ([`DnsEntry::passthrough`]) that a wildcard covers:
//!   `rewrite stop name exact NAME NAME`, so that no later rule matches them;
//! * a target with one or two exact names (and no one-label wildcard whose pattern they could
//!   join) gets one `rewrite stop name exact NAME TARGET` per name; CoreDNS rewrites the answer
//!   back to `NAME` by itself for `exact` rules, on every version;
//! * a target with more exact names ([`EXACT_RULES_MAX_PER_TARGET`]) gets flat sorted
//!   alternations of whole names,
//!   `rewrite stop name regex ^(?:a\.example\.com|b\.example\.org)\.$ TARGET answer auto`,
//!   as few rules as [`REGEX_PATTERN_BUDGET`] allows; parent domains that share their set of
//!   first labels become one cross product, `(?:api|www)\.(?:t1\.example\.com|t2\.example\.com)`
//!   (the largest groups only, `exact_alternatives`), and the target's one-label wildcards
//!   join the same pattern, `|[^.]+\.(?:apps\.example\.com)`, where no other target's name
//!   lies under them (`mergeable_wildcards`): fewer rules, each of which every external
//!   query pays, and a smaller compiled program; except where the exact names' pattern alone
//!   is small and unambiguous enough for Go's one-pass matcher and starts with many distinct
//!   characters (`one_pass_apart`): then it keeps its own rule, cheaper than the NFA's threads;
//! * Ingress wildcards ([`HostPattern::Wildcard`]) match exactly one label, as the Ingress API
//!   specifies:
//!   `rewrite stop name regex ^[^.]+\.(?:example\.com|example\.org)\.$ TARGET answer auto`;
//! * Gateway API wildcards ([`HostPattern::WildcardSuffix`]) are suffix matches covering one or
//!   more labels, as the Gateway API specifies:
//!   `rewrite stop name regex ^(?:[^.]+\.)+(?:example\.com|example\.org)\.$ TARGET answer auto`.
//!
//! `answer auto` maps the answer's owner name back to the question (CoreDNS 1.10 and later);
//! regex rules need it because the original name cannot be rebuilt from the target.
//!
//! Cost. Go's regexp parser factors a sorted list of literal alternatives into one trie, so
//! matching a name against a flat list costs about the name's length, whatever the number
//! of names; what each query pays is about one pass of the matcher per rule. The exact names
//! used to be grouped per parent domain into nested alternations
//! (`^(?:(?:a|b)\.team\.example\.com|…)`, 8 KiB per rule): Go cannot factor those, its matcher
//! tried every group's first label on every query, and at 20,000 names (and 5,000
//! wildcards) every query cost CoreDNS 1.12.2 about 30 times its CPU time without hairpin.
//! Flat lists in rules of up to 256 KiB cost within a few percent of nothing. (Answering the
//! exact names from a `hosts` block was measured too: alone it is as cheap, but beside the
//! wildcard rules it cost external names 20 % more than rewrite rules alone.)
//!
//! Size: whole names, about the name's length plus three bytes each (`\.` escapes, `|`):
//! 20,000 hostnames of 30 characters take about 700 KiB, and about 30,000 such names fit in
//! the 1 MiB ConfigMap limit (the old grouping took half as much); one `exact` rule per name
//! would take about 90 bytes per name. A person can still find a hostname in the block with
//! `grep`. Answer-form blocks ([`render_answers`]) use the same patterns in
//! `template ... { match ... }`, three templates (A, AAAA, other types) per pattern, with the
//! pass-throughs cut out of the wildcards' patterns (`head_except`: a matching template
//! always answers). Rendering sorts each list once and checks each target once: at that
//! scale the planner's time goes to sorting and allocating, not to the Corefile.
//!
//! CoreDNS applies the first rule that matches, so the most specific pattern comes first:
//! pass-throughs and exact rules, then one-label wildcards, then suffix wildcards with the
//! longest suffixes (most labels) first. A name is thus rewritten by the wildcard with the
//! longest suffix that covers it: `a.b.example.com` goes where `*.b.example.com` says, not
//! `*.example.com`, and a name of one load balancer under another one's wildcard goes to its
//! own.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::net::IpAddr;

use super::CorefileError;
use crate::name::WildcardLabels;
use crate::name::{DnsName, Host, NameError, for_each_dot, head};

/// A target with at most this many exact names (and no one-label wildcard to share a pattern
/// with) gets one `exact` rule per name; from one more, one `regex` rule for them all. Every
/// rule costs every query that reaches it a lowercased copy of its name (`request.Name`: in
/// CoreDNS 1.12.2 the rewrite plugin hands each rule a fresh copy of the request), about 1,100
/// instructions for an `exact` rule that does not match, about 2,400 for a `regex` of a few
/// names (small enough for Go's one-pass or backtracking matcher). Measured (callgrind, whole
/// GC cycles, external names): 8 names as 8 `exact` rules 1.106x the Corefile without
/// hairpin's block, as one `regex` 1.060x (docs/dns-cost.md).
pub const EXACT_RULES_MAX_PER_TARGET: usize = 2;
/// Upper bound on the length of one regex pattern; longer lists are split over several rules.
/// Large: every rule costs every query a pass of Go's regexp machine, whatever its size, so
/// fewer rules are cheaper (measured in CoreDNS 1.12.2 at 20,000 names and 5,000 wildcards:
/// a cluster-name query cost 1.60 times its cost without hairpin with 8 KiB rules, 1.20 with
/// 32 KiB, within noise of 1.0 from 128 KiB; docs/dns-cost.md). Bounded all the same: a
/// matcher's work queues are sized by its program (about 40 bytes per pattern byte).
pub const REGEX_PATTERN_BUDGET: usize = 256 * 1024;

/// A hostname the cluster should resolve to a hairpin Service.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostPattern {
    /// `foo.example.com`
    Exact(String),
    /// `*.example.com` from an Ingress, stored as the suffix `example.com`; matches exactly one
    /// extra label ([`WildcardLabels::One`]).
    Wildcard(String),
    /// `*.example.com` from the Gateway API, stored as the suffix `example.com`; a suffix match
    /// of one or more extra labels ([`WildcardLabels::OneOrMore`]).
    WildcardSuffix(String),
}

impl HostPattern {
    /// Parse and normalise (ASCII-lowercase, no trailing dot) an RFC 1123 name, or `*.` and one.
    /// A wildcard matches exactly one label (Ingress meaning); see [`HostPattern::parse_with`].
    pub fn parse(s: &str) -> Result<Self, CorefileError> {
        HostPattern::parse_with(s, WildcardLabels::One)
    }

    /// [`HostPattern::parse`], with `labels` saying what a leading `*.` stands for.
    pub fn parse_with(s: &str, labels: WildcardLabels) -> Result<Self, CorefileError> {
        let host = Host::parse(s).map_err(|p| CorefileError::InvalidHostname {
            name: s.to_owned(),
            reason: p.as_str(),
        })?;
        Ok(match (host, labels) {
            (Host::Exact(name), _) => HostPattern::Exact(name.into()),
            (Host::Wildcard(suffix), WildcardLabels::One) => HostPattern::Wildcard(suffix.into()),
            (Host::Wildcard(suffix), WildcardLabels::OneOrMore) => {
                HostPattern::WildcardSuffix(suffix.into())
            }
        })
    }

    /// Whether `name` (a normalised exact name) is covered by this pattern.
    pub fn matches(&self, name: &str) -> bool {
        match self.wildcard_labels() {
            None => self.name() == name,
            Some(labels) => head(name, self.name()).is_some_and(|head| labels.covers(head)),
        }
    }

    /// The name, or a wildcard's suffix (`example.com` for `*.example.com`).
    pub fn name(&self) -> &str {
        match self {
            HostPattern::Exact(n) | HostPattern::Wildcard(n) | HostPattern::WildcardSuffix(n) => n,
        }
    }

    /// What a wildcard's `*` stands for; `None` for an exact name.
    pub fn wildcard_labels(&self) -> Option<WildcardLabels> {
        match self {
            HostPattern::Exact(_) => None,
            HostPattern::Wildcard(_) => Some(WildcardLabels::One),
            HostPattern::WildcardSuffix(_) => Some(WildcardLabels::OneOrMore),
        }
    }
}

/// A validated exact name, as a string.
fn normalize(name: &str) -> Result<String, NameError> {
    DnsName::parse(name).map(String::from)
}

impl fmt::Display for HostPattern {
    /// `foo.example.com` or `*.example.com` (both wildcard kinds are written the same way).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(n) => f.write_str(n),
            HostPattern::Wildcard(s) | HostPattern::WildcardSuffix(s) => write!(f, "*.{s}"),
        }
    }
}

impl std::str::FromStr for HostPattern {
    type Err = CorefileError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HostPattern::parse(s)
    }
}

/// One rewrite: queries for `name` are answered with the addresses of `target`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DnsEntry {
    pub name: HostPattern,
    /// Fully-qualified in-cluster name of the hairpin Service, without trailing dot, e.g.
    /// `hairpin-lb-1.hairpin.svc.cluster.local` (see [`service_fqdn`]).
    pub target: String,
}

impl DnsEntry {
    /// Parse `name` and validate `target`. A wildcard matches exactly one label (Ingress
    /// meaning); see [`DnsEntry::new_with`].
    pub fn new(name: &str, target: &str) -> Result<Self, CorefileError> {
        DnsEntry::new_with(name, target, WildcardLabels::One)
    }

    /// [`DnsEntry::new`], with `labels` saying what a leading `*.` in `name` stands for.
    pub fn new_with(
        name: &str,
        target: &str,
        labels: WildcardLabels,
    ) -> Result<Self, CorefileError> {
        let name = HostPattern::parse_with(name, labels)?;
        let target = normalize_target(target)?;
        Ok(DnsEntry { name, target })
    }
}

impl DnsEntry {
    /// An exact name that hairpin does NOT redirect, even where a wildcard of some target
    /// covers it: CoreDNS answers it exactly as it would without hairpin. Rendered only where
    /// a wildcard in the same block covers it: as an identity rule
    /// `rewrite stop name exact NAME NAME` before every wildcard rule (rewrite form), and cut
    /// out of the covering wildcards' patterns (answer form, where `template` offers no way
    /// to pass a matched name on). Stored as an entry whose target is its own name.
    ///
    /// # Errors
    /// An invalid name, or a wildcard (a pass-through is one exact name).
    pub fn passthrough(name: &str) -> Result<Self, CorefileError> {
        match HostPattern::parse(name)? {
            HostPattern::Exact(n) => Ok(DnsEntry {
                target: n.clone(),
                name: HostPattern::Exact(n),
            }),
            _ => Err(CorefileError::InvalidHostname {
                name: name.to_owned(),
                reason: "a pass-through name must be exact, not a wildcard",
            }),
        }
    }

    /// Whether this entry is a pass-through ([`DnsEntry::passthrough`]).
    pub fn is_passthrough(&self) -> bool {
        matches!(&self.name, HostPattern::Exact(n) if *n == self.target)
    }
}

/// An entry as the renderer reads it: a [`DnsEntry`] borrowed ([`EntryRef::of`]), or a
/// redirect of the plan read where it is, so that rendering tens of thousands of names copies
/// none of them. The renderer checks what it reads as it checks a [`DnsEntry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EntryRef<'a> {
    /// The name, or a wildcard's suffix ([`HostPattern::name`]).
    pub(crate) name: &'a str,
    /// What a wildcard's `*` stands for; `None` for an exact name.
    pub(crate) labels: Option<WildcardLabels>,
    /// As [`DnsEntry::target`].
    pub(crate) target: &'a str,
}

impl<'a> EntryRef<'a> {
    /// `entry`, borrowed.
    pub(crate) fn of(entry: &'a DnsEntry) -> Self {
        EntryRef {
            name: entry.name.name(),
            labels: entry.name.wildcard_labels(),
            target: &entry.target,
        }
    }

    /// Each of `entries`, borrowed.
    pub(crate) fn all(entries: &'a [DnsEntry]) -> Vec<Self> {
        entries.iter().map(EntryRef::of).collect()
    }

    /// [`DnsEntry::is_passthrough`].
    pub(crate) fn is_passthrough(&self) -> bool {
        self.labels.is_none() && self.name == self.target
    }

    /// The entry's name as [`HostPattern`] prints it (`*.suffix` for a wildcard).
    pub(crate) fn pattern(&self) -> String {
        match self.labels {
            None => self.name.to_owned(),
            Some(_) => format!("*.{}", self.name),
        }
    }

    /// The name as a [`HostPattern`].
    pub(crate) fn host_pattern(&self) -> HostPattern {
        let name = self.name.to_owned();
        match self.labels {
            None => HostPattern::Exact(name),
            Some(WildcardLabels::One) => HostPattern::Wildcard(name),
            Some(WildcardLabels::OneOrMore) => HostPattern::WildcardSuffix(name),
        }
    }
}

/// The entries worth rendering: every redirect, and the pass-throughs that a wildcard among
/// `entries` covers (the others would change nothing) or that an exact redirect names too
/// (a conflict, reported as for two targets).
fn needed<'a>(entries: &[EntryRef<'a>]) -> Vec<EntryRef<'a>> {
    if !entries.iter().any(EntryRef::is_passthrough) {
        return entries.to_vec();
    }
    let (one, more) = wildcard_suffixes(entries);
    let redirected: HashSet<&str> = entries
        .iter()
        .filter(|e| !e.is_passthrough() && e.labels.is_none())
        .map(|e| e.name)
        .collect();
    entries
        .iter()
        .filter(|e| {
            let name = e.name;
            !e.is_passthrough() || covered(name, &one, &more) || redirected.contains(name)
        })
        .copied()
        .collect()
}

/// The suffixes of the one-label wildcards and of the suffix-match wildcards of `entries`.
fn wildcard_suffixes<'a>(entries: &[EntryRef<'a>]) -> (HashSet<&'a str>, HashSet<&'a str>) {
    let (mut one, mut more) = (HashSet::new(), HashSet::new());
    for e in entries {
        match e.labels {
            Some(WildcardLabels::One) => one.insert(e.name),
            Some(WildcardLabels::OneOrMore) => more.insert(e.name),
            None => false,
        };
    }
    (one, more)
}

/// Whether a wildcard with one of these suffixes covers the exact name `name`.
fn covered(name: &str, one: &HashSet<&str>, more: &HashSet<&str>) -> bool {
    let mut parents = name.match_indices('.').map(|(i, _)| &name[i + 1..]);
    parents
        .next()
        .is_some_and(|p| one.contains(p) || more.contains(p))
        || parents.any(|p| more.contains(p))
}

/// A validated target, in its normal form (the target half of [`DnsEntry::new`]).
pub(crate) fn normalize_target(target: &str) -> Result<String, CorefileError> {
    normalize(target).map_err(|p| CorefileError::InvalidTarget {
        target: target.to_owned(),
        reason: p.as_str(),
    })
}

/// `<service>.<namespace>.svc.<cluster_domain>`.
pub fn service_fqdn(service: &str, namespace: &str, cluster_domain: &str) -> String {
    let domain = cluster_domain.trim_end_matches('.');
    format!("{service}.{namespace}.svc.{domain}")
}

/// The names of one target: exact names, one-label wildcard suffixes and suffix-match
/// (one or more labels) wildcard suffixes, each sorted and deduplicated.
#[derive(Default)]
struct Names<'a> {
    exact: Vec<&'a str>,
    wildcards: Vec<&'a str>,
    suffixes: Vec<&'a str>,
}

/// Per target, its names.
type ByTarget<'a> = BTreeMap<&'a str, Names<'a>>;

/// Check the entries and sort them by target. One name on two targets is a conflict; so is one
/// wildcard on two targets, whatever its kind. One wildcard on one target with both kinds is
/// the suffix match (the broader one). The error is the one met first in entry order, as if
/// the entries were checked one by one.
fn group<'a>(entries: &[EntryRef<'a>]) -> Result<ByTarget<'a>, CorefileError> {
    // Entries built by hand bypass `DnsEntry::new`; check them here too. There are a few
    // targets for many names: each target is checked once.
    let mut valid = entries.len();
    let mut invalid = None;
    let mut checked_targets: Vec<&str> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if !checked_targets.iter().any(|t| same_text(t, e.target)) {
            if !DnsName::is_normalized(e.target) {
                invalid = Some(CorefileError::InvalidTarget {
                    target: e.target.to_owned(),
                    reason: "must be a lowercase RFC 1123 name without trailing dot",
                });
                valid = i;
                break;
            }
            checked_targets.push(e.target);
        }
        if !DnsName::is_normalized(e.name) {
            invalid = Some(CorefileError::InvalidHostname {
                name: e.pattern(),
                reason: "must be a lowercase RFC 1123 name without trailing dot",
            });
            valid = i;
            break;
        }
    }
    // (is a wildcard, name or suffix), then entry order: each key's first entry owns it.
    let mut keyed: Vec<(bool, &str, usize)> = entries[..valid]
        .iter()
        .enumerate()
        .map(|(i, e)| (e.labels.is_some(), e.name, i))
        .collect();
    // Stable and run-aware: entries usually come sorted by name (wildcards first), two runs.
    keyed.sort();
    // The first entry (in entry order) whose key another target owns.
    let mut conflict: Option<(usize, usize)> = None;
    let mut owners: Vec<(usize, WildcardLabels)> = Vec::new();
    for same in keyed.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
        let owner = same[0].2;
        let mut labels = WildcardLabels::default();
        for &(_, _, i) in same {
            if !same_text(entries[i].target, entries[owner].target) {
                if conflict.is_none_or(|(_, at)| i < at) {
                    conflict = Some((owner, i));
                }
                break;
            }
            labels = labels.max(entries[i].labels.unwrap_or_default());
        }
        owners.push((owner, labels));
    }
    if let Some((owner, at)) = conflict {
        let (prev, e) = (entries[owner].target, entries[at]);
        let (first, second) = if prev < e.target {
            (prev, e.target)
        } else {
            (e.target, prev)
        };
        return Err(CorefileError::ConflictingTargets {
            name: e.pattern(),
            first: first.to_owned(),
            second: second.to_owned(),
        });
    }
    if let Some(e) = invalid {
        return Err(e);
    }
    // Per target (a few, for many names), its names. `owners` is in key order (all exact
    // names, then wildcards, each sorted), so the lists come out sorted and free of
    // duplicates.
    let mut by_target: Vec<(&str, Names<'_>)> = Vec::new();
    for (owner, labels) in owners {
        let e = entries[owner];
        let at = match by_target.iter().position(|(t, _)| same_text(t, e.target)) {
            Some(at) => at,
            None => {
                by_target.push((e.target, Names::default()));
                by_target.len() - 1
            }
        };
        let slot = &mut by_target[at].1;
        let name = e.name;
        match (e.labels, labels) {
            (None, _) => slot.exact.push(name),
            (Some(_), WildcardLabels::One) => slot.wildcards.push(name),
            (Some(_), WildcardLabels::OneOrMore) => slot.suffixes.push(name),
        }
    }
    Ok(by_target.into_iter().collect())
}

/// `a == b`, at once when both are the same string in memory (the entries of one target
/// usually share their target's text).
fn same_text(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// RE2 escaping for a DNS name (only `.` can occur).
fn escape(name: &str) -> String {
    let mut out = Vec::with_capacity(escaped_len(name));
    push_escaped(&mut out, name);
    String::from_utf8(out).expect("a name escaped is UTF-8")
}

/// [`escape`], onto `out` (bytes: a pattern is built in bytes and checked as UTF-8 once).
fn push_escaped(out: &mut Vec<u8>, name: &str) {
    // A label at a time (one copy each, from its dot on, after a backslash) rather than a
    // byte at a time: at 20,000 names this is most of the rendering's time.
    let bytes = name.as_bytes();
    let mut start = 0;
    for_each_dot(bytes, |i| {
        out.extend_from_slice(&bytes[start..i]);
        out.push(b'\\');
        start = i;
    });
    out.extend_from_slice(&bytes[start..]);
}

/// The length of [`escape`]`(name)`.
fn escaped_len(name: &str) -> usize {
    let mut dots = 0;
    for_each_dot(name.as_bytes(), |_| dots += 1);
    name.len() + dots
}

/// Which `rewrite` syntax the target CoreDNS understands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum RuleStyle {
    /// Compact regex rules with `answer auto` where they pay off (CoreDNS 1.10 and later).
    #[default]
    Compact,
    /// One `exact` rule per name, understood by every CoreDNS release in use; about 90 bytes
    /// per name, and wildcards are refused ([`CorefileError::WildcardNeedsAnswerAuto`]).
    ExactOnly,
}

/// The rewrite rules for `entries` in the default [`RuleStyle::Compact`].
pub fn render_rules(entries: &[DnsEntry]) -> Result<Vec<String>, CorefileError> {
    render_rules_with(entries, RuleStyle::Compact)
}

/// How one rule or template matches query names.
enum Match<'a> {
    /// One exact name.
    Exact(&'a str),
    /// An RE2 pattern over the fully-qualified name with its trailing dot.
    Regex(String),
}

/// Every name of `entries` as matches with their target, most specific first: exact names,
/// then one-label wildcards, then suffix wildcards with the longest suffixes first (CoreDNS
/// applies the first rule, and the first template, that matches). `group_exact(n, joins)` says
/// whether a target with `n` exact names gets grouped regexes instead of one exact match each;
/// `joins`: its one-label wildcards would join the same pattern ([`mergeable_wildcards`]).
/// The wildcard patterns leave out `cut`: exact names (heads by wildcard suffix, see
/// [`cut_heads`]) that no wildcard may match. `apart`: exact names that Go's one-pass matcher
/// would take keep their own rule ([`one_pass_apart`]; rewrite rules only).
fn ordered_matches<'a>(
    by_target: &ByTarget<'a>,
    group_exact: impl Fn(usize, bool) -> bool,
    cut: &HashMap<&str, Vec<&str>>,
    apart: bool,
) -> Vec<(Match<'a>, &'a str)> {
    let mut exact = Vec::new();
    let mut wildcards = Vec::new();
    // (labels in the suffix, most first; target) -> suffixes
    let mut suffix_groups: BTreeMap<(Reverse<usize>, &str), Vec<&str>> = BTreeMap::new();
    for (target, names) in by_target {
        let (plain, own) = split_cut(&names.wildcards, cut, WildcardLabels::One);
        let mut plain = Some(plain);
        let n = names.exact.len();
        let (mut alts, mut wild) = (Vec::new(), None);
        let may_join = plain.as_ref().is_some_and(|p| !p.is_empty()) && group_exact(n, true);
        if n > 0 && (group_exact(n, false) || may_join) {
            alts = exact_alternatives(&names.exact);
            wild = plain
                .as_deref()
                .filter(|_| !(apart && one_pass_apart(&names.exact, &alts)))
                .and_then(|p| mergeable_wildcards(target, p, &alts, by_target));
        }
        if n > 0 && group_exact(n, wild.is_some()) {
            if let Some(wild) = wild {
                alts.push(wild);
                plain = None;
            }
            exact.extend(
                chunked_alts(&alts, "", "\\.")
                    .into_iter()
                    .map(|p| (Match::Regex(p), *target)),
            );
        } else {
            exact.extend(names.exact.iter().map(|n| (Match::Exact(n), *target)));
        }
        let mut patterns = plain.map_or_else(Vec::new, |p| chunked(&p, "[^.]+\\.", "\\."));
        patterns.extend(own);
        wildcards.extend(patterns.into_iter().map(|p| (Match::Regex(p), *target)));
        for suffix in &names.suffixes {
            let labels = suffix.split('.').count();
            suffix_groups
                .entry((Reverse(labels), target))
                .or_default()
                .push(suffix);
        }
    }
    // Suffix matches last, deepest suffixes first: `*.b.example.com` must be tried before
    // `*.example.com`, which also covers `a.b.example.com`. Two suffixes with the same number
    // of labels never cover the same name, so their order is free (here: by target).
    for ((_, target), suffixes) in &suffix_groups {
        wildcards.extend(
            suffix_patterns(suffixes, cut)
                .into_iter()
                .map(|p| (Match::Regex(p), *target)),
        );
    }
    exact.extend(wildcards);
    exact
}

/// The rewrite rules for `entries`, one directive per line, without indentation or line
/// terminators. Deterministic: the order of `entries` does not matter.
pub fn render_rules_with(
    entries: &[DnsEntry],
    style: RuleStyle,
) -> Result<Vec<String>, CorefileError> {
    render_rules_of(&EntryRef::all(entries), style)
}

/// [`render_rules_with`] for borrowed entries (the placement hands each server block its
/// share without copying them).
pub(super) fn render_rules_of(
    entries: &[EntryRef<'_>],
    style: RuleStyle,
) -> Result<Vec<String>, CorefileError> {
    let by_target = group(&needed(entries))?;
    if style == RuleStyle::ExactOnly
        && let Some(suffix) = by_target
            .values()
            .find_map(|n| n.wildcards.first().or(n.suffixes.first()))
    {
        return Err(CorefileError::WildcardNeedsAnswerAuto {
            name: format!("*.{suffix}"),
        });
    }
    // A target's exact names as one pattern from 3 names on, or with its one-label wildcards.
    let group_exact = |n: usize, joins: bool| {
        style != RuleStyle::ExactOnly && (n > EXACT_RULES_MAX_PER_TARGET || joins)
    };
    // Pass-throughs are identity rules among the exact ones, before every wildcard.
    Ok(
        ordered_matches(&by_target, group_exact, &HashMap::new(), true)
            .into_iter()
            .map(|(m, target)| match m {
                Match::Exact(name) => format!("rewrite stop name exact {name} {target}"),
                Match::Regex(p) => format!("rewrite stop name regex {p} {target} answer auto"),
            })
            .collect(),
    )
}

/// The rule that opens hairpin's rules where nothing else may rewrite cluster names
/// (`placement::may_bypass`): `rewrite stop name suffix .cluster.local. .cluster.local.`, an
/// identity rewrite of every name in the cluster domain, where no hairpinned name can be. It
/// costs a cluster name (and every search-path NXDOMAIN of a pod, `ndots:5`) one string
/// comparison instead of a pass of Go's regexp NFA per rule: in CoreDNS 1.12.2 each regex
/// rule costs a name that does not match about 1,600 instructions to lowercase the name
/// again (`request.Name`, per rule) plus 2,500-5,000 in the NFA (about 700 per character
/// it reads, plus the alternation's first branches), whatever the number of names, and the
/// NFA's work queues and program, megabytes at 20,000 names, are what the cache of a busy
/// host loses (docs/dns-cost.md). `stop` sends the query on at once; the answer comes back
/// through the rewrite plugin's reverter unchanged (the question is restored as it was), which
/// copies it: written only where that costs less than the rules after it ([`bypass_pays`]).
pub fn cluster_bypass(cluster_domain: &str) -> String {
    let domain = cluster_domain.trim_end_matches('.');
    format!("rewrite stop name suffix .{domain}. .{domain}.")
}

/// What a rule costs a name it does not match, in units of about 1,100 instructions (CoreDNS
/// 1.12.2, callgrind over whole GC cycles, docs/dns-cost.md): an `exact` or `suffix` rule 1
/// (the rule's own lowercased copy of the name and a comparison), a `regex` rule up to
/// [`SMALL_REGEX`] bytes, or of exact names only (no character class) up to [`ONE_PASS_LEN`],
/// 2 (Go's one-pass or backtracking matcher, or a program of under 1,000 instructions), a
/// larger one 9 (Go's NFA, with the collector and stack growth its program and work queues
/// bring).
fn rule_cost(rule: &str) -> usize {
    let mut words = rule.split_whitespace();
    let Some(kind) = words.nth(3).filter(|&k| k == "regex") else {
        return 1;
    };
    // The pattern, the next word, read no further than it takes to tell whether it is small
    // (at 20,000 names it is over 100 KB, and the rules are weighed on every plan).
    let after = kind.as_ptr().addr() - rule.as_ptr().addr() + kind.len();
    let pattern = rule[after..].trim_start();
    let mut class = false;
    let len = (pattern.char_indices())
        .find(|&(i, c)| {
            class |= c == '[';
            c.is_whitespace() || i > ONE_PASS_LEN
        })
        .map_or(pattern.len(), |(i, _)| i);
    if (1..=SMALL_REGEX).contains(&len) || ((1..=ONE_PASS_LEN).contains(&len) && !class) {
        2
    } else {
        9
    }
}

/// A `regex` pattern up to this length compiles to at most about 500 instructions of Go's
/// regexp program (about one per byte), within reach of its backtracking matcher.
const SMALL_REGEX: usize = 400;

/// What [`cluster_bypass`] costs, in the units of [`rule_cost`]: a cluster name about 9 (its
/// answer goes through the rewrite plugin's reverter, which copies it; the identity rewrite's
/// checks and allocations), every other name 2 (one more rule to pass).
const BYPASS_COST: usize = 9 + 2;

/// Whether opening `rules` (rendered rules, one a line) with [`cluster_bypass`] costs the
/// queries less than it saves: only when the rules would cost a name of the cluster domain
/// more than the bypass costs it and every other query together. One `exact` rule cost a
/// cluster name 0.98x the Corefile without hairpin's block, the bypass before it 1.08x; one
/// large `regex` (20,000 names) 1.08x without the bypass, 1.09-1.11x with it, external names
/// 1.08-1.10x and 1.10x (docs/dns-cost.md).
pub fn bypass_pays(rules: &[String]) -> bool {
    // Every rule costs at least 1: the sum is known to be over once it is.
    let mut cost = 0;
    rules.iter().any(|r| {
        cost += rule_cost(r);
        cost > BYPASS_COST
    })
}

/// TTL of the records hairpin answers itself: short, so a recreated hairpin Service (a new
/// ClusterIP) is picked up quickly.
pub const ANSWER_TTL: u32 = 30;

/// The SOA of a NODATA answer (its minimum, 30 s, is how long resolvers cache the absence).
pub(super) const NODATA_SOA: &str =
    "{{ .Zone }} 30 IN SOA ns.hairpin.invalid. hostmaster.hairpin.invalid. 1 30 30 30 30";

/// The `template` directives that answer `entries` directly with their targets' addresses,
/// for server blocks where a rewrite cannot work (no `kubernetes` plugin to resolve the
/// rewritten name: CoreDNS never hands a rewritten query to another server block).
///
/// Per group of names: an `A` template answering the IPv4 ClusterIP, an `AAAA` template
/// answering the IPv6 one, and an `ANY` template answering every other type with no record,
/// so that no upstream answer (a public AAAA or HTTPS record) leaks past hairpin for a name it
/// owns. A family without address answers no record (NODATA, with an SOA in the authority
/// section: a template with neither answer nor authority is refused by older CoreDNS). Each
/// template falls through on a miss: without `fallthrough` a template that does not match
/// answers NXDOMAIN.
///
/// Returns the lines (nested lines indented by four spaces) and the names left out because
/// `addresses` has none for their target (sorted).
pub fn render_answers(
    entries: &[DnsEntry],
    addresses: &BTreeMap<String, Vec<IpAddr>>,
) -> Result<(Vec<String>, Vec<String>), CorefileError> {
    render_answers_of(&EntryRef::all(entries), addresses)
}

/// [`render_answers`] for borrowed entries.
pub(super) fn render_answers_of(
    entries: &[EntryRef<'_>],
    addresses: &BTreeMap<String, Vec<IpAddr>>,
) -> Result<(Vec<String>, Vec<String>), CorefileError> {
    // Pass-throughs are cut out of the wildcard patterns: a matching template always answers.
    let (passthrough, entries): (Vec<EntryRef<'_>>, Vec<EntryRef<'_>>) = needed(entries)
        .into_iter()
        .partition(EntryRef::is_passthrough);
    let all = group(&entries)?;
    let passthrough: Vec<&str> = passthrough.iter().map(|e| e.name).collect();
    let cut = cut_heads(&passthrough);
    let mut by_target = ByTarget::new();
    let mut unknown = Vec::new();
    for (target, names) in all {
        if addresses.get(target).is_some_and(|a| !a.is_empty()) {
            by_target.insert(target, names);
        } else {
            unknown.extend(names.exact.iter().map(|n| (*n).to_owned()));
            unknown.extend(
                names
                    .wildcards
                    .iter()
                    .chain(&names.suffixes)
                    .map(|s| format!("*.{s}")),
            );
        }
    }
    unknown.sort();
    let mut lines = Vec::new();
    for (m, target) in ordered_matches(&by_target, |_, _| true, &cut, false) {
        let pattern = match m {
            Match::Exact(name) => format!("^{}\\.$", escape(name)),
            Match::Regex(p) => p,
        };
        let ips = &addresses[target];
        let v4 = ips.iter().find(|ip| ip.is_ipv4());
        let v6 = ips.iter().find(|ip| ip.is_ipv6());
        for (qtype, ip) in [("A", v4), ("AAAA", v6), ("ANY", None)] {
            lines.push(format!("template IN {qtype} {{"));
            lines.push(format!("    match {pattern}"));
            match ip {
                Some(ip) => lines.push(format!(
                    "    answer \"{{{{ .Name }}}} {ANSWER_TTL} IN {qtype} {ip}\""
                )),
                None => lines.push(format!("    authority \"{NODATA_SOA}\"")),
            }
            lines.push("    fallthrough".to_owned());
            lines.push("}".to_owned());
        }
    }
    Ok((lines, unknown))
}

/// Whether a trimmed line is one the editor writes between the markers (rewrite rules or the
/// lines of [`render_answers`]).
pub(super) fn is_managed_line(line: &str) -> bool {
    let t = line.trim();
    t.starts_with("rewrite stop name ")
        || t.starts_with("template IN ")
        || t.starts_with("match ^")
        || t.starts_with("answer \"{{ .Name }} ")
        || t == format!("authority \"{NODATA_SOA}\"")
        || matches!(t, "fallthrough" | "}")
}

/// Split a list of names into `^PREFIX(?:a|b|...)SUFFIX$` patterns (each name escaped) within
/// the budget. The names are escaped straight into the patterns: at 20,000 names, an escaped
/// copy of each cost as much as the rest of the rendering.
fn chunked(names: &[&str], prefix: &str, suffix: &str) -> Vec<String> {
    let alts: Vec<Alt<'_>> = names.iter().map(|n| Alt::Name(n)).collect();
    chunked_alts(&alts, prefix, suffix)
}

/// [`chunked`] of alternatives.
fn chunked_alts(alts: &[Alt<'_>], prefix: &str, suffix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut start, mut len) = (0, 0);
    for (i, alt) in alts.iter().enumerate() {
        let l = alt.len();
        if i > start && len + l + 1 > REGEX_PATTERN_BUDGET {
            out.push(join_pattern(&alts[start..i], len, prefix, suffix));
            (start, len) = (i, 0);
        }
        len += l + 1;
    }
    if start < alts.len() {
        out.push(join_pattern(&alts[start..], len, prefix, suffix));
    }
    out
}

/// `^PREFIX(?:a|b|...)SUFFIX$` of `alts` (`len`: their lengths plus one each), or
/// `^PREFIXaSUFFIX$` of one.
fn join_pattern(alts: &[Alt<'_>], len: usize, prefix: &str, suffix: &str) -> String {
    let mut out = Vec::with_capacity(len + prefix.len() + suffix.len() + 6);
    out.push(b'^');
    out.extend_from_slice(prefix.as_bytes());
    push_alternation(&mut out, alts);
    out.extend_from_slice(suffix.as_bytes());
    out.push(b'$');
    String::from_utf8(out).expect("names and patterns are UTF-8")
}

/// The one-label wildcards `plain` of `target` as one more alternative of its exact names'
/// pattern, `[^.]+\.(?:a\.com|b\.org)`, where that changes no answer and the pattern stays
/// within [`REGEX_PATTERN_BUDGET`]: one rule fewer, and each rule costs every query that
/// reaches it (an external name reaches them all) a fresh lowercased copy of its name
/// (`request.Name`, about 1,600 instructions in CoreDNS 1.12.2) and a start of Go's NFA. It
/// changes no answer when no exact name of another target (a pass-through included) lies
/// under one of these wildcards: the merged rule comes before the other targets' exact rules,
/// which would otherwise have been tried first.
fn mergeable_wildcards<'a>(
    target: &str,
    plain: &[&str],
    alts: &[Alt<'_>],
    by_target: &ByTarget<'_>,
) -> Option<Alt<'a>> {
    if plain.is_empty() || alts.is_empty() {
        return None;
    }
    let one: HashSet<&str> = plain.iter().copied().collect();
    let none = HashSet::new();
    let shadowed = by_target
        .iter()
        .filter(|(t, _)| !same_text(t, target))
        .any(|(_, n)| n.exact.iter().any(|e| covered(e, &one, &none)));
    let wild = Alt::Group(format!("[^.]+\\.{}", join_alternatives(plain)));
    let total = alts.iter().map(|a| a.len() + 1).sum::<usize>() + wild.len() + 1;
    (!shadowed && total <= REGEX_PATTERN_BUDGET).then_some(wild)
}

/// A pattern of exact names up to this length compiles to fewer than 1,000 instructions of
/// Go's regexp program (at most one per byte), the most its one-pass matcher takes.
const ONE_PASS_LEN: usize = 900;

/// Fewest distinct first characters of a target's exact names from which they keep a rule of
/// their own ([`one_pass_apart`]). In the shared pattern Go's NFA starts every query with a
/// thread per first character, about 290 instructions each (callgrind, Go's regexp on the
/// benchmark's patterns); the one-pass matcher pays none of that, but the rule costs every
/// query a `request.Name()` of its own (about 60 instructions per character of the name,
/// CoreDNS 1.12.2): from about eight first characters the own rule costs less.
const APART_FAN_OUT: usize = 8;

/// Whether a target's exact names (`names`, sorted, as `alts`) keep a `regex` rule of their
/// own instead of sharing one with the target's one-label wildcards ([`mergeable_wildcards`]):
/// when their pattern alone is within reach of Go's one-pass matcher and they start with at
/// least [`APART_FAN_OUT`] distinct characters. The one-pass matcher reads a name once, at a
/// few dozen instructions per character, where the NFA of the shared pattern pays about 290
/// per first character of the names at every query; and a name shorter than the shortest
/// wildcard match skips the wildcards' rule without matching at all (Go checks the input's
/// length first). Measured in CoreDNS 1.12.2 (callgrind, whole GC cycles) on the benchmark's
/// 1,000 names (one cross product of 20 first labels, 10 first characters, beside 250
/// wildcards): external names 1.108x -> 1.068x the Corefile without hairpin's block, cluster
/// names 1.091x -> 1.088x (docs/dns-cost.md).
///
/// One-pass: at most [`ONE_PASS_LEN`] bytes; flat names only, or one cross product alone (Go
/// factors a sorted list of literals into a trie whose branches start with distinct
/// characters; a second group, or a name beside a group, may start like it); and no name (of a
/// cross product: no parent) that goes on after another one's end with a dot (`a.io` and
/// `a.io.x`: after `a.io` both the end of the pattern, `\.`, and `.x` start with a dot).
fn one_pass_apart(names: &[&str], alts: &[Alt<'_>]) -> bool {
    let mut len = 8; // `^(?:`, `)\.$`
    for alt in alts {
        len += alt.len() + 1;
        if len > ONE_PASS_LEN {
            return false;
        }
    }
    let mut first = [false; 256];
    for name in names {
        if let Some(&b) = name.as_bytes().first() {
            first[usize::from(b)] = true;
        }
    }
    if first.iter().filter(|&&f| f).count() < APART_FAN_OUT {
        return false;
    }
    let keys: HashSet<&str> = match alts {
        [Alt::Group(_)] => names
            .iter()
            .filter_map(|n| split_head(n).map(|(_, parent)| parent))
            .collect(),
        _ if alts.iter().all(|a| matches!(a, Alt::Name(_))) => names.iter().copied().collect(),
        _ => return false,
    };
    !keys
        .iter()
        .any(|k| k.match_indices('.').any(|(i, _)| keys.contains(&k[..i])))
}
/// Most cross-product groups in one target's exact names ([`exact_alternatives`]). Each group
/// is a branch of the alternation that Go's regexp cannot merge with the others, so its matcher
/// starts every query with a thread per first character of each group's labels: a few large
/// groups pay, many small ones would not.
const CROSS_GROUPS_MAX: usize = 4;

/// One alternative of an exact-name pattern: a name (escaped when written) or a cross-product
/// group already written as RE2, `(?:api|www)\.(?:a\.com|b\.org)`.
enum Alt<'a> {
    Name(&'a str),
    Group(String),
}

impl Alt<'_> {
    fn len(&self) -> usize {
        match self {
            Alt::Name(n) => escaped_len(n),
            Alt::Group(g) => g.len(),
        }
    }

    fn push(&self, out: &mut Vec<u8>) {
        match self {
            Alt::Name(n) => push_escaped(out, n),
            Alt::Group(g) => out.extend_from_slice(g.as_bytes()),
        }
    }
}

/// The alternatives of a list of exact names (sorted, distinct): each name whole, except that
/// parent domains with the same set of first labels (tenants that all have `api`, `app` and
/// `www`) become one cross product, `(?:api|app|www)\.(?:t1\.example\.com|t2\.example\.com)`,
/// the [`CROSS_GROUPS_MAX`] groups that save most. A flat list repeats every parent domain
/// under each of its first labels (Go factors common prefixes, not suffixes), and each
/// character is an instruction of the compiled program with a pointer the garbage collector
/// follows on every cycle whether a query uses the rule or not; at 20,000 names of 20 first
/// labels per domain the groups take the program from 112,000 instructions to 5,600.
/// Groups first, then the other names sorted (so that Go still factors them into a trie).
fn exact_alternatives<'a>(names: &[&'a str]) -> Vec<Alt<'a>> {
    debug_assert!(names.is_sorted(), "exact names come sorted");
    if !shared_heads(names) {
        return names.iter().map(|n| Alt::Name(n)).collect();
    }
    // Parent domain -> its first label, and its other first labels (a hash map: this runs on
    // every plan over every name; each group's parents are sorted below). Most parents have
    // one first label and are in no group (a group's parents have two or more): the first is
    // held apart, so that those cost no list of their own.
    let mut heads: HashMap<&str, (&str, Vec<&str>)> = HashMap::new();
    for name in names {
        if let Some((head, parent)) = split_head(name) {
            match heads.entry(parent) {
                Entry::Occupied(mut seen) => seen.get_mut().1.push(head),
                Entry::Vacant(new) => {
                    new.insert((head, Vec::new()));
                }
            }
        }
    }
    // Set of first labels (two or more) -> the parents that have exactly that set.
    let mut by_heads: BTreeMap<Vec<&str>, Vec<&str>> = BTreeMap::new();
    for (parent, (first, mut hs)) in heads {
        if hs.is_empty() {
            continue;
        }
        hs.push(first);
        hs.sort_unstable();
        by_heads.entry(hs).or_default().push(parent);
    }
    let cost = |s: &[&str]| s.iter().map(|n| escaped_len(n) + 1).sum::<usize>();
    let mut groups: Vec<(usize, Vec<&str>, Vec<&str>)> = by_heads
        .into_iter()
        .filter(|(hs, ps)| hs.len() > 1 && ps.len() > 1)
        .map(|(hs, mut ps)| {
            ps.sort_unstable();
            let flat = hs.len() * cost(&ps) + ps.len() * (cost(&hs) + hs.len());
            let saving = flat.saturating_sub(cost(&hs) + cost(&ps) + 10);
            (saving, hs, ps)
        })
        .filter(|(saving, _, _)| *saving > 0)
        .collect();
    groups.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    groups.truncate(CROSS_GROUPS_MAX);
    groups.sort_by(|a, b| a.1.cmp(&b.1));
    // A group holds every name of each of its parents (its key is a parent's whole set of
    // first labels), so a name is grouped exactly when its parent is.
    let mut grouped: HashSet<&str> = HashSet::new();
    let mut out = Vec::with_capacity(names.len());
    for (_, hs, ps) in &groups {
        let head_alt = join_alternatives(hs);
        // A group's parents are split so that each piece fits a rule with room to spare.
        let (mut start, mut len) = (0, 0);
        for (i, p) in ps.iter().enumerate() {
            let l = escaped_len(p) + 1;
            if i > start && len + l > REGEX_PATTERN_BUDGET / 2 {
                out.push(Alt::Group(format!(
                    "{head_alt}\\.{}",
                    join_alternatives(&ps[start..i])
                )));
                (start, len) = (i, 0);
            }
            len += l;
        }
        out.push(Alt::Group(format!(
            "{head_alt}\\.{}",
            join_alternatives(&ps[start..])
        )));
        grouped.extend(ps.iter().copied());
    }
    out.extend(
        names
            .iter()
            .filter(|n| {
                grouped.is_empty() || split_head(n).is_none_or(|(_, p)| !grouped.contains(p))
            })
            .map(|n| Alt::Name(n)),
    );
    out
}

/// Whether two or more first labels each start two or more of `names` (sorted), as every
/// cross product of [`exact_alternatives`] needs: each of a group's first labels starts a name
/// under each of its two or more parents. Most lists of names, whose first labels are each
/// their own, fail this, and then have no group without a parent domain being looked up. The
/// names that start with one label are next to each other in sorted order (they share the
/// prefix `label.`), so one pass comparing each name's first label with the one before tells.
fn shared_heads(names: &[&str]) -> bool {
    // The first label of the name before, with its dot: a name that starts with it has it.
    let (mut shared, mut previous, mut counted) = (0, "", false);
    for name in names {
        if !previous.is_empty() && name.starts_with(previous) {
            if !counted {
                (shared, counted) = (shared + 1, true);
                if shared == 2 {
                    return true;
                }
            }
        } else if let Some((head, _)) = split_head(name) {
            (previous, counted) = (&name[..=head.len()], false);
        }
    }
    false
}

/// `name`'s first label and its parent domain (`www` and `example.com` for `www.example.com`),
/// or `None` for a name of one label. As `split_once('.')`, a byte search: faster on names
/// this short, and it runs for every name of every plan.
fn split_head(name: &str) -> Option<(&str, &str)> {
    let dot = name.bytes().position(|b| b == b'.')?;
    Some((&name[..dot], &name[dot + 1..]))
}

/// `(?:a|b)` of `names` escaped, or `a` of one name.
fn join_alternatives(names: &[&str]) -> String {
    let items: Vec<Alt<'_>> = names.iter().map(|n| Alt::Name(n)).collect();
    let mut out = Vec::new();
    push_alternation(&mut out, &items);
    String::from_utf8(out).expect("names are UTF-8")
}

/// `(?:a|b|...)` of `items`, or the one item alone, onto `out`.
fn push_alternation(out: &mut Vec<u8>, items: &[Alt<'_>]) {
    if let [item] = items {
        item.push(out);
        return;
    }
    out.extend_from_slice(b"(?:");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b'|');
        }
        item.push(out);
    }
    out.push(b')');
}

#[cfg(test)]
/// Exact names as flat alternations of whole names, `^(?:a\.example\.com|b\.example\.org)\.$`,
/// sorted (`names` are sorted and distinct) and split within [`REGEX_PATTERN_BUDGET`]. Go's
/// regexp parser factors a sorted list of literals into a trie, so matching a name costs
/// about its length whatever the number of names; a list grouped into nested alternations
/// (one group per parent domain) defeats that factoring, and the matcher then tries every
/// group's first label at every query (measured: 744 us against 2.9 us per query at 20,000
/// names, docs/dns-cost.md).
fn flat_patterns(names: &[&str]) -> Vec<String> {
    chunked_alts(&exact_alternatives(names), "", "\\.")
}

/// Suffix-match wildcards (one or more labels): `^(?:[^.]+\.)+(?:a\.com|b\.org)\.$`. A suffix
/// with heads in `cut` gets a pattern of its own whose head matches none of them.
fn suffix_patterns(suffixes: &[&str], cut: &HashMap<&str, Vec<&str>>) -> Vec<String> {
    let (plain, mut own) = split_cut(suffixes, cut, WildcardLabels::OneOrMore);
    let mut out = chunked(&plain, "(?:[^.]+\\.)+", "\\.");
    out.append(&mut own);
    out
}

/// The wildcard suffixes without heads in `cut`, and a pattern of its own for each of the
/// others (`^HEAD\.suffix\.$`, HEAD matching every head but the cut ones).
fn split_cut<'a>(
    suffixes: &[&'a str],
    cut: &HashMap<&str, Vec<&str>>,
    labels: WildcardLabels,
) -> (Vec<&'a str>, Vec<String>) {
    let mut plain = Vec::new();
    let mut own = Vec::new();
    for s in suffixes {
        let mut heads: Vec<&str> = cut
            .get(s)
            .into_iter()
            .flatten()
            .copied()
            .filter(|h| labels.covers(h))
            .collect();
        if heads.is_empty() {
            plain.push(*s);
        } else {
            heads.sort_unstable();
            heads.dedup();
            let head = head_except(&heads, labels == WildcardLabels::OneOrMore);
            own.push(format!("^{head}\\.{}\\.$", escape(s)));
        }
    }
    (plain, own)
}

/// Per suffix of each of `names` (every parent domain), the head before it: `a.b.c` gives
/// `b.c -> a` and `c -> a.b`.
fn cut_heads<'a>(names: &[&'a str]) -> HashMap<&'a str, Vec<&'a str>> {
    let mut out: HashMap<&str, Vec<&str>> = HashMap::new();
    for name in names {
        for (i, _) in name.match_indices('.') {
            out.entry(&name[i + 1..]).or_default().push(&name[..i]);
        }
    }
    out
}

/// An RE2 pattern matching every head a wildcard stands for (one label, or with `multi` one
/// or more labels joined by dots) except `excluded` (sorted, distinct, each such a head).
/// RE2 has no look-ahead, so the pattern spells the complement out over the trie of the
/// excluded heads: at each node, either a character that leaves the trie (then any
/// completion), or one that follows it, or the end where the node is not excluded.
pub(crate) fn head_except(excluded: &[&str], multi: bool) -> String {
    let mut out = String::new();
    except_node(&mut out, excluded, 0, multi);
    out
}

/// [`head_except`] after the common prefix of length `depth` of `words`.
fn except_node(out: &mut String, words: &[&str], depth: usize, multi: bool) {
    // A label's remaining characters, then (multi) more labels.
    let rest = if multi { "[^.]*(?:\\.[^.]+)*" } else { "[^.]*" };
    let prefix = &words[0][..depth];
    let in_label = depth > 0 && !prefix.ends_with('.');
    let mut alternatives: Vec<String> = Vec::new();
    let ends_here = words.iter().any(|w| w.len() == depth);
    if in_label && !ends_here {
        alternatives.push(String::new());
    }
    let longer: Vec<&str> = words.iter().copied().filter(|w| w.len() > depth).collect();
    let mut children = String::new();
    let mut dot_child = false;
    for same in longer.chunk_by(|a, b| a.as_bytes()[depth] == b.as_bytes()[depth]) {
        let c = same[0].as_bytes()[depth];
        let mut alt = String::new();
        if c == b'.' {
            dot_child = true;
            alt.push_str("\\.");
        } else {
            children.push_str(if c == b'-' { "\\-" } else { "" });
            if c != b'-' {
                children.push(c as char);
            }
            alt.push(c as char);
        }
        except_node(&mut alt, same, depth + 1, multi);
        alternatives.push(alt);
    }
    alternatives.push(format!("[^.{children}]{rest}"));
    if multi && in_label && !dot_child {
        alternatives.push("\\.[^.]+(?:\\.[^.]+)*".to_owned());
    }
    out.push_str("(?:");
    out.push_str(&alternatives.join("|"));
    out.push(')');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(name: &str, target: &str) -> DnsEntry {
        DnsEntry::new(name, target).unwrap()
    }

    #[test]
    fn patterns_parse_and_match() {
        assert_eq!(
            HostPattern::parse("Foo.Example.com").unwrap(),
            HostPattern::Exact("foo.example.com".into())
        );
        let w = HostPattern::parse("*.example.com").unwrap();
        assert_eq!(w, HostPattern::Wildcard("example.com".into()));
        assert!(w.matches("a.example.com"));
        assert!(!w.matches("a.b.example.com"));
        assert!(!w.matches("example.com"));
        assert!(!w.matches("aexample.com"));
        assert_eq!(w.to_string(), "*.example.com");
        for bad in [
            "", "*", "*.", "a.*.com", "foo*.com", "a_b.com", "-a.com", "a..b",
        ] {
            assert!(
                matches!(
                    HostPattern::parse(bad),
                    Err(CorefileError::InvalidHostname { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            DnsEntry::new("a.com", "bad_target"),
            Err(CorefileError::InvalidTarget { .. })
        ));
    }

    #[test]
    fn gateway_wildcards_match_one_or_more_labels() {
        let ingress = HostPattern::parse_with("*.Example.com.", WildcardLabels::One).unwrap();
        let gateway = HostPattern::parse_with("*.Example.com.", WildcardLabels::OneOrMore).unwrap();
        assert_eq!(ingress, HostPattern::Wildcard("example.com".into()));
        assert_eq!(gateway, HostPattern::WildcardSuffix("example.com".into()));
        assert_eq!(ingress.wildcard_labels(), Some(WildcardLabels::One));
        assert_eq!(gateway.wildcard_labels(), Some(WildcardLabels::OneOrMore));
        assert_eq!(HostPattern::parse("a.com").unwrap().wildcard_labels(), None);
        assert_eq!(gateway.to_string(), "*.example.com");
        assert_eq!(gateway.name(), "example.com");
        // Exact names ignore the kind.
        assert_eq!(
            HostPattern::parse_with("a.example.com", WildcardLabels::OneOrMore).unwrap(),
            HostPattern::Exact("a.example.com".into())
        );

        assert!(ingress.matches("a.example.com"));
        assert!(
            !ingress.matches("a.b.example.com"),
            "an Ingress wildcard is one label"
        );
        assert!(gateway.matches("a.example.com"));
        assert!(gateway.matches("a.b.example.com"));
        assert!(gateway.matches("x.y.z.example.com"));
        for name in [
            "example.com",
            "aexample.com",
            "a.example.org",
            "a.b.aexample.com",
        ] {
            assert!(!gateway.matches(name), "{name}");
            assert!(!ingress.matches(name), "{name}");
        }
    }

    #[test]
    fn a_target_gets_one_regex_from_three_exact_names_or_with_its_wildcards() {
        let t = "t.ns.svc.cluster.local";
        let exact = |name: &str| format!("rewrite stop name exact {name} {t}");
        let regex = |p: &str| format!("rewrite stop name regex {p} {t} answer auto");
        // One or two names: an `exact` rule each (the cheapest rule for a name it misses).
        assert_eq!(
            render_rules(&[e("a.example.com", t), e("b.example.org", t)]).unwrap(),
            [exact("a.example.com"), exact("b.example.org")]
        );
        // Three: one regex, which costs a name it misses less than three `exact` rules.
        let three = [
            e("a.example.com", t),
            e("b.example.org", t),
            e("c.example.net", t),
        ];
        assert_eq!(
            render_rules(&three).unwrap(),
            [regex(
                "^(?:a\\.example\\.com|b\\.example\\.org|c\\.example\\.net)\\.$"
            )]
        );
        // Old CoreDNS (no `answer auto`): still one `exact` rule per name.
        assert_eq!(
            render_rules_with(&three, RuleStyle::ExactOnly).unwrap(),
            [
                exact("a.example.com"),
                exact("b.example.org"),
                exact("c.example.net")
            ]
        );
        // One name and a one-label wildcard of the same target: one rule.
        assert_eq!(
            render_rules(&[e("a.example.com", t), e("*.apps.example.com", t)]).unwrap(),
            [regex(
                "^(?:a\\.example\\.com|[^.]+\\.apps\\.example\\.com)\\.$"
            )]
        );
        // ... unless another target's name lies under that wildcard: its rule must come first.
        let u = "u.ns.svc.cluster.local";
        assert_eq!(
            render_rules(&[
                e("a.example.com", t),
                e("*.apps.example.com", t),
                e("x.apps.example.com", u)
            ])
            .unwrap(),
            [
                exact("a.example.com"),
                format!("rewrite stop name exact x.apps.example.com {u}"),
                regex("^[^.]+\\.apps\\.example\\.com\\.$"),
            ]
        );
    }

    #[test]
    fn the_bypass_pays_only_before_rules_that_cost_a_cluster_name_more() {
        let exact = |i: usize| format!("rewrite stop name exact n{i}.example.com t.ns.svc.x");
        let regex = |len: usize| {
            let p = format!("^(?:{})\\.$", "a".repeat(len));
            format!("rewrite stop name regex {p} t.ns.svc.x answer auto")
        };
        // Nothing, one `exact` rule, eleven: cheaper than the bypass.
        assert!(!bypass_pays(&[]));
        assert!(!bypass_pays(&[exact(0)]));
        assert!(!bypass_pays(&(0..11).map(exact).collect::<Vec<_>>()));
        // Twelve are not.
        assert!(bypass_pays(&(0..12).map(exact).collect::<Vec<_>>()));
        // One large regex (Go's NFA) costs about what the bypass does; with a small one and
        // an `exact` rule beside it, more; two small ones and an `exact` rule, less.
        assert!(!bypass_pays(&[regex(1000)]));
        assert!(!bypass_pays(&[regex(10), regex(10), exact(0)]));
        assert!(bypass_pays(&[regex(1000), regex(10), exact(0)]));
        assert!(bypass_pays(&[regex(1000), regex(1000)]));
    }

    #[test]
    fn a_rule_costs_what_its_whole_pattern_says_though_it_is_read_only_so_far() {
        // The cost as read from the whole fifth word.
        let whole = |rule: &str| {
            let mut words = rule.split_whitespace();
            match (words.nth(3), words.next()) {
                (Some("regex"), Some(p)) if p.len() <= SMALL_REGEX => 2,
                (Some("regex"), Some(p)) if p.len() <= ONE_PASS_LEN && !p.contains('[') => 2,
                (Some("regex"), _) => 9,
                _ => 1,
            }
        };
        let mut rules = vec![
            "rewrite stop name exact a.example.com t".to_owned(),
            "rewrite stop name suffix .cluster.local. .cluster.local.".to_owned(),
            "rewrite stop name regex".to_owned(),
            "rewrite stop name regex   ".to_owned(),
        ];
        let lens = [
            SMALL_REGEX - 1,
            SMALL_REGEX,
            SMALL_REGEX + 1,
            ONE_PASS_LEN - 1,
        ];
        for len in [1, 2, ONE_PASS_LEN, ONE_PASS_LEN + 1, 100_000]
            .into_iter()
            .chain(lens)
        {
            for (pad, tail) in [("", ""), (" ", " t answer auto"), ("\t ", "\tt")] {
                rules.push(format!(
                    "rewrite stop name regex{pad} {}{tail}",
                    "a".repeat(len)
                ));
                // A character class (a wildcard's `[^.]`) early or late.
                rules.push(format!(
                    "rewrite stop name regex{pad} [^.]{}{tail}",
                    "a".repeat(len)
                ));
                rules.push(format!(
                    "rewrite stop name regex{pad} {}[^.]{tail}",
                    "a".repeat(len)
                ));
                // A multi-byte character across the limit.
                let p = format!(
                    "{}é{}",
                    "a".repeat(len.min(SMALL_REGEX)),
                    "b".repeat(len / 2)
                );
                rules.push(format!("rewrite stop name regex {pad}{p}{tail}"));
                let p = format!(
                    "{}é{}",
                    "a".repeat(len.min(ONE_PASS_LEN - 1)),
                    "b".repeat(len % 3)
                );
                rules.push(format!("rewrite stop name regex {pad}{p}{tail}"));
            }
        }
        for rule in &rules {
            assert_eq!(
                rule_cost(rule),
                whole(rule),
                "{}",
                &rule[..rule.len().min(60)]
            );
        }
    }

    #[test]
    fn gateway_wildcards_render_as_suffix_regexes_after_the_others() {
        let gw =
            |name, target| DnsEntry::new_with(name, target, WildcardLabels::OneOrMore).unwrap();
        let rules = render_rules(&[
            gw("*.example.com", "t0.ns.svc.cluster.local"),
            gw("*.example.org", "t0.ns.svc.cluster.local"),
            gw("*.b.example.com", "t1.ns.svc.cluster.local"),
            gw("*.x.b.example.com", "t0.ns.svc.cluster.local"),
            e("*.c.example.com", "t1.ns.svc.cluster.local"),
            e("a.example.com", "t1.ns.svc.cluster.local"),
        ])
        .unwrap();
        assert_eq!(
            rules,
            [
                "rewrite stop name regex ^(?:a\\.example\\.com|[^.]+\\.c\\.example\\.com)\\.$ t1.ns.svc.cluster.local answer auto",
                "rewrite stop name regex ^(?:[^.]+\\.)+x\\.b\\.example\\.com\\.$ t0.ns.svc.cluster.local answer auto",
                "rewrite stop name regex ^(?:[^.]+\\.)+b\\.example\\.com\\.$ t1.ns.svc.cluster.local answer auto",
                "rewrite stop name regex ^(?:[^.]+\\.)+(?:example\\.com|example\\.org)\\.$ t0.ns.svc.cluster.local answer auto",
            ]
        );
        // The order of the entries does not matter.
        let mut shuffled = vec![
            e("a.example.com", "t1.ns.svc.cluster.local"),
            gw("*.x.b.example.com", "t0.ns.svc.cluster.local"),
            e("*.c.example.com", "t1.ns.svc.cluster.local"),
            gw("*.b.example.com", "t1.ns.svc.cluster.local"),
            gw("*.example.org", "t0.ns.svc.cluster.local"),
            gw("*.example.com", "t0.ns.svc.cluster.local"),
        ];
        assert_eq!(render_rules(&shuffled).unwrap(), rules);
        shuffled.reverse();
        assert_eq!(render_rules(&shuffled).unwrap(), rules);
    }

    #[test]
    fn one_wildcard_with_both_meanings() {
        let gw = |target| {
            DnsEntry::new_with("*.example.com", target, WildcardLabels::OneOrMore).unwrap()
        };
        // Same target: the broader meaning wins, once.
        for entries in [
            [e("*.example.com", "t.ns.svc.x"), gw("t.ns.svc.x")],
            [gw("t.ns.svc.x"), e("*.example.com", "t.ns.svc.x")],
        ] {
            assert_eq!(
                render_rules(&entries).unwrap(),
                ["rewrite stop name regex ^(?:[^.]+\\.)+example\\.com\\.$ t.ns.svc.x answer auto"]
            );
        }
        // Two targets: a conflict, whatever the kinds.
        let err = render_rules(&[e("*.example.com", "y.ns.svc.x"), gw("x.ns.svc.x")]).unwrap_err();
        assert!(matches!(
            err,
            CorefileError::ConflictingTargets { ref name, ref first, ref second }
                if name == "*.example.com" && first == "x.ns.svc.x" && second == "y.ns.svc.x"
        ));
        // Still refused without `answer auto`.
        let err = render_rules_with(&[gw("t.ns.svc.x")], RuleStyle::ExactOnly).unwrap_err();
        assert_eq!(err.metric_label(), "wildcard_needs_answer_auto");
    }

    #[test]
    fn few_exact_names_become_exact_rules_sorted() {
        let rules = render_rules(&[
            e("b.example.com", "t1.ns.svc.cluster.local"),
            e("a.example.com", "t1.ns.svc.cluster.local"),
            e("a.example.com", "t1.ns.svc.cluster.local"),
            e("*.example.org", "t0.ns.svc.cluster.local"),
        ])
        .unwrap();
        assert_eq!(
            rules,
            [
                "rewrite stop name exact a.example.com t1.ns.svc.cluster.local",
                "rewrite stop name exact b.example.com t1.ns.svc.cluster.local",
                "rewrite stop name regex ^[^.]+\\.example\\.org\\.$ t0.ns.svc.cluster.local answer auto",
            ]
        );
    }

    #[test]
    fn many_exact_names_are_flat_sorted_alternations() {
        let mut entries: Vec<_> = (0..10)
            .map(|i| {
                e(
                    &format!("app-{i}.team.example.com"),
                    "t.ns.svc.cluster.local",
                )
            })
            .collect();
        entries.push(e("solo.example.org", "t.ns.svc.cluster.local"));
        let rules = render_rules(&entries).unwrap();
        assert_eq!(
            rules,
            [
                "rewrite stop name regex ^(?:app-0\\.team\\.example\\.com|app-1\\.team\\.example\\.com|app-2\\.team\\.example\\.com|app-3\\.team\\.example\\.com|app-4\\.team\\.example\\.com|app-5\\.team\\.example\\.com|app-6\\.team\\.example\\.com|app-7\\.team\\.example\\.com|app-8\\.team\\.example\\.com|app-9\\.team\\.example\\.com|solo\\.example\\.org)\\.$ t.ns.svc.cluster.local answer auto"
            ]
        );
    }

    #[test]
    fn exact_only_style_never_uses_regex() {
        let entries: Vec<_> = (0..20)
            .map(|i| e(&format!("app-{i}.example.com"), "t.ns.svc.cluster.local"))
            .collect();
        let rules = render_rules_with(&entries, RuleStyle::ExactOnly).unwrap();
        assert_eq!(rules.len(), 20);
        assert!(
            rules
                .iter()
                .all(|r| r.starts_with("rewrite stop name exact "))
        );
        let err = render_rules_with(
            &[e("*.example.com", "t.ns.svc.cluster.local")],
            RuleStyle::ExactOnly,
        )
        .unwrap_err();
        assert_eq!(err.metric_label(), "wildcard_needs_answer_auto");
    }

    #[test]
    fn a_name_on_two_targets_is_a_conflict() {
        let err = render_rules(&[e("a.com", "y.ns.svc.x"), e("a.com", "x.ns.svc.x")]).unwrap_err();
        assert!(matches!(
            err,
            CorefileError::ConflictingTargets { ref first, ref second, .. }
                if first == "x.ns.svc.x" && second == "y.ns.svc.x"
        ));
    }

    #[test]
    fn hand_built_entries_are_validated() {
        let entry = DnsEntry {
            name: HostPattern::Exact("Bad Name".into()),
            target: "t.ns.svc.cluster.local".into(),
        };
        assert!(matches!(
            render_rules(&[entry]),
            Err(CorefileError::InvalidHostname { .. })
        ));
    }

    #[test]
    fn long_groups_are_split_within_the_budget() {
        let entries: Vec<_> = (0..20_000)
            .map(|i| {
                e(
                    &format!("host-{i:05}.example.com"),
                    "t.ns.svc.cluster.local",
                )
            })
            .collect();
        let rules = render_rules(&entries).unwrap();
        assert!(rules.len() > 1);
        for r in &rules {
            let pattern = r.split(' ').nth(4).unwrap();
            assert!(
                pattern.len() <= REGEX_PATTERN_BUDGET + 64,
                "{}",
                pattern.len()
            );
            assert!(pattern.starts_with('^') && pattern.ends_with("\\.$"));
        }
        let names: usize = rules.iter().map(|r| r.matches("host-").count()).sum();
        assert_eq!(names, 20_000);
    }

    /// The entry-by-entry check and grouping, as a model of [`group`].
    fn group_model(entries: &[DnsEntry]) -> Result<Vec<(String, Vec<String>)>, CorefileError> {
        let mut owner: BTreeMap<(bool, &str), (&str, WildcardLabels)> = BTreeMap::new();
        for e in entries {
            if DnsName::parse(&e.target).map(String::from).ok().as_deref() != Some(&e.target) {
                return Err(CorefileError::InvalidTarget {
                    target: e.target.clone(),
                    reason: "must be a lowercase RFC 1123 name without trailing dot",
                });
            }
            let raw = e.name.name();
            if DnsName::parse(raw).map(String::from).ok().as_deref() != Some(raw) {
                return Err(CorefileError::InvalidHostname {
                    name: e.name.to_string(),
                    reason: "must be a lowercase RFC 1123 name without trailing dot",
                });
            }
            let labels = e.name.wildcard_labels();
            let key = (labels.is_some(), raw);
            let labels = labels.unwrap_or_default();
            match owner.get_mut(&key) {
                None => {
                    owner.insert(key, (&e.target, labels));
                }
                Some((prev, _)) if *prev != e.target => {
                    let (first, second) = if *prev < e.target.as_str() {
                        (*prev, e.target.as_str())
                    } else {
                        (e.target.as_str(), *prev)
                    };
                    return Err(CorefileError::ConflictingTargets {
                        name: e.name.to_string(),
                        first: first.to_owned(),
                        second: second.to_owned(),
                    });
                }
                Some((_, kind)) => *kind = (*kind).max(labels),
            }
        }
        let mut by_target: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for ((wildcard, name), (target, labels)) in owner {
            let kind = match (wildcard, labels) {
                (false, _) => "exact",
                (true, WildcardLabels::One) => "one",
                (true, WildcardLabels::OneOrMore) => "more",
            };
            by_target
                .entry(target)
                .or_default()
                .push(format!("{kind} {name}"));
        }
        Ok(by_target
            .into_iter()
            .map(|(t, n)| (t.to_owned(), n))
            .collect())
    }

    fn flatten(by_target: ByTarget<'_>) -> Vec<(String, Vec<String>)> {
        by_target
            .into_iter()
            .map(|(t, n)| {
                let mut all: Vec<String> = n.exact.iter().map(|x| format!("exact {x}")).collect();
                // The model lists wildcards in key order: both kinds together, by suffix.
                let mut wild: Vec<String> = n
                    .wildcards
                    .iter()
                    .map(|x| (x, "one"))
                    .chain(n.suffixes.iter().map(|x| (x, "more")))
                    .map(|(x, k)| (x.to_string(), k))
                    .collect::<BTreeMap<_, _>>()
                    .into_iter()
                    .map(|(x, k)| format!("{k} {x}"))
                    .collect();
                all.append(&mut wild);
                (t.to_owned(), all)
            })
            .collect()
    }

    fn entry_strategy() -> impl proptest::strategy::Strategy<Value = DnsEntry> {
        use proptest::prelude::*;
        (
            "(\\*\\.)?[a-c0-9]{1,2}(\\.[a-c0-9-]{1,2}){0,2}\\.(x|y)|[A-C]\\.x|a\\.\\.x",
            0..3usize,
            prop::bool::ANY,
            0..12usize,
        )
            .prop_map(|(name, target, suffix_match, bad_target)| {
                let target = if bad_target == 0 {
                    "Bad.ns.svc".to_owned()
                } else {
                    format!("t{target}.ns.svc.cluster.local")
                };
                let name = match name.strip_prefix("*.") {
                    Some(s) if suffix_match => HostPattern::WildcardSuffix(s.to_owned()),
                    Some(s) => HostPattern::Wildcard(s.to_owned()),
                    None => HostPattern::Exact(name),
                };
                DnsEntry { name, target }
            })
    }

    proptest::proptest! {
        #[test]
        fn grouping_agrees_with_the_model(entries in proptest::collection::vec(entry_strategy(), 0..40)) {
            proptest::prop_assert_eq!(group(&EntryRef::all(&entries)).map(flatten), group_model(&entries));
        }
    }
}

#[cfg(test)]
mod passthrough_tests {
    use super::*;

    fn e(name: &str, target: &str) -> DnsEntry {
        DnsEntry::new(name, target).unwrap()
    }

    fn gw(name: &str, target: &str) -> DnsEntry {
        DnsEntry::new_with(name, target, WildcardLabels::OneOrMore).unwrap()
    }

    fn p(name: &str) -> DnsEntry {
        DnsEntry::passthrough(name).unwrap()
    }

    #[test]
    fn passthrough_is_exact_only() {
        let entry = p("API.Example.com.");
        assert!(entry.is_passthrough());
        assert_eq!(entry.name, HostPattern::Exact("api.example.com".into()));
        assert!(!e("api.example.com", "t.ns.svc.x").is_passthrough());
        assert!(matches!(
            DnsEntry::passthrough("*.example.com"),
            Err(CorefileError::InvalidHostname { .. })
        ));
    }

    #[test]
    fn a_covered_passthrough_is_an_identity_rule_before_the_wildcards() {
        let rules = render_rules(&[
            e("*.example.com", "t.ns.svc.cluster.local"),
            gw("*.example.org", "t.ns.svc.cluster.local"),
            p("api.example.com"),
            p("a.b.example.org"),
            // Not covered (two labels under a one-label wildcard; no wildcard at all): no rule.
            p("a.b.example.com"),
            p("other.net"),
        ])
        .unwrap();
        assert_eq!(
            rules,
            [
                "rewrite stop name exact a.b.example.org a.b.example.org",
                "rewrite stop name exact api.example.com api.example.com",
                "rewrite stop name regex ^[^.]+\\.example\\.com\\.$ t.ns.svc.cluster.local answer auto",
                "rewrite stop name regex ^(?:[^.]+\\.)+example\\.org\\.$ t.ns.svc.cluster.local answer auto",
            ]
        );
        // Pass-throughs alone change nothing.
        assert!(render_rules(&[p("api.example.com")]).unwrap().is_empty());
        // A redirect and a pass-through of one name conflict, as two targets do.
        assert!(matches!(
            render_rules(&[e("api.example.com", "t.ns.svc.x"), p("api.example.com")]),
            Err(CorefileError::ConflictingTargets { .. })
        ));
    }

    fn template_patterns(lines: &[String]) -> Vec<&str> {
        let mut out: Vec<&str> = lines
            .iter()
            .filter_map(|l| l.trim().strip_prefix("match "))
            .collect();
        out.dedup();
        out
    }

    #[test]
    fn answer_form_cuts_passthroughs_out_of_the_wildcards() {
        let addresses: BTreeMap<String, Vec<IpAddr>> = [(
            "t.ns.svc.cluster.local".to_owned(),
            vec!["10.96.0.7".parse().unwrap()],
        )]
        .into();
        let (lines, unknown) = render_answers(
            &[
                e("*.example.com", "t.ns.svc.cluster.local"),
                e("*.example.net", "t.ns.svc.cluster.local"),
                gw("*.example.org", "t.ns.svc.cluster.local"),
                p("api.example.com"),
                p("a.b.example.org"),
            ],
            &addresses,
        )
        .unwrap();
        assert!(unknown.is_empty(), "{unknown:?}");
        let patterns = template_patterns(&lines);
        assert_eq!(patterns.len(), 3, "{patterns:?}");
        let compiled: Vec<regex::Regex> = patterns
            .iter()
            .map(|p| regex::Regex::new(p).unwrap())
            .collect();
        let answered = |name: &str| compiled.iter().any(|r| r.is_match(name));
        for name in [
            "x.example.com.",
            "ap.example.com.",
            "apix.example.com.",
            "x.example.net.",
            "api.example.net.",
            "a.example.org.",
            "b.example.org.",
            "a.b.c.example.org.",
            "x.a.b.example.org.",
            "a.bb.example.org.",
        ] {
            assert!(answered(name), "{name} must be answered");
        }
        for name in [
            "api.example.com.",
            "a.b.example.org.",
            "x.y.example.com.",
            "example.com.",
            "other.net.",
        ] {
            assert!(!answered(name), "{name} must pass through");
        }
    }

    /// Heads of one label (or several with `multi`) over a small alphabet.
    fn heads(multi: bool) -> Vec<String> {
        let labels: Vec<String> = ["a", "b", "-", "ab", "ba", "aa", "a-", "abc", "abb"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        let mut out = labels.clone();
        if multi {
            for x in &labels {
                for y in &labels {
                    out.push(format!("{x}.{y}"));
                    out.push(format!("{x}.{y}.a"));
                }
            }
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn head_except_matches_every_head_but_the_excluded(
            picks in proptest::collection::btree_set(0..200usize, 1..6),
            multi in proptest::bool::ANY,
        ) {
            let all = heads(multi);
            let mut excluded: Vec<&str> =
                picks.iter().map(|i| all[i % all.len()].as_str()).collect();
            excluded.sort_unstable();
            excluded.dedup();
            let pattern = format!("^{}$", head_except(&excluded, multi));
            let re = regex::Regex::new(&pattern).unwrap();
            for h in &all {
                proptest::prop_assert_eq!(
                    re.is_match(h),
                    !excluded.contains(&h.as_str()),
                    "{} against {}", h, pattern
                );
            }
            for bad in ["", ".", "a.", ".a", "a..b"] {
                proptest::prop_assert!(!re.is_match(bad), "{} against {}", bad, pattern);
            }
            if !multi {
                proptest::prop_assert!(!re.is_match("a.b"));
            }
        }
    }
}

#[cfg(test)]
mod flat_tests {
    use super::*;

    #[test]
    fn flat_patterns_are_sorted_whole_names() {
        let names = ["a.x.com", "ab.y.org", "b.x.com"];
        assert_eq!(
            flat_patterns(&names),
            ["^(?:a\\.x\\.com|ab\\.y\\.org|b\\.x\\.com)\\.$"]
        );
    }
}

#[cfg(test)]
mod cross_tests {
    use super::*;

    fn e(name: &str, target: &str) -> DnsEntry {
        DnsEntry::new(name, target).unwrap()
    }

    fn tenants(target: &str) -> Vec<DnsEntry> {
        let mut out = Vec::new();
        for t in 1..=3 {
            for head in ["www", "api", "app"] {
                out.push(e(&format!("{head}.t{t}.example.com"), target));
            }
        }
        out.push(e("solo.example.org", target));
        out
    }

    #[test]
    fn shared_first_labels_become_one_cross_product() {
        let rules = render_rules(&tenants("t.ns.svc.cluster.local")).unwrap();
        assert_eq!(
            rules,
            [
                "rewrite stop name regex ^(?:(?:api|app|www)\\.(?:t1\\.example\\.com|t2\\.example\\.com|t3\\.example\\.com)|solo\\.example\\.org)\\.$ t.ns.svc.cluster.local answer auto"
            ]
        );
        // A parent with another set of first labels stays flat.
        let mut entries = tenants("t.ns.svc.cluster.local");
        entries.push(e("www.t4.example.com", "t.ns.svc.cluster.local"));
        let rules = render_rules(&entries).unwrap();
        assert!(rules[0].contains("|solo\\.example\\.org|www\\.t4\\.example\\.com)"));
    }

    #[test]
    fn wildcards_join_the_exact_names_of_their_target_unless_another_target_is_under_them() {
        let t = "t.ns.svc.cluster.local";
        let mut entries = tenants(t);
        entries.push(e("*.apps.example.net", t));
        assert_eq!(
            render_rules(&entries).unwrap(),
            [
                "rewrite stop name regex ^(?:(?:api|app|www)\\.(?:t1\\.example\\.com|t2\\.example\\.com|t3\\.example\\.com)|solo\\.example\\.org|[^.]+\\.apps\\.example\\.net)\\.$ t.ns.svc.cluster.local answer auto"
            ]
        );
        // Another target's name under the wildcard: its rule must come first, so the wildcard
        // keeps a rule of its own after every exact one.
        entries.push(e("x.apps.example.net", "u.ns.svc.cluster.local"));
        let rules = render_rules(&entries).unwrap();
        assert_eq!(rules.len(), 3);
        assert!(rules[1].starts_with("rewrite stop name exact x.apps.example.net u."));
        assert!(
            rules[2].starts_with("rewrite stop name regex ^[^.]+\\.apps\\.example\\.net\\.$ t.")
        );
    }

    #[test]
    fn only_the_largest_groups_are_crossed() {
        // Ten parents, each with its own pair of first labels shared with one other parent:
        // five groups, of which the four that save most are crossed.
        let mut entries = Vec::new();
        for g in 0..5 {
            for p in 0..2 {
                for h in ["a", "b"] {
                    let parent = format!("p{p}{}.g{g}.example.com", "x".repeat(g));
                    entries.push(e(&format!("{h}{g}.{parent}"), "t.ns.svc.cluster.local"));
                }
            }
        }
        let rules = render_rules(&entries).unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].matches(")\\.(?:").count(), CROSS_GROUPS_MAX);
        assert!(rules[0].contains("|a0\\.p0\\.g0\\.example\\.com|"));
    }

    /// Each of `heads` under each of `parents`, and `*.apps.example.net`, all on `target`.
    fn products(heads: &[&str], parents: &[&str], target: &str) -> Vec<DnsEntry> {
        let mut out: Vec<DnsEntry> = parents
            .iter()
            .flat_map(|p| heads.iter().map(move |h| format!("{h}.{p}")))
            .map(|n| e(&n, target))
            .collect();
        out.push(e("*.apps.example.net", target));
        out
    }

    #[test]
    fn exact_names_for_the_one_pass_matcher_keep_a_rule_apart_from_their_wildcards() {
        let t = "t.ns.svc.cluster.local";
        let heads = ["api", "blog", "cdn", "docs", "git", "mail", "shop", "www"];
        let parents = ["t1.example.com", "t2.example.com", "t3.example.com"];
        // Eight first characters, one cross product: its own rule, then the wildcard's.
        assert_eq!(
            render_rules(&products(&heads, &parents, t)).unwrap(),
            [
                "rewrite stop name regex ^(?:api|blog|cdn|docs|git|mail|shop|www)\\.(?:t1\\.example\\.com|t2\\.example\\.com|t3\\.example\\.com)\\.$ t.ns.svc.cluster.local answer auto",
                "rewrite stop name regex ^[^.]+\\.apps\\.example\\.net\\.$ t.ns.svc.cluster.local answer auto",
            ]
        );
        // So do flat names with eight first characters.
        let flat: Vec<String> = heads
            .iter()
            .map(|h| format!("{h}.{h}.example.org"))
            .collect();
        let mut entries: Vec<DnsEntry> = flat.iter().map(|n| e(n, t)).collect();
        entries.push(e("*.apps.example.net", t));
        let rules = render_rules(&entries).unwrap();
        assert_eq!(rules.len(), 2, "{rules:?}");
        assert!(rules[0].starts_with("rewrite stop name regex ^(?:api\\.api\\.example\\.org|"));
        assert!(rules[1].starts_with("rewrite stop name regex ^[^.]+\\.apps\\."));
        // One pattern as before: seven first characters; a parent that goes on after another
        // one with a dot (not one-pass); two cross products; a pattern too long.
        let shared = |entries: &[DnsEntry]| {
            let rules = render_rules(entries).unwrap();
            rules.len() == 1 && rules[0].contains("|[^.]+\\.apps\\.example\\.net)\\.$")
        };
        assert!(shared(&products(&heads[1..], &parents, t)));
        let nested = ["t1.example.com", "t1.example.com.au", "t2.example.com"];
        assert!(shared(&products(&heads, &nested, t)));
        let mut two = products(&heads, &parents, t);
        two.extend(products(
            &["api", "www"],
            &["u1.example.com", "u2.example.com"],
            t,
        ));
        assert!(shared(&two));
        let many: Vec<String> = (0..40).map(|i| format!("tenant-{i}.example.com")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(shared(&products(&heads, &many, t)));
        // Template answers keep the one pattern.
        let ip: IpAddr = "10.96.0.9".parse().unwrap();
        let addresses = BTreeMap::from([(t.to_owned(), vec![ip])]);
        let (lines, _) = render_answers(&products(&heads, &parents, t), &addresses).unwrap();
        assert_eq!(lines.iter().filter(|l| l.contains("match ^")).count(), 3);
    }

    #[test]
    fn a_passthrough_under_the_wildcard_keeps_the_wildcard_rule_apart() {
        let t = "t.ns.svc.cluster.local";
        let mut entries = tenants(t);
        entries.push(e("*.apps.example.net", t));
        entries.push(DnsEntry::passthrough("skip.apps.example.net").unwrap());
        let rules = render_rules(&entries).unwrap();
        assert_eq!(rules.len(), 3, "{rules:?}");
        assert!(rules[0].starts_with("rewrite stop name exact skip.apps.example.net skip."));
        assert!(!rules[1].contains("[^.]+"));
        assert!(
            rules[2].starts_with("rewrite stop name regex ^[^.]+\\.apps\\.example\\.net\\.$ t.")
        );
    }

    #[test]
    fn first_labels_that_begin_alike_are_told_apart() {
        let t = "t.ns.svc.cluster.local";
        let regex = |p: &str| format!("rewrite stop name regex {p} {t} answer auto");
        // `a` and `ab` each start two names: one cross product, though `ab.` begins with `a`.
        let names = ["a.x.com", "a.y.com", "ab.x.com", "ab.y.com"];
        assert_eq!(
            render_rules(&names.map(|n| e(n, t))).unwrap(),
            [regex("^(?:a|ab)\\.(?:x\\.com|y\\.com)\\.$")]
        );
        // Only `a` starts two names, so no cross product can exist: the names stay whole.
        let names = ["a.x.com", "a.y.com", "ab.x.com", "b.y.com"];
        assert_eq!(
            render_rules(&names.map(|n| e(n, t))).unwrap(),
            [regex(
                "^(?:a\\.x\\.com|a\\.y\\.com|ab\\.x\\.com|b\\.y\\.com)\\.$"
            )]
        );
    }

    #[test]
    fn names_are_escaped_wherever_their_dots_are() {
        // Dots in every position of the eight-byte words read at once, and in the bytes after.
        for len in 0..=40 {
            for every in 1..=9 {
                for offset in 0..every {
                    let name: String = (0..len)
                        .map(|i| if i % every == offset { '.' } else { 'a' })
                        .collect();
                    let plain = name.replace('.', "\\.");
                    assert_eq!(escape(&name), plain, "{name:?}");
                    assert_eq!(escaped_len(&name), plain.len(), "{name:?}");
                }
            }
        }
    }
}
