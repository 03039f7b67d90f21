#!/usr/bin/env bash
# One call on the GPU machine: build, the gpu-labelled tests (with their parity figures), greedy
# generation and `bench decode` on a random-weight Qwen2.5-0.5B q4_0, and the B1 attention bench.
# Missing build dependencies (pcre2, gtest) may travel in .devdeps/ (a /usr-like prefix).
# Logs are packed into $OUT/logs.tgz. Usage (repo root): OUT=/some/dir bash bench/cuda_device_run.sh
set -u -o pipefail
OUT=${OUT:-/tmp/mvllm_out}
LOG=/tmp/mvllm_logs
mkdir -p "$OUT" "$LOG"
trap 'tar czf "$OUT/logs.tgz" -C "$LOG" . 2>/dev/null' EXIT
J=${J:-16}
if [ -d .devdeps ]; then
  export PKG_CONFIG_PATH=$PWD/.devdeps/lib/x86_64-linux-gnu/pkgconfig CMAKE_PREFIX_PATH=$PWD/.devdeps
fi
t0=$(date +%s)
cmake -S . -B build -DMVLLM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMVLLM_BUILD_BENCH=OFF > "$LOG/build.log" 2>&1 ||
  { tail -30 "$LOG/build.log"; exit 1; }
# The GPU tests first: a broken unrelated target must not cost the device call.
cmake --build build -j"$J" --target test_cuda >> "$LOG/build.log" 2>&1 ||
  { grep -E "error" -A3 "$LOG/build.log" | head -40; exit 1; }
cmake --build build -j"$J" >> "$LOG/build.log" 2>&1 || { echo "full build failed (continuing):"; grep -E "error" "$LOG/build.log" | head -10; }
echo "build done in $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,temperature.gpu --format=csv > "$LOG/gpu.txt" 2>&1
timeout 150 build/bin/test_cuda > "$LOG/test_cuda.log" 2>&1
echo "test_cuda rc=$?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|rel err|Failure|Expected|Which is|which is|error|CHECK" "$LOG/test_cuda.log" | head -70
timeout 90 ctest --test-dir build -L gpu --output-on-failure > "$LOG/ctest_gpu.log" 2>&1
echo "ctest -L gpu rc=$?: $(grep -E "tests passed|tests failed" "$LOG/ctest_gpu.log")"
timeout ${ATTN_TIMEOUT:-240} build/bin/mvllm bench attention --json-out "$LOG/attn_bench.json" ${ATTN_ARGS:-} > "$LOG/attn_bench.log" 2>&1
echo "attention bench rc=$?"; cat "$LOG/attn_bench.log"; cp "$LOG/attn_bench.json" "$OUT/" 2>/dev/null
# The torch anchor (BENCHMARKS.md B1) in the same run, when its script travelled in .carry/.
if [ -f .carry/attn_torch.py ] && [ -z "${NO_ANCHOR:-}" ]; then
  OUT="$LOG" timeout ${ANCHOR_TIMEOUT:-200} python3 .carry/attn_torch.py > "$LOG/attn_anchor.log" 2>&1
  echo "torch anchor rc=$?"; tail -3 "$LOG/attn_anchor.log"; cp "$LOG/attn_anchor_torch.json" "$OUT/" 2>/dev/null
fi
timeout 60 build/bin/mvllm make-model /tmp/q05.gguf --preset qwen2.5-0.5b --type q4_0 > "$LOG/model.log" 2>&1 || tail -5 "$LOG/model.log"
prompt="$(seq -s ' ' 1 20)"
for dev in cuda cpu; do
  timeout 40 build/bin/mvllm generate -m /tmp/q05.gguf --device $dev --prompt-ids "$prompt" -n 32 > "$LOG/gen_$dev.txt" 2>&1
  echo "generate $dev rc=$?: $(head -c 400 "$LOG/gen_$dev.txt" | tr '\n' ' ')"
done
cmp -s <(head -1 "$LOG/gen_cuda.txt") <(head -1 "$LOG/gen_cpu.txt") && echo "generate: cuda == cpu tokens" || echo "generate: cuda != cpu tokens"
for att in fused naive; do
  timeout 60 build/bin/mvllm bench decode -m /tmp/q05.gguf --device cuda --attention $att --prompt-len 512 -n 128 \
    --json-out "$LOG/bench_decode_$att.json" > "$LOG/bench_decode_$att.log" 2>&1
  echo "bench decode $att rc=$?: $(tail -4 "$LOG/bench_decode_$att.log" | tr '\n' ' ')"
done
echo "total $(( $(date +%s) - t0 )) s"
