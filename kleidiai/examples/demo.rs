//! The demo (`scripts/demo.sh` runs it, under qemu on x86): what this build
//! has and would use on this CPU, then an LLM-shaped workload: one linear
//! layer with Q4_0, Q8_0, f32 and f16 weights, for one token (`m = 1`, GEMV)
//! and a 32-token prompt (`m = 32`, GEMM), each timed and checked against an
//! exact reference.
//!
//! ```text
//! cargo run --release --example demo -- [--size N] [--threads T] [--rows R]
//! ```
//!
//! `--size` is the hidden size (`n = k`, default 1024, a multiple of 32),
//! `--threads` the workers (default: all), `--rows` how many output rows the
//! reference recomputes per case (default 4; the reference is plain scalar
//! code, slow under qemu). Exits with status 1 if an error exceeds its bound.

mod common;

use common::{Input, Kind, Layer, Output};
use kleidiai::cpu::{self, Features};
use kleidiai::weights::Scratch;
use kleidiai::{Parallelism, registry, sys};
use std::io::Write;
use std::time::Instant;

struct Args {
    size: usize,
    threads: usize,
    rows: usize,
}

fn args() -> Result<Args, String> {
    use lexopt::Arg::{Long, Short};
    let mut a = Args { size: 1024, threads: 0, rows: 4 };
    let value = |p: &mut lexopt::Parser, name: &str| -> Result<usize, String> {
        p.value().ok().and_then(|v| v.to_str()?.parse().ok()).ok_or(format!("{name} needs a number"))
    };
    let mut p = lexopt::Parser::from_env();
    while let Some(flag) = p.next().map_err(|e| format!("{e} (try --help)"))? {
        match flag {
            Long("size") => a.size = value(&mut p, "--size")?,
            Long("threads") => a.threads = value(&mut p, "--threads")?,
            Long("rows") => a.rows = value(&mut p, "--rows")?.max(1),
            Short('h') | Long("help") => return Err("usage: demo [--size N] [--threads T] [--rows R]".into()),
            other => return Err(format!("{} (try --help)", other.unexpected())),
        }
    }
    if a.size == 0 || a.size % 32 != 0 {
        return Err(format!("--size {} must be a positive multiple of 32 (ggml blocks)", a.size));
    }
    Ok(a)
}

fn step(i: usize, total: usize, what: &str) {
    println!("\n[{i}/{total}] {what}");
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let started = Instant::now();
    println!("kleidiai-rs {} demo, KleidiAI {}", env!("CARGO_PKG_VERSION"), sys::KLEIDIAI_VERSION);

    step(1, 4, "CPU features");
    let detected = Features::detected();
    let current = Features::current();
    println!("    detected: {detected}");
    if current != detected {
        println!("    in use:   {current}  ({} is set)", cpu::DISABLE_ENV);
    }

    step(2, 4, "what this build compiled");
    let compute = sys::UKERNELS.iter().filter(|k| k.op != sys::Op::Pack).count();
    println!("    {compute} compute and {} packing micro-kernels", sys::UKERNELS.len() - compute);
    if sys::BUILT_GROUPS.is_empty() {
        println!("    (not an aarch64 target: nothing compiled; every operation runs the portable reference)");
    } else {
        println!("    upstream groups: {}", sys::BUILT_GROUPS.join(" "));
    }

    step(3, 4, "selected kernel per operation (m>1: GEMM, m=1: GEMV; 'reference' = portable Rust)");
    let report = registry::report(&current);
    for line in report.to_string().lines() {
        println!("    {line}");
    }
    println!("    highest tier selected: {}", report.highest_tier().map_or("none (reference)", |t| t.name()));

    let par = if a.threads == 1 { Parallelism::Sequential } else { Parallelism::Rayon(a.threads) };
    let (n, k) = (a.size, a.size);
    step(
        4,
        4,
        &format!(
            "LLM-shaped workload: one linear layer, n = k = {n}, {} thread(s); reference on {} sampled row(s) per case",
            par.threads(),
            a.rows
        ),
    );
    let ms = [1usize, 32];
    let total = Kind::ALL.len() * ms.len();
    let mut results = Vec::new();
    let mut memory = Vec::new();
    let mut failed = false;
    let mut case = 0;
    for kind in Kind::ALL {
        let t = Instant::now();
        let layer = Layer::new(kind, n, k, 1);
        let make = t.elapsed();
        let t = Instant::now();
        let packed = match layer.pack() {
            Ok(p) => p,
            Err(e) => {
                println!("    {} weights: packing failed: {e}", kind.name());
                failed = true;
                continue;
            }
        };
        let pack = t.elapsed();
        let input = layer.weights().bytes();
        let held = packed.packed_bytes() + packed.reference_bytes();
        println!(
            "    {} weights {n}x{k}: made in {:.0} ms, packed in {:.0} ms; holds {held} bytes = {:.3}x the {input} \
             input bytes ({} layout(s){})",
            kind.name(),
            common::ms(make),
            common::ms(pack),
            held as f64 / input as f64,
            packed.layouts().len(),
            if packed.reference_bytes() > 0 { ", reference copy" } else { "" }
        );
        memory.push((kind, held as f64 / input as f64));
        let mut scratch = Scratch::default();
        for &m in &ms {
            case += 1;
            let kernel = packed.kernel_for(m).unwrap_or("reference (portable Rust)");
            print!("    ({case}/{total}) {} m={m:<2} {kernel} ... ", kind.name());
            let _ = std::io::stdout().flush();
            let x = Input::new(kind, m, k, 2 + m as u64);
            let mut y = Output::new(m, n);
            // First call: packs the activations into a fresh scratch (and,
            // under qemu, translates the kernel); the second is steady state.
            let first = common::run(&packed, kind, &x, &mut y, par, &mut scratch);
            let second = common::run(&packed, kind, &x, &mut y, par, &mut scratch);
            let (first, second) = match (first, second) {
                (Ok(f), Ok(s)) => (f, s),
                (Err(e), _) | (_, Err(e)) => {
                    println!("FAILED: {e}");
                    failed = true;
                    continue;
                }
            };
            let rows = common::sample_rows(m, a.rows);
            let err = common::check(&layer, &x, &y, &rows);
            let ok = err.max_rel <= kind.tolerance();
            failed |= !ok;
            println!(
                "{:.2} ms (first call {:.2} ms), max abs err {:.2e}, max rel err {:.2e} on {} row(s){}",
                common::ms(second),
                common::ms(first),
                err.max_abs,
                err.max_rel,
                rows.len(),
                if ok { "" } else { "  <-- above the bound" }
            );
            results.push((kind, m, kernel, second, err, ok));
        }
    }

    println!("\nsummary (n = k = {n}; time = steady-state matmul; rel err = max |y - ref| / max |ref|)");
    if cfg!(target_arch = "aarch64") {
        println!("(under qemu the times measure the emulator, where SME and SVE are slowest: not the hardware)");
    }
    println!(
        "    {:<5} {:>3}  {:>10}  {:>9}  {:>9}  {:>8}  kernel",
        "kind", "m", "time ms", "abs err", "rel err", "bound"
    );
    for (kind, m, kernel, t, err, ok) in &results {
        println!(
            "    {:<5} {m:>3}  {:>10.2}  {:>9.2e}  {:>9.2e}  {:>8.0e}  {}{}",
            kind.name(),
            common::ms(*t),
            err.max_abs,
            err.max_rel,
            kind.tolerance(),
            kernel.strip_prefix("kai_").unwrap_or(kernel),
            if *ok { "" } else { "  FAILED" }
        );
    }
    println!("\npacked bytes / input bytes (default options: one copy, GEMM and GEMV share it):");
    for (kind, ratio) in &memory {
        println!("    {:<5} {ratio:.3}x", kind.name());
    }
    println!("\ndemo finished in {:.1} s: {}", started.elapsed().as_secs_f64(), if failed { "FAILED" } else { "ok" });
    if failed {
        std::process::exit(1);
    }
}
