//! Symbol prefixing at compile time: a generated header `kai_prefix.h`
//! `#define`s every `kai_*` identifier of the upstream sources to
//! `<prefix>kai_*`, and every C and assembly file is compiled with
//! `-include kai_prefix.h`. The archive then defines only prefixed symbols,
//! and the Rust bindings link to the prefixed names, so a second KleidiAI in
//! the same process (ggml's, ONNX Runtime's) cannot clash with ours, nor can
//! two versions of this crate with each other. No tool runs after the
//! compiler (no `nm`, no `objcopy`).
//!
//! Std only: `xtask` includes this file too (the bindings and the checks of
//! the test command use the same prefix and identifier list).

use std::collections::BTreeSet;
use std::path::Path;

/// `kairs_<major>_<minor>_<patch>_` for a crate version (`0.1.0+kleidiai.1.30.0`
/// gives `kairs_0_1_0_`).
pub fn symbol_prefix(version: &str) -> String {
    let core = version.split('+').next().unwrap_or("0.0.0").replace(['.', '-'], "_");
    format!("kairs_{core}_")
}

/// The identifiers the prefix header renames.
pub struct Identifiers {
    /// Every `kai_*` identifier of the C, header and assembly files, except
    /// the names upstream itself `#define`s (those are macros: redefining
    /// them would change what they expand to).
    pub all: BTreeSet<String>,
    /// The subset that occurs in assembly files (see [`header`]).
    pub in_asm: BTreeSet<String>,
}

/// Scans every `.c`, `.h` and `.S` file under `root/kai` for `kai_*`
/// identifiers (comments and string literals skipped).
///
/// Renaming every such identifier, not only the defined symbols, keeps the
/// rule simple and checkable: struct tags, enum constants and static
/// functions renamed too change nothing in the ABI, and every symbol the
/// archive defines or references is covered, whether a public header
/// declares it or not (the assembly kernels the `.c` files call).
pub fn identifiers(root: &Path) -> Result<Identifiers, String> {
    let mut files = Vec::new();
    super::files::walk(&root.join("kai"), &mut files);
    files.retain(|p| p.extension().is_some_and(|e| e == "c" || e == "h" || e == "S"));
    files.sort();
    if files.is_empty() {
        return Err(format!("no KleidiAI sources under {}", root.join("kai").display()));
    }
    let (mut all, mut in_asm, mut macros) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for f in &files {
        let text = std::fs::read(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
        let asm = f.extension().is_some_and(|e| e == "S");
        scan(&text, &mut |ident, defined| {
            if defined {
                macros.insert(ident.to_string());
            }
            if asm {
                in_asm.insert(ident.to_string());
            }
            all.insert(ident.to_string());
        });
    }
    all.retain(|i| !macros.contains(i));
    in_asm.retain(|i| !macros.contains(i));
    Ok(Identifiers { all, in_asm })
}

/// Calls `found(identifier, is_defined_as_macro)` for every identifier that
/// starts with `kai_` in C or preprocessed-assembly `text`.
fn scan(text: &[u8], found: &mut dyn FnMut(&str, bool)) {
    let ident_start = |c: u8| c.is_ascii_alphabetic() || c == b'_';
    let ident_char = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let (mut i, n) = (0, text.len());
    // Whether the tokens since the start of the line are `#` `define`.
    let mut line_tokens: Vec<&[u8]> = Vec::new();
    while i < n {
        let c = text[i];
        if c == b'\n' {
            line_tokens.clear();
            i += 1;
        } else if c == b'/' && text.get(i + 1) == Some(&b'/') {
            while i < n && text[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && text.get(i + 1) == Some(&b'*') {
            i += 2;
            while i < n && !(text[i] == b'*' && text.get(i + 1) == Some(&b'/')) {
                i += 1;
            }
            i += 2;
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < n && text[i] != c && text[i] != b'\n' {
                i += if text[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if ident_start(c) {
            let start = i;
            while i < n && ident_char(text[i]) {
                i += 1;
            }
            let word = &text[start..i];
            if word.starts_with(b"kai_") {
                let defined = matches!(line_tokens.as_slice(), [hash, def] if *hash == b"#" && *def == b"define");
                found(std::str::from_utf8(word).unwrap_or_default(), defined);
            }
            line_tokens.push(word);
        } else if c.is_ascii_digit() {
            // A number (0x1f, 16b): not an identifier even where letters follow.
            while i < n && ident_char(text[i]) {
                i += 1;
            }
            line_tokens.push(b"0");
        } else {
            if c == b'#' {
                line_tokens.push(b"#");
            } else if !c.is_ascii_whitespace() {
                line_tokens.push(b"?");
            }
            i += 1;
        }
    }
}

/// The text of the prefix header: `kai_prefix.h` for C (every identifier),
/// or with `asm`, `kai_prefix_asm.h` for the assembly files (the identifiers
/// they use: they include no header, so no other token reaches them).
///
/// On Apple platforms upstream's assembly builds symbol names by token
/// pasting (`_##name`), which the preprocessor does not macro-expand; the
/// pasted `_kai_*` token is rescanned, though, so defining the underscored
/// names too renames those symbols.
pub fn header(prefix: &str, ids: &Identifiers, asm: bool) -> String {
    let names = if asm { &ids.in_asm } else { &ids.all };
    let mut h = String::with_capacity(names.len() * (2 * 40 + prefix.len() + 10));
    h.push_str(
        "/* Generated by kleidiai-sys/build/prefix.rs: renames every KleidiAI identifier\n \
         * so this copy's symbols cannot clash with another KleidiAI in the same program.\n \
         * Included first in every C or assembly file (-include). Do not edit. */\n\
         #ifndef KAIRS_PREFIX_H\n#define KAIRS_PREFIX_H\n",
    );
    for id in names {
        h.push_str(&format!("#define {id} {prefix}{id}\n"));
    }
    if asm {
        h.push_str("#if defined(__APPLE__)\n");
        for id in names {
            h.push_str(&format!("#define _{id} _{prefix}{id}\n"));
        }
        h.push_str("#endif\n");
    }
    h.push_str("#endif\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_skips_comments_strings_and_numbers() {
        let text = br#"
#define kai_alias kai_target
// kai_in_comment
/* kai_in_block
   kai_still */ int kai_real(void);
const char* s = "kai_in_string";
    KAI_ASM_GLOBAL(kai_asm_fn)
    mov x0, #0x1kai_not
"#;
        let mut got = Vec::new();
        scan(text, &mut |i, d| got.push((i.to_string(), d)));
        let want = [("kai_alias", true), ("kai_target", false), ("kai_real", false), ("kai_asm_fn", false)];
        assert_eq!(got, want.map(|(i, d)| (i.to_string(), d)));
    }

    #[test]
    fn prefix_from_version() {
        assert_eq!(symbol_prefix("0.1.0+kleidiai.1.30.0"), "kairs_0_1_0_");
        assert_eq!(symbol_prefix("1.2.3-rc.1"), "kairs_1_2_3_rc_1_");
    }
}
