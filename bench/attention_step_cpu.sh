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
buildA=${1:-build-final9}
buildB=${2:-build-attn}
preset=${3:-small}
rounds=${4:-5}
threads=${5:-1}
envA=${6:-}
envB=${7:-}
repeat=${REPEAT:-15}
case $preset in
  small) dims="--dim B=32 --dim S=32 --dim T=32" ;;
  base) dims="--dim B=16 --dim S=64 --dim T=64" ;;
  *) echo "preset small or base" >&2; exit 2 ;;
esac
tir=/tmp/attention_step_cpu_$preset.tir
data=/tmp/attention_step_cpu_$$.data
# shellcheck disable=SC2086
"$buildA/tools/tgc" compile models/transformer.tg --preset "$preset" --train --target cpu $dims -o "$tir"
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
resA=() resB=()
for r in $(seq "$rounds"); do
  a=$(one "$buildA" "$envA"); b=$(one "$buildB" "$envB")
  resA+=("$a"); resB+=("$b")
  echo "round $r  A $buildA [$envA] attention/run CPU ms a step: $a   B $buildB [$envB]: $b   load $(cut -d' ' -f1 /proc/loadavg)"
done
median() { sort -n | awk '{x[NR]=$1} END {print (NR%2 ? x[(NR+1)/2] : (x[NR/2]+x[NR/2+1])/2)}'; }
for side in A B; do
  declare -n res="res$side"
  m=$(printf '%s\n' "${res[@]}" | awk '{print $1}' | median)
  echo "median $side: attention $m CPU ms a step ($preset, $threads thread(s), $rounds rounds)"
done
