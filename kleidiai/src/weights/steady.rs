//! The steady state of [`PackedWeights::matmul`]: the plan a [`Scratch`]
//! keeps for these weights, `m` and the CPU features (the kernel and, for
//! a family with a steady-state path, every check made once), and the
//! call of a ready plan after the few checks each call still needs.

use super::*;
use crate::families::engine::{Values, ValuesMut};

impl PackedWeights {
    /// The plan for `(m, f)`: the kernel [`pick`](Self::pick) chooses and,
    /// when its family has a steady-state path, everything it checks once.
    /// Reuses `old`'s packed-LHS allocation.
    pub(super) fn plan(&self, m: usize, f: &Features, old: Option<Plan>) -> Plan {
        let lhs = old.and_then(|p| p.ready).map(|r| r.call.into_lhs()).unwrap_or_default();
        let ready = (|| {
            let (slot, gemv) = self.pick_index(m, f)?;
            let b = self.backend(slot, gemv)?;
            // pick_index checked that the CPU runs the kernel.
            let (fast, rhs) = (b.fast()?, &self.slots[slot].rhs);
            let call = match self.activation {
                DType::F32 => SteadyCall::bind::<f32>(fast, m, rhs, lhs),
                DType::F16 => SteadyCall::bind::<f16>(fast, m, rhs, lhs),
                DType::Bf16 => SteadyCall::bind::<bf16>(fast, m, rhs, lhs),
            }?;
            let (sme, needs_finite) = (b.info().is_sme(), b.needs_finite_lhs());
            Some(Ready { slot, gemv, sme, needs_finite, call })
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
        // above). An invalid clamp goes to the checked path, which names it.
        let mut y = y;
        self.run_ready(r, &x, &mut y, clamp, par, false).then_some(Ok(()))
    }

    /// The kernel call of a ready plan, unless an operand rules it out
    /// (more than one worker, with `scan` a non-finite activation, or what
    /// [`SteadyCall::run`] compares: lengths, element type, clamp, vector
    /// length): false then, nothing done.
    ///
    /// The caller has checked that `r` is the plan these weights made for
    /// this `m` and the current features.
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
        let (m, n, k) = r.call.dims();
        // `prepare` checked that m * n * k does not overflow; a short `x`
        // is not all finite.
        if (par != Parallelism::Sequential && crate::par::workers(par, m * n * k, r.sme) != 1)
            || (scan && !non_finite::all_finite(m, k, x))
        {
            return false;
        }
        let Some(slot) = self.slots.get(r.slot) else { return false };
        if r.gemv && slot.gemv.is_none() {
            return false;
        }
        let xv = match x {
            Activation::F32(v) => Values::of(v),
            Activation::F16(v) => Values::of(v),
            Activation::Bf16(v) => Values::of(v),
        };
        let yv = match y {
            ActivationMut::F32(v) => ValuesMut::of(v),
            ActivationMut::F16(v) => ValuesMut::of(v),
            ActivationMut::Bf16(v) => ValuesMut::of(v),
        };
        r.call.run(xv, yv, &slot.rhs, clamp)
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
        // that gave them) the current features; its call compares the
        // activation type with the weights' (the one it was bound to).
        if plan.weights != self.id
            || plan.m != m
            || plan.disabled != crate::cpu::disabled_mask()
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
