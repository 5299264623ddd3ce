//! The `qai8dx` scheme: asymmetric int8 per row, computed on the fly.

/// One LHS row quantised the `qai8dx` way (asymmetric int8, per row, dynamic):
/// `x ≈ (q - zero_point) * recip_scale`.
#[derive(Clone, Debug, PartialEq)]
pub struct Qai8dxRow {
    /// Quantised values.
    pub q: Vec<i8>,
    /// Zero point (as upstream: `rintf` of the nudged zero point).
    pub zero_point: i32,
    /// `1 / scale` in f32, as the packer stores it.
    pub recip_scale: f32,
}

/// Quantises `row` exactly like `kai_lhs_quant_pack_qai8dxp_f32`: range
/// widened to include 0, scale `255 / (max - min)`, values rounded half away
/// from zero, zero point nudged to the nearest integer (ties to even).
pub fn qai8dx_row(row: &[f32]) -> Qai8dxRow {
    qai8dx_row_with(row, super::Rounding::HalfAwayFromZero)
}

/// As [`qai8dx_row`], rounding the scaled values with `rounding` (the NEON
/// packers, e.g. `kai_lhs_quant_pack_qai8dxp_bf16_neon`, round halves to
/// even).
pub fn qai8dx_row_with(row: &[f32], rounding: super::Rounding) -> Qai8dxRow {
    let (mut max0, mut min0) = (-f32::MAX, f32::MAX);
    for &x in row {
        max0 = max0.max(x);
        min0 = min0.min(x);
    }
    let p = qai8dx_params(min0, max0);
    let q = row.iter().map(|&x| p.quantize(rounding.round(x * p.scale))).collect();
    Qai8dxRow { q, zero_point: p.zero_point, recip_scale: p.recip_scale }
}

/// The per-row parameters every `qai8dx` packer derives from the row's
/// minimum and maximum, with upstream's float operations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Qai8dxParams {
    /// Multiplier applied before rounding (`255 / range`).
    pub scale: f32,
    /// `1 / scale`, as stored in the packed row.
    pub recip_scale: f32,
    /// Nudged zero point.
    pub zero_point: i32,
}

impl Qai8dxParams {
    /// The int8 value of an already rounded `x * scale` (zero point added,
    /// saturated; `as` saturates a non-finite product like the packers' conversions).
    pub(crate) fn quantize(&self, rounded: f32) -> i8 {
        ((rounded as i32).saturating_add(self.zero_point)).clamp(i8::MIN as i32, i8::MAX as i32) as i8
    }
}

/// Scale and zero point for a row whose values lie in `[min0, max0]`.
pub(crate) fn qai8dx_params(min0: f32, max0: f32) -> Qai8dxParams {
    let (qmin, qmax) = (i8::MIN as f32, i8::MAX as f32);
    let rmin = 0f32.min(min0);
    let rmax = 0f32.max(max0);
    let scale = if rmin == rmax { 1.0 } else { (qmax - qmin) / (rmax - rmin) };
    let recip_scale = if scale != 0.0 { 1.0 / scale } else { 0.0 };
    let descaled_min = rmin * scale;
    let descaled_max = rmax * scale;
    let zp_from_min_error = qmin + descaled_min;
    let zp_from_max_error = qmax + descaled_max;
    let mut zp = if zp_from_min_error + zp_from_max_error > 0.0 { qmin - descaled_min } else { qmax - descaled_max };
    zp = zp.max(qmin).min(qmax);
    Qai8dxParams { scale, recip_scale, zero_point: zp.round_ties_even() as i32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qai8dx_basics() {
        let r = qai8dx_row(&[0.0, 0.0]);
        assert_eq!(r.recip_scale, 1.0);
        assert!(r.q.iter().all(|&q| q as i32 == r.zero_point));
        let r = qai8dx_row(&[-1.0, 0.5, 1.0]);
        for (q, x) in r.q.iter().zip([-1.0f32, 0.5, 1.0]) {
            let back = (*q as i32 - r.zero_point) as f32 * r.recip_scale;
            assert!((back - x).abs() <= r.recip_scale, "{back} vs {x}");
        }
        // Positive-only rows still represent 0 exactly.
        let r = qai8dx_row(&[2.0, 3.0]);
        assert_eq!(r.zero_point, -128);
    }
}
