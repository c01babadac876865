//! The network half of the doctor: how a host resolves here, and whether its server answers a
//! plain HTTP request and one that starts with a PROXY header (v1, v2).
//!
//! Every step has a short timeout: the doctor must answer, not hang, on a black-holed address.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use hairpin_proxy_protocol::{V1_MAX_LEN, V2_MAX_ADDR_LEN, Version, encode_header};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long each connect, write and read may take.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// TCP connect.
    pub connect: Duration,
    /// Waiting for the first bytes of an answer.
    pub answer: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(3),
            answer: Duration::from_secs(5),
        }
    }
}

/// How the host resolved on this machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Resolution {
    /// The system resolver (`getaddrinfo`: hosts file, then DNS) returned these addresses.
    Resolved {
        /// In the resolver's order; the first one is probed.
        addresses: Vec<IpAddr>,
    },
    /// The host is an IP address literal: nothing to resolve.
    Literal {
        /// The address.
        address: IpAddr,
    },
    /// The resolver failed.
    Failed {
        /// The resolver's message.
        error: String,
    },
}

impl Resolution {
    /// The address the probes use.
    pub fn first(&self) -> Option<IpAddr> {
        match self {
            Resolution::Resolved { addresses } => addresses.first().copied(),
            Resolution::Literal { address } => Some(*address),
            Resolution::Failed { .. } => None,
        }
    }
}

/// What the hosts file says about the host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HostsFileNote {
    /// The file read.
    pub path: String,
    /// Addresses the file maps the host to (in file order).
    pub addresses: Vec<IpAddr>,
    /// True when one of those lines sits inside hairpin's marked block.
    pub in_hairpin_block: bool,
    /// Set when the file could not be read.
    pub unreadable: Option<String>,
}

/// What one probe connection got back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ProbeOutcome {
    /// The server sent something back; its first line.
    Answered {
        /// First line of the answer (an HTTP status line, usually).
        first_line: String,
    },
    /// The server closed the connection without a byte (what curl calls "Empty reply from
    /// server"): nginx does this on a missing or broken PROXY header.
    EmptyReply,
    /// The server reset the connection.
    Reset,
    /// Connected, but nothing came back in time.
    Timeout,
    /// The TCP connection itself failed (refused, unreachable, timed out).
    ConnectFailed {
        /// The system's message.
        error: String,
    },
}

impl ProbeOutcome {
    /// True when the server answered.
    pub fn answered(&self) -> bool {
        matches!(self, ProbeOutcome::Answered { .. })
    }

    /// True when a TCP connection was established (whatever came back).
    pub fn connected(&self) -> bool {
        !matches!(self, ProbeOutcome::ConnectFailed { .. })
    }

    /// A short description for people.
    pub fn describe(&self) -> String {
        match self {
            ProbeOutcome::Answered { first_line } => format!("answered: {first_line}"),
            ProbeOutcome::EmptyReply => {
                "no answer: the server closed the connection without replying, an \"empty reply\""
                    .into()
            }
            ProbeOutcome::Reset => "no answer: the server reset the connection".into(),
            ProbeOutcome::Timeout => "no answer: nothing came back before the timeout".into(),
            ProbeOutcome::ConnectFailed { error } => format!("cannot connect: {error}"),
        }
    }
}

/// The three probes of one address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Probes {
    /// The address probed.
    pub address: SocketAddr,
    /// A plain `GET / HTTP/1.1`.
    pub plain: ProbeOutcome,
    /// The same request after a PROXY v1 header.
    pub proxy_v1: ProbeOutcome,
    /// The same request after a PROXY v2 header.
    pub proxy_v2: ProbeOutcome,
}

impl Probes {
    /// True when a request that starts with a PROXY header (either version) was answered.
    pub fn proxy_answered(&self) -> bool {
        self.proxy_v1.answered() || self.proxy_v2.answered()
    }
}

/// Resolves `host` with the system resolver (as any client on this machine would).
pub async fn resolve(host: &str, port: u16, timeout: Duration) -> Resolution {
    if let Ok(address) = host.trim_start_matches('[').trim_end_matches(']').parse() {
        return Resolution::Literal { address };
    }
    match tokio::time::timeout(timeout, tokio::net::lookup_host((host, port))).await {
        Ok(Ok(addrs)) => {
            let mut addresses: Vec<IpAddr> = Vec::new();
            for addr in addrs {
                if !addresses.contains(&addr.ip()) {
                    addresses.push(addr.ip());
                }
            }
            if addresses.is_empty() {
                Resolution::Failed {
                    error: "the resolver returned no address".into(),
                }
            } else {
                Resolution::Resolved { addresses }
            }
        }
        Ok(Err(err)) => Resolution::Failed {
            error: err.to_string(),
        },
        Err(_) => Resolution::Failed {
            error: format!("no answer from the resolver within {timeout:?}"),
        },
    }
}

/// Runs the plain, PROXY v1 and PROXY v2 probes against `address`, one after the other.
pub async fn probe(address: SocketAddr, host: &str, timeouts: Timeouts) -> Probes {
    Probes {
        address,
        plain: probe_once(address, host, None, timeouts).await,
        proxy_v1: probe_once(address, host, Some(Version::V1), timeouts).await,
        proxy_v2: probe_once(address, host, Some(Version::V2), timeouts).await,
    }
}

/// One probe connection: an HTTP request, optionally after a PROXY header naming this
/// connection's own addresses (as a load balancer would for this client).
pub async fn probe_once(
    address: SocketAddr,
    host: &str,
    proxy: Option<Version>,
    timeouts: Timeouts,
) -> ProbeOutcome {
    let mut stream = match tokio::time::timeout(timeouts.connect, TcpStream::connect(address)).await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(err)) => {
            return ProbeOutcome::ConnectFailed {
                error: err.to_string(),
            };
        }
        Err(_) => {
            return ProbeOutcome::ConnectFailed {
                error: format!("no TCP answer within {:?}", timeouts.connect),
            };
        }
    };
    let mut request = Vec::with_capacity(256);
    if let Some(version) = proxy {
        let (Ok(local), Ok(peer)) = (stream.local_addr(), stream.peer_addr()) else {
            return ProbeOutcome::ConnectFailed {
                error: "the socket lost its addresses".into(),
            };
        };
        let mut header = [0u8; V2_MAX_ADDR_LEN + V1_MAX_LEN];
        match encode_header(version, local, peer, &mut header) {
            Ok(len) => request.extend_from_slice(&header[..len]),
            Err(err) => {
                return ProbeOutcome::ConnectFailed {
                    error: format!("cannot encode the PROXY header: {err}"),
                };
            }
        }
    }
    request.extend_from_slice(http_request(host).as_bytes());
    let exchange = async {
        stream.write_all(&request).await?;
        let mut answer = Vec::with_capacity(512);
        let mut chunk = [0u8; 512];
        loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&chunk[..n]);
            if answer.contains(&b'\n') || answer.len() >= 512 {
                break;
            }
        }
        Ok::<_, std::io::Error>(answer)
    };
    match tokio::time::timeout(timeouts.answer, exchange).await {
        Err(_) => ProbeOutcome::Timeout,
        Ok(Ok(answer)) if answer.is_empty() => ProbeOutcome::EmptyReply,
        Ok(Ok(answer)) => ProbeOutcome::Answered {
            first_line: first_line(&answer),
        },
        Ok(Err(err)) if is_reset(&err) => ProbeOutcome::Reset,
        Ok(Err(err)) => ProbeOutcome::ConnectFailed {
            error: err.to_string(),
        },
    }
}

fn is_reset(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
    )
}

fn http_request(host: &str) -> String {
    format!(
        "GET / HTTP/1.1\r\nHost: {host}\r\nUser-Agent: hairpin-doctor\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    )
}

fn first_line(answer: &[u8]) -> String {
    let line = answer.split(|b| *b == b'\n').next().unwrap_or_default();
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches('\r');
    let printable: String = text
        .chars()
        .map(|c| if c.is_control() { '.' } else { c })
        .take(120)
        .collect();
    printable
}

/// Reads what the hosts file at `path` says about `host`; `markers` are the prefixes of the
/// first and last line of hairpin's block.
pub fn hosts_file_note(path: &Path, host: &str, markers: (&str, &str)) -> HostsFileNote {
    let mut note = HostsFileNote {
        path: path.display().to_string(),
        ..HostsFileNote::default()
    };
    let content = match std::fs::read_to_string(path) {
        Ok(content) => content,
        Err(err) => {
            note.unreadable = Some(err.to_string());
            return note;
        }
    };
    let mut in_block = false;
    for line in content.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with(markers.0) {
            in_block = true;
            continue;
        }
        if trimmed.starts_with(markers.1) {
            in_block = false;
            continue;
        }
        let data = trimmed.split('#').next().unwrap_or_default();
        let mut fields = data.split_whitespace();
        let Some(Ok(address)) = fields.next().map(str::parse::<IpAddr>) else {
            continue;
        };
        if fields.any(|name| name.eq_ignore_ascii_case(host)) {
            note.addresses.push(address);
            note.in_hairpin_block |= in_block;
        }
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_line_is_trimmed_and_printable() {
        assert_eq!(
            first_line(b"HTTP/1.1 200 OK\r\nServer: x\r\n"),
            "HTTP/1.1 200 OK"
        );
        assert_eq!(first_line(b"\x00\x01abc"), "..abc");
        assert_eq!(first_line(&[b'a'; 500]).len(), 120);
    }

    #[test]
    fn hosts_file_note_finds_entries_and_the_block() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(
            &path,
            "127.0.0.1 localhost\n203.0.113.5 shop.example.com www # comment\n\
             # BEGIN x\n10.96.0.7 Shop.Example.com\n# END x\n10.0.0.1 other shop.example.community\n",
        )
        .unwrap();
        let note = hosts_file_note(&path, "shop.example.com", ("# BEGIN x", "# END x"));
        assert_eq!(
            note.addresses,
            vec![
                "203.0.113.5".parse::<IpAddr>().unwrap(),
                "10.96.0.7".parse().unwrap()
            ]
        );
        assert!(note.in_hairpin_block);
        let none = hosts_file_note(&path, "absent.example.com", ("# BEGIN x", "# END x"));
        assert!(none.addresses.is_empty() && !none.in_hairpin_block && none.unreadable.is_none());
        let missing = hosts_file_note(&dir.path().join("nope"), "a", ("b", "c"));
        assert!(missing.unreadable.is_some());
    }

    #[tokio::test]
    async fn literal_addresses_are_not_resolved() {
        assert_eq!(
            resolve("127.0.0.1", 80, Duration::from_secs(1)).await,
            Resolution::Literal {
                address: "127.0.0.1".parse().unwrap()
            }
        );
        assert_eq!(
            resolve("[::1]", 80, Duration::from_secs(1)).await.first(),
            Some("::1".parse().unwrap())
        );
    }

    #[tokio::test]
    async fn probes_tell_answer_empty_reply_and_refused_apart() {
        use tokio::net::TcpListener;
        // A server that answers only when the request starts with a PROXY v1 header, and closes
        // without a byte otherwise, as nginx with `proxy_protocol` does.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    // Read the whole request first: closing with unread bytes would be a reset.
                    let mut request = Vec::new();
                    let mut chunk = [0u8; 512];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&chunk[..n]),
                        }
                    }
                    if request.starts_with(b"PROXY ") {
                        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await;
                    }
                });
            }
        });
        let probes = probe(addr, "example.com", Timeouts::default()).await;
        assert_eq!(probes.plain, ProbeOutcome::EmptyReply);
        assert_eq!(
            probes.proxy_v1,
            ProbeOutcome::Answered {
                first_line: "HTTP/1.1 200 OK".into()
            }
        );
        assert!(!probes.proxy_v2.answered(), "{:?}", probes.proxy_v2);
        assert!(probes.proxy_answered());

        // Nothing listens on a port just released.
        let closed = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap()
        };
        let refused = probe_once(closed, "x", None, Timeouts::default()).await;
        assert!(
            matches!(refused, ProbeOutcome::ConnectFailed { .. }),
            "{refused:?}"
        );
        assert!(!refused.connected());
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hold = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(stream);
        });
        let timeouts = Timeouts {
            connect: Duration::from_secs(1),
            answer: Duration::from_millis(200),
        };
        assert_eq!(
            probe_once(addr, "x", None, timeouts).await,
            ProbeOutcome::Timeout
        );
        hold.abort();
    }
}
