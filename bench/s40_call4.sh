# The fortieth session's fourth call (bench/NOTES.md): the F32 fused kernel rewritten (4 dims a lane,
# the G heads' dots reduced by a reduce-scatter, one online-softmax update per tile of 4 row steps,
# 3-stage copy pipeline, 4 CTAs an SM) and the split merge over chunks of splits with independent
# loads; binaries in .carry/s40d, call 2's (.carry/s40b) as "old".
# Call 4: call 3 with rows past the split zero-filled (a NaN left in shared memory reached the sums), explicit
# FMA contractions (the same bits with and without the pipeline), Q loaded after the first copies, and the
# split merge in groups of splits (eight loads in flight a thread).
# 1. test_cuda. 2. B1 --quick (fused rows at 4K / 32K, batch 1 and 16), new then old.
# 3. the F32 rows over more contexts (new), and with MVLLM_ATTN_F32_MIN_SPLIT=128 / 256.
# 4. ncu of the new F32 kernel at 4K and 32K (stall samples per SASS instruction) and the
#    durations of the kernel and its merge at 4K.
set -u
R=$OUT/r; mkdir -p $R bin
trap 'tar czf "$OUT/r.tgz" -C "$OUT" r 2>/dev/null; rm -rf "$R"' EXIT
mkdir -p /tmp/carried && tar xJf .carry/s40d/lib.txz -C /tmp/carried && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/tmp/carried/lib
for b in mvllm test_cuda; do xz -dc .carry/s40d/$b.xz > bin/$b && chmod +x bin/$b; done
xz -dc .carry/s40b/mvllm.xz > bin/mvllm-old && chmod +x bin/mvllm-old
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 bin/test_cuda > $R/test_cuda.log 2>&1
echo "test_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/test_cuda.log | tr '\n' ' ')"; grep -E "FAILED|Failure" $R/test_cuda.log | head -20
f32rows() { grep -E "^qwen.* f32 " $1 | awk -F'|' '{print $1 "|" $2}'; }
for v in mvllm mvllm-old; do
  timeout 100 bin/$v bench attention --quick --json-out $R/quick_$v.json > $R/quick_$v.log 2>&1
  echo "quick $v rc=$?"; grep -E "^qwen" $R/quick_$v.log | awk -F'|' '{print $1 "|" $2}'
done
timeout 100 bin/mvllm bench attention --quick --contexts 128,512,1024,2048,4096,16384,32768 --batches 1,16 \
  --json-out $R/f32_ctx.json > $R/f32_ctx.log 2>&1; echo "f32 contexts:"; f32rows $R/f32_ctx.log
for ms in 128 256; do
  MVLLM_ATTN_F32_MIN_SPLIT=$ms timeout 100 bin/mvllm bench attention --quick --contexts 1024,4096,32768 --batches 1,16 \
    --json-out $R/f32_min$ms.json > $R/f32_min$ms.log 2>&1; echo "min split $ms:"; f32rows $R/f32_min$ms.log
done
for ctx in 4096 32768; do
  t=ncu_f32_$ctx
  timeout 120 ncu --clock-control none --kernel-name-base demangled -k "regex:fused_attention_kernel" \
    --launch-skip 40 --launch-count 1 --set full -f -o $R/$t bin/mvllm bench attention --quick --contexts $ctx \
    --batches 1 > $R/$t.log 2>&1
  echo "$t rc=$?"
  ncu -i $R/$t.ncu-rep --page source --csv --print-source sass > $R/${t}_src.csv 2> $R/${t}_src.err
  ncu -i $R/$t.ncu-rep --page details > $R/$t.txt 2>&1
  grep -E "Duration|Registers Per|Warp Cycles Per Issued|Achieved Occupancy|Grid Size|DRAM Throughput|Issue Slots Busy|Dynamic Shared" $R/$t.txt | head -10
  python3 bench/ncu_stalls.py $R/${t}_src.csv 12
  rm -f $R/$t.ncu-rep
done
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum -k "regex:fused_attention|merge_splits" \
  --launch-skip 40 --launch-count 4 bin/mvllm bench attention --quick --contexts 4096 --batches 1 > $R/ncu_f32_times.txt 2>&1
grep -E "fused_attention|merge_splits|gpu__time" $R/ncu_f32_times.txt | sed 's/(mvllm::cuda[^)]*)//' | cut -c1-100
