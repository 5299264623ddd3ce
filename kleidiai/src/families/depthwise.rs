//! What the two depthwise families share (`dwconv_f32_f32_f32p`,
//! `dwconv_f16_f16_f16p`): the reference math over the element type, the
//! reading of a depthwise packed RHS, and the test helpers.

use crate::error::{self, Result};
use crate::formats::{DepthwiseShape, DepthwiseWeights, FloatElement};
use crate::packed::Clamp;

/// Generic depthwise 3x3 reference: f64 accumulation, rounding to f32, the
/// clamp, then conversion to `T` (round to nearest even).
pub(crate) fn dwconv3x3_core<T: FloatElement>(
    s: &DepthwiseShape,
    src: &[T],
    w: &DepthwiseWeights<'_, T>,
    clamp: Clamp,
    dst: &mut [T],
) -> Result<()> {
    s.validate()?;
    w.validate()?;
    clamp.check()?;
    if w.channels != s.channels {
        return Err(crate::Error::ShapeMismatch {
            what: "weight channels",
            got: w.channels.to_string(),
            want: s.channels.to_string(),
        });
    }
    error::at_least(src.len(), s.src_len()?, "src")?;
    error::at_least(dst.len(), s.dst_len()?, "dst")?;
    let (oh, ow, c) = (s.out_h()?, s.out_w()?, s.channels);
    for y in 0..oh {
        for x in 0..ow {
            for ch in 0..c {
                let mut acc = w.bias.map_or(0.0, |b| b[ch].to_f32() as f64);
                for dy in 0..3 {
                    for dx in 0..3 {
                        let (iy, ix) = (y + dy, x + dx);
                        if iy < s.pad_top || ix < s.pad_left {
                            continue;
                        }
                        let (iy, ix) = (iy - s.pad_top, ix - s.pad_left);
                        if iy >= s.in_h || ix >= s.in_w {
                            continue;
                        }
                        let v = src[(iy * s.in_w + ix) * c + ch].to_f32() as f64;
                        acc += v * w.data[(dy * 3 + dx) * c + ch].to_f32() as f64;
                    }
                }
                dst[(y * ow + x) * c + ch] = T::from_f32((acc as f32).max(clamp.min).min(clamp.max));
            }
        }
    }
    Ok(())
}

#[cfg(target_arch = "aarch64")]
pub(crate) use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use crate::error::{self, Result};
    use crate::packed::PackedRhs;

    /// Byte offset of tap `tap` (`-1`: the bias, else `dy * 3 + dx`) of
    /// channel `c` in a depthwise packed RHS with blocks of `vl` channels of
    /// `esize`-byte elements.
    pub(crate) fn dw_offset(c: usize, tap: isize, vl: usize, esize: usize) -> usize {
        ((c / vl) * vl * 10 + ((tap + 1) as usize) * vl + c % vl) * esize
    }

    /// Channel `c`'s 9 taps (`dy * 3 + dx` order) of a depthwise packed RHS
    /// of `esize`-byte elements, decoded by `read`.
    pub(crate) fn dw_unpack<F: Fn(&[u8]) -> f32>(
        rhs: &PackedRhs,
        format: &str,
        c: usize,
        out: &mut [f32],
        esize: usize,
        read: F,
    ) -> Result<()> {
        let l = *rhs.layout();
        if l.format != format {
            return Err(crate::Error::bad_value("packed RHS format", l.format, format!("not a {format} packed RHS")));
        }
        if c >= l.rows {
            return Err(crate::Error::out_of_range("channel", c, l.rows));
        }
        error::at_least(out.len(), 9, "taps output")?;
        let b = rhs.as_bytes();
        for (tap, o) in out.iter_mut().enumerate().take(9) {
            let at = dw_offset(c, tap as isize, l.r, esize);
            *o = read(&b[at..at + esize]);
        }
        Ok(())
    }
}

/// Test helpers shared by the depthwise families.
#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) mod test_support {
    use crate::formats::DepthwiseShape;

    /// Shapes and paddings from one pixel to several 4-row blocks, odd
    /// channel counts around the vector length `vl`, and upstream's large
    /// asymmetric padding.
    pub(crate) fn shapes(vl: usize) -> Vec<DepthwiseShape> {
        let s = |in_h, in_w, channels, (pad_top, pad_bottom, pad_left, pad_right)| DepthwiseShape {
            in_h,
            in_w,
            channels,
            pad_top,
            pad_bottom,
            pad_left,
            pad_right,
        };
        vec![
            s(4, 4, 1, (0, 0, 0, 0)),
            s(1, 1, 3, (1, 1, 1, 1)),
            s(5, 5, vl - 1, (1, 1, 1, 1)),
            s(7, 9, vl + 1, (0, 1, 0, 1)),
            s(10, 6, 2, (1, 1, 1, 1)),
            s(9, 5, 2 * vl + 3, (5, 3, 5, 11)),
            s(13, 3, 5, (7, 3, 2, 0)),
        ]
    }

    /// Per output `|bias| + Σ |src·w|` (as f64).
    pub(crate) fn magnitudes(s: &DepthwiseShape, src: &[f32], w: &[f32], bias: &[f32]) -> Vec<f64> {
        let (oh, ow, c) = (s.out_h().unwrap(), s.out_w().unwrap(), s.channels);
        let mut out = vec![0f64; oh * ow * c];
        for y in 0..oh {
            for x in 0..ow {
                for ch in 0..c {
                    let mut m = bias[ch].abs() as f64;
                    for dy in 0..3 {
                        for dx in 0..3 {
                            let (iy, ix) = (y + dy, x + dx);
                            if iy < s.pad_top || ix < s.pad_left {
                                continue;
                            }
                            let (iy, ix) = (iy - s.pad_top, ix - s.pad_left);
                            if iy < s.in_h && ix < s.in_w {
                                m += (src[(iy * s.in_w + ix) * c + ch] as f64 * w[(dy * 3 + dx) * c + ch] as f64).abs();
                            }
                        }
                    }
                    out[(y * ow + x) * c + ch] = m;
                }
            }
        }
        out
    }
}
