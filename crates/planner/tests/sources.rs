//! The CRD hostname sources ([`hairpin_planner::sources`]): the Traefik rule parser (unit and
//! property tests: any input gives a result, never a panic), Istio host forms, Contour fqdn,
//! and the per-object opt-out.

use hairpin_planner::sources::traefik_rule_hosts;
use hairpin_planner::{CustomSource, SourceKind};
use proptest::prelude::*;
use serde_json::json;

fn hosts(rule: &str) -> Vec<String> {
    traefik_rule_hosts(rule, "Host")
}

#[test]
fn host_matchers_in_traefik_rules() {
    assert_eq!(hosts("Host(`a.example.com`)"), ["a.example.com"]);
    assert_eq!(
        hosts("Host(`a.example.com`) && PathPrefix(`/x`)"),
        ["a.example.com"]
    );
    // v2: several arguments; double quotes as well as backquotes.
    assert_eq!(
        hosts(r#"Host(`a.com`, "b.com") || Host(`c.com`)"#),
        ["a.com", "b.com", "c.com"]
    );
    assert_eq!(
        hosts("(Host(`a.com`) || Host(`b.com`)) && Method(`GET`)"),
        ["a.com", "b.com"]
    );
}

#[test]
fn what_is_not_claimed() {
    // Regexes are not names; other matchers take strings that are not hosts.
    assert!(hosts("HostRegexp(`^.+\\.example\\.com$`)").is_empty());
    assert!(hosts("HostRegexp(`{sub:[a-z]+}.example.com`)").is_empty());
    assert!(hosts("PathPrefix(`/a.example.com`)").is_empty());
    assert!(hosts("Header(`Host`, `a.example.com`)").is_empty());
    // Negated: what the route does not serve.
    assert_eq!(hosts("Host(`a.com`) && !Host(`b.com`)"), ["a.com"]);
    assert!(hosts("!(Host(`a.com`) || Host(`b.com`))").is_empty());
    assert_eq!(hosts("!!Host(`a.com`)"), ["a.com"]);
    // The matcher name is exact.
    assert!(hosts("HostSNI(`a.com`)").is_empty());
    assert_eq!(traefik_rule_hosts("HostSNI(`a.com`)", "HostSNI"), ["a.com"]);
}

#[test]
fn broken_rules_give_what_can_be_read() {
    assert_eq!(hosts("Host(`a.com`"), ["a.com"]);
    assert_eq!(hosts("Host(`a.com"), ["a.com"]);
    assert!(hosts("Host(").is_empty());
    assert!(hosts("Host(``)").is_empty());
    assert!(hosts("").is_empty());
    assert!(hosts("))) Host").is_empty());
    assert_eq!(hosts("Host(\"a\\\"b\")"), ["a\\\"b"]);
    assert_eq!(hosts("Hôst(`x`) Host(`é.com`)"), ["é.com"]);
}

fn source(kind: SourceKind, spec: serde_json::Value) -> CustomSource {
    CustomSource::from_value(
        kind,
        json!({ "metadata": { "name": "x", "namespace": "ns" }, "spec": spec }),
    )
    .unwrap()
}

#[test]
fn traefik_objects() {
    let route = source(
        SourceKind::TraefikIngressRoute,
        json!({ "routes": [
            { "match": "Host(`a.com`)" },
            { "match": 42 },
            { "nomatch": true },
            { "match": "Host(`*.b.com`)" },
        ] }),
    );
    assert_eq!(route.hosts(), ["a.com"]);
    let tcp = source(
        SourceKind::TraefikIngressRouteTcp,
        json!({ "routes": [{ "match": "HostSNI(`db.com`)" }, { "match": "HostSNI(`*`)" }] }),
    );
    assert_eq!(tcp.hosts(), ["db.com"]);
    assert!(
        source(SourceKind::TraefikIngressRoute, json!("oops"))
            .hosts()
            .is_empty()
    );
}

#[test]
fn istio_hosts_lose_their_namespace_part() {
    let gw = source(
        SourceKind::IstioGateway,
        json!({ "selector": { "istio": "ingressgateway" }, "servers": [
            { "hosts": ["*/a.com", "./b.com", "team/c.com", "*", "*/*", "*.d.com", 7] },
            { "hosts": "not a list" },
        ] }),
    );
    assert_eq!(gw.hosts(), ["a.com", "b.com", "c.com", "*.d.com"]);
}

#[test]
fn contour_fqdn_only_on_root_proxies() {
    let root = source(
        SourceKind::ContourHttpProxy,
        json!({ "virtualhost": { "fqdn": "a.com" } }),
    );
    assert_eq!(root.hosts(), ["a.com"]);
    let included = source(SourceKind::ContourHttpProxy, json!({ "routes": [] }));
    assert!(included.hosts().is_empty());
}

#[test]
fn every_discovered_kind_is_known_by_group_and_kind() {
    assert_eq!(
        SourceKind::of("traefik.containo.us", "IngressRouteTCP"),
        Some(SourceKind::TraefikIngressRouteTcp)
    );
    assert_eq!(
        SourceKind::of("networking.istio.io", "Gateway"),
        Some(SourceKind::IstioGateway)
    );
    assert_eq!(SourceKind::of("gateway.networking.k8s.io", "Gateway"), None);
}

proptest! {
    #[test]
    fn the_rule_parser_never_panics(rule in ".{0,200}") {
        let _ = traefik_rule_hosts(&rule, "Host");
        let _ = traefik_rule_hosts(&rule, "HostSNI");
    }

    #[test]
    fn the_rule_parser_never_panics_on_rule_like_input(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("Host".to_owned()), Just("HostSNI".to_owned()), Just("(".to_owned()),
                Just(")".to_owned()), Just(",".to_owned()), Just("!".to_owned()),
                Just("&&".to_owned()), Just("||".to_owned()), Just("`".to_owned()),
                Just("\"".to_owned()), Just("\\".to_owned()), "[a-z.é]{0,8}",
            ],
            0..40,
        )
    ) {
        let rule = parts.concat();
        let _ = traefik_rule_hosts(&rule, "Host");
    }

    #[test]
    fn every_plain_host_call_is_found(names in proptest::collection::vec("[a-z]{1,10}\\.[a-z]{2,5}", 1..5)) {
        let rule = names
            .iter()
            .map(|n| format!("Host(`{n}`)"))
            .collect::<Vec<_>>()
            .join(" || ");
        prop_assert_eq!(traefik_rule_hosts(&rule, "Host"), names);
    }
}
