//! Concurrency: many threads multiplying with the same packed weights at
//! once (an `Arc<PackedWeights>` and an `Arc<GgmlWeights>` shared by std
//! threads), matmuls with `Parallelism::Rayon(n)` called from inside a
//! rayon pool's `par_iter` (nested pools), and inside a user's own pool via
//! `install`. Every result must be bit-identical to the single-threaded run
//! of the same call: the hot path keeps no shared mutable state (each call
//! brings its own `Scratch`; packed weights are read-only once built).

mod common;

use half::f16;
use kleidiai::formats::{BlockInt4, FloatWeights, Int4Encoding, Int4PerChannel, Int8PerChannel, Order, Q4_0};
use kleidiai::ggml::{self, GgmlType, GgmlWeights, MulMatScratch, Tensor, TensorMut};
use kleidiai::weights::{Activation, ActivationMut, DType, PackOptions, PackedWeights, Scratch, WeightsRef};
use kleidiai::{Clamp, Parallelism};
use rayon::prelude::*;
use std::sync::Arc;

/// Shapes above the library's inline threshold, so `Rayon(n)` really splits.
const M: usize = 40;
const N: usize = 80;
const K: usize = 128;

/// One weight kind with its activation type, packed for this CPU.
struct Case {
    name: &'static str,
    packed: Arc<PackedWeights>,
    act: DType,
}

fn cases(rng: &mut common::Rng) -> Vec<Case> {
    let wf = rng.vec_f32(N * K);
    let bias = rng.vec_f32(N);
    let wh: Vec<f16> = wf.iter().map(|x| f16::from_f32(*x)).collect();
    let i8s: Vec<i8> = (0..N * K).map(|_| rng.next_u64() as i8).collect();
    let nibbles: Vec<u8> = (0..N * K / 2).map(|_| rng.next_u64() as u8).collect();
    let scales: Vec<f32> = (0..N).map(|_| 0.01 + 0.01 * rng.f32().abs()).collect();
    let q4 = ggml::quantize_q4_0(&wf, K).unwrap();
    let q4_bytes = ggml::q4_0_as_bytes(&q4).to_vec();
    let opts = |act| PackOptions { activation: act, ..PackOptions::default() };
    let pack = |w: WeightsRef<'_>, act| Arc::new(PackedWeights::pack(&w, &opts(act)).unwrap());
    let f32w = FloatWeights { n: N, k: K, order: Order::NxK, data: &wf, bias: Some(&bias) };
    let f16w = FloatWeights { n: N, k: K, order: Order::NxK, data: &wh, bias: None };
    let int8 = Int8PerChannel { n: N, k: K, order: Order::NxK, data: &i8s, scales: &scales, bias: None };
    let int4 = Int4PerChannel {
        n: N,
        k: K,
        order: Order::NxK,
        encoding: Int4Encoding::Signed,
        data: &nibbles,
        scales: &scales,
        bias: None,
    };
    let q4w = BlockInt4::Q4_0(Q4_0 { n: N, k: K, data: &q4_bytes, bias: None });
    vec![
        Case { name: "f32", packed: pack(WeightsRef::F32(f32w), DType::F32), act: DType::F32 },
        Case { name: "f16/f16", packed: pack(WeightsRef::F16(f16w), DType::F16), act: DType::F16 },
        Case { name: "int8", packed: pack(WeightsRef::Int8PerChannel(int8), DType::F32), act: DType::F32 },
        Case { name: "int4", packed: pack(WeightsRef::Int4PerChannel(int4), DType::F32), act: DType::F32 },
        Case { name: "q4_0/bf16", packed: pack(WeightsRef::Int4Block(q4w), DType::Bf16), act: DType::Bf16 },
    ]
}

/// `y = x · wᵀ` for `m` rows with `par`, as output bits.
fn run(c: &Case, m: usize, x: &[f32], par: Parallelism, scratch: &mut Scratch) -> Vec<u32> {
    let x = &x[..m * K];
    match c.act {
        DType::F32 => {
            let mut y = vec![0f32; m * N];
            c.packed.matmul(m, Activation::F32(x), ActivationMut::F32(&mut y), Clamp::NONE, par, scratch).unwrap();
            y.iter().map(|v| v.to_bits()).collect()
        }
        DType::F16 => {
            let xh: Vec<f16> = x.iter().map(|v| f16::from_f32(*v)).collect();
            let mut y = vec![f16::ZERO; m * N];
            c.packed.matmul(m, Activation::F16(&xh), ActivationMut::F16(&mut y), Clamp::NONE, par, scratch).unwrap();
            y.iter().map(|v| v.to_bits() as u32).collect()
        }
        DType::Bf16 => {
            let xb: Vec<half::bf16> = x.iter().map(|v| half::bf16::from_f32(*v)).collect();
            let mut y = vec![half::bf16::ZERO; m * N];
            c.packed.matmul(m, Activation::Bf16(&xb), ActivationMut::Bf16(&mut y), Clamp::NONE, par, scratch).unwrap();
            y.iter().map(|v| v.to_bits() as u32).collect()
        }
    }
}

/// Row counts that take the GEMV kernel (1), a partial tile and several tiles.
const MS: [usize; 3] = [1, 7, M];

/// Single-threaded results per m.
fn expected(c: &Case, x: &[f32]) -> Vec<Vec<u32>> {
    MS.iter().map(|&m| run(c, m, x, Parallelism::Sequential, &mut Scratch::default())).collect()
}

fn note_kernels(cases: &[Case]) {
    for c in cases {
        println!("{}: m=1 {:?}, m={M} {:?}", c.name, c.packed.kernel_for(1), c.packed.kernel_for(M));
    }
}

#[test]
fn threads_share_packed_weights() {
    common::features_seen();
    let mut rng = common::Rng::new(61);
    let cases = cases(&mut rng);
    note_kernels(&cases);
    let x = Arc::new(rng.vec_f32(M * K));
    for c in &cases {
        let want = Arc::new(expected(c, &x));
        let handles: Vec<_> = (0..6)
            .map(|t| {
                let (packed, x, want, act, name) = (c.packed.clone(), x.clone(), want.clone(), c.act, c.name);
                std::thread::spawn(move || {
                    let c = Case { name, packed, act };
                    let mut scratch = Scratch::default();
                    for i in 0..4 {
                        let which = (t + i) % MS.len();
                        let par = [Parallelism::Sequential, Parallelism::Rayon(2), Parallelism::Rayon(0)][(t + i) % 3];
                        let got = run(&c, MS[which], &x, par, &mut scratch);
                        assert!(got == want[which], "{name}: thread {t} m={} {par:?} differs", MS[which]);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a thread failed");
        }
    }
}

#[test]
fn nested_rayon_pools() {
    let mut rng = common::Rng::new(62);
    let cases = cases(&mut rng);
    let x = rng.vec_f32(M * K);
    let outer = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    for c in &cases {
        let want = expected(c, &x);
        // Matmuls asking for rayon workers, called from the pool's own workers.
        let got: Vec<(usize, Vec<u32>)> = outer.install(|| {
            (0..9)
                .into_par_iter()
                .map(|i| {
                    let which = i % MS.len();
                    (which, run(c, MS[which], &x, Parallelism::Rayon(1 + i % 3), &mut Scratch::default()))
                })
                .collect()
        });
        for (which, g) in got {
            assert!(g == want[which], "{}: nested m={} differs from the single-threaded run", c.name, MS[which]);
        }
    }
}

#[test]
fn users_own_pool_via_install() {
    let mut rng = common::Rng::new(63);
    let cases = cases(&mut rng);
    let x = rng.vec_f32(M * K);
    for threads in [1, 2, 5] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        for c in &cases {
            let want = expected(c, &x);
            for (which, &m) in MS.iter().enumerate() {
                for par in [Parallelism::Rayon(0), Parallelism::Rayon(threads), Parallelism::Rayon(8)] {
                    let got = pool.install(|| run(c, m, &x, par, &mut Scratch::default()));
                    assert!(got == want[which], "{}: pool of {threads}, {par:?}, m={m} differs", c.name);
                }
            }
        }
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// ggml `mul_mat` of `m` rows with `par` on shared repacked weights.
fn mul_mat(w: &GgmlWeights, m: usize, x: &[u8], par: Parallelism, scratch: &mut MulMatScratch) -> Vec<u8> {
    let (k, n) = w.shape();
    let src1 =
        Tensor { typ: GgmlType::F32, ne: [k as i64, m as i64, 1, 1], nb: [4, 4 * k, 4 * k * m, 4 * k * m], data: x };
    let mut out = vec![0u8; 4 * n * m];
    let mut dst = TensorMut {
        typ: GgmlType::F32,
        ne: [n as i64, m as i64, 1, 1],
        nb: [4, 4 * n, 4 * n * m, 4 * n * m],
        data: &mut out,
    };
    w.mul_mat(&src1, &mut dst, par, scratch).unwrap();
    out
}

#[test]
fn threads_share_ggml_weights() {
    let mut rng = common::Rng::new(64);
    let wf = rng.vec_f32(N * K);
    let x = Arc::new(f32_bytes(&rng.vec_f32(M * K)));
    let q4 = ggml::quantize_q4_0(&wf, K).unwrap();
    let q8 = ggml::quantize_q8_0(&wf, K).unwrap();
    let f32b = f32_bytes(&wf);
    let f16b: Vec<u8> = wf.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect();
    let all: [(GgmlType, &[u8]); 4] = [
        (GgmlType::Q4_0, ggml::q4_0_as_bytes(&q4)),
        (GgmlType::Q8_0, ggml::q8_0_as_bytes(&q8)),
        (GgmlType::F32, &f32b),
        (GgmlType::F16, &f16b),
    ];
    for (typ, bytes) in all {
        let ne = [K as i64, N as i64, 1, 1];
        let src0 = Tensor { typ, ne, nb: Tensor::contiguous_strides(typ, ne).unwrap(), data: bytes };
        let w = Arc::new(GgmlWeights::repack(&src0).unwrap());
        println!("ggml {typ:?}: m=1 {:?}, m={M} {:?}", w.kernel_for(1), w.kernel_for(M));
        let want: Arc<Vec<Vec<u8>>> = Arc::new(
            MS.iter().map(|&m| mul_mat(&w, m, &x, Parallelism::Sequential, &mut MulMatScratch::default())).collect(),
        );
        let handles: Vec<_> = (0..6)
            .map(|t| {
                let (w, x, want) = (w.clone(), x.clone(), want.clone());
                std::thread::spawn(move || {
                    let mut scratch = MulMatScratch::default();
                    for i in 0..3 {
                        let which = (t + i) % MS.len();
                        let par = [Parallelism::Sequential, Parallelism::Rayon(3)][(t + i) % 2];
                        let got = mul_mat(&w, MS[which], &x, par, &mut scratch);
                        assert!(got == want[which], "ggml {typ:?}: thread {t} m={} {par:?} differs", MS[which]);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a thread failed");
        }
    }
}
