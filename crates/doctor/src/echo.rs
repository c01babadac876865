//! `hairpin echo`: a server that answers each connection with what it received — the PROXY
//! header (decoded with our codec), the socket peer, and the HTTP request line and headers (or
//! a raw TCP line) — so you can see exactly what a load balancer or hairpin proxy sends.
//!
//! Bounded like the proxy, since whoever reaches it may misbehave: the PROXY header and the
//! request must all arrive within one deadline from the accept (not per read: a header
//! dribbled a byte at a time is cut at the deadline), the answer must be taken within
//! [`ANSWER_TIMEOUT`], at most [`EchoLimits::max_connections`] connections are served at
//! once (beyond it, new ones wait in the backlog), and errors a peer can provoke are logged a
//! few lines per window.

use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hairpin_proxy_protocol::tlv::{SslSubTlv, Tlv};
use hairpin_proxy_protocol::{Addresses, Command, DecodeError, Decoded, Decoder, Header, Version};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::DoctorError;
use hairpin_runtime::{LogLimiter, fdlimit};

/// The most the server reads before answering.
const MAX_REQUEST: usize = 16 * 1024;
/// How long a client may take to read the answer (and send what it still sends after it).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The bounds of the echo server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EchoLimits {
    /// Time from the accept for the PROXY header and the request to arrive, all of them.
    pub header_timeout: Duration,
    /// Connections served at once; beyond it, new ones wait in the listen backlog.
    pub max_connections: usize,
}

impl Default for EchoLimits {
    /// 10 s for the header and request, 1,024 connections.
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

/// The rate limits of the logs a peer can provoke, shared by the connections.
#[derive(Debug)]
struct Logs {
    accept: LogLimiter,
    refused: LogLimiter,
    received: LogLimiter,
}

/// Whether connections must start with a PROXY header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyMode {
    /// As the specification demands of a configured receiver: no valid header, no service
    /// (the connection is closed and the error logged).
    Required,
    /// Detects a header when there is one, and says whether there was: for diagnosis only (a
    /// production receiver must never guess).
    Optional,
    /// Never looks for a header.
    Off,
}

impl ProxyMode {
    /// The flag's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyMode::Required => "required",
            ProxyMode::Optional => "optional",
            ProxyMode::Off => "off",
        }
    }
}

/// The decoded PROXY header, for the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProxyInfo {
    /// `v1` or `v2`.
    pub version: String,
    /// `PROXY` or `LOCAL`.
    pub command: String,
    /// `TCP4`, `TCP6`, `UNIX`, `UNKNOWN`...
    pub family: String,
    /// The original client, when the header carries one.
    pub source: Option<String>,
    /// The address the client connected to.
    pub destination: Option<String>,
    /// `name: value` per TLV (v2).
    pub tlvs: Vec<TlvInfo>,
    /// Header length in bytes.
    pub length: usize,
}

/// One TLV for the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TlvInfo {
    /// The type byte.
    pub kind: u8,
    /// Its name (`unique-id`, `crc32c`, `authority`...).
    pub name: String,
    /// Its value, readable.
    pub value: String,
}

/// What one connection sent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EchoReport {
    /// The socket's peer (the load balancer or proxy, not necessarily the client).
    pub peer: String,
    /// The local address the connection arrived on.
    pub local: String,
    /// The server's `--proxy-protocol` mode.
    pub proxy_mode: String,
    /// The header, when one was decoded.
    pub proxy: Option<ProxyInfo>,
    /// A plain-words remark about the header (absent, or diagnosis-only mode).
    pub proxy_note: Option<String>,
    /// The HTTP request line, or the raw line for non-HTTP clients.
    pub request_line: Option<String>,
    /// HTTP request headers in order.
    pub headers: Vec<(String, String)>,
}

/// A bound echo server.
#[derive(Debug)]
pub struct EchoServer {
    listener: TcpListener,
    mode: ProxyMode,
    limits: EchoLimits,
}

impl EchoServer {
    /// Binds `addr`.
    ///
    /// # Errors
    /// [`DoctorError::Bind`] naming the address.
    pub async fn bind(addr: SocketAddr, mode: ProxyMode) -> Result<Self, DoctorError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| DoctorError::Bind { addr, source })?;
        Ok(Self {
            listener,
            mode,
            limits: EchoLimits::default(),
        })
    }

    /// Other bounds than [`EchoLimits::default`].
    #[must_use]
    pub fn with_limits(mut self, limits: EchoLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `stop` resolves.
    pub async fn serve_until(self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        let limit = Arc::new(Semaphore::new(
            self.limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
        ));
        let logs = Arc::new(Logs {
            accept: LogLimiter::new(5, Duration::from_secs(10)),
            refused: LogLimiter::new(5, Duration::from_secs(10)),
            received: LogLimiter::new(20, Duration::from_secs(10)),
        });
        let full_log = LogLimiter::new(1, Duration::from_secs(10));
        loop {
            // At the cap, stop accepting (clients wait in the backlog) until one ends.
            let permit = match limit.clone().try_acquire_owned() {
                Ok(permit) => permit,
                Err(_) => {
                    if let Some(suppressed) = full_log.check() {
                        tracing::warn!(
                            max_connections = self.limits.max_connections,
                            suppressed,
                            "connection limit reached: not accepting until a connection ends"
                        );
                    }
                    tokio::select! {
                        permit = limit.clone().acquire_owned() => match permit {
                            Ok(permit) => permit,
                            Err(_) => return,
                        },
                        () = &mut stop => return,
                    }
                }
            };
            let (stream, peer) = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        fdlimit::accept_failed(&err, "echo", &logs.accept).await;
                        continue;
                    }
                },
                () = &mut stop => return,
            };
            let mode = self.mode;
            let deadline = Instant::now() + self.limits.header_timeout;
            let logs = logs.clone();
            tokio::spawn(async move {
                let _permit = permit;
                if let Err(err) = handle(stream, peer, mode, deadline, &logs).await {
                    tracing::debug!(%peer, error = %err, "connection ended with an I/O error");
                }
            });
        }
    }
}

async fn handle(
    mut stream: TcpStream,
    peer: SocketAddr,
    mode: ProxyMode,
    deadline: Instant,
    logs: &Logs,
) -> std::io::Result<()> {
    let local = stream.local_addr()?;
    let mut report = EchoReport {
        peer: peer.to_string(),
        local: local.to_string(),
        proxy_mode: mode.as_str().to_owned(),
        ..EchoReport::default()
    };
    let mut buf = Vec::with_capacity(1024);
    let mut payload_start = 0;
    if mode != ProxyMode::Off {
        match read_header(&mut stream, &mut buf, deadline).await? {
            HeaderRead::Found(info) => {
                payload_start = info.length;
                if mode == ProxyMode::Optional {
                    report.proxy_note = Some(format!(
                        "a PROXY {} header was found (mode optional: for diagnosis only)",
                        info.version
                    ));
                }
                if let Some(suppressed) = logs.received.check() {
                    tracing::info!(%peer, version = %info.version, source = ?info.source, suppressed, "PROXY header received");
                }
                report.proxy = Some(info);
            }
            HeaderRead::Absent(reason) if mode == ProxyMode::Optional => {
                report.proxy_note = Some(format!(
                    "no PROXY header: {reason} (mode optional: for diagnosis only; a receiver \
                     that requires the PROXY protocol would have closed this connection)"
                ));
            }
            HeaderRead::Absent(reason) => {
                if let Some(suppressed) = logs.refused.check() {
                    tracing::error!(
                        %peer,
                        error = %reason,
                        suppressed,
                        "connection without a valid PROXY header closed (--proxy-protocol required)"
                    );
                }
                return Ok(());
            }
            HeaderRead::Closed => return Ok(()),
        }
    }
    let request_end = read_request(&mut stream, &mut buf, payload_start, deadline).await?;
    let request = String::from_utf8_lossy(&buf[payload_start..request_end]).into_owned();
    let mut lines = request.split('\n').map(|line| line.trim_end_matches('\r'));
    let first = lines.next().unwrap_or_default().to_owned();
    let is_http = is_http_request_line(&first);
    if !first.is_empty() {
        report.request_line = Some(first.clone());
    }
    let response = if is_http {
        for line in lines.take_while(|line| !line.is_empty()) {
            if let Some((name, value)) = line.split_once(':') {
                report
                    .headers
                    .push((name.trim().to_owned(), value.trim().to_owned()));
            }
        }
        let json = wants_json(&first, &report.headers);
        let (content_type, body) = if json {
            (
                "application/json",
                serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
            )
        } else {
            ("text/plain; charset=utf-8", render_text(&report))
        };
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\nServer: hairpin-echo\r\n\r\n{body}",
            body.len()
        )
    } else {
        render_text(&report)
    };
    // A client that never reads the answer must not hold the connection either.
    tokio::time::timeout(ANSWER_TIMEOUT, answer(&mut stream, response.as_bytes()))
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

async fn answer(stream: &mut TcpStream, response: &[u8]) -> std::io::Result<()> {
    stream.write_all(response).await?;
    stream.shutdown().await?;
    // Drain what the client may still send, so closing does not turn into a reset that could
    // discard the answer before the client read it.
    let mut sink = [0u8; 1024];
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
    Ok(())
}

enum HeaderRead {
    Found(ProxyInfo),
    Absent(String),
    Closed,
}

async fn read_header(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> std::io::Result<HeaderRead> {
    let decoder = Decoder::new();
    loop {
        match decoder.decode(buf) {
            Ok(Decoded::Complete { header, len }) => {
                return Ok(HeaderRead::Found(describe(&header, len)));
            }
            Ok(Decoded::Incomplete { .. }) => {}
            Err(DecodeError::NotProxyProtocol { .. }) => {
                return Ok(HeaderRead::Absent(
                    "the connection does not start with a PROXY header".into(),
                ));
            }
            Err(err) => return Ok(HeaderRead::Absent(format!("invalid PROXY header: {err}"))),
        }
        let mut chunk = [0u8; 1024];
        let read = tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await;
        match read {
            Ok(Ok(0)) if buf.is_empty() => return Ok(HeaderRead::Closed),
            Ok(Ok(0)) => {
                return Ok(HeaderRead::Absent(
                    "the connection closed in the middle of a PROXY header".into(),
                ));
            }
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(err)) => return Err(err),
            Err(_) if buf.is_empty() => {
                return Ok(HeaderRead::Absent(
                    "nothing received before the header deadline".into(),
                ));
            }
            Err(_) => {
                return Ok(HeaderRead::Absent(format!(
                    "incomplete PROXY header at the deadline ({} bytes received)",
                    buf.len()
                )));
            }
        }
    }
}

/// Reads until the end of an HTTP head (blank line) or of a raw line; returns where it ends.
async fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    start: usize,
    deadline: Instant,
) -> std::io::Result<usize> {
    loop {
        let data = &buf[start..];
        if let Some(end) = find(data, b"\r\n\r\n") {
            return Ok(start + end + 4);
        }
        if let Some(end) = find(data, b"\n") {
            let first = String::from_utf8_lossy(&data[..end]);
            if !is_http_request_line(first.trim_end_matches('\r')) {
                return Ok(start + end + 1);
            }
            if let Some(end) = find(data, b"\n\n") {
                return Ok(start + end + 2);
            }
        }
        if data.len() >= MAX_REQUEST {
            return Ok(buf.len());
        }
        let mut chunk = [0u8; 2048];
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Err(_) => return Ok(buf.len()),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(err)) => return Err(err),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn is_http_request_line(line: &str) -> bool {
    let mut parts = line.split(' ');
    matches!(
        (parts.next(), parts.next(), parts.next(), parts.next()),
        (Some(method), Some(target), Some(version), None)
            if !method.is_empty()
                && method.bytes().all(|b| b.is_ascii_uppercase())
                && !target.is_empty()
                && version.starts_with("HTTP/")
    )
}

fn wants_json(request_line: &str, headers: &[(String, String)]) -> bool {
    let target = request_line.split(' ').nth(1).unwrap_or_default();
    let query_json = target
        .split_once('?')
        .is_some_and(|(_, query)| query.split('&').any(|pair| pair == "format=json"));
    query_json
        || headers.iter().any(|(name, value)| {
            name.eq_ignore_ascii_case("accept") && value.contains("application/json")
        })
}

/// Turns a decoded header into its report form.
pub fn describe(header: &Header<'_>, length: usize) -> ProxyInfo {
    let family = match (header.version(), header.addresses()) {
        (_, Addresses::Inet { .. }) => "TCP4",
        (_, Addresses::Inet6 { .. }) => "TCP6",
        (_, Addresses::Unix { .. }) => "UNIX",
        (Version::V1, Addresses::Unspec) => "UNKNOWN",
        (Version::V2, Addresses::Unspec) => "UNSPEC",
    };
    ProxyInfo {
        version: header.version().to_string(),
        command: match header.command() {
            Command::Proxy => "PROXY".into(),
            Command::Local => "LOCAL".into(),
        },
        family: family.into(),
        source: header.source().map(|addr| addr.to_string()),
        destination: header.destination().map(|addr| addr.to_string()),
        tlvs: header.tlvs().map(|tlv| describe_tlv(&tlv)).collect(),
        length,
    }
}

fn describe_tlv(tlv: &Tlv<'_>) -> TlvInfo {
    let (name, value) = match tlv {
        Tlv::Alpn(value) => (
            "alpn".to_owned(),
            String::from_utf8_lossy(value).into_owned(),
        ),
        Tlv::Authority(value) => ("authority".to_owned(), (*value).to_owned()),
        Tlv::Crc32c(value) => ("crc32c".to_owned(), format!("{value:#010x} (verified)")),
        Tlv::Noop(value) => (
            "noop".to_owned(),
            format!("{} byte(s) of padding", value.len()),
        ),
        Tlv::UniqueId(value) => ("unique-id".to_owned(), printable(value)),
        Tlv::Netns(value) => ("netns".to_owned(), (*value).to_owned()),
        Tlv::Ssl(ssl) => {
            let mut text = format!(
                "client-ssl={} verified={}",
                ssl.client_ssl(),
                ssl.verified()
            );
            for sub in ssl.sub_tlvs() {
                let _ = match sub {
                    SslSubTlv::Version(v) => write!(text, " version={v}"),
                    SslSubTlv::CommonName(v) => write!(text, " cn={v}"),
                    SslSubTlv::Cipher(v) => write!(text, " cipher={v}"),
                    SslSubTlv::SigAlg(v) => write!(text, " sig-alg={v}"),
                    SslSubTlv::KeyAlg(v) => write!(text, " key-alg={v}"),
                    SslSubTlv::Custom { kind, value } => {
                        write!(text, " {kind:#04x}={}", hex(value))
                    }
                };
            }
            ("ssl".to_owned(), text)
        }
        Tlv::Custom { kind, value } => (format!("type {kind:#04x}"), hex(value)),
    };
    TlvInfo {
        kind: tlv.kind(),
        name,
        value,
    }
}

fn printable(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if text.chars().all(|c| !c.is_control()) => text.to_owned(),
        _ => format!("0x{}", hex(bytes)),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

/// The text form of a report.
pub fn render_text(report: &EchoReport) -> String {
    let mut out = String::from("hairpin echo: what this connection carried\n");
    let _ = writeln!(out, "peer (socket):   {}", report.peer);
    let _ = writeln!(out, "local (socket):  {}", report.local);
    let _ = writeln!(out, "proxy-protocol:  mode {}", report.proxy_mode);
    match &report.proxy {
        Some(info) => {
            let _ = writeln!(
                out,
                "  header:        {} {} {} ({} bytes)",
                info.version, info.command, info.family, info.length
            );
            let _ = writeln!(
                out,
                "  source:        {}",
                info.source.as_deref().unwrap_or("(none)")
            );
            let _ = writeln!(
                out,
                "  destination:   {}",
                info.destination.as_deref().unwrap_or("(none)")
            );
            for tlv in &info.tlvs {
                let _ = writeln!(out, "  tlv {}: {}", tlv.name, tlv.value);
            }
        }
        None if report.proxy_mode == "off" => {
            let _ = writeln!(out, "  header:        not looked for");
        }
        None => {
            let _ = writeln!(out, "  header:        none");
        }
    }
    if let Some(note) = &report.proxy_note {
        let _ = writeln!(out, "  note:          {note}");
    }
    if let Some(line) = &report.request_line {
        let _ = writeln!(out, "request:         {line}");
    }
    for (name, value) in &report.headers {
        let _ = writeln!(out, "  {name}: {value}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hairpin_proxy_protocol::encode_header;

    async fn server(mode: ProxyMode) -> SocketAddr {
        let server = EchoServer::bind("127.0.0.1:0".parse().unwrap(), mode)
            .await
            .unwrap();
        let addr = server.local_addr().unwrap();
        tokio::spawn(server.serve_until(std::future::pending()));
        addr
    }

    async fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(bytes).await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn required_mode_shows_the_header_and_closes_without_one() {
        let addr = server(ProxyMode::Required).await;
        let mut header = [0u8; 64];
        let len = encode_header(
            Version::V2,
            "192.0.2.7:51234".parse().unwrap(),
            "198.51.100.10:443".parse().unwrap(),
            &mut header,
        )
        .unwrap();
        let mut request = header[..len].to_vec();
        request.extend_from_slice(b"GET /x?format=json HTTP/1.1\r\nHost: shop.example.com\r\n\r\n");
        let answer = exchange(addr, &request).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        let body = answer.split_once("\r\n\r\n").unwrap().1;
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["proxy"]["version"], "v2");
        assert_eq!(json["proxy"]["source"], "192.0.2.7:51234");
        assert_eq!(json["proxy"]["destination"], "198.51.100.10:443");
        assert_eq!(json["request_line"], "GET /x?format=json HTTP/1.1");
        assert_eq!(json["headers"][0][1], "shop.example.com");

        let plain = exchange(addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
        assert_eq!(
            plain, "",
            "required mode must close a connection without a header"
        );
    }

    #[tokio::test]
    async fn optional_mode_says_plainly_whether_a_header_came() {
        let addr = server(ProxyMode::Optional).await;
        let answer = exchange(
            addr,
            b"GET / HTTP/1.1\r\nHost: a\r\nAccept: text/plain\r\n\r\n",
        )
        .await;
        assert!(answer.contains("header:        none"), "{answer}");
        assert!(answer.contains("no PROXY header"), "{answer}");
        assert!(answer.contains("for diagnosis only"), "{answer}");
        let answer = exchange(
            addr,
            b"PROXY TCP4 192.0.2.1 198.51.100.10 4000 80\r\nhello there\n",
        )
        .await;
        assert!(answer.contains("v1 PROXY TCP4"), "{answer}");
        assert!(answer.contains("source:        192.0.2.1:4000"), "{answer}");
        assert!(answer.contains("request:         hello there"), "{answer}");
        assert!(
            !answer.starts_with("HTTP/"),
            "raw lines get a raw answer: {answer}"
        );
        let answer = exchange(
            addr,
            b"PROXY TCP4 999.1.1.1 198.51.100.10 4000 80\r\nGET / HTTP/1.0\r\n\r\n",
        )
        .await;
        assert!(answer.contains("invalid PROXY header"), "{answer}");
    }

    #[tokio::test]
    async fn off_mode_does_not_look() {
        let addr = server(ProxyMode::Off).await;
        let answer = exchange(addr, b"PROXY TCP4 192.0.2.1 198.51.100.10 4000 80\r\n").await;
        assert!(answer.contains("not looked for"), "{answer}");
        assert!(answer.contains("request:         PROXY TCP4"), "{answer}");
    }

    async fn server_with(mode: ProxyMode, limits: EchoLimits) -> SocketAddr {
        let server = EchoServer::bind("127.0.0.1:0".parse().unwrap(), mode)
            .await
            .unwrap()
            .with_limits(limits);
        let addr = server.local_addr().unwrap();
        tokio::spawn(server.serve_until(std::future::pending()));
        addr
    }

    #[tokio::test]
    async fn a_header_dribbled_byte_by_byte_is_cut_at_the_deadline() {
        let deadline = Duration::from_millis(500);
        let addr = server_with(
            ProxyMode::Required,
            EchoLimits {
                header_timeout: deadline,
                ..EchoLimits::default()
            },
        )
        .await;
        let header = b"PROXY TCP4 192.0.2.1 198.51.100.10 4000 80\r\nGET / HTTP/1.0\r\n\r\n";
        let started = std::time::Instant::now();
        let (mut reader, mut writer) = TcpStream::connect(addr).await.unwrap().into_split();
        let closed = tokio::spawn(async move {
            let mut answer = Vec::new();
            let _ = reader.read_to_end(&mut answer).await;
            (started.elapsed(), answer)
        });
        // One byte every 40 ms: each read comes long before any per-read timeout, and the
        // whole header would take about 2.6 s.
        let mut sent = 0;
        for byte in header {
            if closed.is_finished() || writer.write_all(&[*byte]).await.is_err() {
                break;
            }
            sent += 1;
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        let (after, answer) = closed.await.unwrap();
        assert!(
            sent < header.len(),
            "the server must close before the dribbled header is complete"
        );
        assert!(answer.is_empty(), "no answer without a header: {answer:?}");
        assert!(
            after >= deadline && after < deadline * 3,
            "closed {after:?} after connecting; the deadline was {deadline:?}"
        );
    }

    #[tokio::test]
    async fn at_the_connection_cap_new_connections_wait_for_a_slot() {
        let addr = server_with(
            ProxyMode::Off,
            EchoLimits {
                max_connections: 1,
                ..EchoLimits::default()
            },
        )
        .await;
        let silent = TcpStream::connect(addr).await.unwrap();
        // Let the server accept it (and take the only slot) first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut waiting = TcpStream::connect(addr).await.unwrap();
        waiting.write_all(b"hello\n").await.unwrap();
        let mut answer = Vec::new();
        let early =
            tokio::time::timeout(Duration::from_millis(300), waiting.read_to_end(&mut answer))
                .await;
        assert!(
            early.is_err() && answer.is_empty(),
            "the second connection must wait while the slot is taken"
        );
        drop(silent);
        tokio::time::timeout(Duration::from_secs(5), waiting.read_to_end(&mut answer))
            .await
            .expect("served once the slot is free")
            .unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.contains("request:         hello"), "{answer}");
    }

    #[test]
    fn json_is_chosen_by_accept_or_query() {
        let accept = vec![("Accept".to_owned(), "application/json".to_owned())];
        assert!(wants_json("GET / HTTP/1.1", &accept));
        assert!(wants_json("GET /?a=1&format=json HTTP/1.1", &[]));
        assert!(!wants_json("GET /?format=jsonx HTTP/1.1", &[]));
        assert!(is_http_request_line("GET / HTTP/1.1"));
        assert!(!is_http_request_line("hello there"));
    }
}
