#!/usr/bin/env bash
# ggml's CMake lists KleidiAI sources for v1.24.0. In v1.30.0 several kernels
# moved their bodies into a sibling *_asm.S (symbol kai_kernel_<name>) that
# ggml's list lacks, and kai_common_sme_asm.S (built with +sme) calls the SME
# ABI routine __arm_tpidr2_save, which GCC 12's libgcc lacks. Without touching
# ggml, build the missing pieces into <out>/libkai_compat.a.
set -euo pipefail
lib=$1; kai=$2; out=$3; march=$4
mkdir -p "$out/kai_compat"; rm -f "$out"/kai_compat/*.o "$out/libkai_compat.a"
undef=$(aarch64-linux-gnu-nm "$lib" | awk '$1=="U" && $2 ~ /^kai_kernel_/ {print $2}' | sort -u)
def=$(aarch64-linux-gnu-nm "$lib" | awk '$2 ~ /^[TtDd]$/ && $3 ~ /^kai_kernel_/ {print $3}' | sort -u)
for s in $undef; do
  grep -qx "$s" <<<"$def" && continue
  name=${s#kai_kernel_}
  f=$(find "$kai/kai/ukernels" -name "kai_${name}_asm.S" | head -1)
  [ -n "$f" ] || { echo "no asm source for $s" >&2; exit 1; }
  echo "compat: $(realpath --relative-to="$kai" "$f")"
  clang-19 --target=aarch64-linux-gnu "-march=$march+sve+sve2+sme2+fp16" -I"$kai" -c "$f" -o "$out/kai_compat/$(basename "$f" .S).o"
done
cat > "$out/kai_compat/tpidr2.c" <<'C'
/* __arm_tpidr2_save is only called when TPIDR2_EL0 is non-zero (a lazy ZA
 * save pending). Nothing in this program sets one up, so reaching it is a bug. */
#include <stdlib.h>
#include <stdio.h>
void __arm_tpidr2_save(void) { fputs("__arm_tpidr2_save: unexpected lazy ZA save\n", stderr); abort(); }
C
clang-19 --target=aarch64-linux-gnu -O2 -c "$out/kai_compat/tpidr2.c" -o "$out/kai_compat/tpidr2.o"
aarch64-linux-gnu-ar rcs "$out/libkai_compat.a" "$out"/kai_compat/*.o
