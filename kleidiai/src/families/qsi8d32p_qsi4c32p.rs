//! What the two qsi4c32p families with f16 scales share
//! (`matmul_clamp_f32_qsi8d32p_qsi4c32p`, `matmul_clamp_f32_f16p_qsi4c32p`):
//! the scale type, the weight checks, the f16-scale packed RHS formats with
//! their packing and unpacking, and the dense LHS view.

use crate::error::Result;
use crate::formats::{BlockInt4, ScaleType};

/// The scale type every packer of these families stores.
pub const SCALE_TYPE: ScaleType = ScaleType::F16;

/// Checks the weights of a family whose packers take no bias; returns
/// `(n, k, bl)`.
pub(crate) fn check_weights_no_bias(w: &BlockInt4<'_>, family: &str) -> Result<(usize, usize, usize)> {
    w.validate()?;
    if w.bias().is_some() {
        return Err(crate::Error::bad_value(
            "bias",
            "given",
            format!("{family} has no bias (its packers take none): add it to the output instead"),
        ));
    }
    Ok((w.n(), w.k(), w.bl()))
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::buffer::AlignedBuf;
    use crate::error;
    use crate::packed::{PackedLayout, PackedRhs};
    use kleidiai_sys as sys;
    use std::borrow::Cow;

    /// RHS of the NEON and SVE kernels (f16 scales ahead of each block).
    pub(crate) const FORMAT_SCALEF16: &str = "qsi4c32pscalef16";
    /// RHS of the SME2 kernels (values in K order, unsigned; scales last).
    pub(crate) const FORMAT_PS1S0SCALEF16: &str = "qsi4c32ps1s0scalef16";
    /// RHS of the SME kernels (values paired k / k + 4, scales / 16 last).
    pub(crate) const FORMAT_PS4S0SF16: &str = "qsi4c32ps4s0sf16";

    /// Checks `k` and `bl` against the packers' and kernels' rules: `bl` a
    /// positive multiple of 32 dividing `k`, `kr` dividing `k`, at most 256
    /// for the SME packers.
    pub(crate) fn check_bl(k: usize, bl: usize, kr: usize, max_bl: usize) -> Result<()> {
        error::nonzero(k, "k")?;
        error::nonzero(bl, "bl")?;
        error::multiple_of(bl, 32, "bl", "qsi4c32 block length")?;
        error::multiple_of(k, bl, "k", "qsi4c32: whole blocks")?;
        error::multiple_of(k, kr, "k", "qsi4c32 packing: k must be a multiple of kr")?;
        if bl > max_bl {
            return Err(crate::Error::bad_value("bl", bl, format!("above this kernel's maximum {max_bl}")));
        }
        Ok(())
    }

    /// The largest block length for a packed RHS format.
    pub(crate) fn max_bl(format: &str) -> usize {
        if format == FORMAT_SCALEF16 { usize::MAX } else { sys::KAI_SME_VEC_LENGTH_MAX_BYTES as usize }
    }

    /// Packs `w` (no bias) into one of the f16-scale formats `layout`
    /// describes. Shared with `matmul_clamp_f32_f16p_qsi4c32p`.
    pub(crate) fn pack_f16_rhs(layout: PackedLayout, w: &BlockInt4<'_>, family: &str) -> Result<PackedRhs> {
        let (n, k, bl) = check_weights_no_bias(w, family)?;
        let (nr, kr, sr) = (layout.r, layout.kr, layout.sr);
        check_bl(k, bl, kr, max_bl(layout.format))?;
        let ok = match layout.format {
            FORMAT_SCALEF16 => sr == 2 && (1..=16).contains(&kr),
            _ => kr == 4 && sr == 2,
        };
        if !ok || nr == 0 {
            return Err(crate::Error::bad_value(
                "nr, kr, sr",
                format!("{nr}, {kr}, {sr}"),
                format!("unsupported by {} packing", layout.format),
            ));
        }
        let src: Cow<'_, [u8]> = w.qsu4c32s16s0()?;
        let params = sys::kai_rhs_pack_qs4cxs1s0_param { lhs_zero_point: 1, rhs_zero_point: 8 };
        let mut buf;
        // SAFETY: (every arm) `src` holds n rows of k / bl blocks of
        // (2 + bl / 2) bytes, the layout the packers read (qsu4c32s16s0);
        // k % bl == 0, bl % 32 == 0, k % kr == 0, k even, bl <= 256 for the
        // SME packers, kr / sr as each packer assumes (checked above); bias
        // null, num_groups 1, extra_bytes 0, zero points 1 / 8; the
        // destination is zeroed (the s1s0 packer leaves padding rows
        // unwritten) and has the size the packer's own query returns. The
        // packers are plain C / NEON code.
        unsafe {
            match layout.format {
                FORMAT_SCALEF16 => {
                    buf = AlignedBuf::zeroed(sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0(
                        n, k, nr, kr, bl,
                    ));
                    sys::kai_run_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0(
                        1,
                        n,
                        k,
                        nr,
                        kr,
                        sr,
                        bl,
                        src.as_ptr(),
                        core::ptr::null(),
                        buf.as_mut_ptr().cast(),
                        0,
                        &params,
                    );
                }
                FORMAT_PS1S0SCALEF16 => {
                    buf = AlignedBuf::zeroed(
                        sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon(
                            n, k, nr, kr, bl,
                        ),
                    );
                    sys::kai_run_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon(
                        1,
                        n,
                        k,
                        nr,
                        kr,
                        sr,
                        bl,
                        src.as_ptr(),
                        core::ptr::null(),
                        buf.as_mut_ptr().cast(),
                        0,
                        &params,
                    );
                }
                _ => {
                    buf = AlignedBuf::zeroed(
                        sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32ps4s0sf16_qsu4c32s16s0_neon(n, k, nr, kr, bl),
                    );
                    sys::kai_run_rhs_pack_nxk_qsi4c32ps4s0sf16_qsu4c32s16s0_neon(
                        1,
                        n,
                        k,
                        nr,
                        kr,
                        sr,
                        bl,
                        src.as_ptr(),
                        core::ptr::null(),
                        buf.as_mut_ptr().cast(),
                        0,
                        &params,
                    );
                }
            }
        }
        Ok(PackedRhs::new(layout, buf))
    }

    /// `lhs` as a dense `m x k` matrix: the NEON packers ignore the stride.
    pub(crate) fn dense_lhs(m: usize, k: usize, lhs: &[f32], lhs_stride: usize) -> Result<Cow<'_, [f32]>> {
        error::nonzero(m, "m")?;
        error::nonzero(k, "k")?;
        if lhs_stride < k {
            return Err(crate::Error::bad_value("lhs_stride", lhs_stride, format!("less than k = {k}")));
        }
        let need =
            error::mul(m - 1, lhs_stride, "lhs")?.checked_add(k).ok_or_else(|| crate::Error::Overflow("lhs".into()))?;
        error::at_least(lhs.len(), need, "lhs")?;
        if lhs_stride == k {
            return Ok(Cow::Borrowed(&lhs[..m * k]));
        }
        Ok(Cow::Owned((0..m).flat_map(|i| lhs[i * lhs_stride..i * lhs_stride + k].iter().copied()).collect()))
    }

    /// Weight row `row` of a packed RHS in format `qsi4c32pscalef16`,
    /// `qsi4c32ps1s0scalef16` or `qsi4c32ps4s0sf16`, as f32
    /// (`value * scale` with the scale the packer stored).
    pub fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        let l = *rhs.layout();
        if ![FORMAT_SCALEF16, FORMAT_PS1S0SCALEF16, FORMAT_PS4S0SF16].contains(&l.format) {
            return Err(crate::Error::bad_value("packed RHS format", l.format, "not an f16-scale qsi4c32 format"));
        }
        if row >= l.rows {
            return Err(crate::Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        let (nr, bl, blocks) = (l.r, l.bl, l.k / l.bl);
        let stride = nr * blocks * (bl / 2 + 2);
        let group = &rhs.as_bytes()[(row / nr) * stride..(row / nr + 1) * stride];
        let r = row % nr;
        let signed = |byte: u8, hi: bool| -> i8 { ((if hi { byte & 0xF0 } else { byte << 4 }) as i8) >> 4 };
        let f16_at = |at: usize| SCALE_TYPE.value_of(u16::from_le_bytes([group[at], group[at + 1]]));
        let scales_last = stride - nr * blocks * 2;
        for (kk, o) in out.iter_mut().enumerate().take(l.k) {
            let (b, kb) = (kk / bl, kk % bl);
            *o = match l.format {
                FORMAT_SCALEF16 => {
                    // Per block: nr scales, then segments of kr / 2 source
                    // bytes per row; byte j pairs values j and j + bl / 2.
                    let base = b * nr * (bl / 2 + 2);
                    let seg = l.kr / 2;
                    let j = kb % (bl / 2);
                    let byte = group[base + nr * 2 + (j / seg) * nr * seg + r * seg + j % seg];
                    signed(byte, kb >= bl / 2) as f32 * f16_at(base + 2 * r)
                }
                FORMAT_PS1S0SCALEF16 => {
                    // u16 q of a block (values 4q..4q+3, unsigned) per row.
                    let at = ((b * bl / 4 + kb / 4) * nr + r) * 2 + (kb % 4) / 2;
                    let nib = if kb % 2 == 1 { group[at] >> 4 } else { group[at] & 0xF };
                    (nib as i32 - 8) as f32 * f16_at(scales_last + (b * nr + r) * 2)
                }
                _ => {
                    // u32 packet p of a block: byte i pairs 8p + i and 8p + i + 4.
                    let within = kb % 8;
                    let at = ((b * bl / 8 + kb / 8) * nr + r) * 4 + within % 4;
                    // Stored scale is scale / 16: both factors exact in f32.
                    signed(group[at], within >= 4) as f32 * (f16_at(scales_last + (b * nr + r) * 2) * 16.0)
                }
            };
        }
        Ok(())
    }
}
