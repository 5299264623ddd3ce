//! Multiplying: which slot and kernel serve `m` rows, the checks of a
//! call, and [`PackedWeights::matmul`].

use super::*;

impl PackedWeights {
    /// The slot and kernel that serve `m` rows with the current features.
    pub(super) fn pick(&self, m: usize, f: &Features) -> Option<(&Slot, &dyn Backend)> {
        let (i, gemv) = self.pick_index(m, f)?;
        let s = &self.slots[i];
        Some((s, self.backend(i, gemv)?))
    }

    /// The backend of slot `i`: its GEMV kernel or its main one.
    pub(super) fn backend(&self, i: usize, gemv: bool) -> Option<&dyn Backend> {
        let s = self.slots.get(i)?;
        if gemv { s.gemv.as_deref() } else { Some(&*s.gemm) }
    }

    /// [`pick`](Self::pick) as (slot index, whether its GEMV kernel).
    pub(super) fn pick_index(&self, m: usize, f: &Features) -> Option<(usize, bool)> {
        let runs = |b: &dyn Backend| b.info().supported(f).is_ok();
        if m == 1 {
            // A layout of its own for a GEMV kernel (a faster one packed on
            // request) first, then a GEMV sharing a GEMM's layout.
            for (i, s) in self.slots.iter().enumerate() {
                if s.gemm.info().tile == TileKind::Gemv && runs(&*s.gemm) {
                    return Some((i, false));
                }
            }
            for (i, s) in self.slots.iter().enumerate() {
                if s.gemv.as_deref().is_some_and(runs) {
                    return Some((i, true));
                }
            }
        }
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| runs(&*s.gemm))
            .max_by_key(|(_, s)| u32::from(s.gemm.info().tile == TileKind::Gemm) * 1000 + s.gemm.info().rank)
            .map(|(i, _)| (i, false))
    }

    /// What every matmul form checks first: rows, and activations of the
    /// type the weights were packed for.
    pub(super) fn check_call(&self, m: usize, x: &Activation<'_>, y: &ActivationMut<'_>) -> Result<()> {
        crate::error::nonzero(m, "m")?;
        if x.dtype() != self.activation || y.dtype() != self.activation {
            let (what, got) =
                if x.dtype() != self.activation { ("activations", x.dtype()) } else { ("outputs", y.dtype()) };
            return Err(Error::ElementType { what, expected: self.activation.name(), got: got.name() });
        }
        Ok(())
    }

    /// The hybrid mode (ggml's, for f32 activations): the first slot's SME
    /// kernel on the first columns and the second slot's non-SME kernel on
    /// the rest, both at once, with `sme_threads` workers for SME and
    /// `threads - sme_threads` for the other. The split is a multiple of
    /// both layouts' row blocks (so of both kernels' column steps) and
    /// proportional to the workers: fixed by `(n, threads, sme_threads)`, so
    /// runs repeat bit for bit. Ok(false) when it does not apply (one slot,
    /// no SME slot, too few threads, f16 or bf16 activations, or a layout
    /// that cannot be cut). No non-finite policy applies (as with
    /// [`NonFinite::Kernel`]); `x` holds `m x k` values, `y` `m x n`, and
    /// `scratch` is one [`Scratch`] per kernel.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_hybrid(
        &self,
        m: usize,
        x: &[f32],
        y: &mut [f32],
        clamp: Clamp,
        threads: usize,
        sme_threads: usize,
        scratch: &mut [Scratch; 2],
    ) -> Result<bool> {
        if self.activation != DType::F32 || self.slots.len() < 2 || threads <= sme_threads || sme_threads == 0 {
            return Ok(false);
        }
        let f = Features::current();
        fn kernel<'s>(s: &'s Slot, m: usize, f: &Features) -> Option<&'s dyn Backend> {
            let k = if m == 1 { s.gemv.as_deref().unwrap_or(&*s.gemm) } else { &*s.gemm };
            k.info().supported(f).is_ok().then_some(k)
        }
        let (s0, s1) = (&self.slots[0], &self.slots[1]);
        let (Some(k0), Some(k1)) = (kernel(s0, m, &f), kernel(s1, m, &f)) else { return Ok(false) };
        if !k0.info().is_sme() || k1.info().is_sme() {
            return Ok(false);
        }
        let (n, k) = (self.n, self.k);
        crate::error::at_least(x.len(), crate::error::mul(m, k, "x")?, "x")?;
        crate::error::at_least(y.len(), crate::error::mul(m, n, "y")?, "y")?;
        let (r0, r1) = (s0.rhs.layout().r.max(1), s1.rhs.layout().r.max(1));
        let step = r0 / gcd(r0, r1) * r1;
        let n_sme = (n * sme_threads / threads) / step * step;
        if n_sme == 0 || n_sme >= n {
            return Ok(false);
        }
        let (Some(v0), Some(v1)) = (s0.rhs.row_view(0..n_sme), s1.rhs.row_view(n_sme..n)) else { return Ok(false) };
        let (mut y0, mut y1) = (vec![0f32; m * n_sme], vec![0f32; m * (n - n_sme)]);
        let [sc0, sc1] = scratch;
        let l0 = sc0.work.get_or_insert_with(Work::default);
        let l1 = sc1.work.get_or_insert_with(Work::default);
        let x = &x[..m * k];
        let (a, b) = rayon::join(
            || {
                k0.run(
                    m,
                    Activation::F32(x),
                    &v0,
                    ActivationMut::F32(&mut y0),
                    clamp,
                    Parallelism::Rayon(sme_threads),
                    l0,
                )
            },
            || {
                let p = Parallelism::Rayon(threads - sme_threads);
                k1.run(m, Activation::F32(x), &v1, ActivationMut::F32(&mut y1), clamp, p, l1)
            },
        );
        a?;
        b?;
        for i in 0..m {
            y[i * n..i * n + n_sme].copy_from_slice(&y0[i * n_sme..(i + 1) * n_sme]);
            y[i * n + n_sme..(i + 1) * n].copy_from_slice(&y1[i * (n - n_sme)..(i + 1) * (n - n_sme)]);
        }
        Ok(true)
    }

    /// `matmul` with the kernel of slot `slot` (for tests of the slots).
    #[cfg(test)]
    pub(crate) fn matmul_slot(
        &self,
        slot: usize,
        m: usize,
        x: &[f32],
        y: &mut [f32],
        scratch: &mut Scratch,
    ) -> Result<()> {
        let s = &self.slots[slot];
        let k = if m == 1 { s.gemv.as_deref().unwrap_or(&*s.gemm) } else { &*s.gemm };
        let work = scratch.work.get_or_insert_with(Work::default);
        k.run(m, Activation::F32(x), &s.rhs, ActivationMut::F32(y), Clamp::NONE, Parallelism::Sequential, work)
    }

    /// The kernel that would serve `m` rows now (None: the reference).
    pub fn kernel_for(&self, m: usize) -> Option<&'static str> {
        self.pick(m, &Features::current()).map(|(_, b)| b.info().name)
    }

    /// `y (m x n) = clamp(x (m x k) · wᵀ + bias)`.
    ///
    /// # Non-finite inputs
    ///
    /// The same on every kernel and the portable reference: `y[i][j]` is
    /// NaN when row `i` of `x` holds a NaN or an infinity, or when output
    /// channel `j`'s weights do (values, scales, block offsets or bias, as
    /// given to [`pack`](Self::pack)); the other elements are what finite
    /// inputs give. NaN, not ±inf, even where plain float math would give an
    /// infinity, and whatever `clamp` says. Costs a scan of `x` per call
    /// (`m x k` values, about 0.3 aarch64 instructions each, against the
    /// kernel's `m x n x k` products: a share that falls with `n` and is
    /// largest on the fastest kernels, SME2; the README has the measured
    /// table); the weights are scanned once, by `pack`, and the channels
    /// kept (also in saved files). [`set_non_finite`](Self::set_non_finite)
    /// chooses an error instead, or the kernel's own behaviour without the
    /// scan ([`NonFinite`]).
    ///
    /// Finite inputs whose result overflows f32 give what the clamp makes
    /// of it: with [`Clamp::NONE`], whose range is `[f32::MIN, f32::MAX]`,
    /// ±`f32::MAX` (not ±inf) on the kernels, which clamp in f32.
    ///
    /// ```
    /// use kleidiai::prelude::*;
    /// let (n, k) = (4, 32);
    /// let data = vec![0x11u8; n * k / 2];
    /// let w = Weights::int4_per_channel(n, k, &data, &[0.25, 0.25, f32::NAN, 0.25])?;
    /// let packed = PackedWeights::pack(&w, &PackOptions::default())?;
    /// let mut x = vec![0.5f32; 2 * k];
    /// x[k + 3] = f32::INFINITY; // row 1
    /// let mut y = vec![0f32; 2 * n];
    /// packed.matmul(2, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE,
    ///               Parallelism::Sequential, &mut Scratch::default())?;
    /// assert!(y[0].is_finite() && y[2].is_nan()); // row 0: channel 2 only
    /// assert!(y[n..].iter().all(|v| v.is_nan())); // row 1: all
    /// # Ok::<(), kleidiai::Error>(())
    /// ```
    #[inline]
    pub fn matmul(
        &self,
        m: usize,
        x: Activation<'_>,
        mut y: ActivationMut<'_>,
        clamp: Clamp,
        par: Parallelism,
        scratch: &mut Scratch,
    ) -> Result<()> {
        if self.steady(m, &x, &mut y, clamp, par, scratch) {
            return Ok(());
        }
        self.matmul_checked(m, x, y, clamp, par, scratch)
    }

    /// [`matmul`](Self::matmul) with every check (its first call, and any
    /// call the steady state does not take).
    #[inline(never)]
    fn matmul_checked(
        &self,
        m: usize,
        x: Activation<'_>,
        mut y: ActivationMut<'_>,
        clamp: Clamp,
        par: Parallelism,
        scratch: &mut Scratch,
    ) -> Result<()> {
        match self.policy {
            NonFinite::Kernel => return self.matmul_kernels(m, x, y, clamp, par, scratch, false),
            NonFinite::Error => {
                if let Some(&j) = self.non_finite_channels.first() {
                    return Err(Error::NonFinite { what: "output channel", index: j, at: None });
                }
                if let Some(&i) = non_finite::bad_rows(m, self.k, &x).as_deref().and_then(|r| r.first()) {
                    let at = non_finite::first_in_row(&x, i, self.k);
                    return Err(Error::NonFinite { what: "activation row", index: i, at });
                }
                return self.matmul_kernels(m, x, y, clamp, par, scratch, true);
            }
            NonFinite::Propagate => {}
        }
        let Some(rows) = non_finite::bad_rows(m, self.k, &x) else {
            self.matmul_kernels(m, x, y.reborrow(), clamp, par, scratch, true)?;
            if !self.non_finite_channels.is_empty() {
                non_finite::fill(m, self.n, &mut y, &[], &self.non_finite_channels);
            }
            return Ok(());
        };
        // Rare: the kernels see those rows zeroed (they disagree on
        // non-finite values, and some packers refuse them).
        let zeroed = non_finite::Zeroed::new(&x, m, self.k, &rows);
        self.matmul_kernels(m, zeroed.as_activation(), y.reborrow(), clamp, par, scratch, true)?;
        non_finite::fill(m, self.n, &mut y, &rows, &self.non_finite_channels);
        Ok(())
    }

    /// Sets what [`matmul`](Self::matmul) does with a NaN or an infinity
    /// among its inputs ([`NonFinite`]; default [`NonFinite::Propagate`]).
    pub fn set_non_finite(&mut self, policy: NonFinite) {
        self.policy = policy;
    }

    /// What [`matmul`](Self::matmul) does with a NaN or an infinity among
    /// its inputs.
    pub fn non_finite(&self) -> NonFinite {
        self.policy
    }

    /// The output channels whose weights (values, scales, offsets or bias,
    /// as packed) hold a NaN or an infinity, ascending (usually none).
    pub fn non_finite_channels(&self) -> &[usize] {
        &self.non_finite_channels
    }

    /// [`matmul`](Self::matmul) without its non-finite policy: what the
    /// kernel gives (ggml's path, which does not scan either).
    /// `finite`: the caller scanned `x` and it holds only finite values
    /// (the asymmetric int4 packers need them; unscanned activations take
    /// their checked path, which checks).
    #[allow(clippy::too_many_arguments)] // matmul's operands plus the scan's verdict
    pub(crate) fn matmul_kernels(
        &self,
        m: usize,
        x: Activation<'_>,
        mut y: ActivationMut<'_>,
        clamp: Clamp,
        par: Parallelism,
        scratch: &mut Scratch,
        finite: bool,
    ) -> Result<()> {
        self.check_call(m, &x, &y)?;
        let mut f = Features::current();
        if let Some(r) = self.matmul_planned(m, x, y.reborrow(), clamp, par, &f, scratch, finite) {
            return r;
        }
        while let Some((slot, b)) = self.pick(m, &f) {
            let work = scratch.work.get_or_insert_with(Work::default);
            match b.run(m, x, &slot.rhs, y.reborrow(), clamp, par, work) {
                // A tier switched off (cpu::disable) between the choice and
                // the kernel's own check, which refuses before any FFI call
                // and before writing `y`: choose again with what is left
                // (tiers only ever go away, so this ends).
                Err(Error::Unsupported { .. }) if Features::current() != f => f = Features::current(),
                r => return r,
            }
        }
        let work = scratch.work.get_or_insert_with(Work::default);
        match self.run_reference(m, x, y, clamp, work) {
            Some(r) => r,
            None => Err(Error::Unsupported {
                kernel: self.slots.first().map_or("(none)", |s| s.gemm.info().name),
                why: "no packed layout runs with the current CPU features and no reference copy was kept \
                      (PackOptions::keep_reference, or PackOptions::non_sme_layout for a layout without SME)"
                    .into(),
            }),
        }
    }

    /// Weight row `row` as f32 (`get_rows`), from the first packed layout
    /// (or the reference copy).
    pub fn row(&self, row: usize, out: &mut [f32]) -> Result<()> {
        if row >= self.n {
            return Err(Error::out_of_range("row", row, self.n));
        }
        crate::error::at_least(out.len(), self.k, "row output")?;
        if let Some(s) = self.slots.first() {
            return s.gemm.unpack_row(&s.rhs, row, out);
        }
        match self.reference.as_ref() {
            Some(r) => {
                // The reference copy's rows, dequantised: run the reference
                // on a one-hot LHS row would cost n*k; dequantise instead.
                let row_vals = dequantized_row(&r.as_ref(), row)?;
                out[..self.k].copy_from_slice(&row_vals);
                Ok(())
            }
            None => Err(Error::InvalidArgument("no packed layout and no reference copy".into())),
        }
    }
}
