//! The upstream functions of the families with a per-thread form.
use super::{LhsPacker, PartKernel};
use crate::error::{Error, Result};
use crate::families::engine::Tiles;
use crate::registry::KernelInfo;
use crate::sys;
use crate::sys::interfaces as ifc;
use core::ffi::c_void;
use core::ops::Range;

type Off3 = unsafe extern "C" fn(usize, usize, usize) -> usize;
type Off2 = unsafe extern "C" fn(usize, usize) -> usize;
type RunBl =
    unsafe extern "C" fn(usize, usize, usize, usize, *const c_void, *const c_void, *mut f32, usize, usize, f32, f32);
type RunQ = unsafe extern "C" fn(usize, usize, usize, *const c_void, *const c_void, *mut f32, usize, usize, f32, f32);
type RunF =
    unsafe extern "C" fn(usize, usize, usize, *const c_void, *const c_void, *mut c_void, usize, usize, f32, f32);
type RunD =
    unsafe extern "C" fn(usize, usize, usize, *const c_void, usize, *const c_void, *mut c_void, usize, usize, f32, f32);

/// A kernel's run function and RHS offset function, by signature.
#[derive(Clone, Copy, Debug)]
pub(super) enum Fns {
    /// Block-quantised int4 weights (bl argument).
    Bl(RunBl, Off3),
    /// int8 per-channel weights.
    Q(RunQ, Off2),
    /// f32 packed LHS.
    F(RunF, Off2),
    /// f32 LHS read directly.
    D(RunD, Off2),
}

fn get<T>(v: Option<T>, info: &KernelInfo, what: &str) -> Result<T> {
    v.ok_or_else(|| Error::Unsupported { kernel: info.name, why: format!("upstream has no {what}") })
}

macro_rules! resolve_in {
    ($fam:ident, $info:ident, |$i:ident| $fns:expr) => {{
        let Some((_, $i)) = ifc::$fam::KERNELS.iter().find(|(u, _)| u.name == $info.name) else {
            return Err(Error::UnknownKernel($info.name.to_string()));
        };
        let t = Tiles {
            m_step: get($i.get_m_step, $info, "m_step")?(),
            n_step: get($i.get_n_step, $info, "n_step")?(),
            mr: get($i.get_mr, $info, "mr")?(),
            nr: get($i.get_nr, $info, "nr")?(),
            kr: get($i.get_kr, $info, "kr")?(),
            sr: get($i.get_sr, $info, "sr")?(),
        };
        (($fns), t)
    }};
}

/// The functions and blocking of `info`.
///
/// # Safety
/// The CPU has the kernel's features (its getters may execute SME).
pub(super) unsafe fn resolve(info: &KernelInfo) -> Result<(Fns, Tiles)> {
    // SAFETY: (getter calls inside the macro) the caller's guarantee.
    Ok(unsafe {
        match info.family {
            "matmul_clamp_f32_qsi8d32p_qsi4c32p" => resolve_in!(matmul_clamp_f32_qsi8d32p_qsi4c32p, info, |i| {
                Fns::Bl(get(i.run_matmul, info, "run")?, get(i.get_rhs_packed_offset, info, "rhs offset")?)
            }),
            "matmul_clamp_f32_f16p_qsi4c32p" => resolve_in!(matmul_clamp_f32_f16p_qsi4c32p, info, |i| {
                Fns::Bl(get(i.run_matmul, info, "run")?, get(i.get_rhs_packed_offset, info, "rhs offset")?)
            }),
            "matmul_clamp_f32_qai8dxp_qsi8cxp" => resolve_in!(matmul_clamp_f32_qai8dxp_qsi8cxp, info, |i| {
                Fns::Q(get(i.run_matmul, info, "run")?, get(i.get_rhs_packed_offset, info, "rhs offset")?)
            }),
            "matmul_clamp_fp32_bf16p_bf16p" => resolve_in!(matmul_clamp_fp32_bf16p_bf16p, info, |i| {
                Fns::F(get(i.run_matmul, info, "run")?, get(i.get_rhs_packed_offset, info, "rhs offset")?)
            }),
            "matmul_clamp_f32_f32p_f32p" => resolve_in!(matmul_clamp_f32_f32p_f32p, info, |i| {
                Fns::F(get(i.run_matmul, info, "run")?, get(i.get_rhs_packed_offset, info, "rhs offset")?)
            }),
            "matmul_clamp_f32_f32_f32p" => {
                let Some((_, i)) = ifc::matmul_clamp_f32_f32_f32p::KERNELS.iter().find(|(u, _)| u.name == info.name)
                else {
                    return Err(Error::UnknownKernel(info.name.to_string()));
                };
                // The direct-LHS interface has no get_mr: one row per step.
                let t = Tiles {
                    m_step: get(i.get_m_step, info, "m_step")?(),
                    n_step: get(i.get_n_step, info, "n_step")?(),
                    mr: 1,
                    nr: get(i.get_nr, info, "nr")?(),
                    kr: get(i.get_kr, info, "kr")?(),
                    sr: get(i.get_sr, info, "sr")?(),
                };
                (Fns::D(get(i.run_matmul, info, "run")?, get(i.get_rhs_packed_offset, info, "rhs offset")?), t)
            }
            other => {
                return Err(Error::Unsupported {
                    kernel: info.name,
                    why: format!("family {other} has no per-thread form"),
                });
            }
        }
    })
}

/// # Safety
/// The packer's parameters passed `LhsPacker::check`.
pub(super) unsafe fn lhs_size(p: LhsPacker, m: usize, k: usize, bl: usize, t: &Tiles) -> usize {
    let (mr, kr, sr) = (t.mr, t.kr, t.sr);
    // SAFETY: size queries are arithmetic on checked parameters (the
    // SME packer's reads the streaming vector length, which the
    // kernel's support check made sure exists).
    unsafe {
        match p {
            LhsPacker::Qsi8d32p => sys::kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p_f32(m, k, bl, mr, kr, sr),
            LhsPacker::Qsi8d32pNeon => {
                sys::kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p_f32_neon(m, k, bl, mr, kr, sr)
            }
            LhsPacker::Qsi8d32p4x8sb => {
                sys::kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p4x8sb_f32_neon(m, k, bl, mr, kr, sr)
            }
            LhsPacker::F16pmrx2 => sys::kai_get_lhs_packed_size_lhs_pack_f16pmrx2_f32_neon(m, k, bl, mr, kr, sr),
            LhsPacker::Qai8dxp => sys::kai_get_lhs_packed_size_lhs_quant_pack_qai8dxp_f32(m, k, mr, kr, sr),
            LhsPacker::F32p2vlx1Sme => sys::kai_get_lhs_packed_size_lhs_pack_f32p2vlx1_f32_sme(m, k, mr, kr, sr),
            LhsPacker::Bf16p2vlx2Sme => sys::kai_get_lhs_packed_size_lhs_pack_bf16p2vlx2_f32_sme(m, k, mr, kr, sr),
            LhsPacker::Bf16p2vlx2Sme2 => sys::kai_get_lhs_packed_size_lhs_pack_bf16p2vlx2_f32_sme2(m, k, mr, kr, sr),
            LhsPacker::Direct => 0,
        }
    }
}

/// # Safety
/// As [`lhs_size`].
pub(super) unsafe fn lhs_offset(p: LhsPacker, row: usize, k: usize, bl: usize, t: &Tiles) -> usize {
    let (mr, kr, sr) = (t.mr, t.kr, t.sr);
    // SAFETY: as in lhs_size.
    unsafe {
        match p {
            LhsPacker::Qsi8d32p => sys::kai_get_lhs_packed_offset_lhs_quant_pack_qsi8d32p_f32(row, k, bl, mr, kr, sr),
            LhsPacker::Qsi8d32pNeon => {
                sys::kai_get_lhs_packed_offset_lhs_quant_pack_qsi8d32p_f32_neon(row, k, bl, mr, kr, sr)
            }
            LhsPacker::Qsi8d32p4x8sb => {
                sys::kai_get_lhs_packed_offset_lhs_quant_pack_qsi8d32p4x8sb_f32_neon(row, k, bl, mr, kr, sr)
            }
            LhsPacker::F16pmrx2 => sys::kai_get_lhs_packed_offset_lhs_pack_f16pmrx2_f32_neon(row, k, bl, mr, kr, sr),
            LhsPacker::Qai8dxp => sys::kai_get_lhs_packed_offset_lhs_quant_pack_qai8dxp_f32(row, k, mr, kr, sr),
            LhsPacker::F32p2vlx1Sme => sys::kai_get_lhs_packed_offset_lhs_pack_f32p2vlx1_f32_sme(row, k, mr, kr, sr),
            LhsPacker::Bf16p2vlx2Sme => sys::kai_get_lhs_packed_offset_lhs_pack_bf16p2vlx2_f32_sme(row, k, mr, kr, sr),
            LhsPacker::Bf16p2vlx2Sme2 => {
                sys::kai_get_lhs_packed_offset_lhs_pack_bf16p2vlx2_f32_sme2(row, k, mr, kr, sr)
            }
            LhsPacker::Direct => 0,
        }
    }
}

/// Packs `h` rows (m_idx_start 0, pointers pre-offset).
///
/// # Safety
/// `src` holds `h` rows of `k` f32 `stride` bytes apart; `out` the bytes
/// `h` rows pack to; the CPU runs the packer; parameters checked.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn pack(
    p: LhsPacker,
    h: usize,
    k: usize,
    bl: usize,
    t: &Tiles,
    src: *const f32,
    stride: usize,
    out: *mut u8,
) {
    let (mr, kr, sr) = (t.mr, t.kr, t.sr);
    let o = out.cast::<c_void>();
    // SAFETY: the caller's guarantees.
    unsafe {
        match p {
            LhsPacker::Qsi8d32p => sys::kai_run_lhs_quant_pack_qsi8d32p_f32(h, k, bl, mr, kr, sr, 0, src, stride, o),
            LhsPacker::Qsi8d32pNeon => {
                sys::kai_run_lhs_quant_pack_qsi8d32p_f32_neon(h, k, bl, mr, kr, sr, 0, src, stride, o)
            }
            LhsPacker::Qsi8d32p4x8sb => {
                sys::kai_run_lhs_quant_pack_qsi8d32p4x8sb_f32_neon(h, k, bl, mr, kr, sr, 0, src, stride, o)
            }
            LhsPacker::F16pmrx2 => {
                sys::kai_run_lhs_pack_f16pmrx2_f32_neon(h, k, bl, mr, kr, sr, 0, src.cast(), stride, o)
            }
            LhsPacker::Qai8dxp => sys::kai_run_lhs_quant_pack_qai8dxp_f32(h, k, mr, kr, sr, 0, src, stride, o),
            LhsPacker::F32p2vlx1Sme => {
                sys::kai_run_lhs_pack_f32p2vlx1_f32_sme(h, k, mr, kr, sr, 0, src.cast(), stride, o)
            }
            LhsPacker::Bf16p2vlx2Sme => {
                sys::kai_run_lhs_pack_bf16p2vlx2_f32_sme(h, k, mr, kr, sr, 0, src.cast(), stride, o)
            }
            LhsPacker::Bf16p2vlx2Sme2 => {
                sys::kai_run_lhs_pack_bf16p2vlx2_f32_sme2(h, k, mr, kr, sr, 0, src.cast(), stride, o)
            }
            LhsPacker::Direct => {}
        }
    }
}

/// Runs the kernel on columns `cols` of all `m` rows.
///
/// # Safety
/// As [`PartKernel::run_cols`](super::PartKernel::run_cols) checked.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn run(
    kr: &PartKernel,
    m: usize,
    cols: Range<usize>,
    lhs: *const u8,
    lhs_stride: usize,
    rhs: *const u8,
    dst: *mut f32,
    dst_stride: usize,
) {
    let (k, bl, n) = (kr.k, kr.bl, cols.len());
    let (lo, hi) = (f32::MIN, f32::MAX);
    let l = lhs.cast::<c_void>();
    // SAFETY: the caller's guarantees; the offsets are the kernel's own.
    unsafe {
        match kr.f {
            Fns::Bl(run, off) => {
                let r = rhs.add(off(cols.start, k, bl)).cast();
                run(m, n, k, bl, l, r, dst, dst_stride, 4, lo, hi)
            }
            Fns::Q(run, off) => run(m, n, k, l, rhs.add(off(cols.start, k)).cast(), dst, dst_stride, 4, lo, hi),
            Fns::F(run, off) => run(m, n, k, l, rhs.add(off(cols.start, k)).cast(), dst.cast(), dst_stride, 4, lo, hi),
            Fns::D(run, off) => {
                let r = rhs.add(off(cols.start, k)).cast();
                run(m, n, k, l, lhs_stride, r, dst.cast(), dst_stride, 4, lo, hi)
            }
        }
    }
}
