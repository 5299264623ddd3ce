//! Tests of the ggml path: results against a plain reference, ggml's kernel
//! order, F16 batch broadcast, strided tensors, get_rows, bad input, and
//! bit-equality with the same kernel driven directly through its family.

use super::*;
use crate::error::{Error, FileError};
use crate::packed::Clamp;
use crate::par::Parallelism;
use crate::registry;
use crate::testing::{Rng, bit_identical};
use crate::weights::Scratch;
use half::f16;

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn weights_bytes(typ: GgmlType, w: &[f32], n: usize, k: usize) -> Vec<u8> {
    match typ {
        GgmlType::F32 => bytes_f32(w),
        GgmlType::F16 => w.iter().flat_map(|x| f16::from_f32(*x).to_le_bytes()).collect(),
        GgmlType::Q4_0 => q4_0_as_bytes(&quantize_q4_0(w, k).unwrap()).to_vec(),
        GgmlType::Q8_0 => q8_0_as_bytes(&quantize_q8_0(w, k).unwrap()).to_vec(),
    }
    .into_iter()
    .take(n * typ.row_bytes(k).unwrap())
    .collect()
}

/// 2-D weights: `n` contiguous rows of `k` values of `typ` in `bytes`.
pub(super) fn weights_tensor(typ: GgmlType, n: usize, k: usize, bytes: &[u8]) -> Tensor<'_> {
    let ne = [k as i64, n as i64, 1, 1];
    Tensor { typ, ne, nb: Tensor::contiguous_strides(typ, ne).unwrap(), data: bytes }
}

/// `rows` contiguous F32 rows of `cols` values in `data` (2-D).
pub(super) fn f32_tensor(cols: usize, rows: usize, data: &[u8]) -> Tensor<'_> {
    let (ne, nb) = f32_layout(cols, rows);
    Tensor { typ: GgmlType::F32, ne, nb, data }
}

/// [`f32_tensor`], written to.
pub(super) fn f32_tensor_mut(cols: usize, rows: usize, data: &mut [u8]) -> TensorMut<'_> {
    let (ne, nb) = f32_layout(cols, rows);
    TensorMut { typ: GgmlType::F32, ne, nb, data }
}

/// `ne` and `nb` of `rows` contiguous F32 rows of `cols` values.
fn f32_layout(cols: usize, rows: usize) -> ([i64; 4], [usize; 4]) {
    ([cols as i64, rows as i64, 1, 1], [4, 4 * cols, 4 * cols * rows, 4 * cols * rows])
}

/// The weights as the kernels see them (after ggml's quantisation).
fn dequant(typ: GgmlType, bytes: &[u8], n: usize, k: usize) -> Vec<f32> {
    let all: Vec<f32> = match typ {
        GgmlType::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
        GgmlType::F16 => bytes.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        GgmlType::Q4_0 => q4_0_from_bytes(bytes).unwrap().iter().flat_map(|b| b.dequantize()).collect(),
        GgmlType::Q8_0 => q8_0_blocks_from_bytes(bytes).unwrap().iter().flat_map(|b| b.dequantize()).collect(),
    };
    all.into_iter().take(n * k).collect()
}

/// Relative tolerance per output (scaled by sum |x w| + 1): F32 kernels
/// round only in summation; Q4_0/Q8_0 quantise the activations to int8 (one
/// step of 1/127 of the block maximum, or 1/255 of the row range), and Q8_0
/// weights are requantised per row; F16 goes through bf16 (8-bit mantissa).
fn tol(typ: GgmlType) -> f32 {
    match typ {
        GgmlType::F32 => 1e-5,
        GgmlType::F16 => 1.5e-2,
        GgmlType::Q4_0 => 1.5e-2,
        GgmlType::Q8_0 => 2e-2,
    }
}

#[allow(clippy::too_many_arguments)] // one test case: each is a dimension
fn run_case(typ: GgmlType, n: usize, k: usize, m: usize, ne02: usize, ne12: usize, pad: usize, rng: &mut Rng) {
    let row = typ.row_bytes(k).unwrap();
    let wf: Vec<Vec<f32>> = (0..ne02).map(|_| rng.vec_f32(n * k)).collect();
    let wb: Vec<Vec<u8>> = wf.iter().map(|w| weights_bytes(typ, w, n, k)).collect();
    let src0_bytes: Vec<u8> = wb.concat();
    let ne0 = [k as i64, n as i64, ne02 as i64, 1];
    let nb0 = Tensor::contiguous_strides(typ, ne0).unwrap();
    let src0 = Tensor { typ, ne: ne0, nb: nb0, data: &src0_bytes };
    let packed = GgmlWeights::repack(&src0).unwrap();
    assert_eq!(packed.shape(), (k, n));
    let _ = row;

    // src1 with rows `pad` floats longer than k (a strided view).
    let x: Vec<f32> = rng.vec_f32(ne12 * m * k);
    let rs = k + pad;
    let mut x_strided = vec![0f32; ne12 * m * rs];
    for b in 0..ne12 {
        for i in 0..m {
            x_strided[(b * m + i) * rs..(b * m + i) * rs + k].copy_from_slice(&x[(b * m + i) * k..(b * m + i + 1) * k]);
        }
    }
    let xb = bytes_f32(&x_strided);
    let src1 = Tensor {
        typ: GgmlType::F32,
        ne: [k as i64, m as i64, ne12 as i64, 1],
        nb: [4, 4 * rs, 4 * rs * m, 4 * rs * m * ne12],
        data: &xb,
    };
    let ds = n + pad;
    let ne_d = [n as i64, m as i64, ne12 as i64, 1];
    let nb_d = [4, 4 * ds, 4 * ds * m, 4 * ds * m * ne12];
    let mut out = vec![0u8; 4 * ds * m * ne12];
    let mut out1 = vec![0u8; out.len()];
    let mut scratch = MulMatScratch::default();
    let mut dst = TensorMut { typ: GgmlType::F32, ne: ne_d, nb: nb_d, data: &mut out };
    packed.mul_mat(&src1, &mut dst, Parallelism::Rayon(3), &mut scratch).unwrap();
    let mut dst1 = TensorMut { typ: GgmlType::F32, ne: ne_d, nb: nb_d, data: &mut out1 };
    packed.mul_mat(&src1, &mut dst1, Parallelism::Sequential, &mut scratch).unwrap();
    assert_eq!(out, out1, "{typ:?}: thread counts differ");

    let r = ne12 / ne02;
    for b in 0..ne12 {
        let wd = dequant(typ, &wb[b / r], n, k);
        for i in 0..m {
            for j in 0..n {
                let xs = &x[(b * m + i) * k..(b * m + i + 1) * k];
                let want: f64 = (0..k).map(|p| xs[p] as f64 * wd[j * k + p] as f64).sum();
                let mag: f64 = (0..k).map(|p| (xs[p] * wd[j * k + p]).abs() as f64).sum::<f64>() + 1.0;
                let at = 4 * ((b * m + i) * ds + j);
                let got = f32::from_le_bytes(out[at..at + 4].try_into().unwrap()) as f64;
                assert!(
                    (got - want).abs() <= tol(typ) as f64 * mag,
                    "{typ:?} b={b} i={i} j={j}: {got} vs {want} via {:?}",
                    packed.kernel_for(m)
                );
            }
            // Padding columns of dst are untouched.
            for j in n..ds {
                let at = 4 * ((b * m + i) * ds + j);
                assert_eq!(&out[at..at + 4], &[0, 0, 0, 0]);
            }
        }
    }
}

#[test]
fn mul_mat_matches_reference_for_every_type() {
    crate::testing::enable_threading_for_tests();
    let mut rng = Rng::new(21);
    for typ in [GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q8_0] {
        for m in [1, 7] {
            run_case(typ, 37, 64, m, 1, 2, 3, &mut rng);
        }
    }
    // F16 broadcast: 2 weight batches serve 4 activation batches.
    run_case(GgmlType::F16, 9, 32, 3, 2, 4, 0, &mut rng);
}

#[test]
fn kernel_order_is_ggmls() {
    let f = crate::cpu::Features::current();
    let mut rng = Rng::new(22);
    for typ in [GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q8_0] {
        let (n, k) = (8, 64);
        let bytes = weights_bytes(typ, &rng.vec_f32(n * k), n, k);
        let packed = GgmlWeights::repack(&weights_tensor(typ, n, k, &bytes)).unwrap();
        let runnable: Vec<&str> = kernel_table(typ)
            .iter()
            .filter(|(g, _)| registry::by_name(g).is_some_and(|i| i.supported(&f).is_ok()))
            .map(|(g, _)| *g)
            .collect();
        // ggml's slots: the first runnable entry, plus the first non-SME
        // one when the first is SME.
        let mut expect: Vec<&str> = runnable.iter().take(1).copied().collect();
        if expect.first().is_some_and(|g| g.contains("_sme")) {
            expect.extend(runnable.iter().find(|g| !g.contains("_sme")));
        }
        let held: Vec<&str> = packed.layouts().iter().map(|(g, _)| *g).collect();
        assert_eq!(held, expect, "{typ:?}: slots follow ggml's table order");
        if let Some(first) = runnable.first() {
            assert_eq!(packed.kernel_for(64), Some(*first));
        } else {
            assert_eq!(packed.kernel_for(64), None, "no kernel: the reference");
        }
        // SME and SME2 are exact: an SME2 entry never runs on SME-only CPUs.
        for (g, _) in packed.layouts() {
            let info = registry::by_name(g).unwrap();
            assert!(info.supported(&f).is_ok());
        }
    }
}

#[test]
fn same_bits_as_the_family_kernel() {
    // The Q4_0 path with its first runnable kernel equals that kernel driven
    // through its family API on the same bytes (what ggml computes).
    let f = crate::cpu::Features::current();
    let mut rng = Rng::new(23);
    let (n, k, m) = (19, 128, 5);
    let bytes = weights_bytes(GgmlType::Q4_0, &rng.vec_f32(n * k), n, k);
    let packed = GgmlWeights::repack(&weights_tensor(GgmlType::Q4_0, n, k, &bytes)).unwrap();
    let Some(name) = packed.kernel_for(m) else {
        // Only a CPU without any of ggml's Q4_0 kernels serves Q4_0 by the reference.
        let f = crate::cpu::Features::current();
        assert!(!f.has(crate::cpu::CpuFeature::Dotprod), "a dotprod CPU must run one of ggml's Q4_0 kernels");
        eprintln!(
            "same_bits_as_the_family_kernel: no Q4_0 kernel of ggml's table runs here (no dotprod): not compared"
        );
        return;
    };
    let x = rng.vec_f32(m * k);
    let xb = bytes_f32(&x);
    let src1 = f32_tensor(k, m, &xb);
    let mut out = vec![0u8; 4 * n * m];
    let mut dst = f32_tensor_mut(n, m, &mut out);
    packed.mul_mat(&src1, &mut dst, Parallelism::Sequential, &mut MulMatScratch::default()).unwrap();
    let got: Vec<f32> = out.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    #[cfg(target_arch = "aarch64")]
    {
        use crate::formats::{BlockInt4, Q4_0};
        let w = BlockInt4::Q4_0(Q4_0 { n, k, data: &bytes, bias: None });
        let mut want = vec![0f32; m * n];
        if let Some(kern) = crate::families::matmul_clamp_f32_qsi8d32p_qsi4c32p::Kernel::by_name(name) {
            let rhs = kern.pack_rhs(w).unwrap();
            kern.matmul(m, &x, &rhs, &mut want, Clamp::NONE, Parallelism::Sequential).unwrap();
        } else if let Some(kern) = crate::families::matmul_clamp_f32_f16p_qsi4c32p::Kernel::by_name(name) {
            let rhs = kern.pack_rhs(w).unwrap();
            kern.matmul(m, &x, &rhs, &mut want, Clamp::NONE, Parallelism::Sequential).unwrap();
        } else {
            panic!("{name} is not a Q4_0 kernel of ggml's table");
        }
        assert!(bit_identical(&got, &want), "{name}: ggml path and family call differ");
    }
    let _ = (f, got, name);
}

#[test]
fn get_rows_returns_the_weights() {
    let mut rng = Rng::new(24);
    for typ in [GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q8_0] {
        let (n, k) = (11, 64);
        let bytes = weights_bytes(typ, &rng.vec_f32(n * k), n, k);
        let packed = GgmlWeights::repack(&weights_tensor(typ, n, k, &bytes)).unwrap();
        let wd = dequant(typ, &bytes, n, k);
        let rows = [0i64, 5, 10, 5];
        let mut out = vec![0f32; rows.len() * k];
        packed.get_rows(&rows, &mut out).unwrap();
        for (i, &r) in rows.iter().enumerate() {
            for c in 0..k {
                let (got, want) = (out[i * k + c], wd[r as usize * k + c]);
                // Q8_0 is requantised per row (half a step of max|row|/127);
                // F16 may sit in bf16 on the SME2 path (8-bit mantissa).
                let t = match typ {
                    GgmlType::Q8_0 => {
                        0.51 * wd[r as usize * k..(r as usize + 1) * k].iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0
                    }
                    GgmlType::F16 => want.abs() / 128.0,
                    _ => 0.0,
                };
                assert!((got - want).abs() <= t, "{typ:?} row {r} col {c}: {got} vs {want}");
            }
        }
        assert!(packed.get_rows(&[n as i64], &mut out).is_err());
        assert!(packed.get_rows(&[-1], &mut out).is_err());
        assert!(packed.get_rows(&rows, &mut out[..10]).is_err());
    }
}

#[test]
fn bad_input_is_an_error() {
    let (n, k) = (4, 64);
    let bytes = weights_bytes(GgmlType::Q4_0, &vec![0.5; n * k], n, k);
    let ne = [k as i64, n as i64, 1, 1];
    let nb = Tensor::contiguous_strides(GgmlType::Q4_0, ne).unwrap();
    let src0 = Tensor { typ: GgmlType::Q4_0, ne, nb, data: &bytes };
    // Row length not a multiple of 32.
    assert!(GgmlWeights::repack(&Tensor { ne: [48, 4, 1, 1], ..src0 }).is_err());
    // Non-contiguous rows.
    assert!(GgmlWeights::repack(&Tensor { nb: [36, 36, 144, 144], ..src0 }).is_err());
    // Truncated data.
    assert!(GgmlWeights::repack(&Tensor { data: &bytes[..bytes.len() - 1], ..src0 }).is_err());
    // Batched quantised weights.
    assert!(GgmlWeights::repack(&Tensor { ne: [64, 2, 2, 1], nb: [18, 36, 72, 144], ..src0 }).is_err());
    let packed = GgmlWeights::repack(&src0).unwrap();
    let x = vec![0u8; 4 * k * 2];
    let mut out = vec![0u8; 4 * n * 2];
    let mut s = MulMatScratch::default();
    let good1 = Tensor { typ: GgmlType::F32, ne: [k as i64, 2, 1, 1], nb: [4, 4 * k, 8 * k, 8 * k], data: &x };
    fn dst(out: &mut [u8], n: usize) -> TensorMut<'_> {
        TensorMut { typ: GgmlType::F32, ne: [n as i64, 2, 1, 1], nb: [4, 4 * n, 8 * n, 8 * n], data: out }
    }
    packed.mul_mat(&good1, &mut dst(&mut out, n), Parallelism::Sequential, &mut s).unwrap();
    // Wrong activation type, wrong k, wrong dst shape, strided rows.
    assert!(
        packed
            .mul_mat(&Tensor { typ: GgmlType::F16, ..good1 }, &mut dst(&mut out, n), Parallelism::Sequential, &mut s)
            .is_err()
    );
    assert!(
        packed
            .mul_mat(&Tensor { ne: [32, 2, 1, 1], ..good1 }, &mut dst(&mut out, n), Parallelism::Sequential, &mut s)
            .is_err()
    );
    assert!(
        packed
            .mul_mat(
                &Tensor { nb: [8, 4 * k, 8 * k, 8 * k], ..good1 },
                &mut dst(&mut out, n),
                Parallelism::Sequential,
                &mut s
            )
            .is_err()
    );
    let mut small = vec![0u8; 4 * n];
    assert!(packed.mul_mat(&good1, &mut dst(&mut small, n), Parallelism::Sequential, &mut s).is_err());
    // GGML_KLEIDIAI_SME values.
    assert_eq!(parse_sme_setting(None).unwrap(), None);
    assert_eq!(parse_sme_setting(Some("0")).unwrap(), Some(0));
    assert_eq!(parse_sme_setting(Some(" 3 ")).unwrap(), Some(3));
    assert!(parse_sme_setting(Some("-1")).is_err() && parse_sme_setting(Some("yes")).is_err());
}

#[test]
fn hybrid_runs_sme_and_neon_on_disjoint_columns() {
    // Two slots (SME2 + a NEON tier) exist on `max`; elsewhere hybrid does
    // not apply and says so.
    let mut rng = Rng::new(25);
    for typ in [GgmlType::Q4_0, GgmlType::Q8_0] {
        let (n, k) = (200, 64);
        let bytes = weights_bytes(typ, &rng.vec_f32(n * k), n, k);
        let packed = GgmlWeights::repack(&weights_tensor(typ, n, k, &bytes)).unwrap();
        let w = packed.batch(0);
        for m in [1, 9] {
            let x = rng.vec_f32(m * k);
            let mut y = vec![0f32; m * n];
            let mut pair = [Scratch::default(), Scratch::default()];
            let used = w.matmul_hybrid(m, &x, &mut y, Clamp::NONE, 3, 1, &mut pair).unwrap();
            let sme_slot = packed.layouts().first().is_some_and(|(g, _)| g.contains("_sme"));
            assert_eq!(used, sme_slot && packed.layouts().len() == 2, "{typ:?} {:?}", packed.layouts());
            if !used {
                continue;
            }
            let mut again = vec![0f32; m * n];
            w.matmul_hybrid(m, &x, &mut again, Clamp::NONE, 3, 1, &mut pair).unwrap();
            assert!(bit_identical(&y, &again), "hybrid repeats bit for bit");
            let (mut y0, mut y1) = (vec![0f32; m * n], vec![0f32; m * n]);
            w.matmul_slot(0, m, &x, &mut y0, &mut Scratch::default()).unwrap();
            w.matmul_slot(1, m, &x, &mut y1, &mut Scratch::default()).unwrap();
            // Every column comes bit for bit from one of the two kernels:
            // a prefix from SME, the rest from NEON.
            let from_sme = |j: usize| (0..m).all(|i| y[i * n + j].to_bits() == y0[i * n + j].to_bits());
            let from_neon = |j: usize| (0..m).all(|i| y[i * n + j].to_bits() == y1[i * n + j].to_bits());
            // (Where both kernels give the same bits, any split fits.)
            let split = (0..=n).find(|&s| (0..s).all(from_sme) && (s..n).all(from_neon));
            assert!(split.is_some(), "{typ:?} m={m}: output is not an SME prefix and a NEON suffix");
        }
    }
}

#[test]
fn serialised_weights_round_trip_in_place() {
    let mut rng = Rng::new(26);
    for typ in [GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q8_0] {
        let (n, k, m) = (13, 64, 3);
        let ne02 = if typ == GgmlType::F16 { 2 } else { 1 };
        let bytes: Vec<u8> = (0..ne02).flat_map(|_| weights_bytes(typ, &rng.vec_f32(n * k), n, k)).collect();
        let ne = [k as i64, n as i64, ne02 as i64, 1];
        let src0 = Tensor { typ, ne, nb: Tensor::contiguous_strides(typ, ne).unwrap(), data: &bytes };
        let packed = GgmlWeights::repack(&src0).unwrap();
        let Ok(ser) = packed.to_bytes() else {
            assert!(packed.layouts().is_empty(), "only weights without a packed layout cannot be saved");
            continue;
        };
        let mut aligned = crate::AlignedBuf::zeroed(ser.len());
        aligned.as_mut_slice().copy_from_slice(&ser);
        let shared = std::sync::Arc::new(aligned);
        let view = GgmlWeights::from_shared(shared.clone(), true).unwrap();
        let fast = GgmlWeights::from_shared(shared, false).unwrap();
        assert_eq!(view.layouts(), packed.layouts());
        let x = bytes_f32(&rng.vec_f32(m * k * ne02));
        let src1 = Tensor {
            typ: GgmlType::F32,
            ne: [k as i64, m as i64, ne02 as i64, 1],
            nb: [4, 4 * k, 4 * k * m, 4 * k * m * ne02],
            data: &x,
        };
        let nb_d = [4, 4 * n, 4 * n * m, 4 * n * m * ne02];
        let ne_d = [n as i64, m as i64, ne02 as i64, 1];
        let mut outs = Vec::new();
        for w in [&packed, &view, &fast] {
            let mut out = vec![0u8; 4 * n * m * ne02];
            let mut dst = TensorMut { typ: GgmlType::F32, ne: ne_d, nb: nb_d, data: &mut out };
            w.mul_mat(&src1, &mut dst, Parallelism::Sequential, &mut MulMatScratch::default()).unwrap();
            outs.push(out);
        }
        assert!(outs[0] == outs[1] && outs[1] == outs[2], "{typ:?}: in-place view computes the same bits");
        // Tampering with the container or a payload is caught (payloads only when verifying).
        for at in [0usize, 12, 20, 33, 70, ser.len() / 2, ser.len() - 1] {
            let mut t = crate::AlignedBuf::zeroed(ser.len());
            t.as_mut_slice().copy_from_slice(&ser);
            t.as_mut_slice()[at] ^= 0x40;
            assert!(GgmlWeights::from_shared(std::sync::Arc::new(t), true).is_err(), "{typ:?}: flip at {at} accepted");
        }
        let mut t = crate::AlignedBuf::zeroed(ser.len() - 1);
        t.as_mut_slice().copy_from_slice(&ser[..ser.len() - 1]);
        assert!(GgmlWeights::from_shared(std::sync::Arc::new(t), false).is_err(), "truncated");
    }
}

#[test]
fn f16_single_row_is_ggmls_own_path_not_a_kernel() {
    // ggml sends F16 weights to KleidiAI only for more than one activation
    // row; for one row we compute in f32 from the kept f16 weights.
    let mut rng = Rng::new(27);
    let (n, k) = (21, 96);
    let w = rng.vec_f32(n * k);
    let bytes = weights_bytes(GgmlType::F16, &w, n, k);
    let packed = GgmlWeights::repack(&weights_tensor(GgmlType::F16, n, k, &bytes)).unwrap();
    assert_eq!(packed.kernel_for(1), None, "one row: no KleidiAI kernel, like ggml");
    let wd = dequant(GgmlType::F16, &bytes, n, k);
    let x = rng.vec_f32(k);
    let xb = bytes_f32(&x);
    let src1 = f32_tensor(k, 1, &xb);
    let mut out = vec![0u8; 4 * n];
    let mut dst = f32_tensor_mut(n, 1, &mut out);
    packed.mul_mat(&src1, &mut dst, Parallelism::Sequential, &mut MulMatScratch::default()).unwrap();
    for j in 0..n {
        let want: f64 = (0..k).map(|p| x[p] as f64 * wd[j * k + p] as f64).sum();
        let mag: f64 = (0..k).map(|p| (x[p] * wd[j * k + p]).abs() as f64).sum::<f64>() + 1.0;
        let got = f32::from_le_bytes(out[4 * j..4 * j + 4].try_into().unwrap()) as f64;
        // f32 arithmetic on the exact f16 weights (no bf16 rounding).
        assert!((got - want).abs() <= 1e-5 * mag, "j={j}: {got} vs {want}");
    }
    // A container keeps the f16 weights as given (ggml packs F16 per call):
    // the view computes one row the same way, bit for bit.
    if let Ok(ser) = packed.to_bytes() {
        let mut aligned = crate::AlignedBuf::zeroed(ser.len());
        aligned.as_mut_slice().copy_from_slice(&ser);
        let view = GgmlWeights::from_shared(std::sync::Arc::new(aligned), true).unwrap();
        let mut again = vec![0u8; 4 * n];
        let mut dst = f32_tensor_mut(n, 1, &mut again);
        view.mul_mat(&src1, &mut dst, Parallelism::Sequential, &mut MulMatScratch::default()).unwrap();
        assert_eq!(again, out, "the container view gives the same bits");
    } else {
        assert!(packed.layouts().is_empty(), "only weights without a packed layout cannot be saved");
    }
}

#[test]
fn container_reserved_bytes_must_be_zero() {
    let mut rng = Rng::new(28);
    let (n, k) = (8, 64);
    let bytes = weights_bytes(GgmlType::Q8_0, &rng.vec_f32(n * k), n, k);
    let packed = GgmlWeights::repack(&weights_tensor(GgmlType::Q8_0, n, k, &bytes)).unwrap();
    let Ok(ser) = packed.to_bytes() else {
        assert!(packed.layouts().is_empty(), "only weights without a packed layout cannot be saved");
        eprintln!("container_reserved_bytes_must_be_zero: no Q8_0 kernel here, nothing to save");
        return;
    };
    let load = |b: &[u8]| {
        let mut a = crate::AlignedBuf::zeroed(b.len());
        a.as_mut_slice().copy_from_slice(b);
        GgmlWeights::from_shared(std::sync::Arc::new(a), true)
    };
    assert!(load(&ser).is_ok());
    // A reserved byte set, with the header checksum recomputed, is refused.
    let mut bad = ser.clone();
    bad[50] = 1;
    let table = u32::from_le_bytes(bad[32..36].try_into().unwrap()) as usize * 16;
    let end = 64 + table.div_ceil(64) * 64;
    let mut head = bad[..end].to_vec();
    head[40..44].fill(0);
    let crc = crc32fast::hash(&head);
    bad[40..44].copy_from_slice(&crc.to_le_bytes());
    let err = load(&bad).unwrap_err();
    assert!(
        matches!(&err, Error::File { what: "ggml container", reason: FileError::Header(why) } if why.contains("reserved")),
        "{err}"
    );
    // A flipped header byte (of k) fails the container checksum.
    let mut flipped = ser.clone();
    flipped[20] ^= 1;
    let err = load(&flipped).unwrap_err();
    assert!(matches!(&err, Error::File { reason: FileError::Checksum { .. }, .. }), "{err}");
    // Another magic, version, or a cut batch table.
    let mut magic = ser.clone();
    magic[0] ^= 1;
    assert!(matches!(load(&magic), Err(Error::File { reason: FileError::Magic, .. })));
    let mut version = ser.clone();
    version[8] = 9;
    assert!(matches!(load(&version), Err(Error::File { reason: FileError::Version { found: 9, supported: 1 }, .. })));
    assert!(matches!(load(&ser[..64]), Err(Error::File { reason: FileError::Truncated { .. }, .. })));
}

/// Non-finite inputs on ggml's path are kernel-dependent, as in ggml (no
/// scan): a NaN or an infinity in an activation row or a weight row gives
/// whatever the kernel makes of it, but the call succeeds, and rows of
/// finite activations times finite weights stay finite.
#[test]
fn non_finite_inputs_do_not_fail_or_spread() {
    let (n, k, m) = (24usize, 64usize, 3usize);
    let mut rng = Rng::new(15);
    for typ in [GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q8_0] {
        for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for in_weights in [false, true] {
                let mut w = rng.vec_f32(n * k);
                if in_weights {
                    w[5 * k + 3] = special; // weight row (output channel) 5
                }
                let wb = weights_bytes(typ, &w, n, k);
                let packed = GgmlWeights::repack(&weights_tensor(typ, n, k, &wb)).unwrap();
                let mut x = rng.vec_f32(m * k);
                if !in_weights {
                    x[k + 9] = special; // activation row 1
                }
                let xb = bytes_f32(&x);
                let ne1 = [k as i64, m as i64, 1, 1];
                let src1 = Tensor {
                    typ: GgmlType::F32,
                    ne: ne1,
                    nb: Tensor::contiguous_strides(GgmlType::F32, ne1).unwrap(),
                    data: &xb,
                };
                let ne_d = [n as i64, m as i64, 1, 1];
                let mut out = vec![0u8; 4 * n * m];
                let nb_d = Tensor::contiguous_strides(GgmlType::F32, ne_d).unwrap();
                let mut dst = TensorMut { typ: GgmlType::F32, ne: ne_d, nb: nb_d, data: &mut out };
                let r = packed.mul_mat(&src1, &mut dst, Parallelism::Sequential, &mut MulMatScratch::default());
                let what = format!("{typ:?} {special} in {}", if in_weights { "weights" } else { "activations" });
                assert!(r.is_ok(), "{what}: {r:?}");
                let y: Vec<f32> = out.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
                for i in 0..m {
                    for j in 0..n {
                        let touched = if in_weights { j == 5 } else { i == 1 };
                        assert!(touched || y[i * n + j].is_finite(), "{what}: y[{i}][{j}] = {}", y[i * n + j]);
                    }
                }
            }
        }
    }
}
