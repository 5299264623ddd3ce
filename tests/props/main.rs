//! Property tests of the public API: random shapes and random invalid
//! arguments (short and oversized buffers, zero dimensions, sizes that
//! overflow `usize`, k off the block length, packed buffers of another
//! kernel), NaN and infinities. Every invalid call must be an `Err` (never
//! a panic), every valid call must match the family reference.
//!
//! Each property records how many cases it ran (`xtask test` sums them).
//! `KLEIDIAI_PROPTEST_SCALE=10` runs ten times as many cases. Seeds are
//! fixed per property (the same cases every run); a failure prints its
//! seed, `KLEIDIAI_PROPTEST_SEED=<seed>` replays it, and
//! `KLEIDIAI_PROPTEST_SEED=random` explores new cases.
//!
//! What non-finite inputs do (no undefined behaviour either way):
//! see the crate docs of [`kleidiai::weights`].

#[path = "../common/mod.rs"]
mod common;
mod file;
mod ggml;
mod harness;
mod kernels;
mod strat;
mod weights;
