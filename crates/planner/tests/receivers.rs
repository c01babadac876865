//! The receiving side (issue 31): real objects of each implementation, as their charts and
//! docs install them (`tests/fixtures/receivers/`), read right; and what discovery does with
//! each answer: PROXY learnt from a receiver that requires it, no cure for one that accepts a
//! missing header, a warning and no change where the two ends disagree.

use hairpin_planner::discover;
use hairpin_planner::load::load_yaml;
use hairpin_planner::receivers::{Implementation, Requirement, receiver_of};
use hairpin_planner::{ClusterSnapshot, PlannerConfig, ProxyVersion, SkipReason};

const REQUIRED: Requirement = Requirement::Required { only_v2: false };

fn fixture(name: &str) -> ClusterSnapshot {
    let path = format!(
        "{}/tests/fixtures/receivers/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    snapshot(&text)
}

fn snapshot(text: &str) -> ClusterSnapshot {
    let mut s = ClusterSnapshot::default();
    let notes = load_yaml(&mut s, "fixture", text).unwrap();
    assert!(notes.is_empty(), "{notes:?}");
    s
}

/// Every fixture, the implementation it runs and the requirement read from it.
const FIXTURES: &[(&str, Implementation, Requirement)] = &[
    (
        "ingress-nginx-required.yaml",
        Implementation::IngressNginx,
        REQUIRED,
    ),
    (
        "ingress-nginx-off.yaml",
        Implementation::IngressNginx,
        Requirement::Off,
    ),
    (
        "f5-nginx-ingress-required.yaml",
        Implementation::F5NginxIngress,
        REQUIRED,
    ),
    (
        "f5-nginx-ingress-off.yaml",
        Implementation::F5NginxIngress,
        Requirement::Off,
    ),
    (
        "nginx-gateway-fabric-required.yaml",
        Implementation::NginxGatewayFabric,
        REQUIRED,
    ),
    (
        "nginx-gateway-fabric-off.yaml",
        Implementation::NginxGatewayFabric,
        Requirement::Off,
    ),
    (
        "envoy-gateway-required.yaml",
        Implementation::EnvoyGateway,
        REQUIRED,
    ),
    (
        "envoy-gateway-required-deprecated.yaml",
        Implementation::EnvoyGateway,
        REQUIRED,
    ),
    (
        "envoy-gateway-optional.yaml",
        Implementation::EnvoyGateway,
        Requirement::Optional,
    ),
    (
        "envoy-gateway-off.yaml",
        Implementation::EnvoyGateway,
        Requirement::Off,
    ),
    (
        "traefik-optional.yaml",
        Implementation::Traefik,
        Requirement::Optional,
    ),
    (
        "traefik-off.yaml",
        Implementation::Traefik,
        Requirement::Off,
    ),
    ("contour-required.yaml", Implementation::Contour, REQUIRED),
    (
        "contour-required-configuration.yaml",
        Implementation::Contour,
        REQUIRED,
    ),
    (
        "contour-off.yaml",
        Implementation::Contour,
        Requirement::Off,
    ),
    ("istio-required.yaml", Implementation::Istio, REQUIRED),
    ("istio-required-mesh.yaml", Implementation::Istio, REQUIRED),
    ("istio-off.yaml", Implementation::Istio, Requirement::Off),
    (
        "cilium-ingress-required.yaml",
        Implementation::CiliumIngress,
        REQUIRED,
    ),
    (
        "cilium-ingress-off.yaml",
        Implementation::CiliumIngress,
        Requirement::Off,
    ),
    (
        "cilium-gateway-required.yaml",
        Implementation::CiliumGateway,
        REQUIRED,
    ),
    (
        "cilium-gateway-off.yaml",
        Implementation::CiliumGateway,
        Requirement::Off,
    ),
    ("kgateway-required.yaml", Implementation::Kgateway, REQUIRED),
    (
        "kgateway-off.yaml",
        Implementation::Kgateway,
        Requirement::Off,
    ),
    (
        "haproxy-required.yaml",
        Implementation::HaproxyIngress,
        REQUIRED,
    ),
    (
        "haproxy-sources.yaml",
        Implementation::HaproxyIngress,
        Requirement::Unknown,
    ),
    (
        "haproxy-off.yaml",
        Implementation::HaproxyIngress,
        Requirement::Off,
    ),
    ("kong-required.yaml", Implementation::Kong, REQUIRED),
    ("kong-off.yaml", Implementation::Kong, Requirement::Off),
    // Issue 38: per port, and every install method.
    (
        "traefik-websecure-only.yaml",
        Implementation::Traefik,
        Requirement::PerPort,
    ),
    (
        "kong-tls-only.yaml",
        Implementation::Kong,
        Requirement::PerPort,
    ),
    (
        "envoy-gateway-two-policies.yaml",
        Implementation::EnvoyGateway,
        Requirement::PerPort,
    ),
    (
        "nginx-gateway-fabric-1x.yaml",
        Implementation::NginxGatewayFabric,
        REQUIRED,
    ),
    ("istio-gateway-chart.yaml", Implementation::Istio, REQUIRED),
    (
        "istio-envoyfilter.yaml",
        Implementation::Istio,
        Requirement::Unknown,
    ),
    (
        "traefik-k3s.yaml",
        Implementation::Traefik,
        Requirement::Off,
    ),
    (
        "haproxy-ingress-required.yaml",
        Implementation::JcmoraisjrHaproxyIngress,
        REQUIRED,
    ),
];

#[test]
fn every_fixture_is_read_right() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/receivers");
    let on_disk = std::fs::read_dir(dir).unwrap().count();
    assert_eq!(on_disk, FIXTURES.len(), "a fixture without an expectation");
    for (name, implementation, requirement) in FIXTURES {
        let s = fixture(name);
        let lbs: Vec<_> = s
            .services
            .iter()
            .filter(|svc| {
                svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
            })
            .collect();
        assert_eq!(lbs.len(), 1, "{name}");
        let receiver = receiver_of(&s, lbs[0]).unwrap_or_else(|| panic!("{name}: no receiver"));
        assert_eq!(
            (receiver.implementation, receiver.requirement),
            (*implementation, *requirement),
            "{name}: {receiver:?}"
        );
        assert!(!receiver.setting.is_empty(), "{name}");
        if !matches!(requirement, Requirement::Unknown | Requirement::PerPort) {
            assert!(!receiver.read_from.is_empty(), "{name}: {receiver:?}");
        }
    }
}

#[test]
fn ingress_nginx_setting_names_the_configmap_and_key() {
    let s = fixture("ingress-nginx-required.yaml");
    let r = receiver_of(&s, &s.services[0]).unwrap();
    assert_eq!(r.setting, "use-proxy-protocol: \"true\"");
    // `--configmap=$(POD_NAMESPACE)/...` expanded from the pod's namespace.
    assert_eq!(
        r.read_from,
        "ConfigMap ingress-nginx/ingress-nginx-controller"
    );
    assert_eq!(
        r.workload,
        "Deployment ingress-nginx/ingress-nginx-controller"
    );
    assert_eq!(r.required_version(), Some(ProxyVersion::V1));
}

#[test]
fn a_missing_configmap_is_unknown_not_off() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/receivers/ingress-nginx-required.yaml"
    ))
    .unwrap();
    let without = text
        .split("\n---\napiVersion: v1\nkind: ConfigMap")
        .next()
        .unwrap();
    let s = snapshot(without);
    let r = receiver_of(&s, &s.services[0]).unwrap();
    assert_eq!(r.requirement, Requirement::Unknown);
    assert!(r.setting.contains("not in the snapshot"), "{}", r.setting);
}

#[test]
fn an_unknown_image_is_reported_unknown_never_guessed() {
    let s = snapshot(
        "apiVersion: v1\nkind: Service\nmetadata: {name: lb, namespace: x}\nspec:\n  type: LoadBalancer\n  selector: {app: edge}\n  ports: [{port: 443}]\nstatus: {loadBalancer: {ingress: [{ip: 203.0.113.9}]}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: edge-0, namespace: x, labels: {app: edge}}\nspec:\n  containers: [{name: c, image: example.com/our/own-proxy:1.0}]\n",
    );
    let r = receiver_of(&s, &s.services[0]).unwrap();
    assert_eq!(r.implementation, Implementation::Unknown);
    assert_eq!(r.requirement, Requirement::Unknown);
    assert!(
        r.setting.contains("example.com/our/own-proxy:1.0"),
        "{}",
        r.setting
    );
    // No workload at all: no receiver.
    let s = snapshot(
        "apiVersion: v1\nkind: Service\nmetadata: {name: lb, namespace: x}\nspec:\n  type: LoadBalancer\n  selector: {app: edge}\n  ports: [{port: 443}]\n",
    );
    assert_eq!(receiver_of(&s, &s.services[0]), None);
}

fn with_annotation(name: &str, annotation: &str) -> ClusterSnapshot {
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/receivers/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    // The first document is the load balancer's Service; give it an annotation.
    let text = text.replacen(
        "kind: Service\nmetadata:\n",
        &format!("kind: Service\nmetadata:\n  annotations:\n    {annotation}\n"),
        1,
    );
    snapshot(&text)
}

#[test]
fn a_receiver_that_requires_the_header_makes_an_unannotated_lb_send_proxy() {
    let s = fixture("ingress-nginx-required.yaml");
    let d = discover(&s, &PlannerConfig::default());
    assert_eq!(d.load_balancers.len(), 1, "{d:?}");
    let lb = &d.load_balancers[0];
    assert!(
        lb.ports
            .iter()
            .all(|p| p.proxy_protocol == Some(ProxyVersion::V1))
    );
    assert_eq!(
        lb.proxy_sources,
        [
            "ingress-nginx use-proxy-protocol: \"true\" (ConfigMap ingress-nginx/ingress-nginx-controller)"
        ]
    );
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn a_receiver_with_the_header_off_and_no_annotation_needs_nothing() {
    let s = fixture("ingress-nginx-off.yaml");
    let d = discover(&s, &PlannerConfig::default());
    assert_eq!(d.not_needed[0].reason, SkipReason::NoProxyProtocol);
    assert!(d.warnings.is_empty());
}

#[test]
fn a_receiver_that_accepts_a_missing_header_needs_no_cure() {
    let s = with_annotation(
        "envoy-gateway-optional.yaml",
        "load-balancer.hetzner.cloud/uses-proxyprotocol: \"true\"",
    );
    let d = discover(&s, &PlannerConfig::default());
    assert!(d.load_balancers.is_empty(), "{d:?}");
    assert_eq!(d.not_needed[0].reason, SkipReason::ReceiverAcceptsNoHeader);
    assert!(
        SkipReason::ReceiverAcceptsNoHeader
            .describe()
            .contains("client address")
    );
    assert_eq!(
        d.not_needed[0].receiver.as_ref().map(|r| r.requirement),
        Some(Requirement::Optional)
    );
    // Our explicit annotation still forces the hairpin.
    let s = with_annotation("traefik-optional.yaml", "hairpin.io/proxy-protocol: v2");
    let d = discover(&s, &PlannerConfig::default());
    assert_eq!(d.load_balancers.len(), 1, "{d:?}");
}

#[test]
fn an_lb_that_sends_proxy_to_a_receiver_that_does_not_expect_it_is_a_warning_and_left_alone() {
    let s = with_annotation(
        "ingress-nginx-off.yaml",
        "load-balancer.hetzner.cloud/uses-proxyprotocol: \"true\"",
    );
    let d = discover(&s, &PlannerConfig::default());
    assert!(d.load_balancers.is_empty(), "{d:?}");
    assert_eq!(d.not_needed[0].reason, SkipReason::ReceiverMismatch);
    let [warning] = d.warnings.as_slice() else {
        panic!("{:?}", d.warnings)
    };
    assert!(
        warning
            .message
            .starts_with("BROKEN for clients outside the cluster too"),
        "{}",
        warning.message
    );
    for part in [
        "load-balancer.hetzner.cloud/uses-proxyprotocol=true",
        "ingress-nginx Deployment ingress-nginx/ingress-nginx-controller: PROXY off by",
        "Fix: ",
    ] {
        assert!(
            warning.message.contains(part),
            "{part}: {}",
            warning.message
        );
    }
}

#[test]
fn a_receiver_that_requires_the_header_behind_an_lb_without_proxy_is_a_warning_and_left_alone() {
    let s = with_annotation(
        "kong-required.yaml",
        "service.beta.kubernetes.io/exoscale-loadbalancer-zone: ch-gva-2",
    );
    let d = discover(&s, &PlannerConfig::default());
    assert!(d.load_balancers.is_empty(), "{d:?}");
    assert_eq!(d.not_needed[0].reason, SkipReason::ReceiverMismatch);
    assert!(
        d.warnings[0].message.contains("sends no PROXY header"),
        "{:?}",
        d.warnings
    );
    assert!(
        d.warnings[0].message.contains("KONG_PROXY_LISTEN="),
        "{:?}",
        d.warnings
    );
}

#[test]
fn an_unknown_setting_leaves_the_decision_to_the_annotations() {
    let s = fixture("haproxy-sources.yaml");
    let d = discover(&s, &PlannerConfig::default());
    assert_eq!(d.not_needed[0].reason, SkipReason::NoProxyProtocol);
    let s = with_annotation(
        "haproxy-sources.yaml",
        "load-balancer.hetzner.cloud/uses-proxyprotocol: \"true\"",
    );
    let d = discover(&s, &PlannerConfig::default());
    assert_eq!(d.load_balancers.len(), 1);
    assert_eq!(
        d.load_balancers[0].proxy_sources,
        ["load-balancer.hetzner.cloud/uses-proxyprotocol=true"]
    );
}

#[test]
fn tenant_strings_in_the_receiver_report_are_escaped_where_printed() {
    let s = snapshot(
        "apiVersion: v1\nkind: Service\nmetadata: {name: lb, namespace: x, annotations: {load-balancer.hetzner.cloud/uses-proxyprotocol: \"true\"}}\nspec:\n  type: LoadBalancer\n  selector: {app: edge}\n  ports: [{port: 443}]\nstatus: {loadBalancer: {ingress: [{ip: 203.0.113.9}]}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: edge-0, namespace: x, labels: {app: edge}}\nspec:\n  containers:\n    - name: c\n      image: registry.k8s.io/ingress-nginx/controller:v1\n      args: [\"--configmap=x/cm\"]\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: x}\ndata: {use-proxy-protocol: \"no\\n---\\nkind: Secret\"}\n",
    );
    let d = discover(&s, &PlannerConfig::default());
    let r = d.load_balancers[0].receiver.as_ref().unwrap();
    assert_eq!(r.requirement, Requirement::Unknown);
    let plan = hairpin_planner::desired(&s, &PlannerConfig::default());
    let text = hairpin_planner::render::text(&plan);
    assert!(!text.contains("\n---\nkind: Secret"), "{text}");
}

#[test]
fn the_configmaps_a_reader_by_name_must_get() {
    let s = fixture("ingress-nginx-required.yaml");
    let read = hairpin_planner::receivers::config_maps_read(&s);
    let read: Vec<(&str, &str)> = read.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(read, [("ingress-nginx", "ingress-nginx-controller")]);
    let s = fixture("istio-required-mesh.yaml");
    let read = hairpin_planner::receivers::config_maps_read(&s);
    assert_eq!(read, [("istio-system".to_owned(), "istio".to_owned())]);
    let s = fixture("cilium-gateway-off.yaml");
    let read = hairpin_planner::receivers::config_maps_read(&s);
    assert_eq!(
        read,
        [("kube-system".to_owned(), "cilium-config".to_owned())]
    );
}

/// hairpin's own Service for the load balancer of the fixtures, as a previous run wrote it.
const HAIRPIN_SERVICE: &str = "---
apiVersion: v1
kind: Service
metadata:
  name: hairpin-ingress-nginx-ingress-nginx-controller
  namespace: hairpin
  labels: {app.kubernetes.io/managed-by: hairpin}
  annotations: {hairpin.io/source: ingress-nginx/ingress-nginx-controller}
spec:
  type: ClusterIP
  clusterIP: 10.96.0.50
  selector: {app.kubernetes.io/name: hairpin, app.kubernetes.io/component: proxy}
  ports: [{name: p80, port: 80, targetPort: 10000}, {name: p443, port: 443, targetPort: 10001}]
";

#[test]
fn a_mismatch_keeps_the_cure_hairpin_already_has_rather_than_tear_it_down() {
    let mut s = with_annotation(
        "ingress-nginx-off.yaml",
        "load-balancer.hetzner.cloud/uses-proxyprotocol: \"true\"",
    );
    load_yaml(&mut s, "hairpin", HAIRPIN_SERVICE).unwrap();
    let config = PlannerConfig::default();
    let d = discover(&s, &config);
    assert!(d.not_needed.is_empty(), "{d:?}");
    let [lb] = d.load_balancers.as_slice() else {
        panic!("{d:?}")
    };
    // Planned from the annotation, as before the receiver disagreed.
    assert_eq!(
        lb.proxy_sources,
        ["load-balancer.hetzner.cloud/uses-proxyprotocol=true"]
    );
    assert_eq!(
        lb.receiver.as_ref().map(|r| r.requirement),
        Some(Requirement::Off)
    );
    let why = lb
        .receiver_mismatch
        .as_deref()
        .expect("the mismatch is said");
    let [warning] = d.warnings.as_slice() else {
        panic!("{:?}", d.warnings)
    };
    assert_eq!(warning.message, why);
    for part in [
        "BROKEN for clients outside the cluster too",
        "hairpin keeps the cure it already has in place for this load balancer",
        "Fix: turn the PROXY protocol on in the receiver",
    ] {
        assert!(why.contains(part), "{part}: {why}");
    }
    // The whole plan keeps its hairpin Service (not an orphan to delete), and says why.
    let plan = hairpin_planner::desired(&s, &config);
    assert_eq!(plan.load_balancers.len(), 1);
    assert!(
        plan.orphaned_services.is_empty(),
        "{:?}",
        plan.orphaned_services
    );
    let text = hairpin_planner::render::text(&plan);
    assert!(
        text.contains("  mismatch         BROKEN for clients outside the cluster too"),
        "{text}"
    );

    // Without a cure in place, nothing is started.
    let s = with_annotation(
        "ingress-nginx-off.yaml",
        "load-balancer.hetzner.cloud/uses-proxyprotocol: \"true\"",
    );
    let d = discover(&s, &config);
    assert_eq!(d.not_needed[0].reason, SkipReason::ReceiverMismatch);
    assert!(
        d.warnings[0]
            .message
            .contains("hairpin changes nothing for this load balancer"),
        "{:?}",
        d.warnings
    );
}

#[test]
fn a_receiver_requiring_the_header_behind_an_lb_without_proxy_keeps_an_existing_cure() {
    let mut s = with_annotation(
        "kong-required.yaml",
        "service.beta.kubernetes.io/exoscale-loadbalancer-zone: ch-gva-2",
    );
    let lb = &s.services[0].metadata;
    let source = format!(
        "{}/{}",
        lb.namespace.as_deref().unwrap(),
        lb.name.as_deref().unwrap()
    );
    load_yaml(
        &mut s,
        "hairpin",
        &HAIRPIN_SERVICE.replace("ingress-nginx/ingress-nginx-controller", &source),
    )
    .unwrap();
    let d = discover(&s, &PlannerConfig::default());
    let [lb] = d.load_balancers.as_slice() else {
        panic!("{d:?}")
    };
    assert!(lb.receiver_mismatch.is_some());
    // Planned as the receiver's requirement planned it.
    assert!(
        lb.proxy_sources[0].starts_with("Kong KONG_PROXY_LISTEN="),
        "{lb:?}"
    );
    assert!(
        lb.ports
            .iter()
            .all(|p| p.proxy_protocol == Some(ProxyVersion::V1))
    );
}

#[test]
fn slimmed_workloads_read_exactly_as_whole_ones() {
    let mut smaller = 0;
    for (name, _, _) in FIXTURES {
        let whole = fixture(name);
        let mut slimmed = whole.clone();
        for w in &mut slimmed.receivers.workloads {
            hairpin_planner::workloads::slim_template(&mut w.template);
        }
        smaller += usize::from(whole.receivers.workloads != slimmed.receivers.workloads);
        for svc in &whole.services {
            assert_eq!(
                receiver_of(&whole, svc),
                receiver_of(&slimmed, svc),
                "{name}"
            );
        }
        assert_eq!(
            hairpin_planner::receivers::config_maps_read(&whole),
            hairpin_planner::receivers::config_maps_read(&slimmed),
            "{name}"
        );
    }
    assert!(smaller >= 5, "{smaller}");
}

/// The requirement read on each Service port (`port -> requirement`).
fn per_port(name: &str) -> Vec<(i32, Requirement)> {
    let s = fixture(name);
    let r = receiver_of(&s, &s.services[0]).unwrap();
    r.ports.iter().map(|p| (p.port, p.requirement)).collect()
}

#[test]
fn traefik_is_read_per_entry_point() {
    assert_eq!(
        per_port("traefik-websecure-only.yaml"),
        [(80, Requirement::Off), (443, Requirement::Optional)]
    );
    let s = fixture("traefik-websecure-only.yaml");
    let r = receiver_of(&s, &s.services[0]).unwrap();
    assert!(
        r.ports[0]
            .setting
            .contains("entry point web (:8000) has no proxyProtocol"),
        "{:?}",
        r.ports[0]
    );
    assert!(r.describe().contains("80 (web) off by"), "{}", r.describe());
    // The load balancer sends PROXY on every port: port 80 is broken for everyone and says
    // so, port 443 accepts a missing header and needs no cure.
    let s = with_annotation(
        "traefik-websecure-only.yaml",
        "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol: \"true\"",
    );
    let d = discover(&s, &PlannerConfig::default());
    assert!(d.load_balancers.is_empty(), "{d:?}");
    assert_eq!(d.not_needed[0].reason, SkipReason::ReceiverMismatch);
    let [warning] = d.warnings.as_slice() else {
        panic!("{:?}", d.warnings)
    };
    assert!(
        warning
            .message
            .starts_with("BROKEN for clients outside the cluster too, on port 80:"),
        "{}",
        warning.message
    );
    assert!(!warning.message.contains("443"), "{}", warning.message);
}

#[test]
fn kong_is_read_per_listener() {
    assert_eq!(
        per_port("kong-tls-only.yaml"),
        [(80, Requirement::Off), (443, REQUIRED)]
    );
    // Bare metal, no annotation: 443 is hairpinned with PROXY, 80 needs nothing; no warning.
    let s = fixture("kong-tls-only.yaml");
    let d = discover(&s, &PlannerConfig::default());
    assert_eq!(d.load_balancers.len(), 1, "{d:?}");
    let lb = &d.load_balancers[0];
    let ports: Vec<_> = lb
        .ports
        .iter()
        .map(|p| (p.port, p.proxy_protocol))
        .collect();
    assert_eq!(ports, [(80, None), (443, Some(ProxyVersion::V1))]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(lb.receiver_mismatch, None);
    // A load balancer that sends PROXY on both: 443 is cured, 80 is BROKEN on its own.
    let s = with_annotation(
        "kong-tls-only.yaml",
        "load-balancer.hetzner.cloud/uses-proxyprotocol: \"true\"",
    );
    let d = discover(&s, &PlannerConfig::default());
    assert_eq!(d.load_balancers.len(), 1, "{d:?}");
    let lb = &d.load_balancers[0];
    let ports: Vec<_> = lb
        .ports
        .iter()
        .map(|p| (p.port, p.proxy_protocol))
        .collect();
    assert_eq!(ports, [(80, None), (443, Some(ProxyVersion::V1))]);
    let [warning] = d.warnings.as_slice() else {
        panic!("{:?}", d.warnings)
    };
    assert!(
        warning.message.contains("on port 80:"),
        "{}",
        warning.message
    );
    assert_eq!(
        lb.receiver_mismatch.as_deref(),
        Some(warning.message.as_str())
    );
}

#[test]
fn envoy_gateway_listener_policy_overrides_the_gateway_wide_one() {
    assert_eq!(
        per_port("envoy-gateway-two-policies.yaml"),
        [(80, Requirement::Off), (443, REQUIRED)]
    );
    let s = fixture("envoy-gateway-two-policies.yaml");
    let d = discover(&s, &PlannerConfig::default());
    assert_eq!(d.load_balancers.len(), 1, "{d:?}");
    let lb = &d.load_balancers[0];
    let ports: Vec<_> = lb
        .ports
        .iter()
        .map(|p| (p.port, p.proxy_protocol))
        .collect();
    assert_eq!(ports, [(80, None), (443, Some(ProxyVersion::V1))]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert!(
        lb.proxy_sources[0].contains("listener https: proxyProtocol: {}"),
        "{:?}",
        lb.proxy_sources
    );
    // Among listener-scoped policies the oldest wins: a newer one saying nothing changes
    // nothing; an older one does.
    let newer = "---\napiVersion: gateway.envoyproxy.io/v1alpha1\nkind: ClientTrafficPolicy\nmetadata:\n  name: later\n  namespace: default\n  creationTimestamp: \"2025-08-01T10:00:00Z\"\nspec:\n  targetRefs:\n    - kind: Gateway\n      name: eg\n      sectionName: https\n";
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/receivers/envoy-gateway-two-policies.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let s = snapshot(&format!("{text}{newer}"));
    let r = receiver_of(&s, &s.services[0]).unwrap();
    assert_eq!(r.on_port(443).requirement, REQUIRED);
    let older = newer.replace("2025-08-01", "2025-06-15");
    let s = snapshot(&format!("{text}{older}"));
    let r = receiver_of(&s, &s.services[0]).unwrap();
    assert_eq!(r.requirement, Requirement::Off, "{r:?}");
}

#[test]
fn a_listener_set_port_of_envoy_gateway_is_unknown() {
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/receivers/envoy-gateway-two-policies.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    // A port the Gateway has no listener for (a ListenerSet's), and a policy on a ListenerSet.
    let text = text.replacen(
        "      targetPort: 10443\n",
        "      targetPort: 10443\n    - name: tcp-8443\n      port: 8443\n      protocol: TCP\n      targetPort: 18443\n",
        1,
    );
    let extra = "---\napiVersion: gateway.envoyproxy.io/v1alpha1\nkind: ClientTrafficPolicy\nmetadata:\n  name: on-listener-set\n  namespace: default\nspec:\n  targetRefs:\n    - group: gateway.networking.x-k8s.io\n      kind: XListenerSet\n      name: extra\n  proxyProtocol: {}\n";
    let s = snapshot(&format!("{text}{extra}"));
    let r = receiver_of(&s, &s.services[0]).unwrap();
    assert_eq!(r.on_port(8443).requirement, Requirement::Unknown, "{r:?}");
    assert!(r.on_port(8443).setting.contains("ListenerSet"), "{r:?}");
}

#[test]
fn istio_with_an_envoy_filter_is_unknown_never_off() {
    let s = fixture("istio-envoyfilter.yaml");
    let r = receiver_of(&s, &s.services[0]).unwrap();
    assert_eq!(r.requirement, Requirement::Unknown);
    assert!(
        r.setting
            .contains("EnvoyFilter istio-system/proxy-protocol"),
        "{}",
        r.setting
    );
    // The LB's own annotation decides; no BROKEN warning.
    let s = with_annotation(
        "istio-envoyfilter.yaml",
        "load-balancer.hetzner.cloud/uses-proxyprotocol: \"true\"",
    );
    let d = discover(&s, &PlannerConfig::default());
    assert_eq!(d.load_balancers.len(), 1, "{d:?}");
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    // An EnvoyFilter that selects other pods changes nothing: off.
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/receivers/istio-envoyfilter.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
    .replace(
        "      istio: ingressgateway\n  configPatches",
        "      istio: eastwestgateway\n  configPatches",
    );
    let s = snapshot(&text);
    let r = receiver_of(&s, &s.services[0]).unwrap();
    assert_eq!(r.requirement, Requirement::Off, "{r:?}");
}

#[test]
fn install_methods_are_identified() {
    // istio/gateway chart: image auto, injected.
    let s = fixture("istio-gateway-chart.yaml");
    let d = discover(&s, &PlannerConfig::default());
    assert_eq!(d.load_balancers.len(), 1, "{d:?}");
    // NGF 1.x: the cluster-scoped NginxProxy through the GatewayClass.
    let s = fixture("nginx-gateway-fabric-1x.yaml");
    let r = receiver_of(&s, &s.services[0]).unwrap();
    assert_eq!(r.read_from, "NginxProxy ngf-proxy-config");
    // jcmoraisjr's haproxy-ingress, with use-proxy-protocol off: off.
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/receivers/haproxy-ingress-required.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let s = snapshot(&text.replace(
        "use-proxy-protocol: \"true\"",
        "use-proxy-protocol: \"false\"",
    ));
    let r = receiver_of(&s, &s.services[0]).unwrap();
    assert_eq!(r.requirement, Requirement::Off, "{r:?}");
}

#[test]
fn settings_from_what_is_not_read_are_unknown_never_off() {
    let read = |name: &str, from: &str, to: &str| {
        let text = std::fs::read_to_string(format!(
            "{}/tests/fixtures/receivers/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        assert!(text.contains(from), "{name}: {from}");
        let s = snapshot(&text.replacen(from, to, 1));
        receiver_of(&s, &s.services[0]).unwrap()
    };
    // Kong's KONG_PROXY_LISTEN from a ConfigMap reference.
    let r = read(
        "kong-off.yaml",
        "              value: \"0.0.0.0:8000, [::]:8000, 0.0.0.0:8443 http2 ssl, [::]:8443 http2 ssl\"\n",
        "              valueFrom:\n                configMapKeyRef:\n                  name: kong-env\n                  key: proxy-listen\n",
    );
    assert_eq!(r.requirement, Requirement::Unknown, "{r:?}");
    // Traefik's static configuration in a ConfigMap volume the snapshot lacks.
    let r = read(
        "traefik-k3s.yaml",
        "    spec:\n      containers:\n",
        "    spec:\n      volumes:\n        - name: config\n          configMap:\n            name: traefik-config\n      containers:\n",
    );
    assert_eq!(r.requirement, Requirement::Unknown, "{r:?}");
    // jcmoraisjr's haproxy-ingress with a custom template.
    let r = read(
        "haproxy-ingress-required.yaml",
        "    spec:\n      containers:\n",
        "    spec:\n      volumes:\n        - name: haproxy-template\n          configMap:\n            name: haproxy-ingress-template\n      containers:\n",
    );
    assert_eq!(r.requirement, Requirement::Unknown, "{r:?}");
}

#[test]
fn kgateway_per_port_replaces_the_default_for_its_port() {
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/receivers/kgateway-required.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    // A `perPort` entry for 80 without proxyProtocol: 80 off, 443 keeps the default.
    let text = text.replacen(
        "  default:\n",
        "  perPort:\n    - port: 80\n      listener:\n        perConnectionBufferLimitBytes: 32768\n  default:\n",
        1,
    );
    let s = snapshot(&text);
    let r = receiver_of(&s, &s.services[0]).unwrap();
    let ports: Vec<_> = r.ports.iter().map(|p| (p.port, p.requirement)).collect();
    assert_eq!(ports, [(80, Requirement::Off), (443, REQUIRED)], "{r:?}");
}
