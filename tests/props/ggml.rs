//! The ggml path over random tensors: `GgmlWeights::repack` of valid and
//! broken `src0` descriptions (zero, negative and overflowing sizes, rows
//! not whole blocks, non-contiguous or overlapping strides, short data,
//! unsupported batching), then `mul_mat` with random (valid or broken)
//! `src1`/`dst`, `get_rows` with indices in and out of range, `work_size`
//! for small and overflowing `m`, and the serialised form. Invalid calls
//! are errors; valid `mul_mat` results match the family reference (bit for
//! bit where the reference serves, within the kernels' tolerance else).

use crate::ensure;
use crate::harness::{self, Cases, check};
use crate::strat::{self, Rng, Special};
use crate::weights::{Buf, compare, magnitude, reference, reference_only};
use half::f16;
use kleidiai::formats::{BlockInt4, FloatWeights, Order, Q4_0};
use kleidiai::ggml::{GgmlType, GgmlWeights, MulMatScratch, Tensor, TensorMut, q8_0_blocks_from_bytes};
use kleidiai::weights::WeightsRef;
use kleidiai::{AlignedBuf, Parallelism};
use proptest::prelude::*;
use std::sync::Arc;

const TYPES: [GgmlType; 4] = [GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q8_0];

/// One thing wrong with a tensor description (or nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flaw {
    None,
    ZeroDim(usize),
    NegDim(usize),
    /// `ne[0]` not a whole number of blocks (quantised types).
    PartialBlock,
    /// `ne[3] > 1`.
    FourD,
    /// `nb[0]` other than the element (block) size.
    Nb0,
    /// `nb[1]` smaller than a row.
    Overlap,
    /// Data shorter than the description needs.
    Short(u8),
    /// `ne[1]` so large the extent overflows or exceeds any buffer.
    Huge(i64),
}

fn flaw() -> impl Strategy<Value = Flaw> {
    prop_oneof![
        24 => Just(Flaw::None),
        1 => (0usize..4).prop_map(Flaw::ZeroDim),
        1 => (0usize..4).prop_map(Flaw::NegDim),
        1 => Just(Flaw::PartialBlock),
        1 => Just(Flaw::FourD),
        1 => Just(Flaw::Nb0),
        1 => Just(Flaw::Overlap),
        1 => (1u8..=20).prop_map(Flaw::Short),
        1 => prop_oneof![Just(i64::MAX), Just(1i64 << 40), Just(1i64 << 31)].prop_map(Flaw::Huge),
    ]
}

impl Flaw {
    /// The flaw as it applies to `typ` (types without blocks have no
    /// partial block).
    fn on(self, typ: GgmlType) -> Flaw {
        if self == Flaw::PartialBlock && typ.block_len() == 1 { Flaw::None } else { self }
    }
}

/// A tensor description and its bytes (`flaw` applied).
struct Built {
    ne: [i64; 4],
    nb: [usize; 4],
    data: Vec<u8>,
}

/// Describes `typ` rows of `k` values, `rows` rows, `batches` batches, rows
/// `pad` bytes apart beyond their length, with `flaw` applied; the data
/// comes from `fill` (the bytes of one row).
fn build(
    typ: GgmlType,
    k: usize,
    rows: usize,
    batches: usize,
    pad: usize,
    flaw: Flaw,
    fill: &mut dyn FnMut(usize) -> Vec<u8>,
) -> Built {
    let k = if flaw == Flaw::PartialBlock && typ.block_len() > 1 { k + 1 + k % 31 } else { k };
    let row = k.div_ceil(typ.block_len()) * typ.block_bytes();
    let mut ne = [k as i64, rows as i64, batches as i64, 1];
    let mut nb = [typ.block_bytes(), row + pad, (row + pad) * rows, (row + pad) * rows * batches];
    let need = (batches - 1) * nb[2] + (rows - 1) * nb[1] + row;
    let mut data = vec![0u8; need];
    for b in 0..batches {
        for r in 0..rows {
            let at = b * nb[2] + r * nb[1];
            data[at..at + row].copy_from_slice(&fill(row));
        }
    }
    match flaw {
        Flaw::None | Flaw::PartialBlock => {}
        Flaw::ZeroDim(i) => ne[i] = 0,
        Flaw::NegDim(i) => ne[i] = -1,
        Flaw::FourD => ne[3] = 2,
        Flaw::Nb0 => nb[0] += 1,
        Flaw::Overlap => {
            ne[1] = ne[1].max(2);
            nb[1] = row - 1;
        }
        Flaw::Short(d) => data.truncate(need.saturating_sub(d as usize)),
        Flaw::Huge(v) => {
            ne[1] = v;
            nb[2] = nb[2].max(1 << 20);
        }
    }
    Built { ne, nb, data }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// One row of `typ` weights from `rng` (`special` mixed into the values or
/// block scales).
fn weight_row(typ: GgmlType, row: usize, rng: &mut Rng, special: Special) -> Vec<u8> {
    match typ {
        GgmlType::F32 => f32_bytes(&rng.data(row / 4, special)),
        GgmlType::F16 => rng.data(row / 2, special).iter().flat_map(|x| f16::from_f32(*x).to_le_bytes()).collect(),
        GgmlType::Q4_0 | GgmlType::Q8_0 => {
            let bb = typ.block_bytes();
            let mut out = rng.bytes(row);
            let mut d = rng.scales(row / bb);
            rng.inject(&mut d, special);
            for (b, d) in d.iter().enumerate() {
                out[b * bb..b * bb + 2].copy_from_slice(&f16::from_f32(*d).to_le_bytes());
            }
            out
        }
    }
}

#[derive(Clone, Debug)]
struct Spec {
    typ: GgmlType,
    n: usize,
    k: usize,
    ne02: usize,
    pad: usize,
    flaw: Flaw,
    special: Special,
    /// `src1` batches per weight batch (F16 broadcast), `m`, its flaw.
    r: usize,
    m: usize,
    src1_flaw: Flaw,
    dst_flaw: Flaw,
    threads: usize,
    seed: u64,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        proptest::sample::select(TYPES.to_vec()),
        (1usize..=20, 1usize..=3, 1usize..=70, 1usize..=2, prop_oneof![3 => Just(0usize), 1 => 1usize..=40]),
        (flaw(), strat::special()),
        (1usize..=2, 1usize..=7, flaw(), flaw(), 0usize..=3),
        any::<u64>(),
    )
        .prop_map(
            |(typ, (n, blocks, k, ne02, pad), (flaw, special), (r, m, src1_flaw, dst_flaw, threads), seed)| {
                let quant = typ.block_len() > 1;
                Spec {
                    typ,
                    n,
                    k: if quant { 32 * blocks } else { k },
                    ne02: if typ == GgmlType::F16 { ne02 } else { 1 },
                    // Padding keeps rows on the element size.
                    pad: pad / typ.block_bytes() * typ.block_bytes(),
                    flaw,
                    special,
                    r,
                    m,
                    src1_flaw,
                    dst_flaw,
                    threads,
                    seed,
                }
            },
        )
}

/// Batch `b`'s rows of `src0` as `WeightsRef` input bytes.
fn gather(src0: &Built, typ: GgmlType, n: usize, k: usize, b: usize) -> Vec<u8> {
    let row = typ.row_bytes(k).unwrap();
    (0..n).flat_map(|r| src0.data[b * src0.nb[2] + r * src0.nb[1]..][..row].to_vec()).collect()
}

/// `y = x · wᵀ` by the family reference for batch bytes `w` (dense rows).
fn reference_mm(typ: GgmlType, n: usize, k: usize, w: &[u8], m: usize, x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let x = Buf::F32(x.to_vec());
    let mut y = Buf::F32(vec![0.0; m * n]);
    let f32s: Vec<f32> = w.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let f16s: Vec<f16> = w.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect();
    let q8 = if typ == GgmlType::Q8_0 { q8_0_blocks_from_bytes(w).unwrap() } else { Vec::new() };
    let wr = match typ {
        GgmlType::F32 => WeightsRef::F32(FloatWeights { n, k, order: Order::NxK, data: &f32s, bias: None }),
        GgmlType::F16 => WeightsRef::F16(FloatWeights { n, k, order: Order::NxK, data: &f16s, bias: None }),
        GgmlType::Q4_0 => WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: w, bias: None })),
        GgmlType::Q8_0 => WeightsRef::GgmlQ8_0 { n, k, blocks: &q8 },
    };
    reference(&wr, m, &x, &mut y, kleidiai::Clamp::NONE).expect("the reference takes valid weights");
    (y.to_f32(), crate::weights::dense(&wr))
}

/// Relative tolerance (of `Σ|x·w| + 1`) of ggml's kernels against the
/// reference: F32 kernels round only in summation; F16 weights go through
/// bf16 (8-bit mantissa); Q4_0 and Q8_0 kernels quantise the activations
/// per block or per row (the reference per row).
fn tol(typ: GgmlType) -> f32 {
    match typ {
        GgmlType::F32 => 1e-5,
        GgmlType::F16 => 1.5e-2,
        GgmlType::Q4_0 => 1.5e-2,
        GgmlType::Q8_0 => 2e-2,
    }
}

struct Shared(AlignedBuf);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

fn shared(bytes: &[u8]) -> Arc<dyn AsRef<[u8]> + Send + Sync> {
    let mut a = AlignedBuf::zeroed(bytes.len());
    a.as_mut_slice().copy_from_slice(bytes);
    Arc::new(Shared(a))
}

#[test]
fn repack_mul_mat_get_rows() {
    check("ggml::repack_mul_mat_get_rows", Cases::new(60_000, 800), spec(), |s| {
        let mut rng = Rng::new(s.seed);
        let (typ, n, k) = (s.typ, s.n, s.k);
        let special = s.special;
        let src0 = build(typ, k, n, s.ne02, s.pad, s.flaw, &mut |len| weight_row(typ, len, &mut rng, special));
        let t0 = Tensor { typ, ne: src0.ne, nb: src0.nb, data: &src0.data };
        let valid = s.flaw.on(typ) == Flaw::None;
        harness::count(valid);
        let w = match GgmlWeights::repack(&t0) {
            Err(e) => {
                ensure!(!valid, "{typ:?} {n}x{k}x{}: valid src0 refused: {e}", s.ne02);
                return Ok(());
            }
            Ok(w) => {
                ensure!(valid, "{typ:?}: src0 with {:?} accepted (ne {:?} nb {:?})", s.flaw, src0.ne, src0.nb);
                w
            }
        };
        ensure!(w.shape() == (k, n) && w.typ() == typ, "shape {:?}", w.shape());

        // work_size: small m is fine and bounded; overflowing m is an error.
        let ws = w.work_size(s.m);
        harness::valid();
        ensure!(ws.is_ok(), "work_size({}) refused", s.m);
        harness::invalid();
        ensure!(w.work_size(usize::MAX / 3).is_err(), "work_size(usize::MAX / 3) accepted");

        // mul_mat with src1 [k, m, ne12] and dst [n, m, ne12].
        let (m, ne12) = (s.m, s.ne02 * s.r);
        let xs: Vec<Vec<f32>> = (0..ne12).map(|_| rng.data(m * k, s.special)).collect();
        let mut xi = xs.iter().flat_map(|x| x.chunks(k)).map(f32_bytes);
        let src1 = build(GgmlType::F32, k, m, ne12, 0, s.src1_flaw, &mut |len| {
            xi.next().map_or_else(|| vec![0; len], |v| v[..len.min(v.len())].to_vec())
        });
        let dst_pad = 4 * (s.seed as usize % 3);
        let mut dst = build(GgmlType::F32, n, m, ne12, dst_pad, s.dst_flaw, &mut |len| vec![0xFF; len]);
        dst.data.fill(0xFF);
        let t1 = Tensor { typ: GgmlType::F32, ne: src1.ne, nb: src1.nb, data: &src1.data };
        let mut td = TensorMut { typ: GgmlType::F32, ne: dst.ne, nb: dst.nb, data: &mut dst.data };
        let par = if s.threads == 0 { Parallelism::Sequential } else { Parallelism::Rayon(s.threads) };
        let mut scratch = MulMatScratch::default();
        let got = w.mul_mat(&t1, &mut td, par, &mut scratch);
        let call_valid = s.src1_flaw.on(GgmlType::F32) == Flaw::None && s.dst_flaw.on(GgmlType::F32) == Flaw::None;
        harness::count(call_valid);
        if !call_valid {
            ensure!(got.is_err(), "{typ:?}: mul_mat with src1 {:?} / dst {:?} accepted", s.src1_flaw, s.dst_flaw);
        } else {
            ensure!(got.is_ok(), "{typ:?} m={m} n={n} k={k}: valid mul_mat refused: {}", got.unwrap_err());
            let exact = reference_only() || w.kernel_for(m).is_none();
            for (b, x) in xs.iter().enumerate() {
                let wb = gather(&src0, typ, n, k, b / s.r);
                let (want, dense) = reference_mm(typ, n, k, &wb, m, x);
                let mut out = Vec::with_capacity(m * n);
                for i in 0..m {
                    let at = b * dst.nb[2] + i * dst.nb[1];
                    out.extend(
                        dst.data[at..at + 4 * n].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())),
                    );
                }
                let mag = magnitude(&dense, None, x, m, n, k, false);
                let what = format!("{typ:?} m={m} n={n} k={k} batch {b} via {:?}", w.kernel_for(m));
                compare(&what, &out, &want, &mag, tol(typ), exact)?;
                // Row padding of dst is left alone.
                for i in 0..m {
                    let at = b * dst.nb[2] + i * dst.nb[1] + 4 * n;
                    let end = (at + dst_pad).min(dst.data.len());
                    ensure!(dst.data[at..end].iter().all(|v| *v == 0xFF), "{what}: wrote into row padding");
                }
            }
        }

        // get_rows: indices in range, negative, past n; dst exact or short.
        let want_rows: Vec<i64> = (0..1 + rng.below(3))
            .map(|_| match rng.below(8) {
                0 => -1 - rng.below(5) as i64,
                1 => (n + rng.below(3)) as i64,
                _ => rng.below(n) as i64,
            })
            .collect();
        let short = rng.below(6) == 0;
        let len = want_rows.len() * k - usize::from(short);
        let mut out = vec![f32::NAN; len];
        let got = w.get_rows(&want_rows, &mut out);
        let rows_valid = !short && want_rows.iter().all(|r| (0..n as i64).contains(r));
        harness::count(rows_valid);
        if !rows_valid {
            ensure!(got.is_err(), "get_rows({want_rows:?}) into {len} accepted");
        } else {
            ensure!(got.is_ok(), "get_rows({want_rows:?}): {}", got.unwrap_err());
            let (_, dense) = reference_mm(typ, n, k, &gather(&src0, typ, n, k, 0), 1, &vec![0.0; k]);
            for (i, &r) in want_rows.iter().enumerate() {
                let (g, d) = (&out[i * k..(i + 1) * k], &dense[r as usize * k..(r as usize + 1) * k]);
                for (p, (g, d)) in g.iter().zip(d).enumerate() {
                    let close = if w.layouts().is_empty() {
                        g.to_bits() == d.to_bits() || (g.is_nan() && d.is_nan())
                    } else {
                        // Packed layouts may hold F16 weights as bf16.
                        !d.is_finite() || (g - d).abs() <= 4e-3 * d.abs() + 1e-7
                    };
                    ensure!(close, "{typ:?} get_rows row {r}[{p}] = {g}, weights hold {d}");
                }
            }
        }

        // Serialised form: a round trip computes the same bits; a damaged
        // copy is refused or (damage outside every checked field) equal.
        if let Ok(bytes) = w.to_bytes() {
            harness::valid();
            let view = GgmlWeights::from_shared(shared(&bytes), true);
            ensure!(view.is_ok(), "reload: {}", view.unwrap_err());
            let view = view.unwrap();
            ensure!(view.layouts() == w.layouts() && view.shape() == w.shape(), "reload changed the layouts");
            let at = rng.below(bytes.len());
            let mut bad = bytes.clone();
            match rng.below(3) {
                0 => bad.truncate(at),
                1 => bad[at] ^= 1 << rng.below(8),
                _ => bad.extend(std::iter::repeat_n(0u8, 1 + at % 64)),
            }
            harness::invalid();
            let loaded = GgmlWeights::from_shared(shared(&bad), true);
            if bad.len() > bytes.len() {
                // Appended bytes: refused, counted (issue 15).
                let extra = (bad.len() - bytes.len()) as u64;
                let want = kleidiai::FileError::TrailingBytes { extra };
                ensure!(
                    matches!(&loaded, Err(kleidiai::Error::File { reason, .. }) if *reason == want),
                    "{extra} appended bytes: {loaded:?}"
                );
            }
            if let Ok(v) = loaded {
                ensure!(v.shape() == w.shape() && v.layouts() == w.layouts(), "a damaged file loaded as other weights");
            }
        }
        Ok(())
    });
}
