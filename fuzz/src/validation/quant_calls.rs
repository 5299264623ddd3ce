//! The quantisers (`kleidiai::quant`).

use super::*;

pub(super) fn quant_call(q: QuantCall) {
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
