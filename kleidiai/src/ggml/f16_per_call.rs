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
use super::threads::{Own, SharedBytes, SmeSetting, TeamColumns, TeamWork, ThreadTeam, align64, f32_rows};
use crate::error::{Error, Result};
use crate::weights::parts::PartKernel;

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
            let (out, o) = dst.columns_of(team, dst_ne, dst_nb, "dst")?;
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
            Ok(((kern, r, m, a[2], a[2] / w[2]), out))
        })();
        let (plan, mut out, mut result) = match checked {
            Ok((p, out)) => (Some(p), Some(out), Ok(())),
            Err(e) => (None, None, Err(e)),
        };
        let batches = plan.as_ref().map_or(1, |p| p.3);
        // Every barrier through the work buffer's view: its phases are the team's.
        let mut work = work.work_of(team, plan.as_ref().map_or(0..0, |p| p.1.lhs..p.1.rhs));
        let ok = match plan.as_ref().map(|p| p.0.on_this_thread()).transpose() {
            Ok(ok) => ok,
            Err(e) => {
                result = result.and(Err(e));
                None
            }
        };
        for b in 0..batches {
            if let (Some((kern, r, m, _, per)), Some(ok), true) = (&plan, &ok, result.is_ok()) {
                result = pack(src0, src1, b, *per, kern, r, *m, ok, &mut work);
            }
            work.barrier(team);
            if let (Some((kern, r, m, _, _)), Some(ok), Some(out), true) = (&plan, &ok, &mut out, result.is_ok()) {
                result = compute(kern, r, *m, b, ok, out, &work);
            }
            if b + 1 != batches {
                work.barrier(team);
            }
        }
        result
    }
}

/// This thread's LHS rows of batch `b`, and on thread 0 the weights of the
/// batch it multiplies (a writing phase of `work`).
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
    work: &mut TeamWork<'_, '_>,
) -> Result<()> {
    // ggml's row split, the packed bytes of every `mr` rows after the
    // previous ones (the kernel's offsets, checked below).
    let mr = kern.mr().max(1);
    let group = kern.lhs_offset(mr);
    if let Some((rows, out)) = work.own_mut(Own::LhsRows { m, mr, group })? {
        if kern.lhs_offset(rows.start) != rows.start / mr * group {
            return Err(Error::bad_value("LHS rows", format!("{rows:?}"), "packed at uneven offsets"));
        }
        let at = b * src1.nb[2] + rows.start * src1.nb[1];
        let src = src1.data.get(at..).ok_or_else(|| Error::ByteLength {
            what: "src1 rows",
            got: src1.data.len(),
            need: at,
        })?;
        kern.pack_rows(ok, rows.len(), src, src1.nb[1], out)?;
    }
    // Thread 0 alone: the RHS, transposed-weights and bias regions.
    if let Some((_, regions)) = work.own_mut(Own::First(r.rhs..r.end))? {
        let at = b / per * src0.nb[2];
        let src = src0.data.get(at..).ok_or_else(|| Error::ByteLength {
            what: "src0 batch",
            got: src0.data.len(),
            need: at,
        })?;
        // r.rhs + rhs_len <= r.kxn <= r.bias <= r.end (`regions`).
        let (rhs, rest) = regions.split_at_mut(kern.rhs_len());
        let (kxn, bias) = rest[r.kxn - r.rhs - kern.rhs_len()..].split_at_mut(r.bias - r.kxn);
        kern.pack_rhs_f16(ok, src, src0.nb[1], f32s(kxn)?, f32s(bias)?, rhs)?;
    }
    Ok(())
}

/// Bytes of the work buffer (64-byte aligned regions) as f32.
fn f32s(bytes: &mut [u8]) -> Result<&mut [f32]> {
    <[f32] as zerocopy::FromBytes>::mut_from_bytes(bytes)
        .map_err(|_| Error::Misaligned { what: "work buffer region", align: 4 })
}

/// This thread's columns (ggml's static split) of batch `b` (a reading
/// phase of `work`).
#[allow(clippy::too_many_arguments)]
fn compute(
    kern: &PartKernel,
    r: &Regions,
    m: usize,
    b: usize,
    ok: &crate::weights::parts::OnThread<'_>,
    out: &mut TeamColumns<'_, '_>,
    work: &TeamWork<'_, '_>,
) -> Result<()> {
    let Some((cols, mut block)) = out.block_mut(b, kern.n_step())? else {
        return Ok(());
    };
    let (lhs, rhs) = (work.part(r.lhs..r.rhs)?, work.part(r.rhs..r.rhs + kern.rhs_len())?);
    kern.run_cols(ok, m, cols, lhs, 0, rhs, &mut block)
}
