//! `xtask test`'s options and the CPU models of the matrix.

use crate::util;

pub const USAGE: &str = "usage: cargo run -p xtask --release -- test [options]
  --models a,b,...   only these qemu CPU models (default: the whole matrix)
  --no-compare       skip the cold-build comparison against upstream's CMake (best of 3 interleaved)
  --no-msrv          skip the MSRV check
  --no-downstream    skip cargo package and the downstream crate built from the .crate files
  --no-host          skip the host (x86) run
  --no-fuzz          skip the bounded cargo-fuzz run (host, nightly; also `xtask fuzz` alone)
  --no-arm-fuzz      skip the fuzz targets on aarch64 under qemu (max, cortex-a53; also `xtask fuzz-arm` alone)
  --no-llama         skip llama.cpp with kleidiai-rs on a real model (also `xtask llama` alone, full matrix)
Needs scripts/setup.sh to have run (it writes .tools/env); scripts/test.sh does both.";

pub(super) const TARGET: &str = "aarch64-unknown-linux-gnu";

/// Tiers that have KleidiAI kernels; a model that has one must run a test of it.
/// In order of preference (the selection report must name the last one a
/// model has).
pub(super) const KERNEL_TIERS: [&str; 9] = ["neon", "fp16", "bf16", "dotprod", "i8mm", "sve", "sve2p1", "sme", "sme2"];

pub(super) struct Model {
    pub cpu: &'static str,
    pub tiers: &'static [&'static str],
    pub sve_bytes: u64,
    pub sme_bytes: u64,
}

/// The CPU models and what each is expected to offer (qemu 11.1; see
/// ../shared/design.md section 4). A qemu whose models differ fails loudly.
pub(super) const MODELS: &[Model] = &[
    Model { cpu: "cortex-a53", tiers: &["neon"], sve_bytes: 0, sme_bytes: 0 },
    Model { cpu: "neoverse-n1", tiers: &["neon", "fp16", "dotprod"], sve_bytes: 0, sme_bytes: 0 },
    // qemu >= 10.2 gives neoverse-v1 no bf16.
    Model { cpu: "neoverse-v1", tiers: &["neon", "fp16", "dotprod", "i8mm", "sve"], sve_bytes: 32, sme_bytes: 0 },
    Model {
        cpu: "neoverse-n2",
        tiers: &["neon", "fp16", "bf16", "dotprod", "i8mm", "sve"],
        sve_bytes: 16,
        sme_bytes: 0,
    },
    Model {
        cpu: "max,sme=off",
        tiers: &["neon", "fp16", "bf16", "dotprod", "i8mm", "sve", "sve2p1"],
        sve_bytes: 64,
        sme_bytes: 0,
    },
    Model {
        cpu: "max",
        tiers: &["neon", "fp16", "bf16", "dotprod", "i8mm", "sve", "sve2p1", "sme", "sme2"],
        sve_bytes: 64,
        sme_bytes: 32,
    },
    Model {
        cpu: "max,sme-default-vector-length=64",
        tiers: &["neon", "fp16", "bf16", "dotprod", "i8mm", "sve", "sve2p1", "sme", "sme2"],
        sve_bytes: 64,
        sme_bytes: 64,
    },
];

pub(super) struct Options {
    pub models: Vec<&'static Model>,
    pub compare: bool,
    pub msrv: bool,
    pub host: bool,
    pub downstream: bool,
    pub fuzz: bool,
    pub arm_fuzz: bool,
    pub llama: bool,
}

pub(super) fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        models: MODELS.iter().collect(),
        compare: true,
        msrv: true,
        host: true,
        downstream: true,
        fuzz: true,
        arm_fuzz: true,
        llama: true,
    };
    let mut p = lexopt::Parser::from_args(args);
    while let Some(a) = util::next_arg(&mut p, USAGE)? {
        match a.as_str() {
            "--models" => {
                let list = util::value(&mut p, || "--models needs a value".into())?;
                o.models = Vec::new();
                for name in list.split(';').flat_map(|s| s.split(' ')).filter(|s| !s.is_empty()) {
                    let m = MODELS.iter().find(|m| m.cpu == name).ok_or_else(|| {
                        format!(
                            "unknown model `{name}`; known: {}",
                            MODELS.iter().map(|m| m.cpu).collect::<Vec<_>>().join(" ; ")
                        )
                    })?;
                    o.models.push(m);
                }
            }
            "--no-compare" => o.compare = false,
            "--no-msrv" => o.msrv = false,
            "--no-host" => o.host = false,
            "--no-downstream" => o.downstream = false,
            "--no-fuzz" => o.fuzz = false,
            "--no-arm-fuzz" => o.arm_fuzz = false,
            "--no-llama" => o.llama = false,
            "--help" | "-h" => return Err(USAGE.into()),
            other => return Err(format!("unknown option `{other}`\n{USAGE}")),
        }
    }
    Ok(o)
}
