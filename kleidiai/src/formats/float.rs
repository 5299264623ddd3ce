//! Dense floating-point weights (f32 or f16) with an optional bias: the
//! input of the float matmul families (`matmul_clamp_f32_f32_f32p`,
//! `matmul_clamp_f16_f16_f16p`, and their packed-LHS siblings).

use super::Order;
use crate::error::{self, Result};
use half::f16;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
}

/// A floating-point element type the float families read and write:
/// `f32` or [`half::f16`].
pub trait FloatElement: Copy + Default + PartialEq + Send + Sync + core::fmt::Debug + 'static + sealed::Sealed {
    /// Bytes per element.
    const BYTES: usize;
    /// The value as f64 (exact).
    fn to_f64(self) -> f64;
    /// The value as f32 (exact).
    fn to_f32(self) -> f32;
    /// The nearest element to `v` (round to nearest, ties to even).
    fn from_f64(v: f64) -> Self;
}

impl FloatElement for f32 {
    const BYTES: usize = 4;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl FloatElement for f16 {
    const BYTES: usize = 2;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn to_f32(self) -> f32 {
        self.to_f32()
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
}

/// A dense `n x k` weight matrix of `n` output channels by `k` inputs, stored
/// in `order`, with an optional bias per output channel (same element type).
///
/// ```
/// use kleidiai::formats::{FloatWeights, Order};
/// // 2 channels x 3 inputs, stored K x N (one row per input).
/// let data = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0];
/// let w = FloatWeights { n: 2, k: 3, order: Order::KxN, data: &data, bias: None };
/// assert_eq!(w.value(1, 2).unwrap(), 6.0);
/// assert_eq!(w.to_f32_nxk().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct FloatWeights<'a, T> {
    /// Output channels.
    pub n: usize,
    /// Inputs per channel.
    pub k: usize,
    /// Storage order of `data`.
    pub order: Order,
    /// `n * k` values, rows of `k` (N x K) or rows of `n` (K x N).
    pub data: &'a [T],
    /// Optional bias, one per output channel.
    pub bias: Option<&'a [T]>,
}

impl<T: FloatElement> FloatWeights<'_, T> {
    /// Checks the dimensions are non-zero and the buffers long enough.
    pub fn validate(&self) -> Result<()> {
        error::nonzero(self.n, "n")?;
        error::nonzero(self.k, "k")?;
        error::at_least(self.data.len(), error::mul(self.n, self.k, "weights")?, "weight data")?;
        error::mul(self.n * self.k, T::BYTES, "weight bytes")?;
        if let Some(b) = self.bias {
            error::at_least(b.len(), self.n, "bias")?;
        }
        Ok(())
    }

    /// Weight `(n, k)`.
    pub fn value(&self, n: usize, k: usize) -> Result<T> {
        self.validate()?;
        if n >= self.n || k >= self.k {
            return Err(crate::Error::InvalidArgument(format!("index ({n}, {k}) outside {}x{}", self.n, self.k)));
        }
        Ok(self.value_unchecked(n, k))
    }

    pub(crate) fn value_unchecked(&self, n: usize, k: usize) -> T {
        match self.order {
            Order::NxK => self.data[n * self.k + k],
            Order::KxN => self.data[k * self.n + n],
        }
    }

    /// All weights as f32, `n x k` (exact for both element types).
    pub fn to_f32_nxk(&self) -> Result<Vec<f32>> {
        self.validate()?;
        Ok((0..self.n * self.k).map(|i| self.value_unchecked(i / self.k, i % self.k).to_f32()).collect())
    }

    /// The weights copied into `order` (dense).
    pub(crate) fn data_in(&self, order: Order) -> Vec<T> {
        match order {
            Order::NxK => (0..self.n * self.k).map(|i| self.value_unchecked(i / self.k, i % self.k)).collect(),
            Order::KxN => (0..self.n * self.k).map(|i| self.value_unchecked(i % self.n, i / self.n)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_agree() {
        let nxk = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let a = FloatWeights { n: 2, k: 3, order: Order::NxK, data: &nxk, bias: None };
        let kxn = a.data_in(Order::KxN);
        assert_eq!(kxn, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let b = FloatWeights { order: Order::KxN, data: &kxn, ..a };
        assert_eq!(a.to_f32_nxk().unwrap(), b.to_f32_nxk().unwrap());
        assert_eq!(b.data_in(Order::NxK), nxk.to_vec());
    }

    #[test]
    fn rejects_bad_buffers() {
        let d = [f16::ZERO; 5];
        let w = FloatWeights { n: 2, k: 3, order: Order::NxK, data: &d, bias: None };
        assert!(matches!(w.validate(), Err(crate::Error::BufferLength { need: 6, .. })));
        let w = FloatWeights { n: usize::MAX, k: 2, data: &[], ..w };
        assert!(matches!(w.validate(), Err(crate::Error::Overflow(_))));
        let d6 = [f16::ONE; 6];
        let w = FloatWeights { n: 2, k: 3, order: Order::NxK, data: &d6, bias: Some(&d6[..1]) };
        assert!(w.validate().is_err());
        assert!(FloatWeights { n: 0, ..w }.validate().is_err());
        assert!(w.value(2, 0).is_err());
    }
}
