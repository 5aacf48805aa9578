#!/usr/bin/env bash
# CPU time of the fused attention kernels inside the training step, A/B alternating (two
# builds, or one build under two sets of environment switches): `perf record -e task-clock`
# with a fixed period of 50 us over `tgc run --repeat $REPEAT` (default 15), and the samples
# that fall in codegen/attention_cpu.cpp's functions (forward and backward together) times
# the period, divided by the REPEAT + 1 steps run (the warm-up and the repeats). Task-clock
# counts only the time the threads ran, so unlike bench/attention_step_ab.sh (wall time per
# launch) it stays usable when other processes load the host.
#   bench/attention_step_cpu.sh [A-build] [B-build] [small|base] [rounds] [threads] [A-env] [B-env]
# e.g. bench/attention_step_cpu.sh build-final9 build-attn small 5 1
set -euo pipefail
# shellcheck source=bench/attention_step_common.sh
source "$(dirname "$0")/attention_step_common.sh"
repeat=${REPEAT:-15}
data=/tmp/attention_step_cpu_$$.data
# The functions of codegen/attention_cpu.cpp (their names are used nowhere else).
funcs='codegen::\(anonymous namespace\)::(gemmAvx2|gemmPortable|softmax|expAvx2|expPortable|transpose|maskAvx2|maskPortable|maxAvx2|maxPortable|dotAvx2|dotPortable|uniforms|forwardBlock|forwardOneBlock|backwardHead|forEachTask|threadScratch)'
one() {  # build, env string -> attention CPU ms a step, and the whole run's (compile included)
  # shellcheck disable=SC2086
  env $2 TGC_NUM_THREADS="$threads" perf record -q -e task-clock -c 50000 -o "$data" \
    "$1/tools/tgc" run "$tir" --backend cpu --random-inputs 1 --int-range 1,8000 --repeat "$repeat" \
    >/dev/null 2>&1
  local all att
  all=$(perf script -i "$data" -F ip,sym 2>/dev/null | wc -l)
  att=$(perf script -i "$data" -F ip,sym 2>/dev/null | grep -cE "$funcs" || true)
  rm -f "$data"
  awk -v a="$att" -v n="$all" -v s="$((repeat + 1))" \
    'BEGIN { printf "%.2f %.1f\n", a * 0.05 / s, n * 0.05 / s }'
}
ab_rounds "attention/run CPU ms a step"
for side in A B; do
  declare -n res="res$side"
  m=$(printf '%s\n' "${res[@]}" | awk '{print $1}' | median)
  echo "median $side: attention $m CPU ms a step ($preset, $threads thread(s), $rounds rounds)"
done
