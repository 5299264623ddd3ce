//! What a call may reuse from the last one (kept in the caller's
//! [`Scratch`](super::Scratch)): the buffers the backends share.

use crate::packed::{PackedLhs, PackedRhs};

/// What a kernel call may reuse from one call to the next (kept in the
/// caller's [`Scratch`](super::Scratch)): the packed LHS, and the buffers of
/// weights packed per call ([`super::per_call`]).
#[derive(Debug)]
pub(crate) struct Work {
    /// The packed LHS.
    pub lhs: PackedLhs,
    /// Buffers of [`super::per_call::PerCall`].
    pub per_call: Buffers,
}

impl Default for Work {
    fn default() -> Self {
        Work { lhs: PackedLhs::empty(), per_call: Default::default() }
    }
}

/// Reused between calls by [`super::per_call::PerCall`] (part of the
/// caller's `Scratch`).
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    pub(super) widened: Vec<f32>,
    pub(super) bias: Vec<f32>,
    pub(super) packed: Option<PackedRhs>,
    pub(super) out: Vec<f32>,
    pub(super) row: Vec<f32>,
}
