//! Issue 40: a controller that cannot restore on its removal does not hold the deletion past
//! its bound. The fake API server for the fault the real one cannot be made to show: an API
//! that does not answer (the CoreDNS ConfigMap read hangs). The restore is cut at the
//! deadline, every object the guard held is released, and the note (the Event's and the last
//! log line's) says what may be left and the command that removes it.

use std::time::{Duration, Instant};

use hairpin_controller::Metrics;
use hairpin_controller::removal::{
    RESTORE_FINALIZER, RemovalParams, arm, removal, restore_and_release,
};
use hairpin_controller::report::Events;
use hairpin_fake_apiserver::{FakeApiServer, Fault, FaultKind, ResourceType};
use hairpin_planner::PlannerConfig;
use serde_json::{Value, json};

fn object(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Value {
    let mut metadata = json!({"name": name});
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    }
    json!({"apiVersion": api_version, "kind": kind, "metadata": metadata})
}

const RBAC: &str = "rbac.authorization.k8s.io/v1";

/// The objects the guard holds, as the chart names them.
fn held() -> Vec<(
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static str,
)> {
    vec![
        (
            "apps/v1",
            "Deployment",
            Some("hairpin"),
            "hairpin-controller",
        ),
        (
            "v1",
            "ServiceAccount",
            Some("hairpin"),
            "hairpin-controller",
        ),
        (RBAC, "ClusterRole", None, "hairpin-controller"),
        (RBAC, "ClusterRoleBinding", None, "hairpin-controller"),
        (RBAC, "Role", Some("hairpin"), "hairpin-controller"),
        (RBAC, "RoleBinding", Some("hairpin"), "hairpin-controller"),
        (RBAC, "Role", Some("kube-system"), "hairpin-coredns"),
        (RBAC, "RoleBinding", Some("kube-system"), "hairpin-coredns"),
    ]
}

#[tokio::test]
async fn a_restore_that_hangs_is_cut_at_the_deadline_and_everything_released() {
    let fake = FakeApiServer::start().await;
    fake.create_namespace("hairpin");
    fake.create_namespace("kube-system");
    fake.register(ResourceType::new(
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
    ));
    for (plural, kind, namespaced) in [
        ("clusterroles", "ClusterRole", false),
        ("clusterrolebindings", "ClusterRoleBinding", false),
        ("roles", "Role", true),
        ("rolebindings", "RoleBinding", true),
    ] {
        fake.register(ResourceType::new(
            "rbac.authorization.k8s.io",
            "v1",
            plural,
            kind,
            namespaced,
        ));
    }
    for (api_version, kind, ns, name) in held() {
        fake.apply(object(api_version, kind, ns, name));
    }
    fake.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "kube-system", "name": "coredns"},
        "data": {"Corefile": ".:53 {\n    forward . /etc/resolv.conf\n}\n"}}));
    let client = fake.client();
    let params = RemovalParams {
        deadline: Duration::from_secs(1),
        ..RemovalParams::new("hairpin", "kube-system")
    };
    let mut armed = arm(&client, &params).await.expect("arm");
    assert!(armed.is_armed());
    for (api_version, kind, ns, name) in held() {
        let stored = fake.get(api_version, kind, ns, name).expect("stored");
        assert_eq!(
            stored["metadata"]["finalizers"],
            json!([RESTORE_FINALIZER]),
            "{kind} {name} is held"
        );
    }
    assert_eq!(
        removal(&client, &params, &mut armed).await,
        None,
        "nothing deleted: a restart"
    );

    // The Deployment is deleted (its finalizer holds it), and the API stops answering the
    // CoreDNS ConfigMap.
    let mut deployment = fake
        .get(
            "apps/v1",
            "Deployment",
            Some("hairpin"),
            "hairpin-controller",
        )
        .expect("deployment");
    deployment["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    fake.apply(deployment);
    let reason = removal(&client, &params, &mut armed)
        .await
        .expect("a removal");
    assert!(
        reason.contains("Deployment hairpin/hairpin-controller is being deleted"),
        "{reason}"
    );
    fake.inject(Fault {
        method: Some("GET".into()),
        path_contains: "/configmaps/coredns".into(),
        remaining: 100,
        kind: FaultKind::Delay(Duration::from_secs(120)),
    });
    let planner = PlannerConfig::default();
    let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
    let events = Events::new(client.clone(), "controller-0", metrics);
    let started = Instant::now();
    let outcome = restore_and_release(&client, &planner, &params, &armed, &events, reason).await;
    let took = started.elapsed();
    assert!(outcome.report.is_none(), "the restore was cut");
    assert!(
        took < Duration::from_secs(10),
        "not held past the bound: {took:?}"
    );
    let note = outcome.left_note.expect("a note of what is left");
    assert!(note.contains("did not finish within 1s"), "{note}");
    assert!(
        note.contains("hairpin uninstall --namespace hairpin"),
        "{note}"
    );
    for (api_version, kind, ns, name) in held() {
        let stored = fake.get(api_version, kind, ns, name);
        assert!(
            stored.is_none_or(|o| o["metadata"]["finalizers"] == json!([])
                || o["metadata"]["finalizers"].is_null()),
            "{kind} {name} released"
        );
    }
    println!(
        "restore hanging: cut at the 1s deadline, everything released {:.2}s after the removal was seen",
        took.as_secs_f64()
    );
}
