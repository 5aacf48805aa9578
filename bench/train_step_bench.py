#!/usr/bin/env python3
"""Training step (forward + backward + AdamW) of models/transformer.tg: tgc's compiled cpu
backend against PyTorch eager and torch.compile doing the same step on the same number of
threads.

  python3 bench/train_step_bench.py --tgc build/tools/tgc
  python3 bench/train_step_bench.py --tgc build/tools/tgc --presets tiny --shapes 32x16 --steps 5
  python3 bench/train_step_bench.py --tgc build/tools/tgc --no-compile --peak 220
  python3 bench/train_step_bench.py --tgc build/tools/tgc --presets small --shapes 32x32 \
      --rounds 5 --no-compile     # tgc and eager alternating, 5 times: the noisy host's way
  python3 bench/train_step_bench.py --tgc build/tools/tgc --precision bf16 --no-compile
                                  # mixed precision on both sides (below)

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
  compile  the same step with torch.compile (default inductor backend) on the model's forward
           (autograd compiles its backward) and on clipping + AdamW.step (lr a tensor, so the
           noam rate does not recompile), in a fresh worker: warm-up steps until the compiles
           are done (their wall time minus as many steady steps is `tc compile s`), then N timed
           steps. --no-compile skips it; a failure is printed and the column shows FAIL.
Work per step (second table): FLOPs = the matmuls' (`tgc compile --stats`) + fused
attention's (forward 2*B*H*Lq*Lk*(dk+dv), backward twice that; no recompute counted), the
same model work for all three; GFLOP/s of each and its fraction of the FMA peak (measured by
bench/gemm_bench, or --peak); floor: the least tgc/eager ratio the machine allows, with
every matmul at the matmul peak (the FMA peak; in bf16 the VDPBF16PS peak that
bench/gemm_bf16_bench measures), attention at the FMA peak and nothing else taking time;
launches per step: tgc's (generated kernels + GEMMs + library
kernels), PyTorch eager's ATen kernels (ops dispatched in one step, views excluded) and
torch.compile's (generated kernels + extern calls of the compiled graphs that ran in one
step, read from inductor's wrapper code).
--precision bf16: mixed precision on both sides: tgc compiles with --precision bf16 (matmuls
with bf16 operands and f32 accumulation, everything else and the master weights f32), and
PyTorch runs the forward and the loss under torch.autocast("cpu", dtype=torch.bfloat16)
(its recipe: matmuls in bf16, the backward outside the region). The %pk column stays a
fraction of the f32 FMA peak.
All get n threads: TGC_NUM_THREADS if set, else every core (torch.set_num_threads(n)).
Without torch the script says so and prints tgc's figures alone (exit status 0).
"""
import argparse
import collections
import json
import math
import os
import re
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
PRECISION = "fp32"  # --precision: fp32, or bf16 (mixed precision on both sides)


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
           f"S={L}", "--dim", f"T={L}", "--precision", PRECISION, "-o", tir]
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


def tgc_run(tgc, tir, env, work, phase, repeat):
    """One `tgc run` of the step, repeated; returns its timing JSON, max RSS and CPU seconds."""
    timing = os.path.join(work, f"timing_{phase}.json")
    cmd = [tgc, "run", tir, "--backend", "cpu", "--random-inputs", "1", "--int-range",
           f"1,{COMMON['tgt_vocab']}", "--repeat", str(repeat), "--timing-json", timing]
    code, err, maxrss, cpu = run_measured(cmd, env)
    if code != 0:
        sys.exit(f"tgc run failed ({' '.join(cmd)}):\n{err}")
    with open(timing) as f:
        return json.load(f), maxrss, cpu


def tgc_step_time(tgc, tir, env, work, steps, clock):
    """The step's time from the kernel cache: the median wall time of `steps` steps, or with
    --clock cpu the CPU time of steps - 1 of them (a one-step run's CPU time subtracted)."""
    t, maxrss, cpu = tgc_run(tgc, tir, env, work, "cached", steps)
    figures = dict(cached_compile_s=t["compile_s"], median_s=t["median_s"],
                   arena_bytes=t["arena_bytes"], maxrss=maxrss, runs=t["run_s"],
                   threads=t["threads"])
    if clock == "cpu":
        _, _, once = tgc_run(tgc, tir, env, work, "once", 1)
        figures["median_s"] = (cpu - once) / (steps - 1) / t["threads"]
    return figures


def bench_tgc(tgc, preset, B, L, steps, work, clock):
    """Compiles the step, runs it once with an empty kernel cache (cold compile), then times
    it from the cache. Returns the figures, the step's .tir and the environment whose cache
    later rounds reuse (the caller removes TGC_CACHE_DIR)."""
    tir = os.path.join(work, f"{preset}_{B}x{L}.tir")
    graph_s = compile_step(tgc, tir, preset, B, L)
    cache = os.path.join(work, f"cache_{preset}_{B}x{L}")
    os.makedirs(cache)
    env = dict(os.environ, TGC_CACHE_DIR=cache, TGC_NUM_THREADS=str(threads()))
    cold, _, _ = tgc_run(tgc, tir, env, work, "cold", 1)
    figures = {"graph_s": graph_s, "cold_compile_s": cold["compile_s"]}
    figures.update(tgc_step_time(tgc, tir, env, work, steps, clock))
    figures.update(tgc_stats(tgc, preset, B, L, env))  # reads the kernels from the cache
    figures["state_bytes"] = 3 * 4 * sum(math.prod(shape) for _, shape in pc.param_specs(tir))
    figures["flops"] = figures["matmul_flops"] + attention_flops(tir)
    return figures, tir, env


UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def tgc_stats(tgc, preset, B, L, env):
    """`tgc compile --train --target cpu --stats`: the matmuls' FLOPs and the launches of a
    step (generated kernels, GEMMs, library kernels)."""
    cmd = [tgc, "compile", MODEL, "--preset", preset, "--train", "--target", "cpu", "--stats",
           "--dim", f"B={B}", "--dim", f"S={L}", "--dim", f"T={L}", "--precision", PRECISION,
           "-o", os.devnull]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"tgc compile --stats failed ({' '.join(cmd)}):\n{r.stderr}")
    mm = re.search(r"^\s+matmul\s+\d+\s+([\d.]+)([KMGTP]?) FLOPs", r.stdout, re.M)
    launches = re.search(r"launches per run: (\d+) \((\d+) generated kernels, (\d+) GEMMs, "
                         r"(\d+) library kernels\)", r.stdout)
    if not mm or not launches:
        sys.exit(f"cannot read matmul FLOPs and launches from `{' '.join(cmd)}`:\n{r.stdout}")
    return {"matmul_flops": float(mm.group(1)) * UNITS[mm.group(2)],
            "launches": tuple(int(x) for x in launches.groups())}


def attention_flops(tir):
    """Multiply-add FLOPs of the step's fused attention ops, counted as the unfused products
    they replace: forward Q K^T and P V, 2*B*H*Lq*Lk*(dk + dv); fused_attention_grad twice
    that (dV, dP, dQ, dK; the kernel's recompute of Q K^T is not counted). Shapes come from
    the .tir's value types."""
    shapes, ops = {}, []
    with open(tir) as f:
        for line in f:
            if " = " not in line or " : " not in line:
                continue
            lhs, rhs = line.split(" = ", 1)
            types = re.findall(r"\w+\[([\d,]*)\]", rhs.rsplit(" : ", 1)[1])
            for name, t in zip(re.findall(r"%([^\s,]+)", lhs), types):
                shapes[name] = [int(d) for d in t.split(",")] if t else []
            m = re.match(r"\s*(fused_attention(?:_grad)?)\(%([^,)\s]+), %([^,)\s]+), %([^,)\s]+)",
                         rhs)
            if m:
                ops.append(m.groups())
    total = 0
    for op, q, k, v in ops:
        q, k, v = shapes[q], shapes[k], shapes[v]
        fwd = 2 * math.prod(q[:-1]) * k[-2] * (q[-1] + v[-1])
        total += fwd if op == "fused_attention" else 2 * fwd
    return total


def first_figure(cmd, pattern):
    """The first number `pattern` matches in cmd's output; stops cmd there (None if none)."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True) as proc:
        for line in proc.stdout:
            m = re.search(pattern, line)
            if m:
                proc.terminate()
                return float(m.group(1))
    return None


def measure_peak(gemm_bench, clock):
    """The all-threads FMA peak (GFLOP/s) bench/gemm_bench measures first."""
    return first_figure([gemm_bench, "--threads", str(threads()), "--clock", clock, "--shapes",
                         "quick", "--runs", "1", "--min-ms", "1"],
                        r"measured FMA peak.*, ([\d.]+) GFLOP/s on \d+ threads")


def measure_bf16_peak(gemm_bf16_bench):
    """The all-threads VDPBF16PS peak (GFLOP/s) bench/gemm_bf16_bench measures first; None on a
    CPU without AVX512-BF16 (it exits 2)."""
    return first_figure([gemm_bf16_bench, "--threads", str(threads()), "--runs", "1",
                         "--min-ms", "1"], r"measured VDPBF16PS peak ([\d.]+) GFLOP/s")


# ---- PyTorch (worker process) ----------------------------------------------------------------


def rss_now():
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


class TorchStep:
    """The model, its AdamW and one batch; step(s) is one training step. compiled: the same
    step with torch.compile on the forward (autograd compiles the backward with it) and on
    clipping + AdamW.step; the rate is then a tensor filled each step, so that the noam
    schedule does not recompile the optimizer."""

    def __init__(self, cfg, specs, batch, length, compiled=False):
        import torch
        self.torch, self.cfg = torch, cfg
        p = pc.torch_params(pc.random_params(specs, seed=1), torch.float32, requires_grad=True)
        self.model = pc.TorchTransformer(cfg, p, p_drop=P_DROP)
        self.params = list(p.values())
        self.opt = torch.optim.AdamW(self.params, lr=torch.tensor(1.0) if compiled else 1.0,
                                     betas=BETAS, eps=EPS, weight_decay=0.0)
        gen = torch.Generator().manual_seed(1)
        self.batch = [torch.randint(1, cfg["tgt_vocab"], (batch, length), generator=gen)
                      for _ in range(3)]
        self.forward, self.update = self.model.forward, self._update
        if compiled:
            self.forward, self.update = torch.compile(self.forward), torch.compile(self.update)

    def _update(self):
        self.torch.nn.utils.clip_grad_norm_(self.params, CLIP)
        self.opt.step()

    def step(self, s):
        lr = self.cfg["d_model"] ** -0.5 * min(s ** -0.5, s * WARMUP ** -1.5)
        for g in self.opt.param_groups:
            if isinstance(g["lr"], self.torch.Tensor):
                g["lr"].fill_(lr)
            else:
                g["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        with self.torch.autocast("cpu", dtype=self.torch.bfloat16,
                                 enabled=PRECISION == "bf16"):
            loss, _ = self.forward(*self.batch)
        loss.backward()
        self.update()
        return loss.item()


def eager_launches(step):
    """ATen kernels of one eager step: the ops that reach the backend (after autograd and
    decompositions), views excluded."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            rets = func._schema.returns
            if not rets or any(r.alias_info is None or r.alias_info.is_write for r in rets):
                self.n += 1
            return func(*args, **(kwargs or {}))

    with Count() as c:
        step()
    return c.n


def compiled_launches(torch, step):
    """Kernel launches of one torch.compile'd step: the compiled graphs that ran (profiler
    events name them) times the calls in each graph's wrapper (generated C++ kernels, extern
    kernels such as mm, ATen fallbacks). Returns (launches, graphs run) or None."""
    import gc
    from torch._inductor.output_code import CompiledFxGraph
    with torch.profiler.profile() as prof:
        step()
    ran = collections.Counter()
    for e in prof.events():
        m = re.match(r"## Call CompiledFxGraph (\w+) ##", e.name)
        if m:
            ran[m.group(1)] += 1
    sources = {}
    for o in gc.get_objects():
        try:
            if isinstance(o, CompiledFxGraph):
                sources[o._fx_graph_cache_key] = o.source_code
        except ReferenceError:  # a dead weak proxy
            pass
    total = 0
    for key, n in ran.items():
        if key not in sources:
            return None
        lines = sources[key].splitlines()
        start = next(i for i, x in enumerate(lines) if re.match(r"\s*def call\(", x))
        indent = len(lines[start]) - len(lines[start].lstrip())
        body = []
        for x in lines[start + 1:]:
            if x.strip() and len(x) - len(x.lstrip()) <= indent:
                break
            body.append(x)
        calls = re.findall(r"\b(?:cpp_fused_\w+|extern_kernels\.\w+|torch\.ops\.[\w.]+)\(",
                           "\n".join(body))
        total += n * len(calls)
    return total, sum(ran.values())


def torch_worker(args):
    """One configuration's PyTorch step (eager or compiled), timed; prints a JSON line."""
    import gc
    import torch
    torch.set_num_threads(args.threads)
    cfg = dict(COMMON, **PRESETS[args.preset])
    compiled = args.mode == "compile"
    # A two-step run of a toy-sized model first loads every module the step uses (AdamW
    # imports much of torch lazily), so the RSS growth below is the step's own memory.
    warm = TorchStep(dict(COMMON, **TOY), pc.param_specs(args.toy_tir), 2, 3)
    warm.step(1), warm.step(2)
    del warm
    gc.collect()
    base_rss, _ = rss_now()

    bench = TorchStep(cfg, pc.param_specs(args.tir), args.batch, args.len, compiled)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    scale = 1 if args.clock == "wall" else 1 / args.threads
    # Warm-up: allocator and Adam state; compiled, also the compiles (forward + backward and
    # the optimizer's first step, then its steady step: 3 steps by default).
    # The compile time is wall time whatever --clock says: inductor compiles its C++ in
    # worker processes, whose CPU time this process's clock does not see.
    warmup, s = [], 1
    for s in range(1, (args.compile_warmup if compiled else 1) + 1):
        t0 = time.perf_counter()
        bench.step(s)
        warmup.append(time.perf_counter() - t0)
    graphs = _graph_count(torch) if compiled else 0
    times, walls = [], []
    for s in range(s + 1, s + args.steps + 1):
        t0, w0 = clock(), time.perf_counter()
        bench.step(s)
        times.append((clock() - t0) * scale)
        walls.append(time.perf_counter() - w0)
    _, peak = rss_now()
    median = statistics.median(times)
    out = {"median_s": median, "runs": times, "rss_growth": peak - base_rss,
           "threads": torch.get_num_threads()}
    step = lambda: bench.step(s + 1)  # noqa: E731  (one more step, counted)
    if compiled:
        out["compile_s"] = sum(warmup) - len(warmup) * statistics.median(walls)
        out["recompiled"] = _graph_count(torch) != graphs
        counted = compiled_launches(torch, step)
        out["launches"], out["graphs_run"] = counted if counted else (None, None)
    else:
        out["launches"] = eager_launches(step)
    print(json.dumps(out))


def _graph_count(torch):
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


def bench_torch(preset, B, L, steps, tir, toy_tir, clock, mode="eager", warmup=3,
                timeout=None):
    """The worker's figures, or {"error": why} when it fails or runs past timeout (s)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--preset", preset,
           "--batch", str(B), "--len", str(L), "--steps", str(steps), "--tir", tir,
           "--toy-tir", toy_tir, "--threads", str(threads()), "--clock", clock, "--mode", mode,
           "--compile-warmup", str(warmup), "--precision", PRECISION]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if r.returncode != 0:
        if mode == "eager":
            sys.exit(f"PyTorch worker failed:\n{r.stderr}")
        tail = [x for x in r.stderr.strip().splitlines() if x.strip()][-3:]
        return {"error": f"exit {r.returncode}: " + " | ".join(tail)}
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
    ap.add_argument("--rounds", type=int, default=1,
                    help="timed rounds per configuration, tgc and PyTorch eager alternating; "
                    "the tables give the medians (the ratio: of the rounds' ratios)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall: median wall time per step; cpu: process CPU time per step "
                    "divided by the thread count (for a machine other jobs are using)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    ap.add_argument("--compile-warmup", type=int, default=3,
                    help="torch.compile: untimed steps before the timed ones (they compile)")
    ap.add_argument("--compile-timeout", type=float, default=1800,
                    help="torch.compile: seconds before its worker is given up")
    ap.add_argument("--peak", type=float,
                    help="FMA peak in GFLOP/s (default: measured by gemm_bench)")
    ap.add_argument("--gemm-bench",
                    help="bench/gemm_bench that measures the peak (default: next to --tgc's "
                    "build, <build>/bench/gemm_bench)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: mixed precision on both sides (tgc --precision bf16, PyTorch "
                    "under torch.autocast with bfloat16)")
    ap.add_argument("--json", help="also write every figure to this file")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--preset"), ap.add_argument("--batch", type=int)
    ap.add_argument("--len", type=int), ap.add_argument("--tir"), ap.add_argument("--toy-tir")
    ap.add_argument("--threads", type=int), ap.add_argument("--mode", default="eager")
    args = ap.parse_args()
    global PRECISION
    PRECISION = args.precision
    if args.torch_worker:
        return torch_worker(args)

    torch_ok, why = have_torch()
    if args.rounds < 1:
        sys.exit("--rounds must be 1 or more")
    if args.clock == "cpu" and args.steps < 2:
        sys.exit("--clock cpu needs --steps 2 or more")
    compiled = torch_ok and not args.no_compile
    print(f"train-step benchmark: {threads()} threads, {args.steps} timed steps per "
          f"configuration and round, {args.rounds} round(s), {args.clock} clock, "
          f"{PRECISION}{' (mixed precision: tgc --precision bf16, PyTorch autocast)' if PRECISION == 'bf16' else ''}, "
          f"load average {os.getloadavg()[0]:.2f}")
    if not torch_ok:
        print(f"PyTorch is not installed ({why}): tgc's figures only "
              "(pip install torch to compare)")
    peak, peak_from = args.peak, "--peak"
    if peak is None:
        gb = args.gemm_bench or os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(args.tgc))), "bench", "gemm_bench")
        peak, peak_from = (measure_peak(gb, args.clock), gb) if os.path.exists(gb) else (None, gb)
    print(f"FMA peak: {f'{peak:.1f} GFLOP/s' if peak else 'unknown'} on {threads()} threads "
          f"({'from ' + peak_from if peak else 'no ' + peak_from + '; build it or pass --peak'})")
    # The matmuls' peak, for the floor column: the f32 FMA peak, or in bf16 the VDPBF16PS one.
    matmul_peak = peak
    if PRECISION == "bf16":
        bb = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.tgc))), "bench",
                          "gemm_bf16_bench")
        matmul_peak = measure_bf16_peak(bb) if os.path.exists(bb) else None
        print("bf16 matmul peak: " + (f"{matmul_peak:.1f} GFLOP/s (VDPBF16PS, from {bb})"
                                      if matmul_peak else f"unknown (no {bb}, or no AVX512-BF16)"))
    tc = "compile" if compiled else None
    header = (f"{'preset':6} {'BxL':6} | {'tgc ms':>8} {'torch ms':>9} {'tgc/torch':>9} "
              f"{'compile ms':>10} {'tgc/compile':>11} | {'graph s':>7} {'cold s':>7} "
              f"{'cached s':>8} {'tc compile s':>12} | {'state':>6} {'arena':>6} "
              f"{'tgc RSS':>7} {'tgc +RSS':>8} {'torch +RSS':>10} {'tc +RSS':>7}")
    results = []
    with tempfile.TemporaryDirectory(prefix="tgc_train_bench_") as work:
        base_rss = tgc_base_rss(args.tgc, work)
        what = "median wall time" if args.clock == "wall" else "CPU time / threads"
        print(f"times (ms): {what} of a step (torch = PyTorch eager, compile = torch.compile); "
              f"compile (s): graph = tgc compile --train,\ncold/cached = kernels in tgc run, "
              f"tc compile = wall time of torch.compile's warm-up steps minus as many steady steps;\n"
              f"memory (MiB): state = parameters + Adam moments, arena, max RSS of tgc run, and "
              f"the growth over tgc's own {mib(base_rss):.0f} MiB / over PyTorch's after import")
        if not compiled:
            print("torch.compile: " + ("skipped (--no-compile)" if torch_ok else "no PyTorch"))
        print(header)
        print("-" * len(header))
        toy_tir = os.path.join(work, "toy.tir")
        if torch_ok:
            compile_step(args.tgc, toy_tir, "tiny", 2, 3, [f"{k}={v}" for k, v in TOY.items()])
        for preset in args.presets.split(","):
            for shape in args.shapes.split(","):
                B, L = (int(x) for x in shape.split("x"))
                t, tir, env = bench_tgc(args.tgc, preset, B, L, args.steps, work, args.clock)
                p = bench_torch(preset, B, L, args.steps, tir, toy_tir, args.clock) \
                    if torch_ok else None
                # Further rounds alternate tgc and eager, so that both see the host's slow
                # and fast minutes alike; the ratio is the median of the rounds' ratios.
                rounds = [(t["median_s"], p["median_s"] if p else None)]
                for _ in range(1, args.rounds):
                    tr = tgc_step_time(args.tgc, tir, env, work, args.steps, args.clock)
                    pr = bench_torch(preset, B, L, args.steps, tir, toy_tir, args.clock) \
                        if torch_ok else None
                    rounds.append((tr["median_s"], pr["median_s"] if pr else None))
                shutil.rmtree(env["TGC_CACHE_DIR"], ignore_errors=True)
                t["round_s"] = [a for a, _ in rounds]
                t["median_s"] = statistics.median(t["round_s"])
                if p:
                    p["round_s"] = [b for _, b in rounds]
                    p["median_s"] = statistics.median(p["round_s"])
                    ratio = statistics.median(a / b for a, b in rounds)
                c = bench_torch(preset, B, L, args.steps, tir, toy_tir, args.clock, tc,
                                args.compile_warmup, args.compile_timeout) if compiled else None
                if c and "error" in c:
                    print(f"torch.compile FAILED for {preset} {shape}: {c['error']}", flush=True)
                c_ok = c and "error" not in c
                row = f"{preset:6} {shape:6} | {t['median_s'] * 1e3:8.1f} "
                row += (f"{p['median_s'] * 1e3:9.1f} {ratio:9.2f} "
                        if p else f"{'-':>9} {'-':>9} ")
                row += (f"{c['median_s'] * 1e3:10.1f} {t['median_s'] / c['median_s']:11.2f} | "
                        if c_ok else f"{'FAIL' if c else '-':>10} {'-':>11} | ")
                row += (f"{t['graph_s']:7.2f} {t['cold_compile_s']:7.2f} "
                        f"{t['cached_compile_s']:8.2f} ")
                row += f"{c['compile_s']:12.1f} | " if c_ok else f"{'-':>12} | "
                row += (f"{mib(t['state_bytes']):6.0f} {mib(t['arena_bytes']):6.0f} "
                        f"{mib(t['maxrss']):7.0f} {mib(t['maxrss'] - base_rss):8.0f} ")
                row += f"{mib(p['rss_growth']):10.0f} " if p else f"{'-':>10} "
                row += f"{mib(c['rss_growth']):7.0f}" if c_ok else f"{'-':>7}"
                print(row, flush=True)
                if args.rounds > 1:
                    ms = lambda xs: "/".join(f"{x * 1e3:.0f}" for x in xs)  # noqa: E731
                    print(f"  rounds: tgc ms {ms(t['round_s'])}" + (
                        f", torch ms {ms(p['round_s'])}, tgc/torch "
                        + "/".join(f"{a / b:.2f}" for a, b in rounds) if p else ""))
                if c_ok and c.get("recompiled"):
                    print(f"  note: torch.compile compiled again during the timed steps of "
                          f"{preset} {shape} (raise --compile-warmup)")
                results.append(dict(preset=preset, shape=shape, tgc=t, eager=p,
                                    ratio=ratio if p else None,
                                    compile=c if c_ok else None,
                                    compile_error=c["error"] if c and not c_ok else None))
    print_work(results, peak, matmul_peak)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": threads(), "clock": args.clock, "steps": args.steps,
                       "rounds": args.rounds,
                       "peak_gflops": peak, "matmul_peak_gflops": matmul_peak,
                       "configurations": results}, f, indent=1)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


def floor_ratio(tgc_fig, eager_fig, peak, matmul_peak):
    """The least tgc/eager time ratio this machine allows: the step's matmuls all at
    matmul_peak and its attention FLOPs at the f32 peak, nothing else costing any time, over
    eager's median. None when a figure is missing."""
    if not (eager_fig and peak and matmul_peak):
        return None
    attn = tgc_fig["flops"] - tgc_fig["matmul_flops"]
    best_s = (tgc_fig["matmul_flops"] / matmul_peak + attn / peak) / 1e9
    return best_s / eager_fig["median_s"]


def print_work(results, peak, matmul_peak):
    """The second table: FLOPs, achieved GFLOP/s (and of the peak), the floor of tgc/eager,
    launches per step."""
    def rate(flops, fig):
        if not fig:
            return f"{'-':>7} {'-':>5} "
        g = flops / fig["median_s"] / 1e9
        return f"{g:7.1f} {f'{100 * g / peak:4.0f}%' if peak else '-':>5} "

    print("\nwork per step: GFLOP = matmuls (tgc compile --stats) + fused attention (model "
          "FLOPs, same for all); GFLOP/s and % of the FMA peak;\nfloor = the least tgc/eager "
          "ratio this machine allows: every matmul at the matmul peak, attention at the FMA "
          "peak, nothing else taking any time;\nlaunches: tgc = generated "
          "kernels + GEMMs + library kernels, eager = ATen kernels dispatched (views excluded), "
          "compile = generated + extern kernels of the graphs run")
    header = (f"{'preset':6} {'BxL':6} | {'GFLOP':>7} {'attn':>6} | {'tgc':>7} {'%pk':>5} "
              f"{'eager':>7} {'%pk':>5} {'compile':>7} {'%pk':>5} | {'floor':>5} | "
              f"{'tgc launches':>22} {'eager':>6} {'compile':>7}")
    print(header)
    print("-" * len(header))
    for r in results:
        t, p, c = r["tgc"], r["eager"], r["compile"]
        attn = t["flops"] - t["matmul_flops"]
        n, gen, gemm, lib = t["launches"]
        floor = floor_ratio(t, p, peak, matmul_peak)
        r["floor"] = floor
        row = (f"{r['preset']:6} {r['shape']:6} | {t['flops'] / 1e9:7.2f} {attn / 1e9:6.2f} | "
               + rate(t["flops"], t) + rate(t["flops"], p) + rate(t["flops"], c)
               + f"| {f'{floor:.2f}' if floor else '-':>5} "
               + f"| {f'{n} ({gen}+{gemm}+{lib})':>22} "
               + f"{p['launches'] if p else '-':>6} "
               + f"{(c['launches'] or '?') if c else '-':>7}")
        print(row)


if __name__ == "__main__":
    sys.exit(main())
