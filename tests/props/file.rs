//! The packed-weight file loader: random headers round-trip; truncated,
//! flipped or overwritten bytes are refused; and files whose fields were
//! changed *with their checksums recomputed* (a checksum is no defence
//! against a buggy writer or a crafted file) load only when consistent:
//! a kernel trusts the payload size its layout implies.

use crate::ensure;
use crate::harness::{self, Cases, check};
use crate::strat::Rng;
use crate::weights::{Buf, OwnedW, SMALL, format_valid, operation_valid, pack_known_issue, wspec};
use kleidiai::Clamp;
use kleidiai::Parallelism;
use kleidiai::weights::file::{FileHeader, MAX_SLOTS, SlotHeader};
use kleidiai::weights::{PackOptions, PackedWeights, Scratch};
use proptest::prelude::*;
use std::io::Write;

fn name() -> impl Strategy<Value = String> {
    let registered: Vec<String> = kleidiai::registry::kernels().iter().map(|k| k.name.to_string()).collect();
    let mut pool = registered;
    pool.extend(["kai_matmul_x".to_string(), "a".repeat(87), "1.30.0".into(), String::new()]);
    proptest::sample::select(pool)
}

fn slot() -> impl Strategy<Value = SlotHeader> {
    (
        name().prop_filter("a slot names a kernel", |n| !n.is_empty()),
        name(),
        "[a-z0-9_]{0,31}",
        (0u32..=64, 0u32..=32, 0u32..=4, prop_oneof![Just(0u32), Just(32), any::<u32>()], 0u32..=256),
        0u64..=700,
    )
        .prop_map(|(gemm, gemv, format, (r, kr, sr, bl, vb), len)| SlotHeader {
            gemm_kernel: gemm,
            gemv_kernel: gemv,
            format,
            r,
            kr,
            sr,
            bl,
            vector_bytes: vb,
            offset: 0,
            len,
            crc32: 0,
        })
}

fn header() -> impl Strategy<Value = FileHeader> {
    (
        prop_oneof![4 => Just("1.30.0".to_string()), 1 => "[0-9.]{1,15}"],
        0u32..=9,
        0u32..=4,
        prop_oneof![1u64..=4096, any::<u64>()],
        prop_oneof![1u64..=4096, any::<u64>()],
        proptest::collection::vec(slot(), 1..=MAX_SLOTS),
    )
        .prop_map(|(v, kind, out, n, k, slots)| FileHeader {
            kleidiai_version: v,
            weight_kind: kind,
            output: out,
            n,
            k,
            slots,
        })
}

/// A complete file for `h`: payloads of random bytes laid out as
/// `PackedWeights::to_bytes` lays them out, offsets and checksums filled.
fn file_of(mut h: FileHeader, seed: u64) -> (FileHeader, Vec<u8>) {
    let mut rng = Rng::new(seed);
    let payloads: Vec<Vec<u8>> = h.slots.iter().map(|s| rng.bytes(s.len as usize)).collect();
    let mut offset = FileHeader::header_len(h.slots.len());
    for (s, p) in h.slots.iter_mut().zip(&payloads) {
        s.offset = offset as u64;
        s.crc32 = crc32(p);
        offset = (offset + p.len()).div_ceil(64) * 64;
    }
    let mut out = h.to_bytes().expect("header serialises");
    for p in &payloads {
        out.resize(out.len().div_ceil(64) * 64, 0);
        out.extend_from_slice(p);
    }
    (h, out)
}

/// CRC-32 (IEEE), as the format specifies.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[derive(Clone, Debug)]
enum Mutation {
    Truncate(usize),
    Flip(usize, u8),
    Overwrite(usize, u64),
    Append(u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 0u8..8).prop_map(|(a, b)| Mutation::Flip(a, b)),
        (any::<usize>(), any::<u64>()).prop_map(|(a, v)| Mutation::Overwrite(a, v)),
        (1u8..=100).prop_map(Mutation::Append),
    ]
}

fn mutate(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    match *m {
        Mutation::Truncate(at) => bytes.truncate(at % bytes.len().max(1)),
        Mutation::Flip(at, bit) => {
            let at = at % bytes.len();
            bytes[at] ^= 1 << bit;
        }
        Mutation::Overwrite(at, v) => {
            let at = at % bytes.len();
            let end = (at + 8).min(bytes.len());
            bytes[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
        }
        Mutation::Append(n) => bytes.extend(std::iter::repeat_n(0xA5, n as usize)),
    }
}

/// Headers serialise and parse back equal; any corruption of the bytes is
/// refused by `FileHeader::parse` or leaves an equal header (a change past
/// the payloads); `PackedWeights::from_bytes` never panics.
#[test]
fn headers_round_trip_and_corruption_is_refused() {
    let strategy = (header(), any::<u64>(), proptest::collection::vec(mutation(), 0..=3));
    check("file::headers_round_trip_and_corruption_is_refused", Cases::new(30_000, 600), strategy, |(h, seed, ms)| {
        let bad_names = h.slots.iter().any(|s| s.gemm_kernel.len() >= 88 || s.gemv_kernel.len() >= 88)
            || h.kleidiai_version.len() >= 16;
        let h = FileHeader { n: h.n.max(1), k: h.k.max(1), ..h };
        if bad_names {
            harness::invalid();
            ensure!(h.to_bytes().is_err(), "over-long names serialised");
            return Ok(());
        }
        let (h, file) = file_of(h, seed);
        let parsed = FileHeader::parse(&file);
        harness::valid();
        ensure!(parsed.as_ref().ok() == Some(&h), "round trip: {parsed:?}");
        let _ = PackedWeights::from_bytes(&file);
        let mut bad = file.clone();
        for m in &ms {
            mutate(&mut bad, m);
        }
        harness::count(ms.is_empty());
        if let Ok(p) = FileHeader::parse(&bad) {
            // Only bytes no field covers changed (padding between payloads);
            // bytes appended are refused (the file ends at its last payload).
            ensure!(p == h, "a corrupted file parsed as another header: {p:?}");
            ensure!(bad.len() == file.len(), "{} bytes after the end accepted", bad.len() as i64 - file.len() as i64);
            for s in &h.slots {
                let r = s.offset as usize..(s.offset + s.len) as usize;
                ensure!(bad[r.clone()] == file[r], "a corrupted payload passed its checksum");
            }
        }
        let _ = PackedWeights::from_bytes(&bad);
        Ok(())
    });
}

#[derive(Clone, Copy, Debug)]
enum Field {
    N(i8),
    K(i8),
    Kind(u32),
    Output(u32),
    R(i8),
    Kr(i8),
    Sr(i8),
    Bl(u32),
    VectorBytes(u32),
    Len(i16),
    Gemm(usize),
    Gemv(usize),
    DropSlot,
}

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        (-8i8..=8).prop_map(Field::N),
        (-8i8..=8).prop_map(Field::K),
        (0u32..=8).prop_map(Field::Kind),
        (0u32..=3).prop_map(Field::Output),
        (-4i8..=4).prop_map(Field::R),
        (-4i8..=4).prop_map(Field::Kr),
        (-2i8..=2).prop_map(Field::Sr),
        prop_oneof![Just(0u32), Just(32), Just(64), Just(96)].prop_map(Field::Bl),
        prop_oneof![Just(0u32), Just(16), Just(32), Just(64)].prop_map(Field::VectorBytes),
        (-70i16..=70).prop_map(Field::Len),
        any::<usize>().prop_map(Field::Gemm),
        any::<usize>().prop_map(Field::Gemv),
        Just(Field::DropSlot),
    ]
}

fn shift32(v: u32, d: i8) -> u32 {
    (v as i64 + d as i64).max(0) as u32
}

/// Rewrites one field of a real packed file and fixes every checksum.
fn rewrite(file: &[u8], f: Field) -> Option<Vec<u8>> {
    let h = FileHeader::parse(file).ok()?;
    let mut payloads: Vec<Vec<u8>> =
        h.slots.iter().map(|s| file[s.offset as usize..(s.offset + s.len) as usize].to_vec()).collect();
    let mut h2 = h.clone();
    let names: Vec<&str> = kleidiai::registry::kernels().iter().map(|k| k.name).collect();
    let s = &mut h2.slots[0];
    match f {
        Field::N(d) => h2.n = (h2.n as i64 + d as i64).max(1) as u64,
        Field::K(d) => h2.k = (h2.k as i64 + d as i64).max(1) as u64,
        Field::Kind(v) => h2.weight_kind = v,
        Field::Output(v) => h2.output = v,
        Field::R(d) => s.r = shift32(s.r, d),
        Field::Kr(d) => s.kr = shift32(s.kr, d),
        Field::Sr(d) => s.sr = shift32(s.sr, d),
        Field::Bl(v) => s.bl = v,
        Field::VectorBytes(v) => s.vector_bytes = v,
        Field::Len(d) => {
            let len = (payloads[0].len() as i64 + d as i64).max(0) as usize;
            payloads[0].resize(len, 0);
        }
        Field::Gemm(i) => s.gemm_kernel = names[i % names.len()].to_string(),
        Field::Gemv(i) => s.gemv_kernel = if i % 5 == 0 { String::new() } else { names[i % names.len()].to_string() },
        Field::DropSlot => {
            if h2.slots.len() == 1 {
                return None;
            }
            h2.slots.remove(0);
            payloads.remove(0);
        }
    }
    let mut offset = FileHeader::header_len(h2.slots.len());
    for (s, p) in h2.slots.iter_mut().zip(&payloads) {
        s.offset = offset as u64;
        s.len = p.len() as u64;
        s.crc32 = crc32(p);
        offset = (offset + p.len()).div_ceil(64) * 64;
    }
    let mut out = h2.to_bytes().ok()?;
    for p in &payloads {
        out.resize(out.len().div_ceil(64) * 64, 0);
        out.extend_from_slice(p);
    }
    Some(out)
}

/// Real packed files with one field rewritten and checksums fixed: either
/// refused, or consistent (then the loaded weights compute like weights
/// packed for that shape: results are finite where the original's are,
/// rows come back, nothing reads past a payload).
#[test]
fn rewritten_fields_with_valid_checksums() {
    if !cfg!(target_arch = "aarch64") {
        // Without kernels nothing is packed, so there is no file to rewrite.
        let _ = writeln!(
            std::io::stdout().lock(),
            "SKIP file::rewritten_fields_with_valid_checksums: no packed layouts exist off aarch64 (nothing to save)"
        );
        return;
    }
    let strategy = (wspec(SMALL), field(), any::<u64>());
    check("file::rewritten_fields_with_valid_checksums", Cases::new(2_000, 480), strategy, |(s, f, seed)| {
        if !(format_valid(&s) && operation_valid(&s)) {
            return Ok(());
        }
        let owned = OwnedW::build(&s);
        let w = owned.view();
        let act = s.kind.activations()[seed as usize % s.kind.activations().len()];
        let packed = PackedWeights::pack(&w, &PackOptions { activation: act, ..PackOptions::default() });
        if let Some(id) = packed.as_ref().err().and_then(|e| pack_known_issue(&s, e)) {
            return harness::known_issue(id, &format!("{:?}: {}", s.kind, packed.unwrap_err()));
        }
        ensure!(packed.is_ok(), "pack: {}", packed.unwrap_err());
        let packed = packed.unwrap();
        let Ok(file) = packed.to_bytes() else {
            // Nothing packed here (no kernel on this CPU): nothing to load.
            return Ok(());
        };
        let Some(bad) = rewrite(&file, f) else { return Ok(()) };
        // A rewritten field is an invalid file unless it stays consistent.
        harness::invalid();
        let Ok(loaded) = PackedWeights::from_bytes(&bad) else { return Ok(()) };
        // Accepted: it must be self-consistent. A payload of another size
        // than its layout needs is never accepted: repacking weights of
        // the loaded shape gives the same payload sizes.
        let (n, k) = (loaded.n(), loaded.k());
        let h = FileHeader::parse(&bad).unwrap();
        let mut rng = Rng::new(seed);
        let mut spec2 = s.clone();
        spec2.n = n;
        spec2.k = k;
        spec2.bl = h.slots[0].bl as usize;
        spec2.data = crate::strat::Len::Exact;
        spec2.scales = crate::strat::Len::Exact;
        spec2.offsets = crate::strat::Len::Exact;
        spec2.kxn = false;
        // The loaded weights are only run when their payload sizes are
        // confirmed by packing weights of the loaded shape the same way: a
        // kernel reads the size its layout implies, so running weights with
        // a short payload would read past it.
        // Labels rewritten consistently (a weight kind the same kernel also
        // takes, a shape within the same padded blocks, ...) cannot be told
        // from a genuine file: what must hold is that every payload is
        // exactly the size its kernel packs for the loaded shape (checked
        // against a fresh pack of that shape wherever it picks the same
        // kernel), and that the weights then compute and unpack.
        let h0 = FileHeader::parse(&file).unwrap();
        let same_kind = loaded.kind() == packed.kind() && h.output == h0.output;
        let h2 = if same_kind && format_valid(&spec2) {
            let o2 = OwnedW::build(&spec2);
            let p2 = PackedWeights::pack(&o2.view(), &PackOptions { activation: act, ..PackOptions::default() });
            p2.ok().and_then(|p2| p2.to_bytes().ok()).and_then(|f2| FileHeader::parse(&f2).ok())
        } else {
            None
        };
        let served: Vec<&str> = loaded.layouts().iter().map(|l| l.0).collect();
        for sl in h.slots.iter().filter(|sl| served.contains(&sl.gemm_kernel.as_str())) {
            let same =
                h2.as_ref().and_then(|h2| h2.slots.iter().find(|x| x.gemm_kernel == sl.gemm_kernel && x.bl == sl.bl));
            if let Some(s2) = same {
                if s2.len != sl.len {
                    return harness::known_issue(
                        "load-payload-size-unchecked",
                        &format!(
                            "{f:?}: PackedWeights::from_bytes accepted a {}-byte payload for {}, whose {n}x{k} \
                             layout packs to {} bytes",
                            sl.len, sl.gemm_kernel, s2.len
                        ),
                    );
                }
                harness::valid();
            }
        }
        let m = 1 + rng.below(3);
        let xv = rng.vec_f32(m * k);
        let x = Buf::new(act, &xv);
        let mut y = Buf::new(act, &vec![0.0; m * n]);
        let r = loaded.matmul(m, x.act(), y.out(), Clamp::NONE, Parallelism::Sequential, &mut Scratch::default());
        if let Err(e) = r {
            // Refused safely at the call, but the file should have been
            // refused at load time.
            return harness::known_issue(
                "load-accepts-inconsistent-layout",
                &format!(
                    "{f:?}: PackedWeights::from_bytes accepted a file whose weights then refuse a valid call: {e}"
                ),
            );
        }
        let mut row = vec![0f32; k];
        ensure!(loaded.row(n - 1, &mut row).is_ok(), "{f:?}: last row");
        Ok(())
    });
}
