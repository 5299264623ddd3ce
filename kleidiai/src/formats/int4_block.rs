//! Int4 weights quantised in blocks along K (`qsi4c32`): one scale per block
//! of `bl` consecutive K values of an output channel,
//! `w[n][k] = value(n, k) * scale[n][k / bl]`.
//!
//! Two inputs are accepted, both viewed through [`BlockInt4`]:
//! - [`Int4Blocks`]: nibbles stored like [`Int4PerChannel`](super::Int4PerChannel)
//!   (two per byte, first in the low nibble, N x K or K x N) plus a separate
//!   `n x (k / bl)` array of f16 or bf16 scales;
//! - [`Q4_0`]: ggml's `block_q4_0` bytes as they are (18-byte blocks of 32
//!   values: an f16 scale, then 16 bytes where byte `j` holds value `j` in its
//!   low nibble and value `j + 16` in its high nibble, each stored plus 8).
//!
//! The kernels store the scales in one floating-point type, fixed by their
//! packer ([`ScaleType`]). Weights whose scales have the other type are
//! converted (round to nearest even) when packed; every reference
//! implementation applies the same conversion, so it describes exactly what
//! the kernel computes.

use super::{Int4Encoding, Order};
use crate::error::{self, Error, Result};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use std::borrow::Cow;

/// Values per ggml `Q4_0` block.
pub const Q4_0_BLOCK: usize = 32;
/// Bytes per ggml `Q4_0` block (f16 scale + 16 bytes of nibbles).
pub const Q4_0_BLOCK_BYTES: usize = 18;

/// Floating-point type of block scales.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScaleType {
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
}

impl ScaleType {
    /// `x` rounded to this type (nearest, ties to even), as raw bits.
    pub fn bits_of(self, x: f32) -> u16 {
        match self {
            ScaleType::F16 => f16::from_f32(x).to_bits(),
            ScaleType::Bf16 => bf16::from_f32(x).to_bits(),
        }
    }

    /// The value of raw `bits` of this type.
    pub fn value_of(self, bits: u16) -> f32 {
        match self {
            ScaleType::F16 => f16::from_bits(bits).to_f32(),
            ScaleType::Bf16 => bf16::from_bits(bits).to_f32(),
        }
    }
}

/// Block scales, `n` rows of `k / bl`, row `i` for output channel `i`.
#[derive(Clone, Copy, Debug)]
pub enum BlockScales<'a> {
    /// Half-precision scales.
    F16(&'a [f16]),
    /// bfloat16 scales.
    Bf16(&'a [bf16]),
}

impl BlockScales<'_> {
    fn len(&self) -> usize {
        match self {
            BlockScales::F16(s) => s.len(),
            BlockScales::Bf16(s) => s.len(),
        }
    }

    fn scale_type(&self) -> ScaleType {
        match self {
            BlockScales::F16(_) => ScaleType::F16,
            BlockScales::Bf16(_) => ScaleType::Bf16,
        }
    }

    fn bits(&self, i: usize) -> u16 {
        match self {
            BlockScales::F16(s) => s[i].to_bits(),
            BlockScales::Bf16(s) => s[i].to_bits(),
        }
    }
}

/// Block-quantised int4 weights with separate scales.
///
/// ```
/// use half::f16;
/// use kleidiai::formats::{BlockInt4, BlockScales, Int4Blocks, Int4Encoding, Order};
/// // One channel of 32 inputs, value `k % 16 - 8`: -8, -7, ..., 7, -8, ..., 7.
/// let e = Int4Encoding::Signed;
/// let data: Vec<u8> = (0..16).map(|i| e.encode(((2 * i) % 16) as i8 - 8) | e.encode(((2 * i + 1) % 16) as i8 - 8) << 4).collect();
/// let scales = [f16::from_f32(0.5)];
/// let w = Int4Blocks { n: 1, k: 32, bl: 32, order: Order::NxK, encoding: e, data: &data,
///                      scales: BlockScales::F16(&scales), bias: None };
/// let d = BlockInt4::from(w).dequantize().unwrap();
/// assert_eq!((d[0], d[1], d[31]), (-4.0, -3.5, 3.5));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Int4Blocks<'a> {
    /// Output channels.
    pub n: usize,
    /// Inputs per channel (a multiple of `bl`).
    pub k: usize,
    /// Block length along K (a positive multiple of 32).
    pub bl: usize,
    /// Storage order of `data`.
    pub order: Order,
    /// Nibble encoding.
    pub encoding: Int4Encoding,
    /// Packed nibbles: `n * ceil(k / 2)` bytes (NxK) or `k * ceil(n / 2)` (KxN).
    pub data: &'a [u8],
    /// `n * (k / bl)` scales.
    pub scales: BlockScales<'a>,
    /// Optional bias per output channel.
    pub bias: Option<&'a [f32]>,
}

/// ggml `Q4_0` weights, `n` rows of `k / 32` blocks of 18 bytes, exactly as
/// ggml stores them.
///
/// ```
/// use kleidiai::formats::{BlockInt4, Q4_0};
/// let mut block = [0x88u8; 18]; // all values 0
/// block[..2].copy_from_slice(&half::f16::from_f32(2.0).to_bits().to_le_bytes());
/// block[2] = 0x19; // value 0 = 9 - 8 = 1, value 16 = 1 - 8 = -7
/// let w = BlockInt4::from(Q4_0 { n: 1, k: 32, data: &block, bias: None });
/// let d = w.dequantize().unwrap();
/// assert_eq!((d[0], d[16], d[1]), (2.0, -14.0, 0.0));
/// ```
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug)]
pub struct Q4_0<'a> {
    /// Output channels (rows).
    pub n: usize,
    /// Inputs per channel (a multiple of 32).
    pub k: usize,
    /// `n * k / 32 * 18` bytes.
    pub data: &'a [u8],
    /// Optional bias per output channel (not part of ggml's format).
    pub bias: Option<&'a [f32]>,
}

/// Block-quantised int4 weights in either input layout.
#[derive(Clone, Copy, Debug)]
pub enum BlockInt4<'a> {
    /// Separate nibbles and scales.
    Blocks(Int4Blocks<'a>),
    /// ggml `Q4_0` bytes.
    Q4_0(Q4_0<'a>),
}

super::variant_from!(BlockInt4: Blocks(Int4Blocks), Q4_0(Q4_0));

impl<'a> BlockInt4<'a> {
    /// Output channels.
    pub fn n(&self) -> usize {
        match self {
            BlockInt4::Blocks(w) => w.n,
            BlockInt4::Q4_0(w) => w.n,
        }
    }

    /// Inputs per channel.
    pub fn k(&self) -> usize {
        match self {
            BlockInt4::Blocks(w) => w.k,
            BlockInt4::Q4_0(w) => w.k,
        }
    }

    /// Block length.
    pub fn bl(&self) -> usize {
        match self {
            BlockInt4::Blocks(w) => w.bl,
            BlockInt4::Q4_0(_) => Q4_0_BLOCK,
        }
    }

    /// Blocks per channel.
    pub fn blocks(&self) -> usize {
        self.k() / self.bl().max(1)
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&'a [f32]> {
        match self {
            BlockInt4::Blocks(w) => w.bias,
            BlockInt4::Q4_0(w) => w.bias,
        }
    }

    /// The type the scales are stored in.
    pub fn scale_type(&self) -> ScaleType {
        match self {
            BlockInt4::Blocks(w) => w.scales.scale_type(),
            BlockInt4::Q4_0(_) => ScaleType::F16,
        }
    }

    /// Checks dimensions (`k` a multiple of `bl`, `bl` a positive multiple
    /// of 32) and buffer lengths.
    pub fn validate(&self) -> Result<()> {
        let (n, k, bl) = (self.n(), self.k(), self.bl());
        error::nonzero(n, "n")?;
        error::nonzero(k, "k")?;
        error::nonzero(bl, "bl")?;
        error::multiple_of(bl, 32, "bl", "block-quantised int4 weights")?;
        error::multiple_of(k, bl, "k", "block-quantised int4 weights: whole blocks")?;
        let blocks = error::mul(n, k / bl, "int4 block scales")?;
        match self {
            BlockInt4::Blocks(w) => {
                let len = match w.order {
                    Order::NxK => error::mul(n, k.div_ceil(2), "int4 weights")?,
                    Order::KxN => error::mul(k, n.div_ceil(2), "int4 weights")?,
                };
                error::at_least_bytes(w.data.len(), len, "int4 weight data")?;
                error::at_least(w.scales.len(), blocks, "int4 block scales")?;
            }
            BlockInt4::Q4_0(w) => {
                error::at_least_bytes(w.data.len(), error::mul(blocks, Q4_0_BLOCK_BYTES, "Q4_0 data")?, "Q4_0 data")?;
            }
        }
        if let Some(b) = self.bias() {
            error::at_least(b.len(), n, "bias")?;
        }
        Ok(())
    }

    /// Weight `(n, k)` as an unsigned nibble (`value + 8`). Indices must be
    /// in range of validated weights.
    pub(crate) fn u4(&self, n: usize, k: usize) -> u8 {
        match self {
            BlockInt4::Blocks(w) => {
                let (row, col, row_bytes) = match w.order {
                    Order::NxK => (n, k, w.k.div_ceil(2)),
                    Order::KxN => (k, n, w.n.div_ceil(2)),
                };
                let byte = w.data[row * row_bytes + col / 2];
                (w.encoding.decode(if col % 2 == 0 { byte } else { byte >> 4 }) + 8) as u8
            }
            BlockInt4::Q4_0(w) => {
                let block = &w.data[(n * (w.k / Q4_0_BLOCK) + k / Q4_0_BLOCK) * Q4_0_BLOCK_BYTES..];
                let j = k % Q4_0_BLOCK;
                let byte = block[2 + j % 16];
                if j < 16 { byte & 0xF } else { byte >> 4 }
            }
        }
    }

    /// Weight `(n, k)` as a signed value in `-8..=7` (validated weights).
    pub(crate) fn value(&self, n: usize, k: usize) -> i8 {
        self.u4(n, k) as i8 - 8
    }

    /// Raw bits of the scale of block `b` of channel `n`, in the stored type.
    pub(crate) fn native_scale_bits(&self, n: usize, b: usize) -> u16 {
        match self {
            BlockInt4::Blocks(w) => w.scales.bits(n * (w.k / w.bl) + b),
            BlockInt4::Q4_0(w) => {
                let at = (n * (w.k / Q4_0_BLOCK) + b) * Q4_0_BLOCK_BYTES;
                u16::from_le_bytes([w.data[at], w.data[at + 1]])
            }
        }
    }

    /// All `n * (k / bl)` scales converted to `ty` (raw bits), borrowed when
    /// they are stored that way already. A finite scale that does not fit
    /// `ty` (bf16 beyond the f16 range) is an error.
    pub(crate) fn scale_bits(&self, ty: ScaleType) -> Result<Cow<'a, [u16]>> {
        self.validate()?;
        let count = self.n() * self.blocks();
        match (self, ty) {
            (BlockInt4::Blocks(Int4Blocks { scales: BlockScales::F16(s), .. }), ScaleType::F16) => {
                return Ok(Cow::Borrowed(&s.reinterpret_cast()[..count]));
            }
            (BlockInt4::Blocks(Int4Blocks { scales: BlockScales::Bf16(s), .. }), ScaleType::Bf16) => {
                return Ok(Cow::Borrowed(&s.reinterpret_cast()[..count]));
            }
            _ => {}
        }
        let native = self.scale_type();
        let blocks = self.blocks();
        let mut out = Vec::with_capacity(count);
        for n in 0..self.n() {
            for b in 0..blocks {
                let x = native.value_of(self.native_scale_bits(n, b));
                let bits = if native == ty { self.native_scale_bits(n, b) } else { ty.bits_of(x) };
                if x.is_finite() && !ty.value_of(bits).is_finite() {
                    return Err(Error::bad_value(
                        "block scale",
                        x,
                        format!("of channel {n}, block {b} does not fit {ty:?}"),
                    ));
                }
                out.push(bits);
            }
        }
        Ok(Cow::Owned(out))
    }

    /// All weights as f32, `n x k`, with the scales stored as they are.
    pub fn dequantize(&self) -> Result<Vec<f32>> {
        self.dequantize_as(self.scale_type())
    }

    /// All weights as f32, `n x k`, with the scales first converted to `ty`
    /// (what a kernel whose packer stores `ty` scales computes with).
    pub fn dequantize_as(&self, ty: ScaleType) -> Result<Vec<f32>> {
        let scales = self.scale_bits(ty)?;
        let (n, k, bl) = (self.n(), self.k(), self.bl());
        let mut out = Vec::with_capacity(n * k);
        for i in 0..n {
            for p in 0..k {
                out.push(self.value(i, p) as f32 * ty.value_of(scales[i * (k / bl) + p / bl]));
            }
        }
        Ok(out)
    }

    /// The nibbles as upstream's `qsu4c32s1s0` input (value + 8, two per
    /// byte, first in the low nibble), rows of `order`: `n` rows of `k / 2`
    /// bytes or `k` rows of `ceil(n / 2)`. Borrowed when stored that way.
    pub(crate) fn qsu4_s1s0(&self, order: Order) -> Result<Cow<'a, [u8]>> {
        self.validate()?;
        let (n, k) = (self.n(), self.k());
        if let BlockInt4::Blocks(w) = self {
            if w.order == order {
                let len = match order {
                    Order::NxK => n * k.div_ceil(2),
                    Order::KxN => k * n.div_ceil(2),
                };
                let data = &w.data[..len];
                return Ok(match w.encoding {
                    Int4Encoding::Offset8 => Cow::Borrowed(data),
                    // Signed -> offset 8 flips bit 3 of each nibble.
                    Int4Encoding::Signed => Cow::Owned(data.iter().map(|b| b ^ 0x88).collect()),
                });
            }
        }
        let (rows, cols) = match order {
            Order::NxK => (n, k),
            Order::KxN => (k, n),
        };
        let row_bytes = cols.div_ceil(2);
        let mut out = vec![0x88u8; rows * row_bytes];
        for r in 0..rows {
            for c in 0..cols {
                let v = match order {
                    Order::NxK => self.u4(r, c),
                    Order::KxN => self.u4(c, r),
                };
                let byte = &mut out[r * row_bytes + c / 2];
                *byte = if c % 2 == 0 { (*byte & 0xF0) | v } else { (*byte & 0x0F) | (v << 4) };
            }
        }
        Ok(Cow::Owned(out))
    }

    /// The weights as upstream's `qsu4c32s16s0` input with f16 scales (ggml
    /// `Q4_0` for `bl = 32`): per row, per block, the f16 scale (little
    /// endian) then `bl / 2` bytes, byte `j` holding value `j` (low nibble)
    /// and `j + bl / 2` (high), each plus 8. Borrowed for `Q4_0` input.
    pub(crate) fn qsu4c32s16s0(&self) -> Result<Cow<'a, [u8]>> {
        self.validate()?;
        if let BlockInt4::Q4_0(w) = self {
            return Ok(Cow::Borrowed(&w.data[..w.n * (w.k / Q4_0_BLOCK) * Q4_0_BLOCK_BYTES]));
        }
        let scales = self.scale_bits(ScaleType::F16)?;
        let (n, k, bl) = (self.n(), self.k(), self.bl());
        let blocks = k / bl;
        let half = bl / 2;
        let mut out = Vec::with_capacity(n * blocks * (half + 2));
        for i in 0..n {
            for b in 0..blocks {
                out.extend_from_slice(&scales[i * blocks + b].to_le_bytes());
                for j in 0..half {
                    let k0 = b * bl + j;
                    out.push(self.u4(i, k0) | (self.u4(i, k0 + half) << 4));
                }
            }
        }
        Ok(Cow::Owned(out))
    }
}

#[cfg(test)]
impl<'a> Int4Blocks<'a> {
    /// Test weights with 32-value blocks and no bias.
    pub(crate) fn bl32(
        n: usize,
        k: usize,
        order: Order,
        encoding: Int4Encoding,
        data: &'a [u8],
        scales: BlockScales<'a>,
    ) -> Self {
        Int4Blocks { n, k, bl: 32, order, encoding, data, scales, bias: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q4_0_row(scales: &[f32], values: &[i8]) -> Vec<u8> {
        let mut out = Vec::new();
        for (b, s) in scales.iter().enumerate() {
            out.extend_from_slice(&f16::from_f32(*s).to_bits().to_le_bytes());
            for j in 0..16 {
                let lo = (values[b * 32 + j] + 8) as u8;
                let hi = (values[b * 32 + j + 16] + 8) as u8;
                out.push(lo | hi << 4);
            }
        }
        out
    }

    #[test]
    fn q4_0_and_planar_agree() {
        let values: Vec<i8> = (0..128).map(|i| ((i * 7 + 3) % 16) as i8 - 8).collect();
        let e = Int4Encoding::Signed;
        let data: Vec<u8> = values.chunks(2).map(|p| e.encode(p[0]) | e.encode(p[1]) << 4).collect();
        let scales: Vec<f16> = [0.5f32, 0.5, -0.25, -0.25].iter().map(|x| f16::from_f32(*x)).collect();
        let q2: Vec<u8> = [q4_0_row(&[0.5, 0.5], &values[..64]), q4_0_row(&[-0.25, -0.25], &values[64..])].concat();
        let wq = BlockInt4::from(Q4_0 { n: 2, k: 64, data: &q2, bias: None });
        let wp = BlockInt4::from(Int4Blocks::bl32(2, 64, Order::NxK, e, &data, BlockScales::F16(&scales)));
        assert_eq!(wq.dequantize().unwrap(), wp.dequantize().unwrap());
        assert_eq!(wq.qsu4c32s16s0().unwrap(), wp.qsu4c32s16s0().unwrap());
        assert_eq!(wq.qsu4_s1s0(Order::NxK).unwrap(), wp.qsu4_s1s0(Order::NxK).unwrap());
        assert_eq!(wq.qsu4_s1s0(Order::KxN).unwrap(), wp.qsu4_s1s0(Order::KxN).unwrap());
        for i in 0..2 {
            for p in 0..64 {
                assert_eq!(wp.value(i, p), values[i * 64 + p]);
            }
        }
    }

    #[test]
    fn scale_conversion() {
        let s = [bf16::from_f32(1.0e6), bf16::from_f32(0.1)];
        let w =
            BlockInt4::from(Int4Blocks::bl32(1, 64, Order::NxK, Int4Encoding::Signed, &[0; 32], BlockScales::Bf16(&s)));
        assert!(w.scale_bits(ScaleType::F16).is_err(), "1e6 overflows f16");
        assert!(matches!(w.scale_bits(ScaleType::Bf16).unwrap(), Cow::Borrowed(_)));
    }

    #[test]
    fn validation() {
        let s = [f16::ONE; 4];
        let ok = Int4Blocks::bl32(2, 64, Order::KxN, Int4Encoding::Offset8, &[0; 64], BlockScales::F16(&s));
        BlockInt4::from(ok).validate().unwrap();
        let bad = |w: Int4Blocks<'_>| BlockInt4::from(w).validate().is_err();
        assert!(bad(Int4Blocks { bl: 48, ..ok }));
        assert!(bad(Int4Blocks { bl: 0, ..ok }));
        assert!(bad(Int4Blocks { k: 96, ..ok }), "k not a multiple of bl");
        assert!(bad(Int4Blocks { data: &[0; 63], ..ok }));
        assert!(bad(Int4Blocks { scales: BlockScales::F16(&s[..3]), ..ok }));
        assert!(bad(Int4Blocks { bias: Some(&[0.0]), ..ok }));
        assert!(bad(Int4Blocks { n: usize::MAX, ..ok }));
        assert!(BlockInt4::from(Q4_0 { n: 1, k: 32, data: &[0; 17], bias: None }).validate().is_err());
        assert!(BlockInt4::from(Q4_0 { n: 1, k: 48, data: &[0; 36], bias: None }).validate().is_err());
    }
}
