//! Packed weights: pack once, keep, multiply many times; save and load them.

pub mod file;
