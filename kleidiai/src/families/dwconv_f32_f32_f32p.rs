//! `dwconv_f32_f32_f32p`: 3x3, stride-1 depthwise convolution in f32 over
//! one NHWC image with zero padding (see [`DepthwiseShape`]):
//! `dst[y][x][c] = clamp(bias[c] + Σ_{dy,dx<3} src[y+dy-top][x+dx-left][c] · w[dy][dx][c])`,
//! with the source zero outside the image.
//!
//! Kernel (1 upstream): `f32p1vlx1b_3x3_s1_4xc_sme2_mla` (SME2, "planar":
//! each call produces up to 4 output rows of every column and channel,
//! accumulating with `FMLA` into ZA). Weight packer
//! `kai_rhs_dwconv_pack_x32p1vlx1b_x32_x32_sme` (format
//! `x32p1vlx1b-dwconv3x3`: per block of SVL/4 channels, the biases then the
//! 9 taps; bias required, zeros when there is none). Upstream derives the
//! channel count and both row widths from the strides, so source and
//! destination must be dense NHWC (which this API requires); it supports
//! zero padding only. Output rows are split among threads in blocks of 4.
//!
//! Tolerance of the conformance test: fused multiply-adds in f32 (9 steps
//! from the bias), each off by at most 2⁻²⁴ of a partial sum bounded by
//! `M = |bias| + Σ |src·w|`, against an f64 reference rounded once:
//! `|err| <= 11 · 2⁻²⁴ · M`.

super::depthwise::dwconv_module! {
    /// The portable reference (test oracle and fallback); `src` is `in_h x
    /// in_w x channels`, `dst` `out_h x out_w x channels`, both dense NHWC.
    ///
    /// ```
    /// use kleidiai::families::dwconv_f32_f32_f32p::reference;
    /// use kleidiai::formats::{DepthwiseShape, DepthwiseWeights};
    /// use kleidiai::Clamp;
    /// // One channel, 3x3 input of ones, no padding: one output = sum of the taps + bias.
    /// let s = DepthwiseShape { in_h: 3, in_w: 3, channels: 1, pad_top: 0, pad_bottom: 0, pad_left: 0, pad_right: 0 };
    /// let taps: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    /// let w = DepthwiseWeights { channels: 1, data: &taps, bias: Some(&[0.5]) };
    /// let mut y = [0f32];
    /// reference(&s, &[1.0; 9], &w, Clamp::NONE, &mut y).unwrap();
    /// assert_eq!(y[0], 45.5);
    /// ```
    family: dwconv_f32_f32_f32p,
    kernel: planar_f32,
    elem: f32,
    zero: 0f32,
    read: |b: &[u8]| f32::from_le_bytes(b.try_into().unwrap()),
    format: "x32p1vlx1b-dwconv3x3",
    packer: kai_run_rhs_dwconv_pack_x32p1vlx1b_x32_x32_sme,
    packer_size: kai_rhs_get_dst_size_dwconv_pack_x32p1vlx1b_x32_x32_sme,
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use crate::families::depthwise::test_support::*;
    use super::*;
    use crate::par::Parallelism;
    use crate::testing::{self, Rng, THREADS, bit_identical, compare};

    #[test]
    fn conformance() {
        conformance! {
            seed: 0xd3,
            zero: 0f32,
            nan: f32::NAN,
            from_f32: core::convert::identity,
            to_f32: core::convert::identity,
            tolerance: |m, _| (11.0 * f64::powi(2.0, -24) * m + 1e-30) as f32,
        }
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let f = crate::cpu::Features::current();
        let kern = crate::testing::or_skip!(Kernel::select(&f));
        let s = DepthwiseShape { in_h: 4, in_w: 4, channels: 3, pad_top: 1, pad_bottom: 1, pad_left: 1, pad_right: 1 };
        let taps = vec![1.0f32; 27];
        let packed = kern.pack_rhs(&DepthwiseWeights { channels: 3, data: &taps, bias: None }).unwrap();
        let src = vec![1.0f32; 48];
        let mut dst = vec![0f32; 48];
        kern.run(&s, &src, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).unwrap();
        // Corners see 4 pixels, edges 6, the inside 9.
        assert_eq!((dst[0], dst[3], dst[5 * 3]), (4.0, 6.0, 9.0));
        let other = DepthwiseShape { channels: 2, ..s };
        let r = kern.run(&other, &src, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential);
        assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{r:?}");
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let kern = crate::testing::or_skip!(Kernel::select(&f));
        let s = DepthwiseShape { in_h: 4, in_w: 4, channels: 2, pad_top: 0, pad_bottom: 0, pad_left: 0, pad_right: 0 };
        let taps = vec![0f32; 18];
        let w = DepthwiseWeights { channels: 2, data: &taps, bias: None };
        let packed = kern.pack_rhs(&w).unwrap();
        let (src, mut dst) = (vec![0f32; 32], vec![0f32; 8]);
        let seq = Parallelism::Sequential;
        kern.run(&s, &src, &packed, &mut dst, Clamp::NONE, seq).unwrap();
        assert!(kern.run(&s, &src[..31], &packed, &mut dst, Clamp::NONE, seq).is_err(), "short src");
        assert!(kern.run(&s, &src, &packed, &mut dst[..7], Clamp::NONE, seq).is_err(), "short dst");
        let tiny = DepthwiseShape { in_h: 2, ..s };
        assert!(kern.run(&tiny, &src, &packed, &mut dst, Clamp::NONE, seq).is_err(), "output of zero rows");
        assert!(kern.pack_rhs(&DepthwiseWeights { data: &taps[..17], ..w }).is_err(), "short taps");
        assert!(kern.pack_rhs(&DepthwiseWeights { bias: Some(&[0.0]), ..w }).is_err(), "short bias");
        let bad = Clamp { min: f32::NAN, max: 0.0 };
        assert!(kern.run(&s, &src, &packed, &mut dst, bad, seq).is_err(), "NaN clamp");
        assert!(reference(&s, &src, &DepthwiseWeights { channels: 3, ..w }, Clamp::NONE, &mut dst).is_err());
    }
}
