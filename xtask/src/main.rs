//! Project automation. `cargo run -p xtask --release -- test` is the test
//! command's engine (called by `scripts/test.sh` after `scripts/setup.sh`):
//! host tests, the aarch64 build, the qemu CPU-model matrix, MSRV check and
//! the build-time comparison against upstream's CMake, bounded fuzzing, with
//! one summary table and `target/test-matrix.json`. `xtask fuzz` runs the
//! host fuzz phase alone, `xtask fuzz-arm` the Arm one.

mod buildtime;
mod downstream;
mod fuzz;
mod generated;
mod llama;
mod matrix;
mod measure;
mod reliability;
mod report;
mod restricted;
mod userbuild;
mod util;

use std::process::ExitCode;

// The build script's std-only and bindgen modules, compiled here as well so
// the committed bindings and the checks use exactly the build's own code.
#[allow(dead_code)]
#[path = "../../kleidiai-sys/build/files.rs"]
mod files;
#[allow(dead_code)]
#[path = "../../kleidiai-sys/build/bindings.rs"]
mod kai_bindings;
#[path = "../../kleidiai-sys/build/families.rs"]
mod kai_families;
#[allow(dead_code)]
#[path = "../../kleidiai-sys/build/prefix.rs"]
mod prefix;

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
        Some("bindings") => generated::bindings(&args[1..]),
        Some("header") => generated::header(&args[1..]),
        Some("check-generated") => generated::check_all("aarch64-unknown-linux-gnu").map(|lines| {
            for l in lines {
                println!("{l}");
            }
            true
        }),
        // The test command's docs.rs and bad-input phase alone.
        Some("user-build") => util::load_env().and_then(|env| {
            let mut lines = vec![userbuild::docs_rs()?];
            lines.extend(userbuild::bad_input(&env)?);
            for l in lines {
                println!("{l}");
            }
            Ok(true)
        }),
        // The test command's cold-build comparison alone: `build-time [ROUNDS]`.
        Some("build-time") => util::load_env().and_then(|env| {
            let rounds = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(buildtime::ROUNDS);
            let v = buildtime::compare(&env, rounds)?;
            let path = util::root().join("target/build-time.json");
            std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap_or_default())
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(v.get("ratio").and_then(serde_json::Value::as_f64).is_some_and(|r| r <= 0.9))
        }),
        Some("fuzz") => fuzz::run().map(|results| results.iter().all(fuzz::FuzzResult::ok)),
        // The Arm fuzz phase alone: the replay driver under qemu.
        Some("fuzz-arm") => {
            util::load_env().and_then(|env| fuzz::run_arm(&env)).map(|r| r.iter().all(fuzz::FuzzResult::ok))
        }
        Some("help") | Some("--help") | None => {
            eprintln!(
                "{}\n\n{}\n\n{}\n\n{}\n\n{}",
                matrix::USAGE,
                measure::USAGE,
                generated::USAGE,
                userbuild::USAGE,
                llama::USAGE
            );
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
