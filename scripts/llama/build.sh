#!/usr/bin/env bash
# The build step of the llama.cpp integration: llama.cpp for aarch64 with
# kleidiai-rs as ggml's KleidiAI provider, and the two variants it is
# compared with. llama.cpp's source is the crates.io package llama-cpp-sys-2
# (pinned below), fetched by cargo into its registry cache; nothing of it is
# copied into this repository. Everything is built under target/llama/.
#
#   scripts/llama/build.sh [VARIANT...]     (default: plain kleidiai kleidiai-rs)
#
#   plain        ggml's CPU backend without KleidiAI
#   kleidiai     llama.cpp's own KleidiAI path (GGML_CPU_KLEIDIAI=ON), its KleidiAI
#                sources from vendor/kleidiai (v1.30.0) instead of a download
#   kleidiai-rs  GGML_CPU_KLEIDIAI=OFF, plus kleidiai-capi/ggml/kleidiai-rs.cmake:
#                the shim compiled into ggml-cpu and libkleidiai_capi.a linked
#
# Each variant gives target/llama/build-<variant>/kairs-llama (scripts/llama/driver.cpp).
# The kleidiai and kleidiai-rs variants link the plain build's llama, ggml and
# ggml-base libraries and compile only ggml-cpu. Compiler: clang-19 (GCC 12
# crashes on one KleidiAI file of llama.cpp's own build), for kleidiai-capi's
# KleidiAI sources too. Prints
# "built <variant> <seconds>" per variant.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/scripts/llama"
LLAMA_SYS_VERSION=${LLAMA_SYS_VERSION:-0.1.161}
work="$root/target/llama"
jobs=${JOBS:-2}

die() { printf '[llama] error: %s\n' "$*" >&2; exit 1; }
say() { printf '[llama] %s\n' "$*"; }

[ -f "$root/.tools/env" ] || die "no .tools/env: run scripts/setup.sh first"
# shellcheck disable=SC1091
. "$root/.tools/env"
command -v clang-19 >/dev/null || die "clang-19 not found: run scripts/setup.sh (it installs clang-19 and llvm-19)"
command -v cmake >/dev/null || die "cmake not found: run scripts/setup.sh"
[ -f "$root/vendor/kleidiai/CMakeLists.txt" ] || die "vendor/kleidiai is empty: git submodule update --init vendor/kleidiai"

# llama.cpp's source: a throwaway crate depending on the pinned package.
fetch="$work/fetch"
mkdir -p "$fetch/src"
cat >"$fetch/Cargo.toml" <<TOML
[package]
name = "kairs-llama-fetch"
version = "0.0.0"
edition = "2021"
publish = false
[workspace]
[dependencies]
llama-cpp-sys-2 = "=$LLAMA_SYS_VERSION"
TOML
: >"$fetch/src/lib.rs"
cargo fetch -q --manifest-path "$fetch/Cargo.toml" \
  || die "cannot fetch llama-cpp-sys-2 =$LLAMA_SYS_VERSION from crates.io (network access to crates.io, or a cargo cache that holds it, is needed)"
manifest=$(cargo metadata -q --offline --format-version 1 --manifest-path "$fetch/Cargo.toml" \
  | grep -o "\"manifest_path\":\"[^\"]*llama-cpp-sys-2-$LLAMA_SYS_VERSION/Cargo.toml\"" | head -1 | cut -d'"' -f4)
src="$(dirname "$manifest")/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || die "llama-cpp-sys-2 $LLAMA_SYS_VERSION has no llama.cpp/CMakeLists.txt at '$src'"
echo "$src" >"$work/llama-src.txt"

variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(plain kleidiai kleidiai-rs)
for v in "${variants[@]}"; do
  b="$work/build-$v"
  args=(-DKAIRS_LLAMA_SRC="$src" -DKAIRS_VARIANT="$v")
  t0=$(date +%s.%N)
  case $v in
    plain) ;;
    kleidiai) args+=(-DKAIRS_KLEIDIAI_SRC="$root/vendor/kleidiai") ;;
    kleidiai-rs)
      # KleidiAI's C compiled by the compiler llama.cpp's own KleidiAI build
      # uses (clang-19), so the comparison is of the integrations, not of
      # two compilers; in a target directory of its own, so the test suite's
      # (GCC) build is not redone.
      say "building libkleidiai_capi.a (cargo, aarch64, release, KleidiAI by clang-19)"
      (cd "$root" && CARGO_TARGET_DIR="$work/cargo" CC_aarch64_unknown_linux_gnu=clang-19 \
        CFLAGS_aarch64_unknown_linux_gnu=--target=aarch64-linux-gnu \
        cargo build -q --release -p kleidiai-capi --target aarch64-unknown-linux-gnu) \
        || die "building kleidiai-capi for aarch64 failed"
      args+=(-DKAIRS_CAPI_LIB="$work/cargo/aarch64-unknown-linux-gnu/release/libkleidiai_capi.a") ;;
    *) die "unknown variant '$v' (plain, kleidiai, kleidiai-rs)" ;;
  esac
  if [ "$v" != plain ]; then
    [ -f "$work/build-plain/llama.cpp/src/libllama.a" ] || die "build the plain variant first (it provides llama, ggml, ggml-base)"
    args+=(-DKAIRS_SHARE_FROM="$work/build-plain")
  fi
  say "building $v in $b"
  cmake -S "$here" -B "$b" -DCMAKE_TOOLCHAIN_FILE="$here/toolchain-aarch64-clang.cmake" \
    -DCMAKE_BUILD_TYPE=Release "${args[@]}" >"$b.log" 2>&1 || die "configuring $v failed: see $b.log"
  cmake --build "$b" -j"$jobs" --target kairs-llama >>"$b.log" 2>&1 || die "building $v failed: see $b.log"
  t1=$(date +%s.%N)
  echo "built $v $(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }")"
done
