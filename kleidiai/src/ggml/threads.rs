//! ggml's KleidiAI path driven by ggml's own threads: a weight tensor
//! repacked once into ggml's buffer ([`ThreadedWeights`]), then every thread
//! of a ggml graph node calls [`ThreadedWeights::mul_mat`] with its `ith` of
//! `nth` and ggml's barrier and chunk counter ([`ThreadTeam`]): no thread
//! pool of the crate's own runs inside ggml's.
//!
//! Decisions follow ggml's `ggml-cpu/kleidiai/kleidiai.cpp`:
//! - kernels: ggml's tables ([`kernel_table`]), an SME layout and, after it,
//!   a non-SME one (ggml's two slots);
//! - SME threads: [`SmeSetting`] (`GGML_KLEIDIAI_SME`); with more threads
//!   than the SME cap, Q4_0/Q8_0 weights run on the non-SME layout when
//!   `m < 128` (or fewer than 2 columns a thread), else hybrid: threads
//!   `0..cap` run the SME kernel, the others the non-SME one, on column
//!   chunks they claim from ggml's counter. F32 weights always run their
//!   one layout on every thread;
//! - LHS rows split over a slot's threads in multiples of `mr`, then a
//!   barrier, then columns in chunks of `ceil(n / (nth * multiplier))`
//!   rounded up to the kernels' column step;
//! - work size: one 64-byte aligned packed LHS per layout held.
//!
//! Results are those of [`GgmlWeights::mul_mat`](super::GgmlWeights::mul_mat)
//! with the same kernel: every output column comes from one kernel call over
//! all rows, whichever thread computes it.

use super::tensor::{GgmlType, Tensor};
use super::{BlockQ8_0, kernel_table};
use crate::cpu::{CpuFeature, Features};
use crate::error::{Error, Result};
use crate::formats::{BlockInt4, FloatWeights, Order, Q4_0};
use crate::weights::parts::{OnThread, OutputBlock, PartKernel, PartSlot};
use crate::weights::{PackedWeights, WeightKind, WeightsRef};
use core::marker::PhantomData;
use core::ops::Range;
use core::ptr::NonNull;

/// `GGML_KLEIDIAI_SME` as ggml reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SmeSetting {
    /// Unset: SME kernels when the CPU has them, at most one thread on them
    /// at once (ggml's cap when it cannot count the SME units, as under qemu).
    #[default]
    Auto,
    /// `0`: no SME kernels.
    Off,
    /// `N`: at most N threads on SME kernels at once.
    Cap(usize),
}

impl SmeSetting {
    /// Parses a value of `GGML_KLEIDIAI_SME` the way ggml does: a decimal
    /// integer from 0 to `i32::MAX`; anything else is a warning (returned)
    /// and means [`Auto`](Self::Auto), as in ggml.
    pub fn from_env_value(value: Option<&str>) -> (SmeSetting, Option<String>) {
        let Some(v) = value else { return (SmeSetting::Auto, None) };
        let t = v.trim_start();
        let (neg, digits) = match t.as_bytes().first() {
            Some(b'-') => (true, &t[1..]),
            Some(b'+') => (false, &t[1..]),
            _ => (false, t),
        };
        let warn = |why: &str| {
            (
                SmeSetting::Auto,
                Some(format!("kleidiai: {why} GGML_KLEIDIAI_SME='{v}'; using the automatic SME thread cap")),
            )
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return warn("invalid");
        }
        match digits.parse::<u64>() {
            Ok(0) => (SmeSetting::Off, None),
            Ok(n) if !neg && n <= i32::MAX as u64 => (SmeSetting::Cap(n as usize), None),
            _ => warn("out-of-range"),
        }
    }

    /// `GGML_KLEIDIAI_SME` from the environment, as [`from_env_value`](Self::from_env_value).
    pub fn from_env() -> (SmeSetting, Option<String>) {
        Self::from_env_value(std::env::var(super::SME_ENV).ok().as_deref())
    }

    /// The CPU features kernels may use with this setting.
    pub(crate) fn features(self) -> Features {
        let f = Features::current();
        if self == SmeSetting::Off { f.without(&[CpuFeature::Sme]) } else { f }
    }

    /// The SME thread cap when an SME kernel is in use.
    fn cap(self) -> usize {
        match self {
            SmeSetting::Off => 0,
            SmeSetting::Auto => 1,
            SmeSetting::Cap(n) => n,
        }
    }
}

/// The threads of one ggml graph node: thread [`ith`](Self::ith) of
/// [`nth`](Self::nth), ggml's barrier and its shared chunk counter.
///
/// # Safety
/// Every thread of the team calls the same operation with the same
/// arguments (its own `ith`) and a team whose `nth` is the number of those
/// threads; [`barrier`](Self::barrier) returns only when all `nth` threads
/// reached it and makes every write before it visible to all threads after
/// it; [`chunk_add`](Self::chunk_add) is an atomic fetch-and-add on a counter
/// the team shares and [`chunk_set`](Self::chunk_set) stores to it.
pub unsafe trait ThreadTeam {
    /// This thread's index, `0..nth`.
    fn ith(&self) -> usize;
    /// Threads in the team.
    fn nth(&self) -> usize;
    /// Waits for the whole team.
    fn barrier(&self);
    /// Sets the shared chunk counter.
    fn chunk_set(&self, value: usize);
    /// Adds `delta` to the shared chunk counter, returning its value before.
    fn chunk_add(&self, delta: usize) -> usize;
}

/// One thread alone (`ith = 0`, `nth = 1`): no barrier, a private counter.
#[derive(Debug, Default)]
pub struct SingleThread(core::cell::Cell<usize>);

// SAFETY: a team of one: the barrier has no one to wait for, the counter
// is the thread's own.
unsafe impl ThreadTeam for SingleThread {
    fn ith(&self) -> usize {
        0
    }
    fn nth(&self) -> usize {
        1
    }
    fn barrier(&self) {}
    fn chunk_set(&self, value: usize) {
        self.0.set(value);
    }
    fn chunk_add(&self, delta: usize) -> usize {
        let v = self.0.get();
        self.0.set(v.saturating_add(delta));
        v
    }
}

/// Bytes a team shares during one operation: the work buffer (each thread
/// packs its LHS rows into its own part, all read it after the barrier)
/// and the output (each thread writes the columns or rows it claimed).
#[derive(Debug)]
pub struct SharedBytes<'a> {
    ptr: NonNull<u8>,
    len: usize,
    _b: PhantomData<&'a mut [u8]>,
}

// SAFETY: access to the bytes is partitioned between the team's threads by
// the operations (see `from_raw_parts`).
unsafe impl Send for SharedBytes<'_> {}
// SAFETY: as above.
unsafe impl Sync for SharedBytes<'_> {}

impl<'a> SharedBytes<'a> {
    /// `len` bytes at `ptr`, shared by the threads of a team.
    ///
    /// # Safety
    /// For `'a`, the bytes are valid for reads and writes, and only the
    /// team's threads, inside the operation they are passed to, use them
    /// (each thread its own `SharedBytes` of the same bytes).
    pub unsafe fn from_raw_parts(ptr: *mut u8, len: usize) -> Result<SharedBytes<'a>> {
        let ptr = NonNull::new(ptr).ok_or_else(|| Error::Null { what: "shared buffer" })?;
        Ok(SharedBytes { ptr, len, _b: PhantomData })
    }

    /// A one-thread team's bytes.
    pub fn from_slice(bytes: &'a mut [u8]) -> SharedBytes<'a> {
        SharedBytes { ptr: NonNull::from(&mut *bytes).cast(), len: bytes.len(), _b: PhantomData }
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn range(&self, r: &Range<usize>) -> Result<()> {
        if r.start > r.end || r.end > self.len {
            return Err(Error::ByteLength { what: "shared buffer", got: self.len, need: r.end });
        }
        Ok(())
    }

    /// Thread `team.ith()`'s view of these bytes as the work buffer of one
    /// operation, `split` the region the threads' splits write (see
    /// [`TeamWork`]). An operation makes one view of a buffer on each
    /// thread, with the same arguments on all (its code; two views of the
    /// same bytes on one thread could hand them out twice).
    pub(super) fn work_of<'s, T: ThreadTeam>(&'s self, team: &T, split: Range<usize>) -> TeamWork<'s, 'a> {
        TeamWork { bytes: self, ith: team.ith(), nth: team.nth(), split, reading: false }
    }

    /// Thread `team.ith()`'s view of these bytes as an F32 output `[n, m,
    /// b, 1]` of strides `nb` (see [`TeamColumns`]), checked as
    /// [`f32_rows`] checks it (`what` names it in errors); with its sizes
    /// `[n, m, b]`. One view of a buffer on each thread, as for
    /// [`work_of`](Self::work_of).
    pub(super) fn columns_of<'s, T: ThreadTeam>(
        &'s self,
        team: &T,
        ne: [i64; 4],
        nb: [usize; 4],
        what: &'static str,
    ) -> Result<(TeamColumns<'s, 'a>, [usize; 3])> {
        let d = f32_rows(ne, nb, self.len, what)?;
        let (ith, nth) = (team.ith(), team.nth());
        Ok((TeamColumns { bytes: self, ith, nth, n: d[0], m: d[1], batches: d[2], nb: [nb[1], nb[2]] }, d))
    }
}

/// What of a work buffer a thread writes (see [`TeamWork::own_mut`]):
/// its part of a split of the view's split region over the team, or on
/// thread 0 bytes outside that region. (Every thread of an operation runs
/// its code: the same split on all threads.)
#[derive(Clone, Debug)]
pub(super) enum Own {
    /// Its rows of ggml's LHS split of `m` rows in multiples of `mr`
    /// ([`lhs_rows`]) over the team: `group` bytes for every `mr` rows from
    /// the split region's start, the thread of the last rows to its end.
    LhsRows { m: usize, mr: usize, group: usize },
    /// On thread 0 alone, bytes outside the split region.
    First(Range<usize>),
    /// Row `index`, one of its rows of ggml's `get_rows` split of `count`
    /// rows ([`get_rows_split`]): `len` bytes at `index * stride` from the
    /// split region's start, inside it.
    Row { count: usize, index: usize, stride: usize, len: usize },
}

/// Thread `ith` of `nth`'s access to a team's work buffer during one
/// operation, in phases the team's barrier separates: in a writing phase
/// each thread writes only its own part ([`own_mut`](Self::own_mut), parts
/// of different threads disjoint by construction: the split is computed
/// here from the thread's index, the same for every thread, each having its
/// own index), in a reading phase every thread may read any bytes
/// ([`part`](Self::part)) and none writes. [`barrier`](Self::barrier), the
/// operation's every barrier, takes the whole team from one phase to the
/// next (a [`ThreadTeam`]'s barrier returns once every thread reached it,
/// so all threads are in the same phase), and no part outlives it (it
/// takes `&mut self`).
#[derive(Debug)]
pub(super) struct TeamWork<'s, 'a> {
    bytes: &'s SharedBytes<'a>,
    ith: usize,
    nth: usize,
    /// Where the threads' splits write ([`Own`]).
    split: Range<usize>,
    reading: bool,
}

impl TeamWork<'_, '_> {
    /// The team's barrier (`team` is the one this view was made for), into
    /// the next phase.
    pub(super) fn barrier<T: ThreadTeam>(&mut self, team: &T) {
        team.barrier();
        self.reading = !self.reading;
    }

    /// This thread's bytes of `own` in a writing phase (rows of `Own`'s
    /// splits with the bytes they take; `None` when the thread has none).
    pub(super) fn own_mut(&mut self, own: Own) -> Result<Option<(Range<usize>, &mut [u8])>> {
        if self.reading {
            return Err(Error::InvalidArgument("work buffer written in a reading phase".into()));
        }
        let over = || Error::Overflow("work buffer part".into());
        let (rows, bytes) = match own {
            Own::LhsRows { m, mr, group } => {
                let rows = lhs_rows(m, mr, self.nth, self.ith);
                if rows.is_empty() {
                    return Ok(None);
                }
                let mr = mr.max(1);
                let at = |row: usize| (row / mr).checked_mul(group).and_then(|v| v.checked_add(self.split.start));
                // Rows start at multiples of mr, one thread's end the next
                // one's start: byte ranges in the order of the rows.
                let start = at(rows.start).ok_or_else(over)?;
                let end = if rows.end == m { self.split.end } else { at(rows.end).ok_or_else(over)? };
                if start > end || end > self.split.end {
                    let why = format!("pack outside the {} bytes of {m} rows", self.split.len());
                    return Err(Error::bad_value("LHS rows", format!("{rows:?}"), why));
                }
                (rows, start..end)
            }
            Own::First(r) => {
                if self.ith != 0 {
                    return Ok(None);
                }
                if r.start < self.split.end && self.split.start < r.end {
                    return Err(Error::bad_value("thread 0's part", format!("{r:?}"), "overlaps the split region"));
                }
                (0..0, r)
            }
            Own::Row { count, index, stride, len } => {
                if !get_rows_split(count, self.ith, self.nth).contains(&index) {
                    return Err(Error::out_of_range("row of this thread", index, count));
                }
                if stride < len {
                    return Err(Error::Stride { what: "rows", stride, why: format!("do not hold {len} bytes each") });
                }
                // Rows `stride >= len` bytes apart: every row its own bytes.
                let at = index.checked_mul(stride).and_then(|v| v.checked_add(self.split.start)).ok_or_else(over)?;
                let end = at.checked_add(len).ok_or_else(over)?;
                if end > self.split.end {
                    return Err(Error::ByteLength { what: "shared buffer", got: self.split.end, need: end });
                }
                (index..index + 1, at..end)
            }
        };
        self.bytes.range(&bytes)?;
        // SAFETY: in bounds (checked) of bytes valid for the operation
        // (SharedBytes' contract); written by this thread alone until the
        // borrow ends: a writing phase (checked), in which no thread reads
        // and every thread writes only its own part of the split region
        // (checked), disjoint from every other thread's (the split computed
        // above from the thread's own index: ThreadTeam's contract, or for
        // `Row` SharedBytes'), or on thread 0 bytes outside it (checked);
        // `&mut self` holds one part at a time.
        let part = unsafe { core::slice::from_raw_parts_mut(self.bytes.ptr.as_ptr().add(bytes.start), bytes.len()) };
        Ok(Some((rows, part)))
    }

    /// The bytes `r` in a reading phase.
    pub(super) fn part(&self, r: Range<usize>) -> Result<&[u8]> {
        if !self.reading {
            return Err(Error::InvalidArgument("work buffer read in a writing phase".into()));
        }
        self.bytes.range(&r)?;
        // SAFETY: in bounds (checked) of bytes valid for the operation
        // (SharedBytes' contract); a reading phase (checked), in which no
        // thread writes, and it lasts as long as the borrow (`barrier`
        // takes `&mut self`).
        Ok(unsafe { core::slice::from_raw_parts(self.bytes.ptr.as_ptr().add(r.start), r.len()) })
    }
}

/// Thread `ith` of `nth`'s access to a team's F32 output `[n, m, batches]`
/// (rows `nb[0]` bytes apart, batches `nb[1]`, checked by [`f32_rows`] to
/// lie in the bytes without overlapping: every element has its own 4
/// bytes), through which it writes only its own columns of ggml's static
/// split ([`block_mut`](Self::block_mut)).
#[derive(Debug)]
pub(super) struct TeamColumns<'s, 'a> {
    bytes: &'s SharedBytes<'a>,
    ith: usize,
    nth: usize,
    n: usize,
    m: usize,
    batches: usize,
    nb: [usize; 2],
}

impl TeamColumns<'_, '_> {
    /// This thread's columns of batch `b` in ggml's static split of the
    /// `n` columns in multiples of `step`, and the block of every row's
    /// (None when it has none).
    pub(super) fn block_mut(&mut self, b: usize, step: usize) -> Result<Option<(Range<usize>, OutputBlock<'_>)>> {
        let (n, step) = (self.n, step.max(1));
        let threads = (n / step).min(self.nth).max(1);
        if self.ith >= threads {
            return Ok(None);
        }
        let per = n / threads / step * step;
        let start = self.ith * per;
        let end = if self.ith == threads - 1 { n } else { start + per };
        if start >= end {
            return Ok(None);
        }
        if b >= self.batches {
            return Err(Error::out_of_range("batch", b, self.batches));
        }
        let at = b * self.nb[1] + start * 4;
        // SAFETY: elements (row i < m, column j < end - start) of batch b <
        // batches lie in the bytes, each its own 4 bytes (f32_rows, checked
        // at construction), valid for the operation (SharedBytes'
        // contract); the columns start..end of every row and batch are this
        // thread's alone (the static split of its own index: ThreadTeam's
        // contract) and `&mut self` holds one block at a time;
        // from_raw_parts checks the alignment and the row stride.
        let block = unsafe {
            OutputBlock::from_raw_parts(self.bytes.ptr.as_ptr().add(at).cast(), self.m, end - start, self.nb[0])?
        };
        Ok(Some((start..end, block)))
    }
}

/// Weights repacked for ggml's kernels and resolved for per-thread calls
/// (see the module docs). 2-D Q4_0, Q8_0 or F32 weights, like ggml's
/// KleidiAI buffer.
#[derive(Debug)]
pub struct ThreadedWeights {
    /// Its [`call_class`]: keys the per-thread plan and replay caches.
    class: u64,
    typ: GgmlType,
    k: usize,
    n: usize,
    weights: PackedWeights,
    slots: Vec<PartSlot>,
    sme_cap: usize,
    /// The last `work_size` answer, `m << 32 | bytes` (0: none yet): ggml
    /// asks it for every node of every graph it plans, and the answer
    /// depends on the class and `m` alone, so a listed class shares one.
    last_work: WorkCell,
    /// `disabled mask + 1` when every kernel of every slot was found
    /// supported under that mask (0: not yet): then a first call checks
    /// only its thread's vector length. Tiers only ever get disabled, so
    /// a mask seen once is the mask of now or of before.
    verified: core::sync::atomic::AtomicU64,
}

/// One layout's share of a mul_mat: its threads and its packed LHS.
#[derive(Clone, Copy, Debug, Default)]
struct Part {
    slot: usize,
    /// Threads `threads.0..threads.1`.
    threads: (usize, usize),
    /// Bytes of its packed LHS of all rows, at `region` in the work buffer.
    lhs_size: usize,
    region: usize,
}

/// A mul_mat call's operands as raw parts, the shapes borrowed where the
/// caller keeps them (ggml's tensors, the C ABI's descriptors: read in
/// place, never copied): see [`ThreadedWeights::mul_mat_operands`].
/// The bytes of src1 and dst may be given as [`RawOperands::SPAN`]: the
/// caller vouches for the bytes their `ne`/`nb` span (`ggml_nbytes`), and
/// nothing is computed for them on a replayed call.
#[derive(Clone, Copy, Debug)]
pub struct RawOperands<'a> {
    /// src1: ggml type id, ne, nb, data, bytes (or [`SPAN`](Self::SPAN)).
    pub src1: (u32, &'a [i64; 4], &'a [usize; 4], *const u8, usize),
    /// dst (F32): ne, nb, data, bytes (or [`SPAN`](Self::SPAN)).
    pub dst: (&'a [i64; 4], &'a [usize; 4], *mut u8, usize),
    /// The work buffer: data, bytes.
    pub work: (*mut u8, usize),
    /// ggml's chunks-per-thread factor (4; 1 on NUMA).
    pub multiplier: usize,
}

impl RawOperands<'_> {
    /// As the bytes of src1 or dst: the bytes the tensor's `ne`/`nb` span
    /// (ggml's `ggml_nbytes`), which the caller vouches for. The checks then
    /// use that span, exactly as if it had been given.
    pub const SPAN: usize = usize::MAX;
}

type RawCall<'a> = RawOperands<'a>;

use checked::{Ready, Vouched};

/// The two facts the kernel calls of a mul_mat rely on, each a type made
/// only here: a call's raw operands vouched for ([`Vouched`]: the raw entry
/// points' contract, or borrows), and a kept call ready to run them on this
/// thread ([`Ready`]: its checks passed for them).
mod checked {
    use super::{Error, OnThread, RawCall, Replay, SharedBytes, Tensor, ThreadedWeights, addresses_pass};

    /// A mul_mat call's raw operands whose bytes are valid as
    /// [`mul_mat_raw`](ThreadedWeights::mul_mat_raw) requires (src1
    /// readable and not written, dst and work readable and writable and
    /// used only by the team's threads) for the call it is made for, which
    /// it does not outlive.
    #[derive(Clone, Copy)]
    pub(super) struct Vouched<'a>(RawCall<'a>);

    impl<'a> Vouched<'a> {
        /// `call`'s operands, vouched for.
        ///
        /// # Safety
        /// [`mul_mat_raw`](ThreadedWeights::mul_mat_raw)'s, for `call`'s
        /// pointers and lengths, while the value lives.
        #[inline(always)]
        pub(super) unsafe fn new(call: RawCall<'a>) -> Vouched<'a> {
            Vouched(call)
        }

        /// The operands of a call on borrowed ones: `src1` a slice borrowed
        /// for the call (readable, not written), `dst` and `work` the team's
        /// for the call (SharedBytes' contract; from a slice: an exclusive
        /// borrow).
        #[inline(always)]
        pub(super) fn shared(
            src1: &'a Tensor<'_>,
            dst: (&'a [i64; 4], &'a [usize; 4], &SharedBytes<'_>),
            work: &SharedBytes<'_>,
            multiplier: usize,
        ) -> Vouched<'a> {
            Vouched(RawCall {
                src1: (src1.typ as u32, &src1.ne, &src1.nb, src1.data.as_ptr(), src1.data.len()),
                dst: (dst.0, dst.1, dst.2.ptr.as_ptr(), dst.2.len),
                work: (work.ptr.as_ptr(), work.len),
                multiplier,
            })
        }

        /// The raw operands.
        #[inline(always)]
        pub(super) fn raw(&self) -> &RawCall<'a> {
            &self.0
        }
    }

    /// A kept call ready to run for vouched operands on this thread: its
    /// checks ([`prepare`](ThreadedWeights::prepare)) passed for a call of
    /// the same key on weights of the same class, the operands' addresses
    /// pass [`check_addresses`](super::check_addresses) with the kept
    /// lengths, and its kernel runs on this thread (the proof held).
    /// Made only by [`prepared`](Self::prepared) and
    /// [`replayed`](Self::replayed), which check that; every [`Replay`] is
    /// made by `prepare` for the key it holds.
    pub(super) struct Ready<'r> {
        kept: &'r Replay,
        ok: OnThread<'r>,
        call: &'r Vouched<'r>,
        /// The thread's `(ith, nth)` the key was computed with.
        thread: (usize, usize),
    }

    impl<'r> Ready<'r> {
        /// `call` checked by [`prepare`](ThreadedWeights::prepare), which
        /// keeps it in `kept`: the call ready to run (None: it runs
        /// nothing), or the error with the number of batches its barriers
        /// span.
        #[inline(always)]
        pub(super) fn prepared(
            w: &'r ThreadedWeights,
            call: &'r Vouched<'r>,
            ith: usize,
            nth: usize,
            kept: &'r mut Option<Replay>,
        ) -> Result<Option<Ready<'r>>, (Error, usize)> {
            let key = w.key(call.raw(), ith, nth);
            let ok = w.prepare(key, call.raw(), ith, nth, kept)?;
            let kept: &'r Option<Replay> = kept;
            Ok(kept.as_ref().map(|kept| Ready { kept, ok, call, thread: (ith, nth) }))
        }

        /// The kept call `kept` ready to run again for `call`: its key
        /// equals `call`'s, `call`'s addresses pass with its lengths and its
        /// kernel still runs on this thread (its vector length); None
        /// otherwise.
        #[inline(always)]
        pub(super) fn replayed(
            w: &'r ThreadedWeights,
            kept: &'r Replay,
            call: &'r Vouched<'r>,
            ith: usize,
            nth: usize,
        ) -> Option<Ready<'r>> {
            if kept.key != w.key(call.raw(), ith, nth) || !addresses_pass(call.raw(), kept.lens) {
                return None;
            }
            let ok = w.slots[kept.run.parts[kept.part].slot].kernel(kept.m).still_on_this_thread().ok()?;
            Some(Ready { kept, ok, call, thread: (ith, nth) })
        }

        /// The kept call.
        #[inline(always)]
        pub(super) fn kept(&self) -> &Replay {
            self.kept
        }

        /// The proof its kernel runs on this thread.
        #[inline(always)]
        pub(super) fn on_thread(&self) -> &OnThread<'r> {
            &self.ok
        }

        /// The operands.
        #[inline(always)]
        pub(super) fn call(&self) -> &Vouched<'r> {
            self.call
        }

        /// The thread's `(ith, nth)` in its team.
        #[inline(always)]
        pub(super) fn thread(&self) -> (usize, usize) {
            self.thread
        }
    }
}

/// Everything a mul_mat call's checks depend on but its addresses: two
/// calls with equal keys whose addresses pass [`check_addresses`] pass the
/// same checks (the CPU features are the detected ones, which do not change,
/// less the disabled ones; weights of one [`call_class`] have kernels that
/// check alike).
/// As one array of words, compared in one go (the steady state compares
/// it on every call): weights class, disabled features, src1 (type, ne,
/// nb, address mod 64, bytes), dst (ne, nb, address mod 64, bytes), work
/// (address mod 64, bytes), team (ith, nth, chunk multiplier).
#[derive(Clone, Copy)]
struct CallKey([u64; 28]);

impl PartialEq for CallKey {
    #[inline(always)]
    fn eq(&self, other: &CallKey) -> bool {
        // Branch-free and inline (no call to the C library's bcmp).
        self.0.iter().zip(&other.0).fold(0, |d, (a, b)| d | (a ^ b)) == 0
    }
}

/// A thread's last successful mul_mat call on weights of one class, kept
/// to run again on any weights of that class without its checks but those
/// of the addresses (see `ThreadedWeights::replay`).
#[derive(Clone, Copy)]
struct Replay {
    key: CallKey,
    m: usize,
    batches: usize,
    run: Run,
    /// Index of this thread's part in `run.parts`.
    part: usize,
    /// The LHS rows this thread packs, and where they go in the work buffer.
    rows: (usize, usize),
    pack_at: usize,
    /// Batches per group (`ne[2]`; `batches` counts every group's).
    ne2: usize,
    /// The bytes of src1 and dst the checks used (the call's, or the span
    /// of a [`RawOperands::SPAN`]; equal keys give equal ones).
    lens: (usize, usize),
}

thread_local! {
    static REPLAYS: core::cell::RefCell<[Option<Replay>; 64]> = const { core::cell::RefCell::new([None; 64]) };
}

/// How one mul_mat runs: which layouts, on which threads.
#[derive(Clone, Copy, Debug)]
struct Run {
    /// One layout, or two (hybrid: SME, then non-SME).
    parts: [Part; 2],
    count: usize,
    chunk_cols: usize,
    n_chunks: usize,
    /// ggml's work size: a packed LHS per layout held.
    work: usize,
}

/// Checks an F32 tensor `[ne0, ne1, ne2, 1]` with contiguous rows lies in
/// `len` bytes, rows and batches not overlapping; returns `[ne0, ne1, ne2]`.
pub(super) fn f32_rows(ne: [i64; 4], nb: [usize; 4], len: usize, what: &'static str) -> Result<[usize; 3]> {
    // Every mul_mat checks two tensors: the usual answer first, the
    // error's detail only when it fails.
    match f32_layout(ne, nb) {
        Some((d, end)) if end <= len => Ok(d),
        _ => f32_rows_refused(ne, nb, len, what),
    }
}

/// The sizes `[ne0, ne1, ne2]` and the bytes spanned of an F32 tensor with
/// the layout [`f32_rows`] takes, or None.
fn f32_layout(ne: [i64; 4], nb: [usize; 4]) -> Option<([usize; 3], usize)> {
    match f32_layout4(ne, nb)? {
        ([d0, d1, d2, 1], end) => Some(([d0, d1, d2], end)),
        _ => None,
    }
}

/// The sizes `[ne0, ne1, ne2, ne3]` and the bytes spanned of an F32 tensor
/// with the layout [`f32_rows4`] takes, or None (in plain arithmetic: ne
/// positive, so the casts are exact).
fn f32_layout4(ne: [i64; 4], nb: [usize; 4]) -> Option<([usize; 4], usize)> {
    if ne[0] > 0 && ne[1] > 0 && ne[2] > 0 && ne[3] > 0 && nb[0] == 4 {
        let d = ne.map(|v| v as u64 as usize);
        let row = d[0].checked_mul(4)?;
        let batch = (d[1] - 1).checked_mul(nb[1])?.checked_add(row)?;
        let group = (d[2] - 1).checked_mul(nb[2])?.checked_add(batch)?;
        let end = (d[3] - 1).checked_mul(nb[3])?.checked_add(group)?;
        if (d[1] == 1 || nb[1] >= row) && (d[2] == 1 || nb[2] >= batch) && (d[3] == 1 || nb[3] >= group) {
            return Some((d, end));
        }
    }
    None
}

/// [`f32_rows`] for `[ne0, ne1, ne2, ne3]`: groups of `ne2` batches `nb[3]`
/// bytes apart, not overlapping (ggml's 4-D activations); returns the sizes.
pub(super) fn f32_rows4(ne: [i64; 4], nb: [usize; 4], len: usize, what: &'static str) -> Result<[usize; 4]> {
    match f32_layout4(ne, nb) {
        Some((d, end)) if end <= len => Ok(d),
        _ => f32_rows4_refused(ne, nb, len, what),
    }
}

/// [`f32_rows4`]'s checks one by one, for the error naming the first that fails.
#[cold]
#[inline(never)]
fn f32_rows4_refused(ne: [i64; 4], nb: [usize; 4], len: usize, what: &'static str) -> Result<[usize; 4]> {
    let d = super::tensor::dims(ne, what)?;
    let row = d[0].checked_mul(4);
    let batch = (d[1] - 1).checked_mul(nb[1]).and_then(|v| v.checked_add(row?));
    let group = (d[2] - 1).checked_mul(nb[2]).and_then(|v| v.checked_add(batch?));
    let end = (d[3] - 1).checked_mul(nb[3]).and_then(|v| v.checked_add(group?));
    let (Some(row), Some(batch), Some(group), Some(end)) = (row, batch, group, end) else {
        return Err(Error::Overflow(format!("{what} extent")));
    };
    if nb[0] != 4 || (d[1] > 1 && nb[1] < row) || (d[2] > 1 && nb[2] < batch) || (d[3] > 1 && nb[3] < group) {
        return Err(Error::ShapeMismatch {
            what,
            got: format!("ne {ne:?} nb {nb:?}"),
            want: "F32 with contiguous, non-overlapping rows and batches".into(),
        });
    }
    crate::error::at_least_bytes(len, end, what)?;
    Ok(d)
}

/// [`batch_offset`] of src1 and dst (out of line: batches after the first
/// are rare, and their strides then stay out of the steady state's registers).
#[inline(never)]
fn batch_offsets(b: usize, ne2: usize, src: &[usize; 4], dst: &[usize; 4]) -> (usize, usize) {
    (batch_offset(b, ne2, src), batch_offset(b, ne2, dst))
}

/// Byte offset of batch `b` of a tensor of `ne2` batches per group, its
/// strides `nb` (batches in order `b = i3 * ne2 + i2`; one division only
/// past the first group).
#[inline(always)]
fn batch_offset(b: usize, ne2: usize, nb: &[usize; 4]) -> usize {
    if b < ne2 { b * nb[2] } else { (b % ne2) * nb[2] + (b / ne2) * nb[3] }
}

/// `len`, or for [`RawOperands::SPAN`] the bytes an F32 tensor of `ne`/`nb`
/// spans (0 when it has no layout [`f32_rows`] takes: its checks then name
/// the shape).
fn bytes_of(len: usize, ne: &[i64; 4], nb: &[usize; 4]) -> usize {
    if len != RawOperands::SPAN {
        return len;
    }
    f32_layout4(*ne, *nb).map_or(0, |(_, end)| end)
}

/// [`f32_rows`]'s checks one by one, for the error naming the first that fails.
#[cold]
#[inline(never)]
fn f32_rows_refused(ne: [i64; 4], nb: [usize; 4], len: usize, what: &'static str) -> Result<[usize; 3]> {
    let d = super::tensor::dims(ne, what)?;
    let row = d[0].checked_mul(4);
    let batch = (d[1] - 1).checked_mul(nb[1]).and_then(|v| v.checked_add(row?));
    let end = (d[2] - 1).checked_mul(nb[2]).and_then(|v| v.checked_add(batch?));
    let (Some(row), Some(batch), Some(end)) = (row, batch, end) else {
        return Err(Error::Overflow(format!("{what} extent")));
    };
    if d[3] != 1 || nb[0] != 4 || (d[1] > 1 && nb[1] < row) || (d[2] > 1 && nb[2] < batch) {
        return Err(Error::ShapeMismatch {
            what,
            got: format!("ne {ne:?} nb {nb:?}"),
            want: "3-D F32 with contiguous, non-overlapping rows".into(),
        });
    }
    crate::error::at_least_bytes(len, end, what)?;
    Ok([d[0], d[1], d[2]])
}

/// Whether two byte ranges (address, length) do not overlap (empty ones never do).
fn disjoint(a: (usize, usize), b: (usize, usize)) -> bool {
    a.1 == 0 || b.1 == 0 || a.0.saturating_add(a.1) <= b.0 || b.0.saturating_add(b.1) <= a.0
}

/// The checks of a mul_mat call that read its addresses beyond their
/// alignment: no NULL pointer to bytes read or written, and src1, dst and
/// work disjoint. Every call runs them, a replayed one too (its key holds
/// the addresses' alignment only).
#[inline]
fn check_addresses(call: &RawCall) -> Result<()> {
    // Every call: the answer without building an error.
    if addresses_pass(call, (call.src1.4, call.dst.3)) {
        return Ok(());
    }
    addresses_refused(call)
}

/// Whether [`check_addresses`] passes with src1 and dst of `lens` bytes
/// (the replay's question: no error built).
#[inline(always)]
fn addresses_pass(call: &RawCall, lens: (usize, usize)) -> bool {
    let (p1, pd, (pw, lw)) = (call.src1.3, call.dst.2, call.work);
    let (x, y, w) = ((p1 as usize, lens.0), (pd as usize, lens.1), (pw as usize, lw));
    (x.0 != 0 || x.1 == 0) && y.0 != 0 && (w.0 != 0 || w.1 == 0) && disjoint(x, y) && disjoint(x, w) && disjoint(y, w)
}

/// [`check_addresses`]' conditions one by one, for the error (`Ok` if
/// none fails).
#[cold]
#[inline(never)]
fn addresses_refused(call: &RawCall) -> Result<()> {
    let (_, _, _, p1, l1) = call.src1;
    let (_, _, pd, ld) = call.dst;
    let (pw, lw) = call.work;
    if p1.is_null() && l1 > 0 {
        return Err(Error::Null { what: "src1 data" });
    }
    if pd.is_null() {
        return Err(Error::Null { what: "dst data" });
    }
    if pw.is_null() && lw > 0 {
        return Err(Error::Null { what: "work data" });
    }
    let (x, y, w) = ((p1 as usize, l1), (pd as usize, ld), (pw as usize, lw));
    if !disjoint(x, y) || !disjoint(x, w) || !disjoint(y, w) {
        return Err(Error::InvalidArgument("src1, dst and work overlap".into()));
    }
    Ok(())
}

/// Classes listed for sharing (more get an id of their own, shared with
/// no other weights).
const MAX_CLASSES: usize = 64;

/// A listed class: the type, the SME cap and each slot's kernels.
#[derive(Clone, Copy)]
struct Class {
    typ: GgmlType,
    sme_cap: usize,
    slots: usize,
    kernels: [Option<(PartKernel, Option<PartKernel>)>; crate::weights::file::MAX_SLOTS],
}

/// Where weights keep their last work-size answer: their class's (listed
/// classes) or their own.
#[derive(Debug)]
enum WorkCell {
    Class(&'static core::sync::atomic::AtomicU64),
    Own(core::sync::atomic::AtomicU64),
}

impl WorkCell {
    #[inline]
    fn cell(&self) -> &core::sync::atomic::AtomicU64 {
        match self {
            WorkCell::Class(c) => c,
            WorkCell::Own(c) => c,
        }
    }
}

/// The class of weights of type `typ` with SME cap `sme_cap` resolved to
/// `slots`: a small number, equal for weights whose calls check and run
/// alike (the type, the cap and every slot's kernels equal by
/// [`PartKernel::same_calls`]: the same kernels for the same shape),
/// different otherwise, with the class's work-size cell. It keys the
/// per-thread plan and replay caches, so a call on one weight tensor runs
/// on the checks a call of the same shapes and buffers passed on another
/// tensor of its class (a model's layers have a handful of classes: ggml's
/// prompt makes one call per tensor). The first [`MAX_CLASSES`] classes
/// seen are listed for the life of the process in static memory (no heap
/// allocation: a small block kept among a model's load-time buffers can
/// stop the allocator from returning them); weights of any class after
/// them get an id of their own (no sharing, as before classes) and no cell.
fn call_class(
    typ: GgmlType,
    sme_cap: usize,
    slots: &[PartSlot],
) -> (u64, Option<&'static core::sync::atomic::AtomicU64>) {
    use core::sync::atomic::{AtomicU64, Ordering};
    static CLASSES: std::sync::Mutex<[Option<Class>; MAX_CLASSES]> = std::sync::Mutex::new([None; MAX_CLASSES]);
    static WORK: [AtomicU64; MAX_CLASSES] = [const { AtomicU64::new(0) }; MAX_CLASSES];
    static UNLISTED: AtomicU64 = AtomicU64::new(MAX_CLASSES as u64 + 1);
    let unlisted = || (UNLISTED.fetch_add(1, Ordering::Relaxed), None);
    if slots.len() > crate::weights::file::MAX_SLOTS {
        return unlisted();
    }
    let mut kernels = [None; crate::weights::file::MAX_SLOTS];
    for (k, s) in kernels.iter_mut().zip(slots) {
        *k = Some((*s.gemm(), s.gemv().copied()));
    }
    let same = |a: &PartKernel, b: &PartKernel| a.same_calls(b);
    let alike = |c: &Class| {
        c.typ == typ
            && c.sme_cap == sme_cap
            && c.slots == slots.len()
            && c.kernels.iter().zip(&kernels).all(|(a, b)| match (a, b) {
                (Some((g, v)), Some((h, w))) => {
                    same(g, h)
                        && match (v, w) {
                            (Some(a), Some(b)) => same(a, b),
                            (a, b) => a.is_none() && b.is_none(),
                        }
                }
                (a, b) => a.is_none() && b.is_none(),
            })
    };
    // A panic elsewhere while holding the lock leaves a valid list.
    let mut list = CLASSES.lock().unwrap_or_else(|e| e.into_inner());
    // Entries fill in order: only the listed ones are read (and so
    // touched: the list's untouched pages are never made resident).
    let listed = list.iter().take_while(|c| c.is_some()).count();
    let at = match list[..listed].iter().position(|c| c.as_ref().is_some_and(alike)) {
        Some(at) => at,
        None if listed < MAX_CLASSES => {
            list[listed] = Some(Class { typ, sme_cap, slots: slots.len(), kernels });
            listed
        }
        None => return unlisted(),
    };
    (at as u64 + 1, Some(&WORK[at]))
}

/// Little-endian f32 bytes viewed in place, when 4-byte aligned.
fn f32_view(bytes: &[u8]) -> Option<&[f32]> {
    if !cfg!(target_endian = "little") || bytes.len() % 4 != 0 {
        return None;
    }
    <[f32] as zerocopy::FromBytes>::ref_from_bytes(bytes).ok()
}

pub(super) fn align64(v: usize) -> usize {
    v.div_ceil(64) * 64
}

fn lcm(a: usize, b: usize) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 { a } else { gcd(b, a % b) }
    }
    a / gcd(a, b) * b
}

/// ggml's row split of `m` rows over `threads` threads in multiples of
/// `mr`: thread `i`'s rows (empty when it packs none).
pub(super) fn lhs_rows(m: usize, mr: usize, threads: usize, i: usize) -> Range<usize> {
    let mr = mr.max(1);
    let roundup = m.div_ceil(mr) * mr;
    let use_threads = threads.min(roundup / mr).max(1);
    if i >= use_threads {
        return 0..0;
    }
    let per = roundup / use_threads / mr * mr;
    let start = i * per;
    let end = if i == use_threads - 1 { m } else { start + per };
    start..end.min(m)
}

/// ggml's `get_rows` split of `count` rows over `nth` threads: thread
/// `ith`'s rows (`count / nth` rounded up a thread).
fn get_rows_split(count: usize, ith: usize, nth: usize) -> Range<usize> {
    let per = count.div_ceil(nth.max(1));
    (per * ith).min(count)..(per * ith + per).min(count)
}

impl ThreadedWeights {
    fn ggml_kind(typ: GgmlType) -> Result<(WeightKind, usize)> {
        match typ {
            GgmlType::Q4_0 => Ok((WeightKind::Int4Block, 32)),
            GgmlType::Q8_0 => Ok((WeightKind::Int8PerChannel, 0)),
            GgmlType::F32 => Ok((WeightKind::F32, 0)),
            GgmlType::F16 => Err(Error::Unsupported {
                kernel: "ggml KleidiAI buffer",
                why: "ggml's KleidiAI buffer holds Q4_0, Q8_0 and F32 weights (F16 ones are packed per call)".into(),
            }),
        }
    }

    fn shape(typ: GgmlType, ne: [i64; 4]) -> Result<(usize, usize)> {
        let d = super::tensor::dims(ne, "weights")?;
        if d[2] != 1 || d[3] != 1 {
            return Err(Error::ShapeMismatch {
                what: "weights ne (ggml's KleidiAI buffer takes 2-D weights only)",
                got: format!("{ne:?}"),
                want: "2-D".into(),
            });
        }
        typ.row_bytes(d[0])?;
        Ok((d[0], d[1]))
    }

    /// Bytes [`repack`](Self::repack) writes for weights of type `typ` and
    /// shape `ne`, from the shape alone: the packed payloads the kernels
    /// read, each layout starting 64-byte aligned, and nothing else (what
    /// they are stays in the handle). An error says the weights cannot be
    /// taken here (type, shape, or no kernel for this CPU): leave them to
    /// ggml's own code.
    pub fn packed_size(typ: GgmlType, ne: [i64; 4], sme: SmeSetting) -> Result<usize> {
        let (kind, bl) = Self::ggml_kind(typ)?;
        let (k, n) = Self::shape(typ, ne)?;
        PackedWeights::packed_payload_len(kind, n, k, bl, kernel_table(typ), &sme.features())
    }

    /// Repacks `src0` (contiguous rows) into `out` and returns the handle
    /// viewing it, with its kernels resolved for this CPU: `out` holds only
    /// the packed payloads (the first [`packed_size`](Self::packed_size)
    /// bytes, each layout 64-byte aligned; bytes after them are not
    /// touched), the handle what they are (kernels, shape, layouts,
    /// offsets). The identity of the bytes comes from this call: nothing in
    /// them is parsed.
    ///
    /// `out` must start 64-byte aligned and hold at least `packed_size`
    /// bytes; both are checked (with the type, the shape and that a kernel
    /// runs here) before anything is packed or written. The handle owns `out` and from then on only
    /// reads it: `out`'s `AsRef` must give the bytes its `AsMut` gave, and
    /// they must stay unchanged for as long as the handle lives (true of any
    /// owned buffer such as [`AlignedBuf`](crate::AlignedBuf); for memory
    /// reached through raw pointers, as the C ABI's, it is the caller's
    /// contract). Other bytes there give wrong results, never a read outside
    /// them: every view is bounds-checked.
    pub fn repack<B>(src0: &Tensor<'_>, sme: SmeSetting, mut out: B) -> Result<ThreadedWeights>
    where
        B: AsRef<[u8]> + AsMut<[u8]> + Send + Sync + 'static,
    {
        let (kind, _) = Self::ggml_kind(src0.typ)?;
        let (k, n) = Self::shape(src0.typ, src0.ne)?;
        src0.check("src0")?;
        let size = Self::packed_size(src0.typ, src0.ne, sme)?;
        {
            let dst = out.as_mut();
            if dst.as_ptr() as usize % 64 != 0 {
                return Err(Error::Misaligned { what: "repack destination", align: 64 });
            }
            crate::error::at_least_bytes(dst.len(), size, "repack destination")?;
        }
        let row = src0.typ.row_bytes(k)?;
        let gathered: Vec<u8>;
        let bytes = if src0.nb[1] == row {
            &src0.data[..n * row]
        } else {
            gathered = (0..n).flat_map(|r| &src0.data[r * src0.nb[1]..r * src0.nb[1] + row]).copied().collect();
            &gathered
        };
        let f = sme.features();
        let table = kernel_table(src0.typ);
        let w = match src0.typ {
            GgmlType::Q4_0 => {
                let w = WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: bytes, bias: None }));
                PackedWeights::pack_for_parts(&w, table, &f)?
            }
            GgmlType::Q8_0 => {
                // ggml's rows in place when aligned (they are), else a copy.
                let copied: Vec<BlockQ8_0>;
                let blocks = match super::blocks::q8_0_from_bytes(bytes) {
                    Ok(b) => b,
                    Err(_) => {
                        copied = super::blocks::q8_0_blocks_from_bytes(bytes)?;
                        &copied
                    }
                };
                PackedWeights::pack_for_parts(&WeightsRef::GgmlQ8_0 { n, k, blocks }, table, &f)?
            }
            _ => {
                let copied: Vec<f32>;
                let data = match f32_view(bytes) {
                    Some(d) => d,
                    None => {
                        copied = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                        &copied
                    }
                };
                let w = WeightsRef::F32(FloatWeights { n, k, order: Order::NxK, data, bias: None });
                PackedWeights::pack_for_parts(&w, table, &f)?
            }
        };
        if w.layouts().is_empty() {
            return Err(Error::Unsupported { kernel: "ggml KleidiAI buffer", why: "no kernel runs here".into() });
        }
        if w.layouts().is_empty() {
            return Err(Error::Unsupported { kernel: "ggml KleidiAI buffer", why: "no kernel runs here".into() });
        }
        if w.kind() != kind {
            let (expected, got) = (kind.name(), w.kind().name());
            return Err(Error::ElementType { what: "packed weights of the ggml buffer", expected, got });
        }
        // The payloads move into `out` (checked again there: a kernel that
        // declined these weights may have changed the layouts packed).
        let weights = w.into_caller_memory(out)?;
        let slots = weights.part_slots(&f)?;
        if slots.is_empty() {
            return Err(Error::Unsupported {
                kernel: "ggml KleidiAI buffer",
                why: "no packed layout of these weights runs with the current CPU features".into(),
            });
        }
        let sme_cap = if slots[0].gemm().info().is_sme() { sme.cap() } else { 0 };
        let (class, shared) = call_class(src0.typ, sme_cap, &slots);
        let last_work = shared.map_or_else(|| WorkCell::Own(core::sync::atomic::AtomicU64::new(0)), WorkCell::Class);
        let w = ThreadedWeights {
            class,
            typ: src0.typ,
            k: weights.k(),
            n: weights.n(),
            weights,
            slots,
            sme_cap,
            last_work,
            verified: core::sync::atomic::AtomicU64::new(0),
        };
        // Ahead of the first call (ggml makes one per weights and prompt).
        w.verify();
        Ok(w)
    }

    /// The weight type.
    pub fn typ(&self) -> GgmlType {
        self.typ
    }

    /// `(k, n)`.
    pub fn dims(&self) -> (usize, usize) {
        (self.k, self.n)
    }

    /// The layouts in use, in ggml's slot order: (GEMM kernel, GEMV kernel).
    pub fn layouts(&self) -> Vec<(&'static str, Option<&'static str>)> {
        self.slots.iter().map(|s| (s.gemm().info().name, s.gemv().map(|g| g.info().name))).collect()
    }

    /// [`plan`](Self::plan), remembered per thread for each weight's last
    /// `(m, nth, multiplier)`: ggml asks the same question for every token
    /// (work size, then every thread's part).
    fn cached_plan(&self, m: usize, nth: usize, multiplier: usize) -> Run {
        type Entry = Option<(u64, usize, usize, usize, Run)>;
        thread_local! {
            static PLANS: core::cell::RefCell<[Entry; 64]> = const { core::cell::RefCell::new([None; 64]) };
        }
        // One thread splits nothing: its multiplier is moot (and work_size asks with 1).
        let multiplier = if nth <= 1 { 1 } else { multiplier };
        let key = (self.class, m, nth, multiplier);
        PLANS.with(|p| {
            let mut p = p.borrow_mut();
            let e = &mut p[(self.class % 64) as usize];
            match e {
                Some((id, em, en, emul, run)) if (*id, *em, *en, *emul) == key => *run,
                _ => {
                    let run = self.plan(m, nth, multiplier);
                    *e = Some((self.class, m, nth, multiplier, run));
                    run
                }
            }
        })
    }

    /// How `m` rows on `nth` threads run (ggml's decisions, module docs).
    fn plan(&self, m: usize, nth: usize, multiplier: usize) -> Run {
        let nth = nth.max(1);
        let kern = |i: usize| self.slots[i].kernel(m);
        // ggml's two slots at most (PackedWeights holds up to four layouts).
        let mut sizes = [0usize; crate::weights::file::MAX_SLOTS];
        for (i, s) in sizes.iter_mut().enumerate().take(self.slots.len()) {
            *s = kern(i).lhs_size(m);
        }
        let work = sizes.iter().fold(0, |w, s| if *s > 0 { align64(w) + s } else { w });
        let part =
            |slot: usize, threads: (usize, usize), region: usize| Part { slot, threads, lhs_size: sizes[slot], region };
        let single = |i: usize| ([part(i, (0, nth), 0), Part::default()], 1);
        let (parts, count) = if self.typ == GgmlType::F32 {
            single(0)
        } else {
            let count = self.slots.len();
            let cap = self.sme_cap;
            let sme0 = self.slots[0].gemm().info().is_sme();
            let non_sme = self.slots.iter().position(|s| !s.gemm().info().is_sme());
            let use_hybrid = cap > 0 && count > 1 && nth > cap;
            let too_small = (self.n / nth).max(1) < 2 || m < 128;
            if use_hybrid && !too_small {
                let sme_threads = cap.min(nth);
                ([part(0, (0, sme_threads), 0), part(1, (sme_threads, nth), align64(sizes[0]))], 2)
            } else if too_small && sme0 {
                single(if nth > cap { non_sme.unwrap_or(0) } else { 0 })
            } else if count > 1 && cap > 0 && nth > cap {
                single(1)
            } else {
                single(0)
            }
        };
        let step = parts[..count].iter().fold(1, |s, p| lcm(s, kern(p.slot).n_step().max(1)));
        let divisor = if nth == 1 { 1 } else { nth * multiplier.max(1) };
        let chunk_cols = self.n.div_ceil(divisor).max(1).div_ceil(step) * step;
        let n_chunks = self.n.div_ceil(chunk_cols).max(1);
        Run { parts, count, chunk_cols, n_chunks, work }
    }

    /// The kernel thread `ith` of `nth` runs for `m` rows (for reports).
    pub fn kernel_for(&self, m: usize, ith: usize, nth: usize) -> &'static str {
        let r = self.plan(m.max(1), nth, 4);
        let p = r.parts[..r.count].iter().find(|p| (p.threads.0..p.threads.1).contains(&ith)).unwrap_or(&r.parts[0]);
        self.slots[p.slot].kernel(m.max(1)).info().name
    }

    /// ggml's work size for `m` rows: a 64-byte aligned packed LHS per
    /// layout held (F32 kernels reading the LHS directly need none); the
    /// same for every thread count.
    #[inline]
    pub fn work_size(&self, m: usize) -> Result<usize> {
        let last = self.last_work.cell().load(core::sync::atomic::Ordering::Relaxed);
        if m != 0 && (last >> 32) as usize == m {
            return Ok((last & 0xffff_ffff) as usize);
        }
        // (The only error, m = 0, comes boxed: the answer stays small.)
        self.work_size_planned(m).map_err(|e| *e)
    }

    /// [`work_size`](Self::work_size) from the plan (out of line: ggml
    /// asks again and again for the same `m`, answered by the kept answer).
    #[inline(never)]
    fn work_size_planned(&self, m: usize) -> core::result::Result<usize, Box<Error>> {
        use core::sync::atomic::Ordering::Relaxed;
        crate::error::nonzero(m, "m").map_err(Box::new)?;
        // Through this thread's plan cache: with one thread, ggml's
        // mul_mat that follows on this thread finds the plan there.
        let work = self.cached_plan(m, 1, 1).work;
        if let (Ok(m), Ok(w)) = (u32::try_from(m), u32::try_from(work)) {
            self.last_work.cell().store(u64::from(m) << 32 | u64::from(w), Relaxed);
        }
        Ok(work)
    }

    /// Thread `team.ith()`'s part of ggml `mul_mat`: `dst[b3][b2][i][j] = sum_k
    /// src1[b3][b2][i][k] * w[j][k]`, `src1` F32 `[k, m, ne12, ne13]`, `dst`
    /// F32 `[n, m, ne12, ne13]` described by `dst_ne`/`dst_nb` over `dst` (the
    /// 2-D weights broadcast over both batch dimensions). Every thread
    /// of the team calls it; `work` holds at least [`work_size`](Self::work_size)
    /// bytes. `multiplier` is ggml's chunks-per-thread factor (4; 1 on NUMA).
    ///
    /// Every check happens before the first barrier and gives every thread
    /// the same answer; an error still takes part in all barriers.
    #[allow(clippy::too_many_arguments)] // ggml's operands plus the team's resources
    pub fn mul_mat<T: ThreadTeam>(
        &self,
        src1: &Tensor<'_>,
        dst_ne: [i64; 4],
        dst_nb: [usize; 4],
        dst: &SharedBytes<'_>,
        work: &SharedBytes<'_>,
        team: &T,
        multiplier: usize,
    ) -> Result<()> {
        self.run_call(&Vouched::shared(src1, (&dst_ne, &dst_nb, dst), work, multiplier), team)
    }

    /// [`mul_mat`](Self::mul_mat) for callers holding raw pointers (the C
    /// ABI): `src1` is (ggml type id, ne, nb, data, bytes), `dst` (ne, nb,
    /// data, bytes), `work` (data, bytes). Everything `mul_mat` checks is
    /// checked here, on the raw parts (NULL pointers, overlaps included),
    /// except on a call like this thread's last successful one on weights
    /// of the same class (the same type, shape and kernels: a model's
    /// layers share a handful), with the same shapes, strides, lengths,
    /// address alignments and team: that call runs on the checks the kept
    /// one passed, after checking only its addresses (NULL, overlaps) and
    /// this thread's vector length.
    ///
    /// # Safety
    /// As for the slices `mul_mat` would be given: `src1` readable for its
    /// bytes and not written during the call, `dst` and `work` valid for
    /// reads and writes of their bytes and used only by the team's threads
    /// during the call, every thread of the team calling.
    #[allow(clippy::type_complexity)]
    #[inline]
    pub unsafe fn mul_mat_raw<T: ThreadTeam>(
        &self,
        src1: (u32, [i64; 4], [usize; 4], *const u8, usize),
        dst: ([i64; 4], [usize; 4], *mut u8, usize),
        work: (*mut u8, usize),
        team: &T,
        multiplier: usize,
    ) -> Result<()> {
        let (t1, ne1, nb1, p1, l1) = src1;
        let (ned, nbd, pd, ld) = dst;
        let call = RawCall { src1: (t1, &ne1, &nb1, p1, l1), dst: (&ned, &nbd, pd, ld), work, multiplier };
        // SAFETY: the caller's guarantees are Vouched::new's, for this call.
        self.run_call(&unsafe { Vouched::new(call) }, team)
    }

    /// [`mul_mat_raw`](Self::mul_mat_raw) with the shapes read where the
    /// caller keeps them (the C ABI's path: a call on the steady state
    /// reads each word of its descriptors once, into the comparison with
    /// the kept call's).
    ///
    /// # Safety
    /// [`mul_mat_raw`](Self::mul_mat_raw)'s, for `call`'s pointers.
    #[inline]
    pub unsafe fn mul_mat_operands<T: ThreadTeam>(&self, call: &RawOperands<'_>, team: &T) -> Result<()> {
        // SAFETY: the caller's guarantees are Vouched::new's, for this call.
        self.run_call(&unsafe { Vouched::new(*call) }, team)
    }

    /// The one mul_mat path: this thread's kept call again when `call`'s
    /// key equals its key and `call`'s addresses pass, else the checks
    /// ([`prepare`](Self::prepare)), the run, and the call kept for next
    /// time.
    #[inline(always)]
    fn run_call<T: ThreadTeam>(&self, call: &Vouched<'_>, team: &T) -> Result<()> {
        // The steady state, in this frame: the thread's entry for this
        // class of weights, read in place (a Replay is some 50 words), its
        // key compared with this call's as the words are read (in
        // `Ready::replayed`, after the entry is borrowed, so nothing is
        // read before and kept). (Not inside `REPLAYS.with`: its closure,
        // the whole replay, is not inlined.)
        let replays = REPLAYS.with(|t| t as *const core::cell::RefCell<[Option<Replay>; 64]>);
        // SAFETY: a const-initialised thread-local without destructor
        // lives as long as this thread, and the reference stays in this call.
        let replayed = match &unsafe { &*replays }.borrow()[(self.class % 64) as usize] {
            Some(r) => self.replay(r, call, team),
            None => false,
        };
        if replayed {
            return Ok(());
        }
        // (The error comes boxed: the steady state's answer stays one word.)
        match self.run_checked(call, team) {
            None => Ok(()),
            Some(e) => Err(*e),
        }
    }

    /// [`run_call`](Self::run_call) when no kept call replays: the checks
    /// ([`prepare`](Self::prepare)), the run, and the call kept for next
    /// time (out of line: a handful of calls per graph come here).
    #[inline(never)]
    fn run_checked<T: ThreadTeam>(&self, call: &Vouched<'_>, team: &T) -> Option<Box<Error>> {
        let (ith, nth) = (team.ith(), team.nth());
        REPLAYS.with(|t| {
            let mut t = t.borrow_mut();
            match Ready::prepared(self, call, ith, nth, &mut t[(self.class % 64) as usize]) {
                Ok(ready) => {
                    if let Some(ready) = ready {
                        self.execute(&ready, team);
                    }
                    None
                }
                Err((err, batches)) => {
                    // Every thread takes part in every barrier, even after an error.
                    for b in 0..batches {
                        if ith == 0 {
                            team.chunk_set(if self.typ == GgmlType::F32 { 0 } else { nth });
                        }
                        team.barrier();
                        if b + 1 != batches {
                            team.barrier();
                        }
                    }
                    Some(Box::new(err))
                }
            }
        })
    }

    #[inline(always)]
    fn key(&self, call: &RawCall, ith: usize, nth: usize) -> CallKey {
        let (t1, ne1, nb1, p1, l1) = call.src1;
        let (ned, nbd, pd, ld) = call.dst;
        let w = |v: usize| v as u64;
        let i = |v: i64| v as u64;
        // Addresses by their alignment only (what the checks read of them
        // besides NULL and overlaps, which a replay checks on every call):
        // every alignment a check asks for divides 64. An empty work buffer
        // has no address worth comparing (NULL or dangling).
        let at = |p: usize| p % 64;
        let work_at = if call.work.1 == 0 { 0 } else { at(call.work.0 as usize) };
        CallKey([
            self.class,
            u64::from(crate::cpu::disabled_mask()),
            u64::from(t1),
            i(ne1[0]),
            i(ne1[1]),
            i(ne1[2]),
            i(ne1[3]),
            w(nb1[0]),
            w(nb1[1]),
            w(nb1[2]),
            w(nb1[3]),
            w(at(p1 as usize)),
            w(l1),
            i(ned[0]),
            i(ned[1]),
            i(ned[2]),
            i(ned[3]),
            w(nbd[0]),
            w(nbd[1]),
            w(nbd[2]),
            w(nbd[3]),
            w(at(pd as usize)),
            w(ld),
            w(work_at),
            w(call.work.1),
            w(ith),
            w(nth),
            w(call.multiplier),
        ])
    }

    /// Replays the thread's kept call when `call`'s key equals its key (in
    /// place: a kept call is not copied out of the thread's table).
    fn replay_if_kept<T: ThreadTeam>(&self, call: &Vouched<'_>, team: &T) -> Option<Result<()>> {
        REPLAYS
            .with(|r| match &r.borrow()[(self.class % 64) as usize] {
                Some(e) => self.replay(e, call, team),
                None => false,
            })
            .then_some(Ok(()))
    }

    /// The replay half of [`mul_mat_raw`](Self::mul_mat_raw): runs the
    /// call when its key equals that of this thread's last successful one
    /// on weights of this class and its addresses pass, None otherwise
    /// (nothing run).
    ///
    /// # Safety
    /// [`mul_mat_raw`](Self::mul_mat_raw)'s.
    #[deprecated(since = "0.1.0", note = "use mul_mat_raw: the same replay, and every other call checked and run")]
    #[allow(clippy::type_complexity)]
    pub unsafe fn mul_mat_again<T: ThreadTeam>(
        &self,
        src1: (u32, [i64; 4], [usize; 4], *const u8, usize),
        dst: ([i64; 4], [usize; 4], *mut u8, usize),
        work: (*mut u8, usize),
        team: &T,
        multiplier: usize,
    ) -> Option<Result<()>> {
        let (t1, ne1, nb1, p1, l1) = src1;
        let (ned, nbd, pd, ld) = dst;
        let call = RawCall { src1: (t1, &ne1, &nb1, p1, l1), dst: (&ned, &nbd, pd, ld), work, multiplier };
        // SAFETY: the caller's guarantees are Vouched::new's, for this call.
        self.replay_if_kept(&unsafe { Vouched::new(call) }, team)
    }

    /// `kern.on_this_thread()`, its CPU feature check done once per
    /// disabled-feature mask for all the kernels of these weights.
    fn on_this_thread<'k>(&self, kern: &'k PartKernel) -> Result<OnThread<'k>> {
        if self.verified.load(core::sync::atomic::Ordering::Relaxed) == u64::from(crate::cpu::disabled_mask()) + 1 {
            return kern.still_on_this_thread();
        }
        let ok = kern.on_this_thread()?;
        self.verify();
        Ok(ok)
    }

    /// Records the disabled-feature mask under which every kernel of these
    /// weights is supported, when it is.
    fn verify(&self) {
        let mask = u64::from(crate::cpu::disabled_mask()) + 1;
        // Read after the mask: as many features disabled or more.
        let f = Features::current();
        let mut kernels = self.slots.iter().flat_map(|s| core::iter::once(s.gemm()).chain(s.gemv()));
        if kernels.all(|k| k.info().supported(&f).is_ok()) {
            self.verified.store(mask, core::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Every check of a mul_mat call, on its raw parts, before any barrier
    /// (the same answer on every thread but for the thread's own kernel):
    /// what [`execute`](Self::execute) needs to run it without checks,
    /// stored in `kept` (emptied first: it holds a call only once that call
    /// passed), or the error with the number of batches the call's
    /// barriers span.
    fn prepare(
        &self,
        key: CallKey,
        call: &RawCall,
        ith: usize,
        nth: usize,
        kept: &mut Option<Replay>,
    ) -> core::result::Result<OnThread<'_>, (Error, usize)> {
        *kept = None;
        let (t1, ne1, nb1, p1, l1) = call.src1;
        let (ned, nbd, pd, ld) = call.dst;
        let (pw, lw) = call.work;
        // Spans given as RawOperands::SPAN checked as the bytes they are.
        let (l1, ld) = (bytes_of(l1, ne1, nb1), bytes_of(ld, ned, nbd));
        let call = &RawCall { src1: (t1, ne1, nb1, p1, l1), dst: (ned, nbd, pd, ld), ..*call };
        let shapes = || -> Result<(usize, usize, usize, Run)> {
            if ith >= nth {
                return Err(Error::out_of_range("thread", ith, nth));
            }
            let typ = GgmlType::from_id(t1)?;
            if typ != GgmlType::F32 {
                return Err(Error::ElementType { what: "src1", expected: "F32", got: typ.name() });
            }
            check_addresses(call)?;
            let a = f32_rows4(*ne1, *nb1, l1, "src1")?;
            let o = f32_rows4(*ned, *nbd, ld, "dst")?;
            let (k, n, m) = (self.k, self.n, a[1]);
            if a[0] != k || o != [n, m, a[2], a[3]] {
                return Err(Error::ShapeMismatch {
                    what: "src1 and dst ne",
                    got: format!("src1 {ne1:?}, dst {ned:?}"),
                    want: format!("src1 [{k}, m, b2, b3] and dst [{n}, m, b2, b3] for weights of k = {k}, n = {n}"),
                });
            }
            let run = self.cached_plan(m, nth, call.multiplier);
            crate::error::at_least_bytes(lw, run.work, "work buffer")?;
            let batches = a[2].checked_mul(a[3]).ok_or_else(|| Error::Overflow("src1 batches".into()))?;
            Ok((m, batches, a[2], run))
        };
        let (m, batches, ne2, run) = shapes().map_err(|e| (e, 1))?;
        let fail = |e: Error| (e, batches);
        let index = run.parts[..run.count]
            .iter()
            .position(|p| (p.threads.0..p.threads.1).contains(&ith))
            .ok_or_else(|| fail(Error::out_of_range("thread", ith, nth)))?;
        let part = &run.parts[index];
        let slot = &self.slots[part.slot];
        let kern = slot.kernel(m);
        let ok = self.on_this_thread(kern).map_err(fail)?;
        let rhs_len = slot.rhs().as_bytes().len();
        // The columns: chunks start at multiples of the kernel's column step.
        if run.chunk_cols % kern.n_step().max(1) != 0 {
            let why = format!("not a multiple of {}'s column step {}", kern.info().name, kern.n_step());
            return Err(fail(Error::bad_value("column chunk", run.chunk_cols.to_string(), why)));
        }
        // The output: every chunk's block of every batch, f32 aligned (the
        // extent is f32_rows'); rows of a block do not overlap.
        if pd as usize % 4 != 0 || nbd[1] % 4 != 0 || nbd[2] % 4 != 0 || nbd[3] % 4 != 0 {
            return Err(fail(Error::Misaligned { what: "dst", align: 4 }));
        }
        // This thread's LHS rows: where they are read and packed to.
        let rows = lhs_rows(m, kern.mr(), part.threads.1 - part.threads.0, ith - part.threads.0);
        let mut pack_at = 0;
        if part.lhs_size == 0 {
            // The kernel reads the f32 rows of each batch where they are.
            for b in 0..batches {
                let at = batch_offset(b, ne2, nb1);
                let lhs = ((p1 as usize + at) as *const u8, l1.saturating_sub(at));
                kern.check_operands(m, lhs, nb1[1], rhs_len).map_err(fail)?;
            }
        } else {
            let end = part.region.checked_add(part.lhs_size).filter(|e| *e <= lw);
            let Some(end) = end else {
                return Err(fail(Error::ByteLength {
                    what: "work buffer",
                    got: lw,
                    need: part.region + part.lhs_size,
                }));
            };
            // part.lhs_size is kern.lhs_size(m) (the plan's), what check_operands compares with.
            let lhs = ((pw as usize + part.region) as *const u8, part.lhs_size);
            kern.check_operands_sized(m, lhs, 0, rhs_len, part.lhs_size).map_err(fail)?;
            if !rows.is_empty() {
                let off = part.region + kern.lhs_offset(rows.start);
                let stop = if rows.end == m { end } else { part.region + kern.lhs_offset(rows.end) };
                if off > stop || stop > end {
                    let why = format!("pack outside the {} bytes of {m} rows", part.lhs_size);
                    return Err(fail(Error::bad_value("LHS rows", format!("{rows:?}"), why)));
                }
                let h = rows.len();
                let size_h = if h == m { part.lhs_size } else { kern.lhs_size(h) };
                for b in 0..batches {
                    let at = batch_offset(b, ne2, nb1) + rows.start * nb1[1];
                    let src = ((p1 as usize + at) as *const u8, l1.saturating_sub(at));
                    kern.check_pack(h, src, nb1[1], stop - off, size_h).map_err(fail)?;
                }
                pack_at = off;
            }
        }
        *kept = Some(Replay {
            key,
            m,
            batches,
            run,
            part: index,
            rows: (rows.start, rows.end),
            pack_at,
            ne2,
            lens: (l1, ld),
        });
        Ok(ok)
    }

    /// Runs this thread's kept call `r` again for `call` when their keys
    /// are equal: true, or false when they are not, when `call`'s
    /// addresses fail [`check_addresses`] or when this thread's vector
    /// length changed (nothing run: the full path runs and reports it).
    /// Nothing else is checked again: arguments with equal keys pass the
    /// same checks, on weights of the same class (whose kernels were found
    /// supported as the kept call's were: the features are part of the key).
    #[inline(always)]
    fn replay<T: ThreadTeam>(&self, r: &Replay, call: &Vouched<'_>, team: &T) -> bool {
        let Some(ready) = Ready::replayed(self, r, call, team.ith(), team.nth()) else {
            return false; // the full path reports it
        };
        #[cfg(test)]
        tests::REPLAYED.with(|c| c.set(c.get() + 1));
        self.execute(&ready, team);
        true
    }

    /// Thread `team.ith()`'s part of a call [`Ready`] to run: pack its LHS
    /// rows, barrier, compute the column chunks it claims.
    #[inline(always)]
    fn execute<T: ThreadTeam>(&self, ready: &Ready<'_>, team: &T) {
        // One thread needs neither barriers nor the team's counter: it
        // computes every chunk, in order (its own loop).
        if ready.thread().1 == 1 {
            self.execute_as::<T, true>(ready, team)
        } else {
            self.execute_as::<T, false>(ready, team)
        }
    }

    /// [`execute`](Self::execute) for a team of one thread (`ALONE`, exactly
    /// when `nth == 1`) or more. The thread's `(ith, nth)` are those its
    /// checks ran with (`ready`'s); `team` (the same) synchronises.
    #[inline(always)]
    fn execute_as<T: ThreadTeam, const ALONE: bool>(&self, ready: &Ready<'_>, team: &T) {
        let (r, ok, call) = (ready.kept(), ready.on_thread(), ready.call().raw());
        let (ith, nth) = ready.thread();
        let part = &r.run.parts[r.part];
        let slot = &self.slots[part.slot];
        let kern = ok.kernel(); // `slot.kernel(r.m)` (Ready's construction)
        let f32_scheme = self.typ == GgmlType::F32;
        let rhs = slot.rhs().as_bytes().as_ptr();
        let (n, m, cc) = (self.n, r.m, r.run.chunk_cols);
        let (src, s1, src_nb) = (call.src1.3, call.src1.2[1], call.src1.2);
        let (dst, dst_nb, work) = (call.dst.2, call.dst.1, call.work.0);
        // A team of one is alone (ALONE is the caller's `nth == 1`: one compare).
        let alone = ALONE && nth == 1;
        for b in 0..r.batches {
            // (Batch 0, a call's only one in the steady state, at offset 0.)
            let (at, dst_at) = if b == 0 { (0, 0) } else { batch_offsets(b, r.ne2, src_nb, dst_nb) };
            // (Kernels reading the f32 rows where they are pack nothing.)
            if r.rows.1 > r.rows.0 && part.lhs_size != 0 {
                // SAFETY: `ready` vouches that prepare passed for `r` and a
                // call of `call`'s key, whose bytes are valid (Vouched):
                // its check_pack passed for these rows of every batch
                // (source inside src1, aligned, strided as the packer
                // needs) and their packed bytes lie in this thread's part
                // of the LHS region of work (rows of different threads start
                // at different multiples of mr: disjoint row groups; layouts
                // of a hybrid run have disjoint regions); the barrier below
                // separates this from every read.
                unsafe {
                    kern.pack_rows_unchecked(
                        ok,
                        r.rows.1 - r.rows.0,
                        src.add(at + r.rows.0 * s1),
                        s1,
                        work.add(r.pack_at),
                    )
                };
            }
            if !alone {
                if ith == 0 {
                    team.chunk_set(if f32_scheme { 0 } else { nth });
                }
                team.barrier();
            }
            // Batch b's offset lies inside src1 (f32_rows4, in prepare);
            // region + lhs_size inside work (prepare).
            let (lhs, lhs_stride) = if part.lhs_size == 0 {
                (src.wrapping_add(at), s1)
            } else {
                (work.wrapping_add(part.region).cast_const(), 0)
            };
            let mut next = if alone {
                0
            } else if f32_scheme {
                team.chunk_add(cc) / cc
            } else {
                ith
            };
            while next < r.run.n_chunks {
                let start = next * cc;
                if start >= n {
                    break;
                }
                let cols = start..(start + cc).min(n);
                // SAFETY: `ready` vouches that prepare passed for `r` and a
                // call of `call`'s key, whose bytes are valid (Vouched): the
                // chunk came from the team's counter (or is this thread's
                // first, `ith`, the counter starting at nth; or the thread
                // is alone), so only this thread writes these columns; every
                // column < n of every row and batch lies inside dst
                // (f32_rows4), f32 aligned, rows nb[1] >= 4 n bytes apart
                // (prepare); the chunk starts at a multiple of the kernel's
                // column step and the operands passed check_operands
                // (prepare).
                unsafe {
                    kern.run_cols_unchecked(
                        ok,
                        m,
                        cols,
                        lhs,
                        lhs_stride,
                        rhs,
                        dst.add(dst_at + start * 4).cast(),
                        dst_nb[1],
                    )
                };
                next = if alone {
                    next + 1
                } else if f32_scheme {
                    team.chunk_add(cc) / cc
                } else {
                    team.chunk_add(1)
                };
            }
            if b + 1 != r.batches && !alone {
                team.barrier();
            }
        }
    }

    /// Thread `ith` of `nth`'s rows of ggml `get_rows`: `dst` row `i` (at
    /// `i * row_stride` bytes) = weight row `rows[i]` as f32, for ggml's
    /// share of rows `i` of this thread, from the first layout.
    pub fn get_rows(
        &self,
        rows: &[i32],
        dst: &SharedBytes<'_>,
        row_stride: usize,
        ith: usize,
        nth: usize,
    ) -> Result<()> {
        if ith >= nth {
            return Err(Error::out_of_range("thread", ith, nth));
        }
        let k = self.k;
        if (dst.ptr.as_ptr() as usize) % 4 != 0 {
            return Err(Error::Misaligned { what: "dst", align: 4 });
        }
        if row_stride % 4 != 0 || row_stride < 4 * k {
            return Err(Error::Stride {
                what: "dst",
                stride: row_stride,
                why: format!("do not hold {k} f32 values each"),
            });
        }
        // Written through a view of this thread's rows: each thread its
        // own `ith` (SharedBytes' contract), so its own rows.
        let mut out = TeamWork { bytes: dst, ith, nth, split: 0..dst.len, reading: false };
        for i in get_rows_split(rows.len(), ith, nth) {
            let r = usize::try_from(rows[i]).ok().filter(|r| *r < self.n).ok_or_else(|| Error::OutOfRange {
                what: "row index",
                index: i64::from(rows[i]),
                len: self.n,
            })?;
            let own = Own::Row { count: rows.len(), index: i, stride: row_stride, len: 4 * k };
            let Some((_, bytes)) = out.own_mut(own)? else { continue };
            let mut vals = vec![0f32; k];
            self.weights.row(r, &mut vals)?;
            for (o, v) in bytes.chunks_exact_mut(4).zip(&vals) {
                o.copy_from_slice(&v.to_ne_bytes());
            }
        }
        Ok(())
    }
}

/// src1 of a test's raw mul_mat call ([`ThreadedWeights::raw_test_call`]).
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
pub(super) enum TestSrc<'a> {
    /// A borrowed slice.
    Bytes(&'a [u8]),
    /// NULL, with that many bytes (more than 0).
    Null(usize),
    /// The first bytes of dst, that many (an overlap).
    AtDst(usize),
}

/// dst of a test's raw mul_mat call ([`ThreadedWeights::raw_test_call`]).
#[cfg(test)]
#[derive(Debug)]
pub(super) enum TestDst<'a> {
    /// A borrowed slice.
    Bytes(&'a mut [u8]),
    /// NULL, with that many bytes (more than 0).
    Null(usize),
}

/// Which raw entry point a test calls.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lane {
    /// [`ThreadedWeights::mul_mat_raw`].
    Raw,
    /// [`ThreadedWeights::mul_mat_again`].
    Again,
    /// [`ThreadedWeights::mul_mat_operands`], lengths given (`false`) or as
    /// [`RawOperands::SPAN`] (`true`).
    Operands(bool),
}

#[cfg(test)]
impl ThreadedWeights {
    /// A raw entry point (`lane`) on one thread, its pointers built from
    /// borrows: src1 (F32 `ne`/`nb`) and dst (`dne`/`dnb`) as `src`/`dst`
    /// say, work a slice, ggml's chunk multiplier `multiplier`. None only
    /// from [`Lane::Again`] (nothing replayed). Panics (before any call) on
    /// operands the checks could not refuse safely.
    #[allow(clippy::too_many_arguments)] // a raw call's operands
    pub(super) fn raw_test_call(
        &self,
        lane: Lane,
        (ne, nb, src): ([i64; 4], [usize; 4], TestSrc<'_>),
        (dne, dnb, dst): ([i64; 4], [usize; 4], TestDst<'_>),
        work: &mut [u8],
        multiplier: usize,
    ) -> Option<Result<()>> {
        let span = lane == Lane::Operands(true);
        let (pd, ld) = match dst {
            TestDst::Bytes(d) => (d.as_mut_ptr(), d.len()),
            TestDst::Null(len) => (core::ptr::null_mut(), len),
        };
        let (p1, l1) = match src {
            TestSrc::Bytes(x) => (x.as_ptr(), x.len()),
            TestSrc::Null(len) => (core::ptr::null(), len),
            TestSrc::AtDst(len) => (pd.cast_const(), len),
        };
        // The bytes the calls take: the spans' when given as SPAN.
        let (s1, sd) = if span {
            (bytes_of(RawOperands::SPAN, &ne, &nb), bytes_of(RawOperands::SPAN, &dne, &dnb))
        } else {
            (l1, ld)
        };
        assert!(s1 <= l1 && sd <= ld, "operands beyond their buffers");
        assert!(
            !matches!(src, TestSrc::Null(_) | TestSrc::AtDst(_)) || s1 > 0,
            "a NULL or overlapping src1 without bytes"
        );
        assert!(!pd.is_null() || sd > 0, "a NULL dst without bytes");
        assert!(!matches!(src, TestSrc::AtDst(_)) || (!pd.is_null() && s1 > 0 && sd > 0), "an overlap without bytes");
        let (l1, ld) = if span { (RawOperands::SPAN, RawOperands::SPAN) } else { (l1, ld) };
        let (team, t1, work) = (SingleThread::default(), GgmlType::F32 as u32, (work.as_mut_ptr(), work.len()));
        // SAFETY: src1, dst and work are this call's borrows (or NULL), of
        // at least the bytes passed (asserted), used by this thread alone
        // (a team of one); src1 is a shared borrow none of the mutable ones
        // aliases, or NULL or inside dst with bytes (asserted): refused by
        // check_addresses (a NULL pointer to bytes, an overlap) before
        // anything is read or written, on every lane.
        unsafe {
            match lane {
                Lane::Raw => Some(self.mul_mat_raw((t1, ne, nb, p1, l1), (dne, dnb, pd, ld), work, &team, multiplier)),
                #[allow(deprecated)]
                Lane::Again => self.mul_mat_again((t1, ne, nb, p1, l1), (dne, dnb, pd, ld), work, &team, multiplier),
                Lane::Operands(_) => {
                    let call =
                        RawOperands { src1: (t1, &ne, &nb, p1, l1), dst: (&dne, &dnb, pd, ld), work, multiplier };
                    Some(self.mul_mat_operands(&call, &team))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
