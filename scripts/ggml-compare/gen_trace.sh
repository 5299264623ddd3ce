#!/usr/bin/env bash
# Generates kai_trace.S (linker --wrap trampolines that record which KleidiAI
# run functions ggml called, then tail-call the real ones; any signature) and
# kai_trace.inc (their names) from the undefined kai_run_* symbols of libggml-cpu.a.
set -euo pipefail
lib=$1; out=$2
syms=$(aarch64-linux-gnu-nm "$lib" | awk '$1=="U" && $2 ~ /^kai_run_(matmul|lhs|rhs)_/ {print $2}' | sort -u)
{
  echo '    .text'
  i=0
  for s in $syms; do
    cat <<ASM
    .globl __wrap_$s
    .type __wrap_$s, %function
    .p2align 2
__wrap_$s:
    adrp x16, kai_trace_called
    add x16, x16, :lo12:kai_trace_called
    mov w17, #1
    strb w17, [x16, #$i]
    b __real_$s
ASM
    i=$((i+1))
  done
  echo "    .bss"
  echo "    .globl kai_trace_called"
  echo "kai_trace_called:"
  echo "    .zero $(( i > 0 ? i : 1 ))"
  echo '    .section .note.GNU-stack,"",%progbits'
} > "$out/kai_trace.S"
{ for s in $syms; do echo "\"$s\","; done; } > "$out/kai_trace.inc"
{ for s in $syms; do printf -- "-Wl,--wrap=%s " "$s"; done; } > "$out/kai_trace.ldflags"
