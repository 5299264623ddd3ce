//! Builds beyond the default one: kleidiai-sys with a subset of tiers, and
//! the MSRV check.

use super::options::TARGET;
use crate::util::{self, Env, cargo, root, run_status};
use std::process::Command;

/// Builds kleidiai-sys with only two tiers and runs its unit tests under
/// qemu: what was built must follow the Cargo features.
pub(super) fn feature_subset(env: &Env) -> Result<(), String> {
    let mut c = cargo();
    c.args(["test", "-q", "--release", "-p", "kleidiai-sys", "--lib", "--no-default-features"])
        .args(["--features", "dotprod,i8mm", "--target", TARGET, "--target-dir"])
        .arg(root().join("target/feature-subset"))
        .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER", root().join("scripts/qemu-run"))
        .env("KLEIDIAI_QEMU", &env.qemu)
        .env("KLEIDIAI_SYSROOT", &env.sysroot)
        .env("QEMU_CPU", "max");
    run_status(&mut c).map(|_| ())
}

pub(super) fn msrv_check() -> Result<String, String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).map_err(|e| e.to_string())?;
    let msrv = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_string())
        .ok_or("no rust-version in Cargo.toml")?;
    if util::which("rustup").is_none() {
        return Ok(format!("skipped: no rustup to install Rust {msrv}"));
    }
    let mut install = Command::new("rustup");
    install.args(["toolchain", "install", &msrv, "--profile", "minimal", "--target", TARGET, "--no-self-update"]);
    install.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    run_status(&mut install).map_err(|e| format!("installing Rust {msrv}: {e}"))?;
    let target_dir = root().join("target/msrv");
    for target in [None, Some(TARGET)] {
        // The rustup proxy picks the toolchain from `+msrv`; the CARGO, RUSTC
        // and RUSTUP_TOOLCHAIN this process inherited would override it.
        let mut c = Command::new("cargo");
        c.current_dir(root())
            .arg(format!("+{msrv}"))
            .args(["check", "-q", "--locked", "-p", "kleidiai-sys", "-p", "kleidiai", "--target-dir"])
            .arg(&target_dir)
            .env_remove("CARGO")
            .env_remove("RUSTC")
            .env_remove("RUSTUP_TOOLCHAIN");
        if let Some(t) = target {
            c.args(["--target", t]);
        }
        run_status(&mut c).map_err(|e| format!("Rust {msrv} check ({}) failed: {e}", target.unwrap_or("host")))?;
    }
    Ok(format!("ok: kleidiai-sys and kleidiai check with Rust {msrv} (host and {TARGET})"))
}
