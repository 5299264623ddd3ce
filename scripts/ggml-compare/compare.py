#!/usr/bin/env python3
"""compare.py a.bin b.bin -> 'identical' or 'DIFF n/total max_abs=... max_rel=...'"""
import array, math, sys
a, b = array.array('f'), array.array('f')
a.frombytes(open(sys.argv[1], 'rb').read()); b.frombytes(open(sys.argv[2], 'rb').read())
if len(a) != len(b):
    print(f"SIZE {len(a)} vs {len(b)}"); sys.exit(0)
if a.tobytes() == b.tobytes():
    print("identical"); sys.exit(0)
nd, mabs, mrel = 0, 0.0, 0.0
for x, y in zip(a, b):
    if x != y or math.isnan(x) != math.isnan(y):
        nd += 1; d = abs(x - y); mabs = max(mabs, d); mrel = max(mrel, d / max(abs(x), abs(y), 1e-30))
print(f"DIFF {nd}/{len(a)} max_abs={mabs:.3e} max_rel={mrel:.3e}")
