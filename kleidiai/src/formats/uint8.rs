//! Unsigned 8-bit matrices (weights of the `u8p` families).

use super::Order;
use crate::error::{self, Result};

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
        error::nonzero(self.n, "n")?;
        error::nonzero(self.k, "k")?;
        error::at_least(self.data.len(), error::mul(self.n, self.k, "u8 weights")?, "u8 weight data")
    }

    /// Weight `(n, k)`.
    pub fn value(&self, n: usize, k: usize) -> Result<u8> {
        self.validate()?;
        if n >= self.n || k >= self.k {
            return Err(crate::Error::bad_value(
                "index",
                format!("({n}, {k})"),
                format!("outside {}x{}", self.n, self.k),
            ));
        }
        Ok(self.value_unchecked(n, k))
    }

    pub(crate) fn value_unchecked(&self, n: usize, k: usize) -> u8 {
        match self.order {
            Order::NxK => self.data[n * self.k + k],
            Order::KxN => self.data[k * self.n + n],
        }
    }
}
