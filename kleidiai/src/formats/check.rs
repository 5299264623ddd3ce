//! The checks the unpacked weight formats share, each written once, and the
//! element look-up of a dense matrix. Every format's `validate` and `value`
//! call these, so the errors (variants, messages and the order of the
//! checks) are the same wherever a check applies.

use super::Order;
use crate::error::{self, Result};

/// The checks of a weight matrix of `n` output channels by `k` inputs, in
/// this order: `n`, then `k`, non-zero; then `data`, the format's own check
/// of its data length; then, when the format has them, `scales.0` holds a
/// scale per channel (else a [`crate::Error::BufferLength`] naming
/// `scales.1`); then the bias, if any, holds a value per channel.
pub(crate) fn weights<B>(
    n: usize,
    k: usize,
    data: impl FnOnce() -> Result<()>,
    scales: Option<(&[f32], &'static str)>,
    bias: Option<&[B]>,
) -> Result<()> {
    error::nonzero(n, "n")?;
    error::nonzero(k, "k")?;
    data()?;
    if let Some((s, what)) = scales {
        error::at_least(s.len(), n, what)?;
    }
    if let Some(b) = bias {
        error::at_least(b.len(), n, "bias")?;
    }
    Ok(())
}

/// A dense `n x k` buffer of `len` elements: `n * k` must not overflow (an
/// [`crate::Error::Overflow`] naming `what`) and `len` must reach it (a
/// [`crate::Error::BufferLength`] naming `data_what`).
pub(crate) fn dense(len: usize, n: usize, k: usize, what: &str, data_what: &'static str) -> Result<()> {
    error::at_least(len, error::mul(n, k, what)?, data_what)
}

/// Weight `(n, k)` must lie inside a matrix of `rows` output channels by
/// `cols` inputs.
pub(crate) fn index(n: usize, k: usize, rows: usize, cols: usize) -> Result<()> {
    if n >= rows || k >= cols {
        return Err(crate::Error::bad_value("index", format!("({n}, {k})"), format!("outside {rows}x{cols}")));
    }
    Ok(())
}

/// Weight `(n, k)` of a dense matrix of `rows` output channels by `cols`
/// inputs stored in `order` (indices unchecked: validate first).
pub(crate) fn dense_at<T: Copy>(data: &[T], order: Order, rows: usize, cols: usize, n: usize, k: usize) -> T {
    match order {
        Order::NxK => data[n * cols + k],
        Order::KxN => data[k * rows + n],
    }
}

/// Weight `(n, k)` read by `at`, once `valid` (the format's `validate()`)
/// is `Ok` and `(n, k)` lies inside `rows x cols`: the checked accessors.
pub(crate) fn value<T>(
    valid: Result<()>,
    n: usize,
    k: usize,
    rows: usize,
    cols: usize,
    at: impl FnOnce() -> T,
) -> Result<T> {
    valid?;
    index(n, k, rows, cols)?;
    Ok(at())
}

/// All `rows x cols` weights as f32, one row per output channel:
/// `value(n, k) * scales[n]` (the per-channel formats' `dequantize`, once
/// validated).
pub(crate) fn scaled(rows: usize, cols: usize, scales: &[f32], value: impl Fn(usize, usize) -> f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows * cols);
    for (n, &scale) in scales[..rows].iter().enumerate() {
        for k in 0..cols {
            out.push(value(n, k) * scale);
        }
    }
    out
}

/// The accessors of a format whose `data` is a dense `n x k` matrix stored in
/// `order`: `value` (checked, documented by `$doc`) and `value_unchecked`,
/// both returning `$elem`. Used inside the format's `impl` block.
macro_rules! dense_value {
    ($doc:literal, $elem:ty) => {
        #[doc = $doc]
        pub fn value(&self, n: usize, k: usize) -> Result<$elem> {
            check::value(self.validate(), n, k, self.n, self.k, || self.value_unchecked(n, k))
        }

        pub(crate) fn value_unchecked(&self, n: usize, k: usize) -> $elem {
            check::dense_at(self.data, self.order, self.n, self.k, n, k)
        }
    };
}
pub(crate) use dense_value;
