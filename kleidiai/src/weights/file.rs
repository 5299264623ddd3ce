//! The packed-weight file format: a self-describing header and one or more
//! packed layouts ("slots") of the same weights.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "KAIRSPW\0"
//!      8     4  format version (1, or 2 with the non-finite channel list)
//!     12     4  header length in bytes (a multiple of 64; payloads follow)
//!     16    16  KleidiAI version the layouts come from, NUL-padded ("1.30.0")
//!     32     4  weight kind id        36  4  output type id
//!     40     8  n                     48  8  k
//!     56     4  number of slots (1..=4)  60  4  CRC-32 of the header with this field zeroed
//!     64   n*256 slot table, each:
//!            88  GEMM kernel name, NUL-padded
//!            88  GEMV kernel name, NUL-padded (empty: the GEMM kernel serves m == 1)
//!            32  packed format id, NUL-padded
//!             4  r (nr)   4 kr   4 sr   4 bl   4 vector bytes   4 reserved
//!             8  payload offset (from the file start, 64-aligned)
//!             8  payload length
//!             4  CRC-32 of the payload     4 reserved
//! version 2 only, after the slot table:
//!             8  c: number of output channels whose weights hold a NaN
//!                or an infinity (1..=n)
//!           c*8  those channels, ascending; then zeros to the header length
//! ```
//! A writer uses version 1 when every weight is finite (the common case: the
//! same bytes as before version 2 existed) and version 2 when some output
//! channel is not, so that [`PackedWeights::matmul`]'s non-finite policy
//! survives a save and a load. A reader of this version reads both; a
//! reader that knows only version 1 refuses version 2 files by their
//! version. A version 1 file says that every channel is finite.
//!
//! [`PackedWeights::matmul`]: super::PackedWeights::matmul
//! All integers little-endian. Every field is validated on load: a truncated
//! or tampered file is an error naming the problem, never an out-of-bounds
//! read. The file ends where the last payload ends (the writer pads only
//! between payloads, to their 64-byte alignment): a byte more is
//! [`FileError::TrailingBytes`].

use crate::error::{Error, FileError, Result};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

/// First bytes of every packed-weight file.
pub const MAGIC: [u8; 8] = *b"KAIRSPW\0";
/// Newest version of the layout described above (this build reads 1 and 2).
pub const FORMAT_VERSION: u32 = 2;
/// Slots a file may hold (ggml holds two: an SME and a NEON layout).
pub const MAX_SLOTS: usize = 4;
const HEADER_FIXED: usize = 64;
const SLOT_SIZE: usize = 256;
const NAME_LEN: usize = 88;
const FORMAT_LEN: usize = 32;

/// The fixed part of the header as stored (offsets 0..64 of the table above).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawFixed {
    magic: [u8; 8],
    version: U32,
    header_len: U32,
    kleidiai_version: [u8; 16],
    weight_kind: U32,
    output: U32,
    n: U64,
    k: U64,
    slots: U32,
    crc32: U32,
}

/// One entry of the slot table as stored.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawSlot {
    gemm_kernel: [u8; NAME_LEN],
    gemv_kernel: [u8; NAME_LEN],
    format: [u8; FORMAT_LEN],
    r: U32,
    kr: U32,
    sr: U32,
    bl: U32,
    vector_bytes: U32,
    reserved0: U32,
    offset: U64,
    len: U64,
    crc32: U32,
    reserved1: U32,
}

const _: () = assert!(size_of::<RawFixed>() == HEADER_FIXED && size_of::<RawSlot>() == SLOT_SIZE);

/// One packed layout in a file.
#[doc(hidden)] // the file's layout is documented above; this parser is internal
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotHeader {
    /// Upstream name of the GEMM kernel the layout was packed for.
    pub gemm_kernel: String,
    /// Upstream name of the GEMV kernel sharing the layout (may be empty).
    pub gemv_kernel: String,
    /// Packed format id.
    pub format: String,
    /// `nr`.
    pub r: u32,
    /// `kr`.
    pub kr: u32,
    /// `sr`.
    pub sr: u32,
    /// Block length (0: none).
    pub bl: u32,
    /// Vector length in bytes the layout depends on (0: none).
    pub vector_bytes: u32,
    /// Payload offset from the start of the file.
    pub offset: u64,
    /// Payload length.
    pub len: u64,
    /// CRC-32 of the payload.
    pub crc32: u32,
}

/// The parsed header of a packed-weight file.
#[doc(hidden)] // the file's layout is documented above; this parser is internal
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    /// KleidiAI version the layouts come from.
    pub kleidiai_version: String,
    /// Weight kind id (see `Weights`).
    pub weight_kind: u32,
    /// Output type id.
    pub output: u32,
    /// Output channels.
    pub n: u64,
    /// Inputs per channel.
    pub k: u64,
    /// The layouts.
    pub slots: Vec<SlotHeader>,
}

fn put_str(out: &mut [u8], s: &str, what: &'static str) -> Result<()> {
    if s.len() >= out.len() || s.as_bytes().contains(&0) {
        return Err(Error::bad_value(
            what,
            format!("`{s}`"),
            format!("does not fit {} bytes (NUL-free)", out.len() - 1),
        ));
    }
    out[..s.len()].copy_from_slice(s.as_bytes());
    Ok(())
}

fn get_str(b: &[u8], what: &str) -> Result<String> {
    let end = b.iter().position(|&c| c == 0).ok_or_else(|| bad(format!("{what} is not NUL-terminated")))?;
    if b[end..].iter().any(|&c| c != 0) {
        return Err(bad(format!("{what} has bytes after its terminator")));
    }
    let s = core::str::from_utf8(&b[..end]).map_err(|_| bad(format!("{what} is not UTF-8")))?;
    if !s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.') {
        return Err(bad(format!("{what} `{s}` has characters no name has")));
    }
    Ok(s.to_string())
}

/// A malformed header.
fn bad(why: String) -> Error {
    Error::packed_file(FileError::Header(why))
}

impl FileHeader {
    /// Header length in bytes for `slots` slots (payloads start after it).
    pub fn header_len(slots: usize) -> usize {
        (HEADER_FIXED + slots * SLOT_SIZE).div_ceil(64) * 64
    }

    /// Header length for `slots` slots and a list of `non_finite` channels
    /// (version 2; none: version 1, [`header_len`](Self::header_len)).
    pub fn header_len_with(slots: usize, non_finite: usize) -> usize {
        if non_finite == 0 {
            return Self::header_len(slots);
        }
        (HEADER_FIXED + slots * SLOT_SIZE + 8 + 8 * non_finite).div_ceil(64) * 64
    }

    /// Serialises the header. Slot offsets, lengths and CRCs must already be
    /// filled in.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        self.to_bytes_with(&[])
    }

    /// Serialises the header with the output channels whose weights are not
    /// finite (version 2; none: version 1, as [`to_bytes`](Self::to_bytes)).
    /// Slot offsets must leave room for it
    /// ([`header_len_with`](Self::header_len_with)).
    pub fn to_bytes_with(&self, non_finite: &[u64]) -> Result<Vec<u8>> {
        if self.slots.is_empty() || self.slots.len() > MAX_SLOTS {
            return Err(Error::bad_value("slots", self.slots.len(), format!("a file holds 1..={MAX_SLOTS}")));
        }
        if non_finite.windows(2).any(|p| p[0] >= p[1]) || non_finite.last().is_some_and(|&c| c >= self.n) {
            let why = format!("ascending channels below n = {}", self.n);
            return Err(Error::bad_value("non-finite channels", format!("{non_finite:?}"), why));
        }
        let len = Self::header_len_with(self.slots.len(), non_finite.len());
        let len32 = u32::try_from(len)
            .map_err(|_| Error::Overflow(format!("{} non-finite channels do not fit a header", non_finite.len())))?;
        let version: u32 = if non_finite.is_empty() { 1 } else { 2 };
        let slots = u32::try_from(self.slots.len()).map_err(|_| Error::Overflow("slots".into()))?;
        let mut fixed = RawFixed::new_zeroed();
        fixed.magic = MAGIC;
        fixed.version = version.into();
        fixed.header_len = len32.into();
        put_str(&mut fixed.kleidiai_version, &self.kleidiai_version, "KleidiAI version")?;
        fixed.weight_kind = self.weight_kind.into();
        fixed.output = self.output.into();
        fixed.n = self.n.into();
        fixed.k = self.k.into();
        fixed.slots = slots.into();
        let mut h = Vec::with_capacity(len);
        h.extend_from_slice(fixed.as_bytes());
        for s in &self.slots {
            let mut r = RawSlot::new_zeroed();
            put_str(&mut r.gemm_kernel, &s.gemm_kernel, "GEMM kernel name")?;
            put_str(&mut r.gemv_kernel, &s.gemv_kernel, "GEMV kernel name")?;
            put_str(&mut r.format, &s.format, "format")?;
            (r.r, r.kr, r.sr, r.bl, r.vector_bytes) =
                (s.r.into(), s.kr.into(), s.sr.into(), s.bl.into(), s.vector_bytes.into());
            (r.offset, r.len, r.crc32) = (s.offset.into(), s.len.into(), s.crc32.into());
            h.extend_from_slice(r.as_bytes());
        }
        if !non_finite.is_empty() {
            let list: Vec<U64> =
                core::iter::once(non_finite.len() as u64).chain(non_finite.iter().copied()).map(U64::new).collect();
            h.extend_from_slice(list.as_bytes());
        }
        h.resize(len, 0);
        let crc = crc32fast::hash(&h);
        if let Ok((f, _)) = RawFixed::mut_from_prefix(&mut h) {
            f.crc32 = crc.into();
        }
        Ok(h)
    }

    /// Parses and validates a whole file (header, slot table, payload
    /// bounds and checksums; the file ends exactly where the last payload
    /// does). Returns the header; payload `i` is
    /// `file[slots[i].offset..][..slots[i].len]`.
    pub fn parse(file: &[u8]) -> Result<FileHeader> {
        Ok(Self::parse_with(file, true)?.0)
    }

    /// [`parse`](Self::parse) without the payload checksums: every bound is
    /// still checked (so nothing is read out of bounds), but corrupted
    /// payload bytes go unnoticed. For packed weights already verified once
    /// and reloaded on every call (ggml keeps them in tensor memory).
    pub fn parse_unverified(file: &[u8]) -> Result<FileHeader> {
        Ok(Self::parse_with(file, false)?.0)
    }

    /// [`parse`](Self::parse) (or without the payload checksums), with the
    /// output channels whose weights are not finite (version 2; empty for
    /// version 1).
    pub fn parse_with(file: &[u8], verify_payloads: bool) -> Result<(FileHeader, Vec<u64>)> {
        let Ok((fixed, _)) = RawFixed::ref_from_prefix(file) else {
            let (need, have) = (HEADER_FIXED as u64, file.len() as u64);
            return Err(Error::packed_file(FileError::Truncated { part: "fixed header".into(), need, have }));
        };
        if fixed.magic != MAGIC {
            return Err(Error::packed_file(FileError::Magic));
        }
        let version = fixed.version.get();
        if version != 1 && version != 2 {
            return Err(Error::packed_file(FileError::Version { found: version, supported: FORMAT_VERSION }));
        }
        let slots = fixed.slots.get() as usize;
        if slots == 0 || slots > MAX_SLOTS {
            return Err(bad(format!("{slots} slots (1..={MAX_SLOTS})")));
        }
        let len = fixed.header_len.get() as usize;
        // Version 2: at least one channel after the table (the count is
        // checked against the length once the checksum vouches for it).
        let least = if version == 1 { Self::header_len(slots) } else { Self::header_len_with(slots, 1) };
        if len != least && (version == 1 || len < least || len % 64 != 0) {
            return Err(bad(format!("header length {len}, {slots} slots need {least}")));
        }
        if file.len() < len {
            let (need, have) = (len as u64, file.len() as u64);
            return Err(Error::packed_file(FileError::Truncated { part: "header".into(), need, have }));
        }
        // The checksum covers the header with its own field zeroed.
        let stored_crc = fixed.crc32.get();
        let mut h = file[..len].to_vec();
        if let Ok((f, _)) = RawFixed::mut_from_prefix(&mut h) {
            f.crc32 = U32::ZERO;
        }
        if crc32fast::hash(&h) != stored_crc {
            return Err(Error::packed_file(FileError::Checksum { part: "header".into() }));
        }
        // `len` holds the fixed part and `slots` table entries (checked above).
        let table = h.get(HEADER_FIXED..).and_then(|t| <[RawSlot]>::ref_from_prefix_with_elems(t, slots).ok());
        let Some((table, after)) = table else { return Err(bad(format!("header length {len} for {slots} slots"))) };
        let mut out = FileHeader {
            kleidiai_version: get_str(&fixed.kleidiai_version, "KleidiAI version")?,
            weight_kind: fixed.weight_kind.get(),
            output: fixed.output.get(),
            n: fixed.n.get(),
            k: fixed.k.get(),
            slots: Vec::with_capacity(slots),
        };
        if out.n == 0 || out.k == 0 {
            return Err(bad(format!("shape {}x{}", out.n, out.k)));
        }
        let mut non_finite = Vec::new();
        if version == 2 {
            // The count, then the channels, then zeros to the header's end.
            let (count, list) =
                <[U64]>::ref_from_prefix_with_elems(after, 1).map_err(|_| bad("no non-finite count".into()))?;
            let c = count[0].get();
            // `len` bounds `c` before any allocation by it.
            let fits = c >= 1 && c <= out.n && c <= (len as u64) / 8;
            if !fits || Self::header_len_with(slots, c as usize) != len {
                return Err(bad(format!("{c} non-finite channels in a header of {len} bytes (n = {})", out.n)));
            }
            let (channels, rest) = <[U64]>::ref_from_prefix_with_elems(list, c as usize)
                .map_err(|_| bad(format!("{c} non-finite channels in a header of {len} bytes")))?;
            non_finite = channels.iter().map(|v| v.get()).collect();
            if non_finite.windows(2).any(|p| p[0] >= p[1]) || non_finite.last().is_some_and(|&j| j >= out.n) {
                return Err(bad(format!("non-finite channels {non_finite:?} are not ascending below n = {}", out.n)));
            }
            if rest.iter().any(|&b| b != 0) {
                return Err(bad("non-zero bytes after the non-finite channels".into()));
            }
        }
        let mut prev_end = len as u64;
        for (i, r) in table.iter().enumerate() {
            let s = SlotHeader {
                gemm_kernel: get_str(&r.gemm_kernel, "GEMM kernel name")?,
                gemv_kernel: get_str(&r.gemv_kernel, "GEMV kernel name")?,
                format: get_str(&r.format, "format")?,
                r: r.r.get(),
                kr: r.kr.get(),
                sr: r.sr.get(),
                bl: r.bl.get(),
                vector_bytes: r.vector_bytes.get(),
                offset: r.offset.get(),
                len: r.len.get(),
                crc32: r.crc32.get(),
            };
            if s.gemm_kernel.is_empty() {
                return Err(bad(format!("slot {i} names no kernel")));
            }
            // Reserved fields are written as zero: anything else is not a
            // file this version wrote (and would not survive a round trip).
            if r.reserved0 != U32::ZERO || r.reserved1 != U32::ZERO {
                return Err(bad(format!("slot {i} has non-zero reserved bytes")));
            }
            if s.offset % 64 != 0 || s.offset < prev_end {
                return Err(bad(format!("slot {i} payload offset {} is misaligned or overlaps", s.offset)));
            }
            let end = s.offset.checked_add(s.len).ok_or_else(|| bad(format!("slot {i} payload overflows")))?;
            if end > file.len() as u64 {
                let part = format!("slot {i} payload");
                return Err(Error::packed_file(FileError::Truncated { part, need: end, have: file.len() as u64 }));
            }
            let payload = &file[s.offset as usize..end as usize];
            if verify_payloads && crc32fast::hash(payload) != s.crc32 {
                return Err(Error::packed_file(FileError::Checksum { part: format!("slot {i} payload") }));
            }
            prev_end = end;
            out.slots.push(s);
        }
        // The writer stops at the last payload's end (slots are in file
        // order, checked above): anything after it is not this file's.
        if file.len() as u64 > prev_end {
            return Err(Error::packed_file(FileError::TrailingBytes { extra: file.len() as u64 - prev_end }));
        }
        Ok((out, non_finite))
    }
}

#[cfg(test)]
mod tests;
