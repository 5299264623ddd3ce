//! What every family's kernel glue shares: support checks, tile parameters,
//! the layout vector length, and the tiled parallel run.
// Off aarch64 only the plan types are used (no kernel runs there).
#![cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]

use crate::buffer::SendPtr;
use crate::cpu::{CpuFeature, Features};
use crate::error::{Error, Result};
use crate::packed::{Clamp, PackedLayout, PackedLhs, PackedRhs};
use crate::par::{self, Parallelism};
use crate::registry::info::KernelInfo;
use core::ffi::c_void;
use core::ops::Range;

/// A kernel's blocking parameters, read from its getters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tiles {
    pub m_step: usize,
    pub n_step: usize,
    pub mr: usize,
    pub nr: usize,
    pub kr: usize,
    pub sr: usize,
}

/// The features in force now as a [`Gate`] for `info`, or why `info`
/// cannot run with them. Every FFI call of a family goes through this first:
/// it is what makes calling an SME getter (which executes SME instructions)
/// sound.
pub(crate) fn ensure_supported(info: &KernelInfo) -> Result<Gate> {
    gate_with(info, &Features::current())
}

/// [`ensure_supported`] with the features `f` instead of those in force: a
/// [`Features`] never claims more than the CPU has (it comes from detection,
/// minus features), so a set that runs `info` proves the CPU does.
pub(crate) fn gate_with(info: &KernelInfo, f: &Features) -> Result<Gate> {
    info.supported(f).map_err(|why| Error::Unsupported { kernel: info.name, why })?;
    Ok(Gate { features: *f })
}

/// Proof that the CPU runs one kernel and its packers now: made only by
/// [`ensure_supported`], which checked the kernel's features (a kernel's
/// features include those of the packers it reads from). Upstream's queries
/// (getters, sizes, offsets, strides: functions of numbers only) are called
/// through it, with [`query!`] and [`Gate::tiles`]; it reads as the
/// [`Features`] it checked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gate {
    features: Features,
}

impl core::ops::Deref for Gate {
    type Target = Features;

    fn deref(&self) -> &Features {
        &self.features
    }
}

/// An upstream query: an `extern "C"` function of integers only (no
/// pointers) returning a `usize`. Calling one reads and writes no memory of
/// ours; what makes it `unsafe` is that it may execute the instructions of
/// its kernel's tier, which the [`Gate`] it takes vouches for, and that
/// upstream divides by its block parameters. Every query's parameters are
/// a dimension or index, then `k`, then block parameters (`mr`/`nr`, `kr`,
/// `sr`, `bl`, a chunk length, a data type); upstream divides by none of the
/// first two (an index or size of 0 is fine) and `call` panics on a zero
/// block parameter (an internal error: the families check their blocking
/// first). A precondition upstream asserts (an index that is not a multiple
/// of the step) aborts in `KAI_ASSUME`, in release builds too.
#[cfg(target_arch = "aarch64")]
pub(crate) trait Query<A> {
    /// Calls the query with `args`.
    fn call(self, gate: &Gate, args: A) -> usize;
}

/// [`Query`] for the function-pointer types of queries of the given
/// integer parameters: the two free ones, then the block parameters.
#[cfg(target_arch = "aarch64")]
macro_rules! impl_query {
    ($( ($($arg:ident: $t:ty),*; $($div:ident: $dt:ty),*) )*) => {$(
        impl Query<($($t,)* $($dt,)*)> for unsafe extern "C" fn($($t,)* $($dt),*) -> usize {
            #[inline]
            fn call(self, _gate: &Gate, ($($arg,)* $($div,)*): ($($t,)* $($dt,)*)) -> usize {
                $(assert!($div != 0, "internal error: an upstream query with a zero block parameter");)*
                // SAFETY: the gate proves the CPU runs the kernel this query
                // belongs to (its callers pass a query of the kernel they
                // gated, or of one of its packers); the parameters are
                // integers, so the query touches no memory of ours; the
                // ones upstream divides by are nonzero (asserted above); a
                // broken precondition aborts upstream (`KAI_ASSUME`).
                unsafe { self($($arg,)* $($div),*) }
            }
        }
    )*};
}

#[cfg(target_arch = "aarch64")]
impl_query! {
    (;)
    (a: usize;)
    (a: usize, b: usize;)
    (a: usize, b: usize; c: usize)
    (a: usize, b: usize; c: usize, d: usize)
    (a: usize, b: usize; c: usize, d: usize, e: usize)
    (a: usize, b: usize; c: usize, d: usize, e: usize, f: usize)
    (a: usize, b: usize; c: usize, d: usize, e: usize, f: usize, g: kleidiai_sys::kai_datatype)
}

/// `query!(gate, f, args...)`: calls upstream query `f` (a function item or
/// pointer of integer parameters returning `usize`) through `gate` (see
/// [`Query`]).
#[cfg(target_arch = "aarch64")]
macro_rules! query {
    (@any $arg:expr) => { _ };
    ($gate:expr, $f:expr $(, $arg:expr)* $(,)?) => {
        $crate::families::engine::Query::call(
            $f as unsafe extern "C" fn($($crate::families::engine::query!(@any $arg)),*) -> usize,
            $gate,
            ($($arg,)*),
        )
    };
}
#[cfg(target_arch = "aarch64")]
pub(crate) use query;

/// The six tile getters of an upstream kernel interface.
#[cfg(target_arch = "aarch64")]
pub(crate) type Getter = unsafe extern "C" fn() -> usize;

#[cfg(target_arch = "aarch64")]
impl Gate {
    /// [`layout`] with the vector length the gated kernel `info` packs for
    /// ([`layout_vector_bytes`]).
    pub(crate) fn layout(
        &self,
        info: &KernelInfo,
        format: &'static str,
        dims: (usize, usize, usize),
        r: usize,
        t: &Tiles,
    ) -> crate::packed::PackedLayout {
        layout(format, dims, r, t, layout_vector_bytes(info, self))
    }

    /// The table upstream's constructor `ctor` fills (one of
    /// `kai_matmul_uker_api`, `kai_matmul_pack_lhs_uker_api`,
    /// `kai_matmul_pack_rhs_uker_api`) for the gated kernel or its packers.
    pub(crate) fn table<T>(&self, ctor: unsafe extern "C" fn() -> T) -> T {
        // SAFETY: a constructor without parameters only fills a table of
        // function pointers; the gate proves the CPU runs the kernel it
        // belongs to (its code is compiled for the kernel's tier).
        unsafe { ctor() }
    }

    /// The blocking parameters the getters `[m_step, n_step, mr, nr, kr,
    /// sr]` of the gated kernel report.
    pub(crate) fn tiles(&self, [m_step, n_step, mr, nr, kr, sr]: [Getter; 6]) -> Tiles {
        let get = |f: Getter| f.call(self, ());
        Tiles { m_step: get(m_step), n_step: get(n_step), mr: get(mr), nr: get(nr), kr: get(kr), sr: get(sr) }
    }
}

/// The layout of a packed operand in `format` of `rows` rows (`r` of them
/// per block: `mr` or `nr` of `t`) for `k` and `bl`, packed for
/// `vector_bytes` ([`layout_vector_bytes`]).
pub(crate) fn layout(
    format: &'static str,
    (rows, k, bl): (usize, usize, usize),
    r: usize,
    t: &Tiles,
    vector_bytes: usize,
) -> crate::packed::PackedLayout {
    crate::packed::PackedLayout { format, rows, k, r, kr: t.kr, sr: t.sr, bl, vector_bytes }
}

/// The vector length a packed layout for `info` depends on: the SME
/// streaming length for SME kernels, the SVE length for SVE kernels, else 0.
pub(crate) fn layout_vector_bytes(info: &KernelInfo, f: &Features) -> usize {
    if info.features.contains(&CpuFeature::Sme) {
        f.sme_vector_bytes().unwrap_or(0)
    } else if info.features.contains(&CpuFeature::Sve) {
        f.sve_vector_bytes().unwrap_or(0)
    } else {
        0
    }
}

/// Runs `tile(rows, cols)` over an `m x n` output cut by [`par::Grid`]
/// (rows in multiples of `m_step`, columns of `n_step`), on up to the workers
/// `par` allows (SME kernels capped by [`par::sme_thread_cap`]).
pub(crate) fn run_grid<F>(par: Parallelism, info: &KernelInfo, m: usize, n: usize, k: usize, t: &Tiles, tile: F)
where
    F: Fn(Range<usize>, Range<usize>) + Sync,
{
    let work = m.saturating_mul(n).saturating_mul(k);
    let workers = par::workers(par, work, info.is_sme());
    let grid = par::Grid::new(m, n, t.m_step, t.n_step, workers);
    par::for_each_index(workers, grid.count(), |i| {
        let (r, c) = grid.get(i);
        tile(r, c)
    });
}

/// `run_matmul` without a block length, writing `D`.
#[cfg(target_arch = "aarch64")]
pub(crate) type RunPlain<D> =
    unsafe extern "C" fn(usize, usize, usize, *const c_void, *const c_void, *mut D, usize, usize, f32, f32);
/// `run_matmul` with the block length after `k`, writing `D`.
#[cfg(target_arch = "aarch64")]
pub(crate) type RunBl<D> =
    unsafe extern "C" fn(usize, usize, usize, usize, *const c_void, *const c_void, *mut D, usize, usize, f32, f32);
/// `run_matmul` of 2-bit weights: f32 output, the 16-entry table last.
#[cfg(target_arch = "aarch64")]
pub(crate) type RunLut = unsafe extern "C" fn(
    usize,
    usize,
    usize,
    *const c_void,
    *const c_void,
    *mut f32,
    usize,
    usize,
    f32,
    f32,
    *const i32,
);

/// A kernel's `run_matmul`, by signature: `(m, n, k, [bl,] lhs,
/// [lhs_stride,] rhs_packed, dst, dst_stride_row, dst_stride_col,
/// clamp_min, clamp_max [, lut])`. Every driver calls it through
/// [`call`](Self::call). `L` is `()` where 2-bit kernels run (the packed
/// driver) and [`NoLut`] elsewhere: there `PlainF32Lut` cannot be built,
/// so the other drivers' dispatch has no case for it (the steady state's,
/// its hot path, compiles to the five-way branch of its own kinds). It is
/// the last variant, so the others keep their tags either way.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy, Debug)]
pub(crate) enum KernelRun<L = NoLut> {
    /// Packed LHS, no block length, untyped output (f16, bf16, or f32).
    Plain(RunPlain<c_void>),
    /// Packed LHS, no block length, f32 output.
    PlainF32(RunPlain<f32>),
    /// Packed LHS, the block length after `k`, untyped output.
    Bl(RunBl<c_void>),
    /// Packed LHS, the block length after `k`, f32 output.
    BlF32(RunBl<f32>),
    /// LHS read directly, rows `lhs_stride` bytes apart.
    Direct(RunDirect),
    /// Packed LHS, no block length, f32 output, the 2-bit weights' table
    /// last.
    PlainF32Lut(RunLut, L),
}

/// The `L` of a [`KernelRun`] that has no 2-bit kernel.
#[cfg(target_arch = "aarch64")]
pub(crate) type NoLut = core::convert::Infallible;

/// The table argument of the drivers whose kernels take none (only
/// [`KernelRun::PlainF32Lut`] reads it).
#[cfg(target_arch = "aarch64")]
const NO_LUT: &[i32; 16] = &[0; 16];

#[cfg(target_arch = "aarch64")]
impl<L: Copy> KernelRun<L> {
    /// One call of the kernel: `m` rows of `lhs` times `n` columns of
    /// `rhs`, `k` deep (blocks of `bl` for the `Bl` kinds, which alone take
    /// it), into `dst`, rows `dst_strides.0` bytes apart and elements
    /// `dst_strides.1` bytes, clamped to `clamp`. `lhs.1` is the row
    /// stride in bytes of a direct LHS (only `Direct` takes it), `lut` the
    /// 2-bit weights' table (only `PlainF32Lut` reads it). The arguments
    /// are passed as they are, in the kernel's order.
    ///
    /// # Safety
    /// The CPU runs the kernel (its features, at the vector length its
    /// operands were packed for) and every rule it assumes of `(m, n, k,
    /// bl)` holds (block rules, `k` limits, one row per call for a
    /// single-row kernel); `lhs.0` is where the call's first row starts in
    /// the kernel's LHS (the packed LHS at its packer's offset of that row,
    /// or, for `Direct`, `m` aligned rows of `k` values `lhs.1` bytes
    /// apart), holding the `m` rows it reads; `rhs` is where the call's
    /// first column (a multiple of `n_step`) starts in the kernel's packed
    /// RHS, holding the `n` columns it reads; `dst` holds `m` rows of `n`
    /// writable elements of the kernel's output type at those strides,
    /// which no one else reads or writes during the call.
    #[inline(always)]
    pub(crate) unsafe fn call(
        &self,
        (m, n, k, bl): (usize, usize, usize, usize),
        (lhs, lhs_stride): (*const c_void, usize),
        rhs: *const c_void,
        (dst, dst_strides): (*mut c_void, (usize, usize)),
        (lo, hi): (f32, f32),
        lut: &[i32; 16],
    ) {
        let (sr, sc) = dst_strides;
        // SAFETY: the caller's contract: the CPU runs the kernel, its rules
        // hold, the operands cover what it reads and writes for these
        // shapes and strides; the table has the 16 entries it reads.
        unsafe {
            match *self {
                KernelRun::Plain(f) => f(m, n, k, lhs, rhs, dst, sr, sc, lo, hi),
                KernelRun::PlainF32(f) => f(m, n, k, lhs, rhs, dst.cast(), sr, sc, lo, hi),
                KernelRun::Bl(f) => f(m, n, k, bl, lhs, rhs, dst, sr, sc, lo, hi),
                KernelRun::BlF32(f) => f(m, n, k, bl, lhs, rhs, dst.cast(), sr, sc, lo, hi),
                KernelRun::Direct(f) => f(m, n, k, lhs, lhs_stride, rhs, dst, sr, sc, lo, hi),
                KernelRun::PlainF32Lut(f, _) => f(m, n, k, lhs, rhs, dst.cast(), sr, sc, lo, hi, lut.as_ptr()),
            }
        }
    }
}

/// `run_matmul` of a kernel that reads a packed LHS and a packed RHS: by
/// signature, or through a table.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) enum PackedRun {
    /// Named functions (any [`KernelRun`] but `Direct`).
    Kernel(KernelRun<()>),
    /// A `kai_matmul_uker_api` table with the clamp flag, and the LHS and
    /// RHS strides of the call (its offsets: [`Offset::TableLhs`],
    /// [`Offset::TableRhs`]).
    Table(uker::Uker, kleidiai_sys::kai_matmul_uker_lhs_stride_args, kleidiai_sys::kai_matmul_uker_rhs_stride_args),
}

#[cfg(target_arch = "aarch64")]
impl From<KernelRun<()>> for PackedRun {
    fn from(run: KernelRun<()>) -> Self {
        PackedRun::Kernel(run)
    }
}

/// Where a tile's rows (or columns) start in a packed operand.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) enum Offset {
    /// The kernel's offset query `(index, k)`.
    K(unsafe extern "C" fn(usize, usize) -> usize),
    /// The kernel's offset query `(index, k, bl)`.
    KBl(unsafe extern "C" fn(usize, usize, usize) -> usize),
    /// Rows this many bytes apart (GEMV kernels whose query takes row 0 only).
    Rows(usize),
    /// A table kernel's LHS offset query with the call's strides.
    TableLhs(uker::Uker, kleidiai_sys::kai_matmul_uker_lhs_stride_args),
    /// A table kernel's RHS offset query with the call's strides.
    TableRhs(uker::Uker, kleidiai_sys::kai_matmul_uker_rhs_stride_args),
}

#[cfg(target_arch = "aarch64")]
impl Offset {
    fn at(self, g: &Gate, index: usize, k: usize, bl: usize) -> usize {
        match self {
            Offset::K(f) => query!(g, f, index, k),
            // bl is nonzero wherever a kernel takes it (its layout checks).
            Offset::KBl(f) => query!(g, f, index, k, bl),
            Offset::Rows(bytes) => index * bytes,
            Offset::TableLhs(u, stride) => u.lhs_offset(index, &stride),
            Offset::TableRhs(u, stride) => u.rhs_offset(index, &stride),
        }
    }
}

/// The functions of a [`PackedKernel`] and how it takes a tile.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) struct PackedFns {
    /// The kernel's run.
    run: PackedRun,
    /// Where row `r` starts in the packed LHS.
    lhs_offset: Offset,
    /// Where column `c` starts in the packed RHS.
    rhs_offset: Offset,
    /// Rows per call: 1 for kernels that take one row at a time, else
    /// `usize::MAX` (the whole tile).
    rows_per_call: usize,
    /// Bytes of an output element.
    out_bytes: usize,
    /// The 16-entry table of 2-bit weights ([`KernelRun::PlainF32Lut`]).
    lut: [i32; 16],
}

#[cfg(target_arch = "aarch64")]
impl PackedFns {
    /// `run` with its LHS and RHS offsets, taking one row per call if
    /// `one_row` (else the whole tile), writing elements of `out_bytes`
    /// bytes.
    pub(crate) fn new(run: impl Into<PackedRun>, offsets: (Offset, Offset), one_row: bool, out_bytes: usize) -> Self {
        let run = run.into();
        let rows_per_call = if one_row { 1 } else { usize::MAX };
        PackedFns { run, lhs_offset: offsets.0, rhs_offset: offsets.1, rows_per_call, out_bytes, lut: [0; 16] }
    }

    /// With the 2-bit weights' table `lut`.
    pub(crate) fn with_lut(self, lut: [i32; 16]) -> Self {
        PackedFns { lut, ..self }
    }
}

/// What [`PackedKernel::run`] needs of a [`PackedKernel`] for one call.
#[cfg(target_arch = "aarch64")]
pub(crate) struct PackedPlan {
    /// The packed-LHS and packed-RHS layouts the kernel reads.
    pub layouts: (PackedLayout, PackedLayout),
    /// Its blocking and the gate of its features.
    pub tiles: (Tiles, Gate),
    /// Its functions.
    pub fns: PackedFns,
}

/// A kernel that reads a packed LHS and a packed RHS, run by
/// [`run`](Self::run).
///
/// # Safety
/// Implementers vouch that the [`PackedPlan`] [`plan`](Self::plan) returns
/// for `(m, n, k, bl)` holds: operands of its layouts are what the kernel
/// reads (at the vector length in force); its tiles are the kernel's
/// blocking and its gate the kernel's; its functions are the kernel's own,
/// whose offsets locate, inside operands of those layouts, every row that
/// starts a tile (a multiple of `m_step`, or any row when it takes one row
/// per call) and every column that starts one (a multiple of `n_step`),
/// writing elements of the size it gives; and that `plan` returns only once
/// everything else the kernel assumes of `(m, n, k, bl)` was checked.
#[cfg(target_arch = "aarch64")]
pub(crate) unsafe trait PackedKernel {
    /// The kernel.
    fn info(&self) -> &KernelInfo;
    /// The plan of a call on `rhs` with `dims = (m, n, k, bl)`, once the
    /// kernel's own rules for them hold.
    fn plan(&self, rhs: &PackedRhs, dims: (usize, usize, usize, usize)) -> Result<PackedPlan>;

    /// `dst = clamp(lhs · wᵀ + bias)`: `lhs` the kernel's packed LHS of `m`
    /// rows, `rhs` its packed weights (`n x k`, blocks of `bl`), `dst`
    /// `m x n` values of its output type, rows `n` apart, the tiles of the
    /// output split over `par`. The one driver of every packed kernel: it
    /// checks the operands against the kernel's plan and makes its calls.
    fn run<O: Copy>(
        &self,
        lhs: &PackedLhs,
        rhs: &PackedRhs,
        dst: &mut [O],
        clamp: Clamp,
        par: Parallelism,
    ) -> Result<()>
    where
        Self: Sized,
    {
        let kern = self;

        clamp.check()?;
        let l = *rhs.layout();
        let (m, n, k, bl) = (lhs.layout().rows, l.rows, l.k, l.bl);
        let name = kern.info().name;
        let PackedPlan { layouts, tiles: (t, g), fns: f } = kern.plan(rhs, (m, n, k, bl))?;
        rhs.expect(&layouts.1, name)?;
        lhs.expect(&layouts.0, name)?;
        crate::error::at_least(dst.len(), crate::error::mul(m, n, "dst")?, "dst")?;
        let es = core::mem::size_of::<O>();
        if f.out_bytes != es {
            return Err(Error::WrongFamily { kernel: name, why: "output type".into() });
        }
        let (lp, rp, dp) = (
            SendPtr(lhs.data().as_ptr() as *mut u8),
            SendPtr(rhs.data().as_ptr() as *mut u8),
            SendPtr(dst.as_mut_ptr()),
        );
        let (f, g) = (&f, &g);
        run_grid(par, kern.info(), m, n, k, &t, |rows, cols| {
            let (lp, rp, dp) = (lp, rp, dp);
            let ro = f.rhs_offset.at(g, cols.start, k, bl);
            let mut r0 = rows.start;
            while r0 < rows.end {
                let r1 = rows.end.min(r0.saturating_add(f.rows_per_call));
                let lo = f.lhs_offset.at(g, r0, k, bl);
                let (h, w, (sr, sc), (lo_v, hi_v)) = (r1 - r0, cols.len(), (n * es, es), (clamp.min, clamp.max));
                // SAFETY: `lhs` and `rhs` have the layouts the kernel reads for
                // (m, n, k, bl) (checked above), so its offsets of a row start
                // (a multiple of m_step: run_grid, or any row for one row per
                // call) and a column start (a multiple of n_step: run_grid) lie
                // inside them and cover the tile; `dst` holds m x n values of
                // the kernel's output size (both checked) and tiles are
                // disjoint; the table has 16 entries; the kernel's other rules
                // passed `plan`, and the CPU runs it (the gate of
                // `tiles`). All of this is `PackedKernel`'s contract.
                unsafe {
                    let (a, b) = (lp.0.add(lo).cast::<c_void>(), rp.0.add(ro).cast::<c_void>());
                    let d = dp.0.add(r0 * n + cols.start).cast::<c_void>();
                    match f.run {
                        PackedRun::Kernel(run) => {
                            run.call((h, w, k, bl), (a, 0), b, (d, (sr, sc)), (lo_v, hi_v), &f.lut)
                        }
                        PackedRun::Table(u, ls, rs) => {
                            let args = uker::Uker::clamped_args(
                                (h, w, k),
                                (a.cast(), ls),
                                (b.cast(), rs),
                                (d.cast(), sr),
                                (&lo_v, &hi_v),
                            );
                            u.run(&args)
                        }
                    }
                }
                r0 = r1;
            }
        });
        Ok(())
    }
}

/// An LHS packer's run with the block length: `(m, k, bl, mr, kr, sr,
/// m_idx_start, lhs, lhs_stride, lhs_packed)`, rows of `S`.
#[cfg(target_arch = "aarch64")]
pub(crate) type PackLhsBl<S> =
    unsafe extern "C" fn(usize, usize, usize, usize, usize, usize, usize, *const S, usize, *mut c_void);
/// An LHS packer's run without the block length: `(m, k, mr, kr, sr,
/// m_idx_start, lhs, lhs_stride, lhs_packed)`, rows of `S`.
#[cfg(target_arch = "aarch64")]
pub(crate) type PackLhsNoBl<S> =
    unsafe extern "C" fn(usize, usize, usize, usize, usize, usize, *const S, usize, *mut c_void);
/// An LHS packer's size or offset query with the block length: `(m or
/// row, k, bl, mr, kr, sr)`.
#[cfg(target_arch = "aarch64")]
pub(crate) type LhsQueryBl = unsafe extern "C" fn(usize, usize, usize, usize, usize, usize) -> usize;
/// An LHS packer's size or offset query without it: `(m or row, k, mr, kr,
/// sr)`.
#[cfg(target_arch = "aarch64")]
pub(crate) type LhsQueryNoBl = unsafe extern "C" fn(usize, usize, usize, usize, usize) -> usize;

/// An LHS packer's run function, by signature.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
enum LhsRun {
    /// With the block length, f32 rows.
    Bl(PackLhsBl<f32>),
    /// With the block length, untyped rows.
    BlUntyped(PackLhsBl<c_void>),
    /// Without it, f32 rows.
    NoBl(PackLhsNoBl<f32>),
    /// Without it, untyped rows.
    NoBlUntyped(PackLhsNoBl<c_void>),
    /// A `kai_matmul_pack_lhs_uker_api` table (its own queries; no block
    /// length, blocking or `m_idx_start`: always 0).
    Api(uker::PackLhs),
}

/// An LHS packer's size and offset queries, by signature.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
enum LhsQueries {
    /// `(m or row, k, bl, mr, kr, sr)`.
    Bl(LhsQueryBl, LhsQueryBl),
    /// `(m or row, k, mr, kr, sr)`.
    NoBl(LhsQueryNoBl, LhsQueryNoBl),
    /// A table's own (`(m or row, k)`).
    Table(uker::PackLhs),
}

/// An LHS packer's blocking `(mr, kr, sr)`: its kernel's.
pub(crate) type Blocking = (usize, usize, usize);

/// An upstream LHS packer: its run, size query and offset query (with the
/// block length exactly when the run takes one), and the bytes of the
/// source elements it reads. Made by its constructors from the three
/// functions of one upstream packer (their callers name them together).
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) struct LhsPacker {
    run: LhsRun,
    queries: LhsQueries,
    elem_bytes: usize,
}

#[cfg(target_arch = "aarch64")]
impl LhsPacker {
    /// A packer of f32 rows with the block length.
    pub(crate) const fn bl(run: PackLhsBl<f32>, size: LhsQueryBl, offset: LhsQueryBl) -> Self {
        LhsPacker { run: LhsRun::Bl(run), queries: LhsQueries::Bl(size, offset), elem_bytes: 4 }
    }

    /// A packer of rows of `elem_bytes`-byte values with the block length.
    pub(crate) const fn bl_untyped(
        run: PackLhsBl<c_void>,
        size: LhsQueryBl,
        offset: LhsQueryBl,
        elem_bytes: usize,
    ) -> Self {
        LhsPacker { run: LhsRun::BlUntyped(run), queries: LhsQueries::Bl(size, offset), elem_bytes }
    }

    /// A packer of f32 rows without the block length.
    pub(crate) const fn no_bl(run: PackLhsNoBl<f32>, size: LhsQueryNoBl, offset: LhsQueryNoBl) -> Self {
        LhsPacker { run: LhsRun::NoBl(run), queries: LhsQueries::NoBl(size, offset), elem_bytes: 4 }
    }

    /// A packer of rows of `elem_bytes`-byte values without the block
    /// length.
    pub(crate) const fn no_bl_untyped(
        run: PackLhsNoBl<c_void>,
        size: LhsQueryNoBl,
        offset: LhsQueryNoBl,
        elem_bytes: usize,
    ) -> Self {
        LhsPacker { run: LhsRun::NoBlUntyped(run), queries: LhsQueries::NoBl(size, offset), elem_bytes }
    }

    /// A table packer (made through the gate of a kernel that reads its
    /// output) of rows of `elem_bytes`-byte values.
    pub(crate) fn api(table: uker::PackLhs, elem_bytes: usize) -> Self {
        LhsPacker { run: LhsRun::Api(table), queries: LhsQueries::Table(table), elem_bytes }
    }

    /// Bytes `m` rows pack to (`bl` ignored by packers without one; `g`
    /// the gate of a kernel that reads the packer's output).
    pub(crate) fn size(&self, g: &Gate, m: usize, k: usize, bl: usize, (mr, kr, sr): Blocking) -> usize {
        match self.queries {
            LhsQueries::Table(t) => t.packed_size(m, k),
            LhsQueries::Bl(f, _) => query!(g, f, m, k, bl, mr, kr, sr),
            LhsQueries::NoBl(f, _) => query!(g, f, m, k, mr, kr, sr),
        }
    }

    /// Where row `row` (its row block) starts in the packed LHS, as
    /// [`size`](Self::size).
    pub(crate) fn offset(&self, g: &Gate, row: usize, k: usize, bl: usize, (mr, kr, sr): Blocking) -> usize {
        match self.queries {
            LhsQueries::Table(t) => t.packed_offset(row, k),
            LhsQueries::Bl(_, f) => query!(g, f, row, k, bl, mr, kr, sr),
            LhsQueries::NoBl(_, f) => query!(g, f, row, k, mr, kr, sr),
        }
    }

    /// Runs the packer on `m` rows of `k` values at `src`, `stride` bytes
    /// apart, the first going to slot `m_idx_start` of the row block `dst`
    /// points to: the one call of every LHS packer.
    ///
    /// # Safety
    /// `src` holds `m` rows of `k` values of the packer's element size
    /// `stride` bytes apart (aligned for them), `dst` the bytes
    /// [`size`](Self::size) gives for `m_idx_start + m` rows; the CPU runs
    /// the packer (the gate of a kernel that reads it), and its blocking
    /// and block length meet its rules (else it aborts in `KAI_ASSUME`, or
    /// divides by zero); `m_idx_start` is 0 for a table packer.
    #[allow(clippy::too_many_arguments)] // the packer's own parameters
    #[inline(always)]
    pub(crate) unsafe fn run<S>(
        &self,
        m: usize,
        k: usize,
        bl: usize,
        (mr, kr, sr): Blocking,
        m_idx_start: usize,
        src: *const S,
        stride: usize,
        dst: *mut u8,
    ) {
        let d = dst.cast::<c_void>();
        // SAFETY: the caller's contract, for this packer's own run function
        // (f32 or untyped rows of the element size it was made with).
        unsafe {
            match self.run {
                LhsRun::Bl(f) => f(m, k, bl, mr, kr, sr, m_idx_start, src.cast(), stride, d),
                LhsRun::BlUntyped(f) => f(m, k, bl, mr, kr, sr, m_idx_start, src.cast(), stride, d),
                LhsRun::NoBl(f) => f(m, k, mr, kr, sr, m_idx_start, src.cast(), stride, d),
                LhsRun::NoBlUntyped(f) => f(m, k, mr, kr, sr, m_idx_start, src.cast(), stride, d),
                LhsRun::Api(t) => {
                    debug_assert_eq!(m_idx_start, 0);
                    t.run(&t.args(m, k, src.cast(), stride, dst))
                }
            }
        }
    }

    /// Packs `m` rows of `k` values at the start of `src` (bytes, rows
    /// `stride` bytes apart) into the start of `dst` (`m_idx_start` 0):
    /// one checked call. Checks `m` and `k` are nonzero, `src` is aligned
    /// for the packer's elements, `stride` holds `k` of them (a multiple of
    /// their size), the rows lie inside `src` and `dst` holds the packer's
    /// size for `m` rows. The caller has checked the packer's rules on the
    /// blocking and block length.
    #[allow(clippy::too_many_arguments)] // the packer's own parameters
    pub(crate) fn pack_bytes(
        &self,
        g: &Gate,
        (m, k, bl): (usize, usize, usize),
        blocking: Blocking,
        src: &[u8],
        stride: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        use crate::error;
        error::nonzero(m, "LHS rows")?;
        error::nonzero(k, "k")?;
        let eb = self.elem_bytes;
        if (src.as_ptr() as usize) % eb != 0 {
            return Err(Error::Misaligned { what: "LHS rows", align: eb });
        }
        let row = error::mul(k, eb, "LHS rows")?;
        if stride % eb != 0 || stride < row {
            return Err(Error::Stride { what: "LHS rows", stride, why: format!("do not hold {k} values each") });
        }
        let need = (m - 1).checked_mul(stride).and_then(|v| v.checked_add(row));
        error::at_least_bytes(src.len(), need.ok_or_else(|| Error::Overflow("LHS rows".into()))?, "LHS rows")?;
        // The size query asserts the block parameters are nonzero.
        error::at_least_bytes(dst.len(), self.size(g, m, k, bl, blocking), "packed LHS part")?;
        // SAFETY: `src` holds `m` rows of `k` aligned values of the packer's
        // size `stride` bytes apart and `dst` the packer's size for `m` rows
        // (all checked above); the gate proves the CPU runs the packer,
        // whose rules the caller checked.
        unsafe { self.run(m, k, bl, blocking, 0, src.as_ptr(), stride, dst.as_mut_ptr()) };
        Ok(())
    }

    /// Checks that rows of `S` are what the packer reads (its element size,
    /// and aligned for it).
    pub(crate) fn check_elem<S>(&self, kernel: &'static str) -> Result<()> {
        let (size, align) = (core::mem::size_of::<S>(), core::mem::align_of::<S>());
        if size != self.elem_bytes || align < self.elem_bytes.min(4) {
            return Err(Error::WrongFamily { kernel, why: "element type".into() });
        }
        Ok(())
    }
}

/// `name = ctor(packer)` for each upstream LHS packer `kai_lhs_*<packer>`:
/// an [`LhsPacker`] constant from its run, size and offset functions.
#[cfg(target_arch = "aarch64")]
macro_rules! lhs_packers {
    ($($(#[$doc:meta])* $name:ident = $ctor:ident($run:ident, $size:ident, $offset:ident $(, $eb:expr)?);)*) => {$(
        $(#[$doc])*
        pub(crate) const $name: LhsPacker =
            LhsPacker::$ctor(kleidiai_sys::$run, kleidiai_sys::$size, kleidiai_sys::$offset $(, $eb)?);
    )*};
}

/// The upstream LHS packers the families use.
#[cfg(target_arch = "aarch64")]
pub(crate) mod lhs_packers {
    use super::LhsPacker;

    #[rustfmt::skip]
    lhs_packers! {
        /// `kai_lhs_quant_pack_qai8dxp_f32`.
        QAI8DXP_F32 = no_bl(kai_run_lhs_quant_pack_qai8dxp_f32, kai_get_lhs_packed_size_lhs_quant_pack_qai8dxp_f32, kai_get_lhs_packed_offset_lhs_quant_pack_qai8dxp_f32);
        /// `kai_lhs_quant_pack_qai8dxp_f16_neon`.
        QAI8DXP_F16 = no_bl_untyped(kai_run_lhs_quant_pack_qai8dxp_f16_neon, kai_get_lhs_packed_size_lhs_quant_pack_qai8dxp_f16_neon, kai_get_lhs_packed_offset_lhs_quant_pack_qai8dxp_f16_neon, 2);
        /// `kai_lhs_quant_pack_qai8dxp_bf16_neon`.
        QAI8DXP_BF16 = no_bl_untyped(kai_run_lhs_quant_pack_qai8dxp_bf16_neon, kai_get_lhs_packed_size_lhs_quant_pack_qai8dxp_bf16_neon, kai_get_lhs_packed_offset_lhs_quant_pack_qai8dxp_bf16_neon, 2);
        /// `kai_lhs_pack_f32p2vlx1_f32_sme`.
        F32P2VLX1_SME = no_bl_untyped(kai_run_lhs_pack_f32p2vlx1_f32_sme, kai_get_lhs_packed_size_lhs_pack_f32p2vlx1_f32_sme, kai_get_lhs_packed_offset_lhs_pack_f32p2vlx1_f32_sme, 4);
        /// `kai_lhs_pack_x16p2vlx2_x16_sme`.
        X16P2VLX2_SME = no_bl_untyped(kai_run_lhs_pack_x16p2vlx2_x16_sme, kai_get_lhs_packed_size_lhs_pack_x16p2vlx2_x16_sme, kai_get_lhs_packed_offset_lhs_pack_x16p2vlx2_x16_sme, 2);
        /// `kai_lhs_quant_pack_bf16p1x4_f32_neon`.
        BF16P1X4_F32 = no_bl_untyped(kai_run_lhs_quant_pack_bf16p1x4_f32_neon, kai_get_lhs_packed_size_lhs_quant_pack_bf16p1x4_f32_neon, kai_get_lhs_packed_offset_lhs_quant_pack_bf16p1x4_f32_neon, 4);
        /// `kai_lhs_quant_pack_bf16p8x4_f32_neon`.
        BF16P8X4_F32 = no_bl_untyped(kai_run_lhs_quant_pack_bf16p8x4_f32_neon, kai_get_lhs_packed_size_lhs_quant_pack_bf16p8x4_f32_neon, kai_get_lhs_packed_offset_lhs_quant_pack_bf16p8x4_f32_neon, 4);
        /// `kai_lhs_pack_bf16p8x4_f16_neon`.
        BF16P8X4_F16 = no_bl_untyped(kai_run_lhs_pack_bf16p8x4_f16_neon, kai_get_lhs_packed_size_lhs_pack_bf16p8x4_f16_neon, kai_get_lhs_packed_offset_lhs_pack_bf16p8x4_f16_neon, 2);
        /// `kai_lhs_pack_bf16p2vlx2_f32_sme`.
        BF16P2VLX2_SME = no_bl_untyped(kai_run_lhs_pack_bf16p2vlx2_f32_sme, kai_get_lhs_packed_size_lhs_pack_bf16p2vlx2_f32_sme, kai_get_lhs_packed_offset_lhs_pack_bf16p2vlx2_f32_sme, 4);
        /// `kai_lhs_pack_bf16p2vlx2_f32_sme2`.
        BF16P2VLX2_SME2 = no_bl_untyped(kai_run_lhs_pack_bf16p2vlx2_f32_sme2, kai_get_lhs_packed_size_lhs_pack_bf16p2vlx2_f32_sme2, kai_get_lhs_packed_offset_lhs_pack_bf16p2vlx2_f32_sme2, 4);
        /// `kai_lhs_quant_pack_qsi8d32pscalef32_f32_neon`.
        QSI8D32PSCALEF32_F32 = bl(kai_run_lhs_quant_pack_qsi8d32pscalef32_f32_neon, kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32pscalef32_f32_neon, kai_get_lhs_packed_offset_lhs_quant_pack_qsi8d32pscalef32_f32_neon);
        /// `kai_lhs_quant_pack_qsi8d32pscalef32_f16_neon`.
        QSI8D32PSCALEF32_F16 = bl_untyped(kai_run_lhs_quant_pack_qsi8d32pscalef32_f16_neon, kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32pscalef32_f16_neon, kai_get_lhs_packed_offset_lhs_quant_pack_qsi8d32pscalef32_f16_neon, 2);
        /// `kai_lhs_quant_pack_qsi8d32p_f32`.
        QSI8D32P_F32 = bl(kai_run_lhs_quant_pack_qsi8d32p_f32, kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p_f32, kai_get_lhs_packed_offset_lhs_quant_pack_qsi8d32p_f32);
        /// `kai_lhs_quant_pack_qsi8d32p_f32_neon`.
        QSI8D32P_F32_NEON = bl(kai_run_lhs_quant_pack_qsi8d32p_f32_neon, kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p_f32_neon, kai_get_lhs_packed_offset_lhs_quant_pack_qsi8d32p_f32_neon);
        /// `kai_lhs_quant_pack_qsi8d32p4x8sb_f32_neon`.
        QSI8D32P4X8SB_F32 = bl(kai_run_lhs_quant_pack_qsi8d32p4x8sb_f32_neon, kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p4x8sb_f32_neon, kai_get_lhs_packed_offset_lhs_quant_pack_qsi8d32p4x8sb_f32_neon);
        /// `kai_lhs_pack_x8p2vlx4_x8_sme`.
        X8P2VLX4_SME = no_bl_untyped(kai_run_lhs_pack_x8p2vlx4_x8_sme, kai_get_lhs_packed_size_lhs_pack_x8p2vlx4_x8_sme, kai_get_lhs_packed_offset_lhs_pack_x8p2vlx4_x8_sme, 1);
        /// `kai_lhs_pack_f16pmrx2_f32_neon` (f32 rows).
        F16PMRX2_F32 = bl_untyped(kai_run_lhs_pack_f16pmrx2_f32_neon, kai_get_lhs_packed_size_lhs_pack_f16pmrx2_f32_neon, kai_get_lhs_packed_offset_lhs_pack_f16pmrx2_f32_neon, 4);
    }
}

/// An `m x k` LHS to pack: rows `stride` elements of `src` apart, in blocks
/// of `bl` (for packers that take it), packed with `blocking`.
#[cfg(target_arch = "aarch64")]
pub(crate) struct LhsSource<'a, S> {
    pub src: &'a [S],
    pub stride: usize,
    pub m: usize,
    pub k: usize,
    pub bl: usize,
    pub blocking: Blocking,
}

/// How [`pack_lhs`] calls a packer.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum LhsCalls {
    /// Once per range of row blocks.
    Blocks,
    /// Once per row (a packer whose multi-row path is wrong).
    RowByRow,
    /// Once per row, each row a copy zero-padded to this many values (at
    /// least `k`; the packer then packs that many), row blocks the
    /// packer's size of one block apart (for a GEMV packer whose offset
    /// query takes row 0 only).
    RowByRowPadded(usize),
}

/// Packs `x` with `p` into `dst` (the packer's layout from its offset 0),
/// the row blocks split over `par`, for the kernel `info` whose gate `g`
/// is, calling the packer as `calls` says: the one checked driver of the
/// LHS packers. Checks the element type ([`LhsPacker::check_elem`]), that
/// the rows lie inside the source ([`check_lhs_rows`]) and that `dst` holds
/// the packer's size for `m` rows; every call's destination lies inside it
/// (the packer's own offset and size, asserted). The caller has checked
/// the packer's rules on the blocking and block length, and any CPU
/// feature the packer needs beyond its kernel's.
#[cfg(target_arch = "aarch64")]
pub(crate) fn pack_lhs<S: Copy + Default + Sync>(
    g: &Gate,
    info: &KernelInfo,
    p: &LhsPacker,
    x: LhsSource<'_, S>,
    calls: LhsCalls,
    dst: &mut [u8],
    par: Parallelism,
) -> Result<()> {
    use crate::error;
    let LhsSource { src, stride, m, k, bl, blocking } = x;
    p.check_elem::<S>(info.name)?;
    check_lhs_rows(m, k, src.len(), stride)?;
    let stride_bytes = error::mul(stride, p.elem_bytes, "lhs stride")?;
    if matches!(p.run, LhsRun::Api(_)) && calls != LhsCalls::Blocks {
        return Err(Error::bad_value("LHS packing", "row by row", "a table packer packs row blocks"));
    }
    let (kc, row_by_row) = match calls {
        LhsCalls::Blocks => (k, false),
        LhsCalls::RowByRow => (k, true),
        LhsCalls::RowByRowPadded(kp) => (kp.max(k), true),
    };
    let mr = blocking.0;
    // The size query asserts the block parameters are nonzero.
    error::at_least(dst.len(), p.size(g, m, kc, bl, blocking), "packed lhs")?;
    let len = dst.len();
    let block = p.size(g, mr, kc, bl, blocking);
    let dp = SendPtr(dst.as_mut_ptr());
    run_rows(par, info, m, k, mr, |rows| {
        let d = dp; // the whole `SendPtr` (`Send`), not its pointer field
        let (pieces, height) = if row_by_row { (rows.len(), 1) } else { (1, rows.len()) };
        let mut padded = if kc == k { Vec::new() } else { vec![S::default(); kc] };
        for piece in 0..pieces {
            let first = rows.start + piece * height;
            // Rows first..first + height lie inside `src` (check_lhs_rows:
            // first + height <= m); a padded row is one row.
            let rows_src = &src[first * stride..];
            let s = if padded.is_empty() {
                rows_src.as_ptr()
            } else {
                padded[..k].copy_from_slice(&rows_src[..k]);
                padded.as_ptr()
            };
            let off = match calls {
                LhsCalls::RowByRowPadded(_) => (first / mr).checked_mul(block),
                _ => Some(p.offset(g, first, kc, bl, blocking)),
            };
            let off = off.unwrap_or(usize::MAX);
            let end = off.checked_add(p.size(g, first % mr + height, kc, bl, blocking));
            assert!(end.is_some_and(|e| e <= len), "internal error: an LHS packer writes past its size");
            // SAFETY: `rows` starts at a multiple of mr (run_rows), so the
            // row blocks of its rows are written by this range only; `first`
            // goes to slot first % mr of the block its offset points to,
            // whose bytes for first % mr + height rows lie inside `dst`
            // (asserted); `s` holds `height` rows of `kc` values `stride`
            // apart (of `src`: check_lhs_rows, or the padded copy), of the
            // packer's element type (check_elem); the gate proves the CPU
            // runs the packer, whose rules the caller checked.
            unsafe { p.run(height, kc, bl, blocking, first % mr, s, stride_bytes, d.0.add(off)) };
        }
    });
    Ok(())
}

/// An RHS packer's size query `(n, k, nr, kr, sr)`.
#[cfg(target_arch = "aarch64")]
pub(crate) type RhsSizeNkBlocks = unsafe extern "C" fn(usize, usize, usize, usize, usize) -> usize;
/// The run of an RHS packer of per-channel quantised weights: `(num_groups,
/// n, k, nr, kr, sr, rhs, bias, scale, rhs_packed, extra_bytes, params)`.
#[cfg(target_arch = "aarch64")]
#[rustfmt::skip]
pub(crate) type PackChannel<V, P> =
    unsafe extern "C" fn(usize, usize, usize, usize, usize, usize, *const V, *const f32, *const f32, *mut c_void, usize, *const P);
/// [`PackChannel`] of the 2-bit packers, with their 4-entry table last.
#[cfg(target_arch = "aarch64")]
#[rustfmt::skip]
pub(crate) type PackChannelLut = unsafe extern "C" fn(
    usize, usize, usize, usize, usize, usize, *const u8, *const f32, *const f32, *mut c_void, usize,
    *const kleidiai_sys::kai_rhs_pack_qs4cxs1s0_param, *const i32,
);

/// Per-channel quantised weights with what their packer takes besides.
#[cfg(target_arch = "aarch64")]
pub(crate) enum ChannelWeights<'a> {
    /// int4 weights, read by an int4 packer of their order.
    Int4(
        &'a crate::formats::Int4PerChannel<'a>,
        PackChannel<u8, kleidiai_sys::kai_rhs_pack_qs4cxs1s0_param>,
        kleidiai_sys::kai_rhs_pack_qs4cxs1s0_param,
    ),
    /// int8 weights, read by an int8 packer of their order.
    Int8(
        &'a crate::formats::Int8PerChannel<'a>,
        PackChannel<i8, kleidiai_sys::kai_rhs_pack_qsi8cx_params>,
        kleidiai_sys::kai_rhs_pack_qsi8cx_params,
    ),
    /// 2-bit weights (N x K) with the packer's table (4 entries, then
    /// zeros).
    UInt2(
        &'a crate::formats::UInt2PerChannel<'a>,
        PackChannelLut,
        kleidiai_sys::kai_rhs_pack_qs4cxs1s0_param,
        [i32; 16],
    ),
}

/// Packs per-channel quantised weights `w` (one group, no extra bytes) with
/// blocking `(nr, kr, sr)` into a new zeroed buffer of the packer's size
/// (its query `size`) plus `tail` bytes after it: the one checked call of
/// these packers. Checks the weights (`validate`: their data, scales and
/// bias hold what `n`, `k` and their order need), the order the packer
/// reads (`order` for int4 and int8, N x K for 2 bits) and, for 2 bits,
/// `k % 32 == 0` (the packers load 8 bytes of a row at a time). The caller
/// has checked the packer's rules on the blocking (its `KAI_ASSUME`s).
#[cfg(target_arch = "aarch64")]
pub(crate) fn pack_rhs_per_channel(
    g: &Gate,
    size: RhsSizeNkBlocks,
    w: ChannelWeights<'_>,
    order: crate::formats::Order,
    (nr, kr, sr): Blocking,
    tail: usize,
) -> Result<crate::buffer::AlignedBuf> {
    use crate::formats::Order;
    let (n, k, w_order) = match &w {
        ChannelWeights::Int4(w, ..) => (w.n, w.k, w.order),
        ChannelWeights::Int8(w, ..) => (w.n, w.k, w.order),
        ChannelWeights::UInt2(w, ..) => (w.n, w.k, Order::NxK),
    };
    match &w {
        ChannelWeights::Int4(w, ..) => w.validate()?,
        ChannelWeights::Int8(w, ..) => w.validate()?,
        ChannelWeights::UInt2(w, ..) => {
            w.validate()?;
            crate::error::multiple_of(k, 32, "k", "2-bit packers and kernels")?;
        }
    }
    if w_order != order {
        return Err(Error::bad_value("weight order", format!("{w_order:?}"), format!("the packer reads {order:?}")));
    }
    let bytes = query!(g, size, n, k, nr, kr, sr);
    let total = bytes.checked_add(tail).ok_or_else(|| Error::Overflow("packed rhs".into()))?;
    let mut buf = crate::buffer::AlignedBuf::zeroed(total);
    RhsCall::Channel { w, blocking: (nr, kr, sr), dst: buf.as_mut_slice() }.invoke();
    Ok(buf)
}

/// The run of an RHS packer of float weights: `(num_groups, n, k, nr, kr,
/// sr, rhs_stride, rhs, bias, scale, rhs_packed, extra_bytes, params)`.
#[cfg(target_arch = "aarch64")]
#[rustfmt::skip]
pub(crate) type PackFloat = unsafe extern "C" fn(
    usize, usize, usize, usize, usize, usize, usize,
    *const c_void, *const c_void, *const c_void, *mut c_void, usize, *const c_void,
);

/// An RHS packer of float weights' size query, by signature.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) enum FloatRhsSize {
    /// `(n, k)`.
    Nk(unsafe extern "C" fn(usize, usize) -> usize),
    /// `(n, k, nr, kr)`.
    NkNrKr(unsafe extern "C" fn(usize, usize, usize, usize) -> usize),
}

/// An RHS packer of float weights: its run and size query, the order and
/// the bytes of the weights it reads, the bytes of its bias and whether it
/// reads one always (else a null bias means zero). Its callers name these
/// together, from upstream's packer.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) struct FloatRhsPacker {
    pub run: PackFloat,
    pub size: FloatRhsSize,
    pub order: crate::formats::Order,
    pub elem_bytes: usize,
    pub bias_bytes: usize,
    pub bias_required: bool,
}

#[cfg(target_arch = "aarch64")]
impl FloatRhsPacker {
    /// Packs `n x k` weights `data` (in the packer's order, rows `stride`
    /// bytes apart) and `bias` (`n` values, or none) with blocking `(nr,
    /// kr, sr)` into `dst` (one group, no scale, extra bytes or params):
    /// the one checked call of these packers. Checks `n` and `k` are
    /// nonzero, the element sizes are the packer's, the rows lie inside
    /// `data`, the bias (when the packer requires one: there is one) holds
    /// `n` values and `dst` the packer's size (its query, through the gate
    /// `g` of a kernel that reads its output). The caller has checked the
    /// packer's rules on the blocking and any CPU feature it needs beyond
    /// the kernel's.
    #[allow(clippy::too_many_arguments)] // the packer's operands
    pub(crate) fn pack<T, B>(
        &self,
        g: &Gate,
        (n, k): (usize, usize),
        (nr, kr, sr): Blocking,
        data: &[T],
        stride: usize,
        bias: Option<&[B]>,
        dst: &mut [u8],
    ) -> Result<()> {
        use crate::error;
        use crate::formats::Order;
        error::nonzero(n, "n")?;
        error::nonzero(k, "k")?;
        let (eb, bb) = (core::mem::size_of::<T>(), core::mem::size_of::<B>());
        if eb != self.elem_bytes || bias.is_some() && bb != self.bias_bytes {
            return Err(Error::bad_value("element type", eb, "not the packer's"));
        }
        let (rows, cols) = if self.order == Order::NxK { (n, k) } else { (k, n) };
        let row = error::mul(cols, eb, "rhs")?;
        if stride < row {
            return Err(Error::Stride { what: "weights", stride, why: format!("do not hold {cols} values each") });
        }
        let need = (rows - 1).checked_mul(stride).and_then(|v| v.checked_add(row));
        error::at_least_bytes(data.len() * eb, need.ok_or_else(|| Error::Overflow("rhs".into()))?, "weights")?;
        match bias {
            Some(b) => error::at_least(b.len(), n, "bias")?,
            None if self.bias_required => return Err(Error::bad_value("bias", "none", "the packer reads one")),
            None => {}
        }
        let size = match self.size {
            FloatRhsSize::Nk(f) => query!(g, f, n, k),
            FloatRhsSize::NkNrKr(f) => query!(g, f, n, k, nr, kr),
        };
        error::at_least_bytes(dst.len(), size, "packed rhs")?;
        let (data, bias) = ((Lent::of(data), stride), Lent::or_null(bias));
        RhsCall::Float { run: self.run, dims: (n, k), blocking: (nr, kr, sr), data, bias, dst }.invoke();
        Ok(())
    }
}

/// An RHS packer of int4 weights in blocks with bf16 scales: `(num_groups,
/// n, k, nr, kr, sr, bl, rhs, rhs_stride, bias, scale, scale_stride,
/// rhs_packed, extra_bytes, params)`.
#[cfg(target_arch = "aarch64")]
#[rustfmt::skip]
pub(crate) type PackQsu4<P> = unsafe extern "C" fn(
    usize, usize, usize, usize, usize, usize, usize, *const u8, usize,
    *const f32, *const c_void, usize, *mut c_void, usize, *const P,
);
/// An RHS packer of `qsu4c32s16s0` rows (each block its f16 scale, then its
/// nibbles): `(num_groups, n, k, nr, kr, sr, bl, rhs, bias, rhs_packed,
/// extra_bytes, params)`.
#[cfg(target_arch = "aarch64")]
#[rustfmt::skip]
pub(crate) type PackS16s0 = unsafe extern "C" fn(
    usize, usize, usize, usize, usize, usize, usize, *const u8, *const f32, *mut c_void, usize,
    *const kleidiai_sys::kai_rhs_pack_qs4cxs1s0_param,
);
/// An RHS packer of asymmetric int4 weights in blocks (f32 scales and zero
/// points): `(num_groups, n, k, nr, kr, sr, bl, rhs, zero, bias, scale,
/// rhs_packed, extra_bytes, params)`.
#[cfg(target_arch = "aarch64")]
#[rustfmt::skip]
pub(crate) type PackQai4 = unsafe extern "C" fn(
    usize, usize, usize, usize, usize, usize, usize, *const u8, *const c_void, *const c_void, *const c_void,
    *mut c_void, usize, *const kleidiai_sys::kai_rhs_pack_qs4cxs1s0_param,
);
/// The size query `(n, k, nr, kr, sr, bl, scale type)` of a [`PackQsu4`].
#[cfg(target_arch = "aarch64")]
pub(crate) type SizeQsu4 =
    unsafe extern "C" fn(usize, usize, usize, usize, usize, usize, kleidiai_sys::kai_datatype) -> usize;

/// An RHS packer of int4 weights in blocks of `bl` (unsigned nibbles, zero
/// point 8, read for an LHS of zero point 1), by signature, with its size
/// query.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) enum BlockRhsPacker {
    /// N x K nibbles (low first), bf16 scales.
    Nxk(SizeQsu4, PackQsu4<kleidiai_sys::kai_rhs_pack_nxk_qsi4c32p_qsu4c32s1s0_params>),
    /// K x N nibbles (low first), bf16 scales.
    Kxn(SizeQsu4, PackQsu4<kleidiai_sys::kai_rhs_pack_kxn_qsi4c32p_qsu4c32s1s0_params>),
    /// `qsu4c32s16s0` rows, no bias; size query `(n, k, nr, kr, bl)`.
    S16s0(RhsSizeNkBlocks, PackS16s0),
    /// N x K nibbles (the order of its function), f32 scales and zero
    /// points; size query `(n, k, nr, kr, bl)`.
    Qai4(RhsSizeNkBlocks, PackQai4),
}

/// The scales of [`BlockRhs`]: n rows of `k / bl`.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) enum BlockScales<'a> {
    /// bf16 bits, rows `stride` bytes apart.
    Bf16 { scales: &'a [u16], stride: usize },
    /// f32 scales and zero points, dense.
    F32 { scales: &'a [f32], zeros: &'a [f32] },
    /// None (`qsu4c32s16s0` rows carry theirs).
    None,
}

/// Block-quantised int4 weights for a [`BlockRhsPacker`]: `values` (the
/// packer's rows, `rhs_stride` bytes apart; for `S16s0` the n rows of
/// `k / bl` blocks of `2 + bl / 2` bytes, for `Qai4` n dense rows of `k /
/// 2` bytes: the stride unused), the scales and the bias.
#[cfg(target_arch = "aarch64")]
pub(crate) struct BlockRhs<'a> {
    pub dims: (usize, usize, usize),
    pub values: &'a [u8],
    pub rhs_stride: usize,
    pub scales: BlockScales<'a>,
    pub bias: Option<&'a [f32]>,
}

#[cfg(target_arch = "aarch64")]
impl BlockRhsPacker {
    /// Packs `w` with blocking `(nr, kr, sr)` into a new zeroed buffer of
    /// the packer's size (one group, no extra bytes): the one checked call
    /// of these packers. Checks `n`, `k`, `bl` are nonzero, `k` a multiple
    /// of `bl`, `bl` even, that the values, the scales (of the packer's
    /// kind) and the bias (`n` values; none for `S16s0`) hold what `(n, k,
    /// bl)` and the strides need. The caller has checked the packer's rules on the
    /// blocking and block length (its `KAI_ASSUME`s) and any CPU feature it
    /// needs beyond the kernel's whose gate `g` is.
    pub(crate) fn pack(self, g: &Gate, w: BlockRhs<'_>, (nr, kr, sr): Blocking) -> Result<crate::buffer::AlignedBuf> {
        use crate::error;
        let (n, k, bl) = w.dims;
        error::nonzero(n, "n")?;
        error::nonzero(k, "k")?;
        error::nonzero(bl, "bl")?;
        error::multiple_of(k, bl, "k", "whole blocks")?;
        error::multiple_of(bl, 2, "bl", "whole bytes")?;
        // Bytes of `rows` rows of `row` bytes, `stride` apart.
        let span = |rows: usize, row: usize, stride: usize| -> Result<usize> {
            if stride < row {
                return Err(Error::Stride { what: "int4 weights", stride, why: format!("shorter than {row} bytes") });
            }
            error::mul(rows - 1, stride, "int4 weights")?.checked_add(row).ok_or_else(|| Error::Overflow("rhs".into()))
        };
        let blocks = k / bl;
        let values = match self {
            BlockRhsPacker::Nxk(..) => span(n, k.div_ceil(2), w.rhs_stride)?,
            BlockRhsPacker::Kxn(..) => span(k, n.div_ceil(2), w.rhs_stride)?,
            BlockRhsPacker::S16s0(..) => error::mul(error::mul(n, blocks, "rhs")?, 2 + bl / 2, "rhs")?,
            BlockRhsPacker::Qai4(..) => error::mul(n, k / 2, "rhs")?,
        };
        error::at_least_bytes(w.values.len(), values, "int4 weights")?;
        let per_row = error::mul(n, blocks, "int4 weight scales")?;
        let (scale, zero, ss) = match (self, w.scales) {
            (BlockRhsPacker::Nxk(..) | BlockRhsPacker::Kxn(..), BlockScales::Bf16 { scales, stride }) => {
                error::at_least_bytes(scales.len() * 2, span(n, blocks * 2, stride)?, "int4 weight scales")?;
                (Lent::of(scales), Lent::NULL, stride)
            }
            (BlockRhsPacker::Qai4(..), BlockScales::F32 { scales, zeros }) => {
                error::at_least(scales.len(), per_row, "int4 weight scales")?;
                error::at_least(zeros.len(), per_row, "int4 weight offsets")?;
                (Lent::of(scales), Lent::of(zeros), 0)
            }
            (BlockRhsPacker::S16s0(..), BlockScales::None) => (Lent::NULL, Lent::NULL, 0),
            _ => return Err(Error::bad_value("int4 weight scales", "these", "not the packer's")),
        };
        match w.bias {
            Some(_) if matches!(self, BlockRhsPacker::S16s0(..)) => {
                return Err(Error::bad_value("bias", "some", "the packer takes none"));
            }
            Some(b) => error::at_least(b.len(), n, "bias")?,
            None => {}
        }
        let dt = kleidiai_sys::kai_datatype_kai_dt_bf16;
        let size = match self {
            BlockRhsPacker::Nxk(size, _) | BlockRhsPacker::Kxn(size, _) => query!(g, size, n, k, nr, kr, sr, bl, dt),
            BlockRhsPacker::S16s0(size, _) | BlockRhsPacker::Qai4(size, _) => query!(g, size, n, k, nr, kr, bl),
        };
        let mut buf = crate::buffer::AlignedBuf::zeroed(size);
        let (values, bias) = ((w.values, w.rhs_stride), Lent::or_null(w.bias));
        let (dims, scales) = ((n, k, bl), (scale, zero, ss));
        RhsCall::Block { packer: self, dims, blocking: (nr, kr, sr), values, scales, bias, dst: buf.as_mut_slice() }
            .invoke();
        Ok(buf)
    }
}

/// `run_matmul` of a kernel that reads its LHS directly: `(m, n, k, lhs,
/// lhs_stride, rhs_packed, dst, dst_stride_row, dst_stride_col, clamp_min,
/// clamp_max)`.
#[cfg(target_arch = "aarch64")]
#[rustfmt::skip]
pub(crate) type RunDirect = unsafe extern "C" fn(
    usize, usize, usize, *const c_void, usize, *const c_void, *mut c_void, usize, usize, f32, f32,
);

/// A kernel that reads its LHS directly and a packed RHS: its run and RHS
/// offset, by kind.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) enum DirectRun {
    /// Named functions: the run and the RHS offset query `(n_idx, k)`.
    Plain(RunDirect, unsafe extern "C" fn(usize, usize) -> usize),
    /// A `kai_matmul_uker_api` table with the clamp flag.
    Table(uker::Uker),
}

/// A call of a [`DirectRun`] kernel: the gated kernel, its blocking, its
/// packed-RHS layout for the call and its output element size; GEMV
/// kernels take one row per call.
#[cfg(target_arch = "aarch64")]
pub(crate) struct DirectCall<'a> {
    pub info: &'a KernelInfo,
    pub tiles: (Tiles, Gate),
    pub rhs_layout: PackedLayout,
    pub out_bytes: usize,
    pub one_row: bool,
}

#[cfg(target_arch = "aarch64")]
impl DirectRun {
    /// `dst = clamp(lhs · wᵀ + bias)`: `lhs` `m` rows of `k` values `stride`
    /// elements apart, `rhs` packed weights of `c.rhs_layout` (`n x k`),
    /// `dst` `m x n` values rows `n` apart, the tiles split over `par`: the
    /// one checked driver of these kernels. Checks the clamp, the RHS
    /// layout, that the LHS rows lie inside `lhs`, `dst` holds `m x n`
    /// values of the kernel's output size and the strides do not
    /// overflow. The caller has checked the kernel's other rules on
    /// `(m, n, k)` (its `k` limit).
    pub(crate) fn run<T: Sync>(
        self,
        c: &DirectCall<'_>,
        (m, lhs, stride): (usize, &[T], usize),
        rhs: &PackedRhs,
        (dst, clamp, par): (&mut [T], Clamp, Parallelism),
    ) -> Result<()> {
        use crate::error;
        clamp.check()?;
        let name = c.info.name;
        rhs.expect(&c.rhs_layout, name)?;
        let (n, k) = (c.rhs_layout.rows, c.rhs_layout.k);
        check_lhs_rows(m, k, lhs.len(), stride)?;
        let es = core::mem::size_of::<T>();
        if es != c.out_bytes {
            return Err(Error::WrongFamily { kernel: name, why: "element type".into() });
        }
        error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
        let (lhs_sb, dst_sb) = (error::mul(stride, es, "lhs stride")?, error::mul(n, es, "dst stride")?);
        let (t, g) = &c.tiles;
        let (lp, rp, dp) = (
            SendPtr(lhs.as_ptr() as *mut u8),
            SendPtr(rhs.data().as_ptr() as *mut u8),
            SendPtr(dst.as_mut_ptr().cast::<u8>()),
        );
        let rhs_stride = match self {
            DirectRun::Table(u) => u.rhs_stride(n, k),
            DirectRun::Plain(..) => Default::default(),
        };
        let lhs_sa = kleidiai_sys::kai_matmul_uker_lhs_stride_args { m: lhs_sb };
        run_grid(par, c.info, m, n, k, t, |rows, cols| {
            let (lp, rp, dp) = (lp, rp, dp);
            let ro = match self {
                DirectRun::Plain(_, off) => query!(g, off, cols.start, k),
                DirectRun::Table(u) => u.rhs_offset(cols.start, &rhs_stride),
            };
            // GEMV kernels take one row per call; others the whole tile.
            let step = if c.one_row { 1 } else { rows.len().max(1) };
            for r in rows.clone().step_by(step).map(|r0| r0..(r0 + step).min(rows.end)) {
                let (h, w, (lo, hi)) = (r.len(), cols.len(), (clamp.min, clamp.max));
                // SAFETY: the packed RHS has the kernel's layout for (n, k)
                // (checked above), so the offset of a column start (a
                // multiple of n_step: run_grid) lies inside it; LHS rows r lie
                // in `lhs` (check_lhs_rows); `dst` holds m x n values of the
                // kernel's output size (checked) and tiles are disjoint; GEMV
                // kernels get one row per call as they require; the gate
                // proves the CPU runs the kernel, whose other rules the
                // caller checked.
                unsafe {
                    let a = lp.0.add(r.start * lhs_sb);
                    let d = dp.0.add((r.start * n + cols.start) * es);
                    match self {
                        DirectRun::Plain(run, _) => <KernelRun>::Direct(run).call(
                            (h, w, k, 0),
                            (a.cast(), lhs_sb),
                            rp.0.add(ro).cast(),
                            (d.cast(), (dst_sb, es)),
                            (lo, hi),
                            NO_LUT,
                        ),
                        DirectRun::Table(u) => {
                            let (b, d) = ((rp.0.add(ro).cast_const(), rhs_stride), (d, dst_sb));
                            u.run(&uker::Uker::clamped_args((h, w, k), (a, lhs_sa), b, d, (&lo, &hi)))
                        }
                    }
                }
            }
        });
        Ok(())
    }
}

/// Thin wrappers over upstream's table-driven micro-kernel APIs
/// (`kai_matmul_uker_api`, `kai_matmul_pack_lhs_uker_api`,
/// `kai_matmul_pack_rhs_uker_api`): the kernels and packers with no header
/// of their own. Every table is obtained (and every entry called) only
/// after the caller has checked the CPU runs it: its functions execute SME
/// instructions, the getters included.
///
/// The constructors take the [`Gate`] of the kernel (whose features
/// include its packers'), so a table exists only once the CPU was checked
/// ([`ensure_supported`]). The queries (steps, strides, sizes, offsets) are
/// then safe: they execute the kernel's instructions on a CPU that has
/// them, read only the values they borrow, and a precondition they break
/// (an index that is not a multiple of the step) aborts in upstream's
/// `KAI_ASSUME`, in release builds too. All of them go through
/// `Table::ask`. The arguments of a run are built by safe functions
/// (structs of pointers); the one call of a table's run entry (its `run`,
/// e.g. [`Uker::run`](uker::Uker::run)) stays `unsafe`: its caller
/// guarantees the buffers cover the shapes.
#[cfg(target_arch = "aarch64")]
pub(crate) mod uker {
    use super::Gate;
    use kleidiai_sys as sys;

    /// What the tables' queries answer: a number (a size, an offset) or a
    /// struct of numbers (steps, strides). A run answers nothing, so no run
    /// goes through [`Table::ask`].
    trait Answer: Copy {}
    impl Answer for usize {}
    impl Answer for sys::kai_matmul_uker_dim_args {}
    impl Answer for sys::kai_matmul_uker_lhs_stride_args {}
    impl Answer for sys::kai_matmul_uker_rhs_stride_args {}
    impl Answer for sys::kai_matmul_uker_dst_stride_args {}
    impl Answer for sys::kai_matmul_pack_lhs_uker_dim_args {}
    impl Answer for sys::kai_matmul_pack_lhs_uker_lhs_packed_stride_args {}
    impl Answer for sys::kai_matmul_pack_rhs_uker_dim_args {}
    impl Answer for sys::kai_matmul_pack_rhs_uker_rhs_stride_args {}
    impl Answer for sys::kai_matmul_pack_rhs_uker_rhs_packed_stride_args {}

    /// A query entry of a table of configuration `C`, taking the borrowed
    /// arguments `A` after the configuration. Called only by
    /// [`Table::ask`], on an entry of the table it borrows.
    trait Query<C, A> {
        /// What it answers.
        type Out: Answer;
        /// Calls the entry on `config` and `args`.
        fn ask(self, config: &C, args: A) -> Self::Out;
    }

    /// [`Query`] for the entries of the given borrowed arguments.
    macro_rules! impl_query {
        ($( ($($a:ident: $t:ident),*) )*) => {$(
            impl<'x, C, $($t,)* R: Answer> Query<C, ($(&'x $t,)*)> for unsafe extern "C" fn(*const C $(, *const $t)*) -> R {
                type Out = R;

                fn ask(self, config: &C, ($($a,)*): ($(&'x $t,)*)) -> R {
                    // SAFETY: an entry of a table (only `Table::ask` calls
                    // this, with the entry its getter picked from the table
                    // it borrows) taking its configuration type and
                    // answering numbers (a query, not a run); the table
                    // exists only once the CPU was checked (the gate its
                    // constructor took); it reads only the values it
                    // borrows, and a wrong index aborts upstream
                    // (`KAI_ASSUME`).
                    unsafe { self(config $(, $a)*) }
                }
            }
        )*};
    }

    impl_query! {
        ()
        (a: A)
        (a: A, b: B)
    }

    /// What picks one entry `F` from a table's API (`|a| a.get_step`).
    type Get<Api, F> = fn(&Api) -> Option<F>;

    /// An upstream table with its configuration. A value exists only once the
    /// gate of its kernel was checked (the constructors take it).
    trait Table {
        /// The upstream table.
        type Api;
        /// Its configuration.
        type Config;

        fn api(&self) -> &Self::Api;
        fn config(&self) -> &Self::Config;

        /// The query `get` picks from the table, on the configuration and
        /// the borrowed `args` (a tuple of references).
        fn ask<F: Query<Self::Config, A>, A>(&self, get: Get<Self::Api, F>, args: A) -> F::Out {
            get(self.api()).expect("upstream fills every entry of its tables").ask(self.config(), args)
        }
    }

    /// [`Table`] for a table type `$t` (fields: the API, then the
    /// configuration), and its run: the one call of a run entry.
    macro_rules! table {
        ($t:ty, $api:ty, $config:ty, $args:ty) => {
            impl Table for $t {
                type Api = $api;
                type Config = $config;

                fn api(&self) -> &$api {
                    &self.0
                }

                fn config(&self) -> &$config {
                    &self.1
                }
            }

            impl $t {
                /// Runs the table's kernel or packer on `args`.
                ///
                /// # Safety
                /// Every pointer in `args` covers what the kernel or packer
                /// reads or writes for `args`' shape, with `args`' strides.
                pub(crate) unsafe fn run(&self, args: &$args) {
                    let f = self.0.run.expect("upstream fills every entry of its tables");
                    // SAFETY: the caller's contract; the CPU runs the
                    // table's code (the gate its constructor took).
                    unsafe { f(&self.1, args) }
                }
            }
        };
        ($t:ident, $api:ty, $config:ty, $args:ty, packer) => {
            table!($t, $api, $config, $args);

            impl $t {
                /// The table of `ctor`, a packer of the kernel `gate` checked.
                pub(crate) fn new(ctor: unsafe extern "C" fn() -> $api, gate: &Gate) -> $t {
                    Self::with_config(ctor, Default::default(), gate)
                }

                /// As [`new`](Self::new), with the configuration `config`.
                pub(crate) fn with_config(ctor: unsafe extern "C" fn() -> $api, config: $config, gate: &Gate) -> $t {
                    $t(gate.table(ctor), config)
                }
            }
        };
    }

    /// Constructor of a kernel's table.
    pub(crate) type UkerCtor = unsafe extern "C" fn() -> sys::kai_matmul_uker_api;

    /// A matmul kernel's table.
    #[derive(Clone, Copy)]
    pub(crate) struct Uker(sys::kai_matmul_uker_api, sys::kai_matmul_uker_config);
    table!(Uker, sys::kai_matmul_uker_api, sys::kai_matmul_uker_config, sys::kai_matmul_uker_args);

    impl Uker {
        /// The table of `ctor`, the constructor of the kernel `gate` checked.
        pub(crate) fn new(ctor: UkerCtor, gate: &Gate) -> Uker {
            Uker(gate.table(ctor), sys::kai_matmul_uker_config::default())
        }

        /// `(m_step, n_step)`.
        pub(crate) fn step(&self) -> (usize, usize) {
            let s = self.ask(|a| a.get_step, ());
            (s.m, s.n)
        }

        /// The LHS strides for `m x k`.
        pub(crate) fn lhs_stride(&self, m: usize, k: usize) -> sys::kai_matmul_uker_lhs_stride_args {
            self.ask(|a| a.get_lhs_stride, (&sys::kai_matmul_uker_lhs_dim_args { m, k },))
        }

        /// The LHS offset of row `m_idx` (a multiple of the M step).
        pub(crate) fn lhs_offset(&self, m_idx: usize, stride: &sys::kai_matmul_uker_lhs_stride_args) -> usize {
            self.ask(|a| a.get_lhs_offset, (&sys::kai_matmul_uker_lhs_dim_args { m: m_idx, k: 0 }, stride))
        }

        /// The RHS strides for `n x k`.
        pub(crate) fn rhs_stride(&self, n: usize, k: usize) -> sys::kai_matmul_uker_rhs_stride_args {
            self.ask(|a| a.get_rhs_stride, (&sys::kai_matmul_uker_rhs_dim_args { n, k },))
        }

        /// The RHS offset of column `n_idx` (a multiple of the N step).
        pub(crate) fn rhs_offset(&self, n_idx: usize, stride: &sys::kai_matmul_uker_rhs_stride_args) -> usize {
            self.ask(|a| a.get_rhs_offset, (&sys::kai_matmul_uker_rhs_dim_args { n: n_idx, k: 0 }, stride))
        }

        /// The destination strides for `m x n`.
        pub(crate) fn dst_stride(&self, m: usize, n: usize) -> sys::kai_matmul_uker_dst_stride_args {
            self.ask(|a| a.get_dst_stride, (&sys::kai_matmul_uker_dst_dim_args { m, n },))
        }

        /// The arguments of a run of `m x n` outputs over `k` with the clamp
        /// flag (the float kernels' call): the LHS at `lhs` with
        /// `lhs_stride`, the RHS at `rhs` with `rhs_stride`, the destination
        /// at `dst` with rows `dst_row_bytes` apart, clamped to `[min, max]`
        /// (pointers to them: they must outlive the [`run`](Self::run)).
        pub(crate) fn clamped_args(
            (m, n, k): (usize, usize, usize),
            (lhs, lhs_stride): (*const u8, sys::kai_matmul_uker_lhs_stride_args),
            (rhs, rhs_stride): (*const u8, sys::kai_matmul_uker_rhs_stride_args),
            (dst, dst_row_bytes): (*mut u8, usize),
            (min, max): (&f32, &f32),
        ) -> sys::kai_matmul_uker_args {
            let mut args = sys::kai_matmul_uker_args {
                flags: sys::kai_matmul_uker_flags_args_KAI_MATMUL_UKER_FLAGS_ARGS_CLAMP as u64,
                shape: sys::kai_matmul_uker_dim_args { m, n, k },
                ..Default::default()
            };
            args.activation.clamp.min_ptr = (min as *const f32).cast();
            args.activation.clamp.max_ptr = (max as *const f32).cast();
            args.operand.lhs.ptr = lhs.cast();
            args.operand.lhs.stride = lhs_stride;
            args.operand.rhs.ptr = rhs.cast();
            args.operand.rhs.stride = rhs_stride;
            args.operand.dst.ptr = dst.cast();
            args.operand.dst.stride = sys::kai_matmul_uker_dst_stride_args { m: dst_row_bytes };
            args
        }
    }

    /// An LHS packer's table.
    #[derive(Clone, Copy)]
    pub(crate) struct PackLhs(sys::kai_matmul_pack_lhs_uker_api, sys::kai_matmul_pack_lhs_uker_config);
    table!(
        PackLhs,
        sys::kai_matmul_pack_lhs_uker_api,
        sys::kai_matmul_pack_lhs_uker_config,
        sys::kai_matmul_pack_lhs_uker_args,
        packer
    );

    impl PackLhs {
        /// Rows per packed block (`mr`).
        pub(crate) fn step_m(&self) -> usize {
            self.ask(|a| a.get_step, ()).m
        }

        /// The packed strides for `m x k`.
        pub(crate) fn packed_stride(&self, m: usize, k: usize) -> sys::kai_matmul_pack_lhs_uker_lhs_packed_stride_args {
            self.ask(|a| a.get_lhs_packed_stride, (&sys::kai_matmul_pack_lhs_uker_lhs_packed_dim_args { m, k },))
        }

        /// Bytes of the packed `m x k` LHS.
        pub(crate) fn packed_size(&self, m: usize, k: usize) -> usize {
            let shape = sys::kai_matmul_pack_lhs_uker_lhs_packed_dim_args { m, k };
            self.ask(|a| a.get_lhs_packed_size, (&shape, &self.packed_stride(m, k)))
        }

        /// The packed offset of row `m_idx` (a multiple of `mr`).
        pub(crate) fn packed_offset(&self, m_idx: usize, k: usize) -> usize {
            let index = sys::kai_matmul_pack_lhs_uker_lhs_packed_dim_args { m: m_idx, k: 0 };
            self.ask(|a| a.get_lhs_packed_offset, (&index, &self.packed_stride(1, k)))
        }

        /// The arguments of packing `m` rows of `k` bytes at `lhs`, `stride`
        /// bytes apart, to `out`.
        pub(crate) fn args(
            &self,
            m: usize,
            k: usize,
            lhs: *const u8,
            stride: usize,
            out: *mut u8,
        ) -> sys::kai_matmul_pack_lhs_uker_args {
            let mut args = sys::kai_matmul_pack_lhs_uker_args::default();
            args.shape.m = m;
            args.shape.k = k;
            args.operand.lhs.ptr = lhs.cast();
            args.operand.lhs.stride.m = stride;
            args.operand.lhs_packed.ptr = out.cast();
            args.operand.lhs_packed.stride = self.packed_stride(m, k);
            args
        }
    }

    /// An RHS packer's table.
    pub(crate) struct PackRhs(sys::kai_matmul_pack_rhs_uker_api, sys::kai_matmul_pack_rhs_uker_config);
    table!(
        PackRhs,
        sys::kai_matmul_pack_rhs_uker_api,
        sys::kai_matmul_pack_rhs_uker_config,
        sys::kai_matmul_pack_rhs_uker_args,
        packer
    );

    impl PackRhs {
        /// Columns per packed block (`nr`).
        pub(crate) fn step_n(&self) -> usize {
            self.ask(|a| a.get_step, ()).n
        }

        /// The strides of the unpacked `n x k` RHS the packer reads.
        pub(crate) fn rhs_stride(&self, n: usize, k: usize) -> sys::kai_matmul_pack_rhs_uker_rhs_stride_args {
            self.ask(|a| a.get_rhs_stride, (&sys::kai_matmul_pack_rhs_uker_rhs_dim_args { n, k },))
        }

        /// The packed strides for `n x k`.
        pub(crate) fn packed_stride(&self, n: usize, k: usize) -> sys::kai_matmul_pack_rhs_uker_rhs_packed_stride_args {
            self.ask(|a| a.get_rhs_packed_stride, (&sys::kai_matmul_pack_rhs_uker_rhs_packed_dim_args { n, k },))
        }

        /// Bytes of the packed `n x k` RHS.
        pub(crate) fn packed_size(&self, n: usize, k: usize) -> usize {
            let shape = sys::kai_matmul_pack_rhs_uker_rhs_packed_dim_args { n, k };
            self.ask(|a| a.get_rhs_packed_size, (&shape, &self.packed_stride(n, k)))
        }

        /// Fills the strides of `args` (its shape and operands filled by
        /// the caller) with the packer's own, for a [`run`](Self::run).
        pub(crate) fn fill_strides(&self, args: &mut sys::kai_matmul_pack_rhs_uker_args) {
            let (n, k) = (args.shape.n, args.shape.k);
            args.operand.rhs.stride = self.rhs_stride(n, k);
            args.operand.rhs_packed.stride = self.packed_stride(n, k);
        }
    }
}

/// `run_matmul` of an int8 kernel that requantizes its int32 accumulators:
/// `(m, n, k, lhs, rhs_packed, dst, dst_stride_row, dst_stride_col,
/// params)`.
#[cfg(target_arch = "aarch64")]
#[rustfmt::skip]
pub(crate) type RunRequant = unsafe extern "C" fn(
    usize, usize, usize, *const c_void, *const c_void, *mut c_void, usize, usize,
    *const kleidiai_sys::kai_matmul_requantize32_params,
);

/// A kernel accumulating in int32, by kind: its run and offsets.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) enum IntRun {
    /// Named functions of a requantizing kernel: the run, the packed-LHS
    /// offset query `(m_idx, k)` (none: it reads plain rows) and the RHS
    /// offset query `(n_idx, k)`.
    Requant(
        RunRequant,
        Option<unsafe extern "C" fn(usize, usize) -> usize>,
        unsafe extern "C" fn(usize, usize) -> usize,
    ),
    /// A `kai_matmul_uker_api` table (its strides from its own queries).
    Table(uker::Uker),
}

/// The LHS of an [`IntRun`] call.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) enum IntLhs<'a> {
    /// Packed, with the layout the kernel reads for the call.
    Packed(&'a PackedLhs, PackedLayout),
    /// Plain rows of `k` bytes, `stride` bytes apart (one row per call).
    Plain(&'a [u8], usize),
}

/// What follows the int32 accumulation of an [`IntRun`] (the stage of the
/// kernel's family), and the output it writes.
#[cfg(target_arch = "aarch64")]
pub(crate) enum IntStage<'a> {
    /// Requantized to int8 with these parameters (a table takes the zero
    /// point and the clamp bounds by pointer, with its clamp flag).
    Requant(kleidiai_sys::kai_matmul_requantize32_params),
    /// The accumulators plus a bias per row (`m` values) and one per column
    /// (`n`): int32 output.
    AccBias(&'a [i32], &'a [i32]),
    /// As `AccBias`, then `clamp(acc * scale + bias[j])` (`bias` `n`
    /// values; the table's clamp flag): f32 output.
    F32 { acc_bias: (&'a [i32], &'a [i32]), scale: f32, bias: &'a [f32], clamp: Clamp },
}

/// A call of an [`IntRun`] kernel: the gated kernel, its blocking and its
/// packed-RHS layout for the call.
#[cfg(target_arch = "aarch64")]
pub(crate) struct IntCall<'a> {
    pub info: &'a KernelInfo,
    pub tiles: (Tiles, Gate),
    pub rhs_layout: PackedLayout,
}

#[cfg(target_arch = "aarch64")]
impl IntRun {
    /// `dst = stage(lhs · wᵀ)`: `lhs` `m` rows of `k` values, `rhs` packed
    /// weights of `c.rhs_layout` (`n x k`), `dst` `m x n` values of the
    /// stage's output, rows `n` apart, the tiles split over `par`: the one
    /// checked driver of these kernels. Checks the RHS layout, the packed
    /// LHS's (or that the plain rows lie inside it), that a named kernel
    /// gets the LHS kind it reads and the requantizing stage, that `dst`
    /// holds `m x n` values of the stage's output size, the stage's biases
    /// hold `m` and `n` values, and its clamp. The caller has checked the
    /// kernel's other rules, and gives the stage of the kernel's family.
    pub(crate) fn run<O>(
        self,
        c: &IntCall<'_>,
        (m, lhs): (usize, IntLhs<'_>),
        rhs: &PackedRhs,
        stage: &IntStage<'_>,
        (dst, par): (&mut [O], Parallelism),
    ) -> Result<()> {
        use crate::error;
        let name = c.info.name;
        rhs.expect(&c.rhs_layout, name)?;
        let (n, k) = (c.rhs_layout.rows, c.rhs_layout.k);
        let (lp, stride) = match lhs {
            IntLhs::Packed(l, layout) => {
                l.expect(&layout, name)?;
                (l.data().as_ptr(), 0)
            }
            IntLhs::Plain(l, stride) => {
                check_lhs_rows(m, k, l.len(), stride)?;
                (l.as_ptr(), stride)
            }
        };
        let plain = matches!(lhs, IntLhs::Plain(..));
        let mismatch = match self {
            IntRun::Requant(_, lhs_offset, _) => {
                lhs_offset.is_none() != plain || !matches!(stage, IntStage::Requant(_))
            }
            IntRun::Table(_) => false,
        };
        if mismatch {
            return Err(Error::WrongFamily { kernel: name, why: "LHS kind or output stage".into() });
        }
        error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
        let es = core::mem::size_of::<O>();
        if es != if matches!(stage, IntStage::Requant(_)) { 1 } else { 4 } {
            return Err(Error::WrongFamily { kernel: name, why: "output type".into() });
        }
        let acc_bias = match stage {
            IntStage::Requant(_) => None,
            IntStage::AccBias(bm, bn) => Some((bm, bn)),
            IntStage::F32 { acc_bias: (bm, bn), bias, clamp, .. } => {
                clamp.check()?;
                error::at_least(bias.len(), n, "output bias")?;
                Some((bm, bn))
            }
        };
        if let Some((bm, bn)) = acc_bias {
            error::at_least(bm.len(), m, "per-row bias")?;
            error::at_least(bn.len(), n, "per-column bias")?;
        }
        let (t, g) = &c.tiles;
        let strides = match self {
            IntRun::Table(u) => Some((u.lhs_stride(m, k), u.rhs_stride(n, k), u.dst_stride(m, n))),
            IntRun::Requant(..) => None,
        };
        let (lp, rp, dp) =
            (SendPtr(lp as *mut u8), SendPtr(rhs.data().as_ptr() as *mut u8), SendPtr(dst.as_mut_ptr().cast::<u8>()));
        run_grid(par, c.info, m, n, k, t, |rows, cols| {
            let (lp, rp, dp) = (lp, rp, dp);
            // Plain rows go one per call (the GEMV kernels take m = 1).
            let step = if plain { 1 } else { rows.len().max(1) };
            for r in rows.clone().step_by(step).map(|r0| r0..(r0 + step).min(rows.end)) {
                let (h, w) = (r.len(), cols.len());
                // SAFETY: both packed operands have exactly the layouts this
                // kernel reads for (m, n, k), or the plain rows lie inside
                // the LHS slice (checked above), so the offsets of a row
                // start that is a multiple of m_step (or any row, one per
                // call) and a column start that is a multiple of n_step
                // (run_grid) lie inside them and cover the tile; `dst` holds
                // m x n values of the stage's output size (checked) and tiles
                // are disjoint; the biases hold m and n values (checked) and
                // the stage's scalars outlive the call; a named kernel gets
                // the LHS kind and stage it reads (checked); the gate proves
                // the CPU runs the kernel, whose other rules the caller
                // checked.
                unsafe {
                    let d = dp.0.add((r.start * n + cols.start) * es).cast::<c_void>();
                    match (self, strides) {
                        (IntRun::Requant(run, lhs_offset, rhs_offset), _) => {
                            let IntStage::Requant(params) = stage else { unreachable!("checked above") };
                            let a = match lhs_offset {
                                Some(off) => lp.0.add(query!(g, off, r.start, k)),
                                None => lp.0.add(r.start * stride),
                            };
                            let b = rp.0.add(query!(g, rhs_offset, cols.start, k));
                            run(h, w, k, a.cast(), b.cast(), d, n, 1, params);
                        }
                        (IntRun::Table(u), Some((ls, rs, ds))) => {
                            let a =
                                if plain { lp.0.add(r.start * stride) } else { lp.0.add(u.lhs_offset(r.start, &ls)) };
                            let b = rp.0.add(u.rhs_offset(cols.start, &rs));
                            let args =
                                int_table_args((h, w, k), (a, ls), (b, rs), (d, ds), stage, (r.start, cols.start));
                            u.run(&args);
                        }
                        (IntRun::Table(_), None) => unreachable!("a table has its strides"),
                    }
                }
            }
        });
        Ok(())
    }
}

/// The arguments of an [`IntRun::Table`] call of `m x n` outputs over `k`
/// (the LHS, RHS and destination at those pointers with those strides),
/// with the stage `stage` for the tile at `(row, col)`: its biases from
/// there, its scalars by pointer (they must outlive the run).
#[cfg(target_arch = "aarch64")]
fn int_table_args(
    (m, n, k): (usize, usize, usize),
    (lhs, lhs_stride): (*const u8, kleidiai_sys::kai_matmul_uker_lhs_stride_args),
    (rhs, rhs_stride): (*const u8, kleidiai_sys::kai_matmul_uker_rhs_stride_args),
    (dst, dst_stride): (*mut c_void, kleidiai_sys::kai_matmul_uker_dst_stride_args),
    stage: &IntStage<'_>,
    (row, col): (usize, usize),
) -> kleidiai_sys::kai_matmul_uker_args {
    use kleidiai_sys as sys;
    let clamp_flag = sys::kai_matmul_uker_flags_args_KAI_MATMUL_UKER_FLAGS_ARGS_CLAMP as u64;
    let mut args = sys::kai_matmul_uker_args { shape: sys::kai_matmul_uker_dim_args { m, n, k }, ..Default::default() };
    args.operand.lhs.ptr = lhs.cast();
    args.operand.lhs.stride = lhs_stride;
    args.operand.rhs.ptr = rhs.cast();
    args.operand.rhs.stride = rhs_stride;
    args.operand.dst.ptr = dst;
    args.operand.dst.stride = dst_stride;
    match stage {
        IntStage::Requant(p) => {
            args.flags = clamp_flag;
            args.operand.bias.scale_bias_global.ptr = (&p.output_zero_point as *const i32).cast();
            args.activation.clamp.min_ptr = (&p.min_value as *const i32).cast();
            args.activation.clamp.max_ptr = (&p.max_value as *const i32).cast();
        }
        IntStage::AccBias(bm, bn) | IntStage::F32 { acc_bias: (bm, bn), .. } => {
            args.operand.bias.acc_bias_m.ptr = bm[row..].as_ptr().cast();
            args.operand.bias.acc_bias_n.ptr = bn[col..].as_ptr().cast();
        }
    }
    if let IntStage::F32 { scale, bias, clamp, .. } = stage {
        args.flags = clamp_flag;
        args.operand.scale.acc_scale_global.ptr = (scale as *const f32).cast();
        args.operand.bias.scale_bias_n.ptr = bias[col..].as_ptr().cast();
        args.activation.clamp.min_ptr = (&clamp.min as *const f32).cast();
        args.activation.clamp.max_ptr = (&clamp.max as *const f32).cast();
    }
    args
}

/// The run of an RHS packer of K x N int8 weights with an int32 bias and an
/// f32 scale per channel: `(num_groups, n, k, nr, kr, sr, rhs_stride, rhs,
/// bias, scale, rhs_packed, extra_bytes, params)`.
#[cfg(target_arch = "aarch64")]
#[rustfmt::skip]
pub(crate) type PackInt8Kxn = unsafe extern "C" fn(
    usize, usize, usize, usize, usize, usize, usize,
    *const c_void, *const c_void, *const c_void, *mut c_void, usize,
    *const kleidiai_sys::kai_rhs_pack_qsi8cx_params,
);

/// Packs K x N int8 weights `kxn` (rows `n` bytes apart), an int32 `bias`
/// and f32 `scales` (`n` values each) with `run` and blocking `(nr, kr,
/// sr)` into a new zeroed buffer of the packer's size (its query `size`
/// for `(n, k)`, through the gate `g` of a kernel that reads its output;
/// one group, no extra bytes, `params` by reference): the one checked call
/// of these packers. Checks the lengths of `kxn`, `bias` and `scales`. The
/// caller has checked the packer's rules on the blocking and that its C
/// arithmetic on the bias does not overflow.
#[cfg(target_arch = "aarch64")]
#[allow(clippy::too_many_arguments)] // the packer's operands
pub(crate) fn pack_rhs_int8_kxn(
    g: &Gate,
    (run, size): (PackInt8Kxn, unsafe extern "C" fn(usize, usize) -> usize),
    (n, k): (usize, usize),
    (nr, kr, sr): Blocking,
    kxn: &[i8],
    (bias, scales): (&[i32], &[f32]),
    params: kleidiai_sys::kai_rhs_pack_qsi8cx_params,
) -> Result<crate::buffer::AlignedBuf> {
    use crate::error;
    error::at_least(kxn.len(), error::mul(n, k, "rhs")?, "weights")?;
    error::at_least(bias.len(), n, "bias")?;
    error::at_least(scales.len(), n, "scales")?;
    let mut buf = crate::buffer::AlignedBuf::zeroed(query!(g, size, n, k));
    let (dims, blocking, dst) = ((n, k), (nr, kr, sr), buf.as_mut_slice());
    RhsCall::Int8Kxn { run, dims, blocking, kxn, bias, scales, params, dst }.invoke();
    Ok(buf)
}

/// The operands of a `kai_matmul_pack_rhs_uker_api` packer call: `n x k`
/// weights of `bits` bits each (`values`, in `order`, rows as far apart as
/// the packer's own stride query says), and per channel (`n` values each)
/// any bias and scales, with any global zero-point correction and scale.
#[cfg(target_arch = "aarch64")]
pub(crate) struct TableRhs<'a, V, B> {
    pub dims: (usize, usize),
    pub order: crate::formats::Order,
    pub values: (&'a [V], usize),
    pub bias: Option<&'a [B]>,
    pub scales: Option<&'a [f32]>,
    pub globals: Option<(i32, f32)>,
}

/// Packs `x` with the table packer `p` into `dst`: the one checked call of
/// these packers. Checks `n` and `k` are nonzero, the weights' rows (of
/// `ceil(cols * bits / 8)` bytes, as far apart as the packer reads them)
/// lie inside `values`, the bias and scales hold `n` values and `dst` the
/// packer's size. The caller has checked the element sizes are the
/// packer's (its table's format) and its rules on `(n, k)`.
#[cfg(target_arch = "aarch64")]
pub(crate) fn pack_rhs_table<V, B>(p: &uker::PackRhs, x: TableRhs<'_, V, B>, dst: &mut [u8]) -> Result<()> {
    use crate::error;
    let (n, k) = x.dims;
    error::nonzero(n, "n")?;
    error::nonzero(k, "k")?;
    let s = p.rhs_stride(n, k);
    let (rows, cols, stride) = match x.order {
        crate::formats::Order::NxK => (n, k, s.n),
        crate::formats::Order::KxN => (k, n, s.k),
    };
    let (values, bits) = x.values;
    let row = error::mul(cols, bits, "rhs")?.div_ceil(8);
    if stride < row {
        return Err(Error::Stride { what: "weights", stride, why: format!("shorter than {row} bytes") });
    }
    let need = error::mul(rows - 1, stride, "rhs")?.checked_add(row).ok_or_else(|| Error::Overflow("rhs".into()))?;
    error::at_least_bytes(core::mem::size_of_val(values), need, "weights")?;
    if let Some(b) = x.bias {
        error::at_least(b.len(), n, "bias")?;
    }
    if let Some(sc) = x.scales {
        error::at_least(sc.len(), n, "scales")?;
    }
    error::at_least_bytes(dst.len(), p.packed_size(n, k), "packed rhs")?;
    let (values, bias, scales) = (Lent::of(values), Lent::or_null(x.bias), Lent::or_null(x.scales));
    RhsCall::Table { packer: p, dims: (n, k), values, bias, scales, globals: x.globals, dst }.invoke();
    Ok(())
}

/// A depthwise-convolution RHS packer: `(filter_height, filter_width,
/// height, width, num_channels, rhs, bias, rhs_packed)`.
#[cfg(target_arch = "aarch64")]
pub(crate) type PackDw =
    unsafe extern "C" fn(usize, usize, usize, usize, usize, *const c_void, *const c_void, *mut c_void);

/// Packs 3x3 depthwise filters of `c` channels (`weights` `9 * c` values,
/// `bias` `c`, of the packer's `elem_bytes`) with `run` into `dst`: the one
/// checked call of these packers. Checks `c` is nonzero, the element size,
/// the lengths and that `dst` holds the packer's size (its query `size` for
/// `(3, 3, c)`, through the gate `g` of the kernel that reads its output).
#[cfg(target_arch = "aarch64")]
pub(crate) fn pack_dw_rhs<T>(
    g: &Gate,
    (run, size, elem_bytes): (PackDw, PackDwSize, usize),
    c: usize,
    (weights, bias): (&[T], &[T]),
    dst: &mut [u8],
) -> Result<()> {
    use crate::error;
    error::nonzero(c, "channels")?;
    if core::mem::size_of::<T>() != elem_bytes {
        return Err(Error::bad_value("element type", core::mem::size_of::<T>(), "not the packer's"));
    }
    error::at_least(weights.len(), error::mul(c, 9, "weights")?, "depthwise weights")?;
    error::at_least(bias.len(), c, "bias")?;
    error::at_least_bytes(dst.len(), query!(g, size, 3, 3, c), "packed weights")?;
    RhsCall::Dw { run, c, weights: Lent::of(weights), bias: Lent::of(bias), dst }.invoke();
    Ok(())
}

/// A depthwise packer's size query `(filter_height, filter_width, channels)`.
#[cfg(target_arch = "aarch64")]
pub(crate) type PackDwSize = unsafe extern "C" fn(usize, usize, usize) -> usize;

/// The start of a slice borrowed for `'a` (or null), as an RHS packer
/// reads it: how an [`RhsCall`] holds operands of an element type the
/// packer fixes (its driver checked the type's size is the packer's).
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
struct Lent<'a>(*const c_void, core::marker::PhantomData<&'a [u8]>);

#[cfg(target_arch = "aarch64")]
impl<'a> Lent<'a> {
    /// No operand (a null pointer).
    const NULL: Lent<'a> = Lent(core::ptr::null(), core::marker::PhantomData);

    /// The start of `s`.
    fn of<T>(s: &'a [T]) -> Lent<'a> {
        Lent(s.as_ptr().cast(), core::marker::PhantomData)
    }

    /// The start of `s`, or null for none.
    fn or_null<T>(s: Option<&'a [T]>) -> Lent<'a> {
        s.map_or(Lent::NULL, Lent::of)
    }

    /// The pointer, as the packer's operand type.
    fn ptr<T>(self) -> *const T {
        self.0.cast()
    }
}

/// One call of an RHS packer with the operands its driver checked: made
/// only by the drivers of this file ([`pack_rhs_per_channel`],
/// [`FloatRhsPacker::pack`], [`BlockRhsPacker::pack`],
/// [`pack_rhs_int8_kxn`], [`pack_rhs_table`], [`pack_dw_rhs`],
/// [`ImatmulRhsRun::pack`]) after their checks, and run by
/// [`invoke`](Self::invoke), the one call of all these packers. Every variant borrows its operands and its destination for
/// `'a`, so they outlive the call.
#[cfg(target_arch = "aarch64")]
enum RhsCall<'a> {
    /// [`pack_rhs_per_channel`]: the validated weights with their packer,
    /// into the packer's size.
    Channel { w: ChannelWeights<'a>, blocking: Blocking, dst: &'a mut [u8] },
    /// [`FloatRhsPacker::pack`]: `(n, k)` weights (rows `data.1` bytes
    /// apart) and a bias or null, into at least the packer's size.
    Float {
        run: PackFloat,
        dims: (usize, usize),
        blocking: Blocking,
        data: (Lent<'a>, usize),
        bias: Lent<'a>,
        dst: &'a mut [u8],
    },
    /// [`BlockRhsPacker::pack`]: `(n, k, bl)` int4 values (rows `values.1`
    /// bytes apart), the scales, zero points and scale stride, and a bias
    /// or null, into the packer's size.
    Block {
        packer: BlockRhsPacker,
        dims: (usize, usize, usize),
        blocking: Blocking,
        values: (&'a [u8], usize),
        scales: (Lent<'a>, Lent<'a>, usize),
        bias: Lent<'a>,
        dst: &'a mut [u8],
    },
    /// [`pack_rhs_int8_kxn`]: `(n, k)` K x N int8 weights, `n` biases and
    /// scales, the params, into the packer's size.
    Int8Kxn {
        run: PackInt8Kxn,
        dims: (usize, usize),
        blocking: Blocking,
        kxn: &'a [i8],
        bias: &'a [i32],
        scales: &'a [f32],
        params: kleidiai_sys::kai_rhs_pack_qsi8cx_params,
        dst: &'a mut [u8],
    },
    /// [`pack_rhs_table`]: `(n, k)` weights at the packer's strides, a bias
    /// and scales or null, the globals, into at least the packer's size.
    Table {
        packer: &'a uker::PackRhs,
        dims: (usize, usize),
        values: Lent<'a>,
        bias: Lent<'a>,
        scales: Lent<'a>,
        globals: Option<(i32, f32)>,
        dst: &'a mut [u8],
    },
    /// [`pack_dw_rhs`]: 3x3 filters and biases of `c` channels, into at
    /// least the packer's size.
    Dw { run: PackDw, c: usize, weights: Lent<'a>, bias: Lent<'a>, dst: &'a mut [u8] },
    /// [`ImatmulRhsRun::pack`]: K x N weights of `(n, kcc, kcl)` (rows
    /// `kxn.1` bytes apart), `n` biases, and for the int8 packer `n` scales
    /// and its params, into the packer's size.
    Imatmul {
        run: ImatmulRhsRun,
        dims: (usize, usize, usize),
        kxn: (Lent<'a>, usize),
        bias: Lent<'a>,
        scales: Lent<'a>,
        params: Option<&'a kleidiai_sys::kai_rhs_pack_qsi8cx_params>,
        dst: &'a mut [u8],
    },
}

#[cfg(target_arch = "aarch64")]
impl RhsCall<'_> {
    /// Runs the packer on the checked operands: the one call of the RHS
    /// packers of this file (one group, no extra bytes).
    fn invoke(self) {
        use core::ptr::null;
        // SAFETY: every variant holds what its driver checked before making
        // it (no other code makes one), its operands and destination
        // borrowed across the call, and the CPU runs its packer: a gate of a
        // kernel that reads its output was taken for its size query (or, for
        // a table, by the table's constructor). Per variant:
        // - `Channel` (`pack_rhs_per_channel`): the weights passed
        //   `validate` (data, scales and bias hold what n, k and their order
        //   need) and are in the order the packer reads, 2-bit rows have
        //   k % 32 == 0; `dst` holds the packer's size for (n, k, nr, kr,
        //   sr) (its query); the params and table by reference; the caller
        //   checked the packer's rules on the blocking.
        // - `Float` (`FloatRhsPacker::pack`): the data holds the n x k
        //   values of the packer's size in its order, rows `stride` bytes
        //   apart, the bias n values of the packer's bias size or null where
        //   it allows that, `dst` at least its size for (n, k); no scale, no
        //   params; the caller checked its rules on the blocking.
        // - `Block` (`BlockRhsPacker::pack`): the values, scales and bias
        //   hold what (n, k, bl) and the strides need in the packer's layout
        //   (scales of the packer's kind, no bias for `S16s0`), `dst` the
        //   packer's size; bf16 scales, zero points 1 and 8, the params by
        //   reference; the caller checked the packer's rules on the blocking
        //   and block length.
        // - `Int8Kxn` (`pack_rhs_int8_kxn`): `kxn` holds k x n int8 with
        //   rows n bytes apart, `bias` and `scales` n values, `dst` the
        //   packer's size for (n, k); the params by reference; the caller
        //   checked the packer's rules on the blocking and its bias
        //   arithmetic.
        // - `Table` (`pack_rhs_table`): the weights hold the rows the packer
        //   reads with its own strides (filled here, as checked), the bias
        //   and scales n values or null, the globals live on this stack
        //   across the call, `dst` holds at least the packer's size; the
        //   caller checked the element sizes and the packer's rules.
        // - `Dw` (`pack_dw_rhs`): the weights hold 9 * c values and the bias
        //   c of the packer's element size, `dst` at least its size for (3,
        //   3, c); height and width equal the filter's, as the packer
        //   asserts.
        // - `Imatmul` (`ImatmulRhsRun::pack`): the weights hold k = kcc *
        //   kcl rows of n elements `stride` bytes apart, the bias n values
        //   (never null, as the packers require) and the scales n f32 for
        //   the quantised packer, which alone has params (asserted), all of
        //   the packer's sizes; `dst` has the packer's size for (n, kcc,
        //   kcl); the packer is SVE or SME code (streaming mode inside),
        //   whose rules the caller checked.
        unsafe {
            match self {
                RhsCall::Channel { w, blocking: (nr, kr, sr), dst } => {
                    let dst = dst.as_mut_ptr().cast::<c_void>();
                    let bias = |b: Option<&[f32]>| b.map_or(null(), <[f32]>::as_ptr);
                    match w {
                        ChannelWeights::Int4(w, run, p) => {
                            let (n, k) = (w.n, w.k);
                            run(1, n, k, nr, kr, sr, w.data.as_ptr(), bias(w.bias), w.scales.as_ptr(), dst, 0, &p)
                        }
                        ChannelWeights::Int8(w, run, p) => {
                            let (n, k) = (w.n, w.k);
                            run(1, n, k, nr, kr, sr, w.data.as_ptr(), bias(w.bias), w.scales.as_ptr(), dst, 0, &p)
                        }
                        ChannelWeights::UInt2(w, run, p, lut) => {
                            let (n, k, d, s) = (w.n, w.k, w.data.as_ptr(), w.scales.as_ptr());
                            run(1, n, k, nr, kr, sr, d, bias(w.bias), s, dst, 0, &p, lut.as_ptr())
                        }
                    }
                }
                RhsCall::Float { run, dims: (n, k), blocking: (nr, kr, sr), data: (d, stride), bias, dst } => {
                    let o = dst.as_mut_ptr().cast::<c_void>();
                    run(1, n, k, nr, kr, sr, stride, d.ptr(), bias.ptr(), null(), o, 0, null())
                }
                RhsCall::Block { packer, dims: (n, k, bl), blocking: (nr, kr, sr), values, scales, bias, dst } => {
                    let (v, rs, (sp, zero, ss)) = (values.0.as_ptr(), values.1, scales);
                    let (out, dt) = (dst.as_mut_ptr().cast::<c_void>(), kleidiai_sys::kai_datatype_kai_dt_bf16);
                    let p4 = kleidiai_sys::kai_rhs_pack_qs4cxs1s0_param { lhs_zero_point: 1, rhs_zero_point: 8 };
                    match packer {
                        BlockRhsPacker::Nxk(_, run) => {
                            use kleidiai_sys::kai_rhs_pack_nxk_qsi4c32p_qsu4c32s1s0_params as P;
                            let p = P { lhs_zero_point: 1, rhs_zero_point: 8, scale_dt: dt };
                            run(1, n, k, nr, kr, sr, bl, v, rs, bias.ptr(), sp.ptr(), ss, out, 0, &p)
                        }
                        BlockRhsPacker::Kxn(_, run) => {
                            use kleidiai_sys::kai_rhs_pack_kxn_qsi4c32p_qsu4c32s1s0_params as P;
                            let p = P { lhs_zero_point: 1, rhs_zero_point: 8, scale_dt: dt };
                            run(1, n, k, nr, kr, sr, bl, v, rs, bias.ptr(), sp.ptr(), ss, out, 0, &p)
                        }
                        BlockRhsPacker::S16s0(_, run) => run(1, n, k, nr, kr, sr, bl, v, null(), out, 0, &p4),
                        BlockRhsPacker::Qai4(_, run) => {
                            run(1, n, k, nr, kr, sr, bl, v, zero.ptr(), bias.ptr(), sp.ptr(), out, 0, &p4)
                        }
                    }
                }
                RhsCall::Int8Kxn { run, dims: (n, k), blocking: (nr, kr, sr), kxn, bias, scales, params, dst } => {
                    let (w, b, s) = (kxn.as_ptr().cast(), bias.as_ptr().cast(), scales.as_ptr().cast());
                    run(1, n, k, nr, kr, sr, n, w, b, s, dst.as_mut_ptr().cast(), 0, &params)
                }
                RhsCall::Table { packer, dims: (n, k), values, bias, scales, globals, dst } => {
                    let mut args = kleidiai_sys::kai_matmul_pack_rhs_uker_args::default();
                    args.shape.n = n;
                    args.shape.k = k;
                    args.operand.rhs.ptr = values.ptr();
                    args.operand.bias_n.ptr = bias.ptr();
                    args.operand.scale_n.ptr = scales.ptr();
                    let g = globals.unwrap_or_default();
                    if globals.is_some() {
                        args.operand.k_sum_scale_global.ptr = (&g.0 as *const i32).cast();
                        args.operand.scale_global.ptr = (&g.1 as *const f32).cast();
                    }
                    args.operand.rhs_packed.ptr = dst.as_mut_ptr().cast();
                    packer.fill_strides(&mut args);
                    packer.run(&args)
                }
                RhsCall::Dw { run, c, weights, bias, dst } => {
                    run(3, 3, 3, 3, c, weights.ptr(), bias.ptr(), dst.as_mut_ptr().cast())
                }
                RhsCall::Imatmul { run, dims: (n, kcc, kcl), kxn: (w, stride), bias, scales, params, dst } => {
                    let (w, b, d) = (w.ptr(), bias.ptr(), dst.as_mut_ptr().cast());
                    match (run, params) {
                        (ImatmulRhsRun::Float(run), _) => run(n, kcc, kcl, stride, w, b, d),
                        (ImatmulRhsRun::Qsi8(run), Some(p)) => run(n, kcc, kcl, stride, w, b, scales.ptr(), d, p),
                        (ImatmulRhsRun::Qsi8(_), None) => unreachable!("asserted by ImatmulRhsRun::pack"),
                    }
                }
            }
        }
    }
}

/// The calls of the indirect (imatmul) and depthwise kernels and packers:
/// their function-pointer types, how each is called, and one checked driver
/// per kind of call ([`ImatmulRhsRun::pack`], [`pack_lhs_indirect`],
/// [`ImatmulRun::run_packed`], [`ImatmulRun::run_direct`], [`DwRun::run`]);
/// the RHS packer's call is an [`RhsCall`], the others' one `IndirectCall`.
#[cfg(target_arch = "aarch64")]
pub(crate) use indirect_calls::*;

#[cfg(target_arch = "aarch64")]
mod indirect_calls {
    use super::{Gate, Getter, Lent, RhsCall, Tiles, run_grid, run_rows};
    use crate::buffer::{AlignedBuf, SendPtr};
    use crate::error::{self, Error, Result};
    use crate::formats::{DepthwiseShape, Indirection};
    use crate::packed::{Clamp, PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::info::KernelInfo;
    use core::ffi::c_void;
    use core::ops::Range;
    use kleidiai_sys as sys;

    /// `(index, k_chunk_count, k_chunk_length) -> bytes`: an imatmul
    /// kernel's or packer's packed offset or size query.
    pub(crate) type ChunkQuery = unsafe extern "C" fn(usize, usize, usize) -> usize;
    /// An imatmul LHS packer's run: `(m, k_chunk_count, k_chunk_length,
    /// lhs_ptrs, lhs_ptr_offset, pad_ptr, lhs_packed)`.
    pub(crate) type PackLhsIndirect =
        unsafe extern "C" fn(usize, usize, usize, *const *const c_void, usize, *const c_void, *mut c_void);
    /// An imatmul RHS packer of float weights: `(n, k_chunk_count,
    /// k_chunk_length, rhs_stride_row, rhs, bias, rhs_packed)`.
    pub(crate) type PackImatmulFloat =
        unsafe extern "C" fn(usize, usize, usize, usize, *const c_void, *const c_void, *mut c_void);
    /// An imatmul RHS packer of int8 weights: `(n, k_chunk_count,
    /// k_chunk_length, rhs_stride_row, rhs, bias, scale, rhs_packed,
    /// params)`.
    #[rustfmt::skip]
    pub(crate) type PackImatmulQsi8 = unsafe extern "C" fn(
        usize, usize, usize, usize, *const c_void, *const c_void, *const c_void, *mut c_void,
        *const sys::kai_rhs_pack_qsi8cx_params,
    );
    /// `run_imatmul` of a packed-LHS kernel with a float clamp: `(m, n,
    /// k_chunk_count, k_chunk_length, lhs_packed, rhs_packed, dst,
    /// dst_stride_row, clamp_min, clamp_max)`.
    pub(crate) type RunImatmulClamp =
        unsafe extern "C" fn(usize, usize, usize, usize, *const c_void, *const c_void, *mut c_void, usize, f32, f32);
    /// `run_imatmul` of a packed-LHS kernel with int8 requantisation, the
    /// parameters last.
    #[rustfmt::skip]
    pub(crate) type RunImatmulRequant = unsafe extern "C" fn(
        usize, usize, usize, usize, *const c_void, *const c_void, *mut c_void, usize,
        *const sys::kai_matmul_requantize32_params,
    );
    /// `run_imatmul` of a kernel that follows the pointer table itself:
    /// `(m, n, k_chunk_count, k_chunk_length, lhs_ptrs, pad_ptr,
    /// lhs_ptr_offset, rhs_packed, dst, dst_stride_row, clamp_min,
    /// clamp_max)`.
    #[rustfmt::skip]
    pub(crate) type RunImatmulDirect = unsafe extern "C" fn(
        usize, usize, usize, usize, *const c_void, *const c_void, usize, *const c_void, *mut c_void, usize, f32, f32,
    );

    /// `kcc · roundup(kcl, kr)`: the packed K of `kcc` chunks of `kcl`
    /// padded to `kr`, checked.
    pub(crate) fn chunks_packed_k(kcc: usize, kcl: usize, kr: usize) -> Result<usize> {
        error::mul(kcc, error::mul(kcl.div_ceil(kr), kr, "k_chunk_length")?, "packed k")
    }

    /// An [`Indirection`] that passed [`validate`](Indirection::validate)
    /// (made only by [`new`](Self::new)): its table has `m · k_chunk_count`
    /// entries and every chunk lies inside `src`.
    pub(crate) struct CheckedIndirection<'l, 'a, T>(&'l Indirection<'a, T>);

    impl<'l, 'a, T: Copy> CheckedIndirection<'l, 'a, T> {
        /// `lhs` once it passed `validate`.
        pub(crate) fn new(lhs: &'l Indirection<'a, T>) -> Result<Self> {
            lhs.validate()?;
            Ok(CheckedIndirection(lhs))
        }

        /// A padding chunk (`k_chunk_length` copies of `pad`) and the pointer
        /// table for blocks of `m_step` rows (each pointer into `src` or at
        /// the padding chunk, valid for `k_chunk_length` elements while
        /// both live).
        fn table(&self, m_step: usize) -> (Vec<T>, Vec<*const T>) {
            let pad = vec![self.0.pad; self.0.k_chunk_length];
            let table = self.0.pointer_table(m_step, pad.as_ptr());
            (pad, table)
        }
    }

    impl<'a, T> core::ops::Deref for CheckedIndirection<'_, 'a, T> {
        type Target = Indirection<'a, T>;

        fn deref(&self) -> &Indirection<'a, T> {
            self.0
        }
    }

    /// How an imatmul RHS packer (`kai_rhs_imatmul_pack_kxn_*`) is called.
    #[derive(Clone, Copy)]
    pub(crate) enum ImatmulRhsRun {
        /// K x N weights and a bias of the same type.
        Float(PackImatmulFloat),
        /// K x N int8 weights, int32 bias, f32 scales and the LHS
        /// quantisation folded in.
        Qsi8(PackImatmulQsi8),
    }

    impl ImatmulRhsRun {
        /// Packs K x N weights `kxn` (`k = kcc · kcl` rows of `n`), `bias`
        /// (`n`), `scales` (`n`, for the int8 packer) and `params` (the int8
        /// packer's) for `n` channels of `kcc` chunks of `kcl` into a new
        /// zeroed buffer of the packer's size (its query `size`, through the
        /// gate `g` of the kernel `kernel` that reads its output): the one
        /// call of these packers. Panics (an internal error) unless the
        /// operands are what the packer reads: weights of `elem_bytes` and
        /// biases of `bias_bytes` bytes, and the lengths and params above.
        /// The caller has checked the packer's rules (its block) and that
        /// the packed size does not overflow.
        #[allow(clippy::too_many_arguments)] // the packer's operands
        pub(crate) fn pack<T, B>(
            self,
            g: &Gate,
            kernel: &str,
            (size, elem_bytes, bias_bytes): (ChunkQuery, usize, usize),
            (n, kcc, kcl): (usize, usize, usize),
            (kxn, bias, scales): (&[T], &[B], &[f32]),
            params: Option<&sys::kai_rhs_pack_qsi8cx_params>,
        ) -> AlignedBuf {
            let quantised = matches!(self, ImatmulRhsRun::Qsi8(_));
            // What the packer reads.
            assert!(
                size_of::<T>() == elem_bytes
                    && size_of::<B>() == bias_bytes
                    && kcc.checked_mul(kcl).and_then(|k| k.checked_mul(n)).is_some_and(|kn| kxn.len() >= kn)
                    && bias.len() >= n
                    && scales.len() >= if quantised { n } else { 0 }
                    && quantised == params.is_some(),
                "{kernel}: RHS operands do not match the packer"
            );
            // No overflow: n x k elements of elem_bytes are in `kxn`.
            let stride = n * elem_bytes;
            let size = query!(g, size, n, kcc, kcl);
            let mut buf = AlignedBuf::zeroed(size);
            let (kxn, bias, scales) = ((Lent::of(kxn), stride), Lent::of(bias), Lent::of(scales));
            let dst = buf.as_mut_slice();
            RhsCall::Imatmul { run: self, dims: (n, kcc, kcl), kxn, bias, scales, params, dst }.invoke();
            buf
        }
    }

    /// Packs the checked indirect LHS `lhs` with the packer `(m_step, run,
    /// offset)` (the functions of one upstream imatmul LHS packer of
    /// `elem_bytes`-byte elements) into `out`, reset to `layout` (the gated
    /// kernel `info`'s packed-LHS layout for `lhs`: blocks of `layout.r`
    /// rows, chunks padded to `layout.kr`), the row blocks split over `par`:
    /// the one driver of these packers. Checks the packer's row step is
    /// `layout.r` and the packed size `roundup(m, r) · kcc · roundup(kcl,
    /// kr) · elem_bytes` does not overflow, and asserts `T` has
    /// `elem_bytes`.
    pub(crate) fn pack_lhs_indirect<T: Copy>(
        g: &Gate,
        info: &KernelInfo,
        (m_step_of, run, offset): (Getter, PackLhsIndirect, ChunkQuery),
        lhs: &CheckedIndirection<'_, '_, T>,
        (layout, elem_bytes): (PackedLayout, usize),
        par: Parallelism,
        out: &mut PackedLhs,
    ) -> Result<()> {
        let (m, kcc, kcl) = (lhs.m, lhs.k_chunk_count, lhs.k_chunk_length);
        let m_step = layout.r;
        let packer_m_step = query!(g, m_step_of);
        if packer_m_step != m_step {
            return Err(Error::PackerMismatch {
                kernel: info.name,
                why: format!("LHS packer block {packer_m_step} differs from the kernel's m step {m_step}"),
            });
        }
        // Checked size: roundup(m, m_step) * packed_k * elem_bytes.
        let rows = error::mul(m.div_ceil(m_step), m_step, "m")?;
        let size = error::mul(rows, error::mul(chunks_packed_k(kcc, kcl, layout.kr)?, elem_bytes, "lhs")?, "lhs")?;
        assert_eq!(size_of::<T>(), elem_bytes, "{}: LHS element type", info.name);
        let (pad, table) = lhs.table(m_step);
        out.reset(layout, size);
        let dst = SendPtr(out.data_mut().as_mut_ptr());
        let tp = SendPtr(table.as_ptr() as *mut *const T);
        let pp = SendPtr(pad.as_ptr() as *mut T);
        run_rows(par, info, m, kcc * kcl, m_step, |rows| {
            let (dst, tp, pp) = (dst, tp, pp);
            let lhs = (tp.0.cast_const().cast::<*const c_void>(), pp.0.cast_const().cast::<c_void>());
            IndirectCall::PackLhs { run, offset, rows, chunks: (kcc, kcl), lhs, dst: dst.0 }.invoke();
        });
        drop((table, pad));
        Ok(())
    }

    /// The output stage of an imatmul run, checked by the caller.
    #[derive(Clone, Copy)]
    pub(crate) enum ImatmulStage {
        /// Clamp bounds (float outputs).
        Clamp(Clamp),
        /// Zero point and bounds (int8 outputs).
        Requant(sys::kai_matmul_requantize32_params),
    }

    impl From<Clamp> for ImatmulStage {
        fn from(c: Clamp) -> ImatmulStage {
            ImatmulStage::Clamp(c)
        }
    }

    /// How an imatmul kernel is called (its `run_imatmul`).
    #[derive(Clone, Copy)]
    pub(crate) enum ImatmulRun {
        /// Packed LHS, float clamp.
        Clamp(RunImatmulClamp),
        /// Packed LHS, int8 requantisation.
        Requant(RunImatmulRequant),
        /// The kernel follows the pointer table itself (no LHS packing).
        Direct(RunImatmulDirect),
    }

    impl ImatmulRun {
        /// `dst = stage(lhs · wᵀ + bias)` with this packed-LHS kernel (of
        /// the gated kernel `info`, blocking `t`, packed offsets `(lhs_offset,
        /// rhs_offset)`, output elements of `out_bytes`): `lhs` of
        /// `layouts.0` (`m` rows of `kcc` chunks of `kcl`), `rhs` of
        /// `layouts.1` (`n` channels), the kernel's layouts for them, `dst`
        /// `m x n`, rows `n` apart, the tiles split over `par`: the one
        /// driver of these kernels. Checks both layouts and the length of
        /// `dst`, and asserts the output type and stage are the kernel's.
        #[allow(clippy::too_many_arguments)] // the kernel's operands
        pub(crate) fn run_packed<D: Copy>(
            self,
            (info, (t, _)): (&KernelInfo, &(Tiles, Gate)),
            (lhs_offset, rhs_offset): (ChunkQuery, ChunkQuery),
            (lhs, rhs): (&PackedLhs, &PackedRhs),
            layouts: (PackedLayout, PackedLayout),
            (dst, out_bytes): (&mut [D], usize),
            stage: ImatmulStage,
            par: Parallelism,
        ) -> Result<()> {
            let (m, n, kcl) = (layouts.0.rows, layouts.1.rows, layouts.1.bl);
            let kcc = layouts.1.k / kcl;
            rhs.expect(&layouts.1, info.name)?;
            lhs.expect(&layouts.0, info.name)?;
            error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
            assert!(
                size_of::<D>() == out_bytes
                    && matches!(
                        (self, stage),
                        (ImatmulRun::Clamp(_), ImatmulStage::Clamp(_))
                            | (ImatmulRun::Requant(_), ImatmulStage::Requant(_))
                    ),
                "{}: output type or stage",
                info.name
            );
            let (lp, rp, dp) = (
                SendPtr(lhs.data().as_ptr() as *mut u8),
                SendPtr(rhs.data().as_ptr() as *mut u8),
                SendPtr(dst.as_mut_ptr()),
            );
            let dst_stride = n * size_of::<D>();
            run_grid(par, info, m, n, kcc * kcl, t, |rows, cols| {
                let (lp, rp, dp) = (lp, rp, dp);
                let d = dp.0.wrapping_add(rows.start * n + cols.start).cast::<c_void>();
                let (lhs, rhs) = (ImatmulLhs::Packed(lp.0, lhs_offset), (rp.0.cast_const(), rhs_offset));
                let (tile, chunks, dst) = ((rows, cols), (kcc, kcl), (d, dst_stride));
                IndirectCall::Imatmul { run: self, stage, tile, chunks, lhs, rhs, dst }.invoke();
            });
            Ok(())
        }

        /// `dst = clamp(gather(lhs) · wᵀ + bias)` with this kernel that reads
        /// the LHS through the pointer table (the gated kernel `info`,
        /// blocking `t`, packed-RHS offset `rhs_offset`, elements of
        /// `elem_bytes`): `rhs` of `rhs_layout` (the kernel's packed-RHS
        /// layout for `n` channels of the chunks of `lhs`), `dst` `m x n`,
        /// rows `n` apart, the tiles split over `par`: the one driver of
        /// these kernels. Checks the RHS layout and the length of `dst`,
        /// returns [`Error::WrongFamily`] for a packed-LHS kernel and
        /// asserts `T` has `elem_bytes`. The caller has checked the clamp and
        /// the kernel's rule on the chunks (they fit in 32 bits).
        #[allow(clippy::too_many_arguments)] // the kernel's operands
        pub(crate) fn run_direct<T: Copy>(
            self,
            (info, (t, _)): (&KernelInfo, &(Tiles, Gate)),
            rhs_offset: ChunkQuery,
            lhs: &CheckedIndirection<'_, '_, T>,
            (rhs, rhs_layout): (&PackedRhs, PackedLayout),
            (dst, elem_bytes): (&mut [T], usize),
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            let (m, n, kcc, kcl) = (lhs.m, rhs_layout.rows, lhs.k_chunk_count, lhs.k_chunk_length);
            rhs.expect(&rhs_layout, info.name)?;
            error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
            if !matches!(self, ImatmulRun::Direct(_)) {
                return Err(Error::WrongFamily { kernel: info.name, why: "reads a packed LHS".into() });
            }
            assert_eq!(size_of::<T>(), elem_bytes, "{}: element type", info.name);
            let (pad, table) = lhs.table(t.m_step);
            let (tp, pp, rp, dp) = (
                SendPtr(table.as_ptr() as *mut *const T),
                SendPtr(pad.as_ptr() as *mut T),
                SendPtr(rhs.data().as_ptr() as *mut u8),
                SendPtr(dst.as_mut_ptr()),
            );
            run_grid(par, info, m, n, kcc * kcl, t, |rows, cols| {
                let (tp, pp, rp, dp) = (tp, pp, rp, dp);
                let d = dp.0.wrapping_add(rows.start * n + cols.start).cast::<c_void>();
                let lhs = ImatmulLhs::Table(tp.0.cast_const().cast(), pp.0.cast_const().cast());
                let (tile, chunks, rhs, dst) =
                    ((rows, cols), (kcc, kcl), (rp.0.cast_const(), rhs_offset), (d, n * size_of::<T>()));
                IndirectCall::Imatmul { run: self, stage: clamp.into(), tile, chunks, lhs, rhs, dst }.invoke();
            });
            drop((table, pad));
            Ok(())
        }
    }

    /// The LHS of an [`IndirectCall::Imatmul`].
    #[derive(Clone, Copy)]
    enum ImatmulLhs {
        /// Packed, at `.0`, with the kernel's packed-LHS offset query.
        Packed(*const u8, ChunkQuery),
        /// The pointer table (blocks of `m_step` rows of `kcc` pointers) and
        /// the padding chunk, for a kernel that follows the table itself.
        Table(*const *const c_void, *const c_void),
    }

    /// One call, on one part of the work, of an imatmul LHS packer or
    /// kernel or of a depthwise kernel, with the operands its driver
    /// checked: made only by the drivers of this module
    /// ([`pack_lhs_indirect`], [`ImatmulRun::run_packed`],
    /// [`ImatmulRun::run_direct`], [`DwRun::run`]) in a part of their
    /// `run_rows` or `run_grid` split, and run by [`invoke`](Self::invoke),
    /// the one call of these packers and kernels.
    enum IndirectCall {
        /// [`pack_lhs_indirect`]: the packer `run` with its packed offset
        /// query, on the rows `rows` of `(kcc, kcl)` chunks: the pointer
        /// table and the padding chunk, into the packed LHS at `dst`.
        PackLhs {
            run: PackLhsIndirect,
            offset: ChunkQuery,
            rows: Range<usize>,
            chunks: (usize, usize),
            lhs: (*const *const c_void, *const c_void),
            dst: *mut u8,
        },
        /// [`ImatmulRun::run_packed`] and [`ImatmulRun::run_direct`]: the
        /// kernel with its stage, on the tile `(rows, cols)` of `(kcc, kcl)`
        /// chunks: the LHS, the packed RHS with its offset query, the tile's
        /// output with the row stride in bytes.
        Imatmul {
            run: ImatmulRun,
            stage: ImatmulStage,
            tile: (Range<usize>, Range<usize>),
            chunks: (usize, usize),
            lhs: ImatmulLhs,
            rhs: (*const u8, ChunkQuery),
            dst: (*mut c_void, usize),
        },
        /// [`DwRun::run`]: the kernel on `(src, packed weights, dst)` at the
        /// window's first input and output rows, the dense strides `(input
        /// row, pixel, output row)` in bytes, `(channels, in_w, out_w)`, the
        /// valid input and output rows, `(pad_left, pad_top)` and the clamp.
        Depthwise {
            run: DwRun,
            ptrs: (*const c_void, *const c_void, *mut c_void),
            strides: (usize, usize, usize),
            dims: (usize, usize, usize),
            valid: (usize, usize),
            pad: (usize, usize),
            clamp: Clamp,
        },
    }

    impl IndirectCall {
        /// Runs the packer or kernel on its part of the checked operands.
        fn invoke(self) {
            // SAFETY: every variant holds what its driver checked before
            // splitting the work (no other code makes one), the part its
            // split gives this call, and the CPU runs its code (the gate of
            // the kernel, taken with the driver's blocking or layout).
            // Per variant:
            // - `PackLhs` (`pack_lhs_indirect`): m_step is the packer's
            //   (checked) and the packed LHS holds its size for (m, kcc,
            //   kcl). `rows` starts at a multiple of m_step (run_rows): its
            //   pointers begin at table index rows.start * kcc (the table is
            //   laid out in blocks of m_step rows) and its packed rows at the
            //   packer's offset for rows.start, a region no other part
            //   writes. Every pointer the packer reads for these rows is
            //   non-null and valid for kcl elements of the packer's size
            //   (asserted; predicated loads): it points into `src`
            //   (CheckedIndirection) or at the padding chunk (kcl elements),
            //   both alive until the packing is done. lhs_ptr_offset 0.
            // - `Imatmul` with a packed LHS (`run_packed`): both packed
            //   buffers have exactly the layouts this kernel computes for (m,
            //   n, kcc, kcl) at the current vector length (checked), so the
            //   offsets of a row start that is a multiple of m_step and a
            //   column start that is a multiple of n_step (run_grid) lie
            //   inside them; the run and stage are of one kind (asserted).
            // - `Imatmul` with a pointer table (`run_direct`): the kernel
            //   follows the table (checked) and rows.start is a multiple of
            //   m_step (run_grid), so this tile's pointers start at table
            //   index rows.start * kcc (blocks of m_step rows); each pointer
            //   it reads is valid for kcl elements (into `src`:
            //   CheckedIndirection, or the padding chunk), both alive for the
            //   call; lhs_ptr_offset 0. The packed RHS has exactly this
            //   kernel's layout for (n, kcc, kcl) at the current VL
            //   (checked), so the offset of a column start that is a multiple
            //   of n_step lies inside it; the caller checked the clamp and
            //   the kernel's rule on the chunks.
            // - both `Imatmul`: dst holds m x n values of the kernel's output
            //   size (checked and asserted), rows `stride` bytes apart, and
            //   tiles are disjoint; the requantisation parameters (min <=
            //   max, both int8: the caller checked) live on this stack across
            //   the call.
            // - `Depthwise` (`DwRun::run`): the kernel reads input rows from
            //   the first one (at most the valid ones: the rows left in
            //   `src`, whose length is checked) of in_w pixels of c channels,
            //   at the strides of the dense layout; the packed weights have
            //   this kernel's layout for c channels at the current vector
            //   length (checked); it writes the valid output rows (at most
            //   m_step for planar kernels, the tile's for depth-first ones)
            //   of out_w pixels inside `dst` (length checked), this tile's
            //   alone; elements of the kernel's size (asserted); zero padding
            //   (pad_value 0.0, as upstream requires); dimensions fit the
            //   kernel's 32-bit coordinates (validate); the CPU runs SME2.
            unsafe {
                match self {
                    IndirectCall::PackLhs { run, offset, rows, chunks: (kcc, kcl), lhs: (table, pad), dst } => {
                        let off = offset(rows.start, kcc, kcl);
                        run(rows.len(), kcc, kcl, table.add(rows.start * kcc), 0, pad, dst.add(off).cast());
                    }
                    IndirectCall::Imatmul { run, stage, tile: (rows, cols), chunks, lhs, rhs, dst: (d, stride) } => {
                        let ((kcc, kcl), (r, rhs_offset), (mm, nn)) = (chunks, rhs, (rows.len(), cols.len()));
                        match (run, lhs, &stage) {
                            (ImatmulRun::Direct(f), ImatmulLhs::Table(table, pad), ImatmulStage::Clamp(c)) => {
                                let ro = rhs_offset(cols.start, kcc, kcl);
                                let (l, r) = (table.add(rows.start * kcc).cast(), r.add(ro).cast());
                                f(mm, nn, kcc, kcl, l, pad, 0, r, d, stride, c.min, c.max)
                            }
                            (_, ImatmulLhs::Packed(l, lhs_offset), _) => {
                                let lo: *const c_void = l.add(lhs_offset(rows.start, kcc, kcl)).cast::<c_void>();
                                let ro: *const c_void = r.add(rhs_offset(cols.start, kcc, kcl)).cast::<c_void>();
                                match (run, &stage) {
                                    (ImatmulRun::Clamp(f), ImatmulStage::Clamp(c)) => {
                                        f(mm, nn, kcc, kcl, lo, ro, d, stride, c.min, c.max)
                                    }
                                    (ImatmulRun::Requant(f), ImatmulStage::Requant(p)) => {
                                        f(mm, nn, kcc, kcl, lo, ro, d, stride, p)
                                    }
                                    _ => unreachable!("asserted by run_packed"),
                                }
                            }
                            _ => unreachable!("run_direct calls only a Direct kernel, with its table"),
                        }
                    }
                    IndirectCall::Depthwise { run, ptrs: (a, w, d), strides, dims, valid, pad, clamp } => {
                        let ((in_row, col, out_row), (c, in_w, ow)) = (strides, dims);
                        let ((valid_in, valid_out), (pl, pad_top), (lo, hi)) = (valid, pad, (clamp.min, clamp.max));
                        match run {
                            DwRun::Planar(run, _) => {
                                run(a, w, d, in_row, col, out_row, col, valid_in, valid_out, pl, pad_top, 0.0, lo, hi)
                            }
                            DwRun::DepthFirst(run, _) => run(
                                a, w, d, c, valid_in, in_w, valid_out, ow, pl, pad_top, in_row, col, out_row, col, lo,
                                hi,
                            ),
                        }
                    }
                }
            }
        }
    }

    /// A planar depthwise kernel's run (f32): `(src, rhs_packed, dst,
    /// in_stride_row, in_stride_col, dst_stride_row, dst_stride_col,
    /// valid_input_rows, valid_out_rows, pad_left, pad_top, pad_value,
    /// clamp_min, clamp_max)`.
    #[rustfmt::skip]
    pub(crate) type RunDwPlanar = unsafe extern "C" fn(
        *const c_void, *const c_void, *mut c_void, usize, usize, usize, usize, usize, usize, usize, usize, f32, f32, f32,
    );
    /// A depth-first depthwise kernel's run (f16): `(src, rhs_packed, dst,
    /// num_channels, src_rows, src_cols, dst_rows, dst_cols, pad_left,
    /// pad_top, in_stride_row, in_stride_col, out_stride_row,
    /// out_stride_col, clamp_min, clamp_max)`.
    #[rustfmt::skip]
    pub(crate) type RunDwDepthFirst = unsafe extern "C" fn(
        *const c_void, *const c_void, *mut c_void, usize, usize, usize, usize, usize, usize, usize, usize, usize,
        usize, usize, f32, f32,
    );

    /// How a 3x3 depthwise kernel is called.
    #[derive(Clone, Copy)]
    pub(crate) enum DwRun {
        /// f32, up to `m_step` (its getter) output rows of every column per
        /// call.
        Planar(RunDwPlanar, Getter),
        /// f16, a window of rows per call (the kernel builds its own pointer
        /// table), tiles of this many output rows.
        DepthFirst(RunDwDepthFirst, usize),
    }

    impl DwRun {
        /// The convolution with this kernel of the kernel `info`: `src` is
        /// `in_h x in_w x channels`, `dst` `out_h x out_w x channels`, both
        /// dense NHWC, the output rows split over `par`: the one driver of
        /// these kernels. Checks, in this order, the clamp, the shape, that
        /// `rhs` has the layout `layout` gives for the shape's channels (the
        /// kernel's packed layout for them at the vector length in force,
        /// with the gate of the kernel), then the lengths of `src` and
        /// `dst`; asserts `T` is the kernel's element (f32 planar, f16
        /// depth-first).
        #[allow(clippy::too_many_arguments)] // the kernel's operands
        pub(crate) fn run<T: Copy>(
            self,
            info: &KernelInfo,
            layout: impl FnOnce(usize) -> Result<(PackedLayout, Gate)>,
            shape: &DepthwiseShape,
            (src, rhs, dst): (&[T], &PackedRhs, &mut [T]),
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            clamp.check()?;
            shape.validate()?;
            let (l, g) = layout(shape.channels)?;
            rhs.expect(&l, info.name)?;
            error::at_least(src.len(), shape.src_len()?, "src")?;
            error::at_least(dst.len(), shape.dst_len()?, "dst")?;
            let (m_step, es) = match self {
                DwRun::Planar(_, m_step) => (query!(&g, m_step), 4),
                DwRun::DepthFirst(_, m_step) => (m_step, 2),
            };
            assert_eq!(size_of::<T>(), es, "{}: element type", info.name);
            let (s, oh, ow, c) = (*shape, shape.out_h()?, shape.out_w()?, shape.channels);
            let (in_row, col, out_row) = (s.in_w * c * es, c * es, ow * c * es);
            let t = Tiles { m_step, n_step: 1, mr: m_step, nr: 1, kr: 1, sr: 1 };
            let (sp, rp, dp) =
                (SendPtr(src.as_ptr() as *mut T), SendPtr(rhs.data().as_ptr() as *mut u8), SendPtr(dst.as_mut_ptr()));
            run_grid(par, info, oh, 1, ow * c * 9, &t, |rows, _| {
                let (sp, rp, dp) = (sp, rp, dp);
                // Planar kernels take up to m_step rows a call, depth-first
                // ones the whole tile.
                let step = if let DwRun::Planar(..) = self { m_step } else { rows.len().max(1) };
                for y0 in rows.clone().step_by(step) {
                    let pad_top = s.pad_top.saturating_sub(y0);
                    let iy = y0.saturating_sub(s.pad_top);
                    // Rows at or past the bottom: nothing is read (the pointer
                    // then stays at the start of `src`).
                    let (iy, valid_in) = if iy < s.in_h { (iy, s.in_h - iy) } else { (0, 0) };
                    let valid_out = (rows.end - y0).min(step);
                    let (a, w, d) = (sp.0.wrapping_add(iy * s.in_w * c), rp.0, dp.0.wrapping_add(y0 * ow * c));
                    let ptrs = (a.cast_const().cast(), w.cast_const().cast(), d.cast());
                    let (strides, dims) = ((in_row, col, out_row), (c, s.in_w, ow));
                    let (valid, pad) = ((valid_in, valid_out), (s.pad_left, pad_top));
                    IndirectCall::Depthwise { run: self, ptrs, strides, dims, valid, pad, clamp }.invoke();
                }
            });
            Ok(())
        }
    }
}

/// Runs `rows(range)` over `0..m` cut into multiples of `mr` (LHS packing).
pub(crate) fn run_rows<F>(par: Parallelism, info: &KernelInfo, m: usize, k: usize, mr: usize, rows: F)
where
    F: Fn(Range<usize>) + Sync,
{
    let work = m.saturating_mul(k).saturating_mul(64);
    let workers = par::workers(par, work, info.is_sme());
    let parts = par::Split::new(m, mr, workers);
    par::for_each_index(workers, parts.count(), |i| rows(parts.get(i)));
}

/// What a family's `prepare` checked once for one packed RHS and `m` rows
/// on one thread (the steady-state path of
/// [`PackedWeights::matmul`](crate::weights::PackedWeights::matmul)): the
/// shape, the kernel's blocking, the packed-LHS size and the calls to make.
/// [`SteadyCall::run`] trusts it: only a [`Fast`] impl's `prepare` makes
/// one, and only [`SteadyCall::bind`] calls that.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Prepared {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Block length (0 for families without one).
    pub bl: usize,
    pub t: Tiles,
    /// Bytes of the packed LHS for `m x k` (0 when the kernel reads the
    /// LHS directly).
    pub lhs_bytes: usize,
    /// The calls of the steady-state path ([`SteadyCall::run`]).
    #[cfg(target_arch = "aarch64")]
    pub steady: Steady,
}

/// Checks an `m x k` LHS of `len` elements with rows `stride` elements
/// apart: `m` and `k` nonzero, `stride >= k`, the last row inside it (in
/// this order).
pub(crate) fn check_lhs_rows(m: usize, k: usize, len: usize, stride: usize) -> crate::Result<()> {
    use crate::error;
    error::nonzero(m, "m")?;
    error::nonzero(k, "k")?;
    if stride < k {
        return Err(Error::bad_value("lhs_stride", stride, format!("less than k = {k}")));
    }
    let need = error::mul(m - 1, stride, "lhs")?.checked_add(k).ok_or_else(|| Error::Overflow("lhs".into()))?;
    error::at_least(len, need, "lhs")
}

/// The size checks every family's `prepare` makes for a call with a dense
/// `m x k` LHS and an `m x n` f32 output (none of the byte counts the
/// steady-state path computes may overflow).
pub(crate) fn check_prepared_sizes(m: usize, n: usize, k: usize) -> crate::Result<()> {
    use crate::error;
    error::nonzero(m, "m")?;
    error::nonzero(k, "k")?;
    error::mul(m, k, "lhs")?;
    error::mul(error::mul(m, n, "dst")?, 4, "dst")?;
    error::mul(k, 4, "lhs stride")?;
    error::mul(n, 4, "dst stride")?;
    Ok(())
}

// ---------------------------------------------------------------------------
// The steady state of `PackedWeights::matmul`: what a family's `prepare`
// checked, as data, and the one driver making its calls.

/// The LHS a steady-state call reads.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) enum SteadyLhs {
    /// Packed by this packer in one call (all `m` rows, `m_idx_start` 0)
    /// before the kernel runs.
    Packed(LhsPacker),
    /// Packed by this packer one row per call, each just before the
    /// kernel's call on that row, where the rows' [`Offset`] says.
    PackedPerRow(LhsPacker),
    /// Read directly by the kernel: row `r` of the activations.
    Direct,
}

/// How a steady-state call goes over the `m` rows: in kernel calls of all
/// of them or of one row each, each call's first row `r` at the offset
/// this gives in the packed LHS.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) enum SteadyRows {
    /// All `m` rows in one call, from the start of the LHS.
    Whole,
    /// One row per call, row `r` at the offset `Offset` gives (`r == 0`
    /// at 0, not asked: row 0 starts every packed LHS), or, without one (a
    /// direct LHS), row `r` of the activations.
    EachRow(Option<Offset>),
    /// As `Whole` (`false`) or `EachRow` (`true`), every call's offset
    /// asked, row 0's too (what that family's own loop did).
    Asked(Offset, bool),
}

/// What a steady-state call runs, filled by the family's `prepare` (which
/// made every check for it): the gate of the kernel and its packer, the
/// LHS packer, the kernel's run, the rows per call and the bytes of an
/// activation and an output element.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) struct Steady {
    gate: Gate,
    lhs: SteadyLhs,
    run: KernelRun,
    rows: SteadyRows,
    elems: (usize, usize),
}

#[cfg(target_arch = "aarch64")]
impl core::fmt::Debug for Steady {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Steady").field("gate", &self.gate).field("elems", &self.elems).finish_non_exhaustive()
    }
}

#[cfg(target_arch = "aarch64")]
impl Steady {
    /// The steady state of the kernel `gate` gated, reading `lhs`, running
    /// `run` over `rows`, with activations of `elems.0` bytes (those the
    /// LHS packer reads) and outputs of `elems.1` bytes (those `run`
    /// writes).
    pub(crate) fn new(gate: Gate, (lhs, run, rows): (SteadyLhs, KernelRun, SteadyRows), elems: (usize, usize)) -> Self {
        Steady { gate, lhs, run, rows, elems }
    }
}

#[cfg(target_arch = "aarch64")]
impl LhsPacker {
    /// Bytes of the source elements the packer reads.
    pub(crate) fn elem_bytes(&self) -> usize {
        self.elem_bytes
    }
}

/// A kernel with a steady-state path: the checks of its checked run made
/// once, by [`prepare`](Self::prepare), for `m` rows and one packed RHS.
///
/// # Safety
/// A `Prepared` that [`prepare`](Self::prepare) returns for `(m, rhs)`
/// describes calls (`steady`: the gate, packer, run and rows) that are
/// sound for `m` rows of `m x k` activations of `steady`'s element sizes,
/// an `m x n` output, the packed RHS `rhs` (or any bytes of its length:
/// a packed RHS holds numbers, no offsets) and a packed LHS of `lhs_bytes`
/// bytes, on a thread that runs [`info`](Self::info)'s kernel at the
/// vector length of the call to `prepare`: every rule of its packer and
/// kernel was checked for these shapes, layouts and sizes, as the checked
/// run checks them. `info` is the kernel's own registry entry.
pub(crate) unsafe trait Fast {
    /// The kernel's registry entry (its features and vector length kind).
    fn info(&self) -> &'static KernelInfo;
    /// The checks of the checked run for `m` rows of a dense LHS and
    /// `rhs`, on one thread; `None` when this kernel keeps the checked path.
    fn prepare(&self, m: usize, rhs: &PackedRhs) -> Result<Option<Prepared>>;
}

/// An element of activations and outputs a steady-state call reads and
/// writes: its size, and a code telling f16 from bf16.
pub(crate) trait Elem: Copy {
    /// `size_of::<Self>()`.
    const BYTES: usize;
    /// Distinct for each element type.
    const CODE: u8;
}

impl Elem for f32 {
    const BYTES: usize = 4;
    const CODE: u8 = 0;
}

impl Elem for half::f16 {
    const BYTES: usize = 2;
    const CODE: u8 = 1;
}

impl Elem for half::bf16 {
    const BYTES: usize = 2;
    const CODE: u8 = 2;
}

/// Values of one [`Elem`] type, as a steady-state call reads them: made
/// only from a slice of that type (so `len` values of `code`'s type,
/// aligned for it, at `ptr`, borrowed for `'a`).
#[derive(Clone, Copy)]
pub(crate) struct Values<'a> {
    ptr: *const u8,
    len: usize,
    code: u8,
    _v: core::marker::PhantomData<&'a [u8]>,
}

impl<'a> Values<'a> {
    /// The values of `v`.
    #[inline(always)]
    pub(crate) fn of<T: Elem>(v: &'a [T]) -> Self {
        Values { ptr: v.as_ptr().cast(), len: v.len(), code: T::CODE, _v: core::marker::PhantomData }
    }
}

/// [`Values`] to write: made only from a mutable slice of one [`Elem`]
/// type, borrowed for `'a`.
pub(crate) struct ValuesMut<'a> {
    ptr: *mut u8,
    len: usize,
    code: u8,
    _v: core::marker::PhantomData<&'a mut [u8]>,
}

impl<'a> ValuesMut<'a> {
    /// The values of `v`.
    #[inline(always)]
    pub(crate) fn of<T: Elem>(v: &'a mut [T]) -> Self {
        ValuesMut { ptr: v.as_mut_ptr().cast(), len: v.len(), code: T::CODE, _v: core::marker::PhantomData }
    }
}

/// A [`Prepared`] bound to what its calls need: the packed RHS's length,
/// the element type, the vector length and its own packed-LHS buffer.
/// [`run`](Self::run) compares each call's operands with them, then
/// makes the calls without the checks `prepare` made.
#[derive(Debug)]
pub(crate) struct SteadyCall {
    p: Prepared,
    /// The [`Elem::CODE`] of the activations and outputs.
    elem: u8,
    /// The length of the packed RHS `prepare` checked.
    rhs_len: usize,
    /// `m x k` and `m x n` (no overflow: `prepare` checked).
    x_len: usize,
    y_len: usize,
    vector: VectorKind,
    /// `vector`'s bytes on the thread that bound it.
    vector_bytes: usize,
    /// The packed LHS, `p.lhs_bytes` bytes, zeroed once; the packer
    /// rewrites the same bytes on every call, so padding it skips stays zero.
    lhs: crate::buffer::AlignedBuf,
}

impl SteadyCall {
    /// The steady state of `fast` for `m` rows of `T` and `rhs`: its
    /// `prepare`, bound to `rhs`'s length and this thread's vector length,
    /// with `lhs` (any buffer: reused, resized and zeroed) as its packed
    /// LHS. `None` when the kernel keeps the checked path (or its `prepare`
    /// fails: the checked path reports why), or its calls are not for
    /// elements of `T`. The caller has checked that the CPU runs `fast`'s
    /// kernel (`VectorKind::live_bytes`' condition).
    pub(crate) fn bind<T: Elem>(
        fast: &dyn Fast,
        m: usize,
        rhs: &PackedRhs,
        mut lhs: crate::buffer::AlignedBuf,
    ) -> Option<SteadyCall> {
        let p = fast.prepare(m, rhs).ok()??;
        #[cfg(target_arch = "aarch64")]
        if p.steady.elems != (T::BYTES, T::BYTES) {
            return None;
        }
        let vector = VectorKind::of(fast.info());
        lhs.reset_zeroed(p.lhs_bytes);
        let (x_len, y_len) = (p.m * p.k, p.m * p.n);
        let rhs_len = rhs.data().len();
        Some(SteadyCall { p, elem: T::CODE, rhs_len, x_len, y_len, vector, vector_bytes: vector.live_bytes(), lhs })
    }

    /// The packed-LHS buffer, for the next binding to reuse.
    pub(crate) fn into_lhs(self) -> crate::buffer::AlignedBuf {
        self.lhs
    }

    /// Rows, columns and depth of the call it was prepared for.
    pub(crate) fn dims(&self) -> (usize, usize, usize) {
        (self.p.m, self.p.n, self.p.k)
    }

    /// The packer's and the kernel's calls `prepare` described, on `x` (at
    /// least `m x k` values) into `y` (at least `m x n`), with `rhs` and
    /// `clamp`, in the order and with the arguments of the checked path
    /// (`m_idx_start` 0, the RHS from column 0, at offset 0). False, with
    /// nothing done, when an operand is not the one bound (`rhs`'s length,
    /// the element type), `x` or `y` is too short, the clamp is not a valid
    /// range or this thread's vector length is not the bound one.
    #[inline(always)]
    pub(crate) fn run(&mut self, x: Values<'_>, y: ValuesMut<'_>, rhs: &PackedRhs, clamp: Clamp) -> bool {
        let rhs = rhs.data();
        if x.code != self.elem
            || y.code != self.elem
            || x.len < self.x_len
            || y.len < self.y_len
            || rhs.len() != self.rhs_len
            || !clamp.is_valid()
            || self.vector.live_bytes() != self.vector_bytes
        {
            return false;
        }
        #[cfg(target_arch = "aarch64")]
        {
            let (p, s) = (&self.p, &self.p.steady);
            let (x, y, lhs) = (x.ptr, y.ptr, self.lhs.as_mut_ptr());
            // One kernel call for all rows, from offset 0 (every GEMV of a
            // per-row kernel too): inlined in the caller, the loop of
            // `run_steady_rows` out of line.
            let one_call = match s.rows {
                SteadyRows::Whole => true,
                SteadyRows::EachRow(_) => p.m == 1,
                SteadyRows::Asked(..) => false,
            };
            let (m, n, k, bl, t) = (p.m, p.n, p.k, p.bl, p.t);
            let (xb, ob) = s.elems;
            // `prepare` checked that none of these byte counts overflows.
            let (xs, ys) = (k * xb, n * ob);
            let rp = rhs.as_ptr().cast::<c_void>();
            // SAFETY: `p` is what an `unsafe impl Fast`'s `prepare` returned
            // for `m` and an RHS of `rhs`'s length (compared above), so (the
            // trait's contract) its calls are sound on this thread's vector
            // length (compared above with the one `prepare` ran at) for `m x
            // k` activations and an `m x n` output of `s.elems` bytes each
            // (`bind` compared them with its `T`'s, the values' type with
            // `T` above; `x` and `y` hold that many, compared above, and are
            // slices of that type, so aligned for it), the packed LHS of `p.lhs_bytes` bytes
            // (`self.lhs`, sized by `bind`, 64-byte aligned) and a valid
            // clamp (compared above). One call covers every row (all of
            // them, or the one row of a per-row kernel), from row 0 at offset
            // 0 of the packed LHS and column 0 of the RHS, as
            // `run_steady_rows` would call it; `run_steady_rows`' contract
            // is this one.
            unsafe {
                if !one_call || matches!(s.lhs, SteadyLhs::PackedPerRow(_)) {
                    run_steady_rows(p, x, lhs, rhs, y, clamp);
                } else {
                    let a = match s.lhs {
                        SteadyLhs::Packed(pack) => {
                            pack.run(m, k, bl, (t.mr, t.kr, t.sr), 0, x, xs, lhs);
                            lhs.cast::<c_void>()
                        }
                        _ => x.cast::<c_void>(),
                    };
                    s.run.call((m, n, k, bl), (a, xs), rp, (y.cast(), (ys, ob)), (clamp.min, clamp.max), NO_LUT);
                }
            }
        }
        #[cfg(not(target_arch = "aarch64"))]
        let _ = (x, y);
        true
    }
}

/// [`SteadyCall::run`] in general: the rows in calls of one row (or all),
/// each call's first row at its offset, per-row packing before each call.
///
/// # Safety
/// `p` is what an `unsafe impl Fast`'s `prepare` returned for `rhs` (its
/// contract then holds), on a thread at the vector length it saw; `x` holds
/// `p.m x p.k` values of `p.steady.elems.0` bytes, aligned for them,
/// `lhs` `p.lhs_bytes` writable bytes (64-byte aligned), `y` `p.m x p.n`
/// writable values of `p.steady.elems.1` bytes, aligned for them; `clamp`
/// is valid.
#[cfg(target_arch = "aarch64")]
#[inline(never)]
unsafe fn run_steady_rows(p: &Prepared, x: *const u8, lhs: *mut u8, rhs: &[u8], y: *mut u8, clamp: Clamp) {
    let s = &p.steady;
    let (m, n, k, bl, t) = (p.m, p.n, p.k, p.bl, p.t);
    let ((xb, ob), blocking) = (s.elems, (t.mr, t.kr, t.sr));
    // `prepare` checked that none of these byte counts overflows.
    let (xs, ys) = (k * xb, n * ob);
    let rp = rhs.as_ptr().cast::<c_void>();
    let step = if matches!(s.rows, SteadyRows::Whole | SteadyRows::Asked(_, false)) { m } else { 1 };
    // SAFETY: the caller's contract: `prepare` checked the layouts, shapes,
    // block rules and sizes for exactly these operands and this kernel, and
    // the gate proves the CPU runs it and its packer. A whole-LHS packer
    // reads the m x k values at `x`, rows `xs` bytes apart, into `lhs`, the
    // packer's size for m rows (`prepare` compared it), on its checked
    // blocking and block length (packers without one ignore it). Then each
    // call's rows r..r + h lie inside the m rows of `x` and `y`, and the
    // offset of row r is the packer's own (row 0 at 0; a per-row packer's
    // rows `Offset::Rows` apart, the layout `prepare` checked), inside the
    // packed LHS; the RHS from column 0 is at offset 0; single-row kernels
    // get one row per call, as `prepare` recorded.
    unsafe {
        if let SteadyLhs::Packed(pack) = s.lhs {
            pack.run(m, k, bl, blocking, 0, x, xs, lhs);
        }
        let mut r = 0;
        while r < m {
            let h = step.min(m - r);
            let lo = match s.rows {
                SteadyRows::EachRow(Some(o)) if r > 0 => o.at(&s.gate, r, k, bl),
                SteadyRows::Asked(o, _) => o.at(&s.gate, r, k, bl),
                _ => 0,
            };
            let d = y.add(r * ys).cast::<c_void>();
            let a = match s.lhs {
                SteadyLhs::Direct => x.add(r * xs).cast::<c_void>(),
                SteadyLhs::Packed(_) => lhs.add(lo).cast::<c_void>(),
                SteadyLhs::PackedPerRow(pack) => {
                    pack.run(h, k, bl, blocking, 0, x.add(r * xs), xs, lhs.add(lo));
                    lhs.add(lo).cast::<c_void>()
                }
            };
            s.run.call((h, n, k, bl), (a, xs), rp, (d, (ys, ob)), (clamp.min, clamp.max), NO_LUT);
            r += h;
        }
    }
}

/// A kernel of the per-thread form (`weights::parts`), writing f32: its
/// run and its RHS offset query `(n_idx, k[, bl])`, by signature.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy, Debug)]
pub(crate) enum ColumnRun {
    /// Packed LHS, the block length after `k`.
    Bl(RunBl<f32>, unsafe extern "C" fn(usize, usize, usize) -> usize),
    /// Packed LHS, no block length, f32 output.
    PlainF32(RunPlain<f32>, unsafe extern "C" fn(usize, usize) -> usize),
    /// Packed LHS, no block length, untyped (here f32) output.
    Plain(RunPlain<c_void>, unsafe extern "C" fn(usize, usize) -> usize),
    /// LHS read directly, rows `lhs_stride` bytes apart.
    Direct(RunDirect, unsafe extern "C" fn(usize, usize) -> usize),
}

#[cfg(target_arch = "aarch64")]
impl ColumnRun {
    /// Runs the kernel on columns `cols` of all `m` rows, unclamped: `lhs`
    /// the packed LHS of `m` rows (or, read directly, `m` f32 rows
    /// `lhs_stride` bytes apart), `rhs` the packed weights (`n x k`,
    /// blocks of `bl`), `dst` `m x cols.len()` f32 rows `dst_stride` bytes
    /// apart. Column 0 is at offset 0 of every upstream layout (each offset
    /// query scales the column index; `weights::parts`' test
    /// `rhs_offset_of_column_0_is_0` checks every kernel): the query is
    /// skipped there (one thread's whole run).
    ///
    /// # Safety
    /// The CPU runs the kernel at the vector length its packed weights
    /// were packed for; `rhs` holds the packed weights of the layout it was
    /// resolved for and `cols` is non-empty, within `n`, starting at a
    /// multiple of its `n_step`; `lhs` holds the packed LHS of `m` rows of
    /// its packer (or `m` aligned f32 rows `lhs_stride` bytes apart); `dst`
    /// is an `m x cols.len()` block of f32 rows `dst_stride` bytes apart,
    /// which no one else reads or writes during the call.
    #[allow(clippy::too_many_arguments)] // the kernel's operands
    #[inline(always)]
    pub(crate) unsafe fn run(
        self,
        (m, k, bl): (usize, usize, usize),
        cols: Range<usize>,
        (lhs, lhs_stride): (*const u8, usize),
        rhs: *const u8,
        (dst, dst_stride): (*mut f32, usize),
    ) {
        let (n, c, l) = (cols.len(), cols.start, lhs.cast::<c_void>());
        let (lo, hi) = (f32::MIN, f32::MAX);
        // SAFETY: the caller's contract; the offset queries are the
        // kernel's own (integers only), of a column start inside `rhs`.
        unsafe {
            let (run, ro): (KernelRun, usize) = match self {
                ColumnRun::Bl(run, off) => (KernelRun::BlF32(run), if c == 0 { 0 } else { off(c, k, bl) }),
                ColumnRun::PlainF32(run, off) => (KernelRun::PlainF32(run), if c == 0 { 0 } else { off(c, k) }),
                ColumnRun::Plain(run, off) => (KernelRun::Plain(run), if c == 0 { 0 } else { off(c, k) }),
                ColumnRun::Direct(run, off) => (KernelRun::Direct(run), if c == 0 { 0 } else { off(c, k) }),
            };
            run.call(
                (m, n, k, bl),
                (l, lhs_stride),
                rhs.add(ro).cast(),
                (dst.cast(), (dst_stride, 4)),
                (lo, hi),
                NO_LUT,
            )
        }
    }
}

/// The vector length `info`'s getters read on this thread now: the SME
/// streaming length for SME kernels, the SVE length for SVE kernels, else 0.
/// Linux lets a thread change its own, so a cached [`Prepared`] is only
/// reused while this stays the same. The caller has checked that the CPU
/// runs `info` (so the instruction reading it exists).
pub(crate) fn live_vector_bytes(info: &KernelInfo) -> usize {
    VectorKind::of(info).live_bytes()
}

/// Which vector length a kernel's getters read (see [`live_vector_bytes`]),
/// kept where a hot path should not look through the kernel's features.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VectorKind {
    /// Neither SVE nor SME: a fixed length.
    Fixed,
    /// The SVE length.
    Sve,
    /// The SME streaming length.
    Sme,
}

impl VectorKind {
    /// The kind of `info`'s kernel.
    pub(crate) fn of(info: &KernelInfo) -> VectorKind {
        if info.is_sme() {
            VectorKind::Sme
        } else if info.features.contains(&CpuFeature::Sve) {
            VectorKind::Sve
        } else {
            VectorKind::Fixed
        }
    }

    /// The bytes of this kind of vector on this thread now (0 for
    /// [`Fixed`](Self::Fixed)). The caller has checked that the CPU runs a
    /// kernel of this kind (so the instruction reading it exists).
    #[inline(always)]
    pub(crate) fn live_bytes(self) -> usize {
        match self {
            VectorKind::Fixed => 0,
            #[cfg(target_arch = "aarch64")]
            VectorKind::Sve => crate::cpu::rdvl_bytes(),
            #[cfg(target_arch = "aarch64")]
            VectorKind::Sme => crate::cpu::rdsvl_bytes(),
            #[cfg(not(target_arch = "aarch64"))]
            _ => 0,
        }
    }
}

/// The registry information of upstream kernel `u` as a kernel of
/// `family`: its features, any vector length, the tile kind and rank its
/// name and features give, and the packers it reads from.
#[cfg(target_arch = "aarch64")]
pub(crate) fn kernel_info(
    u: &'static kleidiai_sys::Ukernel,
    family: &'static str,
    lhs_packer: Option<&'static str>,
    rhs_packers: &'static [&'static str],
) -> KernelInfo {
    use crate::registry::info::{VectorLength, rank_for, tile_kind_for};
    KernelInfo {
        name: u.name,
        family,
        features: u.features,
        vector_length: VectorLength::Any,
        tile: tile_kind_for(u.name),
        lhs_packer,
        rhs_packers,
        rank: rank_for(u.name, u.features),
    }
}

/// A family's kernel list API over its `entries()` (each entry with an
/// `info: KernelInfo`): `infos()` for the registry and the `Kernel` type
/// with `Debug`, `all`, `by_name`, `select` and `info`. `select` takes the
/// output rows `m`, or with `select_rows: M` only the features (families
/// whose kernels do not depend on `m`). The `Kernel`'s entry field is
/// crate-visible in the first form (the steady state of `PackedWeights`
/// calls the entry's `run_prepared`, and tests outside the family's module
/// read it).
#[cfg(target_arch = "aarch64")]
macro_rules! kernel_type {
    ($entry:ty) => {
        $crate::families::engine::kernel_type!(@common [pub(crate)] $entry);

        impl Kernel {
            /// The best kernel that can run with `f` for `m` output rows.
            pub fn select(m: usize, f: &$crate::cpu::Features) -> Option<Kernel> {
                let best = $crate::registry::info::select_from(entries().iter().map(|e| &e.info), m, f)?;
                Self::by_name(best.name)
            }
        }
    };
    ($entry:ty, select_rows: $m:expr) => {
        $crate::families::engine::kernel_type!(@common [] $entry);

        impl Kernel {
            /// The best kernel that can run with `f` (there is one).
            pub fn select(f: &$crate::cpu::Features) -> Option<Kernel> {
                let best = $crate::registry::info::select_from(entries().iter().map(|e| &e.info), $m, f)?;
                Self::by_name(best.name)
            }
        }
    };
    (@common [$($vis:tt)*] $entry:ty) => {
        pub(crate) fn infos() -> Vec<&'static $crate::registry::info::KernelInfo> {
            // A loop, not `map().collect()`: one `Vec` push for every
            // family instead of an iterator chain instantiated per family.
            let mut v = Vec::with_capacity(entries().len());
            for e in entries() {
                v.push(&e.info);
            }
            v
        }

        /// One kernel of the family, with its packing.
        #[derive(Clone, Copy)]
        pub struct Kernel($($vis)* &'static $entry);

        impl core::fmt::Debug for Kernel {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.debug_tuple("Kernel").field(&self.0.info.name).finish()
            }
        }

        impl Kernel {
            /// Every kernel of the family in this build.
            pub fn all() -> impl Iterator<Item = Kernel> {
                entries().iter().map(Kernel)
            }

            /// The kernel with this upstream name.
            pub fn by_name(name: &str) -> Option<Kernel> {
                for e in entries() {
                    if e.info.name == name {
                        return Some(Kernel(e));
                    }
                }
                None
            }

            /// Registry information.
            pub fn info(&self) -> &'static $crate::registry::info::KernelInfo {
                &self.0.info
            }
        }
    };
}
#[cfg(target_arch = "aarch64")]
pub(crate) use kernel_type;

/// A family's interface-functions struct (or struct variant) `[$ty]` from an
/// upstream interface struct `$i` (upstream fills every function of these
/// interfaces): the tile getters, both packed offsets, and `run_matmul`
/// wrapped by `$run` (the identity by default).
#[cfg(target_arch = "aarch64")]
macro_rules! iface_fns {
    ([$($ty:tt)+], $i:expr) => {
        $crate::families::engine::iface_fns!([$($ty)+], $i, core::convert::identity)
    };
    ([$($ty:tt)+], $i:expr, $run:expr) => {
        $($ty)+ {
            m_step: $i.get_m_step.expect("m_step"),
            n_step: $i.get_n_step.expect("n_step"),
            mr: $i.get_mr.expect("mr"),
            nr: $i.get_nr.expect("nr"),
            kr: $i.get_kr.expect("kr"),
            sr: $i.get_sr.expect("sr"),
            lhs_offset: $i.get_lhs_packed_offset.expect("lhs offset"),
            rhs_offset: $i.get_rhs_packed_offset.expect("rhs offset"),
            run: $run($i.run_matmul.expect("run")),
        }
    };
}
#[cfg(target_arch = "aarch64")]
pub(crate) use iface_fns;

/// The `run` and `matmul` methods of a family's `Kernel` (an LHS of `$lhs`,
/// outputs of `$out`), with the docs `run_doc` and `matmul_doc`: `run`
/// forwards to the entry's `$run`, `matmul` packs the dense LHS with the
/// kernel's `pack_lhs` and calls `run`.
#[cfg(target_arch = "aarch64")]
macro_rules! run_matmul_methods {
    (
        lhs: $lhs:ty,
        out: $out:ty,
        run: $run:ident,
        run_doc: [$(#[$rd:meta])*],
        matmul_doc: [$(#[$md:meta])*] $(,)?
    ) => {
        $(#[$rd])*
        pub fn run(
            &self,
            lhs: &$crate::PackedLhs,
            rhs: &$crate::PackedRhs,
            dst: &mut [$out],
            clamp: $crate::Clamp,
            par: $crate::Parallelism,
        ) -> $crate::Result<()> {
            // The packed families' `run` is the engine's driver.
            #[allow(unused_imports)]
            use $crate::families::engine::PackedKernel as _;
            self.0.$run(lhs, rhs, dst, clamp, par)
        }

        $(#[$md])*
        pub fn matmul(
            &self,
            m: usize,
            lhs: &[$lhs],
            rhs: &$crate::PackedRhs,
            dst: &mut [$out],
            clamp: $crate::Clamp,
            par: $crate::Parallelism,
        ) -> $crate::Result<()> {
            let k = rhs.layout().k;
            let packed = self.pack_lhs(m, k, lhs, k, par)?;
            self.run(&packed, rhs, dst, clamp, par)
        }
    };
}
#[cfg(target_arch = "aarch64")]
pub(crate) use run_matmul_methods;

/// The `lhs_layout`, `pack_lhs` and `pack_lhs_into` methods of a family's
/// `Kernel` over its inner kernel (`self.0`), for an `m x k` LHS of `$lhs`
/// with rows `lhs_stride` elements apart, with the docs `layout_doc` and
/// `pack_doc`. `bl: name` adds a block-length argument after `k`;
/// `inner_bl` is what the inner `lhs_layout` and `into` take after `k`
/// (nothing by default); `extra` what `into` takes after `out`;
/// `layout_first` makes `pack_lhs` ask for the layout before it packs (its
/// error comes first).
#[cfg(target_arch = "aarch64")]
macro_rules! lhs_methods {
    (
        lhs: $lhs:ty,
        $(bl: $bl:ident,)?
        $(inner_bl: $ib:expr,)?
        into: $into:ident $(($($extra:expr),*))?,
        $(new: $first:ident,)?
        layout_doc: [$(#[$ld:meta])*],
        pack_doc: [$(#[$pd:meta])*] $(,)?
    ) => {
        $(#[$ld])*
        pub fn lhs_layout(&self, m: usize, k: usize $(, $bl: usize)?) -> $crate::Result<$crate::PackedLayout> {
            self.0.lhs_layout(m, k $(, $ib)?)
        }

        $(#[$pd])*
        #[allow(clippy::too_many_arguments)] // the strided LHS needs them all
        pub fn pack_lhs(
            &self,
            m: usize,
            k: usize,
            $($bl: usize,)?
            lhs: &[$lhs],
            lhs_stride: usize,
            par: $crate::Parallelism,
        ) -> $crate::Result<$crate::PackedLhs> {
            let mut out = $crate::families::engine::lhs_methods!(@new self, m, k, [$($bl)?] $(, $first)?);
            self.pack_lhs_into(m, k, $($bl,)? lhs, lhs_stride, par, &mut out)?;
            Ok(out)
        }

        /// As [`pack_lhs`](Self::pack_lhs), reusing `out`'s allocation.
        #[allow(clippy::too_many_arguments)] // the strided LHS needs them all
        pub fn pack_lhs_into(
            &self,
            m: usize,
            k: usize,
            $($bl: usize,)?
            lhs: &[$lhs],
            lhs_stride: usize,
            par: $crate::Parallelism,
            out: &mut $crate::PackedLhs,
        ) -> $crate::Result<()> {
            self.0.$into(m, k, $($ib,)? lhs, lhs_stride, par, out $($(, $extra)*)?)
        }
    };
    (@new $s:ident, $m:ident, $k:ident, [$($bl:ident)?]) => {
        $crate::PackedLhs::empty()
    };
    (@new $s:ident, $m:ident, $k:ident, [$($bl:ident)?], layout_first) => {
        $crate::PackedLhs::new($s.lhs_layout($m, $k $(, $bl)?)?, $crate::buffer::AlignedBuf::default())
    };
}
#[cfg(target_arch = "aarch64")]
pub(crate) use lhs_methods;

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;
    use kleidiai_sys as sys;

    /// A gate of a kernel the CPU runs (every aarch64 CPU runs a NEON one).
    fn some_gate() -> Gate {
        let f = Features::current();
        let info = crate::families::all_kernel_infos().into_iter().find(|i| i.supported(&f).is_ok());
        gate_with(info.expect("a kernel runs on every aarch64 CPU"), &f).unwrap()
    }

    #[test]
    fn a_gate_needs_a_kernel_the_features_run() {
        let none = Features::none();
        for info in crate::families::all_kernel_infos() {
            assert!(matches!(gate_with(info, &none), Err(Error::Unsupported { .. })), "{}", info.name);
        }
    }

    #[test]
    fn queries_answer_through_a_gate_and_refuse_a_zero_block_parameter() {
        let g = some_gate();
        // The qai8dxp LHS packer (plain C): 4 rows of k = 64 in blocks of
        // mr = 4 take 4 * (64 + 8) bytes (k padded to 32, a zero point and
        // a scale per row).
        let size = query!(&g, sys::kai_get_lhs_packed_size_lhs_quant_pack_qai8dxp_f32, 4, 64, 4, 4, 1);
        assert_eq!(size, 4 * (64 + 8));
        // m and k may be anything (an index of 0 is fine)...
        assert_eq!(query!(&g, sys::kai_get_lhs_packed_offset_lhs_quant_pack_qai8dxp_f32, 0, 64, 4, 4, 1), 0);
        // ...but upstream divides by the block parameters: a zero one panics
        // here instead of dividing by zero in C.
        for bad in [(0, 4, 1), (4, 0, 1), (4, 4, 0)] {
            let r = std::panic::catch_unwind(|| {
                query!(&g, sys::kai_get_lhs_packed_size_lhs_quant_pack_qai8dxp_f32, 4, 64, bad.0, bad.1, bad.2)
            });
            assert!(r.is_err(), "{bad:?}");
        }
    }
}
