//! Checks shared by the targets: whatever the decoder says must be self-consistent.

use hairpin_proxy_protocol::{Command, Decoded, Decoder, Version};

/// Decodes `data` and checks the outcome: a complete header lies within the input, re-decodes
/// identically from exactly its own bytes, and (v2) re-encodes to exactly those bytes (with a
/// correct CRC32C: when the decoder does not verify it, a wrong one is only refreshed);
/// "incomplete" asks for at least one byte; errors have a message and a metric label.
pub fn check(decoder: &Decoder, data: &[u8]) {
    let strict = Decoder::new().max_header_len(usize::MAX);
    match decoder.decode(data) {
        Ok(Decoded::Complete { header, len }) => {
            assert!(len <= data.len());
            let again = decoder
                .decode(&data[..len])
                .expect("same bytes decode again");
            assert_eq!(again, Decoded::Complete { header, len });
            let _ = header.tlvs().count();
            if let Some(ssl) = header.ssl() {
                let _ = ssl.sub_tlvs().count();
            }
            let mut out = vec![0u8; 70_000];
            match header.encode(&mut out) {
                Ok(written) if header.version() == Version::V2 => {
                    let (round, used) = strict
                        .decode(&out[..written])
                        .expect("our v2 output decodes with CRC32C verified")
                        .complete()
                        .expect("our v2 output is complete");
                    assert_eq!(used, written);
                    // A LOCAL header whose address block was too short for its family comes
                    // back as LOCAL/UNSPEC without it.
                    let discarded = header.command() == Command::Local && out[13] != data[13];
                    if strict.decode(&data[..len]).is_ok() && !discarded {
                        assert_eq!(&out[..written], &data[..len], "v2 re-encodes byte for byte");
                    } else {
                        // Only the checksum was wrong, or the block was discarded: everything
                        // else is kept.
                        assert!(header.crc32c().is_some() || discarded);
                        assert_eq!(round.addresses(), header.addresses());
                        assert_eq!(round.command(), header.command());
                        assert_eq!(round.protocol(), header.protocol());
                        assert!(
                            round
                                .tlvs()
                                .filter(|t| t.kind() != 3)
                                .eq(header.tlvs().filter(|t| t.kind() != 3))
                        );
                    }
                }
                Ok(written) => {
                    let (round, used) = decoder
                        .decode(&out[..written])
                        .expect("our v1 output decodes")
                        .complete()
                        .expect("our v1 output is complete");
                    assert_eq!(used, written);
                    assert_eq!(round.addresses(), header.addresses());
                }
                Err(err) => panic!("a decoded header failed to encode: {err}"),
            }
        }
        Ok(Decoded::Incomplete { needed }) => assert!(needed >= 1),
        Err(err) => {
            assert!(!err.to_string().is_empty());
            assert!(!err.metric_label().is_empty());
        }
    }
}
