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

use crate::error::{self, Result};
use crate::formats::{DepthwiseShape, DepthwiseWeights};
use crate::packed::Clamp;

/// Upstream family directory.
pub const FAMILY: &str = "dwconv_f32_f32_f32p";

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
pub fn reference(
    shape: &DepthwiseShape,
    src: &[f32],
    w: &DepthwiseWeights<'_, f32>,
    clamp: Clamp,
    dst: &mut [f32],
) -> Result<()> {
    super::depthwise::dwconv3x3_core(shape, src, w, clamp, dst)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::buffer::SendPtr;
    use crate::cpu::Features;
    use crate::families::depthwise::dwconv_family;
    use crate::families::engine::{self, Tiles};
    use crate::par::Parallelism;
    use kleidiai_sys::interfaces::dwconv_f32_f32_f32p::{Interface, KERNELS};

    dwconv_family! {
        kernel: planar_f32,
        elem: f32,
        zero: 0f32,
        read: |b: &[u8]| f32::from_le_bytes(b.try_into().unwrap()),
        format: "x32p1vlx1b-dwconv3x3",
        packer: kai_run_rhs_dwconv_pack_x32p1vlx1b_x32_x32_sme,
        packer_size: kai_rhs_get_dst_size_dwconv_pack_x32p1vlx1b_x32_x32_sme,
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use crate::families::depthwise::test_support::*;
    use super::*;
    use crate::par::Parallelism;
    use crate::testing::{self, Rng, THREADS, bit_identical, compare};

    #[test]
    fn conformance() {
        testing::conformance(FAMILY, |info| {
            let kernel = Kernel::by_name(info.name).unwrap();
            let e = |c: usize| move |x: crate::Error| (c, x.to_string());
            let vl = kernel.rhs_layout(1).map_err(e(0))?.r;
            let mut rng = Rng::new(0xd3);
            let (mut cases, mut worst) = (0, 0f64);
            for (ci, s) in shapes(vl).into_iter().enumerate() {
                let c = s.channels;
                let src = rng.vec_f32(s.src_len().unwrap());
                let taps = rng.vec_f32(9 * c);
                let bias_v = rng.vec_f32(c);
                let bias = if ci % 3 == 2 { None } else { Some(&bias_v[..]) };
                let w = DepthwiseWeights { channels: c, data: &taps, bias };
                let clamp = if ci % 4 == 3 { Clamp { min: -0.75, max: 0.5 } } else { Clamp::NONE };
                let mut want = vec![0f32; s.dst_len().unwrap()];
                reference(&s, &src, &w, clamp, &mut want).map_err(e(cases))?;
                let b: Vec<f32> = (0..c).map(|j| bias.map_or(0.0, |b| b[j])).collect();
                let mags = magnitudes(&s, &src, &taps, &b);
                let packed = kernel.pack_rhs(&w).map_err(e(cases))?;
                let mut first: Option<Vec<f32>> = None;
                for threads in THREADS {
                    let mut dst = vec![f32::NAN; want.len()];
                    kernel.run(&s, &src, &packed, &mut dst, clamp, Parallelism::Rayon(threads)).map_err(e(cases))?;
                    let err = compare(&dst, &want, |i, _| (11.0 * f64::powi(2.0, -24) * mags[i] + 1e-30) as f32)
                        .map_err(|x| (cases, format!("{s:?} threads={threads}: {x}")))?;
                    worst = worst.max(err);
                    match &first {
                        None => first = Some(dst),
                        Some(f) if !bit_identical(f, &dst) => {
                            return Err((cases, format!("{s:?}: {threads} threads differ from 1")));
                        }
                        _ => {}
                    }
                }
                let mut row = [0f32; 9];
                for ch in [0, c / 2, c - 1] {
                    unpack_rhs_row(&packed, ch, &mut row).map_err(e(cases))?;
                    let expect: Vec<f32> = (0..9).map(|t| taps[t * c + ch]).collect();
                    if row[..] != expect[..] {
                        return Err((cases, format!("unpack_rhs_row({ch}) of {c} channels differs")));
                    }
                }
                cases += 1;
            }
            Ok((cases, worst))
        });
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(&f) else {
            return;
        };
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
        let Some(kern) = Kernel::select(&f) else {
            return;
        };
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
