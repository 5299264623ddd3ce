//! The kill switch, through the environment and through the API.
//!
//! `KLEIDIAI_DISABLE` is read once per process (detection is cached), so
//! the environment is tested in a child process: this test binary run again
//! with the variable set and a filter selecting [`env_child`]. Natively (or
//! with binfmt) the child is the binary itself; under qemu-user, which does
//! not follow a guest's `execve` of a guest binary, the child is started
//! through the emulator named by `KLEIDIAI_QEMU` (the host binary runs
//! natively from inside the guest) with the same CPU model.
//!
//! `cpu::disable` only ever removes tiers (one atomic `fetch_or`); a matmul
//! running while tiers are switched off computes with the kernel it picked
//! (the old one) or the one picked after (the new one), never anything
//! else. That test switches tiers off for the rest of the process, so it
//! lives in this binary with the child-process test only.

mod common;

use kleidiai::cpu::{self, CpuFeature, Features};
use kleidiai::formats::{BlockInt4, FloatWeights, Int4Encoding, Int4PerChannel, Order, Q4_0};
use kleidiai::ggml::{self, GgmlType, GgmlWeights, Tensor};
use kleidiai::registry;
use kleidiai::weights::{Activation, ActivationMut, DType, PackOptions, PackedWeights, Scratch, WeightsRef};
use kleidiai::{Clamp, Parallelism};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What the child disables.
const CHILD_DISABLE: &str = "sme2,sme,sve";

fn is_sme_or_sve(name: &str) -> bool {
    name.contains("_sme") || name.contains("_sve")
}

/// Weights of every kind the weights API takes (the same values for the
/// same `seed`), packed for `features` (None: the current ones); the
/// unpacked copy is kept so the reference serves where no layout runs.
fn packed_all(seed: u64, n: usize, k: usize, features: Option<Features>) -> Vec<(&'static str, PackedWeights, DType)> {
    let mut rng = common::Rng::new(seed);
    let wf = rng.vec_f32(n * k);
    let nibbles: Vec<u8> = (0..n * k / 2).map(|_| rng.next_u64() as u8).collect();
    let scales: Vec<f32> = (0..n).map(|_| 0.02).collect();
    let q4 = ggml::q4_0_as_bytes(&ggml::quantize_q4_0(&wf, k).unwrap()).to_vec();
    let wh: Vec<half::f16> = wf.iter().map(|v| half::f16::from_f32(*v)).collect();
    let opts = |act| PackOptions { activation: act, keep_reference: true, features, ..PackOptions::default() };
    let int4 = Int4PerChannel {
        n,
        k,
        order: Order::NxK,
        encoding: Int4Encoding::Signed,
        data: &nibbles,
        scales: &scales,
        bias: None,
    };
    let all: Vec<(&'static str, WeightsRef<'_>, DType)> = vec![
        ("f32", WeightsRef::F32(FloatWeights { n, k, order: Order::NxK, data: &wf, bias: None }), DType::F32),
        ("f16", WeightsRef::F16(FloatWeights { n, k, order: Order::NxK, data: &wh, bias: None }), DType::F16),
        ("int4", WeightsRef::Int4PerChannel(int4), DType::F32),
        ("q4_0", WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: &q4, bias: None })), DType::F32),
    ];
    all.into_iter().map(|(name, w, act)| (name, PackedWeights::pack(&w, &opts(act)).unwrap(), act)).collect()
}

/// Per output, `tol · Σ_k |x·w| + 1e-3` with the weights' rows as packed.
fn tolerance(p: &PackedWeights, m: usize, x: &[f32], tol: f32) -> Vec<f32> {
    let (n, k) = (p.n(), p.k());
    let mut row = vec![0f32; k];
    let mut out = vec![0f32; m * n];
    for j in 0..n {
        p.row(j, &mut row).unwrap();
        for i in 0..m {
            out[i * n + j] = tol * (0..k).map(|c| (x[i * k + c] * row[c]).abs()).sum::<f32>() + 1e-3;
        }
    }
    out
}

/// Relative tolerance of the kernels against the reference: quantised
/// paths may quantise activations per block where the reference does per
/// row; f16 outputs round once more.
const TOL: f32 = 2e-2;

/// `m` rows through `p` as f32 (half outputs widened).
fn try_run(p: &PackedWeights, act: DType, m: usize, x: &[f32]) -> kleidiai::Result<Vec<f32>> {
    try_run_in(p, act, m, x, &mut Scratch::default())
}

/// [`try_run`] with the caller's scratch (whose steady-state plan must
/// follow the features in force).
fn try_run_in(p: &PackedWeights, act: DType, m: usize, x: &[f32], s: &mut Scratch) -> kleidiai::Result<Vec<f32>> {
    let n = p.n();
    let seq = Parallelism::Sequential;
    match act {
        DType::F32 => {
            let mut y = vec![0f32; m * n];
            p.matmul(m, Activation::F32(x), ActivationMut::F32(&mut y), Clamp::NONE, seq, s)?;
            Ok(y)
        }
        _ => {
            let xh: Vec<half::f16> = x.iter().map(|v| half::f16::from_f32(*v)).collect();
            let mut y = vec![half::f16::ZERO; m * n];
            p.matmul(m, Activation::F16(&xh), ActivationMut::F16(&mut y), Clamp::NONE, seq, s)?;
            Ok(y.iter().map(|v| v.to_f32()).collect())
        }
    }
}

fn run(p: &PackedWeights, act: DType, m: usize, x: &[f32]) -> Vec<f32> {
    try_run(p, act, m, x).unwrap()
}

/// The child's checks, run with `KLEIDIAI_DISABLE` set: no SME or SVE
/// feature, selection, packed layout or ggml kernel; results still match
/// the portable reference.
fn child_checks() {
    let f = Features::current();
    assert!(
        !f.has(CpuFeature::Sme) && !f.has(CpuFeature::Sme2) && !f.has(CpuFeature::Sve),
        "KLEIDIAI_DISABLE={CHILD_DISABLE} left {f}"
    );
    let report = registry::report(&f);
    for fam in &report.families {
        for name in [fam.gemm, fam.gemv].into_iter().flatten() {
            assert!(!is_sme_or_sve(name), "{}: selects {name} with SME/SVE disabled", fam.family);
        }
    }
    let mut rng = common::Rng::new(71);
    let (n, k, m) = (24, 64, 5);
    let x = rng.vec_f32(m * k);
    let mut kernels = 0;
    let references = packed_all(70, n, k, Some(Features::none()));
    for ((name, p, act), (_, r, _)) in packed_all(70, n, k, None).into_iter().zip(&references) {
        for (gemm, gemv) in p.layouts() {
            assert!(!is_sme_or_sve(gemm) && !gemv.is_some_and(is_sme_or_sve), "{name}: packed {gemm} / {gemv:?}");
        }
        for mm in [1, m] {
            if let Some(kname) = p.kernel_for(mm) {
                assert!(!is_sme_or_sve(kname), "{name}: m={mm} served by {kname}");
                kernels += 1;
            }
            let (got, want) = (run(&p, act, mm, &x), run(r, act, mm, &x));
            common::assert_close(&format!("{name} m={mm}"), &got, &want, &tolerance(r, mm, &x, TOL));
        }
        println!("KILL-SWITCH-CHILD {name}: m=1 {:?}, m={m} {:?}", p.kernel_for(1), p.kernel_for(m));
    }
    for typ in [GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::F32, GgmlType::F16] {
        let wf = rng.vec_f32(n * k);
        let bytes: Vec<u8> = match typ {
            GgmlType::Q4_0 => ggml::q4_0_as_bytes(&ggml::quantize_q4_0(&wf, k).unwrap()).to_vec(),
            GgmlType::Q8_0 => ggml::q8_0_as_bytes(&ggml::quantize_q8_0(&wf, k).unwrap()).to_vec(),
            GgmlType::F32 => wf.iter().flat_map(|v| v.to_le_bytes()).collect(),
            GgmlType::F16 => wf.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect(),
        };
        let ne = [k as i64, n as i64, 1, 1];
        let w =
            GgmlWeights::repack(&Tensor { typ, ne, nb: Tensor::contiguous_strides(typ, ne).unwrap(), data: &bytes })
                .unwrap();
        for (gemm, gemv) in w.layouts() {
            assert!(!is_sme_or_sve(gemm) && !gemv.is_some_and(is_sme_or_sve), "ggml {typ:?}: packed {gemm}");
        }
        if let Some(kname) = w.kernel_for(m) {
            assert!(!is_sme_or_sve(kname), "ggml {typ:?}: served by {kname}");
        }
        println!("KILL-SWITCH-CHILD ggml {typ:?}: m={m} {:?}", w.kernel_for(m));
    }
    println!("KILL-SWITCH-CHILD ok: {kernels} kernel choices checked with {f}");
}

/// The child half: does its checks when started by [`env_kill_switch`]
/// (it is a no-op in a normal run, where the variable is not set).
#[test]
fn env_child() {
    if std::env::var("KLEIDIAI_KILL_SWITCH_CHILD").is_ok() {
        child_checks();
    }
}

/// The command that runs this test binary again, and how (None: no way to
/// start an aarch64 child here; the reason).
fn child_command() -> Result<(Command, String), String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    // Natively (or where binfmt runs aarch64 binaries) the binary runs itself.
    let direct = Command::new(&exe).arg("--list").output();
    if direct.as_ref().is_ok_and(|o| o.status.success()) {
        return Ok((Command::new(&exe), "direct".into()));
    }
    // qemu-user: start the emulator (a host binary) with the same model.
    let Some(qemu) = std::env::var_os("KLEIDIAI_QEMU") else {
        return Err(format!("cannot start {} ({:?}) and KLEIDIAI_QEMU is not set", exe.display(), direct.err()));
    };
    let cpu = std::env::var("KLEIDIAI_TEST_CPU").or_else(|_| std::env::var("QEMU_CPU")).unwrap_or("max".into());
    let sysroot = std::env::var_os("KLEIDIAI_SYSROOT").unwrap_or("/usr/aarch64-linux-gnu".into());
    let mut c = Command::new(&qemu);
    c.arg("-L").arg(sysroot).arg("-cpu").arg(&cpu).arg(&exe);
    Ok((c, format!("through {} -cpu {cpu}", std::path::Path::new(&qemu).display())))
}

#[test]
fn env_kill_switch() {
    common::features_seen();
    let (mut cmd, how) = match child_command() {
        Ok(c) => c,
        Err(why) => {
            // Never silently: named, and counted as a skip by xtask.
            println!("SKIP env_kill_switch: {why}");
            common::skipped("kill_switch::env_kill_switch", &why);
            return;
        }
    };
    let out = cmd
        .args(["--exact", "env_child", "--nocapture", "--test-threads", "1"])
        .env(cpu::DISABLE_ENV, CHILD_DISABLE)
        .env("KLEIDIAI_KILL_SWITCH_CHILD", "1")
        .env_remove("KLEIDIAI_TEST_REPORT")
        .output()
        .expect("start the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("child ({how}) with {}={CHILD_DISABLE}:\n{stdout}", cpu::DISABLE_ENV);
    assert!(out.status.success(), "child failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("KILL-SWITCH-CHILD ok"), "the child did not run its checks");
    assert!(stdout.contains("1 passed"), "the child ran no test");
    // An unknown word beside known ones: the known ones still apply (the
    // child's checks pass), the unknown one is warned about (env_warnings).
    let (mut bad, _) = child_command().unwrap();
    let out = bad
        .args(["--exact", "env_child", "--nocapture"])
        .env(cpu::DISABLE_ENV, format!("{CHILD_DISABLE},warp-drive"))
        .env("KLEIDIAI_KILL_SWITCH_CHILD", "1")
        .env_remove("KLEIDIAI_TEST_REPORT")
        .output()
        .expect("start the child");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child with an unknown word failed: {stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("KILL-SWITCH-CHILD ok"), "the child did not run its checks");
    assert_eq!(stderr.matches("`warp-drive`").count(), 1, "one warning naming the word: {stderr}");
}

/// The environment variables' readings in a child (each is read once per
/// process): printed for [`env_warnings`], each read several times.
#[test]
fn env_warning_child() {
    if std::env::var("KLEIDIAI_ENV_WARNING_CHILD").is_err() {
        return;
    }
    let f = Features::current();
    assert_eq!(Features::current(), f);
    let cap = kleidiai::par::sme_thread_cap();
    assert_eq!(kleidiai::par::sme_thread_cap(), cap);
    let (n, k) = (16usize, 64usize);
    let wf = common::Rng::new(74).vec_f32(n * k);
    let bytes = ggml::q4_0_as_bytes(&ggml::quantize_q4_0(&wf, k).unwrap()).to_vec();
    let ne = [k as i64, n as i64, 1, 1];
    let typ = GgmlType::Q4_0;
    let src0 = Tensor { typ, ne, nb: Tensor::contiguous_strides(typ, ne).unwrap(), data: &bytes };
    let with_env: Vec<_> = (0..2).map(|_| GgmlWeights::repack(&src0).map(|w| w.layouts())).collect();
    println!("ENV-CHILD features: {f}");
    println!("ENV-CHILD sme cap: {cap}");
    println!("ENV-CHILD ggml: {:?}", with_env[0]);
    if std::env::var_os(ggml::SME_ENV).is_some() && ggml::sme_setting().is_err() {
        // The fallback of an unreadable value is "unset": the same layouts.
        // SAFETY: this child runs this one test on one thread (--exact,
        // --test-threads 1); nothing else reads the environment meanwhile.
        unsafe { std::env::remove_var(ggml::SME_ENV) };
        let unset = GgmlWeights::repack(&src0).map(|w| w.layouts());
        assert_eq!(with_env[0], unset, "an unreadable {} is not the automatic setting", ggml::SME_ENV);
        println!("ENV-CHILD ggml as unset: {:?}", unset);
    }
}

/// Issue 15: an unreadable `KLEIDIAI_DISABLE`, `KLEIDIAI_SME_THREADS` or
/// `GGML_KLEIDIAI_SME` prints one warning on stderr naming the value and
/// what was done; good values print nothing.
#[test]
fn env_warnings() {
    let (_, how) = match child_command() {
        Ok(c) => c,
        Err(why) => {
            println!("SKIP env_warnings: {why}");
            common::skipped("kill_switch::env_warnings", &why);
            return;
        }
    };
    let run = |vars: &[(&str, &str)]| {
        let (mut cmd, _) = child_command().unwrap();
        cmd.args(["--exact", "env_warning_child", "--nocapture", "--test-threads", "1"])
            .env("KLEIDIAI_ENV_WARNING_CHILD", "1")
            .env_remove("KLEIDIAI_TEST_REPORT")
            .env_remove(cpu::DISABLE_ENV)
            .env_remove(kleidiai::par::SME_THREADS_ENV)
            .env_remove(ggml::SME_ENV)
            .env_remove("GGML_TOTAL_THREADS");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("start the child");
        let (stdout, stderr) =
            (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
        assert!(out.status.success(), "child ({how}) with {vars:?} failed:\n{stdout}\n{stderr}");
        assert!(stdout.contains("ENV-CHILD ggml: "), "the child ({how}) did not run its readings:\n{stdout}");
        let line = |key: &str| {
            // The first line may follow libtest's `test env_warning_child ... `.
            let tag = format!("ENV-CHILD {key}: ");
            stdout.lines().find_map(|l| l.split_once(&tag).map(|(_, v)| v.to_string())).unwrap_or_default()
        };
        let warnings: Vec<String> = stderr.lines().filter(|l| l.starts_with("kleidiai: ")).map(String::from).collect();
        println!(
            "child with {vars:?}: features {}, cap {}, ggml {}; warnings {warnings:?}",
            line("features"),
            line("sme cap"),
            line("ggml")
        );
        (line("features"), line("sme cap"), line("ggml"), line("ggml as unset"), warnings)
    };
    // Nothing set: the reference readings.
    let (features, _, ggml_auto, _, warnings) = run(&[]);
    assert!(warnings.is_empty(), "{warnings:?}");
    // Good values: no warning.
    let (_, cap, _, _, warnings) =
        run(&[(cpu::DISABLE_ENV, "sve2p1"), (kleidiai::par::SME_THREADS_ENV, "3"), (ggml::SME_ENV, "0")]);
    assert!(warnings.is_empty(), "good values warned: {warnings:?}");
    assert_eq!(cap, "3");
    // KLEIDIAI_DISABLE: the unknown words named with the accepted names,
    // the known ones applied, never everything off.
    let (f, _, _, _, warnings) = run(&[(cpu::DISABLE_ENV, "sme2,warp-drive")]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = &warnings[0];
    assert!(w.contains("KLEIDIAI_DISABLE='sme2,warp-drive'") && w.contains("`warp-drive`"), "{w}");
    assert!(w.contains("accepted: neon, ") && w.contains("sme2, sme2p1, all)"), "{w}");
    let want = Features::detected().without(&[CpuFeature::Sme2]).to_string();
    assert_eq!(f, want, "only sme2 off");
    let (f, _, _, _, warnings) = run(&[(cpu::DISABLE_ENV, "bogus")]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("`bogus`") && warnings[0].contains("switching off: nothing"), "{warnings:?}");
    assert_eq!(f, features, "bogus alone switches nothing off");
    // KLEIDIAI_SME_THREADS: the automatic cap.
    for bad in ["abc", "0"] {
        let (_, cap, _, _, warnings) = run(&[(kleidiai::par::SME_THREADS_ENV, bad)]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains(&format!("KLEIDIAI_SME_THREADS='{bad}'")), "{warnings:?}");
        assert!(warnings[0].contains("automatic"), "{warnings:?}");
        assert_eq!(cap, "1", "{bad}: the automatic cap");
    }
    // GGML_KLEIDIAI_SME: as ggml, automatic (the layouts of the unset case).
    let (_, _, ggml_bad, unset, warnings) = run(&[(ggml::SME_ENV, "yes")]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("GGML_KLEIDIAI_SME='yes'") && warnings[0].contains("automatic"), "{warnings:?}");
    assert_eq!(ggml_bad, ggml_auto, "GGML_KLEIDIAI_SME=yes repacks as unset");
    assert_eq!(unset, ggml_auto);
    // All three at once: three warnings, one each.
    let (_, _, _, _, warnings) =
        run(&[(cpu::DISABLE_ENV, "nope"), (kleidiai::par::SME_THREADS_ENV, "x"), (ggml::SME_ENV, "-1")]);
    assert_eq!(warnings.len(), 3, "{warnings:?}");
}

/// `cpu::disable` while other threads multiply: each result is the old
/// kernel's or the new choice's, bit for bit; afterwards no SME or SVE
/// kernel serves, and what serves is what weights packed for the restricted
/// features use (or, where every packed layout needs a disabled tier, the
/// reference), matching the reference.
#[test]
fn disable_during_matmuls() {
    let before = Features::current();
    let off = [CpuFeature::Sme, CpuFeature::Sve];
    let (seed, n, k, m) = (72, 40, 64, 6);
    let x = Arc::new(common::Rng::new(73).vec_f32(m * k));
    let all = Arc::new(packed_all(seed, n, k, None));
    let restricted = packed_all(seed, n, k, Some(before.without(&off)));
    let references = packed_all(seed, n, k, Some(Features::none()));
    let olds: Vec<(Vec<f32>, Option<&str>)> =
        all.iter().map(|(_, p, act)| (run(p, *act, m, &x), p.kernel_for(m))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let (all, x, stop) = (all.clone(), x.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut results: Vec<Vec<kleidiai::Result<Vec<f32>>>> = (0..all.len()).map(|_| Vec::new()).collect();
                // One scratch per weights, kept across disable(): the plan
                // each keeps was made with the features before it.
                let mut scratch: Vec<Scratch> = (0..all.len()).map(|_| Scratch::default()).collect();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) || i < 8 {
                    let c = (t + i) % all.len();
                    let (_, p, act) = &all[c];
                    results[c].push(try_run_in(p, *act, m, &x, &mut scratch[c]));
                    i += 1;
                }
                (results, scratch)
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(50));
    cpu::disable(&off);
    let after = Features::current();
    assert_eq!(after, before.without(&off), "disable removes the tiers asked for and their dependents");
    for f in [CpuFeature::Sme, CpuFeature::Sme2, CpuFeature::Sve, CpuFeature::Sve2] {
        assert!(!after.has(f), "{f:?} still on after disable");
    }
    let news: Vec<Vec<f32>> = all.iter().map(|(_, p, act)| run(p, *act, m, &x)).collect();
    std::thread::sleep(std::time::Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let mut seen = 0;
    for h in handles {
        let (results, mut scratch) = h.join().expect("a thread failed");
        // A scratch planned before disable() must not keep its kernel.
        for (c, (name, p, act)) in all.iter().enumerate() {
            let again = try_run_in(p, *act, m, &x, &mut scratch[c]).expect("a matmul after disable() failed");
            assert!(again == news[c], "{name}: a scratch kept across disable() still runs the old kernel");
        }
        for (c, rs) in results.iter().enumerate() {
            for r in rs {
                match r {
                    Ok(r) => {
                        let ok = *r == olds[c].0 || *r == news[c];
                        assert!(ok, "{}: a result during disable() is neither kernel's", all[c].0);
                        seen += 1;
                    }
                    // A call that chose its kernel just before disable()
                    // finds its tier gone when the kernel checks it again
                    // before the FFI call, and chooses again: never an error.
                    Err(e) => panic!("{}: a matmul during disable() failed: {e}", all[c].0),
                }
            }
        }
    }
    for (c, (name, p, act)) in all.iter().enumerate() {
        let kname = p.kernel_for(m);
        assert!(!kname.is_some_and(is_sme_or_sve), "{name}: still served by {kname:?}");
        let (r, reference) = (&restricted[c].1, &references[c].1);
        match kname {
            Some(kname) => {
                assert_eq!(Some(kname), r.kernel_for(m), "{name}: the fallback is the restricted choice");
                assert!(news[c] == run(r, *act, m, &x), "{name}: {kname} differs from weights packed for {after}");
            }
            None => assert!(news[c] == run(reference, *act, m, &x), "{name}: the reference serves, bit for bit"),
        }
        let tol = tolerance(reference, m, &x, TOL);
        common::assert_close(&format!("{name} after disable"), &news[c], &run(reference, *act, m, &x), &tol);
        println!("{name}: {:?} -> {kname:?}", olds[c].1);
    }
    println!("{seen} results checked during and after disable()");
}
