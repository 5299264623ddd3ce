//! Runs one property over a strategy with a counted, seeded `TestRunner`
//! and records how many cases it tried and how many API calls it checked,
//! valid and invalid separately (`PROPTEST-CASES ...` on stdout and
//! `{"kind":"proptest",...}` in `KLEIDIAI_TEST_REPORT`, which `xtask test`
//! sums over the host and every CPU model).

use crate::common::{current_test, json, record};
use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use std::cell::Cell;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

thread_local! {
    /// API calls checked by the property running on this thread: (valid, invalid).
    static CALLS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// Counts one checked call with valid arguments (it must be `Ok` and match
/// the reference).
pub fn valid() {
    CALLS.with(|c| c.set((c.get().0 + 1, c.get().1)));
}

/// Counts one checked call with invalid arguments (it must be an `Err`).
pub fn invalid() {
    CALLS.with(|c| c.set((c.get().0, c.get().1 + 1)));
}

thread_local! {
    /// Known library issues met by the property on this thread, by id.
    static KNOWN: std::cell::RefCell<std::collections::BTreeMap<&'static str, u64>> = const {
        std::cell::RefCell::new(std::collections::BTreeMap::new())
    };
}

/// A case met one of the library issues these properties found (named by
/// `id`; all fixed since): a failure, counted in the report. Set
/// `KLEIDIAI_PROPTEST_LENIENT` to count and print them instead (to see how
/// often an issue occurs while working on it).
pub fn known_issue(id: &'static str, detail: &str) -> Result<(), TestCaseError> {
    let first = KNOWN.with(|k| {
        let mut k = k.borrow_mut();
        let n = k.entry(id).or_insert(0);
        *n += 1;
        *n == 1
    });
    if std::env::var_os("KLEIDIAI_PROPTEST_LENIENT").is_none() {
        return Err(TestCaseError::fail(format!("library issue {id}: {detail}")));
    }
    if first {
        let _ = writeln!(std::io::stdout().lock(), "KNOWN-ISSUE {id}: {detail}");
    }
    Ok(())
}

/// Counts one checked call, valid or not.
pub fn count(is_valid: bool) {
    if is_valid { valid() } else { invalid() }
}

/// Cases of one property per run: on the host (only the portable reference
/// path exists there, and it is fast) and on aarch64 (kernels; under qemu
/// float code runs about 70 times slower, so that share stays small).
#[derive(Clone, Copy, Debug)]
pub struct Cases {
    pub host: u32,
    pub arm: u32,
}

impl Cases {
    pub const fn new(host: u32, arm: u32) -> Cases {
        Cases { host, arm }
    }

    fn here(self) -> u32 {
        let n = if cfg!(target_arch = "aarch64") { self.arm } else { self.host };
        // KLEIDIAI_PROPTEST_SCALE multiplies every count (a long local run).
        let scale = std::env::var("KLEIDIAI_PROPTEST_SCALE").ok().and_then(|s| s.parse::<f64>().ok()).unwrap_or(1.0);
        ((n as f64 * scale).round() as u32).max(1)
    }
}

/// The seed of one property: `KLEIDIAI_PROPTEST_SEED` when set (to replay a
/// failure), else one fixed per property name, so the cases drawn are the
/// same in every run, whatever the thread counts.
/// `KLEIDIAI_PROPTEST_SEED=random` draws a fresh one (to explore).
fn seed_for(name: &str) -> u64 {
    let var = std::env::var("KLEIDIAI_PROPTEST_SEED").unwrap_or_default();
    if let Ok(s) = var.parse() {
        return s;
    }
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    if var == "random" {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        h ^= nanos ^ (std::process::id() as u64) << 32;
    }
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Runs `test` on `cases` values of `strategy`; panics with the shrunk
/// counterexample and the seed that replays it when a case fails (a panic
/// inside `test` counts as a failure). Records the number of cases run.
pub fn check<S, F>(name: &str, cases: Cases, strategy: S, test: F)
where
    S: Strategy,
    S::Value: core::fmt::Debug,
    F: Fn(S::Value) -> Result<(), TestCaseError>,
{
    let seed = seed_for(name);
    let config = Config {
        cases: cases.here(),
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        max_shrink_iters: 512,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    CALLS.with(|c| c.set((0, 0)));
    KNOWN.with(|k| k.borrow_mut().clear());
    let ran = AtomicU64::new(0);
    let result = runner.run(&strategy, |v| {
        ran.fetch_add(1, Ordering::Relaxed);
        test(v)
    });
    let ran = ran.load(Ordering::Relaxed);
    let (valid, invalid) = CALLS.with(Cell::get);
    let known: Vec<String> = KNOWN.with(|k| k.borrow().iter().map(|(id, n)| format!("{id}={n}")).collect());
    let known_json: serde_json::Map<String, serde_json::Value> =
        KNOWN.with(|k| k.borrow().iter().map(|(id, n)| (id.to_string(), json!(n))).collect());
    // The one line per property a log scraper needs, then the JSON record
    // `xtask test` sums over the CPU models.
    // Written past libtest's output capture, so it shows in every run.
    let _ = writeln!(
        std::io::stdout().lock(),
        "PROPTEST-CASES test={name} cases={ran} valid={valid} invalid={invalid} known_issues=[{}]",
        known.join(",")
    );
    record(json!({
        "kind": "proptest",
        "test": name,
        "cases": ran,
        "valid": valid,
        "invalid": invalid,
        "known_issues": known_json,
        "seed": seed,
        "passed": result.is_ok(),
        "thread": current_test(),
    }));
    if let Err(e) = result {
        panic!("{name}: {e}\n(replay with KLEIDIAI_PROPTEST_SEED={seed})");
    }
}

/// `prop_assert!` with a formatted message, for closures returning
/// `Result<(), TestCaseError>`.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        {
            let holds: bool = $cond;
            if !holds {
                return Err(proptest::test_runner::TestCaseError::fail(format!($($fmt)+)));
            }
        }
    };
}
