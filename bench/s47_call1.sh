# The forty-seventh session's first call (bench/NOTES.md): session 46's planned call 2 plus the
# attention's phase timeline after 128 tokens. .carry/s47a: mvllm-v2.xz (branch
# norm-fold-v2: the one-row RMSNorm folded into its GEMV, second form), mvllm-atl.xz (651d177 built
# with -DMVLLM_ATTN_TIMELINE=ON; main's kernels are unchanged since), lib.txz; the shipped model travels.
# (test_cuda-v2.xz stayed behind: with it the carry passed 64 MiB; v2 is validated only if it wins.)
# 1. Batch-1 decode after 128 tokens, the 0.5B and 7B q4_0 files: v2
# with the fold off (MVLLM_NORM_FOLD=0: main's kernels), on, and on with every kernel preferring one
# carveout (MVLLM_CUDA_CARVEOUT=8; the 0.5B only); two rounds for the 0.5B.
# 2. The decode attention's phases after 128 tokens (0.5B; default and MVLLM_ATTN_WARPS=4).
. bench/s40_common.sh
s40_setup .carry/s47a
xz -dc .carry/s47a/mvllm-v2.xz > bin/mvllm && chmod +x bin/mvllm
xz -dc .carry/s47a/mvllm-atl.xz > bin/mvllm-atl && chmod +x bin/mvllm-atl
q4_models
for round in 1 2; do
  for m in $M5 $M7; do
    n=$(basename $m .gguf)
    [ $m = $M7 ] && [ $round = 2 ] && continue
    dec v2off_${n}_$round bin/mvllm $m 128 MVLLM_NORM_FOLD=0
    dec v2fold_${n}_$round bin/mvllm $m 128
    [ $m = $M5 ] && dec v2cv8_${n}_$round bin/mvllm $m 128 MVLLM_CUDA_CARVEOUT=8
    [ $m = $M5 ] && dec v2offcv8_${n}_$round bin/mvllm $m 128 MVLLM_NORM_FOLD=0 MVLLM_CUDA_CARVEOUT=8
  done
done
atl05 128 def 40
atl05 128 w4 40 MVLLM_ATTN_WARPS=4
