//! The caches of what the receivers of the load balancers are read from (issue 31,
//! [`hairpin_planner::receivers`]): the pod templates of Deployments, DaemonSets and
//! StatefulSets, the receivers' custom resources ([`DYNAMIC_APIS`]) and, by name, the
//! ConfigMaps the receivers name.
//!
//! Memory: a cluster has many more workloads than load balancers, so each workload is kept
//! slimmed to what the receivers read ([`slim_template`]: labels, images, arguments, a few
//! environment variables, ConfigMap volume names), and Pods are not watched at all (every
//! receiver the planner knows runs from one of these three controllers' templates). ConfigMaps
//! are not watched cluster-wide (every ConfigMap of every namespace, most of them large and
//! none of hairpin's business): only those the receivers of the current load balancers name
//! ([`hairpin_planner::receivers::config_maps_read`]: ingress-nginx's `--configmap`, F5's
//! `-nginx-configmaps`, HAProxy's `--configmap`, Traefik's configuration volume,
//! `cilium-config`, Istio's mesh config), each by name, started and stopped as the workloads
//! change. hairpin's grants name them (the chart's `receivers.configMaps`). So are the
//! ConfigMaps kube-proxy's DaemonSet mounts, where a cure may be native (the Nodes' gate reads
//! its `featureGates`, [`hairpin_planner::nodes::kube_proxy_config_maps`]), each slimmed to
//! that block ([`slim_kube_proxy`]); the chart grants `kube-proxy` and `kube-proxy-config`.
//!
//! Do no harm: these reads may be refused where hairpin's grants do not cover them (an older
//! chart, a ConfigMap of another name). A refused read counts as read and empty (logged once):
//! the receiver's setting is then unknown and the annotations decide, as before issue 31. It
//! never keeps the controller from planning.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, Shared};
use hairpin_planner::ClusterSnapshot;
use hairpin_planner::workloads::{
    DYNAMIC_APIS, DynamicObject as PlannerObject, ReceiverObjects, Workload, slim_template,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::{Cache, Ctx, ErrorSlot, SyncState, feed, optional_versions, slim};

/// How long a reconcile waits for a receiver's ConfigMap that has just been named before it
/// plans without it (its setting then unknown): its watch lists within a second on a
/// healthy API server.
pub const CONFIG_MAP_GRACE: Duration = Duration::from_secs(20);

/// How long a read refused by RBAC waits before it is tried again (a grant may come).
const FORBIDDEN_RETRY: Duration = Duration::from_secs(60);

type Stop = Shared<BoxFuture<'static, ()>>;

/// The receivers' caches.
#[derive(Clone)]
pub(super) struct Receivers {
    deployments: Cache<Deployment>,
    daemon_sets: Cache<DaemonSet>,
    stateful_sets: Cache<StatefulSet>,
    /// The receivers' custom resources, each watched only while its CRD is served: (kind,
    /// `group/version` to name them by, cache).
    objects: Vec<(&'static str, String, Cache<DynamicObject>)>,
    config_maps: ConfigMapWatches,
}

impl Receivers {
    pub(super) fn start(
        client: &kube::Client,
        ctx: &Ctx,
        stop: Stop,
        fixed: BTreeSet<(String, String)>,
    ) -> Self {
        let objects = DYNAMIC_APIS
            .iter()
            .map(|(group, kind, plural, versions)| {
                let resource = |version: &str| {
                    ApiResource::from_gvk_with_plural(
                        &GroupVersionKind::gvk(group, version, kind),
                        plural,
                    )
                };
                let apis = versions
                    .iter()
                    .map(|v| Api::all_with(client.clone(), &resource(v)))
                    .collect();
                let writer = reflector::store::Writer::new(resource(versions[0]));
                let cache = optional_versions(apis, writer, kind, ctx, stop.clone());
                (*kind, format!("{group}/{}", versions[0]), cache)
            })
            .collect();
        Self {
            deployments: readable(
                Api::all(client.clone()),
                "Deployment",
                ctx,
                stop.clone(),
                |d: &mut Deployment| {
                    d.status = None;
                    d.metadata = slim_meta(&d.metadata);
                    if let Some(spec) = d.spec.take() {
                        d.spec = Some(k8s_openapi::api::apps::v1::DeploymentSpec {
                            template: slimmed(spec.template),
                            ..Default::default()
                        });
                    }
                },
            ),
            daemon_sets: readable(
                Api::all(client.clone()),
                "DaemonSet",
                ctx,
                stop.clone(),
                |d: &mut DaemonSet| {
                    d.status = None;
                    d.metadata = slim_meta(&d.metadata);
                    if let Some(spec) = d.spec.take() {
                        d.spec = Some(k8s_openapi::api::apps::v1::DaemonSetSpec {
                            template: slimmed(spec.template),
                            ..Default::default()
                        });
                    }
                },
            ),
            stateful_sets: readable(
                Api::all(client.clone()),
                "StatefulSet",
                ctx,
                stop.clone(),
                |s: &mut StatefulSet| {
                    s.status = None;
                    s.metadata = slim_meta(&s.metadata);
                    if let Some(spec) = s.spec.take() {
                        s.spec = Some(k8s_openapi::api::apps::v1::StatefulSetSpec {
                            template: slimmed(spec.template),
                            ..Default::default()
                        });
                    }
                },
            ),
            objects,
            config_maps: ConfigMapWatches {
                client: client.clone(),
                ctx: ctx.clone(),
                stop,
                fixed,
                watches: Arc::default(),
            },
        }
    }

    /// The caches that must list before the first plan (the ConfigMaps, named later, are
    /// waited for by [`Receivers::follow`]).
    pub(super) fn is_synced(&self) -> bool {
        self.deployments.is_synced()
            && self.daemon_sets.is_synced()
            && self.stateful_sets.is_synced()
            && self.objects.iter().all(|(_, _, c)| c.is_synced())
    }

    pub(super) fn unsynced(&self) -> Vec<super::Unsynced> {
        [
            self.deployments.unsynced(),
            self.daemon_sets.unsynced(),
            self.stateful_sets.unsynced(),
        ]
        .into_iter()
        .chain(self.objects.iter().map(|(_, _, c)| c.unsynced()))
        .flatten()
        .collect()
    }

    pub(super) async fn wait_synced(&self) {
        self.deployments.wait_synced().await;
        self.daemon_sets.wait_synced().await;
        self.stateful_sets.wait_synced().await;
        for (_, _, cache) in &self.objects {
            cache.wait_synced().await;
        }
    }

    /// The workloads the planner reads and the custom resources. Deployments and StatefulSets
    /// only in `namespaces` (those of the load balancers: a receiver is looked for in its
    /// Service's namespace only), so that a reconcile copies few of a large cluster's;
    /// DaemonSets all (they are few, and the native cure follows kube-proxy's and the CNI's,
    /// [`hairpin_planner::native::data_plane`]).
    pub(super) fn objects(&self, namespaces: &BTreeSet<&str>) -> ReceiverObjects {
        let wanted = |kind: &str, meta: &ObjectMeta| {
            kind == "DaemonSet" || namespaces.contains(meta.namespace.as_deref().unwrap_or(""))
        };
        let mut workloads = Vec::new();
        let mut push = |kind: &str, meta: &ObjectMeta, template: Option<&PodTemplateSpec>| {
            if let Some(template) = template.filter(|_| wanted(kind, meta)) {
                workloads.push(Workload {
                    kind: kind.to_owned(),
                    metadata: meta.clone(),
                    template: template.clone(),
                });
            }
        };
        for d in self.deployments.store.state() {
            push(
                "Deployment",
                &d.metadata,
                d.spec.as_ref().map(|s| &s.template),
            );
        }
        for d in self.daemon_sets.store.state() {
            push(
                "DaemonSet",
                &d.metadata,
                d.spec.as_ref().map(|s| &s.template),
            );
        }
        for s in self.stateful_sets.store.state() {
            push(
                "StatefulSet",
                &s.metadata,
                s.spec.as_ref().map(|s| &s.template),
            );
        }
        let objects = self
            .objects
            .iter()
            .flat_map(|(kind, api_version, cache)| {
                cache
                    .store
                    .state()
                    .into_iter()
                    .filter_map(move |object| planner_object(kind, api_version, &object))
            })
            .collect();
        ReceiverObjects { workloads, objects }
    }

    /// The receivers' ConfigMaps cached, for the planner.
    pub(super) fn config_maps(&self) -> Vec<ConfigMap> {
        self.config_maps.objects()
    }

    /// Follows the ConfigMaps the receivers of `snapshot`'s load balancers name: starts a
    /// watch for each new one, stops those no longer named. Returns those named that have not
    /// listed yet (within [`CONFIG_MAP_GRACE`]): a plan made now would miss their setting.
    pub(super) fn follow(&self, snapshot: &ClusterSnapshot) -> Vec<String> {
        let mut wanted = hairpin_planner::receivers::config_maps_read(snapshot);
        let kube_proxy = hairpin_planner::nodes::kube_proxy_config_maps(
            snapshot,
            &self.config_maps.ctx.context.planner,
        );
        wanted.extend(kube_proxy.iter().cloned());
        self.config_maps.follow(wanted, &kube_proxy)
    }
}

/// The metadata a slimmed workload keeps: its name, namespace, uid, resourceVersion and
/// generation (the native cure follows the data plane's DaemonSets by generation), and the
/// labels delivery reads (k3s/RKE2 ServiceLB's `svclb-*` DaemonSets name their Service by
/// label: without them such a VIP would be taken for its provider annotation's proxy).
fn slim_meta(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        generation: meta.generation,
        labels: meta
            .labels
            .as_ref()
            .map(hairpin_planner::delivery::delivery_labels)
            .filter(|labels| !labels.is_empty()),
        ..ObjectMeta::default()
    }
}

/// A kube-proxy ConfigMap as the Nodes' gate reads it: [`slim`], and each key's text cut to
/// its `featureGates:` block ([`hairpin_planner::nodes::feature_gates_only`]; the rest of the
/// configuration file and the kubeconfig are dropped), binary data dropped.
fn slim_kube_proxy(cm: &mut ConfigMap) {
    slim(cm);
    cm.binary_data = None;
    if let Some(data) = &mut cm.data {
        for text in data.values_mut() {
            *text = hairpin_planner::nodes::feature_gates_only(text);
        }
    }
}

fn slimmed(mut template: PodTemplateSpec) -> PodTemplateSpec {
    slim_template(&mut template);
    template
}

/// A cached custom resource as the planner reads it; its type named from its API when the
/// list left it out.
fn planner_object(kind: &str, api_version: &str, object: &DynamicObject) -> Option<PlannerObject> {
    let mut value = serde_json::to_value(object).ok()?;
    value["kind"] = serde_json::Value::from(kind);
    if value
        .get("apiVersion")
        .and_then(serde_json::Value::as_str)
        .is_none_or(str::is_empty)
    {
        value["apiVersion"] = serde_json::Value::from(api_version);
    }
    match ReceiverObjects::dynamic_from_value(value) {
        Ok(object) => Some(object),
        Err(err) => {
            tracing::warn!(kind, error = %err, "skipping an object that does not parse");
            None
        }
    }
}

/// A cache of a kind hairpin's grants may not cover: a refused list counts as listed (empty),
/// is logged once, and is tried again every minute; other errors are retried as every watch's.
fn readable<K>(
    api: Api<K>,
    kind: &'static str,
    ctx: &Ctx,
    stop: Stop,
    trim: impl FnMut(&mut K) + Send + 'static,
) -> Cache<K>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    let wc = watcher::Config::default();
    let (cache, run) = readable_task(api, wc, kind, kind.to_owned(), ctx, trim);
    tokio::spawn(async move {
        tokio::select! {
            () = run => {}
            () = stop => {}
        }
    });
    cache
}

/// The cache and the task that feeds it (see [`readable`]).
fn readable_task<K>(
    api: Api<K>,
    wc: watcher::Config,
    kind: &'static str,
    what: String,
    ctx: &Ctx,
    trim: impl FnMut(&mut K) + Send + 'static,
) -> (Cache<K>, impl Future<Output = ()> + Send + 'static)
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    let (store, writer): (Store<K>, _) = reflector::store();
    let (tx, synced) = watch::channel(SyncState::Pending);
    let error = ErrorSlot::default();
    let served = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let cache = Cache {
        store,
        synced,
        served: served.clone(),
        what: what.clone(),
        error: error.clone(),
    };
    let ctx = ctx.clone();
    let run = async move {
        let refused = Refused {
            what,
            served,
            logged: Arc::default(),
        };
        feed(
            api,
            wc,
            writer,
            trim,
            &tx,
            &ctx,
            &error,
            kind,
            super::watch_error_label,
            Some(&refused),
        )
        .await;
    };
    (cache, run)
}

/// What a [`readable`] cache does when its read is refused.
pub(super) struct Refused {
    what: String,
    /// Cleared while refused.
    served: Arc<std::sync::atomic::AtomicBool>,
    logged: Arc<std::sync::atomic::AtomicBool>,
}

impl Refused {
    /// Marks the cache listed and empty, logs once; how long to wait before trying again.
    pub(super) fn refused(
        &self,
        tx: &watch::Sender<SyncState>,
        ctx: &Ctx,
        err: &dyn std::fmt::Display,
    ) -> Duration {
        use std::sync::atomic::Ordering::Relaxed;
        self.served.store(false, Relaxed);
        if !self.logged.swap(true, Relaxed) {
            tracing::warn!(
                what = %self.what,
                error = %err,
                "cannot read what a load balancer's receiver is read from (forbidden): its PROXY setting is unknown and the annotations decide; grant hairpin get/list/watch on it (the chart grants Deployments, DaemonSets, StatefulSets and the ConfigMaps named in receivers.configMaps)"
            );
        }
        ctx.context.metrics.count_error("api_forbidden");
        if *tx.borrow() == SyncState::Pending {
            tx.send_replace(SyncState::Synced);
            ctx.context.changed.notify_one();
        }
        FORBIDDEN_RETRY
    }

    /// The read works (again).
    pub(super) fn listed(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.served.store(true, Relaxed);
        self.logged.store(false, Relaxed);
    }
}

/// The by-name watches of the receivers' ConfigMaps.
#[derive(Clone)]
struct ConfigMapWatches {
    client: kube::Client,
    ctx: Ctx,
    stop: Stop,
    /// Watched already as one of hairpin's own ConfigMaps (CoreDNS's...): not again.
    fixed: BTreeSet<(String, String)>,
    watches: Arc<Mutex<BTreeMap<(String, String), Watched>>>,
}

struct Watched {
    cache: Cache<ConfigMap>,
    task: tokio::task::AbortHandle,
    since: Instant,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ConfigMapWatches {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Watched>> {
        self.watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn objects(&self) -> Vec<ConfigMap> {
        self.lock()
            .values()
            .flat_map(|w| w.cache.objects())
            .collect()
    }

    /// `kube_proxy`: those of `wanted` that are kube-proxy's ([`slim_kube_proxy`]).
    fn follow(
        &self,
        wanted: Vec<(String, String)>,
        kube_proxy: &[(String, String)],
    ) -> Vec<String> {
        let wanted: BTreeSet<(String, String)> = wanted
            .into_iter()
            .filter(|key| !self.fixed.contains(key))
            .collect();
        let mut watches = self.lock();
        watches.retain(|key, _| wanted.contains(key));
        for (namespace, name) in wanted {
            let key = (namespace, name);
            if watches.contains_key(&key) {
                continue;
            }
            let (namespace, name) = &key;
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
            let wc = watcher::Config::default().fields(&format!("metadata.name={name}"));
            let trim: fn(&mut ConfigMap) = if kube_proxy.contains(&key) {
                slim_kube_proxy
            } else {
                slim
            };
            let (cache, run) = readable_task(
                api,
                wc,
                "ConfigMap",
                format!("ConfigMap {namespace}/{name}"),
                &self.ctx,
                trim,
            );
            let stop = self.stop.clone();
            let task = tokio::spawn(async move {
                tokio::select! {
                    () = run => {}
                    () = stop => {}
                }
            });
            tracing::debug!(config_map = %format!("{namespace}/{name}"), "watching a receiver's ConfigMap");
            watches.insert(
                key.clone(),
                Watched {
                    cache,
                    task: task.abort_handle(),
                    since: Instant::now(),
                },
            );
        }
        watches
            .values()
            .filter(|w| !w.cache.is_synced() && w.since.elapsed() < CONFIG_MAP_GRACE)
            .map(|w| w.cache.what.clone())
            .collect()
    }
}
