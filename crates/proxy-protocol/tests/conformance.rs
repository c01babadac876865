//! One test per rule and edge case of the PROXY protocol specification (HAProxy's
//! `doc/proxy-protocol.txt`), named after the rule.

use std::net::SocketAddr;

use hairpin_proxy_protocol::tlv::{ClientFlags, SslSubTlv, Tlv, kind};
use hairpin_proxy_protocol::v2::Builder;
use hairpin_proxy_protocol::{
    Addresses, Command, DecodeError, Decoded, Decoder, EncodeError, Family, Header, Protocol,
    UnixAddr, V1_MAX_LEN, V2_MAX_ADDR_LEN, V2_SIGNATURE, Version, decode, encode_header,
};

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

fn complete(bytes: &[u8]) -> (Header<'_>, usize) {
    match decode(bytes) {
        Ok(Decoded::Complete { header, len }) => (header, len),
        other => panic!(
            "expected a complete header from {:?}, got {other:?}",
            bytes.escape_ascii().to_string()
        ),
    }
}

fn error(bytes: &[u8]) -> DecodeError {
    match decode(bytes) {
        Err(err) => err,
        Ok(other) => panic!(
            "expected an error for {:?}, got {other:?}",
            bytes.escape_ascii().to_string()
        ),
    }
}

fn incomplete(bytes: &[u8]) -> usize {
    match decode(bytes) {
        Ok(Decoded::Incomplete { needed }) => needed,
        other => panic!(
            "expected Incomplete for {:?}, got {other:?}",
            bytes.escape_ascii().to_string()
        ),
    }
}

/// A v2 header from raw parts: byte 13, byte 14, the body after the 16 fixed bytes.
fn v2(ver_cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
    let mut bytes = V2_SIGNATURE.to_vec();
    bytes.push(ver_cmd);
    bytes.push(fam);
    bytes.extend_from_slice(&(body.len() as u16).to_be_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// An IPv4 address block 127.0.0.1:1234 -> 127.0.0.2:80.
const INET_BLOCK: [u8; 12] = [127, 0, 0, 1, 127, 0, 0, 2, 0x04, 0xd2, 0x00, 0x50];

fn tlv(kind: u8, value: &[u8]) -> Vec<u8> {
    let mut bytes = vec![kind];
    bytes.extend_from_slice(&(value.len() as u16).to_be_bytes());
    bytes.extend_from_slice(value);
    bytes
}

fn inet_with_tlvs(tlvs: &[u8]) -> Vec<u8> {
    let mut body = INET_BLOCK.to_vec();
    body.extend_from_slice(tlvs);
    v2(0x21, 0x11, &body)
}

// ---------------------------------------------------------------- detection

#[test]
fn empty_input_is_incomplete() {
    assert!(incomplete(b"") >= 1);
}

#[test]
fn neither_proxy_nor_signature_is_not_covered_by_the_spec_and_dropped() {
    let err = error(b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n");
    assert_eq!(
        err.to_string(),
        "not a PROXY protocol header: the connection starts with \"GET / HTTP/1.1\\r\\n\"..."
    );
    assert_eq!(err.metric_label(), "not_proxy_protocol");
    // TLS ClientHello.
    assert!(matches!(
        error(&[0x16, 0x03, 0x01, 0x02]),
        DecodeError::NotProxyProtocol { .. }
    ));
    // Almost the magic.
    assert!(matches!(
        error(b"PROXZ TCP4"),
        DecodeError::NotProxyProtocol { .. }
    ));
    assert!(matches!(
        error(b"\r\n\r\n\0\r\nQUIX\n"),
        DecodeError::NotProxyProtocol { .. }
    ));
}

#[test]
fn prefixes_of_either_magic_wait_for_more_bytes() {
    assert_eq!(incomplete(b"PRO"), 12);
    assert_eq!(incomplete(&V2_SIGNATURE[..5]), 11);
    assert_eq!(incomplete(&V2_SIGNATURE), 4);
}

#[test]
fn receiver_configured_for_one_version_rejects_the_other() {
    let v1 = b"PROXY UNKNOWN\r\n";
    let v2 = v2(0x20, 0x00, &[]);
    let only_v2 = Decoder::new().only(Version::V2);
    let err = only_v2.decode(v1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "PROXY protocol v1 header, but only v2 is accepted"
    );
    assert!(only_v2.decode(&v2).unwrap().complete().is_some());
    let only_v1 = Decoder::new().only(Version::V1);
    assert!(matches!(
        only_v1.decode(&v2),
        Err(DecodeError::UnexpectedVersion {
            expected: Version::V1,
            found: Version::V2
        })
    ));
    assert!(only_v1.decode(v1).unwrap().complete().is_some());
}

// ---------------------------------------------------------------- v1

#[test]
fn v1_spec_example_tcp4_decodes_and_leaves_the_payload() {
    let bytes = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\nHost: 192.168.0.11\r\n\r\n";
    let (header, len) = complete(bytes);
    assert_eq!(
        &bytes[len..],
        b"GET / HTTP/1.1\r\nHost: 192.168.0.11\r\n\r\n"
    );
    assert_eq!(header.version(), Version::V1);
    assert_eq!(header.command(), Command::Proxy);
    assert_eq!(header.protocol(), Protocol::Stream);
    assert_eq!(header.source(), Some(addr("192.168.0.1:56324")));
    assert_eq!(header.destination(), Some(addr("192.168.0.11:443")));
    assert_eq!(header.tlvs().count(), 0);
}

#[test]
fn v1_tcp6_decodes_upper_and_lower_case_hex() {
    let (header, len) = complete(b"PROXY TCP6 2001:DB8::1 ::1 65535 0\r\n");
    assert_eq!(len, 36);
    assert_eq!(header.source(), Some(addr("[2001:db8::1]:65535")));
    assert_eq!(header.destination(), Some(addr("[::1]:0")));
    assert_eq!(header.addresses().family(), Family::Inet6);
}

#[test]
fn v1_tcp6_accepts_v4_mapped_addresses_as_senders_write_them() {
    let (header, _) = complete(b"PROXY TCP6 ::ffff:127.0.0.1 ::1 1 2\r\n");
    assert_eq!(header.source(), Some(addr("[::ffff:127.0.0.1]:1")));
}

#[test]
fn v1_maximum_tcp4_and_tcp6_lines_are_accepted() {
    let tcp4 = b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n";
    assert_eq!(tcp4.len(), 56);
    assert_eq!(complete(tcp4).1, 56);
    let f = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let tcp6 = format!("PROXY TCP6 {f} {f} 65535 65535\r\n");
    assert_eq!(tcp6.len(), 104);
    assert_eq!(complete(tcp6.as_bytes()).1, 104);
}

#[test]
fn v1_unknown_short_form_is_accepted() {
    let (header, len) = complete(b"PROXY UNKNOWN\r\npayload");
    assert_eq!(len, 15);
    assert_eq!(header.protocol(), Protocol::Unspec);
    assert_eq!(header.addresses(), &Addresses::Unspec);
    assert_eq!(header.source(), None);
}

#[test]
fn v1_unknown_receiver_ignores_anything_before_the_crlf() {
    let f = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let worst = format!("PROXY UNKNOWN {f} {f} 65535 65535\r\n");
    assert_eq!(worst.len(), V1_MAX_LEN, "the spec's worst case");
    let (header, len) = complete(worst.as_bytes());
    assert_eq!(len, 107);
    assert_eq!(header.addresses(), &Addresses::Unspec);
    let (_, len) = complete(b"PROXY UNKNOWN whatever \x01 junk\r\nX");
    assert_eq!(len, 31);
}

#[test]
fn v1_unknown_must_be_followed_by_space_or_crlf() {
    assert!(matches!(
        error(b"PROXY UNKNOWNX\r\n"),
        DecodeError::V1UnknownProtocol { .. }
    ));
}

#[test]
fn v1_crlf_not_within_first_107_bytes_is_invalid() {
    let mut line = b"PROXY UNKNOWN ".to_vec();
    line.resize(107, b'a');
    assert_eq!(incomplete(&line[..106]), 1);
    let err = error(&line);
    assert_eq!(err, DecodeError::V1NoCrlf { max: 107 });
    assert_eq!(
        err.to_string(),
        "v1 header: no CRLF within the first 107 bytes"
    );
    // CR as the 107th byte, LF as the 108th: the CRLF is not within the first 107.
    line.truncate(106);
    line.extend_from_slice(b"\r\n");
    assert_eq!(line.len(), 108);
    assert_eq!(error(&line), DecodeError::V1NoCrlf { max: 107 });
}

#[test]
fn v1_single_lf_must_not_end_the_line() {
    let err = error(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\nGET /");
    assert_eq!(err, DecodeError::V1LoneLf { at: 30 });
    assert_eq!(
        err.to_string(),
        "v1 header: LF at byte 30 is not preceded by CR"
    );
    assert_eq!(error(b"PROXY UNKNOWN\n"), DecodeError::V1LoneLf { at: 13 });
}

#[test]
fn v1_single_cr_must_not_end_the_line() {
    let err = error(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rGET /");
    assert_eq!(err, DecodeError::V1LoneCr { at: 30 });
    assert_eq!(
        err.to_string(),
        "v1 header: CR at byte 30 is not followed by LF"
    );
    // A CR at the very end may still be followed by its LF.
    assert_eq!(incomplete(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r"), 1);
}

#[test]
fn v1_receiver_waits_for_the_crlf_before_decoding() {
    let line = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n";
    for end in 0..line.len() {
        assert!(
            decode(&line[..end]).unwrap().is_incomplete(),
            "prefix of {end} bytes"
        );
    }
}

#[test]
fn v1_fields_are_separated_by_exactly_one_space() {
    let err = error(b"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n");
    assert_eq!(
        err,
        DecodeError::V1Spacing {
            field: "source address",
            at: 11
        }
    );
    assert_eq!(
        err.to_string(),
        "v1 header: expected exactly one space before the source address at byte 11"
    );
    assert!(matches!(
        error(b"PROXY\tTCP4 1.2.3.4 5.6.7.8 1 2\r\n"),
        DecodeError::V1Spacing { .. }
    ));
    assert!(matches!(
        error(b"PROXYTCP4 1.2.3.4 5.6.7.8 1 2\r\n"),
        DecodeError::V1Spacing { .. }
    ));
    assert!(matches!(
        error(b"PROXY  UNKNOWN\r\n"),
        DecodeError::V1Spacing { .. }
    ));
}

#[test]
fn v1_trailing_data_after_the_destination_port_is_invalid() {
    assert_eq!(
        error(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n"),
        DecodeError::V1TrailingData { at: 30 }
    );
    assert!(matches!(
        error(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n"),
        DecodeError::V1TrailingData { .. }
    ));
}

#[test]
fn v1_missing_fields_are_invalid() {
    assert_eq!(
        error(b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n"),
        DecodeError::V1MissingField {
            field: "destination port"
        }
    );
    assert_eq!(
        error(b"PROXY TCP4\r\n"),
        DecodeError::V1MissingField {
            field: "source address"
        }
    );
    assert_eq!(
        error(b"PROXY\r\n"),
        DecodeError::V1MissingField { field: "protocol" }
    );
    assert_eq!(
        error(b"PROXY \r\n"),
        DecodeError::V1MissingField { field: "protocol" }
    );
}

#[test]
fn v1_only_tcp4_tcp6_and_unknown_are_allowed() {
    for bad in ["TCP5", "UDP4", "tcp4", "TCP", "UNKNOWN4"] {
        let line = format!("PROXY {bad} 1.2.3.4 5.6.7.8 1 2\r\n");
        let err = error(line.as_bytes());
        assert_eq!(
            err.to_string(),
            format!("v1 header: unknown protocol \"{bad}\", expected TCP4, TCP6 or UNKNOWN")
        );
    }
}

#[test]
fn v1_protocol_that_cannot_become_valid_is_rejected_before_the_crlf() {
    assert!(matches!(
        error(b"PROXY UDP4 "),
        DecodeError::V1UnknownProtocol { .. }
    ));
    assert!(matches!(
        error(b"PROXY TCP4 1.2.3.4:"),
        DecodeError::V1FamilyMismatch { .. }
    ));
    assert!(matches!(
        error(b"PROXY TCP4 1.2.3.4 5.6.7.8 01"),
        DecodeError::V1InvalidPort { .. }
    ));
}

#[test]
fn v1_ipv4_heading_zeroes_are_not_permitted() {
    let err = error(b"PROXY TCP4 192.168.000.1 10.0.0.1 1 2\r\n");
    assert_eq!(
        err.to_string(),
        "v1 header: invalid source address \"192.168.000.1\": leading zero"
    );
    assert_eq!(err.metric_label(), "v1_address");
    assert!(matches!(
        error(b"PROXY TCP4 10.0.0.1 010.0.0.1 1 2\r\n"),
        DecodeError::V1InvalidAddress {
            field: "destination address",
            ..
        }
    ));
    // A lone zero is a number, not a heading zero.
    complete(b"PROXY TCP4 0.0.0.0 10.0.0.0 0 0\r\n");
}

#[test]
fn v1_ipv4_is_exactly_four_numbers_in_0_to_255() {
    for (bad, reason) in [
        ("1.2.3.256", "number above 255"),
        ("1.2.3", "not 4 decimal numbers separated by dots"),
        ("1.2.3.4.5", "not 4 decimal numbers separated by dots"),
        ("1..3.4", "not 4 decimal numbers separated by dots"),
        ("1.2.3.x", "not 4 decimal numbers separated by dots"),
        ("+1.2.3.4", "not 4 decimal numbers separated by dots"),
    ] {
        let line = format!("PROXY TCP4 {bad} 1.2.3.4 1 2\r\n");
        assert_eq!(
            error(line.as_bytes()).to_string(),
            format!("v1 header: invalid source address \"{bad}\": {reason}")
        );
    }
}

#[test]
fn v1_ports_have_no_heading_zeroes_and_stay_within_65535() {
    for (bad, reason) in [
        ("080", "leading zero"),
        ("00", "leading zero"),
        ("65536", "above 65535"),
        ("123456", "above 65535"),
        ("-1", "not a decimal number"),
        ("8O", "not a decimal number"),
    ] {
        let line = format!("PROXY TCP4 1.2.3.4 5.6.7.8 {bad} 443\r\n");
        assert_eq!(
            error(line.as_bytes()).to_string(),
            format!("v1 header: invalid source port \"{bad}\": {reason}")
        );
    }
    let line = b"PROXY TCP4 1.2.3.4 5.6.7.8 1 0443\r\n";
    assert!(matches!(
        error(line),
        DecodeError::V1InvalidPort {
            field: "destination port",
            ..
        }
    ));
}

#[test]
fn v1_address_family_must_match_the_protocol() {
    let err = error(b"PROXY TCP4 ::1 127.0.0.1 1 2\r\n");
    assert_eq!(
        err.to_string(),
        "v1 header: TCP4 line carries source address \"::1\" of the other address family"
    );
    let err = error(b"PROXY TCP6 ::1 127.0.0.1 1 2\r\n");
    assert_eq!(
        err,
        DecodeError::V1FamilyMismatch {
            protocol: "TCP6",
            field: "destination address",
            value: "127.0.0.1".into()
        }
    );
    assert_eq!(err.metric_label(), "v1_family_mismatch");
}

#[test]
fn v1_ipv6_must_decode_to_exactly_128_bits() {
    for bad in [
        "1:2:3:4:5:6:7",
        "1:2:3:4:5:6:7:8:9",
        "1::2::3",
        "fe80::1%eth0",
        "12345::1",
        ":::",
    ] {
        let line = format!("PROXY TCP6 {bad} ::1 1 2\r\n");
        let err = error(line.as_bytes());
        let rejected = match &err {
            DecodeError::V1InvalidAddress { value, .. } => value == bad,
            // `%` is fine, but a scope id is not part of a canonical address.
            _ => false,
        };
        assert!(rejected, "{bad}: {err}");
    }
}

#[test]
fn v1_control_and_non_ascii_bytes_are_invalid() {
    assert_eq!(
        error(b"PROXY TCP4 1.2.3.4\x00 5.6.7.8 1 2\r\n"),
        DecodeError::V1InvalidByte { at: 18, byte: 0 }
    );
    assert!(matches!(
        error("PROXY TCP4 1.2.3.4 5.6.7.8 1 2é\r\n".as_bytes()),
        DecodeError::V1InvalidByte { .. } | DecodeError::V1InvalidPort { .. }
    ));
}

#[test]
fn v1_max_header_len_below_107_shortens_the_crlf_window() {
    let decoder = Decoder::new().max_header_len(40);
    let line = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n";
    assert_eq!(decoder.decode(line), Err(DecodeError::V1NoCrlf { max: 40 }));
    assert!(
        decoder
            .decode(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n")
            .unwrap()
            .complete()
            .is_some()
    );
}

// ---------------------------------------------------------------- v2 fixed part

#[test]
fn v2_known_vector_from_haproxy_decodes() {
    // HAProxy's `send-proxy-v2` for 172.19.0.1:42578 -> 172.19.0.3:80, then an HTTP request.
    let mut bytes = v2(
        0x21,
        0x11,
        &[172, 19, 0, 1, 172, 19, 0, 3, 0xa6, 0x52, 0x00, 0x50],
    );
    bytes.extend_from_slice(b"GET / HTTP/1.1\r\n");
    let (header, len) = complete(&bytes);
    assert_eq!(len, 28);
    assert_eq!(&bytes[len..], b"GET / HTTP/1.1\r\n");
    assert_eq!(header.version(), Version::V2);
    assert_eq!(header.source(), Some(addr("172.19.0.1:42578")));
    assert_eq!(header.destination(), Some(addr("172.19.0.3:80")));
}

#[test]
fn v2_version_must_be_2() {
    for version in [0x0, 0x1, 0x3, 0xf] {
        let err = error(&v2(version << 4 | 1, 0x11, &INET_BLOCK));
        assert_eq!(err, DecodeError::V2Version { found: version });
        assert_eq!(
            err.to_string(),
            format!("v2 header: version {version:#x} in byte 13, only 0x2 is defined")
        );
    }
    // Rejected as soon as the 13th byte arrives.
    let mut start = V2_SIGNATURE.to_vec();
    start.push(0x11);
    assert_eq!(error(&start), DecodeError::V2Version { found: 1 });
}

#[test]
fn v2_receivers_drop_unassigned_commands() {
    for command in 0x2..=0xf {
        let err = error(&v2(0x20 | command, 0x11, &INET_BLOCK));
        assert_eq!(err, DecodeError::V2Command { found: command });
        assert_eq!(err.metric_label(), "v2_command");
    }
}

#[test]
fn v2_local_is_accepted_and_its_addresses_are_not_used() {
    let bytes = v2(0x20, 0x00, &[]);
    let (header, len) = complete(&bytes);
    assert_eq!(len, 16);
    assert_eq!(header.command(), Command::Local);
    assert_eq!(header.source(), None);
    // LOCAL with an address block: the length field is honoured, the addresses ignored.
    let bytes = v2(0x20, 0x11, &INET_BLOCK);
    let (header, len) = complete(&bytes);
    assert_eq!(len, 28);
    assert_eq!(header.command(), Command::Local);
    assert_eq!(header.source(), None);
    assert_eq!(header.addresses().source(), Some(addr("127.0.0.1:1234")));
}

#[test]
fn v2_receivers_must_not_assume_zero_length_for_local() {
    let mut body = vec![0u8; 12];
    body.extend_from_slice(&tlv(kind::NOOP, &[0; 5]));
    let mut bytes = v2(0x20, 0x11, &body);
    bytes.extend_from_slice(b"payload");
    let (_, len) = complete(&bytes);
    assert_eq!(&bytes[len..], b"payload");
}

#[test]
fn v2_local_family_is_ignored_when_no_address_block_follows() {
    // LOCAL with AF_INET/STREAM but a zero length: the family is ignored, the connection valid.
    let mut bytes = v2(0x20, 0x11, &[]);
    bytes.extend_from_slice(b"GET");
    let (header, len) = complete(&bytes);
    assert_eq!(len, 16);
    assert_eq!(header.command(), Command::Local);
    assert_eq!(header.addresses(), &Addresses::Unspec);
    // A short block is discarded whole, whatever it holds.
    let short = v2(0x20, 0x21, &[0xff; 20]);
    let (header, len) = complete(&short);
    assert_eq!(len, 36);
    assert_eq!(header.tlvs().count(), 0);
    // The same for PROXY is an error: its addresses are needed.
    assert!(matches!(
        error(&v2(0x21, 0x11, &[])),
        DecodeError::V2AddressTooShort { .. }
    ));
}

#[test]
fn v2_invalid_family_or_protocol_nibbles_are_rejected_even_for_local() {
    // "other values ... must be rejected as invalid by receivers" wins over LOCAL ignoring them.
    assert_eq!(
        error(&v2(0x20, 0x41, &[])),
        DecodeError::V2Family { found: 4 }
    );
    assert_eq!(
        error(&v2(0x20, 0x13, &[])),
        DecodeError::V2Protocol { found: 3 }
    );
}

#[test]
fn v2_family_above_unix_is_rejected() {
    for family in 0x4..=0xf {
        let err = error(&v2(0x21, family << 4 | 1, &[0; 216]));
        assert_eq!(err, DecodeError::V2Family { found: family });
    }
}

#[test]
fn v2_protocol_above_dgram_is_rejected() {
    for protocol in 0x3..=0xf {
        let err = error(&v2(0x21, 0x10 | protocol, &INET_BLOCK));
        assert_eq!(err, DecodeError::V2Protocol { found: protocol });
    }
}

#[test]
fn v2_unspec_family_and_protocol_go_together() {
    for byte in [0x01, 0x02, 0x10, 0x20, 0x30] {
        let err = error(&v2(0x21, byte, &[0; 216]));
        assert_eq!(err, DecodeError::V2FamilyProtocol { found: byte });
    }
}

#[test]
fn v2_every_expected_protocol_byte_decodes() {
    let unix_src = UnixAddr::new(b"/run/src.sock").unwrap();
    let unix_dst = UnixAddr::new(b"/run/dst.sock").unwrap();
    let mut unix_block = unix_src.as_bytes().to_vec();
    unix_block.extend_from_slice(unix_dst.as_bytes());
    let v6_block: Vec<u8> = [[0u8; 15].as_slice(), &[1], &[0; 15], &[2], &[0, 1, 0, 2]].concat();
    for (byte, body, family, protocol) in [
        (0x00, vec![], Family::Unspec, Protocol::Unspec),
        (0x11, INET_BLOCK.to_vec(), Family::Inet, Protocol::Stream),
        (0x12, INET_BLOCK.to_vec(), Family::Inet, Protocol::Dgram),
        (0x21, v6_block.clone(), Family::Inet6, Protocol::Stream),
        (0x22, v6_block.clone(), Family::Inet6, Protocol::Dgram),
        (0x31, unix_block.clone(), Family::Unix, Protocol::Stream),
        (0x32, unix_block.clone(), Family::Unix, Protocol::Dgram),
    ] {
        let bytes = v2(0x21, byte, &body);
        let (header, len) = complete(&bytes);
        assert_eq!(len, 16 + body.len());
        assert_eq!(header.addresses().family(), family, "{byte:#04x}");
        assert_eq!(header.protocol(), protocol, "{byte:#04x}");
    }
    let bytes = v2(0x21, 0x22, &v6_block);
    let (header, _) = complete(&bytes);
    assert_eq!(header.source(), Some(addr("[::1]:1")));
    assert_eq!(header.destination(), Some(addr("[::2]:2")));
    let bytes = v2(0x21, 0x31, &unix_block);
    let (header, _) = complete(&bytes);
    match header.addresses() {
        Addresses::Unix {
            source,
            destination,
        } => {
            assert_eq!(source.path(), b"/run/src.sock");
            assert_eq!(destination.path(), b"/run/dst.sock");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn v2_header_length_is_exactly_16_plus_the_length_field() {
    let mut bytes = inet_with_tlvs(&tlv(kind::NOOP, b"abc"));
    bytes.extend_from_slice(b"\x00rest");
    let (_, len) = complete(&bytes);
    assert_eq!(len, 16 + 12 + 6);
    assert_eq!(&bytes[len..], b"\x00rest");
}

#[test]
fn v2_length_shorter_than_the_address_block_is_rejected() {
    let err = error(&v2(0x21, 0x11, &INET_BLOCK[..8]));
    assert_eq!(
        err,
        DecodeError::V2AddressTooShort {
            family: Family::Inet,
            len: 8,
            needed: 12
        }
    );
    assert_eq!(
        err.to_string(),
        "v2 header: length 8 is shorter than the 12 address bytes of AF_INET"
    );
    assert!(matches!(
        error(&v2(0x21, 0x21, &[0; 35])),
        DecodeError::V2AddressTooShort { needed: 36, .. }
    ));
    assert!(matches!(
        error(&v2(0x21, 0x31, &[0; 215])),
        DecodeError::V2AddressTooShort { needed: 216, .. }
    ));
}

#[test]
fn v2_receiver_waits_for_the_whole_address_block() {
    let bytes = inet_with_tlvs(&tlv(kind::AUTHORITY, b"example.com"));
    for end in 0..bytes.len() {
        let needed = incomplete(&bytes[..end]);
        if end >= 16 {
            assert_eq!(needed, bytes.len() - end, "prefix of {end} bytes");
        }
    }
}

#[test]
fn v2_header_longer_than_the_maximum_is_rejected_from_its_length_field() {
    let decoder = Decoder::new().max_header_len(100);
    let bytes = v2(0x21, 0x11, &[0; 200]);
    let err = decoder.decode(&bytes[..16]).unwrap_err();
    assert_eq!(
        err,
        DecodeError::HeaderTooLong {
            version: Version::V2,
            len: 216,
            max: 100
        }
    );
    assert_eq!(
        err.to_string(),
        "v2 header of 216 bytes is longer than the maximum of 100 bytes"
    );
    assert_eq!(
        Decoder::new()
            .decode(&v2(0x21, 0x11, &[0; 5000])[..16])
            .unwrap_err()
            .metric_label(),
        "header_too_long"
    );
}

// ---------------------------------------------------------------- v2 TLVs

#[test]
fn v2_registered_tlvs_decode() {
    let mut ssl = vec![0x07, 0, 0, 0, 0];
    ssl.extend_from_slice(&tlv(kind::SSL_VERSION, b"TLSv1.3"));
    ssl.extend_from_slice(&tlv(kind::SSL_CN, "exämple".as_bytes()));
    ssl.extend_from_slice(&tlv(kind::SSL_CIPHER, b"TLS_AES_256_GCM_SHA384"));
    ssl.extend_from_slice(&tlv(kind::SSL_SIG_ALG, b"RSA-SHA256"));
    ssl.extend_from_slice(&tlv(kind::SSL_KEY_ALG, b"RSA2048"));
    ssl.extend_from_slice(&tlv(0x26, b"x25519"));
    let tlvs = [
        tlv(kind::ALPN, b"h2"),
        tlv(kind::AUTHORITY, b"example.com"),
        tlv(kind::NOOP, &[]),
        tlv(kind::UNIQUE_ID, &[0xAB; 128]),
        tlv(kind::SSL, &ssl),
        tlv(kind::NETNS, b"blue"),
        tlv(kind::AWS, b"\x01vpce-08d2bf15fac5001c9"),
        tlv(kind::AZURE, &[0x01, 0x78, 0x56, 0x34, 0x12]),
        tlv(kind::GCP, &0x1234_5678_9abc_def0u64.to_be_bytes()),
        tlv(0x42, b"unassigned"),
    ]
    .concat();
    let bytes = inet_with_tlvs(&tlvs);
    let (header, _) = complete(&bytes);
    assert_eq!(header.alpn(), Some(&b"h2"[..]));
    assert_eq!(header.authority(), Some("example.com"));
    assert_eq!(header.unique_id(), Some(&[0xAB; 128][..]));
    assert_eq!(header.netns(), Some("blue"));
    assert_eq!(
        header.custom(kind::AWS),
        Some(&b"\x01vpce-08d2bf15fac5001c9"[..])
    );
    assert_eq!(
        header.custom(kind::AZURE),
        Some(&[0x01, 0x78, 0x56, 0x34, 0x12][..])
    );
    assert_eq!(
        header.custom(kind::GCP),
        Some(&0x1234_5678_9abc_def0u64.to_be_bytes()[..])
    );
    assert_eq!(header.custom(0x42), Some(&b"unassigned"[..]));
    let ssl = header.ssl().unwrap();
    assert!(ssl.client_ssl());
    assert!(
        ssl.client
            .contains(ClientFlags::CERT_CONN | ClientFlags::CERT_SESS)
    );
    assert!(ssl.verified());
    assert_eq!(ssl.version(), Some("TLSv1.3"));
    assert_eq!(ssl.common_name(), Some("exämple"));
    assert_eq!(ssl.cipher(), Some("TLS_AES_256_GCM_SHA384"));
    let subs: Vec<_> = ssl.sub_tlvs().collect();
    assert_eq!(subs[3], SslSubTlv::SigAlg("RSA-SHA256"));
    assert_eq!(subs[4], SslSubTlv::KeyAlg("RSA2048"));
    assert_eq!(
        subs[5],
        SslSubTlv::Custom {
            kind: 0x26,
            value: b"x25519"
        }
    );
    let kinds: Vec<u8> = header.tlvs().map(|tlv| tlv.kind()).collect();
    assert_eq!(
        kinds,
        [0x01, 0x02, 0x04, 0x05, 0x20, 0x30, 0xEA, 0xEE, 0xE0, 0x42]
    );
    assert_eq!(header.tlvs().nth(2), Some(Tlv::Noop(&[])));
}

#[test]
fn v2_ssl_verify_non_zero_means_not_verified() {
    let bytes = inet_with_tlvs(&tlv(kind::SSL, &[0x01, 0, 0, 0, 9]));
    let ssl = complete(&bytes).0.ssl().unwrap();
    assert_eq!(ssl.verify, 9);
    assert!(!ssl.verified());
}

#[test]
fn v2_tlv_overrunning_the_header_length_is_rejected() {
    let mut tlvs = tlv(kind::AUTHORITY, b"example.com");
    tlvs.truncate(tlvs.len() - 1);
    let err = error(&inet_with_tlvs(&tlvs));
    assert_eq!(
        err.to_string(),
        "v2 header: TLV 0x02 (AUTHORITY) at byte 28 declares 11 bytes but only 10 remain"
    );
    assert_eq!(err.metric_label(), "v2_tlv");
}

#[test]
fn v2_tlv_header_cut_short_is_rejected() {
    for cut in 1..3 {
        let mut tlvs = tlv(kind::NOOP, &[]);
        tlvs.extend_from_slice(&[0x04, 0x00][..cut]);
        let err = error(&inet_with_tlvs(&tlvs));
        assert_eq!(
            err,
            DecodeError::V2TlvTruncated {
                what: "TLV",
                offset: 31,
                remaining: cut
            }
        );
    }
}

#[test]
fn v2_ssl_sub_tlv_overrunning_the_ssl_tlv_is_rejected() {
    let mut ssl = vec![0x01, 0, 0, 0, 0];
    ssl.extend_from_slice(&[kind::SSL_VERSION, 0x00, 0x08]);
    ssl.extend_from_slice(b"TLSv1.3");
    let err = error(&inet_with_tlvs(&tlv(kind::SSL, &ssl)));
    assert_eq!(
        err.to_string(),
        "v2 header: SSL sub-TLV 0x21 (SSL_VERSION) at byte 36 declares 8 bytes but only 7 remain"
    );
}

#[test]
fn v2_ssl_tlv_needs_client_and_verify() {
    let err = error(&inet_with_tlvs(&tlv(kind::SSL, &[0x01, 0, 0, 0])));
    assert_eq!(
        err.to_string(),
        "v2 header: TLV 0x20 (SSL): value is shorter than the 5 bytes of client flags and verify"
    );
}

#[test]
fn v2_ssl_string_sub_tlvs_are_us_ascii() {
    let mut ssl = vec![0x01, 0, 0, 0, 0];
    ssl.extend_from_slice(&tlv(kind::SSL_CIPHER, "é".as_bytes()));
    let err = error(&inet_with_tlvs(&tlv(kind::SSL, &ssl)));
    assert_eq!(
        err.to_string(),
        "v2 header: SSL sub-TLV 0x23 (SSL_CIPHER): value is not US-ASCII"
    );
}

#[test]
fn v2_unique_id_is_at_most_128_bytes() {
    let err = error(&inet_with_tlvs(&tlv(kind::UNIQUE_ID, &[1; 129])));
    assert_eq!(
        err.to_string(),
        "v2 header: TLV 0x05 (UNIQUE_ID): value is longer than 128 bytes"
    );
}

#[test]
fn v2_authority_is_utf8() {
    let err = error(&inet_with_tlvs(&tlv(kind::AUTHORITY, b"\xff\xfe")));
    assert_eq!(
        err.to_string(),
        "v2 header: TLV 0x02 (AUTHORITY): value is not valid UTF-8"
    );
}

#[test]
fn v2_netns_is_us_ascii() {
    let err = error(&inet_with_tlvs(&tlv(kind::NETNS, "né".as_bytes())));
    assert_eq!(
        err.to_string(),
        "v2 header: TLV 0x30 (NETNS): value is not US-ASCII"
    );
}

#[test]
fn v2_tlvs_follow_the_address_block_of_unspec_at_byte_16() {
    let bytes = v2(0x20, 0x00, &tlv(kind::NOOP, b"pad"));
    let (header, _) = complete(&bytes);
    assert_eq!(header.tlvs().next(), Some(Tlv::Noop(b"pad")));
}

// ---------------------------------------------------------------- CRC32C

#[test]
fn v2_crc32c_sender_zeroes_the_field_then_checksums_the_whole_header() {
    let mut buf = [0u8; 256];
    let mut builder =
        Builder::proxy(&mut buf, addr("127.0.0.1:1234"), addr("127.0.0.2:80")).unwrap();
    builder.tlv(Tlv::Alpn(b"h2")).unwrap();
    let len = builder.finish_with_crc32c().unwrap();
    let header = &buf[..len];
    // The CRC TLV is last: type, length 4, value.
    let at = len - 4;
    assert_eq!(&header[at - 3..at], &[kind::CRC32C, 0, 4]);
    let mut zeroed = header.to_vec();
    zeroed[at..].fill(0);
    let expected = crc32c::crc32c(&zeroed);
    assert_eq!(&header[at..], &expected.to_be_bytes());
    let (decoded, _) = complete(header);
    assert_eq!(decoded.crc32c(), Some(expected));
}

#[test]
fn v2_crc32c_mismatch_makes_the_connection_invalid() {
    let mut buf = [0u8; 256];
    let mut builder =
        Builder::proxy(&mut buf, addr("127.0.0.1:1234"), addr("127.0.0.2:80")).unwrap();
    builder.tlv(Tlv::Authority("example.com")).unwrap();
    let len = builder.finish_with_crc32c().unwrap();
    complete(&buf[..len]);
    // Flip each bit before the CRC TLV: every one must be caught (or be a syntax error). The
    // CRC TLV's own type byte is left out: changing it turns the TLV into another type.
    for byte in 12..len - 7 {
        for bit in 0..8 {
            let mut bad = buf[..len].to_vec();
            bad[byte] ^= 1 << bit;
            if let Ok(Decoded::Complete { .. }) = decode(&bad) {
                panic!("flipped bit {bit} of byte {byte} went unnoticed");
            }
        }
    }
    let mut bad = buf[..len].to_vec();
    bad[20] ^= 0x01; // an address byte: still syntactically fine
    let err = error(&bad);
    assert!(matches!(err, DecodeError::V2Crc32cMismatch { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("v2 header: CRC32C mismatch: the header carries 0x")
    );
    assert_eq!(err.metric_label(), "v2_crc32c");
    // A receiver that does not verify checksums accepts it.
    assert!(
        Decoder::new()
            .verify_crc32c(false)
            .decode(&bad)
            .unwrap()
            .complete()
            .is_some()
    );
}

#[test]
fn v2_crc32c_value_is_exactly_4_bytes() {
    let err = error(&inet_with_tlvs(&tlv(kind::CRC32C, &[0; 3])));
    assert_eq!(
        err.to_string(),
        "v2 header: TLV 0x03 (CRC32C): value must be exactly 4 bytes"
    );
}

#[test]
fn v2_crc32c_appears_at_most_once() {
    let tlvs = [tlv(kind::CRC32C, &[0; 4]), tlv(kind::CRC32C, &[0; 4])].concat();
    let err = Decoder::new()
        .verify_crc32c(false)
        .decode(&inet_with_tlvs(&tlvs))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "v2 header: TLV 0x03 (CRC32C): appears more than once"
    );
}

// ---------------------------------------------------------------- encoding

#[test]
fn encode_header_output_decodes_to_the_same_addresses() {
    for (src, dst) in [
        ("192.0.2.1:1", "198.51.100.2:443"),
        ("[2001:db8::1]:65535", "[::1]:0"),
        ("10.0.0.1:1234", "[::1]:80"),
    ] {
        for version in [Version::V1, Version::V2] {
            let mut buf = [0u8; V1_MAX_LEN];
            let len = encode_header(version, addr(src), addr(dst), &mut buf).unwrap();
            let (header, used) = complete(&buf[..len]);
            assert_eq!(used, len);
            assert_eq!(header.version(), version);
            let expected = Addresses::from_ip(addr(src), addr(dst));
            assert_eq!(header.addresses(), &expected, "{version} {src} {dst}");
        }
    }
}

#[test]
fn v1_cannot_express_local_dgram_unix_or_tlvs() {
    let mut buf = [0u8; 512];
    let local = Header::new(
        Version::V1,
        Command::Local,
        Protocol::Unspec,
        Addresses::Unspec,
    );
    let err = local.encode(&mut buf).unwrap_err();
    assert_eq!(
        err.to_string(),
        "PROXY v1 cannot carry the LOCAL command; use v2"
    );
    assert_eq!(err.metric_label(), "not_in_v1");
    let udp = Header::new(
        Version::V1,
        Command::Proxy,
        Protocol::Dgram,
        Addresses::from_ip(addr("1.2.3.4:1"), addr("1.2.3.4:2")),
    );
    assert!(matches!(
        udp.encode(&mut buf),
        Err(EncodeError::NotInV1 { .. })
    ));
    let unix = UnixAddr::new(b"/x").unwrap();
    let unix = Header::new(
        Version::V1,
        Command::Proxy,
        Protocol::Stream,
        Addresses::Unix {
            source: unix,
            destination: unix,
        },
    );
    assert!(matches!(
        unix.encode(&mut buf),
        Err(EncodeError::NotInV1 { .. })
    ));
    let bytes = inet_with_tlvs(&tlv(kind::NOOP, &[]));
    let (mut header, _) = complete(&bytes);
    header = Header::new(
        Version::V1,
        header.command(),
        header.protocol(),
        *header.addresses(),
    );
    assert!(header.encode(&mut buf).is_ok());
    let (with_tlv, _) = complete(&bytes);
    let v1_with_tlv = with_tlv.to_owned_header();
    assert!(
        v1_with_tlv.as_header().encode(&mut buf).is_ok(),
        "as v2 it encodes"
    );
}

#[test]
fn v1_unknown_encodes_as_the_short_form() {
    let mut buf = [0u8; 32];
    let header = Header::new(
        Version::V1,
        Command::Proxy,
        Protocol::Unspec,
        Addresses::Unspec,
    );
    let len = header.encode(&mut buf).unwrap();
    assert_eq!(&buf[..len], b"PROXY UNKNOWN\r\n");
}

#[test]
fn v2_builder_refuses_what_receivers_reject() {
    let mut buf = [0u8; 1024];
    let err = Builder::new(
        &mut buf,
        Command::Proxy,
        Protocol::Unspec,
        &Addresses::from_ip(addr("1.2.3.4:1"), addr("1.2.3.4:2")),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "AF_INET with UNSPEC transport is not a valid v2 combination"
    );
    let mut builder = Builder::local(&mut buf).unwrap();
    assert!(matches!(
        builder.tlv(Tlv::UniqueId(&[0; 129])),
        Err(EncodeError::InvalidTlv { kind: 5, .. })
    ));
    assert!(matches!(
        builder.tlv(Tlv::Custom {
            kind: kind::AUTHORITY,
            value: b"\xff"
        }),
        Err(EncodeError::InvalidTlv { kind: 2, .. })
    ));
    assert!(matches!(
        builder.tlv(Tlv::Custom {
            kind: kind::CRC32C,
            value: b"\x00"
        }),
        Err(EncodeError::InvalidTlv { kind: 3, .. })
    ));
    builder.tlv(Tlv::Crc32c(0)).unwrap();
    assert!(matches!(
        builder.tlv(Tlv::Crc32c(0)),
        Err(EncodeError::InvalidTlv { kind: 3, .. })
    ));
    let err = builder
        .ssl(ClientFlags::SSL, 0)
        .unwrap()
        .sub(SslSubTlv::Version("TLSv1.3é"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "SSL sub-TLV 0x21 (SSL_VERSION): value is not US-ASCII"
    );
    assert_eq!(
        UnixAddr::new(&[b'a'; 109]).unwrap_err(),
        EncodeError::UnixPathTooLong { len: 109 }
    );
}

#[test]
fn v2_builder_reports_a_small_buffer_instead_of_panicking() {
    for size in 0..64 {
        let mut buf = vec![0u8; size];
        let result = Builder::proxy(&mut buf, addr("1.2.3.4:1"), addr("1.2.3.4:2")).and_then(
            |mut builder| {
                builder.tlv(Tlv::Authority("example.com"))?;
                builder
                    .ssl(ClientFlags::SSL, 0)?
                    .sub(SslSubTlv::Version("TLSv1.2"))?;
                builder.finish_with_crc32c()
            },
        );
        match result {
            Ok(len) => assert!(size >= 64 - 1 || len <= size, "{size}"),
            Err(EncodeError::BufferTooSmall { needed, available }) => {
                assert_eq!(available, size);
                assert!(needed > size);
            }
            Err(other) => panic!("{other}"),
        }
    }
}

#[test]
fn v2_header_cannot_exceed_65535_bytes_after_the_prefix() {
    let mut buf = vec![0u8; 70_000];
    let mut builder = Builder::local(&mut buf).unwrap();
    let big = vec![0u8; 65_000];
    builder.tlv(Tlv::Noop(&big)).unwrap();
    let err = builder.tlv(Tlv::Noop(&big[..600])).unwrap_err();
    assert_eq!(err, EncodeError::HeaderTooLong { len: 65_003 + 603 });
    let big = vec![0u8; 65_536];
    let mut builder = Builder::local(&mut buf).unwrap();
    assert_eq!(
        builder.tlv(Tlv::Noop(&big)).unwrap_err(),
        EncodeError::TlvTooLong {
            kind: 4,
            len: 65_536
        }
    );
    assert_eq!(builder.finish(), 16);
}

#[test]
fn v2_max_addr_len_holds_a_unix_header_without_tlvs() {
    let mut buf = [0u8; V2_MAX_ADDR_LEN];
    let path = UnixAddr::new(&[b'p'; 108]).unwrap();
    let builder = Builder::new(
        &mut buf,
        Command::Proxy,
        Protocol::Stream,
        &Addresses::Unix {
            source: path,
            destination: path,
        },
    )
    .unwrap();
    assert_eq!(builder.finish(), V2_MAX_ADDR_LEN);
}

#[test]
fn decoded_header_reencodes_to_identical_bytes() {
    let mut buf = [0u8; 512];
    let mut builder = Builder::proxy(
        &mut buf,
        addr("[2001:db8::7]:5000"),
        addr("[2001:db8::8]:443"),
    )
    .unwrap();
    builder.tlv(Tlv::Alpn(b"http/1.1")).unwrap();
    builder
        .tlv(Tlv::Custom {
            kind: kind::AWS,
            value: b"\x01vpce-1",
        })
        .unwrap();
    builder
        .ssl(ClientFlags::SSL | ClientFlags::CERT_CONN, 0)
        .unwrap()
        .sub(SslSubTlv::CommonName("client"))
        .unwrap()
        .sub(SslSubTlv::Cipher("AES"))
        .unwrap();
    builder.tlv(Tlv::UniqueId(b"id-1")).unwrap();
    let len = builder.finish_with_crc32c().unwrap();
    let original = buf[..len].to_vec();
    let owned = complete(&original).0.to_owned_header();
    let mut again = [0u8; 512];
    let len2 = owned.as_header().encode(&mut again).unwrap();
    assert_eq!(&again[..len2], &original[..]);
}
