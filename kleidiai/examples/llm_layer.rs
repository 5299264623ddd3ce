//! One LLM linear layer at a real model's size: 4096 x 4096 weights in ggml
//! Q4_0 and Q8_0, for one token (`m = 1`) and a 64-token prompt (`m = 64`).
//! Prints the kernel chosen for each, the time, and the error against an
//! exact reference on a few sampled output rows.
//!
//! ```text
//! cargo run --release --example llm_layer -- [--size N] [--threads T]
//! ```
//!
//! Under qemu a 4096 x 4096 layer takes a while (tens of seconds per case);
//! `--size 1024` is quicker.

mod common;

use common::{Input, Kind, Layer, Output};
use kleidiai::Parallelism;
use kleidiai::weights::Scratch;
use std::time::Instant;

fn main() {
    let mut size = 4096;
    let mut threads = 0;
    let usage = || -> ! {
        eprintln!("usage: llm_layer [--size N (multiple of 32)] [--threads T]");
        std::process::exit(2);
    };
    let mut p = lexopt::Parser::from_env();
    while let Some(a) = p.next().unwrap_or_else(|_| usage()) {
        let a = match a {
            lexopt::Arg::Long(l) => l.to_string(),
            _ => usage(),
        };
        let v = p.value().ok().and_then(|v| v.to_str()?.parse::<usize>().ok());
        match (a.as_str(), v) {
            ("size", Some(v)) if v > 0 && v % 32 == 0 => size = v,
            ("threads", Some(v)) => threads = v,
            _ => usage(),
        }
    }
    let par = if threads == 1 { Parallelism::Sequential } else { Parallelism::Rayon(threads) };
    let (n, k) = (size, size);
    println!("LLM layer: n = k = {size}, {} thread(s)", par.threads());
    let mut failed = false;
    for kind in [Kind::Q4_0, Kind::Q8_0] {
        let layer = Layer::new(kind, n, k, 7);
        let t = Instant::now();
        let packed = layer.pack().expect("packing");
        let pack = t.elapsed();
        println!(
            "\n{} weights: packed in {:.0} ms ({} layouts)",
            kind.name(),
            common::ms(pack),
            packed.layouts().len()
        );
        let mut scratch = Scratch::default();
        for m in [1usize, 64] {
            let x = Input::new(kind, m, k, 11);
            let mut y = Output::new(m, n);
            let time = common::run(&packed, kind, &x, &mut y, par, &mut scratch).expect("matmul");
            let rows = common::sample_rows(m, 3);
            let err = common::check(&layer, &x, &y, &rows);
            let ok = err.max_rel <= kind.tolerance();
            failed |= !ok;
            println!(
                "  m = {m:<2}  {}\n          {:.1} ms, error on rows {rows:?}: max abs {:.2e}, relative {:.2e} (bound {:.0e}){}",
                packed.kernel_for(m).unwrap_or("reference (portable Rust)"),
                common::ms(time),
                err.max_abs,
                err.max_rel,
                kind.tolerance(),
                if ok { "" } else { "  FAILED" }
            );
        }
    }
    if failed {
        std::process::exit(1);
    }
}
