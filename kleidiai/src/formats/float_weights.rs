//! Dense floating-point weights (f32, f16 or bf16) with an optional bias.

use super::Order;
use crate::error::{self, Result};
use half::{bf16, f16};
use std::borrow::Cow;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A floating-point element type the kernels take (`f32`, [`struct@f16`], [`struct@bf16`]).
pub trait FloatElement: Copy + Send + Sync + PartialEq + core::fmt::Debug + sealed::Sealed + 'static {
    /// Zero.
    const ZERO: Self;
    /// The value as f32 (exact for all three types).
    fn to_f32(self) -> f32;
    /// The nearest value (round to nearest, ties to even).
    fn from_f32(v: f32) -> Self;
}

impl FloatElement for f32 {
    const ZERO: Self = 0.0;
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl FloatElement for f16 {
    const ZERO: Self = f16::ZERO;
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl FloatElement for bf16 {
    const ZERO: Self = bf16::ZERO;
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

/// Dense weights of `n` output channels by `k` inputs, `w[n][k]`, stored in
/// `order`, with an optional bias per output channel of the same type.
///
/// ```
/// use kleidiai::formats::{FloatWeights, Order};
/// // 2 channels x 3 inputs stored K x N: rows are inputs.
/// let data = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0];
/// let w = FloatWeights { n: 2, k: 3, order: Order::KxN, data: &data, bias: None };
/// assert_eq!(w.value(1, 2).unwrap(), 6.0);
/// assert_eq!(w.to_nxk().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct FloatWeights<'a, T> {
    /// Output channels.
    pub n: usize,
    /// Inputs per channel.
    pub k: usize,
    /// Storage order of `data`.
    pub order: Order,
    /// `n * k` values.
    pub data: &'a [T],
    /// Optional bias per output channel (`n` values).
    pub bias: Option<&'a [T]>,
}

impl<T: FloatElement> FloatWeights<'_, T> {
    /// Checks dimensions and lengths (an overflowing `n * k` is an error).
    pub fn validate(&self) -> Result<()> {
        error::nonzero(self.n, "n")?;
        error::nonzero(self.k, "k")?;
        error::at_least(self.data.len(), error::mul(self.n, self.k, "weights")?, "weight data")?;
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

    /// Bias of channel `n` as f32 (0 without bias).
    pub(crate) fn bias_f32(&self, n: usize) -> f32 {
        self.bias.map_or(0.0, |b| b[n].to_f32())
    }

    /// All weights, `n x k` (one row per output channel).
    pub fn to_nxk(&self) -> Result<Vec<T>> {
        self.validate()?;
        Ok(match self.order {
            Order::NxK => self.data[..self.n * self.k].to_vec(),
            Order::KxN => (0..self.n * self.k).map(|i| self.value_unchecked(i / self.k, i % self.k)).collect(),
        })
    }

    /// All weights, `k x n` (one row per input): what the K x N packers read.
    /// Borrows when already stored that way. Call after [`validate`](Self::validate).
    pub(crate) fn kxn(&self) -> Cow<'_, [T]> {
        match self.order {
            Order::KxN => Cow::Borrowed(&self.data[..self.n * self.k]),
            Order::NxK => {
                let mut out = Vec::with_capacity(self.n * self.k);
                for kk in 0..self.k {
                    out.extend((0..self.n).map(|nn| self.data[nn * self.k + kk]));
                }
                Cow::Owned(out)
            }
        }
    }

    /// The bias, `n` values (zeros without bias): for packers that need one.
    pub(crate) fn bias_or_zeros(&self) -> Cow<'_, [T]> {
        match self.bias {
            Some(b) => Cow::Borrowed(&b[..self.n]),
            None => Cow::Owned(vec![T::ZERO; self.n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_agree() {
        let data: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let a = FloatWeights { n: 3, k: 4, order: Order::NxK, data: &data, bias: None };
        let kxn = a.kxn().into_owned();
        let b = FloatWeights { n: 3, k: 4, order: Order::KxN, data: &kxn, bias: None };
        assert_eq!(a.to_nxk().unwrap(), b.to_nxk().unwrap());
        assert_eq!(b.kxn().as_ref(), &kxn[..]);
        assert_eq!(a.value(2, 1).unwrap(), 9.0);
        assert!(a.value(3, 0).is_err());
    }

    #[test]
    fn rejects_bad_shapes() {
        let w = FloatWeights { n: 2, k: 3, order: Order::NxK, data: &[0f32; 5], bias: None };
        assert!(matches!(w.validate(), Err(crate::Error::BufferLength { need: 6, .. })));
        let w = FloatWeights { n: 2, k: 3, order: Order::NxK, data: &[0f32; 6], bias: Some(&[0.0]) };
        assert!(w.validate().is_err());
        let w = FloatWeights { n: usize::MAX, k: 3, order: Order::NxK, data: &[0f32; 6], bias: None };
        assert!(matches!(w.validate(), Err(crate::Error::Overflow(_))));
        let w = FloatWeights { n: 0, k: 3, order: Order::NxK, data: &[0f32; 6], bias: None };
        assert!(w.validate().is_err());
    }
}
