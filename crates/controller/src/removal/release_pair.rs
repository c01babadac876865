//! The release pair: the ClusterRole and ClusterRoleBinding that authorize a removal's last releases.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, PostParams};
use serde_json::json;

use super::RemovalParams;
use crate::Error;

/// The release pair, ClusterRole and ClusterRoleBinding `<release>-release` (not in the
/// manifest): they grant the controller's ServiceAccount `get` and `patch` on the ClusterRole
/// and ClusterRoleBinding it holds and on itself, by name, so that the last releases of a
/// removal are authorized by something that is not held. Owned by the controller's Namespace
/// (cluster-scoped owner, cluster-scoped dependents): the garbage collector deletes them once
/// the namespace is gone, which is after the ServiceAccount, released last. No finalizer.
/// (The ClusterRole, then the ClusterRoleBinding, as JSON.)
pub fn release_pair(
    p: &RemovalParams,
    namespace_uid: &str,
) -> (serde_json::Value, serde_json::Value) {
    let name = p.release_name();
    let owner = json!([{"apiVersion": "v1", "kind": "Namespace", "name": p.namespace, "uid": namespace_uid}]);
    let labels =
        json!({"app.kubernetes.io/name": "hairpin", "app.kubernetes.io/component": "release"});
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels, "ownerReferences": owner},
        "rules": [
            {"apiGroups": ["rbac.authorization.k8s.io"],
             "resources": ["clusterroles", "clusterrolebindings"],
             "resourceNames": [p.rbac_name], "verbs": ["get", "patch"]},
            {"apiGroups": [""], "resources": ["serviceaccounts"],
             "resourceNames": [p.rbac_name], "verbs": ["get", "patch"]},
        ],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": labels, "ownerReferences": owner},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": p.rbac_name, "namespace": p.namespace}],
    });
    (role, binding)
}

/// Makes the release pair, or finds it (owned by this namespace, not being deleted); one
/// owned by an earlier namespace of the same name is deleted and made again.
///
/// # Errors
/// An API error: no rights (an older chart's RBAC), or the admission policy refused it.
pub async fn ensure_release_pair(client: &kube::Client, p: &RemovalParams) -> Result<(), Error> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = namespaces
        .get(&p.namespace)
        .await
        .map_err(|e| Error::kube(format!("get namespace {}", p.namespace), e))?;
    let uid = namespace.metadata.uid.unwrap_or_default();
    let (role, binding) = release_pair(p, &uid);
    let name = p.release_name();
    for (object, resource) in [
        (role, ApiResource::erase::<ClusterRole>(&())),
        (binding, ApiResource::erase::<ClusterRoleBinding>(&())),
    ] {
        let what = format!("{} {name}", resource.kind);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let found = api
            .get_opt(&name)
            .await
            .map_err(|e| Error::kube(format!("get {what}"), e))?;
        if let Some(found) = found {
            let ours = found.metadata.deletion_timestamp.is_none()
                && found
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == uid);
            if ours {
                continue;
            }
            api.delete(&name, &Default::default())
                .await
                .map_err(|e| Error::kube(format!("delete the stale {what}"), e))?;
        }
        let object: DynamicObject = serde_json::from_value(object)
            .map_err(|e| Error::Config(format!("release pair: {e}")))?;
        api.create(&PostParams::default(), &object)
            .await
            .map_err(|e| Error::kube(format!("create {what}"), e))?;
    }
    Ok(())
}

/// Deletes the release pair (`hairpin uninstall`, after its releases); the errors but 404 and
/// 403 (an older chart: none was made).
pub async fn delete_release_pair(client: &kube::Client, p: &RemovalParams) -> Vec<String> {
    let name = p.release_name();
    let mut errors = Vec::new();
    for resource in [
        ApiResource::erase::<ClusterRoleBinding>(&()),
        ApiResource::erase::<ClusterRole>(&()),
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        match api.delete(&name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 403 || status.code == 404 => {}
            Err(err) => errors.push(format!("delete {} {name}: {err}", resource.kind)),
        }
    }
    errors
}

/// Whether the release pair made at start still grants (both there, neither being deleted).
pub(super) async fn release_pair_stands(client: &kube::Client, p: &RemovalParams) -> bool {
    let name = p.release_name();
    let role: Api<ClusterRole> = Api::all(client.clone());
    let binding: Api<ClusterRoleBinding> = Api::all(client.clone());
    matches!(role.get_opt(&name).await, Ok(Some(r)) if r.metadata.deletion_timestamp.is_none())
        && matches!(binding.get_opt(&name).await, Ok(Some(b)) if b.metadata.deletion_timestamp.is_none())
}
