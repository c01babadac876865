//! The native cure's proof ([`prove`]) against a stand-in receiver on loopback that closes
//! every connection without a byte (what nginx or HAProxy with PROXY do to a request without a
//! header, the short-circuit): no answer ends nothing early right after a write (kube-proxy
//! may not have followed yet), but ends a re-probe of a cure proven before as soon as it is
//! repeated (kube-proxy restarted with its gate off answers so from then on). A refused
//! connection is definite in both.

use std::net::SocketAddr;
use std::time::Duration;

use hairpin_controller::native::{NativeParams, ProbeTarget, Proof, prove};

fn params() -> NativeParams {
    NativeParams {
        deadline: Duration::from_millis(1500),
        interval: Duration::from_millis(50),
        timeout: Duration::from_millis(500),
        ..NativeParams::default()
    }
}

/// A listener on `ip` that closes every connection without a byte; its address.
async fn closing(ip: &str) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            drop(conn);
        }
    });
    (addr, task)
}

fn target(addr: SocketAddr) -> ProbeTarget {
    ProbeTarget {
        addr,
        tls: false,
        host: "shop.example.com".into(),
    }
}

#[tokio::test]
async fn no_answer_ends_a_re_probe_early_but_not_a_proof_after_a_write() {
    let (addr, task) = closing("127.0.0.61").await;
    let params = params();

    let after_write = prove(vec![target(addr)], &params, None, Proof::AfterWrite).await;
    assert!(
        !after_write.proven && !after_write.definite,
        "{after_write:?}"
    );
    assert!(
        after_write.took >= params.deadline,
        "waited for the deadline: {after_write:?}"
    );

    let again = prove(vec![target(addr)], &params, None, Proof::Again).await;
    assert!(!again.proven && again.definite, "{again:?}");
    assert!(
        again
            .detail
            .contains("3 times in a row on a port that answered before"),
        "{}",
        again.detail
    );
    println!(
        "a re-probe failing with empty replies: verdict after {:.0} ms (deadline {:?})",
        again.took.as_secs_f64() * 1000.0,
        params.deadline
    );
    task.abort();
}

#[tokio::test]
async fn a_refused_connection_is_definite_after_a_write_too() {
    // A port nothing listens on: the listener is gone.
    let (addr, task) = closing("127.0.0.62").await;
    task.abort();
    let _ = task.await;
    let verdict = prove(vec![target(addr)], &params(), None, Proof::AfterWrite).await;
    assert!(!verdict.proven && verdict.definite, "{verdict:?}");
}
