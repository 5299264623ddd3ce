//! The fuzz targets of `fuzz/` on any target, without libFuzzer: the test
//! command runs it on aarch64 under qemu, so `validation` and the loaders
//! meet the KleidiAI kernels (cargo-fuzz fuzzes on the host, where only
//! the portable reference runs). See `kleidiai_fuzz::replay`.
//!
//! ```text
//! fuzz_replay <target> <corpus-dir> [--seconds S] [--seed N] [--current FILE]
//! fuzz_replay <target> <input-file>
//! ```
//!
//! With a directory: replays every file in it (sorted by name), then mutates
//! them for `S` seconds (default 10) from seed `N` (default 1), writing each
//! input to `FILE` just before it runs (a crash leaves its input there), and
//! prints `FUZZ-REPLAY target=... execs=...`. With a file: runs that one
//! input (to reproduce a crash). A failure panics or kills the process:
//! the exit status is non-zero.

use kleidiai_fuzz::replay;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Duration;

const USAGE: &str = "usage: fuzz_replay <packed_file|validation> <corpus-dir|input-file> \
                     [--seconds S] [--seed N] [--current FILE]";

fn main() -> Result<(), String> {
    let (mut positional, mut seconds, mut seed, mut current) = (Vec::new(), 10.0f64, 1u64, None::<PathBuf>);
    let mut p = lexopt::Parser::from_env();
    let value = |p: &mut lexopt::Parser| -> Result<String, String> {
        p.value().map_err(|e| e.to_string())?.into_string().map_err(|_| "not UTF-8".to_string())
    };
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            lexopt::Arg::Long("seconds") => seconds = value(&mut p)?.parse().map_err(|_| "--seconds: a number")?,
            lexopt::Arg::Long("seed") => seed = value(&mut p)?.parse().map_err(|_| "--seed: an integer")?,
            lexopt::Arg::Long("current") => current = Some(value(&mut p)?.into()),
            lexopt::Arg::Value(v) => positional.push(PathBuf::from(v)),
            _ => return Err(USAGE.into()),
        }
    }
    let [name, path] = &positional[..] else { return Err(USAGE.into()) };
    let name = name.to_string_lossy();
    let target = replay::target(&name).ok_or_else(|| format!("unknown target `{name}`\n{USAGE}"))?;
    if path.is_file() {
        let input = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        target.run(&input);
        println!("{}: ran {} without a failure", target.name, path.display());
        return Ok(());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let corpus: Vec<Vec<u8>> = files.iter().map(std::fs::read).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let current = match current {
        Some(f) => Some(std::fs::File::create(&f).map_err(|e| format!("{}: {e}", f.display()))?),
        None => None,
    };
    let save = |input: &[u8]| {
        if let Some(f) = &current {
            // Two calls, no reopening: cheap next to one execution.
            f.set_len(0).and_then(|()| f.write_all_at(input, 0)).expect("save the input about to run");
        }
    };
    let s = replay::fuzz(target, &corpus, Duration::from_secs_f64(seconds), seed, save);
    let _ = writeln!(
        std::io::stdout().lock(),
        "FUZZ-REPLAY target={} execs={} corpus={} kept={} tags={} seconds={:.1} seed={seed}",
        target.name,
        s.execs,
        s.corpus,
        s.kept,
        s.tags,
        s.seconds
    );
    Ok(())
}
