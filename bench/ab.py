#!/usr/bin/env python3
"""A/B of two tgc builds, or of one build under two sets of environment switches, on the
training step (or on any command): the two sides run alternately for N rounds, and the
tool prints each round, each side's median and the median of the rounds' B/A ratios (on a
noisy host the ratio of two neighbouring runs is steadier than either median).

  bench/ab.py [options] A B

A and B are each "[VAR=value ...] [BUILD]": BUILD is a build directory (its tools/tgc is
run) or a tgc binary, build/ when left out; the VAR=value words are set for that side's
compile and runs. "" is build/ as it is. Examples:

  bench/ab.py --preset base --precision bf16 --rounds 8 'TGC_NO_GEMM_CAST_FOLD=1' ''
  bench/ab.py --preset small --rounds 5 build-old build       # two builds (two revisions)
  bench/ab.py --preset small --threads 1 --rounds 5 --profile 'fwd=^lib:(?!grad\\.).*attention' \\
      --profile 'bwd=^lib:grad\\..*attention' 'TGC_NO_ATTENTION_LAYOUT=1' ''
  bench/ab.py --graph dwdb.tir --threads 1 --repeat 200 --cpu 'TGC_NO_BIAS_GRAD_FOLD=1' ''
  bench/ab.py --command '{build}/bench/gemm_bench --shape 1024x512x8000:b --no-blas \\
      --runs 5 --min-ms 40' --figure 'GFLOP/s=^1024x512x8000\\S*\\s+([\\d.]+)' \\
      'TGC_NO_GEMM_K_SPLIT=1' ''

The step: each side compiles --model (models/transformer.tg) with `--preset P --train
--target cpu` by its own tgc under its own switches (so compile-time switches such as
TGC_NO_ATTENTION_LAYOUT=1 count; the "launches per run" line of `--stats` is printed for
each), then every run is `tgc run STEP --backend cpu --random-inputs 1 --int-range 1,8000
--repeat R --timing-json`, whose figure is the median of its steps after the first. Each side has its own kernel cache (a fresh
directory, filled by the compile), so two builds never load each other's kernels. The order
alternates: A then B in odd rounds, B then A in even ones.

Figures (each gets its median per side and the median and range of the rounds' B/A):
  step ms              always (tgc run), the median step of a run;
  --profile NAME=RE    the launches whose name matches the regular expression RE, summed
                       from `tgc run --profile` (ms a step, the runs after the first); the
                       step figure then comes from the profiled runs too;
  --cpu                the process's CPU time a step, all threads: (CPU of the --repeat R
                       run - CPU of a --repeat 1 run) / (R - 1); usable when other jobs load
                       the host, which the wall clock is not;
  --command CMD        instead of tgc run: CMD through the shell with {build} and {tgc}
                       replaced by the side's, and one --figure NAME=RE per figure: the
                       first group of RE's last match in the output (stdout and stderr).
Threads: TGC_NUM_THREADS=--threads unless a side sets it.
"""
import argparse
import json
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {"tiny": "32x16", "small": "32x32", "base": "16x64"}  # train_step_bench.py's


class Side:
    def __init__(self, label, spec, work):
        self.label, self.spec, self.env, build = label, spec, {}, None
        for word in shlex.split(spec):
            if re.match(r"[A-Za-z_][A-Za-z0-9_]*=", word):
                key, value = word.split("=", 1)
                self.env[key] = value
            elif build is None:
                build = word
            else:
                sys.exit(f"ab.py: side {label} ({spec!r}) names two builds")
        build = os.path.abspath(build or os.path.join(REPO, "build"))
        if os.path.isdir(build):
            self.build, self.tgc = build, os.path.join(build, "tools", "tgc")
        else:  # a tgc binary: its build directory is two levels up
            self.build, self.tgc = os.path.dirname(os.path.dirname(build)), build
        self.cache = os.path.join(work, f"cache_{label}")
        self.graph = os.path.join(work, f"step_{label}.tir")
        self.json = os.path.join(work, f"timing_{label}.json")

    def environ(self, threads):
        env = dict(os.environ, TGC_NUM_THREADS=str(threads), TGC_CACHE_DIR=self.cache)
        env.update(self.env)
        return env

    def describe(self):
        switches = " ".join(f"{k}={v}" for k, v in self.env.items())
        return f"{switches + ' ' if switches else ''}{self.tgc}"


def run(cmd, env, shell=False):
    """Runs cmd; returns (output, CPU seconds of the child, user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, env=env, shell=shell, cwd=REPO, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        shown = cmd if isinstance(cmd, str) else " ".join(shlex.quote(c) for c in cmd)
        sys.exit(f"ab.py: failed (exit {p.returncode}): {shown}\n{p.stdout[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return p.stdout, cpu


def load():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("a", metavar="A", help='side A: "[VAR=value ...] [BUILD]"')
    ap.add_argument("b", metavar="B", help='side B: "[VAR=value ...] [BUILD]"')
    ap.add_argument("--preset", default="small", choices=sorted(SHAPES))
    ap.add_argument("--shape", help="BxL (batch x source and target length); default: "
                    "tiny 32x16, small 32x32, base 16x64")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--model", default=os.path.join(REPO, "models", "transformer.tg"),
                    help="the model file the step is compiled from")
    ap.add_argument("--graph", help="run this Graph IR file instead of the compiled step")
    ap.add_argument("--int-range", default="1,8000", help="tgc run --int-range (token ids)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10, help="steps a run (tgc run --repeat)")
    ap.add_argument("--profile", action="append", default=[], metavar="NAME=RE")
    ap.add_argument("--cpu", action="store_true", help="also CPU ms a step (all threads)")
    ap.add_argument("--command", help="a command to time instead of tgc run ({build}, {tgc})")
    ap.add_argument("--figure", action="append", default=[], metavar="NAME=RE")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (graphs, caches)")
    args = ap.parse_args()

    def named(items, flag):
        out = []
        for item in items:
            name, sep, rx = item.partition("=")
            if not sep or not name:
                sys.exit(f"ab.py: {flag} wants NAME=REGEX, got {item!r}")
            out.append((name, re.compile(rx, re.M)))
        return out

    profiles, figures = named(args.profile, "--profile"), named(args.figure, "--figure")
    if args.command and not figures:
        sys.exit("ab.py: --command needs at least one --figure NAME=REGEX")
    if args.command and (profiles or args.cpu or args.graph):
        sys.exit("ab.py: --command takes --figure only (not --profile, --cpu, --graph)")
    if args.cpu and args.repeat < 2:
        sys.exit("ab.py: --cpu needs --repeat 2 or more")

    work = args.keep or tempfile.mkdtemp(prefix="tgc_ab_")
    os.makedirs(work, exist_ok=True)
    sides = [Side("A", args.a, work), Side("B", args.b, work)]
    try:
        for s in sides:
            if not args.command and not os.access(s.tgc, os.X_OK):
                sys.exit(f"ab.py: side {s.label}: no tgc at {s.tgc}")
            print(f"{s.label}: {s.describe()}")
        names = [n for n, _ in figures] if args.command else (
            ["step ms"] + [f"{n} ms" for n, _ in profiles] + (["CPU ms"] if args.cpu else []))

        if not args.command:
            what = args.graph or "{} --preset {} {} {}".format(
                os.path.relpath(args.model, REPO), args.preset, args.shape or SHAPES[args.preset],
                args.precision)
            print(f"step: {what}; {args.threads} thread(s), {args.repeat} steps a run, "
                  f"{args.rounds} rounds")
            for s in sides:  # compile (its own graph, switches and kernel cache), then warm up
                if args.graph:
                    s.graph = os.path.abspath(args.graph)
                else:
                    b, l = (args.shape or SHAPES[args.preset]).split("x")
                    out, _ = run([s.tgc, "compile", os.path.abspath(args.model),
                                  "--preset", args.preset, "--train", "--target", "cpu",
                                  "--dim", f"B={b}", "--dim", f"S={l}", "--dim", f"T={l}",
                                  "--precision", args.precision, "--stats", "-o", s.graph],
                                 s.environ(args.threads))
                    stats = [x for x in out.splitlines() if x.startswith("launches per run")]
                    print(f"{s.label} {stats[0] if stats else '(no launch count)'}")
                run(step_cmd(s, args, 1, profile=False), s.environ(args.threads))
        else:
            print(f"command: {args.command}; {args.rounds} rounds")

        results = {s.label: [] for s in sides}
        for r in range(1, args.rounds + 1):
            order = sides if r % 2 else sides[::-1]
            for s in order:
                results[s.label].append(measure(s, args, profiles, figures))
            a, b = results["A"][-1], results["B"][-1]
            cells = "  ".join(f"{n} A {x:.3f} B {y:.3f} ({ratio(y, x)})"
                              for n, x, y in zip(names, a, b))
            print(f"round {r} ({order[0].label} first)  {cells}  load {load()}", flush=True)

        print(f"{'figure':<16} {'median A':>10} {'median B':>10}  B/A per round: median (range)")
        for i, n in enumerate(names):
            xa = [v[i] for v in results["A"]]
            xb = [v[i] for v in results["B"]]
            rs = [y / x for x, y in zip(xa, xb) if x]
            spread = f"{statistics.median(rs):.3f} ({min(rs):.3f}-{max(rs):.3f})" if rs else "-"
            print(f"{n:<16} {statistics.median(xa):>10.3f} {statistics.median(xb):>10.3f}  {spread}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def ratio(y, x):
    return f"{y / x:.3f}" if x else "-"


def step_cmd(s, args, repeat, profile):
    cmd = [s.tgc, "run", s.graph, "--backend", "cpu", "--random-inputs", "1",
           "--int-range", args.int_range, "--repeat", str(repeat), "--timing-json", s.json]
    if profile:
        cmd += ["--profile", "--profile-top", "100000"]
    return cmd


def measure(s, args, profiles, figures):
    env = s.environ(args.threads)
    if args.command:
        out, _ = run(args.command.replace("{build}", shlex.quote(s.build))
                     .replace("{tgc}", shlex.quote(s.tgc)), env, shell=True)
        values = []
        for name, rx in figures:
            found = list(rx.finditer(out))
            if not found:
                sys.exit(f"ab.py: figure {name}: no match in the output of side {s.label}:\n"
                         f"{out[-3000:]}")
            values.append(float(found[-1].group(1)))
        return values
    out, cpu = run(step_cmd(s, args, args.repeat, profile=bool(profiles)), env)
    with open(s.json) as f:
        steps = json.load(f)["run_s"]
    steps = steps[1:] if len(steps) > 1 else steps
    values = [statistics.median(steps) * 1e3]
    launches = re.findall(r"^\s+[\d.]+%\s+([\d.]+) ms\s+(\S+)", out, re.M)
    for _, rx in profiles:
        values.append(sum(float(ms) for ms, name in launches if rx.search(name)))
    if args.cpu:
        _, cpu1 = run(step_cmd(s, args, 1, profile=False), env)
        values.append((cpu - cpu1) * 1e3 / (args.repeat - 1))
    return values


if __name__ == "__main__":
    main()
