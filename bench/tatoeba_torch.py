"""The PyTorch side of bench/tatoeba_bleu.py: models/transformer.tg written with torch.nn, trained
on the data `tgc train --export-data` wrote (the same pairs, ids, buckets and batch order), with
the schedule, optimizer, clipping, dropout, label smoothing and parameter averaging tgc uses,
for a wall-clock budget that counts everything from the process's start (torch's import
included); then greedy decoding of the validation split as tgc decodes it.

Run as a process of its own (so tgc and torch can train at the same time):
    python3 bench/tatoeba_torch.py --export data.json --config cfg.json --minutes 30 \
        --threads 1 --out DIR
It writes DIR/result.json (steps, tokens, losses, timings), DIR/hypotheses.txt and
DIR/ema.safetensors (the averaged parameters, named like tgc's).
"""
import time

START = time.monotonic()  # the budget counts from here, torch's import included

import argparse  # noqa: E402
import base64  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402


# ---- the model ------------------------------------------------------------------------------
# The same computation as models/transformer.tg (and tests/parity/parity_common.py's reference):
# weights [in, out], embeddings zeroed at pad and scaled by sqrt(d_model) plus sinusoids, post-LN
# blocks, dropout on the embeddings and each sublayer's output, label smoothing eps/V on every
# class, loss averaged over non-pad targets. Parameter names are tgc's, so tgc's checkpoints load.

def build_model(cfg):
    import torch
    import torch.nn.functional as F
    from torch import nn

    d, h, ff, pad = cfg["d_model"], cfg["heads"], cfg["d_ff"], cfg["pad"]
    bias = cfg["use_bias"]

    class Linear(nn.Module):
        def __init__(self, d_in, d_out, with_bias=True):
            super().__init__()
            bound = math.sqrt(6.0 / (d_in + d_out))  # xavier_uniform, as nn.tg's Linear
            self.weight = nn.Parameter(torch.empty(d_in, d_out).uniform_(-bound, bound))
            self.bias = nn.Parameter(torch.zeros(d_out)) if with_bias else None

        def forward(self, x):
            y = x @ self.weight
            return y + self.bias if self.bias is not None else y

    class LayerNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.gamma = nn.Parameter(torch.ones(d))
            self.beta = nn.Parameter(torch.zeros(d))

        def forward(self, x):
            return F.layer_norm(x, (d,), self.gamma, self.beta, eps=cfg["ln_eps"])

    class Embedding(nn.Module):
        def __init__(self, vocab):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(vocab, d) * d ** -0.5)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.w_q, self.w_k = Linear(d, d, bias), Linear(d, d, bias)
            self.w_v, self.w_o = Linear(d, d, bias), Linear(d, d, bias)

        def forward(self, xq, xkv, mask):
            B, Tq, _ = xq.shape
            Tk, dk = xkv.shape[1], d // h
            q = self.w_q(xq).view(B, Tq, h, dk).transpose(1, 2)
            k = self.w_k(xkv).view(B, Tk, h, dk).transpose(1, 2)
            v = self.w_v(xkv).view(B, Tk, h, dk).transpose(1, 2)
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(dk)
            a = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
            if cfg["attn_dropout"] > 0:
                a = F.dropout(a, cfg["attn_dropout"], self.training)
            return self.w_o((a @ v).transpose(1, 2).reshape(B, Tq, d))

    class FFN(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear1, self.linear2 = Linear(d, ff), Linear(ff, d)

        def forward(self, x):
            y = torch.relu(self.linear1(x)) if cfg["activation"] == "relu" else F.gelu(self.linear1(x))
            if cfg["ffn_dropout"] > 0:
                y = F.dropout(y, cfg["ffn_dropout"], self.training)
            return self.linear2(y)

    class EncoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn, self.ffn = Attention(), FFN()
            self.norm1, self.norm2 = LayerNorm(), LayerNorm()

    class DecoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn, self.cross_attn, self.ffn = Attention(), Attention(), FFN()
            self.norm1, self.norm2, self.norm3 = LayerNorm(), LayerNorm(), LayerNorm()

    class Stack(nn.Module):
        def __init__(self, layers):
            super().__init__()
            self.layers = nn.ModuleList(layers)

    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = Linear(d, cfg["tgt_vocab"])

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_embed = Embedding(cfg["src_vocab"])
            self.tgt_embed = Embedding(cfg["tgt_vocab"])
            self.encoder = Stack([EncoderLayer() for _ in range(cfg["n_enc"])])
            self.decoder = Stack([DecoderLayer() for _ in range(cfg["n_dec"])])
            if not cfg["tie_output"]:
                self.generator = Generator()
            self._pe = {}

        def drop(self, x):
            return F.dropout(x, cfg["p_drop"], self.training) if cfg["p_drop"] > 0 else x

        def positions(self, n):
            if n not in self._pe:
                pos = torch.arange(n, dtype=torch.float64)[:, None]
                angle = pos / torch.pow(10000.0, torch.arange(0, d, 2, dtype=torch.float64) / d)
                pe = torch.zeros(n, d, dtype=torch.float64)
                pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
                self._pe[n] = pe.float()
            return self._pe[n]

        def embed(self, table, ids):
            e = F.embedding(ids, table.weight) * (ids != pad).float()[..., None]
            return self.drop(e * math.sqrt(d) + self.positions(ids.shape[1]))

        def encode(self, src):
            mask = (src != pad)[:, None, None, :]
            x = self.embed(self.src_embed, src)
            for l in self.encoder.layers:
                x = l.norm1(x + self.drop(l.self_attn(x, x, mask)))
                x = l.norm2(x + self.drop(l.ffn(x)))
            return x

        def decode(self, tgt, memory, src):
            T = tgt.shape[1]
            causal = torch.ones(T, T, dtype=torch.bool).tril()
            self_mask = (tgt != pad)[:, None, None, :] & causal
            mem_mask = (src != pad)[:, None, None, :]
            x = self.embed(self.tgt_embed, tgt)
            for l in self.decoder.layers:
                x = l.norm1(x + self.drop(l.self_attn(x, x, self_mask)))
                x = l.norm2(x + self.drop(l.cross_attn(x, memory, mem_mask)))
                x = l.norm3(x + self.drop(l.ffn(x)))
            return x

        def logits(self, x):
            return x @ self.tgt_embed.weight.T if cfg["tie_output"] else self.generator.proj(x)

        def loss(self, src, tgt_in, tgt_out):
            """Label-smoothed cross-entropy summed over non-pad targets, and their count."""
            logp = torch.log_softmax(self.logits(self.decode(tgt_in, self.encode(src), src)), -1)
            eps = cfg["label_smoothing"]
            nll = -logp.gather(-1, tgt_out[..., None])[..., 0]
            per_token = (1 - eps) * nll - eps * logp.mean(-1)
            keep = (tgt_out != pad).float()
            return (per_token * keep).sum(), keep.sum()

    return Transformer()


def param_count(model):
    return sum(p.numel() for p in model.parameters())


# ---- data -----------------------------------------------------------------------------------

def make_batch(src_rows, tgt_rows, B, S, T):
    """Batcher::makeBatch: src padded to S, tgt_in = bos + tgt, tgt_out = tgt + eos, pad 0."""
    import torch
    src = torch.zeros(B, S, dtype=torch.long)
    tgt_in = torch.zeros(B, T, dtype=torch.long)
    tgt_out = torch.zeros(B, T, dtype=torch.long)
    for r, (s, t) in enumerate(zip(src_rows, tgt_rows)):
        src[r, :len(s)] = torch.tensor(s, dtype=torch.long)
        tgt_in[r, 0] = 1
        tgt_in[r, 1:len(t) + 1] = torch.tensor(t, dtype=torch.long)
        tgt_out[r, :len(t)] = torch.tensor(t, dtype=torch.long)
        tgt_out[r, len(t)] = 2
    return src, tgt_in, tgt_out


def valid_loss(model, export, batch=64):
    """Token-averaged loss on the whole validation split, dropout off (tgc's validate())."""
    import torch
    src_all, tgt_all = export["valid"]["src"], export["valid"]["tgt"]
    model.eval()
    total, count = 0.0, 0.0
    with torch.no_grad():
        for i in range(0, len(src_all), batch):
            s, t = src_all[i:i + batch], tgt_all[i:i + batch]
            S = max(1, max(len(x) for x in s))
            T = max(len(x) for x in t) + 1
            lsum, n = model.loss(*make_batch(s, t, len(s), S, T))
            total, count = total + float(lsum), count + float(n)
    return total / max(count, 1.0)


def greedy(model, sources, length_cap, batch=128):
    """Token ids per source, as tgc's Translator decodes greedily: at most 2 * (longest source
    of the batch) + 10 tokens, capped by length_cap; the argmax over eos and later ids."""
    import torch
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(sources), batch):
            rows = sources[i:i + batch]
            S = max(1, max(len(s) for s in rows))
            src = torch.zeros(len(rows), S, dtype=torch.long)
            for r, s in enumerate(rows):
                src[r, :len(s)] = torch.tensor(s, dtype=torch.long)
            memory = model.encode(src)
            steps = 2 * S + 10
            if length_cap > 0:
                steps = min(steps, length_cap)
            tgt = torch.ones(len(rows), 1, dtype=torch.long)
            done = torch.zeros(len(rows), dtype=torch.bool)
            for _ in range(steps):
                lp = torch.log_softmax(model.logits(model.decode(tgt, memory, src)[:, -1]), -1)
                nxt = lp[:, 2:].argmax(-1) + 2  # never pad or bos
                nxt = torch.where(done, torch.zeros_like(nxt), nxt)
                tgt = torch.cat([tgt, nxt[:, None]], 1)
                done |= nxt == 2
                if bool(done.all()):
                    break
            for r in range(len(rows)):
                ids = []
                for v in tgt[r, 1:].tolist():
                    if v == 2 or v == 0:
                        break
                    ids.append(v)
                out.append(ids)
    return out


def detokenizer(vocab_json):
    """Vocab::decode for the export's target vocabulary (SentencePiece or words/chars)."""
    tokens = vocab_json["tokens"]
    kind = vocab_json["tokenizer"]
    if kind == "sentencepiece":
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_proto=base64.b64decode(vocab_json["model"]))
        return lambda ids: sp.decode_pieces([tokens[i] for i in ids])
    if kind == "chars":
        return lambda ids: "".join(tokens[i] for i in ids)
    raise SystemExit("the torch side decodes SentencePiece or character targets only "
                     "(run tgc with --english sentencepiece)")


# ---- training -------------------------------------------------------------------------------

def noam(step, cfg):
    """passes/train_step.cpp's schedule: lr_scale * d^-0.5 * min(s^-0.5, s * warmup^-1.5)."""
    s = max(step, 1)
    return cfg["lr_scale"] * cfg["d_model"] ** -0.5 * min(s ** -0.5, s * cfg["warmup"] ** -1.5)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--export", required=True, help="tgc train --export-data's JSON")
    ap.add_argument("--config", required=True, help="model and optimizer config JSON")
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import torch
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    with open(a.config) as f:
        cfg = json.load(f)
    with open(a.export) as f:
        export = json.load(f)
    cfg["src_vocab"] = len(export["src_vocab"]["tokens"])
    cfg["tgt_vocab"] = len(export["tgt_vocab"]["tokens"])
    torch.manual_seed(export["seed"])
    model = build_model(cfg)
    params = list(model.parameters())
    ema = [p.detach().clone() for p in params]
    opt = torch.optim.Adam(params, lr=1.0, betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
                           weight_decay=0.0)
    budget = a.minutes * 60
    n_valid = len(export["valid"]["src"])
    # tgc's stop rule (Trainer::train): stop when one more step would leave less than the
    # final evaluation's reserve, 1.2 * 5 ms per validation sentence + 3 s.
    reserve = 1.2 * 0.005 * n_valid + 3.0
    B, buckets = export["batch_size"], export["buckets"]
    train_src, train_tgt = export["train"]["src"], export["train"]["tgt"]
    epochs = export["epochs"]

    losses, step, tokens, step_seconds = [], 0, 0, 0.0
    setup_seconds = time.monotonic() - START
    print(f"torch: {param_count(model)} parameters, setup {setup_seconds:.1f} s, "
          f"{a.threads} thread(s)", flush=True)
    last_print = time.monotonic()
    while True:
        elapsed = time.monotonic() - START
        per_step = step_seconds / step if step else 0.0
        if elapsed + per_step + reserve >= budget:
            break
        epoch = epochs[(step // len(epochs[0])) % len(epochs)]
        bucket, rows = epoch[step % len(epochs[0])]
        S, T = buckets[bucket]
        batch = make_batch([train_src[i] for i in rows], [train_tgt[i] for i in rows], B, S, T)
        t0 = time.monotonic()
        model.train()
        lsum, n = model.loss(*batch)
        loss = lsum / n.clamp(min=1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg["clip_norm"])
        step += 1
        for g in opt.param_groups:
            g["lr"] = noam(step, cfg)
        opt.step()
        # Trainer::updateAverages: the average starts at the parameters after the first
        # update, then decays by min(ema, (1 + u) / (10 + u)) with u updates done.
        decay = 0.0 if step == 1 else min(cfg["ema"], (1 + step) / (10 + step))
        with torch.no_grad():
            torch._foreach_mul_(ema, decay)
            torch._foreach_add_(ema, [p.detach() for p in params], alpha=1 - decay)
        step_seconds += time.monotonic() - t0
        losses.append(loss.item())
        tokens += sum(len(train_src[i]) + len(train_tgt[i]) + 1 for i in rows)
        if time.monotonic() - last_print >= 30:
            last_print = time.monotonic()
            print(f"torch: step {step} | loss {losses[-1]:.4f} | lr {noam(step, cfg):.2e} | "
                  f"{tokens / step_seconds:.0f} tok/s | {time.monotonic() - START:.0f} s",
                  flush=True)
    train_seconds = time.monotonic() - START
    with torch.no_grad():
        for p, e in zip(params, ema):
            p.copy_(e)
    t0 = time.monotonic()
    hyp_ids = greedy(model, export["valid"]["src"], export["length_cap"])
    decode = detokenizer(export["tgt_vocab"])
    hyps = [decode(ids) for ids in hyp_ids]
    eval_seconds = time.monotonic() - t0
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "hypotheses.txt"), "w") as f:
        f.write("".join(h + "\n" for h in hyps))
    from safetensors.torch import save_file
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()},
              os.path.join(a.out, "ema.safetensors"))
    result = dict(steps=step, tokens=tokens, step_seconds=step_seconds, setup_seconds=setup_seconds,
                  train_seconds=train_seconds, eval_seconds=eval_seconds,
                  total_seconds=time.monotonic() - START, params=param_count(model),
                  losses=losses, threads=a.threads, epochs_exported=len(epochs),
                  epochs_seen=step / len(epochs[0]))
    with open(os.path.join(a.out, "result.json"), "w") as f:
        json.dump(result, f)
    print(f"torch: {step} steps in {train_seconds:.1f} s ({step / max(step_seconds, 1e-9):.2f} "
          f"steps/s, {tokens / max(step_seconds, 1e-9):.0f} tokens/s), decoded {len(hyps)} "
          f"sentences in {eval_seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main()
