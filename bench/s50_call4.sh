# The fiftieth session's fourth call (bench/NOTES.md): branch norm-tail (its change also in
# bench/s50_norm_tail.patch): a one-row Q4_0 O / down projection runs the next RMSNorm and its QX in
# its last CTA. .carry/s50c (git-ignored): mvllm.xz and test_cuda.xz stripped from the branch's
# build, lib.txz as .carry/s48b. Move bench/results and the draft model out of the tree first.
# 1. test_cuda in full (CudaOps.NormTailGivesTheBitsOfMatmulAddThenNorm; the golden and
#    batch-invariance tests run the decoder's new op order). 2. Batch-1 decode, tail on (default) /
#    MVLLM_CUDA_NORM_TAIL=0, interleaved: the 0.5B q4_0 after 128 (two rounds) and 4K, the 7B after
#    128 (two rounds) and 4K. 3. The 0.5B and 7B Q4_K_M after 128 (their O / down are not Q4_0:
#    the tail does not apply, so on = off).
. bench/s40_common.sh
C=${C:-.carry/s50c}
s40_setup $C
s40_tests
q4_models
S=MVLLM_CUDA_NORM_TAIL=0
ab05 tail plain $S
for pr in 128:1 128:2 4096:1; do
  p=${pr%:*} r=${pr#*:}
  dec tail_7_${p}_$r bin/mvllm $M7 $p
  dec plain_7_${p}_$r bin/mvllm $M7 $p $S
done
K5=/tmp/mvllm-models/qwen2.5-0.5b-q4_k_m.gguf
timeout 100 bin/mvllm make-model $K5 --preset qwen2.5-0.5b --type q4_k_m > /dev/null 2>&1
dec tail_k5_128 bin/mvllm $K5 128
dec plain_k5_128 bin/mvllm $K5 128 $S
