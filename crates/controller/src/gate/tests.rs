use std::time::{Duration, Instant};

use hairpin_fake_apiserver::{FakeApiServer, Fault, FaultKind};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;

use super::{WriteGate, is_withheld};

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn writes_go_out_only_until_the_gate_expires_and_reads_always() {
    let fake = FakeApiServer::start().await;
    let gate = WriteGate::closed();
    let api: Api<ConfigMap> = Api::namespaced(gate.client(fake.client()), "default");
    let refused = api.create(&PostParams::default(), &config_map("a")).await;
    assert!(
        refused.is_err_and(|err| is_withheld(&err)),
        "closed: withheld"
    );
    assert_eq!(fake.count("POST", "/configmaps"), 0, "nothing was sent");

    gate.open_until(Instant::now() + Duration::from_millis(300));
    api.create(&PostParams::default(), &config_map("b"))
        .await
        .expect("open: written");
    tokio::time::sleep(Duration::from_millis(350)).await;
    // Past the point where another holder could take the Lease: nothing goes out.
    let late = api.create(&PostParams::default(), &config_map("c")).await;
    assert!(late.is_err_and(|err| is_withheld(&err)));
    assert_eq!(fake.count("POST", "/configmaps"), 1);
    // Reads are never held back.
    assert!(api.get_opt("b").await.unwrap().is_some());
}

#[tokio::test]
async fn closing_waits_for_the_writes_under_way() {
    let fake = FakeApiServer::start().await;
    fake.inject(Fault {
        method: Some("POST".into()),
        path_contains: "/configmaps".into(),
        remaining: 1,
        kind: FaultKind::Delay(Duration::from_millis(300)),
    });
    let gate = WriteGate::always_open();
    let api: Api<ConfigMap> = Api::namespaced(gate.client(fake.client()), "default");
    let write = tokio::spawn(async move {
        api.create(&PostParams::default(), &config_map("slow"))
            .await
    });
    // The write is under way once it holds the gate's in-flight lock.
    let deadline = Instant::now() + Duration::from_secs(10);
    while gate.inner.in_flight.try_write().is_ok() {
        assert!(Instant::now() < deadline, "the write never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    gate.close().await;
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "close returned while a write was under way"
    );
    assert!(write.is_finished(), "the write under way finished first");
    write
        .await
        .unwrap()
        .expect("a write under way is not cut off");
    assert!(!gate.is_open());
}
