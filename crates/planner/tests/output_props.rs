//! Property test of every printed form of a plan (issue 22): arbitrary text in the fields of
//! cluster objects (names, hostnames, annotations, labels, Corefile text) never adds a line,
//! a section, a YAML document or key to the output, and the YAML output always parses back to
//! exactly the planned objects.

mod support;

use std::collections::BTreeMap;

use hairpin_planner::{ClusterSnapshot, Plan, PlannerConfig, desired, render};
use proptest::prelude::*;
use serde_json::{Value, json};
use support::{KUBEADM_COREFILE, coredns, ingress, ingress_class, lb_service};

/// Text an attacker would write: line breaks of every kind, YAML document and comment
/// markers, a spoofed section, terminal escapes, quotes, non-ASCII, or anything at all.
fn hostile() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("\n".to_owned()),
        Just("\r\n".to_owned()),
        Just("\r".to_owned()),
        Just("\u{85}".to_owned()),
        Just("\u{2028}".to_owned()),
        Just("\u{feff}".to_owned()),
        Just("\n---\nkind: ClusterRoleBinding\n".to_owned()),
        Just("\n# refused: ".to_owned()),
        Just("\n\nErrors (nothing is written for these)\n  - ".to_owned()),
        Just("\nLoad balancer kube-system/x\n".to_owned()),
        Just("key: value".to_owned()),
        Just("\u{1b}[2J".to_owned()),
        Just("\"'\\{}#".to_owned()),
        Just("shop.example.com".to_owned()),
        Just("*.".to_owned()),
        Just(",".to_owned()),
        Just("é\u{202e}".to_owned()),
        any::<String>(),
        "[ -~]{0,12}",
    ];
    prop::collection::vec(piece, 1..5).prop_map(|p| p.concat())
}

/// Which field of which object gets the hostile text.
#[derive(Debug, Clone, Copy)]
enum Field {
    IngressHost,
    IngressName,
    IngressNamespace,
    ExternalDnsAnnotation,
    OwnAnnotation,
    LbName,
    LbLabel,
    ProxyAnnotation,
    CorefileComment,
    CorefileAppended,
    CorefileZone,
}

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        Just(Field::IngressHost),
        Just(Field::IngressName),
        Just(Field::IngressNamespace),
        Just(Field::ExternalDnsAnnotation),
        Just(Field::OwnAnnotation),
        Just(Field::LbName),
        Just(Field::LbLabel),
        Just(Field::ProxyAnnotation),
        Just(Field::CorefileComment),
        Just(Field::CorefileAppended),
        Just(Field::CorefileZone),
    ]
}

fn snapshot(fields: &[(Field, String)]) -> ClusterSnapshot {
    let get = |f: fn(&Field) -> bool| fields.iter().find(|(x, _)| f(x)).map(|(_, s)| s.as_str());
    let lb_name = get(|f| matches!(f, Field::LbName)).unwrap_or("ingress-nginx-controller");
    let mut annotations = json!({ "hairpin.io/proxy-protocol": "v1" });
    if let Some(v) = get(|f| matches!(f, Field::ProxyAnnotation)) {
        annotations["hairpin.io/proxy-protocol"] = json!(v);
    }
    if let Some(v) = get(|f| matches!(f, Field::OwnAnnotation)) {
        annotations["hairpin.io/hostnames"] = json!(format!("own.example.com,{v}"));
    }
    if let Some(v) = get(|f| matches!(f, Field::ExternalDnsAnnotation)) {
        annotations["external-dns.alpha.kubernetes.io/hostname"] = json!(v);
    }
    let mut lb = lb_service(
        "ingress-nginx",
        lb_name,
        annotations,
        json!([{ "ip": "203.0.113.10" }]),
    );
    lb.metadata.labels = Some(BTreeMap::from([
        (
            "app.kubernetes.io/name".to_owned(),
            "ingress-nginx".to_owned(),
        ),
        (
            "team".to_owned(),
            get(|f| matches!(f, Field::LbLabel))
                .unwrap_or("web")
                .to_owned(),
        ),
    ]));
    let host = get(|f| matches!(f, Field::IngressHost)).unwrap_or("api.example.com");
    let ing = ingress(
        get(|f| matches!(f, Field::IngressNamespace)).unwrap_or("shop"),
        get(|f| matches!(f, Field::IngressName)).unwrap_or("web"),
        Some("nginx"),
        &["shop.example.com", host, "*.svc.cluster.local"],
        &[],
        Some("203.0.113.10"),
    );
    let mut corefile = KUBEADM_COREFILE.to_owned();
    if let Some(v) = get(|f| matches!(f, Field::CorefileComment)) {
        corefile = corefile.replace("    errors\n", &format!("    errors # {v}\n"));
    }
    if let Some(v) = get(|f| matches!(f, Field::CorefileAppended)) {
        corefile.push_str(v);
    }
    if let Some(v) = get(|f| matches!(f, Field::CorefileZone)) {
        corefile = corefile.replace("kubernetes cluster.local", &format!("kubernetes {v}"));
    }
    ClusterSnapshot {
        services: vec![lb],
        ingress_classes: vec![ingress_class("nginx", "k8s.io/ingress-nginx", true)],
        ingresses: vec![ing],
        config_maps: vec![coredns(&corefile)],
        ..ClusterSnapshot::default()
    }
}

/// The objects `render::yaml` must print, in its order.
fn planned_objects(plan: &Plan) -> Vec<Value> {
    let mut out: Vec<Value> = plan
        .load_balancers
        .iter()
        .map(|lb| serde_json::to_value(&lb.service).unwrap())
        .collect();
    let dns = plan.dns.iter();
    out.extend(
        dns.clone()
            .flat_map(|d| &d.writes)
            .filter_map(|w| w.object.as_ref())
            .map(|o| serde_json::to_value(o).unwrap()),
    );
    out.extend(
        dns.filter_map(|d| d.dns_endpoints.as_ref())
            .flat_map(|e| e.objects.iter().filter(|o| o.changed))
            .map(|o| serde_json::to_value(&o.object).unwrap()),
    );
    out.push(serde_json::to_value(&plan.routes_config_map).unwrap());
    out
}

/// Section headers of the text form: every line at column 0 but the first.
fn sections(text: &str) -> Vec<&str> {
    text.lines()
        .skip(1)
        .filter(|l| !l.is_empty() && !l.starts_with(' '))
        .collect()
}

/// The rows of the section whose header is `header` (up to the next blank line).
fn section_rows<'a>(text: &'a str, header: &str) -> Option<Vec<&'a str>> {
    let start = text.find(&format!("\n\n{header}\n"))? + header.len() + 3;
    let body = &text[start..];
    let end = body.find("\n\n").map_or(body.len(), |i| i + 1);
    Some(body[..end].lines().collect())
}

fn printable_line(line: &str) -> bool {
    line.chars().all(|c| (' '..='~').contains(&c))
}

fn check(plan: &Plan, snapshot: &ClusterSnapshot) -> Result<(), TestCaseError> {
    // Text: printable ASCII lines, the known sections, one row per refusal, error, warning.
    let text = render::text(plan);
    for line in text.lines() {
        prop_assert!(printable_line(line), "line {line:?} of\n{text}");
    }
    let known = [
        "Not needed",
        "Conflicts (hostnames planned for no load balancer)",
        "Refused (hostnames hairpin will not redirect)",
        "Unverified (hostnames not redirected: not proven to resolve to their load balancer)",
        "Passed through (names a wildcard leaves to the upstream DNS)",
        "DNS",
        "Hosts-file block (node agent)",
        "To delete (hairpin Services no longer needed)",
        "Warnings",
        "Errors (nothing is written for these)",
    ];
    let lbs = sections(&text)
        .into_iter()
        .filter(|s| !known.contains(s) && !s.starts_with("kube-dns stubDomains"))
        .collect::<Vec<_>>();
    prop_assert_eq!(lbs.len(), plan.load_balancers.len(), "{:?}\n{}", lbs, text);
    prop_assert!(
        lbs.iter().all(|s| s.starts_with("Load balancer ")),
        "{text}"
    );
    for (header, items) in [
        (known[2], plan.refused.len()),
        (known[8], plan.warnings.len()),
        (known[9], plan.errors.len()),
        (known[1], plan.conflicts.len()),
    ] {
        let rows = section_rows(&text, header).unwrap_or_default();
        prop_assert_eq!(rows.len(), items, "{}\n{}", header, text);
    }

    // YAML: comment lines, then exactly the planned objects.
    let yaml = render::yaml(plan).map_err(TestCaseError::fail)?;
    let (head, _) = yaml.split_once("---\n").unwrap_or((&yaml, ""));
    let comments: Vec<&str> = head.lines().collect();
    prop_assert!(
        comments
            .iter()
            .all(|l| l.starts_with("# ") && printable_line(l)),
        "{yaml}"
    );
    prop_assert_eq!(
        comments.len(),
        plan.refused.len() + plan.orphaned_services.len(),
        "{}",
        yaml
    );
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml)
        .map_err(|e| TestCaseError::fail(format!("{e}\n{yaml}")))?;
    prop_assert_eq!(docs, planned_objects(plan), "{}", yaml);
    let markers = yaml.lines().filter(|l| l.starts_with("---")).count();
    prop_assert_eq!(markers, planned_objects(plan).len(), "{}", yaml);

    // Diff: every line is a diff line of one of the changed keys.
    let diff = render::diff(plan, snapshot);
    let mut headers = 0;
    for line in diff.lines() {
        prop_assert!(
            ["--- ", "+++ ", "@@ ", " ", "+", "-", "\\"]
                .iter()
                .any(|p| line.starts_with(p)),
            "line {line:?} of\n{diff}"
        );
        let body = line.strip_suffix('\r').unwrap_or(line);
        prop_assert!(
            body.chars().all(|c| c == '\t' || !c.is_control()),
            "{line:?}"
        );
        if line.starts_with("--- ") {
            prop_assert!(printable_line(line), "{line:?}");
            headers += 1;
        }
    }
    let changed_keys = plan
        .dns
        .iter()
        .flat_map(|d| &d.writes)
        .filter(|w| w.changed)
        .count()
        + plan.routes_config_map.data.iter().flatten().count();
    prop_assert!(headers <= changed_keys, "{diff}");

    // JSON: one document, the hostnames as they were written.
    let json: Value = serde_json::from_str(&serde_json::to_string(plan).unwrap()).unwrap();
    let refused: Vec<&str> = json["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["hostname"].as_str().unwrap())
        .collect();
    let want: Vec<&str> = plan.refused.iter().map(|r| r.hostname.as_str()).collect();
    prop_assert_eq!(refused, want);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn hostile_fields_never_add_a_line_a_section_or_a_document(
        fields in prop::collection::vec((field(), hostile()), 1..3)
    ) {
        let snapshot = snapshot(&fields);
        let plan = desired(&snapshot, &PlannerConfig::default());
        check(&plan, &snapshot)?;
    }
}

/// The issue's own case, checked without randomness: an annotation carrying a
/// ClusterRoleBinding stays in its one comment line.
#[test]
fn the_cluster_role_binding_annotation_stays_in_one_comment() {
    let evil = "x\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
                metadata:\n  name: pwn\nroleRef:\n  kind: ClusterRole\n  name: cluster-admin\n#";
    let snapshot = snapshot(&[(Field::ExternalDnsAnnotation, evil.to_owned())]);
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert!(plan.refused.iter().any(|r| r.hostname == evil));
    check(&plan, &snapshot).unwrap();
    assert!(
        !render::yaml(&plan)
            .unwrap()
            .contains("\nkind: ClusterRoleBinding")
    );
}
