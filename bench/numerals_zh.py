#!/usr/bin/env python3
"""Random numbers below 10^8 written as Chinese numerals, one a line: a translation input for
`tgc translate --stats` with a model trained on the built-in numerals task.

    python3 bench/numerals_zh.py --count 600 --seed 1 > nums_zh.txt
"""
import argparse
import random

DIGITS = "零一二三四五六七八九"


def below_10k(n):
    """1..9999: thousands, hundreds, tens, ones, one 零 for each run of missing places."""
    out, gap = "", False
    for power, unit in ((3, "千"), (2, "百"), (1, "十"), (0, "")):
        d = n // 10 ** power % 10
        if d == 0:
            gap = gap or bool(out)
            continue
        if gap:
            out += "零"
            gap = False
        out += DIGITS[d] + unit
    return out


def chinese(n):
    if n < 10000:
        return below_10k(n)
    high, low = divmod(n, 10000)
    out = below_10k(high) + "万"
    if low:
        out += ("零" if low < 1000 else "") + below_10k(low)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    for _ in range(a.count):
        print(chinese(rng.randint(1, 99_999_999)))


if __name__ == "__main__":
    main()
