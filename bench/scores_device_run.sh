#!/usr/bin/env bash
# The thirtieth session's second device call (bench/NOTES.md): test_cuda, B4(b) on the 0.5B with
# 0 / 5 / 20 top logprobs scored on the device, batch 1 with 5, the step timing of B4(b) plain and
# with a repetition penalty (MVLLM_CUDA_STEP_TIMING), and ncu of the row-score kernels.
# Usage (repo root, scripts/device_deps.sh's files carried): OUT=dir bash bench/scores_device_run.sh
OUT=$OUT STAGES="build" bash bench/sampling_device_run.sh 2>&1 | tail -3
source scripts/device_deps.sh unpack >/dev/null 2>&1
timeout 200 build-gpu/bin/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_cuda.log | tr "\n" " ")"; grep -E "FAILED|Failure" $OUT/test_cuda.log | head
B=build-gpu/bin/mvllm; M=/tmp/mvllm-models/qwen2.5-0.5b-q4_0.gguf
[ -f $M ] || timeout 200 $B make-model $M --preset qwen2.5-0.5b --type q4_0 > /dev/null 2>&1
for lp in none 0 5 20; do f=""; [ $lp != none ] && f="--logprobs $lp"; echo "b4b lp=$lp $(timeout 120 $B bench throughput -m $M --device cuda --num-requests 256 --input-len 100:1024 --output-len 100:1024 --kv-cache-memory 90% --kv-dtype f16 --activation-dtype f16 --temperature 0.6 $f --json-out $OUT/b4b_lp$lp.json 2>&1 | tail -1)"; done
for lp in none 5; do f=""; [ $lp != none ] && f="--logprobs $lp"; echo "batch1 lp=$lp $(timeout 60 $B bench throughput -m $M --device cuda --num-requests 1 --input-len 512 --output-len 256 --kv-dtype f16 --activation-dtype f16 --temperature 0.6 $f --json-out $OUT/b1_lp$lp.json 2>&1 | tail -1)"; done
for t in t06 rep; do f=""; [ $t = rep ] && f="--repeat-penalty 1.1"; MVLLM_CUDA_STEP_TIMING=1 timeout 120 $B bench throughput -m $M --device cuda --num-requests 256 --input-len 100:1024 --output-len 100:1024 --kv-cache-memory 90% --kv-dtype f16 --activation-dtype f16 --temperature 0.6 $f > $OUT/timing_$t.log 2>&1; echo "timing $t: $(grep -o 'cuda: .*' $OUT/timing_$t.log) | $(tail -n1 $OUT/timing_$t.log | awk -F'|' '{print $9}')"; done
timeout 150 ncu -k regex:row_scores --launch-skip 40 --launch-count 2 --section SpeedOfLight --section Occupancy --section WarpStateStats $B bench throughput -m $M --device cuda --num-requests 256 --input-len 64 --output-len 64 --temperature 0.6 --logprobs 5 > $OUT/ncu_scores.txt 2>&1
grep -E "row_scores|Duration|Compute \(SM\) Throughput|DRAM Throughput|Registers Per|Achieved Occ" $OUT/ncu_scores.txt | head -20
cp $OUT/r/test_cuda.log $OUT/ 2>/dev/null; rm -rf $OUT/r/build
