//! A route table source that follows the ConfigMap the controller publishes the routes in
//! (`hairpin proxy --routes-configmap`), through the watch of
//! [`hairpin_runtime::configmap::watch_configmap_key`].

use futures::{Stream, StreamExt as _};
use hairpin_runtime::ReadyCondition;
use hairpin_runtime::configmap::KeyUpdate;
use tokio::sync::watch;

use crate::routes::RouteTable;

/// Feeds the routes the controller publishes into the proxy. The first update (even "no such
/// ConfigMap yet") makes the proxy ready (`loaded`); a table that does not parse is logged and
/// ignored, so a bad write never drops the routes that work. `source` (`NAMESPACE/NAME`) names
/// the ConfigMap in logs. Ends when `updates` ends or nobody receives the routes any more.
pub async fn follow(
    updates: impl Stream<Item = KeyUpdate>,
    source: String,
    routes: watch::Sender<RouteTable>,
    loaded: ReadyCondition,
) {
    let mut updates = std::pin::pin!(updates);
    while let Some(update) = updates.next().await {
        let Some(table) = table_of(update, &source) else {
            continue;
        };
        tracing::info!(configmap = %source, routes = table.len(), "routes loaded from ConfigMap");
        if routes.send(table).is_err() {
            return;
        }
        loaded.set(true);
    }
}

/// The table an update holds: `None` (logged) for one that does not parse.
fn table_of(update: KeyUpdate, source: &str) -> Option<RouteTable> {
    match update {
        // A ConfigMap without the key holds no routes.
        KeyUpdate::Present(json) => {
            match RouteTable::from_json(json.as_deref().unwrap_or("[]").as_bytes()) {
                Ok(table) => Some(table),
                Err(err) => {
                    tracing::warn!(configmap = %source, error = %err, "invalid routes table; keeping the current routes");
                    None
                }
            }
        }
        KeyUpdate::Missing => {
            tracing::info!(configmap = %source, "routes ConfigMap not found: no routes until the controller writes it");
            match RouteTable::new(Vec::new()) {
                Ok(table) => Some(table),
                Err(err) => {
                    tracing::warn!(error = %err, "cannot build an empty route table");
                    None
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE_ROUTE: &str = r#"[{"name": "web", "listen": "127.0.0.1:10080", "upstream": "127.0.0.1:80", "proxy_protocol": "v1"}]"#;

    #[tokio::test]
    async fn tables_follow_the_configmap_and_a_bad_one_keeps_the_last_good() {
        let readiness = hairpin_runtime::Readiness::new();
        let loaded = readiness.condition("routes loaded");
        let (tx, mut rx) = watch::channel(RouteTable::new(Vec::new()).unwrap());
        let updates = futures::stream::iter(vec![
            KeyUpdate::Missing,
            KeyUpdate::Present(Some(ONE_ROUTE.to_owned())),
            KeyUpdate::Present(Some("not json".to_owned())),
        ]);
        let mut seen = Vec::new();
        let follower = tokio::spawn(follow(updates, "hairpin/routes".into(), tx, loaded));
        while rx.changed().await.is_ok() {
            seen.push(rx.borrow_and_update().len());
        }
        follower.await.unwrap();
        // The missing ConfigMap (no routes), then the route; the invalid table changes nothing.
        assert_eq!(seen.last(), Some(&1), "{seen:?}");
        assert_eq!(rx.borrow().len(), 1);
        assert!(
            readiness.is_ready(),
            "the first update makes the proxy ready"
        );
    }

    #[test]
    fn a_configmap_without_the_key_holds_no_routes() {
        let table = table_of(KeyUpdate::Present(None), "hairpin/routes").unwrap();
        assert_eq!(table.len(), 0);
    }
}
