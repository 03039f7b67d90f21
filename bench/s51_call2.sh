# The fifty-first session's second call (bench/NOTES.md): the one-row attention plan at the 256
# bucket without the cluster merge. Env switches only (no new code): MVLLM_ATTN_SPLITS=n (n splits,
# no clusters) and MVLLM_ATTN_WARPS=4|8. .carry/s51b (git-ignored): mvllm.xz stripped from main's
# build (164b4f9: main's code as bb32000), lib.txz as .carry/s51a.
# 1. B1 quick rows (F16, 128 / 256 tokens) per plan. 2. Batch-1 decode after 128 tokens (contexts
#    129-255, the 256 bucket), F16 KV, two rounds interleaved: the 0.5B q4_0 with its default plan
#    (4 splits of 64 tokens, 4 warps, a cluster of 4), one split with 4 or 8 warps, two splits with
#    4 warps (merged in global memory); the 7B q4_0 with its default (one split, 8 warps) and one
#    split with 4 warps.
. bench/s40_common.sh
C=${C:-.carry/s51b}
s40_setup $C
export QUICK_CONTEXTS=128,256 QUICK_KV="f16"
quick_rows b1_def bin/mvllm
quick_rows b1_s1w4 bin/mvllm MVLLM_ATTN_SPLITS=1 MVLLM_ATTN_WARPS=4
quick_rows b1_s1w8 bin/mvllm MVLLM_ATTN_SPLITS=1 MVLLM_ATTN_WARPS=8
quick_rows b1_s2w4 bin/mvllm MVLLM_ATTN_SPLITS=2 MVLLM_ATTN_WARPS=4
q4_models
for round in 1 2; do
  dec def_05_128_$round bin/mvllm $M5 128
  dec s1w4_05_128_$round bin/mvllm $M5 128 MVLLM_ATTN_SPLITS=1 MVLLM_ATTN_WARPS=4
  dec s1w8_05_128_$round bin/mvllm $M5 128 MVLLM_ATTN_SPLITS=1 MVLLM_ATTN_WARPS=8
  dec s2w4_05_128_$round bin/mvllm $M5 128 MVLLM_ATTN_SPLITS=2 MVLLM_ATTN_WARPS=4
done
for round in 1 2; do
  dec def_7_128_$round bin/mvllm $M7 128
  dec s1w4_7_128_$round bin/mvllm $M7 128 MVLLM_ATTN_SPLITS=1 MVLLM_ATTN_WARPS=4
done
