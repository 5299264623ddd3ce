#!/usr/bin/env bash
# Compares ggml's own KleidiAI path with kleidiai-rs's `kleidiai::ggml` module,
# bit for bit, under qemu-user for several CPU models.
#
#   GGML_SRC=/path/to/ggml KLEIDIAI_SRC=/path/to/kleidiai-v1.30.0 \
#   [KLEIDIAI_RS=<this repository>] [WORK=<a build directory>] [SKIP_BUILD=1] scripts/ggml-compare/run.sh
#
# KLEIDIAI_SRC can be this repository's vendor/kleidiai. Not part of the test
# command (it needs a ggml checkout); results are reported in CHANGELOG/notes.
#
# Needs: clang-19 (ggml is built with clang: GCC 12 has no +sme), the
# aarch64-linux-gnu binutils/sysroot, cmake, python3, and kleidiai-rs's
# .tools/env (qemu-aarch64, cargo runner/linker).
#
# Steps:
#  1. builds ggml's CPU backend (static, GGML_NATIVE=OFF, GGML_CPU_KLEIDIAI=ON,
#     KleidiAI from $KLEIDIAI_SRC via FETCHCONTENT_SOURCE_DIR_KLEIDIAI_DOWNLOAD)
#     twice: "full" = -march=armv8.2-a+dotprod+i8mm+sve+sme (all of ggml's
#     KleidiAI tables), "dotprod" = -march=armv8.2-a+dotprod+fp16 (for
#     neoverse-n1, which has no SVE: the full build SIGILLs there);
#  2. links ggml_side.cpp against each, with libkai_compat.a (KleidiAI
#     v1.30.0 *_asm.S files ggml's v1.24.0 source list lacks, gen_compat.sh)
#     and --wrap trampolines recording which kai_run_* functions ggml called
#     (gen_trace.sh);
#  3. builds the kleidiai-rs example ggml_compare (aarch64, release);
#  4. for each CPU model, type and m: ggml_side writes inputs + ggml output,
#     ggml_compare reads the inputs and writes ours; compare.py compares.
set -euo pipefail
: "${GGML_SRC:?set GGML_SRC to a ggml checkout}"
: "${KLEIDIAI_SRC:?set KLEIDIAI_SRC to KleidiAI v1.30.0 sources}"
HERE=$(cd "$(dirname "$0")" && pwd)
KLEIDIAI_RS=${KLEIDIAI_RS:-$(cd "$HERE/../.." && pwd)}
WORK=${WORK:-$KLEIDIAI_RS/target/ggml-compare}
mkdir -p "$WORK"
N=${N:-256}
K=${K:-256}
MS=${MS:-"1 3 16 32"}
TYPES=${TYPES:-"q4_0 q8_0 f32 f16"}
cd "$WORK"
# shellcheck disable=SC1091
source "$KLEIDIAI_RS/.tools/env"
QEMU=$KLEIDIAI_QEMU
SYSROOT=$KLEIDIAI_SYSROOT

build_ggml() { # <dir> <march>
  local dir=$1 march=$2
  if [ -z "${SKIP_BUILD:-}" ] || [ ! -f "$dir/src/libggml-cpu.a" ]; then
    cmake -S "$GGML_SRC" -B "$dir" -DCMAKE_TOOLCHAIN_FILE="$HERE/toolchain-aarch64-clang.cmake" \
      -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH="$march" \
      -DGGML_CPU_KLEIDIAI=ON -DFETCHCONTENT_SOURCE_DIR_KLEIDIAI_DOWNLOAD="$KLEIDIAI_SRC" \
      -DFETCHCONTENT_FULLY_DISCONNECTED=ON -DGGML_OPENMP=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >"$dir.log" 2>&1
    cmake --build "$dir" -j2 --target ggml-cpu ggml-base ggml >>"$dir.log" 2>&1
  fi
  "$HERE/gen_trace.sh" "$dir/src/libggml-cpu.a" "$dir"
  "$HERE/gen_compat.sh" "$dir/src/libggml-cpu.a" "$KLEIDIAI_SRC" "$dir" "$march"
  clang++-19 --target=aarch64-linux-gnu -march=armv8.2-a -O2 -std=c++17 -I"$GGML_SRC/include" -I"$dir" \
    "$HERE/ggml_side.cpp" "$dir/kai_trace.S" -o "$dir/ggml_side" $(cat "$dir/kai_trace.ldflags") \
    "$dir/src/libggml.a" "$dir/src/libggml-cpu.a" "$dir/src/libggml-base.a" "$dir/libkai_compat.a" -lpthread -lm
}

build_ggml "$WORK/build-aarch64" "armv8.2-a+dotprod+i8mm+sve+sme"
build_ggml "$WORK/build-aarch64-dotprod" "armv8.2-a+dotprod+fp16"

if [ ! -f "$KLEIDIAI_RS/kleidiai/examples/ggml_compare.rs" ]; then
  echo "missing $KLEIDIAI_RS/kleidiai/examples/ggml_compare.rs (this script drives that example)" >&2
  exit 1
fi
(cd "$KLEIDIAI_RS" && cargo build --release --target aarch64-unknown-linux-gnu -p kleidiai --example ggml_compare -j2)
RS="$KLEIDIAI_RS/target/aarch64-unknown-linux-gnu/release/examples/ggml_compare"

# name | qemu -cpu | ggml build | GGML_KLEIDIAI_SME ("-" = unset)
CONFIGS=(
  "max|max|build-aarch64|-"
  "max-env-sme0|max|build-aarch64|0"
  "max-sme-off|max,sme=off|build-aarch64|-"
  "max-sme-off-sve256|max,sme=off,sve-default-vector-length=32|build-aarch64|-"
  "neoverse-n2|neoverse-n2|build-aarch64|-"
  "neoverse-n1|neoverse-n1|build-aarch64-dotprod|-"
)
summary="$WORK/out/summary.txt"
mkdir -p "$WORK/out"
: >"$summary"
for cfg in "${CONFIGS[@]}"; do
  IFS='|' read -r name cpu build sme <<<"$cfg"
  out="$WORK/out/$name"
  mkdir -p "$out"
  envs=()
  [ "$sme" != "-" ] && envs=(GGML_KLEIDIAI_SME="$sme")
  for t in $TYPES; do
    for m in $MS; do
      tag="$out/${t}_m${m}"
      if ! env "${envs[@]}" "$QEMU" -L "$SYSROOT" -cpu "$cpu" "$WORK/$build/ggml_side" "$t" "$m" "$N" "$K" "$out" \
        >"$tag.ggml.log" 2>&1; then
        echo "$name $t m=$m: ggml_side failed (see $tag.ggml.log)" | tee -a "$summary"
        continue
      fi
      if ! env "${envs[@]}" "$QEMU" -L "$SYSROOT" -cpu "$cpu" "$RS" "$t" "$m" "$N" "$K" "$out" >"$tag.rs.log" 2>&1; then
        echo "$name $t m=$m: ggml_compare failed (see $tag.rs.log)" | tee -a "$summary"
        continue
      fi
      base="$out/${t}_m${m}_n${N}_k${K}"
      res=$(python3 "$HERE/compare.py" "$base.ggml.bin" "$base.rs.bin")
      gk=$(sed -n 's/^ggml called: kai_run_\(matmul_.*\)/kai_\1/p' "$tag.ggml.log" | paste -sd, -)
      rk=$(sed -n 's/^rs kernel for m=[0-9]*: //p' "$tag.rs.log")
      printf '%-20s %-5s m=%-3s %-40s ggml=[%s] rs=[%s]\n' "$name" "$t" "$m" "$res" "${gk:-none: ggml own code, no KleidiAI}" "$rk" |
        tee -a "$summary"
    done
  done
done
