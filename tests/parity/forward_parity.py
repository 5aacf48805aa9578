"""Issue 3: the forward pass of the tiny Transformer against an independent PyTorch
implementation, same weights and batch through safetensors, float32, dropout off.

Checked within 1e-5 relative (norm-wise for tensors): the train graph's loss and logits, with
the output projection untied and tied to the target embedding; the encode graph's memory;
the log-probabilities of the decode_step graph (last position) and of the decode_at graph
(each row's last non-pad position).

  TGC_EXE=build/tools/tgc python3 tests/parity/forward_parity.py [--backend interp|cpu]
"""
import sys

import parity_common as pc

TGC = pc.setup(sys.argv[1:])  # exits 77 (skipped) without torch or the backend
import numpy as np  # noqa: E402
import torch  # noqa: E402

TOL = 1e-5
B, S, T = 4, 9, 8


def main():
    tgc, backend = TGC, TGC.backend
    cfg = pc.TINY
    dims = {"B": B, "S": S, "T": T}
    c = pc.Checker(f"forward parity, tiny preset, B={B} S={S} T={T}, backend {backend}")
    batch = pc.random_batch(11, B, S, T, cfg)
    tb = pc.torch_batch(batch)
    print(f"  batch: {int((batch['src'] != 0).sum())}/{B * S} real source tokens, "
          f"{int((batch['tgt_out'] != 0).sum())}/{B * T} real targets")

    untied_params = None
    for tie in (False, True):
        tag = "tied" if tie else "untied"
        tir = tgc.compile(f"train_{tag}.tir", "train", dims,
                          {"p_drop": 0, "tie_output": str(tie).lower()})
        specs = pc.param_specs(tir)
        params = pc.random_params(specs, seed=3)
        pc.check_param_shapes(params, cfg)
        untied_params = untied_params or params
        if tie != ("generator.proj.weight" not in params):
            print(f"error: tie_output={tie} but the graph's parameters say otherwise")
            sys.exit(1)
        out = tgc.run(tir, {**params, **batch, "seed": np.array(0, dtype=np.int64),
                            "step": np.array(1, dtype=np.int64)})
        with torch.no_grad():
            loss32, logits32 = pc.TorchTransformer(cfg, pc.torch_params(params, torch.float32),
                                                   tie).forward(**tb)
            loss64, logits64 = pc.TorchTransformer(cfg, pc.torch_params(params, torch.float64),
                                                   tie).forward(**tb)
            # The reference's own loss against PyTorch's built-in label-smoothed CE.
            builtin = torch.nn.functional.cross_entropy(
                logits64.reshape(-1, logits64.shape[-1]), tb["tgt_out"].reshape(-1),
                ignore_index=cfg["pad"], label_smoothing=cfg["label_smoothing"])
        c.check(f"[{tag}] reference loss vs torch.nn.functional.cross_entropy (f64)",
                abs(loss64.item() - builtin.item()) / abs(builtin.item()), 1e-12)
        lt = float(out["loss"])
        c.check(f"[{tag}] loss rel error", abs(lt - loss32.item()) / abs(loss32.item()), TOL,
                f"  (tgc {lt:.8f}, torch f32 {loss32.item():.8f}, torch f64 "
                f"{loss64.item():.8f}; tgc vs f64 {abs(lt - loss64.item()) / loss64.item():.1e})")
        nr, er = pc.rel_err(out["logits"], logits32.numpy())
        nr64, _ = pc.rel_err(out["logits"], logits64.numpy())
        c.check(f"[{tag}] logits norm-wise rel error", nr, TOL,
                f"  (worst element |d|/max|ref| {er:.1e}; tgc vs f64 {nr64:.1e})")

    # The inference graphs, with the untied weights.
    tir_enc = tgc.compile("encode.tir", "encode", {"B": B, "S": S})
    tir_dec = tgc.compile("decode_step.tir", "decode_step", dims)
    params = untied_params
    ref = pc.TorchTransformer(cfg, pc.torch_params(params, torch.float32))
    need = lambda tir: {n: params[n] for n, _ in pc.param_specs(tir)}  # noqa: E731
    enc = tgc.run(tir_enc, {**need(tir_enc), "src": batch["src"]})
    with torch.no_grad():
        memory = ref.encode(tb["src"])
        nr, er = pc.rel_err(enc["memory"], memory.numpy())
        c.check("[encode] memory norm-wise rel error", nr, TOL, f"  (worst element {er:.1e})")
        dec = tgc.run(tir_dec, {**need(tir_dec), "src": batch["src"], "tgt": batch["tgt_in"],
                                "memory": memory.numpy()})
        h = ref.decode(tb["tgt_in"], memory, tb["src"])
        log_probs = torch.log_softmax(ref.generate(h[:, -1]), dim=-1)
        nr, er = pc.rel_err(dec["log_probs"], log_probs.numpy())
        c.check("[decode_step] log_probs norm-wise rel error", nr, TOL,
                f"  (worst element {er:.1e})")
        # decode_at: each row's prefix is its non-pad tokens; rows[b] picks its last one.
        lengths = (batch["tgt_in"] != cfg["pad"]).sum(axis=1)
        rows = np.arange(B, dtype=np.int64) * T + lengths - 1
        tir_at = tgc.compile("decode_at.tir", "decode_at", dims)
        at = tgc.run(tir_at, {**need(tir_at), "src": batch["src"], "tgt": batch["tgt_in"],
                              "memory": memory.numpy(), "rows": rows})
        last = h[torch.arange(B), torch.from_numpy(lengths - 1)]
        log_probs = torch.log_softmax(ref.generate(last), dim=-1)
        nr, er = pc.rel_err(at["log_probs"], log_probs.numpy())
        c.check(f"[decode_at] log_probs at prefix lengths {lengths.tolist()} norm-wise rel error",
                nr, TOL, f"  (worst element {er:.1e})")
    c.finish()


if __name__ == "__main__":
    main()
