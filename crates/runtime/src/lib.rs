//! Pieces every long-running `hairpin` command shares: the admin server (`/livez`, `/readyz`,
//! `/metrics`), shutdown signals (the first drains, the second forces), logging, the file
//! descriptor limit, rate-limited logging, the kubeconfig, following one ConfigMap key by
//! name, and the clap argument groups that configure them. [`Builder`] starts a command with
//! them: the one start-up path of every command that needs an async runtime.
#![forbid(unsafe_code)]

// One path per type: a private module's public items are re-exported here; a public module's
// are reached through it only.

mod admin;
mod builder;
pub mod configmap;
mod duration;
pub mod fdlimit;
pub mod kubeconfig;
pub mod logging;
pub mod net;
pub mod process;
mod ratelimit;
mod shutdown;

pub use admin::{AdminArgs, AdminError, AdminLimits, AdminServer, Readiness, ReadyCondition};
pub use builder::{
    Admin, AdminSlot, AdminTask, BuildError, Builder, FdBudget, OnSignal, Runtime, Started, Threads,
};
pub use duration::{parse_duration, parse_positive_duration};
pub use ratelimit::LogLimiter;
pub use shutdown::{DrainOutcome, Shutdown};
