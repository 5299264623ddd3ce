//! Tests of saved packed weights: round trips, tampering, trailing bytes,
//! other vector lengths, rewritten shapes and memory-mapped loading.

use super::*;

/// Random `n x k` f32 weights from seed `seed`, packed by default and saved:
/// the generator after them, the weights and the file; None where nothing
/// was packed on this CPU (nothing to save).
fn saved_f32(seed: u64, n: usize, k: usize) -> Option<(Rng, PackedWeights, Vec<u8>)> {
    let mut rng = Rng::new(seed);
    let (_, packed) = random_f32(&mut rng, n, k, &PackOptions::default());
    match packed.to_bytes() {
        Ok(bytes) => Some((rng, packed, bytes)),
        Err(_) => {
            assert!(packed.layouts().is_empty(), "nothing packed on this CPU, nothing to load");
            None
        }
    }
}

#[test]
fn save_load_round_trip_and_tampering() {
    let mut rng = Rng::new(12);
    let (n, k) = (19, 64);
    for c in cases(&mut rng, n, k) {
        let packed = c.pack(PackOptions::default());
        let bytes = match packed.to_bytes() {
            Ok(b) => b,
            Err(e) => {
                // Nothing packed (no kernel on this CPU): saving says so.
                assert!(packed.layouts().is_empty(), "{e}");
                continue;
            }
        };
        let x = rng.vec_f32(3 * k);
        let want = run(&packed, c.act, 3, &x, Parallelism::Sequential).unwrap();
        let loaded = PackedWeights::from_bytes(&bytes).unwrap();
        assert_eq!(loaded.layouts(), packed.layouts());
        assert!(bit_identical(&run(&loaded, c.act, 3, &x, Parallelism::Sequential).unwrap(), &want));
        // Zero-copy: an Arc'd buffer whose start is 64-byte aligned.
        let mut aligned = crate::buffer::AlignedBuf::zeroed(bytes.len());
        aligned.as_mut_slice().copy_from_slice(&bytes);
        struct Shared(crate::buffer::AlignedBuf);
        impl AsRef<[u8]> for Shared {
            fn as_ref(&self) -> &[u8] {
                self.0.as_slice()
            }
        }
        let shared = PackedWeights::from_shared(Arc::new(Shared(aligned))).unwrap();
        assert!(shared.slots.iter().all(|s| s.rhs.is_shared()));
        assert!(bit_identical(&run(&shared, c.act, 3, &x, Parallelism::Sequential).unwrap(), &want));
        // Every truncation and a flipped byte anywhere is rejected.
        for len in [0, 8, 63, bytes.len() / 2, bytes.len() - 1] {
            assert!(PackedWeights::from_bytes(&bytes[..len]).is_err());
        }
        for at in [0, 9, 17, 40, 70, bytes.len() - 1] {
            let mut t = bytes.clone();
            t[at] ^= 0x10;
            assert!(PackedWeights::from_bytes(&t).is_err(), "flip at {at} accepted");
        }
    }
}

/// Shared bytes (what a memory map gives; `kleidiai/tests/mmap.rs` maps a
/// real file) are viewed in place, not copied.
#[test]
fn load_from_shared_bytes_without_copying() {
    let (n, k) = (21, 64);
    let Some((mut rng, packed, bytes)) = saved_f32(14, n, k) else { return };
    let loaded = PackedWeights::from_shared(Arc::new(crate::buffer::AlignedBuf::from_bytes(&bytes))).unwrap();
    assert!(loaded.slots.iter().all(|s| s.rhs.is_shared()), "payloads stay in the shared bytes");
    let x = rng.vec_f32(4 * k);
    let a = run(&packed, DType::F32, 4, &x, Parallelism::Sequential).unwrap();
    let b = run(&loaded, DType::F32, 4, &x, Parallelism::Sequential).unwrap();
    assert!(bit_identical(&a, &b));
}

/// Issue 15: bytes after the last payload used to load without complaint.
/// Every loader now refuses them, naming how many; the exact file loads.
#[test]
fn every_loader_refuses_trailing_bytes() {
    let Some((_, _, bytes)) = saved_f32(16, 19, 64) else { return };
    type Loader = fn(&[u8]) -> Result<PackedWeights>;
    let loaders: [(&str, Loader); 3] = [
        ("from_bytes", PackedWeights::from_bytes),
        ("from_shared", |b| PackedWeights::from_shared(Arc::new(crate::buffer::AlignedBuf::from_bytes(b)))),
        ("from_shared_unverified", |b| {
            PackedWeights::from_shared_unverified(Arc::new(crate::buffer::AlignedBuf::from_bytes(b)))
        }),
    ];
    for (name, load) in loaders {
        assert_eq!(load(&bytes).unwrap().to_bytes().unwrap(), bytes, "{name}: the exact file");
        for extra in [1usize, 64, 4096] {
            let mut f = bytes.clone();
            f.resize(bytes.len() + extra, 0);
            let err = load(&f).unwrap_err();
            assert_eq!(
                err,
                Error::File { what: "packed-weight file", reason: FileError::TrailingBytes { extra: extra as u64 } },
                "{name}: {extra} bytes appended"
            );
            assert!(err.to_string().contains(&format!("{extra} bytes after the declared end")), "{name}: {err}");
        }
    }
}

#[test]
fn a_file_packed_for_another_vector_length_is_rejected_with_the_reason() {
    let mut rng = Rng::new(15);
    let (n, k) = (33, 64);
    let (_, packed) = random_f32(&mut rng, n, k, &PackOptions { non_sme_layout: false, ..Default::default() });
    let bytes = match packed.to_bytes() {
        Ok(b) => b,
        Err(e) => {
            // Only a CPU without any kernel (reference fallback) has no layout to save.
            assert!(packed.kernel_for(1).is_none() && e.to_string().contains("nothing was packed"), "{e}");
            eprintln!("note: no packed layout on this CPU; only the refusal to save was checked");
            return;
        }
    };
    // Rewrite every slot (GEMM and GEMV layouts may be separate slots) as if
    // packed on a CPU with twice the vector length (or, for fixed-width
    // layouts, with one), header checksum made valid again.
    let mut h = file::FileHeader::parse(&bytes).unwrap();
    for s in &mut h.slots {
        s.vector_bytes = if s.vector_bytes == 0 { 32 } else { s.vector_bytes * 2 };
        s.r *= 2;
    }
    let mut forged = h.to_bytes().unwrap();
    forged.extend_from_slice(&bytes[forged.len()..]);
    let err = PackedWeights::from_bytes(&forged).unwrap_err().to_string();
    assert!(err.contains("vl=") && err.contains("needs"), "{err}");
    // Another KleidiAI version is rejected too.
    let mut h = file::FileHeader::parse(&bytes).unwrap();
    h.kleidiai_version = "1.29.0".into();
    let mut other = h.to_bytes().unwrap();
    other.extend_from_slice(&bytes[other.len()..]);
    let err = PackedWeights::from_bytes(&other).unwrap_err();
    assert!(
        matches!(&err, Error::File { reason: FileError::KleidiaiVersion { file, .. }, .. } if file == "1.29.0"),
        "{err}"
    );
    assert!(err.to_string().contains("repack"), "{err}");
}

/// A file whose shape or payload length was changed with every checksum
/// recomputed (checksums catch accidents, not a buggy writer or a crafted
/// file) is refused: a kernel trusts the payload size its layout implies,
/// so a payload shorter than the shape needs would be read past its end.
#[test]
fn rewritten_shape_with_valid_checksums_is_refused() {
    let (n, k) = (5, 64);
    let Some((_, _, bytes)) = saved_f32(14, n, k) else { return };
    let h = file::FileHeader::parse(&bytes).unwrap();
    let payload = |s: &file::SlotHeader| bytes[s.offset as usize..(s.offset + s.len) as usize].to_vec();
    let rebuild = |h: &file::FileHeader, payloads: &[Vec<u8>]| {
        let mut h = h.clone();
        let mut offset = file::FileHeader::header_len(h.slots.len());
        for (s, p) in h.slots.iter_mut().zip(payloads) {
            (s.offset, s.len, s.crc32) = (offset as u64, p.len() as u64, crc32fast::hash(p));
            offset = (offset + p.len()).div_ceil(64) * 64;
        }
        let mut out = h.to_bytes().unwrap();
        for p in payloads {
            out.resize(out.len().div_ceil(64) * 64, 0);
            out.extend_from_slice(p);
        }
        out
    };
    let payloads: Vec<Vec<u8>> = h.slots.iter().map(payload).collect();
    assert!(PackedWeights::from_bytes(&rebuild(&h, &payloads)).is_ok(), "an unchanged rebuild loads");
    // More K than the payload holds.
    let wider = file::FileHeader { k: k as u64 + 32, ..h.clone() };
    assert!(PackedWeights::from_bytes(&rebuild(&wider, &payloads)).is_err(), "k + 32 accepted");
    // More rows than the payload holds (a whole extra row block).
    let taller = file::FileHeader { n: (n + h.slots[0].r as usize) as u64, ..h.clone() };
    assert!(PackedWeights::from_bytes(&rebuild(&taller, &payloads)).is_err(), "n + nr accepted");
    // A payload cut short, or one slot twice.
    let mut short = payloads.clone();
    let cut = short[0].len() - 1;
    short[0].truncate(cut);
    assert!(PackedWeights::from_bytes(&rebuild(&h, &short)).is_err(), "short payload accepted");
    let mut twice = h.clone();
    twice.slots.insert(0, h.slots[0].clone());
    let mut p2 = payloads.clone();
    p2.insert(0, payloads[0].clone());
    if twice.slots.len() <= file::MAX_SLOTS {
        assert!(PackedWeights::from_bytes(&rebuild(&twice, &p2)).is_err(), "duplicate slot accepted");
    }
}
