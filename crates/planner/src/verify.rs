//! Step 2b: a hostname is redirected only if it is its load balancer's, proven by resolution.
//!
//! The hairpin problem exists only for a name that resolves, upstream, to the load balancer's
//! own address: kube-proxy short-circuits that address, and the PROXY header goes missing. A
//! name that resolves elsewhere (another load balancer, a CDN, nowhere) is not short-circuited,
//! and redirecting it would hand its in-cluster clients to the wrong backend. So, after
//! admission ([`crate::admission`]), each hostname of a load balancer that needs a hairpin is
//! checked against what the cluster's upstream DNS answers for it
//! ([`ClusterSnapshot::resolutions`], filled by the controller's resolver, which asks the
//! upstream the way CoreDNS would without hairpin's rules, following CNAMEs):
//!
//! - redirected when its A/AAAA answers hold one of the load balancer's status IPs, or its
//!   CNAME chain passes through one of the load balancer's status hostnames (a provider that
//!   publishes both, and DNS records that point at the hostname);
//! - otherwise left out and reported as [`Unverified`], with the answer seen.
//!
//! A wildcard is checked through a random label under it (the controller picks it; the answer
//! is stored under the wildcard's own key, `*.example.com`).
//!
//! A name not resolved yet is not redirected: do no harm. The controller resolves every name
//! before its first write after a start (so a restart does not drop working names for a
//! moment), and on a failed re-check keeps the last answer it got (so a flaky upstream does
//! not flap them).
//!
//! Then the carve-outs ([`carve`]): a wildcard never takes another load balancer's names. Every
//! exact name some load balancer claims (or that is refused, conflicted or unverified) and that
//! a redirected wildcard covers, without being redirected itself, is passed through: CoreDNS
//! answers it as it would without hairpin. Coverage is compared, not only exact names: an
//! Ingress `*.example.com` covers `shop.example.com`, a Gateway listener `*.example.com` also
//! covers `a.b.example.com`. A wildcard that covers another wildcard that is not redirected (a
//! Gateway `*.example.com` over `*.team.example.com`), or that needs a pass-through where the DNS
//! mode cannot write one, is left out itself.
//!
//! With [`VerifyMode::Off`] (air-gapped clusters) nothing is resolved and every admitted name
//! is redirected, as before; the carve-outs still apply.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use serde::Serialize;

use crate::config::VerifyMode;
use crate::hostnames::Hostname;
use crate::name::{WildcardLabels, normalize_address};
use crate::snapshot::ObjectRef;
use crate::snapshot::Resolution;

/// One name the controller must resolve, and the addresses that prove it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NameCheck {
    /// The hostname (a wildcard is resolved through a random label under it).
    pub hostname: String,
    /// The load balancer claiming it.
    pub load_balancer: ObjectRef,
    /// That load balancer's status addresses (IPs and hostnames): an answer holding one of
    /// them verifies the name.
    pub addresses: Vec<String>,
}

impl NameCheck {
    /// Whether the name is a wildcard (`*.example.com`).
    pub fn is_wildcard(&self) -> bool {
        self.hostname.starts_with("*.")
    }
}

/// Why a hostname is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnverifiedReason {
    /// Not resolved yet (the controller's first answer is pending; `hairpin plan -f` resolves
    /// nothing).
    NotResolved,
    /// It resolves to other addresses than its load balancer's.
    ResolvesElsewhere,
    /// It exists but has no A or AAAA record.
    NoAddress,
    /// It does not exist.
    NxDomain,
    /// The upstream did not answer (timeout, `SERVFAIL`...).
    ResolveFailed,
    /// A wildcard that covers names it must not take, which cannot be left out of it here.
    CoversOthers,
}

impl UnverifiedReason {
    /// The stable label (Events, metrics, status).
    pub fn as_str(self) -> &'static str {
        match self {
            UnverifiedReason::NotResolved => "not-resolved",
            UnverifiedReason::ResolvesElsewhere => "resolves-elsewhere",
            UnverifiedReason::NoAddress => "no-address",
            UnverifiedReason::NxDomain => "nxdomain",
            UnverifiedReason::ResolveFailed => "resolve-failed",
            UnverifiedReason::CoversOthers => "covers-others",
        }
    }
}

impl std::fmt::Display for UnverifiedReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A hostname of a load balancer that is not redirected, because it was not proven to be
/// that load balancer's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Unverified {
    /// The hostname.
    pub hostname: String,
    /// The load balancer that claimed it.
    pub load_balancer: ObjectRef,
    /// Why, as a stable label.
    pub reason: UnverifiedReason,
    /// The answer seen, for people: `shop.example.com resolves to 198.51.100.9, not this load
    /// balancer`.
    pub detail: String,
    /// Where the name was found (`Ingress shop/web`), as in [`Hostname::sources`].
    pub sources: Vec<String>,
}

/// An exact name that a redirected wildcard covers but that is not redirected: CoreDNS answers
/// it as it would without hairpin.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Passthrough {
    /// The exact name.
    pub hostname: String,
    /// The redirected wildcard that covers it.
    pub wildcard: String,
    /// Why it is not redirected, for people (`claimed by load balancer team-a/web`).
    pub why: String,
}

/// The verification part of a plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Verification {
    /// The mode the plan was made with.
    pub mode: VerifyMode,
    /// The names the controller resolves (every hostname of the load balancers that need a
    /// hairpin, after admission), sorted; empty with [`VerifyMode::Off`].
    pub names: Vec<NameCheck>,
    /// The names left out, sorted by hostname.
    pub unverified: Vec<Unverified>,
    /// Exact names carved out of redirected wildcards, sorted.
    pub passthrough: Vec<Passthrough>,
}

impl Verification {
    /// How many names are left out because they were not resolved (yet).
    pub fn not_resolved(&self) -> usize {
        self.unverified
            .iter()
            .filter(|u| u.reason == UnverifiedReason::NotResolved)
            .count()
    }
}

/// The verification sections of `hairpin plan`'s text summary: the names left out with the
/// answer seen, and the names passed through under a wildcard.
pub fn text(verification: &Verification, out: &mut String) {
    use crate::escape::Text;
    use std::fmt::Write as _;
    // The details name load balancers (any text, from `-f` files): escaped.
    section(
        out,
        "Unverified (hostnames not redirected: not proven to resolve to their load balancer)",
        &verification.unverified,
        |u| &u.hostname,
        |u| {
            format!(
                "{}: {}",
                Text(&u.load_balancer.to_string()),
                Text(&u.detail)
            )
        },
    );
    let pending = verification.not_resolved();
    if pending > 0 {
        let _ = writeln!(
            out,
            "  ({pending} not resolved: `hairpin plan -f` resolves nothing and the controller resolves every name before it writes; `--verify-hostnames=off` plans them as if they resolve to their load balancer)"
        );
    }
    section(
        out,
        "Passed through (names a wildcard leaves to the upstream DNS)",
        &verification.passthrough,
        |p| &p.hostname,
        |p| format!("under {}: {}", Text(&p.wildcard), Text(&p.why)),
    );
}

/// One section of [`text`]: a heading, then one row per item, the hostnames (escaped) padded
/// to the longest; nothing at all when there are no items.
fn section<T>(
    out: &mut String,
    heading: &str,
    items: &[T],
    hostname: impl Fn(&T) -> &String,
    rest: impl Fn(&T) -> String,
) {
    use crate::escape::Text;
    use std::fmt::Write as _;
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{heading}");
    let width = items.iter().map(|i| hostname(i).len()).max().unwrap_or(0);
    for i in items {
        let _ = writeln!(out, "  {:<width$}  {}", Text(hostname(i)), rest(i));
    }
}

/// A load balancer's status addresses, split into IPs and hostnames.
struct Owned {
    ips: HashSet<IpAddr>,
    hostnames: HashSet<String>,
}

impl Owned {
    fn new(addresses: &[String]) -> Self {
        let mut ips = HashSet::new();
        let mut hostnames = HashSet::new();
        for a in addresses {
            match a.parse::<IpAddr>() {
                Ok(ip) => {
                    ips.insert(ip);
                }
                Err(_) => {
                    hostnames.insert(normalize_address(a));
                }
            }
        }
        Self { ips, hostnames }
    }
}

/// The verifier of one plan: the mode, the answers, and who owns which status IP (to name the
/// other load balancer an answer points at).
pub(crate) struct Verifier<'a> {
    mode: VerifyMode,
    resolutions: &'a BTreeMap<String, Resolution>,
    owners: HashMap<IpAddr, &'a ObjectRef>,
    pub(crate) out: Verification,
}

impl<'a> Verifier<'a> {
    /// `lbs`: every load balancer with an address, and its status addresses.
    pub(crate) fn new(
        mode: VerifyMode,
        resolutions: &'a BTreeMap<String, Resolution>,
        lbs: &[(&'a ObjectRef, &[String])],
    ) -> Self {
        let mut owners = HashMap::new();
        for (lb, addresses) in lbs {
            for a in *addresses {
                if let Ok(ip) = a.parse::<IpAddr>() {
                    owners.entry(ip).or_insert(*lb);
                }
            }
        }
        Self {
            mode,
            resolutions,
            owners,
            out: Verification {
                mode,
                ..Verification::default()
            },
        }
    }

    /// The hostnames of `lb` (status `addresses`) that are proven to be its; the others are
    /// recorded as unverified. Every name is listed for the controller to resolve.
    pub(crate) fn check(
        &mut self,
        lb: &ObjectRef,
        addresses: &[String],
        hostnames: Vec<Hostname>,
    ) -> Vec<Hostname> {
        if self.mode == VerifyMode::Off {
            return hostnames;
        }
        let owned = Owned::new(addresses);
        let mut kept = Vec::with_capacity(hostnames.len());
        for h in hostnames {
            self.out.names.push(NameCheck {
                hostname: h.name.clone(),
                load_balancer: lb.clone(),
                addresses: addresses.to_vec(),
            });
            match self.verdict(&h.name, &owned) {
                None => kept.push(h),
                Some((reason, detail)) => self.out.unverified.push(Unverified {
                    hostname: h.name,
                    load_balancer: lb.clone(),
                    reason,
                    detail,
                    sources: h.sources,
                }),
            }
        }
        kept
    }

    /// `None` when `name` is proven to be the load balancer's, else why not.
    fn verdict(&self, name: &str, owned: &Owned) -> Option<(UnverifiedReason, String)> {
        let subject = match name.strip_prefix("*.") {
            Some(suffix) => format!("{name} (a random name under {suffix})"),
            None => name.to_owned(),
        };
        let Some(answer) = self.resolutions.get(name) else {
            return Some((
                UnverifiedReason::NotResolved,
                format!("{subject} has not been resolved yet"),
            ));
        };
        match answer {
            Resolution::Addresses { addresses, cnames } => {
                let ours = addresses.iter().any(|a| owned.ips.contains(a))
                    || cnames.iter().any(|c| owned.hostnames.contains(c));
                if ours {
                    return None;
                }
                if addresses.is_empty() {
                    return Some((
                        UnverifiedReason::NoAddress,
                        format!("{subject} has no A or AAAA record"),
                    ));
                }
                let seen: Vec<String> = addresses
                    .iter()
                    .map(|a| match self.owners.get(a) {
                        Some(other) => format!("{a} (load balancer {other})"),
                        None => a.to_string(),
                    })
                    .collect();
                Some((
                    UnverifiedReason::ResolvesElsewhere,
                    format!(
                        "{subject} resolves to {}, not this load balancer",
                        seen.join(", ")
                    ),
                ))
            }
            Resolution::NxDomain => Some((
                UnverifiedReason::NxDomain,
                format!("{subject} does not exist (NXDOMAIN)"),
            )),
            Resolution::Failed { error } => Some((
                UnverifiedReason::ResolveFailed,
                format!("{subject} could not be resolved: {error}"),
            )),
        }
    }
}

/// A claim on a name by someone other than the wildcard that would take it.
pub(crate) struct Claim<'a> {
    /// The name (exact or wildcard).
    pub(crate) name: &'a str,
    /// For a wildcard, what its `*` stands for.
    pub(crate) labels: Option<WildcardLabels>,
    /// Who holds it, for people: `claimed by load balancer team-a/web`.
    pub(crate) why: String,
}

/// One redirected hostname, as [`carve`] sees it: its index in its load balancer's list.
pub(crate) struct Redirected<'a> {
    pub(crate) lb: usize,
    pub(crate) hostname: &'a Hostname,
}

/// What [`carve`] decided: the pass-through names, and the wildcards to leave out (load
/// balancer index, wildcard, why).
#[derive(Default)]
pub(crate) struct Carved {
    pub(crate) passthrough: Vec<Passthrough>,
    pub(crate) dropped: Vec<(usize, String, String)>,
}

/// The suffix and the meaning of a wildcard hostname, `None` for an exact one.
fn wildcard(name: &str, labels: Option<WildcardLabels>) -> Option<(&str, WildcardLabels)> {
    name.strip_prefix("*.")
        .map(|suffix| (suffix, labels.unwrap_or_default()))
}

/// The carve-outs: for each redirected wildcard, the claimed names it covers that are not
/// redirected. `redirected`: every redirected hostname; `claims`: every other claim (names of
/// other load balancers, unverified, refused and conflicted names). Exact claims become
/// pass-throughs when `can_pass_through`, else the wildcard is left out; a claimed wildcard
/// that the redirected one covers leaves it out too (pass-throughs are exact names only).
pub(crate) fn carve(
    redirected: &[Redirected<'_>],
    claims: &[Claim<'_>],
    can_pass_through: bool,
) -> Carved {
    let redirected_names: HashSet<&str> = redirected
        .iter()
        .map(|r| r.hostname.name.as_str())
        .collect();
    // Redirected wildcards by suffix: a name is looked up once per label it has.
    let mut wildcards: HashMap<&str, Vec<&Redirected<'_>>> = HashMap::new();
    for r in redirected {
        if let Some((suffix, _)) = wildcard(&r.hostname.name, r.hostname.wildcard_labels) {
            wildcards.entry(suffix).or_default().push(r);
        }
    }
    let mut carved = Carved::default();
    if wildcards.is_empty() {
        return carved;
    }
    let mut dropped: BTreeMap<(usize, &str), BTreeMap<&str, String>> = BTreeMap::new();
    let mut passthrough: BTreeMap<&str, Passthrough> = BTreeMap::new();
    for claim in claims {
        if redirected_names.contains(claim.name) {
            continue;
        }
        let claimed = wildcard(claim.name, claim.labels);
        // Every parent of the claimed name (of a claimed wildcard: of its suffix) is a suffix
        // a redirected wildcard could have.
        let base = claimed.map_or(claim.name, |(suffix, _)| suffix);
        let mut rest = base;
        while let Some((_, parent)) = rest.split_once('.') {
            rest = parent;
            let Some(takers) = wildcards.get(parent) else {
                continue;
            };
            for taker in takers {
                let exact = claimed.is_none();
                if !takes(taker.hostname, claim.name, claimed) {
                    continue;
                }
                if exact && can_pass_through {
                    passthrough
                        .entry(claim.name)
                        .or_insert_with(|| Passthrough {
                            hostname: claim.name.to_owned(),
                            wildcard: taker.hostname.name.clone(),
                            why: claim.why.clone(),
                        });
                } else {
                    let taken = if exact {
                        format!("{} ({})", claim.name, claim.why)
                    } else {
                        format!("names of {} ({})", claim.name, claim.why)
                    };
                    dropped
                        .entry((taker.lb, taker.hostname.name.as_str()))
                        .or_default()
                        .entry(claim.name)
                        .or_insert(taken);
                }
            }
        }
    }
    let dropped_names: BTreeSet<&str> = dropped.keys().map(|(_, name)| *name).collect();
    // A name only a dropped wildcard covered needs no pass-through any more.
    carved.passthrough = passthrough
        .into_values()
        .filter(|p| !dropped_names.contains(p.wildcard.as_str()))
        .collect();
    carved.dropped = dropped
        .into_iter()
        .map(|((lb, name), taken)| {
            let why = why_dropped(name, taken.into_values().collect(), can_pass_through);
            (lb, name.to_owned(), why)
        })
        .collect();
    carved
}

/// Whether the redirected wildcard `taker` takes the claimed `name` (`claimed`: its suffix
/// and meaning when it is a wildcard itself).
fn takes(taker: &Hostname, name: &str, claimed: Option<(&str, WildcardLabels)>) -> bool {
    match claimed {
        None => taker.matches(name),
        // The names of `*.suffix` (deeper; the same wildcard is a conflict, handled before)
        // are `x.suffix`: the taker takes some of them when it covers `suffix` and its `*`
        // stands for more than one label.
        Some((suffix, _)) => {
            taker.wildcard_labels.unwrap_or_default() == WildcardLabels::OneOrMore
                && taker.matches(suffix)
        }
    }
}

/// Why the wildcard `name` is left out: the first few claims it would take (`taken`).
fn why_dropped(name: &str, mut taken: Vec<String>, can_pass_through: bool) -> String {
    const SHOWN: usize = 5;
    let more = taken.len().saturating_sub(SHOWN);
    taken.truncate(SHOWN);
    let mut why = format!("{name} covers {}", taken.join(", "));
    if more > 0 {
        why.push_str(&format!(" and {more} more"));
    }
    why.push_str(if can_pass_through {
        "; only exact names can be left out of a wildcard"
    } else {
        "; this DNS mode cannot leave a name out of a wildcard"
    });
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, labels: Option<WildcardLabels>) -> Hostname {
        Hostname {
            name: name.into(),
            sources: vec!["Ingress t/w".into()],
            wildcard_labels: labels,
        }
    }

    fn redirect(lb: usize, hostname: &Hostname) -> Redirected<'_> {
        Redirected { lb, hostname }
    }

    /// The pass-through names [`carve`] decided, in order.
    fn passed(carved: &Carved) -> Vec<&str> {
        carved
            .passthrough
            .iter()
            .map(|p| p.hostname.as_str())
            .collect()
    }

    fn claim(name: &str, labels: Option<WildcardLabels>) -> Claim<'_> {
        Claim {
            name,
            labels,
            why: "claimed by load balancer team-a/web".into(),
        }
    }

    #[test]
    fn an_ingress_wildcard_passes_through_another_load_balancers_name_of_one_label() {
        let w = host("*.example.com", Some(WildcardLabels::One));
        let redirected = [redirect(0, &w)];
        let claims = [
            claim("shop.example.com", None),
            claim("a.b.example.com", None),
            claim("example.com", None),
            claim("shop.example.org", None),
        ];
        let carved = carve(&redirected, &claims, true);
        assert_eq!(passed(&carved), ["shop.example.com"]);
        assert_eq!(carved.passthrough[0].wildcard, "*.example.com");
        assert!(carved.dropped.is_empty());
    }

    #[test]
    fn a_gateway_wildcard_passes_through_names_of_any_depth_under_it() {
        let w = host("*.example.com", Some(WildcardLabels::OneOrMore));
        let redirected = [redirect(0, &w)];
        let claims = [claim("a.b.example.com", None), claim("x.example.com", None)];
        let carved = carve(&redirected, &claims, true);
        assert_eq!(passed(&carved), ["a.b.example.com", "x.example.com"]);
    }

    #[test]
    fn a_name_redirected_exactly_needs_no_pass_through() {
        let w = host("*.example.com", Some(WildcardLabels::One));
        let e = host("shop.example.com", None);
        let redirected = [redirect(0, &w), redirect(1, &e)];
        let carved = carve(&redirected, &[claim("shop.example.com", None)], true);
        assert!(carved.passthrough.is_empty());
    }

    #[test]
    fn without_pass_through_the_covering_wildcard_is_left_out() {
        let w = host("*.example.com", Some(WildcardLabels::One));
        let redirected = [redirect(3, &w)];
        let carved = carve(&redirected, &[claim("shop.example.com", None)], false);
        assert!(carved.passthrough.is_empty());
        assert_eq!(carved.dropped.len(), 1);
        assert_eq!(carved.dropped[0].0, 3);
        assert_eq!(carved.dropped[0].1, "*.example.com");
        assert!(carved.dropped[0].2.contains("shop.example.com"));
    }

    #[test]
    fn a_suffix_wildcard_over_another_wildcard_is_left_out_and_a_one_label_one_is_not() {
        let suffix = host("*.example.com", Some(WildcardLabels::OneOrMore));
        let redirected = [redirect(0, &suffix)];
        let claims = [
            claim("*.team.example.com", Some(WildcardLabels::One)),
            claim("shop.example.com", None),
        ];
        let carved = carve(&redirected, &claims, true);
        assert_eq!(carved.dropped.len(), 1);
        assert!(carved.dropped[0].2.contains("*.team.example.com"));
        // The wildcard is gone: the name it covered needs no pass-through.
        assert!(carved.passthrough.is_empty());

        let one = host("*.example.com", Some(WildcardLabels::One));
        let redirected = [redirect(0, &one)];
        let carved = carve(&redirected, &claims[..1], true);
        assert!(carved.dropped.is_empty(), "{:?}", carved.dropped);
    }

    #[test]
    fn a_deeper_wildcard_takes_nothing_from_a_shallower_claim() {
        let deep = host("*.team.example.com", Some(WildcardLabels::OneOrMore));
        let redirected = [redirect(0, &deep)];
        let claims = [claim("*.example.com", Some(WildcardLabels::OneOrMore))];
        let carved = carve(&redirected, &claims, true);
        assert!(carved.dropped.is_empty());
        assert!(carved.passthrough.is_empty());
    }

    fn verifier_with<'a>(
        answers: &'a BTreeMap<String, Resolution>,
        lbs: &[(&'a ObjectRef, &[String])],
    ) -> Verifier<'a> {
        Verifier::new(VerifyMode::Resolve, answers, lbs)
    }

    #[test]
    fn only_names_answering_with_the_load_balancers_address_are_kept() {
        let ours = ObjectRef::new("ingress", "proxy");
        let theirs = ObjectRef::new("team-a", "web");
        let our_addresses = vec!["203.0.113.7".to_owned(), "lb.example.net".to_owned()];
        let their_addresses = vec!["198.51.100.9".to_owned()];
        let answers = BTreeMap::from([
            (
                "ok.example.com".to_owned(),
                Resolution::Addresses {
                    addresses: vec!["203.0.113.7".parse().unwrap()],
                    cnames: vec![],
                },
            ),
            (
                "cname.example.com".to_owned(),
                Resolution::Addresses {
                    addresses: vec!["192.0.2.1".parse().unwrap()],
                    cnames: vec!["lb.example.net".into()],
                },
            ),
            (
                "shop.example.com".to_owned(),
                Resolution::Addresses {
                    addresses: vec!["198.51.100.9".parse().unwrap()],
                    cnames: vec![],
                },
            ),
            ("gone.example.com".to_owned(), Resolution::NxDomain),
            (
                "slow.example.com".to_owned(),
                Resolution::Failed {
                    error: "timeout".into(),
                },
            ),
            (
                "empty.example.com".to_owned(),
                Resolution::Addresses {
                    addresses: vec![],
                    cnames: vec![],
                },
            ),
        ]);
        let lbs = [
            (&ours, our_addresses.as_slice()),
            (&theirs, their_addresses.as_slice()),
        ];
        let mut v = verifier_with(&answers, &lbs);
        let names = [
            "ok.example.com",
            "cname.example.com",
            "shop.example.com",
            "gone.example.com",
            "slow.example.com",
            "empty.example.com",
            "new.example.com",
        ];
        let kept = v.check(
            &ours,
            &our_addresses,
            names.iter().map(|n| host(n, None)).collect(),
        );
        let kept: Vec<&str> = kept.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(kept, ["ok.example.com", "cname.example.com"]);
        assert_eq!(v.out.names.len(), names.len());
        let details: BTreeMap<&str, (&UnverifiedReason, &str)> = v
            .out
            .unverified
            .iter()
            .map(|u| (u.hostname.as_str(), (&u.reason, u.detail.as_str())))
            .collect();
        assert_eq!(
            details["shop.example.com"],
            (
                &UnverifiedReason::ResolvesElsewhere,
                "shop.example.com resolves to 198.51.100.9 (load balancer team-a/web), not this load balancer"
            )
        );
        assert_eq!(
            details["gone.example.com"],
            (
                &UnverifiedReason::NxDomain,
                "gone.example.com does not exist (NXDOMAIN)"
            )
        );
        assert_eq!(
            details["slow.example.com"],
            (
                &UnverifiedReason::ResolveFailed,
                "slow.example.com could not be resolved: timeout"
            )
        );
        assert_eq!(details["empty.example.com"].0, &UnverifiedReason::NoAddress);
        assert_eq!(details["new.example.com"].0, &UnverifiedReason::NotResolved);
    }

    #[test]
    fn with_verification_off_every_name_is_kept_and_none_is_listed() {
        let lb = ObjectRef::new("ingress", "proxy");
        let answers = BTreeMap::new();
        let mut v = Verifier::new(VerifyMode::Off, &answers, &[]);
        let kept = v.check(&lb, &[], vec![host("github.com", None)]);
        assert_eq!(kept.len(), 1);
        assert!(v.out.names.is_empty() && v.out.unverified.is_empty());
    }
}
