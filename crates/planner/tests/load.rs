//! Reading cluster objects from YAML.

use hairpin_planner::ClusterSnapshot;
use hairpin_planner::load::load_yaml;

#[test]
fn multi_document_and_list_input() {
    let yaml = "\
apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: Service
    metadata: { name: a, namespace: x }
  - apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata: { name: i, namespace: x }
---
# a comment-only document is skipped
---
apiVersion: v1
kind: ConfigMap
metadata: { name: coredns, namespace: kube-system }
data: { Corefile: \".:53 {}\" }
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: g, namespace: x }
spec: {}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: { name: t, namespace: x }
spec:
  parentRefs: [{ name: gw }]
---
apiVersion: v1
kind: Secret
metadata: { name: s, namespace: x }
";
    let mut s = ClusterSnapshot::default();
    let notes = load_yaml(&mut s, "in.yaml", yaml).unwrap();
    assert_eq!(s.services.len(), 1);
    assert_eq!(s.ingresses.len(), 1);
    assert_eq!(s.config_maps.len(), 1);
    assert_eq!(s.grpc_routes.len(), 1);
    assert_eq!(s.tls_routes.len(), 1, "v1alpha2 TLSRoute without hostnames");
    assert_eq!(notes, ["skipped v1 Secret s: not read by the planner"]);
}

#[test]
fn syntax_error_names_file_document_and_line() {
    let yaml = "apiVersion: v1\nkind: Service\nmetadata: { name: a }\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: [unclosed\n";
    let mut s = ClusterSnapshot::default();
    let err = load_yaml(&mut s, "cluster.yaml", yaml).unwrap_err();
    assert_eq!(err.source_name, "cluster.yaml");
    assert_eq!(err.document, 2);
    let line = err.line.unwrap();
    assert!((7..=9).contains(&line), "line {line}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("cluster.yaml: document 2 (line {line}): ")),
        "{text}"
    );
}

#[test]
fn object_that_does_not_fit_its_type_names_the_object() {
    let yaml = "apiVersion: v1\nkind: Service\nmetadata: { name: bad, namespace: x }\nspec: { ports: \"eighty\" }\n";
    let mut s = ClusterSnapshot::default();
    let err = load_yaml(&mut s, "f.yaml", yaml).unwrap_err();
    assert_eq!(err.document, 1);
    assert!(err.message.contains("Service bad"), "{err}");
}

#[test]
fn document_without_kind_is_rejected() {
    let mut s = ClusterSnapshot::default();
    let err = load_yaml(&mut s, "f.yaml", "---\nfoo: bar\n").unwrap_err();
    assert_eq!(err.document, 1);
    assert!(err.message.contains("kind"), "{err}");
}
