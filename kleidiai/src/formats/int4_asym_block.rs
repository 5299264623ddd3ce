//! Int4 weights quantised asymmetrically per block along K, with one f32
//! scale and one f32 offset per block (`qai4c32` for 32-value blocks).

use super::Int4Encoding;
use crate::error::{self, Result};
use std::borrow::Cow;

/// Which nibble of a byte holds the earlier of its two values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum NibbleOrder {
    /// Value `2i` in the low nibble, `2i + 1` in the high one (upstream
    /// `s1s0`; ggml's and most libraries' convention).
    #[default]
    LowFirst,
    /// Value `2i` in the high nibble (upstream `s0s1`).
    HighFirst,
}

/// Int4 weights, `n` output channels by `k` inputs, in blocks of `bl`
/// values along K, each block with its own scale and offset:
/// `w[n][k] = value(n, k) * scales[n][k / bl] + offsets[n][k / bl]`.
///
/// `data` holds the rows one after the other, `k / 2` bytes each (`k` is a
/// multiple of `bl`, which is even). An unsigned zero point `zp` in
/// `0..=15` maps to `offset = (8 - zp) * scale` with
/// [`Int4Encoding::Offset8`] nibbles; ggml's `Q4_1` (`d * u + m`) maps to
/// `offset = m + 8 * d`.
///
/// ```
/// use kleidiai::formats::{Int4AsymBlock, Int4Encoding, NibbleOrder};
/// // One channel, one block of 2 values: nibbles 9 and 6 (values 1 and -2).
/// let w = Int4AsymBlock {
///     n: 1, k: 2, bl: 2, encoding: Int4Encoding::Offset8, nibbles: NibbleOrder::LowFirst,
///     data: &[0x69], scales: &[0.5], offsets: &[1.0], bias: None,
/// };
/// assert_eq!(w.dequantize().unwrap(), vec![1.5, 0.0]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Int4AsymBlock<'a> {
    /// Output channels.
    pub n: usize,
    /// Inputs per channel (a multiple of `bl`).
    pub k: usize,
    /// Block length along K (even).
    pub bl: usize,
    /// What a nibble stands for.
    pub encoding: Int4Encoding,
    /// Nibble order within a byte.
    pub nibbles: NibbleOrder,
    /// `n * k / 2` bytes, N x K.
    pub data: &'a [u8],
    /// One scale per block, `n * (k / bl)` values, row-major.
    pub scales: &'a [f32],
    /// One offset per block, laid out like `scales`.
    pub offsets: &'a [f32],
    /// Optional bias per output channel.
    pub bias: Option<&'a [f32]>,
}

impl Int4AsymBlock<'_> {
    /// Blocks per row (`k / bl`).
    pub fn blocks_per_row(&self) -> usize {
        self.k / self.bl.max(1)
    }

    /// Checks dimensions (`k` a multiple of an even `bl`) and buffer lengths.
    pub fn validate(&self) -> Result<()> {
        error::nonzero(self.n, "n")?;
        error::nonzero(self.k, "k")?;
        error::nonzero(self.bl, "bl")?;
        error::multiple_of(self.bl, 2, "bl", "int4 blocks hold whole bytes")?;
        error::multiple_of(self.k, self.bl, "k", "k must be whole blocks")?;
        error::at_least_bytes(self.data.len(), error::mul(self.n, self.k / 2, "int4 weights")?, "int4 weight data")?;
        let blocks = error::mul(self.n, self.blocks_per_row(), "int4 block parameters")?;
        error::at_least(self.scales.len(), blocks, "int4 block scales")?;
        error::at_least(self.offsets.len(), blocks, "int4 block offsets")?;
        if let Some(b) = self.bias {
            error::at_least(b.len(), self.n, "bias")?;
        }
        Ok(())
    }

    /// The signed value (after decoding) of weight `(n, k)`; no checks.
    pub(crate) fn value_unchecked(&self, n: usize, k: usize) -> i8 {
        let byte = self.data[n * (self.k / 2) + k / 2];
        let first = k % 2 == 0;
        let nib = match (self.nibbles, first) {
            (NibbleOrder::LowFirst, true) | (NibbleOrder::HighFirst, false) => byte & 0xF,
            _ => byte >> 4,
        };
        self.encoding.decode(nib)
    }

    /// Weight `(n, k)` as f32, computed as `value * scale + offset` (two f32
    /// roundings, the same expression the packed-row unpackers use).
    pub(crate) fn weight_unchecked(&self, n: usize, k: usize) -> f32 {
        let b = n * self.blocks_per_row() + k / self.bl;
        self.value_unchecked(n, k) as f32 * self.scales[b] + self.offsets[b]
    }

    /// All weights as f32, `n x k`.
    pub fn dequantize(&self) -> Result<Vec<f32>> {
        self.validate()?;
        Ok((0..self.n * self.k).map(|i| self.weight_unchecked(i / self.k, i % self.k)).collect())
    }

    /// The data re-encoded as `Offset8` nibbles (`value + 8`) in `order`:
    /// what upstream's `qau4c32` packers read. Borrows when nothing changes.
    pub(crate) fn offset8_data(&self, order: NibbleOrder) -> Cow<'_, [u8]> {
        let len = self.n * (self.k / 2);
        let data = &self.data[..len];
        let flip = if self.encoding == Int4Encoding::Signed { 0x88 } else { 0 };
        let swap = order != self.nibbles;
        if flip == 0 && !swap {
            return Cow::Borrowed(data);
        }
        Cow::Owned(data.iter().map(|&b| if swap { b.rotate_left(4) ^ flip } else { b ^ flip }).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_and_orders_agree() {
        // Values 1, -2, 7, -8 in every encoding and order.
        let vals = [1i8, -2, 7, -8];
        for enc in [Int4Encoding::Signed, Int4Encoding::Offset8] {
            for order in [NibbleOrder::LowFirst, NibbleOrder::HighFirst] {
                let data: Vec<u8> = vals
                    .chunks(2)
                    .map(|p| {
                        let (a, b) = (enc.encode(p[0]), enc.encode(p[1]));
                        if order == NibbleOrder::LowFirst { a | b << 4 } else { a << 4 | b }
                    })
                    .collect();
                let w = Int4AsymBlock {
                    n: 1,
                    k: 4,
                    bl: 2,
                    encoding: enc,
                    nibbles: order,
                    data: &data,
                    scales: &[1.0, 2.0],
                    offsets: &[0.0, 0.5],
                    bias: None,
                };
                assert_eq!(w.dequantize().unwrap(), vec![1.0, -2.0, 14.5, -15.5]);
                let o = w.offset8_data(NibbleOrder::LowFirst);
                let back =
                    Int4AsymBlock { encoding: Int4Encoding::Offset8, nibbles: NibbleOrder::LowFirst, data: &o, ..w };
                assert_eq!(back.dequantize().unwrap(), w.dequantize().unwrap());
            }
        }
    }

    #[test]
    fn rejects_bad_shapes() {
        let w = Int4AsymBlock {
            n: 2,
            k: 8,
            bl: 4,
            encoding: Int4Encoding::Offset8,
            nibbles: NibbleOrder::LowFirst,
            data: &[0; 8],
            scales: &[1.0; 4],
            offsets: &[0.0; 4],
            bias: None,
        };
        w.validate().unwrap();
        assert!(Int4AsymBlock { k: 6, ..w }.validate().is_err(), "k not whole blocks");
        assert!(Int4AsymBlock { bl: 3, k: 9, ..w }.validate().is_err(), "odd block");
        assert!(Int4AsymBlock { data: &[0; 7], ..w }.validate().is_err());
        assert!(Int4AsymBlock { offsets: &[0.0; 3], ..w }.validate().is_err());
        assert!(Int4AsymBlock { n: usize::MAX, ..w }.validate().is_err());
    }
}
