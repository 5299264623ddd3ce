#!/usr/bin/env bash
# The set-up the demo and test commands share (scripts/demo.sh and
# scripts/test.sh run it first). In a git checkout it fetches the KleidiAI
# sources (the vendor/kleidiai submodule); then it installs what building and
# testing kleidiai-rs for aarch64 needs, on a Debian or Ubuntu machine, and
# only what is missing:
#   - the aarch64 cross C toolchain and C library (gcc-aarch64-linux-gnu,
#     g++-aarch64-linux-gnu, libc6-dev-arm64-cross): compiles KleidiAI, links tests;
#   - libclang (libclang-dev): bindgen reads the KleidiAI headers with it;
#   - cmake and clang (clang-19 where the distribution has it): upstream's own
#     build, timed against ours with the same compiler (GCC 12 cannot build
#     upstream's CMake tree: internal compiler error on one file), and the
#     llama phase's llama.cpp builds (scripts/llama/build.sh needs clang-19);
#   - the Rust target aarch64-unknown-linux-gnu (rustup);
#   - for the fuzz phase (host): a nightly Rust toolchain (`rustup toolchain
#     install nightly --profile minimal`; cargo-fuzz needs its sanitizer
#     flags) and cargo-fuzz (`cargo install cargo-fuzz --locked`, from
#     crates.io, into ~/.cargo/bin);
#   - qemu-aarch64 >= 10.1 (SME2 needs it). When the system's is older or
#     missing, Debian's static `qemu-user` package from trixie-backports is
#     downloaded with apt (a private sources list; nothing is installed
#     system-wide) and unpacked into .tools/qemu/ in the project.
# It writes .tools/env, which the test and demo commands source.
#
# Usage: scripts/setup.sh            (idempotent; quick when all is present)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/.tools"
mkdir -p "$tools"

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || die "not root and no sudo: install the packages listed in scripts/setup.sh by hand"
  SUDO="sudo"
fi

# --- KleidiAI sources (a git submodule; see README.md) -----------------------
if [ -d "$root/.git" ] || [ -f "$root/.git" ]; then
  git -C "$root" submodule update --init vendor/kleidiai
fi

command -v cargo >/dev/null || die "cargo not found: install Rust with rustup (https://rustup.rs) first"
command -v apt-get >/dev/null || die "this script needs apt-get (Debian/Ubuntu); see README.md for other systems"

# --- Debian packages -------------------------------------------------------
want=(gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross libclang-dev cmake make git)
if apt-cache show clang-19 >/dev/null 2>&1; then want+=(clang-19 llvm-19); else want+=(clang llvm); fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "system packages present"
fi

# --- Rust target -----------------------------------------------------------
if command -v rustup >/dev/null; then
  if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
    say "adding Rust target aarch64-unknown-linux-gnu"
    rustup target add aarch64-unknown-linux-gnu >/dev/null
  fi
else
  rustc --print target-list | grep -qx aarch64-unknown-linux-gnu || die "no rustup and no aarch64 target"
fi

# --- fuzzing: nightly Rust and cargo-fuzz --------------------------------------
if command -v rustup >/dev/null; then
  if ! rustup toolchain list | grep -q '^nightly'; then
    say "installing the nightly Rust toolchain (cargo fuzz)"
    rustup toolchain install nightly --profile minimal >/dev/null
  fi
  if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    say "installing cargo-fuzz (crates.io)"
    cargo install cargo-fuzz --locked
  fi
else
  say "warning: no rustup: cannot install nightly Rust and cargo-fuzz (the fuzz phase needs them; --no-fuzz skips it)"
fi

# --- qemu-aarch64 >= 10.1 --------------------------------------------------
qemu_ok() { # prints the version of $1 if it is >= 10.1
  local v
  v=$("$1" --version 2>/dev/null | sed -n 's/^qemu-aarch64 version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p') || return 1
  [ -n "$v" ] || return 1
  set -- $v
  [ "$1" -gt 10 ] || { [ "$1" -eq 10 ] && [ "$2" -ge 1 ]; }
}
qemu=""
for cand in "$(command -v qemu-aarch64 || true)" "$(command -v qemu-aarch64-static || true)" "$tools/qemu/usr/bin/qemu-aarch64"; do
  if [ -n "$cand" ] && [ -x "$cand" ] && qemu_ok "$cand"; then qemu="$cand"; break; fi
done
if [ -z "$qemu" ]; then
  say "qemu-aarch64 >= 10.1 not found: fetching Debian's static qemu-user from trixie-backports"
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  if [ ! -f "$keyring" ]; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq debian-archive-keyring >/dev/null \
      || die "need Debian's archive keyring (package debian-archive-keyring) to verify the download"
  fi
  apt_dir="$tools/apt"
  rm -rf "$apt_dir"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/etc"
  echo "deb [signed-by=$keyring] http://deb.debian.org/debian trixie-backports main" >"$apt_dir/etc/sources.list"
  : >"$apt_dir/etc/status"
  aptopts=(-o "Dir::Etc::SourceList=$apt_dir/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
           -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
           -o "Dir::State::Status=$apt_dir/etc/status" -o APT::Architecture=amd64 -o Debug::NoLocking=1
           -o APT::Sandbox::User=root)
  apt-get "${aptopts[@]}" update -qq || die "apt-get update of trixie-backports failed (network?)"
  (cd "$apt_dir" && apt-get "${aptopts[@]}" download qemu-user/trixie-backports >/dev/null) \
    || die "could not download qemu-user from trixie-backports"
  rm -rf "$tools/qemu"
  dpkg -x "$apt_dir"/qemu-user_*.deb "$tools/qemu"
  rm -rf "$apt_dir"
  qemu="$tools/qemu/usr/bin/qemu-aarch64"
  qemu_ok "$qemu" || die "the downloaded qemu-aarch64 does not run or is older than 10.1"
fi
say "qemu: $qemu ($("$qemu" --version | head -1))"

sysroot=/usr/aarch64-linux-gnu
[ -f "$sysroot/lib/ld-linux-aarch64.so.1" ] || die "$sysroot has no aarch64 loader (package libc6-dev-arm64-cross)"

cat >"$tools/env" <<EOF
# Written by scripts/setup.sh. Source it to build and run aarch64 code here.
export KLEIDIAI_QEMU="$qemu"
export KLEIDIAI_SYSROOT="$sysroot"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$root/scripts/qemu-run"
EOF
say "wrote .tools/env"
