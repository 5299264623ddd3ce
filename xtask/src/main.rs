//! Project automation. `cargo run -p xtask --release -- test` is the test
//! command's engine (called by `scripts/test.sh` after `scripts/setup.sh`):
//! host tests, the aarch64 build, the qemu CPU-model matrix, MSRV check and
//! the build-time comparison against upstream's CMake, bounded fuzzing, with
//! one summary table and `target/test-matrix.json`. `xtask fuzz` runs the
//! fuzz phase alone.

mod downstream;
mod fuzz;
mod llama;
mod matrix;
mod measure;
mod reliability;
mod report;
mod util;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => matrix::run(&args[1..]),
        Some("measure") => measure::run(&args[1..]),
        Some("llama") => llama::run(&args[1..]),
        Some("downstream") => util::load_env().and_then(|env| downstream::run(&env)).map(|lines| {
            for l in lines {
                println!("{l}");
            }
            true
        }),
        Some("fuzz") => fuzz::run().map(|results| results.iter().all(fuzz::FuzzResult::ok)),
        Some("help") | Some("--help") | None => {
            eprintln!("{}\n\n{}\n\n{}", matrix::USAGE, measure::USAGE, llama::USAGE);
            Ok(true)
        }
        Some(other) => Err(format!("unknown command `{other}`\n{}", matrix::USAGE)),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::FAILURE
        }
    }
}
