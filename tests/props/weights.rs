//! [`PackedWeights`] over random weights of every kind, every activation
//! type, random pack options and random calls (valid or not): an invalid
//! call is an `Err`, on every CPU; a valid one is `Ok` on every CPU and
//! matches the family reference (bit for bit where the reference itself
//! runs, within the kernels' documented tolerance elsewhere). Also `row`
//! and the save/load round trip.

use crate::ensure;
use crate::harness::{self, Cases, check};
use crate::strat::{self, Len, Rng, Special};
use half::{bf16, f16};
use kleidiai::cpu::{CpuFeature, Features};
use kleidiai::formats::{
    BlockInt4, BlockScales, FloatWeights, Int4AsymBlock, Int4Blocks, Int4Encoding, Int4PerChannel, Int8PerChannel,
    NibbleOrder, Order, Q4_0,
};
use kleidiai::ggml::{BlockQ8_0, QK8_0};
use kleidiai::weights::{Activation, ActivationMut, DType, PackOptions, PackedWeights, Scratch, WeightsRef};
use kleidiai::{Clamp, Error, Parallelism, families as fam};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The weight inputs `WeightsRef` takes (Q8_0 and Q4_0 are ggml bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    F32,
    F16,
    Bf16,
    Int8,
    Q8_0,
    Int4,
    Blocks,
    Q4_0,
    Asym,
}

impl Kind {
    pub const ALL: [Kind; 9] =
        [Kind::F32, Kind::F16, Kind::Bf16, Kind::Int8, Kind::Q8_0, Kind::Int4, Kind::Blocks, Kind::Q4_0, Kind::Asym];

    /// Activation types some operation takes with this kind.
    pub fn activations(self) -> &'static [DType] {
        match self {
            Kind::F32 | Kind::Bf16 | Kind::Int8 | Kind::Q8_0 => &[DType::F32],
            Kind::F16 | Kind::Asym => &[DType::F32, DType::F16],
            Kind::Int4 | Kind::Blocks | Kind::Q4_0 => &[DType::F32, DType::Bf16],
        }
    }
}

/// Random weights: shape, encodings, buffer lengths, special values.
#[derive(Clone, Debug)]
pub struct WSpec {
    pub kind: Kind,
    pub n: usize,
    pub k: usize,
    pub bl: usize,
    pub kxn: bool,
    pub offset8: bool,
    pub high_first: bool,
    pub bf16_scales: bool,
    pub data: Len,
    pub scales: Len,
    pub offsets: Len,
    pub bias: Option<Len>,
    pub special: Special,
    pub seed: u64,
}

fn kind() -> impl Strategy<Value = Kind> {
    proptest::sample::select(Kind::ALL.to_vec())
}

/// What a weights strategy draws: the ranges of a valid shape, and how
/// often a shape, a buffer or a value is off.
#[derive(Clone, Copy, Debug)]
pub struct Draw {
    /// n, inclusive.
    pub n: (usize, usize),
    /// k in blocks of the block length (block formats), inclusive.
    pub blocks: (usize, usize),
    /// k of the other formats, inclusive.
    pub k: (usize, usize),
    /// Weight of an arbitrary (zero, huge, off-block) shape against 6 of a
    /// valid one.
    pub wild: u32,
    /// Weight of an exact buffer length against 5 of a short, long or empty
    /// one (None: always exact).
    pub exact: Option<u32>,
    /// NaN, infinities or huge values mixed into the data at times.
    pub specials: bool,
}

/// Small shapes, every kind of bad argument.
pub const SMALL: Draw = Draw { n: (1, 12), blocks: (1, 2), k: (1, 40), wild: 1, exact: Some(14), specials: true };
/// Somewhat larger shapes, every kind of bad argument.
pub const MEDIUM: Draw = Draw { n: (1, 24), blocks: (1, 3), k: (1, 80), wild: 1, exact: Some(14), specials: true };

/// `(n, k, bl)`: mostly a valid shape for `kind`, sometimes anything.
fn shape(kind: Kind, d: Draw) -> BoxedStrategy<(usize, usize, usize)> {
    let valid = (d.n.0..=d.n.1, d.blocks.0..=d.blocks.1, d.k.0..=d.k.1, 0usize..2).prop_map(
        move |(n, blocks, k, b)| match kind {
            Kind::Q8_0 | Kind::Q4_0 => (n, 32 * blocks, 32),
            Kind::Blocks | Kind::Asym => {
                let bl = [32, 64][b];
                (n, bl * blocks, bl)
            }
            _ => (n, k, 0),
        },
    );
    let wild =
        (strat::wild_dim(), strat::wild_dim(), prop_oneof![Just(0usize), Just(2), Just(16), Just(32), 1usize..=96]);
    if d.wild == 0 { valid.boxed() } else { prop_oneof![6 => valid, d.wild => wild].boxed() }
}

pub fn wspec(d: Draw) -> impl Strategy<Value = WSpec> {
    kind().prop_flat_map(move |kind| wspec_of(kind, d))
}

/// Weights of one kind.
pub fn wspec_of(kind: Kind, d: Draw) -> impl Strategy<Value = WSpec> {
    let len = || match d.exact {
        Some(w) => strat::len_weighted(w).boxed(),
        None => Just(Len::Exact).boxed(),
    };
    (
        Just(kind),
        shape(kind, d),
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        (len(), len(), len(), proptest::option::of(len())),
        strat::special_if(d.specials),
        any::<u64>(),
    )
        .prop_map(|(kind, (n, k, bl), (kxn, offset8, high_first, bf16_scales), lens, special, seed)| WSpec {
            kind,
            n,
            k,
            bl,
            kxn,
            offset8,
            high_first,
            bf16_scales,
            data: lens.0,
            scales: lens.1,
            offsets: lens.2,
            bias: lens.3,
            special,
            seed,
        })
}

/// What the buffers of `s` must hold (None: the size overflows `usize`).
struct Needs {
    data: Option<usize>,
    scales: Option<usize>,
    offsets: Option<usize>,
    bias: Option<usize>,
}

fn needs(s: &WSpec) -> Needs {
    let (n, k) = (s.n, s.k);
    let nk = strat::mul(n, k);
    let nibbles = if s.kxn { strat::mul(k, n.div_ceil(2)) } else { strat::mul(n, k.div_ceil(2)) };
    let blocks = |bl: usize| k.checked_div(bl).and_then(|b| strat::mul(n, b));
    let none = Some(0);
    let (data, scales, offsets) = match s.kind {
        Kind::F32 | Kind::F16 | Kind::Bf16 => (nk, none, none),
        Kind::Int8 => (nk, Some(n), none),
        Kind::Q8_0 => (strat::mul(n, k / QK8_0), none, none),
        Kind::Int4 => (nibbles, Some(n), none),
        Kind::Blocks => (nibbles, blocks(s.bl), none),
        Kind::Q4_0 => (strat::mul(n, k / 32).and_then(|b| strat::mul(b, 18)), none, none),
        Kind::Asym => (strat::mul(n, k / 2), blocks(s.bl), blocks(s.bl)),
    };
    Needs { data, scales, offsets, bias: Some(n) }
}

/// Whether the format's `validate` must accept `s` (an independent model of
/// the documented rules, with lengths as allocated).
pub fn format_valid(s: &WSpec) -> bool {
    let (n, k, bl) = (s.n, s.k, s.bl);
    let dims = n > 0
        && k > 0
        && match s.kind {
            Kind::Q8_0 | Kind::Q4_0 => k % 32 == 0,
            Kind::Blocks => bl > 0 && bl % 32 == 0 && k % bl == 0,
            Kind::Asym => bl > 0 && bl % 2 == 0 && k % bl == 0,
            _ => true,
        };
    if !dims {
        return false;
    }
    let nd = needs(s);
    let fits = |need: Option<usize>, len: Len| need.is_some_and(|need| len.of(Some(need)) >= need);
    let bias_ok = s.bias.is_none_or(|b| fits(nd.bias, b)) || s.kind == Kind::Q8_0;
    fits(nd.data, s.data)
        && (nd.scales == Some(0) || fits(nd.scales, s.scales))
        && (nd.offsets == Some(0) || fits(nd.offsets, s.offsets))
        && bias_ok
}

/// Owned buffers of one [`WSpec`].
pub struct OwnedW {
    pub spec: WSpec,
    f32s: Vec<f32>,
    f16s: Vec<f16>,
    bf16s: Vec<bf16>,
    i8s: Vec<i8>,
    u8s: Vec<u8>,
    scales: Vec<f32>,
    scales16: Vec<f16>,
    scalesb: Vec<bf16>,
    offsets: Vec<f32>,
    bias: Option<Vec<f32>>,
    bias16: Option<Vec<f16>>,
    biasb: Option<Vec<bf16>>,
    q8: Vec<BlockQ8_0>,
}

impl OwnedW {
    pub fn build(spec: &WSpec) -> OwnedW {
        let s = spec.clone();
        let nd = needs(&s);
        let mut rng = Rng::new(s.seed);
        let data_len = s.data.of(nd.data);
        let mut w = OwnedW {
            spec: s.clone(),
            f32s: Vec::new(),
            f16s: Vec::new(),
            bf16s: Vec::new(),
            i8s: Vec::new(),
            u8s: Vec::new(),
            scales: Vec::new(),
            scales16: Vec::new(),
            scalesb: Vec::new(),
            offsets: Vec::new(),
            bias: None,
            bias16: None,
            biasb: None,
            q8: Vec::new(),
        };
        let bias = s.bias.map(|b| rng.vec_f32(b.of(nd.bias)));
        let mut scales = rng.scales(s.scales.of(nd.scales));
        match s.kind {
            Kind::F32 | Kind::F16 | Kind::Bf16 => {
                let v = rng.data(data_len, s.special);
                w.f16s = v.iter().map(|x| f16::from_f32(*x)).collect();
                w.bf16s = v.iter().map(|x| bf16::from_f32(*x)).collect();
                w.f32s = v;
                w.bias16 = bias.as_ref().map(|b| b.iter().map(|x| f16::from_f32(*x)).collect());
                w.biasb = bias.as_ref().map(|b| b.iter().map(|x| bf16::from_f32(*x)).collect());
            }
            Kind::Int8 => w.i8s = rng.bytes(data_len).into_iter().map(|b| b as i8).collect(),
            Kind::Q8_0 => {
                let mut d = rng.scales(data_len);
                rng.inject(&mut d, s.special);
                w.q8 = d
                    .iter()
                    .map(|d| {
                        let mut qs = [0i8; QK8_0];
                        for q in &mut qs {
                            *q = rng.next_u64() as i8;
                        }
                        BlockQ8_0 { d: f16::from_f32(*d), qs }
                    })
                    .collect();
            }
            Kind::Q4_0 => {
                w.u8s = rng.bytes(data_len);
                let mut d = rng.scales(data_len / 18);
                rng.inject(&mut d, s.special);
                for (b, d) in d.iter().enumerate() {
                    w.u8s[b * 18..b * 18 + 2].copy_from_slice(&f16::from_f32(*d).to_le_bytes());
                }
            }
            Kind::Int4 | Kind::Blocks | Kind::Asym => w.u8s = rng.bytes(data_len),
        }
        rng.inject(&mut scales, s.special);
        w.scales16 = scales.iter().map(|x| f16::from_f32(*x)).collect();
        w.scalesb = scales.iter().map(|x| bf16::from_f32(*x)).collect();
        w.scales = scales;
        w.offsets = rng.data(s.offsets.of(nd.offsets), Special::None);
        w.bias = bias;
        w
    }

    pub fn view(&self) -> WeightsRef<'_> {
        let s = &self.spec;
        let (n, k) = (s.n, s.k);
        let order = if s.kxn { Order::KxN } else { Order::NxK };
        let encoding = if s.offset8 { Int4Encoding::Offset8 } else { Int4Encoding::Signed };
        let bias = self.bias.as_deref();
        match s.kind {
            Kind::F32 => WeightsRef::F32(FloatWeights { n, k, order, data: &self.f32s, bias }),
            Kind::F16 => WeightsRef::F16(FloatWeights { n, k, order, data: &self.f16s, bias: self.bias16.as_deref() }),
            Kind::Bf16 => {
                WeightsRef::Bf16(FloatWeights { n, k, order, data: &self.bf16s, bias: self.biasb.as_deref() })
            }
            Kind::Int8 => {
                WeightsRef::Int8PerChannel(Int8PerChannel { n, k, order, data: &self.i8s, scales: &self.scales, bias })
            }
            Kind::Q8_0 => WeightsRef::GgmlQ8_0 { n, k, blocks: &self.q8 },
            Kind::Int4 => WeightsRef::Int4PerChannel(Int4PerChannel {
                n,
                k,
                order,
                encoding,
                data: &self.u8s,
                scales: &self.scales,
                bias,
            }),
            Kind::Blocks => WeightsRef::Int4Block(BlockInt4::Blocks(Int4Blocks {
                n,
                k,
                bl: s.bl,
                order,
                encoding,
                data: &self.u8s,
                scales: if s.bf16_scales { BlockScales::Bf16(&self.scalesb) } else { BlockScales::F16(&self.scales16) },
                bias,
            })),
            Kind::Q4_0 => WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: &self.u8s, bias })),
            Kind::Asym => WeightsRef::Int4AsymBlock(Int4AsymBlock {
                n,
                k,
                bl: s.bl,
                encoding,
                nibbles: if s.high_first { NibbleOrder::HighFirst } else { NibbleOrder::LowFirst },
                data: &self.u8s,
                scales: &self.scales,
                offsets: &self.offsets,
                bias,
            }),
        }
    }
}

/// ggml's requantisation of Q8_0 rows as documented on
/// [`WeightsRef::GgmlQ8_0`]: one scale `max|v| / 127` per row, values
/// rounded (halves away from zero) and clamped to ±127.
pub fn requantize_q8_0(n: usize, k: usize, blocks: &[BlockQ8_0]) -> (Vec<i8>, Vec<f32>) {
    let per_row = k / QK8_0;
    let mut data = vec![0i8; n * k];
    let mut scales = vec![0f32; n];
    for r in 0..n {
        let vals: Vec<f32> = blocks[r * per_row..(r + 1) * per_row].iter().flat_map(|b| b.dequantize()).collect();
        let max = vals.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 0.0 };
        scales[r] = scale;
        for (j, v) in vals.iter().enumerate() {
            let q = if scale > 0.0 { (v * (1.0 / scale)).round() as i32 } else { 0 };
            data[r * k + j] = q.clamp(-127, 127) as i8;
        }
    }
    (data, scales)
}

/// Activations or outputs of one element type.
#[derive(Clone, Debug)]
pub enum Buf {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
}

impl Buf {
    pub fn new(dt: DType, v: &[f32]) -> Buf {
        match dt {
            DType::F32 => Buf::F32(v.to_vec()),
            DType::F16 => Buf::F16(v.iter().map(|x| f16::from_f32(*x)).collect()),
            DType::Bf16 => Buf::Bf16(v.iter().map(|x| bf16::from_f32(*x)).collect()),
        }
    }
    pub fn act(&self) -> Activation<'_> {
        match self {
            Buf::F32(v) => Activation::F32(v),
            Buf::F16(v) => Activation::F16(v),
            Buf::Bf16(v) => Activation::Bf16(v),
        }
    }
    pub fn out(&mut self) -> ActivationMut<'_> {
        match self {
            Buf::F32(v) => ActivationMut::F32(v),
            Buf::F16(v) => ActivationMut::F16(v),
            Buf::Bf16(v) => ActivationMut::Bf16(v),
        }
    }
    pub fn dtype(&self) -> DType {
        match self {
            Buf::F32(_) => DType::F32,
            Buf::F16(_) => DType::F16,
            Buf::Bf16(_) => DType::Bf16,
        }
    }
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            Buf::F32(v) => v.clone(),
            Buf::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Buf::Bf16(v) => v.iter().map(|x| x.to_f32()).collect(),
        }
    }
}

/// The family reference for weights `w` with these activations: the
/// operation [`PackedWeights`] documents, computed by the public
/// per-family `reference` functions.
pub fn reference(w: &WeightsRef<'_>, m: usize, x: &Buf, y: &mut Buf, clamp: Clamp) -> kleidiai::Result<()> {
    let no_op = || Err(Error::InvalidArgument("no operation for these types".into()));
    match (w, x, y) {
        (WeightsRef::F32(w), Buf::F32(x), Buf::F32(y)) => fam::matmul_clamp_f32_f32_f32p::reference(m, x, w, clamp, y),
        (WeightsRef::F16(w), Buf::F32(x), Buf::F32(y)) => {
            let data = w.to_f32_nxk()?;
            let bias: Option<Vec<f32>> = w.bias.map(|b| b[..w.n].iter().map(|v| v.to_f32()).collect());
            let w32 = FloatWeights { n: w.n, k: w.k, order: Order::NxK, data: &data, bias: bias.as_deref() };
            fam::matmul_clamp_f32_f32_f32p::reference(m, x, &w32, clamp, y)
        }
        (WeightsRef::Bf16(w), Buf::F32(x), Buf::F32(y)) => {
            let data = w.to_f32_nxk()?;
            let bias: Option<Vec<f32>> = w.bias.map(|b| b[..w.n].iter().map(|v| v.to_f32()).collect());
            let w32 = FloatWeights { n: w.n, k: w.k, order: Order::NxK, data: &data, bias: bias.as_deref() };
            fam::matmul_clamp_f32_f32_f32p::reference(m, x, &w32, clamp, y)
        }
        (WeightsRef::F16(w), Buf::F16(x), Buf::F16(y)) => fam::matmul_clamp_f16_f16_f16p::reference(m, x, w, clamp, y),
        (WeightsRef::Int8PerChannel(w), Buf::F32(x), Buf::F32(y)) => {
            fam::matmul_clamp_f32_qai8dxp_qsi8cxp::reference(m, x, w, clamp, y)
        }
        (WeightsRef::GgmlQ8_0 { n, k, blocks }, Buf::F32(x), Buf::F32(y)) => {
            if *n == 0 || *k == 0 || k % QK8_0 != 0 || n.checked_mul(k / QK8_0).is_none_or(|b| blocks.len() < b) {
                return Err(Error::InvalidArgument("Q8_0 shape".into()));
            }
            let (data, scales) = requantize_q8_0(*n, *k, blocks);
            let w = Int8PerChannel { n: *n, k: *k, order: Order::NxK, data: &data, scales: &scales, bias: None };
            fam::matmul_clamp_f32_qai8dxp_qsi8cxp::reference(m, x, &w, clamp, y)
        }
        (WeightsRef::Int4PerChannel(w), Buf::F32(x), Buf::F32(y)) => {
            fam::matmul_clamp_f32_qai8dxp_qsi4cxp::reference(m, x, w, clamp, y)
        }
        (WeightsRef::Int4PerChannel(w), Buf::Bf16(x), Buf::Bf16(y)) => {
            fam::matmul_clamp_bf16_qai8dxp_qsi4cxp::reference(m, x, w, clamp, y)
        }
        (WeightsRef::Int4Block(w), Buf::F32(x), Buf::F32(y)) => {
            fam::matmul_clamp_f32_qai8dxp_qsi4c32p::reference(m, x, *w, clamp, y)
        }
        (WeightsRef::Int4Block(w), Buf::Bf16(x), Buf::Bf16(y)) => {
            fam::matmul_clamp_bf16_qai8dxp_qsi4c32p::reference(m, x, *w, clamp, y)
        }
        (WeightsRef::Int4AsymBlock(w), Buf::F32(x), Buf::F32(y)) => {
            fam::matmul_clamp_f32_qsi8d32p_qai4c32p::reference(m, x, w, clamp, y)
        }
        (WeightsRef::Int4AsymBlock(w), Buf::F16(x), Buf::F16(y)) => {
            fam::matmul_clamp_f16_qsi8d32p_qai4c32p::reference(m, x, w, clamp, y)
        }
        _ => no_op(),
    }
}

/// The weights as dense f32 rows, as packed (Q8_0 requantised).
pub fn dense(w: &WeightsRef<'_>) -> Vec<f32> {
    match w {
        WeightsRef::F32(w) => w.to_f32_nxk().unwrap(),
        WeightsRef::F16(w) => w.to_f32_nxk().unwrap(),
        WeightsRef::Bf16(w) => w.to_f32_nxk().unwrap(),
        WeightsRef::Int8PerChannel(w) => w.dequantize().unwrap(),
        WeightsRef::GgmlQ8_0 { n, k, blocks } => {
            let (data, scales) = requantize_q8_0(*n, *k, blocks);
            Int8PerChannel { n: *n, k: *k, order: Order::NxK, data: &data, scales: &scales, bias: None }
                .dequantize()
                .unwrap()
        }
        WeightsRef::Int4PerChannel(w) => w.dequantize().unwrap(),
        WeightsRef::Int4Block(w) => w.dequantize().unwrap(),
        WeightsRef::Int4AsymBlock(w) => w.dequantize().unwrap(),
        _ => unreachable!("every kind is listed"),
    }
}

/// The bias of valid weights as f32.
pub fn bias_f32(w: &WeightsRef<'_>) -> Option<Vec<f32>> {
    let (n, _) = w.shape();
    match w {
        WeightsRef::F32(f) => f.bias.map(|b| b[..n].to_vec()),
        WeightsRef::F16(f) => f.bias.map(|b| b[..n].iter().map(|v| v.to_f32()).collect()),
        WeightsRef::Bf16(f) => f.bias.map(|b| b[..n].iter().map(|v| v.to_f32()).collect()),
        WeightsRef::Int8PerChannel(w) => w.bias.map(|b| b[..n].to_vec()),
        WeightsRef::Int4PerChannel(w) => w.bias.map(|b| b[..n].to_vec()),
        WeightsRef::Int4Block(w) => w.bias().map(|b| b[..n].to_vec()),
        WeightsRef::Int4AsymBlock(w) => w.bias.map(|b| b[..n].to_vec()),
        _ => None,
    }
}

/// Relative tolerance (of `Σ|x·w| + |bias| + 1`) of a kernel against the
/// reference, per kind and activation type (see `weights/tests.rs` in the
/// crate: quantised paths compute the same integers; float paths differ in
/// summation order; half-precision outputs round once more; Q4_0 may be
/// served by a kernel quantising the LHS per block instead of per row).
fn tolerance(kind: Kind, act: DType) -> f32 {
    match (kind, act) {
        (Kind::F16, DType::F16) => 2e-2,
        (Kind::Bf16, _) => 1e-2,
        (Kind::Int4, DType::Bf16) => 2e-2,
        (Kind::Blocks | Kind::Q4_0, DType::Bf16) => 3e-2,
        (Kind::Blocks | Kind::Q4_0, _) => 2e-2,
        (Kind::Asym, DType::F16) => 1e-2,
        _ => 1e-5,
    }
}

/// Whether the reference copy (not a kernel) computes every result here.
pub fn reference_only() -> bool {
    !cfg!(target_arch = "aarch64") || Features::current().iter().next().is_none()
}

/// Compares `got` with `want`: bit for bit when `exact`, else within
/// `tol * mag` where the result is defined: a NaN, an infinity or a sum
/// beyond the f32 range among the inputs of an output leaves nothing to
/// compare (kernels and reference round and overflow in another order); the
/// call must then only not misbehave.
pub fn compare(what: &str, got: &[f32], want: &[f32], mag: &[f32], tol: f32, exact: bool) -> Result<(), TestCaseError> {
    ensure!(got.len() == want.len(), "{what}: {} outputs, want {}", got.len(), want.len());
    for i in 0..got.len() {
        if exact {
            ensure!(
                got[i].to_bits() == want[i].to_bits() || (got[i].is_nan() && want[i].is_nan()),
                "{what}: [{i}] {} vs reference {}",
                got[i],
                want[i]
            );
        } else if want[i].abs() < 1e30 && mag[i] < 1e30 {
            let t = tol * mag[i];
            ensure!((got[i] - want[i]).abs() <= t, "{what}: [{i}] {} vs reference {} (tol {t})", got[i], want[i]);
        }
    }
    Ok(())
}

/// Per output, `Σ_k |x·w| + |bias| + 1` (+1 for half-precision outputs);
/// infinite where the result is not defined: an input row or weight row
/// holding a NaN, an infinity or a value beyond ±10⁶ (kernels that
/// quantise activations per block keep the block scale in f16, which
/// overflows past 127 · 65504 ≈ 8.3·10⁶; float kernels overflow f32 or f16
/// in another order than the reference).
pub fn magnitude(w: &[f32], bias: Option<&[f32]>, x: &[f32], m: usize, n: usize, k: usize, half: bool) -> Vec<f32> {
    const LIMIT: f32 = 1e6;
    let wild = |v: &[f32]| v.iter().any(|v| v.is_nan() || v.abs() > LIMIT);
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        let row_wild = wild(&x[i * k..(i + 1) * k]);
        for j in 0..n {
            if row_wild || wild(&w[j * k..(j + 1) * k]) || bias.is_some_and(|b| wild(&b[j..=j])) {
                out[i * n + j] = f32::INFINITY;
                continue;
            }
            let s: f32 = (0..k).map(|p| (x[i * k + p] * w[j * k + p]).abs()).sum();
            out[i * n + j] = s + bias.map_or(0.0, |b| b[j].abs()) + 1.0 + f32::from(u8::from(half));
        }
    }
    out
}

/// A clamp: none, a range, or an invalid one.
#[derive(Clone, Copy, Debug)]
pub enum ClampSpec {
    None,
    Range(f32, f32),
    Inverted,
    NaN,
}

impl ClampSpec {
    /// The clamp, and whether it is valid.
    pub fn clamp(self) -> (Clamp, bool) {
        match self {
            ClampSpec::None => (Clamp::NONE, true),
            ClampSpec::Range(a, b) => (Clamp { min: a.min(b), max: a.max(b) }, true),
            ClampSpec::Inverted => (Clamp { min: 1.0, max: -1.0 }, false),
            ClampSpec::NaN => (Clamp { min: f32::NAN, max: 1.0 }, false),
        }
    }
}

fn clamp_spec() -> impl Strategy<Value = ClampSpec> {
    prop_oneof![
        8 => Just(ClampSpec::None),
        3 => (-2.0f32..0.5, -0.5f32..2.0).prop_map(|(a, b)| ClampSpec::Range(a, b)),
        1 => Just(ClampSpec::Inverted),
        1 => Just(ClampSpec::NaN),
    ]
}

/// One matmul call on packed weights: rows, buffer lengths, types, clamp,
/// threads and special values in the activations.
#[derive(Clone, Debug)]
pub struct Call {
    pub m: usize,
    pub x: Len,
    pub y: Len,
    /// Another element type for the input or output (a type error).
    pub x_type: Option<u8>,
    pub y_type: Option<u8>,
    pub clamp: ClampSpec,
    pub threads: usize,
    pub special: Special,
}

fn call() -> impl Strategy<Value = Call> {
    call_from(prop_oneof![12 => 1usize..=9, 1 => Just(0usize), 1 => strat::huge()], strat::len(), strat::special())
}

/// Calls of `m` rows, with input and output buffers of `len`.
pub fn call_from(
    m: impl Strategy<Value = usize>,
    len: impl Strategy<Value = Len> + Clone,
    special: impl Strategy<Value = Special>,
) -> impl Strategy<Value = Call> {
    (
        m,
        len.clone(),
        len,
        proptest::option::weighted(0.05, 0u8..3),
        proptest::option::weighted(0.05, 0u8..3),
        clamp_spec(),
        0usize..=3,
        special,
    )
        .prop_map(|(m, x, y, x_type, y_type, clamp, threads, special)| Call {
            m,
            x,
            y,
            x_type,
            y_type,
            clamp,
            threads,
            special,
        })
}

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::Bf16];

#[derive(Clone, Debug)]
struct Options {
    act: DType,
    non_sme: bool,
    keep_reference: bool,
    keep_as_given: bool,
    separate_gemv: bool,
    /// Features switched off for the pack (None: all detected ones).
    without: Option<Vec<CpuFeature>>,
}

fn options(kind: Kind) -> impl Strategy<Value = Options> {
    let tiers = vec![
        CpuFeature::Sme2,
        CpuFeature::Sme,
        CpuFeature::Sve,
        CpuFeature::I8mm,
        CpuFeature::Dotprod,
        CpuFeature::Bf16,
        CpuFeature::Fp16,
        CpuFeature::Neon,
    ];
    (
        prop_oneof![9 => proptest::sample::select(kind.activations().to_vec()), 1 => proptest::sample::select(DTYPES.to_vec())],
        any::<bool>(),
        any::<bool>(),
        (any::<bool>(), any::<bool>()),
        proptest::option::weighted(0.3, proptest::sample::subsequence(tiers, 1..=3)),
    )
        .prop_map(|(act, non_sme, keep_reference, (keep_as_given, separate_gemv), without)| Options {
            act,
            non_sme,
            keep_reference,
            keep_as_given,
            separate_gemv,
            without,
        })
}

/// Whether an operation exists for these weights and activations.
pub fn supported(kind: Kind, act: DType) -> bool {
    kind.activations().contains(&act)
}

/// Known `PackedWeights::pack` issues (valid weights refused because the
/// best kernel for them cannot take them; pack should pick another kernel
/// or fall back to the reference): the issue's id, if `e` is one.
pub fn pack_known_issue(s: &WSpec, e: &Error) -> Option<&'static str> {
    match e {
        Error::WrongFamily { why, .. } if s.kxn && why.contains("no upstream packer for KxN") => {
            Some("pack-kxn-without-packer")
        }
        Error::BadValue { what: "bl", why, .. } if why.contains("above this kernel's maximum") => {
            Some("pack-bl-beyond-kernel-maximum")
        }
        Error::BadValue { what: "block scale", why, .. } if why.contains("does not fit F16") => {
            Some("pack-scale-beyond-kernel-range")
        }
        _ => None,
    }
}

/// Preconditions of the operation beyond the format's own: the asymmetric
/// int4 kernels and their reference take blocks of a multiple of 32.
pub fn operation_valid(s: &WSpec) -> bool {
    s.kind != Kind::Asym || s.bl % 32 == 0
}

/// Whether the operation refuses non-finite activations (its LHS is
/// quantised per block by a packer that needs finite values).
/// The output channels of `PackedWeights::matmul`'s non-finite policy:
/// those whose values, scales, offsets or bias (as given) hold a NaN or an
/// infinity. Read from the formats' own fields, not from dequantised
/// values (a huge finite scale times a value may overflow; that is not it).
pub fn non_finite_channels(w: &WeightsRef<'_>) -> Vec<bool> {
    let (n, k) = w.shape();
    let any = |v: &[f32]| v.iter().any(|v| !v.is_finite());
    let b = bias_f32(w);
    let bias = |j: usize| b.as_ref().is_some_and(|b| !b[j].is_finite());
    (0..n)
        .map(|j| {
            bias(j)
                || match w {
                    WeightsRef::F32(f) => (0..k).any(|c| !f.value(j, c).unwrap().is_finite()),
                    WeightsRef::F16(f) => (0..k).any(|c| !f.value(j, c).unwrap().is_finite()),
                    WeightsRef::Bf16(f) => (0..k).any(|c| !f.value(j, c).unwrap().is_finite()),
                    WeightsRef::Int8PerChannel(q) => !q.scales[j].is_finite(),
                    WeightsRef::Int4PerChannel(q) => !q.scales[j].is_finite(),
                    WeightsRef::GgmlQ8_0 { blocks, .. } => {
                        blocks[j * (k / QK8_0)..(j + 1) * (k / QK8_0)].iter().any(|b| !b.d.is_finite())
                    }
                    WeightsRef::Int4Block(BlockInt4::Blocks(b)) => {
                        let nb = k / b.bl;
                        match b.scales {
                            BlockScales::F16(s) => s[j * nb..(j + 1) * nb].iter().any(|v| !v.is_finite()),
                            BlockScales::Bf16(s) => s[j * nb..(j + 1) * nb].iter().any(|v| !v.is_finite()),
                        }
                    }
                    WeightsRef::Int4Block(BlockInt4::Q4_0(q)) => (0..k / 32).any(|b| {
                        let at = (j * (k / 32) + b) * 18;
                        !f16::from_le_bytes([q.data[at], q.data[at + 1]]).is_finite()
                    }),
                    WeightsRef::Int4AsymBlock(a) => {
                        let nb = a.blocks_per_row();
                        any(&a.scales[j * nb..(j + 1) * nb]) || any(&a.offsets[j * nb..(j + 1) * nb])
                    }
                    _ => unreachable!("every kind is listed"),
                }
        })
        .collect()
}

/// The reference under `PackedWeights::matmul`'s non-finite policy: rows of
/// `x` holding a NaN or an infinity are computed as zeros (some family
/// references refuse them) and come out NaN, as do the output channels of
/// `non_finite_channels`. Returns which outputs (`m x n`) the policy made NaN.
pub fn reference_with_policy(
    w: &WeightsRef<'_>,
    m: usize,
    x: &Buf,
    y: &mut Buf,
    clamp: Clamp,
) -> kleidiai::Result<Vec<bool>> {
    let (n, k) = w.shape();
    let xf = x.to_f32();
    let bad: Vec<bool> = (0..m).map(|i| xf[i * k..(i + 1) * k].iter().any(|v| !v.is_finite())).collect();
    let mut clean = xf.clone();
    for (i, _) in bad.iter().enumerate().filter(|(_, b)| **b) {
        clean[i * k..(i + 1) * k].fill(0.0);
    }
    let x0 = Buf::new(x.dtype(), &clean);
    reference(w, m, &x0, y, clamp)?;
    let cols = non_finite_channels(w);
    let mut yf = y.to_f32();
    let mut nan = vec![false; m * n];
    for i in 0..m {
        for j in 0..n {
            if bad[i] || cols[j] {
                yf[i * n + j] = f32::NAN;
                nan[i * n + j] = true;
            }
        }
    }
    *y = Buf::new(y.dtype(), &yf);
    Ok(nan)
}

/// Packed weights and what a call on them is checked against.
pub struct Served<'a> {
    pub s: &'a WSpec,
    pub w: &'a WeightsRef<'a>,
    pub packed: &'a PackedWeights,
    /// The activation type the weights were packed for.
    pub act: DType,
    /// Whether an operation takes these weights with `act` activations.
    pub op: bool,
    /// The weights as dense f32 rows, as packed ([`dense`]), and the bias.
    pub dense: &'a [f32],
    pub bias: Option<&'a [f32]>,
}

/// Runs call `c` on `v.packed` with activations from `rng`: an invalid
/// call must be an `Err`; a valid one `Ok`, equal to the family reference
/// under the non-finite policy (within the kernels' tolerance; NaN exactly
/// where a non-finite input makes it) and writing nothing past m x n. Returns
/// the input and output of a valid call.
pub fn check_call(
    v: &Served<'_>,
    c: &Call,
    rng: &mut Rng,
    scratch: &mut Scratch,
) -> Result<Option<(Buf, Vec<f32>)>, TestCaseError> {
    let (s, packed, act) = (v.s, v.packed, v.act);
    let (n, k) = (s.n, s.k);
    let xt = c.x_type.map_or(act, |t| DTYPES[t as usize]);
    let yt = c.y_type.map_or(act, |t| DTYPES[t as usize]);
    let (clamp, clamp_ok) = c.clamp.clamp();
    let x_len = c.x.of(strat::mul(c.m, k));
    let y_len = c.y.of(strat::mul(c.m, n));
    let xv = rng.data(x_len, c.special);
    let x = Buf::new(xt, &xv);
    let mut y = Buf::new(yt, &vec![0.0; y_len]);
    let valid = v.op
        && c.m > 0
        && xt == act
        && yt == act
        && strat::mul(c.m, k).is_some_and(|need| x_len >= need)
        && strat::mul(c.m, n).is_some_and(|need| y_len >= need)
        && clamp_ok;
    let par = if c.threads == 0 { Parallelism::Sequential } else { Parallelism::Rayon(c.threads) };
    let got = packed.matmul(c.m, x.act(), y.out(), clamp, par, scratch);
    harness::count(valid);
    if !valid {
        ensure!(got.is_err(), "invalid call accepted: m={} x={x_len} y={y_len} {xt:?}/{yt:?} {clamp:?}", c.m);
        return Ok(None);
    }
    ensure!(got.is_ok(), "valid call refused: m={} {:?}: {}", c.m, packed.kernel_for(c.m), got.unwrap_err());
    let mut want = Buf::new(yt, &vec![0.0; y_len]);
    let policy = match reference_with_policy(v.w, c.m, &x, &mut want, clamp) {
        Ok(p) => p,
        Err(e) => return Err(TestCaseError::fail(format!("the reference refuses a call PackedWeights accepted: {e}"))),
    };
    let mn = c.m * n;
    let half = act != DType::F32;
    let mag = magnitude(v.dense, v.bias, &x.to_f32(), c.m, n, k, half);
    let what = format!("{:?}/{act:?} m={} n={n} k={k} via {:?}", s.kind, c.m, packed.kernel_for(c.m));
    let y = y.to_f32();
    compare(
        &what,
        &y[..mn],
        &want.to_f32()[..mn],
        &mag,
        tolerance(s.kind, act),
        reference_only() || packed.kernel_for(c.m).is_none(),
    )?;
    // The non-finite policy, on every kernel: NaN where it says.
    if let Some(i) = (0..mn).find(|&i| policy[i] && !y[i].is_nan()) {
        return Err(TestCaseError::fail(format!("{what}: [{i}] {} where a non-finite input makes NaN", y[i])));
    }
    // Outputs past m x n are left alone.
    ensure!(y[mn..].iter().all(|v| *v == 0.0), "{what}: wrote past m x n");
    Ok(Some((x, y)))
}

#[test]
fn packed_weights_every_kind() {
    let strategy = (wspec(MEDIUM), options_any(), proptest::collection::vec(call(), 1..=3), any::<u64>());
    check("weights::packed_weights_every_kind", Cases::new(80_000, 1_000), strategy, |(s, opts, calls, seed)| {
        let opts = fix_options(&s, opts);
        let owned = OwnedW::build(&s);
        let w = owned.view();
        let features = opts.without.as_ref().map(|f| Features::current().without(f));
        let pack_opts = PackOptions {
            activation: opts.act,
            non_sme_layout: opts.non_sme,
            keep_reference: opts.keep_reference,
            keep_as_given: opts.keep_as_given,
            separate_gemv: opts.separate_gemv,
            features,
        };
        let packed = PackedWeights::pack(&w, &pack_opts);
        // `pack` checks the weights and that some operation takes them with
        // `opts.act` activations (asymmetric int4 only in blocks of a
        // multiple of 32): anything else is refused there.
        let op = supported(s.kind, opts.act) && operation_valid(&s);
        let valid = format_valid(&s) && op;
        harness::count(valid);
        let packed = match packed {
            Err(e) => {
                if valid {
                    if let Some(id) = pack_known_issue(&s, &e) {
                        return harness::known_issue(id, &format!("{:?} n={} k={} bl={}: {e}", s.kind, s.n, s.k, s.bl));
                    }
                }
                ensure!(!valid, "valid weights refused: {e}");
                return Ok(());
            }
            Ok(p) => {
                ensure!(
                    valid,
                    "invalid weights accepted: {:?}/{:?} n={} k={} bl={} (format valid {}, operation valid {})",
                    s.kind,
                    opts.act,
                    s.n,
                    s.k,
                    s.bl,
                    format_valid(&s),
                    operation_valid(&s)
                );
                p
            }
        };
        let (n, k) = (s.n, s.k);
        ensure!(packed.n() == n && packed.k() == k, "shape {}x{}", packed.n(), packed.k());
        // Packed only for kernels the restricted features allow.
        if let Some(f) = features {
            for (gemm, gemv) in packed.layouts() {
                for name in [Some(gemm), gemv].into_iter().flatten() {
                    let info = kleidiai::registry::by_name(name).expect("registered");
                    ensure!(info.supported(&f).is_ok(), "{name} packed although {f} excludes it");
                }
            }
        }
        let wd = dense(&w);
        let bias = bias_f32(&w);
        let mut rng = Rng::new(seed);
        let mut scratch = Scratch::default();
        let served = Served { s: &s, w: &w, packed: &packed, act: opts.act, op, dense: &wd, bias: bias.as_deref() };
        for c in &calls {
            check_call(&served, c, &mut rng, &mut scratch)?;
        }
        // get_rows: every row in range equals the weights (as packed).
        for _ in 0..2 {
            let r = rng.below(n + 2);
            let mut out = vec![f32::NAN; k + rng.below(3)];
            let short = rng.below(8) == 0;
            let len = if short { k - 1 } else { out.len() };
            let got = packed.row(r, &mut out[..len]);
            harness::count(r < n && !short);
            if r >= n || short {
                ensure!(got.is_err(), "row({r}) of {n} into {len} accepted");
                continue;
            }
            ensure!(got.is_ok(), "row({r}): {}", got.unwrap_err());
            let want = &wd[r * k..(r + 1) * k];
            for (p, (g, w)) in out[..k].iter().zip(want).enumerate() {
                let close = if reference_only() || packed.layouts().is_empty() {
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan())
                } else {
                    !w.is_finite() || (g - w).abs() <= 4e-3 * w.abs() + 1e-7
                };
                ensure!(close, "row({r})[{p}] = {g}, weights hold {w} ({:?})", packed.layouts());
            }
        }
        // Save and load: a round trip serves the same results bit for bit.
        match packed.to_bytes() {
            Err(e) => ensure!(packed.layouts().is_empty(), "to_bytes failed with layouts: {e}"),
            Ok(bytes) => {
                let loaded = PackedWeights::from_bytes(&bytes);
                ensure!(loaded.is_ok(), "reload: {}", loaded.unwrap_err());
                let loaded = loaded.unwrap();
                ensure!(loaded.layouts() == packed.layouts(), "layouts changed on reload");
                let m = 1 + rng.below(4);
                let xv = rng.vec_f32(m * k);
                let x = Buf::new(opts.act, &xv);
                let (mut y1, mut y2) = (Buf::new(opts.act, &vec![0.0; m * n]), Buf::new(opts.act, &vec![0.0; m * n]));
                let seq = Parallelism::Sequential;
                let r1 = packed.matmul(m, x.act(), y1.out(), Clamp::NONE, seq, &mut scratch);
                let r2 = loaded.matmul(m, x.act(), y2.out(), Clamp::NONE, seq, &mut scratch);
                ensure!(r1.is_ok() == r2.is_ok(), "reloaded weights answer differently: {r1:?} {r2:?}");
                let (a, b) = (y1.to_f32(), y2.to_f32());
                ensure!(a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits()), "reloaded weights differ");
            }
        }
        Ok(())
    });
}

fn options_any() -> impl Strategy<Value = Options> {
    kind().prop_flat_map(options)
}

/// Options were drawn for a random kind: mostly use an activation type the
/// spec's kind takes (keeping some invalid pairs).
fn fix_options(s: &WSpec, mut o: Options) -> Options {
    if !supported(s.kind, o.act) && (s.seed % 8 != 0) {
        let acts = s.kind.activations();
        o.act = acts[(s.seed as usize / 8) % acts.len()];
    }
    o
}

/// Weights of every kind with a bias where the kind takes one, packed with
/// every tier allowed and then with each tier switched off in turn (in the
/// pack options), give the same results within tolerance: kernel choice
/// never changes what is computed.
#[test]
fn tier_choice_does_not_change_results() {
    let strategy = (wspec(SMALL), any::<u64>(), 1usize..=5);
    check("weights::tier_choice_does_not_change_results", Cases::new(6_000, 240), strategy, |(s, seed, m)| {
        if !(format_valid(&s) && operation_valid(&s)) {
            return Ok(());
        }
        let owned = OwnedW::build(&s);
        let w = owned.view();
        let act = s.kind.activations()[seed as usize % s.kind.activations().len()];
        let (n, k) = (s.n, s.k);
        let mut rng = Rng::new(seed);
        let xv = rng.vec_f32(m * k);
        let x = Buf::new(act, &xv);
        let mut outs = Vec::new();
        let all = Features::current();
        let mut sets = vec![all];
        for f in all.iter() {
            sets.push(all.without(&[f]));
        }
        for f in sets {
            let opts = PackOptions { activation: act, features: Some(f), ..PackOptions::default() };
            let p = PackedWeights::pack(&w, &opts);
            harness::valid();
            if let Some(id) = p.as_ref().err().and_then(|e| pack_known_issue(&s, e)) {
                return harness::known_issue(id, &format!("{:?} n={n} k={k} bl={}: {}", s.kind, s.bl, p.unwrap_err()));
            }
            ensure!(p.is_ok(), "{:?} with {f}: {}", s.kind, p.unwrap_err());
            let p = p.unwrap();
            let mut y = Buf::new(act, &vec![0.0; m * n]);
            let r = p.matmul(m, x.act(), y.out(), Clamp::NONE, Parallelism::Sequential, &mut Scratch::default());
            ensure!(r.is_ok(), "{:?} with {f}: {}", s.kind, r.unwrap_err());
            outs.push((p.kernel_for(m), y.to_f32()));
        }
        let wd = dense(&w);
        let bias = bias_f32(&w);
        let mag = magnitude(&wd, bias.as_deref(), &xv, m, n, k, act != DType::F32);
        let (first_kernel, first) = &outs[0];
        for (kernel, y) in &outs[1..] {
            let what = format!("{:?}/{act:?}: {first_kernel:?} vs {kernel:?}", s.kind);
            // Two kernels each within tolerance of the reference are within
            // twice that of each other.
            compare(&what, y, first, &mag, 2.0 * tolerance(s.kind, act), false)?;
        }
        Ok(())
    });
}
