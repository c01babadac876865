//! An in-process fake Kubernetes API server for tests, reached through a real `kube::Client`
//! over loopback HTTP.
//!
//! It answers the verbs hairpin uses the way kube-apiserver 1.31 does: one object store per
//! resource with a cluster-wide, monotonically increasing `resourceVersion`; GET, LIST (with
//! equality label and field selectors, `limit`/`continue` paging where every page is read at
//! the first page's resourceVersion), WATCH (JSON lines of ADDED/MODIFIED/DELETED, BOOKMARK
//! when asked, and an `ERROR` event carrying a 410 `Expired` Status for a compacted
//! resourceVersion), CREATE (409 `AlreadyExists`; 404 for a namespace that does not exist),
//! UPDATE (409 `Conflict` on a stale resourceVersion or another uid), merge PATCH and DELETE
//! (404 `NotFound`), with the real server's `Status` bodies. Writes are defaulted and
//! validated as the real server does (Service ClusterIP allocation and immutability, names,
//! labels, ports, ConfigMap keys and size, Lease and Event limits: 422 `Invalid` with causes).
//! Writes through the API keep `metadata.managedFields` (the writer from `fieldManager` or the
//! User-Agent, see `managed.rs`); objects put in the store directly have none.
//! Discovery (`/api`, `/apis`) lists the registered types; anything else, such as an absent
//! CRD, answers a plain-text `404 page not found`.
//! Authorization is off unless a test limits the client to RBAC-like grants
//! ([`FakeApiServer::authorize_only`]); then any other request is a 403 `Forbidden` worded as
//! the real server words it. Faults can be injected: the next N requests matching a method and path fail with a given
//! code, or are delayed; open watches can be dropped and history compacted; the server can go
//! down (connections refused, open connections and watches cut) and come back on the same
//! address ([`FakeApiServer::go_down`], [`FakeApiServer::come_back`]).
#![forbid(unsafe_code)]

mod http;
mod managed;
mod rbac;
mod resource;
mod service;
mod store;
mod validation;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Notify;

pub use rbac::Grant;
pub use resource::ResourceType;
use store::State;

/// What an injected fault does to a matching request.
#[derive(Clone, Debug)]
pub enum FaultKind {
    /// Answer with this HTTP status and the matching `Status` body (403, 404, 409, 410, 429,
    /// 500, 503, 504).
    Status(u16),
    /// Wait this long, then answer normally.
    Delay(Duration),
    /// Answer `200` with the object as stored, the request not applied: what a client sees
    /// when an admission webhook or another writer undid its change (the answer does not
    /// hold what it wrote).
    Unapplied,
}

/// One injected fault: applies to the next `remaining` requests whose method matches (or any,
/// when `None`) and whose path contains `path_contains`.
#[derive(Clone, Debug)]
pub struct Fault {
    /// HTTP method to match (`GET`, `PUT`...), or any.
    pub method: Option<String>,
    /// Substring of the request path (and query) to match.
    pub path_contains: String,
    /// How many more requests it applies to.
    pub remaining: usize,
    /// What it does.
    pub kind: FaultKind,
}

/// One request the fake answered, for assertions.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// Status code answered.
    pub status: u16,
    /// When the answer was produced.
    pub at: Instant,
    /// The request body, parsed as JSON when it was JSON.
    pub body: Option<Value>,
}

/// A running fake API server. Dropping it stops the listener task.
#[derive(Debug)]
pub struct FakeApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// The accept loop, `None` while the server is down.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    changed: Notify,
    /// Bumped when the server goes down: every open connection ends.
    pub(crate) epoch: tokio::sync::watch::Sender<u64>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        if let Some(task) = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
        self.shared.epoch.send_modify(|e| *e += 1);
        self.shared.lock().close_watches();
    }
}

/// A listener on `addr` (port 0: a free one), with `SO_REUSEADDR` so the same address can be
/// bound again after [`FakeApiServer::go_down`].
fn listen(addr: SocketAddr) -> tokio::net::TcpListener {
    let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
    socket.set_reuseaddr(true).expect("SO_REUSEADDR");
    socket
        .bind(addr)
        .expect("bind a loopback port for the fake API server");
    socket.listen(1024).expect("listen")
}

impl FakeApiServer {
    /// Starts a fake on a free loopback port, with the built-in resources hairpin uses
    /// registered (Namespaces, Services, ConfigMaps, Leases, Events, Ingresses, IngressClasses),
    /// and the Gateway API absent.
    pub async fn start() -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::with_builtin_types()),
            changed: Notify::new(),
            epoch: tokio::sync::watch::Sender::new(0),
        });
        let listener = listen(SocketAddr::from(([127, 0, 0, 1], 0)));
        let addr = listener
            .local_addr()
            .expect("bound listener has an address");
        let task = tokio::spawn(http::serve(listener, shared.clone()));
        Self {
            addr,
            shared,
            task: Mutex::new(Some(task)),
        }
    }

    /// Takes the server down, as a stopped kube-apiserver is: new connections are refused,
    /// open ones (and their watches) end. The store is kept. No-op when already down.
    pub fn go_down(&self) {
        let task = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            task.abort();
        }
        self.shared.epoch.send_modify(|e| *e += 1);
        self.shared.lock().close_watches();
    }

    /// Brings the server back on the same address after [`FakeApiServer::go_down`]. With
    /// `compacted`, the watch history is gone, as after a restart with a compacted etcd: a
    /// watch resumed from an earlier resourceVersion gets 410 `Expired` and must list again.
    /// No-op when it is up.
    pub fn come_back(&self, compacted: bool) {
        let mut task = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if task.is_some() {
            return;
        }
        if compacted {
            self.shared.lock().compact();
        }
        let listener = listen(self.addr);
        *task = Some(tokio::spawn(http::serve(listener, self.shared.clone())));
    }

    /// Whether the server is up (not taken down by [`FakeApiServer::go_down`]).
    pub fn is_up(&self) -> bool {
        self.task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }

    /// The server's base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `kube::Client` talking to this fake over HTTP, with `default` as default namespace.
    pub fn client(&self) -> kube::Client {
        let uri: hyper::Uri = self.url().parse().expect("a valid URL");
        let mut config = kube::Config::new(uri);
        config.default_namespace = "default".into();
        kube::Client::try_from(config).expect("a client for the fake API server")
    }

    /// A kubeconfig file's content pointing at this fake (context `fake`), for driving the
    /// binary.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\n\
             current-context: fake\nusers:\n- name: fake\n  user:\n    token: fake-token\n",
            self.url()
        )
    }

    /// Writes [`FakeApiServer::kubeconfig_yaml`] to `dir/kubeconfig` and returns its path,
    /// for driving a binary with `--kubeconfig`.
    ///
    /// # Panics
    /// When the file cannot be written.
    pub fn write_kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(&path, self.kubeconfig_yaml()).expect("write the kubeconfig");
        path
    }

    /// Registers hairpin's `Hairpin` kind (`hairpin.io/v1alpha1`, with its status
    /// subresource), as if the chart's CRD were installed.
    pub fn install_hairpin_crd(&self) {
        self.register(
            ResourceType::new("hairpin.io", "v1alpha1", "hairpins", "Hairpin", true)
                .with_status_subresource(),
        );
    }

    /// Registers the Gateway API kinds hairpin reads (as if the CRDs were installed).
    pub fn install_gateway_api(&self) {
        self.install_gateway_api_kinds(&[
            ("GatewayClass", "v1"),
            ("Gateway", "v1"),
            ("HTTPRoute", "v1"),
            ("GRPCRoute", "v1"),
            ("TLSRoute", "v1"),
        ]);
    }

    /// Registers these Gateway API kinds, each at its version only, as an older Gateway API
    /// release installs them (e.g. `("TLSRoute", "v1alpha2")`).
    ///
    /// # Panics
    /// On a kind that is not `GatewayClass`, `Gateway`, `HTTPRoute`, `GRPCRoute` or `TLSRoute`.
    pub fn install_gateway_api_kinds(&self, kinds: &[(&str, &str)]) {
        let mut state = self.shared.lock();
        for &(kind, version) in kinds {
            let plural = match kind {
                "GatewayClass" => "gatewayclasses",
                "Gateway" => "gateways",
                "HTTPRoute" => "httproutes",
                "GRPCRoute" => "grpcroutes",
                "TLSRoute" => "tlsroutes",
                other => panic!("{other} is not a Gateway API kind hairpin reads"),
            };
            state.register(ResourceType::new(
                "gateway.networking.k8s.io",
                version,
                plural,
                kind,
                // GatewayClasses are cluster-scoped.
                kind != "GatewayClass",
            ));
        }
    }

    /// Installs external-dns's `DNSEndpoint` CRD (`externaldns.k8s.io/v1alpha1`, plural
    /// `dnsendpoints`, namespaced, with the `status` subresource and `metadata.generation`, as
    /// `charts/external-dns/crds/dnsendpoint.yaml` defines it). Without it the kind is not
    /// served: discovery does not list it and its paths answer `404 page not found`.
    pub fn install_external_dns_crd(&self) {
        self.register(
            ResourceType::new(
                "externaldns.k8s.io",
                "v1alpha1",
                "dnsendpoints",
                "DNSEndpoint",
                true,
            )
            .with_status_subresource()
            .with_generation(),
        );
    }

    /// Makes the cluster dual-stack, IPv4 primary: Services may ask for IPv4 and IPv6
    /// ClusterIPs (from `10.96.0.0/12` and `fd00:10:96::/108`), and `PreferDualStack` or
    /// `RequireDualStack` ones get both. By default it is IPv4 only.
    pub fn dual_stack(&self) {
        self.shared.lock().net.families = service::ServiceNet::DUAL_STACK.families;
    }

    /// Turns the `LoadBalancerIPMode` feature gate on or off (on by default, as since 1.30).
    /// Off, the server drops the `ipMode` a client writes into a Service status that had
    /// none, as kube-apiserver `--feature-gates=LoadBalancerIPMode=false` does.
    pub fn set_ip_mode_gate(&self, on: bool) {
        self.shared.lock().net.ip_mode_gate = on;
    }

    /// Sets what `/version` answers as `gitVersion` (`v1.31.14` by default).
    pub fn set_version(&self, git_version: &str) {
        self.shared.lock().git_version = git_version.to_owned();
    }

    /// Makes the cluster IPv6 only: Services get IPv6 ClusterIPs from `fd00:10:96::/108`, an
    /// IPv4 family is refused, and `PreferDualStack` gives one family, as on a real IPv6-only
    /// cluster.
    pub fn ipv6_only(&self) {
        self.shared.lock().net.families = service::ServiceNet::IPV6.families;
    }

    /// Sets the IPv4 service range (kube-apiserver's `--service-cluster-ip-range`, default
    /// `10.96.0.0/12`) from which ClusterIPs are allocated. A test that connects to the
    /// ClusterIPs the fake allocates uses a range inside `127.0.0.0/8`, so its traffic stays on
    /// loopback and it can listen on them.
    ///
    /// # Panics
    /// When `cidr` is not an IPv4 CIDR with a prefix from 8 to 30.
    pub fn service_cidr(&self, cidr: &str) {
        let (base, prefix) = cidr.split_once('/').expect("a CIDR: address/prefix");
        let base: std::net::Ipv4Addr = base.parse().expect("an IPv4 network address");
        let prefix: u8 = prefix.parse().expect("a prefix length");
        assert!((8..=30).contains(&prefix), "prefix {prefix} out of 8..=30");
        self.shared.lock().net.v4 = Some((base, prefix));
    }

    /// Creates a Namespace (`default`, `kube-system`, `kube-public` and `kube-node-lease`
    /// exist from the start; [`FakeApiServer::apply`] creates the namespace of what it
    /// stores). Creating an object through the API in a namespace that does not exist fails
    /// with 404, as on a real cluster.
    pub fn create_namespace(&self, name: &str) {
        self.shared.lock().ensure_namespace(name);
        self.shared.changed.notify_waiters();
    }

    /// Registers another resource type.
    pub fn register(&self, resource: ResourceType) {
        self.shared.lock().register(resource);
    }

    /// Creates or replaces an object directly in the store (as another client would),
    /// notifying watchers. `object` needs `apiVersion`, `kind` and `metadata.name`. Its
    /// namespace is created if missing, and a Service gets the server's defaults and a
    /// ClusterIP, but nothing is validated (fixtures may be what a tenant could not create).
    /// Returns the new resourceVersion.
    pub fn apply(&self, object: Value) -> u64 {
        let rv = self
            .shared
            .lock()
            .upsert(object)
            .expect("a storable object");
        self.shared.changed.notify_waiters();
        rv
    }

    /// Deletes an object directly in the store, notifying watchers. True if it existed.
    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> bool {
        let mut state = self.shared.lock();
        let removed = state.remove(api_version, kind, namespace, name);
        if let Some(uid) = removed.as_ref().and_then(|o| o["metadata"]["uid"].as_str()) {
            state.collect_garbage(uid);
        }
        drop(state);
        self.shared.changed.notify_waiters();
        removed.is_some()
    }

    /// The stored object, if any.
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        self.shared.lock().get(api_version, kind, namespace, name)
    }

    /// All stored objects of a kind (in every namespace), ordered by namespace and name.
    pub fn list(&self, api_version: &str, kind: &str) -> Vec<Value> {
        self.shared.lock().list_kind(api_version, kind)
    }

    /// Inserts many objects at once with one notification (for large caches).
    pub fn apply_many(&self, objects: impl IntoIterator<Item = Value>) {
        let mut state = self.shared.lock();
        for object in objects {
            state.upsert(object).expect("a storable object");
        }
        drop(state);
        self.shared.changed.notify_waiters();
    }

    /// From now on, authorizes every resource request as kube-apiserver's RBAC authorizer
    /// does for a ServiceAccount bound to exactly `grants`: anything they do not allow is
    /// answered 403 `Forbidden`. Discovery stays open (every authenticated user may read it).
    pub fn authorize_only(&self, grants: impl IntoIterator<Item = Grant>) {
        self.shared.lock().grants = Some(grants.into_iter().collect());
    }

    /// Injects a fault.
    pub fn inject(&self, fault: Fault) {
        self.shared.lock().faults.push(fault);
    }

    /// The next `n` requests with this method whose path contains `path_contains` fail with
    /// `status`.
    pub fn fail_next(&self, method: &str, path_contains: &str, n: usize, status: u16) {
        self.inject(Fault {
            method: Some(method.to_owned()),
            path_contains: path_contains.to_owned(),
            remaining: n,
            kind: FaultKind::Status(status),
        });
    }

    /// Ends every open watch (as a dropped connection or an apiserver restart would).
    pub fn drop_watches(&self) {
        self.shared.lock().close_watches();
    }

    /// Forgets the watch history, so resuming a watch from an older resourceVersion gets the
    /// 410 `Expired` error event (as after etcd compaction).
    pub fn compact(&self) {
        self.shared.lock().compact();
    }

    /// Requests answered so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().log.clone()
    }

    /// Number of open watches.
    pub fn open_watches(&self) -> usize {
        self.shared.lock().open_watches()
    }

    /// Waits until `check` holds on the store, polling on every change and at least every
    /// 5 ms, up to `timeout`. Returns the instant it first held, or `None` on timeout.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        mut check: impl FnMut(&Self) -> bool,
    ) -> Option<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.shared.changed.notified();
            if check(self) {
                return Some(Instant::now());
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            let wait = (deadline - now).min(Duration::from_millis(5));
            let _ = tokio::time::timeout(wait, notified).await;
        }
    }

    /// Counts the recorded requests matching a method and a path substring.
    pub fn count(&self, method: &str, path_contains: &str) -> usize {
        self.shared
            .lock()
            .log
            .iter()
            .filter(|r| r.method == method && r.uri.contains(path_contains))
            .count()
    }
}

/// Builds an object with `apiVersion`, `kind`, and `metadata` from name/namespace/labels,
/// merged with `rest` (for tests).
pub fn object(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    rest: Value,
) -> Value {
    let mut metadata = serde_json::Map::new();
    metadata.insert("name".into(), name.into());
    if let Some(ns) = namespace {
        metadata.insert("namespace".into(), ns.into());
    }
    let mut value =
        serde_json::json!({ "apiVersion": api_version, "kind": kind, "metadata": metadata });
    if let (Some(target), Value::Object(rest)) = (value.as_object_mut(), rest) {
        for (key, val) in rest {
            if key == "metadata" {
                if let (Some(Value::Object(meta)), Value::Object(extra)) =
                    (target.get_mut("metadata"), val)
                {
                    meta.extend(extra);
                }
            } else {
                target.insert(key, val);
            }
        }
    }
    value
}

/// Objects of the cluster most hairpin tests start from: a PROXY load balancer, Ingresses on
/// it, CoreDNS.
pub mod fixtures {
    use serde_json::{Value, json};

    use super::object;

    /// `ingress-nginx/ingress-nginx-controller`, a `type: LoadBalancer` Service with the
    /// provider annotation `proxy_annotation` set to `"true"`, `ports`, and `ip` as its
    /// status address (`ipMode: VIP`, the short-circuited case).
    pub fn proxy_load_balancer(proxy_annotation: &str, ip: &str, ports: Value) -> Value {
        object(
            "v1",
            "Service",
            Some("ingress-nginx"),
            "ingress-nginx-controller",
            json!({
                "metadata": {"annotations": {proxy_annotation: "true"}},
                "spec": {"type": "LoadBalancer", "ports": ports},
                "status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"}]}}
            }),
        )
    }

    /// An Ingress `namespace/name` with one rule per host, its status holding `ip`.
    pub fn ingress(namespace: &str, name: &str, hosts: &[&str], ip: &str) -> Value {
        let rules: Vec<Value> = hosts.iter().map(|h| json!({ "host": h })).collect();
        object(
            "networking.k8s.io/v1",
            "Ingress",
            Some(namespace),
            name,
            json!({
                "spec": {"rules": rules},
                "status": {"loadBalancer": {"ingress": [{"ip": ip}]}}
            }),
        )
    }

    /// `kube-system/coredns` with `corefile` as its `Corefile` key.
    pub fn coredns(corefile: &str) -> Value {
        object(
            "v1",
            "ConfigMap",
            Some("kube-system"),
            "coredns",
            json!({"data": {"Corefile": corefile}}),
        )
    }

    /// The Corefile of `kube-system/coredns` as the server holds it now (what [`coredns`]
    /// seeded, after the writes under test). Panics when it is absent: a test's setup error.
    pub fn corefile(fake: &super::FakeApiServer) -> String {
        fake.get("v1", "ConfigMap", Some("kube-system"), "coredns")
            .expect("kube-system/coredns exists")["data"]["Corefile"]
            .as_str()
            .expect("it has a Corefile key")
            .to_owned()
    }
}

pub(crate) fn status_body(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(details) = details {
        status["details"] = details;
    }
    status
}

pub(crate) fn default_status(code: u16, resource: &str, name: &str) -> Value {
    let details = Some(serde_json::json!({ "name": name, "kind": resource }));
    match code {
        403 => status_body(
            403,
            "Forbidden",
            &format!(
                "{resource} \"{name}\" is forbidden: User \"system:serviceaccount:hairpin:hairpin\" cannot access resource \"{resource}\""
            ),
            details,
        ),
        404 => status_body(
            404,
            "NotFound",
            &format!("{resource} \"{name}\" not found"),
            details,
        ),
        409 => status_body(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
            details,
        ),
        410 => status_body(410, "Expired", "too old resource version", None),
        429 => status_body(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
            Some(serde_json::json!({ "retryAfterSeconds": 1 })),
        ),
        500 => status_body(
            500,
            "InternalError",
            "Internal error occurred: injected fault",
            None,
        ),
        503 => status_body(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
            None,
        ),
        504 => status_body(
            504,
            "Timeout",
            "the server was unable to return a response in the time allotted",
            None,
        ),
        other => status_body(other, "Unknown", "injected fault", None),
    }
}

pub(crate) type Labels = BTreeMap<String, String>;
