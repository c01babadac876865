//! A TLS port's answer, as the proof needs it: a real handshake (rustls, ring) with a verifier
//! that trusts any certificate and only records it, so that what answered is known by its leaf
//! certificate: the same certificate through the load balancer after the write as through the
//! receiver's header path before it, or another server answered (a TLS-inspecting proxy mints
//! its own). The server must prove it holds the certificate's key (its handshake signature is
//! checked); the chain is not (a receiver's self-signed or not yet issued certificate is still
//! its identity).

use std::sync::{Arc, Mutex};

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::cert;

/// The start of every TLS answer's text: `TLS certificate <names>, SHA-256 <hex>`.
pub(crate) const PREFIX: &str = "TLS certificate ";
/// What separates a certificate's names from its hash in the answer's text.
pub(crate) const HASH: &str = ", SHA-256 ";

/// The leaf certificate a server presented, once it proved it holds its key.
#[derive(Default)]
struct Seen {
    der: Option<Vec<u8>>,
    signed: bool,
}

/// Records the server's leaf certificate; trusts any chain, checks the handshake signature.
#[derive(Debug)]
struct Recorder {
    seen: Arc<Mutex<Seen>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl std::fmt::Debug for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seen")
            .field("signed", &self.signed)
            .finish()
    }
}

impl Recorder {
    fn signed(
        &self,
        verified: Result<HandshakeSignatureValid, rustls::Error>,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        if verified.is_ok()
            && let Ok(mut seen) = self.seen.lock()
        {
            seen.signed = true;
        }
        verified
    }
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Ok(mut seen) = self.seen.lock() {
            seen.der = Some(end_entity.as_ref().to_vec());
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.signed(rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.algorithms,
        ))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.signed(rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.algorithms,
        ))
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A TLS handshake on `stream` for `host` (SNI; none for an IP address), its first bytes
/// preceded by `prefix` (a PROXY header, or nothing): the answer's text
/// (`TLS certificate <subject, issuer, names>, SHA-256 <hex>`, escaped), or why there is none
/// (the server closed or reset the connection, answered with no TLS, or never proved it
/// holds the certificate's key).
pub(crate) async fn identify(
    stream: &mut TcpStream,
    host: &str,
    prefix: Vec<u8>,
) -> Result<String, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let recorder = Recorder {
        seen: seen.clone(),
        algorithms: provider.signature_verification_algorithms,
    };
    let mut conn = client(provider, recorder, host)?;
    let mut out = prefix;
    let mut buf = vec![0u8; 16 * 1024];
    let ended = loop {
        while conn.wants_write() {
            conn.write_tls(&mut out).map_err(|e| e.to_string())?;
        }
        if !out.is_empty() {
            if let Err(err) = stream.write_all(&out).await {
                break Some(format!("no answer: {err}"));
            }
            out.clear();
        }
        if !conn.is_handshaking() {
            break None;
        }
        let n = match stream.read(&mut buf).await {
            Ok(0) => break Some(empty(&seen)),
            Ok(n) => n,
            Err(err) => break Some(format!("no answer: {err}")),
        };
        let mut read = &buf[..n];
        while !read.is_empty() {
            if let Err(err) = conn.read_tls(&mut read) {
                return Err(format!("no answer: {err}"));
            }
        }
        if let Err(err) = conn.process_new_packets() {
            // The server may still refuse us (a client certificate it requires): its
            // certificate, once signed for, is its identity all the same.
            break Some(format!("an answer that is not a TLS server's: {err}"));
        }
    };
    let seen = seen
        .lock()
        .map_err(|_| "the probe's state is poisoned".to_owned())?;
    match (&seen.der, seen.signed, ended) {
        (Some(der), true, _) => Ok(describe(der)),
        (_, _, Some(why)) => Err(why),
        (_, _, None) => Err("a TLS server that never proved it holds its certificate".into()),
    }
}

/// Why a connection closed before a certificate was signed for.
fn empty(seen: &Mutex<Seen>) -> String {
    let started = seen.lock().is_ok_and(|s| s.der.is_some());
    if started {
        "the connection closed before the server proved it holds its certificate".into()
    } else {
        "empty reply (the ingress got no PROXY header)".into()
    }
}

fn client(
    provider: Arc<CryptoProvider>,
    recorder: Recorder,
    host: &str,
) -> Result<rustls::ClientConnection, String> {
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("no TLS client: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(recorder))
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_owned()).map_err(|e| format!("no TLS client: {e}"))?;
    rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| format!("no TLS client: {e}"))
}

/// A certificate in words: its subject, names and issuer, and its SHA-256.
pub(crate) fn describe(der: &[u8]) -> String {
    let names = match cert::names(der) {
        Some(n) => {
            let alt = if n.alt_names.is_empty() {
                String::new()
            } else {
                format!(" ({})", n.alt_names.join(" "))
            };
            format!(
                "of {}{alt} issued by {}",
                or_none(&n.subject),
                or_none(&n.issuer)
            )
        }
        None => "that cannot be read".to_owned(),
    };
    format!("{PREFIX}{names}{HASH}{}", cert::sha256_hex(der))
}

fn or_none(name: &str) -> &str {
    if name.is_empty() { "(no name)" } else { name }
}

/// The identity of `answer` without its hash (`TLS certificate <names>`), when it is a TLS
/// answer: what the receivers of a load balancer have in common when each presents a
/// certificate of its own (ingress-nginx's default certificate is made by each pod at start).
pub(crate) fn names_only(answer: &str) -> Option<&str> {
    if !answer.starts_with(PREFIX) {
        return None;
    }
    answer.rfind(HASH).map(|at| &answer[..at])
}
