//! Builds in a restricted environment: a `PATH` holding only named tools
//! (symlinks in a directory of their own), every other variable cleared, the
//! Rust toolchain by absolute path. What a crates.io user's machine with just
//! a C compiler looks like: no libclang, no binutils beyond what the compiler
//! driver runs itself.

use crate::util::{root, which};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Tools that must never be reachable in a restricted build: binutils that
/// post-process objects, and libclang's users.
pub const FORBIDDEN: [&str; 7] =
    ["nm", "objcopy", "aarch64-linux-gnu-nm", "aarch64-linux-gnu-objcopy", "llvm-nm", "llvm-objcopy", "llvm-config"];

/// A restricted environment.
pub struct Restricted {
    /// The directory that is the whole `PATH`.
    pub bin: PathBuf,
    sysroot: PathBuf,
}

impl Restricted {
    /// A `PATH` of exactly `tools` (each found on the current `PATH`), in
    /// `target/restricted/<name>`.
    pub fn new(name: &str, tools: &[&str]) -> Result<Restricted, String> {
        let bin = root().join("target/restricted").join(name);
        let _ = std::fs::remove_dir_all(&bin);
        std::fs::create_dir_all(&bin).map_err(|e| format!("{}: {e}", bin.display()))?;
        for t in tools {
            let path = which(t).ok_or_else(|| format!("`{t}` is not on PATH (scripts/setup.sh installs it)"))?;
            let real = std::fs::canonicalize(&path).unwrap_or(path);
            std::os::unix::fs::symlink(&real, bin.join(t)).map_err(|e| format!("{}: {e}", bin.display()))?;
        }
        for t in FORBIDDEN {
            if bin.join(t).exists() {
                return Err(format!("restricted PATH {} holds `{t}`", bin.display()));
            }
        }
        let out = Command::new("rustc").args(["--print", "sysroot"]).output().map_err(|e| format!("rustc: {e}"))?;
        let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if !sysroot.join("bin/cargo").is_file() {
            return Err(format!("no cargo in the toolchain at {}", sysroot.display()));
        }
        Ok(Restricted { bin, sysroot })
    }

    /// The names on the restricted `PATH`, for messages.
    pub fn tools(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.bin)
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// `cargo` of the active toolchain, run from `dir` with nothing in its
    /// environment but `HOME` (the registry cache), the restricted `PATH`,
    /// and `RUSTC`/`RUSTDOC` by absolute path.
    pub fn cargo(&self, dir: &Path) -> Command {
        let mut c = Command::new(self.sysroot.join("bin/cargo"));
        c.current_dir(dir).env_clear().env("PATH", &self.bin);
        for keep in ["HOME", "CARGO_HOME", "RUSTUP_HOME", "TMPDIR"] {
            if let Some(v) = std::env::var_os(keep) {
                c.env(keep, v);
            }
        }
        c.env("RUSTC", self.sysroot.join("bin/rustc")).env("RUSTDOC", self.sysroot.join("bin/rustdoc"));
        c
    }
}
