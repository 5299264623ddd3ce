//! The packaged crates as a crates.io user gets them: `cargo package` of
//! `kleidiai-sys` and `kleidiai` (with cargo's verification build), then the
//! crate in `tests/downstream` (`kleidiai = "0.1"`, outside the workspace)
//! built offline against the two unpacked `.crate` files for aarch64, its
//! tests run under qemu.

use crate::restricted::Restricted;
use crate::util::{Env, cargo, root, run_status, timed_output};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "aarch64-unknown-linux-gnu";
/// The C compiler (and linker driver) and archiver of a Debian cross toolchain.
const CROSS_CC: &str = "aarch64-linux-gnu-gcc";
const CROSS_AR: &str = "aarch64-linux-gnu-ar";

/// The package name in a cargo package id (`registry+...#name@1.0`,
/// `path+file:///...#name@0.1.0`, or the old `name 1.0 (source)` form).
fn package_name(id: &str) -> String {
    if let Some((_, frag)) = id.rsplit_once('#') {
        let name = frag.split('@').next().unwrap_or(frag);
        // `path+file:///x/kleidiai-sys-0.1.0#0.1.0` has only a version.
        if name.starts_with(|c: char| c.is_ascii_digit()) {
            let path = id.split('#').next().unwrap_or(id);
            let dir = path.rsplit('/').next().unwrap_or(path);
            return dir.rsplit_once('-').map_or(dir, |(n, _)| n).to_string();
        }
        return name.to_string();
    }
    id.split_whitespace().next().unwrap_or(id).to_string()
}
/// CPU models the downstream tests run on: the SME2 kernels, and the
/// oldest core (NEON only; most kinds fall back to the reference).
const MODELS: [&str; 2] = ["max", "cortex-a53"];

fn crate_file(dir: &Path, name: &str) -> Result<PathBuf, String> {
    std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let f = p.file_name().and_then(|f| f.to_str()).unwrap_or("");
            f.ends_with(".crate")
                && f.strip_prefix(name)
                    .and_then(|r| r.strip_prefix('-'))
                    .is_some_and(|v| v.starts_with(char::is_numeric))
        })
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .ok_or_else(|| format!("cargo package made no {name}-*.crate in {}", dir.display()))
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| e.to_string())?;
    for e in std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?.flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_dir(&src, &dst)?;
        } else if e.file_name() != "Cargo.lock" {
            std::fs::copy(&src, &dst).map_err(|e| format!("{}: {e}", src.display()))?;
        }
    }
    Ok(())
}

/// The packaged crates unpacked, and a copy of `tests/downstream` to build
/// against them.
pub struct Packaged {
    /// `kleidiai-sys` and `kleidiai`, unpacked from their `.crate` files.
    pub dirs: Vec<PathBuf>,
    /// The copy of the downstream crate.
    pub project: PathBuf,
    /// One line per step.
    pub lines: Vec<String>,
}

impl Packaged {
    /// `--config patch.crates-io...` arguments that make cargo take the
    /// unpacked crates where crates.io would provide them.
    pub fn patch_args(&self) -> Vec<String> {
        let mut v = Vec::new();
        for (name, dir) in ["kleidiai-sys", "kleidiai"].iter().zip(&self.dirs) {
            v.push("--config".to_string());
            v.push(format!("patch.crates-io.{name}.path={:?}", dir.display().to_string()));
        }
        v
    }
}

/// Removes what cargo unpacked from an earlier `cargo package` of our two
/// crates: `kleidiai` is verified against the packaged `kleidiai-sys` through
/// a temporary registry whose unpacked sources cargo keeps in
/// `$CARGO_HOME/registry/src/-<hash of the registry's path>/` and reuses
/// when the version is the same, so a checkout at the same path would build
/// the previous run's sources. Only those directories (named `-...`, never a
/// real registry's) and only our crates' entries in them are removed.
fn forget_stale_extractions() {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(home) = home else { return };
    for kind in ["src", "cache"] {
        let Ok(regs) = std::fs::read_dir(home.join("registry").join(kind)) else { continue };
        for reg in regs.flatten() {
            if !reg.file_name().to_string_lossy().starts_with('-') {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(reg.path()) else { continue };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("kleidiai-sys-") || name.starts_with("kleidiai-0.") {
                    let p = e.path();
                    let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
                }
            }
        }
    }
}

/// `cargo package` of both crates (cargo verifies by building each from its
/// `.crate`, `kleidiai` against the packaged `kleidiai-sys`), unpacked under
/// `target/downstream/crates`, and `tests/downstream` copied to `project_dir`.
pub fn package(env: &Env, project_dir: &Path) -> Result<Packaged, String> {
    let mut lines = Vec::new();
    let work = root().join("target/downstream");
    forget_stale_extractions();
    let mut pkg = cargo();
    pkg.args(["package", "-q", "--allow-dirty", "-p", "kleidiai-sys", "-p", "kleidiai"]);
    let secs = run_status(env.apply(&mut pkg))?;
    let pkg_dir = root().join("target/package");
    let crates: Vec<PathBuf> =
        ["kleidiai-sys", "kleidiai"].iter().map(|n| crate_file(&pkg_dir, n)).collect::<Result<_, _>>()?;
    for c in &crates {
        let size = std::fs::metadata(c).map(|m| m.len()).unwrap_or(0);
        lines.push(format!("packaged {} ({} KiB)", c.file_name().unwrap().to_string_lossy(), size / 1024));
    }
    lines.push(format!("cargo package with verification: {secs:.1}s"));

    // Unpack them (kept while the .crate bytes, which cargo makes
    // reproducible, stay the same: a fresh unpack rebuilds KleidiAI), and
    // copy the downstream crate next to them (so its Cargo.lock and build
    // never touch the source tree).
    let unpacked = work.join("crates");
    std::fs::create_dir_all(&unpacked).map_err(|e| e.to_string())?;
    let mut dirs = Vec::new();
    for c in &crates {
        let file = c.file_name().unwrap().to_string_lossy().to_string();
        let dir = unpacked.join(file.trim_end_matches(".crate"));
        let copy = unpacked.join(&file);
        let bytes = std::fs::read(c).map_err(|e| format!("{}: {e}", c.display()))?;
        if !dir.is_dir() || std::fs::read(&copy).ok().as_deref() != Some(&bytes[..]) {
            let _ = std::fs::remove_dir_all(&dir);
            let mut tar = Command::new("tar");
            tar.arg("xzf").arg(c).arg("-C").arg(&unpacked);
            run_status(&mut tar)?;
            std::fs::write(&copy, &bytes).map_err(|e| e.to_string())?;
        }
        dirs.push(dir);
    }
    let _ = std::fs::remove_dir_all(project_dir);
    copy_dir(&root().join("tests/downstream"), project_dir)?;
    Ok(Packaged { dirs, project: project_dir.to_path_buf(), lines })
}

/// Packages, builds and tests; returns one line per step.
pub fn run(env: &Env) -> Result<Vec<String>, String> {
    let work = root().join("target/downstream");
    let packaged = package(env, &work.join("project"))?;
    let mut lines = packaged.lines.clone();
    let project = packaged.project.clone();

    // 3. Build its tests for aarch64, offline, with the two crates patched in
    //    where crates.io would provide them, in a restricted environment: the
    //    PATH holds only the C compiler (which links too), the archiver and
    //    the host's `cc` (build scripts link with it); no libclang user, no
    //    nm or objcopy; every other variable cleared.
    let r = Restricted::new("downstream", &[CROSS_CC, CROSS_AR, "cc"])?;
    let mut build = r.cargo(&root());
    build
        .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER", CROSS_CC)
        .args(["test", "--release", "--offline", "--no-run", "--message-format=json-render-diagnostics"])
        .args(["--target", TARGET, "--manifest-path"])
        .arg(project.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(work.join("target"));
    build.args(packaged.patch_args());
    build.stderr(std::process::Stdio::inherit());
    let (out, secs) = timed_output(&mut build)?;
    if !out.status.success() {
        return Err(format!(
            "building the downstream crate against the packaged crates with PATH = {:?} failed",
            r.tools()
        ));
    }
    let mut exes = Vec::new();
    let mut packages = std::collections::BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        if let Some(id) = v.get("package_id").and_then(Value::as_str) {
            packages.insert(package_name(id));
        }
        let is_test = v.pointer("/profile/test").and_then(Value::as_bool) == Some(true);
        if let (true, Some(exe)) = (is_test, v.get("executable").and_then(Value::as_str)) {
            exes.push(PathBuf::from(exe));
        }
    }
    // The packaged sources must be what was compiled, not the workspace's.
    let lock = std::fs::read_to_string(project.join("Cargo.lock")).unwrap_or_default();
    if !lock.contains("name = \"kleidiai-sys\"") {
        return Err("the downstream Cargo.lock has no kleidiai-sys".into());
    }
    let clang_users: Vec<&String> =
        packages.iter().filter(|p| ["bindgen", "clang-sys"].contains(&p.as_str())).collect();
    if !clang_users.is_empty() {
        return Err(format!("the default build compiled {clang_users:?}: libclang would be needed"));
    }
    if !packages.contains("kleidiai-sys") {
        return Err(format!("the downstream build did not build kleidiai-sys (units: {packages:?})"));
    }
    lines.push(format!(
        "downstream crate built offline for {TARGET} against the .crate files: {secs:.1}s, PATH = {:?} only \
         (no nm, objcopy or libclang user; {} packages, none of them bindgen or clang-sys)",
        r.tools(),
        packages.len()
    ));

    // 4. Run its tests under qemu.
    for cpu in MODELS {
        let (mut passed, mut secs) = (0, 0.0);
        for exe in &exes {
            let (out, s) = timed_output(&mut env.qemu(cpu, exe))?;
            secs += s;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let (counts, failed) = crate::report::parse_libtest(&stdout);
            if !out.status.success() || counts.result_lines == 0 {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let tail: Vec<&str> = stdout.lines().chain(stderr.lines()).collect();
                return Err(format!(
                    "downstream tests under qemu -cpu {cpu} failed ({}): {failed:?}\n{}",
                    out.status,
                    tail[tail.len().saturating_sub(30)..].join("\n")
                ));
            }
            passed += counts.passed;
        }
        if passed == 0 {
            return Err(format!("no downstream test ran under qemu -cpu {cpu}"));
        }
        lines.push(format!("downstream tests under qemu -cpu {cpu}: {passed} passed ({secs:.1}s)"));
    }
    Ok(lines)
}
