//! What the registry knows about one kernel ([`KernelInfo`]) and how one
//! is chosen among several: the part the family modules build their
//! entries with (the registry's list itself is made from the families).

use crate::cpu::{CpuFeature, Features};

/// A vector-length condition beyond the feature bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VectorLength {
    /// Runs at any vector length (NEON, or scalable kernels).
    Any,
    /// Needs exactly this SVE vector length in bytes (e.g. 32: 256-bit).
    SveBytes(usize),
}

/// GEMM (several LHS rows per tile) or GEMV (one row per tile).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TileKind {
    /// Matrix-matrix: the kernel's M step is larger than one.
    Gemm,
    /// Matrix-vector: one LHS row at a time; preferred for m == 1.
    Gemv,
}

/// What the registry knows about one compute micro-kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KernelInfo {
    /// Upstream name (`kai_matmul_clamp_...`).
    pub name: &'static str,
    /// Upstream family directory (`matmul_clamp_f32_qai8dxp_qsi4cxp`).
    pub family: &'static str,
    /// CPU features it needs.
    pub features: &'static [CpuFeature],
    /// Vector-length condition.
    pub vector_length: VectorLength,
    /// GEMM or GEMV.
    pub tile: TileKind,
    /// Upstream LHS packing routine it pairs with, if its LHS is packed.
    pub lhs_packer: Option<&'static str>,
    /// Upstream RHS packing routine(s) it pairs with (N x K first).
    pub rhs_packers: &'static [&'static str],
    /// Higher is preferred when several kernels can run.
    pub rank: u32,
}

impl KernelInfo {
    /// The highest tier among its features (what the kernel is "for").
    pub fn tier(&self) -> CpuFeature {
        *self.features.iter().max_by_key(|f| tier_score(**f)).unwrap_or(&CpuFeature::Neon)
    }

    /// `Ok` when it can run with `f`, else why not (missing features or
    /// another vector length).
    pub fn supported(&self, f: &Features) -> Result<(), String> {
        if !f.has_all(self.features) {
            let missing: Vec<&str> = self.features.iter().filter(|x| !f.has(**x)).map(|x| x.name()).collect();
            return Err(format!("needs {}", missing.join("+")));
        }
        if let VectorLength::SveBytes(want) = self.vector_length {
            let have = f.sve_vector_bytes().unwrap_or(0);
            if have != want {
                return Err(format!("needs SVE VL {}, have {}", want * 8, have * 8));
            }
        }
        Ok(())
    }

    /// Whether it runs in SME streaming mode (its workers are capped, see
    /// [`crate::par::sme_thread_cap`]).
    pub fn is_sme(&self) -> bool {
        self.features.contains(&CpuFeature::Sme)
    }
}

/// Preference of a tier (higher first).
pub fn tier_score(f: CpuFeature) -> u32 {
    match f {
        CpuFeature::Neon => 0,
        CpuFeature::Fp16 | CpuFeature::Bf16 => 1,
        CpuFeature::Dotprod => 2,
        CpuFeature::I8mm => 3,
        CpuFeature::Sve | CpuFeature::Sve2 => 4,
        CpuFeature::Sve2p1 => 5,
        CpuFeature::Sme => 6,
        CpuFeature::Sme2 | CpuFeature::Sme2p1 => 7,
    }
}

/// Rank from the upstream name: tier first, then tuning (a kernel tuned for
/// an in-order core such as Cortex-A55 is a fallback elsewhere).
pub(crate) fn rank_for(name: &str, features: &[CpuFeature]) -> u32 {
    let tier = features.iter().map(|f| tier_score(*f)).max().unwrap_or(0);
    let mut r = tier * 100 + 50;
    if name.contains("cortexa55") {
        r -= 10;
    }
    r
}

/// GEMV when the tile token of the name (`1x4`, `1x8vl`, `1x4x32`, ...)
/// starts with one row.
pub(crate) fn tile_kind_for(name: &str) -> TileKind {
    let tile = name
        .split('_')
        .rfind(|t| t.chars().next().is_some_and(|c| c.is_ascii_digit()) && t.contains('x'))
        .unwrap_or("");
    if tile.starts_with("1x") { TileKind::Gemv } else { TileKind::Gemm }
}

/// The best of `candidates` that runs with `f` for `m` output rows. The
/// generic part is a loop (no iterator chain per caller's type); the choice
/// is [`best_of`], compiled once.
#[inline]
pub(crate) fn select_from<'a>(
    candidates: impl Iterator<Item = &'a KernelInfo>,
    m: usize,
    f: &Features,
) -> Option<&'a KernelInfo> {
    let mut runnable: Vec<&KernelInfo> = Vec::new();
    for k in candidates {
        if k.supported(f).is_ok() {
            runnable.push(k);
        }
    }
    best_of(&runnable, m)
}

/// The preferred tile kind's highest rank of `runnable` (ties: the first
/// name), else the highest rank of any kind.
fn best_of<'a>(runnable: &[&'a KernelInfo], m: usize) -> Option<&'a KernelInfo> {
    let preferred = if m == 1 { TileKind::Gemv } else { TileKind::Gemm };
    let best = |kind: Option<TileKind>| {
        runnable
            .iter()
            .copied()
            .filter(|k| kind.is_none_or(|t| k.tile == t))
            .max_by(|a, b| a.rank.cmp(&b.rank).then_with(|| b.name.cmp(a.name)))
    };
    best(Some(preferred)).or_else(|| best(None))
}
