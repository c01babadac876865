//! Rendering hostnames as CoreDNS `rewrite` rules.
//!
//! Layout (CoreDNS `rewrite` plugin syntax, RE2 regular expressions, matched against the
//! lowercased fully-qualified query name with its trailing dot):
//!
//! * a target with few exact names gets one `rewrite stop name exact NAME TARGET` per name;
//!   CoreDNS rewrites the answer back to `NAME` by itself for `exact` rules, on every version;
//! * a target with many exact names gets a few compact rules
//!   `rewrite stop name regex ^(?:(?:a|b)\.team\.example\.com|c\.example\.org)\.$ TARGET answer auto`
//!   (first labels grouped by parent domain, so 20,000 names fit in a few hundred KiB);
//! * wildcards `*.example.com` match exactly one label, as an Ingress wildcard does:
//!   `rewrite stop name regex ^[^.]+\.(?:example\.com|example\.org)\.$ TARGET answer auto`.
//!
//! `answer auto` maps the answer's owner name back to the question (CoreDNS 1.10 and later);
//! regex rules need it because the original name cannot be rebuilt from the target.
//! Exact rules come first so that an exact name beats a wildcard that also covers it.

use std::collections::BTreeMap;
use std::fmt;

use super::CorefileError;
use crate::markers::normalize_dns_name;

/// A target with at most this many exact names gets one `exact` rule per name.
pub const EXACT_RULES_MAX_PER_TARGET: usize = 8;
/// Upper bound on the length of one regex pattern; longer groups are split over several rules.
pub const REGEX_PATTERN_BUDGET: usize = 8 * 1024;

/// A hostname the cluster should resolve to a hairpin Service.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostPattern {
    /// `foo.example.com`
    Exact(String),
    /// `*.example.com`, stored as the suffix `example.com`; matches exactly one extra label.
    Wildcard(String),
}

impl HostPattern {
    /// Parse and normalise (ASCII-lowercase, no trailing dot) an RFC 1123 name, or `*.` and one.
    pub fn parse(s: &str) -> Result<Self, CorefileError> {
        let bad = |reason: &'static str| CorefileError::InvalidHostname {
            name: s.to_owned(),
            reason,
        };
        if let Some(suffix) = s.strip_prefix("*.") {
            let suffix = normalize_dns_name(suffix).map_err(|p| bad(p.as_str()))?;
            return Ok(HostPattern::Wildcard(suffix));
        }
        if s.contains('*') {
            return Err(bad(
                "a wildcard must be a whole first label: `*.example.com`",
            ));
        }
        normalize_dns_name(s)
            .map(HostPattern::Exact)
            .map_err(|p| bad(p.as_str()))
    }

    /// Whether `name` (a normalised exact name) is covered by this pattern.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            HostPattern::Exact(n) => n == name,
            HostPattern::Wildcard(suffix) => name
                .strip_suffix(suffix.as_str())
                .and_then(|head| head.strip_suffix('.'))
                .is_some_and(|label| !label.is_empty() && !label.contains('.')),
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(n) => f.write_str(n),
            HostPattern::Wildcard(s) => write!(f, "*.{s}"),
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
    /// Parse `name` and validate `target`.
    pub fn new(name: &str, target: &str) -> Result<Self, CorefileError> {
        let name = HostPattern::parse(name)?;
        let target = normalize_dns_name(target).map_err(|p| CorefileError::InvalidTarget {
            target: target.to_owned(),
            reason: p.as_str(),
        })?;
        Ok(DnsEntry { name, target })
    }
}

/// `<service>.<namespace>.svc.<cluster_domain>`.
pub fn service_fqdn(service: &str, namespace: &str, cluster_domain: &str) -> String {
    let domain = cluster_domain.trim_end_matches('.');
    format!("{service}.{namespace}.svc.{domain}")
}

/// Check the entries and sort them by target: target -> (exact names, wildcard suffixes),
/// both sorted and deduplicated. One name on two targets is a conflict.
/// Per target: (exact names, wildcard suffixes).
type ByTarget<'a> = BTreeMap<&'a str, (Vec<&'a str>, Vec<&'a str>)>;

fn group(entries: &[DnsEntry]) -> Result<ByTarget<'_>, CorefileError> {
    let mut owner: BTreeMap<&HostPattern, &str> = BTreeMap::new();
    for e in entries {
        // Entries built by hand bypass `DnsEntry::new`; check them here too.
        let target_ok = normalize_dns_name(&e.target).is_ok_and(|t| t == e.target);
        if !target_ok {
            return Err(CorefileError::InvalidTarget {
                target: e.target.clone(),
                reason: "must be a lowercase RFC 1123 name without trailing dot",
            });
        }
        let raw = match &e.name {
            HostPattern::Exact(n) | HostPattern::Wildcard(n) => n,
        };
        if normalize_dns_name(raw).ok().as_deref() != Some(raw.as_str()) {
            return Err(CorefileError::InvalidHostname {
                name: e.name.to_string(),
                reason: "must be a lowercase RFC 1123 name without trailing dot",
            });
        }
        if let Some(prev) = owner.insert(&e.name, &e.target)
            && prev != e.target
        {
            let (first, second) = if prev < e.target.as_str() {
                (prev, e.target.as_str())
            } else {
                (e.target.as_str(), prev)
            };
            return Err(CorefileError::ConflictingTargets {
                name: e.name.to_string(),
                first: first.to_owned(),
                second: second.to_owned(),
            });
        }
    }
    let mut by_target = ByTarget::new();
    // `owner` iterates in pattern order (all exact names, then wildcards), so the lists come
    // out sorted and free of duplicates.
    for (pattern, target) in owner {
        let slot = by_target.entry(target).or_default();
        match pattern {
            HostPattern::Exact(n) => slot.0.push(n),
            HostPattern::Wildcard(s) => slot.1.push(s),
        }
    }
    Ok(by_target)
}

/// RE2 escaping for a DNS name (only `.` can occur).
fn escape(name: &str) -> String {
    name.replace('.', "\\.")
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

/// The rewrite rules for `entries`, one directive per line, without indentation or line
/// terminators. Deterministic: the order of `entries` does not matter.
pub fn render_rules_with(
    entries: &[DnsEntry],
    style: RuleStyle,
) -> Result<Vec<String>, CorefileError> {
    let by_target = group(entries)?;
    let mut exact_rules = Vec::new();
    let mut wildcard_rules = Vec::new();
    for (target, (exact, wildcards)) in &by_target {
        if style == RuleStyle::ExactOnly
            && let Some(suffix) = wildcards.first()
        {
            return Err(CorefileError::WildcardNeedsAnswerAuto {
                name: format!("*.{suffix}"),
            });
        }
        if exact.len() <= EXACT_RULES_MAX_PER_TARGET || style == RuleStyle::ExactOnly {
            for name in exact {
                exact_rules.push(format!("rewrite stop name exact {name} {target}"));
            }
        } else {
            for pattern in exact_patterns(exact) {
                exact_rules.push(format!(
                    "rewrite stop name regex {pattern} {target} answer auto"
                ));
            }
        }
        for pattern in wildcard_patterns(wildcards) {
            wildcard_rules.push(format!(
                "rewrite stop name regex {pattern} {target} answer auto"
            ));
        }
    }
    exact_rules.extend(wildcard_rules);
    Ok(exact_rules)
}

/// Split a list of alternatives into `^(?:a|b|...)SUFFIX$` patterns within the budget.
fn chunked(alternatives: Vec<String>, prefix: &str, suffix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Vec<String> = Vec::new();
    let mut len = 0;
    for alt in alternatives {
        if !current.is_empty() && len + alt.len() + 1 > REGEX_PATTERN_BUDGET {
            out.push(join_pattern(&current, prefix, suffix));
            current.clear();
            len = 0;
        }
        len += alt.len() + 1;
        current.push(alt);
    }
    if !current.is_empty() {
        out.push(join_pattern(&current, prefix, suffix));
    }
    out
}

fn join_pattern(alts: &[String], prefix: &str, suffix: &str) -> String {
    if alts.len() == 1 {
        format!("^{prefix}{}{suffix}$", alts[0])
    } else {
        format!("^{prefix}(?:{}){suffix}$", alts.join("|"))
    }
}

/// Exact names grouped by parent domain: `(?:a|b)\.team\.example\.com`. Names that are alone
/// under their parent are grouped one level up instead, so that
/// `svc-1.customer-1.example.com` and `svc-2.customer-2.example.com` share `\.example\.com`.
fn exact_patterns(names: &[&str]) -> Vec<String> {
    let mut by_parent: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for name in names {
        let parent = name.split_once('.').map_or("", |(_, parent)| parent);
        by_parent.entry(parent).or_default().push(name);
    }
    // suffix -> escaped heads (the part of each name before the suffix)
    let mut groups: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (parent, members) in by_parent {
        let suffix = if members.len() == 1 {
            parent.split_once('.').map_or("", |(_, grand)| grand)
        } else {
            parent
        };
        let heads = groups.entry(suffix).or_default();
        for name in members {
            let head = if suffix.is_empty() {
                name
            } else {
                &name[..name.len() - suffix.len() - 1]
            };
            heads.push(escape(head));
        }
    }
    let mut alternatives = Vec::new();
    for (suffix, mut heads) in groups {
        heads.sort_unstable();
        let suffix = if suffix.is_empty() {
            String::new()
        } else {
            format!("\\.{}", escape(suffix))
        };
        // A group too long for one rule is split so that every alternative fits the budget.
        let mut group: Vec<String> = Vec::new();
        let mut len = suffix.len() + 8;
        for head in heads {
            if !group.is_empty() && len + head.len() + 1 > REGEX_PATTERN_BUDGET {
                alternatives.push(alternative(&group, &suffix));
                group.clear();
                len = suffix.len() + 8;
            }
            len += head.len() + 1;
            group.push(head);
        }
        alternatives.push(alternative(&group, &suffix));
    }
    chunked(alternatives, "", "\\.")
}

fn alternative(heads: &[String], suffix: &str) -> String {
    if heads.len() == 1 {
        format!("{}{suffix}", heads[0])
    } else {
        format!("(?:{}){suffix}", heads.join("|"))
    }
}

fn wildcard_patterns(suffixes: &[&str]) -> Vec<String> {
    let alternatives = suffixes.iter().map(|s| escape(s)).collect();
    chunked(alternatives, "[^.]+\\.", "\\.")
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
    fn many_exact_names_are_grouped_by_parent() {
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
                "rewrite stop name regex ^(?:solo\\.example\\.org|(?:app-0|app-1|app-2|app-3|app-4|app-5|app-6|app-7|app-8|app-9)\\.team\\.example\\.com)\\.$ t.ns.svc.cluster.local answer auto"
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
        let entries: Vec<_> = (0..3000)
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
        assert_eq!(names, 3000);
    }
}
