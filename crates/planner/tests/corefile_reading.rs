//! The Corefile is read as CoreDNS 1.12 reads it (issue 22, items 4 and 5). Each case was
//! checked against the real binary (`../shared/peers/coredns/coredns -conf`: its `kubernetes`
//! stand-in logs the zones it serves; a `template` per server block shows which block
//! answers); the tests marked so run it again.

mod support;

use std::collections::BTreeMap;
use std::net::IpAddr;

use hairpin_planner::admission::RefusalReason;
use hairpin_planner::corefile::{self, CorefileError, DnsEntry, PlaceOptions};
use hairpin_planner::{PlannerConfig, desired};
use hairpin_testkit::coredns::CoreDns;
use hickory_proto::rr::RecordType;
use support::{KUBEADM_COREFILE, coredns, ingress, ingress_class, proxied_lb};

const TARGET: &str = "hairpin-lb.hairpin.svc.cluster.local";

fn entries(names: &[&str]) -> Vec<DnsEntry> {
    names
        .iter()
        .map(|n| DnsEntry::new(n, TARGET).unwrap())
        .collect()
}

/// The Corefile with hairpin's blocks for `names`, the target's ClusterIP known (for the
/// server blocks without `kubernetes`, answered with `template`).
fn edited(corefile: &str, names: &[&str]) -> String {
    let opts = PlaceOptions {
        addresses: BTreeMap::from([(TARGET.to_owned(), vec![CLUSTER_IP.parse().unwrap()])]),
        ..PlaceOptions::default()
    };
    corefile::apply_placed(corefile, &entries(names), &opts)
        .unwrap()
        .text
}

const CLUSTER_IP: &str = "10.96.0.99";

const BEGIN: &str = "# BEGIN hairpin";

/// The plan of one PROXY load balancer whose Ingress names `hosts`, with this Corefile.
fn plan(corefile: &str, hosts: &[&str]) -> hairpin_planner::Plan {
    let snapshot = hairpin_planner::ClusterSnapshot {
        services: vec![proxied_lb("ingress-nginx", "ingress-nginx", "192.0.2.1")],
        ingress_classes: vec![ingress_class("nginx", "k8s.io/ingress-nginx", true)],
        ingresses: vec![ingress(
            "tenant",
            "web",
            Some("nginx"),
            hosts,
            &[],
            Some("192.0.2.1"),
        )],
        config_maps: vec![coredns(corefile)],
        ..hairpin_planner::ClusterSnapshot::default()
    };
    desired(&snapshot, &PlannerConfig::default())
}

fn refused(plan: &hairpin_planner::Plan, host: &str) -> Option<RefusalReason> {
    plan.refused
        .iter()
        .find(|r| r.hostname == host)
        .map(|r| r.reason)
}

#[test]
fn a_hash_inside_a_zone_ends_it_and_the_next_word_is_read() {
    // CoreDNS: `zones [cluster.local. in-addr.arpa.]` — the `#` ends the word, not the line.
    let corefile = KUBEADM_COREFILE.replace(
        "kubernetes cluster.local in-addr.arpa ip6.arpa",
        "kubernetes cluster.local#primary in-addr.arpa",
    );
    let info = corefile::analyze(&corefile).unwrap();
    assert_eq!(info.cluster_domain, "cluster.local");
    assert_eq!(info.kubernetes_zones, ["cluster.local", "in-addr.arpa"]);

    let plan = plan(
        &corefile,
        &["shop.example.com", "kubernetes.default.svc.cluster.local"],
    );
    assert!(plan.errors.is_empty(), "{:?}", plan.errors);
    assert_eq!(plan.dns.as_ref().unwrap().cluster_domain, "cluster.local");
    assert_eq!(
        refused(&plan, "kubernetes.default.svc.cluster.local"),
        Some(RefusalReason::ClusterZone)
    );
    let upstreams: Vec<&str> = plan.load_balancers[0]
        .routes
        .iter()
        .map(|r| r.upstream.as_str())
        .collect();
    assert_eq!(
        upstreams,
        [
            "ingress-nginx.ingress-nginx.svc.cluster.local:80",
            "ingress-nginx.ingress-nginx.svc.cluster.local:443"
        ]
    );
    // A `#` at the start of a word comments out the rest of the line.
    let info = corefile::analyze(&KUBEADM_COREFILE.replace(
        "kubernetes cluster.local in-addr.arpa ip6.arpa {",
        "kubernetes cluster.local { #in-addr.arpa ip6.arpa",
    ))
    .unwrap();
    assert_eq!(info.kubernetes_zones, ["cluster.local"]);
}

#[test]
fn port_less_comma_keys_are_three_keys() {
    let corefile = "cluster.local, in-addr.arpa, ip6.arpa {\n    errors\n    kubernetes\n    reload\n}\n.:53 {\n    errors\n    forward . /etc/resolv.conf\n    reload\n}\n";
    let info = corefile::analyze(corefile).unwrap();
    assert_eq!(info.cluster_domain, "cluster.local");
    assert_eq!(
        info.kubernetes_zones,
        ["cluster.local", "in-addr.arpa", "ip6.arpa"]
    );
    let plan = plan(
        corefile,
        &["shop.example.com", "kubernetes.default.svc.cluster.local"],
    );
    assert_eq!(
        refused(&plan, "kubernetes.default.svc.cluster.local"),
        Some(RefusalReason::ClusterZone)
    );
    assert_eq!(plan.dns.as_ref().unwrap().cluster_domain, "cluster.local");
    // The names go to the root block, where CoreDNS looks them up.
    let text = edited(corefile, &["shop.example.com"]);
    let root = text.find(".:53 {").unwrap();
    assert!(text[root..].contains(BEGIN), "{text}");
}

#[test]
fn a_byte_order_mark_is_ignored_and_kept() {
    let corefile = format!("\u{feff}{KUBEADM_COREFILE}");
    let info = corefile::analyze(&corefile).unwrap();
    assert!(info.serves_root);
    assert_eq!(info.cluster_domain, "cluster.local");
    let edit = corefile::apply(&corefile, &entries(&["shop.example.com"])).unwrap();
    assert!(edit.text.starts_with('\u{feff}'));
    assert!(
        edit.text
            .contains("rewrite stop name exact shop.example.com")
    );
    assert_eq!(corefile::remove(&edit.text).unwrap().text, corefile);
    // And the plan writes it (it was a silent no-op).
    let plan = plan(&corefile, &["shop.example.com"]);
    assert!(plan.errors.is_empty(), "{:?}", plan.errors);
    let write = &plan.dns.as_ref().unwrap().writes[0];
    assert!(write.changed && write.desired.contains("shop.example.com"));
}

const UPPER_STUB: &str = ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n    }\n    forward . /etc/resolv.conf\n    reload\n}\nExample.COM.:53 {\n    errors\n    forward . 1.1.1.1\n}\n";

#[test]
fn an_upper_case_stub_key_gets_no_answers() {
    // CoreDNS never routes a query to `Example.COM.` (any case asked): the root block answers.
    let text = edited(UPPER_STUB, &["www.example.com"]);
    let stub = text.find("Example.COM.:53").unwrap();
    assert!(text[..stub].contains(BEGIN), "{text}");
    assert!(!text[stub..].contains(BEGIN), "{text}");
    // A lower-case stub key is where CoreDNS looks.
    let lower = UPPER_STUB.replace("Example.COM.:53", "example.com:53");
    let text = edited(&lower, &["www.example.com"]);
    let stub = text.find("example.com:53").unwrap();
    assert!(text[stub..].contains(BEGIN), "{text}");
    assert!(!text[..stub].contains(BEGIN), "{text}");
}

#[test]
fn real_coredns_answers_from_the_block_hairpin_chose() {
    let target: IpAddr = CLUSTER_IP.parse().unwrap();
    for corefile in [
        UPPER_STUB.to_owned(),
        UPPER_STUB.replace("Example.COM.:53", "example.com:53"),
        format!("\u{feff}{UPPER_STUB}"),
    ] {
        let text = edited(&corefile, &["www.example.com"]);
        let Some(dns) = CoreDns::start(
            "real_coredns_answers_from_the_block_hairpin_chose",
            &text,
            &[(TARGET, target)],
        ) else {
            return;
        };
        let answer = dns.query("www.example.com.", RecordType::A);
        assert_eq!(answer.addresses(), [target], "{text}");
    }
}

#[test]
fn non_breaking_spaces_separate_words() {
    let corefile = KUBEADM_COREFILE.replace(".:53 {", ".:53\u{a0}{").replace(
        "kubernetes cluster.local in-addr.arpa",
        "kubernetes\u{a0}cluster.local\u{a0}in-addr.arpa",
    );
    let info = corefile::analyze(&corefile).unwrap();
    assert!(info.serves_root);
    assert_eq!(info.cluster_domain, "cluster.local");
    assert!(corefile::apply(&corefile, &entries(&["shop.example.com"])).is_ok());
}

#[test]
fn quoted_keys_and_zones_are_read_without_their_quotes() {
    let corefile = KUBEADM_COREFILE
        .replace(".:53 {", "\".:53\" {")
        .replace("kubernetes cluster.local", "kubernetes \"cluster.local\"");
    let info = corefile::analyze(&corefile).unwrap();
    assert!(info.serves_root, "{:?}", info.warnings);
    assert_eq!(info.cluster_domain, "cluster.local");
    let edit = corefile::apply(&corefile, &entries(&["shop.example.com"])).unwrap();
    assert!(
        edit.text
            .contains("rewrite stop name exact shop.example.com")
    );
}

#[test]
fn a_brace_less_single_server_corefile_is_refused_for_what_it_is() {
    let corefile = ".:53\nerrors\nkubernetes cluster.local {\n    pods insecure\n}\nforward . /etc/resolv.conf\n";
    let err = corefile::analyze(corefile).unwrap_err();
    assert!(
        matches!(&err, CorefileError::UnsupportedLayout { line: 1, message } if message.contains("`.:53` has no braces")),
        "{err}"
    );
    let plan = plan(corefile, &["shop.example.com"]);
    assert!(
        plan.errors
            .iter()
            .any(|e| e.to_string().contains("has no braces")),
        "{:?}",
        plan.errors
    );
}

#[test]
fn every_kubernetes_zone_is_protected() {
    // Issue 22 item 4: the second block's zone is the cluster's too.
    let corefile = "cluster.local:53 {\n    errors\n    kubernetes cluster.local\n    forward . /etc/resolv.conf\n    reload\n}\nk8s.internal:53 {\n    errors\n    kubernetes k8s.internal\n}\n.:53 {\n    forward . /etc/resolv.conf\n}\n";
    let info = corefile::analyze(corefile).unwrap();
    assert_eq!(info.kubernetes_zones, ["cluster.local", "k8s.internal"]);
    let plan = plan(
        corefile,
        &[
            "shop.example.com",
            "kubernetes.default.svc.k8s.internal",
            "*.svc.k8s.internal",
            "kubernetes.default.svc.cluster.local",
        ],
    );
    for host in [
        "kubernetes.default.svc.k8s.internal",
        "*.svc.k8s.internal",
        "kubernetes.default.svc.cluster.local",
    ] {
        assert_eq!(
            refused(&plan, host),
            Some(RefusalReason::ClusterZone),
            "{host}"
        );
    }
    let names: Vec<&str> = plan.load_balancers[0]
        .hostnames
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    assert_eq!(names, ["shop.example.com"]);
    // A `kubernetes` plugin without zones serves its server block's zones.
    let info =
        corefile::analyze(&corefile.replace("kubernetes k8s.internal", "kubernetes")).unwrap();
    assert_eq!(info.kubernetes_zones, ["cluster.local", "k8s.internal"]);
}
