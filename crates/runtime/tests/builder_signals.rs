//! The builder's signal handlers: SIGTERM starts the drain the command's task waits on, and
//! `/readyz` fails from then on; a second SIGTERM forces. Its own test binary, since the
//! signals go to the whole process.

use std::net::SocketAddr;
use std::time::Duration;

use hairpin_runtime::{AdminArgs, BuildError, Builder, Threads};
use hairpin_testkit::http_get;
use rustix::process::{Signal, getpid, kill_process};

/// Only catches a hang: the signal arrives in microseconds.
const HANG: Duration = Duration::from_secs(60);

async fn get(addr: SocketAddr, path: &'static str) -> (String, String) {
    tokio::task::spawn_blocking(move || http_get(addr, "test", path).expect("GET"))
        .await
        .expect("join")
}

#[test]
fn sigterm_drains_the_task_and_a_second_one_forces() {
    let admin = AdminArgs {
        admin_addr: "127.0.0.1:0".parse().expect("addr"),
    };
    let result: Result<(bool, bool), BuildError> = Builder::new()
        .with_threads(Threads::Multi { workers: 2 })
        .with_admin(&admin)
        .build()
        .expect("build")
        .run(|started| async move {
            let addr = started.admin.local_addr();
            let ready = started.admin.condition("work started");
            let _admin = started.admin.serve(started.registry);
            let shutdown = started.shutdown;
            assert_eq!(
                get(addr, "/readyz").await.1,
                "not ready: waiting for work started\n"
            );
            ready.set(true);
            assert_eq!(get(addr, "/readyz").await.1, "ready\n");
            assert!(!shutdown.is_draining());

            kill_process(getpid(), Signal::TERM).expect("SIGTERM to self");
            tokio::time::timeout(HANG, shutdown.draining())
                .await
                .expect("the drain reaches the task");
            let (status, body) = get(addr, "/readyz").await;
            assert!(status.contains("503"), "{status}");
            assert_eq!(body, "draining\n");
            let forced_after_one = shutdown.is_forced();

            kill_process(getpid(), Signal::TERM).expect("second SIGTERM to self");
            tokio::time::timeout(HANG, shutdown.forced())
                .await
                .expect("the second signal forces");
            Ok((forced_after_one, shutdown.is_forced()))
        });
    assert_eq!(result.expect("run"), (false, true));
}
