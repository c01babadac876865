//! What a header says: command, transport protocol, addresses and (v2) TLVs.

use std::fmt;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::tlv::{Ssl, Tlv, Tlvs};
use crate::{EncodeError, Version};

/// The v2 command (v1 headers always carry `Proxy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// `LOCAL` (0x0): the proxy opened the connection itself (a health check); the receiver
    /// uses the real connection endpoints.
    Local,
    /// `PROXY` (0x1): the connection is relayed; the header carries the original endpoints.
    Proxy,
}

/// The transport protocol of the proxied connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Unknown or unspecified (v2 `UNSPEC`, v1 `UNKNOWN`).
    Unspec,
    /// `SOCK_STREAM`: TCP or a UNIX stream socket.
    Stream,
    /// `SOCK_DGRAM`: UDP or a UNIX datagram socket (v2 only).
    Dgram,
}

/// The address family of the proxied connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// `AF_UNSPEC`: no address information.
    Unspec,
    /// `AF_INET`: IPv4.
    Inet,
    /// `AF_INET6`: IPv6.
    Inet6,
    /// `AF_UNIX`: 108-byte socket paths (v2 only).
    Unix,
}

impl Family {
    /// Bytes of the v2 address block for this family (ports included).
    pub const fn v2_address_len(self) -> usize {
        match self {
            Family::Unspec => 0,
            Family::Inet => 12,
            Family::Inet6 => 36,
            Family::Unix => 216,
        }
    }

    /// The spec's name (`AF_INET`...), as used in error messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            Family::Unspec => "AF_UNSPEC",
            Family::Inet => "AF_INET",
            Family::Inet6 => "AF_INET6",
            Family::Unix => "AF_UNIX",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Length of a UNIX socket address in a v2 header.
pub const UNIX_ADDR_LEN: usize = 108;

/// A UNIX socket address as carried by v2: 108 bytes, unused bytes zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnixAddr([u8; UNIX_ADDR_LEN]);

impl UnixAddr {
    /// A path (or abstract name, starting with a NUL byte) of at most 108 bytes, zero-padded.
    pub fn new(path: &[u8]) -> Result<Self, EncodeError> {
        let mut bytes = [0u8; UNIX_ADDR_LEN];
        bytes
            .get_mut(..path.len())
            .ok_or(EncodeError::UnixPathTooLong { len: path.len() })?
            .copy_from_slice(path);
        Ok(UnixAddr(bytes))
    }

    /// The 108 bytes exactly as on the wire.
    pub const fn from_bytes(bytes: [u8; UNIX_ADDR_LEN]) -> Self {
        UnixAddr(bytes)
    }

    /// The 108 bytes exactly as on the wire.
    pub const fn as_bytes(&self) -> &[u8; UNIX_ADDR_LEN] {
        &self.0
    }

    /// The path without its zero padding (trailing NUL bytes removed).
    pub fn path(&self) -> &[u8] {
        let end = self.0.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        &self.0[..end]
    }
}

impl fmt::Debug for UnixAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UnixAddr({:?})", String::from_utf8_lossy(self.path()))
    }
}

/// The endpoints a header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Addresses {
    /// No address information (v1 `UNKNOWN`, v2 `AF_UNSPEC`).
    Unspec,
    /// IPv4 endpoints.
    Inet {
        /// The original client.
        source: SocketAddrV4,
        /// The address the client connected to.
        destination: SocketAddrV4,
    },
    /// IPv6 endpoints.
    Inet6 {
        /// The original client.
        source: SocketAddrV6,
        /// The address the client connected to.
        destination: SocketAddrV6,
    },
    /// UNIX socket endpoints (v2 only).
    Unix {
        /// The original client.
        source: UnixAddr,
        /// The address the client connected to.
        destination: UnixAddr,
    },
}

impl Addresses {
    /// IP endpoints; a mixed IPv4/IPv6 pair becomes two v4-mapped IPv6 addresses.
    pub fn from_ip(source: SocketAddr, destination: SocketAddr) -> Self {
        match crate::same_family(source, destination) {
            (SocketAddr::V4(source), SocketAddr::V4(destination)) => Addresses::Inet {
                source,
                destination,
            },
            (SocketAddr::V6(source), SocketAddr::V6(destination)) => Addresses::Inet6 {
                source: SocketAddrV6::new(*source.ip(), source.port(), 0, 0),
                destination: SocketAddrV6::new(*destination.ip(), destination.port(), 0, 0),
            },
            _ => unreachable!("same_family returns one family"),
        }
    }

    /// The address family.
    pub const fn family(&self) -> Family {
        match self {
            Addresses::Unspec => Family::Unspec,
            Addresses::Inet { .. } => Family::Inet,
            Addresses::Inet6 { .. } => Family::Inet6,
            Addresses::Unix { .. } => Family::Unix,
        }
    }

    /// The source as an IP socket address, when the family is INET or INET6.
    pub fn source(&self) -> Option<SocketAddr> {
        match *self {
            Addresses::Inet { source, .. } => Some(source.into()),
            Addresses::Inet6 { source, .. } => Some(source.into()),
            _ => None,
        }
    }

    /// The destination as an IP socket address, when the family is INET or INET6.
    pub fn destination(&self) -> Option<SocketAddr> {
        match *self {
            Addresses::Inet { destination, .. } => Some(destination.into()),
            Addresses::Inet6 { destination, .. } => Some(destination.into()),
            _ => None,
        }
    }
}

/// A decoded header. TLVs borrow from the input (zero-copy); [`Header::to_owned_header`] makes
/// an owned copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header<'a> {
    pub(crate) version: Version,
    pub(crate) command: Command,
    pub(crate) protocol: Protocol,
    pub(crate) addresses: Addresses,
    /// Validated TLV bytes (v2 only).
    pub(crate) tlvs: &'a [u8],
}

impl<'a> Header<'a> {
    /// A header without TLVs. Not every combination can be encoded in every version:
    /// [`Header::encode`] says which cannot.
    pub const fn new(
        version: Version,
        command: Command,
        protocol: Protocol,
        addresses: Addresses,
    ) -> Self {
        Header {
            version,
            command,
            protocol,
            addresses,
            tlvs: &[],
        }
    }

    /// `PROXY` / `STREAM` for IP endpoints, as a load balancer writes for a TCP connection.
    pub fn tcp(version: Version, source: SocketAddr, destination: SocketAddr) -> Self {
        Header::new(
            version,
            Command::Proxy,
            Protocol::Stream,
            Addresses::from_ip(source, destination),
        )
    }

    /// The version this header was decoded from (or is to be encoded as).
    pub const fn version(&self) -> Version {
        self.version
    }

    /// `LOCAL` or `PROXY` (always `PROXY` in v1).
    pub const fn command(&self) -> Command {
        self.command
    }

    /// The transport protocol.
    pub const fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The endpoints.
    pub const fn addresses(&self) -> &Addresses {
        &self.addresses
    }

    /// The original client's address, for a `PROXY` header with IP endpoints.
    pub fn source(&self) -> Option<SocketAddr> {
        match self.command {
            Command::Proxy => self.addresses.source(),
            Command::Local => None,
        }
    }

    /// The address the client connected to, for a `PROXY` header with IP endpoints.
    pub fn destination(&self) -> Option<SocketAddr> {
        match self.command {
            Command::Proxy => self.addresses.destination(),
            Command::Local => None,
        }
    }

    /// The TLVs, in wire order.
    pub fn tlvs(&self) -> Tlvs<'a> {
        Tlvs::new(self.tlvs)
    }

    /// The TLV bytes exactly as on the wire (empty for v1).
    pub const fn raw_tlvs(&self) -> &'a [u8] {
        self.tlvs
    }

    /// The first ALPN TLV.
    pub fn alpn(&self) -> Option<&'a [u8]> {
        self.tlvs().find_map(|tlv| match tlv {
            Tlv::Alpn(value) => Some(value),
            _ => None,
        })
    }

    /// The first AUTHORITY TLV (the client's SNI or host name).
    pub fn authority(&self) -> Option<&'a str> {
        self.tlvs().find_map(|tlv| match tlv {
            Tlv::Authority(value) => Some(value),
            _ => None,
        })
    }

    /// The CRC32C TLV's value (already verified when the decoder verifies checksums).
    pub fn crc32c(&self) -> Option<u32> {
        self.tlvs().find_map(|tlv| match tlv {
            Tlv::Crc32c(value) => Some(value),
            _ => None,
        })
    }

    /// The first UNIQUE_ID TLV.
    pub fn unique_id(&self) -> Option<&'a [u8]> {
        self.tlvs().find_map(|tlv| match tlv {
            Tlv::UniqueId(value) => Some(value),
            _ => None,
        })
    }

    /// The first SSL TLV.
    pub fn ssl(&self) -> Option<Ssl<'a>> {
        self.tlvs().find_map(|tlv| match tlv {
            Tlv::Ssl(ssl) => Some(ssl),
            _ => None,
        })
    }

    /// The first NETNS TLV.
    pub fn netns(&self) -> Option<&'a str> {
        self.tlvs().find_map(|tlv| match tlv {
            Tlv::Netns(value) => Some(value),
            _ => None,
        })
    }

    /// The value of the first TLV of a type this crate keeps raw (custom range 0xE0-0xEF such
    /// as AWS 0xEA, Azure 0xEE, GCP 0xE0; experimental, future and unassigned types).
    pub fn custom(&self, kind: u8) -> Option<&'a [u8]> {
        self.tlvs().find_map(|tlv| match tlv {
            Tlv::Custom { kind: k, value } if k == kind => Some(value),
            _ => None,
        })
    }

    /// An owned copy that does not borrow the input.
    pub fn to_owned_header(&self) -> OwnedHeader {
        OwnedHeader {
            version: self.version,
            command: self.command,
            protocol: self.protocol,
            addresses: self.addresses,
            tlvs: self.tlvs.to_vec(),
        }
    }
}

/// A [`Header`] that owns its TLV bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnedHeader {
    version: Version,
    command: Command,
    protocol: Protocol,
    addresses: Addresses,
    tlvs: Vec<u8>,
}

impl OwnedHeader {
    /// A borrowed view, with all of [`Header`]'s accessors.
    pub fn as_header(&self) -> Header<'_> {
        Header {
            version: self.version,
            command: self.command,
            protocol: self.protocol,
            addresses: self.addresses,
            tlvs: &self.tlvs,
        }
    }
}

impl From<Header<'_>> for OwnedHeader {
    fn from(header: Header<'_>) -> Self {
        header.to_owned_header()
    }
}
