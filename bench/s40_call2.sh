# The fortieth session's second call (bench/NOTES.md): main after the merge of session39-next, with
# the decode kernel's shared-Q fill reading each Q input once (raw_q_quad), binaries in .carry/s40b.
# 1. test_cuda (the shipped model in the tree, for its batch-invariance test).
# 2. ncu of the F32 fused kernel (fused_attention_kernel) in B1 (`bench attention --quick`), 7B
#    geometry batch 1 at 128, 4096 and 32768 tokens: the full set, warp-stall samples per SASS
#    instruction (CSV) and the details page; and the durations of the F32 kernel and its split merge.
# 3. batch-1 decode of the 0.5B after 128 tokens, new against session39-next's binary (.carry/s40),
#    two rounds (raw_q_quad: the same bits, maybe fewer loads).
set -u
R=$OUT/r; mkdir -p $R bin
trap 'tar czf "$OUT/r.tgz" -C "$OUT" r 2>/dev/null; rm -rf "$R"' EXIT
mkdir -p /tmp/carried && tar xJf .carry/s40b/lib.txz -C /tmp/carried && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/tmp/carried/lib
for b in mvllm test_cuda; do xz -dc .carry/s40b/$b.xz > bin/$b && chmod +x bin/$b; done
xz -dc .carry/s40/mvllm.xz > bin/mvllm-old && chmod +x bin/mvllm-old
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 bin/test_cuda > $R/test_cuda.log 2>&1
echo "test_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/test_cuda.log | tr '\n' ' ')"; grep -E "FAILED|Failure" $R/test_cuda.log | head
for ctx in 128 4096 32768; do
  t=ncu_f32_$ctx
  timeout 120 ncu --clock-control none --kernel-name-base demangled -k "regex:fused_attention_kernel" \
    --launch-skip 40 --launch-count 1 --set full -f -o $R/$t bin/mvllm bench attention --quick --contexts $ctx \
    --batches 1 > $R/$t.log 2>&1
  echo "$t rc=$?"
  ncu -i $R/$t.ncu-rep --page source --csv --print-source sass > $R/${t}_src.csv 2> $R/${t}_src.err
  ncu -i $R/$t.ncu-rep --page details > $R/$t.txt 2>&1
  grep -E "Duration|Registers Per|Warp Cycles Per Issued|Achieved Occupancy|Grid Size|DRAM Throughput|Issue Slots Busy" $R/$t.txt | head -9
  rm -f $R/$t.ncu-rep
done
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum -k "regex:fused_attention|merge_splits" \
  --launch-skip 40 --launch-count 6 bin/mvllm bench attention --quick --contexts 4096 --batches 1 > $R/ncu_f32_times.txt 2>&1
grep -E "fused_attention|merge_splits|gpu__time" $R/ncu_f32_times.txt | sed 's/(mvllm::cuda[^)]*)//' | cut -c1-120
M=/tmp/mvllm-models/qwen2.5-0.5b-q4_0.gguf; mkdir -p /tmp/mvllm-models
timeout 100 bin/mvllm make-model $M --preset qwen2.5-0.5b --type q4_0 > /dev/null 2>&1
for round in 1 2; do for v in mvllm mvllm-old; do
  timeout 60 bin/$v bench decode -m $M --device cuda --kv-dtype f16 --prompt-len 128 -n 127 --repeat 3 \
    --json-out $R/dec_${v}_$round.json > $R/dec_${v}_$round.log 2>&1
  echo "dec $v $round: $(tail -n1 $R/dec_${v}_$round.log)"
done; done
