//! One proxied connection: connect upstream, write the PROXY header with the client's first
//! bytes, then copy both ways until both sides are done, one fails, or it goes idle.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use hairpin_proxy_protocol::encode_header;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use crate::ProxyConfig;
use crate::copy::{Duplex, Progress};
use crate::metrics::{ConnectFailure, RouteMetrics};
use crate::shared::{RouteRuntime, Shared};
use crate::ticker::Ticker;

struct ActiveGuard<'a>(&'a RouteMetrics);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.active.dec();
    }
}

/// An accepted connection: registered with this worker's reactor, or accepted by another worker
/// and handed to this one (registered here, where it is served).
pub(crate) enum Incoming {
    Here(TcpStream),
    Moved(std::net::TcpStream),
}

/// Counts a connection in its worker's load while it lives.
pub(crate) struct Load(pub(crate) prometheus_client::metrics::gauge::Gauge);

impl Drop for Load {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Serves one connection. One task per connection and this future is its state, for as long as
/// the connection is open, so it is kept small (issue 48: memory per open connection): no
/// wrapper future around it (the hand-over and the worker's load are done here), and the
/// connect's state is boxed for the time of the connect only.
pub(crate) async fn serve(
    incoming: Incoming,
    peer: SocketAddr,
    route: Arc<RouteRuntime>,
    shared: Arc<Shared>,
    ticker: Arc<Ticker>,
    _permit: OwnedSemaphorePermit,
    _load: Option<Load>,
) {
    let client = match incoming {
        Incoming::Here(stream) => stream,
        Incoming::Moved(stream) => match TcpStream::from_std(stream) {
            Ok(stream) => stream,
            Err(_) => return,
        },
    };
    let metrics = &route.metrics;
    metrics.connections.inc();
    metrics.active.inc();
    let _active = ActiveGuard(metrics);

    let started = Instant::now();
    let deadline = started + shared.config.connect_timeout;
    // Boxed: the connect's state (the address loop, the pending socket and its readiness
    // waiter) lives only while connecting, instead of sizing the connection's task for its
    // whole life (issue 48: memory per open connection).
    let upstream = match ticker
        .until(deadline, Box::pin(route.target.connect()))
        .await
    {
        Some(Ok(upstream)) => upstream,
        Some(Err(err)) => {
            route.connect_failed(peer, err.failure, &err.message);
            return;
        }
        None => {
            route.connect_failed(
                peer,
                ConnectFailure::timeout,
                &format!("no answer within {:?}", shared.config.connect_timeout),
            );
            return;
        }
    };
    metrics
        .connect_seconds
        .observe(started.elapsed().as_secs_f64());
    let _ = upstream.set_nodelay(true);

    // The header's version and addresses; none for a route that writes no header (which
    // then needs no destination, and no getsockname on a wildcard listener).
    let header = match route.route.proxy_protocol.version() {
        None => None,
        Some(version) => match route.route.header_addresses(peer, || client.local_addr()) {
            Ok(addresses) => Some((version, addresses)),
            Err(_) => return,
        },
    };
    let mut duplex = Duplex::new(&client, &upstream, metrics);
    let sent = duplex.send_first(|buf| match header {
        None => Ok(0),
        Some((version, (src, dst))) => encode_header(version, src, dst, buf)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err.to_string())),
    });
    let result = match sent {
        Ok(()) => pump(&mut duplex, &shared.config, &route.metrics, &ticker).await,
        Err(err) => Err(err),
    };
    duplex.flush_counts();
    if let Err(err) = result {
        if err.kind() != io::ErrorKind::TimedOut {
            // Pass a failure on as a reset, so neither side mistakes it for a complete stream.
            let _ = client.set_zero_linger();
            let _ = upstream.set_zero_linger();
        }
        tracing::debug!(route = %route.route.name, client = %peer, error = %err, "connection ended with an error");
    }
}

/// Copies until done, or until the check on a tick finds no byte moved for the idle timeout,
/// or, once one side has finished, for the half-close timeout (on the half-closed tick).
async fn pump(
    duplex: &mut Duplex<'_>,
    config: &ProxyConfig,
    metrics: &RouteMetrics,
    ticker: &Ticker,
) -> io::Result<()> {
    let mut watch = ticker.idle();
    let mut timeout = config.idle_timeout;
    let mut expired = (&metrics.idle_timeouts, "idle timeout");
    let tick = watch.notified();
    tokio::pin!(tick);
    tick.as_mut().enable();
    loop {
        tokio::select! {
            biased;
            progress = std::future::poll_fn(|cx| duplex.poll(cx)) => match progress? {
                Progress::Done => return Ok(()),
                Progress::Yield => tokio::task::yield_now().await,
                Progress::HalfClosed => {
                    watch = ticker.half_closed();
                    timeout = config.half_close_timeout;
                    expired = (&metrics.half_close_timeouts, "half-close timeout");
                    tick.set(watch.notified());
                    tick.as_mut().enable();
                }
            },
            () = &mut tick => {
                tick.set(watch.notified());
                tick.as_mut().enable();
                let now = Instant::now();
                if duplex.active_at(now) + timeout <= now {
                    expired.0.inc();
                    return Err(io::Error::new(io::ErrorKind::TimedOut, expired.1));
                }
            }
        }
    }
}
