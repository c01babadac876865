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

/// A certificate and its key (DER), made with the `openssl` CLI at test time in `dir`:
/// self-signed with `subject`, or issued by the CA `issuer` (made alongside), for the DNS name
/// `shop.example.com`.
fn certificate(dir: &std::path::Path, tag: &str, subject: &str, issuer: Option<&str>) -> Cert {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("run openssl");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let (key, pem) = (format!("{tag}.key"), format!("{tag}.pem"));
    let san = "subjectAltName=DNS:shop.example.com";
    let mut req = vec![
        "req", "-x509", "-days", "2", "-subj", subject, "-addext", san,
    ];
    req.extend(ec);
    req.extend(["-keyout", &key, "-out", &pem]);
    let ca_subject;
    if let Some(issuer) = issuer {
        ca_subject = issuer.to_owned();
        let mut ca = vec!["req", "-x509", "-days", "2", "-subj", &ca_subject];
        ca.extend(ec);
        ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
        run(&ca);
        req.extend(["-CA", "ca.pem", "-CAkey", "ca.key"]);
    }
    run(&req);
    let (der, key_der) = (format!("{tag}.der"), format!("{tag}.key.der"));
    run(&["x509", "-in", &pem, "-outform", "DER", "-out", &der]);
    run(&[
        "pkcs8", "-topk8", "-nocrypt", "-in", &key, "-outform", "DER", "-out", &key_der,
    ]);
    Cert {
        der: std::fs::read(dir.join(der)).unwrap(),
        key: std::fs::read(dir.join(key_der)).unwrap(),
    }
}

#[derive(Clone)]
struct Cert {
    der: Vec<u8>,
    key: Vec<u8>,
}

fn server_config(cert: &Cert) -> std::sync::Arc<rustls::ServerConfig> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key.clone())),
        )
        .unwrap();
    std::sync::Arc::new(config)
}

/// A TLS stand-in on `ip` (threads, blocking I/O): a connection whose first bytes are a PROXY
/// header gets a TLS server presenting the next of `with_header` (in turn), any other the next
/// of `without` (empty: closed without a byte, as nginx with `proxy_protocol`).
fn tls_answering(ip: &str, with_header: Vec<Cert>, without: Vec<Cert>) -> SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let with_header: Vec<_> = with_header.iter().map(server_config).collect();
    let without: Vec<_> = without.iter().map(server_config).collect();
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(mut conn) = conn else { return };
            let mut first = [0u8; 6];
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            if conn.peek(&mut first).is_err() {
                continue;
            }
            let configs = if &first == b"PROXY " {
                // The header line, byte by byte (the ClientHello stays in the socket).
                let mut line = Vec::new();
                let mut byte = [0u8; 1];
                while !line.ends_with(b"\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                    line.push(byte[0]);
                }
                &with_header
            } else {
                &without
            };
            if configs.is_empty() {
                continue;
            }
            let config = configs[n % configs.len()].clone();
            std::thread::spawn(move || {
                let Ok(server) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(server, conn);
                let mut request = [0u8; 512];
                let _ = tls.read(&mut request);
                let _ = tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    addr
}

fn tls_target(addr: SocketAddr) -> ProbeTarget {
    ProbeTarget {
        addr,
        tls: true,
        host: "shop.example.com".into(),
    }
}

/// Issue 45 item 3, TLS: the baseline records the certificate the receiver presents through its
/// header path (its names and SHA-256, by a real handshake); after the write, the same
/// certificate through the load balancer proves the cure, and a TLS-inspecting middlebox's
/// (same name, its own CA) fails the proof at once, both certificates named.
#[tokio::test]
async fn a_tls_receiver_is_known_by_its_certificate_and_a_middlebox_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let receiver_cert = certificate(dir.path(), "receiver", "/CN=shop.example.com/O=Shop", None);
    let middlebox = certificate(
        dir.path(),
        "middlebox",
        "/CN=shop.example.com",
        Some("/CN=Inspecting Proxy CA/O=Corp Firewall"),
    );
    let params = params();
    // Before the write: the short-circuit to the receiver, which answers only a header.
    let addr = tls_answering("127.0.0.65", vec![receiver_cert.clone()], vec![]);
    let Baseline::Shown { receiver, .. } = baseline(&[tls_target(addr)], &params, None).await
    else {
        panic!("the problem is shown");
    };
    let fingerprint = receiver.get(&addr).cloned().unwrap_or_default();
    assert!(
        fingerprint.starts_with(
            "TLS certificate of CN=shop.example.com, O=Shop (shop.example.com) issued by CN=shop.example.com, O=Shop, SHA-256 "
        ) && fingerprint.len() > 64,
        "{fingerprint}"
    );
    let at = |addr: SocketAddr| -> Fingerprints { [(addr, fingerprint.clone())].into() };
    // After the write, through the load balancer: the receiver's certificate, proven.
    let addr2 = tls_answering("127.0.0.65", vec![], vec![receiver_cert.clone()]);
    let verdict = prove_from(
        vec![tls_target(addr2)],
        &params,
        None,
        Proof::AfterWrite,
        &at(addr2),
    )
    .await;
    assert!(verdict.proven, "{verdict:?}");
    assert!(verdict.detail.contains("O=Shop"), "{}", verdict.detail);
    // A TLS-inspecting middlebox answers instead: not proven, ended early, both named.
    let addr3 = tls_answering("127.0.0.65", vec![], vec![middlebox]);
    let verdict = prove_from(
        vec![tls_target(addr3)],
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
            .contains("answered by another server than the receiver: TLS certificate of CN=shop.example.com (shop.example.com) issued by CN=Inspecting Proxy CA, O=Corp Firewall")
            && verdict
                .detail
                .contains("where the receiver answered TLS certificate of CN=shop.example.com, O=Shop"),
        "{}",
        verdict.detail
    );
    println!(
        "a TLS-inspecting middlebox answering for the receiver: not proven after {:.0} ms: {}",
        verdict.took.as_secs_f64() * 1000.0,
        verdict.detail
    );
}

/// Receivers that each present a certificate of their own with the same names (ingress-nginx's
/// default certificate, made in each pod): the fingerprint keeps the names only, and either
/// receiver proves the cure; a certificate with other names still fails it.
#[tokio::test]
async fn receivers_with_certificates_of_their_own_are_known_by_their_names() {
    let dir = tempfile::tempdir().unwrap();
    let subject = "/CN=Kubernetes Ingress Controller Fake Certificate/O=Acme Co";
    let pod_a = certificate(dir.path(), "pod-a", subject, None);
    let pod_b = certificate(dir.path(), "pod-b", subject, None);
    assert_ne!(pod_a.der, pod_b.der);
    let params = params();
    let addr = tls_answering("127.0.0.66", vec![pod_a.clone(), pod_b.clone()], vec![]);
    let Baseline::Shown { receiver, .. } = baseline(&[tls_target(addr)], &params, None).await
    else {
        panic!("the problem is shown");
    };
    let fingerprint = receiver.get(&addr).cloned().unwrap_or_default();
    assert_eq!(
        fingerprint,
        "TLS certificate of CN=Kubernetes Ingress Controller Fake Certificate, O=Acme Co (shop.example.com) issued by CN=Kubernetes Ingress Controller Fake Certificate, O=Acme Co"
    );
    let at = |addr: SocketAddr| -> Fingerprints { [(addr, fingerprint.clone())].into() };
    let addr2 = tls_answering("127.0.0.66", vec![], vec![pod_a, pod_b]);
    let verdict = prove_from(
        vec![tls_target(addr2)],
        &params,
        None,
        Proof::AfterWrite,
        &at(addr2),
    )
    .await;
    assert!(verdict.proven, "{verdict:?}");
    let other = certificate(dir.path(), "other", "/CN=shop.example.com", None);
    let addr3 = tls_answering("127.0.0.66", vec![], vec![other]);
    let verdict = prove_from(
        vec![tls_target(addr3)],
        &params,
        None,
        Proof::AfterWrite,
        &at(addr3),
    )
    .await;
    assert!(!verdict.proven && verdict.definite, "{verdict:?}");
}

/// A TLS port answered in plain text (a `400` to the ClientHello) or closed without a byte is
/// no answer; the baseline shows the problem and records nothing for it.
#[tokio::test]
async fn a_tls_port_answered_without_tls_is_no_answer() {
    let (addr, task) = answering(
        "127.0.0.67",
        "HTTP/1.1 400 Bad Request\r\n\r\n",
        Some("HTTP/1.1 400 Bad Request\r\n\r\n"),
    )
    .await;
    let Baseline::Shown { receiver, .. } = baseline(&[tls_target(addr)], &params(), None).await
    else {
        panic!("the problem is shown");
    };
    assert!(receiver.is_empty(), "{receiver:?}");
    let verdict = prove(vec![tls_target(addr)], &params(), None, Proof::AfterWrite).await;
    assert!(!verdict.proven, "{verdict:?}");
    assert!(
        verdict.detail.contains("not a TLS server's"),
        "{}",
        verdict.detail
    );
    task.abort();
}
