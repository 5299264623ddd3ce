//! The test matrix: host, then every qemu CPU model, plus the build-time
//! comparison and the MSRV check.

use crate::report::{self, ModelResult};
use crate::util::{self, Env, cargo, load_env, phase, root, run_status, timed_output};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub const USAGE: &str = "usage: cargo run -p xtask --release -- test [options]
  --models a,b,...   only these qemu CPU models (default: the whole matrix)
  --no-compare       skip the cold-build comparison against upstream's CMake (best of 3 interleaved)
  --no-msrv          skip the MSRV check
  --no-downstream    skip cargo package and the downstream crate built from the .crate files
  --no-host          skip the host (x86) run
  --no-fuzz          skip the bounded cargo-fuzz run (host, nightly; also `xtask fuzz` alone)
  --no-llama         skip llama.cpp with kleidiai-rs on a real model (also `xtask llama` alone, full matrix)
Needs scripts/setup.sh to have run (it writes .tools/env); scripts/test.sh does both.";

const TARGET: &str = "aarch64-unknown-linux-gnu";

/// Tiers that have KleidiAI kernels; a model that has one must run a test of it.
/// In order of preference (the selection report must name the last one a
/// model has).
const KERNEL_TIERS: [&str; 9] = ["neon", "fp16", "bf16", "dotprod", "i8mm", "sve", "sve2p1", "sme", "sme2"];

struct Model {
    cpu: &'static str,
    tiers: &'static [&'static str],
    sve_bytes: u64,
    sme_bytes: u64,
}

/// The CPU models and what each is expected to offer (qemu 11.1; see
/// ../shared/design.md section 4). A qemu whose models differ fails loudly.
const MODELS: &[Model] = &[
    Model { cpu: "cortex-a53", tiers: &["neon"], sve_bytes: 0, sme_bytes: 0 },
    Model { cpu: "neoverse-n1", tiers: &["neon", "fp16", "dotprod"], sve_bytes: 0, sme_bytes: 0 },
    // qemu >= 10.2 gives neoverse-v1 no bf16.
    Model { cpu: "neoverse-v1", tiers: &["neon", "fp16", "dotprod", "i8mm", "sve"], sve_bytes: 32, sme_bytes: 0 },
    Model {
        cpu: "neoverse-n2",
        tiers: &["neon", "fp16", "bf16", "dotprod", "i8mm", "sve"],
        sve_bytes: 16,
        sme_bytes: 0,
    },
    Model {
        cpu: "max,sme=off",
        tiers: &["neon", "fp16", "bf16", "dotprod", "i8mm", "sve", "sve2p1"],
        sve_bytes: 64,
        sme_bytes: 0,
    },
    Model {
        cpu: "max",
        tiers: &["neon", "fp16", "bf16", "dotprod", "i8mm", "sve", "sve2p1", "sme", "sme2"],
        sve_bytes: 64,
        sme_bytes: 32,
    },
    Model {
        cpu: "max,sme-default-vector-length=64",
        tiers: &["neon", "fp16", "bf16", "dotprod", "i8mm", "sve", "sve2p1", "sme", "sme2"],
        sve_bytes: 64,
        sme_bytes: 64,
    },
];

struct Options {
    models: Vec<&'static Model>,
    compare: bool,
    msrv: bool,
    host: bool,
    downstream: bool,
    fuzz: bool,
    llama: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        models: MODELS.iter().collect(),
        compare: true,
        msrv: true,
        host: true,
        downstream: true,
        fuzz: true,
        llama: true,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--models" => {
                let list = it.next().ok_or("--models needs a value")?;
                o.models = Vec::new();
                for name in list.split(';').flat_map(|s| s.split(' ')).filter(|s| !s.is_empty()) {
                    let m = MODELS.iter().find(|m| m.cpu == name).ok_or_else(|| {
                        format!(
                            "unknown model `{name}`; known: {}",
                            MODELS.iter().map(|m| m.cpu).collect::<Vec<_>>().join(" ; ")
                        )
                    })?;
                    o.models.push(m);
                }
            }
            "--no-compare" => o.compare = false,
            "--no-msrv" => o.msrv = false,
            "--no-host" => o.host = false,
            "--no-downstream" => o.downstream = false,
            "--no-fuzz" => o.fuzz = false,
            "--no-llama" => o.llama = false,
            other => return Err(format!("unknown option `{other}`\n{USAGE}")),
        }
    }
    Ok(o)
}

/// Examples run on every model as well (`cargo test` only compiles
/// examples): each must exit successfully. Quick ones only.
const RUN_EXAMPLES: [&str; 2] = ["quickstart", "kleidiai-info"];

/// Test executables cargo built for `target` (None: host), via
/// --message-format=json, and the [`RUN_EXAMPLES`] it built on the way.
fn build_tests(target: Option<&str>) -> Result<(Vec<(String, PathBuf)>, f64), String> {
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
fn run_model(
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

/// Checks a model ran what it should: the features qemu gives match the
/// table, and every tier present ran at least one test.
fn check_model(res: &mut ModelResult, model: Option<&Model>) {
    let Some(model) = model else {
        // The host: nothing Arm may run.
        if !res.tiers_run.is_empty() {
            res.problems.push(format!("host ran Arm tiers {:?}", res.tiers_run));
        }
        return;
    };
    let detected: BTreeSet<&str> =
        res.features.iter().map(String::as_str).filter(|f| KERNEL_TIERS.contains(f)).collect();
    let expected: BTreeSet<&str> = model.tiers.iter().copied().collect();
    if res.features.is_empty() {
        res.problems.push("no test reported the detected CPU features".into());
    } else if detected != expected {
        res.problems.push(format!("qemu model offers tiers {detected:?}, the matrix expects {expected:?}"));
    }
    if res.sve_bytes != model.sve_bytes {
        res.problems.push(format!("SVE vector length {} bits, expected {}", res.sve_bytes * 8, model.sve_bytes * 8));
    }
    if res.sme_bytes != model.sme_bytes {
        res.problems.push(format!("SME vector length {} bits, expected {}", res.sme_bytes * 8, model.sme_bytes * 8));
    }
    for tier in &expected {
        if !res.tiers_run.contains(*tier) {
            res.problems.push(format!("tier {tier} is present but no test ran it (silent skip)"));
        }
    }
    // The selection report must use the best tier the model has.
    let best = KERNEL_TIERS.iter().rev().find(|t| expected.contains(**t)).copied().unwrap_or("reference");
    match res.selection.as_deref() {
        None => res.problems.push("no selection report was recorded".into()),
        Some(sel) if sel != best => {
            res.problems.push(format!("selection report's highest tier is {sel}, the model's best is {best}"))
        }
        _ => {}
    }
    for tier in &res.tiers_run {
        if !expected.contains(tier.as_str()) {
            res.problems.push(format!("a test ran tier {tier}, which this model does not have"));
        }
    }
}

struct Coverage {
    ok: bool,
    lines: Vec<String>,
    json: Value,
}

fn conformance_coverage(results: &[ModelResult]) -> Coverage {
    use std::collections::BTreeMap;
    let manifest: BTreeSet<String> = results.iter().flat_map(|r| r.manifest.iter().cloned()).collect();
    // kernel -> (passed on, skip reasons, failures)
    type Seen = (Vec<String>, Vec<String>, Vec<String>);
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    for r in results {
        for k in &r.kernels {
            let name = k.value.get("kernel").and_then(Value::as_str).unwrap_or("?").to_string();
            let status = k.value.get("status").and_then(Value::as_str).unwrap_or("?");
            let reason = k.value.get("reason").and_then(Value::as_str).unwrap_or("");
            let e = seen.entry(name).or_default();
            match status {
                "pass" => e.0.push(r.cpu.clone()),
                "skip" => e.1.push(format!("{}: {reason}", r.cpu)),
                _ => e.2.push(format!("{}: {reason}", r.cpu)),
            }
        }
    }
    let mut lines = vec![format!("\n==> conformance coverage ({} compute kernels in the manifest)", manifest.len())];
    let (mut passed, mut never_run, mut untested, mut failed) = (0, Vec::new(), Vec::new(), Vec::new());
    for k in &manifest {
        match seen.get(k) {
            None => untested.push(k.clone()),
            Some((p, _, f)) if !f.is_empty() => failed.push(format!("{k}: {}", f.join("; "))),
            Some((p, _, _)) if !p.is_empty() => passed += 1,
            Some((_, s, _)) => never_run.push(format!("{k}: {}", s.join("; "))),
        }
    }
    lines.push(format!("    passed on at least one model: {passed}"));
    for (title, list) in [
        ("no model here can run (with the reasons)", &never_run),
        ("FAILED", &failed),
        ("NOT TESTED (no conformance test for its family)", &untested),
    ] {
        if !list.is_empty() {
            lines.push(format!("    {title}: {}", list.len()));
            for l in list.iter() {
                lines.push(format!("      {l}"));
            }
        }
    }
    // Every kernel must have been tested somewhere (passed, or skipped
    // everywhere with reasons), and none may fail.
    let ok = failed.is_empty() && untested.is_empty() && !manifest.is_empty();
    Coverage {
        ok,
        lines,
        json: serde_json::json!({
            "manifest": manifest.len(),
            "passed_somewhere": passed,
            "runnable_nowhere": never_run,
            "failed": failed,
            "untested": untested,
        }),
    }
}

/// Builds `kleidiai-capi`'s static library and links the C test program
/// (`kleidiai-capi/tests/c/capi_test.c`) against it with the target's C
/// compiler, warnings as errors.
fn build_c_test(target: Option<&str>) -> Result<PathBuf, String> {
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

/// Builds kleidiai-sys with only two tiers and runs its unit tests under
/// qemu: what was built must follow the Cargo features.
fn feature_subset(env: &Env) -> Result<(), String> {
    let mut c = cargo();
    c.args(["test", "-q", "--release", "-p", "kleidiai-sys", "--lib", "--no-default-features"])
        .args(["--features", "dotprod,i8mm", "--target", TARGET, "--target-dir"])
        .arg(root().join("target/feature-subset"))
        .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER", root().join("scripts/qemu-run"))
        .env("KLEIDIAI_QEMU", &env.qemu)
        .env("KLEIDIAI_SYSROOT", &env.sysroot)
        .env("QEMU_CPU", "max");
    run_status(&mut c).map(|_| ())
}

fn msrv_check() -> Result<String, String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).map_err(|e| e.to_string())?;
    let msrv = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_string())
        .ok_or("no rust-version in Cargo.toml")?;
    if util::which("rustup").is_none() {
        return Ok(format!("skipped: no rustup to install Rust {msrv}"));
    }
    let mut install = Command::new("rustup");
    install.args(["toolchain", "install", &msrv, "--profile", "minimal", "--target", TARGET, "--no-self-update"]);
    install.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    run_status(&mut install).map_err(|e| format!("installing Rust {msrv}: {e}"))?;
    let target_dir = root().join("target/msrv");
    for target in [None, Some(TARGET)] {
        // The rustup proxy picks the toolchain from `+msrv`; the CARGO, RUSTC
        // and RUSTUP_TOOLCHAIN this process inherited would override it.
        let mut c = Command::new("cargo");
        c.current_dir(root())
            .arg(format!("+{msrv}"))
            .args(["check", "-q", "--locked", "-p", "kleidiai-sys", "-p", "kleidiai", "--target-dir"])
            .arg(&target_dir)
            .env_remove("CARGO")
            .env_remove("RUSTC")
            .env_remove("RUSTUP_TOOLCHAIN");
        if let Some(t) = target {
            c.args(["--target", t]);
        }
        run_status(&mut c).map_err(|e| format!("Rust {msrv} check ({}) failed: {e}", target.unwrap_or("host")))?;
    }
    Ok(format!("ok: kleidiai-sys and kleidiai check with Rust {msrv} (host and {TARGET})"))
}

pub fn run(args: &[String]) -> Result<bool, String> {
    let opts = parse(args)?;
    let started = Instant::now();
    let mut phases: Vec<(String, f64)> = Vec::new();
    if let Ok(s) = std::env::var("KLEIDIAI_SETUP_SECONDS") {
        if let Ok(s) = s.parse() {
            phases.push(("setup".into(), s));
        }
    }
    let env = load_env()?;
    let mut ok = true;
    let mut results: Vec<ModelResult> = Vec::new();
    let mut extra = serde_json::Map::new();

    phase(&format!("build: tests for {TARGET}"));
    let (mut arm_exes, secs) = build_tests(Some(TARGET))?;
    phases.push((format!("build ({TARGET})"), secs));
    arm_exes.push(("capi_test(c)".into(), build_c_test(Some(TARGET))?));
    println!("    {} test binaries (incl. the C ABI test program)", arm_exes.len());

    {
        phase("generated files: committed bindings fresh and shared across aarch64 targets; symbols prefixed");
        let t = Instant::now();
        match crate::generated::check_all(TARGET) {
            Ok(lines) => {
                for l in &lines {
                    println!("    {l}");
                }
                extra.insert("generated".into(), lines.into());
            }
            Err(e) => {
                println!("    FAILED: {e}");
                extra.insert("generated".into(), Value::String(format!("failed: {e}")));
                ok = false;
            }
        }
        phases.push(("generated files".into(), t.elapsed().as_secs_f64()));
    }

    {
        phase("benches: compile only (criterion, for real Arm hardware)");
        let mut c = cargo();
        c.args(["bench", "--no-run", "-q", "--target", TARGET]);
        let secs = run_status(&mut c)?;
        phases.push(("benches (compile)".into(), secs));
    }

    if opts.host {
        phase("host (x86_64): build and run");
        let (mut exes, build_secs) = build_tests(None)?;
        exes.push(("capi_test(c)".into(), build_c_test(None)?));
        let mut r = run_model("host", &exes, None, &root().join("target/test-reports/host"))?;
        r.seconds += build_secs;
        check_model(&mut r, None);
        phases.push(("host".into(), r.seconds));
        results.push(r);
    }

    for model in &opts.models {
        phase(&format!("qemu -cpu {}", model.cpu));
        let dir = root().join("target/test-reports").join(model.cpu.replace([',', '='], "_"));
        let mut r = run_model(model.cpu, &arm_exes, Some(&env), &dir)?;
        check_model(&mut r, Some(model));
        phases.push((format!("qemu {}", model.cpu), r.seconds));
        results.push(r);
    }

    {
        phase("kleidiai-sys with a subset of tiers (--no-default-features --features dotprod,i8mm)");
        let t = Instant::now();
        match feature_subset(&env) {
            Ok(()) => println!("    ok"),
            Err(e) => {
                println!("    FAILED: {e}");
                ok = false;
            }
        }
        phases.push(("feature subset".into(), t.elapsed().as_secs_f64()));
    }

    if opts.downstream {
        phase("packaging: cargo package, then a downstream crate built from the .crate files (aarch64, qemu)");
        let t = Instant::now();
        match crate::downstream::run(&env) {
            Ok(lines) => {
                for l in &lines {
                    println!("    {l}");
                }
                extra.insert("downstream".into(), lines.into());
            }
            Err(e) => {
                println!("    FAILED: {e}");
                extra.insert("downstream".into(), Value::String(format!("failed: {e}")));
                ok = false;
            }
        }
        phases.push(("packaging + downstream".into(), t.elapsed().as_secs_f64()));
    }

    if opts.msrv {
        phase("MSRV");
        let t = Instant::now();
        match msrv_check() {
            Ok(msg) => {
                println!("    {msg}");
                extra.insert("msrv".into(), Value::String(msg));
            }
            Err(e) => {
                println!("    FAILED: {e}");
                extra.insert("msrv".into(), Value::String(format!("failed: {e}")));
                ok = false;
            }
        }
        phases.push(("msrv".into(), t.elapsed().as_secs_f64()));
    }

    {
        phase("docs: cargo doc (aarch64, as docs.rs builds it), every warning an error");
        let t = Instant::now();
        let mut d = cargo();
        env.apply(&mut d).env("RUSTDOCFLAGS", "-D warnings").args([
            "doc",
            "--no-deps",
            "-q",
            "-p",
            "kleidiai",
            "-p",
            "kleidiai-sys",
            "-p",
            "kleidiai-capi",
            "--target",
            TARGET,
        ]);
        let (out, _) = timed_output(&mut d)?;
        if out.status.success() {
            println!("    no warnings (missing docs, broken links)");
            extra.insert("docs".into(), Value::String("no warnings".into()));
        } else {
            println!("    FAILED:\n{}", String::from_utf8_lossy(&out.stderr));
            extra.insert("docs".into(), Value::String("warnings".into()));
            ok = false;
        }
        phases.push(("docs".into(), t.elapsed().as_secs_f64()));
    }

    {
        phase("a user's build: docs.rs with no aarch64 C compiler; bad input stops with one message");
        let t = Instant::now();
        match crate::userbuild::docs_rs().and_then(|l| {
            let mut lines = vec![l];
            lines.extend(crate::userbuild::bad_input(&env)?);
            Ok(lines)
        }) {
            Ok(lines) => {
                for l in &lines {
                    println!("    {l}");
                }
                extra.insert("user_build".into(), lines.into());
            }
            Err(e) => {
                println!("    FAILED: {e}");
                extra.insert("user_build".into(), Value::String(format!("failed: {e}")));
                ok = false;
            }
        }
        phases.push(("docs.rs and bad input".into(), t.elapsed().as_secs_f64()));
    }

    let mut fuzz_results = Vec::new();
    if opts.fuzz {
        phase("fuzz: cargo fuzz targets, bounded runs on a copy of fuzz/corpus (host, reference backend)");
        let t = Instant::now();
        match crate::fuzz::run() {
            Ok(r) => fuzz_results = r,
            Err(e) => {
                println!("    FAILED: {e}");
                extra.insert("fuzz".into(), Value::String(format!("failed: {e}")));
                ok = false;
            }
        }
        if !fuzz_results.is_empty() {
            ok &= fuzz_results.iter().all(crate::fuzz::FuzzResult::ok);
            extra.insert(
                "fuzz".into(),
                fuzz_results.iter().map(crate::fuzz::FuzzResult::to_json).collect::<Vec<_>>().into(),
            );
        }
        phases.push(("fuzz".into(), t.elapsed().as_secs_f64()));
    }

    if opts.llama {
        // llama.cpp with kleidiai-rs as its KleidiAI provider, on a real
        // model, against llama.cpp's own KleidiAI path and its plain CPU code
        // (the subset; `xtask llama` runs the full matrix).
        let t = Instant::now();
        match crate::llama::phase_run(&env, &crate::llama::Config::subset()) {
            Ok((pass, v)) => {
                ok &= pass;
                let _ = std::fs::write(
                    root().join("target/llama.json"),
                    serde_json::to_string_pretty(&v).unwrap_or_default(),
                );
                extra.insert("llama".into(), v);
            }
            Err(e) => {
                println!("    FAILED: {e}");
                extra.insert("llama".into(), Value::String(format!("failed: {e}")));
                ok = false;
            }
        }
        phases.push(("llama.cpp (kleidiai-rs as its KleidiAI provider)".into(), t.elapsed().as_secs_f64()));
    }

    if opts.compare {
        phase(&format!(
            "cold build: the downstream crate (every dependency) against upstream's CMake, same compiler, best of {} interleaved",
            crate::buildtime::ROUNDS
        ));
        let t = Instant::now();
        match crate::buildtime::compare(&env, crate::buildtime::ROUNDS) {
            Ok(v) => {
                extra.insert("build_compare".into(), v);
            }
            Err(e) => {
                println!("    FAILED: {e}");
                ok = false;
            }
        }
        phases.push(("build comparison".into(), t.elapsed().as_secs_f64()));
    }

    // ---- conformance coverage: every compute kernel passes on some model,
    // or is named with the reason no model here runs it.
    let coverage = conformance_coverage(&results);
    for line in &coverage.lines {
        println!("{line}");
    }
    if !coverage.ok {
        ok = false;
    }
    extra.insert("conformance_coverage".into(), coverage.json);

    // ---- property-test case totals and determinism across runs.
    let props = crate::reliability::proptest_totals(&results);
    let (determinism, verdicts) = crate::reliability::determinism(&results);
    for check in [&props, &determinism] {
        for line in &check.lines {
            println!("{line}");
        }
        ok &= check.ok;
    }
    extra.insert("proptest".into(), props.json);
    // ---- memory per weight kind (issue 11's goal).
    let memory = crate::reliability::memory_table(&results);
    for line in &memory.lines {
        println!("{line}");
    }
    ok &= memory.ok;
    extra.insert("memory".into(), memory.json);
    extra.insert("determinism_across_runs".into(), determinism.json);

    // ---- summary
    println!("\n==> summary");
    println!("{:<34} {:>7} {:>7} {:>8}  tiers run", "cpu", "passed", "failed", "skipped");
    for r in &results {
        println!(
            "{:<34} {:>7} {:>7} {:>8}  {}",
            r.cpu,
            r.passed,
            r.failed,
            r.skipped,
            r.tiers_run.iter().cloned().collect::<Vec<_>>().join(" ")
        );
    }
    for r in &results {
        if !r.skips.is_empty() {
            println!("\nskipped on {} (named, with the reason):", r.cpu);
            let mut seen = BTreeSet::new();
            for (t, why) in &r.skips {
                if seen.insert((t, why)) {
                    println!("    {t}: {why}");
                }
            }
        }
        for f in &r.failures {
            println!("FAILED on {}: {f}", r.cpu);
        }
        for p in &r.problems {
            println!("PROBLEM on {}: {p}", r.cpu);
        }
        for w in &r.warnings {
            println!("warning on {}: {w}", r.cpu);
        }
        if r.failed > 0 || !r.problems.is_empty() {
            ok = false;
        }
    }
    for r in &fuzz_results {
        println!("fuzz {}", r.line());
    }
    println!("\nwall time per phase:");
    for (name, secs) in &phases {
        println!("    {name:<46} {secs:8.1}s");
    }
    println!("    {:<46} {:8.1}s", "total (this command, after setup)", started.elapsed().as_secs_f64());

    let json: Vec<Value> = results.iter().map(ModelResult::to_json).collect();
    let out = root().join("target/test-matrix.json");
    std::fs::write(&out, serde_json::to_string_pretty(&json).unwrap()).map_err(|e| e.to_string())?;
    let mut details = extra;
    details.insert(
        "phases".into(),
        phases.iter().map(|(n, s)| serde_json::json!({"phase": n, "seconds": s})).collect::<Vec<_>>().into(),
    );
    std::fs::write(
        root().join("target/test-details.json"),
        serde_json::to_string_pretty(&Value::Object(details)).unwrap(),
    )
    .map_err(|e| e.to_string())?;
    let verdicts = &verdicts;
    let kernels: Vec<Value> = results
        .iter()
        .flat_map(|r| {
            r.kernels.iter().map(move |k| {
                let mut v = k.value.clone();
                if let Some(o) = v.as_object_mut() {
                    o.remove("kind");
                    o.remove("thread");
                    o.insert("cpu".into(), Value::String(r.cpu.clone()));
                    crate::reliability::annotate(o, &r.cpu, verdicts);
                }
                v
            })
        })
        .collect();
    if !kernels.is_empty() {
        std::fs::write(root().join("target/conformance.json"), serde_json::to_string_pretty(&kernels).unwrap())
            .map_err(|e| e.to_string())?;
    }
    println!("\nwrote {}", out.display());
    println!("{}", if ok { "RESULT: all passed" } else { "RESULT: FAILED" });
    Ok(ok)
}
