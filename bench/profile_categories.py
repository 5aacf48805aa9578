# Sums a `tgc run --profile --profile-top 5000` listing (stdin) by category: the head
# split/merge transposes, attention library kernels, other kernels, GEMMs (ms per step;
# GEMM pairs count each thread's time, so the categories can sum past the step).
import re, sys
cats = {"transpose": 0.0, "attention": 0.0, "gemm": 0.0, "other": 0.0}
n = {k: 0 for k in cats}
total = None
tr = re.compile(r"_attn_(q|k|v)(_remat)?$|merge_heads|_attn_(q|k|v)_transpose|transpose")
for line in sys.stdin:
    m = re.match(r"tgc run: profile over \d+ runs?[^:]*: ([\d.]+) ms per run", line)
    if m: total = float(m.group(1)); continue
    m = re.match(r"\s+[\d.]+%\s+([\d.]+) ms\s+(\S+)", line)
    if not m: continue
    ms, name = float(m.group(1)), m.group(2)
    if name.startswith("gemm:"): c = "gemm"
    elif name.startswith("lib:") and "attention" in name: c = "attention"
    elif not name.startswith("lib:") and tr.search(name): c = "transpose"
    else: c = "other"
    cats[c] += ms; n[c] += 1
print(f"step {total:.1f} ms | " + " | ".join(f"{k} {cats[k]:.2f} ms ({n[k]})" for k in cats))
