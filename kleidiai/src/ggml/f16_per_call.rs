//! ggml's KleidiAI path for F16 weights, which stay outside its buffer:
//! with more than one activation row on an SME2 CPU, every mul_mat packs
//! them for the bf16 SME2 kernel of ggml's F16 table, on ggml's threads:
//! thread 0 transposes and packs the weights into the work buffer while
//! every thread packs its LHS rows, a barrier, then each thread computes
//! its share of the columns (ggml's static split, in multiples of the
//! kernel's column step).

use super::Tensor;
use super::kernel_table;
use super::tensor::GgmlType;
use super::threads::{SharedBytes, SmeSetting, ThreadTeam, align64, f32_rows, lhs_rows};
use crate::error::{Error, Result};
use crate::weights::parts::{OutputBlock, PartKernel};

/// The F16 per-call path (see the module docs). Stateless: every call
/// resolves the kernel for its shape.
#[derive(Clone, Copy, Debug)]
pub struct F16PerCall;

/// The work buffer of one call: packed LHS, packed RHS, the transposed f32
/// weights and a zero bias, each 64-byte aligned.
struct Regions {
    lhs: usize,
    rhs: usize,
    kxn: usize,
    bias: usize,
    end: usize,
}

fn regions(kern: &PartKernel, m: usize, n: usize, k: usize) -> Result<Regions> {
    let lhs = 0;
    let rhs = align64(kern.lhs_size(m));
    let kxn = align64(rhs + kern.rhs_len());
    let bias = align64(kxn + crate::error::mul(crate::error::mul(k, n, "k x n")?, 4, "k x n")?);
    Ok(Regions { lhs, rhs, kxn, bias, end: bias + 4 * n })
}

/// `ne` of F16 weights `[k, n, ne02, 1]` whose batches follow one another.
fn weights_shape(ne: [i64; 4], nb: [usize; 4]) -> Option<[usize; 3]> {
    let d = super::tensor::dims(ne, "src0").ok()?;
    (d[3] == 1 && nb[0] == 2 && nb[1] >= 2 * d[0] && nb[1].checked_mul(d[1]) == Some(nb[2]))
        .then_some([d[0], d[1], d[2]])
}

impl F16PerCall {
    /// The kernel ggml's F16 table names, when it runs here with `sme`
    /// (None: ggml's own code computes F16 weights).
    pub fn kernel(sme: SmeSetting) -> Option<&'static str> {
        let name = kernel_table(GgmlType::F16).first()?.0;
        PartKernel::for_f16_per_call(name, 64, 64, &sme.features()).ok().map(|k| k.info().name)
    }

    /// Whether ggml's KleidiAI path takes this mul_mat of F16 weights `src0`
    /// (`ne`, `nb`) with F32 activations `src1` (and so does this one): the
    /// kernel runs here, more than one activation row, batches contiguous in
    /// both, as many activation batches as a multiple of the weights'.
    pub fn accepts(src0: ([i64; 4], [usize; 4]), src1: ([i64; 4], [usize; 4]), sme: SmeSetting) -> bool {
        let (Some(w), Ok(a)) = (weights_shape(src0.0, src0.1), super::tensor::dims(src1.0, "src1")) else {
            return false;
        };
        a[1] > 1
            && a[0] == w[0]
            && a[3] == 1
            && a[2] % w[2] == 0
            && src1.1[1].checked_mul(a[1]) == Some(src1.1[2])
            && Self::kernel(sme).is_some()
    }

    /// The work buffer one call needs.
    pub fn work_size(src0_ne: [i64; 4], src1_ne: [i64; 4], sme: SmeSetting) -> Result<usize> {
        let d0 = super::tensor::dims(src0_ne, "src0")?;
        let d1 = super::tensor::dims(src1_ne, "src1")?;
        let name = kernel_table(GgmlType::F16)[0].0;
        let kern = PartKernel::for_f16_per_call(name, d0[1], d0[0], &sme.features())?;
        Ok(regions(&kern, d1[1], d0[1], d0[0])?.end)
    }

    /// Thread `team.ith()`'s part of ggml `mul_mat` of F16 weights `src0`
    /// `[k, n, ne02]` and F32 activations `src1` `[k, m, ne12]` into `dst`
    /// `[n, m, ne12]` (weights batch `b / (ne12 / ne02)` for activations
    /// batch `b`), as [`ThreadedWeights::mul_mat`](super::ThreadedWeights::mul_mat)
    /// for repacked weights: every thread of the team calls it, every check
    /// before the first barrier, an error still takes part in all barriers.
    #[allow(clippy::too_many_arguments)] // ggml's operands plus the team's resources
    pub fn mul_mat<T: ThreadTeam>(
        src0: &Tensor<'_>,
        src1: &Tensor<'_>,
        dst_ne: [i64; 4],
        dst_nb: [usize; 4],
        dst: &SharedBytes<'_>,
        work: &SharedBytes<'_>,
        team: &T,
        sme: SmeSetting,
    ) -> Result<()> {
        let (ith, nth) = (team.ith(), team.nth());
        let checked = (|| {
            if ith >= nth {
                return Err(Error::out_of_range("thread", ith, nth));
            }
            if src0.typ != GgmlType::F16 {
                return Err(Error::ElementType { what: "src0 (weights)", expected: "F16", got: src0.typ.name() });
            }
            if src1.typ != GgmlType::F32 {
                return Err(Error::ElementType { what: "src1 (activations)", expected: "F32", got: src1.typ.name() });
            }
            let w = weights_shape(src0.ne, src0.nb).ok_or_else(|| Error::ShapeMismatch {
                what: "src0",
                got: format!("ne {:?} nb {:?}", src0.ne, src0.nb),
                want: "F16 rows in contiguous batches".into(),
            })?;
            let last = (w[2] - 1) * src0.nb[2] + (w[1] - 1) * src0.nb[1] + 2 * w[0];
            crate::error::at_least_bytes(src0.data.len(), last, "src0")?;
            let a = f32_rows(src1.ne, src1.nb, src1.data.len(), "src1")?;
            let o = f32_rows(dst_ne, dst_nb, dst.len(), "dst")?;
            let (k, n, m) = (w[0], w[1], a[1]);
            if a[0] != k || o != [n, m, a[2]] || a[2] % w[2] != 0 {
                return Err(Error::ShapeMismatch {
                    what: "src0, src1 and dst ne",
                    got: format!("src0 {:?}, src1 {:?}, dst {dst_ne:?}", src0.ne, src1.ne),
                    want: "src1 [k, m, b, 1] and dst [n, m, b, 1] for src0 [k, n, b0, 1], b a multiple of b0".into(),
                });
            }
            let kern = PartKernel::for_f16_per_call(kernel_table(GgmlType::F16)[0].0, n, k, &sme.features())?;
            let r = regions(&kern, m, n, k)?;
            crate::error::at_least_bytes(work.len(), r.end, "work buffer")?;
            Ok((kern, r, m, n, a[2], a[2] / w[2]))
        })();
        let (plan, mut result) = match checked {
            Ok(p) => (Some(p), Ok(())),
            Err(e) => (None, Err(e)),
        };
        let batches = plan.as_ref().map_or(1, |p| p.4);
        let ok = match plan.as_ref().map(|p| p.0.on_this_thread()).transpose() {
            Ok(ok) => ok,
            Err(e) => {
                result = result.and(Err(e));
                None
            }
        };
        for b in 0..batches {
            if let (Some((kern, r, m, _, _, per)), Some(ok), true) = (&plan, &ok, result.is_ok()) {
                result = pack(src0, src1, b, *per, kern, r, *m, ok, ith, nth, work);
            }
            team.barrier();
            if let (Some((kern, r, m, n, _, _)), Some(ok), true) = (&plan, &ok, result.is_ok()) {
                result = compute(kern, r, *m, *n, b, ok, ith, nth, (dst_nb, dst), work);
            }
            if b + 1 != batches {
                team.barrier();
            }
        }
        result
    }
}

/// Thread `ith`'s LHS rows of batch `b`, and on thread 0 the weights of the
/// batch it multiplies.
#[allow(clippy::too_many_arguments)]
fn pack(
    src0: &Tensor<'_>,
    src1: &Tensor<'_>,
    b: usize,
    per: usize,
    kern: &PartKernel,
    r: &Regions,
    m: usize,
    ok: &crate::weights::parts::OnThread<'_>,
    ith: usize,
    nth: usize,
    work: &SharedBytes<'_>,
) -> Result<()> {
    let rows = lhs_rows(m, kern.mr(), nth, ith);
    if !rows.is_empty() {
        let off = r.lhs + kern.lhs_offset(rows.start);
        let end = if rows.end == m { r.rhs } else { r.lhs + kern.lhs_offset(rows.end) };
        if off > end || end > r.rhs {
            return Err(Error::bad_value("LHS rows", format!("{rows:?}"), "pack outside their region"));
        }
        // SAFETY: threads pack disjoint row groups of the LHS region (as in
        // ThreadedWeights::mul_mat); the barrier separates this from reads.
        let out = unsafe { work.part_mut(off..end)? };
        let at = b * src1.nb[2] + rows.start * src1.nb[1];
        let src = src1.data.get(at..).ok_or_else(|| Error::ByteLength {
            what: "src1 rows",
            got: src1.data.len(),
            need: at,
        })?;
        kern.pack_rows(ok, rows.len(), src, src1.nb[1], out)?;
    }
    if ith == 0 {
        let at = b / per * src0.nb[2];
        let src = src0.data.get(at..).ok_or_else(|| Error::ByteLength {
            what: "src0 batch",
            got: src0.data.len(),
            need: at,
        })?;
        // SAFETY: only thread 0 writes the RHS, transposed-weights and bias
        // regions (disjoint from the LHS region and from each other), and
        // the barrier separates this from every read.
        let (rhs, kxn, bias) = unsafe {
            (
                work.part_mut(r.rhs..r.rhs + kern.rhs_len())?,
                work.part_mut(r.kxn..r.bias)?,
                work.part_mut(r.bias..r.end)?,
            )
        };
        kern.pack_rhs_f16(ok, src, src0.nb[1], f32s(kxn)?, f32s(bias)?, rhs)?;
    }
    Ok(())
}

/// Bytes of the work buffer (64-byte aligned regions) as f32.
fn f32s(bytes: &mut [u8]) -> Result<&mut [f32]> {
    <[f32] as zerocopy::FromBytes>::mut_from_bytes(bytes)
        .map_err(|_| Error::Misaligned { what: "work buffer region", align: 4 })
}

/// Thread `ith`'s columns (ggml's static split) of batch `b`.
#[allow(clippy::too_many_arguments)]
fn compute(
    kern: &PartKernel,
    r: &Regions,
    m: usize,
    n: usize,
    b: usize,
    ok: &crate::weights::parts::OnThread<'_>,
    ith: usize,
    nth: usize,
    (dst_nb, dst): ([usize; 4], &SharedBytes<'_>),
    work: &SharedBytes<'_>,
) -> Result<()> {
    let step = kern.n_step().max(1);
    let threads = (n / step).min(nth).max(1);
    if ith >= threads {
        return Ok(());
    }
    let per = n / threads / step * step;
    let start = ith * per;
    let end = if ith == threads - 1 { n } else { start + per };
    if start >= end {
        return Ok(());
    }
    // SAFETY: every thread's packing happened before the barrier preceding
    // this call, and nothing writes the work buffer until the next one.
    let (lhs, rhs) = unsafe { (work.part(r.lhs..r.rhs)?, work.part(r.rhs..r.rhs + kern.rhs_len())?) };
    let at = b * dst_nb[2] + start * 4;
    let span = (m - 1) * dst_nb[1] + (end - start) * 4;
    // SAFETY: the static split gives each thread its own columns of batch b;
    // rows dst_nb[1] bytes apart, not overlapping (f32_rows), inside dst
    // (part_mut checks the span).
    let mut out = unsafe {
        let bytes = dst.part_mut(at..at + span)?;
        OutputBlock::from_raw_parts(bytes.as_mut_ptr().cast(), m, end - start, dst_nb[1])?
    };
    kern.run_cols(ok, m, start..end, lhs, 0, rhs, &mut out)
}
