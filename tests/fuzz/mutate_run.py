#!/usr/bin/env python3
"""Mutation runs against tgc's handling of bad input and against its cpu backend. Not part of
the tests: they take minutes, and `ir` needs numpy and safetensors (pip install numpy
safetensors).

  python3 tests/fuzz/mutate_run.py --tgc build/tools/tgc model --count 300 --seed 1
  python3 tests/fuzz/mutate_run.py --tgc build/tools/tgc ir --count 300 --seed 1
  python3 tests/fuzz/mutate_run.py --tgc build/tools/tgc ir --count 300 --precision bf16
  python3 tests/fuzz/mutate_run.py --tgc build/tools/tgc config --count 100 --seed 1
  python3 tests/fuzz/mutate_run.py --tgc build/tools/tgc checkpoint --count 40 --seed 1

model       models/transformer.tg with 1-3 random edits (a deletion, an inserted token, a
            copied span) through `tgc compile --preset tiny --train`. Each must exit 0, or 1
            with a located error (file:line:col: error: ..., in the model or in the layer
            library it instantiates). With --run-models, each mutant that compiles (another
            model) also has its step run on both backends and compared, as for `ir`.
ir          the tiny training step's graph IR (`tgc compile --train`, B=2, S=T=4, fp32 or
            with --precision bf16 its mixed-precision form) with a
            number or an op name changed, run on the interpreter and on the cpu backend with
            the same random inputs. Both must exit 0 or 1, and the same. When both run, every
            output must agree: same shape, NaN where the other has NaN, and elsewhere within
            2% (relative, or 1e-3 absolute). An output that differs fails only when the
            backends also disagree in float64 (--f64) and the interpreter's own f32 and f64
            results agree on it; others hang on rounding (Adam dividing by a gradient that is
            zero in exact arithmetic) and are listed, not failed.
config      random configurations of models/transformer.tg, or with --model gpt of
            models/gpt.tg (--set: sizes from 1, heads, activation, dropouts, biases, tied
            output, label smoothing; --dim: batch, and lengths from 1 to 70; fp32 or bf16), each training step compiled, run on both backends
            with ids from 0 (the padding id: padded and wholly padded rows) and compared as
            for `ir`. The command of a kept case is in its .cmd file.
checkpoint  the checkpoint of a 30-step run, truncated, with header bytes changed, with NaNs
            written into its data, or with bytes inserted, through `tgc train --resume`. Each
            must exit 0 or 1, never crash or hang; a truncated one or one with NaNs must be
            refused (1). The first case is the file unchanged, which must resume.

Failing cases stay in --work (default: a new temporary folder, printed) and are listed; the
exit status is 1 when there is one, and 77 (skipped, for ctest) when `ir` or `config` lacks
numpy or safetensors. ctest runs a few mutants of each kind (fuzz_mutate_*) so that the
harness keeps working.
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(REPO, "models", "transformer.tg")
MODELS = {"transformer": MODEL, "gpt": os.path.join(REPO, "models", "gpt.tg")}
TIMEOUT = 120


def run(cmd):
    """(exit status, stderr) of cmd; status None when it ran past TIMEOUT."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, "timed out"
    return r.returncode, r.stderr


def fuzz_model(args, rng, work):
    src = open(MODEL).read()
    tokens = ["(", ")", "{", "}", "[", "]", ",", "=", ":", ".", "0", "-1", "1e999", "x", "@",
              '"', "#", "\n", "->", "+", "*", "/", "let", "def", "return", "preset", "model",
              "999999999999999999999"]
    failures, ran = [], 0
    for i in range(args.count):
        s = src
        for _ in range(rng.randint(1, 3)):
            p, op = rng.randrange(len(s)), rng.random()
            if op < 0.3:
                s = s[:p] + s[p + rng.randint(1, 5):]
            elif op < 0.7:
                s = s[:p] + rng.choice(tokens) + s[p:]
            else:
                q = rng.randrange(len(s))
                s = s[:p] + s[q:q + rng.randint(1, 20)] + s[p:]
        path = os.path.join(work, f"model{i}.tg")
        with open(path, "w") as f:
            f.write(s)
        rc, err = run([args.tgc, "compile", path, "--preset", "tiny", "--train", "-o", os.devnull])
        # (The error may be located in the layer library, with notes leading back to the
        # model: an assertion that fails for an argument the edit changed.)
        why = None if rc == 0 or (rc == 1 and re.match(r"[^\s:]+:\d+:\d+: error: ", err)) else \
            f"exit {rc}: {err.strip()[-300:]}"
        if rc == 0 and args.run_models and not why:
            # A model the edit left valid is another model: its step at small shapes on
            # both backends, compared as for `ir`.
            step = path + ".tir"
            rc, err = run([args.tgc, "compile", path, "--preset", "tiny", "--train", "--dim",
                           "B=2", "--dim", "S=5", "--dim", "T=4", "-o", step])
            if rc not in (0, 1):
                why = f"{step}: compile exit {rc}: {err.strip()[-300:]}"
            elif rc == 0:
                why, note, compared = check_both(args, step)
                ran += compared
                if note:
                    print(f"{step}: {note}")
                if why:
                    why = f"{step}: {why}"
                else:
                    remove_case(step)
        if why:
            failures.append(f"{path}: {why}")
        else:
            os.remove(path)
    if args.run_models:
        print(f"model: {ran} valid mutants ran on both backends and were compared")
    return failures


def differing(a_path, b_path):
    """{tensor name: why} for the tensors of two safetensors files that disagree: shape, NaN
    where the other has none, infinities, or values apart by more than 2% (relative, or 1e-3
    absolute)."""
    import numpy as np
    from safetensors.numpy import load_file
    a, b = load_file(a_path), load_file(b_path)
    out = {name: "missing on one side" for name in set(a) ^ set(b)}
    for name in set(a) & set(b):
        x, y = a[name].astype(np.float64), b[name].astype(np.float64)
        if x.shape != y.shape:
            out[name] = f"shape {x.shape} against {y.shape}"
        elif (np.isnan(x) != np.isnan(y)).any():
            out[name] = f"{np.isnan(x).sum()} NaNs against {np.isnan(y).sum()}"
        else:
            both = np.isfinite(x) & np.isfinite(y)
            if ((x != y) & ~both & ~np.isnan(x)).any():
                out[name] = "infinities differ"
            elif both.any():
                d = np.abs(x - y)[both]
                rel = d / np.maximum(1e-3, np.abs(x)[both])
                far = (rel > 2e-2) & (d > 1e-3)  # both, for one element
                if far.any():
                    j = int(np.argmax(np.where(far, rel, 0)))
                    out[name] = f"{x[both].ravel()[j]} against {y[both].ravel()[j]}"
    return out


IR_INPUTS = ["--random-inputs", "1", "--int-range", "1,8"]


def run_both(args, path, suffix, extra, inputs=IR_INPUTS):
    """Runs path on the interpreter and the cpu backend; their exit statuses by backend."""
    status = {}
    for backend in ("interp", "cpu"):
        status[backend], err = run([args.tgc, "run", path, "--backend", backend, *extra, *inputs,
                                    "-o", f"{path}.{backend}{suffix}.safetensors"])
        if status[backend] not in (0, 1):
            status[backend] = f"{status[backend]}: {err.strip()[-300:]}"
    return status


def compare(args, path, inputs=IR_INPUTS):
    """(failure or None, note or None) for a mutant both backends ran in f32. A tensor that
    differs fails only when the backends also disagree in float64 (--f64) and the
    interpreter's own f32 and f64 results agree on it: an output that hangs on rounding
    (Adam dividing by a gradient that is zero in exact arithmetic, a quotient of such
    updates) differs between any two correct evaluation orders."""
    f32 = differing(f"{path}.interp.safetensors", f"{path}.cpu.safetensors")
    if not f32:
        return None, None
    status = run_both(args, path, ".f64", ["--f64"], inputs)
    if status != {"interp": 0, "cpu": 0}:
        return f"--f64: exit {status}", None
    f64 = differing(f"{path}.interp.f64.safetensors", f"{path}.cpu.f64.safetensors")
    unstable = differing(f"{path}.interp.safetensors", f"{path}.interp.f64.safetensors")
    real = {k: v for k, v in f64.items() if k not in unstable}
    if real:
        name = sorted(real)[0]
        return f"{name}: {real[name]} (f64; f32: {f32.get(name, 'agrees')})", None
    name = sorted(f32)[0]
    return None, f"{name}: {f32[name]} in f32, rounding-sensitive"


def check_both(args, path, inputs=IR_INPUTS):
    """Runs path on both backends: (failure or None, note or None, whether both ran and were
    compared). Both must exit 0 or 1, and the same; when both ran, compare() judges."""
    status = run_both(args, path, "", [], inputs)
    if any(v not in (0, 1) for v in status.values()):
        return f"exit {status}", None, False
    if status["interp"] != status["cpu"]:
        return f"exit {status['interp']} on interp, {status['cpu']} on cpu", None, False
    if status["interp"] != 0:
        return None, None, False
    why, note = compare(args, path, inputs)
    return why, note, True


def beyond_bf16_rounding(interp, cpu, fp32):
    """The tensors where the cpu backend's bf16 step is further from the interpreter's than
    the bf16 roundings themselves move the interpreter's result (its bf16 step against the
    same configuration in fp32, `fp32`) -- 3x that distance, plus 2% and 1e-3 -- in more
    than a tenth of the elements. The fp32 graph has the same outputs."""
    import numpy as np
    from safetensors.numpy import load_file
    a, b, r = load_file(interp), load_file(cpu), load_file(fp32)
    out = {}
    for name in a:
        x, y = a[name].astype(np.float64), b[name].astype(np.float64)
        z = r[name].astype(np.float64) if name in r else x
        if z.shape != x.shape:
            z = x
        with np.errstate(invalid="ignore", over="ignore"):
            scale = np.abs(x - z)
            ok = ~np.isfinite(x) | ~np.isfinite(y) | ~np.isfinite(scale)
            bad = ~ok & (np.abs(x - y) > 3 * scale + 2e-2 * np.abs(x) + 1e-3)
        # A rounding flip in a large intermediate (a bf16 matmul output of magnitude 2-4, one
        # ulp 2^-6, before a bias brings it near 0) moves single elements past that bound;
        # a wrong kernel moves many.
        if bad.sum() >= 2 and bad.mean() > 0.1:
            j = int(np.argmax(bad.ravel()))
            out[name] = (f"{x.ravel()[j]} against {y.ravel()[j]} (fp32 step: {z.ravel()[j]}; "
                         f"{bad.sum()} of {bad.size} elements)")
    return out


def remove_case(path):
    """Deletes a passing case: its graph and whatever the runs wrote next to it."""
    for suffix in ("", ".cmd", ".fp32.tir", ".fp32.tir.safetensors",
                   *(f".{b}{x}.safetensors" for b in ("interp", "cpu") for x in ("", ".f64"))):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


def fuzz_ir(args, rng, work):
    base = os.path.join(work, "tiny.tir")
    rc, err = run([args.tgc, "compile", MODEL, "--preset", "tiny", "--train", "--dim", "B=2",
                   "--dim", "S=4", "--dim", "T=4", "--precision", args.precision, "-o", base])
    if rc != 0:
        sys.exit(f"fuzz: compiling the tiny step failed: {err}")
    src = open(base).read()
    numbers = [m.span() for m in re.finditer(r"(?<![\w.])\d+(?![\w.])", src)]
    ops = ["add", "mul", "sub", "maximum", "minimum", "div", "true", "false"]
    names = [m.span() for m in re.finditer(r"\b(" + "|".join(ops) + r")\b", src)]
    failures, compared, sensitive = [], 0, 0
    for i in range(args.count):
        s = src
        if rng.random() < 0.5:
            a, b = rng.choice(numbers)
            s = s[:a] + str(rng.choice([0, 1, 2, 3, 4, 5, 7, 8, 16, 64])) + s[b:]
        else:
            a, b = rng.choice(names)
            s = s[:a] + rng.choice(ops) + s[b:]
        path = os.path.join(work, f"ir{i}.tir")
        with open(path, "w") as f:
            f.write(s)
        why, note, ran = check_both(args, path)
        compared += ran
        if note:
            print(f"{path}: {note}")
            sensitive += 1
        if why:
            failures.append(f"{path}: {why}")
        elif not note:  # (rounding-sensitive cases stay, for a look)
            remove_case(path)
    print(f"ir: {compared} of {args.count} mutants ran on both backends and were compared "
          f"({sensitive} of them rounding-sensitive)")
    return failures


def transformer_config(rng, d_model, vocab, length):
    """--set and --dim values of models/transformer.tg, and the smaller vocabulary."""
    sets = {
        "src_vocab": vocab, "tgt_vocab": rng.choice([vocab, 7, 29]), "d_model": d_model,
        "heads": rng.choice([h for h in (1, 2, 3, 4) if d_model % h == 0]),
        "d_ff": rng.choice([1, 3, 8, 20, 64]), "n_enc": rng.choice([1, 2, 3]),
        "n_dec": rng.choice([1, 2]), "activation": rng.choice(["relu", "gelu"]),
        "p_drop": rng.choice([0, 0.1, 0.5]), "attn_dropout": rng.choice([0, 0, 0.2]),
        "ffn_dropout": rng.choice([0, 0, 0.3]), "use_bias": rng.choice(["true", "false"]),
        "label_smoothing": rng.choice([0, 0.1, 0.9]),
    }
    if sets["tgt_vocab"] == sets["src_vocab"]:
        sets["tie_output"] = rng.choice(["true", "false"])
    dims = {"B": rng.choice([1, 2, 3]), "S": length(), "T": length()}
    return sets, dims, min(sets["src_vocab"], sets["tgt_vocab"])


def fuzz_config(args, rng, work):
    """Random configurations of a model (--set) and shapes (--dim), each training step
    compiled and run on both backends and compared, as `ir` does."""
    failures, compared, sensitive = [], 0, 0
    for i in range(args.count):
        d_model = rng.choice([4, 6, 8, 12, 16, 24, 32])
        vocab = rng.choice([3, 5, 11, 40])
        # Lengths past 64 take the attention kernels' multi-block path (online softmax).
        length = lambda: rng.choice([1, 2, 3, 5, 7, 9, 9, 65, 70])  # noqa: E731
        if args.model == "gpt":  # decoder-only: a causal and a padding mask together
            sets = {"vocab": vocab, "d_model": d_model,
                    "heads": rng.choice([h for h in (1, 2, 3, 4) if d_model % h == 0]),
                    "d_ff": rng.choice([1, 3, 8, 20, 64]), "n_layers": rng.choice([1, 2, 3]),
                    "activation": rng.choice(["relu", "gelu"]),
                    "p_drop": rng.choice([0, 0.1, 0.5]), "tie_output": rng.choice(["true", "false"])}
            dims = {"B": rng.choice([1, 2, 3]), "T": length()}
            vocab_min = vocab
        else:
            sets, dims, vocab_min = transformer_config(rng, d_model, vocab, length)
        precision = rng.choice(["fp32", "bf16"])
        path = os.path.join(work, f"config{i}.tir")
        cmd = [args.tgc, "compile", MODELS[args.model], "--train", "--precision", precision,
               "-o", path]
        for k, v in sets.items():
            cmd += ["--set", f"{k}={v}"]
        for k, v in dims.items():
            cmd += ["--dim", f"{k}={v}"]
        rc, err = run(cmd)
        if rc != 0:  # every configuration drawn here is valid
            failures.append(f"{' '.join(cmd[1:])}: compile exit {rc}: {err.strip()[-300:]}")
            continue
        with open(path + ".cmd", "w") as f:
            f.write(" ".join(cmd) + "\n")
        # Ids from 0: the padding id, so rows with padded keys and wholly padded rows occur.
        inputs = ["--random-inputs", str(i), "--int-range", f"0,{vocab_min}"]
        why, note, ran = check_both(args, path, inputs)
        if not ran and not why:
            why = "both backends refused a valid configuration"
        if ran:
            compared += 1
            if note and precision == "bf16":
                # The f64 check takes bf16 out; judge against the bf16 roundings' own effect.
                ref = path + ".fp32.tir"
                fp32_cmd = [c if c != "bf16" else "fp32" for c in cmd]
                fp32_cmd[fp32_cmd.index("-o") + 1] = ref
                run(fp32_cmd)
                run([args.tgc, "run", ref, "--backend", "interp", *inputs, "-o",
                     ref + ".safetensors"])
                far = beyond_bf16_rounding(f"{path}.interp.safetensors",
                                           f"{path}.cpu.safetensors", ref + ".safetensors")
                if far:
                    name = sorted(far)[0]
                    why, note = f"bf16: {name}: {far[name]}", None
            if note:
                print(f"{path}: {note}")
                sensitive += 1
        if why:
            failures.append(f"{path} ({path}.cmd): {why}")
        elif not note:
            remove_case(path)
    print(f"config: {compared} of {args.count} configurations compared "
          f"({sensitive} of them rounding-sensitive)")
    return failures


def fuzz_checkpoint(args, rng, work):
    shutil.rmtree(os.path.join(work, "run"), ignore_errors=True)  # a run left by an earlier call
    rc, err = run([args.tgc, "train", MODEL, "--preset", "tiny", "--steps", "30", "--valid-every",
                   "0", "--out", os.path.join(work, "run")])
    if rc != 0:
        sys.exit(f"fuzz: the 30-step run failed: {err}")
    ckpt_dir = os.path.join(work, "run", "checkpoints")
    orig = open(os.path.join(ckpt_dir, sorted(os.listdir(ckpt_dir))[-1]), "rb").read()
    header_end = 8 + int.from_bytes(orig[:8], "little")
    header = json.loads(orig[8:header_end])
    # The f32 tensors' byte ranges (parameters and optimizer state), where a NaN is damage.
    floats = [(header_end + v["data_offsets"][0], header_end + v["data_offsets"][1])
              for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32"]
    failures, outcomes = [], {}
    for i in range(args.count):
        b, op = bytearray(orig), rng.random()
        if i == 0:
            op = -1.0  # the file as written: it must resume (a check of the command itself)
        elif op < 0.25:
            b = b[:rng.randrange(len(b))]
        elif op < 0.6:
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(min(len(b), header_end))] = rng.randrange(256)
        elif op < 0.8:
            for _ in range(rng.randint(1, 50)):
                lo, hi = rng.choice(floats)
                p = lo + 4 * rng.randrange((hi - lo) // 4)
                b[p:p + 4] = bytes([0, 0, 0xC0, 0x7F])  # a quiet NaN
        else:
            p = rng.randrange(len(b))
            b = b[:p] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))) + b[p:]
        path = os.path.join(work, f"ckpt{i}.safetensors")
        with open(path, "wb") as f:
            f.write(b)
        rc, err = run([args.tgc, "train", "--resume", path, "--steps", "32", "--valid-every", "0",
                       "--out", os.path.join(work, f"r{i}")])
        # A truncated file or one with NaNs in its tensors must be refused, not trained on.
        must_refuse = 0.6 <= op < 0.8 or (0 <= op < 0.25 and len(b) < len(orig))
        outcomes[rc] = outcomes.get(rc, 0) + 1
        if op < 0 and rc != 0:
            sys.exit(f"fuzz: the unchanged checkpoint did not resume: {err.strip()[-300:]}")
        if rc == 1 or (rc == 0 and not must_refuse):
            os.remove(path)
        else:
            failures.append(f"{path}: exit {rc}{' (must be refused)' if rc == 0 else ''}: "
                            f"{err.strip()[-300:]}")
        shutil.rmtree(os.path.join(work, f"r{i}"), ignore_errors=True)
    print(f"checkpoint: {outcomes.get(1, 0)} refused, {outcomes.get(0, 0)} resumed")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=["model", "ir", "config", "checkpoint"])
    ap.add_argument("--tgc", default=os.path.join(REPO, "build", "tools", "tgc"))
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", help="folder for the cases (default: a new temporary one)")
    ap.add_argument("--run-models", action="store_true",
                    help="model: also run each mutant that compiles on both backends and compare")
    ap.add_argument("--model", choices=sorted(MODELS), default="transformer",
                    help="config: the model whose configurations are drawn")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="ir: the step's matmul precision (tgc compile --precision)")
    args = ap.parse_args()
    args.tgc = os.path.abspath(args.tgc)
    if args.kind in ("ir", "config") or args.run_models:
        try:
            import numpy  # noqa: F401
            import safetensors  # noqa: F401
        except ImportError as e:
            print(f"mutate_run.py {args.kind}: skipped, it compares outputs with numpy and "
                  f"safetensors ({e}; pip install numpy safetensors)")
            return 77  # ctest: skipped
    work = args.work or tempfile.mkdtemp(prefix=f"tgc_fuzz_{args.kind}_")
    os.makedirs(work, exist_ok=True)
    rng = random.Random(args.seed)
    kinds = {"model": fuzz_model, "ir": fuzz_ir, "config": fuzz_config,
             "checkpoint": fuzz_checkpoint}
    failures = kinds[args.kind](args, rng, work)
    for f in failures:
        print("FAIL", f)
    print(f"{args.kind}: {args.count} mutants, {len(failures)} failing (cases in {work})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
