//! Property tests of the one hostname validator ([`hairpin_planner::name`]) and of the parts
//! that read names through it: they all accept and refuse the same strings, and agree on the
//! normalized form (lowercase, no trailing dot).

use std::net::{IpAddr, Ipv4Addr};

use hairpin_planner::corefile::{DnsEntry, HostPattern};
use hairpin_planner::hosts::{self, HostsEntry};
use hairpin_planner::name::{DnsName, Host, NameError};
use proptest::prelude::*;

fn label() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9]([a-zA-Z0-9-]{0,10}[a-zA-Z0-9])?"
}

/// Valid names in any case, with or without the trailing dot.
fn valid_name() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(label(), 1..5),
        "[a-z]{2,6}",
        prop::bool::ANY,
    )
        .prop_map(|(labels, tld, dot)| {
            let mut name = labels.join(".");
            name.push('.');
            name.push_str(&tld);
            if dot {
                name.push('.');
            }
            name
        })
}

/// Strings near the edge of validity: names with stray characters, empty labels, `*`, dots.
fn noisy() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9*._ -]{0,24}"
}

proptest! {
    #[test]
    fn valid_names_parse_to_a_normal_form(raw in valid_name()) {
        let name = DnsName::parse(&raw).unwrap();
        let s = name.as_str();
        prop_assert!(!s.ends_with('.'));
        prop_assert_eq!(s, raw.trim_end_matches('.').to_ascii_lowercase());
        // The normal form is a fixed point, and case and the trailing dot do not matter.
        prop_assert_eq!(&DnsName::parse(s).unwrap(), &name);
        prop_assert_eq!(&DnsName::parse(&format!("{}.", s.to_ascii_uppercase())).unwrap(), &name);
        let wildcard = Host::parse(&format!("*.{raw}")).unwrap();
        prop_assert_eq!(wildcard, Host::Wildcard(name));
    }

    #[test]
    fn every_reader_agrees_with_the_validator(raw in prop_oneof![valid_name(), noisy()]) {
        let host = Host::parse(&raw);
        // The Corefile editor's patterns.
        let pattern = HostPattern::parse(&raw);
        prop_assert_eq!(host.is_ok(), pattern.is_ok(), "{:?} vs {:?}", host, pattern);
        if let (Ok(h), Ok(p)) = (&host, &pattern) {
            prop_assert_eq!(h.to_string(), p.to_string());
        }
        let exact = DnsName::parse(&raw);
        // Rewrite targets.
        let target = DnsEntry::new("a.example.com", &raw);
        prop_assert_eq!(exact.is_ok(), target.is_ok());
        if let (Ok(name), Ok(entry)) = (&exact, &target) {
            prop_assert_eq!(name.as_str(), entry.target.as_str());
        }
        // Hosts-file names.
        let edit = hosts::apply("", &[HostsEntry::new(IpAddr::V4(Ipv4Addr::LOCALHOST), [raw.clone()])]);
        prop_assert_eq!(exact.is_ok(), edit.is_ok());
        if let (Ok(name), Ok(edit)) = (&exact, &edit) {
            let listed = edit.text.lines().any(|l| l.split_whitespace().nth(1) == Some(name.as_str()));
            prop_assert!(listed, "{}", edit.text);
        }
    }

    #[test]
    fn a_wildcard_is_only_a_whole_first_label(head in label(), tail in valid_name()) {
        for bad in [
            format!("{head}.*.{tail}"),
            format!("{head}*.{tail}"),
            format!("*{head}.{tail}"),
            format!("*.*.{tail}"),
        ] {
            prop_assert_eq!(Host::parse(&bad), Err(NameError::MisplacedWildcard), "{}", bad);
        }
    }

    #[test]
    fn ip_addresses_are_never_names(ip in any::<IpAddr>()) {
        prop_assert_eq!(DnsName::parse(&ip.to_string()), Err(NameError::IpAddress));
    }
}
