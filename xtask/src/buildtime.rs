//! The cold-build comparison of the test command (and of `xtask measure`):
//! a crates.io user's first build against upstream's own CMake build of
//! KleidiAI, same compiler (clang), same machine, in one run.
//!
//! - **ours**: `cargo build --release` of `tests/downstream` for aarch64 from
//!   an empty target directory (every dependency compiled: cc, the build
//!   script, KleidiAI's C and assembly, rayon, half, ..., `kleidiai-sys`,
//!   `kleidiai`), offline against the packaged `.crate` files, with a `PATH`
//!   of the compiler, archiver, linker and the host's `cc` only;
//! - **CMake**: configure + build of `vendor/kleidiai` (Release, tests off,
//!   `-j` = cores) from an empty build directory.
//!
//! The two alternate (ours, CMake, ours, CMake, ...) and the best of each is
//! compared, so a slower or busier stretch of a shared machine hits both.
//! cargo's `--timings` report of the best run says where the time went.

use crate::restricted::Restricted;
use crate::util::{Env, root, run_status, which};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const TARGET: &str = "aarch64-unknown-linux-gnu";
/// Runs of each build.
pub const ROUNDS: usize = 3;

/// What the goal of the issue asks: ours at most this fraction of CMake's.
const GOAL: f64 = 0.9;

/// One cold build of the downstream crate; its seconds and the `--timings`
/// units and build report.
struct Ours {
    seconds: f64,
    units: Vec<Value>,
    report: String,
}

fn ours(
    r: &Restricted,
    packaged: &crate::downstream::Packaged,
    clang: &str,
    ar: &str,
    dir: &Path,
) -> Result<Ours, String> {
    let _ = std::fs::remove_dir_all(dir);
    let mut c = r.cargo(&packaged.project);
    c.env("CC_aarch64_unknown_linux_gnu", clang)
        .env("CFLAGS_aarch64_unknown_linux_gnu", "--target=aarch64-linux-gnu")
        .env("AR_aarch64_unknown_linux_gnu", ar)
        .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER", "aarch64-linux-gnu-gcc")
        .args(["build", "--release", "--offline", "-q", "--timings", "--target", TARGET, "--target-dir"])
        .arg(dir)
        .args(packaged.patch_args())
        .stdout(Stdio::null());
    let t = Instant::now();
    run_status(&mut c)?;
    let seconds = t.elapsed().as_secs_f64();
    let html = std::fs::read_to_string(dir.join("cargo-timings/cargo-timing.html")).unwrap_or_default();
    let units = html
        .split("const UNIT_DATA = ")
        .nth(1)
        .and_then(|rest| rest.split(";\n").next())
        .and_then(|json| serde_json::from_str::<Vec<Value>>(json).ok())
        .unwrap_or_default();
    let build = dir.join(TARGET).join("release/build");
    let report = std::fs::read_dir(&build)
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("kleidiai-sys-"))
        .find_map(|e| std::fs::read_to_string(e.path().join("out/build-report.txt")).ok())
        .unwrap_or_default();
    Ok(Ours { seconds, units, report })
}

/// Configure + build of upstream's CMake project; (configure, build) seconds.
fn cmake(clang: &str, clangxx: &str, dir: &Path, jobs: usize) -> Result<(f64, f64), String> {
    let _ = std::fs::remove_dir_all(dir);
    let mut cfg = Command::new("cmake");
    cfg.arg("-S")
        .arg(root().join("vendor/kleidiai"))
        .arg("-B")
        .arg(dir)
        .args([
            "-DCMAKE_BUILD_TYPE=Release",
            "-DKLEIDIAI_BUILD_TESTS=OFF",
            "-DCMAKE_SYSTEM_NAME=Linux",
            "-DCMAKE_SYSTEM_PROCESSOR=aarch64",
        ])
        .arg(format!("-DCMAKE_C_COMPILER={clang}"))
        .arg("-DCMAKE_C_COMPILER_TARGET=aarch64-linux-gnu")
        .arg(format!("-DCMAKE_CXX_COMPILER={clangxx}"))
        .arg("-DCMAKE_CXX_COMPILER_TARGET=aarch64-linux-gnu")
        .arg(format!("-DCMAKE_ASM_COMPILER={clang}"))
        .arg("-DCMAKE_ASM_COMPILER_TARGET=aarch64-linux-gnu")
        .stdout(Stdio::null());
    let configure = run_status(&mut cfg)?;
    let mut b = Command::new("cmake");
    b.arg("--build").arg(dir).arg("-j").arg(jobs.to_string()).stdout(Stdio::null());
    let build = run_status(&mut b)?;
    Ok((configure, build))
}

/// `name`'s unit of `mode` (`todo` = a compile, `run-custom-build` = a build
/// script run) in cargo's timings: (start, duration).
fn unit(units: &[Value], name: &str, target: &str, mode: &str) -> Option<(f64, f64)> {
    units
        .iter()
        .find(|u| {
            u["name"] == name
                && u["mode"] == mode
                && u["target"].as_str().is_some_and(|t| t.trim().is_empty() == target.is_empty() && t.contains(target))
        })
        .map(|u| (u["start"].as_f64().unwrap_or(f64::NAN), u["duration"].as_f64().unwrap_or(f64::NAN)))
}

/// `key=value` of the build script's report.
fn report_value(report: &str, key: &str) -> Option<f64> {
    report.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// Where the best run's time went, as lines and JSON.
fn breakdown(best: &Ours, total: f64) -> (Vec<String>, Value) {
    let u = &best.units;
    let cc = unit(u, "cc", "", "todo");
    let script_compile = unit(u, "kleidiai-sys", "build-script", "todo");
    let script_run = unit(u, "kleidiai-sys", "build-script (run)", "run-custom-build");
    let sys = unit(u, "kleidiai-sys", "", "todo");
    let safe = unit(u, "kleidiai", "", "todo");
    let c_compile = report_value(&best.report, "compile_seconds");
    let pch = report_value(&best.report, "pch");
    let rust_cpu: f64 = u
        .iter()
        .filter(|x| x["mode"] == "todo")
        .filter(|x| x["name"] != "kleidiai-sys" || x["target"].as_str().is_some_and(|t| t.trim().is_empty()))
        .filter_map(|x| x["duration"].as_f64())
        .sum();
    let fmt = |x: Option<(f64, f64)>| x.map_or("n/a".to_string(), |(s, d)| format!("{d:.1}s (from {s:.1}s)"));
    let mut lines = vec![
        format!(
            "where the time of the best run ({total:.1}s) went (cargo --timings; units overlap on {} cores):",
            jobs()
        ),
        format!("  cc crate {}; build script compiled {}", fmt(cc), fmt(script_compile)),
        format!(
            "  build script run {} = C and assembly compile + archive {} ({} precompiled headers) + the rest",
            fmt(script_run),
            c_compile.map_or("n/a".into(), |c| format!("{c:.1}s")),
            pch.map_or("n/a".into(), |p| format!("{p}"))
        ),
        format!("  kleidiai-sys (bindings) {}; kleidiai {}", fmt(sys), fmt(safe)),
        format!("  every Rust compile unit together: {rust_cpu:.1}s (summed; they run side by side with the C)"),
    ];
    if let (Some((s, d)), Some((safe_start, safe_d))) = (script_run, safe) {
        lines.push(format!(
            "  critical path: {s:.1}s until the C starts, {d:.1}s of C, then {:.1}s to the end (kleidiai's {safe_d:.1}s within it)",
            total - (s + d).min(total),
        ));
        let _ = safe_start;
    }
    let json = json!({
        "cc_crate": cc.map(|x| x.1),
        "build_script_compile": script_compile.map(|x| x.1),
        "build_script_run": script_run.map(|x| x.1),
        "build_script_run_start": script_run.map(|x| x.0),
        "c_compile_and_archive": c_compile,
        "precompiled_headers": pch,
        "kleidiai_sys_rust": sys.map(|x| x.1),
        "kleidiai": safe.map(|x| x.1),
        "rust_units_summed": rust_cpu,
    });
    (lines, json)
}

fn jobs() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// The comparison; prints as it goes, returns the record (with `ratio`).
pub fn compare(env: &Env, rounds: usize) -> Result<Value, String> {
    let Some(clang) = ["clang-19", "clang"].into_iter().find(|c| which(c).is_some()) else {
        return Ok(
            json!({"skipped": "no clang: upstream's CMake build with GCC 12 stops at an internal compiler error"}),
        );
    };
    let clangxx = if clang == "clang-19" { "clang++-19" } else { "clang++" };
    let ar = ["llvm-ar-19", "llvm-ar"].into_iter().find(|c| which(c).is_some()).ok_or("no llvm-ar")?;
    let dir = root().join("target/build-compare");
    let packaged = crate::downstream::package(env, &dir.join("project"))?;
    let r = Restricted::new("build-compare", &[clang, ar, "aarch64-linux-gnu-gcc", "cc"])?;
    // Resolve the downstream crate's dependencies once (offline): the lock
    // file is not part of what is timed.
    let mut lock = r.cargo(&packaged.project);
    lock.args(["generate-lockfile", "--offline", "-q"]).args(packaged.patch_args());
    run_status(&mut lock)?;

    let mut runs_ours: Vec<Ours> = Vec::new();
    let mut runs_cmake: Vec<(f64, f64)> = Vec::new();
    for i in 0..rounds {
        let o = ours(&r, &packaged, clang, ar, &dir.join("cargo"))?;
        println!("    round {}: downstream crate cold {:.1}s", i + 1, o.seconds);
        runs_ours.push(o);
        let (c, b) = cmake(clang, clangxx, &dir.join("cmake"), jobs())?;
        println!("    round {}: upstream CMake configure {c:.1}s + build {b:.1}s = {:.1}s", i + 1, c + b);
        runs_cmake.push((c, b));
    }
    let _ = std::fs::remove_dir_all(dir.join("cargo"));
    let _ = std::fs::remove_dir_all(dir.join("cmake"));
    let best = runs_ours.iter().min_by(|a, b| a.seconds.total_cmp(&b.seconds)).ok_or("no run")?;
    let best_cmake = runs_cmake.iter().map(|(c, b)| c + b).fold(f64::INFINITY, f64::min);
    let ratio = best.seconds / best_cmake;
    let (lines, parts) = breakdown(best, best.seconds);
    let c_ratio = report_value(&best.report, "compile_seconds")
        .map(|c| c / runs_cmake.iter().map(|x| x.1).fold(f64::INFINITY, f64::min));
    println!(
        "    best of {rounds}: downstream crate {:.1}s, CMake {best_cmake:.1}s: ratio {ratio:.2}x (goal: at most {GOAL}x){}",
        best.seconds,
        if ratio <= GOAL { "" } else { "  <-- above the goal" }
    );
    if let Some(c) = c_ratio {
        println!("    the C alone (build script's compile + archive against CMake's build step): {c:.2}x");
    }
    for l in &lines {
        println!("    {l}");
    }
    Ok(json!({
        "compiler": clang,
        "jobs": jobs(),
        "rounds": rounds,
        "downstream_cold_seconds": runs_ours.iter().map(|o| o.seconds).collect::<Vec<_>>(),
        "cmake_configure_seconds": runs_cmake.iter().map(|x| x.0).collect::<Vec<_>>(),
        "cmake_build_seconds": runs_cmake.iter().map(|x| x.1).collect::<Vec<_>>(),
        "best_downstream_seconds": best.seconds,
        "best_cmake_seconds": best_cmake,
        "ratio": ratio,
        "goal": GOAL,
        "c_only_ratio": c_ratio,
        "breakdown": parts,
    }))
}
