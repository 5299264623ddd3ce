//! Tests that involve two families at once: packed weights one family's
//! kernels share with another's, and the other family's layouts each one
//! refuses. They live here, outside `families`, because no family imports
//! another (each family's own tests cover it alone).

use crate::cpu::{CpuFeature, Features};
use crate::families::{
    dwconv_f16_f16_f16p, dwconv_f32_f32_f32p, imatmul_clamp_f32_f32_f32p, imatmul_clamp_f32_f32p_f32p,
    matmul_clamp_bf16_qai8dxp_qsi4c32p, matmul_clamp_f16_bf16p_bf16p, matmul_clamp_f16_f16_f16p,
    matmul_clamp_f16_f16p_f16p, matmul_clamp_f32_bf16p_bf16p, matmul_clamp_f32_f16p_qsi4c32p,
    matmul_clamp_f32_f32_f32p, matmul_clamp_f32_f32p_f32p, matmul_clamp_f32_qai8dxp_qsi4c32p,
    matmul_clamp_f32_qsi8d32p_qsi4c32p, matmul_clamp_f32_u8p_u8p, matmul_clamp_fp32_bf16p_bf16p, matmul_i32_u8p_u8p,
};
use crate::formats::{DepthwiseShape, DepthwiseWeights, FloatWeights, Indirection, Order, Q4_0, U8Weights};
use crate::packed::{Clamp, PackedLayout, PackedRhs};
use crate::par::Parallelism;
use crate::testing::qsi4c32::TestWeights;
use crate::testing::{self, Rng};
use core::fmt::Debug;
use half::{bf16, f16};

/// Checks every pair of a GEMM kernel of one family and a GEMV kernel of
/// another that read one packed RHS, and returns how many there are.
/// `gemms`: the GEMM kernels with the RHS each packed; `gemvs`: the GEMV
/// kernels with their layout for the same weights; a GEMV kernel pairs with
/// each GEMM kernel whose packed RHS has that layout. Each pair runs one row
/// (`gemm_row`, `gemv_row`) on the GEMM kernel's packed RHS, and both
/// outputs must be within `tol` of `want` (compared as f32).
fn shared_rhs_pairs<T: Copy + Default + Into<f32>, G: Debug, V: Debug>(
    gemms: Vec<(G, PackedRhs)>,
    gemvs: Vec<(V, PackedLayout)>,
    gemm_row: impl Fn(&G, &PackedRhs, &mut [T]) -> crate::Result<()>,
    gemv_row: impl Fn(&V, &PackedRhs, &mut [T]) -> crate::Result<()>,
    want: &[T],
    tol: f32,
) -> usize {
    let n = want.len();
    let mut pairs = 0;
    for (gemm, packed) in &gemms {
        for (gv, layout) in &gemvs {
            if *layout != *packed.layout() {
                continue;
            }
            let (mut a, mut b) = (vec![T::default(); n], vec![T::default(); n]);
            gemm_row(gemm, packed, &mut a).unwrap();
            gemv_row(gv, packed, &mut b).unwrap();
            for j in 0..n {
                let (x, y, z): (f32, f32, f32) = (a[j].into(), b[j].into(), want[j].into());
                assert!((x - z).abs() < tol && (y - z).abs() < tol, "{gemm:?} / {gv:?}");
            }
            pairs += 1;
        }
    }
    pairs
}

/// [`shared_rhs_pairs`] of the kernels of the float GEMM family `$gemm` and
/// GEMV family `$gemv` that run on `$f`: random `37 x 19` weights with a
/// bias and one random row (from seed `$seed`, in the element type `$elem`
/// makes of f32), against `$gemm`'s reference.
macro_rules! float_shared_rhs_pairs {
    ($gemm:ident, $gemv:ident, $f:expr, $seed:expr, $elem:expr, $tol:expr) => {{
        let (n, k) = (37, 19);
        let mut rng = testing::Rng::new($seed);
        let h = |v: Vec<f32>| v.into_iter().map($elem).collect::<Vec<_>>();
        let data = h(rng.vec_f32(n * k));
        let bias = h(rng.vec_f32(n));
        let lhs = h(rng.vec_f32(k));
        let w = FloatWeights { n, k, order: Order::NxK, data: &data, bias: Some(&bias) };
        let mut want = vec![Default::default(); n];
        $gemm::reference(1, &lhs, &w, Clamp::NONE, &mut want).unwrap();
        let (f, w, seq) = ($f, &w, Parallelism::Sequential);
        shared_rhs_pairs(
            $gemm::Kernel::all()
                .filter(|g| g.info().supported(f).is_ok())
                .map(|g| (g, g.pack_rhs(w).unwrap()))
                .collect(),
            $gemv::Kernel::all()
                .filter(|g| g.info().supported(f).is_ok())
                .map(|g| (g, g.rhs_layout(w.n, w.k).unwrap()))
                .collect(),
            |gemm, packed, y| gemm.matmul(1, &lhs, packed, y, Clamp::NONE, seq),
            |gv, packed, y| gv.matmul(1, &lhs, packed, y, Clamp::NONE, seq),
            &want,
            $tol,
        )
    }};
}

/// Random `n x 64` int4 test weights in blocks of 32 from seed `seed`, and
/// the generator after drawing them.
fn int4_weights(seed: u64, n: usize) -> (Rng, TestWeights) {
    let mut rng = Rng::new(seed);
    let tw = TestWeights::new(&mut rng, n, 64, 32);
    (rng, tw)
}

/// Checks that a kernel of one family (`mine`: selected for this CPU)
/// refuses by its layout a packed RHS of a kernel of another (`other`,
/// packed by `pack`), given it by `run`. Nothing to check where either
/// family has no kernel for this CPU.
fn assert_refuses_rhs<A, B, R: Debug>(
    mine: impl FnOnce(&Features) -> Option<A>,
    other: impl FnOnce(&Features) -> Option<B>,
    pack: impl FnOnce(&B) -> PackedRhs,
    run: impl FnOnce(&A, &PackedRhs) -> crate::Result<R>,
) {
    let f = Features::current();
    let mine = crate::testing::or_skip!(mine(&f));
    if let Some(other) = other(&f) {
        let r = run(&mine, &pack(&other));
        assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{r:?}");
    }
}

/// [`assert_refuses_rhs`] of the float matmul families `$mine` and `$other`
/// (their kernels for 4 rows): `$n x $k` f32 weights of 0.5, N x K without
/// a bias, packed by `$other`'s kernel and given to `$mine`'s with 2 rows
/// of activations `$x` into outputs that start at `$zero`.
macro_rules! float_refuses_rhs {
    ($mine:ident, $other:ident, $n:expr, $k:expr, $x:expr, $zero:expr) => {{
        let (n, k) = ($n, $k);
        let lhs = vec![$x; 2 * k];
        let mut dst = vec![$zero; 2 * n];
        let data = vec![0.5f32; n * k];
        assert_refuses_rhs(
            |f| $mine::Kernel::select(4, f),
            |f| $other::Kernel::select(4, f),
            |other| other.pack_rhs(&FloatWeights { n, k, order: Order::NxK, data: &data, bias: None }).unwrap(),
            |kern, p| kern.matmul(2, &lhs, p, &mut dst, Clamp::NONE, Parallelism::Sequential),
        )
    }};
}

/// A weight packed for a MOPA kernel of `matmul_clamp_f32_f32p_f32p` serves
/// the GEMV kernel of `matmul_clamp_f32_f32_f32p` that reads the same
/// format, and the results agree.
#[test]
fn f32_gemm_and_gemv_share_one_packed_rhs() {
    let f = Features::current();
    let pairs = float_shared_rhs_pairs!(matmul_clamp_f32_f32p_f32p, matmul_clamp_f32_f32_f32p, &f, 7, |x: f32| x, 1e-4);
    if f.has(CpuFeature::Sme2) {
        assert!(pairs >= 3, "the SME2 GEMM kernels share a format with a GEMV kernel");
    }
}

/// `matmul_clamp_f32_f32p_f32p::unpack_rhs_row` refuses a packed RHS of a
/// (non-SME) `matmul_clamp_f32_f32_f32p` kernel.
#[test]
fn f32_gemm_does_not_unpack_a_gemv_rhs() {
    use matmul_clamp_f32_f32_f32p as gemv;
    use matmul_clamp_f32_f32p_f32p::{Kernel, unpack_rhs_row};
    let f = Features::current();
    crate::testing::or_skip!(Kernel::select(8, &f));
    let data = vec![1.0f32; 32];
    let w = FloatWeights { n: 4, k: 8, order: Order::KxN, data: &data, bias: None };
    let mut row = vec![0f32; 8];
    if let Some(g) = gemv::Kernel::all().find(|g| g.info().supported(&f).is_ok() && !g.info().is_sme()) {
        let other = g.pack_rhs(&w).unwrap();
        assert!(unpack_rhs_row(&other, 0, &mut row).is_err());
    }
}

/// A weight packed for a MOPA kernel of `matmul_clamp_f16_f16p_f16p` serves
/// the SME GEMV kernels of `matmul_clamp_f16_f16_f16p`.
#[test]
fn f16_gemm_and_gemv_share_one_packed_rhs() {
    let f = Features::current();
    let pairs =
        float_shared_rhs_pairs!(matmul_clamp_f16_f16p_f16p, matmul_clamp_f16_f16_f16p, &f, 8, f16::from_f32, 1e-2);
    if f.has(CpuFeature::Sme2) {
        assert!(pairs >= 4, "both MOPA kernels share a format with both SME GEMV kernels");
    }
}

/// `matmul_clamp_f16_f16p_f16p` refuses a packed RHS of
/// `matmul_clamp_f32_f32p_f32p` by layout (the format differs).
#[test]
fn f16_gemm_refuses_an_f32_gemm_rhs() {
    float_refuses_rhs!(matmul_clamp_f16_f16p_f16p, matmul_clamp_f32_f32p_f32p, 9, 8, f16::from_f32(0.5), f16::ZERO);
}

/// ggml's SME2 pairing: the GEMM of `matmul_clamp_f32_f16p_qsi4c32p` and
/// the SDOT GEMV of `matmul_clamp_f32_qsi8d32p_qsi4c32p` read one packed
/// weight.
#[test]
fn f16p_qsi4c32p_gemm_and_qsi8d32p_gemv_share_one_packed_rhs() {
    use matmul_clamp_f32_f16p_qsi4c32p::Kernel;
    use matmul_clamp_f32_qsi8d32p_qsi4c32p::Kernel as Gemv;
    let f = Features::current();
    let gemm = crate::testing::or_skip!(Kernel::select(8, &f));
    let gemv =
        crate::testing::or_skip!(Gemv::by_name("kai_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4vlx4_1x4vl_sme2_sdot"));
    crate::testing::or_skip!(gemv.info().supported(&f).ok());
    let (mut rng, tw) = int4_weights(9, 40);
    let w = Q4_0 { n: 40, k: 64, data: &tw.q4_0, bias: None };
    let packed = gemm.pack_rhs(w).unwrap();
    assert_eq!(*packed.layout(), gemv.rhs_layout(40, 64, 32).unwrap());
    let lhs = rng.vec_f32(64);
    let (mut a, mut b) = (vec![0f32; 40], vec![0f32; 40]);
    gemv.matmul(1, &lhs, &packed, &mut a, Clamp::NONE, Parallelism::Sequential).unwrap();
    gemv.matmul(1, &lhs, &gemv.pack_rhs(w).unwrap(), &mut b, Clamp::NONE, Parallelism::Sequential).unwrap();
    assert_eq!(a, b);
}

/// `matmul_clamp_f32_f16p_qsi4c32p` runs a `matmul_clamp_f32_qsi8d32p_qsi4c32p`
/// packed RHS of its own layout and refuses the others.
#[test]
fn f16p_qsi4c32p_takes_only_its_layout_of_qsi8d32p_rhs() {
    use matmul_clamp_f32_f16p_qsi4c32p::Kernel;
    use matmul_clamp_f32_qsi8d32p_qsi4c32p::Kernel as Other;
    let f = Features::current();
    let kern = crate::testing::or_skip!(Kernel::select(8, &f));
    let (_, tw) = int4_weights(4, 8);
    let w = Q4_0 { n: 8, k: 64, data: &tw.q4_0, bias: None };
    let lhs = vec![0.25f32; 2 * 64];
    let mut dst = vec![0f32; 16];
    for other in Other::all().filter(|k| k.info().supported(&f).is_ok()) {
        let p = other.pack_rhs(w).unwrap();
        let r = kern.matmul(2, &lhs, &p, &mut dst, Clamp::NONE, Parallelism::Sequential);
        if *p.layout() == kern.rhs_layout(8, 64, 32).unwrap() {
            r.unwrap();
        } else {
            assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{:?}: {r:?}", other);
        }
    }
}

/// `matmul_clamp_fp32_bf16p_bf16p` (SME) refuses a packed RHS of
/// `matmul_clamp_f32_bf16p_bf16p` (NEON).
#[test]
fn sme_bf16_refuses_a_neon_bf16_rhs() {
    float_refuses_rhs!(matmul_clamp_fp32_bf16p_bf16p, matmul_clamp_f32_bf16p_bf16p, 8, 16, 0.5f32, 0f32);
}

/// `matmul_clamp_f16_bf16p_bf16p` refuses a packed RHS of
/// `matmul_clamp_f32_bf16p_bf16p` (f32 bias: another format).
#[test]
fn f16_bf16_refuses_an_f32_bf16_rhs() {
    float_refuses_rhs!(
        matmul_clamp_f16_bf16p_bf16p,
        matmul_clamp_f32_bf16p_bf16p,
        8,
        16,
        f16::from_f32(0.5),
        f16::ZERO
    );
}

/// `imatmul_clamp_f32_f32_f32p` refuses a packed RHS of
/// `imatmul_clamp_f32_f32p_f32p` (SME, another format).
#[test]
fn imatmul_f32_refuses_an_sme_imatmul_rhs() {
    let (n, kcc, kcl) = (8, 2, 3);
    let data = vec![0.5f32; n * kcc * kcl];
    let w = FloatWeights { n, k: kcc * kcl, order: Order::NxK, data: &data, bias: None };
    let src = vec![0.5f32; 8];
    let chunks = [Some(0), Some(5), None, Some(2)];
    let lhs = Indirection { m: 2, k_chunk_count: kcc, k_chunk_length: kcl, src: &src, chunks: &chunks, pad: 0.0 };
    let mut dst = vec![0f32; 2 * n];
    assert_refuses_rhs(
        |f| imatmul_clamp_f32_f32_f32p::Kernel::select(4, f),
        |f| imatmul_clamp_f32_f32p_f32p::Kernel::select(4, f),
        |sme| sme.pack_rhs(&w, kcc, kcl).unwrap(),
        |k1, p3| k1.run(&lhs, p3, &mut dst, Clamp::NONE, Parallelism::Sequential),
    );
}

/// A weight packed for `matmul_clamp_f32_qai8dxp_qsi4c32p` serves the
/// `matmul_clamp_bf16_qai8dxp_qsi4c32p` kernel of the same layout, and the
/// other way round.
#[test]
fn qai8dxp_qsi4c32p_bf16_and_f32_share_packed_weights() {
    use matmul_clamp_bf16_qai8dxp_qsi4c32p::Kernel;
    use matmul_clamp_f32_qai8dxp_qsi4c32p::Kernel as F32Kernel;
    let f = Features::current();
    let kb = crate::testing::or_skip!(Kernel::select(1, &f));
    let (_, tw) = int4_weights(11, 8);
    let w = tw.view(0, false, true);
    let mine = kb.pack_rhs(w).unwrap();
    let lhs = vec![bf16::ONE; 64];
    let mut shared = 0;
    for other in F32Kernel::all().filter(|k| k.info().supported(&f).is_ok()) {
        if other.rhs_layout(8, 64, 32).unwrap() != *mine.layout() {
            continue;
        }
        let theirs = other.pack_rhs(w).unwrap();
        let (mut a, mut b) = (vec![bf16::ZERO; 8], vec![bf16::ZERO; 8]);
        kb.matmul(1, &lhs, &mine, &mut a, Clamp::NONE, Parallelism::Sequential).unwrap();
        kb.matmul(1, &lhs, &theirs, &mut b, Clamp::NONE, Parallelism::Sequential).unwrap();
        assert_eq!(a, b);
        shared += 1;
    }
    assert!(shared > 0 || !f.has(CpuFeature::Bf16));
}

/// `dwconv_f16_f16_f16p` refuses the packed weights of
/// `dwconv_f32_f32_f32p`.
#[test]
fn dwconv_f16_refuses_an_f32_dwconv_rhs() {
    let s = DepthwiseShape { in_h: 4, in_w: 4, channels: 3, pad_top: 1, pad_bottom: 1, pad_left: 1, pad_right: 1 };
    let src = vec![f16::from_f32(1.0); 48];
    let mut dst = vec![f16::ZERO; 48];
    let t32 = vec![1.0f32; 27];
    assert_refuses_rhs(
        dwconv_f16_f16_f16p::Kernel::select,
        dwconv_f32_f32_f32p::Kernel::select,
        |k32| k32.pack_rhs(&DepthwiseWeights { channels: 3, data: &t32, bias: None }).unwrap(),
        |kern, p| kern.run(&s, &src, p, &mut dst, Clamp::NONE, Parallelism::Sequential),
    );
}

/// The packing of `matmul_i32_u8p_u8p` is that of
/// `matmul_clamp_f32_u8p_u8p`: one packed RHS serves both.
#[test]
fn u8p_i32_and_f32_share_one_packed_rhs() {
    use matmul_clamp_f32_u8p_u8p::{AccBias, Kernel, OutputStage};
    let f = Features::current();
    let kern = crate::testing::or_skip!(Kernel::select(4, &f));
    let w = U8Weights { n: 3, k: 8, order: Order::NxK, data: &[1; 24] };
    let packed = kern.pack_rhs(&w).unwrap();
    let seq = Parallelism::Sequential;
    let out = OutputStage { scale: 1.0, bias: None };
    let mut dst = [0f32; 6];
    let other = matmul_i32_u8p_u8p::Kernel::select(4, &f).unwrap();
    let packed_i32 = other.pack_rhs(&w).unwrap();
    assert_eq!(packed_i32.layout(), packed.layout());
    let lhs = kern.pack_lhs(2, 8, &[1; 16], 8, seq).unwrap();
    kern.run(&lhs, &packed_i32, &AccBias::default(), &out, Clamp::NONE, &mut dst, seq).unwrap();
    assert_eq!(dst, [8.0; 6]);
}
