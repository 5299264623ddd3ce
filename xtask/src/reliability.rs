//! Reliability checks over the whole matrix: the property tests' case
//! counts, summed over the qemu CPU models (at least [`MIN_ARM_CASES`] for
//! the whole matrix) and on the host (at least [`MIN_HOST_CASES`]), and
//! determinism across runs: a kernel's
//! conformance outputs (seeded inputs, hashed by the test) must be the same
//! bits in every process that ran it at the same vector length.

use crate::report::ModelResult;
use serde_json::Value;
use std::collections::BTreeMap;

/// Property-test cases the qemu CPU models must try in all, over the whole
/// matrix (where the kernels run); a run of fewer models needs its share.
pub const MIN_ARM_CASES: u64 = 100_000;
/// Property-test cases the host must try (the portable reference path).
pub const MIN_HOST_CASES: u64 = 100_000;

pub struct Check {
    pub ok: bool,
    pub lines: Vec<String>,
    pub json: Value,
}

fn num(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

/// Sums the `proptest` records per model, then over the qemu models (Arm)
/// and the host separately. `models_run` of `models_all` qemu models ran:
/// the Arm minimum is their share of [`MIN_ARM_CASES`].
pub fn proptest_totals(results: &[ModelResult], models_run: usize, models_all: usize) -> Check {
    let mut lines = vec!["\n==> property tests (cases tried; API calls checked, valid / invalid)".to_string()];
    let mut known: BTreeMap<String, u64> = BTreeMap::new();
    let mut per_model = Vec::new();
    // (cases, valid, invalid) on Arm and on the host.
    let (mut arm, mut host) = ([0u64; 3], [0u64; 3]);
    let row =
        |name: &str, t: [u64; 3]| format!("    {name:<34} {:>8} cases  {:>8} valid  {:>8} invalid", t[0], t[1], t[2]);
    for r in results {
        let mut t = [0u64; 3];
        for p in &r.proptests {
            for (sum, key) in t.iter_mut().zip(["cases", "valid", "invalid"]) {
                *sum += num(p, key);
            }
            if let Some(m) = p.get("known_issues").and_then(Value::as_object) {
                for (id, n) in m {
                    *known.entry(id.clone()).or_default() += n.as_u64().unwrap_or(0);
                }
            }
        }
        if !r.proptests.is_empty() {
            lines.push(row(&r.cpu, t));
        }
        per_model.push(serde_json::json!({"cpu": r.cpu, "cases": t[0], "valid": t[1], "invalid": t[2]}));
        let sum = if r.cpu == "host" { &mut host } else { &mut arm };
        for (s, v) in sum.iter_mut().zip(t) {
            *s += v;
        }
    }
    let arm_min = (MIN_ARM_CASES * models_run as u64).div_ceil(models_all.max(1) as u64);
    let arm_ok = arm[0] >= arm_min;
    let host_ran = results.iter().any(|r| r.cpu == "host");
    let host_ok = !host_ran || host[0] >= MIN_HOST_CASES;
    let share = if models_run == models_all {
        String::new()
    } else {
        format!(" ({models_run} of {models_all} models: {arm_min} of {MIN_ARM_CASES})")
    };
    let verdict = |ok: bool, min: u64| if ok { String::new() } else { format!("  <-- FAILED: fewer than {min}") };
    lines.push(format!("{}{}", row(&format!("Arm (qemu models){share}"), arm), verdict(arm_ok, arm_min)));
    if host_ran {
        lines.push(format!("{}{}", row("host (reference only)", host), verdict(host_ok, MIN_HOST_CASES)));
    }
    for (id, n) in &known {
        lines.push(format!("    known library issue met: {id} ({n} cases; see the props test sources)"));
    }
    let total = |t: [u64; 3]| serde_json::json!({"cases": t[0], "valid": t[1], "invalid": t[2]});
    Check {
        ok: arm_ok && host_ok,
        lines,
        json: serde_json::json!({
            "arm": total(arm), "host": total(host), "arm_minimum": arm_min, "host_minimum": MIN_HOST_CASES,
            "cases": arm[0] + host[0], "known_issues": known, "per_model": per_model,
        }),
    }
}

/// The vector length a kernel of `tier` ran with on model `r` (bytes; 0 for
/// fixed-width NEON kernels).
fn vector_bytes(r: &ModelResult, tier: &str) -> u64 {
    match tier {
        "sme" | "sme2" => r.sme_bytes,
        "sve" | "sve2" | "sve2p1" => r.sve_bytes,
        _ => 0,
    }
}

/// Per (model, kernel): whether its output hash agreed with every other
/// model that ran it at the same vector length, and which models those were.
pub type Verdicts = BTreeMap<(String, String), (bool, Vec<String>)>;

/// Compares conformance output hashes across models.
pub fn determinism(results: &[ModelResult]) -> (Check, Verdicts) {
    // (kernel, vector bytes) -> [(cpu, hash)]
    let mut runs: BTreeMap<(String, u64), Vec<(String, String)>> = BTreeMap::new();
    let mut unhashed = 0usize;
    for r in results {
        for k in &r.kernels {
            let v = &k.value;
            if v.get("status").and_then(Value::as_str) != Some("pass") {
                continue;
            }
            let name = v.get("kernel").and_then(Value::as_str).unwrap_or("?").to_string();
            let tier = v.get("tier").and_then(Value::as_str).unwrap_or("");
            match v.get("output_hash").and_then(Value::as_str) {
                Some(h) => runs.entry((name, vector_bytes(r, tier))).or_default().push((r.cpu.clone(), h.to_string())),
                None => unhashed += 1,
            }
        }
    }
    let (mut pairs, mut mismatches) = (0usize, Vec::new());
    let mut verdicts = Verdicts::new();
    for ((kernel, vb), seen) in &runs {
        for (i, (cpu, hash)) in seen.iter().enumerate() {
            let others: Vec<&(String, String)> = seen.iter().filter(|(c, _)| c != cpu).collect();
            let agree = others.iter().all(|(_, h)| h == hash);
            verdicts.insert((cpu.clone(), kernel.clone()), (agree, others.iter().map(|(c, _)| c.clone()).collect()));
            for (cpu2, hash2) in &seen[i + 1..] {
                pairs += 1;
                if hash != hash2 {
                    mismatches.push(format!("{kernel} (vector {} bits): {cpu} {hash} vs {cpu2} {hash2}", vb * 8));
                }
            }
        }
    }
    let compared = runs.values().filter(|s| s.len() > 1).count();
    let mut lines =
        vec!["\n==> determinism across runs (conformance output hashes, same kernel and vector length)".into()];
    lines.push(format!(
        "    {pairs} (kernel, model-pair) comparisons over {compared} kernel/vector-length groups run on 2+ models; \
         {} mismatched",
        mismatches.len()
    ));
    let single = runs.values().filter(|s| s.len() == 1).count();
    if single > 0 {
        lines.push(format!("    {single} kernel/vector-length groups ran on one model only (nothing to compare)"));
    }
    if unhashed > 0 {
        lines.push(format!("    {unhashed} passing records carry no output hash (their check hashes no outputs)"));
    }
    for m in &mismatches {
        lines.push(format!("    MISMATCH {m}"));
    }
    let ok = mismatches.is_empty();
    let check = Check {
        ok,
        lines,
        json: serde_json::json!({
            "comparisons": pairs, "groups_compared": compared, "mismatches": mismatches, "unhashed_records": unhashed,
        }),
    };
    (check, verdicts)
}

/// Adds `deterministic_across_runs` and `compared_with` to one
/// conformance record of `cpu` (a record without a comparison gets null).
pub fn annotate(record: &mut serde_json::Map<String, Value>, cpu: &str, verdicts: &Verdicts) {
    let kernel = record.get("kernel").and_then(Value::as_str).unwrap_or("").to_string();
    match verdicts.get(&(cpu.to_string(), kernel)) {
        Some((agree, with)) if !with.is_empty() => {
            record.insert("deterministic_across_runs".into(), Value::Bool(*agree));
            record.insert("compared_with".into(), with.clone().into());
        }
        _ => {
            record.insert("deterministic_across_runs".into(), Value::Null);
            record.insert("compared_with".into(), Vec::<String>::new().into());
        }
    }
}

/// The memory table: per weight kind, what packed weights hold against the
/// input bytes (and copies), on every model; fails above the goal the test
/// recorded (`limit_ratio`, `max_copies`) and when a model recorded none.
pub fn memory_table(results: &[ModelResult]) -> Check {
    let mut lines = vec!["\n==> memory: bytes held / input bytes (copies), default options, n = k = 1024".to_string()];
    let mut ok = true;
    // (api, weights) -> cpu -> cell
    let mut rows: BTreeMap<(String, String), BTreeMap<String, String>> = BTreeMap::new();
    let mut json = Vec::new();
    for r in results {
        if r.memory.is_empty() && r.cpu != "host" {
            ok = false;
            lines.push(format!("    {}: no memory records  <-- FAILED", r.cpu));
        }
        for m in &r.memory {
            let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
            let f = |k: &str| m.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
            let within = f("ratio") <= f("limit_ratio"); // false for NaN: an unreadable record fails
            let over = !within || num(m, "copies") > num(m, "max_copies");
            ok &= !over;
            if num(m, "n") == 1024 && num(m, "k") == 1024 {
                rows.entry((s("api"), s("weights"))).or_default().insert(
                    r.cpu.clone(),
                    format!("{:.3} ({}){}", f("ratio"), num(m, "copies"), if over { " <-- FAILED" } else { "" }),
                );
            } else if over {
                lines.push(format!(
                    "    {} {} {}x{}: {:.3}x, {} copies  <-- FAILED",
                    r.cpu,
                    s("api"),
                    s("weights"),
                    num(m, "n"),
                    f("ratio"),
                    num(m, "copies")
                ));
            }
            let mut v = m.clone();
            if let Some(o) = v.as_object_mut() {
                o.insert("cpu".into(), Value::from(r.cpu.clone()));
            }
            json.push(v);
        }
    }
    let cpus: Vec<&str> = results.iter().filter(|r| !r.memory.is_empty()).map(|r| r.cpu.as_str()).collect();
    lines.push(format!(
        "    {:<30} {}",
        "weights",
        cpus.iter().map(|c| format!("{:>14}", short(c))).collect::<String>()
    ));
    for ((api, w), cells) in &rows {
        let name = match api.as_str() {
            "ggml" => format!("ggml {w}"),
            "PackedWeights" => w.clone(),
            other => format!("{w} {}", other.trim_start_matches("PackedWeights ")),
        };
        let cells: String = cpus.iter().map(|c| format!("{:>14}", cells.get(*c).map_or("-", String::as_str))).collect();
        lines.push(format!("    {name:<30} {cells}"));
    }
    lines.push(format!(
        "    goal: at most 1.02x the input (plus a bias slot and row padding; 2x where f16/bf16 weights are widened \
         for f32 kernels, which no kernel takes as they are: keep_as_given keeps 1x), one copy; ggml: no more than \
         ggml allocates{}",
        if ok { "" } else { "  <-- FAILED" }
    ));
    Check { ok, lines, json: Value::from(json) }
}

/// A CPU model's name, short enough for a table column.
fn short(cpu: &str) -> String {
    cpu.replace("max,sme-default-vector-length=64", "max SVL512").replace("neoverse-", "n-").chars().take(13).collect()
}

/// A row of the non-finite table: weights, activation type, rows, kernel.
type RowKey = (String, String, u64, String);

/// The non-finite table: per model, per weight kind, activation type and row
/// count, the kernel that ran and what it alone gives for NaN, +inf and -inf
/// at each input (activations, weights or scales, offsets, bias);
/// `PackedWeights::matmul` gives NaN in every one of these cases (the test
/// that records them checks it, and fails otherwise). Fails when a model
/// recorded none.
pub fn nonfinite_table(results: &[ModelResult]) -> Check {
    let mut lines = vec![
        "\n==> non-finite inputs: what the kernel alone gives for NaN +inf -inf at each input; \
         PackedWeights::matmul gives NaN in every case (checked)"
            .to_string(),
    ];
    let mut ok = true;
    let mut json = Vec::new();
    for r in results {
        if r.nonfinite.is_empty() {
            if r.cpu != "host" {
                ok = false;
                lines.push(format!("    {}: no non-finite records  <-- FAILED", r.cpu));
            }
            continue;
        }
        lines.push(format!("    {}:", r.cpu));
        // (weights, act, m, kernel) -> "input raw raw raw" cells, in record order.
        let mut rows: Vec<(RowKey, Vec<String>)> = Vec::new();
        for v in &r.nonfinite {
            let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
            let raw: Vec<&str> = v
                .get("raw")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let key =
                (s("weights"), s("act"), num(v, "m"), s("kernel").trim_start_matches("kai_matmul_clamp_").to_string());
            let cell = format!("{} {}", s("input"), raw.join(" "));
            match rows.iter_mut().find(|(k, _)| *k == key) {
                Some((_, cells)) => cells.push(cell),
                None => rows.push((key, vec![cell])),
            }
            let mut rec = v.clone();
            if let Some(o) = rec.as_object_mut() {
                o.insert("cpu".into(), Value::from(r.cpu.clone()));
            }
            json.push(rec);
        }
        for ((w, act, m, kernel), cells) in rows {
            lines.push(format!("      {w:<16} {act:<4} m={m} {kernel:<58} {}", cells.join(" | ")));
        }
    }
    if !ok {
        lines.push("    every model must run the non-finite test  <-- FAILED".into());
    }
    Check { ok, lines, json: Value::from(json) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(cpu: &str, cases: u64) -> ModelResult {
        let p = serde_json::json!({"kind": "proptest", "cases": cases, "valid": cases, "invalid": 0});
        ModelResult { cpu: cpu.into(), proptests: vec![p], ..Default::default() }
    }

    #[test]
    fn arm_cases_are_counted_apart_from_the_host() {
        // 7 models of 14,286 pass; the host's cases never make up for Arm's.
        let mut r: Vec<ModelResult> = (0..7).map(|i| model(&format!("m{i}"), 14_286)).collect();
        r.push(model("host", 200_000));
        assert!(proptest_totals(&r, 7, 7).ok);
        r[0] = model("m0", 14_000);
        let c = proptest_totals(&r, 7, 7);
        assert!(!c.ok && c.lines.iter().any(|l| l.contains("Arm") && l.contains("FAILED")));
        // Two models of seven need two sevenths of the minimum.
        assert!(proptest_totals(&r[1..3], 2, 7).ok);
        assert!(!proptest_totals(&r[..2], 2, 7).ok);
        // Too few host cases fail on their own.
        r[0] = model("m0", 14_286);
        r[7] = model("host", 5);
        assert!(!proptest_totals(&r, 7, 7).ok);
    }
}
