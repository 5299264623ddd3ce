//! What `matmul_clamp_f32_qsi8d32p_qai4c32p` and
//! `matmul_clamp_f16_qsi8d32p_qai4c32p` share: the math, the reference, the
//! packing, the kernel glue and the conformance test, generic over the LHS and
//! output element types ([`Variant`]). The two family modules only bind their
//! upstream tables and types.
//!
//! Math, per output `(i, j)`, with `b` running over the `k / bl` blocks:
//! the LHS block is quantised symmetrically (`x ≈ q * d`, [`crate::quant::qsi8d32_block`]),
//! the packer keeps `d` and `s = sum(q) * d`; the weights are
//! `w = v * scale + offset` ([`Int4AsymBlock`]); so
//! `y = sum_b (dot_b(q, v) * d * scale + offset * s) + bias`, clamped.
//! The integer dot products are exact; everything after is f32.

use crate::error::{self, Result};
use crate::formats::{FloatElement, Int4AsymBlock};
use crate::packed::Clamp;
use crate::quant::Qsi8d32Block;

/// The kernels need blocks of a multiple of 32 values.
pub(crate) const BL_MULTIPLE: usize = 32;

/// What distinguishes the f32 and the f16 family.
pub trait Variant: Sized + 'static {
    /// LHS element (f32 or f16).
    type Lhs: FloatElement;
    /// Output element (f32 or f16).
    type Out: FloatElement;
    /// Upstream family directory.
    const FAMILY: &'static str;
    /// Quantises one block exactly like this family's LHS packer.
    fn quantize_block(x: &[Self::Lhs], q: &mut [i8]) -> Qsi8d32Block;
    /// Whether an LHS value is finite (the packers need finite input).
    fn is_finite(x: Self::Lhs) -> bool {
        x.to_f32().is_finite()
    }
    /// Rounds an f32 result to the output type.
    fn to_out(y: f32) -> Self::Out {
        Self::Out::from_f32(y)
    }
    /// An output value as f32.
    fn out_f32(y: Self::Out) -> f32 {
        y.to_f32()
    }
    /// An LHS value from f32 (tests).
    fn lhs_from_f32(x: f32) -> Self::Lhs {
        Self::Lhs::from_f32(x)
    }
}

/// A family module's items over this module: `FAMILY` (upstream's
/// `$family`), `Family` (`$elem` in and out) bound to [`Variant`] with the
/// LHS quantiser `$quantize`, `reference` (documented by the attributes
/// given), on aarch64 the items of `qai4_family!` (`lhs`, `lhs_features`,
/// `run` as there) and the tests of `qai4_tests!` (`tests` as there).
macro_rules! qai4_module {
    (
        family: $family:ident,
        elem: $elem:ty,
        quantize: $quantize:path,
        lhs: $lhs:ident,
        lhs_features: $feat:expr,
        run: $run:ident,
        tests: ($half_ulp_out:expr, $rounds_per_block:expr $(,)?),
        $(#[$doc:meta])*
        reference $(,)?
    ) => {
        /// Upstream family directory.
        pub const FAMILY: &str = stringify!($family);

        #[doc = concat!("The family's element types (", stringify!($elem), " in, ", stringify!($elem), " out), as a")]
        /// type parameter of `Kernel` (on aarch64).
        #[derive(Debug)]
        pub enum Family {}

        impl $crate::families::qsi8d32p_qai4c32p::Variant for Family {
            type Lhs = $elem;
            type Out = $elem;
            const FAMILY: &'static str = FAMILY;
            fn quantize_block(x: &[$elem], q: &mut [i8]) -> $crate::quant::Qsi8d32Block {
                $quantize(x, q)
            }
        }

        $(#[$doc])*
        pub fn reference(
            m: usize,
            lhs: &[$elem],
            w: &$crate::formats::Int4AsymBlock<'_>,
            clamp: $crate::packed::Clamp,
            dst: &mut [$elem],
        ) -> $crate::Result<()> {
            $crate::families::qsi8d32p_qai4c32p::reference_impl::<Family>(m, lhs, w, clamp, dst, None)
        }

        #[cfg(target_arch = "aarch64")]
        pub use imp::*;

        #[cfg(target_arch = "aarch64")]
        mod imp {
            use super::Family;

            $crate::families::qsi8d32p_qai4c32p::qai4_family! {
                interface: $family,
                lhs: $lhs,
                lhs_features: $feat,
                run: $run,
            }
        }

        #[cfg(all(test, target_arch = "aarch64"))]
        $crate::families::qsi8d32p_qai4c32p::qai4_tests!($half_ulp_out, $rounds_per_block);
    };
}
pub(crate) use qai4_module;

/// Checks what both the reference and the kernels require of the weights.
pub(crate) fn check_weights(w: &Int4AsymBlock<'_>) -> Result<()> {
    w.validate()?;
    error::multiple_of(w.bl, BL_MULTIPLE, "bl", "qai4c32 kernels take blocks of a multiple of 32")
}

/// Checks an `m x k` LHS with rows `stride` elements apart: finite values.
pub(crate) fn check_lhs<V: Variant>(m: usize, k: usize, lhs: &[V::Lhs], stride: usize) -> Result<()> {
    error::nonzero(m, "m")?;
    error::nonzero(k, "k")?;
    if stride < k {
        return Err(crate::Error::bad_value("lhs_stride", stride, format!("less than k = {k}")));
    }
    let need = error::mul(m - 1, stride, "lhs")?.checked_add(k).ok_or_else(|| crate::Error::Overflow("lhs".into()))?;
    error::at_least(lhs.len(), need, "lhs")?;
    for i in 0..m {
        if !lhs[i * stride..i * stride + k].iter().all(|x| V::is_finite(*x)) {
            return Err(crate::Error::bad_value(
                "lhs row",
                i,
                "holds a NaN or infinity (the quantising packer needs finite values)",
            ));
        }
    }
    Ok(())
}

/// The reference; with `mag`, also writes per output the sum of the
/// magnitudes of the f32 terms (what the conformance tolerance scales with).
pub(crate) fn reference_impl<V: Variant>(
    m: usize,
    lhs: &[V::Lhs],
    w: &Int4AsymBlock<'_>,
    clamp: Clamp,
    dst: &mut [V::Out],
    mut mag: Option<&mut [f32]>,
) -> Result<()> {
    check_weights(w)?;
    clamp.check()?;
    let (n, k, bl) = (w.n, w.k, w.bl);
    check_lhs::<V>(m, k, lhs, k)?;
    error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
    if let Some(mg) = mag.as_deref() {
        error::at_least(mg.len(), m * n, "magnitudes")?;
    }
    let nb = k / bl;
    let wq: Vec<i32> = (0..n * k).map(|i| w.value_unchecked(i / k, i % k) as i32).collect();
    let mut q = vec![0i8; k];
    let mut blocks = Vec::with_capacity(nb);
    for i in 0..m {
        blocks.clear();
        for b in 0..nb {
            let r = b * bl..(b + 1) * bl;
            let p = V::quantize_block(&lhs[i * k + r.start..i * k + r.end], &mut q[r]);
            blocks.push((p.recip_scale, p.sum as f32 * p.recip_scale));
        }
        for j in 0..n {
            let (mut acc, mut sum_abs) = (0f32, 0f32);
            for (b, &(d, s)) in blocks.iter().enumerate() {
                let dot: i32 = (b * bl..(b + 1) * bl).map(|p| q[p] as i32 * wq[j * k + p]).sum();
                let (scale, offset) = (w.scales[j * nb + b], w.offsets[j * nb + b]);
                let t1 = dot as f32 * (d * scale);
                let t2 = offset * s;
                acc += t1 + t2;
                sum_abs += t1.abs() + t2.abs();
            }
            if let Some(bias) = w.bias {
                acc += bias[j];
                sum_abs += bias[j].abs();
            }
            dst[i * n + j] = V::to_out(acc.max(clamp.min).min(clamp.max));
            if let Some(mg) = mag.as_deref_mut() {
                mg[i * n + j] = sum_abs;
            }
        }
    }
    Ok(())
}

#[cfg(target_arch = "aarch64")]
pub(crate) use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::cpu::{CpuFeature, Features};
    use crate::families::engine::{self, Gate, Tiles};

    /// A query of `(m or row, k, bl, mr, kr, sr)`.
    use crate::families::qsi8d32p_qsi4c32p::{self as q4, Run};
    use crate::formats::NibbleOrder;
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::info::KernelInfo;
    use core::ffi::c_void;
    use core::marker::PhantomData;
    use kleidiai_sys as sys;

    /// Packed by `kai_rhs_pack_nxk_qai4c32p_qau4c32s0s1_f32_f32_f32_neon` (NEON kernels).
    pub(crate) const FORMAT_QAI4C32P: &str = "qai4c32p";
    /// Packed by `kai_rhs_pack_nxk_qai4c32ps1s0nrx4_*` (SME2 kernels).
    pub(crate) const FORMAT_QAI4C32PS1S0NRX4: &str = "qai4c32ps1s0nrx4";
    const LHS_FORMAT: &str = "qsi8d32pscalef32";
    const RHS_PLAIN: &[&str] = &["kai_rhs_pack_nxk_qai4c32p_qau4c32s0s1_f32_f32_f32_neon"];
    const RHS_NRX4: &[&str] = &[
        "kai_rhs_pack_nxk_qai4c32ps1s0nrx4_qau4c32s1s0_f32_f32_f32_neon",
        "kai_rhs_pack_nxk_qai4c32ps1s0nrx4_qau4c32s0s1_f32_f32_f32_neon",
    ];

    /// The kernel's entry point (the two families differ in the dst type).
    #[derive(Clone, Copy)]
    pub enum RunFn {
        /// f32 output.
        F32(Run<f32>),
        /// f16 output (as `void*`).
        Void(Run<c_void>),
    }

    /// One kernel's functions, taken from its interface struct.
    pub(crate) type Fns = q4::Fns<RunFn>;

    /// The LHS packers (`kai_lhs_quant_pack_qsi8d32pscalef32_{f32,f16}_neon`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum LhsQuant {
        /// f32 rows.
        F32,
        /// f16 rows (the packer needs FEAT_FP16).
        F16,
    }

    impl LhsQuant {
        /// Upstream LHS packer name.
        pub(crate) fn name(self) -> &'static str {
            match self {
                LhsQuant::F32 => "kai_lhs_quant_pack_qsi8d32pscalef32_f32_neon",
                LhsQuant::F16 => "kai_lhs_quant_pack_qsi8d32pscalef32_f16_neon",
            }
        }

        /// The upstream packer (`k % bl == 0`, `k % kr == 0`, or its
        /// queries abort).
        pub(crate) const fn packer(self) -> engine::LhsPacker {
            match self {
                LhsQuant::F32 => engine::lhs_packers::QSI8D32PSCALEF32_F32,
                LhsQuant::F16 => engine::lhs_packers::QSI8D32PSCALEF32_F16,
            }
        }
    }

    /// The aarch64 half of [`Variant`]: the upstream tables and the LHS packer.
    pub trait Arch: Variant {
        /// The LHS packer (its input type is `Self::Lhs`).
        const LHS: LhsQuant;
        /// Features the LHS packer needs beyond the kernel's.
        const LHS_FEATURES: &'static [CpuFeature];
        /// The family's kernels (built once, see [`build_entries`]; declared
        /// by `qai4_family!`).
        fn entries() -> &'static [Entry];
    }

    /// A family's aarch64 items over its `Family` type: `Kernel`, the
    /// [`Arch`] binding (LHS packer `$lhs`, the packer's extra features, the
    /// kernel table of upstream's `$iface` with `run_matmul` as the
    /// [`RunFn`] variant `$run`), `unpack_rhs_row` and `infos`.
    macro_rules! qai4_family {
        (interface: $iface:ident, lhs: $lhs:ident, lhs_features: $feat:expr, run: $run:ident $(,)?) => {
            /// One kernel of the family, with its packing: `all`, `by_name`,
            /// `select`, `rhs_layout`, `lhs_layout`, `pack_rhs`, `pack_lhs(_into)`,
            /// `run`, `matmul`.
            pub type Kernel = $crate::families::qsi8d32p_qai4c32p::Kernel<Family>;

            impl $crate::families::qsi8d32p_qai4c32p::Arch for Family {
                const LHS: $crate::families::qsi8d32p_qai4c32p::LhsQuant =
                    $crate::families::qsi8d32p_qai4c32p::LhsQuant::$lhs;
                const LHS_FEATURES: &'static [$crate::cpu::CpuFeature] = $feat;
                fn entries() -> &'static [$crate::families::qsi8d32p_qai4c32p::Entry] {
                    static E: std::sync::OnceLock<Vec<$crate::families::qsi8d32p_qai4c32p::Entry>> =
                        std::sync::OnceLock::new();
                    E.get_or_init(|| {
                        let run = $crate::families::qsi8d32p_qai4c32p::RunFn::$run;
                        $crate::families::qsi8d32p_qai4c32p::build_entries::<Self>(
                            kleidiai_sys::interfaces::$iface::KERNELS
                                .iter()
                                .map(|(u, i)| (*u, $crate::families::qsi8d32p_qsi4c32p::q4_fns!(i, run)))
                                .collect(),
                        )
                    })
                }
            }

            /// Weight row `row` of a packed RHS of this family, as f32
            /// (`value * scale + offset`; bias not included): what ggml's
            /// `get_rows` needs. Both packed formats.
            pub fn unpack_rhs_row(rhs: &$crate::packed::PackedRhs, row: usize, out: &mut [f32]) -> $crate::Result<()> {
                $crate::families::qsi8d32p_qai4c32p::unpack_rhs_row(rhs, row, out)
            }

            pub(crate) fn infos() -> Vec<&'static $crate::registry::info::KernelInfo> {
                $crate::families::qsi8d32p_qai4c32p::infos::<Family>()
            }
        };
    }
    pub(crate) use qai4_family;

    /// A kernel of one of the two families.
    pub struct Entry {
        info: KernelInfo,
        fns: Fns,
        format: &'static str,
    }

    /// Builds a family's table from `(upstream entry, functions)` pairs.
    pub(crate) fn build_entries<V: Arch>(kernels: Vec<(&'static sys::Ukernel, Fns)>) -> Vec<Entry> {
        kernels
            .into_iter()
            .map(|(u, fns)| {
                let sme2 = u.features.contains(&CpuFeature::Sme2);
                let missing: Vec<CpuFeature> =
                    V::LHS_FEATURES.iter().copied().filter(|f| !u.features.contains(f)).collect();
                // The packer's features count as the kernel's: one table
                // entry per kernel, built once, so leaking is bounded.
                let features: &'static [CpuFeature] = if missing.is_empty() {
                    u.features
                } else {
                    Box::leak([u.features, &missing[..]].concat().into_boxed_slice())
                };
                Entry {
                    info: KernelInfo {
                        features,
                        ..engine::kernel_info(
                            u,
                            V::FAMILY,
                            Some(V::LHS.name()),
                            if sme2 { RHS_NRX4 } else { RHS_PLAIN },
                        )
                    },
                    fns,
                    format: if sme2 { FORMAT_QAI4C32PS1S0NRX4 } else { FORMAT_QAI4C32P },
                }
            })
            .collect()
    }

    /// One kernel of the family, with its packing.
    pub struct Kernel<V>(&'static Entry, PhantomData<fn() -> V>);

    impl<V> Clone for Kernel<V> {
        fn clone(&self) -> Self {
            *self
        }
    }
    impl<V> Copy for Kernel<V> {}

    impl<V> core::fmt::Debug for Kernel<V> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.debug_tuple("Kernel").field(&self.0.info.name).finish()
        }
    }

    pub(crate) fn infos<V: Arch>() -> Vec<&'static KernelInfo> {
        V::entries().iter().map(|e| &e.info).collect()
    }

    impl<V: Arch> Kernel<V> {
        /// Every kernel of the family in this build.
        pub fn all() -> impl Iterator<Item = Kernel<V>> {
            V::entries().iter().map(|e| Kernel(e, PhantomData))
        }

        /// The kernel with this upstream name.
        pub fn by_name(name: &str) -> Option<Kernel<V>> {
            V::entries().iter().find(|e| e.info.name == name).map(|e| Kernel(e, PhantomData))
        }

        /// The best kernel that can run with `f` for `m` output rows.
        pub fn select(m: usize, f: &Features) -> Option<Kernel<V>> {
            let best = crate::registry::info::select_from(V::entries().iter().map(|e| &e.info), m, f)?;
            Self::by_name(best.name)
        }

        /// Registry information.
        pub fn info(&self) -> &'static KernelInfo {
            &self.0.info
        }

        pub(crate) fn tiles(&self) -> Result<(Tiles, Gate)> {
            let g = engine::ensure_supported(&self.0.info)?;
            Ok((self.0.fns.tiles(&g), g))
        }

        fn check_k(&self, k: usize, bl: usize, t: &Tiles) -> Result<()> {
            error::nonzero(k, "k")?;
            error::nonzero(bl, "bl")?;
            error::multiple_of(bl, BL_MULTIPLE, "bl", "qai4c32 kernels take blocks of a multiple of 32")?;
            error::multiple_of(k, bl, "k", "k must be whole blocks")?;
            error::multiple_of(bl, t.kr, "bl", "the block must hold whole kr groups")?;
            error::multiple_of(t.kr, t.sr, "kr", "sr must divide kr")?;
            if t.sr != 2 || !matches!(t.kr / t.sr, 4 | 8) {
                return Err(crate::Error::WrongFamily {
                    kernel: self.0.info.name,
                    why: format!("kr {} / sr {}: the packers take sr 2 and 4 or 8 values per load", t.kr, t.sr),
                });
            }
            Ok(())
        }

        /// The packed-RHS layout this kernel reads for `n x k` weights in
        /// blocks of `bl`.
        pub fn rhs_layout(&self, n: usize, k: usize, bl: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            self.check_k(k, bl, &t)?;
            Ok(f.layout(&self.0.info, self.0.format, (n, k, bl), t.nr, &t))
        }

        /// The packed-LHS layout this kernel reads for an `m x k` input.
        pub fn lhs_layout(&self, m: usize, k: usize, bl: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            self.check_k(k, bl, &t)?;
            Ok(f.layout(&self.0.info, LHS_FORMAT, (m, k, bl), t.mr, &t))
        }

        /// Packs the weights for this kernel (and every kernel with the same
        /// [`rhs_layout`](Self::rhs_layout)).
        pub fn pack_rhs(&self, w: &Int4AsymBlock<'_>) -> Result<PackedRhs> {
            check_weights(w)?;
            let layout = self.rhs_layout(w.n, w.k, w.bl)?;
            let (n, k, nr, kr, sr, bl) = (w.n, w.k, layout.r, layout.kr, layout.sr, w.bl);
            // The packed size must not overflow: padded rows * (blocks * (bl/2 + 8) + 4).
            error::mul(error::mul(n.div_ceil(nr), nr, "packed rhs")?, (k / bl) * (bl / 2 + 8) + 4, "packed rhs")?;
            let g = engine::ensure_supported(&self.0.info)?;
            let scales = engine::BlockScales::F32 { scales: w.scales, zeros: w.offsets };
            let data;
            let packer = if layout.format == FORMAT_QAI4C32P {
                if kr > 16 {
                    return Err(crate::Error::WrongFamily {
                        kernel: self.0.info.name,
                        why: format!("kr {kr} > 16 is not supported by the qai4c32p packer"),
                    });
                }
                data = w.offset8_data(NibbleOrder::HighFirst);
                engine::BlockRhsPacker::Qai4(
                    sys::kai_get_rhs_packed_size_rhs_pack_nxk_qai4c32p_qau4c32s0s1_f32_f32_f32_neon,
                    sys::kai_run_rhs_pack_nxk_qai4c32p_qau4c32s0s1_f32_f32_f32_neon,
                )
            } else {
                error::multiple_of(nr, 4, "nr", "the nrx4 packer interleaves rows by 4")?;
                if kr / sr != 4 {
                    return Err(crate::Error::WrongFamily {
                        kernel: self.0.info.name,
                        why: format!("kr {kr} / sr {sr} != 4 is not supported by the nrx4 packer"),
                    });
                }
                // Both nibble orders have a packer: no copy for Offset8 data.
                data = w.offset8_data(w.nibbles);
                // The packer picked reads the nibble order the data has.
                let run = match w.nibbles {
                    NibbleOrder::LowFirst => sys::kai_run_rhs_pack_nxk_qai4c32ps1s0nrx4_qau4c32s1s0_f32_f32_f32_neon,
                    NibbleOrder::HighFirst => sys::kai_run_rhs_pack_nxk_qai4c32ps1s0nrx4_qau4c32s0s1_f32_f32_f32_neon,
                };
                engine::BlockRhsPacker::Qai4(
                    sys::kai_get_rhs_packed_size_rhs_pack_nxk_qai4c32ps1s0nrx4_qau4c32s1s0_f32_f32_f32_neon,
                    run,
                )
            };
            // w was validated; k % bl == 0, bl % 32 == 0, bl % kr == 0,
            // sr == 2, and kr <= 16 or nr % 4 == 0 and kr / sr == 4 (check_k
            // and above); the zero points are the ones the packers accept.
            // NEON code only.
            let x = engine::BlockRhs { dims: (n, k, bl), values: &data, rhs_stride: 0, scales, bias: w.bias };
            let buf = packer.pack(&g, x, (nr, kr, sr))?;
            Ok(PackedRhs::new(layout, buf))
        }

        /// Quantises and packs an `m x k` LHS (rows `lhs_stride` elements
        /// apart) in blocks of `bl`.
        pub fn pack_lhs(
            &self,
            m: usize,
            k: usize,
            bl: usize,
            lhs: &[V::Lhs],
            lhs_stride: usize,
            par: Parallelism,
        ) -> Result<PackedLhs> {
            let mut out = PackedLhs::empty();
            self.pack_lhs_into(m, k, bl, lhs, lhs_stride, par, &mut out)?;
            Ok(out)
        }

        /// As [`pack_lhs`](Self::pack_lhs), reusing `out`'s allocation.
        #[allow(clippy::too_many_arguments)]
        pub fn pack_lhs_into(
            &self,
            m: usize,
            k: usize,
            bl: usize,
            lhs: &[V::Lhs],
            lhs_stride: usize,
            par: Parallelism,
            out: &mut PackedLhs,
        ) -> Result<()> {
            check_lhs::<V>(m, k, lhs, lhs_stride)?;
            error::mul(lhs_stride, core::mem::size_of::<V::Lhs>(), "lhs stride")?;
            let layout = self.lhs_layout(m, k, bl)?;
            let g = engine::ensure_supported(&self.0.info)?;
            let (mr, kr, sr) = (layout.r, layout.kr, layout.sr);
            // The packed size must not overflow: padded rows * (k + 8 per block).
            error::mul(error::mul(m.div_ceil(mr), mr, "packed lhs")?, k + (k / bl) * 8, "packed lhs")?;
            // k % bl == 0 and k % kr == 0: check_k.
            let packer = V::LHS.packer();
            let size = packer.size(&g, m, k, bl, (mr, kr, sr));
            out.reset(layout, size);
            let x = engine::LhsSource { src: lhs, stride: lhs_stride, m, k, bl, blocking: (mr, kr, sr) };
            engine::pack_lhs(
                &g,
                &self.0.info,
                &packer,
                x,
                engine::LhsCalls::Blocks,
                out.data_mut().as_mut_slice(),
                par,
            )?;
            Ok(())
        }

        /// Every check [`pack_lhs_into`](Self::pack_lhs_into) and
        /// [`run`](Self::run) make for a dense `m x k` LHS and `rhs`, made
        /// once (the steady-state path of `PackedWeights::matmul`), except
        /// the finite-values check of the LHS: the caller vouches for it on
        /// every call (`engine::run_steady`).
        pub(crate) fn prepare(&self, m: usize, rhs: &PackedRhs) -> Result<Option<engine::Prepared>> {
            let l = *rhs.layout();
            let (n, k, bl) = (l.rows, l.k, l.bl);
            engine::check_prepared_sizes(m, n, k)?;
            rhs.expect(&self.rhs_layout(n, k, bl)?, self.0.info.name)?;
            let layout = self.lhs_layout(m, k, bl)?;
            let (t, g) = self.tiles()?;
            error::mul(error::mul(m.div_ceil(layout.r), layout.r, "packed lhs")?, k + (k / bl) * 8, "packed lhs")?;
            // k % bl == 0 and k % kr == 0: lhs_layout's check_k.
            let lhs_bytes = V::LHS.packer().size(&g, m, k, bl, (t.mr, t.kr, t.sr));
            let run = match self.0.fns.run {
                RunFn::F32(f) => engine::KernelRun::BlF32(f),
                RunFn::Void(f) => engine::KernelRun::Bl(f),
            };
            // GEMV kernels (m_step 1) one row per call at the packer's
            // offset of that row, as in `run`; every call asks its offset.
            let rows = engine::SteadyRows::Asked(engine::Offset::KBl(self.0.fns.lhs_offset), t.m_step == 1);
            let elems = (core::mem::size_of::<V::Lhs>(), core::mem::size_of::<V::Out>());
            let steady = engine::Steady::new(g, (engine::SteadyLhs::Packed(V::LHS.packer()), run, rows), elems);
            Ok(Some(engine::Prepared { m, n, k, bl, t, lhs_bytes, steady }))
        }

        /// `dst = clamp(lhs · wᵀ + bias)`: `dst` is `m x n`, rows `n` apart.
        pub fn run(
            &self,
            lhs: &PackedLhs,
            rhs: &PackedRhs,
            dst: &mut [V::Out],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            engine::PackedKernel::run(self, lhs, rhs, dst, clamp, par)
        }

        /// Packs the dense `m x k` LHS (blocks of the weights' `bl`) and
        /// runs: the one-call form.
        pub fn matmul(
            &self,
            m: usize,
            lhs: &[V::Lhs],
            rhs: &PackedRhs,
            dst: &mut [V::Out],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            let (k, bl) = (rhs.layout().k, rhs.layout().bl);
            let packed = self.pack_lhs(m, k, bl, lhs, k, par)?;
            self.run(&packed, rhs, dst, clamp, par)
        }
    }

    // SAFETY: the layouts are the kernel's (its tiles, the family's LHS
    // format and the entry's RHS format; both check k and bl: `check_k`),
    // the functions its own interface's (writing f32, or f16 through
    // `void*`); GEMV kernels (m_step 1) take one row per
    // call, from any row.
    unsafe impl<V: Arch> engine::PackedKernel for Kernel<V> {
        fn info(&self) -> &KernelInfo {
            &self.0.info
        }

        fn plan(&self, _: &PackedRhs, (m, n, k, bl): (usize, usize, usize, usize)) -> Result<engine::PackedPlan> {
            let layouts = (self.lhs_layout(m, k, bl)?, self.rhs_layout(n, k, bl)?);
            let (t, g) = self.tiles()?;
            let (run, out_bytes) = match self.0.fns.run {
                RunFn::F32(f) => (engine::KernelRun::BlF32(f), 4),
                RunFn::Void(f) => (engine::KernelRun::Bl(f), 2),
            };
            let offsets = (engine::Offset::KBl(self.0.fns.lhs_offset), engine::Offset::KBl(self.0.fns.rhs_offset));
            let fns = engine::PackedFns::new(run, offsets, t.m_step == 1, out_bytes);
            Ok(engine::PackedPlan { layouts, tiles: (t, g), fns })
        }
    }

    /// Weight row `row` of a packed RHS of either format, as f32
    /// (`value * scale + offset`; bias not included).
    pub(crate) fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        let l = *rhs.layout();
        if l.format != FORMAT_QAI4C32P && l.format != FORMAT_QAI4C32PS1S0NRX4 {
            return Err(crate::Error::bad_value("packed RHS format", l.format, "not a qai4c32 packed RHS"));
        }
        if row >= l.rows {
            return Err(crate::Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        let (nr, bl, nb) = (l.r, l.bl, l.k / l.bl);
        let block_bytes = nr * (bl / 2 + 8);
        let stride = nr * 4 + nb * block_bytes;
        let bytes = &rhs.as_bytes()[(row / nr) * stride..(row / nr + 1) * stride];
        let r = row % nr;
        let f = |at: usize| f32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let kb = l.kr / l.sr;
        for b in 0..nb {
            let base = b * block_bytes;
            let data = nr * bl / 2;
            let offset = f(base + data + r * 4);
            let stored = f(base + data + nr * 4 + r * 4);
            for kk in 0..bl {
                let v = if l.format == FORMAT_QAI4C32P {
                    // Byte j of a block: kr/sr-byte chunks, one per row in
                    // turn; within a chunk, the low nibble holds k0 and the
                    // high one k0 + 16 (signed, stored as `u ^ 8`).
                    let (half, within16) = (kk % 32 / 16, kk % 16);
                    let pos = kk / 32 * 16 + within16;
                    let (super_chunk, chunk_byte) = (pos / kb, pos % kb);
                    let byte = bytes[base + (super_chunk * nr + r) * kb + chunk_byte];
                    let nib = if half == 0 { byte << 4 } else { byte & 0xF0 };
                    ((nib as i8) >> 4) as f32
                } else {
                    // Groups of 4 values, 2 bytes per row, low nibble first,
                    // stored unsigned (`value + 8`).
                    let byte = bytes[base + (kk / 4) * nr * 2 + r * 2 + (kk % 4) / 2];
                    let nib = if kk % 2 == 0 { byte & 0xF } else { byte >> 4 };
                    nib as f32 - 8.0
                };
                // The qai4c32p packer stores scale / 16 (exact for normal scales).
                let scale = if l.format == FORMAT_QAI4C32P { stored * 16.0 } else { stored };
                out[b * bl + kk] = v * scale + offset;
            }
        }
        Ok(())
    }
}

/// A family's test module over its `Family` type: the shared tests below,
/// with the conformance tolerance's `half_ulp_out` and `rounds_per_block`.
#[cfg(all(test, target_arch = "aarch64"))]
macro_rules! qai4_tests {
    ($half_ulp_out:expr, $rounds_per_block:expr $(,)?) => {
        mod tests {
            use super::Family;
            use $crate::families::qsi8d32p_qai4c32p::tests as shared;

            #[test]
            fn conformance() {
                shared::conformance::<Family>($half_ulp_out, $rounds_per_block);
            }

            #[test]
            fn mixing_layouts_is_an_error() {
                shared::mixing_layouts_is_an_error::<Family>();
            }

            #[test]
            fn bad_input_is_an_error() {
                shared::bad_input_is_an_error::<Family>();
            }
        }
    };
}
#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) use qai4_tests;

/// The conformance and error tests, run by each family module.
#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) mod tests {
    use super::*;
    use crate::families::qai8dxp_common::tests::unpack_matches;
    use crate::formats::{Int4Encoding, NibbleOrder};
    use crate::packed::PackedLhs;
    use crate::par::Parallelism;
    use crate::testing::{self, Rng, THREADS, compare, tail_shapes};

    struct Weights {
        data: Vec<u8>,
        scales: Vec<f32>,
        offsets: Vec<f32>,
        bias: Vec<f32>,
    }

    fn weights(rng: &mut Rng, n: usize, k: usize, bl: usize) -> Weights {
        let blocks = n * (k / bl);
        Weights {
            data: rng.bytes(n * k / 2),
            scales: (0..blocks).map(|_| 0.01 + 0.05 * (rng.f32() + 1.0)).collect(),
            offsets: (0..blocks).map(|_| 0.1 * rng.f32()).collect(),
            bias: rng.vec_f32(n),
        }
    }

    fn bits<V: Variant>(v: &[V::Out]) -> Vec<u32> {
        v.iter().map(|x| V::out_f32(*x).to_bits()).collect()
    }

    /// `half_ulp_out`: half an ulp of the output type, relative (0 for f32).
    /// `rounds_per_block`: kernels that keep their running sum in the output
    /// type between blocks (one more output rounding per block).
    pub(crate) fn conformance<V: Arch>(half_ulp_out: f32, rounds_per_block: &[&str]) {
        testing::conformance(V::FAMILY, |info| {
            let per_block = rounds_per_block.contains(&info.name);
            let kernel = Kernel::<V>::by_name(info.name).unwrap();
            let lay = kernel.rhs_layout(1, 32, 32).map_err(|e| (0, e.to_string()))?;
            let lhs_lay = kernel.lhs_layout(1, 32, 32).map_err(|e| (0, e.to_string()))?;
            let (mr, nr) = (lhs_lay.r, lay.r);
            // n_step equals nr in this family.
            let m_step = kernel.tiles().map_err(|e| (0, e.to_string()))?.0.m_step;
            let mut shapes: Vec<(usize, usize, usize, usize)> =
                tail_shapes(mr, m_step, nr, nr, &[32, 96]).into_iter().map(|(m, n, k)| (m, n, k, 32)).collect();
            shapes.push((mr + 1, nr + 1, 128, 64));
            let mut rng = Rng::new(0x5a);
            let (mut cases, mut worst) = (0, 0f64);
            for (ci, &(m, n, k, bl)) in shapes.iter().enumerate() {
                let enc = if ci % 2 == 0 { Int4Encoding::Offset8 } else { Int4Encoding::Signed };
                let order = if ci % 3 == 1 { NibbleOrder::HighFirst } else { NibbleOrder::LowFirst };
                let wt = weights(&mut rng, n, k, bl);
                let w = Int4AsymBlock {
                    n,
                    k,
                    bl,
                    encoding: enc,
                    nibbles: order,
                    data: &wt.data,
                    scales: &wt.scales,
                    offsets: &wt.offsets,
                    bias: if ci % 4 == 3 { None } else { Some(&wt.bias) },
                };
                let lhs: Vec<V::Lhs> = rng.vec_f32(m * k).into_iter().map(V::lhs_from_f32).collect();
                let clamp = if ci % 5 == 4 { Clamp { min: -0.5, max: 0.5 } } else { Clamp::NONE };
                let mut want = vec![V::to_out(0.0); m * n];
                let mut mag = vec![0f32; m * n];
                reference_impl::<V>(m, &lhs, &w, clamp, &mut want, Some(&mut mag))
                    .map_err(|e| (cases, e.to_string()))?;
                let packed = kernel.pack_rhs(&w).map_err(|e| (cases, e.to_string()))?;
                let mut first: Option<Vec<u32>> = None;
                for threads in THREADS {
                    let par = Parallelism::Rayon(threads);
                    let mut dst = vec![V::to_out(f32::NAN); m * n];
                    let mut scratch = PackedLhs::empty();
                    kernel.pack_lhs_into(m, k, bl, &lhs, k, par, &mut scratch).map_err(|e| (cases, e.to_string()))?;
                    kernel.run(&scratch, &packed, &mut dst, clamp, par).map_err(|e| (cases, e.to_string()))?;
                    let got: Vec<f32> = dst.iter().map(|x| V::out_f32(*x)).collect();
                    let wantf: Vec<f32> = want.iter().map(|x| V::out_f32(*x)).collect();
                    let blocks = if per_block { (k / bl) as f32 } else { 0.0 };
                    let err = compare(&got, &wantf, |i, y| {
                        1e-5 * mag[i] + 2.0 * half_ulp_out * y.abs() + blocks * half_ulp_out * mag[i] + 1e-6
                    })
                    .map_err(|e| (cases, format!("m={m} n={n} k={k} bl={bl} threads={threads}: {e}")))?;
                    worst = worst.max(err);
                    match &first {
                        None => first = Some(bits::<V>(&dst)),
                        Some(f) if *f != bits::<V>(&dst) => {
                            return Err((cases, format!("m={m} n={n} k={k}: {threads} threads differ from 1")));
                        }
                        _ => {}
                    }
                }
                let wd = w.dequantize().unwrap();
                let unpack = |r, row: &mut [f32]| unpack_rhs_row(&packed, r, row);
                unpack_matches(cases, (n, k), &wd, " differs from the weights", unpack)?;
                cases += 1;
            }
            Ok((cases, worst))
        });
    }

    fn small_weights<'a>(data: &'a [u8], params: &'a [f32]) -> Int4AsymBlock<'a> {
        Int4AsymBlock {
            n: 4,
            k: 64,
            bl: 32,
            encoding: Int4Encoding::Offset8,
            nibbles: NibbleOrder::LowFirst,
            data,
            scales: params,
            offsets: params,
            bias: None,
        }
    }

    pub(crate) fn mixing_layouts_is_an_error<V: Arch>() {
        let f = crate::cpu::Features::current();
        let k1 = crate::testing::or_skip!(Kernel::<V>::select(4, &f));
        let w = small_weights(&[0x98; 4 * 32], &[0.5; 8]);
        let packed = k1.pack_rhs(&w).unwrap();
        let lhs = vec![V::lhs_from_f32(0.5); 2 * 64];
        for other in Kernel::<V>::all().filter(|k| k.info().supported(&f).is_ok()) {
            let mut dst = vec![V::to_out(0.0); 2 * 4];
            let r = other.matmul(2, &lhs, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential);
            if other.rhs_layout(4, 64, 32).unwrap() == *packed.layout() {
                r.unwrap();
            } else {
                assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{other:?}: {r:?}");
            }
        }
        // Another k, or another block length, is rejected too.
        let lhs2 = vec![V::lhs_from_f32(0.0); 2 * 96];
        let p = k1.pack_lhs(2, 96, 32, &lhs2, 96, Parallelism::Sequential).unwrap();
        let mut dst = vec![V::to_out(0.0); 2 * 4];
        assert!(k1.run(&p, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).is_err());
        let p = k1.pack_lhs(2, 64, 64, &lhs, 64, Parallelism::Sequential).unwrap();
        assert!(k1.run(&p, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).is_err());
    }

    pub(crate) fn bad_input_is_an_error<V: Arch>() {
        let f = crate::cpu::Features::current();
        let kern = crate::testing::or_skip!(Kernel::<V>::select(1, &f));
        let w = small_weights(&[0x88; 4 * 32], &[1.0; 8]);
        let packed = kern.pack_rhs(&w).unwrap();
        let seq = Parallelism::Sequential;
        let z = V::lhs_from_f32(0.0);
        let mut dst = vec![V::to_out(0.0); 4];
        assert!(kern.matmul(1, &[z; 63], &packed, &mut dst, Clamp::NONE, seq).is_err(), "short lhs");
        assert!(kern.matmul(1, &[z; 64], &packed, &mut dst[..3], Clamp::NONE, seq).is_err(), "short dst");
        assert!(kern.matmul(0, &[], &packed, &mut dst, Clamp::NONE, seq).is_err(), "m = 0");
        let nan = Clamp { min: f32::NAN, max: 1.0 };
        assert!(kern.matmul(1, &[z; 64], &packed, &mut dst, nan, seq).is_err(), "NaN clamp");
        let mut inf = vec![z; 64];
        inf[3] = V::lhs_from_f32(f32::INFINITY);
        assert!(kern.matmul(1, &inf, &packed, &mut dst, Clamp::NONE, seq).is_err(), "infinite lhs");
        assert!(kern.pack_rhs(&Int4AsymBlock { data: &w.data[..127], ..w }).is_err(), "short data");
        assert!(kern.pack_rhs(&Int4AsymBlock { bl: 16, ..w }).is_err(), "bl not a multiple of 32");
        assert!(kern.pack_rhs(&Int4AsymBlock { k: 48, ..w }).is_err(), "k not whole blocks");
        assert!(kern.pack_rhs(&Int4AsymBlock { n: usize::MAX / 2, ..w }).is_err(), "overflow");
        assert!(kern.pack_lhs(usize::MAX, 64, 32, &[z; 64], 64, seq).is_err(), "overflowing m");
        assert!(kern.pack_lhs(1, 64, 32, &[z; 64], 63, seq).is_err(), "stride < k");
        let mut r = vec![0f32; 64];
        assert!(unpack_rhs_row(&packed, 4, &mut r).is_err(), "row out of range");
        assert!(unpack_rhs_row(&packed, 0, &mut r[..63]).is_err(), "short row");
        // The reference takes the same inputs and rejects the same things.
        let mut d = vec![V::to_out(0.0); 4];
        assert!(reference_impl::<V>(1, &inf, &w, Clamp::NONE, &mut d, None).is_err());
        assert!(reference_impl::<V>(1, &[z; 64], &Int4AsymBlock { bl: 16, ..w }, Clamp::NONE, &mut d, None).is_err());
    }
}
