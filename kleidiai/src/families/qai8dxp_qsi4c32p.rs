//! What the two qai8dxp x qsi4c32p families share
//! (`matmul_clamp_f32_qai8dxp_qsi4c32p`, `matmul_clamp_bf16_qai8dxp_qsi4c32p`):
//! the scale type, the reference math, the `qsi4c32p` / `qsi4c32ps1s0`
//! packed RHS formats with their packing and unpacking.

use crate::error::Result;
use crate::formats::{BlockInt4, ScaleType};
use crate::packed::Clamp;
use crate::quant::Qai8dxRow;

/// The scale type every packer of these families stores.
pub const SCALE_TYPE: ScaleType = ScaleType::Bf16;

/// Checks the shapes shared by the qai8dxp x qsi4c32p families' reference
/// and kernels; returns `(n, k, bl)`.
pub(crate) fn check_weights(w: &BlockInt4<'_>) -> Result<(usize, usize, usize)> {
    w.validate()?;
    Ok((w.n(), w.k(), w.bl()))
}

/// The math of the qai8dxp x qsi4c32p families for rows quantised by
/// `quantise(i)`; `out(i, j, y)` receives each clamped f32 result.
pub(crate) fn reference_core(
    m: usize,
    w: &BlockInt4<'_>,
    clamp: Clamp,
    quantise: impl Fn(usize) -> Qai8dxRow,
    mut out: impl FnMut(usize, usize, f32),
) -> Result<()> {
    let (n, k, bl) = check_weights(w)?;
    let blocks = k / bl;
    let scales: Vec<f64> = w.scale_bits(SCALE_TYPE)?.iter().map(|b| SCALE_TYPE.value_of(*b) as f64).collect();
    let wq: Vec<i32> = (0..n * k).map(|i| w.value(i / k, i % k) as i32).collect();
    for i in 0..m {
        let row = quantise(i);
        for j in 0..n {
            let mut acc = 0f64;
            for b in 0..blocks {
                let mut dot = 0i32;
                for p in b * bl..(b + 1) * bl {
                    dot += (row.q[p] as i32 - row.zero_point) * wq[j * k + p];
                }
                acc += dot as f64 * scales[j * blocks + b];
            }
            let mut y = acc * row.recip_scale as f64;
            if let Some(bias) = w.bias() {
                y += bias[j] as f64;
            }
            out(i, j, (y as f32).max(clamp.min).min(clamp.max));
        }
    }
    Ok(())
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::buffer::AlignedBuf;
    use crate::cpu::{CpuFeature, Features};
    use crate::error;
    use crate::formats::Order;
    use crate::packed::{PackedLayout, PackedRhs};
    use crate::registry::info::{KernelInfo, VectorLength, rank_for, tile_kind_for};
    use kleidiai_sys as sys;

    /// Packed RHS of the NEON kernels (bf16 scales, channel sums, bias).
    pub(crate) const FORMAT_QSI4C32P: &str = "qsi4c32p";
    /// Packed RHS of the SME2 kernels (same regions, values in K order).
    pub(crate) const FORMAT_QSI4C32PS1S0: &str = "qsi4c32ps1s0";
    pub(crate) const LHS_FORMAT: &str = "qai8dxp";

    const RHS_NRX4: &[&str] =
        &["kai_rhs_pack_nxk_qsi4c32pnrx4_qsu4c32s1s0_neon", "kai_rhs_pack_kxn_qsi4c32p_qsu4c32s1s0"];
    const RHS_NRX8: &[&str] =
        &["kai_rhs_pack_nxk_qsi4c32pnrx8_qsu4c32s1s0_neon", "kai_rhs_pack_kxn_qsi4c32p_qsu4c32s1s0"];

    const RHS_PS1S0: &[&str] =
        &["kai_rhs_pack_nxk_qsi4c32ps1s0nrx4_qsu4c32s1s0_neon", "kai_rhs_pack_kxn_qsi4c32ps1s0nrx4_qsu4c32s1s0_neon"];

    /// The NEON RHS packers for a kernel name (`..._qsi4c32p4x8_...`: the
    /// digit after the `x` is `kr / sr`).
    fn neon_rhs_packers(name: &str) -> &'static [&'static str] {
        let tok = name.split('_').find(|t| t.starts_with("qsi4c32p")).unwrap_or("");
        if tok.ends_with('8') { RHS_NRX8 } else { RHS_NRX4 }
    }

    /// The registry entry of kernel `u` of `family`, whose LHS packer is
    /// `lhs_packer`, and the packed RHS format it reads: `qsi4c32ps1s0` for
    /// the SME2 kernels, else `qsi4c32p` (packed by the NEON packer of its
    /// `kr / sr`).
    pub(crate) fn kernel_info(
        u: &'static sys::Ukernel,
        family: &'static str,
        lhs_packer: &'static str,
    ) -> (KernelInfo, &'static str) {
        let sme2 = u.features.contains(&CpuFeature::Sme2);
        let info = KernelInfo {
            name: u.name,
            family,
            features: u.features,
            vector_length: VectorLength::Any,
            tile: tile_kind_for(u.name),
            lhs_packer: Some(lhs_packer),
            rhs_packers: if sme2 { RHS_PS1S0 } else { neon_rhs_packers(u.name) },
            rank: rank_for(u.name, u.features),
        };
        (info, if sme2 { FORMAT_QSI4C32PS1S0 } else { FORMAT_QSI4C32P })
    }

    /// Checks the block length against the packers' and kernels' rules
    /// (`bl` a positive multiple of 32 dividing `k`, and of `kr`).
    pub(crate) fn check_bl(k: usize, bl: usize, kr: usize) -> Result<()> {
        error::nonzero(k, "k")?;
        error::nonzero(bl, "bl")?;
        error::multiple_of(bl, 32, "bl", "qsi4c32 block length")?;
        error::multiple_of(k, bl, "k", "qsi4c32: whole blocks")?;
        error::multiple_of(bl, kr, "bl", "qsi4c32 packing: bl must be a multiple of kr")
    }

    /// A qsi4c32p RHS packer's size query.
    type PackedSize = unsafe extern "C" fn(usize, usize, usize, usize, usize, usize, sys::kai_datatype) -> usize;
    /// A qsi4c32p RHS packer's run function, with parameters `P`.
    type PackRun<P> = unsafe extern "C" fn(
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        *const u8,
        usize,
        *const f32,
        *const core::ffi::c_void,
        usize,
        *mut core::ffi::c_void,
        usize,
        *const P,
    );

    /// A qsi4c32p RHS packer by input order (the parameter struct differs).
    #[derive(Clone, Copy)]
    enum Packer {
        Nxk(PackedSize, PackRun<sys::kai_rhs_pack_nxk_qsi4c32p_qsu4c32s1s0_params>),
        Kxn(PackedSize, PackRun<sys::kai_rhs_pack_kxn_qsi4c32p_qsu4c32s1s0_params>),
    }
    use Packer::{Kxn, Nxk};

    /// Packs `w` into the `qsi4c32p` / `qsi4c32ps1s0` layout `layout`
    /// (bf16 scales, sums and bias), choosing upstream's packer by format,
    /// input order, `kr / sr` and the CPU. Shared with the bf16-output family.
    pub(crate) fn pack_qsi4c32p_rhs(layout: PackedLayout, w: &BlockInt4<'_>) -> Result<PackedRhs> {
        let (n, k, bl) = check_weights(w)?;
        let (nr, kr, sr) = (layout.r, layout.kr, layout.sr);
        check_bl(k, bl, kr)?;
        error::multiple_of(nr, 4, "nr", "qsi4c32 packing")?;
        error::multiple_of(kr, sr, "kr", "sr must divide kr")?;
        let f = Features::current();
        let kxn = match w {
            BlockInt4::Blocks(b) => b.order == Order::KxN,
            BlockInt4::Q4_0(_) => false,
        };
        let ps1s0 = layout.format == FORMAT_QSI4C32PS1S0;
        // The K x N s1s0 packer is built for FP16 + BF16: use it only where it
        // may run; otherwise transpose in Rust and use the N x K one.
        let kxn = kxn && (!ps1s0 || f.has_all(&[CpuFeature::Fp16, CpuFeature::Bf16]));
        if ps1s0 && kr / sr != 4 {
            return Err(crate::Error::bad_value("kr / sr", format!("{kr} / {sr}"), "qsi4c32ps1s0 packing needs 4"));
        }
        let order = if kxn { Order::KxN } else { Order::NxK };
        let values = w.qsu4_s1s0(order)?;
        let scales = w.scale_bits(SCALE_TYPE)?;
        let rhs_stride = if kxn { n.div_ceil(2) } else { k / 2 };
        let scale_stride = (k / bl) * 2;
        let bias = w.bias().map_or(core::ptr::null(), <[f32]>::as_ptr);
        let dt = sys::kai_datatype_kai_dt_bf16;
        let p_nxk =
            sys::kai_rhs_pack_nxk_qsi4c32p_qsu4c32s1s0_params { lhs_zero_point: 1, rhs_zero_point: 8, scale_dt: dt };
        let p_kxn =
            sys::kai_rhs_pack_kxn_qsi4c32p_qsu4c32s1s0_params { lhs_zero_point: 1, rhs_zero_point: 8, scale_dt: dt };
        let (vp, sp) = (values.as_ptr(), scales.as_ptr().cast::<core::ffi::c_void>());
        // Upstream's packer for the format, input order and `kr / sr`.
        let packer = match (ps1s0, kxn, kr / sr) {
            (true, true, _) => Kxn(
                sys::kai_get_rhs_packed_size_rhs_pack_kxn_qsi4c32ps1s0nrx4_qsu4c32s1s0_neon,
                sys::kai_run_rhs_pack_kxn_qsi4c32ps1s0nrx4_qsu4c32s1s0_neon,
            ),
            (true, false, _) => Nxk(
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32ps1s0nrx4_qsu4c32s1s0_neon,
                sys::kai_run_rhs_pack_nxk_qsi4c32ps1s0nrx4_qsu4c32s1s0_neon,
            ),
            (false, true, _) => Kxn(
                sys::kai_get_rhs_packed_size_rhs_pack_kxn_qsi4c32p_qsu4c32s1s0,
                sys::kai_run_rhs_pack_kxn_qsi4c32p_qsu4c32s1s0,
            ),
            (false, false, 4) => Nxk(
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32pnrx4_qsu4c32s1s0_neon,
                sys::kai_run_rhs_pack_nxk_qsi4c32pnrx4_qsu4c32s1s0_neon,
            ),
            (false, false, 8) => Nxk(
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32pnrx8_qsu4c32s1s0_neon,
                sys::kai_run_rhs_pack_nxk_qsi4c32pnrx8_qsu4c32s1s0_neon,
            ),
            (false, false, _) => Nxk(
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32p_qsu4c32s1s0,
                sys::kai_run_rhs_pack_nxk_qsi4c32p_qsu4c32s1s0,
            ),
        };
        let (Nxk(size, _) | Kxn(size, _)) = packer;
        let mut buf;
        // SAFETY: (either order) `values` holds the whole matrix in `order`
        // with rows `rhs_stride` bytes apart (qsu4_s1s0), `scales` n rows of
        // k / bl bf16 (`scale_stride` bytes), `bias` n floats or null;
        // k % bl == 0, bl % 32 == 0, bl % kr == 0, kr % sr == 0, nr % 4 == 0
        // (checked above), zero points 1 / 8 and scale type bf16 as the
        // packers require, num_groups 1, extra_bytes 0; the destination has
        // the size the packer's own query returns. The NEON packers need
        // nothing beyond NEON except the K x N s1s0 one (FP16 + BF16,
        // checked).
        unsafe {
            buf = AlignedBuf::zeroed(size(n, k, nr, kr, sr, bl, dt));
            let out = buf.as_mut_ptr().cast();
            match packer {
                Nxk(_, run) => run(1, n, k, nr, kr, sr, bl, vp, rhs_stride, bias, sp, scale_stride, out, 0, &p_nxk),
                Kxn(_, run) => run(1, n, k, nr, kr, sr, bl, vp, rhs_stride, bias, sp, scale_stride, out, 0, &p_kxn),
            }
        }
        Ok(PackedRhs::new(layout, buf))
    }

    /// Weight row `row` of a packed RHS in format `qsi4c32p` or
    /// `qsi4c32ps1s0`, as f32 (`value * bf16 scale`; bias not included):
    /// what ggml's `get_rows` needs.
    pub fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        let l = *rhs.layout();
        if l.format != FORMAT_QSI4C32P && l.format != FORMAT_QSI4C32PS1S0 {
            return Err(crate::Error::bad_value("packed RHS format", l.format, "not a qsi4c32p format"));
        }
        if row >= l.rows {
            return Err(crate::Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        let (nr, bl, blocks) = (l.r, l.bl, l.k / l.bl);
        let block_bytes = nr * (bl / 2 + 2);
        let stride = blocks * block_bytes + nr * 8;
        let group = &rhs.as_bytes()[(row / nr) * stride..(row / nr + 1) * stride];
        let r = row % nr;
        let blen = l.kr / l.sr;
        let nib = |byte: u8, hi: bool| -> i8 { ((if hi { byte & 0xF0 } else { byte << 4 }) as i8) >> 4 };
        for (kk, o) in out.iter_mut().enumerate().take(l.k) {
            let (b, kb) = (kk / bl, kk % bl);
            let base = b * block_bytes;
            let at = base + nr * bl / 2 + 2 * r;
            let scale = SCALE_TYPE.value_of(u16::from_le_bytes([group[at], group[at + 1]]));
            let (byte, hi) = if l.format == FORMAT_QSI4C32P {
                // 32-value sub-blocks; byte j of a sub-block holds j and j + 16.
                let (sub, j) = (kb / 32, kb % 32);
                let j16 = j % 16;
                (base + sub * 16 * nr + (j16 / blen) * nr * blen + r * blen + j16 % blen, j >= 16)
            } else {
                // Values in K order, 4 per u16, u16s of the nr rows interleaved.
                (base + ((kb / 4) * nr + r) * 2 + (kb % 4) / 2, kb % 2 == 1)
            };
            *o = nib(group[byte], hi) as f32 * scale;
        }
        Ok(())
    }
}
