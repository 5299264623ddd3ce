//! [`GgmlWeights`]' loaders in the shape of [`PackedWeights`]'
//! (`from_bytes`, `from_shared`, `from_shared_unverified`).
//!
//! [`PackedWeights`]: crate::weights::PackedWeights

use super::GgmlWeights;
use crate::buffer::AlignedBuf;
use crate::error::Result;
use std::sync::Arc;

impl GgmlWeights {
    /// Loads serialised weights ([`to_bytes`](Self::to_bytes)), copying
    /// them (so `bytes` may sit at any address), with every check of
    /// [`from_shared`](Self::from_shared) and the payload checksums. As
    /// [`PackedWeights::from_bytes`](crate::weights::PackedWeights::from_bytes).
    pub fn from_bytes(bytes: &[u8]) -> Result<GgmlWeights> {
        let mut copy = AlignedBuf::zeroed(bytes.len());
        copy.as_mut_slice().copy_from_slice(bytes);
        GgmlWeights::from_shared(Arc::new(copy), true)
    }

    /// Views serialised weights in place without the payload checksums (the
    /// container, every batch's header, layouts and bounds are still
    /// checked): for bytes verified before. The same as
    /// `from_shared(bytes, false)`; as
    /// [`PackedWeights::from_shared_unverified`](crate::weights::PackedWeights::from_shared_unverified).
    pub fn from_shared_unverified(bytes: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Result<GgmlWeights> {
        GgmlWeights::from_shared(bytes, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml::{GgmlType, Tensor};

    #[test]
    fn the_three_loaders_agree() {
        let (n, k) = (8usize, 64usize);
        let x: Vec<f32> = (0..n * k).map(|i| (i % 9) as f32 - 4.0).collect();
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let ne = [k as i64, n as i64, 1, 1];
        let typ = GgmlType::F32;
        let src0 = Tensor { typ, ne, nb: Tensor::contiguous_strides(typ, ne).unwrap(), data: &bytes };
        let packed = GgmlWeights::repack(&src0).unwrap();
        let Ok(ser) = packed.to_bytes() else {
            // Nothing packed here (no kernel runs): nothing to save or load.
            assert!(packed.layouts().is_empty());
            assert!(GgmlWeights::from_bytes(b"not a container").is_err());
            return;
        };
        // Any address for the copying loader.
        let mut odd = vec![0u8; ser.len() + 1];
        odd[1..].copy_from_slice(&ser);
        let copied = GgmlWeights::from_bytes(&odd[1..]).unwrap();
        let shared = Arc::new(AlignedBuf::from_bytes(&ser));
        let verified = GgmlWeights::from_shared(shared.clone(), true).unwrap();
        let unverified = GgmlWeights::from_shared_unverified(shared).unwrap();
        for w in [&copied, &verified, &unverified] {
            assert_eq!((w.typ(), w.shape(), w.layouts()), (packed.typ(), packed.shape(), packed.layouts()));
            assert_eq!(w.to_bytes().unwrap(), ser);
        }
        // Issue 15: bytes after the last batch are refused by every loader,
        // with their count.
        for extra in [1usize, 64, 4096] {
            let mut long = ser.clone();
            long.resize(ser.len() + extra, 0);
            let want = crate::Error::File {
                what: "ggml container",
                reason: crate::FileError::TrailingBytes { extra: extra as u64 },
            };
            let shared = Arc::new(AlignedBuf::from_bytes(&long));
            assert_eq!(GgmlWeights::from_bytes(&long).unwrap_err(), want, "from_bytes, {extra} appended");
            assert_eq!(GgmlWeights::from_shared(shared.clone(), true).unwrap_err(), want, "from_shared, {extra}");
            assert_eq!(GgmlWeights::from_shared_unverified(shared).unwrap_err(), want, "unverified, {extra}");
        }
        // A payload byte flipped: only the unverified view takes it.
        let mut bad = ser.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x10;
        assert!(GgmlWeights::from_bytes(&bad).is_err());
        assert!(GgmlWeights::from_shared_unverified(Arc::new(AlignedBuf::from_bytes(&bad))).is_ok());
    }
}
