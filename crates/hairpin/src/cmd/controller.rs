//! `hairpin controller`: watch the cluster and keep CoreDNS, the hairpin Services and the proxy
//! routes equal to the plan. Runs in-cluster (2 replicas, leader-elected) or locally:
//! `hairpin controller --kubeconfig ~/.kube/config`.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use hairpin_controller::client::ClientArgs;
use hairpin_controller::fight::FightParams;
use hairpin_controller::lease::LeaseParams;
use hairpin_controller::ownership::OwnershipParams;
use hairpin_controller::propagation::PropagationParams;
use hairpin_controller::removal::RemovalParams;
use hairpin_controller::{ControllerConfig, Metrics};
use hairpin_planner::PlannerConfig;
use hairpin_runtime::logging::LogArgs;
use hairpin_runtime::{Admin, AdminArgs, Builder, Started, Threads};
use hairpin_runtime::{parse_duration, parse_positive_duration};

use crate::cmd::plan::PlannerArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) planner: PlannerArgs,

    #[command(flatten)]
    pub(crate) client: ClientArgs,

    /// This instance's identity in the leader Lease (in a pod: its name).
    #[arg(long, env = "POD_NAME")]
    pub(crate) identity: Option<String>,

    /// Elect a leader among replicas on a Lease in `--namespace` (`false` for a single
    /// instance, e.g. a local run; it still reads the Lease to obey `hairpin uninstall`'s
    /// fence).
    #[arg(long, env = "HAIRPIN_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) leader_election: bool,

    /// Name of the leader Lease.
    #[arg(long, env = "HAIRPIN_LEASE_NAME", default_value = "hairpin-controller")]
    pub(crate) lease_name: String,

    /// How long a leader keeps the Lease without renewing it (e.g. `15s`).
    #[arg(long, env = "HAIRPIN_LEASE_DURATION", default_value = "15s", value_parser = parse_positive_duration)]
    pub(crate) lease_duration: Duration,

    /// Quiet time after a change before re-planning; coalesces bursts (e.g. `150ms`).
    #[arg(long, env = "HAIRPIN_DEBOUNCE", default_value = "150ms", value_parser = parse_duration)]
    pub(crate) debounce: Duration,

    /// Re-plan at least this often even without changes.
    #[arg(long, env = "HAIRPIN_RESYNC", default_value = "5m", value_parser = parse_positive_duration)]
    pub(crate) resync: Duration,

    /// Reverts of one of hairpin's writes (the CoreDNS change, a hairpin Service, a
    /// DNSEndpoint) within `--fight-window` that count as a write fight.
    #[arg(long, env = "HAIRPIN_FIGHT_THRESHOLD", default_value_t = 3)]
    pub(crate) fight_threshold: usize,

    /// Window for counting reverts.
    #[arg(long, env = "HAIRPIN_FIGHT_WINDOW", default_value = "5m", value_parser = parse_duration)]
    pub(crate) fight_window: Duration,

    /// First pause of the writes fought over once a fight is detected (doubles each time).
    #[arg(long, env = "HAIRPIN_FIGHT_BACKOFF", default_value = "30s", value_parser = parse_duration)]
    pub(crate) fight_backoff: Duration,

    /// Longest pause of the writes fought over during a fight.
    #[arg(long, env = "HAIRPIN_FIGHT_MAX_BACKOFF", default_value = "30m", value_parser = parse_duration)]
    pub(crate) fight_max_backoff: Duration,

    /// The node agents prove the native cure from every node (`hairpin node-agent
    /// --native-probes`; the chart sets this with `nodeAgent.enabled`): a cure counts as
    /// proven only when every Node's agent reported it proven, in its Lease, within this age.
    /// Unset: the controller's own probe and the Nodes' gate decide.
    #[arg(long, env = "HAIRPIN_NODE_PROBES_MAX_AGE", value_parser = parse_duration)]
    pub(crate) node_probes_max_age: Option<Duration>,

    /// After a failed native cure, how long before it is tried again (doubling with each
    /// failure, up to a day; at once when kube-proxy or the CNI changes).
    #[arg(long, env = "HAIRPIN_NATIVE_RETRY", default_value = "10m", value_parser = parse_duration)]
    pub(crate) native_retry: Duration,

    /// After a node's agent failed a proven native cure, how long the DNS rules brought back
    /// have to reach every pod (the kubelet's ConfigMap sync, CoreDNS's reload and cache)
    /// before `ipMode` is put back.
    #[arg(long, env = "HAIRPIN_NATIVE_DNS_SETTLE", default_value = "60s", value_parser = parse_duration)]
    pub(crate) native_dns_settle: Duration,

    /// The cluster DNS asked after each DNS write, `IP` or `IP:PORT` (default: port 53 of the
    /// ClusterIP of the cluster DNS Service in the CoreDNS namespace: `kube-dns`, else one
    /// named like a CoreDNS ConfigMap candidate such as RKE2's `rke2-coredns-rke2-coredns`,
    /// else one labelled `k8s-app=kube-dns` or `coredns`).
    #[arg(long, env = "HAIRPIN_CLUSTER_DNS", value_parser = parse_dns_server)]
    pub(crate) cluster_dns: Option<SocketAddr>,

    /// How long after a DNS write the names may take to answer with the hairpin Service
    /// before the Hairpin status says `NotEffective`.
    #[arg(long, env = "HAIRPIN_PROPAGATION_DEADLINE", default_value = "3m", value_parser = parse_duration)]
    pub(crate) propagation_deadline: Duration,

    /// Longest pause between rounds of DNS queries while checking propagation: rounds start
    /// 100 ms apart, doubling to 500 ms during the first minute after the write (so
    /// `propagationSeconds` is within half a second), then this.
    #[arg(long, env = "HAIRPIN_PROPAGATION_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub(crate) propagation_interval: Duration,

    /// With `--verify-hostnames=resolve`: the DNS servers asked about the hostnames, `IP` or
    /// `IP:PORT` (repeat or comma-separate), instead of the Corefile's `forward` targets (for
    /// an upstream the Corefile does not name in a form hairpin can ask, such as `tls://`).
    /// Default: per name, the `forward` targets of the Corefile zone holding it, where
    /// `/etc/resolv.conf` means the controller pod's own resolv.conf (the chart runs it with
    /// `dnsPolicy: Default`: the node's resolvers, as CoreDNS's).
    #[arg(
        long = "verify-nameserver",
        env = "HAIRPIN_VERIFY_NAMESERVERS",
        value_delimiter = ',',
        value_parser = parse_dns_server
    )]
    pub(crate) verify_nameservers: Vec<SocketAddr>,

    /// Tell a removal of hairpin (its Deployment, namespace, ServiceAccount or RBAC being
    /// deleted: a GitOps prune, `kubectl delete -f`) from a restart, and restore the cluster
    /// then as `hairpin uninstall` does. Holds those objects with finalizers until the restore
    /// is done (docs/controller.md, "Removal"). Off by itself without a controller Deployment.
    #[arg(long, env = "HAIRPIN_REMOVAL_GUARD", default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) removal_guard: bool,

    #[command(flatten)]
    pub(crate) own: crate::cmd::args::OwnObjectsArgs,

    /// How long one of the controller's objects other than its Deployment, ServiceAccount and
    /// namespace may be being deleted before the removal guard takes it for replaced, renamed
    /// or dropped (not a removal of hairpin) and lets it go; also how long the Deployment must
    /// live on after a restore before the guard lifts its fence. The guard watches: it does
    /// not poll.
    #[arg(long, env = "HAIRPIN_REMOVAL_SETTLE", default_value = "5s", value_parser = parse_positive_duration)]
    pub(crate) removal_settle: Duration,

    /// How long the restore on removal may take; the held objects are released then, done or
    /// not (keep it below the Pod's grace period, 30 s, and the 60 s a deleted
    /// ServiceAccount's token stays valid).
    #[arg(long, env = "HAIRPIN_REMOVAL_DEADLINE", default_value = "20s", value_parser = parse_positive_duration)]
    pub(crate) removal_deadline: Duration,

    #[command(flatten)]
    pub(crate) admin: AdminArgs,

    #[command(flatten)]
    pub(crate) log: LogArgs,
}

fn parse_dns_server(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .or_else(|_| s.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
        .map_err(|_| format!("{s:?} is not an IP address or IP:PORT"))
}

fn default_identity() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("hairpin-controller-{}", std::process::id()))
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    // One thread: the controller waits on the API server, and its CPU work (a plan) is one
    // task at a time anyway. Every thread that allocates gets its own glibc malloc arena, and
    // memory freed in one arena is not reused by another: with two workers the process held
    // 13 MiB more at 10,000 Ingresses (`memory_10k`). The blocking pool (name resolution) is
    // kept to one thread for the same reason.
    let client = args.client.clone();
    let runtime = Builder::new()
        .with_log(&args.log)
        .with_threads(Threads::Current {
            max_blocking: Some(1),
        })
        .with_admin(&args.admin)
        .with_client(async move { client.client().await })
        .build()?;
    if args.lease_duration < Duration::from_secs(2) {
        anyhow::bail!("--lease-duration must be at least 2s");
    }
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    if identity == hairpin_controller::lease::FENCE_HOLDER {
        anyhow::bail!(
            "--identity {identity} is reserved: `hairpin uninstall` holds the Lease under it"
        );
    }
    let planner = args.planner.config()?;
    let removal = args.removal_guard.then(|| RemovalParams {
        settle: args.removal_settle,
        native_record: planner.native_config_map.clone(),
        deadline: args.removal_deadline,
        lease_name: args.lease_name.clone(),
        ..args
            .own
            .removal_params(&planner.namespace, &planner.coredns_namespace)
    });
    let mut config = ControllerConfig::new(planner.clone(), &identity);
    config.debounce = args.debounce;
    config.resync = args.resync;
    config.fight = FightParams {
        threshold: args.fight_threshold.max(1),
        window: args.fight_window,
        initial_backoff: args.fight_backoff,
        max_backoff: args.fight_max_backoff.max(args.fight_backoff),
    };
    config.native.node_reports = args.node_probes_max_age;
    config.native.retry = args.native_retry;
    config.native.dns_settle = args.native_dns_settle;
    config.propagation = PropagationParams {
        cluster_dns: args.cluster_dns,
        deadline: args.propagation_deadline,
        interval: args.propagation_interval,
        ..PropagationParams::default()
    };
    config.ownership = OwnershipParams {
        servers: (!args.verify_nameservers.is_empty()).then(|| args.verify_nameservers.clone()),
        ..OwnershipParams::default()
    };
    // Without an election the Lease is still read: `hairpin uninstall` fences every
    // controller through it.
    config.lease = Some(LeaseParams {
        duration: args.lease_duration,
        renew_interval: args.lease_duration / 3,
        retry_interval: (args.lease_duration / 7).max(Duration::from_millis(500)),
        observe_only: !args.leader_election,
        ..LeaseParams::new(&planner.namespace, &args.lease_name, &identity)
    });

    let leader_election = args.leader_election;
    runtime.run(|started| serve(started, config, planner, identity, removal, leader_election))
}

/// Runs the controller (and the removal guard beside it) until shutdown.
async fn serve(
    mut started: Started<kube::Client, Admin>,
    config: ControllerConfig,
    planner: PlannerConfig,
    identity: String,
    removal: Option<RemovalParams>,
    leader_election: bool,
) -> anyhow::Result<ExitCode> {
    let metrics = Metrics::register(&mut started.registry);
    let ready = started.admin.condition("caches synced");
    tracing::info!(
        admin = %started.admin.local_addr(),
        identity,
        namespace = %planner.namespace,
        leader_election,
        "controller starting"
    );
    let admin_task = started.admin.serve(started.registry);
    let (client, shutdown) = (started.client, started.shutdown);
    // Beside the controller: it restores on a removal even while the controller waits.
    let guard = removal.map(|params| {
        tokio::spawn(hairpin_controller::removal::guard(
            client.clone(),
            planner.clone(),
            params,
            identity.clone(),
            metrics.clone(),
            shutdown.clone(),
        ))
    });
    hairpin_controller::run(client, config, metrics, ready, shutdown).await?;
    // It looks once more at the shutdown, and restores if this is a removal.
    let removed = match guard {
        Some(guard) => guard.await.ok().flatten(),
        None => None,
    };
    drop(admin_task);
    tracing::info!("controller stopped");
    if let Some(note) = removed.and_then(|outcome| outcome.left_note) {
        // The last line the Pod logs: what a removal left behind, and the command.
        tracing::error!("{note}");
    }
    Ok(ExitCode::SUCCESS)
}
