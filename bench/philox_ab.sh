#!/bin/bash
# A/B of two tgc binaries on the training step (Philox stream / dropout kernels, session 8):
# per round and binary, alternating A then B,
#   - the profile's dropout lines, summed (ms per step, each launch's own thread time):
#     grad_*dropout* (the backward's re-drawn masks), *_layers_N_add* (dropout + residual),
#     *embed_dropout* (embeddings), their sum, and lib:*attention* (fused attention: it draws
#     only with attn_dropout > 0, which the presets leave at 0);
#   - the step: median wall time of --repeat 5 (2 threads), and CPU time per step of the
#     whole process on one thread, ((--repeat 1 + N) - (--repeat 1)) / N, N = $CPU_RUNS (20),
#     which other load on the machine moves less.
# TGC_NUM_THREADS=2 but for the CPU time. Usage:
#   bench/philox_ab.sh A_tgc B_tgc [rounds (3)] [small|base (small)]
set -euo pipefail
A=$1
B=$2
ROUNDS=${3:-3}
PRESET=${4:-small}
CPU_RUNS=${CPU_RUNS:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
case $PRESET in
  small) dims=(--dim B=32 --dim S=32 --dim T=32) ;;
  base) dims=(--dim B=16 --dim S=64 --dim T=64) ;;
  *) echo "preset small or base" >&2; exit 2 ;;
esac
for x in A B; do
  "${!x}" compile models/transformer.tg --preset "$PRESET" --train --target cpu "${dims[@]}" \
    -o "$work/$x.tir"
done
run() {  # binary-var, extra args...
  local x=$1
  shift
  TGC_NUM_THREADS=${THREADS:-2} TGC_CACHE_DIR="$work/cache_$x" "${!x}" run "$work/$x.tir" --backend cpu \
    --random-inputs 1 --int-range 1,8000 "$@"
}
cpu() {  # binary-var, repeat -> CPU seconds of the whole process
  THREADS=1 /usr/bin/time -f "%U %S" -o "$work/t" bash -c "$(declare -f run); $(declare -p A B work); \
    run $1 --repeat $2 >/dev/null 2>&1"
  awk '{print $1 + $2}' "$work/t"
}
run A --repeat 1 >/dev/null 2>&1  # fill the kernel caches
run B --repeat 1 >/dev/null 2>&1
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-6s %-4s %9s %9s %9s %9s | %9s | %9s %9s\n" round bin grad_drop adds embed sum attn \
  step_wall step_cpu1
for ((i = 1; i <= ROUNDS; ++i)); do
  for x in A B; do
    run "$x" --repeat 5 --profile --profile-top 100000 2>"$work/prof" >/dev/null
    read -r gd ad em at < <(awk '
      $4 ~ /^grad_.*dropout/ {gd += $2}
      $4 ~ /^(encoder|decoder)_layers_[0-9]+_add/ {ad += $2}
      $4 ~ /embed_dropout/ {em += $2}
      $4 ~ /^lib:.*attention/ {at += $2}
      END {printf "%.3f %.3f %.3f %.3f\n", gd, ad, em, at}' "$work/prof")
    wall=$(run "$x" --repeat 5 2>&1 >/dev/null | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p')
    one=$(cpu "$x" 1)
    many=$(cpu "$x" $((CPU_RUNS + 1)))
    printf "%-6s %-4s %9s %9s %9s %9.3f | %9s | %9s %9.1f\n" "$i" "$x" "$gd" "$ad" "$em" \
      "$(echo "$gd + $ad + $em" | bc -l)" "$at" "$wall" "$(echo "($many - $one) * 1000 / $CPU_RUNS" | bc -l)"
  done
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
