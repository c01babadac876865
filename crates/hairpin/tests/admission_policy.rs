//! The shipped admission policies (issue 37) on a real kube-apiserver (v1.31.14,
//! `../shared/peers/kubernetes`), with `deploy/hairpin.yaml` applied: the API server compiles
//! and type-checks them, and enforces them on the controller's ServiceAccount (its token from
//! the TokenRequest API, so every request is authorized and admitted as that account):
//!
//! - `hairpin-status-ipmode-only`: on a LoadBalancer Service's status, setting `ipMode: Proxy`,
//!   putting `VIP` back and removing the field are allowed; changing an `ip`, adding or removing
//!   an entry, changing a hostname or a port, the conditions, labels or annotations through
//!   the status are denied with a message naming the policy. The spec cannot change through
//!   the status at all (the API server keeps the stored spec). A `patch` is refused by RBAC.
//! - The status policy also denies `ipMode: Proxy` on a Service a VIP implementation marks
//!   (MetalLB, kube-vip, Cilium LB-IPAM...: issue 45 item 4), and lets `Proxy` go back there.
//! - `hairpin-own-services`: in hairpin's namespace the account creates a ClusterIP Service,
//!   never one with externalIPs, a LoadBalancer or a NodePort.
//! - `hairpin-create-names`: it creates its own ConfigMaps and Lease, no other name.
//! - `hairpin-release-pair` (issue 40): it creates exactly the release pair the controller
//!   makes (`hairpin_controller::removal::release_pair`), and no other ClusterRole or
//!   ClusterRoleBinding: another name, other rules, another subject or roleRef, a finalizer,
//!   another owner are denied with the policy's message; RBAC refuses it any update of them.
//! - Nobody else is affected: the admin, and another ServiceAccount bound to the very same
//!   ClusterRole, change an `ip` as before.
//!
//! - `hairpin doctor` says the status policy is in force, and warns once its binding is gone.
//!
//! Every request and the API server's answer is printed (`--nocapture`).
//!
//! Needs root, etcd and the test peers; without them the test prints why and passes.

mod support;

use std::time::{Duration, Instant};

use hairpin_testkit::kube::{self, ApiServer};
use serde_json::{Value, json};

const POLICY: &str = "hairpin-status-ipmode-only";
const SERVICES_POLICY: &str = "hairpin-own-services";
const CREATE_POLICY: &str = "hairpin-create-names";
const GUARD_POLICY: &str = "hairpin-guard-finalizers-only";
const RELEASE_POLICY: &str = "hairpin-release-pair";
const NS: &str = "shop";
const SVC: &str = "/api/v1/namespaces/shop/services/web";
const LB_IP: &str = "203.0.113.40";

/// Polls `f` every 100 ms until it returns `Some`, for at most `limit` (a deadline that only
/// catches a hang).
fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = f() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The API server compiled and type-checked every policy: its status has caught up with its
/// generation and lists no expression warning.
fn assert_type_checked(api: &ApiServer, name: &str) {
    let path = format!("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{name}");
    let policy = wait_for("the policy's type check", Duration::from_secs(60), || {
        let policy = api.get(&path)?;
        (policy["status"]["observedGeneration"] == policy["metadata"]["generation"])
            .then_some(policy)
    });
    let warnings = &policy["status"]["typeChecking"]["expressionWarnings"];
    assert!(
        warnings.as_array().is_none_or(Vec::is_empty),
        "{name}: the API server's type check: {warnings}"
    );
    println!(
        "{name}: type-checked by the API server, no warning (status {})",
        policy["status"]
    );
}

/// A request's outcome, printed: `(code, message)`.
fn show(what: &str, (code, body): (u16, Value)) -> (u16, String) {
    let message = body["message"].as_str().unwrap_or_default().to_owned();
    if (200..300).contains(&code) {
        println!("ALLOWED {what}: {code}");
    } else {
        println!("DENIED  {what}: {code} {message}");
    }
    (code, message)
}

fn assert_allowed(what: &str, outcome: (u16, Value)) {
    let (code, message) = show(what, outcome);
    assert!((200..300).contains(&code), "{what}: {code} {message}");
}

fn assert_denied_by(policy: &str, what: &str, outcome: (u16, Value)) {
    let (code, message) = show(what, outcome);
    assert_eq!(code, 403, "{what}: {message}");
    assert!(
        message.contains(&format!("ValidatingAdmissionPolicy '{policy}'")),
        "{what}: denied, but not by {policy}: {message}"
    );
}

/// The Service as stored, changed by `edit`, written back with PUT to `/status` under its
/// resourceVersion, as `hairpin controller` writes it (`replace_status`).
fn put_status(api: &ApiServer, token: &str, edit: impl FnOnce(&mut Value)) -> (u16, Value) {
    let mut svc = api.get(SVC).expect("the Service");
    edit(&mut svc);
    api.request_as(
        token,
        "PUT",
        &format!("{SVC}/status"),
        Some(("application/json", &svc)),
    )
    .expect("PUT status")
}

fn ingress(api: &ApiServer) -> Value {
    api.get(SVC).expect("the Service")["status"]["loadBalancer"]["ingress"].clone()
}

/// The cluster: the manifest, a LoadBalancer Service with two status entries (an IP with a
/// port, a hostname) and a condition, written as a cloud controller would (the admin).
fn seed(api: &ApiServer) {
    support::install_manifest(api);
    api.ensure_namespace(NS);
    api.apply(&json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": NS, "name": "web", "labels": {"app": "web"}},
        "spec": {"type": "LoadBalancer", "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": 80, "protocol": "TCP"}]}
    }));
    api.patch_status(
        SVC,
        &json!({"status": {
            "loadBalancer": {"ingress": [
                {"ip": LB_IP, "ports": [{"port": 80, "protocol": "TCP"}]},
                {"hostname": "lb-1.example.test"}
            ]},
            "conditions": [{"type": "LoadBalancerReady", "status": "True", "reason": "Ready",
                            "message": "provisioned", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
        }}),
    );
}

/// The policies are loaded by the API server's admission plugin a moment after they are
/// created: a status write the policy denies (a label through the status, harmless if it
/// still went through) is retried until the policy answers it.
fn wait_enforced(api: &ApiServer, token: &str) {
    wait_for("the policy to be enforced", Duration::from_secs(60), || {
        let (code, body) = put_status(api, token, |svc| {
            svc["metadata"]["labels"]["probe"] = json!("x");
        });
        let enforced = code == 403 && body["message"].as_str()?.contains(POLICY);
        if !enforced && (200..300).contains(&code) {
            // Went through before the policy was loaded: take the label away again.
            let mut svc = api.get(SVC)?;
            svc["metadata"]["labels"].as_object_mut()?.remove("probe");
            api.request_ok("PUT", SVC, Some(("application/json", &svc)));
        }
        enforced.then_some(())
    });
}

/// The native cure's writes go through: `ipMode: Proxy`, back to `VIP`, the field removed.
fn ip_mode_changes_are_allowed(api: &ApiServer, token: &str) {
    let set_mode = |mode: Option<&'static str>| {
        move |svc: &mut Value| {
            let entry = &mut svc["status"]["loadBalancer"]["ingress"][0];
            match mode {
                Some(mode) => entry["ipMode"] = json!(mode),
                None => drop(entry.as_object_mut().unwrap().remove("ipMode")),
            }
        }
    };
    let outcome = put_status(api, token, set_mode(Some("Proxy")));
    assert_allowed("controller SA: PUT status, ipMode VIP -> Proxy", outcome);
    assert_eq!(ingress(api)[0]["ipMode"], "Proxy");
    let outcome = put_status(api, token, set_mode(Some("VIP")));
    assert_allowed("controller SA: PUT status, ipMode Proxy -> VIP", outcome);
    assert_eq!(ingress(api)[0]["ipMode"], "VIP");
    put_status(api, token, set_mode(Some("Proxy")));
    let outcome = put_status(api, token, set_mode(None));
    assert_allowed("controller SA: PUT status, ipMode removed", outcome);
    assert_eq!(
        ingress(api)[0]["ipMode"],
        "VIP",
        "the API server's default again"
    );
}

/// Issue 45 item 4: on a Service a VIP implementation marks (MetalLB's annotation, as its
/// controller writes it), the account's `ipMode: Proxy` is denied with the policy's message;
/// a `Proxy` set before the mark may still be put back.
fn proxy_on_a_vip_marked_service_is_denied(api: &ApiServer, token: &str) {
    let mark = |value: Value| {
        api.request_ok(
            "PATCH",
            SVC,
            Some((
                "application/merge-patch+json",
                &json!({"metadata": {"annotations": {"metallb.io/ip-allocated-from-pool": value}}}),
            )),
        );
    };
    let set_mode = |mode: &'static str| {
        move |svc: &mut Value| svc["status"]["loadBalancer"]["ingress"][0]["ipMode"] = json!(mode)
    };
    mark(json!("default"));
    let (code, body) = put_status(api, token, set_mode("Proxy"));
    let message = body["message"].as_str().unwrap_or_default().to_owned();
    assert_denied_by(
        POLICY,
        "controller SA: PUT status, ipMode Proxy on a MetalLB-marked Service",
        (code, body),
    );
    assert!(message.contains("VIP implementation marks"), "{message}");
    assert_eq!(ingress(api)[0]["ipMode"], "VIP");
    // Proxy from before the mark: putting it back is allowed.
    mark(Value::Null);
    put_status(api, token, set_mode("Proxy"));
    mark(json!("default"));
    let outcome = put_status(api, token, set_mode("VIP"));
    assert_allowed(
        "controller SA: PUT status, ipMode Proxy -> VIP on a MetalLB-marked Service",
        outcome,
    );
    assert_eq!(ingress(api)[0]["ipMode"], "VIP");
    mark(Value::Null);
}

/// Everything else of the status, and the metadata through the status, is denied.
fn other_status_changes_are_denied(api: &ApiServer, token: &str) {
    let before = api.get(SVC).expect("the Service");
    type Edit = Box<dyn FnOnce(&mut Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "ip changed",
            Box::new(|s| s["status"]["loadBalancer"]["ingress"][0]["ip"] = json!("198.51.100.9")),
        ),
        (
            "entry added",
            Box::new(|s| {
                s["status"]["loadBalancer"]["ingress"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"ip": "198.51.100.9", "ipMode": "VIP"}));
            }),
        ),
        (
            "entry removed",
            Box::new(|s| {
                s["status"]["loadBalancer"]["ingress"]
                    .as_array_mut()
                    .unwrap()
                    .pop();
            }),
        ),
        (
            "entries swapped",
            Box::new(|s| {
                s["status"]["loadBalancer"]["ingress"]
                    .as_array_mut()
                    .unwrap()
                    .reverse();
            }),
        ),
        (
            "hostname changed",
            Box::new(|s| {
                s["status"]["loadBalancer"]["ingress"][1]["hostname"] = json!("evil.example.test");
            }),
        ),
        (
            "port changed",
            Box::new(|s| {
                s["status"]["loadBalancer"]["ingress"][0]["ports"][0]["port"] = json!(8080);
            }),
        ),
        (
            "ipMode Proxy and ip changed at once",
            Box::new(|s| {
                s["status"]["loadBalancer"]["ingress"][0] = json!({"ip": "198.51.100.9", "ipMode": "Proxy", "ports": [{"port": 80, "protocol": "TCP"}]});
            }),
        ),
        (
            "condition changed",
            Box::new(|s| s["status"]["conditions"][0]["status"] = json!("False")),
        ),
        (
            "label changed through status",
            Box::new(|s| s["metadata"]["labels"]["app"] = json!("other")),
        ),
        (
            "annotation added through status",
            Box::new(|s| s["metadata"]["annotations"] = json!({"x": "y"})),
        ),
        (
            "finalizer added through status",
            Box::new(|s| s["metadata"]["finalizers"] = json!(["example.test/hold"])),
        ),
    ];
    for (what, edit) in cases {
        let outcome = put_status(api, token, edit);
        assert_denied_by(
            POLICY,
            &format!("controller SA: PUT status, {what}"),
            outcome,
        );
    }
    let after = api.get(SVC).expect("the Service");
    assert_eq!(after["status"], before["status"], "nothing was written");
    assert_eq!(after["metadata"]["labels"], before["metadata"]["labels"]);
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );

    // The spec through the status: the API server keeps the stored spec (its status
    // strategy), so the write changes nothing the policy could see, and nothing at all.
    let outcome = put_status(api, token, |s| {
        s["spec"]["externalIPs"] = json!(["198.51.100.9"]);
        s["spec"]["ports"][0]["port"] = json!(8080);
    });
    show("controller SA: PUT status, spec changed", outcome);
    let after = api.get(SVC).expect("the Service");
    assert_eq!(after["spec"], before["spec"], "the spec is as it was");
    assert_eq!(after["status"], before["status"]);

    // RBAC: the status is replaced, never patched (the code never patches it).
    let outcome = api
        .request_as(
            token,
            "PATCH",
            &format!("{SVC}/status"),
            Some((
                "application/merge-patch+json",
                &json!({"status": {"loadBalancer": {"ingress": [{"ip": LB_IP, "ipMode": "Proxy"}]}}}),
            )),
        )
        .expect("PATCH status");
    let (code, message) = show("controller SA: PATCH status (RBAC)", outcome);
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains("cannot patch resource \"services/status\""),
        "{message}"
    );
}

/// Nobody else is matched: the admin and another ServiceAccount with the very same
/// ClusterRole change an `ip` as before.
fn others_are_not_affected(api: &ApiServer) {
    let outcome = put_status(api, api.admin_token(), |s| {
        s["status"]["loadBalancer"]["ingress"][0]["ip"] = json!("198.51.100.10");
    });
    assert_allowed("admin: PUT status, ip changed", outcome);
    api.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "other-controller"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "hairpin-controller"},
        "subjects": [{"kind": "ServiceAccount", "name": "other", "namespace": "hairpin"}]
    }));
    let other = api.service_account_token("hairpin", "other");
    let outcome = wait_for("the other account's RBAC", Duration::from_secs(30), || {
        let outcome = put_status(api, &other, |s| {
            s["status"]["loadBalancer"]["ingress"][0]["ip"] = json!(LB_IP);
        });
        (outcome.0 != 403 || !outcome.1.to_string().contains("cannot update")).then_some(outcome)
    });
    assert_allowed(
        "another SA with the same ClusterRole: PUT status, ip changed",
        outcome,
    );
    assert_eq!(ingress(api)[0]["ip"], LB_IP);
}

/// hairpin's own Services: ClusterIP only, without externalIPs.
fn own_services(api: &ApiServer, token: &str) {
    let service = |name: &str, spec: Value| {
        let mut spec = spec;
        spec["selector"] = json!({"app": "hairpin-proxy"});
        spec["ports"] =
            json!([{"name": "p80", "port": 80, "targetPort": 10000, "protocol": "TCP"}]);
        // Labelled as the controller labels its Services (`hairpin-own-objects`).
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"namespace": "hairpin", "name": name,
                            "labels": {"app.kubernetes.io/managed-by": "hairpin"}},
               "spec": spec})
    };
    let create = |body: Value| {
        api.request_as(
            token,
            "POST",
            "/api/v1/namespaces/hairpin/services",
            Some(("application/json", &body)),
        )
        .expect("POST service")
    };
    let outcome = create(service("hairpin-test-ok", json!({"type": "ClusterIP"})));
    assert_allowed(
        "controller SA: create a ClusterIP Service in hairpin",
        outcome,
    );
    let outcome = create(service(
        "hairpin-test-ext",
        json!({"type": "ClusterIP", "externalIPs": ["198.51.100.9"]}),
    ));
    assert_denied_by(
        SERVICES_POLICY,
        "controller SA: create a Service with externalIPs",
        outcome,
    );
    let outcome = create(service("hairpin-test-lb", json!({"type": "LoadBalancer"})));
    assert_denied_by(
        SERVICES_POLICY,
        "controller SA: create a LoadBalancer Service",
        outcome,
    );
    let outcome = create(service("hairpin-test-np", json!({"type": "NodePort"})));
    assert_denied_by(
        SERVICES_POLICY,
        "controller SA: create a NodePort Service",
        outcome,
    );
    let path = "/api/v1/namespaces/hairpin/services/hairpin-test-ok";
    let mut svc = api.get(path).expect("the Service");
    svc["spec"]["externalIPs"] = json!(["198.51.100.9"]);
    let outcome = api
        .request_as(token, "PUT", path, Some(("application/json", &svc)))
        .expect("PUT service");
    assert_denied_by(
        SERVICES_POLICY,
        "controller SA: add externalIPs to its Service",
        outcome,
    );
    assert!(api.delete(path));
}

/// Creates by name: only hairpin's own ConfigMaps and Lease.
fn create_names(api: &ApiServer, token: &str) {
    let create = |path: &str, body: Value| {
        api.request_as(token, "POST", path, Some(("application/json", &body)))
            .expect("POST")
    };
    let config_map = |ns: &str, name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"namespace": ns, "name": name}, "data": {}})
    };
    let outcome = create(
        "/api/v1/namespaces/kube-system/configmaps",
        config_map("kube-system", "coredns-custom"),
    );
    assert_allowed("controller SA: create kube-system/coredns-custom", outcome);
    assert!(api.delete("/api/v1/namespaces/kube-system/configmaps/coredns-custom"));
    let outcome = create(
        "/api/v1/namespaces/kube-system/configmaps",
        config_map("kube-system", "kube-proxy"),
    );
    assert_denied_by(
        CREATE_POLICY,
        "controller SA: create kube-system/kube-proxy",
        outcome,
    );
    let outcome = create(
        "/api/v1/namespaces/kube-system/configmaps",
        config_map("kube-system", "hairpin-routes"),
    );
    assert_denied_by(
        CREATE_POLICY,
        "controller SA: create kube-system/hairpin-routes",
        outcome,
    );
    let outcome = create(
        "/api/v1/namespaces/hairpin/configmaps",
        config_map("hairpin", "hairpin-routes"),
    );
    assert_allowed("controller SA: create hairpin/hairpin-routes", outcome);
    assert!(api.delete("/api/v1/namespaces/hairpin/configmaps/hairpin-routes"));
    let outcome = create(
        "/api/v1/namespaces/hairpin/configmaps",
        config_map("hairpin", "other"),
    );
    assert_denied_by(
        CREATE_POLICY,
        "controller SA: create hairpin/other",
        outcome,
    );
    let lease = |name: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"namespace": "hairpin", "name": name}, "spec": {}})
    };
    let outcome = create(
        "/apis/coordination.k8s.io/v1/namespaces/hairpin/leases",
        lease("someone-elses"),
    );
    assert_denied_by(
        CREATE_POLICY,
        "controller SA: create Lease hairpin/someone-elses",
        outcome,
    );
}

/// The removal guard's patches of the controller's own objects: its finalizer and its
/// annotation only, never a label, a rule, a subject or a pod template.
fn guard_patches(api: &ApiServer, token: &str) {
    api.apply(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"namespace": "hairpin", "name": "hairpin-controller"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "hairpin-controller"}},
                 "template": {"metadata": {"labels": {"app": "hairpin-controller"}},
                              "spec": {"containers": [{"name": "c", "image": "hairpin"}]}}},
    }));
    let patch = |path: &str, body: Value| {
        api.request_as(
            token,
            "PATCH",
            path,
            Some(("application/merge-patch+json", &body)),
        )
        .expect("PATCH")
    };
    let objects = [
        "/api/v1/namespaces/hairpin/serviceaccounts/hairpin-controller",
        "/apis/apps/v1/namespaces/hairpin/deployments/hairpin-controller",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/hairpin-controller",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/hairpin-controller",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/hairpin/roles/hairpin-controller",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/hairpin/rolebindings/hairpin-controller",
    ];
    for path in objects {
        let hold = json!({"metadata": {"finalizers": ["hairpin.io/restore"],
                                       "annotations": {"hairpin.io/left-held-by-removal": "test"}}});
        assert_allowed(&format!("controller SA: hold {path}"), patch(path, hold));
        let label = json!({"metadata": {"labels": {"stolen": "yes"}}});
        assert_denied_by(
            GUARD_POLICY,
            &format!("controller SA: label {path}"),
            patch(path, label),
        );
        let release = json!({"metadata": {"finalizers": null,
                                          "annotations": {"hairpin.io/left-held-by-removal": null}}});
        assert_allowed(
            &format!("controller SA: release {path}"),
            patch(path, release),
        );
    }
    let outcome = patch(objects[1], json!({"spec": {"replicas": 5}}));
    assert_denied_by(GUARD_POLICY, "controller SA: scale its Deployment", outcome);
    let image =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "evil"}]}}}});
    let outcome = patch(objects[1], image);
    assert_denied_by(
        GUARD_POLICY,
        "controller SA: change its pod template",
        outcome,
    );
    let outcome = patch(objects[0], json!({"automountServiceAccountToken": false}));
    assert_denied_by(
        GUARD_POLICY,
        "controller SA: change its ServiceAccount",
        outcome,
    );
    let rules = api.get(objects[2]).expect("the ClusterRole")["rules"].clone();
    let fewer: Vec<Value> = rules.as_array().expect("rules")[1..].to_vec();
    let outcome = patch(objects[2], json!({"rules": fewer}));
    assert_denied_by(
        GUARD_POLICY,
        "controller SA: change its ClusterRole's rules",
        outcome,
    );
    let mut subjects = api.get(objects[3]).expect("the binding")["subjects"].clone();
    subjects
        .as_array_mut()
        .expect("subjects")
        .push(json!({"kind": "ServiceAccount", "name": "default", "namespace": "shop"}));
    let outcome = patch(objects[3], json!({"subjects": subjects}));
    assert_denied_by(
        GUARD_POLICY,
        "controller SA: bind its ClusterRole to another subject",
        outcome,
    );
    assert!(api.delete(objects[1]));
}

/// The release pair (issue 40): the account creates exactly the pair the controller makes,
/// and nothing else; it may delete it, never update it.
fn release_pair_creation(api: &ApiServer, token: &str) {
    const ROLES: &str = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
    const BINDINGS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    let send = |method: &str, path: &str, body: &Value| {
        api.request_as(token, method, path, Some(("application/json", body)))
            .expect("request")
    };
    let uid = api
        .get("/api/v1/namespaces/hairpin")
        .expect("the namespace")["metadata"]["uid"]
        .as_str()
        .expect("a uid")
        .to_owned();
    let params = hairpin_controller::removal::RemovalParams::new("hairpin", "kube-system");
    let (role, binding) = hairpin_controller::removal::release_pair(&params, &uid);
    let changed = |base: &Value, edit: &dyn Fn(&mut Value)| {
        let mut object = base.clone();
        edit(&mut object);
        object
    };
    // ClusterRoles other than the release ClusterRole (each within the account's own rights,
    // so RBAC's escalation check lets them through to the policy).
    let denied_roles = [
        (
            "another name",
            changed(&role, &|o| o["metadata"]["name"] = json!("hairpin-other")),
        ),
        (
            "other rules (read Services)",
            changed(&role, &|o| {
                o["rules"] =
                    json!([{"apiGroups": [""], "resources": ["services"], "verbs": ["get"]}]);
            }),
        ),
        (
            "one rule of the two",
            changed(&role, &|o| {
                o["rules"].as_array_mut().expect("rules").pop();
            }),
        ),
        (
            "a finalizer",
            changed(&role, &|o| {
                o["metadata"]["finalizers"] = json!(["hairpin.io/restore"])
            }),
        ),
        (
            "another owner (the ClusterRole hairpin-controller)",
            changed(&role, &|o| {
                let owner = api
                    .get("/apis/rbac.authorization.k8s.io/v1/clusterroles/hairpin-controller")
                    .expect("the ClusterRole");
                o["metadata"]["ownerReferences"] = json!([{"apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole", "name": "hairpin-controller",
                    "uid": owner["metadata"]["uid"]}]);
            }),
        ),
    ];
    for (what, object) in &denied_roles {
        assert_denied_by(
            RELEASE_POLICY,
            &format!("controller SA: create a ClusterRole with {what}"),
            send("POST", ROLES, object),
        );
    }
    assert_allowed(
        "controller SA: create the release ClusterRole",
        send("POST", ROLES, &role),
    );
    let denied_bindings = [
        (
            "another subject",
            changed(&binding, &|o| {
                o["subjects"] =
                    json!([{"kind": "ServiceAccount", "name": "default", "namespace": "shop"}]);
            }),
        ),
        (
            "a second subject",
            changed(&binding, &|o| {
                o["subjects"].as_array_mut().expect("subjects").push(
                    json!({"kind": "ServiceAccount", "name": "default", "namespace": "shop"}),
                );
            }),
        ),
        (
            "another roleRef (hairpin-controller)",
            changed(&binding, &|o| {
                o["roleRef"]["name"] = json!("hairpin-controller")
            }),
        ),
        (
            "another name",
            changed(&binding, &|o| {
                o["metadata"]["name"] = json!("hairpin-other")
            }),
        ),
    ];
    for (what, object) in &denied_bindings {
        assert_denied_by(
            RELEASE_POLICY,
            &format!("controller SA: create a ClusterRoleBinding with {what}"),
            send("POST", BINDINGS, object),
        );
    }
    assert_allowed(
        "controller SA: create the release ClusterRoleBinding",
        send("POST", BINDINGS, &binding),
    );
    // Never updated: RBAC grants no update or patch of them.
    let more = json!({"rules": [{"apiGroups": [""], "resources": ["services"], "verbs": ["get"]}]});
    let (code, message) = show(
        "controller SA: patch the release ClusterRole",
        api.request_as(
            token,
            "PATCH",
            &format!("{ROLES}/hairpin-release"),
            Some(("application/merge-patch+json", &more)),
        )
        .expect("PATCH"),
    );
    assert_eq!(code, 403, "{message}");
    for path in [
        format!("{BINDINGS}/hairpin-release"),
        format!("{ROLES}/hairpin-release"),
    ] {
        assert_allowed(
            &format!("controller SA: delete {path}"),
            api.request_as(token, "DELETE", &path, None)
                .expect("DELETE"),
        );
    }
}

/// `hairpin doctor` (as the admin, from this machine; the host is a closed loopback port, the
/// cluster checks are what matters) reports the status policy.
fn doctor_text(api: &ApiServer) -> String {
    let closed = hairpin_testkit::free_addr();
    let out = support::hairpin_command()
        .args(["doctor", "127.0.0.1", "--port", &closed.port().to_string()])
        .args(["--timeout", "2s", "--kubeconfig"])
        .arg(api.admin_kubeconfig())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("run hairpin doctor");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn doctor_reports_the_policy(api: &ApiServer) {
    let report = doctor_text(api);
    let line = report
        .lines()
        .find(|l| l.trim_start().starts_with("status policy"))
        .unwrap_or_else(|| panic!("no status policy line:\n{report}"));
    println!("doctor, policy in force: {}", line.trim());
    assert!(
        line.contains("hairpin-status-ipmode-only in force (binding hairpin-status-ipmode-only: Deny; failurePolicy Fail)"),
        "{report}"
    );
    assert!(!report.contains("warning: admission policy"), "{report}");

    let binding = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/hairpin-status-ipmode-only";
    let saved = api.get(binding).expect("the binding");
    assert!(api.delete(binding));
    let report = doctor_text(api);
    let warning = report
        .lines()
        .find(|l| l.contains("warning: admission policy"))
        .unwrap_or_else(|| panic!("no warning:\n{report}"));
    println!("doctor, binding deleted: {}", warning.trim());
    assert!(
        warning.contains("hairpin-status-ipmode-only present but not bound"),
        "{report}"
    );
    api.apply(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "hairpin-status-ipmode-only"},
        "spec": saved["spec"],
    }));
}

#[test]
fn the_controller_account_may_change_ip_mode_and_nothing_else() {
    if kube::skip_without("the_controller_account_may_change_ip_mode_and_nothing_else") {
        return;
    }
    let api = ApiServer::shared().expect("start kube-apiserver");
    // Its ValidatingAdmissionPolicy status controller type-checks the policies (the API
    // server itself compiles them at creation: a policy that does not compile is refused).
    let _kcm = api
        .start_controller_manager(&["validatingadmissionpolicy-status-controller"])
        .expect("start kube-controller-manager");
    seed(api);
    for name in [
        POLICY,
        SERVICES_POLICY,
        CREATE_POLICY,
        GUARD_POLICY,
        RELEASE_POLICY,
    ] {
        assert_type_checked(api, name);
    }
    let token = api.service_account_token("hairpin", "hairpin-controller");
    let started = Instant::now();
    wait_enforced(api, &token);
    println!("policies enforced {:?} after the token", started.elapsed());
    ip_mode_changes_are_allowed(api, &token);
    proxy_on_a_vip_marked_service_is_denied(api, &token);
    other_status_changes_are_denied(api, &token);
    own_services(api, &token);
    create_names(api, &token);
    guard_patches(api, &token);
    release_pair_creation(api, &token);
    others_are_not_affected(api);
    doctor_reports_the_policy(api);
}

/// The status policy's VIP marks are the planner's (`hairpin_planner::delivery`): every
/// annotation prefix, class and finalizer, and Cilium's condition, appear in the chart.
#[test]
fn the_status_policy_knows_every_vip_mark_the_planner_knows() {
    use hairpin_planner::delivery::{
        CILIUM_IPAM_CONDITION, SERVICELB_FINALIZERS, VIP_ANNOTATIONS, VIP_CLASSES,
    };
    let chart = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../charts/hairpin/templates/admission-policy.yaml"
    );
    let policy = std::fs::read_to_string(chart).expect("the chart's policy");
    let quoted = |s: &str| format!("'{s}'");
    let marks = VIP_ANNOTATIONS
        .iter()
        .chain(VIP_CLASSES)
        .chain(SERVICELB_FINALIZERS)
        .map(|(mark, _)| *mark)
        .chain([CILIUM_IPAM_CONDITION]);
    for mark in marks {
        assert!(policy.contains(&quoted(mark)), "{mark} is not in {chart}");
    }
}
