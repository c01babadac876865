//! The text header (version 1).

use std::io::Write as _;
use std::net::SocketAddr;

use crate::{EncodeError, V1_MAX_LEN};

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
