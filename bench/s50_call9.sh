# The fiftieth session's ninth call (bench/NOTES.md): data for a warps rule by batch and context (no
# change tested). B1, fused kernel, F16, batches 2-64 at 512-4,096 tokens, the plan's warps as chosen,
# 4 and 8; main's final build (.carry/s50f).
. bench/s40_common.sh
C=${C:-.carry/s50f}
s40_setup $C
for w in 0 4 8; do
  env MVLLM_ATTN_WARPS=$w timeout 100 bin/mvllm bench attention --quick --contexts 512,1024,2048,4096 \
    --batches 2,4,8,16,32,64 --json-out $R/b1_warps$w.json > $R/b1_warps$w.log 2>&1
  echo "warps $w:"; grep -E "^qwen.* f16 " $R/b1_warps$w.log | awk -F'|' '{print $1 "|" $2}' | tr -s ' ' | paste - - - -
done
