//! Seed inputs for the committed corpus (`fuzz/corpus/<target>/`), written
//! by `cargo run --release --example seeds` in `fuzz/` and then minimised
//! with `cargo fuzz cmin`.

use crate::validation::{decode, run_tagged};
use kleidiai::weights::file::{FileHeader, SlotHeader};
use std::collections::BTreeSet;

/// A packed-weight file: the header for `slots` payloads of the given
/// lengths, each 64-byte aligned, with their checksums.
fn weight_file(kind: u32, output: u32, n: u64, k: u64, slots: &[(&str, &str, &str, [u32; 5], usize)]) -> Vec<u8> {
    let mut h = FileHeader { kleidiai_version: "1.30.0".into(), weight_kind: kind, output, n, k, slots: Vec::new() };
    let mut offset = FileHeader::header_len(slots.len());
    let mut payloads = Vec::new();
    for (i, (gemm, gemv, format, [r, kr, sr, bl, vb], len)) in slots.iter().enumerate() {
        let payload: Vec<u8> = (0..*len).map(|j| (j * 31 + i * 7) as u8).collect();
        h.slots.push(SlotHeader {
            gemm_kernel: gemm.to_string(),
            gemv_kernel: gemv.to_string(),
            format: format.to_string(),
            r: *r,
            kr: *kr,
            sr: *sr,
            bl: *bl,
            vector_bytes: *vb,
            offset: offset as u64,
            len: *len as u64,
            crc32: crc32fast::hash(&payload),
        });
        offset = (offset + len).div_ceil(64) * 64;
        payloads.push(payload);
    }
    let mut out = h.to_bytes().expect("a valid header");
    for p in payloads {
        out.resize(out.len().div_ceil(64) * 64, 0);
        out.extend_from_slice(&p);
    }
    out
}

/// `file` (a valid version 1 file) as version 2, listing `channels` as the
/// output channels whose weights are not finite (the payloads move by the
/// longer header, a multiple of 64 bytes).
fn with_non_finite(file: &[u8], channels: &[u64]) -> Vec<u8> {
    let mut h = FileHeader::parse(file).expect("a valid file");
    let shift =
        (FileHeader::header_len_with(h.slots.len(), channels.len()) - FileHeader::header_len(h.slots.len())) as u64;
    let payloads: Vec<&[u8]> = h.slots.iter().map(|s| &file[s.offset as usize..(s.offset + s.len) as usize]).collect();
    for s in &mut h.slots {
        s.offset += shift;
    }
    let mut out = h.to_bytes_with(channels).expect("a valid header");
    for p in payloads {
        out.resize(out.len().div_ceil(64) * 64, 0);
        out.extend_from_slice(p);
    }
    out
}

/// A repacked-ggml container (`KAIRSGGM`) around packed-weight files.
fn container(typ: u32, k: u64, n: u64, files: &[Vec<u8>]) -> Vec<u8> {
    let table = 64 + (files.len() * 16).div_ceil(64) * 64;
    let mut out = vec![0u8; table];
    out[0..8].copy_from_slice(b"KAIRSGGM");
    out[8..12].copy_from_slice(&1u32.to_le_bytes());
    out[12..16].copy_from_slice(&typ.to_le_bytes());
    out[16..24].copy_from_slice(&k.to_le_bytes());
    out[24..32].copy_from_slice(&n.to_le_bytes());
    out[32..36].copy_from_slice(&(files.len() as u32).to_le_bytes());
    for (i, f) in files.iter().enumerate() {
        out.resize(out.len().div_ceil(64) * 64, 0);
        let off = out.len() as u64;
        out[64 + 16 * i..72 + 16 * i].copy_from_slice(&off.to_le_bytes());
        out[72 + 16 * i..80 + 16 * i].copy_from_slice(&(f.len() as u64).to_le_bytes());
        out.extend_from_slice(f);
    }
    let crc = crc32fast::hash(&out[..table]);
    out[40..44].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Seeds of `packed_file`: valid files and containers, and the same with
/// bytes after their end (the first byte is the target's mode: 1 also loads
/// a copy with recomputed checksums).
pub fn packed_file() -> Vec<(String, Vec<u8>)> {
    const I8MM: &str = "kai_matmul_clamp_f32_qai8dxp4x8_qsi4cxp4x8_8x4x32_neon_i8mm";
    const DOT: &str = "kai_matmul_clamp_f32_qai8dxp1x8_qsi4cxp4x8_1x4x32_neon_dotprod";
    const SME: &str = "kai_matmul_clamp_f32_qai8dxp1vlx4_qsi4c32p4vlx4_1vlx4vl_sme2_mopa";
    const F32: &str = "kai_matmul_clamp_f32_f32_f32p8x1biasf32_6x8x4_neon_mla";
    let one = weight_file(5, 0, 8, 64, &[(I8MM, DOT, "qsi4cxp", [4, 16, 2, 0, 0], 320)]);
    let two = weight_file(
        6,
        0,
        16,
        128,
        &[(SME, "", "qsi4c32p", [64, 4, 1, 32, 64], 1200), (I8MM, DOT, "qsi4c32p", [4, 16, 2, 32, 0], 1152)],
    );
    let float = weight_file(1, 0, 8, 4, &[(F32, "", "f32p_bias", [8, 1, 1, 0, 0], 160)]);
    let half = weight_file(2, 1, 3, 5, &[(F32, "", "f16p", [16, 2, 1, 0, 0], 200)]);
    let four = weight_file(
        4,
        2,
        2,
        2,
        &[
            ("a", "", "x", [1, 1, 1, 0, 0], 1),
            ("b", "", "x", [1, 1, 1, 0, 0], 0),
            ("c", "c", "x", [1, 1, 1, 1, 1], 64),
            ("d.e_f", "", "y", [0, 0, 0, 0, 0], 3),
        ],
    );
    let mut out = vec![];
    for (name, f) in [("one_slot", &one), ("two_slots", &two), ("f32", &float), ("f16", &half), ("four_slots", &four)] {
        out.push((format!("file_{name}"), [&[1u8][..], f].concat()));
    }
    out.push(("file_raw".into(), [&[0u8][..], &one].concat()));
    // Version 2: the non-finite output channels after the slot table.
    let v2 = with_non_finite(&one, &[0, 5, 7]);
    out.push(("file_non_finite".into(), [&[1u8][..], &v2].concat()));
    out.push(("ggml_non_finite".into(), [&[1u8][..], &container(2, 64, 8, std::slice::from_ref(&v2))].concat()));
    out.push(("file_header_only".into(), [&[1u8][..], &one[..FileHeader::header_len(1)]].concat()));
    out.push(("ggml_q4_0".into(), [&[1u8][..], &container(2, 64, 8, std::slice::from_ref(&one))].concat()));
    out.push(("ggml_f16_batches".into(), [&[1u8][..], &container(1, 5, 3, &[half.clone(), half.clone()])].concat()));
    out.push(("ggml_q8_0".into(), [&[0u8][..], &container(8, 128, 16, &[two])].concat()));
    // Bytes after the declared end (issue 15): refused by every loader with
    // `FileError::TrailingBytes`, whether after a file, after a container,
    // or inside a container after a batch's file (the batch declared longer).
    for extra in [1usize, 64, 4096] {
        let tail: Vec<u8> = (0..extra).map(|j| (j * 13) as u8).collect();
        out.push((format!("file_trailing_{extra}"), [&[1u8][..], &one, &tail].concat()));
        let ggml = container(2, 64, 8, std::slice::from_ref(&one));
        out.push((format!("ggml_trailing_{extra}"), [&[1u8][..], &ggml, &tail].concat()));
    }
    let long_batch = [&one[..], &[0u8; 64][..]].concat();
    out.push(("ggml_batch_trailing".into(), [&[1u8][..], &container(2, 64, 8, &[long_batch])].concat()));
    out
}

/// Seeds of `validation`: random inputs, each kept when it exercises
/// something (a tag such as `pack Int4 F32 ok`) no earlier one did; up to
/// `per_tag` inputs a tag. Deterministic. A panic is reported and skipped.
pub fn validation(tries: usize, per_tag: usize) -> Vec<(String, Vec<u8>)> {
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    let mut out = Vec::new();
    let mut rng = fastrand::Rng::with_seed(0x2545_F491_4F6C_DD1D);
    for i in 0..tries {
        let mut bytes = vec![0u8; 8 + rng.usize(..200)];
        rng.fill(&mut bytes);
        let Some(calls) = decode(&bytes) else { continue };
        let tags: BTreeSet<String> = match std::panic::catch_unwind(|| run_tagged(calls)) {
            Ok(t) => t,
            Err(_) => {
                eprintln!("seed candidate {i} panicked: {bytes:02x?}");
                continue;
            }
        };
        let fresh: Vec<&String> = tags.iter().filter(|t| seen.get(*t).copied().unwrap_or(0) < per_tag).collect();
        if let Some(first) = fresh.first() {
            let name = first.replace(' ', "_").to_lowercase();
            out.push((format!("{name}_{i}"), bytes.clone()));
            for t in tags {
                *seen.entry(t).or_default() += 1;
            }
        }
    }
    out
}
