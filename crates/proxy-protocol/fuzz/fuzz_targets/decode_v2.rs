//! Arbitrary bytes after the v2 signature through a v2-only decoder, with and without CRC32C
//! verification (so mutations get past the checksum to the TLV parser).
#![no_main]

use hairpin_proxy_protocol::{Decoder, V2_SIGNATURE, Version};
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let mut header = V2_SIGNATURE.to_vec();
    header.extend_from_slice(data);
    let v2 = Decoder::new().only(Version::V2).max_header_len(usize::MAX);
    common::check(&v2, &header);
    common::check(&v2.verify_crc32c(false), &header);
});
