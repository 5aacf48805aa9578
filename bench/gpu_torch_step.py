#!/usr/bin/env python3
"""The training step of models/transformer.tg on a CUDA GPU: tgc against PyTorch eager on the
same device (bench/gpu.sh runs it).

  python3 bench/gpu_torch_step.py --tir base_step.tir --tgc-json base_step_cuda.json \
      --preset base --batch 64 --len 64 --steps 10

tgc's figure is the median of `tgc run STEP.tir --backend cuda --repeat N --timing-json`
(the state stays on the device, each run uploads the batch); PyTorch's is the median of N
steps after two warm-up steps of the same model (tests/parity/parity_common.py's
TorchTransformer, dropout 0.1, AdamW with the noam rate, clipping at 1.0) with every tensor on
the GPU, each step timed between two torch.cuda.synchronize() calls. Without torch, or with
a torch that cannot use CUDA, it says "skipped: ..." and prints tgc's figure alone (exit 0).
"""
import argparse
import json
import os
import statistics
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import train_step_bench as tsb  # noqa: E402  (presets and optimizer settings of the CPU bench)

pc = tsb.pc


def torch_median(args):
    """Median seconds of a PyTorch eager training step on the GPU, or a reason string."""
    try:
        import torch
    except ImportError as e:
        return f"skipped: torch is not importable ({e})"
    gpu = args.device == "cuda"
    if gpu and not torch.cuda.is_available():
        return f"skipped: torch {torch.__version__} cannot use CUDA here"
    torch.set_default_device(args.device)  # parameters, batch, masks and tables on the GPU
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    cfg = dict(tsb.COMMON, **tsb.PRESETS[args.preset])
    p = pc.torch_params(pc.random_params(pc.param_specs(args.tir), seed=1), torch.float32,
                        requires_grad=True)
    model = pc.TorchTransformer(cfg, p, p_drop=tsb.P_DROP)
    params = list(p.values())
    opt = torch.optim.AdamW(params, lr=1.0, betas=tsb.BETAS, eps=tsb.EPS, weight_decay=0.0)
    torch.manual_seed(1)
    batch = [torch.randint(1, cfg["tgt_vocab"], (args.batch, args.len)) for _ in range(3)]

    def step(s):
        lr = cfg["d_model"] ** -0.5 * min(s ** -0.5, s * tsb.WARMUP ** -1.5)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss, _ = model.forward(*batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, tsb.CLIP)
        opt.step()
        return loss.item()

    step(1), step(2)  # warm-up: kernels, allocator, Adam state
    times = []
    for s in range(3, args.steps + 3):
        sync()
        t0 = time.perf_counter()
        step(s)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), torch.cuda.get_device_name() if gpu else "CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tir", required=True, help="the step tgc compiled (parameter shapes)")
    ap.add_argument("--tgc-json", required=True, help="tgc run --timing-json of that step")
    ap.add_argument("--preset", default="base", choices=sorted(tsb.PRESETS))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="PyTorch's device (cpu: to check this script without a GPU)")
    args = ap.parse_args()

    with open(args.tgc_json) as f:
        tgc = json.load(f)
    tgc_s = tgc["median_s"]
    shape = f"{args.preset} {args.batch}x{args.len}"
    print(f"tgc      {shape}: {tgc_s * 1e3:8.2f} ms/step (median of {len(tgc['run_s'])}, "
          f"{tgc.get('backend', 'cuda')} backend)")
    got = torch_median(args)
    if isinstance(got, str):
        print(f"PyTorch  {shape}: {got}")
        return 0
    torch_s, device = got
    print(f"PyTorch  {shape}: {torch_s * 1e3:8.2f} ms/step (eager, median of {args.steps}, {device})")
    print(f"tgc / PyTorch step time: {tgc_s / torch_s:.2f}x (below 1: tgc faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
