//! Tests of the high-level path: every weight kind against its family
//! reference (kernels on Arm, the reference itself elsewhere), thread-count
//! determinism and the fallbacks when tiers are switched off; saved weights
//! in `files`, the pairing policy's layouts in `layouts`, the steady state
//! in `steady`.

use super::*;
use crate::testing::{Rng, bit_identical};

mod files;
mod layouts;
mod steady;

struct Case {
    weights: OwnedWeights,
    act: DType,
    /// Relative tolerance against the reference (per element, scaled by the
    /// magnitude of the dot product): quantised paths compute the same
    /// integers, float paths differ only in summation order.
    tol: f32,
}

impl Case {
    /// The case's weights packed for its activation type (`opts` for the
    /// rest).
    fn pack(&self, opts: PackOptions) -> PackedWeights {
        PackedWeights::pack(&self.weights.as_ref(), &PackOptions { activation: self.act, ..opts }).unwrap()
    }

    /// The kind of the case's weights.
    fn kind(&self) -> WeightKind {
        self.weights.as_ref().kind()
    }
}

/// Random `n x k` f32 weights from `rng` (N x K, no bias) packed with
/// `opts`, and their values.
fn random_f32(rng: &mut Rng, n: usize, k: usize, opts: &PackOptions) -> (Vec<f32>, PackedWeights) {
    let data = rng.vec_f32(n * k);
    let w = WeightsRef::F32(FloatWeights { n, k, order: Order::NxK, data: &data, bias: None });
    let packed = PackedWeights::pack(&w, opts).unwrap();
    (data, packed)
}

fn cases(rng: &mut Rng, n: usize, k: usize) -> Vec<Case> {
    assert!(k % 32 == 0, "block kinds need whole blocks");
    let mut v = Vec::new();
    let data = rng.vec_f32(n * k);
    let bias = rng.vec_f32(n);
    let h = |x: &[f32]| x.iter().map(|v| f16::from_f32(*v)).collect::<Vec<f16>>();
    let b = |x: &[f32]| x.iter().map(|v| bf16::from_f32(*v)).collect::<Vec<bf16>>();
    let scales = |rng: &mut Rng, len: usize| (0..len).map(|_| 0.01 + 0.02 * (rng.f32() + 1.0)).collect::<Vec<f32>>();
    v.push(Case {
        weights: OwnedWeights::F32 { n, k, data: data.clone(), bias: Some(bias.clone()) },
        act: DType::F32,
        tol: 1e-5,
    });
    v.push(Case {
        weights: OwnedWeights::F16 { n, k, data: h(&data), bias: Some(h(&bias)) },
        act: DType::F32,
        tol: 1e-5,
    });
    // f16 activations and outputs: f16 accumulation in the NEON kernels.
    v.push(Case {
        weights: OwnedWeights::F16 { n, k, data: h(&data), bias: Some(h(&bias)) },
        act: DType::F16,
        tol: 2e-2,
    });
    // bf16 kernels round the activations to bf16 (8 bits): the reference does not.
    v.push(Case {
        weights: OwnedWeights::Bf16 { n, k, data: b(&data), bias: Some(b(&bias)) },
        act: DType::F32,
        tol: 1e-2,
    });
    let int8: Vec<i8> = (0..n * k).map(|_| rng.next_u64() as i8).collect();
    v.push(Case {
        weights: OwnedWeights::Int8 {
            n,
            k,
            order: Order::NxK,
            data: int8,
            scales: scales(rng, n),
            bias: Some(bias.clone()),
        },
        act: DType::F32,
        tol: 1e-5,
    });
    let int4 = OwnedWeights::Int4 {
        n,
        k,
        order: Order::NxK,
        encoding: Int4Encoding::Offset8,
        data: rng.bytes(n * k.div_ceil(2)),
        scales: scales(rng, n),
        bias: Some(bias.clone()),
    };
    v.push(Case { weights: int4.clone(), act: DType::F32, tol: 1e-5 });
    v.push(Case { weights: int4, act: DType::Bf16, tol: 2e-2 });
    // ggml Q4_0 bytes: the selected kernel may quantise the LHS per block
    // (qsi8d32) rather than per row (qai8dx) like the reference: allow one
    // LHS quantisation step per product.
    let q4 = crate::formats::ggml_blocks::quantize_q4_0(&data, k).unwrap();
    let q4 = OwnedWeights::Q4_0 { n, k, data: crate::formats::ggml_blocks::q4_0_as_bytes(&q4).to_vec(), bias: None };
    v.push(Case { weights: q4.clone(), act: DType::F32, tol: 2e-2 });
    v.push(Case { weights: q4, act: DType::Bf16, tol: 3e-2 });
    let blocks = k / 64;
    v.push(Case {
        weights: OwnedWeights::Int4Blocks {
            n,
            k,
            bl: 64,
            order: Order::NxK,
            encoding: Int4Encoding::Signed,
            data: rng.bytes(n * k / 2),
            scales: OwnedScales::F16(scales(rng, n * blocks).iter().map(|v| f16::from_f32(*v)).collect()),
            bias: Some(bias.clone()),
        },
        act: DType::F32,
        tol: 2e-2,
    });
    let asym = OwnedWeights::Int4Asym {
        n,
        k,
        bl: 32,
        encoding: Int4Encoding::Offset8,
        nibbles: NibbleOrder::LowFirst,
        data: rng.bytes(n * k / 2),
        scales: scales(rng, n * k / 32),
        offsets: rng.vec_f32(n * k / 32),
        bias: Some(bias),
    };
    v.push(Case { weights: asym.clone(), act: DType::F32, tol: 1e-5 });
    v.push(Case { weights: asym, act: DType::F16, tol: 1e-2 });
    v
}

/// Activations in each element type (only the one for `dt` is filled).
fn act_vec(dt: DType, x: &[f32]) -> (Vec<f32>, Vec<f16>, Vec<bf16>) {
    match dt {
        DType::F16 => (Vec::new(), x.iter().map(|v| f16::from_f32(*v)).collect(), Vec::new()),
        DType::Bf16 => (Vec::new(), Vec::new(), x.iter().map(|v| bf16::from_f32(*v)).collect()),
        DType::F32 => (x.to_vec(), Vec::new(), Vec::new()),
    }
}

/// Runs `w` on `x` (m rows) and returns the output widened to f32.
fn run(w: &PackedWeights, dt: DType, m: usize, x: &[f32], par: Parallelism) -> Result<Vec<f32>> {
    run_in(w, dt, m, x, par, &mut Scratch::default())
}

/// [`run`] with the caller's scratch.
fn run_in(
    w: &PackedWeights,
    dt: DType,
    m: usize,
    x: &[f32],
    par: Parallelism,
    scratch: &mut Scratch,
) -> Result<Vec<f32>> {
    let n = w.n();
    let (x32, x16, xb) = act_vec(dt, x);
    match dt {
        DType::F16 => {
            let mut y = vec![f16::ZERO; m * n];
            w.matmul(m, Activation::F16(&x16), ActivationMut::F16(&mut y), Clamp::NONE, par, scratch)?;
            Ok(y.iter().map(|v| v.to_f32()).collect())
        }
        DType::Bf16 => {
            let mut y = vec![bf16::ZERO; m * n];
            w.matmul(m, Activation::Bf16(&xb), ActivationMut::Bf16(&mut y), Clamp::NONE, par, scratch)?;
            Ok(y.iter().map(|v| v.to_f32()).collect())
        }
        DType::F32 => {
            let mut y = vec![0f32; m * n];
            w.matmul(m, Activation::F32(&x32), ActivationMut::F32(&mut y), Clamp::NONE, par, scratch)?;
            Ok(y)
        }
    }
}

fn reference_out(c: &Case, m: usize, x: &[f32]) -> Vec<f32> {
    let (n, _) = c.weights.as_ref().shape();
    let (x32, x16, xb) = act_vec(c.act, x);
    match c.act {
        DType::F16 => {
            let mut y = vec![f16::ZERO; m * n];
            reference(c.weights.as_ref(), m, Activation::F16(&x16), ActivationMut::F16(&mut y), Clamp::NONE).unwrap();
            y.iter().map(|v| v.to_f32()).collect()
        }
        DType::Bf16 => {
            let mut y = vec![bf16::ZERO; m * n];
            reference(c.weights.as_ref(), m, Activation::Bf16(&xb), ActivationMut::Bf16(&mut y), Clamp::NONE).unwrap();
            y.iter().map(|v| v.to_f32()).collect()
        }
        DType::F32 => {
            let mut y = vec![0f32; m * n];
            reference(c.weights.as_ref(), m, Activation::F32(&x32), ActivationMut::F32(&mut y), Clamp::NONE).unwrap();
            y
        }
    }
}

fn magnitude(c: &Case, m: usize, x: &[f32]) -> Vec<f32> {
    // sum_k |x * w| per output, with w dequantised: the scale of rounding.
    let w = c.weights.as_ref();
    let (n, k) = w.shape();
    let dense: Vec<f32> = (0..n).flat_map(|r| dequantized_row(&w, r).unwrap()).collect();
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| (x[i * k + p] * dense[j * k + p]).abs()).sum::<f32>() + 1.0;
            if c.act != DType::F32 {
                // Half-precision outputs round to 8 (bf16) or 11 (f16) bits.
                out[i * n + j] += 1.0;
            }
        }
    }
    out
}

#[test]
fn every_kind_matches_its_reference_and_is_deterministic() {
    crate::testing::enable_threading_for_tests();
    let mut rng = Rng::new(11);
    let (n, k) = (37, 128);
    for c in cases(&mut rng, n, k) {
        let packed = c.pack(PackOptions::default());
        for m in [1, 5, 33] {
            let x = rng.vec_f32(m * k);
            let want = reference_out(&c, m, &x);
            let mag = magnitude(&c, m, &x);
            let got1 = run(&packed, c.act, m, &x, Parallelism::Sequential).unwrap();
            let got3 = run(&packed, c.act, m, &x, Parallelism::Rayon(3)).unwrap();
            assert!(bit_identical(&got1, &got3), "{:?} m={m}: thread counts differ", c.kind());
            for i in 0..got1.len() {
                let tol = c.tol * mag[i];
                assert!(
                    (got1[i] - want[i]).abs() <= tol,
                    "{:?}/{:?} m={m} [{i}]: {} vs {} (tol {tol}) via {:?}",
                    c.kind(),
                    c.act,
                    got1[i],
                    want[i],
                    packed.kernel_for(m)
                );
            }
        }
    }
}

#[test]
fn bad_input_is_an_error() {
    let data = vec![0f32; 8 * 16];
    let w = WeightsRef::F32(FloatWeights { n: 8, k: 16, order: Order::NxK, data: &data, bias: None });
    let p = PackedWeights::pack(&w, &PackOptions::default()).unwrap();
    let mut s = Scratch::default();
    let x = vec![0f32; 2 * 16];
    let mut y = vec![0f32; 2 * 8];
    let seq = Parallelism::Sequential;
    assert!(p.matmul(0, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE, seq, &mut s).is_err());
    assert!(p.matmul(3, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE, seq, &mut s).is_err(), "short x");
    assert!(p.matmul(2, Activation::F32(&x), ActivationMut::F32(&mut y[..15]), Clamp::NONE, seq, &mut s).is_err());
    let x16 = vec![f16::ZERO; 32];
    assert!(p.matmul(2, Activation::F16(&x16), ActivationMut::F32(&mut y), Clamp::NONE, seq, &mut s).is_err());
    let nan = Clamp { min: 1.0, max: 0.0 };
    assert!(p.matmul(2, Activation::F32(&x), ActivationMut::F32(&mut y), nan, seq, &mut s).is_err());
    let short = WeightsRef::F32(FloatWeights { n: 8, k: 16, order: Order::NxK, data: &data[..100], bias: None });
    assert!(PackedWeights::pack(&short, &PackOptions::default()).is_err());
    let mut row = vec![0f32; 16];
    assert!(p.row(8, &mut row).is_err());
    assert!(p.row(0, &mut row[..15]).is_err());
    p.row(7, &mut row).unwrap();
}

#[test]
fn restricted_features_fall_back() {
    // Packed with every tier allowed, then asked to run with none: the
    // reference copy (kept on request) answers, and identically to a pack
    // made for no features at all.
    let mut rng = Rng::new(13);
    let (n, k) = (9, 32);
    let (data, none) =
        random_f32(&mut rng, n, k, &PackOptions { features: Some(Features::none()), ..Default::default() });
    assert!(none.layouts().is_empty() && none.kernel_for(4).is_none());
    let x = rng.vec_f32(4 * k);
    let y_ref = run(&none, DType::F32, 4, &x, Parallelism::Sequential).unwrap();
    let mut want = vec![0f32; 4 * n];
    crate::families::matmul_clamp_f32_f32_f32p::reference(
        4,
        &x,
        &FloatWeights { n, k, order: Order::NxK, data: &data, bias: None },
        Clamp::NONE,
        &mut want,
    )
    .unwrap();
    assert!(bit_identical(&y_ref, &want));
    assert!(none.to_bytes().is_err(), "nothing packed, nothing to save");
}

/// f16 and bf16 weights on f32 kernels: widened once (the default) and kept
/// as given, packed per call (`keep_as_given`) give the same bits, for one row and
/// several, with and without a bias, on one thread and three, and through
/// a saved file.
#[test]
fn weights_packed_per_call_match_a_widened_copy() {
    let mut rng = Rng::new(8);
    let (n, k) = (70, 96);
    let data = rng.vec_f32(n * k);
    let bias: Vec<f32> = rng.vec_f32(n);
    let h: Vec<f16> = data.iter().map(|v| f16::from_f32(*v)).collect();
    let hb: Vec<f16> = bias.iter().map(|v| f16::from_f32(*v)).collect();
    let b: Vec<bf16> = data.iter().map(|v| bf16::from_f32(*v)).collect();
    let bb: Vec<bf16> = bias.iter().map(|v| bf16::from_f32(*v)).collect();
    fn fw<'a, T>(n: usize, k: usize, data: &'a [T], bias: Option<&'a [T]>) -> FloatWeights<'a, T> {
        FloatWeights { n, k, order: Order::NxK, data, bias }
    }
    let all = [
        WeightsRef::F16(fw(n, k, &h, None)),
        WeightsRef::F16(fw(n, k, &h, Some(&hb))),
        WeightsRef::Bf16(fw(n, k, &b, None)),
        WeightsRef::Bf16(fw(n, k, &b, Some(&bb))),
    ];
    for w in all {
        let one = PackedWeights::pack(&w, &PackOptions { keep_as_given: true, ..Default::default() }).unwrap();
        let wide = PackedWeights::pack(&w, &PackOptions::default()).unwrap();
        assert_eq!(one.layouts(), wide.layouts(), "the same kernels");
        let saved = one.to_bytes().ok().map(|b| PackedWeights::from_bytes(&b).unwrap());
        for m in [1, 9] {
            let x = rng.vec_f32(m * k);
            for par in [Parallelism::Sequential, Parallelism::Rayon(3)] {
                let a = run(&one, DType::F32, m, &x, par).unwrap();
                let z = run(&wide, DType::F32, m, &x, par).unwrap();
                assert!(bit_identical(&a, &z), "{:?} m={m} {par:?}", w.kind());
                if let Some(s) = &saved {
                    assert!(bit_identical(&a, &run(s, DType::F32, m, &x, par).unwrap()), "saved file");
                }
            }
        }
        let (mut r1, mut r2) = (vec![0f32; k], vec![0f32; k]);
        one.row(3, &mut r1).unwrap();
        wide.row(3, &mut r2).unwrap();
        assert!(bit_identical(&r1, &r2), "get_rows");
        if !one.layouts().is_empty() && one.layouts()[0].0.contains("_f32_f32") {
            assert!(
                one.packed_bytes() < wide.packed_bytes() / 2 + 1024,
                "{} vs {}",
                one.packed_bytes(),
                wide.packed_bytes()
            );
        }
    }
}

/// `separate_gemv` packs the faster GEMV's own layout where the chosen
/// pairing names one, and one row then runs on it (close to the default's
/// result: another kernel, the same weights).
#[test]
fn a_separate_gemv_layout_only_when_asked() {
    let mut rng = Rng::new(12);
    for c in cases(&mut rng, 48, 128) {
        let one = c.pack(PackOptions::default());
        let two = c.pack(PackOptions { separate_gemv: true, ..Default::default() });
        let Some((gemm, _)) = one.layouts().first().copied() else { continue };
        let faster = policy::pairings(c.kind(), c.act).iter().find(|p| p.gemm == gemm).and_then(|p| p.faster_gemv);
        let runs =
            faster.is_some_and(|v| registry::by_name(v).is_some_and(|i| i.supported(&Features::current()).is_ok()));
        if !runs {
            assert_eq!(one.layouts(), two.layouts(), "{gemm}: nothing faster to keep");
            continue;
        }
        assert_eq!(two.layouts().len(), 2, "{:?}", two.layouts());
        assert_eq!(two.kernel_for(1), faster);
        assert_eq!(two.kernel_for(5), Some(gemm));
        assert!(two.packed_bytes() > one.packed_bytes() * 3 / 2, "the second layout is a second copy");
        let x = rng.vec_f32(c.weights.as_ref().shape().1);
        let a = run(&one, c.act, 1, &x, Parallelism::Sequential).unwrap();
        let b = run(&two, c.act, 1, &x, Parallelism::Sequential).unwrap();
        let tol = magnitude(&c, 1, &x);
        for (j, ((a, b), t)) in a.iter().zip(&b).zip(&tol).enumerate() {
            assert!((a - b).abs() <= 2.0 * c.tol * t + 1e-6, "{gemm} j={j}: {a} vs {b}");
        }
        // The file keeps both layouts.
        let back = PackedWeights::from_bytes(&two.to_bytes().unwrap()).unwrap();
        assert_eq!(back.layouts(), two.layouts());
    }
}
