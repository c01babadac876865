//! The admin HTTP server every long-running command serves: `/livez`, `/readyz`, `/metrics`.
//!
//! Readiness is a set of named conditions (for example "listeners bound", "routes loaded",
//! "caches synced"): `/readyz` answers 200 only when all hold and no drain has started, and
//! otherwise 503 with the conditions still missing, so `kubectl describe pod` tells why.
//!
//! Bounded, because anyone who can reach the port can open connections to it, and each
//! holds a file descriptor the data path may need: a request head must arrive within
//! [`AdminLimits::header_timeout`] of the server starting to wait for it (so an idle
//! keep-alive connection is closed after that long too), and at most
//! [`AdminLimits::max_connections`] connections are open at once. At the cap, a new
//! connection is still accepted and the oldest one is closed: a flood of silent connections
//! then churns through the slots instead of holding them, and the kubelet's probe, which is
//! the newest connection, is answered (closing new connections instead would fail the
//! probes; leaving them in the backlog would delay them past the probe's timeout).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use clap::Args;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::text;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{LogLimiter, Shutdown, fdlimit};

/// Admin server options, shared by every long-running command.
#[derive(Clone, Debug, Args)]
pub struct AdminArgs {
    /// Address of the admin server (`/livez`, `/readyz`, `/metrics`). Port 0 picks a free one.
    /// `[::]` is dual-stack (IPv4 and IPv6 probes and scrapers alike, so IPv6-only pods work),
    /// and falls back to `0.0.0.0` on a node without IPv6.
    #[arg(long, env = "HAIRPIN_ADMIN_ADDR", default_value = "[::]:9090")]
    pub admin_addr: SocketAddr,
}

/// Errors of the admin server.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The admin address could not be bound.
    #[error("cannot listen on admin address {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why binding failed.
        source: std::io::Error,
    },
}

impl AdminError {
    /// A short label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            AdminError::Bind { .. } => "admin_bind",
        }
    }
}

/// Named readiness conditions, all of which must hold for `/readyz` to answer 200.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    conditions: Arc<Mutex<BTreeMap<&'static str, bool>>>,
}

impl Readiness {
    /// No conditions: ready (until one is added).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a condition, initially not met, and returns its handle.
    pub fn condition(&self, name: &'static str) -> ReadyCondition {
        self.lock().insert(name, false);
        ReadyCondition {
            readiness: self.clone(),
            name,
        }
    }

    /// True when every condition holds.
    pub fn is_ready(&self) -> bool {
        self.lock().values().all(|met| *met)
    }

    /// The conditions that do not hold yet, in name order.
    pub fn missing(&self) -> Vec<&'static str> {
        self.lock()
            .iter()
            .filter(|(_, met)| !**met)
            .map(|(name, _)| *name)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, bool>> {
        // A poisoned lock only means another thread panicked while flipping a bool: the map is
        // still consistent, so keep serving instead of propagating the panic.
        self.conditions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One readiness condition.
#[derive(Clone, Debug)]
pub struct ReadyCondition {
    readiness: Readiness,
    name: &'static str,
}

impl ReadyCondition {
    /// Marks the condition met or not.
    pub fn set(&self, met: bool) {
        self.readiness.lock().insert(self.name, met);
    }
}

/// The bounds of the admin server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminLimits {
    /// Time for a request head to arrive, counted from when the server starts waiting for it:
    /// on a new connection, and after each answer on a keep-alive one (so this is also the
    /// keep-alive idle timeout).
    pub header_timeout: Duration,
    /// Connections open at once; at the cap, the oldest is closed for each new one.
    pub max_connections: usize,
}

impl Default for AdminLimits {
    /// 5 s for a request head (probes and scrapers send theirs at once) and 64 connections
    /// (two probes and a few scrapers need a handful).
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(5),
            max_connections: 64,
        }
    }
}

/// A bound admin server; [`AdminServer::serve`] runs it.
#[derive(Debug)]
pub struct AdminServer {
    listener: TcpListener,
    limits: AdminLimits,
}

impl AdminServer {
    /// Binds the admin address (so a busy port is reported before anything else starts); `[::]`
    /// as [`crate::net::bind_tcp`] does, dual-stack or IPv4 only, and logged which.
    ///
    /// # Errors
    /// [`AdminError::Bind`] naming the address.
    pub async fn bind(addr: SocketAddr) -> Result<Self, AdminError> {
        let error = |source| AdminError::Bind { addr, source };
        let (socket, bound) = crate::net::bind_tcp(addr, |socket| {
            // As tokio's own `TcpListener::bind`: a restarted process binds at once.
            socket.set_reuse_address(true)?;
            socket.set_nonblocking(true)
        })
        .map_err(error)?;
        match &bound.ipv4_only {
            Some(why) => {
                tracing::info!(admin_addr = %bound.addr, "admin server on IPv4 only: {why}")
            }
            None => {
                tracing::info!(admin_addr = %bound.addr, families = bound.families(), "admin server bound")
            }
        }
        socket.listen(1024).map_err(error)?;
        let listener = TcpListener::from_std(socket.into()).map_err(error)?;
        Ok(Self {
            listener,
            limits: AdminLimits::default(),
        })
    }

    /// Other bounds than [`AdminLimits::default`].
    #[must_use]
    pub fn with_limits(mut self, limits: AdminLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has a local address")
    }

    /// Serves until shutdown is forced or the task is dropped. Once the drain starts, `/readyz`
    /// answers 503 so endpoints are withdrawn while connections drain.
    pub async fn serve(self, registry: Arc<Registry>, readiness: Readiness, shutdown: Shutdown) {
        let state = Arc::new(State {
            registry,
            standard: crate::process::standard_registry(),
            readiness,
            shutdown: shutdown.clone(),
        });
        let open = Arc::new(Mutex::new(Open::default()));
        let accept_log = LogLimiter::new(5, Duration::from_secs(10));
        let evict_log = LogLimiter::new(1, Duration::from_secs(10));
        let mut http = http1::Builder::new();
        // A client may shut down its write side once its request is sent (`nc -N`, scripts):
        // answer it instead of dropping the connection at that EOF.
        http.half_close(true)
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_timeout);
        loop {
            let (stream, _) = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        fdlimit::accept_failed(&err, "admin", &accept_log).await;
                        continue;
                    }
                },
                () = shutdown.forced() => return,
            };
            let (id, closed) = {
                let mut open = lock(&open);
                if open.connections.len() >= self.limits.max_connections.max(1) {
                    if let Some((_, oldest)) = open.connections.pop_first() {
                        oldest.cancel();
                    }
                    if let Some(suppressed) = evict_log.check() {
                        tracing::warn!(
                            max_connections = self.limits.max_connections,
                            suppressed,
                            "admin server: connection limit reached; closing the oldest connection for each new one"
                        );
                    }
                }
                open.next_id += 1;
                let id = open.next_id;
                let closed = CancellationToken::new();
                open.connections.insert(id, closed.clone());
                (id, closed)
            };
            let state = state.clone();
            let open = open.clone();
            let http = http.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(state.answer(&request)) }
                });
                let connection = http.serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    _ = connection => {}
                    () = closed.cancelled() => {}
                }
                lock(&open).connections.remove(&id);
            });
        }
    }
}

/// The open connections, oldest first, each with the token that closes it.
#[derive(Debug, Default)]
struct Open {
    next_id: u64,
    connections: BTreeMap<u64, CancellationToken>,
}

fn lock(open: &Mutex<Open>) -> std::sync::MutexGuard<'_, Open> {
    // A panic while holding the lock leaves a map that is still consistent.
    open.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

struct State {
    registry: Arc<Registry>,
    /// `hairpin_build_info` and `process_*`, the same for every command.
    standard: Registry,
    readiness: Readiness,
    shutdown: Shutdown,
}

impl State {
    fn answer(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        if request.method() != Method::GET && request.method() != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into());
        }
        match request.uri().path() {
            "/livez" => text(StatusCode::OK, "ok\n".into()),
            "/readyz" => {
                if self.shutdown.is_draining() {
                    text(StatusCode::SERVICE_UNAVAILABLE, "draining\n".into())
                } else if self.readiness.is_ready() {
                    text(StatusCode::OK, "ready\n".into())
                } else {
                    let missing = self.readiness.missing().join(", ");
                    text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("not ready: waiting for {missing}\n"),
                    )
                }
            }
            "/metrics" => {
                let mut body = String::new();
                let encoded = text::encode_registry(&mut body, &self.registry)
                    .and_then(|()| text::encode_registry(&mut body, &self.standard))
                    .and_then(|()| text::encode_eof(&mut body));
                match encoded {
                    Ok(()) => respond(
                        StatusCode::OK,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        body,
                    ),
                    Err(err) => text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("encoding metrics failed: {err}\n"),
                    ),
                }
            }
            _ => text(
                StatusCode::NOT_FOUND,
                "not found: try /livez, /readyz or /metrics\n".into(),
            ),
        }
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    respond(status, "text/plain; charset=utf-8", body)
}

fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}
