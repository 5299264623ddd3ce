//! Thin wrappers over upstream's table-driven micro-kernel APIs
//! (`kai_matmul_uker_api`, `kai_matmul_pack_lhs_uker_api`,
//! `kai_matmul_pack_rhs_uker_api`): the kernels and packers with no header
//! of their own. Every table is obtained (and every entry called) only
//! after the caller has checked the CPU runs it: its functions execute SME
//! instructions, the getters included.
//!
//! The constructors take the [`Gate`] of the kernel (whose features
//! include its packers'), so a table exists only once the CPU was checked
//! (`engine::ensure_supported`). The queries (steps, strides, sizes,
//! offsets) are then safe: they execute the kernel's instructions on a CPU
//! that has them, read only the values they borrow, and a precondition
//! they break (an index that is not a multiple of the step) aborts in
//! upstream's `KAI_ASSUME`, in release builds too. All of them go through
//! [`Table`]'s three `ask` methods. The runs stay `unsafe`: their caller
//! guarantees the buffers cover the shapes.

use crate::families::engine::Gate;
use kleidiai_sys as sys;

/// What the tables' queries answer: a number (a size, an offset) or a
/// struct of numbers (steps, strides). A run answers nothing, so no run
/// goes through the `ask` methods.
trait Answer: Copy {}
impl Answer for usize {}
impl Answer for sys::kai_matmul_uker_dim_args {}
impl Answer for sys::kai_matmul_uker_lhs_stride_args {}
impl Answer for sys::kai_matmul_uker_rhs_stride_args {}
impl Answer for sys::kai_matmul_uker_dst_stride_args {}
impl Answer for sys::kai_matmul_pack_lhs_uker_dim_args {}
impl Answer for sys::kai_matmul_pack_lhs_uker_lhs_packed_stride_args {}
impl Answer for sys::kai_matmul_pack_rhs_uker_dim_args {}
impl Answer for sys::kai_matmul_pack_rhs_uker_rhs_stride_args {}
impl Answer for sys::kai_matmul_pack_rhs_uker_rhs_packed_stride_args {}

/// What picks one entry `F` from a table's API (`|a| a.get_step`).
type Get<Api, F> = fn(&Api) -> Option<F>;

/// An upstream table with its configuration. A value exists only once the
/// gate of its kernel was checked (the constructors take it).
trait Table {
    /// The upstream table.
    type Api;
    /// Its configuration.
    type Config;
    /// The arguments of its run.
    type Args;

    fn api(&self) -> &Self::Api;
    fn config(&self) -> &Self::Config;
    fn run_entry(api: &Self::Api) -> Option<unsafe extern "C" fn(*const Self::Config, *const Self::Args)>;

    /// The query `get` picks from the table, on the configuration.
    fn ask1<R: Answer>(&self, get: Get<Self::Api, unsafe extern "C" fn(*const Self::Config) -> R>) -> R {
        let f = get(self.api()).expect("upstream fills every entry of its tables");
        // SAFETY: an entry of this table (taking its configuration type,
        // answering numbers: a query, not a run), which exists only once
        // the CPU was checked (the gate its constructor took); it reads
        // only the configuration it borrows.
        unsafe { f(self.config()) }
    }

    /// As [`ask1`](Self::ask1), with one more borrowed argument.
    fn ask2<A, R: Answer>(
        &self,
        get: Get<Self::Api, unsafe extern "C" fn(*const Self::Config, *const A) -> R>,
        a: &A,
    ) -> R {
        let f = get(self.api()).expect("upstream fills every entry of its tables");
        // SAFETY: as in `ask1`; it reads only the values it borrows.
        unsafe { f(self.config(), a) }
    }

    /// As [`ask1`](Self::ask1), with two more borrowed arguments (a wrong
    /// index aborts upstream: `KAI_ASSUME`).
    fn ask3<A, B, R: Answer>(
        &self,
        get: Get<Self::Api, unsafe extern "C" fn(*const Self::Config, *const A, *const B) -> R>,
        a: &A,
        b: &B,
    ) -> R {
        let f = get(self.api()).expect("upstream fills every entry of its tables");
        // SAFETY: as in `ask1`; it reads only the values it borrows.
        unsafe { f(self.config(), a, b) }
    }

    /// Runs the table's kernel or packer on `args`.
    ///
    /// # Safety
    /// Every pointer in `args` covers what the kernel or packer reads or
    /// writes for `args`' shape, with `args`' strides.
    unsafe fn run_args(&self, args: &Self::Args) {
        let f = Self::run_entry(self.api()).expect("upstream fills every entry of its tables");
        // SAFETY: the caller's contract; the CPU runs the table's code (the
        // gate its constructor took).
        unsafe { f(self.config(), args) }
    }
}

/// [`Table`] for a table type `$t` (fields: the API, then the
/// configuration).
macro_rules! table {
    ($t:ty, $api:ty, $config:ty, $args:ty) => {
        impl Table for $t {
            type Api = $api;
            type Config = $config;
            type Args = $args;

            fn api(&self) -> &$api {
                &self.0
            }

            fn config(&self) -> &$config {
                &self.1
            }

            fn run_entry(api: &$api) -> Option<unsafe extern "C" fn(*const $config, *const $args)> {
                api.run
            }
        }
    };
    ($t:ident, $api:ty, $config:ty, $args:ty, packer) => {
        table!($t, $api, $config, $args);

        impl $t {
            /// The table of `ctor`, a packer of the kernel `gate` checked.
            pub(crate) fn new(ctor: unsafe extern "C" fn() -> $api, gate: &Gate) -> $t {
                Self::with_config(ctor, Default::default(), gate)
            }

            /// As [`new`](Self::new), with the configuration `config`.
            pub(crate) fn with_config(ctor: unsafe extern "C" fn() -> $api, config: $config, gate: &Gate) -> $t {
                $t(gate.table(ctor), config)
            }
        }
    };
}

/// Constructor of a kernel's table.
pub(crate) type UkerCtor = unsafe extern "C" fn() -> sys::kai_matmul_uker_api;

/// A matmul kernel's table.
#[derive(Clone, Copy)]
pub(crate) struct Uker(sys::kai_matmul_uker_api, sys::kai_matmul_uker_config);
table!(Uker, sys::kai_matmul_uker_api, sys::kai_matmul_uker_config, sys::kai_matmul_uker_args);

impl Uker {
    /// The table of `ctor`, the constructor of the kernel `gate` checked.
    pub(crate) fn new(ctor: UkerCtor, gate: &Gate) -> Uker {
        Uker(gate.table(ctor), sys::kai_matmul_uker_config::default())
    }

    /// `(m_step, n_step)`.
    pub(crate) fn step(&self) -> (usize, usize) {
        let s = self.ask1(|a| a.get_step);
        (s.m, s.n)
    }

    /// The LHS strides for `m x k`.
    pub(crate) fn lhs_stride(&self, m: usize, k: usize) -> sys::kai_matmul_uker_lhs_stride_args {
        self.ask2(|a| a.get_lhs_stride, &sys::kai_matmul_uker_lhs_dim_args { m, k })
    }

    /// The LHS offset of row `m_idx` (a multiple of the M step).
    pub(crate) fn lhs_offset(&self, m_idx: usize, stride: &sys::kai_matmul_uker_lhs_stride_args) -> usize {
        self.ask3(|a| a.get_lhs_offset, &sys::kai_matmul_uker_lhs_dim_args { m: m_idx, k: 0 }, stride)
    }

    /// The RHS strides for `n x k`.
    pub(crate) fn rhs_stride(&self, n: usize, k: usize) -> sys::kai_matmul_uker_rhs_stride_args {
        self.ask2(|a| a.get_rhs_stride, &sys::kai_matmul_uker_rhs_dim_args { n, k })
    }

    /// The RHS offset of column `n_idx` (a multiple of the N step).
    pub(crate) fn rhs_offset(&self, n_idx: usize, stride: &sys::kai_matmul_uker_rhs_stride_args) -> usize {
        self.ask3(|a| a.get_rhs_offset, &sys::kai_matmul_uker_rhs_dim_args { n: n_idx, k: 0 }, stride)
    }

    /// The destination strides for `m x n`.
    pub(crate) fn dst_stride(&self, m: usize, n: usize) -> sys::kai_matmul_uker_dst_stride_args {
        self.ask2(|a| a.get_dst_stride, &sys::kai_matmul_uker_dst_dim_args { m, n })
    }

    /// Runs `m x n` outputs over `k` with the clamp flag (the float
    /// kernels' call): the LHS at `lhs` with `lhs_stride`, the RHS at `rhs`
    /// with `rhs_stride`, the destination at `dst` with rows `dst_row_bytes`
    /// apart, clamped to `[min, max]`.
    ///
    /// # Safety
    /// `lhs`, `rhs` and `dst` cover what the kernel reads and writes for
    /// that shape and those strides.
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
        unsafe { self.run_args(&args) }
    }

    /// Runs the kernel on `args`.
    ///
    /// # Safety
    /// Every pointer in `args` covers what the kernel reads or writes for
    /// `args.shape`.
    pub(crate) unsafe fn run(&self, args: &sys::kai_matmul_uker_args) {
        // SAFETY: forwarded to the caller.
        unsafe { self.run_args(args) }
    }
}

/// An LHS packer's table.
#[derive(Clone, Copy)]
pub(crate) struct PackLhs(sys::kai_matmul_pack_lhs_uker_api, sys::kai_matmul_pack_lhs_uker_config);
table!(
    PackLhs,
    sys::kai_matmul_pack_lhs_uker_api,
    sys::kai_matmul_pack_lhs_uker_config,
    sys::kai_matmul_pack_lhs_uker_args,
    packer
);

impl PackLhs {
    /// Rows per packed block (`mr`).
    pub(crate) fn step_m(&self) -> usize {
        self.ask1(|a| a.get_step).m
    }

    /// The packed strides for `m x k`.
    pub(crate) fn packed_stride(&self, m: usize, k: usize) -> sys::kai_matmul_pack_lhs_uker_lhs_packed_stride_args {
        self.ask2(|a| a.get_lhs_packed_stride, &sys::kai_matmul_pack_lhs_uker_lhs_packed_dim_args { m, k })
    }

    /// Bytes of the packed `m x k` LHS.
    pub(crate) fn packed_size(&self, m: usize, k: usize) -> usize {
        let shape = sys::kai_matmul_pack_lhs_uker_lhs_packed_dim_args { m, k };
        self.ask3(|a| a.get_lhs_packed_size, &shape, &self.packed_stride(m, k))
    }

    /// The packed offset of row `m_idx` (a multiple of `mr`).
    pub(crate) fn packed_offset(&self, m_idx: usize, k: usize) -> usize {
        let index = sys::kai_matmul_pack_lhs_uker_lhs_packed_dim_args { m: m_idx, k: 0 };
        self.ask3(|a| a.get_lhs_packed_offset, &index, &self.packed_stride(1, k))
    }

    /// Packs `m` rows of `k` bytes, `stride` bytes apart, to `out`.
    ///
    /// # Safety
    /// `lhs` holds the rows, `out` the packed size of `m x k`.
    pub(crate) unsafe fn run(&self, m: usize, k: usize, lhs: *const u8, stride: usize, out: *mut u8) {
        let mut args = sys::kai_matmul_pack_lhs_uker_args::default();
        args.shape.m = m;
        args.shape.k = k;
        args.operand.lhs.ptr = lhs.cast();
        args.operand.lhs.stride.m = stride;
        args.operand.lhs_packed.ptr = out.cast();
        args.operand.lhs_packed.stride = self.packed_stride(m, k);
        // SAFETY: forwarded to the caller.
        unsafe { self.run_args(&args) }
    }
}

/// An RHS packer's table.
pub(crate) struct PackRhs(sys::kai_matmul_pack_rhs_uker_api, sys::kai_matmul_pack_rhs_uker_config);
table!(
    PackRhs,
    sys::kai_matmul_pack_rhs_uker_api,
    sys::kai_matmul_pack_rhs_uker_config,
    sys::kai_matmul_pack_rhs_uker_args,
    packer
);

impl PackRhs {
    /// Columns per packed block (`nr`).
    pub(crate) fn step_n(&self) -> usize {
        self.ask1(|a| a.get_step).n
    }

    /// The strides of the unpacked `n x k` RHS the packer reads.
    pub(crate) fn rhs_stride(&self, n: usize, k: usize) -> sys::kai_matmul_pack_rhs_uker_rhs_stride_args {
        self.ask2(|a| a.get_rhs_stride, &sys::kai_matmul_pack_rhs_uker_rhs_dim_args { n, k })
    }

    /// The packed strides for `n x k`.
    pub(crate) fn packed_stride(&self, n: usize, k: usize) -> sys::kai_matmul_pack_rhs_uker_rhs_packed_stride_args {
        self.ask2(|a| a.get_rhs_packed_stride, &sys::kai_matmul_pack_rhs_uker_rhs_packed_dim_args { n, k })
    }

    /// Bytes of the packed `n x k` RHS.
    pub(crate) fn packed_size(&self, n: usize, k: usize) -> usize {
        let shape = sys::kai_matmul_pack_rhs_uker_rhs_packed_dim_args { n, k };
        self.ask3(|a| a.get_rhs_packed_size, &shape, &self.packed_stride(n, k))
    }

    /// Runs the packer on `args` (shape and operands filled by the caller,
    /// strides filled here).
    ///
    /// # Safety
    /// The operands cover `args.shape`, the output the packed size.
    pub(crate) unsafe fn run(&self, args: &mut sys::kai_matmul_pack_rhs_uker_args) {
        let (n, k) = (args.shape.n, args.shape.k);
        args.operand.rhs.stride = self.rhs_stride(n, k);
        args.operand.rhs_packed.stride = self.packed_stride(n, k);
        // SAFETY: forwarded to the caller.
        unsafe { self.run_args(args) }
    }
}
