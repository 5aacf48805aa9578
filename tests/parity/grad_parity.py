"""Issue 4: the gradients of the tiny Transformer's loss (`tgc compile --grad`) against
PyTorch autograd on an independent implementation, same weights and batch, float32, dropout
off, output projection untied and tied.

Every grad.<param> must be within 1e-4 norm-wise relative error ||tgc - torch|| / ||torch||.
The key biases of attention (*.w_k.bias) are the exception by mathematics, not by tolerance:
adding q.b_k to every score of a row leaves the softmax unchanged, so their true gradient is
zero and both sides hold only rounding noise. For them the check is that each side's
gradient is negligible (below 1e-5 of the key weight's gradient norm).

  TGC_EXE=build/tools/tgc python3 tests/parity/grad_parity.py [--backend interp|cpu]
"""
import sys

import parity_common as pc

TGC = pc.setup(sys.argv[1:])  # exits 77 (skipped) without torch or the backend
import numpy as np  # noqa: E402
import torch  # noqa: E402

TOL = 1e-4
ZERO_GRAD_TOL = 1e-5
B, S, T = 4, 9, 8


def check_grads(c, tag, grads, ref_grads):
    """Norm-wise check per tensor; prints the worst tensors and the analytic zeros."""
    rows, zeros = [], []
    for name, ref in ref_grads.items():
        got = grads[name]
        if name.endswith(".w_k.bias"):
            scale = np.linalg.norm(ref_grads[name[:-len("bias")] + "weight"])
            zeros.append((max(np.linalg.norm(got), np.linalg.norm(ref)) / scale, name))
            continue
        nr, er = pc.rel_err(got, ref)
        rows.append((nr, er, name))
    if zeros:
        worst, name = max(zeros)
        c.check(f"[{tag}] {len(zeros)} *.w_k.bias (true gradient 0): worst max(||tgc||, "
                "||torch||) / ||grad of w_k.weight||", worst, ZERO_GRAD_TOL, f"  ({name})")
    rows.sort(reverse=True)
    for nr, er, name in rows[:3]:
        print(f"       worst tensors: {name}: norm-wise {nr:.2e}, worst element {er:.2e}")
    c.check(f"[{tag}] worst norm-wise rel error over {len(rows)} gradient tensors", rows[0][0],
            TOL, f"  ({rows[0][2]}; worst element |d|/max|ref| over all tensors "
            f"{max(r[1] for r in rows):.1e})")
    for nr, er, name in rows:
        if nr > TOL:
            c.check(f"[{tag}] {name}", nr, TOL)


def main():
    tgc, backend = TGC, TGC.backend
    cfg = pc.TINY
    c = pc.Checker(f"gradient parity, tiny preset, B={B} S={S} T={T}, backend {backend}")
    batch = pc.random_batch(12, B, S, T, cfg)
    tb = pc.torch_batch(batch)
    for tie in (False, True):
        tag = "tied" if tie else "untied"
        tir = tgc.compile(f"grad_{tag}.tir", "train", {"B": B, "S": S, "T": T},
                          {"p_drop": 0, "tie_output": str(tie).lower()}, ["--grad"])
        params = pc.random_params(pc.param_specs(tir), seed=4)
        pc.check_param_shapes(params, cfg)
        out = tgc.run(tir, {**params, **batch, "seed": np.array(0, dtype=np.int64),
                            "step": np.array(1, dtype=np.int64)})
        missing = [n for n in params if "grad." + n not in out]
        if missing:
            print(f"error: --grad graph lacks gradients for {missing}")
            sys.exit(1)

        tp = pc.torch_params(params, torch.float32, requires_grad=True)
        loss, _ = pc.TorchTransformer(cfg, tp, tie).forward(**tb)
        loss.backward()
        c.check(f"[{tag}] loss rel error", abs(float(out["loss"]) - loss.item()) / loss.item(),
                1e-5)
        check_grads(c, tag, {n: out["grad." + n] for n in params},
                    {n: t.grad.numpy() for n, t in tp.items()})
        # Rows of the embeddings for ids absent from the batch (and the pad row) get exactly
        # zero gradient in both.
        for table, ids in (("src_embed", batch["src"]), ("tgt_embed", batch["tgt_in"])):
            if tie and table == "tgt_embed":
                continue  # the tied projection reaches every row
            unused = np.setdiff1d(np.arange(params[table + ".weight"].shape[0]),
                                  np.setdiff1d(ids, [cfg["pad"]]))
            leak = np.abs(out[f"grad.{table}.weight"][unused]).max()
            c.check(f"[{tag}] |grad| on the {len(unused)} {table} rows of absent ids and pad",
                    leak, 0.0)
    c.finish()


if __name__ == "__main__":
    main()
