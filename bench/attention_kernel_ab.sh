#!/usr/bin/env bash
# The CPU attention kernels alone (tests/codegen/attention_bench) at the training step's
# shapes, two builds alternating, 1 thread, CPU clock: small (B 32, H 4, L 32, D 64) and base
# (B 16, H 8, L 64, D 64), layout bthd, key-padding mask, with and without causal, operands
# rewritten before each call (--produce). One line per round, build and shape; the medians of
# the per-round medians and minima at the end.
#   bench/attention_kernel_ab.sh [A-build] [B-build] [rounds] [A-env] [B-env]
set -euo pipefail
buildA=${1:-build-final9}
buildB=${2:-build-attn}
rounds=${3:-4}
envA=${4:-}
envB=${5:-}
shapes=("small:--batch 32 --heads 4 --len 32 --dim 64 --runs 300"
        "small-causal:--batch 32 --heads 4 --len 32 --dim 64 --runs 300 --causal"
        "base:--batch 16 --heads 8 --len 64 --dim 64 --runs 100"
        "base-causal:--batch 16 --heads 8 --len 64 --dim 64 --runs 100 --causal")
out=$(mktemp)
for r in $(seq "$rounds"); do
  for s in "${shapes[@]}"; do
    name=${s%%:*} args=${s#*:}
    for side in A B; do
      if [ $side = A ]; then b=$buildA e=$envA; else b=$buildB e=$envB; fi
      # shellcheck disable=SC2086
      line=$(env $e "$b/tests/codegen/attention_bench" $args --bthd --mask --produce --threads 1 \
             --clock cpu | awk '/forward|backward/ { printf "%s %s %s ", $1, $3, $6 }')
      echo "$r $name $side $line" | tee -a "$out"
    done
  done
done
echo "medians over $rounds rounds (ms: forward median, min; backward median, min), load $(cut -d' ' -f1 /proc/loadavg)"
for s in "${shapes[@]}"; do
  name=${s%%:*}
  for side in A B; do
    awk -v n="$name" -v s="$side" '$2 == n && $3 == s { fm[++k] = $5; fn[k] = $6; bm[k] = $8; bn[k] = $9 }
      function med(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++)
                                       if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                     return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
      END { printf "%-13s %s  forward %.3f %.3f  backward %.3f %.3f\n", n, s, med(fm, k), med(fn, k), med(bm, k), med(bn, k) }' "$out"
  done
done
rm -f "$out"
