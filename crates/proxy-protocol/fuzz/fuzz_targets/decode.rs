//! Arbitrary bytes through the default decoder and a lenient one.
#![no_main]

use hairpin_proxy_protocol::Decoder;
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    common::check(&Decoder::new(), data);
    common::check(
        &Decoder::new()
            .verify_crc32c(false)
            .max_header_len(usize::MAX),
        data,
    );
});
