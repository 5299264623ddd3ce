//! Cross-crate tests and benchmarks of kleidiai-rs; nothing to use here.

/// The README's code blocks, compiled and run as doctests (on the host and
/// under qemu for every CPU model).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
