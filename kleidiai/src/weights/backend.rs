//! The seam between the high-level [`PackedWeights`](super::PackedWeights)
//! and the families: one [`Backend`] per family kernel kind, and the table
//! saying which families serve which weight kind.

pub(crate) use super::work::Work;
use super::{Activation, WeightsRef};
use crate::error::{Error, Result};
use crate::families::engine::{Fast, Prepared};
use crate::packed::{Clamp, PackedLayout, PackedRhs};
use crate::par::Parallelism;
use crate::registry::KernelInfo;

/// What the high-level API needs from one family kernel.
pub(crate) trait Backend: Send + Sync + core::fmt::Debug {
    /// Registry information.
    fn info(&self) -> &'static KernelInfo;
    /// A boxed copy (backends are small `Copy` handles).
    fn boxed(&self) -> Box<dyn Backend>;
    /// The packed-RHS layout for `n x k` weights (`bl`: block length of
    /// block-quantised weights, else 0).
    fn rhs_layout(&self, n: usize, k: usize, bl: usize) -> Result<PackedLayout>;
    /// Packs `w` (errors if the weight kind is not the family's).
    fn pack(&self, w: &WeightsRef<'_>) -> Result<PackedRhs>;
    /// [`pack`](Self::pack) into `out`, reusing its allocation where the
    /// family can (the weights packed per call do this on every call).
    fn pack_reusing(&self, w: &WeightsRef<'_>, out: &mut PackedRhs) -> Result<()> {
        *out = self.pack(w)?;
        Ok(())
    }
    /// `y (m x n) = x (m x k) · wᵀ` (+ bias packed in `rhs`), clamped.
    #[allow(clippy::too_many_arguments)] // one internal seam; each argument is distinct
    fn run(
        &self,
        m: usize,
        x: Activation<'_>,
        rhs: &PackedRhs,
        y: super::ActivationMut<'_>,
        clamp: Clamp,
        par: Parallelism,
        work: &mut Work,
    ) -> Result<()>;
    /// The order of dense weights its packer reads without transposing
    /// them first (what weights packed per call are widened into).
    fn rhs_order(&self) -> crate::formats::Order {
        crate::formats::Order::NxK
    }
    /// Whether the family's packers take a bias (two block-int4 families
    /// take none: weights with a bias go to the others).
    fn takes_bias(&self) -> bool {
        !matches!(self.info().family, "matmul_clamp_f32_qsi8d32p_qsi4c32p" | "matmul_clamp_f32_f16p_qsi4c32p")
    }
    /// Whether the family's LHS packer needs finite activations (the
    /// asymmetric int4 families: their checked path refuses others, and
    /// their steady-state path runs only on activations the non-finite
    /// policy scanned).
    fn needs_finite_lhs(&self) -> bool {
        matches!(self.info().family, "matmul_clamp_f32_qsi8d32p_qai4c32p" | "matmul_clamp_f16_qsi8d32p_qai4c32p")
    }
    /// Row `row` of the packed weights as f32.
    fn unpack_row(&self, rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()>;
    /// The steady-state form of [`run`](Self::run), where the family has one.
    fn fast(&self) -> Option<&dyn Fast> {
        None
    }
}

pub(crate) fn wrong_kind(info: &KernelInfo, what: &str) -> Error {
    Error::WrongFamily { kernel: info.name, why: format!("does not take {what}") }
}

#[cfg(target_arch = "aarch64")]
mod families {
    use super::*;
    use crate::families as fam;
    use crate::formats::{FloatWeights, Order};
    use crate::weights::{ActivationMut, DType, WeightKind};

    /// Weights a family takes, from the high-level enum: `$pat => $expr`
    /// arms giving the family's input, or the kind error.
    macro_rules! weights_for {
        ($self:ident, $w:ident, { $($pat:pat $(if $g:expr)? => $e:expr),+ $(,)? }) => {{
            #[allow(unreachable_patterns)]
            match $w {
                $($pat $(if $g)? => $e,)+
                other => return Err(wrong_kind($self.info(), other.kind_name())),
            }
        }};
    }

    /// The Backend methods every family shares. `nobl` families have no
    /// block length in their layouts; `@bl` ones take it.
    macro_rules! common {
        ($module:ident, nobl) => {
            common!(@base $module);
            fn rhs_layout(&self, n: usize, k: usize, _bl: usize) -> Result<PackedLayout> {
                fam::$module::Kernel::rhs_layout(self, n, k)
            }
        };
        ($module:ident, bl) => {
            common!(@base $module);
            fn rhs_layout(&self, n: usize, k: usize, bl: usize) -> Result<PackedLayout> {
                fam::$module::Kernel::rhs_layout(self, n, k, bl)
            }
        };
        (@base $module:ident) => {
            fn info(&self) -> &'static KernelInfo {
                fam::$module::Kernel::info(self)
            }
            fn boxed(&self) -> Box<dyn Backend> {
                Box::new(*self)
            }
            fn unpack_row(&self, rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
                fam::$module::unpack_rhs_row(rhs, row, out)
            }
        };
    }

    /// `Backend::pack_reusing` for a float family: f32 weights (what
    /// `weights::per_call` hands it, chunk after chunk) reuse `out`.
    macro_rules! reuse_fn {
        (reuse) => {
            fn rhs_order(&self) -> Order {
                self.float_kernel().rhs_order()
            }
            fn pack_reusing(&self, w: &WeightsRef<'_>, out: &mut PackedRhs) -> Result<()> {
                match w {
                    WeightsRef::F32(f) => self.float_kernel().pack_rhs_into(f, out),
                    other => {
                        *out = self.pack(other)?;
                        Ok(())
                    }
                }
            }
        };
    }

    /// `Backend::fast` for a family with a [`Fast`] impl (`fast` flag of
    /// `packed_lhs!` and `direct_lhs!`).
    macro_rules! fast_fn {
        (fast) => {
            fn fast(&self) -> Option<&dyn Fast> {
                Some(self)
            }
        };
    }

    /// [`Fast`] for a family: its `Kernel::prepare` (`float $t`: the
    /// float families' shared glue's, for elements of `$t`).
    macro_rules! fast {
        ($module:ident) => {
            fast!(@impl $module, |k, m, rhs| k.prepare(m, rhs));
        };
        ($module:ident, float $t:ty) => {
            fast!(@impl $module, |k, m, rhs| k.float_kernel().prepare::<$t>(m, rhs));
        };
        (@impl $module:ident, |$pk:ident, $m:ident, $r:ident| $prep:expr) => {
            // SAFETY: `prepare` is the family's own, which returns a
            // `Prepared` only once every check of its checked run passed for
            // `m` rows and `rhs` on this thread (the family's steady-state
            // tests compare the two paths' outputs); `info` is the kernel's
            // registry entry (Backend's).
            unsafe impl Fast for fam::$module::Kernel {
                fn info(&self) -> &'static KernelInfo {
                    Backend::info(self)
                }
                fn prepare(&self, $m: usize, $r: &PackedRhs) -> Result<Option<Prepared>> {
                    let $pk = self;
                    $prep
                }
            }
        };
    }

    /// How a packed-LHS family's `pack_lhs_into` is called: without or with
    /// the block length (the LHS is quantised per block of `bl`).
    macro_rules! pack_lhs_call {
        (nobl, $s:ident, $m:ident, $k:ident, $bl:ident, $x:ident, $par:ident, $out:ident) => {
            $s.pack_lhs_into($m, $k, $x, $k, $par, $out)
        };
        (lhsbl, $s:ident, $m:ident, $k:ident, $bl:ident, $x:ident, $par:ident, $out:ident) => {
            $s.pack_lhs_into($m, $k, $bl, $x, $k, $par, $out)
        };
    }

    /// The `Backend` impl of a family: `common!`, the optional `fast` and
    /// `reuse` methods, `pack` (`$pack` with `$s`, `$w` the kernel and the
    /// weights) and `run`, which takes the activations of kind `$act` (else
    /// an error) and goes on with `$run` (the names given, the activations
    /// unwrapped).
    macro_rules! backend {
        (
            $module:ident, $act:ident, $layout:tt $(, $fast:ident)? $(; $reuse:ident)?,
            |$s:ident, $w:ident| $pack:block,
            run(&$self:ident, $m:ident, $x:ident, $rhs:ident, $y:ident, $clamp:ident, $par:ident, $work:ident) $run:block
        ) => {
            impl Backend for fam::$module::Kernel {
                common!($module, $layout);
                $(fast_fn!($fast);)?
                $(reuse_fn!($reuse);)?
                fn pack(&self, w: &WeightsRef<'_>) -> Result<PackedRhs> {
                    let ($s, $w) = (self, w);
                    $pack
                }
                #[allow(clippy::too_many_arguments)]
                fn run(
                    &$self,
                    $m: usize,
                    x: Activation<'_>,
                    $rhs: &PackedRhs,
                    y: ActivationMut<'_>,
                    $clamp: Clamp,
                    $par: Parallelism,
                    $work: &mut Work,
                ) -> Result<()> {
                    let (Activation::$act($x), ActivationMut::$act($y)) = (x, y) else {
                        return Err(wrong_kind($self.info(), "these activation types"));
                    };
                    $run
                }
            }
        };
    }

    /// A family whose kernels read a packed LHS: pack into `scratch`, run.
    macro_rules! packed_lhs {
        ($module:ident, $act:ident, $layout:tt, $lhs:tt $(, $fast:ident)? $(; $reuse:ident)?, |$s:ident, $w:ident| $pack:block) => {
            backend!($module, $act, $layout $(, $fast)? $(; $reuse)?, |$s, $w| $pack, run(&self, m, x, rhs, y, clamp, par, work) {
                let (k, bl) = (rhs.layout().k, rhs.layout().bl);
                let _ = bl;
                let scratch = &mut work.lhs;
                pack_lhs_call!($lhs, self, m, k, bl, x, par, scratch)?;
                fam::$module::Kernel::run(self, scratch, rhs, y, clamp, par)
            });
        };
    }

    /// A family whose kernels read the LHS directly.
    macro_rules! direct_lhs {
        ($module:ident, $act:ident $(, $fast:ident)? $(; $reuse:ident)?, |$s:ident, $w:ident| $pack:block) => {
            backend!($module, $act, nobl $(, $fast)? $(; $reuse)?, |$s, $w| $pack, run(&self, m, x, rhs, y, clamp, par, _work) {
                let k = rhs.layout().k;
                fam::$module::Kernel::run(self, m, x, k, rhs, y, clamp, par)
            });
        };
    }

    /// f32 families take f32 weights, or f16 weights widened (exactly) to f32.
    fn pack_as_f32(
        w: &WeightsRef<'_>,
        pack: impl FnOnce(&FloatWeights<'_, f32>) -> Result<PackedRhs>,
    ) -> Result<PackedRhs> {
        match w {
            WeightsRef::F32(w) => pack(w),
            other => {
                let (n, k) = other.shape();
                let (data, bias) = other.to_f32()?;
                pack(&FloatWeights { n, k, order: Order::NxK, data: &data, bias: bias.as_deref() })
            }
        }
    }

    fn is_dense(w: &WeightsRef<'_>) -> bool {
        matches!(w, WeightsRef::F32(_) | WeightsRef::F16(_) | WeightsRef::Bf16(_))
    }

    // Dense float weights, f32 activations.
    packed_lhs!(matmul_clamp_f32_f32p_f32p, F32, nobl, nobl, fast; reuse, |s, w| {
        weights_for!(s, w, { x if is_dense(x) => pack_as_f32(x, |w| s.pack_rhs(w)) })
    });
    direct_lhs!(matmul_clamp_f32_f32_f32p, F32, fast; reuse, |s, w| {
        weights_for!(s, w, { x if is_dense(x) => pack_as_f32(x, |w| s.pack_rhs(w)) })
    });
    // bf16 weights (exactly representable) on the bf16 kernels.
    packed_lhs!(matmul_clamp_f32_bf16p_bf16p, F32, nobl, nobl, fast, |s, w| {
        weights_for!(s, w, { x @ (WeightsRef::Bf16(_) | WeightsRef::F32(_)) => pack_as_f32(x, |w| s.pack_rhs(w)) })
    });
    // ggml's F16 weights go to the SME2 bf16 kernel (rounded to bf16 there).
    packed_lhs!(matmul_clamp_fp32_bf16p_bf16p, F32, nobl, nobl, fast, |s, w| {
        weights_for!(s, w, {
            x @ (WeightsRef::Bf16(_) | WeightsRef::F16(_) | WeightsRef::F32(_)) => pack_as_f32(x, |w| s.pack_rhs(w))
        })
    });
    // f16 activations.
    packed_lhs!(matmul_clamp_f16_f16p_f16p, F16, nobl, nobl, fast, |s, w| {
        weights_for!(s, w, { WeightsRef::F16(w) => s.pack_rhs(w) })
    });
    direct_lhs!(matmul_clamp_f16_f16_f16p, F16, fast, |s, w| {
        weights_for!(s, w, { WeightsRef::F16(w) => s.pack_rhs(w) })
    });
    // Quantised weights.
    packed_lhs!(matmul_clamp_f32_qai8dxp_qsi8cxp, F32, nobl, nobl, fast, |s, w| {
        weights_for!(s, w, { WeightsRef::Int8PerChannel(w) => s.pack_rhs(w) })
    });
    packed_lhs!(matmul_clamp_f32_qai8dxp_qsi4cxp, F32, nobl, nobl, fast, |s, w| {
        weights_for!(s, w, { WeightsRef::Int4PerChannel(w) => s.pack_rhs(w) })
    });
    packed_lhs!(matmul_clamp_bf16_qai8dxp_qsi4cxp, Bf16, nobl, nobl, fast, |s, w| {
        weights_for!(s, w, { WeightsRef::Int4PerChannel(w) => s.pack_rhs(w) })
    });
    packed_lhs!(matmul_clamp_f32_qai8dxp_qsi4c32p, F32, bl, nobl, fast, |s, w| {
        weights_for!(s, w, { WeightsRef::Int4Block(w) => s.pack_rhs(*w) })
    });
    packed_lhs!(matmul_clamp_bf16_qai8dxp_qsi4c32p, Bf16, bl, nobl, |s, w| {
        weights_for!(s, w, { WeightsRef::Int4Block(w) => s.pack_rhs(*w) })
    });
    packed_lhs!(matmul_clamp_f32_qsi8d32p_qsi4c32p, F32, bl, lhsbl, fast, |s, w| {
        weights_for!(s, w, { WeightsRef::Int4Block(w) => s.pack_rhs(*w) })
    });
    packed_lhs!(matmul_clamp_f32_f16p_qsi4c32p, F32, bl, nobl, |s, w| {
        weights_for!(s, w, { WeightsRef::Int4Block(w) => s.pack_rhs(*w) })
    });
    packed_lhs!(matmul_clamp_f32_qsi8d32p_qai4c32p, F32, bl, lhsbl, fast, |s, w| {
        weights_for!(s, w, { WeightsRef::Int4AsymBlock(w) => s.pack_rhs(w) })
    });
    packed_lhs!(matmul_clamp_f16_qsi8d32p_qai4c32p, F16, bl, lhsbl, fast, |s, w| {
        weights_for!(s, w, { WeightsRef::Int4AsymBlock(w) => s.pack_rhs(w) })
    });

    // The families with a steady-state path (the others keep the checked
    // one on every call).
    fast!(matmul_clamp_f32_f32p_f32p, float f32);
    fast!(matmul_clamp_f32_f32_f32p, float f32);
    fast!(matmul_clamp_f16_f16p_f16p, float half::f16);
    fast!(matmul_clamp_f16_f16_f16p, float half::f16);
    fast!(matmul_clamp_f32_qai8dxp_qsi8cxp);
    fast!(matmul_clamp_f32_qai8dxp_qsi4cxp);
    fast!(matmul_clamp_fp32_bf16p_bf16p);
    fast!(matmul_clamp_f32_bf16p_bf16p);
    fast!(matmul_clamp_f32_qsi8d32p_qai4c32p);
    fast!(matmul_clamp_f16_qsi8d32p_qai4c32p);
    fast!(matmul_clamp_bf16_qai8dxp_qsi4cxp);
    fast!(matmul_clamp_f32_qai8dxp_qsi4c32p);
    fast!(matmul_clamp_f32_qsi8d32p_qsi4c32p);

    /// The kernels of `it`, boxed (a loop: no iterator chain instantiated
    /// per family).
    fn boxed<K: Backend + 'static>(it: impl Iterator<Item = K>) -> Vec<Box<dyn Backend>> {
        let mut v: Vec<Box<dyn Backend>> = Vec::new();
        for k in it {
            v.push(Box::new(k));
        }
        v
    }

    /// Every kernel serving weights of `kind` with `act` activations.
    pub(crate) fn candidates(kind: WeightKind, act: DType) -> Vec<Box<dyn Backend>> {
        use WeightKind as K;
        let mut v: Vec<Box<dyn Backend>> = Vec::new();
        match (kind, act) {
            (K::F32 | K::F16, DType::F32) => {
                v.extend(boxed(fam::matmul_clamp_f32_f32p_f32p::Kernel::all()));
                v.extend(boxed(fam::matmul_clamp_f32_f32_f32p::Kernel::all()));
            }
            (K::Bf16, DType::F32) => {
                v.extend(boxed(fam::matmul_clamp_fp32_bf16p_bf16p::Kernel::all()));
                v.extend(boxed(fam::matmul_clamp_f32_bf16p_bf16p::Kernel::all()));
                // bf16 widens exactly: the f32 kernels serve where bf16 ones cannot.
                v.extend(boxed(fam::matmul_clamp_f32_f32p_f32p::Kernel::all()));
                v.extend(boxed(fam::matmul_clamp_f32_f32_f32p::Kernel::all()));
            }
            (K::F16, DType::F16) => {
                v.extend(boxed(fam::matmul_clamp_f16_f16p_f16p::Kernel::all()));
                v.extend(boxed(fam::matmul_clamp_f16_f16_f16p::Kernel::all()));
            }
            (K::Int8PerChannel, DType::F32) => v.extend(boxed(fam::matmul_clamp_f32_qai8dxp_qsi8cxp::Kernel::all())),
            (K::Int4PerChannel, DType::F32) => v.extend(boxed(fam::matmul_clamp_f32_qai8dxp_qsi4cxp::Kernel::all())),
            (K::Int4PerChannel, DType::Bf16) => v.extend(boxed(fam::matmul_clamp_bf16_qai8dxp_qsi4cxp::Kernel::all())),
            (K::Int4Block, DType::F32) => {
                v.extend(boxed(fam::matmul_clamp_f32_qai8dxp_qsi4c32p::Kernel::all()));
                v.extend(boxed(fam::matmul_clamp_f32_qsi8d32p_qsi4c32p::Kernel::all()));
                v.extend(boxed(fam::matmul_clamp_f32_f16p_qsi4c32p::Kernel::all()));
            }
            (K::Int4Block, DType::Bf16) => v.extend(boxed(fam::matmul_clamp_bf16_qai8dxp_qsi4c32p::Kernel::all())),
            (K::Int4AsymBlock, DType::F32) => v.extend(boxed(fam::matmul_clamp_f32_qsi8d32p_qai4c32p::Kernel::all())),
            (K::Int4AsymBlock, DType::F16) => v.extend(boxed(fam::matmul_clamp_f16_qsi8d32p_qai4c32p::Kernel::all())),
            _ => {}
        }
        v
    }

    /// Kernels that take weights of `kind` with `act` activations but round
    /// them on packing (F16 weights packed as bf16): never chosen by
    /// `PackedWeights::pack`, only named by ggml's tables (ggml packs F16 as
    /// bf16 for its SME2 kernel).
    pub(crate) fn rounding_candidates(kind: WeightKind, act: DType) -> Vec<Box<dyn Backend>> {
        match (kind, act) {
            (WeightKind::F16, DType::F32) => boxed(fam::matmul_clamp_fp32_bf16p_bf16p::Kernel::all()),
            _ => Vec::new(),
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) use families::{candidates, rounding_candidates};

/// No kernels off aarch64: the reference path serves everything.
#[cfg(not(target_arch = "aarch64"))]
pub(crate) fn candidates(_: super::WeightKind, _: super::DType) -> Vec<Box<dyn Backend>> {
    Vec::new()
}

#[cfg(not(target_arch = "aarch64"))]
pub(crate) fn rounding_candidates(_: super::WeightKind, _: super::DType) -> Vec<Box<dyn Backend>> {
    Vec::new()
}
