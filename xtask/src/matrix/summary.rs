//! The end of `xtask test`: the summary table, the wall time per phase, and
//! target/test-matrix.json, test-details.json and conformance.json.

use crate::report::ModelResult;
use crate::util::root;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Instant;

/// Prints the summary and writes the JSON files; `ok` is the verdict so far,
/// the result the verdict with the models' failures and problems.
pub(super) fn finish(
    results: &[ModelResult],
    fuzz_results: &[crate::fuzz::FuzzResult],
    phases: &[(String, f64)],
    extra: serde_json::Map<String, Value>,
    verdicts: &crate::reliability::Verdicts,
    started: Instant,
    mut ok: bool,
) -> Result<bool, String> {
    println!("\n==> summary");
    println!("{:<34} {:>7} {:>7} {:>8}  tiers run", "cpu", "passed", "failed", "skipped");
    for r in results {
        println!(
            "{:<34} {:>7} {:>7} {:>8}  {}",
            r.cpu,
            r.passed,
            r.failed,
            r.skipped,
            r.tiers_run.iter().cloned().collect::<Vec<_>>().join(" ")
        );
    }
    for r in results {
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
    for r in fuzz_results {
        println!("fuzz {}", r.line());
    }
    println!("\nwall time per phase:");
    for (name, secs) in phases {
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
