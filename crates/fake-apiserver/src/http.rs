//! The fake server's HTTP side: routing, verbs, watches, fault injection.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::Value;

use super::store::{Requirement, State, Watcher, object_key, parse_selector, selected, watch_line};
use super::{FaultKind, Recorded, Shared, default_status, status_body};

type Body = BoxBody<Bytes, Infallible>;

pub(crate) async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(shared, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

fn json(status: u16, value: &Value) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(
            serde_json::to_vec(value).expect("JSON serializes"),
        ))
        .boxed(),
    );
    *response.status_mut() = StatusCode::from_u16(status).expect("valid status");
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    if status == 429 {
        response.headers_mut().insert(
            hyper::header::RETRY_AFTER,
            hyper::header::HeaderValue::from_static("1"),
        );
    }
    response
}

/// A parsed request path.
struct Target {
    index: usize,
    namespace: Option<String>,
    name: Option<String>,
    plural: String,
}

fn parse_path(state: &State, path: &str) -> Result<Target, Value> {
    let not_found = || {
        status_body(
            404,
            "NotFound",
            "the server could not find the requested resource",
            Some(serde_json::json!({})),
        )
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(not_found()),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        rest => (None, rest),
    };
    let (plural, name) = match rest {
        [plural] => (*plural, None),
        [plural, name] => (*plural, Some((*name).to_owned())),
        _ => return Err(not_found()),
    };
    let index = state
        .resource_index(group, version, plural)
        .ok_or_else(not_found)?;
    Ok(Target {
        index,
        namespace,
        name,
        plural: plural.to_owned(),
    })
}

/// The decoded `key=value` pairs of a URL query.
fn query_map(query: Option<&str>) -> HashMap<String, String> {
    query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(input: &str) -> String {
    let bytes = input.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    let method = request.method().clone();
    let uri = request.uri().clone();
    let path_and_query = uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let content_type = request
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let body_json: Option<Value> = serde_json::from_slice(&body).ok();

    // Injected faults come first.
    let fault = {
        let mut state = shared.lock();
        let found = state.faults.iter_mut().find(|f| {
            f.remaining > 0
                && f.method.as_deref().is_none_or(|m| m == method.as_str())
                && path_and_query.contains(&f.path_contains)
        });
        let kind = found.map(|f| {
            f.remaining -= 1;
            f.kind.clone()
        });
        state.faults.retain(|f| f.remaining > 0);
        kind
    };
    match fault {
        Some(FaultKind::Status(code)) => {
            let name = uri.path().rsplit('/').next().unwrap_or_default().to_owned();
            let response = json(code, &default_status(code, "resource", &name));
            record(&shared, &method, &path_and_query, code, body_json);
            return response;
        }
        Some(FaultKind::Delay(delay)) => tokio::time::sleep(delay).await,
        None => {}
    }

    let query = query_map(uri.query());
    let (status, response) = {
        let mut state = shared.lock();
        match parse_path(&state, uri.path()) {
            Err(status) => (404, json(404, &status)),
            Ok(target) => dispatch(
                &mut state,
                &method,
                &target,
                &query,
                &content_type,
                body_json.clone(),
                &shared,
            ),
        }
    };
    if matches!(
        method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) && status < 300
    {
        shared.changed.notify_waiters();
    }
    record(&shared, &method, &path_and_query, status, body_json);
    response
}

fn record(shared: &Shared, method: &Method, uri: &str, status: u16, body: Option<Value>) {
    shared.lock().log.push(Recorded {
        method: method.as_str().to_owned(),
        uri: uri.to_owned(),
        status,
        at: Instant::now(),
        body,
    });
}

fn dispatch(
    state: &mut State,
    method: &Method,
    target: &Target,
    query: &HashMap<String, String>,
    content_type: &str,
    body: Option<Value>,
    shared: &Arc<Shared>,
) -> (u16, Response<Body>) {
    let ty = state.resources[target.index].ty.clone();
    let reply = |code: u16, value: Value| (code, json(code, &value));
    let not_found = |name: &str| reply(404, default_status(404, &target.plural, name));
    let bad_request = |message: &str| reply(400, status_body(400, "BadRequest", message, None));
    match (method, &target.name) {
        (&Method::GET, Some(name)) => {
            let key = object_key(target.namespace.as_deref(), name);
            match state.resources[target.index].objects.get(&key) {
                Some(object) => reply(200, object.clone()),
                None => not_found(name),
            }
        }
        (&Method::GET, None) => {
            let labels = parse_selector(query.get("labelSelector").map_or("", String::as_str));
            let fields = parse_selector(query.get("fieldSelector").map_or("", String::as_str));
            if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
                watch(state, target, query, labels, fields, shared)
            } else {
                list(state, target, query, &labels, &fields)
            }
        }
        (&Method::POST, None) => {
            let Some(Value::Object(_)) = body else {
                return bad_request("the body of the request was not valid JSON");
            };
            let mut object = body.expect("checked above");
            let name = match object["metadata"]["name"].as_str() {
                Some(name) if !name.is_empty() => name.to_owned(),
                _ => match object["metadata"]["generateName"].as_str() {
                    Some(prefix) => format!("{prefix}{:05x}", state.next_id()),
                    None => {
                        return reply(
                            422,
                            status_body(
                                422,
                                "Invalid",
                                &format!(
                                    "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                                    ty.kind
                                ),
                                None,
                            ),
                        );
                    }
                },
            };
            let namespace = target.namespace.clone().unwrap_or_default();
            object["metadata"]["name"] = name.clone().into();
            if ty.namespaced {
                object["metadata"]["namespace"] = namespace.clone().into();
            }
            if object["metadata"]
                .get("resourceVersion")
                .is_some_and(|rv| !rv.is_null() && rv != "")
            {
                return reply(
                    500,
                    status_body(
                        500,
                        "InternalError",
                        "resourceVersion should not be set on objects to be created",
                        None,
                    ),
                );
            }
            let key = (namespace, name.clone());
            if state.resources[target.index].objects.contains_key(&key) {
                let message = format!("{} \"{name}\" already exists", target.plural);
                return reply(
                    409,
                    status_body(
                        409,
                        "AlreadyExists",
                        &message,
                        Some(serde_json::json!({"name": name, "kind": target.plural})),
                    ),
                );
            }
            object["apiVersion"] = ty.api_version().into();
            object["kind"] = ty.kind.clone().into();
            state.stamp_created(&mut object);
            state.store(target.index, key.clone(), object, "ADDED");
            let stored = state.resources[target.index].objects[&key].clone();
            reply(201, stored)
        }
        (&Method::PUT, Some(name)) => {
            let Some(mut object @ Value::Object(_)) = body else {
                return bad_request("the body of the request was not valid JSON");
            };
            let key = object_key(target.namespace.as_deref(), name);
            let Some(current) = state.resources[target.index].objects.get(&key).cloned() else {
                return not_found(name);
            };
            if object["metadata"]["name"].as_str() != Some(name) {
                return bad_request("the name of the object does not match the name on the URL");
            }
            if let Some(sent) = object["metadata"]["resourceVersion"]
                .as_str()
                .filter(|rv| !rv.is_empty())
                && Some(sent) != current["metadata"]["resourceVersion"].as_str()
            {
                return reply(409, default_status(409, &target.plural, name));
            }
            object["apiVersion"] = ty.api_version().into();
            object["kind"] = ty.kind.clone().into();
            object["metadata"]["uid"] = current["metadata"]["uid"].clone();
            object["metadata"]["creationTimestamp"] =
                current["metadata"]["creationTimestamp"].clone();
            if ty.namespaced {
                object["metadata"]["namespace"] = key.0.clone().into();
            }
            if object == current_without_rv(&current, &object) {
                // A no-op update keeps the resourceVersion and emits no event, like the real server.
                return reply(200, current);
            }
            state.store(target.index, key.clone(), object, "MODIFIED");
            reply(200, state.resources[target.index].objects[&key].clone())
        }
        (&Method::PATCH, Some(name)) => {
            if !content_type.starts_with("application/merge-patch+json")
                && !content_type.starts_with("application/strategic-merge-patch+json")
            {
                return reply(
                    415,
                    status_body(
                        415,
                        "UnsupportedMediaType",
                        &format!("the fake API server does not support patch type {content_type}"),
                        None,
                    ),
                );
            }
            let Some(patch) = body else {
                return bad_request("the body of the request was not valid JSON");
            };
            let key = object_key(target.namespace.as_deref(), name);
            let Some(current) = state.resources[target.index].objects.get(&key).cloned() else {
                return not_found(name);
            };
            if let Some(sent) = patch["metadata"]["resourceVersion"].as_str()
                && Some(sent) != current["metadata"]["resourceVersion"].as_str()
            {
                return reply(409, default_status(409, &target.plural, name));
            }
            let mut object = current.clone();
            merge_patch(&mut object, &patch);
            object["metadata"]["uid"] = current["metadata"]["uid"].clone();
            object["metadata"]["name"] = name.clone().into();
            if object == current {
                return reply(200, current);
            }
            state.store(target.index, key.clone(), object, "MODIFIED");
            reply(200, state.resources[target.index].objects[&key].clone())
        }
        (&Method::DELETE, Some(name)) => {
            let key = object_key(target.namespace.as_deref(), name);
            // DeleteOptions.preconditions, checked like the real server (409 on mismatch).
            if let (Some(options), Some(current)) =
                (&body, state.resources[target.index].objects.get(&key))
            {
                let preconditions = &options["preconditions"];
                for (field, actual) in [
                    ("resourceVersion", &current["metadata"]["resourceVersion"]),
                    ("uid", &current["metadata"]["uid"]),
                ] {
                    if let Some(expected) = preconditions[field].as_str()
                        && actual.as_str() != Some(expected)
                    {
                        let message = format!(
                            "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: {field}: {expected}, {field} in object meta: {}",
                            target.plural,
                            actual.as_str().unwrap_or_default()
                        );
                        let details = serde_json::json!({"name": name, "kind": target.plural});
                        return reply(409, status_body(409, "Conflict", &message, Some(details)));
                    }
                }
            }
            match state.remove_key(target.index, &key) {
                Some(object) => reply(200, object),
                None => not_found(name),
            }
        }
        _ => reply(
            405,
            status_body(
                405,
                "MethodNotAllowed",
                &format!("{method} is not supported on this path by the fake"),
                None,
            ),
        ),
    }
}

/// `current` with the resourceVersion the update carried (or none), to spot no-op updates.
fn current_without_rv(current: &Value, update: &Value) -> Value {
    let mut current = current.clone();
    current["metadata"]["resourceVersion"] = update["metadata"]["resourceVersion"].clone();
    if update["metadata"].get("resourceVersion").is_none()
        && let Some(meta) = current["metadata"].as_object_mut()
    {
        meta.remove("resourceVersion");
    }
    current
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    let map = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

fn list(
    state: &State,
    target: &Target,
    query: &HashMap<String, String>,
    labels: &[Requirement],
    fields: &[Requirement],
) -> (u16, Response<Body>) {
    let resource = &state.resources[target.index];
    let matching: Vec<&Value> = resource
        .objects
        .values()
        .filter(|o| selected(o, target.namespace.as_deref(), labels, fields))
        .collect();
    let offset: usize = query
        .get("continue")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let page: Vec<Value> = matching
        .iter()
        .skip(offset)
        .take(limit)
        .map(|o| (*o).clone())
        .collect();
    let mut metadata = serde_json::json!({ "resourceVersion": state.rv.to_string() });
    if offset.saturating_add(page.len()) < matching.len() {
        metadata["continue"] = (offset + page.len()).to_string().into();
        metadata["remainingItemCount"] = (matching.len() - offset - page.len()).into();
    }
    let body = serde_json::json!({
        "kind": format!("{}List", resource.ty.kind),
        "apiVersion": resource.ty.api_version(),
        "metadata": metadata,
        "items": page,
    });
    (200, json(200, &body))
}

fn watch(
    state: &mut State,
    target: &Target,
    query: &HashMap<String, String>,
    labels: Vec<Requirement>,
    fields: Vec<Requirement>,
    shared: &Arc<Shared>,
) -> (u16, Response<Body>) {
    let (tx, rx) = futures::channel::mpsc::unbounded::<Bytes>();
    let since: Option<u64> = query
        .get("resourceVersion")
        .filter(|rv| !rv.is_empty() && *rv != "0")
        .and_then(|rv| rv.parse().ok());
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|b| b == "true");
    let initial_events = query.get("sendInitialEvents").is_some_and(|b| b == "true");
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map_or(Duration::from_secs(290), Duration::from_secs);
    let current_rv = state.rv;
    let resource = &mut state.resources[target.index];

    match since {
        Some(rv) if rv + 1 < resource.compacted_below && !initial_events => {
            let status = status_body(
                410,
                "Expired",
                &format!(
                    "too old resource version: {rv} ({})",
                    resource.compacted_below
                ),
                None,
            );
            let _ = tx.unbounded_send(watch_line("ERROR", &status));
            drop(tx);
            return (200, stream_response(rx));
        }
        Some(rv) if !initial_events => {
            for (event_rv, event, object) in &resource.history {
                if *event_rv > rv && selected(object, target.namespace.as_deref(), &labels, &fields)
                {
                    let _ = tx.unbounded_send(watch_line(event, object));
                }
            }
        }
        _ => {
            for object in resource.objects.values() {
                if selected(object, target.namespace.as_deref(), &labels, &fields) {
                    let _ = tx.unbounded_send(watch_line("ADDED", object));
                }
            }
            if initial_events {
                let bookmark = bookmark(
                    &resource.ty.api_version(),
                    &resource.ty.kind,
                    current_rv,
                    true,
                );
                let _ = tx.unbounded_send(watch_line("BOOKMARK", &bookmark));
            }
        }
    }
    let id = state.next_id();
    let resource = &mut state.resources[target.index];
    let (api_version, kind) = (resource.ty.api_version(), resource.ty.kind.clone());
    resource.watchers.push(Watcher {
        id,
        namespace: target.namespace.clone(),
        labels,
        fields,
        tx,
    });
    // Like the real server, end the watch after timeoutSeconds (with a last bookmark when
    // asked), so clients resume from a resourceVersion.
    let shared = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(timeout).await;
        let mut state = shared.lock();
        let rv = state.rv;
        if let Some(watcher) = state.remove_watcher(id)
            && bookmarks
        {
            let _ = watcher.tx.unbounded_send(watch_line(
                "BOOKMARK",
                &bookmark(&api_version, &kind, rv, false),
            ));
        }
    });
    (200, stream_response(rx))
}

fn bookmark(api_version: &str, kind: &str, rv: u64, initial_end: bool) -> Value {
    let mut object = serde_json::json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": { "resourceVersion": rv.to_string() },
    });
    if initial_end {
        object["metadata"]["annotations"] =
            serde_json::json!({ "k8s.io/initial-events-end": "true" });
    }
    object
}

fn stream_response(rx: futures::channel::mpsc::UnboundedReceiver<Bytes>) -> Response<Body> {
    let stream = rx.map(|bytes| Ok::<_, Infallible>(Frame::data(bytes)));
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
