//! Removal without the uninstall hook (issue 40): a GitOps prune, `kubectl delete -f`, a
//! deleted namespace. The controller tells its removal from a restart and then runs the same
//! restore as `hairpin uninstall`.
//!
//! **What must still be there.** The restore needs the controller's process (its Deployment,
//! whose ReplicaSet and Pods the garbage collector keeps while the Deployment waits on a
//! finalizer), its token (a ServiceAccount being deleted keeps its tokens valid for 60 s after
//! its `deletionTimestamp`, and none once it is gone), its RBAC and the native cure's record.
//! At start ([`arm`]) the controller puts [`RESTORE_FINALIZER`] on its Deployment, its
//! ServiceAccount, its ClusterRole and ClusterRoleBinding, its Role and RoleBinding, the
//! CoreDNS Role and RoleBinding, and the record `hairpin-native` (so the namespace controller
//! cannot delete it before the restore has read it): all or nothing, a refusal on one (an
//! admission policy protecting kube-system) takes every hold off again, says which object and
//! why, and the arming is retried with a backoff. (Each behaviour measured on kube-apiserver
//! and kube-controller-manager 1.31: `crates/hairpin/tests/removal.rs`.)
//!
//! **Released** (`release`) once the restore is done or the deadline passed: the Deployment,
//! the record, the Roles and RoleBindings, the ClusterRole and its binding, then the
//! ServiceAccount (its token dies with it). When the ClusterRole and its binding are being
//! deleted themselves, they cannot grant the requests after their own release: the **release
//! pair** does ([`ensure_release_pair`], made at start: ClusterRole and ClusterRoleBinding
//! `<release>-release`, `get`/`patch` on those three by name, owned by the controller's
//! Namespace, so the garbage collector deletes them after the namespace, which goes after the
//! ServiceAccount; an owner released before the ServiceAccount would race it). Without the
//! pair (refused, an older chart) the ClusterRole and its binding stay, inert, until one
//! command removes their finalizer ([`leftover_command`]); said in the last log line and an
//! Event. (Kubernetes' own `foregroundDeletion` finalizer cannot carry this: a DELETE that
//! names a propagation policy, as kubectl, Helm and the namespace controller send, drops it.)
//! `hairpin uninstall` (the Helm hook, the uninstall Job) releases every hold before the
//! objects are deleted, and deletes the pair.
//!
//! **Removal, not restart, not replacement** ([`removal`], `assess`): only the namespace, the
//! Deployment or the ServiceAccount being deleted, gone or made again is a removal. Any other
//! held object deleted alone (`kubectl replace --force`, a binding `kubectl auth reconcile`
//! makes again, a `helm upgrade` that renames or drops it) is let go once no removal followed
//! within [`RemovalParams::settle`], and held again under its new uid when it comes back;
//! nothing is restored. A rollout, a node drain or a crash keeps everything. The guard learns
//! of each change through watches on the namespace and on each held object by name (`watches`):
//! an idle guard asks the API server nothing.
//!
//! **Never fenced for good by mistake.** The restore fences the controller with the removal
//! guard's own mark ([`crate::lease::FENCE_BY_REMOVAL`]). When the Deployment still lives
//! [`RemovalParams::settle`] after the restore and is not being deleted, the guard lifts its
//! fence and the controller resumes (its next reconcile writes again); the log and an Event
//! (`Resumed`) say so, and the guard arms again.
//!
//! **Bounded.** The restore gets [`RemovalParams::deadline`] (below the Pod's grace period and
//! the ServiceAccount's 60 s); the finalizers go whether it finished or not, so a controller
//! that cannot restore never holds a deletion longer. What is left is said in the last log
//! line and an Event, with the one command that removes it. A record the guard held but the
//! restore did not find is a failure in that note, never "everything restored".

use std::sync::Arc;
use std::time::{Duration, Instant};

use hairpin_planner::PlannerConfig;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::sync::Notify;

use crate::report::{Events, object_ref};
use crate::uninstall::{UninstallParams, UninstallReport, uninstall_with};
use crate::{Error, Metrics};

mod assess;
mod held;
mod release_pair;
mod watches;

pub use held::Armed;
use held::{Held, arm_objects, unhold};
use release_pair::release_pair_stands;
pub use release_pair::{delete_release_pair, ensure_release_pair, release_pair};

/// hairpin's finalizer: "hairpin restores the cluster before this goes".
pub const RESTORE_FINALIZER: &str = "hairpin.io/restore";

/// Names the guard watches, and its bounds.
#[derive(Clone, Debug)]
pub struct RemovalParams {
    /// The controller's namespace.
    pub namespace: String,
    /// The controller Deployment.
    pub deployment: String,
    /// The controller's ServiceAccount, ClusterRole, ClusterRoleBinding, Role and RoleBinding.
    pub rbac_name: String,
    /// The CoreDNS namespace, where the CoreDNS Role and RoleBinding are.
    pub coredns_namespace: String,
    /// The CoreDNS Role and RoleBinding.
    pub coredns_rbac_name: String,
    /// The native cure's record ConfigMap in `namespace`.
    pub native_record: String,
    /// How long an object other than the Deployment, the ServiceAccount and the namespace may
    /// be being deleted before the guard lets it go as replaced, renamed or dropped (a removal
    /// of hairpin deletes the Deployment within this; `kubectl delete -f` within a second).
    /// Also how long a Deployment must live on after a restore before the fence is lifted.
    pub settle: Duration,
    /// How long the restore may take once a removal is seen.
    pub deadline: Duration,
    /// The leader Lease (the uninstall fence).
    pub lease_name: String,
}

impl RemovalParams {
    /// The chart's names for the release `hairpin` in `namespace`.
    pub fn new(namespace: &str, coredns_namespace: &str) -> Self {
        Self {
            namespace: namespace.into(),
            deployment: "hairpin-controller".into(),
            rbac_name: "hairpin-controller".into(),
            coredns_namespace: coredns_namespace.into(),
            coredns_rbac_name: "hairpin-coredns".into(),
            native_record: "hairpin-native".into(),
            settle: Duration::from_secs(5),
            deadline: Duration::from_secs(20),
            lease_name: "hairpin-controller".into(),
        }
    }

    /// The release pair's name: `<release>-release` for the chart's `<release>-controller`.
    pub fn release_name(&self) -> String {
        match self.rbac_name.strip_suffix("-controller") {
            Some(release) => format!("{release}-release"),
            None => format!("{}-release", self.rbac_name),
        }
    }
}

/// Marks what a removal leaves held (the ClusterRole and its binding, being deleted): a later
/// install finds them still there (and still granting), and knows them for leftovers.
pub const RELEASED_ANNOTATION: &str = "hairpin.io/left-held-by-removal";

/// Reads the held objects and puts the holds on them, all or nothing (see the module
/// documentation), then makes the release pair. Without a controller Deployment (a local
/// run) nothing is held and the guard is off.
///
/// # Errors
/// The object whose read or hold was refused, and why (every hold put on is taken off again).
pub async fn arm(client: &kube::Client, p: &RemovalParams) -> Result<Armed, Error> {
    let mut armed = arm_objects(client, p).await.map_err(|e| {
        // The API server unreachable before anything was held: said as it is, so that the
        // guard leaves it to the watches' one warning for that condition.
        if e.still_held.is_empty() && e.error.metric_label() == "api_transport" {
            return e.error;
        }
        let released = if e.still_held.is_empty() {
            "every hold put on was taken off again".to_owned()
        } else {
            format!(
                "could not take off the holds of {}",
                e.still_held.join("; ")
            )
        };
        Error::Config(format!(
            "arming stopped at {}: {}; {released}",
            e.object, e.error
        ))
    })?;
    if !armed.is_armed() {
        return Ok(armed);
    }
    match ensure_release_pair(client, p).await {
        Ok(()) => armed.release_pair = true,
        Err(err) => tracing::warn!(
            error = %err,
            "no release pair (ClusterRole and ClusterRoleBinding {}): a removal that deletes the ClusterRole {} would leave it and its binding held by {RESTORE_FINALIZER}, said then with the command that lets them go",
            p.release_name(),
            p.rbac_name
        ),
    }
    Ok(armed)
}

/// Why this is a removal, or `None` (a restart, or another object replaced: keep going). Holds
/// again what came back and lets go of what was deleted alone for longer than
/// [`RemovalParams::settle`] (see [`assess`]).
pub async fn removal(
    client: &kube::Client,
    p: &RemovalParams,
    armed: &mut Armed,
) -> Option<String> {
    assess::look(client, p, armed, p.settle).await.removal
}

/// The order the held objects are let go in, the ServiceAccount last (see the module
/// documentation), and what stays held: without the release pair, the ClusterRole and its
/// binding when they are being deleted (releasing one would take the rights for the next
/// request); with it, nothing (the pair grants the last releases).
async fn release_plan(
    client: &kube::Client,
    p: &RemovalParams,
    armed: &Armed,
) -> (Vec<Held>, Vec<String>) {
    let mut left = Vec::new();
    // A binding before its Role: once a Role being deleted is let go it is gone, and the API
    // server then refuses any update of a binding that names it (it cannot resolve the
    // roleRef: 404), finalizers included. The ClusterRole grants these patches, not the Roles.
    let mut order = vec![
        Held::Deployment,
        Held::NativeRecord,
        Held::CorednsRoleBinding,
        Held::CorednsRole,
        Held::RoleBinding,
        Held::Role,
    ];
    let pair = [Held::ClusterRole, Held::ClusterRoleBinding];
    if armed.release_pair && release_pair_stands(client, p).await {
        order.extend(pair);
    } else {
        // Without the pair, the ClusterRole and its binding grant together: both stay when
        // either is being deleted. The rest of a `kubectl delete -f` comes within a second
        // of its first DELETE (the watching guard is faster): waited for first.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut deleting = false;
        for held in pair {
            let (_, name) = held.at(p);
            deleting |= matches!(held.api(client, p).get_opt(name).await,
                Ok(Some(o)) if o.metadata.deletion_timestamp.is_some());
        }
        if deleting {
            left.extend(pair.iter().map(|h| h.describe(p)));
        } else {
            order.extend(pair);
        }
    }
    order.push(Held::ServiceAccount);
    order.retain(|held| armed.uids.contains_key(held));
    left.retain(|_| armed.uids.contains_key(&Held::ClusterRoleBinding));
    (order, left)
}

/// Marks the ClusterRole and its binding with [`RELEASED_ANNOTATION`] when `order` leaves
/// them held (they are being deleted): a later install knows them for leftovers, not for its
/// own removal. Errors are logged only.
async fn mark_left_held(client: &kube::Client, p: &RemovalParams, order: &[Held]) {
    for held in [Held::ClusterRole, Held::ClusterRoleBinding] {
        if order.contains(&held) {
            continue;
        }
        let (_, name) = held.at(p);
        let patch = json!({"metadata": {"annotations": {RELEASED_ANNOTATION: "true"}}});
        if let Err(err) = held
            .api(client, p)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(error = %err, object = %held.describe(p), "could not mark an object left held");
        }
    }
}

/// Lets `order` go; the errors (logged), each with the object still held.
async fn release(
    client: &kube::Client,
    p: &RemovalParams,
    order: &[Held],
) -> Vec<(String, String)> {
    let mut failures = Vec::new();
    for &held in order {
        if let Err(err) = unhold(held, client, p).await {
            let err = format!(
                "remove finalizer {RESTORE_FINALIZER} from {}: {err}",
                held.describe(p)
            );
            tracing::warn!(error = %err, "could not release an object hairpin held");
            failures.push((held.describe(p), err));
        }
    }
    failures
}

/// Removes hairpin's finalizer from every object the guard holds (`hairpin uninstall` does,
/// before the objects are deleted: nothing is left held then). Returns the errors.
pub async fn release_all(client: &kube::Client, p: &RemovalParams) -> Vec<String> {
    // Bindings before their Roles, as in `release_plan`.
    let order = [
        Held::Deployment,
        Held::NativeRecord,
        Held::CorednsRoleBinding,
        Held::CorednsRole,
        Held::RoleBinding,
        Held::Role,
        Held::ClusterRole,
        Held::ClusterRoleBinding,
        Held::ServiceAccount,
    ];
    let mut errors = Vec::new();
    for held in order {
        match unhold(held, client, p).await {
            Ok(()) => {}
            // Without the rights (an older chart's RBAC, which held nothing either).
            Err(kube::Error::Api(status)) if status.code == 403 || status.code == 404 => {}
            Err(err) => errors.push(format!(
                "remove finalizer {RESTORE_FINALIZER} from {}: {err}",
                held.describe(p)
            )),
        }
    }
    errors
}

/// The command that removes hairpin's finalizer from what a removal left held (`Kind
/// namespace/name` or `Kind name`, as `release_plan` lists them): one `kubectl patch` per
/// object, joined with `&&`.
pub fn leftover_command(left: &[String]) -> String {
    left.iter()
        .filter_map(|object| {
            let (kind, at) = object.split_once(' ')?;
            let (ns, name) = match at.split_once('/') {
                Some((ns, name)) => (format!("-n {ns} "), name),
                None => (String::new(), at),
            };
            Some(format!(
                "kubectl {ns}patch {} {name} --type=json -p '[{{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}}]'",
                kind.to_lowercase()
            ))
        })
        .collect::<Vec<_>>()
        .join(" && ")
}

/// The command that removes what a restore left behind.
pub fn cleanup_command(planner: &PlannerConfig) -> String {
    format!(
        "hairpin uninstall --namespace {} (with a cluster admin's kubeconfig)",
        hairpin_planner::escape::text(&planner.namespace)
    )
}

/// What a removal did.
#[derive(Debug)]
pub struct RemovalOutcome {
    /// Why it was a removal.
    pub reason: String,
    /// The restore's report, `None` when it did not finish within the deadline.
    pub report: Option<UninstallReport>,
    /// How long the restore took.
    pub restore_took: Duration,
    /// Objects still held by hairpin's finalizer (`Kind namespace/name`).
    pub still_held: Vec<String>,
    /// What is left behind and the commands that remove it, when anything is (the
    /// controller logs it again as its last line).
    pub left_note: Option<String>,
    /// The Deployment lived on after the restore: the fence was lifted, the controller
    /// resumed and the guard arms again.
    pub resumed: bool,
}

/// What the restore did not finish, empty when it did.
fn not_restored(report: Option<&UninstallReport>, deadline: Duration) -> Vec<String> {
    match report {
        None => vec![format!(
            "the restore did not finish within {:.0}s: the CoreDNS change, hairpin Services, ipMode statuses, hosts and routes ConfigMaps may remain",
            deadline.as_secs_f64()
        )],
        Some(report) => report.failures.clone(),
    }
}

/// The note of the Event and of the last log line when something is left: what, and the
/// commands that remove it. `None` when nothing is.
fn left_note(
    reason: &str,
    not_restored: &[String],
    held: &[String],
    planner: &PlannerConfig,
) -> Option<String> {
    let mut parts = Vec::new();
    if !not_restored.is_empty() {
        parts.push(format!(
            "the restore did not finish; left behind: {}. Remove it with: {}",
            not_restored.join("; "),
            cleanup_command(planner)
        ));
    }
    if !held.is_empty() {
        parts.push(format!(
            "{} keep hairpin's finalizer {RESTORE_FINALIZER} (they granted the controller's last request; inert now). Remove it with: {}",
            held.join(" and "),
            leftover_command(held)
        ));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "hairpin is being removed ({reason}): {}",
            parts.join("; and ")
        )
    })
}

/// When the guard knew the native cure's record (it held it) and the restore found none: the
/// failure, with what the Services' managed fields gave back instead.
fn record_lost(
    report: Option<&UninstallReport>,
    p: &RemovalParams,
    armed: &Armed,
) -> Option<String> {
    let report = report?;
    if !armed.uids.contains_key(&Held::NativeRecord) || report.native_record_found {
        return None;
    }
    let found = &report.ip_modes_from_managed_fields;
    Some(format!(
        "the native cure's record ConfigMap {}/{} was gone before the restore could read it; {} load balancer status(es) put back from the Services' managed fields ({}); check the ipMode of the others by hand",
        p.namespace,
        p.native_record,
        found.len(),
        if found.is_empty() {
            "none found".to_owned()
        } else {
            found.join(", ")
        }
    ))
}

/// Whether the Deployment the guard armed with lives on: there (the same uid) and not being
/// deleted, in a namespace not being deleted. An error says no (the fence stays).
async fn deployment_lives(client: &kube::Client, p: &RemovalParams, armed: &Armed) -> bool {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &p.namespace);
    let namespace_stays = matches!(namespaces.get_opt(&p.namespace).await,
        Ok(Some(ns)) if ns.metadata.deletion_timestamp.is_none());
    namespace_stays
        && matches!(deployments.get_opt(&p.deployment).await,
            Ok(Some(d)) if d.metadata.deletion_timestamp.is_none()
                && d.metadata.uid.as_ref() == armed.uids.get(&Held::Deployment))
}

/// The controller Deployment, for the Events.
fn deployment_ref(p: &RemovalParams, armed: &Armed) -> k8s_openapi::api::core::v1::ObjectReference {
    let mut deployment = object_ref(
        "Deployment",
        &p.namespace,
        &p.deployment,
        armed.uids.get(&Held::Deployment).cloned(),
    );
    deployment.api_version = Some("apps/v1".into());
    deployment
}

/// After a restore: when the Deployment still lives [`RemovalParams::settle`] later (not a
/// removal of hairpin after all: its ServiceAccount made again, its rights taken), the
/// guard's fence is lifted and the controller resumes (its next reconcile writes again); said
/// in the log and an Event. True when lifted.
async fn resume_if_living(
    client: &kube::Client,
    p: &RemovalParams,
    armed: &Armed,
    events: &Events,
    reason: &str,
) -> bool {
    if !deployment_lives(client, p, armed).await {
        return false;
    }
    tokio::time::sleep(p.settle).await;
    if !deployment_lives(client, p, armed).await {
        return false;
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), &p.namespace);
    match crate::lease::lift_removal_fence(&leases, &p.lease_name).await {
        Ok(true) => {}
        Ok(false) if assess::uninstalling(client, p).await => {
            tracing::info!(
                "the Deployment lives on, but the Lease carries hairpin uninstall's fence, which stays"
            );
            return false;
        }
        Ok(false) => {
            // Another replica's guard lifted it first.
            tracing::info!(reason = %reason, "restored, and the Deployment lives on: the fence is already lifted; the guard arms again");
            return true;
        }
        Err(err) => {
            tracing::error!(error = %err, "the Deployment lives on, but the removal guard's fence could not be lifted: the controller stays idle until the Lease is deleted (kubectl -n {} delete lease {})", p.namespace, p.lease_name);
            return false;
        }
    }
    let note = format!(
        "hairpin restored the cluster ({reason}), but its Deployment {}/{} lives on and is not being deleted: not a removal of hairpin. The fence is lifted and the controller resumes: its next reconcile writes again",
        p.namespace, p.deployment
    );
    tracing::warn!("{note}");
    events
        .publish(&deployment_ref(p, armed), true, "Resumed", note)
        .await;
    true
}

/// The restore of `hairpin uninstall` (fence first), bounded by the deadline; the fence lifted
/// again when the Deployment lives on; then the Event, the release, and the last log line.
pub async fn restore_and_release(
    client: &kube::Client,
    planner: &PlannerConfig,
    p: &RemovalParams,
    armed: &Armed,
    events: &Events,
    reason: String,
) -> RemovalOutcome {
    tracing::warn!(reason = %reason, "hairpin is being removed: fencing the controllers and restoring what hairpin wrote");
    let started = Instant::now();
    let params = UninstallParams {
        controller_deployment: p.deployment.clone(),
        by_removal: true,
        ..UninstallParams::new(&p.lease_name)
    };
    let report = tokio::time::timeout(p.deadline, uninstall_with(client, planner, &params))
        .await
        .ok();
    let restore_took = started.elapsed();
    let mut missing = not_restored(report.as_ref(), p.deadline);
    missing.extend(record_lost(report.as_ref(), p, armed));
    // Before the release: the ServiceAccount's token dies with it.
    let resumed = resume_if_living(client, p, armed, events, &reason).await;
    let (order, mut still_held) = release_plan(client, p, armed).await;
    let note = left_note(&reason, &missing, &still_held, planner);
    let (warning, event_reason, event_note) = match (&note, missing.is_empty()) {
        (None, _) => (
            false,
            "Restored",
            format!(
                "hairpin is being removed ({reason}): everything it wrote was restored in {:.1}s",
                restore_took.as_secs_f64()
            ),
        ),
        (Some(note), true) => (true, "Held", note.clone()),
        (Some(note), false) => (true, "RestoreIncomplete", note.clone()),
    };
    events
        .publish(&deployment_ref(p, armed), warning, event_reason, event_note)
        .await;
    mark_left_held(client, p, &order).await;
    let failures = release(client, p, &order).await;
    still_held.extend(failures.iter().map(|(object, _)| object.clone()));
    let note = left_note(&reason, &missing, &still_held, planner);
    log_outcome(
        p,
        armed,
        &reason,
        restore_took,
        &missing,
        note.as_deref(),
        resumed,
    );
    RemovalOutcome {
        reason,
        report,
        restore_took,
        still_held,
        left_note: note,
        resumed,
    }
}

/// The last log line of a removal.
fn log_outcome(
    p: &RemovalParams,
    armed: &Armed,
    reason: &str,
    took: Duration,
    missing: &[String],
    note: Option<&str>,
    resumed: bool,
) {
    match note {
        None if resumed => {
            tracing::info!(reason = %reason, took = ?took, "restored, then resumed: the Deployment lives on; the guard arms again");
        }
        None if armed.release_pair => {
            tracing::info!(reason = %reason, took = ?took, "hairpin removed: everything it wrote was restored, its objects released; the release pair (ClusterRole and ClusterRoleBinding {name}, inert now) goes with the namespace {ns} (if the namespace stays: kubectl delete clusterrolebinding,clusterrole {name})", name = p.release_name(), ns = p.namespace);
        }
        None => {
            tracing::info!(reason = %reason, took = ?took, "hairpin removed: everything it wrote was restored, its objects released");
        }
        Some(note) if missing.is_empty() => {
            tracing::info!(reason = %reason, took = ?took, "hairpin removed: everything it wrote was restored");
            tracing::warn!("{note}");
        }
        Some(note) => tracing::error!("{note}"),
    }
}

/// Arms the guard, again with a backoff (1 s doubling to 5 min) while it cannot (the API
/// server unreachable, or a hold refused: an admission policy, the RBAC of an older chart;
/// nothing is held meanwhile, said once per reason); `None` without a controller Deployment,
/// or at the shutdown.
async fn arm_until_done(
    client: &kube::Client,
    p: &RemovalParams,
    shutdown: &hairpin_runtime::Shutdown,
) -> Option<Armed> {
    let mut backoff = Duration::from_secs(1);
    let mut said: Option<String> = None;
    loop {
        if assess::uninstalling(client, p).await {
            tracing::info!(
                "hairpin uninstall fenced the controllers: the removal guard stays off (nothing held)"
            );
            return None;
        }
        match arm(client, p).await {
            Ok(armed) if armed.is_armed() => {
                tracing::info!(deployment = %p.deployment, "removal guard armed: a removal of hairpin (not a restart) restores the cluster first");
                let leftovers = armed.leftovers(p);
                if !leftovers.is_empty() {
                    tracing::warn!(
                        "{} are left from an earlier removal of hairpin, being deleted and held by its finalizer (they still grant this install's rights); once let go they are deleted: run {}, then apply the manifest again (or helm upgrade) and restart the controller",
                        leftovers.join(" and "),
                        leftover_command(&leftovers)
                    );
                }
                return Some(armed);
            }
            Ok(_) => {
                tracing::info!(deployment = %p.deployment, "no controller Deployment: the removal guard is off (a local run)");
                return None;
            }
            Err(err) if err.metric_label() == "api_transport" => {
                tracing::debug!(error = %err, retry_in = ?backoff, "removal guard not armed yet: the API server is unreachable (nothing held)");
            }
            Err(err) if said.as_deref() != Some(err.to_string().as_str()) => {
                tracing::warn!(error = %err, retry_in = ?backoff, "removal guard not armed, nothing held: a removal other than `hairpin uninstall` would leave hairpin's changes in place meanwhile; retrying with a backoff (said again when the reason changes)");
                said = Some(err.to_string());
            }
            Err(err) => {
                tracing::debug!(error = %err, retry_in = ?backoff, "removal guard not armed yet");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = shutdown.draining() => return None,
        }
        backoff = (backoff * 2).min(Duration::from_secs(300));
    }
}

/// Watches the namespace and the held objects, and looks at each change (holding again what
/// came back, letting go of what was deleted alone) until a removal, or the shutdown: then once
/// more, letting go at once of what is being deleted alone. The removal's reason, if any.
async fn watch_for_removal(
    client: &kube::Client,
    p: &RemovalParams,
    armed: &mut Armed,
    shutdown: &hairpin_runtime::Shutdown,
) -> Option<String> {
    let poke = Arc::new(Notify::new());
    let _watches = watches::start(client, p, poke.clone());
    loop {
        let look = assess::look(client, p, armed, p.settle).await;
        if look.uninstalling {
            tracing::info!(
                "hairpin uninstall fenced the controllers: it restores and lets every hold go itself; the removal guard stands down"
            );
            return None;
        }
        if look.removal.is_some() {
            return look.removal;
        }
        let again = look
            .again_at
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400));
        tokio::select! {
            () = poke.notified() => {}
            () = tokio::time::sleep_until(again.into()) => {}
            () = shutdown.draining() => {
                let last = assess::look(client, p, armed, Duration::ZERO).await;
                if last.uninstalling {
                    return None;
                }
                if last.removal.is_none() {
                    tracing::info!("shutdown without removal (a restart): hairpin's changes are kept");
                }
                return last.removal;
            }
        }
    }
}

/// Arms the guard, then watches for a removal until the shutdown starts, and looks once more
/// then. On a removal: [`restore_and_release`]; when the Deployment lives on after it (the
/// fence lifted), arms again. Returns the outcome, if there was one.
pub async fn guard(
    client: kube::Client,
    planner: PlannerConfig,
    p: RemovalParams,
    identity: String,
    metrics: Metrics,
    shutdown: hairpin_runtime::Shutdown,
) -> Option<RemovalOutcome> {
    let events = Events::new(client.clone(), &identity, metrics);
    loop {
        let mut armed = arm_until_done(&client, &p, &shutdown).await?;
        let reason = watch_for_removal(&client, &p, &mut armed, &shutdown).await?;
        let outcome = restore_and_release(&client, &planner, &p, &armed, &events, reason).await;
        if !outcome.resumed {
            return Some(outcome);
        }
    }
}

/// Why the node agent's DaemonSet `namespace/name` counts as removed at the agent's exit:
/// being deleted, gone, or not readable within 3 s (the safe side: a stale hosts block would
/// point at a hairpin Service that may be gone); `None` when it stands (a restart).
pub async fn daemonset_removal(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Option<String> {
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), namespace);
    let ds = hairpin_planner::escape::text(name);
    match tokio::time::timeout(Duration::from_secs(3), api.get_opt(name)).await {
        Ok(Ok(Some(found))) if found.metadata.deletion_timestamp.is_none() => None,
        Ok(Ok(Some(_))) => Some(format!("DaemonSet {ds} is being deleted")),
        Ok(Ok(None)) => Some(format!("DaemonSet {ds} is gone")),
        Ok(Err(err)) => Some(format!("DaemonSet {ds} cannot be read ({err})")),
        Err(_) => Some(format!(
            "DaemonSet {ds} cannot be read (no answer within 3s)"
        )),
    }
}

#[cfg(test)]
mod tests;
