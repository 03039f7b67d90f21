#!/usr/bin/env bash
# One call on the GPU machine: build, the gpu-labelled tests (with their parity figures), greedy
# generation and `bench decode` on a random-weight Qwen2.5-0.5B q4_0, and the B1 attention bench.
# Logs go to $OUT. Usage (repo root): OUT=/some/dir bash bench/cuda_device_run.sh
set -u -o pipefail
OUT=${OUT:-/tmp/mvllm_out}
mkdir -p "$OUT"
J=${J:-16}
{ cmake -S . -B build -DMVLLM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMVLLM_BUILD_BENCH=OFF &&
  cmake --build build -j"$J"; } > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }
echo "build ok"
nvcc -std=c++20 -O3 -arch=sm_90 --use_fast_math -I src bench/cuda_attention_bench.cu build/libmvllm_backend_cuda.a \
  build/libmvllm_kv.a build/libmvllm_core.a -lcublas -o build/bench_cuda_attention > "$OUT/bench_build.log" 2>&1 &
bench_build=$!
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
timeout 240 build/bin/test_cuda > "$OUT/test_cuda.log" 2>&1
echo "test_cuda rc=$?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|rel err|Failure|Expected|Which is|which is|error" "$OUT/test_cuda.log" | head -60
timeout 120 ctest --test-dir build -L gpu --output-on-failure > "$OUT/ctest_gpu.log" 2>&1
echo "ctest -L gpu rc=$?"; grep -E "tests passed|tests failed" "$OUT/ctest_gpu.log"
build/bin/mvllm make-model /tmp/q05.gguf --preset qwen2.5-0.5b --type q4_0 > "$OUT/model.log" 2>&1 || tail -5 "$OUT/model.log"
prompt="$(seq -s ' ' 1 20)"
for dev in cuda cpu; do
  timeout 60 build/bin/mvllm generate -m /tmp/q05.gguf --device $dev --prompt-ids "$prompt" -n 32 > "$OUT/gen_$dev.txt" 2>&1
  echo "generate $dev rc=$?: $(head -c 300 "$OUT/gen_$dev.txt" | tr '\n' ' ')"
done
cmp -s <(head -1 "$OUT/gen_cuda.txt") <(head -1 "$OUT/gen_cpu.txt") && echo "generate: cuda == cpu tokens" || echo "generate: cuda != cpu tokens"
for att in fused naive; do
  timeout 90 build/bin/mvllm bench decode -m /tmp/q05.gguf --device cuda --attention $att --prompt-len 512 -n 128 \
    --repeat 3 --json-out "$OUT/bench_decode_$att.json" > "$OUT/bench_decode_$att.log" 2>&1
  echo "bench decode $att rc=$?: $(tail -3 "$OUT/bench_decode_$att.log" | tr '\n' ' ')"
done
wait $bench_build || { tail -20 "$OUT/bench_build.log"; exit 1; }
timeout 220 build/bin/bench_cuda_attention "$OUT/attn_bench.json" 2>&1 | tee "$OUT/attn_bench.log"
