//! `hairpin doctor`: is hairpin traffic to a host broken from here, why, and what fixes it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use hairpin_doctor::cluster::{self, ClusterError, ClusterOptions, ClusterRead};
use hairpin_doctor::{ClusterView, Options, Timeouts, Vantage};

use crate::cmd::plan::PlannerArgs;

/// Exit code for usage and access errors (clap uses it for parse errors too).
const USAGE_ERROR: u8 = 2;

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Output {
    /// For people.
    Text,
    /// For scripts.
    Json,
}

/// Checks how each HOST resolves here, whether its server answers a plain request and one that
/// starts with a PROXY header, and (with API access) the load balancer, CoreDNS and hairpin
/// behind it. Exit code: 0 when every host is OK or NOT NEEDED, 1 when any is BROKEN, 2 on a
/// usage or access error.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Hostnames (or IP addresses) to check, e.g. the host of a cert-manager HTTP-01 challenge.
    /// None: every hostname hairpin plans for the cluster (needs API access).
    #[arg(value_name = "HOST")]
    pub(crate) hosts: Vec<String>,

    /// TCP port to probe on each host.
    #[arg(long, short = 'p', env = "HAIRPIN_DOCTOR_PORT", default_value_t = 80)]
    pub(crate) port: u16,

    /// Kubeconfig to read the cluster with (default: $KUBECONFIG, ~/.kube/config, or the pod's
    /// service account).
    #[arg(long, env = "HAIRPIN_KUBECONFIG", value_name = "PATH")]
    pub(crate) kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: its current context).
    #[arg(long, env = "HAIRPIN_CONTEXT", value_name = "NAME")]
    pub(crate) context: Option<String>,

    /// The planner's settings (hairpin's namespace, CoreDNS names...), as the controller's.
    #[command(flatten)]
    pub(crate) planner: PlannerArgs,

    /// Skip the cluster checks (network checks only).
    #[arg(long, env = "HAIRPIN_DOCTOR_NO_CLUSTER")]
    pub(crate) no_cluster: bool,

    /// Output format.
    #[arg(long, short = 'o', value_enum, env = "HAIRPIN_DOCTOR_OUTPUT", default_value_t = Output::Text)]
    pub(crate) output: Output,

    /// Seconds each network step (connect, answer) and API call may take.
    #[arg(
        long,
        env = "HAIRPIN_DOCTOR_TIMEOUT",
        default_value_t = 3.0,
        value_name = "SECONDS"
    )]
    pub(crate) timeout: f64,

    /// The hosts file to report on.
    #[arg(long, env = "HAIRPIN_DOCTOR_HOSTS_FILE", default_value = "/etc/hosts")]
    pub(crate) hosts_file: PathBuf,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    for host in &args.hosts {
        if let Err(err) = hairpin_doctor::validate_host(host) {
            eprintln!("error: {err}");
            return Ok(ExitCode::from(USAGE_ERROR));
        }
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0 && args.timeout <= 300.0) {
        eprintln!(
            "error: --timeout must be a number of seconds between 0 and 300, not {}",
            args.timeout
        );
        return Ok(ExitCode::from(USAGE_ERROR));
    }
    if let Some(path) = &args.kubeconfig
        && let Err(err) = std::fs::metadata(path)
    {
        eprintln!("error: cannot read --kubeconfig {}: {err}", path.display());
        return Ok(ExitCode::from(USAGE_ERROR));
    }
    let step = Duration::from_secs_f64(args.timeout);
    let options = Options {
        port: args.port,
        timeouts: Timeouts {
            connect: step,
            answer: step,
        },
        hosts_file: args.hosts_file.clone(),
        vantage: if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
            Vantage::Pod
        } else {
            Vantage::Machine
        },
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let cluster_options = ClusterOptions {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
        timeout: step,
        planner: args.planner.config(),
    };
    let report = runtime.block_on(async {
        let cluster = if args.no_cluster {
            Err("--no-cluster".to_owned())
        } else {
            match read_cluster(&cluster_options).await {
                Ok(read) => {
                    let plan = cluster::plan(&read, &cluster_options.planner);
                    Ok((read, plan))
                }
                Err(ClusterError::Unavailable(reason)) => Err(reason),
                Err(err @ ClusterError::Kubeconfig { .. }) => return Err(err.to_string()),
            }
        };
        let hosts = if args.hosts.is_empty() {
            match &cluster {
                Ok((_, plan)) => cluster::planned_hostnames(plan),
                Err(reason) => {
                    return Err(format!(
                        "pass a HOST, or give the doctor API access to check every planned \
                         hostname (the cluster cannot be read: {reason})"
                    ));
                }
            }
        } else {
            args.hosts.clone()
        };
        if hosts.is_empty() {
            eprintln!(
                "hairpin plans no hostname in this cluster (no load balancer needs a hairpin); \
                 pass a HOST to check one"
            );
        }
        Ok(
            hairpin_doctor::examine(&hosts, &options, |host, network| match &cluster {
                Ok((read, plan)) => {
                    let addresses: Vec<_> = network.resolution.first().into_iter().collect();
                    ClusterView::Checked(cluster::facts_for(
                        read,
                        plan,
                        &cluster_options.planner,
                        host,
                        &addresses,
                    ))
                }
                Err(reason) => ClusterView::NotChecked {
                    reason: reason.clone(),
                },
            })
            .await,
        )
    });
    let report = match report {
        Ok(report) => report,
        Err(err) => {
            eprintln!("error: {err}");
            return Ok(ExitCode::from(USAGE_ERROR));
        }
    };
    match args.output {
        Output::Text => print!("{}", report.to_text()),
        Output::Json => println!("{}", report.to_json()),
    }
    Ok(ExitCode::from(report.exit_code()))
}

async fn read_cluster(options: &ClusterOptions) -> Result<ClusterRead, ClusterError> {
    let client = cluster::client(options).await?;
    cluster::read(&client, options).await
}
