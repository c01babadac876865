//! Hostname admission ([`hairpin_planner::admission`]): golden and property tests of each rule,
//! and the tenant fixture `examples/tenant-admission.yaml`.
//!
//! `HAIRPIN_BLESS=1 cargo test -p hairpin-planner --test admission` rewrites the golden plan.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::PathBuf;

use hairpin_planner::admission::RefusalReason;
use hairpin_planner::admission::{Admission, Origin};
use hairpin_planner::name::Host;
use hairpin_planner::name::WildcardLabels;
use hairpin_planner::{AdmissionConfig, NamespacePolicy};
use hairpin_planner::{ClusterSnapshot, ObjectRef, PlannerConfig, desired, load, render};
use proptest::prelude::*;
use serde_json::json;
use support::{KUBEADM_COREFILE, coredns, ingress, proxied_lb};

fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn load_example(name: &str) -> ClusterSnapshot {
    let path = repo_file(name);
    let text = fs::read_to_string(&path).unwrap();
    let mut snapshot = ClusterSnapshot::default();
    load::load_yaml(&mut snapshot, name, &text).unwrap();
    snapshot
}

fn planned_hosts(plan: &hairpin_planner::Plan) -> BTreeSet<String> {
    plan.load_balancers
        .iter()
        .flat_map(|lb| lb.hostnames.iter().map(|h| h.name.clone()))
        .collect()
}

#[test]
fn tenant_fixture_rewrites_only_its_legitimate_hosts_and_reports_each_refusal() {
    let snapshot = load_example("examples/tenant-admission.yaml");
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert!(plan.errors.is_empty(), "{:?}", plan.errors);
    assert_eq!(
        planned_hosts(&plan),
        BTreeSet::from([
            "shop.tenant-a.example.com".to_owned(),
            "*.apps.tenant-a.example.co.uk".to_owned()
        ])
    );
    let refused: Vec<(&str, &str, &str)> = plan
        .refused
        .iter()
        .map(|r| (r.hostname.as_str(), r.reason.label(), r.source.as_str()))
        .collect();
    assert_eq!(
        refused,
        [
            ("*.co.uk", "public_suffix", "Ingress tenant-a/storefront"),
            (
                "*.svc.cluster.local",
                "cluster_zone",
                "Ingress tenant-a/storefront"
            ),
            (
                "kubernetes.default.svc.cluster.local",
                "cluster_zone",
                "Ingress tenant-a/storefront"
            ),
            ("localhost", "localhost", "Ingress tenant-a/storefront"),
            (
                "metadata.google.internal",
                "cloud_metadata",
                "Ingress tenant-a/storefront"
            ),
        ]
    );
    for r in &plan.refused {
        assert_eq!(
            (r.kind.as_str(), &r.object),
            ("Ingress", &ObjectRef::new("tenant-a", "storefront"))
        );
        let warned = plan.warnings.iter().any(|w| {
            w.subject == "Ingress tenant-a/storefront"
                && w.message.contains(&r.hostname)
                && w.message.contains(r.reason.label())
        });
        assert!(warned, "no warning for {r:?}: {:#?}", plan.warnings);
    }
    // The Corefile gets rules for the legitimate names only.
    let dns = plan.dns.as_ref().unwrap();
    let written: Vec<&str> = dns.entries.iter().map(|e| e.hostname.as_str()).collect();
    assert_eq!(
        written,
        ["*.apps.tenant-a.example.co.uk", "shop.tenant-a.example.com"]
    );
    for bad in [
        "svc\\.cluster",
        "co\\.uk\\.$",
        "metadata",
        "localhost",
        "kubernetes.default",
    ] {
        let rules = dns
            .coredns()
            .unwrap()
            .desired
            .lines()
            .filter(|l| l.contains("rewrite"));
        for rule in rules {
            assert!(!rule.contains(bad) || rule.contains("tenant-a"), "{rule}");
        }
    }

    let text = render::text(&plan);
    let golden = repo_file("crates/planner/tests/golden/admission/tenant-admission.plan.txt");
    if hairpin_testkit::golden::blessing() {
        hairpin_testkit::golden::bless(&golden, &text);
    }
    let expected = fs::read_to_string(&golden).unwrap();
    assert_eq!(
        text,
        expected,
        "plan text differs from {}",
        golden.display()
    );
}

#[test]
fn the_example_cluster_has_nothing_refused() {
    let plan = desired(
        &load_example("examples/cluster.yaml"),
        &PlannerConfig::default(),
    );
    assert!(plan.refused.is_empty(), "{:#?}", plan.refused);
    assert!(!render::text(&plan).contains("Refused"));
    assert!(!render::yaml(&plan).unwrap().contains("# refused"));
}

/// The reason `host` (from an Ingress in `tenant`, wildcards meaning `labels`) is refused
/// for, with the kubeadm zones and `config`, or `None` when admitted.
fn verdict_with(
    config: &AdmissionConfig,
    snapshot: &ClusterSnapshot,
    zones: &[&str],
    namespace: &str,
    host: &str,
    labels: WildcardLabels,
) -> Option<RefusalReason> {
    let lb = ObjectRef::new("ingress", "lb");
    let lbs = BTreeSet::from([&lb]);
    let admission = Admission::new(
        config,
        snapshot,
        zones,
        "hairpin.io/allowed-hostnames",
        &lbs,
    );
    let host = match Host::parse(host) {
        Ok(h) => h,
        Err(_) => return Some(RefusalReason::Invalid),
    };
    let origin = Origin::new("Ingress", ObjectRef::new(namespace, "web"));
    admission
        .check(&host, labels, &origin, &lb)
        .err()
        .map(|(reason, _)| reason)
}

const KUBEADM_ZONES: [&str; 3] = ["cluster.local", "in-addr.arpa", "ip6.arpa"];

fn verdict(host: &str, labels: WildcardLabels) -> Option<RefusalReason> {
    verdict_with(
        &AdmissionConfig::default(),
        &ClusterSnapshot::default(),
        &KUBEADM_ZONES,
        "tenant",
        host,
        labels,
    )
}

#[test]
fn golden_table_of_the_name_rules() {
    use RefusalReason::*;
    use WildcardLabels::{One, OneOrMore};
    let table: &[(&str, WildcardLabels, Option<RefusalReason>)] = &[
        // Cluster zones, and wildcards covering them.
        (
            "kubernetes.default.svc.cluster.local",
            One,
            Some(ClusterZone),
        ),
        ("cluster.local", One, Some(ClusterZone)),
        ("*.svc.cluster.local", One, Some(ClusterZone)),
        ("*.cluster.local", OneOrMore, Some(ClusterZone)),
        ("*.local", One, Some(ClusterZone)),
        ("*.local", OneOrMore, Some(ClusterZone)),
        ("cluster.local.example.com", One, None),
        ("mycluster.local", One, None),
        // Reverse zones.
        ("1.0.0.10.in-addr.arpa", One, Some(ReverseZone)),
        ("*.in-addr.arpa", One, Some(ReverseZone)),
        ("*.arpa", OneOrMore, Some(ReverseZone)),
        ("b.a.ip6.arpa", One, Some(ReverseZone)),
        // localhost.
        ("localhost", One, Some(Localhost)),
        ("app.localhost", One, Some(Localhost)),
        ("*.localhost", One, Some(Localhost)),
        ("localhost.example.com", One, None),
        // Cloud metadata.
        ("metadata", One, Some(CloudMetadata)),
        ("metadata.google.internal", One, Some(CloudMetadata)),
        ("*.google.internal", One, Some(CloudMetadata)),
        ("instance-data", One, Some(CloudMetadata)),
        ("instance-data.ec2.internal", One, Some(CloudMetadata)),
        (
            "instance-data.eu-west-1.compute.internal",
            One,
            Some(CloudMetadata),
        ),
        ("ip-10-0-0-1.ec2.internal", One, Some(CloudMetadata)),
        ("*.compute.internal", OneOrMore, Some(CloudMetadata)),
        ("metadata.example.com", One, None),
        // Single labels.
        ("intranet", One, Some(SingleLabel)),
        ("com", One, Some(SingleLabel)),
        // Public suffixes (ICANN and private sections), and wildcards directly under one.
        ("co.uk", One, Some(PublicSuffix)),
        ("*.co.uk", One, Some(PublicSuffix)),
        ("*.com", One, Some(PublicSuffix)),
        ("*.com", OneOrMore, Some(PublicSuffix)),
        ("github.io", One, Some(PublicSuffix)),
        ("*.github.io", One, Some(PublicSuffix)),
        ("*.example.co.uk", One, None),
        ("shop.example.co.uk", One, None),
        ("me.github.io", One, None),
        ("example.com", One, None),
        // TLDs the list does not know: the TLD is the suffix (the implicit `*` rule).
        ("*.internal", One, Some(PublicSuffix)),
        ("*.test", One, Some(PublicSuffix)),
        ("app.example.internal", One, None),
        ("*.example.internal", One, None),
        ("example.internal", One, None),
        ("shop.test", One, None),
        // Not a hostname at all.
        ("10.0.0.1", One, Some(Invalid)),
        ("a..b.com", One, Some(Invalid)),
    ];
    let mut wrong = Vec::new();
    for (host, labels, want) in table {
        let got = verdict(host, *labels);
        if got != *want {
            wrong.push(format!("{host} ({labels:?}): got {got:?}, want {want:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn deny_hostnames_are_suffix_patterns() {
    let config = AdmissionConfig {
        deny_hostnames: ["corp.example", "*.internal.example.com"]
            .iter()
            .map(|h| Host::parse(h).unwrap())
            .collect(),
        ..AdmissionConfig::default()
    };
    let v = |host: &str, labels| {
        verdict_with(
            &config,
            &ClusterSnapshot::default(),
            &KUBEADM_ZONES,
            "t",
            host,
            labels,
        )
    };
    use WildcardLabels::{One, OneOrMore};
    let denied = Some(RefusalReason::Denied);
    assert_eq!(v("corp.example", One), denied);
    assert_eq!(v("a.b.corp.example", One), denied);
    assert_eq!(v("*.corp.example", One), denied);
    assert_eq!(v("mycorp.example", One), None);
    assert_eq!(v("a.internal.example.com", One), denied);
    assert_eq!(v("*.internal.example.com", One), denied);
    // `*.zone` leaves the zone's own name alone.
    assert_eq!(v("internal.example.com", One), None);
    // `*.example.com` as one label covers internal.example.com itself only; as a suffix
    // match it covers names under it too.
    assert_eq!(v("*.example.com", One), None);
    assert_eq!(v("*.example.com", OneOrMore), denied);
}

#[test]
fn the_cluster_domain_comes_from_the_corefile() {
    // A cluster with its own domain: that zone is protected, `cluster.local` is an ordinary
    // name there (if one wants it refused, --deny-hostnames says so).
    let zones = ["k8s.example.net", "in-addr.arpa", "ip6.arpa"];
    let v = |host: &str| {
        verdict_with(
            &AdmissionConfig::default(),
            &ClusterSnapshot::default(),
            &zones,
            "t",
            host,
            WildcardLabels::One,
        )
    };
    assert_eq!(
        v("api.default.svc.k8s.example.net"),
        Some(RefusalReason::ClusterZone)
    );
    assert_eq!(v("*.k8s.example.net"), Some(RefusalReason::ClusterZone));
    assert_eq!(v("shop.example.net"), None);

    // Through the planner: a Corefile serving two zones protects both.
    let corefile = KUBEADM_COREFILE.replace(
        "kubernetes cluster.local in-addr.arpa ip6.arpa",
        "kubernetes cluster.local corp.example in-addr.arpa ip6.arpa",
    );
    let snapshot = ClusterSnapshot {
        services: vec![proxied_lb("ingress", "nginx", "192.0.2.1")],
        ingresses: vec![ingress(
            "tenant",
            "web",
            None,
            &["db.corp.example", "shop.example.com"],
            &[],
            Some("192.0.2.1"),
        )],
        config_maps: vec![coredns(&corefile)],
        ..ClusterSnapshot::default()
    };
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert_eq!(
        planned_hosts(&plan),
        BTreeSet::from(["shop.example.com".to_owned()])
    );
    assert_eq!(plan.refused.len(), 1);
    assert_eq!(plan.refused[0].hostname, "db.corp.example");
    assert_eq!(plan.refused[0].reason, RefusalReason::ClusterZone);
}

fn namespace(name: &str, labels: serde_json::Value) -> k8s_openapi::api::core::v1::Namespace {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": { "name": name, "labels": labels }
    }))
    .unwrap()
}

#[test]
fn hostname_namespaces_by_name_and_by_label() {
    let snapshot = ClusterSnapshot {
        namespaces: vec![
            namespace("web", json!({ "team": "web" })),
            namespace("shop", json!({ "team": "shop" })),
            namespace("bare", json!({})),
        ],
        ..ClusterSnapshot::default()
    };
    let check = |policy: &str, ns: &str| {
        let config = AdmissionConfig {
            hostname_namespaces: policy.parse().unwrap(),
            ..AdmissionConfig::default()
        };
        verdict_with(
            &config,
            &snapshot,
            &KUBEADM_ZONES,
            ns,
            "a.example.com",
            WildcardLabels::One,
        )
    };
    let refused = Some(RefusalReason::NamespaceNotAllowed);
    assert_eq!(check("", "anything"), None);
    assert_eq!(check("web,shop", "shop"), None);
    assert_eq!(check("web,shop", "bare"), refused);
    assert_eq!(check("team=web", "web"), None);
    assert_eq!(check("team=web", "shop"), refused);
    assert_eq!(check("team!=web", "shop"), None);
    assert_eq!(check("team!=web", "bare"), None);
    assert_eq!(check("team!=web", "web"), refused);
    // A namespace the snapshot does not hold matches no selector.
    assert_eq!(check("team!=web", "unknown"), refused);
    // The name rules come first.
    let config = AdmissionConfig {
        hostname_namespaces: NamespacePolicy::Names(BTreeSet::from(["web".to_owned()])),
        ..AdmissionConfig::default()
    };
    assert_eq!(
        verdict_with(
            &config,
            &snapshot,
            &KUBEADM_ZONES,
            "shop",
            "localhost",
            WildcardLabels::One
        ),
        Some(RefusalReason::Localhost)
    );
}

#[test]
fn a_load_balancer_allow_list_limits_its_hostnames() {
    let mut lb = proxied_lb("ingress", "nginx", "192.0.2.1");
    lb.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            "hairpin.io/allowed-hostnames".into(),
            "*.example.com, shop.example.org, not valid".into(),
        );
    let snapshot = ClusterSnapshot {
        services: vec![lb, proxied_lb("ingress", "other", "192.0.2.2")],
        ingresses: vec![
            ingress(
                "tenant",
                "web",
                None,
                &[
                    "a.example.com",
                    "a.b.example.com",
                    "shop.example.org",
                    "evil.example.org",
                ],
                &["*.x.example.com"],
                Some("192.0.2.1"),
            ),
            ingress(
                "tenant",
                "other",
                None,
                &["evil.example.org"],
                &[],
                Some("192.0.2.2"),
            ),
        ],
        config_maps: vec![coredns(KUBEADM_COREFILE)],
        ..ClusterSnapshot::default()
    };
    let plan = desired(&snapshot, &PlannerConfig::default());
    let of = |name: &str| -> BTreeSet<String> {
        plan.load_balancers
            .iter()
            .filter(|lb| lb.load_balancer.service.name == name)
            .flat_map(|lb| lb.hostnames.iter().map(|h| h.name.clone()))
            .collect()
    };
    assert_eq!(
        of("nginx"),
        BTreeSet::from(
            [
                "*.x.example.com",
                "a.b.example.com",
                "a.example.com",
                "shop.example.org"
            ]
            .map(String::from)
        )
    );
    // The other load balancer has no allow-list, and the refused claim is no conflict.
    assert_eq!(of("other"), BTreeSet::from(["evil.example.org".to_owned()]));
    assert!(plan.conflicts.is_empty());
    let refused: Vec<(&str, RefusalReason)> = plan
        .refused
        .iter()
        .map(|r| (r.hostname.as_str(), r.reason))
        .collect();
    assert_eq!(
        refused,
        [("evil.example.org", RefusalReason::NotInAllowList)]
    );
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.subject == "Service ingress/nginx" && w.message.contains("\"not valid\"")),
        "{:#?}",
        plan.warnings
    );
}

#[test]
fn gateway_and_annotation_sources_are_admitted_too() {
    let mut lb = proxied_lb("ingress", "nginx", "192.0.2.1");
    lb.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            "hairpin.io/hostnames".into(),
            "ok.example.com, kube-dns.kube-system.svc.cluster.local".into(),
        );
    let gateway: gateway_api::gateways::Gateway = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": { "name": "gw", "namespace": "tenant" },
        "spec": {
            "gatewayClassName": "x",
            "listeners": [
                { "name": "a", "port": 443, "protocol": "HTTPS", "hostname": "*.local" },
                { "name": "b", "port": 443, "protocol": "HTTPS", "hostname": "gw.example.com" }
            ]
        },
        "status": { "addresses": [{ "value": "192.0.2.1" }] }
    }))
    .unwrap();
    let snapshot = ClusterSnapshot {
        services: vec![lb],
        gateways: vec![gateway],
        config_maps: vec![coredns(KUBEADM_COREFILE)],
        ..ClusterSnapshot::default()
    };
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert_eq!(
        planned_hosts(&plan),
        BTreeSet::from(["gw.example.com".to_owned(), "ok.example.com".to_owned()])
    );
    let refused: Vec<(&str, &str, &str)> = plan
        .refused
        .iter()
        .map(|r| (r.hostname.as_str(), r.kind.as_str(), r.reason.label()))
        .collect();
    assert_eq!(
        refused,
        [
            ("*.local", "Gateway", "cluster_zone"),
            (
                "kube-dns.kube-system.svc.cluster.local",
                "Service",
                "cluster_zone"
            ),
        ]
    );
}

fn label() -> impl Strategy<Value = String> {
    "[a-z]([a-z0-9-]{0,8}[a-z0-9])?"
}

fn labels(min: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(label(), min..4).prop_map(|l| l.join("."))
}

fn any_labels() -> impl Strategy<Value = WildcardLabels> {
    prop_oneof![Just(WildcardLabels::One), Just(WildcardLabels::OneOrMore)]
}

proptest! {
    #[test]
    fn everything_in_a_cluster_zone_is_refused(
        head in labels(1),
        domain in prop::sample::select(vec!["cluster.local", "k8s.example.net", "corp"]),
        wildcard in prop::bool::ANY,
        kind in any_labels(),
    ) {
        let zones = [domain, "in-addr.arpa", "ip6.arpa"];
        let host = if wildcard { format!("*.{head}.{domain}") } else { format!("{head}.{domain}") };
        let got = verdict_with(&AdmissionConfig::default(), &ClusterSnapshot::default(), &zones, "t", &host, kind);
        prop_assert_eq!(got, Some(RefusalReason::ClusterZone), "{}", host);
        // A wildcard one level above the zone covers its apex.
        let parent = domain.split_once('.').map_or("", |(_, p)| p);
        if !parent.is_empty() {
            let got = verdict_with(&AdmissionConfig::default(), &ClusterSnapshot::default(), &zones, "t", &format!("*.{parent}"), kind);
            prop_assert!(got.is_some(), "*.{}", parent);
        }
    }

    #[test]
    fn reverse_zones_and_localhost_are_refused(head in labels(1), wildcard in prop::bool::ANY, kind in any_labels()) {
        let w = if wildcard { "*." } else { "" };
        for (zone, want) in [
            ("in-addr.arpa", RefusalReason::ReverseZone),
            ("ip6.arpa", RefusalReason::ReverseZone),
            ("localhost", RefusalReason::Localhost),
        ] {
            let host = format!("{w}{head}.{zone}");
            prop_assert_eq!(verdict(&host, kind), Some(want), "{}", host);
        }
    }

    #[test]
    fn single_labels_are_refused(name in label()) {
        let got = verdict(&name, WildcardLabels::One);
        prop_assert!(
            matches!(got, Some(RefusalReason::SingleLabel | RefusalReason::CloudMetadata | RefusalReason::Localhost)),
            "{}: {:?}", name, got
        );
    }

    #[test]
    fn public_suffixes_and_wildcards_directly_under_them_are_refused(
        suffix in prop::sample::select(vec!["co.uk", "com", "org", "com.au", "github.io", "pages.dev", "internal", "test"]),
        owner in label(),
        head in labels(1),
        kind in any_labels(),
    ) {
        if suffix.contains('.') {
            prop_assert_eq!(verdict(suffix, kind), Some(RefusalReason::PublicSuffix));
        }
        // `*.internal` as a suffix match also covers the cloud metadata names under it.
        let got = verdict(&format!("*.{suffix}"), kind);
        prop_assert!(
            got == Some(RefusalReason::PublicSuffix)
                || (suffix == "internal" && got == Some(RefusalReason::CloudMetadata)),
            "*.{}: {:?}", suffix, got
        );
        // One label more is somebody's domain: admitted, as are names and wildcards under it
        // (but for the cloud providers' own zones, `google.internal` and the like).
        // The `-owner` ending keeps the generated label off the Public Suffix List, which also
        // lists private registries one label under these suffixes (`it.com`, `eu.org`).
        let domain = format!("{owner}-owner.{suffix}");
        prop_assert_eq!(verdict(&domain, kind), None, "{}", domain);
        prop_assert_eq!(verdict(&format!("{head}.{domain}"), kind), None);
        prop_assert_eq!(verdict(&format!("*.{domain}"), kind), None);
    }

    #[test]
    fn ordinary_names_are_admitted(head in labels(1), kind in any_labels(), wildcard in prop::bool::ANY) {
        let host = if wildcard { format!("*.{head}.example.com") } else { format!("{head}.example.com") };
        prop_assert_eq!(verdict(&host, kind), None, "{}", host);
    }

    #[test]
    fn deny_hostnames_cover_their_zone_and_nothing_beside_it(zone in labels(2), head in labels(1), kind in any_labels()) {
        let config = AdmissionConfig {
            deny_hostnames: vec![Host::parse(&format!("{zone}.example.com")).unwrap()],
            ..AdmissionConfig::default()
        };
        let v = |host: &str| verdict_with(&config, &ClusterSnapshot::default(), &KUBEADM_ZONES, "t", host, kind);
        prop_assert_eq!(v(&format!("{zone}.example.com")), Some(RefusalReason::Denied));
        prop_assert_eq!(v(&format!("{head}.{zone}.example.com")), Some(RefusalReason::Denied));
        prop_assert_eq!(v(&format!("*.{zone}.example.com")), Some(RefusalReason::Denied));
        prop_assert_eq!(v(&format!("{head}x.example.org")), None);
        prop_assert_eq!(v(&format!("x{zone}.example.com")), None);
    }

    #[test]
    fn namespace_names_allow_exactly_those_namespaces(
        allowed in prop::collection::btree_set(label(), 1..4),
        ns in label(),
    ) {
        let config = AdmissionConfig {
            hostname_namespaces: NamespacePolicy::Names(allowed.clone()),
            ..AdmissionConfig::default()
        };
        let got = verdict_with(&config, &ClusterSnapshot::default(), &KUBEADM_ZONES, &ns, "a.example.com", WildcardLabels::One);
        prop_assert_eq!(got.is_none(), allowed.contains(&ns));
    }
}

/// Issue 22 item 3: a wildcard is refused when a public suffix lies at or under what it
/// covers, in its one-label (Ingress) and suffix (Gateway) meanings.
#[test]
fn wildcards_over_public_suffixes_are_refused() {
    let refusal = |host: &str, labels: WildcardLabels| {
        let h = Host::parse(host).unwrap();
        let plan_zones: [&str; 0] = [];
        let config = AdmissionConfig::default();
        let snapshot = ClusterSnapshot::default();
        let admission = Admission::new(&config, &snapshot, plan_zones, "a", &BTreeSet::new());
        let origin = Origin::new("Ingress", ObjectRef::new("t", "i"));
        admission
            .check(&h, labels, &origin, &ObjectRef::new("lb", "lb"))
            .err()
    };
    for host in [
        "*.amazonaws.com",
        "*.compute.amazonaws.com",
        "*.elb.amazonaws.com",
        "*.s3.amazonaws.com",
        "*.com",
        "*.co.uk",
    ] {
        for labels in [WildcardLabels::One, WildcardLabels::OneOrMore] {
            let (reason, detail) = refusal(host, labels).unwrap_or_else(|| panic!("{host}"));
            assert_eq!(reason, RefusalReason::PublicSuffix, "{host}: {detail}");
        }
    }
    assert!(
        refusal("*.amazonaws.com", WildcardLabels::One)
            .unwrap()
            .1
            .contains("suffixes directly under amazonaws.com")
    );
    // Legitimate wildcards stay admitted.
    for host in [
        "*.example.com",
        "*.apps.example.co.uk",
        "*.shop.example.internal",
        "*.my-bucket.example.org",
    ] {
        for labels in [WildcardLabels::One, WildcardLabels::OneOrMore] {
            assert_eq!(refusal(host, labels), None, "{host}");
        }
    }
    // Exact names under such a domain are not suffixes themselves: admitted.
    assert_eq!(refusal("api.example.com", WildcardLabels::One), None);
}

/// The list of domains with public suffixes under them is the `psl` crate's list: regenerated
/// from the rules of the version in Cargo.lock (from Cargo's registry sources), compared, and
/// rewritten with `HAIRPIN_BLESS=1`.
#[test]
fn psl_parents_match_the_list() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lock = fs::read_to_string(root.join("Cargo.lock")).unwrap();
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("\nname = \"psl\"\n"))
        .and_then(|p| p.split("version = \"").nth(1))
        .and_then(|v| v.split('"').next())
        .expect("psl in Cargo.lock")
        .to_owned();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap();
    let rules = fs::read_dir(cargo_home.join("registry/src"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.path().join(format!("psl-{version}/data/rules.txt")))
        .find(|p| p.is_file());
    let Some(rules) = rules else {
        // Cargo unpacks them to build the crate: a fixture every build has.
        hairpin_testkit::skip::skip(
            "psl_parents_match_the_list",
            hairpin_testkit::skip::Cause::Missing,
            &format!(
                "the sources of psl {version} are not in Cargo's registry (looked for \
                 psl-{version}/data/rules.txt under {})",
                cargo_home.join("registry/src").display()
            ),
        );
        return;
    };
    let mut depth: BTreeMap<String, usize> = BTreeMap::new();
    for rule in fs::read_to_string(rules).unwrap().lines() {
        let rule = rule.trim().to_ascii_lowercase();
        if rule.is_empty() || rule.starts_with("//") || rule.starts_with('!') || !rule.is_ascii() {
            continue;
        }
        let labels: Vec<&str> = rule.split('.').collect();
        for cut in 1..labels.len() {
            if labels[cut..].contains(&"*") {
                continue;
            }
            let d = depth.entry(labels[cut..].join(".")).or_insert(cut);
            *d = (*d).min(cut);
        }
    }
    let text = hairpin_planner::admission::psl_parents_text();
    let header: String = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let generated: String = depth.iter().map(|(n, d)| format!("{n} {d}\n")).collect();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/psl_parents.txt");
    if hairpin_testkit::golden::blessing() {
        hairpin_testkit::golden::bless(&path, &format!("{header}{generated}"));
        return;
    }
    assert_eq!(
        &text[header.len()..],
        generated,
        "{} is not the list of psl {version}; run with HAIRPIN_BLESS=1",
        path.display()
    );
}

/// Issue 22 item 6: names the pods' search path completes into cluster names are refused;
/// public names, and private ones under a TLD that is not a namespace, are not.
#[test]
fn search_path_names_are_refused() {
    let yaml = r#"
apiVersion: v1
kind: Service
metadata: { name: ingress-nginx-controller, namespace: ingress-nginx, annotations: { hairpin.io/proxy-protocol: v1 } }
spec: { type: LoadBalancer, ports: [{ name: http, port: 80 }] }
status: { loadBalancer: { ingress: [{ ip: 192.0.2.1 }] } }
---
apiVersion: v1
kind: Namespace
metadata: { name: dev }
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: web, namespace: tenant }
spec:
  rules:
    - host: kubernetes.default.svc
    - host: kubernetes.default
    - host: "*.default.svc"
    - host: ingress-nginx-controller.ingress-nginx
    - host: x.y.pod
    - host: metrics.kube-system
    - host: shop.example.com
    - host: app.dev
    - host: app.example.internal
    - host: "*.apps.example.internal"
status: { loadBalancer: { ingress: [{ ip: 192.0.2.1 }] } }
"#;
    let mut snapshot = ClusterSnapshot::default();
    load::load_yaml(&mut snapshot, "t.yaml", yaml).unwrap();
    snapshot.config_maps.push(coredns(KUBEADM_COREFILE));
    let plan = desired(&snapshot, &PlannerConfig::default());
    let refused: BTreeMap<&str, (RefusalReason, &str)> = plan
        .refused
        .iter()
        .map(|r| (r.hostname.as_str(), (r.reason, r.detail.as_str())))
        .collect();
    for host in [
        "kubernetes.default.svc",
        "kubernetes.default",
        "*.default.svc",
        "ingress-nginx-controller.ingress-nginx",
        "x.y.pod",
        "metrics.kube-system",
    ] {
        assert_eq!(
            refused.get(host).map(|r| r.0),
            Some(RefusalReason::SearchPath),
            "{host}: {refused:?}"
        );
    }
    assert!(
        refused["ingress-nginx-controller.ingress-nginx"]
            .1
            .starts_with("ingress-nginx is a namespace of the cluster: the pods' DNS search path"),
        "{refused:?}"
    );
    let planned: Vec<&str> = plan.load_balancers[0]
        .hostnames
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    assert_eq!(
        planned,
        [
            "*.apps.example.internal",
            "app.dev",
            "app.example.internal",
            "shop.example.com"
        ]
    );
}
