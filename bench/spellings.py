#!/usr/bin/env python3
"""Models as users write them: each spelling's training step against the builtins' spelling,
PyTorch eager and torch.compile, and saved-activation memory by sequence length.

The models (--models, all by default):
  alibi_lm     models/examples/alibi_lm.tg, a pre-LN LM with RMSNorm and ALiBi attention
               written out by hand (by_hand=true) or with rms_norm and the library-style -inf
               mask (by_hand=false).
  t5_encoder   models/examples/t5_encoder.tg, a T5 v1.1-style encoder: RMSNorm, a learned
               relative-position bias in T5's buckets, HF's float padding penalty added to
               it, a gated FFN with the tanh GELU written out (by_hand=true), or the same
               with rms_norm, gelu and where(mask, s + bias, -inf) (by_hand=false).
  transformer  models/transformer.tg --preset small, the library's own encoder-decoder (one
               spelling: nn.tg's), source and target both of length L.

For each model, each sequence length L (tokens per step held at --tokens, so B = tokens /
L) and each spelling, the script compiles the training step (AdamW, clipping at 1.0), reads
its saved activations from `tgc compile --train --stats`, and times it with `tgc run
--backend cpu --repeat`; the spellings' rounds alternate, and each figure is the median of
--rounds rounds. The same step with the forward fusions off (TGC_FORWARD_FUSIONS=0: softmax,
no fused_attention) gives the saved memory an unfused step would keep.

Each model's PyTorch twin (the same model written as a PyTorch user writes it: by hand, with
-1e9 masks; the Transformer is tests/parity's reference implementation) runs the same steps
eager and under torch.compile, timed the same way (the compile time apart), with the bytes
its autograd saves counted by saved_tensors_hooks. Without torch that part is skipped, and
the script says so.

    python3 bench/spellings.py --tgc build/tools/tgc                 # every model, L 64, 256, 1024
    python3 bench/spellings.py --models t5_encoder --lengths 64 --rounds 1   # smoke run

Prints one line per model and length and writes --out (JSON).
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "parity"))

BY_HAND = {"by_hand": ["--set", "by_hand=true"], "builtins": ["--set", "by_hand=false"]}

MODELS = {
    "alibi_lm": dict(path="models/examples/alibi_lm.tg", spellings=BY_HAND,
                     dims=lambda B, L: {"B": B, "T": L}, sets=lambda v: {"vocab": v}),
    "t5_encoder": dict(path="models/examples/t5_encoder.tg", spellings=BY_HAND,
                       dims=lambda B, L: {"B": B, "T": L}, sets=lambda v: {"vocab": v}),
    "transformer": dict(path="models/transformer.tg", spellings={"library": ["--preset", "small"]},
                        dims=lambda B, L: {"B": B, "S": L, "T": L},
                        sets=lambda v: {"src_vocab": v, "tgt_vocab": v}),
}


def compile_step(a, model, spelling, length, out, env_extra=None):
    """Compiles the training step to `out`; returns its saved activations in MiB and whether
    it holds a fused_attention."""
    m = MODELS[model]
    env = dict(os.environ, **(env_extra or {}))
    cmd = [a.tgc, "compile", os.path.join(REPO, m["path"]), "--train", "--stats",
           "--schedule", "constant", "--lr", "1e-3", "-o", out] + m["spellings"][spelling]
    for k, v in m["dims"](a.tokens // length, length).items():
        cmd += ["--dim", f"{k}={v}"]
    for k, v in m["sets"](a.vocab).items():
        cmd += ["--set", f"{k}={v}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed:\n{r.stderr}")
    text = r.stdout + r.stderr
    found = re.search(r"saved activations: (\d+) forward values read by the backward, ([\d.]+) (KiB|MiB|GiB)", text)
    if not found:
        sys.exit(f"error: no saved activations in the stats of {out}:\n{text}")
    size = float(found.group(2)) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[found.group(3)]
    return size, re.search(r"fused_attention\b", text) is not None


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


# ---- the PyTorch twins ---------------------------------------------------------------------


def rms_norm(x, g):
    import torch
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g


def alibi_lm_twin(a):
    """models/examples/alibi_lm.tg as a PyTorch user writes it: (module, its batch)."""
    import torch
    import torch.nn.functional as F
    d, heads, d_ff, layers, pad = 256, 4, 1024, 4, 0
    dh = d // heads

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.g1 = torch.nn.Parameter(torch.ones(d))
            self.g2 = torch.nn.Parameter(torch.ones(d))
            self.wq, self.wk, self.wv, self.wo = (torch.nn.Linear(d, d, bias=False) for _ in range(4))
            self.up, self.down = torch.nn.Linear(d, d_ff), torch.nn.Linear(d_ff, d)

        def forward(self, x, bias, allowed):
            B, T, _ = x.shape
            n = rms_norm(x, self.g1)
            q, k, v = (w(n).view(B, T, heads, dh).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
            s = (q @ k.transpose(-1, -2)) / math.sqrt(dh) + bias
            s = s.masked_fill(~allowed, -1e9)
            o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, d)
            x = x + self.wo(o)
            return x + self.down(F.gelu(self.up(rms_norm(x, self.g2))))

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
            logits = rms_norm(x, self.g_out) @ self.embed.weight.t()
            return F.cross_entropy(logits.view(-1, a.vocab), targets.view(-1), ignore_index=pad)

    return LM, lambda B, L: [torch.randint(1, a.vocab, (B, L)) for _ in range(2)]


def t5_bucket(rel, num_buckets=32, max_distance=128):
    """HF's T5Attention._relative_position_bucket, bidirectional."""
    import torch
    num_buckets //= 2
    ret = (rel > 0).to(torch.long) * num_buckets
    n = torch.abs(rel)
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) *
                         (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return ret + torch.where(n < max_exact, n, large)


def t5_encoder_twin(a):
    """models/examples/t5_encoder.tg as HF's T5 v1.1 encoder writes it."""
    import torch
    import torch.nn.functional as F
    d, heads, d_ff, layers, pad = 256, 4, 768, 4, 0
    dh = d // heads

    def gelu_new(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.g1 = torch.nn.Parameter(torch.ones(d))
            self.g2 = torch.nn.Parameter(torch.ones(d))
            self.wq, self.wk, self.wv, self.wo = (torch.nn.Linear(d, d, bias=False) for _ in range(4))
            self.gate, self.up = (torch.nn.Linear(d, d_ff, bias=False) for _ in range(2))
            self.down = torch.nn.Linear(d_ff, d, bias=False)

        def forward(self, x, position_bias):
            B, T, _ = x.shape
            n = rms_norm(x, self.g1)
            q, k, v = (w(n).view(B, T, heads, dh).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
            s = q @ k.transpose(3, 2) + position_bias
            o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, d)
            x = x + self.wo(o)
            n = rms_norm(x, self.g2)
            return x + self.down(gelu_new(self.gate(n)) * self.up(n))

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(a.vocab, d, padding_idx=pad)
            self.rel = torch.nn.Embedding(32, heads)
            torch.nn.init.normal_(self.rel.weight, std=0.02)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
            self.g_out = torch.nn.Parameter(torch.ones(d))

        def forward(self, tokens, targets):
            B, T = tokens.shape
            i = torch.arange(T)
            bias = self.rel(t5_bucket(i[None, :] - i[:, None])).permute(2, 0, 1)[None]
            mask = (tokens != pad)[:, None, None, :].float()
            position_bias = bias + (1.0 - mask) * -1e9
            x = self.embed(tokens)
            for b in self.blocks:
                x = b(x, position_bias)
            logits = rms_norm(x, self.g_out) @ self.embed.weight.t()
            return F.cross_entropy(logits.view(-1, a.vocab), targets.view(-1), ignore_index=pad)

    return Encoder, lambda B, L: [torch.randint(1, a.vocab, (B, L)) for _ in range(2)]


def transformer_twin(a, tir):
    """tests/parity's reference implementation of models/transformer.tg, preset small, with
    the graph's parameters (shapes read from the compiled step `tir`)."""
    import torch
    import parity_common as pc
    cfg = dict(pc.TINY, src_vocab=a.vocab, tgt_vocab=a.vocab, d_model=256, heads=4, d_ff=1024,
               n_enc=3, n_dec=3)
    specs = [(n, s) for n, s in pc.param_specs(tir) if not n.startswith(("adam.", "new."))]

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            p = pc.torch_params(pc.random_params(specs, seed=1), torch.float32, requires_grad=True)
            self.p = torch.nn.ParameterDict({k.replace(".", "/"): torch.nn.Parameter(v) for k, v in p.items()})
            self.ref = pc.TorchTransformer(cfg, {k: self.p[k.replace(".", "/")] for k in p}, p_drop=0.1)

        def forward(self, src, tgt_in, tgt_out):
            return self.ref.forward(src, tgt_in, tgt_out)[0]

    return Model, lambda B, L: [torch.randint(1, a.vocab, (B, L)) for _ in range(3)]


def torch_twin(a, model, length, tir):
    """The PyTorch twin's step at L: median ms eager and compiled, compile seconds, saved MiB."""
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    if model == "transformer":
        make, batch_of = transformer_twin(a, tir)
    else:
        make, batch_of = {"alibi_lm": alibi_lm_twin, "t5_encoder": t5_encoder_twin}[model](a)
    batch = batch_of(a.tokens // length, length)
    out = {}
    for mode in ("eager", "compile"):
        net = make()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.0)
        fn = torch.compile(net) if mode == "compile" else net

        def step():
            opt.zero_grad(set_to_none=True)
            loss = fn(*batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
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
                loss = net(*batch)
            del loss
            params = {p.untyped_storage().data_ptr() for p in net.parameters()}
            out["saved_mib"] = sum(v for k, v in seen.items() if k not in params) / 2**20
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tgc", default=os.environ.get("TGC_EXE", os.path.join(REPO, "build", "tools", "tgc")))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--lengths", default="64,256,1024")
    ap.add_argument("--tokens", type=int, default=4096, help="tokens per step (B = tokens / L)")
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3, help="steps per tgc run (the median is taken)")
    ap.add_argument("--out", default="spellings.json")
    ap.add_argument("--no-torch", action="store_true", help="tgc only")
    a = ap.parse_args()
    models = [m for m in a.models.split(",") if m]
    for m in models:
        if m not in MODELS:
            sys.exit(f"error: unknown model '{m}' (models: {', '.join(MODELS)})")
    have_torch = False
    if not a.no_torch:
        try:
            import torch  # noqa: F401
            have_torch = True
        except ImportError:
            print("torch is not installed (pip install torch): the PyTorch twins are skipped", flush=True)
    if not os.path.exists(a.tgc):
        sys.exit(f"error: no tgc executable at {a.tgc} (--tgc or $TGC_EXE)")
    work = tempfile.mkdtemp(prefix="tgc_spellings_")
    results = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
               "tokens": a.tokens, "vocab": a.vocab, "threads": a.threads, "models": {}}
    if have_torch:
        import torch
        results["torch"] = torch.__version__
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = -1
    print(f"{a.tokens} tokens a step, vocab {a.vocab}, {a.threads} thread(s), load {load:.1f}", flush=True)
    for model in models:
        spellings = list(MODELS[model]["spellings"])
        print(f"{MODELS[model]['path']}:", flush=True)
        per_length = results["models"][model] = {}
        for length in [int(x) for x in a.lengths.split(",")]:
            paths, saved = {}, {}
            for sp in spellings:
                paths[sp] = os.path.join(work, f"{model}_{sp}_{length}.tir")
                saved[sp], fused = compile_step(a, model, sp, length, paths[sp])
                if not fused:
                    sys.exit(f"error: the {model} {sp} step at L {length} has no fused_attention")
            unfused, _ = compile_step(a, model, spellings[0], length,
                                      os.path.join(work, f"{model}_unfused_{length}.tir"),
                                      {"TGC_FORWARD_FUSIONS": "0"})
            times = {sp: [] for sp in spellings}
            for rnd in range(a.rounds):
                for sp in (spellings if rnd % 2 == 0 else spellings[::-1]):
                    times[sp].append(time_step(a, paths[sp]))
            med = {k: statistics.median(v) for k, v in times.items()}
            first = spellings[0]
            r = per_length[str(length)] = dict(batch=a.tokens // length, saved_mib=saved,
                                               saved_mib_unfused=unfused, ms=med, ms_rounds=times)
            line = f"  L {length:5d} (B {a.tokens // length:3d}): step " + ", ".join(
                f"{sp} {med[sp]:8.1f} ms" for sp in spellings)
            if len(spellings) == 2:
                r["ratio"] = med[spellings[0]] / med[spellings[1]]
                line += f", ratio {r['ratio']:.3f}"
            line += (f"; saved {saved[first]:.1f} MiB" +
                     "".join(f" ({sp} {saved[sp]:.1f})" for sp in spellings[1:]) +
                     f", forward fusions off {unfused:.1f}")
            print(line, flush=True)
            if have_torch:
                t = r["torch"] = torch_twin(a, model, length, paths[first])
                print(f"          PyTorch: eager {t['eager_ms']:8.1f} ms (tgc / eager {med[first] / t['eager_ms']:.2f}), "
                      f"torch.compile {t['compile_ms']:8.1f} ms (tgc / compile {med[first] / t['compile_ms']:.2f}, "
                      f"first step {t['compile_first_s']:.0f} s); eager saves {t['saved_mib']:.1f} MiB", flush=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
