//! The codec's errors: [`DecodeError`] for invalid input, [`EncodeError`] for headers that
//! cannot be written.

use crate::tlv::{TlvFault, kind_name};
use crate::{Family, Version};

/// Why the bytes are not a valid PROXY header. The receiver must abort the connection.
///
/// "Not enough bytes yet" is not an error: decoding returns [`crate::Decoded::Incomplete`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input starts with neither `PROXY` nor the v2 signature.
    #[error("not a PROXY protocol header: the connection starts with {found}")]
    NotProxyProtocol {
        /// The first bytes, escaped.
        found: String,
    },
    /// A valid header of a version this decoder was told not to accept.
    #[error("PROXY protocol {found} header, but only {expected} is accepted")]
    UnexpectedVersion {
        /// The one version accepted.
        expected: Version,
        /// The version found.
        found: Version,
    },
    /// The header is longer than the decoder's maximum.
    #[error("{version} header of {len} bytes is longer than the maximum of {max} bytes")]
    HeaderTooLong {
        /// The version.
        version: Version,
        /// The header's length (v2: 16 + its length field).
        len: usize,
        /// The configured maximum.
        max: usize,
    },

    /// v1: no CRLF within the first 107 bytes (or the configured maximum, if smaller).
    #[error("v1 header: no CRLF within the first {max} bytes")]
    V1NoCrlf {
        /// Where the CRLF had to be by.
        max: usize,
    },
    /// v1: a CR that is not followed by LF.
    #[error("v1 header: CR at byte {at} is not followed by LF")]
    V1LoneCr {
        /// Offset of the CR.
        at: usize,
    },
    /// v1: an LF that is not preceded by CR.
    #[error("v1 header: LF at byte {at} is not preceded by CR")]
    V1LoneLf {
        /// Offset of the LF.
        at: usize,
    },
    /// v1: a byte that cannot appear in a header line (control or non-ASCII).
    #[error("v1 header: invalid byte {byte:#04x} at byte {at}")]
    V1InvalidByte {
        /// Offset of the byte.
        at: usize,
        /// The byte.
        byte: u8,
    },
    /// v1: fields must be separated by exactly one space.
    #[error("v1 header: expected exactly one space before the {field} at byte {at}")]
    V1Spacing {
        /// The field the space precedes.
        field: &'static str,
        /// Offset where the field should start.
        at: usize,
    },
    /// v1: the protocol is not `TCP4`, `TCP6` or `UNKNOWN`.
    #[error("v1 header: unknown protocol {found:?}, expected TCP4, TCP6 or UNKNOWN")]
    V1UnknownProtocol {
        /// What was found.
        found: String,
    },
    /// v1: the line ends before a field.
    #[error("v1 header: missing {field}")]
    V1MissingField {
        /// The missing field.
        field: &'static str,
    },
    /// v1: more after the destination port.
    #[error("v1 header: unexpected data after the destination port at byte {at}")]
    V1TrailingData {
        /// Offset of the extra data.
        at: usize,
    },
    /// v1: an address that is not in canonical form.
    #[error("v1 header: invalid {field} {value:?}: {reason}")]
    V1InvalidAddress {
        /// `source address` or `destination address`.
        field: &'static str,
        /// The text found.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// v1: an address of the other family than the protocol announces.
    #[error("v1 header: {protocol} line carries {field} {value:?} of the other address family")]
    V1FamilyMismatch {
        /// `TCP4` or `TCP6`.
        protocol: &'static str,
        /// `source address` or `destination address`.
        field: &'static str,
        /// The text found.
        value: String,
    },
    /// v1: a port that is not a canonical decimal number in 0..=65535.
    #[error("v1 header: invalid {field} {value:?}: {reason}")]
    V1InvalidPort {
        /// `source port` or `destination port`.
        field: &'static str,
        /// The text found.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// v2: the version nibble of byte 13 is not 2.
    #[error("v2 header: version {found:#x} in byte 13, only 0x2 is defined")]
    V2Version {
        /// The high nibble found.
        found: u8,
    },
    /// v2: the command nibble is neither LOCAL (0) nor PROXY (1).
    #[error("v2 header: command {found:#x} in byte 13, expected 0x0 (LOCAL) or 0x1 (PROXY)")]
    V2Command {
        /// The low nibble found.
        found: u8,
    },
    /// v2: the address family nibble is not 0..=3.
    #[error("v2 header: address family {found:#x} in byte 14, expected 0x0 to 0x3")]
    V2Family {
        /// The high nibble found.
        found: u8,
    },
    /// v2: the transport protocol nibble is not 0..=2.
    #[error("v2 header: transport protocol {found:#x} in byte 14, expected 0x0 to 0x2")]
    V2Protocol {
        /// The low nibble found.
        found: u8,
    },
    /// v2: a family and protocol where exactly one is UNSPEC.
    #[error(
        "v2 header: family/protocol byte {found:#04x} mixes UNSPEC with a specified value \
         (expected 0x00, 0x11, 0x12, 0x21, 0x22, 0x31 or 0x32)"
    )]
    V2FamilyProtocol {
        /// Byte 14.
        found: u8,
    },
    /// v2: the length field is shorter than the family's address block.
    #[error("v2 header: length {len} is shorter than the {needed} address bytes of {family}")]
    V2AddressTooShort {
        /// The family.
        family: Family,
        /// The length field.
        len: usize,
        /// Bytes the family's addresses take.
        needed: usize,
    },
    /// v2: a TLV's 3-byte type and length do not fit.
    #[error(
        "v2 header: {what} at byte {offset} needs 3 bytes for its type and length, only {remaining} remain"
    )]
    V2TlvTruncated {
        /// `TLV` or `SSL sub-TLV`.
        what: &'static str,
        /// Offset in the header.
        offset: usize,
        /// Bytes left.
        remaining: usize,
    },
    /// v2: a TLV's length runs past the end of the header (or of the SSL TLV).
    #[error(
        "v2 header: {what} {kind:#04x} ({name}) at byte {offset} declares {len} bytes but only {remaining} remain"
    )]
    V2TlvOverrun {
        /// `TLV` or `SSL sub-TLV`.
        what: &'static str,
        /// The type byte.
        kind: u8,
        /// The type's name.
        name: &'static str,
        /// Offset in the header.
        offset: usize,
        /// The declared length.
        len: usize,
        /// Bytes left.
        remaining: usize,
    },
    /// v2: a TLV value that breaks its type's rules.
    #[error("v2 header: {what} {kind:#04x} ({name}): {reason}")]
    V2InvalidTlv {
        /// `TLV` or `SSL sub-TLV`.
        what: &'static str,
        /// The type byte.
        kind: u8,
        /// The type's name.
        name: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// v2: the CRC32C TLV does not match the header.
    #[error(
        "v2 header: CRC32C mismatch: the header carries {received:#010x}, its bytes give {computed:#010x}"
    )]
    V2Crc32cMismatch {
        /// The checksum in the TLV.
        received: u32,
        /// The checksum of the header with the field zeroed.
        computed: u32,
    },
}

impl DecodeError {
    /// A short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            DecodeError::NotProxyProtocol { .. } => "not_proxy_protocol",
            DecodeError::UnexpectedVersion { .. } => "unexpected_version",
            DecodeError::HeaderTooLong { .. } => "header_too_long",
            DecodeError::V1NoCrlf { .. } => "v1_no_crlf",
            DecodeError::V1LoneCr { .. } | DecodeError::V1LoneLf { .. } => "v1_line_ending",
            DecodeError::V1InvalidByte { .. }
            | DecodeError::V1Spacing { .. }
            | DecodeError::V1MissingField { .. }
            | DecodeError::V1TrailingData { .. } => "v1_syntax",
            DecodeError::V1UnknownProtocol { .. } => "v1_protocol",
            DecodeError::V1InvalidAddress { .. } => "v1_address",
            DecodeError::V1FamilyMismatch { .. } => "v1_family_mismatch",
            DecodeError::V1InvalidPort { .. } => "v1_port",
            DecodeError::V2Version { .. } => "v2_version",
            DecodeError::V2Command { .. } => "v2_command",
            DecodeError::V2Family { .. }
            | DecodeError::V2Protocol { .. }
            | DecodeError::V2FamilyProtocol { .. } => "v2_family_protocol",
            DecodeError::V2AddressTooShort { .. } => "v2_address_length",
            DecodeError::V2TlvTruncated { .. }
            | DecodeError::V2TlvOverrun { .. }
            | DecodeError::V2InvalidTlv { .. } => "v2_tlv",
            DecodeError::V2Crc32cMismatch { .. } => "v2_crc32c",
        }
    }
}

fn what(in_ssl: bool) -> &'static str {
    if in_ssl { "SSL sub-TLV" } else { "TLV" }
}

impl From<TlvFault> for DecodeError {
    fn from(fault: TlvFault) -> Self {
        match fault {
            TlvFault::Truncated {
                offset,
                remaining,
                in_ssl,
            } => DecodeError::V2TlvTruncated {
                what: what(in_ssl),
                offset,
                remaining,
            },
            TlvFault::Overrun {
                kind,
                offset,
                len,
                remaining,
                in_ssl,
            } => DecodeError::V2TlvOverrun {
                what: what(in_ssl),
                kind,
                name: kind_name(kind, in_ssl),
                offset,
                len,
                remaining,
            },
            TlvFault::Invalid {
                kind,
                in_ssl,
                reason,
            } => DecodeError::V2InvalidTlv {
                what: what(in_ssl),
                kind,
                name: kind_name(kind, in_ssl),
                reason,
            },
        }
    }
}

/// Why a header could not be encoded. Nothing usable is left in the buffer then.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The caller's buffer cannot hold the header.
    #[error(
        "buffer too small: the PROXY header needs {needed} bytes, the buffer holds {available}"
    )]
    BufferTooSmall {
        /// Bytes the header (so far) needs.
        needed: usize,
        /// Length of the caller's buffer.
        available: usize,
    },
    /// A v2 header whose length field would exceed 65535.
    #[error("v2 header too long: {len} bytes after the 16-byte prefix, at most 65535 fit")]
    HeaderTooLong {
        /// Bytes after the fixed 16.
        len: usize,
    },
    /// A TLV value longer than 65535 bytes.
    #[error("TLV {kind:#04x} value of {len} bytes is longer than 65535")]
    TlvTooLong {
        /// The type byte.
        kind: u8,
        /// The value's length.
        len: usize,
    },
    /// A TLV value that a receiver would reject.
    #[error("{what} {kind:#04x} ({name}): {reason}")]
    InvalidTlv {
        /// `TLV` or `SSL sub-TLV`.
        what: &'static str,
        /// The type byte.
        kind: u8,
        /// The type's name.
        name: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// A UNIX socket path longer than the 108 bytes v2 has room for.
    #[error("UNIX socket path of {len} bytes is longer than the 108 bytes v2 carries")]
    UnixPathTooLong {
        /// The path's length.
        len: usize,
    },
    /// Something v1 cannot express (LOCAL, DGRAM, UNIX, TLVs).
    #[error("PROXY v1 cannot carry {what}; use v2")]
    NotInV1 {
        /// What was asked for.
        what: &'static str,
    },
    /// A family and protocol where exactly one is UNSPEC, which receivers reject.
    #[error("{family} with {protocol} transport is not a valid v2 combination")]
    FamilyProtocol {
        /// The family.
        family: Family,
        /// The protocol's spec name.
        protocol: &'static str,
    },
}

impl EncodeError {
    /// A short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            EncodeError::BufferTooSmall { .. } => "buffer_too_small",
            EncodeError::HeaderTooLong { .. } => "header_too_long",
            EncodeError::TlvTooLong { .. } => "tlv_too_long",
            EncodeError::InvalidTlv { .. } => "invalid_tlv",
            EncodeError::UnixPathTooLong { .. } => "unix_path_too_long",
            EncodeError::NotInV1 { .. } => "not_in_v1",
            EncodeError::FamilyProtocol { .. } => "family_protocol",
        }
    }
}

impl From<TlvFault> for EncodeError {
    fn from(fault: TlvFault) -> Self {
        match fault {
            TlvFault::Invalid {
                kind,
                in_ssl,
                reason,
            } => EncodeError::InvalidTlv {
                what: what(in_ssl),
                kind,
                name: kind_name(kind, in_ssl),
                reason,
            },
            TlvFault::Truncated { in_ssl, .. } => EncodeError::InvalidTlv {
                what: what(in_ssl),
                kind: 0,
                name: "raw",
                reason: "raw TLV bytes end inside a type and length",
            },
            TlvFault::Overrun { kind, in_ssl, .. } => EncodeError::InvalidTlv {
                what: what(in_ssl),
                kind,
                name: kind_name(kind, in_ssl),
                reason: "raw TLV length runs past the end of its bytes",
            },
        }
    }
}
