//! Safe interface to Arm KleidiAI's matmul micro-kernels.
#![deny(missing_docs)]
// Off aarch64 the FFI glue is compiled out; the helpers it uses stay.
#![cfg_attr(not(target_arch = "aarch64"), allow(dead_code, unused_imports))]

mod buffer;
pub mod cpu;
mod error;
pub mod families;
pub mod formats;
pub mod ggml;
pub mod packed;
pub mod par;
pub mod quant;
pub mod registry;
#[cfg(test)]
pub(crate) mod testing;
pub mod weights;

pub use buffer::AlignedBuf;
pub use error::{Error, Result};
pub use kleidiai_sys as sys;
pub use packed::{Clamp, PackedLayout, PackedLhs, PackedRhs};
pub use par::Parallelism;
