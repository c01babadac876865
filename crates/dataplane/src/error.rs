//! The data plane's one error type.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Errors of the data plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An upstream that is not `host:port`.
    #[error("invalid upstream {upstream:?}: {reason}")]
    InvalidUpstream {
        /// What was given.
        upstream: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A routes document that is not valid JSON or has invalid fields.
    #[error("cannot parse routes: {0}")]
    ParseRoutes(String),
    /// A route table that does not validate (duplicate names, overlapping listeners...).
    #[error("invalid routes: {0}")]
    InvalidRoutes(String),
    /// The routes file could not be read.
    #[error("cannot read routes file {path}: {source}")]
    ReadRoutes {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// A listen address could not be bound (busy, not a local address, no permission).
    #[error("cannot listen on {addr} (route {route:?}): {source}")]
    Bind {
        /// The route that wanted it.
        route: String,
        /// The address.
        addr: SocketAddr,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// An upstream name that does not resolve.
    #[error("upstream {upstream} does not resolve: {reason}")]
    Resolve {
        /// The upstream.
        upstream: String,
        /// The resolver's answer.
        reason: String,
    },
}

impl Error {
    /// A short label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::InvalidUpstream { .. } => "invalid_upstream",
            Error::ParseRoutes(_) => "parse_routes",
            Error::InvalidRoutes(_) => "invalid_routes",
            Error::ReadRoutes { .. } => "read_routes",
            Error::Bind { .. } => "bind",
            Error::Resolve { .. } => "resolve",
        }
    }
}
