#!/usr/bin/env bash
# A/B of the head-split fold (fused_attention layout bthd, session 9 "layout"): the training
# step's profile summed by category (head split/merge transposes, attention library kernels,
# other kernels, GEMMs; bench/profile_categories.py) and the process's task-clock, for
#   A    = an older binary without the fold ($A_TGC, default build-rng/tools/tgc),
#   B    = this binary with the fold ($B_TGC, default build-layout/tools/tgc),
#   Boff = B with TGC_NO_ATTENTION_LAYOUT=1 at compile time (the fold off, same binary),
# alternating A, B, Boff in each of $ROUNDS rounds, at 1 and 2 threads.
# Usage: bench/attention_layout_ab.sh small|base [ROUNDS]   (from the repository root)
set -euo pipefail
preset=${1:-small}
rounds=${2:-3}
A_TGC=${A_TGC:-build-rng/tools/tgc}
B_TGC=${B_TGC:-build-layout/tools/tgc}
out=${OUT_DIR:-/tmp/attention_layout_ab}
mkdir -p "$out"
case $preset in
  small) dims=(--dim B=32 --dim S=32 --dim T=32) ;;
  base) dims=(--dim B=16 --dim S=64 --dim T=64) ;;
  *) echo "preset small or base" >&2; exit 2 ;;
esac
compile() {  # name tgc [env...]
  local name=$1 tgc=$2
  shift 2
  env "$@" "$tgc" compile models/transformer.tg --preset "$preset" --train --target cpu \
    "${dims[@]}" --stats -o "$out/$name.tir" 2>&1 | grep -E "saved activations|launches per run"
}
echo "== compile ($preset)"
for v in A B Boff; do
  echo "-- $v"
  case $v in
    A) compile A "$A_TGC" ;;
    B) compile B "$B_TGC" ;;
    Boff) compile Boff "$B_TGC" TGC_NO_ATTENTION_LAYOUT=1 ;;
  esac
done
for r in $(seq 1 "$rounds"); do
  for threads in 1 2; do
    for v in A B Boff; do
      tgc=$B_TGC
      [ $v = A ] && tgc=$A_TGC
      perf stat -x, -e task-clock -o "$out/perf.txt" env TGC_NUM_THREADS=$threads "$tgc" run \
        "$out/$v.tir" --backend cpu --random-inputs 1 --int-range 1,8000 --repeat 5 --profile \
        --profile-top 5000 2>"$out/profile.txt" >/dev/null
      cpu=$(awk -F, '/task-clock/ {printf "%.0f", $1}' "$out/perf.txt")
      echo "round $r threads $threads $v: task-clock ${cpu} ms (5 steps + start) | $(python3 \
        bench/profile_categories.py <"$out/profile.txt") | load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
