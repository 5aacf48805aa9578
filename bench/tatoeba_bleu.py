#!/usr/bin/env python3
"""BLEU on a Tatoeba-format corpus after a fixed wall-clock training budget: tgc against a
PyTorch implementation of the same model, trained on the same data the same way.

    python3 bench/tatoeba_bleu.py ../shared/data/tatoeba-cmn-eng/cmn.txt --minutes 30 --parallel

What is the same on both sides:
  * data: `tgc train --export-data` writes the run's vocabularies (Chinese as characters,
    English as the SentencePiece model tgc trains on the training split), the training pairs
    as token ids, the length buckets (static [B,S]/[B,T] shapes), the batch order of every
    epoch and the held-out validation split (5% by source sentence); torch trains on exactly
    these batches, in this order, padded to the same shapes;
  * model: models/transformer.tg with --preset (bench/tatoeba_torch.py writes it with torch.nn;
    parameter names and shapes are checked equal, counts printed);
  * training: batch 64, Adam(0.9, 0.98, 1e-9) with the paper's noam schedule (--warmup,
    default 1000, and --lr-scale, default 1, passed to both), global-norm clipping at 1, the config's dropout and label
    smoothing, an exponential moving average of the parameters (0.99) for evaluation, and
    tgc's stop rule: the budget counts from process start (compiles, torch's import, data
    loading), minus a reserve for the final decoding;
  * evaluation: greedy decoding capped as tgc caps it, detokenized by the same SentencePiece
    model, scored by sacrebleu (13a) and exact match against the same references; tgc's own
    BLEU (`tgc eval`) is printed next to sacrebleu's on tgc's hypotheses; validation loss
    (label-smoothed, dropout off) is computed by one function for both sets of parameters.

--parallel runs both at once with --threads/2 each (on a shared machine both then see the
same contention); without it they run one after the other with --threads each.
Needs torch, sacrebleu, sentencepiece and safetensors (pip; never part of tgc's set-up).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MODEL = os.path.join(REPO, "models", "transformer.tg")


def model_config(path, preset):
    """The config block of a .tg model file with a preset applied (scalars only)."""
    text = open(path).read()
    block = re.search(r"^config\s*\{(.*?)^\}", text, re.S | re.M).group(1)
    cfg = {}
    for line in block.splitlines():
        m = re.match(r"\s*(\w+)\s*=\s*([^/\s]+)", line)
        if m:
            cfg[m.group(1)] = m.group(2)
    if preset:
        m = re.search(r"^preset\s+%s\s*\{(.*?)\}" % re.escape(preset), text, re.M)
        if not m:
            sys.exit(f"error: {path} has no preset {preset!r}")
        for kv in m.group(1).split(","):
            k, v = (s.strip() for s in kv.split("="))
            cfg[k] = v

    def value(v):
        if v in ("true", "false"):
            return v == "true"
        if v.startswith('"'):
            return v.strip('"')
        try:
            return int(v)
        except ValueError:
            try:
                return float(v)
            except ValueError:
                return v
    return {k: value(v) for k, v in cfg.items()}


def run_logged(cmd, log, env=None):
    """Starts cmd with stdout and stderr into the file `log`; returns (Popen, start time)."""
    f = open(log, "w")
    return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env), time.monotonic()


def finish(proc, t0, name, log):
    rc = proc.wait()
    wall = time.monotonic() - t0
    if rc != 0:
        sys.stdout.write(open(log).read()[-3000:])
        sys.exit(f"error: the {name} run failed (exit {rc}); log {log}")
    return wall


def mean_last(values, n=200):
    tail = values[-n:]
    return sum(tail) / len(tail) if tail else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", help="Tatoeba-style TSV (English<TAB>Chinese<TAB>...)")
    ap.add_argument("--minutes", type=float, default=30.0, help="training budget of each side")
    ap.add_argument("--preset", default="tiny", help="model preset of models/transformer.tg")
    ap.add_argument("--threads", type=int, default=2, help="threads in all")
    ap.add_argument("--parallel", action="store_true",
                    help="run tgc and torch at the same time with threads/2 each")
    ap.add_argument("--out", default="tatoeba_bleu.json", help="JSON results")
    ap.add_argument("--work", default=None, help="run directory (default: next to --out)")
    ap.add_argument("--tgc", default=os.environ.get("TGC_EXE", os.path.join(REPO, "build", "tools", "tgc")),
                    help="the tgc executable (default $TGC_EXE or build/tools/tgc)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1000,
                    help="noam warm-up steps of both (tgc's corpus default, 4000, is the paper's "
                         "for 100k-step runs; a 30-minute run on 2 shared cores has ~4k steps)")
    ap.add_argument("--lr-scale", type=float, default=1.0, help="factor on the noam schedule of both")
    a = ap.parse_args()

    import sacrebleu
    import torch
    from safetensors.numpy import load_file
    sys.path.insert(0, HERE)
    import tatoeba_torch as tt

    corpus = os.path.abspath(a.corpus)
    work = os.path.abspath(a.work or os.path.splitext(a.out)[0] + "-run")
    os.makedirs(work, exist_ok=True)
    each = max(1, a.threads // 2) if a.parallel else a.threads
    data_args = ["--preset", a.preset, "--data", corpus, "--english", "sentencepiece",
                 "--seed", str(a.seed), "--batch", str(a.batch), "--warmup", str(a.warmup),
                 "--lr-scale", str(a.lr_scale)]

    # 1. The run's data, written by tgc itself (not timed for either side).
    export = os.path.join(work, "data.json")
    subprocess.run([a.tgc, "train", MODEL, *data_args, "--out", os.path.join(work, "export"),
                    "--export-data", export], check=True, stdout=subprocess.DEVNULL)
    with open(export) as f:
        data = json.load(f)
    refs = data["valid"]["tgt_text"]

    cfg = model_config(MODEL, a.preset)
    # tgc train's defaults for the rest (tools/cmd_train.cpp, passes/train_step.h).
    cfg.update(ln_eps=1e-5, lr_scale=a.lr_scale, warmup=a.warmup, clip_norm=1.0, beta1=0.9,
               beta2=0.98, eps=1e-9, ema=0.99)
    config_path = os.path.join(work, "config.json")
    with open(config_path, "w") as f:
        json.dump(cfg, f, indent=1)

    # 2. Training, each side for --minutes of wall clock.
    tgc_dir, torch_dir = os.path.join(work, "tgc"), os.path.join(work, "torch")
    tgc_cmd = [a.tgc, "train", MODEL, *data_args, "--minutes", str(a.minutes), "--threads", str(each),
               "--valid-every", "0", "--checkpoint-every", "0", "--samples", "0", "--out", tgc_dir]
    torch_cmd = [sys.executable, os.path.join(HERE, "tatoeba_torch.py"), "--export", export,
                 "--config", config_path, "--minutes", str(a.minutes), "--threads", str(each),
                 "--out", torch_dir]
    env = dict(os.environ, OMP_NUM_THREADS=str(each), MKL_NUM_THREADS=str(each),
               TGC_NUM_THREADS=str(each))
    tgc_log, torch_log = os.path.join(work, "tgc.log"), os.path.join(work, "torch.log")
    if os.path.exists(tgc_dir):
        subprocess.run(["rm", "-r", tgc_dir], check=True)
    print(f"training {a.preset} for {a.minutes} min each, {each} thread(s) each, "
          f"{'at the same time' if a.parallel else 'one after the other'}; logs in {work}",
          flush=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    if a.parallel:
        p1, t1 = run_logged(tgc_cmd, tgc_log, env)
        p2, t2 = run_logged(torch_cmd, torch_log, env)
        tgc_wall = finish(p1, t1, "tgc", tgc_log)
        torch_wall = finish(p2, t2, "torch", torch_log)
    else:
        tgc_wall = finish(*run_logged(tgc_cmd, tgc_log, env), "tgc", tgc_log)
        torch_wall = finish(*run_logged(torch_cmd, torch_log, env), "torch", torch_log)

    # 3. tgc's side: its summary, then `tgc eval` for its hypotheses and its own BLEU.
    log = open(tgc_log).read()
    m = re.search(r"steps (\d+) \((\d+) this run, (\d+) skipped\) in ([\d.]+) s: compile ([\d.]+) s, "
                  r"steps ([\d.]+) s \(([\d.]+) steps/s, (\d+) tokens/s\)", log)
    if not m:
        sys.exit(f"error: no summary line in {tgc_log}")
    tgc_steps, tgc_skipped = int(m.group(1)), int(m.group(3))
    tgc_seconds, tgc_compile, tgc_step_s = float(m.group(4)), float(m.group(5)), float(m.group(6))
    tgc_tok_s = float(m.group(8))
    m = re.search(r"validation split: exact match ([\d.]+)% \((\d+) sentences\), BLEU ([\d.]+)", log)
    tgc_train_bleu = float(m.group(3)) if m else None
    hyp_path = os.path.join(tgc_dir, "hypotheses.txt")
    ev = subprocess.run([a.tgc, "eval", "--checkpoint", tgc_dir, "--threads", str(a.threads),
                         "--hypotheses", hyp_path, "--show", "0"],
                        capture_output=True, text=True, check=True).stdout
    m = re.search(r"exact match ([\d.]+)%, BLEU ([\d.]+)", ev)
    tgc_eval_em, tgc_eval_bleu = float(m.group(1)), float(m.group(2))
    tgc_hyps = open(hyp_path).read().split("\n")[:-1]
    losses = []
    with open(os.path.join(tgc_dir, "loss.csv")) as f:
        next(f)
        for line in f:
            losses.append(float(line.split(",")[2]))
    ckpts = sorted(os.listdir(os.path.join(tgc_dir, "checkpoints")))
    tensors = load_file(os.path.join(tgc_dir, "checkpoints", ckpts[-1]))

    # 4. torch's side.
    tr = json.load(open(os.path.join(torch_dir, "result.json")))
    torch_hyps = open(os.path.join(torch_dir, "hypotheses.txt")).read().split("\n")[:-1]

    # 5. The same model: parameter names and shapes, counts.
    cfg_v = dict(cfg, src_vocab=len(data["src_vocab"]["tokens"]), tgt_vocab=len(data["tgt_vocab"]["tokens"]))
    torch.manual_seed(0)
    ref_model = tt.build_model(cfg_v)
    ref_shapes = {k: tuple(v.shape) for k, v in ref_model.state_dict().items()}
    # A checkpoint holds the parameters, "adam.*" moments, "ema.*" averages and the run's
    # bookkeeping (loss history, counters: not parameters, and not named like one).
    tgc_params = {k: v for k, v in tensors.items() if not k.startswith(("adam.", "ema."))
                  and (k in ref_shapes or "ema." + k in tensors)}
    tgc_shapes = {k: tuple(v.shape) for k, v in tgc_params.items()}
    if tgc_shapes != ref_shapes:
        diff = sorted(set(tgc_shapes.items()) ^ set(ref_shapes.items()))
        sys.exit(f"error: tgc's parameters differ from the torch model's: {diff[:6]}")
    tgc_count = sum(int(v.size) for v in tgc_params.values())
    torch_count = tr["params"]

    # 6. Validation loss of both averaged parameter sets through one function.
    def loss_of(state):
        ref_model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()})
        return tt.valid_loss(ref_model, data)

    tgc_ema = {k: tensors.get("ema." + k, tensors[k]) for k in ref_shapes}
    tgc_vloss = loss_of(tgc_ema)
    torch_state = load_file(os.path.join(torch_dir, "ema.safetensors"))
    torch_vloss = loss_of(torch_state)

    # 7. Scores.
    def score(hyps):
        if len(hyps) != len(refs):
            sys.exit(f"error: {len(hyps)} hypotheses for {len(refs)} references")
        bleu = sacrebleu.corpus_bleu(hyps, [refs])
        return bleu.score, 100.0 * sum(h == r for h, r in zip(hyps, refs)) / len(refs)

    tgc_bleu, tgc_em = score(tgc_hyps)
    torch_bleu, torch_em = score(torch_hyps)

    rows = {
        "tgc": dict(steps=tgc_steps, skipped=tgc_skipped, tokens_per_s=tgc_tok_s,
                    steps_per_s=tgc_steps / tgc_step_s if tgc_step_s else 0.0,
                    train_loss=mean_last(losses), valid_loss=tgc_vloss, bleu=tgc_bleu, exact_match=tgc_em,
                    bleu_tgc_eval=tgc_eval_bleu, bleu_tgc_train=tgc_train_bleu,
                    exact_match_tgc_eval=tgc_eval_em, params=tgc_count, compile_s=tgc_compile,
                    train_s=tgc_seconds, process_wall_s=tgc_wall, threads=each),
        "torch": dict(steps=tr["steps"], skipped=0, tokens_per_s=tr["tokens"] / tr["step_seconds"],
                      steps_per_s=tr["steps"] / tr["step_seconds"], train_loss=mean_last(tr["losses"]),
                      valid_loss=torch_vloss, bleu=torch_bleu, exact_match=torch_em,
                      params=torch_count, setup_s=tr["setup_seconds"], train_s=tr["train_seconds"],
                      eval_s=tr["eval_seconds"], process_wall_s=torch_wall, threads=each,
                      epochs_seen=tr["epochs_seen"], epochs_exported=tr["epochs_exported"]),
    }
    ratio = {k: (rows["tgc"][k] / rows["torch"][k] if rows["torch"][k] else None)
             for k in ("steps", "tokens_per_s", "train_loss", "valid_loss", "bleu", "exact_match")}

    print(f"\ncorpus {corpus}: {len(data['train']['src'])} training pairs, {len(refs)} held out; "
          f"vocabularies {cfg_v['src_vocab']} source (characters), {cfg_v['tgt_vocab']} target "
          f"(SentencePiece); preset {a.preset}; buckets {data['buckets']}")
    print(f"parameters: tgc {tgc_count:,}, torch {torch_count:,}")
    print(f"tgc's BLEU: tgc eval {tgc_eval_bleu:.2f}, sacrebleu on its hypotheses {tgc_bleu:.2f}"
          f"{'' if abs(tgc_eval_bleu - tgc_bleu) < 0.006 else '  (DIFFERENT)'}; "
          f"end of tgc train {tgc_train_bleu}")
    head = f"{'':6} {'steps':>7} {'tokens/s':>9} {'train loss':>10} {'valid loss':>10} {'BLEU':>6} {'exact':>6}"
    print("\n" + head)
    for name in ("tgc", "torch"):
        r = rows[name]
        print(f"{name:6} {r['steps']:>7} {r['tokens_per_s']:>9.0f} {r['train_loss']:>10.3f} "
              f"{r['valid_loss']:>10.3f} {r['bleu']:>6.2f} {r['exact_match']:>5.1f}%")
    print(f"{'ratio':6} " + " ".join(f"{ratio[k]:>{w}.2f}" if ratio[k] is not None else f"{'-':>{w}}"
                                     for k, w in (("steps", 7), ("tokens_per_s", 9), ("train_loss", 10),
                                                  ("valid_loss", 10), ("bleu", 6), ("exact_match", 6))))
    result = dict(corpus=corpus, started=started, minutes=a.minutes, preset=a.preset,
                  threads=a.threads, parallel=a.parallel, threads_each=each, batch=a.batch,
                  seed=a.seed, warmup=a.warmup, lr_scale=a.lr_scale, train_pairs=len(data["train"]["src"]), valid_pairs=len(refs),
                  buckets=data["buckets"], config=cfg_v, tgc=rows["tgc"], torch=rows["torch"],
                  ratio_tgc_over_torch=ratio, torch_version=torch.__version__,
                  sacrebleu_version=sacrebleu.__version__, work=work)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
