#!/usr/bin/env bash
# One call on the GPU machine: build, the gpu-labelled tests (with their parity figures), the
# decode GEMV kernel bench, greedy generation CUDA vs CPU, and `bench decode` on random-weight
# Qwen2.5-0.5B / 7B files (graphs on and off). SWEEP=1 adds the B2/B3/B5 sweep
# (bench/cuda_decode_sweep.sh). Missing build dependencies (pcre2, gtest) may travel in .devdeps/
# (a /usr-like prefix). JSON results go to $OUT/results.tgz, logs to $OUT/logs.tgz.
# Usage (repo root): OUT=some/dir bash bench/cuda_decode_run.sh
# A device call sends the checkout its session started in, not a git worktree beside it: to run a
# branch from a worktree, copy its files into an ignored folder of that checkout (.carry/NAME),
# carry that folder and .devdeps, and start with `cd .carry/NAME && ln -sfn ../../.devdeps .devdeps`.
# QUICK knobs: GEN_DEVICES (default "cuda cpu"), KERNEL_ARGS (extra `bench kernels` flags).
set -u -o pipefail
OUT=${OUT:-$(mktemp -d)}
LOG=$(mktemp -d)
RES=$(mktemp -d)   # JSON results, packed into $OUT/results.tgz (few files may come back)
mkdir -p "$OUT" "$LOG" "$RES"
trap 'tar czf "$OUT/logs.tgz" -C "$LOG" . 2>/dev/null; tar czf "$OUT/results.tgz" -C "$RES" . 2>/dev/null' EXIT
J=${J:-16}
if [ -d .devdeps ]; then
  export PKG_CONFIG_PATH=$PWD/.devdeps/lib/x86_64-linux-gnu/pkgconfig CMAKE_PREFIX_PATH=$PWD/.devdeps
fi
t0=$(date +%s)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMVLLM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMVLLM_BUILD_BENCH=OFF \
  > "$LOG/build.log" 2>&1 || { tail -30 "$LOG/build.log"; exit 1; }
cmake --build build -j"$J" --target test_cuda mvllm >> "$LOG/build.log" 2>&1 ||
  { grep -E "error" -A3 "$LOG/build.log" | head -40; exit 1; }
echo "build done in $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,temperature.gpu --format=csv > "$LOG/gpu.txt" 2>&1
timeout 240 build/bin/test_cuda > "$LOG/test_cuda.log" 2>&1
echo "test_cuda rc=$?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|rel err|Failure|Expected|Which is|which is|error|CHECK" "$LOG/test_cuda.log" | head -60
timeout 150 build/bin/mvllm bench kernels --device cuda ${KERNEL_ARGS:-} --json-out "$RES/cuda_kernels.json" > "$LOG/kernels.log" 2>&1
echo "bench kernels rc=$?"; cat "$LOG/kernels.log" | head -80
M=$(mktemp -d)   # the make-model files
timeout 60 build/bin/mvllm make-model $M/q05-q4_0.gguf --preset qwen2.5-0.5b --type q4_0 > "$LOG/model.log" 2>&1 || tail -5 "$LOG/model.log"
prompt="$(seq -s ' ' 1 20)"
for dev in ${GEN_DEVICES-cuda cpu}; do
  timeout 60 build/bin/mvllm generate -m $M/q05-q4_0.gguf --device $dev --prompt-ids "$prompt" -n 32 --ids-out > "$LOG/gen_$dev.txt" 2> "$LOG/gen_$dev.err"
  echo "generate $dev rc=$?: $(head -c 300 "$LOG/gen_$dev.txt" | tr '\n' ' ') / $(tail -1 "$LOG/gen_$dev.err")"
done
cmp -s <(head -1 "$LOG/gen_cuda.txt") <(head -1 "$LOG/gen_cpu.txt") && echo "generate: cuda == cpu tokens" || echo "generate: cuda != cpu tokens"
for graphs in 1 0; do
  MVLLM_CUDA_GRAPHS=$graphs timeout 60 build/bin/mvllm bench decode -m $M/q05-q4_0.gguf --device cuda --kv-dtype f16 \
    --prompt-len 512 -n 127 --repeat 3 --json-out "$RES/cuda_decode_q05_q4_0_graphs$graphs.json" > "$LOG/bd_q05_g$graphs.log" 2>&1
  echo "bench decode 0.5B q4_0 graphs=$graphs rc=$?: $(tail -1 "$LOG/bd_q05_g$graphs.log")"
done
if [ "${SWEEP:-0}" = 1 ]; then
  RES=$RES LOG=$LOG M=$M bash bench/cuda_decode_sweep.sh
else
  t1=$(date +%s)
  timeout 120 build/bin/mvllm make-model $M/q7-q4_0.gguf --preset qwen2.5-7b --type q4_0 > "$LOG/model7.log" 2>&1 || tail -5 "$LOG/model7.log"
  echo "make-model 7B q4_0: $(( $(date +%s) - t1 )) s"
  timeout 90 build/bin/mvllm bench decode -m $M/q7-q4_0.gguf --device cuda --kv-dtype f16 --prompt-len 512 -n 127 \
    --json-out "$RES/cuda_decode_q7_q4_0.json" > "$LOG/bd_q7.log" 2>&1
  echo "bench decode 7B q4_0 rc=$?: $(tail -1 "$LOG/bd_q7.log")"
fi
echo "total $(( $(date +%s) - t0 )) s"
