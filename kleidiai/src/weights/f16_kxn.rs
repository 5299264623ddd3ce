//! F16 weight rows (`n` rows of `k` values) to the f32 `k x n` matrix the
//! kxn bf16 packers read: ggml's per-call F16 path does this on every
//! mul_mat with more than one activation row, so it is most of that path's
//! instructions. On aarch64 it goes 4 x 4 values at a time (four 8-byte
//! loads, `fcvtl`, a register transpose, four 16-byte stores); elsewhere
//! value by value. Both convert exactly as `fcvt` does (a signalling NaN
//! comes out quiet), so the result is the same bits on every path.

use half::f16;

/// `n` rows of `k` little-endian f16 values in `src`, rows `stride` bytes
/// apart, into `kxn[i * n + j]` = row `j` value `i`.
///
/// The caller has checked that rows hold `k` values (`stride >= 2 * k`),
/// that `src` holds every row and that `kxn` holds `k * n` values (the
/// assert repeats it; it cannot fire from a checked caller).
pub(crate) fn f16_rows_to_f32_kxn(src: &[u8], stride: usize, n: usize, k: usize, kxn: &mut [f32]) {
    if n == 0 || k == 0 {
        return;
    }
    assert!(stride >= 2 * k && src.len() >= (n - 1) * stride + 2 * k && kxn.len() >= k * n);
    #[cfg(target_arch = "aarch64")]
    let (n4, k4) = crate::arch::f16_blocks_to_f32_kxn(src, stride, n, k, kxn);
    #[cfg(not(target_arch = "aarch64"))]
    let (n4, k4) = (0, 0);
    // What the 4 x 4 blocks left: the last n % 4 rows whole, the last
    // k % 4 values of the others.
    for j in 0..n {
        let row = &src[j * stride..j * stride + 2 * k];
        let from = if j < n4 { k4 } else { 0 };
        for (i, b) in row.chunks_exact(2).enumerate().skip(from) {
            kxn[i * n + j] = f16::from_le_bytes([b[0], b[1]]).to_f32();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape's tail (n, k not multiples of 4), padded rows, and f16
    /// bit patterns including subnormals, infinities and NaNs, against the
    /// value-by-value conversion.
    #[test]
    fn matches_value_by_value_for_every_tail_and_bit_pattern() {
        let mut bits = 0x3c00u16;
        for (n, k, pad) in [(1, 1, 0), (4, 4, 0), (5, 7, 2), (8, 12, 6), (13, 9, 1), (3, 16, 4), (12, 5, 0)] {
            let stride = 2 * k + pad;
            let src: Vec<u8> = (0..n * stride)
                .map(|_| {
                    bits = bits.wrapping_mul(0x9e37).wrapping_add(0x7f4b);
                    bits as u8
                })
                .collect();
            let mut got = vec![f32::from_bits(0xdead_beef); k * n];
            f16_rows_to_f32_kxn(&src, stride, n, k, &mut got);
            for j in 0..n {
                for i in 0..k {
                    let at = j * stride + 2 * i;
                    let want = f16::from_le_bytes([src[at], src[at + 1]]).to_f32();
                    assert_eq!(got[i * n + j].to_bits(), want.to_bits(), "n {n} k {k} row {j} value {i}");
                }
            }
        }
        let specials = [0x0001u16, 0x03ff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfd55, 0x8000, 0x7bff];
        let src: Vec<u8> = specials.iter().cycle().take(16).flat_map(|h| h.to_le_bytes()).collect();
        let mut got = vec![0f32; 16];
        f16_rows_to_f32_kxn(&src, 8, 4, 4, &mut got);
        for j in 0..4 {
            for i in 0..4 {
                let h = specials[(j * 4 + i) % specials.len()];
                assert_eq!(got[i * 4 + j].to_bits(), f16::from_bits(h).to_f32().to_bits(), "f16 {h:#06x}");
            }
        }
    }
}
