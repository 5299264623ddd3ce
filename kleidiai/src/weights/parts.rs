//! The per-thread seam: one matmul cut into parts for a caller that brings
//! its own threads (a thread pool of its own with a thread index `ith` of
//! `nth`, its own barrier and chunk counter; [`crate::ggml`] is one such
//! caller): each thread packs some LHS rows into a shared buffer, the
//! caller's barrier publishes them, then threads compute column chunks.
//! [`PackedWeights::matmul`] does all of this on its own threads; use this
//! module only when the threads are not yours to give.
//!
//! # How a caller uses it
//!
//! 1. Pack the weights ([`PackedWeights::pack_for_parts`], optionally moved
//!    into memory of your own with [`PackedWeights::into_caller_memory`],
//!    sized by [`PackedWeights::packed_payload_len`]) and resolve them once
//!    per weight with [`PackedWeights::part_slots`]: every kernel, its
//!    blocking and its LHS packer are checked there ([`PartSlot`],
//!    [`PartKernel`]).
//! 2. On each thread, get an [`OnThread`] from
//!    [`PartKernel::on_this_thread`] (the thread's CPU features and vector
//!    length), then size the shared LHS buffer with
//!    [`PartKernel::lhs_size`] and cut it at [`PartKernel::lhs_offset`]
//!    (rows a multiple of [`PartKernel::mr`]).
//! 3. Either call the checked [`PartKernel::pack_rows`] and
//!    [`PartKernel::run_cols`] (a few comparisons per call), or check once
//!    and call the unchecked forms on every call after.
//!
//! # The check-then-unchecked contract
//!
//! Everything that can fail is checked when a [`PartSlot`] is resolved (once
//! per weight) or by the size and range checks of [`PartKernel::pack_rows`]
//! and [`PartKernel::run_cols`]. A caller that repeats the same call (same
//! pointers, same sizes) can run those checks once with
//! [`PartKernel::check_pack`] and [`PartKernel::check_operands`] (or
//! [`PartKernel::check_operands_sized`]) and then call the `unsafe`
//! [`PartKernel::pack_rows_unchecked`] and
//! [`PartKernel::run_cols_unchecked`], which go straight to the packer and
//! the kernel: their `# Safety` sections name exactly the checks that must
//! have passed for the same arguments, and what must still hold of the
//! memory since. Kernels and LHS packers are the ones the crate's families
//! pair ([`KernelInfo::lhs_packer`]), so a part computes the bits
//! [`PackedWeights::matmul`] computes.
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
/// its upstream functions. Made by [`PackedWeights::part_slots`] (one per
/// kernel of each packed layout) or [`PartKernel::for_f16_per_call`];
/// everything its calls need was checked then.
#[derive(Clone, Copy, Debug)]
pub struct PartKernel {
    info: &'static KernelInfo,
    t: Tiles,
    packer: LhsPacker,
    /// Block length the LHS is quantised in (0: none).
    lhs_bl: usize,
    /// The vector length the packed RHS was made for (0: none), which the
    /// calling thread's must equal.
    vector_bytes: usize,
    /// Whether that vector length is the streaming one (SME kernels; SVE
    /// ones read the SVE length), from `info` (kept: every call reads it).
    streaming: bool,
    n: usize,
    k: usize,
    /// Block length of the RHS (0: none).
    bl: usize,
    rhs_len: usize,
    #[cfg(target_arch = "aarch64")]
    f: ffi::Fns,
    /// Proof that the CPU runs the kernel (for its packer's queries).
    #[cfg(target_arch = "aarch64")]
    gate: crate::families::engine::Gate,
}

/// One packed layout with its kernels, ready for per-thread calls (see
/// [`PackedWeights::part_slots`]).
#[derive(Clone, Debug)]
pub struct PartSlot {
    rhs: PackedRhs,
    gemm: PartKernel,
    gemv: Option<PartKernel>,
}

impl PartKernel {
    /// Whether `other` makes the same calls as this kernel: the same
    /// upstream kernel (hence the same functions), blocking, LHS packer,
    /// vector length, shape and packed length. Equal arguments pass the same
    /// checks on either.
    pub(crate) fn same_calls(&self, other: &PartKernel) -> bool {
        self.info.name == other.info.name
            && self.t == other.t
            && self.packer == other.packer
            && (self.lhs_bl, self.vector_bytes, self.n, self.k, self.bl, self.rhs_len)
                == (other.lhs_bl, other.vector_bytes, other.n, other.k, other.bl, other.rhs_len)
    }
}

impl PartSlot {
    /// The packed weights the kernels read (the `rhs` operand of
    /// [`PartKernel::run_cols`]).
    #[inline]
    pub fn rhs(&self) -> &PackedRhs {
        &self.rhs
    }

    /// The kernel for more than one row.
    pub fn gemm(&self) -> &PartKernel {
        &self.gemm
    }

    /// The kernel for one row reading the same layout, if the layout has
    /// one that runs here.
    pub fn gemv(&self) -> Option<&PartKernel> {
        self.gemv.as_ref()
    }

    /// The kernel for `m` rows: the GEMV one for one row when there is one.
    #[inline]
    pub fn kernel(&self, m: usize) -> &PartKernel {
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
        // cols.start <= self.cols, so the offset stays in (or one past) row 0
        // and the pointer is not null (a null `ptr` was refused on creation).
        let ptr = NonNull::new(self.ptr.as_ptr().wrapping_add(cols.start)).ok_or(Error::Null { what: "output" })?;
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
    ///
    /// `f` is normally [`Features::current`]; each thread still checks its
    /// own with [`PartKernel::on_this_thread`] before it calls a kernel.
    pub fn part_slots(&self, f: &Features) -> Result<Vec<PartSlot>> {
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
    /// weights needed). `bl` is the weights' block length (0: none); `pairs`
    /// are `(gemm, gemv)` upstream kernel names, best first, as
    /// [`pack_for_parts`](Self::pack_for_parts) takes them.
    pub fn packed_payload_len(
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
    pub fn into_caller_memory<B>(self, mut out: B) -> Result<PackedWeights>
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

    /// [`pack_with`](Self::pack_with) for f32 activations over a table of
    /// `(gemm, gemv)` upstream kernel names, best first (ggml passes its
    /// own tables): the table's first kernel that runs with `f` and, beside
    /// an SME one, the first non-SME one (a caller's threads beyond the SME
    /// cap run the second; ggml's buffer holds both), without a reference
    /// copy. Resolve the result with [`part_slots`](Self::part_slots).
    pub fn pack_for_parts(
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

/// Proof that the calling thread runs one [`PartKernel`] now (its CPU
/// features and vector length), made by [`PartKernel::on_this_thread`] and
/// taken by the kernel's calls. Neither `Send` nor `Sync`: it vouches for
/// one thread.
#[derive(Debug)]
pub struct OnThread<'k> {
    kernel: &'k PartKernel,
    _thread: PhantomData<*const ()>,
}

impl<'k> OnThread<'k> {
    /// The kernel this proof is for.
    #[inline]
    pub fn kernel(&self) -> &'k PartKernel {
        self.kernel
    }
}

mod calls;
#[cfg(target_arch = "aarch64")]
mod ffi;
mod kernel;
