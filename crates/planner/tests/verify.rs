//! Ownership by resolution (issue 22 items 2 and 7): a name is redirected only when the
//! upstream DNS resolves it to its load balancer, and a wildcard never takes another load
//! balancer's names.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use hairpin_planner::verify::UnverifiedReason;
use hairpin_planner::{ClusterSnapshot, Plan, PlannerConfig, Resolution, VerifyMode, desired};
use support::{KUBEADM_COREFILE, coredns, snapshot_from_yaml};

/// A tenant's PROXY load balancer at 192.0.2.5 (its Ingresses in namespace `tenant`), and
/// team-a's load balancer without the PROXY protocol at 198.51.100.9 with `shop.example.com`
/// and `api.example.com`.
const TWO_TEAMS: &str = concat!(
    "\n",
    support::tenant_proxy_lb_yaml!(),
    "---\n",
    support::team_a_web_lb_yaml!(),
    r#"---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: wild, namespace: tenant }
spec: { rules: [{ host: "*.example.com" }, { host: www.example.org }] }
status: { loadBalancer: { ingress: [{ ip: 192.0.2.5 }] } }
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: shop, namespace: team-a }
spec: { rules: [{ host: shop.example.com }, { host: api.example.com }] }
status: { loadBalancer: { ingress: [{ ip: 198.51.100.9 }] } }
"#
);

fn snapshot(yaml: &str) -> ClusterSnapshot {
    let mut s = snapshot_from_yaml(yaml);
    s.config_maps.push(coredns(KUBEADM_COREFILE));
    s
}

fn resolve(config: VerifyMode) -> PlannerConfig {
    PlannerConfig {
        verify_hostnames: config,
        ..PlannerConfig::default()
    }
}

fn answers(pairs: &[(&str, Resolution)]) -> hairpin_planner::Resolutions {
    Arc::new(
        pairs
            .iter()
            .map(|(n, r)| ((*n).to_owned(), r.clone()))
            .collect::<BTreeMap<_, _>>(),
    )
}

fn at(ips: &[&str]) -> Resolution {
    Resolution::Addresses {
        addresses: ips.iter().map(|i| i.parse().unwrap()).collect(),
        cnames: Vec::new(),
    }
}

/// Every hostname the DNS change redirects.
fn redirected(plan: &Plan) -> Vec<String> {
    plan.dns
        .as_ref()
        .map(|d| d.entries.iter().map(|e| e.hostname.clone()).collect())
        .unwrap_or_default()
}

/// Whether a query for `name` is answered with the tenant's proxy: redirected exactly, or
/// covered by a redirected wildcard without a pass-through.
fn answered_by_hairpin(plan: &Plan, name: &str) -> bool {
    let exact = redirected(plan).iter().any(|h| h == name);
    let passed = plan
        .verification
        .passthrough
        .iter()
        .any(|p| p.hostname == name);
    let wildcard = plan
        .load_balancers
        .iter()
        .flat_map(|lb| &lb.hostnames)
        .any(|h| h.is_wildcard() && h.matches(name));
    exact || (wildcard && !passed)
}

#[test]
fn an_ingress_wildcard_on_the_proxy_lb_never_takes_another_teams_names() {
    for mode in [VerifyMode::Off, VerifyMode::Resolve] {
        let mut s = snapshot(TWO_TEAMS);
        s.resolutions = answers(&[
            ("*.example.com", at(&["192.0.2.5"])),
            ("www.example.org", at(&["192.0.2.5"])),
        ]);
        let plan = desired(&s, &resolve(mode));
        for name in ["shop.example.com", "api.example.com"] {
            assert!(
                !answered_by_hairpin(&plan, name),
                "{mode}: {name} is answered with the tenant's proxy: {:?} {:?}",
                redirected(&plan),
                plan.verification
            );
        }
        // The tenant's own names are still redirected (or the wildcard is reported).
        assert!(answered_by_hairpin(&plan, "www.example.org"), "{mode}");
        assert!(
            redirected(&plan).contains(&"*.example.com".to_owned()),
            "{mode}"
        );
        let passed = support::passthrough_names(&plan);
        assert_eq!(passed, ["api.example.com", "shop.example.com"], "{mode}");
        assert!(
            plan.verification.passthrough[0]
                .why
                .contains("load balancer team-a/web")
        );
        // The pass-throughs reach the Corefile.
        let corefile = &plan.dns.as_ref().unwrap().coredns().unwrap().desired;
        assert!(corefile.contains("shop.example.com"), "{corefile}");
    }
}

/// external-dns mode publishes records: a name cannot be left out of a wildcard there, so
/// the wildcard is not published, and the plan says why.
#[test]
fn in_external_dns_mode_a_wildcard_over_another_teams_name_is_left_out() {
    let config = PlannerConfig {
        dns_mode: hairpin_planner::DnsMode::ExternalDns,
        ..resolve(VerifyMode::Off)
    };
    let plan = desired(&snapshot(TWO_TEAMS), &config);
    assert!(!answered_by_hairpin(&plan, "shop.example.com"));
    assert!(!redirected(&plan).contains(&"*.example.com".to_owned()));
    let u = plan
        .verification
        .unverified
        .iter()
        .find(|u| u.hostname == "*.example.com")
        .expect("the left-out wildcard is reported");
    assert_eq!(u.reason, UnverifiedReason::CoversOthers);
    assert!(
        u.detail.contains(
            "*.example.com covers api.example.com (claimed by load balancer team-a/web), shop.example.com (claimed by load balancer team-a/web)"
        ),
        "{}",
        u.detail
    );
    assert!(redirected(&plan).contains(&"www.example.org".to_owned()));
}

/// A Gateway listener `*.example.com` on the PROXY load balancer, `a.b.example.com` on
/// another one: the suffix match covers two labels, so the name is compared by coverage.
#[test]
fn a_gateway_listener_wildcard_never_takes_a_deeper_name_of_another_lb() {
    let yaml = concat!(
        "\n",
        support::infra_gateway_yaml!(),
        r#"    - { name: wild, port: 443, protocol: HTTPS, hostname: "*.example.com" }
---
"#,
        support::team_a_web_lb_yaml!(),
        r#"---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: deep, namespace: team-a }
spec: { rules: [{ host: a.b.example.com }] }
status: { loadBalancer: { ingress: [{ ip: 198.51.100.9 }] } }
"#
    );
    let plan = desired(&snapshot(yaml), &resolve(VerifyMode::Off));
    assert!(
        !answered_by_hairpin(&plan, "a.b.example.com"),
        "{:?} {:?}",
        redirected(&plan),
        plan.verification
    );
}

/// Item 7: a tenant naming `github.com` on a PROXY load balancer gets no rule, with the
/// answer seen; its own name that resolves to the load balancer is redirected.
#[test]
fn a_name_resolving_elsewhere_gets_no_rule_and_says_where_it_resolves() {
    let yaml = concat!(
        "\n",
        support::tenant_proxy_lb_yaml!(),
        r#"---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: grab, namespace: tenant }
spec: { rules: [{ host: github.com }, { host: shop.example.com }, { host: pypi.org }, { host: new.example.com }] }
status: { loadBalancer: { ingress: [{ ip: 192.0.2.5 }] } }
"#
    );
    let mut s = snapshot(yaml);
    s.resolutions = answers(&[
        ("github.com", at(&["140.82.112.3"])),
        ("shop.example.com", at(&["192.0.2.5"])),
        ("pypi.org", Resolution::NxDomain),
    ]);
    let plan = desired(&s, &resolve(VerifyMode::Resolve));
    assert_eq!(redirected(&plan), ["shop.example.com"]);
    let hosts = support::hosts_names(&plan);
    assert_eq!(hosts, ["shop.example.com"]);
    let why: BTreeMap<&str, (UnverifiedReason, &str)> = plan
        .verification
        .unverified
        .iter()
        .map(|u| (u.hostname.as_str(), (u.reason, u.detail.as_str())))
        .collect();
    assert_eq!(
        why["github.com"],
        (
            UnverifiedReason::ResolvesElsewhere,
            "github.com resolves to 140.82.112.3, not this load balancer"
        )
    );
    assert_eq!(why["pypi.org"].0, UnverifiedReason::NxDomain);
    // Not resolved yet: not redirected (do no harm).
    assert_eq!(why["new.example.com"].0, UnverifiedReason::NotResolved);
    // The controller is told every name to resolve, with the load balancer's addresses.
    let names: Vec<&str> = plan
        .verification
        .names
        .iter()
        .map(|n| n.hostname.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "github.com",
            "new.example.com",
            "pypi.org",
            "shop.example.com"
        ]
    );
    assert!(
        plan.verification
            .names
            .iter()
            .all(|n| n.addresses == ["192.0.2.5"])
    );
    let text = hairpin_planner::render::text(&plan);
    assert!(
        text.contains("github.com resolves to 140.82.112.3, not this load balancer"),
        "{text}"
    );
}

/// A name of the load balancer's own that resolves elsewhere is left out of its own
/// verified wildcard too.
#[test]
fn an_own_name_resolving_elsewhere_is_carved_out_of_its_own_wildcard() {
    let mut s = snapshot(TWO_TEAMS);
    s.resolutions = answers(&[
        ("*.example.com", at(&["192.0.2.5"])),
        ("www.example.org", at(&["203.0.113.99"])),
    ]);
    let plan = desired(&s, &resolve(VerifyMode::Resolve));
    assert!(!answered_by_hairpin(&plan, "www.example.org"));
    assert!(plan.verification.unverified.iter().any(
        |u| u.hostname == "www.example.org" && u.reason == UnverifiedReason::ResolvesElsewhere
    ));
}

/// With verification off, every admitted name is redirected as before (air-gapped clusters).
#[test]
fn verification_off_redirects_every_admitted_name_without_answers() {
    let plan = desired(&snapshot(TWO_TEAMS), &resolve(VerifyMode::Off));
    assert!(redirected(&plan).contains(&"www.example.org".to_owned()));
    assert!(plan.verification.names.is_empty());
    let resolving = desired(&snapshot(TWO_TEAMS), &resolve(VerifyMode::Resolve));
    assert!(redirected(&resolving).is_empty());
    assert_eq!(resolving.verification.not_resolved(), 2);
}

/// A load balancer whose status has a hostname too: a name CNAMEd to that hostname is its.
#[test]
fn a_cname_to_the_load_balancers_status_hostname_verifies_the_name() {
    let yaml = r#"
apiVersion: v1
kind: Service
metadata: { name: proxy, namespace: tenant, annotations: { hairpin.io/proxy-protocol: v2 } }
spec:
  type: LoadBalancer
  ports: [{ name: https, port: 443 }]
status: { loadBalancer: { ingress: [{ ip: 192.0.2.5, hostname: lb-1.elb.example.net }] } }
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: web, namespace: tenant }
spec: { rules: [{ host: shop.example.com }] }
status: { loadBalancer: { ingress: [{ ip: 192.0.2.5 }] } }
"#;
    let mut s = snapshot(yaml);
    s.resolutions = answers(&[(
        "shop.example.com",
        Resolution::Addresses {
            addresses: vec!["192.0.2.77".parse().unwrap()],
            cnames: vec!["lb-1.elb.example.net".into()],
        },
    )]);
    let plan = desired(&s, &resolve(VerifyMode::Resolve));
    assert_eq!(redirected(&plan), ["shop.example.com"]);
}

/// Item 2 end to end: the Corefile planned for [`TWO_TEAMS`], run in real CoreDNS (the test
/// peer; skipped where absent), answers team-a's names from upstream and the tenant's other
/// names under its wildcard with the tenant's hairpin Service.
#[test]
fn real_coredns_answers_another_teams_names_from_upstream_under_the_tenants_wildcard() {
    use hairpin_testkit::coredns::{CoreDns, RecordType, UPSTREAM_V4, skip_without};
    if skip_without(
        "real_coredns_answers_another_teams_names_from_upstream_under_the_tenants_wildcard",
    ) {
        return;
    }
    let plan = desired(&snapshot(TWO_TEAMS), &resolve(VerifyMode::Off));
    let dns = plan.dns.as_ref().expect("DNS is planned");
    let target = dns
        .entries
        .iter()
        .find(|e| e.hostname == "*.example.com")
        .map(|e| e.target.clone())
        .expect("the tenant's wildcard is redirected");
    let corefile = &dns.coredns().unwrap().desired;
    let tenant: std::net::IpAddr = "10.96.0.77".parse().unwrap();
    let Some(coredns) = CoreDns::start(
        "real_coredns_answers_another_teams_names",
        corefile,
        &[(target.as_str(), tenant)],
    ) else {
        return;
    };
    for name in ["shop.example.com.", "api.example.com."] {
        assert_eq!(
            coredns.query(name, RecordType::A).addresses(),
            [std::net::IpAddr::V4(UPSTREAM_V4)],
            "{name} must be answered from upstream:\n{corefile}"
        );
    }
    assert_eq!(
        coredns
            .query("blog.example.com.", RecordType::A)
            .addresses(),
        [tenant],
        "{corefile}"
    );
}
