# Shared by bench/attention_step_ab.sh, bench/attention_step_cpu.sh and bench/step_ab.sh
# (sourced): their arguments, the step's graph compiled by the A build, and the alternating
# rounds. The sourcing script defines one() (build, env string -> its figures for one run) and calls
# ab_rounds with the figures' description; resA / resB then hold each round's figures.
#   [A-build] [B-build] [small|base] [rounds] [threads] [A-env] [B-env]
# PRECISION=bf16 in the environment compiles the bf16 step.
buildA=${1:-build}
buildB=${2:-build}
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
tir=/tmp/$(basename "$0" .sh)_$preset.tir
# shellcheck disable=SC2086
"$buildA/tools/tgc" compile models/transformer.tg --preset "$preset" --train --target cpu $dims \
  ${PRECISION:+--precision "$PRECISION"} -o "$tir"

ab_rounds() {  # description of one()'s figures
  resA=() resB=()
  local r a b
  for r in $(seq "$rounds"); do
    a=$(one "$buildA" "$envA"); b=$(one "$buildB" "$envB")
    resA+=("$a"); resB+=("$b")
    echo "round $r  A $buildA [$envA] $1: $a   B $buildB [$envB]: $b   load $(cut -d' ' -f1 /proc/loadavg)"
  done
}

median() { sort -n | awk '{x[NR]=$1} END {print (NR%2 ? x[(NR+1)/2] : (x[NR/2]+x[NR/2+1])/2)}'; }
