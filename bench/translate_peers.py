"""Translation speed against CTranslate2 and PyTorch on the same weights and sentences.

A trained translation checkpoint (the small preset after a Tatoeba run) is exported with
`tgc export --format ctranslate2`; its validation split (from `tgc train --resume RUN
--export-data`) is decoded by each engine in a process of its own, 2 threads each:

  tgc           tgc translate --input --tokens --stats [--quantize int8]
  ct2-f32       ctranslate2.Translator(compute_type="float32").translate_batch
  ct2-int8      the same with compute_type="int8"
  torch-eager   nn.Transformer holding the same weights, with this script's KV-cached
                greedy loop (greedy and batch 1 only)

Figures, medians of --rounds rounds that alternate the engines:
  - target tokens/s, greedy and beam 4, 32 sentences a batch (tgc: --batch 32 rows greedy,
    128 with beam 4; CTranslate2: max_batch_size 32 examples, sorted by length as tgc);
  - latency at batch 1: the mean time a sentence, the first --latency-sentences sentences;
  - peak memory: the process's maximum resident set (wait4);
  - agreement: translations identical to tgc f32's, and BLEU on the tokens (sacreBLEU, 13a)
    against the references' tokens, the same measure for every engine.
Decoding time excludes loading and (tgc) compiling; the whole process's time is reported
beside it. CTranslate2 and torch come from pip (never part of tgc's set-up); an engine whose
package is missing is skipped with the reason.

    python3 bench/translate_peers.py --checkpoint runs/tat --out translate_peers.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


# ---- workers: one process per engine and setting ---------------------------------------------

def read_inputs(path):
    with open(path) as f:
        return json.load(f)


def worker_ct2(a):
    import ctranslate2
    inp = read_inputs(a.inputs)
    t0 = time.perf_counter()
    tr = ctranslate2.Translator(a.model_dir, device="cpu", compute_type=a.compute_type,
                                intra_threads=a.threads, inter_threads=1)
    load = time.perf_counter() - t0
    tokens = inp["tokens"]
    opts = dict(beam_size=a.beam, max_decoding_length=inp["max_len"], length_penalty=a.length_penalty)
    if a.batch == 1:
        t0 = time.perf_counter()
        hyps = [tr.translate_batch([s], **opts)[0].hypotheses[0] for s in tokens]
        seconds = time.perf_counter() - t0
    else:
        t0 = time.perf_counter()
        res = tr.translate_batch(tokens, max_batch_size=a.batch, **opts)
        seconds = time.perf_counter() - t0
        hyps = [r.hypotheses[0] for r in res]
    return {"load_seconds": load, "decode_seconds": seconds, "outputs": [" ".join(h) for h in hyps],
            "tokens": sum(len(h) for h in hyps)}


def torch_model(a, inp):
    """nn.Transformer (post-LN, no final norms, as models/transformer.tg) with tgc's weights:
    tgc's Linear weights are [in, out], torch's [out, in]."""
    import torch
    from safetensors.torch import load_file
    from torch import nn
    cfg = inp["config"]
    d, n_enc, n_dec = cfg["d_model"], cfg["n_enc"], cfg["n_dec"]
    raw = load_file(a.checkpoint_file)
    p = {k: raw.get("ema." + k, v) for k, v in raw.items() if not k.startswith(("adam.", "ema.", "train."))}
    m = nn.Transformer(d_model=d, nhead=cfg["heads"], num_encoder_layers=n_enc, num_decoder_layers=n_dec,
                       dim_feedforward=cfg["d_ff"], dropout=0.0, batch_first=True)
    m.encoder.norm = None
    m.decoder.norm = None
    m.eval()

    def lin(dst, name):
        dst.weight.data.copy_(p[name + ".weight"].t())
        dst.bias.data.copy_(p[name + ".bias"])

    def attn(dst, name):
        dst.in_proj_weight.data.copy_(torch.cat([p[f"{name}.w_{x}.weight"].t() for x in "qkv"]))
        dst.in_proj_bias.data.copy_(torch.cat([p[f"{name}.w_{x}.bias"] for x in "qkv"]))
        lin(dst.out_proj, name + ".w_o")

    def norm(dst, name):
        dst.weight.data.copy_(p[name + ".gamma"])
        dst.bias.data.copy_(p[name + ".beta"])

    for i, L in enumerate(m.encoder.layers):
        attn(L.self_attn, f"encoder.layers.{i}.self_attn")
        norm(L.norm1, f"encoder.layers.{i}.norm1")
        lin(L.linear1, f"encoder.layers.{i}.ffn.linear1")
        lin(L.linear2, f"encoder.layers.{i}.ffn.linear2")
        norm(L.norm2, f"encoder.layers.{i}.norm2")
    for i, L in enumerate(m.decoder.layers):
        attn(L.self_attn, f"decoder.layers.{i}.self_attn")
        norm(L.norm1, f"decoder.layers.{i}.norm1")
        attn(L.multihead_attn, f"decoder.layers.{i}.cross_attn")
        norm(L.norm2, f"decoder.layers.{i}.norm2")
        lin(L.linear1, f"decoder.layers.{i}.ffn.linear1")
        lin(L.linear2, f"decoder.layers.{i}.ffn.linear2")
        norm(L.norm3, f"decoder.layers.{i}.norm3")
    src_embed, tgt_embed = p["src_embed.weight"], p["tgt_embed.weight"]
    proj_w, proj_b = p["generator.proj.weight"], p["generator.proj.bias"]  # [d, V], [V]
    pos = torch.zeros(inp["config"]["max_len"], d)
    position = torch.arange(pos.shape[0], dtype=torch.float64)[:, None]
    freq = torch.pow(10000.0, -torch.arange(0, d, 2, dtype=torch.float64) / d)
    pos[:, 0::2] = torch.sin(position * freq).float()
    pos[:, 1::2] = torch.cos(position * freq).float()
    return m, src_embed, tgt_embed, proj_w, proj_b, pos


def worker_torch(a):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    inp = read_inputs(a.inputs)
    t0 = time.perf_counter()
    m, src_embed, tgt_embed, proj_w, proj_b, pos = torch_model(a, inp)
    load = time.perf_counter() - t0
    cfg = inp["config"]
    d, heads, pad, bos, eos = cfg["d_model"], cfg["heads"], 0, 1, 2
    dk = d // heads
    scale = d ** 0.5

    def greedy(batch):  # batch: list of id lists, decoded together
        B, S = len(batch), max(len(s) for s in batch)
        src = torch.full((B, S), pad, dtype=torch.long)
        for r, s in enumerate(batch):
            src[r, :len(s)] = torch.tensor(s)
        keep = (src != pad)
        x = src_embed[src] * keep[..., None] * scale + pos[:S]
        memory = m.encoder(x, src_key_padding_mask=~keep)
        cross = []
        for L in m.decoder.layers:
            w, b = L.multihead_attn.in_proj_weight, L.multihead_attn.in_proj_bias
            k = F.linear(memory, w[d:2 * d], b[d:2 * d]).view(B, S, heads, dk).transpose(1, 2)
            v = F.linear(memory, w[2 * d:], b[2 * d:]).view(B, S, heads, dk).transpose(1, 2)
            cross.append((k, v))
        cross_mask = keep[:, None, None, :]
        limit = min(2 * S + 10, inp["max_len"])
        caches = [[None, None] for _ in m.decoder.layers]
        tok = torch.full((B,), bos, dtype=torch.long)
        out = [[] for _ in range(B)]
        done = torch.zeros(B, dtype=torch.bool)
        for t in range(limit):
            x = (tgt_embed[tok] * scale + pos[t])[:, None, :]
            for L, c, (ck, cv) in zip(m.decoder.layers, caches, cross):
                w, b = L.self_attn.in_proj_weight, L.self_attn.in_proj_bias
                q, k, v = F.linear(x, w, b).view(B, 1, 3, heads, dk).permute(2, 0, 3, 1, 4)
                c[0] = k if c[0] is None else torch.cat([c[0], k], dim=2)
                c[1] = v if c[1] is None else torch.cat([c[1], v], dim=2)
                a_ = F.scaled_dot_product_attention(q, c[0], c[1])
                x = L.norm1(x + L.self_attn.out_proj(a_.transpose(1, 2).reshape(B, 1, d)))
                w2, b2 = L.multihead_attn.in_proj_weight, L.multihead_attn.in_proj_bias
                q = F.linear(x, w2[:d], b2[:d]).view(B, 1, heads, dk).transpose(1, 2)
                a_ = F.scaled_dot_product_attention(q, ck, cv, attn_mask=cross_mask)
                x = L.norm2(x + L.multihead_attn.out_proj(a_.transpose(1, 2).reshape(B, 1, d)))
                x = L.norm3(x + L.linear2(F.relu(L.linear1(x))))
            logits = x[:, 0] @ proj_w + proj_b
            logits[:, :eos] = float("-inf")  # never pad or bos, as tgc
            tok = logits.argmax(-1)
            for r in range(B):
                if not done[r]:
                    if tok[r] == eos:
                        done[r] = True
                    else:
                        out[r].append(int(tok[r]))
            if bool(done.all()):
                break
        return out

    ids = inp["ids"]
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    hyps = [None] * len(ids)
    with torch.inference_mode():
        t0 = time.perf_counter()
        for start in range(0, len(order), a.batch):
            chunk = order[start:start + a.batch]
            for i, h in zip(chunk, greedy([ids[i] for i in chunk])):
                hyps[i] = h
        seconds = time.perf_counter() - t0
    vocab = inp["tgt_tokens"]
    return {"load_seconds": load, "decode_seconds": seconds,
            "outputs": [" ".join(vocab[t] for t in h) for h in hyps], "tokens": sum(len(h) for h in hyps)}


# ---- the driver ------------------------------------------------------------------------------

def run_child(cmd, env=None):
    """Runs cmd, returning (stdout, stderr, wall seconds, peak RSS MiB) of that child alone
    (os.wait4 gives the child's own rusage)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        o, e = out.read(), err.read()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{e[-3000:]}")
    return o, e, wall, usage.ru_maxrss / 1024


def tgc_run(a, setting, files):
    out_file = os.path.join(files["dir"], "tgc_out.txt")
    cmd = [a.tgc, "translate", "--checkpoint", a.checkpoint, "--input", files["texts"],
           "--output", out_file, "--tokens", "--stats", "--threads", str(a.threads),
           "--beam", str(setting["beam"]), "--batch", str(setting["batch"] * setting["beam"]),
           "--length-penalty", str(a.length_penalty)]
    if setting["engine"] == "tgc-int8":
        cmd += ["--quantize", "int8"]
    _, err, wall, peak = run_child(cmd)
    stats = [line for line in err.splitlines() if "target tokens in" in line][0]
    # "tgc translate: N sentences in B batches, T target tokens in X s (R tokens/s; compiling C s more)"
    words = stats.split()
    tokens = int(words[words.index("target") - 1])
    seconds = float(words[words.index("target") + 3])
    compile_s = float(stats.split("compiling ")[1].split()[0])
    with open(out_file) as f:
        outputs = f.read().split("\n")[:-1]
    return {"decode_seconds": seconds, "compile_seconds": compile_s, "tokens": tokens,
            "outputs": outputs, "process_seconds": wall, "peak_mib": peak}


def peer_run(a, setting, files):
    kind = "torch" if setting["engine"] == "torch-eager" else "ct2"
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--inputs", files["inputs"],
           "--threads", str(a.threads), "--beam", str(setting["beam"]), "--batch", str(setting["batch"]),
           "--length-penalty", str(a.length_penalty), "--model-dir", files["ct2"],
           "--checkpoint-file", files["checkpoint_file"],
           "--compute-type", "int8" if setting["engine"] == "ct2-int8" else "float32",
           "--result", files["result"]]
    _, _, wall, peak = run_child(cmd)
    with open(files["result"]) as f:
        r = json.load(f)
    r["process_seconds"] = wall
    r["peak_mib"] = peak
    return r


def token_bleu(outputs, refs):
    import sacrebleu
    return sacrebleu.corpus_bleu(outputs, [refs], tokenize="13a", force=True).score  # tokens on purpose


def have(module):
    """Whether a package is installed, without importing it: the driver stays small, and its
    children's peak memory (which counts what they were forked from) stays theirs."""
    import importlib.util
    if importlib.util.find_spec(module) is None:
        print(f"SKIPPED what needs {module}: not installed (pip install {module})", file=sys.stderr)
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="a translation run directory (the small preset on Tatoeba)")
    ap.add_argument("--tgc", default=os.path.join(REPO, "build", "tools", "tgc"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sentences", type=int, default=0, help="the first N validation sentences (0: all)")
    ap.add_argument("--latency-sentences", type=int, default=100)
    ap.add_argument("--length-penalty", type=float, default=0.6)
    ap.add_argument("--out", help="write the figures as JSON here")
    # worker mode
    ap.add_argument("--worker", choices=["ct2", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--inputs", help=argparse.SUPPRESS)
    ap.add_argument("--beam", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=32, help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--checkpoint-file", help=argparse.SUPPRESS)
    ap.add_argument("--compute-type", default="float32", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        r = (worker_ct2 if a.worker == "ct2" else worker_torch)(a)
        with open(a.result, "w") as f:
            json.dump(r, f)
        return 0
    if not a.checkpoint:
        ap.error("--checkpoint RUN is required")

    tmp = tempfile.TemporaryDirectory(prefix="tgc_peers_")
    d = tmp.name
    files = {"dir": d, "texts": os.path.join(d, "src.txt"), "inputs": os.path.join(d, "inputs.json"),
             "ct2": os.path.join(d, "ct2"), "result": os.path.join(d, "result.json")}
    subprocess.run([a.tgc, "export", "--format", "ctranslate2", "--checkpoint", a.checkpoint, files["ct2"]],
                   check=True, stdout=sys.stderr)
    export = os.path.join(d, "data.json")
    subprocess.run([a.tgc, "train", "--resume", a.checkpoint, "--out", os.path.join(d, "unused"),
                    "--export-data", export], check=True, stdout=subprocess.DEVNULL)
    data = read_inputs(export)
    ckpts = sorted(f for f in os.listdir(os.path.join(a.checkpoint, "checkpoints")) if f.endswith(".safetensors"))
    files["checkpoint_file"] = os.path.join(a.checkpoint, "checkpoints", ckpts[-1])
    src_tokens, tgt_tokens = data["src_vocab"]["tokens"], data["tgt_vocab"]["tokens"]
    n = a.sentences or len(data["valid"]["src"])
    ids = data["valid"]["src"][:n]
    texts = data["valid"]["src_text"][:n]
    refs = [" ".join(tgt_tokens[t] for t in s) for s in data["valid"]["tgt"][:n]]
    cfg = ct2_config(files["ct2"])
    with open(files["texts"], "w") as f:
        f.write("".join(t + "\n" for t in texts))
    lat_n = min(a.latency_sentences, n)
    lat_texts = os.path.join(d, "latency.txt")
    with open(lat_texts, "w") as f:
        f.write("".join(t + "\n" for t in texts[:lat_n]))

    def inputs_for(count):
        with open(files["inputs"], "w") as f:
            json.dump({"tokens": [[src_tokens[t] for t in s] for s in ids[:count]], "ids": ids[:count],
                       "tgt_tokens": tgt_tokens, "max_len": data["length_cap"], "config": cfg}, f)

    engines = ["tgc-f32", "tgc-int8"]
    if have("ctranslate2"):
        engines += ["ct2-f32", "ct2-int8"]
    torch_ok = have("torch") and have("safetensors")
    settings = []
    for beam in (1, 4):
        for e in engines + (["torch-eager"] if torch_ok and beam == 1 else []):
            settings.append({"engine": e, "beam": beam, "batch": 32})
    for e in engines + (["torch-eager"] if torch_ok else []):
        settings.append({"engine": e, "beam": 1, "batch": 1})

    results = {}
    for rnd in range(a.rounds):
        for s in settings:
            key = f"{s['engine']} beam {s['beam']} batch {s['batch']}"
            lat = s["batch"] == 1
            inputs_for(lat_n if lat else n)
            f = dict(files, texts=lat_texts if lat else files["texts"])
            r = tgc_run(a, s, f) if s["engine"].startswith("tgc") else peer_run(a, s, f)
            results.setdefault(key, []).append(r)
            print(f"round {rnd + 1} {key}: {r['tokens']} tokens in {r['decode_seconds']:.3f} s "
                  f"({r['tokens'] / r['decode_seconds']:.0f} tokens/s), process {r['process_seconds']:.2f} s, "
                  f"peak {r['peak_mib']:.0f} MiB", file=sys.stderr, flush=True)

    summary = {}
    for key, rs in results.items():
        engine, beam, batch = key.split()[0], int(key.split()[2]), int(key.split()[4])
        base = results.get(f"tgc-f32 beam {beam} batch {batch}", rs)[0]["outputs"]
        outs = rs[0]["outputs"]
        count = len(outs)
        summary[key] = {
            "engine": engine, "beam": beam, "batch": batch, "sentences": count,
            "tokens": rs[0]["tokens"],
            "tokens_per_s": statistics.median(r["tokens"] / r["decode_seconds"] for r in rs),
            "ms_per_sentence": statistics.median(1000 * r["decode_seconds"] / count for r in rs),
            "process_seconds": statistics.median(r["process_seconds"] for r in rs),
            "peak_mib": statistics.median(r["peak_mib"] for r in rs),
            "identical_to_tgc_f32": sum(x == y for x, y in zip(outs, base)),
            "token_bleu": token_bleu(outs, refs[:count]) if have("sacrebleu") else None,
            "rounds": [r["tokens"] / r["decode_seconds"] for r in rs],
        }
    print(f"\n{'setting':34} {'tokens/s':>9} {'ms/sent':>8} {'process s':>9} {'peak MiB':>8} "
          f"{'same':>6} {'BLEU':>6}")
    for key, s in summary.items():
        bleu = f"{s['token_bleu']:.2f}" if s["token_bleu"] is not None else "-"
        print(f"{key:34} {s['tokens_per_s']:9.0f} {s['ms_per_sentence']:8.2f} {s['process_seconds']:9.2f} "
              f"{s['peak_mib']:8.0f} {s['identical_to_tgc_f32']:>6} {bleu:>6}")
    for beam, batch in ((1, 32), (4, 32), (1, 1)):
        def tps(e):
            s = summary.get(f"{e} beam {beam} batch {batch}")
            return s["tokens_per_s"] if s else None
        if tps("ct2-f32"):
            best = max(tps("ct2-f32"), tps("ct2-int8"))
            print(f"beam {beam} batch {batch}: tgc f32 / ct2 f32 {tps('tgc-f32') / tps('ct2-f32'):.2f}x, "
                  f"tgc int8 / best ct2 {tps('tgc-int8') / best:.2f}x")
    if a.out:
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        with open(a.out, "w") as f:
            json.dump({"commit": commit, "threads": a.threads, "rounds": a.rounds, "checkpoint": a.checkpoint,
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "load": os.getloadavg(), "summary": summary}, f, indent=1)
    return 0


def ct2_config(model_dir):
    """The sizes the torch twin needs, read off the exported model.bin (CTranslate2's format:
    version, name, revision, then each variable's name, rank, dims, type, size and bytes)."""
    import struct
    with open(os.path.join(model_dir, "model.bin"), "rb") as f:
        buf = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("H")
        s = buf[pos:pos + n - 1].decode()
        pos += n
        return s

    take("I"), string(), take("I")
    shapes, heads = {}, None
    for _ in range(take("I")):
        name = string()
        dims = [take("I") for _ in range(take("B"))]
        take("B")
        size = take("I")
        if name == "encoder/num_heads":
            heads = struct.unpack_from("<h", buf, pos)[0]
        shapes[name] = dims
        pos += size
    layers = lambda stack: len({k.split("/")[1] for k in shapes if k.startswith(stack + "/layer_")})
    return {"d_model": shapes["encoder/embeddings_0/weight"][1], "heads": heads,
            "d_ff": shapes["encoder/layer_0/ffn/linear_0/weight"][0], "n_enc": layers("encoder"),
            "n_dec": layers("decoder"), "max_len": shapes["encoder/position_encodings/encodings"][0]}


if __name__ == "__main__":
    sys.exit(main())
