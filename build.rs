//! Build script of the test suite package (not published): on aarch64 it
//! compiles a second, unprefixed copy of a few KleidiAI files plus
//! `tests/coexist/second_copy.c`, which `tests/coexistence.rs` links next to
//! kleidiai-sys to prove the two copies do not clash.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=tests/coexist/second_copy.c");
    println!("cargo:rustc-check-cfg=cfg(second_kleidiai)");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("aarch64") {
        return;
    }
    // kleidiai-sys (links = "kleidiai") tells where its sources are.
    let root = PathBuf::from(std::env::var("DEP_KLEIDIAI_ROOT").expect("kleidiai-sys exports its source root"));
    let ukernels = root.join("kai/ukernels/matmul");
    let kernel =
        ukernels.join("matmul_clamp_f32_qai8dxp_qsi4cxp/kai_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod");
    let mut b = cc::Build::new();
    b.include(&root)
        .warnings(false)
        .opt_level(2)
        .flag("-march=armv8.2-a+dotprod")
        .define("KLEIDIAI_HAS_BUILTIN_UNREACHABLE", "1")
        .file(kernel.with_extension("c"))
        .file(ukernels.join("pack/kai_lhs_quant_pack_qai8dxp_f32.c"))
        .file(ukernels.join("pack/kai_rhs_pack_nxk_qsi4cxp_qs4cxs1s0.c"))
        .file("tests/coexist/second_copy.c");
    b.compile("second_kleidiai");
    println!("cargo:rustc-cfg=second_kleidiai");
}
