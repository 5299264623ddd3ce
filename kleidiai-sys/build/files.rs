//! Walking the upstream tree. Std only (`xtask` includes this file too).

use std::path::{Path, PathBuf};

/// Every file under `dir`, recursively, in no particular order.
pub fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}
