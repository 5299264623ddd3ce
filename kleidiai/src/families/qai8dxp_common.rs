//! What the families with a dynamically quantised int8 LHS (`qai8dxp`) and
//! per-channel weights share (`matmul_clamp_{f16,bf16}_qai8dxp_qsi4cxp`,
//! `matmul_clamp_{f32,f16}_qai8dxp_qsi8cxp`, `matmul_clamp_f32_qai8dxp_qsu2cxp`):
//! the reference arithmetic, and on aarch64 the kernel glue (RHS packing per
//! packed format, LHS quantisation per input type, the tiled threaded run,
//! packed-row unpacking). Each family module adds its kernel list, its
//! docs and its tests; [`qai8dxp_kernel!`] gives each a typed `Kernel`.
//!
//! Every family computes, per output element,
//! `clamp(acc * (rhs_scale[j] * lhs_recip_scale[i]) + bias[j])` with
//! `acc = sum_k (q[i][k] - zp[i]) * w[j][k]` exact in int32, in the kernels'
//! order of float operations, then converts to the output type (round to
//! nearest even for f16 and bf16, as `fcvtn`/`bfcvtn` do).

use crate::error::{self, Result};
#[cfg(target_arch = "aarch64")]
use crate::families::engine::LhsPacker;
use crate::families::float_common::check_reference_operands;
use crate::formats::{Int4PerChannel, Int8PerChannel, UInt2PerChannel};
use crate::packed::Clamp;
use crate::quant::{Qai8dxF16Block, Qai8dxRow, qai8dx_row, qai8dx_rows_bf16, qai8dx_rows_f16};
use half::{bf16, f16};

/// The weights of any of the families' input formats.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Weights<'a> {
    Int4(Int4PerChannel<'a>),
    Int8(Int8PerChannel<'a>),
    UInt2(UInt2PerChannel<'a>),
}

impl Weights<'_> {
    pub(crate) fn validate(&self) -> Result<()> {
        match self {
            Weights::Int4(w) => w.validate(),
            Weights::Int8(w) => w.validate(),
            Weights::UInt2(w) => w.validate(),
        }
    }

    pub(crate) fn shape(&self) -> (usize, usize) {
        match self {
            Weights::Int4(w) => (w.n, w.k),
            Weights::Int8(w) => (w.n, w.k),
            Weights::UInt2(w) => (w.n, w.k),
        }
    }

    fn scales_bias(&self) -> (&[f32], Option<&[f32]>) {
        match self {
            Weights::Int4(w) => (w.scales, w.bias),
            Weights::Int8(w) => (w.scales, w.bias),
            Weights::UInt2(w) => (w.scales, w.bias),
        }
    }

    /// The integer weight `(n, k)` the kernels multiply with (after
    /// `validate`).
    fn value(&self, n: usize, k: usize) -> i32 {
        match self {
            Weights::Int4(w) => w.value_unchecked(n, k) as i32,
            Weights::Int8(w) => w.value_unchecked(n, k) as i32,
            Weights::UInt2(w) => w.lut[w.code_unchecked(n, k) as usize] as i32,
        }
    }
}

/// An LHS element type with its `qai8dx` packer (each is an output type
/// too, whose `from_f32` and `to_f32` make and check test data).
pub(crate) trait LhsElem: OutElem + Default {
    /// Quantises `m x k` dense rows exactly as this type's packer does, as
    /// called by [`Entry::pack_lhs_into`], for a kernel whose blocks are
    /// `block` values long (which only the f16 packer depends on).
    fn quantize_rows(lhs: &[Self], m: usize, k: usize, block: Qai8dxF16Block) -> Vec<Qai8dxRow>;

    /// Whether the packer must be called one row at a time (its multi-row
    /// path is wrong).
    #[cfg(target_arch = "aarch64")]
    const ROW_BY_ROW: bool = false;

    /// Upstream packer name.
    #[cfg(target_arch = "aarch64")]
    const PACKER: &'static str;

    /// Checks the packer's preconditions on `kr` and `sr`.
    #[cfg(target_arch = "aarch64")]
    fn check_block(kr: usize, sr: usize) -> Result<()> {
        error::multiple_of(kr, sr, "kr", "sr must divide kr")
    }

    /// The packer's run, size and offset queries.
    #[cfg(target_arch = "aarch64")]
    const LHS: LhsPacker;
}

impl LhsElem for f32 {
    fn quantize_rows(lhs: &[f32], m: usize, k: usize, _: Qai8dxF16Block) -> Vec<Qai8dxRow> {
        lhs.chunks_exact(k).take(m).map(qai8dx_row).collect()
    }

    #[cfg(target_arch = "aarch64")]
    const PACKER: &'static str = "kai_lhs_quant_pack_qai8dxp_f32";

    #[cfg(target_arch = "aarch64")]
    const LHS: LhsPacker = crate::families::engine::lhs_packers::QAI8DXP_F32;
}

impl LhsElem for f16 {
    fn quantize_rows(lhs: &[f16], m: usize, k: usize, block: Qai8dxF16Block) -> Vec<Qai8dxRow> {
        qai8dx_rows_f16(lhs, m, k, block)
    }

    // The four-rows-at-once path (mr 4) truncates, and with blocks of 4 adds
    // the zero point of another row to half the values (v1.30.0); the
    // one-row path is right.
    #[cfg(target_arch = "aarch64")]
    const ROW_BY_ROW: bool = true;

    #[cfg(target_arch = "aarch64")]
    const PACKER: &'static str = "kai_lhs_quant_pack_qai8dxp_f16_neon";

    #[cfg(target_arch = "aarch64")]
    fn check_block(kr: usize, sr: usize) -> Result<()> {
        error::multiple_of(kr, sr, "kr", "sr must divide kr")?;
        if kr / sr != 4 && kr / sr != 8 {
            return Err(crate::Error::bad_value("kr / sr", kr / sr, format!("{} takes 4 or 8", Self::PACKER)));
        }
        Ok(())
    }

    #[cfg(target_arch = "aarch64")]
    const LHS: LhsPacker = crate::families::engine::lhs_packers::QAI8DXP_F16;
}

impl LhsElem for bf16 {
    fn quantize_rows(lhs: &[bf16], m: usize, k: usize, _: Qai8dxF16Block) -> Vec<Qai8dxRow> {
        qai8dx_rows_bf16(lhs, m, k)
    }

    #[cfg(target_arch = "aarch64")]
    const PACKER: &'static str = "kai_lhs_quant_pack_qai8dxp_bf16_neon";

    #[cfg(target_arch = "aarch64")]
    fn check_block(kr: usize, sr: usize) -> Result<()> {
        error::multiple_of(kr, sr, "kr", "sr must divide kr")?;
        if kr / sr != 8 {
            return Err(crate::Error::bad_value("kr / sr", kr / sr, format!("{} takes 8", Self::PACKER)));
        }
        Ok(())
    }

    #[cfg(target_arch = "aarch64")]
    const LHS: LhsPacker = crate::families::engine::lhs_packers::QAI8DXP_BF16;
}

/// An output element type: f32, or f16 / bf16 rounded to nearest even from
/// the f32 result.
pub(crate) trait OutElem: Copy + Send + Sync + 'static {
    fn from_f32(y: f32) -> Self;
    #[cfg(test)]
    fn to_f32(self) -> f32;
    /// Relative rounding step of the type (0 for f32: no extra rounding).
    #[cfg(test)]
    const STEP: f32;
}

impl OutElem for f32 {
    fn from_f32(y: f32) -> f32 {
        y
    }
    #[cfg(test)]
    fn to_f32(self) -> f32 {
        self
    }
    #[cfg(test)]
    const STEP: f32 = 0.0;
}

impl OutElem for f16 {
    fn from_f32(y: f32) -> f16 {
        f16::from_f32(y)
    }
    #[cfg(test)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[cfg(test)]
    const STEP: f32 = 1.0 / 1024.0;
}

impl OutElem for bf16 {
    fn from_f32(y: f32) -> bf16 {
        bf16::from_f32(y)
    }
    #[cfg(test)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[cfg(test)]
    const STEP: f32 = 1.0 / 128.0;
}

/// The families' math in scalar Rust: `dst (m x n) = clamp(lhs (m x k) · wᵀ
/// + bias)`, the LHS quantised exactly as its packer does (`block`: see
/// [`LhsElem::quantize_rows`]).
pub(crate) fn reference<L: LhsElem, O: OutElem>(
    m: usize,
    lhs: &[L],
    w: Weights<'_>,
    clamp: Clamp,
    block: Qai8dxF16Block,
    dst: &mut [O],
) -> Result<()> {
    let (n, k) = check_reference_operands(w.validate().map(|()| w.shape()), clamp, m, lhs.len(), dst.len())?;
    // Checked not to overflow by `check_reference_operands`.
    let mk = m * k;
    let nk = error::mul(n, k, "weights")?;
    let wq: Vec<i32> = (0..nk).map(|i| w.value(i / k, i % k)).collect();
    let (scales, bias) = w.scales_bias();
    let rows = L::quantize_rows(&lhs[..mk], m, k, block);
    for (i, row) in rows.iter().enumerate() {
        for j in 0..n {
            // Wrapping like the kernels' int32 accumulators (exact for any
            // k below 65,793).
            let acc = row
                .q
                .iter()
                .zip(&wq[j * k..(j + 1) * k])
                .fold(0i32, |a, (&q, &w)| a.wrapping_add((q as i32 - row.zero_point).wrapping_mul(w)));
            let mut y = acc as f32 * (scales[j] * row.recip_scale);
            if let Some(b) = bias {
                y += b[j];
            }
            dst[i * n + j] = O::from_f32(y.max(clamp.min).min(clamp.max));
        }
    }
    Ok(())
}

/// A family module with per-channel weights `$w` (a type in scope):
/// `FAMILY` (the upstream directory `$family`), `reference` (documented by
/// the given doc comment; with `($block: $bt)` it also takes the f16
/// packer's block length), and on aarch64 `entries()` (each kernel of the
/// family's upstream table made by `$entry`, a closure over `&(ukernel,
/// interface)` with `Entry`, `RhsFormat`, `CpuFeature` and `fns!` in scope),
/// the `Kernel` of [`qai8dxp_kernel!`] and, with a block, `Kernel::lhs_block`.
/// Its tests: those of `family_tests!` (conformance for each `k` of
/// `conformance_ks`) and `matmul_matches_reference` for each `m` of
/// `matmul_rows`, with the weights `matmul_weights` over the values
/// `matmul_data` (named by the ident before `=`), outputs compared by
/// `matmul_close(got, want)`.
macro_rules! qai8dxp_family {
    (
        family: $family:ident,
        lhs: $lhs:ty,
        out: $out:ty,
        weights: $w:ident,
        $(#[$doc:meta])*
        reference $(($block:ident: $bt:ty))?,
        entry: $entry:expr,
        tests: {
            conformance_ks: $ks:expr,
            matmul_rows: $ms:expr,
            matmul_data: $d:ident = $data:expr,
            matmul_weights: $wexpr:expr,
            matmul_close: $close:expr $(,)?
        } $(,)?
    ) => {
        use $crate::error::Result;
        use $crate::packed::Clamp;

        /// Upstream family directory.
        pub const FAMILY: &str = stringify!($family);

        $(#[$doc])*
        pub fn reference(
            m: usize,
            lhs: &[$lhs],
            w: &$w<'_>,
            clamp: Clamp,
            $($block: $bt,)?
            dst: &mut [$out],
        ) -> Result<()> {
            let block = $crate::families::qai8dxp_common::qai8dxp_family!(@block $($block)?);
            $crate::families::qai8dxp_common::reference(m, lhs, (*w).into(), clamp, block, dst)
        }

        #[cfg(target_arch = "aarch64")]
        pub use imp::*;

        #[cfg(target_arch = "aarch64")]
        mod imp {
            use super::*;
            #[allow(unused_imports)] // the families whose entries need no feature
            use $crate::cpu::CpuFeature;
            use $crate::families::qai8dxp_common::{Entry, RhsFormat, fns};

            $crate::families::qai8dxp_common::entries!(kleidiai_sys::interfaces::$family::KERNELS, $entry);
            $crate::families::qai8dxp_common::qai8dxp_kernel!(lhs: $lhs, out: $out, weights: $w);
            $crate::families::qai8dxp_common::qai8dxp_family!(@lhs_block $($bt)?);
        }

        #[cfg(all(test, target_arch = "aarch64"))]
        mod tests {
            use super::*;
            use $crate::families::qai8dxp_common::tests as common;
            #[allow(unused_imports)] // the weights of some families need neither
            use $crate::formats::{Int4Encoding, Order};

            common::family_tests!($lhs, $out, &$ks);

            #[test]
            fn matmul_matches_reference() {
                let f = $crate::cpu::Features::current();
                for m in $ms {
                    let kern = crate::testing::or_skip!(Kernel::select(m, &f));
                    let $d: Vec<_> = $data.collect();
                    let w = $wexpr;
                    let packed = kern.pack_rhs(&w).unwrap();
                    let seq = $crate::Parallelism::Sequential;
                    common::matmul_matches_reference(
                        (m, w.n, w.k),
                        |x, y| kern.matmul(m, x, &packed, y, Clamp::NONE, seq),
                        $crate::families::qai8dxp_common::qai8dxp_family!(@reference kern, m, w $(, $block)?),
                        $close,
                    );
                }
            }
        }
    };
    (@reference $kern:ident, $m:ident, $w:ident) => {
        |x, y| reference($m, x, &$w, Clamp::NONE, y)
    };
    (@reference $kern:ident, $m:ident, $w:ident, $block:ident) => {
        |x, y| reference($m, x, &$w, Clamp::NONE, $kern.lhs_block().unwrap(), y)
    };
    (@block) => {
        Default::default()
    };
    (@block $block:ident) => {
        $block
    };
    (@lhs_block) => {};
    (@lhs_block $bt:ty) => {
        impl Kernel {
            /// The block length the f16 LHS packer rounds by for this kernel:
            /// pass it to [`reference()`] to reproduce this kernel exactly.
            pub fn lhs_block(&self) -> Result<$bt> {
                self.0.f16_block()
            }
        }
    };
}
pub(crate) use qai8dxp_family;

#[cfg(target_arch = "aarch64")]
pub(crate) use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::buffer::AlignedBuf;
    use crate::cpu::CpuFeature;
    use crate::families::engine::{self, Gate, Tiles, query};
    use crate::formats::Order;
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::info::{KernelInfo, VectorLength, rank_for, tile_kind_for};
    use core::ffi::c_void;
    use kleidiai_sys as sys;

    type Getter = unsafe extern "C" fn() -> usize;
    pub(crate) type Offset = unsafe extern "C" fn(usize, usize) -> usize;
    type RunF32 = engine::RunPlain<f32>;
    type RunHalf = engine::RunPlain<c_void>;
    type RunLut = engine::RunLut;

    /// A kernel's run function, by output type.
    #[derive(Clone, Copy)]
    pub(crate) enum Run {
        /// f32 output.
        F32(RunF32),
        /// f16 or bf16 output (2 bytes).
        Half(RunHalf),
        /// f32 output, with the 2-bit code look-up table.
        F32Lut(RunLut),
    }

    impl Run {
        fn dst_bytes(self) -> usize {
            match self {
                Run::Half(_) => 2,
                Run::F32(_) | Run::F32Lut(_) => 4,
            }
        }
    }

    /// The functions of one kernel (its upstream interface struct, without
    /// the family-specific types): `O` is the RHS offset function, `R` the
    /// run function (the qsi4c32p families' take the block length too).
    #[derive(Clone, Copy)]
    pub(crate) struct Fns<O = Offset, R = Run> {
        pub m_step: Getter,
        pub n_step: Getter,
        pub mr: Getter,
        pub nr: Getter,
        pub kr: Getter,
        pub sr: Getter,
        pub lhs_offset: Offset,
        pub rhs_offset: O,
        pub run: R,
    }

    impl<O, R> Fns<O, R> {
        /// The kernel's tiles and the CPU's features, or an error if the CPU
        /// does not run the kernel `info` describes.
        pub(crate) fn tiles(&self, info: &KernelInfo) -> Result<(Tiles, Gate)> {
            let g = engine::ensure_supported(info)?;
            Ok((g.tiles([self.m_step, self.n_step, self.mr, self.nr, self.kr, self.sr]), g))
        }
    }

    /// [`Fns`] from a family's generated interface struct; `$run` is the
    /// [`Run`] variant matching its `run_matmul` signature (`@run`: the
    /// constructor of another run type).
    macro_rules! fns {
        ($i:expr, $run:ident) => {
            $crate::families::qai8dxp_common::fns!(@run $i, $crate::families::qai8dxp_common::Run::$run)
        };
        (@run $i:expr, $run:expr) => {
            $crate::families::engine::iface_fns!([$crate::families::qai8dxp_common::Fns], $i, $run)
        };
    }
    pub(crate) use fns;

    /// The packed RHS formats of these families.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum RhsFormat {
        /// Int4, `kai_rhs_pack_{nxk,kxn}_qsi4cxp_qs4cxs1s0`.
        Qsi4cxp,
        /// Int4 for the SME2 kernels, `kai_rhs_pack_nxk_qsi4cxps1s0_qsu4cxs1s0_neon`.
        Qsi4cxps1s0,
        /// Int8, `kai_rhs_pack_{nxk,kxn}_qsi8cxp_qsi8cx_neon` (LHS zero point 1).
        Qsi8cxp,
        /// 2-bit for NEON, `kai_rhs_pack_nxk_qsu2cxp4x4bf32sf32_qsu2cx_neon`.
        Qsu2cxp4x4,
        /// 2-bit for SME2, `kai_rhs_pack_nxk_qsu2cxp4vlx4_qsu2cx_neon`.
        Qsu2cxp4vlx4,
    }

    /// Bytes after a 2-bit packed RHS holding its look-up table: 16 i32
    /// (4 used), because the SME2 kernels load 64 bytes into ZT0.
    const LUT_BYTES: usize = 64;

    impl RhsFormat {
        const ALL: [RhsFormat; 5] = [
            RhsFormat::Qsi4cxp,
            RhsFormat::Qsi4cxps1s0,
            RhsFormat::Qsi8cxp,
            RhsFormat::Qsu2cxp4x4,
            RhsFormat::Qsu2cxp4vlx4,
        ];

        /// [`PackedLayout::format`] of the format. The int4 ids are those of
        /// `matmul_clamp_f32_qai8dxp_qsi4cxp` (same packers, same bytes).
        pub(crate) fn id(self) -> &'static str {
            match self {
                RhsFormat::Qsi4cxp => "qsi4cxp",
                RhsFormat::Qsi4cxps1s0 => "qsi4cxps1s0",
                RhsFormat::Qsi8cxp => "qsi8cxp",
                RhsFormat::Qsu2cxp4x4 => "qsu2cxp4x4bf32sf32",
                RhsFormat::Qsu2cxp4vlx4 => "qsu2cxp4vlx4",
            }
        }

        fn from_id(id: &str) -> Option<RhsFormat> {
            Self::ALL.into_iter().find(|f| f.id() == id)
        }

        /// Upstream packers (N x K first).
        pub(crate) fn packers(self) -> &'static [&'static str] {
            match self {
                RhsFormat::Qsi4cxp => &["kai_rhs_pack_nxk_qsi4cxp_qs4cxs1s0", "kai_rhs_pack_kxn_qsi4cxp_qs4cxs1s0"],
                RhsFormat::Qsi4cxps1s0 => &["kai_rhs_pack_nxk_qsi4cxps1s0_qsu4cxs1s0_neon"],
                RhsFormat::Qsi8cxp => &["kai_rhs_pack_nxk_qsi8cxp_qsi8cx_neon", "kai_rhs_pack_kxn_qsi8cxp_qsi8cx_neon"],
                RhsFormat::Qsu2cxp4x4 => &["kai_rhs_pack_nxk_qsu2cxp4x4bf32sf32_qsu2cx_neon"],
                RhsFormat::Qsu2cxp4vlx4 => &["kai_rhs_pack_nxk_qsu2cxp4vlx4_qsu2cx_neon"],
            }
        }

        /// Whether weights stored in `order` have a packer for this format.
        pub(crate) fn takes(self, order: Order) -> bool {
            order == Order::NxK || matches!(self, RhsFormat::Qsi4cxp | RhsFormat::Qsi8cxp)
        }

        pub(crate) fn is_2bit(self) -> bool {
            matches!(self, RhsFormat::Qsu2cxp4x4 | RhsFormat::Qsu2cxp4vlx4)
        }

        /// Bytes of the packed `n x k` weights (without the 2-bit formats'
        /// table), from checked arithmetic.
        fn layout_size(self, n: usize, k: usize, nr: usize) -> Result<usize> {
            let k_internal = roundup(k, 32, "k")?;
            let per_row = match self {
                RhsFormat::Qsi4cxp | RhsFormat::Qsi4cxps1s0 => k_internal / 2,
                RhsFormat::Qsi8cxp => k_internal,
                RhsFormat::Qsu2cxp4x4 | RhsFormat::Qsu2cxp4vlx4 => k_internal / 4,
            } + 12;
            error::mul(roundup(n, nr, "n")?, per_row, "packed rhs")
        }

        /// [`layout_size`](Self::layout_size), which must agree with the
        /// packer's own query (asked through the gate `g` of a kernel that
        /// reads this format).
        #[allow(clippy::too_many_arguments)]
        fn checked_size(self, g: &Gate, n: usize, k: usize, nr: usize, kr: usize, sr: usize) -> Result<usize> {
            let size = self.layout_size(n, k, nr)?;
            let query = self.packer_size(g, n, k, nr, kr, sr);
            if query != size {
                return Err(crate::Error::PackerMismatch {
                    kernel: self.id(),
                    why: format!("packer size {query} differs from the layout's {size}"),
                });
            }
            Ok(size)
        }

        /// The packer's size query for `n x k` weights, through the gate of
        /// a kernel that reads this format.
        fn packer_size(self, g: &Gate, n: usize, k: usize, nr: usize, kr: usize, sr: usize) -> usize {
            query!(g, self.size_query(), n, k, nr, kr, sr)
        }

        /// The packer's size query.
        fn size_query(self) -> Int4PackedSize {
            match self {
                RhsFormat::Qsi4cxp => sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4cxp_qs4cxs1s0,
                RhsFormat::Qsi4cxps1s0 => sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4cxps1s0_qsu4cxs1s0_neon,
                RhsFormat::Qsi8cxp => sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi8cxp_qsi8cx_neon,
                RhsFormat::Qsu2cxp4x4 => sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsu2cxp4x4bf32sf32_qsu2cx_neon,
                RhsFormat::Qsu2cxp4vlx4 => sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsu2cxp4vlx4_qsu2cx_neon,
            }
        }
    }

    /// Packs the layout's `rows x k` values of `lhs` (rows `lhs_stride`
    /// values apart) with `L`'s packer into `out` (reset to `layout` and the
    /// packer's size), the row blocks split over `par`, for the kernel
    /// `info` whose gate `g` is: every packing of a qai8dxp LHS. Checks the
    /// rows lie inside `lhs`, the blocks meet the packer's rules
    /// ([`LhsElem::check_block`]) and its size query agrees with checked
    /// arithmetic (`k` padded to 32 plus a zero point and a scale per row,
    /// for every row of the padded row blocks) before it packs.
    pub(crate) fn pack_lhs_rows<L: LhsElem>(
        g: &Gate,
        info: &KernelInfo,
        layout: PackedLayout,
        lhs: &[L],
        lhs_stride: usize,
        par: Parallelism,
        out: &mut PackedLhs,
    ) -> Result<()> {
        let (m, k, mr, kr, sr) = (layout.rows, layout.k, layout.r, layout.kr, layout.sr);
        engine::check_lhs_rows(m, k, lhs.len(), lhs_stride)?;
        error::mul(lhs_stride, core::mem::size_of::<L>(), "lhs stride")?;
        L::check_block(kr, sr)?;
        // Reject a size the packer's query would wrap.
        let per_row = roundup(k, 32, "k")?.checked_add(8).ok_or_else(|| crate::Error::Overflow("k".into()))?;
        let size = error::mul(roundup(m, mr, "m")?, per_row, "packed lhs")?;
        if L::LHS.size(g, m, k, 0, (mr, kr, sr)) != size {
            return Err(crate::Error::PackerMismatch { kernel: L::PACKER, why: "unexpected packed size".into() });
        }
        out.reset(layout, size);
        let x = engine::LhsSource { src: lhs, stride: lhs_stride, m, k, bl: 0, blocking: (mr, kr, sr) };
        let calls = if L::ROW_BY_ROW { engine::LhsCalls::RowByRow } else { engine::LhsCalls::Blocks };
        engine::pack_lhs(g, info, &L::LHS, x, calls, out.data_mut().as_mut_slice(), par)?;
        Ok(())
    }

    /// An int4 per-channel RHS packer's size query.
    pub(crate) type Int4PackedSize = engine::RhsSizeNkBlocks;
    type Int4PackRun = engine::PackChannel<u8, sys::kai_rhs_pack_qs4cxs1s0_param>;

    /// Upstream's packer of int4 per-channel weights in `order` for `format`
    /// (`Qsi4cxp`: N x K or K x N; `Qsi4cxps1s0`: N x K): its size query,
    /// run function and the order it reads.
    pub(crate) fn int4_per_channel_packer(format: RhsFormat, order: Order) -> (Int4PackedSize, Int4PackRun, Order) {
        match (format, order) {
            (RhsFormat::Qsi4cxp, Order::NxK) => (
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4cxp_qs4cxs1s0,
                sys::kai_run_rhs_pack_nxk_qsi4cxp_qs4cxs1s0,
                Order::NxK,
            ),
            (RhsFormat::Qsi4cxp, Order::KxN) => (
                sys::kai_get_rhs_packed_size_rhs_pack_kxn_qsi4cxp_qs4cxs1s0,
                sys::kai_run_rhs_pack_kxn_qsi4cxp_qs4cxs1s0,
                Order::KxN,
            ),
            _ => (
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4cxps1s0_qsu4cxs1s0_neon,
                sys::kai_run_rhs_pack_nxk_qsi4cxps1s0_qsu4cxs1s0_neon,
                Order::NxK,
            ),
        }
    }

    /// Packs int4 per-channel weights for `format` with
    /// [`int4_per_channel_packer`]`(format, w.order)` (LHS zero point 1,
    /// the weights' own zero point) into a buffer of the packer's size. The
    /// caller has checked `nr`, `kr` and `sr` are the blocks of a kernel
    /// reading `format` (whose gate `g` is), with kr % sr == 0.
    pub(crate) fn pack_int4_per_channel(
        g: &Gate,
        format: RhsFormat,
        w: &Int4PerChannel<'_>,
        blocking: engine::Blocking,
    ) -> Result<AlignedBuf> {
        let (size, run, order) = int4_per_channel_packer(format, w.order);
        let params =
            sys::kai_rhs_pack_qs4cxs1s0_param { lhs_zero_point: 1, rhs_zero_point: w.encoding.rhs_zero_point() };
        engine::pack_rhs_per_channel(g, size, engine::ChannelWeights::Int4(w, run, params), order, blocking, 0)
    }

    /// `x` rounded up to a multiple of `to`, or an overflow error.
    fn roundup(x: usize, to: usize, what: &str) -> Result<usize> {
        error::mul(x.div_ceil(to.max(1)), to.max(1), what)
    }

    /// One kernel of a family: registry data, functions, packed RHS format.
    pub(crate) struct Entry {
        pub info: KernelInfo,
        pub(crate) fns: Fns,
        pub rhs: RhsFormat,
        /// The kernel assumes `m == 1` per call (`run` passes rows singly).
        one_row: bool,
    }

    /// `base` plus `extra`, as a static slice (leaked once per kernel table).
    fn with_features(base: &'static [CpuFeature], extra: &[CpuFeature]) -> &'static [CpuFeature] {
        if extra.iter().all(|f| base.contains(f)) {
            return base;
        }
        let mut v = base.to_vec();
        v.extend(extra.iter().filter(|f| !base.contains(f)));
        Box::leak(v.into_boxed_slice())
    }

    impl Entry {
        /// The entry of kernel `u` with LHS type `L`. `extra` lists features
        /// the LHS packer needs beyond the kernel's; `one_row` marks kernels
        /// whose run function assumes a single row.
        pub(crate) fn new<L: LhsElem>(
            u: &'static sys::Ukernel,
            fns: Fns,
            rhs: RhsFormat,
            extra: &[CpuFeature],
            one_row: bool,
        ) -> Entry {
            let features = with_features(u.features, extra);
            Entry {
                info: KernelInfo {
                    name: u.name,
                    family: u.family,
                    features,
                    vector_length: VectorLength::Any,
                    tile: tile_kind_for(u.name),
                    lhs_packer: Some(L::PACKER),
                    rhs_packers: rhs.packers(),
                    rank: rank_for(u.name, features),
                },
                fns,
                rhs,
                one_row,
            }
        }

        pub(crate) fn tiles(&self) -> Result<(Tiles, Gate)> {
            self.fns.tiles(&self.info)
        }

        pub(crate) fn rhs_layout(&self, n: usize, k: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(f.layout(&self.info, self.rhs.id(), (n, k, 0), t.nr, &t))
        }

        pub(crate) fn lhs_layout(&self, m: usize, k: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(f.layout(&self.info, "qai8dxp", (m, k, 0), t.mr, &t))
        }

        /// The block length the f16 LHS packer rounds by for this kernel.
        pub(crate) fn f16_block(&self) -> Result<Qai8dxF16Block> {
            let (t, _) = self.tiles()?;
            Ok(if t.kr == 4 * t.sr { Qai8dxF16Block::Four } else { Qai8dxF16Block::Eight })
        }

        pub(crate) fn pack_rhs(&self, w: Weights<'_>) -> Result<PackedRhs> {
            w.validate()?;
            let (n, k) = w.shape();
            let layout = self.rhs_layout(n, k)?;
            let g = engine::ensure_supported(&self.info)?;
            let (nr, kr, sr) = (layout.r, layout.kr, layout.sr);
            error::multiple_of(kr, sr, "kr", "sr must divide kr")?;
            let wrong = |what: &str| crate::Error::WrongFamily {
                kernel: self.info.name,
                why: format!("its packed format {} does not take {what} weights", self.rhs.id()),
            };
            let order_ok = |order: Order| {
                if self.rhs.takes(order) {
                    Ok(())
                } else {
                    Err(crate::Error::WrongFamily {
                        kernel: self.info.name,
                        why: format!("has no upstream packer for {order:?} weights (use N x K)"),
                    })
                }
            };
            let size = self.rhs.checked_size(&g, n, k, nr, kr, sr)?;
            let mut buf;
            match (self.rhs, w) {
                (RhsFormat::Qsi4cxp | RhsFormat::Qsi4cxps1s0, Weights::Int4(w)) => {
                    order_ok(w.order)?;
                    // k_internal (a multiple of 32) must be a multiple of kr.
                    error::multiple_of(32, kr, "32", "the int4 packers' k rounding")?;
                    // `size` is the packer's own query for (n, k, nr, kr, sr)
                    // (checked_size), the kernel's blocks; kr % sr == 0 and
                    // k_internal (a multiple of 32) is a multiple of kr
                    // (checked above); the format takes the order (order_ok).
                    buf = pack_int4_per_channel(&g, self.rhs, &w, (nr, kr, sr))?;
                    debug_assert_eq!(buf.len(), size);
                }
                (RhsFormat::Qsi8cxp, Weights::Int8(w)) => {
                    order_ok(w.order)?;
                    if sr != 1 {
                        return Err(crate::Error::bad_value(
                            "sr",
                            sr,
                            format!("{}: the qsi8cxp packers need sr 1", self.info.name),
                        ));
                    }
                    let params = sys::kai_rhs_pack_qsi8cx_params { lhs_zero_point: 1, scale_multiplier: 1.0 };
                    let run = match w.order {
                        Order::NxK => sys::kai_run_rhs_pack_nxk_qsi8cxp_qsi8cx_neon,
                        Order::KxN => sys::kai_run_rhs_pack_kxn_qsi8cxp_qsi8cx_neon,
                    };
                    // sr == 1 (checked), the kernel's blocks; the size query
                    // is the N x K packer's, which `checked_size` compared.
                    let weights = engine::ChannelWeights::Int8(&w, run, params);
                    buf = engine::pack_rhs_per_channel(&g, self.rhs.size_query(), weights, w.order, (nr, kr, sr), 0)?;
                }
                (RhsFormat::Qsu2cxp4x4 | RhsFormat::Qsu2cxp4vlx4, Weights::UInt2(w)) => {
                    error::multiple_of(k, 32, "k", "2-bit packers and kernels")?;
                    if w.lut.iter().any(|v| !(-64..=63).contains(v)) {
                        // The packers add two entries in int8 for the sums.
                        return Err(crate::Error::bad_value(
                            "2-bit look-up table",
                            format!("{:?}", w.lut),
                            "entries must lie in -64..=63",
                        ));
                    }
                    if kr != 4 * sr {
                        return Err(crate::Error::bad_value(
                            "kr / sr",
                            format!("{kr} / {sr}"),
                            format!("{} takes 4", self.info.name),
                        ));
                    }
                    match self.rhs {
                        RhsFormat::Qsu2cxp4x4 if nr != 4 => {
                            return Err(crate::Error::bad_value("nr", nr, format!("{} takes 4", self.info.name)));
                        }
                        RhsFormat::Qsu2cxp4vlx4 => error::multiple_of(nr, 8, "nr", "2-bit SME packer")?,
                        _ => {}
                    }
                    let lut = lut_words(w.lut);
                    let params = sys::kai_rhs_pack_qs4cxs1s0_param { lhs_zero_point: 1, rhs_zero_point: 2 };
                    let run = if self.rhs == RhsFormat::Qsu2cxp4x4 {
                        sys::kai_run_rhs_pack_nxk_qsu2cxp4x4bf32sf32_qsu2cx_neon
                    } else {
                        sys::kai_run_rhs_pack_nxk_qsu2cxp4vlx4_qsu2cx_neon
                    };
                    // kr / sr == 4, nr == 4 (NEON) or a multiple of 8 (SME)
                    // (checked above); the table after the packer's size.
                    let weights = engine::ChannelWeights::UInt2(&w, run, params, lut);
                    buf = engine::pack_rhs_per_channel(
                        &g,
                        self.rhs.size_query(),
                        weights,
                        Order::NxK,
                        (nr, kr, sr),
                        LUT_BYTES,
                    )?;
                    for (i, v) in lut.iter().enumerate() {
                        buf.as_mut_slice()[size + 4 * i..size + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
                    }
                }
                (_, Weights::Int4(_)) => return Err(wrong("int4")),
                (_, Weights::Int8(_)) => return Err(wrong("int8")),
                (_, Weights::UInt2(_)) => return Err(wrong("2-bit")),
            }
            Ok(PackedRhs::new(layout, buf))
        }

        pub(crate) fn pack_lhs_into<L: LhsElem>(
            &self,
            m: usize,
            k: usize,
            lhs: &[L],
            lhs_stride: usize,
            par: Parallelism,
            out: &mut PackedLhs,
        ) -> Result<()> {
            engine::check_lhs_rows(m, k, lhs.len(), lhs_stride)?;
            error::mul(lhs_stride, core::mem::size_of::<L>(), "lhs stride")?;
            let layout = self.lhs_layout(m, k)?;
            let g = engine::ensure_supported(&self.info)?;
            pack_lhs_rows(&g, &self.info, layout, lhs, lhs_stride, par, out)
        }

        /// Every check [`pack_lhs_into`](Self::pack_lhs_into) and
        /// [`run`](engine::PackedKernel::run) make for a dense `m x k` LHS of `L`, `rhs` and
        /// outputs of `O`, made once (the steady-state path of
        /// `PackedWeights::matmul`). `None` where the checked path does
        /// more than one packer call (row-by-row packers) or needs a table
        /// (2-bit weights).
        pub(crate) fn prepare<L: LhsElem, O: OutElem>(
            &self,
            m: usize,
            rhs: &PackedRhs,
        ) -> Result<Option<crate::families::engine::Prepared>> {
            if L::ROW_BY_ROW || self.rhs.is_2bit() || self.fns.run.dst_bytes() != core::mem::size_of::<O>() {
                return Ok(None);
            }
            let (n, k) = (rhs.layout().rows, rhs.layout().k);
            error::nonzero(m, "m")?;
            error::nonzero(k, "k")?;
            rhs.expect(&self.rhs_layout(n, k)?, self.info.name)?;
            let (t, g) = self.tiles()?;
            if self.one_row && t.mr != 1 {
                return Ok(None);
            }
            L::check_block(t.kr, t.sr)?;
            error::mul(error::mul(m, k, "lhs")?, core::mem::size_of::<L>(), "lhs")?;
            error::mul(error::mul(m, n, "dst")?, core::mem::size_of::<O>(), "dst")?;
            let per_row = roundup(k, 32, "k")?.checked_add(8).ok_or_else(|| crate::Error::Overflow("k".into()))?;
            let lhs_bytes = error::mul(roundup(m, t.mr, "m")?, per_row, "packed lhs")?;
            if L::LHS.size(&g, m, k, 0, (t.mr, t.kr, t.sr)) != lhs_bytes {
                return Err(crate::Error::PackerMismatch { kernel: L::PACKER, why: "unexpected packed size".into() });
            }
            let run = match self.fns.run {
                Run::F32(f) => engine::KernelRun::PlainF32(f),
                Run::Half(f) => engine::KernelRun::Plain(f),
                Run::F32Lut(_) => return Ok(None),
            };
            // Single-row kernels (mr 1, checked) one row per call at the
            // packer's offset of that row, as in `run`.
            let rows = if self.one_row {
                engine::SteadyRows::EachRow(Some(engine::Offset::K(self.fns.lhs_offset)))
            } else {
                engine::SteadyRows::Whole
            };
            let elems = (core::mem::size_of::<L>(), core::mem::size_of::<O>());
            let steady = engine::Steady::new(g, (engine::SteadyLhs::Packed(L::LHS), run, rows), elems);
            Ok(Some(crate::families::engine::Prepared { m, n, k, bl: 0, t, lhs_bytes, steady }))
        }
    }

    // SAFETY: the layouts are the kernel's (its tiles, the packed formats
    // its family declares: `qai8dxp` and its RHS format), the functions its
    // own interface's, and `plan` checks what `run` assumes besides:
    // single-row kernels have mr 1 (their rows then start anywhere), 2-bit
    // weights carry their table.
    unsafe impl engine::PackedKernel for Entry {
        fn info(&self) -> &KernelInfo {
            &self.info
        }

        fn plan(&self, rhs: &PackedRhs, (m, n, k, _): (usize, usize, usize, usize)) -> Result<engine::PackedPlan> {
            let layouts = (self.lhs_layout(m, k)?, self.rhs_layout(n, k)?);
            let lut = if self.rhs.is_2bit() { rhs_lut(rhs)? } else { [0; 16] };
            let (t, g) = self.tiles()?;
            if self.one_row && t.mr != 1 {
                return Err(crate::Error::WrongFamily {
                    kernel: self.info.name,
                    why: "single-row kernel with mr > 1".into(),
                });
            }
            let run = match self.fns.run {
                Run::F32(f) => engine::KernelRun::PlainF32(f),
                Run::Half(f) => engine::KernelRun::Plain(f),
                Run::F32Lut(f) => engine::KernelRun::PlainF32Lut(f, ()),
            };
            let offsets = (engine::Offset::K(self.fns.lhs_offset), engine::Offset::K(self.fns.rhs_offset));
            let fns = engine::PackedFns::new(run, offsets, self.one_row, self.fns.run.dst_bytes()).with_lut(lut);
            Ok(engine::PackedPlan { layouts, tiles: (t, g), fns })
        }
    }

    impl Entry {
        /// Packs int4 per-channel weights as `matmul_clamp_f32_qai8dxp_qsi4cxp`
        /// does (its checks, in its order; the buffer sized by the packer's
        /// own query).
        pub(crate) fn pack_rhs_qsi4cxp(&self, w: &Int4PerChannel<'_>) -> Result<PackedRhs> {
            w.validate()?;
            let layout = self.rhs_layout(w.n, w.k)?;
            if !self.rhs.takes(w.order) {
                return Err(crate::Error::WrongFamily {
                    kernel: self.info.name,
                    why: format!("has no upstream packer for {:?} weights (use N x K)", w.order),
                });
            }
            let (nr, kr, sr) = (layout.r, layout.kr, layout.sr);
            error::multiple_of(kr, sr, "kr", "sr must divide kr")?;
            // The blocks are the kernel's for its format; kr % sr == 0
            // (checked); the format takes the order (checked).
            let g = engine::ensure_supported(&self.info)?;
            let buf = pack_int4_per_channel(&g, self.rhs, w, (nr, kr, sr))?;
            Ok(PackedRhs::new(layout, buf))
        }

        /// Quantises and packs an f32 LHS as `matmul_clamp_f32_qai8dxp_qsi4cxp`
        /// does (the packer's own size for the kernel's blocks, which
        /// upstream pairs with this plain C packer).
        pub(crate) fn pack_lhs_f32_qsi4cxp(
            &self,
            m: usize,
            k: usize,
            lhs: &[f32],
            lhs_stride: usize,
            par: Parallelism,
            out: &mut PackedLhs,
        ) -> Result<()> {
            engine::check_lhs_rows(m, k, lhs.len(), lhs_stride)?;
            error::mul(lhs_stride, 4, "lhs stride")?;
            let layout = self.lhs_layout(m, k)?;
            let g = engine::ensure_supported(&self.info)?;
            pack_lhs_rows(&g, &self.info, layout, lhs, lhs_stride, par, out)
        }

        /// Every check `matmul_clamp_f32_qai8dxp_qsi4cxp`'s `pack_lhs_into`
        /// and `run` make for a dense `m x k` f32 LHS and `rhs`, made once.
        pub(crate) fn prepare_f32_qsi4cxp(
            &self,
            m: usize,
            rhs: &PackedRhs,
        ) -> Result<Option<crate::families::engine::Prepared>> {
            let l = *rhs.layout();
            let (n, k) = (l.rows, l.k);
            engine::check_prepared_sizes(m, n, k)?;
            rhs.expect(&self.rhs_layout(n, k)?, self.info.name)?;
            let (t, g) = self.tiles()?;
            error::multiple_of(t.kr, t.sr, "kr", "sr must divide kr")?;
            if !matches!(self.fns.run, Run::F32(_)) {
                return Ok(None);
            }
            let lhs_bytes = <f32 as LhsElem>::LHS.size(&g, m, k, 0, (t.mr, t.kr, t.sr));
            let Run::F32(run) = self.fns.run else { return Ok(None) };
            // Single-row kernels (mr 1) one row per call at the packer's
            // offset of that row.
            let rows = if t.mr == 1 {
                engine::SteadyRows::EachRow(Some(engine::Offset::K(self.fns.lhs_offset)))
            } else {
                engine::SteadyRows::Whole
            };
            let calls = (engine::SteadyLhs::Packed(<f32 as LhsElem>::LHS), engine::KernelRun::PlainF32(run), rows);
            let steady = engine::Steady::new(g, calls, (4, 4));
            Ok(Some(crate::families::engine::Prepared { m, n, k, bl: 0, t, lhs_bytes, steady }))
        }
    }

    /// The table as the kernels read it: four i32 entries, then zeros up to
    /// the 64 bytes the SME2 kernels load.
    fn lut_words(lut: [i8; 4]) -> [i32; 16] {
        let mut t = [0i32; 16];
        for (d, s) in t.iter_mut().zip(lut) {
            *d = s as i32;
        }
        t
    }

    /// The look-up table stored after a 2-bit packed RHS.
    fn rhs_lut(rhs: &PackedRhs) -> Result<[i32; 16]> {
        let l = rhs.layout();
        let f = RhsFormat::from_id(l.format).filter(|f| f.is_2bit());
        let size = f.map(|f| f.layout_size(l.rows, l.k, l.r)).transpose()?;
        let bytes = rhs.as_bytes();
        match size {
            Some(s) if s.checked_add(LUT_BYTES) == Some(bytes.len()) => {
                let mut t = [0i32; 16];
                for (i, v) in t.iter_mut().enumerate() {
                    *v = i32::from_le_bytes(bytes[s + 4 * i..s + 4 * i + 4].try_into().unwrap());
                }
                Ok(t)
            }
            _ => Err(crate::Error::bad_value("packed RHS", l, "carries no 2-bit look-up table")),
        }
    }

    fn f32_at(b: &[u8], at: usize) -> f32 {
        f32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    /// Weight row `row` of a `qsi4cxp` or `qsi4cxps1s0` packed RHS as f32
    /// (`value * scale`; bias not included): the unpacker of
    /// `matmul_clamp_f32_qai8dxp_qsi4cxp`, whose packers these families share.
    pub(crate) fn unpack_qsi4cxp_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        let l = *rhs.layout();
        if row >= l.rows {
            return Err(crate::Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        let bytes = rhs.as_bytes();
        let k_internal = l.k.div_ceil(32) * 32;
        let nr = l.r;
        let stride = nr * (k_internal / 2) + nr * 12;
        let block = &bytes[(row / nr) * stride..(row / nr + 1) * stride];
        let r = row % nr;
        let sums_at = nr * (k_internal / 2);
        let scale_at = sums_at + nr * 4;
        let scale = f32::from_le_bytes(block[scale_at + r * 4..scale_at + r * 4 + 4].try_into().unwrap());
        let nib = |byte: u8, hi: bool| -> i8 { ((if hi { byte & 0xF0 } else { byte << 4 }) as i8) >> 4 };
        match l.format {
            f if f == RhsFormat::Qsi4cxp.id() => {
                // Inverse of the packer's index map: byte b of the row block
                // holds k0 (low) and k0 + 16 (high) of channel nr_idx.
                let bl_bytes = l.kr / l.sr;
                for (b, &byte) in block.iter().enumerate().take(nr * (k_internal / 2)) {
                    let block_idx = b / bl_bytes;
                    let block_byte = b % bl_bytes;
                    let super_block = block_idx / nr;
                    if block_idx % nr != r {
                        continue;
                    }
                    let base = block_byte + super_block * bl_bytes;
                    let k0 = base + (base / 16) * 16;
                    for (kk, hi) in [(k0, false), (k0 + 16, true)] {
                        if kk < l.k {
                            // Stored scale is scale / 16 and the nibble is the
                            // value: both exact in f32.
                            out[kk] = nib(byte, hi) as f32 * (scale * 16.0);
                        }
                    }
                }
            }
            _ => {
                let kr = l.kr;
                for (kk, o) in out.iter_mut().enumerate().take(l.k) {
                    let (chunk, within) = (kk / kr, kk % kr);
                    let b = chunk * nr * (kr / 2) + r * (kr / 2) + within / 2;
                    *o = nib(block[b], within % 2 == 1) as f32 * scale;
                }
            }
        }
        Ok(())
    }

    /// Weight row `row` of a packed RHS of these families as f32
    /// (`value * scale`, bias not included).
    pub(crate) fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        let l = *rhs.layout();
        if row >= l.rows {
            return Err(crate::Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        let Some(format) = RhsFormat::from_id(l.format) else {
            return Err(crate::Error::bad_value("packed RHS format", l.format, "unknown"));
        };
        let (nr, kr, r) = (l.r, l.kr, row % l.r);
        let k_internal = l.k.div_ceil(32) * 32;
        let bytes = rhs.as_bytes();
        match format {
            RhsFormat::Qsi4cxp | RhsFormat::Qsi4cxps1s0 => {
                // Same packers and bytes as the f32 family: one unpacker.
                return unpack_qsi4cxp_row(rhs, row, out);
            }
            RhsFormat::Qsi8cxp => {
                let stride = nr * (k_internal + 12);
                let block = &bytes[(row / nr) * stride..(row / nr + 1) * stride];
                let scale = f32_at(block, nr * k_internal + nr * 4 + r * 4);
                for (kk, o) in out.iter_mut().enumerate().take(l.k) {
                    let b = (kk / kr) * nr * kr + r * kr + kk % kr;
                    *o = block[b] as i8 as f32 * scale;
                }
            }
            RhsFormat::Qsu2cxp4x4 | RhsFormat::Qsu2cxp4vlx4 => {
                let lut = rhs_lut(rhs)?;
                let stride = nr * (k_internal / 4 + 12);
                let block = &bytes[(row / nr) * stride..(row / nr + 1) * stride];
                let scale = f32_at(block, nr * k_internal / 4 + nr * 4 + r * 4);
                for (kk, o) in out.iter_mut().enumerate().take(l.k) {
                    // 4x4: 16-value chunks, row r's 4 bytes each holding
                    // values i, i + 4, i + 8, i + 12 of the chunk. 4vlx4:
                    // 32-value chunks, byte j of every row together, each the
                    // source byte (four consecutive values).
                    let (b, shift) = if format == RhsFormat::Qsu2cxp4x4 {
                        let within = kk % 16;
                        ((kk / 16) * nr * 4 + r * 4 + within % 4, 2 * (within / 4))
                    } else {
                        let src = kk / 4;
                        ((src / 8) * 8 * nr + (src % 8) * nr + r, 2 * (kk % 4))
                    };
                    let code = (block[b] >> shift) & 3;
                    *o = lut[code as usize] as i8 as f32 * scale;
                }
            }
        }
        Ok(())
    }

    /// A family's `entries()`: the kernels of `$kernels` (its generated
    /// upstream table) made by `$entry`, a closure over `&(ukernel,
    /// interface)`, built once.
    macro_rules! entries {
        ($kernels:path, $entry:expr) => {
            pub(super) fn entries() -> &'static [Entry] {
                static E: std::sync::OnceLock<Vec<Entry>> = std::sync::OnceLock::new();
                E.get_or_init(|| $kernels.iter().map($entry).collect())
            }
        };
    }
    pub(crate) use entries;

    /// The `Kernel` methods of every qai8dxp family (the per-channel ones
    /// and the qsi4c32p ones): `lhs_layout`, `pack_lhs` and `pack_lhs_into`
    /// (an LHS of `$lhs`, quantised and packed by the entry's `$into`),
    /// `run` (outputs of `$out`) and `matmul`. With `layout_first`,
    /// `pack_lhs` computes the LHS layout before `$into` checks the rows.
    macro_rules! kernel_methods {
        (lhs: $lhs:ty, out: $out:ty, pack_lhs_into: $into:ident $(, $layout_first:ident)?) => {
            impl Kernel {
                $crate::families::engine::lhs_methods!(
                    lhs: $lhs,
                    into: $into,
                    $(new: $layout_first,)?
                    layout_doc: [
                        /// The packed-LHS layout this kernel reads for an `m x k` input.
                    ],
                    pack_doc: [
                        #[doc = concat!("Quantises and packs an `m x k` ", stringify!($lhs), " LHS (rows `lhs_stride`")]
                        /// elements apart; `k` for a dense matrix).
                    ],
                );

                $crate::families::engine::run_matmul_methods!(
                    lhs: $lhs,
                    out: $out,
                    run: run,
                    run_doc: [
                        #[doc = concat!("`dst = clamp(lhs · wᵀ + bias)` in ", stringify!($out), ": `dst` is `m x n`, rows `n`")]
                        /// apart.
                    ],
                    matmul_doc: [
                        /// Packs the dense `m x k` LHS and runs: the one-call form
                        /// (use [`pack_lhs_into`](Self::pack_lhs_into) and
                        /// [`run`](Self::run) to reuse the packed-LHS allocation).
                    ],
                );
            }
        };
    }
    pub(crate) use kernel_methods;

    /// Defines a family's typed `Kernel` (over its `entries()`), `infos()`
    /// and `unpack_rhs_row`.
    macro_rules! qai8dxp_kernel {
        (lhs: $lhs:ty, out: $out:ty, weights: $w:ident) => {
            $crate::families::engine::kernel_type!($crate::families::qai8dxp_common::Entry);
            $crate::families::qai8dxp_common::kernel_methods!(lhs: $lhs, out: $out, pack_lhs_into: pack_lhs_into);

            impl Kernel {
                /// The packed-RHS layout this kernel reads for `n x k` weights.
                pub fn rhs_layout(&self, n: usize, k: usize) -> $crate::Result<$crate::PackedLayout> {
                    self.0.rhs_layout(n, k)
                }

                /// Packs the weights for this kernel (and every kernel with
                /// the same [`rhs_layout`](Self::rhs_layout)).
                pub fn pack_rhs(&self, w: &$w<'_>) -> $crate::Result<$crate::PackedRhs> {
                    self.0.pack_rhs($crate::families::qai8dxp_common::Weights::from(*w))
                }

                /// The checks of `pack_lhs_into` + `run`, made once (see
                /// `Entry::prepare`).
                #[allow(dead_code)] // families the high-level API does not serve
                pub(crate) fn prepare(
                    &self,
                    m: usize,
                    rhs: &$crate::PackedRhs,
                ) -> $crate::Result<Option<$crate::families::engine::Prepared>> {
                    self.0.prepare::<$lhs, $out>(m, rhs)
                }
            }

            /// Weight row `row` of a packed RHS of this family, as f32
            /// (`value * scale`; bias not included): what ggml's `get_rows`
            /// needs.
            pub fn unpack_rhs_row(rhs: &$crate::PackedRhs, row: usize, out: &mut [f32]) -> $crate::Result<()> {
                $crate::families::qai8dxp_common::unpack_rhs_row(rhs, row, out)
            }
        };
    }
    pub(crate) use qai8dxp_kernel;

    /// Defines a family's `Kernel::prepare` (f32 LHS, f32 output)
    /// forwarding to its entry's `$prepare` (the steady-state path of
    /// `PackedWeights::matmul` then calls the entry's own run directly).
    macro_rules! f32_prepared {
        ($prepare:ident) => {
            impl Kernel {
                /// Every check [`pack_lhs_into`](Self::pack_lhs_into) and
                /// [`run`](Self::run) make for a dense `m x k` LHS and `rhs`,
                /// made once (the steady-state path of `PackedWeights::matmul`).
                pub(crate) fn prepare(
                    &self,
                    m: usize,
                    rhs: &$crate::PackedRhs,
                ) -> $crate::Result<Option<$crate::families::engine::Prepared>> {
                    self.0.$prepare(m, rhs)
                }
            }
        };
    }
    pub(crate) use f32_prepared;
}

crate::formats::variant_from!(Weights: Int4(Int4PerChannel), Int8(Int8PerChannel), UInt2(UInt2PerChannel));

/// The conformance, bad-input and layout-mixing checks every family runs,
/// generic over its LHS and output types.
#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) mod tests {
    use super::*;
    use crate::families::engine::PackedKernel as _;
    use crate::formats::{Int4Encoding, Order};
    use crate::packed::PackedLhs;
    use crate::par::Parallelism;
    use crate::testing::{self, Rng, THREADS, bit_identical, compare, tail_shapes};

    /// Test weights for a packed format, owning their buffers.
    pub(crate) struct OwnedWeights {
        format: RhsFormat,
        n: usize,
        k: usize,
        order: Order,
        encoding: Int4Encoding,
        lut: [i8; 4],
        data: Vec<u8>,
        data_i8: Vec<i8>,
        scales: Vec<f32>,
        bias: Option<Vec<f32>>,
    }

    impl OwnedWeights {
        /// Random weights for `format`; `case` varies order, encoding, table
        /// and bias.
        pub(crate) fn random(rng: &mut Rng, format: RhsFormat, n: usize, k: usize, case: usize) -> OwnedWeights {
            let order = if format.takes(Order::KxN) && case % 2 == 1 { Order::KxN } else { Order::NxK };
            let len = match (format, order) {
                (RhsFormat::Qsi4cxp | RhsFormat::Qsi4cxps1s0, Order::NxK) => n * k.div_ceil(2),
                (RhsFormat::Qsi4cxp | RhsFormat::Qsi4cxps1s0, Order::KxN) => k * n.div_ceil(2),
                (RhsFormat::Qsi8cxp, _) => n * k,
                _ => n * k.div_ceil(4),
            };
            let data = rng.bytes(len);
            OwnedWeights {
                format,
                n,
                k,
                order,
                encoding: if case % 3 == 0 { Int4Encoding::Offset8 } else { Int4Encoding::Signed },
                lut: if case % 2 == 0 { UInt2PerChannel::SIGNED_LUT } else { [5, -3, -64, 63] },
                data_i8: data.iter().map(|&b| b as i8).collect(),
                data,
                scales: (0..n).map(|_| 0.01 + 0.05 * (rng.f32() + 1.0)).collect(),
                bias: if case % 4 == 3 { None } else { Some(rng.vec_f32(n)) },
            }
        }

        pub(crate) fn view(&self) -> Weights<'_> {
            let (n, k, scales, bias) = (self.n, self.k, &self.scales[..], self.bias.as_deref());
            match self.format {
                RhsFormat::Qsi4cxp | RhsFormat::Qsi4cxps1s0 => Weights::Int4(Int4PerChannel {
                    n,
                    k,
                    order: self.order,
                    encoding: self.encoding,
                    data: &self.data,
                    scales,
                    bias,
                }),
                RhsFormat::Qsi8cxp => {
                    Weights::Int8(Int8PerChannel { n, k, order: self.order, data: &self.data_i8, scales, bias })
                }
                _ => Weights::UInt2(UInt2PerChannel { n, k, data: &self.data, scales, bias, lut: self.lut }),
            }
        }

        /// The weights as f32, `n x k`.
        fn dequantize(&self) -> Vec<f32> {
            let w = self.view();
            (0..self.n * self.k).map(|i| w.value(i / self.k, i % self.k) as f32 * self.scales[i / self.k]).collect()
        }
    }

    /// An LHS whose products `x * scale` hit many exact halves: one row
    /// spans `[-255/128, 0]` (scale 128) with values on a 1/256 grid, so
    /// every rounding path of the packers is exercised on ties.
    fn tie_lhs(rng: &mut Rng, m: usize, k: usize) -> Vec<f32> {
        let mut x: Vec<f32> = (0..m * k).map(|_| -((2 * rng.below(255) + 1) as f32) / 256.0).collect();
        for row in x.chunks_mut(k) {
            row[0] = -255.0 / 128.0;
        }
        x
    }

    /// The integers, zero point and scale of packed-LHS row `i`.
    fn unpack_lhs_row(p: &PackedLhs, i: usize) -> Qai8dxRow {
        let l = p.layout();
        let (mr, kb) = (l.r, l.kr / l.sr);
        let k_internal = l.k.div_ceil(32) * 32;
        let base = (i / mr) * mr * (k_internal + 8);
        let r = i % mr;
        let b = p.as_bytes();
        let q = (0..l.k).map(|j| b[base + (j / kb) * mr * kb + r * kb + j % kb] as i8).collect();
        let at = base + mr * k_internal + r * 4;
        let zp = -i32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let at = base + mr * k_internal + mr * 4 + r * 4;
        Qai8dxRow { q, zero_point: zp, recip_scale: f32::from_le_bytes(b[at..at + 4].try_into().unwrap()) }
    }

    /// The tests of [`qai8dxp_family!`] module `$family` (with LHS `$lhs`
    /// and outputs `$out`), in its `tests` module: [`conformance`] for each
    /// `k` of `$ks`, [`bad_input`] and [`mixing_layouts`].
    macro_rules! family_tests {
        ($lhs:ty, $out:ty, $ks:expr) => {
            #[test]
            fn conformance() {
                $crate::families::qai8dxp_common::tests::conformance::<$lhs, $out>(FAMILY, imp::entries(), $ks);
            }

            #[test]
            fn bad_input_is_an_error() {
                $crate::families::qai8dxp_common::tests::bad_input::<$lhs, $out>(imp::entries());
            }

            #[test]
            fn mixing_layouts_is_an_error() {
                $crate::families::qai8dxp_common::tests::mixing_layouts::<$lhs, $out>(imp::entries());
            }
        };
    }
    pub(crate) use family_tests;

    fn entry(entries: &'static [Entry], name: &str) -> &'static Entry {
        entries.iter().find(|e| e.info.name == name).expect("registered kernel")
    }

    /// The outputs of `run(par)` (as f32) at every thread count of
    /// [`THREADS`] for case `c` of shape `m x n x k`: each within `tol` of
    /// `want` ([`compare`]), all the same by `same` (after the first);
    /// returns the worst error. `what` follows the shape in error messages.
    pub(crate) fn across_threads(
        c: usize,
        (m, n, k): (usize, usize, usize),
        what: &str,
        want: &[f32],
        tol: impl Fn(usize, f32) -> f32,
        same: impl Fn(&[f32], &[f32]) -> bool,
        mut run: impl FnMut(Parallelism) -> Result<Vec<f32>, (usize, String)>,
    ) -> Result<f64, (usize, String)> {
        let mut worst = 0f64;
        let mut first: Option<Vec<f32>> = None;
        for threads in THREADS {
            let got = run(Parallelism::Rayon(threads))?;
            let err = compare(&got, want, &tol)
                .map_err(|s| (c, format!("m={m} n={n} k={k}{what} threads={threads}: {s}")))?;
            worst = worst.max(err);
            match &first {
                None => first = Some(got),
                Some(f) if !same(f, &got) => {
                    return Err((c, format!("m={m} n={n} k={k}: {threads} threads differ from 1")));
                }
                _ => {}
            }
        }
        Ok(worst)
    }

    /// Rows 0, `n / 2` and `n - 1` of a packed RHS as `unpack(row, out)`
    /// writes them equal those of `wd` (the `n x k` weights as f32), for case
    /// `c`; `what` ends the error message.
    pub(crate) fn unpack_matches(
        c: usize,
        (n, k): (usize, usize),
        wd: &[f32],
        what: &str,
        unpack: impl Fn(usize, &mut [f32]) -> crate::Result<()>,
    ) -> Result<(), (usize, String)> {
        let mut row = vec![0f32; k];
        for r in [0, n / 2, n - 1] {
            unpack(r, &mut row).map_err(|e| (c, e.to_string()))?;
            if row[..] != wd[r * k..(r + 1) * k] {
                return Err((c, format!("unpack_rhs_row({r}) n={n} k={k}{what}")));
            }
        }
        Ok(())
    }

    /// Every kernel of `kernels` running on one packed RHS of layout
    /// `packed` (`matmul(kernel, dst)`, `dst_len` outputs) succeeds where its
    /// own `rhs_layout(kernel)` is `packed`, else fails with `LayoutMismatch`.
    pub(crate) fn only_same_layout_runs<K: core::fmt::Debug, O: OutElem>(
        kernels: impl IntoIterator<Item = K>,
        packed: &crate::packed::PackedLayout,
        dst_len: usize,
        matmul: impl Fn(&K, &mut [O]) -> crate::Result<()>,
        rhs_layout: impl Fn(&K) -> crate::packed::PackedLayout,
    ) {
        for other in kernels {
            let mut dst = vec![O::from_f32(0.0); dst_len];
            let r = matmul(&other, &mut dst);
            if rhs_layout(&other) == *packed {
                r.unwrap();
            } else {
                assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{:?}: {r:?}", other);
            }
        }
    }

    /// `matmul(m, lhs, dst, clamp)` (a family's `Kernel::matmul` on a packed
    /// RHS of `n` rows; `x` a valid one-row LHS) fails for a short LHS, a
    /// short `dst` and `m = 0`, and with `nan`, for a NaN clamp.
    pub(crate) fn matmul_rejects<L: Copy, O: OutElem>(
        x: &[L],
        n: usize,
        nan: bool,
        matmul: impl Fn(usize, &[L], &mut [O], Clamp) -> crate::Result<()>,
    ) {
        let mut dst = vec![O::from_f32(0.0); n];
        assert!(matmul(1, &x[..x.len() - 1], &mut dst, Clamp::NONE).is_err(), "short lhs");
        assert!(matmul(1, x, &mut dst[..n - 1], Clamp::NONE).is_err(), "short dst");
        assert!(matmul(0, &[], &mut dst, Clamp::NONE).is_err(), "m = 0");
        if nan {
            let nan = Clamp { min: f32::NAN, max: 1.0 };
            assert!(matmul(1, x, &mut dst, nan).is_err(), "NaN clamp");
        }
    }

    /// `matmul(lhs, dst)` (a family's `Kernel::matmul` on `m` rows, `n x k`
    /// weights) against `reference(lhs, dst)` for the LHS
    /// `sin(0.37 i)`: every output `close(got, want)`, and an LHS one value
    /// short an error.
    pub(crate) fn matmul_matches_reference<L: LhsElem, O: OutElem>(
        (m, n, k): (usize, usize, usize),
        matmul: impl Fn(&[L], &mut [O]) -> crate::Result<()>,
        reference: impl Fn(&[L], &mut [O]) -> crate::Result<()>,
        close: impl Fn(f32, f32) -> bool,
    ) {
        let lhs: Vec<L> = (0..m * k).map(|i| L::from_f32((i as f32 * 0.37).sin())).collect();
        let (mut got, mut want) = (vec![O::from_f32(0.0); m * n], vec![O::from_f32(0.0); m * n]);
        matmul(&lhs, &mut got).unwrap();
        reference(&lhs, &mut want).unwrap();
        let got32: Vec<f32> = got.iter().map(|x| x.to_f32()).collect();
        let want32: Vec<f32> = want.iter().map(|x| x.to_f32()).collect();
        assert!(got32.iter().zip(&want32).all(|(&g, &w)| close(g, w)), "{got32:?} vs {want32:?}");
        assert!(matmul(&lhs[..m * k - 1], &mut got).is_err());
    }

    /// Every supported kernel of `family` against [`reference()`]: tail
    /// shapes for each `k` of `ks`, every thread count bit-identical, the
    /// packed LHS equal to the reference quantisation, packed rows unpacking
    /// to the weights. Tolerance: see the family docs.
    pub(crate) fn conformance<L: LhsElem, O: OutElem>(family: &str, entries: &'static [Entry], ks: &[usize]) {
        testing::conformance(family, |info| {
            let e = entry(entries, info.name);
            let err = |c: usize| move |x: crate::Error| (c, x.to_string());
            let (t, _) = e.tiles().map_err(err(0))?;
            let block = e.f16_block().map_err(err(0))?;
            let shapes = tail_shapes(t.mr, t.m_step, t.nr, t.n_step, ks);
            let mut rng = Rng::new(0x51);
            let mut worst = 0f64;
            for (ci, &(m, n, k)) in shapes.iter().enumerate() {
                let w = OwnedWeights::random(&mut rng, e.rhs, n, k, ci);
                let x = if ci % 3 == 2 { tie_lhs(&mut rng, m, k) } else { rng.vec_f32(m * k) };
                let lhs: Vec<L> = x.iter().map(|&v| L::from_f32(v)).collect();
                let clamp = if ci % 5 == 4 { Clamp { min: -0.5, max: 0.5 } } else { Clamp::NONE };
                let mut want = vec![O::from_f32(0.0); m * n];
                reference(m, &lhs, w.view(), clamp, block, &mut want).map_err(err(ci))?;
                let want: Vec<f32> = want.into_iter().map(O::to_f32).collect();
                let rows = L::quantize_rows(&lhs, m, k, block);
                let wd = w.dequantize();
                let packed = e.pack_rhs(w.view()).map_err(err(ci))?;
                let tol = |i: usize, y: f32| {
                    let (r, c) = (i / n, i % n);
                    let mag: f32 = (0..k).map(|p| (lhs[r * k + p].to_f32() * wd[c * k + p]).abs()).sum();
                    let d = 1e-5 * (y.abs() + mag) + 1e-6;
                    d + O::STEP * (y.abs() + d)
                };
                let case_worst = across_threads(ci, (m, n, k), "", &want, tol, bit_identical, |par| {
                    let mut scratch = PackedLhs::empty();
                    e.pack_lhs_into(m, k, &lhs, k, par, &mut scratch).map_err(err(ci))?;
                    for (i, row) in rows.iter().enumerate() {
                        let got = unpack_lhs_row(&scratch, i);
                        if got != *row {
                            let j = (0..k).find(|&j| got.q[j] != row.q[j]);
                            return Err((
                                ci,
                                format!("m={m} k={k}: packed LHS row {i} differs from the reference at {j:?}"),
                            ));
                        }
                    }
                    let mut dst = vec![O::from_f32(f32::NAN); m * n];
                    e.run(&scratch, &packed, &mut dst, clamp, par).map_err(err(ci))?;
                    Ok(dst.into_iter().map(O::to_f32).collect())
                })?;
                worst = worst.max(case_worst);
                unpack_matches(ci, (n, k), &wd, " differs from the weights", |r, row| unpack_rhs_row(&packed, r, row))?;
            }
            Ok((shapes.len(), worst))
        });
    }

    /// Invalid inputs are errors, never panics or FFI calls.
    pub(crate) fn bad_input<L: LhsElem, O: OutElem>(entries: &'static [Entry]) {
        let f = crate::cpu::Features::current();
        let info = crate::testing::or_skip!(crate::registry::info::select_from(entries.iter().map(|e| &e.info), 1, &f));
        let e = entry(entries, info.name);
        let seq = Parallelism::Sequential;
        let (n, k) = (4, 32);
        let w = OwnedWeights::random(&mut Rng::new(7), e.rhs, n, k, 0);
        let packed = e.pack_rhs(w.view()).unwrap();
        let zero = L::from_f32(0.0);
        let mut lhs_p = PackedLhs::empty();
        assert!(e.pack_lhs_into(1, k, &vec![zero; k - 1], k, seq, &mut lhs_p).is_err(), "short lhs");
        assert!(e.pack_lhs_into::<L>(0, k, &[], k, seq, &mut lhs_p).is_err(), "m = 0");
        assert!(e.pack_lhs_into(1, k, &vec![zero; k], k - 1, seq, &mut lhs_p).is_err(), "stride < k");
        assert!(e.pack_lhs_into(usize::MAX, k, &vec![zero; k], k, seq, &mut lhs_p).is_err(), "overflowing m");
        e.pack_lhs_into(1, k, &vec![zero; k], k, seq, &mut lhs_p).unwrap();
        let mut dst = vec![O::from_f32(0.0); n];
        assert!(e.run(&lhs_p, &packed, &mut dst[..n - 1], Clamp::NONE, seq).is_err(), "short dst");
        let nan = Clamp { min: f32::NAN, max: 1.0 };
        assert!(e.run(&lhs_p, &packed, &mut dst, nan, seq).is_err(), "NaN clamp");
        assert!(e.run(&lhs_p, &packed, &mut dst, Clamp { min: 1.0, max: -1.0 }, seq).is_err(), "empty clamp");
        e.run(&lhs_p, &packed, &mut dst, Clamp::NONE, seq).unwrap();
        let mut short = OwnedWeights::random(&mut Rng::new(7), e.rhs, n, k, 0);
        short.data.pop();
        short.data_i8.pop();
        assert!(e.pack_rhs(short.view()).is_err(), "short weights");
        short.n = usize::MAX / 2;
        assert!(e.pack_rhs(short.view()).is_err(), "huge n");
        if e.rhs.is_2bit() {
            let odd = OwnedWeights::random(&mut Rng::new(7), e.rhs, n, 48, 0);
            assert!(e.pack_rhs(odd.view()).is_err(), "2-bit k not a multiple of 32");
            let wide = OwnedWeights { lut: [64, 0, 0, 0], ..OwnedWeights::random(&mut Rng::new(7), e.rhs, n, k, 0) };
            assert!(e.pack_rhs(wide.view()).is_err(), "2-bit table entry outside -64..=63");
        }
        if !e.rhs.takes(Order::KxN) && !e.rhs.is_2bit() {
            let kxn = OwnedWeights { order: Order::KxN, ..OwnedWeights::random(&mut Rng::new(7), e.rhs, n, k, 0) };
            assert!(e.pack_rhs(kxn.view()).is_err(), "K x N without a packer");
        }
        let other = if e.rhs == RhsFormat::Qsi8cxp { RhsFormat::Qsu2cxp4x4 } else { RhsFormat::Qsi8cxp };
        let wrong = OwnedWeights::random(&mut Rng::new(7), other, n, k, 0);
        assert!(matches!(e.pack_rhs(wrong.view()), Err(crate::Error::WrongFamily { .. })), "weights of another format");
        let mut row = vec![0f32; k];
        assert!(unpack_rhs_row(&packed, n, &mut row).is_err(), "row out of range");
        assert!(unpack_rhs_row(&packed, 0, &mut row[..k - 1]).is_err(), "short row");
    }

    /// A packed operand made for another kernel, shape or vector length is a
    /// `LayoutMismatch`; one with the same layout works.
    pub(crate) fn mixing_layouts<L: LhsElem, O: OutElem>(entries: &'static [Entry]) {
        let f = crate::cpu::Features::current();
        let info = crate::testing::or_skip!(crate::registry::info::select_from(entries.iter().map(|e| &e.info), 4, &f));
        let e1 = entry(entries, info.name);
        let (n, k) = (8, 64);
        let w = OwnedWeights::random(&mut Rng::new(3), e1.rhs, n, k, 0);
        let packed = e1.pack_rhs(w.view()).unwrap();
        let lhs = vec![L::from_f32(0.5); 2 * k];
        let seq = Parallelism::Sequential;
        for other in entries.iter().filter(|x| x.info.supported(&f).is_ok()) {
            let mut lp = PackedLhs::empty();
            other.pack_lhs_into(2, k, &lhs, k, seq, &mut lp).unwrap();
            let mut dst = vec![O::from_f32(0.0); 2 * n];
            let r = other.run(&lp, &packed, &mut dst, Clamp::NONE, seq);
            if other.rhs_layout(n, k).unwrap() == *packed.layout() {
                r.unwrap();
            } else {
                assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{}: {r:?}", other.info.name);
            }
        }
        // A packed LHS of another k, or from another kernel's layout, is rejected.
        let mut lp = PackedLhs::empty();
        e1.pack_lhs_into(2, k + 32, &vec![L::from_f32(0.0); 2 * (k + 32)], k + 32, seq, &mut lp).unwrap();
        let mut dst = vec![O::from_f32(0.0); 2 * n];
        assert!(matches!(e1.run(&lp, &packed, &mut dst, Clamp::NONE, seq), Err(crate::Error::LayoutMismatch { .. })));
    }
}
