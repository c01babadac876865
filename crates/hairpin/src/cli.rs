//! The command-line surface. Each subcommand's arguments live next to its runner in `cmd/`.

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

use crate::cmd;

/// Fixes PROXY-protocol "hairpin" traffic in Kubernetes.
///
/// In-cluster clients of a cluster's own public hostnames bypass the cloud load balancer
/// (kube-proxy short-circuits the external IP), so the ingress never gets the PROXY header it
/// requires. hairpin discovers those load balancers and hostnames and cures each one of two
/// ways (`--cure`, docs/cures.md):
///
/// - dns: in-cluster DNS points the names at hairpin's own proxy, which adds exactly the
///   header the real load balancer would have sent. Works everywhere.
///
/// - native: `ipMode: Proxy` on the load balancer's status, so that kube-proxy (or the CNI)
///   stops short-circuiting its address and in-cluster traffic crosses the real load balancer.
///   Only where the load balancer is itself a proxy (it terminates TCP and connects to the
///   NodePorts: DigitalOcean, Linode, Vultr, Civo...): where the nodes receive its address as
///   destination (MetalLB, kube-vip, Cilium LB-IPAM, k3s ServiceLB...) kube-proxy would drop
///   every rule for that IP and cut every client outside the cluster off, so hairpin never
///   sets it there. `auto` (the default) tries native only on a proxy, proven by probe, and
///   keeps the DNS cure until then and everywhere else.
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
    ///
    /// Each load balancer that needs a hairpin gets one of two cures (`--cure`, per Service
    /// the annotation `<prefix>cure`):
    ///
    /// - dns: CoreDNS rules (or `coredns-custom`, or external-dns `DNSEndpoint`s) point its
    ///   hostnames at a hairpin Service in front of hairpin's proxy, which adds the PROXY
    ///   header the load balancer would have added; the node agent does the same for the
    ///   nodes' hosts files.
    ///
    /// - native: the controller sets `ipMode: Proxy` on the load balancer's status, probes its
    ///   address from inside the cluster and, once proven, drops the DNS rules (make before
    ///   break; a failed probe puts the status back). Only on a load balancer that is itself a
    ///   proxy (a provider known to terminate TCP, or `<prefix>delivery: proxy` on the
    ///   Service): never on a VIP the nodes receive (MetalLB, kube-vip, Cilium LB-IPAM,
    ///   OpenELB, PureLB, LoxiLB, k3s ServiceLB), where kube-proxy would drop every rule for
    ///   that IP and cut every client outside the cluster off. Forcing it there is refused.
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
