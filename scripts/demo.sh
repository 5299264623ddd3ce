#!/usr/bin/env bash
# The demo command: set-up (scripts/setup.sh, the same as the test command's),
# then builds the `demo` example in release mode and runs it: detected CPU
# features, what was built, the kernel selected per operation, and an
# LLM-shaped workload (Q4_0, Q8_0, f32 and f16 weights; m = 1 and m = 32)
# timed and checked against an exact reference.
#
# Usage: scripts/demo.sh [CPU] [demo options]
#   CPU   a qemu-aarch64 CPU model (default on x86: max = SME2, SVL 256), e.g.
#         neoverse-v1, cortex-a53, 'max,sme=off'; or `host` to run natively
#         (the default on aarch64 hosts; on x86 the portable reference runs).
#   demo options: --size N (n = k, default 1024), --threads T, --rows R.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
say() { printf '[demo] %s\n' "$*"; }

cpu=""
case "${1:-}" in
  ""|-*) ;;
  *) cpu=$1; shift ;;
esac
if [ -z "$cpu" ]; then
  if [ "$(uname -m)" = aarch64 ]; then cpu=host; else cpu=max; fi
fi

say "set-up (scripts/setup.sh)"
scripts/setup.sh
# shellcheck disable=SC1091
. .tools/env

if [ "$cpu" = host ]; then
  say "building the demo for this machine ($(uname -m), release; the first build compiles KleidiAI: about a minute)"
  cargo build -q --release -p kleidiai --example demo
  exe=target/release/examples/demo
  say "running natively"
  exec "$exe" "$@"
fi

target=aarch64-unknown-linux-gnu
say "building the demo for $target (release; the first build compiles KleidiAI: about a minute)"
cargo build -q --release -p kleidiai --example demo --target "$target"
exe=target/$target/release/examples/demo
say "running under $("$KLEIDIAI_QEMU" --version | head -1) with -cpu $cpu"
QEMU_CPU=$cpu exec scripts/qemu-run "$exe" "$@"
