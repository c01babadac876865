//! `metadata.managedFields` of non-apply writes (create, update, merge patch), as
//! kube-apiserver's field manager keeps them: the writer is the request's `fieldManager`, else
//! its `User-Agent` up to the first `/`; each write gives its manager an `Update` entry (per
//! API version and subresource) owning the fields the write changed, takes those fields away
//! from every other entry, drops entries left owning nothing, and stamps the writer's entry
//! with the time (whole seconds). Server-side apply is not served by the fake.
//!
//! One simplification: every list is owned as a whole (`f:ports: {}`), where the real server
//! tracks the items of keyed lists (`k:{"port":80}`) separately. Who changed an object last,
//! and which top-level fields they own, come out the same.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// A field path, as `f:` keys from the object's root.
type Path = Vec<String>;

/// Fields no manager owns: identity, bookkeeping and the managed fields themselves.
fn unowned(path: &[String]) -> bool {
    match path {
        [root] => root == "apiVersion" || root == "kind",
        [meta, field, ..] if meta == "metadata" => matches!(
            field.as_str(),
            "managedFields"
                | "resourceVersion"
                | "uid"
                | "creationTimestamp"
                | "generation"
                | "selfLink"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
                | "name"
                | "namespace"
        ),
        _ => false,
    }
}

/// Every leaf of `value` (a list or scalar is one leaf), with its value.
fn leaves<'a>(value: &'a Value, prefix: &mut Path, out: &mut Vec<(Path, &'a Value)>) {
    match value {
        Value::Object(map) if !map.is_empty() || prefix.is_empty() => {
            for (key, child) in map {
                prefix.push(key.clone());
                if !unowned(prefix) {
                    leaves(child, prefix, out);
                }
                prefix.pop();
            }
        }
        _ => out.push((prefix.clone(), value)),
    }
}

fn lookup<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter()
        .try_fold(value, |v, key| v.as_object()?.get(key))
}

/// The fieldsV1 set of an entry, as paths.
fn paths_of(fields: &Value) -> BTreeSet<Path> {
    fn walk(value: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
        let Some(map) = value.as_object() else {
            return;
        };
        let children: Vec<_> = map.iter().filter(|(k, _)| k.starts_with("f:")).collect();
        if children.is_empty() {
            out.insert(prefix.clone());
            return;
        }
        for (key, child) in children {
            prefix.push(key["f:".len()..].to_owned());
            walk(child, prefix, out);
            prefix.pop();
        }
    }
    let mut out = BTreeSet::new();
    if fields.as_object().is_some_and(|m| !m.is_empty()) {
        walk(fields, &mut Vec::new(), &mut out);
    }
    out
}

/// Paths as fieldsV1.
fn fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in paths {
        let mut node = &mut root;
        for key in path {
            node = node
                .entry(format!("f:{key}"))
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("fieldsV1 nodes are objects");
        }
    }
    Value::Object(root)
}

/// True when `owned` is `changed` or lies under or above it.
fn overlaps(owned: &[String], changed: &[String]) -> bool {
    let n = owned.len().min(changed.len());
    owned[..n] == changed[..n]
}

/// The manager of a request: `fieldManager`, else the User-Agent's first `/`-separated part.
pub(crate) fn manager(field_manager: Option<&str>, user_agent: &str) -> String {
    match field_manager.filter(|m| !m.is_empty()) {
        Some(manager) => manager.to_owned(),
        None => user_agent.split('/').next().unwrap_or_default().to_owned(),
    }
}

/// Updates `object`'s managedFields for a write by `manager` that turned `old` (none on
/// create) into `object`. `subresource` is `status` for a write to `/status`.
pub(crate) fn track(old: Option<&Value>, object: &mut Value, manager: &str, subresource: &str) {
    let mut new_leaves = Vec::new();
    leaves(object, &mut Vec::new(), &mut new_leaves);
    let mut changed: BTreeSet<Path> = new_leaves
        .iter()
        .filter(|(path, value)| old.and_then(|o| lookup(o, path)) != Some(value))
        .map(|(path, _)| path.clone())
        .collect();
    if let Some(old) = old {
        let mut old_leaves = Vec::new();
        leaves(old, &mut Vec::new(), &mut old_leaves);
        changed.extend(
            old_leaves
                .into_iter()
                .filter(|(path, _)| lookup(object, path).is_none())
                .map(|(path, _)| path),
        );
    }
    let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
    let mut entries: Vec<Value> = object["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut mine: BTreeSet<Path> = BTreeSet::new();
    let is_mine = |e: &Value| {
        e["manager"] == manager
            && e["operation"] == "Update"
            && e["apiVersion"] == api_version.as_str()
            && e["subresource"].as_str().unwrap_or_default() == subresource
    };
    entries.retain_mut(|entry| {
        let owned = paths_of(&entry["fieldsV1"]);
        if is_mine(entry) {
            mine = owned;
            return false;
        }
        let kept: BTreeSet<Path> = owned
            .into_iter()
            .filter(|p| !changed.iter().any(|c| overlaps(p, c)))
            .collect();
        entry["fieldsV1"] = fields_v1(&kept);
        !kept.is_empty()
    });
    let existing = object.clone();
    mine.retain(|p| lookup(&existing, p).is_some() && !changed.iter().any(|c| overlaps(p, c)));
    mine.extend(
        changed
            .iter()
            .filter(|c| lookup(&existing, c).is_some())
            .cloned(),
    );
    if !mine.is_empty() {
        let mut entry = serde_json::json!({
            "manager": manager,
            "operation": "Update",
            "apiVersion": api_version,
            "time": now(),
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(&mine),
        });
        if !subresource.is_empty() {
            entry["subresource"] = subresource.into();
        }
        entries.push(entry);
    }
    // The real server's order: by operation (Apply first), then time, then manager.
    entries.sort_by(|a, b| {
        let key = |e: &Value| {
            (
                e["operation"] != "Apply",
                e["time"].as_str().unwrap_or_default().to_owned(),
                e["manager"].as_str().unwrap_or_default().to_owned(),
            )
        };
        key(a).cmp(&key(b))
    });
    if entries.is_empty() {
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
    } else {
        object["metadata"]["managedFields"] = Value::Array(entries);
    }
}

/// An update or patch that does not send managedFields keeps the stored ones.
pub(crate) fn carry_over(current: &Value, object: &mut Value) {
    let sent = &object["metadata"]["managedFields"];
    if sent.is_null()
        && let Some(stored) = current["metadata"].get("managedFields")
    {
        object["metadata"]["managedFields"] = stored.clone();
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_last_writer_owns_what_it_changed_and_the_others_lose_it() {
        let mut created = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"k": "v", "j": "w"}});
        track(None, &mut created, "hairpin", "");
        let entries = created["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(
            entries[0]["fieldsV1"],
            json!({"f:data": {"f:j": {}, "f:k": {}}, "f:metadata": {"f:labels": {"f:x": {}}}})
        );

        let mut updated = created.clone();
        updated["data"]["k"] = "other".into();
        track(Some(&created), &mut updated, "kubectl-edit", "");
        let entries = updated["metadata"]["managedFields"].as_array().unwrap();
        let by = |m: &str| entries.iter().find(|e| e["manager"] == m).unwrap().clone();
        assert_eq!(
            by("kubectl-edit")["fieldsV1"],
            json!({"f:data": {"f:k": {}}})
        );
        assert_eq!(
            by("hairpin")["fieldsV1"],
            json!({"f:data": {"f:j": {}}, "f:metadata": {"f:labels": {"f:x": {}}}})
        );

        // Taking every field of a manager removes its entry.
        let mut again = updated.clone();
        again["data"]["j"] = "x".into();
        again["metadata"]["labels"]["x"] = "2".into();
        track(Some(&updated), &mut again, "kubectl-edit", "");
        let entries = again["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0]["manager"], "kubectl-edit");
    }

    #[test]
    fn the_manager_is_the_field_manager_else_the_user_agent_prefix() {
        assert_eq!(manager(Some("hairpin"), "kubectl/v1.31.0"), "hairpin");
        assert_eq!(manager(None, "kubectl/v1.31.0 (linux/amd64)"), "kubectl");
        assert_eq!(manager(Some(""), "kube-rs"), "kube-rs");
    }
}
