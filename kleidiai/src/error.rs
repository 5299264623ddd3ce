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
    /// A byte buffer is shorter than the shape needs (the byte-counted twin
    /// of [`Error::BufferLength`], for raw bytes: ggml tensors, files).
    #[error("{what}: buffer holds {got} bytes, the shape needs {need}")]
    ByteLength {
        /// Which buffer.
        what: &'static str,
        /// Its length in bytes.
        got: usize,
        /// The bytes the shape needs.
        need: usize,
    },
    /// A buffer's address lacks the alignment it is viewed with.
    #[error("{what} is not {align}-byte aligned")]
    Misaligned {
        /// Which buffer.
        what: &'static str,
        /// The alignment needed, in bytes.
        align: usize,
    },
    /// Two shapes that must agree do not.
    #[error("{what}: got {got}, expected {want}")]
    ShapeMismatch {
        /// What is compared.
        what: &'static str,
        /// The shape given.
        got: String,
        /// The shape expected.
        want: String,
    },
    /// An index (a row, a batch) outside its range.
    #[error("{what} {index} is outside 0..{len}")]
    OutOfRange {
        /// What is indexed.
        what: &'static str,
        /// The index given.
        index: i64,
        /// The number of valid indices.
        len: usize,
    },
    /// Activations or outputs of another element type than the operation takes.
    #[error("{what}: expected {expected} values, got {got}")]
    ElementType {
        /// Which operand.
        what: &'static str,
        /// The element type the operation takes.
        expected: &'static str,
        /// The element type given.
        got: &'static str,
    },
    /// A numeric type id (a ggml type) this crate does not take.
    #[error("{what} {id} is not supported ({known})")]
    UnknownType {
        /// Which type id.
        what: &'static str,
        /// The id given.
        id: i64,
        /// The ids that are supported.
        known: &'static str,
    },
    /// No operation takes these weights with these activations.
    #[error("no operation takes {weights} with {activation} activations")]
    NoOperation {
        /// The weight kind.
        weights: &'static str,
        /// The activation element type.
        activation: &'static str,
    },
    /// A value outside what an operation takes (a clamp range, a scale, a
    /// block length), described.
    #[error("{what} = {value}: {why}")]
    BadValue {
        /// Which value.
        what: &'static str,
        /// The value, printed.
        value: String,
        /// Why it is refused.
        why: String,
    },
    /// A NaN or an infinity among a matmul's inputs, refused under
    /// [`NonFinite::Error`](crate::weights::NonFinite::Error): the first
    /// activation row holding one (and the first such value's index in the
    /// row), or the first output channel whose weights (values, scales,
    /// offsets, bias) do.
    #[error("{what} {index} holds a NaN or an infinity{}", at.map_or(String::new(), |a| format!(" (at {a})")))]
    NonFinite {
        /// `"activation row"` or `"output channel"`.
        what: &'static str,
        /// The row or channel.
        index: usize,
        /// For an activation row, the first non-finite value's index in it.
        at: Option<usize>,
    },
    /// A pointer that must not be null is null.
    #[error("{what} is NULL")]
    Null {
        /// Which pointer.
        what: &'static str,
    },
    /// Rows of a buffer lie too close together (they would overlap) or at a
    /// distance the element type does not divide.
    #[error("{what}: rows {stride} bytes apart {why}")]
    Stride {
        /// Which buffer.
        what: &'static str,
        /// The distance between rows given, in bytes.
        stride: usize,
        /// What the rows need instead.
        why: String,
    },
    /// A KleidiAI kernel and its packer (or this crate's reading of them)
    /// disagree about a layout: a check of the wrapper's assumptions about
    /// upstream, not of the caller's input (please report it).
    #[error("{kernel}: {why} (the kernel and its packer disagree; please report it)")]
    PackerMismatch {
        /// Upstream kernel (or packer) name.
        kernel: &'static str,
        /// The disagreement, with both values.
        why: String,
    },
    /// A packed-weight file or ggml container that cannot be loaded.
    #[error("{what} rejected: {reason}")]
    File {
        /// "packed-weight file" or "ggml container".
        what: &'static str,
        /// Why.
        reason: FileError,
    },
}

/// Why a packed-weight file or ggml container was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// Not this kind of file (wrong magic bytes, or too short for a header).
    #[error("not a kleidiai-rs file of this kind (wrong magic or too short)")]
    Magic,
    /// A format version this build does not read.
    #[error("format version {found}, this build reads {supported}")]
    Version {
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// Packed by another KleidiAI release (layouts may differ: repack).
    #[error("packed with KleidiAI {file}, this build uses {build}: layouts may differ, repack")]
    KleidiaiVersion {
        /// The release the file names.
        file: String,
        /// This build's release.
        build: &'static str,
    },
    /// A checksum does not match: corrupted or tampered.
    #[error("{part} checksum mismatch (corrupted or tampered)")]
    Checksum {
        /// Which part ("header", "slot 0 payload", ...).
        part: String,
    },
    /// Shorter than its header says.
    #[error("{part} is truncated: needs {need} bytes, has {have}")]
    Truncated {
        /// Which part.
        part: String,
        /// Bytes needed.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// Bytes beyond the declared payload.
    #[error("{extra} bytes after the declared end")]
    TrailingBytes {
        /// How many.
        extra: u64,
    },
    /// A reserved field is not zero, an id is unknown, a name is not one,
    /// a field out of range: the header itself is malformed.
    #[error("malformed header: {0}")]
    Header(String),
    /// A slot's layout does not fit its kernel, shape or payload size.
    #[error("slot {slot}: {why}")]
    Layout {
        /// The slot.
        slot: usize,
        /// What does not fit.
        why: String,
    },
    /// Packed for another SME or SVE vector length.
    #[error("slot {slot} was packed for a {packed_bits}-bit vector length, this CPU runs {here_bits}")]
    VectorLength {
        /// The slot.
        slot: usize,
        /// The vector length it was packed for.
        packed_bits: usize,
        /// The vector length here.
        here_bits: usize,
    },
}

impl Error {
    /// A packed-weight file rejected for `reason`.
    pub(crate) fn packed_file(reason: FileError) -> Error {
        Error::File { what: "packed-weight file", reason }
    }

    /// A ggml container rejected for `reason`.
    pub(crate) fn ggml_container(reason: FileError) -> Error {
        Error::File { what: "ggml container", reason }
    }

    /// An [`Error::OutOfRange`] for index `index` of `len`.
    pub(crate) fn out_of_range(what: &'static str, index: usize, len: usize) -> Error {
        Error::OutOfRange { what, index: i64::try_from(index).unwrap_or(i64::MAX), len }
    }

    /// An [`Error::BadValue`].
    pub(crate) fn bad_value(what: &'static str, value: impl core::fmt::Display, why: impl Into<String>) -> Error {
        Error::BadValue { what, value: value.to_string(), why: why.into() }
    }
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

/// Checks a byte buffer holds `need` bytes ([`Error::ByteLength`]).
pub(crate) fn at_least_bytes(got: usize, need: usize, what: &'static str) -> Result<()> {
    if got < need { Err(Error::ByteLength { what, got, need }) } else { Ok(()) }
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
