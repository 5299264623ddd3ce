//! One module per upstream compute family: its kernels (generated from the
//! `kleidiai-sys` manifest), their packing, the portable reference
//! implementation, and the conformance tests, together.
//!
//! Non-finite inputs: a family's kernels and its reference give what that
//! computation gives (kernels differ: a NaN may come out finite, as
//! ±3.4e38 or as NaN; the asymmetric int4 families refuse non-finite
//! activations with an error). [`crate::weights::PackedWeights::matmul`]
//! has one policy for every kernel (NaN in the rows and output channels a
//! NaN or an infinity touches); use it where that matters.

pub(crate) mod engine;
pub(crate) mod qai8dxp_common;
#[cfg(target_arch = "aarch64")]
use engine::uker;

mod bf16p_bf16p;
mod depthwise;
mod float_common;
mod indirect;
mod qai8;
mod qai8dxp_qsi4c32p;
mod qsi8d32p_qai4c32p;
mod qsi8d32p_qsi4c32p;
mod u8p_u8p;

/// The families come from `kleidiai-sys`'s list of the pinned tree's
/// compute families (generated from the sources, checked by its build
/// script): their modules, [`FAMILIES`] and `all_kernel_infos`. A family
/// upstream adds is a missing module here, a compile error, not a kernel
/// silently left out.
macro_rules! families {
    ($($name:ident),* $(,)?) => {
        $(pub mod $name;)*

        /// Every upstream compute family of KleidiAI v1.30.0 (directory names).
        pub const FAMILIES: &[&str] = &[$(stringify!($name)),*];

        /// Registry entries of every implemented family (empty off aarch64).
        pub(crate) fn all_kernel_infos() -> Vec<&'static crate::registry::info::KernelInfo> {
            #[allow(unused_mut)]
            let mut v = Vec::new();
            #[cfg(target_arch = "aarch64")]
            {
                $(v.extend($name::infos());)*
            }
            v
        }
    };
}

kleidiai_sys::for_each_family!(families);

#[cfg(test)]
mod tests {
    /// Tells `xtask test` which compute kernels the build has, so it can
    /// check each one passed its conformance test on some CPU model.
    #[test]
    fn record_manifest() {
        let names: Vec<&str> =
            kleidiai_sys::UKERNELS.iter().filter(|k| k.op != kleidiai_sys::Op::Pack).map(|k| k.name).collect();
        crate::testing::record(serde_json::json!({"kind": "manifest", "kernels": names}));
    }

    #[test]
    fn families_match_the_manifest() {
        assert_eq!(super::FAMILIES, kleidiai_sys::FAMILIES);
        for k in kleidiai_sys::UKERNELS.iter().filter(|k| k.op != kleidiai_sys::Op::Pack) {
            assert!(super::FAMILIES.contains(&k.family), "{} is not a known family", k.family);
        }
    }
}
