//! The node agents' reports pinned by the API server (issue 45 item 1): the chart rendered
//! with `nodeAgent.enabled` (Helm's own engine, the wheel `scripts/render-manifest.sh`
//! installs) on a real kube-apiserver (v1.31.14). RBAC cannot limit `create` by name, so the
//! policy `hairpin-node-probe-leases` holds the node agent's ServiceAccount to Leases
//! `hairpin-node-<node>` held by that node, never the controller's election Lease, and, with a
//! token bound to a pod on a node (which names the node, `authentication.kubernetes.io/
//! node-name`, from 1.30), to its own node's. Every write is made with the ServiceAccount's
//! own token and printed as a row (`--nocapture`).

use std::time::{Duration, Instant};

use hairpin_testkit::helm;
use hairpin_testkit::kube::{self, ApiServer};
use serde_json::{Value, json};

const POLICY: &str = "hairpin-node-probe-leases";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/hairpin/leases";

/// A node's Lease `name` held by `holder`.
fn lease(name: &str, holder: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "hairpin",
                     "labels": {"app.kubernetes.io/component": "node-probe"},
                     "annotations": {"hairpin.io/native-probes": "{}"}},
        "spec": {"holderIdentity": holder, "renewTime": "2026-12-06T12:00:00.000000Z"}
    })
}

struct Table(Vec<String>);

impl Table {
    fn row(&mut self, what: &str, (code, body): &(u16, Value)) {
        let message = body["message"].as_str().unwrap_or_default();
        let row = format!("{what}: {code} {message}");
        println!("{row}");
        self.0.push(row);
    }

    fn admitted(&mut self, what: &str, outcome: (u16, Value)) {
        self.row(what, &outcome);
        assert!((200..300).contains(&outcome.0), "{what}: {outcome:?}");
    }

    fn denied(&mut self, what: &str, outcome: (u16, Value)) {
        self.row(what, &outcome);
        assert_eq!(outcome.0, 403, "{what}: {outcome:?}");
        let message = outcome.1["message"].as_str().unwrap_or_default();
        assert!(message.contains(POLICY), "{what}: {message}");
    }
}

/// Creates (POST) `object`, or replaces it (PUT) under its resourceVersion when it exists,
/// as `token`.
fn write_as(api: &ApiServer, token: &str, mut object: Value) -> (u16, Value) {
    let name = object["metadata"]["name"].as_str().unwrap().to_owned();
    let path = format!("{LEASES}/{name}");
    if let Some(current) = api.get(&path) {
        object["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        api.request_as(token, "PUT", &path, Some(("application/json", &object)))
            .expect("PUT")
    } else {
        api.request_as(token, "POST", LEASES, Some(("application/json", &object)))
            .expect("POST")
    }
}

/// A token of the node agent's ServiceAccount bound to a pod on `node` (as the kubelet mounts
/// it): the API server adds the node's name to its user info.
fn pod_bound_token(api: &ApiServer, node: &str) -> String {
    api.apply(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}));
    let pod = api.apply(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "hairpin", "name": format!("agent-{node}")},
        "spec": {"nodeName": node, "serviceAccountName": "hairpin-node-agent",
                 "automountServiceAccountToken": false,
                 "containers": [{"name": "agent", "image": "hairpin"}]}
    }));
    let answer = api.request_ok(
        "POST",
        "/api/v1/namespaces/hairpin/serviceaccounts/hairpin-node-agent/token",
        Some((
            "application/json",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600, "boundObjectRef": {
                    "apiVersion": "v1", "kind": "Pod",
                    "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}}}),
        )),
    );
    answer["status"]["token"]
        .as_str()
        .expect("a token")
        .to_owned()
}

/// The API server's type check of the policy caught up with its generation and found nothing.
fn assert_type_checked(api: &ApiServer) {
    let path =
        format!("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{POLICY}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let policy = loop {
        let policy = api.get(&path).expect("the policy");
        if policy["status"]["observedGeneration"] == policy["metadata"]["generation"] {
            break policy;
        }
        assert!(Instant::now() < deadline, "{POLICY}: not type-checked");
        std::thread::sleep(Duration::from_millis(200));
    };
    let warnings = &policy["status"]["typeChecking"]["expressionWarnings"];
    assert!(
        warnings.as_array().is_none_or(Vec::is_empty),
        "{POLICY}: the API server's type check: {warnings}"
    );
    println!("{POLICY}: type-checked by the API server, no warning");
}

#[test]
fn the_node_agents_write_only_their_own_nodes_lease() {
    if kube::skip_without("the_node_agents_write_only_their_own_nodes_lease") {
        return;
    }
    let Some(objects) = helm::render(
        "the_node_agents_write_only_their_own_nodes_lease",
        &helm::chart(),
        &json!({"nodeAgent": {"enabled": true}}),
    ) else {
        return;
    };
    let api = ApiServer::start().expect("start kube-apiserver");
    // Its ValidatingAdmissionPolicy status controller type-checks the policy.
    let _kcm = api
        .start_controller_manager(&["validatingadmissionpolicy-status-controller"])
        .expect("start kube-controller-manager");
    api.ensure_namespace("hairpin");
    for object in &objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        if !["Deployment", "DaemonSet", "PodDisruptionBudget"].contains(&kind) {
            api.apply(object);
        }
    }
    assert!(
        objects
            .iter()
            .any(|o| o["kind"] == "ValidatingAdmissionPolicy" && o["metadata"]["name"] == POLICY),
        "the chart renders {POLICY} with nodeAgent.enabled"
    );
    assert_type_checked(&api);
    let token = api.service_account_token("hairpin", "hairpin-node-agent");
    // The controller's election Lease, as the controller made it.
    api.apply(&lease("hairpin-controller", "controller-0"));
    // The policy is loaded a moment after it is created: a denied write is retried until the
    // policy answers it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, body) = write_as(&api, &token, lease("hairpin-controller", "node-a"));
        if code == 403 && body["message"].as_str().unwrap_or("").contains(POLICY) {
            break;
        }
        api.apply(&lease("hairpin-controller", "controller-0"));
        assert!(
            Instant::now() < deadline,
            "the policy is not enforced: {code} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut t = Table(Vec::new());
    t.admitted(
        "create hairpin-node-node-a held by node-a",
        write_as(&api, &token, lease("hairpin-node-node-a", "node-a")),
    );
    t.admitted(
        "renew hairpin-node-node-a",
        write_as(&api, &token, lease("hairpin-node-node-a", "node-a")),
    );
    t.admitted(
        "patch hairpin-node-node-a's annotation",
        api.request_as(
            &token,
            "PATCH",
            &format!("{LEASES}/hairpin-node-node-a"),
            Some((
                "application/merge-patch+json",
                &json!({"metadata": {"annotations": {"hairpin.io/native-probes": "{\"x\":1}"}}}),
            )),
        )
        .expect("PATCH"),
    );
    t.denied(
        "update the controller's Lease hairpin-controller",
        write_as(&api, &token, lease("hairpin-controller", "node-a")),
    );
    t.denied(
        "create hairpin-node-node-b held by node-a",
        write_as(&api, &token, lease("hairpin-node-node-b", "node-a")),
    );
    t.denied(
        "create another-lease held by node-a",
        write_as(&api, &token, lease("another-lease", "node-a")),
    );
    t.denied(
        "take over hairpin-node-node-a for node-b",
        write_as(&api, &token, lease("hairpin-node-node-a", "node-b")),
    );
    // RBAC: the agent reads its own ConfigMaps, not others; it deletes no Lease.
    let (code, _) = api
        .request_as(
            &token,
            "DELETE",
            &format!("{LEASES}/hairpin-node-node-a"),
            None,
        )
        .expect("DELETE");
    println!("delete hairpin-node-node-a: {code}");
    assert_eq!(code, 403, "no delete of Leases");
    let (code, _) = api
        .request_as(
            &token,
            "GET",
            "/api/v1/namespaces/hairpin/configmaps/hairpin-native",
            None,
        )
        .expect("GET");
    println!("get ConfigMap hairpin-native: {code} (404: allowed, not created yet)");
    assert_eq!(code, 404, "the agent reads hairpin's native record");
    let (code, _) = api
        .request_as(
            &token,
            "GET",
            "/api/v1/namespaces/hairpin/configmaps/hairpin-routes",
            None,
        )
        .expect("GET");
    assert_eq!(code, 403, "the agent reads no other ConfigMap");

    // A token bound to a pod on node-b names node-b: only node-b's Lease.
    let bound = pod_bound_token(&api, "node-b");
    t.admitted(
        "pod-bound token of node-b: create hairpin-node-node-b",
        write_as(&api, &bound, lease("hairpin-node-node-b", "node-b")),
    );
    t.denied(
        "pod-bound token of node-b: renew hairpin-node-node-a",
        write_as(&api, &bound, lease("hairpin-node-node-a", "node-a")),
    );
    t.denied(
        "pod-bound token of node-b: create hairpin-node-node-c held by node-c",
        write_as(&api, &bound, lease("hairpin-node-node-c", "node-c")),
    );
    // Anyone else is not matched: the admin writes any Lease.
    api.apply(&lease("hairpin-node-node-c", "node-x"));
    println!("{} rows", t.0.len());
}
