//! What a resolved kernel is: how it is resolved (its checks of blocking
//! and packer), what it reports (its blocking, sizes and packer), and
//! ggml's per-call packing of F16 weights.

use super::*;

impl PartKernel {
    pub(super) fn resolve(
        info: &'static KernelInfo,
        rhs: &PackedLayout,
        rhs_len: usize,
        f: &Features,
    ) -> Result<PartKernel> {
        let gate = crate::families::engine::gate_with(info, f)?;
        let packer = LhsPacker::from_info(info).ok_or_else(|| Error::Unsupported {
            kernel: info.name,
            why: format!("no per-thread form for its LHS packer {:?}", info.lhs_packer),
        })?;
        #[cfg(target_arch = "aarch64")]
        {
            let (fns, t) = ffi::resolve(&gate, info)?;
            if (t.nr, t.kr, t.sr) != (rhs.r, rhs.kr, rhs.sr) {
                return Err(Error::LayoutMismatch {
                    what: "RHS",
                    kernel: info.name,
                    got: rhs.to_string(),
                    want: format!("nr={} kr={} sr={}", t.nr, t.kr, t.sr),
                });
            }
            // The quantised-block LHS packers take the weights' block length.
            let lhs_bl = match packer {
                LhsPacker::Qsi8d32p | LhsPacker::Qsi8d32pNeon | LhsPacker::Qsi8d32p4x8sb | LhsPacker::F16pmrx2 => 32,
                _ => 0,
            };
            if lhs_bl != 0 && rhs.bl != 32 {
                return Err(Error::bad_value("bl", rhs.bl, format!("{} takes weights in blocks of 32", info.name)));
            }
            packer.check(rhs.k, lhs_bl, &t)?;
            Ok(PartKernel {
                info,
                t,
                packer,
                lhs_bl,
                vector_bytes: rhs.vector_bytes,
                streaming: info.is_sme(),
                n: rhs.rows,
                k: rhs.k,
                bl: rhs.bl,
                rhs_len,
                f: fns,
                gate,
            })
        }
        #[cfg(not(target_arch = "aarch64"))]
        {
            let _ = (rhs, rhs_len, packer, gate);
            Err(Error::Unsupported { kernel: info.name, why: "kernels run on aarch64 only".into() })
        }
    }

    /// The kernel of ggml's F16 table (`name`, an SME2 bf16 kernel of
    /// `matmul_clamp_fp32_bf16p_bf16p`) for
    /// `n x k` weights packed per call, with ggml's LHS packer for it
    /// (`kai_lhs_pack_bf16p2vlx2_f32_sme`, the same packed format as the
    /// `_sme2` one the crate's family pairs with it).
    ///
    /// Remembered per thread for the last few `(name, n, k, features)`:
    /// ggml asks for it on every F16 call (work size, then every thread's
    /// part), and the answer depends on nothing else (the thread's vector
    /// length is checked again by `on_this_thread`).
    pub fn for_f16_per_call(name: &str, n: usize, k: usize, f: &Features) -> Result<PartKernel> {
        type Entry = Option<((usize, usize, usize, usize, Features), PartKernel)>;
        thread_local! {
            static KEPT: core::cell::RefCell<[Entry; 8]> = const { core::cell::RefCell::new([None; 8]) };
        }
        let key = (name.as_ptr() as usize, name.len(), n, k, *f);
        let slot = n.wrapping_mul(31).wrapping_add(k) % 8;
        if let Some(kern) = KEPT.with(|c| c.borrow()[slot].filter(|(k0, _)| *k0 == key).map(|(_, kern)| kern)) {
            return Ok(kern);
        }
        let kern = Self::resolve_f16_per_call(name, n, k, f)?;
        KEPT.with(|c| c.borrow_mut()[slot] = Some((key, kern)));
        Ok(kern)
    }

    pub(super) fn resolve_f16_per_call(name: &str, n: usize, k: usize, f: &Features) -> Result<PartKernel> {
        crate::error::nonzero(n, "n")?;
        crate::error::nonzero(k, "k")?;
        let info = backend_for(WeightKind::F16, DType::F32, name)
            .map(|b| b.info())
            .ok_or_else(|| Error::UnknownKernel(name.to_string()))?;
        if info.family != "matmul_clamp_fp32_bf16p_bf16p" {
            return Err(Error::Unsupported { kernel: info.name, why: "not a bf16 kernel packed per call".into() });
        }
        let g = crate::families::engine::gate_with(info, f)?;
        #[cfg(target_arch = "aarch64")]
        {
            use crate::families::engine::query;
            let (_, t) = ffi::resolve(&g, info)?;
            // Arithmetic on n, k and the streaming vector length.
            let size = query!(&g, crate::sys::kai_get_rhs_packed_size_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme, n, k);
            let packer_nr = query!(&g, crate::sys::kai_get_n_step_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme);
            if packer_nr != t.nr {
                return Err(Error::ShapeMismatch {
                    what: "RHS packer block (the kernel's nr)",
                    got: packer_nr.to_string(),
                    want: t.nr.to_string(),
                });
            }
            let layout = PackedLayout {
                format: "bf16p2vlx2b",
                rows: n,
                k,
                r: t.nr,
                kr: t.kr,
                sr: t.sr,
                bl: 0,
                vector_bytes: crate::families::engine::layout_vector_bytes(info, f),
            };
            let mut kern = Self::resolve(info, &layout, size, f)?;
            kern.packer = LhsPacker::Bf16p2vlx2Sme;
            kern.packer.check(k, 0, &kern.t)?;
            Ok(kern)
        }
        #[cfg(not(target_arch = "aarch64"))]
        {
            let _ = g;
            Err(Error::Unsupported { kernel: info.name, why: "kernels run on aarch64 only".into() })
        }
    }

    /// Bytes of the packed weights this kernel reads.
    pub fn rhs_len(&self) -> usize {
        self.rhs_len
    }

    /// The kernel: its upstream name, family and CPU requirements.
    pub fn info(&self) -> &'static KernelInfo {
        self.info
    }

    /// Rows of the LHS the kernel's packed format groups: the rows each
    /// thread packs start at a multiple of it.
    pub fn mr(&self) -> usize {
        self.t.mr
    }

    /// Rows of the RHS (output columns) the packed weights group.
    pub fn nr(&self) -> usize {
        self.t.nr
    }

    /// The `kr` of the packed formats (values of `k` interleaved together).
    pub fn kr(&self) -> usize {
        self.t.kr
    }

    /// The `sr` of the packed formats (split ratio of `kr`).
    pub fn sr(&self) -> usize {
        self.t.sr
    }

    /// Output rows one kernel call computes at most at a time.
    pub fn m_step(&self) -> usize {
        self.t.m_step
    }

    /// Column step: the columns of a [`run_cols`](Self::run_cols) call
    /// start at a multiple of it.
    pub fn n_step(&self) -> usize {
        self.t.n_step
    }

    /// Output columns (`n`, the rows of the weights).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Depth (`k`, values per row of the weights and of the LHS).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Upstream name of the LHS packer the kernel reads from (`direct` for
    /// kernels that read the f32 rows themselves, whose
    /// [`lhs_size`](Self::lhs_size) is 0).
    pub fn lhs_packer(&self) -> &'static str {
        self.packer.name()
    }

    /// Whether the kernel reads the f32 LHS rows itself (no packing:
    /// [`pack_rows`](Self::pack_rows) does nothing, and
    /// [`run_cols`](Self::run_cols) takes the rows and their stride).
    pub fn reads_lhs_directly(&self) -> bool {
        self.packer == LhsPacker::Direct
    }

    /// ggml's per-call packing of F16 weights for a bf16 kernel (one from
    /// [`for_f16_per_call`](Self::for_f16_per_call)): `n` rows of
    /// `k` f16 values (`src`, rows `stride` bytes apart) transposed to f32
    /// `k x n` in `kxn`, a zero bias in `bias`, then packed into `out`
    /// ([`rhs_len`](Self::rhs_len) bytes).
    pub fn pack_rhs_f16(
        &self,
        ok: &OnThread<'_>,
        src: &[u8],
        stride: usize,
        kxn: &mut [f32],
        bias: &mut [f32],
        out: &mut [u8],
    ) -> Result<()> {
        let (n, k) = (self.n, self.k);
        if !core::ptr::eq(ok.kernel, self) || self.info.family != "matmul_clamp_fp32_bf16p_bf16p" {
            let why = "per-call F16 packing needs its own bf16 kernel's thread check";
            return Err(Error::bad_value("thread check", "OnThread", why));
        }
        let rows = (n - 1).checked_mul(stride).and_then(|v| v.checked_add(2 * k));
        crate::error::at_least_bytes(
            src.len(),
            rows.ok_or_else(|| Error::Overflow("F16 rows".into()))?,
            "F16 weights",
        )?;
        if stride < 2 * k {
            return Err(Error::Stride { what: "F16 weights", stride, why: format!("hold fewer than {k} values") });
        }
        crate::error::at_least(kxn.len(), crate::error::mul(k, n, "k x n")?, "transposed weights")?;
        crate::error::at_least(bias.len(), n, "bias")?;
        crate::error::at_least_bytes(out.len(), self.rhs_len, "packed weights")?;
        crate::weights::f16_kxn::f16_rows_to_f32_kxn(src, stride, n, k, kxn);
        bias[..n].fill(0.0);
        #[cfg(target_arch = "aarch64")]
        {
            use crate::families::engine::{FloatRhsPacker, FloatRhsSize};
            // The CPU runs the kernel (and so the SME packer) at its vector
            // length (`ok`; `gate` its features); nr, kr, sr are the
            // kernel's, which `resolve` matched to the layout.
            let p = FloatRhsPacker {
                run: crate::sys::kai_run_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme,
                size: FloatRhsSize::Nk(crate::sys::kai_get_rhs_packed_size_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme),
                order: crate::formats::Order::KxN,
                elem_bytes: 4,
                bias_bytes: 4,
                bias_required: true,
            };
            let t = &self.t;
            p.pack(&self.gate, (n, k), (t.nr, t.kr, t.sr), kxn, n * 4, Some(&bias[..n]), out)?;
        }
        Ok(())
    }
}
