//! The selection report on this CPU: what is built, what can run, what is
//! selected per family; recorded for `xtask test`, which checks it names
//! the highest tier the CPU model offers.

mod common;

use kleidiai::cpu::Features;
use kleidiai::registry;

#[test]
fn selection_report() {
    let f = Features::current();
    let report = registry::report(&f);
    println!("{report}");
    let highest = report.highest_tier().map_or("reference", |t| t.name());
    common::selection(highest, &report.to_string());
    // Every selection can run here, and nothing is selected that cannot.
    for fam in &report.families {
        for name in [fam.gemm, fam.gemv].into_iter().flatten() {
            let k = registry::by_name(name).expect("selected kernels are registered");
            assert!(k.supported(&f).is_ok(), "{name} selected but not runnable");
        }
        if fam.supported == 0 {
            assert!(fam.gemm.is_none() && fam.gemv.is_none(), "{} selects without runnable kernels", fam.family);
        }
    }
}

#[test]
fn kill_switch_falls_back_to_reference() {
    let none = Features::current().without(&[kleidiai::cpu::CpuFeature::Neon]);
    let report = registry::report(&none);
    assert!(report.families.iter().all(|f| f.gemm.is_none() && f.gemv.is_none()));
    assert_eq!(report.highest_tier(), None);
}
