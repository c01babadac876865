//! The fake API server answers like kube-apiserver, seen through a real `kube::Client`.

use std::time::Duration;

use futures::StreamExt;
use hairpin_fake_apiserver::{FakeApiServer, object};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

fn cm(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(object(
        "v1",
        "ConfigMap",
        Some("kube-system"),
        name,
        json!({"data": {"k": value}}),
    ))
    .unwrap()
}

fn api_status(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API status, got {other:?}"),
    }
}

fn resource_version(object: &ConfigMap) -> u64 {
    object
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn verbs_answer_with_the_real_servers_status_codes_and_bodies() {
    let fake = FakeApiServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "kube-system");

    let missing = api_status(api.get("coredns").await.unwrap_err());
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "configmaps \"coredns\" not found");

    let created = api
        .create(&PostParams::default(), &cm("coredns", "a"))
        .await
        .unwrap();
    let rv1 = resource_version(&created);
    assert!(created.metadata.uid.is_some());

    let again = api_status(
        api.create(&PostParams::default(), &cm("coredns", "a"))
            .await
            .unwrap_err(),
    );
    assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));

    let mut update = created.clone();
    update.data = Some([("k".to_string(), "b".to_string())].into());
    let updated = api
        .replace("coredns", &PostParams::default(), &update)
        .await
        .unwrap();
    let rv2 = resource_version(&updated);
    assert!(rv2 > rv1, "resourceVersion increases");

    // `update` still carries rv1: stale.
    let stale = api_status(
        api.replace("coredns", &PostParams::default(), &update)
            .await
            .unwrap_err(),
    );
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert!(
        stale.message.contains("the object has been modified"),
        "{}",
        stale.message
    );

    let patched = api
        .patch(
            "coredns",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"extra": "x"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["extra"], "x");

    api.create(&PostParams::default(), &cm("other", "z"))
        .await
        .unwrap();
    let selected = api
        .list(&ListParams::default().fields("metadata.name=other"))
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 1);
    let paged = api.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(paged.items.len(), 1);
    assert!(
        paged.metadata.continue_.is_some(),
        "a page of 1 of 2 has a continue token"
    );

    api.delete("coredns", &DeleteParams::default())
        .await
        .unwrap();
    let gone = api_status(
        api.delete("coredns", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(gone.code, 404);

    // An API group that is not installed answers 404 like a missing CRD.
    let gateways: Api<gateway_api::gateways::Gateway> = Api::all(fake.client());
    let absent = api_status(gateways.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(absent.code, 404);
}

#[tokio::test]
async fn watches_stream_changes_and_relist_after_410_gone() {
    let fake = FakeApiServer::start().await;
    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("kube-system"),
        "coredns",
        json!({"data": {"k": "1"}}),
    ));
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "kube-system");
    let mut events = watcher::watcher(
        api,
        watcher::Config::default().fields("metadata.name=coredns"),
    )
    .boxed();

    let mut saw_init_apply = false;
    while let Some(event) = events.next().await {
        match event.unwrap() {
            watcher::Event::InitApply(_) => saw_init_apply = true,
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert!(saw_init_apply);

    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("kube-system"),
        "coredns",
        json!({"data": {"k": "2"}}),
    ));
    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("kube-system"),
        "unrelated",
        json!({"data": {"k": "x"}}),
    ));
    let next = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let watcher::Event::Apply(cm) = next else {
        panic!("expected Apply, got {next:?}")
    };
    assert_eq!(cm.data.unwrap()["k"], "2");

    // Drop the watch and compact: resuming gets 410 Expired, the watcher re-lists.
    fake.compact();
    fake.drop_watches();
    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("kube-system"),
        "coredns",
        json!({"data": {"k": "3"}}),
    ));
    let mut relisted = false;
    let mut gone_seen = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        let Ok(Some(event)) = tokio::time::timeout(Duration::from_secs(5), events.next()).await
        else {
            break;
        };
        match event {
            Err(err) => {
                gone_seen |= format!("{err:?}").contains("410");
            }
            Ok(watcher::Event::InitApply(cm)) => {
                assert_eq!(cm.data.unwrap()["k"], "3");
                relisted = true;
            }
            Ok(watcher::Event::InitDone) if relisted => break,
            Ok(_) => {}
        }
    }
    assert!(gone_seen, "the resumed watch got 410 Expired");
    assert!(relisted, "the watcher re-listed after 410");
}

#[tokio::test]
async fn injected_faults_answer_then_clear_and_the_client_retries_throttling() {
    let fake = FakeApiServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "kube-system");
    for code in [500u16, 403, 409] {
        fake.fail_next("GET", "/configmaps/x", 1, code);
        let status = api_status(api.get("x").await.unwrap_err());
        assert_eq!(status.code, code);
    }
    // kube-client retries 429/503/504 by itself (with backoff): the fault is absorbed.
    for code in [429u16, 503] {
        let before = fake.count("GET", "/configmaps/x");
        fake.fail_next("GET", "/configmaps/x", 1, code);
        assert_eq!(api_status(api.get("x").await.unwrap_err()).code, 404);
        assert_eq!(
            fake.count("GET", "/configmaps/x") - before,
            2,
            "one failed attempt, one retry"
        );
    }
    assert_eq!(
        api_status(api.get("x").await.unwrap_err()).code,
        404,
        "faults are used up"
    );
}

#[tokio::test]
async fn delete_preconditions_are_checked() {
    let fake = FakeApiServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "kube-system");
    let created = api
        .create(&PostParams::default(), &cm("custom", "a"))
        .await
        .unwrap();
    let stale = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: Some("1".into()),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    let conflict = api_status(api.delete("custom", &stale).await.unwrap_err());
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert!(
        conflict.message.contains("Precondition failed"),
        "{}",
        conflict.message
    );
    let fresh = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: created.metadata.resource_version,
            uid: None,
        }),
        ..DeleteParams::default()
    };
    api.delete("custom", &fresh).await.unwrap();
    assert!(
        fake.get("v1", "ConfigMap", Some("kube-system"), "custom")
            .is_none()
    );
}

#[tokio::test]
async fn a_watcher_lists_large_collections_page_by_page() {
    let fake = FakeApiServer::start().await;
    fake.apply_many((0..1200).map(|i| {
        object(
            "v1",
            "ConfigMap",
            Some("big"),
            &format!("cm-{i:04}"),
            json!({"data": {"k": "v"}}),
        )
    }));
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "big");
    let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
    let mut listed = 0;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .unwrap()
    {
        match event.unwrap() {
            watcher::Event::InitApply(_) => listed += 1,
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(listed, 1200);
    let pages = fake.count("GET", "/namespaces/big/configmaps?");
    assert!(pages >= 3, "pages of 500: {pages}");
}

/// The server goes down (connections refused, open watches cut) and comes back on the same
/// address with its history compacted: a watch resumed from before gets 410 Gone, as after a
/// kube-apiserver restart over a compacted etcd.
#[tokio::test]
async fn the_server_goes_down_and_comes_back_with_compacted_history() {
    let fake = FakeApiServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "kube-system");
    let created = api
        .create(&PostParams::default(), &cm("before", "1"))
        .await
        .unwrap();
    let rv = resource_version(&created);
    let mut stream = api
        .watch(&kube::api::WatchParams::default(), &rv.to_string())
        .await
        .unwrap()
        .boxed();

    // A change after that resourceVersion, then the outage: history is compacted past it.
    api.create(&PostParams::default(), &cm("later", "2"))
        .await
        .unwrap();
    fake.go_down();
    assert!(!fake.is_up());
    // The open watch ends, and nothing answers.
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = stream.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "the open watch was cut");
    let refused = api.get("before").await;
    assert!(
        matches!(refused, Err(ref err) if !matches!(err, kube::Error::Api(_))),
        "no API answer while down: {refused:?}"
    );

    fake.come_back(true);
    assert!(fake.is_up());
    assert_eq!(
        api.get("before").await.unwrap().data,
        created.data,
        "the store is kept"
    );
    let mut resumed = api
        .watch(&kube::api::WatchParams::default(), &rv.to_string())
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(Duration::from_secs(5), resumed.next()).await {
        Ok(Some(Ok(kube::api::WatchEvent::Error(status)))) => assert_eq!(status.code, 410),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}
