//! Int8 weights with per-channel scales.

use super::{Order, check};
use crate::error::Result;

/// Int8 weights with one f32 scale per output channel (`qsi8cx`):
/// `w[n][k] = data(n, k) * scales[n]`. ggml's Q8_0 weights reach the
/// `qsi8cxp` kernels in this form after requantisation per row.
///
/// ```
/// use kleidiai::formats::{Int8PerChannel, Order};
/// // 2 channels x 3 inputs, stored K x N: columns [1, -2, 3] and [-128, 127, 0].
/// let data = [1, -128, -2, 127, 3, 0];
/// let w = Int8PerChannel { n: 2, k: 3, order: Order::KxN, data: &data, scales: &[0.5, 2.0], bias: None };
/// assert_eq!(w.value(1, 1).unwrap(), 127);
/// assert_eq!(w.dequantize().unwrap(), vec![0.5, -1.0, 1.5, -256.0, 254.0, 0.0]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Int8PerChannel<'a> {
    /// Output channels.
    pub n: usize,
    /// Inputs per channel.
    pub k: usize,
    /// Storage order of `data`.
    pub order: Order,
    /// `n * k` values, in `order`.
    pub data: &'a [i8],
    /// One scale per output channel.
    pub scales: &'a [f32],
    /// Optional bias per output channel.
    pub bias: Option<&'a [f32]>,
}

impl Int8PerChannel<'_> {
    /// Checks dimensions and lengths.
    pub fn validate(&self) -> Result<()> {
        check::weights(
            self.n,
            self.k,
            || check::dense(self.data.len(), self.n, self.k, "int8 weights", "int8 weight data"),
            Some((self.scales, "int8 weight scales")),
            self.bias,
        )
    }

    check::dense_value!("The value of weight `(n, k)`.", i8);

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
    fn int8_rejects_short_buffers() {
        let w = Int8PerChannel { n: 3, k: 5, order: Order::NxK, data: &[0; 14], scales: &[1.0; 3], bias: None };
        assert!(matches!(w.validate(), Err(crate::Error::BufferLength { need: 15, .. })));
        let w = Int8PerChannel { data: &[0; 15], bias: Some(&[0.0; 2]), ..w };
        assert!(matches!(w.validate(), Err(crate::Error::BufferLength { need: 3, .. })));
        let w = Int8PerChannel { n: usize::MAX, k: 4, data: &[], bias: None, ..w };
        assert!(matches!(w.validate(), Err(crate::Error::Overflow(_))));
    }
}
