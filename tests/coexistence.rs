//! Two copies of KleidiAI in one process: ours (kleidiai-sys, symbols
//! prefixed) and an unprefixed second copy compiled from the same upstream
//! files by this package's build script, as ggml would bring. The binary
//! links at all only if no symbol clashes; both copies must then compute the
//! same bits.

mod common;

#[test]
fn our_symbols_are_prefixed() {
    if cfg!(target_arch = "aarch64") {
        assert!(kleidiai_sys::SYMBOL_PREFIX.starts_with("kairs_"), "{}", kleidiai_sys::SYMBOL_PREFIX);
    } else {
        assert_eq!(kleidiai_sys::SYMBOL_PREFIX, "");
    }
}

#[cfg(second_kleidiai)]
mod both {
    use super::common::*;
    use kleidiai::families::matmul_clamp_f32_qai8dxp_qsi4cxp::Kernel;
    use kleidiai::formats::{Int4Encoding, Int4PerChannel, Order};
    use kleidiai::{Clamp, Parallelism};

    #[link(name = "second_kleidiai", kind = "static")]
    unsafe extern "C" {
        fn second_copy_sizes(m: usize, n: usize, k: usize, lhs_size: *mut usize, rhs_size: *mut usize);
        fn second_copy_matmul(
            m: usize,
            n: usize,
            k: usize,
            lhs: *const f32,
            w: *const u8,
            scales: *const f32,
            lhs_packed: *mut u8,
            rhs_packed: *mut u8,
            dst: *mut f32,
        );
        /// The second copy's kernel, under upstream's plain name.
        fn kai_run_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod();
    }

    #[test]
    fn the_copies_are_distinct_code() {
        let theirs = kai_run_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod as *const () as usize;
        let ours = kleidiai_sys::kai_run_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod as *const () as usize;
        assert_ne!(theirs, ours, "both names resolved to one copy");
    }

    #[test]
    fn second_copy_computes_the_same() {
        const NAME: &str = "kai_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod";
        let f = kleidiai::cpu::Features::current();
        if !f.has(kleidiai::cpu::CpuFeature::Dotprod) {
            skipped("coexistence", "the shared kernel needs dotprod");
            return;
        }
        let (m, n, k) = (3, 13, 64);
        let mut rng = Rng::new(7);
        let lhs = rng.vec_f32(m * k);
        let w: Vec<u8> = (0..n * k / 2).map(|_| rng.next_u64() as u8).collect();
        let scales: Vec<f32> = (0..n).map(|_| 0.01 + 0.02 * (rng.f32() + 1.0)).collect();

        let (mut ls, mut rs) = (0usize, 0usize);
        let mut theirs = vec![0f32; m * n];
        // SAFETY: the CPU has dotprod (checked); sizes come from the second
        // copy's own queries; lhs is m x k, w n x k/2 bytes, scales n, dst m x n.
        unsafe {
            second_copy_sizes(m, n, k, &mut ls, &mut rs);
            let (mut lp, mut rp) = (vec![0u8; ls], vec![0u8; rs]);
            second_copy_matmul(
                m,
                n,
                k,
                lhs.as_ptr(),
                w.as_ptr(),
                scales.as_ptr(),
                lp.as_mut_ptr(),
                rp.as_mut_ptr(),
                theirs.as_mut_ptr(),
            );
        }

        let kernel = Kernel::by_name(NAME).expect("registered");
        let wt = Int4PerChannel {
            n,
            k,
            order: Order::NxK,
            encoding: Int4Encoding::Offset8,
            data: &w,
            scales: &scales,
            bias: None,
        };
        let packed = kernel.pack_rhs(&wt).unwrap();
        let mut ours = vec![0f32; m * n];
        kernel.matmul(m, &lhs, &packed, &mut ours, Clamp::NONE, Parallelism::Sequential).unwrap();
        assert!(
            ours.iter().zip(&theirs).all(|(a, b)| a.to_bits() == b.to_bits()),
            "the two copies disagree:\nours   {ours:?}\ntheirs {theirs:?}"
        );
        tier_ran("dotprod", "coexistence");
    }
}
