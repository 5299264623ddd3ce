//! Arbitrary bytes as a packed-weight file (`KAIRSPW\0`) or a repacked ggml
//! container (`KAIRSGGM`), through every loader: `FileHeader::parse` and
//! `parse_unverified`, `PackedWeights::from_bytes`, `from_shared`,
//! `from_shared_unverified`, and `GgmlWeights::from_bytes`, `from_shared`
//! (verified or not) and `from_shared_unverified`. Each returns Ok or Err,
//! never panics or reads out of bounds; an accepted header re-serialises to
//! the same bytes, and loaded weights answer their queries without
//! panicking.
//!
//! Checksums would stop almost every mutation at the first check, so each
//! input is also loaded once with its checksums recomputed (header, slot
//! payloads, container header): the fuzzer then reaches the checks behind
//! them. The first input byte chooses how.

use kleidiai::ggml::GgmlWeights;
use kleidiai::weights::PackedWeights;
use kleidiai::weights::file::{FileHeader, MAGIC};
use std::sync::Arc;

const CONTAINER_MAGIC: &[u8; 8] = b"KAIRSGGM";

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Recomputes the checksums of a packed-weight file at `base` of `buf`
/// (as far as the bytes allow).
fn fix_file(buf: &mut [u8], base: usize) {
    let f = &buf[base.min(buf.len())..];
    let (Some(slots), Some(len)) = (u32_at(f, 56), u32_at(f, 12)) else { return };
    let (slots, len) = (slots.min(4) as usize, len as usize);
    if len < 64 + slots * 256 || f.len() < len {
        return;
    }
    let mut crcs = Vec::new();
    for i in 0..slots {
        let at = 64 + i * 256 + 2 * 88 + 32;
        let (Some(off), Some(plen)) = (u64_at(f, at + 24), u64_at(f, at + 32)) else { return };
        let end = off.checked_add(plen).filter(|e| *e <= f.len() as u64);
        if let Some(end) = end {
            crcs.push((base + at + 40, crc32fast::hash(&f[off as usize..end as usize])));
        }
    }
    for (at, crc) in crcs {
        buf[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }
    buf[base + 60..base + 64].fill(0);
    let crc = crc32fast::hash(&buf[base..base + len]);
    buf[base + 60..base + 64].copy_from_slice(&crc.to_le_bytes());
}

/// Recomputes the checksums of a ggml container and of the files it holds.
fn fix_container(buf: &mut [u8]) {
    let Some(count) = u32_at(buf, 32) else { return };
    let count = (count as usize).min(64);
    let table = 64 + (count * 16).div_ceil(64) * 64;
    if buf.len() < table {
        return;
    }
    for i in 0..count {
        let at = 64 + 16 * i;
        if let Some(off) = u64_at(buf, at).filter(|o| *o < buf.len() as u64) {
            fix_file(buf, off as usize);
        }
    }
    buf[40..44].fill(0);
    let crc = crc32fast::hash(&buf[..table]);
    buf[40..44].copy_from_slice(&crc.to_le_bytes());
}

fn load_file(data: &[u8]) {
    for (h, non_finite) in
        [FileHeader::parse_with(data, true), FileHeader::parse_with(data, false)].into_iter().flatten()
    {
        let bytes = h.to_bytes_with(&non_finite).expect("an accepted header serialises");
        assert_eq!(&bytes[..], &data[..bytes.len()], "the re-serialised header differs");
        if non_finite.is_empty() {
            assert_eq!(h.to_bytes().expect("serialises"), bytes, "a version 1 header serialises alike both ways");
        }
    }
    assert_eq!(FileHeader::parse(data).is_ok(), FileHeader::parse_with(data, true).is_ok());
    let verified = FileHeader::parse(data).is_ok();
    let copy = PackedWeights::from_bytes(data);
    if copy.is_ok() {
        assert!(verified, "from_bytes accepted a file parse rejects");
    }
    let shared = PackedWeights::from_shared(Arc::new(data.to_vec()));
    assert_eq!(copy.is_ok(), shared.is_ok(), "from_bytes and from_shared disagree");
    let unverified = PackedWeights::from_shared_unverified(Arc::new(data.to_vec()));
    if shared.is_ok() {
        assert!(unverified.is_ok(), "from_shared_unverified rejected what from_shared accepts");
    }
    for w in [copy, shared, unverified].into_iter().flatten() {
        let _ = (w.layouts(), w.kernel_for(1), w.kernel_for(64));
        let mut row = vec![0f32; w.k().min(1 << 16)];
        let _ = w.row(0, &mut row);
        let _ = w.row(w.n(), &mut row);
    }
}

fn load_container(data: &[u8]) {
    let shared: Arc<Vec<u8>> = Arc::new(data.to_vec());
    let checked = GgmlWeights::from_shared(shared.clone(), true);
    let unchecked = GgmlWeights::from_shared(shared.clone(), false);
    let unverified = GgmlWeights::from_shared_unverified(shared);
    // The copy is 64-byte aligned, the vector perhaps not: it may take more.
    let copied = GgmlWeights::from_bytes(data);
    if checked.is_ok() {
        assert!(unchecked.is_ok(), "the unverified container load rejected what the verified one accepts");
        assert!(copied.is_ok(), "GgmlWeights::from_bytes rejected what from_shared accepts");
    }
    assert_eq!(unchecked.is_ok(), unverified.is_ok(), "from_shared(_, false) and from_shared_unverified disagree");
    for w in [checked, unchecked, unverified, copied].into_iter().flatten() {
        let (k, n) = w.shape();
        let _ = (w.typ(), w.layouts(), w.kernel_for(1), w.work_size(4));
        let mut out = vec![0f32; k.min(1 << 16)];
        let _ = w.get_rows(&[0, n as i64], &mut out);
    }
}

/// One input: `input[0]` chooses whether the checksums are recomputed too
/// (bit 0), the rest is the file.
pub fn run(input: &[u8]) {
    let Some((&mode, data)) = input.split_first() else { return };
    load_file(data);
    load_container(data);
    if mode & 1 == 1 && data.len() >= 64 {
        let mut fixed = data.to_vec();
        if fixed[..8] == MAGIC {
            fix_file(&mut fixed, 0);
            load_file(&fixed);
        } else if fixed[..8] == *CONTAINER_MAGIC {
            fix_container(&mut fixed);
            load_container(&fixed);
        }
    }
}
