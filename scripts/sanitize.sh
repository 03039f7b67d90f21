#!/usr/bin/env bash
# The whole CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer on):
# the "asan" CMake preset (clang, RelWithDebInfo, every UBSan finding fatal), built in build-asan.
# The same build holds the libFuzzer targets that scripts/fuzz.sh runs.
# Usage: scripts/sanitize.sh [extra ctest args]      Env: BUILD_DIR (build-asan), JOBS (nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/fetch_tokenizers.sh || { sleep 5; scripts/fetch_tokenizers.sh --force; }
BUILD_DIR=${BUILD_DIR:-build-asan}
JOBS=${JOBS:-$(nproc)}
cmake --preset asan -B "$BUILD_DIR"
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --preset asan --test-dir "$BUILD_DIR" -j "$JOBS" "$@"
