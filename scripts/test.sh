#!/usr/bin/env bash
# Builds tgc (installing what is missing) and runs every test: GoogleTest suites, lit/FileCheck
# tests and fuzz-corpus replays, all from one ctest call.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh -DTGC_WERROR=ON
ctest --test-dir build --output-on-failure -j"$(nproc)"
