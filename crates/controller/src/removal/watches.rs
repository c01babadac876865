//! The guard's watches: one per held object and one on the namespace, each on its name
//! (`metadata.name`, which RBAC's `resourceNames` authorizes). They cost nothing while nothing
//! changes and bring a deletion at once; every change pokes the guard, which then looks.

use std::sync::Arc;

use futures::stream::BoxStream;
use futures::{StreamExt, future};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::RemovalParams;
use super::held::Held;

/// The watches, stopped when dropped.
pub(crate) struct Watches(JoinHandle<()>);

impl Drop for Watches {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One watch on the object `name` of `api`, as a stream of its changes (errors logged: the
/// watch is retried with kube-runtime's backoff, so a watch the RBAC of an older chart refuses
/// costs a request every 30 s at most).
fn on_name<K>(api: Api<K>, name: &str) -> BoxStream<'static, ()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let what = name.to_owned();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            future::ready(match event {
                Ok(_) => Some(()),
                Err(err) => {
                    tracing::debug!(error = %err, object = %what, "removal guard: a watch failed; retrying");
                    None
                }
            })
        })
        .boxed()
}

/// Starts the watches; each change pokes `poke`.
pub(crate) fn start(client: &kube::Client, p: &RemovalParams, poke: Arc<Notify>) -> Watches {
    let mut streams: Vec<BoxStream<'static, ()>> = Held::ALL
        .iter()
        .map(|held| on_name(held.api(client, p), held.at(p).1))
        .collect();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    streams.push(on_name(namespaces, &p.namespace));
    // Not the Lease: its leader renews it every few seconds. `hairpin uninstall`'s fence is
    // read at each look; its release of the holds is a change of the held objects.
    let all = futures::stream::select_all(streams);
    Watches(tokio::spawn(all.for_each(move |()| {
        poke.notify_one();
        future::ready(())
    })))
}
