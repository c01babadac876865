//! `watch_configmap_key`: what a reader (a proxy replica, a node agent) sees of the one
//! ConfigMap it follows.

use std::time::Duration;

use futures::StreamExt;
use hairpin_fake_apiserver::{FakeApiServer, object};
use hairpin_runtime::configmap::{KeyUpdate, watch_configmap_key};
use serde_json::json;

fn routes(table: &str) -> serde_json::Value {
    object(
        "v1",
        "ConfigMap",
        Some("hairpin"),
        "hairpin-routes",
        json!({"data": {"routes.json": table}}),
    )
}

async fn next(stream: &mut (impl futures::Stream<Item = KeyUpdate> + Unpin)) -> KeyUpdate {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("an update in time")
        .expect("the stream never ends")
}

#[tokio::test]
async fn the_stream_reports_the_table_its_changes_and_its_absence() {
    let fake = FakeApiServer::start().await;
    // Another ConfigMap in the namespace is not ours.
    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("hairpin"),
        "other",
        json!({"data": {"routes.json": "nope"}}),
    ));
    let mut stream = Box::pin(watch_configmap_key(
        fake.client(),
        "hairpin",
        "hairpin-routes",
        "routes.json",
    ));
    assert_eq!(
        next(&mut stream).await,
        KeyUpdate::Missing,
        "not written yet"
    );

    fake.apply(routes("[1]"));
    assert_eq!(
        next(&mut stream).await,
        KeyUpdate::Present(Some("[1]".into()))
    );
    fake.apply(routes("[2]"));
    assert_eq!(
        next(&mut stream).await,
        KeyUpdate::Present(Some("[2]".into()))
    );

    // The watch drops and history is compacted: 410, re-list, current state again.
    fake.compact();
    fake.drop_watches();
    fake.apply(routes("[3]"));
    assert_eq!(
        next(&mut stream).await,
        KeyUpdate::Present(Some("[3]".into()))
    );

    // API errors on the re-list are retried.
    fake.fail_next("GET", "/configmaps", 2, 500);
    fake.drop_watches();
    fake.delete("v1", "ConfigMap", Some("hairpin"), "hairpin-routes");
    let mut last = next(&mut stream).await;
    while last != KeyUpdate::Missing {
        last = next(&mut stream).await;
    }
    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("hairpin"),
        "hairpin-routes",
        json!({"data": {}}),
    ));
    assert_eq!(
        next(&mut stream).await,
        KeyUpdate::Present(None),
        "present, without the key"
    );

    // Only that object was asked for: every list and watch names it.
    let reads: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.uri.contains("/configmaps"))
        .map(|r| r.uri)
        .collect();
    assert!(!reads.is_empty());
    for uri in &reads {
        assert!(
            uri.contains("fieldSelector=metadata.name%3Dhairpin-routes"),
            "{uri}"
        );
    }
}
