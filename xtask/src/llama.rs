//! `cargo run -p xtask --release -- llama`, and the `llama` phase of `test`:
//! llama.cpp with kleidiai-rs as its KleidiAI provider, on a real model
//! under qemu, against llama.cpp's own KleidiAI path and its plain CPU code.
//!
//! 1. builds llama.cpp three times (`scripts/llama/build.sh`: plain,
//!    kleidiai = llama.cpp's own KleidiAI path, kleidiai-rs = ours);
//! 2. makes the model once (`kairs-llama make-model`: llama architecture,
//!    fixed-seed weights, n_embd 256, 4 layers, n_ff 1024, vocab 1000) in F32
//!    and quantises it (pure Q4_0, Q8_0, F16; Q4_0 with llama.cpp's own
//!    recipe, output.weight Q6_K), and an odd-shaped one (`--odd`: n_embd
//!    576, n_ff 1504, 2 layers) in F32, Q4_0, Q8_0, F16, cached in
//!    target/llama/models;
//! 3. runs every case (model x qemu CPU x threads, plus GGML_KLEIDIAI_SME=0 on
//!    max) in all three builds: a 32-token prompt with logits at every
//!    position, then 16 greedy tokens;
//! 4. checks: ours against llama.cpp's KleidiAI path bit for bit wherever
//!    both ran the same kernels (a difference elsewhere must be one of the
//!    named, explained ones, and is reported with its size); ours against
//!    plain: the same tokens and logits within [`tolerance`]; which kernels
//!    each side ran per weight type;
//! 5. measures (unless `--no-measure`): guest instructions per evaluated
//!    token (qemu, exact), the packed weights' bytes and the resident memory
//!    of the loaded model, build times. Writes target/llama.json.

use crate::util::{self, Env, load_env, phase, root};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

pub const USAGE: &str = "usage: cargo run -p xtask --release -- llama [options]
  --subset           the test phase's subset instead of the full matrix
  --models a,b       model files (q4_0 q8_0 f32 f16; q4_0_mixed: llama.cpp's own Q4_0 recipe, output.weight Q6_K;
                     q4_0_odd q8_0_odd f32_odd f16_odd: n_embd 576, n_ff 1504, 9 heads, 3 KV heads, 2 layers)
  --cpus 'a;b'       qemu CPU models
  --threads 1,2      thread counts
  --measure | --no-measure   instruction counts on max, 1 thread, of each model file (default: on)
  --no-build         use the builds in target/llama as they are
Writes target/llama.json. Needs scripts/setup.sh (clang-19, cmake, qemu).";

const VARIANTS: [&str; 3] = ["plain", "kleidiai", "kleidiai-rs"];
const ALL_MODELS: [&str; 9] =
    ["q4_0", "q8_0", "f32", "f16", "q4_0_mixed", "q4_0_odd", "q8_0_odd", "f32_odd", "f16_odd"];
const ALL_CPUS: [&str; 7] = [
    "max",
    "max,sme-default-vector-length=64",
    "max,sme=off",
    "neoverse-v1",
    "neoverse-n2",
    "neoverse-n1",
    "cortex-a53",
];
/// The test phase's subset (named in the README).
const SUBSET_MODELS: [&str; 5] = ["q4_0", "q8_0", "q4_0_mixed", "q4_0_odd", "q8_0_odd"];
const SUBSET_CPUS: [&str; 4] = ["max", "max,sme=off", "neoverse-n1", "cortex-a53"];

/// One evaluation: a model file on a CPU model with some threads, and
/// `GGML_KLEIDIAI_SME` if set.
#[derive(Clone, Debug)]
struct Case {
    model: &'static str,
    cpu: &'static str,
    threads: usize,
    sme: Option<&'static str>,
}

impl Case {
    fn name(&self) -> String {
        let sme = self.sme.map(|s| format!(" GGML_KLEIDIAI_SME={s}")).unwrap_or_default();
        format!("{} {} {}t{sme}", self.model, self.cpu, self.threads)
    }
    fn file(&self, variant: &str) -> String {
        let sme = self.sme.map(|s| format!("-sme{s}")).unwrap_or_default();
        format!("{variant}-{}-{}-{}{sme}", self.model, self.cpu.replace([',', '='], "_"), self.threads)
    }
}

pub struct Config {
    models: Vec<&'static str>,
    cpus: Vec<&'static str>,
    threads: Vec<usize>,
    sme0: bool,
    measure: bool,
    build: bool,
    label: &'static str,
}

impl Config {
    /// The test command's `llama` phase.
    pub fn subset() -> Config {
        Config {
            models: SUBSET_MODELS.to_vec(),
            cpus: SUBSET_CPUS.to_vec(),
            threads: vec![2],
            sme0: false,
            measure: true,
            build: true,
            label: "subset: q4_0 q8_0 q4_0_mixed q4_0_odd q8_0_odd x max, max,sme=off, neoverse-n1, cortex-a53 x 2 threads, plus max 1 thread",
        }
    }
    fn full() -> Config {
        Config {
            models: ALL_MODELS.to_vec(),
            cpus: ALL_CPUS.to_vec(),
            threads: vec![1, 2],
            sme0: true,
            measure: true,
            build: true,
            label: "full: every model file x 7 CPU models x 1 and 2 threads, plus GGML_KLEIDIAI_SME=0 on max",
        }
    }
    fn cases(&self) -> Vec<Case> {
        let mut v = Vec::new();
        for &model in &self.models {
            for &cpu in &self.cpus {
                for &threads in &self.threads {
                    v.push(Case { model, cpu, threads, sme: None });
                }
            }
            if self.label.starts_with("subset") && self.cpus.contains(&"max") && !self.threads.contains(&1) {
                v.push(Case { model, cpu: "max", threads: 1, sme: None });
            }
            if self.sme0 {
                for &threads in &self.threads {
                    v.push(Case { model, cpu: "max", threads, sme: Some("0") });
                }
            }
        }
        v
    }
}

fn pick(list: &str, known: &[&'static str], sep: char, what: &str) -> Result<Vec<&'static str>, String> {
    list.split(sep)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| known.iter().copied().find(|k| *k == s).ok_or(format!("unknown {what} `{s}` (known: {known:?})")))
        .collect()
}

fn parse(args: &[String]) -> Result<Config, String> {
    let mut c = Config::full();
    let mut measure = None;
    let mut p = lexopt::Parser::from_args(args);
    while let Some(a) = util::next_arg(&mut p, USAGE)? {
        let mut value = || util::value(&mut p, || format!("{a} needs a value\n{USAGE}"));
        match a.as_str() {
            "--subset" => {
                let b = c.build;
                c = Config::subset();
                c.build = b;
            }
            "--models" => c.models = pick(&value()?, &ALL_MODELS, ',', "model")?,
            "--cpus" => c.cpus = pick(&value()?, &ALL_CPUS, ';', "CPU model")?,
            "--threads" => {
                c.threads = value()?
                    .split(',')
                    .map(|t| t.trim().parse().map_err(|_| format!("bad thread count `{t}`")))
                    .collect::<Result<_, _>>()?
            }
            "--measure" => measure = Some(true),
            "--no-measure" => measure = Some(false),
            "--no-build" => c.build = false,
            "--help" | "-h" => return Err(USAGE.into()),
            other => return Err(format!("unknown option `{other}`\n{USAGE}")),
        }
    }
    if let Some(m) = measure {
        c.measure = m;
    }
    Ok(c)
}

fn work() -> PathBuf {
    root().join("target/llama")
}

fn exe(variant: &str) -> PathBuf {
    work().join(format!("build-{variant}/kairs-llama"))
}

/// What one run printed and wrote.
#[derive(Debug, Default)]
struct RunOut {
    tokens: Vec<i32>,
    logits: Vec<f32>,
    n_vocab: usize,
    /// Kernels run, upstream names without the `kai_`/`kai_run_` prefix.
    kernels: BTreeSet<String>,
    packed_bytes: Option<u64>,
    buffers: Vec<String>,
    /// What loading the model added to the process: heap bytes live, held
    /// from the system, and the resident set (qemu's own memory included).
    live_kb: Option<i64>,
    held_kb: Option<i64>,
    rss_model_kb: Option<i64>,
    seconds: f64,
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let mut w = line.split_whitespace();
    while let Some(x) = w.next() {
        if x == key {
            return w.next();
        }
    }
    None
}

fn read_bin(path: &Path) -> Result<(usize, Vec<i32>, Vec<f32>), String> {
    let b = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize;
    if b.len() < 24 || &b[..8] != b"KAIRSLLM" || u32_at(8) != 1 {
        return Err(format!("{}: not a kairs-llama result", path.display()));
    }
    let (vocab, np, ng) = (u32_at(12), u32_at(16), u32_at(20));
    let t0 = 24 + 4 * np;
    let l0 = t0 + 4 * ng;
    if b.len() != l0 + 4 * (np + ng) * vocab {
        return Err(format!("{}: truncated", path.display()));
    }
    let tokens = (0..ng).map(|i| u32_at(t0 + 4 * i) as i32).collect();
    let logits = b[l0..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Ok((vocab, tokens, logits))
}

fn run_case(env: &Env, variant: &str, case: &Case) -> Result<RunOut, String> {
    let out_dir = work().join("out");
    std::fs::create_dir_all(&out_dir).map_err(|e| e.to_string())?;
    let bin = out_dir.join(format!("{}.bin", case.file(variant)));
    let model = work().join(format!("models/{}.gguf", case.model));
    let mut q = env.qemu(case.cpu, &exe(variant));
    q.arg("run").arg(&model).arg(&bin).args(["--threads", &case.threads.to_string()]);
    q.env("GGML_KLEIDIAI_RS_TRACE", "1").env_remove("GGML_KLEIDIAI_SME");
    if let Some(s) = case.sme {
        q.env("GGML_KLEIDIAI_SME", s);
    }
    let t = Instant::now();
    let o = q.output().map_err(|e| format!("cannot run qemu: {e}"))?;
    let seconds = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&o.stdout);
    if !o.status.success() {
        return Err(format!(
            "{variant} {}: {}\n{}{}",
            case.name(),
            o.status,
            stdout,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    let (n_vocab, tokens, logits) = read_bin(&bin)?;
    let mut r = RunOut { tokens, logits, n_vocab, seconds, ..Default::default() };
    for line in stdout.lines() {
        if let Some(k) = line.strip_prefix("kernel ") {
            let name = k.split_whitespace().next().unwrap_or("");
            let name = name.strip_prefix("kai_run_").or(name.strip_prefix("kai_")).unwrap_or(name);
            r.kernels.insert(name.to_string());
        } else if line.starts_with("packed_bytes ") {
            r.packed_bytes = field(line, "packed_bytes").and_then(|_| line.split_whitespace().nth(2)?.parse().ok());
        } else if line.starts_with("memory ") {
            r.rss_model_kb = field(line, "model_kb").and_then(|v| v.parse().ok());
            r.live_kb = field(line, "live_kb").and_then(|v| v.parse().ok());
            r.held_kb = field(line, "held_kb").and_then(|v| v.parse().ok());
        } else if line.contains("model buffer size") {
            r.buffers.push(line.trim_start_matches("log ").split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    let buft = stdout.lines().find_map(|l| l.strip_prefix("packed_bytes ")?.split_whitespace().next());
    if let (Some(buft), Some(packed)) = (buft, r.packed_bytes) {
        packed_matches_log(buft, packed, &r.buffers).map_err(|e| format!("{variant} {}: {e}", case.name()))?;
    }
    Ok(r)
}

/// The driver's exact packed bytes of buffer type `buft` against the size
/// llama.cpp logged for that buffer (`... BUFT model buffer size = X MiB`,
/// two decimals; no line when the buffer holds nothing): they must agree
/// to the rounding, or the driver counted weights llama.cpp put elsewhere.
fn packed_matches_log(buft: &str, packed: u64, buffers: &[String]) -> Result<(), String> {
    let logged = buffers.iter().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        let at = w.windows(4).position(|x| x[0] == buft && x[1] == "model" && x[2] == "buffer" && x[3] == "size")?;
        w.get(at + 5)?.parse::<f64>().ok()
    });
    let mib = packed as f64 / 1048576.0;
    match logged {
        None if packed == 0 => Ok(()),
        Some(x) if (x - mib).abs() <= 0.0051 => Ok(()),
        _ => Err(format!("packed bytes {packed} ({mib:.2} MiB) but llama.cpp's {buft} buffer holds {logged:?} MiB")),
    }
}

/// The weight type a kernel serves (from its upstream name).
fn weight_type(kernel: &str) -> &'static str {
    if kernel.contains("qsi4c32") {
        "Q4_0"
    } else if kernel.contains("qsi8cx") {
        "Q8_0"
    } else if kernel.contains("bf16") {
        "F16"
    } else {
        "F32"
    }
}

/// How far `got` is from `want`: the largest normwise relative error of one
/// position's logits, `||got - want|| / ||want||`, and the largest
/// absolute difference.
fn distance(got: &[f32], want: &[f32], vocab: usize) -> (f64, f64) {
    let mut rel = 0f64;
    let mut abs = 0f64;
    for (g, w) in got.chunks(vocab).zip(want.chunks(vocab)) {
        let (mut d2, mut w2) = (0f64, 0f64);
        for (a, b) in g.iter().zip(w) {
            let d = f64::from(*a) - f64::from(*b);
            d2 += d * d;
            w2 += f64::from(*b) * f64::from(*b);
            abs = abs.max(d.abs());
        }
        rel = rel.max((d2 / w2.max(f64::MIN_POSITIVE)).sqrt());
    }
    (rel, abs)
}

/// Where ours and plain ggml first choose different generated tokens.
struct Parting {
    /// The logits row (position) whose greedy choice differs.
    position: usize,
    /// Plain's own margin there between its choice and ours.
    margin: f64,
    /// Twice the per-logit error the tolerance allows there
    /// (`2 tol ||plain row|| / sqrt(vocab)`).
    bound: f64,
    /// Margin under the bound and the row within the tolerance: the two
    /// choices are a tie within rounding (the runs go on from different
    /// tokens, so later rows are not comparable).
    tie: bool,
}

/// The first generated token where ours and plain differ, None when the
/// tokens agree (or a run is malformed: the token comparison reports it).
fn parting(ours: &RunOut, plain: &RunOut, tol: f64) -> Option<Parting> {
    let vocab = ours.n_vocab;
    let i = ours.tokens.iter().zip(&plain.tokens).position(|(a, b)| a != b)?;
    let rows = ours.logits.len() / vocab.max(1);
    let position = (rows.checked_sub(ours.tokens.len())? + i).checked_sub(1)?;
    let row = |l: &[f32]| l.get(position * vocab..(position + 1) * vocab).map(|r| r.to_vec());
    let (o, p) = (row(&ours.logits)?, row(&plain.logits)?);
    let (a, b) = (usize::try_from(ours.tokens[i]).ok()?, usize::try_from(plain.tokens[i]).ok()?);
    let margin = f64::from(*p.get(b)?) - f64::from(*p.get(a)?);
    let norm = p.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt();
    let bound = 2.0 * tol * norm / (vocab as f64).sqrt();
    let (rel, _) = distance(&o, &p, vocab);
    Some(Parting { position, margin, bound, tie: margin <= bound && rel <= tol })
}

/// Largest normwise relative error of a position's logits allowed between
/// kleidiai-rs and plain ggml (per model file); see the README, "llama.cpp".
///
/// Where a KleidiAI kernel runs, both sides round the activations of every
/// matmul to 8 bits, differently: ggml to Q8_0 blocks (step `max|x|/127` per
/// 32 values), KleidiAI to the same blocks (Q4_0 GEMV, NEON GEMM), to f16
/// (Q4_0 SME2 GEMM) or to one int8 scale per row (Q8_0, whose weights are
/// also requantised per row, step `max|w_row|/127` instead of per block).
/// Rounding a value by at most half a step `s` gives an error of standard
/// deviation `s/sqrt(12)`; with `max|x| ~ 3 rms(x)` over a block, one matmul
/// output moves by about `3/127/sqrt(12) ~ 0.7%` of its size per rounded
/// operand, independently per output. The logits sit behind 9 matmuls in
/// series (4 layers of attention and feed-forward, then the output layer),
/// whose relative errors add in quadrature through the normalised residual
/// stream: `sqrt(9) x 0.7% ~ 2%` per operand rounded differently, one
/// operand for Q4_0 (the activations), two for Q8_0 (activations, weights):
/// about 2% and 3%. F16 weights on SME2 go through bf16 (8 significant
/// bits) where ggml's own code rounds only the activations to f16: one
/// product moves by up to `2^-8 ~ 0.4%`, so one matmul output by at most
/// that, and 9 in series by `sqrt(9) x 0.4% ~ 1.2%`. F32 weights round
/// nothing but the sums: a dot product of `k <= 1024` f32 terms is within
/// `k u = 6.1e-5` (`u = 2^-24`) of exact in any summation order, and 9 in
/// series add up to at most `5.5e-4`. The tolerances are 2.5 times these
/// estimates: 5%, 7.5%, 3%, 1.4e-3. The odd shape has half the layers and
/// `k <= 1504` (F32: `k u = 9e-5` per dot product): inside the same bounds.
fn tolerance(model: &str) -> f64 {
    // The mixed and odd-shaped files round as their base type does.
    match model.trim_end_matches("_mixed").trim_end_matches("_odd") {
        "q4_0" => 0.05,
        "q8_0" => 0.075,
        "f16" => 0.03,
        _ => 1.4e-3,
    }
}

struct CaseResult {
    case: Case,
    json: Value,
    ok: bool,
    line: String,
}

fn check_case(env: &Env, case: &Case) -> Result<CaseResult, String> {
    let plain = run_case(env, "plain", case)?;
    let kai = run_case(env, "kleidiai", case)?;
    let ours = run_case(env, "kleidiai-rs", case)?;
    let mut problems = Vec::new();
    let vocab = ours.n_vocab;
    // Ours against llama.cpp's KleidiAI path.
    let identical = ours.logits.len() == kai.logits.len()
        && ours.logits.iter().zip(&kai.logits).all(|(a, b)| a.to_bits() == b.to_bits())
        && ours.tokens == kai.tokens;
    let same_kernels = ours.kernels == kai.kernels;
    let (rel_kai, abs_kai) = distance(&ours.logits, &kai.logits, vocab);
    let vs_kai = if identical {
        "bit-identical".to_string()
    } else if same_kernels {
        problems.push(format!(
            "same kernels, different logits (max rel {rel_kai:.3e}, max abs {abs_kai:.3e}): {:?}",
            ours.kernels
        ));
        "DIFFERENT".to_string()
    } else {
        // No known difference remains: every case must run the same kernels.
        problems.push(format!(
            "different kernels (max rel {rel_kai:.3e}): ours {:?}, llama.cpp's {:?}",
            ours.kernels, kai.kernels
        ));
        "DIFFERENT kernels".to_string()
    };
    // Ours against plain ggml: the same tokens, or a tie within the
    // tolerance where they first part (then the logits up to there).
    let tol = tolerance(case.model);
    let parting = parting(&ours, &plain, tol);
    let rows = parting.as_ref().map_or(ours.logits.len(), |t| (t.position + 1) * vocab);
    let (rel_plain, abs_plain) = distance(&ours.logits[..rows.min(ours.logits.len())], &plain.logits, vocab);
    let tokens_word = match &parting {
        None if ours.tokens == plain.tokens => "same".to_string(),
        Some(t) if t.tie => format!(
            "same to position {}, then a tie within the tolerance (plain's margin {:.3} < {:.3})",
            t.position, t.margin, t.bound
        ),
        _ => {
            problems.push(format!("tokens differ from plain: {:?} vs {:?}", ours.tokens, plain.tokens));
            "DIFFERENT".to_string()
        }
    };
    if rel_plain > tol {
        problems.push(format!("logits {rel_plain:.3e} from plain, tolerance {tol:.1e}"));
    }
    fn by_type(k: &BTreeSet<String>) -> BTreeMap<&'static str, Vec<String>> {
        let mut m: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
        for name in k {
            m.entry(weight_type(name)).or_default().push(name.clone());
        }
        m
    }
    let ok = problems.is_empty();
    let line = format!(
        "{:<44} vs llama.cpp KleidiAI: {:<14} vs plain: rel {:.2e} (tol {:.0e}) tokens {}{}",
        case.name(),
        if vs_kai.len() > 14 { &vs_kai[..vs_kai.find(':').unwrap_or(vs_kai.len()).min(40)] } else { &vs_kai },
        rel_plain,
        tol,
        tokens_word,
        if ok { String::new() } else { format!("  FAILED: {}", problems.join("; ")) }
    );
    let json = json!({
        "model": case.model, "cpu": case.cpu, "threads": case.threads, "ggml_kleidiai_sme": case.sme,
        "vs_llama_cpp_kleidiai": vs_kai, "bit_identical": identical,
        "vs_llama_cpp_kleidiai_max_rel": rel_kai, "vs_llama_cpp_kleidiai_max_abs": abs_kai,
        "vs_plain_max_rel": rel_plain, "vs_plain_max_abs": abs_plain, "tolerance": tol,
        "tokens": ours.tokens, "tokens_same_as_plain": ours.tokens == plain.tokens,
        "tie_with_plain": parting.as_ref().filter(|t| t.tie).map(|t| json!({"position": t.position, "margin": t.margin, "bound": t.bound})),
        "kernels_ours": by_type(&ours.kernels), "kernels_llama_cpp": by_type(&kai.kernels),
        "packed_bytes_ours": ours.packed_bytes, "packed_bytes_llama_cpp": kai.packed_bytes,
        "memory_kb_ours": {"live": ours.live_kb, "held": ours.held_kb, "rss": ours.rss_model_kb},
        "memory_kb_llama_cpp": {"live": kai.live_kb, "held": kai.held_kb, "rss": kai.rss_model_kb},
        "memory_kb_plain": {"live": plain.live_kb, "held": plain.held_kb, "rss": plain.rss_model_kb},
        "buffers_ours": ours.buffers, "buffers_llama_cpp": kai.buffers,
        "seconds": [plain.seconds, kai.seconds, ours.seconds],
        "problems": problems,
    });
    Ok(CaseResult { case: case.clone(), json, ok, line })
}

fn build(cfg: &Config) -> Result<Value, String> {
    let script = root().join("scripts/llama/build.sh");
    let mut times = serde_json::Map::new();
    for v in VARIANTS {
        if !cfg.build && exe(v).is_file() {
            continue;
        }
        let o = Command::new(&script)
            .arg(v)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let text = String::from_utf8_lossy(&o.stdout);
        print!("{text}");
        if !o.status.success() {
            return Err(format!("scripts/llama/build.sh {v} failed (see above)"));
        }
        if let Some(s) = text.lines().find_map(|l| l.strip_prefix(&format!("built {v} "))) {
            times.insert(v.into(), json!(s.trim().parse::<f64>().unwrap_or(f64::NAN)));
        }
    }
    Ok(Value::Object(times))
}

fn models(env: &Env) -> Result<(), String> {
    let dir = work().join("models");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let plain = exe("plain");
    // The two shapes' F32 files, then each quantisation of them.
    for (f32, odd) in [("f32", false), ("f32_odd", true)] {
        let p = dir.join(format!("{f32}.gguf"));
        if !p.is_file() {
            let mut q = env.qemu("max", &plain);
            q.arg("make-model").arg(&p).args(["--seed", "42"]);
            if odd {
                q.arg("--odd");
            }
            crate::util::run_status(q.stdout(Stdio::null()))?;
        }
    }
    for (t, from, as_type) in [
        ("q4_0", "f32", "q4_0"),
        ("q8_0", "f32", "q8_0"),
        ("f16", "f32", "f16"),
        ("q4_0_mixed", "f32", "q4_0-mixed"),
        ("q4_0_odd", "f32_odd", "q4_0"),
        ("q8_0_odd", "f32_odd", "q8_0"),
        ("f16_odd", "f32_odd", "f16"),
    ] {
        let p = dir.join(format!("{t}.gguf"));
        if !p.is_file() {
            let mut q = env.qemu("max", &plain);
            q.arg("quantize").arg(dir.join(format!("{from}.gguf"))).arg(&p).arg(as_type);
            crate::util::run_status(q.stdout(Stdio::null()))?;
        }
    }
    Ok(())
}

/// Guest instructions of the marked windows of one run, counted from qemu's
/// log as ../shared/design.md section 7 describes: `-d in_asm` lists each
/// translated block's instructions once, `-d exec` (with `nochain`) logs
/// every block executed, so a window's count is the sum of its blocks'
/// sizes (blocks are identified by their host address, rebound when qemu
/// translates one again); the driver's stat() marks are seen in the strace
/// log. About 12x slower than a plain run and within a few thousandths of a
/// percent of the exact count (`-one-insn-per-tb`, which `xtask measure`
/// uses, is 70-120x slower: too slow for a whole model).
fn count_instructions(env: &Env, variant: &str, model: &str, cpu: &str) -> Result<(f64, f64), String> {
    let bin = work().join(format!("out/count-{variant}-{model}.bin"));
    let mut q = Command::new(&env.qemu);
    q.arg("-L")
        .arg(&env.sysroot)
        .arg("-cpu")
        .arg(cpu)
        .args(["-d", "in_asm,nochain,exec,strace"])
        .arg(exe(variant))
        .arg("run")
        .arg(work().join(format!("models/{model}.gguf")))
        .arg(&bin)
        .args(["--threads", "1", "--mark"])
        .env_remove("GGML_KLEIDIAI_SME")
        .env_remove("GGML_KLEIDIAI_RS_TRACE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = q.spawn().map_err(|e| format!("cannot run qemu: {e}"))?;
    let mut sums: BTreeMap<String, u64> = BTreeMap::new();
    let mut open: Option<(String, u64)> = None;
    let mut sizes: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    let (mut listing, mut size, mut pending) = (false, 0u64, None::<u64>);
    for line in BufReader::with_capacity(1 << 20, child.stderr.take().ok_or("no stderr")?).split(b'\n') {
        let line = line.map_err(|e| e.to_string())?;
        if line.starts_with(b"Trace ") {
            // "Trace <cpu>: 0x<host address> [...] symbol"
            let addr = line
                .split(|b| *b == b' ')
                .nth(2)
                .and_then(|a| std::str::from_utf8(a).ok()?.strip_prefix("0x").map(|h| u64::from_str_radix(h, 16).ok()))
                .flatten()
                .unwrap_or(0);
            let n = match pending.take() {
                Some(n) => {
                    sizes.insert(addr, n);
                    n
                }
                None => sizes.get(&addr).copied().unwrap_or(0),
            };
            if let Some((_, c)) = open.as_mut() {
                *c += n;
            }
            continue;
        }
        if line.starts_with(b"IN:") {
            (listing, size) = (true, 0);
            continue;
        }
        if listing {
            if line.starts_with(b"0x") {
                size += 1;
            } else if line.is_empty() {
                (listing, pending) = (false, Some(size));
            }
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        if let Some(rest) = text.split("/kleidiai-mark/").nth(1) {
            let name: String = rest.chars().take_while(|c| *c != '"').collect();
            if let Some(w) = name.strip_prefix("begin/") {
                open = Some((w.to_string(), 0));
            } else if let Some(w) = name.strip_prefix("end/") {
                if let Some((o, n)) = open.take().filter(|(o, _)| o == w) {
                    *sums.entry(o).or_default() += n;
                }
            }
        }
    }
    let st = child.wait().map_err(|e| e.to_string())?;
    if !st.success() {
        return Err(format!("instruction count of {variant} {model} on {cpu}: qemu {st}"));
    }
    read_bin(&bin)?;
    let prompt = *sums.get("prompt").ok_or("no prompt window")? as f64 / 32.0;
    let generated = *sums.get("gen").ok_or("no gen window")? as f64 / 16.0;
    Ok((prompt, generated))
}

fn measure(env: &Env, cfg: &Config) -> Result<Value, String> {
    let mut rows = Vec::new();
    let cpu = "max";
    for &model in &cfg.models {
        let t = Instant::now();
        let (kp, kg) = count_instructions(env, "kleidiai", model, cpu)?;
        let (op, og) = count_instructions(env, "kleidiai-rs", model, cpu)?;
        println!(
            "    {model:<5} {cpu}: per prompt token ours {op:>10.0} llama.cpp {kp:>10.0} ({:.4}x); per generated token ours {og:>10.0} llama.cpp {kg:>10.0} ({:.4}x)  [{:.0}s]",
            op / kp,
            og / kg,
            t.elapsed().as_secs_f64()
        );
        rows.push(json!({"model": model, "cpu": cpu, "threads": 1,
            "prompt_per_token": {"ours": op, "llama_cpp": kp, "ratio": op / kp},
            "generated_per_token": {"ours": og, "llama_cpp": kg, "ratio": og / kg}}));
    }
    Ok(
        json!({"method": "guest instructions: qemu -d in_asm,nochain,exec,strace, executed blocks x their sizes, windows marked by the driver (32-token prompt, 16 generated tokens, 1 thread)", "rows": rows}),
    )
}

/// The phase: build, models, cases, checks (and measurements when asked).
/// Returns whether everything passed and the JSON written to target/llama.json.
pub fn phase_run(env: &Env, cfg: &Config) -> Result<(bool, Value), String> {
    let t = Instant::now();
    phase("llama: build llama.cpp three times (scripts/llama/build.sh: plain, kleidiai, kleidiai-rs)");
    let build_times = build(cfg)?;
    phase("llama: the model (F32, fixed seed) and its Q4_0, Q8_0, F16 quantisations (target/llama/models)");
    models(env)?;
    let cases = cfg.cases();
    phase(&format!("llama: {} cases x 3 builds ({})", cases.len(), cfg.label));
    let mut ok = true;
    let mut results: Vec<CaseResult> = Vec::new();
    for c in &cases {
        let r = check_case(env, c)?;
        println!("    {}", r.line);
        ok &= r.ok;
        results.push(r);
    }
    // Kernels per weight type per model, both sides.
    println!("\n    kernels run (ours | llama.cpp's KleidiAI path), per CPU model and weight type:");
    let mut seen = BTreeSet::new();
    for r in &results {
        let key = (r.case.cpu, r.case.model, r.case.threads, r.case.sme);
        if !seen.insert(key) {
            continue;
        }
        let ours = &r.json["kernels_ours"];
        let theirs = &r.json["kernels_llama_cpp"];
        println!("      {:<44} ours {}  |  llama.cpp {}", r.case.name(), ours, theirs);
    }
    // Memory: packed weights (exact) and what loading the model added.
    println!(
        "\n    memory of the loaded model, ours vs llama.cpp's: packed weights (bytes), heap live / held (kB), RSS (kB, qemu's own included):"
    );
    let mut memory = Vec::new();
    let mut seen = BTreeSet::new();
    for r in &results {
        let j = &r.json;
        let key = (r.case.model, r.case.cpu, r.case.sme);
        if !seen.insert(key) {
            continue;
        }
        let num = |v: &Value| v.as_f64();
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b);
        let fmt = |a: Option<f64>, b: Option<f64>| {
            let r = ratio(a, b).map_or("-".into(), |v| format!("{v:.4}x"));
            format!(
                "{:>9} vs {:>9} ({r})",
                a.map_or("-".into(), |v| format!("{v:.0}")),
                b.map_or("-".into(), |v| format!("{v:.0}"))
            )
        };
        let (o, k) = (&j["memory_kb_ours"], &j["memory_kb_llama_cpp"]);
        let packed = (num(&j["packed_bytes_ours"]), num(&j["packed_bytes_llama_cpp"]));
        let live = (num(&o["live"]), num(&k["live"]));
        let held = (num(&o["held"]), num(&k["held"]));
        let rss = (num(&o["rss"]), num(&k["rss"]));
        println!(
            "      {:<5} {:<30} packed {}  live {}  held {}  rss {}",
            r.case.model,
            format!("{}{}", r.case.cpu, r.case.sme.map(|s| format!(" SME={s}")).unwrap_or_default()),
            fmt(packed.0, packed.1),
            fmt(live.0, live.1),
            fmt(held.0, held.1),
            fmt(rss.0, rss.1),
        );
        memory.push(json!({"model": r.case.model, "cpu": r.case.cpu, "sme": r.case.sme,
            "packed_bytes": {"ours": packed.0, "llama_cpp": packed.1, "ratio": ratio(packed.0, packed.1)},
            "heap_live_kb": {"ours": live.0, "llama_cpp": live.1, "ratio": ratio(live.0, live.1)},
            "heap_held_kb": {"ours": held.0, "llama_cpp": held.1, "ratio": ratio(held.0, held.1)},
            "rss_kb": {"ours": rss.0, "llama_cpp": rss.1, "ratio": ratio(rss.0, rss.1)}}));
    }
    let instructions = if cfg.measure {
        phase(
            "llama: guest instructions per evaluated token, ours vs llama.cpp's KleidiAI path (qemu, exact; 1 thread)",
        );
        Some(measure(env, cfg)?)
    } else {
        None
    };
    let passed = results.iter().filter(|r| r.ok).count();
    println!("\n    {passed} of {} cases passed; {:.0}s", results.len(), t.elapsed().as_secs_f64());
    let json = json!({
        "llama_cpp": "llama-cpp-sys-2 0.1.161 (crates.io)",
        "matrix": cfg.label,
        "model": "llama architecture, n_embd 256, 4 layers (4 heads, 2 KV heads), n_ff 1024, vocab 1000, seed 42; prompt 32 tokens, 16 generated",
        "build_seconds": build_times,
        "cases": results.iter().map(|r| r.json.clone()).collect::<Vec<_>>(),
        "memory": memory,
        "instructions": instructions,
        "passed": passed, "total": results.len(), "ok": ok,
        "seconds": t.elapsed().as_secs_f64(),
    });
    Ok((ok, json))
}

pub fn run(args: &[String]) -> Result<bool, String> {
    let cfg = parse(args)?;
    let env = load_env()?;
    let (ok, json) = phase_run(&env, &cfg)?;
    let path = root().join("target/llama.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap_or_default())
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    println!("{}", if ok { "RESULT: all passed" } else { "RESULT: FAILED" });
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::{RunOut, packed_matches_log, parting};

    /// Two prompt rows and two generated tokens over a vocabulary of 4.
    fn run(tokens: [i32; 2], logits: [[f32; 4]; 3]) -> RunOut {
        let mut all = vec![0.0; 4];
        all.extend(logits.iter().flatten());
        RunOut { tokens: tokens.to_vec(), logits: all, n_vocab: 4, ..RunOut::default() }
    }

    #[test]
    fn packed_bytes_must_match_the_logged_buffer() {
        let logs = vec!["load_tensors: CPU_KLEIDIAI model buffer size = 7.64 MiB".to_string()];
        let mib = |x: f64| (x * 1048576.0) as u64;
        assert!(packed_matches_log("CPU_KLEIDIAI", mib(7.6412), &logs).is_ok());
        assert!(packed_matches_log("CPU_KLEIDIAI", mib(7.66), &logs).is_err());
        // Another buffer's line does not count; no line means an empty buffer.
        assert!(packed_matches_log("CPU_KLEIDIAI_RS", mib(7.64), &logs).is_err());
        assert!(packed_matches_log("CPU_KLEIDIAI_RS", 0, &logs).is_ok());
        assert!(packed_matches_log("CPU_KLEIDIAI", 0, &logs).is_err());
    }

    #[test]
    fn partings_are_ties_only_within_the_tolerance() {
        let plain = run([2, 1], [[1.0, 2.0, 5.0, 0.0], [1.0, 5.0, 4.99, 0.0], [0.0; 4]]);
        // The same tokens: no parting.
        assert!(parting(&plain, &plain, 0.05).is_none());
        // Ours picks 2 where plain picks 1 by 0.01: a tie (bound 2 x 0.05 x |row| / 2 ~ 0.35).
        let ours = run([2, 2], [[1.0, 2.0, 5.0, 0.0], [1.0, 4.995, 5.0, 0.0], [0.0; 4]]);
        let p = parting(&ours, &plain, 0.05).expect("tokens differ");
        assert_eq!(p.position, 2);
        assert!(p.tie && (p.margin - 0.01).abs() < 1e-5, "margin {} bound {}", p.margin, p.bound);
        // A clear choice of plain (margin 4) that ours does not make is no tie.
        let plain = run([2, 1], [[1.0, 2.0, 5.0, 0.0], [1.0, 5.0, 1.0, 0.0], [0.0; 4]]);
        let ours = run([2, 2], [[1.0, 2.0, 5.0, 0.0], [1.0, 5.0, 5.1, 0.0], [0.0; 4]]);
        assert!(!parting(&ours, &plain, 0.05).expect("tokens differ").tie);
    }
}
