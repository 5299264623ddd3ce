//! The engine of the indirect-matmul families (`imatmul_clamp_f32_f32p_f32p`,
//! `imatmul_clamp_f32_f32_f32p`, `imatmul_clamp_f16_f16p_f16p`,
//! `imatmul_clamp_qai8_qai8p_qsi8cxp`): the f32 reference math and the
//! check of `k`; on aarch64, a kernel as data (`Entry`: its upstream
//! interface functions, `Fns`, and the packers it reads, `RhsFormat` and
//! `LhsPacker` tables), one generic driver of these families
//! (`Entry::pack_rhs`, `pack_lhs_into`, `run_packed`, `run_direct`,
//! `unpack_rhs_row`: their checks, then the engine's drivers, where
//! every FFI call of these families lives), and `imatmul_kernel!` /
//! `float_family!`, which declare a family's typed `Kernel`; and the test
//! helpers (`test_support`).
//!
//! Every packed imatmul RHS has the same shape (see `RhsFormat`): blocks
//! of `nr` channels, the biases first, then per chunk its inputs padded to
//! a multiple of `kr`, then the scales of quantised formats. Packed layouts
//! record `k = k_chunk_count · k_chunk_length` and `bl = k_chunk_length`.

use crate::error::{self, Result};
use crate::formats::{FloatElement, FloatWeights, Indirection};
use crate::packed::Clamp;

/// `dst = clamp(x · wᵀ + bias)` in f64 with one rounding to f32: `x` is
/// `m x k`, `w` `n x k` (as f32), `bias` `n` values.
fn f32_core(m: usize, x: &[f32], k: usize, w: &[f32], bias: &[f32], clamp: Clamp, dst: &mut [f32]) {
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

/// The reference of the float indirect families: gathers the LHS rows
/// through the indirection and computes `clamp(lhs · wᵀ + bias)` (f64
/// accumulation, one rounding to f32, then to `T`); `dst` is `m x n`.
pub(crate) fn reference_float<T: FloatElement>(
    lhs: &Indirection<'_, T>,
    w: &FloatWeights<'_, T>,
    clamp: Clamp,
    dst: &mut [T],
) -> Result<()> {
    lhs.validate()?;
    w.validate()?;
    clamp.check()?;
    let k = check_k(w.k, lhs.k_chunk_count, lhs.k_chunk_length)?;
    error::at_least(dst.len(), error::mul(lhs.m, w.n, "dst")?, "dst")?;
    let x: Vec<f32> = lhs.gather()?.iter().map(|v| v.to_f32()).collect();
    let wd: Vec<f32> = w.to_nxk()?.iter().map(|v| v.to_f32()).collect();
    let bias: Vec<f32> = (0..w.n).map(|j| w.bias_f32(j)).collect();
    let mut y = vec![0f32; lhs.m * w.n];
    f32_core(lhs.m, &x, k, &wd, &bias, clamp, &mut y);
    for (d, v) in dst.iter_mut().zip(y) {
        *d = T::from_f32(v);
    }
    Ok(())
}

/// Declares a float indirect family: `FAMILY`, its `reference` (with the
/// docs given before `reference`) and, on aarch64, its `Kernel` (the rest
/// goes to `imatmul_kernel!`).
macro_rules! float_family {
    (family: $family:literal, elem: $t:ty, $(#[$doc:meta])* reference, $($kernel:tt)*) => {
        /// Upstream family directory.
        pub const FAMILY: &str = $family;

        $(#[$doc])*
        pub fn reference(
            lhs: &$crate::formats::Indirection<'_, $t>,
            w: &$crate::formats::FloatWeights<'_, $t>,
            clamp: $crate::Clamp,
            dst: &mut [$t],
        ) -> $crate::Result<()> {
            $crate::families::indirect::reference_float(lhs, w, clamp, dst)
        }

        #[cfg(target_arch = "aarch64")]
        pub use imp::*;

        #[cfg(target_arch = "aarch64")]
        mod imp {
            use super::*;
            $crate::families::indirect::imatmul_kernel! { $($kernel)* }
        }
    };
}
pub(crate) use float_family;

#[cfg(target_arch = "aarch64")]
pub(crate) use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::check_k;
    use crate::Error;
    use crate::error::{self, Result};
    use crate::families::engine::{self, CheckedIndirection, ChunkQuery, Gate, PackLhsIndirect, Tiles, query};
    pub(crate) use crate::families::engine::{ImatmulRhsRun as RhsRun, ImatmulRun as Run, ImatmulStage as Stage};
    use crate::formats::Indirection;
    use crate::packed::{Clamp, PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::info::KernelInfo;
    use kleidiai_sys as sys;
    use std::borrow::Cow;

    type Getter = unsafe extern "C" fn() -> usize;

    /// An upstream `kai_lhs_imatmul_pack_*` packer (it follows the pointer
    /// table) and the format it writes.
    pub(crate) struct LhsPacker {
        pub format: &'static str,
        pub name: &'static str,
        pub m_step: Getter,
        pub run: PackLhsIndirect,
        pub offset: ChunkQuery,
    }

    /// A packed imatmul RHS format and its upstream packer. The bytes are
    /// blocks of `nr` channels: `nr · lead` bytes (the biases), then per
    /// chunk `roundup(kcl, kr)` inputs in groups of `kr` (`nr` channels of
    /// `kr` elements of `elem_bytes` each per group), then `nr · trail`
    /// bytes (the scales of quantised formats).
    pub(crate) struct RhsFormat {
        pub format: &'static str,
        pub packer: &'static str,
        pub n_step: Getter,
        pub size: ChunkQuery,
        pub run: RhsRun,
        pub kr: usize,
        pub elem_bytes: usize,
        pub lead: usize,
        pub trail: usize,
    }

    /// f32 weights, 2 SME vectors of channels, kr 1.
    pub(crate) static X32P2VLX1B: RhsFormat = RhsFormat {
        format: "x32p2vlx1b-imatmul",
        packer: "kai_rhs_imatmul_pack_kxn_x32p2vlx1b_x32_x32_sme",
        n_step: sys::kai_get_n_step_rhs_imatmul_pack_kxn_x32p2vlx1b_x32_x32_sme,
        size: sys::kai_get_rhs_packed_size_rhs_imatmul_pack_kxn_x32p2vlx1b_x32_x32_sme,
        run: RhsRun::Float(sys::kai_run_rhs_imatmul_pack_kxn_x32p2vlx1b_x32_x32_sme),
        kr: 1,
        elem_bytes: 4,
        lead: 4,
        trail: 0,
    };

    /// f32 weights, 4 SVE vectors of channels, kr 1 (depends on the SVE
    /// vector length).
    pub(crate) static X32P4VLX1B: RhsFormat = RhsFormat {
        format: "x32p4vlx1b-imatmul",
        packer: "kai_rhs_imatmul_pack_kxn_x32p4vlx1b_x32_x32_sve",
        n_step: sys::kai_get_n_step_rhs_imatmul_pack_kxn_x32p4vlx1b_x32_x32_sve,
        size: sys::kai_get_rhs_packed_size_rhs_imatmul_pack_kxn_x32p4vlx1b_x32_x32_sve,
        run: RhsRun::Float(sys::kai_run_rhs_imatmul_pack_kxn_x32p4vlx1b_x32_x32_sve),
        kr: 1,
        elem_bytes: 4,
        lead: 4,
        trail: 0,
    };

    /// f16 weights, 2 SME vectors of f32 channels, kr 2 (each chunk padded
    /// to an even length).
    pub(crate) static X16P2VLX2B: RhsFormat = RhsFormat {
        format: "x16p2vlx2b-imatmul",
        packer: "kai_rhs_imatmul_pack_kxn_x16p2vlx2b_x16_x16_sme",
        n_step: sys::kai_get_n_step_rhs_imatmul_pack_kxn_x16p2vlx2b_x16_x16_sme,
        size: sys::kai_get_rhs_packed_size_rhs_imatmul_pack_kxn_x16p2vlx2b_x16_x16_sme,
        run: RhsRun::Float(sys::kai_run_rhs_imatmul_pack_kxn_x16p2vlx2b_x16_x16_sme),
        kr: 2,
        elem_bytes: 2,
        lead: 2,
        trail: 0,
    };

    /// Int8 weights with int32 bias and f32 scales, kr 4.
    pub(crate) static QSI8CXP2VLX4SB: RhsFormat = RhsFormat {
        format: "qsi8cxp2vlx4sb-imatmul",
        packer: "kai_rhs_imatmul_pack_kxn_qsi8cxp2vlx4sb_qs8cx_f32_i32_sme",
        n_step: sys::kai_get_n_step_rhs_imatmul_pack_kxn_qsi8cxp2vlx4sb_qs8cx_f32_i32_sme,
        size: sys::kai_get_rhs_packed_size_rhs_imatmul_pack_kxn_qsi8cxp2vlx4sb_qs8cx_f32_i32_sme,
        run: RhsRun::Qsi8(sys::kai_run_rhs_imatmul_pack_kxn_qsi8cxp2vlx4sb_qs8cx_f32_i32_sme),
        kr: 4,
        elem_bytes: 1,
        lead: 4,
        trail: 4,
    };

    /// f32 LHS, 2 SME vectors of rows, kr 1.
    pub(crate) static X32P2VLX1: LhsPacker = LhsPacker {
        format: "x32p2vlx1-imatmul",
        name: "kai_lhs_imatmul_pack_x32p2vlx1_x32p_sme",
        m_step: sys::kai_get_m_step_lhs_imatmul_pack_x32p2vlx1_x32p_sme,
        run: sys::kai_run_lhs_imatmul_pack_x32p2vlx1_x32p_sme,
        offset: sys::kai_get_lhs_packed_offset_lhs_imatmul_pack_x32p2vlx1_x32p_sme,
    };

    /// f16 LHS, kr 2.
    pub(crate) static X16P2VLX2: LhsPacker = LhsPacker {
        format: "x16p2vlx2-imatmul",
        name: "kai_lhs_imatmul_pack_x16p2vlx2_x16p_sme",
        m_step: sys::kai_get_m_step_lhs_imatmul_pack_x16p2vlx2_x16p_sme,
        run: sys::kai_run_lhs_imatmul_pack_x16p2vlx2_x16p_sme,
        offset: sys::kai_get_lhs_packed_offset_lhs_imatmul_pack_x16p2vlx2_x16p_sme,
    };

    /// Raw int8 LHS, kr 4.
    pub(crate) static X8P2VLX4: LhsPacker = LhsPacker {
        format: "x8p2vlx4-imatmul",
        name: "kai_lhs_imatmul_pack_x8p2vlx4_x8p_sme",
        m_step: sys::kai_get_m_step_lhs_imatmul_pack_x8p2vlx4_x8p_sme,
        run: sys::kai_run_lhs_imatmul_pack_x8p2vlx4_x8p_sme,
        offset: sys::kai_get_lhs_packed_offset_lhs_imatmul_pack_x8p2vlx4_x8p_sme,
    };

    /// The functions of one kernel (its generated interface struct).
    #[derive(Clone, Copy)]
    pub(crate) struct Fns {
        pub m_step: Getter,
        pub n_step: Getter,
        pub lhs_offset: Option<ChunkQuery>,
        pub rhs_offset: ChunkQuery,
        pub run: Run,
    }

    /// [`Fns`] from a family's generated interface struct; `$run` is the
    /// [`Run`] variant of its `run_imatmul` (`Direct` ones have no LHS
    /// offset).
    macro_rules! imatmul_fns {
        ($i:expr, Direct) => {
            $crate::families::indirect::Fns {
                lhs_offset: None,
                ..$crate::families::indirect::imatmul_fns!(@ $i, Direct)
            }
        };
        ($i:expr, $run:ident) => {
            $crate::families::indirect::Fns {
                lhs_offset: Some($i.get_lhs_packed_offset.expect("lhs offset")),
                ..$crate::families::indirect::imatmul_fns!(@ $i, $run)
            }
        };
        (@ $i:expr, $run:ident) => {
            $crate::families::indirect::Fns {
                m_step: $i.get_m_step.expect("m_step"),
                n_step: $i.get_n_step.expect("n_step"),
                lhs_offset: None,
                rhs_offset: $i.get_rhs_packed_offset.expect("rhs offset"),
                run: $crate::families::indirect::Run::$run($i.run_imatmul.expect("run")),
            }
        };
    }
    pub(crate) use imatmul_fns;

    /// The RHS operands handed to the packer.
    pub(crate) enum RhsSource<'a, T: Clone, B: Clone> {
        /// K x N weights and `n` biases.
        Float { kxn: Cow<'a, [T]>, bias: Cow<'a, [B]> },
        /// K x N int8 weights, `n` int32 biases, `n` f32 scales and the
        /// folded LHS quantisation.
        Qsi8 { kxn: Cow<'a, [T]>, bias: Cow<'a, [B]>, scales: &'a [f32], params: sys::kai_rhs_pack_qsi8cx_params },
    }

    /// One kernel of an indirect family with the formats it reads.
    pub(crate) struct Entry {
        pub info: KernelInfo,
        fns: Fns,
        rhs: &'static RhsFormat,
        lhs: Option<&'static LhsPacker>,
    }

    impl Entry {
        pub(crate) fn new(
            u: &'static sys::Ukernel,
            family: &'static str,
            fns: Fns,
            rhs: &'static RhsFormat,
            lhs: Option<&'static LhsPacker>,
        ) -> Entry {
            let info = engine::kernel_info(u, family, lhs.map(|l| l.name), core::slice::from_ref(&rhs.packer));
            Entry { info, fns, rhs, lhs }
        }

        pub(crate) fn tiles(&self) -> Result<(Tiles, Gate)> {
            let g = engine::ensure_supported(&self.info)?;
            let (m_step, n_step) = (query!(&g, self.fns.m_step), query!(&g, self.fns.n_step));
            let kr = self.rhs.kr;
            Ok((Tiles { m_step, n_step, mr: m_step, nr: n_step, kr, sr: 1 }, g))
        }

        fn layout(&self, format: &'static str, rows: usize, kcc: usize, kcl: usize, lhs: bool) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(f.layout(
                &self.info,
                format,
                (rows, error::mul(kcc, kcl, "k_chunk_count * k_chunk_length")?, kcl),
                if lhs { t.m_step } else { t.n_step },
                &t,
            ))
        }

        /// The packed-RHS layout for `n` channels of `kcc` chunks of `kcl`.
        pub(crate) fn rhs_layout(&self, n: usize, kcc: usize, kcl: usize) -> Result<PackedLayout> {
            self.layout(self.rhs.format, n, kcc, kcl, false)
        }

        /// The packed-LHS layout for `m` rows of `kcc` chunks of `kcl`.
        pub(crate) fn lhs_layout(&self, m: usize, kcc: usize, kcl: usize) -> Result<PackedLayout> {
            let Some(p) = self.lhs else {
                return Err(Error::WrongFamily { kernel: self.info.name, why: "reads an unpacked LHS".into() });
            };
            self.layout(p.format, m, kcc, kcl, true)
        }

        /// Packs `n` channels of `k` weights for LHS rows of `kcc` chunks of
        /// `kcl` (`src` gives the operands once the checks passed; the
        /// weights themselves were validated by the caller).
        pub(crate) fn pack_rhs<'a, T: Copy + 'a, B: Copy + 'a>(
            &self,
            (n, k): (usize, usize),
            kcc: usize,
            kcl: usize,
            src: impl FnOnce() -> RhsSource<'a, T, B>,
        ) -> Result<PackedRhs> {
            check_k(k, kcc, kcl)?;
            if self.lhs.is_none() {
                check_u32(kcc, kcl)?;
            }
            let layout = self.rhs_layout(n, kcc, kcl)?;
            let g = engine::ensure_supported(&self.info)?;
            let f = self.rhs;
            let packer_nr = query!(&g, f.n_step);
            if packer_nr != layout.r {
                return Err(Error::PackerMismatch {
                    kernel: self.info.name,
                    why: format!("RHS packer block {packer_nr} differs from the kernel's n step {}", layout.r),
                });
            }
            // Checked size: roundup(n, nr) * (lead + packed_k * elem_bytes + trail).
            let block = error::mul(engine::chunks_packed_k(kcc, kcl, f.kr)?, f.elem_bytes, "packed rhs")?
                .checked_add(f.lead + f.trail)
                .ok_or_else(|| Error::Overflow("packed rhs".into()))?;
            error::mul(error::mul(n.div_ceil(layout.r), layout.r, "n")?, block, "packed rhs")?;
            error::mul(n, f.elem_bytes, "rhs stride")?;
            let src = src();
            let (kxn, bias, scales, params) = match &src {
                RhsSource::Float { kxn, bias } => (&kxn[..], &bias[..], &[][..], None),
                RhsSource::Qsi8 { kxn, bias, scales, params } => (&kxn[..], &bias[..], *scales, Some(params)),
            };
            let packer = (f.size, f.elem_bytes, f.lead);
            let buf = f.run.pack(&g, self.info.name, packer, (n, kcc, kcl), (kxn, bias, scales), params);
            Ok(PackedRhs::new(layout, buf))
        }

        /// Packs the indirect LHS `lhs` into `out`.
        pub(crate) fn pack_lhs_into<T: Copy>(
            &self,
            lhs: &Indirection<'_, T>,
            par: Parallelism,
            out: &mut PackedLhs,
        ) -> Result<()> {
            let lhs = CheckedIndirection::new(lhs)?;
            let layout = self.lhs_layout(lhs.m, lhs.k_chunk_count, lhs.k_chunk_length)?;
            let g = engine::ensure_supported(&self.info)?;
            let p = self.lhs.expect("lhs_layout checked it");
            let packer = (p.m_step, p.run, p.offset);
            engine::pack_lhs_indirect(&g, &self.info, packer, &lhs, (layout, self.rhs.elem_bytes), par, out)
        }

        /// `dst = stage(lhs · wᵀ + bias)` from a packed LHS (`stage` checked by
        /// the caller): `dst` is `m x n`, rows `n` apart.
        pub(crate) fn run_packed<D: Copy>(
            &self,
            lhs: &PackedLhs,
            rhs: &PackedRhs,
            dst: &mut [D],
            stage: Stage,
            par: Parallelism,
        ) -> Result<()> {
            let (m, n, kcl) = (lhs.layout().rows, rhs.layout().rows, rhs.layout().bl);
            if kcl == 0 {
                return Err(Error::bad_value("packed RHS k_chunk_length", kcl, "0: not an imatmul packed RHS"));
            }
            let kcc = rhs.layout().k / kcl;
            let rhs_layout = self.rhs_layout(n, kcc, kcl)?;
            let layouts = (self.lhs_layout(m, kcc, kcl)?, rhs_layout);
            let tiles = self.tiles()?;
            let offsets = (self.fns.lhs_offset.expect("packed-LHS kernel"), self.fns.rhs_offset);
            let out = (dst, self.rhs.elem_bytes);
            self.fns.run.run_packed((&self.info, &tiles), offsets, (lhs, rhs), layouts, out, stage, par)
        }

        /// `dst = clamp(gather(lhs) · wᵀ + bias)` with a kernel that reads
        /// the LHS through the pointer table: `dst` is `m x n`, rows `n`
        /// apart.
        pub(crate) fn run_direct<T: Copy>(
            &self,
            lhs: &Indirection<'_, T>,
            rhs: &PackedRhs,
            dst: &mut [T],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            clamp.check()?;
            let lhs = CheckedIndirection::new(lhs)?;
            let (n, kcc, kcl) = (rhs.layout().rows, lhs.k_chunk_count, lhs.k_chunk_length);
            check_u32(kcc, kcl)?;
            let layout = self.rhs_layout(n, kcc, kcl)?;
            let tiles = self.tiles()?;
            let (kernel, out) = ((&self.info, &tiles), (dst, self.rhs.elem_bytes));
            self.fns.run.run_direct(kernel, self.fns.rhs_offset, &lhs, (rhs, layout), out, clamp, par)
        }
    }

    /// Upstream hands the chunk count and length to the direct kernel as
    /// `unsigned int`.
    fn check_u32(kcc: usize, kcl: usize) -> Result<()> {
        if u32::try_from(kcc).is_err() || u32::try_from(kcl).is_err() {
            return Err(Error::bad_value(
                "k_chunk_count, k_chunk_length",
                format!("{kcc}, {kcl}"),
                "must fit in 32 bits",
            ));
        }
        Ok(())
    }

    /// The `k` weights of channel `row` of a packed RHS in `format`, each
    /// read from its `elem_bytes` bytes by `read`; returns the byte offset
    /// of the channel's trailing value (its scale, in quantised formats).
    pub(crate) fn unpack_rhs_row<V>(
        f: &RhsFormat,
        family: &str,
        rhs: &PackedRhs,
        row: usize,
        out: &mut [V],
        read: impl Fn(&[u8]) -> V,
    ) -> Result<usize> {
        let l = *rhs.layout();
        if l.format != f.format || l.bl == 0 {
            return Err(Error::bad_value("packed RHS format", l.format, format!("not a packed RHS of {family}")));
        }
        if row >= l.rows {
            return Err(Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        let (kcc, kcl, nr, kr, eb) = (l.k / l.bl, l.bl, l.r, f.kr, f.elem_bytes);
        let kclp = kcl.div_ceil(kr) * kr;
        let stride = nr * (f.lead + kcc * kclp * eb + f.trail);
        let b = rhs.as_bytes();
        for (kk, o) in out.iter_mut().enumerate().take(l.k) {
            let r = (kk / kcl) * kclp + kk % kcl;
            let at = (row / nr) * stride + nr * f.lead + (r / kr) * nr * kr * eb + (row % nr) * kr * eb + (r % kr) * eb;
            *o = read(&b[at..at + eb]);
        }
        Ok((row / nr) * stride + stride - nr * f.trail + (row % nr) * f.trail)
    }

    /// Defines a family's `entries()`, `infos()` and typed `Kernel` with
    /// the methods every indirect family has; `lhs:` adds the packed-LHS
    /// methods (LHS element type, output type, output stage argument and its
    /// type, run docs), `float:` the float RHS packing and unpacking.
    macro_rules! imatmul_kernel {
        (
            kernels: $kernels:path, run: $run:ident, rhs: $rhs:expr, lhs: $lhs:expr
            $(, packed: ($t:ty, $d:ty, $stage:ident: $sty:ty, $(#[$doc:meta])*))?
            $(, direct: ($dt:ty, $(#[$ddoc:meta])*))?
            $(, float: $ft:ty)?
        ) => {
            fn entries() -> &'static [$crate::families::indirect::Entry] {
                static E: std::sync::OnceLock<Vec<$crate::families::indirect::Entry>> = std::sync::OnceLock::new();
                E.get_or_init(|| {
                    let mut v = Vec::with_capacity($kernels.len());
                    for (u, i) in $kernels {
                        let fns = $crate::families::indirect::imatmul_fns!(i, $run);
                        v.push($crate::families::indirect::Entry::new(u, FAMILY, fns, $rhs, $lhs));
                    }
                    v
                })
            }

            $crate::families::engine::kernel_type!($crate::families::indirect::Entry);

            impl Kernel {

                /// The packed-RHS layout for `n` channels of `k_chunk_count`
                /// chunks of `k_chunk_length` inputs.
                pub fn rhs_layout(
                    &self,
                    n: usize,
                    k_chunk_count: usize,
                    k_chunk_length: usize,
                ) -> $crate::Result<$crate::PackedLayout> {
                    self.0.rhs_layout(n, k_chunk_count, k_chunk_length)
                }
            }

            #[cfg(test)]
            impl $crate::families::indirect::test_support::TestKernel for Kernel {
                fn by_name(name: &str) -> Option<Kernel> {
                    Kernel::by_name(name)
                }
                fn select(m: usize, f: &$crate::cpu::Features) -> Option<Kernel> {
                    Kernel::select(m, f)
                }
                fn all() -> Vec<Kernel> {
                    Kernel::all().collect()
                }
                fn entry(&self) -> &'static $crate::families::indirect::Entry {
                    self.0
                }
            }

            $($crate::families::indirect::imatmul_kernel!(@packed $t, $d, $stage: $sty, $(#[$doc])*);)?
            $($crate::families::indirect::imatmul_kernel!(@direct $dt, $(#[$ddoc])*);)?
            $($crate::families::indirect::imatmul_kernel!(@float $ft, $rhs, $run);)?
        };
        (@direct $t:ty, $(#[$doc:meta])*) => {
            impl Kernel {
                $(#[$doc])*
                pub fn run(
                    &self,
                    lhs: &$crate::formats::Indirection<'_, $t>,
                    rhs: &$crate::PackedRhs,
                    dst: &mut [$t],
                    clamp: $crate::Clamp,
                    par: $crate::Parallelism,
                ) -> $crate::Result<()> {
                    self.0.run_direct(lhs, rhs, dst, clamp, par)
                }
            }
        };
        (@entry_point Direct) => {
            Kernel::run
        };
        (@entry_point $run:ident) => {
            Kernel::imatmul
        };
        (@packed $t:ty, $d:ty, $stage:ident: $sty:ty, $(#[$doc:meta])*) => {
            impl Kernel {
                /// The packed-LHS layout for `m` rows of `k_chunk_count`
                /// chunks of `k_chunk_length` inputs.
                pub fn lhs_layout(
                    &self,
                    m: usize,
                    k_chunk_count: usize,
                    k_chunk_length: usize,
                ) -> $crate::Result<$crate::PackedLayout> {
                    self.0.lhs_layout(m, k_chunk_count, k_chunk_length)
                }

                /// Packs the indirect LHS (following its chunks).
                pub fn pack_lhs(
                    &self,
                    lhs: &$crate::formats::Indirection<'_, $t>,
                    par: $crate::Parallelism,
                ) -> $crate::Result<$crate::PackedLhs> {
                    let mut out = $crate::PackedLhs::empty();
                    self.pack_lhs_into(lhs, par, &mut out)?;
                    Ok(out)
                }

                /// As [`pack_lhs`](Self::pack_lhs), reusing `out`'s allocation.
                pub fn pack_lhs_into(
                    &self,
                    lhs: &$crate::formats::Indirection<'_, $t>,
                    par: $crate::Parallelism,
                    out: &mut $crate::PackedLhs,
                ) -> $crate::Result<()> {
                    self.0.pack_lhs_into(lhs, par, out)
                }

                $(#[$doc])*
                pub fn run(
                    &self,
                    lhs: &$crate::PackedLhs,
                    rhs: &$crate::PackedRhs,
                    dst: &mut [$d],
                    $stage: $sty,
                    par: $crate::Parallelism,
                ) -> $crate::Result<()> {
                    $stage.check()?;
                    self.0.run_packed(lhs, rhs, dst, $stage.into(), par)
                }

                /// Packs the indirect LHS and runs: the one-call form.
                pub fn imatmul(
                    &self,
                    lhs: &$crate::formats::Indirection<'_, $t>,
                    rhs: &$crate::PackedRhs,
                    dst: &mut [$d],
                    $stage: $sty,
                    par: $crate::Parallelism,
                ) -> $crate::Result<()> {
                    let packed = self.pack_lhs(lhs, par)?;
                    self.run(&packed, rhs, dst, $stage, par)
                }
            }
        };
        (@float $ft:ty, $rhs:expr, $run:ident) => {
            impl Kernel {
                /// Packs `n x k` weights (with bias; zeros without one) for
                /// LHS rows made of `k_chunk_count` chunks of `k_chunk_length`
                /// (their product must be `w.k`; weight input `c ·
                /// k_chunk_length + j` meets element `j` of chunk `c`).
                pub fn pack_rhs(
                    &self,
                    w: &$crate::formats::FloatWeights<'_, $ft>,
                    k_chunk_count: usize,
                    k_chunk_length: usize,
                ) -> $crate::Result<$crate::PackedRhs> {
                    w.validate()?;
                    self.0.pack_rhs((w.n, w.k), k_chunk_count, k_chunk_length, || {
                        $crate::families::indirect::RhsSource::Float { kxn: w.kxn(), bias: w.bias_or_zeros() }
                    })
                }
            }

            /// Weight row (output channel) `row` of a packed RHS of this
            /// family, `k` values as f32 (bias not included).
            pub fn unpack_rhs_row(rhs: &$crate::PackedRhs, row: usize, out: &mut [f32]) -> $crate::Result<()> {
                $crate::families::indirect::unpack_rhs_row($rhs, FAMILY, rhs, row, out, |b| {
                    $crate::formats::FloatElement::to_f32(<$ft>::from_le_bytes(b.try_into().unwrap()))
                })?;
                Ok(())
            }

            #[cfg(test)]
            impl $crate::families::indirect::test_support::FloatKernel for Kernel {
                type Elem = $ft;
                fn pack_rhs(
                    &self,
                    w: &$crate::formats::FloatWeights<'_, $ft>,
                    kcc: usize,
                    kcl: usize,
                ) -> $crate::Result<$crate::PackedRhs> {
                    Kernel::pack_rhs(self, w, kcc, kcl)
                }
                fn unpack_rhs_row(rhs: &$crate::PackedRhs, row: usize, out: &mut [f32]) -> $crate::Result<()> {
                    unpack_rhs_row(rhs, row, out)
                }
                fn compute(
                    &self,
                    lhs: &$crate::formats::Indirection<'_, $ft>,
                    rhs: &$crate::PackedRhs,
                    dst: &mut [$ft],
                    clamp: $crate::Clamp,
                    par: $crate::Parallelism,
                ) -> $crate::Result<()> {
                    let one_call = $crate::families::indirect::imatmul_kernel!(@entry_point $run);
                    one_call(self, lhs, rhs, dst, clamp, par)
                }
            }
        };
    }
    pub(crate) use imatmul_kernel;
}

/// Test helpers shared by the imatmul families.
#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) mod test_support {
    use super::Entry;
    use crate::Result;
    use crate::cpu::Features;
    use crate::formats::{FloatElement, FloatWeights, Indirection, Order};
    use crate::packed::{Clamp, PackedRhs};
    use crate::par::Parallelism;
    use crate::testing::{self, Rng, THREADS, bit_identical, compare, tail_shapes};

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

    /// What the shared tests need of a family's `Kernel` (implemented by
    /// `imatmul_kernel!`).
    pub(crate) trait TestKernel: Copy {
        fn by_name(name: &str) -> Option<Self>;
        fn select(m: usize, f: &Features) -> Option<Self>;
        fn all() -> Vec<Self>;
        fn entry(&self) -> &'static Entry;
    }

    /// A float family's kernel: its RHS packing and unpacking, and the LHS
    /// packing (if it reads a packed one) followed by the run.
    pub(crate) trait FloatKernel: TestKernel {
        type Elem: FloatElement;
        fn pack_rhs(&self, w: &FloatWeights<'_, Self::Elem>, kcc: usize, kcl: usize) -> Result<PackedRhs>;
        fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()>;
        fn compute(
            &self,
            lhs: &Indirection<'_, Self::Elem>,
            rhs: &PackedRhs,
            dst: &mut [Self::Elem],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()>;
    }

    /// A family's reference function.
    pub(crate) type Reference<T> = fn(&Indirection<'_, T>, &FloatWeights<'_, T>, Clamp, &mut [T]) -> Result<()>;

    /// One conformance case: shape `m x n`, `k` as `kcc` chunks of `kcl`.
    pub(crate) struct Case {
        pub ci: usize,
        pub m: usize,
        pub n: usize,
        pub kcc: usize,
        pub kcl: usize,
    }

    /// The conformance run of an imatmul family: for every kernel the CPU
    /// supports, `case` runs on the tail shapes of its tile with `k` as
    /// (chunks, chunk length) in (1, 3), (3, 5), (4, 7) (odd lengths
    /// exercise the per-chunk padding to `kr`), drawing its data from one
    /// generator seeded with `seed`; it returns the case's largest error.
    pub(crate) fn conformance<K: TestKernel>(
        family: &str,
        seed: u64,
        mut case: impl FnMut(K, &mut Rng, &Case) -> core::result::Result<f64, String>,
    ) {
        testing::conformance(family, |info| {
            let kernel = K::by_name(info.name).unwrap();
            let (t, _) = kernel.entry().tiles().map_err(|x| (0, x.to_string()))?;
            let kc = [(1usize, 3usize), (3, 5), (4, 7)];
            let shapes = tail_shapes(t.m_step, t.m_step, t.n_step, t.n_step, &[0, 1, 2]);
            let mut rng = Rng::new(seed);
            let (mut cases, mut worst) = (0, 0f64);
            for (ci, &(m, n, kci)) in shapes.iter().enumerate() {
                let (kcc, kcl) = kc[kci];
                worst = worst.max(case(kernel, &mut rng, &Case { ci, m, n, kcc, kcl }).map_err(|x| (cases, x))?);
                cases += 1;
            }
            Ok((cases, worst))
        });
    }

    fn f32s<T: FloatElement>(v: &[T]) -> Vec<f32> {
        v.iter().map(|x| x.to_f32()).collect()
    }

    fn elems<T: FloatElement>(v: Vec<f32>) -> Vec<T> {
        v.into_iter().map(T::from_f32).collect()
    }

    /// The conformance test of a float family: against `reference` within
    /// `tol(k, Σ_k |x·w| + |bias|, want)`, bit-identical across thread
    /// counts, and the packed RHS unpacks to the weights. `pad` is the
    /// padding value of every third case.
    pub(crate) fn float_conformance<K: FloatKernel>(
        family: &str,
        seed: u64,
        pad: f32,
        reference: Reference<K::Elem>,
        tol: fn(usize, f64, f32) -> f32,
    ) {
        conformance::<K>(family, seed, |kernel, rng, c| {
            let (ci, m, n, kcc, kcl) = (c.ci, c.m, c.n, c.kcc, c.kcl);
            let k = kcc * kcl;
            let src: Vec<K::Elem> = elems(rng.vec_f32(m * k / 2 + kcl + 3));
            let table = chunks(rng, m, kcc, kcl, src.len());
            let pad = K::Elem::from_f32(if ci % 3 == 0 { pad } else { 0.0 });
            let lhs = Indirection { m, k_chunk_count: kcc, k_chunk_length: kcl, src: &src, chunks: &table, pad };
            let order = if ci % 2 == 0 { Order::KxN } else { Order::NxK };
            let data = elems(rng.vec_f32(n * k));
            let bias_v = elems(rng.vec_f32(n));
            let bias = if ci % 4 == 3 { None } else { Some(&bias_v[..]) };
            let w = FloatWeights { n, k, order, data: &data, bias };
            let clamp = if ci % 5 == 4 { Clamp { min: -0.5, max: 0.5 } } else { Clamp::NONE };
            let mut want = vec![K::Elem::ZERO; m * n];
            reference(&lhs, &w, clamp, &mut want).map_err(|x| x.to_string())?;
            let want = f32s(&want);
            let wd = f32s(&w.to_nxk().unwrap());
            let b: Vec<f32> = (0..n).map(|j| w.bias_f32(j)).collect();
            let mags = magnitudes(m, &f32s(&lhs.gather().unwrap()), k, &wd, &b);
            let packed = kernel.pack_rhs(&w, kcc, kcl).map_err(|x| x.to_string())?;
            let (mut first, mut worst): (Option<Vec<f32>>, f64) = (None, 0.0);
            for threads in THREADS {
                let par = Parallelism::Rayon(threads);
                let mut dst = vec![K::Elem::from_f32(f32::NAN); m * n];
                kernel.compute(&lhs, &packed, &mut dst, clamp, par).map_err(|x| x.to_string())?;
                let dst = f32s(&dst);
                let err = compare(&dst, &want, |i, y| tol(k, mags[i], y))
                    .map_err(|x| format!("m={m} n={n} k={kcc}x{kcl} threads={threads}: {x}"))?;
                worst = worst.max(err);
                match &first {
                    None => first = Some(dst),
                    Some(f) if !bit_identical(f, &dst) => {
                        return Err(format!("m={m} n={n}: {threads} threads differ from 1"));
                    }
                    _ => {}
                }
            }
            let mut row = vec![0f32; k];
            for r in [0, n / 2, n - 1] {
                K::unpack_rhs_row(&packed, r, &mut row).map_err(|x| x.to_string())?;
                if row[..] != wd[r * k..(r + 1) * k] {
                    return Err(format!("unpack_rhs_row({r}) n={n} k={kcc}x{kcl} differs"));
                }
            }
            Ok(worst)
        });
    }

    /// Every kernel of a float family reads the packed RHS of the selected
    /// one (same layout), and a packed RHS of the same `k` in other chunks
    /// is refused.
    pub(crate) fn float_mixing_layouts<K: FloatKernel>() {
        let f = Features::current();
        let k1 = crate::testing::or_skip!(K::select(4, &f));
        let (n, kcc, kcl) = (8, 2, 3);
        let half = K::Elem::from_f32(0.5);
        let data = vec![half; n * kcc * kcl];
        let w = FloatWeights { n, k: kcc * kcl, order: Order::NxK, data: &data, bias: None };
        let packed = k1.pack_rhs(&w, kcc, kcl).unwrap();
        let src = vec![half; 8];
        let chunks = [Some(0), Some(5), None, Some(2)];
        let zero = K::Elem::ZERO;
        let lhs = Indirection { m: 2, k_chunk_count: kcc, k_chunk_length: kcl, src: &src, chunks: &chunks, pad: zero };
        let seq = Parallelism::Sequential;
        for other in K::all().into_iter().filter(|x| x.entry().info.supported(&f).is_ok()) {
            let mut dst = vec![zero; 2 * n];
            other.compute(&lhs, &packed, &mut dst, Clamp::NONE, seq).unwrap();
            let d = f32s(&dst);
            assert!(d[..n].iter().all(|&y| y == 1.5) && d[n..].iter().all(|&y| y == 0.75), "{d:?}");
        }
        // Same k, other chunking: refused.
        let p2 = k1.pack_rhs(&w, 3, 2).unwrap();
        let mut dst = vec![zero; 2 * n];
        let r = k1.compute(&lhs, &p2, &mut dst, Clamp::NONE, seq);
        assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{r:?}");
    }

    /// Bad operands of a float family are errors.
    pub(crate) fn float_bad_input<K: FloatKernel>(reference: Reference<K::Elem>) {
        let f = Features::current();
        let kern = crate::testing::or_skip!(K::select(4, &f));
        let zero = K::Elem::ZERO;
        let data = vec![zero; 4 * 6];
        let w = FloatWeights { n: 4, k: 6, order: Order::NxK, data: &data, bias: None };
        assert!(kern.pack_rhs(&w, 4, 2).is_err(), "k mismatch");
        assert!(kern.pack_rhs(&w, 0, 6).is_err(), "zero chunks");
        let packed = kern.pack_rhs(&w, 2, 3).unwrap();
        let src = [zero; 6];
        let ok = [Some(0), Some(3)];
        let lhs = Indirection { m: 1, k_chunk_count: 2, k_chunk_length: 3, src: &src, chunks: &ok, pad: zero };
        let mut dst = vec![zero; 4];
        let run = |lhs: &Indirection<'_, K::Elem>, dst: &mut [K::Elem], clamp| {
            kern.compute(lhs, &packed, dst, clamp, Parallelism::Sequential)
        };
        run(&lhs, &mut dst, Clamp::NONE).unwrap();
        assert!(run(&lhs, &mut dst[..3], Clamp::NONE).is_err(), "short dst");
        for outside in [[Some(0), Some(4)], [Some(4), Some(0)]] {
            let bad = Indirection { chunks: &outside, ..lhs };
            assert!(run(&bad, &mut dst, Clamp::NONE).is_err(), "chunk outside src");
        }
        let bad = [
            (Indirection { chunks: &ok[..1], ..lhs }, "short table"),
            (Indirection { m: 0, ..lhs }, "m = 0"),
            (Indirection { m: usize::MAX / 2, ..lhs }, "overflow"),
            (Indirection { k_chunk_count: 1 << 33, ..lhs }, "chunk count past u32"),
        ];
        for (bad, what) in bad {
            assert!(run(&bad, &mut dst, Clamp::NONE).is_err(), "{what}");
        }
        assert!(run(&lhs, &mut dst, Clamp { min: 2.0, max: 1.0 }).is_err(), "empty clamp");
        assert!(reference(&lhs, &FloatWeights { k: 5, data: &data[..20], ..w }, Clamp::NONE, &mut dst).is_err());
    }

    /// The tests of a float family (`conformance`,
    /// `mixing_layouts_is_an_error`, `bad_input_is_an_error` in its module
    /// `tests`) over its `Kernel`, `reference` and `FAMILY`.
    macro_rules! float_tests {
        (seed: $seed:expr, pad: $pad:expr, tol: $tol:expr) => {
            mod tests {
                use super::*;
                use $crate::families::indirect::test_support as ts;

                #[test]
                fn conformance() {
                    ts::float_conformance::<Kernel>(FAMILY, $seed, $pad, reference, $tol);
                }

                #[test]
                fn mixing_layouts_is_an_error() {
                    ts::float_mixing_layouts::<Kernel>();
                }

                #[test]
                fn bad_input_is_an_error() {
                    ts::float_bad_input::<Kernel>(reference);
                }
            }
        };
    }
    pub(crate) use float_tests;
}
