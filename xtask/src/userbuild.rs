//! What a user's build of `kleidiai-sys` meets, checked by the test command:
//!
//! - **docs.rs**: with `DOCS_RS` set, `kleidiai` and `kleidiai-sys` document
//!   for aarch64 with no aarch64 C compiler on `PATH` (only the host's `cc`,
//!   which links build scripts), every rustdoc warning an error.
//! - **bad input**: a missing C compiler, a KleidiAI tree of another version
//!   and unsupported targets each stop the build with one message from the
//!   build script that names the fix.

pub const USAGE: &str = "usage: cargo run -p xtask -- user-build
  docs.rs check (DOCS_RS=1 cargo doc, no aarch64 C compiler on PATH) and the bad-input builds";

use crate::restricted::Restricted;
use crate::util::{Env, cargo, root};
use std::process::Command;

const TARGET: &str = "aarch64-unknown-linux-gnu";

/// `cargo doc` as docs.rs runs it, with no aarch64 C compiler reachable.
pub fn docs_rs() -> Result<String, String> {
    let r = Restricted::new("docs-rs", &["cc"])?;
    if r.bin.join("aarch64-linux-gnu-gcc").exists() {
        return Err("the docs.rs check's PATH holds an aarch64 compiler".into());
    }
    let mut c = r.cargo(&root());
    c.env("DOCS_RS", "1")
        .env("RUSTDOCFLAGS", "-D warnings")
        .args(["doc", "--no-deps", "-q", "-p", "kleidiai", "-p", "kleidiai-sys", "--target", TARGET, "--target-dir"])
        .arg(root().join("target/docs-rs"));
    let out = c.output().map_err(|e| format!("cannot run {c:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("DOCS_RS=1 cargo doc failed:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    let build = root().join("target/docs-rs").join(TARGET).join("debug/build");
    let reports: Vec<String> = std::fs::read_dir(&build)
        .map_err(|e| format!("{}: {e}", build.display()))?
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("out/build-report.txt")).ok())
        .collect();
    if reports.is_empty() || !reports.iter().all(|r| r.contains("docs_rs=1\nobjects=0")) {
        return Err(format!("with DOCS_RS the build script must compile nothing: {reports:?}"));
    }
    for krate in ["kleidiai", "kleidiai_sys"] {
        let index = root().join("target/docs-rs").join(TARGET).join("doc").join(krate).join("index.html");
        if !index.is_file() {
            return Err(format!("DOCS_RS=1 cargo doc wrote no {}", index.display()));
        }
    }
    Ok(format!(
        "docs.rs: DOCS_RS=1 cargo doc -p kleidiai -p kleidiai-sys --target {TARGET} with PATH = {:?} only: \
         documented, no warnings, nothing compiled",
        r.tools()
    ))
}

/// One bad-input case: the build must fail with the build script's own
/// message, once, naming the fix and containing `expect`.
fn expect_failure(name: &str, mut c: Command, expect: &str) -> Result<String, String> {
    let out = c.output().map_err(|e| format!("cannot run {c:?}: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = stderr.lines().filter(|l| l.contains("error: kleidiai-sys: ")).collect();
    let problem = if out.status.success() {
        Some("the build succeeded".to_string())
    } else if ours.len() != 1 {
        Some(format!("{} build-script messages instead of one", ours.len()))
    } else if !stderr.contains(expect) {
        Some(format!("the message does not say `{expect}`"))
    } else if !stderr.contains("Fix:") {
        Some("the message names no fix".to_string())
    } else if stderr.contains("error[E") || stderr.contains("error: could not compile") {
        Some("compiler errors follow the message".to_string())
    } else {
        None
    };
    if let Some(p) = problem {
        return Err(format!("bad input `{name}`: {p}\n{stderr}"));
    }
    Ok(format!("bad input `{name}`: stopped with `{}`", ours[0].trim().trim_start_matches("error: kleidiai-sys: ")))
}

/// `cargo build -p kleidiai-sys` for `target` into `target/bad-input`.
fn build_sys(c: &mut Command, target: &str) {
    c.args(["build", "-q", "-p", "kleidiai-sys", "--target", target, "--target-dir"])
        .arg(root().join("target/bad-input"));
}

/// Every bad-input case; one line each.
pub fn bad_input(env: &Env) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();

    // No C compiler for the target: a PATH with the host's cc only.
    let r = Restricted::new("no-cross-cc", &["cc"])?;
    let mut c = r.cargo(&root());
    build_sys(&mut c, TARGET);
    lines.push(expect_failure("no aarch64 C compiler", c, "aarch64-linux-gnu-gcc")?);

    // A KleidiAI tree of another version.
    let fake = root().join("target/bad-input/kleidiai-1.29.0");
    std::fs::create_dir_all(fake.join("kai")).map_err(|e| format!("{}: {e}", fake.display()))?;
    std::fs::write(fake.join("CMakeLists.txt"), "project(KleidiAI\n    VERSION 1.29.0\n    LANGUAGES C CXX ASM)\n")
        .and_then(|()| std::fs::write(fake.join("kai/kai_common.h"), "#pragma once\n"))
        .map_err(|e| format!("{}: {e}", fake.display()))?;
    let mut c = cargo();
    env.apply(&mut c).env("KLEIDIAI_SOURCE_DIR", &fake);
    build_sys(&mut c, TARGET);
    lines.push(expect_failure("KleidiAI 1.29.0 in KLEIDIAI_SOURCE_DIR", c, "is version 1.29.0")?);

    // Targets upstream's sources cannot serve.
    for (target, expect) in [
        ("aarch64_be-unknown-linux-gnu", "big-endian"),
        ("aarch64-pc-windows-gnullvm", "is Windows"),
        ("aarch64-unknown-none", "no C library"),
    ] {
        let mut c = cargo();
        build_sys(&mut c, target);
        lines.push(expect_failure(&format!("--target {target}"), c, expect)?);
    }
    Ok(lines)
}
