//! Small helpers: paths, commands, timing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask has a parent").to_path_buf()
}

pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Runs `cmd`, returning its output and wall seconds.
pub fn timed_output(cmd: &mut Command) -> Result<(Output, f64), String> {
    let t = Instant::now();
    let out = cmd.output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    Ok((out, t.elapsed().as_secs_f64()))
}

/// Runs `cmd` with inherited stdio; error when it fails.
pub fn run_status(cmd: &mut Command) -> Result<f64, String> {
    let t = Instant::now();
    let st = cmd.status().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !st.success() {
        return Err(format!("{cmd:?} failed with {st}"));
    }
    Ok(t.elapsed().as_secs_f64())
}

pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

pub fn phase(name: &str) {
    println!("\n==> {name}");
}
