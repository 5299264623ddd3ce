//! The aarch64 side of `cargo run -p xtask --release -- measure` (which
//! builds it and runs it under qemu); not meant to be run by hand, though it
//! can be.
//!
//! - `overhead [--time ROUNDS] [--count CASE ITERS]`: the safe path
//!   (`PackedWeights::matmul`, one thread) against the same kernel sequence
//!   called through the raw bindings (`kleidiai_sys`: the LHS packer, then
//!   the kernel, with the kernel names `PackedWeights::kernel_for` reports
//!   and the very bytes it packed). Every case first checks that both give
//!   bit-identical outputs. `--time` measures wall time in this process
//!   (batches alternating between the two paths, best batch of each);
//!   `--count q4_0:1 3` (or `q4_0:1:256` for n = k = 256) runs one case `3` times per path between marker
//!   system calls (`stat("/kleidiai-mark/...")`), for xtask to count the
//!   guest instructions in between from qemu's execution log.
//! - `scaling KIND M SIZE REPS`: 1 thread against 2 (best of REPS each),
//!   results compared bit for bit.
//! - `cost KIND:M ITERS`: weights of `KIND` (q4_0, q8_0, f16, f32; n = k =
//!   1024) packed with `PackOptions::default()`, then `ITERS` calls of
//!   `PackedWeights::matmul` with `M` rows (one thread) between markers, for
//!   xtask to count the guest instructions per call of whatever kernel the
//!   default choice runs; prints the kernel, the layouts kept and the
//!   packed and input bytes.

use kleidiai::weights::{Activation, ActivationMut, PackOptions, PackedWeights, Scratch, WeightsRef};
use kleidiai::{Clamp, Parallelism};
use std::time::{Duration, Instant};

#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
const SIZE: usize = 1024;

/// Deterministic data (the repository's one test generator, `fastrand`,
/// seeded), uniform in [-1, 1).
fn data(len: usize, seed: u64) -> Vec<f32> {
    let mut r = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| r.f32() * 2.0 - 1.0).collect()
}

/// ggml Q4_0 bytes made directly (random nibbles, small f16 scales): cheap
/// under an instruction-logging qemu, and any byte pattern is valid.
fn q4_0_bytes(n: usize, k: usize) -> Vec<u8> {
    let raw = data(n * k / 32 * 18, 5);
    let mut out = Vec::with_capacity(raw.len());
    for (b, chunk) in raw.chunks(18).enumerate() {
        let d = half::f16::from_f32(0.002 + 0.001 * (b % 7) as f32).to_le_bytes();
        out.extend_from_slice(&d);
        out.extend(chunk[2..].iter().map(|v| (v.to_bits() >> 7) as u8));
    }
    out
}

struct Weights {
    kind: &'static str,
    f32: Vec<f32>,
    f16: Vec<half::f16>,
    bf16: Vec<half::bf16>,
    q4: Vec<u8>,
    q8: Vec<kleidiai::ggml::BlockQ8_0>,
    i8: Vec<i8>,
    /// Per-channel or per-block scales (and, for `i4a`, the offsets after them).
    scales: Vec<f32>,
    scales_f16: Vec<half::f16>,
}

/// Every weight kind of the high-level API (`Weights::...` constructors):
/// ggml Q4_0 and Q8_0, int4 per channel (`i4`), int4 in blocks of 32 with
/// f16 scales (`i4b`), asymmetric int4 blocks (`i4a`), int8 per channel
/// (`i8`), f16, bf16 and f32; `f16h` is f16 weights with f16 activations.
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
const KINDS: [&str; 10] = ["q4_0", "q8_0", "i4", "i4b", "i4a", "i8", "f16", "bf16", "f32", "f16h"];

impl Weights {
    fn new(kind: &'static str, n: usize, k: usize) -> Weights {
        match kind {
            "q4_0" => Weights { kind, q4: q4_0_bytes(n, k), ..Weights::empty(kind) },
            "i4" => Weights {
                kind,
                q4: q4_0_bytes(n, k)[..n * k / 2].to_vec(),
                scales: vec![0.01; n],
                ..Weights::empty(kind)
            },
            "i4b" => Weights {
                kind,
                q4: q4_0_bytes(n, k)[..n * k / 2].to_vec(),
                scales_f16: (0..n * k / 32).map(|b| half::f16::from_f32(0.002 + 0.001 * (b % 7) as f32)).collect(),
                ..Weights::empty(kind)
            },
            "i4a" => Weights {
                kind,
                q4: q4_0_bytes(n, k)[..n * k / 2].to_vec(),
                scales: (0..2 * n * k / 32).map(|b| 0.002 + 0.001 * (b % 7) as f32).collect(),
                ..Weights::empty(kind)
            },
            "i8" => Weights {
                kind,
                i8: data(n * k, 8).iter().map(|v| (v * 127.0) as i8).collect(),
                scales: vec![0.0004; n],
                ..Weights::empty(kind)
            },
            "q8_0" => {
                let v = data(n * k, 4);
                let q8 = kleidiai::ggml::quantize_q8_0(&v, k).expect("whole blocks");
                Weights { kind, q8, ..Weights::empty(kind) }
            }
            "f16" | "f16h" => {
                let f16 = data(n * k, 6).iter().map(|v| half::f16::from_f32(v * 0.05)).collect();
                Weights { kind, f16, ..Weights::empty(kind) }
            }
            "bf16" => {
                let bf16 = data(n * k, 6).iter().map(|v| half::bf16::from_f32(v * 0.05)).collect();
                Weights { kind, bf16, ..Weights::empty(kind) }
            }
            "f32" => {
                let f32 = data(n * k, 3).iter().map(|v| v * 0.05).collect();
                Weights { kind, f32, ..Weights::empty(kind) }
            }
            other => panic!("unknown kind {other} (one of {KINDS:?})"),
        }
    }
    fn empty(kind: &'static str) -> Weights {
        Weights {
            kind,
            f32: vec![],
            f16: vec![],
            bf16: vec![],
            q4: vec![],
            q8: vec![],
            i8: vec![],
            scales: vec![],
            scales_f16: vec![],
        }
    }
    fn view(&self, n: usize, k: usize) -> WeightsRef<'_> {
        use kleidiai::weights::Weights as W;
        let s = &self.scales;
        match self.kind {
            "q4_0" => W::q4_0(n, k, &self.q4),
            "i4" => W::int4_per_channel(n, k, &self.q4, s),
            "i4b" => W::int4_blocks(n, k, 32, &self.q4, &self.scales_f16[..]),
            "i4a" => W::int4_asym_blocks(n, k, 32, &self.q4, &s[..s.len() / 2], &s[s.len() / 2..]),
            "i8" => W::int8_per_channel(n, k, &self.i8, s),
            "q8_0" => W::q8_0(n, k, &self.q8),
            "f16" | "f16h" => W::f16(n, k, &self.f16),
            "bf16" => W::bf16(n, k, &self.bf16),
            _ => W::f32(n, k, &self.f32),
        }
        .expect("the measurement's weights have the sizes the constructors need")
    }
    /// Bytes of the weights as given (what packing starts from).
    fn input_bytes(&self) -> usize {
        self.view(SIZE, SIZE).bytes()
    }
}

/// The same kernel sequence through the raw bindings.
#[cfg(target_arch = "aarch64")]
mod raw {
    use kleidiai::AlignedBuf;
    use kleidiai::weights::PackedWeights;
    use kleidiai::weights::file::FileHeader;
    use kleidiai_sys as sys;
    use kleidiai_sys::interfaces as ifc;

    /// The kernel call and the LHS packer it pairs with.
    enum Call {
        /// `lhs_quant_pack_qai8dxp_f32` + a `qai8dxp_qsi4c32p` kernel.
        Qai8dxp(sys::kai_matmul_clamp_f32_qai8dxp_qsi4c32p_run_matmul_func_t),
        /// `lhs_pack_f16pmrx2_f32_neon` + an `f16p_qsi4c32p` kernel.
        F16p(sys::kai_matmul_clamp_f32_f16p_qsi4c32p_run_matmul_func_t),
        /// `lhs_pack_f32p2vlx1_f32_sme` + an `f32p_f32p` kernel.
        F32p(sys::kai_matmul_clamp_f32_f32p_f32p_run_matmul_func_t),
        /// No LHS packing: an `f32_f32_f32p` kernel.
        F32(sys::kai_matmul_clamp_f32_f32_f32p_run_matmul_func_t),
        /// One of the `lhs_quant_pack_qsi8d32p` packers + a `qsi8d32p_qsi4c32p`
        /// or `qsi8d32p_qai4c32p` kernel (the same run signature).
        Qsi8d32p(sys::kai_matmul_clamp_f32_qsi8d32p_qsi4c32p_run_matmul_func_t, Qsi8d32Packer),
        /// `lhs_quant_pack_qai8dxp_f32` + a `qai8dxp_qsi8cxp` or
        /// `qai8dxp_qsi4cxp` kernel (per-channel weights: no block length).
        Qai8dxpCx(sys::kai_matmul_clamp_f32_qai8dxp_qsi8cxp_run_matmul_func_t),
        /// A bf16 LHS packer + an `f32_bf16p_bf16p` or `fp32_bf16p_bf16p` kernel.
        Bf16(sys::kai_matmul_clamp_f32_bf16p_bf16p_run_matmul_func_t, Bf16Packer),
    }

    /// The bf16 LHS packer a kernel pairs with (registry name).
    #[derive(Clone, Copy)]
    enum Bf16Packer {
        Sme,
        Sme2,
        Neon1x4,
        Neon8x4,
    }

    /// The `qsi8d32p` LHS packer a kernel pairs with (registry name).
    #[derive(Clone, Copy)]
    enum Qsi8d32Packer {
        Scalar,
        Neon,
        Sb4x8,
        /// f32 scales (the asymmetric `qai4c32p` kernels).
        ScaleF32,
    }

    pub struct Raw {
        call: Call,
        pub kernel: &'static str,
        pub lhs_packer: &'static str,
        mr: usize,
        kr: usize,
        sr: usize,
        m: usize,
        n: usize,
        k: usize,
        rhs: AlignedBuf,
        lhs: AlignedBuf,
    }

    macro_rules! find {
        ($family:ident, $name:expr) => {
            ifc::$family::KERNELS.iter().find(|(u, _)| u.name == $name).map(|(_, i)| i)
        };
    }

    impl Raw {
        /// The raw sequence for the kernel `w` uses for `m` rows, reading
        /// the packed weights `w` holds (from its serialised form).
        pub fn new(w: &PackedWeights, m: usize) -> Result<Raw, String> {
            let kernel = w.kernel_for(m).ok_or("no kernel runs here (the reference would)")?;
            let info = kleidiai::registry::by_name(kernel).ok_or("kernel not in the registry")?;
            let file = w.to_bytes().map_err(|e| e.to_string())?;
            let h = FileHeader::parse(&file).map_err(|e| e.to_string())?;
            let slot = h
                .slots
                .iter()
                .find(|s| s.gemm_kernel == kernel || s.gemv_kernel == kernel)
                .ok_or("no packed slot for the kernel")?;
            let mut rhs = AlignedBuf::zeroed(slot.len as usize);
            rhs.as_mut_slice().copy_from_slice(&file[slot.offset as usize..(slot.offset + slot.len) as usize]);
            // SAFETY: (every getter call below) kernel_for chose this kernel
            // because the CPU has all its features, so its getters (which
            // execute SME instructions for SME kernels) may run.
            let (call, mr, kr, sr) = unsafe {
                macro_rules! tiles {
                    ($i:expr) => {
                        ($i.get_mr.unwrap()(), $i.get_kr.unwrap()(), $i.get_sr.unwrap()())
                    };
                }
                if let Some(i) = find!(matmul_clamp_f32_qai8dxp_qsi4c32p, kernel) {
                    let (mr, kr, sr) = tiles!(i);
                    (Call::Qai8dxp(i.run_matmul), mr, kr, sr)
                } else if let Some(i) = find!(matmul_clamp_f32_f16p_qsi4c32p, kernel) {
                    let (mr, kr, sr) = tiles!(i);
                    (Call::F16p(i.run_matmul), mr, kr, sr)
                } else if let Some(i) = find!(matmul_clamp_f32_f32p_f32p, kernel) {
                    let (mr, kr, sr) = tiles!(i);
                    (Call::F32p(i.run_matmul), mr, kr, sr)
                } else if let Some(i) = find!(matmul_clamp_f32_f32_f32p, kernel) {
                    (Call::F32(i.run_matmul), 1, 1, 1)
                } else if let Some(i) = find!(matmul_clamp_f32_qsi8d32p_qsi4c32p, kernel) {
                    let (mr, kr, sr) = tiles!(i);
                    let packer = match info.lhs_packer {
                        Some("kai_lhs_quant_pack_qsi8d32p_f32_neon") => Qsi8d32Packer::Neon,
                        Some("kai_lhs_quant_pack_qsi8d32p4x8sb_f32_neon") => Qsi8d32Packer::Sb4x8,
                        _ => Qsi8d32Packer::Scalar,
                    };
                    (Call::Qsi8d32p(i.run_matmul, packer), mr, kr, sr)
                } else if let Some(i) = find!(matmul_clamp_f32_qsi8d32p_qai4c32p, kernel) {
                    let (mr, kr, sr) = tiles!(i);
                    let packer = match info.lhs_packer {
                        Some("kai_lhs_quant_pack_qsi8d32p_f32_neon") => Qsi8d32Packer::Neon,
                        Some("kai_lhs_quant_pack_qsi8d32pscalef32_f32_neon") => Qsi8d32Packer::ScaleF32,
                        other => return Err(format!("{kernel}: qsi8d32p LHS packer {other:?} not driven raw here")),
                    };
                    (Call::Qsi8d32p(i.run_matmul, packer), mr, kr, sr)
                } else if let Some(i) = find!(matmul_clamp_f32_qai8dxp_qsi8cxp, kernel) {
                    let (mr, kr, sr) = tiles!(i);
                    (Call::Qai8dxpCx(i.run_matmul), mr, kr, sr)
                } else if let Some(i) = find!(matmul_clamp_f32_qai8dxp_qsi4cxp, kernel) {
                    let (mr, kr, sr) = tiles!(i);
                    (Call::Qai8dxpCx(i.run_matmul), mr, kr, sr)
                } else if let Some(i) =
                    find!(matmul_clamp_f32_bf16p_bf16p, kernel).or(find!(matmul_clamp_fp32_bf16p_bf16p, kernel))
                {
                    let (mr, kr, sr) = tiles!(i);
                    let packer = match info.lhs_packer {
                        Some("kai_lhs_pack_bf16p2vlx2_f32_sme") => Bf16Packer::Sme,
                        Some("kai_lhs_pack_bf16p2vlx2_f32_sme2") => Bf16Packer::Sme2,
                        Some("kai_lhs_quant_pack_bf16p1x4_f32_neon") => Bf16Packer::Neon1x4,
                        Some("kai_lhs_quant_pack_bf16p8x4_f32_neon") => Bf16Packer::Neon8x4,
                        other => return Err(format!("{kernel}: bf16 LHS packer {other:?} not driven raw here")),
                    };
                    (Call::Bf16(i.run_matmul, packer), mr, kr, sr)
                } else {
                    return Err(format!("{} is not a family this probe drives raw", info.family));
                }
            };
            let (n, k) = (w.n(), w.k());
            // SAFETY: size queries, arithmetic only.
            let lhs_size = unsafe {
                match call {
                    Call::Qai8dxp(_) => sys::kai_get_lhs_packed_size_lhs_quant_pack_qai8dxp_f32(m, k, mr, kr, sr),
                    Call::F16p(_) => sys::kai_get_lhs_packed_size_lhs_pack_f16pmrx2_f32_neon(m, k, 32, mr, kr, sr),
                    Call::F32p(_) => sys::kai_get_lhs_packed_size_lhs_pack_f32p2vlx1_f32_sme(m, k, mr, kr, sr),
                    Call::F32(_) => 0,
                    Call::Qsi8d32p(_, Qsi8d32Packer::Scalar) => {
                        sys::kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p_f32(m, k, 32, mr, kr, sr)
                    }
                    Call::Qsi8d32p(_, Qsi8d32Packer::Neon) => {
                        sys::kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p_f32_neon(m, k, 32, mr, kr, sr)
                    }
                    Call::Qsi8d32p(_, Qsi8d32Packer::Sb4x8) => {
                        sys::kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p4x8sb_f32_neon(m, k, 32, mr, kr, sr)
                    }
                    Call::Qsi8d32p(_, Qsi8d32Packer::ScaleF32) => {
                        sys::kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32pscalef32_f32_neon(m, k, 32, mr, kr, sr)
                    }
                    Call::Qai8dxpCx(_) => sys::kai_get_lhs_packed_size_lhs_quant_pack_qai8dxp_f32(m, k, mr, kr, sr),
                    Call::Bf16(_, Bf16Packer::Sme) => {
                        sys::kai_get_lhs_packed_size_lhs_pack_bf16p2vlx2_f32_sme(m, k, mr, kr, sr)
                    }
                    Call::Bf16(_, Bf16Packer::Sme2) => {
                        sys::kai_get_lhs_packed_size_lhs_pack_bf16p2vlx2_f32_sme2(m, k, mr, kr, sr)
                    }
                    Call::Bf16(_, Bf16Packer::Neon1x4) => {
                        sys::kai_get_lhs_packed_size_lhs_quant_pack_bf16p1x4_f32_neon(m, k, mr, kr, sr)
                    }
                    Call::Bf16(_, Bf16Packer::Neon8x4) => {
                        sys::kai_get_lhs_packed_size_lhs_quant_pack_bf16p8x4_f32_neon(m, k, mr, kr, sr)
                    }
                }
            };
            let lhs_packer = info.lhs_packer.unwrap_or("(none: the kernel reads the LHS)");
            let lhs = AlignedBuf::zeroed(lhs_size.max(1));
            Ok(Raw { call, kernel, lhs_packer, mr, kr, sr, m, n, k, rhs, lhs })
        }

        /// `y = x · wᵀ`: pack the LHS, run the kernel over the whole output.
        #[inline(never)]
        pub fn matmul(&mut self, x: &[f32], y: &mut [f32]) {
            assert!(x.len() >= self.m * self.k && y.len() >= self.m * self.n);
            let (m, n, k, mr, kr, sr) = (self.m, self.n, self.k, self.mr, self.kr, self.sr);
            let (min, max) = (kleidiai::Clamp::NONE.min, kleidiai::Clamp::NONE.max);
            let lhs = self.lhs.as_mut_slice().as_mut_ptr().cast::<core::ffi::c_void>();
            let rhs = self.rhs.as_ptr().cast::<core::ffi::c_void>();
            // SAFETY: the buffers are sized by the packers' own queries for
            // these m, k, mr, kr, sr; the RHS bytes are what the safe path
            // packed for this kernel and n, k; x and y hold m rows (asserted).
            unsafe {
                match self.call {
                    Call::Qai8dxp(run) => {
                        sys::kai_run_lhs_quant_pack_qai8dxp_f32(m, k, mr, kr, sr, 0, x.as_ptr(), k * 4, lhs);
                        run.expect("the generated table fills run_matmul")(
                            m,
                            n,
                            k,
                            32,
                            lhs,
                            rhs,
                            y.as_mut_ptr(),
                            n * 4,
                            4,
                            min,
                            max,
                        );
                    }
                    Call::F16p(run) => {
                        sys::kai_run_lhs_pack_f16pmrx2_f32_neon(m, k, 32, mr, kr, sr, 0, x.as_ptr().cast(), k * 4, lhs);
                        run.expect("the generated table fills run_matmul")(
                            m,
                            n,
                            k,
                            32,
                            lhs,
                            rhs,
                            y.as_mut_ptr(),
                            n * 4,
                            4,
                            min,
                            max,
                        );
                    }
                    Call::F32p(run) => {
                        sys::kai_run_lhs_pack_f32p2vlx1_f32_sme(m, k, mr, kr, sr, 0, x.as_ptr().cast(), k * 4, lhs);
                        run.expect("the generated table fills run_matmul")(
                            m,
                            n,
                            k,
                            lhs,
                            rhs,
                            y.as_mut_ptr().cast(),
                            n * 4,
                            4,
                            min,
                            max,
                        );
                    }
                    Call::Qsi8d32p(run, packer) => {
                        let (x, st) = (x.as_ptr(), k * 4);
                        match packer {
                            Qsi8d32Packer::Scalar => {
                                sys::kai_run_lhs_quant_pack_qsi8d32p_f32(m, k, 32, mr, kr, sr, 0, x, st, lhs)
                            }
                            Qsi8d32Packer::Neon => {
                                sys::kai_run_lhs_quant_pack_qsi8d32p_f32_neon(m, k, 32, mr, kr, sr, 0, x, st, lhs)
                            }
                            Qsi8d32Packer::Sb4x8 => {
                                sys::kai_run_lhs_quant_pack_qsi8d32p4x8sb_f32_neon(m, k, 32, mr, kr, sr, 0, x, st, lhs)
                            }
                            Qsi8d32Packer::ScaleF32 => sys::kai_run_lhs_quant_pack_qsi8d32pscalef32_f32_neon(
                                m, k, 32, mr, kr, sr, 0, x, st, lhs,
                            ),
                        }
                        run.expect("the generated table fills run_matmul")(
                            m,
                            n,
                            k,
                            32,
                            lhs,
                            rhs,
                            y.as_mut_ptr(),
                            n * 4,
                            4,
                            min,
                            max,
                        );
                    }
                    Call::Qai8dxpCx(run) => {
                        sys::kai_run_lhs_quant_pack_qai8dxp_f32(m, k, mr, kr, sr, 0, x.as_ptr(), k * 4, lhs);
                        run.expect("the generated table fills run_matmul")(
                            m,
                            n,
                            k,
                            lhs,
                            rhs,
                            y.as_mut_ptr(),
                            n * 4,
                            4,
                            min,
                            max,
                        );
                    }
                    Call::Bf16(run, packer) => {
                        let (x, st) = (x.as_ptr().cast(), k * 4);
                        match packer {
                            Bf16Packer::Sme => {
                                sys::kai_run_lhs_pack_bf16p2vlx2_f32_sme(m, k, mr, kr, sr, 0, x, st, lhs)
                            }
                            Bf16Packer::Sme2 => {
                                sys::kai_run_lhs_pack_bf16p2vlx2_f32_sme2(m, k, mr, kr, sr, 0, x, st, lhs)
                            }
                            Bf16Packer::Neon1x4 => {
                                sys::kai_run_lhs_quant_pack_bf16p1x4_f32_neon(m, k, mr, kr, sr, 0, x, st, lhs)
                            }
                            Bf16Packer::Neon8x4 => {
                                sys::kai_run_lhs_quant_pack_bf16p8x4_f32_neon(m, k, mr, kr, sr, 0, x, st, lhs)
                            }
                        }
                        run.expect("the generated table fills run_matmul")(
                            m,
                            n,
                            k,
                            lhs,
                            rhs,
                            y.as_mut_ptr().cast(),
                            n * 4,
                            4,
                            min,
                            max,
                        );
                    }
                    Call::F32(run) => {
                        run.expect("the generated table fills run_matmul")(
                            m,
                            n,
                            k,
                            x.as_ptr().cast(),
                            k * 4,
                            rhs,
                            y.as_mut_ptr().cast(),
                            n * 4,
                            4,
                            min,
                            max,
                        );
                    }
                }
            }
        }
    }
}

/// One overhead case: both paths set up and checked against each other.
#[cfg(target_arch = "aarch64")]
struct Case {
    name: String,
    m: usize,
    packed: PackedWeights,
    raw: raw::Raw,
    x: Vec<f32>,
    y: Vec<f32>,
    scratch: Scratch,
}

#[cfg(target_arch = "aarch64")]
impl Case {
    fn new(kind: &'static str, m: usize, size: usize) -> Result<Case, String> {
        let w = Weights::new(kind, size, size);
        // One layout per kernel is enough here (the SME-free second slot
        // only matters when SME is switched off).
        let opts = PackOptions { non_sme_layout: false, ..Default::default() };
        let packed = PackedWeights::pack(&w.view(size, size), &opts).map_err(|e| e.to_string())?;
        let raw = raw::Raw::new(&packed, m)?;
        let x = data(m * size, 9);
        let mut c = Case {
            name: format!("{kind}:{m}"),
            m,
            packed,
            raw,
            x,
            y: vec![0.0; m * size],
            scratch: Scratch::default(),
        };
        c.safe();
        let safe = c.y.clone();
        c.y.fill(0.0);
        c.raw();
        if safe.iter().zip(&c.y).any(|(a, b)| a.to_bits() != b.to_bits()) {
            return Err(format!("{}: the safe and raw outputs differ", c.name));
        }
        Ok(c)
    }
    #[inline(never)]
    fn safe(&mut self) {
        let (x, y) = (Activation::F32(&self.x), ActivationMut::F32(&mut self.y));
        self.packed.matmul(self.m, x, y, Clamp::NONE, Parallelism::Sequential, &mut self.scratch).unwrap();
    }
    #[inline(never)]
    fn raw(&mut self) {
        self.raw.matmul(&self.x, &mut self.y);
    }
}

/// A system call xtask finds in qemu's log (`-d strace`): the path names
/// the event.
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
#[inline(never)]
fn mark(what: &str) {
    let _ = std::fs::metadata(format!("/kleidiai-mark/{what}"));
}

#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
const CASES: [(&str, usize); 12] = [
    ("q4_0", 1),
    ("q4_0", 64),
    ("f32", 1),
    ("f32", 64),
    ("q8_0", 1),
    ("i4", 1),
    ("i4b", 1),
    ("i4a", 1),
    ("i8", 1),
    ("f16", 1),
    ("bf16", 1),
    ("bf16", 64),
];

#[cfg(target_arch = "aarch64")]
fn overhead(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("--count") => {
            let case = args.get(1).ok_or("--count CASE ITERS")?;
            let iters: usize = args.get(2).and_then(|v| v.parse().ok()).ok_or("--count CASE ITERS")?;
            // kind:m, or kind:m:size for n = k = size (default 1024).
            let mut parts = case.split(':');
            let (Some(kind), Some(m)) = (parts.next(), parts.next()) else {
                return Err("CASE is kind:m[:size]".into());
            };
            let size = parts.next().map_or(Ok(SIZE), |v| v.parse().map_err(|_| "bad size"))?;
            let kind = CASES.iter().find(|c| c.0 == kind).ok_or("unknown kind")?.0;
            let mut c = Case::new(kind, m.parse().map_err(|_| "bad m")?, size)?;
            println!("case {} kernel={} lhs_packer={}", c.name, c.raw.kernel, c.raw.lhs_packer);
            // Warm (scratch allocated, code translated), then the windows;
            // an empty window measures the markers themselves.
            c.safe();
            c.raw();
            mark("begin/empty");
            mark("end/empty");
            mark("begin/safe");
            for _ in 0..iters {
                c.safe();
            }
            mark("end/safe");
            mark("begin/raw");
            for _ in 0..iters {
                c.raw();
            }
            mark("end/raw");
            // The safe path without its non-finite scan (NonFinite::Kernel):
            // the difference to `safe` is what the scan costs.
            c.packed.set_non_finite(kleidiai::weights::NonFinite::Kernel);
            c.safe();
            mark("begin/kernel");
            for _ in 0..iters {
                c.safe();
            }
            mark("end/kernel");
            Ok(())
        }
        Some("--time") | None => {
            let rounds: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(15);
            for (kind, m) in CASES {
                let mut c = Case::new(kind, m, SIZE)?;
                // Batches of about the same length for every case.
                let iters = if m == 1 { 20 } else { 2 };
                let (mut best_safe, mut best_raw) = (Duration::MAX, Duration::MAX);
                for _ in 0..rounds {
                    let t = Instant::now();
                    for _ in 0..iters {
                        c.safe();
                    }
                    best_safe = best_safe.min(t.elapsed());
                    let t = Instant::now();
                    for _ in 0..iters {
                        c.raw();
                    }
                    best_raw = best_raw.min(t.elapsed());
                }
                let per = |d: Duration| d.as_secs_f64() * 1e6 / iters as f64;
                println!(
                    "time {} kernel={} lhs_packer={} safe_us={:.1} raw_us={:.1} ratio={:.4}",
                    c.name,
                    c.raw.kernel,
                    c.raw.lhs_packer,
                    per(best_safe),
                    per(best_raw),
                    best_safe.as_secs_f64() / best_raw.as_secs_f64()
                );
            }
            Ok(())
        }
        Some(other) => Err(format!("unknown overhead option {other}")),
    }
}

#[cfg(not(target_arch = "aarch64"))]
fn overhead(_: &[String]) -> Result<(), String> {
    Err("the overhead measurement needs an aarch64 target (the raw bindings exist only there)".into())
}

fn scaling(args: &[String]) -> Result<(), String> {
    let num = |i: usize, what: &str| -> Result<usize, String> {
        args.get(i).and_then(|v| v.parse().ok()).ok_or(format!("scaling KIND M SIZE REPS: bad {what}"))
    };
    let kind = match args.first().map(String::as_str) {
        Some("q4_0") => "q4_0",
        Some("f32") => "f32",
        _ => return Err("scaling KIND M SIZE REPS (KIND: q4_0 or f32)".into()),
    };
    let (m, size, reps) = (num(1, "M")?, num(2, "SIZE")?, num(3, "REPS")?.max(1));
    let w = Weights::new(kind, size, size);
    let packed = PackedWeights::pack(&w.view(size, size), &PackOptions::default()).map_err(|e| e.to_string())?;
    let x = data(m * size, 9);
    let mut outs = Vec::new();
    let mut times = Vec::new();
    for par in [Parallelism::Sequential, Parallelism::Rayon(2)] {
        let mut y = vec![0f32; m * size];
        let mut scratch = Scratch::default();
        let mut best = Duration::MAX;
        for _ in 0..reps {
            let t = Instant::now();
            packed
                .matmul(m, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE, par, &mut scratch)
                .map_err(|e| e.to_string())?;
            best = best.min(t.elapsed());
        }
        outs.push(y);
        times.push(best);
    }
    let identical = outs[0].iter().zip(&outs[1]).all(|(a, b)| a.to_bits() == b.to_bits());
    println!(
        "scaling {kind} m={m} n=k={size} kernel={} t1_ms={:.1} t2_ms={:.1} speedup={:.3} bit_identical={identical}",
        packed.kernel_for(m).unwrap_or("reference"),
        times[0].as_secs_f64() * 1e3,
        times[1].as_secs_f64() * 1e3,
        times[0].as_secs_f64() / times[1].as_secs_f64()
    );
    if identical { Ok(()) } else { Err("1 and 2 threads gave different results".into()) }
}

/// The default choice's cost: `KIND:M ITERS [--separate-gemv]
/// [--keep-as-given] [GEMM [GEMV]]` (see the module docs): with the options,
/// those `PackOptions`; with kernel names, that pairing instead of the
/// default choice.
fn cost(args: &[String]) -> Result<(), String> {
    let case = args.first().ok_or("cost KIND:M ITERS [GEMM [GEMV]]")?;
    let iters: usize = args.get(1).and_then(|v| v.parse().ok()).ok_or("cost KIND:M ITERS")?;
    let (kind, m) = case.split_once(':').ok_or("CASE is kind:m")?;
    let kind = KINDS.into_iter().find(|k| *k == kind).ok_or("unknown kind")?;
    let m: usize = m.parse().map_err(|_| "bad m")?;
    let w = Weights::new(kind, SIZE, SIZE);
    let act = if kind == "f16h" { kleidiai::weights::DType::F16 } else { kleidiai::weights::DType::F32 };
    let mut opts = PackOptions { activation: act, ..PackOptions::default() };
    let mut names = Vec::new();
    let mut p = lexopt::Parser::from_args(&args[2..]);
    while let Some(a) = p.next().map_err(|e| e.to_string())? {
        match a {
            lexopt::Arg::Long("separate-gemv") => opts.separate_gemv = true,
            lexopt::Arg::Long("keep-as-given") => opts.keep_as_given = true,
            lexopt::Arg::Value(v) => names.push(v.into_string().map_err(|_| "kernel names are UTF-8")?),
            other => return Err(other.unexpected().to_string()),
        }
    }
    let args = [&args[..2], &names[..]].concat();
    let packed = match args.get(2) {
        None => PackedWeights::pack(&w.view(SIZE, SIZE), &opts),
        Some(gemm) => {
            let gemv: Option<&'static str> = args.get(3).map(|v| &*Box::leak(v.clone().into_boxed_str()));
            let gemm: &'static str = Box::leak(gemm.clone().into_boxed_str());
            let p = kleidiai::weights::policy::Pairing::new(gemm, gemv);
            PackedWeights::pack_with(&w.view(SIZE, SIZE), &[p], &opts)
        }
    }
    .map_err(|e| e.to_string())?;
    let bytes = packed.to_bytes().map_err(|e| e.to_string())?.len();
    let x = data(m * SIZE, 9);
    let xh: Vec<half::f16> = x.iter().map(|v| half::f16::from_f32(*v)).collect();
    let mut y = vec![0f32; m * SIZE];
    let mut yh = vec![half::f16::ZERO; m * SIZE];
    let mut scratch = Scratch::default();
    let mut call = |y: &mut [f32], yh: &mut [half::f16]| {
        let (xa, ya) = if act == kleidiai::weights::DType::F16 {
            (Activation::F16(&xh), ActivationMut::F16(yh))
        } else {
            (Activation::F32(&x), ActivationMut::F32(y))
        };
        packed.matmul(m, xa, ya, Clamp::NONE, Parallelism::Sequential, &mut scratch).map_err(|e| e.to_string())
    };
    // Warm (plan made, scratch allocated, code translated), then the windows.
    call(&mut y, &mut yh)?;
    mark("begin/empty");
    mark("end/empty");
    mark("begin/safe");
    for _ in 0..iters {
        call(&mut y, &mut yh)?;
    }
    mark("end/safe");
    let layouts: Vec<String> = packed
        .layouts()
        .iter()
        .map(|(g, v)| format!("{g}{}", v.map(|v| format!("+{v}")).unwrap_or_default()))
        .collect();
    println!(
        "case {kind}:{m} kernel={} layouts={} file_bytes={bytes} input_bytes={} checksum={:08x}",
        packed.kernel_for(m).unwrap_or("reference"),
        layouts.join(","),
        w.input_bytes(),
        y.iter().fold(0u32, |h, v| h.rotate_left(5) ^ v.to_bits())
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("overhead") => overhead(&args[1..]),
        Some("scaling") => scaling(&args[1..]),
        Some("cost") => cost(&args[1..]),
        _ => Err("usage: measure overhead [--time ROUNDS | --count KIND:M ITERS] | scaling KIND M SIZE REPS | cost KIND:M ITERS".into()),
    };
    if let Err(e) = r {
        eprintln!("measure: {e}");
        std::process::exit(1);
    }
}
