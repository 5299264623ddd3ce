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

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

impl Values {
    fn f32s(self, len: usize, salt: u64) -> Vec<f32> {
        let mut r = Rng(self.seed as u64 ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15));
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
        let mut r = Rng(self.seed as u64 ^ salt.wrapping_mul(0xD1B5_4A32_D192_ED03));
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

// ---------------------------------------------------------------- oracles

/// `y = clamp(x · wᵀ + bias)` in f64 from dense `w` (n x k), with a bound
/// per output of the error on-the-fly quantisation may cause.
fn naive(m: usize, n: usize, k: usize, x: &[f32], w: &[f32], bias: Option<&[f32]>, c: Clamp) -> Vec<(f32, f32)> {
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        let row = &x[i * k..(i + 1) * k];
        let xmax = row.iter().fold(0f32, |a, v| a.max(v.abs()));
        for j in 0..n {
            let wr = &w[j * k..(j + 1) * k];
            let dot: f64 = row.iter().zip(wr).map(|(a, b)| *a as f64 * *b as f64).sum();
            let wsum: f32 = wr.iter().map(|v| v.abs()).sum();
            let wmax = wr.iter().fold(0f32, |a, v| a.max(v.abs()));
            let b = bias.map_or(0.0, |b| b[j] as f64);
            let y = ((dot + b) as f32).max(c.min).min(c.max);
            // int8 LHS (per row or per block): error <= max|x| / 127 a value;
            // bf16/f16 rounding of both sides: 2^-8 relative; Q8_0
            // requantisation: max|w| / 127 a value.
            let tol = 0.02 * xmax * (wsum + k as f32 * wmax / 64.0) + 1e-3 + y.abs() / 64.0;
            out.push((y, tol));
        }
    }
    out
}

fn check_close(what: &str, got: &[f32], want: &[(f32, f32)]) {
    for (i, (g, (w, tol))) in got.iter().zip(want).enumerate() {
        if w.abs() > 30000.0 && g.is_infinite() {
            continue; // beyond the f16 range (f16 outputs): infinity is right
        }
        assert!((g - w).abs() <= *tol, "{what}: output {i} is {g}, the naive matmul says {w} (tolerance {tol})");
    }
}

fn same_bits<T: Copy + PartialEq + core::fmt::Debug>(what: &str, a: &[T], b: &[T], bits: impl Fn(T) -> u32) {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(bits(*x) == bits(*y), "{what}: output {i} is {x:?}, the family reference says {y:?}");
    }
}

fn to_nxk(data: &[f32], n: usize, k: usize, o: Order) -> Vec<f32> {
    match o {
        Order::NxK => data[..n * k].to_vec(),
        Order::KxN => (0..n * k).map(|i| data[(i % k) * n + i / k]).collect(),
    }
}

// ---------------------------------------------------------------- weights

/// Owned buffers of one weight spec.
struct Built {
    f32s: Vec<f32>,
    f16s: Vec<f16>,
    bf16s: Vec<bf16>,
    bytes: Vec<u8>,
    i8s: Vec<i8>,
    scales: Vec<f32>,
    scales_f16: Vec<f16>,
    scales_bf16: Vec<bf16>,
    offsets: Vec<f32>,
    bias: Option<Vec<f32>>,
    bias_f16: Option<Vec<f16>>,
    bias_bf16: Option<Vec<bf16>>,
    q8: Vec<ggml::BlockQ8_0>,
    short: bool,
    bl: usize,
}

fn bias_len(b: Option<Len>, n: usize, short: &mut bool) -> Option<usize> {
    b.map(|l| {
        *short |= l.short(n);
        l.of(n)
    })
}

fn build(p: &PackCall, n: usize, k: usize) -> Built {
    let v = p.vals;
    let mut b = Built {
        f32s: vec![],
        f16s: vec![],
        bf16s: vec![],
        bytes: vec![],
        i8s: vec![],
        scales: vec![],
        scales_f16: vec![],
        scales_bf16: vec![],
        offsets: vec![],
        bias: None,
        bias_f16: None,
        bias_bf16: None,
        q8: vec![],
        short: p.data.short(1),
        bl: 0,
    };
    let nk = n * k;
    let mut short = false;
    match p.w {
        WeightSpec::F32 { bias, .. } | WeightSpec::F16 { bias, .. } | WeightSpec::Bf16 { bias, .. } => {
            short |= p.data.short(nk);
            let len = p.data.of(nk);
            b.f32s = v.f32s(len, 1);
            b.f16s = v.f16s(len, 1);
            b.bf16s = v.bf16s(len, 1);
            if let Some(l) = bias_len(bias, n, &mut short) {
                b.bias = Some(v.f32s(l, 2));
                b.bias_f16 = Some(v.f16s(l, 2));
                b.bias_bf16 = Some(v.bf16s(l, 2));
            }
        }
        WeightSpec::Int8 { scales, bias, .. } => {
            short |= p.data.short(nk) | scales.short(n);
            b.i8s = v.bytes(p.data.of(nk), 1).into_iter().map(|x| x as i8).collect();
            b.scales = v.scales(scales.of(n), 3);
            b.bias = bias_len(bias, n, &mut short).map(|l| v.f32s(l, 2));
        }
        WeightSpec::Int4 { kxn, scales, bias, .. } => {
            let need = if kxn { k * n.div_ceil(2) } else { n * k.div_ceil(2) };
            short |= p.data.short(need) | scales.short(n);
            b.bytes = v.bytes(p.data.of(need), 1);
            b.scales = v.scales(scales.of(n), 3);
            b.bias = bias_len(bias, n, &mut short).map(|l| v.f32s(l, 2));
        }
        WeightSpec::Q4_0 { bias } => {
            b.bl = 32;
            let need = n * (k / 32) * 18;
            short |= p.data.short(need);
            let blocks = if k % 32 == 0 && k > 0 {
                ggml::quantize_q4_0(&v.f32s(nk, 1), k).map(|q| ggml::q4_0_as_bytes(&q).to_vec()).unwrap_or_default()
            } else {
                vec![]
            };
            let mut bytes = if v.wild { v.bytes(need, 1) } else { blocks };
            bytes.resize(p.data.of(need), 0x11);
            b.bytes = bytes;
            b.bias = bias_len(bias, n, &mut short).map(|l| v.f32s(l, 2));
        }
        WeightSpec::Int4Blocks { bl, kxn, scales, bias, .. } => {
            b.bl = bl as usize;
            let need = if kxn { k * n.div_ceil(2) } else { n * k.div_ceil(2) };
            let blocks = if b.bl == 0 { 0 } else { n * (k / b.bl) };
            short |= p.data.short(need) | scales.short(blocks);
            b.bytes = v.bytes(p.data.of(need), 1);
            b.scales_f16 = v.scales(scales.of(blocks), 3).into_iter().map(f16::from_f32).collect();
            b.scales_bf16 = v.scales(scales.of(blocks), 3).into_iter().map(bf16::from_f32).collect();
            b.bias = bias_len(bias, n, &mut short).map(|l| v.f32s(l, 2));
        }
        WeightSpec::Int4Asym { bl, scales, offsets, bias, .. } => {
            b.bl = bl as usize;
            let blocks = if b.bl == 0 { 0 } else { n * (k / b.bl) };
            short |= p.data.short(n * (k / 2)) | scales.short(blocks) | offsets.short(blocks);
            b.bytes = v.bytes(p.data.of(n * (k / 2)), 1);
            b.scales = v.scales(scales.of(blocks), 3);
            b.offsets = v.f32s(offsets.of(blocks), 4).into_iter().map(|o| o / 8.0).collect();
            b.bias = bias_len(bias, n, &mut short).map(|l| v.f32s(l, 2));
        }
        WeightSpec::GgmlQ8_0 => {
            let need = n * (k / 32);
            short |= p.data.short(need);
            b.q8 = if k % 32 == 0 && k > 0 && !v.wild {
                ggml::quantize_q8_0(&v.f32s(nk, 1), k).unwrap_or_default()
            } else {
                ggml::q8_0_blocks_from_bytes(&v.bytes(need * 34, 1)).unwrap_or_default()
            };
            b.q8.resize(p.data.of(need), ggml::BlockQ8_0::quantize(&[0.5; 32]));
        }
    }
    b.short = short;
    b
}

fn weights_ref<'a>(p: &PackCall, b: &'a Built, n: usize, k: usize) -> WeightsRef<'a> {
    match p.w {
        WeightSpec::F32 { kxn, .. } => {
            WeightsRef::F32(FloatWeights { n, k, order: order(kxn), data: &b.f32s, bias: b.bias.as_deref() })
        }
        WeightSpec::F16 { kxn, .. } => {
            WeightsRef::F16(FloatWeights { n, k, order: order(kxn), data: &b.f16s, bias: b.bias_f16.as_deref() })
        }
        WeightSpec::Bf16 { kxn, .. } => {
            WeightsRef::Bf16(FloatWeights { n, k, order: order(kxn), data: &b.bf16s, bias: b.bias_bf16.as_deref() })
        }
        WeightSpec::Int8 { kxn, .. } => WeightsRef::Int8PerChannel(Int8PerChannel {
            n,
            k,
            order: order(kxn),
            data: &b.i8s,
            scales: &b.scales,
            bias: b.bias.as_deref(),
        }),
        WeightSpec::Int4 { kxn, signed, .. } => WeightsRef::Int4PerChannel(Int4PerChannel {
            n,
            k,
            order: order(kxn),
            encoding: encoding(signed),
            data: &b.bytes,
            scales: &b.scales,
            bias: b.bias.as_deref(),
        }),
        WeightSpec::Q4_0 { .. } => {
            WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: &b.bytes, bias: b.bias.as_deref() }))
        }
        WeightSpec::Int4Blocks { kxn, signed, bf16_scales, .. } => {
            WeightsRef::Int4Block(BlockInt4::Blocks(Int4Blocks {
                n,
                k,
                bl: b.bl,
                order: order(kxn),
                encoding: encoding(signed),
                data: &b.bytes,
                scales: if bf16_scales { BlockScales::Bf16(&b.scales_bf16) } else { BlockScales::F16(&b.scales_f16) },
                bias: b.bias.as_deref(),
            }))
        }
        WeightSpec::Int4Asym { signed, high_first, .. } => WeightsRef::Int4AsymBlock(Int4AsymBlock {
            n,
            k,
            bl: b.bl,
            encoding: encoding(signed),
            nibbles: if high_first { NibbleOrder::HighFirst } else { NibbleOrder::LowFirst },
            data: &b.bytes,
            scales: &b.scales,
            offsets: &b.offsets,
            bias: b.bias.as_deref(),
        }),
        WeightSpec::GgmlQ8_0 => WeightsRef::GgmlQ8_0 { n, k, blocks: &b.q8 },
    }
}

/// Dense f32 weights (n x k) and bias of a valid spec, for the naive oracle.
fn dense(w: &WeightsRef<'_>, b: &Built) -> Option<(Vec<f32>, Option<Vec<f32>>)> {
    let (n, k) = w.shape();
    let d = match w {
        WeightsRef::F32(f) => to_nxk(&f.data, n, k, f.order),
        WeightsRef::F16(f) => to_nxk(&f.data.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), n, k, f.order),
        WeightsRef::Bf16(f) => to_nxk(&f.data.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), n, k, f.order),
        WeightsRef::Int8PerChannel(f) => f.dequantize().ok()?,
        WeightsRef::Int4PerChannel(f) => f.dequantize().ok()?,
        WeightsRef::Int4Block(f) => f.dequantize().ok()?,
        WeightsRef::Int4AsymBlock(f) => f.dequantize().ok()?,
        WeightsRef::GgmlQ8_0 { blocks, .. } => blocks.iter().flat_map(|q| q.dequantize()).collect(),
        _ => return None,
    };
    let bias = match w {
        WeightsRef::F16(_) => b.bias_f16.as_ref().map(|v| v.iter().map(|x| x.to_f32()).collect()),
        WeightsRef::Bf16(_) => b.bias_bf16.as_ref().map(|v| v.iter().map(|x| x.to_f32()).collect()),
        _ => b.bias.clone(),
    };
    Some((d, bias))
}

fn pack(p: PackCall) {
    let unit = match p.w {
        WeightSpec::Int4Blocks { bl, .. } | WeightSpec::Int4Asym { bl, .. } => bl as usize,
        WeightSpec::Q4_0 { .. } | WeightSpec::GgmlQ8_0 => 32,
        _ => 1,
    };
    let n = p.n.get(1, MAX_N);
    let k = p.k.get(unit, MAX_K);
    let b = build(&p, n, k);
    let w = weights_ref(&p, &b, n, k);
    let act = [DType::F32, DType::F16, DType::Bf16][p.act as usize % 3];
    let opts = PackOptions {
        activation: act,
        non_sme_layout: p.non_sme_layout,
        keep_reference: p.keep_reference,
        features: None,
        ..PackOptions::default()
    };
    let packed = PackedWeights::pack(&w, &opts);
    tag(|| format!("pack {} {act:?} {}", variant(&p.w), ok(&packed)));
    if b.short || n == 0 || k == 0 {
        assert!(packed.is_err(), "pack accepted short buffers or a zero dimension ({n}x{k}): {:?}", p.w);
    }
    let Ok(packed) = packed else { return };
    assert_eq!((packed.n(), packed.k()), (n, k));
    let _ = packed.layouts();
    let _ = packed.to_bytes();
    let oracle = if p.vals.wild { None } else { dense(&w, &b) };
    let mut scratch = Scratch::default();
    for c in p.calls.iter().take(3) {
        let m = c.m as usize % (MAX_M + 1);
        let _ = packed.kernel_for(m);
        let (xl, yl) = (c.x.of(m * k), c.y.of(m * n));
        let short = c.x.short(m * k) || c.y.short(m * n) || m == 0;
        let xv = p.vals.f32s(xl, 5);
        let clamp = c.clamp.get();
        let x_act = c.x_type.map_or(act, |t| [DType::F32, DType::F16, DType::Bf16][t as usize % 3]);
        let (x16, xb16): (Vec<f16>, Vec<bf16>) =
            (xv.iter().map(|v| f16::from_f32(*v)).collect(), xv.iter().map(|v| bf16::from_f32(*v)).collect());
        let x = match x_act {
            DType::F32 => Activation::F32(&xv),
            DType::F16 => Activation::F16(&x16),
            DType::Bf16 => Activation::Bf16(&xb16),
        };
        let (mut y32, mut y16, mut yb16) = (vec![0f32; yl], vec![f16::ZERO; yl], vec![bf16::ZERO; yl]);
        let y = match act {
            DType::F32 => ActivationMut::F32(&mut y32),
            DType::F16 => ActivationMut::F16(&mut y16),
            DType::Bf16 => ActivationMut::Bf16(&mut yb16),
        };
        let r = packed.matmul(m, x, y, clamp, par(c.threads), &mut scratch);
        tag(|| format!("matmul {} {act:?} {}", variant(&p.w), ok(&r)));
        if short || !c.clamp.valid() || x_act != act {
            assert!(r.is_err(), "matmul accepted m={m}, x {xl} of {}, y {yl} of {}, clamp {clamp:?}", m * k, m * n);
        }
        if let Some((row, len)) = c.row {
            let row = row as usize % (n + 2);
            let mut out = vec![0f32; len.of(k)];
            let rr = packed.row(row, &mut out);
            if row >= n || len.short(k) {
                assert!(rr.is_err(), "row {row} of {n} into {} accepted", out.len());
            } else if let (Ok(()), Some((d, _)), WeightSpec::F32 { .. }) = (&rr, &oracle, &p.w) {
                assert_eq!(&out[..k], &d[row * k..(row + 1) * k], "row {row} differs from the weights");
            }
        }
        if r.is_err() {
            continue;
        }
        // The packed weights serve through the family reference on the host:
        // the same bits as calling it on the unpacked weights.
        if !cfg!(target_arch = "aarch64") && act == DType::F32 && !matches!(p.w, WeightSpec::GgmlQ8_0) {
            let mut want = vec![0f32; m * n];
            let rr = match w {
                WeightsRef::F32(f) => fam::matmul_clamp_f32_f32_f32p::reference(m, &xv, &f, clamp, &mut want),
                WeightsRef::Int8PerChannel(f) => {
                    fam::matmul_clamp_f32_qai8dxp_qsi8cxp::reference(m, &xv, &f, clamp, &mut want)
                }
                WeightsRef::Int4PerChannel(f) => {
                    fam::matmul_clamp_f32_qai8dxp_qsi4cxp::reference(m, &xv, &f, clamp, &mut want)
                }
                WeightsRef::Int4Block(f) => {
                    fam::matmul_clamp_f32_qai8dxp_qsi4c32p::reference(m, &xv, f, clamp, &mut want)
                }
                WeightsRef::Int4AsymBlock(f) => {
                    fam::matmul_clamp_f32_qsi8d32p_qai4c32p::reference(m, &xv, &f, clamp, &mut want)
                }
                _ => Ok(()),
            };
            if rr.is_ok() && !matches!(w, WeightsRef::F16(_) | WeightsRef::Bf16(_)) {
                same_bits("packed matmul", &y32[..m * n], &want, f32::to_bits);
            }
        }
        if let Some((d, bias)) = &oracle {
            let want = naive(m, n, k, &xv, d, bias.as_deref(), clamp);
            match act {
                DType::F32 => check_close("packed matmul", &y32[..m * n], &want),
                DType::F16 => {
                    let x: Vec<f32> = x16.iter().map(|v| v.to_f32()).collect();
                    let want = naive(m, n, k, &x, d, bias.as_deref(), clamp);
                    check_close(
                        "packed matmul (f16)",
                        &y16[..m * n].iter().map(|v| v.to_f32()).collect::<Vec<_>>(),
                        &want,
                    )
                }
                DType::Bf16 => {
                    let x: Vec<f32> = xb16.iter().map(|v| v.to_f32()).collect();
                    let want = naive(m, n, k, &x, d, bias.as_deref(), clamp);
                    check_close(
                        "packed matmul (bf16)",
                        &yb16[..m * n].iter().map(|v| v.to_f32()).collect::<Vec<_>>(),
                        &want,
                    )
                }
            }
        }
    }
}

// ---------------------------------------------------------------- ggml

fn ggml_call(g: GgmlCall) {
    let typ = GgmlType::from_id(g.type_id as u32 % 10);
    let Ok(typ) = typ else {
        assert!(![0, 1, 2, 8].contains(&(g.type_id % 10)));
        return;
    };
    let mut ne: [i64; 4] = g.ne.map(|v| v as i64 % 9);
    ne[0] = match g.k_blocks {
        Some(b) => (b as i64 % 4 + 1) * 32,
        None => g.ne[0] as i64,
    };
    ne[1] = (g.ne[1] as i64) % (MAX_N as i64 + 1);
    ne[3] = g.ne[3] as i64 % 3;
    let valid_dims = ne.iter().all(|v| *v >= 1);
    let contiguous = if valid_dims { Tensor::contiguous_strides(typ, ne).ok() } else { None };
    let nb: [usize; 4] = match (g.nb, contiguous) {
        (None, Some(c)) => c,
        (Some(d), Some(c)) => core::array::from_fn(|i| (c[i] as i64 + d[i] as i64).max(0) as usize),
        (d, None) => d.unwrap_or_default().map(|v| v.unsigned_abs() as usize),
    };
    // Extent of the described tensor (when its dims are valid).
    let extent = valid_dims
        .then(|| typ.row_bytes(ne[0] as usize).ok())
        .flatten()
        .map(|row| (1..4).map(|i| (ne[i] as usize - 1) * nb[i]).sum::<usize>() + row)
        .unwrap_or(64);
    let len = g.data.of(extent).min(1 << 20);
    let mut data = g.vals.bytes(len, 7);
    let k = ne[0].max(1) as usize;
    // Ordinary values: write each row (of values in [-2, 2)) where the strides say.
    let mut dense_w: Option<Vec<f32>> = None;
    if !g.vals.wild && valid_dims && nb[0] == typ.block_bytes() && k % typ.block_len() == 0 {
        let (n, b2) = (ne[1] as usize, ne[2] as usize);
        let mut dw = Vec::with_capacity(n * k * b2);
        for b in 0..b2 {
            for r in 0..n {
                let vals = g.vals.f32s(k, 100 + (b * n + r) as u64);
                let (bytes, deq): (Vec<u8>, Vec<f32>) = match typ {
                    GgmlType::F32 => (vals.iter().flat_map(|v| v.to_le_bytes()).collect(), vals.clone()),
                    GgmlType::F16 => {
                        let h: Vec<f16> = vals.iter().map(|v| f16::from_f32(*v)).collect();
                        (h.iter().flat_map(|v| v.to_le_bytes()).collect(), h.iter().map(|v| v.to_f32()).collect())
                    }
                    GgmlType::Q4_0 => {
                        let q = ggml::quantize_q4_0(&vals, k).expect("whole blocks");
                        (ggml::q4_0_as_bytes(&q).to_vec(), q.iter().flat_map(|b| b.dequantize()).collect())
                    }
                    GgmlType::Q8_0 => {
                        let q = ggml::quantize_q8_0(&vals, k).expect("whole blocks");
                        (ggml::q8_0_as_bytes(&q).to_vec(), q.iter().flat_map(|b| b.dequantize()).collect())
                    }
                };
                let at = b * nb[2] + r * nb[1];
                if at + bytes.len() <= data.len() {
                    data[at..at + bytes.len()].copy_from_slice(&bytes);
                }
                dw.extend(deq);
            }
        }
        dense_w = Some(dw);
    }
    let src0 = Tensor { typ, ne, nb, data: &data };
    let checked = src0.check("src0");
    let w = GgmlWeights::repack(&src0);
    tag(|| format!("ggml repack {typ:?} {}", ok(&w)));
    if checked.is_err() || g.data.short(extent) {
        assert!(w.is_err(), "repack accepted src0 ne {ne:?} nb {nb:?} len {len} (extent {extent})");
    }
    let Ok(mut w) = w else { return };
    // Rows written at overlapping strides (allowed for size-1 dims) may have
    // overwritten each other: use the oracle only for non-overlapping rows.
    let (k, n) = w.shape();
    let batches = ne[2] as usize;
    if nb[1] < typ.row_bytes(k).unwrap_or(usize::MAX) && n > 1 {
        dense_w = None;
    }
    w.set_hybrid(g.hybrid);
    let _ = w.layouts();
    if g.roundtrip {
        if let Ok(bytes) = w.to_bytes() {
            let again = GgmlWeights::from_shared(std::sync::Arc::new(bytes), true).expect("own container loads");
            assert_eq!(again.shape(), w.shape());
        }
    }
    let mut scratch = MulMatScratch::default();
    for op in g.ops.into_iter().take(3) {
        match op {
            GgmlOp::MulMat {
                src1_type,
                dst_type,
                m,
                ne2,
                ne3,
                src1_k,
                dst_ne,
                src1_pad,
                dst_pad,
                src1_len,
                dst_len,
                threads,
            } => {
                let t1 = GgmlType::from_id([0u32, 0, 0, 1, 2, 8][src1_type as usize % 6]).expect("known id");
                let td = GgmlType::from_id([0u32, 0, 0, 1][dst_type as usize % 4]).expect("known id");
                let m = m as usize % (MAX_M + 1);
                let ne12 = (ne2 as usize % 4) * batches.max(1) + usize::from(ne2 % 7 == 6);
                let ne1: [i64; 4] =
                    [src1_k.map_or(k as i64, |v| v as i64), m as i64, ne12 as i64, 1 + i64::from(ne3 % 5 == 4)];
                let nd: [i64; 4] = dst_ne.map_or([n as i64, m as i64, ne12 as i64, ne1[3]], |d| d.map(|v| v as i64));
                let strides = |typ: GgmlType, ne: [i64; 4], pad: [u8; 3]| -> Option<[usize; 4]> {
                    let c = Tensor::contiguous_strides(typ, ne).ok()?;
                    let nb1 = c[1] + pad[0] as usize % 9 * 4;
                    let nb2 = nb1 * ne[1] as usize + pad[1] as usize % 9 * 4;
                    let nb3 = nb2 * ne[2] as usize + pad[2] as usize % 9 * 4;
                    Some([c[0], nb1, nb2, nb3])
                };
                let ext = |typ: GgmlType, ne: [i64; 4], nb: [usize; 4]| -> usize {
                    typ.row_bytes(ne[0] as usize).unwrap_or(0)
                        + (1..4).map(|i| (ne[i] as usize - 1) * nb[i]).sum::<usize>()
                };
                let nb1 = strides(t1, ne1, src1_pad).unwrap_or([4, 4, 4, 4]);
                let nbd = strides(td, nd, dst_pad).unwrap_or([4, 4, 4, 4]);
                let e1 = if ne1.iter().all(|v| *v >= 1) { ext(t1, ne1, nb1) } else { 0 };
                let ed = if nd.iter().all(|v| *v >= 1) { ext(td, nd, nbd) } else { 0 };
                let x = g.vals.bytes(0, 0).into_iter().chain(
                    (0..src1_len.of(e1).min(1 << 20).div_ceil(4))
                        .flat_map(|i| (((i * 37 % 64) as f32 - 32.0) / 16.0).to_le_bytes()),
                );
                let mut xb: Vec<u8> = x.collect();
                xb.truncate(src1_len.of(e1).min(1 << 20));
                let mut db = vec![0u8; dst_len.of(ed).min(1 << 20)];
                let src1 = Tensor { typ: t1, ne: ne1, nb: nb1, data: &xb };
                let mut dst = TensorMut { typ: td, ne: nd, nb: nbd, data: &mut db };
                let valid = t1 == GgmlType::F32
                    && td == GgmlType::F32
                    && m >= 1
                    && ne12 >= 1
                    && ne1[0] == k as i64
                    && ne1[3] == 1
                    && nd == [n as i64, m as i64, ne12 as i64, 1]
                    && ne12 % batches == 0
                    && !src1_len.short(e1)
                    && !dst_len.short(ed);
                let r = w.mul_mat(&src1, &mut dst, par(threads), &mut scratch);
                tag(|| format!("ggml mul_mat {typ:?} {}", ok(&r)));
                if !valid {
                    assert!(
                        r.is_err(),
                        "mul_mat accepted src1 {t1:?} {ne1:?}/{} dst {td:?} {nd:?}/{}",
                        xb.len(),
                        db.len()
                    );
                    continue;
                }
                r.expect("a valid mul_mat succeeds");
                let Some(dw) = &dense_w else { continue };
                for b in 0..ne12 {
                    let wb = b / (ne12 / batches);
                    let wd = &dw[wb * n * k..(wb + 1) * n * k];
                    let x: Vec<f32> = (0..m * k)
                        .map(|i| {
                            let at = b * nb1[2] + (i / k) * nb1[1] + 4 * (i % k);
                            f32::from_le_bytes(xb[at..at + 4].try_into().unwrap())
                        })
                        .collect();
                    let y: Vec<f32> = (0..m * n)
                        .map(|i| {
                            let at = b * nbd[2] + (i / n) * nbd[1] + 4 * (i % n);
                            f32::from_le_bytes(db[at..at + 4].try_into().unwrap())
                        })
                        .collect();
                    check_close("ggml mul_mat", &y, &naive(m, n, k, &x, wd, None, Clamp::NONE));
                }
            }
            GgmlOp::GetRows { rows, dst } => {
                let rows: Vec<i64> = rows.into_iter().take(8).map(|r| r as i64 % (n as i64 + 3)).collect();
                let mut out = vec![0f32; dst.of(rows.len() * k)];
                let r = w.get_rows(&rows, &mut out);
                tag(|| format!("ggml get_rows {typ:?} {}", ok(&r)));
                let bad = rows.iter().any(|r| *r < 0 || *r as usize >= n) || dst.short(rows.len() * k);
                if bad {
                    assert!(r.is_err(), "get_rows accepted rows {rows:?} (n {n}) into {}", out.len());
                    continue;
                }
                r.expect("valid get_rows succeeds");
                let Some(dw) = &dense_w else { continue };
                for (i, &row) in rows.iter().enumerate() {
                    let want = &dw[row as usize * k..(row as usize + 1) * k];
                    let rmax = want.iter().fold(0f32, |a, v| a.max(v.abs()));
                    let tol = if typ == GgmlType::Q8_0 { rmax / 100.0 } else { 0.0 };
                    for (c, (g, wv)) in out[i * k..(i + 1) * k].iter().zip(want).enumerate() {
                        assert!((g - wv).abs() <= tol, "get_rows: row {row} value {c} is {g}, the weights hold {wv}");
                    }
                }
            }
            GgmlOp::WorkSize { m } => {
                if let Ok(ws) = w.work_size(m as usize) {
                    assert!(ws >= m as usize * k.max(n) * 4, "work size {ws} too small for m {m}");
                }
            }
            GgmlOp::KernelFor { m } => {
                let _ = w.kernel_for(m as usize);
            }
        }
    }
}

// ---------------------------------------------------------------- families

fn family(f: FamilyCall) {
    use FamilyCall as F;
    let name = variant(&f);
    match f {
        F::FloatF32 { m, n, k, kxn, bias, lens, clamp, vals } => {
            let (m, n, k) = (m as usize % (MAX_M + 1), n.get(1, MAX_N), k.get(1, MAX_K));
            let data = vals.f32s(lens[0].of(n * k), 1);
            let bias_v = bias.map(|l| vals.f32s(l.of(n), 2));
            let x = vals.f32s(lens[1].of(m * k), 3);
            let mut y = vec![0f32; m * n];
            let w = FloatWeights { n, k, order: order(kxn), data: &data, bias: bias_v.as_deref() };
            let r = fam::matmul_clamp_f32_f32_f32p::reference(m, &x, &w, clamp.get(), &mut y);
            let short = lens[0].short(n * k) || lens[1].short(m * k) || bias.is_some_and(|l| l.short(n));
            tag(|| format!("family {name} {}", ok(&r)));
            if short || m == 0 || n == 0 || k == 0 || !clamp.valid() {
                assert!(r.is_err(), "f32 reference accepted {m}x{n}x{k} with short buffers or a bad clamp");
            } else if r.is_ok() && !vals.wild {
                let d = to_nxk(&data, n, k, order(kxn));
                check_close("f32 reference", &y, &naive(m, n, k, &x, &d, bias_v.as_deref(), clamp.get()));
            }
        }
        F::FloatF16 { m, n, k, kxn, bias, lens, clamp, vals } => {
            let (m, n, k) = (m as usize % (MAX_M + 1), n.get(1, MAX_N), k.get(1, MAX_K));
            let data = vals.f16s(lens[0].of(n * k), 1);
            let bias_v = bias.map(|l| vals.f16s(l.of(n), 2));
            let x = vals.f16s(lens[1].of(m * k), 3);
            let mut y = vec![f16::ZERO; m * n];
            let w = FloatWeights { n, k, order: order(kxn), data: &data, bias: bias_v.as_deref() };
            let r = fam::matmul_clamp_f16_f16_f16p::reference(m, &x, &w, clamp.get(), &mut y);
            let r2 = fam::matmul_clamp_f16_bf16p_bf16p::reference(m, &x, &w, clamp.get(), &mut y);
            let short = lens[0].short(n * k) || lens[1].short(m * k) || bias.is_some_and(|l| l.short(n));
            tag(|| format!("family {name} {}", ok(&r)));
            if short || m == 0 || n == 0 || k == 0 || !clamp.valid() {
                assert!(
                    r.is_err() && r2.is_err(),
                    "f16 references accepted {m}x{n}x{k} with short buffers or a bad clamp"
                );
            }
        }
        F::Bf16p { m, n, k, half_lhs, lens, clamp, vals } => {
            let (m, n, k) = (m as usize % (MAX_M + 1), n.get(1, MAX_N), k.get(1, MAX_K));
            let mut y = vec![0f32; lens[2].of(m * n)];
            let short = lens[0].short(n * k) || lens[1].short(m * k) || lens[2].short(m * n);
            let r = if half_lhs {
                let data = vals.f16s(lens[0].of(n * k), 1);
                let w = FloatWeights { n, k, order: Order::NxK, data: &data, bias: None };
                fam::matmul_clamp_f32_bf16p_bf16p::reference_f16(
                    m,
                    &vals.f16s(lens[1].of(m * k), 3),
                    &w,
                    clamp.get(),
                    &mut y,
                )
            } else {
                let data = vals.f32s(lens[0].of(n * k), 1);
                let w = FloatWeights { n, k, order: Order::NxK, data: &data, bias: None };
                fam::matmul_clamp_f32_bf16p_bf16p::reference(
                    m,
                    &vals.f32s(lens[1].of(m * k), 3),
                    &w,
                    clamp.get(),
                    &mut y,
                )
            };
            tag(|| format!("family {name} {}", ok(&r)));
            if short || m == 0 || n == 0 || k == 0 {
                assert!(r.is_err(), "bf16p reference accepted {m}x{n}x{k} with short buffers");
            }
        }
        F::Qsi4cxp { m, n, k, kxn, signed, lens, clamp, vals } => {
            let (m, n, k) = (m as usize % (MAX_M + 1), n.get(1, MAX_N), k.get(2, MAX_K));
            let need = if kxn { k * n.div_ceil(2) } else { n * k.div_ceil(2) };
            let data = vals.bytes(lens[0].of(need), 1);
            let scales = vals.scales(lens[1].of(n), 2);
            let w = Int4PerChannel {
                n,
                k,
                order: order(kxn),
                encoding: encoding(signed),
                data: &data,
                scales: &scales,
                bias: None,
            };
            let x = vals.f32s(lens[2].of(m * k), 3);
            let mut y = vec![0f32; lens[3].of(m * n)];
            let r = fam::matmul_clamp_f32_qai8dxp_qsi4cxp::reference(m, &x, &w, clamp.get(), &mut y);
            let xb: Vec<bf16> = x.iter().map(|v| bf16::from_f32(*v)).collect();
            let mut yb = vec![bf16::ZERO; y.len()];
            let r2 = fam::matmul_clamp_bf16_qai8dxp_qsi4cxp::reference(m, &xb, &w, clamp.get(), &mut yb);
            let short = lens.iter().zip([need, n, m * k, m * n]).any(|(l, e)| l.short(e));
            tag(|| format!("family {name} {}", ok(&r)));
            if short || m == 0 || n == 0 || k == 0 {
                assert!(r.is_err() && r2.is_err(), "qsi4cxp references accepted {m}x{n}x{k} with short buffers");
            } else if r.is_ok() && !vals.wild {
                check_close(
                    "qsi4cxp reference",
                    &y[..m * n],
                    &naive(m, n, k, &x, &w.dequantize().unwrap(), None, clamp.get()),
                );
            }
        }
        F::Qsi8cxpF16 { m, n, k, four, lens, clamp, vals } => {
            let (m, n, k) = (m as usize % (MAX_M + 1), n.get(1, MAX_N), k.get(4, MAX_K));
            let data: Vec<i8> = vals.bytes(lens[0].of(n * k), 1).into_iter().map(|b| b as i8).collect();
            let scales = vals.scales(lens[1].of(n), 2);
            let w = Int8PerChannel { n, k, order: Order::NxK, data: &data, scales: &scales, bias: None };
            let x = vals.f16s(lens[2].of(m * k), 3);
            let mut y = vec![f16::ZERO; lens[3].of(m * n)];
            let block = if four { Qai8dxF16Block::Four } else { Qai8dxF16Block::Eight };
            let r = fam::matmul_clamp_f16_qai8dxp_qsi8cxp::reference(m, &x, &w, clamp.get(), block, &mut y);
            let short = lens.iter().zip([n * k, n, m * k, m * n]).any(|(l, e)| l.short(e));
            tag(|| format!("family {name} {}", ok(&r)));
            if short || m == 0 || n == 0 || k == 0 {
                assert!(r.is_err(), "qsi8cxp f16 reference accepted {m}x{n}x{k} with short buffers");
            }
        }
        F::Qsu2cxp { m, n, k, lut, lens, clamp, vals } => {
            let (m, n, k) = (m as usize % (MAX_M + 1), n.get(1, MAX_N), k.get(4, MAX_K));
            let need = n * k.div_ceil(4);
            let data = vals.bytes(lens[0].of(need), 1);
            let scales = vals.scales(lens[1].of(n), 2);
            let w = UInt2PerChannel { n, k, data: &data, scales: &scales, bias: None, lut };
            let x = vals.f32s(lens[2].of(m * k), 3);
            let mut y = vec![0f32; lens[3].of(m * n)];
            let r = fam::matmul_clamp_f32_qai8dxp_qsu2cxp::reference(m, &x, &w, clamp.get(), &mut y);
            let short = lens.iter().zip([need, n, m * k, m * n]).any(|(l, e)| l.short(e));
            tag(|| format!("family {name} {}", ok(&r)));
            if short || m == 0 || n == 0 || k == 0 {
                assert!(r.is_err(), "qsu2cxp reference accepted {m}x{n}x{k} with short buffers");
            } else if r.is_ok() && !vals.wild {
                check_close(
                    "qsu2cxp reference",
                    &y[..m * n],
                    &naive(m, n, k, &x, &w.dequantize().unwrap(), None, clamp.get()),
                );
            }
        }
        F::Qsi4c32p { m, n, k, bl, bf16_out, f16p, lens, clamp, vals } => {
            let bl = bl as usize % 130;
            let (m, n, k) = (m as usize % (MAX_M + 1), n.get(1, MAX_N), k.get(bl.max(1), MAX_K));
            let need = n * k.div_ceil(2);
            let blocks = if bl == 0 { 0 } else { n * (k / bl) };
            let data = vals.bytes(lens[0].of(need), 1);
            let scales: Vec<bf16> = vals.scales(lens[1].of(blocks), 2).into_iter().map(bf16::from_f32).collect();
            let w = Int4Blocks {
                n,
                k,
                bl,
                order: Order::NxK,
                encoding: Int4Encoding::Offset8,
                data: &data,
                scales: BlockScales::Bf16(&scales),
                bias: None,
            };
            let x = vals.f32s(lens[2].of(m * k), 3);
            let mut y = vec![0f32; lens[3].of(m * n)];
            let r = if bf16_out {
                let xb: Vec<bf16> = x.iter().map(|v| bf16::from_f32(*v)).collect();
                let mut yb = vec![bf16::ZERO; y.len()];
                fam::matmul_clamp_bf16_qai8dxp_qsi4c32p::reference(m, &xb, w, clamp.get(), &mut yb)
            } else if f16p {
                fam::matmul_clamp_f32_f16p_qsi4c32p::reference(m, &x, w, clamp.get(), &mut y)
            } else {
                let r1 = fam::matmul_clamp_f32_qsi8d32p_qsi4c32p::reference(m, &x, w, clamp.get(), &mut y);
                let r2 = fam::matmul_clamp_f32_qai8dxp_qsi4c32p::reference(m, &x, w, clamp.get(), &mut y);
                assert_eq!(r1.is_ok(), r2.is_ok(), "two families disagree on the same weights: {r1:?} {r2:?}");
                r2
            };
            let short = lens.iter().zip([need, blocks, m * k, m * n]).any(|(l, e)| l.short(e));
            tag(|| format!("family {name} {}", ok(&r)));
            if short || m == 0 || n == 0 || k == 0 || bl == 0 || bl % 32 != 0 || k % bl != 0 {
                assert!(r.is_err(), "qsi4c32p reference accepted {m}x{n}x{k} bl {bl} with short buffers");
            } else if r.is_ok() && !vals.wild && !bf16_out {
                let d = BlockInt4::from(w).dequantize().unwrap();
                check_close("qsi4c32p reference", &y[..m * n], &naive(m, n, k, &x, &d, None, clamp.get()));
            }
        }
        F::Qai4c32p { m, n, k, bl, f16, lens, clamp, vals } => {
            let bl = bl as usize % 130;
            let (m, n, k) = (m as usize % (MAX_M + 1), n.get(1, MAX_N), k.get(bl.max(1), MAX_K));
            let blocks = if bl == 0 { 0 } else { n * (k / bl) };
            let data = vals.bytes(lens[0].of(n * (k / 2)), 1);
            let scales = vals.scales(lens[1].of(blocks), 2);
            let offsets = vals.f32s(lens[2].of(blocks), 4);
            let w = Int4AsymBlock {
                n,
                k,
                bl,
                encoding: Int4Encoding::Offset8,
                nibbles: NibbleOrder::LowFirst,
                data: &data,
                scales: &scales,
                offsets: &offsets,
                bias: None,
            };
            let x = vals.f32s(lens[3].of(m * k), 3);
            let mut y = vec![0f32; lens[4].of(m * n)];
            let r = if f16 {
                let xh: Vec<f16> = x.iter().map(|v| f16::from_f32(*v)).collect();
                let mut yh = vec![f16::ZERO; y.len()];
                fam::matmul_clamp_f16_qsi8d32p_qai4c32p::reference(m, &xh, &w, clamp.get(), &mut yh)
            } else {
                fam::matmul_clamp_f32_qsi8d32p_qai4c32p::reference(m, &x, &w, clamp.get(), &mut y)
            };
            let short = lens.iter().zip([n * (k / 2), blocks, blocks, m * k, m * n]).any(|(l, e)| l.short(e));
            tag(|| format!("family {name} {}", ok(&r)));
            if short || m == 0 || n == 0 || k == 0 || bl == 0 || k % bl != 0 || bl % 2 != 0 {
                assert!(r.is_err(), "qai4c32p reference accepted {m}x{n}x{k} bl {bl} with short buffers");
            } else if r.is_ok() && !vals.wild && !f16 {
                check_close(
                    "qai4c32p reference",
                    &y[..m * n],
                    &naive(m, n, k, &x, &w.dequantize().unwrap(), None, clamp.get()),
                );
            }
        }
        F::Qai8Static { m, n, k, kxn, lens, q, out, vals } => {
            let (m, n, k) = (m as usize % (MAX_M + 1), n.get(1, MAX_N), k.get(1, MAX_K));
            let data: Vec<i8> = vals.bytes(lens[0].of(n * k), 1).into_iter().map(|b| b as i8).collect();
            let scales = vals.scales(lens[1].of(n), 2);
            let w = StaticInt8Weights { n, k, order: order(kxn), data: &data, scales: &scales, bias: None };
            let x: Vec<i8> = vals.bytes(lens[2].of(m * k), 3).into_iter().map(|b| b as i8).collect();
            let mut y = vec![0i8; lens[3].of(m * n)];
            let quant = Qai8Quant { lhs_scale: q.0, lhs_zero_point: q.1, dst_scale: q.2 };
            let output = Qai8Output { zero_point: out.0, min: out.1, max: out.2 };
            let r = fam::matmul_clamp_qai8_qai8p_qsi8cxp::reference(m, &x, &w, &quant, &output, &mut y);
            let r2 = fam::matmul_clamp_qai8_qai8_qsi8cxp::reference(m, &x, &w, &quant, &output, &mut y);
            let short = lens.iter().zip([n * k, n, m * k, m * n]).any(|(l, e)| l.short(e));
            tag(|| format!("family {name} {}", ok(&r)));
            if short || m == 0 || n == 0 || k == 0 {
                assert!(r.is_err() && r2.is_err(), "qai8 references accepted {m}x{n}x{k} with short buffers");
            }
            if r.is_ok() {
                assert!(y[..m * n].iter().all(|v| *v >= output.min.min(output.max) || output.min > output.max));
            }
        }
        F::U8 { m, n, k, kxn, lens, f32_out, scale, clamp, vals } => {
            use fam::matmul_i32_u8p_u8p::AccBias;
            let (m, n, k) = (m as usize % (MAX_M + 1), n.get(1, MAX_N), k.get(1, MAX_K));
            let data = vals.bytes(lens[0].of(n * k), 1);
            let w = U8Weights { n, k, order: order(kxn), data: &data };
            let x = vals.bytes(lens[1].of(m * k), 3);
            let per_row: Vec<i32> = (0..lens[2].of(m)).map(|i| i as i32 - 3).collect();
            let bias = AccBias { per_row: Some(&per_row), per_col: None };
            let short = lens.iter().zip([n * k, m * k, m, m * n]).any(|(l, e)| l.short(e));
            let r = if f32_out {
                let stage = fam::matmul_clamp_f32_u8p_u8p::OutputStage { scale, bias: None };
                let mut y = vec![0f32; lens[3].of(m * n)];
                fam::matmul_clamp_f32_u8p_u8p::reference(m, &x, &w, &bias, &stage, clamp.get(), &mut y)
            } else {
                let mut y = vec![0i32; lens[3].of(m * n)];
                let r = fam::matmul_i32_u8p_u8p::reference(m, &x, &w, &bias, &mut y);
                if r.is_ok() && m > 0 && n > 0 && !kxn {
                    let want: i32 = (0..k).map(|p| x[p] as i32 * data[p] as i32).sum::<i32>() + per_row[0];
                    assert_eq!(y[0], want, "u8 reference output 0");
                }
                r
            };
            tag(|| format!("family {name} {}", ok(&r)));
            if short || m == 0 || n == 0 || k == 0 {
                assert!(r.is_err(), "u8 reference accepted {m}x{n}x{k} with short buffers");
            }
        }
        F::Imatmul { m, chunks, chunk_len, n, pads, offsets, lens, vals } => {
            let (m, cc, cl, n) = (m as usize % 5, chunks as usize % 5, chunk_len as usize % 9, n.get(1, 16));
            let k = cc * cl;
            let src = vals.f32s(lens[0].of(64), 1);
            let entries: Vec<Option<usize>> = (0..lens[1].of(m * cc))
                .map(|i| {
                    let off = offsets.get(i).copied().unwrap_or(0) as usize;
                    if pads.get(i).copied().unwrap_or(false) { None } else { Some(off % 72) }
                })
                .collect();
            let lhs = Indirection { m, k_chunk_count: cc, k_chunk_length: cl, src: &src, chunks: &entries, pad: 0.0 };
            let data = vals.f32s(n * k, 2);
            let w = FloatWeights { n, k, order: Order::NxK, data: &data, bias: None };
            let mut y = vec![0f32; lens[2].of(m * n)];
            let r = fam::imatmul_clamp_f32_f32p_f32p::reference(&lhs, &w, Clamp::NONE, &mut y);
            let oob = entries.iter().take(m * cc).flatten().any(|o| o + cl > src.len());
            tag(|| format!("family {name} {}", ok(&r)));
            if lens[1].short(m * cc) || lens[2].short(m * n) || oob || m == 0 || k == 0 {
                assert!(r.is_err(), "imatmul reference accepted m {m} chunks {cc}x{cl} with bad chunks or buffers");
            } else if r.is_ok() && !vals.wild {
                let x = lhs.gather().expect("validated");
                check_close("imatmul reference", &y[..m * n], &naive(m, n, k, &x, &data, None, Clamp::NONE));
            }
        }
        F::Dwconv { h, w, c, pad, lens, clamp, vals } => {
            let shape = DepthwiseShape {
                in_h: h as usize % 9,
                in_w: w as usize % 9,
                channels: c as usize % 9,
                pad_top: pad[0] as usize % 3,
                pad_bottom: pad[1] as usize % 3,
                pad_left: pad[2] as usize % 3,
                pad_right: pad[3] as usize % 3,
            };
            let ch = shape.channels;
            let src_need = shape.in_h * shape.in_w * ch;
            let src = vals.f32s(lens[0].of(src_need), 1);
            let wd = vals.f32s(lens[1].of(9 * ch), 2);
            let bias = vals.f32s(lens[2].of(ch), 3);
            let weights = DepthwiseWeights { channels: ch, data: &wd, bias: Some(&bias) };
            let oh = (shape.in_h + shape.pad_top + shape.pad_bottom).saturating_sub(2);
            let ow = (shape.in_w + shape.pad_left + shape.pad_right).saturating_sub(2);
            let mut dst = vec![0f32; lens[3].of(oh * ow * ch)];
            let r = fam::dwconv_f32_f32_f32p::reference(&shape, &src, &weights, clamp.get(), &mut dst);
            let short = lens.iter().zip([src_need, 9 * ch, ch, oh * ow * ch]).any(|(l, e)| l.short(e));
            tag(|| format!("family {name} {}", ok(&r)));
            if short || ch == 0 || oh == 0 || ow == 0 || !clamp.valid() {
                assert!(r.is_err(), "dwconv reference accepted {shape:?} with short buffers or a bad clamp");
            }
        }
    }
}

// ---------------------------------------------------------------- quant

fn quant_call(q: QuantCall) {
    tag(|| format!("quant {}", variant(&q)));
    match q {
        QuantCall::Qai8dx { len, vals, even } => {
            let x = vals.f32s(len as usize, 1);
            let rounding = if even { Rounding::HalfToEven } else { Rounding::HalfAwayFromZero };
            let r = quant::qai8dx_row_with(&x, rounding);
            assert_eq!(r.q.len(), x.len());
            if !vals.wild {
                for (v, q) in x.iter().zip(&r.q) {
                    let back = (*q as i32 - r.zero_point) as f32 * r.recip_scale;
                    assert!((back - v).abs() <= r.recip_scale * 1.01 + 1e-6, "qai8dx: {v} came back as {back}");
                }
            }
        }
        QuantCall::Qai8dxHalf { m, k, vals, bf16: use_bf16, four } => {
            let (m, k) = (m as usize % 5, k as usize % 70);
            let rows = if use_bf16 {
                quant::qai8dx_rows_bf16(&vals.bf16s(m * k, 1), m, k)
            } else {
                let block = if four { Qai8dxF16Block::Four } else { Qai8dxF16Block::Eight };
                quant::qai8dx_rows_f16(&vals.f16s(m * k, 1), m, k, block)
            };
            assert_eq!(rows.len(), m);
            assert!(rows.iter().all(|r| r.q.len() == k));
        }
        QuantCall::Qsi8d32Row { blocks, bl, vals, even } => {
            let bl = bl as usize % 64 + 1;
            let x = vals.f32s(blocks as usize % 5 * bl, 1);
            let rounding = if even { Rounding::HalfToEven } else { Rounding::HalfAwayFromZero };
            let r = quant::qsi8d32_row(&x, bl, rounding);
            assert_eq!((r.q.len(), r.scales.len()), (x.len(), x.len() / bl));
        }
        QuantCall::Qsi8d32Block { len, vals, f16: use_f16 } => {
            let x = vals.f32s(len as usize % 129, 1);
            let mut q = vec![0i8; x.len()];
            let b = if use_f16 {
                let h: Vec<f16> = x.iter().map(|v| f16::from_f32(*v)).collect();
                quant::qsi8d32_block_f16(&h, &mut q)
            } else {
                quant::qsi8d32_block(&x, &mut q)
            };
            assert_eq!(b.sum, q.iter().map(|v| *v as i32).sum::<i32>());
        }
        QuantCall::GgmlQuant { len, k, vals, q8 } => {
            let k = k.get(32, MAX_K);
            let x = vals.f32s(len as usize % 200, 1);
            let r = if q8 {
                ggml::quantize_q8_0(&x, k).map(|b| b.iter().flat_map(|b| b.dequantize()).collect::<Vec<f32>>())
            } else {
                ggml::quantize_q4_0(&x, k).map(|b| b.iter().flat_map(|b| b.dequantize()).collect::<Vec<f32>>())
            };
            if k == 0 || k % 32 != 0 || x.len() % k.max(1) != 0 {
                assert!(r.is_err(), "quantize accepted {} values as rows of {k}", x.len());
            }
            if let (Ok(d), false) = (&r, vals.wild) {
                assert_eq!(d.len(), x.len());
                for (a, b) in d.iter().zip(&x) {
                    assert!(
                        (a - b).abs() <= if q8 { 2.0 / 127.0 } else { 2.0 / 7.0 } + 1e-6,
                        "ggml quantise: {b} -> {a}"
                    );
                }
            }
        }
        QuantCall::GgmlFromBytes { len, vals, q8 } => {
            let all = vals.bytes(len as usize % 400 + 1, 1);
            // Start at an odd address half the time (the views need 2-byte
            // alignment; an empty view needs none).
            let bytes = &all[(len as usize >> 9) & 1..];
            let aligned = bytes.is_empty() || bytes.as_ptr() as usize % 2 == 0;
            if q8 {
                let r = ggml::q8_0_blocks_from_bytes(bytes);
                assert_eq!(r.is_ok(), bytes.len() % 34 == 0, "Q8_0 from {} bytes", bytes.len());
                let v = ggml::q8_0_from_bytes(bytes);
                assert_eq!(v.is_ok(), bytes.len() % 34 == 0 && aligned, "Q8_0 view of {} bytes", bytes.len());
            } else {
                let r = ggml::q4_0_from_bytes(bytes);
                assert_eq!(r.is_ok(), bytes.len() % 18 == 0 && aligned, "Q4_0 view of {} bytes", bytes.len());
            }
        }
        QuantCall::TypeId { id, k } => {
            if let Ok(t) = GgmlType::from_id(id) {
                let r = t.row_bytes(k as usize);
                assert_eq!(r.is_ok(), k as usize % t.block_len() == 0);
            }
        }
    }
}
