//! The LLM-shaped workload the `demo` and `llm_layer` examples share: one
//! linear layer (`y = x · wᵀ`, `n` outputs by `k` inputs) with weights in
//! ggml Q4_0 or Q8_0 blocks, f32 or f16, packed once and multiplied by `m`
//! activation rows, checked against an exact reference on sampled rows.
#![allow(dead_code)] // each example uses a part

use half::f16;
use kleidiai::formats::{BlockInt4, FloatWeights, Order, Q4_0};
use kleidiai::ggml::{self, BlockQ4_0, BlockQ8_0};
use kleidiai::weights::{Activation, ActivationMut, DType, PackOptions, PackedWeights, Scratch, WeightsRef};
use kleidiai::{Clamp, Parallelism};
use std::time::{Duration, Instant};

/// The weight formats of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// ggml Q4_0 blocks, f32 activations.
    Q4_0,
    /// ggml Q8_0 blocks, f32 activations (requantised per row when packed).
    Q8_0,
    /// f32 weights and activations.
    F32,
    /// f16 weights, f16 activations and outputs.
    F16,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Q4_0, Kind::Q8_0, Kind::F32, Kind::F16];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Q4_0 => "Q4_0",
            Kind::Q8_0 => "Q8_0",
            Kind::F32 => "f32",
            Kind::F16 => "f16",
        }
    }

    /// Largest error, relative to the largest |reference| of the sampled
    /// outputs, that the kernels may show (with margin):
    /// - f32: only the summation order differs;
    /// - Q4_0, Q8_0: the kernels quantise the activations to int8 (per row or
    ///   per block of 32), about 0.4% of each activation's range, and Q8_0 is
    ///   requantised per row (as ggml's KleidiAI path does);
    /// - f16: f16 activations and outputs, and the NEON f16 kernels
    ///   accumulate in f16 (11-bit significand over k terms).
    pub fn tolerance(self) -> f64 {
        match self {
            Kind::F32 => 1e-5,
            Kind::Q4_0 | Kind::Q8_0 => 2e-2,
            Kind::F16 => 2e-2,
        }
    }

    fn dtype(self) -> DType {
        if self == Kind::F16 { DType::F16 } else { DType::F32 }
    }
}

/// Deterministic data from a seed (the repository's one test generator,
/// `fastrand`), so every run sees the same data.
pub struct Rng(fastrand::Rng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(fastrand::Rng::with_seed(seed))
    }
    /// Uniform in [-1, 1).
    pub fn next(&mut self) -> f32 {
        self.0.f32() * 2.0 - 1.0
    }
    pub fn vec(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len).map(|_| self.next() * scale).collect()
    }
}

/// The weights of one layer in one format, and the exact values they stand
/// for (the reference multiplies by these).
pub struct Layer {
    pub kind: Kind,
    pub n: usize,
    pub k: usize,
    q4: Vec<BlockQ4_0>,
    q8: Vec<BlockQ8_0>,
    f32: Vec<f32>,
    f16: Vec<f16>,
    /// The values the stored weights represent, N x K.
    pub exact: Vec<f32>,
}

impl Layer {
    /// Random weights (uniform, scale 0.05: the order of an LLM projection's)
    /// stored as `kind`.
    pub fn new(kind: Kind, n: usize, k: usize, seed: u64) -> Layer {
        let w = Rng::new(seed).vec(n * k, 0.05);
        let mut l = Layer { kind, n, k, q4: vec![], q8: vec![], f32: vec![], f16: vec![], exact: vec![] };
        match kind {
            Kind::Q4_0 => {
                l.q4 = ggml::quantize_q4_0(&w, k).expect("k is a multiple of 32");
                l.exact = l.q4.iter().flat_map(|b| b.dequantize()).collect();
            }
            Kind::Q8_0 => {
                l.q8 = ggml::quantize_q8_0(&w, k).expect("k is a multiple of 32");
                l.exact = l.q8.iter().flat_map(|b| b.dequantize()).collect();
            }
            Kind::F32 => {
                l.exact = w.clone();
                l.f32 = w;
            }
            Kind::F16 => {
                l.f16 = w.iter().map(|v| f16::from_f32(*v)).collect();
                l.exact = l.f16.iter().map(|v| v.to_f32()).collect();
            }
        }
        l
    }

    /// The weights as the packing API takes them.
    pub fn weights(&self) -> WeightsRef<'_> {
        let (n, k) = (self.n, self.k);
        match self.kind {
            Kind::Q4_0 => {
                WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: ggml::q4_0_as_bytes(&self.q4), bias: None }))
            }
            Kind::Q8_0 => WeightsRef::GgmlQ8_0 { n, k, blocks: &self.q8 },
            Kind::F32 => WeightsRef::F32(FloatWeights { n, k, order: Order::NxK, data: &self.f32, bias: None }),
            Kind::F16 => WeightsRef::F16(FloatWeights { n, k, order: Order::NxK, data: &self.f16, bias: None }),
        }
    }

    /// Packs for the best kernels of this CPU.
    pub fn pack(&self) -> kleidiai::Result<PackedWeights> {
        PackedWeights::pack(&self.weights(), &PackOptions { activation: self.kind.dtype(), ..Default::default() })
    }
}

/// Activations of one layer call, in the element type the kind takes.
pub struct Input {
    pub m: usize,
    /// The values the kernel reads (f16-rounded for f16 layers).
    pub exact: Vec<f32>,
    x16: Vec<f16>,
}

impl Input {
    pub fn new(kind: Kind, m: usize, k: usize, seed: u64) -> Input {
        let x = Rng::new(seed).vec(m * k, 1.0);
        let x16: Vec<f16> = if kind == Kind::F16 { x.iter().map(|v| f16::from_f32(*v)).collect() } else { vec![] };
        let exact = if kind == Kind::F16 { x16.iter().map(|v| v.to_f32()).collect() } else { x };
        Input { m, exact, x16 }
    }
}

/// Output rows as f32.
pub struct Output {
    y32: Vec<f32>,
    y16: Vec<f16>,
}

impl Output {
    pub fn new(m: usize, n: usize) -> Output {
        Output { y32: vec![0.0; m * n], y16: vec![f16::ZERO; m * n] }
    }
    /// Row `i` (n values) as f32.
    pub fn row(&self, kind: Kind, i: usize, n: usize) -> Vec<f32> {
        if kind == Kind::F16 {
            self.y16[i * n..(i + 1) * n].iter().map(|v| v.to_f32()).collect()
        } else {
            self.y32[i * n..(i + 1) * n].to_vec()
        }
    }
}

/// One `matmul` call, timed.
pub fn run(
    w: &PackedWeights,
    kind: Kind,
    x: &Input,
    y: &mut Output,
    par: Parallelism,
    scratch: &mut Scratch,
) -> kleidiai::Result<Duration> {
    let t = Instant::now();
    if kind == Kind::F16 {
        w.matmul(x.m, Activation::F16(&x.x16), ActivationMut::F16(&mut y.y16), Clamp::NONE, par, scratch)?;
    } else {
        w.matmul(x.m, Activation::F32(&x.exact), ActivationMut::F32(&mut y.y32), Clamp::NONE, par, scratch)?;
    }
    Ok(t.elapsed())
}

/// Rows of `0..m` the reference checks: all of them up to `max`, else an
/// even spread that includes the first and the last.
pub fn sample_rows(m: usize, max: usize) -> Vec<usize> {
    if m <= max || max <= 1 {
        return (0..m.min(max)).collect();
    }
    let mut v: Vec<usize> = (0..max).map(|i| i * (m - 1) / (max - 1)).collect();
    v.dedup();
    v
}

/// Error of the sampled output rows against the exact product (f64 sums of
/// the values the stored weights and activations stand for).
#[derive(Clone, Copy, Debug, Default)]
pub struct Error {
    /// Largest |y - reference|.
    pub max_abs: f64,
    /// `max_abs` over the largest |reference|.
    pub max_rel: f64,
}

pub fn check(layer: &Layer, x: &Input, y: &Output, rows: &[usize]) -> Error {
    let (n, k) = (layer.n, layer.k);
    let (mut max_abs, mut max_ref) = (0f64, 0f64);
    for &i in rows {
        let got = y.row(layer.kind, i, n);
        let xi = &x.exact[i * k..(i + 1) * k];
        for (j, g) in got.iter().enumerate() {
            let wj = &layer.exact[j * k..(j + 1) * k];
            let r: f64 = xi.iter().zip(wj).map(|(a, b)| *a as f64 * *b as f64).sum();
            max_abs = max_abs.max((*g as f64 - r).abs());
            max_ref = max_ref.max(r.abs());
        }
    }
    Error { max_abs, max_rel: if max_ref > 0.0 { max_abs / max_ref } else { max_abs } }
}

/// Milliseconds, for printing.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
