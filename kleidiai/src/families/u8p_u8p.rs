//! What `matmul_i32_u8p_u8p` and `matmul_clamp_f32_u8p_u8p` share: both
//! multiply `u8` by `u8` into an int32 accumulator seeded with a per-row and a
//! per-column int32 bias, from the same packed LHS and RHS; the f32 family
//! then scales, adds a per-column f32 bias and clamps.
//!
//! Packing (both families): LHS `kai_matmul_pack_lhs_mxk_x8p4vsx4_x8_sme`,
//! RHS `kai_matmul_pack_rhs_nxk_x8p4vsx4_x8_sme` (N x K) or
//! `kai_matmul_pack_rhs_kxn_x8p4vsx4_x8_sme` (K x N), both giving the same
//! packed format, tagged `u8p4vsx4` here (upstream's `x8p4vsx4` with its
//! element type: blocks of `4 * vscale` rows, groups of 4 K values, K padded
//! to a multiple of 4 with zeros).

use crate::error::{self, Result};
use crate::formats::U8Weights;

/// The int32 biases added to the accumulator: one per output row and one per
/// output column (either may be absent: zero).
#[derive(Clone, Copy, Debug, Default)]
pub struct AccBias<'a> {
    /// `m` values, added to every column of row `i`.
    pub per_row: Option<&'a [i32]>,
    /// `n` values, added to every row of column `j`.
    pub per_col: Option<&'a [i32]>,
}

/// Checks an `m x k` LHS with rows `stride` bytes apart.
pub(crate) fn check_lhs(m: usize, k: usize, lhs: &[u8], stride: usize) -> Result<()> {
    error::nonzero(m, "m")?;
    error::nonzero(k, "k")?;
    if stride < k {
        return Err(crate::Error::bad_value("lhs_stride", stride, format!("less than k = {k}")));
    }
    let need = error::mul(m - 1, stride, "lhs")?.checked_add(k).ok_or_else(|| crate::Error::Overflow("lhs".into()))?;
    error::at_least(lhs.len(), need, "lhs")
}

/// Checks the bias lengths for an `m x n` output.
pub(crate) fn check_bias(bias: &AccBias<'_>, m: usize, n: usize) -> Result<()> {
    if let Some(b) = bias.per_row {
        error::at_least(b.len(), m, "per-row bias")?;
    }
    if let Some(b) = bias.per_col {
        error::at_least(b.len(), n, "per-column bias")?;
    }
    Ok(())
}

/// The integer part of both references: calls `out(i, j, acc)` with
/// `acc = per_row[i] + per_col[j] + sum_k lhs[i][k] * w[j][k]`, wrapping
/// like the kernels' int32 accumulators.
pub(crate) fn accumulate(
    m: usize,
    lhs: &[u8],
    w: &U8Weights<'_>,
    bias: &AccBias<'_>,
    mut out: impl FnMut(usize, usize, i32),
) -> Result<()> {
    w.validate()?;
    let (n, k) = (w.n, w.k);
    check_lhs(m, k, lhs, k)?;
    check_bias(bias, m, n)?;
    let wt: Vec<u8> = (0..n * k).map(|i| w.value_unchecked(i / k, i % k)).collect();
    for i in 0..m {
        let row = &lhs[i * k..(i + 1) * k];
        let b = bias.per_row.map_or(0, |b| b[i]);
        for j in 0..n {
            let dot = row
                .iter()
                .zip(&wt[j * k..(j + 1) * k])
                .fold(0i32, |acc, (&x, &y)| acc.wrapping_add(x as i32 * y as i32));
            out(i, j, dot.wrapping_add(b).wrapping_add(bias.per_col.map_or(0, |b| b[j])));
        }
    }
    Ok(())
}

#[cfg(target_arch = "aarch64")]
pub(crate) use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::buffer::AlignedBuf;
    use crate::families::engine::{self, Gate, Tiles};
    use crate::families::uker::{PackLhs, PackRhs, Uker, UkerCtor};
    use crate::formats::Order;
    use crate::packed::{Clamp, PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::info::KernelInfo;
    use kleidiai_sys as sys;
    use std::borrow::Cow;

    pub(crate) const FORMAT: &str = "u8p4vsx4";
    const LHS_PACKER: &str = "kai_matmul_pack_lhs_mxk_x8p4vsx4_x8_sme";
    const RHS_PACKERS: &[&str] =
        &["kai_matmul_pack_rhs_nxk_x8p4vsx4_x8_sme", "kai_matmul_pack_rhs_kxn_x8p4vsx4_x8_sme"];
    /// K values per group in both packed operands.
    const KR: usize = 4;

    /// One kernel: registry entry and table constructor.
    pub(crate) struct Entry {
        pub(crate) info: KernelInfo,
        ctor: UkerCtor,
    }

    /// Entries for a family's `API_KERNELS`.
    pub(crate) fn build_entries(family: &'static str, api: &[(&'static sys::Ukernel, UkerCtor)]) -> Vec<Entry> {
        api.iter()
            .map(|&(u, ctor)| Entry { info: engine::kernel_info(u, family, Some(LHS_PACKER), RHS_PACKERS), ctor })
            .collect()
    }

    /// What follows the int32 accumulation.
    #[derive(Clone, Copy)]
    pub(crate) enum Stage<'a> {
        /// The accumulator is the output.
        I32,
        /// `clamp(acc * scale + bias[j])`, one fused multiply-add.
        F32 { scale: f32, bias: Option<&'a [f32]>, clamp: Clamp },
    }

    impl Entry {
        /// Tiles, features, and the kernel's table.
        pub(crate) fn tiles(&self) -> Result<(Tiles, Gate, Uker)> {
            // The packers need SME only, which every kernel here requires too.
            let g = engine::ensure_supported(&self.info)?;
            let uker = Uker::new(self.ctor, &g);
            let (m_step, n_step) = uker.step();
            let mr = PackLhs::new(sys::kai_matmul_pack_lhs_mxk_x8p4vsx4_x8_sme, &g).step_m();
            let nr = PackRhs::new(sys::kai_matmul_pack_rhs_nxk_x8p4vsx4_x8_sme, &g).step_n();
            Ok((Tiles { m_step, n_step, mr, nr, kr: KR, sr: 1 }, g, uker))
        }

        fn layout(&self, rows: usize, k: usize, lhs: bool) -> Result<PackedLayout> {
            error::nonzero(k, "k")?;
            let (t, f, _) = self.tiles()?;
            Ok(f.layout(&self.info, FORMAT, (rows, k, 0), if lhs { t.mr } else { t.nr }, &t))
        }

        pub(crate) fn rhs_layout(&self, n: usize, k: usize) -> Result<PackedLayout> {
            self.layout(n, k, false)
        }

        pub(crate) fn lhs_layout(&self, m: usize, k: usize) -> Result<PackedLayout> {
            self.layout(m, k, true)
        }

        pub(crate) fn pack_rhs(&self, w: &U8Weights<'_>) -> Result<PackedRhs> {
            w.validate()?;
            let layout = self.rhs_layout(w.n, w.k)?;
            let (n, k) = (w.n, w.k);
            error::mul(
                n.div_ceil(layout.r),
                error::mul(layout.r, k.next_multiple_of(KR), "packed rhs")?,
                "packed rhs",
            )?;
            let g = engine::ensure_supported(&self.info)?;
            let p = match w.order {
                Order::NxK => PackRhs::new(sys::kai_matmul_pack_rhs_nxk_x8p4vsx4_x8_sme, &g),
                Order::KxN => PackRhs::new(sys::kai_matmul_pack_rhs_kxn_x8p4vsx4_x8_sme, &g),
            };
            let mut buf = AlignedBuf::zeroed(p.packed_size(n, k));
            let x = engine::TableRhs::<u8, u8> {
                dims: (n, k),
                order: w.order,
                values: (w.data, 8),
                bias: None,
                scales: None,
                globals: None,
            };
            engine::pack_rhs_table(&p, x, buf.as_mut_slice())?;
            Ok(PackedRhs::new(layout, buf))
        }

        pub(crate) fn pack_lhs_into(
            &self,
            m: usize,
            k: usize,
            lhs: &[u8],
            lhs_stride: usize,
            par: Parallelism,
            out: &mut PackedLhs,
        ) -> Result<()> {
            check_lhs(m, k, lhs, lhs_stride)?;
            let layout = self.lhs_layout(m, k)?;
            let mr = layout.r;
            error::mul(error::mul(m.div_ceil(mr), mr, "packed lhs")?, k.next_multiple_of(KR), "packed lhs")?;
            let g = engine::ensure_supported(&self.info)?;
            let p = engine::LhsPacker::api(PackLhs::new(sys::kai_matmul_pack_lhs_mxk_x8p4vsx4_x8_sme, &g), 1);
            let size = p.size(&g, m, k, 0, (mr, KR, 1));
            out.reset(layout, size);
            let x = engine::LhsSource { src: lhs, stride: lhs_stride, m, k, bl: 0, blocking: (mr, KR, 1) };
            engine::pack_lhs(&g, &self.info, &p, x, engine::LhsCalls::Blocks, out.data_mut().as_mut_slice(), par)?;
            Ok(())
        }

        /// Runs the kernel over the whole output; `dst` holds `m x n`
        /// 4-byte values (checked by the caller, and by the engine).
        pub(crate) fn run<O>(
            &self,
            lhs: &PackedLhs,
            rhs: &PackedRhs,
            bias: &AccBias<'_>,
            stage: Stage<'_>,
            dst: &mut [O],
            par: Parallelism,
        ) -> Result<()> {
            let (m, n, k) = (lhs.layout().rows, rhs.layout().rows, rhs.layout().k);
            let rhs_layout = self.rhs_layout(n, k)?;
            rhs.expect(&rhs_layout, self.info.name)?;
            let lhs_layout = self.lhs_layout(m, k)?;
            lhs.expect(&lhs_layout, self.info.name)?;
            check_bias(bias, m, n)?;
            // The kernels read both accumulator biases unconditionally.
            let bias_m = or_zeros(bias.per_row, m);
            let bias_n = or_zeros(bias.per_col, n);
            let acc_bias = (&bias_m[..], &bias_n[..]);
            let out_bias;
            let stage = match stage {
                Stage::I32 => engine::IntStage::AccBias(acc_bias.0, acc_bias.1),
                Stage::F32 { scale, bias, clamp } => {
                    clamp.check()?;
                    if let Some(b) = bias {
                        error::at_least(b.len(), n, "output bias")?;
                    }
                    out_bias = or_zeros(bias, n);
                    engine::IntStage::F32 { acc_bias, scale, bias: &out_bias, clamp }
                }
            };
            let (t, g, uker) = self.tiles()?;
            let call = engine::IntCall { info: &self.info, tiles: (t, g), rhs_layout };
            let lhs = engine::IntLhs::Packed(lhs, lhs_layout);
            engine::IntRun::Table(uker).run(&call, (m, lhs), rhs, &stage, (dst, par))
        }
    }

    /// `values`, or `len` zeros where there are none.
    fn or_zeros<T: Clone + Default>(values: Option<&[T]>, len: usize) -> Cow<'_, [T]> {
        values.map_or_else(|| Cow::Owned(vec![T::default(); len]), Cow::Borrowed)
    }

    /// Weight row `row` of a `u8p4vsx4` packed RHS, as f32.
    pub(crate) fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        let l = *rhs.layout();
        if l.format != FORMAT {
            return Err(crate::Error::bad_value("packed RHS format", l.format, format!("not an {FORMAT} packed RHS")));
        }
        if row >= l.rows {
            return Err(crate::Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        let nr = l.r;
        let stride = nr * l.k.next_multiple_of(KR);
        let block = &rhs.as_bytes()[(row / nr) * stride..(row / nr + 1) * stride];
        let r = row % nr;
        for (kk, o) in out.iter_mut().enumerate().take(l.k) {
            *o = block[(kk / KR) * nr * KR + r * KR + kk % KR] as f32;
        }
        Ok(())
    }

    /// The items of a family module: `entries()` (one [`Entry`] per kernel
    /// of the generated interface module `$iface`), `infos`, `Kernel` (a
    /// handle on one entry) with its methods, and `unpack_rhs_row`. `run`
    /// and `matmul` take the family's stage arguments `$arg: $ty` after the
    /// accumulator biases and write `$out` values; `$stage` builds the
    /// [`Stage`] from them.
    macro_rules! u8_kernel {
        (
            interface: $iface:ident,
            out: $out:ty,
            $(#[$run_doc:meta])*
            stage: ($($arg:ident: $ty:ty),*) => $stage:expr $(,)?
        ) => {
            fn entries() -> &'static [$crate::families::u8p_u8p::Entry] {
                static E: std::sync::OnceLock<Vec<$crate::families::u8p_u8p::Entry>> = std::sync::OnceLock::new();
                E.get_or_init(|| {
                    $crate::families::u8p_u8p::build_entries(FAMILY, kleidiai_sys::interfaces::$iface::API_KERNELS)
                })
            }

            $crate::families::engine::kernel_type!($crate::families::u8p_u8p::Entry);

            impl Kernel {
                /// The packed-RHS layout this kernel reads for `n x k` weights.
                pub fn rhs_layout(&self, n: usize, k: usize) -> Result<$crate::packed::PackedLayout> {
                    self.0.rhs_layout(n, k)
                }

                /// Packs N x K or K x N weights (one packed format for both).
                pub fn pack_rhs(&self, w: &U8Weights<'_>) -> Result<$crate::packed::PackedRhs> {
                    self.0.pack_rhs(w)
                }

                $crate::families::engine::lhs_methods!(
                    lhs: u8,
                    into: pack_lhs_into,
                    layout_doc: [
                        /// The packed-LHS layout this kernel reads for an `m x k` input.
                    ],
                    pack_doc: [
                        /// Packs an `m x k` LHS, rows `lhs_stride` bytes apart.
                    ],
                );

                $(#[$run_doc])*
                #[allow(clippy::too_many_arguments)]
                pub fn run(
                    &self,
                    lhs: &$crate::packed::PackedLhs,
                    rhs: &$crate::packed::PackedRhs,
                    bias: &AccBias<'_>,
                    $($arg: $ty,)*
                    dst: &mut [$out],
                    par: $crate::par::Parallelism,
                ) -> Result<()> {
                    let (m, n) = (lhs.layout().rows, rhs.layout().rows);
                    $crate::error::at_least(dst.len(), $crate::error::mul(m, n, "dst")?, "dst")?;
                    self.0.run(lhs, rhs, bias, $stage, dst, par)
                }

                /// Packs the dense `m x k` LHS and runs: the one-call form.
                #[allow(clippy::too_many_arguments)]
                pub fn matmul(
                    &self,
                    m: usize,
                    lhs: &[u8],
                    rhs: &$crate::packed::PackedRhs,
                    bias: &AccBias<'_>,
                    $($arg: $ty,)*
                    dst: &mut [$out],
                    par: $crate::par::Parallelism,
                ) -> Result<()> {
                    let k = rhs.layout().k;
                    let packed = self.pack_lhs(m, k, lhs, k, par)?;
                    self.run(&packed, rhs, bias, $($arg,)* dst, par)
                }
            }

            /// Weight row `row` of a packed RHS of this family, as f32 (exact).
            pub fn unpack_rhs_row(rhs: &$crate::packed::PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
                $crate::families::u8p_u8p::unpack_rhs_row(rhs, row, out)
            }
        };
    }
    pub(crate) use u8_kernel;
}

/// Conformance and error tests shared by both families: a family module
/// runs them with [`u8_tests!`](tests::u8_tests), which gives its own
/// `Kernel`, `reference` and output stage.
#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) mod tests {
    use super::{AccBias, Entry};
    use crate::cpu::Features;
    use crate::error::Result;
    use crate::formats::{Order, U8Weights};
    use crate::packed::{PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::info::KernelInfo;
    use crate::testing::{self, Rng, THREADS, tail_shapes};

    /// One case's inputs, random.
    pub(crate) struct Case {
        pub m: usize,
        pub n: usize,
        pub k: usize,
        pub order: Order,
        pub lhs: Vec<u8>,
        pub rhs: Vec<u8>,
        pub bias_m: Option<Vec<i32>>,
        pub bias_n: Option<Vec<i32>>,
        pub index: usize,
    }

    /// Tail-hitting cases for a kernel with the given packing blocks and
    /// steps; K from 1 to several groups of 4, odd K included.
    pub(crate) fn cases(mr: usize, m_step: usize, nr: usize, n_step: usize) -> Vec<Case> {
        let mut rng = Rng::new(0x08);
        let mut shapes = tail_shapes(mr, m_step, nr, n_step, &[1, 7, 64]);
        // Large values and a long K: the accumulator wraps past i32.
        shapes.push((2, 3, 40_000));
        shapes
            .into_iter()
            .enumerate()
            .map(|(index, (m, n, k))| {
                let big = k > 1000;
                let mut bytes = |len| if big { vec![255u8; len] } else { rng.bytes(len) };
                let (lhs, rhs) = (bytes(m * k), bytes(n * k));
                let bias = |rng: &mut Rng, len: usize| {
                    (0..len).map(|_| (rng.next_u64() as i32) >> if big { 0 } else { 8 }).collect::<Vec<i32>>()
                };
                Case {
                    m,
                    n,
                    k,
                    order: if index % 2 == 0 { Order::NxK } else { Order::KxN },
                    lhs,
                    rhs,
                    bias_m: (index % 3 != 1).then(|| bias(&mut rng, m)),
                    bias_n: (index % 4 != 2).then(|| bias(&mut rng, n)),
                    index,
                }
            })
            .collect()
    }

    /// A family's output value: compared and hashed as its 32 bits.
    pub(crate) trait Word: Copy + Default + core::fmt::Display {
        /// What a fresh output holds before the kernel writes it.
        const FILL: Self;
        fn bits(self) -> u32;
        fn from_bits(b: u32) -> Self;
        /// The output of an accumulator `v` under the plain stage.
        fn plain(v: i32) -> Self;
    }

    impl Word for i32 {
        const FILL: Self = i32::MIN;
        fn bits(self) -> u32 {
            self as u32
        }
        fn from_bits(b: u32) -> Self {
            b as i32
        }
        fn plain(v: i32) -> Self {
            v
        }
    }

    impl Word for f32 {
        const FILL: Self = f32::NAN;
        fn bits(self) -> u32 {
            self.to_bits()
        }
        fn from_bits(b: u32) -> Self {
            f32::from_bits(b)
        }
        fn plain(v: i32) -> Self {
            v as f32
        }
    }

    /// What differs between the families, as the shared tests drive it
    /// (filled in by [`u8_tests!`] with the family's own `Kernel` methods and
    /// `reference`; packing is the same [`Entry`] code for both).
    /// `Args` owns the stage arguments of one run (after the biases).
    #[allow(clippy::too_many_arguments)] // the families' own signatures
    pub(crate) trait Family {
        type Args;
        type Out: Word;
        const FAMILY: &'static str;
        fn kernel(name: &str) -> Option<Kernel>;
        fn select(m: usize, f: &Features) -> Option<Kernel>;
        /// A case's stage arguments, drawn from `rng`.
        fn draw(c: &Case, rng: &mut Rng) -> Self::Args;
        /// Scale 1, no output bias, no clamp.
        fn plain() -> Self::Args;
        /// Stage arguments every run and the reference reject (for `n`
        /// outputs per row), with what is wrong.
        fn bad(n: usize) -> Vec<(Self::Args, &'static str)>;
        fn reference(
            m: usize,
            lhs: &[u8],
            w: &U8Weights<'_>,
            bias: &AccBias<'_>,
            a: &Self::Args,
            dst: &mut [Self::Out],
        ) -> Result<()>;
        fn run(
            k: Kernel,
            lhs: &PackedLhs,
            rhs: &PackedRhs,
            bias: &AccBias<'_>,
            a: &Self::Args,
            dst: &mut [Self::Out],
            par: Parallelism,
        ) -> Result<()>;
        fn matmul(
            k: Kernel,
            m: usize,
            lhs: &[u8],
            rhs: &PackedRhs,
            bias: &AccBias<'_>,
            a: &Self::Args,
            dst: &mut [Self::Out],
            par: Parallelism,
        ) -> Result<()>;
    }

    /// The entry behind a family's kernel handle.
    pub(crate) type Kernel = &'static Entry;

    /// Runs `go(case, threads)` for every thread count and checks the
    /// results are bit-identical (as `u32` words).
    pub(crate) fn each_thread_count(
        case: &Case,
        mut go: impl FnMut(Parallelism, &mut PackedLhs) -> Result<Vec<u32>, String>,
    ) -> Result<Vec<u32>, String> {
        let mut first: Option<Vec<u32>> = None;
        for threads in THREADS {
            let mut scratch = PackedLhs::empty();
            let got = go(Parallelism::Rayon(threads), &mut scratch)?;
            match &first {
                None => first = Some(got),
                Some(f) if *f != got => {
                    return Err(format!("m={} n={} k={}: {threads} threads differ from 1", case.m, case.n, case.k));
                }
                _ => {}
            }
        }
        let first = first.expect("one thread count");
        crate::testing::hash_outputs(first.iter().copied());
        Ok(first)
    }

    /// Unpacked rows equal the weights.
    fn check_unpack(info: &KernelInfo, case: &Case, packed: &PackedRhs) -> Result<(), String> {
        let w = U8Weights { n: case.n, k: case.k, order: case.order, data: &case.rhs };
        let mut row = vec![0f32; case.k];
        for r in [0, case.n / 2, case.n - 1] {
            super::unpack_rhs_row(packed, r, &mut row).map_err(|e| e.to_string())?;
            for (kk, v) in row.iter().enumerate() {
                if *v != w.value_unchecked(r, kk) as f32 {
                    return Err(format!("{}: unpack_rhs_row({r}) differs at k={kk}", info.name));
                }
            }
        }
        Ok(())
    }

    /// Every kernel against the reference, bit for bit, on every thread
    /// count; then the unpacked rows.
    pub(crate) fn conformance<F: Family>() {
        testing::conformance(F::FAMILY, |info| {
            let kernel = F::kernel(info.name).unwrap();
            let (t, _, _) = kernel.tiles().map_err(|e| (0, e.to_string()))?;
            let mut rng = Rng::new(0xf3);
            let mut count = 0;
            for c in cases(t.mr, t.m_step, t.nr, t.n_step) {
                let w = U8Weights { n: c.n, k: c.k, order: c.order, data: &c.rhs };
                let bias = AccBias { per_row: c.bias_m.as_deref(), per_col: c.bias_n.as_deref() };
                let args = F::draw(&c, &mut rng);
                let mut want = vec![F::Out::default(); c.m * c.n];
                F::reference(c.m, &c.lhs, &w, &bias, &args, &mut want).map_err(|e| (count, e.to_string()))?;
                let packed = kernel.pack_rhs(&w).map_err(|e| (count, e.to_string()))?;
                let got = each_thread_count(&c, |par, scratch| {
                    let mut dst = vec![F::Out::FILL; c.m * c.n];
                    kernel.pack_lhs_into(c.m, c.k, &c.lhs, c.k, par, scratch).map_err(|e| e.to_string())?;
                    F::run(kernel, scratch, &packed, &bias, &args, &mut dst, par).map_err(|e| e.to_string())?;
                    Ok(dst.iter().map(|x| x.bits()).collect())
                })
                .map_err(|e| (count, e))?;
                if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i].bits()) {
                    let g = F::Out::from_bits(got[i]);
                    return Err((count, format!("m={} n={} k={}: element {i}: {g} != {}", c.m, c.n, c.k, want[i])));
                }
                check_unpack(info, &c, &packed).map_err(|e| (count, e))?;
                count += 1;
            }
            Ok((count, 0.0))
        });
    }

    /// [`Entry::pack_lhs_into`], allocating.
    fn pack_lhs(kern: Kernel, m: usize, k: usize, lhs: &[u8], stride: usize, par: Parallelism) -> Result<PackedLhs> {
        let mut out = PackedLhs::empty();
        kern.pack_lhs_into(m, k, lhs, stride, par, &mut out)?;
        Ok(out)
    }

    /// The kernel selected for `m` rows (if the CPU runs one), 3 x 8 weights
    /// of ones in `order`, and their packing.
    fn small<F: Family>(m: usize, order: Order) -> Option<(Kernel, U8Weights<'static>, PackedRhs)> {
        let kern = F::select(m, &Features::current())?;
        let w = U8Weights { n: 3, k: 8, order, data: &[1; 24] };
        let packed = kern.pack_rhs(&w).unwrap();
        Some((kern, w, packed))
    }

    /// A packed LHS of another depth is rejected; one of the right depth
    /// runs.
    pub(crate) fn mixing_layouts<F: Family>() {
        let (kern, _, packed) = crate::testing::or_skip!(small::<F>(4, Order::NxK));
        let seq = Parallelism::Sequential;
        let lhs = pack_lhs(kern, 2, 12, &[1; 24], 12, seq).unwrap();
        let mut dst = [F::Out::default(); 6];
        let r = F::run(kern, &lhs, &packed, &AccBias::default(), &F::plain(), &mut dst, seq);
        assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{r:?}");
        // A packed LHS is not a packed RHS of the other family's format
        // unless the bytes agree: the same kernel accepts its own.
        let lhs = pack_lhs(kern, 2, 8, &[1; 16], 8, seq).unwrap();
        F::run(kern, &lhs, &packed, &AccBias::default(), &F::plain(), &mut dst, seq).unwrap();
        assert_eq!(dst.map(Word::bits), [F::Out::plain(8).bits(); 6]);
    }

    /// Short or empty inputs, bad stage arguments and overflowing shapes are
    /// errors; a good call still runs afterwards.
    pub(crate) fn bad_input<F: Family>() {
        let (kern, w, packed) = crate::testing::or_skip!(small::<F>(1, Order::KxN));
        let seq = Parallelism::Sequential;
        let none = AccBias::default();
        let plain = F::plain();
        let mut dst = [F::Out::default(); 3];
        let mm = |m, lhs: &[u8], bias: &AccBias<'_>, a: &F::Args, dst: &mut [F::Out]| {
            F::matmul(kern, m, lhs, &packed, bias, a, dst, seq)
        };
        assert!(mm(1, &[0; 7], &none, &plain, &mut dst).is_err(), "short lhs");
        assert!(mm(1, &[0; 8], &none, &plain, &mut dst[..2]).is_err(), "short dst");
        assert!(mm(0, &[], &none, &plain, &mut dst).is_err(), "m = 0");
        let short = AccBias { per_col: Some(&[1, 2]), ..none };
        assert!(mm(1, &[0; 8], &short, &plain, &mut dst).is_err(), "short bias");
        for (bad, what) in F::bad(w.n) {
            assert!(mm(1, &[0; 8], &none, &bad, &mut dst).is_err(), "{what}");
            let mut out = [F::Out::default(); 3];
            assert!(F::reference(1, &[0; 8], &w, &none, &bad, &mut out).is_err(), "reference: {what}");
        }
        assert!(kern.pack_rhs(&U8Weights { data: &[1; 23], ..w }).is_err(), "short weights");
        assert!(kern.pack_rhs(&U8Weights { n: 0, ..w }).is_err(), "n = 0");
        assert!(kern.pack_rhs(&U8Weights { n: usize::MAX, ..w }).is_err(), "overflow");
        assert!(pack_lhs(kern, usize::MAX, 8, &[0; 8], 8, seq).is_err(), "overflowing m");
        assert!(pack_lhs(kern, 1, 8, &[0; 8], 7, seq).is_err(), "stride < k");
        let mut r = [0f32; 8];
        assert!(super::unpack_rhs_row(&packed, 3, &mut r).is_err());
        mm(1, &[1; 8], &none, &plain, &mut dst).unwrap();
        assert_eq!(dst.map(Word::bits), [F::Out::plain(8).bits(); 3]);
    }

    /// The tests of a family module (which has `FAMILY`, `Kernel`,
    /// `unpack_rhs_row` and `reference`): `$args` owns a run's stage
    /// arguments, `draw` makes a case's from the test RNG, `plain` and `bad`
    /// are as in [`Family`], and `pass` turns `&$args` into the arguments
    /// `Kernel::run` and `reference` take after the biases.
    macro_rules! u8_tests {
        (
            out: $out:ty,
            args: $args:ty,
            draw: |$c:pat_param, $rng:pat_param| $draw:expr,
            plain: $plain:expr,
            bad: |$n:pat_param| $bad:expr,
            pass: |$a:ident| ($($pass:expr),* $(,)?) $(,)?
        ) => {
            use $crate::families::u8p_u8p::tests as t;

            /// This family, for the shared tests.
            struct Fam;

            impl t::Family for Fam {
                type Args = $args;
                type Out = $out;
                const FAMILY: &'static str = FAMILY;
                fn kernel(name: &str) -> Option<t::Kernel> {
                    Kernel::by_name(name).map(|k| k.0)
                }
                fn select(m: usize, f: &$crate::cpu::Features) -> Option<t::Kernel> {
                    Kernel::select(m, f).map(|k| k.0)
                }
                fn draw($c: &t::Case, $rng: &mut $crate::testing::Rng) -> $args {
                    $draw
                }
                fn plain() -> $args {
                    $plain
                }
                fn bad($n: usize) -> Vec<($args, &'static str)> {
                    $bad
                }
                fn reference(
                    m: usize,
                    lhs: &[u8],
                    w: &U8Weights<'_>,
                    bias: &AccBias<'_>,
                    $a: &$args,
                    dst: &mut [$out],
                ) -> Result<()> {
                    reference(m, lhs, w, bias, $($pass,)* dst)
                }
                fn run(
                    k: t::Kernel,
                    lhs: &$crate::packed::PackedLhs,
                    rhs: &$crate::packed::PackedRhs,
                    bias: &AccBias<'_>,
                    $a: &$args,
                    dst: &mut [$out],
                    par: $crate::par::Parallelism,
                ) -> Result<()> {
                    Kernel(k).run(lhs, rhs, bias, $($pass,)* dst, par)
                }
                fn matmul(
                    k: t::Kernel,
                    m: usize,
                    lhs: &[u8],
                    rhs: &$crate::packed::PackedRhs,
                    bias: &AccBias<'_>,
                    $a: &$args,
                    dst: &mut [$out],
                    par: $crate::par::Parallelism,
                ) -> Result<()> {
                    Kernel(k).matmul(m, lhs, rhs, bias, $($pass,)* dst, par)
                }
            }

            #[test]
            fn conformance() {
                t::conformance::<Fam>();
            }

            #[test]
            fn mixing_layouts_is_an_error() {
                t::mixing_layouts::<Fam>();
            }

            #[test]
            fn bad_input_is_an_error() {
                t::bad_input::<Fam>();
            }
        };
    }
    pub(crate) use u8_tests;
}
