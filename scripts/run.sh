#!/usr/bin/env bash
# The README's first command: install dependencies, build, and generate with a model.
# Usage: scripts/run.sh [mvllm generate arguments]  (default: a paragraph from the shipped model)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target mvllm
if [ $# -eq 0 ]; then
  set -- --prompt "It is a truth universally acknowledged" -n 120 --seed 42
fi
build/bin/mvllm generate "$@"
