//! Thread partitioning (pure functions) and the executor on rayon.
//!
//! Work is cut into chunks whose starts are multiples of the kernel's step
//! (so every chunk but the last is a whole number of steps) and chunks are
//! claimed dynamically by up to `threads` workers. A chunk's result does not
//! depend on which worker computes it, so output is bit-identical for every
//! thread count.
//!
//! ```
//! use kleidiai::Parallelism;
//! assert_eq!(Parallelism::Sequential.threads(), 1);
//! assert_eq!(Parallelism::Rayon(3).threads(), 3);
//! ```

use core::ops::Range;
use core::sync::atomic::{AtomicUsize, Ordering};

/// How many threads an operation may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Parallelism {
    /// On the calling thread only.
    #[default]
    Sequential,
    /// Up to this many workers of the current rayon pool (the global one, or
    /// the pool a caller `install`ed); 0 means as many as the pool has.
    Rayon(usize),
}

impl Parallelism {
    /// Workers this asks for (≥ 1).
    pub fn threads(self) -> usize {
        match self {
            Parallelism::Sequential => 1,
            Parallelism::Rayon(0) => rayon::current_num_threads().max(1),
            Parallelism::Rayon(n) => n,
        }
    }
}

/// Below this many multiply-accumulates an operation runs on one thread:
/// spreading it costs more than it saves.
pub const INLINE_WORK: usize = 1 << 18;

/// Environment variable capping the threads that run SME kernels at once
/// (SME units are shared by the cores of a cluster): a positive integer.
///
/// Read once per process. Unset or empty: the automatic cap (1). Anything
/// else that is not a positive integer (`abc`, `0`, `-2`, not UTF-8) prints
/// one warning to stderr naming the value, and the automatic cap is used
/// (to keep SME kernels off, use `KLEIDIAI_DISABLE=sme`).
pub const SME_THREADS_ENV: &str = "KLEIDIAI_SME_THREADS";

/// The cap `KLEIDIAI_SME_THREADS` asks for (`value` is the variable), with
/// the warning for a value that is not a positive integer.
fn sme_cap_from_env(value: Option<&std::ffi::OsStr>) -> (usize, Option<String>) {
    const AUTO: usize = 1;
    let Some(raw) = value else { return (AUTO, None) };
    let v = raw.to_string_lossy();
    if v.trim().is_empty() {
        return (AUTO, None);
    }
    match v.trim().parse::<usize>() {
        Ok(n) if n > 0 => (n, None),
        _ => (
            AUTO,
            Some(format!(
                "kleidiai: {SME_THREADS_ENV}='{v}' is not a positive integer; using the automatic SME worker cap                  ({AUTO})"
            )),
        ),
    }
}

static SME_CAP: AtomicUsize = AtomicUsize::new(0);

/// The most workers an SME kernel gets: [`set_sme_thread_cap`], else
/// `KLEIDIAI_SME_THREADS`, else 1 (the number of SME units is unknown).
pub fn sme_thread_cap() -> usize {
    // The environment is read once: this runs on every operation, and
    // reading the environment allocates.
    static FROM_ENV: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    match SME_CAP.load(Ordering::Relaxed) {
        0 => *FROM_ENV.get_or_init(|| {
            let (cap, warning) = sme_cap_from_env(std::env::var_os(SME_THREADS_ENV).as_deref());
            // Once per process (this runs once).
            if let Some(w) = warning {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "{w}");
            }
            cap
        }),
        n => n,
    }
}

/// Sets the SME worker cap for the process (0 restores the default).
pub fn set_sme_thread_cap(n: usize) {
    SME_CAP.store(n, Ordering::Relaxed);
}

/// Splits `0..len` into at most `parts` non-empty ranges whose starts are
/// multiples of `align` and whose lengths are multiples of `align` except
/// the last one's. Covers `0..len` exactly, in order, without overlap.
/// `align` 0 counts as 1; `len` 0 gives no ranges; `parts` 0 counts as 1.
///
/// Internal: the operations partition through their own split. Kept public
/// (hidden) for one release so code that called it still builds.
#[doc(hidden)]
#[deprecated(note = "internal partitioning helper; it leaves the public API in the next release")]
pub fn split_aligned(len: usize, align: usize, parts: usize) -> Vec<Range<usize>> {
    let s = Split::new(len, align, parts);
    (0..s.count()).map(|i| s.get(i)).collect()
}

/// `0..len` in at most `parts` ranges whose starts are multiples of
/// `align`, range `i` computed on demand
/// (the hot path calls this on every operation).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Split {
    len: usize,
    align: usize,
    blocks: usize,
    parts: usize,
    base: usize,
    extra: usize,
}

impl Split {
    pub(crate) fn new(len: usize, align: usize, parts: usize) -> Split {
        let align = align.max(1);
        let blocks = len.div_ceil(align);
        let parts = if len == 0 { 0 } else { parts.clamp(1, blocks) };
        let base = blocks.checked_div(parts).unwrap_or(0);
        let extra = blocks.checked_rem(parts).unwrap_or(0);
        Split { len, align, blocks, parts, base, extra }
    }

    pub(crate) fn count(&self) -> usize {
        self.parts
    }

    /// Range `i` (`i < count()`): the first `extra` parts get one block more.
    pub(crate) fn get(&self, i: usize) -> Range<usize> {
        let start_block = i * self.base + i.min(self.extra);
        let end_block = start_block + self.base + usize::from(i < self.extra);
        // start_block * align <= (blocks - 1) * align < len: no overflow.
        let start = start_block * self.align;
        let end = if end_block == self.blocks { self.len } else { end_block * self.align };
        start..end
    }
}

/// A 2-D cut of an `m x n` output into tiles for `threads` workers: rows in
/// multiples of `m_step`, columns in multiples of `n_step`, about four tiles
/// per worker so dynamic claiming balances the load.
///
/// Internal: the operations partition through their own grid. Kept public
/// (hidden) for one release so code that called it still builds.
#[doc(hidden)]
#[deprecated(note = "internal partitioning helper; it leaves the public API in the next release")]
pub fn plan_grid(
    m: usize,
    n: usize,
    m_step: usize,
    n_step: usize,
    threads: usize,
) -> Vec<(Range<usize>, Range<usize>)> {
    let g = Grid::new(m, n, m_step, n_step, threads);
    (0..g.count()).map(|i| g.get(i)).collect()
}

/// A 2-D cut of an `m x n` output into tiles for `threads` workers (see
/// `plan_grid`), tile `i` computed on demand.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grid {
    rows: Split,
    cols: Split,
}

impl Grid {
    pub(crate) fn new(m: usize, n: usize, m_step: usize, n_step: usize, threads: usize) -> Grid {
        if m == 0 || n == 0 {
            return Grid { rows: Split::new(0, 1, 1), cols: Split::new(0, 1, 1) };
        }
        let threads = threads.max(1);
        let tiles_m = m.div_ceil(m_step.max(1));
        let tiles_n = n.div_ceil(n_step.max(1));
        let want = if threads == 1 { 1 } else { threads.saturating_mul(4) };
        // Prefer cutting N (the packed RHS streams once per chunk); cut M only
        // when N alone cannot feed every worker.
        let parts_n = want.min(tiles_n);
        let parts_m = if parts_n >= want { 1 } else { want.div_ceil(parts_n).min(tiles_m) };
        Grid { rows: Split::new(m, m_step, parts_m), cols: Split::new(n, n_step, parts_n) }
    }

    pub(crate) fn count(&self) -> usize {
        self.rows.count() * self.cols.count()
    }

    pub(crate) fn get(&self, i: usize) -> (Range<usize>, Range<usize>) {
        let c = self.cols.count();
        (self.rows.get(i / c), self.cols.get(i % c))
    }
}

/// Runs `f(i)` for every `i < count` on up to `threads` workers of the
/// current rayon pool, each claiming the next index when it is free.
///
/// One worker runs `f` inline (the steady state of small calls, no
/// indirection); more go through [`for_each_index_on_pool`], which is not
/// generic: every caller shares one instantiation of rayon's scope and job
/// machinery instead of one per closure type (about a tenth of this
/// crate's LLVM IR before), at the cost of one indirect call per index.
#[inline]
pub(crate) fn for_each_index<F>(threads: usize, count: usize, f: F)
where
    F: Fn(usize) + Sync,
{
    let workers = threads.min(count);
    if workers <= 1 {
        (0..count).for_each(f);
        return;
    }
    for_each_index_on_pool(workers, count, &f);
}

/// [`for_each_index`] on `workers` (at least 2) pool threads.
#[inline(never)]
fn for_each_index_on_pool(workers: usize, count: usize, f: &(dyn Fn(usize) + Sync)) {
    let next = AtomicUsize::new(0);
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= count {
                break;
            }
            f(i);
        }
    };
    rayon::scope(|s| {
        for _ in 1..workers {
            s.spawn(|_| work());
        }
        work();
    });
}

/// The inline threshold in force ([`INLINE_WORK`]; the test harness lowers
/// it to exercise the threaded path on small shapes).
static INLINE_THRESHOLD: AtomicUsize = AtomicUsize::new(INLINE_WORK);

#[cfg(test)]
pub(crate) fn set_inline_threshold_for_tests(work: usize) {
    INLINE_THRESHOLD.store(work, Ordering::Relaxed);
}

/// Workers for an operation of `work` multiply-accumulates.
pub(crate) fn workers(par: Parallelism, work: usize, sme: bool) -> usize {
    workers_for(par.threads(), work, sme, sme_thread_cap(), INLINE_THRESHOLD.load(Ordering::Relaxed))
}

/// Pure core of [`workers`].
pub(crate) fn workers_for(threads: usize, work: usize, sme: bool, sme_cap: usize, inline: usize) -> usize {
    if work < inline {
        return 1;
    }
    let t = threads.max(1);
    if sme { t.min(sme_cap.max(1)) } else { t }
}

#[cfg(test)]
#[allow(deprecated)] // the hidden helpers are tested until they leave the API
mod tests {
    use super::*;

    #[test]
    fn sme_threads_values() {
        let v = |s: &str| sme_cap_from_env(Some(std::ffi::OsStr::new(s)));
        assert_eq!(sme_cap_from_env(None), (1, None));
        assert_eq!(v(""), (1, None));
        assert_eq!(v(" 4 "), (4, None));
        for bad in ["abc", "0", "-2", "3x"] {
            let (cap, w) = v(bad);
            let w = w.unwrap_or_else(|| panic!("{bad}: no warning"));
            assert_eq!(cap, 1, "{bad}");
            assert!(w.contains(&format!("KLEIDIAI_SME_THREADS='{bad}'")) && w.contains("automatic"), "{w}");
        }
    }

    fn check_split(len: usize, align: usize, parts: usize) {
        let r = split_aligned(len, align, parts);
        let a = align.max(1);
        if len == 0 {
            assert!(r.is_empty());
            return;
        }
        assert!(!r.is_empty() && r.len() <= parts.max(1));
        assert_eq!(r[0].start, 0);
        assert_eq!(r.last().unwrap().end, len);
        for (i, x) in r.iter().enumerate() {
            assert!(x.start < x.end, "empty range {x:?} ({len},{align},{parts})");
            assert_eq!(x.start % a, 0);
            if i + 1 < r.len() {
                assert_eq!(x.end, r[i + 1].start, "gap or overlap");
                assert_eq!((x.end - x.start) % a, 0, "only the last chunk may be ragged");
            }
        }
    }

    #[test]
    fn split_aligned_every_thread_count() {
        let lens = [0usize, 1, 2, 3, 7, 8, 15, 16, 17, 31, 100, 127, 1000, 4096, 4099, 12_345];
        let aligns = [0usize, 1, 2, 4, 8, 12, 16, 32, 64, 96, 128, 512];
        for &len in &lens {
            for &align in &aligns {
                for parts in 0..=1024 {
                    check_split(len, align, parts);
                }
            }
        }
    }

    #[test]
    fn split_aligned_extremes() {
        check_split(usize::MAX, 1 << 20, 1024);
        check_split(usize::MAX, 1, 7);
        check_split(usize::MAX - 3, usize::MAX / 2, 3);
        assert_eq!(split_aligned(5, 8, 4), vec![0..5]);
    }

    #[test]
    fn grid_covers_everything_once() {
        for &(m, n, ms, ns) in &[(1, 1, 1, 1), (1, 4096, 1, 4), (257, 33, 16, 4), (64, 64, 128, 128), (3, 1000, 8, 64)]
        {
            for t in [1, 2, 3, 8, 64, 1024] {
                let g = plan_grid(m, n, ms, ns, t);
                let mut seen = vec![0u8; m * n];
                for (r, c) in &g {
                    assert_eq!(r.start % ms, 0);
                    assert_eq!(c.start % ns, 0);
                    for i in r.clone() {
                        for j in c.clone() {
                            seen[i * n + j] += 1;
                        }
                    }
                }
                assert!(seen.iter().all(|x| *x == 1), "{m}x{n} step {ms}x{ns} t={t}");
            }
        }
    }

    #[test]
    fn for_each_index_visits_each_once() {
        let hits: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
        for t in [1, 2, 7, 64] {
            for h in &hits {
                h.store(0, Ordering::Relaxed);
            }
            for_each_index(t, hits.len(), |i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// Any length (up to usize::MAX), any step, any thread count 1..=1024.
        #[test]
        fn split_aligned_properties(len in 0usize.., align in 0usize..=4096, parts in 1usize..=1024) {
            check_split(len, align, parts);
        }

        #[test]
        fn split_aligned_small(len in 0usize..5000, align in 1usize..200, parts in 1usize..=1024) {
            check_split(len, align, parts);
            // Balanced: no range exceeds another by more than one step.
            let r = split_aligned(len, align, parts);
            if r.len() > 1 {
                let steps: Vec<usize> = r[..r.len() - 1].iter().map(|x| x.len() / align).collect();
                let (lo, hi) = (steps.iter().min().unwrap(), steps.iter().max().unwrap());
                proptest::prop_assert!(hi - lo <= 1);
            }
        }

        #[test]
        fn plan_grid_properties(m in 1usize..300, n in 1usize..300, ms in 1usize..64, ns in 1usize..64, t in 1usize..=1024) {
            let g = plan_grid(m, n, ms, ns, t);
            let area: usize = g.iter().map(|(r, c)| r.len() * c.len()).sum();
            proptest::prop_assert_eq!(area, m * n);
            for (r, c) in &g {
                proptest::prop_assert!(r.start % ms == 0 && c.start % ns == 0 && !r.is_empty() && !c.is_empty());
                proptest::prop_assert!(r.end <= m && c.end <= n);
            }
            // Disjoint: sort by (row start, col start) and check no two overlap.
            for (i, (r1, c1)) in g.iter().enumerate() {
                for (r2, c2) in &g[i + 1..] {
                    let rows_overlap = r1.start < r2.end && r2.start < r1.end;
                    let cols_overlap = c1.start < c2.end && c2.start < c1.end;
                    proptest::prop_assert!(!(rows_overlap && cols_overlap));
                }
            }
        }
    }

    #[test]
    fn worker_counts() {
        assert_eq!(workers_for(8, INLINE_WORK, true, 1, INLINE_WORK), 1, "SME capped at one by default");
        assert_eq!(workers_for(8, INLINE_WORK, true, 2, INLINE_WORK), 2);
        assert_eq!(workers_for(8, INLINE_WORK, false, 1, INLINE_WORK), 8);
        assert_eq!(workers_for(8, 10, false, 1, INLINE_WORK), 1, "small work runs inline");
        assert_eq!(workers_for(0, INLINE_WORK, false, 0, 0), 1);
    }
}
