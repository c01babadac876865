//! Subcommand runners: each turns its parsed arguments into a call into a library crate.

use std::process::ExitCode;

use crate::cli::{Cli, Command};

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

/// Runs the chosen subcommand; `main` prints an error and turns it into the exit code.
pub(crate) fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Plan(args) => plan::run(args),
        Command::Proxy(args) => proxy::run(args),
        Command::Controller(args) => controller::run(*args),
        Command::Uninstall(args) => uninstall::run(args),
        Command::NodeAgent(args) => node_agent::run(args),
        Command::Doctor(args) => doctor::run(args),
        Command::Echo(args) => echo::run(args),
        Command::Version(args) => version::run(&args),
        Command::Completion(args) => completion::run(&args),
        Command::Crd => {
            print!("{}", hairpin_controller::crd::crd_yaml());
            Ok(ExitCode::SUCCESS)
        }
    }
}
