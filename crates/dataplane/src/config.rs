//! Process-wide proxy settings (per-route settings live in [`crate::routes::Route`]).

use std::time::Duration;

/// Limits and timeouts that apply to every route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyConfig {
    /// How long connecting to the upstream may take before the client is closed.
    pub connect_timeout: Duration,
    /// How long a connection may move no byte in either direction before both sides are closed.
    pub idle_timeout: Duration,
    /// Once one side has finished (sent its FIN), how long the connection may move no byte
    /// before both sides are closed: a half-closed connection waits for one side only, and
    /// must not hold a `max_connections` slot for the whole idle timeout.
    pub half_close_timeout: Duration,
    /// After the drain starts, how long the proxy keeps accepting (with `/readyz` failing),
    /// so that its endpoints are withdrawn before it stops: clients routed to it meanwhile
    /// are served rather than refused.
    pub shutdown_delay: Duration,
    /// How long established connections may take to finish once accepting has stopped.
    pub drain_timeout: Duration,
    /// The most connections open at once, over all routes. At the limit the proxy stops
    /// accepting (new clients wait in the kernel's backlog) until a connection ends.
    pub max_connections: usize,
    /// How many `SO_REUSEPORT` listening sockets each route opens (one per worker spreads
    /// accepting over the workers).
    pub listeners_per_route: usize,
    /// The listen backlog of each listening socket.
    pub backlog: u32,
    /// How long a resolved upstream name is reused before it is looked up again.
    pub resolve_ttl: Duration,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(600),
            half_close_timeout: Duration::from_secs(30),
            shutdown_delay: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(25),
            max_connections: 10_000,
            listeners_per_route: 1,
            backlog: 4096,
            resolve_ttl: Duration::from_secs(1),
        }
    }
}
