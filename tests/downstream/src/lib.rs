//! What a downstream inference engine writes on top of `kleidiai`: a linear
//! layer that packs its weights once and multiplies activations by them.

use kleidiai::weights::{Activation, ActivationMut, PackOptions, PackedWeights, Scratch, WeightsRef};
use kleidiai::{Clamp, Parallelism};

/// A linear layer `y = x · wᵀ` with packed weights and f32 activations.
pub struct Linear {
    weights: PackedWeights,
    scratch: Scratch,
}

impl Linear {
    /// Packs `w` for the best kernels of this CPU.
    pub fn new(w: &WeightsRef<'_>) -> kleidiai::Result<Linear> {
        Ok(Linear { weights: PackedWeights::pack(w, &PackOptions::default())?, scratch: Scratch::default() })
    }

    /// `m` rows of `k` inputs to `m` rows of `n` outputs.
    pub fn forward(&mut self, m: usize, x: &[f32]) -> kleidiai::Result<Vec<f32>> {
        let mut y = vec![0f32; m * self.weights.n()];
        self.weights.matmul(
            m,
            Activation::F32(x),
            ActivationMut::F32(&mut y),
            Clamp::NONE,
            Parallelism::Rayon(0),
            &mut self.scratch,
        )?;
        Ok(y)
    }

    /// The kernel serving `m` rows here (`None`: the portable reference).
    pub fn kernel(&self, m: usize) -> Option<&'static str> {
        self.weights.kernel_for(m)
    }
}
