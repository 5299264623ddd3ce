//! `matmul_clamp_f32_qai8dxp_qsi4cxp`: `dst (f32, m x n) = clamp(lhs (f32,
//! m x k) · wᵀ + bias)` with int4 weights and one f32 scale per output channel
//! ([`Int4PerChannel`]). The LHS is quantised per row to int8 on the fly
//! (`qai8dx`, [`crate::quant::qai8dx_row`]); products accumulate exactly in
//! int32 and are scaled in f32.
//!
//! Kernels (13 upstream): NEON dotprod and i8mm GEMM/GEMV, SME and SME2 MOPA
//! GEMM and SDOT GEMV. Packing: LHS `kai_lhs_quant_pack_qai8dxp_f32` for all;
//! RHS `kai_rhs_pack_{nxk,kxn}_qsi4cxp_qs4cxs1s0` (packed format `qsi4cxp`),
//! except the SME2 kernels, which read `kai_rhs_pack_nxk_qsi4cxps1s0_qsu4cxs1s0_neon`
//! (format `qsi4cxps1s0`, N x K input only).
//!
//! Tolerance of the conformance test: the reference quantises the LHS with
//! the packer's exact arithmetic, so the int32 dot products are identical and
//! only the final f32 scaling (a few roundings, in another order) differs:
//! `|err| <= 1e-5 * (|want| + sum_k |x_k * w_k|)`.

use crate::error::Result;
use crate::families::float_common::check_reference_operands;
use crate::formats::Int4PerChannel;
use crate::packed::Clamp;
use crate::quant::qai8dx_row;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f32_qai8dxp_qsi4cxp";

/// The portable reference (test oracle and fallback): the family's math in
/// scalar Rust, with the LHS quantised exactly as the kernels' packer does.
///
/// ```
/// use kleidiai::families::matmul_clamp_f32_qai8dxp_qsi4cxp::reference;
/// use kleidiai::formats::{Int4Encoding, Int4PerChannel, Order};
/// use kleidiai::Clamp;
/// let w = Int4PerChannel { n: 1, k: 2, order: Order::NxK, encoding: Int4Encoding::Signed,
///                          data: &[0x21], scales: &[1.0], bias: Some(&[0.5]) }; // [1, 2]
/// let mut y = [0f32];
/// reference(1, &[1.0, 1.0], &w, Clamp::NONE, &mut y).unwrap();
/// assert!((y[0] - 3.5).abs() < 1e-6);
/// ```
pub fn reference(m: usize, lhs: &[f32], w: &Int4PerChannel<'_>, clamp: Clamp, dst: &mut [f32]) -> Result<()> {
    let (n, k) = check_reference_operands(w.validate().map(|()| (w.n, w.k)), clamp, m, lhs.len(), dst.len())?;
    let wq: Vec<i32> = (0..n * k).map(|i| w.value_unchecked(i / k, i % k) as i32).collect();
    for i in 0..m {
        let row = qai8dx_row(&lhs[i * k..(i + 1) * k]);
        for j in 0..n {
            let mut acc = 0i32;
            for p in 0..k {
                acc += (row.q[p] as i32 - row.zero_point) * wq[j * k + p];
            }
            let mut y = acc as f32 * row.recip_scale * w.scales[j];
            if let Some(b) = w.bias {
                y += b[j];
            }
            dst[i * n + j] = y.max(clamp.min).min(clamp.max);
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
    use crate::families::engine;
    use crate::families::qai8dxp_common::{Entry, RhsFormat, entries, f32_prepared, fns, kernel_methods};
    use crate::packed::{PackedLayout, PackedRhs};
    use kleidiai_sys::interfaces::matmul_clamp_f32_qai8dxp_qsi4cxp::KERNELS;

    entries!(KERNELS, |(u, i)| {
        // The SME2 kernels read the s1s0 layout of the NEON packer.
        let sme2 = u.features.contains(&CpuFeature::Sme2);
        let rhs = if sme2 { RhsFormat::Qsi4cxps1s0 } else { RhsFormat::Qsi4cxp };
        Entry::new::<f32>(u, fns!(i, F32), rhs, &[], false)
    });
    engine::kernel_type!(Entry);
    f32_prepared!(prepare_f32_qsi4cxp);
    kernel_methods!(lhs: f32, out: f32, pack_lhs_into: pack_lhs_f32_qsi4cxp, layout_first);

    impl Kernel {
        /// The packed-RHS layout this kernel reads for `n x k` weights.
        pub fn rhs_layout(&self, n: usize, k: usize) -> Result<PackedLayout> {
            self.0.rhs_layout(n, k)
        }

        /// Packs the weights for this kernel (and every kernel with the
        /// same [`rhs_layout`](Self::rhs_layout)).
        pub fn pack_rhs(&self, w: &Int4PerChannel<'_>) -> Result<PackedRhs> {
            self.0.pack_rhs_qsi4cxp(w)
        }
    }

    /// Weight row `row` of a packed RHS of this family, as f32
    /// (`value * scale`; bias not included): what ggml's `get_rows` needs.
    pub fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        crate::families::qai8dxp_common::unpack_qsi4cxp_row(rhs, row, out)
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;
    use crate::families::qai8dxp_common::RhsFormat;
    use crate::families::qai8dxp_common::tests::{across_threads, matmul_rejects, only_same_layout_runs, unpack_matches};
    use crate::formats::{Int4Encoding, Order};
    use crate::packed::PackedLhs;
    use crate::par::Parallelism;
    use crate::testing::{self, Rng, bit_identical, tail_shapes};

    fn weights(rng: &mut Rng, n: usize, k: usize, order: Order, enc: Int4Encoding) -> (Vec<u8>, Vec<f32>, Vec<f32>) {
        let len = match order {
            Order::NxK => n * k.div_ceil(2),
            Order::KxN => k * n.div_ceil(2),
        };
        let data = rng.bytes(len);
        let scales = (0..n).map(|_| 0.01 + 0.05 * (rng.f32() + 1.0)).collect();
        let bias = rng.vec_f32(n);
        let _ = enc;
        (data, scales, bias)
    }

    #[test]
    fn conformance() {
        testing::conformance(FAMILY, |info| {
            let kernel = Kernel::by_name(info.name).unwrap();
            let lay = kernel.rhs_layout(1, 32).map_err(|e| (0, e.to_string()))?;
            let lhs_lay = kernel.lhs_layout(1, 32).map_err(|e| (0, e.to_string()))?;
            let (mr, nr) = (lhs_lay.r, lay.r);
            // m_step and n_step of this family equal mr and nr.
            let shapes = tail_shapes(mr, mr, nr, nr, &[32, 33, 96]);
            let mut rng = Rng::new(0x51);
            let mut cases = 0;
            let mut worst = 0f64;
            for (ci, &(m, n, k)) in shapes.iter().enumerate() {
                let order = if lay.format == RhsFormat::Qsi4cxp.id() && ci % 2 == 1 { Order::KxN } else { Order::NxK };
                let enc = if ci % 3 == 0 { Int4Encoding::Offset8 } else { Int4Encoding::Signed };
                let (data, scales, bias) = weights(&mut rng, n, k, order, enc);
                let w = Int4PerChannel {
                    n,
                    k,
                    order,
                    encoding: enc,
                    data: &data,
                    scales: &scales,
                    bias: if ci % 4 == 3 { None } else { Some(&bias) },
                };
                let lhs = rng.vec_f32(m * k);
                let clamp = if ci % 5 == 4 { Clamp { min: -0.5, max: 0.5 } } else { Clamp::NONE };
                let mut want = vec![0f32; m * n];
                reference(m, &lhs, &w, clamp, &mut want).map_err(|e| (cases, e.to_string()))?;
                let wd = w.dequantize().unwrap();
                let packed = kernel.pack_rhs(&w).map_err(|e| (cases, e.to_string()))?;
                let tol = |i: usize, y: f32| {
                    let (r, c) = (i / n, i % n);
                    let mag: f32 = (0..k).map(|p| (lhs[r * k + p] * wd[c * k + p]).abs()).sum();
                    1e-5 * (y.abs() + mag) + 1e-6
                };
                let case_worst = across_threads(cases, (m, n, k), "", &want, tol, bit_identical, |par| {
                    let mut dst = vec![f32::NAN; m * n];
                    let mut scratch = PackedLhs::empty();
                    kernel.pack_lhs_into(m, k, &lhs, k, par, &mut scratch).map_err(|e| (cases, e.to_string()))?;
                    kernel.run(&scratch, &packed, &mut dst, clamp, par).map_err(|e| (cases, e.to_string()))?;
                    Ok(dst)
                })?;
                worst = worst.max(case_worst);
                // Row-unpack of the packed weights equals the dequantised ones.
                let unpack = |r, row: &mut [f32]| unpack_rhs_row(&packed, r, row);
                unpack_matches(cases, (n, k), &wd, " differs from the weights", unpack)?;
                cases += 1;
            }
            Ok((cases, worst))
        });
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let f = crate::cpu::Features::current();
        let k1 = crate::testing::or_skip!(Kernel::select(4, &f));
        let others: Vec<Kernel> = Kernel::all().filter(|k| k.info().supported(&f).is_ok()).collect();
        let (n, k) = (8, 64);
        let data = vec![0x11u8; n * k / 2];
        let scales = vec![1.0f32; n];
        let w = Int4PerChannel {
            n,
            k,
            order: Order::NxK,
            encoding: Int4Encoding::Signed,
            data: &data,
            scales: &scales,
            bias: None,
        };
        let packed = k1.pack_rhs(&w).unwrap();
        let lhs = vec![0.5f32; 2 * k];
        let seq = Parallelism::Sequential;
        let matmul = |o: &Kernel, dst: &mut [f32]| o.matmul(2, &lhs, &packed, dst, Clamp::NONE, seq);
        only_same_layout_runs(others, packed.layout(), 2 * n, matmul, |o| o.rhs_layout(n, k).unwrap());
        // A packed RHS of another k is rejected too.
        let lhs_p = k1.pack_lhs(2, k + 32, &vec![0.0; 2 * (k + 32)], k + 32, Parallelism::Sequential).unwrap();
        let mut dst = vec![0f32; 2 * n];
        assert!(k1.run(&lhs_p, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).is_err());
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let kern = crate::testing::or_skip!(Kernel::select(1, &f));
        let data = vec![0u8; 16];
        let w = Int4PerChannel {
            n: 4,
            k: 8,
            order: Order::NxK,
            encoding: Int4Encoding::Signed,
            data: &data,
            scales: &[1.0; 4],
            bias: None,
        };
        let packed = kern.pack_rhs(&w).unwrap();
        let seq = Parallelism::Sequential;
        matmul_rejects(&[0.0f32; 8], 4, true, |m, x, y: &mut [f32], c| kern.matmul(m, x, &packed, y, c, seq));
        let short = Int4PerChannel { data: &data[..15], ..w };
        assert!(kern.pack_rhs(&short).is_err());
        let huge = Int4PerChannel { n: usize::MAX / 2, ..w };
        assert!(kern.pack_rhs(&huge).is_err());
        assert!(kern.pack_lhs(usize::MAX, 8, &[0.0; 8], 8, seq).is_err(), "overflowing m");
    }
}
