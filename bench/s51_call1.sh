# The fifty-first session's first call (bench/NOTES.md): the one-column SwiGLU GEMV that writes its
# output's QX (16-warp CTAs of whole 32-row blocks; MVLLM_SWIGLU_QX=0 is the old quantiser node).
# .carry/s51a (git-ignored): mvllm.xz and test_cuda.xz stripped from the build of this tree, lib.txz
# (the runtime libraries, as .carry/s48b).
# 1. test_cuda in full. 2. Batch-1 decode, F16 KV: the 0.5B q4_0 after 128 (two rounds, A/B
#    interleaved) and 4K; the 0.5B Q4_K_M after 128 (its gate/up is Q4_0: 896-long rows); the 7B
#    q4_0 after 128 with the default rule (off: 592 CTAs do not fit one wave), forced on (=2), off.
. bench/s40_common.sh
C=${C:-.carry/s51a}
s40_setup $C
s40_tests
q4_models
ab05 qx off MVLLM_SWIGLU_QX=0
K5=/tmp/mvllm-models/qwen2.5-0.5b-q4_k_m.gguf
timeout 100 bin/mvllm make-model $K5 --preset qwen2.5-0.5b --type q4_k_m > /dev/null 2>&1
for round in 1 2; do
  dec qx_k5_128_$round bin/mvllm $K5 128
  dec off_k5_128_$round bin/mvllm $K5 128 MVLLM_SWIGLU_QX=0
done
for round in 1 2; do
  dec def_7_128_$round bin/mvllm $M7 128
  dec on_7_128_$round bin/mvllm $M7 128 MVLLM_SWIGLU_QX=2
  dec off_7_128_$round bin/mvllm $M7 128 MVLLM_SWIGLU_QX=0
done
