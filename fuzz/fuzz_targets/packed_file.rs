//! Arbitrary bytes through every packed-weight and ggml-container loader:
//! see `kleidiai_fuzz::packed_file` (fuzz/src/packed_file.rs) for what is
//! loaded and asserted.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| kleidiai_fuzz::packed_file::run(input));
