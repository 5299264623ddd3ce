//! `dwconv_f16_f16_f16p`: 3x3, stride-1 depthwise convolution in half
//! precision over one NHWC image with zero padding (see [`DepthwiseShape`]):
//! `dst[y][x][c] = clamp(bias[c] + Σ_{dy,dx<3} src[y+dy-top][x+dx-left][c] · w[dy][dx][c])`,
//! accumulated **in f16** by the kernel (nine `FMLA .h` from the bias), then
//! clamped with the bounds rounded to f16.
//!
//! Kernel (1 upstream): `f16p1vlx1b_3x3_s1_4x4_sme2_mla` (SME2,
//! "depth-first": tiles of 4x4 output pixels, one SVE vector of channels at
//! a time, reading 6x6 input pixels through a pointer table it builds from
//! the strides). Weight packer `kai_rhs_dwconv_pack_x16p1vlx1b_x16_x16_sme`
//! (format `x16p1vlx1b-dwconv3x3`: per block of SVL/2 channels, the biases
//! then the 9 taps; bias required, zeros when there is none). Output rows
//! are split among threads in blocks of 4 (each thread gets the matching
//! window of the input and its own top padding).
//!
//! Tolerance of the conformance test: each of the 9 fused steps rounds to
//! f16 (at most 2⁻¹¹ of a partial sum bounded by `M = |bias| + Σ |src·w|`,
//! or 2⁻²⁵ in the subnormal range), and the reference (f64, rounded once to
//! f16) is itself within half an f16 ulp of the exact value:
//! `|err| <= 10 · 2⁻¹¹ · M + 2⁻¹⁰ · |want| + 2⁻²⁰`.

use half::f16;

super::depthwise::dwconv_module! {
    /// The portable reference (test oracle and fallback): f64 accumulation,
    /// clamp, one rounding to f16; `src` is `in_h x in_w x channels`, `dst`
    /// `out_h x out_w x channels`, both dense NHWC.
    ///
    /// ```
    /// use half::f16;
    /// use kleidiai::families::dwconv_f16_f16_f16p::reference;
    /// use kleidiai::formats::{DepthwiseShape, DepthwiseWeights};
    /// use kleidiai::Clamp;
    /// let s = DepthwiseShape { in_h: 1, in_w: 1, channels: 1, pad_top: 1, pad_bottom: 1, pad_left: 1, pad_right: 1 };
    /// let mut taps = [f16::ZERO; 9];
    /// taps[4] = f16::from_f32(2.0); // the centre tap
    /// let w = DepthwiseWeights { channels: 1, data: &taps, bias: None };
    /// let mut y = [f16::ZERO];
    /// reference(&s, &[f16::from_f32(3.0)], &w, Clamp::NONE, &mut y).unwrap();
    /// assert_eq!(y[0].to_f32(), 6.0);
    /// ```
    family: dwconv_f16_f16_f16p,
    kernel: depth_first_f16,
    elem: f16,
    zero: f16::ZERO,
    read: |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32(),
    format: "x16p1vlx1b-dwconv3x3",
    packer: kai_run_rhs_dwconv_pack_x16p1vlx1b_x16_x16_sme,
    packer_size: kai_rhs_get_dst_size_dwconv_pack_x16p1vlx1b_x16_x16_sme,
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;
    use crate::families::depthwise::test_support::*;
    use crate::par::Parallelism;
    use crate::testing::{self, Rng, THREADS, bit_identical, compare};

    #[test]
    fn conformance() {
        conformance! {
            seed: 0xd16,
            zero: f16::ZERO,
            nan: f16::NAN,
            from_f32: f16::from_f32,
            to_f32: f16::to_f32,
            tolerance: |m, y| {
                (10.0 * f64::powi(2.0, -11) * m) as f32 + y.abs() * f32::powi(2.0, -10) + f32::powi(2.0, -20)
            },
        }
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let feats = crate::cpu::Features::current();
        let kern = crate::testing::or_skip!(Kernel::select(&feats));
        let s = DepthwiseShape { in_h: 4, in_w: 4, channels: 3, pad_top: 1, pad_bottom: 1, pad_left: 1, pad_right: 1 };
        let one = f16::from_f32(1.0);
        let taps = vec![one; 27];
        let packed = kern.pack_rhs(&DepthwiseWeights { channels: 3, data: &taps, bias: None }).unwrap();
        let src = vec![one; 48];
        let mut dst = vec![f16::ZERO; 48];
        kern.run(&s, &src, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).unwrap();
        assert_eq!((dst[0].to_f32(), dst[3].to_f32(), dst[5 * 3].to_f32()), (4.0, 6.0, 9.0));
    }

    #[test]
    fn bad_input_is_an_error() {
        let feats = crate::cpu::Features::current();
        let kern = crate::testing::or_skip!(Kernel::select(&feats));
        let s = DepthwiseShape { in_h: 4, in_w: 4, channels: 2, pad_top: 0, pad_bottom: 0, pad_left: 0, pad_right: 0 };
        let taps = vec![f16::ZERO; 18];
        let w = DepthwiseWeights { channels: 2, data: &taps, bias: None };
        let packed = kern.pack_rhs(&w).unwrap();
        let (src, mut dst) = (vec![f16::ZERO; 32], vec![f16::ZERO; 8]);
        let seq = Parallelism::Sequential;
        kern.run(&s, &src, &packed, &mut dst, Clamp::NONE, seq).unwrap();
        assert!(kern.run(&s, &src[..31], &packed, &mut dst, Clamp::NONE, seq).is_err(), "short src");
        assert!(kern.run(&s, &src, &packed, &mut dst[..7], Clamp::NONE, seq).is_err(), "short dst");
        let huge = DepthwiseShape { pad_left: usize::MAX / 2, ..s };
        assert!(kern.run(&huge, &src, &packed, &mut dst, Clamp::NONE, seq).is_err(), "padding too large");
        assert!(kern.pack_rhs(&DepthwiseWeights { data: &taps[..17], ..w }).is_err(), "short taps");
    }
}
