#!/usr/bin/env bash
# The test command: set-up (scripts/setup.sh: submodule, packages, qemu),
# then the whole suite: host tests, every qemu CPU model of the matrix, the
# packaged crates built by a downstream crate, the MSRV check and the
# cold-build comparison against upstream's CMake. Prints one table; writes
# target/test-matrix.json (and target/conformance.json). Non-zero exit status
# when anything failed. Extra arguments go to `xtask test` (see --help).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
export KLEIDIAI_SETUP_SECONDS=$SECONDS
# shellcheck disable=SC1091
. .tools/env
exec cargo run -q -p xtask --release -- test "$@"
