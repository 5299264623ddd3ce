//! Depthwise convolution operands: the shape of a 3x3, stride-1 depthwise
//! convolution over one NHWC image, and its weights.

use crate::error::{self, Result};

/// A 3x3, stride-1 depthwise convolution of an `in_h x in_w x channels`
/// NHWC image (rows of `in_w` pixels of `channels` values, dense) with zero
/// padding. The output is `out_h x out_w x channels`, dense, with
/// `out_h = in_h + pad_top + pad_bottom - 2` and
/// `out_w = in_w + pad_left + pad_right - 2` (both at least 1).
///
/// ```
/// use kleidiai::formats::DepthwiseShape;
/// let s = DepthwiseShape { in_h: 5, in_w: 7, channels: 3, pad_top: 1, pad_bottom: 1, pad_left: 1, pad_right: 1 };
/// assert_eq!((s.out_h().unwrap(), s.out_w().unwrap()), (5, 7)); // "same" padding
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DepthwiseShape {
    /// Input rows.
    pub in_h: usize,
    /// Input columns.
    pub in_w: usize,
    /// Channels (input and output).
    pub channels: usize,
    /// Zero rows above the input.
    pub pad_top: usize,
    /// Zero rows below the input.
    pub pad_bottom: usize,
    /// Zero columns left of the input.
    pub pad_left: usize,
    /// Zero columns right of the input.
    pub pad_right: usize,
}

/// Largest value a dimension or padding may take: upstream computes pixel
/// coordinates in 32-bit `int`.
const MAX_DIM: usize = (i32::MAX / 4) as usize;

impl DepthwiseShape {
    /// Output rows.
    pub fn out_h(&self) -> Result<usize> {
        out_dim(self.in_h, self.pad_top, self.pad_bottom, "output height")
    }

    /// Output columns.
    pub fn out_w(&self) -> Result<usize> {
        out_dim(self.in_w, self.pad_left, self.pad_right, "output width")
    }

    /// Checks the dimensions (non-zero, output at least 1x1, coordinates
    /// within 32 bits, buffer sizes within `usize`).
    pub fn validate(&self) -> Result<()> {
        error::nonzero(self.in_h, "in_h")?;
        error::nonzero(self.in_w, "in_w")?;
        error::nonzero(self.channels, "channels")?;
        for (v, what) in [
            (self.in_h, "in_h"),
            (self.in_w, "in_w"),
            (self.channels, "channels"),
            (self.pad_top, "pad_top"),
            (self.pad_bottom, "pad_bottom"),
            (self.pad_left, "pad_left"),
            (self.pad_right, "pad_right"),
        ] {
            if v > MAX_DIM {
                return Err(crate::Error::bad_value(what, v, format!("exceeds {MAX_DIM}")));
            }
        }
        self.src_len()?;
        self.dst_len()?;
        Ok(())
    }

    /// Elements of the input (`in_h * in_w * channels`).
    pub fn src_len(&self) -> Result<usize> {
        error::mul(error::mul(self.in_h, self.in_w, "input")?, self.channels, "input")
    }

    /// Elements of the output (`out_h * out_w * channels`).
    pub fn dst_len(&self) -> Result<usize> {
        error::mul(error::mul(self.out_h()?, self.out_w()?, "output")?, self.channels, "output")
    }
}

fn out_dim(input: usize, before: usize, after: usize, what: &str) -> Result<usize> {
    let total = input
        .checked_add(before)
        .and_then(|t| t.checked_add(after))
        .ok_or_else(|| crate::Error::Overflow(what.into()))?;
    if total < 3 {
        return Err(crate::Error::ShapeMismatch {
            what: "padded input (input + padding before + after)",
            got: format!("{what}: {input} + {before} + {after}"),
            want: "at least 3 (the filter's taps)".into(),
        });
    }
    Ok(total - 2)
}

/// Depthwise 3x3 filter weights: `data[(dy * 3 + dx) * channels + c]`
/// (HWC, as upstream's packers read them), with an optional bias per channel.
#[derive(Clone, Copy, Debug)]
pub struct DepthwiseWeights<'a, T> {
    /// Channels.
    pub channels: usize,
    /// `9 * channels` values.
    pub data: &'a [T],
    /// Optional bias per channel.
    pub bias: Option<&'a [T]>,
}

impl<T> DepthwiseWeights<'_, T> {
    /// Checks the lengths.
    pub fn validate(&self) -> Result<()> {
        error::nonzero(self.channels, "channels")?;
        error::at_least(self.data.len(), error::mul(self.channels, 9, "depthwise weights")?, "depthwise weights")?;
        if let Some(b) = self.bias {
            error::at_least(b.len(), self.channels, "bias")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let s = DepthwiseShape { in_h: 4, in_w: 4, channels: 1, pad_top: 0, pad_bottom: 0, pad_left: 0, pad_right: 0 };
        assert_eq!((s.out_h().unwrap(), s.out_w().unwrap()), (2, 2));
        s.validate().unwrap();
        let tiny = DepthwiseShape { in_h: 1, in_w: 1, ..s };
        assert!(tiny.validate().is_err(), "1x1 without padding");
        let padded = DepthwiseShape { pad_top: 1, pad_bottom: 1, pad_left: 1, pad_right: 1, ..tiny };
        assert_eq!(padded.dst_len().unwrap(), 1);
        assert!(DepthwiseShape { channels: 0, ..s }.validate().is_err());
        assert!(DepthwiseShape { pad_left: usize::MAX, ..s }.validate().is_err());
        assert!(DepthwiseShape { in_h: MAX_DIM, in_w: MAX_DIM, channels: MAX_DIM, ..s }.validate().is_err());
        let w = DepthwiseWeights { channels: 2, data: &[0f32; 17], bias: None };
        assert!(w.validate().is_err());
        let w = DepthwiseWeights { channels: 2, data: &[0f32; 18], bias: Some(&[0.0]) };
        assert!(w.validate().is_err());
    }
}
