//! `hairpin uninstall`: fence the controllers, then remove everything hairpin wrote (the Helm
//! chart runs it as a pre-delete hook Job, while the controller is still running).

use std::process::ExitCode;

use hairpin_controller::UninstallReport;
use hairpin_controller::client::ClientArgs;
use hairpin_controller::uninstall::FenceReport;
use hairpin_planner::PlannerConfig;
use hairpin_runtime::logging::LogArgs;
use hairpin_runtime::{Builder, OnSignal};

use crate::cmd::plan::PlannerArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) planner: PlannerArgs,

    #[command(flatten)]
    pub(crate) client: ClientArgs,

    /// Name of the controller's leader Lease. It becomes the fence that stops every
    /// controller from writing; it is deleted with the controller Deployment (or at the end,
    /// when there is none).
    #[arg(long, env = "HAIRPIN_LEASE_NAME", default_value = "hairpin-controller")]
    pub(crate) lease_name: String,

    #[command(flatten)]
    pub(crate) own: crate::cmd::args::OwnObjectsArgs,

    #[command(flatten)]
    pub(crate) log: LogArgs,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    // One shot: Ctrl-C (or SIGTERM) ends it at once, as it always did; there is no drain.
    let client = args.client.clone();
    let runtime = Builder::new()
        .with_log(&args.log)
        .with_signals(OnSignal::Abort)
        .with_client(async move { client.client().await })
        .build()?;
    let planner = args.planner.config()?;
    runtime.run(|started| async move {
        // The error says what it is about, in the words every command uses.
        let client = started.client;
        let params = hairpin_controller::UninstallParams {
            controller_deployment: args.own.controller_deployment.clone(),
            ..hairpin_controller::UninstallParams::new(&args.lease_name)
        };
        let mut report = hairpin_controller::uninstall_with(&client, &planner, &params).await;
        // After the restore (the fence stays): nothing of hairpin's waits on its finalizer.
        let holds = hairpin_controller::removal::RemovalParams {
            native_record: planner.native_config_map.clone(),
            ..args
                .own
                .removal_params(&planner.namespace, &planner.coredns_namespace)
        };
        let mut release_errors = hairpin_controller::removal::release_all(&client, &holds).await;
        // The release pair the controller made at start (it would go with the namespace).
        release_errors
            .extend(hairpin_controller::removal::delete_release_pair(&client, &holds).await);
        if release_errors.is_empty() {
            println!(
                "released the controller's objects: no finalizer {} is left on them",
                hairpin_controller::removal::RESTORE_FINALIZER
            );
        }
        report.failures.extend(release_errors);
        print_fence(&report.fence, &planner.namespace, &args.lease_name);
        print_deleted(&report, &planner, &args.lease_name);
        print_left_alone(&report);
        print_restored(&report, &planner);
        print_still_running(&report, &planner.namespace, &args);
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

/// The fence, and what became of the controller it displaced.
fn print_fence(fence: &FenceReport, ns: &str, lease_name: &str) {
    if fence.fenced {
        println!(
            "fenced the controllers: Lease {ns}/{} is held for {} (no controller writes from now on)",
            lease_name,
            hairpin_controller::lease::FENCE_HOLDER
        );
    }
    if let Some(holder) = &fence.displaced {
        let holder = hairpin_planner::escape::text(holder);
        match (fence.acknowledged_after, fence.expired_after) {
            (Some(after), _) => println!(
                "controller {holder} stopped writing (acknowledged after {:.1}s)",
                after.as_secs_f64()
            ),
            (None, Some(after)) => println!(
                "controller {holder} did not acknowledge within {:.1}s; its Lease has expired, so it writes nothing any more",
                after.as_secs_f64()
            ),
            (None, None) => {}
        }
    }
}

/// The objects deleted.
fn print_deleted(report: &UninstallReport, planner: &PlannerConfig, lease_name: &str) {
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
    for service in &report.ip_modes_restored {
        if report.ip_modes_from_managed_fields.contains(service) {
            println!(
                "restored the status ipMode of Service {service} (native cure; not in the record: found by hairpin's field manager in its managed fields, put back to the default)"
            );
        } else {
            println!("restored the status ipMode of Service {service} (native cure)");
        }
    }
    if report.native_record_deleted {
        println!("deleted ConfigMap {ns}/{}", planner.native_config_map);
    }
    if report.lease_deleted {
        println!("deleted Lease {ns}/{} (the fence)", lease_name);
    }
}

/// The objects left in place: they are not hairpin's.
fn print_left_alone(report: &UninstallReport) {
    for object in &report.left_alone {
        println!(
            "left {object} in place: it is not hairpin's (it lacks the label {}={} or the annotation {}=hairpin)",
            hairpin_planner::MANAGED_BY_LABEL,
            hairpin_planner::MANAGED_BY_VALUE,
            hairpin_controller::apply::CREATED_BY_ANNOTATION
        );
    }
}

/// hairpin's blocks and key removed from the DNS ConfigMaps.
fn print_restored(report: &UninstallReport, planner: &PlannerConfig) {
    for cm in &report.corefiles_restored {
        // `namespace/name key KEY`: a server-block key of coredns-custom.
        let what = if cm.contains(" key ") {
            "restored"
        } else {
            "Corefile restored"
        };
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
}

/// The controller Deployment still running (fenced), and how to finish.
fn print_still_running(report: &UninstallReport, ns: &str, args: &Args) {
    for running in &report.still_running {
        println!(
            "still running: {running}, fenced: its pods write nothing. Delete it to finish (`helm uninstall` and `kubectl delete -f deploy/hairpin.yaml` do, or `kubectl -n {ns} delete deployment {}`); the fence (Lease {ns}/{}) goes with it, so a later install starts unfenced.",
            args.own.controller_deployment, args.lease_name
        );
    }
}
