//! What every listener and connection of a [`crate::Proxy`] shares: the settings, metrics and
//! connection limit, the workers, and each route's runtime state.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hairpin_runtime::LogLimiter;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use crate::config::ProxyConfig;
use crate::metrics::{ConnectFailure, ProxyMetrics, RouteMetrics};
use crate::routes::Route;
use crate::ticker::Ticker;
use crate::upstream::Target;

/// State shared by every listener and connection.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: ProxyConfig,
    pub(crate) metrics: ProxyMetrics,
    pub(crate) limit: Arc<Semaphore>,
    /// The connections.
    pub(crate) tracker: TaskTracker,
    /// The accept loops, which end once their queue is taken after they stop accepting.
    pub(crate) listeners: TaskTracker,
    pub(crate) shards: Vec<Shard>,
    /// One per shard (or one on the caller's runtime without shards): connect and idle
    /// timeouts.
    pub(crate) tickers: Vec<Arc<Ticker>>,
    limit_log: LogLimiter,
    pub(crate) accept_log: LogLimiter,
}

/// What a route's connections need, swapped as a whole when the route changes.
#[derive(Debug)]
pub(crate) struct RouteRuntime {
    pub(crate) route: Route,
    pub(crate) target: Target,
    pub(crate) metrics: RouteMetrics,
    connect_log: LogLimiter,
}

impl RouteRuntime {
    pub(crate) fn new(route: &Route, shared: &Shared) -> Self {
        Self {
            target: Target::new(route.upstream.clone(), shared.config.resolve_ttl),
            metrics: shared.metrics.route(&route.name),
            connect_log: LogLimiter::new(5, Duration::from_secs(10)),
            route: route.clone(),
        }
    }

    /// Counts a failed upstream connect and logs it, at most a few times per window.
    pub(crate) fn connect_failed(
        &self,
        client: SocketAddr,
        failure: ConnectFailure,
        message: &str,
    ) {
        self.metrics.connect_error(failure);
        if let Some(suppressed) = self.connect_log.check() {
            tracing::warn!(
                route = %self.route.name,
                upstream = %self.target.upstream(),
                %client,
                reason = ?failure,
                error = message,
                suppressed,
                "cannot connect to upstream; closing the client connection"
            );
        }
    }
}

/// A worker runtime and how many connections it serves (a gauge of the metrics).
#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) load: prometheus_client::metrics::gauge::Gauge,
}

impl Shared {
    /// Shared state without workers: connections run on the caller's runtime.
    pub(crate) fn new(config: ProxyConfig, metrics: ProxyMetrics) -> Self {
        metrics.set_max_connections(config.max_connections);
        let limit = Arc::new(Semaphore::new(
            config.max_connections.clamp(1, Semaphore::MAX_PERMITS),
        ));
        let tickers = vec![Ticker::new(&config)];
        Self {
            config,
            metrics,
            limit,
            tracker: TaskTracker::new(),
            listeners: TaskTracker::new(),
            shards: Vec::new(),
            tickers,
            limit_log: LogLimiter::new(1, Duration::from_secs(10)),
            accept_log: LogLimiter::new(5, Duration::from_secs(10)),
        }
    }

    /// Serves on these worker runtimes, each with its own ticker (started here).
    pub(crate) fn set_shards(&mut self, shards: Vec<tokio::runtime::Handle>) {
        self.shards = shards
            .into_iter()
            .enumerate()
            .map(|(index, handle)| Shard {
                handle,
                load: self.metrics.worker(index),
            })
            .collect();
        self.tickers = self
            .shards
            .iter()
            .map(|shard| {
                let ticker = Ticker::new(&self.config);
                drop(shard.handle.spawn(ticker.run()));
                ticker
            })
            .collect();
    }

    /// The worker to serve a connection accepted by worker `own`: the least loaded one when
    /// `own` carries more than [`handoff_limit`] of the least's, else `own`.
    pub(crate) fn least_loaded(&self, own: usize) -> usize {
        let mine = self.shards[own].load.get();
        let (index, least) = self
            .shards
            .iter()
            .enumerate()
            .map(|(i, shard)| (i, shard.load.get()))
            .min_by_key(|&(_, load)| load)
            .unwrap_or((own, mine));
        if mine > handoff_limit(least) {
            index
        } else {
            own
        }
    }

    /// Counts and logs (rate-limited) that the connection limit stopped accepting.
    pub(crate) fn limit_reached(&self) {
        self.metrics.limit_reached();
        if let Some(suppressed) = self.limit_log.check() {
            tracing::warn!(
                max_connections = self.config.max_connections,
                suppressed,
                "connection limit reached: not accepting until a connection ends"
            );
        }
    }
}

/// The most open connections a worker keeps for itself while another serves `least`: beyond
/// it, a connection it accepts is handed to the least loaded worker. HAProxy gives each
/// accepted connection to its least loaded thread; the kernel's `SO_REUSEPORT` hash alone left
/// 64 keep-alive connections split up to 42/22 over two workers, the busier one then doing two
/// thirds of the work (issue 48), and the previous limit (twice the least's) did not move one of
/// them. The margin (two, plus an eighth of the least's load) keeps workers with about the same load from
/// trading connections on every accept: each move costs a re-registration and a wake-up of the
/// other thread.
pub(crate) fn handoff_limit(least: i64) -> i64 {
    least + 2 + least / 8
}

#[cfg(test)]
mod tests {
    use super::handoff_limit;

    #[test]
    fn handoff_limit_keeps_long_connections_even_and_near_equal_loads_in_place() {
        // 64 connections end at most 34/30 (35 > 34 moves one), not 42/22 as the hash left them.
        assert_eq!(handoff_limit(29), 34);
        assert_eq!(handoff_limit(30), 35);
        // Near-equal loads stay where they were accepted.
        assert_eq!(handoff_limit(0), 2);
        assert_eq!(handoff_limit(16), 20);
    }
}
