#!/usr/bin/env bash
# The fused attention launches inside the training step, A/B alternating: two builds, or one
# build under two sets of environment switches. Prints the per-step milliseconds of all
# fused_attention launches (fwd) and of all fused_attention_grad launches (bwd), from
# `tgc run --profile` (wall time of each launch), one line per round, then the medians.
#   bench/attention_step_ab.sh [A-build] [B-build] [small|base] [rounds] [threads] [A-env] [B-env]
# e.g. bench/attention_step_ab.sh build-final9 build-attn small 5 1
#      bench/attention_step_ab.sh build-attn build-attn small 5 1 "TGC_NO_ATTENTION_ONE_BLOCK=1" ""
# An env string is a space-separated list of VAR=value; "" runs the binary as built. Both
# builds run the graph compiled by the A build.
# At 1 thread the figures are the kernels' own time; at 2 they also carry the pool's
# wake-up (bench/README "Session 10: attn"). REPEAT (default 15) steps a run. Since session
# 14 the profile leaves out the first run, whose page faults on a fresh arena landed in the
# launches that first touch it (at 5 repeats they showed: base forward +20%); the 15 stay
# for steadier medians.
set -euo pipefail
# shellcheck source=bench/attention_step_common.sh
source "$(dirname "$0")/attention_step_common.sh"
one() {  # build, env string -> "fwd_ms bwd_ms"
  # shellcheck disable=SC2086
  env $2 TGC_NUM_THREADS="$threads" "$1/tools/tgc" run "$tir" --backend cpu \
    --random-inputs 1 --int-range 1,8000 --repeat "${REPEAT:-15}" --profile --profile-top 100000 2>&1 >/dev/null |
    awk '/lib:.*attention/ { if ($4 ~ /^lib:grad\./) b += $2; else f += $2 }
         END { printf "%.3f %.3f\n", f, b }'
}
ab_rounds "fwd/bwd ms"
for side in A B; do
  declare -n res="res$side"
  f=$(printf '%s\n' "${res[@]}" | awk '{print $1}' | median)
  b=$(printf '%s\n' "${res[@]}" | awk '{print $2}' | median)
  echo "median $side: fwd $f ms  bwd $b ms a step ($preset, $threads thread(s), $rounds rounds)"
done
