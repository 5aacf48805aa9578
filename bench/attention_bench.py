#!/usr/bin/env python3
"""Attention forward + backward: tgc's fused kernels (fused_attention + fused_attention_grad,
codegen/attention_cpu.cpp) against tgc's unfused graph of plain ops and PyTorch's
scaled_dot_product_attention, at head dim 64 and L = 64 ... 1024.

  python3 bench/attention_bench.py --tgc build/tools/tgc
  python3 bench/attention_bench.py --tgc build/tools/tgc --lengths 64,256 --repeat 5 --causal

One step is out = softmax(scale q k^T [masked]) v and the gradients dq, dk, dv for a given
dout, at q, k, v, dout of shape [B, H, L, D] (f32):
  tgc fused    the graph attn-ir's fuse-attention pass makes: fused_attention then
               fused_attention_grad (the backward recomputes p from the saved lse).
  tgc unfused  the same step as plain ops, the graph autodiff makes without the fusion:
               matmul, scale, [where(iota mask)], softmax, matmul; the backward's matmuls and
               softmax rule (ds = p * (dp - sum(p * dp))), p [B, H, L, L] kept for it.
  torch        F.scaled_dot_product_attention(q, k, v, is_causal) and out.backward(dout), in
               a fresh worker process per L (torch.set_num_threads(threads)).
tgc runs each graph file with `tgc run --backend cpu --random-inputs 1 --repeat N
--timing-json` (TGC_NUM_THREADS=threads); figures: the median of the N run times, the
executable's arena (every intermediate buffer of the step; inputs and results live
outside it), and the max RSS of the `tgc run` process (wait4; the header gives that of a
trivial graph's run: the binary, LLVM, the thread pool). torch's memory is the growth of
the worker's peak RSS (VmHWM) over its RSS once q, k, v, dout exist (so it holds out, the
gradients and what autograd saves). Without torch the
script says so and prints tgc's figures alone.

The saved-activation check: the arena of the fused step must grow O(L) (lse [B, H, L]),
the unfused one O(L^2) (s, p, dp, ds [B, H, L, L]); the script prints the arena ratio
between consecutive lengths (2x L: ~2x for O(L), ~4x for O(L^2)).
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile

WORKER = r"""
import json, math, resource, statistics, sys, time
import torch
import torch.nn.functional as F
B, H, L, D, causal, repeat, threads, cpu_clock = json.loads(sys.argv[1])
clock = time.process_time if cpu_clock else time.perf_counter
torch.set_num_threads(threads)
def vmhwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
def vmrss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
g = torch.Generator().manual_seed(1)
q, k, v, dout = (torch.rand(B, H, L, D, generator=g) * 2 - 1 for _ in range(4))
for t in (q, k, v):
    t.requires_grad_(True)
def step():
    for t in (q, k, v):
        t.grad = None
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out.backward(dout)
base = vmrss()
step()  # warm-up
times = []
for _ in range(repeat):
    t0 = clock()
    step()
    times.append((clock() - t0) / (threads if cpu_clock else 1))
print(json.dumps({"median_s": statistics.median(times), "peak_growth": vmhwm() - base}))
"""


def attention_graphs(B, H, L, D, causal):
    """The fused and the unfused step as Graph IR text."""
    t4 = f"f32[{B},{H},{L},{D}]"
    tl = f"f32[{B},{H},{L},{L}]"
    scale = 1.0 / D ** 0.5
    attrs = f"scale={scale!r}" + (", causal=true" if causal else "")
    head = [f"  %{n} = input() : {t4}" for n in ("q", "k", "v", "dout")]
    fused = ["graph @attention_fused {", *head,
             f"  %out, %lse = fused_attention(%q, %k, %v) {{{attrs}}} : {t4}, f32[{B},{H},{L}]",
             f"  %dq, %dk, %dv = fused_attention_grad(%q, %k, %v, %out, %lse, %dout) "
             f"{{{attrs}}} : {t4}, {t4}, {t4}",
             "  return %out, %dq, %dk, %dv", "}"]
    unfused = ["graph @attention_unfused {", *head,
               f"  %scale = constant() {{value=[{scale!r}]}} : f32[]",
               f"  %s = matmul(%q, %k) {{transpose_b=true}} : {tl}",
               f"  %scaled = mul(%s, %scale) : {tl}"]
    logits = "%scaled"
    if causal:
        unfused += [f"  %row = iota() {{axis=0}} : i64[{L},{L}]",
                    f"  %col = iota() {{axis=1}} : i64[{L},{L}]",
                    f"  %allow = ge(%row, %col) : bool[{L},{L}]",
                    "  %ninf = constant() {value=[-inf]} : f32[]",
                    f"  %masked = where(%allow, %scaled, %ninf) : {tl}"]
        logits = "%masked"
    unfused += [f"  %p = softmax({logits}) {{axis=-1}} : {tl}",
                f"  %out = matmul(%p, %v) : {t4}",
                f"  %dv = matmul(%p, %dout) {{transpose_a=true}} : {t4}",
                f"  %dp = matmul(%dout, %v) {{transpose_b=true}} : {tl}",
                f"  %pdp = mul(%p, %dp) : {tl}",
                f"  %rowsum = reduce_sum(%pdp) {{axes=[-1], keepdims=true}} : f32[{B},{H},{L},1]",
                f"  %centered = sub(%dp, %rowsum) : {tl}",
                f"  %ds = mul(%p, %centered) : {tl}",
                f"  %dscaled = mul(%ds, %scale) : {tl}",
                f"  %dq = matmul(%dscaled, %k) : {t4}",
                f"  %dk = matmul(%dscaled, %q) {{transpose_a=true}} : {t4}",
                "  return %out, %dq, %dk, %dv", "}"]
    return "\n".join(fused) + "\n", "\n".join(unfused) + "\n"


def run_tgc(tgc, tir, repeat, threads, cache, cpu_clock=False):
    """Seconds per run, arena bytes and max RSS of `tgc run`: the median wall time of
    `repeat` runs, or with cpu_clock the process's CPU time per run over the threads (the
    CPU time of 1 + repeat runs less that of 1 run, both with the kernel cache filled, so
    compiling and input generation drop out)."""
    if cpu_clock:
        run_tgc_once(tgc, tir, 1, threads, cache)  # fills the kernel cache: no compile below
        _, _, _, one = run_tgc_once(tgc, tir, 1, threads, cache)
        _, arena, rss, many = run_tgc_once(tgc, tir, repeat + 1, threads, cache)
        return (many - one) / repeat / threads, arena, rss
    median, arena, rss, _ = run_tgc_once(tgc, tir, repeat, threads, cache)
    return median, arena, rss


def run_tgc_once(tgc, tir, repeat, threads, cache):
    """Median seconds, arena bytes, max RSS and CPU seconds of one `tgc run`."""
    with tempfile.NamedTemporaryFile(suffix=".json") as tj, tempfile.TemporaryFile() as err:
        cmd = [tgc, "run", tir, "--backend", "cpu", "--random-inputs", "1", "--repeat",
               str(repeat), "--timing-json", tj.name]
        env = dict(os.environ, TGC_NUM_THREADS=str(threads), TGC_CACHE_DIR=cache)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            sys.exit(f"{' '.join(cmd)} failed:\n{err.read().decode(errors='replace')}")
        j = json.load(open(tj.name))
        return (j["median_s"], j["arena_bytes"], usage.ru_maxrss * 1024,
                usage.ru_utime + usage.ru_stime)


def run_torch(B, H, L, D, causal, repeat, threads, cpu_clock):
    r = subprocess.run([sys.executable, "-c", WORKER,
                        json.dumps([B, H, L, D, causal, repeat, threads, cpu_clock])],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"torch worker failed:\n{r.stderr}")
    j = json.loads(r.stdout)
    return j["median_s"], j["peak_growth"]


def mib(b):
    return f"{b / 2**20:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tgc", default="build/tools/tgc")
    ap.add_argument("--lengths", default="64,128,256,512,1024")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=10, help="timed runs per configuration")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--causal", action="store_true", help="causal masks in all three")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: CPU time per run / threads (for a machine other jobs share)")
    a = ap.parse_args()
    # Not imported here: a forked `tgc run` would start with this process's pages and
    # report torch's size as its max RSS.
    have_torch = importlib.util.find_spec("torch") is not None
    if not have_torch:
        print("torch is not installed: PyTorch columns skipped")
    B, H, D = a.batch, a.heads, a.dim
    print(f"attention fwd+bwd, B={B} H={H} D={D} f32, {'causal' if a.causal else 'no mask'}, "
          f"{a.threads} threads, " +
          (f"median of {a.repeat} runs (wall clock)" if a.clock == "wall" else
           f"CPU time of {a.repeat} runs / {a.threads} threads"))
    print(f"{'L':>5} | {'fused ms':>9} {'unfused ms':>10} {'torch ms':>9} | "
          f"{'fused arena MiB':>15} {'unfused arena MiB':>17} | "
          f"{'fused RSS MiB':>13} {'unfused RSS MiB':>15} {'torch RSS+ MiB':>14}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        trivial = os.path.join(tmp, "trivial.tir")
        with open(trivial, "w") as f:
            f.write("graph @t {\n  %x = input() : f32[4]\n  %y = add(%x, %x) : f32[4]\n"
                    "  return %y\n}\n")
        print(f"(max RSS of tgc run on a trivial graph: "
              f"{mib(run_tgc(a.tgc, trivial, 1, a.threads, cache)[2])} MiB)")
        cpu = a.clock == "cpu"
        for L in [int(x) for x in a.lengths.split(",")]:
            fused, unfused = attention_graphs(B, H, L, D, a.causal)
            paths = []
            for name, text in (("fused", fused), ("unfused", unfused)):
                p = os.path.join(tmp, f"{name}_{L}.tir")
                with open(p, "w") as f:
                    f.write(text)
                paths.append(p)
            fs, fa, fr = run_tgc(a.tgc, paths[0], a.repeat, a.threads, cache, cpu)
            us, ua, ur = run_tgc(a.tgc, paths[1], a.repeat, a.threads, cache, cpu)
            ts, tm = (run_torch(B, H, L, D, a.causal, a.repeat, a.threads, cpu) if have_torch
                      else (None, None))
            rows.append((L, fa, ua))
            print(f"{L:>5} | {fs * 1e3:>9.2f} {us * 1e3:>10.2f} "
                  f"{(f'{ts * 1e3:.2f}' if ts else '-'):>9} | {mib(fa):>15} {mib(ua):>17} | "
                  f"{mib(fr):>13} {mib(ur):>15} "
                  f"{(mib(tm) if tm is not None else '-'):>14}",
                  flush=True)
    print("arena growth per doubling of L (O(L): ~2x, O(L^2): ~4x):")
    for (l0, f0, u0), (l1, f1, u1) in zip(rows, rows[1:]):
        print(f"  L {l0} -> {l1}: fused {f1 / max(f0, 1):.2f}x, unfused {u1 / max(u0, 1):.2f}x")


if __name__ == "__main__":
    main()
