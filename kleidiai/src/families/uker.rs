//! Thin wrappers over upstream's table-driven micro-kernel APIs
//! (`kai_matmul_uker_api`, `kai_matmul_pack_lhs_uker_api`,
//! `kai_matmul_pack_rhs_uker_api`): the kernels and packers with no header
//! of their own. Every table is obtained (and every entry called) only
//! after the caller has checked the CPU runs it: its functions execute SME
//! instructions, the getters included.
//!
//! The constructors are `unsafe`: their caller guarantees the CPU supports
//! the kernel or packer (`engine::ensure_supported`), and a table exists only
//! once that was checked. The queries (steps, strides, sizes, offsets) are
//! then safe: they execute the kernel's instructions on a CPU that has
//! them, read no memory the caller hands them, and a precondition they
//! break (an index that is not a multiple of the step) aborts in
//! upstream's `KAI_ASSUME`, in release builds too. The runs stay `unsafe`:
//! their caller guarantees the buffers cover the shapes.

use kleidiai_sys as sys;

/// Constructor of a kernel's table.
pub(crate) type UkerCtor = unsafe extern "C" fn() -> sys::kai_matmul_uker_api;

/// A matmul kernel's table.
pub(crate) struct Uker(sys::kai_matmul_uker_api, sys::kai_matmul_uker_config);

impl Uker {
    /// # Safety
    /// The CPU supports the kernel.
    pub(crate) unsafe fn new(ctor: UkerCtor) -> Uker {
        // SAFETY: the constructor only fills a table; the caller checked
        // the CPU (the table's code is compiled for the kernel's tier).
        Uker(unsafe { ctor() }, sys::kai_matmul_uker_config::default())
    }

    /// `(m_step, n_step)`.
    pub(crate) fn step(&self) -> (usize, usize) {
        // SAFETY: upstream fills every entry; the CPU supports the kernel
        // (`Uker::new`'s contract); a query of numbers.
        let s = unsafe { self.0.get_step.expect("get_step")(&self.1) };
        (s.m, s.n)
    }

    /// The LHS strides for `m x k`.
    pub(crate) fn lhs_stride(&self, m: usize, k: usize) -> sys::kai_matmul_uker_lhs_stride_args {
        // SAFETY: as `step`; a pure query.
        unsafe { self.0.get_lhs_stride.expect("get_lhs_stride")(&self.1, &sys::kai_matmul_uker_lhs_dim_args { m, k }) }
    }

    /// The LHS offset of row `m_idx` (a multiple of the M step).
    pub(crate) fn lhs_offset(&self, m_idx: usize, stride: &sys::kai_matmul_uker_lhs_stride_args) -> usize {
        let index = sys::kai_matmul_uker_lhs_dim_args { m: m_idx, k: 0 };
        // SAFETY: as `step`; a wrong index aborts upstream (KAI_ASSUME).
        unsafe { self.0.get_lhs_offset.expect("get_lhs_offset")(&self.1, &index, stride) }
    }

    /// The RHS strides for `n x k`.
    pub(crate) fn rhs_stride(&self, n: usize, k: usize) -> sys::kai_matmul_uker_rhs_stride_args {
        // SAFETY: as `step`; a pure query.
        unsafe { self.0.get_rhs_stride.expect("get_rhs_stride")(&self.1, &sys::kai_matmul_uker_rhs_dim_args { n, k }) }
    }

    /// The RHS offset of column `n_idx` (a multiple of the N step).
    pub(crate) fn rhs_offset(&self, n_idx: usize, stride: &sys::kai_matmul_uker_rhs_stride_args) -> usize {
        let index = sys::kai_matmul_uker_rhs_dim_args { n: n_idx, k: 0 };
        // SAFETY: as `step`; a wrong index aborts upstream (KAI_ASSUME).
        unsafe { self.0.get_rhs_offset.expect("get_rhs_offset")(&self.1, &index, stride) }
    }

    /// The destination strides for `m x n`.
    pub(crate) fn dst_stride(&self, m: usize, n: usize) -> sys::kai_matmul_uker_dst_stride_args {
        // SAFETY: as `step`; a pure query.
        unsafe { self.0.get_dst_stride.expect("get_dst_stride")(&self.1, &sys::kai_matmul_uker_dst_dim_args { m, n }) }
    }

    /// Runs `m x n` outputs over `k` with the clamp flag (the float
    /// kernels' call): the LHS at `lhs` with `lhs_stride`, the RHS at `rhs`
    /// with `rhs_stride`, the destination at `dst` with rows `dst_row_bytes`
    /// apart, clamped to `[min, max]`.
    ///
    /// # Safety
    /// As [`Uker::new`]; `lhs`, `rhs` and `dst` cover what the kernel reads
    /// and writes for that shape and those strides.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn run_clamped(
        &self,
        (m, n, k): (usize, usize, usize),
        (lhs, lhs_stride): (*const u8, sys::kai_matmul_uker_lhs_stride_args),
        (rhs, rhs_stride): (*const u8, sys::kai_matmul_uker_rhs_stride_args),
        (dst, dst_row_bytes): (*mut u8, usize),
        min: &f32,
        max: &f32,
    ) {
        let mut args = sys::kai_matmul_uker_args {
            flags: sys::kai_matmul_uker_flags_args_KAI_MATMUL_UKER_FLAGS_ARGS_CLAMP as u64,
            shape: sys::kai_matmul_uker_dim_args { m, n, k },
            ..Default::default()
        };
        args.activation.clamp.min_ptr = (min as *const f32).cast();
        args.activation.clamp.max_ptr = (max as *const f32).cast();
        args.operand.lhs.ptr = lhs.cast();
        args.operand.lhs.stride = lhs_stride;
        args.operand.rhs.ptr = rhs.cast();
        args.operand.rhs.stride = rhs_stride;
        args.operand.dst.ptr = dst.cast();
        args.operand.dst.stride = sys::kai_matmul_uker_dst_stride_args { m: dst_row_bytes };
        // SAFETY: forwarded to the caller; the clamp pointers are two live
        // f32s and only the clamp flag is set.
        unsafe { self.run(&args) }
    }

    /// # Safety
    /// As [`Uker::new`]; every pointer in `args` covers what the kernel
    /// reads or writes for `args.shape`.
    pub(crate) unsafe fn run(&self, args: &sys::kai_matmul_uker_args) {
        // SAFETY: forwarded to the caller.
        unsafe { self.0.run.expect("run")(&self.1, args) }
    }
}

/// An LHS packer's table.
pub(crate) struct PackLhs(sys::kai_matmul_pack_lhs_uker_api, sys::kai_matmul_pack_lhs_uker_config);

impl PackLhs {
    /// # Safety
    /// The CPU supports the packer.
    pub(crate) unsafe fn new(ctor: unsafe extern "C" fn() -> sys::kai_matmul_pack_lhs_uker_api) -> PackLhs {
        // SAFETY: see `Uker::new`.
        PackLhs(unsafe { ctor() }, sys::kai_matmul_pack_lhs_uker_config::default())
    }

    /// Rows per packed block (`mr`).
    pub(crate) fn step_m(&self) -> usize {
        // SAFETY: upstream fills every entry; the CPU supports the packer.
        unsafe { self.0.get_step.expect("get_step")(&self.1).m }
    }

    /// The packed strides for `m x k`.
    pub(crate) fn packed_stride(&self, m: usize, k: usize) -> sys::kai_matmul_pack_lhs_uker_lhs_packed_stride_args {
        let shape = sys::kai_matmul_pack_lhs_uker_lhs_packed_dim_args { m, k };
        // SAFETY: as `step_m`; a pure query.
        unsafe { self.0.get_lhs_packed_stride.expect("get_lhs_packed_stride")(&self.1, &shape) }
    }

    /// Bytes of the packed `m x k` LHS.
    pub(crate) fn packed_size(&self, m: usize, k: usize) -> usize {
        let shape = sys::kai_matmul_pack_lhs_uker_lhs_packed_dim_args { m, k };
        let stride = self.packed_stride(m, k);
        // SAFETY: as `step_m`; a query of numbers.
        unsafe { self.0.get_lhs_packed_size.expect("get_lhs_packed_size")(&self.1, &shape, &stride) }
    }

    /// The packed offset of row `m_idx` (a multiple of `mr`).
    pub(crate) fn packed_offset(&self, m_idx: usize, k: usize) -> usize {
        let index = sys::kai_matmul_pack_lhs_uker_lhs_packed_dim_args { m: m_idx, k: 0 };
        let stride = self.packed_stride(1, k);
        // SAFETY: as `step_m`; a wrong index aborts upstream (KAI_ASSUME).
        unsafe { self.0.get_lhs_packed_offset.expect("get_lhs_packed_offset")(&self.1, &index, &stride) }
    }

    /// Packs `m` rows of `k` bytes, `stride` bytes apart, to `out`.
    ///
    /// # Safety
    /// As [`PackLhs::new`]; `lhs` holds the rows, `out` the packed size of
    /// `m x k`.
    pub(crate) unsafe fn run(&self, m: usize, k: usize, lhs: *const u8, stride: usize, out: *mut u8) {
        let mut args = sys::kai_matmul_pack_lhs_uker_args::default();
        args.shape.m = m;
        args.shape.k = k;
        args.operand.lhs.ptr = lhs.cast();
        args.operand.lhs.stride.m = stride;
        args.operand.lhs_packed.ptr = out.cast();
        args.operand.lhs_packed.stride = self.packed_stride(m, k);
        // SAFETY: forwarded to the caller.
        unsafe { self.0.run.expect("run")(&self.1, &args) }
    }
}

/// An RHS packer's table.
pub(crate) struct PackRhs(sys::kai_matmul_pack_rhs_uker_api, sys::kai_matmul_pack_rhs_uker_config);

impl PackRhs {
    /// # Safety
    /// The CPU supports the packer.
    pub(crate) unsafe fn new(ctor: unsafe extern "C" fn() -> sys::kai_matmul_pack_rhs_uker_api) -> PackRhs {
        // SAFETY: see `Uker::new`.
        PackRhs(unsafe { ctor() }, sys::kai_matmul_pack_rhs_uker_config::default())
    }

    /// Columns per packed block (`nr`).
    pub(crate) fn step_n(&self) -> usize {
        // SAFETY: upstream fills every entry; the CPU supports the packer.
        unsafe { self.0.get_step.expect("get_step")(&self.1).n }
    }

    /// The strides of the unpacked `n x k` RHS the packer reads.
    pub(crate) fn rhs_stride(&self, n: usize, k: usize) -> sys::kai_matmul_pack_rhs_uker_rhs_stride_args {
        // SAFETY: as `step_n`; a pure query.
        unsafe {
            self.0.get_rhs_stride.expect("get_rhs_stride")(
                &self.1,
                &sys::kai_matmul_pack_rhs_uker_rhs_dim_args { n, k },
            )
        }
    }

    /// The packed strides for `n x k`.
    pub(crate) fn packed_stride(&self, n: usize, k: usize) -> sys::kai_matmul_pack_rhs_uker_rhs_packed_stride_args {
        let shape = sys::kai_matmul_pack_rhs_uker_rhs_packed_dim_args { n, k };
        // SAFETY: as `step_n`; a pure query.
        unsafe { self.0.get_rhs_packed_stride.expect("get_rhs_packed_stride")(&self.1, &shape) }
    }

    /// Bytes of the packed `n x k` RHS.
    pub(crate) fn packed_size(&self, n: usize, k: usize) -> usize {
        let shape = sys::kai_matmul_pack_rhs_uker_rhs_packed_dim_args { n, k };
        let stride = self.packed_stride(n, k);
        // SAFETY: as `step_n`; a query of numbers.
        unsafe { self.0.get_rhs_packed_size.expect("get_rhs_packed_size")(&self.1, &shape, &stride) }
    }

    /// Runs the packer on `args` (shape and operands filled by the caller,
    /// strides filled here).
    ///
    /// # Safety
    /// As [`PackRhs::new`]; the operands cover `args.shape`, the output the
    /// packed size.
    pub(crate) unsafe fn run(&self, args: &mut sys::kai_matmul_pack_rhs_uker_args) {
        let (n, k) = (args.shape.n, args.shape.k);
        args.operand.rhs.stride = self.rhs_stride(n, k);
        args.operand.rhs_packed.stride = self.packed_stride(n, k);
        // SAFETY: forwarded to the caller.
        unsafe { self.0.run.expect("run")(&self.1, args) }
    }
}
