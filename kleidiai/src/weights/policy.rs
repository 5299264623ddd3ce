//! Which kernels [`PackedWeights::pack`](super::PackedWeights::pack)
//! chooses, as data: per weight kind and activation type, an ordered list of
//! [`Pairing`]s, best first. Each pairs a GEMM kernel (m > 1) with the GEMV
//! kernel (m = 1) that reads the **same packed layout**, so one packed copy
//! serves every row count. `pack` takes the first pairing whose GEMM runs on
//! this CPU and takes these weights (a bias, the block length, the scale
//! type); the GEMV of that pairing serves one row when it runs too, else the
//! GEMM does.
//!
//! The order is tier first (SME2, SME, SVE at the vector length the kernel
//! needs, I8MM, DOTPROD, NEON). Within a tier the reasons are, in this
//! order: ggml's own pairing where ggml has one (so results match ggml's
//! KleidiAI path), then the pair that shares a layout, then the lower guest
//! instruction count (measured with `cargo run -p xtask --release -- measure
//! --kernels-only`). Every pairing says why it is where it is
//! ([`Pairing::why`]); where a tier has no GEMV reading its GEMM's layout,
//! the GEMM serves one row too and the reason says so.
//!
//! Kernels that no pairing names stay reachable through
//! [`crate::families`], one module per upstream family.
//!
//! ```
//! use kleidiai::weights::{policy, DType, WeightKind};
//! for p in policy::pairings(WeightKind::Int4Block, DType::F32) {
//!     println!("{} + {:?}: {}", p.gemm, p.gemv, p.why);
//! }
//! assert!(policy::pairings(WeightKind::Int4Block, DType::F32).iter().all(|p| p.gemv.is_some()));
//! ```

use super::{DType, WeightKind};

/// A GEMM kernel and the GEMV kernel that reads its packed layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pairing {
    /// Upstream name of the kernel for more than one row.
    pub gemm: &'static str,
    /// Upstream name of the kernel for one row, reading the GEMM's layout
    /// (None: the GEMM serves one row too).
    pub gemv: Option<&'static str>,
    /// A GEMV kernel that takes fewer instructions for one row but reads
    /// another layout: packed too only when asked
    /// ([`PackOptions::separate_gemv`](super::PackOptions::separate_gemv)),
    /// at the cost of a second copy of the weights.
    pub faster_gemv: Option<&'static str>,
    /// Why this pairing, and why here in the order.
    pub why: &'static str,
}

impl Pairing {
    /// A pairing of your own: `gemm` for more than one row, `gemv` (which
    /// must read `gemm`'s layout) for one.
    pub const fn new(gemm: &'static str, gemv: Option<&'static str>) -> Pairing {
        Pairing { gemm, gemv, faster_gemv: None, why: "" }
    }
}

const fn pair(gemm: &'static str, gemv: &'static str, why: &'static str) -> Pairing {
    Pairing { gemm, gemv: Some(gemv), faster_gemv: None, why }
}

const fn alone(gemm: &'static str, why: &'static str) -> Pairing {
    Pairing { gemm, gemv: None, faster_gemv: None, why }
}

/// `p` with a faster GEMV of another layout, packed only when asked.
const fn faster(p: Pairing, gemv: &'static str) -> Pairing {
    Pairing { faster_gemv: Some(gemv), ..p }
}

/// f32 weights (and f16 or bf16 weights widened to f32) with f32
/// activations.
const F32: &[Pairing] = &[
    faster(
        pair(
            "kai_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa",
            "kai_matmul_clamp_f32_f32_f32p2vlx1b_1x16vl_sme2_mla",
            "SME2: ggml's F32 pair, one layout; the GEMV of its own layout takes half the instructions for one \
             row (PackOptions::separate_gemv)",
        ),
        "kai_matmul_clamp_f32_f32_f32p16vlx1b_1x16vl_sme2_mla",
    ),
    pair(
        "kai_matmul_clamp_f32_f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa",
        "kai_matmul_clamp_f32_f32_f32p2vlx1b_1x8vl_sme_mla",
        "SME: ggml's SME GEMM and the SME GEMV of its layout",
    ),
    alone(
        "kai_matmul_clamp_f32_f32_f32p4vlx1b_6x4vl_sve_mla",
        "SVE: upstream has no SVE f32 GEMV; this 6-row kernel reads the LHS directly and serves one row",
    ),
    alone(
        "kai_matmul_clamp_f32_f32_f32p16x1b_6x16_neon_mla",
        "NEON: no f32 GEMV upstream; the 6x16 tile takes 15% fewer instructions than the 6x8x4 one (m = 1 and 64)",
    ),
];

/// f16 weights with f16 activations and outputs.
const F16_F16: &[Pairing] = &[
    pair(
        "kai_matmul_clamp_f16_f16p2vlx2_f16p2vlx2_2vlx2vl_sme2_mopa",
        "kai_matmul_clamp_f16_f16_f16p2vlx2b_1x16vl_sme2_dot",
        "SME2: GEMM and GEMV of one layout",
    ),
    pair(
        "kai_matmul_clamp_f16_f16p2vlx2_f16p2vlx2b_2vlx2vl_sme_mopa",
        "kai_matmul_clamp_f16_f16_f16p2vlx2b_1x8vl_sme_mla",
        "SME: GEMM and GEMV of one layout",
    ),
    alone(
        "kai_matmul_clamp_f16_f16_f16p16vsx2bf16_6x16vs_sve2p1_dot",
        "SVE2.1: no GEMV upstream; this 6-row kernel reads the LHS directly and serves one row",
    ),
    alone(
        "kai_matmul_clamp_f16_f16_f16p32x1b_6x32_neon_mla",
        "FP16 NEON: no GEMV upstream; the 6x32 tile takes 8-9% fewer instructions than the 6x16x8 one (m = 1 and 64)",
    ),
];

/// bf16 weights with f32 activations: the bf16 kernels, then the f32 ones
/// (bf16 widens to f32 exactly) where no bf16 kernel runs.
const BF16: &[Pairing] = &[
    alone(
        "kai_matmul_clamp_f32_bf16p2vlx2_bf16p2vlx2_2vlx2vl_sme2_mopa",
        "SME2: no bf16 GEMV reads this layout; the GEMM serves one row, in 42% fewer instructions than the NEON \
         bf16 GEMV",
    ),
    alone(
        "kai_matmul_clamp_f32_bf16p2vlx2_bf16p2vlx2_2vlx2vl_sme_mopa",
        "SME: no bf16 GEMV reads this layout; the GEMM serves one row (one copy instead of two)",
    ),
    pair(
        "kai_matmul_clamp_f32_bf16p8x4_bf16p12x4b_8x12_neon_mmla",
        "kai_matmul_clamp_f32_bf16p1x4_bf16p12x4b_1x36_neon_dot",
        "BF16 NEON: GEMM and GEMV of one layout",
    ),
];

/// int8 weights with one scale per channel (and ggml Q8_0, requantised the
/// way ggml does), f32 activations: ggml's Q8_0 table.
const INT8: &[Pairing] = &[
    pair(
        "kai_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa",
        "kai_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme2_dot",
        "SME2: ggml's Q8_0 pair, one layout",
    ),
    pair(
        "kai_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme_mopa",
        "kai_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme_dot",
        "SME: ggml's Q8_0 pair, one layout",
    ),
    faster(
        pair(
            "kai_matmul_clamp_f32_qai8dxp4x8_qsi8cxp4x8_16x4_neon_i8mm",
            "kai_matmul_clamp_f32_qai8dxp1x8_qsi8cxp4x8_1x4_neon_dotprod",
            "I8MM: ggml's Q8_0 pair, one layout; the 1x4 GEMV of another layout takes 3% fewer instructions",
        ),
        "kai_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4x4_1x4_neon_dotprod",
    ),
    pair(
        "kai_matmul_clamp_f32_qai8dxp4x4_qsi8cxp4x4_16x4_neon_dotprod",
        "kai_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4x4_1x4_neon_dotprod",
        "DOTPROD: ggml's Q8_0 pair, one layout",
    ),
];

/// int4 weights with one scale per channel, f32 activations.
const INT4: &[Pairing] = &[
    pair(
        "kai_matmul_clamp_f32_qai8dxp1vlx8_qsi4cxp4vlx8_1vlx4vl_sme2_mopa",
        "kai_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4vlx4_1x4vl_sme2_sdot",
        "SME2: GEMM and GEMV of one layout",
    ),
    pair(
        "kai_matmul_clamp_f32_qai8dxp1vlx4_qsi4cxp4vlx4_1vlx4vl_sme_mopa",
        "kai_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4vlx4_1x4vl_sme_dot",
        "SME: GEMM and GEMV of one layout",
    ),
    pair(
        "kai_matmul_clamp_f32_qai8dxp4x8_qsi4cxp8x8_8x8x32_neon_i8mm",
        "kai_matmul_clamp_f32_qai8dxp1x8_qsi4cxp8x8_1x8x32_neon_dotprod",
        "I8MM: GEMM and GEMV of one layout; of the four i8mm pairs, the fewest instructions (13% fewer than the \
         next at m = 1, 15% at m = 64)",
    ),
    pair(
        "kai_matmul_clamp_f32_qai8dxp4x8_qsi4cxp4x4_16x4x32_neon_dotprod",
        "kai_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod",
        "DOTPROD: the GEMM and GEMV of one layout",
    ),
];

/// int4 weights with one scale per channel, bf16 activations and outputs.
const INT4_BF16: &[Pairing] = &[
    pair(
        "kai_matmul_clamp_bf16_qai8dxp4x8_qsi4cxp8x8_8x8_neon_i8mm",
        "kai_matmul_clamp_bf16_qai8dxp1x8_qsi4cxp8x8_1x8_neon_dotprod",
        "I8MM: GEMM and GEMV of one layout",
    ),
    alone(
        "kai_matmul_clamp_bf16_qai8dxp1x8_qsi4cxp8x8_1x8_neon_dotprod",
        "DOTPROD: the only kernel without I8MM; it serves every row count",
    ),
];

/// Block-quantised int4 weights (ggml Q4_0 included), f32 activations. On
/// SME2, SME and SVE ggml's Q4_0 kernels; below them the `qai8dxp` kernels
/// (activations quantised per row), whose GEMMs take 18-49% fewer
/// instructions than ggml's `qsi8d32` ones (per block of 32) at m = 64
/// (`kleidiai::ggml` keeps ggml's table). Weights with a bias, which the
/// `qsi8d32` and `f16p` kernels do not take, get the `qai8dxp` pairs.
const INT4_BLOCK: &[Pairing] = &[
    faster(
        pair(
            "kai_matmul_clamp_f32_f16p1vlx2_qsi4c32p4vlx2_1vlx4vl_sme2_mopa",
            "kai_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4vlx4_1x4vl_sme2_sdot",
            "SME2: ggml's Q4_0 pair, one layout; f16 activations in the GEMM (no LHS quantisation error), 18% \
             fewer instructions at m = 64 than the qai8dxp pair, whose GEMV takes 6% fewer at m = 1; no bias",
        ),
        "kai_matmul_clamp_f32_qai8dxp1x4_qsi4c32p4vlx4_1x4vl_sme2_dot",
    ),
    pair(
        "kai_matmul_clamp_f32_qai8dxp1vlx4_qsi4c32p4vlx4_1vlx4vl_sme2_mopa",
        "kai_matmul_clamp_f32_qai8dxp1x4_qsi4c32p4vlx4_1x4vl_sme2_dot",
        "SME2 with a bias: GEMM and GEMV of one layout",
    ),
    pair(
        "kai_matmul_clamp_f32_qsi8d32p1vlx4_qsi4c32p4vlx4_1vlx4vl_sme_mopa",
        "kai_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4vlx4_1x4vl_sme_dot",
        "SME: GEMM and GEMV of one layout; no bias",
    ),
    faster(
        pair(
            "kai_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p8x8_16x8_sve_i8mm",
            "kai_matmul_clamp_f32_qsi8d32p1x8_qsi4c32p8x8_1x8_sve_dotprod",
            "SVE at a 256-bit vector length only: ggml's pair, one layout; the 1x8 GEMV of the 8x4 layout takes \
             12% fewer instructions at m = 1; no bias",
        ),
        "kai_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p8x4_1x8_sve_dotprod",
    ),
    faster(
        pair(
            "kai_matmul_clamp_f32_qai8dxp4x8_qsi4c32p4x8_16x4x32_neon_i8mm",
            "kai_matmul_clamp_f32_qai8dxp1x8_qsi4c32p4x8_1x4x32_neon_dotprod",
            "I8MM: GEMM and GEMV of one layout; the fewest instructions at m = 64 (ggml's qsi8d32 pair: +49%); \
             the 1x8x32 GEMV of the 8x8 layout takes 16% fewer at m = 1",
        ),
        "kai_matmul_clamp_f32_qai8dxp1x8_qsi4c32p8x8_1x8x32_neon_dotprod",
    ),
    faster(
        pair(
            "kai_matmul_clamp_f32_qai8dxp4x4_qsi4c32p4x4_16x4_neon_dotprod",
            "kai_matmul_clamp_f32_qai8dxp1x4_qsi4c32p4x4_1x4_neon_dotprod",
            "DOTPROD: GEMM and GEMV of one layout; the fewest instructions at m = 64 (ggml's qsi8d32 pair: +49%); \
             the 1x8 GEMV of the 8x4 layout takes 16% fewer at m = 1",
        ),
        "kai_matmul_clamp_f32_qai8dxp1x4_qsi4c32p8x4_1x8_neon_dotprod",
    ),
];

/// Block-quantised int4 weights, bf16 activations and outputs.
const INT4_BLOCK_BF16: &[Pairing] = &[
    pair(
        "kai_matmul_clamp_bf16_qai8dxp4x8_qsi4c32p4x8_16x4_neon_i8mm",
        "kai_matmul_clamp_bf16_qai8dxp1x8_qsi4c32p4x8_1x4_neon_dotprod",
        "I8MM: GEMM and GEMV of one layout",
    ),
    alone(
        "kai_matmul_clamp_bf16_qai8dxp1x8_qsi4c32p4x8_1x4_neon_dotprod",
        "DOTPROD: the only kernel without I8MM; it serves every row count",
    ),
];

/// Asymmetric block int4 weights, f32 activations.
const INT4_ASYM: &[Pairing] = &[
    pair(
        "kai_matmul_clamp_f32_qsi8d32p1vlx4_qai4c32p4vlx4_1vlx4vl_sme2_mopa",
        "kai_matmul_clamp_f32_qsi8d32p1x4_qai4c32p4vlx4_1x4vl_sme2_dot",
        "SME2: GEMM and GEMV of one layout",
    ),
    pair(
        "kai_matmul_clamp_f32_qsi8d32p4x8_qai4c32p4x8_8x4_neon_i8mm",
        "kai_matmul_clamp_f32_qsi8d32p1x8_qai4c32p4x8_1x4_neon_dotprod",
        "I8MM: GEMM and GEMV of one layout",
    ),
    pair(
        "kai_matmul_clamp_f32_qsi8d32p4x4_qai4c32p4x4_8x4_neon_dotprod",
        "kai_matmul_clamp_f32_qsi8d32p1x4_qai4c32p4x4_1x4_neon_dotprod",
        "DOTPROD: GEMM and GEMV of one layout",
    ),
];

/// Asymmetric block int4 weights, f16 activations and outputs.
const INT4_ASYM_F16: &[Pairing] = &[
    pair(
        "kai_matmul_clamp_f16_qsi8d32p1vlx4_qai4c32p4vlx4_1vlx4vl_sme2_mopa",
        "kai_matmul_clamp_f16_qsi8d32p1x4_qai4c32p4vlx4_1x4vl_sme2_dot",
        "SME2: GEMM and GEMV of one layout",
    ),
    pair(
        "kai_matmul_clamp_f16_qsi8d32p4x8_qai4c32p4x8_8x4_neon_i8mm",
        "kai_matmul_clamp_f16_qsi8d32p1x8_qai4c32p4x8_1x4_neon_dotprod",
        "I8MM: GEMM and GEMV of one layout",
    ),
    pair(
        "kai_matmul_clamp_f16_qsi8d32p4x4_qai4c32p4x4_8x4_neon_dotprod",
        "kai_matmul_clamp_f16_qsi8d32p1x4_qai4c32p4x4_1x4_neon_dotprod",
        "DOTPROD: GEMM and GEMV of one layout",
    ),
];

/// bf16 weights: the bf16 kernels, then the f32 ones.
fn bf16_then_f32() -> &'static [Pairing] {
    static ALL: std::sync::OnceLock<Vec<Pairing>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| BF16.iter().chain(F32).copied().collect())
}

/// The pairings `pack` tries for weights of `kind` with `act` activations
/// and outputs, best first (empty: no kernel takes them; the portable
/// reference computes them, or no operation exists).
pub fn pairings(kind: WeightKind, act: DType) -> &'static [Pairing] {
    use WeightKind as K;
    match (kind, act) {
        (K::F32 | K::F16, DType::F32) => F32,
        (K::Bf16, DType::F32) => bf16_then_f32(),
        (K::F16, DType::F16) => F16_F16,
        (K::Int8PerChannel, DType::F32) => INT8,
        (K::Int4PerChannel, DType::F32) => INT4,
        (K::Int4PerChannel, DType::Bf16) => INT4_BF16,
        (K::Int4Block, DType::F32) => INT4_BLOCK,
        (K::Int4Block, DType::Bf16) => INT4_BLOCK_BF16,
        (K::Int4AsymBlock, DType::F32) => INT4_ASYM,
        (K::Int4AsymBlock, DType::F16) => INT4_ASYM_F16,
        _ => &[],
    }
}

/// The element type `kind` weights are kept in when `family`'s packer
/// converts them (f16 and bf16 weights on the f32 kernels, widened; ggml's
/// f16 weights on the bf16 SME2 kernel, rounded): such weights are kept as
/// given and packed per call when
/// [`PackOptions::keep_as_given`](super::PackOptions::keep_as_given) (ggml's
/// F16 weights always).
pub(crate) fn converted(kind: WeightKind, family: &str) -> Option<super::per_call::Elem> {
    use super::per_call::Elem;
    match (kind, family) {
        (
            WeightKind::F16,
            "matmul_clamp_f32_f32p_f32p" | "matmul_clamp_f32_f32_f32p" | "matmul_clamp_fp32_bf16p_bf16p",
        ) => Some(Elem::F16),
        (WeightKind::Bf16, "matmul_clamp_f32_f32p_f32p" | "matmul_clamp_f32_f32_f32p") => Some(Elem::Bf16),
        _ => None,
    }
}
