//! ggml tensor descriptions (`type`, `ne`, `nb`) and their checks.

use super::blocks::{BlockQ4_0, BlockQ8_0, QK4_0, QK8_0};
use crate::error::{Error, Result};

/// The ggml types this module handles (ggml's `enum ggml_type` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GgmlType {
    /// `GGML_TYPE_F32`.
    F32 = 0,
    /// `GGML_TYPE_F16`.
    F16 = 1,
    /// `GGML_TYPE_Q4_0`.
    Q4_0 = 2,
    /// `GGML_TYPE_Q8_0`.
    Q8_0 = 8,
}

impl GgmlType {
    /// The ids [`from_id`](Self::from_id) takes, for messages.
    pub(crate) const KNOWN: &'static str = "F32=0, F16=1, Q4_0=2, Q8_0=8";

    /// From ggml's numeric id.
    pub fn from_id(id: u32) -> Result<GgmlType> {
        match id {
            0 => Ok(GgmlType::F32),
            1 => Ok(GgmlType::F16),
            2 => Ok(GgmlType::Q4_0),
            8 => Ok(GgmlType::Q8_0),
            other => Err(Error::UnknownType { what: "ggml type", id: other.into(), known: Self::KNOWN }),
        }
    }

    /// ggml's name of the type (as `Debug` prints it).
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q8_0 => "Q8_0",
        }
    }

    /// Values per block (1 for F32/F16).
    pub fn block_len(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 => 1,
            GgmlType::Q4_0 => QK4_0,
            GgmlType::Q8_0 => QK8_0,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 => 2,
            GgmlType::Q4_0 => core::mem::size_of::<BlockQ4_0>(),
            GgmlType::Q8_0 => core::mem::size_of::<BlockQ8_0>(),
        }
    }

    /// Bytes of one row of `k` values (`k` a multiple of the block length).
    pub fn row_bytes(self, k: usize) -> Result<usize> {
        if k % self.block_len() != 0 {
            // The message is built only when it is needed: this runs on every call.
            crate::error::multiple_of(
                k,
                self.block_len(),
                "row length",
                &format!("ggml {self:?} rows are whole blocks"),
            )?;
        }
        crate::error::mul(k / self.block_len(), self.block_bytes(), "row bytes")
    }
}

/// A ggml tensor as its shape and strides: `ne[0]` values per row, `ne[1]`
/// rows, `ne[2]` and `ne[3]` batch dimensions; `nb[i]` byte strides.
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a> {
    /// Element type.
    pub typ: GgmlType,
    /// Sizes.
    pub ne: [i64; 4],
    /// Byte strides.
    pub nb: [usize; 4],
    /// The bytes `data` points at in ggml.
    pub data: &'a [u8],
}

/// A writable ggml tensor (the destination of `mul_mat`).
#[derive(Debug)]
pub struct TensorMut<'a> {
    /// Element type.
    pub typ: GgmlType,
    /// Sizes.
    pub ne: [i64; 4],
    /// Byte strides.
    pub nb: [usize; 4],
    /// The bytes.
    pub data: &'a mut [u8],
}

/// Sizes as usize, each at least 1.
pub(crate) fn dims(ne: [i64; 4], what: &str) -> Result<[usize; 4]> {
    let mut out = [0usize; 4];
    for (i, &n) in ne.iter().enumerate() {
        if n < 1 {
            let (got, want) = (format!("{what} ne[{i}] = {n}"), "every ne[i] at least 1".into());
            return Err(Error::ShapeMismatch { what: "ggml tensor", got, want });
        }
        out[i] = usize::try_from(n).map_err(|_| Error::Overflow(format!("{what}: ne[{i}] = {n}")))?;
    }
    Ok(out)
}

/// Checks a tensor's strides describe rows that are contiguous (ggml's
/// `nb[0] == type size`, the KleidiAI path's requirement), non-overlapping,
/// and lie inside `len` bytes. Returns the sizes.
pub(crate) fn check_layout(typ: GgmlType, ne: [i64; 4], nb: [usize; 4], len: usize, what: &str) -> Result<[usize; 4]> {
    let d = dims(ne, what)?;
    let row = typ.row_bytes(d[0])?;
    if nb[0] != typ.block_bytes() {
        return Err(Error::ShapeMismatch {
            what: "ggml tensor",
            got: format!("{what} nb[0] = {}", nb[0]),
            want: format!(
                "{} (rows contiguous: {typ:?} needs it; non-contiguous rows are not supported)",
                typ.block_bytes()
            ),
        });
    }
    // Each dimension's stride must step over the whole previous extent.
    let mut extent = row;
    for i in 1..4 {
        if d[i] > 1 && nb[i] < extent {
            return Err(Error::ShapeMismatch {
                what: "ggml tensor",
                got: format!("{what} nb[{i}] = {}", nb[i]),
                want: format!("at least {extent} (the previous dimension's bytes: no overlap)"),
            });
        }
        let last = crate::error::mul(d[i] - 1, nb[i], what)?;
        extent = extent.max(last.checked_add(extent).ok_or_else(|| Error::Overflow(format!("{what} extent")))?);
    }
    // The last byte touched is at sum (ne[i]-1)*nb[i] + row.
    let mut last = row;
    for i in 1..4 {
        last = crate::error::mul(d[i] - 1, nb[i], what)?
            .checked_add(last)
            .ok_or_else(|| Error::Overflow(format!("{what} extent")))?;
    }
    if last > len {
        return Err(Error::ByteLength { what: "ggml tensor data", got: len, need: last });
    }
    Ok(d)
}

impl Tensor<'_> {
    /// Checks the description against the data; returns the sizes.
    pub fn check(&self, what: &str) -> Result<[usize; 4]> {
        check_layout(self.typ, self.ne, self.nb, self.data.len(), what)
    }

    /// Contiguous strides for `ne` of `typ` (ggml's `ggml_nbytes` layout).
    pub fn contiguous_strides(typ: GgmlType, ne: [i64; 4]) -> Result<[usize; 4]> {
        let d = dims(ne, "tensor")?;
        let row = typ.row_bytes(d[0])?;
        let nb1 = row;
        let nb2 = crate::error::mul(nb1, d[1], "nb[2]")?;
        let nb3 = crate::error::mul(nb2, d[2], "nb[3]")?;
        Ok([typ.block_bytes(), nb1, nb2, nb3])
    }
}

impl TensorMut<'_> {
    /// Checks the description against the data; returns the sizes.
    pub fn check(&self, what: &str) -> Result<[usize; 4]> {
        check_layout(self.typ, self.ne, self.nb, self.data.len(), what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_checks() {
        let ne = [64, 3, 2, 1];
        let nb = Tensor::contiguous_strides(GgmlType::Q4_0, ne).unwrap();
        assert_eq!(nb, [18, 36, 108, 216]);
        let data = vec![0u8; 216];
        let t = Tensor { typ: GgmlType::Q4_0, ne, nb, data: &data };
        assert_eq!(t.check("w").unwrap(), [64, 3, 2, 1]);
        let short = Tensor { data: &data[..215], ..t };
        assert!(matches!(short.check("w"), Err(Error::ByteLength { .. })));
        let odd = Tensor { ne: [48, 3, 2, 1], ..t };
        assert!(odd.check("w").is_err(), "48 is not whole Q4_0 blocks");
        let strided = Tensor { nb: [36, 36, 108, 216], ..t };
        assert!(strided.check("w").is_err(), "non-contiguous rows");
        let overlap = Tensor { nb: [18, 20, 108, 216], ..t };
        assert!(overlap.check("w").is_err(), "rows overlap");
        let neg = Tensor { ne: [64, 0, 1, 1], ..t };
        assert!(neg.check("w").is_err());
        let huge = Tensor { ne: [64, i64::MAX, 1, 1], nb: [18, 36, 1 << 62, 1 << 62], ..t };
        assert!(huge.check("w").is_err());
        assert!(GgmlType::from_id(3).is_err());
    }

    /// Issue 15 ("messages in the right unit"): a short ggml tensor is
    /// counted in bytes, through the public paths too.
    #[test]
    fn a_short_tensor_is_reported_in_bytes() {
        let typ = GgmlType::Q4_0;
        let ne = [64, 3, 1, 1];
        let nb = Tensor::contiguous_strides(typ, ne).unwrap();
        let data = vec![0u8; 3 * 36 - 1];
        let short = Tensor { typ, ne, nb, data: &data };
        let want = Error::ByteLength { what: "ggml tensor data", got: 107, need: 108 };
        assert_eq!(short.check("src0").unwrap_err(), want);
        for err in [
            crate::ggml::GgmlWeights::repack(&short).unwrap_err(),
            crate::ggml::ThreadedWeights::repack(
                &short,
                crate::ggml::SmeSetting::Auto,
                crate::AlignedBuf::zeroed(4096),
            )
            .unwrap_err(),
        ] {
            let msg = err.to_string();
            assert!(msg.contains("holds 107 bytes") && msg.contains("needs 108"), "{msg}");
            assert!(!msg.contains("elements"), "{msg}");
        }
    }
}
