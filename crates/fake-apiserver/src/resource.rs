//! A resource type the fake serves: its group, version, names and the server behaviour that
//! goes with it (status subresource, `metadata.generation`). A leaf: the store and the
//! validation both use it.

use serde_json::Value;

/// A resource type the fake serves.
#[derive(Clone, Debug)]
pub struct ResourceType {
    /// API group, empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name, as in the URL.
    pub plural: String,
    /// Kind.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Served with a `status` subresource, as a CRD with `subresources.status`: writes to
    /// the object leave `status` alone, writes to `/status` change nothing else.
    pub status_subresource: bool,
    /// Objects carry `metadata.generation`, as every custom resource does: 1 on create, one
    /// more on each write that changes anything but `metadata` and `status`.
    pub generation: bool,
}

impl ResourceType {
    /// Describes a resource type.
    pub fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
            status_subresource: false,
            generation: false,
        }
    }

    /// The same type, with a `status` subresource.
    pub fn with_status_subresource(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// The same type, keeping `metadata.generation` as the server does for custom resources.
    pub fn with_generation(mut self) -> Self {
        self.generation = true;
        self
    }

    /// Sets `metadata.generation` of `object` as the server does: 1 when created, the
    /// current one plus one when anything but `metadata` and `status` changed, else the
    /// current one (a client cannot set it).
    pub(crate) fn stamp_generation(&self, object: &mut Value, current: Option<&Value>) {
        if !self.generation {
            return;
        }
        let generation = match current {
            None => 1,
            Some(current) => {
                let previous = current["metadata"]["generation"].as_i64().unwrap_or(1);
                let spec = |o: &Value| {
                    o.as_object().map(|fields| {
                        fields
                            .iter()
                            .filter(|(k, _)| {
                                !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                            })
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect::<serde_json::Map<_, _>>()
                    })
                };
                if spec(object) == spec(current) {
                    previous
                } else {
                    previous + 1
                }
            }
        };
        object["metadata"]["generation"] = generation.into();
    }

    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}
