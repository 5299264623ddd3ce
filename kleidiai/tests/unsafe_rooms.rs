//! Where the crate's `unsafe` blocks may be (the crate docs' "Where
//! `unsafe` lives"): the files below, each with at most the blocks it has
//! today. An `unsafe` block anywhere else, or one more in these files,
//! fails here: move the foreign call into a checked driver of
//! `families/engine.rs` instead, or raise the count in the same change
//! that says why. (clippy's `undocumented_unsafe_blocks`, denied for the
//! workspace, makes each of them carry its `// SAFETY:` comment.)

use std::collections::BTreeMap;
use std::path::Path;

/// The files of `kleidiai/src` that may hold `unsafe` blocks, and how many.
const ROOMS: &[(&str, usize)] = &[
    // Every call into KleidiAI: queries, packers, kernel runs, the
    // `kai_matmul_uker_*` tables and the steady state, behind checked
    // drivers.
    ("families/engine.rs", 16),
    // ggml's raw operands, vouched for once at the raw entry points.
    ("ggml/threads.rs", 10),
    // The operating system's queries and the crate's own instructions.
    ("arch.rs", 7),
    // The public unchecked per-thread calls (`PartKernel::*_unchecked`)
    // and the checked call that forwards to one after its checks.
    ("weights/parts/calls.rs", 3),
];

fn count_blocks(dir: &Path, root: &Path, out: &mut BTreeMap<String, usize>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            count_blocks(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            let n = text.matches("unsafe {").count() + text.matches("unsafe{").count();
            if n > 0 {
                let rel = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
                out.insert(rel, n);
            }
        }
    }
}

#[test]
fn unsafe_blocks_stay_in_their_rooms() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = BTreeMap::new();
    count_blocks(&root, &root, &mut found);
    let allowed: BTreeMap<&str, usize> = ROOMS.iter().copied().collect();
    let mut wrong = Vec::new();
    for (file, &n) in &found {
        match allowed.get(file.as_str()) {
            None => wrong.push(format!("{file}: {n} unsafe block(s) outside the rooms")),
            Some(&max) if n > max => wrong.push(format!("{file}: {n} unsafe blocks, at most {max}")),
            Some(_) => {}
        }
    }
    let total: usize = found.values().sum();
    println!("unsafe blocks in kleidiai/src: {total} in {} files: {found:?}", found.len());
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The crate's bound (issue 13): at most 40 blocks in at most 4 files.
    assert!(ROOMS.len() <= 4, "{} rooms: at most 4", ROOMS.len());
    assert!(total <= 40, "{total} unsafe blocks in kleidiai/src: at most 40");
    // The rooms exist (a renamed file would make this test pass vacuously).
    for (file, _) in ROOMS {
        assert!(root.join(file).is_file(), "{file} is listed as a room but does not exist");
    }
    assert!(total > 0, "no unsafe block found: is {} the crate's source?", root.display());
}
