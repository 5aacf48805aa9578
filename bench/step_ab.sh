#!/usr/bin/env bash
# The whole training step, A/B alternating: two builds, or one build under two sets of
# environment switches. A run is `tgc run --repeat $REPEAT --timing-json` (default 10
# steps on one batch); its figure is the median of its steps after the first. Prints one
# line per round, then each side's median and the median of the rounds' B/A ratios: on a
# noisy host the ratio of neighbouring runs is steadier than either median.
#   bench/step_ab.sh [A-build] [B-build] [small|base] [rounds] [threads] [A-env] [B-env]
# e.g. bench/step_ab.sh build build small 8 2 "TGC_POOL_PIN=0" ""
#      bench/step_ab.sh build-start build base 5 2
set -euo pipefail
# shellcheck source=bench/attention_step_common.sh
source "$(dirname "$0")/attention_step_common.sh"
json=/tmp/step_ab_$$.json
one() {  # build, env string -> the run's median step in ms
  # shellcheck disable=SC2086
  env $2 TGC_NUM_THREADS="$threads" "$1/tools/tgc" run "$tir" --backend cpu --random-inputs 1 \
    --int-range 1,8000 --repeat "${REPEAT:-10}" --timing-json "$json" >/dev/null 2>&1
  python3 -c 'import json, sys
r = sorted(json.load(open(sys.argv[1]))["run_s"][1:])
print(f"{r[len(r) // 2] * 1e3:.1f}")' "$json"
  rm -f "$json"
}
ab_rounds "step ms"
a=$(printf '%s\n' "${resA[@]}" | median)
b=$(printf '%s\n' "${resB[@]}" | median)
ratio=$(paste <(printf '%s\n' "${resA[@]}") <(printf '%s\n' "${resB[@]}") | awk '{print $2 / $1}' | median)
echo "median A: $a ms  B: $b ms  B/A per round: $ratio ($preset, $threads thread(s), $rounds rounds)"
