//! PROXY protocol v1/v2 codec (no I/O, no allocation on the encode path).
//!
//! Implements the HAProxy specification (`doc/proxy-protocol.txt`): the text header (v1) and the
//! binary header (v2) a load balancer prepends to a forwarded connection so the receiver learns
//! the original client and destination addresses.
//!
//! - Encoding: [`encode_header`] for the common TCP case; [`v2::Builder`] for v2 headers with
//!   TLVs and a CRC32C; [`Header::encode`] for any header. All write into the caller's buffer.
//! - Decoding: [`decode`] (strict defaults) or a configured [`Decoder`]. The result tells a
//!   complete header ([`Decoded::Complete`], with the number of bytes it took: the payload
//!   after it is untouched) from a valid start that needs more bytes
//!   ([`Decoded::Incomplete`]); anything invalid is a [`DecodeError`] that says what is wrong.
//!   TLVs borrow from the input; [`Header::to_owned_header`] copies.
//!
//! ```
//! use std::net::SocketAddr;
//! use hairpin_proxy_protocol::{encode_header, decode, Decoded, Version, V1_MAX_LEN};
//!
//! let src: SocketAddr = "192.0.2.7:51234".parse().unwrap();
//! let dst: SocketAddr = "198.51.100.1:443".parse().unwrap();
//! // V1_MAX_LEN bytes hold any header `encode_header` writes, v1 or v2.
//! let mut buf = [0u8; V1_MAX_LEN];
//! let len = encode_header(Version::V1, src, dst, &mut buf).unwrap();
//! assert_eq!(&buf[..len], b"PROXY TCP4 192.0.2.7 198.51.100.1 51234 443\r\n");
//!
//! let len = encode_header(Version::V2, src, dst, &mut buf).unwrap();
//! let Ok(Decoded::Complete { header, len: used }) = decode(&buf[..len]) else { panic!() };
//! assert_eq!((header.source(), header.destination(), used), (Some(src), Some(dst), len));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod decode;
mod error;
mod model;
pub mod tlv;
mod v1;
pub mod v2;

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

pub use decode::{DEFAULT_MAX_HEADER_LEN, Decoded, Decoder, decode};
pub use error::{DecodeError, EncodeError};
pub use model::{
    Addresses, Command, Family, Header, OwnedHeader, Protocol, UNIX_ADDR_LEN, UnixAddr,
};
pub use v2::V2_MAX_LEN;

/// Longest possible v1 header, CRLF included (`PROXY TCP6` with two full IPv6 addresses).
pub const V1_MAX_LEN: usize = 107;

/// Longest v2 header without TLVs: the 16-byte fixed part plus two 108-byte UNIX addresses.
pub const V2_MAX_ADDR_LEN: usize = 16 + 216;

/// The 12 bytes every v2 header starts with.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// A PROXY protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// The human-readable text header (`PROXY TCP4 ...\r\n`).
    V1,
    /// The binary header, with optional TLVs.
    V2,
}

impl Version {
    /// The canonical lowercase name (`"v1"`, `"v2"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of [`Version::from_str`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown PROXY protocol version {0:?}: expected v1, v2, 1 or 2")]
pub struct ParseVersionError(String);

impl FromStr for Version {
    type Err = ParseVersionError;

    /// Accepts `v1`, `v2`, `1`, `2` (the `v` in either case).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "v1" | "V1" | "1" => Ok(Version::V1),
            "v2" | "V2" | "2" => Ok(Version::V2),
            _ => Err(ParseVersionError(s.to_owned())),
        }
    }
}

/// Writes a PROXY (command PROXY, TCP/STREAM) header for a proxied connection into `buf`;
/// returns the number of bytes written.
///
/// `src` is the original client, `dst` the address the client connected to. Mixed IPv4/IPv6
/// endpoints become v4-mapped IPv6 (as HAProxy does). A buffer of [`V1_MAX_LEN`] bytes always
/// suffices (v2 needs at most 16 + 36); a smaller one that cannot hold this header is an
/// [`EncodeError::BufferTooSmall`], and nothing is written then.
pub fn encode_header(
    version: Version,
    src: SocketAddr,
    dst: SocketAddr,
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    let (src, dst) = same_family(src, dst);
    match version {
        Version::V1 => v1::encode_tcp(src, dst, buf),
        Version::V2 => v2::encode_tcp(src, dst, buf),
    }
}

// Here rather than in `model`, beside `encode_header`: the encoders use the model, and the
// model does not depend on them (no import cycle).
impl Header<'_> {
    /// Encodes this header into `buf` (v2 TLVs copied as they are, a CRC32C TLV recomputed);
    /// returns the number of bytes written.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        match self.version {
            Version::V1 => v1::encode(self, buf),
            Version::V2 => v2::encode(self, buf),
        }
    }
}

/// Maps the IPv4 side of a mixed pair to its v4-mapped IPv6 form, so both share one family.
fn same_family(src: SocketAddr, dst: SocketAddr) -> (SocketAddr, SocketAddr) {
    fn mapped(addr: SocketAddr) -> SocketAddr {
        match addr.ip() {
            IpAddr::V4(ip) => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), addr.port()),
            IpAddr::V6(_) => addr,
        }
    }
    if src.is_ipv4() == dst.is_ipv4() {
        (src, dst)
    } else {
        (mapped(src), mapped(dst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_parses_its_spellings_and_displays_canonically() {
        for (text, version) in [
            ("v1", Version::V1),
            ("V1", Version::V1),
            ("1", Version::V1),
            ("v2", Version::V2),
            ("V2", Version::V2),
            ("2", Version::V2),
        ] {
            assert_eq!(text.parse::<Version>(), Ok(version), "{text}");
        }
        for bad in ["", "v3", "3", "v", "v1 ", "two"] {
            let err = bad.parse::<Version>().unwrap_err();
            assert!(
                err.to_string().contains("unknown PROXY protocol version"),
                "{err}"
            );
        }
        assert_eq!(Version::V1.to_string(), "v1");
        assert_eq!(Version::V2.to_string(), "v2");
    }

    #[test]
    fn mixed_families_are_mapped_to_ipv6() {
        let v4: SocketAddr = "192.0.2.1:1000".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:443".parse().unwrap();
        let (s, d) = same_family(v4, v6);
        assert_eq!(s, "[::ffff:192.0.2.1]:1000".parse::<SocketAddr>().unwrap());
        assert_eq!(d, v6);
        let (s, d) = same_family(v6, v4);
        assert_eq!(s, v6);
        assert_eq!(d, "[::ffff:192.0.2.1]:1000".parse::<SocketAddr>().unwrap());
        assert_eq!(same_family(v4, v4), (v4, v4));
    }
}
