//! What this build of kleidiai-rs has and what it would use on this CPU:
//! built kernels, detected features and vector lengths, overrides in force,
//! the kernel selected per family, and what `PackedWeights` would choose and
//! hold per weight format (packed bytes against the input bytes).
//!
//! `cargo run --example kleidiai-info` (under qemu: add
//! `--target aarch64-unknown-linux-gnu` after sourcing `.tools/env`).

use half::{bf16, f16};
use kleidiai::cpu::{self, Features};
use kleidiai::formats::{BlockInt4, FloatWeights, Int4Encoding, Int4PerChannel, Int8PerChannel, Order, Q4_0};
use kleidiai::weights::{DType, PackOptions, PackedWeights, WeightsRef};
use kleidiai::{par, registry, sys};

fn main() {
    println!("kleidiai-rs {} on KleidiAI {}", env!("CARGO_PKG_VERSION"), sys::KLEIDIAI_VERSION);

    let compute = sys::UKERNELS.iter().filter(|k| k.op != sys::Op::Pack).count();
    let packing = sys::UKERNELS.len() - compute;
    println!("\nbuilt: {compute} compute and {packing} packing micro-kernels");
    if sys::BUILT_GROUPS.is_empty() {
        println!("  (not an aarch64 target: nothing compiled; every operation uses the portable reference)");
    } else {
        println!("  upstream groups: {}", sys::BUILT_GROUPS.join(" "));
    }

    let detected = Features::detected();
    let current = Features::current();
    println!("\nCPU features detected: {detected}");
    match std::env::var(cpu::DISABLE_ENV) {
        Ok(v) if !v.is_empty() => println!("override {}={v}", cpu::DISABLE_ENV),
        _ => println!("override {}: unset", cpu::DISABLE_ENV),
    }
    if let Some(e) = cpu::disable_env_error() {
        println!("  (not fully understood: {e})");
    }
    println!("features in use: {current}");
    println!(
        "SME worker cap: {} ({}={})",
        par::sme_thread_cap(),
        par::SME_THREADS_ENV,
        std::env::var(par::SME_THREADS_ENV).unwrap_or_else(|_| "unset".into())
    );
    println!("threads available (rayon): {}", rayon_threads());

    println!("\nselection (m>1 is GEMM, m=1 GEMV; 'reference' = portable Rust):");
    let report = registry::report(&current);
    print!("{report}");
    println!("highest tier selected: {}", report.highest_tier().map_or("none (reference)", |t| t.name()));
    memory();
}

/// What `PackedWeights::pack` chooses per weight format with the default
/// options, and the bytes it holds against the weights as given.
fn memory() {
    let (n, k) = (256, 512);
    let f = vec![0.01f32; n * k];
    let h = vec![f16::from_f32(0.01); n * k];
    let b = vec![bf16::from_f32(0.01); n * k];
    let i8s = vec![1i8; n * k];
    let nib = vec![0x21u8; n * k / 2];
    let scales = vec![0.01f32; n];
    let q4 = kleidiai::ggml::q4_0_as_bytes(&kleidiai::ggml::quantize_q4_0(&f, k).expect("whole blocks")).to_vec();
    let q8 = kleidiai::ggml::quantize_q8_0(&f, k).expect("whole blocks");
    let fw = FloatWeights { n, k, order: Order::NxK, data: &f[..], bias: None };
    let formats: Vec<(&str, WeightsRef<'_>, DType)> = vec![
        ("f32", WeightsRef::F32(fw), DType::F32),
        ("f16", WeightsRef::F16(FloatWeights { n, k, order: Order::NxK, data: &h[..], bias: None }), DType::F32),
        (
            "f16 (f16 act)",
            WeightsRef::F16(FloatWeights { n, k, order: Order::NxK, data: &h[..], bias: None }),
            DType::F16,
        ),
        ("bf16", WeightsRef::Bf16(FloatWeights { n, k, order: Order::NxK, data: &b[..], bias: None }), DType::F32),
        (
            "int8",
            WeightsRef::Int8PerChannel(Int8PerChannel {
                n,
                k,
                order: Order::NxK,
                data: &i8s,
                scales: &scales,
                bias: None,
            }),
            DType::F32,
        ),
        ("ggml Q8_0", WeightsRef::GgmlQ8_0 { n, k, blocks: &q8 }, DType::F32),
        (
            "int4",
            WeightsRef::Int4PerChannel(Int4PerChannel {
                n,
                k,
                order: Order::NxK,
                encoding: Int4Encoding::Signed,
                data: &nib,
                scales: &scales,
                bias: None,
            }),
            DType::F32,
        ),
        ("ggml Q4_0", WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: &q4, bias: None })), DType::F32),
    ];
    println!(
        "\nPackedWeights with the default options ({n}x{k} weights): bytes held / input bytes, kernels (m>1 | m=1)"
    );
    for (name, w, act) in formats {
        match PackedWeights::pack(&w, &PackOptions { activation: act, ..PackOptions::default() }) {
            Ok(p) => {
                let held = p.packed_bytes() + p.reference_bytes();
                let short = |s: &str| s.strip_prefix("kai_matmul_clamp_").unwrap_or(s).to_string();
                println!(
                    "  {name:<14} {:.3}x  {} | {}",
                    held as f64 / w.bytes() as f64,
                    p.kernel_for(2).map_or("reference".into(), short),
                    p.kernel_for(1).map_or("reference".into(), short),
                );
            }
            Err(e) => println!("  {name:<14} not packed: {e}"),
        }
    }
}

fn rayon_threads() -> usize {
    kleidiai::Parallelism::Rayon(0).threads()
}
