//! What the four float families share (`matmul_clamp_f32_f32_f32p`,
//! `matmul_clamp_f32_f32p_f32p`, `matmul_clamp_f16_f16_f16p`,
//! `matmul_clamp_f16_f16p_f16p`): the reference math, the packed RHS and LHS
//! formats with their upstream packers, and the kernel glue, written once
//! over the element type (`f32` or `f16`).
//!
//! Every packed RHS format of these families has the same shape: blocks of
//! `nr` output channels, each block holding `nr` bias values and then
//! `ceil(k / kr)` groups of `nr x kr` weights (channel-major inside a group,
//! zero padding past `k`), all in the element type. Formats only differ in
//! `nr`, `kr`, the element size and which packers produce them; a format is
//! named after its upstream packer, so two families whose kernels read the
//! same bytes share the format (the SME GEMV and MOPA kernels do: one packed
//! RHS serves both, as ggml pairs them).

use crate::error::{self, Result};
use crate::formats::{FloatElement, FloatWeights};
use crate::packed::Clamp;

/// The operand checks a family reference starts with, in this order: the
/// weights (`weights` is the result of validating them, giving their
/// `(n, k)`), the clamp, `m` nonzero, then `lhs` holding at least `m x k`
/// and `dst` at least `m x n` values. Returns `(n, k)`.
pub(crate) fn check_reference_operands(
    weights: Result<(usize, usize)>,
    clamp: Clamp,
    m: usize,
    lhs_len: usize,
    dst_len: usize,
) -> Result<(usize, usize)> {
    let (n, k) = weights?;
    clamp.check()?;
    error::nonzero(m, "m")?;
    error::at_least(lhs_len, error::mul(m, k, "lhs")?, "lhs")?;
    error::at_least(dst_len, error::mul(m, n, "dst")?, "dst")?;
    Ok((n, k))
}

/// `dst = clamp(lhs · wᵀ + bias)` computed exactly enough (f64 accumulation
/// of exact products) and rounded once to the element type.
pub(crate) fn reference<T: FloatElement>(
    m: usize,
    lhs: &[T],
    w: &FloatWeights<'_, T>,
    clamp: Clamp,
    dst: &mut [T],
) -> Result<()> {
    let (n, k) = check_reference_operands(w.validate().map(|()| (w.n, w.k)), clamp, m, lhs.len(), dst.len())?;
    let wt: Vec<f64> = w.data_in(crate::formats::Order::NxK).iter().map(|x| x.to_f64()).collect();
    for i in 0..m {
        let row: Vec<f64> = lhs[i * k..(i + 1) * k].iter().map(|x| x.to_f64()).collect();
        for j in 0..n {
            let mut acc = w.bias.map_or(0.0, |b| b[j].to_f64());
            for (x, y) in row.iter().zip(&wt[j * k..(j + 1) * k]) {
                acc += x * y;
            }
            // Clamping before the single rounding equals clamping the rounded
            // value to the rounded bounds (rounding is monotonic), which is
            // what the f16 kernels do.
            dst[i * n + j] = T::from_f64(acc.max(clamp.min as f64).min(clamp.max as f64));
        }
    }
    Ok(())
}

/// A float family module: `FAMILY` (the upstream directory `$family`),
/// `reference` (documented by the given doc comment), and on aarch64 the
/// items of [`float_kernel!`] and the tests of `float_tests!`, for element
/// `$t`. A `packed` family lists `(name token, LHS format, RHS format)`, a
/// `direct` one `(name token, RHS format)`: a kernel reads the formats of
/// the first token its name contains.
macro_rules! float_family {
    (
        family: $family:ident,
        elem: $t:ty,
        $(#[$doc:meta])*
        reference,
        packed: [$(($tok:literal, $lhs:expr, $rhs:expr)),+ $(,)?] $(,)?
    ) => {
        $crate::families::float_common::float_family! {
            @module $family, $t, [$(#[$doc])*], packed, [$(($tok, Some($lhs), $rhs)),+]
        }
    };
    (
        family: $family:ident,
        elem: $t:ty,
        $(#[$doc:meta])*
        reference,
        direct: [$(($tok:literal, $rhs:expr)),+ $(,)?] $(,)?
    ) => {
        $crate::families::float_common::float_family! {
            @module $family, $t, [$(#[$doc])*], direct, [$(($tok, None, $rhs)),+]
        }
    };
    (@module $family:ident, $t:ty, [$(#[$doc:meta])*], $kind:ident, [$($formats:tt)*]) => {
        use $crate::error::Result;
        use $crate::formats::FloatWeights;
        use $crate::packed::Clamp;

        /// Upstream family directory.
        pub const FAMILY: &str = stringify!($family);

        $(#[$doc])*
        pub fn reference(m: usize, lhs: &[$t], w: &FloatWeights<'_, $t>, clamp: Clamp, dst: &mut [$t]) -> Result<()> {
            $crate::families::float_common::reference(m, lhs, w, clamp, dst)
        }

        #[cfg(target_arch = "aarch64")]
        pub use imp::*;

        #[cfg(target_arch = "aarch64")]
        mod imp {
            use super::*;
            use $crate::families::float_common as fc;

            $crate::families::float_common::float_kernel! {
                interface: $family,
                elem: $t,
                $kind,
                formats: [$($formats)*],
            }
        }

        #[cfg(all(test, target_arch = "aarch64"))]
        mod tests {
            use super::*;

            $crate::families::float_common::test_support::float_tests!($kind, $t);
        }
    };
}
pub(crate) use float_family;

#[cfg(target_arch = "aarch64")]
pub(crate) use glue::*;

#[cfg(target_arch = "aarch64")]
mod glue {
    use super::*;
    use crate::Error;
    use crate::families::engine::{self, Gate, Tiles, query};
    use crate::families::uker::{PackLhs, PackRhs, Uker};
    use crate::formats::Order;
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::info::{KernelInfo, TileKind};
    use core::ffi::c_void;
    use kleidiai_sys as sys;

    pub(crate) type Getter = unsafe extern "C" fn() -> usize;
    pub(crate) type OffsetFn = unsafe extern "C" fn(usize, usize) -> usize;
    /// `run_matmul` of the families with an unpacked LHS.
    pub(crate) type DirectRunFn = engine::RunDirect;
    /// `run_matmul` of the families with a packed LHS.
    pub(crate) type PackedRunFn = engine::RunPlain<c_void>;
    pub(crate) type UkerApiFn = unsafe extern "C" fn() -> sys::kai_matmul_uker_api;
    pub(crate) type RhsPackFn = engine::PackFloat;
    pub(crate) type RhsSizeFn = unsafe extern "C" fn(usize, usize) -> usize;
    type RhsApiFn = unsafe extern "C" fn() -> sys::kai_matmul_pack_rhs_uker_api;
    type LhsApiFn = unsafe extern "C" fn() -> sys::kai_matmul_pack_lhs_uker_api;

    /// One upstream RHS packing routine.
    #[derive(Clone, Copy)]
    pub(crate) enum RhsPacker {
        /// Named functions (`kai_run_rhs_pack_*`, its size query and n step).
        Fn { run: RhsPackFn, size: RhsSizeFn, n_step: Getter },
        /// A `kai_matmul_pack_rhs_uker_api` table.
        Api(RhsApiFn),
    }

    /// A packed RHS format (see the module docs for the byte layout).
    pub(crate) struct RhsFormat {
        /// Format id of the [`PackedLayout`].
        pub name: &'static str,
        /// Bytes per element (weights and bias).
        pub elem_bytes: usize,
        /// K values per group.
        pub kr: usize,
        /// Upstream packer for N x K weights.
        pub nxk: Option<RhsPacker>,
        /// Upstream packer for K x N weights.
        pub kxn: Option<RhsPacker>,
        /// Upstream packer names, N x K first.
        pub packer_names: &'static [&'static str],
    }

    /// `"kai_run_rhs_pack_..."` without its `run_` (`"kai_rhs_pack_..."`),
    /// as `N` bytes (`N = run.len() - 4`); evaluated at compile time.
    const fn packer_name_bytes<const N: usize>(run: &str) -> [u8; N] {
        let run = run.as_bytes();
        assert!(run.len() == N + 4 && run[0] == b'k' && run[4] == b'r' && run[5] == b'u' && run[6] == b'n');
        let mut out = [0u8; N];
        let mut i = 0;
        while i < N {
            out[i] = if i < 4 { run[i] } else { run[i + 4] };
            i += 1;
        }
        out
    }

    /// One RHS packer (`fn(run, size, n_step)` for the named functions,
    /// `api(table)` for a `kai_matmul_pack_rhs_uker_api` table) and its
    /// upstream name: the `kai_run_` function's name without `run_`, or
    /// the table's name.
    macro_rules! rhs_packer {
        (fn($run:ident, $size:ident, $step:ident)) => {
            RhsPacker::Fn { run: sys::$run, size: sys::$size, n_step: sys::$step }
        };
        (api($api:ident)) => {
            RhsPacker::Api(sys::$api)
        };
        (name fn($run:ident, $size:ident, $step:ident)) => {{
            const RUN: &str = stringify!($run);
            const BYTES: [u8; RUN.len() - 4] = packer_name_bytes(RUN);
            const NAME: &str = match core::str::from_utf8(&BYTES) {
                Ok(name) => name,
                Err(_) => panic!("packer name is not UTF-8"),
            };
            NAME
        }};
        (name api($api:ident)) => {
            stringify!($api)
        };
    }

    /// A [`RhsFormat`] whose upstream packers (and their names) are each
    /// written once; `nxk` may be left out (K x N packer only).
    macro_rules! rhs_format {
        ($name:literal, $elem_bytes:literal, $kr:literal, nxk: $nxk:ident $nxk_args:tt, kxn: $kxn:ident $kxn_args:tt $(,)?) => {
            RhsFormat {
                name: $name,
                elem_bytes: $elem_bytes,
                kr: $kr,
                nxk: Some(rhs_packer!($nxk $nxk_args)),
                kxn: Some(rhs_packer!($kxn $kxn_args)),
                packer_names: &[rhs_packer!(name $nxk $nxk_args), rhs_packer!(name $kxn $kxn_args)],
            }
        };
        ($name:literal, $elem_bytes:literal, $kr:literal, kxn: $kxn:ident $kxn_args:tt $(,)?) => {
            RhsFormat {
                name: $name,
                elem_bytes: $elem_bytes,
                kr: $kr,
                nxk: None,
                kxn: Some(rhs_packer!($kxn $kxn_args)),
                packer_names: &[rhs_packer!(name $kxn $kxn_args)],
            }
        };
    }

    /// f32, nr 16, kr 1 (NEON `6x16` kernels).
    pub(crate) static X32P16X1B: RhsFormat = rhs_format! {
        "x32p16x1b",
        4,
        1,
        nxk: fn(
            kai_run_rhs_pack_nxk_x32p16x1bx32_x32_x32_neon,
            kai_get_rhs_packed_size_rhs_pack_nxk_x32p16x1bx32_x32_x32_neon,
            kai_get_n_step_rhs_pack_nxk_x32p16x1bx32_x32_x32_neon
        ),
        kxn: fn(
            kai_run_rhs_pack_kxn_x32p16x1b_x32_x32_neon,
            kai_get_rhs_packed_size_rhs_pack_kxn_x32p16x1b_x32_x32_neon,
            kai_get_n_step_rhs_pack_kxn_x32p16x1b_x32_x32_neon
        ),
    };

    /// f32, nr 8, kr 1 (NEON `6x8x4` kernel; K x N packer only).
    pub(crate) static F32P8X1BIASF32: RhsFormat = rhs_format! {
        "f32p8x1biasf32",
        4,
        1,
        kxn: fn(
            kai_run_rhs_pack_kxn_f32p8x1biasf32_f32_f32_neon,
            kai_get_rhs_packed_size_rhs_pack_kxn_f32p8x1biasf32_f32_f32_neon,
            kai_get_n_step_rhs_pack_kxn_f32p8x1biasf32_f32_f32_neon
        ),
    };

    /// f32, nr 4 SVE vectors, kr 1 (SVE `6x4vl` kernel; K x N packer only).
    pub(crate) static X32P4VLX1B: RhsFormat = rhs_format! {
        "x32p4vlx1b",
        4,
        1,
        kxn: fn(
            kai_run_rhs_pack_kxn_x32p4vlx1b_x32_x32_sve,
            kai_get_rhs_packed_size_rhs_pack_kxn_x32p4vlx1b_x32_x32_sve,
            kai_get_n_step_rhs_pack_kxn_x32p4vlx1b_x32_x32_sve
        ),
    };

    /// `f32p2vlx1` MOPA kernels).
    pub(crate) static F32P2VLX1BIASF32: RhsFormat = rhs_format! {
        "f32p2vlx1biasf32",
        4,
        1,
        nxk: fn(
            kai_run_rhs_pack_nxk_f32p2vlx1biasf32_f32_f32_sme,
            kai_get_rhs_packed_size_rhs_pack_nxk_f32p2vlx1biasf32_f32_f32_sme,
            kai_get_n_step_rhs_pack_nxk_f32p2vlx1biasf32_f32_f32_sme
        ),
        kxn: fn(
            kai_run_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme,
            kai_get_rhs_packed_size_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme,
            kai_get_n_step_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme
        ),
    };

    /// f32, nr 16 SME vectors, kr 1 (SME2 GEMV `16vlx1b`; K x N packer only).
    pub(crate) static F32P16VLX1B: RhsFormat = rhs_format! {
        "f32p16vlx1b",
        4,
        1,
        kxn: fn(
            kai_run_rhs_pack_kxn_f32p16vlx1b_f32_f32_sme,
            kai_get_rhs_packed_size_rhs_pack_kxn_f32p16vlx1b_f32_f32_sme,
            kai_get_n_step_rhs_pack_kxn_f32p16vlx1b_f32_f32_sme
        ),
    };

    /// SME2 kernels `1x32vs` GEMV and `8vsx8vs` MOPA).
    pub(crate) static X32P4VSX1BX32: RhsFormat = rhs_format! {
        "x32p4vsx1bx32",
        4,
        1,
        nxk: api(kai_matmul_pack_rhs_nxk_x32p4vsx1bx32_x32_x32_sme),
        kxn: api(kai_matmul_pack_rhs_kxn_x32p4vsx1bx32_x32_x32_sme),
    };

    /// f16, nr 32, kr 1 (NEON FP16 `6x32` kernels).
    pub(crate) static X16P32X1B: RhsFormat = rhs_format! {
        "x16p32x1b",
        2,
        1,
        nxk: fn(
            kai_run_rhs_pack_nxk_x16p32x1bx16_x16_x16_neon,
            kai_get_rhs_packed_size_rhs_pack_nxk_x16p32x1bx16_x16_x16_neon,
            kai_get_n_step_rhs_pack_nxk_x16p32x1bx16_x16_x16_neon
        ),
        kxn: fn(
            kai_run_rhs_pack_kxn_x16p32x1b_x16_x16_neon,
            kai_get_rhs_packed_size_rhs_pack_kxn_x16p32x1b_x16_x16_neon,
            kai_get_n_step_rhs_pack_kxn_x16p32x1b_x16_x16_neon
        ),
    };

    /// f16, nr 16, kr 1 (NEON FP16 `6x16x8` kernel; K x N packer only).
    pub(crate) static F16P16X1BIASF16: RhsFormat = rhs_format! {
        "f16p16x1biasf16",
        2,
        1,
        kxn: fn(
            kai_run_rhs_pack_kxn_f16p16x1biasf16_f16_f16_neon,
            kai_get_rhs_packed_size_rhs_pack_kxn_f16p16x1biasf16_f16_f16_neon,
            kai_get_n_step_rhs_pack_kxn_f16p16x1biasf16_f16_f16_neon
        ),
    };

    /// kernels and the `f16p2vlx2` MOPA kernels).
    pub(crate) static X16P2VLX2B: RhsFormat = rhs_format! {
        "x16p2vlx2b",
        2,
        2,
        nxk: fn(
            kai_run_rhs_pack_nxk_x16p2vlx2b_x16_x16_sme,
            kai_get_rhs_packed_size_rhs_pack_nxk_x16p2vlx2b_x16_x16_sme,
            kai_get_n_step_rhs_pack_nxk_x16p2vlx2b_x16_x16_sme
        ),
        kxn: fn(
            kai_run_rhs_pack_kxn_x16p2vlx2b_x16_x16_sme,
            kai_get_rhs_packed_size_rhs_pack_kxn_x16p2vlx2b_x16_x16_sme,
            kai_get_n_step_rhs_pack_kxn_x16p2vlx2b_x16_x16_sme
        ),
    };

    /// packer only).
    pub(crate) static X16P16VSX2BX16: RhsFormat = rhs_format! {
        "x16p16vsx2bx16",
        2,
        2,
        kxn: api(kai_rhs_pack_kxn_x16p16vsx2bx16_x16_x16_sve),
    };

    /// One upstream LHS packing routine.
    #[derive(Clone, Copy)]
    pub(crate) enum LhsPacker {
        /// Named functions: run, size query, packed offset query.
        Fn(engine::LhsPacker),
        /// A `kai_matmul_pack_lhs_uker_api` table.
        Api(LhsApiFn),
    }

    /// A packed LHS format: blocks of `mr` rows, `ceil(k / kr)` groups of
    /// `mr x kr` values each.
    pub(crate) struct LhsFormat {
        pub name: &'static str,
        pub packer_name: &'static str,
        pub packer: LhsPacker,
    }

    /// f32, mr 2 SME vectors, kr 1.
    pub(crate) static F32P2VLX1: LhsFormat = LhsFormat {
        name: "f32p2vlx1",
        packer_name: "kai_lhs_pack_f32p2vlx1_f32_sme",
        packer: LhsPacker::Fn(engine::lhs_packers::F32P2VLX1_SME),
    };

    /// f32, mr 4 vscale (one SME vector), kr 1.
    pub(crate) static X32P4VSX1: LhsFormat = LhsFormat {
        name: "x32p4vsx1",
        packer_name: "kai_matmul_pack_lhs_mxk_x32p4vsx1_x32_sme",
        packer: LhsPacker::Api(sys::kai_matmul_pack_lhs_mxk_x32p4vsx1_x32_sme),
    };

    /// f16, mr 2 SME vectors of f32, kr 2.
    pub(crate) static X16P2VLX2: LhsFormat = LhsFormat {
        name: "x16p2vlx2",
        packer_name: "kai_lhs_pack_x16p2vlx2_x16_sme",
        packer: LhsPacker::Fn(engine::lhs_packers::X16P2VLX2_SME),
    };

    /// Every RHS format, for [`unpack_rhs_row`].
    static RHS_FORMATS: [&RhsFormat; 10] = [
        &X32P16X1B,
        &F32P8X1BIASF32,
        &X32P4VLX1B,
        &F32P2VLX1BIASF32,
        &F32P16VLX1B,
        &X32P4VSX1BX32,
        &X16P32X1B,
        &F16P16X1BIASF16,
        &X16P2VLX2B,
        &X16P16VSX2BX16,
    ];

    /// How a kernel is called.
    #[derive(Clone, Copy)]
    pub(crate) enum Imp {
        /// Interface functions, unpacked LHS.
        Direct {
            m_step: Getter,
            n_step: Getter,
            nr: Getter,
            kr: Getter,
            sr: Getter,
            rhs_offset: OffsetFn,
            run: DirectRunFn,
        },
        /// `kai_matmul_uker_api`, unpacked LHS.
        DirectApi(UkerApiFn),
        /// Interface functions, packed LHS.
        Packed {
            m_step: Getter,
            n_step: Getter,
            mr: Getter,
            nr: Getter,
            kr: Getter,
            sr: Getter,
            lhs_offset: OffsetFn,
            rhs_offset: OffsetFn,
            run: PackedRunFn,
        },
        /// `kai_matmul_uker_api`, packed LHS.
        PackedApi(UkerApiFn),
    }

    /// One kernel of a float family with the formats it reads.
    pub(crate) struct FloatKernel {
        pub info: KernelInfo,
        pub imp: Imp,
        pub rhs: &'static RhsFormat,
        pub lhs: Option<&'static LhsFormat>,
    }

    impl FloatKernel {
        pub(crate) fn new(
            u: &'static sys::Ukernel,
            family: &'static str,
            imp: Imp,
            rhs: &'static RhsFormat,
            lhs: Option<&'static LhsFormat>,
        ) -> FloatKernel {
            FloatKernel {
                info: engine::kernel_info(u, family, lhs.map(|l| l.packer_name), rhs.packer_names),
                imp,
                rhs,
                lhs,
            }
        }

        fn elem_bytes(&self) -> usize {
            self.rhs.elem_bytes
        }

        /// Blocking parameters (for the direct families `mr` is `m_step`).
        pub(crate) fn tiles(&self) -> Result<(Tiles, Gate)> {
            let g = engine::ensure_supported(&self.info)?;
            let t = match self.imp {
                Imp::Direct { m_step, n_step, nr, kr, sr, .. } => g.tiles([m_step, n_step, m_step, nr, kr, sr]),
                Imp::Packed { m_step, n_step, mr, nr, kr, sr, .. } => g.tiles([m_step, n_step, mr, nr, kr, sr]),
                Imp::DirectApi(api) | Imp::PackedApi(api) => {
                    let (m_step, n_step) = Uker::new(api, &g).step();
                    let mr = match self.lhs.map(|l| l.packer) {
                        Some(LhsPacker::Api(p)) => PackLhs::new(p, &g).step_m(),
                        _ => m_step,
                    };
                    // The packed-LHS entry point (`8vsx8vs`) covers a
                    // tile with six sub-kernels chosen by the tile's
                    // extent in multiples of 1, 2 and 4 steps, and they
                    // round differently. Cutting only at multiples of 4
                    // steps gives every output element the same
                    // sub-kernel for any thread count.
                    let wide = if matches!(self.imp, Imp::PackedApi(_)) { 4 } else { 1 };
                    Tiles { m_step: wide * m_step, n_step: wide * n_step, mr, nr: n_step, kr: self.rhs.kr, sr: 1 }
                }
            };
            // Invariants the offset getters assume of tile starts that are
            // multiples of the steps.
            if t.kr != self.rhs.kr
                || t.nr == 0
                || t.mr == 0
                || t.m_step == 0
                || t.n_step % t.nr != 0
                || t.m_step % t.mr != 0
            {
                return Err(Error::PackerMismatch {
                    kernel: self.info.name,
                    why: format!("unexpected blocking {t:?}"),
                });
            }
            Ok((t, g))
        }

        /// The packed-RHS layout this kernel reads for `n x k` weights.
        pub(crate) fn rhs_layout(&self, n: usize, k: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(f.layout(&self.info, self.rhs.name, (n, k, 0), t.nr, &t))
        }

        /// The packed-LHS layout this kernel reads for an `m x k` input.
        pub(crate) fn lhs_layout(&self, m: usize, k: usize) -> Result<PackedLayout> {
            let Some(fmt) = self.lhs else {
                return Err(Error::WrongFamily { kernel: self.info.name, why: "reads an unpacked LHS".into() });
            };
            let (t, f) = self.tiles()?;
            Ok(f.layout(&self.info, fmt.name, (m, k, 0), t.mr, &t))
        }

        /// The order of weights the packer reads without a transposed
        /// copy (N x K when it has both packers).
        pub(crate) fn rhs_order(&self) -> Order {
            if self.rhs.nxk.is_some() { Order::NxK } else { Order::KxN }
        }

        /// Packs `w` (with a zero bias when it has none).
        pub(crate) fn pack_rhs<T: FloatElement>(&self, w: &FloatWeights<'_, T>) -> Result<PackedRhs> {
            let mut out = PackedRhs::empty();
            self.pack_rhs_into(w, &mut out)?;
            Ok(out)
        }

        /// [`pack_rhs`](Self::pack_rhs) into `out`, reusing its allocation
        /// (zeroed first; an error leaves `out` empty or as it was).
        pub(crate) fn pack_rhs_into<T: FloatElement>(
            &self,
            w: &FloatWeights<'_, T>,
            out: &mut PackedRhs,
        ) -> Result<()> {
            w.validate()?;
            if T::BYTES != self.elem_bytes() {
                return Err(Error::WrongFamily { kernel: self.info.name, why: "element type".into() });
            }
            let layout = self.rhs_layout(w.n, w.k)?;
            let g = engine::ensure_supported(&self.info)?;
            let (n, k, nr, kr, sr) = (w.n, w.k, layout.r, layout.kr, layout.sr);
            let eb = T::BYTES;
            // The packed size, in checked arithmetic (upstream's queries
            // would wrap): blocks of nr channels, each nr biases and
            // ceil(k / kr) * kr values per channel.
            let packed_size = error::mul(
                error::mul(n.div_ceil(nr), nr, "packed rhs")?,
                error::mul(k.div_ceil(kr), kr, "packed rhs")?
                    .checked_add(1)
                    .ok_or_else(|| Error::Overflow("packed rhs".into()))?,
                "packed rhs",
            )
            .and_then(|x| error::mul(x, eb, "packed rhs"))?;
            let zeros;
            let bias = match w.bias {
                Some(b) => b,
                None => {
                    zeros = vec![T::default(); n];
                    &zeros
                }
            };
            // The order the weights are handed to upstream in: theirs if a
            // packer reads it, else a transposed copy for the other packer.
            let (order, packer) = match (w.order, self.rhs.nxk, self.rhs.kxn) {
                (Order::NxK, Some(p), _) => (Order::NxK, p),
                (Order::KxN, _, Some(p)) => (Order::KxN, p),
                (_, Some(p), None) => (Order::NxK, p),
                (_, None, Some(p)) => (Order::KxN, p),
                _ => return Err(Error::WrongFamily { kernel: self.info.name, why: "no RHS packer".into() }),
            };
            let copy;
            let data: &[T] = if order == w.order {
                &w.data[..n * k]
            } else {
                copy = w.data_in(order);
                &copy
            };
            let row_stride = if order == Order::NxK { k * eb } else { n * eb };
            match packer {
                RhsPacker::Fn { run, size, n_step } => {
                    let (step, bytes) = (query!(&g, n_step), query!(&g, size, n, k));
                    if step != nr || bytes != packed_size {
                        return Err(Error::PackerMismatch {
                            kernel: self.info.name,
                            why: format!("packer n_step {step} / size {bytes}, kernel nr {nr} / size {packed_size}"),
                        });
                    }
                    out.reset(layout, bytes);
                    // nr, kr and sr are the kernel's, which the packer
                    // accepts (nr checked just above).
                    let p = engine::FloatRhsPacker {
                        run,
                        size: engine::FloatRhsSize::Nk(size),
                        order,
                        elem_bytes: self.elem_bytes(),
                        bias_bytes: self.elem_bytes(),
                        bias_required: true,
                    };
                    let dst = out.data_mut().as_mut_slice();
                    p.pack(&g, (n, k), (nr, kr, sr), data, row_stride, Some(bias), dst)?;
                }
                RhsPacker::Api(api) => {
                    let cfg = sys::kai_matmul_pack_rhs_uker_config {
                        format: sys::kai_matmul_pack_rhs_uker_format_config { nr, kr, sr, bl: 0 },
                    };
                    let p = PackRhs::with_config(api, cfg, &g);
                    let (step, in_stride) = (p.step_n(), p.rhs_stride(n, k));
                    let (packed_stride, bytes) = (p.packed_stride(n, k), p.packed_size(n, k));
                    let want_in = match order {
                        Order::NxK => sys::kai_matmul_pack_rhs_uker_rhs_stride_args { n: k * eb, k: eb },
                        Order::KxN => sys::kai_matmul_pack_rhs_uker_rhs_stride_args { n: eb, k: n * eb },
                    };
                    let want_packed = nr * (eb + k.div_ceil(kr) * kr * eb);
                    if step != nr
                        || (in_stride.n, in_stride.k) != (want_in.n, want_in.k)
                        || packed_stride.n != want_packed
                        || bytes != packed_size
                    {
                        return Err(Error::PackerMismatch {
                            kernel: self.info.name,
                            why: format!("packer disagrees on the layout (step {}, stride {})", step, packed_stride.n),
                        });
                    }
                    self.check_api_rhs_stride(n, k, packed_stride.n, &g)?;
                    out.reset(layout, bytes);
                    // The element sizes are the format's (checked against
                    // `T` above and the packer's strides).
                    let x = engine::TableRhs {
                        dims: (n, k),
                        order,
                        values: (data, eb * 8),
                        bias: Some(bias),
                        scales: None,
                        globals: None,
                    };
                    engine::pack_rhs_table(&p, x, out.data_mut().as_mut_slice())?;
                }
            }
            Ok(())
        }

        /// For `kai_matmul_uker_api` kernels: the kernel reads packed RHS
        /// blocks `stride` bytes apart.
        fn check_api_rhs_stride(&self, n: usize, k: usize, stride: usize, g: &Gate) -> Result<()> {
            if let Imp::DirectApi(api) | Imp::PackedApi(api) = self.imp {
                let s = Uker::new(api, g).rhs_stride(n, k);
                if s.n != stride {
                    return Err(Error::PackerMismatch {
                        kernel: self.info.name,
                        why: format!("kernel RHS stride {} != {stride}", s.n),
                    });
                }
            }
            Ok(())
        }

        /// Packs an `m x k` LHS (rows `lhs_stride` elements apart).
        pub(crate) fn pack_lhs_into<T: FloatElement>(
            &self,
            m: usize,
            k: usize,
            lhs: &[T],
            lhs_stride: usize,
            par: Parallelism,
            out: &mut PackedLhs,
        ) -> Result<()> {
            if T::BYTES != self.elem_bytes() {
                return Err(Error::WrongFamily { kernel: self.info.name, why: "element type".into() });
            }
            check_matrix(m, k, lhs.len(), lhs_stride, "lhs")?;
            let eb = T::BYTES;
            error::mul(lhs_stride, eb, "lhs stride")?;
            let layout = self.lhs_layout(m, k)?;
            let g = engine::ensure_supported(&self.info)?;
            let (mr, kr, sr) = (layout.r, layout.kr, layout.sr);
            let fmt = self.lhs.expect("lhs_layout checked");
            // Packed size, computed in checked arithmetic before asking.
            let want = error::mul(error::mul(m.div_ceil(mr), mr, "packed lhs")?, k.div_ceil(kr) * kr, "packed lhs")
                .and_then(|x| error::mul(x, eb, "packed lhs"))?;
            let size_ok = |bytes: usize| -> Result<()> {
                if bytes != want {
                    return Err(Error::PackerMismatch {
                        kernel: self.info.name,
                        why: format!("LHS packer size {bytes} != {want}"),
                    });
                }
                Ok(())
            };
            let p = match fmt.packer {
                LhsPacker::Fn(p) => {
                    size_ok(p.size(&g, m, k, 0, (mr, kr, sr)))?;
                    p
                }
                LhsPacker::Api(api) => {
                    let cfg = sys::kai_matmul_pack_lhs_uker_config {
                        format: sys::kai_matmul_pack_lhs_uker_format_config { mr, kr, sr },
                    };
                    let p = PackLhs::with_config(api, cfg, &g);
                    let (pstride, bytes) = (p.packed_stride(m, k), p.packed_size(m, k));
                    if pstride.m != mr * k.div_ceil(kr) * kr * eb {
                        return Err(Error::PackerMismatch {
                            kernel: self.info.name,
                            why: format!("LHS packer stride {}", pstride.m),
                        });
                    }
                    self.check_api_lhs_stride(m, k, pstride.m, &g)?;
                    size_ok(bytes)?;
                    engine::LhsPacker::api(p, eb)
                }
            };
            out.reset(layout, p.size(&g, m, k, 0, (mr, kr, sr)));
            let x = engine::LhsSource { src: lhs, stride: lhs_stride, m, k, bl: 0, blocking: (mr, kr, sr) };
            engine::pack_lhs(&g, &self.info, &p, x, engine::LhsCalls::Blocks, out.data_mut().as_mut_slice(), par)?;
            Ok(())
        }

        /// Every check [`pack_lhs_into`](Self::pack_lhs_into) +
        /// [`run_packed`](Self::run_packed), or [`run_direct`](Self::run_direct),
        /// make for a dense `m x k` LHS of `T` and `rhs`, made once (the
        /// steady-state path of `PackedWeights::matmul`). `None` for kernels
        /// and packers behind upstream's table APIs, which keep the checked
        /// path.
        pub(crate) fn prepare<T: FloatElement>(&self, m: usize, rhs: &PackedRhs) -> Result<Option<engine::Prepared>> {
            let lhs_fn = matches!(self.lhs.map(|l| l.packer), None | Some(LhsPacker::Fn(_)));
            if !matches!(self.imp, Imp::Direct { .. } | Imp::Packed { .. }) || !lhs_fn || T::BYTES != self.elem_bytes()
            {
                return Ok(None);
            }
            let (n, k) = (rhs.layout().rows, rhs.layout().k);
            error::nonzero(m, "m")?;
            rhs.expect(&self.rhs_layout(n, k)?, self.info.name)?;
            check_k(k)?;
            let eb = T::BYTES;
            error::mul(error::mul(m, k, "lhs")?, eb, "lhs")?;
            error::mul(error::mul(m, n, "dst")?, eb, "dst")?;
            error::mul(k, eb, "lhs stride")?;
            error::mul(n, eb, "dst stride")?;
            let (t, g) = self.tiles()?;
            let lhs_bytes = match self.lhs.map(|l| l.packer) {
                Some(LhsPacker::Fn(lp)) => {
                    let (mr, kr, sr) = (t.mr, t.kr, t.sr);
                    let want =
                        error::mul(error::mul(m.div_ceil(mr), mr, "packed lhs")?, k.div_ceil(kr) * kr, "packed lhs")
                            .and_then(|x| error::mul(x, eb, "packed lhs"))?;
                    let bytes = lp.size(&g, m, k, 0, (mr, kr, sr));
                    if bytes != want {
                        return Err(Error::PackerMismatch {
                            kernel: self.info.name,
                            why: format!("LHS packer size {bytes} != {want}"),
                        });
                    }
                    bytes
                }
                _ => 0,
            };
            // The named functions (the only kind accepted above): a packed
            // LHS in one packer call and all rows in one kernel call, or a
            // direct LHS, GEMV kernels one row per call as in `run_direct`.
            let calls = match (self.imp, self.lhs.map(|l| l.packer)) {
                (Imp::Packed { run, .. }, Some(LhsPacker::Fn(pack))) => {
                    (engine::SteadyLhs::Packed(pack), engine::KernelRun::Plain(run), engine::SteadyRows::Whole)
                }
                (Imp::Direct { run, .. }, None) => {
                    let gemv = self.info.tile == TileKind::Gemv;
                    let rows = if gemv { engine::SteadyRows::EachRow(None) } else { engine::SteadyRows::Whole };
                    (engine::SteadyLhs::Direct, engine::KernelRun::Direct(run), rows)
                }
                _ => return Ok(None),
            };
            let steady = engine::Steady::new(g, calls, (eb, eb));
            Ok(Some(engine::Prepared { m, n, k, bl: 0, t, lhs_bytes, steady }))
        }

        fn check_api_lhs_stride(&self, m: usize, k: usize, stride: usize, g: &Gate) -> Result<()> {
            if let Imp::PackedApi(api) = self.imp {
                let s = Uker::new(api, g).lhs_stride(m, k);
                if s.m != stride {
                    return Err(Error::PackerMismatch {
                        kernel: self.info.name,
                        why: format!("kernel LHS stride {} != {stride}", s.m),
                    });
                }
            }
            Ok(())
        }

        /// `dst = clamp(lhs · wᵀ + bias)` for an unpacked `m x k` LHS.
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn run_direct<T: FloatElement>(
            &self,
            m: usize,
            lhs: &[T],
            lhs_stride: usize,
            rhs: &PackedRhs,
            dst: &mut [T],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            clamp.check()?;
            if T::BYTES != self.elem_bytes() || self.lhs.is_some() {
                return Err(Error::WrongFamily { kernel: self.info.name, why: "element type or LHS kind".into() });
            }
            let (n, k) = (rhs.layout().rows, rhs.layout().k);
            rhs.expect(&self.rhs_layout(n, k)?, self.info.name)?;
            check_matrix(m, k, lhs.len(), lhs_stride, "lhs")?;
            check_k(k)?;
            let eb = T::BYTES;
            error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
            error::mul(lhs_stride, eb, "lhs stride")?;
            error::mul(n, eb, "dst stride")?;
            let (t, g) = self.tiles()?;
            let run = match self.imp {
                Imp::Direct { rhs_offset, run, .. } => engine::DirectRun::Plain(run, rhs_offset),
                Imp::DirectApi(api) => engine::DirectRun::Table(Uker::new(api, &g)),
                _ => return Err(Error::WrongFamily { kernel: self.info.name, why: "reads a packed LHS".into() }),
            };
            let call = engine::DirectCall {
                info: &self.info,
                tiles: (t, g),
                rhs_layout: self.rhs_layout(n, k)?,
                out_bytes: eb,
                one_row: self.info.tile == TileKind::Gemv,
            };
            run.run(&call, (m, lhs, lhs_stride), rhs, (dst, clamp, par))?;
            Ok(())
        }

        /// `dst = clamp(lhs · wᵀ + bias)` for a packed LHS.
        pub(crate) fn run_packed<T: FloatElement>(
            &self,
            lhs: &PackedLhs,
            rhs: &PackedRhs,
            dst: &mut [T],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            if T::BYTES != self.elem_bytes() {
                return Err(Error::WrongFamily { kernel: self.info.name, why: "element type".into() });
            }
            if let Imp::Packed { .. } | Imp::PackedApi(_) = self.imp {
                return engine::PackedKernel::run(self, lhs, rhs, dst, clamp, par);
            }
            clamp.check()?;
            let (m, n, k) = (lhs.layout().rows, rhs.layout().rows, rhs.layout().k);
            rhs.expect(&self.rhs_layout(n, k)?, self.info.name)?;
            lhs.expect(&self.lhs_layout(m, k)?, self.info.name)?;
            // Only kernels reading an unpacked LHS are left: `lhs_layout`
            // refused them above.
            Err(Error::WrongFamily { kernel: self.info.name, why: "reads an unpacked LHS".into() })
        }
    }

    // SAFETY: the layouts are the kernel's (its tiles, its packers'
    // formats), the functions its own interface's or its table's (for
    // `Imp::Packed` and `Imp::PackedApi`, the only kinds `plan` accepts;
    // the table's strides for the call's (m, n, k)), writing elements of
    // its formats' size; `plan` checks k fits the kernels' 32-bit
    // arguments.
    unsafe impl engine::PackedKernel for FloatKernel {
        fn info(&self) -> &KernelInfo {
            &self.info
        }

        fn plan(&self, _: &PackedRhs, (m, n, k, _): (usize, usize, usize, usize)) -> Result<engine::PackedPlan> {
            let layouts = (self.lhs_layout(m, k)?, self.rhs_layout(n, k)?);
            check_k(k)?;
            let (t, g) = self.tiles()?;
            let (run, offsets) = match self.imp {
                Imp::Packed { lhs_offset, rhs_offset, run, .. } => (
                    engine::KernelRun::Plain(run).into(),
                    (engine::Offset::K(lhs_offset), engine::Offset::K(rhs_offset)),
                ),
                Imp::PackedApi(api) => {
                    let u = Uker::new(api, &g);
                    let (ls, rs) = (u.lhs_stride(m, k), u.rhs_stride(n, k));
                    (
                        engine::PackedRun::Table(u, ls, rs),
                        (engine::Offset::TableLhs(u, ls), engine::Offset::TableRhs(u, rs)),
                    )
                }
                _ => {
                    return Err(Error::WrongFamily {
                        kernel: self.info.name,
                        why: "not a packed-LHS interface kernel".into(),
                    });
                }
            };
            let fns = engine::PackedFns::new(run, offsets, false, self.elem_bytes());
            Ok(engine::PackedPlan { layouts, tiles: (t, g), fns })
        }
    }

    /// Checks an `m x k` matrix with rows `stride` elements apart fits in
    /// `len` elements.
    pub(crate) fn check_matrix(m: usize, k: usize, len: usize, stride: usize, what: &'static str) -> Result<()> {
        error::nonzero(m, "m")?;
        error::nonzero(k, "k")?;
        if stride < k {
            return Err(Error::bad_value("row stride", stride, format!("{what}: less than k = {k} (elements)")));
        }
        let need = error::mul(m - 1, stride, what)?.checked_add(k).ok_or_else(|| Error::Overflow(what.into()))?;
        error::at_least(len, need, what)
    }

    /// Several kernels keep `k` in a 32-bit `unsigned int`.
    fn check_k(k: usize) -> Result<()> {
        if k > u32::MAX as usize {
            return Err(Error::bad_value("k", k, "exceeds the kernels' 32-bit limit"));
        }
        Ok(())
    }

    /// Weight row `row` of a packed RHS in one of `formats`, as f32 (bias
    /// not included).
    pub(crate) fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32], formats: &[&RhsFormat]) -> Result<()> {
        let l = *rhs.layout();
        let Some(fmt) = formats.iter().find(|f| f.name == l.format) else {
            let whose =
                if RHS_FORMATS.iter().any(|f| f.name == l.format) { "another float family" } else { "no float family" };
            return Err(Error::bad_value("packed RHS format", l.format, format!("belongs to {whose}")));
        };
        if row >= l.rows {
            return Err(Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        let (nr, kr, eb) = (l.r, l.kr, fmt.elem_bytes);
        if nr == 0 || kr == 0 {
            return Err(Error::bad_value("packed layout", l, "nr or kr is 0"));
        }
        let block = nr * (eb + l.k.div_ceil(kr) * kr * eb);
        let base = (row / nr) * block + nr * eb;
        let r = row % nr;
        let bytes = rhs.as_bytes();
        for (p, o) in out.iter_mut().enumerate().take(l.k) {
            let at = base + ((p / kr) * nr * kr + r * kr + p % kr) * eb;
            let b = bytes.get(at..at + eb).ok_or_else(|| Error::ByteLength {
                what: "packed RHS",
                got: bytes.len(),
                need: at + eb,
            })?;
            *o = if eb == 4 {
                f32::from_le_bytes([b[0], b[1], b[2], b[3]])
            } else {
                half::f16::from_le_bytes([b[0], b[1]]).to_f32()
            };
        }
        Ok(())
    }

    /// A kernel's formats, by a token of its name: `(token, LHS format (none
    /// for the direct families), RHS format)`.
    pub(crate) type FormatToken = (&'static str, Option<&'static LhsFormat>, &'static RhsFormat);

    /// A family's kernels: those of `kernels` (interface functions), then
    /// those of `api` (`kai_matmul_uker_api`), each with the formats of the
    /// first token of `formats` its name contains; kernels with none are
    /// left out.
    pub(crate) fn entries(
        family: &'static str,
        kernels: Vec<(&'static sys::Ukernel, Imp)>,
        api: &[(&'static sys::Ukernel, UkerApiFn)],
        formats: &[FormatToken],
    ) -> Vec<FloatKernel> {
        let find = |name: &str| formats.iter().find(|(t, _, _)| name.contains(t)).copied();
        let mut v: Vec<FloatKernel> = kernels
            .into_iter()
            .filter_map(|(u, imp)| {
                let (_, l, r) = find(u.name)?;
                Some(FloatKernel::new(u, family, imp, r, l))
            })
            .collect();
        v.extend(api.iter().filter_map(|&(u, api)| {
            let (_, l, r) = find(u.name)?;
            let imp = if l.is_some() { Imp::PackedApi(api) } else { Imp::DirectApi(api) };
            Some(FloatKernel::new(u, family, imp, r, l))
        }));
        v
    }

    /// The items of a float family module: `FORMATS` (the RHS formats of
    /// `formats`), `entries()` (one [`FloatKernel`] per kernel of the
    /// generated interface module `$iface` with a format), `infos`, `Kernel`
    /// (a handle on one entry) with its methods, and `unpack_rhs_row`.
    /// `$t` is the element type; `packed` families pack the LHS
    /// (`pack_lhs`, `run` on a packed LHS), `direct` ones read it as is
    /// (`run` on a strided LHS).
    macro_rules! float_kernel {
        (
            interface: $iface:ident,
            elem: $t:ty,
            $kind:ident,
            formats: [$(($tok:literal, $lhs:expr, $rhs:expr)),+ $(,)?] $(,)?
        ) => {
            /// The RHS formats of this family.
            pub(crate) const FORMATS: &[&$crate::families::float_common::RhsFormat] = &[$($rhs),+];

            fn entries() -> &'static [$crate::families::float_common::FloatKernel] {
                static E: std::sync::OnceLock<Vec<$crate::families::float_common::FloatKernel>> =
                    std::sync::OnceLock::new();
                E.get_or_init(|| {
                    use kleidiai_sys::interfaces::$iface::{API_KERNELS, KERNELS};
                    use $crate::families::float_common::{entries, float_kernel};
                    // A loop: the per-family part stays small, `entries` is
                    // compiled once.
                    let mut kernels = Vec::with_capacity(KERNELS.len());
                    for (u, i) in KERNELS {
                        kernels.push((*u, float_kernel!(@imp $kind i)));
                    }
                    entries(FAMILY, kernels, API_KERNELS, &[$(($tok, $lhs, $rhs)),+])
                })
            }

            $crate::families::engine::kernel_type!($crate::families::float_common::FloatKernel);

            impl Kernel {

                /// The shared float-kernel glue (the steady-state path of the
                /// high-level API calls it directly).
                pub(crate) fn float_kernel(&self) -> &'static $crate::families::float_common::FloatKernel {
                    self.0
                }

                /// The packed-RHS layout this kernel reads for `n x k` weights.
                pub fn rhs_layout(&self, n: usize, k: usize) -> Result<$crate::packed::PackedLayout> {
                    self.0.rhs_layout(n, k)
                }

                /// Packs the weights (and bias; zeros without one) for this kernel
                /// and every kernel with the same [`rhs_layout`](Self::rhs_layout).
                pub fn pack_rhs(&self, w: &FloatWeights<'_, $t>) -> Result<$crate::packed::PackedRhs> {
                    self.0.pack_rhs(w)
                }

                $crate::families::float_common::float_kernel!(@methods $kind $t);
            }

            /// Weight row `row` of a packed RHS of this family, as f32 (exact;
            /// bias not included): what ggml's `get_rows` needs.
            pub fn unpack_rhs_row(rhs: &$crate::packed::PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
                $crate::families::float_common::unpack_rhs_row(rhs, row, out, FORMATS)
            }
        };
        (@imp packed $i:ident) => {
            $crate::families::engine::iface_fns!([$crate::families::float_common::Imp::Packed], $i)
        };
        (@imp direct $i:ident) => {
            $crate::families::float_common::Imp::Direct {
                m_step: $i.get_m_step.expect("m_step"),
                n_step: $i.get_n_step.expect("n_step"),
                nr: $i.get_nr.expect("nr"),
                kr: $i.get_kr.expect("kr"),
                sr: $i.get_sr.expect("sr"),
                rhs_offset: $i.get_rhs_packed_offset.expect("rhs offset"),
                run: $i.run_matmul.expect("run"),
            }
        };
        (@methods packed $t:ty) => {
            $crate::families::engine::lhs_methods!(
                lhs: $t,
                into: pack_lhs_into,
                new: layout_first,
                layout_doc: [
                    /// The packed-LHS layout this kernel reads for an `m x k` input.
                ],
                pack_doc: [
                    /// Packs an `m x k` LHS with rows `lhs_stride` elements apart.
                ],
            );

            $crate::families::engine::run_matmul_methods!(
                lhs: $t,
                out: $t,
                run: run_packed,
                run_doc: [
                    /// `dst = clamp(lhs · wᵀ + bias)`: `dst` is `m x n`, rows `n` apart.
                ],
                matmul_doc: [
                    /// Packs the dense `m x k` LHS and runs: the one-call form (use
                    /// [`pack_lhs_into`](Self::pack_lhs_into) and [`run`](Self::run) to
                    /// reuse the packed-LHS allocation).
                ],
            );
        };
        (@methods direct $t:ty) => {
            /// `dst = clamp(lhs · wᵀ + bias)`: `lhs` is `m x k` with rows
            /// `lhs_stride` elements apart, `dst` is `m x n` with rows `n` apart.
            #[allow(clippy::too_many_arguments)] // the strided LHS needs them all
            pub fn run(
                &self,
                m: usize,
                lhs: &[$t],
                lhs_stride: usize,
                rhs: &$crate::packed::PackedRhs,
                dst: &mut [$t],
                clamp: Clamp,
                par: $crate::par::Parallelism,
            ) -> Result<()> {
                self.0.run_direct(m, lhs, lhs_stride, rhs, dst, clamp, par)
            }

            /// [`run`](Self::run) for a dense LHS (rows `k` apart).
            pub fn matmul(
                &self,
                m: usize,
                lhs: &[$t],
                rhs: &$crate::packed::PackedRhs,
                dst: &mut [$t],
                clamp: Clamp,
                par: $crate::par::Parallelism,
            ) -> Result<()> {
                self.run(m, lhs, rhs.layout().k, rhs, dst, clamp, par)
            }
        };
    }
    pub(crate) use float_kernel;
}

/// Test support shared by the four families' conformance tests.
#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) mod test_support {
    use super::*;
    use crate::cpu::{CpuFeature, Features};
    use crate::formats::Order;
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::info::KernelInfo;
    use crate::testing::{Rng, THREADS, bit_identical, compare, tail_shapes};

    /// How a kernel accumulates, which sets its error bound.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Accum {
        /// f32 accumulation, any order, fused or not.
        F32,
        /// f16 fused multiply-adds, in k order, starting from the bias
        /// (NEON FP16 `fmla .8h`).
        F16Sequential,
    }

    const U32: f64 = 1.0 / (1u64 << 24) as f64;
    const U16: f64 = 1.0 / (1u64 << 11) as f64;

    /// Spacing of f16 values at magnitude `x` (2^-24 below the normal range).
    pub(crate) fn ulp16(x: f64) -> f64 {
        let x = x.abs();
        if x < 2f64.powi(-14) { 2f64.powi(-24) } else { 2f64.powi(x.log2().floor() as i32 - 10) }
    }

    /// The part of the bound on |kernel - reference| for one output that
    /// comes from the kernel's accumulation (see the family docs): `a` is
    /// the LHS row, `w` the weight row, `b` the bias, all as f64.
    pub(crate) fn accumulation_bound(accum: Accum, a: &[f64], w: &[f64], b: f64) -> f64 {
        let k = a.len() as f64;
        match accum {
            Accum::F32 => {
                let terms: f64 = b.abs() + a.iter().zip(w).map(|(x, y)| (x * y).abs()).sum::<f64>();
                (k + 2.0) * U32 * terms
            }
            Accum::F16Sequential => {
                let mut s = b;
                let mut partial = 0.0;
                for (x, y) in a.iter().zip(w) {
                    s += x * y;
                    partial += s.abs();
                }
                let kk = k.max(1.0);
                U16 * partial / (1.0 - kk * U16) + kk * 2f64.powi(-25)
            }
        }
    }

    /// The whole bound: `acc` from [`accumulation_bound`] plus the output
    /// roundings of the kernel (`got`) and of the reference (`want`).
    pub(crate) fn bound(accum: Accum, acc: f64, got: f64, want: f64, f16_out: bool) -> f64 {
        match (accum, f16_out) {
            // Both round an f32 / exact value once to f16.
            (Accum::F32, true) => acc + 0.5 * (ulp16(want) + ulp16(got)),
            (Accum::F32, false) => acc + U32 * want.abs(),
            // The kernel's result is already f16; only the reference rounds.
            (Accum::F16Sequential, _) => acc + 0.5 * ulp16(want),
        }
    }

    type PackFn<'a, T> = &'a dyn Fn(&FloatWeights<'_, T>) -> crate::Result<PackedRhs>;
    /// `(m, lhs, rhs, dst, clamp, par)`.
    type RunFn<'a, T> = &'a dyn Fn(usize, &[T], &PackedRhs, &mut [T], Clamp, Parallelism) -> crate::Result<()>;
    type UnpackFn<'a> = &'a dyn Fn(&PackedRhs, usize, &mut [f32]) -> crate::Result<()>;

    /// One tested kernel, through its family's public API.
    pub(crate) struct Api<'a, T> {
        pub pack: PackFn<'a, T>,
        pub run: RunFn<'a, T>,
        pub unpack: UnpackFn<'a>,
    }

    /// Rows the kernel computes per block: the leading number of its tile
    /// token (`6x16` -> 6), at least `m_step`.
    fn test_mr(name: &str, m_step: usize) -> usize {
        let tile = name
            .split('_')
            .rfind(|t| t.chars().next().is_some_and(|c| c.is_ascii_digit()) && t.contains('x'))
            .unwrap_or("1x");
        let digits: String = tile.chars().take_while(char::is_ascii_digit).collect();
        let lead: usize = digits.parse().unwrap_or(1);
        lead.max(m_step)
    }

    /// Multiply-accumulates per test case, at most (before thread counts).
    const BUDGET: usize = 1 << 18;

    /// Runs every tail shape for `k` in `ks` with both weight orders, bias
    /// and no bias, clamped and not, every thread count; checks the error
    /// bound, bit-identity across thread counts and the row unpack.
    pub(crate) fn conformance<T: FloatElement>(
        fk: &FloatKernel,
        accum: Accum,
        ks: &[usize],
        api: Api<'_, T>,
    ) -> Result<(usize, f64), (usize, String)> {
        let (t, _) = fk.tiles().map_err(|e| (0, e.to_string()))?;
        let mr = test_mr(fk.info.name, t.m_step);
        let shapes = tail_shapes(mr, mr.max(t.m_step), t.nr, t.n_step, ks);
        let mut rng = Rng::new(0xF1 + ks.len() as u64);
        let (mut cases, mut worst) = (0, 0f64);
        let f16_out = T::BYTES == 2;
        let el = |rng: &mut Rng, len: usize| -> Vec<T> { (0..len).map(|_| T::from_f64(rng.f32() as f64)).collect() };
        for (ci, &(m, n, k)) in shapes.iter().enumerate() {
            // qemu emulates float slowly: cap the work of the largest shapes
            // (SME at 512 bits) by shortening k, never below one.
            let k = k.min((BUDGET / (m * n)).max(1));
            let order = if ci % 2 == 0 { Order::NxK } else { Order::KxN };
            let data = el(&mut rng, n * k);
            let bias = el(&mut rng, n);
            let w = FloatWeights { n, k, order, data: &data, bias: if ci % 3 == 2 { None } else { Some(&bias) } };
            let lhs = el(&mut rng, m * k);
            let clamp = if ci % 4 == 3 { Clamp { min: -0.25, max: 0.5 } } else { Clamp::NONE };
            let ctx = |e: String| (cases, format!("m={m} n={n} k={k} {order:?}: {e}"));
            let mut want = vec![T::default(); m * n];
            reference(m, &lhs, &w, clamp, &mut want).map_err(|e| ctx(e.to_string()))?;
            let packed = (api.pack)(&w).map_err(|e| ctx(e.to_string()))?;
            let wd = w.to_f32_nxk().unwrap();
            let a64: Vec<f64> = lhs.iter().map(|x| x.to_f64()).collect();
            let w64: Vec<f64> = wd.iter().map(|x| *x as f64).collect();
            let b64: Vec<f64> = (0..n).map(|j| w.bias.map_or(0.0, |b| b[j].to_f64())).collect();
            let acc: Vec<f64> = (0..m * n)
                .map(|i| {
                    let (r, c) = (i / n, i % n);
                    accumulation_bound(accum, &a64[r * k..(r + 1) * k], &w64[c * k..(c + 1) * k], b64[c])
                })
                .collect();
            let want32: Vec<f32> = want.iter().map(|x| x.to_f32()).collect();
            let mut first: Option<Vec<f32>> = None;
            for threads in THREADS {
                let par = Parallelism::Rayon(threads);
                let mut dst = vec![T::from_f64(f64::NAN); m * n];
                (api.run)(m, &lhs, &packed, &mut dst, clamp, par).map_err(|e| ctx(e.to_string()))?;
                let got: Vec<f32> = dst.iter().map(|x| x.to_f32()).collect();
                let err = compare(&got, &want32, |i, y| bound(accum, acc[i], got[i] as f64, y as f64, f16_out) as f32)
                    .map_err(|e| ctx(format!("threads={threads}: {e}")))?;
                worst = worst.max(err);
                match &first {
                    None => first = Some(got),
                    Some(f) if !bit_identical(f, &got) => {
                        return Err(ctx(format!("{threads} threads differ from 1")));
                    }
                    _ => {}
                }
            }
            let mut row = vec![0f32; k];
            for r in [0, n / 2, n - 1] {
                (api.unpack)(&packed, r, &mut row).map_err(|e| ctx(e.to_string()))?;
                if row[..] != wd[r * k..(r + 1) * k] {
                    return Err(ctx(format!("unpack_rhs_row({r}) differs from the weights")));
                }
            }
            cases += 1;
        }
        Ok((cases, worst))
    }

    /// What only the packed-LHS families have (`None` for the direct ones).
    #[allow(clippy::type_complexity)] // the families' own method signatures
    pub(crate) struct PackedOps<K, T: 'static> {
        pub lhs_layout: fn(&K, usize, usize) -> Result<PackedLayout>,
        pub pack_lhs: fn(&K, usize, usize, &[T], usize, Parallelism) -> Result<PackedLhs>,
        pub run: fn(&K, &PackedLhs, &PackedRhs, &mut [T], Clamp, Parallelism) -> Result<()>,
    }

    /// A float family's public API as function pointers (`float_tests!`
    /// fills them with the family's own `Kernel` methods, `unpack_rhs_row`
    /// and `reference`), so the checks below run through each family's API.
    #[allow(clippy::type_complexity)] // the families' own method signatures
    pub(crate) struct Ops<K, T: 'static> {
        pub by_name: fn(&str) -> Option<K>,
        pub all: fn() -> Vec<K>,
        pub select: fn(usize, &Features) -> Option<K>,
        pub info: fn(&K) -> &'static KernelInfo,
        pub float_kernel: fn(&K) -> &'static FloatKernel,
        pub rhs_layout: fn(&K, usize, usize) -> Result<PackedLayout>,
        pub pack_rhs: fn(&K, &FloatWeights<'_, T>) -> Result<PackedRhs>,
        pub matmul: fn(&K, usize, &[T], &PackedRhs, &mut [T], Clamp, Parallelism) -> Result<()>,
        /// `(m, lhs, lhs_stride, rhs, dst, clamp, par)`: the strided LHS
        /// through `pack_lhs_into` and `run` (packed) or `run` (direct).
        pub strided: fn(&K, usize, &[T], usize, &PackedRhs, &mut [T], Clamp, Parallelism) -> Result<()>,
        pub packed: Option<PackedOps<K, T>>,
        pub unpack_rhs_row: fn(&PackedRhs, usize, &mut [f32]) -> Result<()>,
        pub reference: fn(usize, &[T], &FloatWeights<'_, T>, Clamp, &mut [T]) -> Result<()>,
        /// How many RHS formats the family has.
        pub formats: usize,
    }

    /// [`conformance`] of every kernel of a family: the packed families
    /// through the reusable scratch with a row stride > k, the direct ones
    /// through `matmul`.
    pub(crate) fn family_conformance<K, T: FloatElement>(o: &Ops<K, T>, family: &str) {
        crate::testing::conformance(family, |info| {
            let kernel = (o.by_name)(info.name).unwrap();
            let pack = |w: &FloatWeights<'_, T>| (o.pack_rhs)(&kernel, w);
            let run = |m: usize, lhs: &[T], rhs: &PackedRhs, dst: &mut [T], c: Clamp, par: Parallelism| {
                if o.packed.is_none() {
                    return (o.matmul)(&kernel, m, lhs, rhs, dst, c, par);
                }
                let k = rhs.layout().k;
                let pad = [T::from_f32(9.0); 3];
                let wide: Vec<T> = (0..m).flat_map(|r| lhs[r * k..(r + 1) * k].iter().copied().chain(pad)).collect();
                (o.strided)(&kernel, m, &wide, k + 3, rhs, dst, c, par)
            };
            let api = Api { pack: &pack, run: &run, unpack: &o.unpack_rhs_row };
            // The NEON FP16 kernels accumulate in f16, the others in f32.
            let accum = if info.tier() == CpuFeature::Fp16 { Accum::F16Sequential } else { Accum::F32 };
            conformance((o.float_kernel)(&kernel), accum, &[1, 17, 40], api)
        });
    }

    /// Weights packed for one kernel run on every kernel with the same RHS
    /// layout and are rejected by the others; a packed LHS of another
    /// kernel's layout or of another depth is rejected.
    pub(crate) fn mixing_layouts<K: core::fmt::Debug, T: FloatElement>(o: &Ops<K, T>) {
        let f = Features::current();
        let k1 = crate::testing::or_skip!((o.select)(4, &f));
        let (n, k) = (9, 8);
        let half = T::from_f32(0.5);
        let data = vec![half; n * k];
        let w = FloatWeights { n, k, order: Order::NxK, data: &data, bias: None };
        let packed = (o.pack_rhs)(&k1, &w).unwrap();
        let lhs = vec![half; 2 * k];
        let seq = Parallelism::Sequential;
        for other in (o.all)().into_iter().filter(|k| (o.info)(k).supported(&f).is_ok()) {
            let mut dst = vec![T::ZERO; 2 * n];
            let r = (o.matmul)(&other, 2, &lhs, &packed, &mut dst, Clamp::NONE, seq);
            let same = (o.rhs_layout)(&other, n, k).unwrap() == *packed.layout();
            assert!(same || o.formats > 1, "one format for the family");
            if same {
                r.unwrap();
                assert!(dst.iter().all(|y| y.to_f32() == k as f32 * 0.25), "{other:?}");
            } else {
                assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{other:?}: {r:?}");
            }
            let Some(p) = &o.packed else {
                continue;
            };
            // A packed LHS of another kernel or shape is rejected too.
            let lp = (p.pack_lhs)(&other, 2, k, &lhs, k, seq).unwrap();
            let wrong_k = (p.pack_lhs)(&other, 2, k - 1, &lhs, k, seq).unwrap();
            let r = (p.run)(&k1, &wrong_k, &packed, &mut dst, Clamp::NONE, seq);
            assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{other:?}: {r:?}");
            let r = (p.run)(&k1, &lp, &packed, &mut dst, Clamp::NONE, seq);
            if (p.lhs_layout)(&other, 2, k).unwrap() != (p.lhs_layout)(&k1, 2, k).unwrap() {
                assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{other:?}: {r:?}");
            }
        }
    }

    /// Short, empty or overflowing operands, bad clamps and bad rows are
    /// errors (on a GEMM kernel of a packed family, a GEMV kernel of a
    /// direct one).
    pub(crate) fn bad_input<K, T: FloatElement>(o: &Ops<K, T>) {
        let f = Features::current();
        let (m, order) = if o.packed.is_some() { (8, Order::KxN) } else { (1, Order::NxK) };
        let kern = crate::testing::or_skip!((o.select)(m, &f));
        let (seq, none, z) = (Parallelism::Sequential, Clamp::NONE, T::ZERO);
        let data = vec![T::from_f32(1.0); 32];
        let w = FloatWeights { n: 4, k: 8, order, data: &data, bias: None };
        let packed = (o.pack_rhs)(&kern, &w).unwrap();
        let mut dst = vec![z; 8];
        let mm = |m, lhs: &[T], dst: &mut [T], c| (o.matmul)(&kern, m, lhs, &packed, dst, c, seq);
        let strided = |m, lhs: &[T], stride, dst: &mut [T]| (o.strided)(&kern, m, lhs, stride, &packed, dst, none, seq);
        assert!(mm(1, &[z; 7], &mut dst, none).is_err(), "short lhs");
        assert!(mm(1, &[z; 8], &mut dst[..3], none).is_err(), "short dst");
        assert!(mm(2, &[z; 16], &mut dst[..7], none).is_err(), "short dst, two rows");
        assert!(mm(0, &[], &mut dst, none).is_err(), "m = 0");
        assert!(strided(2, &[z; 15], 8, &mut dst).is_err(), "short strided lhs");
        assert!(strided(1, &[z; 8], 7, &mut dst).is_err(), "stride < k");
        assert!(strided(usize::MAX, &[z; 8], 8, &mut dst).is_err(), "overflowing m");
        if let Some(p) = &o.packed {
            assert!((p.pack_lhs)(&kern, 1, 0, &[z; 8], 8, seq).is_err(), "k = 0");
            assert!((p.pack_lhs)(&kern, usize::MAX, 8, &[z; 8], 8, seq).is_err(), "overflowing m");
        }
        let nan = [Clamp { min: 0.0, max: f32::NAN }, Clamp { min: f32::NAN, max: 1.0 }];
        for c in nan.into_iter().chain([Clamp { min: 1.0, max: 0.0 }]) {
            assert!(mm(1, &[z; 8], &mut dst, c).is_err(), "bad clamp {c:?}");
        }
        let pack = |v: FloatWeights<'_, T>| (o.pack_rhs)(&kern, &v);
        assert!(pack(FloatWeights { data: &data[..31], ..w }).is_err(), "short weights");
        assert!(pack(FloatWeights { bias: Some(&data[..3]), ..w }).is_err(), "short bias");
        assert!(pack(FloatWeights { n: 0, ..w }).is_err(), "n = 0");
        assert!(pack(FloatWeights { k: 0, ..w }).is_err(), "k = 0");
        assert!(pack(FloatWeights { n: usize::MAX / 2, ..w }).is_err(), "overflowing n");
        assert!(pack(FloatWeights { k: usize::MAX / 2, ..w }).is_err(), "overflowing k");
        let mut row = vec![0f32; 8];
        assert!((o.unpack_rhs_row)(&packed, 4, &mut row).is_err(), "row out of range");
        assert!((o.unpack_rhs_row)(&packed, 0, &mut row[..7]).is_err(), "short row");
        assert!((o.reference)(1, &[z; 7], &w, none, &mut dst).is_err(), "reference: short lhs");
    }

    /// The tests of a float family module (which has `FAMILY`, `FORMATS`,
    /// `Kernel`, `unpack_rhs_row` and `reference`) of element `$t`, `packed`
    /// or `direct` as in `float_kernel!`.
    macro_rules! float_tests {
        ($kind:ident, $t:ty) => {
            fn ops() -> $crate::families::float_common::test_support::Ops<Kernel, $t> {
                $crate::families::float_common::test_support::Ops {
                    by_name: Kernel::by_name,
                    all: || Kernel::all().collect(),
                    select: Kernel::select,
                    info: Kernel::info,
                    float_kernel: Kernel::float_kernel,
                    rhs_layout: Kernel::rhs_layout,
                    pack_rhs: Kernel::pack_rhs,
                    matmul: Kernel::matmul,
                    strided: $crate::families::float_common::test_support::float_tests!(@strided $kind),
                    packed: $crate::families::float_common::test_support::float_tests!(@packed $kind),
                    unpack_rhs_row,
                    reference,
                    formats: FORMATS.len(),
                }
            }

            #[test]
            fn conformance() {
                $crate::families::float_common::test_support::family_conformance(&ops(), FAMILY);
            }

            #[test]
            fn mixing_layouts_is_an_error() {
                $crate::families::float_common::test_support::mixing_layouts(&ops());
            }

            #[test]
            fn bad_input_is_an_error() {
                $crate::families::float_common::test_support::bad_input(&ops());
            }
        };
        (@strided packed) => {
            |k, m, lhs, stride, rhs, dst, clamp, par| {
                let mut scratch = $crate::packed::PackedLhs::empty();
                k.pack_lhs_into(m, rhs.layout().k, lhs, stride, par, &mut scratch)?;
                k.run(&scratch, rhs, dst, clamp, par)
            }
        };
        (@strided direct) => {
            |k, m, lhs, stride, rhs, dst, clamp, par| k.run(m, lhs, stride, rhs, dst, clamp, par)
        };
        (@packed packed) => {
            Some($crate::families::float_common::test_support::PackedOps {
                lhs_layout: Kernel::lhs_layout,
                pack_lhs: Kernel::pack_lhs,
                run: Kernel::run,
            })
        };
        (@packed direct) => {
            None
        };
    }
    pub(crate) use float_tests;
}
