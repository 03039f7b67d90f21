#!/usr/bin/env bash
# The thirty-first session's first device call (bench/NOTES.md): the new tree built here for sm_90
# (as the base binary, built on the build machine before the picks were made during the pass, and
# carried xz-compressed in .carry/ with bench_sampler), test_cuda of the new tree; B4(b) on the 0.5B
# q4_0, plain and with a repetition penalty, base and new in alternating runs, each with
# MVLLM_CUDA_STEP_TIMING; bench_sampler's build_picks on this machine's threads.
# Usage (repo root, .devdeps and .carry carried): OUT=dir bash bench/picks_device_run.sh
set -u -o pipefail
OUT=${OUT:-$(mktemp -d)}
CUDA_ARCH=90 OUT=$OUT/build STAGES=build bash bench/h200_run.sh 2>&1 | tail -2
source scripts/device_deps.sh unpack > /dev/null 2>&1
mkdir -p bin && for b in mvllm-base bench_sampler; do xz -dc .carry/$b.xz > bin/$b && chmod +x bin/$b; done
cp build-gpu/bin/mvllm bin/mvllm-new && cp build-gpu/bin/test_cuda bin/test_cuda
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 240 bin/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/test_cuda.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $OUT/test_cuda.log | head -20
M=/tmp/mvllm-models/qwen2.5-0.5b-q4_0.gguf; mkdir -p /tmp/mvllm-models
[ -f $M ] || timeout 200 bin/mvllm-new make-model $M --preset qwen2.5-0.5b --type q4_0 > /dev/null 2>&1
b4b() {  # binary tag extra-flags...
  local bin=$1 tag=$2; shift 2
  MVLLM_CUDA_STEP_TIMING=1 timeout 150 bin/$bin bench throughput -m $M --device cuda --num-requests 256 \
    --input-len 100:1024 --output-len 100:1024 --kv-cache-memory 90% --kv-dtype f16 --activation-dtype f16 \
    --temperature 0.6 "$@" --json-out $OUT/$tag.json > $OUT/$tag.log 2>&1
  echo "$tag: $(tail -n1 $OUT/$tag.log | awk -F'|' '{print $9}') | $(grep -o 'cuda: .*' $OUT/$tag.log)"
}
for round in 1 2; do
  for v in base new; do b4b mvllm-$v ${v}_plain_$round; done
  for v in base new; do b4b mvllm-$v ${v}_rep_$round --repeat-penalty 1.1; done
done
b4b mvllm-new new_freq --frequency-penalty 0.5 --presence-penalty 0.3
timeout 120 bin/bench_sampler --benchmark_filter='build_picks|penalty_lists' --benchmark_min_time=0.5s > $OUT/bench_sampler.txt 2>&1
grep -E "^(build|penalty)" $OUT/bench_sampler.txt
