"""Shared pieces of the PyTorch parity tests: running tgc, reading graph inputs, random
weights and batches, an independent PyTorch implementation of models/transformer.tg, and
error measures.

The tests need torch, numpy and safetensors (pip packages, never part of tgc's set-up). When
one is missing a test prints why and exits with SKIP (77), which ctest reports as skipped.
"""
import math
import os
import re
import subprocess
import sys
import tempfile

SKIP = 77


def require_modules():
    """Imports torch, numpy and safetensors or exits with SKIP and the reason."""
    missing = []
    for mod in ("numpy", "torch", "safetensors"):
        try:
            __import__(mod)
        except ImportError as e:  # a broken install also counts as missing
            missing.append(f"{mod} ({e})")
    if missing:
        print("SKIPPED: PyTorch parity needs the Python packages " + ", ".join(missing) +
              "; install them with `pip install torch numpy safetensors` to run it")
        sys.exit(SKIP)


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(REPO, "models", "transformer.tg")

# The tiny preset of models/transformer.tg, written out so the reference does not read the
# .tg file; check_param_shapes() confirms that the graph agrees.
TINY = dict(src_vocab=8000, tgt_vocab=8000, d_model=64, heads=4, d_ff=256, n_enc=2, n_dec=2,
            label_smoothing=0.1, pad=0, ln_eps=1e-5, use_bias=True)
BOS = 1  # any non-pad id; tgt_in starts with it


class Tgc:
    """Runs the tgc executable (TGC_EXE) with one execution backend."""

    def __init__(self, backend="interp"):
        self.exe = os.environ.get("TGC_EXE")
        if not self.exe or not os.path.exists(self.exe):
            print(f"error: TGC_EXE must name the built tgc executable (got {self.exe!r})")
            sys.exit(1)
        self.backend = backend
        self.tmp = tempfile.TemporaryDirectory(prefix="tgc_parity_")
        run_help = self._call([self.exe, "run", "--help"]).stdout
        self.has_backend_flag = "--backend" in run_help
        if backend != "interp" and not self.has_backend_flag:
            print(f"SKIPPED: `tgc run` has no --backend option yet, so backend '{backend}' "
                  "cannot be checked")
            sys.exit(SKIP)

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    @staticmethod
    def _call(cmd):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print("command failed (exit %d): %s\n%s%s" %
                  (r.returncode, " ".join(cmd), r.stdout, r.stderr))
            sys.exit(1)
        return r

    def compile(self, out_name, graph="train", dims=None, sets=None, extra=()):
        """tgc compile models/transformer.tg --preset tiny ...; returns the .tir path."""
        cmd = [self.exe, "compile", MODEL, "--preset", "tiny", "--graph", graph]
        for k, v in (sets or {}).items():
            cmd += ["--set", f"{k}={v}"]
        for k, v in (dims or {}).items():
            cmd += ["--dim", f"{k}={v}"]
        out = self.path(out_name)
        self._call(cmd + list(extra) + ["-o", out])
        return out

    def run(self, tir, inputs):
        """tgc run on numpy inputs (by value name); returns the outputs as numpy arrays."""
        from safetensors.numpy import load_file, save_file
        base = os.path.splitext(os.path.basename(tir))[0]
        in_path = self.path(base + ".in.safetensors")
        out_path = self.path(base + ".out.safetensors")
        save_file({k: v for k, v in inputs.items()}, in_path)
        cmd = [self.exe, "run", tir, "--inputs", in_path, "--outputs", out_path]
        if self.has_backend_flag:
            cmd += ["--backend", self.backend]
        self._call(cmd)
        return load_file(out_path)


_INPUT_RE = re.compile(r'^\s*%(\S+) = input\(\)(?: \{([^}]*)\})? : (\w+)\[([0-9,]*)\]\s*$')


def graph_inputs(tir):
    """[(name, role, dtype, shape)] of a Graph IR text file's input() nodes, in order."""
    found = []
    with open(tir) as f:
        for line in f:
            m = _INPUT_RE.match(line)
            if not m:
                continue
            role = re.search(r'role="(\w+)"', m.group(2) or "")
            shape = tuple(int(d) for d in m.group(4).split(",")) if m.group(4) else ()
            found.append((m.group(1), role.group(1) if role else "data", m.group(3), shape))
    if not found:
        print(f"error: no input() lines found in {tir}")
        sys.exit(1)
    return found


def param_specs(tir):
    return [(n, s) for n, role, dt, s in graph_inputs(tir) if role == "param"]


def random_params(specs, seed):
    """float32 weights for every parameter. Unlike the .tg initializers (zero biases, unit
    gains), every tensor is random, so biases, layer-norm gains and the embeddings' pad rows
    all take part in the check."""
    import numpy as np
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in specs:
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "gamma":
            x = 1.0 + 0.1 * rng.standard_normal(shape)
        elif leaf in ("beta", "bias"):
            x = 0.1 * rng.standard_normal(shape)
        elif name.endswith("embed.weight"):
            x = rng.standard_normal(shape) * shape[1] ** -0.5
        else:  # [in, out] projections, xavier-uniform bounds
            bound = math.sqrt(6.0 / (shape[0] + shape[1]))
            x = rng.uniform(-bound, bound, shape)
        out[name] = x.astype(np.float32)
    return out


def check_param_shapes(params, cfg):
    """The reference's configuration must match the compiled graph's parameters."""
    d, ff = cfg["d_model"], cfg["d_ff"]
    want = {"src_embed.weight": (cfg["src_vocab"], d),
            "encoder.layers.0.ffn.linear1.weight": (d, ff),
            "decoder.layers.0.self_attn.w_q.weight": (d, d)}
    for name, shape in want.items():
        if name in params and tuple(params[name].shape) != shape:
            print(f"error: {name} is {params[name].shape} in the graph, the reference "
                  f"expects {shape}: update TINY in parity_common.py")
            sys.exit(1)
    enc = {int(n.split(".")[2]) for n in params if n.startswith("encoder.layers.")}
    dec = {int(n.split(".")[2]) for n in params if n.startswith("decoder.layers.")}
    if (enc and len(enc) != cfg["n_enc"]) or (dec and len(dec) != cfg["n_dec"]):
        print(f"error: graph has {len(enc)}+{len(dec)} layers, reference expects "
              f"{cfg['n_enc']}+{cfg['n_dec']}")
        sys.exit(1)


def random_batch(seed, B, S, T, cfg):
    """src [B,S], tgt_in [B,T], tgt_out [B,T] (int64) with padding at the end of some rows.
    Row lengths are at least 1, so no attention row is fully masked."""
    import numpy as np
    rng = np.random.default_rng(seed)
    pad = cfg["pad"]
    src = rng.integers(2, cfg["src_vocab"], size=(B, S))
    tgt = rng.integers(2, cfg["tgt_vocab"], size=(B, T))
    src_len = [S] + [int(rng.integers(1, S + 1)) for _ in range(B - 1)]
    tgt_len = [T - 1] + [int(rng.integers(1, T)) for _ in range(B - 1)]
    src_len[-1] = max(1, S // 2)  # at least one padded row each side
    tgt_len[-1] = max(1, T // 2)
    tgt_in = np.full((B, T), pad)
    tgt_out = np.full((B, T), pad)
    for b in range(B):
        src[b, src_len[b]:] = pad
        n = tgt_len[b]            # tokens to predict; tgt_in = BOS + the first n - 1
        tgt_in[b, 0] = BOS
        tgt_in[b, 1:n] = tgt[b, :n - 1]
        tgt_out[b, :n] = tgt[b, :n]
    return {"src": src.astype(np.int64), "tgt_in": tgt_in.astype(np.int64),
            "tgt_out": tgt_out.astype(np.int64)}


# ---- the reference model ---------------------------------------------------------------------


class TorchTransformer:
    """The paper's encoder-decoder written with torch.nn.functional, following the semantics
    models/transformer.tg documents: weights [in, out]; token embeddings zeroed at pad ids and
    scaled by sqrt(d_model), plus sinusoidal positions; post-LN blocks; source padding mask in
    the encoder and in cross-attention, causal AND target padding mask in decoder
    self-attention; label-smoothed cross-entropy (eps/V on every class, as PyTorch) averaged
    over non-pad targets. p is a dict of tensors named like the graph's parameters."""

    def __init__(self, cfg, p, tie_output=False, p_drop=0.0):
        self.cfg, self.p, self.tie, self.p_drop = cfg, p, tie_output, p_drop

    def dropout(self, x):
        """Residual and embedding dropout where the paper (and the .tg) puts it; the parity
        tests run without it, the benchmark with it."""
        import torch.nn.functional as F
        return F.dropout(x, self.p_drop, training=True) if self.p_drop > 0 else x

    def linear(self, x, name, bias=True):
        y = x @ self.p[name + ".weight"]
        return y + self.p[name + ".bias"] if bias else y

    def layer_norm(self, x, name):
        import torch.nn.functional as F
        return F.layer_norm(x, x.shape[-1:], self.p[name + ".gamma"], self.p[name + ".beta"],
                            eps=self.cfg["ln_eps"])

    _tables = {}

    @classmethod
    def sinusoids(cls, length, d, dtype):
        """The positional table, computed once per shape (tgc holds it as a constant)."""
        key = (length, d, dtype)
        if key not in cls._tables:
            cls._tables[key] = cls._sinusoids(length, d, dtype)
        return cls._tables[key]

    @staticmethod
    def _sinusoids(length, d, dtype):
        import torch
        pos = torch.arange(length, dtype=torch.float64)[:, None]
        i2 = torch.arange(0, d, 2, dtype=torch.float64)
        angle = pos / torch.pow(10000.0, i2 / d)
        pe = torch.zeros(length, d, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(angle)
        pe[:, 1::2] = torch.cos(angle)
        return pe.to(dtype)

    def embed(self, table, ids):
        import torch.nn.functional as F
        w = self.p[table + ".weight"]
        e = F.embedding(ids, w) * (ids != self.cfg["pad"]).to(w.dtype)[..., None]
        e = e * math.sqrt(self.cfg["d_model"])
        return self.dropout(e + self.sinusoids(ids.shape[1], w.shape[1], w.dtype))

    def attention(self, name, q_in, kv_in, mask):
        import torch
        B, Tq, D = q_in.shape
        Tk, h = kv_in.shape[1], self.cfg["heads"]
        dk = D // h
        bias = self.cfg["use_bias"]
        q = self.linear(q_in, name + ".w_q", bias).view(B, Tq, h, dk).transpose(1, 2)
        k = self.linear(kv_in, name + ".w_k", bias).view(B, Tk, h, dk).transpose(1, 2)
        v = self.linear(kv_in, name + ".w_v", bias).view(B, Tk, h, dk).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(dk)
        scores = scores.masked_fill(~mask, float("-inf"))
        ctx = torch.softmax(scores, dim=-1) @ v          # [B, h, Tq, dk]
        return self.linear(ctx.transpose(1, 2).reshape(B, Tq, D), name + ".w_o", bias)

    def ffn(self, name, x):
        import torch
        return self.linear(torch.relu(self.linear(x, name + ".linear1")), name + ".linear2")

    def encode(self, src):
        pad = self.cfg["pad"]
        src_mask = (src != pad)[:, None, None, :]        # [B, 1, 1, S]
        x = self.embed("src_embed", src)
        for i in range(self.cfg["n_enc"]):
            n = f"encoder.layers.{i}"
            x = self.layer_norm(x + self.dropout(self.attention(n + ".self_attn", x, x, src_mask)),
                                n + ".norm1")
            x = self.layer_norm(x + self.dropout(self.ffn(n + ".ffn", x)), n + ".norm2")
        return x

    def decode(self, tgt, memory, src):
        import torch
        pad, T = self.cfg["pad"], tgt.shape[1]
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
        self_mask = (tgt != pad)[:, None, None, :] & causal[None, None]   # [B, 1, T, T]
        mem_mask = (src != pad)[:, None, None, :]
        x = self.embed("tgt_embed", tgt)
        for i in range(self.cfg["n_dec"]):
            n = f"decoder.layers.{i}"
            x = self.layer_norm(x + self.dropout(self.attention(n + ".self_attn", x, x, self_mask)),
                                n + ".norm1")
            x = self.layer_norm(x + self.dropout(self.attention(n + ".cross_attn", x, memory,
                                                                mem_mask)), n + ".norm2")
            x = self.layer_norm(x + self.dropout(self.ffn(n + ".ffn", x)), n + ".norm3")
        return x

    def generate(self, x):
        if self.tie:
            return x @ self.p["tgt_embed.weight"].T
        return self.linear(x, "generator.proj")

    def loss(self, logits, tgt_out):
        import torch
        eps, pad = self.cfg["label_smoothing"], self.cfg["pad"]
        logp = torch.log_softmax(logits, dim=-1)
        nll = -logp.gather(-1, tgt_out[..., None])[..., 0]
        smooth = -logp.mean(dim=-1)
        keep = (tgt_out != pad).to(logits.dtype)
        per_token = (1 - eps) * nll + eps * smooth
        return (per_token * keep).sum() / keep.sum().clamp(min=1)

    def forward(self, src, tgt_in, tgt_out):
        logits = self.generate(self.decode(tgt_in, self.encode(src), src))
        return self.loss(logits, tgt_out), logits


def torch_params(params, dtype, requires_grad=False):
    import torch
    return {k: torch.tensor(v, dtype=dtype, requires_grad=requires_grad) for k, v in params.items()}


def torch_batch(batch):
    import torch
    return {k: torch.from_numpy(v) for k, v in batch.items()}


# ---- error measures --------------------------------------------------------------------------


def rel_err(got, ref):
    """(||got - ref|| / ||ref||, max|got - ref| / max|ref|) in float64."""
    import numpy as np
    g = np.asarray(got, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    if g.shape != r.shape:
        raise AssertionError(f"shape {g.shape} != reference shape {r.shape}")
    diff = g - r
    rn, rmax = np.linalg.norm(r), np.abs(r).max() if r.size else 0.0
    norm_rel = np.linalg.norm(diff) / rn if rn > 0 else np.linalg.norm(diff)
    elem_rel = np.abs(diff).max() / rmax if rmax > 0 else (np.abs(diff).max() if r.size else 0.0)
    return float(norm_rel), float(elem_rel)


class Checker:
    """Collects named checks, prints each with its figures, and turns failures into exit 1."""

    def __init__(self, title):
        self.title, self.failures = title, []
        print(f"== {title}")

    def check(self, name, value, limit, detail=""):
        ok = bool(value <= limit)  # NaN fails
        print(f"  {'ok  ' if ok else 'FAIL'} {name}: {value:.3e} (limit {limit:.0e}){detail}")
        if not ok:
            self.failures.append(name)
        return ok

    def finish(self):
        if self.failures:
            print(f"{self.title}: {len(self.failures)} check(s) failed: " +
                  ", ".join(self.failures))
            sys.exit(1)
        print(f"{self.title}: all checks passed")
        sys.exit(0)


def setup(argv):
    """Parses --backend interp|cpu (default interp) and returns a Tgc for it; exits with SKIP
    and the reason when the backend or a Python package is missing."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="interp", choices=["interp", "cpu"])
    tgc = Tgc(ap.parse_args(argv).backend)
    require_modules()
    return tgc
