//! Cross-crate tests and benchmarks of kleidiai-rs; nothing to use here.
