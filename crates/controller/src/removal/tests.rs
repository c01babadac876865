use super::*;

#[test]
fn the_leftover_command_names_each_object_with_its_namespace() {
    let command = leftover_command(&[
        "ClusterRole hairpin-controller".to_owned(),
        "Role kube-system/hairpin-coredns".to_owned(),
    ]);
    assert_eq!(
        command,
        "kubectl patch clusterrole hairpin-controller --type=json -p '[{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}]' && kubectl -n kube-system patch role hairpin-coredns --type=json -p '[{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}]'"
    );
}

#[test]
fn the_note_says_what_is_left_and_how_to_remove_it_or_nothing() {
    let planner = PlannerConfig::default();
    assert_eq!(left_note("r", &[], &[], &planner), None);
    let missing = not_restored(None, Duration::from_secs(20));
    let note = left_note("r", &missing, &[], &planner).expect("a note");
    assert!(note.contains("did not finish within 20s"), "{note}");
    assert!(
        note.contains("hairpin uninstall --namespace hairpin"),
        "{note}"
    );
    let held = ["ClusterRoleBinding hairpin-controller".to_owned()];
    let note = left_note("r", &[], &held, &planner).expect("a note");
    assert!(!note.contains("hairpin uninstall"), "{note}");
    assert!(
        note.contains("kubectl patch clusterrolebinding hairpin-controller"),
        "{note}"
    );
}

#[test]
fn the_release_pair_grants_the_last_releases_to_the_account_owned_by_its_namespace() {
    let mut p = RemovalParams::new("hp", "kube-system");
    assert_eq!(p.release_name(), "hairpin-release");
    let (role, binding) = release_pair(&p, "ns-uid");
    assert_eq!(role["metadata"]["name"], "hairpin-release");
    assert_eq!(
        role["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Namespace", "name": "hp", "uid": "ns-uid"}])
    );
    assert!(role["metadata"]["finalizers"].is_null());
    assert_eq!(
        role["rules"],
        json!([
            {"apiGroups": ["rbac.authorization.k8s.io"],
             "resources": ["clusterroles", "clusterrolebindings"],
             "resourceNames": ["hairpin-controller"], "verbs": ["get", "patch"]},
            {"apiGroups": [""], "resources": ["serviceaccounts"],
             "resourceNames": ["hairpin-controller"], "verbs": ["get", "patch"]},
        ])
    );
    assert_eq!(binding["roleRef"]["name"], "hairpin-release");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "hairpin-controller", "namespace": "hp"}])
    );
    assert_eq!(
        binding["metadata"]["ownerReferences"],
        role["metadata"]["ownerReferences"]
    );
    p.rbac_name = "edge".into();
    assert_eq!(p.release_name(), "edge-release");
}

#[test]
fn a_namespace_with_a_newline_is_escaped_in_the_command() {
    let planner = PlannerConfig {
        namespace: "hair\npin".into(),
        ..PlannerConfig::default()
    };
    assert!(!cleanup_command(&planner).contains('\n'));
}
