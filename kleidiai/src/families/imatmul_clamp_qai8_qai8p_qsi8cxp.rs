//! `imatmul_clamp_qai8_qai8p_qsi8cxp`: quantised indirect matmul with int8
//! output. The LHS is int8, asymmetric with one zero point `zp` (static
//! quantisation: `x ≈ (q - zp) · s_x`), gathered through an [`Indirection`];
//! the weights are int8, symmetric, one f32 scale per output channel
//! (`w ≈ q_w · s_w[j]`), with an optional int32 bias in accumulator units
//! (`s_x · s_w[j]`); the output is int8 with zero point `zp_y` and scale
//! `s_y`. Per output, exactly as the kernels compute it:
//!
//! ```text
//! acc  = bias[j] + Σ_k (q[k] - zp) · q_w[k][j]          (int32, wrapping)
//! s'   = s_w[j] · scale_multiplier                      (f32; multiplier = s_x / s_y)
//! y    = round_half_even(f32(acc) · s')                 (f32 product, then FRINTN)
//! out  = clamp(sat_i32(y) + zp_y, min, max)             (FCVTZS saturates; int32 add wraps)
//! ```
//!
//! Kernels (2 upstream): `qai8p2vlx4_qsi8cxp2vlx4sb_2vlx2vl_sme_mopa` (SME)
//! and `qai8p2vlx4_qsi8cxpsb2vlx4_2vlx2vl_sme2_mopa` (SME2), `SMOPA` int8
//! outer products, tiles of `2·SVL/32 x 2·SVL/32`. Both read the same
//! packed operands: LHS packer `kai_lhs_imatmul_pack_x8p2vlx4_x8p_sme`
//! (format `x8p2vlx4-imatmul`: raw int8, each chunk padded with zeros to a
//! multiple of 4), RHS packer `kai_rhs_imatmul_pack_kxn_qsi8cxp2vlx4sb_qs8cx_f32_i32_sme`
//! (format `qsi8cxp2vlx4sb-imatmul`), which folds the LHS zero point into the
//! bias (`bias - zp · Σ_k q_w`) and the multiplier into the scales: a packed
//! RHS is therefore tied to the `zp` and `scale_multiplier` it was packed
//! with (the layout cannot record them: pass the same values to every LHS).
//! Padding chunks hold the [`Indirection::pad`] value; use `zp` for a real zero.
//!
//! Tolerance of the conformance test: none. The reference performs the same
//! integer accumulation (wrapping, which is order-independent), the same two
//! f32 roundings (the packer's `s_w · multiplier` and the kernel's product),
//! the same ties-to-even rounding and saturating conversion, so the int8
//! outputs must be identical.

use crate::error::{self, Result};
use crate::families::indirect::check_k;
use crate::formats::{Indirection, Order, check};

/// Upstream family directory.
pub const FAMILY: &str = "imatmul_clamp_qai8_qai8p_qsi8cxp";

/// Int8 weights, symmetric, one f32 scale per output channel (`qsi8cx`),
/// with an optional int32 bias per channel in accumulator units.
#[derive(Clone, Copy, Debug)]
pub struct Qsi8Weights<'a> {
    /// Output channels.
    pub n: usize,
    /// Inputs per channel.
    pub k: usize,
    /// Storage order of `data`.
    pub order: Order,
    /// `n * k` values.
    pub data: &'a [i8],
    /// One scale per output channel (finite).
    pub scales: &'a [f32],
    /// Optional bias per output channel.
    pub bias: Option<&'a [i32]>,
}

impl Qsi8Weights<'_> {
    /// Checks dimensions, lengths and that the scales are finite.
    pub fn validate(&self) -> Result<()> {
        let data = || check::dense(self.data.len(), self.n, self.k, "weights", "weight data");
        check::weights(self.n, self.k, data, Some((self.scales, "weight scales")), self.bias)?;
        if let Some(j) = self.scales[..self.n].iter().position(|s| !s.is_finite()) {
            return Err(crate::Error::bad_value(
                "weight scale",
                self.scales[j],
                format!("of channel {j} is not finite"),
            ));
        }
        Ok(())
    }

    fn value(&self, n: usize, k: usize) -> i8 {
        check::dense_at(self.data, self.order, self.n, self.k, n, k)
    }

    /// `k x n` (one row per input), borrowed when stored that way.
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    fn kxn(&self) -> std::borrow::Cow<'_, [i8]> {
        match self.order {
            Order::KxN => std::borrow::Cow::Borrowed(&self.data[..self.n * self.k]),
            Order::NxK => (0..self.k * self.n).map(|i| self.value(i % self.n, i / self.n)).collect(),
        }
    }
}

/// The quantisation the RHS packing folds in: the LHS zero point and
/// `scale_multiplier = s_x / s_y` (LHS scale over output scale).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LhsQuant {
    /// LHS zero point.
    pub zero_point: i32,
    /// LHS scale divided by the output scale (finite).
    pub scale_multiplier: f32,
}

/// The output stage: zero point and clamp bounds (`min <= max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputQuant {
    /// Output zero point.
    pub zero_point: i32,
    /// Lower bound of the int8 output.
    pub min: i8,
    /// Upper bound of the int8 output.
    pub max: i8,
}

impl LhsQuant {
    fn check(&self) -> Result<()> {
        if !self.scale_multiplier.is_finite() {
            return Err(crate::Error::bad_value("scale_multiplier", self.scale_multiplier, "not finite"));
        }
        Ok(())
    }
}

impl OutputQuant {
    fn check(&self) -> Result<()> {
        if self.min > self.max {
            return Err(crate::Error::bad_value("output range", format!("[{}, {}]", self.min, self.max), "empty"));
        }
        Ok(())
    }
}

/// One output, as the kernels compute it from the int32 accumulator (which
/// already holds the bias) and the packed scale `s_w · multiplier`.
pub(crate) fn requantize(acc: i32, packed_scale: f32, out: OutputQuant) -> i8 {
    let y = (acc as f32 * packed_scale).round_ties_even();
    // `as` saturates (NaN to 0), like FCVTZS.
    let q = (y as i32).wrapping_add(out.zero_point);
    q.min(out.max as i32).max(out.min as i32) as i8
}

/// The portable reference (test oracle and fallback): gathers the int8 LHS
/// through the indirection and computes the int8 output as the kernels do
/// (see the module docs); `dst` is `m x n`.
///
/// ```
/// use kleidiai::families::imatmul_clamp_qai8_qai8p_qsi8cxp::{reference, LhsQuant, OutputQuant, Qsi8Weights};
/// use kleidiai::formats::{Indirection, Order};
/// let src = [3i8, 5];
/// let lhs = Indirection { m: 1, k_chunk_count: 2, k_chunk_length: 1, src: &src, chunks: &[Some(0), Some(1)], pad: 1 };
/// let w = Qsi8Weights { n: 1, k: 2, order: Order::NxK, data: &[2, -1], scales: &[0.5], bias: Some(&[4]) };
/// let lq = LhsQuant { zero_point: 1, scale_multiplier: 2.0 };
/// let oq = OutputQuant { zero_point: -3, min: -128, max: 127 };
/// let mut y = [0i8];
/// // acc = 4 + (3-1)*2 + (5-1)*(-1) = 4; 4 * (0.5*2) = 4; 4 - 3 = 1.
/// reference(&lhs, &w, lq, oq, &mut y).unwrap();
/// assert_eq!(y[0], 1);
/// ```
pub fn reference(
    lhs: &Indirection<'_, i8>,
    w: &Qsi8Weights<'_>,
    lq: LhsQuant,
    oq: OutputQuant,
    dst: &mut [i8],
) -> Result<()> {
    lhs.validate()?;
    w.validate()?;
    lq.check()?;
    oq.check()?;
    let k = check_k(w.k, lhs.k_chunk_count, lhs.k_chunk_length)?;
    let (m, n) = (lhs.m, w.n);
    error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
    let x = lhs.gather()?;
    for j in 0..n {
        let scale = w.scales[j] * lq.scale_multiplier;
        let bias = w.bias.map_or(0, |b| b[j]);
        for i in 0..m {
            let mut acc = bias;
            for p in 0..k {
                let d = (x[i * k + p] as i32).wrapping_sub(lq.zero_point);
                acc = acc.wrapping_add(d.wrapping_mul(w.value(j, p) as i32));
            }
            dst[i * n + j] = requantize(acc, scale, oq);
        }
    }
    Ok(())
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::families::indirect::{self as ind, RhsSource, Stage, imatmul_kernel};
    use crate::packed::PackedRhs;
    use kleidiai_sys as sys;
    use std::borrow::Cow;
    use sys::interfaces::imatmul_clamp_qai8_qai8p_qsi8cxp::KERNELS;

    imatmul_kernel! {
        kernels: KERNELS, run: Requant, rhs: &ind::QSI8CXP2VLX4SB, lhs: Some(&ind::X8P2VLX4),
        packed: (i8, i8, oq: OutputQuant,
            /// The int8 output (see the module docs): `dst` is `m x n`, rows `n`
            /// apart.
        )
    }

    impl From<OutputQuant> for Stage {
        fn from(oq: OutputQuant) -> Stage {
            Stage::Requant(sys::kai_matmul_requantize32_params {
                min_value: oq.min as i32,
                max_value: oq.max as i32,
                output_zero_point: oq.zero_point,
            })
        }
    }

    impl Kernel {
        /// Packs the weights for LHS rows made of `k_chunk_count` chunks of
        /// `k_chunk_length` (their product must be `w.k`), folding in the
        /// LHS zero point and the scale multiplier.
        pub fn pack_rhs(
            &self,
            w: &Qsi8Weights<'_>,
            k_chunk_count: usize,
            k_chunk_length: usize,
            lq: LhsQuant,
        ) -> Result<PackedRhs> {
            w.validate()?;
            lq.check()?;
            self.0.pack_rhs((w.n, w.k), k_chunk_count, k_chunk_length, || RhsSource::Qsi8 {
                kxn: w.kxn(),
                bias: w.bias.map_or_else(|| Cow::Owned(vec![0i32; w.n]), |b| Cow::Borrowed(&b[..w.n])),
                scales: w.scales,
                params: sys::kai_rhs_pack_qsi8cx_params {
                    lhs_zero_point: lq.zero_point,
                    scale_multiplier: lq.scale_multiplier,
                },
            })
        }
    }

    /// Channel `row` of a packed RHS of this family: its `k` int8 weights
    /// and the scale stored with them (`s_w · scale_multiplier`).
    pub fn unpack_rhs_row_i8(rhs: &PackedRhs, row: usize, out: &mut [i8]) -> Result<f32> {
        let at = ind::unpack_rhs_row(&ind::QSI8CXP2VLX4SB, FAMILY, rhs, row, out, |b| b[0] as i8)?;
        let b = rhs.as_bytes();
        Ok(f32::from_le_bytes(b[at..at + 4].try_into().unwrap()))
    }

    /// Channel `row` of a packed RHS of this family as f32: each weight times
    /// the stored scale (`q_w · s_w · scale_multiplier`: weights in output
    /// units per LHS unit).
    pub fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        let k = rhs.layout().k;
        error::at_least(out.len(), k, "row output")?;
        let mut q = vec![0i8; k];
        let s = unpack_rhs_row_i8(rhs, row, &mut q)?;
        for (o, v) in out.iter_mut().zip(q) {
            *o = v as f32 * s;
        }
        Ok(())
    }
}

#[cfg(test)]
mod reference_tests {
    use super::*;

    #[test]
    fn requantize_matches_the_kernel_steps() {
        let o = OutputQuant { zero_point: 10, min: -128, max: 127 };
        assert_eq!(requantize(5, 0.5, o), 12, "2.5 rounds to even 2");
        assert_eq!(requantize(7, 0.5, o), 14, "3.5 rounds to even 4");
        let o0 = OutputQuant { zero_point: 0, ..o };
        assert_eq!(requantize(i32::MAX, 1e30, o0), 127, "saturates, then clamps");
        // As in the kernels, adding the zero point to a saturated value wraps.
        assert_eq!(requantize(i32::MAX, 1e30, o), -128);
        assert_eq!(requantize(-3, f32::NAN, o), 10, "NaN converts to 0");
        let narrow = OutputQuant { zero_point: 0, min: -5, max: 5 };
        assert_eq!(requantize(100, 1.0, narrow), 5);
        assert_eq!(requantize(-100, 1.0, narrow), -5);
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;
    use crate::families::indirect::test_support as ts;
    use crate::packed::PackedLhs;
    use crate::par::Parallelism;
    use crate::testing::{Rng, THREADS};

    fn i8s(rng: &mut Rng, n: usize) -> Vec<i8> {
        (0..n).map(|_| rng.next_u64() as i8).collect()
    }

    #[test]
    fn conformance() {
        // Chunk lengths not a multiple of 4 exercise the per-chunk padding.
        ts::conformance::<Kernel>(FAMILY, 0x9a18, |kernel, rng, c| {
            let (ci, m, n, kcc, kcl) = (c.ci, c.m, c.n, c.kcc, c.kcl);
            let k = kcc * kcl;
            let src = i8s(rng, m * k / 2 + kcl + 3);
            let table = ts::chunks(rng, m, kcc, kcl, src.len());
            let zp = rng.below(256) as i32 - 128;
            // Padding as a real zero (the zero point), or raw 0 as upstream tests.
            let pad = if ci % 2 == 0 { zp as i8 } else { 0 };
            let lhs = Indirection { m, k_chunk_count: kcc, k_chunk_length: kcl, src: &src, chunks: &table, pad };
            let order = if ci % 2 == 0 { Order::KxN } else { Order::NxK };
            let data = i8s(rng, n * k);
            let scales: Vec<f32> = (0..n).map(|_| 0.002 + 0.01 * (rng.f32() + 1.0)).collect();
            let bias_v: Vec<i32> = (0..n).map(|_| rng.below(20_001) as i32 - 10_000).collect();
            let bias = if ci % 4 == 3 { None } else { Some(&bias_v[..]) };
            let w = Qsi8Weights { n, k, order, data: &data, scales: &scales, bias };
            // Pick the multiplier so outputs span a bit more than int8.
            let amax = (k as f32).sqrt() * 128.0 * 74.0 * 0.022 + 10_000.0 * 0.022;
            let lq = LhsQuant { zero_point: zp, scale_multiplier: 2.0 * 160.0 / amax };
            let oq = if ci % 3 == 1 {
                OutputQuant { zero_point: rng.below(41) as i32 - 20, min: -100, max: 90 }
            } else {
                OutputQuant { zero_point: rng.below(41) as i32 - 20, min: -128, max: 127 }
            };
            let mut want = vec![0i8; m * n];
            reference(&lhs, &w, lq, oq, &mut want).map_err(|x| x.to_string())?;
            let packed = kernel.pack_rhs(&w, kcc, kcl, lq).map_err(|x| x.to_string())?;
            for threads in THREADS {
                let par = Parallelism::Rayon(threads);
                let mut dst = vec![0x55i8; m * n];
                let mut scratch = PackedLhs::empty();
                kernel.pack_lhs_into(&lhs, par, &mut scratch).map_err(|x| x.to_string())?;
                kernel.run(&scratch, &packed, &mut dst, oq, par).map_err(|x| x.to_string())?;
                crate::testing::hash_outputs(dst.iter().map(|v| *v as u8 as u32));
                if let Some(i) = (0..m * n).find(|&i| dst[i] != want[i]) {
                    return Err(format!(
                        "m={m} n={n} k={kcc}x{kcl} threads={threads}: element {i}: got {}, want {}",
                        dst[i], want[i]
                    ));
                }
            }
            let mut row = vec![0i8; k];
            for r in [0, n / 2, n - 1] {
                let s = unpack_rhs_row_i8(&packed, r, &mut row).map_err(|x| x.to_string())?;
                let expect: Vec<i8> = (0..k).map(|p| w.value(r, p)).collect();
                if row != expect || s != scales[r] * lq.scale_multiplier {
                    return Err(format!("unpack_rhs_row_i8({r}) n={n} k={kcc}x{kcl} differs"));
                }
            }
            Ok(0.0)
        });
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let f = crate::cpu::Features::current();
        let k1 = crate::testing::or_skip!(Kernel::select(4, &f));
        let (n, kcc, kcl) = (8, 2, 3);
        let data = vec![2i8; n * kcc * kcl];
        let scales = vec![1.0f32; n];
        let w = Qsi8Weights { n, k: kcc * kcl, order: Order::NxK, data: &data, scales: &scales, bias: None };
        let lq = LhsQuant { zero_point: 1, scale_multiplier: 0.5 };
        let packed = k1.pack_rhs(&w, kcc, kcl, lq).unwrap();
        let src = vec![3i8; 8];
        let chunks = [Some(0), Some(5), None, Some(2)];
        let lhs = Indirection { m: 2, k_chunk_count: kcc, k_chunk_length: kcl, src: &src, chunks: &chunks, pad: 1 };
        let oq = OutputQuant { zero_point: 0, min: -128, max: 127 };
        for other in Kernel::all().filter(|x| x.info().supported(&f).is_ok()) {
            let mut dst = vec![0i8; 2 * n];
            other.imatmul(&lhs, &packed, &mut dst, oq, Parallelism::Sequential).unwrap();
            // Row 0: 6 * (3-1) * 2 * 0.5 = 12; row 1: padding (zp) + 3 * 2 * 2 * 0.5 = 6.
            assert!(dst[..n].iter().all(|&y| y == 12) && dst[n..].iter().all(|&y| y == 6), "{dst:?}");
        }
        let p2 = k1.pack_rhs(&w, 3, 2, lq).unwrap();
        let mut dst = vec![0i8; 2 * n];
        let r = k1.imatmul(&lhs, &p2, &mut dst, oq, Parallelism::Sequential);
        assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{r:?}");
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let kern = crate::testing::or_skip!(Kernel::select(4, &f));
        let data = vec![0i8; 4 * 6];
        let scales = [1.0f32; 4];
        let w = Qsi8Weights { n: 4, k: 6, order: Order::NxK, data: &data, scales: &scales, bias: None };
        let lq = LhsQuant { zero_point: 0, scale_multiplier: 1.0 };
        assert!(kern.pack_rhs(&w, 4, 2, lq).is_err(), "k mismatch");
        assert!(kern.pack_rhs(&Qsi8Weights { scales: &scales[..3], ..w }, 2, 3, lq).is_err(), "short scales");
        let inf = [1.0, f32::INFINITY, 1.0, 1.0];
        assert!(kern.pack_rhs(&Qsi8Weights { scales: &inf, ..w }, 2, 3, lq).is_err(), "infinite scale");
        let nan = LhsQuant { zero_point: 0, scale_multiplier: f32::NAN };
        assert!(kern.pack_rhs(&w, 2, 3, nan).is_err(), "NaN multiplier");
        let packed = kern.pack_rhs(&w, 2, 3, lq).unwrap();
        let src = [0i8; 6];
        let ok = [Some(0), Some(3)];
        let lhs = Indirection { m: 1, k_chunk_count: 2, k_chunk_length: 3, src: &src, chunks: &ok, pad: 0 };
        let oq = OutputQuant { zero_point: 0, min: -1, max: 1 };
        let mut dst = vec![0i8; 4];
        let seq = Parallelism::Sequential;
        kern.imatmul(&lhs, &packed, &mut dst, oq, seq).unwrap();
        assert!(kern.imatmul(&lhs, &packed, &mut dst[..3], oq, seq).is_err(), "short dst");
        let empty = OutputQuant { min: 1, max: -1, ..oq };
        assert!(kern.imatmul(&lhs, &packed, &mut dst, empty, seq).is_err(), "empty range");
        let outside = [Some(0), Some(4)];
        assert!(kern.imatmul(&Indirection { chunks: &outside, ..lhs }, &packed, &mut dst, oq, seq).is_err());
        assert!(unpack_rhs_row_i8(&packed, 4, &mut [0i8; 6]).is_err(), "row out of range");
    }
}
