//! Compiling the selected groups: one `cc::Build` per upstream group with that
//! group's flags, all groups at once, then one static archive.

use crate::groups::Group;
use std::ffi::OsString;
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
    /// Precompiled headers built and used (0: every C file parsed
    /// `kai_common.h` itself).
    pub pch: usize,
    /// Seconds of compiler runs (summed over workers): C, assembly,
    /// precompiled headers.
    pub job_seconds: [f64; 3],
    /// The five slowest files and their seconds.
    pub slowest: Vec<(String, f64)>,
}

/// One compiler run: `tool` plus `extra` arguments, `-c src -o obj`.
struct Job {
    src: PathBuf,
    obj: PathBuf,
    tool: cc::Tool,
    extra: Vec<OsString>,
    /// The precompiled header this C file waits for, if any.
    pch: Option<usize>,
}

/// A precompiled `kai_pch.h` for one distinct C command line.
struct Pch {
    header: PathBuf,
    output: PathBuf,
    tool: cc::Tool,
}

/// Fewer C files than this under one command line do not repay building a
/// precompiled header (about two files' parse time).
const PCH_MIN_FILES: usize = 3;

/// Compiles every selected file with its group's flags on a pool of
/// `NUM_JOBS` workers (one cargo build-script job owns all cores it was
/// given), and archives the objects as `lib<ARCHIVE>.a`.
///
/// Every file gets a prefix header (`prefix_headers`: for C, for assembly)
/// first: assembly directly, C through `kai_pch.h`, which includes it and
/// then `kai/kai_common.h` (every upstream
/// C file includes that header, and with it `arm_neon.h`: parsing it is
/// about two thirds of a packing routine's compile time). For GCC and clang,
/// `kai_pch.h` is precompiled once per distinct command line (a group's
/// flags); the compilers pick `kai_pch.h.gch` / `.pch` up by themselves and
/// generate the same code as without it. If precompiling fails the header
/// is simply parsed as text (as it is with `KLEIDIAI_NO_PCH=1`). The
/// precompiled files are deleted at the end.
pub fn compile(
    root: &Path,
    out_dir: &Path,
    selected: &[Selected<'_>],
    prefix_headers: &[PathBuf; 2],
    ndebug: bool,
) -> Result<Stats, String> {
    let [prefix_c, prefix_asm] = prefix_headers;
    let started = std::time::Instant::now();
    // kai_get_version is a non-static `inline` with no external definition in
    // upstream; this translation unit provides one (C99 6.7.4).
    let shim = out_dir.join("kai_version_shim.c");
    std::fs::write(&shim, "#include \"kai/kai_common.h\"\nextern const char* kai_get_version(void);\n")
        .map_err(|e| format!("cannot write {}: {e}", shim.display()))?;
    let obj_dir = out_dir.join("obj");
    let pch_dir = out_dir.join("pch");
    let _ = std::fs::remove_dir_all(&pch_dir);
    for d in [&obj_dir, &pch_dir] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    let include = |h: &Path| vec![OsString::from("-include"), h.as_os_str().to_owned()];
    // An escape hatch for a compiler that mishandles precompiled headers.
    let no_pch = std::env::var_os("KLEIDIAI_NO_PCH").is_some_and(|v| v == "1");

    // C command lines (a group's tool, printed) -> their C files.
    let mut lines: Vec<(String, cc::Tool, Vec<PathBuf>)> = Vec::new();
    let mut asm = Vec::new();
    for sel in selected {
        let tool = |no_vectorize| {
            base_build(root, sel.group, ndebug, no_vectorize)
                .try_get_compiler()
                .map_err(|e| format!("C compiler for group {}: {e}", sel.group.name))
        };
        let (plain, ice) = (tool(false)?, tool(true)?);
        let mut sources: Vec<PathBuf> = sel.files.iter().map(|f| root.join(f)).collect();
        if sel.group.name == "NEON" {
            sources.push(shim.clone());
        }
        for src in sources {
            if src.extension().is_some_and(|e| e == "S") {
                asm.push((src, plain.clone()));
                continue;
            }
            let t = if src.to_string_lossy().ends_with(GCC_ICE_FILE) { ice.clone() } else { plain.clone() };
            let key = format!("{:?}", t.to_command());
            match lines.iter_mut().find(|l| l.0 == key) {
                Some(l) => l.2.push(src),
                None => lines.push((key, t, vec![src])),
            }
        }
    }

    let object = |src: &Path| {
        // Upstream files by their path under the tree; the shim by its name.
        let rel = match src.strip_prefix(root) {
            Ok(rel) => rel.to_string_lossy().replace(['/', '\\'], "_"),
            Err(_) => src.file_name().unwrap_or_default().to_string_lossy().into_owned(),
        };
        obj_dir.join(format!("{rel}.o"))
    };
    let mut pchs = Vec::new();
    let mut c_jobs = Vec::new();
    for (i, (_, tool, files)) in lines.into_iter().enumerate() {
        let dir = pch_dir.join(i.to_string());
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let header = dir.join("kai_pch.h");
        let text = format!("#include \"{}\"\n#include \"kai/kai_common.h\"\n", prefix_c.display());
        std::fs::write(&header, text).map_err(|e| format!("cannot write {}: {e}", header.display()))?;
        let ext = if tool.is_like_clang() {
            Some("pch")
        } else if tool.is_like_gnu() {
            Some("gch")
        } else {
            None
        };
        let pch = match ext {
            Some(ext) if files.len() >= PCH_MIN_FILES && !no_pch => {
                pchs.push(Pch {
                    header: header.clone(),
                    output: dir.join(format!("kai_pch.h.{ext}")),
                    tool: tool.clone(),
                });
                Some(pchs.len() - 1)
            }
            _ => None,
        };
        for src in files {
            c_jobs.push(Job { obj: object(&src), src, tool: tool.clone(), extra: include(&header), pch });
        }
    }
    // Longest first, so no big kernel starts last; assembly (quick) fills
    // the time the precompiled headers take.
    let size = |j: &Job| std::fs::metadata(&j.src).map(|m| m.len()).unwrap_or(0);
    c_jobs.sort_by_key(|j| std::cmp::Reverse(size(j)));
    let mut jobs: Vec<Job> = asm
        .into_iter()
        .map(|(src, tool)| Job { obj: object(&src), src, tool, extra: include(prefix_asm), pch: None })
        .collect();
    jobs.extend(c_jobs);

    // Work items: first every precompiled header, then the objects.
    let workers = std::env::var("NUM_JOBS").ok().and_then(|n| n.parse().ok()).unwrap_or(1usize).max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    // None: still being built; Some(built).
    let pch_state = std::sync::Mutex::new(vec![None::<bool>; pchs.len()]);
    let pch_done = std::sync::Condvar::new();
    // (job index, seconds): PCH jobs first, as in the work items.
    let times = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let t = std::time::Instant::now();
                    if let Some(p) = pchs.get(i) {
                        let mut cmd = p.tool.to_command();
                        cmd.arg("-x").arg("c-header").arg(&p.header).arg("-o").arg(&p.output);
                        let built = cmd.output().is_ok_and(|o| o.status.success());
                        if !built {
                            // Parsed as text instead; never a half-written one.
                            let _ = std::fs::remove_file(&p.output);
                        }
                        pch_state.lock().unwrap()[i] = Some(built);
                        pch_done.notify_all();
                        times.lock().unwrap().push((i, t.elapsed().as_secs_f64()));
                        continue;
                    }
                    let Some(job) = jobs.get(i - pchs.len()) else {
                        break;
                    };
                    if let Some(p) = job.pch {
                        let mut state = pch_state.lock().unwrap();
                        while state[p].is_none() {
                            state = pch_done.wait(state).unwrap();
                        }
                    }
                    let t = std::time::Instant::now();
                    let mut cmd = job.tool.to_command();
                    cmd.args(&job.extra).arg("-c").arg(&job.src).arg("-o").arg(&job.obj);
                    match cmd.output() {
                        Ok(out) if out.status.success() => {}
                        Ok(out) => failures.lock().unwrap().push(format!(
                            "{}:\n{}",
                            job.src.display(),
                            String::from_utf8_lossy(&out.stderr)
                        )),
                        Err(e) => {
                            failures.lock().unwrap().push(format!("{}: cannot run compiler: {e}", job.src.display()))
                        }
                    }
                    times.lock().unwrap().push((i, t.elapsed().as_secs_f64()));
                }
            });
        }
    });
    let built = pch_state.into_inner().unwrap().iter().filter(|b| **b == Some(true)).count();
    let mut job_seconds = [0.0; 3];
    let mut slowest = Vec::new();
    for (i, secs) in times.into_inner().unwrap() {
        match i.checked_sub(pchs.len()).and_then(|j| jobs.get(j)) {
            None => job_seconds[2] += secs,
            Some(job) => {
                job_seconds[if job.src.extension().is_some_and(|e| e == "S") { 1 } else { 0 }] += secs;
                let name = job.src.file_name().unwrap_or_default().to_string_lossy().into_owned();
                slowest.push((name, secs));
            }
        }
    }
    slowest.sort_by(|a, b| b.1.total_cmp(&a.1));
    slowest.truncate(5);
    // Tens of MB each with GCC; only this build needed them.
    let _ = std::fs::remove_dir_all(&pch_dir);
    let failures = failures.into_inner().unwrap();
    if !failures.is_empty() {
        return Err(format!("{} upstream file(s) failed to compile:\n{}", failures.len(), failures.join("\n")));
    }
    let mut objects: Vec<PathBuf> = jobs.into_iter().map(|j| j.obj).collect();
    objects.sort();
    let count = objects.len();
    let mut archive = cc::Build::new();
    archive.objects(&objects);
    archive.try_compile(ARCHIVE).map_err(|e| format!("archiving lib{ARCHIVE}.a failed: {e}"))?;
    Ok(Stats { objects: count, seconds: started.elapsed().as_secs_f64(), pch: built, job_seconds, slowest })
}

fn base_build(root: &Path, group: &Group, ndebug: bool, no_vectorize: bool) -> cc::Build {
    let mut b = cc::Build::new();
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
