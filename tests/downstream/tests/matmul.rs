//! The packaged crates, as a crates.io user gets them: every kernel compiled
//! on aarch64, and packed matmuls of a few weight kinds agreeing with a plain
//! reference.

use half::f16;
use kleidiai::formats::{BlockInt4, FloatWeights, Int8PerChannel, Order, Q4_0};
use kleidiai::ggml;
use kleidiai::weights::WeightsRef;
use kleidiai_downstream::Linear;

const N: usize = 48;
const K: usize = 256;

fn data(len: usize, seed: usize, scale: f32) -> Vec<f32> {
    (0..len).map(|i| ((i * 7919 + seed * 104_729) % 1013) as f32 / 1013.0 - 0.5).map(|v| v * scale).collect()
}

/// Runs `w` (whose values are `exact`, N x K) for m = 1 and m = 5 and
/// compares with f64 sums; `tol` relative to the largest output.
fn check(name: &str, w: WeightsRef<'_>, exact: &[f32], tol: f64) {
    let mut layer = Linear::new(&w).unwrap_or_else(|e| panic!("{name}: pack: {e}"));
    for m in [1, 5] {
        let x = data(m * K, m, 2.0);
        let y = layer.forward(m, &x).unwrap_or_else(|e| panic!("{name}: matmul: {e}"));
        let (mut err, mut max) = (0f64, 0f64);
        for i in 0..m {
            for j in 0..N {
                let r: f64 = (0..K).map(|c| x[i * K + c] as f64 * exact[j * K + c] as f64).sum();
                err = err.max((y[i * N + j] as f64 - r).abs());
                max = max.max(r.abs());
            }
        }
        let kernel = layer.kernel(m).unwrap_or("reference");
        println!("{name} m={m}: {kernel}: relative error {:.2e}", err / max);
        assert!(err / max <= tol, "{name} m={m} ({kernel}): relative error {:.3e} > {tol:e}", err / max);
    }
}

#[test]
fn every_kernel_is_built_on_aarch64() {
    let compute = kleidiai::sys::UKERNELS.iter().filter(|k| k.op != kleidiai::sys::Op::Pack).count();
    if cfg!(target_arch = "aarch64") {
        assert_eq!(compute, 121, "the packaged kleidiai-sys must compile all of KleidiAI 1.30.0");
        assert_eq!(kleidiai::sys::UKERNELS.len() - compute, 76);
    } else {
        assert_eq!(compute, 0);
    }
    println!("{}", kleidiai::registry::report(&kleidiai::cpu::Features::current()));
}

#[test]
fn f32_weights() {
    let w = data(N * K, 1, 0.1);
    check("f32", WeightsRef::F32(FloatWeights { n: N, k: K, order: Order::NxK, data: &w, bias: None }), &w, 1e-5);
}

#[test]
fn f16_weights() {
    let w: Vec<f16> = data(N * K, 2, 0.1).iter().map(|v| f16::from_f32(*v)).collect();
    let exact: Vec<f32> = w.iter().map(|v| v.to_f32()).collect();
    check("f16", WeightsRef::F16(FloatWeights { n: N, k: K, order: Order::NxK, data: &w, bias: None }), &exact, 1e-5);
}

#[test]
fn int8_per_channel_weights() {
    let q: Vec<i8> = (0..N * K).map(|i| ((i * 31) % 255) as i8).collect();
    let scales: Vec<f32> = (0..N).map(|j| 0.001 + j as f32 * 1e-5).collect();
    let exact: Vec<f32> = (0..N * K).map(|i| q[i] as f32 * scales[i / K]).collect();
    let w = Int8PerChannel { n: N, k: K, order: Order::NxK, data: &q, scales: &scales, bias: None };
    // The kernels quantise the activations to int8 per row.
    check("int8", WeightsRef::Int8PerChannel(w), &exact, 2e-2);
}

#[test]
fn ggml_q4_0_weights() {
    let blocks = ggml::quantize_q4_0(&data(N * K, 3, 0.1), K).unwrap();
    let exact: Vec<f32> = blocks.iter().flat_map(|b| b.dequantize()).collect();
    let w = Q4_0 { n: N, k: K, data: ggml::q4_0_as_bytes(&blocks), bias: None };
    check("Q4_0", WeightsRef::Int4Block(BlockInt4::Q4_0(w)), &exact, 2e-2);
}

#[test]
fn ggml_q8_0_weights() {
    let blocks = ggml::quantize_q8_0(&data(N * K, 4, 0.1), K).unwrap();
    let exact: Vec<f32> = blocks.iter().flat_map(|b| b.dequantize()).collect();
    check("Q8_0", WeightsRef::GgmlQ8_0 { n: N, k: K, blocks: &blocks }, &exact, 2e-2);
}
