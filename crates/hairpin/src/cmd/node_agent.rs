//! `hairpin node-agent`: keep a marked block of hairpin hostnames in a node's hosts file.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hairpin_controller::client::ClientArgs;
use hairpin_controller::native::{NativeParams, NodeProber, NodeProberOptions};

use crate::cmd::args::HostsConfigMapArgs;
use hairpin_node_agent::{
    Agent, AgentOptions, ConfigMapSource, HostsFile, SourceFile, SyncOutcome,
};
use hairpin_runtime::logging::LogArgs;
use hairpin_runtime::{Admin, AdminArgs, Builder, Started, Threads, parse_positive_duration};
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

    /// Remove the block when stopped by SIGTERM/SIGINT (with `--daemonset`: only when that
    /// DaemonSet is being removed).
    #[arg(long, env = "HAIRPIN_REMOVE_ON_EXIT")]
    pub(crate) remove_on_exit: bool,

    /// The node agent's DaemonSet in `--hosts-namespace`: with `--remove-on-exit`, the block
    /// is removed at exit only when the DaemonSet is being deleted or is gone (or cannot be
    /// read: the safe side), and kept on a restart (a rollout, an upgrade, a crash).
    #[arg(long, env = "HAIRPIN_NODE_AGENT_DAEMONSET")]
    pub(crate) daemonset: Option<String>,

    /// Prove the native cure from this node (issue 45): every load balancer whose status
    /// hairpin set to `ipMode: Proxy` (its record, `--native-configmap`) is probed through
    /// this node's data plane every interval and when the record changes, and the verdicts
    /// are reported in this node's Lease `hairpin-node-<node>` in `--namespace`.
    #[arg(long, env = "HAIRPIN_NATIVE_PROBES", requires = "node_name")]
    pub(crate) native_probes: bool,

    /// This node's name (the downward API's `spec.nodeName`).
    #[arg(long, env = "NODE_NAME")]
    pub(crate) node_name: Option<String>,

    /// hairpin's record of its native cures, in `--namespace` (read only).
    #[arg(
        long = "native-configmap",
        env = "HAIRPIN_NATIVE_CONFIGMAP",
        default_value = "hairpin-native"
    )]
    pub(crate) native_config_map: String,

    #[command(flatten)]
    pub(crate) admin: AdminArgs,

    #[command(flatten)]
    pub(crate) log: LogArgs,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let client = args.client.clone();
    let connect = (args.source_file.is_none() || args.native_probes)
        .then_some(async move { client.client().await });
    let runtime = Builder::new()
        .with_log(&args.log)
        .with_threads(Threads::Multi { workers: 1 })
        .with_admin(&args.admin)
        .with_optional_client(connect)
        .build()?;
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
    // With a DaemonSet to ask, the removal at exit is decided below, after the run.
    let removal_check = args
        .daemonset
        .clone()
        .filter(|_| args.remove_on_exit && args.source_file.is_none());
    let options = AgentOptions {
        interval: args.interval,
        remove_on_exit: args.remove_on_exit && removal_check.is_none(),
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
    runtime.run(|started| serve(args, hosts, options, removal_check, started))
}

/// Follows the source into the hosts file until shutdown; at exit, removes the block if the
/// node agent's DaemonSet is being removed.
async fn serve(
    args: Args,
    hosts: HostsFile,
    options: AgentOptions,
    removal_check: Option<String>,
    mut started: Started<Option<kube::Client>, Admin>,
) -> anyhow::Result<ExitCode> {
    let shutdown = started.shutdown;
    let agent = match (&args.source_file, started.client.clone()) {
        (Some(path), _) => Agent::new(hosts, SourceFile::new(path), options),
        (None, client) => {
            let changed = Arc::new(Notify::new());
            let source = ConfigMapSource::start(
                client.context("the cluster source needs an API client")?,
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
        admin = %started.admin.local_addr(),
        hosts_file = %args.hosts_file.display(),
        source = args.source_file.as_ref().map_or_else(
            || format!("ConfigMap {}/{}", args.hosts.namespace, args.hosts.hosts_config_map),
            |p| p.display().to_string(),
        ),
        "node agent started"
    );
    if let (true, Some(node), Some(client)) = (
        args.native_probes,
        args.node_name.clone(),
        started.client.clone(),
    ) {
        let updates = hairpin_runtime::configmap::watch_configmap_key(
            client.clone(),
            &args.hosts.namespace,
            &args.native_config_map,
            hairpin_planner::native::NATIVE_KEY,
        );
        let prober = NodeProber::new(
            client,
            NodeProberOptions {
                node,
                namespace: args.hosts.namespace.clone(),
                interval: args.interval,
                params: NativeParams::default(),
            },
        );
        let shutdown = shutdown.clone();
        tokio::spawn(async move { prober.run(updates, &shutdown).await });
    }
    agent.register_metrics(&mut started.registry);
    let ready = started.admin.condition("hosts file in sync");
    let admin = started.admin.serve(started.registry);
    let result = agent.run(&shutdown, &ready).await;
    drop(admin);
    result?;
    // The block goes when the DaemonSet is removed (or cannot be read: the safe side),
    // and stays on a restart.
    if let (Some(name), Some(client)) = (removal_check, started.client) {
        let ds = hairpin_planner::escape::text(&name);
        match hairpin_controller::removal::daemonset_removal(&client, &args.hosts.namespace, &name)
            .await
        {
            None => {
                tracing::info!(daemonset = %ds, "a restart, not a removal: the hairpin block stays in the hosts file")
            }
            Some(reason) => {
                let outcome = HostsFile::new(&args.hosts_file).remove()?;
                tracing::info!(path = %args.hosts_file.display(), ?outcome, reason = %reason, "removed the hairpin block on exit");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
