//! The binary header (version 2).

use std::net::SocketAddr;

use crate::{EncodeError, V2_SIGNATURE};

/// Length of the fixed part: signature, version/command, family/protocol, length.
pub(crate) const FIXED_LEN: usize = 16;
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
