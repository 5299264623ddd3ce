//! ggml's KleidiAI path: repack `src0` weights (Q4_0, Q8_0, F16, F32) once,
//! then `mul_mat` and `get_rows` with ggml's tensor semantics.
//!
//! Kernels follow ggml's tables (`ggml-cpu/kleidiai/kernels.cpp`), first
//! runnable entry wins, and a weight holds up to two packed layouts like
//! ggml's two slots (an SME one and a NEON one, used when SME is off):
//!
//! | type | SME2 | SME | SVE (256-bit VL only) | I8MM | DOTPROD |
//! |---|---|---|---|---|---|
//! | Q4_0 | f16p1vlx2 mopa / qsi8d32p1x4 sdot | - | qsi8d32p4x8 16x8 i8mm / 1x8 dotprod | qsi8d32p4x8 16x4 / 1x4x32 dotprod | qsi8d32p4x4 16x4 / 1x4 |
//! | Q8_0 | qai8dxp1vlx4 mopa / 1x4 dot | same, SME | - | qai8dxp4x8 16x4 / 1x8 dotprod | qai8dxp4x4 16x4 / 1x4 |
//! | F32 | f32p2vlx1 mopa / f32 1x16vl mla | f32p2vlx1 mopa | - | - | - |
//! | F16 | bf16p2vlx2 mopa | - | - | - | - |
//!
//! Memory, as ggml: the second (non-SME) slot is packed only when the first
//! is an SME one and more threads may run than SME workers (ggml's
//! `GGML_TOTAL_THREADS` hint, when set, at most the SME cap means no second
//! slot). F16 weights are kept as given, as ggml keeps its F16 tensor, and
//! packed per call (ggml packs them into its work buffer on every call too).
//! So a repacked tensor never holds more than ggml's allocation for it.
//!
//! Like ggml (whose KleidiAI path takes F16 weights only for more than one
//! activation row), F16 weights with `m = 1` do not go to a KleidiAI kernel:
//! the portable reference computes them in f32 from the kept f16 weights.
//!
//! `GGML_KLEIDIAI_SME`: unset, use SME when the CPU has it; `0`, never; `N`,
//! at most N threads run SME kernels at once (the crate's SME worker cap).
//! Anything else: one warning on stderr naming the value (once per
//! process), then as unset (ggml's own handling of its variable).

use super::tensor::{GgmlType, Tensor, TensorMut};
use crate::cpu::{CpuFeature, Features};
use crate::error::{Error, FileError, Result};
use crate::formats::{BlockInt4, FloatWeights, Order, Q4_0};
use crate::packed::Clamp;
use crate::par::Parallelism;
use crate::weights::policy::Pairing;
use crate::weights::{Activation, ActivationMut, NonFinite, PackOptions, PackedWeights, Scratch, WeightsRef};
use half::f16;
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// Environment variable with ggml's meaning (see the module docs).
pub const SME_ENV: &str = "GGML_KLEIDIAI_SME";

/// ggml's hint of the threads a graph runs on (see the module docs).
pub const TOTAL_THREADS_ENV: &str = "GGML_TOTAL_THREADS";

/// Whether ggml packs its second (non-SME) slot: unless `GGML_TOTAL_THREADS`
/// says no more threads run than SME workers may (ggml's
/// `kleidiai_pack_fallback_allowed`). An unreadable hint counts as none, as
/// in ggml.
fn second_slot_allowed() -> bool {
    match std::env::var(TOTAL_THREADS_ENV).ok().and_then(|v| v.trim().parse::<usize>().ok()) {
        Some(hint) if hint > 0 => hint > crate::par::sme_thread_cap(),
        _ => true,
    }
}

type Pair = (&'static str, Option<&'static str>);

const Q4_0_TABLE: &[Pair] = &[
    (
        "kai_matmul_clamp_f32_f16p1vlx2_qsi4c32p4vlx2_1vlx4vl_sme2_mopa",
        Some("kai_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4vlx4_1x4vl_sme2_sdot"),
    ),
    (
        "kai_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p8x8_16x8_sve_i8mm",
        Some("kai_matmul_clamp_f32_qsi8d32p1x8_qsi4c32p8x8_1x8_sve_dotprod"),
    ),
    (
        "kai_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm",
        Some("kai_matmul_clamp_f32_qsi8d32p1x8_qsi4c32p4x8_1x4x32_neon_dotprod"),
    ),
    (
        "kai_matmul_clamp_f32_qsi8d32p4x4_qsi4c32p4x4_16x4_neon_dotprod",
        Some("kai_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4x4_1x4_neon_dotprod"),
    ),
];

const Q8_0_TABLE: &[Pair] = &[
    (
        "kai_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa",
        Some("kai_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme2_dot"),
    ),
    (
        "kai_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme_mopa",
        Some("kai_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme_dot"),
    ),
    (
        "kai_matmul_clamp_f32_qai8dxp4x8_qsi8cxp4x8_16x4_neon_i8mm",
        Some("kai_matmul_clamp_f32_qai8dxp1x8_qsi8cxp4x8_1x4_neon_dotprod"),
    ),
    (
        "kai_matmul_clamp_f32_qai8dxp4x4_qsi8cxp4x4_16x4_neon_dotprod",
        Some("kai_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4x4_1x4_neon_dotprod"),
    ),
];

const F32_TABLE: &[Pair] = &[
    (
        "kai_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa",
        Some("kai_matmul_clamp_f32_f32_f32p2vlx1b_1x16vl_sme2_mla"),
    ),
    ("kai_matmul_clamp_f32_f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa", None),
];

const F16_TABLE: &[Pair] = &[("kai_matmul_clamp_f32_bf16p2vlx2_bf16p2vlx2_2vlx2vl_sme2_mopa", None)];

/// ggml's table for a weight type.
pub fn kernel_table(typ: GgmlType) -> &'static [(&'static str, Option<&'static str>)] {
    match typ {
        GgmlType::Q4_0 => Q4_0_TABLE,
        GgmlType::Q8_0 => Q8_0_TABLE,
        GgmlType::F32 => F32_TABLE,
        GgmlType::F16 => F16_TABLE,
    }
}

/// Reads `GGML_KLEIDIAI_SME`: None when unset (use SME if present),
/// Some(0) to switch SME off, Some(n) to cap SME threads at n. A value that
/// is not a non-negative integer (or not UTF-8) is an error here; ggml's
/// path ([`GgmlWeights::repack`]) does what ggml does with it instead: one
/// warning on stderr naming the value, then the automatic setting.
pub fn sme_setting() -> Result<Option<usize>> {
    let value = std::env::var_os(SME_ENV).map(|v| v.to_string_lossy().into_owned());
    parse_sme_setting(value.as_deref())
}

/// [`sme_setting`] for a given value of the variable.
pub fn parse_sme_setting(value: Option<&str>) -> Result<Option<usize>> {
    match value {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<usize>()
            .map(Some)
            .map_err(|_| Error::bad_value(SME_ENV, format!("'{v}'"), "not a non-negative integer")),
    }
}

/// The features ggml's selection may use now: the crate's current
/// features, without SME when `GGML_KLEIDIAI_SME=0`; with a cap applied
/// (process-wide, as in ggml) when `GGML_KLEIDIAI_SME=N`.
///
/// An unreadable `GGML_KLEIDIAI_SME` is ggml's case: warned about once per
/// process (on stderr, naming the value), then treated as unset.
fn ggml_features() -> Result<Features> {
    let f = Features::current();
    let setting = sme_setting().unwrap_or_else(|_| {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            use std::io::Write as _;
            let v = std::env::var_os(SME_ENV).unwrap_or_default();
            let _ = writeln!(
                std::io::stderr(),
                "kleidiai: invalid {SME_ENV}='{}' (not a non-negative integer); using the automatic SME setting",
                v.to_string_lossy()
            );
        });
        None
    });
    Ok(match setting {
        Some(0) => f.without(&[CpuFeature::Sme]),
        Some(n) => {
            crate::par::set_sme_thread_cap(n);
            f
        }
        None => f,
    })
}

/// Weights repacked for ggml's kernels (one [`PackedWeights`] per `ne02`
/// batch; only F16 weights may have several).
#[derive(Debug)]
pub struct GgmlWeights {
    typ: GgmlType,
    k: usize,
    n: usize,
    batches: Vec<PackedWeights>,
    hybrid: bool,
}

/// A batch as ggml computes it: what the kernels give, no non-finite scan
/// ([`NonFinite::Kernel`]; ggml's own path scans nothing either).
fn ggml_policy(mut w: PackedWeights) -> PackedWeights {
    w.set_non_finite(NonFinite::Kernel);
    w
}

const CONTAINER_MAGIC: [u8; 8] = *b"KAIRSGGM";
const CONTAINER_FIXED: usize = 64;

/// The container's fixed header as stored: magic, version (1), ggml type,
/// k, n, batches, flags (bit 0: hybrid), CRC-32 of the header and batch
/// table with this field zeroed, reserved zeros; then the batch table
/// (offset, length per batch), padded to 64 bytes.
#[derive(FromBytes, IntoBytes, zerocopy::KnownLayout, zerocopy::Immutable, zerocopy::Unaligned)]
#[repr(C)]
struct RawContainer {
    magic: [u8; 8],
    version: U32,
    typ: U32,
    k: U64,
    n: U64,
    batches: U32,
    flags: U32,
    crc32: U32,
    reserved: [u8; 20],
}

/// One batch table entry as stored.
#[derive(FromBytes, IntoBytes, zerocopy::KnownLayout, zerocopy::Immutable, zerocopy::Unaligned)]
#[repr(C)]
struct RawBatch {
    offset: U64,
    len: U64,
}

const _: () = assert!(size_of::<RawContainer>() == CONTAINER_FIXED && size_of::<RawBatch>() == 16);

/// A range of shared bytes, itself shareable (a batch inside a container).
struct SubBytes {
    parent: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>,
    range: core::ops::Range<usize>,
}

impl AsRef<[u8]> for SubBytes {
    fn as_ref(&self) -> &[u8] {
        &(*self.parent).as_ref()[self.range.clone()]
    }
}

/// Reused buffers of [`GgmlWeights::mul_mat`]: the packed LHS and dense
/// copies of strided operands.
#[derive(Debug, Default)]
pub struct MulMatScratch {
    inner: Scratch,
    second: Scratch,
    lhs: Vec<f32>,
    out: Vec<f32>,
}

/// Writes the dense `m x n` output of batch `b` into `dst` (row strides
/// checked by `mul_mat`).
fn store(out: &[f32], b: usize, dst: &mut TensorMut<'_>) {
    let n = dst.ne[0] as usize;
    for (i, row) in out.chunks_exact(n).enumerate() {
        let at = b * dst.nb[2] + i * dst.nb[1];
        for (j, v) in row.iter().enumerate() {
            dst.data[at + 4 * j..at + 4 * j + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()
}

impl GgmlWeights {
    /// Repacks a weight tensor `src0` (`ne[0] = k`, `ne[1] = n`; F16 may have
    /// `ne[2]` batches; rows contiguous). Q4_0 and Q8_0 rows need `k` a
    /// multiple of 32.
    pub fn repack(src0: &Tensor<'_>) -> Result<GgmlWeights> {
        let d = src0.check("src0")?;
        let (k, n) = (d[0], d[1]);
        if d[3] != 1 || (d[2] != 1 && src0.typ != GgmlType::F16) {
            return Err(Error::ShapeMismatch {
                what: "src0 (only F16 weights may be batched, ne[2])",
                got: format!("{:?} ne {:?}", src0.typ, src0.ne),
                want: "2-D".into(),
            });
        }
        let f = ggml_features()?;
        let second = second_slot_allowed();
        let row_bytes = src0.typ.row_bytes(k)?;
        let mut batches = Vec::with_capacity(d[2]);
        for b in 0..d[2] {
            // Rows are contiguous but may be `nb[1]` apart: gather them.
            let mut bytes = Vec::with_capacity(n * row_bytes);
            for r in 0..n {
                let at = b * src0.nb[2] + r * src0.nb[1];
                bytes.extend_from_slice(&src0.data[at..at + row_bytes]);
            }
            let pairings: Vec<Pairing> = kernel_table(src0.typ)
                .iter()
                .map(|&(gemm, gemv)| Pairing { why: "ggml's table", ..Pairing::new(gemm, gemv) })
                .collect();
            // ggml keeps F16 weights as given and packs them per call.
            let opts = PackOptions {
                non_sme_layout: second,
                keep_as_given: true,
                features: Some(f),
                ..PackOptions::default()
            };
            let packed = match src0.typ {
                GgmlType::Q4_0 => {
                    let w = WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: &bytes, bias: None }));
                    PackedWeights::pack_with(&w, &pairings, &opts)?
                }
                GgmlType::Q8_0 => {
                    let blocks = super::blocks::q8_0_blocks_from_bytes(&bytes)?;
                    let w = WeightsRef::GgmlQ8_0 { n, k, blocks: &blocks };
                    PackedWeights::pack_with(&w, &pairings, &opts)?
                }
                GgmlType::F32 => {
                    let data = f32s(&bytes);
                    let w = WeightsRef::F32(FloatWeights { n, k, order: Order::NxK, data: &data, bias: None });
                    PackedWeights::pack_with(&w, &pairings, &opts)?
                }
                GgmlType::F16 => {
                    // Kept as given and packed per call (ggml's F16 path).
                    let data: Vec<f16> = bytes.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect();
                    let w = WeightsRef::F16(FloatWeights { n, k, order: Order::NxK, data: &data, bias: None });
                    PackedWeights::pack_with(&w, &pairings, &opts)?
                }
            };
            batches.push(ggml_policy(packed));
        }
        Ok(GgmlWeights { typ: src0.typ, k, n, batches, hybrid: false })
    }

    /// Turns ggml's hybrid mode on or off (default off). With it on, when
    /// the weights hold an SME and a non-SME layout and `mul_mat` gets more
    /// threads than the SME cap ([`crate::par::sme_thread_cap`], set by
    /// `GGML_KLEIDIAI_SME=N`), the SME kernel computes the first columns on
    /// `cap` threads while the non-SME kernel computes the rest on the other
    /// threads. The column split (a multiple of both kernels' column steps,
    /// proportional to the threads) depends on the thread count, so results
    /// do too (they repeat bit for bit for the same count); off, results are
    /// the same for every thread count.
    pub fn set_hybrid(&mut self, on: bool) {
        self.hybrid = on;
    }

    /// Serialises the repacked weights (ggml keeps them in the tensor's own
    /// memory): a small container header, then one packed-weight file
    /// ([`crate::weights::file`]) per batch, each 64-byte aligned.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let files: Vec<Vec<u8>> = self.batches.iter().map(PackedWeights::to_bytes).collect::<Result<_>>()?;
        let table = CONTAINER_FIXED + (files.len() * 16).div_ceil(64) * 64;
        let mut head = RawContainer::new_zeroed();
        head.magic = CONTAINER_MAGIC;
        head.version = 1.into();
        head.typ = (self.typ as u32).into();
        (head.k, head.n) = ((self.k as u64).into(), (self.n as u64).into());
        head.batches = u32::try_from(files.len()).map_err(|_| Error::Overflow("batches".into()))?.into();
        head.flags = u32::from(self.hybrid).into();
        let mut entries = Vec::with_capacity(files.len());
        let mut at = table as u64;
        for f in &files {
            entries.push(RawBatch { offset: at.into(), len: (f.len() as u64).into() });
            at = (at + f.len() as u64).div_ceil(64) * 64;
        }
        let mut out = Vec::with_capacity(at as usize);
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(entries.as_bytes());
        out.resize(table, 0);
        let crc = crc32fast::hash(&out);
        if let Ok((h, _)) = RawContainer::mut_from_prefix(&mut out) {
            h.crc32 = crc.into();
        }
        for (f, e) in files.iter().zip(&entries) {
            out.resize(e.offset.get() as usize, 0);
            out.extend_from_slice(f);
        }
        Ok(out)
    }

    /// Views serialised weights in place (no copy of the packed data): the
    /// container and every batch's header, layouts and bounds are checked,
    /// and the payload checksums too when `verify` (skip them only for bytes
    /// verified before). `bytes` must keep each payload 64-byte aligned
    /// (the start of the buffer 64-byte aligned) and hold exactly what
    /// [`to_bytes`](Self::to_bytes) wrote: a byte more is
    /// [`FileError::TrailingBytes`]. `verify: false` is
    /// [`from_shared_unverified`](Self::from_shared_unverified); the
    /// loaders, [`from_bytes`](Self::from_bytes) included, have the names
    /// of [`PackedWeights`]'.
    pub fn from_shared(bytes: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>, verify: bool) -> Result<GgmlWeights> {
        let data = (*bytes).as_ref();
        let bad = |why: String| Error::ggml_container(FileError::Header(why));
        let head = RawContainer::ref_from_prefix(data).ok().map(|(h, _)| h).filter(|h| h.magic == CONTAINER_MAGIC);
        let Some(head) = head else { return Err(Error::ggml_container(FileError::Magic)) };
        if head.version.get() != 1 {
            return Err(Error::ggml_container(FileError::Version { found: head.version.get(), supported: 1 }));
        }
        let typ = GgmlType::from_id(head.typ.get()).map_err(|e| bad(e.to_string()))?;
        let (k, n) = (usize::try_from(head.k.get()), usize::try_from(head.n.get()));
        let (Ok(k), Ok(n)) = (k, n) else { return Err(Error::Overflow("container shape".into())) };
        if head.reserved.iter().any(|b| *b != 0) {
            return Err(bad("reserved header bytes are not zero".into()));
        }
        let count = head.batches.get() as usize;
        if count == 0 || count > 1 << 16 {
            return Err(bad(format!("{count} batches")));
        }
        let table = CONTAINER_FIXED + (count * 16).div_ceil(64) * 64;
        if data.len() < table {
            let (need, have) = (table as u64, data.len() as u64);
            return Err(Error::ggml_container(FileError::Truncated { part: "batch table".into(), need, have }));
        }
        // The checksum covers the header and table with its own field zeroed.
        let mut checked = data[..table].to_vec();
        if let Ok((h, _)) = RawContainer::mut_from_prefix(&mut checked) {
            h.crc32 = U32::ZERO;
        }
        if crc32fast::hash(&checked) != head.crc32.get() {
            return Err(Error::ggml_container(FileError::Checksum { part: "container header".into() }));
        }
        let entries = <[RawBatch]>::ref_from_prefix_with_elems(&data[CONTAINER_FIXED..], count);
        let Ok((entries, _)) = entries else { return Err(bad(format!("{count} batches in {table} bytes"))) };
        let mut batches = Vec::with_capacity(count);
        // Where the last batch ends: the writer stops there.
        let mut last_end = table as u64;
        for (i, e) in entries.iter().enumerate() {
            let (off, len) = (e.offset.get(), e.len.get());
            let end = off.checked_add(len).filter(|e| *e <= data.len() as u64);
            let Some(end) = end else {
                let (part, need, have) = (format!("batch {i}"), off.saturating_add(len), data.len() as u64);
                return Err(Error::ggml_container(FileError::Truncated { part, need, have }));
            };
            if off < table as u64 || off % 64 != 0 {
                return Err(bad(format!("batch {i} offset {off} is misaligned or overlaps the header")));
            }
            last_end = last_end.max(end);
            let view: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync> =
                std::sync::Arc::new(SubBytes { parent: bytes.clone(), range: off as usize..end as usize });
            let w =
                if verify { PackedWeights::from_shared(view)? } else { PackedWeights::from_shared_unverified(view)? };
            if w.n() != n || w.k() != k {
                let why = format!("batch {i} is {}x{}, the container says {n}x{k}", w.n(), w.k());
                return Err(Error::ggml_container(FileError::Layout { slot: i, why }));
            }
            batches.push(ggml_policy(w));
        }
        if data.len() as u64 > last_end {
            return Err(Error::ggml_container(FileError::TrailingBytes { extra: data.len() as u64 - last_end }));
        }
        Ok(GgmlWeights { typ, k, n, batches, hybrid: head.flags.get() & 1 == 1 })
    }

    #[cfg(test)]
    pub(crate) fn batch(&self, b: usize) -> &PackedWeights {
        &self.batches[b]
    }

    /// The weight type.
    pub fn typ(&self) -> GgmlType {
        self.typ
    }

    /// `(k, n)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.k, self.n)
    }

    /// The packed layouts (GEMM kernel, GEMV kernel) of the first batch, in
    /// ggml's slot order. Empty: no kernel runs here (the reference serves).
    pub fn layouts(&self) -> Vec<(&'static str, Option<&'static str>)> {
        self.batches[0].layouts()
    }

    /// Bytes of the packed layouts held, every batch (F16 weights, kept as
    /// given and packed per call, count as that copy).
    pub fn packed_bytes(&self) -> usize {
        self.batches.iter().map(PackedWeights::packed_bytes).sum()
    }

    /// Bytes of the unpacked copies kept (weights no kernel here takes,
    /// computed by the portable reference).
    pub fn reference_bytes(&self) -> usize {
        self.batches.iter().map(PackedWeights::reference_bytes).sum()
    }

    /// Bytes of each packed layout of the first batch, in ggml's slot order.
    pub fn slot_bytes(&self) -> Vec<usize> {
        self.batches[0].slot_bytes()
    }

    /// The kernel that serves `m` activation rows now (None: the reference).
    pub fn kernel_for(&self, m: usize) -> Option<&'static str> {
        if self.f16_single_row(m) {
            return None;
        }
        self.batches[0].kernel_for(m)
    }

    /// F16 weights with one activation row: ggml's KleidiAI path declines
    /// them (see the module docs).
    fn f16_single_row(&self, m: usize) -> bool {
        self.typ == GgmlType::F16 && m == 1
    }

    /// An upper bound of the scratch bytes `mul_mat` uses for `m` rows
    /// (ggml's work-size query): dense copies of one LHS batch and one output
    /// batch, plus the packed LHS (at most 4 bytes a value plus per-row and
    /// per-block metadata, with rows rounded up to a tile).
    pub fn work_size(&self, m: usize) -> Result<usize> {
        let dense = crate::error::mul(m, self.k.max(self.n), "work size")?;
        let dense = crate::error::mul(dense, 8, "work size")?;
        // Packed LHS: at most one byte per value plus per-row and per-block
        // metadata, rounded up generously (f32 LHS layouts are 4 bytes a value).
        let packed =
            crate::error::mul(crate::error::mul(m.div_ceil(16) * 16 + 16, self.k + 64, "work size")?, 4, "work size")?;
        dense.checked_add(packed).ok_or_else(|| Error::Overflow("work size".into()))
    }

    /// ggml `mul_mat`: `dst[b][i][j] = sum_k src1[b][i][k] * w[b'][j][k]`
    /// with `b' = b / (ne12 / ne02)` (F16 batch broadcast). `src1` is F32
    /// `[k, m, ne12]`, `dst` F32 `[n, m, ne12]`; rows must be contiguous
    /// (row strides may be larger than a row).
    pub fn mul_mat(
        &self,
        src1: &Tensor<'_>,
        dst: &mut TensorMut<'_>,
        par: Parallelism,
        scratch: &mut MulMatScratch,
    ) -> Result<()> {
        if src1.typ != GgmlType::F32 {
            return Err(Error::ElementType {
                what: "mul_mat activations (src1)",
                expected: "F32",
                got: src1.typ.name(),
            });
        }
        if dst.typ != GgmlType::F32 {
            return Err(Error::ElementType { what: "mul_mat output (dst)", expected: "F32", got: dst.typ.name() });
        }
        let a = src1.check("src1")?;
        let o = dst.check("dst")?;
        let (k, n) = (self.k, self.n);
        let (m, ne12) = (a[1], a[2]);
        if a[0] != k {
            let (got, want) = (a[0].to_string(), format!("k = {k} (the weights')"));
            return Err(Error::ShapeMismatch { what: "src1 row length ne[0]", got, want });
        }
        if a[3] != 1 || o[3] != 1 {
            let got = format!("src1 ne[3] = {}, dst ne[3] = {}", a[3], o[3]);
            return Err(Error::ShapeMismatch { what: "mul_mat (4-D is not supported)", got, want: "ne[3] = 1".into() });
        }
        if o[0] != n || o[1] != m || o[2] != ne12 {
            let (got, want) = (format!("{:?}", dst.ne), format!("[{n}, {m}, {ne12}, 1]"));
            return Err(Error::ShapeMismatch { what: "dst ne", got, want });
        }
        let ne02 = self.batches.len();
        if ne12 % ne02 != 0 {
            let context = "the weight batches ggml broadcasts".into();
            return Err(Error::NotMultiple { what: "src1 batches", value: ne12, multiple: ne02, context });
        }
        let r = ne12 / ne02;
        let MulMatScratch { inner, second, lhs, out } = scratch;
        lhs.resize(crate::error::mul(m, k, "src1")?, 0.0);
        out.resize(crate::error::mul(m, n, "dst")?, 0.0);
        for b in 0..ne12 {
            for i in 0..m {
                let at = b * src1.nb[2] + i * src1.nb[1];
                for (j, c) in src1.data[at..at + 4 * k].chunks_exact(4).enumerate() {
                    lhs[i * k + j] = f32::from_le_bytes(c.try_into().expect("4 bytes"));
                }
            }
            let w = &self.batches[b / r];
            if self.f16_single_row(m) {
                if !w.has_reference() {
                    return Err(Error::Unsupported {
                        kernel: "ggml F16 x 1 row",
                        why: "ggml computes F16 weights with one activation row outside KleidiAI, from the \
                              original f16 weights; these weights were viewed from a container that holds only \
                              packed layouts: repack them from the tensor (GgmlWeights::repack)"
                            .into(),
                    });
                }
                w.matmul_reference(m, Activation::F32(lhs), ActivationMut::F32(out), Clamp::NONE, inner)?;
                store(out, b, dst);
                continue;
            }
            let threads = par.threads();
            let hybrid = self.hybrid && {
                let mut pair = [core::mem::take(inner), core::mem::take(second)];
                let done =
                    w.matmul_hybrid(m, lhs, out, Clamp::NONE, threads, crate::par::sme_thread_cap(), &mut pair)?;
                let [a, b2] = pair;
                (*inner, *second) = (a, b2);
                done
            };
            if !hybrid {
                w.matmul(m, Activation::F32(lhs), ActivationMut::F32(out), Clamp::NONE, par, inner)?;
            }
            store(out, b, dst);
        }
        Ok(())
    }

    /// ggml `get_rows`: weight rows `rows` (of batch 0) as f32, into `dst`
    /// (`rows.len()` rows of `k`, contiguous).
    pub fn get_rows(&self, rows: &[i64], dst: &mut [f32]) -> Result<()> {
        crate::error::at_least(dst.len(), crate::error::mul(rows.len(), self.k, "get_rows")?, "get_rows output")?;
        for (i, &r) in rows.iter().enumerate() {
            let r = usize::try_from(r).ok().filter(|r| *r < self.n).ok_or_else(|| Error::OutOfRange {
                what: "row index",
                index: r,
                len: self.n,
            })?;
            self.batches[0].row(r, &mut dst[i * self.k..(i + 1) * self.k])?;
        }
        Ok(())
    }
}
