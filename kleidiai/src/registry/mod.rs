//! The registry: one [`KernelInfo`] per upstream compute micro-kernel this
//! build compiled, generated from the `kleidiai-sys` manifest by the family
//! modules; selection of the best kernel the CPU can run; and a report of
//! what is built, supported and selected.
//!
//! ```
//! use kleidiai::cpu::Features;
//! use kleidiai::registry;
//! let f = Features::current();
//! for k in registry::kernels() {
//!     let _ = (k.name, k.tier(), k.supported(&f).is_ok());
//! }
//! // On a CPU without any usable kernel (or on x86) selection says "reference".
//! let report = registry::report(&f);
//! println!("{report}");
//! ```

use crate::cpu::{CpuFeature, Features};
use core::fmt;
use std::sync::OnceLock;

pub(crate) mod info;
pub(crate) use info::select_from;
pub use info::{KernelInfo, TileKind, VectorLength, tier_score};

/// Every registered kernel (empty on non-Arm targets), sorted by family then
/// name.
pub fn kernels() -> &'static [&'static KernelInfo] {
    static ALL: OnceLock<Vec<&'static KernelInfo>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut v = crate::families::all_kernel_infos();
        v.sort_by(|a, b| (a.family, a.name).cmp(&(b.family, b.name)));
        v
    })
}

/// Looks a kernel up by its upstream name.
pub fn by_name(name: &str) -> Option<&'static KernelInfo> {
    kernels().iter().copied().find(|k| k.name == name)
}

/// The best kernel of `family` that can run with `f` for an output of `m`
/// rows: for `m == 1` a GEMV kernel when one can run, otherwise a GEMM one;
/// the highest rank wins, ties go to the name (deterministic).
pub fn select(family: &str, m: usize, f: &Features) -> Option<&'static KernelInfo> {
    select_from(kernels().iter().copied().filter(|k| k.family == family), m, f)
}

/// Built / supported / selected, per family, for one feature set.
#[derive(Clone, Debug)]
pub struct Report {
    /// Features the report was made for.
    pub features: Features,
    /// One line per family.
    pub families: Vec<FamilyReport>,
}

/// One family's line of a [`Report`].
#[derive(Clone, Debug)]
pub struct FamilyReport {
    /// Upstream family directory.
    pub family: &'static str,
    /// Kernels compiled into this build.
    pub built: usize,
    /// Of those, how many can run here.
    pub supported: usize,
    /// Selected for m == 1, or None: the portable reference path.
    pub gemv: Option<&'static str>,
    /// Selected for m > 1, or None: the portable reference path.
    pub gemm: Option<&'static str>,
    /// Tier of the GEMM selection.
    pub tier: Option<CpuFeature>,
}

/// What is built, supported and selected with `f`.
pub fn report(f: &Features) -> Report {
    let mut families: Vec<&'static str> = crate::families::FAMILIES.to_vec();
    families.sort_unstable();
    let families = families
        .into_iter()
        .map(|family| {
            let ks: Vec<&KernelInfo> = kernels().iter().copied().filter(|k| k.family == family).collect();
            let gemm = select(family, 64, f);
            FamilyReport {
                family,
                built: ks.len(),
                supported: ks.iter().filter(|k| k.supported(f).is_ok()).count(),
                gemv: select(family, 1, f).map(|k| k.name),
                gemm: gemm.map(|k| k.name),
                tier: gemm.map(|k| k.tier()),
            }
        })
        .collect();
    Report { features: *f, families }
}

impl Report {
    /// The highest tier any selection uses (None: reference only).
    pub fn highest_tier(&self) -> Option<CpuFeature> {
        self.families.iter().filter_map(|f| f.tier).max_by_key(|t| tier_score(*t))
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "features: {}", self.features)?;
        writeln!(
            f,
            "kernels built: {}, runnable here: {}",
            self.families.iter().map(|x| x.built).sum::<usize>(),
            self.families.iter().map(|x| x.supported).sum::<usize>()
        )?;
        for fam in &self.families {
            let name = |k: Option<&str>| k.map(|s| s.strip_prefix("kai_").unwrap_or(s).to_string());
            writeln!(
                f,
                "  {:<40} built {:>2} runnable {:>2}  m>1: {}  m=1: {}",
                fam.family,
                fam.built,
                fam.supported,
                name(fam.gemm).unwrap_or_else(|| "reference".into()),
                name(fam.gemv).unwrap_or_else(|| "reference".into()),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CpuFeature::*;
    use info::{rank_for, tile_kind_for};

    #[test]
    fn tile_kinds_from_names() {
        assert_eq!(tile_kind_for("kai_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod"), TileKind::Gemv);
        assert_eq!(tile_kind_for("kai_matmul_clamp_f32_qai8dxp4x8_qsi4cxp4x8_8x4x32_neon_i8mm"), TileKind::Gemm);
        assert_eq!(tile_kind_for("kai_matmul_clamp_f32_qai8dxp1vlx4_qsi4cxp4vlx4_1vlx4vl_sme_mopa"), TileKind::Gemm);
        assert_eq!(tile_kind_for("kai_matmul_clamp_f32_f32_f32p2vlx1b_1x16vl_sme2_mla"), TileKind::Gemv);
        assert_eq!(tile_kind_for("kai_matmul_clamp_f32_f32_f32p4vsx1bf32_1x32vs_sme2_mla"), TileKind::Gemv);
    }

    fn info(name: &'static str, features: &'static [CpuFeature], vl: VectorLength) -> KernelInfo {
        KernelInfo {
            name,
            family: "fam",
            features,
            vector_length: vl,
            tile: tile_kind_for(name),
            lhs_packer: None,
            rhs_packers: &[],
            rank: rank_for(name, features),
        }
    }

    #[test]
    fn selection_prefers_tier_then_gemv_for_one_row() {
        let ks = [
            info("k_4x4_16x4_neon_dotprod", &[Neon, Dotprod], VectorLength::Any),
            info("k_1x4_1x4_neon_dotprod", &[Neon, Dotprod], VectorLength::Any),
            info("k_4x8_16x4_neon_i8mm", &[Neon, I8mm], VectorLength::Any),
            info("k_1vlx4_1vlx4vl_sme2_mopa", &[Sme, Sme2], VectorLength::Any),
            info("k_4x8_16x8_sve_i8mm", &[Sve, I8mm], VectorLength::SveBytes(32)),
        ];
        let all = Features::synthetic(&CpuFeature::ALL, 64, 32);
        assert_eq!(select_from(ks.iter(), 64, &all).unwrap().name, "k_1vlx4_1vlx4vl_sme2_mopa");
        assert_eq!(select_from(ks.iter(), 1, &all).unwrap().name, "k_1x4_1x4_neon_dotprod");
        let no_sme = all.without(&[Sme]);
        assert_eq!(select_from(ks.iter(), 64, &no_sme).unwrap().name, "k_4x8_16x4_neon_i8mm");
        let v1 = Features::synthetic(&[Neon, Dotprod, I8mm, Sve], 32, 0);
        assert_eq!(select_from(ks.iter(), 64, &v1).unwrap().name, "k_4x8_16x8_sve_i8mm");
        let n1 = Features::synthetic(&[Neon, Dotprod], 0, 0);
        assert_eq!(select_from(ks.iter(), 64, &n1).unwrap().name, "k_4x4_16x4_neon_dotprod");
        assert!(select_from(ks.iter(), 64, &Features::none()).is_none());
        assert!(ks[4].supported(&all).unwrap_err().contains("256"));
    }

    #[test]
    fn registry_is_consistent() {
        for k in kernels() {
            assert!(kleidiai_sys::ukernel(k.name).is_some(), "{} not in the sys manifest", k.name);
            assert!(crate::families::FAMILIES.contains(&k.family), "{} family {}", k.name, k.family);
            assert_eq!(by_name(k.name).map(|x| x.name), Some(k.name));
        }
        let r = report(&Features::current());
        assert_eq!(r.families.len(), crate::families::FAMILIES.len());
    }
}
