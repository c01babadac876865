//! Addresses and TLVs taken from the input, encoded and decoded back: the decoder must return
//! exactly what was encoded, and every prefix must be incomplete.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use hairpin_proxy_protocol::tlv::{ClientFlags, SslSubTlv, Tlv};
use hairpin_proxy_protocol::v2::Builder;
use hairpin_proxy_protocol::{Addresses, Decoded, V1_MAX_LEN, Version, decode, encode_header};
use libfuzzer_sys::fuzz_target;

fn take<'a>(data: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if data.len() < n {
        return None;
    }
    let (head, rest) = data.split_at(n);
    *data = rest;
    Some(head)
}

fn addr(data: &mut &[u8]) -> Option<SocketAddr> {
    let kind = take(data, 1)?[0];
    let ip = if kind & 1 == 0 {
        let o: [u8; 4] = take(data, 4)?.try_into().ok()?;
        IpAddr::V4(Ipv4Addr::from(o))
    } else {
        let o: [u8; 16] = take(data, 16)?.try_into().ok()?;
        IpAddr::V6(Ipv6Addr::from(o))
    };
    let port = take(data, 2)?;
    Some(SocketAddr::new(ip, u16::from_be_bytes([port[0], port[1]])))
}

fuzz_target!(|input: &[u8]| {
    let mut data = input;
    let (Some(src), Some(dst)) = (addr(&mut data), addr(&mut data)) else {
        return;
    };
    let expected = Addresses::from_ip(src, dst);

    for version in [Version::V1, Version::V2] {
        let mut buf = [0u8; V1_MAX_LEN];
        let len = encode_header(version, src, dst, &mut buf).expect("fits");
        let (header, used) = decode(&buf[..len])
            .expect("valid")
            .complete()
            .expect("complete");
        assert_eq!(used, len);
        assert_eq!(header.addresses(), &expected);
        for end in 0..len {
            assert!(matches!(
                decode(&buf[..end]),
                Ok(Decoded::Incomplete { .. })
            ));
        }
    }

    // The rest of the input becomes TLVs: [kind, len, value...] records.
    let mut buf = vec![0u8; 4096];
    let Ok(mut builder) = Builder::proxy(&mut buf, src, dst) else {
        return;
    };
    let mut pushed = Vec::new();
    while let Some(head) = take(&mut data, 2) {
        let Some(value) = take(&mut data, usize::from(head[1] % 64)) else {
            break;
        };
        let tlv = match head[0] % 8 {
            0 => Tlv::Alpn(value),
            1 => match std::str::from_utf8(value) {
                Ok(text) => Tlv::Authority(text),
                Err(_) => continue,
            },
            2 => Tlv::Noop(value),
            3 => Tlv::UniqueId(value),
            4 => Tlv::Custom {
                kind: 0xE0 | (head[0] >> 4),
                value,
            },
            5 => {
                let Ok(mut ssl) = builder.ssl(ClientFlags(head[0]), u32::from(head[1])) else {
                    break;
                };
                // The SSL TLV is in the header even when its sub-TLV does not fit.
                pushed.push(0x20);
                let _ = match std::str::from_utf8(value) {
                    Ok(text) if text.is_ascii() => ssl.sub(SslSubTlv::Version(text)).map(drop),
                    Ok(text) => ssl.sub(SslSubTlv::CommonName(text)).map(drop),
                    Err(_) => ssl.sub(SslSubTlv::Custom { kind: 0x30, value }).map(drop),
                };
                continue;
            }
            _ => Tlv::Custom {
                kind: head[0],
                value,
            },
        };
        if builder.tlv(tlv).is_ok() {
            pushed.push(tlv.kind());
        }
    }
    let with_crc = input.first().is_some_and(|b| b & 0x80 != 0);
    let len = if with_crc {
        match builder.finish_with_crc32c() {
            Ok(len) => len,
            Err(_) => return,
        }
    } else {
        builder.finish()
    };
    let (header, used) = decode(&buf[..len])
        .expect("builder output is valid")
        .complete()
        .expect("complete");
    assert_eq!(used, len);
    assert_eq!(header.addresses(), &expected);
    let kinds: Vec<u8> = header.tlvs().map(|tlv| tlv.kind()).collect();
    let crc_pushed = pushed.contains(&0x03);
    let mut expected_kinds = pushed.clone();
    if with_crc && !crc_pushed {
        expected_kinds.push(0x03);
    }
    assert_eq!(kinds, expected_kinds);
});
