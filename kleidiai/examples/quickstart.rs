//! Quickstart: pack ggml Q4_0 weights once, multiply activations by them,
//! and check the result against a plain Rust reference.
//!
//! ```text
//! cargo run --release --example quickstart
//! # under qemu, after scripts/setup.sh:
//! . .tools/env && cargo run --release --target aarch64-unknown-linux-gnu --example quickstart
//! ```

use kleidiai::ggml;
use kleidiai::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A layer with n = 256 outputs and k = 512 inputs; m = 8 activation rows.
    let (n, k, m) = (256, 512, 8);
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 1009) as f32 / 1009.0 - 0.5) * 0.1).collect();
    let x: Vec<f32> = (0..m * k).map(|i| (i * 104_729 % 997) as f32 / 997.0 - 0.5).collect();

    // 1. Quantise the weights the way ggml does (Q4_0: blocks of 32 values,
    //    one f16 scale each) and pack them once for the best kernels here.
    let blocks = ggml::quantize_q4_0(&w, k)?;
    let weights = Weights::q4_0(n, k, ggml::q4_0_as_bytes(&blocks))?;
    let packed = PackedWeights::pack(&weights, &PackOptions::default())?;

    // 2. Multiply: y (m x n) = x (m x k) · wᵀ. The scratch holds the packed
    //    activations between calls, so steady-state calls do not allocate.
    let mut scratch = Scratch::default();
    let mut y = vec![0f32; m * n];
    packed.matmul(
        m,
        Activation::F32(&x),
        ActivationMut::F32(&mut y),
        Clamp::NONE,
        Parallelism::Rayon(0),
        &mut scratch,
    )?;
    // One row (a single token) goes to a GEMV kernel.
    let mut y1 = vec![0f32; n];
    packed.matmul(
        1,
        Activation::F32(&x[..k]),
        ActivationMut::F32(&mut y1),
        Clamp::NONE,
        Parallelism::Rayon(0),
        &mut scratch,
    )?;

    // 3. Check against the exact product with the dequantised weights. The
    //    kernels quantise the activations to int8 on the fly, hence the 2%.
    let wq: Vec<f32> = blocks.iter().flat_map(|b| b.dequantize()).collect();
    let (mut max_err, mut max_ref) = (0f64, 0f64);
    for i in 0..m {
        for j in 0..n {
            let r: f64 = (0..k).map(|c| x[i * k + c] as f64 * wq[j * k + c] as f64).sum();
            max_err = max_err.max((y[i * n + j] as f64 - r).abs());
            max_ref = max_ref.max(r.abs());
            if i == 0 {
                max_err = max_err.max((y1[j] as f64 - r).abs());
            }
        }
    }
    let rel = max_err / max_ref;
    println!("kernel for m = {m}: {}", packed.kernel_for(m).unwrap_or("portable reference"));
    println!("kernel for m = 1: {}", packed.kernel_for(1).unwrap_or("portable reference"));
    println!("max abs error {max_err:.3e}, relative to the largest output {rel:.3e}");
    if rel > 2e-2 {
        return Err(format!("error {rel:.3e} above 2e-2").into());
    }
    println!("quickstart: ok");
    Ok(())
}
