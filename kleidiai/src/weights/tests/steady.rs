//! The steady state of `PackedWeights::matmul` (`weights/steady.rs`): a
//! scratch's plan follows every change of weights and rows, refuses what
//! the checked path refuses, and never hands unscanned non-finite rows to
//! a packer that needs finite values.

use super::*;

/// One scratch shared by calls that change weights, kinds and `m`, and
/// outlives weights (whose successors may reuse their address): the
/// steady-state plan it keeps follows every change. Each output equals the
/// checked path's (several workers) bit for bit; on Arm, the families with
/// a steady-state path take it.
#[test]
fn a_shared_scratch_follows_weights_and_rows() {
    crate::testing::enable_threading_for_tests();
    let mut rng = Rng::new(23);
    let (n, k) = (37, 128);
    let mut scratch = Scratch::default();
    let mut planned = Vec::new();
    for round in 0..3 {
        // Packed anew each round: the previous round's weights are gone.
        let all: Vec<(PackedWeights, DType)> =
            cases(&mut rng, n, k).into_iter().map(|c| (c.pack(PackOptions::default()), c.act)).collect();
        for (w, act) in &all {
            for m in [1, 4, 4, 1, 2] {
                let x = rng.vec_f32(m * k);
                let got = run_in(w, *act, m, &x, Parallelism::Sequential, &mut scratch).unwrap();
                let checked = run(w, *act, m, &x, Parallelism::Rayon(3)).unwrap();
                let kernel = w.kernel_for(m);
                assert!(bit_identical(&got, &checked), "round {round} {:?}/{act:?} m={m} via {kernel:?}", w.kind);
                if scratch.plan.as_ref().is_some_and(|p| p.ready.is_some()) {
                    planned.extend(kernel);
                }
            }
        }
    }
    planned.sort_unstable();
    planned.dedup();
    println!("steady-state path taken by {} kernels: {planned:?}", planned.len());
    #[cfg(target_arch = "aarch64")]
    assert!(!planned.is_empty(), "no call took the steady-state path");
}

/// With a steady-state plan ready in the scratch, every input the checked
/// path refuses is still refused (the steady state hands it over rather
/// than run it), nothing is written, and a good call afterwards still gives
/// the checked path's bits; a non-finite row is still found by the scan.
#[test]
fn a_ready_plan_refuses_what_the_checked_path_refuses() {
    let (n, k, m) = (8, 64, 2);
    let mut rng = Rng::new(31);
    let (_, mut p) = random_f32(&mut rng, n, k, &PackOptions::default());
    let (seq, none) = (Parallelism::Sequential, Clamp::NONE);
    let mut s = Scratch::default();
    let x = rng.vec_f32(m * k);
    let mut want = vec![0f32; m * n];
    for _ in 0..2 {
        p.matmul(m, Activation::F32(&x), ActivationMut::F32(&mut want), none, seq, &mut s).unwrap();
    }
    #[cfg(target_arch = "aarch64")]
    assert!(s.plan.as_ref().is_some_and(|p| p.ready.is_some()), "no steady-state plan for {:?}", p.kernel_for(m));
    let x16 = vec![f16::ZERO; m * k];
    let mut y16 = vec![f16::ZERO; m * n];
    let mut y = vec![7f32; m * n];
    let bad: [(&str, Result<()>); 6] = [
        ("short x", p.matmul(m, Activation::F32(&x[..m * k - 1]), ActivationMut::F32(&mut y), none, seq, &mut s)),
        ("short y", p.matmul(m, Activation::F32(&x), ActivationMut::F32(&mut y[..m * n - 1]), none, seq, &mut s)),
        ("f16 x", p.matmul(m, Activation::F16(&x16), ActivationMut::F32(&mut y), none, seq, &mut s)),
        ("f16 y", p.matmul(m, Activation::F32(&x), ActivationMut::F16(&mut y16), none, seq, &mut s)),
        (
            "empty clamp",
            p.matmul(m, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp { min: 1.0, max: 0.0 }, seq, &mut s),
        ),
        (
            "NaN clamp",
            p.matmul(
                m,
                Activation::F32(&x),
                ActivationMut::F32(&mut y),
                Clamp { min: f32::NAN, max: 0.0 },
                seq,
                &mut s,
            ),
        ),
    ];
    for (what, r) in bad {
        assert!(r.is_err(), "{what}: accepted");
    }
    assert!(y.iter().all(|v| *v == 7.0), "a refused call wrote y");
    let mut nan = x.clone();
    nan[k + 5] = f32::NAN;
    p.set_non_finite(NonFinite::Error);
    let r = p.matmul(m, Activation::F32(&nan), ActivationMut::F32(&mut y), none, seq, &mut s);
    assert!(matches!(r, Err(Error::NonFinite { index: 1, .. })), "{r:?}");
    p.set_non_finite(NonFinite::Propagate);
    p.matmul(m, Activation::F32(&nan), ActivationMut::F32(&mut y), none, seq, &mut s).unwrap();
    assert!(bit_identical(&y[..n], &want[..n]) && y[n..].iter().all(|v| v.is_nan()), "{y:?}");
    p.matmul(m, Activation::F32(&x), ActivationMut::F32(&mut y), none, seq, &mut s).unwrap();
    assert!(bit_identical(&y, &want));
}

/// The asymmetric int4 packers need finite activations. Under
/// `NonFinite::Kernel` nothing scans them, so a call with a NaN row must
/// not take the steady-state path (which skips the packer's finite check)
/// even when a plan for these weights and `m` is ready: it takes the
/// checked path, which refuses the row. Under the default policy the same
/// call succeeds with that row NaN.
#[test]
fn unscanned_non_finite_rows_never_reach_a_packer_that_needs_finite_values() {
    let (n, k, bl) = (8, 64, 32);
    let nib: Vec<u8> = (0..n * k / 2).map(|i| (i * 37 % 251) as u8).collect();
    let s: Vec<f32> = (0..n * k / bl).map(|i| 0.01 + 0.001 * i as f32).collect();
    let w = Weights::int4_asym_blocks(n, k, bl, &nib, &s, &s).unwrap();
    let mut packed = PackedWeights::pack(&w, &PackOptions::default()).unwrap();
    packed.set_non_finite(NonFinite::Kernel);
    let mut scratch = Scratch::default();
    let seq = Parallelism::Sequential;
    let mut x = vec![0.5f32; k];
    let mut y = vec![0f32; n];
    for _ in 0..2 {
        packed.matmul(1, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE, seq, &mut scratch).unwrap();
    }
    x[3] = f32::NAN;
    let r = packed.matmul(1, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE, seq, &mut scratch);
    assert!(r.is_err(), "a NaN row reached {:?} unchecked: {y:?}", packed.kernel_for(1));
    packed.set_non_finite(NonFinite::Propagate);
    packed.matmul(1, Activation::F32(&x), ActivationMut::F32(&mut y), Clamp::NONE, seq, &mut scratch).unwrap();
    assert!(y.iter().all(|v| v.is_nan()), "{y:?}");
}
