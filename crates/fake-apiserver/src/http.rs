//! The fake server's HTTP side: routing, verbs, watches, fault injection.

use crate::managed;
use crate::rbac::{self, Attributes};
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

use super::resource::ResourceType;
use super::store::{
    Key, Requirement, Resource, State, Watcher, object_key, parse_selector, selected, watch_line,
};
use super::validation::{Cause, invalid_status, validate};
use super::{FaultKind, Recorded, Shared, default_status, status_body};

type Body = BoxBody<Bytes, Infallible>;

pub(crate) async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = shared.clone();
        // The connection ends when the server goes down (`go_down` bumps the epoch).
        let mut epoch = shared.epoch.subscribe();
        epoch.mark_unchanged();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(shared, request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::select! {
                _ = connection => {}
                _ = epoch.changed() => {}
            }
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
    /// The request is on the object's `status` subresource.
    status: bool,
}

/// Where a request path leads.
enum Route {
    /// An object or a collection of a served resource.
    Resource(Target),
    /// A discovery document (`/api`, `/apis`, a group, a group version).
    Discovery(Value),
    /// Nothing is served there (an absent CRD, an unknown path).
    Missing,
    /// A served resource without that subresource (`/status` of a ConfigMap): the real
    /// server answers a JSON `Status` there, not the plain-text page.
    NoSubresource,
}

/// kube-apiserver's answer where nothing is served: Go's `http.NotFound`, plain text, not a
/// JSON Status (clients see an absent CRD this way).
fn page_not_found() -> Response<Body> {
    let mut response =
        Response::new(Full::new(Bytes::from_static(b"404 page not found\n")).boxed());
    *response.status_mut() = StatusCode::NOT_FOUND;
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        hyper::header::X_CONTENT_TYPE_OPTIONS,
        hyper::header::HeaderValue::from_static("nosniff"),
    );
    response
}

fn route(state: &State, method: &Method, path: &str) -> Route {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    if method == Method::GET
        && let Some(document) = discovery(state, &parts)
    {
        return Route::Discovery(document);
    }
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Route::Missing,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        rest => (None, rest),
    };
    let (plural, name, status) = match rest {
        [plural] => (*plural, None, false),
        [plural, name] => (*plural, Some((*name).to_owned()), false),
        [plural, name, "status"] => (*plural, Some((*name).to_owned()), true),
        _ => return Route::Missing,
    };
    match state.resource_index(group, version, plural) {
        Some(index) if status && !state.resources[index].ty.status_subresource => {
            Route::NoSubresource
        }
        Some(index) => Route::Resource(Target {
            index,
            namespace,
            name,
            plural: plural.to_owned(),
            status,
        }),
        _ => Route::Missing,
    }
}

/// The discovery documents, built from the registered types.
fn discovery(state: &State, parts: &[&str]) -> Option<Value> {
    let types = state.resources.iter().map(|r| &r.ty);
    let group_versions = |group: &str| -> Vec<Value> {
        let mut versions: Vec<&str> = types
            .clone()
            .filter(|t| t.group == group)
            .map(|t| t.version.as_str())
            .collect();
        versions.dedup();
        versions
            .into_iter()
            .map(|v| serde_json::json!({ "groupVersion": format!("{group}/{v}"), "version": v }))
            .collect()
    };
    let api_group = |group: &str| -> Option<Value> {
        let versions = group_versions(group);
        let preferred = versions.first()?.clone();
        Some(serde_json::json!({
            "kind": "APIGroup", "apiVersion": "v1", "name": group,
            "versions": versions, "preferredVersion": preferred,
        }))
    };
    let resource_list = |group: &str, version: &str| -> Option<Value> {
        let resources: Vec<Value> = types
            .clone()
            .filter(|t| t.group == group && t.version == version)
            .map(|t| {
                serde_json::json!({
                    "name": t.plural,
                    "singularName": t.kind.to_lowercase(),
                    "namespaced": t.namespaced,
                    "kind": t.kind,
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                })
            })
            .collect();
        (!resources.is_empty()).then(|| {
            serde_json::json!({
                "kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") },
                "resources": resources,
            })
        })
    };
    match parts {
        ["version"] => {
            let version = &state.git_version;
            let minor = version.split('.').nth(1).unwrap_or_default();
            Some(serde_json::json!({
                "major": "1", "minor": minor, "gitVersion": version,
                "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0",
                "compiler": "gc", "platform": "linux/amd64",
            }))
        }
        ["api"] => Some(serde_json::json!({ "kind": "APIVersions", "versions": ["v1"] })),
        ["api", version] => resource_list("", version),
        ["apis"] => {
            let mut groups: Vec<&str> = types
                .clone()
                .map(|t| t.group.as_str())
                .filter(|g| !g.is_empty())
                .collect();
            groups.sort_unstable();
            groups.dedup();
            let groups: Vec<Value> = groups.into_iter().filter_map(api_group).collect();
            Some(
                serde_json::json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups }),
            )
        }
        ["apis", group] => api_group(group),
        ["apis", group, version] => resource_list(group, version),
        _ => None,
    }
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
    let header = |name| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let content_type = header(hyper::header::CONTENT_TYPE);
    let user_agent = header(hyper::header::USER_AGENT);
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let body_json: Option<Value> = serde_json::from_slice(&body).ok();

    // Injected faults come first.
    let fault = take_fault(&shared, &method, &path_and_query);
    // Unapplied: the request is answered as a read of what is stored.
    let effective = if matches!(fault, Some(FaultKind::Unapplied)) {
        Method::GET
    } else {
        method.clone()
    };
    match fault {
        Some(FaultKind::Status(code)) => {
            let name = uri.path().rsplit('/').next().unwrap_or_default().to_owned();
            let response = json(code, &default_status(code, "resource", &name));
            record(&shared, &method, &path_and_query, code, body_json);
            return response;
        }
        Some(FaultKind::Delay(delay)) => tokio::time::sleep(delay).await,
        Some(FaultKind::Unapplied) | None => {}
    }

    let query = query_map(uri.query());
    let manager = managed::manager(query.get("fieldManager").map(String::as_str), &user_agent);
    let (status, response) = {
        let mut state = shared.lock();
        let (status, response) = match route(&state, &effective, uri.path()) {
            Route::Missing => (404, page_not_found()),
            Route::NoSubresource => {
                let status = status_body(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                    Some(serde_json::json!({})),
                );
                (404, json(404, &status))
            }
            Route::Discovery(document) => (200, json(200, &document)),
            Route::Resource(target) => match denial(&state, &method, &target, &query) {
                Some(denied) => (403, json(403, &denied)),
                None => dispatch(
                    &mut state,
                    &effective,
                    &target,
                    &query,
                    &Sender {
                        content_type: &content_type,
                        manager: &manager,
                    },
                    body_json.clone(),
                    &shared,
                ),
            },
        };
        // Recorded under the same lock as the change, so a test that sees the change sees
        // its request in the log.
        state.log.push(Recorded {
            method: method.as_str().to_owned(),
            uri: path_and_query.clone(),
            status,
            at: Instant::now(),
            body: body_json,
        });
        (status, response)
    };
    if matches!(
        method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) && status < 300
    {
        shared.changed.notify_waiters();
    }
    response
}

/// The next injected fault matching this request, if any (each is used up after its count).
fn take_fault(shared: &Shared, method: &Method, path_and_query: &str) -> Option<FaultKind> {
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
}

/// The 403 Status for a request the configured grants do not allow, if any.
fn denial(
    state: &State,
    method: &Method,
    target: &Target,
    query: &HashMap<String, String>,
) -> Option<Value> {
    let grants = state.grants.as_ref()?;
    let attributes = Attributes::new(
        method,
        query.get("watch").is_some_and(|w| w == "true" || w == "1"),
        &state.resources[target.index].ty.group,
        (&target.plural, target.status),
        target.namespace.as_deref(),
        target.name.as_deref(),
        query.get("fieldSelector").map(String::as_str),
    );
    rbac::denial(grants, &attributes)
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

/// What a request says about its body and its sender.
struct Sender<'a> {
    /// The body's `Content-Type`.
    content_type: &'a str,
    /// The field manager its writes are recorded under.
    manager: &'a str,
}

/// An answer: the status code and the response carrying it.
type Reply = (u16, Response<Body>);

/// A request refused: the status code and the `Status` body the real server answers with.
struct Refused(u16, Value);

fn reply(code: u16, value: Value) -> Reply {
    (code, json(code, &value))
}

fn not_found(target: &Target, name: &str) -> Refused {
    Refused(404, default_status(404, &target.plural, name))
}

fn bad_request(message: &str) -> Refused {
    Refused(400, status_body(400, "BadRequest", message, None))
}

/// The body a write needs: a JSON object that decodes as `ty` (its `MicroTime` fields with
/// the six fractional digits the real server's decoder insists on).
fn object_body(ty: &ResourceType, body: Option<Value>) -> Result<Value, Refused> {
    match body {
        Some(object @ Value::Object(_)) => {
            check_micro_times(ty, &object)?;
            Ok(object)
        }
        _ => Err(bad_request("the body of the request was not valid JSON")),
    }
}

/// The real server decodes a `MicroTime` (a Lease's `acquireTime` and `renewTime`, an
/// events.k8s.io Event's `eventTime`) with Go's layout `2006-01-02T15:04:05.000000Z07:00`
/// only: anything else, `2026-01-01T00:00:00Z` included, is a 400 before validation.
fn check_micro_times(ty: &ResourceType, object: &Value) -> Result<(), Refused> {
    let fields: &[&str] = match (ty.group.as_str(), ty.kind.as_str()) {
        ("coordination.k8s.io", "Lease") => &["/spec/acquireTime", "/spec/renewTime"],
        ("events.k8s.io", "Event") => &["/eventTime", "/series/lastObservedTime"],
        _ => &[],
    };
    for pointer in fields {
        let Some(text) = object.pointer(pointer).and_then(Value::as_str) else {
            continue;
        };
        if !is_micro_time(text) {
            let layout = "2006-01-02T15:04:05.000000Z07:00";
            let message = format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: parsing time \"{text}\" as \"{layout}\": cannot parse \"{rest}\" as \".000000\"",
                kind = ty.kind,
                version = ty.version,
                rest = text.get(19..).unwrap_or_default(),
            );
            return Err(bad_request(&message));
        }
    }
    Ok(())
}

/// `YYYY-MM-DDTHH:MM:SS.ffffff` then `Z` or `+hh:mm`/`-hh:mm`.
fn is_micro_time(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        b.get(range)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
    };
    let zone = match b.get(26..) {
        Some(b"Z") => true,
        Some([sign, h1, h2, b':', m1, m2]) => {
            matches!(sign, b'+' | b'-') && [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit())
        }
        _ => false,
    };
    digits(0..4)
        && b.get(4) == Some(&b'-')
        && digits(5..7)
        && b.get(7) == Some(&b'-')
        && digits(8..10)
        && b.get(10) == Some(&b'T')
        && digits(11..13)
        && b.get(13) == Some(&b':')
        && digits(14..16)
        && b.get(16) == Some(&b':')
        && digits(17..19)
        && b.get(19) == Some(&b'.')
        && digits(20..26)
        && zone
}

/// The object stored under `key`, or the 404 the real server answers for it.
fn stored(state: &State, target: &Target, key: &Key, name: &str) -> Result<Value, Refused> {
    state.resources[target.index]
        .objects
        .get(key)
        .cloned()
        .ok_or_else(|| not_found(target, name))
}

/// One request to a resource, by verb. A verb that refuses the request says why with the
/// `Status` the real server words it with.
fn dispatch(
    state: &mut State,
    method: &Method,
    target: &Target,
    query: &HashMap<String, String>,
    sender: &Sender<'_>,
    body: Option<Value>,
    shared: &Arc<Shared>,
) -> Reply {
    let answer = match (method, &target.name) {
        (&Method::GET, Some(name)) => get(state, target, name),
        (&Method::GET, None) => {
            let labels = parse_selector(query.get("labelSelector").map_or("", String::as_str));
            let fields = parse_selector(query.get("fieldSelector").map_or("", String::as_str));
            if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
                Ok(watch(state, target, query, labels, fields, shared))
            } else {
                Ok(list(state, target, query, &labels, &fields))
            }
        }
        (&Method::POST, None) => create(state, target, sender.manager, body),
        (&Method::PUT, Some(name)) => update(state, target, name, sender.manager, body),
        (&Method::PATCH, Some(name)) => patch(state, target, name, sender, body),
        (&Method::DELETE, Some(name)) => delete(state, target, name, body.as_ref()),
        _ => Err(Refused(
            405,
            status_body(
                405,
                "MethodNotAllowed",
                &format!("{method} is not supported on this path by the fake"),
                None,
            ),
        )),
    };
    answer.unwrap_or_else(|Refused(code, status)| reply(code, status))
}

fn get(state: &State, target: &Target, name: &str) -> Result<Reply, Refused> {
    let key = object_key(target.namespace.as_deref(), name);
    Ok(reply(200, stored(state, target, &key, name)?))
}

fn create(
    state: &mut State,
    target: &Target,
    manager: &str,
    body: Option<Value>,
) -> Result<Reply, Refused> {
    let ty = state.resources[target.index].ty.clone();
    let url_namespace = target.namespace.clone().unwrap_or_default();
    let mut object = object_body(&ty, body)?;
    place_in_namespace(&ty, &mut object, &url_namespace)?;
    let name = name_to_create(state, &ty, &object)?;
    object["metadata"]["name"] = name.clone().into();
    // The NamespaceLifecycle admission plugin: no creating into a missing namespace.
    if ty.namespaced && !state.namespace_exists(&url_namespace) {
        return Err(Refused(
            404,
            default_status(404, "namespaces", &url_namespace),
        ));
    }
    if object["metadata"]
        .get("resourceVersion")
        .is_some_and(|rv| !rv.is_null() && rv != "")
    {
        return Err(Refused(
            500,
            status_body(
                500,
                "InternalError",
                "resourceVersion should not be set on objects to be created",
                None,
            ),
        ));
    }
    object["apiVersion"] = ty.api_version().into();
    object["kind"] = ty.kind.clone().into();
    let key = object_key(ty.namespaced.then_some(url_namespace.as_str()), &name);
    // A create ignores the status when there is a status subresource (then the defaults give
    // a Service `status.loadBalancer: {}`, as the real server's do).
    if ty.status_subresource
        && let Some(fields) = object.as_object_mut()
    {
        fields.remove("status");
    }
    admit(state, &ty, &key, &mut object, None).map_err(|status| Refused(422, status))?;
    if state.resources[target.index].objects.contains_key(&key) {
        let message = format!("{} \"{name}\" already exists", target.plural);
        let details = serde_json::json!({"name": name, "kind": target.plural});
        return Err(Refused(
            409,
            status_body(409, "AlreadyExists", &message, Some(details)),
        ));
    }
    state.stamp_created(&mut object);
    ty.stamp_generation(&mut object, None);
    managed::track(None, &mut object, manager, "");
    Ok(store(state, target, key, object, "ADDED", 201))
}

/// Stores a created (`ADDED`) or changed (`MODIFIED`) object and answers `code` with it as
/// stored, with its new resourceVersion.
fn store(
    state: &mut State,
    target: &Target,
    key: Key,
    object: Value,
    event: &'static str,
    code: u16,
) -> Reply {
    state.store(target.index, key.clone(), object, event);
    reply(code, state.resources[target.index].objects[&key].clone())
}

/// `EnsureObjectNamespaceMatchesRequestNamespace`: an empty namespace is filled in, a
/// different one refused; a cluster-scoped object loses any namespace it names.
fn place_in_namespace(
    ty: &ResourceType,
    object: &mut Value,
    url_namespace: &str,
) -> Result<(), Refused> {
    if ty.namespaced {
        match object["metadata"]["namespace"].as_str() {
            Some(ns) if !ns.is_empty() && ns != url_namespace => {
                return Err(bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => object["metadata"]["namespace"] = url_namespace.into(),
        }
    } else if let Some(meta) = object["metadata"].as_object_mut() {
        meta.remove("namespace");
    }
    Ok(())
}

/// The name a created object gets: its own, or one generated from `generateName`.
fn name_to_create(state: &mut State, ty: &ResourceType, object: &Value) -> Result<String, Refused> {
    match object["metadata"]["name"].as_str() {
        Some(name) if !name.is_empty() => Ok(name.to_owned()),
        _ => match object["metadata"]["generateName"].as_str() {
            Some(prefix) => Ok(format!("{prefix}{:05x}", state.next_id())),
            None => {
                let cause = Cause {
                    message: "Required value: name or generateName is required".into(),
                    ..Cause::required("metadata.name")
                };
                Err(Refused(422, invalid_status(ty, "", &[cause])))
            }
        },
    }
}

fn update(
    state: &mut State,
    target: &Target,
    name: &str,
    manager: &str,
    body: Option<Value>,
) -> Result<Reply, Refused> {
    let ty = state.resources[target.index].ty.clone();
    let mut object = object_body(&ty, body)?;
    check_name(
        &object,
        name,
        target.namespace.as_deref().unwrap_or_default(),
    )
    .map_err(|message| bad_request(&message))?;
    let key = object_key(target.namespace.as_deref(), name);
    let current = stored(state, target, &key, name)?;
    check_update_preconditions(target, name, &object, &current)?;
    object["apiVersion"] = ty.api_version().into();
    object["kind"] = ty.kind.clone().into();
    object["metadata"]["uid"] = current["metadata"]["uid"].clone();
    object["metadata"]["creationTimestamp"] = current["metadata"]["creationTimestamp"].clone();
    if ty.namespaced {
        object["metadata"]["namespace"] = key.0.clone().into();
    }
    split_status(&ty, target.status, &current, &mut object);
    ty.stamp_generation(&mut object, Some(&current));
    admit(state, &ty, &key, &mut object, Some(&current)).map_err(|status| Refused(422, status))?;
    managed::carry_over(&current, &mut object);
    if object == current_without_rv(&current, &object) {
        // A no-op update keeps the resourceVersion and emits no event, like the real server.
        return Ok(reply(200, current));
    }
    managed::track(Some(&current), &mut object, manager, subresource(target));
    Ok(store(state, target, key, object, "MODIFIED", 200))
}

/// The uid a client sends is a precondition (`defaultUpdatedObjectInfo`), and so is a
/// resourceVersion: either one differing from the stored object's is a 409 `Conflict`.
fn check_update_preconditions(
    target: &Target,
    name: &str,
    object: &Value,
    current: &Value,
) -> Result<(), Refused> {
    if let Some(uid) = object["metadata"]["uid"].as_str().filter(|u| !u.is_empty())
        && Some(uid) != current["metadata"]["uid"].as_str()
    {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            target.plural,
            current["metadata"]["uid"].as_str().unwrap_or_default()
        );
        let details = serde_json::json!({"name": name, "kind": target.plural});
        return Err(Refused(
            409,
            status_body(409, "Conflict", &message, Some(details)),
        ));
    }
    if let Some(sent) = object["metadata"]["resourceVersion"]
        .as_str()
        .filter(|rv| !rv.is_empty())
        && Some(sent) != current["metadata"]["resourceVersion"].as_str()
    {
        return Err(Refused(409, default_status(409, &target.plural, name)));
    }
    Ok(())
}

fn patch(
    state: &mut State,
    target: &Target,
    name: &str,
    sender: &Sender<'_>,
    body: Option<Value>,
) -> Result<Reply, Refused> {
    let content_type = sender.content_type;
    if !content_type.starts_with("application/merge-patch+json")
        && !content_type.starts_with("application/strategic-merge-patch+json")
    {
        return Err(Refused(
            415,
            status_body(
                415,
                "UnsupportedMediaType",
                &format!("the fake API server does not support patch type {content_type}"),
                None,
            ),
        ));
    }
    let Some(patch) = body else {
        return Err(bad_request("the body of the request was not valid JSON"));
    };
    let ty = state.resources[target.index].ty.clone();
    let key = object_key(target.namespace.as_deref(), name);
    let current = stored(state, target, &key, name)?;
    if let Some(sent) = patch["metadata"]["resourceVersion"].as_str()
        && Some(sent) != current["metadata"]["resourceVersion"].as_str()
    {
        return Err(Refused(409, default_status(409, &target.plural, name)));
    }
    let mut object = current.clone();
    merge_patch(&mut object, &patch);
    check_name(
        &object,
        name,
        target.namespace.as_deref().unwrap_or_default(),
    )
    .map_err(|message| bad_request(&message))?;
    if object["metadata"]["uid"] != current["metadata"]["uid"] {
        let cause = Cause::invalid(
            "metadata.uid",
            &object["metadata"]["uid"],
            "field is immutable",
        );
        return Err(Refused(422, invalid_status(&ty, name, &[cause])));
    }
    split_status(&ty, target.status, &current, &mut object);
    ty.stamp_generation(&mut object, Some(&current));
    admit(state, &ty, &key, &mut object, Some(&current)).map_err(|status| Refused(422, status))?;
    if object == current {
        return Ok(reply(200, current));
    }
    managed::track(
        Some(&current),
        &mut object,
        sender.manager,
        subresource(target),
    );
    Ok(store(state, target, key, object, "MODIFIED", 200))
}

fn delete(
    state: &mut State,
    target: &Target,
    name: &str,
    options: Option<&Value>,
) -> Result<Reply, Refused> {
    let key = object_key(target.namespace.as_deref(), name);
    if let (Some(options), Some(current)) =
        (options, state.resources[target.index].objects.get(&key))
    {
        check_delete_preconditions(target, name, &options["preconditions"], current)?;
    }
    let object = state
        .remove_key(target.index, &key)
        .ok_or_else(|| not_found(target, name))?;
    let orphan = options.is_some_and(|o| o["propagationPolicy"] == "Orphan");
    if !orphan && let Some(uid) = object["metadata"]["uid"].as_str() {
        state.collect_garbage(uid);
    }
    let ty = &state.resources[target.index].ty;
    Ok(reply(200, deleted_answer(ty, target, name, object)))
}

/// What the real server answers a DELETE with: the object for the kinds whose storage returns
/// it (Services, Pods, Namespaces, custom resources), a `Status` naming it for the rest
/// (ConfigMaps, Leases, Events, Ingresses, Deployments...).
/// The API groups built into kube-apiserver that the fake serves; every other group is a
/// custom resource's (served from unstructured storage).
const BUILT_IN: [&str; 6] = [
    "",
    "apps",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "networking.k8s.io",
];

fn is_built_in(ty: &ResourceType) -> bool {
    BUILT_IN.contains(&ty.group.as_str())
}

fn deleted_answer(ty: &ResourceType, target: &Target, name: &str, object: Value) -> Value {
    let returns_object =
        matches!(target.plural.as_str(), "services" | "pods" | "namespaces") || !is_built_in(ty);
    if returns_object {
        return object;
    }
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "kind": target.plural, "uid": object["metadata"]["uid"]},
    })
}

/// `DeleteOptions.preconditions`, checked like the real server (409 on a mismatch).
fn check_delete_preconditions(
    target: &Target,
    name: &str,
    preconditions: &Value,
    current: &Value,
) -> Result<(), Refused> {
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
            return Err(Refused(
                409,
                status_body(409, "Conflict", &message, Some(details)),
            ));
        }
    }
    Ok(())
}

/// The subresource a write goes to, as managedFields name it.
fn subresource(target: &Target) -> &'static str {
    if target.status { "status" } else { "" }
}

/// With a status subresource, a write to the object keeps the current status and a write to
/// `/status` keeps everything but the status.
fn split_status(ty: &ResourceType, on_status: bool, current: &Value, object: &mut Value) {
    if !ty.status_subresource {
        return;
    }
    if on_status {
        let status = object["status"].take();
        *object = current.clone();
        object["status"] = status;
        if object["status"].is_null()
            && let Some(fields) = object.as_object_mut()
        {
            fields.remove("status");
        }
    } else {
        object["status"] = current["status"].clone();
        if current.get("status").is_none()
            && let Some(fields) = object.as_object_mut()
        {
            fields.remove("status");
        }
    }
}

/// `checkName` of an update or a patch: the object's name and namespace must be the URL's.
fn check_name(object: &Value, name: &str, namespace: &str) -> Result<(), String> {
    let object_name = object["metadata"]["name"].as_str().unwrap_or_default();
    if object_name != name {
        return Err(format!(
            "the name of the object ({object_name}) does not match the name on the URL ({name})"
        ));
    }
    let object_namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    if !namespace.is_empty() && !object_namespace.is_empty() && object_namespace != namespace {
        return Err(format!(
            "the namespace of the object ({object_namespace}) does not match the namespace on the URL ({namespace})"
        ));
    }
    Ok(())
}

/// What the server does to an object between decoding and storing it: defaults and
/// allocation (Services), then validation. `Err` is the 422 Status.
fn admit(
    state: &State,
    ty: &ResourceType,
    key: &Key,
    object: &mut Value,
    old: Option<&Value>,
) -> Result<(), Value> {
    let mut causes = if ty.kind == "Service" && ty.group.is_empty() {
        state.admit_service(object, key, old)
    } else {
        Vec::new()
    };
    causes.extend(validate(ty, object, old));
    if causes.is_empty() {
        Ok(())
    } else {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        Err(invalid_status(ty, name, &causes))
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

/// A continue token: the snapshot's resourceVersion and the last key returned (opaque to
/// clients, like the real server's).
fn continue_token(rv: u64, last: &Key) -> String {
    format!("{rv}/{}/{}", last.0, last.1)
}

fn parse_continue(token: &str) -> Option<(u64, Key)> {
    let mut parts = token.splitn(3, '/');
    let rv = parts.next()?.parse().ok()?;
    Some((rv, (parts.next()?.to_owned(), parts.next()?.to_owned())))
}

/// A list, page by page. Every page is read at the first page's resourceVersion (a consistent
/// snapshot, as etcd gives the real server), so a watch from that resourceVersion replays
/// exactly what the pages missed.
fn list(
    state: &State,
    target: &Target,
    query: &HashMap<String, String>,
    labels: &[Requirement],
    fields: &[Requirement],
) -> (u16, Response<Body>) {
    let resource = &state.resources[target.index];
    let (rv, after) = match query.get("continue").filter(|c| !c.is_empty()) {
        None => (state.rv, None),
        Some(token) => match parse_continue(token) {
            Some((rv, last)) => (rv, Some(last)),
            None => {
                let status = status_body(
                    400,
                    "BadRequest",
                    &format!("continue key is not valid: {token}"),
                    None,
                );
                return (400, json(400, &status));
            }
        },
    };
    let Some(objects) = state.objects_at(target.index, rv) else {
        let status = status_body(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            None,
        );
        return (410, json(410, &status));
    };
    let matching: Vec<(&Key, &Value)> = objects
        .into_iter()
        .filter(|(key, _)| after.as_ref().is_none_or(|last| *key > last))
        .filter(|(_, o)| selected(o, target.namespace.as_deref(), labels, fields))
        .collect();
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    // The real server leaves `kind` and `apiVersion` out of a built-in kind's list items
    // (watch events and single objects carry them); a custom resource's items, served from
    // unstructured storage, keep them.
    let strip = is_built_in(&resource.ty);
    let page: Vec<Value> = matching
        .iter()
        .take(limit)
        .map(|(_, o)| {
            let mut item = (*o).clone();
            if let Some(fields) = item.as_object_mut().filter(|_| strip) {
                fields.remove("kind");
                fields.remove("apiVersion");
            }
            item
        })
        .collect();
    let mut metadata = serde_json::json!({ "resourceVersion": rv.to_string() });
    if page.len() < matching.len() {
        let (last, _) = matching[page.len() - 1];
        metadata["continue"] = continue_token(rv, last).into();
        metadata["remainingItemCount"] = (matching.len() - page.len()).into();
    }
    let body = serde_json::json!({
        "kind": format!("{}List", resource.ty.kind),
        "apiVersion": resource.ty.api_version(),
        "metadata": metadata,
        "items": page,
    });
    (200, json(200, &body))
}

/// What a watch request asks for, from its query.
struct WatchQuery {
    /// Events after this resourceVersion (None: from the current state).
    since: Option<u64>,
    bookmarks: bool,
    initial_events: bool,
    timeout: Duration,
}

impl WatchQuery {
    fn parse(query: &HashMap<String, String>) -> Self {
        Self {
            since: query
                .get("resourceVersion")
                .filter(|rv| !rv.is_empty() && *rv != "0")
                .and_then(|rv| rv.parse().ok()),
            bookmarks: query
                .get("allowWatchBookmarks")
                .is_some_and(|b| b == "true"),
            initial_events: query.get("sendInitialEvents").is_some_and(|b| b == "true"),
            timeout: query
                .get("timeoutSeconds")
                .and_then(|t| t.parse().ok())
                .map_or(Duration::from_secs(290), Duration::from_secs),
        }
    }
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
    let asked = WatchQuery::parse(query);
    let current_rv = state.rv;
    let resource = &state.resources[target.index];
    let selection = (target.namespace.as_deref(), &labels[..], &fields[..]);
    if !replay(resource, &asked, selection, current_rv, &tx) {
        drop(tx);
        return (200, stream_response(rx));
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
        tokio::time::sleep(asked.timeout).await;
        let mut state = shared.lock();
        let rv = state.rv;
        if let Some(watcher) = state.remove_watcher(id)
            && asked.bookmarks
        {
            let _ = watcher.tx.unbounded_send(watch_line(
                "BOOKMARK",
                &bookmark(&api_version, &kind, rv, false),
            ));
        }
    });
    (200, stream_response(rx))
}

/// The events a new watch starts with: the changes since the resourceVersion asked for, or
/// the current objects as ADDED (then a BOOKMARK when initial events were asked for). False
/// when that resourceVersion is compacted: the watch gets a 410 `Expired` ERROR event and ends.
fn replay(
    resource: &Resource,
    asked: &WatchQuery,
    (namespace, labels, fields): (Option<&str>, &[Requirement], &[Requirement]),
    current_rv: u64,
    tx: &futures::channel::mpsc::UnboundedSender<Bytes>,
) -> bool {
    match asked.since {
        Some(rv) if rv + 1 < resource.compacted_below && !asked.initial_events => {
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
            return false;
        }
        Some(rv) if !asked.initial_events => {
            for change in &resource.history {
                if change.rv > rv && selected(&change.object, namespace, labels, fields) {
                    let _ = tx.unbounded_send(watch_line(change.event, &change.object));
                }
            }
        }
        _ => {
            for object in resource.objects.values() {
                if selected(object, namespace, labels, fields) {
                    let _ = tx.unbounded_send(watch_line("ADDED", object));
                }
            }
            if asked.initial_events {
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
    true
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
