//! The oracles: a naive f64 matmul with an error bound per output, and the
//! comparisons of outputs against it and bit for bit.

use super::*;

/// `y = clamp(x · wᵀ + bias)` in f64 from dense `w` (n x k), with a bound
/// per output of the error on-the-fly quantisation may cause.
pub(super) fn naive(
    m: usize,
    n: usize,
    k: usize,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    c: Clamp,
) -> Vec<(f32, f32)> {
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        let row = &x[i * k..(i + 1) * k];
        let xmax = row.iter().fold(0f32, |a, v| a.max(v.abs()));
        for j in 0..n {
            let wr = &w[j * k..(j + 1) * k];
            let dot: f64 = row.iter().zip(wr).map(|(a, b)| *a as f64 * *b as f64).sum();
            let wsum: f32 = wr.iter().map(|v| v.abs()).sum();
            let wmax = wr.iter().fold(0f32, |a, v| a.max(v.abs()));
            let b = bias.map_or(0.0, |b| b[j] as f64);
            let y = ((dot + b) as f32).max(c.min).min(c.max);
            // int8 LHS (per row or per block): error <= max|x| / 127 a value;
            // bf16/f16 rounding of both sides: 2^-8 relative; Q8_0
            // requantisation: max|w| / 127 a value.
            let tol = 0.02 * xmax * (wsum + k as f32 * wmax / 64.0) + 1e-3 + y.abs() / 64.0;
            out.push((y, tol));
        }
    }
    out
}

pub(super) fn check_close(what: &str, got: &[f32], want: &[(f32, f32)]) {
    for (i, (g, (w, tol))) in got.iter().zip(want).enumerate() {
        if w.abs() > 30000.0 && g.is_infinite() {
            continue; // beyond the f16 range (f16 outputs): infinity is right
        }
        assert!((g - w).abs() <= *tol, "{what}: output {i} is {g}, the naive matmul says {w} (tolerance {tol})");
    }
}

pub(super) fn same_bits<T: Copy + PartialEq + core::fmt::Debug>(what: &str, a: &[T], b: &[T], bits: impl Fn(T) -> u32) {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(bits(*x) == bits(*y), "{what}: output {i} is {x:?}, the family reference says {y:?}");
    }
}

pub(super) fn to_nxk(data: &[f32], n: usize, k: usize, o: Order) -> Vec<f32> {
    match o {
        Order::NxK => data[..n * k].to_vec(),
        Order::KxN => (0..n * k).map(|i| data[(i % k) * n + i / k]).collect(),
    }
}

/// `PackedWeights::matmul`'s non-finite policy: output `i * n + j` is NaN
/// when activation row `i` (`x`, as the call saw it) or output channel `j`
/// (`channels`) holds a NaN or an infinity.
pub(super) fn policy_nan(m: usize, n: usize, k: usize, x: &[f32], channels: &[usize]) -> Vec<bool> {
    let rows: Vec<bool> = (0..m).map(|i| x[i * k..(i + 1) * k].iter().any(|v| !v.is_finite())).collect();
    let mut cols = vec![false; n];
    for &j in channels {
        cols[j] = true;
    }
    (0..m * n).map(|e| rows[e / n] || cols[e % n]).collect()
}

/// Checks NaN wherever `nan` says, and returns the outputs the policy
/// leaves to the kernel (`got` and `want` at the other positions).
pub(super) fn outside_policy<W: Copy>(what: &str, got: &[f32], want: &[W], nan: &[bool]) -> (Vec<f32>, Vec<W>) {
    for (i, g) in got.iter().enumerate() {
        assert!(!nan[i] || g.is_nan(), "{what}: output {i} is {g} where a non-finite input makes NaN");
    }
    let keep = |i: &usize| !nan[*i];
    ((0..got.len()).filter(keep).map(|i| got[i]).collect(), (0..got.len()).filter(keep).map(|i| want[i]).collect())
}
