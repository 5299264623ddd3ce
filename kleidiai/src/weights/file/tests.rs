use super::*;

fn sample() -> (FileHeader, Vec<u8>) {
    let payload: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    let mut h = FileHeader {
        kleidiai_version: "1.30.0".into(),
        weight_kind: 3,
        output: 0,
        n: 10,
        k: 64,
        slots: vec![SlotHeader {
            gemm_kernel: "kai_matmul_clamp_f32_qai8dxp4x8_qsi4cxp4x8_8x4x32_neon_i8mm".into(),
            gemv_kernel: String::new(),
            format: "qsi4cxp".into(),
            r: 4,
            kr: 16,
            sr: 2,
            bl: 0,
            vector_bytes: 0,
            offset: FileHeader::header_len(1) as u64,
            len: payload.len() as u64,
            crc32: crc32fast::hash(&payload),
        }],
    };
    let mut file = h.to_bytes().unwrap();
    file.extend_from_slice(&payload);
    h.slots[0].crc32 = crc32fast::hash(&payload);
    (h, file)
}

#[test]
fn round_trip() {
    let (h, file) = sample();
    assert_eq!(FileHeader::parse(&file).unwrap(), h);
}

/// The bytes at the offsets the format table above gives (the structs
/// that read and write them must agree with it).
#[test]
fn fields_sit_at_the_documented_offsets() {
    let (h, file) = sample();
    let u32_at = |at: usize| u32::from_le_bytes(file[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(file[at..at + 8].try_into().unwrap());
    assert_eq!(&file[0..8], b"KAIRSPW\0");
    assert_eq!((u32_at(8), u32_at(12) as usize), (1, FileHeader::header_len(1)));
    assert_eq!(&file[16..22], b"1.30.0");
    assert!(file[22..32].iter().all(|b| *b == 0));
    assert_eq!((u32_at(32), u32_at(36), u64_at(40), u64_at(48), u32_at(56)), (h.weight_kind, h.output, h.n, h.k, 1));
    let mut zeroed = file[..FileHeader::header_len(1)].to_vec();
    zeroed[60..64].fill(0);
    assert_eq!(u32_at(60), crc32fast::hash(&zeroed));
    let s = &h.slots[0];
    assert_eq!(&file[64..64 + s.gemm_kernel.len()], s.gemm_kernel.as_bytes());
    assert_eq!(&file[64 + 88..64 + 88 + s.gemv_kernel.len()], s.gemv_kernel.as_bytes());
    assert_eq!(&file[64 + 176..64 + 176 + s.format.len()], s.format.as_bytes());
    let at = 64 + 208;
    assert_eq!(
        [u32_at(at), u32_at(at + 4), u32_at(at + 8), u32_at(at + 12), u32_at(at + 16)],
        [s.r, s.kr, s.sr, s.bl, s.vector_bytes]
    );
    assert_eq!((u64_at(at + 24), u64_at(at + 32), u32_at(at + 40)), (s.offset, s.len, s.crc32));
    assert_eq!((u32_at(at + 20), u32_at(at + 44)), (0, 0));
}

#[test]
fn every_truncation_is_rejected() {
    let (_, file) = sample();
    for len in 0..file.len() {
        assert!(FileHeader::parse(&file[..len]).is_err(), "truncated to {len}");
    }
}

/// Found by fuzzing (with checksums recomputed): a slot's reserved
/// fields were ignored, so a file whose header did not re-serialise to
/// the same bytes was accepted.
#[test]
fn non_zero_reserved_bytes_are_rejected() {
    let (_, file) = sample();
    let at = HEADER_FIXED + 2 * NAME_LEN + FORMAT_LEN;
    for reserved in [at + 20, at + 23, at + 44, at + 47] {
        let mut f = file.clone();
        f[reserved] = 1;
        f[60..64].fill(0);
        let crc = crc32fast::hash(&f[..FileHeader::header_len(1)]);
        f[60..64].copy_from_slice(&crc.to_le_bytes());
        let err = FileHeader::parse(&f).unwrap_err();
        assert!(
            matches!(&err, Error::File { reason: FileError::Header(why), .. } if why.contains("reserved")),
            "byte {reserved}: {err}"
        );
    }
}

#[test]
fn rejections_name_their_reason() {
    let (_, file) = sample();
    let reason = |f: &[u8]| match FileHeader::parse(f).unwrap_err() {
        Error::File { what: "packed-weight file", reason } => reason,
        other => panic!("not a file rejection: {other}"),
    };
    let mut f = file.clone();
    f[0] = b'X';
    assert_eq!(reason(&f), FileError::Magic);
    let mut f = file.clone();
    f[8] = 3;
    assert_eq!(reason(&f), FileError::Version { found: 3, supported: FORMAT_VERSION });
    let mut f = file.clone();
    f[40] ^= 1;
    assert_eq!(reason(&f), FileError::Checksum { part: "header".into() });
    let mut f = file.clone();
    *f.last_mut().unwrap() ^= 1;
    assert_eq!(reason(&f), FileError::Checksum { part: "slot 0 payload".into() });
    let have = file.len() as u64 - 1;
    let need = have + 1;
    assert_eq!(reason(&file[..file.len() - 1]), FileError::Truncated { part: "slot 0 payload".into(), need, have });
    assert!(matches!(reason(&file[..10]), FileError::Truncated { need: 64, have: 10, .. }));
    assert!(matches!(reason(&file[..100]), FileError::Truncated { have: 100, .. }));
}

#[test]
fn trailing_bytes_are_rejected() {
    let (h, file) = sample();
    assert_eq!(FileHeader::parse(&file).unwrap(), h);
    for extra in [1usize, 64, 4096] {
        for fill in [0u8, 0xa5] {
            let mut f = file.clone();
            f.resize(file.len() + extra, fill);
            for r in [FileHeader::parse(&f), FileHeader::parse_unverified(&f)] {
                assert_eq!(
                    r.unwrap_err(),
                    Error::File {
                        what: "packed-weight file",
                        reason: FileError::TrailingBytes { extra: extra as u64 }
                    },
                    "{extra} bytes of {fill:#x} appended"
                );
            }
        }
    }
}

/// `sample` as version 2, with non-finite channels 1 and 7 of 10.
fn sample_v2() -> (FileHeader, Vec<u8>, Vec<u64>) {
    let (mut h, v1) = sample();
    let payload = v1[FileHeader::header_len(1)..].to_vec();
    let channels = vec![1, 7];
    h.slots[0].offset = FileHeader::header_len_with(1, 2) as u64;
    let mut file = h.to_bytes_with(&channels).unwrap();
    assert_eq!(RawFixed::ref_from_prefix(&file).unwrap().0.version.get(), 2);
    file.extend_from_slice(&payload);
    (h, file, channels)
}

#[test]
fn version_2_keeps_the_non_finite_channels() {
    let (h, file, channels) = sample_v2();
    assert_eq!(FileHeader::parse_with(&file, true).unwrap(), (h.clone(), channels));
    let (h1, v1) = sample();
    assert_eq!(FileHeader::parse_with(&v1, true).unwrap(), (h1.clone(), vec![]), "version 1: none");
    assert_eq!(h1.to_bytes_with(&[]).unwrap(), h1.to_bytes().unwrap(), "no channels: version 1 bytes");
    for bad in [&[7u64, 1][..], &[1, 1], &[10]] {
        assert!(h.to_bytes_with(bad).is_err(), "{bad:?} written");
    }
    for len in 0..file.len() {
        assert!(FileHeader::parse(&file[..len]).is_err(), "truncated to {len}");
    }
    for byte in 0..file.len() {
        for bit in 0..8 {
            let mut f = file.clone();
            f[byte] ^= 1 << bit;
            assert!(FileHeader::parse(&f).is_err(), "flip of bit {bit} in byte {byte} accepted");
        }
    }
    // Forged lists with a valid checksum: out of order, out of range, a
    // count that disagrees with the length, bytes after the list.
    let table = HEADER_FIXED + SLOT_SIZE;
    for (at, value) in [(table + 8, 8u64), (table + 16, 10), (table, 3), (table, 0), (table + 24, 5)] {
        let mut f = file.clone();
        f[at..at + 8].copy_from_slice(&value.to_le_bytes());
        f[60..64].fill(0);
        let crc = crc32fast::hash(&f[..FileHeader::header_len_with(1, 2)]);
        f[60..64].copy_from_slice(&crc.to_le_bytes());
        let err = FileHeader::parse(&f).unwrap_err();
        assert!(matches!(&err, Error::File { reason: FileError::Header(_), .. }), "{value} at {at}: {err}");
    }
}

#[test]
fn every_single_bit_flip_is_rejected() {
    let (_, file) = sample();
    for byte in 0..file.len() {
        for bit in 0..8 {
            let mut f = file.clone();
            f[byte] ^= 1 << bit;
            assert!(FileHeader::parse(&f).is_err(), "flip of bit {bit} in byte {byte} accepted");
        }
    }
}
