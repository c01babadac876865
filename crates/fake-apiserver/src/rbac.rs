//! RBAC-like authorization, off unless a test asks for it: requests are then allowed only by
//! the grants given, as kube-apiserver's RBAC authorizer allows a ServiceAccount bound to
//! exactly those rules, and every other one is answered 403 `Forbidden` with the real
//! server's message.

use hyper::Method;
use serde_json::Value;

use super::status_body;

/// The user every denial names (the fake has no authentication).
pub(crate) const USER: &str = "system:serviceaccount:hairpin:hairpin";

/// One RBAC `PolicyRule`, with where it is bound: a Role's rule applies in its namespace only,
/// a ClusterRole bound by a ClusterRoleBinding everywhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The Role's namespace; `None` for a ClusterRole bound cluster-wide.
    pub namespace: Option<String>,
    /// API group (`""` for the core group).
    pub group: String,
    /// Resource (plural), `name/subresource` for a subresource (`services/status`).
    pub resource: String,
    /// Verbs: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verbs: Vec<String>,
    /// `resourceNames`: when not empty, only requests naming one of these objects.
    pub names: Vec<String>,
}

impl Grant {
    /// A Role's rule in `namespace`: `verbs` on `group`/`resource`, limited to `names` when
    /// there are any.
    pub fn namespaced(
        namespace: &str,
        group: &str,
        resource: &str,
        verbs: &[&str],
        names: &[&str],
    ) -> Self {
        Self {
            namespace: Some(namespace.to_owned()),
            ..Self::cluster_wide(group, resource, verbs, names)
        }
    }

    /// A ClusterRole's rule, bound cluster-wide.
    pub fn cluster_wide(group: &str, resource: &str, verbs: &[&str], names: &[&str]) -> Self {
        Self {
            namespace: None,
            group: group.to_owned(),
            resource: resource.to_owned(),
            verbs: verbs.iter().map(|&v| v.to_owned()).collect(),
            names: names.iter().map(|&n| n.to_owned()).collect(),
        }
    }

    fn allows(&self, request: &Attributes<'_>) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| request.namespace == Some(ns))
            && self.group == request.group
            && self.resource == request.resource
            && self.verbs.iter().any(|v| v == request.verb)
            && (self.names.is_empty()
                || request
                    .name
                    .is_some_and(|name| self.names.iter().any(|n| n == name)))
    }
}

/// What the authorizer sees of a resource request (kube-apiserver's `RequestInfo`).
pub(crate) struct Attributes<'a> {
    pub(crate) verb: &'static str,
    pub(crate) group: &'a str,
    pub(crate) resource: String,
    pub(crate) namespace: Option<&'a str>,
    /// The object's name; for a list or watch, the one a `metadata.name` field selector names
    /// (the real server authorizes those as requests for that object).
    pub(crate) name: Option<&'a str>,
}

impl<'a> Attributes<'a> {
    /// `name` is the object of the path; `field_selector` the request's, for a collection.
    pub(crate) fn new(
        method: &Method,
        watch: bool,
        group: &'a str,
        (plural, status): (&str, bool),
        namespace: Option<&'a str>,
        name: Option<&'a str>,
        field_selector: Option<&'a str>,
    ) -> Self {
        let verb = match (method, name.is_some()) {
            (&Method::GET, true) => "get",
            (&Method::GET, false) if watch => "watch",
            (&Method::GET, false) => "list",
            (&Method::POST, _) => "create",
            (&Method::PUT, _) => "update",
            (&Method::PATCH, _) => "patch",
            (&Method::DELETE, true) => "delete",
            (&Method::DELETE, false) => "deletecollection",
            _ => "unknown",
        };
        let name = name.or_else(|| {
            // A selector naming exactly one object, and nothing else.
            let selector = field_selector?;
            let value = selector
                .strip_prefix("metadata.name==")
                .or_else(|| selector.strip_prefix("metadata.name="))?;
            (!value.is_empty() && !value.contains(',')).then_some(value)
        });
        Self {
            verb,
            group,
            resource: if status {
                format!("{plural}/status")
            } else {
                plural.to_owned()
            },
            namespace,
            name: if verb == "create" { None } else { name },
        }
    }
}

/// `None` when `grants` allow the request, else the 403 Status kube-apiserver answers
/// (`forbiddenMessage` and `NewForbidden` of k8s.io/apiserver).
pub(crate) fn denial(grants: &[Grant], request: &Attributes<'_>) -> Option<Value> {
    if grants.iter().any(|grant| grant.allows(request)) {
        return None;
    }
    let scope = match request.namespace {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".to_owned(),
    };
    let reason = format!(
        "User \"{USER}\" cannot {} resource \"{}\" in API group \"{}\" {scope}",
        request.verb, request.resource, request.group
    );
    let plural = request
        .resource
        .split_once('/')
        .map_or(request.resource.as_str(), |(plural, _)| plural);
    let qualified = if request.group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{}", request.group)
    };
    let message = match request.name {
        Some(name) => format!("{qualified} \"{name}\" is forbidden: {reason}"),
        None => format!("{qualified} is forbidden: {reason}"),
    };
    // Empty fields are left out, as Go's `omitempty` does.
    let mut details = serde_json::json!({ "kind": plural });
    if !request.group.is_empty() {
        details["group"] = request.group.into();
    }
    if let Some(name) = request.name {
        details["name"] = name.into();
    }
    Some(status_body(403, "Forbidden", &message, Some(details)))
}
