//! Writes the seed inputs of both fuzz targets into `fuzz/corpus/<target>/`
//! (`cargo run --release --example seeds`, in `fuzz/`), then prints the
//! tags the validation seeds cover; `-- packed_file` (or `-- validation`)
//! writes one target's seeds only. Minimise afterwards with
//! `cargo +nightly fuzz cmin -O <target>`.

use std::path::Path;

fn main() {
    // `seeds show <file>`: the calls a validation input decodes to, run.
    let args: Vec<String> = std::env::args().collect();
    if let [_, cmd, file] = &args[..] {
        if cmd == "show" {
            let bytes = std::fs::read(file).expect("read the input");
            let calls = kleidiai_fuzz::validation::decode(&bytes).expect("decodes");
            println!("{calls:#?}");
            println!("tags: {:?}", kleidiai_fuzz::validation::run_tagged(calls));
            return;
        }
    }
    // `seeds <target>`: only that target's seeds (the validation seeds take
    // a while to find).
    let only = match &args[..] {
        [_, target] => Some(target.as_str()),
        _ => None,
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    type Seeds = fn() -> Vec<(String, Vec<u8>)>;
    let sets: [(&str, Seeds); 2] = [
        ("packed_file", kleidiai_fuzz::seeds::packed_file),
        ("validation", || kleidiai_fuzz::seeds::validation(200_000, 2)),
    ];
    for (target, seeds) in sets {
        if only.is_some_and(|t| t != target) {
            continue;
        }
        let seeds = seeds();
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).expect("create the corpus directory");
        for (name, bytes) in &seeds {
            std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("write a seed");
        }
        println!("{target}: {} seeds in {}", seeds.len(), dir.display());
    }
}
