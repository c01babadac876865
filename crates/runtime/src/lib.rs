//! Pieces every long-running `hairpin` command shares: the admin server (`/livez`, `/readyz`,
//! `/metrics`), shutdown signals (the first drains, the second forces), logging, and the clap
//! argument groups that configure them.
#![forbid(unsafe_code)]

pub mod admin;
pub mod logging;
pub mod shutdown;

pub use admin::{AdminArgs, AdminError, AdminServer, Readiness};
pub use logging::{LogArgs, LogFormat};
pub use shutdown::Shutdown;
