//! Small helpers: paths, commands, timing.

use lexopt::Arg;
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

/// What `scripts/setup.sh` found (`.tools/env`): qemu, the sysroot, and
/// every variable it exports (the aarch64 linker and runner).
pub struct Env {
    pub qemu: PathBuf,
    pub sysroot: PathBuf,
    pub vars: Vec<(String, String)>,
}

impl Env {
    /// `cmd` with every variable of `.tools/env` set (so the commands work
    /// whether or not the caller sourced it).
    pub fn apply<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        for (k, v) in &self.vars {
            cmd.env(k, v);
        }
        cmd
    }

    /// A qemu command running `exe` on CPU model `cpu`.
    pub fn qemu(&self, cpu: &str, exe: &Path) -> Command {
        let mut c = Command::new(&self.qemu);
        c.arg("-L").arg(&self.sysroot).arg("-cpu").arg(cpu).arg(exe);
        c
    }
}

pub fn load_env() -> Result<Env, String> {
    let path = root().join(".tools/env");
    let text = std::fs::read_to_string(&path)
        .map_err(|_| format!("{} is missing: run scripts/setup.sh first (scripts/test.sh does)", path.display()))?;
    let vars: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
        .collect();
    let get = |key: &str| {
        vars.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| PathBuf::from(v))
            .ok_or_else(|| format!("{key} not set in {}", path.display()))
    };
    Ok(Env { qemu: get("KLEIDIAI_QEMU")?, sysroot: get("KLEIDIAI_SYSROOT")?, vars })
}

/// CPU seconds (user + system) of every child process this process has
/// waited for, and of their waited-for descendants (`cutime` + `cstime` of
/// `/proc/self/stat`, in USER_HZ = 100 ticks); 0 where there is no /proc.
/// Less sensitive than wall time to other work on a shared machine.
pub fn children_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name's closing parenthesis; cutime and
    // cstime are fields 16 and 17 of the line (14 and 15 after it).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<f64> = rest.split_whitespace().map(|f| f.parse().unwrap_or(0.0)).collect();
    match (fields.get(13), fields.get(14)) {
        (Some(u), Some(s)) => (u + s) / 100.0,
        _ => 0.0,
    }
}

/// The next argument of `p` as it was given (`--name`, `-c` or a plain
/// value); `--name=value` gives `--name`, its value then comes from [`value`].
/// A parse error is followed by `usage`.
pub fn next_arg(p: &mut lexopt::Parser, usage: &str) -> Result<Option<String>, String> {
    Ok(p.next().map_err(|e| format!("{e}\n{usage}"))?.map(|arg| match arg {
        Arg::Long(l) => format!("--{l}"),
        Arg::Short(c) => format!("-{c}"),
        Arg::Value(v) => v.to_string_lossy().into_owned(),
    }))
}

/// The value of the option just read, as a string; `missing()` when there is none.
pub fn value(p: &mut lexopt::Parser, missing: impl FnOnce() -> String) -> Result<String, String> {
    p.value().ok().and_then(|v| v.into_string().ok()).ok_or_else(missing)
}

/// `[--check]`: the one flag of `xtask bindings` and `xtask header`.
pub fn check_flag(args: &[String], usage: &str) -> Result<bool, String> {
    let mut p = lexopt::Parser::from_args(args);
    let mut check = false;
    while let Some(a) = next_arg(&mut p, usage)? {
        match a.as_str() {
            "--check" if !check => check = true,
            _ => return Err(usage.into()),
        }
    }
    Ok(check)
}
