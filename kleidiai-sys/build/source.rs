//! Finding and checking the KleidiAI source tree.

use std::path::{Path, PathBuf};

/// The upstream release these bindings and the safe crate are written against.
pub const UPSTREAM_VERSION: &str = "1.30.0";
/// The commit of tag v1.30.0.
pub const UPSTREAM_COMMIT: &str = "74b1a12d3620c89dae4766de640e064952000f4d";
const UPSTREAM_URL: &str = "https://github.com/ARM-software/kleidiai";

const HOW_TO_GET: &str = "Fix: get the sources one of two ways:\n  \
     * in a git checkout of kleidiai-rs: `git submodule update --init vendor/kleidiai`\n  \
     * anywhere: `git clone --branch v1.30.0 https://github.com/ARM-software/kleidiai` and set\n    \
     KLEIDIAI_SOURCE_DIR to that directory.\n\
     (A kleidiai-sys crate downloaded from crates.io carries the sources itself: unset KLEIDIAI_SOURCE_DIR.)";

/// Locates the source tree: `KLEIDIAI_SOURCE_DIR`, else the bundled `kleidiai/`
/// (a symlink to the workspace's submodule in a git checkout, a real directory
/// in the packaged crate). Checks it holds KleidiAI at [`UPSTREAM_VERSION`].
pub fn locate(manifest_dir: &Path) -> Result<PathBuf, String> {
    let (root, origin) = match std::env::var_os("KLEIDIAI_SOURCE_DIR") {
        Some(dir) if !dir.is_empty() => (PathBuf::from(dir), "KLEIDIAI_SOURCE_DIR"),
        _ => (manifest_dir.join("kleidiai"), "the bundled submodule path"),
    };
    let cmake = root.join("CMakeLists.txt");
    let common = root.join("kai").join("kai_common.h");
    if !cmake.is_file() || !common.is_file() {
        return Err(format!(
            "KleidiAI sources not found at {} ({origin}): expected CMakeLists.txt and kai/kai_common.h there.\n{HOW_TO_GET}",
            root.display()
        ));
    }
    let text = std::fs::read_to_string(&cmake).map_err(|e| format!("cannot read {}: {e}", cmake.display()))?;
    if !text.contains("project(KleidiAI") {
        return Err(format!(
            "{} is not KleidiAI's CMakeLists.txt (no `project(KleidiAI`); {origin} points at the wrong tree.\n{HOW_TO_GET}",
            cmake.display()
        ));
    }
    let version = project_version(&text).unwrap_or_else(|| "unknown".into());
    if version != UPSTREAM_VERSION {
        return Err(format!(
            "KleidiAI at {} ({origin}) is version {version}, but kleidiai-sys is written against \
             {UPSTREAM_VERSION} ({UPSTREAM_URL} tag v{UPSTREAM_VERSION}, commit \
             {UPSTREAM_COMMIT}).\nFix: in a git checkout of kleidiai-rs, `git submodule update --init vendor/kleidiai` \
             (resets the submodule to the pinned commit); with KLEIDIAI_SOURCE_DIR, check out tag v{UPSTREAM_VERSION} \
             there, or unset it to use the sources the crate carries.",
            root.display()
        ));
    }
    // A git checkout can say `VERSION 1.30.0` on commits after the tag
    // (upstream bumps it at release time): the commit is the real identity.
    if let Some(head) = git_head(&root) {
        if head != UPSTREAM_COMMIT {
            let msg = format!(
                "KleidiAI at {} ({origin}) is at commit {head}, not v{UPSTREAM_VERSION} ({UPSTREAM_COMMIT}).\n  \
                 Fix: in a git checkout of kleidiai-rs, `git submodule update --init vendor/kleidiai`.",
                root.display()
            );
            if origin == "KLEIDIAI_SOURCE_DIR" {
                println!("cargo:warning={}", msg.replace('\n', " "));
            } else {
                return Err(msg);
            }
        }
    }
    Ok(root)
}

/// HEAD of `dir` when it is the top of a git work tree (a submodule
/// checkout), else None (a packaged crate, or no git installed).
fn git_head(dir: &Path) -> Option<String> {
    if !dir.join(".git").exists() {
        return None;
    }
    let out = std::process::Command::new("git").arg("-C").arg(dir).args(["rev-parse", "HEAD"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The `VERSION x.y.z` inside `project(KleidiAI ...)`.
fn project_version(cmake: &str) -> Option<String> {
    let start = cmake.find("project(KleidiAI")?;
    let block = &cmake[start..start + cmake[start..].find(')')?];
    let mut words = block.split_whitespace();
    words.find(|w| *w == "VERSION")?;
    words.next().map(str::to_string)
}
