//! `kleidiai::weights`: owned buffers of a weight spec, the `WeightsRef`
//! over them, and the pack call with its matmuls checked against the oracles.

use super::*;

/// Owned buffers of one weight spec.
pub(super) struct Built {
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

pub(super) fn bias_len(b: Option<Len>, n: usize, short: &mut bool) -> Option<usize> {
    b.map(|l| {
        *short |= l.short(n);
        l.of(n)
    })
}

pub(super) fn build(p: &PackCall, n: usize, k: usize) -> Built {
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

pub(super) fn weights_ref<'a>(p: &PackCall, b: &'a Built, n: usize, k: usize) -> WeightsRef<'a> {
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
pub(super) fn dense(w: &WeightsRef<'_>, b: &Built) -> Option<(Vec<f32>, Option<Vec<f32>>)> {
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

pub(super) fn pack(p: PackCall) {
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
        // The activations as the call saw them (f16 and bf16 round, and may
        // overflow to an infinity), for the non-finite policy.
        let seen: Vec<f32> = match x_act {
            DType::F32 => xv[..m * k].to_vec(),
            DType::F16 => x16[..m * k].iter().map(|v| v.to_f32()).collect(),
            DType::Bf16 => xb16[..m * k].iter().map(|v| v.to_f32()).collect(),
        };
        let nan = policy_nan(m, n, k, &seen, packed.non_finite_channels());
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
                let (got, want) = outside_policy("packed matmul", &y32[..m * n], &want, &nan);
                same_bits("packed matmul", &got, &want, f32::to_bits);
            }
        }
        if let Some((d, bias)) = &oracle {
            let want = naive(m, n, k, &xv, d, bias.as_deref(), clamp);
            match act {
                DType::F32 => {
                    let (got, want) = outside_policy("packed matmul", &y32[..m * n], &want, &nan);
                    check_close("packed matmul", &got, &want)
                }
                DType::F16 => {
                    let x: Vec<f32> = x16.iter().map(|v| v.to_f32()).collect();
                    let want = naive(m, n, k, &x, d, bias.as_deref(), clamp);
                    let y: Vec<f32> = y16[..m * n].iter().map(|v| v.to_f32()).collect();
                    let (got, want) = outside_policy("packed matmul (f16)", &y, &want, &nan);
                    check_close("packed matmul (f16)", &got, &want)
                }
                DType::Bf16 => {
                    let x: Vec<f32> = xb16.iter().map(|v| v.to_f32()).collect();
                    let want = naive(m, n, k, &x, d, bias.as_deref(), clamp);
                    let y: Vec<f32> = yb16[..m * n].iter().map(|v| v.to_f32()).collect();
                    let (got, want) = outside_policy("packed matmul (bf16)", &y, &want, &nan);
                    check_close("packed matmul (bf16)", &got, &want)
                }
            }
        }
    }
}
