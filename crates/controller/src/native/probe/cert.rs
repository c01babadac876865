//! What a TLS receiver's leaf certificate says about who it is, for the proof's fingerprint
//! and its reason text: the subject, the issuer and the DNS and IP names, read from the DER
//! with a minimal reader (only the fields named; anything it cannot read is left out, never a
//! panic), and the SHA-256 of the whole certificate.

use std::fmt::Write as _;

/// The names of a certificate, escaped for text (empty where the DER does not say).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Names {
    /// `CN=..., O=...` of the subject.
    pub subject: String,
    /// `CN=..., O=...` of the issuer.
    pub issuer: String,
    /// The subject alternative names (DNS names and IP addresses).
    pub alt_names: Vec<String>,
}

/// The SHA-256 of `der`, in lowercase hex.
pub(crate) fn sha256_hex(der: &[u8]) -> String {
    use rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
    let Some(suite) = TLS13_AES_128_GCM_SHA256.tls13() else {
        return String::new();
    };
    let digest = suite.common.hash_provider.hash(der);
    let mut hex = String::with_capacity(64);
    for byte in digest.as_ref() {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// The names in the certificate `der`; `None` when it is not an X.509 certificate this reader
/// can walk.
pub(crate) fn names(der: &[u8]) -> Option<Names> {
    let (_, cert, _) = element(der, Some(SEQUENCE))?;
    let (_, tbs, _) = element(cert, Some(SEQUENCE))?;
    let mut rest = tbs;
    // version [0] EXPLICIT, optional.
    if rest.first() == Some(&0xa0) {
        rest = element(rest, None)?.2;
    }
    let rest = element(rest, Some(0x02))?.2; // serialNumber
    let rest = element(rest, Some(SEQUENCE))?.2; // signature
    let (_, issuer, rest) = element(rest, Some(SEQUENCE))?;
    let rest = element(rest, Some(SEQUENCE))?.2; // validity
    let (_, subject, mut rest) = element(rest, Some(SEQUENCE))?;
    rest = element(rest, Some(SEQUENCE))?.2; // subjectPublicKeyInfo
    let mut alt_names = Vec::new();
    while let Some((tag, content, next)) = element(rest, None) {
        if tag == 0xa3 {
            alt_names = subject_alt_names(content).unwrap_or_default();
        }
        rest = next;
    }
    Some(Names {
        subject: name(subject),
        issuer: name(issuer),
        alt_names,
    })
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
/// 2.5.29.17, subjectAltName.
const SAN: &[u8] = &[0x55, 0x1d, 0x11];

/// One DER element at the start of `input`: its tag, its content and what follows; `None`
/// when `input` does not start with one (or, with `want`, with one of that tag).
fn element(input: &[u8], want: Option<u8>) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f || want.is_some_and(|w| w != tag) {
        return None;
    }
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, after) = rest.split_at(count);
        rest = after;
        bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b))
    };
    if rest.len() < len {
        return None;
    }
    let (content, after) = rest.split_at(len);
    Some((tag, content, after))
}

/// A Name (a sequence of sets of attribute type and value) as `CN=a, O=b`, escaped, with the
/// attributes people read (CN, O, OU, C); the others are left out.
fn name(mut input: &[u8]) -> String {
    let mut parts = Vec::new();
    while let Some((_, set, next)) = element(input, Some(SET)) {
        let mut attrs = set;
        while let Some((_, attr, after)) = element(attrs, Some(SEQUENCE)) {
            if let Some((_, oid, value)) = element(attr, Some(OID))
                && let Some((tag, value, _)) = element(value, None)
            {
                let label = match oid {
                    [0x55, 0x04, 0x03] => Some("CN"),
                    [0x55, 0x04, 0x0a] => Some("O"),
                    [0x55, 0x04, 0x0b] => Some("OU"),
                    [0x55, 0x04, 0x06] => Some("C"),
                    _ => None,
                };
                if let Some(label) = label {
                    parts.push(format!("{label}={}", text(tag, value)));
                }
            }
            attrs = after;
        }
        input = next;
    }
    parts.join(", ")
}

/// A directory string's value, escaped (BMPString is UTF-16; the others are read as UTF-8).
fn text(tag: u8, value: &[u8]) -> String {
    let raw = if tag == 0x1e {
        let units: Vec<u16> = value
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        String::from_utf16_lossy(&units)
    } else {
        String::from_utf8_lossy(value).into_owned()
    };
    hairpin_planner::escape::text(&raw).into_owned()
}

/// The DNS names and IP addresses of the subjectAltName extension among `extensions` (the
/// content of `[3]`), escaped.
fn subject_alt_names(extensions: &[u8]) -> Option<Vec<String>> {
    let (_, mut list, _) = element(extensions, Some(SEQUENCE))?;
    while let Some((_, extension, next)) = element(list, Some(SEQUENCE)) {
        let (_, oid, mut rest) = element(extension, Some(OID))?;
        if oid == SAN {
            // critical BOOLEAN, optional; then the OCTET STRING holding GeneralNames.
            if rest.first() == Some(&0x01) {
                rest = element(rest, None)?.2;
            }
            let (_, value, _) = element(rest, Some(0x04))?;
            let (_, mut names, _) = element(value, Some(SEQUENCE))?;
            let mut out = Vec::new();
            while let Some((tag, value, after)) = element(names, None) {
                match (tag, value.len()) {
                    (0x82, _) => out.push(text(0x16, value)),
                    (0x87, 4) => out.push(
                        std::net::Ipv4Addr::new(value[0], value[1], value[2], value[3]).to_string(),
                    ),
                    (0x87, 16) => {
                        let mut octets = [0u8; 16];
                        octets.copy_from_slice(value);
                        out.push(std::net::Ipv6Addr::from(octets).to_string());
                    }
                    _ => {}
                }
                names = after;
            }
            return Some(out);
        }
        list = next;
    }
    Some(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_or_foreign_input_is_none_never_a_panic() {
        assert_eq!(names(&[]), None);
        assert_eq!(names(&[0x30]), None);
        assert_eq!(names(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(names(b"HTTP/1.1 200 OK"), None);
        // Every prefix of a well-formed shape: no panic.
        let shape = [
            0x30, 0x0d, 0x30, 0x0b, 0xa0, 0x03, 0x02, 0x01, 0x02, 0x02, 0x01, 0x01, 0x30, 0x00,
        ];
        for n in 0..shape.len() {
            let _ = names(&shape[..n]);
        }
    }

    #[test]
    fn sha256_of_nothing() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
