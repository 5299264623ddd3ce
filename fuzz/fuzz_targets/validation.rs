//! The validation layer under arbitrary calls: see
//! `kleidiai_fuzz::validation` (fuzz/src/validation.rs) for what the fuzz
//! bytes become and what is asserted.
#![no_main]

use kleidiai_fuzz::validation::{Call, run};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|calls: Vec<Call>| run(calls));
