//! Which load balancers need a hairpin, and the reason for each one that does not.

mod support;

use hairpin_planner::{ClusterSnapshot, PlannerConfig, ProxyVersion, SkipReason, discover};
use serde_json::json;
use support::lb_service;

const HETZNER: &str = "load-balancer.hetzner.cloud/uses-proxyprotocol";

fn reason_of(annotations: serde_json::Value, status: serde_json::Value) -> Option<SkipReason> {
    let snapshot = ClusterSnapshot {
        services: vec![lb_service("ns", "lb", annotations, status)],
        ..ClusterSnapshot::default()
    };
    let d = discover(&snapshot, &PlannerConfig::default());
    match (d.load_balancers.len(), d.not_needed.as_slice()) {
        (1, []) => None,
        (0, [n]) => Some(n.reason),
        other => panic!("unexpected discovery {other:?}"),
    }
}

#[test]
fn needed_with_proxy_and_vip_ip() {
    assert_eq!(
        reason_of(json!({ HETZNER: "true" }), json!([{ "ip": "192.0.2.1" }])),
        None
    );
    assert_eq!(
        reason_of(
            json!({ HETZNER: "true" }),
            json!([{ "ip": "192.0.2.1", "ipMode": "VIP" }])
        ),
        None
    );
}

#[test]
fn no_proxy_protocol() {
    assert_eq!(
        reason_of(json!({}), json!([{ "ip": "192.0.2.1" }])),
        Some(SkipReason::NoProxyProtocol)
    );
    assert_eq!(
        reason_of(json!({ HETZNER: "false" }), json!([{ "ip": "192.0.2.1" }])),
        Some(SkipReason::NoProxyProtocol)
    );
}

#[test]
fn ip_mode_proxy() {
    assert_eq!(
        reason_of(
            json!({ HETZNER: "true" }),
            json!([{ "ip": "192.0.2.1", "ipMode": "Proxy" }])
        ),
        Some(SkipReason::IpModeProxy)
    );
}

#[test]
fn mixed_ip_modes_keep_only_the_vip_addresses() {
    let snapshot = ClusterSnapshot {
        services: vec![lb_service(
            "ns",
            "lb",
            json!({ HETZNER: "true" }),
            json!([{ "ip": "192.0.2.1", "ipMode": "Proxy" }, { "ip": "2001:db8::1", "ipMode": "VIP" }]),
        )],
        ..ClusterSnapshot::default()
    };
    let d = discover(&snapshot, &PlannerConfig::default());
    assert_eq!(
        d.load_balancers[0].ips,
        vec!["2001:db8::1".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(
        d.load_balancers[0].status_addresses,
        vec!["192.0.2.1", "2001:db8::1"]
    );
}

#[test]
fn hostname_only_status() {
    assert_eq!(
        reason_of(
            json!({ HETZNER: "true" }),
            json!([{ "hostname": "lb-1.example.net" }])
        ),
        Some(SkipReason::HostnameOnlyStatus)
    );
}

#[test]
fn no_address_yet() {
    assert_eq!(
        reason_of(json!({ HETZNER: "true" }), json!([])),
        Some(SkipReason::NoAddressYet)
    );
}

#[test]
fn disabled_by_annotation() {
    assert_eq!(
        reason_of(
            json!({ HETZNER: "true", "hairpin.io/proxy-protocol": "off" }),
            json!([{ "ip": "192.0.2.1" }])
        ),
        Some(SkipReason::DisabledByAnnotation)
    );
}

#[test]
fn non_load_balancer_services_and_udp_ports_are_ignored() {
    let mut cluster_ip = lb_service("ns", "plain", json!({ HETZNER: "true" }), json!([]));
    cluster_ip.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    let mut dns = lb_service(
        "ns",
        "dns",
        json!({ HETZNER: "true" }),
        json!([{ "ip": "192.0.2.9" }]),
    );
    for p in dns.spec.as_mut().unwrap().ports.as_mut().unwrap() {
        p.protocol = Some("UDP".into());
    }
    let snapshot = ClusterSnapshot {
        services: vec![cluster_ip, dns],
        ..ClusterSnapshot::default()
    };
    let d = discover(&snapshot, &PlannerConfig::default());
    assert!(d.load_balancers.is_empty());
    assert_eq!(
        d.not_needed.len(),
        1,
        "only the LoadBalancer Service is listed"
    );
    assert_eq!(d.not_needed[0].reason, SkipReason::NoProxyProtocol);
}

#[test]
fn ports_carry_their_versions_and_destination_prefers_ipv4() {
    let snapshot = ClusterSnapshot {
        services: vec![lb_service(
            "ns",
            "lb",
            json!({ "service.beta.kubernetes.io/scw-loadbalancer-proxy-protocol-v2": "443" }),
            json!([{ "ip": "2001:db8::1" }, { "ip": "192.0.2.1" }]),
        )],
        ..ClusterSnapshot::default()
    };
    let d = discover(&snapshot, &PlannerConfig::default());
    let lb = &d.load_balancers[0];
    assert_eq!(lb.ports[0].port, 80);
    assert_eq!(lb.ports[0].proxy_protocol, None);
    assert_eq!(lb.ports[1].proxy_protocol, Some(ProxyVersion::V2));
    assert_eq!(lb.destination_ip(), Some("192.0.2.1".parse().unwrap()));
}

#[test]
fn our_explicit_annotation_forces_a_hairpin_despite_ip_mode_proxy() {
    for value in ["v1", "v2", "true"] {
        let snapshot = ClusterSnapshot {
            services: vec![lb_service(
                "ns",
                "lb",
                json!({ "hairpin.io/proxy-protocol": value }),
                json!([{ "ip": "192.0.2.1", "ipMode": "Proxy" }]),
            )],
            ..ClusterSnapshot::default()
        };
        let d = discover(&snapshot, &PlannerConfig::default());
        assert!(d.not_needed.is_empty(), "{value}: {:?}", d.not_needed);
        let lb = &d.load_balancers[0];
        assert_eq!(lb.ips, ["192.0.2.1".parse::<std::net::IpAddr>().unwrap()]);
        let why = lb.forced.as_deref().unwrap();
        assert!(why.contains("ipMode is Proxy"), "{why}");
        assert!(
            why.contains(&format!("hairpin.io/proxy-protocol={value}")),
            "{why}"
        );
        assert!(why.contains("Cilium < 1.17"), "{why}");
    }
}

#[test]
fn a_forced_hairpin_needs_our_annotation_and_a_valid_value() {
    // A provider annotation does not override ipMode: Proxy, nor does `off` or an unknown value.
    for annotations in [
        json!({ HETZNER: "true" }),
        json!({ HETZNER: "true", "hairpin.io/proxy-protocol": "v3" }),
        json!({ "hairpin.io/proxy-protocol": "off" }),
    ] {
        let reason = reason_of(
            annotations.clone(),
            json!([{ "ip": "192.0.2.1", "ipMode": "Proxy" }]),
        );
        assert!(
            matches!(
                reason,
                Some(SkipReason::IpModeProxy | SkipReason::DisabledByAnnotation)
            ),
            "{annotations}: {reason:?}"
        );
    }
    // Not forced where nothing needed forcing: a VIP address.
    let snapshot = ClusterSnapshot {
        services: vec![lb_service(
            "ns",
            "lb",
            json!({ "hairpin.io/proxy-protocol": "v2" }),
            json!([{ "ip": "192.0.2.1", "ipMode": "VIP" }]),
        )],
        ..ClusterSnapshot::default()
    };
    let d = discover(&snapshot, &PlannerConfig::default());
    assert_eq!(d.load_balancers[0].forced, None);
}

#[test]
fn an_invalid_forcing_value_is_a_warning_naming_the_service() {
    let snapshot = ClusterSnapshot {
        services: vec![lb_service(
            "shop",
            "edge",
            json!({ "hairpin.io/proxy-protocol": "proxy-v2" }),
            json!([{ "ip": "192.0.2.1", "ipMode": "Proxy" }]),
        )],
        ..ClusterSnapshot::default()
    };
    let d = discover(&snapshot, &PlannerConfig::default());
    assert!(d.load_balancers.is_empty());
    let w = d.warnings[0].to_string();
    assert!(
        w.contains("Service shop/edge") && w.contains("\"proxy-v2\""),
        "{w}"
    );
}
