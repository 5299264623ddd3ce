//! The test matrix: host, then every qemu CPU model, plus the build-time
//! comparison and the MSRV check.

mod binaries;
mod checks;
mod options;
mod summary;
mod toolchain;

pub use options::USAGE;

use crate::report::ModelResult;
use crate::util::{cargo, load_env, phase, root, run_status, timed_output};
use binaries::{build_c_test, build_tests, run_model};
use checks::{check_model, conformance_coverage};
use options::{TARGET, parse};
use serde_json::Value;
use std::time::Instant;
use toolchain::{feature_subset, msrv_check};

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

    if opts.arm_fuzz {
        phase(&format!(
            "fuzz on aarch64: the targets against the KleidiAI kernels under qemu ({}), replay driver",
            crate::fuzz::ARM_MODELS.join(", ")
        ));
        let t = Instant::now();
        match crate::fuzz::run_arm(&env) {
            Ok(r) => {
                ok &= r.iter().all(crate::fuzz::FuzzResult::ok);
                let execs: u64 = r.iter().map(|r| r.execs).sum();
                println!("    {execs} executions on Arm in all");
                extra.insert(
                    "fuzz_arm".into(),
                    r.iter().map(crate::fuzz::FuzzResult::to_json).collect::<Vec<_>>().into(),
                );
                fuzz_results.extend(r);
            }
            Err(e) => {
                println!("    FAILED: {e}");
                extra.insert("fuzz_arm".into(), Value::String(format!("failed: {e}")));
                ok = false;
            }
        }
        phases.push(("fuzz (aarch64, qemu)".into(), t.elapsed().as_secs_f64()));
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
    let props = crate::reliability::proptest_totals(&results, opts.models.len(), options::MODELS.len());
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
    // ---- non-finite inputs per kernel (issue 15's table).
    let nonfinite = crate::reliability::nonfinite_table(&results);
    for line in &nonfinite.lines {
        println!("{line}");
    }
    ok &= nonfinite.ok;
    extra.insert("nonfinite".into(), nonfinite.json);
    extra.insert("determinism_across_runs".into(), determinism.json);

    summary::finish(&results, &fuzz_results, &phases, extra, &verdicts, started, ok)
}
