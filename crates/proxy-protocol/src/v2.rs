//! The binary header (version 2), its decoder and a TLV [`Builder`].

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::model::UNIX_ADDR_LEN;
use crate::tlv::{self, ClientFlags, SslSubTlv, Tlv, kind};
use crate::{
    Addresses, Command, DecodeError, Decoded, EncodeError, Family, Header, Protocol, UnixAddr,
    V2_SIGNATURE, Version,
};

/// Length of the fixed part: signature, version/command, family/protocol, length.
pub const FIXED_LEN: usize = 16;
/// The longest v2 header: the fixed part plus a 65535-byte length.
pub const V2_MAX_LEN: usize = FIXED_LEN + u16::MAX as usize;
/// Version 2 in the high nibble, command PROXY in the low one.
const VERSION_PROXY: u8 = 0x21;
/// AF_INET + STREAM.
const TCP4: u8 = 0x11;
/// AF_INET6 + STREAM.
const TCP6: u8 = 0x21;

/// A PROXY/STREAM header for two endpoints of one family, no TLVs.
pub(crate) fn encode_tcp(
    src: SocketAddr,
    dst: SocketAddr,
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    let (family, addr_len) = match (src, dst) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) => (TCP4, 12),
        (SocketAddr::V6(_), SocketAddr::V6(_)) => (TCP6, 36),
        _ => unreachable!("encode_header maps mixed families to IPv6"),
    };
    let needed = FIXED_LEN + addr_len;
    let available = buf.len();
    let out = buf
        .get_mut(..needed)
        .ok_or(EncodeError::BufferTooSmall { needed, available })?;
    out[..12].copy_from_slice(&V2_SIGNATURE);
    out[12] = VERSION_PROXY;
    out[13] = family;
    out[14..16].copy_from_slice(&(addr_len as u16).to_be_bytes());
    let addrs = &mut out[FIXED_LEN..];
    match (src, dst) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            addrs[0..4].copy_from_slice(&s.ip().octets());
            addrs[4..8].copy_from_slice(&d.ip().octets());
            addrs[8..10].copy_from_slice(&s.port().to_be_bytes());
            addrs[10..12].copy_from_slice(&d.port().to_be_bytes());
        }
        (SocketAddr::V6(s), SocketAddr::V6(d)) => {
            addrs[0..16].copy_from_slice(&s.ip().octets());
            addrs[16..32].copy_from_slice(&d.ip().octets());
            addrs[32..34].copy_from_slice(&s.port().to_be_bytes());
            addrs[34..36].copy_from_slice(&d.port().to_be_bytes());
        }
        _ => unreachable!("families checked above"),
    }
    Ok(needed)
}

/// Encodes any header: TLVs copied in order, a CRC32C TLV recomputed.
pub(crate) fn encode(header: &Header<'_>, buf: &mut [u8]) -> Result<usize, EncodeError> {
    let mut builder = Builder::new(buf, header.command, header.protocol, &header.addresses)?;
    for tlv in header.tlvs() {
        builder.tlv(tlv)?;
    }
    if builder.crc_at.is_some() {
        builder.finish_with_crc32c()
    } else {
        Ok(builder.finish())
    }
}

fn protocol_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Unspec => "UNSPEC",
        Protocol::Stream => "STREAM",
        Protocol::Dgram => "DGRAM",
    }
}

/// Writes a v2 header, TLV by TLV, straight into the caller's buffer (no allocation).
///
/// The buffer holds a complete, consistent header after every call: each TLV updates the
/// length field. [`Builder::finish_with_crc32c`] adds (or refreshes) the CRC32C TLV.
///
/// ```
/// use hairpin_proxy_protocol::{decode, Decoded, v2::Builder, tlv::{ClientFlags, SslSubTlv, Tlv}};
///
/// let mut buf = [0u8; 512];
/// let mut builder = Builder::proxy(
///     &mut buf,
///     "192.0.2.7:51234".parse().unwrap(),
///     "198.51.100.1:443".parse().unwrap(),
/// )?;
/// builder.tlv(Tlv::Authority("example.com"))?;
/// builder
///     .ssl(ClientFlags::SSL, 0)?
///     .sub(SslSubTlv::Version("TLSv1.3"))?;
/// let len = builder.finish_with_crc32c()?;
///
/// let Ok(Decoded::Complete { header, len: used }) = decode(&buf[..len]) else { panic!() };
/// assert_eq!(used, len);
/// assert_eq!(header.authority(), Some("example.com"));
/// assert_eq!(header.ssl().and_then(|ssl| ssl.version()), Some("TLSv1.3"));
/// # Ok::<(), hairpin_proxy_protocol::EncodeError>(())
/// ```
#[derive(Debug)]
pub struct Builder<'b> {
    buf: &'b mut [u8],
    len: usize,
    /// Offset of the CRC32C TLV's value, once there is one.
    crc_at: Option<usize>,
}

impl<'b> Builder<'b> {
    /// Starts a header with the given command, transport protocol and addresses.
    ///
    /// A family and protocol where exactly one is UNSPEC is refused: receivers reject it.
    pub fn new(
        buf: &'b mut [u8],
        command: Command,
        protocol: Protocol,
        addresses: &Addresses,
    ) -> Result<Self, EncodeError> {
        let family = addresses.family();
        if (family == Family::Unspec) != (protocol == Protocol::Unspec) {
            return Err(EncodeError::FamilyProtocol {
                family,
                protocol: protocol_name(protocol),
            });
        }
        let mut builder = Builder {
            buf,
            len: 0,
            crc_at: None,
        };
        let fixed = builder.reserve(FIXED_LEN + family.v2_address_len())?;
        fixed[..12].copy_from_slice(&V2_SIGNATURE);
        fixed[12] = 0x20
            | match command {
                Command::Local => 0x0,
                Command::Proxy => 0x1,
            };
        let family_nibble = match family {
            Family::Unspec => 0x0,
            Family::Inet => 0x1,
            Family::Inet6 => 0x2,
            Family::Unix => 0x3,
        };
        let protocol_nibble = match protocol {
            Protocol::Unspec => 0x0,
            Protocol::Stream => 0x1,
            Protocol::Dgram => 0x2,
        };
        fixed[13] = family_nibble << 4 | protocol_nibble;
        let addrs = &mut fixed[FIXED_LEN..];
        match addresses {
            Addresses::Unspec => {}
            Addresses::Inet {
                source,
                destination,
            } => {
                addrs[0..4].copy_from_slice(&source.ip().octets());
                addrs[4..8].copy_from_slice(&destination.ip().octets());
                addrs[8..10].copy_from_slice(&source.port().to_be_bytes());
                addrs[10..12].copy_from_slice(&destination.port().to_be_bytes());
            }
            Addresses::Inet6 {
                source,
                destination,
            } => {
                addrs[0..16].copy_from_slice(&source.ip().octets());
                addrs[16..32].copy_from_slice(&destination.ip().octets());
                addrs[32..34].copy_from_slice(&source.port().to_be_bytes());
                addrs[34..36].copy_from_slice(&destination.port().to_be_bytes());
            }
            Addresses::Unix {
                source,
                destination,
            } => {
                addrs[..UNIX_ADDR_LEN].copy_from_slice(source.as_bytes());
                addrs[UNIX_ADDR_LEN..].copy_from_slice(destination.as_bytes());
            }
        }
        Ok(builder)
    }

    /// `PROXY` / `STREAM` for a TCP connection; a mixed IPv4/IPv6 pair becomes v4-mapped IPv6.
    pub fn proxy(
        buf: &'b mut [u8],
        source: SocketAddr,
        destination: SocketAddr,
    ) -> Result<Self, EncodeError> {
        Builder::new(
            buf,
            Command::Proxy,
            Protocol::Stream,
            &Addresses::from_ip(source, destination),
        )
    }

    /// `LOCAL` with no addresses, as a proxy sends for its own health checks.
    pub fn local(buf: &'b mut [u8]) -> Result<Self, EncodeError> {
        Builder::new(buf, Command::Local, Protocol::Unspec, &Addresses::Unspec)
    }

    /// Bytes written so far (a complete header).
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Always false: a header has at least its 16 fixed bytes.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Grows the header by `n` bytes and returns them, keeping the length field in step.
    fn reserve(&mut self, n: usize) -> Result<&mut [u8], EncodeError> {
        let end = self.len + n;
        if end > V2_MAX_LEN {
            return Err(EncodeError::HeaderTooLong {
                len: end - FIXED_LEN,
            });
        }
        if end > self.buf.len() {
            return Err(EncodeError::BufferTooSmall {
                needed: end,
                available: self.buf.len(),
            });
        }
        let start = self.len;
        self.len = end;
        if end >= FIXED_LEN {
            let body = (end - FIXED_LEN) as u16;
            self.buf[14..16].copy_from_slice(&body.to_be_bytes());
        }
        Ok(&mut self.buf[start..end])
    }

    /// Appends a TLV whose value is the concatenation of `parts`; returns the TLV's offset.
    fn put(&mut self, kind: u8, parts: &[&[u8]]) -> Result<usize, EncodeError> {
        let len: usize = parts.iter().map(|part| part.len()).sum();
        let len16 = u16::try_from(len).map_err(|_| EncodeError::TlvTooLong { kind, len })?;
        let at = self.len;
        let out = self.reserve(3 + len)?;
        out[0] = kind;
        out[1..3].copy_from_slice(&len16.to_be_bytes());
        let mut pos = 3;
        for part in parts {
            out[pos..pos + part.len()].copy_from_slice(part);
            pos += part.len();
        }
        Ok(at)
    }

    /// Appends a TLV. Values are checked as a receiver would (AUTHORITY UTF-8, UNIQUE_ID at
    /// most 128 bytes, NETNS US-ASCII; a `Custom` TLV with a registered type must follow that
    /// type's rules). At most one CRC32C TLV: its value is written as given, and
    /// [`Builder::finish_with_crc32c`] replaces it with the real checksum.
    pub fn tlv(&mut self, tlv: Tlv<'_>) -> Result<&mut Self, EncodeError> {
        match tlv {
            Tlv::Alpn(value) => self.checked(kind::ALPN, value)?,
            Tlv::Authority(value) => self.checked(kind::AUTHORITY, value.as_bytes())?,
            Tlv::Crc32c(value) => self.checked(kind::CRC32C, &value.to_be_bytes())?,
            Tlv::Noop(value) => self.checked(kind::NOOP, value)?,
            Tlv::UniqueId(value) => self.checked(kind::UNIQUE_ID, value)?,
            Tlv::Ssl(ssl) => {
                let mut flags_verify = [0u8; 5];
                flags_verify[0] = ssl.client.0;
                flags_verify[1..].copy_from_slice(&ssl.verify.to_be_bytes());
                self.put(kind::SSL, &[&flags_verify, ssl.raw_sub_tlvs()])?;
            }
            Tlv::Netns(value) => self.checked(kind::NETNS, value.as_bytes())?,
            Tlv::Custom { kind, value } => self.checked(kind, value)?,
        }
        Ok(self)
    }

    fn checked(&mut self, kind: u8, value: &[u8]) -> Result<(), EncodeError> {
        tlv::parse(kind, value, 0)?;
        if kind == kind::CRC32C && self.crc_at.is_some() {
            return Err(EncodeError::InvalidTlv {
                what: "TLV",
                kind,
                name: "CRC32C",
                reason: "a header carries at most one",
            });
        }
        let at = self.put(kind, &[value])?;
        if kind == kind::CRC32C {
            self.crc_at = Some(at + 3);
        }
        Ok(())
    }

    /// Starts an SSL TLV; add its sub-TLVs through the returned [`SslBuilder`].
    pub fn ssl(
        &mut self,
        client: ClientFlags,
        verify: u32,
    ) -> Result<SslBuilder<'_, 'b>, EncodeError> {
        let mut flags_verify = [0u8; 5];
        flags_verify[0] = client.0;
        flags_verify[1..].copy_from_slice(&verify.to_be_bytes());
        let at = self.put(kind::SSL, &[&flags_verify])?;
        Ok(SslBuilder { parent: self, at })
    }

    /// The header's length; the buffer's first `len` bytes are the header.
    pub fn finish(self) -> usize {
        self.len
    }

    /// Adds a CRC32C TLV (or reuses the one already added), computes the checksum over the
    /// whole header with the field zeroed, stores it, and returns the header's length.
    pub fn finish_with_crc32c(mut self) -> Result<usize, EncodeError> {
        let at = match self.crc_at {
            Some(at) => at,
            None => self.put(kind::CRC32C, &[&[0; 4]])? + 3,
        };
        self.buf[at..at + 4].fill(0);
        let crc = crc32c::crc32c(&self.buf[..self.len]);
        self.buf[at..at + 4].copy_from_slice(&crc.to_be_bytes());
        Ok(self.len)
    }
}

/// Adds sub-TLVs to an SSL TLV that a [`Builder`] started; each one updates the SSL TLV's and
/// the header's lengths.
#[derive(Debug)]
pub struct SslBuilder<'p, 'b> {
    parent: &'p mut Builder<'b>,
    /// Offset of the SSL TLV's type byte.
    at: usize,
}

impl SslBuilder<'_, '_> {
    /// Appends a sub-TLV (strings checked: US-ASCII, or UTF-8 for the Common Name).
    pub fn sub(&mut self, sub: SslSubTlv<'_>) -> Result<&mut Self, EncodeError> {
        let (kind, value) = match sub {
            SslSubTlv::Version(text) => (kind::SSL_VERSION, text.as_bytes()),
            SslSubTlv::CommonName(text) => (kind::SSL_CN, text.as_bytes()),
            SslSubTlv::Cipher(text) => (kind::SSL_CIPHER, text.as_bytes()),
            SslSubTlv::SigAlg(text) => (kind::SSL_SIG_ALG, text.as_bytes()),
            SslSubTlv::KeyAlg(text) => (kind::SSL_KEY_ALG, text.as_bytes()),
            SslSubTlv::Custom { kind, value } => (kind, value),
        };
        tlv::parse_ssl_sub(kind, value)?;
        let parent = &mut *self.parent;
        let ssl_len = usize::from(u16::from_be_bytes([
            parent.buf[self.at + 1],
            parent.buf[self.at + 2],
        ]));
        let new_len = ssl_len + 3 + value.len();
        let new_len16 = u16::try_from(new_len).map_err(|_| EncodeError::TlvTooLong {
            kind: kind::SSL,
            len: new_len,
        })?;
        parent.put(kind, &[value])?;
        parent.buf[self.at + 1..self.at + 3].copy_from_slice(&new_len16.to_be_bytes());
        Ok(self)
    }
}

/// Decodes a v2 header from `buf`, which starts with (a prefix of) the signature.
pub(crate) fn decode(
    buf: &[u8],
    max_len: usize,
    verify_crc32c: bool,
) -> Result<Decoded<'_>, DecodeError> {
    let (command, family, protocol) = match fixed_fields(buf)? {
        Some(fields) => fields,
        None => {
            return Ok(Decoded::Incomplete {
                needed: FIXED_LEN - buf.len(),
            });
        }
    };
    let body_len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let total = FIXED_LEN + body_len;
    if total > max_len {
        return Err(DecodeError::HeaderTooLong {
            version: Version::V2,
            len: total,
            max: max_len,
        });
    }
    let needed = family.v2_address_len();
    // LOCAL ignores the family: a block too short for it is discarded whole (a sender that
    // writes LOCAL with a family and no addresses is still accepted, as the spec requires).
    let discard = command == Command::Local && body_len < needed;
    if body_len < needed && !discard {
        return Err(DecodeError::V2AddressTooShort {
            family,
            len: body_len,
            needed,
        });
    }
    if buf.len() < total {
        return Ok(Decoded::Incomplete {
            needed: total - buf.len(),
        });
    }
    let header = &buf[..total];
    if discard {
        return Ok(Decoded::Complete {
            header: Header::new(Version::V2, command, Protocol::Unspec, Addresses::Unspec),
            len: total,
        });
    }
    let addresses = parse_addresses(family, &header[FIXED_LEN..FIXED_LEN + needed]);
    let tlvs_at = FIXED_LEN + needed;
    let tlvs = &header[tlvs_at..];
    let crc = validate_tlvs(tlvs, tlvs_at)?;
    if let (Some(at), true) = (crc, verify_crc32c) {
        let received = u32::from_be_bytes(header[at..at + 4].try_into().expect("4 bytes"));
        let crc = crc32c::crc32c(&header[..at]);
        let crc = crc32c::crc32c_append(crc, &[0; 4]);
        let computed = crc32c::crc32c_append(crc, &header[at + 4..]);
        if computed != received {
            return Err(DecodeError::V2Crc32cMismatch { received, computed });
        }
    }
    Ok(Decoded::Complete {
        header: Header {
            version: Version::V2,
            command,
            protocol,
            addresses,
            tlvs,
        },
        len: total,
    })
}

/// Checks bytes 13 and 14 as soon as they arrive; `None` until all 16 fixed bytes are there.
fn fixed_fields(buf: &[u8]) -> Result<Option<(Command, Family, Protocol)>, DecodeError> {
    let command = match buf.get(12) {
        None => return Ok(None),
        Some(&byte) => {
            if byte >> 4 != 0x2 {
                return Err(DecodeError::V2Version { found: byte >> 4 });
            }
            match byte & 0x0F {
                0x0 => Command::Local,
                0x1 => Command::Proxy,
                found => return Err(DecodeError::V2Command { found }),
            }
        }
    };
    let (family, protocol) = match buf.get(13) {
        None => return Ok(None),
        Some(&byte) => {
            let family = match byte >> 4 {
                0x0 => Family::Unspec,
                0x1 => Family::Inet,
                0x2 => Family::Inet6,
                0x3 => Family::Unix,
                found => return Err(DecodeError::V2Family { found }),
            };
            let protocol = match byte & 0x0F {
                0x0 => Protocol::Unspec,
                0x1 => Protocol::Stream,
                0x2 => Protocol::Dgram,
                found => return Err(DecodeError::V2Protocol { found }),
            };
            if (family == Family::Unspec) != (protocol == Protocol::Unspec) {
                return Err(DecodeError::V2FamilyProtocol { found: byte });
            }
            (family, protocol)
        }
    };
    if buf.len() < FIXED_LEN {
        return Ok(None);
    }
    Ok(Some((command, family, protocol)))
}

fn port(bytes: &[u8]) -> u16 {
    u16::from_be_bytes([bytes[0], bytes[1]])
}

fn parse_addresses(family: Family, block: &[u8]) -> Addresses {
    match family {
        Family::Unspec => Addresses::Unspec,
        Family::Inet => {
            let ip =
                |at: usize| Ipv4Addr::new(block[at], block[at + 1], block[at + 2], block[at + 3]);
            Addresses::Inet {
                source: SocketAddrV4::new(ip(0), port(&block[8..])),
                destination: SocketAddrV4::new(ip(4), port(&block[10..])),
            }
        }
        Family::Inet6 => {
            let ip = |at: usize| {
                let octets: [u8; 16] = block[at..at + 16].try_into().expect("16 bytes");
                Ipv6Addr::from(octets)
            };
            Addresses::Inet6 {
                source: SocketAddrV6::new(ip(0), port(&block[32..]), 0, 0),
                destination: SocketAddrV6::new(ip(16), port(&block[34..]), 0, 0),
            }
        }
        Family::Unix => {
            let addr = |at: usize| {
                let bytes: [u8; UNIX_ADDR_LEN] =
                    block[at..at + UNIX_ADDR_LEN].try_into().expect("108 bytes");
                UnixAddr::from_bytes(bytes)
            };
            Addresses::Unix {
                source: addr(0),
                destination: addr(UNIX_ADDR_LEN),
            }
        }
    }
}

/// Checks every TLV (which must exactly fill the region starting at `offset` in the header);
/// returns the header offset of the CRC32C value, if there is one.
fn validate_tlvs(mut bytes: &[u8], offset: usize) -> Result<Option<usize>, DecodeError> {
    let total = bytes.len();
    let mut crc_at = None;
    while !bytes.is_empty() {
        let at = offset + total - bytes.len();
        let (kind, value, rest) = tlv::split(bytes, at, false)?;
        tlv::parse(kind, value, at + 3)?;
        if kind == kind::CRC32C {
            if crc_at.is_some() {
                return Err(DecodeError::V2InvalidTlv {
                    what: "TLV",
                    kind,
                    name: "CRC32C",
                    reason: "appears more than once",
                });
            }
            crc_at = Some(at + 3);
        }
        bytes = rest;
    }
    Ok(crc_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(src: &str, dst: &str) -> Vec<u8> {
        let mut buf = [0u8; crate::V2_MAX_ADDR_LEN];
        let (src, dst) = crate::same_family(src.parse().unwrap(), dst.parse().unwrap());
        let len = encode_tcp(src, dst, &mut buf).unwrap();
        buf[..len].to_vec()
    }

    #[test]
    fn tcp4_header_bytes() {
        let mut expected = V2_SIGNATURE.to_vec();
        expected.extend_from_slice(&[0x21, 0x11, 0x00, 0x0c]);
        expected.extend_from_slice(&[192, 0, 2, 1, 198, 51, 100, 2]);
        expected.extend_from_slice(&[0xdc, 0x04, 0x01, 0xbb]);
        assert_eq!(encode("192.0.2.1:56324", "198.51.100.2:443"), expected);
    }

    #[test]
    fn tcp6_header_bytes() {
        let bytes = encode("[2001:db8::1]:1", "[::1]:65535");
        assert_eq!(bytes.len(), 16 + 36);
        assert_eq!(&bytes[..12], &V2_SIGNATURE);
        assert_eq!(&bytes[12..16], &[0x21, 0x21, 0x00, 36]);
        let src: std::net::Ipv6Addr = "2001:db8::1".parse().unwrap();
        assert_eq!(&bytes[16..32], &src.octets());
        assert_eq!(&bytes[32..48], &std::net::Ipv6Addr::LOCALHOST.octets());
        assert_eq!(&bytes[48..52], &[0, 1, 0xff, 0xff]);
    }

    #[test]
    fn mixed_families_become_inet6_with_v4_mapped_address() {
        let bytes = encode("127.0.0.1:9", "[::1]:80");
        assert_eq!(bytes[13], 0x21);
        assert_eq!(
            &bytes[16..32],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1]
        );
    }

    #[test]
    fn too_small_buffer_is_an_error_and_writes_nothing() {
        let src = "192.0.2.1:1".parse().unwrap();
        let dst = "192.0.2.2:2".parse().unwrap();
        let mut buf = [0xAAu8; 27];
        assert_eq!(
            encode_tcp(src, dst, &mut buf),
            Err(EncodeError::BufferTooSmall {
                needed: 28,
                available: 27
            })
        );
        assert!(buf.iter().all(|&b| b == 0xAA));
    }
}
