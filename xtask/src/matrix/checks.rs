//! Checks of the results: each model ran the tiers and reported the
//! features it should; every compute kernel passed its conformance test on
//! some model.

use super::options::{KERNEL_TIERS, Model};
use crate::report::ModelResult;
use serde_json::Value;
use std::collections::BTreeSet;

/// Checks a model ran what it should: the features qemu gives match the
/// table, and every tier present ran at least one test.
pub(super) fn check_model(res: &mut ModelResult, model: Option<&Model>) {
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

pub(super) struct Coverage {
    pub ok: bool,
    pub lines: Vec<String>,
    pub json: Value,
}

pub(super) fn conformance_coverage(results: &[ModelResult]) -> Coverage {
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
