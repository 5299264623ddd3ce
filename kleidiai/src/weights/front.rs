//! The short way in: one constructor per weight kind on [`WeightsRef`]
//! (also reachable as [`Weights`]), each checking its arguments.
//!
//! Every constructor takes the common layout (rows of `k` values, one per
//! output channel; two's-complement nibbles, the first value in the low
//! nibble) and no bias. The structs of [`crate::formats`] take the rest
//! (K x N order, other nibble encodings, a bias), through the variants of
//! [`WeightsRef`].

use super::WeightsRef;
use crate::error::Result;
use crate::formats::ggml_blocks::BlockQ8_0;
use crate::formats::{
    BlockInt4, BlockScales, FloatWeights, Int4AsymBlock, Int4Blocks, Int4Encoding, Int4PerChannel, Int8PerChannel,
    NibbleOrder, Order, Q4_0,
};
use half::{bf16, f16};

/// Unpacked weights to pack: another name of [`WeightsRef`], for its
/// constructors (`Weights::q4_0(n, k, &bytes)`, `Weights::f32(n, k, &data)`,
/// ...).
///
/// ```
/// use kleidiai::prelude::*;
/// let data = vec![0.5f32; 4 * 32];
/// let w = Weights::f32(4, 32, &data)?;
/// assert_eq!((w.kind(), w.shape()), (WeightKind::F32, (4, 32)));
/// assert!(Weights::f32(4, 33, &data).is_err()); // 4 x 33 values needed
/// # Ok::<(), kleidiai::Error>(())
/// ```
pub type Weights<'a> = WeightsRef<'a>;

impl<'a> WeightsRef<'a> {
    /// Checked: the weights' own validation (sizes, lengths, block length).
    fn checked(self) -> Result<Self> {
        self.validate()?;
        Ok(self)
    }

    /// Dense f32 weights: `n` rows of `k` values. Errors: `n` or `k` zero,
    /// `data` shorter than `n * k`.
    pub fn f32(n: usize, k: usize, data: &'a [f32]) -> Result<Self> {
        WeightsRef::F32(FloatWeights { n, k, order: Order::NxK, data, bias: None }).checked()
    }

    /// Dense f16 weights: `n` rows of `k` values (errors as
    /// [`f32`](Self::f32)).
    pub fn f16(n: usize, k: usize, data: &'a [f16]) -> Result<Self> {
        WeightsRef::F16(FloatWeights { n, k, order: Order::NxK, data, bias: None }).checked()
    }

    /// Dense bf16 weights: `n` rows of `k` values (errors as
    /// [`f32`](Self::f32)).
    pub fn bf16(n: usize, k: usize, data: &'a [bf16]) -> Result<Self> {
        WeightsRef::Bf16(FloatWeights { n, k, order: Order::NxK, data, bias: None }).checked()
    }

    /// Int8 weights, `n` rows of `k` values, with one f32 scale per row:
    /// `w[i][j] = data[i * k + j] * scales[i]`. Errors: a zero size, `data`
    /// shorter than `n * k`, fewer than `n` scales.
    pub fn int8_per_channel(n: usize, k: usize, data: &'a [i8], scales: &'a [f32]) -> Result<Self> {
        WeightsRef::Int8PerChannel(Int8PerChannel { n, k, order: Order::NxK, data, scales, bias: None }).checked()
    }

    /// Int4 weights, `n` rows of `k` values two to a byte (`k.div_ceil(2)`
    /// bytes a row, two's complement, the first value in the low nibble),
    /// with one f32 scale per row. Errors: a zero size, `data` or `scales`
    /// too short.
    pub fn int4_per_channel(n: usize, k: usize, data: &'a [u8], scales: &'a [f32]) -> Result<Self> {
        let encoding = Int4Encoding::Signed;
        WeightsRef::Int4PerChannel(Int4PerChannel { n, k, order: Order::NxK, encoding, data, scales, bias: None })
            .checked()
    }

    /// Int4 weights in blocks of `bl` values along K, each with an f16 or
    /// bf16 scale (`n * k / bl` of them, row after row); values as in
    /// [`int4_per_channel`](Self::int4_per_channel). Errors: a zero size,
    /// `bl` not a multiple of 32, `k` not a multiple of `bl`, `data` or
    /// `scales` too short.
    ///
    /// ```
    /// use kleidiai::prelude::*;
    /// let (n, k) = (2, 64);
    /// let data = vec![0x11u8; n * k / 2]; // every value 1
    /// let scales = vec![f16::from_f32(0.5); n * k / 32];
    /// let w = Weights::int4_blocks(n, k, 32, &data, &scales)?;
    /// assert_eq!((w.kind(), w.bl()), (WeightKind::Int4Block, 32));
    /// assert!(Weights::int4_blocks(n, k, 48, &data, &scales).is_err());
    /// # Ok::<(), kleidiai::Error>(())
    /// ```
    pub fn int4_blocks(
        n: usize,
        k: usize,
        bl: usize,
        data: &'a [u8],
        scales: impl Into<BlockScales<'a>>,
    ) -> Result<Self> {
        let (order, encoding, scales) = (Order::NxK, Int4Encoding::Signed, scales.into());
        WeightsRef::Int4Block(BlockInt4::Blocks(Int4Blocks { n, k, bl, order, encoding, data, scales, bias: None }))
            .checked()
    }

    /// Asymmetric int4 weights in blocks of `bl` values along K, each with an
    /// f32 scale and an f32 offset (`n * k / bl` of each):
    /// `w = value * scale + offset`, values as in
    /// [`int4_per_channel`](Self::int4_per_channel). Errors: a zero size,
    /// an odd `bl`, `k` not a multiple of `bl`, a slice too short. (Packing
    /// takes `bl` a multiple of 32.)
    pub fn int4_asym_blocks(
        n: usize,
        k: usize,
        bl: usize,
        data: &'a [u8],
        scales: &'a [f32],
        offsets: &'a [f32],
    ) -> Result<Self> {
        let (encoding, nibbles) = (Int4Encoding::Signed, NibbleOrder::LowFirst);
        WeightsRef::Int4AsymBlock(Int4AsymBlock { n, k, bl, encoding, nibbles, data, scales, offsets, bias: None })
            .checked()
    }

    /// ggml `Q4_0` weights as ggml stores them: `n` rows of `k / 32` blocks
    /// of 18 bytes ([`crate::formats::Q4_0`]). Errors: a zero size, `k` not a
    /// multiple of 32, fewer than `n * k / 32 * 18` bytes.
    ///
    /// ```
    /// use kleidiai::prelude::*;
    /// let (n, k) = (4, 64);
    /// let x: Vec<f32> = (0..n * k).map(|i| (i % 7) as f32 - 3.0).collect();
    /// let blocks = kleidiai::ggml::quantize_q4_0(&x, k)?;
    /// let w = Weights::q4_0(n, k, kleidiai::ggml::q4_0_as_bytes(&blocks))?;
    /// assert_eq!(w.kind(), WeightKind::Int4Block);
    /// assert!(Weights::q4_0(n, 48, kleidiai::ggml::q4_0_as_bytes(&blocks)).is_err());
    /// # Ok::<(), kleidiai::Error>(())
    /// ```
    pub fn q4_0(n: usize, k: usize, bytes: &'a [u8]) -> Result<Self> {
        WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: bytes, bias: None })).checked()
    }

    /// ggml `Q8_0` weights: `n` rows of `k / 32` blocks, requantised per row
    /// when packed, as ggml's KleidiAI path does ([`WeightsRef::GgmlQ8_0`];
    /// raw bytes become blocks with [`crate::ggml::q8_0_from_bytes`]).
    /// Errors: a zero size, `k` not a multiple of 32, too few blocks.
    pub fn q8_0(n: usize, k: usize, blocks: &'a [BlockQ8_0]) -> Result<Self> {
        WeightsRef::GgmlQ8_0 { n, k, blocks }.checked()
    }
}

macro_rules! block_scales_from {
    ($t:ty, $variant:ident) => {
        impl<'a> From<&'a [$t]> for BlockScales<'a> {
            fn from(s: &'a [$t]) -> Self {
                BlockScales::$variant(s)
            }
        }
        impl<'a> From<&'a Vec<$t>> for BlockScales<'a> {
            fn from(s: &'a Vec<$t>) -> Self {
                BlockScales::$variant(s)
            }
        }
        impl<'a, const N: usize> From<&'a [$t; N]> for BlockScales<'a> {
            fn from(s: &'a [$t; N]) -> Self {
                BlockScales::$variant(s)
            }
        }
    };
}

block_scales_from!(f16, F16);
block_scales_from!(bf16, Bf16);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::BlockInt4;

    #[test]
    fn constructors_build_the_variants_they_name() {
        let f = vec![0.5f32; 64];
        let h = vec![f16::ONE; 64];
        let b = vec![bf16::ONE; 64];
        let i8s = vec![1i8; 64];
        let nib = vec![0x11u8; 32];
        let s = vec![1.0f32; 2];
        let hs = vec![f16::ONE; 2];
        let q4 = vec![0x88u8; 2 * 18];
        let q8 = vec![BlockQ8_0 { d: f16::ONE, qs: [1; 32] }; 2];
        assert!(matches!(Weights::f32(2, 32, &f), Ok(WeightsRef::F32(_))));
        assert!(matches!(Weights::f16(2, 32, &h), Ok(WeightsRef::F16(_))));
        assert!(matches!(Weights::bf16(2, 32, &b), Ok(WeightsRef::Bf16(_))));
        assert!(matches!(Weights::int8_per_channel(2, 32, &i8s, &s), Ok(WeightsRef::Int8PerChannel(_))));
        assert!(matches!(Weights::int4_per_channel(2, 32, &nib, &s), Ok(WeightsRef::Int4PerChannel(_))));
        assert!(matches!(Weights::int4_blocks(2, 32, 32, &nib, &hs), Ok(WeightsRef::Int4Block(BlockInt4::Blocks(_)))));
        assert!(matches!(Weights::int4_asym_blocks(2, 32, 32, &nib, &s, &s), Ok(WeightsRef::Int4AsymBlock(_))));
        assert!(matches!(Weights::q4_0(2, 32, &q4), Ok(WeightsRef::Int4Block(BlockInt4::Q4_0(_)))));
        assert!(matches!(Weights::q8_0(2, 32, &q8), Ok(WeightsRef::GgmlQ8_0 { .. })));
    }

    #[test]
    fn constructors_refuse_bad_input() {
        let f = vec![0.5f32; 64];
        let nib = vec![0x11u8; 32];
        let s = vec![1.0f32; 2];
        let hs = vec![f16::ONE; 2];
        let q8 = vec![BlockQ8_0 { d: f16::ONE, qs: [1; 32] }; 2];
        assert!(Weights::f32(0, 32, &f).is_err());
        assert!(Weights::f32(3, 32, &f).is_err());
        assert!(Weights::f32(usize::MAX, 2, &f).is_err());
        assert!(Weights::int8_per_channel(2, 32, &[1i8; 63], &s).is_err());
        assert!(Weights::int4_per_channel(2, 32, &nib, &s[..1]).is_err());
        assert!(Weights::int4_blocks(2, 32, 16, &nib, &hs).is_err());
        assert!(Weights::int4_blocks(2, 64, 32, &nib, &hs).is_err());
        assert!(Weights::int4_asym_blocks(2, 32, 3, &nib, &s, &s).is_err());
        assert!(Weights::q4_0(2, 32, &[0u8; 35]).is_err());
        assert!(Weights::q4_0(2, 40, &[0u8; 36]).is_err());
        assert!(Weights::q8_0(3, 32, &q8).is_err());
    }

    /// The documented table ([`super`]'s docs, the README): for every
    /// weight constructor and activation type, `pack` and `matmul` (one row
    /// and three, outputs of the same type) succeed exactly where it says
    /// yes, and outputs of another type are refused.
    #[test]
    fn the_activation_table_is_what_the_code_does() {
        use super::super::{Activation, ActivationMut, DType, PackOptions, PackedWeights, Scratch, WeightKind};
        use crate::{Clamp, Parallelism};
        let (n, k) = (8usize, 64usize);
        let f: Vec<f32> = (0..n * k).map(|i| ((i % 5) as f32 - 2.0) * 0.125).collect();
        let h: Vec<f16> = f.iter().map(|v| f16::from_f32(*v)).collect();
        let b: Vec<bf16> = f.iter().map(|v| bf16::from_f32(*v)).collect();
        let i8s: Vec<i8> = (0..n * k).map(|i| (i % 7) as i8 - 3).collect();
        let nib: Vec<u8> = (0..n * k / 2).map(|i| (i % 251) as u8).collect();
        let s = vec![0.25f32; n * k / 32];
        let hs = vec![f16::from_f32(0.25); n * k / 32];
        let q4 = crate::formats::ggml_blocks::quantize_q4_0(&f, k).unwrap();
        let q8 = crate::formats::ggml_blocks::quantize_q8_0(&f, k).unwrap();
        let weights = |name: &str| -> WeightsRef<'_> {
            match name {
                "f32" => Weights::f32(n, k, &f),
                "f16" => Weights::f16(n, k, &h),
                "bf16" => Weights::bf16(n, k, &b),
                "int8_per_channel" => Weights::int8_per_channel(n, k, &i8s, &s),
                "q8_0" => Weights::q8_0(n, k, &q8),
                "int4_per_channel" => Weights::int4_per_channel(n, k, &nib, &s),
                "int4_blocks" => Weights::int4_blocks(n, k, 32, &nib, &hs),
                "q4_0" => Weights::q4_0(n, k, crate::formats::ggml_blocks::q4_0_as_bytes(&q4)),
                "int4_asym_blocks" => Weights::int4_asym_blocks(n, k, 32, &nib, &s, &s),
                other => panic!("the table names a constructor the test does not know: {other}"),
            }
            .unwrap()
        };
        let table = include_str!("activations.md");
        let header: Vec<&str> = table.lines().next().unwrap().split('|').map(str::trim).collect();
        assert_eq!(&header[3..6], &["f32 in, f32 out", "f16 in, f16 out", "bf16 in, bf16 out"]);
        let types = [DType::F32, DType::F16, DType::Bf16];
        let mut rows = 0;
        let mut kinds = Vec::new();
        for line in table.lines().skip(2) {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells[1].trim_start_matches('`').split('(').next().unwrap();
            let w = weights(name);
            assert_eq!(format!("`{:?}`", w.kind()), cells[2], "{name}: weight kind column");
            kinds.push(w.kind());
            for (i, &act) in types.iter().enumerate() {
                let yes = match cells[3 + i] {
                    "yes" => true,
                    "-" => false,
                    other => panic!("{name}: cell {other:?} is neither yes nor -"),
                };
                // The routing the table describes.
                assert_eq!(yes, super::super::operation_exists(w.kind(), act), "{name} with {act:?}: operation_exists");
                assert_eq!(
                    yes,
                    !super::super::policy::pairings(w.kind(), act).is_empty(),
                    "{name} with {act:?}: policy"
                );
                let opts = PackOptions { activation: act, ..PackOptions::default() };
                let packed = PackedWeights::pack(&w, &opts);
                assert_eq!(packed.is_ok(), yes, "{name} with {act:?}: pack gave {:?}", packed.as_ref().err());
                let Ok(packed) = packed else { continue };
                let mut scratch = Scratch::default();
                for m in [1usize, 3] {
                    let (x32, x16, xb) =
                        (vec![0.5f32; m * k], vec![f16::from_f32(0.5); m * k], vec![bf16::from_f32(0.5); m * k]);
                    let x = match act {
                        DType::F32 => Activation::F32(&x32),
                        DType::F16 => Activation::F16(&x16),
                        DType::Bf16 => Activation::Bf16(&xb),
                    };
                    let (mut y32, mut y16, mut yb) =
                        (vec![0f32; m * n], vec![f16::ZERO; m * n], vec![bf16::ZERO; m * n]);
                    for (j, &out) in types.iter().enumerate() {
                        let y = match out {
                            DType::F32 => ActivationMut::F32(&mut y32),
                            DType::F16 => ActivationMut::F16(&mut y16),
                            DType::Bf16 => ActivationMut::Bf16(&mut yb),
                        };
                        let r = packed.matmul(m, x, y, Clamp::NONE, Parallelism::Sequential, &mut scratch);
                        assert_eq!(r.is_ok(), i == j, "{name}, m = {m}, {act:?} in, {out:?} out: {r:?}");
                    }
                    let finite = match act {
                        DType::F32 => y32.iter().all(|v| v.is_finite()),
                        DType::F16 => y16.iter().all(|v| v.is_finite()),
                        DType::Bf16 => yb.iter().all(|v| v.is_finite()),
                    };
                    assert!(finite, "{name}, m = {m}, {act:?}: outputs not finite");
                }
            }
            rows += 1;
        }
        assert_eq!(rows, 9, "one row per constructor");
        for kind in WeightKind::ALL {
            assert!(kinds.contains(&kind), "{kind:?} has no row in the table");
        }
    }
}
