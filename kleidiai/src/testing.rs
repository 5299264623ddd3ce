//! Test support shared by the families' conformance tests: deterministic
//! data, the tail-hitting shape list, tolerance checks, and the JSON-lines
//! records `xtask test` turns into `target/conformance.json`.
#![allow(dead_code)]

use crate::registry::KernelInfo;
use std::cell::Cell;
use std::io::Write;

/// Deterministic test data from a seed: the repository's one test
/// generator (`fastrand`, seeded), with the shapes of data the tests use.
pub(crate) struct Rng(fastrand::Rng);

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
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.u64(..n.max(1))
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.0.fill(&mut b);
        b
    }
}

/// Output shapes that hit every tail: m in {1, mr-1, mr+1, 3*m_step+1},
/// n in {1, nr-1, nr+1, 3*n_step+5}, each paired so every value of both
/// appears (plus the two extreme mixes), for each `k`.
pub(crate) fn tail_shapes(
    mr: usize,
    m_step: usize,
    nr: usize,
    n_step: usize,
    ks: &[usize],
) -> Vec<(usize, usize, usize)> {
    let ms = [1, mr.saturating_sub(1).max(1), mr + 1, 3 * m_step + 1];
    let ns = [1, nr.saturating_sub(1).max(1), nr + 1, 3 * n_step + 5];
    let mut pairs: Vec<(usize, usize)> = ms.iter().copied().zip(ns.iter().copied()).collect();
    pairs.push((ms[0], ns[3]));
    pairs.push((ms[3], ns[0]));
    pairs.sort_unstable();
    pairs.dedup();
    let mut out = Vec::new();
    for &k in ks {
        for &(m, n) in &pairs {
            out.push((m, n, k));
        }
    }
    out
}

/// Thread counts every case runs with; results must be bit-identical.
pub(crate) const THREADS: [usize; 2] = [1, 3];

/// Lets small test shapes take the threaded path, and SME kernels use
/// several workers, so determinism is tested where it can break.
pub(crate) fn enable_threading_for_tests() {
    crate::par::set_inline_threshold_for_tests(0);
    crate::par::set_sme_thread_cap(4);
}

thread_local! {
    /// FNV-1a over the output bits the running conformance check compared
    /// (None: nothing compared yet). See [`hash_outputs`].
    static OUTPUT_HASH: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Feeds output words (f32 bits, integer outputs) into the running kernel's
/// output hash. Conformance inputs are seeded, so a kernel computes the same
/// outputs in every process at the same vector length: `xtask test`
/// compares the hashes across CPU models (determinism across runs).
pub(crate) fn hash_outputs(words: impl IntoIterator<Item = u32>) {
    OUTPUT_HASH.with(|h| {
        let mut v = h.get().unwrap_or(0xcbf2_9ce4_8422_2325);
        for w in words {
            for b in w.to_le_bytes() {
                v = (v ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
        }
        h.set(Some(v));
    });
}

/// Takes the output hash of the running check (and starts a new one).
fn take_output_hash() -> Option<u64> {
    OUTPUT_HASH.with(|h| h.replace(None))
}

/// Largest |got - want|, or the first element outside `tol(want)`.
pub(crate) fn compare(got: &[f32], want: &[f32], tol: impl Fn(usize, f32) -> f32) -> Result<f64, String> {
    hash_outputs(got.iter().map(|x| x.to_bits()));
    if got.len() != want.len() {
        return Err(format!("length {} vs {}", got.len(), want.len()));
    }
    let mut worst = 0f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let d = (g as f64 - w as f64).abs();
        let t = tol(i, w) as f64;
        if d > t || g.is_nan() != w.is_nan() {
            return Err(format!("element {i}: got {g}, want {w} (|diff| {d:e} > tolerance {t:e})"));
        }
        worst = worst.max(d);
    }
    Ok(worst)
}

/// Bitwise equality of two outputs (thread-count determinism).
pub(crate) fn bit_identical(a: &[f32], b: &[f32]) -> bool {
    hash_outputs(a.iter().map(|x| x.to_bits()));
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Appends a JSON record, on one line, to `KLEIDIAI_TEST_REPORT` (when set)
/// and prints it.
pub(crate) fn record(v: serde_json::Value) {
    let line = v.to_string();
    println!("{line}");
    if let Some(path) = std::env::var_os("KLEIDIAI_TEST_REPORT") {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open report");
        f.write_all(format!("{line}\n").as_bytes()).expect("write report");
    }
}

/// Records that the running test could not run on this CPU, and why
/// (`{"kind":"skip", ...}`, named after libtest's thread for the test): the
/// test command lists it by name and counts the test as skipped, not passed.
pub(crate) fn skipped(reason: &str) {
    let test = std::thread::current().name().unwrap_or("main").to_string();
    record(serde_json::json!({"kind": "skip", "test": test, "reason": reason, "thread": test}));
}

/// The value of `$x` (an `Option`, typically a kernel selection), or: the
/// running test is recorded as skipped ([`skipped`], naming the expression
/// that found nothing on this CPU) and returns.
#[cfg_attr(not(target_arch = "aarch64"), allow(unused_macros))] // every user selects a kernel
macro_rules! or_skip {
    ($x:expr) => {
        match $x {
            Some(v) => v,
            None => {
                $crate::testing::skipped(concat!("nothing to run on this CPU: `", stringify!($x), "` is None"));
                return;
            }
        }
    };
}
#[cfg_attr(not(target_arch = "aarch64"), allow(unused_imports))]
pub(crate) use or_skip;

/// Outcome of one kernel's conformance run.
#[derive(Debug)]
pub(crate) enum Outcome {
    Pass { cases: usize, max_abs_err: f64 },
    Skip(String),
    Fail { cases: usize, reason: String },
}

/// Records one kernel's outcome (`{"kind":"kernel", ...}`), with its tier so
/// a pass counts as that tier having run.
pub(crate) fn record_kernel(info: &KernelInfo, outcome: &Outcome) {
    let thread = std::thread::current().name().unwrap_or("main").to_string();
    let (status, reason, cases, err) = match outcome {
        Outcome::Pass { cases, max_abs_err } => {
            ("pass", format!("bit-identical with threads {THREADS:?}; within tolerance"), *cases, *max_abs_err)
        }
        Outcome::Skip(r) => ("skip", r.clone(), 0, 0.0),
        Outcome::Fail { cases, reason } => ("fail", reason.clone(), *cases, f64::NAN),
    };
    // NaN (a failure) is written as null.
    let err = if err.is_finite() { Some(err) } else { None };
    // Hex: a u64 does not survive JSON readers that use f64.
    let hash = match (outcome, take_output_hash()) {
        (Outcome::Pass { .. }, Some(h)) => Some(format!("{h:016x}")),
        _ => None,
    };
    record(serde_json::json!({
        "kind": "kernel",
        "kernel": info.name,
        "family": info.family,
        "tier": info.tier().name(),
        "status": status,
        "reason": reason,
        "cases": cases,
        "max_abs_err": err,
        "deterministic": matches!(outcome, Outcome::Pass { .. }),
        "output_hash": hash,
        "thread": thread,
    }));
}

/// Runs `check` for every kernel of `family` the CPU supports (skipping the
/// rest with the reason), records each outcome, and panics at the end if any
/// kernel failed. `check` returns the case count and the largest error.
pub(crate) fn conformance<F>(family: &str, mut check: F)
where
    F: FnMut(&'static KernelInfo) -> Result<(usize, f64), (usize, String)>,
{
    enable_threading_for_tests();
    let f = crate::cpu::Features::current();
    let mut failures = Vec::new();
    let kernels: Vec<&'static KernelInfo> =
        crate::registry::kernels().iter().copied().filter(|k| k.family == family).collect();
    assert!(!kernels.is_empty() || !cfg!(target_arch = "aarch64"), "family {family} registered no kernels");
    for info in kernels {
        take_output_hash();
        let outcome = match info.supported(&f) {
            Err(why) => Outcome::Skip(why),
            Ok(()) => match check(info) {
                Ok((cases, max_abs_err)) => Outcome::Pass { cases, max_abs_err },
                Err((cases, reason)) => {
                    failures.push(format!("{}: {reason}", info.name));
                    Outcome::Fail { cases, reason }
                }
            },
        };
        record_kernel(info, &outcome);
    }
    assert!(failures.is_empty(), "conformance failures:\n{}", failures.join("\n"));
}

/// Test weights and error scales shared by the qsi4c32p families.
#[cfg(target_arch = "aarch64")]
pub(crate) mod qsi4c32 {
    use super::Rng;
    use crate::formats::{BlockInt4, BlockScales, Int4Blocks, Int4Encoding, Order, Q4_0};
    use half::{bf16, f16};

    /// Random weights: nibbles, f16 and bf16 scales (same values), bias,
    /// and the same matrix in ggml Q4_0 bytes (bl 32 only).
    pub(crate) struct TestWeights {
        pub n: usize,
        pub k: usize,
        pub bl: usize,
        pub nxk: Vec<u8>,
        pub kxn: Vec<u8>,
        pub f16: Vec<f16>,
        pub bf16: Vec<bf16>,
        pub bias: Vec<f32>,
        pub q4_0: Vec<u8>,
        /// `nxk` and `kxn` with the offset-8 encoding.
        pub nxk_off8: Vec<u8>,
        pub kxn_off8: Vec<u8>,
    }

    impl TestWeights {
        pub fn new(rng: &mut Rng, n: usize, k: usize, bl: usize) -> TestWeights {
            let v: Vec<i8> = (0..n * k).map(|_| rng.below(16) as i8 - 8).collect();
            let e = Int4Encoding::Signed;
            let mut nxk = vec![0u8; n * k / 2];
            for i in 0..n * k {
                nxk[i / 2] |= e.encode(v[i]) << (4 * (i % 2));
            }
            let rb = n.div_ceil(2);
            let mut kxn = vec![0u8; k * rb];
            for i in 0..n {
                for p in 0..k {
                    kxn[p * rb + i / 2] |= e.encode(v[i * k + p]) << (4 * (i % 2));
                }
            }
            // Scales exact in both f16 and bf16 (8 significant bits, normal range).
            let s: Vec<f32> = (0..n * k / bl).map(|_| (16 + rng.below(240)) as f32 / 4096.0).collect();
            let mut q4_0 = Vec::new();
            if bl == 32 {
                for i in 0..n {
                    for b in 0..k / 32 {
                        q4_0.extend_from_slice(&f16::from_f32(s[i * k / 32 + b]).to_bits().to_le_bytes());
                        for j in 0..16 {
                            let (lo, hi) = (v[i * k + b * 32 + j], v[i * k + b * 32 + j + 16]);
                            q4_0.push((lo + 8) as u8 | ((hi + 8) as u8) << 4);
                        }
                    }
                }
            }
            TestWeights {
                n,
                k,
                bl,
                f16: s.iter().map(|x| f16::from_f32(*x)).collect(),
                bf16: s.iter().map(|x| bf16::from_f32(*x)).collect(),
                bias: rng.vec_f32(n),
                q4_0,
                nxk_off8: nxk.iter().map(|b| b ^ 0x88).collect(),
                kxn_off8: kxn.iter().map(|b| b ^ 0x88).collect(),
                nxk,
                kxn,
            }
        }

        /// Case `ci`'s view: cycles through N x K, K x N (if `kxn_ok`) and
        /// Q4_0 input, f16 and bf16 scales, both nibble encodings, with and
        /// without bias.
        pub fn view(&self, ci: usize, kxn_ok: bool, bias: bool) -> BlockInt4<'_> {
            let bias = if bias { Some(&self.bias[..]) } else { None };
            if ci % 3 == 2 && self.bl == 32 {
                return Q4_0 { n: self.n, k: self.k, data: &self.q4_0, bias }.into();
            }
            let kxn = kxn_ok && ci % 3 == 1;
            let off8 = (ci / 3) % 2 == 1;
            Int4Blocks {
                n: self.n,
                k: self.k,
                bl: self.bl,
                order: if kxn { Order::KxN } else { Order::NxK },
                encoding: if off8 { Int4Encoding::Offset8 } else { Int4Encoding::Signed },
                data: match (kxn, off8) {
                    (false, false) => &self.nxk,
                    (true, false) => &self.kxn,
                    (false, true) => &self.nxk_off8,
                    (true, true) => &self.kxn_off8,
                },
                scales: if ci % 2 == 0 { BlockScales::Bf16(&self.bf16) } else { BlockScales::F16(&self.f16) },
                bias,
            }
            .into()
        }
    }

    /// `M[i][j] = Σ_k (|x_ik| + z_i) |w_jk|` for an `m x k` LHS and
    /// `n x k` weights, with `z_i = zp_term(row i)`.
    pub(crate) fn magnitudes(
        m: usize,
        n: usize,
        k: usize,
        lhs: &[f32],
        w: &[f32],
        zp_term: impl Fn(&[f32]) -> f32,
    ) -> Vec<f32> {
        let mut out = Vec::with_capacity(m * n);
        for x in lhs.chunks(k).take(m) {
            let z = zp_term(x);
            for wr in w.chunks(k).take(n) {
                out.push(x.iter().zip(wr).map(|(x, w)| (x.abs() + z) * w.abs()).sum());
            }
        }
        out
    }

    /// (bl, k) pairs: one block, several blocks, a longer block.
    pub(crate) const BL_K: [(usize, usize); 3] = [(32, 32), (32, 96), (64, 128)];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_hit_every_tail() {
        let s = tail_shapes(4, 16, 8, 8, &[32, 64]);
        for m in [1, 3, 5, 49] {
            assert!(s.iter().any(|x| x.0 == m), "m={m}");
        }
        for n in [1, 7, 9, 29] {
            assert!(s.iter().any(|x| x.1 == n), "n={n}");
        }
        assert!(s.iter().all(|x| x.2 == 32 || x.2 == 64));
    }
}
