#!/bin/bash
# A/B of the bias-gradient fold (TGC_NO_BIAS_GRAD_FOLD=1 off, 0 on), same binary, one thread:
# CPU time of one dW = x^T dY plus db = reduce_sum(dY) over the 1024 token rows, per run
# ((--repeat 201) - (--repeat 1)) / 200, alternating off/on for ROUNDS rounds.
# Usage: bench/bias_grad_fold_ab.sh [tgc (default build/tools/tgc)] [rounds (default 3)]
set -euo pipefail
TGC=${1:-build/tools/tgc}
ROUNDS=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
graph() {  # name, columns of dY, columns of x (both 1024 rows)
  cat > "$work/$1.tir" <<TIR
graph @dwdb {
  %x = input() : f32[1024,$3]
  %dy = input() : f32[1024,$2]
  %dw = matmul(%x, %dy) {transpose_a=true} : f32[$3,$2]
  %db = reduce_sum(%dy) {axes=[0]} : f32[$2]
  return %dw, %db
}
TIR
}
graph ffn_up 1024 256     # dY 1024x1024, x 1024x256 (the FFN's first layer)
graph ffn_down 256 1024   # dY 1024x256, x 1024x1024 (its second layer)
cpu() {  # off tir repeat -> CPU seconds of the whole process
  /usr/bin/time -f "%U %S" -o "$work/t" env TGC_NUM_THREADS=1 TGC_NO_BIAS_GRAD_FOLD="$1" \
    TGC_CACHE_DIR="$work/cache" "$TGC" run "$2" --backend cpu --random-inputs 1 --repeat "$3" >/dev/null 2>&1
  awk '{print $1 + $2}' "$work/t"
}
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
for g in ffn_up ffn_down; do
  for ((i = 1; i <= ROUNDS; ++i)); do
    for off in 1 0; do
      one=$(cpu "$off" "$work/$g.tir" 1)
      many=$(cpu "$off" "$work/$g.tir" 201)
      printf "%-8s round %d fold %-3s %6.2f ms per run\n" "$g" "$i" "$([ "$off" = 1 ] && echo off || echo on)" \
        "$(echo "($many - $one) * 1000 / 200" | bc -l)"
    done
  done
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
