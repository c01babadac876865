//! Arbitrary text after `PROXY ` through a v1-only decoder.
#![no_main]

use hairpin_proxy_protocol::{Decoder, Version};
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let mut line = b"PROXY ".to_vec();
    line.extend_from_slice(data);
    common::check(&Decoder::new().only(Version::V1), &line);
});
