//! Unsigned 8-bit matrices (weights of the `u8p` families).

use super::{Order, check};
use crate::error::Result;

/// A `u8` weight matrix of `n` output channels by `k` inputs, stored in
/// `order` (`n * k` bytes, rows dense).
///
/// ```
/// use kleidiai::formats::{Order, U8Weights};
/// let w = U8Weights { n: 2, k: 3, order: Order::KxN, data: &[1, 2, 3, 4, 5, 6] };
/// assert_eq!(w.value(1, 2).unwrap(), 6); // row k = 2, column n = 1
/// ```
#[derive(Clone, Copy, Debug)]
pub struct U8Weights<'a> {
    /// Output channels.
    pub n: usize,
    /// Inputs per channel.
    pub k: usize,
    /// Storage order of `data`.
    pub order: Order,
    /// `n * k` values.
    pub data: &'a [u8],
}

impl U8Weights<'_> {
    /// Checks dimensions and the data length.
    pub fn validate(&self) -> Result<()> {
        let data = || check::dense(self.data.len(), self.n, self.k, "u8 weights", "u8 weight data");
        check::weights::<u8>(self.n, self.k, data, None, None)
    }

    check::dense_value!("Weight `(n, k)`.", u8);
}
