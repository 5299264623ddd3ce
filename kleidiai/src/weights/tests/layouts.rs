//! Tests of the pairing policy: a pairing's GEMM and GEMV share one
//! packed layout, and default packing keeps just that one.

use super::*;

/// Every pairing of the policy names kernels of its weight kind and
/// activation type, and where this CPU runs both, the GEMV reads the GEMM's
/// layout (at several shapes, tails included); the kernels no pairing names
/// are counted (reachable through `families`).
#[test]
fn policy_pairings_share_one_layout() {
    let f = Features::current();
    let mut checked = 0;
    for kind in WeightKind::ALL {
        for act in [DType::F32, DType::F16, DType::Bf16] {
            let pairs = policy::pairings(kind, act);
            assert_eq!(pairs.is_empty(), !operation_exists(kind, act), "{kind:?} {act:?}");
            if registry::kernels().is_empty() {
                continue;
            }
            for p in pairs {
                let g = backend_for(kind, act, p.gemm).unwrap_or_else(|| panic!("{} for {kind:?} {act:?}", p.gemm));
                assert!(!p.why.is_empty());
                if let Some(fast) = p.faster_gemv {
                    let v = backend_for(kind, act, fast).unwrap_or_else(|| panic!("{fast} for {kind:?} {act:?}"));
                    assert_eq!(v.info().tile, TileKind::Gemv, "{fast}");
                    if v.info().supported(&f).is_ok() && g.info().supported(&f).is_ok() {
                        let bl = if matches!(kind, WeightKind::Int4Block) { 32 } else { 0 };
                        assert_ne!(g.rhs_layout(64, 256, bl).unwrap(), v.rhs_layout(64, 256, bl).unwrap(), "{fast}");
                    }
                }
                let Some(v) = p.gemv else { continue };
                let v = backend_for(kind, act, v).unwrap_or_else(|| panic!("{v} for {kind:?} {act:?}"));
                assert_eq!(g.info().tile, TileKind::Gemm, "{}", p.gemm);
                assert_eq!(v.info().tile, TileKind::Gemv, "{v:?}");
                if g.info().supported(&f).is_err() || v.info().supported(&f).is_err() {
                    continue;
                }
                let bl = if matches!(kind, WeightKind::Int4Block | WeightKind::Int4AsymBlock) { 32 } else { 0 };
                for (n, k) in [(64, 256), (100, 96), (1, 32), (257, 4160)] {
                    assert_eq!(g.rhs_layout(n, k, bl).unwrap(), v.rhs_layout(n, k, bl).unwrap(), "{p:?} {n}x{k}");
                }
                checked += 1;
            }
        }
    }
    println!("{checked} pairings run here and share their layout");
}

/// Default packing keeps one layout, and with it the policy's GEMV serves
/// one row wherever it runs.
#[test]
fn default_packing_keeps_one_layout_for_gemm_and_gemv() {
    let mut rng = Rng::new(5);
    for c in cases(&mut rng, 40, 128) {
        let packed = c.pack(PackOptions::default());
        assert!(packed.layouts().len() <= 1, "{:?}: {:?}", c.kind(), packed.layouts());
        let Some((gemm, gemv)) = packed.layouts().first().copied() else { continue };
        let pairing = policy::pairings(c.kind(), c.act).iter().find(|p| p.gemm == gemm).expect("a policy pairing");
        assert_eq!(
            gemv,
            pairing.gemv.filter(|v| registry::by_name(v).is_some_and(|i| i.supported(&Features::current()).is_ok()))
        );
        if let Some(v) = gemv {
            assert_eq!(packed.kernel_for(1), Some(v));
        }
        assert_eq!(packed.kernel_for(7), Some(gemm));
    }
}
