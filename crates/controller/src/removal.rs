//! Removal without the uninstall hook (issue 40): a GitOps prune, `kubectl delete -f`, a
//! deleted namespace. The controller tells its removal from a restart and then runs the same
//! restore as `hairpin uninstall`.
//!
//! **What must still be there.** The restore needs the controller's process (its Deployment,
//! whose ReplicaSet and Pods the garbage collector keeps while the Deployment waits on a
//! finalizer), its token (a ServiceAccount being deleted keeps its tokens valid for 60 s after
//! its `deletionTimestamp`, and none once it is gone) and its RBAC. At start ([`arm`]) the
//! controller puts [`RESTORE_FINALIZER`] on its Deployment, its ServiceAccount, its
//! ClusterRole and ClusterRoleBinding, its Role and RoleBinding, and the CoreDNS Role and
//! RoleBinding (each behaviour measured on kube-apiserver and kube-controller-manager 1.31:
//! `crates/hairpin/tests/removal.rs`).
//!
//! **Released** (`release`) once the restore is done or the deadline passed: the Deployment,
//! the Roles and RoleBindings, the ClusterRole and its binding, then the ServiceAccount (its
//! token dies with it). When the ClusterRole and its binding are being deleted themselves,
//! they cannot grant the requests after their own release: the **release pair** does
//! ([`ensure_release_pair`], made at start: ClusterRole and ClusterRoleBinding
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
//! **Removal, not restart** ([`removal`]): the Deployment, the namespace, the ServiceAccount,
//! the ClusterRole, its binding or the CoreDNS RoleBinding is being deleted or is gone (gone only
//! for an object that existed when the guard was armed). Anything else (a rollout, a node
//! drain, a crash) keeps everything.
//!
//! **Bounded.** The restore gets [`RemovalParams::deadline`] (below the Pod's grace period and
//! the ServiceAccount's 60 s); the finalizers go whether it finished or not, so a controller
//! that cannot restore never holds a deletion longer. What is left is said in the last log
//! line and an Event, with the one command that removes it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hairpin_planner::PlannerConfig;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::json;

use crate::report::{Events, object_ref};
use crate::uninstall::{UninstallParams, UninstallReport, uninstall_with};
use crate::{Error, Metrics};

mod release_pair;

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
    /// How often the guard looks while running.
    pub poll: Duration,
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
            poll: Duration::from_secs(3),
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

/// One object the guard holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Held {
    Deployment,
    ServiceAccount,
    ClusterRoleBinding,
    ClusterRole,
    RoleBinding,
    Role,
    CorednsRoleBinding,
    CorednsRole,
}

impl Held {
    const ALL: [Held; 8] = [
        Held::Deployment,
        Held::ClusterRoleBinding,
        Held::ClusterRole,
        Held::RoleBinding,
        Held::Role,
        Held::ServiceAccount,
        Held::CorednsRoleBinding,
        Held::CorednsRole,
    ];

    fn resource(self) -> ApiResource {
        match self {
            Held::Deployment => ApiResource::erase::<Deployment>(&()),
            Held::ServiceAccount => ApiResource::erase::<ServiceAccount>(&()),
            Held::ClusterRoleBinding => ApiResource::erase::<ClusterRoleBinding>(&()),
            Held::ClusterRole => ApiResource::erase::<ClusterRole>(&()),
            Held::RoleBinding | Held::CorednsRoleBinding => ApiResource::erase::<RoleBinding>(&()),
            Held::Role | Held::CorednsRole => ApiResource::erase::<Role>(&()),
        }
    }

    /// Namespace (empty: cluster-scoped) and name.
    fn at(self, p: &RemovalParams) -> (&str, &str) {
        match self {
            Held::Deployment => (&p.namespace, &p.deployment),
            Held::ServiceAccount | Held::RoleBinding | Held::Role => (&p.namespace, &p.rbac_name),
            Held::ClusterRoleBinding | Held::ClusterRole => ("", &p.rbac_name),
            Held::CorednsRoleBinding | Held::CorednsRole => {
                (&p.coredns_namespace, &p.coredns_rbac_name)
            }
        }
    }

    fn api(self, client: &kube::Client, p: &RemovalParams) -> Api<DynamicObject> {
        let (ns, _) = self.at(p);
        if ns.is_empty() {
            Api::all_with(client.clone(), &self.resource())
        } else {
            Api::namespaced_with(client.clone(), ns, &self.resource())
        }
    }

    /// `Kind namespace/name`, for messages.
    fn describe(self, p: &RemovalParams) -> String {
        let (ns, name) = self.at(p);
        let kind = self.resource().kind;
        if ns.is_empty() {
            format!("{kind} {name}")
        } else {
            format!("{kind} {ns}/{name}")
        }
    }

    /// Whether the guard looks at it for a removal (a deletion of the manifest, or of the
    /// namespace, deletes one of these).
    fn watched(self) -> bool {
        matches!(
            self,
            Held::Deployment
                | Held::ServiceAccount
                | Held::ClusterRoleBinding
                | Held::ClusterRole
                | Held::CorednsRoleBinding
        )
    }
}

/// The objects the guard found (and holds) at start, by their uid.
#[derive(Clone, Debug, Default)]
pub struct Armed {
    uids: BTreeMap<Held, String>,
    /// Whether the release pair ([`ensure_release_pair`]) was made or found at start.
    release_pair: bool,
    /// Objects left held by an earlier removal ([`RELEASED_ANNOTATION`], being deleted): not a
    /// removal of this install, said at start with the command that lets them go.
    leftovers: Vec<Held>,
}

impl Armed {
    /// Whether the guard holds anything (false: no controller Deployment, e.g. a local run).
    pub fn is_armed(&self) -> bool {
        self.uids.contains_key(&Held::Deployment)
    }

    /// Whether the release pair was made or found at start (without it, a removal that
    /// deletes the ClusterRole leaves it and its binding held, as said then).
    pub fn has_release_pair(&self) -> bool {
        self.release_pair
    }

    /// The objects left held by an earlier removal (`Kind name`).
    pub fn leftovers(&self, p: &RemovalParams) -> Vec<String> {
        self.leftovers.iter().map(|h| h.describe(p)).collect()
    }
}

/// Marks what a removal leaves held (the ClusterRole and its binding, being deleted): a later
/// install finds them still there (and still granting), and knows them for leftovers.
pub const RELEASED_ANNOTATION: &str = "hairpin.io/left-held-by-removal";

/// Adds [`RESTORE_FINALIZER`] to the object's finalizers (a merge patch guarded by its
/// resourceVersion); nothing when it has it.
async fn hold_one(
    api: &Api<DynamicObject>,
    name: &str,
    meta: &ObjectMeta,
) -> Result<(), kube::Error> {
    let mut finalizers = meta.finalizers.clone().unwrap_or_default();
    if finalizers.iter().any(|f| f == RESTORE_FINALIZER) {
        return Ok(());
    }
    finalizers.push(RESTORE_FINALIZER.to_owned());
    let patch = json!({"metadata": {
        "resourceVersion": meta.resource_version,
        "finalizers": finalizers,
    }});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Reads the held objects and puts the holds on them (see the module documentation).
/// Without a controller Deployment (a local run) nothing is held and the guard is off.
///
/// # Errors
/// An API error (the RBAC of an older chart lacks the rights): the guard is then off.
pub async fn arm(client: &kube::Client, p: &RemovalParams) -> Result<Armed, Error> {
    let mut armed = Armed::default();
    let mut metas = BTreeMap::new();
    // The Deployment first: without one (a local run) nothing else is asked.
    for held in Held::ALL {
        if held != Held::Deployment && !armed.is_armed() {
            return Ok(armed);
        }
        let (_, name) = held.at(p);
        let found = held
            .api(client, p)
            .get_opt(name)
            .await
            .map_err(|e| Error::kube(format!("get {}", held.describe(p)), e))?;
        if let Some(object) = found
            && let Some(uid) = object.metadata.uid.clone()
        {
            armed.uids.insert(held, uid);
            metas.insert(held, object.metadata);
        }
    }
    if !armed.is_armed() {
        return Ok(armed);
    }
    for held in Held::ALL {
        let Some(meta) = metas.get(&held) else {
            continue;
        };
        if meta.deletion_timestamp.is_some() {
            if meta
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(RELEASED_ANNOTATION))
            {
                armed.leftovers.push(held);
            }
            // No finalizer can be added to an object being deleted; the removal is seen next.
            continue;
        }
        let (_, name) = held.at(p);
        hold_one(&held.api(client, p), name, meta)
            .await
            .map_err(|e| Error::kube(format!("hold {}", held.describe(p)), e))?;
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

/// Why this is a removal, or `None` (a restart: keep everything). An object that cannot be
/// read for another reason than 404 says nothing (an API outage is not a removal), but a 401
/// or 403 on all of them is: the controller's token or rights are gone.
pub async fn removal(client: &kube::Client, p: &RemovalParams, armed: &Armed) -> Option<String> {
    if !armed.is_armed() {
        return None;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if let Ok(Some(ns)) = namespaces.get_opt(&p.namespace).await
        && ns.metadata.deletion_timestamp.is_some()
    {
        return Some(format!("namespace {} is being deleted", p.namespace));
    }
    let mut refused = 0;
    let mut asked = 0;
    for held in Held::ALL.into_iter().filter(|h| h.watched()) {
        let Some(uid) = armed.uids.get(&held) else {
            continue;
        };
        if armed.leftovers.contains(&held) {
            continue;
        }
        asked += 1;
        let (_, name) = held.at(p);
        match held.api(client, p).get_opt(name).await {
            Ok(Some(object)) if object.metadata.uid.as_ref() != Some(uid) => {
                return Some(format!("{} was deleted (and made again)", held.describe(p)));
            }
            Ok(Some(object)) if object.metadata.deletion_timestamp.is_some() => {
                return Some(format!("{} is being deleted", held.describe(p)));
            }
            Ok(Some(_)) => {}
            Ok(None) => return Some(format!("{} is gone", held.describe(p))),
            Err(kube::Error::Api(status)) if status.code == 401 || status.code == 403 => {
                refused += 1;
            }
            Err(_) => {}
        }
    }
    (asked > 0 && refused == asked).then(|| {
        "the controller's token or rights are gone (every read refused with 401/403)".to_owned()
    })
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
    let mut order = vec![
        Held::Deployment,
        Held::CorednsRole,
        Held::CorednsRoleBinding,
        Held::Role,
        Held::RoleBinding,
    ];
    let paired = armed.release_pair && release_pair_stands(client, p).await;
    for held in [Held::ClusterRole, Held::ClusterRoleBinding] {
        let (_, name) = held.at(p);
        if paired {
            order.push(held);
            continue;
        }
        match held.api(client, p).get_opt(name).await {
            Ok(Some(o)) if o.metadata.deletion_timestamp.is_some() => left.push(held.describe(p)),
            _ => order.push(held),
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
        let (_, name) = held.at(p);
        if let Err(err) = unhold(&held.api(client, p), name).await {
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
    let order = [
        Held::Deployment,
        Held::CorednsRole,
        Held::CorednsRoleBinding,
        Held::Role,
        Held::RoleBinding,
        Held::ClusterRole,
        Held::ClusterRoleBinding,
        Held::ServiceAccount,
    ];
    let mut errors = Vec::new();
    for held in order {
        let (_, name) = held.at(p);
        match unhold(&held.api(client, p), name).await {
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

/// Removes [`RESTORE_FINALIZER`] from the object (a merge patch guarded by its
/// resourceVersion: a concurrent change is a conflict, read again and retried).
async fn unhold(api: &Api<DynamicObject>, name: &str) -> Result<(), kube::Error> {
    let mut attempt = 0;
    loop {
        let Some(object) = api.get_opt(name).await? else {
            return Ok(());
        };
        let finalizers = object.metadata.finalizers.clone().unwrap_or_default();
        if !finalizers.iter().any(|f| f == RESTORE_FINALIZER) {
            return Ok(());
        }
        let kept: Vec<&String> = finalizers
            .iter()
            .filter(|f| *f != RESTORE_FINALIZER)
            .collect();
        let patch = json!({"metadata": {
            "resourceVersion": object.metadata.resource_version,
            "finalizers": kept,
        }});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < 5 => attempt += 1,
            Err(err) => return Err(err),
        }
    }
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

/// The restore of `hairpin uninstall` (fence first), bounded by the deadline; then the Event,
/// the release, and the last log line.
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
        ..UninstallParams::new(&p.lease_name)
    };
    let report = tokio::time::timeout(p.deadline, uninstall_with(client, planner, &params))
        .await
        .ok();
    let restore_took = started.elapsed();
    let missing = not_restored(report.as_ref(), p.deadline);
    let (order, mut still_held) = release_plan(client, p, armed).await;
    let note = left_note(&reason, &missing, &still_held, planner);
    let mut deployment = object_ref(
        "Deployment",
        &p.namespace,
        &p.deployment,
        armed.uids.get(&Held::Deployment).cloned(),
    );
    deployment.api_version = Some("apps/v1".into());
    // Before the release: the ServiceAccount's token dies with it.
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
        .publish(&deployment, warning, event_reason, event_note)
        .await;
    mark_left_held(client, p, &order).await;
    let failures = release(client, p, &order).await;
    still_held.extend(failures.iter().map(|(object, _)| object.clone()));
    let note = left_note(&reason, &missing, &still_held, planner);
    match &note {
        None if armed.release_pair => {
            tracing::info!(reason = %reason, took = ?restore_took, "hairpin removed: everything it wrote was restored, its objects released; the release pair (ClusterRole and ClusterRoleBinding {name}, inert now) goes with the namespace {ns} (if the namespace stays: kubectl delete clusterrolebinding,clusterrole {name})", name = p.release_name(), ns = p.namespace);
        }
        None => {
            tracing::info!(reason = %reason, took = ?restore_took, "hairpin removed: everything it wrote was restored, its objects released");
        }
        Some(note) if missing.is_empty() => {
            tracing::info!(reason = %reason, took = ?restore_took, "hairpin removed: everything it wrote was restored");
            tracing::warn!("{note}");
        }
        Some(note) => tracing::error!("{note}"),
    }
    RemovalOutcome {
        reason,
        report,
        restore_took,
        still_held,
        left_note: note,
    }
}

/// Arms the guard, again with a backoff while the API server cannot be reached (an outage at
/// start does not turn it off; the watches report the outage); `None` without a controller
/// Deployment, without the rights (an older chart's RBAC), or at the shutdown.
async fn arm_until_done(
    client: &kube::Client,
    p: &RemovalParams,
    shutdown: &hairpin_runtime::Shutdown,
) -> Option<Armed> {
    let mut backoff = Duration::from_secs(1);
    loop {
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
            Err(err) if err.status_code().is_some_and(|c| c == 401 || c == 403) => {
                tracing::warn!(error = %err, "removal guard off (no rights to hold its objects): a removal other than `hairpin uninstall` would leave hairpin's changes in place");
                return None;
            }
            Err(err) => {
                tracing::debug!(error = %err, retry_in = ?backoff, "removal guard not armed yet");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = shutdown.draining() => return None,
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

/// Arms the guard, then looks for a removal every `poll` until the shutdown starts, and once
/// more then. On a removal: [`restore_and_release`]. Returns the outcome, if there was one.
pub async fn guard(
    client: kube::Client,
    planner: PlannerConfig,
    p: RemovalParams,
    identity: String,
    metrics: Metrics,
    shutdown: hairpin_runtime::Shutdown,
) -> Option<RemovalOutcome> {
    let armed = arm_until_done(&client, &p, &shutdown).await?;
    let events = Events::new(client.clone(), &identity, metrics);
    loop {
        let last = tokio::select! {
            () = tokio::time::sleep(p.poll) => false,
            () = shutdown.draining() => true,
        };
        if let Some(reason) = removal(&client, &p, &armed).await {
            return Some(restore_and_release(&client, &planner, &p, &armed, &events, reason).await);
        }
        if last {
            tracing::info!("shutdown without removal (a restart): hairpin's changes are kept");
            return None;
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
