//! The C ABI of [`kleidiai::ggml::ThreadedWeights`]: ggml's KleidiAI buffer
//! driven by ggml's own threads (the shim in `ggml/` uses it): weights
//! repacked once into ggml's buffer (the packed payloads only), viewed by the
//! handle the repack returns; each thread of a graph node calls
//! `kairs_ggml_mul_mat` with its ith/nth and ggml's barrier and chunk
//! counter, so no thread pool of kleidiai-rs runs inside ggml's.
//! Kernel choice, SME thread cap, hybrid SME + NEON runs, LHS row split and
//! column chunks follow ggml's own KleidiAI path.

use crate::{KairsDesc, bytes, desc, ggml_type, guard, guard_boxed, invalid, positive};
use kleidiai::Error;
use kleidiai::ggml::{F16PerCall, GgmlType, RawOperands, SharedBytes, SmeSetting, Tensor, ThreadTeam, ThreadedWeights};
use std::collections::HashMap;
use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::{Mutex, OnceLock};

/// ggml's threads of one graph node (`kairs_ggml_team` in C). Contract:
/// every thread of the node calls with the same arguments and its own `ith`;
/// `barrier` returns when all `nth` threads reached it and publishes their
/// writes (`ggml_barrier`); `chunk_add` is an atomic fetch-and-add returning
/// the value before, on a counter the node shares, `chunk_set` stores to it
/// (`ggml_threadpool_chunk_add` / `_set`).
#[repr(C)]
#[derive(Debug)]
pub struct KairsGgmlTeam {
    /// This thread's index.
    pub ith: c_int,
    /// Threads.
    pub nth: c_int,
    /// ggml's chunks per thread (`GGML_KLEIDIAI_CHUNK_MULTIPLIER`, 4; 1 on NUMA).
    pub chunk_multiplier: c_int,
    /// `ggml_barrier`.
    pub barrier: Option<unsafe extern "C" fn(ctx: *mut c_void)>,
    /// `ggml_threadpool_chunk_set`.
    pub chunk_set: Option<unsafe extern "C" fn(ctx: *mut c_void, value: c_int)>,
    /// `ggml_threadpool_chunk_add` (returns the value before the addition).
    pub chunk_add: Option<unsafe extern "C" fn(ctx: *mut c_void, delta: c_int) -> c_int>,
    /// Passed to the three functions (ggml's threadpool).
    pub ctx: *mut c_void,
}

/// A checked [`KairsGgmlTeam`]: its callbacks are all there (read where
/// the caller keeps them, at each use) and `0 <= ith < nth` (copied once
/// checked: a thread index that changes under a call cannot pass).
struct Team<'a> {
    t: &'a KairsGgmlTeam,
    ith: usize,
    nth: usize,
}

impl<'a> Team<'a> {
    #[inline]
    fn new(t: &'a KairsGgmlTeam) -> Result<Team<'a>, Error> {
        // Every call of every thread comes here: the usual answer first.
        let (ith, nth) = (t.ith, t.nth);
        if t.barrier.is_some() && t.chunk_set.is_some() && t.chunk_add.is_some() && 0 <= ith && ith < nth {
            return Ok(Team { t, ith: ith as usize, nth: nth as usize });
        }
        Err(Team::refused(t))
    }

    /// [`new`](Self::new)'s checks one by one, for the error.
    #[cold]
    #[inline(never)]
    fn refused(t: &KairsGgmlTeam) -> Error {
        if t.barrier.is_none() || t.chunk_set.is_none() || t.chunk_add.is_none() {
            return Error::Null { what: "team callback (barrier, chunk_set or chunk_add)" };
        }
        let nth = match positive(t.nth.into(), "team nth") {
            Ok(nth) => nth,
            Err(e) => return e,
        };
        // (Read again: a value that changed since the check is named as read now.)
        index(t.ith, nth, "team ith").err().unwrap_or(Error::OutOfRange {
            what: "team ith",
            index: t.ith.into(),
            len: nth,
        })
    }
}

// SAFETY: the caller of kairs_ggml_mul_mat guarantees the contract of
// `kairs_ggml_team` in kleidiai_rs.h, which is ThreadTeam's: every thread of
// the node calls with the same arguments, the barrier is ggml's, the counter
// ggml's atomic one.
unsafe impl ThreadTeam for Team<'_> {
    fn ith(&self) -> usize {
        self.ith
    }
    fn nth(&self) -> usize {
        self.nth
    }
    fn barrier(&self) {
        if let Some(f) = self.t.barrier {
            // SAFETY: the caller's function and context (contract above).
            unsafe { f(self.t.ctx) }
        }
    }
    fn chunk_set(&self, value: usize) {
        if let Some(f) = self.t.chunk_set {
            // SAFETY: as above; values are chunk indices or columns (< 2^31, checked by the shapes).
            unsafe { f(self.t.ctx, c_int::try_from(value).unwrap_or(c_int::MAX)) }
        }
    }
    fn chunk_add(&self, delta: usize) -> usize {
        let Some(f) = self.t.chunk_add else { return usize::MAX };
        // SAFETY: as above.
        let v = unsafe { f(self.t.ctx, c_int::try_from(delta).unwrap_or(c_int::MAX)) };
        usize::try_from(v).unwrap_or(usize::MAX)
    }
}

/// Caller memory a handle packs into, then views for its whole life
/// (`kairs_ggml_repack` to `kairs_ggml_close`).
struct CallerMemory {
    ptr: *mut u8,
    len: usize,
}
// SAFETY: written only by `kairs_ggml_repack` (through `as_mut`, during the
// call), then only read; `kairs_ggml_repack`'s contract keeps the bytes
// valid, unchanged and used by nobody else until `kairs_ggml_close`.
unsafe impl Send for CallerMemory {}
// SAFETY: as above.
unsafe impl Sync for CallerMemory {}
impl AsRef<[u8]> for CallerMemory {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: non-null (checked in kairs_ggml_repack), valid for `len`
        // bytes and not written while the handle lives (repack's contract).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}
impl AsMut<[u8]> for CallerMemory {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: non-null, writable for `len` bytes and used by nobody else
        // (repack's contract); `&mut self` makes this borrow the only one.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Repacked weights viewed in caller memory (`kairs_ggml_weights` in C,
/// opaque): the handle `kairs_ggml_repack` returns. It holds what the packed
/// bytes are (kernels, shape, layouts, offsets); the caller's memory holds
/// only the bytes the kernels read.
pub struct KairsGgmlWeights(ThreadedWeights);

fn sme_of(sme: c_int) -> Result<SmeSetting, Error> {
    match sme {
        -1 => Ok(SmeSetting::Auto),
        0 => Ok(SmeSetting::Off),
        n if n > 0 => Ok(SmeSetting::Cap(n as usize)),
        _ => Err(Error::BadValue {
            what: "sme",
            value: sme.to_string(),
            why: "must be -1 (automatic), 0 (off) or a positive thread cap".into(),
        }),
    }
}

fn typ_of(t: i32) -> Result<GgmlType, Error> {
    ggml_type(t)
}

/// `i` as an index below `len`.
fn index(i: c_int, len: usize, what: &'static str) -> Result<usize, Error> {
    usize::try_from(i).ok().filter(|i| *i < len).ok_or_else(|| Error::OutOfRange { what, index: i.into(), len })
}

/// Checks a destination descriptor's type is F32.
fn dst_f32(t: i32) -> Result<(), Error> {
    match typ_of(t)? {
        GgmlType::F32 => Ok(()),
        other => Err(Error::ElementType { what: "dst", expected: "F32", got: other.name() }),
    }
}

/// # Safety
/// `h` is NULL or a handle from `kairs_ggml_repack` not yet closed.
unsafe fn handle<'a>(h: *const KairsGgmlWeights) -> Result<&'a ThreadedWeights, Error> {
    // SAFETY: the caller's guarantee; NULL is an error.
    unsafe { h.as_ref() }.map(|w| &w.0).ok_or_else(|| Error::Null { what: "weights handle" })
}

fn disjoint(a: (*const u8, usize), b: (*const u8, usize)) -> bool {
    let (a0, b0) = (a.0 as usize, b.0 as usize);
    a.1 == 0 || b.1 == 0 || a0.saturating_add(a.1) <= b0 || b0.saturating_add(b.1) <= a0
}

/// Reads GGML_KLEIDIAI_SME the way ggml reads it: `*setting` = -1 (unset or
/// invalid), 0 or N; `*warning` (if `warning` is not NULL) = NULL, or the text
/// to log for an invalid value (ggml warns and uses the automatic cap).
///
/// # Safety
/// `setting` is writable; `warning` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_ggml_sme_setting(setting: *mut c_int, warning: *mut *const c_char) -> c_int {
    static WARNING: OnceLock<CString> = OnceLock::new();
    guard(|| {
        // SAFETY: the caller's guarantee; NULL is an error.
        let out = unsafe { setting.as_mut() }.ok_or_else(|| Error::Null { what: "setting" })?;
        let (s, w) = SmeSetting::from_env();
        *out = match s {
            SmeSetting::Auto => -1,
            SmeSetting::Off => 0,
            SmeSetting::Cap(n) => c_int::try_from(n).unwrap_or(c_int::MAX),
        };
        // SAFETY: the caller's guarantee (NULL allowed).
        if let Some(wp) = unsafe { warning.as_mut() } {
            *wp = match w {
                Some(w) => WARNING.get_or_init(|| CString::new(w).unwrap_or_default()).as_ptr(),
                None => std::ptr::null(),
            };
        }
        Ok(())
    })
}

/// Bytes `kairs_ggml_repack` writes for 2-D weights of ggml type `type` (Q4_0,
/// Q8_0 or F32) and sizes `ne[4]`, from the shape alone: the packed payloads
/// only (each layout starting 64-byte aligned), what the kernels read; what
/// they are stays in the handle. An error means these weights are not taken
/// (type, shape, or no kernel on this CPU): leave them to ggml's own code.
/// `sme`: -1 automatic (SME when present, capped at 1 thread), 0 no SME
/// kernels, N at most N threads on SME kernels (GGML_KLEIDIAI_SME).
///
/// # Safety
/// `ne` points to 4 values, `size` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_ggml_packed_size(type_: i32, ne: *const i64, sme: c_int, size: *mut usize) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee; NULL is an error.
        let ne = unsafe { ne.cast::<[i64; 4]>().as_ref() }.ok_or_else(|| Error::Null { what: "ne" })?;
        // SAFETY: as above.
        let out = unsafe { size.as_mut() }.ok_or_else(|| Error::Null { what: "size" })?;
        *out = ThreadedWeights::packed_size(typ_of(type_)?, *ne, sme_of(sme)?)?;
        Ok(())
    })
}

/// Repacks `src0` (contiguous rows of ggml type `src0->type`) into `dst` and
/// returns in `*out` the handle that views it, its kernels resolved for this
/// CPU (`*out` is NULL after an error). `dst` receives only the packed
/// payloads, the first `kairs_ggml_packed_size` bytes (bytes after them are not
/// touched); it must be 64-byte aligned, hold at least that size and not
/// overlap `data`, all checked (with the type, the shape and that a kernel
/// runs here) before anything is packed or written. The identity of the bytes comes from this
/// call, not from the bytes: the handle alone says what they are.
///
/// # Safety
/// `src0` valid, `data` readable for `data_size` bytes during the call, `out`
/// writable; `dst` readable and writable for `dst_size` bytes from this call
/// until `kairs_ggml_close` of the handle, and neither written nor freed by
/// anyone else in that time (after an error: only during the call).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_ggml_repack(
    src0: *const KairsDesc,
    data: *const c_void,
    data_size: usize,
    sme: c_int,
    dst: *mut c_void,
    dst_size: usize,
    out: *mut *mut KairsGgmlWeights,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee; NULL is an error.
        let o = unsafe { out.as_mut() }.ok_or_else(|| Error::Null { what: "out" })?;
        *o = std::ptr::null_mut();
        // SAFETY: the caller's guarantees; NULL is an error.
        let (d, data) = unsafe { (desc(src0, "src0")?, bytes(data, data_size, "src0 data")?) };
        if dst.is_null() {
            return Err(Error::Null { what: "dst" });
        }
        if dst_size == 0 {
            return Err(Error::ZeroDimension { what: "dst_size" });
        }
        if !disjoint((data.as_ptr(), data.len()), (dst.cast_const().cast(), dst_size)) {
            return Err(invalid("src0 data and dst overlap"));
        }
        let t = Tensor { typ: typ_of(d.type_)?, ne: d.ne, nb: d.nb, data };
        let mem = CallerMemory { ptr: dst.cast(), len: dst_size };
        let w = ThreadedWeights::repack(&t, sme_of(sme)?, mem)?;
        *o = Box::into_raw(Box::new(KairsGgmlWeights(w)));
        Ok(())
    })
}

/// Closes a handle (NULL is ignored).
///
/// # Safety
/// `w` is NULL or an open handle, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_ggml_close(w: *mut KairsGgmlWeights) {
    if !w.is_null() {
        // SAFETY: made by Box::into_raw in kairs_ggml_repack, closed once (contract).
        drop(unsafe { Box::from_raw(w) });
    }
}

/// ggml's work size of mul_mat with `m` activation rows (the same for every
/// thread count).
///
/// # Safety
/// `w` an open handle, `size` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_ggml_work_size(w: *const KairsGgmlWeights, m: i64, size: *mut usize) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees; NULL is an error.
        let (w, out) = unsafe { (handle(w)?, size.as_mut().ok_or_else(|| Error::Null { what: "size" })?) };
        *out = w.work_size(positive(m, "m")?)?;
        Ok(())
    })
}

/// The kernel thread `ith` of `nth` runs for `m` rows (static string).
///
/// # Safety
/// `w` an open handle, `name` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_ggml_kernel(
    w: *const KairsGgmlWeights,
    m: i64,
    ith: c_int,
    nth: c_int,
    name: *mut *const c_char,
) -> c_int {
    static NAMES: OnceLock<Mutex<HashMap<&'static str, CString>>> = OnceLock::new();
    guard(|| {
        // SAFETY: the caller's guarantees; NULL is an error.
        let (w, out) = unsafe { (handle(w)?, name.as_mut().ok_or_else(|| Error::Null { what: "name" })?) };
        let nth = positive(nth.into(), "nth")?;
        let ith = index(ith, nth, "ith")?;
        let k = w.kernel_for(positive(m, "m")?, ith, nth);
        let mut names = NAMES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
        // The CString's heap buffer never moves or dies: the pointer stays valid.
        *out = names.entry(k).or_insert_with(|| CString::new(k).unwrap_or_default()).as_ptr();
        Ok(())
    })
}

/// Thread `team->ith`'s part of ggml mul_mat: dst = src1 x weights^T, src1 F32
/// [k, m, ne12, ne13], dst F32 [n, m, ne12, ne13] (the weights broadcast over
/// both batch dimensions); `work` at least `kairs_ggml_work_size`
/// bytes. Every thread of the node calls it (the contract of
/// `kairs_ggml_team`); src1, dst and work must not overlap, and nobody else uses
/// dst and work during the call. All checks happen before the first barrier, and
/// an error still takes part in every barrier, so all threads return.
///
/// # Safety
/// As documented there: every pointer valid for its size, `team` the
/// calling ggml thread's, all threads of the node calling with the same
/// arguments.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // mirrors the C signature
pub unsafe extern "C" fn kairs_ggml_mul_mat(
    w: *const KairsGgmlWeights,
    src1: *const KairsDesc,
    src1_data: *const c_void,
    src1_size: usize,
    dst: *const KairsDesc,
    dst_data: *mut c_void,
    dst_size: usize,
    work: *mut c_void,
    work_size: usize,
    team: *const KairsGgmlTeam,
) -> c_int {
    guard_boxed(|| {
        // SAFETY: the caller's guarantees; NULL is an error.
        let (w, s1, d) = unsafe { (handle(w), desc(src1, "src1"), desc(dst, "dst")) };
        // (Errors come boxed: a success is one word.)
        let (w, s1, d) = (w.map_err(Box::new)?, s1.map_err(Box::new)?, d.map_err(Box::new)?);
        let src1 = (s1.type_, &s1.ne, &s1.nb, src1_data, src1_size);
        let dst = (d.type_, &d.ne, &d.nb, dst_data, dst_size);
        // SAFETY: this function's contract is mul_mat_call's.
        unsafe { mul_mat_call(w, src1, dst, (work, work_size), team) }
    })
}

/// [`kairs_ggml_mul_mat`] with src1 and dst given by ggml's own arrays
/// (a tensor's `type`, `ne`, `nb` and `data`, read where the tensor keeps
/// them: no descriptor is built) and valid for the bytes their `ne`/`nb`
/// span (`ggml_nbytes`), which the caller vouches for instead of passing
/// sizes. The same checks and errors, on those spans; the shim's call.
///
/// # Safety
/// As [`kairs_ggml_mul_mat`], with `src1_ne`/`dst_ne` pointing to 4 sizes,
/// `src1_nb`/`dst_nb` to 4 strides, and src1 and dst valid for the bytes
/// those span.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // mirrors the C signature
pub unsafe extern "C" fn kairs_ggml_mul_mat_nb(
    w: *const KairsGgmlWeights,
    src1_type: i32,
    src1_ne: *const i64,
    src1_nb: *const usize,
    src1_data: *const c_void,
    dst_type: i32,
    dst_ne: *const i64,
    dst_nb: *const usize,
    dst_data: *mut c_void,
    work: *mut c_void,
    work_size: usize,
    team: *const KairsGgmlTeam,
) -> c_int {
    guard_boxed(|| {
        // SAFETY: the caller's guarantees (4 values each); NULL is an error.
        let (w, ne1, nb1, ned, nbd) = unsafe {
            (
                handle(w).map_err(Box::new)?,
                src1_ne.cast::<[i64; 4]>().as_ref().ok_or_else(|| Box::new(Error::Null { what: "src1 ne" }))?,
                src1_nb.cast::<[usize; 4]>().as_ref().ok_or_else(|| Box::new(Error::Null { what: "src1 nb" }))?,
                dst_ne.cast::<[i64; 4]>().as_ref().ok_or_else(|| Box::new(Error::Null { what: "dst ne" }))?,
                dst_nb.cast::<[usize; 4]>().as_ref().ok_or_else(|| Box::new(Error::Null { what: "dst nb" }))?,
            )
        };
        let src1 = (src1_type, ne1, nb1, src1_data, RawOperands::SPAN);
        let dst = (dst_type, ned, nbd, dst_data, RawOperands::SPAN);
        // SAFETY: this function's contract is mul_mat_call's, the sizes
        // being the spans (RawOperands::SPAN).
        unsafe { mul_mat_call(w, src1, dst, (work, work_size), team) }
    })
}

/// An operand of [`mul_mat_call`]: ggml type id, ne, nb, data, bytes.
type Operand<'a, P> = (i32, &'a [i64; 4], &'a [usize; 4], P, usize);

/// The two mul_mat entry points' call: the team and types checked, then
/// [`ThreadedWeights::mul_mat_operands`].
///
/// # Safety
/// [`kairs_ggml_mul_mat`]'s contract, for these operands (`team` NULL or
/// valid).
#[inline(always)]
unsafe fn mul_mat_call(
    w: &ThreadedWeights,
    src1: Operand<'_, *const c_void>,
    dst: Operand<'_, *mut c_void>,
    work: (*mut c_void, usize),
    team: *const KairsGgmlTeam,
) -> Result<(), Box<Error>> {
    // SAFETY: the caller's guarantee; NULL is an error.
    let team = unsafe { team.as_ref() }.ok_or_else(|| Box::new(Error::Null { what: "team" }))?;
    let team = Team::new(team).map_err(Box::new)?;
    let mult = usize::try_from(team.t.chunk_multiplier).unwrap_or(1).max(1);
    if dst.0 != GgmlType::F32 as i32 {
        dst_f32(dst.0).map_err(Box::new)?;
    }
    // A negative type id is no ggml type: ggml_type's error names it.
    let t1 = u32::try_from(src1.0).or_else(|_| ggml_type(src1.0).map(|t| t as u32)).map_err(Box::new)?;
    let call = RawOperands {
        src1: (t1, src1.1, src1.2, src1.3.cast(), src1.4),
        dst: (dst.1, dst.2, dst.3.cast(), dst.4),
        work: (work.0.cast(), work.1),
        multiplier: mult,
    };
    // SAFETY: the caller's contract (src1 readable and not written, dst and
    // work used only by the node's threads during the call) is
    // mul_mat_operands', which checks NULL pointers, overlaps and sizes.
    unsafe { w.mul_mat_operands(&call, &team) }.map_err(Box::new)
}

/// Thread `ith` of `nth`'s share of ggml get_rows (rows split as ggml splits
/// them): dst row i, at `i * dst_row_stride` bytes, = weight row `rows[i]` as
/// f32, from the first packed layout.
///
/// # Safety
/// `w` an open handle; `rows` readable for `n_rows` values; `dst` writable
/// for `dst_size` bytes, rows of this thread's share written by it alone.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // mirrors the C signature
pub unsafe extern "C" fn kairs_ggml_get_rows(
    w: *const KairsGgmlWeights,
    rows: *const i32,
    n_rows: usize,
    dst: *mut c_void,
    dst_size: usize,
    dst_row_stride: usize,
    ith: c_int,
    nth: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee; NULL is an error.
        let w = unsafe { handle(w)? };
        let rb = n_rows.checked_mul(4).ok_or_else(|| Error::Overflow("rows".into()))?;
        // SAFETY: as above.
        let r = unsafe { bytes(rows.cast(), rb, "rows") }?;
        if r.as_ptr() as usize % 4 != 0 {
            return Err(Error::Misaligned { what: "rows", align: 4 });
        }
        let idx: Vec<i32> = r.chunks_exact(4).map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect();
        if !disjoint((r.as_ptr(), r.len()), (dst.cast(), dst_size)) {
            return Err(invalid("rows and dst overlap"));
        }
        // SAFETY: valid for dst_size bytes; each thread writes only its share
        // of rows (get_rows partitions them; the caller's contract).
        let d = unsafe { SharedBytes::from_raw_parts(dst.cast(), dst_size)? };
        let nth = positive(nth.into(), "nth")?;
        let ith = usize::try_from(ith).map_err(|_| Error::OutOfRange { what: "ith", index: ith.into(), len: nth })?;
        w.get_rows(&idx, &d, dst_row_stride, ith, nth)
    })
}

/// F16 weights stay outside ggml's KleidiAI buffer; with more than one
/// activation row on SME2 ggml's path packs them per call for its bf16 kernel
/// (`kleidiai::ggml::F16PerCall`): thread 0 transposes and packs the weights
/// into the work buffer while every thread packs its LHS rows, a barrier, then
/// ggml's static column split.
///
/// This returns the kernel of ggml's F16 table when it runs here with `sme`
/// (static string); an error when none does (ggml's own code computes F16
/// weights).
///
/// # Safety
/// `name` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_ggml_f16_kernel(sme: c_int, name: *mut *const c_char) -> c_int {
    static NAME: OnceLock<CString> = OnceLock::new();
    guard(|| {
        // SAFETY: the caller's guarantee; NULL is an error.
        let out = unsafe { name.as_mut() }.ok_or_else(|| Error::Null { what: "name" })?;
        let k = F16PerCall::kernel(sme_of(sme)?).ok_or_else(|| Error::Unsupported {
            kernel: "ggml F16 per call",
            why: "no kernel of ggml's F16 table runs here (it needs SME2, and GGML_KLEIDIAI_SME not 0)".into(),
        })?;
        *out = NAME.get_or_init(|| CString::new(k).unwrap_or_default()).as_ptr();
        Ok(())
    })
}

/// 1 when ggml's KleidiAI path takes this F16 mul_mat (and so does this one):
/// F16 weights `src0`, F32 activations `src1` with more than one row, batches
/// contiguous in both, a kernel here; else 0.
///
/// # Safety
/// `src0` and `src1` valid descriptors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_ggml_f16_accepts(src0: *const KairsDesc, src1: *const KairsDesc, sme: c_int) -> c_int {
    let mut yes = false;
    let status = guard(|| {
        // SAFETY: the caller's guarantee; NULL is an error.
        let (a, b) = unsafe { (desc(src0, "src0")?, desc(src1, "src1")?) };
        yes = a.type_ == GgmlType::F16 as i32
            && b.type_ == GgmlType::F32 as i32
            && F16PerCall::accepts((a.ne, a.nb), (b.ne, b.nb), sme_of(sme)?);
        Ok(())
    });
    c_int::from(status == crate::KAIRS_OK && yes)
}

/// The work buffer one F16 mul_mat (`kairs_ggml_f16_mul_mat`) needs.
///
/// # Safety
/// `src0`, `src1` valid descriptors, `size` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_ggml_f16_work_size(
    src0: *const KairsDesc,
    src1: *const KairsDesc,
    sme: c_int,
    size: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees; NULL is an error.
        let (a, b, out) = unsafe {
            (desc(src0, "src0")?, desc(src1, "src1")?, size.as_mut().ok_or_else(|| Error::Null { what: "size" })?)
        };
        *out = F16PerCall::work_size(a.ne, b.ne, sme_of(sme)?)?;
        Ok(())
    })
}

/// Thread `team->ith`'s part of an F16 mul_mat, as `kairs_ggml_mul_mat` (same
/// team contract; src0, src1, dst and work must not overlap).
///
/// # Safety
/// As `kairs_ggml_mul_mat`, with `src0_data` readable for `src0_size` bytes.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // mirrors the C signature
pub unsafe extern "C" fn kairs_ggml_f16_mul_mat(
    src0: *const KairsDesc,
    src0_data: *const c_void,
    src0_size: usize,
    src1: *const KairsDesc,
    src1_data: *const c_void,
    src1_size: usize,
    dst: *const KairsDesc,
    dst_data: *mut c_void,
    dst_size: usize,
    work: *mut c_void,
    work_size: usize,
    team: *const KairsGgmlTeam,
    sme: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees; NULL is an error.
        let (s0, s1, d) = unsafe { (desc(src0, "src0")?, desc(src1, "src1")?, desc(dst, "dst")?) };
        // SAFETY: as above.
        let team = Team::new(unsafe { team.as_ref() }.ok_or_else(|| Error::Null { what: "team" })?)?;
        // SAFETY: as above (read-only, shared by the node's threads).
        let (w, x) = unsafe { (bytes(src0_data, src0_size, "src0 data")?, bytes(src1_data, src1_size, "src1 data")?) };
        let (dp, wp) = (dst_data.cast::<u8>(), work.cast::<u8>());
        let (dc, wc) = (dp.cast_const(), wp.cast_const());
        for (a, b) in [
            ((dc, dst_size), (wc, work_size)),
            ((dc, dst_size), (x.as_ptr(), x.len())),
            ((dc, dst_size), (w.as_ptr(), w.len())),
            ((wc, work_size), (x.as_ptr(), x.len())),
            ((wc, work_size), (w.as_ptr(), w.len())),
        ] {
            if !disjoint(a, b) {
                return Err(invalid("src0, src1, dst and work overlap"));
            }
        }
        dst_f32(d.type_)?;
        // SAFETY: dst and work are valid for their sizes and used only by the
        // node's threads during this call (the caller's contract); the call
        // partitions them between the threads.
        let (dst_b, work_b) =
            unsafe { (SharedBytes::from_raw_parts(dp, dst_size)?, SharedBytes::from_raw_parts(wp, work_size)?) };
        let src0 = Tensor { typ: typ_of(s0.type_)?, ne: s0.ne, nb: s0.nb, data: w };
        let src1 = Tensor { typ: typ_of(s1.type_)?, ne: s1.ne, nb: s1.nb, data: x };
        F16PerCall::mul_mat(&src0, &src1, d.ne, d.nb, &dst_b, &work_b, &team, sme_of(sme)?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        KAIRS_ERR_ALIGNMENT, KAIRS_ERR_BUFFER, KAIRS_ERR_INVALID, KAIRS_ERR_RANGE, KAIRS_ERR_SHAPE, KAIRS_ERR_TYPE,
        KAIRS_OK, KAIRS_TYPE_F32, KAIRS_TYPE_Q4_0, KAIRS_TYPE_Q8_0,
    };
    use kleidiai::AlignedBuf;
    use kleidiai::ggml::{SingleThread, q4_0_as_bytes, q8_0_as_bytes, quantize_q4_0, quantize_q8_0};

    fn last_error() -> String {
        // SAFETY: kairs_last_error returns a valid C string.
        unsafe { std::ffi::CStr::from_ptr(crate::kairs_last_error()) }.to_string_lossy().into_owned()
    }

    unsafe extern "C" fn no_barrier(_: *mut c_void) {}
    unsafe extern "C" fn set(ctx: *mut c_void, v: c_int) {
        // SAFETY: ctx is the test's counter (team below).
        unsafe { *ctx.cast::<c_int>() = v };
    }
    unsafe extern "C" fn add(ctx: *mut c_void, d: c_int) -> c_int {
        // SAFETY: as above.
        let c = unsafe { &mut *ctx.cast::<c_int>() };
        let v = *c;
        *c += d;
        v
    }

    /// A team of one thread counting chunks in `counter`.
    fn one_thread(counter: &mut c_int) -> KairsGgmlTeam {
        KairsGgmlTeam {
            ith: 0,
            nth: 1,
            chunk_multiplier: 4,
            barrier: Some(no_barrier),
            chunk_set: Some(set),
            chunk_add: Some(add),
            ctx: (counter as *mut c_int).cast(),
        }
    }

    fn desc_of(type_: i32, ne: [i64; 4]) -> KairsDesc {
        let nb = Tensor::contiguous_strides(typ_of(type_).unwrap(), ne).unwrap();
        KairsDesc { type_, ne, nb }
    }

    /// `n x k` weights `vals` in ggml type `type_`, repacked by
    /// `kairs_ggml_repack` into the returned buffer (which the handle views:
    /// close it first); None when no kernel takes them on this CPU.
    fn repacked(type_: i32, vals: &[f32], n: usize, k: usize) -> Option<(AlignedBuf, *mut KairsGgmlWeights)> {
        let data: Vec<u8> = match typ_of(type_).unwrap() {
            GgmlType::Q4_0 => q4_0_as_bytes(&quantize_q4_0(vals, k).unwrap()).to_vec(),
            GgmlType::Q8_0 => q8_0_as_bytes(&quantize_q8_0(vals, k).unwrap()).to_vec(),
            _ => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        let d = desc_of(type_, [k as i64, n as i64, 1, 1]);
        let mut size = 0usize;
        // SAFETY: 4 sizes, a writable size.
        if unsafe { kairs_ggml_packed_size(type_, d.ne.as_ptr(), -1, &mut size) } != KAIRS_OK {
            return None;
        }
        let mut buf = AlignedBuf::zeroed(size);
        let mut w: *mut KairsGgmlWeights = std::ptr::null_mut();
        // SAFETY: the weights readable, buf valid for the handle's life
        // (returned with it, closed first by the caller).
        let rc = unsafe {
            kairs_ggml_repack(&d, data.as_ptr().cast(), data.len(), -1, buf.as_mut_ptr().cast(), size, &mut w)
        };
        assert_eq!(rc, KAIRS_OK, "{}", last_error());
        Some((buf, w))
    }

    /// `kairs_ggml_mul_mat` on one thread: the dst values.
    fn mul_mat(w: *const KairsGgmlWeights, x: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let (d1, dd) =
            (desc_of(KAIRS_TYPE_F32, [k as i64, m as i64, 1, 1]), desc_of(KAIRS_TYPE_F32, [n as i64, m as i64, 1, 1]));
        let mut size = 0;
        // SAFETY: an open handle, a writable size.
        assert_eq!(unsafe { kairs_ggml_work_size(w, m as i64, &mut size) }, KAIRS_OK);
        let mut work = vec![0u8; size.max(1)];
        let mut y = vec![0f32; m * n];
        let mut counter: c_int = 0;
        let team = one_thread(&mut counter);
        // SAFETY: every buffer valid for its size; a team of one thread.
        let rc = unsafe {
            kairs_ggml_mul_mat(
                w,
                &d1,
                x.as_ptr().cast(),
                4 * x.len(),
                &dd,
                y.as_mut_ptr().cast(),
                4 * y.len(),
                work.as_mut_ptr().cast(),
                work.len(),
                &team,
            )
        };
        assert_eq!(rc, KAIRS_OK, "{}", last_error());
        y
    }

    /// Every operand and team problem of `kairs_ggml_mul_mat` is an error
    /// code with its message, never a kernel call; the handle computes the
    /// same bits afterwards (a refused call keeps nothing).
    #[test]
    fn mul_mat_refuses_bad_operands_and_teams() {
        let (n, k, m) = (64usize, 64usize, 2usize);
        let vals: Vec<f32> = (0..n * k).map(|i| ((i * 31 % 97) as f32 - 48.0) / 24.0).collect();
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 23) as f32 - 11.0) / 5.0).collect();
        let Some((_buf, w)) = repacked(KAIRS_TYPE_F32, &vals, n, k) else {
            eprintln!("mul_mat_refuses_bad_operands_and_teams: no F32 kernel on this CPU, nothing to refuse");
            return;
        };
        let want = mul_mat(w, &x, m, k, n);
        let mut work_size = 0;
        // SAFETY: an open handle, a writable size.
        assert_eq!(unsafe { kairs_ggml_work_size(w, m as i64, &mut work_size) }, KAIRS_OK);
        let mut both = vec![0f32; m * k + m * n];
        let mut work = vec![0u8; work_size.max(1)];
        let mut counter: c_int = 0;
        let ok_team = one_thread(&mut counter);
        let (xs, ys) = (4 * m * k, 4 * m * n);
        let base = both.as_mut_ptr().cast::<u8>();
        // SAFETY: inside `both`.
        let (xp, yp) = (base, unsafe { base.add(xs) });
        // SAFETY: x is m x k floats.
        unsafe { std::ptr::copy_nonoverlapping(x.as_ptr().cast::<u8>(), xp, xs) };
        let wp = work.as_mut_ptr();
        struct Case {
            what: &'static str,
            src1_type: i32,
            dst_type: i32,
            x: (*const u8, usize),
            y: (*mut u8, usize),
            work: (*mut u8, usize),
            team: KairsGgmlTeam,
            code: c_int,
        }
        let good = |what| Case {
            what,
            src1_type: KAIRS_TYPE_F32,
            dst_type: KAIRS_TYPE_F32,
            x: (xp.cast_const(), xs),
            y: (yp, ys),
            work: (wp, work_size),
            team: KairsGgmlTeam { ..ok_team },
            code: KAIRS_OK,
        };
        let cases = [
            Case { x: (std::ptr::null(), xs), code: KAIRS_ERR_INVALID, ..good("NULL src1") },
            Case { y: (std::ptr::null_mut(), ys), code: KAIRS_ERR_INVALID, ..good("NULL dst") },
            Case { work: (std::ptr::null_mut(), 64), code: KAIRS_ERR_INVALID, ..good("NULL work") },
            // SAFETY: inside `both`.
            Case { y: (unsafe { yp.sub(4) }, ys), code: KAIRS_ERR_INVALID, ..good("dst overlapping src1") },
            Case { x: (xp.cast_const(), xs - 1), code: KAIRS_ERR_BUFFER, ..good("src1 one byte short") },
            Case { y: (yp, ys - 1), code: KAIRS_ERR_BUFFER, ..good("dst one byte short") },
            Case { src1_type: -1, code: KAIRS_ERR_TYPE, ..good("src1 type -1") },
            Case { src1_type: KAIRS_TYPE_Q8_0, code: KAIRS_ERR_TYPE, ..good("src1 Q8_0") },
            Case { dst_type: KAIRS_TYPE_Q4_0, code: KAIRS_ERR_TYPE, ..good("dst Q4_0") },
            Case { team: KairsGgmlTeam { nth: 0, ..ok_team }, code: KAIRS_ERR_RANGE, ..good("team nth 0") },
            Case { team: KairsGgmlTeam { ith: 1, ..ok_team }, code: KAIRS_ERR_RANGE, ..good("team ith = nth") },
            Case { team: KairsGgmlTeam { ith: -1, ..ok_team }, code: KAIRS_ERR_RANGE, ..good("team ith -1") },
            Case { team: KairsGgmlTeam { barrier: None, ..ok_team }, code: KAIRS_ERR_INVALID, ..good("no barrier") },
            good("the valid call"),
        ];
        for c in cases {
            let (d1, dd) = (
                desc_of(KAIRS_TYPE_F32, [k as i64, m as i64, 1, 1]),
                desc_of(KAIRS_TYPE_F32, [n as i64, m as i64, 1, 1]),
            );
            let (d1, dd) = (KairsDesc { type_: c.src1_type, ..d1 }, KairsDesc { type_: c.dst_type, ..dd });
            // SAFETY: every non-NULL pointer valid for its size (or
            // overlapping on purpose, refused before any access).
            let rc = unsafe {
                kairs_ggml_mul_mat(
                    w,
                    &d1,
                    c.x.0.cast(),
                    c.x.1,
                    &dd,
                    c.y.0.cast(),
                    c.y.1,
                    c.work.0.cast(),
                    c.work.1,
                    &c.team,
                )
            };
            assert_eq!(rc, c.code, "{}: {}", c.what, last_error());
            if rc != KAIRS_OK {
                assert!(!last_error().is_empty(), "{}: a message", c.what);
            }
        }
        // SAFETY: the valid case wrote dst.
        let got = unsafe { std::slice::from_raw_parts(yp.cast::<f32>().cast_const(), m * n) };
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        // SAFETY: the handle from repack, closed once, before `_buf` goes.
        unsafe { kairs_ggml_close(w) };
    }

    /// `kairs_ggml_mul_mat_nb` (ggml's own arrays, sizes as spans): the
    /// bits of `kairs_ggml_mul_mat`, and each bad operand its error code,
    /// nothing written.
    #[test]
    fn mul_mat_nb_gives_the_bits_of_mul_mat_and_refuses_bad_operands() {
        let (n, k, m) = (72usize, 64usize, 3usize);
        let vals: Vec<f32> = (0..n * k).map(|i| ((i * 29 % 89) as f32 - 44.0) / 22.0).collect();
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 11 % 31) as f32 - 15.0) / 6.0).collect();
        let mut ran = 0;
        for type_ in [KAIRS_TYPE_Q4_0, KAIRS_TYPE_Q8_0, KAIRS_TYPE_F32] {
            let Some((_buf, w)) = repacked(type_, &vals, n, k) else {
                println!("mul_mat_nb: no kernel for type {type_} on this CPU (nothing to compare)");
                continue;
            };
            ran += 1;
            let want = mul_mat(w, &x, m, k, n);
            let (d1, dd) = (
                desc_of(KAIRS_TYPE_F32, [k as i64, m as i64, 1, 1]),
                desc_of(KAIRS_TYPE_F32, [n as i64, m as i64, 1, 1]),
            );
            let mut work_size = 0;
            // SAFETY: an open handle, a writable size.
            assert_eq!(unsafe { kairs_ggml_work_size(w, m as i64, &mut work_size) }, KAIRS_OK);
            let mut work = vec![0u8; work_size.max(1)];
            let mut y = vec![7f32; m * n + k * m];
            let mut counter: c_int = 0;
            let team = one_thread(&mut counter);
            let (yp, wp) = (y.as_mut_ptr(), work.as_mut_ptr());
            let call =
                |ne1: *const i64, dst_type: i32, dnb: *const usize, src: *const f32, team: *const KairsGgmlTeam| {
                    // SAFETY: every non-NULL pointer is valid for the bytes its
                    // shape spans (src1 may lie in dst on purpose: refused before
                    // any access), one thread.
                    unsafe {
                        kairs_ggml_mul_mat_nb(
                            w,
                            KAIRS_TYPE_F32,
                            ne1,
                            d1.nb.as_ptr(),
                            src.cast(),
                            dst_type,
                            dd.ne.as_ptr(),
                            dnb,
                            yp.cast(),
                            wp.cast(),
                            work_size,
                            team,
                        )
                    }
                };
            let (ne1, dnb, xs) = (d1.ne.as_ptr(), dd.nb.as_ptr(), x.as_ptr());
            let empty = [k as i64, m as i64, 1, 0];
            for (what, rc, code) in [
                ("NULL src1 ne", call(std::ptr::null(), KAIRS_TYPE_F32, dnb, xs, &team), KAIRS_ERR_INVALID),
                ("NULL dst nb", call(ne1, KAIRS_TYPE_F32, std::ptr::null(), xs, &team), KAIRS_ERR_INVALID),
                ("NULL team", call(ne1, KAIRS_TYPE_F32, dnb, xs, std::ptr::null()), KAIRS_ERR_INVALID),
                ("dst Q4_0", call(ne1, KAIRS_TYPE_Q4_0, dnb, xs, &team), KAIRS_ERR_TYPE),
                ("src1 in dst", call(ne1, KAIRS_TYPE_F32, dnb, yp.cast_const(), &team), KAIRS_ERR_INVALID),
                ("src1 ne[3] = 0", call(empty.as_ptr(), KAIRS_TYPE_F32, dnb, xs, &team), KAIRS_ERR_SHAPE),
            ] {
                assert_eq!(rc, code, "{what}: {}", last_error());
                assert!(!last_error().is_empty(), "{what}: a message");
                assert!(y.iter().all(|v| *v == 7.0), "{what}: nothing written");
            }
            assert_eq!(call(ne1, KAIRS_TYPE_F32, dnb, xs, &team), KAIRS_OK, "{}", last_error());
            let got: Vec<u32> = y[..m * n].iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "type {type_}: the bits of mul_mat");
            // SAFETY: the handle from repack, closed once, before `_buf` goes.
            unsafe { kairs_ggml_close(w) };
        }
        if ran == 0 {
            println!(
                "mul_mat_nb_gives_the_bits_of_mul_mat_and_refuses_bad_operands: no type runs here, nothing compared"
            );
        }
    }

    #[test]
    fn repack_returns_a_handle_on_the_payloads_and_refuses_bad_memory() {
        let (n, k, m) = (72usize, 64usize, 3usize);
        let vals: Vec<f32> = (0..n * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0).collect();
        for type_ in [KAIRS_TYPE_Q4_0, KAIRS_TYPE_Q8_0, KAIRS_TYPE_F32] {
            let typ = typ_of(type_).unwrap();
            let data: Vec<u8> = match typ {
                GgmlType::Q4_0 => q4_0_as_bytes(&quantize_q4_0(&vals, k).unwrap()).to_vec(),
                GgmlType::Q8_0 => q8_0_as_bytes(&quantize_q8_0(&vals, k).unwrap()).to_vec(),
                _ => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
            };
            let d = desc_of(type_, [k as i64, n as i64, 1, 1]);
            let mut size = 0usize;
            // SAFETY: 4 sizes, a writable size.
            let rc = unsafe { kairs_ggml_packed_size(type_, d.ne.as_ptr(), -1, &mut size) };
            let repack = |dst: *mut u8, dst_size: usize, out: &mut *mut KairsGgmlWeights| {
                // SAFETY: the weights readable for their size; dst valid for
                // dst_size bytes until the handle is closed (each test below
                // closes it before its buffer goes).
                unsafe { kairs_ggml_repack(&d, data.as_ptr().cast(), data.len(), -1, dst.cast(), dst_size, out) }
            };
            let mut w: *mut KairsGgmlWeights = std::ptr::dangling_mut();
            if rc != KAIRS_OK {
                // No kernel here (not aarch64, or none for this type): refused, no handle.
                let mut buf = AlignedBuf::zeroed(1 << 16);
                assert_ne!(repack(buf.as_mut_ptr(), buf.len(), &mut w), KAIRS_OK);
                assert!(w.is_null());
                continue;
            }
            let mut buf = AlignedBuf::from_bytes(&vec![0xA5; size + 128]);
            let untouched = |b: &AlignedBuf| b.as_slice().iter().all(|v| *v == 0xA5);
            // NULL out, NULL dst, one byte short, misaligned, overlapping the weights.
            // SAFETY: as in `repack`, out NULL.
            let rc = unsafe {
                kairs_ggml_repack(
                    &d,
                    data.as_ptr().cast(),
                    data.len(),
                    -1,
                    buf.as_mut_ptr().cast(),
                    size,
                    std::ptr::null_mut(),
                )
            };
            assert_eq!(rc, KAIRS_ERR_INVALID);
            assert_eq!(repack(std::ptr::null_mut(), size, &mut w), KAIRS_ERR_INVALID);
            assert!(w.is_null());
            w = std::ptr::dangling_mut();
            assert_eq!(repack(buf.as_mut_ptr(), size - 1, &mut w), KAIRS_ERR_BUFFER);
            assert!(w.is_null());
            // SAFETY: 1 byte into a buffer of size + 128 bytes.
            assert_eq!(repack(unsafe { buf.as_mut_ptr().add(1) }, size, &mut w), KAIRS_ERR_ALIGNMENT);
            assert!(untouched(&buf), "refused calls write nothing");
            let mut both = data.clone();
            both.resize(data.len() + size, 0);
            // SAFETY: dst inside `both`, which holds the weights too (refused: overlap).
            let rc = unsafe {
                kairs_ggml_repack(
                    &d,
                    both.as_ptr().cast(),
                    data.len(),
                    -1,
                    both.as_mut_ptr().add(16).cast(),
                    size,
                    &mut w,
                )
            };
            assert_eq!(rc, KAIRS_ERR_INVALID);
            assert!(w.is_null());
            // Exactly the payloads, then the handle computes.
            assert_eq!(repack(buf.as_mut_ptr(), size + 128, &mut w), KAIRS_OK, "{}", last_error());
            assert!(!w.is_null());
            assert!(buf.as_slice()[size..].iter().all(|v| *v == 0xA5), "bytes after the payloads untouched");
            let got = mul_mat(w, &x, m, k, n);
            // The Rust handle of the same weights, on one thread: the same bits.
            let t = Tensor { typ, ne: d.ne, nb: d.nb, data: &data };
            let rw = ThreadedWeights::repack(&t, SmeSetting::Auto, AlignedBuf::zeroed(size)).unwrap();
            // SAFETY: an open handle.
            assert_eq!(rw.layouts(), unsafe { handle(w) }.unwrap().layouts());
            let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            let src1 = Tensor {
                typ: GgmlType::F32,
                ne: [k as i64, m as i64, 1, 1],
                nb: [4, 4 * k, 4 * k * m, 4 * k * m],
                data: &xb,
            };
            let mut want = vec![0u8; 4 * m * n];
            let mut work = vec![0u8; rw.work_size(m).unwrap()];
            let dnb = [4, 4 * n, 4 * n * m, 4 * n * m];
            rw.mul_mat(
                &src1,
                [n as i64, m as i64, 1, 1],
                dnb,
                &SharedBytes::from_slice(&mut want),
                &SharedBytes::from_slice(&mut work),
                &SingleThread::default(),
                4,
            )
            .unwrap();
            let got: Vec<u8> = got.iter().flat_map(|v| v.to_le_bytes()).collect();
            assert_eq!(got, want, "{typ:?}: the bits of ThreadedWeights::repack");
            // SAFETY: the handle from repack, closed once, before `buf` goes.
            unsafe { kairs_ggml_close(w) };
        }
    }
}
