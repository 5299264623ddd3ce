//! ggml compatibility: ggml's quantised block types ([`BlockQ4_0`],
//! [`BlockQ8_0`]), tensor descriptions ([`Tensor`]), and its KleidiAI path:
//! [`GgmlWeights::repack`] once, then [`GgmlWeights::mul_mat`] and
//! [`GgmlWeights::get_rows`] with ggml's semantics and kernel order.
//!
//! Non-finite inputs: as ggml's own KleidiAI path, kernel-dependent. Neither
//! scans the activations (ggml's path is measured against ours instruction
//! for instruction), so a NaN or an infinity gives whatever the selected
//! kernel makes of it (NaN, a finite value, ±3.4e38), and the weights'
//! non-finite channels are not applied either; the call does not fail or
//! crash (tested). [`crate::weights::PackedWeights::matmul`] has one policy
//! for every kernel: NaN in the rows and output channels they touch.

use crate::formats::ggml_blocks as blocks;
mod f16_per_call;
mod loaders;
mod mul_mat;
mod tensor;
mod threads;

pub use blocks::{
    BlockQ4_0, BlockQ8_0, QK4_0, QK8_0, q4_0_as_bytes, q4_0_from_bytes, q8_0_as_bytes, q8_0_blocks_from_bytes,
    q8_0_from_bytes, quantize_q4_0, quantize_q8_0,
};
pub use mul_mat::{GgmlWeights, MulMatScratch, SME_ENV, kernel_table, parse_sme_setting, sme_setting};

#[cfg(test)]
mod tests;
pub use crate::weights::parts::OutputBlock;
pub use f16_per_call::F16PerCall;
pub use tensor::{GgmlType, Tensor, TensorMut};
pub use threads::{RawOperands, SharedBytes, SingleThread, SmeSetting, ThreadTeam, ThreadedWeights};
