use std::sync::Arc;

use hairpin_planner::{ClusterSnapshot, Plan, PlannerConfig, desired, hostnames, load};

use super::streams::slim_ingress;

/// Ingresses that use every field the planner reads of one: TLS hosts, a wildcard, no
/// status (matched through its class), the legacy class annotation, external-dns and
/// ignore annotations; each with paths, backends, labels and managedFields.
const MORE_INGRESSES: &str = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: legacy
  namespace: shop
  uid: 6f1c0d1e-0000-4000-8000-000000000001
  labels: {app: legacy}
  annotations:
    kubernetes.io/ingress.class: nginx
    external-dns.alpha.kubernetes.io/hostname: extra.example.com
    kubectl.kubernetes.io/last-applied-configuration: "{}"
    cert-manager.io/cluster-issuer: letsencrypt
    nginx.ingress.kubernetes.io/proxy-body-size: 16m
  managedFields:
    - {manager: kubectl, operation: Apply, apiVersion: networking.k8s.io/v1, fieldsType: FieldsV1, fieldsV1: {}}
spec:
  defaultBackend: {service: {name: legacy, port: {number: 80}}}
  tls: [{hosts: [legacy.example.com], secretName: legacy-tls}]
  rules:
    - host: legacy.example.com
      http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: legacy, port: {number: 80}}}}]}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: ignored
  namespace: shop
  annotations: {hairpin.io/ignore: "true"}
spec:
  ingressClassName: nginx
  rules:
    - host: ignored.example.com
      http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: x, port: {number: 80}}}}]}
status: {loadBalancer: {ingress: [{ip: 203.0.113.10}]}}
"#;

/// `MORE_INGRESSES` again, with the ignore annotation under another prefix.
const OTHER_PREFIX: &str = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: ignored-elsewhere
  namespace: shop
  annotations: {example.org/ignore: "true", nginx.ingress.kubernetes.io/ssl-redirect: "true"}
spec:
  ingressClassName: nginx
  rules: [{host: elsewhere.example.com}]
status: {loadBalancer: {ingress: [{ip: 203.0.113.10}]}}
"#;

/// The example cluster, `MORE_INGRESSES` and `OTHER_PREFIX`, whole and slimmed.
fn whole_and_slimmed(config: &PlannerConfig) -> (ClusterSnapshot, ClusterSnapshot) {
    let mut whole = crate::test_support::example_cluster();
    load::load_yaml(&mut whole, "more.yaml", MORE_INGRESSES).expect("the Ingresses load");
    load::load_yaml(&mut whole, "other.yaml", OTHER_PREFIX).expect("the Ingress loads");
    assert!(whole.ingresses.len() >= 5, "{}", whole.ingresses.len());
    let annotations = hostnames::ingress_annotations(config);
    let mut slimmed = whole.clone();
    slimmed
        .ingresses
        .iter_mut()
        .for_each(|i| slim_ingress(Arc::make_mut(i), &annotations));
    (whole, slimmed)
}

/// The hostnames of a plan.
fn planned(plan: &Plan) -> Vec<&str> {
    plan.load_balancers
        .iter()
        .flat_map(|lb| lb.hostnames.iter().map(|h| h.name.as_str()))
        .collect()
}

#[test]
fn a_slimmed_ingress_plans_exactly_as_the_whole_one() {
    let config = PlannerConfig::default();
    let (whole, slimmed) = whole_and_slimmed(&config);

    let legacy = slimmed
        .ingresses
        .iter()
        .find(|i| i.metadata.name.as_deref() == Some("legacy"))
        .expect("the legacy Ingress");
    let spec = legacy.spec.as_ref().expect("a spec");
    assert!(legacy.metadata.labels.is_none() && legacy.metadata.managed_fields.is_none());
    assert!(spec.default_backend.is_none());
    assert!(spec.rules.iter().flatten().all(|r| r.http.is_none()));
    assert!(spec.tls.iter().flatten().all(|t| t.secret_name.is_none()));
    // The class and external-dns annotations stay; last-applied, cert-manager's and the
    // ingress controller's go.
    let annotations = legacy.metadata.annotations.as_ref().expect("annotations");
    let mut kept: Vec<&str> = annotations.keys().map(String::as_str).collect();
    kept.sort_unstable();
    assert_eq!(
        kept,
        [
            "external-dns.alpha.kubernetes.io/hostname",
            "kubernetes.io/ingress.class"
        ]
    );
    assert!(legacy.metadata.uid.is_some());
    let elsewhere = slimmed
        .ingresses
        .iter()
        .find(|i| i.metadata.name.as_deref() == Some("ignored-elsewhere"))
        .expect("the Ingress with another prefix");
    assert!(
        elsewhere.metadata.annotations.is_none(),
        "no annotation the planner reads: {:?}",
        elsewhere.metadata.annotations
    );

    let plan = desired(&whole, &config);
    let names = planned(&plan);
    for host in [
        "legacy.example.com",
        "extra.example.com",
        "elsewhere.example.com",
    ] {
        assert!(names.contains(&host), "{host} is planned: {names:?}");
    }
    assert!(!names.contains(&"ignored.example.com"), "{names:?}");
    assert_eq!(desired(&slimmed, &config), plan);
}

#[test]
fn a_slimmed_ingress_keeps_the_ignore_annotation_of_the_configured_prefix() {
    let config = PlannerConfig {
        annotation_prefix: "example.org/".into(),
        ..PlannerConfig::default()
    };
    let (whole, slimmed) = whole_and_slimmed(&config);
    let plan = desired(&whole, &config);
    let names = planned(&plan);
    assert!(names.contains(&"ignored.example.com"), "{names:?}");
    assert!(!names.contains(&"elsewhere.example.com"), "{names:?}");
    assert_eq!(desired(&slimmed, &config), plan);
}
