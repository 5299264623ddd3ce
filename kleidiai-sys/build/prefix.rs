//! Symbol prefixing: every global symbol of our KleidiAI copy is renamed
//! `<prefix>kai_...` in the archive (objcopy --redefine-syms), and the Rust
//! bindings link to the prefixed names. A second KleidiAI in the same
//! process (ggml's, ONNX Runtime's) then cannot clash with ours, and two
//! versions of this crate cannot clash with each other.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `kairs_<major>_<minor>_<patch>_`, from this crate's version.
pub fn prefix() -> String {
    let v = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let core = v.split('+').next().unwrap_or("0.0.0").replace(['.', '-'], "_");
    format!("kairs_{core}_")
}

/// The binutils tool `tool` ("nm" / "objcopy") that matches the archiver cc
/// uses for this target (`aarch64-linux-gnu-ar` -> `aarch64-linux-gnu-objcopy`,
/// `llvm-ar-19` -> `llvm-objcopy-19`), else `llvm-<tool>`, else `<tool>`.
fn find_tool(tool: &str) -> Option<PathBuf> {
    let ar = cc::Build::new().try_get_archiver().ok().map(|c| c.get_program().to_string_lossy().into_owned());
    let mut candidates = Vec::new();
    if let Some(ar) = ar {
        let (dir, file) = match ar.rfind('/') {
            Some(i) => (ar[..=i].to_string(), ar[i + 1..].to_string()),
            None => (String::new(), ar.clone()),
        };
        if let Some(pos) = file.rfind("ar") {
            candidates.push(format!("{dir}{}{tool}{}", &file[..pos], &file[pos + 2..]));
        }
    }
    candidates.push(format!("llvm-{tool}"));
    candidates.push(tool.to_string());
    candidates
        .into_iter()
        .map(PathBuf::from)
        .find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
}

/// Renames every defined global `kai_*` symbol of `archive` in place.
pub fn prefix_archive(archive: &Path, out_dir: &Path) -> Result<usize, String> {
    let hint = "Fix: install binutils for the target (Debian: binutils-aarch64-linux-gnu, which \
                gcc-aarch64-linux-gnu brings) or LLVM (llvm-objcopy, llvm-nm); or set \
                KLEIDIAI_NO_SYMBOL_PREFIX=1 to link unprefixed symbols (a second KleidiAI in the \
                process would then clash).";
    let nm = find_tool("nm").ok_or_else(|| format!("no `nm` for the target.\n{hint}"))?;
    let objcopy = find_tool("objcopy").ok_or_else(|| format!("no `objcopy` for the target.\n{hint}"))?;
    let out = Command::new(&nm)
        .args(["-g", "--defined-only", "-P"])
        .arg(archive)
        .output()
        .map_err(|e| format!("running {}: {e}", nm.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed: {}", nm.display(), String::from_utf8_lossy(&out.stderr)));
    }
    let prefix = prefix();
    let mut map = String::new();
    let mut seen = std::collections::BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(sym) = line.split_whitespace().next() else { continue };
        // Mach-O symbols carry a leading underscore.
        let (lead, name) = sym.strip_prefix('_').filter(|s| s.starts_with("kai_")).map_or(("", sym), |s| ("_", s));
        if name.starts_with("kai_") && seen.insert(sym.to_string()) {
            map.push_str(&format!("{lead}{name} {lead}{prefix}{name}\n"));
        }
    }
    if seen.is_empty() {
        return Err(format!("{} found no kai_ symbols in {}", nm.display(), archive.display()));
    }
    let map_path = out_dir.join("symbol-prefix.map");
    std::fs::write(&map_path, map).map_err(|e| format!("cannot write {}: {e}", map_path.display()))?;
    let st = Command::new(&objcopy)
        .arg(format!("--redefine-syms={}", map_path.display()))
        .arg(archive)
        .output()
        .map_err(|e| format!("running {}: {e}", objcopy.display()))?;
    if !st.status.success() {
        return Err(format!("{} failed: {}", objcopy.display(), String::from_utf8_lossy(&st.stderr)));
    }
    Ok(seen.len())
}

/// bindgen callback: link every `kai_*` item to its prefixed symbol.
#[derive(Debug)]
pub struct LinkNames {
    pub prefix: Option<String>,
}

impl bindgen::callbacks::ParseCallbacks for LinkNames {
    fn generated_link_name_override(&self, item: bindgen::callbacks::ItemInfo<'_>) -> Option<String> {
        let p = self.prefix.as_ref()?;
        item.name.starts_with("kai_").then(|| format!("{p}{}", item.name))
    }
}
