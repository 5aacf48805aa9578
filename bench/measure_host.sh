#!/usr/bin/env bash
# The figures bench/README.md quotes, in one quiet run (about 15 minutes on 2 cores for fp32,
# 12 more for bf16; run nothing else meanwhile). fp32: GEMM against OpenBLAS and the FMA
# peak, the training step of tiny / small / base against PyTorch eager, one round each with
# torch.compile, attention against its unfused graph and SDPA, and README's main command.
# bf16 (on a CPU with AVX512-BF16): the bf16 GEMM against the widening path and f32, and the
# small / base steps in mixed precision against PyTorch eager under autocast, one round each
# with torch.compile. Each part's output goes to its own file in OUT, and OUT/log gets a
# line with the time and load after each part.
#   bench/measure_host.sh [build] [OUT] [fp32|bf16|all]
# e.g. bench/measure_host.sh build /tmp/measure
# Without torch the step and attention benchmarks print tgc's figures alone and say so.
set -u
build=${1:-build}
out=${2:-/tmp/tgc-measure}
parts=${3:-all}
cd "$(dirname "$0")/.."
mkdir -p "$out"
mark() { echo "$1 $(date -u '+%F %T') load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/log"; }
step() {  # preset, BxL, steps, rounds, [extra args]
  python3 bench/train_step_bench.py --tgc "$build/tools/tgc" --presets "$1" --shapes "$2" \
    --steps "$3" --rounds "$4" "${@:5}"
}
mark "start $(git rev-parse --short HEAD 2>/dev/null || echo '?') ($parts)"
if [ "$parts" != bf16 ]; then
"$build/bench/gemm_bench" --runs 9 --min-ms 40 > "$out/gemm.txt" 2>&1; mark gemm
step tiny 32x16 20 7 --no-compile > "$out/tiny.txt" 2>&1; mark tiny
step small 32x32 10 9 --no-compile > "$out/small.txt" 2>&1; mark small
step base 16x64 4 7 --no-compile > "$out/base.txt" 2>&1; mark base
step small 32x32 8 1 > "$out/compile_small.txt" 2>&1; mark "torch.compile small"
step base 16x64 4 1 > "$out/compile_base.txt" 2>&1; mark "torch.compile base"
python3 bench/attention_bench.py --tgc "$build/tools/tgc" --repeat 9 > "$out/attention.txt" 2>&1
mark attention
train=$(mktemp -d)
timer=()  # GNU time adds the wall time and max RSS, where Debian's `time` package is installed
[ -x /usr/bin/time ] && timer=(/usr/bin/time -v)
"${timer[@]}" "$build/tools/tgc" train models/transformer.tg --preset tiny --out "$train/run" \
  > "$out/train.txt" 2>&1
rm -rf "$train"
mark "README main command"
fi
if [ "$parts" != fp32 ]; then
"$build/bench/gemm_bf16_bench" --runs 7 --min-ms 40 > "$out/gemm_bf16.txt" 2>&1; mark "gemm bf16"
step small 32x32 10 7 --no-compile --precision bf16 > "$out/small_bf16.txt" 2>&1; mark "small bf16"
step base 16x64 4 5 --no-compile --precision bf16 > "$out/base_bf16.txt" 2>&1; mark "base bf16"
step small 32x32 8 1 --precision bf16 > "$out/compile_small_bf16.txt" 2>&1
mark "torch.compile small bf16"
step base 16x64 4 1 --precision bf16 > "$out/compile_base_bf16.txt" 2>&1
mark "torch.compile base bf16"
fi
