//! A replay and mutation driver for the fuzz targets, without libFuzzer: it
//! runs every corpus input once, then mutates them (libFuzzer-like byte
//! mutations and splices, from a seeded RNG) until a time budget ends,
//! counting executions. It serves where cargo-fuzz does not build: the
//! test command cross-builds it for aarch64 (`examples/fuzz_replay.rs` at
//! the top of the repository) and runs the targets against the KleidiAI
//! kernels under qemu.
//!
//! It is not coverage-guided: the committed corpus (minimised by libFuzzer
//! with coverage, on the host) gives the reach, the mutations its
//! neighbourhood. For `validation` the tags of what an input exercised
//! (`run_tagged`) stand in for coverage: an input that shows a tag not seen
//! before joins the pool.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// A fuzz target: its name (as in `fuzz/fuzz_targets/`) and the function its
/// libFuzzer driver calls, returning what the input exercised.
pub struct Target {
    pub name: &'static str,
    run: fn(&[u8]) -> BTreeSet<String>,
}

impl Target {
    /// Runs one input (a failure panics, as under libFuzzer).
    pub fn run(&self, input: &[u8]) -> BTreeSet<String> {
        (self.run)(input)
    }
}

/// Every target the driver runs.
pub const TARGETS: [Target; 2] = [
    Target {
        name: "packed_file",
        run: |input| {
            crate::packed_file::run(input);
            BTreeSet::new()
        },
    },
    Target {
        name: "validation",
        run: |input| crate::validation::decode(input).map(crate::validation::run_tagged).unwrap_or_default(),
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// What one bounded run did.
#[derive(Debug, Default)]
pub struct Stats {
    /// Inputs run, corpus replay included.
    pub execs: u64,
    /// Corpus inputs replayed unchanged first.
    pub corpus: usize,
    /// Mutated inputs kept in the pool (they showed a new tag).
    pub kept: usize,
    /// Distinct tags seen.
    pub tags: usize,
    pub seconds: f64,
}

/// The pool stops growing here (memory stays bounded on long runs).
const MAX_POOL: usize = 4096;

/// Replays `corpus`, then runs mutations of it until `budget` has passed.
/// `before` sees every input just before it runs (the caller saves it, so
/// a crash that kills the process leaves its input behind). The inputs
/// depend only on `corpus` and `seed`; how many run depends on the budget.
pub fn fuzz(target: &Target, corpus: &[Vec<u8>], budget: Duration, seed: u64, mut before: impl FnMut(&[u8])) -> Stats {
    let start = Instant::now();
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut stats = Stats { corpus: corpus.len(), ..Stats::default() };
    let mut seen = BTreeSet::new();
    let mut run = |input: &[u8], stats: &mut Stats| {
        before(input);
        stats.execs += 1;
        target.run(input)
    };
    for input in corpus {
        seen.extend(run(input, &mut stats));
    }
    let mut pool: Vec<Vec<u8>> = if corpus.is_empty() { vec![Vec::new()] } else { corpus.to_vec() };
    let max_len = pool.iter().map(Vec::len).max().unwrap_or(0).max(1024) + 256;
    while start.elapsed() < budget {
        let mut input = pool[rng.usize(..pool.len())].clone();
        for _ in 0..rng.usize(1..=4) {
            mutate(&mut rng, &mut input, &pool, max_len);
        }
        let tags = run(&input, &mut stats);
        if tags.iter().any(|t| !seen.contains(t)) {
            seen.extend(tags);
            if pool.len() < MAX_POOL {
                pool.push(input);
                stats.kept += 1;
            }
        }
    }
    stats.tags = seen.len();
    stats.seconds = start.elapsed().as_secs_f64();
    stats
}

/// One mutation of `v` (at most `max_len` bytes after it): a bit flip, a
/// byte set to a random or boundary value, a small delta added to a
/// little-endian integer, bytes inserted, erased or copied within, a splice
/// with another pool input, or a truncation.
fn mutate(rng: &mut fastrand::Rng, v: &mut Vec<u8>, pool: &[Vec<u8>], max_len: usize) {
    const BOUNDARY: [u8; 8] = [0, 1, 2, 0x10, 0x40, 0x7f, 0x80, 0xff];
    let len = v.len();
    match rng.u8(..8) {
        0 if len > 0 => v[rng.usize(..len)] ^= 1 << rng.u8(..8),
        1 if len > 0 => v[rng.usize(..len)] = if rng.bool() { rng.u8(..) } else { BOUNDARY[rng.usize(..8)] },
        2 if len > 0 => {
            let w = [1, 2, 4, 8][rng.usize(..4)].min(len);
            let at = rng.usize(..=len - w);
            let mut b = [0u8; 8];
            b[..w].copy_from_slice(&v[at..at + w]);
            let x = u64::from_le_bytes(b).wrapping_add(rng.i64(-16..=16) as u64);
            v[at..at + w].copy_from_slice(&x.to_le_bytes()[..w]);
        }
        3 => {
            let at = rng.usize(..=len);
            let bytes: Vec<u8> = (0..rng.usize(1..=8)).map(|_| rng.u8(..)).collect();
            v.splice(at..at, bytes);
        }
        4 if len > 0 => {
            let at = rng.usize(..len);
            let n = rng.usize(1..=(len - at).min(16));
            v.drain(at..at + n);
        }
        5 if len > 1 => {
            let n = rng.usize(1..=len / 2);
            let (from, to) = (rng.usize(..=len - n), rng.usize(..=len - n));
            v.copy_within(from..from + n, to);
        }
        6 => {
            let other = &pool[rng.usize(..pool.len())];
            let cut = rng.usize(..=len);
            v.truncate(cut);
            v.extend_from_slice(&other[rng.usize(..=other.len())..]);
        }
        _ if len > 0 => v.truncate(rng.usize(..len)),
        _ => v.push(rng.u8(..)),
    }
    v.truncate(max_len);
}
