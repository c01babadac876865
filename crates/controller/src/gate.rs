//! The write gate: the one place where "this instance may write to the API" is decided.
//!
//! Every write the controller makes (Services, ConfigMaps, `DNSEndpoint`s, `Hairpin` statuses,
//! Events) goes through a [`kube::Client`] made by [`WriteGate::client`]: a request that is
//! not a read (`GET`) is sent only while the gate is open, and otherwise fails at once with
//! [`WriteWithheld`] without leaving the process. The leader election opens the gate when it
//! holds the Lease, up to the moment its Lease could expire (another candidate could take it
//! from then on), and closes it the moment the Lease is lost: deleted, taken by another holder,
//! fenced by `hairpin uninstall`, or not renewed in time. Closing waits for the writes already
//! under way to finish, so once [`WriteGate::close`] returns nothing of this instance is
//! writing, and nothing will until the gate opens again.
//!
//! The Lease itself is written with the plain client (the election is how the gate opens).

use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use http::{Method, Request, Response};
use kube::client::Body;

/// Whether writes may go out, and until when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// No write goes out.
    Closed,
    /// Writes go out until the instant (`None`: no end, an instance without leader election).
    Open(Option<Instant>),
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    /// Held shared by every write under way; [`WriteGate::close`] takes it exclusively.
    in_flight: Arc<tokio::sync::RwLock<()>>,
}

/// See the module documentation. Clones share the gate. A new gate is closed.
#[derive(Clone, Debug)]
pub struct WriteGate {
    inner: Arc<Inner>,
}

impl Default for WriteGate {
    fn default() -> Self {
        Self::closed()
    }
}

/// The error of a write the gate held back (this instance does not hold the Lease).
#[derive(Debug, thiserror::Error)]
#[error(
    "write withheld: this instance does not hold the leader Lease (or hairpin is being uninstalled)"
)]
pub struct WriteWithheld;

impl WriteGate {
    /// A closed gate.
    pub fn closed() -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::Closed),
                in_flight: Arc::new(tokio::sync::RwLock::new(())),
            }),
        }
    }

    /// A gate open for good (a single instance run without leader election).
    pub fn always_open() -> Self {
        let gate = Self::closed();
        *gate.lock() = State::Open(None);
        gate
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets writes go out until `until` (the last moment the Lease this instance renewed is
    /// surely still its own).
    pub fn open_until(&self, until: Instant) {
        *self.lock() = State::Open(Some(until));
    }

    /// Lets writes go out with no end (an instance without leader election, until fenced).
    pub fn open(&self) {
        *self.lock() = State::Open(None);
    }

    /// Stops writes at once (writes already under way still finish).
    pub fn close_now(&self) {
        *self.lock() = State::Closed;
    }

    /// Stops writes and waits for those under way to finish: when it returns, this instance
    /// writes nothing until the gate opens again.
    pub async fn close(&self) {
        self.close_now();
        drop(self.inner.in_flight.write().await);
    }

    /// Whether a write would go out now.
    pub fn is_open(&self) -> bool {
        match *self.lock() {
            State::Closed => false,
            State::Open(None) => true,
            State::Open(Some(until)) => Instant::now() < until,
        }
    }

    /// `client`, with every request that is not a `GET` sent only while the gate is open.
    pub fn client(&self, client: kube::Client) -> kube::Client {
        let namespace = client.default_namespace().to_owned();
        kube::Client::new(
            Gated {
                gate: self.clone(),
                client,
            },
            namespace,
        )
    }
}

/// The tower service behind [`WriteGate::client`].
#[derive(Clone)]
struct Gated {
    gate: WriteGate,
    client: kube::Client,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Request<Body>> for Gated {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<Body>, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let gate = self.gate.clone();
        let client = self.client.clone();
        Box::pin(async move {
            if request.method() == Method::GET {
                return client.send(request).await.map_err(Into::into);
            }
            // Checked while holding the shared lock: `close` cannot return while this write
            // is under way, and a write that starts after `close_now` is refused.
            let _write = gate.inner.in_flight.clone().read_owned().await;
            if !gate.is_open() {
                return Err(Box::new(WriteWithheld) as BoxError);
            }
            client.send(request).await.map_err(Into::into)
        })
    }
}

/// True when `err` (or what it wraps) is a write the gate held back.
pub fn is_withheld(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(err);
    while let Some(err) = current {
        if err.is::<WriteWithheld>() {
            return true;
        }
        current = err.source();
    }
    false
}

#[cfg(test)]
mod tests;
