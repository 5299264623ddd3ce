//! Weights as given (before packing): the borrowed forms [`WeightsRef`]
//! takes, the private copy the reference path keeps, and the family
//! references that compute with them.

use super::*;

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
    pub(super) fn validate(&self) -> Result<()> {
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
    pub(super) fn to_owned_weights(self) -> Result<OwnedWeights> {
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
pub(super) fn requantize_q8_0(n: usize, k: usize, blocks: &[BlockQ8_0]) -> Result<OwnedWeights> {
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
pub(super) enum OwnedScales {
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
}

/// A private copy of unpacked weights, for the reference path.
#[derive(Clone, Debug)]
pub(super) enum OwnedWeights {
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
    pub(super) fn as_ref(&self) -> WeightsRef<'_> {
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
pub(super) fn reference(
    w: WeightsRef<'_>,
    m: usize,
    x: Activation<'_>,
    y: ActivationMut<'_>,
    clamp: Clamp,
) -> Result<()> {
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
pub(super) fn operation_exists(kind: WeightKind, act: DType) -> bool {
    use WeightKind as K;
    matches!(
        (kind, act),
        (K::F32 | K::F16 | K::Bf16 | K::Int8PerChannel, DType::F32)
            | (K::F16, DType::F16)
            | (K::Int4PerChannel | K::Int4Block, DType::F32 | DType::Bf16)
            | (K::Int4AsymBlock, DType::F32 | DType::F16)
    )
}
