//! Property tests: encode -> decode round trips, decoding arbitrary bytes never panics, and
//! every prefix of a valid header is reported as incomplete.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use hairpin_proxy_protocol::tlv::{ClientFlags, SslSubTlv, Tlv, kind};
use hairpin_proxy_protocol::v2::Builder;
use hairpin_proxy_protocol::{
    Addresses, Command, Decoded, Decoder, Header, Protocol, UnixAddr, V1_MAX_LEN, V2_SIGNATURE,
    Version, decode, encode_header,
};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        ..ProptestConfig::default()
    }
}

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|o| IpAddr::V4(Ipv4Addr::from(o))),
        any::<[u8; 16]>().prop_map(|o| IpAddr::V6(Ipv6Addr::from(o))),
        // v4-mapped and compressible addresses exercise the text forms.
        any::<[u8; 4]>().prop_map(|o| IpAddr::V6(Ipv4Addr::from(o).to_ipv6_mapped())),
        (any::<u16>(), any::<u16>())
            .prop_map(|(a, b)| IpAddr::V6(Ipv6Addr::new(a, 0, 0, 0, 0, 0, 0, b))),
    ]
}

fn socket_addr() -> impl Strategy<Value = SocketAddr> {
    (ip(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::new(ip, port))
}

fn unix_addr() -> impl Strategy<Value = UnixAddr> {
    proptest::collection::vec(any::<u8>(), 0..=108).prop_map(|path| UnixAddr::new(&path).unwrap())
}

/// An owned description of a TLV to push through the builder.
#[derive(Debug, Clone)]
enum TlvSpec {
    Alpn(Vec<u8>),
    Authority(String),
    Noop(Vec<u8>),
    UniqueId(Vec<u8>),
    Netns(String),
    Custom(u8, Vec<u8>),
    Ssl(u8, u32, Vec<SubSpec>),
}

#[derive(Debug, Clone)]
enum SubSpec {
    Version(String),
    CommonName(String),
    Cipher(String),
    SigAlg(String),
    KeyAlg(String),
    Custom(u8, Vec<u8>),
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn sub_spec() -> impl Strategy<Value = SubSpec> {
    prop_oneof![
        "[ -~]{0,16}".prop_map(SubSpec::Version),
        ".{0,16}".prop_map(SubSpec::CommonName),
        "[ -~]{0,32}".prop_map(SubSpec::Cipher),
        "[ -~]{0,16}".prop_map(SubSpec::SigAlg),
        "[ -~]{0,16}".prop_map(SubSpec::KeyAlg),
        ((0x26u8..=0xff), bytes(16)).prop_map(|(k, v)| SubSpec::Custom(k, v)),
    ]
}

fn tlv_spec() -> impl Strategy<Value = TlvSpec> {
    prop_oneof![
        bytes(16).prop_map(TlvSpec::Alpn),
        ".{0,32}".prop_map(TlvSpec::Authority),
        bytes(16).prop_map(TlvSpec::Noop),
        proptest::collection::vec(any::<u8>(), 0..=128).prop_map(TlvSpec::UniqueId),
        "[ -~]{0,16}".prop_map(TlvSpec::Netns),
        (kind::MIN_CUSTOM..=kind::MAX_FUTURE, bytes(32)).prop_map(|(k, v)| TlvSpec::Custom(k, v)),
        (
            any::<u8>(),
            any::<u32>(),
            proptest::collection::vec(sub_spec(), 0..4)
        )
            .prop_map(|(c, v, subs)| TlvSpec::Ssl(c, v, subs)),
    ]
}

#[derive(Debug, Clone)]
struct HeaderSpec {
    command: Command,
    protocol: Protocol,
    addresses: Addresses,
    tlvs: Vec<TlvSpec>,
    crc: bool,
}

fn addresses_and_protocol() -> impl Strategy<Value = (Addresses, Protocol)> {
    let proto = prop_oneof![Just(Protocol::Stream), Just(Protocol::Dgram)];
    prop_oneof![
        Just((Addresses::Unspec, Protocol::Unspec)),
        (socket_addr(), socket_addr(), proto.clone())
            .prop_map(|(s, d, p)| (Addresses::from_ip(s, d), p)),
        (unix_addr(), unix_addr(), proto).prop_map(|(s, d, p)| {
            (
                Addresses::Unix {
                    source: s,
                    destination: d,
                },
                p,
            )
        }),
    ]
}

fn header_spec() -> impl Strategy<Value = HeaderSpec> {
    (
        prop_oneof![Just(Command::Local), Just(Command::Proxy)],
        addresses_and_protocol(),
        proptest::collection::vec(tlv_spec(), 0..6),
        any::<bool>(),
    )
        .prop_map(|(command, (addresses, protocol), tlvs, crc)| HeaderSpec {
            command,
            protocol,
            addresses,
            tlvs,
            crc,
        })
}

fn build(spec: &HeaderSpec, buf: &mut [u8]) -> usize {
    let mut builder = Builder::new(buf, spec.command, spec.protocol, &spec.addresses).unwrap();
    for tlv in &spec.tlvs {
        match tlv {
            TlvSpec::Alpn(v) => builder.tlv(Tlv::Alpn(v)).map(drop),
            TlvSpec::Authority(v) => builder.tlv(Tlv::Authority(v)).map(drop),
            TlvSpec::Noop(v) => builder.tlv(Tlv::Noop(v)).map(drop),
            TlvSpec::UniqueId(v) => builder.tlv(Tlv::UniqueId(v)).map(drop),
            TlvSpec::Netns(v) => builder.tlv(Tlv::Netns(v)).map(drop),
            TlvSpec::Custom(k, v) => builder.tlv(Tlv::Custom { kind: *k, value: v }).map(drop),
            TlvSpec::Ssl(client, verify, subs) => {
                let mut ssl = builder.ssl(ClientFlags(*client), *verify).unwrap();
                for sub in subs {
                    let sub = match sub {
                        SubSpec::Version(s) => SslSubTlv::Version(s),
                        SubSpec::CommonName(s) => SslSubTlv::CommonName(s),
                        SubSpec::Cipher(s) => SslSubTlv::Cipher(s),
                        SubSpec::SigAlg(s) => SslSubTlv::SigAlg(s),
                        SubSpec::KeyAlg(s) => SslSubTlv::KeyAlg(s),
                        SubSpec::Custom(k, v) => SslSubTlv::Custom { kind: *k, value: v },
                    };
                    ssl.sub(sub).unwrap();
                }
                Ok(())
            }
        }
        .unwrap();
    }
    if spec.crc {
        builder.finish_with_crc32c().unwrap()
    } else {
        builder.finish()
    }
}

/// Checks a decoded TLV against the spec it was built from.
fn assert_tlv(spec: &TlvSpec, tlv: Tlv<'_>) {
    match (spec, tlv) {
        (TlvSpec::Alpn(v), Tlv::Alpn(d)) => assert_eq!(v.as_slice(), d),
        (TlvSpec::Authority(v), Tlv::Authority(d)) => assert_eq!(v, d),
        (TlvSpec::Noop(v), Tlv::Noop(d)) => assert_eq!(v.as_slice(), d),
        (TlvSpec::UniqueId(v), Tlv::UniqueId(d)) => assert_eq!(v.as_slice(), d),
        (TlvSpec::Netns(v), Tlv::Netns(d)) => assert_eq!(v, d),
        (TlvSpec::Custom(k, v), Tlv::Custom { kind, value }) => {
            assert_eq!((*k, v.as_slice()), (kind, value));
        }
        (TlvSpec::Ssl(client, verify, subs), Tlv::Ssl(ssl)) => {
            assert_eq!(ssl.client, ClientFlags(*client));
            assert_eq!(ssl.verify, *verify);
            let decoded: Vec<_> = ssl.sub_tlvs().collect();
            assert_eq!(decoded.len(), subs.len());
            for (sub, got) in subs.iter().zip(decoded) {
                let expected = match sub {
                    SubSpec::Version(s) => SslSubTlv::Version(s),
                    SubSpec::CommonName(s) => SslSubTlv::CommonName(s),
                    SubSpec::Cipher(s) => SslSubTlv::Cipher(s),
                    SubSpec::SigAlg(s) => SslSubTlv::SigAlg(s),
                    SubSpec::KeyAlg(s) => SslSubTlv::KeyAlg(s),
                    SubSpec::Custom(k, v) => SslSubTlv::Custom { kind: *k, value: v },
                };
                assert_eq!(got, expected);
            }
        }
        (spec, tlv) => panic!("built {spec:?}, decoded {tlv:?}"),
    }
}

const PAYLOAD: &[u8] = b"\r\n\r\nPROXY payload";

proptest! {
    #![proptest_config(config())]

    #[test]
    fn v2_builder_round_trips_addresses_and_tlvs(spec in header_spec()) {
        let mut buf = vec![0u8; 8192];
        let len = build(&spec, &mut buf);
        let mut wire = buf[..len].to_vec();
        wire.extend_from_slice(PAYLOAD);
        let Ok(Decoded::Complete { header, len: used }) = decode(&wire) else {
            panic!("{:?}", decode(&wire));
        };
        prop_assert_eq!(used, len, "the payload must not be consumed");
        prop_assert_eq!(header.version(), Version::V2);
        prop_assert_eq!(header.command(), spec.command);
        prop_assert_eq!(header.protocol(), spec.protocol);
        prop_assert_eq!(header.addresses(), &spec.addresses);
        let decoded: Vec<Tlv<'_>> = header.tlvs().filter(|t| t.kind() != kind::CRC32C).collect();
        prop_assert_eq!(decoded.len(), spec.tlvs.len());
        for (tlv_spec, tlv) in spec.tlvs.iter().zip(decoded) {
            assert_tlv(tlv_spec, tlv);
        }
        prop_assert_eq!(header.crc32c().is_some(), spec.crc);
        // Re-encoding the decoded header gives the same bytes.
        let mut again = vec![0u8; 8192];
        let len2 = header.encode(&mut again).unwrap();
        prop_assert_eq!(&again[..len2], &buf[..len]);
    }

    #[test]
    fn encode_header_round_trips_for_both_versions(src in socket_addr(), dst in socket_addr(), v2 in any::<bool>()) {
        let version = if v2 { Version::V2 } else { Version::V1 };
        let mut buf = [0u8; V1_MAX_LEN + PAYLOAD.len()];
        let len = encode_header(version, src, dst, &mut buf).unwrap();
        buf[len..len + PAYLOAD.len()].copy_from_slice(PAYLOAD);
        let (header, used) = decode(&buf[..len + PAYLOAD.len()]).unwrap().complete().unwrap();
        prop_assert_eq!(used, len);
        prop_assert_eq!(header.version(), version);
        prop_assert_eq!(header.addresses(), &Addresses::from_ip(src, dst));
        if src.is_ipv4() == dst.is_ipv4() {
            prop_assert_eq!(header.source(), Some(src));
            prop_assert_eq!(header.destination(), Some(dst));
        }
        // The same header through the generic path.
        let mut again = [0u8; V1_MAX_LEN];
        let len2 = Header::tcp(version, src, dst).encode(&mut again).unwrap();
        prop_assert_eq!(&again[..len2], &buf[..len]);
    }

    #[test]
    fn every_prefix_of_a_valid_header_is_incomplete(spec in header_spec(), v1 in any::<(SocketAddr, SocketAddr)>()) {
        let mut buf = vec![0u8; 8192];
        let len = build(&spec, &mut buf);
        let decoder = Decoder::new().max_header_len(usize::MAX);
        for end in 0..len {
            let result = decoder.decode(&buf[..end]);
            prop_assert!(matches!(result, Ok(Decoded::Incomplete { needed }) if needed >= 1 && end + needed <= len),
                "prefix {} of {}: {:?}", end, len, result);
        }
        let mut line = [0u8; V1_MAX_LEN];
        let len = encode_header(Version::V1, v1.0, v1.1, &mut line).unwrap();
        for end in 0..len {
            let result = decoder.decode(&line[..end]);
            prop_assert!(matches!(result, Ok(Decoded::Incomplete { needed }) if needed >= 1 && end + needed <= len),
                "prefix {:?}: {:?}", line[..end].escape_ascii().to_string(), result);
        }
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in bytes(600)) {
        check_no_panic(&bytes);
    }

    #[test]
    fn decoding_arbitrary_bytes_after_a_magic_never_panics(v2 in any::<bool>(), tail in bytes(400)) {
        let mut bytes = if v2 { V2_SIGNATURE.to_vec() } else { b"PROXY ".to_vec() };
        bytes.extend_from_slice(&tail);
        check_no_panic(&bytes);
    }

    #[test]
    fn mutated_valid_headers_decode_or_fail_cleanly(spec in header_spec(), flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)) {
        let mut buf = vec![0u8; 8192];
        let len = build(&spec, &mut buf);
        let mut bytes = buf[..len].to_vec();
        for (index, byte) in flips {
            let at = index.index(bytes.len());
            bytes[at] = byte;
        }
        check_no_panic(&bytes);
    }

    #[test]
    fn v1_text_mutations_decode_or_fail_cleanly(src in socket_addr(), dst in socket_addr(), at in any::<prop::sample::Index>(), byte in prop_oneof![Just(b' '), Just(b'0'), Just(b'\r'), Just(b'\n'), Just(b':'), Just(b'.'), any::<u8>()]) {
        let mut line = [0u8; V1_MAX_LEN];
        let len = encode_header(Version::V1, src, dst, &mut line).unwrap();
        let mut bytes = line[..len].to_vec();
        let at = at.index(len);
        bytes[at] = byte;
        check_no_panic(&bytes);
    }
}

/// Decodes, and checks that whatever comes back is consistent.
fn check_no_panic(bytes: &[u8]) {
    for decoder in [
        Decoder::new(),
        Decoder::new()
            .verify_crc32c(false)
            .max_header_len(usize::MAX),
    ] {
        match decoder.decode(bytes) {
            Ok(Decoded::Complete { header, len }) => {
                assert!(len <= bytes.len());
                // A complete header re-decodes identically from exactly its own bytes.
                let again = decoder.decode(&bytes[..len]).unwrap().complete().unwrap();
                assert_eq!(again, (header, len));
                let _ = header.tlvs().count();
                let mut out = vec![0u8; 70_000];
                if header.version() == Version::V2 {
                    header.encode(&mut out).unwrap();
                }
            }
            Ok(Decoded::Incomplete { needed }) => assert!(needed >= 1),
            Err(err) => {
                assert!(!err.to_string().is_empty());
                assert!(!err.metric_label().is_empty());
            }
        }
    }
}
