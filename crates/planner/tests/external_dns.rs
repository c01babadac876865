//! The `external-dns` DNS mode ([`hairpin_planner::external_dns`]): the DNSEndpoints it plans
//! for each cluster shape, their bounds, and that a plan applied as planned plans nothing more.

use std::fs;
use std::path::PathBuf;

use hairpin_planner::external_dns::{self, DnsEndpoints};
use hairpin_planner::{ClusterSnapshot, DnsMode, PlannerConfig, desired, load};
use hairpin_planner::{DnsEndpoint, DnsEndpointStatus};

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/plans")
        .join(format!("{name}.yaml"));
    fs::read_to_string(path).unwrap()
}

fn config() -> PlannerConfig {
    PlannerConfig {
        dns_mode: DnsMode::ExternalDns,
        ..PlannerConfig::default()
    }
}

fn snapshot(text: &str) -> ClusterSnapshot {
    let mut snapshot = ClusterSnapshot::default();
    load::load_yaml(&mut snapshot, "test", text).unwrap();
    snapshot
}

fn endpoints(snapshot: &ClusterSnapshot) -> DnsEndpoints {
    let plan = desired(snapshot, &config());
    assert!(plan.errors.is_empty(), "{:?}", plan.errors);
    let dns = plan.dns.expect("a DNS change");
    assert_eq!(dns.mode, DnsMode::ExternalDns);
    assert!(dns.writes.is_empty(), "no ConfigMap is written");
    dns.dns_endpoints.expect("DNSEndpoints")
}

/// The snapshot with the planned objects stored as the API server would keep them.
fn applied(mut snapshot: ClusterSnapshot, planned: &DnsEndpoints) -> ClusterSnapshot {
    snapshot
        .dns_endpoints
        .retain(|e| !planned.stale.contains(&e.object_ref()));
    for o in &planned.objects {
        snapshot
            .dns_endpoints
            .retain(|e| e.object_ref() != o.object.object_ref());
        let mut stored = o.object.clone();
        stored.metadata.resource_version = Some("9000".into());
        stored.metadata.generation = Some(1);
        snapshot.dns_endpoints.push(stored);
    }
    snapshot
}

#[test]
fn the_mode_is_named_external_dns_everywhere() {
    assert_eq!("external-dns".parse::<DnsMode>(), Ok(DnsMode::ExternalDns));
    assert_eq!(DnsMode::ExternalDns.as_str(), "external-dns");
    assert_eq!(
        serde_json::to_value(DnsMode::ExternalDns).unwrap(),
        "external-dns"
    );
    let err = "externaldns".parse::<DnsMode>().unwrap_err();
    assert!(err.contains("external-dns"), "{err}");
}

#[test]
fn dual_stack_names_get_an_a_and_an_aaaa_record_of_the_hairpin_service() {
    let planned = endpoints(&snapshot(&fixture("dns-external-dns-dual-stack")));
    assert_eq!(planned.objects.len(), 1);
    let object = &planned.objects[0].object;
    assert_eq!(object.api_version, "externaldns.k8s.io/v1alpha1");
    assert_eq!(object.kind, "DNSEndpoint");
    let labels = object.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "hairpin");
    assert_eq!(labels["hairpin.io/dns-endpoint"], "true");
    assert_eq!(
        object.metadata.annotations.as_ref().unwrap()["hairpin.io/source"],
        "ingress-nginx/ingress-nginx-controller"
    );
    let records: Vec<(&str, &str, Vec<&str>)> = object
        .spec
        .endpoints
        .iter()
        .map(|e| {
            assert_eq!(e.record_ttl, Some(external_dns::RECORD_TTL));
            let targets = e.targets.iter().map(String::as_str).collect();
            (e.dns_name.as_str(), e.record_type.as_str(), targets)
        })
        .collect();
    assert_eq!(
        records,
        [
            ("api.example.com", "A", vec!["10.96.0.30"]),
            ("api.example.com", "AAAA", vec!["fd00:10:96::30"]),
            ("shop.example.com", "A", vec!["10.96.0.30"]),
            ("shop.example.com", "AAAA", vec!["fd00:10:96::30"]),
        ]
    );
    // The JSON is external-dns's: `recordTTL`, not `recordTtl`.
    let json = serde_json::to_value(object).unwrap();
    assert_eq!(json["spec"]["endpoints"][0]["recordTTL"], 30);
    assert_eq!(json["spec"]["endpoints"][0]["dnsName"], "api.example.com");
    assert!(json.get("status").is_none());
}

#[test]
fn an_ipv6_only_hairpin_service_gets_aaaa_records_only() {
    let text = fixture("dns-external-dns-dual-stack").replace(
        "  clusterIP: \"10.96.0.30\"\n  clusterIPs:\n    - \"10.96.0.30\"\n    - \"fd00:10:96::30\"",
        "  clusterIP: \"fd00:10:96::30\"\n  clusterIPs:\n    - \"fd00:10:96::30\"",
    );
    let planned = endpoints(&snapshot(&text));
    let records = &planned.objects[0].object.spec.endpoints;
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|e| e.record_type == "AAAA"));
}

#[test]
fn no_endpoint_without_targets_and_unknown_cluster_ips_wait() {
    let text = fixture("dns-external-dns");
    let planned = endpoints(&snapshot(&text));
    for o in &planned.objects {
        for e in &o.object.spec.endpoints {
            assert!(!e.targets.is_empty(), "{e:?}");
        }
    }
    let pending: Vec<&str> = planned
        .pending
        .iter()
        .map(|p| p.hostname.as_str())
        .collect();
    assert_eq!(pending, ["mail.example.com"]);
    // Only hairpin's own object (label and annotation, in its namespace) is deleted.
    let stale: Vec<String> = planned.stale.iter().map(ToString::to_string).collect();
    assert_eq!(stale, ["hairpin/hairpin-web-old"]);
    // The outdated object is replaced, guarded by the resourceVersion read.
    let nginx = &planned.objects[0];
    assert!(nginx.changed);
    assert_eq!(
        nginx.object.metadata.resource_version.as_deref(),
        Some("2050")
    );
    assert_eq!(nginx.object.spec.endpoints[0].targets, ["10.96.0.31"]);
}

#[test]
fn a_plan_applied_as_planned_plans_nothing_more() {
    let before = snapshot(&fixture("dns-external-dns"));
    let planned = endpoints(&before);
    assert!(planned.changed());
    let after = applied(before, &planned);
    let again = endpoints(&after);
    assert!(!again.changed(), "{again:#?}");
    assert_eq!(again.objects.len(), planned.objects.len());
    // The objects that are not hairpin's are still there, untouched.
    let names: Vec<String> = after
        .dns_endpoints
        .iter()
        .map(|e| e.object_ref().to_string())
        .collect();
    assert!(names.contains(&"hairpin/corp-records".to_owned()));
    assert!(names.contains(&"team-a/hairpin-copy".to_owned()));
}

#[test]
fn many_hostnames_are_split_into_bounded_objects_with_stable_names() {
    // 1,200 dual-stack hostnames: 2,400 records, three objects.
    let names: Vec<String> = (0..1200)
        .map(|i| format!("app-{i:04}.example.com"))
        .collect();
    let text = fixture("dns-external-dns-dual-stack").replace(
        "    hairpin.io/proxy-protocol: v2\n",
        &format!(
            "    hairpin.io/proxy-protocol: v2\n    external-dns.alpha.kubernetes.io/hostname: \"{}\"\n",
            names.join(",")
        ),
    );
    let planned = endpoints(&snapshot(&text));
    let objects: Vec<(&str, usize)> = planned
        .objects
        .iter()
        .map(|o| {
            (
                o.object.metadata.name.as_deref().unwrap(),
                o.object.spec.endpoints.len(),
            )
        })
        .collect();
    let base = "hairpin-ingress-nginx-ingress-nginx-controller";
    assert_eq!(
        objects,
        [
            (base, 1000),
            (&*format!("{base}.2"), 1000),
            (&*format!("{base}.3"), 404),
        ]
    );
    for o in &planned.objects {
        let size = serde_json::to_vec(&o.object).unwrap().len();
        assert!(size < 256 * 1024, "{size} bytes");
        // A hostname's two records stay in one object.
        let records = &o.object.spec.endpoints;
        assert_eq!(records.first().unwrap().record_type, "A");
        assert_eq!(records.last().unwrap().record_type, "AAAA");
    }
    // Fewer names later: the extra objects become stale and are deleted.
    let after = applied(snapshot(&text), &planned);
    let fewer = text.replace(&names[600..].join(","), "");
    let fewer = fewer.replace(",\"", "\"");
    let mut shrunk = after.clone();
    shrunk.services = snapshot(&fewer).services;
    let again = endpoints(&shrunk);
    let stale: Vec<String> = again.stale.iter().map(|r| r.name.clone()).collect();
    assert_eq!(stale, [format!("{base}.3")]);
    assert_eq!(again.objects.len(), 2);
}

#[test]
fn a_live_object_matches_only_with_the_same_records() {
    let planned = endpoints(&snapshot(&fixture("dns-external-dns-dual-stack")));
    let want: &DnsEndpoint = &planned.objects[0].object;
    let mut live = want.clone();
    live.metadata.generation = Some(3);
    live.status = Some(DnsEndpointStatus {
        observed_generation: Some(3),
    });
    // Extra labels (someone's) and a status are fine.
    live.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("team".into(), "web".into());
    assert!(live.matches(want));
    assert_eq!(live.processed(), Some(true));
    live.spec.endpoints[0].targets = vec!["10.96.0.99".into()];
    assert!(!live.matches(want));
    live.status = Some(DnsEndpointStatus {
        observed_generation: Some(2),
    });
    assert_eq!(live.processed(), Some(false));
    live.status = None;
    assert_eq!(live.processed(), Some(false));
}

#[test]
fn someone_elses_object_at_a_needed_name_is_left_alone_with_a_warning() {
    let text = fixture("dns-external-dns-dual-stack");
    let foreign = "\n---\napiVersion: externaldns.k8s.io/v1alpha1\nkind: DNSEndpoint\nmetadata:\n  name: hairpin-ingress-nginx-ingress-nginx-controller\n  namespace: hairpin\n  labels:\n    app.kubernetes.io/managed-by: hairpin\nspec:\n  endpoints: []\n";
    let snapshot = snapshot(&format!("{text}{foreign}"));
    let plan = desired(&snapshot, &config());
    let planned = plan.dns.unwrap().dns_endpoints.unwrap();
    assert!(planned.objects.is_empty(), "{planned:#?}");
    assert!(planned.stale.is_empty());
    assert!(
        plan.warnings.iter().any(|w| w.subject
            == "DNSEndpoint hairpin/hairpin-ingress-nginx-ingress-nginx-controller"
            && w.message.contains("is not hairpin's")),
        "{:#?}",
        plan.warnings
    );
}
