//! Shared by the suite's test binaries: the run report read by `xtask test`,
//! a deterministic random source, and small reference helpers.
#![allow(dead_code)]

pub use serde_json::{Value, json};
use std::io::Write;

/// Appends one JSON record, on one line, to the file named by
/// `KLEIDIAI_TEST_REPORT` (set by `xtask test`); prints it too, so a plain
/// `cargo test -- --nocapture` shows it.
pub fn record(v: Value) {
    let line = v.to_string();
    println!("{line}");
    if let Some(path) = std::env::var_os("KLEIDIAI_TEST_REPORT") {
        let mut f =
            std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open KLEIDIAI_TEST_REPORT");
        // One write per line: lines from parallel test threads do not interleave.
        f.write_all(format!("{line}\n").as_bytes()).expect("write report");
    }
}

/// The libtest test this runs in (libtest names each test's thread after it).
pub fn current_test() -> String {
    std::thread::current().name().unwrap_or("main").to_string()
}

/// Records that `test` exercised a kernel of `tier` and checked its result.
pub fn tier_ran(tier: &str, test: &str) {
    record(json!({"kind": "tier", "tier": tier, "test": test, "thread": current_test()}));
}

/// Records that `test` could not run its kernel on this CPU, and why. A
/// libtest test that records a skip and runs nothing counts as skipped.
pub fn skipped(test: &str, reason: &str) {
    record(json!({"kind": "skip", "test": test, "reason": reason, "thread": current_test()}));
}

/// Records the highest tier the selection report uses (or "reference").
pub fn selection(highest: &str, report: &str) {
    record(json!({"kind": "selection", "highest_tier": highest, "report": report}));
}

/// Records the features this process detected (once per test binary is enough).
pub fn features_seen() {
    let f = kleidiai::cpu::Features::detected();
    let names: Vec<&str> = f.iter().map(|x| x.name()).collect();
    record(json!({
        "kind": "features",
        "features": names,
        "sve_bytes": f.sve_vector_bytes().unwrap_or(0),
        "sme_bytes": f.sme_vector_bytes().unwrap_or(0),
    }));
}

/// Deterministic test data from a seed: the repository's one test
/// generator (`fastrand`, seeded), with the shapes of data the tests use.
pub struct Rng(fastrand::Rng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(fastrand::Rng::with_seed(seed))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.u64(..)
    }
    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        self.0.f32() * 2.0 - 1.0
    }
    pub fn vec_f32(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.0.usize(..n.max(1))
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.0.fill(&mut b);
        b
    }
}

/// `dst[m][n] = sum_k lhs[m][k] * rhs_t[n][k] + bias[n]` in f64, for weights given N x K.
pub fn matmul_nt(m: usize, n: usize, k: usize, lhs: &[f32], rhs_t: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let mut dst = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = bias.map_or(0.0, |b| b[j] as f64);
            for p in 0..k {
                acc += lhs[i * k + p] as f64 * rhs_t[j * k + p] as f64;
            }
            dst[i * n + j] = acc as f32;
        }
    }
    dst
}

/// Transposes a rows x cols matrix.
pub fn transpose(rows: usize, cols: usize, a: &[f32]) -> Vec<f32> {
    let mut t = vec![0f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = a[r * cols + c];
        }
    }
    t
}

/// Largest |a - b| and the index where it occurs; asserts every element is
/// within `tol[i]` (a per-element bound).
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = 0f32;
    for i in 0..got.len() {
        let d = (got[i] - want[i]).abs();
        assert!(
            d <= tol[i] && got[i].is_finite(),
            "{what}: element {i}: got {} want {} (|diff| {d} > tol {})",
            got[i],
            want[i],
            tol[i]
        );
        worst = worst.max(d);
    }
    worst
}
