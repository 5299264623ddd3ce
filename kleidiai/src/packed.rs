//! Packed operands that remember what they are.
//!
//! A [`PackedRhs`] (or [`PackedLhs`]) carries its [`PackedLayout`]: the packed
//! format, the shape, the kernel parameters it was packed for and the vector
//! length in effect. A kernel computes the layout it needs and refuses any
//! other, so a buffer packed for another kernel, shape or SME vector length is
//! an [`Error::LayoutMismatch`](crate::Error), never garbage.

use crate::buffer::AlignedBuf;
use crate::error::{Error, Result};
use core::fmt;
use core::ops::Range;
use std::sync::Arc;

/// Bytes that stay put for as long as a packed operand lives: an owned
/// aligned buffer, or a range of shared memory (for example a memory-mapped
/// file) that is never copied.
#[derive(Clone)]
pub(crate) enum Storage {
    Owned(AlignedBuf),
    Shared { bytes: Bytes, range: Range<usize> },
}

/// The shared memory of [`Storage::Shared`]: a buffer this crate packed
/// (read without a virtual call, on every kernel call), or any bytes a
/// caller lends.
#[derive(Clone)]
pub(crate) enum Bytes {
    Packed(Arc<AlignedBuf>),
    Lent(Arc<dyn AsRef<[u8]> + Send + Sync>),
}

impl Bytes {
    #[inline(always)]
    fn get(&self) -> &[u8] {
        match self {
            Bytes::Packed(b) => b.as_slice(),
            Bytes::Lent(b) => (**b).as_ref(),
        }
    }
}

impl Storage {
    #[inline(always)]
    fn as_slice(&self) -> &[u8] {
        match self {
            Storage::Owned(b) => b.as_slice(),
            Storage::Shared { bytes, range } => &bytes.get()[range.clone()],
        }
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Storage::Owned(b) => write!(f, "{b:?}"),
            Storage::Shared { range, .. } => write!(f, "Shared({} bytes)", range.len()),
        }
    }
}

impl PackedRhs {
    /// The same bytes behind a shared, reference-counted buffer (no copy of
    /// shared bytes; owned ones move into the Arc), so views are cheap.
    pub(crate) fn into_shared(self) -> PackedRhs {
        match self.data {
            Storage::Owned(buf) => {
                let len = buf.len();
                PackedRhs {
                    layout: self.layout,
                    data: Storage::Shared { bytes: Bytes::Packed(Arc::new(buf)), range: 0..len },
                }
            }
            shared @ Storage::Shared { .. } => PackedRhs { layout: self.layout, data: shared },
        }
    }

    /// Rows `rows` of a shared packed RHS as a packed RHS of their own
    /// (no copy), when the format is whole blocks of `r` rows of equal size
    /// and `rows.start` is a multiple of `r`. None otherwise.
    pub(crate) fn row_view(&self, rows: Range<usize>) -> Option<PackedRhs> {
        let Storage::Shared { bytes, range } = &self.data else { return None };
        let (r, total) = (self.layout.r, self.layout.rows);
        if r == 0 || rows.start % r != 0 || rows.start >= rows.end || rows.end > total {
            return None;
        }
        let blocks = total.div_ceil(r);
        if range.len() % blocks != 0 {
            return None; // trailing data (e.g. a table): not plain row blocks
        }
        let stride = range.len() / blocks;
        let start = range.start + rows.start / r * stride;
        let end = (range.start + rows.end.div_ceil(r) * stride).min(range.end);
        let layout = PackedLayout { rows: rows.len(), ..self.layout };
        Some(PackedRhs { layout, data: Storage::Shared { bytes: bytes.clone(), range: start..end } })
    }
}

/// Everything that determines the bytes of a packed operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PackedLayout {
    /// The packed format: the upstream format name plus any variant the
    /// packer was asked for (e.g. with or without bias).
    pub format: &'static str,
    /// Rows of the unpacked operand: `n` for the RHS (weights), `m` for the LHS.
    pub rows: usize,
    /// The reduction dimension.
    pub k: usize,
    /// Rows interleaved per block: `nr` (RHS) or `mr` (LHS).
    pub r: usize,
    /// K values per inner-loop load (`kr`).
    pub kr: usize,
    /// K splits (`sr`).
    pub sr: usize,
    /// Quantisation block length along K (0: per-channel or not quantised).
    pub bl: usize,
    /// SME streaming or SVE vector length in bytes the layout was made for
    /// (0 for fixed-width NEON layouts).
    pub vector_bytes: usize,
}

impl fmt::Display for PackedLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}x{} r={} kr={} sr={}", self.format, self.rows, self.k, self.r, self.kr, self.sr)?;
        if self.bl != 0 {
            write!(f, " bl={}", self.bl)?;
        }
        if self.vector_bytes != 0 {
            write!(f, " vl={}b", self.vector_bytes * 8)?;
        }
        Ok(())
    }
}

macro_rules! packed_operand {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $name {
            layout: PackedLayout,
            data: Storage,
        }

        impl $name {
            pub(crate) fn new(layout: PackedLayout, data: AlignedBuf) -> Self {
                Self { layout, data: Storage::Owned(data) }
            }

            /// Wraps `range` of shared bytes (e.g. a memory-mapped packed
            /// weight file) without copying. The range must start 64-byte
            /// aligned and be exactly `size` bytes.
            #[allow(dead_code)]
            pub(crate) fn shared(
                layout: PackedLayout,
                bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
                range: Range<usize>,
                size: usize,
            ) -> Result<Self> {
                let all = (*bytes).as_ref();
                if range.end > all.len() || range.start > range.end || range.len() != size {
                    return Err(Error::bad_value(
                        "packed data range",
                        format!("{range:?} of {} bytes", all.len()),
                        format!("the layout needs {size} bytes within them"),
                    ));
                }
                if (all.as_ptr() as usize + range.start) % 64 != 0 {
                    return Err(Error::Misaligned { what: "packed data", align: 64 });
                }
                Ok(Self { layout, data: Storage::Shared { bytes: Bytes::Lent(bytes), range } })
            }

            /// What the bytes are.
            pub fn layout(&self) -> &PackedLayout {
                &self.layout
            }

            /// The packed bytes (64-byte aligned).
            #[inline]
            pub fn as_bytes(&self) -> &[u8] {
                self.data.as_slice()
            }

            /// Whether the bytes are borrowed from shared memory (zero-copy).
            pub fn is_shared(&self) -> bool {
                matches!(self.data, Storage::Shared { .. })
            }

            #[inline]
            pub(crate) fn data(&self) -> &[u8] {
                self.data.as_slice()
            }

            /// The owned buffer, made owned (copying shared bytes) if needed.
            pub(crate) fn data_mut(&mut self) -> &mut AlignedBuf {
                if let Storage::Shared { .. } = self.data {
                    self.data = Storage::Owned(AlignedBuf::from_bytes(self.data.as_slice()));
                }
                match &mut self.data {
                    Storage::Owned(b) => b,
                    Storage::Shared { .. } => unreachable!("made owned above"),
                }
            }

            /// An empty buffer, to be filled by a `pack_*_into` call (which
            /// reuses its allocation from then on).
            pub fn empty() -> Self {
                Self {
                    layout: PackedLayout { format: "empty", rows: 0, k: 0, r: 0, kr: 0, sr: 0, bl: 0, vector_bytes: 0 },
                    data: Storage::Owned(AlignedBuf::default()),
                }
            }

            /// Gives the buffer a new layout and `size` zero bytes.
            pub(crate) fn reset(&mut self, layout: PackedLayout, size: usize) {
                self.layout = layout;
                self.data_mut().reset_zeroed(size);
            }

            /// Errors unless this buffer has exactly the layout `want` that
            /// `kernel` needs.
            pub(crate) fn expect(&self, want: &PackedLayout, kernel: &'static str) -> Result<()> {
                if self.layout != *want {
                    return Err(Error::LayoutMismatch {
                        what: $what,
                        kernel,
                        got: self.layout.to_string(),
                        want: want.to_string(),
                    });
                }
                Ok(())
            }
        }
    };
}

packed_operand!(
    /// Packed weights (the right-hand side), ready for the kernels whose
    /// layout matches.
    PackedRhs,
    "RHS"
);
packed_operand!(
    /// A packed (and possibly quantised) left-hand side.
    PackedLhs,
    "LHS"
);

/// Output clamping applied by the kernel (`min <= y <= max`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Clamp {
    /// Lower bound.
    pub min: f32,
    /// Upper bound.
    pub max: f32,
}

impl Clamp {
    /// No clamping beyond the f32 range: `[f32::MIN, f32::MAX]`. The
    /// kernels clamp in f32, so a result of finite inputs that overflows
    /// comes out as ±`f32::MAX`, not ±inf. (A NaN or an infinity among the
    /// inputs of [`crate::weights::PackedWeights::matmul`] gives NaN
    /// whatever the clamp: see its docs.)
    pub const NONE: Clamp = Clamp { min: f32::MIN, max: f32::MAX };

    /// `min <= max` and neither is NaN (what [`check`](Self::check) asks).
    #[inline]
    pub(crate) fn is_valid(&self) -> bool {
        self.min <= self.max
    }

    /// Checks `min <= max` and neither is NaN.
    pub(crate) fn check(&self) -> Result<()> {
        if !self.is_valid() {
            return Err(Error::bad_value("clamp range", format!("[{}, {}]", self.min, self.max), "empty or NaN"));
        }
        Ok(())
    }
}

impl Default for Clamp {
    fn default() -> Self {
        Clamp::NONE
    }
}
