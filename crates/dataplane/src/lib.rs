//! The hairpin TCP proxy: accepts connections, prepends the PROXY protocol header the cloud load
//! balancer would have sent, and forwards them to the ingress.
//!
//! - [`routes`]: the route table (pure, serde), what the controller publishes.
//! - [`Proxy`]: runs a route table, and any later one from a `watch` channel, without dropping
//!   established connections.
//! - [`routes_file`]: a route table source that follows a JSON file (a ConfigMap volume).
//! - [`routes_configmap`]: a route table source that follows the controller's ConfigMap.
//! - [`Shards`]: the worker threads, one runtime each, that [`Proxy::with_shards`] serves on.
#![forbid(unsafe_code)]

pub mod config;
mod conn;
mod copy;
mod error;
pub mod metrics;
mod proxy;
pub mod routes;
pub mod routes_configmap;
pub mod routes_file;
mod shards;
mod shared;
mod splice;
mod ticker;
mod upstream;

pub use config::ProxyConfig;
pub use error::Error;
pub use metrics::ProxyMetrics;
pub use proxy::Proxy;
pub use shards::Shards;
pub use upstream::resolve;

/// The most descriptors the proxy's splice pipes take at once, besides the connections' own.
pub const PIPE_DESCRIPTORS: u64 = 2 * splice::MAX_PIPES as u64;
