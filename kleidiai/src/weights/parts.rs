//! One matmul cut into per-thread parts for a caller that brings its own
//! threads (ggml: thread `ith` of `nth`, its barrier, its chunk counter):
//! each thread packs some LHS rows into a shared buffer, the caller's barrier
//! publishes them, then threads compute column chunks.
//!
//! Everything that can fail is checked when a [`PartSlot`] is resolved (once
//! per weight) or by the size and range checks of [`PartKernel::pack_rows`]
//! and [`PartKernel::run_cols`] (a few comparisons per call): the calls
//! themselves go straight to the packer and the kernel. Kernels and LHS
//! packers are the ones the crate's families pair (`KernelInfo::lhs_packer`),
//! so a part computes the bits [`PackedWeights::matmul`] computes.

use super::{DType, PackedWeights, WeightKind, WeightsRef, backend_for, packed_len};
use crate::cpu::Features;
use crate::error::{Error, Result};
use crate::families::engine::Tiles;
use crate::packed::{PackedLayout, PackedRhs};
use crate::registry::KernelInfo;
use core::marker::PhantomData;
use core::ops::Range;
use core::ptr::NonNull;

/// The LHS packing routine a kernel reads from (upstream names in
/// [`name`](Self::name)); `Direct` kernels read the f32 rows themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LhsPacker {
    Qsi8d32p,
    Qsi8d32pNeon,
    Qsi8d32p4x8sb,
    F16pmrx2,
    Qai8dxp,
    F32p2vlx1Sme,
    Bf16p2vlx2Sme,
    Bf16p2vlx2Sme2,
    Direct,
}

impl LhsPacker {
    fn from_info(info: &KernelInfo) -> Option<LhsPacker> {
        Some(match info.lhs_packer {
            None => LhsPacker::Direct,
            Some("kai_lhs_quant_pack_qsi8d32p_f32") => LhsPacker::Qsi8d32p,
            Some("kai_lhs_quant_pack_qsi8d32p_f32_neon") => LhsPacker::Qsi8d32pNeon,
            Some("kai_lhs_quant_pack_qsi8d32p4x8sb_f32_neon") => LhsPacker::Qsi8d32p4x8sb,
            Some("kai_lhs_pack_f16pmrx2_f32_neon") => LhsPacker::F16pmrx2,
            Some("kai_lhs_quant_pack_qai8dxp_f32") => LhsPacker::Qai8dxp,
            Some("kai_lhs_pack_f32p2vlx1_f32_sme") => LhsPacker::F32p2vlx1Sme,
            Some("kai_lhs_pack_bf16p2vlx2_f32_sme") => LhsPacker::Bf16p2vlx2Sme,
            Some("kai_lhs_pack_bf16p2vlx2_f32_sme2") => LhsPacker::Bf16p2vlx2Sme2,
            Some(_) => return None,
        })
    }

    /// Upstream name (`direct` for kernels reading the LHS themselves).
    pub(crate) fn name(self) -> &'static str {
        match self {
            LhsPacker::Qsi8d32p => "kai_lhs_quant_pack_qsi8d32p_f32",
            LhsPacker::Qsi8d32pNeon => "kai_lhs_quant_pack_qsi8d32p_f32_neon",
            LhsPacker::Qsi8d32p4x8sb => "kai_lhs_quant_pack_qsi8d32p4x8sb_f32_neon",
            LhsPacker::F16pmrx2 => "kai_lhs_pack_f16pmrx2_f32_neon",
            LhsPacker::Qai8dxp => "kai_lhs_quant_pack_qai8dxp_f32",
            LhsPacker::F32p2vlx1Sme => "kai_lhs_pack_f32p2vlx1_f32_sme",
            LhsPacker::Bf16p2vlx2Sme => "kai_lhs_pack_bf16p2vlx2_f32_sme",
            LhsPacker::Bf16p2vlx2Sme2 => "kai_lhs_pack_bf16p2vlx2_f32_sme2",
            LhsPacker::Direct => "direct",
        }
    }

    /// Whether the packer honours its `lhs_stride` argument (the f16 one
    /// assumes rows `k` floats apart).
    pub(crate) fn takes_stride(self) -> bool {
        self != LhsPacker::F16pmrx2
    }

    /// The parameter rules of the packer (the ones the family glue checks
    /// before packing).
    fn check(self, k: usize, bl: usize, t: &Tiles) -> Result<()> {
        let ok = match self {
            LhsPacker::Qsi8d32p => t.sr != 0 && t.kr % t.sr == 0 && bl % (t.kr / t.sr).max(1) == 0,
            LhsPacker::Qsi8d32pNeon => t.kr == 4,
            LhsPacker::Qsi8d32p4x8sb => t.mr == 4 && t.kr == 16 && t.sr == 2,
            LhsPacker::F16pmrx2 => t.sr == 2 && k % 32 == 0,
            LhsPacker::Qai8dxp => t.sr != 0 && t.kr % t.sr == 0 && k % 8 == 0,
            LhsPacker::F32p2vlx1Sme => t.kr == 1 && t.sr == 1,
            LhsPacker::Bf16p2vlx2Sme | LhsPacker::Bf16p2vlx2Sme2 => t.kr == 2 && t.sr == 1,
            LhsPacker::Direct => true,
        };
        if !ok {
            return Err(Error::bad_value(
                "k, bl",
                format!("{k}, {bl}"),
                format!("the {} LHS packer does not take them with mr {}, kr {}, sr {}", self.name(), t.mr, t.kr, t.sr),
            ));
        }
        Ok(())
    }
}

/// A kernel resolved for per-thread calls: its blocking, its LHS packer and
/// its upstream functions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PartKernel {
    pub(crate) info: &'static KernelInfo,
    pub(crate) t: Tiles,
    pub(crate) packer: LhsPacker,
    /// Block length the LHS is quantised in (0: none).
    pub(crate) lhs_bl: usize,
    /// The vector length the packed RHS was made for (0: none), which the
    /// calling thread's must equal.
    vector_bytes: usize,
    n: usize,
    k: usize,
    /// Block length of the RHS (0: none).
    bl: usize,
    rhs_len: usize,
    #[cfg(target_arch = "aarch64")]
    f: ffi::Fns,
}

/// One packed layout with its kernels, ready for per-thread calls.
#[derive(Clone, Debug)]
pub(crate) struct PartSlot {
    pub(crate) rhs: PackedRhs,
    pub(crate) gemm: PartKernel,
    pub(crate) gemv: Option<PartKernel>,
}

impl PartSlot {
    /// The kernel for `m` rows: the GEMV one for one row when there is one.
    pub(crate) fn kernel(&self, m: usize) -> &PartKernel {
        match &self.gemv {
            Some(g) if m == 1 => g,
            _ => &self.gemm,
        }
    }
}

/// `rows x cols` f32 outputs, rows `row_stride` bytes apart, that one
/// thread may write: a column block of a larger output other threads write
/// other columns of.
#[derive(Debug)]
pub struct OutputBlock<'a> {
    ptr: NonNull<f32>,
    rows: usize,
    cols: usize,
    row_stride: usize,
    _out: PhantomData<&'a mut f32>,
}

// SAFETY: an OutputBlock is an exclusive view of its elements (see
// `from_raw_parts`), like `&mut [f32]`.
unsafe impl Send for OutputBlock<'_> {}

impl<'a> OutputBlock<'a> {
    /// A dense `rows x cols` block of a slice.
    pub fn from_slice(out: &'a mut [f32], rows: usize, cols: usize) -> Result<OutputBlock<'a>> {
        crate::error::at_least(out.len(), crate::error::mul(rows, cols, "output block")?, "output block")?;
        let ptr = NonNull::new(out.as_mut_ptr()).ok_or_else(|| Error::Null { what: "output" })?;
        Ok(OutputBlock { ptr, rows, cols, row_stride: cols * 4, _out: PhantomData })
    }

    /// A block of `rows x cols` f32 values at `ptr`, rows `row_stride` bytes
    /// apart (a multiple of 4, at least `4 * cols` when `rows > 1`).
    ///
    /// # Safety
    /// For `'a`, the elements `ptr[i * row_stride / 4 + j]` (`i < rows`,
    /// `j < cols`) are valid for writes, `ptr` is 4-byte aligned, and no one
    /// else reads or writes them (other elements between the rows may be
    /// used by others).
    pub unsafe fn from_raw_parts(
        ptr: *mut f32,
        rows: usize,
        cols: usize,
        row_stride: usize,
    ) -> Result<OutputBlock<'a>> {
        let ptr = NonNull::new(ptr).ok_or_else(|| Error::Null { what: "output" })?;
        if (ptr.as_ptr() as usize) % 4 != 0 {
            return Err(Error::Misaligned { what: "output", align: 4 });
        }
        if row_stride % 4 != 0 || (rows > 1 && row_stride < cols * 4) {
            let why = format!("do not hold {cols} f32 values each (a multiple of 4, at least {})", cols * 4);
            return Err(Error::Stride { what: "output", stride: row_stride, why });
        }
        Ok(OutputBlock { ptr, rows, cols, row_stride, _out: PhantomData })
    }

    /// The columns `cols` (relative to this block) of every row.
    pub fn columns(&mut self, cols: Range<usize>) -> Result<OutputBlock<'_>> {
        if cols.start > cols.end || cols.end > self.cols {
            let why = format!("not within the block's {} columns", self.cols);
            return Err(Error::bad_value("columns", format!("{cols:?}"), why));
        }
        // SAFETY: cols.start <= self.cols, so the offset stays in (or one past) row 0.
        let ptr = unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(cols.start)) };
        Ok(OutputBlock { ptr, rows: self.rows, cols: cols.len(), row_stride: self.row_stride, _out: PhantomData })
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }
}

impl PackedWeights {
    /// Every packed layout whose kernels run with `f`, resolved for
    /// per-thread calls, in slot order. Layouts whose kernel `f` cannot run
    /// are left out; a runnable kernel without a per-thread form is an error.
    pub(crate) fn part_slots(&self, f: &Features) -> Result<Vec<PartSlot>> {
        // Held by a handle for its whole life: no spare capacity.
        let mut out = Vec::with_capacity(self.slots.len());
        for s in &self.slots {
            if s.gemm.info().supported(f).is_err() {
                continue;
            }
            let l = *s.rhs.layout();
            let gemm = PartKernel::resolve(s.gemm.info(), &l, s.rhs.as_bytes().len(), f)?;
            let gemv = match &s.gemv {
                Some(g) if g.info().supported(f).is_ok() => {
                    Some(PartKernel::resolve(g.info(), &l, s.rhs.as_bytes().len(), f)?)
                }
                _ => None,
            };
            out.push(PartSlot { rhs: s.rhs.clone(), gemm, gemv });
        }
        Ok(out)
    }

    /// The bytes of the payloads [`pack_for_parts`](Self::pack_for_parts)
    /// packs with these arguments, laid out by
    /// [`into_caller_memory`](Self::into_caller_memory) (each layout 64-byte
    /// aligned after the one before, no header), from the shape alone (no
    /// weights needed). `bl` is the weights' block length.
    pub(crate) fn packed_payload_len(
        kind: WeightKind,
        n: usize,
        k: usize,
        bl: usize,
        pairs: &[(&str, Option<&str>)],
        f: &Features,
    ) -> Result<usize> {
        crate::error::nonzero(n, "n")?;
        crate::error::nonzero(k, "k")?;
        let mut lens: Vec<usize> = Vec::new();
        let mut first_sme = None;
        for (gemm, _) in pairs {
            let Some(g) = backend_for(kind, DType::F32, gemm) else { continue };
            if g.info().supported(f).is_err() {
                continue;
            }
            // pack_kernels' rule: the first runnable entry, and after an SME
            // one the first runnable non-SME entry.
            match first_sme {
                None => {}
                Some(true) if !g.info().is_sme() && lens.len() == 1 => {}
                Some(_) => continue,
            }
            let layout = g.rhs_layout(n, k, bl)?;
            let len = packed_len(&*g, kind, &layout, u64::MAX, 0)?;
            lens.push(len);
            first_sme.get_or_insert(g.info().is_sme());
        }
        if lens.is_empty() {
            return Err(Error::Unsupported {
                kernel: "packed weights",
                why: "no kernel of the table runs with these CPU features".into(),
            });
        }
        Ok(payload_ranges(lens)?.1)
    }

    /// Moves the packed payloads into `out` (each layout 64-byte aligned,
    /// back to back: [`packed_payload_len`](Self::packed_payload_len)
    /// bytes, gaps zeroed, nothing else written) and returns the same weights
    /// viewing them there: no header, the layouts and kernels stay in the
    /// returned value. `out` must start 64-byte aligned and hold the
    /// payloads; everything is checked before a byte is written.
    ///
    /// From then on `out` is only read, through `AsRef`, which must give the
    /// bytes `AsMut` gave (bounds are checked on every view, so other bytes
    /// give wrong results, never an access outside them).
    pub(crate) fn into_caller_memory<B>(self, mut out: B) -> Result<PackedWeights>
    where
        B: AsRef<[u8]> + AsMut<[u8]> + Send + Sync + 'static,
    {
        let (ranges, total) = payload_ranges(self.slots.iter().map(|s| s.rhs.as_bytes().len()))?;
        {
            let dst = out.as_mut();
            if dst.as_ptr() as usize % 64 != 0 {
                return Err(Error::Misaligned { what: "packed-weight destination", align: 64 });
            }
            crate::error::at_least_bytes(dst.len(), total, "packed-weight destination")?;
            let mut at = 0;
            for (r, s) in ranges.iter().zip(&self.slots) {
                dst[at..r.start].fill(0);
                dst[r.clone()].copy_from_slice(s.rhs.as_bytes());
                at = r.end;
            }
        }
        let bytes: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync> = std::sync::Arc::new(out);
        let mut w = self;
        w.slots.shrink_to_fit(); // kept for the handle's life
        for (r, s) in ranges.into_iter().zip(&mut w.slots) {
            let len = r.len();
            // Checks the range lies in what AsRef gives, 64-byte aligned.
            s.rhs = crate::packed::PackedRhs::shared(*s.rhs.layout(), bytes.clone(), r, len)?;
        }
        Ok(w)
    }

    /// [`pack_with`](Self::pack_with) for f32 activations (ggml's weights)
    /// over one of ggml's kernel tables: its first kernel that runs here
    /// and, beside an SME one, the first non-SME one (ggml's buffer holds
    /// both: its threads beyond the SME cap run the second), without a
    /// reference copy.
    pub(crate) fn pack_for_parts(
        w: &WeightsRef<'_>,
        pairs: &[(&'static str, Option<&'static str>)],
        f: &Features,
    ) -> Result<Self> {
        let pairings: Vec<super::policy::Pairing> = pairs
            .iter()
            .map(|&(gemm, gemv)| super::policy::Pairing {
                why: "ggml's table",
                ..super::policy::Pairing::new(gemm, gemv)
            })
            .collect();
        let opts = super::PackOptions {
            activation: DType::F32,
            non_sme_layout: true,
            keep_reference: false,
            features: Some(*f),
            ..super::PackOptions::default()
        };
        Self::pack_with(w, &pairings, &opts)
    }
}

/// Where payloads of `lens` bytes go when laid out back to back, each
/// starting 64-byte aligned (the first at 0), and the bytes they span.
fn payload_ranges(lens: impl IntoIterator<Item = usize>) -> Result<(Vec<Range<usize>>, usize)> {
    let mut ranges = Vec::new();
    let mut end = 0usize;
    for len in lens {
        let start = end.div_ceil(64).checked_mul(64);
        end = start.and_then(|s| s.checked_add(len)).ok_or_else(|| Error::Overflow("packed size".into()))?;
        ranges.push(end - len..end);
    }
    Ok((ranges, end))
}

impl PartKernel {
    fn resolve(info: &'static KernelInfo, rhs: &PackedLayout, rhs_len: usize, f: &Features) -> Result<PartKernel> {
        info.supported(f).map_err(|why| Error::Unsupported { kernel: info.name, why })?;
        let packer = LhsPacker::from_info(info).ok_or_else(|| Error::Unsupported {
            kernel: info.name,
            why: format!("no per-thread form for its LHS packer {:?}", info.lhs_packer),
        })?;
        #[cfg(target_arch = "aarch64")]
        {
            // SAFETY: `info.supported(f)` passed with the features in force,
            // so the kernel's getters (SME ones execute SME instructions) may run.
            let (fns, t) = unsafe { ffi::resolve(info)? };
            if (t.nr, t.kr, t.sr) != (rhs.r, rhs.kr, rhs.sr) {
                return Err(Error::LayoutMismatch {
                    what: "RHS",
                    kernel: info.name,
                    got: rhs.to_string(),
                    want: format!("nr={} kr={} sr={}", t.nr, t.kr, t.sr),
                });
            }
            // The quantised-block LHS packers take the weights' block length.
            let lhs_bl = match packer {
                LhsPacker::Qsi8d32p | LhsPacker::Qsi8d32pNeon | LhsPacker::Qsi8d32p4x8sb | LhsPacker::F16pmrx2 => 32,
                _ => 0,
            };
            if lhs_bl != 0 && rhs.bl != 32 {
                return Err(Error::bad_value("bl", rhs.bl, format!("{} takes weights in blocks of 32", info.name)));
            }
            packer.check(rhs.k, lhs_bl, &t)?;
            Ok(PartKernel {
                info,
                t,
                packer,
                lhs_bl,
                vector_bytes: rhs.vector_bytes,
                n: rhs.rows,
                k: rhs.k,
                bl: rhs.bl,
                rhs_len,
                f: fns,
            })
        }
        #[cfg(not(target_arch = "aarch64"))]
        {
            let _ = (rhs, rhs_len, packer);
            Err(Error::Unsupported { kernel: info.name, why: "kernels run on aarch64 only".into() })
        }
    }

    /// The kernel of ggml's F16 table (`name`, an SME2 bf16 kernel) for
    /// `n x k` weights packed per call, with ggml's LHS packer for it
    /// (`kai_lhs_pack_bf16p2vlx2_f32_sme`, the same packed format as the
    /// `_sme2` one the crate's family pairs with it).
    ///
    /// Remembered per thread for the last few `(name, n, k, features)`:
    /// ggml asks for it on every F16 call (work size, then every thread's
    /// part), and the answer depends on nothing else (the thread's vector
    /// length is checked again by `on_this_thread`).
    pub(crate) fn for_f16_per_call(name: &str, n: usize, k: usize, f: &Features) -> Result<PartKernel> {
        type Entry = Option<((usize, usize, usize, usize, Features), PartKernel)>;
        thread_local! {
            static KEPT: core::cell::RefCell<[Entry; 8]> = const { core::cell::RefCell::new([None; 8]) };
        }
        let key = (name.as_ptr() as usize, name.len(), n, k, *f);
        let slot = n.wrapping_mul(31).wrapping_add(k) % 8;
        if let Some(kern) = KEPT.with(|c| c.borrow()[slot].filter(|(k0, _)| *k0 == key).map(|(_, kern)| kern)) {
            return Ok(kern);
        }
        let kern = Self::resolve_f16_per_call(name, n, k, f)?;
        KEPT.with(|c| c.borrow_mut()[slot] = Some((key, kern)));
        Ok(kern)
    }

    fn resolve_f16_per_call(name: &str, n: usize, k: usize, f: &Features) -> Result<PartKernel> {
        crate::error::nonzero(n, "n")?;
        crate::error::nonzero(k, "k")?;
        let info = backend_for(WeightKind::F16, DType::F32, name)
            .map(|b| b.info())
            .ok_or_else(|| Error::UnknownKernel(name.to_string()))?;
        if info.family != "matmul_clamp_fp32_bf16p_bf16p" {
            return Err(Error::Unsupported { kernel: info.name, why: "not a bf16 kernel packed per call".into() });
        }
        info.supported(f).map_err(|why| Error::Unsupported { kernel: info.name, why })?;
        #[cfg(target_arch = "aarch64")]
        {
            // SAFETY: the kernel runs with `f` (checked above), so its SME
            // getters may run; the size query is arithmetic on n, k and the
            // streaming vector length (SME present).
            let (t, size, packer_nr) = unsafe {
                let (_, t) = ffi::resolve(info)?;
                (
                    t,
                    crate::sys::kai_get_rhs_packed_size_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme(n, k),
                    crate::sys::kai_get_n_step_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme(),
                )
            };
            if packer_nr != t.nr {
                return Err(Error::ShapeMismatch {
                    what: "RHS packer block (the kernel's nr)",
                    got: packer_nr.to_string(),
                    want: t.nr.to_string(),
                });
            }
            let layout = PackedLayout {
                format: "bf16p2vlx2b",
                rows: n,
                k,
                r: t.nr,
                kr: t.kr,
                sr: t.sr,
                bl: 0,
                vector_bytes: crate::families::engine::layout_vector_bytes(info, f),
            };
            let mut kern = Self::resolve(info, &layout, size, f)?;
            kern.packer = LhsPacker::Bf16p2vlx2Sme;
            kern.packer.check(k, 0, &kern.t)?;
            Ok(kern)
        }
        #[cfg(not(target_arch = "aarch64"))]
        Err(Error::Unsupported { kernel: info.name, why: "kernels run on aarch64 only".into() })
    }

    /// Bytes of the packed weights this kernel reads.
    pub(crate) fn rhs_len(&self) -> usize {
        self.rhs_len
    }

    /// ggml's per-call packing of F16 weights for a bf16 kernel: `n` rows of
    /// `k` f16 values (`src`, rows `stride` bytes apart) transposed to f32
    /// `k x n` in `kxn`, a zero bias in `bias`, then packed into `out`
    /// ([`rhs_len`](Self::rhs_len) bytes).
    pub(crate) fn pack_rhs_f16(
        &self,
        ok: &OnThread<'_>,
        src: &[u8],
        stride: usize,
        kxn: &mut [f32],
        bias: &mut [f32],
        out: &mut [u8],
    ) -> Result<()> {
        let (n, k) = (self.n, self.k);
        if !core::ptr::eq(ok.kernel, self) || self.info.family != "matmul_clamp_fp32_bf16p_bf16p" {
            let why = "per-call F16 packing needs its own bf16 kernel's thread check";
            return Err(Error::bad_value("thread check", "OnThread", why));
        }
        let rows = (n - 1).checked_mul(stride).and_then(|v| v.checked_add(2 * k));
        crate::error::at_least_bytes(
            src.len(),
            rows.ok_or_else(|| Error::Overflow("F16 rows".into()))?,
            "F16 weights",
        )?;
        if stride < 2 * k {
            return Err(Error::Stride { what: "F16 weights", stride, why: format!("hold fewer than {k} values") });
        }
        crate::error::at_least(kxn.len(), crate::error::mul(k, n, "k x n")?, "transposed weights")?;
        crate::error::at_least(bias.len(), n, "bias")?;
        crate::error::at_least_bytes(out.len(), self.rhs_len, "packed weights")?;
        crate::weights::f16_kxn::f16_rows_to_f32_kxn(src, stride, n, k, kxn);
        bias[..n].fill(0.0);
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the CPU runs the kernel (and so the SME packer) at its
        // vector length (`ok`); `kxn` holds k rows of n f32 (stride 4n bytes),
        // `bias` n f32, `out` the packer's size for (n, k) (= rhs_len, checked);
        // nr, kr, sr are the kernel's, which `resolve` matched to the layout.
        unsafe {
            crate::sys::kai_run_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme(
                1,
                n,
                k,
                self.t.nr,
                self.t.kr,
                self.t.sr,
                n * 4,
                kxn.as_ptr().cast(),
                bias.as_ptr().cast(),
                core::ptr::null(),
                out.as_mut_ptr().cast(),
                0,
                core::ptr::null(),
            );
        }
        Ok(())
    }

    /// Proof that the calling thread runs this kernel now: its CPU
    /// features are there and its vector length is the one the weights
    /// were packed for (Linux lets a thread change its own). Checked once
    /// per operation; [`pack_rows`](Self::pack_rows) and
    /// [`run_cols`](Self::run_cols) take it.
    pub(crate) fn on_this_thread(&self) -> Result<OnThread<'_>> {
        let f = Features::current();
        self.info.supported(&f).map_err(|why| Error::Unsupported { kernel: self.info.name, why })?;
        let live = crate::families::engine::live_vector_bytes(self.info);
        if self.vector_bytes != 0 && live != self.vector_bytes {
            return Err(Error::Unsupported {
                kernel: self.info.name,
                why: format!(
                    "this thread's vector length is {} bits, the weights were packed for {}",
                    live * 8,
                    self.vector_bytes * 8
                ),
            });
        }
        Ok(OnThread { kernel: self, _thread: PhantomData })
    }

    /// [`on_this_thread`](Self::on_this_thread) for a thread on which it
    /// passed before with the features of now (the caller compares them):
    /// only the vector length, which a thread can change, is read again.
    pub(crate) fn still_on_this_thread(&self) -> Result<OnThread<'_>> {
        let live = crate::families::engine::live_vector_bytes(self.info);
        if self.vector_bytes != 0 && live != self.vector_bytes {
            return self.on_this_thread(); // the full check, and its message
        }
        Ok(OnThread { kernel: self, _thread: PhantomData })
    }

    /// Bytes of the packed LHS of `m` rows (0 for `Direct` kernels).
    pub(crate) fn lhs_size(&self, m: usize) -> usize {
        #[cfg(target_arch = "aarch64")]
        {
            // SAFETY: size query of a packer whose parameters passed `check`.
            unsafe { ffi::lhs_size(self.packer, m.max(1), self.k, self.lhs_bl, &self.t) }
        }
        #[cfg(not(target_arch = "aarch64"))]
        {
            let _ = m;
            0
        }
    }

    /// Byte offset of row `row` (a multiple of `mr`) in the packed LHS.
    pub(crate) fn lhs_offset(&self, row: usize) -> usize {
        #[cfg(target_arch = "aarch64")]
        {
            // SAFETY: offset query of a packer whose parameters passed `check`.
            unsafe { ffi::lhs_offset(self.packer, row, self.k, self.lhs_bl, &self.t) }
        }
        #[cfg(not(target_arch = "aarch64"))]
        {
            let _ = row;
            0
        }
    }

    /// Packs `h` rows of f32 (`src`, rows `stride` bytes apart, `k` values
    /// each) into `out`, at least [`lhs_size`](Self::lhs_size)`(h)` bytes:
    /// the part of a packed LHS from the offset of its first row (a
    /// multiple of `mr`) on.
    pub(crate) fn pack_rows(
        &self,
        ok: &OnThread<'_>,
        h: usize,
        src: &[u8],
        stride: usize,
        out: &mut [u8],
    ) -> Result<()> {
        if self.packer == LhsPacker::Direct {
            return Ok(());
        }
        if !core::ptr::eq(ok.kernel, self) {
            return Err(Error::bad_value(
                "thread check",
                "OnThread",
                format!("made for another kernel than {}", self.info.name),
            ));
        }
        self.check_pack(h, (src.as_ptr(), src.len()), stride, out.len(), self.lhs_size(h))?;
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the CPU runs the packer's kernel at its vector length
        // (`ok`, for this kernel); `src` holds `h` rows of k f32 `stride`
        // bytes apart, 4-byte aligned, and `out` the bytes h rows pack to
        // (both checked above); the packer's parameters passed `check`.
        unsafe {
            ffi::pack(self.packer, h, self.k, self.lhs_bl, &self.t, src.as_ptr().cast(), stride, out.as_mut_ptr())
        };
        Ok(())
    }

    /// [`pack_rows`](Self::pack_rows)' checks of its operands: `h` rows of
    /// `k` f32 at `src` (`src.1` bytes readable), `stride` bytes apart, into
    /// `out_len` bytes; `size_h` must be [`lhs_size`](Self::lhs_size)`(h)`
    /// (callers that know it pass it, others compute it).
    pub(crate) fn check_pack(
        &self,
        h: usize,
        src: (*const u8, usize),
        stride: usize,
        out_len: usize,
        size_h: usize,
    ) -> Result<()> {
        debug_assert_eq!(size_h, self.lhs_size(h));
        let k = self.k;
        crate::error::nonzero(h, "LHS rows")?;
        if (src.0 as usize) % 4 != 0 {
            return Err(Error::Misaligned { what: "LHS rows", align: 4 });
        }
        if stride % 4 != 0 || stride < k * 4 {
            return Err(Error::Stride { what: "LHS rows", stride, why: format!("do not hold {k} f32 values each") });
        }
        if !self.packer.takes_stride() && stride != k * 4 && h > 1 {
            let why = format!("but {} needs them k floats ({} bytes) apart", self.packer.name(), k * 4);
            return Err(Error::Stride { what: "LHS rows", stride, why });
        }
        let rows_len = (h - 1).checked_mul(stride).and_then(|v| v.checked_add(k * 4));
        crate::error::at_least_bytes(src.1, rows_len.ok_or_else(|| Error::Overflow("LHS rows".into()))?, "LHS rows")?;
        crate::error::at_least_bytes(out_len, size_h, "packed LHS part")
    }

    /// The checks of [`run_cols`](Self::run_cols) that do not depend on the
    /// columns: the packed weights' length, and the LHS (packed: its size
    /// for `m` rows; read directly: `m` aligned f32 rows `lhs_stride` bytes
    /// apart).
    pub(crate) fn check_operands(
        &self,
        m: usize,
        lhs: (*const u8, usize),
        lhs_stride: usize,
        rhs_len: usize,
    ) -> Result<()> {
        let size = if self.packer == LhsPacker::Direct { 0 } else { self.lhs_size(m) };
        self.check_operands_sized(m, lhs, lhs_stride, rhs_len, size)
    }

    /// [`check_operands`](Self::check_operands) for a caller that knows
    /// `lhs_size_m`, which must be [`lhs_size`](Self::lhs_size)`(m)`.
    pub(crate) fn check_operands_sized(
        &self,
        m: usize,
        lhs: (*const u8, usize),
        lhs_stride: usize,
        rhs_len: usize,
        lhs_size_m: usize,
    ) -> Result<()> {
        debug_assert_eq!(lhs_size_m, if self.packer == LhsPacker::Direct { 0 } else { self.lhs_size(m) });
        let k = self.k;
        if m == 0 {
            return Err(Error::ZeroDimension { what: "m" });
        }
        if rhs_len != self.rhs_len {
            return Err(Error::ByteLength {
                what: "packed weights of the resolved kernel",
                got: rhs_len,
                need: self.rhs_len,
            });
        }
        if self.packer == LhsPacker::Direct {
            let len = (m - 1).checked_mul(lhs_stride).and_then(|v| v.checked_add(k * 4));
            if (lhs.0 as usize) % 4 != 0 {
                return Err(Error::Misaligned { what: "LHS", align: 4 });
            }
            if lhs_stride % 4 != 0 || (m > 1 && lhs_stride < k * 4) {
                let why = format!("do not hold {k} f32 values each");
                return Err(Error::Stride { what: "LHS rows", stride: lhs_stride, why });
            }
            crate::error::at_least_bytes(lhs.1, len.ok_or_else(|| Error::Overflow("LHS".into()))?, "LHS")?;
        } else {
            crate::error::at_least_bytes(lhs.1, lhs_size_m, "packed LHS")?;
        }
        Ok(())
    }

    /// [`pack_rows`](Self::pack_rows) without its checks: the steady-state
    /// path of a call whose arguments passed them before.
    ///
    /// # Safety
    /// `pack_rows(ok, h, src_slice, stride, out_slice)` passed its checks
    /// for slices at `src` and `out` of the lengths it checks, those bytes
    /// are still valid (reads of `src`, exclusive writes of `out`), and `ok`
    /// vouches for this kernel on this thread.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn pack_rows_unchecked(
        &self,
        ok: &OnThread<'_>,
        h: usize,
        src: *const u8,
        stride: usize,
        out: *mut u8,
    ) {
        debug_assert!(core::ptr::eq(ok.kernel, self));
        let _ = ok;
        if self.packer == LhsPacker::Direct {
            return;
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the caller's guarantee: the same arguments passed
        // `pack_rows`' checks (see its SAFETY comment).
        unsafe {
            ffi::pack(self.packer, h, self.k, self.lhs_bl, &self.t, src.cast(), stride, out)
        };
        #[cfg(not(target_arch = "aarch64"))]
        let _ = (h, src, stride, out);
    }

    /// [`run_cols`](Self::run_cols) without its checks: the steady-state
    /// path of a call whose operands passed them before.
    ///
    /// # Safety
    /// [`check_operands`](Self::check_operands) passed for `m`, the LHS at
    /// `lhs` and the RHS at `rhs` (lengths as it checks, still valid for
    /// reads); `cols` is non-empty, within `n`, starts at a multiple of
    /// `n_step`; `out` is an exclusive `m x cols.len()` block of aligned f32
    /// rows `row_stride` bytes apart (as `OutputBlock::from_raw_parts`
    /// requires and checks); `ok` vouches for this kernel on this thread.
    #[allow(clippy::too_many_arguments)] // the kernel's operands
    pub(crate) unsafe fn run_cols_unchecked(
        &self,
        ok: &OnThread<'_>,
        m: usize,
        cols: Range<usize>,
        lhs: *const u8,
        lhs_stride: usize,
        rhs: *const u8,
        out: *mut f32,
        row_stride: usize,
    ) {
        debug_assert!(core::ptr::eq(ok.kernel, self));
        let _ = ok;
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the caller's guarantees are run_cols' checks, passed.
        unsafe {
            ffi::run(self, m, cols, lhs, lhs_stride, rhs, out, row_stride)
        };
        #[cfg(not(target_arch = "aarch64"))]
        let _ = (m, cols, lhs, lhs_stride, rhs, out, row_stride);
    }

    /// Computes columns `cols` (`cols.start` a multiple of `n_step`) of all
    /// `m` output rows into `out` (`m x cols.len()`). `lhs` is the packed
    /// LHS of `m` rows, or for `Direct` kernels the f32 rows themselves,
    /// `lhs_stride` bytes apart.
    #[allow(clippy::too_many_arguments)] // the kernel's operands
    pub(crate) fn run_cols(
        &self,
        ok: &OnThread<'_>,
        m: usize,
        cols: Range<usize>,
        lhs: &[u8],
        lhs_stride: usize,
        rhs: &[u8],
        out: &mut OutputBlock<'_>,
    ) -> Result<()> {
        let n = self.n;
        if !core::ptr::eq(ok.kernel, self) {
            return Err(Error::bad_value(
                "thread check",
                "OnThread",
                format!("made for another kernel than {}", self.info.name),
            ));
        }
        if cols.start >= cols.end || cols.end > n || cols.start % self.t.n_step.max(1) != 0 {
            let why = format!("not a non-empty range of the {n} columns starting at a multiple of {}", self.t.n_step);
            return Err(Error::bad_value("columns", format!("{cols:?}"), why));
        }
        crate::error::nonzero(m, "m")?;
        if out.rows != m || out.cols != cols.len() {
            return Err(Error::ShapeMismatch {
                what: "output block (rows x columns)",
                got: format!("{}x{}", out.rows, out.cols),
                want: format!("{m}x{}", cols.len()),
            });
        }
        self.check_operands(m, (lhs.as_ptr(), lhs.len()), lhs_stride, rhs.len())?;
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the CPU runs the kernel at the vector length the weights
        // were packed for (`ok`, for this kernel); `rhs` has the length of
        // the layout it was resolved for (n x k), `cols.start` is a
        // multiple of n_step and `cols` lies within n, so the RHS offset and
        // the columns read stay inside it; `lhs` holds the packed LHS of m
        // rows (or m f32 rows `lhs_stride` apart); `out` is an exclusive
        // m x cols block (OutputBlock's contract), rows `row_stride` bytes apart.
        unsafe {
            ffi::run(self, m, cols, lhs.as_ptr(), lhs_stride, rhs.as_ptr(), out.ptr.as_ptr(), out.row_stride)
        };
        #[cfg(not(target_arch = "aarch64"))]
        let _ = (lhs, rhs, out);
        Ok(())
    }
}

/// See [`PartKernel::on_this_thread`]. Not `Send`: it vouches for one thread.
#[derive(Debug)]
pub(crate) struct OnThread<'k> {
    kernel: &'k PartKernel,
    _thread: PhantomData<*const ()>,
}

#[cfg(target_arch = "aarch64")]
mod ffi {
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
    type RunBl = unsafe extern "C" fn(
        usize,
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
    );
    type RunQ =
        unsafe extern "C" fn(usize, usize, usize, *const c_void, *const c_void, *mut f32, usize, usize, f32, f32);
    type RunF =
        unsafe extern "C" fn(usize, usize, usize, *const c_void, *const c_void, *mut c_void, usize, usize, f32, f32);
    type RunD = unsafe extern "C" fn(
        usize,
        usize,
        usize,
        *const c_void,
        usize,
        *const c_void,
        *mut c_void,
        usize,
        usize,
        f32,
        f32,
    );

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
                    let Some((_, i)) =
                        ifc::matmul_clamp_f32_f32_f32p::KERNELS.iter().find(|(u, _)| u.name == info.name)
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
                LhsPacker::Bf16p2vlx2Sme2 => {
                    sys::kai_get_lhs_packed_size_lhs_pack_bf16p2vlx2_f32_sme2(m, k, mr, kr, sr)
                }
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
                LhsPacker::Qsi8d32p => {
                    sys::kai_get_lhs_packed_offset_lhs_quant_pack_qsi8d32p_f32(row, k, bl, mr, kr, sr)
                }
                LhsPacker::Qsi8d32pNeon => {
                    sys::kai_get_lhs_packed_offset_lhs_quant_pack_qsi8d32p_f32_neon(row, k, bl, mr, kr, sr)
                }
                LhsPacker::Qsi8d32p4x8sb => {
                    sys::kai_get_lhs_packed_offset_lhs_quant_pack_qsi8d32p4x8sb_f32_neon(row, k, bl, mr, kr, sr)
                }
                LhsPacker::F16pmrx2 => {
                    sys::kai_get_lhs_packed_offset_lhs_pack_f16pmrx2_f32_neon(row, k, bl, mr, kr, sr)
                }
                LhsPacker::Qai8dxp => sys::kai_get_lhs_packed_offset_lhs_quant_pack_qai8dxp_f32(row, k, mr, kr, sr),
                LhsPacker::F32p2vlx1Sme => {
                    sys::kai_get_lhs_packed_offset_lhs_pack_f32p2vlx1_f32_sme(row, k, mr, kr, sr)
                }
                LhsPacker::Bf16p2vlx2Sme => {
                    sys::kai_get_lhs_packed_offset_lhs_pack_bf16p2vlx2_f32_sme(row, k, mr, kr, sr)
                }
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
                LhsPacker::Qsi8d32p => {
                    sys::kai_run_lhs_quant_pack_qsi8d32p_f32(h, k, bl, mr, kr, sr, 0, src, stride, o)
                }
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
                Fns::F(run, off) => {
                    run(m, n, k, l, rhs.add(off(cols.start, k)).cast(), dst.cast(), dst_stride, 4, lo, hi)
                }
                Fns::D(run, off) => {
                    let r = rhs.add(off(cols.start, k)).cast();
                    run(m, n, k, l, lhs_stride, r, dst.cast(), dst_stride, 4, lo, hi)
                }
            }
        }
    }
}
