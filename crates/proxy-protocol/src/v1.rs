//! The text header (version 1): `PROXY TCP4|TCP6|UNKNOWN ...\r\n`.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::{
    Addresses, Command, DecodeError, Decoded, EncodeError, Header, Protocol, V1_MAX_LEN, Version,
};

/// The v1 magic.
pub(crate) const MAGIC: &[u8; 5] = b"PROXY";
/// The shortest complete header, `PROXY UNKNOWN\r\n`.
pub(crate) const MIN_LEN: usize = 15;

/// Copies `header` into the start of `buf`, or reports how much room it needs.
fn put(header: &[u8], buf: &mut [u8]) -> Result<usize, EncodeError> {
    let available = buf.len();
    let out = buf
        .get_mut(..header.len())
        .ok_or(EncodeError::BufferTooSmall {
            needed: header.len(),
            available,
        })?;
    out.copy_from_slice(header);
    Ok(header.len())
}

/// `PROXY TCP4|TCP6 <src> <dst> <sport> <dport>\r\n`; both addresses share one family.
pub(crate) fn encode_tcp(
    src: SocketAddr,
    dst: SocketAddr,
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    debug_assert_eq!(src.is_ipv4(), dst.is_ipv4());
    let mut line = [0u8; V1_MAX_LEN];
    if let (SocketAddr::V4(src), SocketAddr::V4(dst)) = (src, dst) {
        let len = write_tcp4(src, dst, &mut line);
        return put(&line[..len], buf);
    }
    let mut cursor = &mut line[..];
    let proto = if src.is_ipv4() { "TCP4" } else { "TCP6" };
    // The longest TCP line (two full IPv6 addresses) is 104 bytes, so this cannot fail.
    write!(
        cursor,
        "PROXY {proto} {} {} {} {}\r\n",
        src.ip(),
        dst.ip(),
        src.port(),
        dst.port()
    )
    .expect("a v1 header fits in V1_MAX_LEN bytes");
    let len = V1_MAX_LEN - cursor.len();
    put(&line[..len], buf)
}

/// The TCP4 line of two IPv4 addresses, digit by digit: `write!` through `core::fmt` cost about
/// 3,000 instructions per header, a sixth of the proxy's user-space instructions per new
/// connection (issue 48; callgrind). The same bytes as `Display` (`tcp4_line_is_display`).
/// Returns the length; the longest line, 56 bytes, fits `line`.
fn write_tcp4(src: SocketAddrV4, dst: SocketAddrV4, line: &mut [u8; V1_MAX_LEN]) -> usize {
    fn digits(value: u16, line: &mut [u8], at: &mut usize) {
        let mut text = [0u8; 5];
        let mut start = text.len();
        let mut rest = value;
        loop {
            start -= 1;
            // (A remainder of 10 is below 256.)
            text[start] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        let len = text.len() - start;
        line[*at..*at + len].copy_from_slice(&text[start..]);
        *at += len;
    }
    fn ip(addr: Ipv4Addr, line: &mut [u8], at: &mut usize) {
        for (i, octet) in addr.octets().into_iter().enumerate() {
            if i > 0 {
                line[*at] = b'.';
                *at += 1;
            }
            digits(u16::from(octet), line, at);
        }
    }
    const START: &[u8] = b"PROXY TCP4 ";
    line[..START.len()].copy_from_slice(START);
    let mut at = START.len();
    ip(*src.ip(), line, &mut at);
    line[at] = b' ';
    at += 1;
    ip(*dst.ip(), line, &mut at);
    line[at] = b' ';
    at += 1;
    digits(src.port(), line, &mut at);
    line[at] = b' ';
    at += 1;
    digits(dst.port(), line, &mut at);
    line[at..at + 2].copy_from_slice(b"\r\n");
    at + 2
}

/// Encodes any header v1 can express.
pub(crate) fn encode(header: &Header<'_>, buf: &mut [u8]) -> Result<usize, EncodeError> {
    if header.command == Command::Local {
        return Err(EncodeError::NotInV1 {
            what: "the LOCAL command",
        });
    }
    if !header.tlvs.is_empty() {
        return Err(EncodeError::NotInV1 { what: "TLVs" });
    }
    match (header.addresses, header.protocol) {
        (Addresses::Unspec, Protocol::Unspec) => put(b"PROXY UNKNOWN\r\n", buf),
        (Addresses::Unix { .. }, _) => Err(EncodeError::NotInV1 {
            what: "UNIX socket addresses",
        }),
        (_, Protocol::Dgram) => Err(EncodeError::NotInV1 {
            what: "DGRAM (UDP) connections",
        }),
        (addresses, Protocol::Stream) => match (addresses.source(), addresses.destination()) {
            (Some(src), Some(dst)) => encode_tcp(src, dst, buf),
            _ => Err(EncodeError::FamilyProtocol {
                family: addresses.family(),
                protocol: "STREAM",
            }),
        },
        (addresses, Protocol::Unspec) => Err(EncodeError::FamilyProtocol {
            family: addresses.family(),
            protocol: "UNSPEC",
        }),
    }
}

/// Decodes a v1 header from `buf`, which starts with (a prefix of) `PROXY`. The CRLF must come
/// within `max_len` bytes (at most [`V1_MAX_LEN`]).
pub(crate) fn decode(buf: &[u8], max_len: usize) -> Result<Decoded<'_>, DecodeError> {
    let window = &buf[..buf.len().min(max_len)];
    for (at, &byte) in window.iter().enumerate() {
        match byte {
            b'\n' => return Err(DecodeError::V1LoneLf { at }),
            b'\r' => match window.get(at + 1) {
                Some(b'\n') => {
                    let header = parse_line(&buf[..at], true)?
                        .expect("a complete line yields a header or an error");
                    return Ok(Decoded::Complete {
                        header,
                        len: at + 2,
                    });
                }
                Some(_) => return Err(DecodeError::V1LoneCr { at }),
                None => break,
            },
            _ => {}
        }
    }
    if buf.len() >= max_len {
        return Err(DecodeError::V1NoCrlf { max: max_len });
    }
    // Not complete yet: reject what is already wrong instead of waiting for more bytes.
    let partial = buf.strip_suffix(b"\r").unwrap_or(buf);
    parse_line(partial, false)?;
    Ok(Decoded::Incomplete {
        needed: MIN_LEN.saturating_sub(buf.len()).max(1),
    })
}

const FIELDS: [&str; 6] = [
    "PROXY",
    "protocol",
    "source address",
    "destination address",
    "source port",
    "destination port",
];

/// Parses a line without its CRLF. When `complete` is false the line is only the start of a
/// header: a valid prefix gives `Ok(None)`.
fn parse_line(line: &[u8], complete: bool) -> Result<Option<Header<'static>>, DecodeError> {
    let magic_len = line.len().min(MAGIC.len());
    debug_assert_eq!(&line[..magic_len], &MAGIC[..magic_len]);
    // tokens[0] stays empty: the magic was checked by the caller.
    let mut tokens: [&[u8]; 6] = [&[]; 6];
    let mut pos = magic_len;
    let mut tcp6 = false;
    for (i, field) in FIELDS.iter().enumerate().skip(1) {
        if pos == line.len() {
            return if complete {
                Err(DecodeError::V1MissingField { field })
            } else {
                Ok(None)
            };
        }
        if line[pos] != b' ' {
            return Err(DecodeError::V1Spacing { field, at: pos });
        }
        pos += 1;
        let start = pos;
        while pos < line.len() && line[pos] != b' ' {
            pos += 1;
        }
        let token = &line[start..pos];
        let partial = !complete && pos == line.len();
        if token.is_empty() {
            if partial {
                return Ok(None);
            }
            return Err(if pos == line.len() {
                DecodeError::V1MissingField { field }
            } else {
                DecodeError::V1Spacing { field, at: start }
            });
        }
        if let Some(at) = token.iter().position(|b| !b.is_ascii_graphic()) {
            return Err(DecodeError::V1InvalidByte {
                at: start + at,
                byte: token[at],
            });
        }
        if i == 1 {
            match token {
                b"UNKNOWN" => {
                    // Anything between UNKNOWN and the CRLF is ignored.
                    return Ok(complete.then(unknown));
                }
                b"TCP4" => {}
                b"TCP6" => tcp6 = true,
                _ if partial
                    && [&b"TCP4"[..], b"TCP6", b"UNKNOWN"]
                        .iter()
                        .any(|p| p.starts_with(token)) =>
                {
                    return Ok(None);
                }
                _ => {
                    return Err(DecodeError::V1UnknownProtocol {
                        found: token.escape_ascii().to_string(),
                    });
                }
            }
        } else if partial {
            check_partial(field, token, tcp6)?;
            return Ok(None);
        }
        tokens[i] = token;
    }
    if pos < line.len() {
        return Err(DecodeError::V1TrailingData { at: pos });
    }
    if !complete {
        // Everything is there but the CRLF.
        return Ok(None);
    }
    let sport = parse_port(FIELDS[4], tokens[4])?;
    let dport = parse_port(FIELDS[5], tokens[5])?;
    let addresses = if tcp6 {
        Addresses::Inet6 {
            source: SocketAddrV6::new(parse_v6(FIELDS[2], tokens[2])?, sport, 0, 0),
            destination: SocketAddrV6::new(parse_v6(FIELDS[3], tokens[3])?, dport, 0, 0),
        }
    } else {
        Addresses::Inet {
            source: SocketAddrV4::new(parse_v4(FIELDS[2], tokens[2])?, sport),
            destination: SocketAddrV4::new(parse_v4(FIELDS[3], tokens[3])?, dport),
        }
    };
    Ok(Some(Header::new(
        Version::V1,
        Command::Proxy,
        Protocol::Stream,
        addresses,
    )))
}

fn unknown() -> Header<'static> {
    Header::new(
        Version::V1,
        Command::Proxy,
        Protocol::Unspec,
        Addresses::Unspec,
    )
}

fn text(token: &[u8]) -> String {
    token.escape_ascii().to_string()
}

/// Rejects the start of a field that cannot become valid, whatever follows.
fn check_partial(field: &'static str, token: &[u8], tcp6: bool) -> Result<(), DecodeError> {
    let is_port = field.ends_with("port");
    if is_port {
        if !token.iter().all(u8::is_ascii_digit) {
            return Err(port_error(field, token, "not a decimal number"));
        }
        if token.len() > 1 && token[0] == b'0' {
            return Err(port_error(field, token, "leading zero"));
        }
        if token.len() > 5 {
            return Err(port_error(field, token, "above 65535"));
        }
    } else if tcp6 {
        let ok = |b: &u8| b.is_ascii_hexdigit() || *b == b':' || *b == b'.';
        if !token.iter().all(ok) || token.len() > 45 {
            return Err(address_error(field, token, "not an IPv6 address"));
        }
    } else {
        if token.contains(&b':') {
            return Err(mismatch("TCP4", field, token));
        }
        if !token.iter().all(|b| b.is_ascii_digit() || *b == b'.') || token.len() > 15 {
            return Err(address_error(
                field,
                token,
                "not 4 decimal numbers separated by dots",
            ));
        }
    }
    Ok(())
}

fn port_error(field: &'static str, token: &[u8], reason: &'static str) -> DecodeError {
    DecodeError::V1InvalidPort {
        field,
        value: text(token),
        reason,
    }
}

fn address_error(field: &'static str, token: &[u8], reason: &'static str) -> DecodeError {
    DecodeError::V1InvalidAddress {
        field,
        value: text(token),
        reason,
    }
}

fn mismatch(protocol: &'static str, field: &'static str, token: &[u8]) -> DecodeError {
    DecodeError::V1FamilyMismatch {
        protocol,
        field,
        value: text(token),
    }
}

/// A decimal number without leading zeros (`0` itself is fine).
fn decimal(token: &[u8], max: u32) -> Result<u32, &'static str> {
    if token.is_empty() || !token.iter().all(u8::is_ascii_digit) {
        return Err("not a decimal number");
    }
    if token.len() > 1 && token[0] == b'0' {
        return Err("leading zero");
    }
    if token.len() > 5 {
        return Err("out of range");
    }
    let value = token
        .iter()
        .fold(0u32, |acc, b| acc * 10 + u32::from(b - b'0'));
    if value > max {
        return Err("out of range");
    }
    Ok(value)
}

fn parse_port(field: &'static str, token: &[u8]) -> Result<u16, DecodeError> {
    match decimal(token, 65535) {
        Ok(port) => Ok(port as u16),
        Err("out of range") => Err(port_error(field, token, "above 65535")),
        Err(reason) => Err(port_error(field, token, reason)),
    }
}

fn parse_v4(field: &'static str, token: &[u8]) -> Result<Ipv4Addr, DecodeError> {
    if token.contains(&b':') {
        return Err(mismatch("TCP4", field, token));
    }
    let mut octets = [0u8; 4];
    let mut parts = token.split(|&b| b == b'.');
    for octet in &mut octets {
        let part = parts.next().ok_or_else(|| {
            address_error(field, token, "not 4 decimal numbers separated by dots")
        })?;
        *octet = match decimal(part, 255) {
            Ok(value) => value as u8,
            Err("out of range") => return Err(address_error(field, token, "number above 255")),
            Err("leading zero") => return Err(address_error(field, token, "leading zero")),
            Err(_) => {
                return Err(address_error(
                    field,
                    token,
                    "not 4 decimal numbers separated by dots",
                ));
            }
        };
    }
    if parts.next().is_some() {
        return Err(address_error(
            field,
            token,
            "not 4 decimal numbers separated by dots",
        ));
    }
    Ok(Ipv4Addr::from(octets))
}

fn parse_v6(field: &'static str, token: &[u8]) -> Result<Ipv6Addr, DecodeError> {
    let parsed = std::str::from_utf8(token)
        .ok()
        .and_then(|text| text.parse::<IpAddr>().ok());
    match parsed {
        Some(IpAddr::V6(ip)) => Ok(ip),
        Some(IpAddr::V4(_)) => Err(mismatch("TCP6", field, token)),
        None => Err(address_error(field, token, "not an IPv6 address")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(src: &str, dst: &str) -> String {
        let mut buf = [0u8; V1_MAX_LEN];
        let (src, dst) = crate::same_family(src.parse().unwrap(), dst.parse().unwrap());
        let len = encode_tcp(src, dst, &mut buf).unwrap();
        String::from_utf8(buf[..len].to_vec()).unwrap()
    }

    #[test]
    fn tcp4_line() {
        assert_eq!(
            encode("192.168.0.1:56324", "192.168.0.11:443"),
            "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"
        );
    }

    /// The digit-by-digit TCP4 line is the `Display` one, for every octet and every port
    /// length (and the longest line).
    #[test]
    fn tcp4_line_is_display() {
        let mut ports: Vec<u16> = vec![0, 1, 9, 10, 99, 100, 999, 1000, 9999, 10000, 65535];
        ports.extend((0..=65535u16).step_by(257));
        for octet in 0..=255u8 {
            for &port in &ports {
                let src = SocketAddrV4::new(Ipv4Addr::new(octet, 255 - octet, 0, octet / 3), port);
                let dst = SocketAddrV4::new(Ipv4Addr::new(255, octet, octet / 7, 9), 65535 - port);
                let mut line = [0u8; V1_MAX_LEN];
                let len = write_tcp4(src, dst, &mut line);
                let display = format!(
                    "PROXY TCP4 {} {} {} {}\r\n",
                    src.ip(),
                    dst.ip(),
                    src.port(),
                    dst.port()
                );
                assert_eq!(std::str::from_utf8(&line[..len]).unwrap(), display);
            }
        }
        let longest = encode("255.255.255.255:65535", "255.255.255.255:65535");
        assert_eq!(
            longest,
            "PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n"
        );
    }

    #[test]
    fn tcp6_line_uses_compressed_addresses() {
        assert_eq!(
            encode("[::1]:1", "[2001:db8::2]:65535"),
            "PROXY TCP6 ::1 2001:db8::2 1 65535\r\n"
        );
    }

    #[test]
    fn mixed_families_become_tcp6_with_v4_mapped_addresses() {
        assert_eq!(
            encode("10.0.0.1:1234", "[::1]:80"),
            "PROXY TCP6 ::ffff:10.0.0.1 ::1 1234 80\r\n"
        );
    }

    #[test]
    fn longest_tcp6_line_fits_v1_max_len() {
        // The spec's 107 is `PROXY UNKNOWN` with two full IPv6 addresses; TCP6 is 3 shorter.
        let full = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535";
        let line = encode(full, full);
        assert_eq!(line.len(), V1_MAX_LEN - 3);
        assert!(line.ends_with("65535 65535\r\n"));
    }

    #[test]
    fn too_small_buffer_is_an_error_and_writes_nothing() {
        let src = "192.168.0.1:56324".parse().unwrap();
        let dst = "192.168.0.11:443".parse().unwrap();
        let needed = "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n".len();
        let mut buf = vec![0xAAu8; needed - 1];
        assert_eq!(
            encode_tcp(src, dst, &mut buf),
            Err(EncodeError::BufferTooSmall {
                needed,
                available: needed - 1
            })
        );
        assert!(buf.iter().all(|&b| b == 0xAA));
        let mut empty = [];
        assert!(encode_tcp(src, dst, &mut empty).is_err());
    }
}
