//! What this build of kleidiai-rs has and what it would use on this CPU:
//! built kernels, detected features and vector lengths, overrides in force,
//! and the kernel selected per family.
//!
//! `cargo run --example kleidiai-info` (under qemu: add
//! `--target aarch64-unknown-linux-gnu` after sourcing `.tools/env`).

use kleidiai::cpu::{self, Features};
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
        println!("  (not understood: {e}; every tier is off)");
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
}

fn rayon_threads() -> usize {
    kleidiai::Parallelism::Rayon(0).threads()
}
