#!/usr/bin/env python3
"""Writes a regression data set for models/examples/regression.tg as safetensors:
x: f32[N, F] uniform in [-1, 1], y: f32[N, 1] = sin(2 x0) + x1 * x2 - 0.5 x3^2 + 0.1 noise.
Pure Python (no numpy): the safetensors layout is an 8-byte header length, a JSON header and
the raw little-endian tensors.

  python3 scripts/regression_data.py data.safetensors [--rows 4096] [--features 8] [--seed 1]
"""
import argparse
import json
import math
import random
import struct


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--features", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.features < 4:
        p.error("--features must be at least 4")
    rng = random.Random(a.seed)
    xs, ys = [], []
    for _ in range(a.rows):
        x = [rng.uniform(-1, 1) for _ in range(a.features)]
        y = math.sin(2 * x[0]) + x[1] * x[2] - 0.5 * x[3] ** 2 + 0.1 * rng.gauss(0, 1)
        xs += x
        ys.append(y)
    xb = struct.pack(f"<{len(xs)}f", *xs)
    yb = struct.pack(f"<{len(ys)}f", *ys)
    header = {
        "x": {"dtype": "F32", "shape": [a.rows, a.features], "data_offsets": [0, len(xb)]},
        "y": {"dtype": "F32", "shape": [a.rows, 1], "data_offsets": [len(xb), len(xb) + len(yb)]},
    }
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(a.out, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + xb + yb)
    print(f"wrote {a.out}: x f32[{a.rows}, {a.features}], y f32[{a.rows}, 1]")


if __name__ == "__main__":
    main()
