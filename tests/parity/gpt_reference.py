"""An independent PyTorch implementation of models/gpt.tg (the decoder-only LM), shared by the
LM parity test (tests/parity/lm_parity.py) and the LM benchmark (bench/gpt_lm.py), so that the
benchmark's peer is the model the parity test checks against tgc.

The semantics follow what models/gpt.tg and models/lib/nn.tg document: weights stored [in, out]
(a projection is x @ W + b); token embeddings multiplied by (id != pad), scaled by
sqrt(d_model), plus the sinusoidal table; dropout on that sum and on each sublayer's output
(residual dropout; none on attention weights or inside the FFN); post-LN EncoderLayer blocks
(x = LN(x + Dropout(MHA(x))), x = LN(x + Dropout(FFN(x))), eps 1e-5) under the padding AND
causal mask; the FFN Linear - GELU (erf) or ReLU - Linear; logits x @ E^T with the embedding
tied (or a Linear "lm_head.proj" when untied); cross-entropy averaged over non-pad targets.

Parameters are a dict of tensors named as the graph names them (tok_embed.weight,
blocks.layers.<i>.self_attn.w_q.weight, ..., lm_head.proj.weight when untied), so tgc's
checkpoints and its --export-data initial parameters load as they are. Nothing here imports
torch at module level.
"""
import math

# models/gpt.tg's config and presets, written out so the reference does not read the .tg file;
# param_shapes() / check_params() confirm a graph's parameters agree.
GPT_DEFAULTS = dict(vocab=8000, d_model=512, heads=8, d_ff=2048, n_layers=6, activation="gelu",
                    p_drop=0.1, tie_output=True, pad=0, max_len=1024, ln_eps=1e-5)
GPT_PRESETS = {
    "tiny": dict(d_model=64, heads=4, d_ff=256, n_layers=2),
    "small": dict(d_model=256, heads=4, d_ff=1024, n_layers=4),
    "base": dict(d_model=512, heads=8, d_ff=2048, n_layers=6),
}


def gpt_config(preset, **overrides):
    cfg = dict(GPT_DEFAULTS, **GPT_PRESETS[preset])
    cfg.update(overrides)
    return cfg


def param_shapes(cfg):
    """{name: shape} of every parameter of the model, as tgc names them."""
    d, ff, V = cfg["d_model"], cfg["d_ff"], cfg["vocab"]
    out = {"tok_embed.weight": (V, d)}
    for i in range(cfg["n_layers"]):
        n = f"blocks.layers.{i}"
        for w in ("w_q", "w_k", "w_v", "w_o"):
            out[f"{n}.self_attn.{w}.weight"] = (d, d)
            out[f"{n}.self_attn.{w}.bias"] = (d,)
        out[f"{n}.ffn.linear1.weight"] = (d, ff)
        out[f"{n}.ffn.linear1.bias"] = (ff,)
        out[f"{n}.ffn.linear2.weight"] = (ff, d)
        out[f"{n}.ffn.linear2.bias"] = (d,)
        for ln in ("norm1", "norm2"):
            out[f"{n}.{ln}.gamma"] = (d,)
            out[f"{n}.{ln}.beta"] = (d,)
    if not cfg["tie_output"]:
        out["lm_head.proj.weight"] = (d, V)
        out["lm_head.proj.bias"] = (V,)
    return out


def check_params(shapes, cfg):
    """'' when `shapes` ({name: shape} of a graph's or checkpoint's parameters) are exactly the
    reference's, else what differs."""
    want = param_shapes(cfg)
    got = {k: tuple(v) for k, v in shapes.items()}
    if got == want:
        return ""
    extra = sorted(set(got) - set(want))
    missing = sorted(set(want) - set(got))
    wrong = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    return (f"extra {extra[:4]}, missing {missing[:4]}, shape differs "
            f"{[(k, got[k], want[k]) for k in wrong[:4]]}")


def init_params(cfg, generator=None):
    """The .tg initializers: xavier_uniform projections, zero biases, unit gains, embeddings
    N(0, d_model^-0.5) (tgc draws from its own generator: the benchmark loads tgc's initial
    parameters instead, so this is for runs without them)."""
    import torch
    out = {}
    for name, shape in param_shapes(cfg).items():
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "gamma":
            t = torch.ones(shape)
        elif leaf in ("beta", "bias"):
            t = torch.zeros(shape)
        elif name == "tok_embed.weight":
            t = torch.randn(shape, generator=generator) * cfg["d_model"] ** -0.5
        else:
            bound = math.sqrt(6.0 / (shape[0] + shape[1]))
            t = torch.empty(shape).uniform_(-bound, bound, generator=generator)
        out[name] = t
    return out


_TABLES = {}


def sinusoids(length, d, dtype):
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...), computed in float64 and
    rounded once (tgc holds it as a constant)."""
    import torch
    key = (length, d, dtype)
    if key not in _TABLES:
        pos = torch.arange(length, dtype=torch.float64)[:, None]
        angle = pos / torch.pow(10000.0, torch.arange(0, d, 2, dtype=torch.float64) / d)
        pe = torch.zeros(length, d, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(angle)
        pe[:, 1::2] = torch.cos(angle)
        _TABLES[key] = pe.to(dtype)
    return _TABLES[key]


class TorchGPT:
    """models/gpt.tg with torch.nn.functional on a dict of parameters `p`.

    p_drop: dropout where the .tg has it (0 for the parity tests and evaluation).
    sdpa: attention through F.scaled_dot_product_attention (one fused kernel, what a PyTorch
    user writes) instead of matmul - masked softmax - matmul; the same function either way."""

    def __init__(self, cfg, p, p_drop=0.0, sdpa=False):
        self.cfg, self.p, self.p_drop, self.sdpa = cfg, p, p_drop, sdpa
        self.heads, self.d = cfg["heads"], cfg["d_model"]

    def dropout(self, x):
        import torch.nn.functional as F
        return F.dropout(x, self.p_drop, training=True) if self.p_drop > 0 else x

    def linear(self, x, name):
        return x @ self.p[name + ".weight"] + self.p[name + ".bias"]

    def layer_norm(self, x, name):
        import torch.nn.functional as F
        return F.layer_norm(x, (self.d,), self.p[name + ".gamma"], self.p[name + ".beta"],
                            eps=self.cfg["ln_eps"])

    def ffn(self, x, name):
        import torch
        import torch.nn.functional as F
        h = self.linear(x, name + ".linear1")
        h = F.gelu(h) if self.cfg["activation"] == "gelu" else torch.relu(h)
        return self.linear(h, name + ".linear2")

    def split(self, x):  # [B, T, d] -> [B, h, T, dk]
        B, T, _ = x.shape
        return x.view(B, T, self.heads, self.d // self.heads).transpose(1, 2)

    def merge(self, x):  # [B, h, T, dk] -> [B, T, d]
        B, _, T, _ = x.shape
        return x.transpose(1, 2).reshape(B, T, self.d)

    def attend(self, q, k, v, mask):
        """softmax(q k^T / sqrt(dk), masked) v; mask bool, broadcast to [B, h, Tq, Tk]."""
        import torch
        import torch.nn.functional as F
        if self.sdpa:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v

    def embed(self, tokens, start=0):
        """Embeddings of tokens [B, T] at positions start..start+T-1."""
        import torch.nn.functional as F
        w = self.p["tok_embed.weight"]
        e = F.embedding(tokens, w) * (tokens != self.cfg["pad"]).to(w.dtype)[..., None]
        T = tokens.shape[1]
        return e * math.sqrt(self.d) + sinusoids(start + T, self.d, w.dtype)[start:]

    def mask(self, tokens):
        import torch
        T = tokens.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        return (tokens != self.cfg["pad"])[:, None, None, :] & causal

    def block(self, x, i, mask):
        n = f"blocks.layers.{i}"
        a = n + ".self_attn"
        q = self.split(self.linear(x, a + ".w_q"))
        k = self.split(self.linear(x, a + ".w_k"))
        v = self.split(self.linear(x, a + ".w_v"))
        h = self.linear(self.merge(self.attend(q, k, v, mask)), a + ".w_o")
        x = self.layer_norm(x + self.dropout(h), n + ".norm1")
        return self.layer_norm(x + self.dropout(self.ffn(x, n + ".ffn")), n + ".norm2")

    def head(self, x):
        if self.cfg["tie_output"]:
            return x @ self.p["tok_embed.weight"].T
        return self.linear(x, "lm_head.proj")

    def logits(self, tokens):
        x = self.dropout(self.embed(tokens))
        mask = self.mask(tokens)
        for i in range(self.cfg["n_layers"]):
            x = self.block(x, i, mask)
        return self.head(x)

    def loss_sum(self, tokens, targets):
        """(sum of -log p(target) over non-pad targets, their count)."""
        import torch
        logits = self.logits(tokens)
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                targets.reshape(-1), reduction="none")
        keep = (targets.reshape(-1) != self.cfg["pad"]).to(logits.dtype)
        return (nll * keep).sum(), keep.sum()

    def loss(self, tokens, targets):
        """The train graph's loss: the mean over non-pad targets (at least 1 in the count)."""
        s, n = self.loss_sum(tokens, targets)
        return s / n.clamp(min=1.0)

    # ---- generation with a key/value cache (what generate_prefill / generate_step compute) ---

    def prefill(self, tokens, cache_len):
        """Runs prompts [B, P] (no padding) once; returns the log-probabilities of the next
        token [B, V] and caches [n_layers] of (k, v), each [B, h, cache_len, dk] with
        positions 0..P-1 filled."""
        import torch
        B, P = tokens.shape
        x = self.embed(tokens)
        mask = self.mask(tokens)
        caches = []
        for i in range(self.cfg["n_layers"]):
            a = f"blocks.layers.{i}.self_attn"
            k = self.split(self.linear(x, a + ".w_k"))
            v = self.split(self.linear(x, a + ".w_v"))
            kc = torch.zeros(B, self.heads, cache_len, self.d // self.heads, dtype=x.dtype)
            vc = torch.zeros_like(kc)
            kc[:, :, :P] = k
            vc[:, :, :P] = v
            caches.append((kc, vc))
            x = self.cached_block(x, i, k, v, mask)
        return torch.log_softmax(self.head(x[:, -1]), dim=-1), caches

    def cached_block(self, x, i, k, v, mask):
        n = f"blocks.layers.{i}"
        a = n + ".self_attn"
        q = self.split(self.linear(x, a + ".w_q"))
        if mask is None:
            o = self.attend_all(q, k, v)
        else:
            o = self.attend(q, k, v, mask)
        x = self.layer_norm(x + self.linear(self.merge(o), a + ".w_o"), n + ".norm1")
        return self.layer_norm(x + self.ffn(x, n + ".ffn"), n + ".norm2")

    def attend_all(self, q, k, v):
        """Attention of one query position to every key given (no mask)."""
        import torch
        import torch.nn.functional as F
        if self.sdpa:
            return F.scaled_dot_product_attention(q, k, v)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
        return torch.softmax(scores, dim=-1) @ v

    def step(self, tok, pos, caches):
        """One position for every row: tok [B] at position pos (the same for all rows);
        writes its keys and values into the caches at pos and attends to 0..pos. Returns the
        log-probabilities of the next token [B, V]."""
        import torch
        x = self.embed(tok[:, None], pos)
        for i, (kc, vc) in enumerate(caches):
            a = f"blocks.layers.{i}.self_attn"
            kc[:, :, pos] = self.split(self.linear(x, a + ".w_k"))[:, :, 0]
            vc[:, :, pos] = self.split(self.linear(x, a + ".w_v"))[:, :, 0]
            x = self.cached_block(x, i, kc[:, :, :pos + 1], vc[:, :, :pos + 1], None)
        return torch.log_softmax(self.head(x[:, 0]), dim=-1)
