//! C ABI of [`kleidiai`] for ggml integrations; the header is
//! `include/kleidiai_rs.h` (kept by hand, and compiled and exercised by the C
//! test program `tests/c/capi_test.c` in this crate's tests).
//!
//! Every entry point checks its pointers and sizes, turns every error into a
//! status code with a message ([`kairs_last_error`]), and catches panics.

#![deny(missing_docs)]

pub mod ggml_threads;

use kleidiai::cpu::Features;
use kleidiai::ggml::{GgmlType, GgmlWeights, MulMatScratch, Tensor, TensorMut};
use kleidiai::{Error, Parallelism};
use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::Arc;

/// Success.
pub const KAIRS_OK: c_int = 0;
/// Bad argument.
pub const KAIRS_ERR_INVALID: c_int = -1;
/// No kernel runs here, or packed for another CPU.
pub const KAIRS_ERR_UNSUPPORTED: c_int = -2;
/// Packed data does not fit or is corrupted.
pub const KAIRS_ERR_LAYOUT: c_int = -3;
/// A buffer is too small.
pub const KAIRS_ERR_BUFFER: c_int = -4;
/// A size overflows.
pub const KAIRS_ERR_OVERFLOW: c_int = -5;
/// A caught panic (a bug).
pub const KAIRS_ERR_INTERNAL: c_int = -6;

/// A ggml tensor shape (mirrors `kairs_desc`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KairsDesc {
    /// ggml type id.
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

fn set_error(msg: &str) {
    // Clearing an already clear message allocates nothing (every successful call does it).
    if msg.is_empty() && LAST_ERROR.with(|e| e.borrow().is_empty()) {
        return;
    }
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn code(e: &Error) -> c_int {
    match e {
        Error::Unsupported { .. } | Error::UnknownKernel(_) => KAIRS_ERR_UNSUPPORTED,
        Error::LayoutMismatch { .. } | Error::WrongFamily { .. } => KAIRS_ERR_LAYOUT,
        Error::BufferLength { .. } => KAIRS_ERR_BUFFER,
        Error::Overflow(_) => KAIRS_ERR_OVERFLOW,
        _ => KAIRS_ERR_INVALID,
    }
}

/// Runs `f`, records its error or clears the last error, catches panics.
fn guard(f: impl FnOnce() -> Result<(), Error>) -> c_int {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            set_error("");
            KAIRS_OK
        }
        Ok(Err(e)) => {
            set_error(&e.to_string());
            code(&e)
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
unsafe fn bytes<'a>(ptr: *const c_void, len: usize, what: &str) -> Result<&'a [u8], Error> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(invalid(&format!("{what} is NULL")));
    }
    // SAFETY: non-null; the caller guarantees `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// # Safety
/// `ptr` must be valid for writes of `len` bytes for the returned lifetime.
unsafe fn bytes_mut<'a>(ptr: *mut c_void, len: usize, what: &str) -> Result<&'a mut [u8], Error> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(invalid(&format!("{what} is NULL")));
    }
    // SAFETY: non-null; the caller guarantees `len` writable bytes, not aliased.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len) })
}

/// # Safety
/// `d` must be null or point to a valid `KairsDesc`.
unsafe fn desc<'a>(d: *const KairsDesc, what: &str) -> Result<&'a KairsDesc, Error> {
    // SAFETY: null is checked; otherwise the caller guarantees validity.
    unsafe { d.as_ref() }.ok_or_else(|| invalid(&format!("{what} descriptor is NULL")))
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
    let typ = GgmlType::from_id(u32::try_from(d.type_).map_err(|_| invalid("negative type"))?)?;
    GgmlWeights::repack(&Tensor { typ, ne: d.ne, nb: d.nb, data })
}

/// See `kleidiai_rs.h`.
#[unsafe(no_mangle)]
pub extern "C" fn kairs_cpu_features() -> u32 {
    Features::current().iter().fold(0u32, |m, f| m | (1 << f as u32))
}

/// See `kleidiai_rs.h`.
#[unsafe(no_mangle)]
pub extern "C" fn kairs_sme_vector_bytes() -> u32 {
    Features::current().sme_vector_bytes().unwrap_or(0) as u32
}

/// See `kleidiai_rs.h`.
#[unsafe(no_mangle)]
pub extern "C" fn kairs_version() -> *const c_char {
    static V: &str = concat!(env!("CARGO_PKG_VERSION"), " (KleidiAI 1.30.0)\0");
    V.as_ptr().cast()
}

/// See `kleidiai_rs.h`.
#[unsafe(no_mangle)]
pub extern "C" fn kairs_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// See `kleidiai_rs.h`.
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
        let out = unsafe { size.as_mut() }.ok_or_else(|| invalid("size is NULL"))?;
        *out = repack_tensor(d, data)?.to_bytes()?.len();
        Ok(())
    })
}

/// See `kleidiai_rs.h`.
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
            return Err(Error::BufferLength { what: "repack destination", got: out.len(), need: ser.len() });
        }
        if out.as_ptr() as usize % 64 != 0 {
            return Err(invalid("repack destination must be 64-byte aligned"));
        }
        out[..ser.len()].copy_from_slice(&ser);
        Ok(())
    })
}

/// See `kleidiai_rs.h`.
///
/// # Safety
/// `packed` points to `packed_size` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_verify(packed: *const c_void, packed_size: usize) -> c_int {
    // SAFETY: forwarded caller guarantee; the view dies in this call.
    guard(|| unsafe { view(packed, packed_size, true) }.map(|_| ()))
}

/// See `kleidiai_rs.h`.
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
        let m = usize::try_from(m).ok().filter(|m| *m > 0).ok_or_else(|| invalid("m must be positive"))?;
        let out = unsafe { name.as_mut() }.ok_or_else(|| invalid("name is NULL"))?;
        let s = CString::new(w.kernel_for(m).unwrap_or("reference")).expect("kernel names have no NUL");
        *out = KERNEL_NAME.with(|k| {
            *k.borrow_mut() = s;
            k.borrow().as_ptr()
        });
        Ok(())
    })
}

/// See `kleidiai_rs.h`.
///
/// # Safety
/// `packed` points to `packed_size` readable bytes; `size` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kairs_work_size(packed: *const c_void, packed_size: usize, m: i64, size: *mut usize) -> c_int {
    guard(|| {
        // SAFETY: forwarded caller guarantee; the view dies in this call.
        let w = unsafe { view(packed, packed_size, false) }?;
        let m = usize::try_from(m).ok().filter(|m| *m > 0).ok_or_else(|| invalid("m must be positive"))?;
        let out = unsafe { size.as_mut() }.ok_or_else(|| invalid("size is NULL"))?;
        *out = w.work_size(m)?;
        Ok(())
    })
}

/// See `kleidiai_rs.h`.
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
        let (s1, d) = unsafe { (desc(src1, "src1")?, desc(dst, "dst")?) };
        let x = unsafe { bytes(src1_data, src1_size, "src1 data") }?;
        // SAFETY: the caller guarantees this pointer valid for the size given (see the function's `# Safety`); NULL is checked inside.
        let y = unsafe { bytes_mut(dst_data, dst_size, "dst data") }?;
        let t1 = GgmlType::from_id(u32::try_from(s1.type_).map_err(|_| invalid("negative type"))?)?;
        let td = GgmlType::from_id(u32::try_from(d.type_).map_err(|_| invalid("negative type"))?)?;
        let src1 = Tensor { typ: t1, ne: s1.ne, nb: s1.nb, data: x };
        let mut dst = TensorMut { typ: td, ne: d.ne, nb: d.nb, data: y };
        let threads =
            usize::try_from(n_threads).ok().filter(|t| *t > 0).ok_or_else(|| invalid("n_threads must be positive"))?;
        let par = if threads == 1 { Parallelism::Sequential } else { Parallelism::Rayon(threads) };
        SCRATCH.with(|s| w.mul_mat(&src1, &mut dst, par, &mut s.borrow_mut()))
    })
}

/// See `kleidiai_rs.h`.
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
