#!/usr/bin/python3
"""tdelta_torch.py OUT_DIR N — fp32 arrays and their bf16 casts by torch,
for test-tdelta.c (exit 77 when torch cannot be imported).

Writes, all little endian:
  f32.bin     N random fp32 values (normal, a spread of scales) with the
              edge values sprinkled in: NaNs with payloads and signs,
              +-0.0, +-Inf, the largest float and values that round to
              Inf, ties (low half exactly 0x8000, even and odd), and
              subnormals (some of which round up into the normals)
  rne.bin     f32.to(torch.bfloat16): torch's round to nearest even
  trunc.bin   the top halves: truncation, not a rounding
  sr.bin      stochastic rounding: the top half of u + a random 16 bits
  clean.bin   N fp32 values without NaN, and clean-rne.bin their cast
"""
import os
import sys

try:
    import numpy as np
    import torch
except ImportError:
    sys.exit(77)

EDGES = [
    0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x7FA0BEEF,
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000,
    0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x7F7FC000,
    0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000, 0x3F807FFF, 0x3F808001,
    0x00000001, 0x00008000, 0x00018000, 0x807FFFFF, 0x007FFFFF, 0x007F8000,
    0x00400000, 0x80000001,
]


def main(out, n):
    g = np.random.default_rng(27)
    scale = 10.0 ** g.integers(-8, 3, n)
    f = (g.standard_normal(n) * scale).astype(np.float32)
    u = f.view(np.uint32)
    pos = g.choice(n, size=min(n, 40 * len(EDGES)), replace=False)
    for k, p in enumerate(pos):
        u[p] = EDGES[k % len(EDGES)]
    u[0], u[-1] = 0x7FC00000, 0x3F808000  # an edge in the first and last element
    t = torch.from_numpy(u.view(np.float32).copy())
    rne = t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    trunc = (u >> 16).astype(np.uint16)
    noise = g.integers(0, 1 << 16, n, dtype=np.uint64)
    sr = ((u.astype(np.uint64) + noise) >> 16).astype(np.uint16)
    clean = (g.standard_normal(n) * 0.02).astype(np.float32)
    crne = torch.from_numpy(clean.copy()).to(torch.bfloat16).view(torch.int16).numpy()
    u.tofile(os.path.join(out, "f32.bin"))
    rne.tofile(os.path.join(out, "rne.bin"))
    trunc.tofile(os.path.join(out, "trunc.bin"))
    sr.tofile(os.path.join(out, "sr.bin"))
    clean.tofile(os.path.join(out, "clean.bin"))
    crne.view(np.uint16).tofile(os.path.join(out, "clean-rne.bin"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
