//! `matmul_clamp_f32_f16p_qsi4c32p`: `dst (f32, m x n) = clamp(lhs (f32,
//! m x k) · wᵀ)` with block-quantised int4 weights ([`BlockInt4`], f16 block
//! scales; ggml's `Q4_0` for `bl = 32`) and the LHS in half precision:
//! `y = Σ_k h(x_k) · h(v_k · d_b)`, where `h` rounds to f16 (nearest, ties to
//! even). The kernel converts each nibble `v` to f16 through a lookup table,
//! multiplies it by its block scale `d_b` in f16 arithmetic (rounded), and
//! accumulates the f16 x f16 products in f32 (FMOPA into ZA). No bias.
//!
//! Kernel (1 upstream): SME2 MOPA GEMM `1vlx4vl` (ggml's SME2 `Q4_0` GEMM;
//! ggml pairs it with the SDOT GEMV of `matmul_clamp_f32_qsi8d32p_qsi4c32p`,
//! which reads the same packed weights). Packing (pairing of upstream's
//! `matmul_clamp_f32_f16p_qsi4c32p_test.cpp` and of ggml): LHS
//! `kai_lhs_pack_f16pmrx2_f32_neon` (f32 in, f16 out: needs FP16), RHS
//! `kai_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon` (format
//! `qsi4c32ps1s0scalef16`, ggml `Q4_0` bytes read in place).
//!
//! Tolerance of the conformance test: the reference reproduces both f16
//! roundings exactly and sums the products in f64; the kernel sums `k`
//! exact f32 products in f32, so `|err| <= k · 2^-24 · M` with
//! `M = Σ_k |h(x_k) h(v_k d_b)|` (the classic summation bound). The tests use
//! `k <= 128`, where that is below `1e-5 · M`: the check is
//! `1e-5 · (|want| + M) + 1e-6`.

use super::qsi8d32p_qsi4c32p::{SCALE_TYPE, check_weights_no_bias};
use crate::error::Result;
use crate::families::float_common::check_reference_operands;
use crate::formats::BlockInt4;
use crate::packed::Clamp;
use half::f16;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f32_f16p_qsi4c32p";

/// The weights as the kernel multiplies them: `h(v · d)` for each `(n, k)`,
/// `n x k`.
pub fn kernel_weights(w: &BlockInt4<'_>) -> Result<Vec<f16>> {
    let (n, k, bl) = check_weights_no_bias(w, FAMILY)?;
    let scales = w.scale_bits(SCALE_TYPE)?;
    let mut out = Vec::with_capacity(n * k);
    for i in 0..n {
        for p in 0..k {
            let d = f16::from_bits(scales[i * (k / bl) + p / bl]).to_f32();
            // v * d is exact in f32 (a 4-bit times an 11-bit significand).
            out.push(f16::from_f32(w.value(i, p) as f32 * d));
        }
    }
    Ok(out)
}

/// The portable reference (test oracle and fallback): the family's math in
/// scalar Rust, with the kernel's two f16 roundings.
///
/// ```
/// use kleidiai::families::matmul_clamp_f32_f16p_qsi4c32p::reference;
/// use kleidiai::formats::Q4_0;
/// use kleidiai::Clamp;
/// let mut block = [0xAAu8; 18]; // every value 10 - 8 = 2
/// block[..2].copy_from_slice(&half::f16::from_f32(0.25).to_bits().to_le_bytes());
/// let mut y = [0f32];
/// reference(1, &[1.0; 32], Q4_0 { n: 1, k: 32, data: &block, bias: None }, Clamp::NONE, &mut y).unwrap();
/// assert_eq!(y[0], 16.0);
/// ```
pub fn reference<'a>(m: usize, lhs: &[f32], w: impl Into<BlockInt4<'a>>, clamp: Clamp, dst: &mut [f32]) -> Result<()> {
    let w = w.into();
    let weights = check_weights_no_bias(&w, FAMILY).map(|(n, k, _)| (n, k));
    let (n, k) = check_reference_operands(weights, clamp, m, lhs.len(), dst.len())?;
    let wh = kernel_weights(&w)?;
    for i in 0..m {
        let x: Vec<f64> = lhs[i * k..(i + 1) * k].iter().map(|v| f16::from_f32(*v).to_f64()).collect();
        for j in 0..n {
            let y: f64 = x.iter().zip(&wh[j * k..(j + 1) * k]).map(|(a, b)| a * b.to_f64()).sum();
            dst[i * n + j] = (y as f32).max(clamp.min).min(clamp.max);
        }
    }
    Ok(())
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::cpu::CpuFeature;
    use crate::families::qsi8d32p_qsi4c32p::{FORMAT_PS1S0SCALEF16, LhsPacker, Q4Kernel, q4_kernel};
    use crate::packed::PackedRhs;
    use crate::registry::info::VectorLength;

    /// The kernel needs SME2; its LHS packer (f32 -> f16) needs FP16.
    const FEATURES: &[CpuFeature] = &[CpuFeature::Sme, CpuFeature::Sme2, CpuFeature::Fp16];

    q4_kernel! {
        interface: matmul_clamp_f32_f16p_qsi4c32p,
        fast: false,
        lhs_bl: [],
        /// Converts to f16 and packs an `m x k` f32 LHS (rows `lhs_stride`
        /// elements apart; `k` for a dense matrix). `k` must be a multiple
        /// of 32 (whole weight blocks).
        pack_lhs,
        entry: |u: &'static kleidiai_sys::Ukernel, fns| {
            let features = if u.features.contains(&CpuFeature::Fp16) { u.features } else { FEATURES };
            let spec = (features, VectorLength::Any);
            Q4Kernel::new(u, FAMILY, fns, spec, LhsPacker::F16, FORMAT_PS1S0SCALEF16, false)
        },
    }

    /// Weight row `row` of a packed RHS of this family (format
    /// `qsi4c32ps1s0scalef16`), as f32 (`value * f16 scale`; note the
    /// kernel itself multiplies in f16, see [`kernel_weights`]).
    pub fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        crate::families::qsi8d32p_qsi4c32p::unpack_rhs_row(rhs, row, out)
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;
    use crate::families::qsi8d32p_qsi4c32p::tests as shared;
    use crate::formats::Q4_0;
    use crate::par::Parallelism;
    use crate::testing::Rng;
    use crate::testing::qsi4c32::{TestWeights, magnitudes};

    #[test]
    fn conformance() {
        shared::conformance(FAMILY, 0xf16, |name| Kernel::by_name(name).map(|k| k.q4()), |_, m, lhs, w, clamp| {
            let (n, k) = (w.n(), w.k());
            let mut want = vec![0f32; m * n];
            reference(m, lhs, w, clamp, &mut want)?;
            let wh: Vec<f32> = kernel_weights(&w).unwrap().iter().map(|x| x.to_f32()).collect();
            let xh: Vec<f32> = lhs.iter().map(|x| f16::from_f32(*x).to_f32()).collect();
            Ok((want, magnitudes(m, n, k, &xh, &wh, |_| 0.0)))
        });
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let f = crate::cpu::Features::current();
        let kern = crate::testing::or_skip!(Kernel::select(8, &f));
        let mut rng = Rng::new(4);
        let tw = TestWeights::new(&mut rng, 8, 64, 32);
        let w = Q4_0 { n: 8, k: 64, data: &tw.q4_0, bias: None };
        let lhs = vec![0.25f32; 2 * 64];
        let mut dst = vec![0f32; 16];
        let p = kern.pack_rhs(w).unwrap();
        let short = kern.pack_lhs(2, 32, &lhs, 32, Parallelism::Sequential).unwrap();
        assert!(kern.run(&short, &p, &mut dst, Clamp::NONE, Parallelism::Sequential).is_err());
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let kern = crate::testing::or_skip!(Kernel::select(8, &f));
        let (q, seq) = (vec![0x88u8; 2 * 18], Parallelism::Sequential);
        let w = shared::bad_operands(kern.q4(), &q);
        let mut dst = vec![0f32; 2];
        assert!(kern.pack_rhs(Q4_0 { k: 64, ..w }).is_err(), "short data");
        assert!(kern.pack_lhs(1, 48, &[0.0; 48], 48, seq).is_err(), "k not a multiple of 32");
        assert!(kern.pack_lhs(usize::MAX, 32, &[0.0; 32], 32, seq).is_err(), "overflowing m");
        assert!(reference(1, &[0.0; 32], Q4_0 { bias: Some(&[0.0; 2]), ..w }, Clamp::NONE, &mut dst).is_err());
    }
}
