//! Packed weights: pack once, keep, multiply many times, save and load.
//!
//! [`PackedWeights::pack`] picks the best kernels the CPU runs for the weight
//! kind (a GEMM kernel, and a GEMV kernel for `m == 1` that shares the packed
//! layout or gets its own), packs the weights for them, and
//! [`PackedWeights::matmul`] computes `y = x · wᵀ (+ bias)` with them, reusing
//! a [`Scratch`] so steady-state calls do not allocate. Where no kernel can
//! run (x86, a CPU without the tier, every tier switched off), the family's
//! portable reference computes the same thing.
//!
//! ```
//! use kleidiai::prelude::*;
//!
//! let (n, k) = (8, 64);
//! let data = vec![0x21u8; n * k / 2]; // every weight pair [1, 2]
//! let scales = vec![0.5f32; n];
//! let w = Weights::int4_per_channel(n, k, &data, &scales)?;
//! let packed = PackedWeights::pack(&w, &PackOptions::default())?;
//!
//! let x = vec![1.0f32; 2 * k];
//! let mut y = vec![0f32; 2 * n];
//! let mut scratch = Scratch::default();
//! packed.matmul(2, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE, Parallelism::Sequential, &mut scratch)?;
//! assert!((y[0] - 48.0).abs() < 0.5); // 32 * (1 + 2) * 0.5
//! println!("kernel for m=2: {}", packed.kernel_for(2).unwrap_or("reference"));
//! # Ok::<(), kleidiai::Error>(())
//! ```
//!
//! The constructors of [`Weights`] (another name of [`WeightsRef`]) take
//! the common layouts and check them; the variants of [`WeightsRef`] take
//! the structs of [`crate::formats`], for the other orders, encodings and
//! a bias.
//!
//! # Which activations each weight kind takes
//!
//! [`PackedWeights::pack`] packs for one activation type,
//! [`PackOptions::activation`] (default f32), and
//! [`PackedWeights::matmul`] then takes activations and writes outputs of
//! that type, both the same. Where the table says yes, an operation
//! exists on every CPU (kernels where the CPU has them, the portable
//! reference otherwise; [`policy`] says which kernels, best first); any
//! other pairing, and activations and outputs of different types, are an
//! error on every CPU.
//!
#![doc = include_str!("activations.md")]
//!
//! Asymmetric int4 blocks pack with a block length that is a multiple of
//! 32. Int8 activations (statically quantised) are not taken here: the
//! `qai8` families of [`crate::families`] take them, one kernel family at a
//! time.

mod backend;
mod f16_kxn;
pub mod file;
mod front;
mod non_finite;
pub(crate) mod parts;
mod per_call;
pub mod policy;

use crate::buffer::AlignedBuf;
use crate::cpu::Features;
use crate::error::{Error, FileError, Result};
use crate::families::engine::Prepared;
use crate::formats::{
    BlockInt4, BlockScales, FloatElement, FloatWeights, Int4AsymBlock, Int4Blocks, Int4Encoding, Int4PerChannel,
    Int8PerChannel, NibbleOrder, Order, Q4_0,
};
use crate::ggml::{BlockQ8_0, QK8_0};
use crate::packed::{Clamp, PackedLayout, PackedRhs};
use crate::par::Parallelism;
use crate::registry::{self, TileKind};
use backend::{Backend, Work};
use core::sync::atomic::{AtomicU64, Ordering};
use half::{bf16, f16};
use per_call::PerCall;
use policy::Pairing;

pub use front::Weights;
use std::sync::Arc;

/// Element type of activations and outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum DType {
    /// `f32`.
    #[default]
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
}

impl DType {
    fn id(self) -> u32 {
        self as u32
    }
    fn from_id(id: u32) -> Option<DType> {
        [DType::F32, DType::F16, DType::Bf16].into_iter().find(|d| d.id() == id)
    }
    /// The name errors print (as `Debug` does).
    pub(crate) fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::Bf16 => "Bf16",
        }
    }
}

/// Activations (the LHS, `m x k`, dense).
#[derive(Clone, Copy, Debug)]
pub enum Activation<'a> {
    /// f32 values.
    F32(&'a [f32]),
    /// f16 values.
    F16(&'a [f16]),
    /// bf16 values.
    Bf16(&'a [bf16]),
}

/// Outputs (`m x n`, dense).
#[derive(Debug)]
pub enum ActivationMut<'a> {
    /// f32 values.
    F32(&'a mut [f32]),
    /// f16 values.
    F16(&'a mut [f16]),
    /// bf16 values.
    Bf16(&'a mut [bf16]),
}

impl Activation<'_> {
    /// Number of values.
    fn len(&self) -> usize {
        match self {
            Activation::F32(v) => v.len(),
            Activation::F16(v) => v.len(),
            Activation::Bf16(v) => v.len(),
        }
    }
    fn dtype(&self) -> DType {
        match self {
            Activation::F32(_) => DType::F32,
            Activation::F16(_) => DType::F16,
            Activation::Bf16(_) => DType::Bf16,
        }
    }
}

impl ActivationMut<'_> {
    /// Number of values.
    fn len(&self) -> usize {
        match self {
            ActivationMut::F32(v) => v.len(),
            ActivationMut::F16(v) => v.len(),
            ActivationMut::Bf16(v) => v.len(),
        }
    }
    fn dtype(&self) -> DType {
        match self {
            ActivationMut::F32(_) => DType::F32,
            ActivationMut::F16(_) => DType::F16,
            ActivationMut::Bf16(_) => DType::Bf16,
        }
    }
    fn reborrow(&mut self) -> ActivationMut<'_> {
        match self {
            ActivationMut::F32(v) => ActivationMut::F32(v),
            ActivationMut::F16(v) => ActivationMut::F16(v),
            ActivationMut::Bf16(v) => ActivationMut::Bf16(v),
        }
    }
}

/// The kinds of weights [`PackedWeights`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WeightKind {
    /// Dense f32.
    F32,
    /// Dense f16.
    F16,
    /// Dense bf16.
    Bf16,
    /// Int8 values with one f32 scale per output channel (also ggml Q8_0,
    /// requantised per row the way ggml's KleidiAI path does).
    Int8PerChannel,
    /// Int4 values with one f32 scale per output channel.
    Int4PerChannel,
    /// Int4 values with one scale per block of `bl` along K (also ggml Q4_0).
    Int4Block,
    /// Asymmetric int4 blocks: scale and offset per block.
    Int4AsymBlock,
}

impl WeightKind {
    const ALL: [WeightKind; 7] = [
        WeightKind::F32,
        WeightKind::F16,
        WeightKind::Bf16,
        WeightKind::Int8PerChannel,
        WeightKind::Int4PerChannel,
        WeightKind::Int4Block,
        WeightKind::Int4AsymBlock,
    ];
    fn id(self) -> u32 {
        match self {
            WeightKind::F32 => 1,
            WeightKind::F16 => 2,
            WeightKind::Bf16 => 3,
            WeightKind::Int8PerChannel => 4,
            WeightKind::Int4PerChannel => 5,
            WeightKind::Int4Block => 6,
            WeightKind::Int4AsymBlock => 7,
        }
    }
    fn from_id(id: u32) -> Option<WeightKind> {
        Self::ALL.into_iter().find(|k| k.id() == id)
    }
    /// The name errors print (as `Debug` does).
    pub(crate) fn name(self) -> &'static str {
        match self {
            WeightKind::F32 => "F32",
            WeightKind::F16 => "F16",
            WeightKind::Bf16 => "Bf16",
            WeightKind::Int8PerChannel => "Int8PerChannel",
            WeightKind::Int4PerChannel => "Int4PerChannel",
            WeightKind::Int4Block => "Int4Block",
            WeightKind::Int4AsymBlock => "Int4AsymBlock",
        }
    }
}

/// Unpacked weights to pack, `n` output channels by `k` inputs.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum WeightsRef<'a> {
    /// Dense f32 weights (and bias).
    F32(FloatWeights<'a, f32>),
    /// Dense f16 weights (and bias).
    F16(FloatWeights<'a, f16>),
    /// Dense bf16 weights (and bias).
    Bf16(FloatWeights<'a, bf16>),
    /// Int8 per-channel weights.
    Int8PerChannel(Int8PerChannel<'a>),
    /// Int4 per-channel weights.
    Int4PerChannel(Int4PerChannel<'a>),
    /// Block-quantised int4 weights, including ggml `Q4_0` bytes.
    Int4Block(BlockInt4<'a>),
    /// Asymmetric block int4 weights.
    Int4AsymBlock(Int4AsymBlock<'a>),
    /// ggml `Q8_0` rows (`n` rows of `k / 32` blocks): requantised per row to
    /// int8 with one f32 scale (`max|v| / 127`), as ggml's KleidiAI path does.
    GgmlQ8_0 {
        /// Output channels.
        n: usize,
        /// Inputs per channel (a multiple of 32).
        k: usize,
        /// The blocks, row after row.
        blocks: &'a [BlockQ8_0],
    },
}

impl WeightsRef<'_> {
    /// The weight kind of the packed result.
    pub fn kind(&self) -> WeightKind {
        match self {
            WeightsRef::F32(_) => WeightKind::F32,
            WeightsRef::F16(_) => WeightKind::F16,
            WeightsRef::Bf16(_) => WeightKind::Bf16,
            WeightsRef::Int8PerChannel(_) | WeightsRef::GgmlQ8_0 { .. } => WeightKind::Int8PerChannel,
            WeightsRef::Int4PerChannel(_) => WeightKind::Int4PerChannel,
            WeightsRef::Int4Block(_) => WeightKind::Int4Block,
            WeightsRef::Int4AsymBlock(_) => WeightKind::Int4AsymBlock,
        }
    }
    pub(crate) fn kind_name(&self) -> &'static str {
        match self {
            WeightsRef::F32(_) => "f32 weights",
            WeightsRef::F16(_) => "f16 weights",
            WeightsRef::Bf16(_) => "bf16 weights",
            WeightsRef::Int8PerChannel(_) => "int8 per-channel weights",
            WeightsRef::Int4PerChannel(_) => "int4 per-channel weights",
            WeightsRef::Int4Block(_) => "block int4 weights",
            WeightsRef::Int4AsymBlock(_) => "asymmetric block int4 weights",
            WeightsRef::GgmlQ8_0 { .. } => "ggml Q8_0 weights",
        }
    }
    /// `(n, k)`.
    pub fn shape(&self) -> (usize, usize) {
        match self {
            WeightsRef::F32(w) => (w.n, w.k),
            WeightsRef::F16(w) => (w.n, w.k),
            WeightsRef::Bf16(w) => (w.n, w.k),
            WeightsRef::Int8PerChannel(w) => (w.n, w.k),
            WeightsRef::Int4PerChannel(w) => (w.n, w.k),
            WeightsRef::Int4Block(w) => (w.n(), w.k()),
            WeightsRef::Int4AsymBlock(w) => (w.n, w.k),
            WeightsRef::GgmlQ8_0 { n, k, .. } => (*n, *k),
        }
    }
    /// Whether a bias comes with the weights.
    pub fn has_bias(&self) -> bool {
        match self {
            WeightsRef::F32(w) => w.bias.is_some(),
            WeightsRef::F16(w) => w.bias.is_some(),
            WeightsRef::Bf16(w) => w.bias.is_some(),
            WeightsRef::Int8PerChannel(w) => w.bias.is_some(),
            WeightsRef::Int4PerChannel(w) => w.bias.is_some(),
            WeightsRef::Int4Block(BlockInt4::Q4_0(w)) => w.bias.is_some(),
            WeightsRef::Int4Block(BlockInt4::Blocks(w)) => w.bias.is_some(),
            WeightsRef::Int4AsymBlock(w) => w.bias.is_some(),
            WeightsRef::GgmlQ8_0 { .. } => false,
        }
    }

    /// Bytes of the weights as given: values, scales and offsets, bias (what
    /// [`PackedWeights::packed_bytes`] compares with; the sizes the fields
    /// need, not the slices' lengths).
    pub fn bytes(&self) -> usize {
        let (n, k) = self.shape();
        let bias = |b: Option<&[f32]>| b.map_or(0, |_| n * 4);
        let blocks = |bl: usize| if bl == 0 { 0 } else { n * k.div_ceil(bl) };
        match self {
            WeightsRef::F32(w) => n * k * 4 + w.bias.map_or(0, |_| n * 4),
            WeightsRef::F16(w) => n * k * 2 + w.bias.map_or(0, |_| n * 2),
            WeightsRef::Bf16(w) => n * k * 2 + w.bias.map_or(0, |_| n * 2),
            WeightsRef::Int8PerChannel(w) => n * k + n * 4 + bias(w.bias),
            WeightsRef::Int4PerChannel(w) => w.data_len().unwrap_or(n * k.div_ceil(2)) + n * 4 + bias(w.bias),
            WeightsRef::Int4Block(BlockInt4::Q4_0(q)) => n * k / 32 * 18 + bias(q.bias),
            WeightsRef::Int4Block(BlockInt4::Blocks(b)) => n * k.div_ceil(2) + blocks(b.bl) * 2 + bias(b.bias),
            WeightsRef::Int4AsymBlock(a) => n * k.div_ceil(2) + blocks(a.bl) * 8 + bias(a.bias),
            WeightsRef::GgmlQ8_0 { .. } => n * k / QK8_0 * 34,
        }
    }

    /// Quantisation block length along K (0: none).
    pub fn bl(&self) -> usize {
        match self {
            WeightsRef::Int4Block(w) => w.bl(),
            WeightsRef::Int4AsymBlock(w) => w.bl,
            _ => 0,
        }
    }
    fn validate(&self) -> Result<()> {
        match self {
            WeightsRef::F32(w) => w.validate(),
            WeightsRef::F16(w) => w.validate(),
            WeightsRef::Bf16(w) => w.validate(),
            WeightsRef::Int8PerChannel(w) => w.validate(),
            WeightsRef::Int4PerChannel(w) => w.validate(),
            WeightsRef::Int4Block(w) => w.validate(),
            WeightsRef::Int4AsymBlock(w) => w.validate(),
            WeightsRef::GgmlQ8_0 { n, k, blocks } => {
                crate::error::nonzero(*n, "n")?;
                crate::error::nonzero(*k, "k")?;
                crate::error::multiple_of(*k, QK8_0, "k", "ggml Q8_0 rows are whole blocks of 32")?;
                crate::error::at_least(blocks.len(), crate::error::mul(*n, *k / QK8_0, "Q8_0 blocks")?, "Q8_0 blocks")
            }
        }
    }
    /// Dense f32 weights (N x K) and bias, for families that take f32.
    pub(crate) fn to_f32(self) -> Result<(Vec<f32>, Option<Vec<f32>>)> {
        fn bias<T: FloatElement>(b: Option<&[T]>, n: usize) -> Option<Vec<f32>> {
            b.map(|b| b[..n].iter().map(|x| x.to_f32()).collect())
        }
        match self {
            WeightsRef::F32(w) => Ok((w.to_f32_nxk()?, bias(w.bias, w.n))),
            WeightsRef::F16(w) => Ok((w.to_f32_nxk()?, bias(w.bias, w.n))),
            WeightsRef::Bf16(w) => Ok((w.to_f32_nxk()?, bias(w.bias, w.n))),
            other => Err(Error::ElementType { what: "weights", expected: "dense float", got: other.kind_name() }),
        }
    }
    /// A private copy (Q8_0 requantised to int8 per channel).
    fn to_owned_weights(self) -> Result<OwnedWeights> {
        self.validate()?;
        let v = |b: Option<&[f32]>, n: usize| b.map(|b| b[..n].to_vec());
        Ok(match self {
            WeightsRef::F32(w) => {
                OwnedWeights::F32 { n: w.n, k: w.k, data: w.data_in(Order::NxK), bias: v(w.bias, w.n) }
            }
            WeightsRef::F16(w) => OwnedWeights::F16 {
                n: w.n,
                k: w.k,
                data: w.data_in(Order::NxK),
                bias: w.bias.map(|b| b[..w.n].to_vec()),
            },
            WeightsRef::Bf16(w) => OwnedWeights::Bf16 {
                n: w.n,
                k: w.k,
                data: w.data_in(Order::NxK),
                bias: w.bias.map(|b| b[..w.n].to_vec()),
            },
            WeightsRef::Int8PerChannel(w) => OwnedWeights::Int8 {
                n: w.n,
                k: w.k,
                order: w.order,
                data: w.data[..w.n * w.k].to_vec(),
                scales: w.scales[..w.n].to_vec(),
                bias: v(w.bias, w.n),
            },
            WeightsRef::GgmlQ8_0 { n, k, blocks } => requantize_q8_0(n, k, blocks)?,
            WeightsRef::Int4PerChannel(w) => OwnedWeights::Int4 {
                n: w.n,
                k: w.k,
                order: w.order,
                encoding: w.encoding,
                data: w.data[..w.data_len()?].to_vec(),
                scales: w.scales[..w.n].to_vec(),
                bias: v(w.bias, w.n),
            },
            WeightsRef::Int4Block(BlockInt4::Q4_0(q)) => OwnedWeights::Q4_0 {
                n: q.n,
                k: q.k,
                data: q.data[..q.n * q.k / 32 * 18].to_vec(),
                bias: v(q.bias, q.n),
            },
            WeightsRef::Int4Block(BlockInt4::Blocks(b)) => OwnedWeights::Int4Blocks {
                n: b.n,
                k: b.k,
                bl: b.bl,
                order: b.order,
                encoding: b.encoding,
                data: b.data.to_vec(),
                scales: match b.scales {
                    BlockScales::F16(s) => OwnedScales::F16(s.to_vec()),
                    BlockScales::Bf16(s) => OwnedScales::Bf16(s.to_vec()),
                },
                bias: v(b.bias, b.n),
            },
            WeightsRef::Int4AsymBlock(a) => OwnedWeights::Int4Asym {
                n: a.n,
                k: a.k,
                bl: a.bl,
                encoding: a.encoding,
                nibbles: a.nibbles,
                data: a.data.to_vec(),
                scales: a.scales.to_vec(),
                offsets: a.offsets.to_vec(),
                bias: v(a.bias, a.n),
            },
        })
    }
}

/// ggml's KleidiAI repack of Q8_0: per row, the dequantised values' `max|v|`
/// gives one scale `max / 127`; values are `round(v / scale)` clamped to ±127.
fn requantize_q8_0(n: usize, k: usize, blocks: &[BlockQ8_0]) -> Result<OwnedWeights> {
    let per_row = k / QK8_0;
    let mut data = vec![0i8; crate::error::mul(n, k, "Q8_0 weights")?];
    let mut scales = vec![0f32; n];
    for row in 0..n {
        let vals: Vec<f32> = blocks[row * per_row..(row + 1) * per_row].iter().flat_map(|b| b.dequantize()).collect();
        let max_abs = vals.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = if max_abs > 0.0 { max_abs / 127.0 } else { 0.0 };
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        scales[row] = scale;
        for (j, v) in vals.iter().enumerate() {
            // C's lround: halves away from zero, like f32::round.
            let q = if scale > 0.0 { (v * inv).round() as i32 } else { 0 };
            data[row * k + j] = q.clamp(-127, 127) as i8;
        }
    }
    Ok(OwnedWeights::Int8 { n, k, order: Order::NxK, data, scales, bias: None })
}

#[derive(Clone, Debug)]
enum OwnedScales {
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
}

/// A private copy of unpacked weights, for the reference path.
#[derive(Clone, Debug)]
enum OwnedWeights {
    F32 {
        n: usize,
        k: usize,
        data: Vec<f32>,
        bias: Option<Vec<f32>>,
    },
    F16 {
        n: usize,
        k: usize,
        data: Vec<f16>,
        bias: Option<Vec<f16>>,
    },
    Bf16 {
        n: usize,
        k: usize,
        data: Vec<bf16>,
        bias: Option<Vec<bf16>>,
    },
    Int8 {
        n: usize,
        k: usize,
        order: Order,
        data: Vec<i8>,
        scales: Vec<f32>,
        bias: Option<Vec<f32>>,
    },
    Int4 {
        n: usize,
        k: usize,
        order: Order,
        encoding: Int4Encoding,
        data: Vec<u8>,
        scales: Vec<f32>,
        bias: Option<Vec<f32>>,
    },
    Q4_0 {
        n: usize,
        k: usize,
        data: Vec<u8>,
        bias: Option<Vec<f32>>,
    },
    Int4Blocks {
        n: usize,
        k: usize,
        bl: usize,
        order: Order,
        encoding: Int4Encoding,
        data: Vec<u8>,
        scales: OwnedScales,
        bias: Option<Vec<f32>>,
    },
    Int4Asym {
        n: usize,
        k: usize,
        bl: usize,
        encoding: Int4Encoding,
        nibbles: NibbleOrder,
        data: Vec<u8>,
        scales: Vec<f32>,
        offsets: Vec<f32>,
        bias: Option<Vec<f32>>,
    },
}

impl OwnedWeights {
    fn as_ref(&self) -> WeightsRef<'_> {
        match self {
            OwnedWeights::F32 { n, k, data, bias } => {
                WeightsRef::F32(FloatWeights { n: *n, k: *k, order: Order::NxK, data, bias: bias.as_deref() })
            }
            OwnedWeights::F16 { n, k, data, bias } => {
                WeightsRef::F16(FloatWeights { n: *n, k: *k, order: Order::NxK, data, bias: bias.as_deref() })
            }
            OwnedWeights::Bf16 { n, k, data, bias } => {
                WeightsRef::Bf16(FloatWeights { n: *n, k: *k, order: Order::NxK, data, bias: bias.as_deref() })
            }
            OwnedWeights::Int8 { n, k, order, data, scales, bias } => WeightsRef::Int8PerChannel(Int8PerChannel {
                n: *n,
                k: *k,
                order: *order,
                data,
                scales,
                bias: bias.as_deref(),
            }),
            OwnedWeights::Int4 { n, k, order, encoding, data, scales, bias } => {
                WeightsRef::Int4PerChannel(Int4PerChannel {
                    n: *n,
                    k: *k,
                    order: *order,
                    encoding: *encoding,
                    data,
                    scales,
                    bias: bias.as_deref(),
                })
            }
            OwnedWeights::Q4_0 { n, k, data, bias } => {
                WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n: *n, k: *k, data, bias: bias.as_deref() }))
            }
            OwnedWeights::Int4Blocks { n, k, bl, order, encoding, data, scales, bias } => {
                WeightsRef::Int4Block(BlockInt4::Blocks(Int4Blocks {
                    n: *n,
                    k: *k,
                    bl: *bl,
                    order: *order,
                    encoding: *encoding,
                    data,
                    scales: match scales {
                        OwnedScales::F16(s) => BlockScales::F16(s),
                        OwnedScales::Bf16(s) => BlockScales::Bf16(s),
                    },
                    bias: bias.as_deref(),
                }))
            }
            OwnedWeights::Int4Asym { n, k, bl, encoding, nibbles, data, scales, offsets, bias } => {
                WeightsRef::Int4AsymBlock(Int4AsymBlock {
                    n: *n,
                    k: *k,
                    bl: *bl,
                    encoding: *encoding,
                    nibbles: *nibbles,
                    data,
                    scales,
                    offsets,
                    bias: bias.as_deref(),
                })
            }
        }
    }
}

/// The family reference for `w` with these activations: the portable path.
fn reference(w: WeightsRef<'_>, m: usize, x: Activation<'_>, y: ActivationMut<'_>, clamp: Clamp) -> Result<()> {
    use crate::families as fam;
    use Activation as A;
    use ActivationMut as Y;
    match (w, x, y) {
        (WeightsRef::F32(w), A::F32(x), Y::F32(y)) => fam::matmul_clamp_f32_f32_f32p::reference(m, x, &w, clamp, y),
        (w @ (WeightsRef::F16(_) | WeightsRef::Bf16(_)), A::F32(x), Y::F32(y)) => {
            let (n, k) = w.shape();
            let (data, bias) = w.to_f32()?;
            let w32 = FloatWeights { n, k, order: Order::NxK, data: &data, bias: bias.as_deref() };
            fam::matmul_clamp_f32_f32_f32p::reference(m, x, &w32, clamp, y)
        }
        (WeightsRef::F16(w), A::F16(x), Y::F16(y)) => fam::matmul_clamp_f16_f16_f16p::reference(m, x, &w, clamp, y),
        (WeightsRef::Int8PerChannel(w), A::F32(x), Y::F32(y)) => {
            fam::matmul_clamp_f32_qai8dxp_qsi8cxp::reference(m, x, &w, clamp, y)
        }
        (WeightsRef::Int4PerChannel(w), A::F32(x), Y::F32(y)) => {
            fam::matmul_clamp_f32_qai8dxp_qsi4cxp::reference(m, x, &w, clamp, y)
        }
        (WeightsRef::Int4PerChannel(w), A::Bf16(x), Y::Bf16(y)) => {
            fam::matmul_clamp_bf16_qai8dxp_qsi4cxp::reference(m, x, &w, clamp, y)
        }
        (WeightsRef::Int4Block(w), A::F32(x), Y::F32(y)) => {
            fam::matmul_clamp_f32_qai8dxp_qsi4c32p::reference(m, x, w, clamp, y)
        }
        (WeightsRef::Int4Block(w), A::Bf16(x), Y::Bf16(y)) => {
            fam::matmul_clamp_bf16_qai8dxp_qsi4c32p::reference(m, x, w, clamp, y)
        }
        (WeightsRef::Int4AsymBlock(w), A::F32(x), Y::F32(y)) => {
            fam::matmul_clamp_f32_qsi8d32p_qai4c32p::reference(m, x, &w, clamp, y)
        }
        (WeightsRef::Int4AsymBlock(w), A::F16(x), Y::F16(y)) => {
            fam::matmul_clamp_f16_qsi8d32p_qai4c32p::reference(m, x, &w, clamp, y)
        }
        (_, x, y) if x.dtype() != y.dtype() => {
            Err(Error::ElementType { what: "outputs", expected: x.dtype().name(), got: y.dtype().name() })
        }
        (w, x, _) => Err(Error::NoOperation { weights: w.kind_name(), activation: x.dtype().name() }),
    }
}

/// Whether some operation (a family reference, and kernels where the CPU
/// has them) takes weights of `kind` with `act` activations and outputs.
fn operation_exists(kind: WeightKind, act: DType) -> bool {
    use WeightKind as K;
    matches!(
        (kind, act),
        (K::F32 | K::F16 | K::Bf16 | K::Int8PerChannel, DType::F32)
            | (K::F16, DType::F16)
            | (K::Int4PerChannel | K::Int4Block, DType::F32 | DType::Bf16)
            | (K::Int4AsymBlock, DType::F32 | DType::F16)
    )
}

/// How [`PackedWeights::pack`] chooses, and what it keeps.
///
/// The default keeps **one packed copy** of the weights, about the size of
/// the weights as given (plus a bias, and the padding of a kernel's row
/// block), read by both the GEMM kernel (m > 1) and the GEMV kernel (m = 1)
/// of the pairing [`policy`] chooses. Each option that keeps more says what
/// it costs.
///
/// ```
/// use kleidiai::weights::{DType, PackOptions};
/// let opts = PackOptions { activation: DType::F32, non_sme_layout: true, ..PackOptions::default() };
/// assert!(!opts.keep_reference && !opts.keep_as_given);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct PackOptions {
    /// Element type of the activations and outputs the weights will meet.
    pub activation: DType,
    /// When the chosen layout is an SME one, also pack the best layout that
    /// does not need SME (ggml's second slot). Costs one more copy of the
    /// weights (about 1x the input bytes). It serves when SME is switched
    /// off later ([`crate::cpu::disable`]) and the hybrid SME + NEON mode of
    /// [`crate::ggml`]; without it, weights whose only layout cannot run any
    /// more fall back to the reference copy if one was kept, else the call
    /// is an [`Error::Unsupported`]. Default: false.
    pub non_sme_layout: bool,
    /// Keep a copy of the unpacked weights so the portable reference can
    /// serve when no packed layout can run (always kept when none was
    /// packed). Costs one more copy (the input bytes); weights kept as
    /// given (`keep_as_given`) need none. Default: false.
    pub keep_reference: bool,
    /// f16 and bf16 weights on kernels that take f32 (every f16 weight with
    /// f32 activations: upstream has no kernel for them; bf16 weights where
    /// no bf16 kernel runs): keep them as given, one copy the size of the
    /// input, and widen and pack a chunk of channels on every call, instead
    /// of the default widened f32 copy, twice the input bytes. The same
    /// results bit for bit; each call then does the widening and packing,
    /// many times the kernel's own work (25x to 47x the instructions at
    /// m = 1, 1.7x to 4x at m = 64, measured: the README's table).
    /// For weights too large to keep widened. Default: false.
    pub keep_as_given: bool,
    /// Where the chosen pairing names a GEMV kernel that takes fewer
    /// instructions for one row but reads another layout
    /// ([`policy::Pairing::faster_gemv`]), also pack that layout: one more
    /// copy of the weights (about 1x the input bytes) for a faster m = 1
    /// (about 2x fewer instructions for f32 weights on SME2; the README's
    /// table has each case). Default: false.
    pub separate_gemv: bool,
    /// Restrict kernel choice to these features (None: [`Features::current`]).
    pub features: Option<Features>,
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions {
            activation: DType::F32,
            non_sme_layout: false,
            keep_reference: false,
            keep_as_given: false,
            separate_gemv: false,
            features: None,
        }
    }
}

#[derive(Debug)]
struct Slot {
    gemm: Box<dyn Backend>,
    gemv: Option<Box<dyn Backend>>,
    rhs: PackedRhs,
}

/// Reusable scratch (the packed LHS): pass the same one to every call so
/// steady-state calls allocate nothing.
///
/// It also remembers the last call's checked plan: a call with the same
/// weights, `m` and CPU features as the one before, on one worker, skips
/// the checks the first made (kernel choice, blocking, layouts, sizes) and
/// goes straight to the packer and the kernel.
#[derive(Debug, Default)]
pub struct Scratch {
    work: Option<Work>,
    plan: Option<Plan>,
}

/// The checked plan of one `(weights, m, features)`, kept in a [`Scratch`].
#[derive(Debug)]
struct Plan {
    /// [`PackedWeights`]' unique id (never reused in the process, unlike
    /// an address).
    weights: u64,
    m: usize,
    features: Features,
    /// `None`: the chosen kernel keeps the checked path on every call.
    ready: Option<Ready>,
}

/// A plan whose kernel has a steady-state path.
#[derive(Debug)]
struct Ready {
    slot: usize,
    gemv: bool,
    /// The kernel's vector length on the planning thread: reused only
    /// while the calling thread's is the same.
    vector_bytes: usize,
    sme: bool,
    prepared: Prepared,
    /// The packed LHS, zeroed once; the packer rewrites the same bytes on
    /// every call with this plan, so padding it skips stays zero.
    lhs: AlignedBuf,
}

/// Source of [`PackedWeights`] ids.
static NEXT_WEIGHTS_ID: AtomicU64 = AtomicU64::new(1);

fn next_weights_id() -> u64 {
    NEXT_WEIGHTS_ID.fetch_add(1, Ordering::Relaxed)
}

/// Weights packed for the best kernels of this CPU. See the module docs.
#[derive(Debug)]
pub struct PackedWeights {
    /// Unique in the process (see [`Plan`]).
    id: u64,
    n: usize,
    k: usize,
    kind: WeightKind,
    activation: DType,
    slots: Vec<Slot>,
    reference: Option<OwnedWeights>,
    /// The output channels whose weights (values, scales, offsets, bias)
    /// hold a NaN or an infinity, ascending: their outputs are NaN
    /// ([`non_finite`]). Usually empty.
    non_finite_channels: Vec<usize>,
    /// What matmul does with non-finite inputs.
    policy: NonFinite,
}

/// What [`PackedWeights::matmul`] does with a NaN or an infinity among its
/// inputs (set with [`PackedWeights::set_non_finite`]; not saved in files).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum NonFinite {
    /// NaN in every output whose activation row or output channel holds
    /// one, the same on every kernel and the reference (see
    /// [`PackedWeights::matmul`]). Costs a scan of the activations per call
    /// (about 0.3 aarch64 instructions per f32 value).
    #[default]
    Propagate,
    /// [`Error::NonFinite`] naming the first activation row (and value) or
    /// output channel holding one, before anything is computed or written.
    /// The same scan per call.
    Error,
    /// What the kernel gives: kernel-dependent (a NaN may come out finite,
    /// as ±3.4e38 or as NaN), as ggml's own path. No scan: nothing per call.
    /// Some kernels refuse non-finite activations (an error).
    Kernel,
}

/// The backend of kernel `name`, if it serves weights of `kind` with `act`
/// activations.
fn backend_for(kind: WeightKind, act: DType, name: &str) -> Option<Box<dyn Backend>> {
    backend::candidates(kind, act)
        .into_iter()
        .chain(backend::rounding_candidates(kind, act))
        .find(|b| b.info().name == name)
}

/// Zero weights of `kind`, `n x k` (block length `bl`), in the input format
/// the kind's packers take.
fn zero_weights(kind: WeightKind, n: usize, k: usize, bl: usize) -> Result<OwnedWeights> {
    let nk = crate::error::mul(n, k, "weights")?;
    let blocks = || crate::error::mul(n, k / bl.max(1), "block scales");
    Ok(match kind {
        WeightKind::F32 => OwnedWeights::F32 { n, k, data: vec![0.0; nk], bias: None },
        WeightKind::F16 => OwnedWeights::F16 { n, k, data: vec![f16::ZERO; nk], bias: None },
        WeightKind::Bf16 => OwnedWeights::Bf16 { n, k, data: vec![bf16::ZERO; nk], bias: None },
        WeightKind::Int8PerChannel => {
            OwnedWeights::Int8 { n, k, order: Order::NxK, data: vec![0; nk], scales: vec![1.0; n], bias: None }
        }
        WeightKind::Int4PerChannel => OwnedWeights::Int4 {
            n,
            k,
            order: Order::NxK,
            encoding: Int4Encoding::Signed,
            data: vec![0; crate::error::mul(n, k.div_ceil(2), "weights")?],
            scales: vec![1.0; n],
            bias: None,
        },
        WeightKind::Int4Block => OwnedWeights::Int4Blocks {
            n,
            k,
            bl,
            order: Order::NxK,
            encoding: Int4Encoding::Signed,
            data: vec![0; crate::error::mul(n, k.div_ceil(2), "weights")?],
            scales: OwnedScales::F16(vec![f16::ONE; blocks()?]),
            bias: None,
        },
        WeightKind::Int4AsymBlock => OwnedWeights::Int4Asym {
            n,
            k,
            bl,
            encoding: Int4Encoding::Offset8,
            nibbles: NibbleOrder::LowFirst,
            data: vec![0; nk / 2],
            scales: vec![1.0; blocks()?],
            offsets: vec![0.0; blocks()?],
            bias: None,
        },
    })
}

/// The bytes `b`'s packer writes for `layout` (of weights of `kind`), which
/// a stored payload of `payload` bytes must match exactly: a kernel trusts
/// the packed size its layout implies. Every packed RHS format is a run of
/// `r`-row blocks of one size, so packing one block of zero rows gives it.
fn packed_len(b: &dyn Backend, kind: WeightKind, layout: &PackedLayout, payload: u64, slot: usize) -> Result<usize> {
    let (r, k) = (layout.r.max(1), layout.k);
    let blocks = layout.rows.div_ceil(r);
    // Every packed format holds at least 4 bits per (padded) weight: a
    // shorter payload is wrong, and the bound keeps the probe below within
    // a small multiple of the payload.
    if (payload as u128) < (blocks as u128) * (r as u128) * (k as u128) / 2 {
        let why = format!("payload of {payload} bytes is too short for {layout}");
        return Err(Error::packed_file(FileError::Layout { slot, why }));
    }
    let probe = zero_weights(kind, r, k, layout.bl)?;
    let block = b.pack(&probe.as_ref())?;
    crate::error::mul(block.as_bytes().len(), blocks, "packed size")
}

/// The bytes of weights kept as given: n x k values of two bytes, and an
/// f32 bias per channel when `bias`.
fn per_call_len(layout: &PackedLayout, bias: bool) -> Result<usize> {
    let values = crate::error::mul(crate::error::mul(layout.rows, layout.k, "weights")?, 2, "weights")?;
    values.checked_add(if bias { layout.rows * 4 } else { 0 }).ok_or_else(|| Error::Overflow("packed size".into()))
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Row `row` of unpacked weights as f32.
fn dequantized_row(w: &WeightsRef<'_>, row: usize) -> Result<Vec<f32>> {
    let (_, k) = w.shape();
    Ok(match w {
        WeightsRef::Int4PerChannel(w) => (0..k).map(|c| w.value_unchecked(row, c) as f32 * w.scales[row]).collect(),
        WeightsRef::Int8PerChannel(w) => {
            let all = w.dequantize()?;
            all[row * k..(row + 1) * k].to_vec()
        }
        WeightsRef::Int4Block(w) => {
            let all = w.dequantize()?;
            all[row * k..(row + 1) * k].to_vec()
        }
        WeightsRef::Int4AsymBlock(w) => {
            let all = w.dequantize()?;
            all[row * k..(row + 1) * k].to_vec()
        }
        other => {
            let (all, _) = other.to_f32()?;
            all[row * k..(row + 1) * k].to_vec()
        }
    })
}

impl PackedWeights {
    /// Packs `w` for the first [`policy`] pairing this CPU runs (the GEMM
    /// and the GEMV kernel that share one packed layout), with what `opts`
    /// asks to keep besides. Errors when the weights are invalid or no
    /// operation takes them with `opts.activation` (the same on every CPU:
    /// a kernel that cannot take these particular weights, a bias or a
    /// block length, say, is passed over for the next pairing, or the
    /// portable reference).
    pub fn pack(w: &WeightsRef<'_>, opts: &PackOptions) -> Result<PackedWeights> {
        w.validate()?;
        if !operation_exists(w.kind(), opts.activation) {
            return Err(Error::NoOperation { weights: w.kind_name(), activation: opts.activation.name() });
        }
        if let WeightsRef::Int4AsymBlock(a) = w {
            // The asymmetric int4 kernels and their reference read whole
            // 32-value blocks.
            crate::error::multiple_of(a.bl, 32, "bl", "asymmetric int4 kernels take blocks of a multiple of 32")?;
        }
        Self::pack_with(w, policy::pairings(w.kind(), opts.activation), opts)
    }

    /// [`pack`](Self::pack) with kernels of your choosing: the first of
    /// `pairings` whose GEMM kernel runs here and takes these weights (and,
    /// with [`PackOptions::non_sme_layout`], when that one is an SME kernel,
    /// also the first that is not). Each pairing's GEMV kernel must read
    /// its GEMM kernel's layout. ggml's tables go through here
    /// ([`crate::ggml::kernel_table`]).
    ///
    /// Errors: invalid weights, a kernel name this build does not have for
    /// this weight kind and activation type ([`Error::UnknownKernel`]), a
    /// GEMV kernel that reads another layout. No pairing that runs here is
    /// not an error: the reference copy then serves (on a target without
    /// kernels, always).
    ///
    /// ```
    /// use kleidiai::formats::{FloatWeights, Order};
    /// use kleidiai::weights::{policy, DType, PackOptions, PackedWeights, WeightKind, WeightsRef};
    /// let w = vec![0.5f32; 16 * 32];
    /// let w = WeightsRef::F32(FloatWeights { n: 16, k: 32, order: Order::NxK, data: &w, bias: None });
    /// // Only the NEON pairing of the default table:
    /// let neon = policy::pairings(WeightKind::F32, DType::F32).last().copied().unwrap();
    /// let p = PackedWeights::pack_with(&w, &[neon], &PackOptions::default()).unwrap();
    /// assert!(p.layouts().len() <= 1);
    /// ```
    pub fn pack_with(w: &WeightsRef<'_>, pairings: &[Pairing], opts: &PackOptions) -> Result<PackedWeights> {
        w.validate()?;
        let non_finite = non_finite::channels(w);
        // ggml Q8_0 is repacked as int8 per channel (ggml's own requantisation).
        let requantized;
        let view;
        let w = match w {
            WeightsRef::GgmlQ8_0 { n, k, blocks } => {
                requantized = requantize_q8_0(*n, *k, blocks)?;
                view = requantized.as_ref();
                &view
            }
            other => other,
        };
        let (n, k) = w.shape();
        let (bl, kind, act) = (w.bl(), w.kind(), opts.activation);
        let f = opts.features.unwrap_or_else(Features::current);
        // A kernel of this weight kind and activation type that runs here,
        // wrapped to pack per call when its packer converts the weights.
        let resolve = |name: &str| -> Result<Option<Box<dyn Backend>>> {
            if registry::kernels().is_empty() {
                return Ok(None); // no kernels on this target: the reference serves
            }
            let b = backend_for(kind, act, name).ok_or_else(|| Error::UnknownKernel(name.to_string()))?;
            if b.info().supported(&f).is_err() {
                return Ok(None);
            }
            Ok(Some(match policy::converted(kind, b.info().family) {
                Some(elem) if opts.keep_as_given => Box::new(PerCall::new(b, elem, w.has_bias())),
                _ => b,
            }))
        };
        let mut slots: Vec<Slot> = Vec::new();
        for sme in [true, false] {
            // The second pass only for a non-SME copy beside an SME one.
            let second = opts.non_sme_layout && slots.first().is_some_and(|s| s.gemm.info().is_sme());
            if !sme && !second {
                break;
            }
            for p in pairings {
                let Some(gemm) = resolve(p.gemm)? else { continue };
                if (!sme && gemm.info().is_sme()) || (w.has_bias() && !gemm.takes_bias()) {
                    continue;
                }
                // A kernel that cannot take these weights (a packer without
                // a K x N variant, scales out of its range...): the next
                // pairing serves instead.
                let Ok(layout) = gemm.rhs_layout(n, k, bl) else { continue };
                let Ok(rhs) = gemm.pack(w) else { continue };
                let gemv = match p.gemv {
                    Some(name) => match resolve(name)? {
                        Some(v) if sme || !v.info().is_sme() => {
                            if v.rhs_layout(n, k, bl)? != layout {
                                let why = format!("does not read {}'s packed layout", p.gemm);
                                return Err(Error::WrongFamily { kernel: name, why });
                            }
                            Some(v)
                        }
                        _ => None,
                    },
                    None => None,
                };
                slots.push(Slot { gemm, gemv, rhs: rhs.into_shared() });
                // The faster GEMV's own layout, when asked for.
                if let (true, true, Some(name)) = (opts.separate_gemv, sme, p.faster_gemv) {
                    if let Some(v) = resolve(name)? {
                        if let (Ok(_), Ok(rhs)) = (v.rhs_layout(n, k, bl), v.pack(w)) {
                            slots.push(Slot { gemm: v, gemv: None, rhs: rhs.into_shared() });
                        }
                    }
                }
                break;
            }
        }
        let per_call = slots.iter().any(|s| PerCall::is_format(s.rhs.layout().format));
        let reference =
            if slots.is_empty() || (opts.keep_reference && !per_call) { Some(w.to_owned_weights()?) } else { None };
        let policy = NonFinite::Propagate;
        Ok(PackedWeights {
            id: next_weights_id(),
            n,
            k,
            kind,
            activation: act,
            slots,
            reference,
            non_finite_channels: non_finite,
            policy,
        })
    }

    /// Whether the portable reference can run: a copy of the unpacked
    /// weights was kept, or a layout holds the weights as given.
    pub(crate) fn has_reference(&self) -> bool {
        self.reference.is_some() || self.per_call_slot().is_some()
    }

    /// The slot that keeps the weights as given (packed per call), if any.
    fn per_call_slot(&self) -> Option<(PerCall, &PackedRhs)> {
        self.slots.iter().find_map(|s| PerCall::for_format(s.gemm.boxed(), s.rhs.layout().format).map(|p| (p, &s.rhs)))
    }

    /// The portable reference over the kept weights: the unpacked copy, or
    /// the weights kept as given by a per-call layout (None: neither).
    fn run_reference(
        &self,
        m: usize,
        x: Activation<'_>,
        y: ActivationMut<'_>,
        clamp: Clamp,
        work: &mut Work,
    ) -> Option<Result<()>> {
        if let Some(r) = &self.reference {
            return Some(reference(r.as_ref(), m, x, y, clamp));
        }
        let (p, rhs) = self.per_call_slot()?;
        Some(match (x, y) {
            (Activation::F32(x), ActivationMut::F32(y)) => p.reference(m, x, rhs, y, clamp, &mut work.per_call),
            (Activation::F32(_), y) => Err(Error::ElementType {
                what: "outputs of weights kept as given",
                expected: "F32",
                got: y.dtype().name(),
            }),
            (x, _) => Err(Error::ElementType {
                what: "activations of weights kept as given",
                expected: "F32",
                got: x.dtype().name(),
            }),
        })
    }

    /// `matmul` on the portable reference over the kept weights, whatever
    /// kernels could run; an error when none were kept.
    pub(crate) fn matmul_reference(
        &self,
        m: usize,
        x: Activation<'_>,
        y: ActivationMut<'_>,
        clamp: Clamp,
        scratch: &mut Scratch,
    ) -> Result<()> {
        self.check_call(m, &x, &y)?;
        let work = scratch.work.get_or_insert_with(Work::default);
        self.run_reference(m, x, y, clamp, work).unwrap_or_else(|| {
            Err(Error::Unsupported {
                kernel: "portable reference",
                why: "these weights hold only packed layouts (no unpacked copy was kept)".into(),
            })
        })
    }

    /// Bytes of the packed layouts these weights hold (each a copy of the
    /// weights in a kernel's format; weights packed per call count as the
    /// copy they keep). [`PackOptions`] says what each layout costs.
    ///
    /// ```
    /// use kleidiai::formats::{FloatWeights, Order};
    /// use kleidiai::weights::{PackOptions, PackedWeights, WeightsRef};
    /// let data = vec![0.25f32; 64 * 128];
    /// let w = WeightsRef::F32(FloatWeights { n: 64, k: 128, order: Order::NxK, data: &data, bias: None });
    /// let p = PackedWeights::pack(&w, &PackOptions::default()).unwrap();
    /// // One copy (or, with no kernel here, the reference copy instead),
    /// // plus the kernel's bias slots.
    /// let held = p.packed_bytes() + p.reference_bytes();
    /// assert!(held as f64 <= 1.02 * w.bytes() as f64 + 64.0 * 4.0);
    /// ```
    pub fn packed_bytes(&self) -> usize {
        self.slots.iter().map(|s| s.rhs.as_bytes().len()).sum()
    }

    /// Bytes of each packed layout, in slot order.
    pub(crate) fn slot_bytes(&self) -> Vec<usize> {
        self.slots.iter().map(|s| s.rhs.as_bytes().len()).collect()
    }

    /// Bytes of the copy of the unpacked weights kept for the portable
    /// reference (0: none kept; see [`PackOptions::keep_reference`]).
    pub fn reference_bytes(&self) -> usize {
        self.reference.as_ref().map_or(0, |r| r.as_ref().bytes())
    }

    /// Output channels.
    pub fn n(&self) -> usize {
        self.n
    }
    /// Inputs per channel.
    pub fn k(&self) -> usize {
        self.k
    }
    /// The weight kind.
    pub fn kind(&self) -> WeightKind {
        self.kind
    }

    /// The packed layouts held: (GEMM kernel, GEMV kernel sharing it).
    pub fn layouts(&self) -> Vec<(&'static str, Option<&'static str>)> {
        self.slots.iter().map(|s| (s.gemm.info().name, s.gemv.as_ref().map(|g| g.info().name))).collect()
    }

    /// The slot and kernel that serve `m` rows with the current features.
    fn pick(&self, m: usize, f: &Features) -> Option<(&Slot, &dyn Backend)> {
        let (i, gemv) = self.pick_index(m, f)?;
        let s = &self.slots[i];
        Some((s, self.backend(i, gemv)?))
    }

    /// The backend of slot `i`: its GEMV kernel or its main one.
    fn backend(&self, i: usize, gemv: bool) -> Option<&dyn Backend> {
        let s = self.slots.get(i)?;
        if gemv { s.gemv.as_deref() } else { Some(&*s.gemm) }
    }

    /// [`pick`](Self::pick) as (slot index, whether its GEMV kernel).
    fn pick_index(&self, m: usize, f: &Features) -> Option<(usize, bool)> {
        let runs = |b: &dyn Backend| b.info().supported(f).is_ok();
        if m == 1 {
            // A layout of its own for a GEMV kernel (a faster one packed on
            // request) first, then a GEMV sharing a GEMM's layout.
            for (i, s) in self.slots.iter().enumerate() {
                if s.gemm.info().tile == TileKind::Gemv && runs(&*s.gemm) {
                    return Some((i, false));
                }
            }
            for (i, s) in self.slots.iter().enumerate() {
                if s.gemv.as_deref().is_some_and(runs) {
                    return Some((i, true));
                }
            }
        }
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| runs(&*s.gemm))
            .max_by_key(|(_, s)| u32::from(s.gemm.info().tile == TileKind::Gemm) * 1000 + s.gemm.info().rank)
            .map(|(i, _)| (i, false))
    }

    /// The plan for `(m, f)`: the kernel [`pick`](Self::pick) chooses and,
    /// when its family has a steady-state path, everything it checks once.
    /// Reuses `old`'s packed-LHS allocation.
    fn plan(&self, m: usize, f: &Features, old: Option<Plan>) -> Plan {
        let mut lhs = old.and_then(|p| p.ready).map(|r| r.lhs).unwrap_or_default();
        let ready = (|| {
            let (slot, gemv) = self.pick_index(m, f)?;
            let b = self.backend(slot, gemv)?;
            let prepared = b.fast()?.prepare(m, &self.slots[slot].rhs).ok()??;
            let info = b.info();
            // pick_index checked that the CPU runs the kernel.
            let vector_bytes = crate::families::engine::live_vector_bytes(info);
            lhs.reset_zeroed(prepared.lhs_bytes);
            Some(Ready { slot, gemv, vector_bytes, sme: info.is_sme(), prepared, lhs })
        })();
        Plan { weights: self.id, m, features: *f, ready }
    }

    /// What every matmul form checks first: rows, and activations of the
    /// type the weights were packed for.
    fn check_call(&self, m: usize, x: &Activation<'_>, y: &ActivationMut<'_>) -> Result<()> {
        crate::error::nonzero(m, "m")?;
        if x.dtype() != self.activation || y.dtype() != self.activation {
            let (what, got) =
                if x.dtype() != self.activation { ("activations", x.dtype()) } else { ("outputs", y.dtype()) };
            return Err(Error::ElementType { what, expected: self.activation.name(), got: got.name() });
        }
        Ok(())
    }

    /// The steady-state call: `None` when it does not apply (no plan with a
    /// fast path for these weights, `m` and features; more than one worker;
    /// another vector length; inputs too short, which the checked path
    /// reports; activations not known to be finite for a packer that needs
    /// them), then the caller takes the checked path.
    #[allow(clippy::too_many_arguments)] // matmul's own arguments, the features it read, the scan's verdict
    fn matmul_planned(
        &self,
        m: usize,
        x: Activation<'_>,
        y: ActivationMut<'_>,
        clamp: Clamp,
        par: Parallelism,
        f: &Features,
        scratch: &mut Scratch,
        finite: bool,
    ) -> Option<Result<()>> {
        // Inputs too short (or sizes that overflow) go to the checked path,
        // which names the problem, before a plan sizes anything by `m`.
        if m.checked_mul(self.k).is_none_or(|v| x.len() < v) || m.checked_mul(self.n).is_none_or(|v| y.len() < v) {
            return None;
        }
        let same = matches!(&scratch.plan, Some(p) if p.weights == self.id && p.m == m && p.features == *f);
        if !same {
            scratch.plan = Some(self.plan(m, f, scratch.plan.take()));
        }
        let r = scratch.plan.as_mut()?.ready.as_mut()?;
        let p = r.prepared;
        let b = self.backend(r.slot, r.gemv)?;
        // Activations nobody scanned go where the packer's needs are checked.
        if !finite && b.needs_finite_lhs() {
            return None;
        }
        let work = p.m.saturating_mul(p.n).saturating_mul(p.k);
        if crate::par::workers(par, work, r.sme) != 1
            || x.len() < p.m * p.k
            || y.len() < p.m * p.n
            || crate::families::engine::live_vector_bytes(b.info()) != r.vector_bytes
        {
            return None;
        }
        if let Err(e) = clamp.check() {
            return Some(Err(e));
        }
        // SAFETY: `p` is what this backend's `prepare` returned for this
        // slot's packed RHS (the plan is keyed by these weights' unique id,
        // m and the features it was chosen with, and weights never change);
        // the features are unchanged, so the CPU runs the kernel, at the
        // vector length it saw (compared above); x and y have the weights'
        // activation type (matmul checked) and hold m x k and m x n values
        // (products that `prepare` checked do not overflow); `r.lhs` has
        // the `p.lhs_bytes` it asked for, 64-byte aligned; clamp checked.
        unsafe { b.fast()?.run_prepared(&p, x, r.lhs.as_mut_ptr(), &self.slots[r.slot].rhs, y, clamp) };
        Some(Ok(()))
    }

    /// ggml's hybrid mode: the first slot's SME kernel on the first columns
    /// and the second slot's non-SME kernel on the rest, both at once, with
    /// `sme_threads` workers for SME and `threads - sme_threads` for the
    /// other. The split is a multiple of both layouts' row blocks (so of both
    /// kernels' column steps) and proportional to the workers: fixed by
    /// `(n, threads, sme_threads)`, so runs repeat bit for bit. Ok(false)
    /// when it does not apply (one slot, no SME slot, too few threads, f16
    /// or bf16 activations, or a layout that cannot be cut).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn matmul_hybrid(
        &self,
        m: usize,
        x: &[f32],
        y: &mut [f32],
        clamp: Clamp,
        threads: usize,
        sme_threads: usize,
        scratch: &mut [Scratch; 2],
    ) -> Result<bool> {
        if self.activation != DType::F32 || self.slots.len() < 2 || threads <= sme_threads || sme_threads == 0 {
            return Ok(false);
        }
        let f = Features::current();
        fn kernel<'s>(s: &'s Slot, m: usize, f: &Features) -> Option<&'s dyn Backend> {
            let k = if m == 1 { s.gemv.as_deref().unwrap_or(&*s.gemm) } else { &*s.gemm };
            k.info().supported(f).is_ok().then_some(k)
        }
        let (s0, s1) = (&self.slots[0], &self.slots[1]);
        let (Some(k0), Some(k1)) = (kernel(s0, m, &f), kernel(s1, m, &f)) else { return Ok(false) };
        if !k0.info().is_sme() || k1.info().is_sme() {
            return Ok(false);
        }
        let (n, k) = (self.n, self.k);
        crate::error::at_least(x.len(), crate::error::mul(m, k, "x")?, "x")?;
        crate::error::at_least(y.len(), crate::error::mul(m, n, "y")?, "y")?;
        let (r0, r1) = (s0.rhs.layout().r.max(1), s1.rhs.layout().r.max(1));
        let step = r0 / gcd(r0, r1) * r1;
        let n_sme = (n * sme_threads / threads) / step * step;
        if n_sme == 0 || n_sme >= n {
            return Ok(false);
        }
        let (Some(v0), Some(v1)) = (s0.rhs.row_view(0..n_sme), s1.rhs.row_view(n_sme..n)) else { return Ok(false) };
        let (mut y0, mut y1) = (vec![0f32; m * n_sme], vec![0f32; m * (n - n_sme)]);
        let [sc0, sc1] = scratch;
        let l0 = sc0.work.get_or_insert_with(Work::default);
        let l1 = sc1.work.get_or_insert_with(Work::default);
        let x = &x[..m * k];
        let (a, b) = rayon::join(
            || {
                k0.run(
                    m,
                    Activation::F32(x),
                    &v0,
                    ActivationMut::F32(&mut y0),
                    clamp,
                    Parallelism::Rayon(sme_threads),
                    l0,
                )
            },
            || {
                let p = Parallelism::Rayon(threads - sme_threads);
                k1.run(m, Activation::F32(x), &v1, ActivationMut::F32(&mut y1), clamp, p, l1)
            },
        );
        a?;
        b?;
        for i in 0..m {
            y[i * n..i * n + n_sme].copy_from_slice(&y0[i * n_sme..(i + 1) * n_sme]);
            y[i * n + n_sme..(i + 1) * n].copy_from_slice(&y1[i * (n - n_sme)..(i + 1) * (n - n_sme)]);
        }
        Ok(true)
    }

    /// `matmul` with the kernel of slot `slot` (for tests of the slots).
    #[cfg(test)]
    pub(crate) fn matmul_slot(
        &self,
        slot: usize,
        m: usize,
        x: &[f32],
        y: &mut [f32],
        scratch: &mut Scratch,
    ) -> Result<()> {
        let s = &self.slots[slot];
        let k = if m == 1 { s.gemv.as_deref().unwrap_or(&*s.gemm) } else { &*s.gemm };
        let work = scratch.work.get_or_insert_with(Work::default);
        k.run(m, Activation::F32(x), &s.rhs, ActivationMut::F32(y), Clamp::NONE, Parallelism::Sequential, work)
    }

    /// The kernel that would serve `m` rows now (None: the reference).
    pub fn kernel_for(&self, m: usize) -> Option<&'static str> {
        self.pick(m, &Features::current()).map(|(_, b)| b.info().name)
    }

    /// `y (m x n) = clamp(x (m x k) · wᵀ + bias)`.
    ///
    /// # Non-finite inputs
    ///
    /// The same on every kernel and the portable reference: `y[i][j]` is
    /// NaN when row `i` of `x` holds a NaN or an infinity, or when output
    /// channel `j`'s weights do (values, scales, block offsets or bias, as
    /// given to [`pack`](Self::pack)); the other elements are what finite
    /// inputs give. NaN, not ±inf, even where plain float math would give an
    /// infinity, and whatever `clamp` says. Costs a scan of `x` per call
    /// (`m x k` values, about 0.3 aarch64 instructions each, against the
    /// kernel's `m x n x k` products: a share that falls with `n` and is
    /// largest on the fastest kernels, SME2; the README has the measured
    /// table); the weights are scanned once, by `pack`, and the channels
    /// kept (also in saved files). [`set_non_finite`](Self::set_non_finite)
    /// chooses an error instead, or the kernel's own behaviour without the
    /// scan ([`NonFinite`]).
    ///
    /// Finite inputs whose result overflows f32 give what the clamp makes
    /// of it: with [`Clamp::NONE`], whose range is `[f32::MIN, f32::MAX]`,
    /// ±`f32::MAX` (not ±inf) on the kernels, which clamp in f32.
    ///
    /// ```
    /// use kleidiai::prelude::*;
    /// let (n, k) = (4, 32);
    /// let data = vec![0x11u8; n * k / 2];
    /// let w = Weights::int4_per_channel(n, k, &data, &[0.25, 0.25, f32::NAN, 0.25])?;
    /// let packed = PackedWeights::pack(&w, &PackOptions::default())?;
    /// let mut x = vec![0.5f32; 2 * k];
    /// x[k + 3] = f32::INFINITY; // row 1
    /// let mut y = vec![0f32; 2 * n];
    /// packed.matmul(2, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE,
    ///               Parallelism::Sequential, &mut Scratch::default())?;
    /// assert!(y[0].is_finite() && y[2].is_nan()); // row 0: channel 2 only
    /// assert!(y[n..].iter().all(|v| v.is_nan())); // row 1: all
    /// # Ok::<(), kleidiai::Error>(())
    /// ```
    pub fn matmul(
        &self,
        m: usize,
        x: Activation<'_>,
        mut y: ActivationMut<'_>,
        clamp: Clamp,
        par: Parallelism,
        scratch: &mut Scratch,
    ) -> Result<()> {
        match self.policy {
            NonFinite::Kernel => return self.matmul_kernels(m, x, y, clamp, par, scratch, false),
            NonFinite::Error => {
                if let Some(&j) = self.non_finite_channels.first() {
                    return Err(Error::NonFinite { what: "output channel", index: j, at: None });
                }
                if let Some(&i) = non_finite::bad_rows(m, self.k, &x).as_deref().and_then(|r| r.first()) {
                    let at = non_finite::first_in_row(&x, i, self.k);
                    return Err(Error::NonFinite { what: "activation row", index: i, at });
                }
                return self.matmul_kernels(m, x, y, clamp, par, scratch, true);
            }
            NonFinite::Propagate => {}
        }
        let Some(rows) = non_finite::bad_rows(m, self.k, &x) else {
            self.matmul_kernels(m, x, y.reborrow(), clamp, par, scratch, true)?;
            if !self.non_finite_channels.is_empty() {
                non_finite::fill(m, self.n, &mut y, &[], &self.non_finite_channels);
            }
            return Ok(());
        };
        // Rare: the kernels see those rows zeroed (they disagree on
        // non-finite values, and some packers refuse them).
        let zeroed = non_finite::Zeroed::new(&x, m, self.k, &rows);
        self.matmul_kernels(m, zeroed.as_activation(), y.reborrow(), clamp, par, scratch, true)?;
        non_finite::fill(m, self.n, &mut y, &rows, &self.non_finite_channels);
        Ok(())
    }

    /// Sets what [`matmul`](Self::matmul) does with a NaN or an infinity
    /// among its inputs ([`NonFinite`]; default [`NonFinite::Propagate`]).
    pub fn set_non_finite(&mut self, policy: NonFinite) {
        self.policy = policy;
    }

    /// What [`matmul`](Self::matmul) does with a NaN or an infinity among
    /// its inputs.
    pub fn non_finite(&self) -> NonFinite {
        self.policy
    }

    /// The output channels whose weights (values, scales, offsets or bias,
    /// as packed) hold a NaN or an infinity, ascending (usually none).
    pub fn non_finite_channels(&self) -> &[usize] {
        &self.non_finite_channels
    }

    /// [`matmul`](Self::matmul) without its non-finite policy: what the
    /// kernel gives (ggml's path, which does not scan either).
    /// `finite`: the caller scanned `x` and it holds only finite values
    /// (the asymmetric int4 packers need them; unscanned activations take
    /// their checked path, which checks).
    #[allow(clippy::too_many_arguments)] // matmul's operands plus the scan's verdict
    pub(crate) fn matmul_kernels(
        &self,
        m: usize,
        x: Activation<'_>,
        mut y: ActivationMut<'_>,
        clamp: Clamp,
        par: Parallelism,
        scratch: &mut Scratch,
        finite: bool,
    ) -> Result<()> {
        self.check_call(m, &x, &y)?;
        let mut f = Features::current();
        if let Some(r) = self.matmul_planned(m, x, y.reborrow(), clamp, par, &f, scratch, finite) {
            return r;
        }
        while let Some((slot, b)) = self.pick(m, &f) {
            let work = scratch.work.get_or_insert_with(Work::default);
            match b.run(m, x, &slot.rhs, y.reborrow(), clamp, par, work) {
                // A tier switched off (cpu::disable) between the choice and
                // the kernel's own check, which refuses before any FFI call
                // and before writing `y`: choose again with what is left
                // (tiers only ever go away, so this ends).
                Err(Error::Unsupported { .. }) if Features::current() != f => f = Features::current(),
                r => return r,
            }
        }
        let work = scratch.work.get_or_insert_with(Work::default);
        match self.run_reference(m, x, y, clamp, work) {
            Some(r) => r,
            None => Err(Error::Unsupported {
                kernel: self.slots.first().map_or("(none)", |s| s.gemm.info().name),
                why: "no packed layout runs with the current CPU features and no reference copy was kept \
                      (PackOptions::keep_reference, or PackOptions::non_sme_layout for a layout without SME)"
                    .into(),
            }),
        }
    }

    /// Weight row `row` as f32 (`get_rows`), from the first packed layout
    /// (or the reference copy).
    pub fn row(&self, row: usize, out: &mut [f32]) -> Result<()> {
        if row >= self.n {
            return Err(Error::out_of_range("row", row, self.n));
        }
        crate::error::at_least(out.len(), self.k, "row output")?;
        if let Some(s) = self.slots.first() {
            return s.gemm.unpack_row(&s.rhs, row, out);
        }
        match self.reference.as_ref() {
            Some(r) => {
                // The reference copy's rows, dequantised: run the reference
                // on a one-hot LHS row would cost n*k; dequantise instead.
                let row_vals = dequantized_row(&r.as_ref(), row)?;
                out[..self.k].copy_from_slice(&row_vals);
                Ok(())
            }
            None => Err(Error::InvalidArgument("no packed layout and no reference copy".into())),
        }
    }

    /// The non-finite output channels as the file stores them.
    fn non_finite_u64(&self) -> Vec<u64> {
        self.non_finite_channels.iter().map(|&j| j as u64).collect()
    }

    /// Serialises the packed layouts as a packed-weight file ([`file`](mod@file)),
    /// with the output channels whose weights are not finite (version 2 of
    /// the format when there is one).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = self.file_header()?.to_bytes_with(&self.non_finite_u64())?;
        for s in &self.slots {
            out.resize(out.len().div_ceil(64) * 64, 0);
            out.extend_from_slice(s.rhs.as_bytes());
        }
        Ok(out)
    }

    /// The header [`to_bytes`](Self::to_bytes) writes (payload `i` at
    /// `slots[i].offset`, 64-byte aligned, after it).
    pub(crate) fn file_header(&self) -> Result<file::FileHeader> {
        if self.slots.is_empty() {
            return Err(Error::Unsupported {
                kernel: "packed weights",
                why: "nothing was packed (no kernel for these weights runs here), so there is nothing to save".into(),
            });
        }
        let mut header = file::FileHeader {
            kleidiai_version: crate::sys::KLEIDIAI_VERSION.into(),
            weight_kind: self.kind.id(),
            output: self.activation.id(),
            n: self.n as u64,
            k: self.k as u64,
            slots: Vec::new(),
        };
        let mut offset = file::FileHeader::header_len_with(self.slots.len(), self.non_finite_channels.len());
        for s in &self.slots {
            let l = s.rhs.layout();
            let u32_of = |v: usize, what: &str| {
                u32::try_from(v).map_err(|_| Error::Overflow(format!("{what} {v} does not fit the file header")))
            };
            header.slots.push(file::SlotHeader {
                gemm_kernel: s.gemm.info().name.into(),
                gemv_kernel: s.gemv.as_ref().map_or(String::new(), |g| g.info().name.into()),
                format: l.format.into(),
                r: u32_of(l.r, "nr")?,
                kr: u32_of(l.kr, "kr")?,
                sr: u32_of(l.sr, "sr")?,
                bl: u32_of(l.bl, "bl")?,
                vector_bytes: u32_of(l.vector_bytes, "vector length")?,
                offset: offset as u64,
                len: s.rhs.as_bytes().len() as u64,
                crc32: crc32fast::hash(s.rhs.as_bytes()),
            });
            offset = (offset + s.rhs.as_bytes().len()).div_ceil(64) * 64;
        }
        Ok(header)
    }

    /// Loads a packed-weight file, copying the payloads. `bytes` is the
    /// whole file and nothing more: bytes after the last payload are
    /// [`FileError::TrailingBytes`] (as in every loader).
    pub fn from_bytes(bytes: &[u8]) -> Result<PackedWeights> {
        Self::load(Arc::new(bytes.to_vec()), false, true)
    }

    /// Loads a packed-weight file without copying: the payloads stay in
    /// `bytes` (e.g. a memory-mapped file), which must keep the payloads
    /// 64-byte aligned (a mapping's start is page aligned).
    pub fn from_shared(bytes: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Result<PackedWeights> {
        Self::load(bytes, true, true)
    }

    /// [`from_shared`](Self::from_shared) without the payload checksums
    /// (header, layouts and bounds are still checked): for weights verified
    /// once and viewed again on every call.
    pub fn from_shared_unverified(bytes: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Result<PackedWeights> {
        Self::load(bytes, true, false)
    }

    fn load(bytes: Arc<dyn AsRef<[u8]> + Send + Sync>, zero_copy: bool, verify: bool) -> Result<PackedWeights> {
        let data = (*bytes).as_ref();
        let (h, non_finite) = file::FileHeader::parse_with(data, verify)?;
        if h.kleidiai_version != crate::sys::KLEIDIAI_VERSION {
            return Err(Error::packed_file(FileError::KleidiaiVersion {
                file: h.kleidiai_version,
                build: crate::sys::KLEIDIAI_VERSION,
            }));
        }
        let kind = WeightKind::from_id(h.weight_kind).ok_or_else(|| {
            Error::packed_file(FileError::Header(format!("unknown weight kind id {}", h.weight_kind)))
        })?;
        let activation = DType::from_id(h.output)
            .ok_or_else(|| Error::packed_file(FileError::Header(format!("unknown activation type id {}", h.output))))?;
        let (n, k) = (usize::try_from(h.n), usize::try_from(h.k));
        let (Ok(n), Ok(k)) = (n, k) else { return Err(Error::Overflow("shape does not fit usize".into())) };
        let f = Features::current();
        let mut slots = Vec::new();
        let mut why = Vec::new();
        // PackedWeights::to_bytes writes one slot per GEMM kernel.
        for (i, s) in h.slots.iter().enumerate() {
            if h.slots[..i].iter().any(|t| t.gemm_kernel == s.gemm_kernel) {
                return Err(Error::packed_file(FileError::Header(format!("two slots for {}", s.gemm_kernel))));
            }
        }
        for (i, s) in h.slots.iter().enumerate() {
            let gemm = backend_for(kind, activation, &s.gemm_kernel);
            // Weights kept as given (packed per call) name the kernel that
            // packs them and their own format.
            let gemm = match gemm {
                Some(g) if PerCall::is_format(&s.format) => match PerCall::for_format(g, &s.format) {
                    Some(p) if policy::converted(kind, p.info().family).is_some() => {
                        Some(Box::new(p) as Box<dyn Backend>)
                    }
                    _ => {
                        let why = format!(
                            "keeps {kind:?} weights as given for {}, which does not pack them per call",
                            s.gemm_kernel
                        );
                        return Err(Error::packed_file(FileError::Layout { slot: i, why }));
                    }
                },
                other => other,
            };
            let Some(gemm) = gemm else {
                why.push(format!(
                    "slot {i}: kernel {} is not in this build or does not take {kind:?} weights with {activation:?} \
                     activations",
                    s.gemm_kernel
                ));
                continue;
            };
            if let Err(e) = gemm.info().supported(&f) {
                why.push(format!("slot {i}: {} {e}", s.gemm_kernel));
                continue;
            }
            let want = gemm.rhs_layout(n, k, s.bl as usize)?;
            let stored =
                (s.format.as_str(), s.r as usize, s.kr as usize, s.sr as usize, s.bl as usize, s.vector_bytes as usize);
            if stored != (want.format, want.r, want.kr, want.sr, want.bl, want.vector_bytes) {
                why.push(format!(
                    "slot {i}: packed as {} nr={} kr={} sr={} bl={} vl={}b, {} here needs {want}",
                    s.format,
                    s.r,
                    s.kr,
                    s.sr,
                    s.bl,
                    s.vector_bytes * 8,
                    s.gemm_kernel
                ));
                continue;
            }
            // A layout this CPU runs with a payload of another size is a
            // corrupt (or crafted) file, not one packed elsewhere: refuse it.
            let len = if PerCall::is_format(want.format) {
                per_call_len(&want, s.format.contains("bias"))?
            } else {
                packed_len(&*gemm, kind, &want, s.len, i)?
            };
            if len as u64 != s.len {
                let why = format!("holds {} bytes, {want} packs to {len}", s.len);
                return Err(Error::packed_file(FileError::Layout { slot: i, why }));
            }
            let range = s.offset as usize..(s.offset + s.len) as usize;
            let rhs = if zero_copy {
                PackedRhs::shared(want, bytes.clone(), range, s.len as usize)?
            } else {
                let mut buf = crate::buffer::AlignedBuf::zeroed(s.len as usize);
                buf.as_mut_slice().copy_from_slice(&data[range]);
                PackedRhs::new(want, buf)
            };
            let gemv = if s.gemv_kernel.is_empty() {
                None
            } else {
                let g = backend_for(kind, activation, &s.gemv_kernel).map(|g| {
                    match PerCall::for_format(g.boxed(), &s.format) {
                        Some(p) => Box::new(p) as Box<dyn Backend>,
                        None => g,
                    }
                });
                let g = g.ok_or_else(|| {
                    let why =
                        format!("GEMV kernel {} is not in this build or does not take these weights", s.gemv_kernel);
                    Error::packed_file(FileError::Layout { slot: i, why })
                })?;
                if g.rhs_layout(n, k, s.bl as usize)? != want {
                    let why = format!("GEMV kernel {} needs another layout", s.gemv_kernel);
                    return Err(Error::packed_file(FileError::Layout { slot: i, why }));
                }
                Some(g)
            };
            slots.push(Slot { gemm, gemv, rhs });
        }
        if slots.is_empty() {
            return Err(Error::Unsupported {
                kernel: "packed-weight file",
                why: format!("no layout in the file runs here: {}", why.join("; ")),
            });
        }
        // The parser checked them ascending and below n.
        let non_finite_channels = non_finite.into_iter().map(|j| j as usize).collect();
        let policy = NonFinite::Propagate;
        Ok(PackedWeights {
            id: next_weights_id(),
            n,
            k,
            kind,
            activation,
            slots,
            reference: None,
            non_finite_channels,
            policy,
        })
    }
}

#[cfg(test)]
mod tests;
