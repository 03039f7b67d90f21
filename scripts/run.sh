#!/usr/bin/env bash
# The README's first command: install dependencies, build, and generate with a model.
# Usage: scripts/run.sh [mvllm generate arguments]  (default: the tiny Qwen2 fixture)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target mvllm
if [ $# -eq 0 ]; then
  set -- -m tests/fixtures/tiny-qwen2 --prompt-ids "1 2 3" -n 16 --ids-out
fi
build/bin/mvllm generate "$@"
