//! `matmul_clamp_f32_qai8dxp_qsi4c32p`: `dst (f32, m x n) = clamp(lhs (f32,
//! m x k) · wᵀ + bias)` with block-quantised int4 weights ([`BlockInt4`]:
//! blocks of `bl` values along K, `bl` a multiple of 32 dividing `k`, one
//! bf16 scale per block). The LHS is quantised per row to int8 on the fly
//! (`qai8dx`, [`crate::quant::qai8dx_row`]):
//! `y = r · Σ_b d_b Σ_{k∈b} (q_k − z) w_k + bias` with `r` the row's
//! reciprocal scale, `z` its zero point and `d_b` the bf16 block scales.
//! Block dot products are exact int32; the rest is f32.
//!
//! Kernels (13 upstream): NEON dotprod GEMV (`1x4`, `1x8`, `1x4x32`,
//! `1x8x32`) and GEMM (`16x4`, `4x8`), NEON i8mm GEMM (`16x4x32`, `8x4x32`,
//! `4x8`, `4x8x32`), SME2 MOPA GEMM and SME2 SDOT GEMV. Packing (pairings of
//! upstream's `matmul_clamp_qai8dxp_qsi4c32p_test.cpp`): LHS
//! `kai_lhs_quant_pack_qai8dxp_f32` for all; RHS format `qsi4c32p` for the
//! NEON kernels, packed from N x K by `kai_rhs_pack_nxk_qsi4c32pnrx4_qsu4c32s1s0_neon`
//! (`kr / sr = 4`) or `..._nrx8_...` (`kr / sr = 8`; the scalar
//! `kai_rhs_pack_nxk_qsi4c32p_qsu4c32s1s0` would serve any other `kr / sr`), and
//! from K x N by `kai_rhs_pack_kxn_qsi4c32p_qsu4c32s1s0`; RHS format
//! `qsi4c32ps1s0` for the SME2 kernels, packed by
//! `kai_rhs_pack_nxk_qsi4c32ps1s0nrx4_qsu4c32s1s0_neon` or (K x N input, on
//! CPUs with FP16 and BF16) `kai_rhs_pack_kxn_qsi4c32ps1s0nrx4_qsu4c32s1s0_neon`.
//! Every packer stores bf16 scales: f16 scales (ggml `Q4_0` input) are
//! rounded to bf16 first, and [`reference()`] does the same.
//!
//! Tolerance of the conformance test: the reference quantises the LHS with
//! the packer's exact arithmetic, so every int32 block dot product is the
//! kernel's; it then evaluates the scaling exactly (f64) and rounds once.
//! The kernel's f32 evaluation (block scale products, the per-channel sum
//! that removes the LHS zero point, the final scaling) differs by a few
//! roundings of terms bounded by `M = Σ_k (|x_k| + |z|·r) |w_k|`, hence
//! `|err| <= 1e-5 · (|want| + M) + 1e-6` (about 170 f32 ulps of `M`).

pub use super::qai8dxp_qsi4c32p::SCALE_TYPE;
use super::qai8dxp_qsi4c32p::{check_weights, reference_core};
use crate::error::Result;
use crate::families::float_common::check_reference_operands;
use crate::formats::BlockInt4;
use crate::packed::Clamp;
use crate::quant::qai8dx_row;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f32_qai8dxp_qsi4c32p";

/// The portable reference (test oracle and fallback): the family's math in
/// scalar Rust, with the LHS quantised exactly as the kernels' packer does
/// and the scales rounded to bf16 as the RHS packers store them.
///
/// ```
/// use half::bf16;
/// use kleidiai::families::matmul_clamp_f32_qai8dxp_qsi4c32p::reference;
/// use kleidiai::formats::{BlockScales, Int4Blocks, Int4Encoding, Order};
/// use kleidiai::Clamp;
/// let scales = [bf16::from_f32(0.5)];
/// let w = Int4Blocks { n: 1, k: 32, bl: 32, order: Order::NxK, encoding: Int4Encoding::Signed,
///                      data: &[0x11; 16], scales: BlockScales::Bf16(&scales), bias: None }; // all 1
/// let mut y = [0f32];
/// reference(1, &[1.0; 32], w, Clamp::NONE, &mut y).unwrap();
/// assert!((y[0] - 16.0).abs() < 1e-4);
/// ```
pub fn reference<'a>(m: usize, lhs: &[f32], w: impl Into<BlockInt4<'a>>, clamp: Clamp, dst: &mut [f32]) -> Result<()> {
    let w = w.into();
    let weights = check_weights(&w).map(|(n, k, _)| (n, k));
    let (n, k) = check_reference_operands(weights, clamp, m, lhs.len(), dst.len())?;
    reference_core(m, &w, clamp, |i| qai8dx_row(&lhs[i * k..(i + 1) * k]), |i, j, y| dst[i * n + j] = y)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::families::qai8dxp_common::{entries, f32_prepared};
    use crate::families::qai8dxp_qsi4c32p::{Entry, c32_fns, c32_kernel};
    use kleidiai_sys::interfaces::matmul_clamp_f32_qai8dxp_qsi4c32p::KERNELS;

    entries!(KERNELS, |(u, i)| Entry::f32_out(u, FAMILY, c32_fns!(i, F32)));
    c32_kernel!(lhs: f32, out: f32, pack_lhs_into: pack_lhs_f32, rhs_note: "");
    f32_prepared!(prepare_f32);
}

#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) mod tests {
    use super::*;
    use crate::formats::{Int4Blocks, Q4_0};
    use crate::par::Parallelism;
    use crate::families::qai8dxp_common::tests::{matmul_rejects, only_same_layout_runs};
    use crate::families::qai8dxp_qsi4c32p::{FORMAT_QSI4C32P, one_block_rows, pack_qsi4c32p_rhs, pack_scalar_nxk};
    use crate::testing::Rng;
    use crate::testing::qsi4c32::TestWeights;
    use half::bf16;

    crate::families::qai8dxp_qsi4c32p::c32_conformance! {
        elem: f32,
        seed: 0x4c32,
        quantise: qai8dx_row,
        step: |_: f32| 0.0,
        same: crate::testing::bit_identical,
    }

    /// The scalar N x K packer and the NEON ones write the same values,
    /// scales and bias (the float channel sums may differ in rounding).
    #[test]
    fn neon_and_scalar_packers_agree() {
        let mut rng = Rng::new(7);
        let (n, k, bl) = (9, 128, 64);
        let tw = TestWeights::new(&mut rng, n, k, bl);
        let w = tw.view(0, false, true);
        // The packers are plain C and NEON: the gate of any kernel that runs.
        let f = crate::cpu::Features::current();
        let info = crate::families::all_kernel_infos().into_iter().find(|i| i.supported(&f).is_ok());
        let g = crate::families::engine::gate_with(info.expect("a kernel runs on every aarch64 CPU"), &f).unwrap();
        for (nr, kr, sr) in [(4, 8, 2), (8, 16, 2)] {
            let layout =
                crate::packed::PackedLayout { format: FORMAT_QSI4C32P, rows: n, k, r: nr, kr, sr, bl, vector_bytes: 0 };
            let neon = pack_qsi4c32p_rhs(&g, layout, &w).unwrap();
            let scalar = pack_scalar_nxk(&g, layout, &w);
            let (a, b) = (neon.as_bytes(), &scalar[..]);
            assert_eq!(a.len(), b.len());
            let stride = (k / bl) * nr * (bl / 2 + 2) + nr * 8;
            let sums = (k / bl) * nr * (bl / 2 + 2);
            for g in 0..a.len() / stride {
                let (x, y) = (&a[g * stride..(g + 1) * stride], &b[g * stride..(g + 1) * stride]);
                assert_eq!(x[..sums], y[..sums], "values/scales, group {g}, nr {nr}");
                assert_eq!(x[sums + nr * 4..], y[sums + nr * 4..], "bias, group {g}");
                for c in 0..nr {
                    let f = |s: &[u8]| f32::from_le_bytes(s[sums + 4 * c..sums + 4 * c + 4].try_into().unwrap());
                    assert!((f(x) - f(y)).abs() <= 1e-5 * (1.0 + f(y).abs()), "sum {c}: {} vs {}", f(x), f(y));
                }
            }
            let mut row = vec![0f32; k];
            let wd = w.dequantize_as(SCALE_TYPE).unwrap();
            for r in 0..n {
                unpack_rhs_row(&neon, r, &mut row).unwrap();
                assert_eq!(row[..], wd[r * k..(r + 1) * k]);
            }
        }
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let f = crate::cpu::Features::current();
        let k1 = crate::testing::or_skip!(Kernel::select(4, &f));
        let mut rng = Rng::new(3);
        let (n, k) = (8, 64);
        let tw = TestWeights::new(&mut rng, n, k, 32);
        let w = tw.view(0, false, false);
        let packed = k1.pack_rhs(w).unwrap();
        let lhs = vec![0.5f32; 2 * k];
        let others = Kernel::all().filter(|k| k.info().supported(&f).is_ok());
        let seq = Parallelism::Sequential;
        let matmul = |o: &Kernel, dst: &mut [f32]| o.matmul(2, &lhs, &packed, dst, Clamp::NONE, seq);
        only_same_layout_runs(others, packed.layout(), 2 * n, matmul, |o| o.rhs_layout(n, k, 32).unwrap());
        // Another bl, or an LHS of another k, is rejected too.
        let tw64 = TestWeights::new(&mut rng, n, k, 64);
        let p64 = k1.pack_rhs(tw64.view(0, false, false)).unwrap();
        assert_ne!(p64.layout(), packed.layout());
        let lhs_p = k1.pack_lhs(2, k + 32, &vec![0.0; 2 * (k + 32)], k + 32, Parallelism::Sequential).unwrap();
        let mut dst = vec![0f32; 2 * n];
        assert!(k1.run(&lhs_p, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).is_err());
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let kern = crate::testing::or_skip!(Kernel::select(1, &f));
        let s = [bf16::ONE; 2];
        let data = vec![0u8; 32];
        let w = one_block_rows(&data, &s);
        let packed = kern.pack_rhs(w).unwrap();
        let seq = Parallelism::Sequential;
        matmul_rejects(&[0.0f32; 32], 2, true, |m, x, y: &mut [f32], c| kern.matmul(m, x, &packed, y, c, seq));
        assert!(kern.pack_rhs(Int4Blocks { data: &data[..15], ..w }).is_err(), "short data");
        assert!(kern.pack_rhs(Int4Blocks { k: 48, ..w }).is_err(), "k not whole blocks");
        assert!(kern.pack_rhs(Int4Blocks { n: 0, ..w }).is_err(), "n = 0");
        assert!(kern.pack_rhs(Int4Blocks { k: 0, ..w }).is_err(), "k = 0");
        assert!(kern.pack_rhs(Int4Blocks { bl: 16, k: 32, ..w }).is_err(), "bl not a multiple of 32");
        assert!(kern.pack_rhs(Int4Blocks { n: usize::MAX / 2, ..w }).is_err(), "overflow");
        assert!(kern.pack_rhs(Q4_0 { n: 2, k: 32, data: &[0; 35], bias: None }).is_err(), "short Q4_0");
        assert!(kern.pack_lhs(usize::MAX, 32, &[0.0; 32], 32, seq).is_err(), "overflowing m");
        assert!(reference(1, &[0.0; 32], w, Clamp::NONE, &mut []).is_err(), "reference: short dst");
    }
}
