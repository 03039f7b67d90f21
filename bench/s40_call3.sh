# The fortieth session's third call (bench/NOTES.md): the F32 fused kernel rewritten (4 dims a lane,
# the G heads' dots reduced by a reduce-scatter, one online-softmax update per tile of 4 row steps,
# 3-stage copy pipeline, 4 CTAs an SM) and the split merge over chunks of splits with independent
# loads; binaries in .carry/s40c, call 2's (.carry/s40b) as "old".
# 1. test_cuda. 2. B1 --quick (fused rows at 4K / 32K, batch 1 and 16), new then old.
# 3. the F32 rows over more contexts (new), and with MVLLM_ATTN_F32_MIN_SPLIT=128 / 256.
# 4. ncu of the new F32 kernel at 4K and 32K (stall samples per SASS instruction) and the
#    durations of the kernel and its merge at 4K.
. bench/s40_common.sh
s40_setup ${S40_NEW:-.carry/s40c} .carry/s40b/mvllm.xz
s40_tests
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
for ctx in 4096 32768; do s40_ncu_f32 $ctx; done
s40_ncu_times
