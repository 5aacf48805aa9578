#!/usr/bin/env python3
"""The decoder-only LM (models/gpt.tg, small preset) trained on the English side of a Tatoeba
corpus for a wall-clock budget by tgc, by PyTorch eager and by torch.compile, on the same
batches from the same initial parameters; then validation perplexity, and generation speed
with a key/value cache at batch 1 and 16 against a PyTorch generation loop with a cache.

    python3 bench/gpt_lm.py --tgc build/tools/tgc --minutes 10 --out gpt_lm.json   # ~40 min
    python3 bench/gpt_lm.py --tgc build/tools/tgc --minutes 0.5                    # a smoke run
    python3 bench/gpt_lm.py --tgc build/tools/tgc --only-generate --work DIR --gen-threads 2,1
                            # generation again, from an earlier run's DIR

What is the same on every side:
  * data: the corpus's first column (English) written to a text file, one sentence a line;
    `tgc train --export-data` writes what the lm task makes of it (characters; each line bos +
    ids + eos; the 5% validation split; the length buckets; the batch order of each epoch) and
    the run's initial parameters; the PyTorch sides train on exactly these batches, in this
    order, from these parameters;
  * model: tests/parity/gpt_reference.py's TorchGPT, the implementation tests/parity/lm_parity.py
    checks against tgc (loss, logits and every gradient within float32 rounding): post-LN
    blocks, tied embeddings, sinusoidal positions, dropout 0.1 where the .tg has it; attention
    through F.scaled_dot_product_attention (--attention math: matmul - softmax - matmul);
  * training: tgc train's defaults for a file: batch 64, 2 length buckets, AdamW (0.9, 0.98,
    1e-9, no weight decay) with the noam schedule (warm-up 4000, scale 1), clipping at global
    norm 1, an exponential moving average (0.99) of the parameters for evaluation; the budget
    counts from the trainer's start (tgc: its Trainer, data and compiles included; PyTorch:
    after `import torch`, data, model and torch.compile's compiles included) and stops a step
    early as tgc's rule does;
  * eager: torch.optim.AdamW(fused=True) and clip_grad_norm_(foreach=True); compile: the loss
    function and clipping + AdamW.step each through torch.compile (inductor; the rate a tensor),
    one compiled graph per bucket shape.

Figures:
  * training tokens/s (target tokens, pad excluded): the median over windows of >= 10 s
    between progress marks (tgc: its progress lines, timestamped here as they arrive, tokens
    counted from the batch plans; PyTorch: the same marks in its loop); the first window
    (start-up, compiles) is not one of them; the same windows over the process's CPU
    seconds / threads ("per CPU"), and the model FLOPs a second over every position of the
    [B, L] batches (matmuls and attention, forward and backward; --peak prints them as a
    fraction of the FMA peak). Also total tokens over the seconds inside steps;
  * validation loss and perplexity of the averaged parameters over the whole validation split,
    computed for every side by one function (TorchGPT, dropout off); tgc's own figure from its
    summary line next to it (they agree to float rounding: a check that both run one model);
  * generation: `tgc generate --greedy --ignore-eos --max-new N` on 1 prompt (--batch 1) and
    16 prompts (--batch 16), its tokens/s (compiles excluded), against TorchGPT.prefill/step:
    preallocated caches, one position a step, greedy (pad and bos never drawn, as tgc), the same
    number of new tokens, on tgc's trained parameters; the median of --gen-rounds rounds, tgc
    and PyTorch alternating, after one untimed warm-up each. How many greedy tokens of the two
    agree is printed too (float rounding may flip a near tie).
Threads: --threads N for everything (TGC_NUM_THREADS, torch.set_num_threads, OMP_NUM_THREADS,
and TORCHINDUCTOR_COMPILE_THREADS for inductor's compile workers). On a host that other jobs
load, the "per CPU" column (tokens over process CPU seconds / threads, per window) says what
each side would do with its threads to itself; PyTorch's spinning OpenMP threads count
against it there, so quote the wall-clock figures and the load beside them.
Needs torch, numpy and safetensors (pip; never part of tgc's set-up): without them it says so
and exits 77 after nothing was run.
"""
import argparse
import csv
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MODEL = os.path.join(REPO, "models", "gpt.tg")
sys.path.insert(0, os.path.join(REPO, "tests", "parity"))
import gpt_reference as gr  # noqa: E402  (imports nothing heavy)

DEFAULT_CORPUS = os.path.join(REPO, "..", "shared", "data", "tatoeba-cmn-eng", "cmn.txt")
# tgc train's defaults for a file (tools/cmd_train.cpp, passes/train_step.h).
OPT = dict(batch=64, buckets=2, warmup=4000, lr_scale=1.0, clip_norm=1.0, beta1=0.9, beta2=0.98,
           eps=1e-9, weight_decay=0.0, ema=0.99, p_drop=0.1)
WINDOW_S = 10.0  # tgc train prints a progress line every 10 s when stderr is not a terminal
SKIP = 77


def require_modules():
    missing = []
    for mod in ("numpy", "torch", "safetensors"):
        try:
            __import__(mod)
        except ImportError as e:
            missing.append(f"{mod} ({e})")
    if missing:
        print("SKIPPED: bench/gpt_lm.py needs the Python packages " + ", ".join(missing) +
              "; install them with `pip install torch numpy safetensors`")
        sys.exit(SKIP)


def load_avg():
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except OSError:
        return float("nan")


# ---- data -----------------------------------------------------------------------------------

def write_english(corpus, path):
    """Column 1 of a Tatoeba TSV (English<TAB>Chinese<TAB>...), one sentence a line."""
    n = 0
    with open(corpus, encoding="utf-8") as f, open(path, "w", encoding="utf-8") as out:
        for line in f:
            col = line.rstrip("\n").split("\t")[0].lstrip("\ufeff").strip()
            if col:
                out.write(col + "\n")
                n += 1
    return n


class Batches:
    """The export's batches: step s (from 0) is plan s % per_epoch of epoch s // per_epoch,
    built as LmBatcher::makeBatch builds it."""

    def __init__(self, export):
        self.train, self.epochs = export["train"], export["epochs"]
        self.buckets, self.B = export["buckets"], export["batch_size"]
        self.per_epoch = len(self.epochs[0])

    def plan(self, s):
        epoch = s // self.per_epoch
        return self.epochs[epoch % len(self.epochs)][s % self.per_epoch], epoch

    def tokens(self, s):
        """Target tokens of step s."""
        _, rows = self.plan(s)[0]
        return sum(len(self.train[i]) - 1 for i in rows)

    def flops(self, s, cfg):
        """Model FLOPs of training step s over every position of its [B, L] batch (padding
        included, as the hardware computes it): forward + backward = 3 x the forward's
        2 x (n_layers (4 d^2 + 2 d d_ff) + d V) a position for the matmuls, plus attention's
        2 x 2 L d a position and layer (scores and weighted sum over all L keys)."""
        (bucket, _), _ = self.plan(s)
        L, d = self.buckets[bucket], cfg["d_model"]
        per = 2 * (cfg["n_layers"] * (4 * d * d + 2 * d * cfg["d_ff"]) + d * cfg["vocab"])
        per += cfg["n_layers"] * 4 * L * d
        return 3 * per * self.B * L

    def batch(self, s):
        import torch
        (bucket, rows), _ = self.plan(s)
        L = self.buckets[bucket]
        tokens = torch.zeros(self.B, L, dtype=torch.long)
        targets = torch.zeros(self.B, L, dtype=torch.long)
        for r in range(self.B):
            seq = self.train[rows[r % len(rows)]]
            n = len(seq) - 1
            tokens[r, :n] = torch.tensor(seq[:-1])
            if r < len(rows):
                targets[r, :n] = torch.tensor(seq[1:])
        return tokens, targets


def noam(step, d_model, warmup, lr_scale):
    """passes/train_step.cpp's schedule: lr_scale * d^-0.5 * min(s^-0.5, s * warmup^-1.5)."""
    s = max(step, 1)
    return lr_scale * d_model ** -0.5 * min(s ** -0.5, s * warmup ** -1.5)


def windows(marks, tokens_of, flops_of, threads):
    """[(tokens/s, seconds, tokens per CPU second x threads, GFLOP/s)] over consecutive marks
    (step, wall seconds, process CPU seconds): the tokens of the steps between two marks over
    the wall time between them; over the CPU time between them divided by the threads (the
    rate the process would have with its threads to itself: for a host that others load); and
    the model FLOPs of those steps over the wall time."""
    out = []
    for (s0, t0, c0), (s1, t1, c1) in zip(marks, marks[1:]):
        if s1 > s0 and t1 > t0:
            n = sum(tokens_of(s) for s in range(s0, s1))
            cpu = (c1 - c0) / threads
            f = sum(flops_of(s) for s in range(s0, s1))
            out.append((n / (t1 - t0), t1 - t0, n / cpu if cpu > 0 else float("nan"),
                        f / (t1 - t0) / 1e9))
    return out


# ---- the PyTorch trainer (a process of its own) -----------------------------------------------

def torch_train(a):
    """--worker eager|compile: trains for --minutes from the export; writes DIR/result.json and
    DIR/ema.safetensors."""
    import torch
    start = time.monotonic()  # the budget counts from here (after the import)
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    from safetensors.numpy import load_file
    from safetensors.torch import save_file
    with open(a.export) as f:
        export = json.load(f)
    data = Batches(export)
    cfg = gr.gpt_config(a.preset, vocab=len(export["vocab"]["tokens"]), p_drop=OPT["p_drop"])
    init = load_file(os.path.splitext(a.export)[0] + ".init.safetensors")
    why = gr.check_params({k: v.shape for k, v in init.items()}, cfg)
    if why:
        sys.exit(f"error: tgc's initial parameters are not the reference's: {why}")
    p = {k: torch.tensor(init[k], requires_grad=True) for k in gr.param_shapes(cfg)}
    params = list(p.values())
    model = gr.TorchGPT(cfg, p, p_drop=OPT["p_drop"], sdpa=a.attention == "sdpa")
    compiled = a.worker == "compile"
    betas = (OPT["beta1"], OPT["beta2"])
    if compiled:
        opt = torch.optim.AdamW(params, lr=torch.tensor(1.0), betas=betas, eps=OPT["eps"],
                                weight_decay=OPT["weight_decay"])
    else:
        opt = torch.optim.AdamW(params, lr=1.0, betas=betas, eps=OPT["eps"],
                                weight_decay=OPT["weight_decay"], fused=True)

    def loss_fn(tokens, targets):
        return model.loss(tokens, targets)

    def update():
        torch.nn.utils.clip_grad_norm_(params, OPT["clip_norm"], foreach=True)
        opt.step()

    if compiled:
        loss_fn = torch.compile(loss_fn, dynamic=False)
        update = torch.compile(update)
    ema = [t.detach().clone() for t in params]
    budget = a.minutes * 60
    reserve = 1.0  # Trainer::train's for tasks without decoding
    step, tokens, step_seconds, losses = 0, 0, 0.0, []
    marks, last_mark = [], start
    print(f"{a.worker}: {sum(t.numel() for t in params):,} parameters, setup "
          f"{time.monotonic() - start:.1f} s, {a.threads} thread(s)", flush=True)
    while True:
        now = time.monotonic()
        per_step = step_seconds / step if step else 0.0
        if now - start + per_step + reserve >= budget:
            break
        t0 = time.monotonic()
        tokens_in, targets = data.batch(step)
        loss = loss_fn(tokens_in, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        lr = noam(step + 1, cfg["d_model"], a.warmup, a.lr_scale)
        for g in opt.param_groups:
            if isinstance(g["lr"], torch.Tensor):
                g["lr"].fill_(lr)
            else:
                g["lr"] = lr
        update()
        step += 1
        # Trainer::updateAverages: the average starts at the parameters after the first
        # update, then decays by min(ema, (1 + u) / (10 + u)) with u updates done.
        decay = 0.0 if step == 1 else min(OPT["ema"], (1 + step) / (10 + step))
        with torch.no_grad():
            torch._foreach_mul_(ema, decay)
            torch._foreach_add_(ema, [t.detach() for t in params], alpha=1 - decay)
        losses.append(loss.item())
        t1 = time.monotonic()
        step_seconds += t1 - t0
        tokens += data.tokens(step - 1)
        if t1 - last_mark >= WINDOW_S:
            last_mark = t1
            marks.append((step, t1 - start, time.process_time()))
            print(f"{a.worker}: step {step} | loss {losses[-1]:.4f} | lr {lr:.2e} | "
                  f"{tokens / step_seconds:.0f} tok/s | {t1 - start:.0f} s", flush=True)
    train_seconds = time.monotonic() - start
    os.makedirs(a.out, exist_ok=True)
    save_file({k: e.contiguous() for k, e in zip(p, ema)}, os.path.join(a.out, "ema.safetensors"))
    result = dict(side=a.worker, steps=step, tokens=tokens, step_seconds=step_seconds,
                  train_seconds=train_seconds, marks=marks, losses=losses, threads=a.threads,
                  epochs_seen=step / data.per_epoch, epochs_exported=len(data.epochs),
                  attention=a.attention, torch_version=torch.__version__)
    with open(os.path.join(a.out, "result.json"), "w") as f:
        json.dump(result, f)
    print(f"{a.worker}: {step} steps in {train_seconds:.1f} s ({tokens / max(step_seconds, 1e-9):.0f} "
          f"tokens/s inside steps)", flush=True)


# ---- tgc ------------------------------------------------------------------------------------

def proc_cpu_seconds(pid):
    """User + system CPU seconds of a process so far, all its threads (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def tgc_train(a, text, out_dir, log_path, env):
    """tgc train for --minutes; returns (marks [(step, seconds)], summary dict). The progress
    lines are timestamped as they arrive."""
    cmd = [a.tgc, "train", MODEL, "--preset", a.preset, "--data", text, "--seed", str(a.seed),
           "--minutes", str(a.minutes), "--threads", str(a.threads), "--valid-every", "0",
           "--checkpoint-every", "0", "--samples", "0", "--warmup", str(a.warmup),
           "--lr-scale", str(a.lr_scale), "--out", out_dir]
    t_start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, bufsize=1)
    marks, err_lines = [], []

    def read_err():
        for line in proc.stderr:
            now = time.monotonic()
            err_lines.append(line)
            m = re.match(r"step (\d+) \|", line)
            if m:
                marks.append((int(m.group(1)), now - t_start, proc_cpu_seconds(proc.pid)))
                print("  tgc: " + line.rstrip(), flush=True)

    reader = threading.Thread(target=read_err)
    reader.start()
    stdout = proc.stdout.read()
    rc = proc.wait()
    reader.join()
    with open(log_path, "w") as f:
        f.write("".join(err_lines) + stdout)
    if rc != 0:
        sys.stdout.write("".join(err_lines)[-3000:] + stdout[-3000:])
        sys.exit(f"error: tgc train failed (exit {rc}): {' '.join(cmd)}")
    m = re.search(r"steps (\d+) \((\d+) this run, (\d+) skipped\) in ([\d.]+) s: compile ([\d.]+) s, "
                  r"steps ([\d.]+) s \(([\d.]+) steps/s, (\d+) tokens/s\)", stdout)
    v = re.search(r"validation split \((\d+) sentences\): loss ([\d.]+), perplexity ([\d.]+)", stdout)
    if not m or not v:
        sys.exit(f"error: no summary line in tgc train's output ({log_path})")
    summary = dict(steps=int(m.group(1)), skipped=int(m.group(3)), seconds=float(m.group(4)),
                   compile_s=float(m.group(5)), step_seconds=float(m.group(6)),
                   tokens_per_s_total=float(m.group(8)), valid_sentences=int(v.group(1)),
                   valid_loss_tgc=float(v.group(2)), valid_ppl_tgc=float(v.group(3)),
                   process_wall_s=time.monotonic() - t_start)
    return marks, summary


def tgc_generate(a, ckpt, prompts, env, threads):
    """tokens/s of one `tgc generate` run, and its output lines."""
    cmd = [a.tgc, "generate", "--checkpoint", ckpt, "--greedy", "--ignore-eos",
           "--max-new", str(a.gen_new), "--batch", str(len(prompts)), "--threads", str(threads),
           *prompts]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"error: tgc generate failed (exit {r.returncode}):\n{r.stderr}")
    m = re.search(r"([\d.]+) tokens/s without the", r.stderr)
    if not m:
        sys.exit(f"error: no tokens/s in tgc generate's output:\n{r.stderr}")
    return float(m.group(1)), r.stdout.split("\n")[:len(prompts)]


# ---- evaluation and generation in PyTorch -----------------------------------------------------

def valid_loss(cfg, state, valid, attention, batch=64):
    """Token-averaged loss over the whole validation split (dropout off), for a parameter set."""
    import torch
    p = {k: torch.from_numpy(state[k].copy()) for k in gr.param_shapes(cfg)}
    model = gr.TorchGPT(cfg, p, sdpa=attention == "sdpa")
    order = sorted(range(len(valid)), key=lambda i: len(valid[i]))
    total, count = 0.0, 0.0
    with torch.inference_mode():
        for i in range(0, len(order), batch):
            rows = [valid[j] for j in order[i:i + batch]]
            L = max(len(s) - 1 for s in rows)
            tokens = torch.zeros(len(rows), L, dtype=torch.long)
            targets = torch.zeros(len(rows), L, dtype=torch.long)
            for r, s in enumerate(rows):
                tokens[r, :len(s) - 1] = torch.tensor(s[:-1])
                targets[r, :len(s) - 1] = torch.tensor(s[1:])
            s_, n = model.loss_sum(tokens, targets)
            total, count = total + float(s_), count + float(n)
    return total / max(count, 1.0)


def torch_generate(model, prompt_ids, new, banned):
    """Greedy continuation of equal-length prompts [B, P] with the key/value cache: the new
    ids [B, new] and the seconds it took."""
    import torch
    t0 = time.perf_counter()
    with torch.inference_mode():
        tokens = torch.tensor(prompt_ids, dtype=torch.long)
        B, P = tokens.shape
        logp, caches = model.prefill(tokens, P + new)
        out = []
        for i in range(new):
            logp[:, banned] = float("-inf")
            nxt = logp.argmax(-1)
            out.append(nxt)
            if i + 1 < new:
                logp = model.step(nxt, P + i, caches)
        ids = torch.stack(out, 1)
    return ids.tolist(), time.perf_counter() - t0


def measure_generation(a, ckpt, tmodel, prompts, banned, vocab, env, threads):
    """Generation tokens/s at batch 1 and 16 on `threads` threads: tgc generate against
    torch_generate, alternating, medians of --gen-rounds rounds after a warm-up each."""
    out = {}
    for B in (1, 16):
        ids = [p for p, _ in prompts[:B]]
        texts = [t for _, t in prompts[:B]]
        torch_generate(tmodel, ids, a.gen_new, banned)  # warm-up
        tgc_generate(a, ckpt, texts, env, threads)
        tg, tt, same = [], [], []
        for rnd in range(a.gen_rounds):
            for who in (("tgc", "torch") if rnd % 2 == 0 else ("torch", "tgc")):
                if who == "tgc":
                    rate, lines_out = tgc_generate(a, ckpt, texts, env, threads)
                    tg.append(rate)
                else:
                    new_ids, secs = torch_generate(tmodel, ids, a.gen_new, banned)
                    tt.append(B * a.gen_new / secs)
            if rnd == 0:  # greedy agreement: tgc shows each text up to its first eos
                for (_, ptxt), row, line in zip(prompts[:B], new_ids, lines_out):
                    cont = "".join(vocab[i] for i in (row[:row.index(2)] if 2 in row else row))
                    got = line[len(ptxt):] if line.startswith(ptxt) else line
                    same.append(cont == got)
        g = out[B] = dict(tgc=statistics.median(tg), torch=statistics.median(tt), tgc_rounds=tg,
                          torch_rounds=tt, agree_rows=sum(same), rows=len(same), load=load_avg())
        print(f"generation batch {B}, {threads} thread(s): tgc {g['tgc']:,.0f} tokens/s, PyTorch "
              f"eager with a cache {g['torch']:,.0f} (ratio {g['tgc'] / g['torch']:.2f}); the "
              f"greedy texts (up to the first eos) are the same in {g['agree_rows']} of "
              f"{g['rows']} rows; load {g['load']:.1f}", flush=True)
    return out


def pick_prompts(valid, vocab, n, length):
    """n validation sequences whose first `length` ids (bos included) make a prompt that tgc
    tokenizes back to the same ids: known characters, no space at either end."""
    out = []
    for s in valid:
        ids = s[:length]
        if len(s) <= length or any(i < 4 for i in ids[1:]):
            continue
        text = "".join(vocab[i] for i in ids[1:])
        if text != text.strip() or "  " in text:
            continue
        out.append((ids, text))
        if len(out) == n:
            break
    if len(out) < n:
        sys.exit(f"error: only {len(out)} usable prompts of {length} ids in the validation split")
    return out


# ---- main -----------------------------------------------------------------------------------

def peak_text(gflops, peak):
    return f", {100 * gflops / peak:.0f}% of the {peak:.0f} GFLOP/s FMA peak" if peak else ""


def fmt_rate(x):
    return f"{x:,.0f}" if x == x else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=DEFAULT_CORPUS, help="Tatoeba-style TSV (English first)")
    ap.add_argument("--minutes", type=float, default=10.0, help="training budget of each side")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=OPT["warmup"],
                    help="noam warm-up steps of every side (tgc train's default for a file)")
    ap.add_argument("--lr-scale", type=float, default=OPT["lr_scale"],
                    help="factor on the noam schedule of every side")
    ap.add_argument("--tgc", default=os.environ.get("TGC_EXE", os.path.join(REPO, "build", "tools", "tgc")))
    ap.add_argument("--sides", default="tgc,eager,compile",
                    help="which trainers run, in this order (comma-separated)")
    ap.add_argument("--attention", default="sdpa", choices=["sdpa", "math"],
                    help="PyTorch attention: F.scaled_dot_product_attention or matmul-softmax-matmul")
    ap.add_argument("--peak", type=float, default=0.0,
                    help="the host's FMA peak on --threads threads in GFLOP/s (bench/gemm_bench "
                         "prints it), to print training GFLOP/s as a fraction of it")
    ap.add_argument("--gen-new", type=int, default=100, help="new tokens per generated sample")
    ap.add_argument("--gen-prompt", type=int, default=8, help="prompt ids (bos included)")
    ap.add_argument("--gen-rounds", type=int, default=5)
    ap.add_argument("--gen-threads", default=None,
                    help="thread counts generation is measured at, comma-separated (default "
                         "--threads; on a loaded host PyTorch's 2-thread batch-1 loop suffers most)")
    ap.add_argument("--only-generate", action="store_true",
                    help="only the generation figures, from the tgc run and data already in --work")
    ap.add_argument("--out", default=None, help="JSON results (default: WORK/result.json)")
    ap.add_argument("--work", default=None, help="run directory (default: a new temporary one)")
    # The PyTorch worker (an internal mode: one process per trainer).
    ap.add_argument("--worker", choices=["eager", "compile"], help=argparse.SUPPRESS)
    ap.add_argument("--export", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return torch_train(a)
    a.gen_threads = a.gen_threads or str(a.threads)

    require_modules()
    import torch
    from safetensors.numpy import load_file
    if not os.path.exists(a.tgc):
        sys.exit(f"error: no tgc executable at {a.tgc} (--tgc or $TGC_EXE)")
    sides = [s for s in a.sides.split(",") if s]
    if "tgc" not in sides:
        sys.exit("error: --sides must include tgc (its export and checkpoint feed the rest)")
    work = os.path.abspath(a.work or tempfile.mkdtemp(prefix="gpt_lm_"))
    os.makedirs(work, exist_ok=True)
    out_json = a.out or os.path.join(work, "result.json")
    # Inductor compiles in as many worker processes as the others have threads.
    env = dict(os.environ, TGC_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads),
               MKL_NUM_THREADS=str(a.threads), TORCHINDUCTOR_COMPILE_THREADS=str(a.threads))
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"work directory {work}; {a.threads} thread(s); load {load_avg():.1f}", flush=True)

    # 1. The text and the run's data as tgc makes it (not timed).
    text = os.path.join(work, "english.txt")
    lines = write_english(a.corpus, text)
    export = os.path.join(work, "data.json")
    epochs = max(4, math.ceil(a.minutes * 3))
    if not (a.only_generate and os.path.exists(export)):
        subprocess.run([a.tgc, "train", MODEL, "--preset", a.preset, "--data", text, "--seed",
                        str(a.seed), "--out", os.path.join(work, "export-run"), "--export-data",
                        export, "--export-epochs", str(epochs)], check=True, env=env,
                       stdout=subprocess.DEVNULL)
    with open(export) as f:
        data = json.load(f)
    batches = Batches(data)
    vocab = data["vocab"]["tokens"]
    cfg = gr.gpt_config(a.preset, vocab=len(vocab), p_drop=0.0)
    print(f"{a.corpus}: {lines} English lines; {len(data['train'])} training sequences, "
          f"{len(data['valid'])} validation; {len(vocab)} characters; buckets {data['buckets']}, "
          f"batch {data['batch_size']}, {batches.per_epoch} batches an epoch", flush=True)

    # 2. Training, one side after the other.
    results = {}
    for side in ([] if a.only_generate else sides):
        d = os.path.join(work, side)
        load0 = load_avg()
        print(f"\n== {side}: {a.minutes} min, {a.threads} thread(s), load {load0:.1f}", flush=True)
        if side == "tgc":
            if os.path.exists(d):
                subprocess.run(["rm", "-r", d], check=True)
            marks, summary = tgc_train(a, text, d, os.path.join(work, "tgc.log"), env)
            ckpts = sorted(os.listdir(os.path.join(d, "checkpoints")))
            tensors = load_file(os.path.join(d, "checkpoints", ckpts[-1]))
            state = {k: tensors.get("ema." + k, tensors.get(k)) for k in gr.param_shapes(cfg)}
            r = dict(summary, marks=marks, tokens_total=sum(batches.tokens(s) for s in range(summary["steps"])))
            # The export's batches are tgc's: the target tokens of every step in loss.csv.
            with open(os.path.join(d, "loss.csv")) as f:
                rows = list(csv.DictReader(f))
            r["losses"] = [float(x["loss"]) for x in rows]
            wrong = sum(int(x["tokens"]) != batches.tokens(i) for i, x in enumerate(rows))
            if wrong:
                sys.exit(f"error: {wrong} of tgc's {len(rows)} steps had other target counts "
                         "than the exported batches")
            r["tokens_per_s_steps"] = r["tokens_total"] / r["step_seconds"] if r["step_seconds"] else 0.0
        else:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", side, "--export", export,
                   "--minutes", str(a.minutes), "--threads", str(a.threads), "--preset", a.preset,
                   "--attention", a.attention, "--warmup", str(a.warmup), "--lr-scale",
                   str(a.lr_scale), "--work", d]
            cmd += ["--out", d]
            t0 = time.monotonic()
            log_path = os.path.join(work, side + ".log")
            with open(log_path, "w") as log:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=env, bufsize=1)
                for line in proc.stdout:
                    log.write(line)
                    print("  " + line.rstrip(), flush=True)
                rc = proc.wait()
            if rc != 0:
                sys.exit(f"error: the {side} trainer failed (exit {rc}); log {log_path}")
            tr = json.load(open(os.path.join(d, "result.json")))
            state = load_file(os.path.join(d, "ema.safetensors"))
            r = dict(steps=tr["steps"], step_seconds=tr["step_seconds"], marks=tr["marks"],
                     tokens_total=tr["tokens"], tokens_per_s_steps=tr["tokens"] / max(tr["step_seconds"], 1e-9),
                     seconds=tr["train_seconds"], process_wall_s=time.monotonic() - t0,
                     epochs_seen=tr["epochs_seen"], epochs_exported=tr["epochs_exported"],
                     losses=tr["losses"])
            # Same batches, same start: the loss curves differ by the dropout masks only.
            n = min(len(tr["losses"]), len(results["tgc"]["losses"])) if "tgc" in results else 0
            if n:
                diff = statistics.fmean(abs(x - y) for x, y in zip(tr["losses"][:n], results["tgc"]["losses"][:n]))
                r["loss_diff_to_tgc"] = diff
                print(f"  {side}'s training loss against tgc's at the same {n} steps: mean |d| "
                      f"{diff:.4f} (dropout masks differ)", flush=True)
            if tr["epochs_seen"] > tr["epochs_exported"]:
                print(f"  note: {side} trained past the {tr['epochs_exported']} exported epochs "
                      "(their order repeats)", flush=True)
        w = windows(r["marks"], batches.tokens, lambda s: batches.flops(s, cfg), a.threads)
        r["windows"] = w
        nan = float("nan")
        r["tokens_per_s"] = statistics.median(x[0] for x in w) if w else nan
        r["tokens_per_cpu_s"] = statistics.median(x[2] for x in w) if w else nan
        r["gflops"] = statistics.median(x[3] for x in w) if w else nan
        r["valid_loss"] = valid_loss(cfg, state, data["valid"], a.attention)
        r["valid_ppl"] = math.exp(r["valid_loss"])
        r["load_before"], r["load_after"] = load0, load_avg()
        results[side] = r
        print(f"  {side}: {r['steps']} steps, tokens/s median of {len(w)} windows "
              f"{fmt_rate(r['tokens_per_s'])} (inside steps overall {fmt_rate(r['tokens_per_s_steps'])}; "
              f"per CPU second / threads {fmt_rate(r['tokens_per_cpu_s'])}; {r['gflops']:.1f} "
              f"GFLOP/s{peak_text(r['gflops'], a.peak)}), "
              f"validation loss {r['valid_loss']:.4f}, perplexity {r['valid_ppl']:.3f}", flush=True)
    if not a.only_generate:
        t = results["tgc"]
        agree = abs(t["valid_loss"] - t["valid_loss_tgc"])
        print(f"  tgc's own validation loss {t['valid_loss_tgc']:.4f} against the reference's "
              f"{t['valid_loss']:.4f} on its parameters (|d| {agree:.1e})", flush=True)

    # 3. Generation with the cache: tgc generate against the PyTorch loop, on tgc's parameters.
    ckpt = os.path.join(work, "tgc")
    tensors = load_file(os.path.join(ckpt, "checkpoints", sorted(os.listdir(os.path.join(ckpt, "checkpoints")))[-1]))
    gp = {k: torch.from_numpy(tensors.get("ema." + k, tensors.get(k)).copy()) for k in gr.param_shapes(cfg)}
    tmodel = gr.TorchGPT(cfg, gp, sdpa=a.attention == "sdpa")
    prompts = pick_prompts(data["valid"], vocab, 16, a.gen_prompt)
    banned = [data["pad"], data["bos"]]
    gen = {}
    for nt in [int(x) for x in a.gen_threads.split(",")]:
        torch.set_num_threads(nt)
        gen[nt] = measure_generation(a, ckpt, tmodel, prompts, banned, vocab, env, nt)
    torch.set_num_threads(a.threads)
    if a.only_generate:
        with open(out_json, "w") as f:
            json.dump(dict(started=started, commit=commit, gen_new=a.gen_new, gen_prompt=a.gen_prompt,
                           generation=gen, torch_version=torch.__version__, work=work), f, indent=1)
        print(f"wrote {out_json}")
        return

    # 4. Summary against the targets.
    print(f"\nLM benchmark: models/gpt.tg --preset {a.preset}, {a.minutes} min each, {a.threads} "
          f"thread(s), commit {commit}, {started}")
    print(f"{'side':8} {'steps':>7} {'tokens/s':>9} {'in steps':>9} {'per CPU':>9} {'GFLOP/s':>8} "
          f"{'valid loss':>10} {'ppl':>8} {'load':>9}")
    for side in sides:
        r = results[side]
        print(f"{side:8} {r['steps']:>7} {fmt_rate(r['tokens_per_s']):>9} "
              f"{fmt_rate(r['tokens_per_s_steps']):>9} {fmt_rate(r['tokens_per_cpu_s']):>9} "
              f"{r['gflops']:>8.1f} "
              f"{r['valid_loss']:>10.4f} {r['valid_ppl']:>8.3f} "
              f"{r['load_before']:>4.1f}-{r['load_after']:<4.1f}")
    verdicts = {}
    if "eager" in results:
        e = results["eager"]
        verdicts["train_tokens_ratio"] = t["tokens_per_s"] / e["tokens_per_s"]
        verdicts["train_tokens_ratio_cpu"] = t["tokens_per_cpu_s"] / e["tokens_per_cpu_s"]
        verdicts["ppl_ratio"] = t["valid_ppl"] / e["valid_ppl"]
        print(f"training tokens/s tgc / eager {verdicts['train_tokens_ratio']:.2f} (target >= 1.6; "
              f"per CPU second {verdicts['train_tokens_ratio_cpu']:.2f}); "
              f"perplexity tgc / eager {verdicts['ppl_ratio']:.3f} (target <= 1)")
    if "compile" in results:
        c = results["compile"]
        verdicts["train_tokens_ratio_compile"] = t["tokens_per_s"] / c["tokens_per_s"]
        verdicts["ppl_ratio_compile"] = t["valid_ppl"] / c["valid_ppl"]
        print(f"training tokens/s tgc / torch.compile {verdicts['train_tokens_ratio_compile']:.2f}; "
              f"perplexity tgc / torch.compile {verdicts['ppl_ratio_compile']:.3f}")
    for nt, g in gen.items():
        verdicts[f"gen1_ratio_{nt}t"] = g[1]["tgc"] / g[1]["torch"]
        verdicts[f"gen16_ratio_{nt}t"] = g[16]["tgc"] / g[16]["torch"]
        print(f"generation tokens/s tgc / eager at {nt} thread(s): batch 1 "
              f"{verdicts[f'gen1_ratio_{nt}t']:.2f} (target >= 2), batch 16 "
              f"{verdicts[f'gen16_ratio_{nt}t']:.2f}")
    out = dict(started=started, commit=commit, minutes=a.minutes, preset=a.preset, threads=a.threads,
               seed=a.seed, warmup=a.warmup, lr_scale=a.lr_scale, attention=a.attention, corpus=os.path.abspath(a.corpus), lines=lines,
               train_sequences=len(data["train"]), valid_sequences=len(data["valid"]),
               vocab=len(vocab), buckets=data["buckets"], optimizer=OPT, sides=results,
               generation={str(k): v for k, v in gen.items()}, gen_new=a.gen_new,
               gen_prompt=a.gen_prompt, ratios=verdicts, torch_version=torch.__version__, work=work)
    with open(out_json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {out_json}")


if __name__ == "__main__":
    main()
