//! The proxy route table as published in-cluster: a ConfigMap (`hairpin-routes`, key
//! `routes.json`) in our namespace that the controller writes and every proxy replica watches.

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

/// What a proxy learns from the routes ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoutesUpdate {
    /// The ConfigMap exists; this is the text under the routes key (a JSON list of routes,
    /// `[]` when the key is absent).
    Table(String),
    /// The ConfigMap does not exist (not yet written, or deleted by `hairpin uninstall`).
    Missing,
}

/// Watches one routes ConfigMap (a kube watcher by field selector, with the default backoff,
/// so API errors and dropped watches are retried and never end the stream). Yields the
/// current state first (once the initial list is done), then every change.
///
/// The proxy should report ready only after the first [`RoutesUpdate::Table`].
pub fn watch_routes_configmap(
    client: kube::Client,
    namespace: &str,
    name: &str,
    key: &str,
) -> impl Stream<Item = RoutesUpdate> + Send + 'static {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let key = key.to_owned();
    let what = format!("{namespace}/{name}");
    // During a (re-)list, remember whether the ConfigMap was seen, so a ConfigMap deleted
    // while the watch was down is reported as missing when the list ends.
    let mut seen_in_list = false;
    watcher::watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            let update = match event {
                Ok(Event::Init) => {
                    seen_in_list = false;
                    None
                }
                Ok(Event::InitApply(cm)) => {
                    seen_in_list = true;
                    Some(RoutesUpdate::Table(table_of(&cm, &key)))
                }
                Ok(Event::InitDone) => (!seen_in_list).then_some(RoutesUpdate::Missing),
                Ok(Event::Apply(cm)) => Some(RoutesUpdate::Table(table_of(&cm, &key))),
                Ok(Event::Delete(_)) => Some(RoutesUpdate::Missing),
                Err(err) => {
                    tracing::warn!(configmap = %what, error = %err, "watching the routes ConfigMap failed; retrying with backoff");
                    None
                }
            };
            futures::future::ready(update)
        })
}

fn table_of(cm: &ConfigMap, key: &str) -> String {
    cm.data
        .as_ref()
        .and_then(|data| data.get(key))
        .cloned()
        .unwrap_or_else(|| "[]".to_owned())
}
