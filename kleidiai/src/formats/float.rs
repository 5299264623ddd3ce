//! Dense floating-point weights (f32, f16 or bf16) with an optional bias:
//! the input of the float and bf16 families.

use super::{Order, check};
use crate::error::Result;
use half::{bf16, f16};
use std::borrow::Cow;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A floating-point element type the kernels read and write: `f32`,
/// [`struct@f16`] or [`struct@bf16`].
pub trait FloatElement: Copy + Default + PartialEq + Send + Sync + core::fmt::Debug + 'static + sealed::Sealed {
    /// Zero.
    const ZERO: Self;
    /// Bytes per element.
    const BYTES: usize;
    /// The value as f64 (exact).
    fn to_f64(self) -> f64;
    /// The value as f32 (exact for all three types).
    fn to_f32(self) -> f32;
    /// The nearest element to `v` (round to nearest, ties to even).
    fn from_f64(v: f64) -> Self;
    /// The nearest element to `v` (round to nearest, ties to even).
    fn from_f32(v: f32) -> Self;
}

macro_rules! float_element {
    ($t:ty, $zero:expr, $bytes:expr, |$x:ident| $to64:expr, $to32:expr, |$v:ident| $from64:expr, |$w:ident| $from32:expr) => {
        impl FloatElement for $t {
            const ZERO: Self = $zero;
            const BYTES: usize = $bytes;
            fn to_f64(self) -> f64 {
                let $x = self;
                $to64
            }
            fn to_f32(self) -> f32 {
                let $x = self;
                $to32
            }
            fn from_f64($v: f64) -> Self {
                $from64
            }
            fn from_f32($w: f32) -> Self {
                $from32
            }
        }
    };
}

float_element!(f32, 0.0, 4, |x| x as f64, x, |v| v as f32, |w| w);
float_element!(f16, f16::ZERO, 2, |x| x.to_f64(), x.to_f32(), |v| f16::from_f64(v), |w| f16::from_f32(w));
float_element!(bf16, bf16::ZERO, 2, |x| x.to_f64(), x.to_f32(), |v| bf16::from_f64(v), |w| bf16::from_f32(w));

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
        let data = || check::dense(self.data.len(), self.n, self.k, "weights", "weight data");
        check::weights(self.n, self.k, data, None, self.bias)
    }

    check::dense_value!("Weight `(n, k)`.", T);

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

    /// All weights as f32, `n x k` (exact for every element type).
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

    #[test]
    fn orders_agree_dense() {
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
