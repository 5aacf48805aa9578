#!/usr/bin/env bash
# bench/gpu.sh: everything tgc can prove on an NVIDIA GPU, in one run of under 8 minutes.
#
#   bench/gpu.sh [--no-device-ok] [BUILD_DIR]        (default BUILD_DIR: build-gpu)
#
# 1. looks for a device (nvidia-smi, else libcuda.so.1 in the loader's cache); without one
#    it prints "no CUDA device: ..." and exits 2 before building anything, unless
#    --no-device-ok is given: then every step still runs (what needs the GPU skips or says
#    "no CUDA device"), which is how the script itself is tested on machines without a GPU;
# 2. configures and builds (CMake, Ninja, -j$(nproc) capped at 16) the targets it runs;
# 3. runs the CUDA tests: driver, GEMM (every kernel vs a float64 reference and the CPU
#    GEMM), PTX through ptxas, every generated-kernel op and the tiny training step vs the
#    CPU backend, fused attention vs the interpreter, the trainer on the GPU vs the CPU
#    trainer (cuda_runtime_tests, cuda_exec_tests, cuda_attention_tests, cuda_train_tests,
#    and cuda_ptx_tests when built);
# 4. GEMM TFLOP/s at the Transformer's shapes against cuBLAS (bench/cuda_gemm_bench);
# 5. the base preset's training step (batch 64 x 64 tokens) compiled for the GPU and timed
#    with `tgc run --backend cuda --repeat --profile` (forward fusions off: fused attention
#    does not run on the GPU yet), with the most expensive launches;
# 6. a short `tgc train --target cuda` run of the README's task (tiny preset, 1500 steps,
#    the state on the GPU, validation and the final test decoded on the CPU);
# 7. the base step as `tgc train` builds it (forward fusions on) at 64 x 64 tokens on the
#    GPU against PyTorch eager on the same GPU (bench/gpu_torch_step.py; it says "skipped"
#    when torch with CUDA is not importable);
# 8. prints a summary: each step's status and time, the test counts, the GEMM table, the
#    training run's figures and the step-time comparison.
# Logs go to BUILD_DIR/gpu-logs/. Exit status: 0 when every step passed, 1 when one failed,
# 2 without a device (and without --no-device-ok).
set -uo pipefail

no_device_ok=0
if [[ "${1:-}" == "--no-device-ok" ]]; then
  no_device_ok=1
  shift
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build-gpu}"
[[ "$build" = /* ]] || build="$PWD/$build"
logs="$build/gpu-logs"
jobs="$(nproc)"
((jobs > 16)) && jobs=16
start=$SECONDS
budget=${TGC_GPU_BUDGET_S:-470}  # the whole script, seconds: under 8 minutes

declare -a summary=()
failed=0

note() { printf '[gpu.sh %4ds] %s\n' "$((SECONDS - start))" "$*"; }

# Seconds left for a step: its own cap, or what remains of the budget if less.
left() {
  local cap=$1 remain=$((budget - (SECONDS - start)))
  ((remain < cap)) && cap=$remain
  ((cap < 1)) && cap=1
  echo "$cap"
}

# step NAME CAP_SECONDS COMMAND...: runs COMMAND with a timeout, its output in
# $logs/NAME.log, and records the status in the summary.
step() {
  local name=$1 cap
  cap=$(left "$2")
  shift 2
  local t0=$SECONDS status
  note "$name (at most ${cap}s): $*"
  timeout --kill-after=5 "$cap" "$@" >"$logs/$name.log" 2>&1
  status=$?
  local took=$((SECONDS - t0)) what
  case $status in
    0) what="ok" ;;
    124 | 137) what="TIMED OUT after ${cap}s" ;;
    *) what="FAILED (exit $status)" ;;
  esac
  if [[ $status -ne 0 && -n "$device_reason" ]] && grep -q 'no CUDA device: ' "$logs/$name.log"; then
    what="skipped: no CUDA device"  # --no-device-ok, and the step said why
  elif [[ $status -ne 0 ]]; then
    failed=1
  fi
  summary+=("$(printf '%-20s %-28s %4ds  log: %s' "$name" "$what" "$took" "$logs/$name.log")")
  note "$name: $what in ${took}s"
  return "$status"
}

# ---- 1. a device? ------------------------------------------------------------------------------
device_reason=""
if command -v nvidia-smi >/dev/null 2>&1; then
  if ! nvidia-smi -L >/dev/null 2>&1; then
    device_reason="nvidia-smi lists no GPU"
  fi
elif ! "$(command -v ldconfig || echo /sbin/ldconfig)" -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
  device_reason="no NVIDIA driver (no nvidia-smi, no libcuda.so.1 in the loader's cache)"
fi
if [[ -n "$device_reason" ]]; then
  echo "gpu.sh: no CUDA device: $device_reason"
  if ((!no_device_ok)); then
    echo "gpu.sh: nothing built or run (give --no-device-ok to run the steps anyway)"
    exit 2
  fi
  echo "gpu.sh: --no-device-ok: running every step; GPU tests skip and benchmarks say why"
fi
mkdir -p "$logs"

# ---- 2. build ----------------------------------------------------------------------------------
export TGC_CACHE_DIR="$build/kernel-cache"
if step configure 120 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release; then
  targets=(tgc cuda_runtime_tests cuda_exec_tests cuda_attention_tests cuda_train_tests)
  known="$(ninja -C "$build" -t targets all 2>/dev/null)"
  for optional in cuda_ptx_tests cuda_gemm_bench; do
    if grep -q "^$optional:" <<<"$known"; then
      targets+=("$optional")
    else
      note "$optional is not configured (it needs the CUDA toolkit, and cuBLAS for the bench)"
    fi
  done
  step build 330 ninja -C "$build" -j"$jobs" "${targets[@]}"
fi

# ---- 3. tests ----------------------------------------------------------------------------------
# A test binary's counts from its log: "passed N, skipped N, failed N".
counts() {
  local log=$1 p s f
  p=$(grep -c '^\[       OK \]' "$log")
  s=$(grep -c '^\[  SKIPPED \] .*(' "$log")
  f=$(grep -c '^\[  FAILED  \] .*(' "$log")
  echo "passed $p, skipped $s, failed $f"
}
declare -a test_counts=()
for t in cuda_runtime_tests cuda_exec_tests cuda_attention_tests cuda_train_tests cuda_ptx_tests; do
  bin=$(find "$build/tests" -name "$t" -type f -perm -u+x 2>/dev/null | head -n 1)
  [[ -n "$bin" ]] || continue
  step "$t" 150 env TGC_EXE="$build/tools/tgc" "$bin" --gtest_color=no
  test_counts+=("$(printf '%-20s %s' "$t" "$(counts "$logs/$t.log")")")
done

# ---- 4. GEMM against cuBLAS --------------------------------------------------------------------
if [[ -x "$build/bench/cuda_gemm_bench" ]]; then
  step gemm_bench 90 "$build/bench/cuda_gemm_bench"
fi

# ---- 5. the base training step on the GPU ------------------------------------------------------
if [[ -x "$build/tools/tgc" ]]; then
  step compile_step 60 env TGC_NO_FUSION=1 "$build/tools/tgc" compile "$root/models/transformer.tg" \
    --preset base --dim B=64 --dim S=64 --dim T=64 --train -o "$build/base_step.tir" &&
    step train_step 120 "$build/tools/tgc" run "$build/base_step.tir" --backend cuda \
      --random-inputs 1 --repeat 10 --profile --timing-json "$build/base_step_cuda.json"
fi

# ---- 6. training on the GPU ------------------------------------------------------------------
if [[ -x "$build/tools/tgc" ]]; then
  rm -rf "$build/gpu-train"
  step gpu_train 150 "$build/tools/tgc" train "$root/models/transformer.tg" --preset tiny \
    --target cuda --steps 1500 --valid-every 500 --samples 4 --out "$build/gpu-train"
fi

# ---- 7. the base step (fusions on) vs PyTorch eager on the same GPU --------------------------
if [[ -x "$build/tools/tgc" ]]; then
  step compile_base 60 "$build/tools/tgc" compile "$root/models/transformer.tg" --preset base \
    --dim B=64 --dim S=64 --dim T=64 --train -o "$build/base_step_fused.tir" &&
    step base_step 120 "$build/tools/tgc" run "$build/base_step_fused.tir" --backend cuda \
      --random-inputs 1 --int-range 1,8000 --repeat 10 --timing-json "$build/base_step_fused.json" &&
    step torch_step 90 python3 "$root/bench/gpu_torch_step.py" --tir "$build/base_step_fused.tir" \
      --tgc-json "$build/base_step_fused.json" --preset base --batch 64 --len 64 --steps 10
fi

# ---- 8. summary --------------------------------------------------------------------------------
echo
echo "==== gpu.sh summary ($((SECONDS - start))s of a ${budget}s budget) ===="
probe="$(cd "$build" 2>/dev/null && [[ -x bench/cuda_gemm_bench ]] && bench/cuda_gemm_bench --probe 2>&1)"
echo "device: ${probe:-${device_reason:+no CUDA device: $device_reason}}"
printf '%s\n' "${summary[@]}"
if ((${#test_counts[@]})); then
  echo "-- tests"
  printf '%s\n' "${test_counts[@]}"
  grep -h '^\[  FAILED  \] .*(' "$logs"/cuda_*_tests.log 2>/dev/null | head -n 20
fi
if [[ -f "$logs/gemm_bench.log" ]]; then
  echo "-- GEMM vs cuBLAS"
  grep -v '^RESULT' "$logs/gemm_bench.log"
fi
if [[ -f "$logs/train_step.log" ]]; then
  echo "-- base training step (B=64, S=T=64) on the GPU"
  grep -E -A12 'tgc run:|error' "$logs/train_step.log"
fi
if [[ -f "$logs/gpu_train.log" ]]; then
  echo "-- tgc train --target cuda (tiny preset, built-in task, 1500 steps)"
  grep -E 'compiled the training step|validation at|^steps |exact match|error' "$logs/gpu_train.log"
fi
if [[ -f "$logs/torch_step.log" ]]; then
  echo "-- base training step (B=64, S=T=64, forward fusions on): tgc vs PyTorch eager, same GPU"
  cat "$logs/torch_step.log"
elif [[ -f "$logs/base_step.log" ]]; then
  echo "-- base training step (B=64, S=T=64, forward fusions on) on the GPU"
  grep -E 'tgc run:|error' "$logs/base_step.log"
fi
exit "$failed"
