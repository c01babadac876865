//! Following one key of one ConfigMap, by name: how the proxies read the routes the controller
//! publishes, and the node agents the hosts block.
//!
//! One watch per reader, with a `metadata.name` field selector, so RBAC can limit the reader to
//! that object with `resourceNames` (list and watch are authorized by name only with that
//! selector), and the API server sends it nothing else.

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

/// What a reader learns about the watched ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyUpdate {
    /// The ConfigMap exists; the value of the key (`None` when the key is absent).
    Present(Option<String>),
    /// The ConfigMap does not exist (not written yet, or deleted).
    Missing,
}

/// Watches `namespace/name` (a kube watcher by field selector, with the default backoff, so API
/// errors and dropped watches are retried and never end the stream) and yields the value of
/// `key`: the current state first, once the initial list is done, then every change.
pub fn watch_configmap_key(
    client: kube::Client,
    namespace: &str,
    name: &str,
    key: &str,
) -> impl Stream<Item = KeyUpdate> + Send + 'static {
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
                    Some(KeyUpdate::Present(value_of(&cm, &key)))
                }
                Ok(Event::InitDone) => (!seen_in_list).then_some(KeyUpdate::Missing),
                Ok(Event::Apply(cm)) => Some(KeyUpdate::Present(value_of(&cm, &key))),
                Ok(Event::Delete(_)) => Some(KeyUpdate::Missing),
                Err(err) => {
                    tracing::warn!(configmap = %what, error = %err, "watching the ConfigMap failed; retrying with backoff");
                    None
                }
            };
            futures::future::ready(update)
        })
}

fn value_of(cm: &ConfigMap, key: &str) -> Option<String> {
    cm.data.as_ref().and_then(|data| data.get(key)).cloned()
}
