//! What the indirect-matmul families share (`imatmul_clamp_f32_f32p_f32p`,
//! `imatmul_clamp_f32_f32_f32p`, `imatmul_clamp_f16_f16p_f16p`,
//! `imatmul_clamp_qai8_qai8p_qsi8cxp`): the f32 reference math and the
//! check of `k`, the indirect LHS packing, the packed RHS addressing, and
//! the test helpers.

use crate::error::{self, Result};
use crate::formats::{FloatWeights, Indirection};
use crate::packed::Clamp;

/// `dst = clamp(x · wᵀ + bias)` in f64 with one rounding to f32: `x` is
/// `m x k`, `w` `n x k` (as f32), `bias` `n` values.
pub(crate) fn f32_core(m: usize, x: &[f32], k: usize, w: &[f32], bias: &[f32], clamp: Clamp, dst: &mut [f32]) {
    let n = bias.len();
    for i in 0..m {
        let row = &x[i * k..(i + 1) * k];
        for j in 0..n {
            let acc: f64 = bias[j] as f64
                + row.iter().zip(&w[j * k..(j + 1) * k]).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>();
            dst[i * n + j] = (acc as f32).max(clamp.min).min(clamp.max);
        }
    }
}

/// Checks that the weights' `k` is the indirection's `k_chunk_count ·
/// k_chunk_length`.
pub(crate) fn check_k(w_k: usize, kcc: usize, kcl: usize) -> Result<usize> {
    error::nonzero(kcc, "k_chunk_count")?;
    error::nonzero(kcl, "k_chunk_length")?;
    let k = error::mul(kcc, kcl, "k_chunk_count * k_chunk_length")?;
    if k != w_k {
        return Err(crate::Error::ShapeMismatch {
            what: "k of the chunks (k_chunk_count x k_chunk_length) and the weights",
            got: format!("{kcc} x {kcl} = {k}"),
            want: w_k.to_string(),
        });
    }
    Ok(k)
}

/// The f32 reference of the indirect families: gathers the LHS rows
/// through the indirection and computes `clamp(lhs · wᵀ + bias)` (f64
/// accumulation, one rounding to f32); `dst` is `m x n`.
pub(crate) fn reference_f32(
    lhs: &Indirection<'_, f32>,
    w: &FloatWeights<'_, f32>,
    clamp: Clamp,
    dst: &mut [f32],
) -> Result<()> {
    lhs.validate()?;
    w.validate()?;
    clamp.check()?;
    let k = check_k(w.k, lhs.k_chunk_count, lhs.k_chunk_length)?;
    error::at_least(dst.len(), error::mul(lhs.m, w.n, "dst")?, "dst")?;
    let x = lhs.gather()?;
    let wd = w.to_nxk()?;
    let bias: Vec<f32> = (0..w.n).map(|j| w.bias_f32(j)).collect();
    f32_core(lhs.m, &x, k, &wd, &bias, clamp, dst);
    Ok(())
}

#[cfg(target_arch = "aarch64")]
pub(crate) use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use crate::buffer::SendPtr;
    use crate::error::Result;
    use crate::families::engine;
    use crate::formats::Indirection;
    use crate::packed::{PackedLayout, PackedLhs};
    use crate::par::Parallelism;
    use crate::registry::KernelInfo;
    use core::ffi::c_void;

    /// An upstream `kai_lhs_imatmul_pack_*` packer: its run and offset
    /// functions.
    #[derive(Clone, Copy)]
    pub(crate) struct IndirectLhsPacker {
        pub pack: unsafe extern "C" fn(usize, usize, usize, *const *const c_void, usize, *const c_void, *mut c_void),
        pub offset: unsafe extern "C" fn(usize, usize, usize) -> usize,
    }

    /// Packs `lhs` (validated here) with `packer` into `out`, reset to
    /// `layout` and `size` zero bytes, in row blocks of `m_step` over up to
    /// `par` workers.
    ///
    /// # Safety
    /// The CPU must support `packer` (it runs in streaming mode), `m_step`
    /// must be its M step, `size` its packed size for `lhs`'s shape, and
    /// `packer` must read `k_chunk_length` elements of `T` through each
    /// table pointer.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn pack_indirect_lhs<T: Copy>(
        info: &KernelInfo,
        lhs: &Indirection<'_, T>,
        m_step: usize,
        layout: PackedLayout,
        size: usize,
        packer: IndirectLhsPacker,
        par: Parallelism,
        out: &mut PackedLhs,
    ) -> Result<()> {
        lhs.validate()?;
        let (m, kcc, kcl) = (lhs.m, lhs.k_chunk_count, lhs.k_chunk_length);
        let pad = vec![lhs.pad; kcl];
        let table = lhs.pointer_table(m_step, pad.as_ptr());
        out.reset(layout, size);
        let dst = SendPtr(out.data_mut().as_mut_ptr());
        let tp = SendPtr(table.as_ptr() as *mut *const T);
        let pp = SendPtr(pad.as_ptr() as *mut T);
        engine::run_rows(par, info, m, kcc * kcl, m_step, |rows| {
            let (dst, tp, pp) = (dst, tp, pp);
            // SAFETY: `rows` starts at a multiple of m_step (split_aligned):
            // its pointers begin at table index rows.start * kcc (the table is
            // laid out in blocks of m_step rows) and its packed rows at the
            // packer's offset for rows.start, a region no other range
            // writes. Every pointer the packer reads for these rows (y <
            // rows.len()) is non-null and valid for kcl elements: it points
            // into `src` (validate) or at `pad` (kcl elements), both alive
            // until the packing is done. lhs_ptr_offset 0. The rest is the
            // caller's contract.
            unsafe {
                let off = (packer.offset)(rows.start, kcc, kcl);
                (packer.pack)(
                    rows.len(),
                    kcc,
                    kcl,
                    tp.0.add(rows.start * kcc).cast(),
                    0,
                    pp.0.cast(),
                    dst.0.add(off).cast(),
                );
            }
        });
        drop((table, pad));
        Ok(())
    }

    /// Byte offset of weight `(row, kk)` in a packed imatmul RHS: blocks of
    /// `nr` channels, each `nr · lead` bytes (the biases), then per chunk
    /// `roundup(kcl, kr)` inputs in groups of `kr` (`nr` channels of `kr`
    /// elements of `esize` bytes per group), then `nr · trail` bytes (the
    /// scales of quantised formats).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn imatmul_rhs_offset(
        row: usize,
        kk: usize,
        kcc: usize,
        kcl: usize,
        nr: usize,
        kr: usize,
        esize: usize,
        (lead, trail): (usize, usize),
    ) -> usize {
        let kclp = kcl.div_ceil(kr) * kr;
        let stride = nr * (lead + kcc * kclp * esize + trail);
        let r = (kk / kcl) * kclp + kk % kcl;
        (row / nr) * stride + nr * lead + (r / kr) * nr * kr * esize + (row % nr) * kr * esize + (r % kr) * esize
    }
}

/// Test helpers shared by the imatmul families.
#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) mod test_support {
    use crate::testing::Rng;

    /// An indirection table for `m` rows of `kcc` chunks of `kcl` over a
    /// source of `src_len` elements: random chunk starts (any alignment,
    /// some ending exactly at the end of the source) and about one padding
    /// chunk in five (every chunk of row 0 when `m > 1`, as upstream tests).
    pub(crate) fn chunks(rng: &mut Rng, m: usize, kcc: usize, kcl: usize, src_len: usize) -> Vec<Option<usize>> {
        (0..m * kcc)
            .map(|i| {
                if (m > 1 && i < kcc) || rng.below(5) == 0 {
                    None
                } else if rng.below(7) == 0 {
                    Some(src_len - kcl)
                } else {
                    Some(rng.below((src_len - kcl + 1) as u64) as usize)
                }
            })
            .collect()
    }

    /// Per output `Σ_k |x·w| + |bias|` for dense `x` (`m x k`), `w` (`n x k`).
    pub(crate) fn magnitudes(m: usize, x: &[f32], k: usize, w: &[f32], bias: &[f32]) -> Vec<f64> {
        let n = bias.len();
        let mut out = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k).map(|p| (x[i * k + p] as f64 * w[j * k + p] as f64).abs()).sum();
                out[i * n + j] = s + bias[j].abs() as f64;
            }
        }
        out
    }
}
