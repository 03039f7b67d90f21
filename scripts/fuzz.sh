#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan; the "asan" CMake preset) and
# runs each for SECONDS. Any crash, sanitizer report, leak, timeout (> 10 s for one input) or
# out-of-memory (> RSS_LIMIT_MB) is a failure: the input is copied to
# tests/fuzz/regressions/<target>/ (replayed by CTest from then on) and the script exits 1.
#
# Usage: scripts/fuzz.sh SECONDS [TARGET...]      (default: every target, one after the other)
# Env:   BUILD_DIR (build-asan)  RSS_LIMIT_MB (2048)  JOBS (nproc)  FUZZ_NO_BUILD=1 (skip the build)
# The working corpus grows in BUILD_DIR/fuzz-corpus/<target> across runs; the seeds are
# regenerated from the project's files by scripts/fuzz_seeds.py; every run appends
# "date target seconds execs result" to BUILD_DIR/fuzz-time.log.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seconds=${1:?usage: scripts/fuzz.sh SECONDS [TARGET...]}
shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(gguf safetensors hf_config tokenizer_json tokenize jinja chat_template openai_request)
BUILD_DIR=${BUILD_DIR:-build-asan}
RSS_LIMIT_MB=${RSS_LIMIT_MB:-2048}
JOBS=${JOBS:-$(nproc)}

if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then
    scripts/deps.sh
    CC=clang CXX=clang++ cmake --preset asan -B "$BUILD_DIR" >/dev/null
    cmake --build "$BUILD_DIR" -j "$JOBS" --target fuzz_targets
fi
python3 scripts/fuzz_seeds.py "$BUILD_DIR/fuzz-seeds"

failed=()
for t in "${targets[@]}"; do
    bin="$BUILD_DIR/bin/fuzz_$t"
    [ -x "$bin" ] || { echo "fuzz.sh: no fuzz target $t ($bin)" >&2; exit 2; }
    corpus="$BUILD_DIR/fuzz-corpus/$t"
    artifacts="$BUILD_DIR/fuzz-artifacts/$t"
    mkdir -p "$corpus" "$artifacts" "tests/fuzz/regressions/$t"
    rm -f "$artifacts"/*
    log="$BUILD_DIR/fuzz-$t.log"
    echo "fuzz.sh: $t for ${seconds}s (log $log)"
    flags=(-timeout=10 -rss_limit_mb="$RSS_LIMIT_MB" -malloc_limit_mb="$RSS_LIMIT_MB" -artifact_prefix="$artifacts/")
    set +e
    # Past findings first (run once each; they are not added to the corpus, some are large), then fuzz.
    mapfile -t past < <(find "tests/fuzz/regressions/$t" -type f | sort)
    rc=0
    if [ ${#past[@]} -ne 0 ]; then
        # Known inputs, some deliberately huge (100k-level JSON): a crash counts, slowness under load
        # does not (30 s instead of 10 s; alone they run in well under a second).
        "$bin" "${flags[@]}" -timeout=30 "${past[@]}" >"$log" 2>&1
        rc=$?
    fi
    if [ "$rc" -eq 0 ]; then
        "$bin" "${flags[@]}" -max_total_time="$seconds" -print_final_stats=1 \
            "$corpus" "$BUILD_DIR/fuzz-seeds/$t" >>"$log" 2>&1
        rc=$?
    fi
    set -e
    # A timeout or slow unit here may be machine load, not the input: rerun it alone; a finding
    # only if it is slow again (else it is set aside: fuzz-unconfirmed/).
    for f in "$artifacts"/timeout-* "$artifacts"/slow-unit-*; do
        [ -f "$f" ] || continue
        if "$bin" -timeout=10 "$f" >>"$log" 2>&1; then
            mkdir -p "$BUILD_DIR/fuzz-unconfirmed/$t"
            mv "$f" "$BUILD_DIR/fuzz-unconfirmed/$t/"
            echo "fuzz.sh: $t: $(basename "$f") ran under 10 s when repeated alone; set aside (machine load)" >&2
            [ "$(find "$artifacts" -type f | wc -l)" -eq 0 ] && rc=0
        fi
    done
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    found=$(find "$artifacts" -type f | wc -l)
    result=ok
    if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
        result="FAILED(rc=$rc)"
        failed+=("$t")
        for f in "$artifacts"/*; do
            [ -f "$f" ] || continue
            cp "$f" "tests/fuzz/regressions/$t/$(basename "$f")"
            echo "fuzz.sh: $t: $(basename "$f") -> tests/fuzz/regressions/$t/" >&2
        done
        grep -E "ERROR: |runtime error|fuzz property failed|CHECK failed|ALARM|out-of-memory" "$log" | head -n 5 >&2 || true
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$seconds" "${execs:-0}" "$result" >>"$BUILD_DIR/fuzz-time.log"
    echo "fuzz.sh: $t: ${execs:-0} runs, $result"
done

if [ ${#failed[@]} -ne 0 ]; then
    echo "fuzz.sh: findings in: ${failed[*]} (inputs saved under tests/fuzz/regressions/; replay with build/bin/replay_<target>)" >&2
    exit 1
fi
echo "fuzz.sh: every target ran ${seconds}s without a finding"
