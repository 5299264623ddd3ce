//! Reading what a test run said: libtest's summary lines and the JSON-lines
//! report the suite's tests append to (`KLEIDIAI_TEST_REPORT`).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// libtest's counts from one or more `test result:` lines.
#[derive(Default, Debug, Clone, Copy)]
pub struct Counts {
    pub passed: usize,
    pub failed: usize,
    pub ignored: usize,
    pub result_lines: usize,
}

pub fn parse_libtest(stdout: &str) -> (Counts, Vec<String>) {
    let mut c = Counts::default();
    let mut failed_names = Vec::new();
    for line in stdout.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("test result: ") {
            c.result_lines += 1;
            for part in rest.split(['.', ';']) {
                let mut words = part.split_whitespace();
                let (Some(n), Some(what)) = (words.next(), words.next()) else {
                    continue;
                };
                let Ok(n) = n.parse::<usize>() else { continue };
                match what {
                    "passed" => c.passed += n,
                    "failed" => c.failed += n,
                    "ignored" => c.ignored += n,
                    _ => {}
                }
            }
        } else if line.starts_with("test ") && line.ends_with(" ... FAILED") {
            failed_names.push(line["test ".len()..line.len() - " ... FAILED".len()].to_string());
        }
    }
    (c, failed_names)
}

/// The C ABI test's summary line `capi_test: N checks, F failed`.
pub fn parse_c_test(stdout: &str) -> (Counts, Vec<String>) {
    let mut c = Counts::default();
    let mut failed = Vec::new();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("capi_test: ") {
            let nums: Vec<usize> = rest.split(|ch: char| !ch.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
            if let [checks, fails] = nums[..] {
                c.passed = checks - fails.min(checks);
                c.failed = fails;
                c.result_lines = 1;
            }
        } else if line.starts_with("FAIL ") {
            failed.push(line.to_string());
        }
    }
    (c, failed)
}

/// `SKIP what: why` lines of the C ABI test.
pub fn c_test_skips(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("SKIP "))
        .map(|l| match l.split_once(": ") {
            Some((what, why)) => (format!("capi_test {what}"), why.to_string()),
            None => ("capi_test".to_string(), l.to_string()),
        })
        .collect()
}

/// One conformance record (`{"kind":"kernel", ...}`).
#[derive(Debug, Clone)]
pub struct KernelRecord {
    pub value: Value,
}

/// Everything the tests of one binary recorded.
#[derive(Default, Debug)]
pub struct Recorded {
    pub tiers: BTreeSet<String>,
    pub skips: Vec<(String, String)>,
    pub features: Option<(Vec<String>, u64, u64)>,
    /// libtest tests that recorded a skip and never ran a kernel.
    pub skipped_tests: BTreeSet<String>,
    pub kernels: Vec<KernelRecord>,
    /// Every compute kernel the build compiled (from the `manifest` record).
    pub manifest: BTreeSet<String>,
    /// Highest tier the selection report uses.
    pub selection: Option<String>,
    /// Property-test records (`{"kind":"proptest", ...}`): cases tried.
    pub proptests: Vec<Value>,
    /// Memory records (`{"kind":"memory", ...}`): bytes held per weight kind.
    pub memory: Vec<Value>,
    /// Non-finite records (`{"kind":"nonfinite", ...}`): what each kernel
    /// alone gives for NaN, +inf and -inf inputs (the policy was checked).
    pub nonfinite: Vec<Value>,
}

pub fn read_report(path: &Path) -> Result<Recorded, String> {
    let mut r = Recorded::default();
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(r);
    };
    let mut ran_threads = BTreeSet::new();
    let mut skip_threads = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        match s("kind").as_str() {
            "tier" => {
                r.tiers.insert(s("tier"));
                ran_threads.insert(s("thread"));
            }
            "skip" => {
                r.skips.push((s("test"), s("reason")));
                skip_threads.insert(s("thread"));
            }
            "features" => {
                let feats = v
                    .get("features")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
                    .unwrap_or_default();
                let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
                r.features = Some((feats, n("sve_bytes"), n("sme_bytes")));
            }
            "kernel" => {
                match s("status").as_str() {
                    "pass" => {
                        ran_threads.insert(s("thread"));
                        r.tiers.insert(s("tier"));
                    }
                    "skip" => r.skips.push((s("kernel"), s("reason"))),
                    _ => {}
                }
                r.kernels.push(KernelRecord { value: v });
            }
            "selection" => r.selection = Some(s("highest_tier")),
            "proptest" => r.proptests.push(v),
            "memory" => r.memory.push(v),
            "nonfinite" => r.nonfinite.push(v),
            "manifest" => {
                if let Some(a) = v.get("kernels").and_then(Value::as_array) {
                    r.manifest.extend(a.iter().filter_map(|x| x.as_str().map(str::to_string)));
                }
            }
            other => {
                return Err(format!("{}:{}: unknown record kind `{other}`", path.display(), i + 1));
            }
        }
    }
    r.skipped_tests = skip_threads.difference(&ran_threads).cloned().collect();
    Ok(r)
}

/// Per-model totals.
#[derive(Default, Debug)]
pub struct ModelResult {
    pub cpu: String,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub tiers_run: BTreeSet<String>,
    pub features: Vec<String>,
    pub sve_bytes: u64,
    pub sme_bytes: u64,
    pub skips: Vec<(String, String)>,
    pub failures: Vec<String>,
    pub problems: Vec<String>,
    /// Shortfalls that do not fail the run yet (families still being added).
    pub warnings: Vec<String>,
    pub seconds: f64,
    pub kernels: Vec<KernelRecord>,
    pub manifest: BTreeSet<String>,
    pub selection: Option<String>,
    pub by_binary: BTreeMap<String, Counts>,
    pub proptests: Vec<Value>,
    pub memory: Vec<Value>,
    pub nonfinite: Vec<Value>,
}

impl ModelResult {
    /// Adds one binary's libtest counts and recorded facts.
    pub fn add(&mut self, binary: &str, counts: Counts, failed_names: Vec<String>, rec: Recorded) {
        let skipped_here = rec.skipped_tests.len().min(counts.passed);
        self.passed += counts.passed - skipped_here;
        self.failed += counts.failed;
        self.skipped += counts.ignored + skipped_here;
        self.failures.extend(failed_names.into_iter().map(|n| format!("{binary}: {n}")));
        self.tiers_run.extend(rec.tiers);
        self.skips.extend(rec.skips);
        if let Some((f, sve, sme)) = rec.features {
            self.features = f;
            self.sve_bytes = sve;
            self.sme_bytes = sme;
        }
        self.kernels.extend(rec.kernels);
        self.manifest.extend(rec.manifest);
        if rec.selection.is_some() {
            self.selection = rec.selection;
        }
        self.by_binary.insert(binary.to_string(), counts);
        self.proptests.extend(rec.proptests);
        self.memory.extend(rec.memory);
        self.nonfinite.extend(rec.nonfinite);
    }

    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "cpu": self.cpu,
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "tiers_run": self.tiers_run.iter().collect::<Vec<_>>(),
            "selected_highest_tier": self.selection,
            "features_detected": self.features,
            "sve_vector_bits": self.sve_bytes * 8,
            "sme_vector_bits": self.sme_bytes * 8,
            "skips": self.skips.iter().map(|(t, r)| serde_json::json!({"test": t, "reason": r})).collect::<Vec<_>>(),
            "failures": self.failures,
            "problems": self.problems,
            "seconds": (self.seconds * 10.0).round() / 10.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_summary() {
        let out = "running 3 tests\ntest a ... ok\ntest b ... FAILED\n\ntest result: FAILED. 2 passed; 1 failed; 4 ignored; 0 measured; 0 filtered out; finished in 0.01s\n";
        let (c, f) = parse_libtest(out);
        assert_eq!((c.passed, c.failed, c.ignored, c.result_lines), (2, 1, 4, 1));
        assert_eq!(f, vec!["b".to_string()]);
    }
}
