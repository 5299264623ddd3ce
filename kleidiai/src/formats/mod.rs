//! Unpacked weight formats the families take as input, with their checks.
//! One file per format kind.

pub(crate) mod check;
mod depthwise;
mod float;
/// ggml's Q4_0 and Q8_0 blocks (public as `kleidiai::ggml::BlockQ4_0`, ...).
pub(crate) mod ggml_blocks;
mod indirection;
mod int4;
mod int4_asym_block;
mod int4_block;
mod int8;
mod static_int;
mod uint2;
mod uint8;

/// `impl From<$t> for $enum` for each variant `$variant($t)` of an enum of
/// weight views (all borrowing for `'a`).
macro_rules! variant_from {
    ($enum:ident: $($variant:ident($t:ident)),+ $(,)?) => {
        $(
            impl<'a> From<$t<'a>> for $enum<'a> {
                fn from(w: $t<'a>) -> Self {
                    $enum::$variant(w)
                }
            }
        )+
    };
}
pub(crate) use variant_from;

pub use depthwise::{DepthwiseShape, DepthwiseWeights};
pub use float::{FloatElement, FloatWeights};
pub use indirection::Indirection;
pub use int4::{Int4Encoding, Int4PerChannel, Order};
pub use int4_asym_block::{Int4AsymBlock, NibbleOrder};
pub use int4_block::{BlockInt4, BlockScales, Int4Blocks, Q4_0, Q4_0_BLOCK, Q4_0_BLOCK_BYTES, ScaleType};
pub use int8::Int8PerChannel;
pub use static_int::{StaticInt4Weights, StaticInt8Weights};
pub use uint2::UInt2PerChannel;
pub use uint8::U8Weights;
