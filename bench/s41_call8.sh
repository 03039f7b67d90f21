# The forty-first session's eighth call (bench/NOTES.md): the F16 decode kernel's CTA shape with
# the existing switches (MVLLM_ATTN_WARPS, MVLLM_ATTN_SPLITS) on the final binary (.carry/s41f):
# does a plan that leaves an SM slot free for the next layer (4 warps, two CTAs an SM, about one
# layer's CTA per SM) let the next layer's early tile copies overlap this layer's tail? And the
# batch-invariance test with the shipped model in the copy (skipped in call 7).
. bench/s40_common.sh
s40_setup .carry/s41f
s40_tests 'CudaBatchInvariance.*'
export QUICK_CONTEXTS=1024,4096,32768 QUICK_KV='f16|bf16'
q() { local name=$1; shift; quick_rows $name bin/mvllm "$@"; }  # NAME [ENV...]
for round in 1 2; do
  q default_$round
  q w4_$round MVLLM_ATTN_WARPS=4
  q w4s32_$round MVLLM_ATTN_WARPS=4 MVLLM_ATTN_SPLITS=32
  q w4s16_$round MVLLM_ATTN_WARPS=4 MVLLM_ATTN_SPLITS=16
  q w8s16_$round MVLLM_ATTN_WARPS=8 MVLLM_ATTN_SPLITS=16
done
