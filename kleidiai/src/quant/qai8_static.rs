//! Static int8 quantisation of a matmul (`qai8` LHS and output, known
//! scales and zero points): the requantisation of the int32 accumulator,
//! exactly as upstream's `qai8` kernels do it.

use crate::error::Result;

/// The LHS quantisation and the output scale: `x = (q - lhs_zero_point) *
/// lhs_scale`, `y = (q_out - zero_point) * dst_scale`. Upstream's RHS packers
/// bake these into the packed weights (the LHS zero point into the int32
/// bias, `lhs_scale / dst_scale` into the per-channel scales), so a packed
/// RHS is tied to them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Qai8Quant {
    /// LHS scale (finite, positive).
    pub lhs_scale: f32,
    /// LHS zero point, in `-128..=127`.
    pub lhs_zero_point: i32,
    /// Output scale (finite, positive).
    pub dst_scale: f32,
}

impl Qai8Quant {
    /// `lhs_scale / dst_scale` in f32: what the packers multiply each
    /// channel's weight scale by.
    pub fn scale_multiplier(&self) -> f32 {
        self.lhs_scale / self.dst_scale
    }

    /// Checks the zero point is an int8 value and the scales are finite
    /// and positive.
    pub(crate) fn check(&self) -> Result<()> {
        if !(-128..=127).contains(&self.lhs_zero_point) {
            return Err(crate::Error::bad_value("lhs zero point", self.lhs_zero_point, "not an int8 value"));
        }
        for (what, s) in [("lhs", self.lhs_scale), ("dst", self.dst_scale)] {
            if !(s.is_finite() && s > 0.0) {
                return Err(crate::Error::bad_value(
                    "scale",
                    s,
                    format!("the {what} scale must be finite and positive"),
                ));
            }
        }
        Ok(())
    }
}

/// The output stage applied when running: zero point and clamp range (in
/// the quantised domain, zero point included).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Qai8Output {
    /// Output zero point, in `-128..=127`.
    pub zero_point: i32,
    /// Lowest output value.
    pub min: i8,
    /// Highest output value.
    pub max: i8,
}

impl Qai8Output {
    /// Zero point `zero_point`, no clamping beyond the int8 range.
    pub const fn unclamped(zero_point: i32) -> Qai8Output {
        Qai8Output { zero_point, min: i8::MIN, max: i8::MAX }
    }

    /// Checks the zero point is an int8 value and `min <= max`.
    pub(crate) fn check(&self) -> Result<()> {
        if !(-128..=127).contains(&self.zero_point) {
            return Err(crate::Error::bad_value("output zero point", self.zero_point, "not an int8 value"));
        }
        if self.min > self.max {
            return Err(crate::Error::bad_value("clamp range", format!("[{}, {}]", self.min, self.max), "empty"));
        }
        Ok(())
    }
}

/// Requantises an int32 accumulator with the channel's effective scale
/// (weight scale times [`Qai8Quant::scale_multiplier`], an f32 product) as
/// the kernels do: convert to f32 (nearest), multiply, round to nearest with
/// ties to even, convert back saturating, add the zero point (wrapping),
/// clamp.
///
/// ```
/// use kleidiai::quant::{requantize, Qai8Output};
/// let out = Qai8Output { zero_point: 3, min: -128, max: 127 };
/// assert_eq!(requantize(5, 0.5, &out), 2 + 3); // 2.5 rounds to even
/// assert_eq!(requantize(7, 0.5, &out), 4 + 3);
/// assert_eq!(requantize(1_000, 1.0, &out), 127);
/// ```
pub fn requantize(acc: i32, scale: f32, out: &Qai8Output) -> i8 {
    // `as i32` saturates (NaN gives 0) like FCVTZS.
    let r = ((acc as f32) * scale).round_ties_even() as i32;
    r.wrapping_add(out.zero_point).clamp(out.min as i32, out.max as i32) as i8
}
