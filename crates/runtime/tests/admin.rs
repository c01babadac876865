//! The admin server over real HTTP on loopback.

use std::net::SocketAddr;
use std::sync::Arc;

use hairpin_runtime::{AdminError, AdminServer, Readiness, Shutdown};
use hairpin_testkit::http_get;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let (status, body) = http_get(addr, "test", path).expect("GET from the admin server");
    let code = status
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("status code in {status:?}"));
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn livez_readyz_metrics_and_drain() {
    let mut registry = Registry::default();
    let requests = Counter::<u64>::default();
    registry.register(
        "test_requests",
        "Requests seen by the test",
        requests.clone(),
    );
    requests.inc_by(7);

    let readiness = Readiness::new();
    let listeners = readiness.condition("listeners");
    let routes = readiness.condition("routes");
    let shutdown = Shutdown::new();
    let server = AdminServer::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind");
    let addr = server.local_addr();
    let serving =
        tokio::spawn(server.serve(Arc::new(registry), readiness.clone(), shutdown.clone()));

    let check = move |path: &'static str| tokio::task::spawn_blocking(move || get(addr, path));
    assert_eq!(
        check("/livez").await.expect("join"),
        (200, "ok\n".to_owned())
    );

    let (status, body) = check("/readyz").await.expect("join");
    assert_eq!(status, 503);
    assert_eq!(body, "not ready: waiting for listeners, routes\n");
    listeners.set(true);
    assert_eq!(
        check("/readyz").await.expect("join").1,
        "not ready: waiting for routes\n"
    );
    routes.set(true);
    assert_eq!(
        check("/readyz").await.expect("join"),
        (200, "ready\n".to_owned())
    );

    let (status, metrics) = check("/metrics").await.expect("join");
    assert_eq!(status, 200);
    assert!(metrics.contains("test_requests_total 7"), "{metrics}");
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");

    assert_eq!(check("/nope").await.expect("join").0, 404);

    shutdown.trigger();
    assert_eq!(
        check("/readyz").await.expect("join"),
        (503, "draining\n".to_owned())
    );
    assert_eq!(
        check("/livez").await.expect("join").0,
        200,
        "still alive while draining"
    );

    shutdown.force();
    tokio::time::timeout(std::time::Duration::from_secs(5), serving)
        .await
        .expect("server stops when forced")
        .expect("join");
}

#[tokio::test]
async fn busy_admin_port_names_the_address() {
    let first = AdminServer::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind");
    let addr = first.local_addr();
    let err = AdminServer::bind(addr)
        .await
        .expect_err("second bind must fail");
    assert!(matches!(err, AdminError::Bind { .. }));
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    assert_eq!(err.metric_label(), "admin_bind");
}
