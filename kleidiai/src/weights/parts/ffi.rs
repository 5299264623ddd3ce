//! The upstream functions of the families with a per-thread form.
use super::LhsPacker;
use crate::error::{Error, Result};
use crate::families::engine::{self, Gate, Tiles, query};
use crate::registry::KernelInfo;
use crate::sys::interfaces as ifc;

/// A kernel's run function and RHS offset function, by signature (the
/// engine runs them).
pub(super) type Fns = engine::ColumnRun;

fn get<T>(v: Option<T>, info: &KernelInfo, what: &str) -> Result<T> {
    v.ok_or_else(|| Error::Unsupported { kernel: info.name, why: format!("upstream has no {what}") })
}

macro_rules! resolve_in {
    ($g:ident, $fam:ident, $info:ident, |$i:ident| $fns:expr) => {{
        let Some((_, $i)) = ifc::$fam::KERNELS.iter().find(|(u, _)| u.name == $info.name) else {
            return Err(Error::UnknownKernel($info.name.to_string()));
        };
        let t = $g.tiles([
            get($i.get_m_step, $info, "m_step")?,
            get($i.get_n_step, $info, "n_step")?,
            get($i.get_mr, $info, "mr")?,
            get($i.get_nr, $info, "nr")?,
            get($i.get_kr, $info, "kr")?,
            get($i.get_sr, $info, "sr")?,
        ]);
        (($fns), t)
    }};
}

/// The functions and blocking of `info`, whose gate `g` is (its getters may
/// execute SME).
pub(super) fn resolve(g: &Gate, info: &KernelInfo) -> Result<(Fns, Tiles)> {
    Ok(match info.family {
        "matmul_clamp_f32_qsi8d32p_qsi4c32p" => resolve_in!(g, matmul_clamp_f32_qsi8d32p_qsi4c32p, info, |i| {
            Fns::Bl(get(i.run_matmul, info, "run")?, get(i.get_rhs_packed_offset, info, "rhs offset")?)
        }),
        "matmul_clamp_f32_f16p_qsi4c32p" => resolve_in!(g, matmul_clamp_f32_f16p_qsi4c32p, info, |i| {
            Fns::Bl(get(i.run_matmul, info, "run")?, get(i.get_rhs_packed_offset, info, "rhs offset")?)
        }),
        "matmul_clamp_f32_qai8dxp_qsi8cxp" => resolve_in!(g, matmul_clamp_f32_qai8dxp_qsi8cxp, info, |i| {
            Fns::PlainF32(get(i.run_matmul, info, "run")?, get(i.get_rhs_packed_offset, info, "rhs offset")?)
        }),
        "matmul_clamp_fp32_bf16p_bf16p" => resolve_in!(g, matmul_clamp_fp32_bf16p_bf16p, info, |i| {
            Fns::Plain(get(i.run_matmul, info, "run")?, get(i.get_rhs_packed_offset, info, "rhs offset")?)
        }),
        "matmul_clamp_f32_f32p_f32p" => resolve_in!(g, matmul_clamp_f32_f32p_f32p, info, |i| {
            Fns::Plain(get(i.run_matmul, info, "run")?, get(i.get_rhs_packed_offset, info, "rhs offset")?)
        }),
        "matmul_clamp_f32_f32_f32p" => {
            let Some((_, i)) = ifc::matmul_clamp_f32_f32_f32p::KERNELS.iter().find(|(u, _)| u.name == info.name) else {
                return Err(Error::UnknownKernel(info.name.to_string()));
            };
            // The direct-LHS interface has no get_mr: one row per step.
            let t = Tiles {
                m_step: query!(g, get(i.get_m_step, info, "m_step")?),
                n_step: query!(g, get(i.get_n_step, info, "n_step")?),
                mr: 1,
                nr: query!(g, get(i.get_nr, info, "nr")?),
                kr: query!(g, get(i.get_kr, info, "kr")?),
                sr: query!(g, get(i.get_sr, info, "sr")?),
            };
            (Fns::Direct(get(i.run_matmul, info, "run")?, get(i.get_rhs_packed_offset, info, "rhs offset")?), t)
        }
        other => {
            return Err(Error::Unsupported {
                kernel: info.name,
                why: format!("family {other} has no per-thread form"),
            });
        }
    })
}

/// The upstream packer of `p` (none for `Direct`).
pub(super) const fn lhs_packer(p: LhsPacker) -> Option<&'static engine::LhsPacker> {
    use engine::lhs_packers as L;
    Some(match p {
        LhsPacker::Qsi8d32p => &L::QSI8D32P_F32,
        LhsPacker::Qsi8d32pNeon => &L::QSI8D32P_F32_NEON,
        LhsPacker::Qsi8d32p4x8sb => &L::QSI8D32P4X8SB_F32,
        LhsPacker::F16pmrx2 => &L::F16PMRX2_F32,
        LhsPacker::Qai8dxp => &L::QAI8DXP_F32,
        LhsPacker::F32p2vlx1Sme => &L::F32P2VLX1_SME,
        LhsPacker::Bf16p2vlx2Sme => &L::BF16P2VLX2_SME,
        LhsPacker::Bf16p2vlx2Sme2 => &L::BF16P2VLX2_SME2,
        LhsPacker::Direct => return None,
    })
}

/// Bytes `m` rows of `p` pack to (`g`: the gate of its kernel).
pub(super) fn lhs_size(g: &Gate, p: LhsPacker, m: usize, k: usize, bl: usize, t: &Tiles) -> usize {
    let Some(f) = lhs_packer(p) else { return 0 }; // `Direct`: nothing packed
    f.size(g, m, k, bl, (t.mr, t.kr, t.sr))
}

/// The offset of row `row` in `p`'s packed LHS, as [`lhs_size`].
pub(super) fn lhs_offset(g: &Gate, p: LhsPacker, row: usize, k: usize, bl: usize, t: &Tiles) -> usize {
    let Some(f) = lhs_packer(p) else { return 0 }; // `Direct`: nothing packed
    f.offset(g, row, k, bl, (t.mr, t.kr, t.sr))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ColumnRun::run` skips the RHS offset query at column 0: every kernel with a
    /// per-thread form that runs here answers 0 there.
    #[test]
    fn rhs_offset_of_column_0_is_0() {
        let f = crate::cpu::Features::current();
        let mut checked = Vec::new();
        for info in crate::families::all_kernel_infos() {
            if LhsPacker::from_info(info).is_none() || info.supported(&f).is_err() {
                continue;
            }
            let ks = [256, 4096];
            // `ColumnRun::run` only ever gets kernels that resolve.
            let g = crate::families::engine::gate_with(info, &f).unwrap();
            let Ok((fns, _)) = resolve(&g, info) else { continue };
            let offs = ks.map(|k| match fns {
                Fns::Bl(_, off) => query!(&g, off, 0, k, 32),
                Fns::PlainF32(_, off) | Fns::Plain(_, off) | Fns::Direct(_, off) => query!(&g, off, 0, k),
            });
            assert_eq!(offs, [0, 0], "{} k={ks:?}", info.name);
            checked.push(info.name);
        }
        if checked.is_empty() {
            println!("rhs offset of column 0: no kernel with a per-thread form runs on this CPU");
        } else {
            println!("rhs offset of column 0: {} kernels checked", checked.len());
        }
    }
}
