//! A resolved kernel on a thread: the proof that this thread runs it, the
//! checks of a call's operands, and the checked and unchecked packing of LHS
//! rows and column runs, each a call into the engine's drivers.

use super::*;

impl PartKernel {
    /// Proof that the calling thread runs this kernel now: its CPU
    /// features are there and its vector length is the one the weights
    /// were packed for (Linux lets a thread change its own). Checked once
    /// per operation; [`pack_rows`](Self::pack_rows) and
    /// [`run_cols`](Self::run_cols) take it.
    pub fn on_this_thread(&self) -> Result<OnThread<'_>> {
        let f = Features::current();
        self.info.supported(&f).map_err(|why| Error::Unsupported { kernel: self.info.name, why })?;
        let live = crate::families::engine::live_vector_bytes(self.info);
        if self.vector_bytes != 0 && live != self.vector_bytes {
            return Err(Error::Unsupported {
                kernel: self.info.name,
                why: format!(
                    "this thread's vector length is {} bits, the weights were packed for {}",
                    live * 8,
                    self.vector_bytes * 8
                ),
            });
        }
        Ok(OnThread { kernel: self, _thread: PhantomData })
    }

    /// [`on_this_thread`](Self::on_this_thread) for a thread on which it
    /// passed before with the features of now (the caller compares them):
    /// only the vector length, which a thread can change, is read again.
    /// Features switched off since ([`crate::cpu::disable`]) are not seen
    /// (the CPU still has them: the kernel still runs correctly, against
    /// the switch's intent), which is why the caller compares them.
    #[inline]
    pub fn still_on_this_thread(&self) -> Result<OnThread<'_>> {
        if self.vector_bytes != 0 {
            // live_vector_bytes, from the kept kind of vector length.
            #[cfg(target_arch = "aarch64")]
            let live = if self.streaming { crate::cpu::rdsvl_bytes() } else { crate::cpu::rdvl_bytes() };
            #[cfg(not(target_arch = "aarch64"))]
            let live = crate::families::engine::live_vector_bytes(self.info);
            if live != self.vector_bytes {
                return self.on_this_thread(); // the full check, and its message
            }
        }
        Ok(OnThread { kernel: self, _thread: PhantomData })
    }

    /// Bytes of the packed LHS of `m` rows (0 for `Direct` kernels).
    pub fn lhs_size(&self, m: usize) -> usize {
        #[cfg(target_arch = "aarch64")]
        {
            // A packer whose parameters passed `check`.
            ffi::lhs_size(&self.gate, self.packer, m.max(1), self.k, self.lhs_bl, &self.t)
        }
        #[cfg(not(target_arch = "aarch64"))]
        {
            let _ = m;
            0
        }
    }

    /// Byte offset of row `row` (a multiple of `mr`) in the packed LHS.
    pub fn lhs_offset(&self, row: usize) -> usize {
        #[cfg(target_arch = "aarch64")]
        {
            // A packer whose parameters passed `check`.
            ffi::lhs_offset(&self.gate, self.packer, row, self.k, self.lhs_bl, &self.t)
        }
        #[cfg(not(target_arch = "aarch64"))]
        {
            let _ = row;
            0
        }
    }

    /// Packs `h` rows of f32 (`src`, rows `stride` bytes apart, `k` values
    /// each) into `out`, at least [`lhs_size`](Self::lhs_size)`(h)` bytes:
    /// the part of a packed LHS from the offset of its first row (a
    /// multiple of `mr`) on.
    pub fn pack_rows(&self, ok: &OnThread<'_>, h: usize, src: &[u8], stride: usize, out: &mut [u8]) -> Result<()> {
        if self.packer == LhsPacker::Direct {
            return Ok(());
        }
        if !core::ptr::eq(ok.kernel, self) {
            return Err(Error::bad_value(
                "thread check",
                "OnThread",
                format!("made for another kernel than {}", self.info.name),
            ));
        }
        self.check_pack(h, (src.as_ptr(), src.len()), stride, out.len(), self.lhs_size(h))?;
        #[cfg(target_arch = "aarch64")]
        if let Some(p) = ffi::lhs_packer(self.packer) {
            // The CPU runs the packer's kernel at its vector length (`ok`,
            // for this kernel; `gate` its features); the packer's
            // parameters passed `check`.
            let t = &self.t;
            p.pack_bytes(&self.gate, (h, self.k, self.lhs_bl), (t.mr, t.kr, t.sr), src, stride, out)?;
        }
        Ok(())
    }

    /// [`pack_rows`](Self::pack_rows)' checks of its operands: `h` rows of
    /// `k` f32 at `src` (`src.1` bytes readable), `stride` bytes apart, into
    /// `out_len` bytes; `size_h` must be [`lhs_size`](Self::lhs_size)`(h)`
    /// (callers that know it pass it, others compute it; with another value
    /// the check says nothing, and the `unsafe` calls that rely on it are
    /// unsound).
    ///
    /// These are the checks [`pack_rows_unchecked`](Self::pack_rows_unchecked)
    /// relies on.
    pub fn check_pack(
        &self,
        h: usize,
        src: (*const u8, usize),
        stride: usize,
        out_len: usize,
        size_h: usize,
    ) -> Result<()> {
        debug_assert_eq!(size_h, self.lhs_size(h));
        let k = self.k;
        crate::error::nonzero(h, "LHS rows")?;
        if (src.0 as usize) % 4 != 0 {
            return Err(Error::Misaligned { what: "LHS rows", align: 4 });
        }
        if stride % 4 != 0 || stride < k * 4 {
            return Err(Error::Stride { what: "LHS rows", stride, why: format!("do not hold {k} f32 values each") });
        }
        if !self.packer.takes_stride() && stride != k * 4 && h > 1 {
            let why = format!("but {} needs them k floats ({} bytes) apart", self.packer.name(), k * 4);
            return Err(Error::Stride { what: "LHS rows", stride, why });
        }
        let rows_len = (h - 1).checked_mul(stride).and_then(|v| v.checked_add(k * 4));
        crate::error::at_least_bytes(src.1, rows_len.ok_or_else(|| Error::Overflow("LHS rows".into()))?, "LHS rows")?;
        crate::error::at_least_bytes(out_len, size_h, "packed LHS part")
    }

    /// The checks of [`run_cols`](Self::run_cols) that do not depend on the
    /// columns: the packed weights' length, and the LHS (packed: its size
    /// for `m` rows; read directly: `m` aligned f32 rows `lhs_stride` bytes
    /// apart).
    ///
    /// These are the checks [`run_cols_unchecked`](Self::run_cols_unchecked)
    /// relies on.
    pub fn check_operands(&self, m: usize, lhs: (*const u8, usize), lhs_stride: usize, rhs_len: usize) -> Result<()> {
        let size = if self.packer == LhsPacker::Direct { 0 } else { self.lhs_size(m) };
        self.check_operands_sized(m, lhs, lhs_stride, rhs_len, size)
    }

    /// [`check_operands`](Self::check_operands) for a caller that knows
    /// `lhs_size_m`, which must be [`lhs_size`](Self::lhs_size)`(m)` (0 for
    /// kernels that [read the LHS directly](Self::reads_lhs_directly);
    /// with another value the check says nothing, and the `unsafe` calls
    /// that rely on it are unsound).
    pub fn check_operands_sized(
        &self,
        m: usize,
        lhs: (*const u8, usize),
        lhs_stride: usize,
        rhs_len: usize,
        lhs_size_m: usize,
    ) -> Result<()> {
        debug_assert_eq!(lhs_size_m, if self.packer == LhsPacker::Direct { 0 } else { self.lhs_size(m) });
        let k = self.k;
        if m == 0 {
            return Err(Error::ZeroDimension { what: "m" });
        }
        if rhs_len != self.rhs_len {
            return Err(Error::ByteLength {
                what: "packed weights of the resolved kernel",
                got: rhs_len,
                need: self.rhs_len,
            });
        }
        if self.packer == LhsPacker::Direct {
            let len = (m - 1).checked_mul(lhs_stride).and_then(|v| v.checked_add(k * 4));
            if (lhs.0 as usize) % 4 != 0 {
                return Err(Error::Misaligned { what: "LHS", align: 4 });
            }
            if lhs_stride % 4 != 0 || (m > 1 && lhs_stride < k * 4) {
                let why = format!("do not hold {k} f32 values each");
                return Err(Error::Stride { what: "LHS rows", stride: lhs_stride, why });
            }
            crate::error::at_least_bytes(lhs.1, len.ok_or_else(|| Error::Overflow("LHS".into()))?, "LHS")?;
        } else {
            crate::error::at_least_bytes(lhs.1, lhs_size_m, "packed LHS")?;
        }
        Ok(())
    }

    /// [`pack_rows`](Self::pack_rows) without its checks: the steady-state
    /// path of a call whose arguments passed them before.
    ///
    /// # Safety
    /// [`check_pack`](Self::check_pack)`(h, (src, src_len), stride,
    /// out_len, self.lhs_size(h))` returned `Ok` (with `size_h` the true
    /// [`lhs_size`](Self::lhs_size)`(h)`: the checks of
    /// [`pack_rows`](Self::pack_rows) for slices at `src` and `out` of those
    /// lengths), and since then:
    /// - the `src_len` bytes at `src` are valid for reads and the `out_len`
    ///   bytes at `out` valid for writes that no one else reads or writes
    ///   during the call;
    /// - `ok` was made by [`on_this_thread`](Self::on_this_thread) (or
    ///   [`still_on_this_thread`](Self::still_on_this_thread)) of this very
    ///   kernel, on the calling thread (it cannot leave it), and the thread
    ///   did not change its vector length since.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub unsafe fn pack_rows_unchecked(&self, ok: &OnThread<'_>, h: usize, src: *const u8, stride: usize, out: *mut u8) {
        debug_assert!(core::ptr::eq(ok.kernel, self));
        let _ = ok;
        if self.packer == LhsPacker::Direct {
            return;
        }
        #[cfg(target_arch = "aarch64")]
        if let Some(p) = ffi::lhs_packer(self.packer) {
            let t = &self.t;
            // SAFETY: the caller's guarantee: the same arguments passed
            // `pack_rows`' checks, which are `pack_bytes`' (`src` holds `h`
            // rows of k f32 `stride` bytes apart, 4-byte aligned, `out` the
            // bytes h rows pack to), on a thread that runs the packer's
            // kernel at its vector length; the packer's parameters passed
            // `check`.
            unsafe { p.run(h, self.k, self.lhs_bl, (t.mr, t.kr, t.sr), 0, src, stride, out) };
        }
        #[cfg(not(target_arch = "aarch64"))]
        let _ = (h, src, stride, out);
    }

    /// [`run_cols`](Self::run_cols) without its checks: the steady-state
    /// path of a call whose operands passed them before.
    ///
    /// # Safety
    /// [`check_operands`](Self::check_operands)`(m, (lhs, lhs_len),
    /// lhs_stride, rhs_len)` returned `Ok` (or
    /// [`check_operands_sized`](Self::check_operands_sized) with the true
    /// [`lhs_size`](Self::lhs_size)`(m)`), and since then:
    /// - the `lhs_len` bytes at `lhs` and the `rhs_len` bytes at `rhs` are
    ///   valid for reads and hold the packed LHS of `m` rows (or for
    ///   [direct](Self::reads_lhs_directly) kernels the f32 rows) and the
    ///   packed weights this kernel was resolved for;
    /// - `cols` is non-empty, within [`n`](Self::n), and starts at a
    ///   multiple of [`n_step`](Self::n_step);
    /// - `out` is an `m x cols.len()` block of f32 rows `row_stride` bytes
    ///   apart that no one else reads or writes during the call, as
    ///   [`OutputBlock::from_raw_parts`] requires (and checks);
    /// - `ok` was made by [`on_this_thread`](Self::on_this_thread) (or
    ///   [`still_on_this_thread`](Self::still_on_this_thread)) of this very
    ///   kernel, on the calling thread, and the thread did not change its
    ///   vector length since.
    #[allow(clippy::too_many_arguments)] // the kernel's operands
    #[inline(always)]
    pub unsafe fn run_cols_unchecked(
        &self,
        ok: &OnThread<'_>,
        m: usize,
        cols: Range<usize>,
        lhs: *const u8,
        lhs_stride: usize,
        rhs: *const u8,
        out: *mut f32,
        row_stride: usize,
    ) {
        debug_assert!(core::ptr::eq(ok.kernel, self));
        let _ = ok;
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the caller's guarantees are run_cols' checks, passed
        // (the kernel's own functions, resolved for these weights).
        unsafe {
            self.f.run((m, self.k, self.bl), cols, (lhs, lhs_stride), rhs, (out, row_stride))
        };
        #[cfg(not(target_arch = "aarch64"))]
        let _ = (m, cols, lhs, lhs_stride, rhs, out, row_stride);
    }

    /// Computes columns `cols` (`cols.start` a multiple of `n_step`) of all
    /// `m` output rows into `out` (`m x cols.len()`). `lhs` is the packed
    /// LHS of `m` rows, or for `Direct` kernels the f32 rows themselves,
    /// `lhs_stride` bytes apart.
    #[allow(clippy::too_many_arguments)] // the kernel's operands
    pub fn run_cols(
        &self,
        ok: &OnThread<'_>,
        m: usize,
        cols: Range<usize>,
        lhs: &[u8],
        lhs_stride: usize,
        rhs: &[u8],
        out: &mut OutputBlock<'_>,
    ) -> Result<()> {
        let n = self.n;
        if !core::ptr::eq(ok.kernel, self) {
            return Err(Error::bad_value(
                "thread check",
                "OnThread",
                format!("made for another kernel than {}", self.info.name),
            ));
        }
        if cols.start >= cols.end || cols.end > n || cols.start % self.t.n_step.max(1) != 0 {
            let why = format!("not a non-empty range of the {n} columns starting at a multiple of {}", self.t.n_step);
            return Err(Error::bad_value("columns", format!("{cols:?}"), why));
        }
        crate::error::nonzero(m, "m")?;
        if out.rows != m || out.cols != cols.len() {
            return Err(Error::ShapeMismatch {
                what: "output block (rows x columns)",
                got: format!("{}x{}", out.rows, out.cols),
                want: format!("{m}x{}", cols.len()),
            });
        }
        self.check_operands(m, (lhs.as_ptr(), lhs.len()), lhs_stride, rhs.len())?;
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the CPU runs the kernel at the vector length the weights
        // were packed for (`ok`, for this kernel); `rhs` has the length of
        // the layout it was resolved for (n x k), `cols.start` is a
        // multiple of n_step and `cols` lies within n, so the RHS offset and
        // the columns read stay inside it; `lhs` holds the packed LHS of m
        // rows (or m f32 rows `lhs_stride` apart); `out` is an exclusive
        // m x cols block (OutputBlock's contract), rows `row_stride` bytes apart.
        unsafe {
            let (l, d) = ((lhs.as_ptr(), lhs_stride), (out.ptr.as_ptr(), out.row_stride));
            self.f.run((m, self.k, self.bl), cols, l, rhs.as_ptr(), d)
        };
        #[cfg(not(target_arch = "aarch64"))]
        let _ = (lhs, rhs, out);
        Ok(())
    }
}
