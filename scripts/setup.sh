#!/usr/bin/env bash
# Installs every Debian package tgc needs (only the missing ones: safe to run twice) and
# builds tgc into ./build. Usage: scripts/setup.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build ccache g++ python3 pkg-config
  llvm-19-dev llvm-19-tools clang-19 libclang-rt-19-dev   # LLVM 19 (ORC JIT), lit, FileCheck, libFuzzer
  libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev  # fmt, JSON, CLI11, GoogleTest
  libopenblas-dev                                          # the peer in bench/gemm_bench
  libsentencepiece-dev                                     # English subword vocabularies (runtime/data)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found at /usr/local/cuda: the CUDA backend will be built"
else
  echo "setup: no CUDA toolkit at /usr/local/cuda: the CUDA backend is left out"
fi

export CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" > build.log 2>&1 || { cat build.log; exit 1; }
grep '^-- tgc:' build.log || true
ninja -C build
