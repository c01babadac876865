//! The lines hairpin writes into the cluster's DNS ConfigMaps, as data: the one list that the
//! renderers are tested against (every line they write between the markers, and in hairpin's
//! own `coredns-custom` key, has one of these shapes) and that the API server's admission
//! policy `<release>-dns-block-only` is generated from (`charts/hairpin/templates/_dns-policy.tpl`,
//! rewritten by `HAIRPIN_BLESS=1 cargo test -p hairpin-planner --test dns_policy`, which fails
//! when the chart has drifted from this file).
//!
//! A shape is a line's whitespace-trimmed text split on single spaces into tokens: literal
//! words, and the few variable parts ([`Token`]). Adding a shape the planner writes is one
//! entry in [`line_shapes`] (or [`rule_shapes`] for a rule also written into hairpin's own
//! `coredns-custom` key), then a bless of the chart.
//!
//! The policy checks what the API server can check within its CEL cost budget on a 1 MiB
//! ConfigMap: a line's words, that every target is one of hairpin's Services (its namespace,
//! a configured cluster domain), that every address answered lies in the configured Service
//! CIDRs, and that a pattern is anchored (`^...\.$`). It does not parse a regex pattern: that
//! would cost the API server about as much per byte as the pattern's regex is long, and a
//! pattern is bounded by what it may redirect to (hairpin's own Services).

use std::fmt::Write as _;
use std::net::IpAddr;

use super::rules::NODATA_SOA;
use super::{ANSWER_TTL, OVERRIDE_HEADER};
use crate::markers::{BEGIN_PREFIX, END_MARKER};

/// An IP family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

/// One space-separated word of a line shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// This exact word.
    Lit(String),
    /// A hostname: any word. Not parsed, as a regex pattern is not (the rule redirects only
    /// to hairpin's own Services); a character check cost the API server 15 % of its budget
    /// per rule line.
    Name,
    /// The same word as the token at this index (a pass-through rewrites a name to itself).
    Same(usize),
    /// One of hairpin's Services: one DNS label, then one of the policy's suffixes
    /// `.<namespace>.svc.<cluster domain>`.
    Service,
    /// A cluster domain of the policy with its dots, `.<cluster domain>.` (the bypass that
    /// lets cluster names skip hairpin's rules).
    Domain,
    /// An RE2 pattern over the query name with its trailing dot: `^` ... `\.$`.
    Pattern,
    /// An address of `family` within the policy's CIDRs, closing a quoted record (`10.96.0.7"`).
    QuotedIp(Family),
}

/// One kind of line hairpin writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineShape {
    /// A short name, for the docs and the tests.
    pub name: &'static str,
    /// Its words.
    pub tokens: Vec<Token>,
}

impl LineShape {
    /// Whether every word is literal (the shape is one exact line).
    pub fn is_literal(&self) -> bool {
        self.tokens.iter().all(|t| matches!(t, Token::Lit(_)))
    }

    fn new(name: &'static str, tokens: Vec<Token>) -> Self {
        LineShape { name, tokens }
    }

    /// The shape written out, variable parts in capitals (`rewrite stop name exact NAME
    /// SERVICE`).
    pub fn display(&self) -> String {
        let words: Vec<String> = self
            .tokens
            .iter()
            .map(|t| match t {
                Token::Lit(s) => s.clone(),
                Token::Name | Token::Same(_) => "NAME".to_owned(),
                Token::Service => "SERVICE.NAMESPACE.svc.CLUSTER_DOMAIN".to_owned(),
                Token::Domain => ".CLUSTER_DOMAIN.".to_owned(),
                Token::Pattern => "^PATTERN\\.$".to_owned(),
                Token::QuotedIp(Family::V4) => "IPV4\"".to_owned(),
                Token::QuotedIp(Family::V6) => "IPV6\"".to_owned(),
            })
            .collect();
        words.join(" ")
    }
}

fn words(text: &str) -> Vec<Token> {
    text.split(' ').map(|w| Token::Lit(w.to_owned())).collect()
}

fn with(text: &str, more: impl IntoIterator<Item = Token>) -> Vec<Token> {
    let mut tokens = words(text);
    tokens.extend(more);
    tokens
}

/// The rules hairpin writes in a server block whose `kubernetes` plugin resolves the rewritten
/// name, and in its own `coredns-custom` key ([`super::render_rules_with`]).
pub fn rule_shapes() -> Vec<LineShape> {
    vec![
        LineShape::new(
            "rewrite exact",
            with("rewrite stop name exact", [Token::Name, Token::Service]),
        ),
        LineShape::new(
            "rewrite pass-through",
            with("rewrite stop name exact", [Token::Name, Token::Same(4)]),
        ),
        LineShape::new(
            "rewrite regex",
            with(
                "rewrite stop name regex",
                [Token::Pattern, Token::Service, lit("answer"), lit("auto")],
            ),
        ),
    ]
}

fn lit(word: &str) -> Token {
    Token::Lit(word.to_owned())
}

/// Every line hairpin writes between its markers: [`rule_shapes`], and the `template` answers
/// of server blocks that cannot resolve a rewritten name ([`super::render_answers`]).
pub fn line_shapes() -> Vec<LineShape> {
    let mut shapes = rule_shapes();
    shapes.push(LineShape::new(
        "rewrite cluster bypass",
        with("rewrite stop name suffix", [Token::Domain, Token::Same(4)]),
    ));
    for qtype in ["A", "AAAA", "ANY"] {
        shapes.push(LineShape::new(
            "template open",
            words(&format!("template IN {qtype} {{")),
        ));
    }
    shapes.push(LineShape::new(
        "template match",
        vec![lit("match"), Token::Pattern],
    ));
    for (qtype, family) in [("A", Family::V4), ("AAAA", Family::V6)] {
        shapes.push(LineShape::new(
            "template answer",
            with(
                &format!("answer \"{{{{ .Name }}}} {ANSWER_TTL} IN {qtype}"),
                [Token::QuotedIp(family)],
            ),
        ));
    }
    shapes.push(LineShape::new(
        "template authority",
        words(&format!("authority \"{NODATA_SOA}\"")),
    ));
    shapes.push(LineShape::new("template fallthrough", words("fallthrough")));
    shapes.push(LineShape::new("template close", words("}")));
    shapes
}

/// What the policy is given: hairpin's Service suffixes (`.<namespace>.svc.<domain>`) and the
/// CIDRs its answers may name. For [`has_shape`], the Rust twin of the policy's check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeContext {
    pub service_suffixes: Vec<String>,
    pub domain_suffixes: Vec<String>,
    pub cidrs: Vec<(IpAddr, u8)>,
}

impl ShapeContext {
    /// hairpin's Services in `namespace` for each of `domains`, answers in `cidrs`
    /// (`10.96.0.0/12`); a CIDR that does not parse is left out.
    pub fn new(namespace: &str, domains: &[&str], cidrs: &[&str]) -> Self {
        ShapeContext {
            service_suffixes: domains
                .iter()
                .map(|d| format!(".{namespace}.svc.{d}"))
                .collect(),
            domain_suffixes: domains.iter().map(|d| format!(".{d}.")).collect(),
            cidrs: cidrs
                .iter()
                .filter_map(|c| {
                    let (ip, len) = c.split_once('/')?;
                    Some((ip.parse().ok()?, len.parse().ok()?))
                })
                .collect(),
        }
    }

    fn in_cidrs(&self, ip: IpAddr) -> bool {
        self.cidrs.iter().any(|&(net, len)| match (net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(&n.octets(), &a.octets(), len),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(&n.octets(), &a.octets(), len),
            _ => false,
        })
    }
}

fn prefix_eq(a: &[u8], b: &[u8], len: u8) -> bool {
    let len = usize::from(len);
    if len > a.len() * 8 {
        return false;
    }
    let (whole, bits) = (len / 8, len % 8);
    a[..whole] == b[..whole]
        && (bits == 0 || {
            let mask = !(0xffu8 >> bits);
            a[whole] & mask == b[whole] & mask
        })
}

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

impl Token {
    /// Whether `word` (at this token's place in `words`) fits: the Rust twin of [`Token::cel`].
    fn accepts(&self, word: &str, words: &[&str], ctx: &ShapeContext) -> bool {
        match self {
            Token::Lit(s) => word == s,
            Token::Name => !word.is_empty(),
            Token::Same(i) => words.get(*i) == Some(&word),
            Token::Service => ctx
                .service_suffixes
                .iter()
                .any(|s| word.strip_suffix(s.as_str()).is_some_and(is_label)),
            Token::Domain => ctx.domain_suffixes.iter().any(|d| d == word),
            Token::Pattern => word.starts_with('^') && word.ends_with("\\.$"),
            Token::QuotedIp(family) => word
                .strip_suffix('"')
                .and_then(|ip| ip.parse::<IpAddr>().ok())
                .is_some_and(|ip| (ip.is_ipv4() == (*family == Family::V4)) && ctx.in_cidrs(ip)),
        }
    }

    /// The CEL test of token `i` of the list `t`. Literal words are written with `{` and `}`
    /// escaped (`\x7b`), so that the text passes through Helm's templates unchanged.
    fn cel(&self, i: usize) -> String {
        let w = format!("t[{i}]");
        match self {
            Token::Lit(s) => format!("{w} == {}", cel_string(s)),
            Token::Name => format!("{w} != ''"),
            Token::Same(j) => format!("{w} == t[{j}]"),
            Token::Service => format!(
                "variables.serviceSuffixes.exists(s, {w}.endsWith(s) && \
                 {w}.substring(0, size({w}) - size(s)).matches('^[-a-z0-9]+$'))"
            ),
            Token::Domain => format!("{w} in variables.domainSuffixes"),
            Token::Pattern => format!("{w}.startsWith('^') && {w}.endsWith('\\\\.$')"),
            Token::QuotedIp(family) => {
                let n = match family {
                    Family::V4 => 4,
                    Family::V6 => 6,
                };
                format!(
                    "{w}.endsWith('\"') && [{w}.substring(0, size({w}) - 1)].all(a, isIP(a) && \
                     ip(a).family() == {n} && variables.cidrs.exists(c, cidr(c).containsIP(a)))"
                )
            }
        }
    }
}

/// A CEL single-quoted string of `s`: `\` and `'` escaped, `{` and `}` as `\x7b` and `\x7d`.
fn cel_string(s: &str) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '{' => out.push_str("\\x7b"),
            '}' => out.push_str("\\x7d"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Whether `line` (a line as written, indentation and `\r` included) has one of `shapes`.
pub fn has_shape(line: &str, shapes: &[LineShape], ctx: &ShapeContext) -> bool {
    let words: Vec<&str> = line.trim().split(' ').collect();
    shapes.iter().any(|shape| {
        shape.tokens.len() == words.len()
            && shape
                .tokens
                .iter()
                .zip(&words)
                .all(|(t, w)| t.accepts(w, &words, ctx))
    })
}

/// The CEL test of the token list `t` (a line split on spaces) against the shapes of
/// `shapes` that have a variable part (the literal ones are looked up in
/// [`cel_literal_lines`]).
fn cel_shapes(shapes: &[LineShape]) -> String {
    shapes
        .iter()
        .filter(|shape| !shape.is_literal())
        .map(|shape| {
            let mut test = format!("(size(t) == {}", shape.tokens.len());
            for (i, token) in shape.tokens.iter().enumerate() {
                let _ = write!(test, " && {}", token.cel(i));
            }
            test.push(')');
            test
        })
        .collect::<Vec<_>>()
        .join("\n    || ")
}

/// CEL: a map whose keys are the whole lines of the literal [`line_shapes`] (`fallthrough`,
/// `}`, `template IN A {`...), for the policy's variable `literalLines`: one lookup per line
/// instead of a test per shape (the API server charges every line of a block).
pub fn cel_literal_lines() -> String {
    let keys: Vec<String> = line_shapes()
        .iter()
        .filter(|shape| shape.is_literal())
        .map(|shape| {
            let words: Vec<&str> = shape
                .tokens
                .iter()
                .filter_map(|t| match t {
                    Token::Lit(w) => Some(w.as_str()),
                    _ => None,
                })
                .collect();
            format!("{}: true", cel_string(&words.join(" ")))
        })
        .collect();
    format!("{{{}}}", keys.join(", "))
}

/// CEL: the text `x` split at hairpin's begin markers, with a sentinel end marker before the
/// first piece and a sentinel begin marker after the last (so that every piece but the empty
/// last one starts inside a block, or at the sentinel, and runs to the next begin marker).
fn pieces(x: &str) -> String {
    let (begin, end) = (cel_string(BEGIN_PREFIX), cel_string(END_MARKER));
    format!("({end} + '\\n' + {x} + '\\n' + {begin}).split({begin})")
}

/// CEL: the text `x` with hairpin's marked blocks cut out, as whole lines (the begin marker's
/// indentation, the block, the end marker's line). Text before a begin marker on its line that
/// is not whitespace is kept (CoreDNS would read it). An empty rest is never searched: CEL's
/// `lastIndexOf` fails on an empty string.
pub fn cel_cut(x: &str) -> String {
    let end = cel_string(END_MARKER);
    format!(
        "{pieces}.map(p, p == '' ? '' : [p.indexOf({end})].map(e, e < 0 ? p : \
         [[p.substring(e)].map(q, q.substring(q.indexOf('\\n') + 1))[0]].map(r, \
         r == '' || r.substring(r.lastIndexOf('\\n') + 1).trim() != '' ? r : \
         r.substring(0, r.lastIndexOf('\\n') + 1))[0])[0]).join('')",
        pieces = pieces(x),
    )
}

/// CEL: every block of the text `x` is closed, and each of its lines (after the begin marker's
/// line, which is a comment) is blank or has one of [`line_shapes`] (the literal ones looked up
/// in the policy's variable `literalLines`, [`cel_literal_lines`]). Each line is trimmed and
/// split once: the API server charges a block per line, and a 1 MiB block of short lines must
/// stay within its budget.
pub fn cel_block_lines(x: &str) -> String {
    let end = cel_string(END_MARKER);
    format!(
        "{pieces}.all(p, p == '' || [p.indexOf({end})].all(e, e == 0 || (e > 0 && \
         [p.indexOf('\\n')].all(n, n >= 0 && n < e && \
         p.substring(n + 1, e).split('\\n').all(l, [l.trim()].all(w, w == '' || \
         w in variables.literalLines || [w.split(' ')].all(t,\n    {shapes})))))))",
        pieces = pieces(x),
        shapes = cel_shapes(&line_shapes()),
    )
}

/// CEL: hairpin's own `coredns-custom` key `x` holds its header and [`rule_shapes`] only.
pub fn cel_own_key(x: &str) -> String {
    format!(
        "{x}.split('\\n').all(l, l == '' || l == {header} || [l.split(' ')].all(t,\n    {shapes}))",
        header = cel_string(OVERRIDE_HEADER.trim_end()),
        shapes = cel_shapes(&rule_shapes()),
    )
}

/// The chart's `_dns-policy.tpl`, as named templates: the policy's variable `literalLines`
/// ([`cel_literal_lines`]) and its three validations, over its variables `old`, `new` (the
/// ConfigMap's data before and after), `custom` and `ownStem` (hairpin's own key),
/// `serviceSuffixes`, `domainSuffixes` and `cidrs`.
pub fn chart_helpers() -> String {
    let own = "(variables.custom && k.startsWith(variables.ownStem) && \
               !k.substring(size(variables.ownStem)).contains('.') && !k.endsWith('.server'))";
    let old_k = "(k in variables.old ? variables.old[k] : '')";
    let unchanged = "(k in variables.old && variables.new[k] == variables.old[k])";
    let outside = format!(
        "variables.new.all(k, {unchanged} || {own} ||\n  {cut_new} ==\n  {cut_old})\n\
         && variables.old.all(k, k in variables.new || {own} ||\n  {cut_gone} == '')",
        cut_new = cel_cut("variables.new[k]"),
        cut_old = cel_cut(old_k),
        cut_gone = cel_cut("variables.old[k]"),
    );
    let blocks = format!(
        "variables.new.all(k, {unchanged} || {own} ||\n  {})",
        cel_block_lines("variables.new[k]")
    );
    let own_key = format!(
        "variables.new.all(k, {unchanged} || !{own} ||\n  {})",
        cel_own_key("variables.new[k]")
    );
    let mut out = String::from(
        "{{- /* GENERATED from crates/planner/src/corefile/shapes.rs: do not edit. Rewritten by\n     \
         `HAIRPIN_BLESS=1 cargo test -p hairpin-planner --test dns_policy`, which fails when\n     \
         this file has drifted from the planner's markers and line shapes. Used by the policy\n     \
         <release>-dns-block-only (admission-policy.yaml). */ -}}\n",
    );
    for (name, text) in [
        ("literalLines", cel_literal_lines()),
        ("outside", outside),
        ("blockLines", blocks),
        ("ownKey", own_key),
    ] {
        let _ = write!(
            out,
            "{{{{- define \"hairpin.dnsPolicy.{name}\" -}}}}\n{text}\n{{{{- end }}}}\n"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cel_strings_hide_template_braces() {
        assert_eq!(
            cel_string("a{{ .Name }}'\\"),
            "'a\\x7b\\x7b .Name \\x7d\\x7d\\'\\\\'"
        );
    }

    #[test]
    fn a_service_is_one_label_in_the_namespace_and_domain() {
        let ctx = ShapeContext::new("hairpin", &["cluster.local"], &["10.96.0.0/12"]);
        let shapes = rule_shapes();
        let ok = "rewrite stop name exact a.example.com lb-1.hairpin.svc.cluster.local";
        assert!(has_shape(ok, &shapes, &ctx));
        for bad in [
            "rewrite stop name exact a.example.com lb-1.other.svc.cluster.local",
            "rewrite stop name exact a.example.com a.lb-1.hairpin.svc.cluster.local",
            "rewrite stop name exact a.example.com lb-1.hairpin.svc.evil.example",
            "rewrite  stop name exact a.example.com lb-1.hairpin.svc.cluster.local",
            "rewrite stop name exact a.example.com b.example.com",
        ] {
            assert!(!has_shape(bad, &shapes, &ctx), "{bad}");
        }
        assert!(has_shape(
            "rewrite stop name exact a.example.com a.example.com",
            &shapes,
            &ctx
        ));
    }

    #[test]
    fn answers_lie_in_the_cidrs() {
        let ctx = ShapeContext::new("hairpin", &["cluster.local"], &["10.96.0.0/12", "fd00::/8"]);
        let shapes = line_shapes();
        let line = |ip: &str, t: &str| format!("    answer \"{{{{ .Name }}}} 30 IN {t} {ip}\"");
        assert!(has_shape(&line("10.96.3.4", "A"), &shapes, &ctx));
        assert!(has_shape(&line("fd00::1", "AAAA"), &shapes, &ctx));
        assert!(!has_shape(&line("10.112.0.1", "A"), &shapes, &ctx));
        assert!(!has_shape(&line("fd00::1", "A"), &shapes, &ctx));
        assert!(!has_shape(&line("203.0.113.9", "A"), &shapes, &ctx));
    }

    #[test]
    fn the_bypass_names_a_cluster_domain_to_itself_only() {
        let ctx = ShapeContext::new("hairpin", &["cluster.local"], &["10.96.0.0/12"]);
        let shapes = line_shapes();
        let ok = "    rewrite stop name suffix .cluster.local. .cluster.local.";
        assert!(has_shape(ok, &shapes, &ctx));
        assert!(
            !has_shape(ok, &rule_shapes(), &ctx),
            "not in hairpin's own key"
        );
        for bad in [
            "rewrite stop name suffix .example.com. .example.com.",
            "rewrite stop name suffix .cluster.local. .example.com.",
            "rewrite stop name suffix .cluster.local. .cluster.local",
            "rewrite stop name suffix .local. .local.",
            "rewrite continue name suffix .cluster.local. .cluster.local.",
        ] {
            assert!(!has_shape(bad, &shapes, &ctx), "{bad}");
        }
    }
}
