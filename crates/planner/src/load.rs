//! Reading cluster objects from YAML text (multi-document files, `kind: List`), as
//! `kubectl get -o yaml` prints them. Pure: the caller reads the files.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::snapshot::ClusterSnapshot;
use crate::workloads::{DYNAMIC_KINDS, ReceiverObjects, WORKLOAD_KINDS};
use crate::{CustomSource, SourceKind};

/// A document that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}: document {document}{}: {message}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
pub struct LoadError {
    /// The file name (or `-` for stdin).
    pub source_name: String,
    /// 1-based index of the document in the file.
    pub document: usize,
    /// 1-based line in the file, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

/// Adds every object of `text` to `snapshot`. Objects of kinds the planner does not read
/// are skipped and described in the returned notes.
pub fn load_yaml(
    snapshot: &mut ClusterSnapshot,
    source_name: &str,
    text: &str,
) -> Result<Vec<String>, LoadError> {
    let mut notes = Vec::new();
    for (index, (first_line, doc)) in split_documents(text).into_iter().enumerate() {
        let document = index + 1;
        let err = |line: Option<usize>, message: String| LoadError {
            source_name: source_name.to_owned(),
            document,
            line,
            message,
        };
        if doc.trim().is_empty()
            || doc
                .lines()
                .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            continue;
        }
        let value: Value = serde_saphyr::from_str(doc).map_err(|e| {
            let line = e
                .location()
                .map(|l| first_line + usize::try_from(l.line()).unwrap_or(1) - 1);
            err(line, first_message_line(&e.to_string()))
        })?;
        if value.is_null() {
            continue;
        }
        add_value(snapshot, value, &mut notes).map_err(|m| err(Some(first_line), m))?;
    }
    Ok(notes)
}

/// The parser's message without its own `error:` and document-relative `line N column M:`
/// prefixes (the file line is reported separately).
fn first_message_line(s: &str) -> String {
    let first = s.lines().next().unwrap_or(s).trim();
    let rest = first.strip_prefix("error:").unwrap_or(first).trim_start();
    match rest.strip_prefix("line ").and_then(|r| r.split_once(": ")) {
        Some((_, message)) => message.to_owned(),
        None => rest.to_owned(),
    }
}

/// Splits at `---` document markers (which YAML only allows at column 0), returning each
/// document with the 1-based line it starts on.
fn split_documents(text: &str) -> Vec<(usize, &str)> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut start_line = 1;
    let mut offset = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t") {
            if offset > start || i > 0 {
                docs.push((start_line, &text[start..offset]));
            }
            start = offset + line.len();
            start_line = i + 2;
        }
        offset += line.len();
    }
    docs.push((start_line, &text[start..]));
    docs
}

/// A `TLSRoute` of any version with the fields `v1` requires: `hostnames` became required in
/// v1, and v1alpha2/v1alpha3 objects may omit it (and `rules`).
fn v1_tls_route(mut value: Value) -> Value {
    if let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut) {
        for field in ["hostnames", "rules"] {
            spec.entry(field)
                .or_insert_with(|| Value::Array(Vec::new()));
        }
    }
    value
}

fn add_value(
    snapshot: &mut ClusterSnapshot,
    value: Value,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let Some(kind) = value.get("kind").and_then(Value::as_str).map(str::to_owned) else {
        return Err("no `kind` field: not a Kubernetes object".into());
    };
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let group = api_version
        .rsplit_once('/')
        .map_or("", |(g, _)| g)
        .to_owned();
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_owned();
    let what = format!("{kind} {name}");
    fn typed<T: DeserializeOwned>(value: Value, what: &str) -> Result<T, String> {
        serde_json::from_value(value).map_err(|e| format!("{what}: {e}"))
    }
    match (group.as_str(), kind.as_str()) {
        (_, "List")
        | (_, "ServiceList")
        | (_, "IngressList")
        | (_, "ConfigMapList")
        | (_, "NamespaceList")
        | (_, "NodeList")
        | (_, "DNSEndpointList")
        | (_, "PodList")
        | (_, "DeploymentList")
        | (_, "DaemonSetList")
        | (_, "StatefulSetList") => {
            let Some(Value::Array(items)) = value.get("items").cloned() else {
                return Err(format!("{kind} without `items`"));
            };
            for item in items {
                add_value(snapshot, item, notes)?;
            }
        }
        ("", "Service") => snapshot.services.push(typed(value, &what)?),
        ("", "ConfigMap") => snapshot.config_maps.push(typed(value, &what)?),
        ("", "Namespace") => snapshot.namespaces.push(typed(value, &what)?),
        ("", "Node") => snapshot.nodes.push(typed(value, &what)?),
        ("networking.k8s.io", "Ingress") => {
            snapshot.ingresses.push(Arc::new(typed(value, &what)?));
        }
        ("networking.k8s.io", "IngressClass") => {
            snapshot.ingress_classes.push(typed(value, &what)?)
        }
        ("gateway.networking.k8s.io", "Gateway") => snapshot.gateways.push(typed(value, &what)?),
        ("gateway.networking.k8s.io", "HTTPRoute") => {
            snapshot.http_routes.push(typed(value, &what)?)
        }
        ("gateway.networking.k8s.io", "GRPCRoute") => {
            snapshot.grpc_routes.push(typed(value, &what)?)
        }
        ("gateway.networking.k8s.io", "TLSRoute") => {
            snapshot.tls_routes.push(typed(v1_tls_route(value), &what)?);
        }
        (crate::external_dns::GROUP, crate::external_dns::KIND) => {
            snapshot.dns_endpoints.push(typed(value, &what)?);
        }
        (group, kind) if WORKLOAD_KINDS.contains(&(group, kind)) => {
            let workload = ReceiverObjects::workload_from_value(kind, value);
            let workload = workload.map_err(|e| format!("{what}: {e}"))?;
            snapshot.receivers.workloads.push(workload);
        }
        (group, kind) if DYNAMIC_KINDS.contains(&(group, kind)) => {
            let object = ReceiverObjects::dynamic_from_value(value);
            let object = object.map_err(|e| format!("{what}: {e}"))?;
            snapshot.receivers.objects.push(object);
        }
        (group, kind) if SourceKind::of(group, kind).is_some() => {
            let source_kind = SourceKind::of(group, kind).unwrap_or(SourceKind::IstioGateway);
            snapshot.custom_sources.push(
                CustomSource::from_value(source_kind, value).map_err(|e| format!("{what}: {e}"))?,
            );
        }
        _ => notes.push(format!(
            "skipped {api_version} {kind} {name}: not read by the planner"
        )),
    }
    Ok(())
}
