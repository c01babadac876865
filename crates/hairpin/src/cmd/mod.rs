//! Subcommand runners: each turns its parsed arguments into a call into a library crate.
//! [`crate::cli`] defines the command line from their `Args` and dispatches to them (one way:
//! nothing here knows the whole command line).

pub(crate) mod args;
pub(crate) mod completion;
pub(crate) mod controller;
pub(crate) mod doctor;
pub(crate) mod echo;
pub(crate) mod node_agent;
pub(crate) mod plan;
pub(crate) mod proxy;
pub(crate) mod uninstall;
pub(crate) mod version;
