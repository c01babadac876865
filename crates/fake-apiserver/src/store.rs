//! The fake server's object stores, watch history and watchers.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use futures::channel::mpsc::UnboundedSender;
use serde_json::Value;

use super::rbac::Grant;
use super::resource::ResourceType;
use super::service::{self, Allocated, ServiceNet};
use super::{Fault, Labels, Recorded};

/// The namespaces every cluster has.
const BUILTIN_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// How many watch events per resource the fake keeps for resuming watches (the rest is
/// "compacted": resuming from before it gets 410 Expired).
const HISTORY: usize = 2048;

#[derive(Debug)]
pub(crate) struct Watcher {
    pub(crate) id: u64,
    pub(crate) namespace: Option<String>,
    pub(crate) labels: Vec<Requirement>,
    pub(crate) fields: Vec<Requirement>,
    pub(crate) tx: UnboundedSender<Bytes>,
}

/// How objects are keyed: (namespace, or "" for a cluster-scoped object; name).
pub(crate) type Key = (String, String);

/// The [`Key`] of an object.
pub(crate) fn object_key(namespace: Option<&str>, name: &str) -> Key {
    (namespace.unwrap_or_default().to_owned(), name.to_owned())
}

/// One watch event kept for resuming watches and for reading a list at an older
/// resourceVersion (continued pages).
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) rv: u64,
    pub(crate) event: &'static str,
    pub(crate) key: Key,
    pub(crate) object: Value,
    /// The object before this change (None when it was added).
    pub(crate) previous: Option<Value>,
}

#[derive(Debug)]
pub(crate) struct Resource {
    pub(crate) ty: ResourceType,
    pub(crate) objects: BTreeMap<Key, Value>,
    pub(crate) history: VecDeque<Change>,
    /// Resuming from a resourceVersion below this gets 410.
    pub(crate) compacted_below: u64,
    pub(crate) watchers: Vec<Watcher>,
}

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) rv: u64,
    next_id: u64,
    pub(crate) resources: Vec<Resource>,
    pub(crate) faults: Vec<Fault>,
    pub(crate) log: Vec<Recorded>,
    pub(crate) net: ServiceNet,
    /// What `/version` says (`gitVersion`).
    pub(crate) git_version: String,
    /// RBAC-like authorization: `None` allows everything.
    pub(crate) grants: Option<Vec<Grant>>,
}

/// One equality-based selector requirement (`k=v`, `k==v`, `k!=v`, `k`, `!k`).
#[derive(Clone, Debug)]
pub(crate) enum Requirement {
    Eq(String, String),
    NotEq(String, String),
    Exists(String),
    NotExists(String),
}

pub(crate) fn parse_selector(selector: &str) -> Vec<Requirement> {
    selector
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Eq(k.trim().into(), v.trim().into())
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::NotExists(k.trim().into())
            } else {
                Requirement::Exists(part.into())
            }
        })
        .collect()
}

fn matches(requirements: &[Requirement], values: &Labels) -> bool {
    requirements.iter().all(|req| match req {
        Requirement::Eq(k, v) => values.get(k) == Some(v),
        Requirement::NotEq(k, v) => values.get(k) != Some(v),
        Requirement::Exists(k) => values.contains_key(k),
        Requirement::NotExists(k) => !values.contains_key(k),
    })
}

fn labels_of(object: &Value) -> Labels {
    object["metadata"]["labels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn fields_of(object: &Value) -> Labels {
    let mut fields = Labels::new();
    for key in ["name", "namespace"] {
        if let Some(value) = object["metadata"][key].as_str() {
            fields.insert(format!("metadata.{key}"), value.to_owned());
        }
    }
    if let Some(t) = object["type"].as_str() {
        fields.insert("type".into(), t.into());
    }
    if let Some(t) = object["spec"]["type"].as_str() {
        fields.insert("spec.type".into(), t.into());
    }
    fields
}

/// True when `object` is in `namespace` (any, when `None`) and matches both selectors: what
/// a list, a watch's replay and its live events all return.
pub(crate) fn selected(
    object: &Value,
    namespace: Option<&str>,
    labels: &[Requirement],
    fields: &[Requirement],
) -> bool {
    namespace.is_none_or(|ns| object["metadata"]["namespace"] == ns)
        && matches(labels, &labels_of(object))
        && matches(fields, &fields_of(object))
}

impl State {
    pub(crate) fn with_builtin_types() -> Self {
        let mut state = Self {
            rv: 100,
            next_id: 1,
            resources: Vec::new(),
            faults: Vec::new(),
            log: Vec::new(),
            net: ServiceNet::default(),
            git_version: "v1.31.14".into(),
            grants: None,
        };
        for ty in [
            ResourceType::new("", "v1", "namespaces", "Namespace", false),
            // The built-in kinds with a `status` subresource (a write to the object keeps its
            // status; `/status` changes only the status), as the real server serves them.
            ResourceType::new("", "v1", "services", "Service", true).with_status_subresource(),
            ResourceType::new("", "v1", "configmaps", "ConfigMap", true),
            ResourceType::new("", "v1", "events", "Event", true),
            ResourceType::new("", "v1", "pods", "Pod", true).with_status_subresource(),
            // The native cure watches the Nodes' kubelet and kube-proxy versions.
            ResourceType::new("", "v1", "nodes", "Node", false).with_status_subresource(),
            ResourceType::new(
                "discovery.k8s.io",
                "v1",
                "endpointslices",
                "EndpointSlice",
                true,
            ),
            ResourceType::new("coordination.k8s.io", "v1", "leases", "Lease", true),
            ResourceType::new("events.k8s.io", "v1", "events", "Event", true),
            // Built into every kube-apiserver; the doctor reads the cilium DaemonSet and the
            // kube-dns Deployment, the controller and the doctor the receivers' workloads. Their
            // generation counts spec changes, as the real server's does (the native cure
            // probes again when kube-proxy's or the CNI's DaemonSet changes generation).
            ResourceType::new("apps", "v1", "deployments", "Deployment", true)
                .with_status_subresource()
                .with_generation(),
            ResourceType::new("apps", "v1", "daemonsets", "DaemonSet", true)
                .with_status_subresource()
                .with_generation(),
            ResourceType::new("apps", "v1", "statefulsets", "StatefulSet", true)
                .with_status_subresource()
                .with_generation(),
            ResourceType::new("networking.k8s.io", "v1", "ingresses", "Ingress", true)
                .with_status_subresource(),
            ResourceType::new(
                "networking.k8s.io",
                "v1",
                "ingressclasses",
                "IngressClass",
                false,
            ),
        ] {
            state.register(ty);
        }
        for namespace in BUILTIN_NAMESPACES {
            state.ensure_namespace(namespace);
        }
        state
    }

    /// True when the Namespace exists.
    pub(crate) fn namespace_exists(&self, name: &str) -> bool {
        self.get("v1", "Namespace", None, name).is_some()
    }

    /// Creates the Namespace unless it exists (as a cluster's setup would have).
    pub(crate) fn ensure_namespace(&mut self, name: &str) {
        if !self.namespace_exists(name) {
            let namespace = namespace_object(name);
            self.upsert(namespace).expect("a Namespace is storable");
        }
    }

    /// Addresses and node ports held by the stored Services other than `except`.
    pub(crate) fn allocated_except(&self, except: Option<&Key>) -> Allocated {
        let index = self
            .index_by_kind("v1", "Service")
            .expect("Services are built in");
        Allocated::of(
            self.resources[index]
                .objects
                .iter()
                .filter(|(key, _)| Some(*key) != except)
                .map(|(_, svc)| svc),
        )
    }

    /// Fills in a Service as the server does (defaults, allocated addresses); returns why the
    /// server would refuse it.
    pub(crate) fn admit_service(
        &self,
        svc: &mut Value,
        key: &Key,
        old: Option<&Value>,
    ) -> Vec<super::validation::Cause> {
        let taken = self.allocated_except(Some(key));
        service::admit(self.net, &taken, svc, old)
    }

    /// The objects as they were at resourceVersion `rv`, in key order, or `None` when the
    /// history needed for that has been compacted.
    pub(crate) fn objects_at(&self, index: usize, rv: u64) -> Option<BTreeMap<&Key, &Value>> {
        let resource = &self.resources[index];
        if rv + 1 < resource.compacted_below {
            return None;
        }
        let mut before: BTreeMap<&Key, Option<&Value>> = BTreeMap::new();
        // Newest first, so the earliest change after `rv` of each object has the last word.
        for change in resource.history.iter().rev().take_while(|c| c.rv > rv) {
            before.insert(&change.key, change.previous.as_ref());
        }
        let mut objects: BTreeMap<&Key, &Value> = resource
            .objects
            .iter()
            .filter(|(key, _)| !before.contains_key(key))
            .collect();
        objects.extend(
            before
                .into_iter()
                .filter_map(|(key, object)| Some((key, object?))),
        );
        Some(objects)
    }

    pub(crate) fn register(&mut self, ty: ResourceType) {
        if self
            .resource_index(&ty.group, &ty.version, &ty.plural)
            .is_some()
        {
            return;
        }
        self.resources.push(Resource {
            ty,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted_below: 0,
            watchers: Vec::new(),
        });
    }

    pub(crate) fn resource_index(&self, group: &str, version: &str, plural: &str) -> Option<usize> {
        self.resources
            .iter()
            .position(|r| r.ty.group == group && r.ty.version == version && r.ty.plural == plural)
    }

    fn index_by_kind(&self, api_version: &str, kind: &str) -> Option<usize> {
        self.resources
            .iter()
            .position(|r| r.ty.api_version() == api_version && r.ty.kind == kind)
    }

    /// Gives a new object its uid and creationTimestamp, as the server does on create.
    pub(crate) fn stamp_created(&mut self, object: &mut Value) {
        let uid = format!("00000000-0000-4000-8000-{:012x}", self.next_id());
        object["metadata"]["uid"] = uid.into();
        object["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z".into();
    }

    pub(crate) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Stamps and stores an object, emitting ADDED or MODIFIED; returns the new rv.
    pub(crate) fn upsert(&mut self, mut object: Value) -> Result<u64, String> {
        let api_version = object["apiVersion"]
            .as_str()
            .ok_or("no apiVersion")?
            .to_owned();
        let kind = object["kind"].as_str().ok_or("no kind")?.to_owned();
        let index = self
            .index_by_kind(&api_version, &kind)
            .ok_or_else(|| format!("{api_version} {kind} is not registered"))?;
        let namespaced = self.resources[index].ty.namespaced;
        let name = object["metadata"]["name"]
            .as_str()
            .ok_or("no metadata.name")?
            .to_owned();
        let namespace = if namespaced {
            let ns = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            object["metadata"]["namespace"] = ns.clone().into();
            self.ensure_namespace(&ns);
            ns
        } else {
            String::new()
        };
        let key = (namespace, name);
        let existing = self.resources[index].objects.get(&key).cloned();
        if kind == "Service" && api_version == "v1" {
            // Fixtures get the server's defaults too; what it would refuse is theirs to avoid.
            let _ = self.admit_service(&mut object, &key, existing.as_ref());
        }
        let ty = self.resources[index].ty.clone();
        ty.stamp_generation(&mut object, existing.as_ref());
        match &existing {
            Some(old) => {
                object["metadata"]["uid"] = old["metadata"]["uid"].clone();
                object["metadata"]["creationTimestamp"] =
                    old["metadata"]["creationTimestamp"].clone();
            }
            None => {
                self.stamp_created(&mut object);
            }
        }
        Ok(self.store(
            index,
            key,
            object,
            if existing.is_some() {
                "MODIFIED"
            } else {
                "ADDED"
            },
        ))
    }

    pub(crate) fn store(
        &mut self,
        index: usize,
        key: Key,
        mut object: Value,
        event: &'static str,
    ) -> u64 {
        self.rv += 1;
        let rv = self.rv;
        object["metadata"]["resourceVersion"] = rv.to_string().into();
        let resource = &mut self.resources[index];
        let previous = resource.objects.insert(key.clone(), object.clone());
        Self::emit(resource, rv, event, key, object, previous);
        rv
    }

    pub(crate) fn remove_key(&mut self, index: usize, key: &Key) -> Option<Value> {
        let previous = self.resources[index].objects.remove(key)?;
        let mut object = previous.clone();
        self.rv += 1;
        let rv = self.rv;
        object["metadata"]["resourceVersion"] = rv.to_string().into();
        Self::emit(
            &mut self.resources[index],
            rv,
            "DELETED",
            key.clone(),
            object.clone(),
            Some(previous),
        );
        Some(object)
    }

    /// The garbage collector's background cascade after `uid` was deleted: dependents owned
    /// by it alone are deleted (and theirs in turn), others just lose that ownerReference.
    pub(crate) fn collect_garbage(&mut self, uid: &str) {
        let mut gone = vec![uid.to_owned()];
        while let Some(uid) = gone.pop() {
            for index in 0..self.resources.len() {
                let dependents: Vec<(Key, Value)> = self.resources[index]
                    .objects
                    .iter()
                    .filter(|(_, o)| {
                        o["metadata"]["ownerReferences"]
                            .as_array()
                            .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid.as_str()))
                    })
                    .map(|(k, o)| (k.clone(), o.clone()))
                    .collect();
                for (key, mut object) in dependents {
                    let refs = object["metadata"]["ownerReferences"]
                        .as_array_mut()
                        .expect("filtered on an array");
                    refs.retain(|r| r["uid"] != uid.as_str());
                    if refs.is_empty() {
                        if let Some(removed) = self.remove_key(index, &key)
                            && let Some(uid) = removed["metadata"]["uid"].as_str()
                        {
                            gone.push(uid.to_owned());
                        }
                    } else {
                        self.store(index, key, object, "MODIFIED");
                    }
                }
            }
        }
    }

    pub(crate) fn remove(
        &mut self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let index = self.index_by_kind(api_version, kind)?;
        self.remove_key(index, &object_key(namespace, name))
    }

    pub(crate) fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let index = self.index_by_kind(api_version, kind)?;
        self.resources[index]
            .objects
            .get(&object_key(namespace, name))
            .cloned()
    }

    pub(crate) fn list_kind(&self, api_version: &str, kind: &str) -> Vec<Value> {
        self.index_by_kind(api_version, kind)
            .map(|index| self.resources[index].objects.values().cloned().collect())
            .unwrap_or_default()
    }

    fn emit(
        resource: &mut Resource,
        rv: u64,
        event: &'static str,
        key: Key,
        object: Value,
        previous: Option<Value>,
    ) {
        let line = watch_line(event, &object);
        let live = object.clone();
        resource.history.push_back(Change {
            rv,
            event,
            key,
            object,
            previous,
        });
        while resource.history.len() > HISTORY {
            if let Some(old) = resource.history.pop_front() {
                resource.compacted_below = old.rv + 1;
            }
        }
        let object = live;
        resource.watchers.retain(|w| {
            if !selected(&object, w.namespace.as_deref(), &w.labels, &w.fields) {
                return true;
            }
            w.tx.unbounded_send(line.clone()).is_ok()
        });
    }

    pub(crate) fn close_watches(&mut self) {
        for resource in &mut self.resources {
            resource.watchers.clear();
        }
    }

    pub(crate) fn compact(&mut self) {
        let rv = self.rv;
        for resource in &mut self.resources {
            resource.history.clear();
            resource.compacted_below = rv + 1;
        }
    }

    pub(crate) fn open_watches(&self) -> usize {
        self.resources.iter().map(|r| r.watchers.len()).sum()
    }

    pub(crate) fn remove_watcher(&mut self, id: u64) -> Option<Watcher> {
        for resource in &mut self.resources {
            if let Some(pos) = resource.watchers.iter().position(|w| w.id == id) {
                return Some(resource.watchers.remove(pos));
            }
        }
        None
    }
}

/// A Namespace as the server stores it.
fn namespace_object(name: &str) -> Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": { "kubernetes.io/metadata.name": name },
        },
        "spec": { "finalizers": ["kubernetes"] },
        "status": { "phase": "Active" },
    })
}

pub(crate) fn watch_line(event: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&serde_json::json!({ "type": event, "object": object }))
        .expect("JSON values serialize");
    line.push(b'\n');
    Bytes::from(line)
}
