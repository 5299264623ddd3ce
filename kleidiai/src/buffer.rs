//! Byte buffers aligned for the kernels (64 bytes: a cache line, and more
//! than any vector load upstream issues needs).

use core::fmt;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

#[derive(Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A zero-initialised, 64-byte aligned byte buffer.
#[derive(Clone, Default)]
pub struct AlignedBuf {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedBuf {
    /// `len` zero bytes. Zeroing matters: some upstream packers leave padding
    /// bytes unwritten.
    pub fn zeroed(len: usize) -> AlignedBuf {
        AlignedBuf { lines: vec![Line([0; 64]); len.div_ceil(64)], len }
    }

    /// A copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(bytes.len());
        b.as_mut_slice().copy_from_slice(bytes);
        b
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Grows or shrinks to `len` bytes, all zero (reuses the allocation when
    /// it is large enough).
    pub fn reset_zeroed(&mut self, len: usize) {
        let lines = len.div_ceil(64);
        if self.lines.len() < lines {
            self.lines.resize(lines, Line([0; 64]));
        }
        self.len = len;
        self.as_mut_slice().fill(0);
    }

    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        // `len <= 64 * lines.len()` always: the lines' bytes, viewed by zerocopy.
        &self.lines.as_bytes()[..self.len]
    }

    /// The bytes, mutable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.lines.as_mut_bytes()[..self.len]
    }

    /// Pointer to the first byte (64-byte aligned).
    pub fn as_ptr(&self) -> *const u8 {
        self.lines.as_ptr().cast()
    }

    /// Mutable pointer to the first byte (64-byte aligned).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr().cast()
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsMut<[u8]> for AlignedBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// A raw pointer that may cross threads. Used only for disjoint regions of
/// one buffer, which the partitioning functions guarantee.
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendPtr<T>(pub *mut T);
// SAFETY: a SendPtr is only dereferenced for regions no other thread touches
// (see the partition invariants in `par`).
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        for len in [0, 1, 63, 64, 65, 1000] {
            let b = AlignedBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % 64, 0);
            assert!(b.as_slice().iter().all(|x| *x == 0));
        }
        let mut b = AlignedBuf::from_bytes(&[1, 2, 3]);
        b.reset_zeroed(130);
        assert_eq!(b.len(), 130);
        assert!(b.as_slice().iter().all(|x| *x == 0));
    }
}
