//! The seam between the high-level [`PackedWeights`](super::PackedWeights)
//! and the families: one [`Backend`] per family kernel kind, and the table
//! saying which families serve which weight kind.

use super::{Activation, WeightsRef};
use crate::error::{Error, Result};
use crate::packed::{Clamp, PackedLayout, PackedLhs, PackedRhs};
use crate::par::Parallelism;
use crate::registry::KernelInfo;

/// What the high-level API needs from one family kernel.
pub(crate) trait Backend: Send + Sync + core::fmt::Debug {
    /// Registry information.
    fn info(&self) -> &'static KernelInfo;
    /// A boxed copy (backends are small `Copy` handles).
    fn boxed(&self) -> Box<dyn Backend>;
    /// The packed-RHS layout for `n x k` weights.
    fn rhs_layout(&self, n: usize, k: usize) -> Result<PackedLayout>;
    /// Packs `w` (errors if the weight kind is not the family's).
    fn pack(&self, w: &WeightsRef<'_>) -> Result<PackedRhs>;
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
        scratch: &mut PackedLhs,
    ) -> Result<()>;
    /// Row `row` of the packed weights as f32.
    fn unpack_row(&self, rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()>;
}

pub(crate) fn wrong_kind(info: &KernelInfo, what: &str) -> Error {
    Error::WrongFamily { kernel: info.name, why: format!("does not take {what}") }
}

#[cfg(target_arch = "aarch64")]
mod families {
    use super::*;
    use crate::families::matmul_clamp_f32_qai8dxp_qsi4cxp as f32_qai8dxp_qsi4cxp;
    use crate::weights::ActivationMut;

    impl Backend for f32_qai8dxp_qsi4cxp::Kernel {
        fn info(&self) -> &'static KernelInfo {
            f32_qai8dxp_qsi4cxp::Kernel::info(self)
        }
        fn boxed(&self) -> Box<dyn Backend> {
            Box::new(*self)
        }
        fn rhs_layout(&self, n: usize, k: usize) -> Result<PackedLayout> {
            f32_qai8dxp_qsi4cxp::Kernel::rhs_layout(self, n, k)
        }
        fn pack(&self, w: &WeightsRef<'_>) -> Result<PackedRhs> {
            #[allow(unreachable_patterns)] // more weight kinds than this family takes
            match w {
                WeightsRef::Int4PerChannel(w) => self.pack_rhs(w),
                other => Err(wrong_kind(self.info(), other.kind_name())),
            }
        }
        #[allow(clippy::too_many_arguments)]
        fn run(
            &self,
            m: usize,
            x: Activation<'_>,
            rhs: &PackedRhs,
            y: ActivationMut<'_>,
            clamp: Clamp,
            par: Parallelism,
            scratch: &mut PackedLhs,
        ) -> Result<()> {
            let (Activation::F32(x), ActivationMut::F32(y)) = (x, y) else {
                return Err(wrong_kind(self.info(), "non-f32 activations"));
            };
            let k = rhs.layout().k;
            self.pack_lhs_into(m, k, x, k, par, scratch)?;
            f32_qai8dxp_qsi4cxp::Kernel::run(self, scratch, rhs, y, clamp, par)
        }
        fn unpack_row(&self, rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
            f32_qai8dxp_qsi4cxp::unpack_rhs_row(rhs, row, out)
        }
    }

    /// Every backend kernel serving weights of `kind` with `act` activations,
    /// from every family that takes them.
    pub(crate) fn candidates(kind: super::super::WeightKind, act: super::super::DType) -> Vec<Box<dyn Backend>> {
        use super::super::{DType, WeightKind};
        let mut v: Vec<Box<dyn Backend>> = Vec::new();
        if let (WeightKind::Int4PerChannel, DType::F32) = (kind, act) {
            v.extend(f32_qai8dxp_qsi4cxp::Kernel::all().map(|k| Box::new(k) as Box<dyn Backend>));
        }
        v
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) use families::candidates;

/// No kernels off aarch64: the reference path serves everything.
#[cfg(not(target_arch = "aarch64"))]
pub(crate) fn candidates(_: super::WeightKind, _: super::DType) -> Vec<Box<dyn Backend>> {
    Vec::new()
}
