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
use crate::formats::{FloatElement, Order, ScaleType};
use crate::ggml::QK8_0;
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
    /// all-ones exponent) decides. One `fmla` per 8 values and one `ldp`
    /// per 8: 19 instructions per 64 values, loop included.
    fn all_finite(v: &[f32]) -> bool {
        #[cfg(target_arch = "aarch64")]
        {
            use core::arch::aarch64::{vaddq_f32, vdupq_n_f32, vfmaq_f32, vgetq_lane_f32, vld1q_f32_x4};
            let chunks = v.chunks_exact(64);
            let tail = chunks.remainder();
            // SAFETY: NEON is part of the aarch64 baseline (every target
            // this crate builds for has it); each load reads 16 f32 values
            // inside one 64-value chunk of `v`.
            let acc = unsafe {
                let zero = vdupq_n_f32(0.0);
                let (mut a, mut b, mut c, mut d) = (zero, zero, zero, zero);
                for ch in chunks {
                    let p = ch.as_ptr();
                    let (x, y) = (vld1q_f32_x4(p), vld1q_f32_x4(p.add(16)));
                    let (z, w) = (vld1q_f32_x4(p.add(32)), vld1q_f32_x4(p.add(48)));
                    a = vfmaq_f32(vfmaq_f32(a, x.0, x.1), z.0, z.1);
                    b = vfmaq_f32(vfmaq_f32(b, x.2, x.3), z.2, z.3);
                    c = vfmaq_f32(vfmaq_f32(c, y.0, y.1), w.0, w.1);
                    d = vfmaq_f32(vfmaq_f32(d, y.2, y.3), w.2, w.3);
                }
                let s = vaddq_f32(vaddq_f32(a, b), vaddq_f32(c, d));
                vgetq_lane_f32::<0>(s) + vgetq_lane_f32::<1>(s) + vgetq_lane_f32::<2>(s) + vgetq_lane_f32::<3>(s)
            };
            if acc.is_finite() {
                return tail.iter().all(|x| x.is_finite());
            }
        }
        v.iter().fold(0u32, |a, x| a.max(x.to_bits() << 1)) < 0xFF00_0000
    }
    fn finite(self) -> bool {
        self.is_finite()
    }
}

impl Finite for f16 {
    const NAN: f16 = f16::NAN;
    fn all_finite(v: &[f16]) -> bool {
        v.iter().fold(0u16, |a, x| a.max(x.to_bits() << 1)) < 0xF800
    }
    fn finite(self) -> bool {
        self.is_finite()
    }
}

impl Finite for bf16 {
    const NAN: bf16 = bf16::NAN;
    fn all_finite(v: &[bf16]) -> bool {
        v.iter().fold(0u16, |a, x| a.max(x.to_bits() << 1)) < 0xFF00
    }
    fn finite(self) -> bool {
        self.is_finite()
    }
}

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
mod tests {
    use super::*;

    #[test]
    fn scans_find_every_non_finite_value_and_nothing_else() {
        let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -f32::NAN];
        let finite = [0.0, -0.0, 1.0, f32::MAX, f32::MIN, f32::MIN_POSITIVE, 1e-45, -1e-45];
        for len in [1, 3, 4, 7, 8, 17, 64, 65, 127, 128, 200] {
            let clean: Vec<f32> = (0..len).map(|i| finite[i % finite.len()]).collect();
            assert!(f32::all_finite(&clean));
            let h: Vec<f16> = clean.iter().map(|v| f16::from_f32(v.clamp(-65504.0, 65504.0))).collect();
            let b: Vec<bf16> = clean.iter().map(|v| bf16::from_bits((v.to_bits() >> 16) as u16)).collect();
            assert!(f16::all_finite(&h) && bf16::all_finite(&b));
            assert!(f16::all_finite(&[f16::MAX, f16::MIN]) && bf16::all_finite(&[bf16::MAX, bf16::MIN]));
            // Products that overflow (the fast filter's false alarm) are finite values.
            assert!(f32::all_finite(&vec![f32::MAX; len * 64]), "f32::MAX x {}", len * 64);
            for at in [0, len / 2, len - 1] {
                for s in specials {
                    let mut v = clean.clone();
                    v[at] = s;
                    assert!(!f32::all_finite(&v), "{s} at {at} of {len}");
                    let mut vh = h.clone();
                    vh[at] = f16::from_f32(s);
                    assert!(!f16::all_finite(&vh), "f16 {s} at {at} of {len}");
                    let mut vb = b.clone();
                    vb[at] = bf16::from_f32(s);
                    assert!(!bf16::all_finite(&vb), "bf16 {s} at {at} of {len}");
                }
            }
        }
    }

    #[test]
    fn rows_and_columns_are_filled_exactly() {
        let (m, n, k) = (3, 4, 5);
        let mut x = vec![1.0f32; m * k];
        x[k + 2] = f32::INFINITY;
        let mut y = vec![2.0f32; m * n];
        let rows = bad_rows(m, k, &Activation::F32(&x)).unwrap();
        assert_eq!(rows, [1]);
        assert!(bad_rows(m, k, &Activation::F32(&[1.0; 15])).is_none());
        assert!(bad_rows(m, k, &Activation::F32(&x[..14])).is_none(), "too short: the matmul's error");
        fill(m, n, &mut ActivationMut::F32(&mut y), &rows, &[3]);
        for i in 0..m {
            for j in 0..n {
                assert_eq!(y[i * n + j].is_nan(), i == 1 || j == 3, "({i}, {j})");
            }
        }
    }

    use super::super::{DType, NonFinite, PackOptions, PackedWeights, Scratch, operation_exists};
    use crate::formats::{BlockInt4, BlockScales, FloatWeights, Int4AsymBlock, Int4Blocks, Int4Encoding};
    use crate::formats::{Int4PerChannel, Int8PerChannel, NibbleOrder, Q4_0};
    use crate::ggml::BlockQ8_0;
    use crate::{Clamp, Parallelism};

    const N: usize = 20;
    const K: usize = 64;
    /// The output channel the weight injections hit (in the second tile of
    /// kernels with 16 columns and in the first of the others).
    const J: usize = 17;
    const SPECIALS: [f32; 3] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
    /// Every weight constructor of the activation table.
    const NAMES: [&str; 9] = [
        "f32",
        "f16",
        "bf16",
        "int8_per_channel",
        "q8_0",
        "int4_per_channel",
        "int4_blocks",
        "q4_0",
        "int4_asym_blocks",
    ];

    /// Where in the weights a value goes.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Site {
        /// The dense value, or the scale of quantised weights.
        Value,
        /// The block offset (asymmetric int4).
        Offset,
        Bias,
    }

    /// Unpacked inputs of every format, finite until injected.
    #[derive(Clone)]
    struct Data {
        f: Vec<f32>,
        h: Vec<f16>,
        b: Vec<bf16>,
        i8s: Vec<i8>,
        nib: Vec<u8>,
        s: Vec<f32>,
        hs: Vec<f16>,
        off: Vec<f32>,
        q4: Vec<u8>,
        q8: Vec<BlockQ8_0>,
        bias: Vec<f32>,
        bias_h: Vec<f16>,
        bias_b: Vec<bf16>,
    }

    impl Data {
        fn new() -> Data {
            let f: Vec<f32> = (0..N * K).map(|i| ((i * 5 % 9) as f32 - 4.0) * 0.125).collect();
            let q4 = crate::ggml::quantize_q4_0(&f, K).unwrap();
            let bias: Vec<f32> = (0..N).map(|j| j as f32 * 0.25 - 2.0).collect();
            Data {
                h: f.iter().map(|v| f16::from_f32(*v)).collect(),
                b: f.iter().map(|v| bf16::from_f32(*v)).collect(),
                i8s: (0..N * K).map(|i| (i % 7) as i8 - 3).collect(),
                nib: (0..N * K / 2).map(|i| (i * 37 % 251) as u8).collect(),
                s: (0..N * K / 32).map(|i| 0.125 + (i % 3) as f32 * 0.0625).collect(),
                hs: (0..N * K / 32).map(|i| f16::from_f32(0.125 + (i % 3) as f32 * 0.0625)).collect(),
                off: (0..N * K / 32).map(|i| (i % 5) as f32 * 0.25 - 0.5).collect(),
                q4: crate::ggml::q4_0_as_bytes(&q4).to_vec(),
                q8: crate::ggml::quantize_q8_0(&f, K).unwrap(),
                bias_h: bias.iter().map(|v| f16::from_f32(*v)).collect(),
                bias_b: bias.iter().map(|v| bf16::from_f32(*v)).collect(),
                bias,
                f,
            }
        }

        /// Puts `v` at `site` of output channel `J` of weights `name`;
        /// false when the format has no such site.
        fn inject(&mut self, name: &str, site: Site, v: f32) -> bool {
            let block = J * (K / 32) + 1; // the second block of channel J
            match (site, name) {
                (Site::Value, "f32") => self.f[J * K + 7] = v,
                (Site::Value, "f16") => self.h[J * K + 7] = f16::from_f32(v),
                (Site::Value, "bf16") => self.b[J * K + 7] = bf16::from_f32(v),
                (Site::Value, "int8_per_channel" | "int4_per_channel") => self.s[J] = v,
                (Site::Value, "int4_blocks") => self.hs[block] = f16::from_f32(v),
                (Site::Value, "q4_0") => {
                    self.q4[block * 18..block * 18 + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes())
                }
                (Site::Value, "q8_0") => self.q8[block].d = f16::from_f32(v),
                (Site::Value, "int4_asym_blocks") => self.s[block] = v,
                (Site::Offset, "int4_asym_blocks") => self.off[block] = v,
                (Site::Bias, "q8_0") | (Site::Offset, _) => return false,
                (Site::Bias, _) => {
                    self.bias[J] = v;
                    self.bias_h[J] = f16::from_f32(v);
                    self.bias_b[J] = bf16::from_f32(v);
                }
                (_, other) => panic!("unknown weights {other}"),
            }
            true
        }

        fn weights(&self, name: &str, bias: bool) -> WeightsRef<'_> {
            let (n, k, order) = (N, K, Order::NxK);
            let b32 = bias.then_some(&self.bias[..]);
            let (encoding, nibbles) = (Int4Encoding::Signed, NibbleOrder::LowFirst);
            match name {
                "f32" => WeightsRef::F32(FloatWeights { n, k, order, data: &self.f, bias: b32 }),
                "f16" => {
                    WeightsRef::F16(FloatWeights { n, k, order, data: &self.h, bias: bias.then_some(&self.bias_h) })
                }
                "bf16" => {
                    WeightsRef::Bf16(FloatWeights { n, k, order, data: &self.b, bias: bias.then_some(&self.bias_b) })
                }
                "int8_per_channel" => WeightsRef::Int8PerChannel(Int8PerChannel {
                    n,
                    k,
                    order,
                    data: &self.i8s,
                    scales: &self.s,
                    bias: b32,
                }),
                "q8_0" => WeightsRef::GgmlQ8_0 { n, k, blocks: &self.q8 },
                "int4_per_channel" => WeightsRef::Int4PerChannel(Int4PerChannel {
                    n,
                    k,
                    order,
                    encoding,
                    data: &self.nib,
                    scales: &self.s,
                    bias: b32,
                }),
                "int4_blocks" => WeightsRef::Int4Block(BlockInt4::Blocks(Int4Blocks {
                    n,
                    k,
                    bl: 32,
                    order,
                    encoding,
                    data: &self.nib,
                    scales: BlockScales::F16(&self.hs),
                    bias: b32,
                })),
                "q4_0" => WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: &self.q4, bias: b32 })),
                "int4_asym_blocks" => WeightsRef::Int4AsymBlock(Int4AsymBlock {
                    n,
                    k,
                    bl: 32,
                    encoding,
                    nibbles,
                    data: &self.nib,
                    scales: &self.s,
                    offsets: &self.off,
                    bias: b32,
                }),
                other => panic!("unknown weights {other}"),
            }
        }
    }

    /// `m` rows of `w · x` with activations and outputs of `act` (given and
    /// returned as f32, exactly), under the default policy.
    fn run(w: &PackedWeights, act: DType, m: usize, x: &[f32]) -> Vec<f32> {
        try_run(w, act, m, x).unwrap()
    }

    /// `run` under `policy`.
    fn run_with(w: &mut PackedWeights, policy: NonFinite, act: DType, m: usize, x: &[f32]) -> crate::Result<Vec<f32>> {
        w.set_non_finite(policy);
        let r = try_run(w, act, m, x);
        w.set_non_finite(NonFinite::Propagate);
        r
    }

    fn try_run(w: &PackedWeights, act: DType, m: usize, x: &[f32]) -> crate::Result<Vec<f32>> {
        let s = &mut Scratch::default();
        let (c, p) = (Clamp::NONE, Parallelism::Sequential);
        let go = |x: Activation<'_>, y: ActivationMut<'_>, s: &mut Scratch| w.matmul(m, x, y, c, p, s);
        match act {
            DType::F32 => {
                let mut y = vec![0f32; m * N];
                go(Activation::F32(x), ActivationMut::F32(&mut y), s)?;
                Ok(y)
            }
            DType::F16 => {
                let x: Vec<f16> = x.iter().map(|v| f16::from_f32(*v)).collect();
                let mut y = vec![f16::ZERO; m * N];
                go(Activation::F16(&x), ActivationMut::F16(&mut y), s)?;
                Ok(y.iter().map(|v| v.to_f32()).collect())
            }
            DType::Bf16 => {
                let x: Vec<bf16> = x.iter().map(|v| bf16::from_f32(*v)).collect();
                let mut y = vec![bf16::ZERO; m * N];
                go(Activation::Bf16(&x), ActivationMut::Bf16(&mut y), s)?;
                Ok(y.iter().map(|v| v.to_f32()).collect())
            }
        }
    }

    /// Checks `got` against the clean run `want`: NaN exactly where
    /// `nan(row, column)`, the clean bits everywhere else.
    fn check(got: &[f32], want: &[f32], nan: impl Fn(usize, usize) -> bool) -> std::result::Result<(), String> {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let (row, col) = (i / N, i % N);
            let ok = if nan(row, col) { g.is_nan() } else { g.to_bits() == w.to_bits() };
            if !ok {
                return Err(format!(
                    "y[{row}][{col}] = {g}, want {}",
                    if nan(row, col) { "NaN".into() } else { w.to_string() }
                ));
            }
        }
        Ok(())
    }

    /// What the kernel alone made of the special values, as the table
    /// shows it.
    fn shown(v: f32) -> String {
        if v.is_nan() {
            "NaN".into()
        } else if v.abs() >= 1e30 {
            format!("{v:.1e}")
        } else {
            format!("{v:.3}")
        }
    }

    /// The policy on every weight kind x activation type the high-level API
    /// takes, with the kernels this CPU selects (GEMV for one row, GEMM for
    /// three; the reference where none runs): NaN, +inf and -inf in an
    /// activation make that row NaN and leave the others bit-identical; in a
    /// weight value or scale, a block offset or a bias they make that output
    /// channel NaN in every row and leave the others bit-identical, also
    /// after a save and a load. Records (and prints) what each kernel alone
    /// gives, the table `xtask test` shows per CPU model.
    #[test]
    fn non_finite_inputs_give_nan_on_every_kernel() {
        let mut failures = Vec::new();
        let mut cases = 0;
        for name in NAMES {
            let clean = Data::new();
            for act in [DType::F32, DType::F16, DType::Bf16] {
                if !operation_exists(clean.weights(name, false).kind(), act) {
                    continue;
                }
                let opts = PackOptions { activation: act, ..PackOptions::default() };
                for bias in [false, true] {
                    if bias && name == "q8_0" {
                        continue; // ggml Q8_0 carries no bias
                    }
                    let mut packed = PackedWeights::pack(&clean.weights(name, bias), &opts).unwrap();
                    assert!(packed.non_finite_channels.is_empty(), "{name}: finite weights recorded as not");
                    let sites: &[Site] = if bias { &[Site::Bias] } else { &[Site::Value, Site::Offset] };
                    for m in [1usize, 3] {
                        let kernel = packed.kernel_for(m).unwrap_or("reference");
                        let x: Vec<f32> = (0..m * K).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.0625).collect();
                        let want = run(&packed, act, m, &x);
                        assert!(want.iter().all(|v| v.is_finite()), "{name} {act:?} m={m}: clean outputs");
                        let record = |input: &str, raw: Vec<String>| {
                            crate::testing::record(serde_json::json!({
                                "kind": "nonfinite", "weights": name, "act": act.name(), "bias": bias, "m": m,
                                "kernel": kernel, "input": input, "raw": raw, "result": "NaN",
                            }));
                        };
                        let mut raws = Vec::new();
                        if !bias {
                            // The last row's activations.
                            for v in SPECIALS {
                                let mut xs = x.clone();
                                xs[(m - 1) * K + 5] = v;
                                let got = run(&packed, act, m, &xs);
                                cases += 1;
                                if let Err(e) = check(&got, &want, |row, _| row == m - 1) {
                                    failures.push(format!("{name} {act:?} m={m} {kernel}: x {v}: {e}"));
                                }
                                raws.push(
                                    run_with(&mut packed, NonFinite::Kernel, act, m, &xs)
                                        .map_or("Err".into(), |y| shown(y[(m - 1) * N])),
                                );
                                // NonFinite::Error names the row and the value.
                                let e = run_with(&mut packed, NonFinite::Error, act, m, &xs).unwrap_err();
                                let want_e =
                                    crate::Error::NonFinite { what: "activation row", index: m - 1, at: Some(5) };
                                assert_eq!(e, want_e, "{name} {act:?} m={m} x {v}");
                            }
                            record("x", std::mem::take(&mut raws));
                        }
                        for &site in sites {
                            for v in SPECIALS {
                                let mut d = clean.clone();
                                if !d.inject(name, site, v) {
                                    continue;
                                }
                                let w = d.weights(name, bias);
                                let mut p = PackedWeights::pack(&w, &opts).unwrap();
                                assert_eq!(p.non_finite_channels, [J], "{name} {site:?} {v}: recorded channels");
                                let got = run(&p, act, m, &x);
                                cases += 1;
                                if let Err(e) = check(&got, &want, |_, col| col == J) {
                                    failures.push(format!("{name} {act:?} m={m} {kernel}: {site:?} {v}: {e}"));
                                }
                                raws.push(
                                    run_with(&mut p, NonFinite::Kernel, act, m, &x)
                                        .map_or("Err".into(), |y| shown(y[J])),
                                );
                                // NonFinite::Error names the channel.
                                let e = run_with(&mut p, NonFinite::Error, act, m, &x).unwrap_err();
                                let want_e = crate::Error::NonFinite { what: "output channel", index: J, at: None };
                                assert_eq!(e, want_e, "{name} {site:?} {v}");
                                // The channels survive a save and a load.
                                if let Ok(bytes) = p.to_bytes() {
                                    let back = PackedWeights::from_bytes(&bytes).unwrap();
                                    assert_eq!(back.non_finite_channels, [J], "{name} {site:?}: loaded channels");
                                    let again = run(&back, act, m, &x);
                                    cases += 1;
                                    if let Err(e) = check(&again, &want, |_, col| col == J) {
                                        failures
                                            .push(format!("{name} {act:?} m={m} {kernel}: loaded, {site:?} {v}: {e}"));
                                    }
                                }
                            }
                            if !raws.is_empty() {
                                let input = match site {
                                    Site::Value if name.starts_with('f') || name.starts_with('b') => "weight",
                                    Site::Value => "scale",
                                    Site::Offset => "offset",
                                    Site::Bias => "bias",
                                };
                                record(input, std::mem::take(&mut raws));
                            }
                        }
                    }
                }
            }
        }
        println!("non-finite policy: {cases} cases, {} failed", failures.len());
        assert!(failures.is_empty(), "{} of {cases} cases:\n{}", failures.len(), failures.join("\n"));
        assert!(cases >= 13 * 2 * 3 * 3, "every kind x activation x row count x special ran ({cases})");
    }
}
