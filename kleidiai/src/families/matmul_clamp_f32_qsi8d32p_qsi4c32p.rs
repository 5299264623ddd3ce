//! `matmul_clamp_f32_qsi8d32p_qsi4c32p`: `dst (f32, m x n) = clamp(lhs (f32,
//! m x k) · wᵀ)` with block-quantised int4 weights ([`BlockInt4`], f16 block
//! scales; ggml's `Q4_0` for `bl = 32`). The LHS is quantised on the fly,
//! symmetrically per block of the same `bl` (`qsi8d32`,
//! [`crate::quant::qsi8d32_row`]): `y = Σ_b s_b d_b Σ_{k∈b} q_k w_k` with `s_b`
//! the LHS and `d_b` the weight block scales (both f16). Block dot products
//! are exact int32. This family has no bias (the packers take none).
//!
//! Kernels (12 upstream, pairings of upstream's
//! `matmul_clamp_f32_qsi8d32p_qsi4c32p_test.cpp`):
//! - NEON dotprod GEMV `1x4`, `1x4x32` and GEMM `16x4`, NEON i8mm GEMM
//!   `8x4x32`: LHS `kai_lhs_quant_pack_qsi8d32p_f32`, RHS
//!   `kai_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0` (format `qsi4c32pscalef16`);
//! - NEON i8mm GEMM `16x4`: LHS `kai_lhs_quant_pack_qsi8d32p4x8sb_f32_neon`
//!   (ggml's choice; it rounds halves to even), same RHS;
//! - SVE dotprod GEMV `1x8` (two): same packers as the NEON GEMVs; SVE i8mm
//!   GEMM `16x8`: LHS `kai_lhs_quant_pack_qsi8d32p4x8sb_f32_neon` as ggml
//!   pairs it. The SVE kernels only work with 256-bit SVE and `bl = 32`;
//! - SME2 MOPA GEMM and SDOT GEMV: LHS `kai_lhs_quant_pack_qsi8d32p_f32_neon`,
//!   RHS `kai_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon` (format
//!   `qsi4c32ps1s0scalef16`, shared with `matmul_clamp_f32_f16p_qsi4c32p`);
//! - SME MOPA GEMM and DOT GEMV: same LHS, RHS
//!   `kai_rhs_pack_nxk_qsi4c32ps4s0sf16_qsu4c32s16s0_neon` (format
//!   `qsi4c32ps4s0sf16`). That packer stores `scale / 16` in f16, exact for
//!   scales of magnitude at least 2^-10; smaller scales lose bits there.
//!
//! All RHS packers read ggml's `Q4_0` byte layout (generalised to `bl`:
//! each block an f16 scale then `bl / 2` bytes pairing values `j` and
//! `j + bl / 2`): [`Q4_0`](crate::formats::Q4_0) input is passed through
//! untouched, other input is converted (bf16 scales rounded to f16, which
//! [`reference()`] does too).
//!
//! Tolerance of the conformance test: the reference quantises the LHS with
//! the packer's exact arithmetic (and rounding mode), so every int32 block
//! dot product is the kernel's; it evaluates the scaling exactly (f64) and
//! rounds once, while the kernels evaluate `s_b · d_b · dot_b` and the sum
//! over blocks in f32: a few roundings of terms bounded by
//! `M = Σ_k |s q_k| |d w_k|`, hence `|err| <= 1e-5 · (|want| + M) + 1e-6`.

pub use super::qsi8d32p_qsi4c32p::SCALE_TYPE;
use super::qsi8d32p_qsi4c32p::check_weights_no_bias;
use crate::error::Result;
use crate::families::float_common::check_reference_operands;
use crate::formats::BlockInt4;
use crate::packed::Clamp;
use crate::quant::{Rounding, qsi8d32_row};

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f32_qsi8d32p_qsi4c32p";

/// The portable reference (test oracle and fallback), quantising the LHS as
/// `kai_lhs_quant_pack_qsi8d32p_f32` and `_neon` do (halves away from zero).
/// Use [`reference_with`] and `Kernel::lhs_rounding` to match the kernel
/// whose packer rounds halves to even.
///
/// ```
/// use kleidiai::families::matmul_clamp_f32_qsi8d32p_qsi4c32p::reference;
/// use kleidiai::formats::Q4_0;
/// use kleidiai::Clamp;
/// let mut block = [0x99u8; 18]; // every value 9 - 8 = 1
/// block[..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
/// let mut y = [0f32];
/// reference(1, &[1.0; 32], Q4_0 { n: 1, k: 32, data: &block, bias: None }, Clamp::NONE, &mut y).unwrap();
/// assert!((y[0] - 16.0).abs() < 1e-2);
/// ```
pub fn reference<'a>(m: usize, lhs: &[f32], w: impl Into<BlockInt4<'a>>, clamp: Clamp, dst: &mut [f32]) -> Result<()> {
    reference_with(m, lhs, w, clamp, Rounding::HalfAwayFromZero, dst)
}

/// [`reference()`] with the LHS quantiser's `rounding` of halves.
pub fn reference_with<'a>(
    m: usize,
    lhs: &[f32],
    w: impl Into<BlockInt4<'a>>,
    clamp: Clamp,
    rounding: Rounding,
    dst: &mut [f32],
) -> Result<()> {
    let w = w.into();
    let weights = check_weights_no_bias(&w, FAMILY).map(|(n, k, _)| (n, k));
    let (n, k) = check_reference_operands(weights, clamp, m, lhs.len(), dst.len())?;
    let bl = w.bl();
    let blocks = k / bl;
    let scales: Vec<f64> = w.scale_bits(SCALE_TYPE)?.iter().map(|b| SCALE_TYPE.value_of(*b) as f64).collect();
    let wq: Vec<i32> = (0..n * k).map(|i| w.value(i / k, i % k) as i32).collect();
    for i in 0..m {
        let row = qsi8d32_row(&lhs[i * k..(i + 1) * k], bl, rounding);
        for j in 0..n {
            let mut acc = 0f64;
            for b in 0..blocks {
                let dot: i32 = (b * bl..(b + 1) * bl).map(|p| row.q[p] as i32 * wq[j * k + p]).sum();
                acc += dot as f64 * row.scales[b].to_f64() * scales[j * blocks + b];
            }
            dst[i * n + j] = (acc as f32).max(clamp.min).min(clamp.max);
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
    pub use crate::families::qsi8d32p_qsi4c32p::unpack_rhs_row;
    use crate::families::qsi8d32p_qsi4c32p::{
        FORMAT_PS1S0SCALEF16, FORMAT_PS4S0SF16, FORMAT_SCALEF16, LhsPacker, Q4Kernel, q4_kernel,
    };
    use crate::registry::info::VectorLength;

    q4_kernel! {
        interface: matmul_clamp_f32_qsi8d32p_qsi4c32p,
        fast: true,
        lhs_bl: [bl],
        /// Quantises (blocks of `bl`) and packs an `m x k` f32 LHS (rows
        /// `lhs_stride` elements apart; `k` for a dense matrix).
        pack_lhs,
        entry: |u: &'static kleidiai_sys::Ukernel, fns| {
            let sme = u.features.contains(&CpuFeature::Sme);
            let sme2 = u.features.contains(&CpuFeature::Sme2);
            let sve = u.features.contains(&CpuFeature::Sve);
            let lhs = if sme {
                LhsPacker::Neon
            } else if u.name.contains("qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm")
                || u.name.contains("qsi8d32p4x8_qsi4c32p8x8_16x8_sve_i8mm")
            {
                // ggml's LHS packer for these two GEMMs.
                LhsPacker::Sb4x8
            } else {
                LhsPacker::Scalar
            };
            let rhs_format = if sme2 {
                FORMAT_PS1S0SCALEF16
            } else if sme {
                FORMAT_PS4S0SF16
            } else {
                FORMAT_SCALEF16
            };
            // Upstream tests the SVE kernels with cpu_has_sve_vl256 only.
            let vl = if sve { VectorLength::SveBytes(32) } else { VectorLength::Any };
            Q4Kernel::new(u, FAMILY, fns, (u.features, vl), lhs, rhs_format, sve)
        },
    }

    impl Kernel {
        /// How this kernel's LHS packer rounds halves (see
        /// [`reference_with`]).
        pub fn lhs_rounding(&self) -> Rounding {
            self.0.lhs_rounding()
        }

        /// The largest block length this kernel takes.
        pub fn max_bl(&self) -> usize {
            self.0.max_bl()
        }
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) mod tests {
    use super::*;
    use crate::families::qsi8d32p_qsi4c32p::tests as shared;
    use crate::formats::{BlockScales, Int4Blocks, Int4Encoding, Order, Q4_0};
    use crate::par::Parallelism;
    use crate::testing::Rng;
    use crate::testing::qsi4c32::{TestWeights, magnitudes};
    use half::f16;

    #[test]
    fn conformance() {
        shared::conformance(FAMILY, 0x8d32, |name| Kernel::by_name(name).map(|k| k.q4()), |kernel, m, lhs, w, clamp| {
            let (n, k, bl) = (w.n(), w.k(), w.bl());
            let rounding = kernel.lhs_rounding();
            let mut want = vec![0f32; m * n];
            reference_with(m, lhs, w, clamp, rounding, &mut want)?;
            let wd = w.dequantize_as(SCALE_TYPE).unwrap();
            // M is taken over the dequantised LHS the kernel sees.
            let xq: Vec<f32> = lhs
                .chunks(k)
                .flat_map(|x| {
                    let q = qsi8d32_row(x, bl, rounding);
                    (0..k).map(move |p| q.q[p] as f32 * q.scales[p / bl].to_f32())
                })
                .collect();
            Ok((want, magnitudes(m, n, k, &xq, &wd, |_| 0.0)))
        });
    }

    /// The packed LHS bytes decode to exactly the values and scales the
    /// `qsi8d32` scheme gives, for each packer (the reference relies on it).
    #[test]
    fn lhs_packers_match_the_scheme() {
        let f = crate::cpu::Features::current();
        let mut rng = Rng::new(5);
        for kernel in Kernel::all().filter(|k| k.info().supported(&f).is_ok()) {
            let (m, k, bl) = (5, 64, 32);
            let mut lhs = rng.vec_f32(m * k);
            // Exact ties for the rounding mode: amax 127 gives scale 1.
            lhs[0] = 127.0;
            lhs[1] = 2.5;
            lhs[2] = -3.5;
            let p = kernel.pack_lhs(m, k, bl, &lhs, k, Parallelism::Sequential).unwrap();
            let l = *p.layout();
            let (mr, kbl) = (l.r, l.kr / l.sr);
            let bytes = p.as_bytes();
            let blocks = k / bl;
            let group = mr * blocks * (bl + 2);
            for i in 0..m {
                let want = qsi8d32_row(&lhs[i * k..(i + 1) * k], bl, kernel.lhs_rounding());
                let g = &bytes[(i / mr) * group..(i / mr + 1) * group];
                let x = i % mr;
                for b in 0..blocks {
                    let (scale_at, value_at): (usize, Box<dyn Fn(usize) -> usize>) = if l.format == "qsi8d32p" {
                        let base = b * mr * (bl + 2);
                        (base + 2 * x, Box::new(move |j| base + mr * 2 + (j / kbl) * mr * kbl + x * kbl + j % kbl))
                    } else {
                        let kr = l.kr;
                        (
                            group - mr * blocks * 2 + (b * mr + x) * 2,
                            Box::new(move |j| (b * bl / kr + j / kr) * mr * kr + x * kr + j % kr),
                        )
                    };
                    let s = f16::from_bits(u16::from_le_bytes([g[scale_at], g[scale_at + 1]]));
                    assert_eq!(s, want.scales[b], "{}: row {i} block {b} scale", kernel.info().name);
                    for j in 0..bl {
                        assert_eq!(
                            g[value_at(j)] as i8,
                            want.q[b * bl + j],
                            "{}: row {i} k {}",
                            kernel.info().name,
                            b * bl + j
                        );
                    }
                }
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
        let packed = k1.pack_rhs(tw.view(2, false, false)).unwrap();
        let lhs = vec![0.5f32; 2 * k];
        for other in Kernel::all().filter(|k| k.info().supported(&f).is_ok()) {
            let mut dst = vec![0f32; 2 * n];
            let r = other.matmul(2, &lhs, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential);
            if other.rhs_layout(n, k, 32).unwrap() == *packed.layout() {
                r.unwrap();
            } else {
                assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{:?}: {r:?}", other);
            }
        }
        // An LHS quantised with another block length is rejected.
        if k1.max_bl() >= 64 {
            let lhs64 = k1.pack_lhs(2, k, 64, &lhs, k, Parallelism::Sequential).unwrap();
            let mut dst = vec![0f32; 2 * n];
            assert!(matches!(
                k1.run(&lhs64, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential),
                Err(crate::Error::LayoutMismatch { .. })
            ));
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let kern = crate::testing::or_skip!(Kernel::select(1, &f));
        let (q, seq) = (vec![0x88u8; 2 * 18], Parallelism::Sequential);
        let w = shared::bad_operands(kern.q4(), &q);
        let packed = kern.pack_rhs(w).unwrap();
        assert!(kern.pack_rhs(Q4_0 { data: &q[..35], ..w }).is_err(), "short data");
        assert!(kern.pack_rhs(Q4_0 { k: 48, ..w }).is_err(), "k not whole blocks");
        assert!(kern.pack_rhs(Q4_0 { n: 0, ..w }).is_err(), "n = 0");
        assert!(kern.pack_rhs(Q4_0 { n: usize::MAX / 4, ..w }).is_err(), "overflow");
        assert!(kern.pack_lhs(1, 32, 48, &[0.0; 32], 32, seq).is_err(), "bl not a multiple of 32");
        assert!(kern.pack_lhs(1, 64, 512, &[0.0; 64], 64, seq).is_err(), "k not a multiple of bl");
        assert!(kern.pack_lhs(2, 32, 32, &[0.0; 40], 20, seq).is_err(), "stride < k");
        let s = [half::bf16::from_f32(1.0e6); 2];
        let big = Int4Blocks::bl32(2, 32, Order::NxK, Int4Encoding::Signed, &[0; 32], BlockScales::Bf16(&s));
        assert!(kern.pack_rhs(big).is_err(), "bf16 scale beyond the f16 range");
        // A strided LHS gives the dense result.
        let lhs: Vec<f32> = (0..64).map(|i| i as f32 / 64.0).collect();
        let strided: Vec<f32> = lhs.chunks(32).flat_map(|r| r.iter().copied().chain([9.0; 8])).collect();
        let (mut a, mut b) = (vec![0f32; 4], vec![0f32; 4]);
        let pl = kern.pack_lhs(2, 32, 32, &lhs, 32, seq).unwrap();
        let ps = kern.pack_lhs(2, 32, 32, &strided, 40, seq).unwrap();
        kern.run(&pl, &packed, &mut a, Clamp::NONE, seq).unwrap();
        kern.run(&ps, &packed, &mut b, Clamp::NONE, seq).unwrap();
        assert_eq!(a, b);
    }
}
