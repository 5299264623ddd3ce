//! What a matmul needs, in one import: `use kleidiai::prelude::*;`.
//!
//! ```
//! use kleidiai::prelude::*;
//!
//! let (n, k, m) = (4, 64, 2);
//! let w = vec![0.25f32; n * k];
//! let packed = PackedWeights::pack(&Weights::f32(n, k, &w)?, &PackOptions::default())?;
//! let x = vec![1.0f32; m * k];
//! let mut y = vec![0f32; m * n];
//! packed.matmul(m, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE,
//!               Parallelism::Sequential, &mut Scratch::default())?;
//! assert_eq!(y, vec![16.0; m * n]);
//! # Ok::<(), kleidiai::Error>(())
//! ```
//!
//! It holds the types of [`PackedWeights`]'
//! calls, their options and errors, and [`half`]'s `f16` and `bf16`; no
//! function and no trait, and not `Result` (it would hide the standard
//! one). The weight formats' own structs stay in [`crate::formats`].

pub use crate::error::Error;
pub use crate::packed::Clamp;
pub use crate::par::Parallelism;
pub use crate::weights::{
    Activation, ActivationMut, DType, NonFinite, PackOptions, PackedWeights, Scratch, WeightKind, Weights, WeightsRef,
};
pub use half::{bf16, f16};
