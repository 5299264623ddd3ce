//! Packed operands that remember what they are.
//!
//! A [`PackedRhs`] (or [`PackedLhs`]) carries its [`PackedLayout`]: the packed
//! format, the shape, the kernel parameters it was packed for and the vector
//! length in effect. A kernel computes the layout it needs and refuses any
//! other, so a buffer packed for another kernel, shape or SME vector length is
//! an [`Error::LayoutMismatch`](crate::Error::LayoutMismatch), never garbage.

use crate::buffer::AlignedBuf;
use crate::error::{Error, Result};
use core::fmt;

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
            data: AlignedBuf,
        }

        impl $name {
            pub(crate) fn new(layout: PackedLayout, data: AlignedBuf) -> Self {
                Self { layout, data }
            }

            /// What the bytes are.
            pub fn layout(&self) -> &PackedLayout {
                &self.layout
            }

            /// The packed bytes (64-byte aligned).
            pub fn as_bytes(&self) -> &[u8] {
                self.data.as_slice()
            }

            pub(crate) fn data(&self) -> &AlignedBuf {
                &self.data
            }

            #[allow(dead_code)]
            pub(crate) fn data_mut(&mut self) -> &mut AlignedBuf {
                &mut self.data
            }

            /// An empty buffer, to be filled by a `pack_*_into` call (which
            /// reuses its allocation from then on).
            pub fn empty() -> Self {
                Self {
                    layout: PackedLayout { format: "empty", rows: 0, k: 0, r: 0, kr: 0, sr: 0, bl: 0, vector_bytes: 0 },
                    data: AlignedBuf::default(),
                }
            }

            /// Gives the buffer a new layout and `size` zero bytes.
            #[allow(dead_code)]
            pub(crate) fn reset(&mut self, layout: PackedLayout, size: usize) {
                self.layout = layout;
                self.data.reset_zeroed(size);
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
    /// No clamping (the full f32 range).
    pub const NONE: Clamp = Clamp { min: f32::MIN, max: f32::MAX };

    /// Checks `min <= max` and neither is NaN.
    pub(crate) fn check(&self) -> Result<()> {
        if self.min.is_nan() || self.max.is_nan() || self.min > self.max {
            return Err(Error::InvalidArgument(format!("clamp range [{}, {}] is empty or NaN", self.min, self.max)));
        }
        Ok(())
    }
}

impl Default for Clamp {
    fn default() -> Self {
        Clamp::NONE
    }
}
