//! Safe Rust interface to [Arm KleidiAI](https://github.com/ARM-software/kleidiai)'s
//! matmul micro-kernels (NEON dot-product and i8mm, SVE, SME, SME2), with the
//! best kernel chosen at run time, threads on rayon, and every precondition
//! checked before any foreign call.
//!
//! # Layers
//!
//! - [`weights::PackedWeights`]: pack weights once for the best kernels of this
//!   CPU, multiply many times, save/load packed weights. Start here, with
//!   `use kleidiai::prelude::*`.
//! - [`ggml`]: ggml-compatible blocks, tensors and operations.
//! - [`families`]: one module per upstream kernel family: its kernels, packing,
//!   portable reference and tests. Use these to drive one particular kernel.
//! - [`registry`]: every compiled kernel as data; selection; the report of what
//!   is built, runnable and selected. [`cpu`]: feature detection and proof
//!   tokens. [`par`]: [`Parallelism`] and the SME thread cap.
//!
//! # Example
//!
//! ```
//! use kleidiai::prelude::*;
//!
//! // 4 output channels, 32 inputs, int4 weights (all 1) with scale 0.25.
//! let (n, k) = (4, 32);
//! let data = vec![0x11u8; n * k / 2];
//! let w = Weights::int4_per_channel(n, k, &data, &[0.25; 4])?;
//! let packed = PackedWeights::pack(&w, &PackOptions::default())?;
//!
//! let x = vec![0.5f32; k]; // one row: GEMV
//! let mut y = vec![0f32; n];
//! packed.matmul(1, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE,
//!               Parallelism::Rayon(0), &mut Scratch::default())?;
//! assert!((y[0] - 4.0).abs() < 0.05); // 32 * 0.5 * 0.25
//! # Ok::<(), kleidiai::Error>(())
//! ```
//!
//! [`prelude`] holds what a matmul needs; [`weights`] has the constructor of
//! every weight kind ([`weights::Weights`]) and the table of the activation
//! types each takes.
//!
//! On x86 (or any target without KleidiAI) the same code runs the portable
//! reference implementation.
//!
//! # Where `unsafe` lives
//!
//! Every call into KleidiAI is made in one file, the kernel engine
//! (`families/engine.rs`): upstream's queries through the proof that the
//! CPU runs the kernel, and each packer and kernel run through a checked
//! driver that compares shapes, lengths, alignment, offsets and layouts
//! before its one call (the steady state of
//! [`PackedWeights::matmul`](weights::PackedWeights::matmul) too: the
//! checks made once per weights, `m` and CPU features, then only the calls).
//! The families describe their kernels as data and hold no `unsafe` block.
//! Besides the engine: `ggml/threads.rs` (ggml's raw pointers, vouched for
//! once at the raw entry points of [`ggml`]), `arch.rs` (the operating
//! system's queries and the crate's own instructions, each checking what it
//! needs) and the public unchecked per-thread calls of [`weights::parts`]
//! (their `# Safety` sections name the checks to pass first). A test
//! (`tests/unsafe_rooms.rs`) fails when a block appears anywhere else.
//!
//! # Environment
//!
//! - `KLEIDIAI_DISABLE=sme2,sme,...` (or [`cpu::disable`]) switches tiers off.
//! - `KLEIDIAI_SME_THREADS=N` (or [`par::set_sme_thread_cap`]) lets N threads run
//!   SME kernels at once (default 1: SME units are shared per cluster).
//! - `GGML_KLEIDIAI_SME` (ggml's variable, [`ggml`]): `0` no SME kernels, `N`
//!   at most N threads on them.
//!
//! Each is read once per process. A value that cannot be read prints one
//! warning to stderr naming it and what was done instead: unknown words of
//! `KLEIDIAI_DISABLE` are ignored (the known ones apply, see
//! [`cpu::DISABLE_ENV`]); a bad `KLEIDIAI_SME_THREADS` or `GGML_KLEIDIAI_SME`
//! means the automatic setting (see [`par::SME_THREADS_ENV`]; ggml does the
//! same with its variable).
#![deny(missing_docs)]
// `ok_or_else(|| Error::..)` even for variants without a heap part: an
// eager `Error` is built and dropped on every successful call (its drop
// glue is a call), measured at about 140 guest instructions per ggml
// mul_mat in the llama.cpp steady state.
#![allow(clippy::unnecessary_lazy_evaluations)]
// Off aarch64 the FFI glue is compiled out; the helpers it uses stay.
#![cfg_attr(not(target_arch = "aarch64"), allow(dead_code, unused_imports))]

mod arch;
mod buffer;
pub mod cpu;
mod error;
pub mod families;
pub mod formats;
pub mod ggml;
#[cfg(all(test, target_arch = "aarch64"))]
mod interplay_tests;
pub mod packed;
pub mod par;
pub mod prelude;
pub mod quant;
pub mod registry;
#[cfg(test)]
pub(crate) mod testing;
pub mod weights;

#[doc(hidden)] // an internal of the crate, for the workspace's tests; not part of the API
pub use buffer::AlignedBuf;
pub use error::{Error, FileError, Result};
/// The [`half`] crate, whose `f16` and `bf16` the API takes (also in the
/// [`prelude`]).
pub use half;
pub use kleidiai_sys as sys;
pub use packed::{Clamp, PackedLayout, PackedLhs, PackedRhs};
pub use par::Parallelism;
