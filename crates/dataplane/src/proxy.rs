//! The route manager: one set of listeners per route, started, updated and stopped as route
//! tables arrive, and the drain on shutdown.
//!
//! Connections are independent tasks: stopping a route closes its listening sockets only, and
//! its established connections carry on until they end (or the drain deadline passes).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hairpin_runtime::DrainOutcome;
use hairpin_runtime::{Shutdown, fdlimit};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::ProxyConfig;
use crate::conn::{Conn, Incoming, Load};
use crate::metrics::ProxyMetrics;
use crate::routes::{Route, RouteTable};
use crate::shared::{RouteRuntime, Shared};
use crate::{Error, conn};

#[derive(Debug)]
struct RunningRoute {
    route: Route,
    config: watch::Sender<Option<Arc<RouteRuntime>>>,
}

/// The proxy: feed it route tables with [`Proxy::apply`] or [`Proxy::run`].
///
/// ```no_run
/// # async fn example(table: hairpin_dataplane::routes::RouteTable) {
/// use hairpin_dataplane::{Proxy, ProxyConfig, ProxyMetrics};
/// let mut registry = prometheus_client::registry::Registry::default();
/// let metrics = ProxyMetrics::register(registry.sub_registry_with_prefix("hairpin_proxy"));
/// let (routes_tx, routes_rx) = tokio::sync::watch::channel(table);
/// let shutdown = hairpin_runtime::Shutdown::from_signals().unwrap();
/// // Later, from anywhere: routes_tx.send(new_table) starts/stops/updates listeners.
/// let outcome = Proxy::new(ProxyConfig::default(), metrics).run(routes_rx, shutdown).await;
/// # drop(routes_tx); let _ = outcome;
/// # }
/// ```
#[derive(Debug)]
pub struct Proxy {
    shared: Arc<Shared>,
    running: HashMap<String, RunningRoute>,
    /// Whether the ticker on the caller's runtime runs (without shards; it starts with the
    /// first table applied).
    ticking: bool,
}

impl Proxy {
    /// A proxy with no route yet.
    pub fn new(config: ProxyConfig, metrics: ProxyMetrics) -> Self {
        Self {
            shared: Arc::new(Shared::new(config, metrics)),
            running: HashMap::new(),
            ticking: false,
        }
    }

    /// Serves each route on these runtimes, one `SO_REUSEPORT` listener on each, instead of
    /// `listeners_per_route` listeners on the caller's runtime. With one single-threaded
    /// runtime per core, a connection lives on the thread that accepted it: no work stealing,
    /// no cross-thread wake-ups, warm caches (thread per core).
    pub fn with_shards(mut self, shards: Vec<tokio::runtime::Handle>) -> Self {
        Arc::get_mut(&mut self.shared)
            .expect("with_shards is called before any route starts")
            .set_shards(shards);
        self.ticking = true;
        self
    }

    /// Makes the running routes equal to `table`: new routes start accepting, removed ones stop
    /// accepting (their connections drain), changed ones apply to new connections. A route
    /// whose listen address cannot be bound is reported and left out; applying the same table
    /// again retries it. Must be called inside a tokio runtime.
    pub fn apply(&mut self, table: &RouteTable) -> Vec<Error> {
        if !self.ticking {
            self.ticking = true;
            drop(tokio::spawn(self.shared.tickers[0].run()));
        }
        self.running.retain(|name, running| {
            let keep = table
                .get(name)
                .is_some_and(|route| route.listen == running.route.listen);
            if !keep {
                running.config.send_replace(None);
                tracing::info!(route = %name, listen = %running.route.listen, "route removed: stopped accepting, its connections drain");
            }
            keep
        });
        let mut errors = Vec::new();
        for route in table.routes() {
            match self.running.get_mut(&route.name) {
                Some(running) if running.route == *route => {}
                Some(running) => {
                    let runtime = Arc::new(RouteRuntime::new(route, &self.shared));
                    running.config.send_replace(Some(runtime));
                    running.route = route.clone();
                    tracing::info!(route = %route.name, listen = %route.listen, upstream = %route.upstream,
                        proxy_protocol = %route.proxy_protocol, "route updated (applies to new connections)");
                }
                None => match self.start(route) {
                    Ok(running) => {
                        self.running.insert(route.name.clone(), running);
                    }
                    Err(err) => {
                        self.shared.metrics.route_error();
                        errors.push(err);
                    }
                },
            }
        }
        self.shared.metrics.set_routes(self.running.len());
        errors
    }

    /// Names of the routes accepting now.
    pub fn route_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.running.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// Connections open now, over all routes (including routes already removed).
    pub fn active_connections(&self) -> usize {
        self.shared.tracker.len()
    }

    fn start(&self, route: &Route) -> Result<RunningRoute, Error> {
        let config = &self.shared.config;
        let count = if self.shared.shards.is_empty() {
            config.listeners_per_route.max(1)
        } else {
            self.shared.shards.len()
        };
        let bind_error = |source| Error::Bind {
            route: route.name.clone(),
            addr: route.listen,
            source,
        };
        // The first bind decides the families (`[::]` dual-stack, or IPv4 only on a node
        // without IPv6); the others share its address.
        let (first, bound) = bind(route.listen, config.backlog).map_err(bind_error)?;
        let listeners = std::iter::once(Ok(first))
            .chain((1..count).map(|_| bind(bound.addr, config.backlog).map(|(l, _)| l)))
            .collect::<io::Result<Vec<_>>>()
            .map_err(bind_error)?;
        let runtime = Arc::new(RouteRuntime::new(route, &self.shared));
        let (config, _) = watch::channel(Some(runtime));
        for (i, listener) in listeners.into_iter().enumerate() {
            let listeners = &self.shared.listeners;
            match self.shared.shards.get(i) {
                Some(shard) => drop(listeners.spawn_on(
                    accept_loop(listener, config.subscribe(), self.shared.clone(), Some(i)),
                    &shard.handle,
                )),
                None => drop(listeners.spawn(accept_loop(
                    listener,
                    config.subscribe(),
                    self.shared.clone(),
                    None,
                ))),
            }
        }
        if let Some(why) = &bound.ipv4_only {
            tracing::warn!(route = %route.name, listen = %bound.addr,
                "listening on IPv4 only, not dual-stack: {why}");
        }
        tracing::info!(route = %route.name, listen = %bound.addr, families = bound.families(),
            upstream = %route.upstream, proxy_protocol = %route.proxy_protocol,
            destination = %route.describe_destinations(), "route accepting");
        Ok(RunningRoute {
            route: route.clone(),
            config,
        })
    }

    /// Stops accepting on every route (connections stay).
    pub fn stop_accepting(&mut self) {
        for (_, running) in self.running.drain() {
            running.config.send_replace(None);
        }
        self.shared.metrics.set_routes(0);
    }

    /// Runs until the drain starts: applies every table `routes` delivers (starting with the
    /// current one), and retries routes that failed to bind every second. Then keeps accepting
    /// for the shutdown delay (`/readyz` already fails, so endpoints are withdrawn meanwhile),
    /// stops accepting and waits for the open connections, at most the drain timeout or until
    /// shutdown is forced.
    pub async fn run(
        mut self,
        mut routes: watch::Receiver<RouteTable>,
        shutdown: Shutdown,
    ) -> DrainOutcome {
        let table = routes.borrow_and_update().clone();
        let mut failing = self.apply_logged(&table, true);
        let mut retry = tokio::time::interval(Duration::from_secs(1));
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut updates_open = true;
        loop {
            tokio::select! {
                biased;
                () = shutdown.draining() => break,
                changed = routes.changed(), if updates_open => match changed {
                    Ok(()) => {
                        let table = routes.borrow_and_update().clone();
                        failing = self.apply_logged(&table, true);
                    }
                    Err(_) => updates_open = false,
                },
                _ = retry.tick(), if failing => {
                    let table = routes.borrow().clone();
                    failing = self.apply_logged(&table, false);
                }
            }
        }
        let delay = self.shared.config.shutdown_delay;
        if !delay.is_zero() && !shutdown.is_forced() {
            tracing::info!(
                ?delay,
                "shutting down: /readyz fails; still accepting for the shutdown delay, so that endpoints are withdrawn first"
            );
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = shutdown.forced() => {}
            }
        }
        self.stop_accepting();
        let grace = self.shared.config.drain_timeout;
        tracing::info!(
            connections = self.active_connections(),
            ?grace,
            "draining: stopped accepting, waiting for open connections"
        );
        self.shared.listeners.close();
        let shared = self.shared.clone();
        let outcome = shutdown
            .drain_within(grace, async move {
                // The accept loops first take what is queued on their sockets.
                shared.listeners.wait().await;
                shared.tracker.close();
                shared.tracker.wait().await;
            })
            .await;
        match outcome {
            DrainOutcome::Completed => tracing::info!("drained: all connections closed"),
            DrainOutcome::TimedOut => tracing::warn!(
                connections = self.active_connections(),
                "drain timeout passed; closing the remaining connections"
            ),
            DrainOutcome::Forced => tracing::warn!(
                connections = self.active_connections(),
                "shutdown forced; closing the remaining connections"
            ),
        }
        outcome
    }

    fn apply_logged(&mut self, table: &RouteTable, loud: bool) -> bool {
        let errors = self.apply(table);
        for err in &errors {
            if loud {
                tracing::error!(error = %err, "route not started; retrying every second");
            } else {
                tracing::debug!(error = %err, "route still not started");
            }
        }
        !errors.is_empty()
    }
}

/// A listening socket with `SO_REUSEPORT` (several per route spread accepting over workers,
/// and a restarted proxy can bind before the old one lets go) and `TCP_NODELAY`, which accepted
/// sockets inherit; `[::]` is dual-stack, or `0.0.0.0` on a node without IPv6
/// ([`hairpin_runtime::net::bind_tcp`]). Returns what was bound, without the socket.
fn bind(
    addr: SocketAddr,
    backlog: u32,
) -> io::Result<(std::net::TcpListener, hairpin_runtime::net::Bound)> {
    let (socket, bound) = hairpin_runtime::net::bind_tcp(addr, |socket| {
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_tcp_nodelay(true)?;
        socket.set_nonblocking(true)
    })?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    Ok((socket.into(), bound))
}

async fn accept_loop(
    listener: std::net::TcpListener,
    mut config: watch::Receiver<Option<Arc<RouteRuntime>>>,
    shared: Arc<Shared>,
    shard: Option<usize>,
) {
    let Some(mut route) = config.borrow_and_update().clone() else {
        return;
    };
    // Registered here, with the reactor of the runtime that runs this loop.
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(err) => {
            tracing::error!(route = %route.route.name, error = %err, "cannot register a listener");
            return;
        }
    };
    loop {
        // At the limit, stop accepting (clients wait in the backlog) until a connection ends.
        // No permit is held while waiting in `accept`: with several listeners, an idle one must
        // not keep the last permit from a busy one.
        if shared.limit.available_permits() == 0 {
            shared.limit_reached();
            tokio::select! {
                permit = shared.limit.acquire() => if permit.is_err() { return },
                changed = config.changed() => {
                    match changed.ok().and_then(|()| config.borrow_and_update().clone()) {
                        Some(updated) => route = updated,
                        None => break,
                    }
                    continue;
                }
            }
        }
        let accepted = tokio::select! {
            biased;
            changed = config.changed() => {
                match changed.ok().and_then(|()| config.borrow_and_update().clone()) {
                    Some(updated) => route = updated,
                    None => break,
                }
                continue;
            }
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of file descriptors: the connection stays queued and the listener
                // readable, so pause instead of spinning, and log a few lines, not one per try.
                fdlimit::accept_failed(&err, &route.route.name, &shared.accept_log).await;
                continue;
            }
        };
        let permit = match shared.limit.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                // Another listener took the last permit since the check above.
                shared.limit_reached();
                match shared.limit.clone().acquire_owned().await {
                    Ok(permit) => permit,
                    Err(_) => return,
                }
            }
        };
        dispatch(stream, peer, &route, &shared, shard, permit);
    }
    // Stopped. Closing a listening socket resets the connections in its queue, which the
    // kernel handed to it even if other listeners share the port: take them first, straight
    // from the socket (tokio's readiness may not have seen them yet), while permits last.
    let Ok(listener) = listener.into_std() else {
        return;
    };
    while let Ok(permit) = shared.limit.clone().try_acquire_owned() {
        let Ok((stream, peer)) = listener.accept() else {
            break;
        };
        let stream = stream
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpStream::from_std(stream));
        if let Ok(stream) = stream {
            dispatch(stream, peer, &route, &shared, shard, permit);
        }
    }
}

/// Serves an accepted connection: here, or on the least loaded worker when this one has more
/// than [`crate::shared::handoff_limit`] of its load.
fn dispatch(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    route: &Arc<RouteRuntime>,
    shared: &Arc<Shared>,
    shard: Option<usize>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let Some(own) = shard else {
        shared.tracker.spawn(conn::serve(Conn::new(
            Incoming::Here(stream),
            peer,
            route.clone(),
            shared.tickers[0].clone(),
            permit,
            None,
        )));
        return;
    };
    // The kernel spreads connections over the workers' listeners by a hash, which can
    // leave one worker with most of a handful of long connections; hand a connection to
    // the least loaded worker when this one has clearly more (`handoff_limit`).
    let target = shared.least_loaded(own);
    let stream = if target == own {
        Incoming::Here(stream)
    } else {
        match stream.into_std() {
            Ok(stream) => Incoming::Moved(stream),
            Err(err) => {
                tracing::debug!(error = %err, "cannot move a connection to another worker");
                return;
            }
        }
    };
    let worker = &shared.shards[target];
    worker.load.inc();
    if target != own {
        shared.metrics.handoff();
    }
    let serving = conn::serve(Conn::new(
        stream,
        peer,
        route.clone(),
        shared.tickers[target].clone(),
        permit,
        Some(Load(worker.load.clone())),
    ));
    if target == own {
        shared.tracker.spawn(serving);
    } else {
        shared.tracker.spawn_on(serving, &worker.handle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_sockets_inherit_nodelay_and_reuseport_allows_a_second_listener() {
        let first =
            TcpListener::from_std(bind("127.0.0.1:0".parse().unwrap(), 16).unwrap().0).unwrap();
        let addr = first.local_addr().unwrap();
        let (_client, accepted) =
            tokio::join!(tokio::net::TcpStream::connect(addr), first.accept());
        let (stream, _) = accepted.unwrap();
        assert!(
            stream.nodelay().unwrap(),
            "TCP_NODELAY must be inherited from the listener"
        );
        // (Bound after the accept above: the kernel spreads connections over both.)
        let _second = bind(addr, 16).expect("SO_REUSEPORT lets a second listener share the port");
    }

    /// A connection's task is this future for as long as the connection is open: 10,000 open
    /// connections hold 10,000 of them (issue 48). tokio allocates a task as one cell aligned
    /// to 128 bytes: its header (32 bytes), scheduler and id (16), the task tracker's token
    /// (8), the stage's tag (8), this future and a trailer (48), rounded up to 128. Up to 400
    /// bytes the cell is 512 bytes; it was 1,024 (an 840-byte future: each `async fn`
    /// argument kept twice, the connect's timer and the header's addresses kept while
    /// copying).
    #[tokio::test]
    async fn the_state_of_an_open_connection_stays_small() {
        let mut registry = prometheus_client::registry::Registry::default();
        let shared = Arc::new(Shared::new(
            ProxyConfig::default(),
            ProxyMetrics::register(&mut registry),
        ));
        let route = Route {
            name: "web".into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream: "127.0.0.1:9".parse().unwrap(),
            proxy_protocol: crate::routes::ProxyProtocol::V1,
            destination: None,
            destinations: Vec::new(),
        };
        let runtime = Arc::new(RouteRuntime::new(&route, &shared));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (_client, accepted) = tokio::join!(
            tokio::net::TcpStream::connect(listener.local_addr().unwrap()),
            listener.accept()
        );
        let (stream, peer) = accepted.unwrap();
        let permit = shared.limit.clone().try_acquire_owned().unwrap();
        let serving = conn::serve(Conn::new(
            Incoming::Here(stream),
            peer,
            runtime,
            shared.tickers[0].clone(),
            permit,
            None,
        ));
        let size = std::mem::size_of_val(&serving);
        eprintln!("a connection's future: {size} bytes");
        assert!(
            size <= 400,
            "a connection's future is {size} bytes: its task cell grows past 512 bytes"
        );
    }

    #[tokio::test]
    async fn a_busy_address_is_a_bind_error_naming_it() {
        let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = busy.local_addr().unwrap();
        let mut registry = prometheus_client::registry::Registry::default();
        let mut proxy = Proxy::new(
            ProxyConfig::default(),
            ProxyMetrics::register(&mut registry),
        );
        let table = RouteTable::new(vec![Route {
            name: "web".into(),
            listen: addr,
            upstream: "127.0.0.1:9".parse().unwrap(),
            proxy_protocol: crate::routes::ProxyProtocol::V1,
            destination: None,
            destinations: Vec::new(),
        }])
        .unwrap();
        let errors = proxy.apply(&table);
        assert_eq!(errors.len(), 1);
        let message = errors[0].to_string();
        assert!(
            message.contains(&addr.to_string()) && message.contains("web"),
            "{message}"
        );
        assert!(proxy.route_names().is_empty());
    }
}
