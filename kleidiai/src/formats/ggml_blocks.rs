//! ggml's quantised blocks, byte for byte (`block_q4_0`, `block_q8_0`), and
//! ggml's reference quantisers, so weights can be produced in Rust the way
//! GGUF writers produce them.

use crate::error::{Error, Result};
use half::f16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Values per Q4_0 block.
pub const QK4_0: usize = 32;
/// Values per Q8_0 block.
pub const QK8_0: usize = 32;

/// ggml `block_q4_0`: one f16 scale `d`, then 16 bytes; byte `j` holds value
/// `j` in its low nibble and value `j + 16` in its high nibble, each stored
/// as `q + 8` (so `x = d * (nibble - 8)`). 18 bytes, 2-byte aligned.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: f16,
    /// Packed nibbles.
    pub qs: [u8; QK4_0 / 2],
}

/// ggml `block_q8_0`: one f16 scale `d`, then 32 signed bytes
/// (`x = d * q`). 34 bytes, 2-byte aligned.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: f16,
    /// Values.
    pub qs: [i8; QK8_0],
}

const _: () = assert!(core::mem::size_of::<BlockQ4_0>() == 18 && core::mem::align_of::<BlockQ4_0>() == 2);
const _: () = assert!(core::mem::size_of::<BlockQ8_0>() == 34 && core::mem::align_of::<BlockQ8_0>() == 2);

impl BlockQ4_0 {
    /// The 32 values.
    pub fn dequantize(&self) -> [f32; QK4_0] {
        let d = self.d.to_f32();
        let mut out = [0f32; QK4_0];
        for j in 0..QK4_0 / 2 {
            out[j] = d * ((self.qs[j] & 0xF) as i32 - 8) as f32;
            out[j + QK4_0 / 2] = d * ((self.qs[j] >> 4) as i32 - 8) as f32;
        }
        out
    }

    /// ggml's `quantize_row_q4_0_ref` for one block.
    pub fn quantize(x: &[f32; QK4_0]) -> BlockQ4_0 {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; QK4_0 / 2];
        for j in 0..QK4_0 / 2 {
            // C's (int8_t) conversion truncates toward zero.
            let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
            qs[j] = q(x[j]) | (q(x[j + QK4_0 / 2]) << 4);
        }
        BlockQ4_0 { d: f16::from_f32(d), qs }
    }
}

impl BlockQ8_0 {
    /// The 32 values.
    pub fn dequantize(&self) -> [f32; QK8_0] {
        let d = self.d.to_f32();
        core::array::from_fn(|j| d * self.qs[j] as f32)
    }

    /// ggml's `quantize_row_q8_0_ref` for one block.
    pub fn quantize(x: &[f32; QK8_0]) -> BlockQ8_0 {
        let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        BlockQ8_0 { d: f16::from_f32(d), qs: core::array::from_fn(|j| (x[j] * id).round() as i8) }
    }
}

/// Quantises rows of `k` values (`k` a multiple of 32) to Q4_0 blocks.
pub fn quantize_q4_0(x: &[f32], k: usize) -> Result<Vec<BlockQ4_0>> {
    check_row_len(x.len(), k, QK4_0, "Q4_0")?;
    Ok(x.chunks_exact(QK4_0).map(|c| BlockQ4_0::quantize(c.try_into().expect("32 values"))).collect())
}

/// Quantises rows of `k` values (`k` a multiple of 32) to Q8_0 blocks.
pub fn quantize_q8_0(x: &[f32], k: usize) -> Result<Vec<BlockQ8_0>> {
    check_row_len(x.len(), k, QK8_0, "Q8_0")?;
    Ok(x.chunks_exact(QK8_0).map(|c| BlockQ8_0::quantize(c.try_into().expect("32 values"))).collect())
}

fn check_row_len(len: usize, k: usize, qk: usize, what: &str) -> Result<()> {
    crate::error::nonzero(k, "k")?;
    crate::error::multiple_of(k, qk, "k", &format!("ggml {what} rows are whole blocks of {qk}"))?;
    if len % k != 0 {
        return Err(Error::NotMultiple {
            what: "values",
            value: len,
            multiple: k,
            context: format!("whole {what} rows of k"),
        });
    }
    Ok(())
}

macro_rules! byte_views {
    ($block:ty, $as_bytes:ident, $from_bytes:ident, $name:literal) => {
        /// The blocks as their raw bytes (ggml's in-memory layout).
        pub fn $as_bytes(blocks: &[$block]) -> &[u8] {
            // No padding (zerocopy's IntoBytes derive proves it).
            blocks.as_bytes()
        }

        /// Views raw bytes as blocks (no copy): the length must be a whole
        /// number of blocks and the start 2-byte aligned.
        pub fn $from_bytes(bytes: &[u8]) -> Result<&[$block]> {
            let size = core::mem::size_of::<$block>();
            if bytes.len() % size != 0 {
                return Err(Error::NotMultiple {
                    what: "block bytes",
                    value: bytes.len(),
                    multiple: size,
                    context: format!("whole {} blocks", $name),
                });
            }
            // An empty slice may sit at any address (an empty Vec's is 1):
            // zero blocks, whatever the alignment.
            if bytes.is_empty() {
                return Ok(&[]);
            }
            if bytes.as_ptr() as usize % core::mem::align_of::<$block>() != 0 {
                return Err(Error::Misaligned {
                    what: concat!($name, " block data"),
                    align: core::mem::align_of::<$block>(),
                });
            }
            // Length and alignment checked above (for the errors' sake):
            // zerocopy checks both again and cannot fail here.
            <[$block]>::ref_from_bytes(bytes).map_err(|_| Error::Misaligned {
                what: concat!($name, " block data"),
                align: core::mem::align_of::<$block>(),
            })
        }
    };
}

/// Q8_0 blocks parsed (copied) from raw bytes of any alignment.
pub fn q8_0_blocks_from_bytes(bytes: &[u8]) -> Result<Vec<BlockQ8_0>> {
    let size = core::mem::size_of::<BlockQ8_0>();
    if bytes.len() % size != 0 {
        let context = "whole Q8_0 blocks".into();
        return Err(Error::NotMultiple { what: "block bytes", value: bytes.len(), multiple: size, context });
    }
    Ok(bytes
        .chunks_exact(size)
        .map(|c| BlockQ8_0 { d: f16::from_le_bytes([c[0], c[1]]), qs: core::array::from_fn(|j| c[2 + j] as i8) })
        .collect())
}

byte_views!(BlockQ4_0, q4_0_as_bytes, q4_0_from_bytes, "Q4_0");
byte_views!(BlockQ8_0, q8_0_as_bytes, q8_0_from_bytes, "Q8_0");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_0_matches_ggml_conventions() {
        let x: [f32; 32] = core::array::from_fn(|i| (i as f32 - 16.0) / 4.0);
        let b = BlockQ4_0::quantize(&x);
        // max |x| is -4.0 at i = 0: d = -4 / -8 = 0.5, so x[0] -> q = 0 -> nibble 0... value -8*d.
        assert_eq!(b.d.to_f32(), 0.5);
        let y = b.dequantize();
        for (a, b) in x.iter().zip(y.iter()) {
            assert!((a - b).abs() <= 0.25 + 1e-6, "{a} vs {b}");
        }
        let bytes = q4_0_as_bytes(core::slice::from_ref(&b));
        assert_eq!(bytes.len(), 18);
        assert_eq!(&bytes[2..], &b.qs);
    }

    #[test]
    fn q8_0_round_trip_and_views() {
        let x: Vec<f32> = (0..64).map(|i| ((i * 37 % 64) as f32 - 32.0) / 8.0).collect();
        let q = quantize_q8_0(&x, 64).unwrap();
        assert_eq!(q.len(), 2);
        for (blk, chunk) in q.iter().zip(x.chunks(32)) {
            let y = blk.dequantize();
            let d = blk.d.to_f32();
            for (a, b) in chunk.iter().zip(y.iter()) {
                assert!((a - b).abs() <= d * 0.51 + 1e-3);
            }
        }
        let bytes = q8_0_as_bytes(&q).to_vec();
        assert_eq!(q8_0_from_bytes(&bytes).unwrap(), &q[..]);
        assert!(q8_0_from_bytes(&bytes[..33]).is_err());
        assert!(quantize_q8_0(&x, 48).is_err(), "k not a multiple of 32");
        assert!(quantize_q4_0(&x[..40], 32).is_err(), "not whole rows");
    }

    /// Found by fuzzing: an empty Vec's pointer is 1, which failed the
    /// 2-byte alignment check although zero blocks need no alignment.
    #[test]
    fn empty_bytes_are_zero_blocks() {
        let empty: Vec<u8> = Vec::new();
        assert_eq!(q4_0_from_bytes(&empty).unwrap().len(), 0);
        assert_eq!(q8_0_from_bytes(&empty).unwrap().len(), 0);
        let odd = [0u8; 37];
        let misaligned = if odd.as_ptr() as usize % 2 == 1 { &odd[..36] } else { &odd[1..] };
        assert!(q8_0_from_bytes(&misaligned[..34]).is_err(), "non-empty misaligned data is still refused");
    }
}
