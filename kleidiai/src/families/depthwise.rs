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

/// A depthwise family module: its `FAMILY`, its `reference` (documented by
/// the doc comment given) over `dwconv3x3_core`, and on aarch64 its
/// `dwconv_family!` items (given the rest of the arguments).
macro_rules! dwconv_module {
    (
        $(#[$doc:meta])*
        family: $family:ident,
        kernel: $kernel:ident,
        elem: $t:ty,
        $($rest:tt)*
    ) => {
        use $crate::error::Result;
        use $crate::formats::{DepthwiseShape, DepthwiseWeights};
        use $crate::packed::Clamp;

        /// Upstream family directory.
        pub const FAMILY: &str = stringify!($family);

        $(#[$doc])*
        pub fn reference(
            shape: &DepthwiseShape,
            src: &[$t],
            w: &DepthwiseWeights<'_, $t>,
            clamp: Clamp,
            dst: &mut [$t],
        ) -> Result<()> {
            $crate::families::depthwise::dwconv3x3_core(shape, src, w, clamp, dst)
        }

        #[cfg(target_arch = "aarch64")]
        pub use imp::*;

        #[cfg(target_arch = "aarch64")]
        mod imp {
            use super::*;
            use $crate::error;
            use $crate::families::depthwise::dwconv_family;
            use $crate::families::engine;
            use $crate::par::Parallelism;
            use kleidiai_sys::interfaces::$family::{Interface, KERNELS};

            dwconv_family! {
                kernel: $kernel,
                elem: $t,
                $($rest)*
            }
        }
    };
}
pub(crate) use dwconv_module;

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

    /// What a depthwise family's kernels share, generated from the family's
    /// data: its upstream kernels (`KERNELS` of its `-sys` interface
    /// module), element type, packed format and RHS packer. Gives the
    /// family's `Kernel` handle (`all`, `by_name`, `select`, `info`,
    /// `rhs_layout`, `pack_rhs`, `run`), `infos` and `unpack_rhs_row`. The
    /// two upstream kernels take different arguments (`planar_f32`: up to 4
    /// output rows of every column per call; `depth_first_f16`: a window of
    /// rows, the kernel building its own pointer table), so `run` and the
    /// getter checks come in those two kinds. Every FFI call of the
    /// depthwise families is in the engine's drivers (`engine::DwRun::run`,
    /// `engine::pack_dw_rhs`).
    macro_rules! dwconv_family {
        (kernel: planar_f32, $($rest:tt)*) => {
            $crate::families::depthwise::dwconv_family!(@common $($rest)*);

            impl Kernel {
                /// The features in force, once the CPU is known to run the kernel.
                fn checked(&self) -> Result<engine::Gate> {
                    engine::ensure_supported(&self.0.info)
                }

                /// The convolution: `src` is `in_h x in_w x channels`, `dst`
                /// `out_h x out_w x channels`, both dense NHWC.
                pub fn run(
                    &self,
                    shape: &DepthwiseShape,
                    src: &[f32],
                    rhs: &PackedRhs,
                    dst: &mut [f32],
                    clamp: Clamp,
                    par: Parallelism,
                ) -> Result<()> {
                    let i = self.0.iface;
                    let run = engine::DwRun::Planar(i.run_dwconv.expect("run"), i.get_m_step.expect("m_step"));
                    run.run(&self.0.info, |c| self.gated_layout(c), shape, (src, rhs, dst), clamp, par)
                }
            }
        };
        (kernel: depth_first_f16, $($rest:tt)*) => {
            $crate::families::depthwise::dwconv_family!(@common $($rest)*);

            /// Output rows of one tile of the kernel.
            const M_STEP: usize = 4;

            impl Kernel {
                /// The features in force, once the CPU is known to run the kernel
                /// and its filter is 3x3.
                fn checked(&self) -> Result<engine::Gate> {
                    let g = engine::ensure_supported(&self.0.info)?;
                    let i = self.0.iface;
                    let fh = engine::query!(&g, i.get_filter_height.expect("fh"));
                    let fw = engine::query!(&g, i.get_filter_width.expect("fw"));
                    if (fh, fw) != (3, 3) {
                        return Err(crate::Error::bad_value(
                            "filter",
                            format!("{fh}x{fw}"),
                            format!("{} takes 3x3", self.0.info.name),
                        ));
                    }
                    Ok(g)
                }

                /// The convolution: `src` is `in_h x in_w x channels`, `dst`
                /// `out_h x out_w x channels`, both dense NHWC.
                pub fn run(
                    &self,
                    shape: &DepthwiseShape,
                    src: &[f16],
                    rhs: &PackedRhs,
                    dst: &mut [f16],
                    clamp: Clamp,
                    par: Parallelism,
                ) -> Result<()> {
                    let run = engine::DwRun::DepthFirst(self.0.iface.run_dwconv.expect("run"), M_STEP);
                    run.run(&self.0.info, |c| self.gated_layout(c), shape, (src, rhs, dst), clamp, par)
                }
            }
        };
        (
            @common
            elem: $t:ty,
            zero: $zero:expr,
            read: $read:expr,
            format: $format:literal,
            packer: $packer:ident,
            packer_size: $packer_size:ident $(,)?
        ) => {
            use crate::buffer::AlignedBuf;
            use crate::packed::{PackedLayout, PackedRhs};
            use crate::registry::info::{KernelInfo, VectorLength, rank_for, tile_kind_for};
            use std::sync::OnceLock;

            pub(super) const RHS_FORMAT: &str = $format;
            const RHS_PACKERS: &[&str] = &[stringify!($packer)];
            /// Bytes of one element.
            const ESIZE: usize = core::mem::size_of::<$t>();

            struct Entry {
                info: KernelInfo,
                iface: &'static Interface,
            }

            fn entries() -> &'static [Entry] {
                static E: OnceLock<Vec<Entry>> = OnceLock::new();
                E.get_or_init(|| {
                    KERNELS
                        .iter()
                        .map(|(u, iface)| Entry {
                            info: KernelInfo {
                                name: u.name,
                                family: FAMILY,
                                features: u.features,
                                vector_length: VectorLength::Any,
                                tile: tile_kind_for(u.name),
                                lhs_packer: None,
                                rhs_packers: RHS_PACKERS,
                                rank: rank_for(u.name, u.features),
                            },
                            iface,
                        })
                        .collect()
                })
            }

            $crate::families::engine::kernel_type!(Entry, select_rows: 2);

            impl Kernel {

                /// The packed-weights layout for `channels` channels (it
                /// depends on the SME vector length in force).
                pub fn rhs_layout(&self, channels: usize) -> Result<PackedLayout> {
                    Ok(self.gated_layout(channels)?.0)
                }

                /// [`rhs_layout`](Self::rhs_layout) with the gate of the kernel.
                fn gated_layout(&self, channels: usize) -> Result<(PackedLayout, engine::Gate)> {
                    let f = self.checked()?;
                    let vb = engine::layout_vector_bytes(&self.0.info, &f);
                    let layout = PackedLayout {
                        format: RHS_FORMAT,
                        rows: channels,
                        k: 9,
                        r: vb / ESIZE,
                        kr: 1,
                        sr: 1,
                        bl: 0,
                        vector_bytes: vb,
                    };
                    Ok((layout, f))
                }

                #[doc = concat!("Packs the 3x3 ", stringify!($t), " weights and the ", stringify!($t), " bias.")]
                pub fn pack_rhs(&self, w: &DepthwiseWeights<'_, $t>) -> Result<PackedRhs> {
                    w.validate()?;
                    let layout = self.rhs_layout(w.channels)?;
                    let g = self.checked()?;
                    let c = w.channels;
                    // RDSVL, on a CPU with SME2 (the gate above).
                    let vl = crate::cpu::rdsvl_bytes() / ESIZE;
                    if vl != layout.r || vl == 0 {
                        return Err(crate::Error::PackerMismatch {
                            kernel: self.0.info.name,
                            why: format!(
                                concat!("SME vector length {} x ", stringify!($t), " differs from the detected {}"),
                                vl, layout.r
                            ),
                        });
                    }
                    let need = error::mul(error::mul(c.div_ceil(vl), vl, "channels")?, 10 * ESIZE, "packed weights")?;
                    let zeros;
                    let bias = match w.bias {
                        Some(b) => &b[..c],
                        None => {
                            zeros = vec![$zero; c];
                            &zeros[..]
                        }
                    };
                    // Reads the SME vector length; c is nonzero (validate).
                    let size = engine::query!(&g, kleidiai_sys::$packer_size, 3, 3, c);
                    if size != need {
                        return Err(crate::Error::PackerMismatch {
                            kernel: self.0.info.name,
                            why: format!("packer size {size} differs from {need}"),
                        });
                    }
                    let mut buf = AlignedBuf::zeroed(size);
                    let packer = (kleidiai_sys::$packer as engine::PackDw, kleidiai_sys::$packer_size as _, ESIZE);
                    engine::pack_dw_rhs(&g, packer, c, (w.data, bias), buf.as_mut_slice())?;
                    Ok(PackedRhs::new(layout, buf))
                }
            }

            /// The 9 taps (`dy * 3 + dx` order) of channel `channel` of a
            /// packed RHS of this family, as f32.
            pub fn unpack_rhs_row(rhs: &PackedRhs, channel: usize, out: &mut [f32]) -> Result<()> {
                crate::families::depthwise::dw_unpack(rhs, RHS_FORMAT, channel, out, ESIZE, $read)
            }
        };
    }
    pub(crate) use dwconv_family;
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

    /// The conformance test of a depthwise family (run in its `tests`
    /// module, which has its `Kernel`, `reference` and `unpack_rhs_row`):
    /// random shapes from [`shapes`], with and without bias and clamp, on
    /// every thread count, against `reference` within `tolerance(M, want)`
    /// (`M` from [`magnitudes`]), every thread count bit-identical to the
    /// first, and `unpack_rhs_row` giving the taps back. Values are drawn
    /// as f32 and converted with `from_f32`; outputs compared as f32.
    macro_rules! conformance {
        (
            seed: $seed:expr,
            zero: $zero:expr,
            nan: $nan:expr,
            from_f32: $from_f32:expr,
            to_f32: $to_f32:expr,
            tolerance: $tol:expr $(,)?
        ) => {
            testing::conformance(FAMILY, |info| {
                let conv = |v: Vec<f32>| v.into_iter().map($from_f32).collect::<Vec<_>>();
                let f = |v: &[_]| v.iter().map(|x| $to_f32(*x)).collect::<Vec<f32>>();
                let tol: fn(f64, f32) -> f32 = $tol;
                let kernel = Kernel::by_name(info.name).unwrap();
                let e = |c: usize| move |x: crate::Error| (c, x.to_string());
                let vl = kernel.rhs_layout(1).map_err(e(0))?.r;
                let mut rng = Rng::new($seed);
                let (mut cases, mut worst) = (0, 0f64);
                for (ci, s) in shapes(vl).into_iter().enumerate() {
                    let c = s.channels;
                    let src = conv(rng.vec_f32(s.src_len().unwrap()));
                    let taps = conv(rng.vec_f32(9 * c));
                    let bias_v = conv(rng.vec_f32(c));
                    let bias = if ci % 3 == 2 { None } else { Some(&bias_v[..]) };
                    let w = DepthwiseWeights { channels: c, data: &taps, bias };
                    let clamp = if ci % 4 == 3 { Clamp { min: -0.75, max: 0.5 } } else { Clamp::NONE };
                    let mut want = vec![$zero; s.dst_len().unwrap()];
                    reference(&s, &src, &w, clamp, &mut want).map_err(e(cases))?;
                    let want = f(&want);
                    let b: Vec<f32> = (0..c).map(|j| bias.map_or(0.0, |b| $to_f32(b[j]))).collect();
                    let mags = magnitudes(&s, &f(&src), &f(&taps), &b);
                    let packed = kernel.pack_rhs(&w).map_err(e(cases))?;
                    let mut first: Option<Vec<f32>> = None;
                    for threads in THREADS {
                        let mut dst = vec![$nan; want.len()];
                        kernel
                            .run(&s, &src, &packed, &mut dst, clamp, Parallelism::Rayon(threads))
                            .map_err(e(cases))?;
                        let dst = f(&dst);
                        let err = compare(&dst, &want, |i, y| tol(mags[i], y))
                            .map_err(|x| (cases, format!("{s:?} threads={threads}: {x}")))?;
                        worst = worst.max(err);
                        match &first {
                            None => first = Some(dst),
                            Some(fst) if !bit_identical(fst, &dst) => {
                                return Err((cases, format!("{s:?}: {threads} threads differ from 1")));
                            }
                            _ => {}
                        }
                    }
                    let mut row = [0f32; 9];
                    for ch in [0, c / 2, c - 1] {
                        unpack_rhs_row(&packed, ch, &mut row).map_err(e(cases))?;
                        let expect: Vec<f32> = (0..9).map(|t| $to_f32(taps[t * c + ch])).collect();
                        if row[..] != expect[..] {
                            return Err((cases, format!("unpack_rhs_row({ch}) of {c} channels differs")));
                        }
                    }
                    cases += 1;
                }
                Ok((cases, worst))
            })
        };
    }
    pub(crate) use conformance;

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
