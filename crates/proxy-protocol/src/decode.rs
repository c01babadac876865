//! Streaming decoding: version detection, limits, "need more bytes" versus "invalid".

use crate::v2::V2_MAX_LEN;
use crate::{DecodeError, Header, V1_MAX_LEN, V2_SIGNATURE, Version, v1, v2};

/// Default [`Decoder::max_header_len`]: a v2 header with generous TLVs.
pub const DEFAULT_MAX_HEADER_LEN: usize = 4096;

/// The outcome of decoding the start of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
// A header is ~250 bytes only because of the two inline UNIX addresses; boxing it would
// allocate on every decode to shrink a value that lives on the stack for one call.
#[allow(clippy::large_enum_variant)]
pub enum Decoded<'a> {
    /// A whole, valid header. The payload starts at `buf[len..]`: nothing past the header is
    /// consumed.
    Complete {
        /// The header (TLVs borrow from the input).
        header: Header<'a>,
        /// The header's length in bytes.
        len: usize,
    },
    /// Everything so far is a valid start of a header: read more and decode again from the
    /// start of the connection.
    Incomplete {
        /// At least this many more bytes (1 or more) are needed.
        needed: usize,
    },
}

impl<'a> Decoded<'a> {
    /// The header and its length, when complete.
    pub fn complete(self) -> Option<(Header<'a>, usize)> {
        match self {
            Decoded::Complete { header, len } => Some((header, len)),
            Decoded::Incomplete { .. } => None,
        }
    }

    /// True when more bytes are needed.
    pub const fn is_incomplete(&self) -> bool {
        matches!(self, Decoded::Incomplete { .. })
    }
}

/// A configured decoder. The defaults are strict: both versions accepted, CRC32C verified,
/// headers up to [`DEFAULT_MAX_HEADER_LEN`] bytes (v1 lines always within 107 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoder {
    max_header_len: usize,
    only: Option<Version>,
    verify_crc32c: bool,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// The strict default decoder.
    pub const fn new() -> Self {
        Decoder {
            max_header_len: DEFAULT_MAX_HEADER_LEN,
            only: None,
            verify_crc32c: true,
        }
    }

    /// Rejects headers longer than `max` bytes (v2: 16 + the length field) as soon as their
    /// length is known, without waiting for the rest. A v1 line must end within
    /// `min(max, 107)` bytes. Values above 16 + 65535 change nothing.
    pub const fn max_header_len(mut self, max: usize) -> Self {
        self.max_header_len = max;
        self
    }

    /// Accepts only one version (the spec lets a receiver be configured for either or both).
    pub const fn only(mut self, version: Version) -> Self {
        self.only = Some(version);
        self
    }

    /// Whether a CRC32C TLV is checked (default: yes; a mismatch is an error).
    pub const fn verify_crc32c(mut self, verify: bool) -> Self {
        self.verify_crc32c = verify;
        self
    }

    /// Decodes the header at the start of `buf`, the bytes received so far on a connection.
    pub fn decode<'a>(&self, buf: &'a [u8]) -> Result<Decoded<'a>, DecodeError> {
        let Some(&first) = buf.first() else {
            return Ok(Decoded::Incomplete { needed: 1 });
        };
        let (version, magic): (Version, &[u8]) = match first {
            b'P' => (Version::V1, v1::MAGIC),
            b'\r' => (Version::V2, &V2_SIGNATURE),
            _ => return Err(not_proxy(buf)),
        };
        let seen = buf.len().min(magic.len());
        if buf[..seen] != magic[..seen] {
            return Err(not_proxy(buf));
        }
        if seen < magic.len() {
            let shortest = match version {
                Version::V1 => v1::MIN_LEN,
                Version::V2 => v2::FIXED_LEN,
            };
            return Ok(Decoded::Incomplete {
                needed: shortest - seen,
            });
        }
        if let Some(expected) = self.only
            && expected != version
        {
            return Err(DecodeError::UnexpectedVersion {
                expected,
                found: version,
            });
        }
        match version {
            Version::V1 => v1::decode(buf, self.max_header_len.min(V1_MAX_LEN)),
            Version::V2 => v2::decode(buf, self.max_header_len.min(V2_MAX_LEN), self.verify_crc32c),
        }
    }
}

fn not_proxy(buf: &[u8]) -> DecodeError {
    let shown = &buf[..buf.len().min(16)];
    let more = if buf.len() > shown.len() { "..." } else { "" };
    DecodeError::NotProxyProtocol {
        found: format!("\"{}\"{more}", shown.escape_ascii()),
    }
}

/// Decodes with the strict default [`Decoder`].
///
/// ```
/// use hairpin_proxy_protocol::{decode, Decoded};
///
/// let bytes = b"PROXY TCP4 192.0.2.7 198.51.100.1 51234 443\r\nGET / HTTP/1.1\r\n";
/// let Decoded::Complete { header, len } = decode(bytes).unwrap() else { panic!() };
/// assert_eq!(header.source(), Some("192.0.2.7:51234".parse().unwrap()));
/// assert_eq!(&bytes[len..], b"GET / HTTP/1.1\r\n");
/// assert!(decode(&bytes[..20]).unwrap().is_incomplete());
/// assert!(decode(b"GET / HTTP/1.1\r\n").is_err());
/// ```
pub fn decode(buf: &[u8]) -> Result<Decoded<'_>, DecodeError> {
    Decoder::new().decode(buf)
}
