//! `hairpin node-agent`: keep a marked block of hairpin hostnames in a node's hosts file.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hairpin_controller::client::ClientArgs;

use crate::cmd::args::HostsConfigMapArgs;
use hairpin_node_agent::{
    Agent, AgentOptions, ConfigMapSource, HostsFile, Registry, SourceFile, SyncOutcome,
};
use hairpin_runtime::{AdminArgs, AdminServer, LogArgs, Shutdown, parse_positive_duration};
use tokio::sync::Notify;

/// Keeps a marked block in a hosts file that maps every planned hostname to its hairpin
/// Service's address, so node-level clients (the kubelet pulling images, host-network pods)
/// reach the hairpin proxy too. The file is rewritten in place (safe for a bind mount); lines
/// outside the block never change.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The hosts file to keep (in the DaemonSet: the node's /etc/hosts mounted by hostPath).
    #[arg(long, env = "HAIRPIN_HOSTS_FILE", default_value = "/host/etc/hosts")]
    pub(crate) hosts_file: PathBuf,

    /// JSON or YAML list of `{ip, hostnames}` entries to keep in the block, re-read every
    /// interval. Without it the entries come from the cluster: the hosts block the controller
    /// publishes in `--hosts-configmap` (each planned hostname with its hairpin Service's
    /// ClusterIPs), followed through one watch on that ConfigMap.
    #[arg(long, env = "HAIRPIN_SOURCE_FILE", value_name = "PATH")]
    pub(crate) source_file: Option<PathBuf>,

    /// Where the controller publishes the hosts block. Until it exists no hosts block is
    /// written; a value that does not parse is logged and the last good block stays.
    #[command(flatten)]
    pub(crate) hosts: HostsConfigMapArgs,

    #[command(flatten)]
    pub(crate) client: ClientArgs,

    /// Time between checks of the source and the hosts file (`30s`, `1m`; a bare number is
    /// seconds).
    #[arg(long, env = "HAIRPIN_INTERVAL", default_value = "10s", value_parser = parse_positive_duration)]
    pub(crate) interval: Duration,

    /// Sync once and exit (exit code 1 on failure).
    #[arg(long, env = "HAIRPIN_ONCE", conflicts_with = "remove")]
    pub(crate) once: bool,

    /// Remove the block and exit (uninstall).
    #[arg(long, env = "HAIRPIN_REMOVE")]
    pub(crate) remove: bool,

    /// Remove the block when stopped by SIGTERM/SIGINT.
    #[arg(long, env = "HAIRPIN_REMOVE_ON_EXIT")]
    pub(crate) remove_on_exit: bool,

    #[command(flatten)]
    pub(crate) admin: AdminArgs,

    #[command(flatten)]
    pub(crate) log: LogArgs,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    hairpin_runtime::logging::init(&args.log).map_err(anyhow::Error::msg)?;
    let hosts = HostsFile::new(&args.hosts_file);
    if args.remove {
        let outcome = hosts.remove()?;
        println!(
            "{}: {}",
            args.hosts_file.display(),
            match outcome {
                SyncOutcome::Unchanged => "no hairpin block",
                SyncOutcome::Written { .. } => "hairpin block removed",
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    let options = AgentOptions {
        interval: args.interval,
        remove_on_exit: args.remove_on_exit,
    };
    if args.once {
        let path = args
            .source_file
            .as_ref()
            .context("--once needs --source-file (the cluster source is a running watch)")?;
        let outcome = Agent::new(hosts, SourceFile::new(path), options).sync_once()?;
        println!(
            "{}: {}",
            args.hosts_file.display(),
            match outcome {
                SyncOutcome::Unchanged => "already up to date",
                SyncOutcome::Written { .. } => "updated and verified",
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let shutdown = Shutdown::from_signals().context("installing signal handlers")?;
        let admin = AdminServer::bind(args.admin.admin_addr).await?;
        let registry = Registry::default();
        let agent = match &args.source_file {
            Some(path) => Agent::new(hosts, SourceFile::new(path), options),
            None => {
                let client = args.client.client().await?;
                let changed = Arc::new(Notify::new());
                let source = ConfigMapSource::start(
                    client,
                    &args.hosts.namespace,
                    &args.hosts.hosts_config_map,
                    hairpin_planner::HOSTS_KEY,
                    changed.clone(),
                    &shutdown,
                );
                Agent::new(hosts, source, options).wake_on(changed)
            }
        };
        tracing::info!(
            admin = %admin.local_addr(),
            hosts_file = %args.hosts_file.display(),
            source = args.source_file.as_ref().map_or_else(
                || format!("ConfigMap {}/{}", args.hosts.namespace, args.hosts.hosts_config_map),
                |p| p.display().to_string(),
            ),
            "node agent started"
        );
        agent.run_with_admin(admin, registry, &shutdown).await?;
        Ok(ExitCode::SUCCESS)
    })
}
