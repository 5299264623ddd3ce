//! One kernel per CPU tier, called through the raw `kleidiai-sys` bindings and
//! checked against a scalar Rust reference of the same math. Each test runs
//! only where its tier is present and records what it ran (or why it could
//! not) for `xtask test`, which fails a model that has a tier but ran no test
//! of it.

mod common;
use common::*;

#[test]
fn report_features() {
    features_seen();
}

#[cfg(not(target_arch = "aarch64"))]
#[test]
fn no_kernels_on_this_architecture() {
    // kleidiai-sys compiles nothing here; the manifest must say so.
    assert!(kleidiai_sys::UKERNELS.is_empty());
    skipped("tier_smoke::*", "not an aarch64 target: no KleidiAI kernel is compiled");
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::*;
    use core::ffi::c_void;
    use half::f16;
    use kleidiai::cpu::{CpuFeature, Features};
    use kleidiai_sys as sys;

    /// The kernel must have been built (all tiers are, by default) and the
    /// CPU must have `needs`; otherwise the skip is recorded with its reason.
    fn runnable(test: &str, kernel: &str, needs: &[CpuFeature]) -> bool {
        if sys::ukernel(kernel).is_none() {
            skipped(test, &format!("{kernel} was not built (Cargo features of kleidiai-sys)"));
            return false;
        }
        let f = Features::detected();
        let missing: Vec<&str> = needs.iter().filter(|x| !f.has(**x)).map(|x| x.name()).collect();
        if !missing.is_empty() {
            skipped(test, &format!("{kernel}: CPU lacks {}", missing.join("+")));
            return false;
        }
        true
    }

    fn tol_f32(want: &[f32], k: usize) -> Vec<f32> {
        want.iter().map(|w| 1e-5 * (k as f32) + 1e-5 * w.abs()).collect()
    }

    // ---------------------------------------------------------------- NEON f32

    #[test]
    fn neon_f32_matmul() {
        const K: &str = "kai_matmul_clamp_f32_f32_f32p8x1biasf32_6x8x4_neon_mla";
        if !runnable("neon_f32_matmul", K, &[CpuFeature::Neon]) {
            return;
        }
        let (m, n, k) = (7, 13, 19);
        let mut rng = Rng::new(1);
        let lhs = rng.vec_f32(m * k);
        let rhs_kxn = rng.vec_f32(k * n);
        let bias = rng.vec_f32(n);
        // SAFETY: plain getters of a NEON kernel; NEON is present.
        let (nr, kr, sr) = unsafe {
            (
                sys::kai_get_nr_matmul_clamp_f32_f32_f32p8x1biasf32_6x8x4_neon_mla(),
                sys::kai_get_kr_matmul_clamp_f32_f32_f32p8x1biasf32_6x8x4_neon_mla(),
                sys::kai_get_sr_matmul_clamp_f32_f32_f32p8x1biasf32_6x8x4_neon_mla(),
            )
        };
        // SAFETY: size query, no memory access.
        let size = unsafe { sys::kai_get_rhs_packed_size_rhs_pack_kxn_f32p8x1biasf32_f32_f32_neon(n, k) };
        let mut packed = vec![0u8; size];
        let mut dst = vec![0f32; m * n];
        // SAFETY: rhs is k x n f32 with row stride n*4; bias has n values;
        // packed has the size the packer reports; dst is m x n.
        unsafe {
            sys::kai_run_rhs_pack_kxn_f32p8x1biasf32_f32_f32_neon(
                1,
                n,
                k,
                nr,
                kr,
                sr,
                n * 4,
                rhs_kxn.as_ptr().cast(),
                bias.as_ptr().cast(),
                core::ptr::null(),
                packed.as_mut_ptr().cast(),
                0,
                core::ptr::null(),
            );
            sys::kai_run_matmul_clamp_f32_f32_f32p8x1biasf32_6x8x4_neon_mla(
                m,
                n,
                k,
                lhs.as_ptr().cast(),
                k * 4,
                packed.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                n * 4,
                4,
                f32::MIN,
                f32::MAX,
            );
        }
        let want = matmul_nt(m, n, k, &lhs, &transpose(k, n, &rhs_kxn), Some(&bias));
        assert_close(K, &dst, &want, &tol_f32(&want, k));
        tier_ran("neon", "neon_f32_matmul");
    }

    // ------------------------------------------- int4 per-channel (dotprod / i8mm)

    /// Signed int4 weights in [-8, 7] (stored as unsigned nibbles with zero
    /// point 8, low nibble first), per-channel scales, bias.
    struct Int4Weights {
        n: usize,
        k: usize,
        q: Vec<i8>,
        scale: Vec<f32>,
        bias: Vec<f32>,
    }

    impl Int4Weights {
        fn random(rng: &mut Rng, n: usize, k: usize) -> Self {
            let q = (0..n * k).map(|_| rng.below(16) as i8 - 8).collect();
            let scale = (0..n).map(|_| 0.01 + 0.05 * (rng.f32() + 1.0)).collect();
            let bias = rng.vec_f32(n);
            Int4Weights { n, k, q, scale, bias }
        }
        fn packed_nibbles(&self) -> Vec<u8> {
            let row = self.k.div_ceil(2);
            let mut out = vec![0u8; self.n * row];
            for r in 0..self.n {
                for c in 0..self.k {
                    let u = (self.q[r * self.k + c] + 8) as u8;
                    out[r * row + c / 2] |= u << ((c % 2) * 4);
                }
            }
            out
        }
        fn dequant(&self) -> Vec<f32> {
            (0..self.n * self.k).map(|i| self.q[i] as f32 * self.scale[i / self.k]).collect()
        }
    }

    /// Bound on the error of a dynamically int8-quantised LHS row (asymmetric,
    /// 255 steps over [min, max], both including 0): at most one step per
    /// element, times the weight magnitude.
    fn tol_dyn_quant(m: usize, n: usize, k: usize, lhs: &[f32], w: &[f32]) -> Vec<f32> {
        let mut tol = vec![0f32; m * n];
        for i in 0..m {
            let row = &lhs[i * k..(i + 1) * k];
            let max = row.iter().cloned().fold(0f32, f32::max);
            let min = row.iter().cloned().fold(0f32, f32::min);
            let step = (max - min) / 255.0;
            for j in 0..n {
                let wsum: f32 = w[j * k..(j + 1) * k].iter().map(|x| x.abs()).sum();
                tol[i * n + j] = step * wsum + 1e-4;
            }
        }
        tol
    }

    /// Runs a `matmul_clamp_f32_qai8dxp_qsi4cxp` kernel found by name in the
    /// generated interface table, with upstream's LHS and RHS packers.
    fn qai8dxp_qsi4cxp_case(test: &str, tier: &str, feat: CpuFeature, kernel: &str, m: usize) {
        if !runnable(test, kernel, &[feat]) {
            return;
        }
        let (_, iface) = sys::interfaces::matmul_clamp_f32_qai8dxp_qsi4cxp::KERNELS
            .iter()
            .find(|(info, _)| info.name == kernel)
            .expect("kernel in its family table");
        // SAFETY: getters of a kernel whose tier `runnable` confirmed.
        let (mr, nr, kr, sr) = unsafe {
            (iface.get_mr.unwrap()(), iface.get_nr.unwrap()(), iface.get_kr.unwrap()(), iface.get_sr.unwrap()())
        };
        let (n, k) = (11, 96);
        let mut rng = Rng::new(2);
        let lhs = rng.vec_f32(m * k);
        let w = Int4Weights::random(&mut rng, n, k);
        let nibbles = w.packed_nibbles();
        let params = sys::kai_rhs_pack_qs4cxs1s0_param { lhs_zero_point: 1, rhs_zero_point: 8 };
        // SAFETY: size queries, no memory access.
        let (lhs_size, rhs_size) = unsafe {
            (
                sys::kai_get_lhs_packed_size_lhs_quant_pack_qai8dxp_f32(m, k, mr, kr, sr),
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4cxp_qs4cxs1s0(n, k, nr, kr, sr),
            )
        };
        let mut lhs_p = vec![0u8; lhs_size];
        let mut rhs_p = vec![0u8; rhs_size];
        let mut dst = vec![0f32; m * n];
        // SAFETY: every buffer has the size its packer reports for (m, n, k)
        // and the kernel's mr/nr/kr/sr; dst is m x n; the CPU has the tier.
        unsafe {
            sys::kai_run_lhs_quant_pack_qai8dxp_f32(
                m,
                k,
                mr,
                kr,
                sr,
                0,
                lhs.as_ptr(),
                k * 4,
                lhs_p.as_mut_ptr().cast(),
            );
            sys::kai_run_rhs_pack_nxk_qsi4cxp_qs4cxs1s0(
                1,
                n,
                k,
                nr,
                kr,
                sr,
                nibbles.as_ptr(),
                w.bias.as_ptr(),
                w.scale.as_ptr(),
                rhs_p.as_mut_ptr().cast(),
                0,
                &params,
            );
            iface.run_matmul.unwrap()(
                m,
                n,
                k,
                lhs_p.as_ptr().cast(),
                rhs_p.as_ptr().cast(),
                dst.as_mut_ptr(),
                n * 4,
                4,
                f32::MIN,
                f32::MAX,
            );
        }
        let wd = w.dequant();
        let want = matmul_nt(m, n, k, &lhs, &wd, Some(&w.bias));
        assert_close(kernel, &dst, &want, &tol_dyn_quant(m, n, k, &lhs, &wd));
        tier_ran(tier, test);
    }

    #[test]
    fn dotprod_int4_matmul() {
        let kernel = "kai_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod";
        qai8dxp_qsi4cxp_case("dotprod_int4_matmul", "dotprod", CpuFeature::Dotprod, kernel, 5);
    }

    #[test]
    fn i8mm_int4_matmul() {
        let kernel = "kai_matmul_clamp_f32_qai8dxp4x8_qsi4cxp4x8_8x4x32_neon_i8mm";
        qai8dxp_qsi4cxp_case("i8mm_int4_matmul", "i8mm", CpuFeature::I8mm, kernel, 9);
    }

    // ---------------------------------------------------------------- SVE

    #[test]
    fn sve_f32_matmul_any_vl() {
        const K: &str = "kai_matmul_clamp_f32_f32_f32p4vlx1b_6x4vl_sve_mla";
        if !runnable("sve_f32_matmul_any_vl", K, &[CpuFeature::Sve]) {
            return;
        }
        let mut rng = Rng::new(3);
        // SAFETY: SVE getters; SVE is present.
        let (n_step, nr, kr, sr) = unsafe {
            (
                sys::kai_get_n_step_matmul_clamp_f32_f32_f32p4vlx1b_6x4vl_sve_mla(),
                sys::kai_get_nr_matmul_clamp_f32_f32_f32p4vlx1b_6x4vl_sve_mla(),
                sys::kai_get_kr_matmul_clamp_f32_f32_f32p4vlx1b_6x4vl_sve_mla(),
                sys::kai_get_sr_matmul_clamp_f32_f32_f32p4vlx1b_6x4vl_sve_mla(),
            )
        };
        let (m, n, k) = (7, n_step + 3, 17);
        let lhs = rng.vec_f32(m * k);
        let rhs_kxn = rng.vec_f32(k * n);
        let bias = rng.vec_f32(n);
        // SAFETY: size query of an SVE packer; SVE is present.
        let size = unsafe { sys::kai_get_rhs_packed_size_rhs_pack_kxn_x32p4vlx1b_x32_x32_sve(n, k) };
        let mut packed = vec![0u8; size];
        let mut dst = vec![0f32; m * n];
        // SAFETY: as in neon_f32_matmul; buffers sized by the packer's query.
        unsafe {
            sys::kai_run_rhs_pack_kxn_x32p4vlx1b_x32_x32_sve(
                1,
                n,
                k,
                nr,
                kr,
                sr,
                n * 4,
                rhs_kxn.as_ptr().cast(),
                bias.as_ptr().cast(),
                core::ptr::null(),
                packed.as_mut_ptr().cast(),
                0,
                core::ptr::null(),
            );
            sys::kai_run_matmul_clamp_f32_f32_f32p4vlx1b_6x4vl_sve_mla(
                m,
                n,
                k,
                lhs.as_ptr().cast(),
                k * 4,
                packed.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                n * 4,
                4,
                f32::MIN,
                f32::MAX,
            );
        }
        let want = matmul_nt(m, n, k, &lhs, &transpose(k, n, &rhs_kxn), Some(&bias));
        assert_close(K, &dst, &want, &tol_f32(&want, k));
        tier_ran("sve", "sve_f32_matmul_any_vl");
    }

    /// ggml Q4_0 rows: per 32 values one f16 scale then 16 bytes, byte j
    /// holding value j (low nibble) and value j + 16 (high), offset by 8.
    fn q4_0_rows(rng: &mut Rng, n: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
        let blocks = k / 32;
        let mut bytes = Vec::with_capacity(n * blocks * 18);
        let mut deq = vec![0f32; n * k];
        for r in 0..n {
            for b in 0..blocks {
                let d = f16::from_f32(0.01 + 0.05 * (rng.f32() + 1.0));
                bytes.extend_from_slice(&d.to_le_bytes());
                let q: Vec<u8> = (0..32).map(|_| rng.below(16) as u8).collect();
                for j in 0..16 {
                    bytes.push(q[j] | (q[j + 16] << 4));
                }
                for j in 0..32 {
                    deq[r * k + b * 32 + j] = d.to_f32() * (q[j] as f32 - 8.0);
                }
            }
        }
        (bytes, deq)
    }

    #[test]
    fn sve_vl256_q4_0_matmul() {
        const K: &str = "kai_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p8x8_16x8_sve_i8mm";
        let test = "sve_vl256_q4_0_matmul";
        if !runnable(test, K, &[CpuFeature::Sve, CpuFeature::I8mm]) {
            return;
        }
        let vl = Features::detected().sve_vector_bytes().unwrap_or(0);
        if vl != 32 {
            skipped(test, &format!("{K}: needs SVE VL 256, have {}", vl * 8));
            return;
        }
        let (m, n, k, bl) = (17, 19, 96, 32);
        let mut rng = Rng::new(4);
        let lhs = rng.vec_f32(m * k);
        let (q4, wd) = q4_0_rows(&mut rng, n, k);
        let params = sys::kai_rhs_pack_qs4cxs1s0_param { lhs_zero_point: 1, rhs_zero_point: 8 };
        // SAFETY: getters and size queries of an SVE+i8mm kernel at VL 256, which this CPU has.
        let (mr, nr, kr, sr, lhs_size, rhs_size) = unsafe {
            let mr = sys::kai_get_mr_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p8x8_16x8_sve_i8mm();
            let nr = sys::kai_get_nr_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p8x8_16x8_sve_i8mm();
            let kr = sys::kai_get_kr_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p8x8_16x8_sve_i8mm();
            let sr = sys::kai_get_sr_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p8x8_16x8_sve_i8mm();
            (
                mr,
                nr,
                kr,
                sr,
                sys::kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p_f32(m, k, bl, mr, kr, sr),
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0(n, k, nr, kr, bl),
            )
        };
        let mut lhs_p = vec![0u8; lhs_size];
        let mut rhs_p = vec![0u8; rhs_size];
        let mut dst = vec![0f32; m * n];
        // SAFETY: buffers sized by the packers' queries; k is a multiple of bl.
        unsafe {
            sys::kai_run_lhs_quant_pack_qsi8d32p_f32(
                m,
                k,
                bl,
                mr,
                kr,
                sr,
                0,
                lhs.as_ptr(),
                k * 4,
                lhs_p.as_mut_ptr().cast(),
            );
            sys::kai_run_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0(
                1,
                n,
                k,
                nr,
                kr,
                sr,
                bl,
                q4.as_ptr(),
                core::ptr::null(),
                rhs_p.as_mut_ptr().cast(),
                0,
                &params,
            );
            sys::kai_run_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p8x8_16x8_sve_i8mm(
                m,
                n,
                k,
                bl,
                lhs_p.as_ptr().cast(),
                rhs_p.as_ptr().cast(),
                dst.as_mut_ptr(),
                n * 4,
                4,
                f32::MIN,
                f32::MAX,
            );
        }
        let want = matmul_nt(m, n, k, &lhs, &wd, None);
        // Symmetric per-block int8 LHS: error at most half a step (max|x|/127) per element.
        let mut tol = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut t = 1e-3;
                for b in 0..k / bl {
                    let amax = lhs[i * k + b * bl..i * k + (b + 1) * bl].iter().fold(0f32, |a, x| a.max(x.abs()));
                    let wsum: f32 = wd[j * k + b * bl..j * k + (b + 1) * bl].iter().map(|x| x.abs()).sum();
                    t += amax / 127.0 * wsum;
                }
                tol[i * n + j] = t;
            }
        }
        assert_close(K, &dst, &want, &tol);
        tier_ran("sve", test);
    }

    // ---------------------------------------------------------------- SVE2.1

    #[test]
    fn sve2p1_f16_matmul() {
        const K: &str = "kai_matmul_clamp_f16_f16_f16p16vsx2bf16_6x16vs_sve2p1_dot";
        let test = "sve2p1_f16_matmul";
        if !runnable(test, K, &[CpuFeature::Sve2p1]) {
            return;
        }
        let (m, n, k) = (7, 37, 21);
        let mut rng = Rng::new(5);
        let h = |v: Vec<f32>| v.into_iter().map(f16::from_f32).collect::<Vec<f16>>();
        let lhs = h(rng.vec_f32(m * k));
        let rhs_kxn = h(rng.vec_f32(k * n));
        let bias = h(rng.vec_f32(n));
        let mut dst = vec![f16::ZERO; m * n];
        // SAFETY: the table functions only return pointers; SVE2.1 is present
        // for everything called through them.
        let (mm, pack) = unsafe {
            (
                sys::kai_matmul_clamp_f16_f16_f16p16vsx2bf16_6x16vs_sve2p1_dot(),
                sys::kai_rhs_pack_kxn_x16p16vsx2bx16_x16_x16_sve(),
            )
        };
        let pcfg = sys::kai_matmul_pack_rhs_uker_config::default();
        let mcfg = sys::kai_matmul_uker_config::default();
        // SAFETY: upstream fills every entry of both tables; the calls are
        // queries on (n, k) or (m, k) and the two runs get buffers of the
        // sizes those queries returned.
        unsafe {
            let rhs_shape = sys::kai_matmul_pack_rhs_uker_rhs_dim_args { n, k };
            let rhs_stride = pack.get_rhs_stride.unwrap()(&pcfg, &rhs_shape);
            assert_eq!(rhs_stride.k, n * 2, "kxn RHS: a K row holds n f16 values");
            let packed_shape = sys::kai_matmul_pack_rhs_uker_rhs_packed_dim_args { n, k };
            let packed_stride = pack.get_rhs_packed_stride.unwrap()(&pcfg, &packed_shape);
            let packed_size = pack.get_rhs_packed_size.unwrap()(&pcfg, &packed_shape, &packed_stride);
            let mut packed = vec![0u8; packed_size];
            let mut pargs = sys::kai_matmul_pack_rhs_uker_args::default();
            pargs.shape.n = n;
            pargs.shape.k = k;
            pargs.operand.rhs.ptr = rhs_kxn.as_ptr().cast();
            pargs.operand.rhs.stride = rhs_stride;
            pargs.operand.rhs_packed.ptr = packed.as_mut_ptr().cast();
            pargs.operand.rhs_packed.stride = packed_stride;
            pargs.operand.bias_n.ptr = bias.as_ptr().cast();
            pack.run.unwrap()(&pcfg, &pargs);

            let lhs_stride = mm.get_lhs_stride.unwrap()(&mcfg, &sys::kai_matmul_uker_lhs_dim_args { m, k });
            assert_eq!(lhs_stride.m, k * 2);
            let dst_shape = sys::kai_matmul_uker_dst_dim_args { m, n };
            let dst_stride = mm.get_dst_stride.unwrap()(&mcfg, &dst_shape);
            assert_eq!(dst_stride.m, n * 2);
            let dst_size = mm.get_dst_size.unwrap()(&mcfg, &dst_shape, &dst_stride);
            assert_eq!(dst_size, m * n * 2);
            let mm_rhs_stride = mm.get_rhs_stride.unwrap()(&mcfg, &sys::kai_matmul_uker_rhs_dim_args { n, k });
            assert_eq!(mm_rhs_stride.n, packed_stride.n, "packer and kernel agree on the packed layout");
            let mut args =
                sys::kai_matmul_uker_args { shape: sys::kai_matmul_uker_dim_args { m, n, k }, ..Default::default() };
            args.operand.lhs.ptr = lhs.as_ptr().cast();
            args.operand.lhs.stride = lhs_stride;
            args.operand.rhs.ptr = packed.as_ptr().cast();
            args.operand.rhs.stride = mm_rhs_stride;
            args.operand.dst.ptr = dst.as_mut_ptr().cast::<c_void>();
            args.operand.dst.stride = dst_stride;
            mm.run.unwrap()(&mcfg, &args);
        }
        let f = |v: &[f16]| v.iter().map(|x| x.to_f32()).collect::<Vec<f32>>();
        let bias32 = f(&bias);
        let want = matmul_nt(m, n, k, &f(&lhs), &transpose(k, n, &f(&rhs_kxn)), Some(&bias32));
        // f16 output: half an ulp of the result plus f16 rounding of partial sums.
        let tol: Vec<f32> = want.iter().map(|w| w.abs() * 2e-3 + k as f32 * 2e-3).collect();
        assert_close(K, &f(&dst), &want, &tol);
        tier_ran("sve2p1", test);
    }

    // ---------------------------------------------------------------- SME / SME2

    fn sme_f32_case(test: &str, kernel: &str, needs: &[CpuFeature], tier: &str, sme2: bool) {
        if !runnable(test, kernel, needs) {
            return;
        }
        let svl = Features::detected().sme_vector_bytes().expect("SME has a vector length");
        // SAFETY: SME getters; SME (and SME2 for the SME2 kernel) is present.
        let (mr, nr, kr, sr) = unsafe {
            if sme2 {
                (
                    sys::kai_get_mr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa(),
                    sys::kai_get_nr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa(),
                    sys::kai_get_kr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa(),
                    sys::kai_get_sr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa(),
                )
            } else {
                (
                    sys::kai_get_mr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa(),
                    sys::kai_get_nr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa(),
                    sys::kai_get_kr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa(),
                    sys::kai_get_sr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa(),
                )
            }
        };
        assert_eq!(mr, 2 * svl / 4, "mr is two streaming vectors of f32");
        let (m, n, k) = (mr + 3, nr + 5, 13);
        let mut rng = Rng::new(6);
        let lhs = rng.vec_f32(m * k);
        let rhs_kxn = rng.vec_f32(k * n);
        let bias = rng.vec_f32(n);
        // SAFETY: size queries of SME packers; SME is present.
        let (lhs_size, rhs_size) = unsafe {
            (
                sys::kai_get_lhs_packed_size_lhs_pack_f32p2vlx1_f32_sme(m, k, mr, kr, sr),
                sys::kai_get_rhs_packed_size_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme(n, k),
            )
        };
        let mut lhs_p = vec![0u8; lhs_size];
        let mut rhs_p = vec![0u8; rhs_size];
        let mut dst = vec![0f32; m * n];
        // SAFETY: buffers sized by the queries above; the CPU has the tier.
        unsafe {
            sys::kai_run_lhs_pack_f32p2vlx1_f32_sme(
                m,
                k,
                mr,
                kr,
                sr,
                0,
                lhs.as_ptr().cast(),
                k * 4,
                lhs_p.as_mut_ptr().cast(),
            );
            sys::kai_run_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme(
                1,
                n,
                k,
                nr,
                kr,
                sr,
                n * 4,
                rhs_kxn.as_ptr().cast(),
                bias.as_ptr().cast(),
                core::ptr::null(),
                rhs_p.as_mut_ptr().cast(),
                0,
                core::ptr::null(),
            );
            let run = if sme2 {
                sys::kai_run_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa
            } else {
                sys::kai_run_matmul_clamp_f32_f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa
            };
            run(
                m,
                n,
                k,
                lhs_p.as_ptr().cast(),
                rhs_p.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                n * 4,
                4,
                f32::MIN,
                f32::MAX,
            );
        }
        let want = matmul_nt(m, n, k, &lhs, &transpose(k, n, &rhs_kxn), Some(&bias));
        assert_close(kernel, &dst, &want, &tol_f32(&want, k));
        tier_ran(tier, test);
    }

    #[test]
    fn sme_f32_matmul() {
        sme_f32_case(
            "sme_f32_matmul",
            "kai_matmul_clamp_f32_f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa",
            &[CpuFeature::Sme],
            "sme",
            false,
        );
    }

    #[test]
    fn sme2_f32_matmul() {
        sme_f32_case(
            "sme2_f32_matmul",
            "kai_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa",
            &[CpuFeature::Sme2],
            "sme2",
            true,
        );
    }

    #[test]
    fn sme2p1_has_no_kernel() {
        // KleidiAI v1.30.0 has no micro-kernel that needs SME2.1: say so by
        // name on the models that have the feature, rather than stay silent.
        if Features::detected().has(CpuFeature::Sme2p1) {
            skipped("sme2p1", "KleidiAI v1.30.0 has no micro-kernel that needs SME2.1");
        }
        assert!(sys::UKERNELS.iter().all(|k| !k.features.contains(&CpuFeature::Sme2p1)));
    }
}
