//! ggml compatibility: ggml's quantised block types, and (as the crate grows)
//! repacking of ggml weights, `mul_mat` with ggml's tensor semantics and
//! `get_rows` from packed weights.

mod blocks;
mod tensor;

pub use blocks::{
    BlockQ4_0, BlockQ8_0, QK4_0, QK8_0, q4_0_as_bytes, q4_0_from_bytes, q8_0_as_bytes, q8_0_from_bytes, quantize_q4_0,
    quantize_q8_0,
};
pub use tensor::{GgmlType, Tensor, TensorMut};
