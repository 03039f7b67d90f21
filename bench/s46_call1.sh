# The forty-sixth session's first call (bench/NOTES.md). .carry/s46a: mvllm.xz and test_cuda.xz
# (the one-row RMSNorm folded into the GEMV that reads it: QxNormSource, gemv.cuh; the SwiGLU
# GEMV writing its output's QX), lib.txz; the shipped model travels.
# 1. test_cuda, all of it. 2. Batch-1 decode after 128 tokens, the same binary as main (both off:
# MVLLM_NORM_FOLD=0 MVLLM_SWIGLU_QX=0), the fold alone, both (default), and both with the fold at
# any grid (MVLLM_NORM_FOLD=2), two rounds, on both q4_0 files; the 0.5B Q4_K_M off / default.
. bench/s40_common.sh
s40_setup .carry/s46a
s40_tests
q4_models
for round in 1 2; do
  for m in $M5 $M7; do
    n=$(basename $m .gguf)
    dec off_${n}_$round bin/mvllm $m 128 MVLLM_NORM_FOLD=0 MVLLM_SWIGLU_QX=0
    dec fold_${n}_$round bin/mvllm $m 128 MVLLM_SWIGLU_QX=0
    dec both_${n}_$round bin/mvllm $m 128
    dec both2_${n}_$round bin/mvllm $m 128 MVLLM_NORM_FOLD=2
  done
done
K=/tmp/mvllm-models/qwen2.5-0.5b-q4_k_m.gguf
timeout 100 bin/mvllm make-model $K --preset qwen2.5-0.5b --type q4_k_m > /dev/null 2>&1; echo "model q4_k_m rc=$?"
dec km_off bin/mvllm $K 128 MVLLM_NORM_FOLD=0 MVLLM_SWIGLU_QX=0; dec km_both bin/mvllm $K 128
