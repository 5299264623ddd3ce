//! The left-hand side of an indirect matmul (`imatmul`): every output row
//! reads its `k = k_chunk_count * k_chunk_length` inputs as `k_chunk_count`
//! chunks, each a run of `k_chunk_length` consecutive elements somewhere in a
//! source buffer, or a padding chunk.
//!
//! This is how a convolution becomes a matmul without an im2col copy: for a
//! `kh x kw` convolution over NHWC data, output pixel `i` has one chunk per
//! filter tap, pointing at the `C` channels of the input pixel under that tap
//! (a padding chunk where the tap falls outside the image).
//!
//! Upstream takes a table of raw row pointers; here chunks are element
//! offsets into `src`, checked before any pointer is formed.

use crate::error::{self, Result};

/// An indirect LHS: `m` rows of `k_chunk_count` chunks of `k_chunk_length`
/// elements.
///
/// ```
/// use kleidiai::formats::Indirection;
/// // Two rows of two chunks of 3: row 0 = src[0..3] ++ padding, row 1 = src[3..6] ++ src[0..3].
/// let src = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
/// let chunks = [Some(0), None, Some(3), Some(0)];
/// let lhs = Indirection { m: 2, k_chunk_count: 2, k_chunk_length: 3, src: &src, chunks: &chunks, pad: 0.0 };
/// assert_eq!(lhs.gather().unwrap(), vec![1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 4.0, 5.0, 6.0, 1.0, 2.0, 3.0]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Indirection<'a, T> {
    /// Output rows.
    pub m: usize,
    /// Chunks per row.
    pub k_chunk_count: usize,
    /// Elements per chunk.
    pub k_chunk_length: usize,
    /// Where the chunks live.
    pub src: &'a [T],
    /// `m * k_chunk_count` entries, row-major: entry `i * k_chunk_count + c`
    /// is the offset in `src` (in elements) of chunk `c` of row `i`, or `None`
    /// for a chunk of `pad` values.
    pub chunks: &'a [Option<usize>],
    /// The value of every element of a padding chunk (usually zero, or the
    /// zero point of quantised data).
    pub pad: T,
}

impl<T: Copy> Indirection<'_, T> {
    /// `k_chunk_count * k_chunk_length`.
    pub fn k(&self) -> Result<usize> {
        error::mul(self.k_chunk_count, self.k_chunk_length, "k_chunk_count * k_chunk_length")
    }

    /// Checks the dimensions, the table length, and that every chunk lies
    /// inside `src`.
    pub fn validate(&self) -> Result<()> {
        error::nonzero(self.m, "m")?;
        error::nonzero(self.k_chunk_count, "k_chunk_count")?;
        error::nonzero(self.k_chunk_length, "k_chunk_length")?;
        self.k()?;
        error::at_least(self.chunks.len(), error::mul(self.m, self.k_chunk_count, "indirection table")?, "chunks")?;
        for (i, c) in self.chunks[..self.m * self.k_chunk_count].iter().enumerate() {
            if let Some(off) = *c {
                let end = off.checked_add(self.k_chunk_length);
                if end.is_none_or(|e| e > self.src.len()) {
                    return Err(crate::Error::bad_value(
                        "indirection chunk",
                        format!("{} of row {} at offset {off}", i % self.k_chunk_count, i / self.k_chunk_count),
                        format!("{} elements from there exceed src ({} elements)", self.k_chunk_length, self.src.len()),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The dense `m x k` matrix the indirection describes.
    pub fn gather(&self) -> Result<Vec<T>> {
        self.validate()?;
        let (kcc, kcl) = (self.k_chunk_count, self.k_chunk_length);
        let mut out = Vec::with_capacity(self.m * kcc * kcl);
        for c in &self.chunks[..self.m * kcc] {
            match *c {
                Some(off) => out.extend_from_slice(&self.src[off..off + kcl]),
                None => out.extend(core::iter::repeat_n(self.pad, kcl)),
            }
        }
        Ok(out)
    }

    /// The pointer table upstream's packers and kernels read, for blocks of
    /// `m_step` rows: block `b`, chunk `c`, row `y` of the block at index
    /// `(b * k_chunk_count + c) * m_step + y`; rows past `m` are null and
    /// never read. Padding chunks point at `pad` (which must hold
    /// `k_chunk_length` elements). Call after [`validate`](Self::validate).
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    pub(crate) fn pointer_table(&self, m_step: usize, pad: *const T) -> Vec<*const T> {
        let kcc = self.k_chunk_count;
        let blocks = self.m.div_ceil(m_step);
        let mut table = vec![core::ptr::null::<T>(); blocks * m_step * kcc];
        for i in 0..self.m {
            let (b, y) = (i / m_step, i % m_step);
            for c in 0..kcc {
                table[(b * kcc + c) * m_step + y] = match self.chunks[i * kcc + c] {
                    // In bounds: validate() checked off + k_chunk_length <= src.len().
                    Some(off) => self.src[off..].as_ptr(),
                    None => pad,
                };
            }
        }
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lhs<'a>(src: &'a [f32], chunks: &'a [Option<usize>]) -> Indirection<'a, f32> {
        Indirection { m: 3, k_chunk_count: 2, k_chunk_length: 2, src, chunks, pad: -1.0 }
    }

    #[test]
    fn validation() {
        let src = [0f32; 6];
        let ok = [Some(0), Some(4), None, Some(2), Some(1), None];
        lhs(&src, &ok).validate().unwrap();
        assert!(lhs(&src, &ok[..5]).validate().is_err(), "short table");
        let out = [Some(0), Some(5), None, Some(2), Some(1), None];
        assert!(lhs(&src, &out).validate().is_err(), "chunk past the end");
        let huge = [Some(usize::MAX), None, None, None, None, None];
        assert!(lhs(&src, &huge).validate().is_err(), "overflowing offset");
        let zero = Indirection { k_chunk_length: 0, ..lhs(&src, &ok) };
        assert!(zero.validate().is_err());
        let over = Indirection { k_chunk_count: usize::MAX, ..lhs(&src, &ok) };
        assert!(over.validate().is_err());
    }

    #[test]
    fn table_layout() {
        let src: Vec<f32> = (0..6).map(|x| x as f32).collect();
        let chunks = [Some(0), Some(4), None, Some(2), Some(1), None];
        let l = lhs(&src, &chunks);
        let pad = [-1f32; 2];
        let t = l.pointer_table(2, pad.as_ptr());
        assert_eq!(t.len(), 2 * 2 * 2);
        // Block 0: chunk 0 rows 0,1 then chunk 1 rows 0,1.
        assert_eq!(t[0], src[0..].as_ptr());
        assert_eq!(t[1], pad.as_ptr());
        assert_eq!(t[2], src[4..].as_ptr());
        assert_eq!(t[3], src[2..].as_ptr());
        // Block 1: row 2 only; row 3 does not exist.
        assert_eq!(t[4], src[1..].as_ptr());
        assert!(t[5].is_null());
        assert_eq!(t[6], pad.as_ptr());
        assert_eq!(l.gather().unwrap(), vec![0.0, 1.0, 4.0, 5.0, -1.0, -1.0, 2.0, 3.0, 1.0, 2.0, -1.0, -1.0]);
    }
}
