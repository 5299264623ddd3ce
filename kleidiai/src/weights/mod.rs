//! Packed weights: pack once, keep, multiply many times, save and load.
//!
//! [`PackedWeights::pack`] picks the best kernels the CPU runs for the weight
//! kind (a GEMM kernel, and a GEMV kernel for `m == 1` that shares the packed
//! layout or gets its own), packs the weights for them, and
//! [`PackedWeights::matmul`] computes `y = x · wᵀ (+ bias)` with them, reusing
//! a [`Scratch`] so steady-state calls do not allocate. Where no kernel can
//! run (x86, a CPU without the tier, every tier switched off), the family's
//! portable reference computes the same thing.
//!
//! ```
//! use kleidiai::prelude::*;
//!
//! let (n, k) = (8, 64);
//! let data = vec![0x21u8; n * k / 2]; // every weight pair [1, 2]
//! let scales = vec![0.5f32; n];
//! let w = Weights::int4_per_channel(n, k, &data, &scales)?;
//! let packed = PackedWeights::pack(&w, &PackOptions::default())?;
//!
//! let x = vec![1.0f32; 2 * k];
//! let mut y = vec![0f32; 2 * n];
//! let mut scratch = Scratch::default();
//! packed.matmul(2, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE, Parallelism::Sequential, &mut scratch)?;
//! assert!((y[0] - 48.0).abs() < 0.5); // 32 * (1 + 2) * 0.5
//! println!("kernel for m=2: {}", packed.kernel_for(2).unwrap_or("reference"));
//! # Ok::<(), kleidiai::Error>(())
//! ```
//!
//! The constructors of [`Weights`] (another name of [`WeightsRef`]) take
//! the common layouts and check them; the variants of [`WeightsRef`] take
//! the structs of [`crate::formats`], for the other orders, encodings and
//! a bias.
//!
//! # Which activations each weight kind takes
//!
//! [`PackedWeights::pack`] packs for one activation type,
//! [`PackOptions::activation`] (default f32), and
//! [`PackedWeights::matmul`] then takes activations and writes outputs of
//! that type, both the same. Where the table says yes, an operation
//! exists on every CPU (kernels where the CPU has them, the portable
//! reference otherwise; [`policy`] says which kernels, best first); any
//! other pairing, and activations and outputs of different types, are an
//! error on every CPU.
//!
#![doc = include_str!("activations.md")]
//!
//! Asymmetric int4 blocks pack with a block length that is a multiple of
//! 32. Int8 activations (statically quantised) are not taken here: the
//! `qai8` families of [`crate::families`] take them, one kernel family at a
//! time.

mod backend;
mod f16_kxn;
pub mod file;
mod front;
mod given;
mod io;
mod kinds;
mod non_finite;
mod pack;
pub mod parts;
mod per_call;
pub mod policy;
mod run;
mod steady;
mod work;

use crate::cpu::Features;
use crate::error::{Error, FileError, Result};
use crate::families::engine::SteadyCall;
use crate::formats::ggml_blocks::{BlockQ8_0, QK8_0};
use crate::formats::{
    BlockInt4, BlockScales, FloatElement, FloatWeights, Int4AsymBlock, Int4Blocks, Int4Encoding, Int4PerChannel,
    Int8PerChannel, NibbleOrder, Order, Q4_0,
};
use crate::packed::{Clamp, PackedLayout, PackedRhs};
use crate::par::Parallelism;
use crate::registry::{self, TileKind};
use backend::{Backend, Work};
use core::sync::atomic::{AtomicU64, Ordering};
use half::{bf16, f16};
use per_call::PerCall;
use policy::Pairing;

pub use front::Weights;
pub use given::WeightsRef;
use given::{OwnedScales, OwnedWeights, operation_exists, reference, requantize_q8_0};
pub use kinds::{Activation, ActivationMut, DType, WeightKind};
use std::sync::Arc;

/// How [`PackedWeights::pack`] chooses, and what it keeps.
///
/// The default keeps **one packed copy** of the weights, about the size of
/// the weights as given (plus a bias, and the padding of a kernel's row
/// block), read by both the GEMM kernel (m > 1) and the GEMV kernel (m = 1)
/// of the pairing [`policy`] chooses. Each option that keeps more says what
/// it costs.
///
/// ```
/// use kleidiai::weights::{DType, PackOptions};
/// let opts = PackOptions { activation: DType::F32, non_sme_layout: true, ..PackOptions::default() };
/// assert!(!opts.keep_reference && !opts.keep_as_given);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct PackOptions {
    /// Element type of the activations and outputs the weights will meet.
    pub activation: DType,
    /// When the chosen layout is an SME one, also pack the best layout that
    /// does not need SME (ggml's second slot). Costs one more copy of the
    /// weights (about 1x the input bytes). It serves when SME is switched
    /// off later ([`crate::cpu::disable`]) and the hybrid SME + NEON mode of
    /// [`crate::ggml`]; without it, weights whose only layout cannot run any
    /// more fall back to the reference copy if one was kept, else the call
    /// is an [`Error::Unsupported`]. Default: false.
    pub non_sme_layout: bool,
    /// Keep a copy of the unpacked weights so the portable reference can
    /// serve when no packed layout can run (always kept when none was
    /// packed). Costs one more copy (the input bytes); weights kept as
    /// given (`keep_as_given`) need none. Default: false.
    pub keep_reference: bool,
    /// f16 and bf16 weights on kernels that take f32 (every f16 weight with
    /// f32 activations: upstream has no kernel for them; bf16 weights where
    /// no bf16 kernel runs): keep them as given, one copy the size of the
    /// input, and widen and pack a chunk of channels on every call, instead
    /// of the default widened f32 copy, twice the input bytes. The same
    /// results bit for bit; each call then does the widening and packing,
    /// many times the kernel's own work (25x to 47x the instructions at
    /// m = 1, 1.7x to 4x at m = 64, measured: the README's table).
    /// For weights too large to keep widened. Default: false.
    pub keep_as_given: bool,
    /// Where the chosen pairing names a GEMV kernel that takes fewer
    /// instructions for one row but reads another layout
    /// ([`policy::Pairing::faster_gemv`]), also pack that layout: one more
    /// copy of the weights (about 1x the input bytes) for a faster m = 1
    /// (about 2x fewer instructions for f32 weights on SME2; the README's
    /// table has each case). Default: false.
    pub separate_gemv: bool,
    /// Restrict kernel choice to these features (None: [`Features::current`]).
    pub features: Option<Features>,
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions {
            activation: DType::F32,
            non_sme_layout: false,
            keep_reference: false,
            keep_as_given: false,
            separate_gemv: false,
            features: None,
        }
    }
}

#[derive(Debug)]
struct Slot {
    gemm: Box<dyn Backend>,
    gemv: Option<Box<dyn Backend>>,
    rhs: PackedRhs,
}

/// Reusable scratch (the packed LHS): pass the same one to every call so
/// steady-state calls allocate nothing.
///
/// It also remembers the last call's checked plan: a call with the same
/// weights, `m` and CPU features as the one before, on one worker, skips
/// the checks the first made (kernel choice, blocking, layouts, sizes) and
/// goes straight to the packer and the kernel.
#[derive(Debug, Default)]
pub struct Scratch {
    work: Option<Work>,
    plan: Option<Plan>,
}

/// The checked plan of one `(weights, m, features)`, kept in a [`Scratch`].
#[derive(Debug)]
struct Plan {
    /// [`PackedWeights`]' unique id (never reused in the process, unlike
    /// an address).
    weights: u64,
    m: usize,
    features: Features,
    /// The disabled mask ([`crate::cpu::disabled_mask`]) that gives
    /// `features`: the steady state compares it instead of the features
    /// (`u32::MAX`, a mask of features that do not exist, when it changed
    /// while the plan was made).
    disabled: u32,
    /// `None`: the chosen kernel keeps the checked path on every call.
    ready: Option<Ready>,
}

/// A plan whose kernel has a steady-state path.
#[derive(Debug)]
struct Ready {
    slot: usize,
    gemv: bool,
    sme: bool,
    /// The kernel's packer needs finite activations
    /// ([`Backend::needs_finite_lhs`]).
    needs_finite: bool,
    /// The kernel's calls, bound to the slot's packed RHS, the activation
    /// type, this vector length and a packed-LHS buffer of their own.
    call: SteadyCall,
}

/// Source of [`PackedWeights`] ids.
static NEXT_WEIGHTS_ID: AtomicU64 = AtomicU64::new(1);

fn next_weights_id() -> u64 {
    NEXT_WEIGHTS_ID.fetch_add(1, Ordering::Relaxed)
}

/// Weights packed for the best kernels of this CPU. See the module docs.
#[derive(Debug)]
pub struct PackedWeights {
    /// Unique in the process (see [`Plan`]).
    id: u64,
    n: usize,
    k: usize,
    kind: WeightKind,
    activation: DType,
    slots: Vec<Slot>,
    reference: Option<OwnedWeights>,
    /// The output channels whose weights (values, scales, offsets, bias)
    /// hold a NaN or an infinity, ascending: their outputs are NaN
    /// ([`non_finite`]). Usually empty.
    non_finite_channels: Vec<usize>,
    /// What matmul does with non-finite inputs.
    policy: NonFinite,
}

/// What [`PackedWeights::matmul`] does with a NaN or an infinity among its
/// inputs (set with [`PackedWeights::set_non_finite`]; not saved in files).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum NonFinite {
    /// NaN in every output whose activation row or output channel holds
    /// one, the same on every kernel and the reference (see
    /// [`PackedWeights::matmul`]). Costs a scan of the activations per call
    /// (about 0.3 aarch64 instructions per f32 value).
    #[default]
    Propagate,
    /// [`Error::NonFinite`] naming the first activation row (and value) or
    /// output channel holding one, before anything is computed or written.
    /// The same scan per call.
    Error,
    /// What the kernel gives: kernel-dependent (a NaN may come out finite,
    /// as ±3.4e38 or as NaN), as ggml's own path. No scan: nothing per call.
    /// Some kernels refuse non-finite activations (an error).
    Kernel,
}

/// The backend of kernel `name`, if it serves weights of `kind` with `act`
/// activations.
fn backend_for(kind: WeightKind, act: DType, name: &str) -> Option<Box<dyn Backend>> {
    backend::candidates(kind, act)
        .into_iter()
        .chain(backend::rounding_candidates(kind, act))
        .find(|b| b.info().name == name)
}

/// Zero weights of `kind`, `n x k` (block length `bl`), in the input format
/// the kind's packers take.
fn zero_weights(kind: WeightKind, n: usize, k: usize, bl: usize) -> Result<OwnedWeights> {
    let nk = crate::error::mul(n, k, "weights")?;
    let blocks = || crate::error::mul(n, k / bl.max(1), "block scales");
    Ok(match kind {
        WeightKind::F32 => OwnedWeights::F32 { n, k, data: vec![0.0; nk], bias: None },
        WeightKind::F16 => OwnedWeights::F16 { n, k, data: vec![f16::ZERO; nk], bias: None },
        WeightKind::Bf16 => OwnedWeights::Bf16 { n, k, data: vec![bf16::ZERO; nk], bias: None },
        WeightKind::Int8PerChannel => {
            OwnedWeights::Int8 { n, k, order: Order::NxK, data: vec![0; nk], scales: vec![1.0; n], bias: None }
        }
        WeightKind::Int4PerChannel => OwnedWeights::Int4 {
            n,
            k,
            order: Order::NxK,
            encoding: Int4Encoding::Signed,
            data: vec![0; crate::error::mul(n, k.div_ceil(2), "weights")?],
            scales: vec![1.0; n],
            bias: None,
        },
        WeightKind::Int4Block => OwnedWeights::Int4Blocks {
            n,
            k,
            bl,
            order: Order::NxK,
            encoding: Int4Encoding::Signed,
            data: vec![0; crate::error::mul(n, k.div_ceil(2), "weights")?],
            scales: OwnedScales::F16(vec![f16::ONE; blocks()?]),
            bias: None,
        },
        WeightKind::Int4AsymBlock => OwnedWeights::Int4Asym {
            n,
            k,
            bl,
            encoding: Int4Encoding::Offset8,
            nibbles: NibbleOrder::LowFirst,
            data: vec![0; nk / 2],
            scales: vec![1.0; blocks()?],
            offsets: vec![0.0; blocks()?],
            bias: None,
        },
    })
}

/// The bytes `b`'s packer writes for `layout` (of weights of `kind`), which
/// a stored payload of `payload` bytes must match exactly: a kernel trusts
/// the packed size its layout implies. Every packed RHS format is a run of
/// `r`-row blocks of one size, so packing one block of zero rows gives it.
fn packed_len(b: &dyn Backend, kind: WeightKind, layout: &PackedLayout, payload: u64, slot: usize) -> Result<usize> {
    let (r, k) = (layout.r.max(1), layout.k);
    let blocks = layout.rows.div_ceil(r);
    // Every packed format holds at least 4 bits per (padded) weight: a
    // shorter payload is wrong, and the bound keeps the probe below within
    // a small multiple of the payload.
    if (payload as u128) < (blocks as u128) * (r as u128) * (k as u128) / 2 {
        let why = format!("payload of {payload} bytes is too short for {layout}");
        return Err(Error::packed_file(FileError::Layout { slot, why }));
    }
    let probe = zero_weights(kind, r, k, layout.bl)?;
    let block = b.pack(&probe.as_ref())?;
    crate::error::mul(block.as_bytes().len(), blocks, "packed size")
}

/// The bytes of weights kept as given: n x k values of two bytes, and an
/// f32 bias per channel when `bias`.
fn per_call_len(layout: &PackedLayout, bias: bool) -> Result<usize> {
    let values = crate::error::mul(crate::error::mul(layout.rows, layout.k, "weights")?, 2, "weights")?;
    values.checked_add(if bias { layout.rows * 4 } else { 0 }).ok_or_else(|| Error::Overflow("packed size".into()))
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Row `row` of unpacked weights as f32.
fn dequantized_row(w: &WeightsRef<'_>, row: usize) -> Result<Vec<f32>> {
    let (_, k) = w.shape();
    Ok(match w {
        WeightsRef::Int4PerChannel(w) => (0..k).map(|c| w.value_unchecked(row, c) as f32 * w.scales[row]).collect(),
        WeightsRef::Int8PerChannel(w) => {
            let all = w.dequantize()?;
            all[row * k..(row + 1) * k].to_vec()
        }
        WeightsRef::Int4Block(w) => {
            let all = w.dequantize()?;
            all[row * k..(row + 1) * k].to_vec()
        }
        WeightsRef::Int4AsymBlock(w) => {
            let all = w.dequantize()?;
            all[row * k..(row + 1) * k].to_vec()
        }
        other => {
            let (all, _) = other.to_f32()?;
            all[row * k..(row + 1) * k].to_vec()
        }
    })
}

#[cfg(test)]
mod tests;
