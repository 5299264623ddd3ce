//! The validation layer under arbitrary calls: the fuzz input is decoded
//! (`arbitrary`) into a short sequence of API calls with arbitrary shapes,
//! buffer lengths, block lengths, strides, ggml type ids, clamps and thread
//! counts, against `kleidiai::weights`, `kleidiai::ggml`, the families'
//! portable `reference` functions and the quantisers.
//!
//! Asserted: nothing panics; a buffer shorter than the call needs, or
//! `m == 0`, is an `Err`; and when a call succeeds on ordinary data, its
//! output matches an oracle: bit for bit the family reference the packed
//! weights fall back to (the host has no kernels), and, within a tolerance
//! that covers on-the-fly LHS quantisation, a naive matmul of the
//! dequantised weights.
//!
//! Sizes are capped (m <= 8, n <= 40, k <= 128) so one run stays well under
//! 10 ms.

use arbitrary::Arbitrary;
use half::{bf16, f16};
use kleidiai::families as fam;
use kleidiai::formats::{
    BlockInt4, BlockScales, DepthwiseShape, DepthwiseWeights, FloatWeights, Indirection, Int4AsymBlock, Int4Blocks,
    Int4Encoding, Int4PerChannel, Int8PerChannel, NibbleOrder, Order, Q4_0, StaticInt8Weights, U8Weights,
    UInt2PerChannel,
};
use kleidiai::ggml::{self, GgmlType, GgmlWeights, MulMatScratch, Tensor, TensorMut};
use kleidiai::quant::{self, Qai8Output, Qai8Quant, Qai8dxF16Block, Rounding};
use kleidiai::weights::{Activation, ActivationMut, DType, PackOptions, PackedWeights, Scratch, WeightsRef};
use kleidiai::{Clamp, Parallelism};

mod families;
mod ggml_calls;
mod oracles;
mod quant_calls;
mod weights;

use families::family;
use ggml_calls::ggml_call;
use oracles::*;
use quant_calls::quant_call;
use weights::*;

const MAX_M: usize = 8;
const MAX_N: usize = 40;
const MAX_K: usize = 128;

// ---------------------------------------------------------------- inputs

/// A buffer length: the exact length the call needs, or that plus a delta.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Len {
    Exact,
    Delta(i8),
}

impl Len {
    fn of(self, exact: usize) -> usize {
        match self {
            Len::Exact => exact,
            Len::Delta(d) => (exact as i64 + d as i64).max(0) as usize,
        }
    }
    fn short(self, exact: usize) -> bool {
        self.of(exact) < exact
    }
}

/// A dimension: small raw values (0 included) or a multiple of `unit`.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Dim {
    Raw(u8),
    Units(u8),
}

impl Dim {
    fn get(self, unit: usize, cap: usize) -> usize {
        match self {
            Dim::Raw(v) => v as usize % (cap + 1),
            Dim::Units(u) => (u as usize % (cap / unit.max(1)).max(1) + 1) * unit.max(1),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum ClampSpec {
    None,
    Range(f32, f32),
    Around(i8, u8),
}

impl ClampSpec {
    fn get(self) -> Clamp {
        match self {
            ClampSpec::None => Clamp::NONE,
            ClampSpec::Range(min, max) => Clamp { min, max },
            ClampSpec::Around(c, w) => {
                let (c, w) = (c as f32 / 16.0, w as f32 / 16.0);
                Clamp { min: c - w, max: c + w }
            }
        }
    }
    fn valid(self) -> bool {
        let c = self.get();
        !c.min.is_nan() && !c.max.is_nan() && c.min <= c.max
    }
}

/// Values: ordinary (seeded, in [-2, 2)) or wild (NaN, infinities, huge,
/// subnormal values mixed in).
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct Values {
    seed: u32,
    wild: bool,
}

/// The repository's one test generator, seeded from the input.
struct Rng(fastrand::Rng);

impl Rng {
    fn seeded(seed: u64) -> Rng {
        Rng(fastrand::Rng::with_seed(seed))
    }
    fn next(&mut self) -> u64 {
        self.0.u64(..) >> 33
    }
}

impl Values {
    fn f32s(self, len: usize, salt: u64) -> Vec<f32> {
        let mut r = Rng::seeded(self.seed as u64 ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        (0..len)
            .map(|_| {
                let v = r.next();
                if self.wild && v % 7 == 0 {
                    [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, -f32::MAX, 1e-40, 0.0][(v >> 8) as usize % 7]
                } else {
                    ((v % 4096) as f32 - 2048.0) / 1024.0
                }
            })
            .collect()
    }
    fn bytes(self, len: usize, salt: u64) -> Vec<u8> {
        let mut r = Rng::seeded(self.seed as u64 ^ salt.wrapping_mul(0xD1B5_4A32_D192_ED03));
        (0..len).map(|_| r.next() as u8).collect()
    }
    fn scales(self, len: usize, salt: u64) -> Vec<f32> {
        self.f32s(len, salt).into_iter().map(|v| if self.wild { v } else { v.abs() / 16.0 + 1.0 / 64.0 }).collect()
    }
    fn f16s(self, len: usize, salt: u64) -> Vec<f16> {
        self.f32s(len, salt).into_iter().map(f16::from_f32).collect()
    }
    fn bf16s(self, len: usize, salt: u64) -> Vec<bf16> {
        self.f32s(len, salt).into_iter().map(bf16::from_f32).collect()
    }
}

/// The variant name of an enum value (for tags).
fn variant(v: &impl core::fmt::Debug) -> String {
    let s = format!("{v:?}");
    s.split([' ', '{', '(']).next().unwrap_or_default().to_string()
}

fn ok<T, E>(r: &Result<T, E>) -> &'static str {
    if r.is_ok() { "ok" } else { "err" }
}

fn par(t: u8) -> Parallelism {
    match t % 5 {
        0 => Parallelism::Sequential,
        t => Parallelism::Rayon(t as usize - 1),
    }
}

fn order(kxn: bool) -> Order {
    if kxn { Order::KxN } else { Order::NxK }
}

fn encoding(signed: bool) -> Int4Encoding {
    if signed { Int4Encoding::Signed } else { Int4Encoding::Offset8 }
}

#[derive(Arbitrary, Debug)]
pub enum WeightSpec {
    F32 { kxn: bool, bias: Option<Len> },
    F16 { kxn: bool, bias: Option<Len> },
    Bf16 { kxn: bool, bias: Option<Len> },
    Int8 { kxn: bool, scales: Len, bias: Option<Len> },
    Int4 { kxn: bool, signed: bool, scales: Len, bias: Option<Len> },
    Q4_0 { bias: Option<Len> },
    Int4Blocks { bl: u8, kxn: bool, signed: bool, bf16_scales: bool, scales: Len, bias: Option<Len> },
    Int4Asym { bl: u8, signed: bool, high_first: bool, scales: Len, offsets: Len, bias: Option<Len> },
    GgmlQ8_0,
}

#[derive(Arbitrary, Debug)]
pub struct PackCall {
    w: WeightSpec,
    n: Dim,
    k: Dim,
    data: Len,
    vals: Values,
    /// 0 f32, 1 f16, 2 bf16 (activations and outputs).
    act: u8,
    non_sme_layout: bool,
    keep_reference: bool,
    calls: Vec<MatmulCall>,
}

#[derive(Arbitrary, Debug)]
pub struct MatmulCall {
    m: u8,
    x: Len,
    y: Len,
    /// Another element type than the packed one for x or y.
    x_type: Option<u8>,
    clamp: ClampSpec,
    threads: u8,
    row: Option<(u8, Len)>,
}

#[derive(Arbitrary, Debug)]
pub struct GgmlCall {
    type_id: u8,
    ne: [i8; 4],
    k_blocks: Option<u8>,
    nb: Option<[i16; 4]>,
    data: Len,
    vals: Values,
    hybrid: bool,
    roundtrip: bool,
    ops: Vec<GgmlOp>,
}

#[derive(Arbitrary, Debug)]
pub enum GgmlOp {
    MulMat {
        src1_type: u8,
        dst_type: u8,
        m: u8,
        ne2: u8,
        ne3: u8,
        src1_k: Option<i8>,
        dst_ne: Option<[i8; 4]>,
        src1_pad: [u8; 3],
        dst_pad: [u8; 3],
        src1_len: Len,
        dst_len: Len,
        threads: u8,
    },
    GetRows {
        rows: Vec<i16>,
        dst: Len,
    },
    WorkSize {
        m: u32,
    },
    KernelFor {
        m: u8,
    },
}

#[derive(Arbitrary, Debug)]
pub enum FamilyCall {
    FloatF32 {
        m: u8,
        n: Dim,
        k: Dim,
        kxn: bool,
        bias: Option<Len>,
        lens: [Len; 2],
        clamp: ClampSpec,
        vals: Values,
    },
    FloatF16 {
        m: u8,
        n: Dim,
        k: Dim,
        kxn: bool,
        bias: Option<Len>,
        lens: [Len; 2],
        clamp: ClampSpec,
        vals: Values,
    },
    Bf16p {
        m: u8,
        n: Dim,
        k: Dim,
        half_lhs: bool,
        lens: [Len; 3],
        clamp: ClampSpec,
        vals: Values,
    },
    Qsi4cxp {
        m: u8,
        n: Dim,
        k: Dim,
        kxn: bool,
        signed: bool,
        lens: [Len; 4],
        clamp: ClampSpec,
        vals: Values,
    },
    Qsi8cxpF16 {
        m: u8,
        n: Dim,
        k: Dim,
        four: bool,
        lens: [Len; 4],
        clamp: ClampSpec,
        vals: Values,
    },
    Qsu2cxp {
        m: u8,
        n: Dim,
        k: Dim,
        lut: [i8; 4],
        lens: [Len; 4],
        clamp: ClampSpec,
        vals: Values,
    },
    Qsi4c32p {
        m: u8,
        n: Dim,
        k: Dim,
        bl: u8,
        bf16_out: bool,
        f16p: bool,
        lens: [Len; 4],
        clamp: ClampSpec,
        vals: Values,
    },
    Qai4c32p {
        m: u8,
        n: Dim,
        k: Dim,
        bl: u8,
        f16: bool,
        lens: [Len; 5],
        clamp: ClampSpec,
        vals: Values,
    },
    Qai8Static {
        m: u8,
        n: Dim,
        k: Dim,
        kxn: bool,
        lens: [Len; 4],
        q: (f32, i32, f32),
        out: (i32, i8, i8),
        vals: Values,
    },
    U8 {
        m: u8,
        n: Dim,
        k: Dim,
        kxn: bool,
        lens: [Len; 4],
        f32_out: bool,
        scale: f32,
        clamp: ClampSpec,
        vals: Values,
    },
    Imatmul {
        m: u8,
        chunks: u8,
        chunk_len: u8,
        n: Dim,
        pads: Vec<bool>,
        offsets: Vec<u8>,
        lens: [Len; 3],
        vals: Values,
    },
    Dwconv {
        h: u8,
        w: u8,
        c: u8,
        pad: [u8; 4],
        lens: [Len; 4],
        clamp: ClampSpec,
        vals: Values,
    },
}

#[derive(Arbitrary, Debug)]
pub enum QuantCall {
    Qai8dx { len: u8, vals: Values, even: bool },
    Qai8dxHalf { m: u8, k: u8, vals: Values, bf16: bool, four: bool },
    Qsi8d32Row { blocks: u8, bl: u8, vals: Values, even: bool },
    Qsi8d32Block { len: u8, vals: Values, f16: bool },
    GgmlQuant { len: u8, k: Dim, vals: Values, q8: bool },
    GgmlFromBytes { len: u16, vals: Values, q8: bool },
    TypeId { id: u32, k: u16 },
}

#[derive(Arbitrary, Debug)]
pub enum Call {
    Pack(PackCall),
    Ggml(GgmlCall),
    Family(FamilyCall),
    Quant(QuantCall),
}

/// The calls a fuzz input decodes to, as the `validation` target's libFuzzer
/// driver decodes it (`arbitrary_take_rest`); None where it does not decode.
pub fn decode(input: &[u8]) -> Option<Vec<Call>> {
    Vec::<Call>::arbitrary_take_rest(arbitrary::Unstructured::new(input)).ok()
}

/// Runs the calls (at most 4), asserting the properties in the module docs.
pub fn run(calls: Vec<Call>) {
    for c in calls.into_iter().take(4) {
        match c {
            Call::Pack(p) => pack(p),
            Call::Ggml(g) => ggml_call(g),
            Call::Family(f) => family(f),
            Call::Quant(q) => quant_call(q),
        }
    }
}

thread_local! {
    static TAGS: std::cell::RefCell<Option<std::collections::BTreeSet<String>>> = const { std::cell::RefCell::new(None) };
}

/// What the last [`run`] exercised (e.g. `pack Int4 ok`), recorded only
/// inside [`run_tagged`]: the seed generator keeps an input per new tag.
fn tag(what: impl FnOnce() -> String) {
    TAGS.with(|t| {
        if let Some(set) = t.borrow_mut().as_mut() {
            set.insert(what());
        }
    });
}

/// [`run`], returning the tags of what it exercised.
pub fn run_tagged(calls: Vec<Call>) -> std::collections::BTreeSet<String> {
    TAGS.with(|t| *t.borrow_mut() = Some(Default::default()));
    run(calls);
    TAGS.with(|t| t.borrow_mut().take().unwrap_or_default())
}
