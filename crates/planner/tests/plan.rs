//! The plan: hairpin Services, routes, DNS change, hosts block, YAML output that reads back
//! into typed objects, stability, and errors.

mod support;

use std::collections::BTreeMap;

use hairpin_planner::load::load_yaml;
use hairpin_planner::{
    ClusterSnapshot, DnsMode, ObjectRef, PlanError, PlannerConfig, ProxyHeader, SkipReason,
    cluster_dns_service, corefile, desired, render,
};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;
use support::{KUBEADM_COREFILE, coredns, fixture, ingress, lb_service, proxied_lb};

fn example() -> ClusterSnapshot {
    let mut s = ClusterSnapshot::default();
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/cluster.yaml"
    ))
    .unwrap();
    let notes = load_yaml(&mut s, "examples/cluster.yaml", &text).unwrap();
    assert_eq!(
        notes,
        ["skipped v1 ServiceAccount coredns: not read by the planner"]
    );
    s
}

fn two_lbs() -> ClusterSnapshot {
    ClusterSnapshot {
        services: vec![
            lb_service(
                "ingress",
                "nginx",
                json!({ "load-balancer.hetzner.cloud/uses-proxyprotocol": "true" }),
                json!([{ "ip": "203.0.113.10" }]),
            ),
            lb_service(
                "edge",
                "traefik",
                json!({ "hairpin.io/proxy-protocol": "v2" }),
                json!([{ "ip": "2001:db8::7" }]),
            ),
        ],
        ingresses: vec![
            ingress(
                "shop",
                "web",
                None,
                &["shop.example.com"],
                &["*.shop.example.com"],
                Some("203.0.113.10"),
            ),
            ingress(
                "auth",
                "sso",
                None,
                &["sso.example.org"],
                &[],
                Some("2001:db8::7"),
            ),
        ],
        config_maps: vec![coredns(KUBEADM_COREFILE)],
        ..ClusterSnapshot::default()
    }
}

#[test]
fn hairpin_services_routes_and_dns() {
    let plan = desired(&two_lbs(), &PlannerConfig::default());
    assert!(plan.errors.is_empty(), "{:?}", plan.errors);
    assert_eq!(plan.load_balancers.len(), 2);

    // Sorted by source Service: edge/traefik first.
    let edge = &plan.load_balancers[0];
    assert_eq!(
        edge.load_balancer.service,
        ObjectRef::new("edge", "traefik")
    );
    let svc = &edge.service;
    assert_eq!(svc.metadata.name.as_deref(), Some("hairpin-edge-traefik"));
    assert_eq!(svc.metadata.namespace.as_deref(), Some("hairpin"));
    let labels = svc.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "hairpin");
    assert_eq!(labels["hairpin.io/source-namespace"], "edge");
    assert_eq!(labels["hairpin.io/source-name"], "traefik");
    assert_eq!(
        svc.metadata.annotations.as_ref().unwrap()["hairpin.io/source"],
        "edge/traefik"
    );
    assert_eq!(svc.metadata.resource_version, None, "new object");
    let spec = svc.spec.as_ref().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(
        spec.selector.as_ref(),
        Some(&PlannerConfig::default().proxy_selector)
    );
    let ports: Vec<(i32, Option<IntOrString>)> = spec
        .ports
        .iter()
        .flatten()
        .map(|p| (p.port, p.target_port.clone()))
        .collect();
    assert_eq!(
        ports,
        [
            (80, Some(IntOrString::Int(10000))),
            (443, Some(IntOrString::Int(10001)))
        ]
    );

    let r = &edge.routes[1];
    assert_eq!(r.listen, "[::]:10001");
    assert_eq!(r.upstream, "traefik.edge.svc.cluster.local:443");
    assert_eq!(r.proxy_protocol, ProxyHeader::V2);
    assert_eq!(r.destination, "[2001:db8::7]:443");

    let nginx = &plan.load_balancers[1];
    assert_eq!(nginx.routes[0].listen, "[::]:10002");
    assert_eq!(nginx.routes[0].destination, "203.0.113.10:80");
    assert_eq!(nginx.routes[0].proxy_protocol, ProxyHeader::V1);

    // routes.json: exactly the fields the proxy reads.
    let json: serde_json::Value =
        serde_json::from_str(&plan.routes_config_map.data.as_ref().unwrap()["routes.json"])
            .unwrap();
    assert_eq!(json.as_array().unwrap().len(), 4);
    assert_eq!(
        json[0],
        json!({ "name": "edge/traefik/80", "listen": "[::]:10000", "upstream": "traefik.edge.svc.cluster.local:80",
                "proxy_protocol": "v2", "destination": "[2001:db8::7]:80" })
    );

    let dns = plan.dns.as_ref().unwrap();
    assert_eq!(dns.mode, DnsMode::Corefile);
    assert_eq!(
        dns.coredns().unwrap().config_map,
        ObjectRef::new("kube-system", "coredns")
    );
    assert_eq!(dns.coredns().unwrap().key, "Corefile");
    assert!(dns.coredns().unwrap().changed);
    assert!(
        dns.coredns()
            .unwrap()
            .desired
            // The exact name and the wildcard of one load balancer share one rule.
            .contains(
                "rewrite stop name regex ^(?:shop\\.example\\.com|[^.]+\\.shop\\.example\\.com)\\.$ \
                 hairpin-ingress-nginx.hairpin.svc.cluster.local answer auto"
            ),
        "{}",
        dns.coredns().unwrap().desired
    );
    assert!(
        dns.coredns()
            .unwrap()
            .desired
            .contains("sso.example.org hairpin-edge-traefik.hairpin.svc.cluster.local")
    );
    let cm = dns.coredns().unwrap().object.as_ref().unwrap();
    assert_eq!(
        cm.metadata.resource_version.as_deref(),
        Some("100"),
        "guarded update"
    );

    // Hosts: wildcards left out; ClusterIPs unknown until the Services exist.
    let hosts = support::hosts_names(&plan);
    assert_eq!(hosts, ["shop.example.com", "sso.example.org"]);
    let ips = BTreeMap::from([(
        ObjectRef::new("hairpin", "hairpin-ingress-nginx"),
        vec!["10.96.0.20".parse().unwrap()],
    )]);
    let (entries, missing) = plan.hosts.hosts_entries(&ips);
    assert_eq!(
        entries,
        [hairpin_planner::hosts::HostsEntry::new(
            "10.96.0.20".parse().unwrap(),
            ["shop.example.com"]
        )]
    );
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0].hostname, "sso.example.org");
}

#[test]
fn plan_is_deterministic_and_input_order_does_not_matter() {
    let a = desired(&two_lbs(), &PlannerConfig::default());
    let mut reversed = two_lbs();
    reversed.services.reverse();
    reversed.ingresses.reverse();
    assert_eq!(a, desired(&reversed, &PlannerConfig::default()));
}

#[test]
fn existing_hairpin_services_keep_their_ports_cluster_ip_and_resource_version() {
    let first = desired(&two_lbs(), &PlannerConfig::default());
    // The cluster after applying: our Services exist with a ClusterIP and a resourceVersion.
    let mut cluster = two_lbs();
    for lb in &first.load_balancers {
        let mut svc = lb.service.clone();
        svc.metadata.resource_version = Some("7".into());
        svc.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.30".into());
        cluster.services.push(svc);
    }
    // A new load balancer that sorts before the others must not shift their ports.
    cluster
        .services
        .push(proxied_lb("aaa", "first", "192.0.2.99"));
    let second = desired(&cluster, &PlannerConfig::default());
    let ports = |plan: &hairpin_planner::Plan, ns: &str| -> Vec<String> {
        let lb = plan
            .load_balancers
            .iter()
            .find(|lb| lb.load_balancer.service.namespace == ns)
            .unwrap();
        lb.routes.iter().map(|r| r.listen.clone()).collect()
    };
    assert_eq!(ports(&first, "edge"), ports(&second, "edge"));
    assert_eq!(ports(&first, "ingress"), ports(&second, "ingress"));
    assert_eq!(ports(&second, "aaa"), ["[::]:10004", "[::]:10005"]);
    let edge = second
        .load_balancers
        .iter()
        .find(|lb| lb.load_balancer.service.namespace == "edge")
        .unwrap();
    assert_eq!(edge.service.metadata.resource_version.as_deref(), Some("7"));
    assert_eq!(
        edge.service.spec.as_ref().unwrap().cluster_ip.as_deref(),
        Some("10.96.0.30")
    );
    assert_eq!(second.known_cluster_ips().len(), 2);
}

#[test]
fn hairpin_services_no_longer_needed_are_orphans() {
    let first = desired(&two_lbs(), &PlannerConfig::default());
    let mut cluster = two_lbs();
    cluster
        .services
        .extend(first.load_balancers.iter().map(|lb| lb.service.clone()));
    cluster
        .services
        .retain(|s| s.metadata.name.as_deref() != Some("traefik"));
    let plan = desired(&cluster, &PlannerConfig::default());
    assert_eq!(
        plan.orphaned_services,
        [ObjectRef::new("hairpin", "hairpin-edge-traefik")]
    );
}

#[test]
fn long_and_colliding_service_names_stay_valid_and_distinct() {
    let long = "a".repeat(60);
    let snapshot = ClusterSnapshot {
        services: vec![
            proxied_lb("a-b", "c", "192.0.2.1"),
            proxied_lb("a", "b-c", "192.0.2.2"),
            proxied_lb(&long, &long, "192.0.2.3"),
        ],
        ..ClusterSnapshot::default()
    };
    let plan = desired(&snapshot, &PlannerConfig::default());
    let names: Vec<String> = plan
        .load_balancers
        .iter()
        .map(|lb| lb.service.metadata.name.clone().unwrap())
        .collect();
    for n in &names {
        assert!(
            n.len() <= 63 && n.starts_with("hairpin-") && !n.ends_with('-'),
            "{n}"
        );
    }
    assert_ne!(names[0], names[1]);
}

#[test]
fn yaml_output_parses_back_into_typed_objects() {
    let snapshot = example();
    let plan = desired(&snapshot, &PlannerConfig::default());
    let yaml = render::yaml(&plan).unwrap();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).unwrap();
    let mut services = Vec::new();
    let mut config_maps = Vec::new();
    for doc in docs {
        match doc["kind"].as_str().unwrap() {
            "Service" => services.push(serde_json::from_value::<Service>(doc).unwrap()),
            "ConfigMap" => config_maps.push(serde_json::from_value::<ConfigMap>(doc).unwrap()),
            other => panic!("unexpected kind {other}"),
        }
    }
    assert_eq!(
        services,
        plan.load_balancers
            .iter()
            .map(|lb| lb.service.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(config_maps.len(), 2);
    assert_eq!(
        &config_maps[0],
        plan.dns
            .as_ref()
            .unwrap()
            .coredns()
            .unwrap()
            .object
            .as_ref()
            .unwrap()
    );
    assert_eq!(config_maps[1], plan.routes_config_map);
    // The Corefile that would be written survives the YAML round trip byte for byte.
    assert_eq!(
        config_maps[0].data.as_ref().unwrap()["Corefile"],
        plan.dns.as_ref().unwrap().coredns().unwrap().desired
    );
}

#[test]
fn corefile_without_kubernetes_block_is_an_error_and_nothing_is_written() {
    let mut snapshot = two_lbs();
    snapshot.config_maps = vec![coredns(
        ".:53 {\n    errors\n    forward . /etc/resolv.conf\n}\n",
    )];
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert!(plan.dns.is_none());
    assert!(plan.has_errors());
    let message = plan.errors[0].to_string();
    assert!(
        message.contains("kube-system/coredns") && message.contains("kubernetes"),
        "{message}"
    );
    assert_eq!(plan.errors[0].metric_label(), "no_kubernetes_block");
    let yaml = render::yaml(&plan).unwrap();
    assert!(!yaml.contains("name: coredns"), "{yaml}");
    // The rest of the plan is still computed.
    assert_eq!(plan.load_balancers.len(), 2);
}

#[test]
fn a_corefile_that_fits_alone_but_not_beside_the_other_keys_is_refused() {
    let mut snapshot = two_lbs();
    let mut cm = coredns(KUBEADM_COREFILE);
    // kubeadm-style NodeHosts, large enough that the Corefile with our rules tips the total.
    let node_hosts = "10.0.0.1 node\n".repeat(1_048_000 / 13);
    cm.data
        .as_mut()
        .unwrap()
        .insert("NodeHosts".into(), node_hosts);
    snapshot.config_maps = vec![cm];
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert!(plan.dns.is_none(), "nothing is planned for CoreDNS");
    let message = plan.errors[0].to_string();
    assert!(
        message.starts_with("ConfigMap kube-system/coredns: with the hairpin rules in key Corefile its keys would hold")
            && message.contains("over the 1048576-byte ConfigMap limit"),
        "{message}"
    );
    assert!(
        matches!(&plan.errors[0], PlanError::ConfigMapTooLarge { config_map, key, bytes, limit }
            if config_map.to_string() == "kube-system/coredns" && key == "Corefile" && bytes > limit),
        "{:?}",
        plan.errors
    );
    assert_eq!(plan.errors[0].metric_label(), "config_map_too_large");
    let yaml = render::yaml(&plan).unwrap();
    assert!(!yaml.contains("name: coredns"), "never written: {yaml}");

    // The same Corefile beside a small NodeHosts is planned.
    snapshot.config_maps = vec![coredns(KUBEADM_COREFILE)];
    assert!(desired(&snapshot, &PlannerConfig::default()).dns.is_some());
}

#[test]
fn missing_coredns_config_map_is_an_error() {
    let mut snapshot = two_lbs();
    snapshot.config_maps.clear();
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert!(plan.dns.is_none());
    assert!(
        plan.errors[0].to_string().contains("no CoreDNS ConfigMap"),
        "{:?}",
        plan.errors
    );
    assert_eq!(plan.errors[0].metric_label(), "no_coredns_config_map");
}

#[test]
fn an_unreadable_imported_key_is_named_in_a_warning_escaped_once() {
    // k3s imports every `.server` key of coredns-custom; this one (its name and its server
    // keys holding a terminal escape and a backslash) has no braces: left alone, with a
    // warning that quotes both, each escaped once (the editor's error escapes its part).
    let mut snapshot = two_lbs();
    snapshot.config_maps = vec![
        coredns(&fixture("k3s.Corefile")),
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "coredns-custom", "namespace": "kube-system" },
            "data": { "b\u{1b}ad.server": "ex\u{1b}\\ample.net:53\nforward . 192.0.2.1\n" }
        }))
        .unwrap(),
    ];
    let plan = desired(&snapshot, &PlannerConfig::default());
    let warning = plan
        .warnings
        .iter()
        .find(|w| w.message.starts_with("key b"))
        .unwrap_or_else(|| panic!("{:?}", plan.warnings));
    assert_eq!(warning.subject, "ConfigMap kube-system/coredns-custom");
    assert!(
        warning.message.starts_with(
            "key b\\u{1b}ad.server: Corefile line 1: the server block `ex\\u{1b}\\\\ample.net:53` has no braces"
        ),
        "{}",
        warning.message
    );
}

#[test]
fn auto_mode_uses_coredns_custom_where_the_corefile_imports_it() {
    let mut snapshot = two_lbs();
    snapshot.config_maps = vec![coredns(&fixture("k3s.Corefile"))];
    let plan = desired(&snapshot, &PlannerConfig::default());
    let dns = plan.dns.as_ref().unwrap();
    assert_eq!(dns.mode, DnsMode::Custom);
    assert_eq!(
        dns.coredns().unwrap().config_map,
        ObjectRef::new("kube-system", "coredns-custom")
    );
    assert_eq!(dns.coredns().unwrap().key, "hairpin.override");
    assert_eq!(dns.coredns().unwrap().current, None);
    assert!(
        dns.coredns()
            .unwrap()
            .desired
            .contains("shop\\.example\\.com")
    );
    let cm = dns.coredns().unwrap().object.as_ref().unwrap();
    assert_eq!(
        cm.metadata.resource_version, None,
        "coredns-custom did not exist"
    );
    assert_eq!(
        cm.data.as_ref().unwrap()["hairpin.override"],
        dns.coredns().unwrap().desired
    );

    // An existing coredns-custom keeps its other keys and its resourceVersion.
    snapshot.config_maps.push(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "coredns-custom", "namespace": "kube-system", "resourceVersion": "55" },
            "data": { "mine.override": "log\n" }
        }))
        .unwrap(),
    );
    let plan = desired(&snapshot, &PlannerConfig::default());
    let cm = plan
        .dns
        .as_ref()
        .unwrap()
        .coredns()
        .unwrap()
        .object
        .as_ref()
        .unwrap();
    assert_eq!(cm.metadata.resource_version.as_deref(), Some("55"));
    assert_eq!(cm.data.as_ref().unwrap()["mine.override"], "log\n");

    // Forcing corefile mode edits the Corefile instead.
    let config = PlannerConfig {
        dns_mode: DnsMode::Corefile,
        ..PlannerConfig::default()
    };
    let plan = desired(&snapshot, &config);
    assert_eq!(
        plan.dns.as_ref().unwrap().coredns().unwrap().config_map,
        ObjectRef::new("kube-system", "coredns")
    );
}

fn node_local_dns_cm(name: &str, corefile: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": "kube-system", "resourceVersion": "5" },
        "data": { "Corefile": corefile }
    }))
    .unwrap()
}

/// `two_lbs` after a first apply: the hairpin Services exist, with ClusterIPs.
fn applied(mut snapshot: ClusterSnapshot) -> ClusterSnapshot {
    let first = desired(&snapshot, &PlannerConfig::default());
    for (i, lb) in first.load_balancers.iter().enumerate() {
        let mut svc = lb.service.clone();
        svc.metadata.resource_version = Some("7".into());
        svc.spec.as_mut().unwrap().cluster_ip = Some(format!("10.96.0.{}", 30 + i));
        snapshot.services.push(svc);
    }
    snapshot
}

#[test]
fn missing_reload_is_warned_about_and_node_local_dns_waits_for_the_cluster_ips() {
    let mut snapshot = two_lbs();
    snapshot.config_maps = vec![
        coredns(&KUBEADM_COREFILE.replace("    reload\n", "")),
        node_local_dns_cm("node-local-dns", &fixture("nodelocaldns.Corefile")),
    ];
    let plan = desired(&snapshot, &PlannerConfig::default());
    let warnings: Vec<String> = plan.warnings.iter().map(ToString::to_string).collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("kube-system/coredns") && w.contains("reload")),
        "{warnings:#?}"
    );
    // The hairpin Services do not exist yet: node-local-dns, which must answer the names
    // with their ClusterIPs, gets nothing yet, and the plan says why.
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("kube-system/node-local-dns")
                && w.contains("ClusterIP of their hairpin Service is not known yet")),
        "{warnings:#?}"
    );
    let dns = plan.dns.as_ref().unwrap();
    assert_eq!(dns.writes.len(), 2);
    assert!(!dns.writes[1].changed);
}

#[test]
fn node_local_dns_answers_the_names_in_its_root_block_once_the_cluster_ips_are_known() {
    let original = fixture("nodelocaldns.Corefile");
    let mut snapshot = applied(two_lbs());
    snapshot.config_maps = vec![
        coredns(KUBEADM_COREFILE),
        node_local_dns_cm("node-local-dns", &original),
    ];
    let plan = desired(&snapshot, &PlannerConfig::default());
    let dns = plan.dns.as_ref().unwrap();
    let nld = &dns.writes[1];
    assert_eq!(
        nld.config_map,
        ObjectRef::new("kube-system", "node-local-dns")
    );
    assert!(nld.changed);
    let hairpin_planner::WriteEdit::Blocks { inserts } = &nld.edit else {
        panic!("{:?}", nld.edit)
    };
    assert_eq!(inserts.len(), 1);
    assert_eq!(inserts[0].server.keys, ".:53");
    assert_eq!(inserts[0].form, corefile::Form::Answer);
    assert!(
        nld.desired
            .contains("answer \"{{ .Name }} 30 IN A 10.96.0.3")
    );
    assert_eq!(corefile::remove(&nld.desired).unwrap().text, original);
    // The write is guarded by the resourceVersion read.
    let cm = nld.object.as_ref().unwrap();
    assert_eq!(cm.metadata.resource_version.as_deref(), Some("5"));
    assert!(
        !plan
            .warnings
            .iter()
            .any(|w| w.subject.contains("node-local-dns"))
    );

    // Turned off: nothing written, the old warning with its fix instead.
    let off = PlannerConfig {
        node_local_dns: hairpin_planner::NodeLocalDns::Off,
        ..PlannerConfig::default()
    };
    let plan = desired(&snapshot, &off);
    assert_eq!(plan.dns.as_ref().unwrap().writes.len(), 1);
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.subject.contains("node-local-dns") && w.message.contains("bypassing")),
        "{:#?}",
        plan.warnings
    );
}

#[test]
fn custom_namespace_selector_and_port_base() {
    let config = PlannerConfig {
        namespace: "net".into(),
        proxy_selector: BTreeMap::from([("app".to_owned(), "px".to_owned())]),
        listener_port_base: 20000,
        ..PlannerConfig::default()
    };
    let plan = desired(&two_lbs(), &config);
    let lb = &plan.load_balancers[0];
    assert_eq!(lb.service.metadata.namespace.as_deref(), Some("net"));
    assert_eq!(
        lb.service.spec.as_ref().unwrap().selector.as_ref().unwrap()["app"],
        "px"
    );
    assert_eq!(lb.routes[0].listen, "[::]:20000");
    assert_eq!(
        plan.routes_config_map.metadata.namespace.as_deref(),
        Some("net")
    );
    assert!(
        plan.dns
            .as_ref()
            .unwrap()
            .coredns()
            .unwrap()
            .desired
            .contains("hairpin-edge-traefik.net.svc.cluster.local")
    );
}

#[test]
fn text_and_diff_renderings() {
    let snapshot = example();
    let plan = desired(&snapshot, &PlannerConfig::default());
    let text = render::text(&plan);
    assert!(
        text.starts_with("hairpin plan: 2 load balancers need a hairpin, 1 does not\n"),
        "{text}"
    );
    assert!(
        text.contains("backoffice/internal-api  no PROXY protocol annotation"),
        "{text}"
    );
    let diff = render::diff(&plan, &snapshot);
    assert!(
        diff.starts_with(
            "--- a/kube-system/coredns/Corefile\n+++ b/kube-system/coredns/Corefile\n"
        ),
        "{diff}"
    );
    assert!(
        diff.contains("--- /dev/null\n+++ b/hairpin/hairpin-routes/routes.json\n"),
        "{diff}"
    );
}

#[test]
fn text_hosts_block_uses_existing_cluster_ips_and_placeholders() {
    let first = desired(&two_lbs(), &PlannerConfig::default());
    let mut cluster = two_lbs();
    let mut existing = first.load_balancers[1].service.clone();
    existing.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.30".into());
    cluster.services.push(existing);
    let text = render::text(&desired(&cluster, &PlannerConfig::default()));
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.contains(&vec!["10.96.0.30", "shop.example.com"]),
        "{text}"
    );
    assert!(
        rows.contains(&vec![
            "<ClusterIP",
            "of",
            "hairpin/hairpin-edge-traefik>",
            "sso.example.org"
        ]),
        "{text}"
    );
    assert!(
        text.contains("hairpin/hairpin-ingress-nginx (SingleStack IPv4; ClusterIP 10.96.0.30)"),
        "{text}"
    );
}

#[test]
fn listener_ports_running_out_are_reported_not_wrapped() {
    let config = PlannerConfig {
        listener_port_base: 65534,
        ..PlannerConfig::default()
    };
    let plan = desired(&two_lbs(), &config);
    let listens: Vec<&str> = plan.routes.iter().map(|r| r.listen.as_str()).collect();
    assert_eq!(listens, ["[::]:65534", "[::]:65535"]);
    // The load balancer left without listeners is not planned at all: no port-less Service,
    // no DNS redirect to it.
    assert_eq!(plan.load_balancers.len(), 1);
    assert!(
        !plan
            .dns
            .as_ref()
            .unwrap()
            .coredns()
            .unwrap()
            .desired
            .contains("shop.example.com")
    );
    let w: Vec<String> = plan.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        w.iter()
            .filter(|w| w.contains("no free proxy listener port"))
            .count(),
        2,
        "{w:#?}"
    );
}

const SCW_V2: &str = "service.beta.kubernetes.io/scw-loadbalancer-proxy-protocol-v2";
const LINODE_DEFAULT: &str =
    "service.beta.kubernetes.io/linode-loadbalancer-default-proxy-protocol";
const LINODE_PORT_443: &str = "service.beta.kubernetes.io/linode-loadbalancer-port-443";

/// A Scaleway load balancer with PROXY v2 on port 443 only; port 80 is plain.
fn scaleway_mixed() -> ClusterSnapshot {
    ClusterSnapshot {
        services: vec![lb_service(
            "web",
            "edge",
            json!({ SCW_V2: "443" }),
            json!([{ "ip": "192.0.2.40" }]),
        )],
        ingresses: vec![ingress(
            "web",
            "site",
            None,
            &["site.example.net"],
            &[],
            Some("192.0.2.40"),
        )],
        config_maps: vec![coredns(KUBEADM_COREFILE)],
        ..ClusterSnapshot::default()
    }
}

/// A Linode NodeBalancer: no PROXY by default, `port_443` as the per-port setting of 443.
fn linode(ns: &str, name: &str, ip: &str, default: &str, port_443: &str) -> Service {
    lb_service(
        ns,
        name,
        json!({ LINODE_DEFAULT: default, LINODE_PORT_443: port_443 }),
        json!([{ "ip": ip }]),
    )
}

fn hairpin_ports(svc: &Service) -> Vec<(String, i32, i32)> {
    svc.spec
        .as_ref()
        .unwrap()
        .ports
        .iter()
        .flatten()
        .map(|p| {
            let Some(IntOrString::Int(target)) = p.target_port else {
                panic!("listener port must be a number: {p:?}");
            };
            (p.name.clone().unwrap(), p.port, target)
        })
        .collect()
}

fn route_rows(routes: &[hairpin_planner::ProxyRoute]) -> Vec<(&str, &str, &str, ProxyHeader)> {
    routes
        .iter()
        .map(|r| {
            (
                r.name.as_str(),
                r.listen.as_str(),
                r.upstream.as_str(),
                r.proxy_protocol,
            )
        })
        .collect()
}

#[test]
fn plain_ports_of_a_mixed_load_balancer_are_served_without_a_header() {
    let plan = desired(&scaleway_mixed(), &PlannerConfig::default());
    assert!(plan.errors.is_empty(), "{:?}", plan.errors);
    assert_eq!(plan.load_balancers.len(), 1);
    let lb = &plan.load_balancers[0];

    // Both ports are on the hairpin Service, each on its own listener.
    assert_eq!(
        hairpin_ports(&lb.service),
        [("http".into(), 80, 10000), ("https".into(), 443, 10001)]
    );
    // The plain port forwards as is to the same Service port the load balancer serves (80,
    // not the targetPort 8080); the PROXY port gets its v2 header.
    assert_eq!(
        route_rows(&lb.routes),
        [
            (
                "web/edge/80",
                "[::]:10000",
                "edge.web.svc.cluster.local:80",
                ProxyHeader::None
            ),
            (
                "web/edge/443",
                "[::]:10001",
                "edge.web.svc.cluster.local:443",
                ProxyHeader::V2
            ),
        ]
    );
    assert_eq!(plan.routes, lb.routes);
    assert_eq!(lb.routes[1].destination, "192.0.2.40:443");

    // routes.json says `none` for the plain port.
    let json: serde_json::Value =
        serde_json::from_str(&plan.routes_config_map.data.as_ref().unwrap()["routes.json"])
            .unwrap();
    let headers: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["proxy_protocol"].as_str().unwrap())
        .collect();
    assert_eq!(headers, ["none", "v2"]);

    // The whole hostname goes to the hairpin Service, which now answers on every port, and no
    // warning claims otherwise.
    assert!(
        plan.dns
            .as_ref()
            .unwrap()
            .coredns()
            .unwrap()
            .desired
            .contains("site.example.net hairpin-web-edge.hairpin.svc.cluster.local"),
        "{}",
        plan.dns.as_ref().unwrap().coredns().unwrap().desired
    );
    assert!(plan.warnings.is_empty(), "{:#?}", plan.warnings);

    // `hairpin plan` forms: text names the plain port, JSON and YAML carry `none`.
    let text = render::text(&plan);
    assert!(
        text.contains(
            "    [::]:10000      -> edge.web.svc.cluster.local:80   PROXY none  no header, bytes forwarded as they are\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "    [::]:10001      -> edge.web.svc.cluster.local:443  PROXY v2    destination 192.0.2.40:443\n"
        ),
        "{text}"
    );
    let as_json = serde_json::to_value(&plan).unwrap();
    assert_eq!(as_json["routes"][0]["proxy_protocol"], "none");
    assert_eq!(
        as_json["load_balancers"][0]["routes"][0]["proxy_protocol"],
        "none"
    );
    let yaml = render::yaml(&plan).unwrap();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).unwrap();
    let service: Service = serde_json::from_value(docs[0].clone()).unwrap();
    assert_eq!(hairpin_ports(&service), hairpin_ports(&lb.service));
    let routes: ConfigMap = serde_json::from_value(docs.last().unwrap().clone()).unwrap();
    assert_eq!(routes, plan.routes_config_map);
    assert!(
        routes.data.as_ref().unwrap()["routes.json"].contains(r#""proxy_protocol": "none""#),
        "{yaml}"
    );
}

#[test]
fn listener_ports_of_mixed_load_balancers_are_stable() {
    let config = PlannerConfig::default();
    // The hairpin Service as an earlier hairpin wrote it: only the PROXY port 443, on 10000.
    let mut cluster = ClusterSnapshot {
        services: vec![linode(
            "web",
            "node",
            "192.0.2.50",
            "none",
            r#"{"proxy-protocol": "v1"}"#,
        )],
        config_maps: vec![coredns(KUBEADM_COREFILE)],
        ..ClusterSnapshot::default()
    };
    let mut old = desired(&cluster, &config).load_balancers[0].service.clone();
    let spec = old.spec.as_mut().unwrap();
    spec.ports.as_mut().unwrap().retain(|p| p.port == 443);
    spec.ports.as_mut().unwrap()[0].target_port = Some(IntOrString::Int(10000));
    spec.cluster_ip = Some("10.96.0.40".into());
    cluster.services.push(old);

    // 443 keeps 10000; the plain port 80 gets the next free one.
    let first = desired(&cluster, &config);
    let lb = &first.load_balancers[0];
    assert_eq!(
        hairpin_ports(&lb.service),
        [("http".into(), 80, 10001), ("https".into(), 443, 10000)]
    );
    assert_eq!(
        route_rows(&lb.routes),
        [
            (
                "web/node/80",
                "[::]:10001",
                "node.web.svc.cluster.local:80",
                ProxyHeader::None
            ),
            (
                "web/node/443",
                "[::]:10000",
                "node.web.svc.cluster.local:443",
                ProxyHeader::V1
            ),
        ]
    );
    // The global table is sorted by listener port.
    let listens: Vec<&str> = first.routes.iter().map(|r| r.listen.as_str()).collect();
    assert_eq!(listens, ["[::]:10000", "[::]:10001"]);

    // Applied: the hairpin Service now holds both ports. A new load balancer that sorts first
    // takes fresh ports and shifts nothing; re-planning gives the same plan.
    cluster.services.pop();
    cluster.services.push(lb.service.clone());
    cluster.services.push(linode(
        "aaa",
        "first",
        "192.0.2.51",
        "none",
        r#"{"proxy-protocol": "v2"}"#,
    ));
    let second = desired(&cluster, &config);
    assert_eq!(second, desired(&cluster, &config), "deterministic");
    let node = &second.load_balancers[1];
    assert_eq!(node.load_balancer.service, ObjectRef::new("web", "node"));
    assert_eq!(node.routes, lb.routes);
    assert_eq!(hairpin_ports(&node.service), hairpin_ports(&lb.service));
    assert_eq!(
        node.service.spec.as_ref().unwrap().cluster_ip.as_deref(),
        Some("10.96.0.40")
    );
    assert_eq!(
        hairpin_ports(&second.load_balancers[0].service),
        [("http".into(), 80, 10002), ("https".into(), 443, 10003)]
    );

    // Turning PROXY on for port 80 too keeps its listener; only its header changes.
    cluster.services[0] = linode(
        "web",
        "node",
        "192.0.2.50",
        "v1",
        r#"{"proxy-protocol": "v1"}"#,
    );
    let third = desired(&cluster, &config);
    let node = &third.load_balancers[1];
    assert_eq!(hairpin_ports(&node.service), hairpin_ports(&lb.service));
    assert_eq!(node.routes[0].listen, "[::]:10001");
    assert_eq!(node.routes[0].proxy_protocol, ProxyHeader::V1);
}

#[test]
fn a_load_balancer_with_only_plain_ports_gets_no_hairpin() {
    let snapshot = ClusterSnapshot {
        services: vec![
            // Linode: no PROXY by default, and the per-port setting of 443 says none too.
            linode(
                "web",
                "node",
                "192.0.2.50",
                "none",
                r#"{"proxy-protocol": "none"}"#,
            ),
            // Scaleway: PROXY on a port the Service does not have.
            lb_service(
                "web",
                "edge",
                json!({ SCW_V2: "8443" }),
                json!([{ "ip": "192.0.2.40" }]),
            ),
        ],
        ingresses: vec![ingress(
            "web",
            "site",
            None,
            &["site.example.net"],
            &[],
            Some("192.0.2.40"),
        )],
        config_maps: vec![coredns(KUBEADM_COREFILE)],
        ..ClusterSnapshot::default()
    };
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert!(plan.load_balancers.is_empty(), "{:#?}", plan.load_balancers);
    assert!(plan.routes.is_empty());
    let reasons: Vec<(String, SkipReason)> = plan
        .not_needed
        .iter()
        .map(|n| (n.service.to_string(), n.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            ("web/edge".into(), SkipReason::NoProxyProtocol),
            ("web/node".into(), SkipReason::NoProxyProtocol)
        ]
    );
    assert_eq!(
        plan.routes_config_map.data.as_ref().unwrap()["routes.json"],
        "[]\n"
    );
    let dns = plan.dns.as_ref().unwrap();
    assert!(
        !dns.coredns().unwrap().desired.contains("site.example.net"),
        "{}",
        dns.coredns().unwrap().desired
    );
    assert!(!dns.coredns().unwrap().changed);
}

#[test]
fn a_load_balancer_whose_proxy_ports_get_no_listener_is_not_planned() {
    // One listener port left: the plain port 80 of the mixed load balancer takes it, 443 gets
    // none. A hairpin serving only the plain port would fix nothing, so there is none, and
    // the hostname is not redirected.
    let config = PlannerConfig {
        listener_port_base: 65535,
        ..PlannerConfig::default()
    };
    let plan = desired(&scaleway_mixed(), &config);
    assert!(plan.load_balancers.is_empty(), "{:#?}", plan.load_balancers);
    assert!(plan.routes.is_empty());
    assert!(
        !plan
            .dns
            .as_ref()
            .unwrap()
            .coredns()
            .unwrap()
            .desired
            .contains("site.example.net")
    );
    let w: Vec<String> = plan.warnings.iter().map(ToString::to_string).collect();
    assert!(
        w.iter().any(|w| w.contains("web/edge")
            && w.contains("no free proxy listener port left for port 443")),
        "{w:#?}"
    );
}

/// `svc` with UDP ports added (`(name, port)`), as a QUIC or DNS load balancer has them.
/// The ports of a Service built with a spec and ports.
fn ports_mut(svc: &mut Service) -> &mut Vec<ServicePort> {
    svc.spec.as_mut().unwrap().ports.as_mut().unwrap()
}

fn with_udp(mut svc: Service, ports: &[(&str, i32)]) -> Service {
    let spec_ports = svc.spec.as_mut().unwrap().ports.as_mut().unwrap();
    for (name, port) in ports {
        spec_ports.push(
            serde_json::from_value(
                json!({ "name": name, "port": port, "protocol": "UDP", "targetPort": port }),
            )
            .unwrap(),
        );
    }
    svc
}

#[test]
fn udp_ports_of_a_hairpinned_load_balancer_are_warned_about_and_nothing_else_changes() {
    let tcp_only = scaleway_mixed();
    let mut with_quic = scaleway_mixed();
    let svc = with_quic.services.remove(0);
    with_quic.services.push(with_udp(svc, &[("http3", 443)]));

    let config = PlannerConfig::default();
    let before = desired(&tcp_only, &config);
    let after = desired(&with_quic, &config);
    // TCP only: no warning.
    assert!(before.warnings.is_empty(), "{:#?}", before.warnings);

    // With 443/UDP: exactly one warning, on the load balancer, naming the port, what breaks
    // and what to do.
    assert_eq!(after.warnings.len(), 1, "{:#?}", after.warnings);
    let w = &after.warnings[0];
    assert_eq!(w.subject, "Service web/edge");
    for part in [
        "port 443/UDP (http3) is not carried",
        "TCP only",
        "in-cluster clients of the hostnames lose it",
        "HTTP/3",
        "falls back to TCP",
        "separate hostname",
        "ipMode: Proxy",
        "hostname annotation",
    ] {
        assert!(w.message.contains(part), "{part:?} missing in {w}");
    }
    assert_eq!(w.message.matches("/UDP").count(), 1, "{w}");

    // Nothing else in the plan changes: same hairpin Service ports, routes, DNS.
    assert_eq!(after.load_balancers.len(), 1);
    let (a, b) = (&after.load_balancers[0], &before.load_balancers[0]);
    assert_eq!(hairpin_ports(&a.service), hairpin_ports(&b.service));
    assert_eq!(a.service, b.service);
    assert_eq!(a.routes, b.routes);
    assert_eq!(a.hostnames, b.hostnames);
    assert_eq!(after.routes, before.routes);
    assert_eq!(after.routes_config_map, before.routes_config_map);
    assert_eq!(
        after.dns.as_ref().unwrap().coredns().unwrap().desired,
        before.dns.as_ref().unwrap().coredns().unwrap().desired
    );
    assert_eq!(after.not_needed, before.not_needed);
    assert_eq!(after.errors, before.errors);
}

#[test]
fn several_non_tcp_ports_are_named_in_one_warning() {
    let mut snapshot = scaleway_mixed();
    let svc = with_udp(snapshot.services.remove(0), &[("dns", 53), ("http3", 443)]);
    snapshot.services.push(svc);
    ports_mut(&mut snapshot.services[0]).push(
        serde_json::from_value(json!({ "port": 3868, "protocol": "SCTP", "targetPort": 3868 }))
            .unwrap(),
    );
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert_eq!(plan.warnings.len(), 1, "{:#?}", plan.warnings);
    let message = &plan.warnings[0].message;
    assert!(
        message.starts_with("ports 53/UDP (dns), 443/UDP (http3), 3868/SCTP are not carried"),
        "{message}"
    );
    assert!(message.contains("lose them"), "{message}");
}

#[test]
fn udp_ports_of_a_load_balancer_that_is_not_hairpinned_are_not_warned_about() {
    let snapshot = ClusterSnapshot {
        services: vec![
            // No PROXY protocol at all.
            with_udp(
                linode(
                    "web",
                    "node",
                    "192.0.2.50",
                    "none",
                    r#"{"proxy-protocol": "none"}"#,
                ),
                &[("http3", 443)],
            ),
            // PROXY, but the status has `ipMode: Proxy`: traffic already goes through the LB.
            with_udp(
                lb_service(
                    "web",
                    "edge",
                    json!({ SCW_V2: "443" }),
                    json!([{ "ip": "192.0.2.40", "ipMode": "Proxy" }]),
                ),
                &[("http3", 443)],
            ),
        ],
        ingresses: vec![
            ingress(
                "web",
                "site",
                None,
                &["site.example.net"],
                &[],
                Some("192.0.2.40"),
            ),
            ingress(
                "web",
                "node",
                None,
                &["node.example.net"],
                &[],
                Some("192.0.2.50"),
            ),
        ],
        config_maps: vec![coredns(KUBEADM_COREFILE)],
        ..ClusterSnapshot::default()
    };
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert!(plan.load_balancers.is_empty(), "{:#?}", plan.load_balancers);
    assert_eq!(plan.not_needed.len(), 2, "{:#?}", plan.not_needed);
    assert!(plan.warnings.is_empty(), "{:#?}", plan.warnings);
}

/// The cluster DNS Service, its DNS port targeting `target` on CoreDNS's pods.
fn kube_dns(target: serde_json::Value) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system"},
        "spec": {"clusterIP": "10.96.0.10", "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": target},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": target},
            {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153}
        ]}
    }))
    .unwrap()
}

/// The server blocks holding the CoreDNS write's hairpin blocks.
fn coredns_blocks(plan: &hairpin_planner::Plan) -> Vec<String> {
    let dns = plan
        .dns
        .as_ref()
        .unwrap_or_else(|| panic!("{:?}", plan.errors));
    let hairpin_planner::WriteEdit::Blocks { inserts } = &dns.writes[0].edit else {
        panic!("corefile mode expected");
    };
    inserts.iter().map(|i| i.server.keys.clone()).collect()
}

/// `shop.example.com` on a PROXY load balancer, CoreDNS serving the cluster on :53 and on
/// :5353, and `dns_services` (the cluster DNS Service, or none).
fn cluster_dns_on_two_ports(dns_services: Vec<Service>) -> ClusterSnapshot {
    let both = ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n.:5353 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n";
    let mut services = vec![proxied_lb("ingress", "nginx", "203.0.113.10")];
    services.extend(dns_services);
    ClusterSnapshot {
        services,
        ingresses: vec![ingress(
            "shop",
            "web",
            None,
            &["shop.example.com"],
            &[],
            Some("203.0.113.10"),
        )],
        config_maps: vec![coredns(both)],
        ..ClusterSnapshot::default()
    }
}

#[test]
fn the_rules_go_to_the_port_the_cluster_dns_service_targets() {
    // CoreDNS serves the cluster on :53 and on :5353; the kube-dns Service sends pods'
    // queries to 5353, so only the :5353 block ever sees them.
    let mut snapshot = cluster_dns_on_two_ports(Vec::new());
    let config = PlannerConfig::default();
    // Without the Service: 53, served, is assumed.
    assert_eq!(coredns_blocks(&desired(&snapshot, &config)), [".:53"]);

    snapshot.services.push(kube_dns(json!(5353)));
    let plan = desired(&snapshot, &config);
    assert_eq!(coredns_blocks(&plan), [".:5353"]);
    let text = &plan.dns.as_ref().unwrap().writes[0].desired;
    let port_53 = &text[..text.find(".:5353").unwrap()];
    assert!(!port_53.contains("hairpin"), "{text}");

    // Targeting 53: the :53 block.
    snapshot.services.pop();
    snapshot.services.push(kube_dns(json!(53)));
    assert_eq!(coredns_blocks(&desired(&snapshot, &config)), [".:53"]);

    // A named target port: the number is in the pods' spec; said so, and 53 is assumed.
    snapshot.services.pop();
    snapshot.services.push(kube_dns(json!("dns")));
    let plan = desired(&snapshot, &config);
    assert_eq!(coredns_blocks(&plan), [".:53"]);
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.subject == "Service kube-system/kube-dns" && w.message.contains("`dns`")),
        "{:?}",
        plan.warnings
    );

    // A target port no server block serves: an error, nothing is written; never a guess.
    snapshot.services.pop();
    snapshot.services.push(kube_dns(json!(9053)));
    let plan = desired(&snapshot, &config);
    assert!(plan.dns.is_none(), "{:?}", plan.dns);
    assert!(
        plan.errors.iter().any(|e| e.to_string().contains("9053")),
        "{:?}",
        plan.errors
    );
}

/// A load balancer's Service as the API server returns it: `spec.ipFamilies` filled in.
fn lb_with_families(status: serde_json::Value, families: &[&str]) -> Service {
    let mut svc = lb_service(
        "ingress",
        "nginx",
        json!({ "load-balancer.hetzner.cloud/uses-proxyprotocol": "true" }),
        status,
    );
    svc.spec.as_mut().unwrap().ip_families =
        Some(families.iter().map(|f| (*f).to_owned()).collect());
    svc
}

fn family_snapshot(lb: Service) -> ClusterSnapshot {
    ClusterSnapshot {
        services: vec![lb],
        ingresses: vec![ingress(
            "shop",
            "web",
            None,
            &["shop.example.com"],
            &[],
            Some("203.0.113.10"),
        )],
        config_maps: vec![coredns(KUBEADM_COREFILE)],
        ..ClusterSnapshot::default()
    }
}

fn policy_and_families(plan: &hairpin_planner::Plan) -> (String, Vec<String>) {
    let spec = plan.load_balancers[0].service.spec.clone().unwrap();
    (spec.ip_family_policy.unwrap(), spec.ip_families.unwrap())
}

#[test]
fn a_dual_stack_load_balancer_gets_a_dual_stack_hairpin_service_and_both_destinations() {
    let lb = lb_with_families(
        json!([{ "ip": "2001:db8::10" }, { "ip": "203.0.113.10" }]),
        &["IPv4", "IPv6"],
    );
    let plan = desired(&family_snapshot(lb), &PlannerConfig::default());
    assert_eq!(
        policy_and_families(&plan),
        ("PreferDualStack".into(), vec!["IPv4".into(), "IPv6".into()])
    );
    let route = &plan.routes[0];
    assert_eq!(route.listen, "[::]:10000");
    // Proxies that read only `destination` keep writing the IPv4 address.
    assert_eq!(route.destination, "203.0.113.10:80");
    assert_eq!(route.destinations, ["203.0.113.10:80", "[2001:db8::10]:80"]);
    let json = &plan.routes_config_map.data.as_ref().unwrap()["routes.json"];
    let table = serde_json::from_str::<serde_json::Value>(json).unwrap();
    assert_eq!(
        table[0]["destinations"],
        json!(["203.0.113.10:80", "[2001:db8::10]:80"])
    );

    // Once the Service exists with both ClusterIPs, the hosts block has a line of each.
    let mut cluster = family_snapshot(lb_with_families(
        json!([{ "ip": "2001:db8::10" }, { "ip": "203.0.113.10" }]),
        &["IPv4", "IPv6"],
    ));
    let mut svc = plan.load_balancers[0].service.clone();
    let spec = svc.spec.as_mut().unwrap();
    spec.cluster_ip = Some("10.96.0.30".into());
    spec.cluster_ips = Some(vec!["10.96.0.30".into(), "fd00:10:96::30".into()]);
    cluster.services.push(svc);
    let plan = desired(&cluster, &PlannerConfig::default());
    let (entries, missing) = plan.hosts.hosts_entries(&plan.known_cluster_ips());
    assert!(missing.is_empty());
    let lines = hairpin_planner::hosts::render_lines(&entries).unwrap();
    assert_eq!(
        lines,
        [
            "10.96.0.30\tshop.example.com",
            "fd00:10:96::30\tshop.example.com"
        ]
    );
    // The Service as it exists matches: nothing to change.
    let spec = plan.load_balancers[0].service.spec.as_ref().unwrap();
    assert_eq!(
        spec.cluster_ips,
        Some(vec!["10.96.0.30".into(), "fd00:10:96::30".into()])
    );
}

#[test]
fn single_stack_load_balancers_keep_one_family_and_one_destination() {
    // An IPv4-only cluster whose load balancer also has a public IPv6 (Hetzner gives both):
    // kube-proxy short-circuits only the Service's family, and the cluster has no IPv6 to give.
    let lb = lb_with_families(
        json!([{ "ip": "203.0.113.10" }, { "ip": "2001:db8::10" }]),
        &["IPv4"],
    );
    let plan = desired(&family_snapshot(lb), &PlannerConfig::default());
    assert_eq!(
        policy_and_families(&plan),
        ("SingleStack".into(), vec!["IPv4".into()])
    );
    assert_eq!(plan.routes[0].destination, "203.0.113.10:80");
    assert!(plan.routes[0].destinations.is_empty());
    let json = &plan.routes_config_map.data.as_ref().unwrap()["routes.json"];
    assert!(!json.contains("destinations"), "{json}");

    // An IPv6-only cluster.
    let lb = lb_with_families(json!([{ "ip": "2001:db8::10" }]), &["IPv6"]);
    let plan = desired(&family_snapshot(lb), &PlannerConfig::default());
    assert_eq!(
        policy_and_families(&plan),
        ("SingleStack".into(), vec!["IPv6".into()])
    );
    assert_eq!(plan.routes[0].destination, "[2001:db8::10]:80");

    // A dual-stack cluster (IPv6 primary) whose load balancer has IPv4 only: no IPv6
    // ClusterIP, so in-cluster clients do not get an AAAA the outside world does not have.
    let lb = lb_with_families(json!([{ "ip": "203.0.113.10" }]), &["IPv6", "IPv4"]);
    let plan = desired(&family_snapshot(lb), &PlannerConfig::default());
    assert_eq!(
        policy_and_families(&plan),
        ("SingleStack".into(), vec!["IPv4".into()])
    );
}

#[test]
fn an_existing_hairpin_service_keeps_its_primary_family() {
    let status = json!([{ "ip": "203.0.113.10" }, { "ip": "2001:db8::10" }]);
    let plan = desired(
        &family_snapshot(lb_with_families(status.clone(), &["IPv4", "IPv6"])),
        &PlannerConfig::default(),
    );
    let mut cluster = family_snapshot(lb_with_families(status, &["IPv4", "IPv6"]));
    let mut svc = plan.load_balancers[0].service.clone();
    let spec = svc.spec.as_mut().unwrap();
    spec.ip_families = Some(vec!["IPv6".into()]);
    spec.ip_family_policy = Some("SingleStack".into());
    spec.cluster_ip = Some("fd00:10:96::30".into());
    spec.cluster_ips = Some(vec!["fd00:10:96::30".into()]);
    cluster.services.push(svc);
    let plan = desired(&cluster, &PlannerConfig::default());
    assert_eq!(
        policy_and_families(&plan),
        ("PreferDualStack".into(), vec!["IPv6".into(), "IPv4".into()])
    );
    let spec = plan.load_balancers[0].service.spec.as_ref().unwrap();
    assert_eq!(spec.cluster_ips, Some(vec!["fd00:10:96::30".into()]));
}

/// A Service in kube-system named `name` with `labels` and the cluster DNS ports, its DNS
/// port targeting 5353.
fn dns_service(name: &str, labels: serde_json::Value) -> Service {
    let mut service = kube_dns(json!(5353));
    service.metadata.name = Some(name.into());
    service.metadata.labels = serde_json::from_value(labels).unwrap();
    service
}

#[test]
fn the_cluster_dns_service_is_found_whatever_its_installer_named_it() {
    let config = PlannerConfig::default();
    let name = |snapshot: &ClusterSnapshot| {
        cluster_dns_service(snapshot, &config).and_then(|s| s.metadata.name.clone())
    };
    let with = |services: Vec<Service>| ClusterSnapshot {
        services,
        ..ClusterSnapshot::default()
    };
    assert_eq!(name(&with(vec![])), None);
    // kubeadm, k3s, EKS, AKS...
    assert_eq!(
        name(&with(vec![kube_dns(json!(53))])).as_deref(),
        Some("kube-dns")
    );
    // RKE2: the Service is named like its CoreDNS ConfigMap.
    let rke2 = dns_service("rke2-coredns-rke2-coredns", json!({"k8s-app": "kube-dns"}));
    assert_eq!(
        name(&with(vec![rke2.clone()])).as_deref(),
        Some("rke2-coredns-rke2-coredns")
    );
    // The CoreDNS Helm chart with another release name: found by its label.
    let chart = dns_service("cluster-dns-coredns", json!({"k8s-app": "coredns"}));
    assert_eq!(
        name(&with(vec![chart.clone()])).as_deref(),
        Some("cluster-dns-coredns")
    );
    // kube-dns wins over the others; a labelled Service without port 53 (CoreDNS's metrics
    // Service) or in another namespace is not it.
    assert_eq!(
        name(&with(vec![chart.clone(), kube_dns(json!(53))])).as_deref(),
        Some("kube-dns")
    );
    let mut metrics = dns_service("coredns-metrics", json!({"k8s-app": "kube-dns"}));
    ports_mut(&mut metrics).retain(|p| p.port != 53);
    let mut elsewhere = chart;
    elsewhere.metadata.namespace = Some("dns".into());
    assert_eq!(name(&with(vec![metrics, elsewhere])), None);
}

#[test]
fn the_rules_go_to_the_port_rke2s_cluster_dns_service_targets() {
    let snapshot = cluster_dns_on_two_ports(vec![dns_service(
        "rke2-coredns-rke2-coredns",
        json!({"k8s-app": "kube-dns"}),
    )]);
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert_eq!(coredns_blocks(&plan), [".:5353"]);
}

/// The CoreDNS facts the controller reads from the plan instead of parsing the Corefile again.
#[test]
fn the_plan_carries_the_coredns_facts_the_controller_needs() {
    let mut snapshot = two_lbs();
    let aks = KUBEADM_COREFILE.replace(
        "    reload\n",
        "    import custom/*.override\n    forward example.org 192.0.2.53\n",
    );
    snapshot.config_maps = vec![
        coredns(&aks),
        node_local_dns_cm("node-local-dns", &fixture("nodelocaldns.Corefile")),
    ];
    let facts = desired(&snapshot, &PlannerConfig::default()).coredns;
    assert_eq!(
        facts.config_map,
        Some(ObjectRef::new("kube-system", "coredns"))
    );
    assert_eq!(facts.reload, Some(false));
    assert_eq!(facts.custom_key_suffix.as_deref(), Some(".override"));
    let zones: Vec<&str> = facts
        .forward_zones
        .iter()
        .map(|z| z.zone.as_str())
        .collect();
    assert_eq!(zones, ["example.org", "."]);
    let node_local = facts.node_local_dns.expect("node-local-dns found");
    assert_eq!(
        node_local.config_map,
        ObjectRef::new("kube-system", "node-local-dns")
    );
    assert!(
        node_local
            .binds
            .contains(&"169.254.20.10".parse::<std::net::IpAddr>().unwrap()),
        "{:?}",
        node_local.binds
    );

    // kubeadm's Corefile: `reload`, no imports; no node-local-dns.
    snapshot.config_maps = vec![coredns(KUBEADM_COREFILE)];
    let facts = desired(&snapshot, &PlannerConfig::default()).coredns;
    assert_eq!(
        (facts.reload, facts.custom_key_suffix, facts.node_local_dns),
        (Some(true), None, None)
    );
    // No CoreDNS ConfigMap: nothing known.
    snapshot.config_maps.clear();
    assert_eq!(
        desired(&snapshot, &PlannerConfig::default()).coredns,
        hairpin_planner::CorednsFacts::default()
    );
}
