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

The PyTorch twin (the same model, written as a PyTorch user writes it: RMSNorm and ALiBi by
hand, a -1e9 mask, AdamW) runs the same steps eager and under torch.compile, timed the same
way (torch.compile's compile time apart), with the bytes its autograd saves counted by
saved_tensors_hooks. Without torch that part is skipped, and the script says so.

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


def torch_twin(a, length):
    """The PyTorch model's step at L: median ms eager and compiled, compile seconds, saved MiB."""
    import math
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    d, heads, d_ff, layers, pad = 256, 4, 1024, 4, 0
    dh = d // heads

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.g1 = torch.nn.Parameter(torch.ones(d))
            self.g2 = torch.nn.Parameter(torch.ones(d))
            self.wq, self.wk, self.wv, self.wo = (torch.nn.Linear(d, d, bias=False) for _ in range(4))
            self.up, self.down = torch.nn.Linear(d, d_ff), torch.nn.Linear(d_ff, d)

        @staticmethod
        def norm(x, g):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g

        def forward(self, x, bias, allowed):
            B, T, _ = x.shape
            n = self.norm(x, self.g1)
            q, k, v = (w(n).view(B, T, heads, dh).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
            s = (q @ k.transpose(-1, -2)) / math.sqrt(dh) + bias
            s = s.masked_fill(~allowed, -1e9)
            o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, d)
            x = x + self.wo(o)
            return x + self.down(F.gelu(self.up(self.norm(x, self.g2))))

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(a.vocab, d, padding_idx=pad)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
            self.g_out = torch.nn.Parameter(torch.ones(d))

        def forward(self, tokens, targets):
            T = tokens.shape[1]
            i = torch.arange(T)
            allowed = (i[None, :] <= i[:, None])[None, None]
            slopes = torch.exp((torch.arange(heads) + 1.0) * (-8.0 / heads * math.log(2.0)))
            bias = slopes.view(1, heads, 1, 1) * (i[None, :] - i[:, None]).float()[None, None]
            x = self.embed(tokens)
            for b in self.blocks:
                x = b(x, bias, allowed)
            logits = Block.norm(x, self.g_out) @ self.embed.weight.t()
            return F.cross_entropy(logits.view(-1, a.vocab), targets.view(-1), ignore_index=pad)

    B = a.tokens // length
    tokens = torch.randint(1, a.vocab, (B, length))
    targets = torch.randint(1, a.vocab, (B, length))
    out = {}
    for mode in ("eager", "compile"):
        model = LM()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        fn = torch.compile(model) if mode == "compile" else model

        def step():
            opt.zero_grad(set_to_none=True)
            loss = fn(tokens, targets)
            loss.backward()
            opt.step()

        t0 = time.perf_counter()
        step()  # warm-up (and the compile)
        out[f"{mode}_first_s"] = time.perf_counter() - t0
        times = []
        for _ in range(a.rounds * a.repeat):
            t0 = time.perf_counter()
            step()
            times.append(1000 * (time.perf_counter() - t0))
        out[f"{mode}_ms"] = statistics.median(times)
        if mode == "eager":  # the bytes autograd keeps for the backward, each storage once
            seen = {}

            def pack(t):
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
                return t

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = model(tokens, targets)
            del loss
            params = {p.untyped_storage().data_ptr() for p in model.parameters()}
            out["saved_mib"] = sum(v for k, v in seen.items() if k not in params) / 2**20
    return out


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
    ap.add_argument("--no-torch", action="store_true", help="tgc only")
    a = ap.parse_args()
    have_torch = False
    if not a.no_torch:
        try:
            import torch  # noqa: F401
            have_torch = True
        except ImportError:
            print("torch is not installed (pip install torch): the PyTorch twin is skipped", flush=True)
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
        if have_torch:
            t = r["torch"] = torch_twin(a, length)
            print(f"          PyTorch: eager {t['eager_ms']:8.1f} ms (tgc / eager {med['by_hand'] / t['eager_ms']:.2f}), "
                  f"torch.compile {t['compile_ms']:8.1f} ms (tgc / compile {med['by_hand'] / t['compile_ms']:.2f}, "
                  f"first step {t['compile_first_s']:.0f} s); eager saves {t['saved_mib']:.1f} MiB", flush=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
