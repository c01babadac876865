//! Hostnames per load balancer: Ingress status, IngressClass fallback, Gateways and routes,
//! annotations, wildcards, normalization and conflicts.

mod support;

use std::sync::Arc;

use hairpin_planner::hostnames::intersect;
use hairpin_planner::name::Host;
use hairpin_planner::name::WildcardLabels;
use hairpin_planner::{ClusterSnapshot, PlannerConfig, desired};
use serde_json::json;
use support::{
    KUBEADM_COREFILE, coredns, ingress, ingress_class, lb_service, proxied_lb, snapshot_from_yaml,
};

/// Hostnames planned for `ns/name`.
fn hosts_of(plan: &hairpin_planner::Plan, ns: &str, name: &str) -> Vec<String> {
    plan.load_balancers
        .iter()
        .find(|lb| {
            lb.load_balancer.service.namespace == ns && lb.load_balancer.service.name == name
        })
        .map(|lb| lb.hostnames.iter().map(|h| h.name.clone()).collect())
        .unwrap_or_default()
}

/// The workspace's one validator, as the planner reads hostnames.
fn normalize(host: &str) -> Result<String, hairpin_planner::name::NameError> {
    Host::parse(host).map(String::from)
}

#[test]
fn normalization_and_validation() {
    assert_eq!(normalize("Shop.Example.COM.").unwrap(), "shop.example.com");
    assert_eq!(
        normalize("*.apps.example.com").unwrap(),
        "*.apps.example.com"
    );
    assert!(normalize("a.*.example.com").is_err());
    assert!(normalize("-bad.example.com").is_err());
    assert!(normalize("under_score.example.com").is_err());
    assert!(normalize("192.0.2.1").is_err());
    assert!(normalize("").is_err());
    assert!(normalize(&format!("{}.example.com", "a".repeat(64))).is_err());
}

#[test]
fn ingress_matched_by_status_ip_rules_and_tls() {
    let snapshot = ClusterSnapshot {
        services: vec![
            proxied_lb("ingress", "nginx", "192.0.2.1"),
            proxied_lb("ingress", "other", "192.0.2.2"),
        ],
        ingresses: vec![
            ingress(
                "shop",
                "web",
                None,
                &["Shop.Example.com."],
                &["www.example.com", "shop.example.com"],
                Some("192.0.2.1"),
            ),
            ingress(
                "blog",
                "blog",
                None,
                &["blog.example.com"],
                &[],
                Some("192.0.2.2"),
            ),
            ingress(
                "x",
                "elsewhere",
                None,
                &["elsewhere.example.com"],
                &[],
                Some("198.51.100.7"),
            ),
        ],
        ..ClusterSnapshot::default()
    };
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert_eq!(
        hosts_of(&plan, "ingress", "nginx"),
        ["shop.example.com", "www.example.com"]
    );
    assert_eq!(hosts_of(&plan, "ingress", "other"), ["blog.example.com"]);
    let shop = &plan.load_balancers[0].hostnames[0];
    assert_eq!(shop.sources, ["Ingress shop/web"]);
}

#[test]
fn ingress_matched_by_status_hostname() {
    let lb = lb_service(
        "ingress",
        "nginx",
        json!({ "hairpin.io/proxy-protocol": "v1" }),
        json!([{ "ip": "192.0.2.1" }, { "hostname": "lb.example.net" }]),
    );
    let mut ing = ingress("shop", "web", None, &["shop.example.com"], &[], None);
    Arc::make_mut(&mut ing).status = serde_json::from_value(
        json!({ "loadBalancer": { "ingress": [{ "hostname": "LB.example.net" }] } }),
    )
    .unwrap();
    let snapshot = ClusterSnapshot {
        services: vec![lb],
        ingresses: vec![ing],
        ..ClusterSnapshot::default()
    };
    assert_eq!(
        hosts_of(
            &desired(&snapshot, &PlannerConfig::default()),
            "ingress",
            "nginx"
        ),
        ["shop.example.com"]
    );
}

#[test]
fn ingress_without_status_falls_back_to_its_class_controller() {
    let snapshot = ClusterSnapshot {
        services: vec![
            proxied_lb("ingress-nginx", "ingress-nginx", "192.0.2.1"),
            proxied_lb("traefik", "traefik", "192.0.2.2"),
        ],
        ingress_classes: vec![
            ingress_class("nginx", "k8s.io/ingress-nginx", true),
            ingress_class("traefik", "traefik.io/ingress-controller", false),
        ],
        ingresses: vec![
            ingress(
                "a",
                "by-class-name",
                Some("traefik"),
                &["a.example.com"],
                &[],
                None,
            ),
            ingress("b", "by-default-class", None, &["b.example.com"], &[], None),
        ],
        ..ClusterSnapshot::default()
    };
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert_eq!(hosts_of(&plan, "traefik", "traefik"), ["a.example.com"]);
    assert_eq!(
        hosts_of(&plan, "ingress-nginx", "ingress-nginx"),
        ["b.example.com"]
    );
}

#[test]
fn legacy_class_annotation_without_ingress_class_object() {
    let mut ing = ingress("a", "legacy", None, &["legacy.example.com"], &[], None);
    Arc::make_mut(&mut ing).metadata.annotations =
        Some([("kubernetes.io/ingress.class".to_owned(), "nginx".to_owned())].into());
    let snapshot = ClusterSnapshot {
        services: vec![proxied_lb("ingress-nginx", "ingress-nginx", "192.0.2.1")],
        ingresses: vec![ing],
        ..ClusterSnapshot::default()
    };
    assert_eq!(
        hosts_of(
            &desired(&snapshot, &PlannerConfig::default()),
            "ingress-nginx",
            "ingress-nginx"
        ),
        ["legacy.example.com"]
    );
}

#[test]
fn class_fallback_applies_only_when_exactly_one_load_balancer_matches() {
    let mut second = proxied_lb("ingress-nginx", "ingress-nginx-internal", "192.0.2.2");
    second.metadata.labels = Some(
        [(
            "app.kubernetes.io/name".to_owned(),
            "ingress-nginx".to_owned(),
        )]
        .into(),
    );
    let snapshot = ClusterSnapshot {
        services: vec![
            proxied_lb("ingress-nginx", "ingress-nginx", "192.0.2.1"),
            second,
        ],
        ingress_classes: vec![ingress_class("nginx", "k8s.io/ingress-nginx", true)],
        ingresses: vec![ingress("a", "app", None, &["a.example.com"], &[], None)],
        ..ClusterSnapshot::default()
    };
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert!(plan.load_balancers.iter().all(|lb| lb.hostnames.is_empty()));
    let w: Vec<String> = plan.warnings.iter().map(ToString::to_string).collect();
    assert!(
        w.iter()
            .any(|w| w.contains("Ingress a/app") && w.contains("several LoadBalancer Services")),
        "{w:?}"
    );
}

#[test]
fn annotations_on_the_load_balancer() {
    let lb = lb_service(
        "ingress",
        "edge",
        json!({
            "hairpin.io/proxy-protocol": "v2",
            "external-dns.alpha.kubernetes.io/hostname": "a.example.com, b.example.com.",
            "hairpin.io/hostnames": "*.c.example.com,A.example.com",
        }),
        json!([{ "ip": "192.0.2.1" }]),
    );
    let snapshot = ClusterSnapshot {
        services: vec![lb],
        ..ClusterSnapshot::default()
    };
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert_eq!(
        hosts_of(&plan, "ingress", "edge"),
        ["*.c.example.com", "a.example.com", "b.example.com"]
    );
    assert_eq!(
        plan.load_balancers[0].hostnames[1].sources.len(),
        2,
        "a.example.com from both annotations"
    );
}

#[test]
fn invalid_hostnames_are_warned_about_and_skipped() {
    let snapshot = ClusterSnapshot {
        services: vec![proxied_lb("ingress", "nginx", "192.0.2.1")],
        ingresses: vec![ingress(
            "shop",
            "web",
            None,
            &["ok.example.com", "bad_host.example.com"],
            &[],
            Some("192.0.2.1"),
        )],
        ..ClusterSnapshot::default()
    };
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert_eq!(hosts_of(&plan, "ingress", "nginx"), ["ok.example.com"]);
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.subject == "Ingress shop/web" && w.message.contains("bad_host"))
    );
}

#[test]
fn a_hostname_on_two_load_balancers_is_a_conflict_planned_for_neither() {
    let snapshot = ClusterSnapshot {
        services: vec![
            proxied_lb("a", "lb-a", "192.0.2.1"),
            proxied_lb("b", "lb-b", "192.0.2.2"),
            // A load balancer that needs no hairpin still claims its hostnames.
            lb_service("c", "plain", json!({}), json!([{ "ip": "192.0.2.3" }])),
        ],
        ingresses: vec![
            ingress(
                "x",
                "one",
                None,
                &["shared.example.com", "only-a.example.com"],
                &[],
                Some("192.0.2.1"),
            ),
            ingress(
                "y",
                "two",
                None,
                &["shared.example.com"],
                &[],
                Some("192.0.2.2"),
            ),
            ingress(
                "z",
                "three",
                None,
                &["also-plain.example.com"],
                &[],
                Some("192.0.2.3"),
            ),
            ingress(
                "z",
                "four",
                None,
                &["also-plain.example.com"],
                &[],
                Some("192.0.2.2"),
            ),
        ],
        ..ClusterSnapshot::default()
    };
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert_eq!(hosts_of(&plan, "a", "lb-a"), ["only-a.example.com"]);
    assert!(hosts_of(&plan, "b", "lb-b").is_empty());
    let conflicts: Vec<(&str, Vec<String>)> = plan
        .conflicts
        .iter()
        .map(|c| {
            (
                c.hostname.as_str(),
                c.load_balancers.iter().map(ToString::to_string).collect(),
            )
        })
        .collect();
    assert_eq!(
        conflicts,
        [
            (
                "also-plain.example.com",
                vec!["b/lb-b".to_owned(), "c/plain".to_owned()]
            ),
            (
                "shared.example.com",
                vec!["a/lb-a".to_owned(), "b/lb-b".to_owned()]
            )
        ]
    );
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.subject == "hostname shared.example.com")
    );
    let dns = plan.dns.as_ref().map(|d| d.entries.len());
    assert_eq!(dns, None, "no CoreDNS ConfigMap in this snapshot");
}

#[test]
fn gateway_api_hostname_intersection_rules() {
    assert_eq!(
        intersect("*.example.com", "foo.example.com").as_deref(),
        Some("foo.example.com")
    );
    assert_eq!(
        intersect("*.example.com", "a.b.example.com").as_deref(),
        Some("a.b.example.com")
    );
    assert_eq!(
        intersect("foo.example.com", "*.example.com").as_deref(),
        Some("foo.example.com")
    );
    assert_eq!(
        intersect("*.example.com", "*.foo.example.com").as_deref(),
        Some("*.foo.example.com")
    );
    assert_eq!(
        intersect("*.foo.example.com", "*.example.com").as_deref(),
        Some("*.foo.example.com")
    );
    assert_eq!(intersect("foo.example.com", "bar.example.com"), None);
    assert_eq!(intersect("*.example.com", "example.com"), None);
    assert_eq!(intersect("*.example.com", "foo.example.net"), None);
}

const GATEWAY: &str = concat!(
    "\n",
    support::infra_gateway_yaml!(),
    r#"    - { name: wild, port: 443, protocol: HTTPS, hostname: "*.example.com", allowedRoutes: { namespaces: { from: All } } }
    - { name: exact, port: 8443, protocol: HTTPS, hostname: api.example.org }
    - { name: any, port: 9443, protocol: TLS, allowedRoutes: { namespaces: { from: All } } }
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: web, namespace: apps }
spec:
  parentRefs: [{ name: public, namespace: infra, sectionName: wild }]
  hostnames: [www.example.com, www.example.net, "*.dev.example.com"]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: same-ns-only, namespace: apps }
spec:
  parentRefs: [{ name: public, namespace: infra, sectionName: exact }]
  hostnames: [not-allowed.example.org]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: grpc, namespace: infra }
spec:
  parentRefs: [{ name: public, sectionName: exact }]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: { name: tls, namespace: apps }
spec:
  parentRefs: [{ name: public, namespace: infra, port: 9443 }]
  hostnames: [db.example.io]
  rules: [{ backendRefs: [{ name: db, port: 5432 }] }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: other-gateway, namespace: infra }
spec:
  parentRefs: [{ name: private }]
  hostnames: [private.example.com]
"#
);

#[test]
fn gateway_listeners_and_attached_routes() {
    let plan = desired(&snapshot_from_yaml(GATEWAY), &PlannerConfig::default());
    assert_eq!(
        hosts_of(&plan, "infra", "gw"),
        [
            "*.dev.example.com",
            "*.example.com",
            "api.example.org",
            "db.example.io",
            "www.example.com"
        ]
    );
    let api = plan.load_balancers[0]
        .hostnames
        .iter()
        .find(|h| h.name == "api.example.org")
        .unwrap();
    assert!(
        api.sources
            .contains(&"GRPCRoute infra/grpc via Gateway infra/public".to_owned()),
        "{:?}",
        api.sources
    );
    assert!(api.sources.contains(&"Gateway infra/public".to_owned()));
}

/// external-dns's hostname annotation on a route takes the route's `spec.hostnames` path: its
/// names are matched against the listener hostname, only on routes attached to a matched
/// Gateway, and `hairpin.io/ignore` on the route drops them.
#[test]
fn external_dns_annotations_on_routes_join_their_hostnames() {
    let annotate = |route: &str, value: &str| {
        GATEWAY.replace(
            &format!("metadata: {{ name: {route}, namespace:"),
            &format!(
                "metadata: {{ annotations: {{ external-dns.alpha.kubernetes.io/hostname: \"{value}\" }}, name: {route}, namespace:"
            ),
        )
    };
    let yaml = annotate("web", "shop.example.com, outside.example.net");
    let yaml = yaml.replace(
        "metadata: { name: tls, namespace:",
        "metadata: { annotations: { external-dns.alpha.kubernetes.io/hostname: cache.example.io }, name: tls, namespace:",
    );
    let yaml = yaml.replace(
        "metadata: { name: other-gateway, namespace:",
        "metadata: { annotations: { external-dns.alpha.kubernetes.io/hostname: unmatched.example.com }, name: other-gateway, namespace:",
    );
    let plan = desired(&snapshot_from_yaml(&yaml), &PlannerConfig::default());
    let hosts = hosts_of(&plan, "infra", "gw");
    // Inside `*.example.com` (web's listener); on the hostname-less listener anything goes.
    assert!(hosts.contains(&"shop.example.com".to_owned()), "{hosts:?}");
    assert!(hosts.contains(&"cache.example.io".to_owned()), "{hosts:?}");
    // Outside the listener's hostname, and on a route of a Gateway that is not matched.
    assert!(
        !hosts.contains(&"outside.example.net".to_owned()),
        "{hosts:?}"
    );
    assert!(
        !hosts.contains(&"unmatched.example.com".to_owned()),
        "{hosts:?}"
    );
    let shop = plan.load_balancers[0]
        .hostnames
        .iter()
        .find(|h| h.name == "shop.example.com")
        .unwrap();
    assert_eq!(
        shop.sources,
        [
            "HTTPRoute apps/web annotation external-dns.alpha.kubernetes.io/hostname via Gateway infra/public"
        ]
    );

    let ignored = yaml.replace(
        "metadata: { annotations: { external-dns.alpha.kubernetes.io/hostname: cache.example.io },",
        "metadata: { annotations: { external-dns.alpha.kubernetes.io/hostname: cache.example.io, hairpin.io/ignore: \"true\" },",
    );
    let plan = desired(&snapshot_from_yaml(&ignored), &PlannerConfig::default());
    let hosts = hosts_of(&plan, "infra", "gw");
    assert!(!hosts.contains(&"cache.example.io".to_owned()), "{hosts:?}");
    assert!(!hosts.contains(&"db.example.io".to_owned()), "{hosts:?}");
    assert!(hosts.contains(&"shop.example.com".to_owned()), "{hosts:?}");
}

/// Each hostname of `ns/name` with its wildcard kind.
fn kinds_of(
    plan: &hairpin_planner::Plan,
    ns: &str,
    name: &str,
) -> Vec<(String, Option<WildcardLabels>)> {
    plan.load_balancers
        .iter()
        .find(|lb| {
            lb.load_balancer.service.namespace == ns && lb.load_balancer.service.name == name
        })
        .map(|lb| {
            lb.hostnames
                .iter()
                .map(|h| (h.name.clone(), h.wildcard_labels))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn gateway_wildcards_cover_one_or_more_labels_in_dns() {
    let mut snapshot = snapshot_from_yaml(GATEWAY);
    snapshot.config_maps.push(coredns(KUBEADM_COREFILE));
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert!(plan.errors.is_empty(), "{:?}", plan.errors);
    let suffix = Some(WildcardLabels::OneOrMore);
    assert_eq!(
        kinds_of(&plan, "infra", "gw"),
        [
            ("*.dev.example.com".to_owned(), suffix),
            ("*.example.com".to_owned(), suffix),
            ("api.example.org".to_owned(), None),
            ("db.example.io".to_owned(), None),
            ("www.example.com".to_owned(), None),
        ]
    );

    let dns = plan.dns.as_ref().unwrap();
    let listener = dns
        .entries
        .iter()
        .find(|r| r.hostname == "*.example.com")
        .unwrap();
    assert_eq!(listener.wildcard_labels, suffix);
    let pattern = listener.entry().unwrap().name;
    assert!(pattern.matches("a.example.com"));
    assert!(pattern.matches("a.b.example.com"));
    assert!(!pattern.matches("example.com"));
    let planned = &plan.load_balancers[0].hostnames[1];
    assert_eq!(planned.name, "*.example.com");
    for (host, covered) in [
        ("a.example.com", true),
        ("a.b.example.com", true),
        ("example.com", false),
        ("aexample.com", false),
        ("a.example.org", false),
    ] {
        assert_eq!(planned.matches(host), covered, "{host}");
    }

    // Deeper suffix first, exact names before both.
    let target = "hairpin-infra-gw.hairpin.svc.cluster.local";
    let rules: Vec<&str> = dns
        .coredns()
        .unwrap()
        .desired
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("rewrite "))
        .collect();
    let dev = format!(
        "rewrite stop name regex ^(?:[^.]+\\.)+dev\\.example\\.com\\.$ {target} answer auto"
    );
    let all =
        format!("rewrite stop name regex ^(?:[^.]+\\.)+example\\.com\\.$ {target} answer auto");
    assert_eq!(
        rules,
        [
            // No cluster-domain bypass: these rules cost a cluster name less than it would. The
            // three exact names share one rule.
            format!(
                "rewrite stop name regex ^(?:api\\.example\\.org|db\\.example\\.io|www\\.example\\.com)\\.$ {target} answer auto"
            )
            .as_str(),
            &dev,
            &all,
        ],
        "{}",
        dns.coredns().unwrap().desired
    );

    // JSON says which kind a wildcard is, and nothing for exact names.
    let json = serde_json::to_value(&plan.load_balancers[0].hostnames).unwrap();
    assert_eq!(json[1]["name"], "*.example.com");
    assert_eq!(json[1]["wildcard_labels"], "one-or-more");
    assert!(json[2].get("wildcard_labels").is_none(), "{json}");
    let text = hairpin_planner::render::text(&plan);
    assert!(
        text.contains("    *.example.com (one or more labels)      Gateway infra/public\n"),
        "{text}"
    );
}

#[test]
fn ingress_wildcards_stay_one_label_and_the_broader_meaning_wins() {
    let mut snapshot = snapshot_from_yaml(GATEWAY);
    snapshot.config_maps.push(coredns(KUBEADM_COREFILE));
    snapshot.ingresses.push(ingress(
        "shop",
        "web",
        None,
        &["*.example.com", "*.shop.example.com"],
        &[],
        Some("192.0.2.5"),
    ));
    let plan = desired(&snapshot, &PlannerConfig::default());
    let kinds = kinds_of(&plan, "infra", "gw");
    // Only from the Ingress: one label.
    assert!(
        kinds.contains(&("*.shop.example.com".to_owned(), Some(WildcardLabels::One))),
        "{kinds:?}"
    );
    // From the Ingress and the Gateway listener: the suffix match wins.
    assert!(
        kinds.contains(&("*.example.com".to_owned(), Some(WildcardLabels::OneOrMore))),
        "{kinds:?}"
    );
    let hostname = |name: &str| {
        plan.load_balancers[0]
            .hostnames
            .iter()
            .find(|h| h.name == name)
            .unwrap()
    };
    let shop_wildcard = hostname("*.shop.example.com");
    assert!(shop_wildcard.matches("a.shop.example.com"));
    assert!(
        !shop_wildcard.matches("a.b.shop.example.com"),
        "an Ingress wildcard covers one label"
    );
    assert!(hostname("*.example.com").matches("a.b.shop.example.com"));
    assert!(hostname("www.example.com").matches("www.example.com"));
    assert!(!hostname("www.example.com").matches("a.www.example.com"));
    let both = &hostname("*.example.com").sources;
    assert!(both.contains(&"Ingress shop/web".to_owned()), "{both:?}");
    assert!(
        both.contains(&"Gateway infra/public".to_owned()),
        "{both:?}"
    );

    let desired_corefile = &plan.dns.as_ref().unwrap().coredns().unwrap().desired;
    // The one-label wildcard shares the load balancer's exact names' rule.
    let shop = "rewrite stop name regex ^(?:api\\.example\\.org|db\\.example\\.io|www\\.example\\.com|[^.]+\\.shop\\.example\\.com)\\.$ hairpin-infra-gw.hairpin.svc.cluster.local answer auto";
    let gateway = "rewrite stop name regex ^(?:[^.]+\\.)+dev\\.example\\.com\\.$ hairpin-infra-gw.hairpin.svc.cluster.local answer auto";
    let (shop_at, gateway_at) = (
        desired_corefile.find(shop).expect(desired_corefile),
        desired_corefile.find(gateway).expect(desired_corefile),
    );
    assert!(
        shop_at < gateway_at,
        "one-label wildcards before suffix matches:\n{desired_corefile}"
    );
    assert!(
        !desired_corefile.contains("^[^.]+\\.example\\.com\\.$"),
        "no one-label rule for a wildcard the Gateway covers:\n{desired_corefile}"
    );
}

#[test]
fn one_wildcard_from_an_ingress_and_a_gateway_of_another_load_balancer_is_a_conflict() {
    let mut snapshot = snapshot_from_yaml(GATEWAY);
    snapshot
        .services
        .push(proxied_lb("ingress-nginx", "nginx", "192.0.2.9"));
    snapshot.ingresses.push(ingress(
        "shop",
        "web",
        None,
        &["*.example.com", "*.a.example.com"],
        &[],
        Some("192.0.2.9"),
    ));
    let plan = desired(&snapshot, &PlannerConfig::default());
    let conflicts: Vec<&str> = plan.conflicts.iter().map(|c| c.hostname.as_str()).collect();
    assert_eq!(conflicts, ["*.example.com"]);
    assert!(!hosts_of(&plan, "infra", "gw").contains(&"*.example.com".to_owned()));
    // A deeper wildcard elsewhere is no conflict: it is more specific, and DNS tries it first.
    assert_eq!(
        kinds_of(&plan, "ingress-nginx", "nginx"),
        [("*.a.example.com".to_owned(), Some(WildcardLabels::One))]
    );
}

#[test]
fn gateway_matched_by_status_address() {
    let yaml = GATEWAY.replace("  addresses: [{ type: IPAddress, value: 192.0.2.5 }]\n", "")
        + "---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: { name: late, namespace: infra }\nspec:\n  gatewayClassName: example\n  listeners: [{ name: h, port: 443, protocol: HTTPS, hostname: late.example.com }]\nstatus: { addresses: [{ type: IPAddress, value: 192.0.2.5 }] }\n";
    let plan = desired(&snapshot_from_yaml(&yaml), &PlannerConfig::default());
    assert_eq!(hosts_of(&plan, "infra", "gw"), ["late.example.com"]);
}

#[test]
fn shared_address_is_disambiguated_by_the_ingress_controller() {
    // MetalLB `allow-shared-ip`: two LoadBalancer Services on one address.
    let mut ssh = proxied_lb("git", "ssh", "192.0.2.1");
    ssh.metadata.labels = Some([("app.kubernetes.io/name".to_owned(), "gitea".to_owned())].into());
    let snapshot = ClusterSnapshot {
        services: vec![
            proxied_lb("ingress-nginx", "ingress-nginx", "192.0.2.1"),
            ssh,
        ],
        ingress_classes: vec![ingress_class("nginx", "k8s.io/ingress-nginx", true)],
        ingresses: vec![ingress(
            "a",
            "app",
            Some("nginx"),
            &["a.example.com"],
            &[],
            Some("192.0.2.1"),
        )],
        ..ClusterSnapshot::default()
    };
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert_eq!(
        hosts_of(&plan, "ingress-nginx", "ingress-nginx"),
        ["a.example.com"]
    );
    assert!(plan.conflicts.is_empty());

    // Without a way to tell them apart it stays a conflict.
    let mut snapshot = snapshot;
    snapshot.ingress_classes.clear();
    Arc::make_mut(&mut snapshot.ingresses[0])
        .spec
        .as_mut()
        .unwrap()
        .ingress_class_name = None;
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert_eq!(plan.conflicts.len(), 1);
}
