//! Building the test binaries and running them, with the doctests, under
//! one CPU model (qemu) or on the host; the C ABI test program.

use super::options::TARGET;
use crate::report::{self, ModelResult};
use crate::util::{Env, cargo, root, run_status, timed_output};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Examples run on every model as well (`cargo test` only compiles
/// examples): each must exit successfully. Quick ones only.
const RUN_EXAMPLES: [&str; 2] = ["quickstart", "kleidiai-info"];

/// Test executables cargo built for `target` (None: host), via
/// --message-format=json, and the [`RUN_EXAMPLES`] it built on the way.
pub(super) fn build_tests(target: Option<&str>) -> Result<(Vec<(String, PathBuf)>, f64), String> {
    let mut cmd = cargo();
    cmd.args(["test", "--release", "--no-run", "--message-format=json-render-diagnostics"]);
    if let Some(t) = target {
        cmd.args(["--target", t]);
    }
    cmd.stderr(std::process::Stdio::inherit());
    let (out, secs) = timed_output(&mut cmd)?;
    if !out.status.success() {
        return Err(format!("building the tests failed ({:?})", target.unwrap_or("host")));
    }
    let mut exes = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v.get("reason").and_then(Value::as_str) != Some("compiler-artifact") {
            continue;
        }
        let is_test = v.pointer("/profile/test").and_then(Value::as_bool) == Some(true);
        let Some(exe) = v.get("executable").and_then(Value::as_str) else {
            continue;
        };
        let kind = v.pointer("/target/kind/0").and_then(Value::as_str).unwrap_or("?");
        let name = v.pointer("/target/name").and_then(Value::as_str).unwrap_or("?");
        if is_test || (kind == "example" && RUN_EXAMPLES.contains(&name)) {
            exes.push((format!("{name}({kind})"), PathBuf::from(exe)));
        }
    }
    exes.sort();
    Ok((exes, secs))
}

/// Runs every test executable (and the doctests) for one model.
pub(super) fn run_model(
    cpu: &str,
    exes: &[(String, PathBuf)],
    runner: Option<&Env>,
    report_dir: &Path,
) -> Result<ModelResult, String> {
    let t = Instant::now();
    let mut res = ModelResult { cpu: cpu.to_string(), ..Default::default() };
    let _ = std::fs::remove_dir_all(report_dir);
    std::fs::create_dir_all(report_dir).map_err(|e| e.to_string())?;
    for (name, exe) in exes {
        let report = report_dir.join(format!("{}.jsonl", name.replace(['(', ')', '/'], "_")));
        let mut cmd = match runner {
            // The emulator's path lets a test start a child process of
            // itself under the same model (tests/kill_switch.rs).
            Some(env) => {
                let mut c = env.qemu(cpu, exe);
                c.env("KLEIDIAI_QEMU", &env.qemu).env("KLEIDIAI_SYSROOT", &env.sysroot);
                c
            }
            None => Command::new(exe),
        };
        cmd.current_dir(root()).env("KLEIDIAI_TEST_REPORT", &report).env("KLEIDIAI_TEST_CPU", cpu);
        let (out, secs) = timed_output(&mut cmd)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let (mut counts, mut failed) =
            if name == "capi_test(c)" { report::parse_c_test(&stdout) } else { report::parse_libtest(&stdout) };
        if name.ends_with("(example)") {
            // A program, not a test harness: its exit status is its one result.
            let ok = out.status.success();
            counts = report::Counts { passed: ok as usize, failed: !ok as usize, ignored: 0, result_lines: 1 };
            if !ok {
                failed.push(format!("exited with {}", out.status));
            }
        }
        let mut rec = report::read_report(&report)?;
        if name == "capi_test(c)" {
            rec.skips.extend(report::c_test_skips(&stdout));
        }
        let ok = out.status.success() && counts.result_lines > 0;
        println!(
            "    {name:<34} {:>4} passed {:>3} failed {:>3} ignored  {secs:6.1}s{}",
            counts.passed,
            counts.failed,
            counts.ignored,
            if ok { "" } else { "  <-- FAILED" }
        );
        if !ok {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stdout.lines().chain(stderr.lines()).collect();
            let from = tail.len().saturating_sub(60);
            for l in &tail[from..] {
                println!("      | {l}");
            }
            if counts.result_lines == 0 {
                res.failed += 1;
                res.failures.push(format!("{name}: exited with {} before reporting a result", out.status));
            }
        }
        res.add(name, counts, failed, rec);
    }
    // Doctests: compiled for the target by rustdoc and run through the
    // same runner (qemu with this CPU model).
    let report = report_dir.join("doctests.jsonl");
    let mut cmd = cargo();
    cmd.args(["test", "--release", "--doc", "-p", "kleidiai", "-p", "kleidiai-sys", "-p", "kleidiai-suite"])
        .env("KLEIDIAI_TEST_REPORT", &report)
        .env("KLEIDIAI_TEST_CPU", cpu);
    if let Some(env) = runner {
        cmd.args(["--target", TARGET])
            .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER", root().join("scripts/qemu-run"))
            .env("KLEIDIAI_QEMU", &env.qemu)
            .env("KLEIDIAI_SYSROOT", &env.sysroot)
            .env("QEMU_CPU", cpu);
    }
    let (out, secs) = timed_output(&mut cmd)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (counts, failed) = report::parse_libtest(&stdout);
    let ok = out.status.success() && counts.result_lines > 0;
    println!(
        "    {:<34} {:>4} passed {:>3} failed {:>3} ignored  {secs:6.1}s{}",
        "doctests",
        counts.passed,
        counts.failed,
        counts.ignored,
        if ok { "" } else { "  <-- FAILED" }
    );
    if !ok {
        for l in stdout
            .lines()
            .chain(String::from_utf8_lossy(&out.stderr).lines())
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            println!("      | {l}");
        }
        if counts.result_lines == 0 {
            res.failed += 1;
            res.failures.push(format!("doctests: cargo exited with {}", out.status));
        }
    }
    res.add("doctests", counts, failed, report::read_report(&report)?);
    res.seconds = t.elapsed().as_secs_f64();
    Ok(res)
}

/// Builds `kleidiai-capi`'s static library and links the C test program
/// (`kleidiai-capi/tests/c/capi_test.c`) against it with the target's C
/// compiler, warnings as errors.
pub(super) fn build_c_test(target: Option<&str>) -> Result<PathBuf, String> {
    let mut c = cargo();
    c.args(["build", "-q", "--release", "-p", "kleidiai-capi"]);
    if let Some(t) = target {
        c.args(["--target", t]);
    }
    run_status(&mut c)?;
    let dir = match target {
        Some(t) => root().join("target").join(t).join("release"),
        None => root().join("target/release"),
    };
    let cc = if target.is_some() { "aarch64-linux-gnu-gcc" } else { "cc" };
    let exe = dir.join("capi_test");
    let mut g = Command::new(cc);
    g.args(["-O1", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"])
        .arg("-I")
        .arg(root().join("kleidiai-capi/include"))
        .arg(root().join("kleidiai-capi/tests/c/capi_test.c"))
        .arg(dir.join("libkleidiai_capi.a"))
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe);
    run_status(&mut g).map_err(|e| format!("compiling the C ABI test: {e}"))?;
    Ok(exe)
}
