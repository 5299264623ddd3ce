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
mod uker;

mod bf16p_bf16p;
mod depthwise;
mod float_common;
mod indirect;
mod qai8;
mod qai8dxp_qsi4c32p;
mod qsi8d32p_qai4c32p;
mod qsi8d32p_qsi4c32p;
mod u8p_u8p;

/// The families, named once: their modules, [`FAMILIES`] and
/// `all_kernel_infos` come from this list (a test checks it against the
/// `kleidiai-sys` manifest: every compiled compute kernel's family is here).
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

families! {
    dwconv_f16_f16_f16p,
    dwconv_f32_f32_f32p,
    imatmul_clamp_f16_f16p_f16p,
    imatmul_clamp_f32_f32_f32p,
    imatmul_clamp_f32_f32p_f32p,
    imatmul_clamp_qai8_qai8p_qsi8cxp,
    matmul_clamp_bf16_qai8dxp_qsi4c32p,
    matmul_clamp_bf16_qai8dxp_qsi4cxp,
    matmul_clamp_f16_bf16p_bf16p,
    matmul_clamp_f16_f16_f16p,
    matmul_clamp_f16_f16p_f16p,
    matmul_clamp_f16_qai8dxp_qsi4cxp,
    matmul_clamp_f16_qai8dxp_qsi8cxp,
    matmul_clamp_f16_qsi8d32p_qai4c32p,
    matmul_clamp_f32_bf16p_bf16p,
    matmul_clamp_f32_f16p_qsi4c32p,
    matmul_clamp_f32_f32_f32p,
    matmul_clamp_f32_f32p_f32p,
    matmul_clamp_f32_qai8dxp_qsi4c32p,
    matmul_clamp_f32_qai8dxp_qsi4cxp,
    matmul_clamp_f32_qai8dxp_qsi8cxp,
    matmul_clamp_f32_qai8dxp_qsu2cxp,
    matmul_clamp_f32_qsi8d32p_qai4c32p,
    matmul_clamp_f32_qsi8d32p_qsi4c32p,
    matmul_clamp_f32_u8p_u8p,
    matmul_clamp_fp32_bf16p_bf16p,
    matmul_clamp_qai8_qai8_qsi4cxp,
    matmul_clamp_qai8_qai8_qsi8cxp,
    matmul_clamp_qai8_qai8p_qsi4cxp,
    matmul_clamp_qai8_qai8p_qsi8cxp,
    matmul_i32_u8p_u8p,
}

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
        for k in kleidiai_sys::UKERNELS.iter().filter(|k| k.op != kleidiai_sys::Op::Pack) {
            assert!(super::FAMILIES.contains(&k.family), "{} is not a known family", k.family);
        }
    }
}
