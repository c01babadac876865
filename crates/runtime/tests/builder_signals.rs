//! The builder's signal handlers: SIGTERM starts the drain the command's task waits on, and
//! `/readyz` fails from then on; a second SIGTERM forces. Its own test binary, since the
//! signals go to the whole process.

use std::net::SocketAddr;
use std::time::Duration;

use hairpin_runtime::{AdminArgs, BuildError, Builder, OnSignal, Threads};
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

/// Set in the child process of [`with_abort_the_first_sigint_ends_the_process`].
const ABORT_CHILD: &str = "HAIRPIN_BUILDER_ABORT_CHILD";

/// A one-shot command ([`OnSignal::Abort`]): the first SIGINT ends the process at once, as
/// Ctrl-C does a program without handlers; its work never sees a drain. In a child process
/// (this test binary again), since the signal ends the whole process.
#[test]
fn with_abort_the_first_sigint_ends_the_process() {
    use std::io::{BufRead as _, BufReader};
    use std::os::unix::process::ExitStatusExt as _;
    use std::process::{Command, Stdio};

    if std::env::var_os(ABORT_CHILD).is_some() {
        let result: Result<(), BuildError> = Builder::new()
            .with_signals(OnSignal::Abort)
            .build()
            .expect("build")
            .run(|started| async move {
                println!("work started");
                tokio::time::timeout(HANG, started.shutdown.draining())
                    .await
                    .expect_err("an aborting command never drains");
                Ok(())
            });
        result.expect("run");
        println!("work returned");
        return;
    }
    let mut child = Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--exact",
            "with_abort_the_first_sigint_ends_the_process",
            "--nocapture",
        ])
        .env(ABORT_CHILD, "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let started = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line.contains("work started"));
    assert!(started, "the child's work did not start");
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).expect("pid fits"))
        .expect("a child's pid is not 0");
    kill_process(pid, Signal::INT).expect("SIGINT to the child");
    let deadline = std::time::Instant::now() + HANG;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "SIGINT did not end the child"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(
        status.signal(),
        Some(Signal::INT.as_raw()),
        "{status:?}, then printed {rest:?}"
    );
    assert!(
        !rest.iter().any(|l| l.contains("work returned")),
        "{rest:?}"
    );
}
