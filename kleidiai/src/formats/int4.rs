//! Int4 weights with per-channel scales.

use super::check;
use crate::error::{self, Result};

/// Storage order of an unpacked weight matrix of `n` output channels by `k`
/// inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Order {
    /// One row per output channel (`n` rows of `k`): PyTorch `Linear`, ggml.
    #[default]
    NxK,
    /// One row per input (`k` rows of `n`).
    KxN,
}

/// How 4-bit values are stored in a nibble.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Int4Encoding {
    /// Two's complement, `-8..=7`.
    #[default]
    Signed,
    /// Unsigned `0..=15` meaning `value - 8` (ggml's Q4 convention).
    Offset8,
}

impl Int4Encoding {
    /// The signed value a nibble stands for.
    pub fn decode(self, nibble: u8) -> i8 {
        let nib = nibble & 0xF;
        match self {
            Int4Encoding::Signed => ((nib << 4) as i8) >> 4,
            Int4Encoding::Offset8 => nib as i8 - 8,
        }
    }

    /// The nibble for a signed value in `-8..=7`.
    pub fn encode(self, v: i8) -> u8 {
        match self {
            Int4Encoding::Signed => (v as u8) & 0xF,
            Int4Encoding::Offset8 => (v + 8) as u8 & 0xF,
        }
    }

    /// The zero-point upstream's packers take for this encoding.
    pub(crate) fn rhs_zero_point(self) -> u8 {
        match self {
            Int4Encoding::Signed => 0,
            Int4Encoding::Offset8 => 8,
        }
    }
}

/// Int4 weights with one f32 scale per output channel (`qsi4cx`):
/// `w[n][k] = value(n, k) * scales[n]`.
///
/// Two values per byte along the stored rows, the first in the low nibble;
/// a row of odd length ends with a padding nibble.
///
/// ```
/// use kleidiai::formats::{Int4Encoding, Int4PerChannel, Order};
/// // 2 channels x 3 inputs: [1, -2, 3] and [-8, 7, 0].
/// let e = Int4Encoding::Signed;
/// let data = [e.encode(1) | e.encode(-2) << 4, e.encode(3), e.encode(-8) | e.encode(7) << 4, 0];
/// let w = Int4PerChannel { n: 2, k: 3, order: Order::NxK, encoding: e, data: &data, scales: &[0.5, 2.0], bias: None };
/// assert_eq!(w.value(1, 1).unwrap(), 7);
/// assert_eq!(w.dequantize().unwrap(), vec![0.5, -1.0, 1.5, -16.0, 14.0, 0.0]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Int4PerChannel<'a> {
    /// Output channels.
    pub n: usize,
    /// Inputs per channel.
    pub k: usize,
    /// Storage order of `data`.
    pub order: Order,
    /// Nibble encoding.
    pub encoding: Int4Encoding,
    /// Packed nibbles: `n * ceil(k / 2)` bytes (NxK) or `k * ceil(n / 2)` (KxN).
    pub data: &'a [u8],
    /// One scale per output channel.
    pub scales: &'a [f32],
    /// Optional bias per output channel.
    pub bias: Option<&'a [f32]>,
}

impl Int4PerChannel<'_> {
    /// Bytes `data` must hold.
    pub fn data_len(&self) -> Result<usize> {
        match self.order {
            Order::NxK => error::mul(self.n, self.k.div_ceil(2), "int4 weights"),
            Order::KxN => error::mul(self.k, self.n.div_ceil(2), "int4 weights"),
        }
    }

    /// Checks dimensions, lengths, and that scales and bias are finite.
    pub fn validate(&self) -> Result<()> {
        check::weights(
            self.n,
            self.k,
            || error::at_least_bytes(self.data.len(), self.data_len()?, "int4 weight data"),
            Some((self.scales, "int4 weight scales")),
            self.bias,
        )
    }

    /// The signed value of weight `(n, k)`.
    pub fn value(&self, n: usize, k: usize) -> Result<i8> {
        check::value(self.validate(), n, k, self.n, self.k, || self.value_unchecked(n, k))
    }

    pub(crate) fn value_unchecked(&self, n: usize, k: usize) -> i8 {
        let (row, col, row_bytes) = match self.order {
            Order::NxK => (n, k, self.k.div_ceil(2)),
            Order::KxN => (k, n, self.n.div_ceil(2)),
        };
        let byte = self.data[row * row_bytes + col / 2];
        self.encoding.decode(if col % 2 == 0 { byte } else { byte >> 4 })
    }

    /// All weights as f32, `n x k`.
    pub fn dequantize(&self) -> Result<Vec<f32>> {
        self.validate()?;
        Ok(check::scaled(self.n, self.k, self.scales, |n, k| self.value_unchecked(n, k) as f32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int4_round_trip() {
        for e in [Int4Encoding::Signed, Int4Encoding::Offset8] {
            for v in -8i8..=7 {
                assert_eq!(e.decode(e.encode(v)), v);
            }
        }
    }

    #[test]
    fn int4_rejects_short_buffers() {
        let w = Int4PerChannel {
            n: 3,
            k: 5,
            order: Order::NxK,
            encoding: Int4Encoding::Signed,
            data: &[0; 8],
            scales: &[1.0; 3],
            bias: None,
        };
        assert!(matches!(w.validate(), Err(crate::Error::ByteLength { need: 9, .. })));
        let w = Int4PerChannel { n: usize::MAX, k: 4, data: &[], ..w };
        assert!(matches!(w.validate(), Err(crate::Error::Overflow(_))));
    }
}
