//! One test per provider annotation entry: the values that mean v1, v2 and off, per-port
//! settings, unknown values, and our annotation winning.

mod support;

use std::collections::BTreeMap;

use hairpin_planner::ProxyVersion::{V1, V2};
use hairpin_planner::{ClusterSnapshot, PlannerConfig, ProxyVersion, SkipReason, discover};
use hairpin_planner::{PROVIDER_ANNOTATIONS, proxy_protocol_of};
use serde_json::json;
use support::lb_service;

const OWN: &str = "hairpin.io/proxy-protocol";

/// Port -> version for a Service with ports 80 and 443 and these annotations.
fn ports(annotations: serde_json::Value) -> BTreeMap<i32, ProxyVersion> {
    let svc = lb_service("ns", "lb", annotations, json!([{ "ip": "192.0.2.1" }]));
    let (proxy, unknown) = proxy_protocol_of(&svc, OWN);
    assert!(unknown.is_empty(), "unexpected unknown values: {unknown:?}");
    proxy.ports
}

fn all(v: ProxyVersion) -> BTreeMap<i32, ProxyVersion> {
    BTreeMap::from([(80, v), (443, v)])
}

fn none() -> BTreeMap<i32, ProxyVersion> {
    BTreeMap::new()
}

fn unknown_of(key: &str, value: &str) -> Vec<String> {
    let svc = lb_service(
        "ns",
        "lb",
        json!({ key: value }),
        json!([{ "ip": "192.0.2.1" }]),
    );
    let (proxy, unknown) = proxy_protocol_of(&svc, OWN);
    assert!(proxy.ports.is_empty());
    unknown.into_iter().map(|u| u.key).collect()
}

#[test]
fn every_entry_cites_documentation() {
    for entry in PROVIDER_ANNOTATIONS {
        assert!(
            entry.docs.starts_with("https://"),
            "{} has no documentation URL",
            entry.key
        );
    }
    let src = include_str!("../src/providers.rs");
    for entry in PROVIDER_ANNOTATIONS {
        // The key is written out, or named by a constant of the module (`key: NAME,` with
        // `pub const NAME: &str = "<key>";`).
        let named = src
            .find(&format!(": &str = \"{}\";", entry.key))
            .and_then(|end| {
                src[..end]
                    .rfind("pub const ")
                    .map(|start| &src[start + 10..end])
            });
        let at = src
            .find(&format!("key: \"{}\"", entry.key))
            .or_else(|| named.and_then(|name| src.find(&format!("key: {name},"))))
            .unwrap_or_else(|| panic!("entry {} not found in providers.rs", entry.key));
        let comment_before = &src[..at];
        let entry_start = comment_before.rfind("ProviderAnnotation {").unwrap();
        let comment = &src[..entry_start];
        let last_comment = comment.rfind("// https://").unwrap();
        assert!(
            entry_start - last_comment < 600,
            "entry {} is not preceded by a URL comment",
            entry.key
        );
    }
}

#[test]
fn hetzner() {
    let k = "load-balancer.hetzner.cloud/uses-proxyprotocol";
    assert_eq!(ports(json!({ k: "true" })), all(V1));
    assert_eq!(ports(json!({ k: "false" })), none());
    assert_eq!(unknown_of(k, "yes please"), [k]);
}

#[test]
fn digitalocean() {
    let k = "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol";
    assert_eq!(ports(json!({ k: "true" })), all(V1));
    assert_eq!(ports(json!({ k: "False" })), none());
    assert_eq!(unknown_of(k, "v2"), [k]);
}

#[test]
fn openstack_and_ovh() {
    let k = "loadbalancer.openstack.org/proxy-protocol";
    assert_eq!(ports(json!({ k: "true" })), all(V1));
    assert_eq!(ports(json!({ k: "v1" })), all(V1));
    assert_eq!(ports(json!({ k: "v2" })), all(V2));
    assert_eq!(ports(json!({ k: "false" })), none());
    assert_eq!(unknown_of(k, "v3"), [k]);
}

#[test]
fn ovh_legacy() {
    let k = "service.beta.kubernetes.io/ovh-loadbalancer-proxy-protocol";
    assert_eq!(ports(json!({ k: "v1" })), all(V1));
    assert_eq!(ports(json!({ k: "v2" })), all(V2));
    assert_eq!(ports(json!({ k: "v2-ssl-cn" })), all(V2));
    assert_eq!(ports(json!({ k: "none" })), none());
    assert_eq!(unknown_of(k, "true"), [k]);
}

#[test]
fn scaleway_all_ports_and_per_port() {
    let v1 = "service.beta.kubernetes.io/scw-loadbalancer-proxy-protocol-v1";
    let v2 = "service.beta.kubernetes.io/scw-loadbalancer-proxy-protocol-v2";
    assert_eq!(ports(json!({ v1: "*" })), all(V1));
    assert_eq!(ports(json!({ v2: "true" })), all(V2));
    assert_eq!(ports(json!({ v2: "443" })), BTreeMap::from([(443, V2)]));
    assert_eq!(
        ports(json!({ v1: "80", v2: "443" })),
        BTreeMap::from([(80, V1), (443, V2)])
    );
    assert_eq!(ports(json!({ v1: "false", v2: "80, 443" })), all(V2));
    assert_eq!(ports(json!({ v1: "false" })), none());
    assert_eq!(unknown_of(v1, "http"), [v1]);
}

#[test]
fn linode_default_and_per_port() {
    let k = "service.beta.kubernetes.io/linode-loadbalancer-default-proxy-protocol";
    let old = "service.beta.kubernetes.io/linode-loadbalancer-proxy-protocol";
    let p443 = "service.beta.kubernetes.io/linode-loadbalancer-port-443";
    let p80 = "service.beta.kubernetes.io/linode-loadbalancer-port-80";
    assert_eq!(ports(json!({ k: "v1" })), all(V1));
    assert_eq!(ports(json!({ k: "v2" })), all(V2));
    assert_eq!(ports(json!({ k: "none" })), none());
    assert_eq!(ports(json!({ old: "v2" })), all(V2));
    // Per-port settings override the default, both ways.
    assert_eq!(
        ports(json!({ k: "none", p443: r#"{"proxy-protocol": "v2"}"# })),
        BTreeMap::from([(443, V2)])
    );
    assert_eq!(
        ports(json!({ k: "v1", p80: r#"{"proxy-protocol": "none"}"# })),
        BTreeMap::from([(443, V1)])
    );
    // A port config about something else says nothing about PROXY.
    assert_eq!(
        ports(json!({ k: "v2", p443: r#"{"tls-secret-name": "x"}"# })),
        all(V2)
    );
    assert_eq!(unknown_of(k, "v3"), [k]);
    assert_eq!(unknown_of(p443, r#"{"proxy-protocol": "v9"}"#), [p443]);
}

#[test]
fn vultr() {
    let k = "service.beta.kubernetes.io/vultr-loadbalancer-proxy-protocol";
    assert_eq!(ports(json!({ k: "true" })), all(V1));
    assert_eq!(ports(json!({ k: "1" })), all(V1));
    assert_eq!(ports(json!({ k: "false" })), none());
    assert_eq!(unknown_of(k, "on"), [k]);
}

#[test]
fn aws_classic_elb_is_v1_and_nlb_is_v2() {
    let k = "service.beta.kubernetes.io/aws-load-balancer-proxy-protocol";
    assert_eq!(ports(json!({ k: "*" })), all(V1));
    assert_eq!(
        ports(json!({ k: "*", "service.beta.kubernetes.io/aws-load-balancer-type": "external" })),
        all(V2)
    );
    assert_eq!(
        ports(json!({ k: "*", "service.beta.kubernetes.io/aws-load-balancer-type": "nlb" })),
        all(V2)
    );
    assert_eq!(unknown_of(k, "true"), [k]);
}

#[test]
fn aws_nlb_target_group_attributes() {
    let k = "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes";
    assert_eq!(
        ports(json!({ k: "preserve_client_ip.enabled=true,proxy_protocol_v2.enabled=true" })),
        all(V2)
    );
    assert_eq!(
        ports(json!({ k: "proxy_protocol_v2.enabled=false" })),
        none()
    );
    assert_eq!(
        ports(json!({ k: "deregistration_delay.timeout_seconds=120" })),
        none()
    );
    assert_eq!(unknown_of(k, "proxy_protocol_v2.enabled=maybe"), [k]);
}

#[test]
fn ibm_feature_list() {
    let k = "service.kubernetes.io/ibm-load-balancer-cloud-provider-enable-features";
    assert_eq!(ports(json!({ k: "proxy-protocol" })), all(V1));
    assert_eq!(ports(json!({ k: "nlb, proxy-protocol" })), all(V1));
    assert_eq!(ports(json!({ k: "nlb" })), none());
}

#[test]
fn oracle_nlb_and_lb() {
    let nlb = "oci-network-load-balancer.oraclecloud.com/is-ppv2-enabled";
    let lb = "service.beta.kubernetes.io/oci-load-balancer-connection-proxy-protocol-version";
    assert_eq!(ports(json!({ nlb: "true" })), all(V2));
    assert_eq!(ports(json!({ nlb: "false" })), none());
    assert_eq!(ports(json!({ lb: "1" })), all(V1));
    assert_eq!(ports(json!({ lb: "2" })), all(V2));
    assert_eq!(unknown_of(lb, "v2"), [lb]);
}

#[test]
fn civo() {
    let k = "kubernetes.civo.com/loadbalancer-enable-proxy-protocol";
    assert_eq!(ports(json!({ k: "send-proxy" })), all(V1));
    assert_eq!(ports(json!({ k: "send-proxy-v2" })), all(V2));
    assert_eq!(unknown_of(k, "true"), [k]);
}

#[test]
fn one_provider_saying_off_does_not_veto_another() {
    assert_eq!(
        ports(json!({
            "load-balancer.hetzner.cloud/uses-proxyprotocol": "false",
            "loadbalancer.openstack.org/proxy-protocol": "v2",
        })),
        all(V2)
    );
}

#[test]
fn our_annotation_wins_over_providers() {
    let hetzner = "load-balancer.hetzner.cloud/uses-proxyprotocol";
    assert_eq!(ports(json!({ hetzner: "true", OWN: "v2" })), all(V2));
    assert_eq!(ports(json!({ OWN: "v1" })), all(V1));
    let svc = lb_service(
        "ns",
        "lb",
        json!({ hetzner: "true", OWN: "off" }),
        json!([{ "ip": "192.0.2.1" }]),
    );
    let (proxy, _) = proxy_protocol_of(&svc, OWN);
    assert!(proxy.disabled_by_annotation);
    assert!(proxy.ports.is_empty());
}

#[test]
fn annotation_prefix_is_configurable() {
    let config = PlannerConfig {
        annotation_prefix: "example.com/".into(),
        ..PlannerConfig::default()
    };
    let snapshot = ClusterSnapshot {
        services: vec![
            lb_service(
                "a",
                "ours",
                json!({ "example.com/proxy-protocol": "v2" }),
                json!([{ "ip": "192.0.2.1" }]),
            ),
            lb_service(
                "b",
                "old-prefix",
                json!({ OWN: "v2" }),
                json!([{ "ip": "192.0.2.2" }]),
            ),
        ],
        ..ClusterSnapshot::default()
    };
    let d = discover(&snapshot, &config);
    assert_eq!(d.load_balancers.len(), 1);
    assert_eq!(d.load_balancers[0].service.name, "ours");
    assert_eq!(d.not_needed[0].reason, SkipReason::NoProxyProtocol);
}

#[test]
fn unknown_value_is_a_warning_naming_service_and_annotation() {
    let key = "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol";
    let snapshot = ClusterSnapshot {
        services: vec![lb_service(
            "web",
            "edge",
            json!({ key: "enabled" }),
            json!([{ "ip": "192.0.2.1" }]),
        )],
        ..ClusterSnapshot::default()
    };
    let d = discover(&snapshot, &PlannerConfig::default());
    assert_eq!(d.warnings.len(), 1);
    let w = d.warnings[0].to_string();
    assert!(w.contains("Service web/edge"), "{w}");
    assert!(w.contains(key), "{w}");
    assert!(w.contains("\"enabled\""), "{w}");
    assert_eq!(d.not_needed[0].reason, SkipReason::NoProxyProtocol);

    let snapshot = ClusterSnapshot {
        services: vec![lb_service(
            "web",
            "edge",
            json!({ OWN: "v3" }),
            json!([{ "ip": "192.0.2.1" }]),
        )],
        ..ClusterSnapshot::default()
    };
    let d = discover(&snapshot, &PlannerConfig::default());
    assert!(d.warnings[0].to_string().contains(OWN));
}

#[test]
fn cloudscale() {
    let k = "k8s.cloudscale.ch/loadbalancer-pool-protocol";
    assert_eq!(ports(json!({ k: "proxy" })), all(V1));
    assert_eq!(ports(json!({ k: "proxyv2" })), all(V2));
    assert_eq!(ports(json!({ k: "tcp" })), none());
    assert_eq!(unknown_of(k, "proxy-v2"), [k]);
}

#[test]
fn stackit_with_and_without_the_ports_filter() {
    let k = "lb.stackit.cloud/tcp-proxy-protocol";
    let filter = "lb.stackit.cloud/tcp-proxy-protocol-ports-filter";
    assert_eq!(ports(json!({ k: "true" })), all(V2));
    assert_eq!(ports(json!({ k: "false" })), none());
    assert_eq!(ports(json!({ k: "false", filter: "443" })), none());
    assert_eq!(
        ports(json!({ k: "true", filter: "443" })),
        BTreeMap::from([(443, V2)])
    );
    // A filter port the Service does not have turns nothing on; an empty filter is no filter.
    assert_eq!(
        ports(json!({ k: "true", filter: " 443, 8443" })),
        BTreeMap::from([(443, V2)])
    );
    assert_eq!(ports(json!({ k: "true", filter: "" })), all(V2));
    assert_eq!(unknown_of(k, "on"), [k]);
}

#[test]
fn stackit_legacy_yawol_names() {
    let k = "yawol.stackit.cloud/tcpProxyProtocol";
    let filter = "yawol.stackit.cloud/tcpProxyProtocolPortsFilter";
    assert_eq!(ports(json!({ k: "true" })), all(V2));
    assert_eq!(
        ports(json!({ k: "true", filter: "80" })),
        BTreeMap::from([(80, V2)])
    );
    // The current name's filter does not apply to the legacy boolean.
    assert_eq!(
        ports(json!({ k: "true", "lb.stackit.cloud/tcp-proxy-protocol-ports-filter": "80" })),
        all(V2)
    );
}

#[test]
fn stackit_filter_that_does_not_parse_is_reported_under_its_own_key() {
    let k = "lb.stackit.cloud/tcp-proxy-protocol";
    let filter = "lb.stackit.cloud/tcp-proxy-protocol-ports-filter";
    let svc = lb_service(
        "ns",
        "lb",
        json!({ k: "true", filter: "80,https" }),
        json!([{ "ip": "192.0.2.1" }]),
    );
    let (proxy, unknown) = proxy_protocol_of(&svc, OWN);
    assert!(proxy.ports.is_empty(), "{proxy:?}");
    assert_eq!(unknown.len(), 1);
    assert_eq!(
        (unknown[0].key.as_str(), unknown[0].value.as_str()),
        (filter, "80,https")
    );
}

#[test]
fn alibaba_cloud_nlb_and_the_alicloud_prefix() {
    for k in [
        "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-proxy-protocol",
        "service.beta.kubernetes.io/alicloud-loadbalancer-proxy-protocol",
    ] {
        assert_eq!(ports(json!({ k: "on" })), all(V2));
        assert_eq!(ports(json!({ k: "off" })), none());
        assert_eq!(unknown_of(k, "true"), [k]);
    }
}

fn reason_of(annotations: serde_json::Value) -> Vec<SkipReason> {
    let snapshot = ClusterSnapshot {
        services: vec![lb_service(
            "ns",
            "lb",
            annotations,
            json!([{ "ip": "192.0.2.1" }]),
        )],
        ..ClusterSnapshot::default()
    };
    discover(&snapshot, &PlannerConfig::default())
        .not_needed
        .iter()
        .map(|n| n.reason)
        .collect()
}

#[test]
fn exoscale_plans_nothing_and_says_its_nlb_has_no_proxy() {
    let reasons = reason_of(json!({
        "service.beta.kubernetes.io/exoscale-loadbalancer-zone": "de-muc-1",
    }));
    let [SkipReason::ProviderSendsNoProxy(why)] = reasons.as_slice() else {
        panic!("{reasons:?}");
    };
    assert!(why.contains("Exoscale"), "{why}");
    // A PROXY added by something else, declared with our annotation, is still hairpinned.
    let reasons = reason_of(json!({
        "service.beta.kubernetes.io/exoscale-loadbalancer-zone": "de-muc-1",
        OWN: "v2",
    }));
    assert_eq!(reasons, []);
}

#[test]
fn huawei_pass_through_is_the_native_fix() {
    let k = "kubernetes.io/elb.pass-through";
    // PROXY set by hand on the ELB, declared with our annotation, forces a hairpin.
    assert_eq!(reason_of(json!({ k: "true", OWN: "v1" })), []);
    assert_eq!(reason_of(json!({ k: "true" })), [SkipReason::PassThrough]);
    assert_eq!(
        reason_of(json!({ k: "false" })),
        [SkipReason::NoProxyProtocol]
    );
    assert_eq!(reason_of(json!({ k: "false", OWN: "v1" })), []);
}
