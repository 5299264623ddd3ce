//! Arbitrary bytes as a packed-weight file: parsing returns Ok or Err,
//! never panics or reads out of bounds; an accepted file re-serialises to
//! the same header bytes.
#![no_main]

use kleidiai::weights::file::FileHeader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = FileHeader::parse(data) {
        let bytes = h.to_bytes().expect("an accepted header serialises");
        assert_eq!(&bytes[..], &data[..bytes.len()]);
    }
});
