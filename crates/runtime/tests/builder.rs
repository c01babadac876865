//! The start-up builder: each failure to start is typed and says what is wrong, and the
//! command's work never runs after one.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hairpin_runtime::logging::{LogArgs, LogFormat};
use hairpin_runtime::{AdminArgs, AdminError, BuildError, Builder, Threads};

fn admin_args(admin_addr: SocketAddr) -> AdminArgs {
    AdminArgs { admin_addr }
}

#[test]
fn an_admin_address_in_use_is_a_typed_error_naming_it() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind a port to take");
    let addr = taken.local_addr().expect("addr");
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let result: Result<(), BuildError> = Builder::new()
        .with_admin(&admin_args(addr))
        .build()
        .expect("nothing to check before the runtime")
        .run(|_| async move {
            flag.store(true, Ordering::SeqCst);
            Ok(())
        });
    let err = result.expect_err("the admin address is in use");
    assert!(
        matches!(&err, BuildError::Admin(AdminError::Bind { addr: bound, .. }) if *bound == addr),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&format!("cannot listen on admin address {addr}"))
            && message.contains("in use"),
        "{message}"
    );
    assert!(
        !ran.load(Ordering::SeqCst),
        "the command ran without its admin server"
    );
}

#[test]
fn a_bad_log_filter_fails_the_build_naming_the_flag() {
    let log = LogArgs {
        log_format: LogFormat::Text,
        log_level: "hairpin=loud".into(),
    };
    let err = Builder::new()
        .with_log(&log)
        .build()
        .expect_err("the filter does not parse");
    assert!(matches!(err, BuildError::Log(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("invalid --log-level \"hairpin=loud\""),
        "{message}"
    );
}

#[derive(Debug, thiserror::Error)]
#[error("cannot read kubeconfig /nowhere: no such file")]
struct NoKubeconfig;

#[test]
fn a_client_that_cannot_be_built_is_a_client_error_with_its_message() {
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let result: Result<(), BuildError> = Builder::new()
        .with_threads(Threads::Multi { workers: 1 })
        .with_admin(&admin_args("127.0.0.1:0".parse().expect("addr")))
        .with_client(async { Err::<(), _>(NoKubeconfig) })
        .build()
        .expect("build")
        .run(|_| async move {
            flag.store(true, Ordering::SeqCst);
            Ok(())
        });
    let err = result.expect_err("no client");
    assert!(matches!(err, BuildError::Client(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "cannot read kubeconfig /nowhere: no such file"
    );
    assert!(!ran.load(Ordering::SeqCst));
}

#[test]
fn the_command_gets_its_client_and_an_optional_one_only_when_asked_for() {
    let got: Result<(u32, Option<u32>), BuildError> = Builder::new()
        .with_client(async { Ok::<_, NoKubeconfig>(7) })
        .build()
        .expect("build")
        .run(|started| async move { Ok((started.client, None)) });
    assert_eq!(got.expect("run"), (7, None));
    let none: Option<std::future::Ready<Result<u32, NoKubeconfig>>> = None;
    let got: Result<Option<u32>, BuildError> = Builder::new()
        .with_optional_client(none)
        .build()
        .expect("build")
        .run(|started| async move { Ok(started.client) });
    assert_eq!(got.expect("run"), None);
}

#[test]
fn on_exit_runs_after_the_work_and_the_work_result_is_returned() {
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (work, exit) = (order.clone(), order.clone());
    let result: Result<&str, BuildError> = Builder::new()
        .build()
        .expect("build")
        .on_exit(move || exit.lock().expect("lock").push("exit"))
        .run(|_| async move {
            work.lock().expect("lock").push("work");
            Ok("done")
        });
    assert_eq!(result.expect("run"), "done");
    assert_eq!(*order.lock().expect("lock"), ["work", "exit"]);
}

#[test]
fn the_admin_server_serves_the_commands_metrics_and_readiness() {
    use prometheus_client::metrics::counter::Counter;

    let served: Result<(String, String, String), BuildError> = Builder::new()
        .with_admin(&admin_args("127.0.0.1:0".parse().expect("addr")))
        .build()
        .expect("build")
        .run(|mut started| async move {
            let requests = Counter::<u64>::default();
            started
                .registry
                .register("test_requests", "Requests of the test", requests.clone());
            requests.inc_by(3);
            let addr = started.admin.local_addr();
            let loaded = started.admin.condition("routes loaded");
            let _admin = started.admin.serve(started.registry);
            let get = move |path: &'static str| {
                tokio::task::spawn_blocking(move || {
                    hairpin_testkit::http_get(addr, "test", path).expect("GET")
                })
            };
            let waiting = get("/readyz").await.expect("join").1;
            loaded.set(true);
            let ready = get("/readyz").await.expect("join").1;
            let metrics = get("/metrics").await.expect("join").1;
            Ok((waiting, ready, metrics))
        });
    let (waiting, ready, metrics) = served.expect("run");
    assert_eq!(waiting, "not ready: waiting for routes loaded\n");
    assert_eq!(ready, "ready\n");
    assert!(metrics.contains("test_requests_total 3"), "{metrics}");
    assert!(metrics.contains("hairpin_build_info{"), "{metrics}");
}
