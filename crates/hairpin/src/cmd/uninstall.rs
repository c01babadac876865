//! `hairpin uninstall`: remove everything hairpin wrote (the Helm chart runs it as a
//! pre-delete hook Job).

use std::process::ExitCode;

use hairpin_controller::client::ClientArgs;
use hairpin_runtime::LogArgs;

use crate::cmd::plan::PlannerArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) planner: PlannerArgs,

    #[command(flatten)]
    pub(crate) client: ClientArgs,

    /// Name of the controller's leader Lease (deleted too, when it carries hairpin's marks).
    #[arg(long, env = "HAIRPIN_LEASE_NAME", default_value = "hairpin-controller")]
    pub(crate) lease_name: String,

    #[command(flatten)]
    pub(crate) log: LogArgs,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    hairpin_runtime::logging::init(&args.log).map_err(anyhow::Error::msg)?;
    let planner = args.planner.config();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        // The error says what it is about, in the words every command uses.
        let client = args.client.client().await?;
        let report = hairpin_controller::uninstall(&client, &planner, &args.lease_name).await;
        let ns = &planner.namespace;
        for hairpin in &report.hairpins_deleted {
            println!("deleted Hairpin {hairpin}");
        }
        for name in &report.services_deleted {
            println!("deleted Service {ns}/{name}");
        }
        for name in &report.dns_endpoints_deleted {
            println!("deleted DNSEndpoint {ns}/{name}");
        }
        if report.routes_deleted {
            println!("deleted ConfigMap {ns}/{}", planner.routes_config_map);
        }
        if report.hosts_deleted {
            println!("deleted ConfigMap {ns}/{}", planner.hosts_config_map);
        }
        if report.lease_deleted {
            println!("deleted Lease {ns}/{}", args.lease_name);
        }
        for object in &report.left_alone {
            println!(
                "left {object} in place: it is not hairpin's (it lacks the label {}={} or the annotation {}=hairpin)",
                hairpin_controller::MANAGED_BY_LABEL,
                hairpin_controller::MANAGED_BY_VALUE,
                hairpin_controller::apply::CREATED_BY_ANNOTATION
            );
        }
        for cm in &report.corefiles_restored {
            // `namespace/name key KEY`: a server-block key of coredns-custom.
            let what = if cm.contains(" key ") { "restored" } else { "Corefile restored" };
            println!("removed the hairpin block from ConfigMap {cm} ({what})");
        }
        if report.custom_key_removed {
            println!(
                "removed key {} from ConfigMap {}/{}",
                planner.coredns_custom_key,
                planner.coredns_namespace,
                planner.coredns_custom_config_map
            );
        }
        if report.failures.is_empty() {
            println!(
                "hairpin uninstalled (the hairpins.hairpin.io CRD is left in place: `kubectl delete crd hairpins.hairpin.io` removes it)"
            );
            Ok(ExitCode::SUCCESS)
        } else {
            for failure in &report.failures {
                eprintln!("error: {failure}");
            }
            Ok(ExitCode::FAILURE)
        }
    })
}
