//! The non-finite policy of [`PackedWeights::matmul`](super::PackedWeights::matmul):
//! propagate, the same on every kernel and the reference.
//!
//! Output element `y[i][j]` is NaN when row `i` of the activations holds a
//! NaN or an infinity, or when output channel `j`'s weights do (its `k`
//! values, its scales, block offsets and bias, whichever the format has).
//! Every other element is what the kernel computes from finite inputs.
//!
//! The kernels alone do not agree on this (quantising LHS packers turn a NaN
//! into plausible finite values, SME2 clamps give -3.4e38, NEON `fmla`
//! gives NaN, an infinity becomes 0.0 or ±3.4e38), so the policy is applied
//! around them: the weights are scanned once, when packed, and the
//! non-finite output channels recorded (usually none: then nothing is done
//! per call); the activations are scanned on every call (`m x k` values
//! against the kernel's `m x n x k` products), and only when a row or a
//! channel is non-finite are its outputs overwritten with NaN.

use super::{Activation, ActivationMut, WeightsRef};
use crate::formats::ggml_blocks::QK8_0;
use crate::formats::{FloatElement, Order, ScaleType};
use half::{bf16, f16};

/// A float type whose values are scanned for NaN and infinities.
pub(crate) trait Finite: Copy {
    /// NaN of this type.
    const NAN: Self;
    /// Whether every value of `v` is finite. Branch-free over the whole
    /// slice (the common case is that they all are): the values' bits with
    /// the sign shifted out, maximum taken, compared once with the smallest
    /// all-ones exponent. Vectorises to a shift and an unsigned maximum per
    /// vector of values.
    fn all_finite(v: &[Self]) -> bool;
    /// Whether this one value is finite.
    fn finite(self) -> bool;
}

impl Finite for f32 {
    const NAN: f32 = f32::NAN;
    /// On aarch64, first a fast filter: `acc = acc + x * y` per lane, over
    /// pairs of vectors of values. A NaN or an infinity among them makes the
    /// accumulator NaN or infinite for good (inf * 0 and inf - inf are NaN),
    /// so a finite accumulator proves every value finite; a non-finite one
    /// may also come from huge finite values whose products overflow, and
    /// then the exact test (the sign-free bits' maximum against the
    /// all-ones exponent) decides. In SVE where vectors are at least 256
    /// bits ([`fmla_filter_sve`](crate::arch::fmla_filter_sve)); otherwise NEON, 64 values a round: four
    /// four-register loads, 8 `fmla`, 2 loop instructions (14 per 64
    /// values), the tail exactly.
    fn all_finite(v: &[f32]) -> bool {
        #[cfg(target_arch = "aarch64")]
        {
            use crate::cpu::{CpuFeature, Features};
            let f = Features::current();
            if let Some(acc) = crate::arch::fmla_filter_sve(v, f.has(CpuFeature::Sve), f.has(CpuFeature::Sve2p1)) {
                if acc.is_finite() {
                    return true;
                }
            } else if crate::arch::fmla_filter_neon(v).is_finite() {
                return v[v.len() / 64 * 64..].iter().all(|x| x.is_finite());
            }
        }
        v.iter().fold(0u32, |a, x| a.max(x.to_bits() << 1)) < 0xFF00_0000
    }
    fn finite(self) -> bool {
        self.is_finite()
    }
}

/// [`Finite`] for a 16-bit float type `$t`: the exact test alone, with
/// `$inf` its sign-free bits of an infinity (the smallest all-ones exponent).
macro_rules! finite_16 {
    ($t:ty, $inf:literal) => {
        impl Finite for $t {
            const NAN: $t = <$t>::NAN;
            fn all_finite(v: &[$t]) -> bool {
                v.iter().fold(0u16, |a, x| a.max(x.to_bits() << 1)) < $inf
            }
            fn finite(self) -> bool {
                self.is_finite()
            }
        }
    };
}

finite_16!(f16, 0xF800);
finite_16!(bf16, 0xFF00);

/// Whether raw scale bits of type `ty` are finite.
fn scale_finite(ty: ScaleType, bits: u16) -> bool {
    match ty {
        ScaleType::F16 => f16::from_bits(bits).is_finite(),
        ScaleType::Bf16 => bf16::from_bits(bits).is_finite(),
    }
}

/// Marks in `bad` the channels whose optional `bias` value is not finite.
fn mark_bias<T: Finite>(bias: Option<&[T]>, bad: &mut [bool]) {
    if let Some(b) = bias {
        let n = bad.len();
        if !T::all_finite(&b[..n]) {
            for (j, v) in b[..n].iter().enumerate() {
                bad[j] |= !v.finite();
            }
        }
    }
}

/// Marks in `bad` the channels with a non-finite value in per-channel
/// parameters `p` (`n` rows of `per` values: scales, offsets).
fn mark_rows(p: &[f32], per: usize, bad: &mut [bool]) {
    let n = bad.len();
    if per == 0 || f32::all_finite(&p[..n * per]) {
        return;
    }
    for (j, row) in p[..n * per].chunks_exact(per).enumerate() {
        bad[j] |= !f32::all_finite(row);
    }
}

/// Marks the channels of dense float weights with a non-finite value.
fn mark_dense<T: Finite + FloatElement>(data: &[T], n: usize, k: usize, order: Order, bad: &mut [bool]) {
    let data = &data[..n * k];
    if T::all_finite(data) {
        return;
    }
    for (i, v) in data.iter().enumerate() {
        if !v.finite() {
            bad[if order == Order::NxK { i / k } else { i % n }] = true;
        }
    }
}

/// The output channels of validated weights `w` whose values, scales,
/// offsets or bias hold a NaN or an infinity, ascending. Integer values are
/// always finite; for ggml `Q8_0` the blocks' scales as given (before the
/// requantisation).
pub(crate) fn channels(w: &WeightsRef<'_>) -> Vec<usize> {
    let (n, k) = w.shape();
    let mut bad = vec![false; n];
    match w {
        WeightsRef::F32(f) => {
            mark_dense(f.data, n, k, f.order, &mut bad);
            mark_bias(f.bias, &mut bad);
        }
        WeightsRef::F16(f) => {
            mark_dense(f.data, n, k, f.order, &mut bad);
            mark_bias(f.bias, &mut bad);
        }
        WeightsRef::Bf16(f) => {
            mark_dense(f.data, n, k, f.order, &mut bad);
            mark_bias(f.bias, &mut bad);
        }
        WeightsRef::Int8PerChannel(q) => {
            mark_rows(q.scales, 1, &mut bad);
            mark_bias(q.bias, &mut bad);
        }
        WeightsRef::Int4PerChannel(q) => {
            mark_rows(q.scales, 1, &mut bad);
            mark_bias(q.bias, &mut bad);
        }
        WeightsRef::Int4Block(b) => {
            let (ty, blocks) = (b.scale_type(), b.blocks());
            for (j, bad) in bad.iter_mut().enumerate() {
                *bad = (0..blocks).any(|i| !scale_finite(ty, b.native_scale_bits(j, i)));
            }
            mark_bias(b.bias(), &mut bad);
        }
        WeightsRef::Int4AsymBlock(a) => {
            mark_rows(a.scales, a.blocks_per_row(), &mut bad);
            mark_rows(a.offsets, a.blocks_per_row(), &mut bad);
            mark_bias(a.bias, &mut bad);
        }
        WeightsRef::GgmlQ8_0 { blocks, .. } => {
            let per = k / QK8_0;
            for (j, bad) in bad.iter_mut().enumerate() {
                *bad = blocks[j * per..(j + 1) * per].iter().any(|b| !b.d.is_finite());
            }
        }
    }
    bad.iter().enumerate().filter(|(_, b)| **b).map(|(j, _)| j).collect()
}

/// The rows of `x` (`m` rows of `k`) holding a NaN or an infinity, when
/// there is one (None, after one branch-free scan, in the common case).
fn bad_rows_of<T: Finite>(x: &[T], m: usize, k: usize) -> Option<Vec<usize>> {
    let x = x.get(..m.checked_mul(k)?)?;
    if T::all_finite(x) {
        return None;
    }
    Some(x.chunks_exact(k).enumerate().filter(|(_, r)| !T::all_finite(r)).map(|(i, _)| i).collect())
}

/// The rows of `x` (`m` rows of `k`) that hold a NaN or an infinity; None
/// when there is none (or `x` is too short: the matmul reports that).
pub(crate) fn bad_rows(m: usize, k: usize, x: &Activation<'_>) -> Option<Vec<usize>> {
    match x {
        Activation::F32(x) => bad_rows_of(x, m, k),
        Activation::F16(x) => bad_rows_of(x, m, k),
        Activation::Bf16(x) => bad_rows_of(x, m, k),
    }
}

/// Whether the first `m x k` values of `x` (which holds at least that
/// many) are all finite.
#[inline(always)]
pub(crate) fn all_finite(m: usize, k: usize, x: &Activation<'_>) -> bool {
    match x {
        Activation::F32(x) => x.get(..m * k).is_some_and(f32::all_finite),
        Activation::F16(x) => x.get(..m * k).is_some_and(f16::all_finite),
        Activation::Bf16(x) => x.get(..m * k).is_some_and(bf16::all_finite),
    }
}

/// The index in row `i` (of `k` values) of its first NaN or infinity.
pub(crate) fn first_in_row(x: &Activation<'_>, i: usize, k: usize) -> Option<usize> {
    let r = i * k..(i + 1) * k;
    match x {
        Activation::F32(x) => x.get(r)?.iter().position(|v| !v.finite()),
        Activation::F16(x) => x.get(r)?.iter().position(|v| !v.finite()),
        Activation::Bf16(x) => x.get(r)?.iter().position(|v| !v.finite()),
    }
}

/// A copy of activations with some rows zeroed.
pub(crate) enum Zeroed {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
}

impl Zeroed {
    /// `x` (at least `m x k`, [`bad_rows`] checked) with `rows` set to zero:
    /// what the kernels compute on instead (the zeroed rows' outputs are
    /// then overwritten). Kernels differ on non-finite rows, and some
    /// packers refuse them.
    pub(crate) fn new(x: &Activation<'_>, m: usize, k: usize, rows: &[usize]) -> Zeroed {
        fn zero<T: Copy + Default>(x: &[T], mk: usize, k: usize, rows: &[usize]) -> Vec<T> {
            let mut v = x[..mk].to_vec();
            for &i in rows {
                v[i * k..(i + 1) * k].fill(T::default());
            }
            v
        }
        match x {
            Activation::F32(x) => Zeroed::F32(zero(x, m * k, k, rows)),
            Activation::F16(x) => Zeroed::F16(zero(x, m * k, k, rows)),
            Activation::Bf16(x) => Zeroed::Bf16(zero(x, m * k, k, rows)),
        }
    }

    pub(crate) fn as_activation(&self) -> Activation<'_> {
        match self {
            Zeroed::F32(v) => Activation::F32(v),
            Zeroed::F16(v) => Activation::F16(v),
            Zeroed::Bf16(v) => Activation::Bf16(v),
        }
    }
}

/// Writes NaN to `y` (`m` rows of `n`) in rows `rows` and columns `cols`.
fn fill_of<T: Finite>(y: &mut [T], n: usize, m: usize, rows: &[usize], cols: &[usize]) {
    for &i in rows {
        y[i * n..(i + 1) * n].fill(T::NAN);
    }
    if !cols.is_empty() {
        for row in y[..m * n].chunks_exact_mut(n) {
            for &j in cols {
                row[j] = T::NAN;
            }
        }
    }
}

/// Finishes a matmul under the policy: NaN in rows `rows` and columns
/// `cols` of `y` (`m x n`, checked by the matmul: a no-op, not a panic, if
/// ever shorter).
pub(crate) fn fill(m: usize, n: usize, y: &mut ActivationMut<'_>, rows: &[usize], cols: &[usize]) {
    let Some(mn) = m.checked_mul(n) else { return };
    if y.len() < mn || rows.last().is_some_and(|&i| i >= m) || cols.last().is_some_and(|&j| j >= n) {
        return;
    }
    match y {
        ActivationMut::F32(y) => fill_of(y, n, m, rows, cols),
        ActivationMut::F16(y) => fill_of(y, n, m, rows, cols),
        ActivationMut::Bf16(y) => fill_of(y, n, m, rows, cols),
    }
}

#[cfg(test)]
mod tests;
