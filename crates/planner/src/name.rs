//! Hostnames: the one name type and the one validator of the workspace.
//!
//! Every hostname hairpin reads (Ingress hosts, Gateway and route hostnames, annotations, the
//! doctor's argument, hosts-file names, rewrite targets) goes through [`DnsName::parse`] or
//! [`Host::parse`], so every part agrees on what a name is:
//!
//! - ASCII letters, digits and `-`, in dot-separated labels of 1 to 63 characters that neither
//!   start nor end with `-` (RFC 1123, which is also what the Kubernetes API server accepts for
//!   an Ingress host); at most 253 characters;
//! - lowercased; one trailing dot (the absolute form, `example.com.`) is dropped, so
//!   `Example.COM.` and `example.com` are the same name; two trailing dots are an empty label;
//! - an IP address is not a name;
//! - a wildcard is a whole first label `*` followed by a name: `*.example.com`.
//!
//! Surrounding whitespace is not trimmed here: callers that split a list (annotations, flags)
//! trim each item.
//!
//! Written by hand rather than taken from a DNS crate on purpose: `hickory-proto`'s `Name` is a
//! wire-format name (any octet, `_` labels, escapes) in a large dependency, so it would still
//! need these checks on top; the Kubernetes hostname rules above are the contract here. Public
//! suffixes, which do need a maintained list, come from the `psl` crate (see
//! [`crate::admission`]).

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// Longest name, in characters, without the trailing dot.
pub const MAX_NAME_LEN: usize = 253;
/// Longest label.
pub const MAX_LABEL_LEN: usize = 63;

/// Why a string is not a hostname.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Nothing (or only a dot).
    #[error("empty name")]
    Empty,
    /// More than [`MAX_NAME_LEN`] characters.
    #[error("longer than 253 characters")]
    TooLong,
    /// `a..b`, a leading dot, or two trailing dots.
    #[error("empty label")]
    EmptyLabel,
    /// A label of more than [`MAX_LABEL_LEN`] characters.
    #[error("label longer than 63 characters")]
    LabelTooLong,
    /// Anything but ASCII letters, digits, `-` and `.`.
    #[error("only letters, digits, `-` and `.` are allowed (RFC 1123)")]
    BadCharacter,
    /// A label that starts or ends with `-`.
    #[error("label starts or ends with `-`")]
    HyphenAtEdge,
    /// `10.0.0.1`, `::1`.
    #[error("an IP address, not a hostname")]
    IpAddress,
    /// `*` anywhere but as the whole first label of `*.name`.
    #[error("a wildcard must be a whole first label: `*.example.com`")]
    MisplacedWildcard,
}

impl NameError {
    /// The message, as a static string (for error types that keep one).
    pub fn as_str(self) -> &'static str {
        match self {
            NameError::Empty => "empty name",
            NameError::TooLong => "longer than 253 characters",
            NameError::EmptyLabel => "empty label",
            NameError::LabelTooLong => "label longer than 63 characters",
            NameError::BadCharacter => "only letters, digits, `-` and `.` are allowed (RFC 1123)",
            NameError::HyphenAtEdge => "label starts or ends with `-`",
            NameError::IpAddress => "an IP address, not a hostname",
            NameError::MisplacedWildcard => {
                "a wildcard must be a whole first label: `*.example.com`"
            }
        }
    }
}

/// A valid, normalized (lowercase, no trailing dot) exact hostname.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct DnsName(String);

impl DnsName {
    /// Validates and normalizes `name` (see the module documentation).
    ///
    /// # Errors
    /// What is wrong with it; `*` anywhere is [`NameError::MisplacedWildcard`] (use
    /// [`Host::parse`] where a wildcard is allowed).
    pub fn parse(name: &str) -> Result<Self, NameError> {
        let name = name.strip_suffix('.').unwrap_or(name);
        // The planner parses every hostname of the cluster on each run: one pass over the
        // bytes accepts the common case, and only a name it cannot accept at a glance goes
        // through the full checks, which say what is wrong.
        match glance(name.as_bytes()) {
            Glance::Lowercase => Ok(DnsName(name.to_owned())),
            Glance::Capitals => Ok(DnsName(name.to_ascii_lowercase())),
            Glance::Unsure => {
                check(name)?;
                Ok(DnsName(name.to_ascii_lowercase()))
            }
        }
    }

    /// Whether `name` is already a valid name in normal form (what [`DnsName::parse`] would
    /// return unchanged), without allocating.
    pub fn is_normalized(name: &str) -> bool {
        match glance(name.as_bytes()) {
            Glance::Lowercase => true,
            Glance::Capitals => false,
            Glance::Unsure => DnsName::parse(name).is_ok_and(|n| n.0 == name),
        }
    }

    /// The name, e.g. `shop.example.com`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// How many labels it has (`shop.example.com`: 3).
    pub fn label_count(&self) -> usize {
        self.0.bytes().filter(|b| *b == b'.').count() + 1
    }

    /// Whether this name is `zone` or a name under it (`a.example.com` is within
    /// `example.com`; `aexample.com` is not).
    pub fn is_within(&self, zone: &DnsName) -> bool {
        within(&self.0, &zone.0)
    }

    /// The part of this name before `.zone`, when it is strictly under `zone`
    /// (`a.b` for `a.b.example.com` in `example.com`).
    pub fn head_under(&self, zone: &DnsName) -> Option<&str> {
        head(&self.0, &zone.0)
    }
}

/// Every rule, in the order that decides which error a bad name gets; `name` is without its
/// trailing dot.
fn check(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong);
    }
    if name.contains('*') {
        return Err(NameError::MisplacedWildcard);
    }
    let mut all_labels_numeric = true;
    for label in name.split('.') {
        if label.is_empty() {
            return Err(NameError::EmptyLabel);
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(NameError::LabelTooLong);
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            // `::1` and friends say more than "bad character".
            if name.parse::<std::net::IpAddr>().is_ok() {
                return Err(NameError::IpAddress);
            }
            return Err(NameError::BadCharacter);
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(NameError::HyphenAtEdge);
        }
        all_labels_numeric &= label.bytes().all(|b| b.is_ascii_digit());
    }
    if all_labels_numeric && name.parse::<std::net::Ipv4Addr>().is_ok() {
        return Err(NameError::IpAddress);
    }
    Ok(())
}

/// What one pass over a name found.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Glance {
    /// Valid, in lowercase already.
    Lowercase,
    /// Valid, with capitals.
    Capitals,
    /// Not plainly valid: only the full checks can tell.
    Unsure,
}

/// A quick look at `name` (without its trailing dot): valid when every label is 1 to 63
/// letters, digits and inner hyphens and some label holds more than digits (an all-digit name
/// may be an IPv4 address). [`Glance::Unsure`] says nothing: the full checks decide. Two tight
/// passes: the byte classes present, then the labels' lengths and ends.
fn glance(name: &[u8]) -> Glance {
    // Byte classes, one bit each, so that the first pass makes one lookup and one `or` per
    // byte.
    const BAD: u8 = 1;
    const LOWER: u8 = 2;
    const UPPER: u8 = 4;
    const HYPHEN: u8 = 8;
    const OTHER: u8 = 16;
    const CLASS: [u8; 256] = {
        let mut class = [BAD; 256];
        let mut b = 0;
        while b < 256 {
            let c = b as u8;
            class[b] = if c.is_ascii_lowercase() {
                LOWER
            } else if c.is_ascii_uppercase() {
                UPPER
            } else if c == b'-' {
                HYPHEN
            } else if c.is_ascii_digit() || c == b'.' {
                OTHER
            } else {
                BAD
            };
            b += 1;
        }
        class
    };
    if name.len() > MAX_NAME_LEN {
        return Glance::Unsure;
    }
    let seen = name.iter().fold(0, |seen, &b| seen | CLASS[usize::from(b)]);
    // A bad byte, or no letter nor hyphen: only digits and dots (or nothing).
    if seen & BAD != 0 || seen & (LOWER | UPPER | HYPHEN) == 0 {
        return Glance::Unsure;
    }
    let plain_label = |label: &[u8]| {
        (1..=MAX_LABEL_LEN).contains(&label.len())
            && label[0] != b'-'
            && label[label.len() - 1] != b'-'
    };
    // The labels, found eight bytes at a time.
    let (mut plain, mut start) = (true, 0);
    for_each_dot(name, |dot| {
        plain &= plain_label(&name[start..dot]);
        start = dot + 1;
    });
    if !(plain && plain_label(&name[start..])) {
        Glance::Unsure
    } else if seen & UPPER != 0 {
        Glance::Capitals
    } else {
        Glance::Lowercase
    }
}

/// Calls `f` with the index of each `.` in `bytes`, in order. Eight bytes at a time: names are
/// read for their labels on every plan (the quick look at each hostname, and the Corefile's
/// rules read every name twice: its escaped length, then the escaped name), and a byte at a
/// time was most of that cost at 20,000 names. Not `memchr::memchr_iter`: on names of a few
/// dozen bytes its per-call set-up costs more than it saves (the planner's `scale` example,
/// 6 plans under callgrind: 1,282 M instructions with it against 1,122 M with this loop).
pub(crate) fn for_each_dot(bytes: &[u8], mut f: impl FnMut(usize)) {
    const DOTS: u64 = u64::from_ne_bytes([b'.'; 8]);
    const LOW7: u64 = u64::from_ne_bytes([0x7f; 8]);
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for word in words.by_ref() {
        // A zero byte of `v` is a dot; `zero` has the high bit of exactly those bytes set
        // (no carry crosses a byte: each sum is at most 0x7f + 0x7f).
        let v = u64::from_le_bytes(word.try_into().expect("eight bytes")) ^ DOTS;
        let mut zero = !(((v & LOW7) + LOW7) | v | LOW7);
        while zero != 0 {
            f(at + zero.trailing_zeros() as usize / 8);
            zero &= zero - 1;
        }
        at += 8;
    }
    for (i, &b) in words.remainder().iter().enumerate() {
        if b == b'.' {
            f(at + i);
        }
    }
}

/// Whether `name` is `zone` or under it (both normalized).
pub(crate) fn within(name: &str, zone: &str) -> bool {
    name == zone || head(name, zone).is_some()
}

/// The non-empty part of `name` before `.zone` (both normalized).
pub(crate) fn head<'a>(name: &'a str, zone: &str) -> Option<&'a str> {
    // Their last bytes first: most names are in none of the zones they are checked against
    // (every claimed hostname is checked against a dozen), and a byte is cheaper to compare
    // than a suffix.
    if let (Some(n), Some(z)) = (name.as_bytes().last(), zone.as_bytes().last())
        && n != z
    {
        return None;
    }
    name.strip_suffix(zone)
        .and_then(|h| h.strip_suffix('.'))
        .filter(|h| !h.is_empty())
}

impl fmt::Display for DnsName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for DnsName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<DnsName> for String {
    fn from(name: DnsName) -> Self {
        name.0
    }
}

impl FromStr for DnsName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DnsName::parse(s)
    }
}

/// A hostname as a source states it: an exact name, or a wildcard `*.suffix`.
///
/// What a wildcard's `*` stands for (one label or more) depends on the source, not on the
/// text: see [`WildcardLabels`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Host {
    /// `shop.example.com`.
    Exact(DnsName),
    /// `*.example.com`, holding the suffix `example.com`.
    Wildcard(DnsName),
}

impl Host {
    /// Validates and normalizes an exact name or a wildcard `*.name` (see the module
    /// documentation).
    ///
    /// # Errors
    /// What is wrong with it.
    pub fn parse(host: &str) -> Result<Self, NameError> {
        match host.strip_prefix("*.") {
            Some(suffix) => DnsName::parse(suffix).map(Host::Wildcard),
            None if host == "*" => Err(NameError::MisplacedWildcard),
            None => DnsName::parse(host).map(Host::Exact),
        }
    }

    /// The exact name, or a wildcard's suffix (`example.com` for `*.example.com`).
    pub fn name(&self) -> &DnsName {
        match self {
            Host::Exact(n) | Host::Wildcard(n) => n,
        }
    }

    /// `*.example.com` and the like.
    pub fn is_wildcard(&self) -> bool {
        matches!(self, Host::Wildcard(_))
    }
}

impl fmt::Display for Host {
    /// `shop.example.com` or `*.example.com`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Exact(n) => f.write_str(n.as_str()),
            Host::Wildcard(n) => write!(f, "*.{n}"),
        }
    }
}

impl From<Host> for String {
    fn from(host: Host) -> Self {
        match host {
            Host::Exact(n) => n.0,
            Host::Wildcard(n) => format!("*.{}", n.0),
        }
    }
}

impl FromStr for Host {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Host::parse(s)
    }
}

impl Serialize for Host {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// How many labels the `*` of a wildcard hostname stands for.
///
/// Ordered from narrow to broad, so `max` gives the broader of two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WildcardLabels {
    /// Exactly one label, as in an Ingress: `*.example.com` covers `a.example.com` but not
    /// `a.b.example.com`.
    #[default]
    One,
    /// One or more labels, as in the Gateway API (a suffix match): `*.example.com` covers
    /// `a.example.com` and `a.b.example.com`, but not `example.com`.
    OneOrMore,
}

impl WildcardLabels {
    /// `one label` / `one or more labels`, for people.
    pub fn describe(self) -> &'static str {
        match self {
            WildcardLabels::One => "one label",
            WildcardLabels::OneOrMore => "one or more labels",
        }
    }

    /// Whether a `*` with this meaning stands for `head`, the non-empty part of a name before
    /// the wildcard's suffix (`a` or `a.b` in `a.b.example.com` against `*.example.com`).
    pub(crate) fn covers(self, head: &str) -> bool {
        match self {
            WildcardLabels::One => !head.contains('.'),
            WildcardLabels::OneOrMore => head.split('.').all(|l| !l.is_empty()),
        }
    }
}

/// A load balancer's address as the planner compares it (a status `ip` or `hostname`, a
/// Gateway or CRD address): lowercased, without a trailing dot, so `LB.example.com.` and
/// `lb.example.com` are the same address.
pub fn normalize_address(address: &str) -> String {
    address.trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalized() {
        for (raw, want) in [
            ("Shop.Example.COM", "shop.example.com"),
            ("shop.example.com.", "shop.example.com"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("a", "a"),
            ("1a.example", "1a.example"),
            ("1.2.3", "1.2.3"),
        ] {
            assert_eq!(DnsName::parse(raw).unwrap().as_str(), want, "{raw}");
        }
    }

    #[test]
    fn bad_names_say_why() {
        for (raw, want) in [
            ("", NameError::Empty),
            (".", NameError::Empty),
            ("a.com..", NameError::EmptyLabel),
            ("a..b", NameError::EmptyLabel),
            (".a.b", NameError::EmptyLabel),
            ("a_b.com", NameError::BadCharacter),
            ("a b.com", NameError::BadCharacter),
            (" a.com", NameError::BadCharacter),
            ("bücher.example", NameError::BadCharacter),
            ("-a.com", NameError::HyphenAtEdge),
            ("a-.com", NameError::HyphenAtEdge),
            ("10.0.0.1", NameError::IpAddress),
            ("10.0.0.1.", NameError::IpAddress),
            ("::1", NameError::IpAddress),
            ("fd00:ec2::254", NameError::IpAddress),
            ("*.a.com", NameError::MisplacedWildcard),
            ("a.*.com", NameError::MisplacedWildcard),
        ] {
            assert_eq!(DnsName::parse(raw), Err(want), "{raw:?}");
        }
        assert_eq!(
            DnsName::parse(&"a".repeat(64)),
            Err(NameError::LabelTooLong)
        );
        let long = format!("{}.com", ["a"; 126].join("."));
        assert_eq!(long.len(), 255);
        assert_eq!(DnsName::parse(&long), Err(NameError::TooLong));
        // 253 characters, then the same with its trailing dot, are fine.
        let max = &long[2..];
        assert_eq!(max.len(), 253);
        assert!(DnsName::parse(max).is_ok());
        assert!(DnsName::parse(&format!("{max}.")).is_ok());
    }

    #[test]
    fn hosts_are_exact_names_or_leading_wildcards() {
        assert_eq!(
            Host::parse("*.Example.com.").unwrap(),
            Host::Wildcard(DnsName::parse("example.com").unwrap())
        );
        assert_eq!(
            Host::parse("*.example.com").unwrap().to_string(),
            "*.example.com"
        );
        assert_eq!(
            String::from(Host::parse("A.example.com").unwrap()),
            "a.example.com"
        );
        for bad in [
            "*",
            "*.",
            "**.a.com",
            "a.*.com",
            "foo*.com",
            "*a.com",
            "*.*.a.com",
        ] {
            assert!(Host::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(Host::parse("*.10.0.0.1"), Err(NameError::IpAddress));
    }

    proptest::proptest! {
        /// The one-pass shortcut accepts nothing the full checks refuse, and lets through
        /// (almost) every name they accept: all-digit names are left to them.
        #[test]
        fn the_shortcut_agrees_with_the_full_checks(raw in "[a-zA-Z0-9*._: -]{0,12}|([a-z0-9-]{1,64}\\.){1,4}[a-z0-9-]{1,5}") {
            let fast = glance(raw.as_bytes());
            if fast != Glance::Unsure {
                proptest::prop_assert_eq!(check(&raw), Ok(()));
                proptest::prop_assert_eq!(
                    fast == Glance::Capitals,
                    raw.bytes().any(|b| b.is_ascii_uppercase())
                );
            } else if check(&raw).is_ok() {
                proptest::prop_assert!(raw.bytes().all(|b| b.is_ascii_digit() || b == b'.'));
            }
            proptest::prop_assert_eq!(
                DnsName::is_normalized(&raw),
                DnsName::parse(&raw).is_ok_and(|n| n.as_str() == raw)
            );
        }
    }

    #[test]
    fn within_is_label_aligned() {
        let zone = DnsName::parse("example.com").unwrap();
        let name = |s| DnsName::parse(s).unwrap();
        assert!(name("example.com").is_within(&zone));
        assert!(name("a.b.example.com").is_within(&zone));
        assert!(!name("aexample.com").is_within(&zone));
        assert!(!name("com").is_within(&zone));
        assert_eq!(name("a.b.example.com").head_under(&zone), Some("a.b"));
        assert_eq!(name("example.com").head_under(&zone), None);
        assert_eq!(name("a.b.example.com").label_count(), 4);
    }
}
