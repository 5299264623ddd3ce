//! C ABI of [`kleidiai`] for ggml integrations; the header is
//! `include/kleidiai_rs.h`, generated from this crate by cbindgen
//! (`cargo run -p xtask -- header`; the test command fails when it is stale)
//! with the doc comments below as its comments, and compiled and exercised by
//! the C test program `tests/c/capi_test.c`.
//!
//! Every entry point checks its pointers and sizes, turns every error into a
//! status code with a message ([`kairs_last_error`]), and catches panics.

#![deny(missing_docs)]
// `ok_or_else(|| Error::..)` even for variants without a heap part: an
// eager `Error` is built and dropped on every successful call (its drop
// glue is a call), measured at about 140 guest instructions per ggml
// mul_mat in the llama.cpp steady state.
#![allow(clippy::unnecessary_lazy_evaluations)]

pub mod ggml_threads;

use kleidiai::cpu::Features;
use kleidiai::ggml::{GgmlType, GgmlWeights, MulMatScratch, Tensor, TensorMut};
use kleidiai::{Error, FileError, Parallelism};
use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::Arc;

/// Status: success.
pub const KAIRS_OK: c_int = 0;
/// Status: bad argument without a code of its own (a null pointer,
/// overlapping buffers).
pub const KAIRS_ERR_INVALID: c_int = -1;
/// Status: no kernel runs here, or packed for another CPU or vector length.
pub const KAIRS_ERR_UNSUPPORTED: c_int = -2;
/// Status: packed data does not fit the kernel or is corrupted.
pub const KAIRS_ERR_LAYOUT: c_int = -3;
/// Status: a buffer is too small (in elements or bytes).
pub const KAIRS_ERR_BUFFER: c_int = -4;
/// Status: a size does not fit in `size_t`.
pub const KAIRS_ERR_OVERFLOW: c_int = -5;
/// Status: a bug in kleidiai-rs, or KleidiAI disagreeing with it (a panic
/// was caught, or a kernel and its packer disagree; please report it).
pub const KAIRS_ERR_INTERNAL: c_int = -6;
/// Status: shapes do not fit (a zero or mismatched dimension, a dimension
/// not a multiple of what the kernel takes, strides that overlap or are
/// not contiguous).
pub const KAIRS_ERR_SHAPE: c_int = -7;
/// Status: a buffer's address lacks the alignment it needs.
pub const KAIRS_ERR_ALIGNMENT: c_int = -8;
/// Status: a tensor type this call does not take (an unknown type id, or
/// another element type than the operation needs).
pub const KAIRS_ERR_TYPE: c_int = -9;
/// Status: a value out of range (a row index, a thread index, a setting).
pub const KAIRS_ERR_RANGE: c_int = -10;
/// Status: repacked weights rejected for a reason without its own
/// `KAIRS_ERR_FILE_*` code (a malformed header). Every file rejection is a
/// code from `KAIRS_ERR_FILE` down to `KAIRS_ERR_FILE_LAYOUT`.
pub const KAIRS_ERR_FILE: c_int = -11;
/// Status: not repacked weights (wrong magic bytes, or too short).
pub const KAIRS_ERR_FILE_MAGIC: c_int = -12;
/// Status: repacked weights of a format version this build does not read.
pub const KAIRS_ERR_FILE_VERSION: c_int = -13;
/// Status: repacked with another KleidiAI release (layouts may differ: repack).
pub const KAIRS_ERR_FILE_KLEIDIAI_VERSION: c_int = -14;
/// Status: a checksum of the repacked weights does not match (corrupted or
/// tampered).
pub const KAIRS_ERR_FILE_CHECKSUM: c_int = -15;
/// Status: repacked weights shorter than their header says.
pub const KAIRS_ERR_FILE_TRUNCATED: c_int = -16;
/// Status: bytes after the declared end of repacked weights.
pub const KAIRS_ERR_FILE_TRAILING: c_int = -17;
/// Status: a packed layout in the repacked weights does not fit its kernel,
/// shape or payload size. (Weights packed for another vector length are
/// `KAIRS_ERR_UNSUPPORTED`.)
pub const KAIRS_ERR_FILE_LAYOUT: c_int = -18;

/// Tensor type: ggml's `GGML_TYPE_F32`.
pub const KAIRS_TYPE_F32: i32 = 0;
/// Tensor type: ggml's `GGML_TYPE_F16`.
pub const KAIRS_TYPE_F16: i32 = 1;
/// Tensor type: ggml's `GGML_TYPE_Q4_0`.
pub const KAIRS_TYPE_Q4_0: i32 = 2;
/// Tensor type: ggml's `GGML_TYPE_Q8_0`.
pub const KAIRS_TYPE_Q8_0: i32 = 8;

/// CPU feature bit of [`kairs_cpu_features`]: Advanced SIMD.
pub const KAIRS_FEAT_NEON: u32 = 1 << 0;
/// CPU feature bit: FEAT_FP16.
pub const KAIRS_FEAT_FP16: u32 = 1 << 1;
/// CPU feature bit: FEAT_BF16.
pub const KAIRS_FEAT_BF16: u32 = 1 << 2;
/// CPU feature bit: FEAT_DotProd.
pub const KAIRS_FEAT_DOTPROD: u32 = 1 << 3;
/// CPU feature bit: FEAT_I8MM.
pub const KAIRS_FEAT_I8MM: u32 = 1 << 4;
/// CPU feature bit: FEAT_SVE.
pub const KAIRS_FEAT_SVE: u32 = 1 << 5;
/// CPU feature bit: FEAT_SVE2.
pub const KAIRS_FEAT_SVE2: u32 = 1 << 6;
/// CPU feature bit: FEAT_SVE2p1.
pub const KAIRS_FEAT_SVE2P1: u32 = 1 << 7;
/// CPU feature bit: FEAT_SME.
pub const KAIRS_FEAT_SME: u32 = 1 << 8;
/// CPU feature bit: FEAT_SME2.
pub const KAIRS_FEAT_SME2: u32 = 1 << 9;
/// CPU feature bit: FEAT_SME2p1.
pub const KAIRS_FEAT_SME2P1: u32 = 1 << 10;

/// A ggml tensor's shape (`kairs_desc` in C): `ne[0]` values per row,
/// `ne[1]` rows, `ne[2]`, `ne[3]` batches; `nb[]` byte strides (`nb[0]` must
/// be the element or block size). C names its fields `type`, `ne`, `nb`:
/// cbindgen:field-names=[type, ne, nb]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KairsDesc {
    /// ggml type id (`KAIRS_TYPE_*`); `type` in C.
    pub type_: i32,
    /// Sizes.
    pub ne: [i64; 4],
    /// Byte strides.
    pub nb: [usize; 4],
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static SCRATCH: RefCell<MulMatScratch> = RefCell::new(MulMatScratch::default());
    static KERNEL_NAME: RefCell<CString> = RefCell::new(CString::default());
}

thread_local! {
    /// Whether LAST_ERROR holds a message (a flag without lazy
    /// initialisation: every successful call reads it).
    static HAS_ERROR: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Clears the last error (every successful call): an already clear one is
/// one read of the flag, in the caller.
#[inline(always)]
fn clear_error() {
    if HAS_ERROR.with(|h| h.get()) {
        set_error("");
    }
}

#[inline(never)]
fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
    HAS_ERROR.with(|h| h.set(!msg.is_empty()));
}

fn code(e: &Error) -> c_int {
    match e {
        Error::Unsupported { .. } | Error::UnknownKernel(_) => KAIRS_ERR_UNSUPPORTED,
        Error::LayoutMismatch { .. } | Error::WrongFamily { .. } => KAIRS_ERR_LAYOUT,
        Error::BufferLength { .. } | Error::ByteLength { .. } => KAIRS_ERR_BUFFER,
        Error::Overflow(_) => KAIRS_ERR_OVERFLOW,
        Error::PackerMismatch { .. } => KAIRS_ERR_INTERNAL,
        Error::ZeroDimension { .. }
        | Error::NotMultiple { .. }
        | Error::ShapeMismatch { .. }
        | Error::Stride { .. } => KAIRS_ERR_SHAPE,
        Error::Misaligned { .. } => KAIRS_ERR_ALIGNMENT,
        Error::ElementType { .. } | Error::NoOperation { .. } | Error::UnknownType { .. } => KAIRS_ERR_TYPE,
        Error::OutOfRange { .. } | Error::BadValue { .. } => KAIRS_ERR_RANGE,
        Error::File { reason, .. } => match reason {
            FileError::Magic => KAIRS_ERR_FILE_MAGIC,
            FileError::Version { .. } => KAIRS_ERR_FILE_VERSION,
            FileError::KleidiaiVersion { .. } => KAIRS_ERR_FILE_KLEIDIAI_VERSION,
            FileError::Checksum { .. } => KAIRS_ERR_FILE_CHECKSUM,
            FileError::Truncated { .. } => KAIRS_ERR_FILE_TRUNCATED,
            FileError::TrailingBytes { .. } => KAIRS_ERR_FILE_TRAILING,
            FileError::Layout { .. } => KAIRS_ERR_FILE_LAYOUT,
            FileError::VectorLength { .. } => KAIRS_ERR_UNSUPPORTED,
            _ => KAIRS_ERR_FILE,
        },
        // InvalidArgument, Null, and variants added later.
        _ => KAIRS_ERR_INVALID,
    }
}

/// Runs `f`, records its error or clears the last error, catches panics.
#[inline(always)] // in each entry point: no closure of arguments built and passed
fn guard(f: impl FnOnce() -> Result<(), Error>) -> c_int {
    guard_with(f)
}

/// [`guard`] for errors that come boxed (a hot path's answer stays one word).
#[inline(always)]
fn guard_boxed(f: impl FnOnce() -> Result<(), Box<Error>>) -> c_int {
    guard_with(f)
}

#[inline(always)]
fn guard_with<E: core::borrow::Borrow<Error>>(f: impl FnOnce() -> Result<(), E>) -> c_int {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            clear_error();
            KAIRS_OK
        }
        Ok(Err(e)) => {
            let e = e.borrow();
            set_error(&e.to_string());
            code(e)
        }
        Err(_) => {
            set_error("internal error (a panic in kleidiai-rs was caught; please report it)");
            KAIRS_ERR_INTERNAL
        }
    }
}

fn invalid(msg: &str) -> Error {
    Error::InvalidArgument(msg.to_string())
}

/// `len` bytes at `ptr` as a slice; null is an error unless `len` is 0.
///
/// # Safety
/// `ptr` must be valid for reads of `len` bytes for the returned lifetime.
unsafe fn bytes<'a>(ptr: *const c_void, len: usize, what: &'static str) -> Result<&'a [u8], Error> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Error::Null { what });
    }
    // SAFETY: non-null; the caller guarantees `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// # Safety
/// `ptr` must be valid for writes of `len` bytes for the returned lifetime.
unsafe fn bytes_mut<'a>(ptr: *mut c_void, len: usize, what: &'static str) -> Result<&'a mut [u8], Error> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(Error::Null { what });
    }
    // SAFETY: non-null; the caller guarantees `len` writable bytes, not aliased.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len) })
}

/// # Safety
/// `d` must be null or point to a valid `KairsDesc`.
unsafe fn desc<'a>(d: *const KairsDesc, what: &'static str) -> Result<&'a KairsDesc, Error> {
    // SAFETY: null is checked; otherwise the caller guarantees validity.
    unsafe { d.as_ref() }.ok_or_else(|| Error::Null { what })
}

/// A C type id (`KAIRS_TYPE_*`) as a [`GgmlType`].
fn ggml_type(t: i32) -> Result<GgmlType, Error> {
    let unknown = || Error::UnknownType { what: "ggml type", id: t.into(), known: "F32=0, F16=1, Q4_0=2, Q8_0=8" };
    GgmlType::from_id(u32::try_from(t).map_err(|_| unknown())?)
}

/// The `size_t` an out-parameter points to; NULL is an error.
///
/// # Safety
/// `p` is NULL or valid for writes, not aliased, for the returned lifetime.
unsafe fn out_size<'a>(p: *mut usize) -> Result<&'a mut usize, Error> {
    // SAFETY: the caller's guarantee; NULL is checked.
    unsafe { p.as_mut() }.ok_or_else(|| Error::Null { what: "size" })
}

/// `v` as a count that must be positive.
#[inline]
fn positive(v: i64, what: &'static str) -> Result<usize, Error> {
    match usize::try_from(v) {
        Ok(u) if u > 0 => Ok(u),
        _ => Err(not_positive(v, what)),
    }
}

/// [`positive`]'s error (out of line: every call of ggml's passes).
#[cold]
#[inline(never)]
fn not_positive(v: i64, what: &'static str) -> Error {
    Error::BadValue { what, value: v.to_string(), why: "must be positive".into() }
}

/// Caller memory viewed for the length of one call (the [`GgmlWeights`]
/// built on it is dropped before the call returns).
struct CallerBytes {
    ptr: *const u8,
    len: usize,
}
// SAFETY: the bytes are only read, and only during the call that made them.
unsafe impl Send for CallerBytes {}
// SAFETY: as above.
unsafe impl Sync for CallerBytes {}
impl AsRef<[u8]> for CallerBytes {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: built from a checked, non-null pointer valid for `len`
        // bytes for the duration of the call (see `view`).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// Views repacked weights in caller memory, checking header, layouts and
/// bounds (payload checksums only in `kairs_verify`).
///
/// # Safety
/// `packed` must be valid for reads of `size` bytes until the returned value
/// is dropped (within the calling function).
unsafe fn view(packed: *const c_void, size: usize, verify: bool) -> Result<GgmlWeights, Error> {
    // SAFETY: forwarded caller guarantee.
    let b = unsafe { bytes(packed, size, "packed weights") }?;
    let raw = CallerBytes { ptr: b.as_ptr(), len: b.len() };
    GgmlWeights::from_shared(Arc::new(raw), verify)
}

fn repack_tensor(d: &KairsDesc, data: &[u8]) -> Result<GgmlWeights, Error> {
    let typ = ggml_type(d.type_)?;
    GgmlWeights::repack(&Tensor { typ, ne: d.ne, nb: d.nb, data })
}

/// The CPU features in use (detected, minus `KLEIDIAI_DISABLE`), as
/// `KAIRS_FEAT_*` bits.
#[unsafe(no_mangle)]
pub extern "C" fn kairs_cpu_features() -> u32 {
    Features::current().iter().fold(0u32, |m, f| m | (1 << f as u32))
}

/// SME streaming vector length in bytes (0: no SME).
#[unsafe(no_mangle)]
pub extern "C" fn kairs_sme_vector_bytes() -> u32 {
    Features::current().sme_vector_bytes().unwrap_or(0) as u32
}

/// Version of kleidiai-rs and of the KleidiAI it carries, e.g.
/// `"0.1.0 (KleidiAI 1.30.0)"`.
#[unsafe(no_mangle)]
pub extern "C" fn kairs_version() -> *const c_char {
    static V: &str = concat!(env!("CARGO_PKG_VERSION"), " (KleidiAI 1.30.0)\0");
    V.as_ptr().cast()
}

/// Why the last call on this thread failed (`""` after a success). Valid
/// until the next call on this thread.
#[unsafe(no_mangle)]
pub extern "C" fn kairs_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Bytes [`kairs_repack`] needs for weights `src0` (type F32, F16, Q4_0 or
/// Q8_0; `ne[0]` = k, `ne[1]` = n; only F16 may have `ne[2]` > 1).
///
/// # Safety
/// `src0` points to a valid descriptor, `data` to `data_size` readable bytes,
/// `size` to a writable `size_t` (each may be NULL: an error).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_repack_size(
    src0: *const KairsDesc,
    data: *const c_void,
    data_size: usize,
    size: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: caller guarantees (null checked inside).
        let (d, data) = unsafe { (desc(src0, "src0")?, bytes(data, data_size, "src0 data")?) };
        // SAFETY: the caller guarantees `size` writable (NULL is an error).
        let out = unsafe { out_size(size) }?;
        *out = repack_tensor(d, data)?.to_bytes()?.len();
        Ok(())
    })
}

/// Repacks `src0` into `dst` (64-byte aligned, at least
/// [`kairs_repack_size`] bytes). `hybrid` != 0 lets mul_mat run SME and
/// non-SME kernels at once when it gets more threads than the SME cap
/// (results then depend on the thread count).
///
/// # Safety
/// As [`kairs_repack_size`]; `dst` points to `dst_size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_repack(
    src0: *const KairsDesc,
    data: *const c_void,
    data_size: usize,
    dst: *mut c_void,
    dst_size: usize,
    hybrid: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: caller guarantees (null checked inside).
        let (d, data) = unsafe { (desc(src0, "src0")?, bytes(data, data_size, "src0 data")?) };
        let mut w = repack_tensor(d, data)?;
        w.set_hybrid(hybrid != 0);
        let ser = w.to_bytes()?;
        // SAFETY: caller guarantees `dst_size` writable bytes at `dst`.
        let out = unsafe { bytes_mut(dst, dst_size, "dst") }?;
        if out.len() < ser.len() {
            return Err(Error::ByteLength { what: "repack destination", got: out.len(), need: ser.len() });
        }
        if out.as_ptr() as usize % 64 != 0 {
            return Err(Error::Misaligned { what: "repack destination", align: 64 });
        }
        out[..ser.len()].copy_from_slice(&ser);
        Ok(())
    })
}

/// Full check of repacked weights, payload checksums included. Here and in
/// every call taking `packed`, `packed_size` is the size
/// [`kairs_repack_size`] reported: more bytes are refused
/// (`KAIRS_ERR_FILE_TRAILING`), fewer too (`KAIRS_ERR_FILE_TRUNCATED`).
///
/// # Safety
/// `packed` points to `packed_size` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_verify(packed: *const c_void, packed_size: usize) -> c_int {
    // SAFETY: forwarded caller guarantee; the view dies in this call.
    guard(|| unsafe { view(packed, packed_size, true) }.map(|_| ()))
}

/// The kernel serving `m` rows for these weights, or `"reference"` (no
/// KleidiAI kernel: for F16 weights with m = 1 that means ggml's own F16
/// path, see [`kairs_mul_mat`]).
///
/// # Safety
/// `packed` points to `packed_size` readable bytes; `name` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_kernel_name(
    packed: *const c_void,
    packed_size: usize,
    m: i64,
    name: *mut *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded caller guarantee; the view dies in this call.
        let w = unsafe { view(packed, packed_size, false) }?;
        let m = positive(m, "m")?;
        // SAFETY: the caller guarantees `name` writable; NULL is an error.
        let out = unsafe { name.as_mut() }.ok_or_else(|| Error::Null { what: "name" })?;
        let s = CString::new(w.kernel_for(m).unwrap_or("reference")).expect("kernel names have no NUL");
        *out = KERNEL_NAME.with(|k| {
            *k.borrow_mut() = s;
            k.borrow().as_ptr()
        });
        Ok(())
    })
}

/// Upper bound of the scratch memory one mul_mat of `m` rows uses (it is
/// allocated internally and reused per thread).
///
/// # Safety
/// `packed` points to `packed_size` readable bytes; `size` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_work_size(packed: *const c_void, packed_size: usize, m: i64, size: *mut usize) -> c_int {
    guard(|| {
        // SAFETY: forwarded caller guarantee; the view dies in this call.
        let w = unsafe { view(packed, packed_size, false) }?;
        let m = positive(m, "m")?;
        // SAFETY: the caller guarantees `size` writable; NULL is an error.
        let out = unsafe { size.as_mut() }.ok_or_else(|| Error::Null { what: "size" })?;
        *out = w.work_size(m)?;
        Ok(())
    })
}

/// dst = src1 x weights^T with ggml's mul_mat semantics: src1 F32
/// [k, m, ne12], dst F32 [n, m, ne12]; F16 weights broadcast over batches.
/// Like ggml's KleidiAI path, F16 weights with m = 1 are not served here
/// (`KAIRS_ERR_UNSUPPORTED`): run ggml's own F16 path for them.
///
/// # Safety
/// Every pointer valid for its size (reads for inputs, writes for `dst_data`).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // mirrors the C signature
pub unsafe extern "C" fn kairs_mul_mat(
    packed: *const c_void,
    packed_size: usize,
    src1: *const KairsDesc,
    src1_data: *const c_void,
    src1_size: usize,
    dst: *const KairsDesc,
    dst_data: *mut c_void,
    dst_size: usize,
    n_threads: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded caller guarantees; the view dies in this call.
        let w = unsafe { view(packed, packed_size, false) }?;
        // SAFETY: the caller guarantees valid descriptors; NULL is an error.
        let (s1, d) = unsafe { (desc(src1, "src1")?, desc(dst, "dst")?) };
        // SAFETY: the caller guarantees `src1_size` readable bytes at `src1_data`.
        let x = unsafe { bytes(src1_data, src1_size, "src1 data") }?;
        // SAFETY: the caller guarantees this pointer valid for the size given (see the function's `# Safety`); NULL is checked inside.
        let y = unsafe { bytes_mut(dst_data, dst_size, "dst data") }?;
        let (t1, td) = (ggml_type(s1.type_)?, ggml_type(d.type_)?);
        let src1 = Tensor { typ: t1, ne: s1.ne, nb: s1.nb, data: x };
        let mut dst = TensorMut { typ: td, ne: d.ne, nb: d.nb, data: y };
        let threads = positive(n_threads.into(), "n_threads")?;
        let par = if threads == 1 { Parallelism::Sequential } else { Parallelism::Rayon(threads) };
        SCRATCH.with(|s| w.mul_mat(&src1, &mut dst, par, &mut s.borrow_mut()))
    })
}

/// Weight rows `rows` as f32 (ggml get_rows): `n_rows` x k floats into
/// `dst`.
///
/// # Safety
/// `packed` readable for `packed_size` bytes, `rows` for `n_rows` values,
/// `dst` writable for `dst_floats` floats.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_get_rows(
    packed: *const c_void,
    packed_size: usize,
    rows: *const i64,
    n_rows: usize,
    dst: *mut f32,
    dst_floats: usize,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded caller guarantees; the view dies in this call.
        let w = unsafe { view(packed, packed_size, false) }?;
        let rows_bytes = n_rows.checked_mul(8).ok_or_else(|| Error::Overflow("rows".into()))?;
        let dst_bytes = dst_floats.checked_mul(4).ok_or_else(|| Error::Overflow("dst".into()))?;
        // SAFETY: the caller guarantees this pointer valid for the size given (see the function's `# Safety`); NULL is checked inside.
        let r = unsafe { bytes(rows.cast(), rows_bytes, "rows") }?;
        // SAFETY: the caller guarantees this pointer valid for the size given (see the function's `# Safety`); NULL is checked inside.
        let out = unsafe { bytes_mut(dst.cast(), dst_bytes, "dst") }?;
        let rows: Vec<i64> = r.chunks_exact(8).map(|c| i64::from_ne_bytes(c.try_into().expect("8 bytes"))).collect();
        let mut tmp = vec![0f32; dst_floats];
        w.get_rows(&rows, &mut tmp)?;
        for (o, v) in out.chunks_exact_mut(4).zip(&tmp) {
            o.copy_from_slice(&v.to_ne_bytes());
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kleidiai::cpu::CpuFeature;

    #[test]
    fn constants_match_the_library() {
        for (c, t) in [
            (KAIRS_TYPE_F32, GgmlType::F32),
            (KAIRS_TYPE_F16, GgmlType::F16),
            (KAIRS_TYPE_Q4_0, GgmlType::Q4_0),
            (KAIRS_TYPE_Q8_0, GgmlType::Q8_0),
        ] {
            assert_eq!(GgmlType::from_id(c as u32).ok(), Some(t));
        }
        let bits = [
            KAIRS_FEAT_NEON,
            KAIRS_FEAT_FP16,
            KAIRS_FEAT_BF16,
            KAIRS_FEAT_DOTPROD,
            KAIRS_FEAT_I8MM,
            KAIRS_FEAT_SVE,
            KAIRS_FEAT_SVE2,
            KAIRS_FEAT_SVE2P1,
            KAIRS_FEAT_SME,
            KAIRS_FEAT_SME2,
            KAIRS_FEAT_SME2P1,
        ];
        assert_eq!(bits.len(), CpuFeature::ALL.len());
        for (bit, f) in bits.iter().zip(CpuFeature::ALL) {
            assert_eq!(*bit, 1 << f as u32, "{}", f.name());
        }
    }
    /// The status codes C users were compiled against keep their values.
    #[test]
    fn existing_codes_keep_their_values() {
        assert_eq!(
            [KAIRS_OK, KAIRS_ERR_INVALID, KAIRS_ERR_UNSUPPORTED, KAIRS_ERR_LAYOUT, KAIRS_ERR_BUFFER],
            [0, -1, -2, -3, -4]
        );
        assert_eq!([KAIRS_ERR_OVERFLOW, KAIRS_ERR_INTERNAL], [-5, -6]);
    }

    /// One error of every category maps to its own code.
    #[test]
    fn every_category_has_its_code() {
        let file = |reason| Error::File { what: "ggml container", reason };
        let cases = [
            (Error::InvalidArgument("x".into()), KAIRS_ERR_INVALID),
            (Error::Null { what: "src0" }, KAIRS_ERR_INVALID),
            (Error::Unsupported { kernel: "k", why: "no SME".into() }, KAIRS_ERR_UNSUPPORTED),
            (Error::UnknownKernel("k".into()), KAIRS_ERR_UNSUPPORTED),
            (Error::LayoutMismatch { what: "RHS", kernel: "k", got: "a".into(), want: "b".into() }, KAIRS_ERR_LAYOUT),
            (Error::WrongFamily { kernel: "k", why: "w".into() }, KAIRS_ERR_LAYOUT),
            (Error::BufferLength { what: "dst", got: 1, need: 2 }, KAIRS_ERR_BUFFER),
            (Error::ByteLength { what: "dst", got: 1, need: 2 }, KAIRS_ERR_BUFFER),
            (Error::Overflow("m * k".into()), KAIRS_ERR_OVERFLOW),
            (Error::PackerMismatch { kernel: "k", why: "w".into() }, KAIRS_ERR_INTERNAL),
            (Error::ZeroDimension { what: "m" }, KAIRS_ERR_SHAPE),
            (Error::NotMultiple { what: "k", value: 48, multiple: 32, context: "Q4_0".into() }, KAIRS_ERR_SHAPE),
            (Error::ShapeMismatch { what: "dst ne", got: "a".into(), want: "b".into() }, KAIRS_ERR_SHAPE),
            (Error::Stride { what: "dst", stride: 3, why: "w".into() }, KAIRS_ERR_SHAPE),
            (Error::Misaligned { what: "dst", align: 64 }, KAIRS_ERR_ALIGNMENT),
            (Error::ElementType { what: "dst", expected: "F32", got: "F16" }, KAIRS_ERR_TYPE),
            (Error::NoOperation { weights: "f16 weights", activation: "Bf16" }, KAIRS_ERR_TYPE),
            (Error::UnknownType { what: "ggml type", id: 3, known: "F32=0" }, KAIRS_ERR_TYPE),
            (Error::OutOfRange { what: "row", index: 9, len: 4 }, KAIRS_ERR_RANGE),
            (Error::BadValue { what: "sme", value: "-2".into(), why: "w".into() }, KAIRS_ERR_RANGE),
            (file(FileError::Header("h".into())), KAIRS_ERR_FILE),
            (file(FileError::Magic), KAIRS_ERR_FILE_MAGIC),
            (file(FileError::Version { found: 2, supported: 1 }), KAIRS_ERR_FILE_VERSION),
            (
                file(FileError::KleidiaiVersion { file: "1.29.0".into(), build: "1.30.0" }),
                KAIRS_ERR_FILE_KLEIDIAI_VERSION,
            ),
            (file(FileError::Checksum { part: "header".into() }), KAIRS_ERR_FILE_CHECKSUM),
            (file(FileError::Truncated { part: "batch 0".into(), need: 2, have: 1 }), KAIRS_ERR_FILE_TRUNCATED),
            (file(FileError::TrailingBytes { extra: 1 }), KAIRS_ERR_FILE_TRAILING),
            (file(FileError::Layout { slot: 0, why: "w".into() }), KAIRS_ERR_FILE_LAYOUT),
            (file(FileError::VectorLength { slot: 0, packed_bits: 256, here_bits: 512 }), KAIRS_ERR_UNSUPPORTED),
        ];
        for (e, c) in &cases {
            assert_eq!(code(e), *c, "{e:?}");
        }
        // Every category code is distinct.
        let mut all: Vec<c_int> = cases.iter().map(|(_, c)| *c).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all, (-18..=-1).collect::<Vec<_>>());
    }

    fn f32_desc(k: i64, n: i64) -> KairsDesc {
        let k4 = k as usize * 4;
        KairsDesc { type_: KAIRS_TYPE_F32, ne: [k, n, 1, 1], nb: [4, k4, k4 * n as usize, k4 * n as usize] }
    }

    /// Real calls through the C entry points return the category codes.
    #[test]
    fn entry_points_return_the_category_codes() {
        let (k, n) = (32i64, 4i64);
        let w: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 * 0.25 - 0.5).collect();
        let d = f32_desc(k, n);
        let wp = w.as_ptr().cast::<c_void>();
        let wlen = w.len() * 4;
        let mut size = 0usize;
        // SAFETY: every pointer is valid for the sizes given.
        unsafe {
            assert_eq!(kairs_repack_size(std::ptr::null(), wp, wlen, &mut size), KAIRS_ERR_INVALID);
            let mut other = d;
            other.type_ = 3;
            assert_eq!(kairs_repack_size(&other, wp, wlen, &mut size), KAIRS_ERR_TYPE);
            let mut q4 = d;
            q4.type_ = KAIRS_TYPE_Q4_0;
            q4.ne[0] = 48;
            q4.nb = [18, 36, 36 * 4, 36 * 4];
            assert_eq!(kairs_repack_size(&q4, wp, wlen, &mut size), KAIRS_ERR_SHAPE);
            // Bytes that are not repacked weights.
            assert_eq!(kairs_verify(wp, wlen), KAIRS_ERR_FILE_MAGIC);
            let st = kairs_repack_size(&d, wp, wlen, &mut size);
            if st == KAIRS_ERR_UNSUPPORTED {
                eprintln!("no kernel repacks F32 weights here: the container checks run on aarch64");
                return;
            }
            assert_eq!(st, KAIRS_OK);
        }
        // 64-byte aligned destination (with room after it for trailing bytes).
        let mut buf = vec![0u8; size + 64 + 4096];
        let at = buf.as_ptr().align_offset(64);
        let packed = &mut buf[at..at + size];
        let pp = packed.as_mut_ptr().cast::<c_void>();
        // SAFETY: as above; `packed` holds `size` bytes.
        unsafe {
            let unaligned = buf.as_mut_ptr().add(at + 1).cast::<c_void>();
            assert_eq!(kairs_repack(&d, wp, wlen, unaligned, size, 0), KAIRS_ERR_ALIGNMENT);
            let (pp, size) = (pp, size);
            assert_eq!(kairs_repack(&d, wp, wlen, pp, size - 1, 0), KAIRS_ERR_BUFFER);
            assert_eq!(kairs_repack(&d, wp, wlen, pp, size, 0), KAIRS_OK);
            assert_eq!(kairs_verify(pp, size), KAIRS_OK);
            let mut out = vec![0f32; k as usize];
            let bad_row = n;
            assert_eq!(kairs_get_rows(pp, size, &bad_row, 1, out.as_mut_ptr(), out.len()), KAIRS_ERR_RANGE);
            assert_eq!(kairs_verify(pp, 10), KAIRS_ERR_FILE_MAGIC);
        }
        let p = &mut buf[at..at + size];
        p[20] ^= 1; // container header
        // SAFETY: as above.
        assert_eq!(unsafe { kairs_verify(p.as_ptr().cast(), size) }, KAIRS_ERR_FILE_CHECKSUM);
        p[20] ^= 1;
        p[8] = 7; // container version
        // SAFETY: as above.
        assert_eq!(unsafe { kairs_verify(p.as_ptr().cast(), size) }, KAIRS_ERR_FILE_VERSION);
        p[8] = 1;
        let last = size - 1;
        p[last] ^= 1; // last payload byte
        // SAFETY: as above.
        assert_eq!(unsafe { kairs_verify(p.as_ptr().cast(), size) }, KAIRS_ERR_FILE_CHECKSUM);
        p[last] ^= 1;
        // SAFETY: as above (fewer bytes than there are).
        assert_eq!(unsafe { kairs_verify(p.as_ptr().cast(), size - 1) }, KAIRS_ERR_FILE_TRUNCATED);
        // The message names the reason.
        // SAFETY: kairs_last_error returns a NUL-terminated string of this thread.
        let msg = unsafe { std::ffi::CStr::from_ptr(kairs_last_error()) }.to_string_lossy().into_owned();
        assert!(msg.contains("truncated"), "{msg}");
        // Bytes after the container's end (issue 15): refused by the checked
        // and the unchecked views alike, the count named.
        let q = &buf[at..at + size + 4096];
        for extra in [1usize, 64, 4096] {
            let mut work = 0usize;
            // SAFETY: `q` holds `size + 4096` bytes (zeros after the container).
            unsafe {
                assert_eq!(kairs_verify(q.as_ptr().cast(), size + extra), KAIRS_ERR_FILE_TRAILING, "{extra}");
                assert_eq!(kairs_work_size(q.as_ptr().cast(), size + extra, 1, &mut work), KAIRS_ERR_FILE_TRAILING);
            }
            // SAFETY: as above.
            let msg = unsafe { std::ffi::CStr::from_ptr(kairs_last_error()) }.to_string_lossy().into_owned();
            assert!(msg.contains(&format!("{extra} bytes after the declared end")), "{msg}");
        }
        // SAFETY: as above (the exact size).
        assert_eq!(unsafe { kairs_verify(q.as_ptr().cast(), size) }, KAIRS_OK);
    }
}
