//! One proxied connection: connect upstream, write the PROXY header with the client's first
//! bytes, then copy both ways until both sides are done, one fails, or it goes idle.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use hairpin_proxy_protocol::encode_header;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use crate::copy::{Duplex, Progress};
use crate::metrics::ConnectFailure;
use crate::shared::RouteRuntime;
use crate::ticker::Ticker;

/// An accepted connection: registered with this worker's reactor, or accepted by another worker
/// and handed to this one (registered here, where it is served).
pub(crate) enum Incoming {
    Here(TcpStream),
    Moved(std::net::TcpStream),
    /// A handed-over socket that could not be registered (closed).
    Gone,
}

impl Incoming {
    /// The socket, registered with this worker's reactor (in place: the connection's state
    /// holds one socket, not the hand-over's and the registered one).
    fn register(&mut self) -> io::Result<&TcpStream> {
        if matches!(self, Self::Moved(_))
            && let Self::Moved(stream) = std::mem::replace(self, Self::Gone)
        {
            *self = Self::Here(TcpStream::from_std(stream)?);
        }
        match self {
            Self::Here(stream) => Ok(stream),
            Self::Moved(_) | Self::Gone => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

/// Counts a connection in its worker's load while it lives.
pub(crate) struct Load(pub(crate) prometheus_client::metrics::gauge::Gauge);

impl Drop for Load {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// What a connection's task starts from and holds while it lives: the accepted socket and
/// what serving it needs. It counts as active from its making to its drop.
pub(crate) struct Conn {
    incoming: Incoming,
    peer: SocketAddr,
    route: Arc<RouteRuntime>,
    ticker: Arc<Ticker>,
    /// Its place under the connection limit.
    _permit: OwnedSemaphorePermit,
    _load: Option<Load>,
}

impl Conn {
    pub(crate) fn new(
        incoming: Incoming,
        peer: SocketAddr,
        route: Arc<RouteRuntime>,
        ticker: Arc<Ticker>,
        permit: OwnedSemaphorePermit,
        load: Option<Load>,
    ) -> Self {
        route.metrics.connections.inc();
        route.metrics.active.inc();
        Self {
            incoming,
            peer,
            route,
            ticker,
            _permit: permit,
            _load: load,
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.route.metrics.active.dec();
    }
}

/// Serves one connection. One task per connection and this future is its state, for as long as
/// the connection is open, so it is kept small (issue 48: memory per open connection): a task
/// cell is allocated in steps of 128 bytes, and 10,000 open connections hold 10,000 of them.
/// - An `async` block over `conn`, not an `async fn` of its fields: an `async fn` moves each
///   argument into a local of its own, and the state kept both copies. The fields are used in
///   place, and the handed-over socket is registered in place.
/// - No wrapper future around it (the hand-over and the worker's load are done here).
/// - The connect and the header are functions of their own, so that their locals (the
///   connect's state, boxed; the header's addresses; timestamps) are not kept in the state
///   while bytes are copied.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps a second copy of its arguments in its state"
)]
pub(crate) fn serve(mut conn: Conn) -> impl Future<Output = ()> + Send + 'static {
    async move {
        let Ok(client) = conn.incoming.register() else {
            return;
        };
        // Boxed: the connect's state (the address loop, the pending socket and its readiness
        // waiter, the tick's waiter) lives only while connecting.
        let Some(upstream) = Box::pin(connect(&conn.route, &conn.ticker, conn.peer)).await else {
            return;
        };
        let mut duplex = Duplex::new(client, &upstream, &conn.route.metrics);
        // (`if let`: the scrutinee is not kept in the state while pumping.)
        let result = if let Err(err) = send_first(&mut duplex, &conn.route, conn.peer, client) {
            Err(err)
        } else {
            pump(&mut duplex, &conn.ticker).await
        };
        duplex.flush_counts();
        if let Err(err) = result {
            if err.kind() != io::ErrorKind::TimedOut {
                let client = duplex.client();
                // Pass a failure on as a reset, so neither side mistakes it for a complete stream.
                let _ = client.set_zero_linger();
                let _ = upstream.set_zero_linger();
            }
            tracing::debug!(route = %conn.route.route.name, client = %conn.peer, error = %err, "connection ended with an error");
        }
    }
}

/// Connects to the route's upstream within the connect timeout (a failure is counted and
/// logged: `None`).
async fn connect(route: &RouteRuntime, ticker: &Ticker, peer: SocketAddr) -> Option<TcpStream> {
    let started = Instant::now();
    let deadline = started + ticker.connect_timeout();
    match ticker.until(deadline, route.target.connect()).await {
        Some(Ok(upstream)) => {
            route
                .metrics
                .connect_seconds
                .observe(started.elapsed().as_secs_f64());
            let _ = upstream.set_nodelay(true);
            Some(upstream)
        }
        Some(Err(err)) => {
            route.connect_failed(peer, err.failure, &err.message);
            None
        }
        None => {
            route.connect_failed(
                peer,
                ConnectFailure::timeout,
                &format!("no answer within {:?}", ticker.connect_timeout()),
            );
            None
        }
    }
}

/// Writes the route's PROXY header (none for a route without one, which then needs no
/// destination, and no getsockname on a wildcard listener) with the client's first bytes.
fn send_first(
    duplex: &mut Duplex<'_>,
    route: &RouteRuntime,
    peer: SocketAddr,
    client: &TcpStream,
) -> io::Result<()> {
    let header = match route.route.proxy_protocol.version() {
        None => None,
        Some(version) => Some((
            version,
            route.route.header_addresses(peer, || client.local_addr())?,
        )),
    };
    duplex.send_first(|buf| match header {
        None => Ok(0),
        Some((version, (src, dst))) => encode_header(version, src, dst, buf)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err.to_string())),
    })
}

/// What woke the pump.
enum Woken {
    Progress(Progress),
    Tick,
}

/// Copies until done, or until the check on a tick finds no byte moved for the idle timeout,
/// or, once one side has finished, for the half-close timeout (on the half-closed tick). Its state is the tick's waiter and
/// what the loop awaits: which tick and timeout apply is read from the duplex (half-closed or
/// not), not kept beside it. (A function returning an `async` block, for the reason
/// [`serve`] is one.)
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps a second copy of its arguments in its state"
)]
fn pump<'a>(
    duplex: &'a mut Duplex<'_>,
    ticker: &'a Ticker,
) -> impl Future<Output = io::Result<()>> + Send + 'a {
    async move {
        let tick = ticker.watch(false).notified();
        tokio::pin!(tick);
        tick.as_mut().enable();
        loop {
            let woken = std::future::poll_fn(|cx| {
                if let Poll::Ready(progress) = duplex.poll(cx) {
                    return Poll::Ready(progress.map(Woken::Progress));
                }
                tick.as_mut().poll(cx).map(|()| Ok(Woken::Tick))
            })
            .await?;
            match woken {
                Woken::Progress(Progress::Done) => return Ok(()),
                Woken::Progress(Progress::Yield) => tokio::task::yield_now().await,
                Woken::Progress(Progress::HalfClosed) => {
                    tick.set(ticker.watch(true).notified());
                    tick.as_mut().enable();
                }
                Woken::Tick => {
                    let half_closed = duplex.is_half_closed();
                    tick.set(ticker.watch(half_closed).notified());
                    tick.as_mut().enable();
                    let metrics = duplex.metrics();
                    let (expired, why) = if half_closed {
                        (&metrics.half_close_timeouts, "half-close timeout")
                    } else {
                        (&metrics.idle_timeouts, "idle timeout")
                    };
                    let now = Instant::now();
                    if duplex.active_at(now) + ticker.idle_timeout(half_closed) <= now {
                        expired.inc();
                        return Err(io::Error::new(io::ErrorKind::TimedOut, why));
                    }
                }
            }
        }
    }
}
