//! Compiling the selected groups: one `cc::Build` per upstream group with that
//! group's flags, all groups at once, then one static archive.

use crate::groups::Group;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A group and the files of it this build compiles.
pub struct Selected<'a> {
    pub group: &'a Group,
    pub files: Vec<String>,
}

/// Name of the static library (`lib<ARCHIVE>.a` in OUT_DIR): not plain
/// `kleidiai`, so a system libkleidiai on the search path is never picked up.
pub const ARCHIVE: &str = "kleidiai_rs";

/// Upstream's file that GCC 12 crashes on (internal compiler error) when the
/// tree vectoriser runs at -O3; the flag is harmless elsewhere.
const GCC_ICE_FILE: &str = "kai_lhs_quant_pack_qai8dxp_bf16_neon.c";

/// Checks the C compiler for the target exists and can build every group's
/// `-march`, so a missing cross toolchain is one clear message instead of
/// hundreds of compiler errors.
pub fn check_toolchain(out_dir: &Path, target: &str) -> Result<(), String> {
    let compiler = cc::Build::new()
        .try_get_compiler()
        .map_err(|e| format!("no C compiler for {target}: {e}\n{}", install_hint(target)))?;
    let path = compiler.path().to_path_buf();
    let version = Command::new(&path).arg("--version").output();
    match version {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            return Err(format!(
                "the C compiler `{}` for {target} does not run: {}\n{}",
                path.display(),
                String::from_utf8_lossy(&out.stderr).trim(),
                install_hint(target)
            ));
        }
        Err(e) => {
            return Err(format!(
                "the C compiler `{}` for {target} was not found ({e}).\n{}",
                path.display(),
                install_hint(target)
            ));
        }
    }
    // Capability probe: the most demanding -march upstream uses.
    let probe = out_dir.join("kai_probe.c");
    std::fs::write(&probe, "int kai_probe(int x) { return x + 1; }\n")
        .map_err(|e| format!("cannot write {}: {e}", probe.display()))?;
    let mut b = cc::Build::new();
    b.file(&probe).flag("-march=armv8.2-a+sve+sve2").warnings(false).cargo_metadata(false);
    b.try_compile_intermediates().map_err(|e| {
        format!(
            "the C compiler `{}` cannot build for {target} with -march=armv8.2-a+sve+sve2: {e}\n{}",
            path.display(),
            install_hint(target)
        )
    })?;
    Ok(())
}

fn install_hint(target: &str) -> String {
    let var = format!("CC_{}", target.replace('-', "_"));
    if target.contains("android") {
        format!(
            "Fix: install the Android NDK and point {var} at its clang              (`<ndk>/toolchains/llvm/prebuilt/<host>/bin/aarch64-linux-android<api>-clang`; cargo-ndk does this)."
        )
    } else if target.contains("apple") {
        format!("Fix: install Xcode's command line tools (`xcode-select --install`), or point {var} at a clang.")
    } else if target.contains("linux") {
        "Fix: install the aarch64 cross compiler and C library (Debian/Ubuntu: \
         `apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross`, which the project's \
         `scripts/setup.sh` does), or use clang: CC_aarch64_unknown_linux_gnu=clang \
         CFLAGS_aarch64_unknown_linux_gnu=--target=aarch64-linux-gnu."
            .to_string()
    } else {
        format!("Fix: install a C compiler for {target} and point {var} at it.")
    }
}

/// What [`compile`] did.
pub struct Stats {
    /// Objects archived.
    pub objects: usize,
    /// Wall seconds of compiling and archiving.
    pub seconds: f64,
    /// Whether the C files were compiled with a precompiled header.
    pub pch: bool,
}

/// Compiles every selected file with its group's flags, `prefix_header`
/// included first, on a pool of `NUM_JOBS` workers (one cargo build-script
/// job owns all cores it was given), and archives the objects as
/// `lib<ARCHIVE>.a`.
pub fn compile(
    root: &Path,
    out_dir: &Path,
    selected: &[Selected<'_>],
    prefix_header: &Path,
    ndebug: bool,
) -> Result<Stats, String> {
    let started = std::time::Instant::now();
    // kai_get_version is a non-static `inline` with no external definition in
    // upstream; this translation unit provides one (C99 6.7.4).
    let shim = out_dir.join("kai_version_shim.c");
    std::fs::write(&shim, "#include \"kai/kai_common.h\"\nextern const char* kai_get_version(void);\n")
        .map_err(|e| format!("cannot write {}: {e}", shim.display()))?;
    let obj_dir = out_dir.join("obj");
    std::fs::create_dir_all(&obj_dir).map_err(|e| format!("cannot create {}: {e}", obj_dir.display()))?;

    // (source, object, compiler command with the group's flags)
    let mut jobs: Vec<(PathBuf, PathBuf, cc::Tool)> = Vec::new();
    for sel in selected {
        let tool = base_build(root, sel.group, prefix_header, ndebug, false)
            .try_get_compiler()
            .map_err(|e| format!("C compiler for group {}: {e}", sel.group.name))?;
        let ice_tool = base_build(root, sel.group, prefix_header, ndebug, true)
            .try_get_compiler()
            .map_err(|e| format!("C compiler for group {}: {e}", sel.group.name))?;
        let mut sources: Vec<PathBuf> = sel.files.iter().map(|f| root.join(f)).collect();
        if sel.group.name == "NEON" {
            sources.push(shim.clone());
        }
        for src in sources {
            let rel = src.strip_prefix(root).unwrap_or(&src).to_string_lossy().replace(['/', '\\'], "_");
            let obj = obj_dir.join(format!("{rel}.o"));
            let t = if src.to_string_lossy().ends_with(GCC_ICE_FILE) { ice_tool.clone() } else { tool.clone() };
            jobs.push((src, obj, t));
        }
    }

    let workers = std::env::var("NUM_JOBS").ok().and_then(|n| n.parse().ok()).unwrap_or(1usize).max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((src, obj, tool)) = jobs.get(i) else {
                        break;
                    };
                    let mut cmd = tool.to_command();
                    cmd.arg("-c").arg(src).arg("-o").arg(obj);
                    match cmd.output() {
                        Ok(out) if out.status.success() => {}
                        Ok(out) => failures.lock().unwrap().push(format!(
                            "{}:\n{}",
                            src.display(),
                            String::from_utf8_lossy(&out.stderr)
                        )),
                        Err(e) => failures.lock().unwrap().push(format!("{}: cannot run compiler: {e}", src.display())),
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    if !failures.is_empty() {
        return Err(format!("{} upstream file(s) failed to compile:\n{}", failures.len(), failures.join("\n")));
    }
    let mut objects: Vec<PathBuf> = jobs.into_iter().map(|j| j.1).collect();
    objects.sort();
    let count = objects.len();
    let mut archive = cc::Build::new();
    archive.objects(&objects);
    archive.try_compile(ARCHIVE).map_err(|e| format!("archiving lib{ARCHIVE}.a failed: {e}"))?;
    Ok(Stats { objects: count, seconds: started.elapsed().as_secs_f64(), pch: false })
}

fn base_build(root: &Path, group: &Group, prefix_header: &Path, ndebug: bool, no_vectorize: bool) -> cc::Build {
    let mut b = cc::Build::new();
    // The prefix header renames every KleidiAI identifier (see prefix.rs);
    // first, so it sees every use.
    b.flag("-include").flag(prefix_header);
    b.include(root)
        .std("c99")
        .warnings(false)
        .extra_warnings(false)
        // Always optimise: the packing routines are plain C, and a debug build
        // of the user's crate should not make them 10x slower.
        .opt_level(3)
        // No debug info for upstream objects: it only slows the build.
        .debug(false)
        .flag(format!("-march={}", group.march))
        // Upstream: the micro-kernels do not support link-time optimisation.
        .flag("-fno-lto")
        // Keep our copy's symbols out of any shared object's dynamic table.
        .flag("-fvisibility=hidden")
        .define("KLEIDIAI_ERROR_TRAP", "0")
        .define("KLEIDIAI_HAS_BUILTIN_ASSUME0", "0")
        .define("KLEIDIAI_HAS_BUILTIN_TRAP", "0")
        .define("KLEIDIAI_HAS_BUILTIN_UNREACHABLE", "1")
        .cargo_metadata(false);
    for f in group.extra_flags {
        b.flag(*f);
    }
    if ndebug {
        b.define("NDEBUG", None);
    }
    if no_vectorize {
        b.flag("-fno-tree-vectorize");
    }
    b
}
