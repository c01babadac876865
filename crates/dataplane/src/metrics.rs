//! Prometheus metrics of the proxy.
//!
//! Connections take their per-route handles once, when the route starts (so the hot path
//! touches only atomics, never the label map), and add their byte counts in large steps rather
//! than per read.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of per-route series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RouteLabels {
    route: String,
}

/// Direction of a byte count.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub(crate) enum Direction {
    /// From the client to the upstream (not counting the PROXY header).
    client_to_upstream,
    /// From the upstream to the client.
    upstream_to_client,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BytesLabels {
    route: String,
    direction: Direction,
}

/// Why connecting to an upstream failed.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub(crate) enum ConnectFailure {
    /// The name did not resolve.
    resolve,
    /// Connection refused.
    refused,
    /// The connect timeout passed.
    timeout,
    /// No route to the host or network.
    unreachable,
    /// Anything else.
    other,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ConnectErrorLabels {
    route: String,
    reason: ConnectFailure,
}

/// Labels of per-worker series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct WorkerLabels {
    worker: String,
}

fn connect_histogram() -> Histogram {
    Histogram::new([
        0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
        2.5, 5.0, 10.0,
    ])
}

/// The proxy's metric families, registered once per process.
#[derive(Clone, Debug)]
pub struct ProxyMetrics {
    active: Family<RouteLabels, Gauge>,
    connections: Family<RouteLabels, Counter>,
    bytes: Family<BytesLabels, Counter>,
    connect_errors: Family<ConnectErrorLabels, Counter>,
    connect_seconds: Family<RouteLabels, Histogram, fn() -> Histogram>,
    idle_timeouts: Family<RouteLabels, Counter>,
    half_close_timeouts: Family<RouteLabels, Counter>,
    limit_reached: Counter,
    max_connections: Gauge,
    routes: Gauge,
    route_errors: Counter,
    worker_connections: Family<WorkerLabels, Gauge>,
    handoffs: Counter,
}

impl ProxyMetrics {
    /// Registers the families in `registry` (give it a `hairpin_proxy` sub-registry).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            active: Family::default(),
            connections: Family::default(),
            bytes: Family::default(),
            connect_errors: Family::default(),
            connect_seconds: Family::new_with_constructor(connect_histogram),
            idle_timeouts: Family::default(),
            half_close_timeouts: Family::default(),
            limit_reached: Counter::default(),
            max_connections: Gauge::default(),
            routes: Gauge::default(),
            route_errors: Counter::default(),
            worker_connections: Family::default(),
            handoffs: Counter::default(),
        };
        registry.register(
            "connections_active",
            "Client connections open now",
            metrics.active.clone(),
        );
        registry.register(
            "connections",
            "Client connections accepted",
            metrics.connections.clone(),
        );
        registry.register(
            "bytes",
            "Bytes forwarded (added when a connection ends, and every MiB on long ones)",
            metrics.bytes.clone(),
        );
        registry.register(
            "upstream_connect_errors",
            "Failed connections to the upstream, by reason",
            metrics.connect_errors.clone(),
        );
        registry.register(
            "upstream_connect_duration_seconds",
            "Time to connect to the upstream",
            metrics.connect_seconds.clone(),
        );
        registry.register(
            "idle_timeouts",
            "Connections closed because no byte moved for the idle timeout",
            metrics.idle_timeouts.clone(),
        );
        registry.register(
            "half_close_timeouts",
            "Connections closed because no byte moved for the half-close timeout after one side finished",
            metrics.half_close_timeouts.clone(),
        );
        registry.register(
            "connection_limit_reached",
            "Times accepting paused because --max-connections were open",
            metrics.limit_reached.clone(),
        );
        registry.register(
            "max_connections",
            "The configured connection limit",
            metrics.max_connections.clone(),
        );
        registry.register("routes", "Routes accepting now", metrics.routes.clone());
        registry.register(
            "route_errors",
            "Route updates that failed (unreadable routes file, listen address not bindable)",
            metrics.route_errors.clone(),
        );
        registry.register(
            "worker_connections",
            "Connections open now on each worker thread (`hairpin proxy` runs one per CPU)",
            metrics.worker_connections.clone(),
        );
        registry.register(
            "worker_handoffs",
            "Connections accepted by one worker and handed to a less loaded one",
            metrics.handoffs.clone(),
        );
        metrics
    }

    /// The open-connections gauge of worker `index`.
    pub(crate) fn worker(&self, index: usize) -> Gauge {
        self.worker_connections.get_or_create_owned(&WorkerLabels {
            worker: index.to_string(),
        })
    }

    pub(crate) fn handoff(&self) {
        self.handoffs.inc();
    }

    pub(crate) fn route(&self, route: &str) -> RouteMetrics {
        let labels = RouteLabels {
            route: route.to_owned(),
        };
        let bytes = |direction| {
            self.bytes.get_or_create_owned(&BytesLabels {
                route: route.to_owned(),
                direction,
            })
        };
        let errors = |reason| {
            self.connect_errors
                .get_or_create_owned(&ConnectErrorLabels {
                    route: route.to_owned(),
                    reason,
                })
        };
        RouteMetrics {
            active: self.active.get_or_create_owned(&labels),
            connections: self.connections.get_or_create_owned(&labels),
            bytes_up: bytes(Direction::client_to_upstream),
            bytes_down: bytes(Direction::upstream_to_client),
            errors: [
                errors(ConnectFailure::resolve),
                errors(ConnectFailure::refused),
                errors(ConnectFailure::timeout),
                errors(ConnectFailure::unreachable),
                errors(ConnectFailure::other),
            ],
            connect_seconds: self.connect_seconds.get_or_create_owned(&labels),
            idle_timeouts: self.idle_timeouts.get_or_create_owned(&labels),
            half_close_timeouts: self.half_close_timeouts.get_or_create_owned(&labels),
        }
    }

    pub(crate) fn limit_reached(&self) {
        self.limit_reached.inc();
    }

    pub(crate) fn set_max_connections(&self, max: usize) {
        self.max_connections
            .set(i64::try_from(max).unwrap_or(i64::MAX));
    }

    pub(crate) fn set_routes(&self, count: usize) {
        self.routes.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    pub(crate) fn route_error(&self) {
        self.route_errors.inc();
    }
}

/// One route's series, resolved once.
#[derive(Clone, Debug)]
pub(crate) struct RouteMetrics {
    pub(crate) active: Gauge,
    pub(crate) connections: Counter,
    pub(crate) bytes_up: Counter,
    pub(crate) bytes_down: Counter,
    errors: [Counter; 5],
    pub(crate) connect_seconds: Histogram,
    pub(crate) idle_timeouts: Counter,
    pub(crate) half_close_timeouts: Counter,
}

impl RouteMetrics {
    pub(crate) fn connect_error(&self, reason: ConnectFailure) {
        let index = match reason {
            ConnectFailure::resolve => 0,
            ConnectFailure::refused => 1,
            ConnectFailure::timeout => 2,
            ConnectFailure::unreachable => 3,
            ConnectFailure::other => 4,
        };
        self.errors[index].inc();
    }
}
