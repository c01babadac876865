//! Pieces every long-running `hairpin` command shares: the admin server (`/livez`, `/readyz`,
//! `/metrics`), shutdown signals (the first drains, the second forces), logging, the file
//! descriptor limit, rate-limited logging, the kubeconfig, following one ConfigMap key by
//! name, and the clap argument groups that configure them.
#![forbid(unsafe_code)]

pub mod admin;
pub mod configmap;
pub mod duration;
pub mod fdlimit;
pub mod kubeconfig;
pub mod logging;
pub mod net;
pub mod process;
pub mod ratelimit;
pub mod shutdown;

pub use admin::{AdminArgs, AdminError, AdminLimits, AdminServer, Readiness};
pub use duration::{parse_duration, parse_positive_duration};
pub use logging::{LogArgs, LogFormat};
pub use ratelimit::LogLimiter;
pub use shutdown::Shutdown;
