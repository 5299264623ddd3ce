//! `cargo run -p xtask --release -- measure`: the numbers of issue 5, in one
//! command (set-up first: `scripts/setup.sh`).
//!
//! - **overhead**: the safe high-level path (`PackedWeights::matmul`, one
//!   thread) against the same kernel sequence through the raw bindings, for
//!   every weight kind at m = 1 (Q4_0, Q8_0, int4 per channel, int4 blocks,
//!   asymmetric int4 blocks, int8 per channel, f16, bf16, f32; goal at most
//!   +0.5% each, the run fails otherwise) and Q4_0, bf16, f32 at m = 64,
//!   k = n = 1024. Counted in guest
//!   instructions: qemu runs the `measure` example with one instruction per
//!   translation block and logs every block executed (`-one-insn-per-tb -d
//!   nochain,exec`) together with the system calls (`strace`); the example
//!   brackets each window with a `stat` of a marker path, so the count
//!   between two markers is exactly the instructions executed in between.
//!   An empty window measures the markers themselves, subtracted from both.
//!   `--time ROUNDS` adds the wall-time ratio over repeated runs.
//! - **scaling**: 2 threads against 1 for m = 256, n = k = 2048 (Q4_0 and
//!   f32) on a CPU model whose kernels are not SME (SME workers are capped),
//!   best of several runs each, outputs compared bit for bit.
//! - **cold build**: the downstream crate against upstream's CMake, as in `test`.
//! - **kernels** (`--kernels`): what the default choice costs, per weight
//!   kind (Q4_0, Q8_0, F16, F32), m = 1 and m = 64, n = k = 1024, on `max`,
//!   `neoverse-n2` and `neoverse-v1`: guest instructions per
//!   `PackedWeights::matmul` call (counted as above), the kernel, the layouts
//!   kept and the packed bytes against the input bytes. `--kernels-only`
//!   runs this part alone.
//!
//! Writes `target/measure.json`.

use crate::util::{self, Env, cargo, load_env, phase, root};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

pub const USAGE: &str = "usage: cargo run -p xtask --release -- measure [options]
  --cpu MODEL          qemu CPU model of the overhead count (default: max, SME2 at SVL 256)
  --scaling-cpu MODEL  qemu CPU model of the scaling run (default: neoverse-n2)
  --overhead-cases 'q4_0:1:256;f32:64:4096'   the overhead cases instead (kind:m[:n = k]; kinds q4_0 q8_0 i4 i4b i4a i8 f16 bf16 f32)
  --time ROUNDS        also time both paths (best of ROUNDS batches; slow under qemu)
  --no-overhead | --no-scaling | --no-compare   skip a part
  --kernels            also count the default choice per weight kind, m = 1 and 64, on max, neoverse-n2, neoverse-v1
  --kernels-only       only that part
  --kernels-cpus 'a;b' the CPU models of that part
Writes target/measure.json. Needs scripts/setup.sh to have run.";

const TARGET: &str = "aarch64-unknown-linux-gnu";

/// Overhead cases (`kind:m`, n = k = 1024) and the calls counted per path:
/// more for the cheap ones, so fixed costs are not lost in the noise of one
/// call. Every weight kind of the high-level API at m = 1 (the goal applies
/// there), and three at m = 64.
const CASES: [(&str, usize); 12] = [
    ("q4_0:1", 4),
    ("q8_0:1", 4),
    ("i4:1", 4),
    ("i4b:1", 4),
    ("i4a:1", 4),
    ("i8:1", 4),
    ("f16:1", 2),
    ("bf16:1", 2),
    ("f32:1", 2),
    ("q4_0:64", 1),
    ("bf16:64", 1),
    ("f32:64", 1),
];

/// The overhead goal at m = 1, percent (issue 13).
const GOAL_PERCENT: f64 = 0.5;

struct Opts {
    cpu: String,
    scaling_cpu: String,
    time: Option<usize>,
    overhead: bool,
    scaling: bool,
    compare: bool,
    kernels: bool,
    kernel_cpus: Vec<String>,
    /// Overhead cases and calls per path (default: [`CASES`]).
    cases: Vec<(String, usize)>,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        cpu: "max".into(),
        scaling_cpu: "neoverse-n2".into(),
        time: None,
        overhead: true,
        scaling: true,
        compare: true,
        kernels: false,
        kernel_cpus: ["max", "neoverse-n2", "neoverse-v1"].map(String::from).to_vec(),
        cases: CASES.iter().map(|(c, i)| (c.to_string(), *i)).collect(),
    };
    let mut p = lexopt::Parser::from_args(args);
    while let Some(a) = util::next_arg(&mut p, USAGE)? {
        let mut value = |what: &str| util::value(&mut p, || format!("{a} needs {what}\n{USAGE}"));
        match a.as_str() {
            "--cpu" => o.cpu = value("a CPU model")?,
            "--scaling-cpu" => o.scaling_cpu = value("a CPU model")?,
            "--time" => {
                o.time = Some(value("a number")?.parse().map_err(|_| format!("--time needs a number\n{USAGE}"))?)
            }
            "--no-overhead" => o.overhead = false,
            "--no-scaling" => o.scaling = false,
            "--no-compare" => o.compare = false,
            "--kernels" => o.kernels = true,
            "--kernels-only" => (o.kernels, o.overhead, o.scaling, o.compare) = (true, false, false, false),
            "--kernels-cpus" => {
                o.kernel_cpus = value("CPU models")?.split(';').filter(|s| !s.is_empty()).map(String::from).collect()
            }
            "--overhead-cases" => {
                // One call per path for m > 1, more for one row (see CASES).
                let calls = |c: &str| if c.split(':').nth(1) == Some("1") { 4 } else { 1 };
                o.cases =
                    value("cases")?.split(';').filter(|s| !s.is_empty()).map(|c| (c.to_string(), calls(c))).collect()
            }
            "--help" | "-h" => return Err(USAGE.into()),
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    Ok(o)
}

pub fn run(args: &[String]) -> Result<bool, String> {
    let o = parse(args)?;
    let env = load_env()?;
    let mut out = serde_json::Map::new();
    let mut ok = true;

    phase("build: the measure example for aarch64 (release)");
    let mut b = cargo();
    env.apply(&mut b).args(["build", "--release", "-q", "--example", "measure", "--target", TARGET]);
    util::run_status(&mut b)?;
    let exe = root().join("target").join(TARGET).join("release/examples/measure");

    if o.overhead {
        phase(&format!("overhead: safe path against raw bindings, guest instructions counted (qemu -cpu {})", o.cpu));
        let mut cases = Vec::new();
        for (case, iters) in &o.cases {
            let (case, iters) = (case.as_str(), *iters);
            let c = count_case(&env, &o.cpu, &exe, case, iters)?;
            let scan = match (c["scan_percent"].as_f64(), c["scan_per_call"].as_f64()) {
                (Some(p), Some(n)) => format!("{p:+.3}%, {n:+.0}"),
                // Without the scan this kind's packer needs the checked path.
                _ => "not separable: NonFinite::Kernel takes the checked path here".into(),
            };
            println!(
                "    {case:<8} safe {:>10.0}  raw {:>10.0} instructions per call  overhead {:+.3}% ({:+.0}; the \
                 non-finite scan {scan})  {}",
                c["safe_per_call"].as_f64().unwrap_or(f64::NAN),
                c["raw_per_call"].as_f64().unwrap_or(f64::NAN),
                c["overhead_percent"].as_f64().unwrap_or(f64::NAN),
                c["extra_per_call"].as_f64().unwrap_or(f64::NAN),
                c["kernel"].as_str().unwrap_or("")
            );
            cases.push(c);
        }
        let worst = cases.iter().filter_map(|c| c["overhead_percent"].as_f64()).fold(f64::MIN, f64::max);
        let over: Vec<&str> = cases
            .iter()
            // kind:m or kind:m:n (custom cases): the goal is for m = 1.
            .filter(|c| c["case"].as_str().is_some_and(|n| n.split(':').nth(1) == Some("1")))
            .filter(|c| c["overhead_percent"].as_f64().is_none_or(|p| p > GOAL_PERCENT))
            .filter_map(|c| c["case"].as_str())
            .collect();
        println!(
            "    worst overhead {worst:+.3}%; at m = 1 (goal: at most +{GOAL_PERCENT}% for every weight kind): {}",
            if over.is_empty() { "met".to_string() } else { format!("NOT met by {}", over.join(", ")) }
        );
        ok &= over.is_empty();
        out.insert("overhead".into(), json!({"cpu": o.cpu, "method": "guest instructions (qemu -one-insn-per-tb -d nochain,exec,strace)", "cases": cases, "worst_percent": worst}));
        if let Some(rounds) = o.time {
            phase(&format!("overhead: wall time, best of {rounds} batches per path (qemu -cpu {})", o.cpu));
            let mut q = env.qemu(&o.cpu, &exe);
            q.args(["overhead", "--time", &rounds.to_string()]);
            let text = checked_stdout(&mut q)?;
            let lines: Vec<Value> = text.lines().filter(|l| l.starts_with("time ")).map(|l| json!(l)).collect();
            for l in &lines {
                println!("    {}", l.as_str().unwrap_or(""));
            }
            out.insert("overhead_wall".into(), json!(lines));
        }
    }

    if o.scaling {
        phase(&format!("scaling: 2 threads against 1, m = 256, n = k = 2048 (qemu -cpu {})", o.scaling_cpu));
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        if cores < 2 {
            println!("    this machine has {cores} core: 2 threads cannot run at once, scaling not measured");
        }
        let mut runs = Vec::new();
        for kind in ["q4_0", "f32"] {
            let mut q = env.qemu(&o.scaling_cpu, &exe);
            q.args(["scaling", kind, "256", "2048", "3"]);
            let text = checked_stdout(&mut q)?;
            let line = text.lines().find(|l| l.starts_with("scaling ")).ok_or("the scaling run printed no result")?;
            println!("    {line}");
            let speedup: f64 = field(line, "speedup").and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
            let identical = field(line, "bit_identical") == Some("true");
            ok &= identical;
            runs.push(json!({"kind": kind, "line": line, "speedup": speedup, "bit_identical": identical}));
        }
        out.insert("scaling".into(), json!({"cpu": o.scaling_cpu, "host_cores": cores, "runs": runs, "goal": 1.8}));
    }

    if o.kernels {
        let mut rows = Vec::new();
        for cpu in &o.kernel_cpus {
            phase(&format!(
                "kernels: the default choice per weight kind, guest instructions per call (qemu -cpu {cpu})"
            ));
            for kind in ["q4_0", "q8_0", "f16", "f32"] {
                // The default options at m = 1 and 64, then what each option
                // that keeps more buys: a separate GEMV layout (m = 1), a
                // f16 weights kept as given (packed per call).
                let mut runs = vec![(1, 2, ""), (64, 1, "")];
                if self::after_options() {
                    runs.push((1, 2, "--separate-gemv"));
                    if kind == "f16" {
                        runs.extend([(1, 2, "--keep-as-given"), (64, 1, "--keep-as-given")]);
                    }
                }
                for (m, iters, option) in runs {
                    let case = format!("{kind}:{m}");
                    let t = Instant::now();
                    let mut args = vec!["cost".to_string(), case.clone(), iters.to_string()];
                    if !option.is_empty() {
                        args.push(option.to_string());
                    }
                    let (windows, stdout) = count_windows(&env, cpu, &exe, &args, Counting::Blocks)?;
                    let get = |w: &str| windows.iter().find(|(n, _)| n == w).map(|(_, c)| *c);
                    let (Some(empty), Some(calls)) = (get("empty"), get("safe")) else {
                        return Err(format!("{cpu} {case}: no marker windows in the log"));
                    };
                    let per_call = calls.saturating_sub(empty) as f64 / iters as f64;
                    let info = stdout.lines().find(|l| l.starts_with("case ")).unwrap_or("");
                    let num = |k: &str| field(info, k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
                    let ratio = num("file_bytes") / num("input_bytes");
                    println!(
                        "    {case:<8} {option:<16} {per_call:>12.0} instructions per call  packed/input {ratio:.3}  {}  [{}]",
                        field(info, "kernel").unwrap_or(""),
                        field(info, "layouts").unwrap_or("")
                    );
                    rows.push(json!({
                        "cpu": cpu, "case": case, "option": option, "calls": iters, "instructions_per_call": per_call,
                        "kernel": field(info, "kernel").unwrap_or(""), "layouts": field(info, "layouts").unwrap_or(""),
                        "file_bytes": num("file_bytes"), "input_bytes": num("input_bytes"), "packed_over_input": ratio,
                        "checksum": field(info, "checksum").unwrap_or(""), "seconds": t.elapsed().as_secs_f64(),
                    }));
                }
            }
        }
        out.insert("kernels".into(), json!(rows));
    }

    if o.compare {
        phase("cold build: the downstream crate against upstream's CMake (same compiler, same machine)");
        let c = crate::buildtime::compare(&env, crate::buildtime::ROUNDS)?;
        out.insert("cold_build".into(), c);
    }

    let path = root().join("target/measure.json");
    std::fs::write(&path, serde_json::to_string_pretty(&Value::Object(out)).unwrap_or_default())
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("\nwrote {}", path.display());
    Ok(ok)
}

/// Whether the example knows the options of `PackOptions` that keep more
/// (`KLEIDIAI_MEASURE_DEFAULT_ONLY` set: no, for measuring an older tree).
fn after_options() -> bool {
    std::env::var_os("KLEIDIAI_MEASURE_DEFAULT_ONLY").is_none()
}

/// `key=value` from a result line of the example.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

fn checked_stdout(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// How [`count_windows`] counts.
#[derive(Clone, Copy, PartialEq)]
enum Counting {
    /// One instruction per translation block, every one logged: exact,
    /// about 100x slower than a plain run.
    Exact,
    /// Whole translation blocks logged as they execute (`-d
    /// in_asm,nochain,exec`), each weighed by the instructions its `IN:`
    /// listing showed when it was translated (keyed by the host address of
    /// the translated block, which every `Trace` line names): about 10x
    /// faster than `Exact` and within a few hundredths of a percent of it.
    Blocks,
}

/// Runs the measure example with `args` under an instruction-logging qemu
/// and counts the executed instructions of each marked window: the
/// windows (name, instructions) and the example's stdout.
fn count_windows(
    env: &Env,
    cpu: &str,
    exe: &Path,
    args: &[String],
    how: Counting,
) -> Result<(Vec<(String, u64)>, String), String> {
    let mut q = Command::new(&env.qemu);
    q.arg("-L").arg(&env.sysroot).arg("-cpu").arg(cpu);
    match how {
        Counting::Exact => q.args(["-one-insn-per-tb", "-d", "nochain,exec,strace"]),
        Counting::Blocks => q.args(["-d", "in_asm,nochain,exec,strace"]),
    };
    q.arg(exe).args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    let what = args.join(" ");
    let mut child = q.spawn().map_err(|e| format!("cannot run {q:?}: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stdout), &mut s);
        s
    });
    let mut windows: Vec<(String, u64)> = Vec::new();
    let mut open: Option<(String, u64)> = None;
    let mut tail = Vec::new();
    // Blocks: instructions per translated block (by its host address), and
    // the listing being read (the block translated last, not yet run).
    let mut sizes: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    let mut listing: Option<u64> = None;
    for line in BufReader::new(child.stderr.take().ok_or("no stderr")?).split(b'\n') {
        let line = line.map_err(|e| e.to_string())?;
        if line.starts_with(b"Trace ") {
            let weight = match how {
                Counting::Exact => 1,
                Counting::Blocks => {
                    // "Trace 0: 0x<host block> [...]"
                    let host = line
                        .split(|c| *c == b' ')
                        .nth(2)
                        .and_then(|t| std::str::from_utf8(t).ok())
                        .and_then(|t| u64::from_str_radix(t.trim_start_matches("0x"), 16).ok())
                        .ok_or_else(|| format!("unreadable qemu trace line {:?}", String::from_utf8_lossy(&line)))?;
                    if let Some(n) = listing.take() {
                        sizes.insert(host, n);
                    }
                    *sizes.get(&host).ok_or_else(|| format!("qemu ran block 0x{host:x} before listing it"))?
                }
            };
            if let Some((_, n)) = open.as_mut() {
                *n += weight;
            }
            continue;
        }
        if how == Counting::Blocks {
            if line.starts_with(b"IN:") {
                listing = Some(0);
                continue;
            }
            if line.starts_with(b"0x") && line.contains(&b':') {
                if let Some(n) = listing.as_mut() {
                    *n += 1;
                }
                continue;
            }
            if line.starts_with(b"----") || line.is_empty() {
                continue;
            }
        }
        let text = String::from_utf8_lossy(&line);
        if let Some(rest) = text.split("/kleidiai-mark/").nth(1) {
            let name: String = rest.chars().take_while(|c| *c != '"').collect();
            if let Some(w) = name.strip_prefix("begin/") {
                open = Some((w.to_string(), 0));
            } else if let Some(w) = name.strip_prefix("end/") {
                match open.take() {
                    Some((o, n)) if o == w => windows.push((o, n)),
                    _ => return Err(format!("{what}: marker end/{w} without its begin")),
                }
            }
        } else if !text.contains("statx(") && !text.starts_with(|c: char| c.is_ascii_digit()) {
            // Keep what is not strace noise, for the error message.
            tail.push(text.into_owned());
            if tail.len() > 20 {
                tail.remove(0);
            }
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    let stdout = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("{what}: the measure example failed ({status}): {}{}", stdout, tail.join("\n")));
    }
    Ok((windows, stdout))
}

/// Runs one overhead case under an instruction-logging qemu and counts the
/// executed instructions of each marked window.
fn count_case(env: &Env, cpu: &str, exe: &Path, case: &str, iters: usize) -> Result<Value, String> {
    let t = Instant::now();
    let args = ["overhead".to_string(), "--count".into(), case.into(), iters.to_string()];
    let (windows, stdout) = count_windows(env, cpu, exe, &args, Counting::Exact)?;
    let get = |w: &str| {
        windows.iter().find(|(n, _)| n == w).map(|(_, c)| *c).ok_or(format!("{case}: no `{w}` window in the log"))
    };
    let (empty, safe, raw) = (get("empty")?, get("safe")?, get("raw")?);
    let per = |n: u64| n.saturating_sub(empty) as f64 / iters as f64;
    let (s, r) = (per(safe), per(raw));
    // The safe path without the non-finite scan (NonFinite::Kernel); no
    // figure when that path costs more (a kind whose packer needs finite
    // activations then keeps its checked path).
    let unscanned = get("kernel").map(per).unwrap_or(f64::NAN);
    let scan = (s - unscanned >= 0.0).then_some(s - unscanned);
    let info = stdout.lines().find(|l| l.starts_with("case ")).unwrap_or("");
    Ok(json!({
        "case": case,
        "calls": iters,
        "kernel": field(info, "kernel").unwrap_or(""),
        "lhs_packer": field(info, "lhs_packer").unwrap_or(""),
        "marker_instructions": empty,
        "safe_per_call": s,
        "raw_per_call": r,
        "extra_per_call": s - r,
        "overhead_percent": (s - r) / r * 100.0,
        "scan_per_call": scan,
        "scan_percent": scan.map(|v| v / r * 100.0),
        "seconds": t.elapsed().as_secs_f64(),
    }))
}
