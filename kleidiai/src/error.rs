//! Errors of the safe API. Every precondition KleidiAI asserts (or assumes)
//! is checked in Rust first and reported as one of these.

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// What went wrong. Messages name the operation and the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A dimension that must be positive is zero.
    #[error("{what} must be at least 1 (got 0)")]
    ZeroDimension {
        /// Which dimension.
        what: &'static str,
    },
    /// A slice is shorter than the shape needs (or longer, where an exact
    /// length is required).
    #[error("{what}: buffer holds {got} elements, the shape needs {need}")]
    BufferLength {
        /// Which buffer.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The length the shape needs.
        need: usize,
    },
    /// A dimension does not meet a kernel's divisibility rule.
    #[error("{what} = {value} must be a multiple of {multiple} ({context})")]
    NotMultiple {
        /// Which dimension (usually `k`).
        what: &'static str,
        /// Its value.
        value: usize,
        /// The required divisor.
        multiple: usize,
        /// Which kernel or format imposes it.
        context: String,
    },
    /// A size computed from the shape does not fit in `usize`.
    #[error("size overflow: {0}")]
    Overflow(String),
    /// The kernel needs CPU features this machine (or the current overrides)
    /// does not have.
    #[error("{kernel} cannot run here: {why}")]
    Unsupported {
        /// Upstream kernel name.
        kernel: &'static str,
        /// What is missing (features, vector length).
        why: String,
    },
    /// A packed buffer was made for another kernel, shape or vector length.
    #[error("packed {what} does not fit {kernel}: buffer is {got}, kernel needs {want}")]
    LayoutMismatch {
        /// "LHS" or "RHS".
        what: &'static str,
        /// The kernel it was passed to.
        kernel: &'static str,
        /// The buffer's layout.
        got: String,
        /// The layout the kernel needs.
        want: String,
    },
    /// No kernel of that name is registered (or built).
    #[error("no micro-kernel named {0} is registered in this build")]
    UnknownKernel(String),
    /// A kernel was asked to do something its family does not do.
    #[error("{kernel}: {why}")]
    WrongFamily {
        /// Upstream kernel name.
        kernel: &'static str,
        /// The mismatch.
        why: String,
    },
    /// Any other invalid argument, described.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// `a * b`, or an [`Error::Overflow`] naming `what`.
pub(crate) fn mul(a: usize, b: usize, what: &str) -> Result<usize> {
    a.checked_mul(b).ok_or_else(|| Error::Overflow(format!("{what}: {a} * {b}")))
}

/// Checks a dimension is non-zero.
pub(crate) fn nonzero(v: usize, what: &'static str) -> Result<()> {
    if v == 0 { Err(Error::ZeroDimension { what }) } else { Ok(()) }
}

/// Checks `got >= need`.
pub(crate) fn at_least(got: usize, need: usize, what: &'static str) -> Result<()> {
    if got < need { Err(Error::BufferLength { what, got, need }) } else { Ok(()) }
}

/// Checks `value % multiple == 0`.
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
pub(crate) fn multiple_of(value: usize, multiple: usize, what: &'static str, context: &str) -> Result<()> {
    if multiple == 0 || value % multiple != 0 {
        Err(Error::NotMultiple { what, value, multiple, context: context.to_string() })
    } else {
        Ok(())
    }
}
