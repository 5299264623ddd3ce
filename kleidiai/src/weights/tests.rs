//! Tests of the high-level path: every weight kind against its family
//! reference (kernels on Arm, the reference itself elsewhere), thread-count
//! determinism, save/load round trips, tampering, zero-copy loading, and the
//! fallbacks when tiers are switched off.

use super::*;
use crate::testing::{Rng, bit_identical};

struct Case {
    weights: OwnedWeights,
    act: DType,
    /// Relative tolerance against the reference (per element, scaled by the
    /// magnitude of the dot product): quantised paths compute the same
    /// integers, float paths differ only in summation order.
    tol: f32,
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
    let q4 = crate::ggml::quantize_q4_0(&data, k).unwrap();
    let q4 = OwnedWeights::Q4_0 { n, k, data: crate::ggml::q4_0_as_bytes(&q4).to_vec(), bias: None };
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
        let packed =
            PackedWeights::pack(&c.weights.as_ref(), &PackOptions { activation: c.act, ..Default::default() }).unwrap();
        for m in [1, 5, 33] {
            let x = rng.vec_f32(m * k);
            let want = reference_out(&c, m, &x);
            let mag = magnitude(&c, m, &x);
            let got1 = run(&packed, c.act, m, &x, Parallelism::Sequential).unwrap();
            let got3 = run(&packed, c.act, m, &x, Parallelism::Rayon(3)).unwrap();
            assert!(bit_identical(&got1, &got3), "{:?} m={m}: thread counts differ", c.weights.as_ref().kind());
            for i in 0..got1.len() {
                let tol = c.tol * mag[i];
                assert!(
                    (got1[i] - want[i]).abs() <= tol,
                    "{:?}/{:?} m={m} [{i}]: {} vs {} (tol {tol}) via {:?}",
                    c.weights.as_ref().kind(),
                    c.act,
                    got1[i],
                    want[i],
                    packed.kernel_for(m)
                );
            }
        }
    }
}

/// One scratch shared by calls that change weights, kinds and `m`, and
/// outlives weights (whose successors may reuse their address): the
/// steady-state plan it keeps follows every change. Each output equals the
/// checked path's (several workers) bit for bit; on Arm, the families with
/// a steady-state path take it.
#[test]
fn a_shared_scratch_follows_weights_and_rows() {
    crate::testing::enable_threading_for_tests();
    let mut rng = Rng::new(23);
    let (n, k) = (37, 128);
    let mut scratch = Scratch::default();
    let mut planned = Vec::new();
    for round in 0..3 {
        // Packed anew each round: the previous round's weights are gone.
        let all: Vec<(PackedWeights, DType)> = cases(&mut rng, n, k)
            .into_iter()
            .map(|c| {
                let opts = PackOptions { activation: c.act, ..Default::default() };
                (PackedWeights::pack(&c.weights.as_ref(), &opts).unwrap(), c.act)
            })
            .collect();
        for (w, act) in &all {
            for m in [1, 4, 4, 1, 2] {
                let x = rng.vec_f32(m * k);
                let got = run_in(w, *act, m, &x, Parallelism::Sequential, &mut scratch).unwrap();
                let checked = run(w, *act, m, &x, Parallelism::Rayon(3)).unwrap();
                let kernel = w.kernel_for(m);
                assert!(bit_identical(&got, &checked), "round {round} {:?}/{act:?} m={m} via {kernel:?}", w.kind);
                if scratch.plan.as_ref().is_some_and(|p| p.ready.is_some()) {
                    planned.extend(kernel);
                }
            }
        }
    }
    planned.sort_unstable();
    planned.dedup();
    println!("steady-state path taken by {} kernels: {planned:?}", planned.len());
    #[cfg(target_arch = "aarch64")]
    assert!(!planned.is_empty(), "no call took the steady-state path");
}

#[test]
fn save_load_round_trip_and_tampering() {
    let mut rng = Rng::new(12);
    let (n, k) = (19, 64);
    for c in cases(&mut rng, n, k) {
        let packed =
            PackedWeights::pack(&c.weights.as_ref(), &PackOptions { activation: c.act, ..Default::default() }).unwrap();
        let bytes = match packed.to_bytes() {
            Ok(b) => b,
            Err(e) => {
                // Nothing packed (no kernel on this CPU): saving says so.
                assert!(packed.layouts().is_empty(), "{e}");
                continue;
            }
        };
        let x = rng.vec_f32(3 * k);
        let want = run(&packed, c.act, 3, &x, Parallelism::Sequential).unwrap();
        let loaded = PackedWeights::from_bytes(&bytes).unwrap();
        assert_eq!(loaded.layouts(), packed.layouts());
        assert!(bit_identical(&run(&loaded, c.act, 3, &x, Parallelism::Sequential).unwrap(), &want));
        // Zero-copy: an Arc'd buffer whose start is 64-byte aligned.
        let mut aligned = crate::buffer::AlignedBuf::zeroed(bytes.len());
        aligned.as_mut_slice().copy_from_slice(&bytes);
        struct Shared(crate::buffer::AlignedBuf);
        impl AsRef<[u8]> for Shared {
            fn as_ref(&self) -> &[u8] {
                self.0.as_slice()
            }
        }
        let shared = PackedWeights::from_shared(Arc::new(Shared(aligned))).unwrap();
        assert!(shared.slots.iter().all(|s| s.rhs.is_shared()));
        assert!(bit_identical(&run(&shared, c.act, 3, &x, Parallelism::Sequential).unwrap(), &want));
        // Every truncation and a flipped byte anywhere is rejected.
        for len in [0, 8, 63, bytes.len() / 2, bytes.len() - 1] {
            assert!(PackedWeights::from_bytes(&bytes[..len]).is_err());
        }
        for at in [0, 9, 17, 40, 70, bytes.len() - 1] {
            let mut t = bytes.clone();
            t[at] ^= 0x10;
            assert!(PackedWeights::from_bytes(&t).is_err(), "flip at {at} accepted");
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
    let data = rng.vec_f32(n * k);
    let w = WeightsRef::F32(FloatWeights { n, k, order: Order::NxK, data: &data, bias: None });
    let none =
        PackedWeights::pack(&w, &PackOptions { features: Some(Features::none()), ..Default::default() }).unwrap();
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

#[test]
fn load_from_a_memory_mapped_file_without_copying() {
    let mut rng = Rng::new(14);
    let (n, k) = (21, 64);
    let data = rng.vec_f32(n * k);
    let w = WeightsRef::F32(FloatWeights { n, k, order: Order::NxK, data: &data, bias: None });
    let packed = PackedWeights::pack(&w, &PackOptions::default()).unwrap();
    let Ok(bytes) = packed.to_bytes() else { return }; // no kernel here: nothing to save
    let path = std::env::temp_dir().join(format!("kleidiai-mmap-test-{}.kaiw", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    // SAFETY: the file is private to this test and not modified while mapped.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let loaded = PackedWeights::from_shared(Arc::new(map)).unwrap();
    std::fs::remove_file(&path).ok();
    assert!(loaded.slots.iter().all(|s| s.rhs.is_shared()), "payloads stay in the mapping");
    let x = rng.vec_f32(4 * k);
    let a = run(&packed, DType::F32, 4, &x, Parallelism::Sequential).unwrap();
    let b = run(&loaded, DType::F32, 4, &x, Parallelism::Sequential).unwrap();
    assert!(bit_identical(&a, &b));
}

/// Issue 15: bytes after the last payload used to load without complaint.
/// Every loader now refuses them, naming how many; the exact file loads.
#[test]
fn every_loader_refuses_trailing_bytes() {
    let mut rng = Rng::new(16);
    let (n, k) = (19, 64);
    let data = rng.vec_f32(n * k);
    let w = WeightsRef::F32(FloatWeights { n, k, order: Order::NxK, data: &data, bias: None });
    let packed = PackedWeights::pack(&w, &PackOptions::default()).unwrap();
    let Ok(bytes) = packed.to_bytes() else { return }; // no kernel here: nothing to save
    type Loader = fn(&[u8]) -> Result<PackedWeights>;
    let loaders: [(&str, Loader); 3] = [
        ("from_bytes", PackedWeights::from_bytes),
        ("from_shared", |b| PackedWeights::from_shared(Arc::new(crate::buffer::AlignedBuf::from_bytes(b)))),
        ("from_shared_unverified", |b| {
            PackedWeights::from_shared_unverified(Arc::new(crate::buffer::AlignedBuf::from_bytes(b)))
        }),
    ];
    for (name, load) in loaders {
        assert_eq!(load(&bytes).unwrap().to_bytes().unwrap(), bytes, "{name}: the exact file");
        for extra in [1usize, 64, 4096] {
            let mut f = bytes.clone();
            f.resize(bytes.len() + extra, 0);
            let err = load(&f).unwrap_err();
            assert_eq!(
                err,
                Error::File { what: "packed-weight file", reason: FileError::TrailingBytes { extra: extra as u64 } },
                "{name}: {extra} bytes appended"
            );
            assert!(err.to_string().contains(&format!("{extra} bytes after the declared end")), "{name}: {err}");
        }
    }
}

#[test]
fn a_file_packed_for_another_vector_length_is_rejected_with_the_reason() {
    let mut rng = Rng::new(15);
    let (n, k) = (33, 64);
    let data = rng.vec_f32(n * k);
    let w = WeightsRef::F32(FloatWeights { n, k, order: Order::NxK, data: &data, bias: None });
    let packed = PackedWeights::pack(&w, &PackOptions { non_sme_layout: false, ..Default::default() }).unwrap();
    let bytes = match packed.to_bytes() {
        Ok(b) => b,
        Err(e) => {
            // Only a CPU without any kernel (reference fallback) has no layout to save.
            assert!(packed.kernel_for(1).is_none() && e.to_string().contains("nothing was packed"), "{e}");
            eprintln!("note: no packed layout on this CPU; only the refusal to save was checked");
            return;
        }
    };
    // Rewrite every slot (GEMM and GEMV layouts may be separate slots) as if
    // packed on a CPU with twice the vector length (or, for fixed-width
    // layouts, with one), header checksum made valid again.
    let mut h = file::FileHeader::parse(&bytes).unwrap();
    for s in &mut h.slots {
        s.vector_bytes = if s.vector_bytes == 0 { 32 } else { s.vector_bytes * 2 };
        s.r *= 2;
    }
    let mut forged = h.to_bytes().unwrap();
    forged.extend_from_slice(&bytes[forged.len()..]);
    let err = PackedWeights::from_bytes(&forged).unwrap_err().to_string();
    assert!(err.contains("vl=") && err.contains("needs"), "{err}");
    // Another KleidiAI version is rejected too.
    let mut h = file::FileHeader::parse(&bytes).unwrap();
    h.kleidiai_version = "1.29.0".into();
    let mut other = h.to_bytes().unwrap();
    other.extend_from_slice(&bytes[other.len()..]);
    let err = PackedWeights::from_bytes(&other).unwrap_err();
    assert!(
        matches!(&err, Error::File { reason: FileError::KleidiaiVersion { file, .. }, .. } if file == "1.29.0"),
        "{err}"
    );
    assert!(err.to_string().contains("repack"), "{err}");
}

/// A file whose shape or payload length was changed with every checksum
/// recomputed (checksums catch accidents, not a buggy writer or a crafted
/// file) is refused: a kernel trusts the payload size its layout implies,
/// so a payload shorter than the shape needs would be read past its end.
#[test]
fn rewritten_shape_with_valid_checksums_is_refused() {
    let mut rng = Rng::new(14);
    let (n, k) = (5, 64);
    let data = rng.vec_f32(n * k);
    let w = WeightsRef::F32(FloatWeights { n, k, order: Order::NxK, data: &data, bias: None });
    let packed = PackedWeights::pack(&w, &PackOptions::default()).unwrap();
    let Ok(bytes) = packed.to_bytes() else {
        assert!(packed.layouts().is_empty(), "nothing packed on this CPU, nothing to load");
        return;
    };
    let h = file::FileHeader::parse(&bytes).unwrap();
    let payload = |s: &file::SlotHeader| bytes[s.offset as usize..(s.offset + s.len) as usize].to_vec();
    let rebuild = |h: &file::FileHeader, payloads: &[Vec<u8>]| {
        let mut h = h.clone();
        let mut offset = file::FileHeader::header_len(h.slots.len());
        for (s, p) in h.slots.iter_mut().zip(payloads) {
            (s.offset, s.len, s.crc32) = (offset as u64, p.len() as u64, crc32fast::hash(p));
            offset = (offset + p.len()).div_ceil(64) * 64;
        }
        let mut out = h.to_bytes().unwrap();
        for p in payloads {
            out.resize(out.len().div_ceil(64) * 64, 0);
            out.extend_from_slice(p);
        }
        out
    };
    let payloads: Vec<Vec<u8>> = h.slots.iter().map(payload).collect();
    assert!(PackedWeights::from_bytes(&rebuild(&h, &payloads)).is_ok(), "an unchanged rebuild loads");
    // More K than the payload holds.
    let wider = file::FileHeader { k: k as u64 + 32, ..h.clone() };
    assert!(PackedWeights::from_bytes(&rebuild(&wider, &payloads)).is_err(), "k + 32 accepted");
    // More rows than the payload holds (a whole extra row block).
    let taller = file::FileHeader { n: (n + h.slots[0].r as usize) as u64, ..h.clone() };
    assert!(PackedWeights::from_bytes(&rebuild(&taller, &payloads)).is_err(), "n + nr accepted");
    // A payload cut short, or one slot twice.
    let mut short = payloads.clone();
    let cut = short[0].len() - 1;
    short[0].truncate(cut);
    assert!(PackedWeights::from_bytes(&rebuild(&h, &short)).is_err(), "short payload accepted");
    let mut twice = h.clone();
    twice.slots.insert(0, h.slots[0].clone());
    let mut p2 = payloads.clone();
    p2.insert(0, payloads[0].clone());
    if twice.slots.len() <= file::MAX_SLOTS {
        assert!(PackedWeights::from_bytes(&rebuild(&twice, &p2)).is_err(), "duplicate slot accepted");
    }
}

/// Every pairing of the policy names kernels of its weight kind and
/// activation type, and where this CPU runs both, the GEMV reads the GEMM's
/// layout (at several shapes, tails included); the kernels no pairing names
/// are counted (reachable through `families`).
#[test]
fn policy_pairings_share_one_layout() {
    let f = Features::current();
    let mut checked = 0;
    for kind in WeightKind::ALL {
        for act in [DType::F32, DType::F16, DType::Bf16] {
            let pairs = policy::pairings(kind, act);
            assert_eq!(pairs.is_empty(), !operation_exists(kind, act), "{kind:?} {act:?}");
            if registry::kernels().is_empty() {
                continue;
            }
            for p in pairs {
                let g = backend_for(kind, act, p.gemm).unwrap_or_else(|| panic!("{} for {kind:?} {act:?}", p.gemm));
                assert!(!p.why.is_empty());
                if let Some(fast) = p.faster_gemv {
                    let v = backend_for(kind, act, fast).unwrap_or_else(|| panic!("{fast} for {kind:?} {act:?}"));
                    assert_eq!(v.info().tile, TileKind::Gemv, "{fast}");
                    if v.info().supported(&f).is_ok() && g.info().supported(&f).is_ok() {
                        let bl = if matches!(kind, WeightKind::Int4Block) { 32 } else { 0 };
                        assert_ne!(g.rhs_layout(64, 256, bl).unwrap(), v.rhs_layout(64, 256, bl).unwrap(), "{fast}");
                    }
                }
                let Some(v) = p.gemv else { continue };
                let v = backend_for(kind, act, v).unwrap_or_else(|| panic!("{v} for {kind:?} {act:?}"));
                assert_eq!(g.info().tile, TileKind::Gemm, "{}", p.gemm);
                assert_eq!(v.info().tile, TileKind::Gemv, "{v:?}");
                if g.info().supported(&f).is_err() || v.info().supported(&f).is_err() {
                    continue;
                }
                let bl = if matches!(kind, WeightKind::Int4Block | WeightKind::Int4AsymBlock) { 32 } else { 0 };
                for (n, k) in [(64, 256), (100, 96), (1, 32), (257, 4160)] {
                    assert_eq!(g.rhs_layout(n, k, bl).unwrap(), v.rhs_layout(n, k, bl).unwrap(), "{p:?} {n}x{k}");
                }
                checked += 1;
            }
        }
    }
    println!("{checked} pairings run here and share their layout");
}

/// Default packing keeps one layout, and with it the policy's GEMV serves
/// one row wherever it runs.
#[test]
fn default_packing_keeps_one_layout_for_gemm_and_gemv() {
    let mut rng = Rng::new(5);
    for c in cases(&mut rng, 40, 128) {
        let w = c.weights.as_ref();
        let packed = PackedWeights::pack(&w, &PackOptions { activation: c.act, ..Default::default() }).unwrap();
        assert!(packed.layouts().len() <= 1, "{:?}: {:?}", w.kind(), packed.layouts());
        let Some((gemm, gemv)) = packed.layouts().first().copied() else { continue };
        let pairing = policy::pairings(w.kind(), c.act).iter().find(|p| p.gemm == gemm).expect("a policy pairing");
        assert_eq!(
            gemv,
            pairing.gemv.filter(|v| registry::by_name(v).is_some_and(|i| i.supported(&Features::current()).is_ok()))
        );
        if let Some(v) = gemv {
            assert_eq!(packed.kernel_for(1), Some(v));
        }
        assert_eq!(packed.kernel_for(7), Some(gemm));
    }
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
        let w = c.weights.as_ref();
        let one = PackedWeights::pack(&w, &PackOptions { activation: c.act, ..Default::default() }).unwrap();
        let two =
            PackedWeights::pack(&w, &PackOptions { activation: c.act, separate_gemv: true, ..Default::default() })
                .unwrap();
        let Some((gemm, _)) = one.layouts().first().copied() else { continue };
        let faster = policy::pairings(w.kind(), c.act).iter().find(|p| p.gemm == gemm).and_then(|p| p.faster_gemv);
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

/// The asymmetric int4 packers need finite activations. Under
/// `NonFinite::Kernel` nothing scans them, so a call with a NaN row must
/// not take the steady-state path (which skips the packer's finite check)
/// even when a plan for these weights and `m` is ready: it takes the
/// checked path, which refuses the row. Under the default policy the same
/// call succeeds with that row NaN.
#[test]
fn unscanned_non_finite_rows_never_reach_a_packer_that_needs_finite_values() {
    let (n, k, bl) = (8, 64, 32);
    let nib: Vec<u8> = (0..n * k / 2).map(|i| (i * 37 % 251) as u8).collect();
    let s: Vec<f32> = (0..n * k / bl).map(|i| 0.01 + 0.001 * i as f32).collect();
    let w = Weights::int4_asym_blocks(n, k, bl, &nib, &s, &s).unwrap();
    let mut packed = PackedWeights::pack(&w, &PackOptions::default()).unwrap();
    packed.set_non_finite(NonFinite::Kernel);
    let mut scratch = Scratch::default();
    let seq = Parallelism::Sequential;
    let mut x = vec![0.5f32; k];
    let mut y = vec![0f32; n];
    for _ in 0..2 {
        packed.matmul(1, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE, seq, &mut scratch).unwrap();
    }
    x[3] = f32::NAN;
    let r = packed.matmul(1, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE, seq, &mut scratch);
    assert!(r.is_err(), "a NaN row reached {:?} unchecked: {y:?}", packed.kernel_for(1));
    packed.set_non_finite(NonFinite::Propagate);
    packed.matmul(1, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE, seq, &mut scratch).unwrap();
    assert!(y.iter().all(|v| v.is_nan()), "{y:?}");
}
