//! `hairpin proxy`: accept TCP connections, prepend the PROXY header the cloud load balancer
//! would send, forward them upstream. The work is in `hairpin-dataplane` (the proxy, its worker
//! threads, the routes file and ConfigMap followers); this file turns flags into a route table
//! and wires them together.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use hairpin_dataplane::routes::{ProxyProtocol, Route, RouteTable, Upstream};
use hairpin_dataplane::routes_configmap;
use hairpin_dataplane::routes_file::RoutesFile;
use hairpin_dataplane::{Proxy, ProxyConfig, ProxyMetrics, Shards};
use hairpin_runtime::DrainOutcome;
use hairpin_runtime::logging::LogArgs;
use hairpin_runtime::{Admin, AdminArgs, Builder, FdBudget, Started, Threads};
use hairpin_runtime::{parse_duration, parse_positive_duration};

use crate::cmd::args::parse_configmap_ref;

/// Routes come from `--listen`/`--upstream` (one route), from `--routes-file` (several,
/// followed as the file changes) or, in a cluster, from `--routes-configmap` (the table the
/// controller publishes, followed through a watch).
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("routes").required(true).args(["listen", "routes_file", "routes_configmap"])))]
pub(crate) struct Args {
    /// Address to accept connections on, e.g. `0.0.0.0:10080` or `[::]:10443` (one route).
    #[arg(
        long,
        env = "HAIRPIN_LISTEN",
        requires = "upstream",
        conflicts_with = "routes_file"
    )]
    listen: Option<SocketAddr>,

    /// Where to forward, `HOST:PORT`; a name is resolved again for each new connection.
    #[arg(
        long,
        env = "HAIRPIN_UPSTREAM",
        requires = "listen",
        value_name = "HOST:PORT"
    )]
    upstream: Option<Upstream>,

    /// PROXY protocol header to write with `--listen`: `v1` (text), `v2` (binary), or `none`
    /// (forward the bytes as they are, for a load balancer port without the PROXY protocol).
    #[arg(long, env = "HAIRPIN_PROXY_PROTOCOL", default_value = "v1", value_parser = clap::value_parser!(ProxyProtocol))]
    proxy_protocol: ProxyProtocol,

    /// Destination address written in the header with `--listen` (the load balancer's external
    /// `IP:PORT`). A dual-stack load balancer's two addresses (repeat the flag, or separate
    /// them with commas): each client gets the one of its own family, as from the real load
    /// balancer. Default: the proxy's own address of each accepted connection.
    #[arg(
        long,
        env = "HAIRPIN_DESTINATION",
        requires = "listen",
        value_name = "IP:PORT",
        value_delimiter = ','
    )]
    destination: Vec<SocketAddr>,

    /// Name of the `--listen` route, in logs and metric labels.
    #[arg(long, env = "HAIRPIN_ROUTE_NAME", default_value = "default")]
    route_name: String,

    /// JSON file with a list of routes (`name`, `listen`, `upstream`, `proxy_protocol`,
    /// `destination`, `destinations`); re-read when its content changes and on SIGHUP.
    #[arg(
        long,
        env = "HAIRPIN_ROUTES_FILE",
        value_name = "PATH",
        conflicts_with = "routes_configmap"
    )]
    routes_file: Option<PathBuf>,

    /// `NAMESPACE/NAME` of the ConfigMap the controller publishes the routes in (key
    /// `--routes-configmap-key`; the controller's `--routes-configmap`, same form), followed
    /// through a watch. The proxy is ready once it has read it; a missing ConfigMap means no
    /// routes; an invalid table is logged and the current routes stay.
    #[arg(long, env = "HAIRPIN_ROUTES_CONFIGMAP", value_name = "NAMESPACE/NAME", value_parser = parse_routes_configmap, conflicts_with = "listen")]
    routes_configmap: Option<(String, String)>,

    /// Key of the routes table in `--routes-configmap`.
    #[arg(
        long,
        env = "HAIRPIN_ROUTES_CONFIGMAP_KEY",
        default_value = "routes.json",
        requires = "routes_configmap"
    )]
    routes_configmap_key: String,

    #[command(flatten)]
    client: hairpin_controller::client::ClientArgs,

    /// How often the routes file is read to look for changes.
    #[arg(long, env = "HAIRPIN_ROUTES_POLL_INTERVAL", default_value = "1s", value_parser = parse_positive_duration)]
    routes_poll_interval: Duration,

    /// Time allowed to connect to the upstream; after it the client is closed. Checked on a
    /// per-worker tick of an eighth of it (at most 1s), so it may run that much over.
    #[arg(long, env = "HAIRPIN_CONNECT_TIMEOUT", default_value = "5s", value_parser = parse_positive_duration)]
    connect_timeout: Duration,

    /// A connection that moves no byte either way for this long is closed. Checked on a
    /// per-worker tick of an eighth of it (at most 10s), so it may run two ticks over.
    #[arg(long, env = "HAIRPIN_IDLE_TIMEOUT", default_value = "10m", value_parser = parse_positive_duration)]
    idle_timeout: Duration,

    /// Once one side of a connection has finished (sent its FIN), the connection is closed
    /// when no byte moves either way for this long, instead of the idle timeout: a
    /// half-closed connection must not hold a --max-connections slot for 10 minutes. Checked
    /// on a per-worker tick of an eighth of it (at most 10s).
    #[arg(long, env = "HAIRPIN_HALF_CLOSE_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    half_close_timeout: Duration,

    /// After SIGTERM, how long the proxy keeps accepting while /readyz fails, so that its
    /// endpoints are withdrawn before it stops (connections routed to it meanwhile are
    /// served, not refused). A second signal skips it.
    #[arg(long, env = "HAIRPIN_SHUTDOWN_DELAY", default_value = "5s", value_parser = parse_duration)]
    shutdown_delay: Duration,

    /// Once accepting has stopped, how long open connections may take to finish (a second
    /// signal ends them at once). Pod terminationGracePeriodSeconds must cover
    /// --shutdown-delay plus this.
    #[arg(long, env = "HAIRPIN_DRAIN_TIMEOUT", default_value = "25s", value_parser = parse_duration)]
    drain_timeout: Duration,

    /// Most connections open at once, over all routes; beyond it the proxy stops accepting
    /// until one ends.
    #[arg(long, env = "HAIRPIN_MAX_CONNECTIONS", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,

    /// Worker threads (and listening sockets per route). Default: the number of CPUs.
    #[arg(long, env = "HAIRPIN_WORKERS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    workers: Option<u16>,

    /// Listen backlog of each listening socket.
    #[arg(long, env = "HAIRPIN_BACKLOG", default_value_t = 4096)]
    backlog: u32,

    #[command(flatten)]
    admin: AdminArgs,

    #[command(flatten)]
    log: LogArgs,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let client = args.client.clone();
    let connect = args
        .routes_configmap
        .is_some()
        .then_some(async move { client.client().await });
    let runtime = Builder::new()
        .with_log(&args.log)
        // Two descriptors per connection (the client's and the upstream's), and the splice pipes.
        .with_fd_budget(FdBudget {
            per_connection: 2,
            also_reserved: hairpin_dataplane::PIPE_DESCRIPTORS,
            max_connections: args.max_connections.into(),
            flag: "--max-connections",
        })
        // The control plane (admin server, signals, routes file) is light: one thread is plenty.
        .with_threads(Threads::Current { max_blocking: None })
        .with_admin(&args.admin)
        .with_optional_client(connect)
        // Connections still open at exit were given up on (drain timeout or forced): do not wait.
        .with_shutdown_timeout(Duration::from_millis(200))
        .build()?;
    let workers = args.workers.map_or_else(
        || std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        usize::from,
    );
    let shards = Shards::start(workers)?;
    let handles = shards.handles();
    runtime
        .on_exit(|| shards.stop())
        .run(|started| serve(args, handles, started))
}

async fn serve(
    args: Args,
    shards: Vec<tokio::runtime::Handle>,
    mut started: Started<Option<kube::Client>, Admin>,
) -> anyhow::Result<ExitCode> {
    let workers = shards.len();
    let shutdown = started.shutdown;
    let metrics =
        ProxyMetrics::register(started.registry.sub_registry_with_prefix("hairpin_proxy"));
    let routes_loaded = started.admin.condition("routes loaded");
    let listeners_bound = started.admin.condition("listeners bound");
    tracing::info!(addr = %started.admin.local_addr(), "admin server listening");
    let _admin = started.admin.serve(started.registry);

    let (table, file) = initial_routes(&args).await?;
    let configmap = match (&args.routes_configmap, started.client) {
        (Some((namespace, name)), Some(client)) => {
            Some(hairpin_runtime::configmap::watch_configmap_key(
                client,
                namespace,
                name,
                &args.routes_configmap_key,
            ))
        }
        _ => {
            routes_loaded.set(true);
            None
        }
    };

    let config = ProxyConfig {
        connect_timeout: args.connect_timeout,
        idle_timeout: args.idle_timeout,
        half_close_timeout: args.half_close_timeout,
        shutdown_delay: args.shutdown_delay,
        drain_timeout: args.drain_timeout,
        max_connections: args.max_connections as usize,
        listeners_per_route: workers,
        backlog: args.backlog,
        ..ProxyConfig::default()
    };
    let mut proxy = Proxy::new(config, metrics.clone()).with_shards(shards);
    if let Some(err) = proxy.apply(&table).into_iter().next() {
        return Err(err.into());
    }
    let routes_count = table.len();
    let (routes_tx, routes_rx) = tokio::sync::watch::channel(table);
    // Without a routes file the sender is dropped here, and the table stays as it is.
    if let Some(file) = file {
        file.spawn(args.routes_poll_interval, routes_tx, metrics);
    } else if let (Some(updates), Some((namespace, name))) = (configmap, &args.routes_configmap) {
        let source = format!("{namespace}/{name}");
        tokio::spawn(routes_configmap::follow(
            updates,
            source,
            routes_tx,
            routes_loaded,
        ));
    }
    listeners_bound.set(true);
    tracing::info!(routes = routes_count, workers, "proxy ready");
    Ok(match proxy.run(routes_rx, shutdown).await {
        DrainOutcome::Completed | DrainOutcome::TimedOut => ExitCode::SUCCESS,
        DrainOutcome::Forced => ExitCode::FAILURE,
    })
}

/// The routes to start with: none yet with `--routes-configmap` (the watch brings them), the
/// routes file's (an upstream that does not resolve yet is a warning), or the one route of
/// `--listen`/`--upstream` (whose upstream must resolve). The routes file, to follow.
async fn initial_routes(args: &Args) -> anyhow::Result<(RouteTable, Option<RoutesFile>)> {
    match (&args.routes_file, &args.routes_configmap) {
        (_, Some(_)) => Ok((RouteTable::new(Vec::new())?, None)),
        (Some(path), None) => {
            let (file, table) = RoutesFile::load(path)?;
            for route in table.routes() {
                if let Err(err) = hairpin_dataplane::resolve(&route.upstream).await {
                    tracing::warn!(route = %route.name, error = %err, "upstream does not resolve yet; connections to this route fail until it does");
                }
            }
            Ok((table, Some(file)))
        }
        (None, None) => {
            let (Some(listen), Some(upstream)) = (args.listen, args.upstream.clone()) else {
                anyhow::bail!("--listen and --upstream go together (or use --routes-file)");
            };
            hairpin_dataplane::resolve(&upstream)
                .await
                .map_err(|err| anyhow::anyhow!("check --upstream: {err}"))?;
            let table = RouteTable::new(vec![Route {
                name: args.route_name.clone(),
                listen,
                upstream,
                proxy_protocol: args.proxy_protocol,
                destination: args.destination.first().copied(),
                destinations: if args.destination.len() > 1 {
                    args.destination.clone()
                } else {
                    Vec::new()
                },
            }])?;
            Ok((table, None))
        }
    }
}

/// `NAMESPACE/NAME` ([`parse_configmap_ref`]); the proxy has no namespace of its own to
/// complete a bare NAME with.
fn parse_routes_configmap(value: &str) -> Result<(String, String), String> {
    let routes = parse_configmap_ref(value)?;
    match routes.namespace {
        Some(namespace) => Ok((namespace, routes.name)),
        None => Err(format!(
            "expected NAMESPACE/NAME, e.g. hairpin/{}, not {value:?}: the proxy has no namespace of its own",
            routes.name
        )),
    }
}
