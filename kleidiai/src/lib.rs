//! Safe interface to Arm KleidiAI's matmul micro-kernels.
#![deny(missing_docs)]

pub mod cpu;

pub use kleidiai_sys as sys;
