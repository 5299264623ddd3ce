//! Weights of statically quantised int8 matmuls (`qai8` in, `qai8` out):
//! symmetric int8 or int4 per output channel, with an int32 bias in the
//! accumulator domain.

use super::{Int4Encoding, Int4PerChannel, Order, check};
use crate::error::Result;

/// `n`, `k`, scales and bias (before the data, unlike the other formats).
fn check_common(n: usize, k: usize, scales: &[f32], bias: Option<&[i32]>) -> Result<()> {
    check::weights(n, k, || Ok(()), Some((scales, "weight scales")), bias)
}

/// Int8 weights with one f32 scale per output channel and an optional int32
/// bias per channel, in units of `lhs_scale * scales[n]` (the accumulator's):
/// `w[n][k] = data(n, k) * scales[n]`.
///
/// ```
/// use kleidiai::formats::{Order, StaticInt8Weights};
/// let w = StaticInt8Weights { n: 2, k: 2, order: Order::KxN, data: &[1, 2, -3, 4], scales: &[0.5, 0.25], bias: None };
/// assert_eq!(w.value(1, 0).unwrap(), 2);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct StaticInt8Weights<'a> {
    /// Output channels.
    pub n: usize,
    /// Inputs per channel.
    pub k: usize,
    /// Storage order of `data`.
    pub order: Order,
    /// `n * k` values.
    pub data: &'a [i8],
    /// One scale per output channel.
    pub scales: &'a [f32],
    /// Optional int32 bias per output channel (accumulator units).
    pub bias: Option<&'a [i32]>,
}

impl StaticInt8Weights<'_> {
    /// Checks dimensions and lengths.
    pub fn validate(&self) -> Result<()> {
        check_common(self.n, self.k, self.scales, self.bias)?;
        check::dense(self.data.len(), self.n, self.k, "int8 weights", "int8 weight data")
    }

    check::dense_value!("Weight `(n, k)` (quantised).", i8);
}

/// Int4 weights with one f32 scale per output channel and an optional int32
/// bias per channel (accumulator units); the data is laid out as
/// [`Int4PerChannel`]'s (two values per byte, low nibble first, rows padded
/// to whole bytes).
#[derive(Clone, Copy, Debug)]
pub struct StaticInt4Weights<'a> {
    /// Output channels.
    pub n: usize,
    /// Inputs per channel.
    pub k: usize,
    /// Storage order of `data`.
    pub order: Order,
    /// Nibble encoding.
    pub encoding: Int4Encoding,
    /// `n * ceil(k / 2)` bytes (N x K) or `k * ceil(n / 2)` (K x N).
    pub data: &'a [u8],
    /// One scale per output channel.
    pub scales: &'a [f32],
    /// Optional int32 bias per output channel (accumulator units).
    pub bias: Option<&'a [i32]>,
}

impl<'a> StaticInt4Weights<'a> {
    fn nibbles(&self) -> Int4PerChannel<'a> {
        Int4PerChannel {
            n: self.n,
            k: self.k,
            order: self.order,
            encoding: self.encoding,
            data: self.data,
            scales: self.scales,
            bias: None,
        }
    }

    /// Checks dimensions and lengths.
    pub fn validate(&self) -> Result<()> {
        check_common(self.n, self.k, self.scales, self.bias)?;
        self.nibbles().validate()
    }

    /// Weight `(n, k)` (quantised, decoded).
    pub fn value(&self, n: usize, k: usize) -> Result<i8> {
        self.nibbles().value(n, k)
    }

    pub(crate) fn value_unchecked(&self, n: usize, k: usize) -> i8 {
        self.nibbles().value_unchecked(n, k)
    }
}
