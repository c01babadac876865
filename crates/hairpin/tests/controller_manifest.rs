//! The static manifest (rendered from the Helm chart by scripts/render-manifest.sh) parses into
//! typed Kubernetes objects, and its RBAC grants exactly what the controller and proxy use.

use std::collections::BTreeMap;

use hairpin_planner::PlannerConfig;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, PodSpec, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

const MANIFEST: &str = include_str!("../../../deploy/hairpin.yaml");
const CRD_FILE: &str = include_str!("../../../charts/hairpin/crds/hairpin.io_hairpins.yaml");
const UNINSTALL: &str = include_str!("../../../deploy/hairpin-uninstall.yaml");

#[derive(Default)]
struct Objects {
    deployments: Vec<Deployment>,
    cluster_roles: Vec<ClusterRole>,
    cluster_role_bindings: Vec<ClusterRoleBinding>,
    roles: Vec<Role>,
    role_bindings: Vec<RoleBinding>,
    service_accounts: Vec<ServiceAccount>,
    crds: Vec<CustomResourceDefinition>,
    kinds: Vec<String>,
}

fn parse() -> Objects {
    let mut objects = Objects::default();
    for doc in MANIFEST.split("\n---\n") {
        let value: Value = serde_saphyr::from_str(doc).expect("each document is valid YAML");
        if value.is_null() {
            continue;
        }
        let kind = value["kind"]
            .as_str()
            .expect("every document has a kind")
            .to_owned();
        match kind.as_str() {
            "Namespace" => drop(serde_json::from_value::<Namespace>(value).unwrap()),
            "CustomResourceDefinition" => objects.crds.push(serde_json::from_value(value).unwrap()),
            "Service" => drop(serde_json::from_value::<Service>(value).unwrap()),
            "PodDisruptionBudget" => {
                drop(serde_json::from_value::<PodDisruptionBudget>(value).unwrap())
            }
            "ServiceAccount" => objects
                .service_accounts
                .push(serde_json::from_value(value).unwrap()),
            "Deployment" => objects
                .deployments
                .push(serde_json::from_value(value).unwrap()),
            "ClusterRole" => objects
                .cluster_roles
                .push(serde_json::from_value(value).unwrap()),
            "ClusterRoleBinding" => objects
                .cluster_role_bindings
                .push(serde_json::from_value(value).unwrap()),
            "Role" => objects.roles.push(serde_json::from_value(value).unwrap()),
            "RoleBinding" => objects
                .role_bindings
                .push(serde_json::from_value(value).unwrap()),
            // Checked on a real API server: tests/admission_policy.rs.
            "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding" => {
                assert_eq!(value["apiVersion"], "admissionregistration.k8s.io/v1");
            }
            other => panic!("unexpected kind {other} in the static manifest"),
        }
        objects.kinds.push(kind);
    }
    objects
}

fn deployment<'a>(objects: &'a Objects, component: &str) -> &'a Deployment {
    objects
        .deployments
        .iter()
        .find(|d| d.metadata.labels.as_ref().unwrap()["app.kubernetes.io/component"] == component)
        .unwrap_or_else(|| panic!("a {component} Deployment"))
}

fn pod_spec(deployment: &Deployment) -> &PodSpec {
    deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
}

/// One API request to authorize: (namespace or "" for cluster-wide, group, resource, verb, name).
type Request<'a> = (&'a str, &'a str, &'a str, &'a str, Option<&'a str>);

fn rule_allows(
    rule: &PolicyRule,
    group: &str,
    resource: &str,
    verb: &str,
    name: Option<&str>,
) -> bool {
    let has = |list: &Option<Vec<String>>, item: &str| {
        list.iter().flatten().any(|x| x == item || x == "*")
    };
    has(&rule.api_groups, group)
        && has(&rule.resources, resource)
        && rule.verbs.iter().any(|v| v == verb || v == "*")
        && match &rule.resource_names {
            None => true,
            Some(names) if names.is_empty() => true,
            Some(names) => name.is_some_and(|n| names.iter().any(|x| x == n)),
        }
}

fn allowed(
    objects: &Objects,
    account: &str,
    (ns, group, resource, verb, name): Request<'_>,
) -> bool {
    let bound = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects
            .iter()
            .flatten()
            .any(|s| s.kind == "ServiceAccount" && s.name == account)
    };
    let cluster = objects
        .cluster_role_bindings
        .iter()
        .filter(|b| bound(&b.subjects))
        .any(|b| {
            objects
                .cluster_roles
                .iter()
                .filter(|r| r.metadata.name.as_deref() == Some(b.role_ref.name.as_str()))
                .flat_map(|r| r.rules.iter().flatten())
                .any(|rule| rule_allows(rule, group, resource, verb, name))
        });
    let namespaced = !ns.is_empty()
        && objects
            .role_bindings
            .iter()
            .filter(|b| b.metadata.namespace.as_deref() == Some(ns) && bound(&b.subjects))
            .any(|b| {
                objects
                    .roles
                    .iter()
                    .filter(|r| {
                        r.metadata.namespace.as_deref() == Some(ns)
                            && r.metadata.name.as_deref() == Some(b.role_ref.name.as_str())
                    })
                    .flat_map(|r| r.rules.iter().flatten())
                    .any(|rule| rule_allows(rule, group, resource, verb, name))
            });
    cluster || namespaced
}

#[test]
fn every_document_parses_into_its_typed_object_and_no_hook_is_left_in() {
    let objects = parse();
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "Role",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
    ] {
        assert!(
            objects.kinds.iter().any(|k| k == kind),
            "the manifest has a {kind}"
        );
    }
    assert!(
        !MANIFEST.contains("helm.sh/hook"),
        "hooks would run at `kubectl apply` time"
    );
    for d in &objects.deployments {
        let sa = pod_spec(d).service_account_name.clone().unwrap();
        assert!(
            objects
                .service_accounts
                .iter()
                .any(|s| s.metadata.name.as_deref() == Some(sa.as_str())),
            "{sa} exists"
        );
    }
}

#[test]
fn pods_are_non_root_read_only_and_probed() {
    let objects = parse();
    let controller = deployment(&objects, "controller");
    assert_eq!(
        controller.spec.as_ref().unwrap().replicas,
        Some(2),
        "two replicas, one leader"
    );
    for d in &objects.deployments {
        let pod = pod_spec(d);
        assert_eq!(
            pod.security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
        for c in &pod.containers {
            let sc = c.security_context.as_ref().unwrap();
            assert_eq!(sc.read_only_root_filesystem, Some(true), "{}", c.name);
            assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
            let path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
                p.as_ref().unwrap().http_get.as_ref().unwrap().path.clone()
            };
            assert_eq!(path(&c.liveness_probe).as_deref(), Some("/livez"));
            assert_eq!(path(&c.readiness_probe).as_deref(), Some("/readyz"));
            assert!(
                c.resources.as_ref().unwrap().requests.is_some(),
                "{} has requests",
                c.name
            );
        }
    }
    let args = |component: &str| {
        pod_spec(deployment(&objects, component)).containers[0]
            .args
            .clone()
            .unwrap()
    };
    assert_eq!(args("controller")[0], "controller");
    assert_eq!(args("proxy")[0], "proxy");
    assert!(
        args("proxy")
            .iter()
            .any(|a| a == "--routes-configmap=$(POD_NAMESPACE)/hairpin-routes")
    );
}

/// The chart's `controller.cure` reaches the controller, uninstall and the doctor test as
/// `HAIRPIN_CURE` (the flag `--cure`), `auto` by default.
#[test]
fn the_cure_is_passed_to_the_controller_and_uninstall() {
    let objects = parse();
    let cure_of = |env: Option<&Vec<k8s_openapi::api::core::v1::EnvVar>>| {
        env.into_iter()
            .flatten()
            .find(|e| e.name == "HAIRPIN_CURE")
            .and_then(|e| e.value.clone())
    };
    let controller = &pod_spec(deployment(&objects, "controller")).containers[0];
    assert_eq!(cure_of(controller.env.as_ref()).as_deref(), Some("auto"));
    assert!(
        !controller
            .args
            .iter()
            .flatten()
            .any(|a| a.starts_with("--cure")),
        "the cure comes from the environment only, so the flag never contradicts it"
    );
    let doc = UNINSTALL.split("\n---\n").nth(1).unwrap();
    let job: k8s_openapi::api::batch::v1::Job =
        serde_json::from_value(serde_saphyr::from_str::<Value>(doc).unwrap()).unwrap();
    let pod = job.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        cure_of(pod.containers[0].env.as_ref()).as_deref(),
        Some("auto")
    );
}

#[test]
fn proxy_pods_carry_the_labels_the_hairpin_services_select() {
    let objects = parse();
    let proxy = deployment(&objects, "proxy");
    let labels: BTreeMap<String, String> = proxy
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    for (key, value) in PlannerConfig::default().proxy_selector {
        assert_eq!(
            labels.get(&key),
            Some(&value),
            "proxy pods need {key}={value}"
        );
    }
}

#[test]
fn rbac_grants_what_the_controller_uses_and_no_more() {
    let objects = parse();
    let controller = "hairpin-controller";
    let planner = PlannerConfig::default();
    let needed: Vec<Request<'_>> = vec![
        ("", "", "services", "list", None),
        ("", "", "services", "watch", None),
        ("", "networking.k8s.io", "ingresses", "watch", None),
        ("", "networking.k8s.io", "ingressclasses", "list", None),
        ("", "gateway.networking.k8s.io", "gateways", "watch", None),
        ("", "gateway.networking.k8s.io", "httproutes", "list", None),
        ("", "gateway.networking.k8s.io", "grpcroutes", "watch", None),
        ("", "gateway.networking.k8s.io", "tlsroutes", "watch", None),
        ("", "traefik.io", "ingressroutes", "watch", None),
        ("", "traefik.io", "ingressroutetcps", "list", None),
        ("", "traefik.containo.us", "ingressroutes", "list", None),
        ("", "traefik.containo.us", "ingressroutetcps", "watch", None),
        ("", "networking.istio.io", "gateways", "watch", None),
        ("", "projectcontour.io", "httpproxies", "watch", None),
        // The receivers (issue 31): workloads' pod templates, the receivers' custom resources,
        // and their ConfigMaps by name.
        ("", "apps", "deployments", "list", None),
        ("", "apps", "deployments", "watch", None),
        ("", "apps", "daemonsets", "watch", None),
        ("", "apps", "statefulsets", "watch", None),
        (
            "",
            "gateway.networking.k8s.io",
            "gatewayclasses",
            "watch",
            None,
        ),
        (
            "",
            "gateway.envoyproxy.io",
            "clienttrafficpolicies",
            "watch",
            None,
        ),
        ("", "gateway.nginx.org", "nginxproxies", "watch", None),
        (
            "",
            "gateway.kgateway.dev",
            "listenerpolicies",
            "watch",
            None,
        ),
        (
            "",
            "projectcontour.io",
            "contourconfigurations",
            "watch",
            None,
        ),
        ("", "projectcontour.io", "contourdeployments", "list", None),
        // Issue 38: Istio's EnvoyFilters (one that may turn PROXY on makes the setting unknown).
        ("", "networking.istio.io", "envoyfilters", "watch", None),
        (
            "ingress-controller",
            "",
            "configmaps",
            "watch",
            Some("haproxy-ingress"),
        ),
        (
            "ingress-nginx",
            "",
            "configmaps",
            "watch",
            Some("ingress-nginx-controller"),
        ),
        (
            "ingress-nginx",
            "",
            "configmaps",
            "get",
            Some("ingress-nginx-controller"),
        ),
        (
            "kube-system",
            "",
            "configmaps",
            "watch",
            Some("cilium-config"),
        ),
        ("istio-system", "", "configmaps", "list", Some("istio")),
        // Issue 45: kube-proxy's configuration file (its `featureGates`), by name.
        ("kube-system", "", "configmaps", "watch", Some("kube-proxy")),
        ("kube-system", "", "configmaps", "list", Some("kube-proxy")),
        (
            "kube-system",
            "",
            "configmaps",
            "watch",
            Some("kube-proxy-config"),
        ),
        ("", "events.k8s.io", "events", "create", None),
        ("", "events.k8s.io", "events", "patch", None),
        ("", "hairpin.io", "hairpins", "watch", None),
        ("", "hairpin.io", "hairpins", "create", None),
        ("", "hairpin.io", "hairpins", "delete", None),
        ("", "hairpin.io", "hairpins/status", "patch", None),
        // The native cure: `ipMode: Proxy` on a load balancer's status subresource (read with
        // get, replaced under its resourceVersion; uninstall puts it back).
        ("", "", "services", "get", Some("ingress-nginx")),
        ("", "", "services/status", "update", Some("ingress-nginx")),
        (
            "hairpin",
            "discovery.k8s.io",
            "endpointslices",
            "watch",
            None,
        ),
        ("kube-system", "", "pods", "list", None),
        ("kube-system", "", "configmaps", "watch", Some("coredns")),
        ("kube-system", "", "configmaps", "get", Some("coredns")),
        ("kube-system", "", "configmaps", "update", Some("coredns")),
        (
            "kube-system",
            "",
            "configmaps",
            "update",
            Some("coredns-custom"),
        ),
        ("kube-system", "", "configmaps", "create", None),
        (
            "kube-system",
            "",
            "configmaps",
            "delete",
            Some("coredns-custom"),
        ),
        (
            "kube-system",
            "",
            "configmaps",
            "watch",
            Some("node-local-dns"),
        ),
        (
            "kube-system",
            "",
            "configmaps",
            "update",
            Some("node-local-dns"),
        ),
        (
            "kube-system",
            "",
            "configmaps",
            "update",
            Some("nodelocaldns"),
        ),
        ("hairpin", "", "services", "create", None),
        ("hairpin", "", "services", "update", Some("hairpin-lb")),
        ("hairpin", "", "services", "delete", Some("hairpin-lb")),
        (
            "hairpin",
            "",
            "configmaps",
            "update",
            Some("hairpin-routes"),
        ),
        ("hairpin", "", "configmaps", "watch", Some("hairpin-routes")),
        // The node agents' hosts block: published, and deleted by uninstall.
        ("hairpin", "", "configmaps", "update", Some("hairpin-hosts")),
        ("hairpin", "", "configmaps", "watch", Some("hairpin-hosts")),
        ("hairpin", "", "configmaps", "delete", Some("hairpin-hosts")),
        // The native cure's record (what each status said before; uninstall reads it).
        (
            "hairpin",
            "",
            "configmaps",
            "get",
            Some(planner.native_config_map.as_str()),
        ),
        (
            "hairpin",
            "",
            "configmaps",
            "watch",
            Some(planner.native_config_map.as_str()),
        ),
        (
            "hairpin",
            "",
            "configmaps",
            "update",
            Some(planner.native_config_map.as_str()),
        ),
        (
            "hairpin",
            "",
            "configmaps",
            "delete",
            Some(planner.native_config_map.as_str()),
        ),
        ("hairpin", "", "configmaps", "create", None),
        ("hairpin", "coordination.k8s.io", "leases", "create", None),
        // hairpin's DNSEndpoints are deleted in every mode (uninstall, after a switch away
        // from external-dns); written only with `coredns.dnsMode: external-dns`.
        (
            "hairpin",
            "externaldns.k8s.io",
            "dnsendpoints",
            "list",
            None,
        ),
        (
            "hairpin",
            "externaldns.k8s.io",
            "dnsendpoints",
            "delete",
            None,
        ),
        (
            "hairpin",
            "coordination.k8s.io",
            "leases",
            "update",
            Some("hairpin-controller"),
        ),
        (
            "hairpin",
            "coordination.k8s.io",
            "leases",
            "delete",
            Some("hairpin-controller"),
        ),
        // The Lease is watched by name (a lost Lease stops the writes at once; the fence).
        (
            "hairpin",
            "coordination.k8s.io",
            "leases",
            "watch",
            Some("hairpin-controller"),
        ),
        // uninstall reads the controller Deployment (the fence's owner).
        (
            "hairpin",
            "apps",
            "deployments",
            "get",
            Some("hairpin-controller"),
        ),
    ];
    for name in &planner.coredns_config_maps {
        assert!(
            allowed(
                &objects,
                controller,
                ("kube-system", "", "configmaps", "update", Some(name))
            ),
            "update {name}"
        );
    }
    for request in needed {
        assert!(
            allowed(&objects, controller, request),
            "the controller may {request:?}"
        );
    }
    // The release pair (issue 40): created, read and deleted by name, never updated; the
    // ClusterRole it makes grants nothing the controller does not hold (so the API server's
    // RBAC escalation check admits it without `escalate` or `bind`).
    let release = Some("hairpin-release");
    for resource in ["clusterroles", "clusterrolebindings"] {
        let rbac = "rbac.authorization.k8s.io";
        assert!(allowed(
            &objects,
            controller,
            ("", rbac, resource, "create", None)
        ));
        for verb in ["get", "delete"] {
            assert!(allowed(
                &objects,
                controller,
                ("", rbac, resource, verb, release)
            ));
        }
        for verb in ["update", "patch", "escalate", "bind", "list"] {
            assert!(
                !allowed(&objects, controller, ("", rbac, resource, verb, release)),
                "the controller must not {verb} {resource} hairpin-release"
            );
        }
        assert!(!allowed(
            &objects,
            controller,
            ("", rbac, resource, "delete", Some("hairpin-controller"))
        ));
    }
    let params = hairpin_controller::removal::RemovalParams::new("hairpin", "kube-system");
    let (role, _) = hairpin_controller::removal::release_pair(&params, "uid");
    let role: ClusterRole = serde_json::from_value(role).expect("a ClusterRole");
    for rule in role.rules.iter().flatten() {
        for (group, resource) in rule
            .api_groups
            .iter()
            .flatten()
            .flat_map(|g| rule.resources.iter().flatten().map(move |r| (g, r)))
        {
            for verb in &rule.verbs {
                for name in rule.resource_names.iter().flatten() {
                    assert!(
                        allowed(
                            &objects,
                            controller,
                            ("hairpin", group, resource, verb, Some(name))
                        ),
                        "the release pair grants {verb} {resource} {name}, which the controller lacks"
                    );
                }
            }
        }
    }
    let denied: Vec<Request<'_>> = vec![
        ("", "", "services", "update", Some("x")),
        // The status subresource only: never a Service's spec, never created or deleted, and
        // never another subresource.
        ("", "", "services", "patch", Some("x")),
        ("", "", "services", "create", None),
        ("", "", "services", "delete", Some("x")),
        ("", "", "services/status", "get", Some("x")),
        // Replaced, never patched (issue 37: only the verbs the code uses).
        ("", "", "services/status", "patch", Some("x")),
        ("hairpin", "", "services", "patch", Some("hairpin-lb")),
        ("hairpin", "", "configmaps", "patch", Some("hairpin-routes")),
        ("kube-system", "", "configmaps", "patch", Some("coredns")),
        (
            "hairpin",
            "coordination.k8s.io",
            "leases",
            "patch",
            Some("hairpin-controller"),
        ),
        ("", "hairpin.io", "hairpins", "patch", Some("x")),
        ("", "hairpin.io", "hairpins", "update", Some("x")),
        ("", "hairpin.io", "hairpins/status", "update", Some("x")),
        ("", "", "services/status", "create", None),
        ("", "", "services/status", "delete", Some("x")),
        ("", "", "services/proxy", "get", Some("x")),
        ("", "", "services/finalize", "update", Some("x")),
        ("", "", "pods/status", "update", Some("x")),
        ("", "", "nodes/status", "patch", Some("x")),
        (
            "kube-system",
            "",
            "configmaps",
            "update",
            Some("kube-proxy"),
        ),
        (
            "kube-system",
            "",
            "configmaps",
            "update",
            Some("hairpin-native"),
        ),
        ("", "", "configmaps", "list", None),
        (
            "kube-system",
            "",
            "configmaps",
            "update",
            Some("kube-proxy"),
        ),
        (
            "kube-system",
            "",
            "configmaps",
            "get",
            Some("kubeadm-config"),
        ),
        // node-local-dns is written (its root block), never deleted.
        (
            "kube-system",
            "",
            "configmaps",
            "delete",
            Some("node-local-dns"),
        ),
        ("kube-system", "", "services", "update", Some("kube-dns")),
        ("default", "", "services", "create", None),
        ("hairpin", "", "configmaps", "update", Some("other")),
        ("hairpin", "", "secrets", "get", Some("x")),
        ("", "", "secrets", "list", None),
        ("", "", "pods", "list", None),
        ("kube-system", "", "pods", "delete", None),
        ("", "discovery.k8s.io", "endpointslices", "list", None),
        (
            "hairpin",
            "externaldns.k8s.io",
            "dnsendpoints",
            "create",
            None,
        ),
        (
            "default",
            "externaldns.k8s.io",
            "dnsendpoints",
            "delete",
            None,
        ),
        ("", "externaldns.k8s.io", "dnsendpoints", "list", None),
        (
            "hairpin",
            "coordination.k8s.io",
            "leases",
            "update",
            Some("someone-elses"),
        ),
        ("hairpin", "apps", "deployments", "get", Some("other")),
        // The receivers are read, never written, and their other ConfigMaps not at all.
        ("", "apps", "deployments", "update", Some("x")),
        ("", "apps", "daemonsets", "patch", Some("x")),
        ("", "apps", "statefulsets", "get", Some("x")),
        (
            "ingress-nginx",
            "",
            "configmaps",
            "update",
            Some("ingress-nginx-controller"),
        ),
        ("ingress-nginx", "", "configmaps", "list", None),
        ("ingress-nginx", "", "configmaps", "get", Some("other")),
        (
            "",
            "gateway.envoyproxy.io",
            "clienttrafficpolicies",
            "update",
            Some("x"),
        ),
        (
            "hairpin",
            "apps",
            "deployments",
            "update",
            Some("hairpin-controller"),
        ),
    ];
    for request in denied {
        assert!(
            !allowed(&objects, controller, request),
            "the controller must not {request:?}"
        );
    }
    let proxy = "hairpin-proxy";
    assert!(allowed(
        &objects,
        proxy,
        ("hairpin", "", "configmaps", "watch", Some("hairpin-routes"))
    ));
    assert!(allowed(
        &objects,
        proxy,
        ("hairpin", "", "configmaps", "list", Some("hairpin-routes"))
    ));
    assert!(!allowed(
        &objects,
        proxy,
        (
            "hairpin",
            "",
            "configmaps",
            "update",
            Some("hairpin-routes")
        )
    ));
    assert!(!allowed(
        &objects,
        proxy,
        ("", "", "services", "list", None)
    ));
}

#[test]
fn the_uninstall_job_runs_hairpin_uninstall_with_the_controllers_account() {
    let doc = UNINSTALL
        .split("\n---\n")
        .nth(1)
        .expect("one document after the header");
    let job: k8s_openapi::api::batch::v1::Job =
        serde_json::from_value(serde_saphyr::from_str::<Value>(doc).unwrap()).unwrap();
    let pod = job.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("hairpin-controller")
    );
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let container = &pod.containers[0];
    assert_eq!(
        container.args.as_deref(),
        Some(&["uninstall".to_owned()][..])
    );
    let env: Vec<&str> = container
        .env
        .iter()
        .flatten()
        .map(|e| e.name.as_str())
        .collect();
    assert!(
        env.contains(&"HAIRPIN_NAMESPACE") && env.contains(&"HAIRPIN_COREDNS_CONFIGMAPS"),
        "{env:?}"
    );
    let objects = parse();
    let controller = deployment(&objects, "controller");
    let controller_env: Vec<String> = pod_spec(controller).containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| e.name.clone())
        .collect();
    // The one uninstall-only setting: the controller Deployment it fences (the fence is owned
    // by it), named as the manifest names it.
    let own = pod
        .containers
        .first()
        .and_then(|c| c.env.as_ref())
        .and_then(|env| {
            env.iter()
                .find(|e| e.name == "HAIRPIN_CONTROLLER_DEPLOYMENT")
        })
        .and_then(|e| e.value.clone());
    assert_eq!(own.as_deref(), controller.metadata.name.as_deref());
    for name in env
        .into_iter()
        .filter(|n| *n != "HAIRPIN_CONTROLLER_DEPLOYMENT")
    {
        assert!(
            controller_env.iter().any(|e| e == name),
            "uninstall sees the controller's {name}"
        );
    }
}

/// The CRD file is exactly what `hairpin crd` prints from the Rust type (regenerate with
/// `hairpin crd > charts/hairpin/crds/hairpin.io_hairpins.yaml`), and the static manifest
/// carries the same CRD.
#[test]
fn the_checked_in_crd_is_generated_from_the_rust_type() {
    assert_eq!(
        CRD_FILE,
        hairpin_controller::crd::crd_yaml(),
        "charts/hairpin/crds/hairpin.io_hairpins.yaml has drifted: run `make generate`"
    );
    let objects = parse();
    let from_file: CustomResourceDefinition = serde_saphyr::from_str(
        CRD_FILE
            .split("\n---\n")
            .nth(1)
            .expect("the CRD after the header"),
    )
    .unwrap();
    assert_eq!(objects.crds, [from_file]);
    let crd = &objects.crds[0];
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["hp".to_owned()][..])
    );
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1alpha1");
    assert!(version.subresources.as_ref().unwrap().status.is_some());
    let columns: Vec<&str> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(columns, ["Proxy", "Cure", "Hosts", "DNS", "Ready", "Age"]);
}

/// A fenced controller (idle after `hairpin uninstall`) is not ready: its PodDisruptionBudget
/// must not keep it from being evicted, or a manual uninstall would block node drains.
#[test]
fn the_controller_budget_never_protects_a_pod_that_is_not_ready() {
    let budget = MANIFEST
        .split("\n---\n")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .find(|v| {
            v["kind"] == "PodDisruptionBudget" && v["metadata"]["name"] == "hairpin-controller"
        })
        .expect("the controller's PodDisruptionBudget (2 replicas by default)");
    let budget: PodDisruptionBudget = serde_json::from_value(budget).unwrap();
    assert_eq!(
        budget
            .spec
            .unwrap()
            .unhealthy_pod_eviction_policy
            .as_deref(),
        Some("AlwaysAllow")
    );
}

/// The admission policies (issue 37) match the very account the controller Deployment and the
/// uninstall Job run as, and nobody else; each fails closed and is bound with `Deny`. What they
/// allow and deny is shown on a real API server in tests/admission_policy.rs.
#[test]
fn the_admission_policies_bind_the_controllers_account_only_and_deny() {
    let objects = parse();
    let account = pod_spec(deployment(&objects, "controller"))
        .service_account_name
        .clone()
        .expect("the controller's ServiceAccount");
    let user = format!("system:serviceaccount:hairpin:{account}");
    let docs: Vec<Value> = MANIFEST
        .split("\n---\n")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .collect();
    let policies: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .collect();
    let names: Vec<&str> = policies
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "hairpin-create-names",
            "hairpin-dns-block-only",
            "hairpin-guard-finalizers-only",
            "hairpin-own-objects",
            "hairpin-own-services",
            "hairpin-release-pair",
            "hairpin-status-ipmode-only"
        ]
    );
    for policy in &policies {
        let name = policy["metadata"]["name"].as_str().unwrap();
        assert_eq!(policy["spec"]["failurePolicy"], "Fail", "{name}");
        let conditions = policy["spec"]["matchConditions"].as_array().unwrap();
        // Every condition must hold (the API server ANDs them): the first names the account,
        // any further one only narrows (dns-block-only: the DNS ConfigMaps' namespace).
        assert!(!conditions.is_empty(), "{name}");
        assert_eq!(
            conditions[0]["expression"],
            format!("request.userInfo.username == \"{user}\""),
            "{name}"
        );
        let binding = docs
            .iter()
            .find(|d| {
                d["kind"] == "ValidatingAdmissionPolicyBinding" && d["metadata"]["name"] == name
            })
            .unwrap_or_else(|| panic!("a binding for {name}"));
        assert_eq!(binding["spec"]["policyName"], name);
        assert_eq!(
            binding["spec"]["validationActions"],
            serde_json::json!(["Deny"])
        );
        assert!(
            binding["spec"]["matchResources"].is_null(),
            "{name}: every namespace"
        );
    }
    let by_name = |name: &str| {
        policies
            .iter()
            .find(|p| p["metadata"]["name"] == name)
            .copied()
            .unwrap_or_else(|| panic!("policy {name}"))
    };
    let release = by_name("hairpin-release-pair");
    assert_eq!(
        release["spec"]["matchConstraints"]["resourceRules"],
        serde_json::json!([{"apiGroups": ["rbac.authorization.k8s.io"], "apiVersions": ["*"],
                            "operations": ["CREATE"],
                            "resources": ["clusterroles", "clusterrolebindings"]}])
    );
    let status = by_name("hairpin-status-ipmode-only");
    assert_eq!(
        status["spec"]["matchConstraints"]["resourceRules"],
        serde_json::json!([{"apiGroups": [""], "apiVersions": ["*"], "operations": ["UPDATE"],
                            "resources": ["services/status"]}])
    );
}
