//! Build script of `kleidiai-sys`: compiles the pinned KleidiAI sources for
//! aarch64 targets, generates raw bindings and a manifest of what was built.
//!
//! On any other architecture nothing is compiled and the manifest is empty, so
//! the workspace still builds and tests on x86 hosts without a cross toolchain
//! or libclang.

mod bindings;
mod compile;
mod groups;
mod manifest;
mod prefix;
mod source;

use std::path::PathBuf;

fn main() {
    if let Err(msg) = run() {
        // One clear message instead of a backtrace.
        eprintln!("\nerror: kleidiai-sys: {msg}\n");
        std::process::exit(1);
    }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

fn feature_on(name: &str) -> bool {
    std::env::var_os(format!("CARGO_FEATURE_{}", name.to_uppercase())).is_some()
}

fn run() -> Result<(), String> {
    println!("cargo:rerun-if-changed=build");
    println!("cargo:rerun-if-env-changed=KLEIDIAI_SOURCE_DIR");
    println!("cargo:rerun-if-env-changed=KLEIDIAI_NO_SYMBOL_PREFIX");
    println!("cargo:rustc-check-cfg=cfg(kai_bindings)");

    let out_dir = PathBuf::from(env("OUT_DIR"));
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let target = env("TARGET");
    let arch = env("CARGO_CFG_TARGET_ARCH");
    let target_env = env("CARGO_CFG_TARGET_ENV");

    if arch != "aarch64" {
        // Nothing to compile, nothing to link: the safe crate falls back to
        // its portable reference path on this target.
        manifest::generate(&manifest_dir, &out_dir, &[], false)?;
        let mut m = std::fs::read_to_string(out_dir.join("manifest.rs")).map_err(|e| e.to_string())?;
        m.push_str("/// Prefix of every KleidiAI symbol (nothing is built on this target).\npub const SYMBOL_PREFIX: &str = \"\";\n");
        std::fs::write(out_dir.join("manifest.rs"), m).map_err(|e| e.to_string())?;
        println!("cargo:groups=");
        println!("cargo:tiers=");
        return Ok(());
    }
    if target_env == "msvc" {
        return Err(format!(
            "target {target}: MSVC is not supported (upstream builds only its assembly for MSVC, \
             with armasm); use the GNU/clang toolchain (aarch64-pc-windows-gnullvm) instead"
        ));
    }

    let root = source::locate(&manifest_dir)?;
    println!("cargo:rerun-if-changed={}", root.join("CMakeLists.txt").display());
    println!("cargo:rerun-if-changed={}", root.join("kai").display());

    let cmake =
        std::fs::read_to_string(root.join("CMakeLists.txt")).map_err(|e| format!("cannot read CMakeLists.txt: {e}"))?;
    let lists = groups::parse_cmake_lists(&cmake)?;

    // Every source file upstream compiles must exist, and every file under
    // kai/ must belong to exactly one group: a new or moved file in a future
    // release is a build error here, not an undefined symbol at link time.
    let mut owner = std::collections::BTreeMap::new();
    for g in groups::GROUPS {
        for f in lists.get(&format!("KLEIDIAI_FILES_{}", g.name)).into_iter().flatten() {
            if !root.join(f).is_file() {
                return Err(format!("upstream lists {f} in group {} but the file is missing", g.name));
            }
            if let Some(prev) = owner.insert(f.clone(), g.name) {
                return Err(format!("{f} is listed in groups {prev} and {}", g.name));
            }
        }
    }
    let mut on_disk = Vec::new();
    bindings::walk(&root.join("kai"), &mut on_disk);
    for p in on_disk {
        let rel = p.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
        if (rel.ends_with(".c") || rel.ends_with(".S")) && !owner.contains_key(&rel) {
            return Err(format!("{rel} is in no upstream group this build script knows"));
        }
    }

    let selected: Vec<compile::Selected<'_>> = groups::GROUPS
        .iter()
        .filter(|g| g.cargo_features.iter().all(|f| feature_on(f)))
        .map(|g| {
            let mut files = lists.get(&format!("KLEIDIAI_FILES_{}", g.name)).cloned().unwrap_or_default();
            files.sort();
            compile::Selected { group: g, files }
        })
        .filter(|s| !s.files.is_empty())
        .collect();

    let t0 = std::time::Instant::now();
    compile::check_toolchain(&out_dir, &target)?;
    let check_secs = t0.elapsed().as_secs_f64();

    let prefix = if env("KLEIDIAI_NO_SYMBOL_PREFIX") == "1" {
        println!("cargo:warning=KLEIDIAI_NO_SYMBOL_PREFIX=1: KleidiAI symbols are not prefixed");
        None
    } else {
        Some(prefix::prefix())
    };
    println!("cargo:symbol_prefix={}", prefix.clone().unwrap_or_default());

    // bindgen reads only headers and the prefix, not the objects: it runs on
    // its own thread while the C compiles (it fills what the compile's
    // last, single-file stretch leaves idle).
    let headers = bindings::public_headers(&root);
    let (objects, compile_secs, bindings_secs) = std::thread::scope(|s| {
        let bindgen = s.spawn(|| {
            let t = std::time::Instant::now();
            bindings::generate(&root, &out_dir, &headers, prefix.clone()).map(|()| t.elapsed().as_secs_f64())
        });
        let started = std::time::Instant::now();
        let objects = compile::compile(&root, &out_dir, &selected, feature_on("ndebug"));
        let compile_secs = started.elapsed().as_secs_f64();
        let bindings = bindgen.join().map_err(|_| "bindgen panicked".to_string()).and_then(|r| r);
        Ok::<_, String>((objects?, compile_secs, bindings?))
    })?;
    println!("cargo:rustc-cfg=kai_bindings");

    let t0 = std::time::Instant::now();
    if prefix.is_some() {
        let archive = out_dir.join(format!("lib{}.a", compile::ARCHIVE));
        prefix::prefix_archive(&archive, &out_dir)?;
    }
    let prefix_secs = t0.elapsed().as_secs_f64();

    let summary = manifest::generate(&root, &out_dir, &selected, true)?;
    let mut m = std::fs::read_to_string(out_dir.join("manifest.rs")).map_err(|e| e.to_string())?;
    m.push_str(&format!(
        "/// Prefix of every KleidiAI symbol in this build's archive (empty: not prefixed).\npub const SYMBOL_PREFIX: &str = {:?};\n",
        prefix.unwrap_or_default()
    ));
    std::fs::write(out_dir.join("manifest.rs"), m).map_err(|e| e.to_string())?;
    let group_names: Vec<&str> = selected.iter().map(|s| s.group.name).collect();
    let mut tiers: Vec<&str> = selected.iter().flat_map(|s| s.group.cpu_features.iter().copied()).collect();
    tiers.sort();
    tiers.dedup();
    // Read by dependents' build scripts as DEP_KLEIDIAI_GROUPS / DEP_KLEIDIAI_TIERS.
    println!("cargo:groups={}", group_names.join(","));
    println!("cargo:tiers={}", tiers.join(","));
    println!("cargo:root={}", root.display());
    std::fs::write(
        out_dir.join("build-report.txt"),
        format!(
            "objects={objects}\ncompute_ukernels={}\npacking_ukernels={}\ncompile_seconds={compile_secs:.1}\n\
             toolchain_check_seconds={check_secs:.1}\nbindgen_seconds={bindings_secs:.1}\nprefix_seconds={prefix_secs:.1}\ngroups={}\n",
            summary.compute,
            summary.packing,
            group_names.join(",")
        ),
    )
    .map_err(|e| format!("cannot write build-report.txt: {e}"))?;
    Ok(())
}
