use super::*;

#[test]
fn scans_find_every_non_finite_value_and_nothing_else() {
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -f32::NAN];
    let finite = [0.0, -0.0, 1.0, f32::MAX, f32::MIN, f32::MIN_POSITIVE, 1e-45, -1e-45];
    // Lengths around the NEON loop's 64 values and the SVE loop's 8 vectors
    // (64, 128, 256 values at 256, 512, 1024 bits), every position in the
    // tails.
    for len in [1, 3, 4, 7, 8, 17, 64, 65, 127, 128, 200, 255, 256, 257, 383, 513, 1030] {
        let clean: Vec<f32> = (0..len).map(|i| finite[i % finite.len()]).collect();
        assert!(f32::all_finite(&clean));
        let h: Vec<f16> = clean.iter().map(|v| f16::from_f32(v.clamp(-65504.0, 65504.0))).collect();
        let b: Vec<bf16> = clean.iter().map(|v| bf16::from_bits((v.to_bits() >> 16) as u16)).collect();
        assert!(f16::all_finite(&h) && bf16::all_finite(&b));
        assert!(f16::all_finite(&[f16::MAX, f16::MIN]) && bf16::all_finite(&[bf16::MAX, bf16::MIN]));
        // Products that overflow (the fast filter's false alarm) are finite values.
        assert!(f32::all_finite(&vec![f32::MAX; len * 64]), "f32::MAX x {}", len * 64);
        // Values whose products never overflow: the fast filters decide
        // alone (with f32::MAX among them the exact test always does), so
        // every position of every vector of a round is checked.
        let small: Vec<f32> = (0..len).map(|i| [0.5, -0.25, 1.0, 0.0, -1.5][i % 5]).collect();
        assert!(f32::all_finite(&small));
        for at in 0..len {
            for s in specials {
                let mut v = small.clone();
                v[at] = s;
                assert!(!f32::all_finite(&v), "{s} at {at} of {len} small values");
            }
        }
        for at in (0..len).filter(|at| *at < 3 || *at == len / 2 || *at + 300 > len) {
            for s in specials {
                let mut v = clean.clone();
                v[at] = s;
                assert!(!f32::all_finite(&v), "{s} at {at} of {len}");
                let mut vh = h.clone();
                vh[at] = f16::from_f32(s);
                assert!(!f16::all_finite(&vh), "f16 {s} at {at} of {len}");
                let mut vb = b.clone();
                vb[at] = bf16::from_f32(s);
                assert!(!bf16::all_finite(&vb), "bf16 {s} at {at} of {len}");
            }
        }
    }
}

#[test]
fn rows_and_columns_are_filled_exactly() {
    let (m, n, k) = (3, 4, 5);
    let mut x = vec![1.0f32; m * k];
    x[k + 2] = f32::INFINITY;
    let mut y = vec![2.0f32; m * n];
    let rows = bad_rows(m, k, &Activation::F32(&x)).unwrap();
    assert_eq!(rows, [1]);
    assert!(bad_rows(m, k, &Activation::F32(&[1.0; 15])).is_none());
    assert!(bad_rows(m, k, &Activation::F32(&x[..14])).is_none(), "too short: the matmul's error");
    fill(m, n, &mut ActivationMut::F32(&mut y), &rows, &[3]);
    for i in 0..m {
        for j in 0..n {
            assert_eq!(y[i * n + j].is_nan(), i == 1 || j == 3, "({i}, {j})");
        }
    }
}

use super::super::{DType, NonFinite, PackOptions, PackedWeights, Scratch, operation_exists};
use crate::formats::ggml_blocks::BlockQ8_0;
use crate::formats::{BlockInt4, BlockScales, FloatWeights, Int4AsymBlock, Int4Blocks, Int4Encoding};
use crate::formats::{Int4PerChannel, Int8PerChannel, NibbleOrder, Q4_0};
use crate::{Clamp, Parallelism};

const N: usize = 20;
const K: usize = 64;
/// The output channel the weight injections hit (in the second tile of
/// kernels with 16 columns and in the first of the others).
const J: usize = 17;
const SPECIALS: [f32; 3] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
/// Every weight constructor of the activation table.
const NAMES: [&str; 9] =
    ["f32", "f16", "bf16", "int8_per_channel", "q8_0", "int4_per_channel", "int4_blocks", "q4_0", "int4_asym_blocks"];

/// Where in the weights a value goes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Site {
    /// The dense value, or the scale of quantised weights.
    Value,
    /// The block offset (asymmetric int4).
    Offset,
    Bias,
}

/// Unpacked inputs of every format, finite until injected.
#[derive(Clone)]
struct Data {
    f: Vec<f32>,
    h: Vec<f16>,
    b: Vec<bf16>,
    i8s: Vec<i8>,
    nib: Vec<u8>,
    s: Vec<f32>,
    hs: Vec<f16>,
    off: Vec<f32>,
    q4: Vec<u8>,
    q8: Vec<BlockQ8_0>,
    bias: Vec<f32>,
    bias_h: Vec<f16>,
    bias_b: Vec<bf16>,
}

impl Data {
    fn new() -> Data {
        let f: Vec<f32> = (0..N * K).map(|i| ((i * 5 % 9) as f32 - 4.0) * 0.125).collect();
        let q4 = crate::formats::ggml_blocks::quantize_q4_0(&f, K).unwrap();
        let bias: Vec<f32> = (0..N).map(|j| j as f32 * 0.25 - 2.0).collect();
        Data {
            h: f.iter().map(|v| f16::from_f32(*v)).collect(),
            b: f.iter().map(|v| bf16::from_f32(*v)).collect(),
            i8s: (0..N * K).map(|i| (i % 7) as i8 - 3).collect(),
            nib: (0..N * K / 2).map(|i| (i * 37 % 251) as u8).collect(),
            s: (0..N * K / 32).map(|i| 0.125 + (i % 3) as f32 * 0.0625).collect(),
            hs: (0..N * K / 32).map(|i| f16::from_f32(0.125 + (i % 3) as f32 * 0.0625)).collect(),
            off: (0..N * K / 32).map(|i| (i % 5) as f32 * 0.25 - 0.5).collect(),
            q4: crate::formats::ggml_blocks::q4_0_as_bytes(&q4).to_vec(),
            q8: crate::formats::ggml_blocks::quantize_q8_0(&f, K).unwrap(),
            bias_h: bias.iter().map(|v| f16::from_f32(*v)).collect(),
            bias_b: bias.iter().map(|v| bf16::from_f32(*v)).collect(),
            bias,
            f,
        }
    }

    /// Puts `v` at `site` of output channel `J` of weights `name`;
    /// false when the format has no such site.
    fn inject(&mut self, name: &str, site: Site, v: f32) -> bool {
        let block = J * (K / 32) + 1; // the second block of channel J
        match (site, name) {
            (Site::Value, "f32") => self.f[J * K + 7] = v,
            (Site::Value, "f16") => self.h[J * K + 7] = f16::from_f32(v),
            (Site::Value, "bf16") => self.b[J * K + 7] = bf16::from_f32(v),
            (Site::Value, "int8_per_channel" | "int4_per_channel") => self.s[J] = v,
            (Site::Value, "int4_blocks") => self.hs[block] = f16::from_f32(v),
            (Site::Value, "q4_0") => {
                self.q4[block * 18..block * 18 + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes())
            }
            (Site::Value, "q8_0") => self.q8[block].d = f16::from_f32(v),
            (Site::Value, "int4_asym_blocks") => self.s[block] = v,
            (Site::Offset, "int4_asym_blocks") => self.off[block] = v,
            (Site::Bias, "q8_0") | (Site::Offset, _) => return false,
            (Site::Bias, _) => {
                self.bias[J] = v;
                self.bias_h[J] = f16::from_f32(v);
                self.bias_b[J] = bf16::from_f32(v);
            }
            (_, other) => panic!("unknown weights {other}"),
        }
        true
    }

    fn weights(&self, name: &str, bias: bool) -> WeightsRef<'_> {
        let (n, k, order) = (N, K, Order::NxK);
        let b32 = bias.then_some(&self.bias[..]);
        let (encoding, nibbles) = (Int4Encoding::Signed, NibbleOrder::LowFirst);
        match name {
            "f32" => WeightsRef::F32(FloatWeights { n, k, order, data: &self.f, bias: b32 }),
            "f16" => WeightsRef::F16(FloatWeights { n, k, order, data: &self.h, bias: bias.then_some(&self.bias_h) }),
            "bf16" => WeightsRef::Bf16(FloatWeights { n, k, order, data: &self.b, bias: bias.then_some(&self.bias_b) }),
            "int8_per_channel" => {
                WeightsRef::Int8PerChannel(Int8PerChannel { n, k, order, data: &self.i8s, scales: &self.s, bias: b32 })
            }
            "q8_0" => WeightsRef::GgmlQ8_0 { n, k, blocks: &self.q8 },
            "int4_per_channel" => WeightsRef::Int4PerChannel(Int4PerChannel {
                n,
                k,
                order,
                encoding,
                data: &self.nib,
                scales: &self.s,
                bias: b32,
            }),
            "int4_blocks" => WeightsRef::Int4Block(BlockInt4::Blocks(Int4Blocks {
                n,
                k,
                bl: 32,
                order,
                encoding,
                data: &self.nib,
                scales: BlockScales::F16(&self.hs),
                bias: b32,
            })),
            "q4_0" => WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: &self.q4, bias: b32 })),
            "int4_asym_blocks" => WeightsRef::Int4AsymBlock(Int4AsymBlock {
                n,
                k,
                bl: 32,
                encoding,
                nibbles,
                data: &self.nib,
                scales: &self.s,
                offsets: &self.off,
                bias: b32,
            }),
            other => panic!("unknown weights {other}"),
        }
    }
}

/// `m` rows of `w · x` with activations and outputs of `act` (given and
/// returned as f32, exactly), under the default policy.
fn run(w: &PackedWeights, act: DType, m: usize, x: &[f32]) -> Vec<f32> {
    try_run(w, act, m, x).unwrap()
}

/// `run` under `policy`.
fn run_with(w: &mut PackedWeights, policy: NonFinite, act: DType, m: usize, x: &[f32]) -> crate::Result<Vec<f32>> {
    w.set_non_finite(policy);
    let r = try_run(w, act, m, x);
    w.set_non_finite(NonFinite::Propagate);
    r
}

fn try_run(w: &PackedWeights, act: DType, m: usize, x: &[f32]) -> crate::Result<Vec<f32>> {
    let s = &mut Scratch::default();
    let (c, p) = (Clamp::NONE, Parallelism::Sequential);
    let go = |x: Activation<'_>, y: ActivationMut<'_>, s: &mut Scratch| w.matmul(m, x, y, c, p, s);
    match act {
        DType::F32 => {
            let mut y = vec![0f32; m * N];
            go(Activation::F32(x), ActivationMut::F32(&mut y), s)?;
            Ok(y)
        }
        DType::F16 => {
            let x: Vec<f16> = x.iter().map(|v| f16::from_f32(*v)).collect();
            let mut y = vec![f16::ZERO; m * N];
            go(Activation::F16(&x), ActivationMut::F16(&mut y), s)?;
            Ok(y.iter().map(|v| v.to_f32()).collect())
        }
        DType::Bf16 => {
            let x: Vec<bf16> = x.iter().map(|v| bf16::from_f32(*v)).collect();
            let mut y = vec![bf16::ZERO; m * N];
            go(Activation::Bf16(&x), ActivationMut::Bf16(&mut y), s)?;
            Ok(y.iter().map(|v| v.to_f32()).collect())
        }
    }
}

/// Checks `got` against the clean run `want`: NaN exactly where
/// `nan(row, column)`, the clean bits everywhere else.
fn check(got: &[f32], want: &[f32], nan: impl Fn(usize, usize) -> bool) -> std::result::Result<(), String> {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (row, col) = (i / N, i % N);
        let ok = if nan(row, col) { g.is_nan() } else { g.to_bits() == w.to_bits() };
        if !ok {
            return Err(format!(
                "y[{row}][{col}] = {g}, want {}",
                if nan(row, col) { "NaN".into() } else { w.to_string() }
            ));
        }
    }
    Ok(())
}

/// What the kernel alone made of the special values, as the table
/// shows it.
fn shown(v: f32) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.abs() >= 1e30 {
        format!("{v:.1e}")
    } else {
        format!("{v:.3}")
    }
}

/// The policy on every weight kind x activation type the high-level API
/// takes, with the kernels this CPU selects (GEMV for one row, GEMM for
/// three; the reference where none runs): NaN, +inf and -inf in an
/// activation make that row NaN and leave the others bit-identical; in a
/// weight value or scale, a block offset or a bias they make that output
/// channel NaN in every row and leave the others bit-identical, also
/// after a save and a load. Records (and prints) what each kernel alone
/// gives, the table `xtask test` shows per CPU model.
#[test]
fn non_finite_inputs_give_nan_on_every_kernel() {
    let mut failures = Vec::new();
    let mut cases = 0;
    for name in NAMES {
        let clean = Data::new();
        for act in [DType::F32, DType::F16, DType::Bf16] {
            if !operation_exists(clean.weights(name, false).kind(), act) {
                continue;
            }
            let opts = PackOptions { activation: act, ..PackOptions::default() };
            for bias in [false, true] {
                if bias && name == "q8_0" {
                    continue; // ggml Q8_0 carries no bias
                }
                let mut packed = PackedWeights::pack(&clean.weights(name, bias), &opts).unwrap();
                assert!(packed.non_finite_channels.is_empty(), "{name}: finite weights recorded as not");
                let sites: &[Site] = if bias { &[Site::Bias] } else { &[Site::Value, Site::Offset] };
                for m in [1usize, 3] {
                    let kernel = packed.kernel_for(m).unwrap_or("reference");
                    let x: Vec<f32> = (0..m * K).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.0625).collect();
                    let want = run(&packed, act, m, &x);
                    assert!(want.iter().all(|v| v.is_finite()), "{name} {act:?} m={m}: clean outputs");
                    let record = |input: &str, raw: Vec<String>| {
                        crate::testing::record(serde_json::json!({
                            "kind": "nonfinite", "weights": name, "act": act.name(), "bias": bias, "m": m,
                            "kernel": kernel, "input": input, "raw": raw, "result": "NaN",
                        }));
                    };
                    let mut raws = Vec::new();
                    if !bias {
                        // The last row's activations.
                        for v in SPECIALS {
                            let mut xs = x.clone();
                            xs[(m - 1) * K + 5] = v;
                            let got = run(&packed, act, m, &xs);
                            cases += 1;
                            if let Err(e) = check(&got, &want, |row, _| row == m - 1) {
                                failures.push(format!("{name} {act:?} m={m} {kernel}: x {v}: {e}"));
                            }
                            raws.push(
                                run_with(&mut packed, NonFinite::Kernel, act, m, &xs)
                                    .map_or("Err".into(), |y| shown(y[(m - 1) * N])),
                            );
                            // NonFinite::Error names the row and the value.
                            let e = run_with(&mut packed, NonFinite::Error, act, m, &xs).unwrap_err();
                            let want_e = crate::Error::NonFinite { what: "activation row", index: m - 1, at: Some(5) };
                            assert_eq!(e, want_e, "{name} {act:?} m={m} x {v}");
                        }
                        record("x", std::mem::take(&mut raws));
                    }
                    for &site in sites {
                        for v in SPECIALS {
                            let mut d = clean.clone();
                            if !d.inject(name, site, v) {
                                continue;
                            }
                            let w = d.weights(name, bias);
                            let mut p = PackedWeights::pack(&w, &opts).unwrap();
                            assert_eq!(p.non_finite_channels, [J], "{name} {site:?} {v}: recorded channels");
                            let got = run(&p, act, m, &x);
                            cases += 1;
                            if let Err(e) = check(&got, &want, |_, col| col == J) {
                                failures.push(format!("{name} {act:?} m={m} {kernel}: {site:?} {v}: {e}"));
                            }
                            raws.push(
                                run_with(&mut p, NonFinite::Kernel, act, m, &x).map_or("Err".into(), |y| shown(y[J])),
                            );
                            // NonFinite::Error names the channel.
                            let e = run_with(&mut p, NonFinite::Error, act, m, &x).unwrap_err();
                            let want_e = crate::Error::NonFinite { what: "output channel", index: J, at: None };
                            assert_eq!(e, want_e, "{name} {site:?} {v}");
                            // The channels survive a save and a load.
                            if let Ok(bytes) = p.to_bytes() {
                                let back = PackedWeights::from_bytes(&bytes).unwrap();
                                assert_eq!(back.non_finite_channels, [J], "{name} {site:?}: loaded channels");
                                let again = run(&back, act, m, &x);
                                cases += 1;
                                if let Err(e) = check(&again, &want, |_, col| col == J) {
                                    failures.push(format!("{name} {act:?} m={m} {kernel}: loaded, {site:?} {v}: {e}"));
                                }
                            }
                        }
                        if !raws.is_empty() {
                            let input = match site {
                                Site::Value if name.starts_with('f') || name.starts_with('b') => "weight",
                                Site::Value => "scale",
                                Site::Offset => "offset",
                                Site::Bias => "bias",
                            };
                            record(input, std::mem::take(&mut raws));
                        }
                    }
                }
            }
        }
    }
    println!("non-finite policy: {cases} cases, {} failed", failures.len());
    assert!(failures.is_empty(), "{} of {cases} cases:\n{}", failures.len(), failures.join("\n"));
    assert!(cases >= 13 * 2 * 3 * 3, "every kind x activation x row count x special ran ({cases})");
}

/// The SVE filter runs exactly where its docs say (SVE usable, vectors of at
/// least 256 bits), so the scan test above covers it on the SVE models.
#[cfg(target_arch = "aarch64")]
#[test]
fn the_sve_filter_runs_where_promised() {
    let f = crate::cpu::Features::current();
    let wide = f.has(crate::cpu::CpuFeature::Sve) && crate::cpu::rdvl_bytes() >= 32;
    let v = vec![1.5f32; 300];
    let got =
        crate::arch::fmla_filter_sve(&v, f.has(crate::cpu::CpuFeature::Sve), f.has(crate::cpu::CpuFeature::Sve2p1));
    eprintln!("non-finite scan filter: {}", if wide { "SVE" } else { "NEON" });
    assert_eq!(got.is_some(), wide);
    if let Some(acc) = got {
        // Whole rounds of 8 vectors take values in pairs, the tail one by one.
        let step = 8 * crate::cpu::rdvl_bytes() / 4;
        let whole = v.len() / step * step;
        assert_eq!(acc, (whole / 2 + (v.len() - whole)) as f32 * 2.25, "1.5 * 1.5 per pair, then per tail value");
    }
}
