//! The steady state of [`PackedWeights::matmul`]: the plan a [`Scratch`]
//! keeps for these weights, `m` and the CPU features (the kernel and, for
//! a family with a steady-state path, every check made once), and the
//! call of a ready plan after the few checks each call still needs.

use super::*;

impl PackedWeights {
    /// The plan for `(m, f)`: the kernel [`pick`](Self::pick) chooses and,
    /// when its family has a steady-state path, everything it checks once.
    /// Reuses `old`'s packed-LHS allocation.
    pub(super) fn plan(&self, m: usize, f: &Features, old: Option<Plan>) -> Plan {
        let mut lhs = old.and_then(|p| p.ready).map(|r| r.lhs).unwrap_or_default();
        let ready = (|| {
            let (slot, gemv) = self.pick_index(m, f)?;
            let b = self.backend(slot, gemv)?;
            let prepared = b.fast()?.prepare(m, &self.slots[slot].rhs).ok()??;
            let info = b.info();
            // pick_index checked that the CPU runs the kernel.
            let vector_kind = crate::families::engine::VectorKind::of(info);
            let vector_bytes = vector_kind.live_bytes();
            lhs.reset_zeroed(prepared.lhs_bytes);
            let needs_finite = b.needs_finite_lhs();
            Some(Ready { slot, gemv, vector_bytes, vector_kind, sme: info.is_sme(), needs_finite, prepared, lhs })
        })();
        let mask = crate::cpu::disabled_mask();
        let disabled = if crate::cpu::features_with_disabled(mask) == *f { mask } else { u32::MAX };
        Plan { weights: self.id, m, features: *f, disabled, ready }
    }

    /// The steady-state call: `None` when it does not apply (no plan with a
    /// fast path for these weights, `m` and features; more than one worker;
    /// another vector length; inputs too short, which the checked path
    /// reports; activations not known to be finite for a packer that needs
    /// them), then the caller takes the checked path.
    #[allow(clippy::too_many_arguments)] // matmul's own arguments, the features it read, the scan's verdict
    pub(super) fn matmul_planned(
        &self,
        m: usize,
        x: Activation<'_>,
        y: ActivationMut<'_>,
        clamp: Clamp,
        par: Parallelism,
        f: &Features,
        scratch: &mut Scratch,
        finite: bool,
    ) -> Option<Result<()>> {
        // Inputs too short (or sizes that overflow) go to the checked path,
        // which names the problem, before a plan sizes anything by `m`.
        if m.checked_mul(self.k).is_none_or(|v| x.len() < v) || m.checked_mul(self.n).is_none_or(|v| y.len() < v) {
            return None;
        }
        let same = matches!(&scratch.plan, Some(p) if p.weights == self.id && p.m == m && p.features == *f);
        if !same {
            scratch.plan = Some(self.plan(m, f, scratch.plan.take()));
        }
        let r = scratch.plan.as_mut()?.ready.as_mut()?;
        // Activations nobody scanned go where the packer's needs are checked.
        if !finite && r.needs_finite {
            return None;
        }
        // The plan is for these weights, `m` and `f` (made or compared
        // above); matmul checked the activation type. An invalid clamp goes
        // to the checked path, which names it.
        let mut y = y;
        self.run_ready(r, &x, &mut y, clamp, par, false).then_some(Ok(()))
    }

    /// The kernel call of a ready plan, unless an operand rules it out
    /// (lengths, clamp, more than one worker, another vector length, or
    /// with `scan` a non-finite activation): false then, nothing done.
    ///
    /// The caller has checked that `r` is the plan these weights made for
    /// this `m` and the current features, and that `x` and `y` have the
    /// weights' activation type.
    #[inline(always)]
    fn run_ready(
        &self,
        r: &mut Ready,
        x: &Activation<'_>,
        y: &mut ActivationMut<'_>,
        clamp: Clamp,
        par: Parallelism,
        scan: bool,
    ) -> bool {
        let p = &r.prepared;
        // `prepare` checked that p.m * p.n * p.k does not overflow.
        if x.len() < p.m * p.k
            || y.len() < p.m * p.n
            || !clamp.is_valid()
            || (par != Parallelism::Sequential && crate::par::workers(par, p.m * p.n * p.k, r.sme) != 1)
            || r.vector_kind.live_bytes() != r.vector_bytes
            || (scan && !non_finite::all_finite(p.m, p.k, x))
        {
            return false;
        }
        let Some(slot) = self.slots.get(r.slot) else { return false };
        if r.gemv && slot.gemv.is_none() {
            return false;
        }
        run_steady(p, x, y, r.lhs.as_mut_ptr(), &slot.rhs, clamp);
        true
    }

    /// The steady state of [`matmul`](Self::matmul), in the caller's frame:
    /// true when it made the call, false when the checked path must (which
    /// decides everything again, errors included). It runs only on the
    /// plan `scratch` kept for these weights and `m` with the same CPU
    /// features, a kernel with a steady-state path, activations and outputs
    /// of the weights' type and length, a valid clamp, one worker, the
    /// vector length the plan saw and activations the policy lets through
    /// (scanned and all finite, or [`NonFinite::Kernel`] for a packer that
    /// does not need them).
    #[inline(always)]
    pub(super) fn steady(
        &self,
        m: usize,
        x: &Activation<'_>,
        y: &mut ActivationMut<'_>,
        clamp: Clamp,
        par: Parallelism,
        scratch: &mut Scratch,
    ) -> bool {
        let Some(plan) = scratch.plan.as_mut() else { return false };
        let Some(r) = plan.ready.as_mut() else { return false };
        let scan = match self.policy {
            NonFinite::Propagate => true,
            NonFinite::Error if self.non_finite_channels.is_empty() => true,
            NonFinite::Kernel if !r.needs_finite => false,
            _ => return false,
        };
        // The plan is for these weights, this `m` and (through the mask
        // that gave them) the current features.
        if plan.weights != self.id
            || plan.m != m
            || plan.disabled != crate::cpu::disabled_mask()
            || x.dtype() != self.activation
            || y.dtype() != self.activation
            || !self.run_ready(r, x, y, clamp, par, scan)
        {
            return false;
        }
        if self.policy == NonFinite::Propagate && !self.non_finite_channels.is_empty() {
            non_finite::fill(m, self.n, y, &[], &self.non_finite_channels);
        }
        true
    }
}

/// The steady-state call of a ready plan: `engine::run_steady` on the
/// activations' values. The caller ([`PackedWeights::run_ready`]) vouches
/// for everything its contract asks (see the SAFETY comment).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn run_steady(
    p: &Prepared,
    x: &Activation<'_>,
    y: &mut ActivationMut<'_>,
    lhs: *mut u8,
    rhs: &PackedRhs,
    clamp: Clamp,
) {
    let (xp, xb) = match x {
        Activation::F32(v) => (v.as_ptr().cast::<u8>(), 4),
        Activation::F16(v) => (v.as_ptr().cast::<u8>(), 2),
        Activation::Bf16(v) => (v.as_ptr().cast::<u8>(), 2),
    };
    let (yp, yb) = match y {
        ActivationMut::F32(v) => (v.as_mut_ptr().cast::<u8>(), 4),
        ActivationMut::F16(v) => (v.as_mut_ptr().cast::<u8>(), 2),
        ActivationMut::Bf16(v) => (v.as_mut_ptr().cast::<u8>(), 2),
    };
    debug_assert_eq!(p.elems(), (xb, yb), "a plan for other activation types");
    // SAFETY: `p` is what the slot backend's `fast()` `prepare` returned
    // for this slot's packed RHS (the caller's check: the plan is keyed by
    // these weights' unique id, m and the features it was chosen with, and
    // weights never change), so it describes that kernel's calls; the
    // features are unchanged, so the CPU runs the kernel, at the vector
    // length it saw (the caller compared it); x and y have the weights'
    // activation type (the caller's check), the one that backend's
    // `prepare` is for (so of `p.elems()`), and hold m x k and m x n values
    // (the caller compared their lengths); `lhs` has the `p.lhs_bytes` the
    // plan asked for, 64-byte aligned; the clamp is a valid range (the
    // caller's check); activations a packer needs finite were scanned (the
    // caller's check).
    unsafe { crate::families::engine::run_steady(p, xp, lhs, rhs, yp, clamp) };
}

/// No kernels off aarch64, so no plan is ever ready.
#[cfg(not(target_arch = "aarch64"))]
fn run_steady(_: &Prepared, _: &Activation<'_>, _: &mut ActivationMut<'_>, _: *mut u8, _: &PackedRhs, _: Clamp) {
    unreachable!("no steady-state plans off aarch64")
}
