//! What the generated `rewrite` rules mean, checked with an independent evaluator.
//!
//! The rules use a tiny subset of RE2 (Go `regexp`) syntax: `^`, `$`, literals `[a-z0-9-]`,
//! `\.`, `(?:...|...)`, a group repeated with `+` and `[^.]+`. The parser below accepts
//! exactly that subset (so any other metacharacter, an unescaped dot or a missing anchor fails
//! the test) and evaluates the rules the way CoreDNS does: the first rule that matches the
//! lowercased FQDN (with its trailing dot) decides the target.

use std::collections::BTreeMap;

use hairpin_planner::corefile::{
    self, CONFIGMAP_MAX_BYTES, DnsEntry, HostPattern, REGEX_PATTERN_BUDGET, render_rules,
};
use hairpin_planner::name::WildcardLabels;
use proptest::prelude::*;

#[derive(Debug)]
enum Node {
    Lit(u8),
    Dot,
    /// `[^.]+`
    Label,
    Group(Vec<Vec<Node>>),
    /// `(?:...)+`
    Repeat(Vec<Vec<Node>>),
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn alt(&mut self) -> Vec<Vec<Node>> {
        let mut alts = vec![self.concat()];
        while self.s.get(self.i) == Some(&b'|') {
            self.i += 1;
            alts.push(self.concat());
        }
        alts
    }

    fn concat(&mut self) -> Vec<Node> {
        let mut out = Vec::new();
        loop {
            let rest = &self.s[self.i..];
            if rest.starts_with(b"(?:") {
                self.i += 3;
                let inner = self.alt();
                assert_eq!(self.s.get(self.i), Some(&b')'), "unclosed group");
                self.i += 1;
                if self.s.get(self.i) == Some(&b'+') {
                    self.i += 1;
                    out.push(Node::Repeat(inner));
                } else {
                    out.push(Node::Group(inner));
                }
            } else if rest.starts_with(b"[^.]+") {
                self.i += 5;
                out.push(Node::Label);
            } else if rest.starts_with(b"\\.") {
                self.i += 2;
                out.push(Node::Dot);
            } else if let Some(&c) = rest.first()
                && (c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
            {
                self.i += 1;
                out.push(Node::Lit(c));
            } else if rest.is_empty() || rest[0] == b'|' || rest[0] == b')' || rest == b"$" {
                return out;
            } else {
                panic!(
                    "unexpected syntax at {:?}",
                    String::from_utf8_lossy(&rest[..rest.len().min(20)])
                );
            }
        }
    }
}

fn parse_pattern(p: &str) -> Vec<Vec<Node>> {
    let body = p
        .strip_prefix('^')
        .and_then(|p| p.strip_suffix('$'))
        .expect("anchored with ^ and $");
    let mut parser = Parser {
        s: body.as_bytes(),
        i: 0,
    };
    let alts = parser.alt();
    assert_eq!(parser.i, body.len(), "trailing syntax in {p}");
    alts
}

/// End positions reachable after matching `seq` from each position in `starts`.
fn run(seq: &[Node], s: &[u8], starts: Vec<usize>) -> Vec<usize> {
    let mut pos = starts;
    for node in seq {
        let mut next = Vec::new();
        for &p in &pos {
            match node {
                Node::Lit(c) => {
                    if s.get(p) == Some(c) {
                        next.push(p + 1);
                    }
                }
                Node::Dot => {
                    if s.get(p) == Some(&b'.') {
                        next.push(p + 1);
                    }
                }
                Node::Label => {
                    let mut q = p;
                    while q < s.len() && s[q] != b'.' {
                        q += 1;
                        next.push(q);
                    }
                }
                Node::Group(alts) => {
                    for a in alts {
                        next.extend(run(a, s, vec![p]));
                    }
                }
                Node::Repeat(alts) => {
                    // One pass, then as many more as keep reaching new positions.
                    let mut frontier = vec![p];
                    loop {
                        let mut reached: Vec<usize> = alts
                            .iter()
                            .flat_map(|a| run(a, s, frontier.clone()))
                            .filter(|q| !next.contains(q))
                            .collect();
                        reached.sort_unstable();
                        reached.dedup();
                        if reached.is_empty() {
                            break;
                        }
                        next.extend(&reached);
                        frontier = reached;
                    }
                }
            }
        }
        next.sort_unstable();
        next.dedup();
        if next.is_empty() {
            return next;
        }
        pos = next;
    }
    pos
}

enum Rule {
    Exact {
        name: String,
        target: String,
    },
    Regex {
        alts: Vec<Vec<Node>>,
        target: String,
    },
}

fn parse_rules(rules: &[String]) -> Vec<Rule> {
    rules
        .iter()
        .map(|r| {
            let t: Vec<&str> = r.split(' ').collect();
            match t.as_slice() {
                ["rewrite", "stop", "name", "exact", name, target] => Rule::Exact {
                    name: format!("{name}."),
                    target: (*target).to_owned(),
                },
                [
                    "rewrite",
                    "stop",
                    "name",
                    "regex",
                    pattern,
                    target,
                    "answer",
                    "auto",
                ] => {
                    assert!(pattern.len() <= REGEX_PATTERN_BUDGET + 64);
                    Rule::Regex {
                        alts: parse_pattern(pattern),
                        target: (*target).to_owned(),
                    }
                }
                _ => panic!("unexpected rule shape: {r}"),
            }
        })
        .collect()
}

/// The target CoreDNS would rewrite `fqdn` to, if any.
fn resolve<'a>(rules: &'a [Rule], fqdn: &str) -> Option<&'a str> {
    rules.iter().find_map(|r| match r {
        Rule::Exact { name, target } => (name == fqdn).then_some(target.as_str()),
        Rule::Regex { alts, target } => {
            let s = fqdn.as_bytes();
            alts.iter()
                .any(|a| run(a, s, vec![0]).contains(&s.len()))
                .then_some(target.as_str())
        }
    })
}

/// What the entries say `name` should resolve to: exact first, then the covering wildcard with
/// the longest suffix (the most specific one).
fn expected<'a>(entries: &'a [DnsEntry], name: &str) -> Option<&'a str> {
    entries
        .iter()
        .find(|e| e.name == HostPattern::Exact(name.to_owned()))
        .or_else(|| {
            entries
                .iter()
                .filter(|e| e.name.wildcard_labels().is_some() && e.name.matches(name))
                .max_by_key(|e| e.name.name().len())
        })
        .map(|e| e.target.as_str())
}

const TARGETS: [&str; 3] = [
    "hairpin-a.hairpin.svc.cluster.local",
    "hairpin-b.hairpin.svc.cluster.local",
    "hairpin-c.hairpin.svc.cluster.local",
];

fn label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,4}[a-z0-9])?"
}

fn domain() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "example.com",
        "team-1.example.com",
        "a.team-1.example.com",
        "example.org",
        "io",
        "",
    ])
    .prop_map(str::to_owned)
}

fn name() -> impl Strategy<Value = String> {
    (label(), domain()).prop_map(|(l, d)| if d.is_empty() { l } else { format!("{l}.{d}") })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Every name resolves to its own target, exact names win over wildcards, the wildcard
    /// with the longest suffix wins over the others, and names that are not in the set (or one
    /// label too deep for a one-label wildcard) are left alone.
    #[test]
    fn rules_resolve_exactly_the_entries(
        exact in prop::collection::btree_map(name(), 0..TARGETS.len(), 0..40),
        wild in prop::collection::btree_map(
            domain().prop_filter("non-empty", |d| !d.is_empty()),
            (0..TARGETS.len(), any::<bool>()),
            0..4,
        ),
        probes in prop::collection::vec(name(), 0..30),
    ) {
        check_resolution(&exact, &wild, &probes)?;
    }

    /// The same with first labels from a short list, so that parent domains share their sets
    /// of first labels (the cross-product groups of the exact names), and wildcards on the
    /// same target as the exact names (one rule for both where no other target's name is
    /// under the wildcard).
    #[test]
    fn shared_first_labels_resolve_exactly_the_entries(
        exact in prop::collection::btree_map(shared_name(), 0..2usize, 0..60),
        wild in prop::collection::btree_map(
            prop::sample::select(SHARED_DOMAINS.to_vec()).prop_map(str::to_owned),
            (0..2usize, any::<bool>()),
            0..4,
        ),
        probes in prop::collection::vec(shared_name(), 0..30),
    ) {
        check_resolution(&exact, &wild, &probes)?;
    }
}

const SHARED_DOMAINS: [&str; 6] = [
    "t1.example.com",
    "t2.example.com",
    "t3.example.com",
    "t2.example.org",
    "example.com",
    "io",
];

fn shared_name() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["api", "app", "www", "a", "ab"]),
        prop::sample::select(SHARED_DOMAINS.to_vec()),
    )
        .prop_map(|(l, d)| format!("{l}.{d}"))
}

fn check_resolution(
    exact: &BTreeMap<String, usize>,
    wild: &BTreeMap<String, (usize, bool)>,
    probes: &[String],
) -> Result<(), TestCaseError> {
    let mut entries: Vec<DnsEntry> = exact
        .iter()
        .map(|(n, t)| DnsEntry::new(n, TARGETS[*t]).unwrap())
        .collect();
    entries.extend(wild.iter().map(|(d, (t, suffix))| {
        let labels = if *suffix {
            WildcardLabels::OneOrMore
        } else {
            WildcardLabels::One
        };
        DnsEntry::new_with(&format!("*.{d}"), TARGETS[*t], labels).unwrap()
    }));
    let rules = parse_rules(&render_rules(&entries).unwrap());
    for name in exact.keys().chain(probes) {
        let deeper = format!("x.{name}");
        let deepest = format!("y.x.{name}");
        for candidate in [name.as_str(), deeper.as_str(), deepest.as_str()] {
            prop_assert_eq!(
                resolve(&rules, &format!("{candidate}.")),
                expected(&entries, candidate),
                "{}",
                candidate
            );
        }
    }
    if wild.is_empty() {
        let legacy = corefile::render_rules_with(&entries, corefile::RuleStyle::ExactOnly).unwrap();
        let legacy = parse_rules(&legacy);
        for name in exact.keys().chain(probes) {
            prop_assert_eq!(
                resolve(&legacy, &format!("{name}.")),
                expected(&entries, name)
            );
        }
    }
    for d in wild.keys() {
        prop_assert_eq!(resolve(&rules, &format!("{d}.")), expected(&entries, d));
        for head in ["w", "v.w", "u.v.w"] {
            let name = format!("{head}.{d}");
            prop_assert_eq!(
                resolve(&rules, &format!("{name}.")),
                expected(&entries, &name),
                "{}",
                name
            );
        }
    }
    Ok(())
}

/// The rendered regex text itself: an Ingress wildcard covers one label, a Gateway API
/// wildcard one or more, neither its bare suffix, and the most specific rule wins.
#[test]
fn wildcard_kinds_resolve_as_their_specs_say() {
    let [a, b, c] = TARGETS;
    let gateway = |name: &str, target: &str| {
        DnsEntry::new_with(name, target, WildcardLabels::OneOrMore).unwrap()
    };
    let entries = [
        DnsEntry::new("*.ingress.example.com", a).unwrap(),
        gateway("*.example.org", b),
        gateway("*.team.example.org", c),
        DnsEntry::new("*.x.team.example.org", a).unwrap(),
        DnsEntry::new("exact.team.example.org", a).unwrap(),
    ];
    let text = render_rules(&entries).unwrap();
    let rules = parse_rules(&text);
    let cases = [
        ("a.ingress.example.com.", Some(a)),
        ("a.b.ingress.example.com.", None),
        ("ingress.example.com.", None),
        ("a.example.org.", Some(b)),
        ("a.b.example.org.", Some(b)),
        ("a.b.c.d.example.org.", Some(b)),
        ("example.org.", None),
        ("aexample.org.", None),
        ("a.example.org.evil.", None),
        ("team.example.org.", Some(b)),
        ("a.team.example.org.", Some(c)),
        ("a.b.team.example.org.", Some(c)),
        ("exact.team.example.org.", Some(a)),
        ("y.x.team.example.org.", Some(a)),
        ("z.y.x.team.example.org.", Some(c)),
    ];
    for (name, target) in cases {
        assert_eq!(resolve(&rules, name), target, "{name} in {text:#?}");
        let bare = name.trim_end_matches('.');
        assert_eq!(expected(&entries, bare), target, "{name}");
    }
}

/// 20,000 hostnames over 10,000 Ingresses (two hosts each, 100 team subdomains, four load
/// balancers), plus a wildcard per team: the Corefile block must stay below the 1 MiB
/// ConfigMap limit with room to spare.
#[test]
fn twenty_thousand_hostnames_fit_in_a_configmap() {
    let targets: Vec<String> = (1..=4)
        .map(|i| corefile::service_fqdn(&format!("hairpin-lb-{i}"), "hairpin", "cluster.local"))
        .collect();
    let mut entries = Vec::new();
    for ingress in 0..10_000 {
        let team = ingress % 100;
        let target = &targets[ingress % targets.len()];
        for app in ["app", "api"] {
            let name = format!("{app}-{ingress}.team-{team:02}.example.com");
            entries.push(DnsEntry::new(&name, target).unwrap());
        }
    }
    assert_eq!(entries.len(), 20_000);
    let override_text = corefile::render_override(&entries).unwrap();
    let kubeadm = include_str!("golden/corefiles/kubeadm.Corefile");
    let edit = corefile::apply(kubeadm, &entries).unwrap();
    let block = edit.text.len() - kubeadm.len();
    println!(
        "20,000 hostnames: Corefile block {block} bytes ({:.1} bytes/name), override {} bytes, {} rules",
        block as f64 / 20_000.0,
        override_text.len(),
        override_text.lines().count() - 1
    );
    // Whole names (about 34 bytes each here, escaped, in rewrite form): room for another
    // 25% of names under the limit.
    assert!(block < CONFIGMAP_MAX_BYTES * 3 / 4, "{block} bytes");
    assert!(override_text.len() < CONFIGMAP_MAX_BYTES * 3 / 4);

    // Names with nothing in common but the registrable domain (one name per customer).
    let spread: Vec<DnsEntry> = (0..20_000)
        .map(|i| DnsEntry::new(&format!("shop.customer-{i}.example.com"), &targets[0]).unwrap())
        .collect();
    let spread_text = corefile::render_override(&spread).unwrap();
    println!(
        "20,000 hostnames, one per subdomain: override {} bytes",
        spread_text.len()
    );
    assert!(spread_text.len() < CONFIGMAP_MAX_BYTES * 3 / 4);

    // Semantics on a sample (the evaluator is slow in debug builds).
    let rules: Vec<String> = override_text.lines().skip(1).map(str::to_owned).collect();
    let rules = parse_rules(&rules);
    let by_name: BTreeMap<String, &str> = entries
        .iter()
        .map(|e| (e.name.to_string(), e.target.as_str()))
        .collect();
    for (name, target) in by_name.iter().step_by(199) {
        assert_eq!(
            resolve(&rules, &format!("{name}.")),
            Some(*target),
            "{name}"
        );
    }
    for miss in [
        "app-10000.team-00.example.com.",
        "app-1.team-01.example.co.",
        "x.app-1.team-01.example.com.",
        "team-01.example.com.",
    ] {
        assert_eq!(resolve(&rules, miss), None, "{miss}");
    }
}
