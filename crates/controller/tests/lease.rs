//! Leader election between two instances on one fake API server.

use std::time::{Duration, Instant};

use hairpin_controller::lease::{Leadership, LeaseManager, LeaseParams};
use hairpin_fake_apiserver::FakeApiServer;
use tokio::sync::{oneshot, watch};

fn params(identity: &str) -> LeaseParams {
    LeaseParams {
        duration: Duration::from_secs(3),
        renew_interval: Duration::from_millis(300),
        retry_interval: Duration::from_millis(100),
        ..LeaseParams::new("hairpin", "hairpin-controller", identity)
    }
}

struct Candidate {
    rx: watch::Receiver<Leadership>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

fn start(fake: &FakeApiServer, identity: &str) -> Candidate {
    fake.create_namespace("hairpin");
    let (tx, rx) = watch::channel(Leadership::Follower(None));
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let manager = LeaseManager::new(fake.client(), params(identity));
    let task = tokio::spawn(manager.run(
        tx,
        async move {
            let _ = stop_rx.await;
        },
        |_| {},
    ));
    Candidate {
        rx,
        stop: Some(stop_tx),
        task,
    }
}

async fn wait_leader(rx: &mut watch::Receiver<Leadership>, within: Duration) -> Duration {
    let started = Instant::now();
    tokio::time::timeout(within, rx.wait_for(Leadership::is_leader))
        .await
        .expect("became leader in time")
        .expect("manager alive");
    started.elapsed()
}

fn lease(fake: &FakeApiServer) -> Option<serde_json::Value> {
    fake.get(
        "coordination.k8s.io/v1",
        "Lease",
        Some("hairpin"),
        "hairpin-controller",
    )
}

fn holder(fake: &FakeApiServer) -> Option<String> {
    lease(fake).and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
}

#[tokio::test]
async fn one_leader_and_a_fast_hand_over_when_it_vacates() {
    let fake = FakeApiServer::start().await;
    let mut a = start(&fake, "pod-a");
    wait_leader(&mut a.rx, Duration::from_secs(5)).await;
    let mut b = start(&fake, "pod-b");
    // b stays a follower while a renews (well past one lease duration): the renewals are seen
    // in the Lease, so the window cannot pass merely because little happened in it.
    let renewed = lease(&fake).unwrap()["spec"]["renewTime"].clone();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_ne!(
        lease(&fake).unwrap()["spec"]["renewTime"],
        renewed,
        "a renewed the Lease meanwhile"
    );
    assert!(a.rx.borrow().is_leader());
    assert_eq!(*b.rx.borrow(), Leadership::Follower(Some("pod-a".into())));
    assert_eq!(holder(&fake).as_deref(), Some("pod-a"));

    // a shuts down: it vacates the Lease and b takes over without waiting for expiry.
    a.stop.take().unwrap().send(()).unwrap();
    a.task.await.unwrap();
    assert_eq!(holder(&fake), None, "the Lease was vacated");
    // The vacated Lease is the check; how soon b took it is a figure (the deadline only
    // catches a hang).
    let hand_over = wait_leader(&mut b.rx, Duration::from_secs(30)).await;
    println!("figure: leader hand-over after a clean shutdown: {hand_over:?} (lease duration 3s)");
    assert_eq!(holder(&fake).as_deref(), Some("pod-b"));
    assert_eq!(lease(&fake).unwrap()["spec"]["leaseTransitions"], 1);
    let meta = &lease(&fake).unwrap()["metadata"];
    assert_eq!(meta["labels"]["app.kubernetes.io/managed-by"], "hairpin");
    assert_eq!(
        meta["annotations"]["hairpin.io/created-by"], "hairpin",
        "the Lease hairpin created carries its marks: {meta}"
    );
    b.stop.take().unwrap().send(()).unwrap();
    b.task.await.unwrap();
}

#[tokio::test]
async fn a_crashed_leader_is_replaced_after_the_lease_expires() {
    let fake = FakeApiServer::start().await;
    let mut a = start(&fake, "pod-a");
    wait_leader(&mut a.rx, Duration::from_secs(5)).await;
    let mut b = start(&fake, "pod-b");
    // b has seen a's Lease (a follower of pod-a) before a crashes.
    tokio::time::timeout(
        Duration::from_secs(10),
        b.rx.wait_for(|l| *l == Leadership::Follower(Some("pod-a".into()))),
    )
    .await
    .expect("b follows pod-a")
    .expect("manager alive");
    // A crash: no vacate.
    a.task.abort();
    let took = wait_leader(&mut b.rx, Duration::from_secs(6)).await;
    println!("take-over after a crashed leader: {took:?} (lease duration 3s)");
    assert!(
        took >= Duration::from_secs(2),
        "took over before the lease could expire: {took:?}"
    );
    drop(b.stop.take());
    b.task.await.unwrap();
}

#[tokio::test]
async fn api_errors_do_not_end_the_election() {
    let fake = FakeApiServer::start().await;
    fake.fail_next("GET", "/leases/hairpin-controller", 3, 500);
    fake.fail_next("POST", "/leases", 1, 403);
    let mut a = start(&fake, "pod-a");
    wait_leader(&mut a.rx, Duration::from_secs(5)).await;
    assert_eq!(holder(&fake).as_deref(), Some("pod-a"));
    a.stop.take().unwrap().send(()).unwrap();
    a.task.await.unwrap();
}

#[tokio::test]
async fn a_vacant_lease_with_an_odd_transition_count_is_still_taken() {
    let fake = FakeApiServer::start().await;
    fake.create_namespace("hairpin");
    for transitions in [i32::MAX, -5] {
        fake.apply(serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": "hairpin-controller",
                "namespace": "hairpin",
                "labels": {"app.kubernetes.io/managed-by": "hairpin"},
                "annotations": {"hairpin.io/created-by": "hairpin"},
            },
            "spec": {"holderIdentity": "", "leaseTransitions": transitions},
        }));
        let mut a = start(&fake, "pod-a");
        wait_leader(&mut a.rx, Duration::from_secs(5)).await;
        let count = lease(&fake).unwrap()["spec"]["leaseTransitions"].as_i64();
        assert!(
            count.is_some_and(|c| c >= 0),
            "leaseTransitions {count:?} after {transitions}: the API server refuses a negative one"
        );
        a.stop.take().unwrap().send(()).unwrap();
        a.task.await.unwrap();
    }
}
