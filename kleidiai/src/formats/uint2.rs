//! 2-bit weights with per-channel scales and a look-up table.

use super::check;
use crate::error::{self, Result};

/// 2-bit weight codes with one f32 scale per output channel and a table
/// mapping each code to an int8 value (`qsu2cx`):
/// `w[n][k] = lut[code(n, k)] * scales[n]`.
///
/// Stored N x K (one row per output channel), four codes per byte, the
/// first in the lowest two bits; a row takes `ceil(k / 4)` bytes.
///
/// ```
/// use kleidiai::formats::UInt2PerChannel;
/// // 1 channel x 4 inputs: codes 0, 1, 2, 3 = values -2, -1, 0, 1.
/// let w = UInt2PerChannel { n: 1, k: 4, data: &[0b11_10_01_00], scales: &[0.5], bias: None,
///                           lut: UInt2PerChannel::SIGNED_LUT };
/// assert_eq!(w.dequantize().unwrap(), vec![-1.0, -0.5, 0.0, 0.5]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct UInt2PerChannel<'a> {
    /// Output channels.
    pub n: usize,
    /// Inputs per channel.
    pub k: usize,
    /// `n * ceil(k / 4)` bytes of codes.
    pub data: &'a [u8],
    /// One scale per output channel.
    pub scales: &'a [f32],
    /// Optional bias per output channel.
    pub bias: Option<&'a [f32]>,
    /// The value of each code. Upstream's 2-bit packers add two entries in
    /// int8, so their kernels take entries in `-64..=63` only.
    pub lut: [i8; 4],
}

impl UInt2PerChannel<'_> {
    /// Codes as signed 2-bit values (`code - 2`): upstream's default table.
    pub const SIGNED_LUT: [i8; 4] = [-2, -1, 0, 1];

    /// Bytes `data` must hold.
    pub fn data_len(&self) -> Result<usize> {
        error::mul(self.n, self.k.div_ceil(4), "2-bit weights")
    }

    /// Checks dimensions and lengths.
    pub fn validate(&self) -> Result<()> {
        check::weights(
            self.n,
            self.k,
            || error::at_least_bytes(self.data.len(), self.data_len()?, "2-bit weight data"),
            Some((self.scales, "2-bit weight scales")),
            self.bias,
        )
    }

    /// The code (0..=3) of weight `(n, k)`.
    pub fn code(&self, n: usize, k: usize) -> Result<u8> {
        check::value(self.validate(), n, k, self.n, self.k, || self.code_unchecked(n, k))
    }

    pub(crate) fn code_unchecked(&self, n: usize, k: usize) -> u8 {
        (self.data[n * self.k.div_ceil(4) + k / 4] >> (2 * (k % 4))) & 3
    }

    /// All weights as f32, `n x k`.
    pub fn dequantize(&self) -> Result<Vec<f32>> {
        self.validate()?;
        Ok(check::scaled(self.n, self.k, self.scales, |n, k| self.lut[self.code_unchecked(n, k) as usize] as f32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uint2_codes_and_lengths() {
        let w = UInt2PerChannel {
            n: 2,
            k: 5,
            data: &[0b1110_0100, 0b01, 0b0001_1011, 0b10],
            scales: &[1.0, 1.0],
            bias: None,
            lut: [10, 20, 30, 40],
        };
        let codes: Vec<u8> = (0..5).map(|k| w.code(1, k).unwrap()).collect();
        assert_eq!(codes, [3, 2, 1, 0, 2]);
        assert_eq!(w.dequantize().unwrap()[..5], [10.0, 20.0, 30.0, 40.0, 20.0]);
        let short = UInt2PerChannel { data: &[0; 3], ..w };
        assert!(matches!(short.validate(), Err(crate::Error::ByteLength { need: 4, .. })));
        assert!(w.code(2, 0).is_err());
    }
}
