//! The fuzz phases.
//!
//! Host: builds the cargo-fuzz targets of `fuzz/` (nightly, `cargo +nightly
//! fuzz build -O`), runs each for a bounded time on a copy of its committed
//! corpus (`fuzz/corpus/<target>/`, copied into a temporary directory so the
//! run does not grow the repository's corpus), and reads libFuzzer's final
//! statistics. Only the portable reference runs there.
//!
//! Arm: the replay driver (`examples/fuzz_replay.rs`, the same target
//! functions from `fuzz/src` without libFuzzer) cross-built for aarch64 and
//! run under qemu on [`ARM_MODELS`], so the targets meet the KleidiAI
//! kernels: the corpus replayed, then seeded mutations for a fixed time.
//!
//! A crash fails the suite and names the reproducer
//! (`fuzz/artifacts/<target>/crash-...`) with the command that replays it.
//! `scripts/setup.sh` installs the nightly toolchain and cargo-fuzz.

use crate::util::{Env, cargo, root, run_status};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The targets, in the order they run.
pub const TARGETS: [&str; 2] = ["packed_file", "validation"];
/// Seconds of fuzzing per target (the build comes on top).
pub const SECONDS_PER_TARGET: u32 = 20;

/// The qemu CPU models the Arm phase fuzzes on: the richest (SME2, SVE at
/// 512 bits) and the plainest (NEON only).
pub const ARM_MODELS: [&str; 2] = ["max", "cortex-a53"];
/// Seconds of mutation per target on each Arm model, after the corpus
/// replay (`validation` reaches the kernels; the loaders are cheap).
pub const ARM_SECONDS: [(&str, u32); 2] = [("packed_file", 20), ("validation", 45)];

/// What one bounded run found.
#[derive(Debug, Clone, PartialEq)]
pub struct FuzzResult {
    pub target: String,
    /// The qemu CPU model of an Arm run (None: the host, libFuzzer).
    pub cpu: Option<String>,
    pub execs: u64,
    pub seconds: f64,
    pub corpus_files: usize,
    /// Reproducers of crashes, leaks, timeouts or out-of-memory inputs.
    pub crashes: Vec<String>,
    /// Why the run failed without a reproducer (empty: it ran to the end).
    pub error: Option<String>,
}

impl FuzzResult {
    pub fn ok(&self) -> bool {
        self.crashes.is_empty() && self.error.is_none()
    }

    pub fn line(&self) -> String {
        let mut s = format!(
            "{:<12} {:<11} {:>9} execs in {:>5.1}s ({:>6.0}/s), corpus {} files",
            self.target,
            self.cpu.as_deref().unwrap_or("host"),
            self.execs,
            self.seconds,
            self.execs as f64 / self.seconds.max(1e-3),
            self.corpus_files
        );
        if !self.crashes.is_empty() {
            let files = self.crashes.join(" ");
            let t = &self.target;
            s += &match &self.cpu {
                None => format!(": CRASH, reproduce with `cd fuzz && cargo +nightly fuzz run -O {t} {files}`"),
                Some(cpu) => format!(
                    ": CRASH, reproduce with `. .tools/env && QEMU_CPU={cpu} cargo run --release --target {ARM_TARGET} \
                     --example fuzz_replay -- {t} {files}`"
                ),
            };
            if let Some(e) = &self.error {
                s += &format!(" ({e})");
            }
        } else if let Some(e) = &self.error {
            s += &format!(": FAILED: {e}");
        }
        s
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "target": self.target,
            "cpu": self.cpu.as_deref().unwrap_or("host"),
            "execs": self.execs,
            "seconds": (self.seconds * 10.0).round() / 10.0,
            "corpus_files": self.corpus_files,
            "crashes": self.crashes,
            "error": self.error,
        })
    }
}

/// libFuzzer's statistics from its output: the runs of the last `#N ...`
/// status line (`#123 DONE cov: ...`) or of `Done N runs in S second(s)`,
/// and the seconds of the latter.
pub fn parse_stats(output: &str) -> (u64, Option<f64>) {
    let mut execs = 0;
    let mut seconds = None;
    for line in output.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("Done ") {
            let mut w = rest.split_whitespace();
            if let (Some(n), Some("runs"), Some("in"), Some(s)) = (w.next(), w.next(), w.next(), w.next()) {
                if let (Ok(n), Ok(s)) = (n.parse(), s.parse()) {
                    execs = n;
                    seconds = Some(s);
                }
            }
        } else if let Some(rest) = line.strip_prefix('#') {
            let mut w = rest.split_whitespace();
            if let (Some(Ok(n)), Some(_)) = (w.next().map(str::parse::<u64>), w.next()) {
                execs = execs.max(n);
            }
        }
    }
    (execs, seconds)
}

/// Reproducers libFuzzer says it wrote (`Test unit written to <path>`).
pub fn parse_artifacts(output: &str) -> Vec<String> {
    output.lines().filter_map(|l| l.split_once("Test unit written to ").map(|(_, p)| p.trim().to_string())).collect()
}

fn fuzz_dir() -> PathBuf {
    root().join("fuzz")
}

fn nightly_fuzz() -> Command {
    // rustup's proxy picks the toolchain from `+nightly`; the variables this
    // process inherited from `cargo run` would override it.
    let mut c = Command::new("cargo");
    c.current_dir(fuzz_dir())
        .arg("+nightly")
        .arg("fuzz")
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO_TARGET_DIR");
    c
}

fn copy_dir(from: &Path, to: &Path) -> Result<usize, String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    let mut n = 0;
    if let Ok(entries) = std::fs::read_dir(from) {
        for e in entries.flatten() {
            if e.path().is_file() {
                std::fs::copy(e.path(), to.join(e.file_name()))
                    .map_err(|err| format!("{}: {err}", e.path().display()))?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// Builds the targets (`cargo +nightly fuzz build -O`).
pub fn build() -> Result<f64, String> {
    let t = Instant::now();
    let out = nightly_fuzz()
        .args(["build", "-O"])
        .output()
        .map_err(|e| format!("cannot run cargo +nightly fuzz (scripts/setup.sh installs it): {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(15).collect();
        return Err(format!(
            "cargo +nightly fuzz build -O failed:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Runs `target` for `seconds` on a temporary copy of its corpus.
pub fn run_target(target: &str, seconds: u32) -> Result<FuzzResult, String> {
    let corpus = std::env::temp_dir().join(format!("kleidiai-fuzz-{}-{target}", std::process::id()));
    let _ = std::fs::remove_dir_all(&corpus);
    let corpus_files = copy_dir(&fuzz_dir().join("corpus").join(target), &corpus)?;
    let artifacts = fuzz_dir().join("artifacts").join(target);
    std::fs::create_dir_all(&artifacts).map_err(|e| format!("{}: {e}", artifacts.display()))?;
    let t = Instant::now();
    let out = nightly_fuzz()
        .args(["run", "-O", target])
        .arg(&corpus)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .args(["-rss_limit_mb=2048", "-timeout=10", "-print_final_stats=1"])
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .output()
        .map_err(|e| format!("cannot run cargo +nightly fuzz run: {e}"))?;
    let wall = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&corpus);
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let (execs, secs) = parse_stats(&text);
    let crashes = parse_artifacts(&text);
    let error = if out.status.success() || !crashes.is_empty() {
        None
    } else {
        let tail: Vec<&str> = text.lines().rev().take(12).collect();
        Some(format!("exit {}: {}", out.status, tail.into_iter().rev().collect::<Vec<_>>().join(" | ")))
    };
    Ok(FuzzResult {
        target: target.into(),
        cpu: None,
        execs,
        seconds: secs.unwrap_or(wall),
        corpus_files,
        crashes,
        error,
    })
}

const ARM_TARGET: &str = "aarch64-unknown-linux-gnu";

/// Builds the replay driver for aarch64 (a no-op after the test command's
/// `cargo test --no-run`, which builds the examples); its path.
pub fn build_arm_driver(env: &Env) -> Result<PathBuf, String> {
    let mut c = cargo();
    env.apply(&mut c).args(["build", "-q", "--release", "--example", "fuzz_replay", "--target", ARM_TARGET]);
    run_status(&mut c)?;
    Ok(root().join("target").join(ARM_TARGET).join("release/examples/fuzz_replay"))
}

/// A file name for `input` that depends only on its bytes.
fn content_name(input: &[u8]) -> String {
    use std::hash::{DefaultHasher, Hasher};
    let mut h = DefaultHasher::new();
    h.write(input);
    format!("{:016x}", h.finish())
}

/// `FUZZ-REPLAY ... key=value ...` from the driver's output.
fn replay_field(out: &str, key: &str) -> Option<String> {
    let line = out.lines().find(|l| l.starts_with("FUZZ-REPLAY "))?;
    line.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
}

/// Runs the driver on `cpu` for `target`: the corpus, then `seconds` of
/// mutations from `seed`. A run that fails, or outlives its budget by two
/// minutes (killed), saves the input it was on under `fuzz/artifacts/`.
pub fn run_arm_target(
    env: &Env,
    driver: &Path,
    cpu: &str,
    target: &str,
    seconds: u32,
    seed: u64,
) -> Result<FuzzResult, String> {
    let work = root().join("target/fuzz-arm").join(format!("{}-{target}", cpu.replace([',', '='], "_")));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let corpus = fuzz_dir().join("corpus").join(target);
    let corpus_files = std::fs::read_dir(&corpus).map(|d| d.count()).unwrap_or(0);
    let (current, stdout, stderr) = (work.join("current"), work.join("stdout"), work.join("stderr"));
    let file = |p: &Path| std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut cmd = env.qemu(cpu, driver);
    cmd.current_dir(root())
        .arg(target)
        .arg(&corpus)
        .args(["--seconds", &seconds.to_string(), "--seed", &seed.to_string(), "--current"])
        .arg(&current)
        .stdin(Stdio::null())
        .stdout(file(&stdout)?)
        .stderr(file(&stderr)?);
    let t = Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    let deadline = Duration::from_secs(seconds as u64 + 120);
    let (status, hung) = loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            break (Some(st), false);
        }
        if t.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let wall = t.elapsed().as_secs_f64();
    let out = std::fs::read_to_string(&stdout).unwrap_or_default();
    let err = std::fs::read_to_string(&stderr).unwrap_or_default();
    let execs = replay_field(&out, "execs").and_then(|v| v.parse().ok()).unwrap_or(0);
    let secs = replay_field(&out, "seconds").and_then(|v| v.parse().ok()).unwrap_or(wall);
    let mut res = FuzzResult {
        target: target.into(),
        cpu: Some(cpu.into()),
        execs,
        seconds: secs,
        corpus_files,
        crashes: Vec::new(),
        error: None,
    };
    if status.is_some_and(|s| s.success()) && execs > 0 {
        return Ok(res);
    }
    // The input that was running: saved by content, reproducible by name.
    let why = if hung {
        format!("no exit {seconds} + 120 s after the start (killed)")
    } else {
        let first = err.lines().find(|l| l.contains("panicked at") || l.contains("qemu:")).unwrap_or("");
        let next = err.lines().skip_while(|l| !l.contains("panicked at")).nth(1).unwrap_or("");
        format!("exit {}: {} {}", status.map_or("?".into(), |s| s.to_string()), first.trim(), next.trim())
    };
    match std::fs::read(&current) {
        Ok(input) => {
            let dir = fuzz_dir().join("artifacts").join(target);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let kind = if hung { "timeout" } else { "crash" };
            let saved = dir.join(format!("{kind}-{}-{}", cpu.replace([',', '='], "_"), content_name(&input)));
            std::fs::write(&saved, &input).map_err(|e| format!("{}: {e}", saved.display()))?;
            let rel = saved.strip_prefix(root()).unwrap_or(&saved);
            res.crashes.push(rel.display().to_string());
            res.error = Some(why);
        }
        Err(_) => res.error = Some(format!("{why} (before any input ran)")),
    }
    Ok(res)
}

/// The Arm phase: every target on every model of [`ARM_MODELS`].
pub fn run_arm(env: &Env) -> Result<Vec<FuzzResult>, String> {
    let driver = build_arm_driver(env)?;
    let mut results = Vec::new();
    for (i, cpu) in ARM_MODELS.iter().enumerate() {
        for (target, seconds) in ARM_SECONDS {
            let r = run_arm_target(env, &driver, cpu, target, seconds, 1 + i as u64)?;
            println!("    {}", r.line());
            results.push(r);
        }
    }
    Ok(results)
}

/// The whole host phase: build, then every target. Err only when the phase
/// could not run at all (no nightly, a build failure).
pub fn run() -> Result<Vec<FuzzResult>, String> {
    let secs = build()?;
    println!("    built {} targets in {secs:.1}s", TARGETS.len());
    let mut results = Vec::new();
    for t in TARGETS {
        let r = run_target(t, SECONDS_PER_TARGET)?;
        println!("    {}", r.line());
        results.push(r);
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arm_crash_is_saved_and_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("xtask-fake-qemu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Stands in for qemu running the driver: writes the input it is on
        // where `--current` says, then dies on a signal.
        let qemu = dir.join("qemu");
        std::fs::write(
            &qemu,
            "#!/bin/sh\nwhile [ \"$1\" != --current ]; do shift; done\nprintf boom > \"$2\"\nkill -SEGV $$\n",
        )
        .unwrap();
        std::fs::set_permissions(&qemu, std::fs::Permissions::from_mode(0o755)).unwrap();
        let env = Env { qemu, sysroot: dir.clone(), vars: Vec::new() };
        let r = run_arm_target(&env, Path::new("fuzz_replay"), "max,sme=off", "unit-test", 0, 1).unwrap();
        let line = r.line();
        let _ = std::fs::remove_dir_all(&dir);
        let saved = r.crashes.first().map(|c| root().join(c));
        let bytes = saved.as_ref().and_then(|p| std::fs::read(p).ok());
        let _ = std::fs::remove_dir_all(fuzz_dir().join("artifacts/unit-test"));
        assert!(!r.ok() && r.crashes.len() == 1, "{r:?}");
        assert!(r.crashes[0].starts_with("fuzz/artifacts/unit-test/crash-max_sme_off-"), "{r:?}");
        assert_eq!(bytes.as_deref(), Some(&b"boom"[..]));
        assert!(line.contains("QEMU_CPU=max,sme=off cargo run --release --target aarch64-unknown-linux-gnu"), "{line}");
        assert!(line.contains("--example fuzz_replay -- unit-test fuzz/artifacts/unit-test/crash-"), "{line}");
    }

    #[test]
    fn libfuzzer_final_stats() {
        let out = "INFO: Seed: 1\n#2\tINITED cov: 10 ft: 11 corp: 3/40b exec/s: 0 rss: 30Mb\n\
                   #4096\tpulse  cov: 12 ft: 13 corp: 3/40b lim: 4 exec/s: 2048 rss: 31Mb\n\
                   #229227\tDONE   cov: 1450 ft: 5000 corp: 300/20Kb lim: 4096 exec/s: 5590 rss: 420Mb\n\
                   Done 229227 runs in 41 second(s)\n";
        assert_eq!(parse_stats(out), (229227, Some(41.0)));
        let crash = "==1== ERROR: libFuzzer: deadly signal\nMS: 1 ChangeBit-; base unit: 0\n\
                     artifact_prefix='/x/'; Test unit written to /x/crash-cd12\nBase64: AA==\n";
        assert_eq!(parse_artifacts(crash), vec!["/x/crash-cd12".to_string()]);
        assert_eq!(parse_stats(crash), (0, None));
    }
}
