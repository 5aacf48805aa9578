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
# wake-up (bench/README "Session 10: attn"). REPEAT (default 15) steps a run: the first
# run's page faults on a fresh arena (2 MiB pages since 3ff4a70) land in the launches that
# first touch it, and at 5 repeats they still showed (base forward +20%).
set -euo pipefail
buildA=${1:-build-final9}
buildB=${2:-build-attn}
preset=${3:-small}
rounds=${4:-5}
threads=${5:-1}
envA=${6:-}
envB=${7:-}
case $preset in
  small) dims="--dim B=32 --dim S=32 --dim T=32" ;;
  base) dims="--dim B=16 --dim S=64 --dim T=64" ;;
  *) echo "preset small or base" >&2; exit 2 ;;
esac
tir=/tmp/attention_step_ab_$preset.tir
# shellcheck disable=SC2086
"$buildA/tools/tgc" compile models/transformer.tg --preset "$preset" --train --target cpu $dims -o "$tir"
one() {  # build, env string -> "fwd_ms bwd_ms"
  # shellcheck disable=SC2086
  env $2 TGC_NUM_THREADS="$threads" "$1/tools/tgc" run "$tir" --backend cpu \
    --random-inputs 1 --int-range 1,8000 --repeat "${REPEAT:-15}" --profile --profile-top 100000 2>&1 >/dev/null |
    awk '/lib:.*attention/ { if ($4 ~ /^lib:grad\./) b += $2; else f += $2 }
         END { printf "%.3f %.3f\n", f, b }'
}
resA=() resB=()
for r in $(seq "$rounds"); do
  a=$(one "$buildA" "$envA"); b=$(one "$buildB" "$envB")
  resA+=("$a"); resB+=("$b")
  echo "round $r  A $buildA [$envA] fwd/bwd ms: $a   B $buildB [$envB]: $b   load $(cut -d' ' -f1 /proc/loadavg)"
done
median() { sort -n | awk '{x[NR]=$1} END {print (NR%2 ? x[(NR+1)/2] : (x[NR/2]+x[NR/2+1])/2)}'; }
for side in A B; do
  declare -n res="res$side"
  f=$(printf '%s\n' "${res[@]}" | awk '{print $1}' | median)
  b=$(printf '%s\n' "${res[@]}" | awk '{print $2}' | median)
  echo "median $side: fwd $f ms  bwd $b ms a step ($preset, $threads thread(s), $rounds rounds)"
done
