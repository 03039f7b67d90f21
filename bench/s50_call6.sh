# The fiftieth session's sixth call (bench/NOTES.md): B1's batch-16 rows at short contexts, where
# the 7B's F16 rows at 256 and 512 tokens ran slower than torch's sdpa in call 3, under the decode
# plan's switches (environment only, main's binary: .carry/s50b). Fused kernel, contexts 128-1024,
# batch 16, both geometries; the F16 and BF16 rows printed.
. bench/s40_common.sh
C=${C:-.carry/s50b}
s40_setup $C
export QUICK_CONTEXTS=128,256,512,1024 QUICK_KV="f16|bf16"
b16() { local name=$1; shift; env "$@" timeout 100 bin/mvllm bench attention --quick --contexts $QUICK_CONTEXTS \
  --batches 16 --json-out $R/$name.json > $R/$name.log 2>&1
  echo "$name: $(grep -E "^qwen.* (${QUICK_KV}) " $R/$name.log | awk -F'|' '{print $1 "|" $2}' | tr '\n' ';' | tr -s ' ')"; }
b16 default
b16 warps4 MVLLM_ATTN_WARPS=4
b16 warps8 MVLLM_ATTN_WARPS=8
b16 splits1 MVLLM_ATTN_SPLITS=1
b16 splits2 MVLLM_ATTN_SPLITS=2
b16 splits4 MVLLM_ATTN_SPLITS=4
b16 cluster0 MVLLM_ATTN_CLUSTER=0
b16 cluster3 MVLLM_ATTN_CLUSTER=3
b16 default_again
