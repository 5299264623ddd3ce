//! Upstream's source groups: which files each `KLEIDIAI_FILES_<GROUP>` list of
//! `CMakeLists.txt` names, and the flags and CPU features that group needs.
//!
//! The file lists are read from upstream's own `CMakeLists.txt` at build time,
//! so this crate never carries a second copy of them that could drift.

use std::collections::BTreeMap;

/// One upstream group and what compiling and running its files needs.
pub struct Group {
    /// Suffix of the CMake variable (`KLEIDIAI_FILES_<name>`).
    pub name: &'static str,
    /// `-march` value (upstream's, section "Selectively enable architecture features").
    pub march: &'static str,
    /// Further compiler flags upstream passes for this group.
    pub extra_flags: &'static [&'static str],
    /// Cargo features of this crate that must all be on to build the group.
    pub cargo_features: &'static [&'static str],
    /// CPU features a micro-kernel of this group needs at run time.
    pub cpu_features: &'static [&'static str],
}

const NO_VEC: &[&str] = &["-fno-tree-vectorize", "-fno-tree-slp-vectorize"];

/// Every group upstream adds to the library for non-MSVC toolchains, in its order.
pub const GROUPS: &[Group] = &[
    g("SCALAR", "armv8-a", &[], &[], &["neon"]),
    g("NEON", "armv8-a", &[], &[], &["neon"]),
    g("NEON_FP16", "armv8.2-a+fp16", &[], &["fp16"], &["neon", "fp16"]),
    g("NEON_FP16_DOTPROD", "armv8.2-a+fp16+dotprod", &[], &["fp16", "dotprod"], &["neon", "fp16", "dotprod"]),
    g("NEON_FP16_I8MM", "armv8.2-a+fp16+i8mm", &[], &["fp16", "i8mm"], &["neon", "fp16", "i8mm"]),
    g("NEON_BF16", "armv8.2-a+bf16", &[], &["bf16"], &["neon", "bf16"]),
    g("NEON_BF16_DOTPROD", "armv8.2-a+bf16+dotprod", &[], &["bf16", "dotprod"], &["neon", "bf16", "dotprod"]),
    g("NEON_BF16_I8MM", "armv8.2-a+bf16+i8mm", &[], &["bf16", "i8mm"], &["neon", "bf16", "i8mm"]),
    g("NEON_FP16_BF16", "armv8.2-a+bf16+fp16", &[], &["fp16", "bf16"], &["neon", "fp16", "bf16"]),
    g("NEON_DOTPROD", "armv8.2-a+dotprod", &[], &["dotprod"], &["neon", "dotprod"]),
    g("NEON_I8MM", "armv8.2-a+i8mm", &[], &["i8mm"], &["neon", "i8mm"]),
    g("SVE", "armv8.2-a+sve", &[], &["sve"], &["sve"]),
    g("SVE_DOTPROD", "armv8.2-a+sve+dotprod", &[], &["sve", "dotprod"], &["sve", "dotprod"]),
    g("SVE_I8MM", "armv8.2-a+sve+i8mm", &[], &["sve", "i8mm"], &["sve", "i8mm"]),
    g("SVE2", "armv8.2-a+sve+sve2", &[], &["sve"], &["sve", "sve2"]),
    g("SVE2P1", "armv8.2-a+sve+sve2", &[], &["sve2p1"], &["sve", "sve2", "sve2p1"]),
    g("SME", "armv8.2-a+sve+sve2", NO_VEC, &["sme"], &["sme"]),
    g("SME2", "armv8.2-a+sve+sve2", NO_VEC, &["sme2"], &["sme", "sme2"]),
];

const fn g(
    name: &'static str,
    march: &'static str,
    extra_flags: &'static [&'static str],
    cargo_features: &'static [&'static str],
    cpu_features: &'static [&'static str],
) -> Group {
    Group { name, march, extra_flags, cargo_features, cpu_features }
}

/// Reads every `set(KLEIDIAI_FILES_<X> ...)` of upstream's `CMakeLists.txt` and
/// resolves `${...}` references, giving each variable's file list.
pub fn parse_cmake_lists(text: &str) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut raw: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut rest = text;
    while let Some(pos) = rest.find("set(KLEIDIAI_FILES_") {
        let body_start = pos + "set(".len();
        let end = rest[body_start..].find(')').ok_or_else(|| "unterminated set( in CMakeLists.txt".to_string())?;
        let body = &rest[body_start..body_start + end];
        let mut tokens = body.split_whitespace();
        let var = tokens.next().unwrap_or_default().to_string();
        raw.insert(var, tokens.map(str::to_string).collect());
        rest = &rest[body_start + end..];
    }
    if raw.is_empty() {
        return Err("no KLEIDIAI_FILES_* lists found in CMakeLists.txt".into());
    }
    let mut resolved = BTreeMap::new();
    for var in raw.keys() {
        let mut out = Vec::new();
        resolve(var, &raw, &mut out, 0)?;
        resolved.insert(var.clone(), out);
    }
    Ok(resolved)
}

fn resolve(var: &str, raw: &BTreeMap<String, Vec<String>>, out: &mut Vec<String>, depth: usize) -> Result<(), String> {
    if depth > 8 {
        return Err(format!("CMake variable {var} nests too deeply"));
    }
    // A group upstream adds but never defines (KLEIDIAI_FILES_SVE2 in v1.30.0) is empty.
    let Some(items) = raw.get(var) else {
        return Ok(());
    };
    for item in items {
        if let Some(inner) = item.strip_prefix("${").and_then(|s| s.strip_suffix('}')) {
            resolve(inner, raw, out, depth + 1)?;
        } else {
            out.push(item.clone());
        }
    }
    Ok(())
}
