//! The command-line surface. Each subcommand's arguments live next to its runner in `cmd/`.

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

use crate::cmd;

/// Fixes PROXY-protocol "hairpin" traffic in Kubernetes.
///
/// In-cluster clients of a cluster's own public hostnames bypass the cloud load balancer
/// (kube-proxy short-circuits the external IP), so the ingress never gets the PROXY header it
/// requires. hairpin discovers those load balancers and hostnames, points in-cluster DNS at its
/// own proxy, and the proxy adds exactly the header the real load balancer would have sent.
#[derive(Debug, Parser)]
#[command(
    name = "hairpin",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Print what hairpin would write: for objects in YAML files (`-f`), or, read-only, for
    /// the cluster (what the controller would write now).
    Plan(cmd::plan::Args),
    /// Accept TCP connections, prepend a PROXY protocol header, forward them upstream.
    Proxy(cmd::proxy::Args),
    /// Watch the cluster and keep CoreDNS and the hairpin Services equal to the plan.
    // Boxed: its many flags make it far larger than the other commands' arguments.
    Controller(Box<cmd::controller::Args>),
    /// Remove everything hairpin wrote and restore the CoreDNS configuration exactly.
    Uninstall(cmd::uninstall::Args),
    /// Keep a marked block of hairpin hostnames in a node's hosts file.
    NodeAgent(cmd::node_agent::Args),
    /// Diagnose whether hairpin traffic to a host is broken, why, and what fixes it.
    Doctor(cmd::doctor::Args),
    /// Answer TCP/HTTP with what was received, including any PROXY header (for checking an LB).
    Echo(cmd::echo::Args),
    /// Print the version, commit and architecture (`-o json` for scripts).
    Version(cmd::version::Args),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish).
    Completion(cmd::completion::Args),
    /// Print the `Hairpin` CustomResourceDefinition (the chart's `crds/` file is this output).
    #[command(hide = true)]
    Crd,
}

/// Runs the chosen subcommand; `main` prints an error and turns it into the exit code.
pub(crate) fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Plan(args) => cmd::plan::run(args),
        Command::Proxy(args) => cmd::proxy::run(args),
        Command::Controller(args) => cmd::controller::run(*args),
        Command::Uninstall(args) => cmd::uninstall::run(args),
        Command::NodeAgent(args) => cmd::node_agent::run(args),
        Command::Doctor(args) => cmd::doctor::run(args),
        Command::Echo(args) => cmd::echo::run(args),
        Command::Version(args) => cmd::version::run(&args),
        Command::Completion(args) => cmd::completion::run(&args, Cli::command()),
        Command::Crd => {
            print!("{}", hairpin_controller::crd::crd_yaml());
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
