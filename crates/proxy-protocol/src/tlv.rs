//! v2 Type-Length-Value extensions.

use std::fmt;

/// Registered TLV types and ranges (`PP2_TYPE_*`, `PP2_SUBTYPE_SSL_*`).
pub mod kind {
    /// Application-Layer Protocol Negotiation (bytes).
    pub const ALPN: u8 = 0x01;
    /// The host name the client asked for (UTF-8), e.g. its TLS SNI.
    pub const AUTHORITY: u8 = 0x02;
    /// CRC32C of the whole header (4 bytes, network order).
    pub const CRC32C: u8 = 0x03;
    /// Padding, ignored.
    pub const NOOP: u8 = 0x04;
    /// Opaque connection id, at most 128 bytes.
    pub const UNIQUE_ID: u8 = 0x05;
    /// TLS information, with sub-TLVs.
    pub const SSL: u8 = 0x20;
    /// SSL sub-TLV: TLS version (US-ASCII).
    pub const SSL_VERSION: u8 = 0x21;
    /// SSL sub-TLV: client certificate Common Name (UTF-8).
    pub const SSL_CN: u8 = 0x22;
    /// SSL sub-TLV: cipher name (US-ASCII).
    pub const SSL_CIPHER: u8 = 0x23;
    /// SSL sub-TLV: certificate signature algorithm (US-ASCII).
    pub const SSL_SIG_ALG: u8 = 0x24;
    /// SSL sub-TLV: certificate key algorithm (US-ASCII).
    pub const SSL_KEY_ALG: u8 = 0x25;
    /// Network namespace name (US-ASCII).
    pub const NETNS: u8 = 0x30;
    /// First type of the application-specific range.
    pub const MIN_CUSTOM: u8 = 0xE0;
    /// Last type of the application-specific range.
    pub const MAX_CUSTOM: u8 = 0xEF;
    /// First type of the experimental range.
    pub const MIN_EXPERIMENT: u8 = 0xF0;
    /// Last type of the experimental range.
    pub const MAX_EXPERIMENT: u8 = 0xF7;
    /// First type reserved for future use.
    pub const MIN_FUTURE: u8 = 0xF8;
    /// Last type reserved for future use.
    pub const MAX_FUTURE: u8 = 0xFF;
    /// Google Cloud (Private Service Connect connection id), in the custom range.
    pub const GCP: u8 = 0xE0;
    /// AWS (VPC endpoint id), in the custom range.
    pub const AWS: u8 = 0xEA;
    /// Azure (Private Link id), in the custom range.
    pub const AZURE: u8 = 0xEE;
}

/// Longest UNIQUE_ID value the spec allows.
pub const UNIQUE_ID_MAX_LEN: usize = 128;

/// The name of a TLV type, for messages.
pub(crate) fn kind_name(kind: u8, in_ssl: bool) -> &'static str {
    match (in_ssl, kind) {
        (false, kind::ALPN) => "ALPN",
        (false, kind::AUTHORITY) => "AUTHORITY",
        (false, kind::CRC32C) => "CRC32C",
        (false, kind::NOOP) => "NOOP",
        (false, kind::UNIQUE_ID) => "UNIQUE_ID",
        (false, kind::SSL) => "SSL",
        (false, kind::NETNS) => "NETNS",
        (true, kind::SSL_VERSION) => "SSL_VERSION",
        (true, kind::SSL_CN) => "SSL_CN",
        (true, kind::SSL_CIPHER) => "SSL_CIPHER",
        (true, kind::SSL_SIG_ALG) => "SSL_SIG_ALG",
        (true, kind::SSL_KEY_ALG) => "SSL_KEY_ALG",
        (_, kind::MIN_CUSTOM..=kind::MAX_CUSTOM) => "custom",
        (_, kind::MIN_EXPERIMENT..=kind::MAX_EXPERIMENT) => "experimental",
        (_, kind::MIN_FUTURE..=kind::MAX_FUTURE) => "future",
        _ => "unassigned",
    }
}

/// The `client` bit field of the SSL TLV.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ClientFlags(pub u8);

impl ClientFlags {
    /// `PP2_CLIENT_SSL`: the client connected over TLS.
    pub const SSL: ClientFlags = ClientFlags(0x01);
    /// `PP2_CLIENT_CERT_CONN`: the client presented a certificate on this connection.
    pub const CERT_CONN: ClientFlags = ClientFlags(0x02);
    /// `PP2_CLIENT_CERT_SESS`: the client presented a certificate in this TLS session.
    pub const CERT_SESS: ClientFlags = ClientFlags(0x04);

    /// True when every bit of `other` is set.
    pub const fn contains(self, other: ClientFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for ClientFlags {
    type Output = ClientFlags;
    fn bitor(self, rhs: ClientFlags) -> ClientFlags {
        ClientFlags(self.0 | rhs.0)
    }
}

impl fmt::Debug for ClientFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_set();
        for (flag, name) in [
            (ClientFlags::SSL, "SSL"),
            (ClientFlags::CERT_CONN, "CERT_CONN"),
            (ClientFlags::CERT_SESS, "CERT_SESS"),
        ] {
            if self.contains(flag) {
                list.entry(&format_args!("{name}"));
            }
        }
        let rest = self.0 & !0x07;
        if rest != 0 {
            list.entry(&format_args!("{rest:#04x}"));
        }
        list.finish()
    }
}

/// One v2 TLV, borrowed from the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tlv<'a> {
    /// `PP2_TYPE_ALPN`: the negotiated application protocol (e.g. `h2`).
    Alpn(&'a [u8]),
    /// `PP2_TYPE_AUTHORITY`: the host name the client asked for.
    Authority(&'a str),
    /// `PP2_TYPE_CRC32C`: checksum of the header (see [`crate::v2::Builder::finish_with_crc32c`]).
    Crc32c(u32),
    /// `PP2_TYPE_NOOP`: padding.
    Noop(&'a [u8]),
    /// `PP2_TYPE_UNIQUE_ID`: opaque connection id, at most 128 bytes.
    UniqueId(&'a [u8]),
    /// `PP2_TYPE_SSL`: TLS details of the client connection.
    Ssl(Ssl<'a>),
    /// `PP2_TYPE_NETNS`: network namespace name.
    Netns(&'a str),
    /// Any type this crate keeps raw: the custom range (0xE0-0xEF: GCP 0xE0, AWS 0xEA,
    /// Azure 0xEE...), experimental and future ranges, unassigned types.
    Custom {
        /// The type byte.
        kind: u8,
        /// The value, as on the wire.
        value: &'a [u8],
    },
}

impl Tlv<'_> {
    /// The type byte.
    pub const fn kind(&self) -> u8 {
        match self {
            Tlv::Alpn(_) => kind::ALPN,
            Tlv::Authority(_) => kind::AUTHORITY,
            Tlv::Crc32c(_) => kind::CRC32C,
            Tlv::Noop(_) => kind::NOOP,
            Tlv::UniqueId(_) => kind::UNIQUE_ID,
            Tlv::Ssl(_) => kind::SSL,
            Tlv::Netns(_) => kind::NETNS,
            Tlv::Custom { kind, .. } => *kind,
        }
    }
}

/// The value of the SSL TLV: client flags, verification result and sub-TLVs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ssl<'a> {
    /// Which of TLS, a certificate on this connection, one in the session apply.
    pub client: ClientFlags,
    /// Zero when the client presented a certificate and it verified; non-zero otherwise.
    pub verify: u32,
    /// Validated sub-TLV bytes.
    pub(crate) sub_tlvs: &'a [u8],
}

impl<'a> Ssl<'a> {
    /// The sub-TLVs, in wire order.
    pub fn sub_tlvs(&self) -> SslSubTlvs<'a> {
        SslSubTlvs(RawTlvs(self.sub_tlvs))
    }

    /// The sub-TLV bytes exactly as on the wire.
    pub const fn raw_sub_tlvs(&self) -> &'a [u8] {
        self.sub_tlvs
    }

    /// The TLS version (e.g. `TLSv1.3`).
    pub fn version(&self) -> Option<&'a str> {
        self.sub_tlvs().find_map(|sub| match sub {
            SslSubTlv::Version(value) => Some(value),
            _ => None,
        })
    }

    /// The client certificate's Common Name.
    pub fn common_name(&self) -> Option<&'a str> {
        self.sub_tlvs().find_map(|sub| match sub {
            SslSubTlv::CommonName(value) => Some(value),
            _ => None,
        })
    }

    /// The cipher (e.g. `ECDHE-RSA-AES128-GCM-SHA256`).
    pub fn cipher(&self) -> Option<&'a str> {
        self.sub_tlvs().find_map(|sub| match sub {
            SslSubTlv::Cipher(value) => Some(value),
            _ => None,
        })
    }

    /// True when the client connected over TLS.
    pub const fn client_ssl(&self) -> bool {
        self.client.contains(ClientFlags::SSL)
    }

    /// True when the client presented a certificate that verified.
    pub const fn verified(&self) -> bool {
        self.verify == 0
    }
}

/// One sub-TLV of the SSL TLV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SslSubTlv<'a> {
    /// `PP2_SUBTYPE_SSL_VERSION` (US-ASCII), e.g. `TLSv1.3`.
    Version(&'a str),
    /// `PP2_SUBTYPE_SSL_CN` (UTF-8): the client certificate's Common Name.
    CommonName(&'a str),
    /// `PP2_SUBTYPE_SSL_CIPHER` (US-ASCII).
    Cipher(&'a str),
    /// `PP2_SUBTYPE_SSL_SIG_ALG` (US-ASCII), e.g. `RSA-SHA256`.
    SigAlg(&'a str),
    /// `PP2_SUBTYPE_SSL_KEY_ALG` (US-ASCII), e.g. `RSA2048`.
    KeyAlg(&'a str),
    /// Any other sub-type, kept raw.
    Custom {
        /// The type byte.
        kind: u8,
        /// The value, as on the wire.
        value: &'a [u8],
    },
}

impl SslSubTlv<'_> {
    /// The type byte.
    pub const fn kind(&self) -> u8 {
        match self {
            SslSubTlv::Version(_) => kind::SSL_VERSION,
            SslSubTlv::CommonName(_) => kind::SSL_CN,
            SslSubTlv::Cipher(_) => kind::SSL_CIPHER,
            SslSubTlv::SigAlg(_) => kind::SSL_SIG_ALG,
            SslSubTlv::KeyAlg(_) => kind::SSL_KEY_ALG,
            SslSubTlv::Custom { kind, .. } => *kind,
        }
    }
}

/// Why a TLV region is malformed (wrapped into the decode or encode error). Offsets count
/// from the start of the header; `in_ssl` marks a sub-TLV of the SSL TLV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TlvFault {
    /// Fewer than 3 bytes left for a TLV's type and length.
    Truncated {
        offset: usize,
        remaining: usize,
        in_ssl: bool,
    },
    /// The length runs past the end of the enclosing region.
    Overrun {
        kind: u8,
        offset: usize,
        len: usize,
        remaining: usize,
        in_ssl: bool,
    },
    /// The value breaks the type's rules.
    Invalid {
        kind: u8,
        in_ssl: bool,
        reason: &'static str,
    },
}

/// Splits one TLV off the front of `bytes`, which starts at `offset` in the header.
pub(crate) fn split(
    bytes: &[u8],
    offset: usize,
    in_ssl: bool,
) -> Result<(u8, &[u8], &[u8]), TlvFault> {
    let [kind, hi, lo, rest @ ..] = bytes else {
        return Err(TlvFault::Truncated {
            offset,
            remaining: bytes.len(),
            in_ssl,
        });
    };
    let len = usize::from(u16::from_be_bytes([*hi, *lo]));
    if len > rest.len() {
        return Err(TlvFault::Overrun {
            kind: *kind,
            offset,
            len,
            remaining: rest.len(),
            in_ssl,
        });
    }
    let (value, rest) = rest.split_at(len);
    Ok((*kind, value, rest))
}

/// Splits TLVs off a validated region: `(kind, value)`.
#[derive(Debug, Clone)]
struct RawTlvs<'a>(&'a [u8]);

impl<'a> Iterator for RawTlvs<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        // Regions handed out by headers are validated: a split error cannot occur here.
        let (kind, value, rest) = split(self.0, 0, false).ok()?;
        self.0 = rest;
        Some((kind, value))
    }
}

fn ascii(value: &[u8]) -> Result<&str, &'static str> {
    match std::str::from_utf8(value) {
        Ok(text) if text.is_ascii() => Ok(text),
        _ => Err("value is not US-ASCII"),
    }
}

fn utf8(value: &[u8]) -> Result<&str, &'static str> {
    std::str::from_utf8(value).map_err(|_| "value is not valid UTF-8")
}

/// Interprets one top-level TLV whose value starts at `offset` in the header, checking it
/// against the spec (SSL sub-TLVs included).
pub(crate) fn parse(kind: u8, value: &[u8], offset: usize) -> Result<Tlv<'_>, TlvFault> {
    let invalid = |reason| TlvFault::Invalid {
        kind,
        in_ssl: false,
        reason,
    };
    Ok(match kind {
        kind::ALPN => Tlv::Alpn(value),
        kind::AUTHORITY => Tlv::Authority(utf8(value).map_err(invalid)?),
        kind::CRC32C => {
            let bytes: [u8; 4] = value
                .try_into()
                .map_err(|_| invalid("value must be exactly 4 bytes"))?;
            Tlv::Crc32c(u32::from_be_bytes(bytes))
        }
        kind::NOOP => Tlv::Noop(value),
        kind::UNIQUE_ID => {
            if value.len() > UNIQUE_ID_MAX_LEN {
                return Err(invalid("value is longer than 128 bytes"));
            }
            Tlv::UniqueId(value)
        }
        kind::SSL => {
            let [client, v0, v1, v2, v3, sub_tlvs @ ..] = value else {
                return Err(invalid(
                    "value is shorter than the 5 bytes of client flags and verify",
                ));
            };
            validate_ssl_subs(sub_tlvs, offset + 5)?;
            Tlv::Ssl(Ssl {
                client: ClientFlags(*client),
                verify: u32::from_be_bytes([*v0, *v1, *v2, *v3]),
                sub_tlvs,
            })
        }
        kind::NETNS => Tlv::Netns(ascii(value).map_err(invalid)?),
        kind => Tlv::Custom { kind, value },
    })
}

/// Interprets one SSL sub-TLV.
pub(crate) fn parse_ssl_sub(kind: u8, value: &[u8]) -> Result<SslSubTlv<'_>, TlvFault> {
    let invalid = |reason| TlvFault::Invalid {
        kind,
        in_ssl: true,
        reason,
    };
    Ok(match kind {
        kind::SSL_VERSION => SslSubTlv::Version(ascii(value).map_err(invalid)?),
        kind::SSL_CN => SslSubTlv::CommonName(utf8(value).map_err(invalid)?),
        kind::SSL_CIPHER => SslSubTlv::Cipher(ascii(value).map_err(invalid)?),
        kind::SSL_SIG_ALG => SslSubTlv::SigAlg(ascii(value).map_err(invalid)?),
        kind::SSL_KEY_ALG => SslSubTlv::KeyAlg(ascii(value).map_err(invalid)?),
        kind => SslSubTlv::Custom { kind, value },
    })
}

/// Checks the sub-TLVs of an SSL TLV; `offset` is where they start in the header.
pub(crate) fn validate_ssl_subs(mut bytes: &[u8], offset: usize) -> Result<(), TlvFault> {
    let total = bytes.len();
    while !bytes.is_empty() {
        let (kind, value, rest) = split(bytes, offset + total - bytes.len(), true)?;
        parse_ssl_sub(kind, value)?;
        bytes = rest;
    }
    Ok(())
}

/// Iterator over a header's TLVs.
#[derive(Debug, Clone)]
pub struct Tlvs<'a>(RawTlvs<'a>);

impl<'a> Tlvs<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Tlvs(RawTlvs(bytes))
    }
}

impl<'a> Iterator for Tlvs<'a> {
    type Item = Tlv<'a>;

    fn next(&mut self) -> Option<Tlv<'a>> {
        let (kind, value) = self.0.next()?;
        parse(kind, value, 0).ok()
    }
}

/// Iterator over the SSL TLV's sub-TLVs.
#[derive(Debug, Clone)]
pub struct SslSubTlvs<'a>(RawTlvs<'a>);

impl<'a> Iterator for SslSubTlvs<'a> {
    type Item = SslSubTlv<'a>;

    fn next(&mut self) -> Option<SslSubTlv<'a>> {
        let (kind, value) = self.0.next()?;
        parse_ssl_sub(kind, value).ok()
    }
}
