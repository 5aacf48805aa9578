#!/usr/bin/env python3
"""The model a user writes against the same model written with the builtins.

models/examples/alibi_lm.tg is a pre-LN LM with RMSNorm and ALiBi attention written out by
hand (by_hand=true) or with rms_norm and the library-style -inf mask (by_hand=false). For
each sequence length L (tokens per step held at --tokens, so B = tokens / L) and each
spelling, this script compiles the training step, reads its saved activations from
`tgc compile --train --stats`, and times it with `tgc run --backend cpu --repeat`; the two
spellings' rounds alternate, and each figure is the median of --rounds rounds. The same
step with the forward fusions off (TGC_FORWARD_FUSIONS=0: softmax, no fused_attention)
gives the saved memory an unfused step would keep.

    python3 bench/spellings.py --tgc build/tools/tgc                 # L 64, 256, 1024
    python3 bench/spellings.py --tgc build/tools/tgc --lengths 64 --rounds 1   # smoke run

Prints one line per length and writes --out (JSON).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(REPO, "models", "examples", "alibi_lm.tg")


def compile_step(a, length, by_hand, out, env_extra=None):
    """Compiles the training step to `out`; returns its saved activations in MiB."""
    env = dict(os.environ, **(env_extra or {}))
    cmd = [a.tgc, "compile", MODEL, "--train", "--stats", "--dim", f"T={length}", "--dim",
           f"B={a.tokens // length}", "--set", f"by_hand={'true' if by_hand else 'false'}",
           "--set", f"vocab={a.vocab}", "--schedule", "constant", "--lr", "1e-3", "-o", out]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed:\n{r.stderr}")
    text = r.stdout + r.stderr
    m = re.search(r"saved activations: (\d+) forward values read by the backward, ([\d.]+) (KiB|MiB|GiB)", text)
    if not m:
        sys.exit(f"error: no saved activations in the stats of {out}:\n{text}")
    size = float(m.group(2)) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[m.group(3)]
    fused = len(re.findall(r"fused_attention\b", text)) > 0
    return size, fused


def time_step(a, path):
    """The median run time in ms of one `tgc run --repeat` of the compiled step."""
    cmd = [a.tgc, "run", path, "--backend", "cpu", "--random-inputs", "1", "--int-range",
           f"1,{a.vocab}", "--repeat", str(a.repeat)]
    env = dict(os.environ, TGC_NUM_THREADS=str(a.threads))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed:\n{r.stderr}")
    m = re.search(r"median ([\d.]+) ms", r.stderr)
    if not m:
        sys.exit(f"error: no median in tgc run's output:\n{r.stderr}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tgc", default=os.environ.get("TGC_EXE", os.path.join(REPO, "build", "tools", "tgc")))
    ap.add_argument("--lengths", default="64,256,1024")
    ap.add_argument("--tokens", type=int, default=4096, help="tokens per step (B = tokens / L)")
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3, help="steps per tgc run (the median is taken)")
    ap.add_argument("--out", default="spellings.json")
    a = ap.parse_args()
    if not os.path.exists(a.tgc):
        sys.exit(f"error: no tgc executable at {a.tgc} (--tgc or $TGC_EXE)")
    work = tempfile.mkdtemp(prefix="tgc_spellings_")
    results = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
               "tokens": a.tokens, "vocab": a.vocab, "threads": a.threads, "lengths": {}}
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = -1
    print(f"{MODEL}: {a.tokens} tokens a step, vocab {a.vocab}, {a.threads} thread(s), load {load:.1f}",
          flush=True)
    for length in [int(x) for x in a.lengths.split(",")]:
        paths, saved = {}, {}
        for by_hand in (True, False):
            key = "by_hand" if by_hand else "builtins"
            paths[key] = os.path.join(work, f"{key}_{length}.tir")
            saved[key], fused = compile_step(a, length, by_hand, paths[key])
            if not fused:
                sys.exit(f"error: the {key} step at L {length} has no fused_attention")
        unfused, _ = compile_step(a, length, True, os.path.join(work, f"unfused_{length}.tir"),
                                  {"TGC_FORWARD_FUSIONS": "0"})
        times = {"by_hand": [], "builtins": []}
        for rnd in range(a.rounds):
            for key in (("by_hand", "builtins") if rnd % 2 == 0 else ("builtins", "by_hand")):
                times[key].append(time_step(a, paths[key]))
        med = {k: statistics.median(v) for k, v in times.items()}
        r = results["lengths"][str(length)] = dict(
            batch=a.tokens // length, saved_mib=saved, saved_mib_unfused=unfused, ms=med,
            ms_rounds=times, ratio=med["by_hand"] / med["builtins"])
        print(f"L {length:5d} (B {a.tokens // length:3d}): step by hand {med['by_hand']:8.1f} ms, builtins "
              f"{med['builtins']:8.1f} ms, ratio {r['ratio']:.3f}; saved {saved['by_hand']:.1f} MiB "
              f"(builtins {saved['builtins']:.1f}, forward fusions off {unfused:.1f})", flush=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
