//! Saving and loading: the packed-weight file (see the `file` module) of a
//! [`PackedWeights`], copied or viewed in place.

use super::*;

impl PackedWeights {
    /// The non-finite output channels as the file stores them.
    pub(super) fn non_finite_u64(&self) -> Vec<u64> {
        self.non_finite_channels.iter().map(|&j| j as u64).collect()
    }

    /// Serialises the packed layouts as a packed-weight file ([`file`](mod@file)),
    /// with the output channels whose weights are not finite (version 2 of
    /// the format when there is one).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = self.file_header()?.to_bytes_with(&self.non_finite_u64())?;
        for s in &self.slots {
            out.resize(out.len().div_ceil(64) * 64, 0);
            out.extend_from_slice(s.rhs.as_bytes());
        }
        Ok(out)
    }

    /// The header [`to_bytes`](Self::to_bytes) writes (payload `i` at
    /// `slots[i].offset`, 64-byte aligned, after it).
    pub(crate) fn file_header(&self) -> Result<file::FileHeader> {
        if self.slots.is_empty() {
            return Err(Error::Unsupported {
                kernel: "packed weights",
                why: "nothing was packed (no kernel for these weights runs here), so there is nothing to save".into(),
            });
        }
        let mut header = file::FileHeader {
            kleidiai_version: crate::sys::KLEIDIAI_VERSION.into(),
            weight_kind: self.kind.id(),
            output: self.activation.id(),
            n: self.n as u64,
            k: self.k as u64,
            slots: Vec::new(),
        };
        let mut offset = file::FileHeader::header_len_with(self.slots.len(), self.non_finite_channels.len());
        for s in &self.slots {
            let l = s.rhs.layout();
            let u32_of = |v: usize, what: &str| {
                u32::try_from(v).map_err(|_| Error::Overflow(format!("{what} {v} does not fit the file header")))
            };
            header.slots.push(file::SlotHeader {
                gemm_kernel: s.gemm.info().name.into(),
                gemv_kernel: s.gemv.as_ref().map_or(String::new(), |g| g.info().name.into()),
                format: l.format.into(),
                r: u32_of(l.r, "nr")?,
                kr: u32_of(l.kr, "kr")?,
                sr: u32_of(l.sr, "sr")?,
                bl: u32_of(l.bl, "bl")?,
                vector_bytes: u32_of(l.vector_bytes, "vector length")?,
                offset: offset as u64,
                len: s.rhs.as_bytes().len() as u64,
                crc32: crc32fast::hash(s.rhs.as_bytes()),
            });
            offset = (offset + s.rhs.as_bytes().len()).div_ceil(64) * 64;
        }
        Ok(header)
    }

    /// Loads a packed-weight file, copying the payloads. `bytes` is the
    /// whole file and nothing more: bytes after the last payload are
    /// [`FileError::TrailingBytes`] (as in every loader).
    pub fn from_bytes(bytes: &[u8]) -> Result<PackedWeights> {
        Self::load(Arc::new(bytes.to_vec()), false, true)
    }

    /// Loads a packed-weight file without copying: the payloads stay in
    /// `bytes` (e.g. a memory-mapped file), which must keep the payloads
    /// 64-byte aligned (a mapping's start is page aligned).
    pub fn from_shared(bytes: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Result<PackedWeights> {
        Self::load(bytes, true, true)
    }

    /// [`from_shared`](Self::from_shared) without the payload checksums
    /// (header, layouts and bounds are still checked): for weights verified
    /// once and viewed again on every call.
    pub fn from_shared_unverified(bytes: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Result<PackedWeights> {
        Self::load(bytes, true, false)
    }

    pub(super) fn load(
        bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
        zero_copy: bool,
        verify: bool,
    ) -> Result<PackedWeights> {
        let data = (*bytes).as_ref();
        let (h, non_finite) = file::FileHeader::parse_with(data, verify)?;
        if h.kleidiai_version != crate::sys::KLEIDIAI_VERSION {
            return Err(Error::packed_file(FileError::KleidiaiVersion {
                file: h.kleidiai_version,
                build: crate::sys::KLEIDIAI_VERSION,
            }));
        }
        let kind = WeightKind::from_id(h.weight_kind).ok_or_else(|| {
            Error::packed_file(FileError::Header(format!("unknown weight kind id {}", h.weight_kind)))
        })?;
        let activation = DType::from_id(h.output)
            .ok_or_else(|| Error::packed_file(FileError::Header(format!("unknown activation type id {}", h.output))))?;
        let (n, k) = (usize::try_from(h.n), usize::try_from(h.k));
        let (Ok(n), Ok(k)) = (n, k) else { return Err(Error::Overflow("shape does not fit usize".into())) };
        let f = Features::current();
        let mut slots = Vec::new();
        let mut why = Vec::new();
        // PackedWeights::to_bytes writes one slot per GEMM kernel.
        for (i, s) in h.slots.iter().enumerate() {
            if h.slots[..i].iter().any(|t| t.gemm_kernel == s.gemm_kernel) {
                return Err(Error::packed_file(FileError::Header(format!("two slots for {}", s.gemm_kernel))));
            }
        }
        for (i, s) in h.slots.iter().enumerate() {
            let gemm = backend_for(kind, activation, &s.gemm_kernel);
            // Weights kept as given (packed per call) name the kernel that
            // packs them and their own format.
            let gemm = match gemm {
                Some(g) if PerCall::is_format(&s.format) => match PerCall::for_format(g, &s.format) {
                    Some(p) if policy::converted(kind, p.info().family).is_some() => {
                        Some(Box::new(p) as Box<dyn Backend>)
                    }
                    _ => {
                        let why = format!(
                            "keeps {kind:?} weights as given for {}, which does not pack them per call",
                            s.gemm_kernel
                        );
                        return Err(Error::packed_file(FileError::Layout { slot: i, why }));
                    }
                },
                other => other,
            };
            let Some(gemm) = gemm else {
                why.push(format!(
                    "slot {i}: kernel {} is not in this build or does not take {kind:?} weights with {activation:?} \
                     activations",
                    s.gemm_kernel
                ));
                continue;
            };
            if let Err(e) = gemm.info().supported(&f) {
                why.push(format!("slot {i}: {} {e}", s.gemm_kernel));
                continue;
            }
            let want = gemm.rhs_layout(n, k, s.bl as usize)?;
            let stored =
                (s.format.as_str(), s.r as usize, s.kr as usize, s.sr as usize, s.bl as usize, s.vector_bytes as usize);
            if stored != (want.format, want.r, want.kr, want.sr, want.bl, want.vector_bytes) {
                why.push(format!(
                    "slot {i}: packed as {} nr={} kr={} sr={} bl={} vl={}b, {} here needs {want}",
                    s.format,
                    s.r,
                    s.kr,
                    s.sr,
                    s.bl,
                    s.vector_bytes * 8,
                    s.gemm_kernel
                ));
                continue;
            }
            // A layout this CPU runs with a payload of another size is a
            // corrupt (or crafted) file, not one packed elsewhere: refuse it.
            let len = if PerCall::is_format(want.format) {
                per_call_len(&want, s.format.contains("bias"))?
            } else {
                packed_len(&*gemm, kind, &want, s.len, i)?
            };
            if len as u64 != s.len {
                let why = format!("holds {} bytes, {want} packs to {len}", s.len);
                return Err(Error::packed_file(FileError::Layout { slot: i, why }));
            }
            let range = s.offset as usize..(s.offset + s.len) as usize;
            let rhs = if zero_copy {
                PackedRhs::shared(want, bytes.clone(), range, s.len as usize)?
            } else {
                let mut buf = crate::buffer::AlignedBuf::zeroed(s.len as usize);
                buf.as_mut_slice().copy_from_slice(&data[range]);
                PackedRhs::new(want, buf)
            };
            let gemv = if s.gemv_kernel.is_empty() {
                None
            } else {
                let g = backend_for(kind, activation, &s.gemv_kernel).map(|g| {
                    match PerCall::for_format(g.boxed(), &s.format) {
                        Some(p) => Box::new(p) as Box<dyn Backend>,
                        None => g,
                    }
                });
                let g = g.ok_or_else(|| {
                    let why =
                        format!("GEMV kernel {} is not in this build or does not take these weights", s.gemv_kernel);
                    Error::packed_file(FileError::Layout { slot: i, why })
                })?;
                if g.rhs_layout(n, k, s.bl as usize)? != want {
                    let why = format!("GEMV kernel {} needs another layout", s.gemv_kernel);
                    return Err(Error::packed_file(FileError::Layout { slot: i, why }));
                }
                Some(g)
            };
            slots.push(Slot { gemm, gemv, rhs });
        }
        if slots.is_empty() {
            return Err(Error::Unsupported {
                kernel: "packed-weight file",
                why: format!("no layout in the file runs here: {}", why.join("; ")),
            });
        }
        // The parser checked them ascending and below n.
        let non_finite_channels = non_finite.into_iter().map(|j| j as usize).collect();
        let policy = NonFinite::Propagate;
        Ok(PackedWeights {
            id: next_weights_id(),
            n,
            k,
            kind,
            activation,
            slots,
            reference: None,
            non_finite_channels,
            policy,
        })
    }
}
