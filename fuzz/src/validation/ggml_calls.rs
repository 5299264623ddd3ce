//! `kleidiai::ggml`: the ggml-compatible entry points under arbitrary
//! tensors, types and strides.

use super::*;

pub(super) fn ggml_call(g: GgmlCall) {
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
            // A `Vec` may sit at any address: `from_shared` refuses payloads
            // that are not 64-byte aligned where kernels read them (aarch64).
            let again = GgmlWeights::from_bytes(&bytes).expect("own container loads");
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
