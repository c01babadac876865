//! The native cure's proof ([`prove`]) against a stand-in receiver on loopback that closes
//! every connection without a byte (what nginx or HAProxy with PROXY do to a request without a
//! header, the short-circuit): no answer ends nothing early right after a write (kube-proxy
//! may not have followed yet), but ends a re-probe of a cure proven before as soon as it is
//! repeated (kube-proxy restarted with its gate off answers so from then on). A refused
//! connection is definite in both. And the answer must come from the receiver (issue 45 item
//! 3): the baseline records what answers with a PROXY header (the receiver's own path), and a
//! proof answered by another server (a middlebox's 403) is not proven, and names it.

use std::net::SocketAddr;
use std::time::Duration;

use hairpin_controller::native::{
    Baseline, Fingerprints, NativeParams, ProbeTarget, Proof, baseline, prove, prove_from,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// A stand-in on `ip`: a connection whose first bytes are a PROXY header gets `with_header`,
/// any other `without` (`None`: closed without a byte, as nginx with `proxy_protocol`).
async fn answering(
    ip: &str,
    with_header: &'static str,
    without: Option<&'static str>,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut request = [0u8; 1024];
            let n = conn.read(&mut request).await.unwrap_or(0);
            let answer = if request[..n].starts_with(b"PROXY ") {
                Some(with_header)
            } else {
                without
            };
            if let Some(answer) = answer {
                let _ = conn.write_all(answer.as_bytes()).await;
            }
        }
    });
    (addr, task)
}

const NGINX: &str = "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nContent-Length: 0\r\n\r\n";
/// Cilium's L7 policy answering for the receiver (Envoy's 403).
const MIDDLEBOX: &str =
    "HTTP/1.1 403 Forbidden\r\nServer: envoy\r\nContent-Length: 15\r\n\r\nAccess denied\r\n";

#[tokio::test]
async fn the_baseline_records_the_receiver_and_the_proof_requires_it() {
    let params = params();
    // Before the write: the short-circuit to the receiver, which answers only a header.
    let (addr, task) = answering("127.0.0.63", NGINX, None).await;
    let Baseline::Shown { receiver, .. } = baseline(&[target(addr)], &params, None).await else {
        panic!("the problem is shown");
    };
    assert_eq!(
        receiver.get(&addr).map(String::as_str),
        Some("HTTP/1.1 200 OK, Server: nginx/1.22.1")
    );
    task.abort();
    // After the write, through the load balancer: the receiver again, proven.
    let (addr2, task) = answering("127.0.0.63", NGINX, Some(NGINX)).await;
    // The same receiver behind another port here: its fingerprint moves with it.
    let line = receiver[&addr].clone();
    let at = |addr: SocketAddr| -> Fingerprints { [(addr, line.clone())].into() };
    let verdict = prove_from(
        vec![target(addr2)],
        &params,
        None,
        Proof::AfterWrite,
        &at(addr2),
    )
    .await;
    assert!(verdict.proven, "{verdict:?}");
    task.abort();
    // A middlebox answers instead: not proven, ended early, what answered named.
    let (addr3, task) = answering("127.0.0.63", NGINX, Some(MIDDLEBOX)).await;
    let verdict = prove_from(
        vec![target(addr3)],
        &params,
        None,
        Proof::AfterWrite,
        &at(addr3),
    )
    .await;
    assert!(!verdict.proven && verdict.definite, "{verdict:?}");
    assert!(
        verdict
            .detail
            .contains("HTTP/1.1 403 Forbidden, Server: envoy")
            && verdict.detail.contains("Server: nginx/1.22.1"),
        "{}",
        verdict.detail
    );
    println!(
        "a middlebox answering for the receiver: not proven after {:.0} ms: {}",
        verdict.took.as_secs_f64() * 1000.0,
        verdict.detail
    );
    // Without a recorded fingerprint, any answer counts (as before).
    let verdict = prove(vec![target(addr3)], &params, None, Proof::AfterWrite).await;
    assert!(verdict.proven, "{verdict:?}");
    task.abort();
}

/// The middlebox's words are escaped in the verdict.
#[tokio::test]
async fn what_answered_is_escaped() {
    let (addr, task) = answering(
        "127.0.0.64",
        NGINX,
        Some("HTTP/1.1 403 \u{1b}[2JForbidden\r\nServer: evil\u{7}\r\n\r\n"),
    )
    .await;
    let receiver: Fingerprints = [(addr, "HTTP/1.1 200 OK, Server: nginx".to_owned())].into();
    let verdict = prove_from(
        vec![target(addr)],
        &params(),
        None,
        Proof::AfterWrite,
        &receiver,
    )
    .await;
    assert!(!verdict.proven, "{verdict:?}");
    assert!(
        !verdict.detail.contains('\u{1b}') && !verdict.detail.contains('\u{7}'),
        "{}",
        verdict.detail
    );
    assert!(
        verdict.detail.contains("Server: evil"),
        "{}",
        verdict.detail
    );
    task.abort();
}
