"""Issue 26: the decoder-only LM (models/gpt.tg, tiny preset) against an independent PyTorch
implementation (tests/parity/gpt_reference.py, the model bench/gpt_lm.py trains as tgc's
peer): the same random parameters and batch, float32, dropout off, output projection tied (the
model's default) and untied.

  tgc compile models/gpt.tg --preset tiny --graph train --grad --dim B=4 --dim T=9
      --set p_drop=0 [--set tie_output=false]   then   tgc run --inputs ... --outputs ...

Checks, for each variant:
  * the loss (mean cross-entropy over non-pad targets): relative error <= 1e-5;
  * the logits: norm-wise relative error <= 1e-5;
  * every parameter gradient grad.<p>: norm-wise relative error ||tgc - torch|| / ||torch|| <=
    1e-4, except the key biases (*.w_k.bias), whose true gradient is zero (q.b_k shifts every
    score of a row alike, which the softmax ignores): there both sides must be negligible
    (below 1e-5 of the key weight's gradient norm);
  * untied: the rows of the embedding for ids absent from the batch, and its pad row, get
    exactly zero gradient.
The batch has padded rows (pad targets ignored; pad keys masked) and a row of full length.

  TGC_EXE=build/tools/tgc python3 tests/parity/lm_parity.py [--backend interp|cpu]
"""
import os
import sys

import parity_common as pc

TGC = pc.setup(sys.argv[1:])  # exits 77 (skipped) without torch or the backend
import numpy as np  # noqa: E402
import torch  # noqa: E402

import gpt_reference as gr  # noqa: E402

MODEL = os.path.join(pc.REPO, "models", "gpt.tg")
TOL, LOSS_TOL, ZERO_GRAD_TOL = 1e-4, 1e-5, 1e-5
B, T = 4, 9
VOCAB = 500  # --set vocab: small enough for the interpreter, large enough to leave rows unused


def compile_grad(tgc, tie):
    out = tgc.path(f"lm_grad_{'tied' if tie else 'untied'}.tir")
    tgc._call([tgc.exe, "compile", MODEL, "--preset", "tiny", "--graph", "train", "--grad",
               "--dim", f"B={B}", "--dim", f"T={T}", "--set", "p_drop=0",
               "--set", f"vocab={VOCAB}", "--set", f"tie_output={str(tie).lower()}", "-o", out])
    return out


def lm_batch(seed, cfg):
    """tokens / targets [B, T] as the lm task builds them from sequences bos + ids + eos:
    tokens = seq[0..n-1], targets = seq[1..n], padded with pad (0). Row 0 fills the length."""
    rng = np.random.default_rng(seed)
    pad, bos, eos = cfg["pad"], 1, 2
    tokens = np.full((B, T), pad, dtype=np.int64)
    targets = np.full((B, T), pad, dtype=np.int64)
    lengths = [T] + [int(rng.integers(2, T)) for _ in range(B - 2)] + [1]
    for b, n in enumerate(lengths):  # n targets: a sequence of n + 1 ids
        seq = [bos] + [int(x) for x in rng.integers(3, cfg["vocab"], size=n - 1)] + [eos]
        tokens[b, :n] = seq[:-1]
        targets[b, :n] = seq[1:]
    return {"tokens": tokens, "targets": targets}


def check_reference_paths(c, cfg, params, batch):
    """The reference's other paths, which bench/gpt_lm.py uses, against the one checked above
    (their only check against tgc): attention through F.scaled_dot_product_attention, and
    generation with the key/value cache (prefill of a prompt, then one position a step)."""
    import torch
    tp = pc.torch_params(params, torch.float32)
    tokens = torch.from_numpy(batch["tokens"])
    with torch.no_grad():
        plain = gr.TorchGPT(cfg, tp).logits(tokens)
        fused = gr.TorchGPT(cfg, tp, sdpa=True).logits(tokens)
        c.check("[reference] sdpa attention against matmul-softmax-matmul, logits",
                pc.rel_err(fused.numpy(), plain.numpy())[0], LOSS_TOL)
        row = tokens[:1]  # the full-length row: no padding
        want = torch.log_softmax(plain[:1], dim=-1)[0]  # [T, V]
        for sdpa in (False, True):
            m = gr.TorchGPT(cfg, tp, sdpa=sdpa)
            P = 3
            logp, caches = m.prefill(row[:, :P], T)
            got = [logp[0]]
            for pos in range(P, T):
                got.append(m.step(row[:, pos], pos, caches)[0])
            got = torch.stack(got)
            c.check(f"[reference] cached generation ({'sdpa' if sdpa else 'math'}): log-probs "
                    f"of positions {P - 1}..{T - 1} against the full forward",
                    pc.rel_err(got.numpy(), want[P - 1:].numpy())[0], LOSS_TOL)


def main():
    tgc, backend = TGC, TGC.backend
    c = pc.Checker(f"LM parity (models/gpt.tg), tiny preset, vocab {VOCAB}, B={B} T={T}, "
                   f"backend {backend}")
    for tie in (True, False):
        tag = "tied" if tie else "untied"
        cfg = gr.gpt_config("tiny", vocab=VOCAB, tie_output=tie, p_drop=0.0)
        tir = compile_grad(tgc, tie)
        specs = pc.param_specs(tir)
        why = gr.check_params(dict(specs), cfg)
        if why:
            print(f"error: the graph's parameters are not the reference's: {why}")
            sys.exit(1)
        data_inputs = {n for n, role, _, _ in pc.graph_inputs(tir) if role != "param"}
        params = pc.random_params(specs, seed=7)
        batch = lm_batch(26, cfg)
        feed = {**params, **batch}
        for name in ("seed", "step"):  # dropout's inputs, when the graph keeps them
            if name in data_inputs:
                feed[name] = np.array(1, dtype=np.int64)
        out = tgc.run(tir, feed)
        missing = [n for n in params if "grad." + n not in out]
        if missing:
            print(f"error: the --grad graph lacks gradients for {missing}")
            sys.exit(1)

        tp = pc.torch_params(params, torch.float32, requires_grad=True)
        ref = gr.TorchGPT(cfg, tp)
        tokens, targets = torch.from_numpy(batch["tokens"]), torch.from_numpy(batch["targets"])
        logits = ref.logits(tokens)
        loss = ref.loss(tokens, targets)
        loss.backward()
        c.check(f"[{tag}] loss rel error ({float(out['loss']):.6f} against {loss.item():.6f})",
                abs(float(out["loss"]) - loss.item()) / abs(loss.item()), LOSS_TOL)
        if "logits" in out:
            nr, er = pc.rel_err(out["logits"], logits.detach().numpy())
            c.check(f"[{tag}] logits norm-wise rel error", nr, LOSS_TOL,
                    f"  (worst element {er:.1e})")

        rows, zeros = [], []
        grads = {k: t.grad.numpy() for k, t in tp.items()}
        for name, want in grads.items():
            got = out["grad." + name]
            if name.endswith(".w_k.bias"):
                scale = np.linalg.norm(grads[name[:-len("bias")] + "weight"])
                zeros.append((max(np.linalg.norm(got), np.linalg.norm(want)) / scale, name))
                continue
            nr, er = pc.rel_err(got, want)
            rows.append((nr, er, name))
        worst, wname = max(zeros)
        c.check(f"[{tag}] {len(zeros)} *.w_k.bias (true gradient 0): worst max(||tgc||, "
                "||torch||) / ||grad of w_k.weight||", worst, ZERO_GRAD_TOL, f"  ({wname})")
        rows.sort(reverse=True)
        for nr, er, name in rows[:3]:
            print(f"       worst tensors: {name}: norm-wise {nr:.2e}, worst element {er:.2e}")
        c.check(f"[{tag}] worst norm-wise rel error over {len(rows)} gradient tensors",
                rows[0][0], TOL, f"  ({rows[0][2]})")
        for nr, er, name in rows:
            if nr > TOL:
                c.check(f"[{tag}] {name}", nr, TOL)
        if tie:
            check_reference_paths(c, cfg, params, batch)
        if not tie:
            used = np.setdiff1d(batch["tokens"], [cfg["pad"]])
            unused = np.setdiff1d(np.arange(VOCAB), used)
            leak = np.abs(out["grad.tok_embed.weight"][unused]).max()
            c.check(f"[{tag}] |grad| on the {len(unused)} tok_embed rows of absent ids and pad",
                    leak, 0.0)
    c.finish()


if __name__ == "__main__":
    main()
