//! What activations, outputs and weights are: element types and weight kinds.

use super::*;

/// Element type of activations and outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum DType {
    /// `f32`.
    #[default]
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
}

impl DType {
    pub(super) fn id(self) -> u32 {
        self as u32
    }
    pub(super) fn from_id(id: u32) -> Option<DType> {
        [DType::F32, DType::F16, DType::Bf16].into_iter().find(|d| d.id() == id)
    }
    /// The name errors print (as `Debug` does).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::Bf16 => "Bf16",
        }
    }
}

/// Activations (the LHS, `m x k`, dense).
#[derive(Clone, Copy, Debug)]
pub enum Activation<'a> {
    /// f32 values.
    F32(&'a [f32]),
    /// f16 values.
    F16(&'a [f16]),
    /// bf16 values.
    Bf16(&'a [bf16]),
}

/// Outputs (`m x n`, dense).
#[derive(Debug)]
pub enum ActivationMut<'a> {
    /// f32 values.
    F32(&'a mut [f32]),
    /// f16 values.
    F16(&'a mut [f16]),
    /// bf16 values.
    Bf16(&'a mut [bf16]),
}

impl Activation<'_> {
    /// Number of values.
    pub(super) fn len(&self) -> usize {
        match self {
            Activation::F32(v) => v.len(),
            Activation::F16(v) => v.len(),
            Activation::Bf16(v) => v.len(),
        }
    }
    pub(super) fn dtype(&self) -> DType {
        match self {
            Activation::F32(_) => DType::F32,
            Activation::F16(_) => DType::F16,
            Activation::Bf16(_) => DType::Bf16,
        }
    }
}

impl ActivationMut<'_> {
    /// Number of values.
    pub(super) fn len(&self) -> usize {
        match self {
            ActivationMut::F32(v) => v.len(),
            ActivationMut::F16(v) => v.len(),
            ActivationMut::Bf16(v) => v.len(),
        }
    }
    pub(super) fn dtype(&self) -> DType {
        match self {
            ActivationMut::F32(_) => DType::F32,
            ActivationMut::F16(_) => DType::F16,
            ActivationMut::Bf16(_) => DType::Bf16,
        }
    }
    pub(super) fn reborrow(&mut self) -> ActivationMut<'_> {
        match self {
            ActivationMut::F32(v) => ActivationMut::F32(v),
            ActivationMut::F16(v) => ActivationMut::F16(v),
            ActivationMut::Bf16(v) => ActivationMut::Bf16(v),
        }
    }
}

/// The kinds of weights [`PackedWeights`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WeightKind {
    /// Dense f32.
    F32,
    /// Dense f16.
    F16,
    /// Dense bf16.
    Bf16,
    /// Int8 values with one f32 scale per output channel (also ggml Q8_0,
    /// requantised per row the way ggml's KleidiAI path does).
    Int8PerChannel,
    /// Int4 values with one f32 scale per output channel.
    Int4PerChannel,
    /// Int4 values with one scale per block of `bl` along K (also ggml Q4_0).
    Int4Block,
    /// Asymmetric int4 blocks: scale and offset per block.
    Int4AsymBlock,
}

impl WeightKind {
    pub(super) const ALL: [WeightKind; 7] = [
        WeightKind::F32,
        WeightKind::F16,
        WeightKind::Bf16,
        WeightKind::Int8PerChannel,
        WeightKind::Int4PerChannel,
        WeightKind::Int4Block,
        WeightKind::Int4AsymBlock,
    ];
    pub(super) fn id(self) -> u32 {
        match self {
            WeightKind::F32 => 1,
            WeightKind::F16 => 2,
            WeightKind::Bf16 => 3,
            WeightKind::Int8PerChannel => 4,
            WeightKind::Int4PerChannel => 5,
            WeightKind::Int4Block => 6,
            WeightKind::Int4AsymBlock => 7,
        }
    }
    pub(super) fn from_id(id: u32) -> Option<WeightKind> {
        Self::ALL.into_iter().find(|k| k.id() == id)
    }
    /// The name errors print (as `Debug` does).
    pub fn name(self) -> &'static str {
        match self {
            WeightKind::F32 => "F32",
            WeightKind::F16 => "F16",
            WeightKind::Bf16 => "Bf16",
            WeightKind::Int8PerChannel => "Int8PerChannel",
            WeightKind::Int4PerChannel => "Int4PerChannel",
            WeightKind::Int4Block => "Int4Block",
            WeightKind::Int4AsymBlock => "Int4AsymBlock",
        }
    }
}
