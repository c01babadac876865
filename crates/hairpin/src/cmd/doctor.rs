//! `hairpin doctor`: is hairpin traffic to a host broken from here, why, and what fixes it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use hairpin_doctor::Options;
use hairpin_doctor::cluster::ClusterOptions;
use hairpin_doctor::probe::Timeouts;
use hairpin_doctor::verdict::Vantage;

use hairpin_runtime::{Builder, OnSignal, parse_positive_duration};

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
    /// The JSON document, in YAML.
    Yaml,
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

    /// Path to a kubeconfig file. Default: `$KUBECONFIG` (a list of files, as for kubectl),
    /// `~/.kube/config`, then the in-cluster service account.
    // `$KUBECONFIG` is read by kube's loader, as for every command (see `ClientArgs`);
    // HAIRPIN_KUBECONFIG is this flag's old variable, deprecated, kept because it costs
    // nothing.
    #[arg(long, env = "HAIRPIN_KUBECONFIG", hide_env = true, value_name = "PATH")]
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

    /// Time each network step (connect, answer) and API call may take, at most 5m (`3s`,
    /// `500ms`; a bare number is seconds).
    #[arg(
        long,
        env = "HAIRPIN_DOCTOR_TIMEOUT",
        default_value = "3s",
        value_parser = parse_positive_duration
    )]
    pub(crate) timeout: Duration,

    /// The hosts file to report on.
    #[arg(long, env = "HAIRPIN_DOCTOR_HOSTS_FILE", default_value = "/etc/hosts")]
    pub(crate) hosts_file: PathBuf,

    /// The ValidatingAdmissionPolicy (and its binding, of the same name) that pins the
    /// controller's Service status writes to `ipMode`: `<release>-status-ipmode-only`.
    #[arg(
        long,
        env = "HAIRPIN_ADMISSION_POLICY",
        default_value = hairpin_doctor::cluster::DEFAULT_ADMISSION_POLICY,
        value_name = "NAME"
    )]
    pub(crate) admission_policy: String,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    for host in &args.hosts {
        if let Err(err) = hairpin_doctor::validate_host(host) {
            return usage_error(err);
        }
    }
    if args.timeout > Duration::from_secs(300) {
        return usage_error(format_args!(
            "--timeout must be at most 5m, not {:?}",
            args.timeout
        ));
    }
    let step = args.timeout;
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
    let runtime = Builder::new().with_signals(OnSignal::Abort).build()?;
    let cluster_options = ClusterOptions {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
        timeout: step,
        planner: args.planner.config()?,
        admission_policy: args.admission_policy.clone(),
    };
    let cluster = (!args.no_cluster).then_some(&cluster_options);
    let report = runtime
        .run(|_| async { anyhow::Ok(hairpin_doctor::run(&args.hosts, &options, cluster).await) })?;
    let report = match report {
        Ok(report) => report,
        Err(err) => return usage_error(err),
    };
    match args.output {
        Output::Text => print!("{}", report.to_text()),
        Output::Json => println!("{}", report.to_json()),
        Output::Yaml => print!("{}", report.to_yaml()),
    }
    Ok(ExitCode::from(report.exit_code()))
}

/// A usage or access error: printed like `main` prints errors, with exit code 2.
fn usage_error(message: impl std::fmt::Display) -> anyhow::Result<ExitCode> {
    eprintln!("error: {message}");
    Ok(ExitCode::from(USAGE_ERROR))
}
