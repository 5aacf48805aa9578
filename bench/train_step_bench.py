#!/usr/bin/env python3
"""Training step (forward + backward + AdamW) of models/transformer.tg: tgc's compiled cpu
backend against PyTorch eager doing the same step on the same number of threads.

  python3 bench/train_step_bench.py --tgc build/tools/tgc
  python3 bench/train_step_bench.py --tgc build/tools/tgc --presets tiny --shapes 32x16 --steps 5

For each preset (tiny, small, base) and shape BxL (batch B, source and target length L):
  tgc      `tgc compile --train` (the paper's dropout 0.1, AdamW, noam schedule, clipping at
           1.0), then `tgc run --backend cpu --random-inputs 1 --int-range 1,V --repeat N
           --timing-json`: once with an empty kernel cache (cold compile) and once more with
           the cache it filled (cached compile, and the step times). Figures from the JSON:
           median_s, compile_s, arena_bytes; max RSS of the `tgc run` process from wait4.
  PyTorch  the same model (tests/parity/parity_common.py's TorchTransformer with dropout 0.1),
           random ids in [1, V), torch.optim.AdamW (betas 0.9/0.98, eps 1e-9) with the noam
           rate and clip_grad_norm_(1.0), in a fresh worker process per configuration: the
           median of N timed steps after one warm-up step, and the growth of the process's
           peak RSS (VmHWM) over its RSS after `import torch` (before the model exists).
Both get n threads: TGC_NUM_THREADS if set, else every core (torch.set_num_threads(n)).
Without torch the script says so and prints tgc's figures alone (exit status 0).
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(REPO, "models", "transformer.tg")
sys.path.insert(0, os.path.join(REPO, "tests", "parity"))
import parity_common as pc  # noqa: E402  (the reference model; imports nothing heavy)

# models/transformer.tg's presets (both vocabularies 8000, pad 0).
PRESETS = {
    "tiny": dict(d_model=64, heads=4, d_ff=256, n_enc=2, n_dec=2),
    "small": dict(d_model=256, heads=4, d_ff=1024, n_enc=3, n_dec=3),
    "base": dict(d_model=512, heads=8, d_ff=2048, n_enc=6, n_dec=6),
}
COMMON = dict(src_vocab=8000, tgt_vocab=8000, label_smoothing=0.1, pad=0, ln_eps=1e-5,
              use_bias=True)
SHAPES = ["32x16", "32x32", "16x64"]
# The PyTorch worker's warm-up model (vocabularies overridden too).
TOY = dict(d_model=8, heads=2, d_ff=16, n_enc=1, n_dec=1, src_vocab=16, tgt_vocab=16)
P_DROP, WARMUP, CLIP, BETAS, EPS = 0.1, 4000, 1.0, (0.9, 0.98), 1e-9


def threads():
    return int(os.environ.get("TGC_NUM_THREADS") or os.cpu_count() or 1)


def run_measured(cmd, env):
    """Runs cmd; returns (exit status, stderr, max RSS in bytes, CPU seconds) of that one
    process."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return (proc.returncode, err.read().decode(errors="replace"), usage.ru_maxrss * 1024,
                usage.ru_utime + usage.ru_stime)


# ---- tgc -----------------------------------------------------------------------------------


def compile_step(tgc, tir, preset, B, L, sets=()):
    """tgc compile --train; returns the seconds it took."""
    cmd = [tgc, "compile", MODEL, "--preset", preset, "--train", "--dim", f"B={B}", "--dim",
           f"S={L}", "--dim", f"T={L}", "-o", tir]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tgc compile failed ({' '.join(cmd)}):\n{r.stderr}")
    return time.perf_counter() - t0


NOOP = """graph @noop {
  %x = input() : f32[4]
  %y = add(%x, %x) : f32[4]
  return %y
}
"""


def tgc_base_rss(tgc, work):
    """Max RSS of `tgc run --backend cpu` on a one-op graph: the process's fixed cost (code,
    LLVM), subtracted from the step's max RSS to give its growth."""
    path = os.path.join(work, "noop.tir")
    with open(path, "w") as f:
        f.write(NOOP)
    env = dict(os.environ, TGC_CACHE_DIR=os.path.join(work, "noop_cache"))
    code, err, maxrss, _ = run_measured([tgc, "run", path, "--backend", "cpu", "--random-inputs",
                                      "1"], env)
    if code != 0:
        sys.exit(f"tgc run failed on a one-op graph:\n{err}")
    return maxrss


def bench_tgc(tgc, preset, B, L, steps, work, clock):
    tir = os.path.join(work, f"{preset}_{B}x{L}.tir")
    graph_s = compile_step(tgc, tir, preset, B, L)
    cache = os.path.join(work, f"cache_{preset}_{B}x{L}")
    os.makedirs(cache)
    env = dict(os.environ, TGC_CACHE_DIR=cache, TGC_NUM_THREADS=str(threads()))
    figures = {"graph_s": graph_s}
    # cold: an empty kernel cache; cached: the step times; once: one step, whose CPU time is
    # subtracted from the cached run's to give the CPU time of steps - 1 steps.
    phases = (("cold", 1), ("cached", steps)) + ((("once", 1),) if clock == "cpu" else ())
    for phase, repeat in phases:
        timing = os.path.join(work, f"timing_{phase}.json")
        cmd = [tgc, "run", tir, "--backend", "cpu", "--random-inputs", "1", "--int-range",
               f"1,{COMMON['tgt_vocab']}", "--repeat", str(repeat), "--timing-json", timing]
        code, err, maxrss, cpu = run_measured(cmd, env)
        if code != 0:
            sys.exit(f"tgc run failed ({' '.join(cmd)}):\n{err}")
        with open(timing) as f:
            t = json.load(f)
        figures[phase + "_compile_s"] = t["compile_s"]
        figures[phase + "_cpu_s"] = cpu
        if phase == "cached":
            figures.update(median_s=t["median_s"], arena_bytes=t["arena_bytes"], maxrss=maxrss,
                           runs=t["run_s"], threads=t["threads"])
    if clock == "cpu":
        figures["median_s"] = ((figures["cached_cpu_s"] - figures["once_cpu_s"]) /
                               (steps - 1) / figures["threads"])
    shutil.rmtree(cache, ignore_errors=True)
    figures["state_bytes"] = 3 * 4 * sum(math.prod(shape) for _, shape in pc.param_specs(tir))
    return figures, tir


# ---- PyTorch (worker process) ----------------------------------------------------------------


def rss_now():
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


class TorchStep:
    """The model, its AdamW and one batch; step(s) is one training step."""

    def __init__(self, cfg, specs, batch, length):
        import torch
        self.torch, self.cfg = torch, cfg
        p = pc.torch_params(pc.random_params(specs, seed=1), torch.float32, requires_grad=True)
        self.model = pc.TorchTransformer(cfg, p, p_drop=P_DROP)
        self.params = list(p.values())
        self.opt = torch.optim.AdamW(self.params, lr=1.0, betas=BETAS, eps=EPS, weight_decay=0.0)
        gen = torch.Generator().manual_seed(1)
        self.batch = [torch.randint(1, cfg["tgt_vocab"], (batch, length), generator=gen)
                      for _ in range(3)]

    def step(self, s):
        lr = self.cfg["d_model"] ** -0.5 * min(s ** -0.5, s * WARMUP ** -1.5)
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        loss, _ = self.model.forward(*self.batch)
        loss.backward()
        self.torch.nn.utils.clip_grad_norm_(self.params, CLIP)
        self.opt.step()
        return loss.item()


def torch_worker(args):
    """One configuration's PyTorch step, timed; prints a JSON line."""
    import gc
    import torch
    torch.set_num_threads(args.threads)
    cfg = dict(COMMON, **PRESETS[args.preset])
    # A two-step run of a toy-sized model first loads every module the step uses (AdamW
    # imports much of torch lazily), so the RSS growth below is the step's own memory.
    warm = TorchStep(dict(COMMON, **TOY), pc.param_specs(args.toy_tir), 2, 3)
    warm.step(1), warm.step(2)
    del warm
    gc.collect()
    base_rss, _ = rss_now()

    bench = TorchStep(cfg, pc.param_specs(args.tir), args.batch, args.len)
    bench.step(1)  # warm-up: allocator, Adam state
    times = []
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    scale = 1 if args.clock == "wall" else 1 / args.threads
    for s in range(2, args.steps + 2):
        t0 = clock()
        bench.step(s)
        times.append((clock() - t0) * scale)
    _, peak = rss_now()
    print(json.dumps({"median_s": statistics.median(times), "runs": times,
                      "rss_growth": peak - base_rss, "threads": torch.get_num_threads()}))


def bench_torch(preset, B, L, steps, tir, toy_tir, clock):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--preset", preset,
           "--batch", str(B), "--len", str(L), "--steps", str(steps), "--tir", tir,
           "--toy-tir", toy_tir, "--threads", str(threads()), "--clock", clock]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"PyTorch worker failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---- main ------------------------------------------------------------------------------------


def have_torch():
    r = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True)
    return r.returncode == 0, (r.stderr.strip().splitlines() or [""])[-1]


def mib(b):
    return b / 2 ** 20


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tgc", default=os.path.join(REPO, "build", "tools", "tgc"),
                    help="the tgc executable (default build/tools/tgc)")
    ap.add_argument("--presets", default="tiny,small,base")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="BxL list (batch x length)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per configuration")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall: median wall time per step; cpu: process CPU time per step "
                    "divided by the thread count (for a machine other jobs are using)")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--preset"), ap.add_argument("--batch", type=int)
    ap.add_argument("--len", type=int), ap.add_argument("--tir"), ap.add_argument("--toy-tir")
    ap.add_argument("--threads", type=int)
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(args)

    torch_ok, why = have_torch()
    if args.clock == "cpu" and args.steps < 2:
        sys.exit("--clock cpu needs --steps 2 or more")
    print(f"train-step benchmark: {threads()} threads, {args.steps} timed steps per "
          f"configuration, {args.clock} clock, load average {os.getloadavg()[0]:.2f}")
    if not torch_ok:
        print(f"PyTorch is not installed ({why}): tgc's figures only "
              "(pip install torch to compare)")
    header = (f"{'preset':6} {'BxL':6} | {'tgc ms':>8} {'torch ms':>9} {'tgc/torch':>9} | "
              f"{'graph s':>7} {'cold s':>7} {'cached s':>8} | {'state':>6} {'arena':>6} "
              f"{'tgc RSS':>7} {'tgc +RSS':>8} {'torch +RSS':>10}")
    with tempfile.TemporaryDirectory(prefix="tgc_train_bench_") as work:
        base_rss = tgc_base_rss(args.tgc, work)
        what = "median wall time" if args.clock == "wall" else "CPU time / threads"
        print(f"times (ms): {what} of a step; compile (s): graph = tgc compile --train, "
              f"cold/cached = kernels in tgc run;\nmemory (MiB): state = parameters + Adam "
              f"moments, arena, max RSS of tgc run, and the growth over tgc's own "
              f"{mib(base_rss):.0f} MiB / over PyTorch's after import")
        print(header)
        print("-" * len(header))
        toy_tir = os.path.join(work, "toy.tir")
        if torch_ok:
            compile_step(args.tgc, toy_tir, "tiny", 2, 3, [f"{k}={v}" for k, v in TOY.items()])
        for preset in args.presets.split(","):
            for shape in args.shapes.split(","):
                B, L = (int(x) for x in shape.split("x"))
                t, tir = bench_tgc(args.tgc, preset, B, L, args.steps, work, args.clock)
                row = (f"{preset:6} {shape:6} | {t['median_s'] * 1e3:8.1f} ")
                if torch_ok:
                    p = bench_torch(preset, B, L, args.steps, tir, toy_tir, args.clock)
                    row += (f"{p['median_s'] * 1e3:9.1f} {t['median_s'] / p['median_s']:9.2f} | ")
                else:
                    row += f"{'-':>9} {'-':>9} | "
                row += (f"{t['graph_s']:7.2f} {t['cold_compile_s']:7.2f} "
                        f"{t['cached_compile_s']:8.2f} | {mib(t['state_bytes']):6.0f} "
                        f"{mib(t['arena_bytes']):6.0f} "
                        f"{mib(t['maxrss']):7.0f} {mib(t['maxrss'] - base_rss):8.0f} ")
                row += f"{mib(p['rss_growth']):10.0f}" if torch_ok else f"{'-':>10}"
                print(row, flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
