//! Raw FFI bindings to [Arm KleidiAI](https://github.com/ARM-software/kleidiai)
//! v1.30.0, built from the bundled sources.
//!
//! This crate is ABI only: no checks, no policy. Every function here is
//! `unsafe` and most have preconditions KleidiAI asserts (or, built with the
//! `ndebug` feature, assumes). Use the [`kleidiai`](https://docs.rs/kleidiai)
//! crate for a safe interface with run-time CPU dispatch.
//!
//! What was built is data: [`UKERNELS`] lists every compiled micro-kernel with
//! its upstream name, family, and the CPU features it needs. On aarch64 targets
//! the `interfaces` module holds, per compute family, each kernel's upstream
//! interface struct already filled with its functions.
//!
//! Building needs only the target's C compiler: the bindings are pregenerated
//! (the `bindgen` feature regenerates them, with libclang), and every KleidiAI
//! symbol is renamed `<SYMBOL_PREFIX>kai_*` at compile time, so another copy of
//! KleidiAI in the same program cannot clash with this one. The Rust names
//! stay upstream's.
//!
//! ```
//! let compute = kleidiai_sys::UKERNELS.iter().filter(|k| k.op != kleidiai_sys::Op::Pack).count();
//! if cfg!(target_arch = "aarch64") {
//!     assert!(compute > 0);
//! } else {
//!     assert_eq!(compute, 0); // nothing is compiled for other architectures
//! }
//! ```
#![no_std]
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

/// The KleidiAI release these bindings were generated from.
pub const KLEIDIAI_VERSION: &str = "1.30.0";

/// A CPU feature a micro-kernel needs at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CpuFeature {
    /// Advanced SIMD (always present on aarch64).
    Neon,
    /// FEAT_FP16: half-precision arithmetic.
    Fp16,
    /// FEAT_BF16: BFloat16 arithmetic.
    Bf16,
    /// FEAT_DotProd: int8 dot products.
    Dotprod,
    /// FEAT_I8MM: int8 matrix multiply.
    I8mm,
    /// FEAT_SVE: the Scalable Vector Extension.
    Sve,
    /// FEAT_SVE2.
    Sve2,
    /// FEAT_SVE2p1.
    Sve2p1,
    /// FEAT_SME: the Scalable Matrix Extension.
    Sme,
    /// FEAT_SME2.
    Sme2,
    /// FEAT_SME2p1.
    Sme2p1,
}

impl CpuFeature {
    /// Every feature, in the order of the enum.
    pub const ALL: [CpuFeature; 11] = [
        CpuFeature::Neon,
        CpuFeature::Fp16,
        CpuFeature::Bf16,
        CpuFeature::Dotprod,
        CpuFeature::I8mm,
        CpuFeature::Sve,
        CpuFeature::Sve2,
        CpuFeature::Sve2p1,
        CpuFeature::Sme,
        CpuFeature::Sme2,
        CpuFeature::Sme2p1,
    ];

    /// Lower-case name, as used in Cargo features and reports (`"sme2"`).
    pub const fn name(self) -> &'static str {
        match self {
            CpuFeature::Neon => "neon",
            CpuFeature::Fp16 => "fp16",
            CpuFeature::Bf16 => "bf16",
            CpuFeature::Dotprod => "dotprod",
            CpuFeature::I8mm => "i8mm",
            CpuFeature::Sve => "sve",
            CpuFeature::Sve2 => "sve2",
            CpuFeature::Sve2p1 => "sve2p1",
            CpuFeature::Sme => "sme",
            CpuFeature::Sme2 => "sme2",
            CpuFeature::Sme2p1 => "sme2p1",
        }
    }
}

/// What a micro-kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Matrix multiplication (`matmul_*` families).
    Matmul,
    /// Indirect matrix multiplication (`imatmul_*` families).
    Imatmul,
    /// Depthwise convolution (`dwconv_*` families).
    Dwconv,
    /// A packing routine (`pack/` directories).
    Pack,
}

/// How a micro-kernel is called.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// Named functions (`kai_get_*_<name>`, `kai_run_<name>`) matching the
    /// family's `*_interface.h` struct.
    Interface,
    /// A function `<name>()` returning `kai_matmul_uker_api` (`kai_matmul.h`).
    UkerApi,
    /// A packing routine with its own named functions.
    PackFunctions,
    /// A packing routine reached through `kai_matmul_pack_lhs.h` /
    /// `kai_matmul_pack_rhs.h` style tables.
    PackApi,
}

/// One compiled micro-kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ukernel {
    /// Upstream name: the source file's stem, e.g.
    /// `kai_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod`.
    pub name: &'static str,
    /// Upstream directory, e.g. `matmul_clamp_f32_qai8dxp_qsi4cxp` or `pack`.
    pub family: &'static str,
    /// What it computes.
    pub op: Op,
    /// How it is called.
    pub api: Api,
    /// Upstream source group (`KLEIDIAI_FILES_<group>` in `CMakeLists.txt`).
    pub group: &'static str,
    /// CPU features it needs at run time (besides any vector-length condition
    /// the kernel's name encodes).
    pub features: &'static [CpuFeature],
}

include!(concat!(env!("OUT_DIR"), "/manifest.rs"));

mod families;
pub use families::FAMILIES;

/// Looks a compiled micro-kernel up by its upstream name.
pub fn ukernel(name: &str) -> Option<&'static Ukernel> {
    UKERNELS.binary_search_by(|k| k.name.cmp(name)).ok().map(|i| &UKERNELS[i])
}

// The committed bindings (`cargo run -p xtask -- bindings` writes them), or,
// with the `bindgen` feature, the ones the build script just generated.
// bindgen's generated code (`Default` impls zeroing a struct) has no
// `// SAFETY:` comments, so the workspace's `undocumented_unsafe_blocks`
// (a restriction lint, outside `clippy::all`) is allowed here only.
#[cfg(all(kai_bindings, not(kai_generated_bindings)))]
#[allow(missing_docs, clippy::all, clippy::undocumented_unsafe_blocks, rustdoc::all, unsafe_op_in_unsafe_fn)]
mod bindings;
#[cfg(all(kai_bindings, kai_generated_bindings))]
mod bindings {
    #![allow(missing_docs, clippy::all, clippy::undocumented_unsafe_blocks, rustdoc::all, unsafe_op_in_unsafe_fn)]
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}
#[cfg(kai_bindings)]
pub use bindings::*;

/// Per compute family, every compiled kernel with its upstream interface
/// struct filled in. Only on aarch64 targets.
#[cfg(kai_bindings)]
pub mod interfaces {
    #![allow(missing_docs)]
    use crate::bindings::*;
    include!(concat!(env!("OUT_DIR"), "/interfaces.rs"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_is_sorted_and_unique() {
        for w in UKERNELS.windows(2) {
            assert!(w[0].name < w[1].name, "{} / {}", w[0].name, w[1].name);
        }
    }

    #[test]
    fn manifest_matches_upstream_counts() {
        let compute = UKERNELS.iter().filter(|k| k.op != Op::Pack).count();
        let packing = UKERNELS.iter().filter(|k| k.op == Op::Pack).count();
        if cfg!(kai_bindings) && BUILT_GROUPS.len() == 17 {
            // Every group built (default features): all of v1.30.0.
            assert_eq!((compute, packing), (121, 76));
        } else if !cfg!(kai_bindings) {
            assert_eq!((compute, packing), (0, 0));
        }
    }

    #[test]
    fn built_tiers_follow_cargo_features() {
        let on = |f: CpuFeature| match f {
            CpuFeature::Neon => true,
            CpuFeature::Fp16 => cfg!(feature = "fp16"),
            CpuFeature::Bf16 => cfg!(feature = "bf16"),
            CpuFeature::Dotprod => cfg!(feature = "dotprod"),
            CpuFeature::I8mm => cfg!(feature = "i8mm"),
            CpuFeature::Sve | CpuFeature::Sve2 => cfg!(feature = "sve"),
            CpuFeature::Sve2p1 => cfg!(feature = "sve2p1"),
            CpuFeature::Sme => cfg!(feature = "sme"),
            CpuFeature::Sme2 | CpuFeature::Sme2p1 => cfg!(feature = "sme2"),
        };
        for k in UKERNELS {
            for f in k.features {
                assert!(on(*f), "{} needs {} whose Cargo feature is off", k.name, f.name());
            }
        }
        if cfg!(kai_bindings) {
            for f in [CpuFeature::Dotprod, CpuFeature::I8mm, CpuFeature::Sme2] {
                let built = UKERNELS.iter().any(|k| k.features.contains(&f));
                assert_eq!(built, on(f), "{} kernels built: {built}", f.name());
            }
        }
    }

    #[test]
    fn lookup_by_name() {
        if cfg!(all(kai_bindings, feature = "dotprod")) {
            let k = ukernel("kai_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod").unwrap();
            assert_eq!(k.family, "matmul_clamp_f32_qai8dxp_qsi4cxp");
            assert_eq!(k.features, &[CpuFeature::Neon, CpuFeature::Dotprod]);
            assert_eq!(k.api, Api::Interface);
        }
        assert!(ukernel("kai_no_such_kernel").is_none());
    }
}
