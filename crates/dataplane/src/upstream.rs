//! Connecting to an upstream: IP literals directly, names resolved again per connection (with a
//! short cache), several addresses tried in turn starting from a rotating one.

use std::io;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::Error;
use crate::metrics::ConnectFailure;
use crate::routes::Upstream;

/// Resolves `upstream` now (for a startup check).
///
/// # Errors
/// [`Error::Resolve`] when the name does not resolve to any address.
pub async fn resolve(upstream: &Upstream) -> Result<Vec<SocketAddr>, Error> {
    if let Some(addr) = upstream.as_socket_addr() {
        return Ok(vec![addr]);
    }
    let failed = |reason: String| Error::Resolve {
        upstream: upstream.to_string(),
        reason,
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((upstream.host(), upstream.port()))
        .await
        .map_err(|err| failed(err.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(failed("no address".into()));
    }
    Ok(addrs)
}

#[derive(Debug)]
pub(crate) struct Target {
    upstream: Upstream,
    literal: Option<SocketAddr>,
    ttl: Duration,
    cache: Mutex<Option<(Instant, std::sync::Arc<[SocketAddr]>)>>,
    next: AtomicUsize,
}

#[derive(Debug)]
pub(crate) struct ConnectError {
    pub(crate) failure: ConnectFailure,
    pub(crate) message: String,
}

impl Target {
    pub(crate) fn new(upstream: Upstream, ttl: Duration) -> Self {
        Self {
            literal: upstream.as_socket_addr(),
            upstream,
            ttl,
            cache: Mutex::new(None),
            next: AtomicUsize::new(0),
        }
    }

    pub(crate) fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    pub(crate) async fn connect(&self) -> Result<TcpStream, ConnectError> {
        if let Some(addr) = self.literal {
            return connect_to(addr).await.map_err(classify);
        }
        let addrs = self.addresses().await?;
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut last = None;
        for i in 0..addrs.len() {
            match connect_to(addrs[(start + i) % addrs.len()]).await {
                Ok(stream) => return Ok(stream),
                Err(err) => last = Some(err),
            }
        }
        Err(classify(
            last.unwrap_or_else(|| io::Error::other("no address")),
        ))
    }

    async fn addresses(&self) -> Result<std::sync::Arc<[SocketAddr]>, ConnectError> {
        {
            let cache = self
                .cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((at, addrs)) = &*cache
                && at.elapsed() < self.ttl
            {
                return Ok(addrs.clone());
            }
        }
        let addrs: std::sync::Arc<[SocketAddr]> = resolve(&self.upstream)
            .await
            .map_err(|err| ConnectError {
                failure: ConnectFailure::resolve,
                message: err.to_string(),
            })?
            .into();
        *self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((Instant::now(), addrs.clone()));
        Ok(addrs)
    }
}

/// Connects to `addr`. When the handshake is already complete as `connect(2)` returns (an
/// upstream on the same host: loopback runs it inside the call), the socket is used at once
/// (`getpeername` answers), without waiting for the reactor to report it writable: one
/// `epoll_wait` return and one poll of the connection fewer (issue 48), and no
/// `getsockopt(SO_ERROR)`. Otherwise it waits for writable and reads the socket's error, as
/// `tokio::net::TcpStream::connect` does.
async fn connect_to(addr: SocketAddr) -> io::Result<TcpStream> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM.nonblocking(),
        None,
    )?;
    let pending = match socket.connect(&addr.into()) {
        Ok(()) => false,
        Err(err) if err.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {
            socket.peer_addr().is_err()
        }
        Err(err) => return Err(err),
    };
    let stream = TcpStream::from_std(socket.into())?;
    if pending {
        stream.writable().await?;
        if let Some(err) = stream.take_error()? {
            return Err(err);
        }
    }
    Ok(stream)
}

fn classify(err: io::Error) -> ConnectError {
    let failure = match err.kind() {
        io::ErrorKind::ConnectionRefused => ConnectFailure::refused,
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
            ConnectFailure::unreachable
        }
        io::ErrorKind::TimedOut => ConnectFailure::timeout,
        _ => ConnectFailure::other,
    };
    ConnectError {
        failure,
        message: err.to_string(),
    }
}
