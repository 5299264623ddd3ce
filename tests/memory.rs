//! Memory: what packed weights hold against the weights as given, for every
//! weight kind, with the default options, on whatever CPU this runs on.
//!
//! Goal (issue 11): one copy, at most 1.02x the input bytes plus a bias slot
//! per channel and the padding of a kernel's row block; `kleidiai::ggml` no
//! more than ggml's own allocation for the same tensor (ggml's formula:
//! a 64-byte header, then each slot 64-byte aligned, at least the tensor's
//! own bytes; F16 weights stay as given). Each case is recorded
//! (`{"kind":"memory",...}`) for the table `xtask test` prints, and fails
//! here above the goal.

mod common;

use common::{Rng, json, record};
use half::{bf16, f16};
use kleidiai::formats::{
    BlockInt4, BlockScales, FloatWeights, Int4AsymBlock, Int4Blocks, Int4Encoding, Int4PerChannel, Int8PerChannel,
    NibbleOrder, Order, Q4_0,
};
use kleidiai::ggml::{GgmlType, GgmlWeights, Tensor};
use kleidiai::weights::{DType, PackOptions, PackedWeights, WeightsRef};

/// The largest row block of any kernel (f32 GEMV at SVL 512): the most
/// padding a layout adds to n.
const MAX_ROW_BLOCK: usize = 128;

fn limit(input: usize, n: usize, k: usize) -> f64 {
    let rows = n.div_ceil(MAX_ROW_BLOCK) * MAX_ROW_BLOCK;
    let pad = rows as f64 / n as f64 * (k.div_ceil(32) * 32) as f64 / k as f64;
    1.02 * input as f64 * pad + 4.0 * rows as f64
}

struct Data {
    f: Vec<f32>,
    h: Vec<f16>,
    b: Vec<bf16>,
    i8s: Vec<i8>,
    nib: Vec<u8>,
    scales: Vec<f32>,
    bias: Vec<f32>,
    block_f16: Vec<f16>,
    block_f32: Vec<f32>,
    offsets: Vec<f32>,
    q4: Vec<u8>,
    q8: Vec<kleidiai::ggml::BlockQ8_0>,
}

impl Data {
    fn new(n: usize, k: usize) -> Data {
        let mut rng = Rng::new(11);
        let f = rng.vec_f32(n * k);
        let blocks = n * k / 32;
        Data {
            h: f.iter().map(|v| f16::from_f32(*v)).collect(),
            b: f.iter().map(|v| bf16::from_f32(*v)).collect(),
            i8s: (0..n * k).map(|_| rng.next_u64() as i8).collect(),
            nib: rng.bytes(n * k / 2),
            scales: vec![0.01; n],
            bias: rng.vec_f32(n),
            block_f16: vec![f16::from_f32(0.01); blocks],
            block_f32: vec![0.01; blocks],
            offsets: vec![0.5; blocks],
            q4: kleidiai::ggml::q4_0_as_bytes(&kleidiai::ggml::quantize_q4_0(&f, k).unwrap()).to_vec(),
            q8: kleidiai::ggml::quantize_q8_0(&f, k).unwrap(),
            f,
        }
    }

    /// Every weight kind with the activation type it is packed for.
    fn cases(&self, n: usize, k: usize) -> Vec<(&'static str, WeightsRef<'_>, DType)> {
        fn fw<T>(n: usize, k: usize, data: &[T]) -> FloatWeights<'_, T> {
            FloatWeights { n, k, order: Order::NxK, data, bias: None }
        }
        let i4 = |encoding, bias| Int4PerChannel {
            n,
            k,
            order: Order::NxK,
            encoding,
            data: &self.nib,
            scales: &self.scales,
            bias,
        };
        vec![
            ("f32", WeightsRef::F32(fw(n, k, &self.f)), DType::F32),
            ("f32+bias", WeightsRef::F32(FloatWeights { bias: Some(&self.bias), ..fw(n, k, &self.f) }), DType::F32),
            ("f16", WeightsRef::F16(fw(n, k, &self.h)), DType::F32),
            ("f16 (f16 act)", WeightsRef::F16(fw(n, k, &self.h)), DType::F16),
            ("bf16", WeightsRef::Bf16(fw(n, k, &self.b)), DType::F32),
            (
                "int8",
                WeightsRef::Int8PerChannel(Int8PerChannel {
                    n,
                    k,
                    order: Order::NxK,
                    data: &self.i8s,
                    scales: &self.scales,
                    bias: None,
                }),
                DType::F32,
            ),
            ("q8_0", WeightsRef::GgmlQ8_0 { n, k, blocks: &self.q8 }, DType::F32),
            ("int4", WeightsRef::Int4PerChannel(i4(Int4Encoding::Signed, None)), DType::F32),
            ("int4 (bf16 act)", WeightsRef::Int4PerChannel(i4(Int4Encoding::Offset8, None)), DType::Bf16),
            ("q4_0", WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: &self.q4, bias: None })), DType::F32),
            (
                "q4_0+bias",
                WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: &self.q4, bias: Some(&self.bias) })),
                DType::F32,
            ),
            (
                "q4_0 (bf16 act)",
                WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: &self.q4, bias: None })),
                DType::Bf16,
            ),
            (
                "int4 blocks",
                WeightsRef::Int4Block(BlockInt4::Blocks(Int4Blocks {
                    n,
                    k,
                    bl: 32,
                    order: Order::NxK,
                    encoding: Int4Encoding::Offset8,
                    data: &self.nib,
                    scales: BlockScales::F16(&self.block_f16),
                    bias: None,
                })),
                DType::F32,
            ),
            (
                "int4 asym",
                WeightsRef::Int4AsymBlock(Int4AsymBlock {
                    n,
                    k,
                    bl: 32,
                    encoding: Int4Encoding::Offset8,
                    nibbles: NibbleOrder::LowFirst,
                    data: &self.nib,
                    scales: &self.block_f32,
                    offsets: &self.offsets,
                    bias: None,
                }),
                DType::F32,
            ),
        ]
    }
}

#[allow(clippy::too_many_arguments)] // one record's fields
fn record_case(
    api: &str,
    weights: &str,
    (n, k): (usize, usize),
    input: usize,
    held: usize,
    limit: f64,
    copies: usize,
    max_copies: usize,
    layouts: &[String],
) {
    let ratio = held as f64 / input as f64;
    // Four decimals, as the report prints them.
    let round4 = |x: f64| (x * 1e4).round() / 1e4;
    record(json!({
        "kind": "memory",
        "api": api,
        "weights": weights,
        "n": n,
        "k": k,
        "input": input,
        "held": held,
        "ratio": round4(ratio),
        "limit_ratio": round4(limit / input as f64),
        "copies": copies,
        "max_copies": max_copies,
        "layouts": layouts,
    }));
    assert!(
        held as f64 <= limit,
        "{api} {weights} {n}x{k}: holds {held} bytes, {ratio:.3}x the {input} input bytes (goal {:.3}x)",
        limit / input as f64
    );
    assert!(copies <= max_copies, "{api} {weights} {n}x{k}: {copies} copies, at most {max_copies}");
}

#[test]
fn packed_weights_hold_one_copy_the_size_of_the_input() {
    for (n, k) in [(1024, 1024), (1000, 512)] {
        let d = Data::new(n, k);
        for (name, w, act) in d.cases(n, k) {
            let p = PackedWeights::pack(&w, &PackOptions { activation: act, ..PackOptions::default() }).unwrap();
            let held = p.packed_bytes() + p.reference_bytes();
            let copies = p.layouts().len() + usize::from(p.reference_bytes() > 0);
            let layouts: Vec<String> = p
                .layouts()
                .iter()
                .map(|(g, v)| format!("{g}{}", v.map(|v| format!(" + {v}")).unwrap_or_default()))
                .collect();
            // f16 and bf16 weights on f32 kernels (no kernel takes them as
            // they are) are one copy widened to f32: twice the bytes, by
            // default; kept as given with `keep_as_given`.
            let widened = act == DType::F32
                && matches!(w, WeightsRef::F16(_) | WeightsRef::Bf16(_))
                && p.layouts().first().is_some_and(|(g, _)| g.starts_with("kai_matmul_clamp_f32_f32"));
            let goal = limit(w.bytes(), n, k) * if widened { 2.0 } else { 1.0 };
            let api = if widened { "PackedWeights (widened to f32)" } else { "PackedWeights" };
            record_case(api, name, (n, k), w.bytes(), held, goal, copies, 1, &layouts);
            if widened {
                let given = PackedWeights::pack(
                    &w,
                    &PackOptions { activation: act, keep_as_given: true, ..PackOptions::default() },
                )
                .unwrap();
                let held = given.packed_bytes() + given.reference_bytes();
                record_case(
                    "PackedWeights",
                    &format!("{name}, keep_as_given"),
                    (n, k),
                    w.bytes(),
                    held,
                    limit(w.bytes(), n, k),
                    1,
                    1,
                    &layouts,
                );
            }
        }
    }
}

#[test]
fn options_that_keep_more_say_so_in_bytes() {
    let (n, k) = (256, 256);
    let d = Data::new(n, k);
    let w = WeightsRef::F16(FloatWeights { n, k, order: Order::NxK, data: &d.h, bias: None });
    let one = PackedWeights::pack(&w, &PackOptions { keep_as_given: true, ..PackOptions::default() }).unwrap();
    let widened = PackedWeights::pack(&w, &PackOptions::default()).unwrap();
    let with_ref = PackedWeights::pack(&w, &PackOptions { keep_reference: true, ..PackOptions::default() }).unwrap();
    if one.layouts().is_empty() {
        // No f32 kernel here (a target without kernels): the reference copy only.
        assert_eq!(one.reference_bytes(), w.bytes());
        return;
    }
    assert!(one.packed_bytes() <= w.bytes() + 64, "kept as given: {} for {}", one.packed_bytes(), w.bytes());
    assert!(widened.packed_bytes() >= 2 * w.bytes(), "a widened copy is twice the f16 bytes");
    assert_eq!(with_ref.reference_bytes(), w.bytes(), "keep_reference keeps the weights as given");
    assert_eq!(one.reference_bytes(), 0);
}

/// ggml's allocation for a tensor of its KleidiAI buffer: its header (64
/// bytes aligned), each slot 64-byte aligned, at least the tensor's bytes;
/// the tensor's bytes when nothing is packed (F16, or no kernel).
fn ggml_allocation(slots: &[usize], nbytes: usize) -> usize {
    if slots.is_empty() {
        return nbytes;
    }
    let mut cursor = 64usize;
    for s in slots {
        cursor = cursor.div_ceil(64) * 64 + s;
    }
    cursor.max(nbytes)
}

#[test]
fn ggml_weights_hold_no_more_than_ggml_allocates() {
    let (n, k) = (1024, 1024);
    let d = Data::new(n, k);
    let f32_bytes: Vec<u8> = d.f.iter().flat_map(|v| v.to_le_bytes()).collect();
    let f16_bytes: Vec<u8> = d.h.iter().flat_map(|v| v.to_le_bytes()).collect();
    let q8_bytes = kleidiai::ggml::q8_0_as_bytes(&d.q8).to_vec();
    for (typ, bytes) in
        [(GgmlType::Q4_0, &d.q4), (GgmlType::Q8_0, &q8_bytes), (GgmlType::F32, &f32_bytes), (GgmlType::F16, &f16_bytes)]
    {
        let ne = [k as i64, n as i64, 1, 1];
        let src0 = Tensor { typ, ne, nb: Tensor::contiguous_strides(typ, ne).unwrap(), data: bytes };
        let w = GgmlWeights::repack(&src0).unwrap();
        let held = w.packed_bytes() + w.reference_bytes();
        // ggml packs F16 per call and keeps the tensor as it is.
        let slots = if typ == GgmlType::F16 { Vec::new() } else { w.slot_bytes() };
        let ggml = ggml_allocation(&slots, bytes.len());
        let layouts: Vec<String> = w
            .layouts()
            .iter()
            .map(|(g, v)| format!("{g}{}", v.map(|v| format!(" + {v}")).unwrap_or_default()))
            .collect();
        let copies = w.layouts().len() + usize::from(w.reference_bytes() > 0);
        // ggml keeps two slots at most, the second only beside an SME one.
        let max_copies = if w.layouts().first().is_some_and(|(g, _)| g.contains("_sme")) { 2 } else { 1 };
        record_case("ggml", &format!("{typ:?}"), (n, k), bytes.len(), held, ggml as f64, copies, max_copies, &layouts);
    }
}
