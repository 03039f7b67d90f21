# The fortieth session's fifth call (bench/NOTES.md): the F32 kernel's first tiles copied before its
# wait where their tokens were cached before the step (MVLLM_EARLY_LOADS bit 1, as the F16/BF16
# kernel does), and the split merge with its first 16 parts a thread loaded before the reductions.
# Binaries in .carry/s40e, call 4's (.carry/s40d) as "old"; then B1 as BENCHMARKS.md specifies it
# (the whole table) and the torch anchor (.carry/s40e/attn_torch.py, a copy of the shared anchor)
# in the same run on the same card.
set -u
R=$OUT/r; mkdir -p $R bin
trap 'tar czf "$OUT/r.tgz" -C "$OUT" r 2>/dev/null; rm -rf "$R"' EXIT
mkdir -p /tmp/carried && tar xJf .carry/s40e/lib.txz -C /tmp/carried && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/tmp/carried/lib
for b in mvllm test_cuda; do xz -dc .carry/s40e/$b.xz > bin/$b && chmod +x bin/$b; done
xz -dc .carry/s40d/mvllm.xz > bin/mvllm-old && chmod +x bin/mvllm-old
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 200 bin/test_cuda > $R/test_cuda.log 2>&1
echo "test_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/test_cuda.log | tr '\n' ' ')"; grep -E "FAILED|Failure" $R/test_cuda.log | head -20
f32rows() { grep -E "^qwen.* f32 " $1 | awk -F'|' '{print $1 "|" $2}'; }
for v in mvllm mvllm-old early6; do
  b=$v; e=""; [ $v = early6 ] && { b=mvllm; e="MVLLM_EARLY_LOADS=6"; }
  env $e timeout 100 bin/$b bench attention --quick --contexts 128,1024,4096,32768 --json-out $R/quick_$v.json > $R/quick_$v.log 2>&1
  echo "quick $v rc=$?"; f32rows $R/quick_$v.log
done
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum -k "regex:fused_attention|merge_splits" \
  --launch-skip 40 --launch-count 4 bin/mvllm bench attention --quick --contexts 4096 --batches 1 > $R/ncu_f32_times.txt 2>&1
grep -E "fused_attention|merge_splits|gpu__time" $R/ncu_f32_times.txt | sed 's/(mvllm::cuda[^)]*)//' | cut -c1-100
timeout 230 bin/mvllm bench attention --json-out $R/attn_b1.json > $R/attn_b1.log 2>&1; echo "bench attention rc=$?"
grep -E "^qwen" $R/attn_b1.log | awk -F'|' '{print $1 "|" $2}' | head -60
OUT=$R timeout 200 python3 .carry/s40e/attn_torch.py > $R/attn_anchor.log 2>&1; echo "anchor rc=$?"; tail -30 $R/attn_anchor.log
