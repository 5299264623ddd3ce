//! Generated files committed to the repository, and their freshness checks:
//!
//! - `cargo run -p xtask -- bindings [--check]`: `kleidiai-sys/src/bindings.rs`,
//!   bindgen over KleidiAI's public headers with the build script's own code
//!   (`kleidiai-sys/build/bindings.rs`). `--check` regenerates into memory,
//!   fails if the committed file differs, then regenerates for every other
//!   aarch64 target family the file claims to serve (Android, macOS, Windows
//!   GNU ABI) and fails if any would differ.
//!
//!   It also writes `kleidiai-sys/src/families.rs`, the pinned tree's compute
//!   families (`kleidiai-sys/build/families.rs`; no libclang needed), which
//!   `--check` and the build script compare.
//!
//! - `cargo run -p xtask -- header [--check]`: `kleidiai-capi/include/kleidiai_rs.h`,
//!   cbindgen over `kleidiai-capi` (its `cbindgen.toml`).
//!
//! Needs libclang (scripts/setup.sh installs it); the crates' default build
//! does not.

use crate::kai_bindings;
use crate::prefix;
use crate::util::root;
use std::path::{Path, PathBuf};

pub const USAGE: &str = "usage: cargo run -p xtask -- bindings [--check]
  regenerates kleidiai-sys/src/bindings.rs (bindgen, needs libclang) and kleidiai-sys/src/families.rs;
  --check: fail if a committed file is stale, or if another aarch64 target would differ
usage: cargo run -p xtask -- header [--check]
  regenerates kleidiai-capi/include/kleidiai_rs.h (cbindgen over kleidiai-capi);
  --check: fail if the committed header is stale
usage: cargo run -p xtask -- check-generated
  the test command's phase: bindings --check, and the symbol prefix checked with llvm-nm
  on the last aarch64 release build's archive and on upstream's .S files assembled for macOS";

fn sys_dir() -> PathBuf {
    root().join("kleidiai-sys")
}

/// The KleidiAI tree the build script would use (the submodule unless
/// `KLEIDIAI_SOURCE_DIR` is set).
fn kleidiai_root() -> Result<PathBuf, String> {
    let dir = match std::env::var_os("KLEIDIAI_SOURCE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => root().join("vendor/kleidiai"),
    };
    if !dir.join("kai/kai_common.h").is_file() {
        return Err(format!(
            "no KleidiAI sources at {}: run `git submodule update --init vendor/kleidiai` (scripts/setup.sh does)",
            dir.display()
        ));
    }
    Ok(dir)
}

/// `version = "..."` of `kleidiai-sys/Cargo.toml`.
fn sys_version() -> Result<String, String> {
    let path = sys_dir().join("Cargo.toml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("version = "))
        .map(|v| v.trim().trim_matches('"').to_string())
        .ok_or_else(|| format!("no version in {}", path.display()))
}

/// The bindings as the committed file must read.
fn expected_bindings(kai: &Path) -> Result<String, String> {
    let prefix = prefix::symbol_prefix(&sys_version()?);
    // The C library headers of Debian's cross sysroot, as the build script passes them.
    let mut extra = Vec::new();
    let sysroot = Path::new("/usr/aarch64-linux-gnu/include");
    if sysroot.join("stdio.h").is_file() {
        extra.push(format!("-isystem{}", sysroot.display()));
    }
    kai_bindings::generate(kai, &prefix, kai_bindings::BINDINGS_TARGET, &extra)
}

/// Other targets the committed file claims to serve, as clang triples.
const OTHER_TARGETS: [(&str, &str); 3] = [
    ("aarch64-linux-android", "aarch64-linux-android"),
    ("aarch64-apple-darwin", "arm64-apple-macosx11.0"),
    ("aarch64-pc-windows-gnullvm", "aarch64-w64-windows-gnu"),
];

/// Minimal C library headers: the KleidiAI headers need only a few
/// declarations from `<stdio.h>`, `<stdlib.h>` and `<string.h>`, none of
/// which reach the allowlisted bindings. The same stubs for every target,
/// so a difference between targets can only come from the target itself.
fn write_stub_libc(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let files = [
        (
            "stdio.h",
            "#pragma once\n#include <stddef.h>\ntypedef struct FILE FILE;\nextern FILE *stdout, *stderr;\n\
             int fprintf(FILE *, const char *, ...);\nint printf(const char *, ...);\nint fflush(FILE *);\n",
        ),
        (
            "stdlib.h",
            "#pragma once\n#include <stddef.h>\nvoid abort(void);\nvoid *malloc(size_t);\nvoid free(void *);\n",
        ),
        (
            "string.h",
            "#pragma once\n#include <stddef.h>\nvoid *memcpy(void *, const void *, size_t);\n\
             void *memset(void *, int, size_t);\nint memcmp(const void *, const void *, size_t);\n",
        ),
        (
            "math.h",
            "#pragma once\nfloat fabsf(float);\nfloat roundf(float);\nfloat fmaxf(float, float);\nfloat fminf(float, float);\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    Ok(())
}

/// The builtin include directory of the libclang bindgen loads
/// (`/usr/lib/llvm-<major>/lib/clang/<version>/include` on Debian).
fn libclang_builtin_includes() -> Option<PathBuf> {
    let version = bindgen::clang_version();
    let (major, _) = version.parsed?;
    let base = PathBuf::from(format!("/usr/lib/llvm-{major}/lib/clang"));
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&base).ok()?.flatten().map(|e| e.path().join("include")).collect();
    dirs.sort();
    dirs.into_iter().find(|d| d.join("arm_neon.h").is_file())
}

/// The first differing line of two texts, for a message.
fn first_difference(a: &str, b: &str) -> String {
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("line {}:\n  - {x}\n  + {y}", i + 1);
        }
    }
    format!("lengths differ: {} and {} lines", a.lines().count(), b.lines().count())
}

/// `xtask bindings [--check]`.
pub fn bindings(args: &[String]) -> Result<bool, String> {
    let check = crate::util::check_flag(args, USAGE)?;
    let kai = kleidiai_root()?;
    let path = sys_dir().join("src/bindings.rs");
    let t = std::time::Instant::now();
    let text = expected_bindings(&kai)?;
    if !check {
        std::fs::write(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {} ({} lines, {:.1}s)", path.display(), text.lines().count(), t.elapsed().as_secs_f64());
        let (path, names) = (sys_dir().join("src/families.rs"), crate::kai_families::names(&kai)?);
        std::fs::write(&path, crate::kai_families::text(&names)).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {} ({} families)", path.display(), names.len());
        return Ok(true);
    }
    println!("    {}", check_families(&kai)?);
    for line in check_bindings(&kai, &text)? {
        println!("    {line}");
    }
    Ok(true)
}

/// `kleidiai-sys/src/families.rs` against the pinned tree's families.
pub fn check_families(kai: &Path) -> Result<String, String> {
    let path = sys_dir().join("src/families.rs");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let names = crate::kai_families::names(kai)?;
    let expected = crate::kai_families::text(&names);
    if committed != expected {
        return Err(format!(
            "{} is stale (the pinned tree's families differ at {}).\nFix: cargo run -p xtask -- bindings",
            path.display(),
            first_difference(&committed, &expected)
        ));
    }
    Ok(format!(
        "families fresh: {} lists the pinned tree's {} compute families",
        path.strip_prefix(root()).unwrap_or(&path).display(),
        names.len()
    ))
}

/// The freshness and cross-target checks; one line per check, error on the
/// first failure.
pub fn check_bindings(kai: &Path, expected: &str) -> Result<Vec<String>, String> {
    let path = sys_dir().join("src/bindings.rs");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != expected {
        return Err(format!(
            "{} is stale (regenerated bindings differ at {}).\nFix: cargo run -p xtask -- bindings",
            path.display(),
            first_difference(&committed, expected)
        ));
    }
    let functions = expected.matches("pub fn kai_").count();
    let structs = expected.matches("pub struct kai_").count();
    let mut lines = vec![format!(
        "bindings fresh: {} matches bindgen over the pinned headers ({functions} functions, {structs} structs)",
        path.strip_prefix(root()).unwrap_or(&path).display()
    )];

    // Same stubs for every target: first Linux (the reference), then the others.
    let stubs = root().join("target/bindings-check/libc");
    write_stub_libc(&stubs)?;
    let prefix = prefix::symbol_prefix(&sys_version()?);
    let mut args = vec!["-ffreestanding".to_string(), format!("-isystem{}", stubs.display())];
    // libclang's own builtin headers (arm_neon.h), named explicitly: its
    // Darwin driver does not add them by itself without an SDK.
    if let Some(dir) = libclang_builtin_includes() {
        args.push(format!("-isystem{}", dir.display()));
    }
    let reference = kai_bindings::generate(kai, &prefix, kai_bindings::BINDINGS_TARGET, &args)
        .map_err(|e| format!("{} with stub C library headers: {e}", kai_bindings::BINDINGS_TARGET))?;
    let strip_header =
        |t: &str| t.lines().skip_while(|l| l.starts_with("//") || l.is_empty()).collect::<Vec<_>>().join("\n");
    if strip_header(&reference) != strip_header(expected) {
        return Err(format!(
            "the stub C library headers change the bindings ({}): the cross-target check would be meaningless",
            first_difference(&strip_header(expected), &strip_header(&reference))
        ));
    }
    for (rust, clang) in OTHER_TARGETS {
        let other = kai_bindings::generate(kai, &prefix, clang, &args).map_err(|e| format!("{rust}: {e}"))?;
        if strip_header(&other) != strip_header(&reference) {
            return Err(format!(
                "the bindings for {rust} (clang --target={clang}) differ from the committed ones at {}",
                first_difference(&strip_header(&reference), &strip_header(&other))
            ));
        }
        lines.push(format!("bindings for {rust} (clang --target={clang}): identical, layout tests included"));
    }
    Ok(lines)
}

/// The llvm tool `name` (`llvm-nm-19`, else `llvm-nm`), for the checks only.
fn llvm_tool(name: &str) -> Option<String> {
    [format!("{name}-19"), name.to_string()].into_iter().find(|t| crate::util::which(t).is_some())
}

/// Global symbols `nm` lists as defined in `file` (an object or archive).
fn defined_globals(nm: &str, file: &Path) -> Result<Vec<String>, String> {
    let out = std::process::Command::new(nm)
        .args(["-g", "--defined-only", "-P"])
        .arg(file)
        .output()
        .map_err(|e| format!("cannot run {nm}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{nm} {}: {}", file.display(), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| !s.ends_with(':'))
        .map(str::to_string)
        .collect())
}

/// The symbol prefix at work, checked where binutils exist (here, never in
/// the build):
/// - every global symbol the built `libkleidiai_rs.a` defines carries the
///   prefix;
/// - every upstream assembly file, assembled for macOS (Mach-O, where
///   upstream pastes `_##name`), defines only prefixed symbols.
pub fn check_symbols(archive: &Path) -> Result<Vec<String>, String> {
    let kai = kleidiai_root()?;
    let prefix = prefix::symbol_prefix(&sys_version()?);
    let nm = llvm_tool("llvm-nm").ok_or("no llvm-nm (scripts/setup.sh installs llvm-19)")?;
    let mut lines = Vec::new();

    let syms = defined_globals(&nm, archive)?;
    let bad: Vec<&String> = syms.iter().filter(|s| !s.starts_with(&prefix)).collect();
    if syms.is_empty() || !bad.is_empty() {
        return Err(format!(
            "{}: {} of {} defined global symbols lack the prefix {prefix}: {:?}",
            archive.display(),
            bad.len(),
            syms.len(),
            &bad[..bad.len().min(10)]
        ));
    }
    lines.push(format!("{} global symbols defined by libkleidiai_rs.a, every one prefixed {prefix}", syms.len()));

    let clang = llvm_tool("clang").ok_or("no clang (scripts/setup.sh installs clang-19)")?;
    let dir = root().join("target/bindings-check/apple");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let header = dir.join("kai_prefix.h");
    std::fs::write(&header, prefix::header(&prefix, &prefix::identifiers(&kai)?, true))
        .map_err(|e| format!("{}: {e}", header.display()))?;
    let mut sources = Vec::new();
    crate::files::walk(&kai.join("kai"), &mut sources);
    sources.retain(|p| p.extension().is_some_and(|e| e == "S"));
    sources.sort();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(src) = sources.get(i) else { break };
                    let obj = dir.join(format!("{i}.o"));
                    let out = std::process::Command::new(&clang)
                        .args(["--target=arm64-apple-macos11", "-march=armv8.2-a+fp16+bf16+dotprod+i8mm+sve+sve2"])
                        .arg("-include")
                        .arg(&header)
                        .arg("-I")
                        .arg(&kai)
                        .arg("-c")
                        .arg(src)
                        .arg("-o")
                        .arg(&obj)
                        .output();
                    let r = match out {
                        Ok(o) if o.status.success() => defined_globals(&nm, &obj),
                        Ok(o) => Err(format!("{}: {}", src.display(), String::from_utf8_lossy(&o.stderr))),
                        Err(e) => Err(format!("cannot run {clang}: {e}")),
                    };
                    results.lock().unwrap().push(r);
                }
            });
        }
    });
    let mut count = 0;
    for r in results.into_inner().unwrap() {
        for s in r? {
            if !s.starts_with(&format!("_{prefix}")) {
                return Err(format!("assembled for macOS, an upstream .S file defines {s}, without the prefix"));
            }
            count += 1;
        }
    }
    lines.push(format!(
        "{} upstream .S files assembled for arm64-apple-macos: {count} global symbols, every one prefixed _{prefix}",
        sources.len()
    ));
    Ok(lines)
}

/// The newest `libkleidiai_rs.a` a release build for `target` produced.
fn built_archive(target: &str) -> Result<PathBuf, String> {
    let build = root().join("target").join(target).join("release/build");
    std::fs::read_dir(&build)
        .map_err(|e| format!("{}: {e}", build.display()))?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("kleidiai-sys-"))
        .map(|e| e.path().join("out/libkleidiai_rs.a"))
        .filter(|p| p.is_file())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .ok_or_else(|| format!("no libkleidiai_rs.a under {}", build.display()))
}

/// The `bindgen` feature regenerates at build time what the committed file
/// holds: built with it (and `DOCS_RS`, so nothing compiles), the build
/// script's output must equal the committed file byte for byte.
fn check_bindgen_feature(target: &str) -> Result<String, String> {
    let dir = root().join("target/bindgen-feature");
    let mut c = crate::util::cargo();
    c.args(["check", "-q", "-p", "kleidiai-sys", "--features", "bindgen", "--target", target, "--target-dir"])
        .arg(&dir)
        .env("DOCS_RS", "1");
    crate::util::run_status(&mut c)?;
    let build = dir.join(target).join("debug/build");
    let generated = std::fs::read_dir(&build)
        .map_err(|e| format!("{}: {e}", build.display()))?
        .flatten()
        .map(|e| e.path().join("out/bindings.rs"))
        .filter(|p| p.is_file())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .ok_or("the bindgen feature wrote no bindings.rs")?;
    let committed = std::fs::read_to_string(sys_dir().join("src/bindings.rs")).unwrap_or_default();
    let text = std::fs::read_to_string(&generated).map_err(|e| format!("{}: {e}", generated.display()))?;
    if text != committed {
        return Err(format!(
            "the `bindgen` feature generates other bindings than the committed ones ({})",
            first_difference(&committed, &text)
        ));
    }
    Ok("the `bindgen` feature's build-time bindings equal the committed file byte for byte".into())
}

/// The test command's phase: every generated file fresh, the prefix at work.
/// Lines to print; error on the first failure.
pub fn check_all(target: &str) -> Result<Vec<String>, String> {
    let kai = kleidiai_root()?;
    let mut lines = vec![check_families(&kai)?];
    lines.extend(check_bindings(&kai, &expected_bindings(&kai)?)?);
    lines.push(check_bindgen_feature(target)?);
    lines.push(check_header(&expected_header()?)?);
    lines.extend(check_symbols(&built_archive(target)?)?);
    Ok(lines)
}

/// The C header as cbindgen generates it from `kleidiai-capi` and its
/// `cbindgen.toml`.
fn expected_header() -> Result<String, String> {
    let dir = root().join("kleidiai-capi");
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))
        .map_err(|e| format!("kleidiai-capi/cbindgen.toml: {e}"))?;
    let bindings = cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(config)
        .generate()
        .map_err(|e| format!("cbindgen over kleidiai-capi: {e}"))?;
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).map_err(|e| format!("cbindgen wrote invalid UTF-8: {e}"))
}

fn header_path() -> PathBuf {
    root().join("kleidiai-capi/include/kleidiai_rs.h")
}

/// `xtask header [--check]`.
pub fn header(args: &[String]) -> Result<bool, String> {
    let text = expected_header()?;
    if crate::util::check_flag(args, USAGE)? {
        println!("{}", check_header(&text)?);
    } else {
        let path = header_path();
        std::fs::write(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {} ({} lines)", path.display(), text.lines().count());
    }
    Ok(true)
}

fn check_header(expected: &str) -> Result<String, String> {
    let path = header_path();
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != expected {
        return Err(format!(
            "{} is stale (cbindgen over kleidiai-capi gives another header, at {}).\n\
             Fix: cargo run -p xtask -- header",
            path.display(),
            first_difference(&committed, expected)
        ));
    }
    Ok(format!(
        "C header fresh: kleidiai-capi/include/kleidiai_rs.h matches cbindgen over kleidiai-capi ({} functions)",
        expected
            .lines()
            .filter(|l| !l.starts_with("//") && !l.starts_with(" *") && l.contains("kairs_") && l.contains('('))
            .count()
    ))
}
