//! The families' portable `reference` functions, called directly.

use super::*;

pub(super) fn family(f: FamilyCall) {
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
