#!/usr/bin/env bash
# The README's test command: install dependencies, build with tests, run every CTest test that
# needs no GPU. Usage: scripts/test.sh [extra ctest args]   (BUILD_DIR=build by default)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/fetch_tokenizers.sh || { sleep 5; scripts/fetch_tokenizers.sh --force; }
# The official openai npm client for the server tests (which skip without it).
scripts/fetch_openai_client.sh || echo "test.sh: openai npm client not installed: server.openai_client and server.load skip" >&2
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DMVLLM_BUILD_TESTS=ON ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" -LE gpu "$@"
